"""What another party's log says, judged here: steps 1 and 5 of `updates.apply_update`.

Scope: the files an update leaves out of the store (`left_out`: an artifact erased here before
that counts), and its revocations and erasures taken in, verified under this ledger's policy
(`judge`: an erasure that counts deletes this ledger's copy; what of this ledger's own is built
on what stopped). Split out of ``updates`` (twenty-ninth round, upd44: it was at its cap),
unchanged.

Non-scope: choosing what to take in, logging it (``updates``); key compromises
(``update_compromises``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Set
from dataclasses import replace
from typing import TYPE_CHECKING

from trajledger.verify.errors import ProvenanceError
from trajledger.verify.impact import impact
from trajledger.verify.kinds import KINDS
from trajledger.verify.lineage import LineageVerifier, Record
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.policy import TrustPolicy
from trajledger.verify.predicates import Erasure, Revocation

from .catalog import Origins, qualified_name
from .errors import LedgerError
from .evidence import ledger_evidence
from .status import delete_erased, erasable_blobs, files_here, held_elsewhere, label
from .update_changes import Changes
from .update_reads import Update

if TYPE_CHECKING:
    from .home import LedgerHome
    from .trust_state import TrustState

__all__ = ["judge", "left_out"]

_STOPS = ("revocation", "erasure")


def judge(ledger: LedgerHome, policy: TrustPolicy, foreign: Mapping[int, LogEntry],
          here: Mapping[int, int], changes: Changes, recorded: int, update: Update,
          state: TrustState | None = None) -> None:
    """Step 5 of `apply_update` (``recorded``: the import record's index; ``brought``: the
    objects the update stored): each revocation and erasure taken in, verified in this
    ledger under ``policy``; an erasure that counts deletes this ledger's copy of its
    subject's files; an erasure recorded here before deletes again the files of its subject
    the update brought back (`_erased_before`); then what of this ledger's own is built on
    what stopped, and what is built on the other log's stops of its own artifacts that do not
    count here (out36 finding 1: `Changes.lines` warns of them, with the ways on). ``state``:
    the ledger's `trust_state` asked since the update's last append (upd44: nothing here
    appends, so one state serves every step)."""
    brought, logs = set(update.objects), {update.vkey, *update.logs}
    evidence = ledger_evidence(ledger)
    state = state or ledger.trust_state()
    verifier = LineageVerifier(evidence, policy, index=state, data="size")
    stopped: dict[str, str] = {}
    origins = Origins(ledger)
    files: dict[str, set[str]] | None = None  # read at the first erasure that deletes here
    try:
        # Decided and deleted under the log's writer lock, as `status.erase` does: a record
        # of the same bytes is logged first (and holds them) or refused under the lock.
        with ledger.log.exclusive():
            for i, e in sorted(foreign.items()):
                if e.kind not in _STOPS:
                    continue
                rec = verifier.record(here[i])
                name = label(ledger, e.subject)
                facts = {"digest": e.subject, "label": name, "logIndex": i, "kind": e.kind}
                if isinstance(rec, Record):
                    pred = rec.predicate
                    assert isinstance(pred, Revocation | Erasure)
                    facts |= {"reason": pred.reason, "signer": ",".join(sorted(rec.signers))}
                    if isinstance(pred, Erasure):
                        mine = erasable_blobs(ledger, e.subject).intersection(pred.blobs)
                        if files is None and mine:
                            files = files_here(ledger)
                        kept = held_elsewhere(ledger, verifier, mine, e.subject, files or {})
                        gone = mine.difference(kept)
                        told = (f"the import is recorded (log index {recorded}) and {{}} of "
                                f"the {len(gone)} blob(s) its erasure of {name} deletes here "
                                "are deleted, nothing more")
                        facts["deleted"] = delete_erased(ledger, gone, done=told.format,
                                                         recorded=True)
                        facts["kept"] = sorted(set(kept.values()))
                        facts["keptBlobs"] = len(kept)
                        changes.erased.append(facts)
                    else:  # one revoked here already (hist38's Left): said so, by whom
                        first = next((was for j in state.about(e.subject)
                                      if j < here[i] and j not in here.values()
                                      and isinstance(was := verifier.record(j), Record)
                                      and was.entry.kind == "revocation"), None)
                        changes.revoked.append(facts | ({} if first is None else {"already": {
                            "signer": ",".join(sorted(first.signers)), "logIndex": first.index}}))
                    stopped[e.subject] = name
                elif rec.damaged:
                    changes.unreadable.append(facts)
                    stopped[e.subject] = name
                else:
                    # the other log's own artifact: this ledger got it from that log first
                    # (a log that relayed it here later does not own it: rev34 finding 2)
                    own = any(KINDS[x.kind].lineage and origins.first(j) in logs
                              for j in state.about(e.subject) if (x := state.entry(j)))
                    changes.ignored.append(facts | {"why": rec.message, "own": own,
                                                    "affects": [], "affectsLabels": []})
            _erased_before(ledger, verifier, brought, set(here.values()), changes, recorded,
                           state)
        for c in changes.compromised:
            stopped.update({d: label(ledger, d) for d in c["revokedHere"]})
        for r in changes.ignored:
            if r.get("own") and verifier.primary_kind(r["digest"]) is not None:
                built = sorted((n.id, n.label) for n in impact(verifier, r["digest"])
                               .nodes.values() if n.kind in ("dataset", "checkpoint")
                               and n.id != r["digest"] and n.index is not None
                               and not origins.of(n.index))
                r["affects"], r["affectsLabels"] = [d for d, _ in built], [x for _, x in built]
        for digest, because in stopped.items():
            if verifier.primary_kind(digest) is None:
                continue
            for node in impact(verifier, digest).nodes.values():  # imported ones too (left38)
                if (node.kind in ("dataset", "checkpoint") and node.id not in stopped
                        and node.index is not None
                        and not any(a["digest"] == node.id for a in changes.affected)):
                    # an imported one by the name that finds it here (qualified when the plain
                    # name is yours), not the one a clash gave to yours (out48); from the state
                    # at hand (no sync a node)
                    named = node.label if not node.version else replace(node, name=qualified_name(
                        ledger, node.index, node.kind, node.name, node.version, node.id, state
                    ).rpartition("@")[0]).label
                    changes.affected.append({"digest": node.id, "label": named,
                                             "becauseDigest": digest, "because": because})
    finally:
        verifier.close()


def _erased_before(ledger: LedgerHome, verifier: LineageVerifier, brought: set[str],
                   taken: set[int], changes: Changes, recorded: int, state: TrustState) -> None:
    """Part of step 5 (under the log's lock): the files of an artifact erased here before
    (`_erased_here`) that the update stored again are deleted again, as `status.erase` run
    again would: an import never brings back erased bytes (hist28)."""
    found = _erased_here(ledger, brought, taken, ledger.store.exists, state)
    for i, subject, gone in _still_erased(ledger, verifier, found, set()):
        name = label(ledger, subject)
        told = (f"the import is recorded (log index {recorded}) and {{}} of the {len(gone)} "
                f"erased file(s) of {name} it brought back are deleted again, nothing more")
        changes.deleted_again.append({"digest": subject, "label": name, "logIndex": i,
                                      "deleted": delete_erased(ledger, gone, done=told.format)})


def _erased_here(ledger: LedgerHome, carried: Set[str], taken: Collection[int] = (),
                 present: Callable[[str], bool] = bool, state: TrustState | None = None
                 ) -> dict[int, tuple[str, set[str]]]:
    """The erasures logged here before this update (this ledger's own, or taken in earlier;
    not those of ``taken``) of an artifact whose files the update carries again (the same
    bundle imported again, a dataset of the erased batch shipped anew): log index -> (its
    subject, its files in ``carried`` that are ``present``, all by default). Only an erasure
    whose subject's manifest the update carries is read (a bundle carries it with the files)."""
    state = state or ledger.trust_state()
    found = {i: (e.subject, {b for b in erasable_blobs(ledger, e.subject) & carried
                             if present(b)})
             for i in state.of_kind("erasure") if i not in taken
             and (e := state.entry(i)) is not None and e.subject in carried}
    return {i: (subject, back) for i, (subject, back) in found.items() if back}


def _still_erased(ledger: LedgerHome, verifier: LineageVerifier,
                  found: Mapping[int, tuple[str, set[str]]], keep: set[str]
                  ) -> Iterator[tuple[int, str, set[str]]]:
    """Of ``found`` (`_erased_here`), each erasure that counts: (its index, its subject, the
    files it erased, not in ``keep``, not yielded before, that no other artifact here not
    erased lists: `status.held_elsewhere`, as at the erasure)."""
    files: dict[str, set[str]] | None = None
    said: set[str] = set()
    for i, (subject, back) in sorted(found.items()):
        rec = verifier.record(i)
        if not isinstance(rec, Record) or not isinstance(rec.predicate, Erasure):
            continue
        back = back.intersection(rec.predicate.blobs) - keep - said
        if back and files is None:
            files = files_here(ledger)
        if gone := back.difference(held_elsewhere(ledger, verifier, back, subject, files or {})):
            said |= gone
            yield i, subject, gone


def left_out(ledger: LedgerHome, policy: TrustPolicy, update: Update, changes: Changes,
             state: TrustState | None = None, known: Collection[str] = ()) -> set[str]:
    """Step 1's objects not stored: the files of an artifact erased here before that counts
    (`_erased_here`, `_still_erased`). An import never stores erased bytes, even for a
    moment (left29: `_erased_before` deleted them after the log commit, so an import stopped
    between left them in the store). Kept too: a blob a lineage record the update brings
    lists (read from the update's objects). Erasures the update itself brings are judged in
    step 5 (`judge`). ``known``: objects the update carries that are not among its objects
    (the store holds them: an erased artifact's manifest, which a ``--no-data`` import
    stored, still leaves its files out: upd45)."""
    found = _erased_here(ledger, {*update.objects, *known}, state=state)
    if not found:
        return set()

    def read(d: str) -> bytes | None:
        obj = update.objects.get(d)
        if obj is None:
            return ledger.store.get_verified(d) if ledger.store.exists(d) else None
        return obj if isinstance(obj, bytes) else obj.path.read_bytes()

    listed: set[str] = set()  # the files of the lineage records the update brings
    for i in update.taken:
        e = LogEntry.from_bytes(update.entries[i])
        if KINDS[e.kind].lineage and all(e.subject != s for s, _b in found.values()):
            try:
                listed |= erasable_blobs(ledger, e.subject, (e.kind, e.envelope), read)
            except (ProvenanceError, LedgerError, OSError):
                return set()  # unknown: stored, judged after the commit (`_erased_before`)
    skip: set[str] = set()
    evidence = ledger_evidence(ledger)
    verifier = LineageVerifier(evidence, policy, index=state or ledger.trust_state(),
                               data="size")
    try:
        for i, subject, gone in _still_erased(ledger, verifier, found, listed):
            skip |= gone
            changes.left_out.append({"digest": subject, "label": label(ledger, subject),
                                     "logIndex": i, "leftOut": len(gone)})
    finally:
        verifier.close()
    return skip
