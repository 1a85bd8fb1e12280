"""An update bundle's extension (``bundle.json`` format 4): what its records say.

Scope: `check_extension`, step 5 of ``verify.bundle.verify_bundle`` for an update bundle.
Loaded only for one: a bundle of a lineage never needs it.
Non-scope: reading the members and proving the extension's entries by the root they rebuild
(``verify.bundle``, ``verify.compact``), applying an update (``ledger.updates``).
Spec: schemas/bundle.v1.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .judge import Record
from .log_entry import LogEntry
from .report import INFO, OK, Node

if TYPE_CHECKING:
    from .bundle import BundleEvidence
    from .lineage import LineageVerifier

__all__ = ["check_extension"]


def check_extension(evidence: BundleEvidence, verifier: LineageVerifier, bundle: Node) -> None:
    """Step 5 of `verify_bundle`, for an update bundle: the extension's entries were proven by
    the root they rebuild (the log's check); each one whose envelope the bundle carries (what
    the log publishes: revocations, erasures, policies) is verified as a record, and what it
    says is listed. The others are other parties' records: hashed, not shown."""
    ext = evidence.extension()
    cp = verifier.checkpoint
    if ext is None or cp is None or not verifier.log.ok:
        return
    evidence.touched_entries.update(range(ext.size, cp.size))
    shown = 0
    for i in range(ext.size, cp.size):
        entry = LogEntry.from_bytes(evidence.entry_bytes(i) or b"")
        if entry.kind == "trust-policy" or entry.envelope not in evidence.objects:
            continue
        shown += 1
        rec = verifier.record(i)
        about = f"about {entry.subject[:19]}…"
        if isinstance(rec, Record):
            reason = getattr(rec.predicate, "reason", None)
            bundle.add(f"{entry.kind} record {i}", INFO, f"{about}: verified"
                       + (f": {reason}" if reason else ""))
        else:
            bundle.add(f"{entry.kind} record {i}", INFO, f"{about}: ignored: {rec.message}")
    bundle.add("extension", OK, f"entries {ext.size}..{cp.size - 1} of the log rebuild its "
               f"root from the tree of size {ext.size}; {shown} with their records")
