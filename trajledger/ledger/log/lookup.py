"""The log's derived lookup cache: which entries name an envelope or a subject.

Scope: candidates for ``find_envelope``, ``find_subject`` and the idempotence check of an append,
keyed by the first 64 bits of each entry's envelope and subject digests, in O(log n) per lookup
and O(batch) amortised per append, whatever the log's size. It is a small log-structured merge
tree in the ledger's cache directory (``<ledger>/index/log-lookup/``, outside ``log/``):

- immutable *runs* ``run-<start>-<end>``: for entries ``start .. end - 1``, both columns sorted
  by key (binary-searched through ``mmap``); written with temp file + fsync + rename;
- ``MANIFEST`` (JSON): the runs in log order, which together cover entries ``0 .. covered - 1``,
  and the leaf hash of entry ``covered - 1``;
- entries past ``covered`` (the *tail*) are kept in memory by each process, read from the log
  itself (a few bundles at most); when the tail reaches `TAIL` entries, whoever holds it and can
  write the directory writes it as a new run, then merges the newest runs while the older of two
  is at most twice the newer (so there are O(log n) runs, and each entry is rewritten O(log n)
  times, in sequential files: no random-page write amplification as in a B-tree).

Writes take ``lock`` (flock); readers take nothing (runs never change, the manifest is replaced
atomically, and a run a merge deleted stays readable through an open mapping).

It is derived data: it is rebuilt from the entries when the manifest is missing, unreadable, of
another log, or when the leaf hash it records is not the log's; every answer is only a candidate
that the log confirms on the entry itself; a directory that cannot be written (a read-only copy)
leaves the cache in memory. Nothing is verified against it. An edited cache can hide an entry (a
false negative), so decisions that rest on the *absence* of an entry (revocations) must not use
it; ``trajledger fsck`` compares it with the log.

Non-scope: the entries themselves (``writer``), the catalog of names (``ledger.catalog``).
Spec: schemas/log-entry.v1.md (lookup cache).
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import json
import mmap
import os
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajledger.verify.errors import FormatError
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.merkle import leaf_hash

from ..fs import fsync_dir, temp_name

__all__ = ["CACHE_DIR", "TAIL", "Lookup", "digest_key"]

CACHE_DIR = "log-lookup"
"""The cache's directory name in the ledger's cache directory."""

TAIL = 1024
"""Entries a process keeps in memory before it writes them as a run."""

_FORMAT = 1
_MAGIC = b"TLLOOK1\0"
_ORDER = 0x0102030405060708  # written natively: another byte order reads another number
_HEADER = struct.Struct("=8sQQQQ")  # magic, byte-order mark, count, start, end
_COLUMNS = ("env", "subj")
_ENV_PREFIX = b'{"envelope":"sha256:'
_SUBJ_MARK = b'"subject":"sha256:'
_HEX = frozenset(b"0123456789abcdef")


def digest_key(digest: str) -> int:
    """The cache key of a ``sha256:<hex>`` digest: its first 64 bits, unsigned."""
    return int(digest[7:23], 16)


def _keys_of(raw: bytes) -> tuple[int, int] | None:
    """(envelope key, subject key) of an entry's bytes; None when it does not parse.

    Canonical entries (the only valid ones) are read by position, without parsing the JSON.
    """
    if raw.startswith(_ENV_PREFIX):
        at = raw.find(_SUBJ_MARK, 84)
        env, subj = raw[20:84], raw[at + 18 : at + 82] if at > 0 else b""
        if len(env) == len(subj) == 64 and _HEX.issuperset(env) and _HEX.issuperset(subj):
            return int(env[:16], 16), int(subj[:16], 16)
    try:
        e = LogEntry.from_bytes(raw)
    except FormatError:
        return None
    return digest_key(e.envelope), digest_key(e.subject)


ReadEntries = Callable[[int, int], Sequence[bytes]]
LeafAt = Callable[[int], bytes]


@dataclass
class _Run:
    """One immutable run file, mapped into memory."""

    name: str
    start: int
    end: int
    count: int
    mm: mmap.mmap
    cols: tuple[tuple[memoryview, memoryview], tuple[memoryview, memoryview]]

    @classmethod
    def open(cls, path: Path, start: int, end: int) -> _Run:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _HEADER.size:
                raise ValueError(f"{path}: truncated")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        magic, order, count, s, e = _HEADER.unpack_from(mm, 0)
        valid = (magic, order, s, e) == (_MAGIC, _ORDER, start, end)
        if not valid or size != _HEADER.size + 32 * count:
            mm.close()
            raise ValueError(f"{path}: not the run it should be")
        view = memoryview(mm)[_HEADER.size :].cast("Q")
        n = count
        env = (view[0:n], view[n : 2 * n])
        subj = (view[2 * n : 3 * n], view[3 * n : 4 * n])
        return cls(path.name, start, end, count, mm, (env, subj))

    def find(self, column: int, key: int) -> list[int]:
        keys, idx = self.cols[column]
        lo = bisect.bisect_left(keys, key)
        out = []
        while lo < self.count and keys[lo] == key:
            out.append(int(idx[lo]))
            lo += 1
        return out

    def close(self) -> None:
        for keys, idx in self.cols:
            keys.release()
            idx.release()
        with contextlib.suppress(BufferError):
            self.mm.close()


def _write_run(directory: Path, start: int, end: int, cols: Sequence[tuple[Any, Any]]) -> str:
    """Write a run file (temp + fsync + rename); ``cols`` are (keys, indices) numpy arrays,
    sorted by key then index. Returns its name."""
    name = f"run-{start}-{end}"
    count = len(cols[0][0])
    tmp = directory / temp_name()
    with open(tmp, "wb") as f:
        f.write(_HEADER.pack(_MAGIC, _ORDER, count, start, end))
        for keys, idx in cols:
            f.write(keys.astype("=u8").tobytes())
            f.write(idx.astype("=u8").tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / name)
    return name


class Lookup:
    """Candidates for envelope and subject lookups, derived from the entries.

    Not thread-safe on its own: the `Log` calls it under its mutex.
    """

    def __init__(self, directory: Path | None, origin: str) -> None:
        """Keep the cache in ``directory`` (None: in memory only) for the log ``origin``."""
        self.directory = directory
        self.origin = origin
        self._runs: list[_Run] = []
        self._manifest_stamp: tuple[int, int, int] | None = None
        self._covered = 0
        self._last = b""
        self._confirmed = False
        self._tail_start = 0
        self._tail_end = 0
        self._tail_last = b""  # leaf hash of entry tail_end - 1
        self._read_only = False
        self._tail: tuple[dict[int, list[int]], dict[int, list[int]]] = ({}, {})

    # -- the files -----------------------------------------------------------------------------

    @property
    def _manifest(self) -> Path | None:
        return self.directory / "MANIFEST" if self.directory is not None else None

    @contextlib.contextmanager
    def _write_lock(self) -> Any:
        assert self.directory is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read_manifest(self) -> tuple[list[tuple[int, int, str]], bytes] | None:
        """The runs and last leaf the manifest lists; None when absent or not valid."""
        path = self._manifest
        if path is None:
            return None
        try:
            doc = json.loads(path.read_bytes())
            if doc.get("format") != _FORMAT or doc.get("origin") != self.origin:
                return None
            runs = [(int(s), int(e), str(n)) for s, e, n in doc["runs"]]
            last = bytes.fromhex(doc["last"])
        except (OSError, ValueError, TypeError, KeyError):
            return None
        expect = 0
        for s, e, n in runs:
            if s != expect or e <= s or n != f"run-{s}-{e}":
                return None
            expect = e
        return runs, last

    def _stamp(self) -> tuple[int, int, int] | None:
        path = self._manifest
        try:
            st = path.stat() if path is not None else None
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size) if st is not None else None

    def _load(self) -> None:
        """(Re)load the runs the manifest lists, when it changed."""
        stamp = self._stamp()
        if stamp == self._manifest_stamp and (stamp is not None or not self._runs):
            return
        for _attempt in range(3):
            got = self._read_manifest()
            runs: list[_Run] = []
            try:
                for s, e, n in got[0] if got else []:
                    assert self.directory is not None
                    runs.append(_Run.open(self.directory / n, s, e))
            except (OSError, ValueError):
                for r in runs:
                    r.close()
                stamp = self._stamp()  # a merge replaced it meanwhile: read again
                continue
            self._set_runs(runs, got[1] if got else b"")
            self._manifest_stamp = stamp
            return
        self._set_runs([], b"")  # not readable: start again from the entries
        self._manifest_stamp = None

    def _set_runs(self, runs: list[_Run], last: bytes) -> None:
        """Use these runs; keep the part of this process's tail they do not cover."""
        for r in self._runs:
            r.close()
        self._runs = runs
        covered = runs[-1].end if runs else 0
        if (covered, last) != (self._covered, self._last):
            self._confirmed = False
        self._covered, self._last = covered, last
        if covered == self._tail_start:
            return
        if covered < self._tail_start or covered >= self._tail_end:
            self._drop_tail()
        else:
            for c in (0, 1):
                kept = {k: [i for i in v if i >= covered] for k, v in self._tail[c].items()}
                self._tail[c].clear()
                self._tail[c].update({k: v for k, v in kept.items() if v})
            self._tail_start = covered

    def _drop_tail(self) -> None:
        self._tail = ({}, {})
        self._tail_start = self._tail_end = self._covered
        self._tail_last = self._last

    def forget_after_fork(self) -> None:
        """In a forked child: nothing to do (the mappings are read-only and shared)."""

    def close(self) -> None:
        """Unmap the runs."""
        self._set_runs([], b"")
        self._manifest_stamp = None
        self._drop_tail()

    # -- keeping up with the log ---------------------------------------------------------------

    def meta(self) -> tuple[int, bytes]:
        """(entries covered by runs, leaf hash of the last one)."""
        self._load()
        return self._covered, self._last

    def sync(
        self, size: int, tree_size: int, read: ReadEntries, leaf_at: LeafAt, *, writer: bool
    ) -> None:
        """Make the cache (runs and this process's tail) cover entries ``0 .. size - 1``.

        Args:
            size: how far to cover.
            tree_size: the committed size the caller can read (>= ``size``).
            read: ``read(start, end)`` returns those entries' bytes.
            leaf_at: the leaf hash of an entry, from the tiles.
            writer: the caller holds the log's lock, so the committed size is authoritative:
                runs covering more than it are from another log and are dropped.
        """
        self._load()
        if self._covered and not self._confirmed:
            if self._covered <= tree_size and leaf_at(self._covered - 1) == self._last:
                self._confirmed = True
            elif self._covered <= tree_size or writer:
                self._rebuild()  # another log's, or the log was replaced
            # else: a writer is ahead of this reader's view; rows past ``size`` are ignored
        for lo in range(self._tail_end, size, 4096):
            raws = read(lo, min(size, lo + 4096))
            self._extend(lo, [_keys_of(r) for r in raws], leaf_hash(raws[-1]))
        if self._tail_end - self._tail_start >= TAIL:
            self._flush()

    def _extend(self, start: int, rows: Sequence[tuple[int, int] | None], last: bytes) -> None:
        assert start == self._tail_end
        for i, keys in enumerate(rows, start):
            if keys is None:
                continue  # not indexable; 'log verify' reports it
            for c in (0, 1):
                self._tail[c].setdefault(keys[c], []).append(i)
        self._tail_end = start + len(rows)
        self._tail_last = last

    def add(self, start: int, rows: Sequence[tuple[str, str]], last: bytes) -> None:
        """Record the (envelope, subject) of entries ``start ...`` just committed.

        Does nothing unless the tail ends at ``start`` (the next `sync` reads them then).
        """
        if start != self._tail_end or not rows:
            return
        self._extend(start, [(digest_key(e), digest_key(s)) for e, s in rows], last)
        if self._tail_end - self._tail_start >= TAIL:
            self._flush()

    def _rebuild(self) -> None:
        """Forget the runs (from another log): the tail is read again from entry 0."""
        self._set_runs([], b"")
        self._drop_tail()
        if self.directory is not None:
            with contextlib.suppress(OSError), self._write_lock():
                manifest = self._manifest
                assert manifest is not None
                manifest.unlink(missing_ok=True)
                for p in self.directory.glob("run-*"):
                    p.unlink(missing_ok=True)
            self._manifest_stamp = None

    def _flush(self) -> None:
        """Write the tail as a run and merge; without write access it stays in memory."""
        if self.directory is None or self._read_only:
            return
        try:
            self._write_tail()
        except OSError:
            self._read_only = True  # a read-only copy: its runs serve, the tail stays here

    def _write_tail(self) -> None:
        import numpy as np

        assert self.directory is not None
        with self._write_lock():
            got = self._read_manifest()
            runs = list(got[0]) if got else []
            covered = runs[-1][1] if runs else 0
            if covered != self._tail_start:
                # Someone else wrote runs meanwhile (or the manifest is gone): take theirs.
                self._manifest_stamp = None
                self._load()
                return
            last = self._tail_last
            cols = []
            for c in (0, 1):
                pairs = sorted((k, i) for k, idx in self._tail[c].items() for i in idx)
                cols.append(
                    (
                        np.fromiter((k for k, _ in pairs), np.uint64, len(pairs)),
                        np.fromiter((i for _, i in pairs), np.uint64, len(pairs)),
                    )
                )
            name = _write_run(self.directory, self._tail_start, self._tail_end, cols)
            runs.append((self._tail_start, self._tail_end, name))
            obsolete: list[str] = []
            while len(runs) >= 2 and runs[-2][1] - runs[-2][0] <= 2 * (runs[-1][1] - runs[-1][0]):
                (s1, _e1, n1), (_s2, e2, n2) = runs[-2], runs[-1]
                runs[-2:] = [(s1, e2, self._merge(n1, n2, s1, e2))]
                obsolete += [n1, n2]
            doc = {
                "format": _FORMAT,
                "origin": self.origin,
                "runs": [[s, e, n] for s, e, n in runs],
                "last": last.hex(),
            }
            tmp = self.directory / temp_name()
            with open(tmp, "w") as f:
                json.dump(doc, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.directory / "MANIFEST")
            fsync_dir(self.directory)
            final = {n for _s, _e, n in runs}
            for n in obsolete:
                if n not in final:
                    (self.directory / n).unlink(missing_ok=True)
        self._manifest_stamp = None
        self._load()  # the runs now end where the tail did: the tail is dropped
        self._confirmed = True

    def _merge(self, older: str, newer: str, start: int, end: int) -> str:
        import numpy as np

        assert self.directory is not None
        a = _Run.open(self.directory / older, *_span(older))
        b = _Run.open(self.directory / newer, *_span(newer))
        try:
            cols = []
            for c in (0, 1):
                keys = np.concatenate([np.asarray(a.cols[c][0]), np.asarray(b.cols[c][0])])
                idx = np.concatenate([np.asarray(a.cols[c][1]), np.asarray(b.cols[c][1])])
                order = np.argsort(keys, kind="stable")  # equal keys: older entries first
                cols.append((keys[order], idx[order]))
            return _write_run(self.directory, start, end, cols)
        finally:
            a.close()
            b.close()

    # -- lookups ---------------------------------------------------------------------------------

    def candidates(self, column: str, digests: Iterable[str], size: int) -> dict[int, list[int]]:
        """Entry indices below ``size`` whose ``column`` ("env" or "subj") has each key.

        Returns:
            ``{digest_key(d): [indices ascending]}`` for the keys found.
        """
        c = _COLUMNS.index(column)
        out: dict[int, list[int]] = {}
        for key in {digest_key(d) for d in digests}:
            hits = [i for r in self._runs for i in r.find(c, key) if i < size]
            hits += [i for i in self._tail[c].get(key, []) if i < size]
            if hits:
                out[key] = sorted(hits)
        return out

    def disagreements(self, entries: Iterable[tuple[int, LogEntry | None]]) -> list[str]:
        """Compare the cache's runs with the entries they cover (for ``fsck``).

        Args:
            entries: (index, parsed entry or None when it does not parse) for every entry
                of the log, in order.
        """
        self._load()
        where = self.directory or "(memory)"
        want: list[set[tuple[int, int]]] = [set(), set()]
        for i, e in entries:
            if i >= self._covered or e is None:
                continue
            want[0].add((digest_key(e.envelope), i))
            want[1].add((digest_key(e.subject), i))
        problems: list[str] = []
        for c, col in enumerate(_COLUMNS):
            have = {
                (int(k), int(i)) for r in self._runs for k, i in zip(*r.cols[c], strict=True)
            }
            missing, extra = want[c] - have, have - want[c]
            if missing or extra:
                problems.append(
                    f"lookup cache {where}: column {col} has {len(extra)} row(s) no entry gives "
                    f"and lacks {len(missing)} of the {self._covered} entries it claims to "
                    "cover; delete it (it is rebuilt from the log on next use)"
                )
        return problems


def _span(name: str) -> tuple[int, int]:
    _, s, e = name.split("-")
    return int(s), int(e)

