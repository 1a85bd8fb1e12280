"""The log in a directory: the single writer that only grows it (`Log`).

Scope: `Log` is a `LogReader` (``reader``: opening, the classified state, entries, proofs,
lookups; readers never write, rename, truncate, republish or delete anything under ``log/``)
that also creates a log, appends (under the flock of ``.state/lock``), recovers forward,
publishes checkpoints, takes cosignatures and rotates the log key.

Writers recover only forward, under the lock: files past the committed size (an append that died
before its commit) are removed, a committed but unsigned tail is republished, nothing at or below
the committed size is ever deleted, and nothing smaller or different than the largest checkpoint
ever signed is signed. A state no crash can produce is tampering (`TamperError`, exit 1) and
writers refuse to append to it, leaving every file as found.

Appending (one group commit): build the entries (each names the leaf hash of the one before in
``prev``) and sign the new checkpoint; write the entry bundles and hash tiles (under their own
names: all past the committed size), append the history record, write ``treeState`` and the
checkpoint to temp files; fsync all of these and the directories of the new names in one concurrent
round; rename ``treeState`` into place and fsync ``.state/`` (the commit); rename the checkpoint
into place and fsync the log directory (publication); then the ``on_publish`` hook. Three waits for
the disk per commit, whatever its size (docs/PERFORMANCE.md, "Durable appends", says why each is
needed).
Appending is idempotent by envelope digest, across processes and after a crash.

Fork safety: a `Log` used in a child after ``fork()`` re-opens its lock file (``reader`` drops
the inherited handle), so forked writers exclude each other like separate processes.

Non-scope: what an entry's envelope says (``ledger.record`` makes them; ``verify/`` checks them),
the files written and synced (``files``), removing leftovers (``recovery``), checking the whole
log (``check``), witnessing (``witness``), serving the log over HTTP (the
layout can be served as static files).
Spec: schemas/log-entry.v1.md; c2sp.org/tlog-tiles, tlog-checkpoint, signed-note; RFC 6962.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time as _time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Self

from trajledger._signals import appending
from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.errors import FormatError
from trajledger.verify.ledger_dir import read_regular
from trajledger.verify.log_entry import GENESIS_PREV, LogEntry
from trajledger.verify.log_key import Handover, handover_checkpoint, parse_handover
from trajledger.verify.merkle import EMPTY_ROOT, leaf_hash
from trajledger.verify.note import (
    ALG_ED25519,
    Note,
    Verifier,
    verifier_from_vkey,
)

from ..encode import checkpoint_text, format_signature_line, verifier_vkey, vkey_string
from ..errors import (
    KeyError_,
    LedgerError,
    LogError,
    StoppedAfterRecordError,
    TamperError,
    next_step,
)
from ..fs import fsync_dir, open_dirs_below, write_file_atomic
from ..keys import Signer
from .edge import ZERO_HASH, Edge
from .files import SyncRound, open_own, unlink, write_new
from .layout import (
    CHECKPOINT_FILE,
    HANDOVER_DIR,
    INFLIGHT_FILE,
    INFLIGHT_MARK,
    LEGACY_INDEX_FILE,
    LOCK_FILE,
    STATE_DIR,
    TREE_STATE_FILE,
    VKEY_FILE,
    LogPaths,
    format_tree_state,
    history_record,
)
from .reader import LogReader
from .recovery import remove_leftovers, truncate_history
from .spec import Appended, EntrySpec, OneRecord, SignerSource, note_key_bytes
from .state import LogState, tamper

__all__ = ["EntrySpec", "Log", "OneRecord", "SignerSource"]


def _now() -> str:
    return _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime())


def _log_verifier(origin: str, signer: Signer) -> Verifier:
    raw = note_key_bytes(signer, "log")
    try:
        return verifier_from_vkey(vkey_string(origin, raw, ALG_ED25519))
    except FormatError as e:
        raise LogError(f"log origin {origin!r}: {e}") from e


class Log(LogReader):
    """An open transparency log directory. Build with `Log.create` or `Log.open`.

    Reading (entries, proofs, lookups) needs no lock, writes nothing, and sees the latest signed
    checkpoint. Appending needs the log's signer (passed directly, or as a function called on
    first use so that an encrypted key is only decrypted when something is appended). A `Log`
    is thread-safe and fork-safe; any number of processes may open the same directory.

    Attributes:
        directory: the log directory.
        verifier: the log's public key as a signed-note verifier.
    """

    _held: tuple[Signer, bytes] | None = None
    """The signer `_key_now` last saw and its public key's bytes (`_held_key`)."""

    _own: tuple[Signer, bytes | None] | None = None
    """The signer `_signs_as_log` last saw and the public key its private key derives."""

    reload_signer: Callable[[], Signer] | None = None
    """Set by the ledger: the log's key loaded again from where it was loaded (the ledger's
    ``log-key/``), its passphrase only from where a running command can have it (a variable or
    a file, never a prompt); an append follows with it a rotation published meanwhile
    (`_key_now`). None: a rotated key is refused."""

    # -- creating and opening -----------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        origin: str,
        signer: Signer,
        *,
        cache_dir: Path | None = None,
        on_publish: Callable[[bytes], None] | None = None,
    ) -> Self:
        """Create an empty log: its verifier key, a treeState of size 0 and a signed checkpoint.

        Args:
            directory: where the log lives (created; must not already hold a log).
            origin: the checkpoint origin, also the log key's name in the signed note.
            signer: the log's Ed25519 key.
            cache_dir: where derived lookup data may be kept (None: in memory).
            on_publish: called with each checkpoint note this object publishes.

        Returns:
            The open log.

        Raises:
            LogError: a log already exists there, the origin is not a valid key name, the key is
                not Ed25519, or the files cannot be written.
        """
        verifier = _log_verifier(origin, signer)
        if (directory / TREE_STATE_FILE).exists() or (directory / CHECKPOINT_FILE).exists():
            raise LogError(f"{directory}: a log already exists here")
        log = cls(directory, verifier, signer, cache_dir=cache_dir, on_publish=on_publish)
        try:
            (directory / STATE_DIR).mkdir(parents=True, exist_ok=True)
            write_file_atomic(directory / VKEY_FILE, verifier_vkey(verifier).encode() + b"\n")
            with log._locked():
                ts = format_tree_state(0, EMPTY_ROOT)
                write_file_atomic(directory / TREE_STATE_FILE, ts)
                log._recovered = log._cleaned = True
                log._publish_new(signer, Edge(0, [], [], [], ZERO_HASH), ts)
        except OSError as e:
            raise LogError(f"{directory}: cannot create the log: {e.strerror or e}") from e
        return log

    # -- appending ------------------------------------------------------------------------------

    def _get_signer(self) -> Signer:
        if self._signer is None:
            if self._signer_source is None:
                raise LogError(f"log {self.origin}: opened without its key; cannot append")
            if isinstance(self._signer_source, Signer):
                signer = self._signer_source
            else:
                signer = self._signer_source()
            if self.reload_signer is None or self._vkey_file() == self.vkey:
                self._check_signer(signer)
            # (else loaded after a rotation published since the log was read: judged under the
            # lock before it signs, `_key_now`, which follows the rotation or refuses)
            self._signer = signer
        return self._signer

    def require_signer(self) -> None:
        """Load the log's key now, so that a missing key or passphrase fails before a caller
        does work whose result it would then fail to append.

        Raises:
            LogError: the log was opened without a key, or the key is not the log's.
            KeyError_: the key cannot be loaded (unknown, wrong passphrase).
        """
        self._get_signer()

    def append(
        self,
        specs: Sequence[EntrySpec],
        *,
        check: Callable[[int], None] | None = None,
        foreign: bool = False,
    ) -> Appended:
        """Append entries in one group commit; return each one's index, and which of them
        this append made (`Appended`).

        An entry whose envelope is already in the log (appended earlier, by any process, or
        earlier in ``specs``) is not added again: its existing index is returned.

        Steps:
            1. Take the flock; classify the state (tampering refuses, nothing written); recover
               forward (leftovers past the committed size removed, a committed unsigned tail
               republished).
            2. Run ``check`` with the committed size: raising aborts with nothing written.
            3. Find the envelopes already logged (confirmed on the entries); and, unless
               ``foreign``, let `one_record` judge each entry of its kinds whose subject the
               log (or this append) already has a record of, of its kind: one record per
               digest.
            4. Build the new entries, chained by ``prev``; compute the new tiles; sign the new
               checkpoint.
            5. Write bundles and tiles (under their own names: past the committed size, nobody
               reads them), the history record, treeState and the checkpoint (temp files);
               fsync them all, and the directories of the new names, in one concurrent round.
            6. Rename treeState into place and fsync its directory: the commit.
            7. Rename the checkpoint into place and fsync its directory: the publication.
            8. Call ``on_publish``.

        Args:
            specs: the entries to append, in order.
            check: a precondition run under the lock (e.g. a policy serial must still be the
                next one); an exception from it propagates and nothing is appended.
            foreign: the entries are another log's records, logged here by an import: not
                judged by `one_record` (they are no second record of this origin).

        Returns:
            The index of each spec's entry, in the order of ``specs``; ``made`` tells an entry
            this call made from one logged before (judged under the lock, so of processes
            racing with the same envelope exactly one is told it made it).

        Raises:
            TamperError: the log's files contradict what was signed or committed.
            LogError: no signer, another log's key, an envelope already logged with another
                kind or subject, or an I/O error (the log is then unchanged unless the error
                came after the commit, in which case the entries are in the log and a retry
                returns their indices).
        """
        if not specs:
            return Appended([], [])
        signer = self._get_signer()
        with self._locked():
            # (1)
            st, signer = self._writer_state(signer)
            edge = st.edge
            # (2)
            if check is not None:
                check(edge.size)
                st, signer = self._writer_state(signer)  # the check only reads; make sure of it
                edge = st.edge
            # (3)
            existing = self._find("env", [s.envelope for s in specs], st, writer=True)
            rule = None if foreign else self.one_record
            unique = [s.subject for s in specs if rule is not None and s.kind in rule.kinds]
            about = self._find("subj", unique, st, writer=True) if unique else {}
            new: list[EntrySpec] = []
            pending: dict[str, int] = {}
            result: list[int] = []
            for spec in specs:
                hits = existing.get(spec.envelope)
                if hits:
                    self._check_same(hits[0], spec, st)
                    result.append(hits[0])
                    continue
                index = pending.get(spec.envelope)
                if index is None and rule is not None and spec.kind in rule.kinds:
                    prior = [(i, env) for i in about.get(spec.subject, [])
                             for kind, env in [self._kind_envelope(i, st)] if kind == spec.kind]
                    prior += [(edge.size + n, s.envelope) for n, s in enumerate(new)
                              if (s.kind, s.subject) == (spec.kind, spec.subject)]
                    same = rule.judge(spec, prior) if prior else None
                    if same is not None:
                        result.append(same)
                        continue
                if index is None:
                    index = edge.size + len(new)
                    pending[spec.envelope] = index
                    new.append(spec)
                else:
                    first = new[index - edge.size]
                    if (first.kind, first.subject) != (spec.kind, spec.subject):
                        raise LogError(
                            f"envelope {spec.envelope}: given twice, as {first.kind} of "
                            f"{first.subject} and as {spec.kind} of {spec.subject}"
                        )
                result.append(index)
            if new:
                self._commit(st, new, signer)
            return Appended.since(result, edge.size)

    def _kind_envelope(self, index: int, st: LogState) -> tuple[str, str]:
        with self._reading():
            entry = LogEntry.from_bytes(self._reader_for(st).entries(index, index + 1)[0])
        return entry.kind, entry.envelope

    def _check_same(self, index: int, spec: EntrySpec, st: LogState) -> None:
        with self._reading():
            entry = LogEntry.from_bytes(self._reader_for(st).entries(index, index + 1)[0])
        if (entry.kind, entry.subject) != (spec.kind, spec.subject):
            raise LogError(
                f"envelope {spec.envelope}: already logged at index {index} as {entry.kind} of "
                f"{entry.subject}, not {spec.kind} of {spec.subject}"
            )

    def _commit(self, st: LogState, specs: Sequence[EntrySpec], signer: Signer) -> None:
        edge = st.edge
        # (4)
        now = _now()
        raws: list[bytes] = []
        hashes: list[bytes] = []
        prev = edge.prev
        for spec in specs:
            raw = spec.entry(prev.hex(), now).to_bytes()
            prev = leaf_hash(raw)
            raws.append(raw)
            hashes.append(prev)
        new_edge, writes, completed, _partial = edge.extend(raws, hashes)
        ts = format_tree_state(new_edge.size, new_edge.root)
        cp, note = self._sign(signer, new_edge)  # before any write: a refusal leaves nothing
        paths = self._paths()
        ts_tmp, cp_tmp = paths.ts_tmp, paths.cp_tmp
        self.check_lock_held()
        append = appending(self.origin, edge.size, new_edge.size)  # for an interruption's line
        try:
            self._mark_inflight(True)
            # (5)
            with SyncRound() as durable:
                for rel, data in writes:
                    durable.file(self._write(rel, data, durable, paths.root))
                self._append_history(new_edge.size, durable, paths)
                durable.file(write_new(ts_tmp, ts))
                durable.file(write_new(cp_tmp, note))
            # (6)
            if not self._lock_is_the_files():
                unlink(ts_tmp)
                unlink(cp_tmp)
                self.check_lock_held()
            os.replace(ts_tmp, paths.tree_state)
        except OSError as e:
            append.failed()
            for tmp in (ts_tmp, cp_tmp):
                unlink(tmp)
            raise LogError(f"log {self.origin}: cannot append: {e.strerror or e}{next_step(e)}"
                           ) from e  # (a full disk: what to do next, out41)
        entries = f"entries {edge.size}..{new_edge.size - 1}"
        try:  # committed (renamed): a failure from here on must not say it is not
            fsync_dir(paths.state)
        except OSError as e:
            unlink(cp_tmp)
            raise LogError(
                f"log {self.origin}: {entries} are recorded (committed), but the disk did not "
                f"confirm it is durable: {e.strerror or e}; the next command publishes them"
            ) from e
        self._state = LogState((st.note, ts), st.checkpoint, st.note, new_edge.size,
                               new_edge.root, new_edge)  # fmt: skip
        self._readers = {}
        # (7)
        try:
            self._publish(cp, note, new_edge, ts, staged=cp_tmp)
        except OSError as e:
            unlink(cp_tmp)
            raise LogError(
                f"log {self.origin}: {entries} are recorded (committed), but their checkpoint "
                f"could not be published or confirmed durable: {e.strerror or e}; the next "
                "command publishes them"
            ) from e
        append.published()
        # After publication: housekeeping whose failure changes nothing.
        with contextlib.suppress(OSError):
            self._mark_inflight(False)
        for rel in completed:
            pdir = self.directory / (rel + ".p")
            shutil.rmtree(pdir, ignore_errors=True)
        self._lookup.add(edge.size, [(s.envelope, s.subject) for s in specs], new_edge.prev)
        # (8)
        self._tell_published(note, f"{entries} are recorded and published")

    def _tell_published(self, note: bytes, done: str) -> None:
        """Call ``on_publish`` with ``note``, published: a failure there (the user's state could
        not be written) says what was ``done``, and that the state catches up later.

        Raises:
            LogError: ``on_publish`` failed (a `LedgerError`).
        """
        if self._on_publish is None:
            return
        try:
            self._on_publish(note)
        except LedgerError as e:
            if isinstance(e, TamperError):
                raise
            raise LogError(f"log {self.origin}: {done}, but your state of the log was not "
                           f"updated ({e}); it catches up on the next command") from e

    def _write(self, rel: str, data: bytes, durable: SyncRound, root: str) -> int:
        """Write a tile or bundle under its own name, left open for the commit's fsync round
        (``durable`` also gets its directory). Returns the descriptor.

        No temp file and no rename: every path a commit writes is past the committed size (a
        new full tile, a new partial width), so no reader asks for it until the commit that
        makes it durable, and one an interrupted append leaves (whole, cut short, or with bytes
        a power cut lost) is a leftover the next writer removes (docs/PERFORMANCE.md,
        "Durable appends").

        The directories on the way are walked from the log's directory by descriptors, none
        followed if it is a link (`fs.open_dirs_below`), and the file is created relative to
        the last, whose descriptor the round fsyncs: a tile directory a group member replaced
        by a link to one of theirs is refused, nothing written through it (rev14).
        """
        *parts, name = rel.split("/")
        made: set[str] = set()
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            at = open_dirs_below(top, root, parts, LogError, made=made)
        finally:
            os.close(top)
        where = "/".join([root, *parts])
        try:
            fd = write_new(f"{where}/{name}", data, dir_fd=at)
        except BaseException:
            os.close(at)
            raise
        for m in made:
            durable.directory(m)
        durable.directory_fd(where, at)
        return fd

    def _append_history(self, size: int, durable: SyncRound, paths: LogPaths) -> None:
        path = paths.history
        created = not os.path.exists(path)
        fd = open_own(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, history_record(size))
        except BaseException:
            os.close(fd)
            raise
        durable.file(fd)
        if created:
            durable.directory(paths.state)

    def _sign(self, signer: Signer, edge: Edge) -> tuple[Checkpoint, bytes]:
        """The checkpoint of ``edge``'s tree and its signed note."""
        cp = Checkpoint(self.origin, edge.size, edge.root)
        text = checkpoint_text(cp)
        line = format_signature_line(self.origin, self.verifier.key_hash, signer.sign(text))
        note = text + b"\n" + line
        if self._signs_as_log(signer):
            self.checked.own(note, self.verifier, cp)
        return cp, note

    def _signs_as_log(self, signer: Signer) -> bool:
        """Whether ``signer``'s signatures verify by the log's key, known without verifying
        one: the private key it signs with here derives the log's public key (checked once per
        signer object: a `Signer` is frozen). Then the notes `_sign` makes are kept as verified
        (`CheckedNotes.own`), and the ledger's ``on_publish`` raises the user's floor to them
        without an Ed25519 verification; a signer that signs elsewhere (a subclass), or whose
        private key is not the pair of its public half, is verified as any other note is."""
        own = self._own
        if own is None or own[0] is not signer:
            own = self._own = (signer, signer.derived_ed25519())
        return own[1] == self.verifier.public_key

    def _publish(
        self, cp: Checkpoint, note: bytes, edge: Edge, ts: bytes, *, staged: str | None = None
    ) -> None:
        """Publish ``note``, the signed checkpoint ``cp`` of ``edge``'s tree (committed as
        ``ts``): rename ``staged`` (its temp file, already fsynced) into place, or write it
        (temp, fsync, rename); then fsync the log directory. The caller calls ``on_publish``.

        Raises:
            OSError: it cannot be written.
        """
        if staged is None:
            write_file_atomic(self.directory / CHECKPOINT_FILE, note)
        else:
            paths = self._paths()
            os.replace(staged, paths.checkpoint)
            fsync_dir(paths.root)
        self._state = LogState((note, ts), cp, note, edge.size, edge.root, edge)
        self._readers = {}
        self._floor = cp

    def publish_tail(self) -> None:
        """Publish the committed tail a writer that stopped left (as the next append would
        first), so that what is judged from the checkpoint includes it; nothing when none."""
        with self._locked():
            self._writer_state(self._get_signer())

    def _publish_new(self, signer: Signer, edge: Edge, ts: bytes) -> None:
        """Sign and publish the checkpoint of a tree committed earlier (a new log, a committed
        tail left by a writer that stopped), then call ``on_publish``."""
        cp, note = self._sign(signer, edge)
        self._publish(cp, note, edge, ts)
        self._tell_published(note, f"its checkpoint of size {edge.size} is published")

    def add_cosignature(self, expected: bytes, note: bytes) -> None:
        """Replace the checkpoint ``expected`` by ``note``, the same signed tree with other
        cosignature lines (the witness's), under the lock.

        Raises:
            LogError: the checkpoint changed meanwhile (run again), or cannot be written.
            TamperError: the log's files contradict each other.
            FormatError: ``note`` is not the same checkpoint text.
        """
        if Note.from_bytes(note).text != Note.from_bytes(expected).text:
            raise FormatError("cosigned checkpoint: its text differs from the checkpoint's")
        verify_checkpoint(note, self.verifier, origin=self.origin)
        with self._locked():
            st = self._state_now()
            if st.note != expected:
                raise LogError(
                    f"log {self.origin}: the checkpoint changed while cosigning; run again"
                )
            self.check_lock_held("the cosignature was not added")
            try:
                write_file_atomic(self.directory / CHECKPOINT_FILE, note)
            except OSError as e:
                raise LogError(
                    f"log {self.origin}: cannot write the checkpoint: {e.strerror}"
                ) from e
            assert st.checkpoint is not None
            self._state = LogState((note, st.key[1]), st.checkpoint, note, st.tree_size,
                                   st.tree_root, st.edge)  # fmt: skip

    def rotate_key(self, new: Signer) -> Handover:
        """Hand the log over to the key ``new``: the current tree, signed by the old key and by
        ``new`` with a line naming both, becomes the checkpoint; from then on ``new`` signs.

        Steps:
            1. Take the lock; classify the state and recover forward (a committed unsigned
               tail is first published under the old key).
            2. Build the handover of the current tree (`verify.log_key.handover_checkpoint`),
               signed by the old key and by ``new``, and check it (`parse_handover`).
            3. Write it as ``key-handovers/<n>`` (the next number; the last one again when an
               interrupted rotation to the same key left it), then as the checkpoint
               (publication), then the ``vkey`` file naming ``new``'s key: every step is
               atomic, and until the ``vkey`` file changes the old key is the log's.
            4. Call ``on_publish`` with the handover (it is signed by the old key: the caller's
               floor for that key).

        Resuming: when the ``vkey`` file already names ``new``'s key, nothing is written and
        the last handover is returned.

        Raises:
            LogError: ``new`` is not an Ed25519 key, is the current key, an interrupted rotation
                went to another key, or a file cannot be written.
            TamperError: the log's files contradict what was signed or committed.
        """
        target = _log_verifier(self.origin, new)
        with self._locked():
            if verifier_vkey(target) == self.vkey:
                handovers = self.key_handovers()
                last = parse_handover(handovers[-1]) if handovers else None
                if last is None or last.new != verifier_vkey(target):
                    raise LogError(f"log key {new.name}: is already the key of log {self.origin}")
                return last
            old = self._get_signer()
            # (1)
            st, _ = self._writer_state(old, follow=False)  # (another rotation meanwhile: refused)
            # (2)
            cp = handover_checkpoint(Checkpoint(self.origin, st.edge.size, st.edge.root),
                                     self.vkey, verifier_vkey(target))
            text = checkpoint_text(cp)
            note = (text + b"\n"
                    + format_signature_line(self.origin, self.verifier.key_hash, old.sign(text))
                    + format_signature_line(self.origin, target.key_hash, new.sign(text)))
            handover = parse_handover(note)
            # (3)
            handovers = self.key_handovers()
            number = len(handovers) + 1
            if handovers:
                last = parse_handover(handovers[-1])
                if last.old == self.vkey:
                    if last.new != verifier_vkey(target):
                        raise LogError(
                            f"log {self.origin}: an interrupted rotation handed the key over to "
                            f"{last.new}; finish it with that key"
                        )
                    number -= 1
            unrotated = "the log's key was not rotated"  # (until `vkey` names the new key)
            try:
                self.check_lock_held(unrotated)
                (self.directory / HANDOVER_DIR).mkdir(exist_ok=True)
                write_file_atomic(self.directory / HANDOVER_DIR / str(number), note)
                self.check_lock_held(unrotated)
                write_file_atomic(self.directory / CHECKPOINT_FILE, note)
                self.check_lock_held(unrotated)
                write_file_atomic(self.directory / VKEY_FILE,
                                  verifier_vkey(target).encode() + b"\n")
            except OSError as e:
                raise LogError(f"log {self.origin}: cannot rotate its key: {e.strerror}") from e
            self.verifier = target
            self._signer = new
            self._signer_source = new
            self._state = None
            self._readers = {}
            self._floor = cp
            # (4)
            self._tell_published(note, f"its key is rotated (key handover {number})")
            return handover

    # -- locking and recovery -------------------------------------------------------------------

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        """Hold the writer's lock: no process appends meanwhile (for ``gc``).

        Returns:
            A context manager; re-entrant within this object.
        """
        return self._locked()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self._pid != os.getpid():
            self._forget_after_fork()  # forked without the at-fork hook (it normally runs)
        with self._mutex:
            path = self._paths().lock
            if self._lock_fd is None:
                try:
                    self._lock_fd = open_own(path, os.O_RDWR | os.O_CREAT)
                except FileNotFoundError as e:
                    self._state_now()  # a missing .state is tampering: say so
                    raise LogError(f"{path}: cannot open the lock: {e.strerror}") from e
                except OSError as e:
                    raise LogError(f"{path}: cannot open the lock: {e.strerror}") from e
            if not self._lock_depth:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
                for _ in range(8):  # a lock file removed since this object opened it
                    if self._lock_is_the_files():
                        break
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                    os.close(self._lock_fd)
                    self._lock_fd = None
                    try:
                        self._lock_fd = open_own(path, os.O_RDWR | os.O_CREAT)
                    except OSError as e:
                        raise LogError(f"{path}: cannot open the lock: {e.strerror}") from e
                    fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            self._lock_depth += 1  # (nested: an append within `exclusive` keeps the flock)
            try:
                yield
            finally:
                self._lock_depth -= 1
                if not self._lock_depth:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _lock_is_the_files(self) -> bool:
        """The lock this object holds is on the file the lock's path names now."""
        if self._lock_fd is None:
            return False
        try:
            held, named = os.fstat(self._lock_fd), os.stat(self._paths().lock)
        except OSError:
            return False
        return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)

    def check_lock_held(self, nothing: str = "nothing was appended", *,
                        recorded: bool = False) -> None:
        """Under the lock, before each write of its holder (an append's first write and its
        commit; `rotate_key`'s and `add_cosignature`'s; each removal of ``gc --yes``, which
        holds `exclusive`): no one removed or replaced the lock file meanwhile. Whoever may
        write the ledger could, and a second writer would then take a new lock file at once:
        two appends at one index, one lost, and the log's key signing two trees of one size
        (rev14); or an append naming an object ``gc`` then removes (fix12).

        Args:
            nothing: what the refusal says was not done.
            recorded: ``nothing`` says what its holder recorded before (a
                `StoppedAfterRecordError`).

        Raises:
            LogError: the lock file is not the one this object locked; nothing is written.
        """
        if not self._lock_is_the_files():
            raise (StoppedAfterRecordError if recorded else LogError)(
                f"{self.directory / LOCK_FILE}: the log's lock file was removed or replaced "
                f"while this command held it, so another command may be appending; {nothing}: "
                "find who writes this ledger's files, then run the command again"
            )

    def _writer_state(self, signer: Signer, *, follow: bool = True) -> tuple[LogState, Signer]:
        """Under the lock: the key to sign with (`_key_now`: ``signer``, or the key a rotation
        published meanwhile handed over to, when ``follow``); classify, recover forward,
        republish a committed unsigned tail. Returns the state and that key."""
        signer = self._key_now(signer, follow=follow)
        st = self._state_now()
        legacy = self.directory / INFLIGHT_FILE
        crashed = self._inflight() or legacy.exists()
        if not self._recovered or crashed:
            try:
                remove_leftovers(self.directory, st.tree_size)
                truncate_history(self.directory, st.tree_size)
                unlink(self.directory / LEGACY_INDEX_FILE)
            except OSError as e:
                raise LogError(f"log {self.origin}: cannot recover: {e.strerror or e}") from e
            self._recovered = True
        if not self._cleaned:
            self._cleaned = True
            if self._cleanup is not None:
                with contextlib.suppress(OSError, LedgerError):
                    self._cleanup()
        if st.unpublished:
            self._check_tail(st)
            try:
                if not st.key[1]:  # creation stopped before its first treeState
                    empty = format_tree_state(0, EMPTY_ROOT)
                    write_file_atomic(self.directory / TREE_STATE_FILE, empty)
                    st = self._state_now()
                self._publish_new(signer, st.edge, st.key[1])
            except OSError as e:
                raise LogError(f"log {self.origin}: cannot republish: {e.strerror}") from e
            st = self._state_now()
        if crashed:
            with contextlib.suppress(OSError):
                self._mark_inflight(False)
                unlink(legacy)
        return st, signer

    def _key_now(self, signer: Signer, *, follow: bool) -> Signer:
        """Under the lock: the key to sign with, the one the ``vkey`` file names.

        Another process may have rotated the log's key (`rotate_key`) after this one opened the
        log under the old key, or loaded it (``record`` and ``import`` when they start,
        ``train`` and ``eval`` when they record): signing with it now would publish a
        checkpoint the log's key never signed, which every reader refuses as tampering, and
        would keep the retired key signing (rev13 finding 1). With
        ``follow`` and a `reload_signer`, the writer follows the rotation instead (fix13): the
        handovers signed by the key this object trusts (the one it was opened under, or
        followed to before) must lead to the key ``vkey`` names (`_follow_rotation`: each
        signed by both keys it names, each handed-over tree the log's), and the key it signs
        with (loaded again, when the one held is the old) must be that one. No other key signs.

        Returns:
            ``signer``, or the key it handed over to (kept for the next appends).

        Raises:
            LogError: the key was rotated meanwhile and is not followed (no verified handover
                from the key trusted, no `reload_signer`, a passphrase that cannot be had without
                asking, another key loaded): nothing written; or ``vkey`` is unreadable.
            TamperError: a handed-over tree is not the log's, or the key file loaded again is
                not the pair of its public key (planted).
        """
        own = self._vkey_file()
        held = self._held_key(signer)
        if own == self.vkey and held == self.verifier.public_key:
            return signer
        if own == self.vkey and self.followed is None:
            self._check_signer(signer)  # (raises: a key that is not the log's, no rotation)
        reload = self.reload_signer if follow else None
        if reload is not None and own != self.vkey:
            if self._follow_rotation() is None:  # (from the key this object trusts)
                reload = None
            self._state = None  # (read again, under the key followed: the floor checked)
        if reload is not None:
            if held == self.verifier.public_key:
                return signer  # (loaded after the rotation: the key it handed over to)
            with contextlib.suppress(KeyError_):  # (no passphrase without asking: refused)
                new = reload()
                if note_key_bytes(new, "log") == self.verifier.public_key:
                    self._signer = new
                    return new
        raise LogError(
            f"log {self.origin}: its key was rotated by another command while this one ran "
            "(the log's vkey file now names another key); nothing was appended: run the "
            "command again"
        )

    def _held_key(self, signer: Signer) -> bytes:
        """``note_key_bytes(signer, "log")``, kept for the signer last asked about (a `Signer`
        is frozen: its key cannot change)."""
        held = self._held
        if held is None or held[0] is not signer:
            held = self._held = (signer, note_key_bytes(signer, "log"))
        return held[1]

    def _vkey_file(self) -> str:
        """The key the ``vkey`` file names now.

        Raises:
            LogError: it cannot be read.
        """
        path = self._paths().vkey
        try:
            return read_regular(path).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise LogError(f"{path}: cannot read: {e}") from e

    def _inflight(self) -> bool:
        """Under the lock: whether an append marked itself in flight and never finished."""
        assert self._lock_fd is not None
        try:
            return os.pread(self._lock_fd, 1, 0) == INFLIGHT_MARK
        except OSError as e:
            raise LogError(f"{self.directory / LOCK_FILE}: cannot read: {e.strerror}") from e

    def _mark_inflight(self, inflight: bool) -> None:
        """Under the lock: set or clear the in-flight byte of ``.state/lock`` (not fsynced: a
        killed writer leaves it in the page cache; a power cut may lose it, but after one every
        writer is a new process, which recovers before its first append)."""
        assert self._lock_fd is not None
        os.pwrite(self._lock_fd, INFLIGHT_MARK if inflight else b"0", 0)

    def _check_tail(self, st: LogState) -> None:
        """A committed tail about to be signed must parse and chain from the signed tree."""
        start = st.published
        if start == st.tree_size:
            return
        reader = self._reader_for(st)
        with self._reading():
            raws = reader.entries(start, st.tree_size)
            prev = reader.leaf_hashes(start - 1, start)[0].hex() if start else GENESIS_PREV
        for i, raw in enumerate(raws, start):
            try:
                entry = LogEntry.from_bytes(raw, f"log entry {i}")
            except FormatError as e:
                raise tamper(self.directory / "tile", f"unsigned tail: {e}") from e
            if entry.prev != prev:
                raise tamper(
                    self.directory / "tile",
                    f"unsigned tail: entry {i}: prev is {entry.prev}, want {prev}",
                )
            prev = entry.leaf_hash.hex()
