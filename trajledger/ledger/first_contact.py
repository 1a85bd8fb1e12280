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
- `rotated_from`: the keys a log rotated from, whose records are its own too (`monitor`);
- `applied_across`: after a rotation, the new key's read starts where an old key's stopped (its
  mark too), when the tree checked under the old key is proven a prefix of the new key's (an
  ``import``, a ``monitor``: twenty-fifth round, rot40);
- `brought`: a record that another log brings after a log was applied (or examined) here, signed
  by a key that signed an entry read of that log, is marked unread against it: the log's size
  applied counts as 0 (`applied_for`) until a monitor or an update reads it from its first entry
  (`saw`), so a revocation it logged before reaches the record (twenty-fourth round, gap39);
  `unread` names such records (``import``, ``monitor``, ``verify``).

A ledger that imported nothing holds nothing of another party's: unchanged (a first bundle sets
the size applied to its checkpoint's, as before).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trajledger.verify.checkpoint import Checkpoint
    from trajledger.verify.log_entry import LogEntry

    from .home import LedgerHome
    from .trust_state import TrustState
    from .update_changes import Changes

__all__ = ["applied_across", "applied_for", "applied_why", "brought", "first_start", "marked",
           "relayed", "rotated_from", "saw", "unexamined", "unread", "unread_after", "unseen"]

_SIGNERS, _OWN = "signers", "own"
# `updates.UNREAD` and `updates.mark_unread` are imported where used: `unread` (every `verify`
# and `lineage`) returns before them on a ledger that imported nothing, and `updates` with what
# it loads (the record writer, the update's judges) costs a command about 10 ms (walk50).
STOPS = ("revocation", "erasure")


def _brought(ledger: LedgerHome) -> bool:
    """Whether the ledger holds records another log brought (an import record is logged)."""
    return bool(ledger.trust_state().of_kind("import"))


def applied_across(ledger: LedgerHome, vkey: str, applied: int | None,
                   handovers: Sequence[bytes], now: Checkpoint,
                   proof: Callable[[int, int], Sequence[bytes]],
                   root_at: Callable[[int], bytes | None] | None = None,
                   why: list[str] | None = None) -> int | None:
    """``applied``, the size applied of the log ``vkey``; when none, the size applied under a
    key the log rotated from (a state is kept per key, and the new key's starts with none, so a
    monitor read the whole log again and reported what it took in as new: hist39 finding 6).

    Steps:
        1. The keys whose ``handovers`` (verified: both keys signed each) lead to ``vkey``
           (`verify.log_key.predecessors`, once: each note parsed and checked once).
        2. Of each, the size applied (`applied_for`: 0 while records wait to be read against
           it, which then counts for the log: the mark follows the handover) and the tree this
           user checked under it (its floor, at or above that size).
        3. That tree must be a prefix of ``now``, the log's checkpoint under ``vkey``: the
           extension's roots (``root_at``) or a consistency proof (``proof``). A key whose tree
           is not proven one carries nothing: what was examined under it may be another
           history (a thief of the old key signing a fork), and starting there would skip
           entries of the log ``vkey`` signs.

    Returns:
        The largest size so carried; 0 when a key of step 1 is marked (its `applied_why`
        appended to ``why``); None when none (the log is then read from its first entry,
        `first_start`)."""
    if applied is not None or not handovers:
        return applied
    from trajledger.verify.log_key import predecessors

    from .trust_state import one_spelling
    from .updates import imported_from, origin_state
    from .user_state import log_id, state_dir

    sizes, named = [], None
    # (1)
    for old in dict.fromkeys(predecessors([vkey], handovers)):
        # only keys this user holds a state of, or an import record names (a fresh state
        # directory): a served log's handovers to keys of its own make no state here
        if not (state_dir() / "logs" / log_id(one_spelling(old)) / "state.sqlite").is_file():
            named = imported_from(ledger) if named is None else named
            if old not in named and one_spelling(old) not in named:
                continue
        # (2)
        state = origin_state(ledger, old)
        try:
            size, tree = applied_for(state), state.floor_checkpoint()
            if size == 0 and why is not None:  # the line that asks for a read from 0 says
                why.append(applied_why(state))  # why, under the key it was applied (hist40)
        finally:
            state.close()
        if size == 0:
            return 0  # marked (fail closed: whatever its tree)
        # (3)
        if size is not None and tree is not None and tree.size >= size \
                and _prefix(tree, now, proof, root_at):
            sizes.append(size)
    return max(sizes, default=None)


def _prefix(tree: Checkpoint, now: Checkpoint, proof: Callable[[int, int], Sequence[bytes]],
            root_at: Callable[[int], bytes | None] | None) -> bool:
    """Whether ``tree`` (verified by its key) is a prefix of ``now`` (verified by another key of
    the same log): the same origin, and the extension's root at its size, or a consistency
    proof from it; False when neither proves it."""
    from trajledger.verify.consistency import check_consistent
    from trajledger.verify.errors import ProvenanceError

    if tree.origin != now.origin or tree.size > now.size:
        return False
    if tree.size == now.size:
        return tree.root == now.root
    if root_at is not None and (rebuilt := root_at(tree.size)) is not None:
        return rebuilt == tree.root
    try:
        check_consistent(tree, now, list(proof(tree.size, now.size)) if tree.size else [])
    except (FileNotFoundError, ProvenanceError):
        return False
    return True


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
           entries: Mapping[int, bytes], approvers: Collection[str] = (),
           envelope: Callable[[str], bytes | None] | None = None, importing: Collection[str] = ()
           ) -> dict[str, str]:
    """For a full bundle (no extension: ``start`` None) of a log never applied here
    (``applied`` None) whose ``entries`` are about to be taken in: the records this ledger holds
    that other logs brought (not the log of ``logs``), signed by a key that signed one of the
    bundle's records, which the bundle does not carry, ``digest -> label``. What the log said of
    them before the bundle's checkpoint (a revocation, an erasure) cannot be seen from it: an
    import that marked the log applied up to there hid it from every later update and monitor
    (`exchange` then leaves the size applied unset). A key of the bundle's records that is
    another log's own (`relayed`: that log applied here, and the key none of this log's own,
    those that signed its policies and import records) is not this log's: that log is where
    its records' revocations are read (rot40); unless a key of this log's own is one of
    ``approvers`` (this ledger's: it may revoke anything, the relayed records too), or its
    own keys are not known: then every key counts, as before (fail closed). A key that
    signed any of the bundle's entries and is one of ``approvers`` may have revoked any record
    (a producer revokes only what it produced): then every record other logs brought is named,
    whoever signed it (vend41: the lab's approver revoked a third vendor's batch); so too when
    a key the bundle's policies list (read from their ``envelope``s: the bundle's word, which
    only names more) is one of ``approvers`` and none of ``importing`` (this ledger's own: a
    vendor may list anyone's key), though no entry carried is signed by it (vend42: the lab's
    policies and imports signed by another key of its own, a batch bundle)."""
    if applied is not None or start is not None or not _brought(ledger):
        return {}
    from trajledger.verify.kinds import KINDS
    from trajledger.verify.log_entry import LogEntry

    from .catalog import Origins
    from .updates import NOT_TAKEN, label

    carried = [LogEntry.from_bytes(raw) for raw in entries.values()]
    signed = {k for e in carried if KINDS[e.kind].lineage for k in e.signers}
    anything = any(k in approvers for e in carried for k in e.signers) or not _listed(
        carried, envelope).isdisjoint(set(approvers).difference(importing))
    own = {k for e in carried if e.kind in NOT_TAKEN for k in e.signers}
    if own and not own.intersection(approvers):
        others = _others_own(logs)
        signed -= {k for k in signed - own if _signer_log(others, own, {k}) is not None}
    envelopes = {e.envelope for e in carried}
    state, origins = ledger.trust_state(), Origins(ledger)
    out: dict[str, str] = {}
    for kind in sorted(k for k, v in KINDS.items() if v.lineage):
        for i in state.of_kind(kind):
            e = state.entry(i)
            if (e is None or e.envelope in envelopes or e.subject in out
                    or not (anything or signed.intersection(e.signers))):
                continue
            if (came := origins.of(i)) and not came <= set(logs):
                out[e.subject] = label(ledger, e.subject)
    return out


def _listed(carried: Iterable[LogEntry], envelope: Callable[[str], bytes | None] | None
            ) -> set[str]:
    """The keys of every role of each trust policy among ``carried`` whose ``envelope`` reads
    (unverified: a key listed can only make `unseen` name more)."""
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.errors import ProvenanceError
    from trajledger.verify.policy import TrustPolicy
    from trajledger.verify.statement import Statement

    out: set[str] = set()
    for e in carried:
        if e.kind != "trust-policy" or envelope is None or (raw := envelope(e.envelope)) is None:
            continue
        try:
            policy = TrustPolicy.from_json(Statement.from_bytes(Envelope.from_bytes(
                raw).payload).predicate.get("policy"), "a policy the bundle carries")
        except ProvenanceError:
            continue
        out.update(k for r in ("producer", "approver", "trainer", "evaluator")
                   for k in policy.role(r).keyids)
    return out


def applied_for(state: TrustState) -> int | None:
    """The size applied of ``state``'s log (`TrustState.applied`): 0 while records other logs
    brought after it was applied wait to be read against it (`brought`)."""
    from .updates import UNREAD as _UNREAD

    applied = state.applied()
    return 0 if applied is not None and state.noted(_UNREAD) else applied


def applied_why(state: TrustState) -> str:
    """What `applied_for` of ``state`` is, for a line that asks for an update from there."""
    if applied_for(state) == state.applied():
        return "what you applied of it"
    return (f"where it must be read from again: records other logs brought you after you "
            f"applied it up to size {state.applied()} wait to be read against it")


def marked(vkeys: Iterable[str]) -> frozenset[str]:
    """The records marked unread (`brought`) against the log ``vkeys`` (its key, and those it
    rotated from) now: what a read from its first entry that begins now reads them against,
    and all that it may clear (`saw`)."""
    from .trust_state import TrustState
    from .updates import UNREAD as _UNREAD

    out: set[str] = set()
    for vkey in sorted(set(vkeys)):
        state = TrustState.open(vkey)
        try:
            out.update(json.loads(state.noted(_UNREAD) or b"{}"))
        finally:
            state.close()
    return frozenset(out)


def saw(vkeys: Iterable[str], signers: Iterable[str],
        start: int | None, read: Collection[str], own: Iterable[str] = ()) -> None:
    """After an update of the log ``vkeys`` (its key, and those it rotated from) was applied
    from ``start`` (None: a full bundle): the keys that signed the entries read are kept as
    its keys (added to those kept; not begun from a later start: they would be a part); read
    from its first entry (``start`` 0), what waited to be read against it when the read began
    (``read``: `marked` then) is read, and cleared; a record marked since (another process's
    import meanwhile, which this read may have passed over as about nothing held) stays marked
    (compare and clear, in one transaction: rot40; gap39 cleared the whole mark). ``own``,
    the keys that signed the entries only the log's owner logs (its policies, its import
    records, its refusals: `updates.NOT_TAKEN`), are kept as its own keys, from any part."""
    from .trust_state import TrustState
    from .updates import UNREAD as _UNREAD

    keys = set(signers)
    states = [TrustState.open(vkey) for vkey in sorted(set(vkeys))]
    try:
        # the keys kept under any key of the log (a read begun where its old key's stopped,
        # after a rotation: rot40) are the log's: they begin the set as a read from 0 would
        kept = [json.loads(k) for s in states if (k := s.noted(_SIGNERS)) is not None]
        if kept or start in (0, None):
            keys.update(*kept)
            for state in states:
                state.note(_SIGNERS, json.dumps(sorted(keys)).encode())
        if mine := _kept(states, _OWN) | set(own):
            for state in states:
                state.note(_OWN, json.dumps(sorted(mine)).encode())
        for state in states:
            if start == 0 and read and state.noted(_UNREAD):
                state.note(_UNREAD, functools.partial(_cleared, frozenset(read)))
    finally:
        for state in states:
            state.close()


def _kept(states: Iterable[TrustState], key: str) -> set[str]:
    """The keys kept as ``key`` under any of ``states`` (a log's keys)."""
    return {k for s in states if (v := s.noted(key)) is not None for k in json.loads(v)}


def _others_own(logs: Collection[str]) -> dict[str, set[str]]:
    """The own keys (`saw`) of every other log applied here than ``logs``, by origin (a log's
    keys before and after a rotation are one origin)."""
    from trajledger.verify.note import verifier_from_vkey

    out: dict[str, set[str]] = {}
    for state in _states():
        if state.vkey not in logs and state.applied() is not None:
            out.setdefault(verifier_from_vkey(state.vkey).name, set()).update(
                _kept([state], _OWN))
    return out


def _signer_log(others: Mapping[str, set[str]], own: set[str], signers: set[str]) -> str | None:
    """The origin of the one other log whose own keys hold every key of ``signers``, none of
    which is the relaying log's own (``own``, known); None when ambiguous (fail closed: the
    record is taken as the relaying log's)."""
    if not own or not signers or own & signers:
        return None
    found = [origin for origin, keys in others.items() if signers <= keys]
    return found[0] if len(found) == 1 else None


def relayed(changes: Changes, logs: Collection[str]) -> None:
    """Name the log a revocation or an erasure an update took in (``changes``) from the log
    ``logs`` is the record of, when that log relays it: signed by keys of another log applied
    here (its own keys: those that signed its policies and import records, `saw`) and by none
    of the relaying log's own (``signerLog``, its origin; `update_changes.Changes.lines`:
    ``revoked by VENDOR, relayed by LAB``). Left unnamed where ambiguous: the relaying log's
    own keys unknown or among the signers, no other log's or several (twenty-fifth round,
    rot40; left38's Left). Read after the import record: a state that cannot be read leaves
    every line as before and ``changes.unnamed`` says what is recorded and why (vend41: it
    ended the command, exit 3, as if nothing were imported; the naming is wording only).

    Raises:
        sqlite3.Error: not the disk's (a bug's SQL).
    """
    import sqlite3

    from .errors import LedgerError, after_update

    stops = [*changes.revoked, *changes.erased]
    if not stops:
        return
    try:
        own, others = _own_kept(logs), _others_own(logs)
    except (LedgerError, OSError, sqlite3.Error) as e:
        why = (f"the log that signed each stop it relays could not then be known (the lines "
               f"name {changes.origin}, which brought them)")
        what = f"updates from {changes.origin}"
        if (error := after_update(e, changes.logged or (-1,), what, why)) is e:
            raise  # a bug's SQL
        changes.unnamed = str(error) if changes.logged else f"{what}: {why}: {e}"
        return
    for r in stops:
        if (origin := _signer_log(others, own, set(r["signer"].split(",")))) is not None:
            r["signerLog"] = origin


def signer_log(logs: Collection[str], signers: Collection[str]) -> str | None:
    """The origin of the other log applied here whose own keys signed a stop the logs
    ``logs`` (one log's keys) brought here, as `relayed` names it at the import; None when
    ambiguous or when the state cannot be read (wording only: the stop counts either way).
    For `verify`'s and the gate's line of a revoked record (out57: it named the relay)."""
    import sqlite3

    from .errors import LedgerError

    try:
        return _signer_log(_others_own(logs), _own_kept(logs), set(signers))
    except (LedgerError, OSError, sqlite3.Error):
        return None


def _own_kept(logs: Collection[str]) -> set[str]:
    """The own keys (`saw`) kept under any of the keys ``logs`` of one log."""
    from .trust_state import TrustState

    states = [TrustState.open(vkey) for vkey in sorted(set(logs))]
    try:
        return _kept(states, _OWN)
    finally:
        for state in states:
            state.close()


def _cleared(read: frozenset[str], kept: bytes | None) -> bytes | None:
    """The mark ``kept`` without the records ``read``; None when none is left."""
    left = {d: x for d, x in json.loads(kept or b"{}").items() if d not in read}
    return json.dumps(left, sort_keys=True).encode() if left else None


def _states() -> Iterator[TrustState]:
    """The user's states of the logs it saw (each closed after its turn)."""
    from trajledger.verify.errors import ProvenanceError

    from .trust_state import TrustState
    from .user_state import read_state_file, state_dir

    root = state_dir() / "origins"
    try:
        marks = sorted(p for d in root.iterdir() if d.is_dir() for p in d.iterdir())
    except FileNotFoundError:
        return  # no log seen yet (a read that fails otherwise is raised: fail closed)
    for mark in marks:
        if mark.name.startswith("."):
            continue
        try:
            state = TrustState.open(read_state_file(mark).strip())
        except (FileNotFoundError, UnicodeDecodeError, ProvenanceError):
            continue  # gone meanwhile, or not a key: nothing this user trusted
        try:
            yield state
        finally:
            state.close()


def brought(ledger: LedgerHome, entries: Iterable[bytes], logs: Collection[str],
            envelope: Callable[[str], bytes | None] | None = None,
            approvers: Collection[str] = ()) -> None:
    """The records about to be taken in from the log of ``logs`` (its ``entries``) that this
    ledger does not hold (their envelope is not in its log) are marked unread against every
    other log applied here whose kept keys (`saw`; none kept: any key) signed them: that log
    was read up to its size applied before they came, so what it logged of them before (a
    revocation, an erasure) was passed over as about nothing held. Its size applied then
    counts as 0 (`applied_for`). Marked before the import is recorded: one that then fails
    leaves a mark that costs one reading more, never a record unmarked. A revocation or an
    erasure brought (relayed) is no such record: nothing revokes it, and the log that relays it
    carries its signer's records too, so the relay's log would be read again whenever its
    origin's revocation came straight from the origin. A log whose kept keys hold one of
    ``approvers`` (this ledger's: an approver may revoke anything, a producer only what it
    produced) is marked for every record brought, whoever signed it (vend41: the lab's
    approver revoked another vendor's batch, which arrived later from that vendor's log).
    Each is labelled ``kind NAME (sha256:…)``
    from its ``envelope`` (by digest: the bundle's, the fetched one) when it reads as its kind,
    else by its digest: the import is not recorded yet, so this ledger cannot name it (hist40
    finding 4)."""
    from trajledger.verify.log_entry import LogEntry

    from .updates import mark_unread

    new: dict[str, set[str]] = {}
    first: dict[str, LogEntry] = {}  # labelled only when marked (most imports mark nothing)
    for raw in entries:
        e = LogEntry.from_bytes(raw)
        if e.kind not in STOPS and ledger.log.find_envelope(e.envelope) is None:
            new.setdefault(e.subject, set()).update(e.signers)
            first.setdefault(e.subject, e)
    if not new:
        return
    labels = functools.cache(lambda d: _label(ledger, first[d], envelope))
    for state in _states():
        if state.vkey in logs or state.applied() is None:
            continue
        kept = state.noted(_SIGNERS)
        keys = None if kept is None else set(json.loads(kept))
        anyone = keys is None or not keys.isdisjoint(approvers)  # any key, as for none kept
        hit = {d: labels(d) for d, by in new.items() if anyone or (keys or set()) & by}
        if hit:
            mark_unread(state, hit)


def _label(ledger: LedgerHome, e: LogEntry, envelope: Callable[[str], bytes | None] | None
           ) -> str:
    """`updates.label` of ``e``'s subject; when this ledger cannot name it (not held yet),
    ``kind NAME@VERSION (sha256:…)`` as the ``envelope`` of ``e`` states it (unverified bytes
    that hash to the entry: a name, never a check), else the digest."""
    from trajledger.verify.errors import ProvenanceError
    from trajledger.verify.kinds import KINDS, name_version
    from trajledger.verify.log_index import read_record

    from .updates import label

    if (found := label(ledger, e.subject)) != e.subject or envelope is None \
            or not KINDS[e.kind].named:
        return found
    try:
        st, _pred = read_record(e, envelope(e.envelope), f"entry of {e.subject}")
    except ProvenanceError:
        return found  # not as its kind: by its digest (exact), as before
    n, v = name_version(e.kind, st)
    return f"{e.kind} {n}{'@' + v if v else ''} ({e.subject[:19]}…)"


def unread(ledger: LedgerHome, digests: Collection[str] | None = None,
           logged: Collection[int] = ()) -> list[str]:
    """One line per log whose marked records (`brought`) of ``digests`` (default: the subjects
    of the entries ``logged`` in ``ledger``) wait to be read against it, saying what to run;
    none for a ledger that holds nothing another log brought (no state is opened). This
    ledger's state is asked once (upd44: it was asked three times)."""
    from .catalog import origin_name

    index = ledger.trust_state()
    if not index.of_kind("import"):  # (`_brought`)
        return []
    from .updates import UNREAD as _UNREAD

    if digests is None:
        digests = {e.subject for i in logged if (e := index.entry(i)) is not None}
    if not digests:
        return []
    out: list[str] = []
    for state in _states():
        marked: dict[str, str] = json.loads(state.noted(_UNREAD) or b"{}")
        labels = [x for d, x in sorted(marked.items()) if d in digests]
        if labels and state.applied() is not None:
            # marked for what its keys signed, or for anything: one of them approves here
            kept = state.noted(_SIGNERS)
            keys = None if kept is None else set(json.loads(kept))
            signed = keys is None or all(
                not (sigs := [e.signers for j in index.about(d) if (e := index.entry(j))])
                or any(keys.intersection(x) for x in sigs) for d in marked if d in digests)
            why = (f"signed by its keys and brought here by another log after you applied it "
                   f"up to size {state.applied()}" if signed else "brought here by another log "
                   f"after you applied it up to size {state.applied()} (one of its keys "
                   "approves here: it may revoke anything)")
            out.append(f"log {origin_name(state.vkey)} has not been read for "
                       f"{', '.join(labels)}, {why}: what it logged of them before (a "
                       "revocation, an erasure) is not seen yet; its next 'trajledger monitor "
                       "URL --vkey VKEY' reads it from its first entry (or import an update it "
                       "exports with --updates-since 0)")
    return out


def unread_after(ledger: LedgerHome, logged: Sequence[int], what: str) -> list[str]:
    """`unread` of the records an update just took in (this log's indices ``logged``); a read
    that fails is said with what is recorded (fault27: exit 3, one line that says so).

    Raises:
        LedgerError: the user's state or the index cannot be read.
    """
    import sqlite3

    from .errors import LedgerError, after_update

    if not logged:
        return []
    try:
        return unread(ledger, logged=logged)
    except (LedgerError, OSError, sqlite3.Error) as e:
        if (error := after_update(e, logged, what, "which logs were not read for what it took "
                                  "in could not then be known")) is e:
            raise
        raise error from e
