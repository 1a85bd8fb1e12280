"""Take in what another party's log says about what this ledger holds: imports and monitors as
extensions of that log, not one verdict each.

Scope: for each foreign log (an origin, bound to its log key: two logs that share an origin name
stay two), this ledger keeps two marks in the user's state (`trust_state.TrustState`, per log
key): the size **checked** (the floor: the newest checkpoint proven consistent with what was
seen before, by an import or a monitor) and the size **applied** (every entry below it was
examined, and the ones about what this ledger holds were taken in). Its signed import records
keep both too (each names the checkpoint it accepted and the size it applied), and restore them
in a fresh state directory (`origin_state`).

An update (`Update`: an import of a bundle, or a monitor of a served log) brings the log's
extension: every entry since the applied size, proven by the checkpoint's root it rebuilds. Of
those, `select` takes in the entries about artifacts this ledger holds or asks for (their
revocations, erasures, new records), and consults the log's trust policies; every other entry is
another party's record, checked by hash and never copied. `apply_update` then logs what it took
in here (the other party's envelopes, unchanged), records a signed ``import`` statement (the
origin log, its checkpoint, each entry with its inclusion proof, the size applied), and makes
what they say take effect, judged under this ledger's policy:

- a revocation or erasure that verifies here (signed by an approver, or by the producer of what
  it names: ``verify.lineage``) makes every decision refuse its subject; an erasure also
  deletes this ledger's copy of the subject's data (only files of the subject's own manifest,
  whatever its list says);
- one whose envelope the other party did not publish is taken in unreadable: every decision
  about its subject fails closed until the envelope arrives (an update bundle, then ``fsck
  --repair --from``);
- the other party's policy successions never change what this ledger trusts; a key it declares
  compromised (``revoked_keys`` of its policy in force) makes this ledger refuse that key's
  records from then on: each artifact held here that the key signed at or after that point of
  its log is revoked here (signed by the importing approver, the reason naming the
  declaration), and the report says to add the key to this policy's ``revoked_keys``.

`Changes` (``update_changes``) is what the import or monitor reports: what is new, what the
other party revoked or erased (reason, signer, its log index), which of this ledger's own
datasets and checkpoints are affected (their impact), and names that clash with this ledger's.

Non-scope: reading bundles (``verify.bundle``) and served logs (``ledger.monitor``); verifying
records (``verify.lineage``).
Spec: schemas/bundle.v1.md ("Import"), docs/third-party.md ("Updates between organisations").
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trajledger.verify import predicates
from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.digest import FileDigest
from trajledger.verify.dsse import MAX_ENVELOPE_BYTES
from trajledger.verify.errors import ProvenanceError, VerificationError
from trajledger.verify.impact import impact
from trajledger.verify.kinds import KINDS
from trajledger.verify.lineage import LineageVerifier, Record
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.log_index import read_record
from trajledger.verify.note import verifier_from_vkey
from trajledger.verify.other_predicates import Import
from trajledger.verify.policy import TrustPolicy
from trajledger.verify.policy_history import follow_history
from trajledger.verify.predicates import Erasure, Revocation

from .catalog import Origins, origin_name
from .errors import (
    LedgerError,
    StoppedAfterRecordError,
    StoreError,
    TamperError,
    disk_error,
    read_failure,
)
from .evidence import ledger_evidence
from .keys import Signer
from .log import EntrySpec
from .own_records import sent_back
from .record import statement_entry
from .status import delete_erased, erasable_blobs, files_here, held_elsewhere, label
from .update_changes import Changes

if TYPE_CHECKING:
    from .home import LedgerHome
    from .trust_index import NameRow
    from .trust_state import TrustState

__all__ = [
    "NOT_TAKEN",
    "UNREAD",
    "Applied",
    "Changes",
    "Update",
    "apply_update",
    "earlier_import",
    "from_log",
    "held",
    "imported_from",
    "label",
    "mark_unread",
    "origin_state",
    "select",
    "sent_back",
    "withdraws",
]

NOT_TAKEN = frozenset({"trust-policy", "import", "refusal"})
"""Kinds never logged here: the other party's policies (consulted for its key compromises,
never trusted), its own imports and refusals (its business)."""
_STOPS = ("revocation", "erasure")
UNREAD = "unread"
"""`TrustState.noted`'s key of gap39's mark (`first_contact.brought`): ``{digest: label}``, the
records waiting to be read against the log; while any, its size applied counts as 0."""


def mark_unread(state: TrustState, hit: Mapping[str, str]) -> None:
    """Add ``hit`` to ``state``'s mark, read and written in one transaction (two processes
    marking at once each keep their records: rot40)."""
    state.note(UNREAD, lambda kept: json.dumps(json.loads(kept or b"{}") | dict(hit),
                                               sort_keys=True).encode())


@dataclass(frozen=True)
class Update:
    """What an import or a monitor brings from another party's log.

    Attributes:
        vkey: the log's verifier key (its checkpoint verified with it, or a key it handed
            over to).
        note: the signed checkpoint accepted.
        entries: every entry examined, by its index there (the lineage asked for and the
            extension), unverified bytes proven under ``note``; a monitor keeps of its
            extension only the entries that can matter here (the log's policies, entries about
            what the ledger holds: all `select` and the key compromises look at there).
        taken: the entries to log here (`select`).
        consulted: entries listed in the import record without being logged (policies).
        inclusion: ``index -> inclusion proof`` under ``note``.
        objects: blobs to store, by digest: bytes, or a staged file on the store's
            filesystem whose digest was computed as it was written (moved into the store).
        artifact: the artifact asked for (``digest``, ``kind``, ``name``, ``logIndex``), or
            None for updates alone.
        applied: the size up to which every entry was examined (the checkpoint's).
        logs: the log's verifier keys besides ``vkey`` (those it rotated from): what it brought
            here before under them is its own too (`_compromises`).
        data_included: the artifact's data came with it.
        synced: waits for the staged files' data to be on disk (a pass started while the
            bundle was verified); None: `store.ObjectStore.adopt_files` runs it.
        flush: makes the store's whole file system durable once the objects have their
            names (`fs.FileSystemSync.sync`); None: each directory that gained one is fsynced.
    """

    vkey: str
    note: bytes
    entries: Mapping[int, bytes]
    taken: Sequence[int]
    consulted: Sequence[int]
    inclusion: Callable[[int], Sequence[bytes]]
    objects: Mapping[str, FileDigest | bytes]
    artifact: Mapping[str, Any] | None
    applied: int
    data_included: bool = True
    synced: Callable[[], None] | None = None
    flush: Callable[[], None] | None = None
    logs: frozenset[str] = frozenset()

    @property
    def checkpoint(self) -> Checkpoint:
        """The checkpoint ``note`` signs."""
        return verify_checkpoint(self.note, verifier_from_vkey(self.vkey))


@dataclass(frozen=True)
class Applied:
    """What `apply_update` did: the import record (an earlier one when nothing was new), this
    log's indices of the records taken in, and the changes."""

    index: int
    recorded: bool
    logged: tuple[int, ...]
    changes: Changes


# -- the marks of a foreign log ------------------------------------------------------------------


def _imports(ledger: LedgerHome, vkey: str | None = None) -> list[tuple[int, Import]]:
    """This ledger's import records (of the log ``vkey``), read from the store.

    Raises:
        TamperError: an import record's envelope is missing or damaged (fail closed: it could
            hide a newer checkpoint, so a rollback).
    """
    state = ledger.trust_state()
    out = []
    for i in state.of_kind("import"):
        entry = state.entry(i)
        assert entry is not None
        try:
            data = ledger.store.get(entry.envelope, limit=MAX_ENVELOPE_BYTES)
            _st, pred = read_record(entry, data, f"import record at log index {i}")
        except (ProvenanceError, StoreError) as e:
            if read_failure(e):  # the disk's, not a record gone: exit 3, no repair (fault27)
                raise
            raise TamperError(
                f"import record at log index {i}: cannot be read ({e}), so what was accepted "
                "from other logs cannot be known; restore it with 'trajledger fsck --repair "
                "--from BUNDLE|LEDGER'"
            ) from e
        assert isinstance(pred, Import)
        if vkey is None or pred.log.get("vkey") == vkey:
            out.append((i, pred))
    return out


def imported_from(ledger: LedgerHome) -> set[str]:
    """The verifier keys of the logs this ledger's import records name.

    Raises:
        TamperError: an import record cannot be read (as `origin_state`).
    """
    return {str(pred.log.get("vkey")) for _i, pred in _imports(ledger)}


def origin_state(ledger: LedgerHome, vkey: str, *, distinct: Sequence[str] = (),
                 handovers: Sequence[bytes] = (), proof: Callable[[int, int], Sequence[bytes]]
                 | None = None, note: bytes | None = None) -> TrustState:
    """The user's state of a foreign log: the newest checkpoint checked (the floor) and the size
    applied, each restored from this ledger's signed import records when the state is behind
    them (a fresh state directory).

    With ``note`` (the log's checkpoint now) and no floor yet for this key: carry over the
    floor of a key of the same origin this one took over from (a rotation, through
    ``handovers``), unless ``distinct`` (the log keys the policy trusts on their own) holds
    it and no handover leads to it: then it is another log using the same origin name.

    Raises:
        TamperError: an import record cannot be read; key confusion (`continue_trust`).
    """
    from .trust_handover import continue_trust
    from .trust_state import TrustState

    origin = TrustState.open(vkey)
    verifier = verifier_from_vkey(vkey)
    best: tuple[int, bytes] | None = None
    applied, first = 0, None
    for i, pred in _imports(ledger, vkey):
        raw = str(pred.log["checkpoint"]).encode("utf-8")
        try:
            cp = verify_checkpoint(raw, verifier)
        except ProvenanceError:
            continue  # verified when it was imported; a record cannot sign for the log
        first = i if first is None else min(first, i)
        if best is None or cp.size > best[0]:
            best = (cp.size, raw)
        # Records written before the applied size existed applied their checkpoint.
        applied = max(applied, pred.applied if pred.applied is not None else cp.size)
    floor = origin.floor_checkpoint()
    what = f"log {origin_name(vkey)}"
    if best is not None and (floor is None or best[0] > floor.size):
        origin.advance_floor(best[1], what=what)
    if applied and applied > (origin.applied() or 0):
        origin.advance_floor(origin.floor() or b"", what=what, applied=applied)
        if first is not None:  # the mark was lost with it: derived
            _mark_restored(ledger, origin, first)
    if origin.floor() is None and note is not None and proof is not None:
        continue_trust(origin, note, handovers, proof, what=what, distinct=distinct)
    return origin


def _mark_restored(ledger: LedgerHome, origin: TrustState, since: int) -> None:
    """gap39's mark of a state whose size applied was just restored from the import records
    (a fresh state directory, or one behind them): it lived in the lost state only. Every
    record that another log brought here after this log's first import (log index ``since``)
    is marked unread against it, signed by any key (its keys, kept with the mark, are lost
    too): its next read starts at 0 (`first_contact.applied_for`), one reading more where
    nothing was marked, never a record passed over (rot40)."""
    state, origins, hit = ledger.trust_state(), Origins(ledger), dict[str, str]()
    for kind in sorted(k for k, v in KINDS.items() if v.lineage):
        for i in state.of_kind(kind):
            if i > since and (e := state.entry(i)) is not None and e.subject not in hit \
                    and (came := origins.of(i)) and origin.vkey not in came:
                hit[e.subject] = label(ledger, e.subject)
    if hit:
        mark_unread(origin, hit)


# -- what to take in ------------------------------------------------------------------------------


def held(ledger: LedgerHome, digest: str, state: TrustState | None = None) -> bool:
    """True when this ledger holds a record of the artifact ``digest`` (its own or imported);
    ``state``, its `trust_state` taken once for a read of many entries (each call brings it up
    to the log: the checkpoint verified, the rows counted; vend43, the cost of a mark)."""
    state = state or ledger.trust_state()
    return any((e := state.entry(i)) is not None and KINDS[e.kind].lineage
               for i in state.about(digest))


def withdraws(ledger: LedgerHome, entry: LogEntry, state: TrustState | None = None) -> bool:
    """True when ``entry`` is a revocation of an approval record this ledger holds (its
    subject is that record's envelope digest): a withdrawal (`trajledger.verify.withdrawals`),
    which the approval's holder must take in as a revocation of what it holds."""
    if entry.kind != "revocation":
        return False
    index = ledger.log.find_envelope(entry.subject)
    found = (state or ledger.trust_state()).entry(index) if index is not None else None
    return found is not None and found.kind == "approval"


def from_log(ledger: LedgerHome, digest: str, logs: Collection[str]) -> bool:
    """True when this ledger holds a record of the artifact ``digest`` that an import brought
    from the log of one of the verifier keys ``logs``."""
    state = ledger.trust_state()
    origins = Origins(ledger)
    return any((e := state.entry(i)) is not None and KINDS[e.kind].lineage
               and origins.of(i) & set(logs) for i in state.about(digest))


def select(
    ledger: LedgerHome, entries: Mapping[int, bytes], *, extension: int | None, asked: set[str],
    have: Callable[[str], bool], logs: Collection[str],
) -> tuple[list[int], list[int]]:
    """Which entries of another log to take in, and which to consult only.

    Steps:
        1. Policies (and the other party's imports and refusals) are consulted, never logged.
        2. An entry below the extension is of the lineage asked for: taken in (as every import
           always did).
        3. An entry of the extension is taken in when it is about an artifact asked for or
           held here (`held`), or withdraws an approval held here (`withdraws`), with its
           envelope (``have``), or without it when it can stop a
           use of data (a revocation or erasure whose envelope the party did not publish:
           then it fails closed here) of an artifact asked for or brought from this very log
           (``logs``: its verifier keys; `from_log`): a party cannot make decisions about
           another party's artifacts, or this ledger's own, fail by withholding an envelope.
           Every other entry is another party's record.

    Returns:
        ``(taken, consulted)`` indices, ascending.
    """
    taken, consulted, state = [], [], ledger.trust_state()
    for i in sorted(entries):
        entry = LogEntry.from_bytes(entries[i])
        # (1)
        if entry.kind in NOT_TAKEN:
            if entry.kind == "trust-policy":
                consulted.append(i)
            continue
        # (2)
        if extension is None or i < extension:
            taken.append(i)
            continue
        # (3)
        asked_for = entry.subject in asked
        if not (asked_for or held(ledger, entry.subject, state)
                or withdraws(ledger, entry, state)):
            continue
        if have(entry.envelope) or (KINDS[entry.kind].restricts and (
                asked_for or from_log(ledger, entry.subject, logs))):
            taken.append(i)
    return taken, consulted


# -- applying -------------------------------------------------------------------------------------


def apply_update(
    ledger: LedgerHome, policy: TrustPolicy, signers: Sequence[Signer], update: Update, *,
    what: str, floor: Callable[[], None] | None = None, locked: bool = False,
) -> Applied:
    """Take an update in: store its objects, log what it takes in, record the import, and make
    what it says take effect here (the module docstring).

    Steps:
        1. Store the objects (content-addressed): bytes are hashed as stored; staged files,
           hashed as they were written, are moved in with one durability pass
           (`store.ObjectStore.adopt_files`).
        2. The entries taken in, in their log's order (idempotent by envelope: a retry adds
           nothing twice), and
        3. unless an import record of the same thing under the same tree exists (and every
           entry taken in is logged), an import record signed by ``signers``: the artifact (if
           any), the log and its checkpoint, each entry taken in or consulted with its
           inclusion proof, the size applied; both in one group commit (in the log whole or
           not at all: never another log's records without the record that says so).
           ``floor`` (advancing the marks) runs right after it. When one exists, steps 4 and 5
           still run: an import stopped after its record left them undone, and each does only
           what is not done yet.
        4. The other party's key compromises: each held artifact it says a compromised key
           signed from then on is revoked here.
        5. Judge what was taken in under ``policy`` in this ledger: revocations and erasures
           that count (an erasure deletes this ledger's copy of its subject's files), those
           that cannot be read, those that do not count; then the affected artifacts of this
           ledger's own, and name clashes.

    ``locked``: the caller holds the log's lock (`Log.exclusive`: an import): before the
    objects are stored and before ``floor``, the lock file must still be the one it locked
    (`Log.check_lock_held`, fix13; appends and step 5's deletions check it always).

    Raises:
        StoreError, LogError: the store or the log cannot be written; the lock file was
            removed or replaced (what was done is said; nothing more is written).
        PolicyError: ``signers`` may not sign here.
    """
    cp = update.checkpoint
    state = ledger.trust_state()
    changes = Changes(origin_name(update.vkey))
    # (1)
    from .progress import no_progress

    if locked:
        ledger.log.check_lock_held("nothing was imported")
    skip = _left_out(ledger, policy, update, changes)
    objects = {d: o for d, o in update.objects.items() if d not in skip}
    staged = [o for o in objects.values() if isinstance(o, FileDigest)]
    total = sum(o.size if isinstance(o, FileDigest) else len(o) for o in objects.values())
    with (ledger.progress or no_progress)(total, "moving into the store") as bar:
        for digest, obj in objects.items():
            if isinstance(obj, bytes):
                if (got := ledger.store.put_bytes(obj)) != digest:
                    raise StoreError(f"{what}: object {digest} changed while copied ({got})")
                bar(len(obj))
        ledger.store.adopt_files(staged, bar, synced=update.synced, flush=update.flush)
    # (2) (not this ledger's own records the other log holds too: `sent_back`)
    back = sent_back(ledger, {i: LogEntry.from_bytes(update.entries[i]) for i in update.taken})
    foreign = {i: LogEntry.from_bytes(update.entries[i]) for i in update.taken if i not in back}
    fresh = {i for i, e in foreign.items() if KINDS[e.kind].lineage
             and not any((x := state.entry(j)) is not None and x.kind == e.kind
                         for j in state.about(e.subject))}
    specs = [EntrySpec(e.kind, e.subject, e.envelope, e.signers) for e in foreign.values()]
    # (3) One group commit takes in the other log's records and the import record that lists
    # them: stopped between two appends, this log held another's records as if its own, until
    # the import ran again (`verify.releases.brought_by`; left28).
    subject, name = _import_subject(update, cp)
    earlier = earlier_import(ledger, subject, (cp.origin, cp.size, cp.root), update.vkey)
    done = -1  # the import record's index, once appended
    logged: tuple[int, ...] = ()
    try:
        if earlier is not None and all(ledger.log.find_envelope(s.envelope) is not None
                                       for s in specs):
            logged = tuple(ledger.log.append(specs, foreign=True)) if specs else ()
            here = dict(zip(foreign, logged, strict=True))
            if floor is not None:
                if locked:
                    ledger.log.check_lock_held(f"nothing was imported (imported before: log index "
                                               f"{earlier})")
                floor()
            # Steps 4 and 5 again (each does what is not done yet, and says what counts): an
            # import stopped after its record (killed, or the lock check) left them undone.
            _compromises(ledger, policy, signers, update, here, changes, foreign)
            _judge(ledger, policy, foreign, here, changes, earlier, update)
            changes.logged = logged
            return Applied(earlier, False, logged, changes)
        predicate: dict[str, Any] = {
            "log": {"origin": cp.origin, "vkey": update.vkey,
                    "checkpoint": update.note.decode("utf-8")},
            "entries": [
                {"index": i, "entry": update.entries[i].decode("utf-8"),
                 "inclusion": [base64.b64encode(h).decode("ascii") for h in update.inclusion(i)]}
                for i in sorted({*foreign, *update.consulted})
            ],
            "dataIncluded": update.data_included,
            "applied": update.applied,
        }
        if update.artifact is not None:
            predicate["artifact"] = dict(update.artifact)
        spec, check = statement_entry(ledger, name, subject, predicates.IMPORT, predicate,
                                      list(signers), "import")
        *appended, done = ledger.log.append([*specs, spec], check=check, foreign=True)
        logged = tuple(appended)
        here = dict(zip(foreign, logged, strict=True))
        if locked:
            ledger.log.check_lock_held(
                f"the import is recorded (log index {done}), nothing after it was done "
                "(the size applied noted; key compromises, revocations and erasures judged here)",
                recorded=True)
        if floor is not None:
            floor()
        # (4)
        _compromises(ledger, policy, signers, update, here, changes, foreign)
        # (5)
        for i in sorted(fresh):
            e = foreign[i]
            changes.new.setdefault(e.kind, []).append(e.subject)
        _judge(ledger, policy, foreign, here, changes, done, update)
        _clashes(ledger, [here[i] for i in sorted(fresh)], changes)
        changes.logged = logged
        return Applied(done, True, logged, changes)
    except Exception as e:  # after an append, the line says what is recorded (fault27)
        if (not logged and done < 0) or isinstance(e, (VerificationError,
                                                        StoppedAfterRecordError)) or not (
                isinstance(e, (LedgerError, OSError)) or disk_error(e)):
            raise
        raise LedgerError(_recorded_then(what, logged, done, e)) from e


def _recorded_then(what: str, logged: Sequence[int], index: int, e: BaseException) -> str:
    """The line of an update stopped by an operational error after it appended: what it
    recorded, the error, and that running it again finishes it (`apply_update` does what is
    not done yet: records taken in before are not logged twice)."""
    parts = [f"its {len(logged)} foreign record(s) are recorded at log indices "
             f"{logged[0]}..{logged[-1]}"] if logged else []
    if index >= 0:
        parts.append(f"the import record is recorded at log index {index}")
    return (f"{what}: {' and '.join(parts)}, but then it stopped: "
            f"{e if not isinstance(e, OSError) else f'{e.strerror}: {e.filename}'}; "
            "run it again: it finishes what is not done")


def _import_subject(update: Update, cp: Checkpoint) -> tuple[str, str]:
    """The import record's subject: the artifact asked for; for updates alone, the tree they
    bring the ledger to (the digest of the checkpoint's text, whatever cosigns it)."""
    if update.artifact is not None:
        return str(update.artifact["digest"]), str(update.artifact["name"])
    text = f"{cp.origin}\n{cp.size}\n{base64.b64encode(cp.root).decode()}\n"
    return ("sha256:" + hashlib.sha256(text.encode()).hexdigest(),
            f"updates of {origin_name(update.vkey)} to size {cp.size}")


def earlier_import(ledger: LedgerHome, digest: str, tree: tuple[str, int, bytes], vkey: str
                   ) -> int | None:
    """The index of an import record of ``digest`` with the same evidence (the log ``vkey``,
    the tree), if any: a tree this ledger accepted then (`exchange.import_bundle`: an older
    bundle imported again after its log's later updates is no rollback, out43 finding 6)."""
    state = ledger.trust_state()
    for i, pred in _imports(ledger, vkey):
        entry = state.entry(i)
        if entry is None or entry.subject != digest:
            continue
        try:
            cp = Checkpoint.from_text(_note_text(str(pred.log["checkpoint"])))
        except ProvenanceError:
            continue
        if (cp.origin, cp.size, cp.root) == tree:
            return i
    return None


def _note_text(note: str) -> bytes:
    from trajledger.verify.note import Note

    return Note.from_bytes(note.encode("utf-8")).text


# -- what the other party says, judged here -------------------------------------------------------


def _judge(ledger: LedgerHome, policy: TrustPolicy, foreign: Mapping[int, LogEntry],
           here: Mapping[int, int], changes: Changes, recorded: int, update: Update) -> None:
    """Step 5 of `apply_update` (``recorded``: the import record's index; ``brought``: the
    objects the update stored): each revocation and erasure taken in, verified in this
    ledger under ``policy``; an erasure that counts deletes this ledger's copy of its
    subject's files; an erasure recorded here before deletes again the files of its subject
    the update brought back (`_erased_before`); then what of this ledger's own is built on
    what stopped, and what is built on the other log's stops of its own artifacts that do not
    count here (out36 finding 1: `Changes.lines` warns of them, with the ways on)."""
    brought, logs = set(update.objects), {update.vkey, *update.logs}
    verifier = LineageVerifier(ledger_evidence(ledger), policy, index=ledger.trust_state(),
                               data="size")
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
                        first = next((was for j in ledger.trust_state().about(e.subject)
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
                    state = ledger.trust_state()
                    own = any(KINDS[x.kind].lineage and origins.first(j) in logs
                              for j in state.about(e.subject) if (x := state.entry(j)))
                    changes.ignored.append(facts | {"why": rec.message, "own": own,
                                                    "affects": [], "affectsLabels": []})
            _erased_before(ledger, verifier, brought, set(here.values()), changes, recorded)
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
                    changes.affected.append({"digest": node.id, "label": node.label,
                                             "becauseDigest": digest, "because": because})
    finally:
        verifier.close()


def _erased_before(ledger: LedgerHome, verifier: LineageVerifier, brought: set[str],
                   taken: set[int], changes: Changes, recorded: int) -> None:
    """Part of step 5 (under the log's lock): the files of an artifact erased here before
    (`_erased_here`) that the update stored again are deleted again, as `status.erase` run
    again would: an import never brings back erased bytes (hist28)."""
    found = _erased_here(ledger, brought, taken, ledger.store.exists)
    for i, subject, gone in _still_erased(ledger, verifier, found, set()):
        name = label(ledger, subject)
        told = (f"the import is recorded (log index {recorded}) and {{}} of the {len(gone)} "
                f"erased file(s) of {name} it brought back are deleted again, nothing more")
        changes.deleted_again.append({"digest": subject, "label": name, "logIndex": i,
                                      "deleted": delete_erased(ledger, gone, done=told.format)})


def _erased_here(ledger: LedgerHome, carried: Set[str], taken: Collection[int] = (),
                 present: Callable[[str], bool] = bool) -> dict[int, tuple[str, set[str]]]:
    """The erasures logged here before this update (this ledger's own, or taken in earlier;
    not those of ``taken``) of an artifact whose files the update carries again (the same
    bundle imported again, a dataset of the erased batch shipped anew): log index -> (its
    subject, its files in ``carried`` that are ``present``, all by default). Only an erasure
    whose subject's manifest the update carries is read (a bundle carries it with the files)."""
    state = ledger.trust_state()
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


def _left_out(ledger: LedgerHome, policy: TrustPolicy, update: Update, changes: Changes
              ) -> set[str]:
    """Step 1's objects not stored: the files of an artifact erased here before that counts
    (`_erased_here`, `_still_erased`). An import never stores erased bytes, even for a
    moment (left29: `_erased_before` deleted them after the log commit, so an import stopped
    between left them in the store). Kept too: a blob a lineage record the update brings
    lists (read from the update's objects). Erasures the update itself brings are judged in
    step 5 (`_judge`)."""
    found = _erased_here(ledger, update.objects.keys())
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
    verifier = LineageVerifier(ledger_evidence(ledger), policy, index=ledger.trust_state(),
                               data="size")
    try:
        for i, subject, gone in _still_erased(ledger, verifier, found, listed):
            skip |= gone
            changes.left_out.append({"digest": subject, "label": label(ledger, subject),
                                     "logIndex": i, "leftOut": len(gone)})
    finally:
        verifier.close()
    return skip


def _compromises(ledger: LedgerHome, policy: TrustPolicy, signers: Sequence[Signer],
                 update: Update, here: Mapping[int, int], changes: Changes,
                 parsed: Mapping[int, LogEntry]) -> None:
    """Step 4 of `apply_update`: the other party's key compromises (``parsed``: entries of
    ``update`` already parsed, by index).

    Steps:
        1. Its policy in force, followed from its first policy through every policy record this
           ledger has seen of it (import records) and this update's, by its own rules; a
           history that cannot be followed declares nothing.
        2. For each key it revokes that one of its own policies held: the artifacts whose
           record its log says the key signed at or after ``compromised_since`` (of that log:
           its indices and its entry times) and that this ledger holds from that log alone
           (`_brought_by`) are revoked here, signed by the first of ``signers``, unless a
           revocation of them already counts here. A policy may list anyone's public key, and
           a log's entries are its writer's word: the others (this ledger's own artifacts,
           another log's) are listed as ignored, never revoked; those another log brought
           here whose record verifies signed by the key are named in a warning with the way on
           if the key is theirs (``changes.suspect``: what `_declared_elsewhere` says when the
           same facts come in the other order; hist41 finding 2).
        3. When the key holds a role of ``policy`` that does not revoke it, and signed nothing
           ignored in step 2, the report says to add it to ``revoked_keys``, from this log's
           index of its first record taken in after the compromise (or now).
    """
    from .status import revoke

    imports = _imports(ledger)
    _declared_elsewhere(ledger, policy, update, parsed, changes, imports)
    # (1) (an entry this update brings is its own: what import records say of that index,
    # this one's included, is not parsed only to be replaced)
    # (what it brought under the keys it rotated from too: rev34 finding 3)
    seen = {i: e for k in (*update.logs, update.vkey)
            for i, e in _entries_of(k, imports, skip=update.entries).items()}
    seen |= {i: parsed[i] if i in parsed else LogEntry.from_bytes(update.entries[i])
             for i in update.entries}
    theirs, own = _their_compromises(ledger, seen)
    if theirs is None:
        return
    state = ledger.trust_state()
    verifier = LineageVerifier(ledger_evidence(ledger), policy, index=state, data="size")
    origins, logs = Origins(ledger), {update.vkey, *update.logs}
    try:
        for rk in theirs.revoked_keys:
            if rk.keyid not in own:
                continue
            # (2)
            hits = {e.subject: i for i, e in sorted(seen.items()) if KINDS[e.kind].lineage
                    and rk.keyid in e.signers and rk.covers(i, e.time)
                    and held(ledger, e.subject, state)}
            foreign = [d for d in hits if not _brought_by(state, origins, d, logs)]
            # (2b) (hist41 finding 2: the warning the other order gives, `_declared_elsewhere`)
            signed = [d for d in foreign if _signed_there(state, origins, verifier, d,
                                                          seen[hits[d]].kind, rk.keyid, logs)]
            if signed and not any(x.keyid == rk.keyid for x in policy.revoked_keys):
                changes.suspect.append({
                    "key": rk.keyid, "declaredBy": origin_name(update.vkey), "digests": signed,
                    "declarerBrought": True,
                    "text": f"key {rk.keyid[:16]}, which {origin_name(update.vkey)} declares "
                            f"compromised ({rk.describe()}; its policy {theirs.name!r} serial "
                            f"{theirs.serial}), signed what you hold from another log: "
                            f"{', '.join(label(ledger, d) for d in signed)}; not revoked here "
                            "(a log stops only what it alone brought): if the key is theirs, "
                            f"record a successor with [[revoked_keys]] key = \"{rk.keyid}\""})
            for d in foreign:
                changes.ignored.append({
                    "digest": d, "label": label(ledger, d), "logIndex": hits.pop(d),
                    "kind": "key compromise",
                    "why": f"its log says key {rk.keyid[:16]} signed it, and declares that key "
                           "compromised, but you hold it as your own or from another log: a "
                           "log stops only what it alone brought here"})
            revoked = []
            for digest in hits:
                counted = [r for j in verifier.records(digest, "revocation")
                           if isinstance(r := verifier.record(j), Record)]
                if counted:
                    continue
                reason = (f"signed by key {rk.keyid[:16]}, which {origin_name(update.vkey)} "
                          f"declares compromised ({rk.describe()}; its policy "
                          f"{theirs.name!r} serial {theirs.serial})")
                revoke(ledger, digest, signers[0], reason=reason)
                revoked.append(digest)
            # (3)
            text = (f"key {rk.keyid[:16]} of {origin_name(update.vkey)} is compromised "
                    f"({rk.describe()}; its policy {theirs.name!r} serial {theirs.serial})"
                    + (": revoked here what it signed since: "
                       + ", ".join(label(ledger, d) for d in revoked) if revoked else ""))
            roles = [r for r in ("producer", "approver", "trainer", "evaluator")
                     if policy.holds(r, rk.keyid)]
            if roles and not foreign and not any(x.keyid == rk.keyid
                                                 for x in policy.revoked_keys):
                since = min((here[i] for i in here if rk.keyid in seen[i].signers
                             and rk.covers(i, seen[i].time)), default=ledger.log.size)
                text += (f"; your policy still trusts it as {' and '.join(roles)}: record a "
                         f"successor without it and with [[revoked_keys]] key = "
                         f"\"{rk.keyid}\", compromised_since = {since}"
                         if any(rk.keyid in e.signers for e in seen.values()) else
                         f"; your policy trusts it as {' and '.join(roles)}, and its log holds "
                         "nothing it signed (a policy may list anyone's key): if the key is "
                         f"theirs, record a successor with [[revoked_keys]] key = "
                         f"\"{rk.keyid}\"")  # (hist41 finding 6: another's key, no word)
            if revoked or (roles and not foreign):
                changes.compromised.append({"key": rk.keyid, "text": text,
                                            "revokedHere": revoked})
    finally:
        verifier.close()


def _entries_of(vkey: str, imports: Sequence[tuple[int, Import]],
                skip: Collection[int] = ()) -> dict[int, LogEntry]:
    """The entries of the log ``vkey`` that this ledger's import records list, by index
    (those at ``skip`` left out; one that does not parse is skipped)."""
    seen: dict[int, LogEntry] = {}
    for _i, pred in imports:
        if pred.log.get("vkey") != vkey:
            continue
        for item in pred.entries:
            raw, at = item.get("entry"), item.get("index")
            if isinstance(raw, str) and isinstance(at, int) and at not in skip:
                try:
                    seen[int(at)] = LogEntry.from_bytes(raw.encode("utf-8"))
                except ProvenanceError:
                    continue
    return seen


def _their_compromises(ledger: LedgerHome, seen: Mapping[int, LogEntry]
                       ) -> tuple[TrustPolicy | None, set[str]]:
    """Step 1 of `_compromises` for one log: its policy in force, followed by its own rules
    from its policy records among ``seen`` (None when it declares no key compromised), and the
    keys its own policies held (a party declares compromised only those: not another party's
    whose records it imported into its log). A policy record whose envelope is not here is
    passed over; one the disk fails to read ends the command (exit 3, `errors.read_failure`):
    passed over, a key it declares compromised went unnamed (left29 finding 2)."""
    records = []
    for i, e in sorted(seen.items()):
        if e.kind != "trust-policy":
            continue
        try:
            records.append((i, e.subject, ledger.store.get(e.envelope, limit=MAX_ENVELOPE_BYTES)))
        except (OSError, LedgerError) as x:
            if read_failure(x):
                raise
    theirs = follow_history(None, records)[0] if records else None
    if theirs is None or not theirs.revoked_keys:
        return None, set()
    return theirs, {k for p in (theirs, *(q for _i, q in theirs.earlier))
                    for role in ("producer", "approver", "trainer", "evaluator")
                    for k in p.role(role).keyids}


def _declared_elsewhere(ledger: LedgerHome, policy: TrustPolicy, update: Update,
                        taken: Mapping[int, LogEntry], changes: Changes,
                        imports: Sequence[tuple[int, Import]]) -> None:
    """A record this update takes in that is signed by a key another log here declares
    compromised (a key of that log's own policies, which this ledger's policy does not
    revoke yet) is named in a warning (``changes.suspect``). Not revoked: a policy may list
    anyone's key, so a log's word stops only what it alone brought here (`_compromises`);
    before, such a record was taken in silently (docs/SECURITY.md, rev24 finding 1)."""
    signed = {k for e in taken.values() if KINDS[e.kind].lineage for k in e.signers}
    if not signed:
        return
    revoked_here = {x.keyid for x in policy.revoked_keys}
    logs = {vk for _i, p in imports if isinstance(vk := p.log.get("vkey"), str)}
    for vkey in sorted(logs - {update.vkey, *update.logs}):
        theirs, own = _their_compromises(ledger, entries := _entries_of(vkey, imports))
        for rk in theirs.revoked_keys if theirs is not None else ():
            if theirs is None or rk.keyid not in own & signed or rk.keyid in revoked_here:
                continue
            hit = {e.subject: label(ledger, e.subject) for _i, e in sorted(taken.items())
                   if KINDS[e.kind].lineage and rk.keyid in e.signers}
            shown = _shown(ledger, policy, entries, rk.keyid, vkey)  # (vend43: whose key)
            changes.suspect.append({
                "key": rk.keyid, "declaredBy": origin_name(vkey), "digests": list(hit),
                "declarerBrought": shown,
                "text": f"key {rk.keyid[:16]}, which {origin_name(vkey)} declares compromised "
                        f"({rk.describe()}; its policy {theirs.name!r} serial "
                        f"{theirs.serial}), signed what was just taken in from "
                        f"{changes.origin}: {', '.join(hit.values())}; not revoked here (a log "
                        "stops only what it brought)" + ("" if shown else f"; {origin_name(vkey)}"
                        " brought you nothing that key signed (a policy may list anyone's key)")
                        + f": if the key is theirs, record a successor with [[revoked_keys]] "
                        f"key = \"{rk.keyid}\""})


def _shown(ledger: LedgerHome, policy: TrustPolicy, entries: Mapping[int, LogEntry],
           keyid: str, vkey: str) -> bool:
    """Whether the log ``vkey`` brought here first a record that verifies signed by ``keyid``
    (`_signed_there`, of its ``entries`` its log says the key signed): what shows the key it
    declares compromised may be its own (vend43; `_compromises` step 3's line otherwise)."""
    state, origins = ledger.trust_state(), Origins(ledger)
    verifier = LineageVerifier(ledger_evidence(ledger), policy, index=state, data="size")
    try:
        return any(_signed_there(state, origins, verifier, e.subject, e.kind, keyid, {vkey})
                   for e in entries.values() if KINDS[e.kind].lineage and keyid in e.signers
                   and held(ledger, e.subject, state))
    finally:
        verifier.close()


def _brought_by(state: TrustState, origins: Origins, digest: str, logs: Collection[str]
                ) -> bool:
    """True when every record of the artifact ``digest`` here was brought by an import from
    the log of one of the verifier keys ``logs`` (none is this ledger's own, nor another
    log's)."""
    found = [origins.of(i) for i in state.about(digest)
             if (e := state.entry(i)) is not None and KINDS[e.kind].lineage]
    return bool(found) and all(o and o <= set(logs) for o in found)


def _signed_there(state: TrustState, origins: Origins, verifier: LineageVerifier, digest: str,
                  kind: str, keyid: str, logs: Collection[str]) -> bool:
    """True when every record of kind ``kind`` of the artifact ``digest`` here came from another
    log (none is this ledger's own), the first to bring it here is the declaring log (one of
    ``logs``: its own record, relayed later by another; a log that relayed another's record
    and declares its key compromised is not told of: the lead, at vend42's merge,
    test_borrowed_handovers.py), and one of them verifies here signed by ``keyid``: its
    envelope's signature, not a log's word of who signed (hist41 finding 2)."""
    found = [j for j in state.about(digest) if (e := state.entry(j)) is not None
             and e.kind == kind]
    return bool(found) and all(origins.of(j) for j in found) and any(
        origins.first(j) in logs for j in found) and any(
        isinstance(r := verifier.record(j), Record) and keyid in r.signers for j in found)


def _clashes(ledger: LedgerHome, indices: Sequence[int], changes: Changes) -> None:
    """Names of records just imported that other records here also have: this ledger's own
    name wins (`catalog.Catalog.resolve`); another origin's makes the plain name ambiguous.
    Names come from the trust state's index of names (one query; it read them from the same
    statements), not from re-reading every record just imported."""
    state = ledger.trust_state()
    origins = Origins(ledger)
    rows = state.named()
    by_index = {row.index: row for row in rows}
    by_name: dict[tuple[str, str], list[NameRow]] = {}
    for row in rows:
        by_name.setdefault((row.name, row.version), []).append(row)
    for j in indices:
        entry = by_index.get(j)
        if entry is None or not entry.version:
            continue
        name, version = entry.name, entry.version
        ref = f"{name}@{version}"
        mine = origins.names(j)[0] if origins.names(j) else changes.origin
        for other in by_name[(name, version)]:
            if other.subject == entry.subject or other.kind != entry.kind:
                continue
            theirs = origins.names(other.index)
            if not theirs:
                changes.clashes.append(
                    f"name clash: {entry.kind} {ref} from {mine} has the name of your own "
                    f"{entry.kind} {ref} ({other.subject[:19]}…): '{ref}' names yours; refer "
                    f"to the imported one as '{mine}+{ref}'")
            else:
                changes.clashes.append(
                    f"name clash: {entry.kind} {ref} from {mine} has the name of "
                    f"{entry.kind} {ref} from {theirs[0]} ({other.subject[:19]}…): refer to "
                    f"each by its origin-qualified name ('{mine}+{ref}', '{theirs[0]}+{ref}')")
