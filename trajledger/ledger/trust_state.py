"""The user's trusted state of a log: the newest checkpoint seen, and an index of its entries.

Scope: for each log a user works with (identified by its verifier key), a SQLite database in the
user's state directory (`trajledger.ledger.user_state.state_dir`), outside every ledger
directory, so that write access to a ledger cannot lower what was seen or hide what was recorded:

- **the floor**: the newest signed checkpoint this user verified. A log whose checkpoint is
  smaller (rollback) or a different tree (fork) is tampering: `TamperError`, nothing written.
- **the index** of every entry under that checkpoint (`verify.log_index.LogIndex`): by subject,
  kind, the digests a record lists (a dataset's batches, an erasure's blobs), the artifacts
  depending on a digest (for ``impact``), names and versions (the catalog), the holdout and
  regression datasets (so the gate's contamination check does not read every dataset), and the
  records of listing kinds whose envelope could not be read (a verifier fails what they could
  affect).

Protection: the state directory is made 0700 and its databases 0600; a state directory, database
or pin others (or the group) may write is refused. The floor is committed durably
(``synchronous=FULL``). The rows that restrict decisions (entries, names, listings, references,
held-out datasets, unreadable records) are derived from the verified log only; their counts are
stored with each extension and checked before each use (after a commit by any connection: one
with none since the last check finds what it checked, `TrustState.sync`), so a deleted or added
row is refused (`TamperError`: run ``trajledger reindex``), and `TrustState.disagreements`
(``trajledger reindex --check``, ``fsck``) derives every row again from the log and compares,
read-only. A writer of the state directory can still change rows consistently with their
counts, or delete the whole state (the next use is a first use: announced, or refused under
``TRAJLEDGER_REQUIRE_PIN=1``); docs/SECURITY.md says so.

It is extended incrementally (`TrustState.sync`): the stored right edge of the tree (a
`verify.compact.CompactRange`) plus the new entries must give the new signed root, and each new
entry's ``prev`` must be the leaf hash before it, so only the new entries are read. A fresh state
reads the whole log once (with progress; a long reading from a local store reads envelopes in
worker processes, `Workers`). Answers are where to look, never what to believe: the verifier
still verifies each record it uses. Envelopes are read unverified here only to learn what a
record lists and names: strictly parsed, except a rollout batch's, whose rows come from a few
members (`batch_fields`).

Concurrency: SQLite transactions (``BEGIN IMMEDIATE``) serialise processes extending the same
state; a reader sees a consistent snapshot. Threads of one process may share a `TrustState`
(a log writer's group commit publishes from its own thread): one lock serialises each statement
and holds for a whole transaction, so no thread reads another's uncommitted work.
Non-scope: verifying signatures (``verify.lineage``), the log's files (``ledger.log``), the
queries answered from the index and the connection threads share (``trust_index.py``), the
tables' layout (``trust_schema``), the floor's checks against a newer tree and the other values
kept of the log (``trust_floor.py``, which `TrustState` is).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.compact import CompactRange
from trajledger.verify.errors import FormatError, ProvenanceError
from trajledger.verify.log_entry import GENESIS_PREV, LogEntry
from trajledger.verify.merkle import leaf_hash
from trajledger.verify.note import Verifier, verifier_from_vkey
from trajledger.verify.times import format_time, parse_time

from .errors import LedgerError, TamperError, cannot_write, shell_word, sqlite_next_step
from .fs import drop_stale_temps, write_file_atomic
from .log.checked import CheckedNotes
from .trust_floor import TrustFloor
from .trust_index import LockedDB
from .trust_rows import WORKERS, DerivedRows, Workers, derive, read_or_none, reads_envelope
from .trust_schema import INDEXES, SCHEMA, TABLES
from .user_state import (
    fingerprint,
    known_origin,
    log_id,
    notice,
    origin_dir,
    private_dir,
    read_state_file,
    refuse_foreign,
    state_dir,
)

if TYPE_CHECKING:
    from .progress import ProgressFactory

__all__ = [
    "TrustState",
    "one_spelling",
]

STATE_FORMAT = 3
"""2: adds the held-out datasets; 3: import records list the envelopes of the foreign records
they brought (a state of an older format re-reads the log once, keeping its floor)."""
_CHUNK = 1024
_PARALLEL_FROM = 8 * _CHUNK
"""A reading of at least this many entries from a local store reads in `trust_rows.Workers`."""
_AHEAD = 2 * WORKERS
"""Runs handed to the workers ahead of the one being inserted."""
_BULK_FROM = 4 * _CHUNK
"""A first use of at least this many entries builds the derived tables' indexes after their
rows (one sort each, not a random B-tree insert per row: 1/3 the system time at 100k)."""

_LAYOUT = frozenset(line.split()[5] for line in SCHEMA.splitlines()
                    if line.startswith(("CREATE TABLE", "CREATE INDEX")))
"""The names of the tables and indexes `SCHEMA` makes."""

_BUSY_TIMEOUT = 60.0
"""Seconds a write waits for another process's transaction on the same state."""

WAIT_LIMIT = 1800.0
"""Seconds a process waits for another one that holds the state (`_begin`)."""

_QUIET_WAIT = 5.0
"""Seconds a process waits for another one's write before it says it is waiting."""

USED_EVERY = dt.timedelta(minutes=1)
"""How often the time a state is used at is noted (`TrustState.used_at`)."""

_READING = "reading"
"""The file beside the state where a process reading many entries keeps ``done total``."""


@contextlib.contextmanager
def _reading_kept(path: Path) -> Iterator[None]:
    """Remove the progress file `_write_reading` kept, however the reading ends."""
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            (path / _READING).unlink(missing_ok=True)


def _write_reading(path: Path, done: int, total: int) -> None:
    """Tell waiting processes how far this reading is (`TrustState._reading`)."""
    with contextlib.suppress(OSError):
        (path / _READING).write_text(f"{done} {total}\n")


def _wal(db: sqlite3.Connection, wait: float = _BUSY_TIMEOUT) -> None:
    """Put a new database in WAL mode (it stays so). Processes opening it for the first time at
    once may find it locked, and SQLite does not wait for this pragma itself: retry."""
    deadline = time.monotonic() + wait
    while True:
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def one_spelling(vkey: str) -> str:
    """``vkey`` as keys are written (`encode.verifier_vkey`: the key ID in lower case): one
    key, one state. The key's ID in capitals is the same key to `verifier_from_vkey`; as
    another string it opened another state, with no floor: a rollback passed ``monitor``
    (docs/SECURITY.md, review redo21, finding 4).

    Raises:
        FormatError: not a verifier key.
    """
    from .encode import verifier_vkey

    return verifier_vkey(verifier_from_vkey(vkey))


class TrustState(TrustFloor):
    """The trusted state of one log for this user. Build with `TrustState.open`."""

    def __init__(self, path: Path, vkey: str, db: sqlite3.Connection) -> None:
        """Use `TrustState.open`."""
        self.path = path
        self._root = path.parent.parent  # the state directory (path is <root>/logs/<id>)
        self.vkey = vkey
        self.verifier: Verifier = verifier_from_vkey(vkey)
        self._db = LockedDB(db)
        self._size, self._range, self._note, self._last = self._read_meta()
        self.progress: ProgressFactory | None = None
        """Draws the bar shown while waiting for another process reading the log (`_begin`)."""
        self.checked = CheckedNotes()
        """Verifies the notes of this log by `verifier`, each once: the floor read back with the
        same bytes is not verified again (one Ed25519 verification a publication); the ledger's
        handle gives it its own, which its log and the verifier over this state share."""
        self._rederive = False
        """Set by ``rebuild(at_next_sync=True)``: the next `sync` forgets the rows and derives
        them again in its own transaction."""
        self._synced: tuple[bytes, int] | None = None
        """The note the last `sync` left this state at and the database's ``data_version``
        read in its transaction, while nothing was left unreadable: a `sync` to the same note
        with no commit since (ours or another connection's) would change and refuse nothing."""
        self._unreadable_left = 0

    @classmethod
    def floor_seen(cls, vkey: str, directory: Path | None = None, tree: Checkpoint | None = None
                   ) -> bytes | None:
        """The floor of this user's state of the log ``vkey`` (the newest signed checkpoint of
        it they have seen), or None when they hold no state of it: then none is made. With
        ``tree`` (a checkpoint ``vkey`` signed), first `check_retired`.

        Raises:
            LedgerError: the state exists and cannot be read.
            ConsistencyError: ``tree`` is beyond this key's handover.
        """
        vkey = one_spelling(vkey)
        if not ((directory or state_dir()) / "logs" / log_id(vkey) / "state.sqlite").is_file():
            return None
        state = cls.open(vkey, directory)
        try:
            if tree is not None:
                state.check_retired(tree, f"log {tree.origin}")
            return state.floor()
        finally:
            state.close()

    @classmethod
    def open(cls, vkey: str, directory: Path | None = None) -> TrustState:
        """Open (creating when new) the state of the log with verifier key ``vkey``.

        Args:
            vkey: the log's C2SP verifier key string.
            directory: the state directory (default `state_dir`).

        Raises:
            LedgerError: the state cannot be created or read.
        """
        vkey = one_spelling(vkey)
        root = private_dir(directory or state_dir(), parent=False)
        base = private_dir(private_dir(root / "logs") / log_id(vkey))
        file = base / "state.sqlite"
        for f in (file, base / "state.sqlite-wal", base / "state.sqlite-shm"):
            refuse_foreign(f)
        try:
            new = not file.exists()
            db = sqlite3.connect(
                file,
                isolation_level=None,
                timeout=_BUSY_TIMEOUT,
                check_same_thread=False,
            )
            if new:
                os.chmod(file, 0o600)  # SQLite gives its -wal and -shm files the same mode
            _wal(db)
            # The floor must survive a crash once a command said it was seen: every commit is
            # synced (NORMAL in WAL mode may lose the last ones).
            db.execute("PRAGMA synchronous=FULL")
            # A new database's tables in one synced commit (IMMEDIATE: a second creator waits).
            if new:
                db.executescript(f"BEGIN IMMEDIATE;{SCHEMA}COMMIT;")
        except (OSError, sqlite3.Error) as e:
            raise LedgerError(f"trust state {base}: cannot open: {e}{sqlite_next_step(e)}") from e
        # An existing one's are made again only when one is missing (an older format's, or
        # dropped): one statement, not SCHEMA's 17, in every command (ci47). A read of it the
        # disk fails is a read of the state, as the ones after it are (not "cannot open").
        if not new and _LAYOUT - {r[0] for r in db.execute("SELECT name FROM sqlite_master")}:
            db.executescript(SCHEMA)
        state = cls(base, vkey, db)
        stored = state._meta("vkey")
        if stored is None:
            with state._write():
                state._put("vkey", vkey.encode())
                state._put("format", str(STATE_FORMAT).encode())
        elif stored.decode() != vkey:
            db.close()
            raise LedgerError(
                f"trust state {base}: holds the state of another log key "
                f"({fingerprint(stored.decode('utf-8', 'replace'))}), copied or moved here; "
                f"nothing was read or changed: remove {base}, then pin the checkpoint of "
                f"{verifier_from_vkey(vkey).name} you trust ('trajledger trust {shell_word(vkey)} "
                "--checkpoint FILE')"
            )
        elif state._meta("format") != str(STATE_FORMAT).encode():
            # An older state lacks what this version indexes: the log is read again (the floor
            # stays) at the first sync, in its transaction, which marks the format: a command
            # reading the rows meanwhile finds the old ones, never none (review rev12).
            state.rebuild(at_next_sync=True)
        state._register()
        return state

    @staticmethod
    def forget(vkey: str, directory: Path | None = None) -> None:
        """Remove the state of the log key ``vkey`` and its note under its origin, and the
        origin's pinned settings when no other key of it is known (an interrupted ``init``
        undoing what it made)."""
        from .fs import remove_tree

        root = directory or state_dir()
        remove_tree(root / "logs" / log_id(vkey))
        origin = origin_dir(verifier_from_vkey(vkey).name, root)
        remove_tree(origin / log_id(vkey))
        if known_origin(verifier_from_vkey(vkey).name, root) is None:
            remove_tree(origin)  # no other key of it: the origin's pins go too

    def _register(self) -> None:
        """Note this key under its log's origin (``origins/<id>/<key id>`` holds the vkey), so
        that a state for another key of the same log can find it (`siblings`)."""
        mark = self._root / "origins" / log_id(self.verifier.name) / log_id(self.vkey)
        if mark.exists():
            return
        try:
            private_dir(private_dir(self._root / "origins") / mark.parent.name)
            drop_stale_temps(mark.parent)  # a killed import's (left23's fault sweep)
            write_file_atomic(mark, self.vkey.encode() + b"\n", mode=0o600)
        except OSError as e:
            raise LedgerError(cannot_write(f"trust state {mark}", e)) from e

    def sibling(self, vkey: str) -> TrustState:
        """The state of another log key in the same state directory.

        Raises:
            LedgerError: it cannot be opened.
        """
        return TrustState.open(vkey, self._root)

    def siblings(self) -> list[TrustState]:
        """The states of this user's other keys of the same log (same origin) that hold a
        floor or were pinned ahead: what a key without one must continue (`continue_trust`)."""
        out: list[TrustState] = []
        directory = self._root / "origins" / log_id(self.verifier.name)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return out
        for name in names:
            if name == log_id(self.vkey) or name.startswith("."):
                continue
            try:
                vkey = read_state_file(directory / name).strip()
                other = TrustState.open(vkey, self._root)
            except (OSError, UnicodeDecodeError, ProvenanceError):
                continue  # not a key: nothing this user trusted
            if other.floor() is not None or other.pinned():
                out.append(other)
            else:
                other.close()
        return out

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def used_at(self, now: dt.datetime | None, ahead: dt.datetime | None = None
                ) -> dt.datetime | None:
        """The newest time this state was used at before (a verifier's clock: `runner.verification.
        ledger_verifier`), noting ``now`` (None: only read) when newer by `USED_EVERY`: a clock
        set back later is judged no earlier (state26 finding 3); given ``ahead`` (rev27:
        `trust_pins.forget_clock_ahead`), in its place only. A time not parsed is none."""
        def stored() -> dt.datetime | None:
            raw = self._meta("used_at")
            with contextlib.suppress(FormatError, UnicodeDecodeError):
                return None if raw is None else parse_time(raw.decode(), "used_at")
            return None

        seen = stored()
        if now is not None and (seen is None or now - seen >= USED_EVERY or ahead):
            with self._write():
                current = stored()
                if current == ahead if ahead else current is None or now > current:
                    self._put("used_at", format_time(now).encode())
        return seen

    # -- meta ------------------------------------------------------------------------------------

    def _meta(self, key: str) -> bytes | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def _put(self, key: str, value: bytes) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def _read_meta(self) -> tuple[int, CompactRange, bytes | None, bytes]:
        raw = self._meta("range")
        if raw is None:  # nothing indexed (yet, or since `rebuild`): the floor still holds
            return 0, CompactRange(), self._meta("checkpoint"), bytes.fromhex(GENESIS_PREV)
        try:
            doc = json.loads(raw)
            rng = CompactRange(int(doc["size"]), tuple(bytes.fromhex(h) for h in doc["hashes"]))
            last = bytes.fromhex(doc["last"])
        except (ValueError, KeyError, TypeError, ProvenanceError) as e:
            raise LedgerError(
                f"trust state {self.path}: damaged ({e}); remove the directory, then pin a "
                "checkpoint you trust "
                f"('trajledger trust {shell_word(self.vkey)} --checkpoint FILE')"
            ) from e
        return rng.size, rng, self._meta("checkpoint"), last

    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        """A write transaction: committed, or rolled back whatever stops it. A statement or a
        commit SQLite cannot write (a full disk, an I/O error) is a `LedgerError` (exit 3)."""
        with self._db.lock:
            self._synced = None  # (`sync` sets it again once committed)
            try:
                self._begin()  # in the try: a Ctrl-C just after its BEGIN is rolled back (out40)
                yield
                self._db.execute("COMMIT")
            except BaseException as e:
                self._synced = None
                with contextlib.suppress(sqlite3.Error):  # none left after a failed COMMIT
                    self._db.execute("ROLLBACK")
                if isinstance(e, sqlite3.Error):
                    raise LedgerError(f"trust state {self.path}: cannot write: {e}; nothing "
                                      f"was changed in it{sqlite_next_step(e)}") from e
                raise

    def _begin(self) -> None:
        """Begin a write transaction. When another process of this user holds the state, wait
        for up to `WAIT_LIMIT` seconds; say so once when that process is reading the log for
        the first time (it holds the state throughout, and keeps `_READING` up to date: its
        progress is drawn) or when the wait passes `_QUIET_WAIT` seconds (another writer's
        commit is usually shorter)."""
        if self._try_begin(0.5):
            return
        start = time.monotonic()
        told, seen = False, 0
        with contextlib.ExitStack() as bar:
            advance: Callable[[int], None] | None = None
            while not self._try_begin(0.25):
                waited = time.monotonic() - start
                done, total = self._reading()
                if not told and (total or waited > _QUIET_WAIT):  # said before giving up
                    told = True
                    notice(f"waiting for another trajledger process of yours, which holds your "
                           f"state of this log ({self.path}); reading a large log for the first "
                           "time takes about 0.1 ms per entry")
                if waited > WAIT_LIMIT:
                    raise LedgerError(
                        f"trust state {self.path}: still held by another trajledger process of "
                        f"yours after {WAIT_LIMIT:.0f} s; let it finish, then run this again")
                if advance is None and total and self.progress is not None:
                    advance = bar.enter_context(
                        self.progress(total, "waiting: another process reads the log"))
                if advance is not None and done > seen:
                    advance(done - seen)
                    seen = done

    def _try_begin(self, wait: float) -> bool:
        """BEGIN IMMEDIATE, waiting up to ``wait`` seconds; False when the state stayed held."""
        db = self._db
        try:
            db.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
            db.execute("BEGIN IMMEDIATE")
            return True
        except sqlite3.Error as e:
            if isinstance(e, sqlite3.OperationalError) and ("locked" in str(e) or "busy" in str(e)):
                return False
            raise LedgerError(f"trust state {self.path}: cannot write: {e}"
                              f"{sqlite_next_step(e)}") from e
        finally:
            db.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT * 1000)}")

    def _reading(self) -> tuple[int, int]:
        """How far another process's reading of the log is (entries done, total), from the
        file it keeps beside the state while it reads; (0, 0) when there is none."""
        try:
            done, total = read_state_file(self.path / _READING).split()
            return int(done), int(total)
        except (OSError, ValueError):
            return 0, 0

    # -- extending -------------------------------------------------------------------------------

    def sync(
        self,
        note: bytes,
        read_entries: Callable[[int, int], Sequence[bytes]],
        read_blob: Callable[[str], bytes | None],
        *,
        what: str = "log/checkpoint",
        on_progress: Callable[[int], None] | None = None,
        blob_reader: Callable[[], Callable[[str], bytes | None]] | None = None,
    ) -> None:
        """Extend the state to the signed checkpoint ``note`` (`_sync`); after
        ``rebuild(at_next_sync=True)``, from an empty index, in the same transaction.

        A command asks for its state several times (its policy, each name it resolves, each
        record it checks: ci47 counted 3.9 a command, 12 to 17 statements and a write lock
        each). The same note again, after a sync that left nothing unreadable and with no
        commit to the database since by any connection (SQLite's ``data_version``; this
        object's own writes clear `_synced`), finds the rows, counts and floor that sync left,
        and would only repeat its checks on them: one statement answers instead."""
        synced = self._synced
        if (synced is not None and synced[0] == note and not self._rederive
                and self._db.execute("PRAGMA data_version").fetchall()[0][0] == synced[1]):
            return
        self._sync(note, read_entries, read_blob, what=what, on_progress=on_progress,
                   blob_reader=blob_reader)
        self._rederive = False  # committed

    def _sync(
        self,
        note: bytes,
        read_entries: Callable[[int, int], Sequence[bytes]],
        read_blob: Callable[[str], bytes | None],
        *,
        what: str = "log/checkpoint",
        on_progress: Callable[[int], None] | None = None,
        blob_reader: Callable[[], Callable[[str], bytes | None]] | None = None,
    ) -> None:
        """Extend the state to the signed checkpoint ``note``.

        Steps:
            1. Verify ``note`` with the log's key; it must not be smaller than the floor
               (rollback) nor another tree of the same size (fork).
            2. Read the new entries; each must parse and chain to the one before (``prev``);
               the stored right edge extended with their leaf hashes must give the signed root.
            3. Index them (reading envelopes of named, listing and lineage kinds), retry the
               records whose envelope could not be read before, and store the new floor; all in
               one transaction.

        Args:
            note: the log's current signed checkpoint.
            read_entries: ``(start, end) -> entry bytes`` from the log (unverified).
            read_blob: ``digest -> bytes or None`` from the store (unverified).
            what: names the checkpoint in messages.
            on_progress: called with the number of entries indexed so far, in chunks.
            blob_reader: makes a ``read_blob`` in another process (picklable: a local store's);
                given, a long reading (`_PARALLEL_FROM`) reads and parses the envelopes in
                worker processes while this one reads, chains and inserts.

        Raises:
            TamperError: a rollback, a fork, or entries that do not give the signed root.
            FormatError, SignatureError: the checkpoint is malformed or not signed by the log.
        """
        cp = self._checkpoint(note)  # (1)
        with self._write(), _reading_kept(self.path):
            version = int(self._db.execute("PRAGMA data_version").fetchall()[0][0])
            if self._rederive:  # in this transaction: no reader ever finds the rows gone
                self._forget_rows()
                self._put("format", str(STATE_FORMAT).encode())
            self._size, self._range, self._note, self._last = self._read_meta()
            self._check_counts()
            floor = self.floor_checkpoint()
            if floor is not None and cp.size < floor.size:
                raise TamperError(
                    f"{what}: rollback: the log's signed checkpoint has size {cp.size}, but "
                    f"size {floor.size} was seen before (root {floor.root.hex()[:16]}…); the "
                    "log was rolled back or replaced. Nothing was changed.",
                    Path(what),
                )
            if floor is not None and cp.size == floor.size and cp.root != floor.root:
                raise TamperError(
                    f"{what}: fork: the log's signed checkpoint at size {cp.size} has root "
                    f"{cp.root.hex()[:16]}…, but root {floor.root.hex()[:16]}… was seen "
                    "before at that size. Nothing was changed.",
                    Path(what),
                )
            if self._size == cp.size:
                if self._retry_unreadable(read_blob):
                    self._store_counts()
                if self._note != note:
                    self._put("checkpoint", note)  # same tree: keep the newer cosignatures
                    self._note = note
                self._synced = None if self._unreadable_left else (note, version)
                return
            # (2)
            rng, last = self._range, self._last
            done = self._size
            bulk = done == 0 and cp.size >= _BULK_FROM
            if bulk:  # rows appended in index order, the indexes sorted once at the end
                for name in INDEXES:
                    self._db.execute(f"DROP INDEX IF EXISTS {name}")
            workers = (Workers(blob_reader) if blob_reader is not None and Workers.possible()
                       and cp.size - done >= _PARALLEL_FROM else None)
            runs: list[tuple[list[tuple[int, LogEntry, bytes]], Any]] = []
            start = self._size

            def insert(entries: list[tuple[int, LogEntry, bytes]], rows: Any) -> None:
                """Insert a run's rows: a worker's, else (none, or it died) derived here."""
                got = Workers.rows(rows)
                if got is None:
                    self._index_entries(entries, read_blob)
                else:
                    got.entries = [(i, e.kind, e.subject, raw) for i, e, raw in entries]
                    got.insert(self._db.executemany)
                last_index = entries[-1][0] + 1
                if on_progress is not None:
                    on_progress(last_index - start)
                if cp.size - start > _CHUNK:
                    _write_reading(self.path, last_index - start, cp.size - start)

            with contextlib.ExitStack() as pool:
                if workers is not None:
                    pool.enter_context(workers)
                while done < cp.size:
                    end = min(done + _CHUNK, cp.size)
                    if floor is not None and done < floor.size < end:
                        end = floor.size  # stop there to compare with the root seen before
                    rng, last = self._read_run(read_entries, done, end, rng, last, runs,
                                               workers)
                    while len(runs) > (_AHEAD if workers is not None else 0):
                        insert(*runs.pop(0))
                    done = end
                    if floor is not None and done == floor.size and rng.root() != floor.root:
                        raise TamperError(
                            f"{what}: fork: the log's first {floor.size} entries give root "
                            f"{rng.root().hex()[:16]}…, but root {floor.root.hex()[:16]}… was "
                            "seen before at that size. Nothing was changed.",
                            Path(what),
                        )
                while runs:
                    insert(*runs.pop(0))
            if rng.root() != cp.root:
                raise TamperError(
                    f"{what}: the entries {self._size}..{cp.size - 1} with the tree seen before "
                    f"give root {rng.root().hex()[:16]}…, but the checkpoint says "
                    f"{cp.root.hex()[:16]}…: a fork, or damaged entries. Nothing was changed.",
                    Path(what),
                )
            # (3)
            if bulk:
                for statement in INDEXES.values():
                    self._db.execute(statement)
            self._retry_unreadable(read_blob)
            self._store_counts()
            self._put_floor(note, rng, last)
            self._synced = None if self._unreadable_left else (note, version)

    def _put_floor(self, note: bytes, rng: CompactRange, last: bytes) -> None:
        """Store the floor ``note`` and the indexed range under it, in the caller's transaction."""
        self._put("range", json.dumps(
            {"size": rng.size, "hashes": [h.hex() for h in rng.hashes], "last": last.hex()}
        ).encode())
        self._put("checkpoint", note)
        self._size, self._range, self._note, self._last = rng.size, rng, note, last

    def accept_rollback(self, note: bytes, held: bytes, record: dict[str, Any]) -> None:
        """`trust_pins.accept_rollback`'s change, in one transaction: the floor, still ``held``,
        lowered to ``note`` (signed by the log's key), which must be the root of the first
        entries this state indexed (an older copy of the log seen, not another history); the
        rows of the entries beyond forgotten; ``record`` appended to `rollbacks`.

        Raises:
            TamperError: the floor changed meanwhile, the state indexed fewer entries than
                ``note`` holds, or they give another root (a fork); nothing was changed.
        """
        cp = verify_checkpoint(note, self.verifier)
        with self._write():
            self._size, self._range, self._note, self._last = self._read_meta()
            self._check_counts()
            raws = [bytes(r[0]) for r in self._db.execute(
                "SELECT raw FROM entries WHERE idx < ? ORDER BY idx", (cp.size,)).fetchall()]
            rng = CompactRange().extend([leaf_hash(r) for r in raws])
            why = None
            if self._note != held:
                why = ("cannot be accepted: your floor changed meanwhile (another process of "
                       "yours); nothing was changed: run this again")
            elif len(raws) != cp.size:
                why = (f"cannot be told from another history: your state holds only "
                       f"{len(raws)} entries of the log (seen through bundles or a monitor); "
                       "nothing was changed")
            elif rng.root() != cp.root:
                why = (f"is not the first {cp.size} entries of the log you saw (their root is "
                       f"{rng.root().hex()[:16]}…): another history, not an older copy of it; "
                       "nothing was changed: keep the checkpoint as evidence")
            if why is not None:
                raise TamperError(f"the checkpoint of size {cp.size} (root "
                                  f"{cp.root.hex()[:16]}…) {why}", self.path)
            for table in TABLES:
                self._db.execute(f"DELETE FROM {table} WHERE idx >= ?", (cp.size,))
            self._store_counts()
            self._put_floor(note, rng, leaf_hash(raws[-1]) if raws else
                            bytes.fromhex(GENESIS_PREV))
            if (self.applied() or 0) > cp.size:
                self._put("applied", str(cp.size).encode())
            self._put("rollbacks", json.dumps([*self.rollbacks(), record]).encode())

    def rebuild(self, *, at_next_sync: bool = False) -> None:
        """Forget the index (not the floor): the next `sync` re-reads the whole log, which must
        still extend the checkpoint seen before.

        Args:
            at_next_sync: forget it in the next `sync`'s transaction, not now (``trajledger
                reindex``): the user's other commands, which read the rows while they run
                (after their own sync), would otherwise find none until the log is read
                again, and no revocation, reference or held-out row reads as nothing revoked,
                built on or held out.
        """
        if at_next_sync:
            self._rederive = True
            return
        with self._write():
            self._forget_rows()
        self._size, self._range, self._note, self._last = self._read_meta()

    def _forget_rows(self) -> None:
        """Delete every derived row and the indexed range, in the caller's transaction."""
        for table in TABLES:
            self._db.execute(f"DELETE FROM {table}")
        self._db.execute("DELETE FROM meta WHERE key IN ('range', 'counts')")

    def _read_run(
        self, read_entries: Callable[[int, int], Sequence[bytes]], start: int, end: int,
        rng: CompactRange, last: bytes,
        runs: list[tuple[list[tuple[int, LogEntry, bytes]], Any]], workers: Workers | None,
    ) -> tuple[CompactRange, bytes]:
        """Read entries ``start..end-1``, parse each and chain it to ``last``; queue the run on
        ``runs`` with its rows' future (a worker's) or None (derived when inserted). Returns
        the range and the last leaf hash extended by them.

        Raises:
            TamperError: an entry is missing or malformed, or does not chain.
        """
        raws = read_entries(start, end)
        if len(raws) != end - start:
            raise TamperError(f"log entries {start}..{end - 1}: not all readable", None)
        hashes, entries = [], []
        for i, raw in enumerate(raws, start=start):
            try:
                entry = LogEntry.from_bytes(raw, f"log entry {i}")
            except FormatError as e:
                raise TamperError(f"{e}; the log is damaged (run 'trajledger log verify')",
                                  None) from e
            if entry.prev != last.hex():
                raise TamperError(
                    f"log entry {i}: prev is {entry.prev[:16]}…, want {last.hex()[:16]}… (hash "
                    "chain broken)", None)
            last = leaf_hash(raw)
            hashes.append(last)
            entries.append((i, entry, raw))
        runs.append((entries, None if workers is None else workers.derive(entries)))
        return rng.extend(hashes), last

    def _index_entries(
        self, entries: Sequence[tuple[int, LogEntry, bytes]],
        read_blob: Callable[[str], bytes | None],
    ) -> None:
        """Index a run of parsed entries: their rows gathered (the envelopes read of the kinds
        that need them), then inserted table by table, one statement each."""
        rows = DerivedRows()
        for i, entry, _ in entries:
            if reads_envelope(entry.kind):
                derive(rows, i, entry, read_or_none(read_blob, entry.envelope))
        rows.entries = [(i, e.kind, e.subject, raw) for i, e, raw in entries]
        rows.insert(self._db.executemany)

    def _retry_unreadable(self, read_blob: Callable[[str], bytes | None]) -> bool:
        """Read again the envelopes that could not be read; True when one now could."""
        found = self._db.execute(
            "SELECT u.idx, e.raw FROM unreadable u JOIN entries e ON e.idx = u.idx"
        ).fetchall()
        rows, now = DerivedRows(), []
        for idx, raw in found:
            entry = LogEntry.from_bytes(bytes(raw))
            if derive(rows, int(idx), entry, read_or_none(read_blob, entry.envelope)):
                now.append((idx,))
        rows.unreadable = []  # the ones still unreadable are listed already
        rows.insert(self._db.executemany)
        self._db.executemany("DELETE FROM unreadable WHERE idx = ?", now)
        self._unreadable_left = len(found) - len(now)
        return bool(now)

    # -- the derived rows, checked ----------------------------------------------------------------

    def _counts(self) -> dict[str, int]:
        return {t: int(self._db.execute(f"SELECT COUNT(*) FROM {t}").fetchall()[0][0])
                for t in TABLES}

    def _store_counts(self) -> None:
        self._put("counts", json.dumps(self._counts(), sort_keys=True).encode())

    def _check_counts(self) -> None:
        """Refuse a state whose derived rows were deleted or added since it was extended: each
        extension stores how many rows each table holds (a state of an older format has no
        counts until it is re-read; an indexed state without them lost them)."""
        raw = self._meta("counts")
        if raw is None and self._meta("range") is None:
            return
        stored = json.loads(raw) if raw is not None else {}
        now = self._counts()
        changed = [f"{t} holds {now[t]} row(s), {stored.get(t, '?')} were derived from the log"
                   for t in TABLES if stored.get(t) != now[t]]
        if changed:
            raise TamperError(
                f"trust state {self.path / 'state.sqlite'}: {'; '.join(changed)}: rows that "
                "decide what is revoked, held out or built on were changed outside trajledger "
                "(by a writer of your state directory); nothing was changed. Derive them again "
                "from the log with 'trajledger reindex' (the floor is kept)",
                self.path / "state.sqlite",
            )

    def disagreements(
        self,
        read_entries: Callable[[int, int], Sequence[bytes]],
        read_blob: Callable[[str], bytes | None],
    ) -> list[str]:
        """Derive every row again from the log (entries ``0..size``) in memory and compare with
        this state's, read-only: one line per table that disagrees.

        Raises:
            TamperError: the log's entries cannot be read.
        """
        fresh = TrustState.__new__(TrustState)
        fresh.path = self.path
        mem = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        mem.executescript(SCHEMA)
        fresh._db = LockedDB(mem)
        try:
            done = 0
            while done < self._size:
                end = min(done + _CHUNK, self._size)
                raws = read_entries(done, end)
                if len(raws) != end - done:
                    raise TamperError(f"log entries {done}..{end - 1}: not all readable", None)
                fresh._index_entries(
                    [(i, LogEntry.from_bytes(raw, f"log entry {i}"), raw)
                     for i, raw in enumerate(raws, start=done)], read_blob)
                done = end
            out = []
            for table in TABLES:
                mine = self._rows(table)
                want = fresh._rows(table)
                if mine != want:
                    missing, extra = len(want - mine), len(mine - want)
                    out.append(
                        f"trust state {self.path / 'state.sqlite'}: table {table}: {missing} "
                        f"row(s) derived from the log are missing, {extra} are not the log's; "
                        "derive them again with 'trajledger reindex'"
                    )
            return out
        finally:
            fresh._db.close()

    def _rows(self, table: str) -> set[tuple[Any, ...]]:
        rows = self._db.execute(f"SELECT * FROM {table}").fetchall()
        return {tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows}
