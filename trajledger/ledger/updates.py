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

Split (twenty-ninth round, upd44: it was at its cap): `Update` and the reads of this ledger's
own state (its import records, `held`) are ``update_reads``; step 1's files left out and step
5's judgement ``update_judge``; step 4, the key compromises, ``update_compromises``. This module
keeps the marks of a foreign log, the choice of what to take in, and the taking in.

Non-scope: reading bundles (``verify.bundle``) and served logs (``ledger.monitor``); verifying
records (``verify.lineage``).
Spec: schemas/bundle.v1.md ("Import"), docs/third-party.md ("Updates between organisations").
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trajledger.verify import predicates
from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.digest import FileDigest
from trajledger.verify.errors import ProvenanceError, VerificationError
from trajledger.verify.kinds import KINDS
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.nodes import NAMED as SHOWN
from trajledger.verify.note import verifier_from_vkey
from trajledger.verify.policy import TrustPolicy

from .catalog import Origins, origin_name
from .errors import (
    LedgerError,
    StoppedAfterRecordError,
    StoreError,
    disk_error,
    shell_word,
)
from .keys import Signer
from .log import EntrySpec
from .own_records import sent_back
from .record import statement_entry
from .status import label
from .update_changes import Changes
from .update_compromises import NOT_TAKEN
from .update_compromises import compromises as _compromises  # (test_insider_races' seam)
from .update_judge import judge as _judge  # (the seam tests/e2e/test_updates.py stops at)
from .update_judge import left_out
from .update_keys import policy_keys
from .update_reads import Update, held, import_records

if TYPE_CHECKING:
    from trajledger.verify.other_predicates import Import

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
    "store_objects",
    "withdraws",
]

UNREAD = "unread"
"""`TrustState.noted`'s key of gap39's mark (`first_contact.brought`): ``{digest: label}``, the
records waiting to be read against the log; while any, its size applied counts as 0."""
SHARE_STATE = True
"""`apply_update` hands the steps this ledger's state, asked once before its appends and once
after each (upd44: an import brought it up to the log 22 times). False: each step asks for it
itself, the path before, kept for tests/e2e/test_import_state_once.py, which compares the
decisions of both."""


def mark_unread(state: TrustState, hit: Mapping[str, str]) -> None:
    """Add ``hit`` to ``state``'s mark, read and written in one transaction (two processes
    marking at once each keep their records: rot40)."""
    state.note(UNREAD, lambda kept: json.dumps(json.loads(kept or b"{}") | dict(hit),
                                               sort_keys=True).encode())


@dataclass(frozen=True)
class Applied:
    """What `apply_update` did: the import record (an earlier one when nothing was new), this
    log's indices of the records taken in, and the changes."""

    index: int
    recorded: bool
    logged: tuple[int, ...]
    changes: Changes


# -- the marks of a foreign log ------------------------------------------------------------------



def imported_from(ledger: LedgerHome) -> set[str]:
    """The verifier keys of the logs this ledger's import records name.

    Raises:
        TamperError: an import record cannot be read (as `origin_state`).
    """
    return {str(pred.log.get("vkey")) for _i, pred in import_records(ledger)}


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
    for i, pred in import_records(ledger, vkey):
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
        1. Policies, and the other party's imports whose envelope came (what shows it relayed a
           record: `update_compromises`), are consulted, never logged; its refusals ignored.
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
            if entry.kind == "trust-policy" or (entry.kind == "import" and have(entry.envelope)):
                consulted.append(i)  # (an import: the log relayed what it lists, upd45)
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


def store_objects(ledger: LedgerHome, policy: TrustPolicy, update: Update, changes: Changes,
                  state: TrustState | None = None, *, what: str, known: Collection[str] = ()
                  ) -> int:
    """Step 1 of `apply_update`: ``update``'s objects stored, but those of an artifact erased
    here before (`update_judge.left_out`); how many were stored. Also what an older bundle
    imported again brings that its first import did not (rev41 finding 2): ``known``, the
    objects of its bundle the store holds already, not among ``update``'s (an erased
    artifact's manifest: its files are left out all the same, upd45); then only the objects
    this ledger's records name are stored (`_named_here`: a bundle of the same tree may carry
    more, the envelopes of its extension's records, which nothing here names: upd45)."""
    from .progress import no_progress

    skip = left_out(ledger, policy, update, changes, state, known)
    if known:
        skip |= set(update.objects) - _named_here(ledger, update.objects, known, state)
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
    return len(objects)


def _named_here(ledger: LedgerHome, objects: Mapping[str, FileDigest | bytes],
                known: Collection[str], state: TrustState | None = None) -> set[str]:
    """Of ``objects``, those this ledger's records name: the envelope of an entry of its log,
    the subject of a lineage record here (a manifest), a file such a manifest lists
    (`status.erasable_blobs`), of a manifest among ``objects`` or ``known`` (the bundle's
    objects the store holds)."""
    from .status import erasable_blobs

    state = state or ledger.trust_state()

    def read(d: str) -> bytes | None:
        obj = objects.get(d)
        if obj is None:
            return ledger.store.get_verified(d) if ledger.store.exists(d) else None
        return obj if isinstance(obj, bytes) else obj.path.read_bytes()

    named = {d for d in objects if ledger.log.find_envelope(d) is not None}
    for d in sorted({*objects, *known}):
        for i in state.about(d):
            if (e := state.entry(i)) is not None and KINDS[e.kind].lineage:
                named |= ({d} | erasable_blobs(ledger, d, (e.kind, e.envelope), read)) \
                    & set(objects)
                break
    return named


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
    given = state if SHARE_STATE else None
    changes = Changes(origin_name(update.vkey))
    # (1)
    if locked:
        ledger.log.check_lock_held("nothing was imported")
    store_objects(ledger, policy, update, changes, given, what=what)
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
    imports = import_records(ledger, state=given)  # before this update's: what was known
    subject, name = _import_subject(update, cp)
    earlier = earlier_import(ledger, subject, (cp.origin, cp.size, cp.root), update.vkey,
                             imports if SHARE_STATE else None, given)
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
            after = _steps_4_5(ledger, policy, signers, update, here, changes, foreign, imports)
            _judge(ledger, policy, foreign, here, changes, earlier, update, after)
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
        after = _steps_4_5(ledger, policy, signers, update, here, changes, foreign, imports)
        # (5)
        for i in sorted(fresh):
            e = foreign[i]
            changes.new.setdefault(e.kind, []).append(e.subject)
        _judge(ledger, policy, foreign, here, changes, done, update, after)
        _clashes(ledger, [here[i] for i in sorted(fresh)], changes, after)
        changes.logged = logged
        return Applied(done, True, logged, changes)
    except Exception as e:  # after an append, the line says what is recorded (fault27)
        if (not logged and done < 0) or isinstance(e, (VerificationError,
                                                        StoppedAfterRecordError)) or not (
                isinstance(e, (LedgerError, OSError)) or disk_error(e)):
            raise
        raise LedgerError(_recorded_then(what, logged, done, e)) from e


def _steps_4_5(ledger: LedgerHome, policy: TrustPolicy, signers: Sequence[Signer],
               update: Update, here: Mapping[int, int], changes: Changes,
               foreign: Mapping[int, LogEntry], imports: Sequence[tuple[int, Import]]
               ) -> TrustState | None:
    """Step 4 of `apply_update` after its appends, and the state step 5 reads: this ledger's
    `trust_state` asked once after the import's group commit, and once more after a key
    compromise revoked something here (an append); every step reads that one (upd44: an
    import brought it up to the log 22 times). ``imports``: read before the import record
    was appended, which lists only this update's entries (`compromises` skips those)."""
    after = ledger.trust_state() if SHARE_STATE else None
    _compromises(ledger, policy, signers, update, here, changes, foreign, state=after,
                 imports=imports if SHARE_STATE else None)
    policy_keys(ledger, policy, update, imports, foreign, changes)
    if SHARE_STATE and any(c["revokedHere"] for c in changes.compromised):
        after = ledger.trust_state()
    return after


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


def earlier_import(ledger: LedgerHome, digest: str | None, tree: tuple[str, int, bytes],
                   vkey: str,
                   imports: Sequence[tuple[int, Import]] | None = None,
                   state: TrustState | None = None) -> int | None:
    """The index of an import record of ``digest`` with the same evidence (the log ``vkey``,
    the tree), if any: a tree this ledger accepted then (`exchange.import_bundle`: an older
    bundle imported again after its log's later updates is no rollback, out43 finding 6); with
    ``digest`` None, of any subject (an update bundle imported again after a later one: out53).
    ``imports``, ``state``: this ledger's import records and state, read already."""
    state = state or ledger.trust_state()
    for i, pred in import_records(ledger, vkey, state) if imports is None else imports:
        if pred.log.get("vkey") != vkey:
            continue
        entry = state.entry(i)
        if entry is None or (digest is not None and entry.subject != digest):
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



def _clashes(ledger: LedgerHome, indices: Sequence[int], changes: Changes,
             state: TrustState | None = None) -> None:
    """Names of records just imported that other records here also have: this ledger's own
    name wins (`catalog.Catalog.resolve`); another origin's makes the plain name ambiguous.
    Names come from the trust state's index of names (one query; it read them from the same
    statements), not from re-reading every record just imported. A record just imported came
    from this update's log alone (none held before: `apply_update`'s ``fresh``)."""
    state = state or ledger.trust_state()
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
        mine = changes.origin
        for other in by_name[(name, version)]:
            if other.subject == entry.subject or other.kind != entry.kind:
                continue
            theirs = origins.names(other.index)
            if not theirs:
                changes.clashes.append(
                    f"name clash: {entry.kind} {ref} from {mine} has the name of your own "
                    f"{entry.kind} {ref} ({other.subject[:19]}…): '{shell_word(ref, SHOWN)}' "
                    "names yours; refer to the imported one as "  # (shell words: rev48)
                    f"'{shell_word(f'{mine}+{ref}', SHOWN)}'")
            else:
                changes.clashes.append(
                    f"name clash: {entry.kind} {ref} from {mine} has the name of "
                    f"{entry.kind} {ref} from {theirs[0]} ({other.subject[:19]}…): refer to "
                    "each by its origin-qualified name "
                    f"('{shell_word(f'{mine}+{ref}', SHOWN)}', "
                    f"'{shell_word(f'{theirs[0]}+{ref}', SHOWN)}')")
