"""Held-out dataset records that are intact but that the policy does not trust: still holdouts
(fail closed).

Scope: a dataset record included under the verified checkpoint, its envelope hashing to its
entry, whose signatures do not count under the policy (its signer's key declared compromised
at or before its log index, by the policy's own ``[[revoked_keys]]``; a key the policy does not
hold, or not in the producer role; a predicate type the policy does not allow) says what it
says, only no one the policy trusts said it. `distrusted_holdout` reads what such a record
declares without trusting its signer; `held_out_line` is the ``not held out`` failure of a use
of a batch it holds out (`verify.judge.held_out`); the gate compares copies of its batches
(``runner.admission``) as a trusted holdout's.

Why fail closed (SECURITY.md, twentieth round, hold35): a holdout only ever refuses training, so
taking one no one trusts for a holdout costs availability (the batches it names, and exact
copies of their episodes), while ignoring it lets through what may be a test set; a damaged
record fails closed already, and so does a sealed held-out batch whose record is not trusted.
Only the owner of a log the policy trusts appends to it (an import verifies what it brings under
the importer's policy), so no stranger can place one. The approvers' way on: a train set without
those batches; an approver's erasure of a held-out batch ends the comparison with copies of it.
Loaded only when such a record lists a batch a use names, or by the gate.
Non-scope: verifying records (``verify.judge``), the damaged ones (``verify.judge.held_out``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .errors import ProvenanceError
from .log_index import read_record
from .nodes import NAMED
from .predicates import HELD_OUT, Dataset
from .report import short

if TYPE_CHECKING:
    from .evidence import Evidence
    from .judge import RecordFailure
    from .log_entry import LogEntry

__all__ = ["Walk", "distrusted_holdout", "held_out_line"]


class Walk(Protocol):
    """Where a record is read from: a `verify.lineage.LineageVerifier`, which stands above this
    module and loads it for such a record."""

    evidence: Evidence

    def entry(self, index: int) -> LogEntry | None: ...


def distrusted_holdout(walk: Walk, index: int) -> Dataset | None:
    """The holdout or regression dataset that the record at ``index`` declares, read without
    trusting its signatures (the caller found it intact but not trusted: its bytes are its
    entry's, included under the checkpoint); None when it is no held-out dataset. One whose
    statement does not parse is the index's ``unreadable`` (a use fails on it already)."""
    entry = walk.entry(index)
    if entry is None or entry.kind != "dataset":
        return None
    try:
        _statement, ds = read_record(entry, walk.evidence.blob(entry.envelope),
                                     f"log entry {index}")
    except ProvenanceError:
        return None
    return ds if isinstance(ds, Dataset) and ds.split in HELD_OUT else None


def held_out_line(walk: Walk, index: int, batch: str, failure: RecordFailure) -> str | None:
    """Why ``batch`` is held out by the dataset record at ``index``, intact but not trusted by
    the policy (``failure`` says why not); None when that record holds no such batch out."""
    ds = distrusted_holdout(walk, index)
    if ds is None or batch not in ds.batches:
        return None
    name = f"{ds.name}@{ds.version}".translate(NAMED)  # a signed name, as labels are (left37)
    return (f"rollout-batch {short(batch)} is in {ds.split} dataset {name} (log "
            f"index {index}), whose record the policy does not trust ({failure.message}): held "
            "out all the same (fail closed: what no one trusted declared held out may be a test "
            "set); train on a dataset without this batch")
