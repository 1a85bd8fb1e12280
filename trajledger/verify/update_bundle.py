"""An update bundle's extension (``bundle.json`` format 4): what its records say.

Scope: `extension_start`, where an update bundle's extension starts (``proofs/<n>.range``,
checked when the bundle is opened), `extension_root` and `extension_inclusion`, the roots and
inclusion proofs its entries give, and `check_extension`, step 5 of
``verify.bundle.verify_bundle`` for an update bundle. Loaded only for one: a bundle of a
lineage never needs it.
Non-scope: reading the members and proving the extension's entries by the root they rebuild
(``verify.bundle``, ``verify.compact``), applying an update (``ledger.updates``).
Spec: schemas/bundle.v1.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .bundle_index import INDEX_NAME
from .compact import CompactRange
from .consistency import parse_consistency_proof
from .errors import FormatError
from .judge import Record
from .log_entry import LogEntry
from .merkle import leaf_hash
from .report import INFO, OK, Node

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path

    from .checkpoint import Checkpoint
    from .lineage import LineageVerifier

__all__ = ["ExtensionEvidence", "check_extension", "extension_inclusion", "extension_root",
           "extension_start"]


class ExtensionEvidence(Protocol):
    """What an extension is read from: a `verify.bundle.BundleEvidence`, which stands above
    this module and loads it for an update bundle."""

    checkpoint: Checkpoint
    touched_entries: set[int]

    @property
    def objects(self) -> Mapping[str, Path]: ...

    def extension(self) -> CompactRange | None: ...

    def entries(self) -> Iterator[tuple[int, bytes]]: ...

    def entry_bytes(self, index: int) -> bytes | None: ...


def extension_start(ext: int, ranges: dict[int, bytes], size: int, what: str) -> CompactRange:
    """The compact range an update bundle's extension starts from (none from size 0).

    Args:
        ext: ``bundle.json``'s extension, the tree size the extension starts from.
        ranges: the ``proofs/<n>.range`` members by ``n`` (the index allows only ``n = ext``).
        size: the bundled checkpoint's tree size.
        what: the bundle, for messages.

    Raises:
        FormatError: the range is missing (or given from size 0), the checkpoint is smaller
            than the extension's start, or the range does not parse.
    """
    if ext > size or bool(ext) != bool(ranges):
        raise FormatError(f"{what}: {INDEX_NAME}: an extension from size {ext} needs "
                          f"proofs/{ext}.range (none from 0) and a checkpoint of at least "
                          f"that size (it has {size})")
    here = f"{what}: member proofs/{ext}.range"
    return CompactRange(ext, tuple(parse_consistency_proof(ranges[ext], here) if ext else ()))


def extension_root(evidence: ExtensionEvidence, size: int) -> bytes | None:
    """The root of the log's first ``size`` entries, rebuilt from the extension (checked
    against the checkpoint when the bundle was opened); None when the extension does not
    cover ``size``."""
    ext = evidence.extension()
    if ext is None or not ext.size <= size <= evidence.checkpoint.size:
        return None
    return ext.extend(_leaves(evidence, ext.size, size)).root()


def extension_inclusion(evidence: ExtensionEvidence, index: int) -> list[bytes]:
    """The proof of inclusion of entry ``index`` of the extension at the checkpoint's size,
    from the compact range it starts from and its entries (the bundle holds them all)."""
    ext = evidence.extension()
    assert ext is not None and ext.size <= index < evidence.checkpoint.size
    evidence.touched_entries.add(index)
    return ext.inclusion_proof(_leaves(evidence, ext.size, evidence.checkpoint.size), index)


def _leaves(evidence: ExtensionEvidence, start: int, end: int) -> list[bytes]:
    """The leaf hashes of the bundled entries ``start`` to ``end - 1`` (all of them are
    bundled from the extension's start on)."""
    return [leaf_hash(data) for i, data in evidence.entries() if start <= i < end]


def check_extension(evidence: ExtensionEvidence, verifier: LineageVerifier, bundle: Node) -> None:
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
        else:  # not "ignored": an import into a ledger that holds its subject judges it (aud34)
            bundle.add(f"{entry.kind} record {i}", INFO,
                       f"{about}: not judged by this bundle alone: {rec.message}")
    bundle.add("extension", OK, f"entries {ext.size}..{cp.size - 1} of the log rebuild its "
               f"root from the tree of size {ext.size}; {shown} with their records")
