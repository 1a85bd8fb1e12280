"""The log's derived lookup cache: which entries name an envelope or a subject.

Scope: an on-disk B-tree (SQLite, in the ledger's cache directory ``<ledger>/index/``, outside
``log/``) mapping the first 64 bits of each entry's envelope digest and subject digest to the
entry's index. Lookups cost O(log n); a writer adds the rows of its batch after each commit, and
any process brings the cache up to the log by reading only the entries it does not cover yet, so
appending and opening stay O(batch + log n) whatever the log's size.

It is derived data: it is rebuilt from the entries when it is missing, unreadable, from another
log, or when the leaf hash it recorded for its last entry is not the log's; every answer is only
a candidate that the log confirms on the entry itself. A cache that cannot be written (a
read-only copy) is kept in memory instead. Nothing is verified against it. Because an edited
cache could hide an entry (a false negative), decisions that rest on the *absence* of an entry
(revocations) must not rest on it: the lead's status index, kept outside the ledger, does that.

Non-scope: the entries themselves (``writer``), the catalog of names (``ledger.catalog``).
Spec: schemas/log-entry.v1.md (lookup cache).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from trajledger.verify.errors import FormatError
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.merkle import leaf_hash

__all__ = ["CACHE_FILE", "Lookup", "digest_key"]

CACHE_FILE = "log-lookup.sqlite"
"""The cache's file name in the ledger's cache directory."""

_FORMAT = 1
_CHUNK = 4096
_COLUMNS = ("env", "subj")
_LEAKED: list[sqlite3.Connection] = []  # connections inherited over fork(): never used again


def digest_key(digest: str) -> int:
    """The cache key of a ``sha256:<hex>`` digest: its first 64 bits, as a signed integer."""
    k = int(digest[7:23], 16)
    return k - (1 << 64) if k >= 1 << 63 else k


ReadEntries = Callable[[int, int], Sequence[bytes]]
LeafAt = Callable[[int], bytes]


class Lookup:
    """Candidates for envelope and subject lookups, derived from the entries.

    Not thread-safe on its own: the `Log` calls it under its mutex.
    """

    def __init__(self, path: Path | None, origin: str) -> None:
        """Use the cache file ``path`` (None: keep it in memory only) for the log ``origin``."""
        self.path = path
        self.origin = origin
        self._db: sqlite3.Connection | None = None
        self._confirmed: tuple[int, bytes] | None = None

    # -- the database --------------------------------------------------------------------------

    def _open_file(self, path: Path) -> sqlite3.Connection:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._schema(db)
        except sqlite3.Error:
            db.close()
            raise
        return db

    def _schema(self, db: sqlite3.Connection) -> None:
        db.execute(
            "CREATE TABLE IF NOT EXISTS meta(id INTEGER PRIMARY KEY CHECK (id = 0), "
            "format INTEGER NOT NULL, origin TEXT NOT NULL, count INTEGER NOT NULL, "
            "last BLOB NOT NULL)"
        )
        for col in _COLUMNS:
            db.execute(
                f"CREATE TABLE IF NOT EXISTS {col}(k INTEGER NOT NULL, i INTEGER NOT NULL, "
                "PRIMARY KEY (k, i)) WITHOUT ROWID"
            )
        db.execute(
            "INSERT OR IGNORE INTO meta VALUES (0, ?, ?, 0, x'')", (_FORMAT, self.origin)
        )
        row = db.execute("SELECT format, origin FROM meta").fetchone()
        if tuple(row) != (_FORMAT, self.origin):
            self._reset(db)

    def _reset(self, db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            for col in _COLUMNS:
                db.execute(f"DELETE FROM {col}")
            db.execute(
                "UPDATE meta SET format = ?, origin = ?, count = 0, last = x''",
                (_FORMAT, self.origin),
            )
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        self._confirmed = None

    def _connect(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        if self.path is not None:
            try:
                self._db = self._open_file(self.path)
                return self._db
            except sqlite3.DatabaseError:
                # Not a database (damaged): derived data, so start it again.
                try:
                    for suffix in ("", "-wal", "-shm"):
                        Path(str(self.path) + suffix).unlink(missing_ok=True)
                    self._db = self._open_file(self.path)
                    return self._db
                except (OSError, sqlite3.Error):
                    pass
            except (OSError, sqlite3.Error):
                pass
            self.path = None  # cannot be written here (a read-only copy): keep it in memory
        self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._schema(self._db)
        return self._db

    def _fallback(self) -> None:
        """The cache file failed mid-way: continue in memory (rebuilt from the entries)."""
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
        self._db = None
        self.path = None
        self._confirmed = None

    def forget_after_fork(self) -> None:
        """In a forked child: never touch the parent's connection again (SQLite forbids it)."""
        if self._db is not None:
            _LEAKED.append(self._db)
        self._db = None
        self._confirmed = None

    def close(self) -> None:
        """Close the database."""
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None

    # -- keeping up with the log ---------------------------------------------------------------

    def meta(self) -> tuple[int, bytes]:
        """(entries covered, leaf hash of the last one)."""
        row = self._connect().execute("SELECT count, last FROM meta").fetchone()
        return int(row[0]), bytes(row[1])

    def sync(
        self, size: int, tree_size: int, read: ReadEntries, leaf_at: LeafAt, *, writer: bool
    ) -> None:
        """Make the cache cover entries ``0 .. size - 1``.

        Args:
            size: how far to cover.
            tree_size: the committed size the caller can read (>= ``size``).
            read: ``read(start, end)`` returns those entries' bytes.
            leaf_at: the leaf hash of an entry, from the tiles.
            writer: the caller holds the log's lock, so the committed size is authoritative:
                a cache covering more than it is from another log and is rebuilt.
        """
        for _attempt in range(2):
            try:
                self._sync(size, tree_size, read, leaf_at, writer=writer)
                return
            except sqlite3.Error:
                self._fallback()

    def _sync(
        self, size: int, tree_size: int, read: ReadEntries, leaf_at: LeafAt, *, writer: bool
    ) -> None:
        db = self._connect()
        count, last = self.meta()
        if count and (count, last) != self._confirmed:
            if count <= tree_size and leaf_at(count - 1) == last:
                self._confirmed = (count, last)
            elif count <= tree_size or writer:
                self._reset(db)  # another log's, or the log was replaced: rebuild
                count = 0
            # else: a writer is ahead of this reader's view; rows past ``size`` are ignored
        while count < size:
            end = min(size, count + _CHUNK)
            raws = read(count, end)
            rows: list[tuple[str, str]] = []
            for i, raw in enumerate(raws, count):
                try:
                    e = LogEntry.from_bytes(raw, f"log entry {i}")
                except FormatError:
                    rows.append(("", ""))  # not indexable; 'log verify' reports it
                    continue
                rows.append((e.envelope, e.subject))
            covered = self._add(db, count, rows, leaf_hash(raws[-1]))
            if covered < count:
                return  # another process reset the cache meanwhile; the next call goes on
            count = covered

    def add(self, start: int, rows: Sequence[tuple[str, str]], last: bytes) -> None:
        """Record the (envelope, subject) of entries ``start ...`` just committed.

        Does nothing unless the cache covers exactly the entries before ``start`` (the next
        `sync` then catches up from the entries).
        """
        try:
            self._add(self._connect(), start, rows, last)
        except sqlite3.Error:
            self._fallback()

    def _add(
        self, db: sqlite3.Connection, start: int, rows: Sequence[tuple[str, str]], last: bytes
    ) -> int:
        """Add rows for entries ``start ...`` if the cache ends at ``start``; returns the
        number of entries the cache covers afterwards."""
        db.execute("BEGIN IMMEDIATE")
        try:
            (count,) = db.execute("SELECT count FROM meta").fetchone()
            if count != start:
                db.execute("ROLLBACK")
                return int(count)
            for n, col in enumerate(_COLUMNS):
                db.executemany(
                    f"INSERT OR IGNORE INTO {col} VALUES (?, ?)",
                    [(digest_key(r[n]), i) for i, r in enumerate(rows, start) if r[n]],
                )
            end = start + len(rows)
            db.execute("UPDATE meta SET count = ?, last = ?", (end, last))
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        self._confirmed = (end, last)
        return end

    # -- lookups ---------------------------------------------------------------------------------

    def candidates(self, column: str, digests: Iterable[str], size: int) -> dict[int, list[int]]:
        """Entry indices below ``size`` whose ``column`` ("env" or "subj") has each key.

        Returns:
            ``{digest_key(d): [indices ascending]}`` for the keys found.
        """
        if column not in _COLUMNS:
            raise ValueError(f"lookup column {column!r}, want one of {_COLUMNS}")
        keys = sorted({digest_key(d) for d in digests})
        out: dict[int, list[int]] = {}
        db = self._connect()
        for lo in range(0, len(keys), 500):
            part = keys[lo : lo + 500]
            marks = ",".join("?" * len(part))
            for k, i in db.execute(
                f"SELECT k, i FROM {column} WHERE k IN ({marks}) AND i < ? ORDER BY k, i",
                (*part, size),
            ):
                out.setdefault(int(k), []).append(int(i))
        return out

    def disagreements(self, entries: Iterable[tuple[int, LogEntry | None]]) -> list[str]:
        """Compare the cache with the entries it covers (for ``fsck``): what is wrong in it.

        Args:
            entries: (index, parsed entry or None when it does not parse) for every entry
                of the log, in order.
        """
        count, _last = self.meta()
        want: dict[str, set[tuple[int, int]]] = {c: set() for c in _COLUMNS}
        for i, e in entries:
            if i >= count or e is None:
                continue
            want["env"].add((digest_key(e.envelope), i))
            want["subj"].add((digest_key(e.subject), i))
        db = self._connect()
        problems: list[str] = []
        for col in _COLUMNS:
            have = {(int(k), int(i)) for k, i in db.execute(f"SELECT k, i FROM {col}")}
            missing, extra = want[col] - have, have - want[col]
            if missing or extra:
                problems.append(
                    f"lookup cache {self.path or '(memory)'}: table {col} has {len(extra)} "
                    f"row(s) no entry gives and lacks {len(missing)} of the {count} entries it "
                    "claims to cover; delete it (it is rebuilt from the log on next use)"
                )
        return problems
