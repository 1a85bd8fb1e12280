"""Answers from the user's index of a log: where to look, never what to believe.

Scope: `TrustIndex`, the queries a `TrustState` answers from its database: the
`verify.log_index.LogIndex` protocol (an entry by its index, the entries about a subject or of
a kind, the records listing a digest, the artifacts depending on one, the records whose envelope
could not be read, the held-out datasets) and the catalog's (named records by name and version,
by digest prefix, by kind: `NameRow`), each bounded by the floor's size; and `LockedDB`, the
connection the threads of a process share, one statement at a time under one lock. A module
apart from ``trust_state.py``, which keeps the floor and derives, checks and extends the rows
read here: this is the reading side of the same tables, and decides nothing.
Non-scope: the tables' schema, the floor, extending and checking the index (``trust_state.py``);
verifying what an answer points at (the verifier verifies each record it uses).
Spec: ``schemas/SPEC.md`` (the user's trust state).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from trajledger.verify.log_entry import LogEntry

__all__ = ["LockedDB", "NameRow", "TrustIndex"]


@dataclass(frozen=True)
class NameRow:
    """A named record as the index knows it (unverified until its statement is read)."""

    index: int
    kind: str
    name: str
    version: str
    subject: str


class _Rows:
    """The rows of one statement, fetched while its lock was held."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._rows)


class LockedDB:
    """A connection shared by the threads of a process: each statement runs, and its rows are
    fetched, under one reentrant lock, which `TrustState._write` also holds for a transaction."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.lock = threading.RLock()

    def execute(self, sql: str, args: Sequence[Any] = ()) -> _Rows:
        with self.lock:
            return _Rows(self._db.execute(sql, args).fetchall())

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self.lock:
            self._db.executemany(sql, rows)

    def close(self) -> None:
        with self.lock:
            self._db.close()


class TrustIndex:
    """The queries of the user's index of one log: a `TrustState` (which opens, extends and
    checks it) answers them."""

    _db: LockedDB
    _size: int
    """The number of entries indexed: every answer stops below it."""

    def rollbacks(self) -> list[dict[str, Any]]:
        """The rollbacks of this log the user accepted (`trust_loss.accept_rollback`), oldest
        first: ``{"at", "from", "from_root", "to", "to_root"}`` (sizes, roots in hex)."""
        import json

        row = self._db.execute("SELECT value FROM meta WHERE key = 'rollbacks'").fetchone()
        return [] if row is None else list(json.loads(bytes(row[0])))

    # -- the LogIndex protocol --------------------------------------------------------------------

    def entry(self, index: int) -> LogEntry | None:
        """The indexed entry at ``index``."""
        raw = self.entry_bytes(index)
        return None if raw is None else LogEntry.from_bytes(raw, f"log entry {index}")

    def entry_bytes(self, index: int) -> bytes | None:
        """The indexed entry's bytes (proven under the floor checkpoint when indexed)."""
        if not 0 <= index < self._size:
            return None
        row = self._db.execute("SELECT raw FROM entries WHERE idx = ?", (index,)).fetchone()
        return None if row is None else bytes(row[0])

    def about(self, subject: str) -> list[int]:
        """Entries about ``subject``."""
        rows = self._db.execute(
            "SELECT idx FROM entries WHERE subject = ? AND idx < ? ORDER BY idx",
            (subject, self._size),
        )
        return [int(r[0]) for r in rows]

    def signed_by(self, keyid: str) -> list[int]:
        """Entries whose signers list ``keyid`` (a keyid's bytes searched in each entry, then
        the matches parsed): what names a key kept in a successor policy (out55)."""
        rows = self._db.execute("SELECT idx, raw FROM entries WHERE instr(raw, ?) > 0 AND "
                                "idx < ? ORDER BY idx", (keyid.encode("ascii"), self._size))
        return [int(i) for i, r in rows
                if keyid in LogEntry.from_bytes(bytes(r), f"log entry {i}").signers]

    def entries_about(self, subjects: Collection[str]) -> dict[int, tuple[LogEntry, bytes]]:
        """Entries about any of ``subjects``, in a query per 500 subjects (`_rows_in`)."""
        rows = self._rows_in("SELECT idx, raw FROM entries WHERE subject IN ({}) AND idx < ?",
                             subjects)
        return {int(i): (LogEntry.from_bytes(bytes(r), f"log entry {i}"), bytes(r))
                for i, r in rows}

    def of_kind(self, kind: str) -> list[int]:
        """Entries of ``kind``."""
        rows = self._db.execute(
            "SELECT idx FROM entries WHERE kind = ? AND idx < ? ORDER BY idx", (kind, self._size)
        )
        return [int(r[0]) for r in rows]

    def listing(self, digest: str) -> list[int]:
        """Records listing ``digest``."""
        rows = self._db.execute(
            "SELECT idx FROM listing WHERE digest = ? AND idx < ? ORDER BY idx",
            (digest, self._size),
        )
        return [int(r[0]) for r in rows]

    def listings(self, digests: Collection[str]) -> dict[str, list[int]]:
        """Records listing each of ``digests``, in a query per 500 digests (`_rows_in`)."""
        out: dict[str, list[int]] = {d: [] for d in digests}
        for d, i in sorted(self._rows_in(
                "SELECT digest, idx FROM listing WHERE digest IN ({}) AND idx < ?", digests),
                key=lambda r: int(r[1])):
            out[str(d)].append(int(i))
        return out

    def _rows_in(self, sql: str, values: Collection[str]) -> list[tuple[Any, ...]]:
        """``sql`` (``IN ({})``, the size bound) over ``values``, 500 a query (SQLite: 999)."""
        items, rows = list(values), []
        for at in range(0, len(items), 500):
            chunk = items[at:at + 500]
            rows += self._db.execute(sql.format(",".join("?" * len(chunk))),
                                     (*chunk, self._size)).fetchall()
        return rows

    def referrers(self, digest: str) -> list[tuple[int, str]]:
        """``(index, role)`` of the artifacts depending on ``digest``."""
        rows = self._db.execute(
            "SELECT idx, role FROM refs WHERE dst = ? AND idx < ? ORDER BY idx",
            (digest, self._size),
        )
        return [(int(r[0]), str(r[1])) for r in rows]

    def unreadable(self) -> list[int]:
        """Indexed records whose envelope could not be read (retried on every sync)."""
        rows = self._db.execute("SELECT idx FROM unreadable WHERE idx < ? ORDER BY idx",
                                (self._size,))
        return [int(r[0]) for r in rows]

    def held_out(self) -> list[int]:
        """Dataset records of a split never trained on (holdout, regression)."""
        rows = self._db.execute("SELECT idx FROM held_out WHERE idx < ? ORDER BY idx",
                                (self._size,))
        return [int(r[0]) for r in rows]

    # -- the catalog -------------------------------------------------------------------------------

    def by_name(self, name: str, version: str) -> list[NameRow]:
        """Named records with this name and version."""
        return self._names("name = ? AND version = ?", (name, version))

    def by_folded_name(self, name: str) -> list[NameRow]:
        """Named records whose name equals ``name`` but for ASCII letter case (SQLite's
        ``lower``; `names.check_new` and `names.imported_problem` pick those that differ)."""
        return self._names("lower(name) = lower(?)", (name,))

    def by_prefix(self, hexprefix: str) -> list[NameRow]:
        """Named records whose subject digest starts with ``sha256:<hexprefix>``."""
        lo = "sha256:" + hexprefix
        hi = lo + "\uffff"
        # Named: SQLite otherwise walks the whole table in index order (the ``idx < size``
        # bound and ORDER BY idx look cheaper to it than the subject range).
        return self._names("subject >= ? AND subject < ?", (lo, hi), using="names_subject")

    def named(self, kind: str | None = None) -> list[NameRow]:
        """Every named record (of ``kind``), in log order."""
        if kind is None:
            return self._names("1 = 1", ())
        return self._names("kind = ?", (kind,))

    def _names(
        self, where: str, args: tuple[str, ...], *, using: str | None = None
    ) -> list[NameRow]:
        hint = f" INDEXED BY {using}" if using else ""
        rows = self._db.execute(
            f"SELECT idx, kind, name, version, subject FROM names{hint} WHERE {where} AND "
            "idx < ? ORDER BY idx",
            (*args, self._size),
        )
        return [NameRow(int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4])) for r in rows]
