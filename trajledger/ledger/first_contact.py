"""A foreign log met for the first time by an update: from which size its entries are examined.

Scope: the size applied of a log (`updates.origin_state`) is None until an import or a monitor of
that log applied it. "None" used to mean "nothing here is about that log", which is false for a
third party: a buyer holds a vendor's records that a lab's bundle brought (the lab's log holds
them), not the vendor's log. Met first by the vendor's update bundle exported since a size above
the vendor's revocation of them, or by ``monitor`` of the vendor's log (which remembered the
checkpoint and applied nothing), the revocation was never examined, and every later update
started after it (docs/SECURITY.md, twenty-second round, out37 finding 1). So, for a ledger that
holds records another log brought (it has import records):

- `unexamined`: an update bundle of a log never applied here whose extension starts above 0 is
  refused (`exchange`), asking for one exported with ``--updates-since 0``;
- `first_start`: ``monitor`` of such a log examines it from its first entry (`monitor.
  watch_updates`); when no entry is about what the ledger holds, it applies nothing, as before;
- `unseen`: a full bundle (``export REF``) met first carries its subject's lineage with the
  revocations its exporter found, not the entries before its checkpoint (docs/third-party.md,
  "What a bundle cannot tell you"); records held here that other logs brought, signed by its
  keys, which it does not carry, are named, and the size applied is left unset (it hid their
  revocation from every later update and monitor: twenty-third round, left38 finding 1);
- `rotated_from`: the keys a log rotated from, whose records are its own too (`monitor`).

A ledger that imported nothing holds nothing of another party's: unchanged (a first bundle sets
the size applied to its checkpoint's, as before).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .home import LedgerHome

__all__ = ["applied_across", "first_start", "rotated_from", "unexamined", "unseen"]


def _brought(ledger: LedgerHome) -> bool:
    """Whether the ledger holds records another log brought (an import record is logged)."""
    return bool(ledger.trust_state().of_kind("import"))


def applied_across(ledger: LedgerHome, vkey: str, applied: int | None,
                   handovers: Sequence[bytes]) -> int | None:
    """``applied``, the size applied of the log ``vkey``; when none, that of a key whose
    ``handovers`` (verified) lead to ``vkey``: the log before its key rotated (a state is kept
    per key, and the new key's started with no size applied, so an update after a rotation
    could start anywhere)."""
    if applied is not None or not handovers:
        return applied
    from trajledger.verify.errors import ProvenanceError
    from trajledger.verify.log_key import key_chain, parse_handover

    from .updates import origin_state

    sizes = []
    for old in sorted({parse_handover(h).old for h in handovers} - {vkey}):
        try:
            if vkey not in [h.new for h in key_chain(old, handovers)]:
                continue
        except ProvenanceError:
            continue
        if (size := origin_state(ledger, old).applied()) is not None:
            sizes.append(size)
    return max(sizes, default=None)


def first_start(ledger: LedgerHome, applied: int | None) -> int | None:
    """The size from which a monitor examines a log: ``applied``; for a log never applied, 0
    when the ledger holds records another log brought, else None (nothing to examine)."""
    if applied is not None:
        return applied
    return 0 if _brought(ledger) else None


def unexamined(ledger: LedgerHome, applied: int | None, start: int | None) -> str | None:
    """Why an update bundle whose extension starts at ``start`` cannot be applied to a log
    never applied here (``applied`` None), or None when it can."""
    if applied is not None or not start or not _brought(ledger):
        return None
    return (f"unprovable: you have applied nothing of this log, and you hold records that other "
            f"logs brought you: what its entries before size {start} (where the bundle's "
            "extension starts) say about them, a revocation or an erasure, would never be "
            "seen: ask for a bundle exported with --updates-since 0")


def rotated_from(ledger: LedgerHome, vkey: str,
                 handovers: Callable[[], Sequence[bytes]]) -> frozenset[str]:
    """The keys the log ``vkey`` rotated from (its ``handovers`` that lead to ``vkey``,
    `verify.log_key.predecessors`, as an import takes them: rev34 finding 1): what it brought
    here under them is its own too (`updates.Update.logs`). Read only for a ledger that holds
    records another log brought (nothing else could be the log's own): ``monitor`` passed the
    served key alone, so after a rotation what the vendor brought under its old key was
    another log's (docs/SECURITY.md, twenty-third round, left38 finding 2)."""
    if not _brought(ledger):
        return frozenset()
    from trajledger.verify.log_key import predecessors

    return frozenset(predecessors([vkey], handovers()))


def unseen(ledger: LedgerHome, applied: int | None, start: int | None, logs: Collection[str],
           entries: Mapping[int, bytes]) -> dict[str, str]:
    """For a full bundle (no extension: ``start`` None) of a log never applied here
    (``applied`` None) whose ``entries`` are about to be taken in: the records this ledger holds
    that other logs brought (not the log of ``logs``), signed by a key that signed one of the
    bundle's records, which the bundle does not carry, ``digest -> label``. What the log said of
    them before the bundle's checkpoint (a revocation, an erasure) cannot be seen from it: an
    import that marked the log applied up to there hid it from every later update and monitor
    (`exchange` then leaves the size applied unset)."""
    if applied is not None or start is not None or not _brought(ledger):
        return {}
    from trajledger.verify.kinds import KINDS
    from trajledger.verify.log_entry import LogEntry

    from .catalog import Origins
    from .updates import label

    carried = [LogEntry.from_bytes(raw) for raw in entries.values()]
    keys = {k for e in carried if KINDS[e.kind].lineage for k in e.signers}
    envelopes = {e.envelope for e in carried}
    state, origins = ledger.trust_state(), Origins(ledger)
    out: dict[str, str] = {}
    for kind in sorted(k for k, v in KINDS.items() if v.lineage):
        for i in state.of_kind(kind):
            e = state.entry(i)
            if (e is None or e.envelope in envelopes or e.subject in out
                    or not keys.intersection(e.signers)):
                continue
            if (came := origins.of(i)) and not came <= set(logs):
                out[e.subject] = label(ledger, e.subject)
    return out
