"""The held side's step windows of one holdout, grouped by hash once and kept in the derived
cache, so that ``dataset create`` looks its train windows up in them instead of reading and
scanning every held window at every call (hold30).

Scope: `Grouped` (the held windows of some held-out batches, sorted by hash, with where each
is: its segment, episode and start), `group_file` (from each batch's windows,
`Compared.step_windows` with ``held``, given batch after batch (hold32: one batch's held at a
time), into the file in bounded memory: sorted runs of `RUN` windows in a scratch file beside
it, merged; hold31: a run of all the windows when they are few), `grouped_file` (its place:
``<ledger>/index/features/w<WINDOWS_VERSION>/held-<key>.grouped``, the key the SHA-256 of
the held batches' digests and their step files' digests, in the order held, and
`WINDOWS_VERSION`), `read`, `forget_grouped` (one file is kept at a time: the held
side's of the last call; erasing a batch deletes it).

The file: `MAGIC`, a 4-byte little-endian length, a JSON header (padded with spaces to its
length with the widest CRCs, so that its size is known before them; ``format``, ``version``:
`WINDOWS_VERSION`, ``batches``: ``[batch, step file]`` pairs, ``first``: each batch's first
episode in the episode table, ``segments``: ``[batch, order]`` of each run of windows of a batch
in one order, the counts, and the CRC-32 of each part), then the parts: every window's hash
(uint64, ascending); its segment, episode (within its batch) and start (uint32 each, in the
hashes' order); a CRC-32 per block of `BLOCK` windows of those three; the episodes' lengths
(int64) and ids (int64 offsets, UTF-8).

Reading (`read`): the header, the episode table (checked), the hashes through their filter
kept beside the file (`held_filter`, held37: about 2.4 bytes a window read whole and checked,
then the pages of hashes a lookup's candidates fall in, with `os.pread`, each page's CRC
checked), else read whole, their CRC checked (a damaged hash would hide a shared run), and the
filter written from them; the three arrays of where a window is are read only where a train
window hit (`Grouped.placed`: with `os.pread`, one block at a time, each block's CRC checked
then), so a call costs the filter's bytes and the hits, not the held side's hashes or
placement. Not mapped
(``mmap``): a file truncated under a mapping ends the process with SIGBUS; a read returns
short, and that is a damaged file.

Trust: the derived cache's (``window_cache``, ``batch_features``): whoever writes the ledger's
directory can write this file, so what ``dataset create`` reports from it is as good as that
directory; the admission gate never reads it. The CRCs find damage (a truncated, flipped or
partly written file), not forgery: a SHA-256 would not either, since its digest sits in the
same file. A file of another holdout, version or format has another name or header: it is not
read. Anything wrong is `FormatError` (`Damaged` once the file was accepted): the caller groups
the held side again, with a warning.
Non-scope: the windows (``step_windows``, ``window_cache``), matching (``contamination.Matcher``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from trajledger.verify.errors import FormatError
from trajledger.verify.ledger_dir import open_regular

from .fs import drop_stale_temps, temp_name
from .held_filter import Probe, filter_path, stamp_path
from .held_filter import read as read_filter
from .held_filter import write as write_filter
from .step_windows import StepWindows
from .window_cache import WINDOWS_VERSION

__all__ = ["BLOCK", "MAGIC", "RUN", "Damaged", "Grouped", "forget_grouped", "group_file",
           "grouped_file", "read", "regrouped"]

MAGIC = b"trajledger-held-windows\n"
FORMAT = 1
BLOCK = 8192
"""Windows per CRC of where they are (96 KiB of the three arrays): what a hit reads."""
_HEADER_BYTES = 1 << 24
_U32 = 1 << 32
_U64 = np.uint64


class Damaged(FormatError):
    """A part of the grouped file at ``path`` read after it was accepted is damaged."""

    def __init__(self, path: Path | None, why: str) -> None:
        super().__init__(why)
        self.path = path


@dataclass
class Grouped:
    """The held windows of some batches, grouped by hash.

    Attributes:
        batches: the held batches, in the order held.
        hashes: every window's hash, ascending.
        segments: ``(batch index, order)`` of each run of windows (`StepWindows.order`).
        first: each batch's first episode in ``ids`` / ``lengths`` (and their count, last).
        ids / lengths: every episode's id and number of steps, batch after batch.
    """

    batches: list[str]
    hashes: npt.NDArray[np.uint64]
    segments: list[tuple[int, int]]
    first: list[int]
    ids: list[str]
    lengths: npt.NDArray[np.int64]
    path: Path | None = None
    file: BinaryIO | None = None
    """The file read, kept open: another call's `forget_grouped` or rewrite meanwhile does not
    change what this one reads."""
    at: int = 0
    """Where the three arrays begin in the file at ``path``, then the block CRCs."""
    crcs: npt.NDArray[np.uint32] = field(default_factory=lambda: np.zeros(0, np.uint32))
    probe: Probe | None = None
    """The hashes' filter (held37), when read: ``hashes`` is then empty, and the hashes
    looked up are read a page at a time (`held_filter.Probe.hashes_at`)."""

    @property
    def size(self) -> int:
        """How many windows are grouped."""
        return self.probe.n if self.probe is not None else len(self.hashes)

    def hashes_at(self, positions: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
        """The hashes of the windows at ``positions``.

        Raises:
            Damaged: with the filter, a page of hashes read is short or does not match its CRC.
        """
        if self.probe is None:
            return self.hashes[positions]
        try:
            return self.probe.hashes_at(self.file.fileno() if self.file is not None else -1,
                                        self.at - 8 * self.probe.n, positions)
        except (OSError, FormatError) as e:  # derived: grouped again, as a damaged block
            self.close()
            raise Damaged(self.path, e.strerror if isinstance(e, OSError) and e.strerror
                          else str(e)) from e

    def close(self) -> None:
        """Close the file read (where the windows are is not read after)."""
        if self.file is not None:
            self.file.close()

    def lookup(self, hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """The positions of the windows whose hash is one of ``hashes`` (ascending, distinct).

        Raises:
            Damaged: with the filter, a page of hashes read is short or does not match its CRC.
        """
        if self.probe is not None:  # each hash's candidates, confirmed against their pages
            a, z = self.probe.ranges(hashes)
            some = np.flatnonzero(z > a)
            return _confirmed(self.hashes_at, hashes[some], a[some], z[some])
        lo = np.searchsorted(self.hashes, hashes)
        ok = lo < len(self.hashes)
        ok[ok] = self.hashes[lo[ok]] == hashes[ok]
        lo = lo[ok]
        counts = np.searchsorted(self.hashes, hashes[ok], side="right") - lo
        return np.asarray(np.repeat(lo - np.cumsum(counts) + counts, counts)
                          + np.arange(counts.sum()), dtype=np.int64)

    def placed(self, positions: npt.NDArray[np.int64]) -> tuple[
            npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64],
            npt.NDArray[np.int64]]:
        """Batch index, episode (into ``ids``), start and order of the windows at
        ``positions`` (ascending, distinct).

        Raises:
            Damaged: a block read does not match its CRC, or is short.
        """
        n = self.size
        seg, ep, start = (np.empty(len(positions), np.int64) for _ in range(3))
        blocks = positions // BLOCK
        distinct = np.ones(len(blocks), dtype=bool)
        distinct[1:] = blocks[1:] != blocks[:-1]
        fd = self.file.fileno() if self.file is not None else -1
        for b in blocks[distinct].tolist():
            lo, hi = b * BLOCK, min(n, (b + 1) * BLOCK)
            try:
                parts = [os.pread(fd, 4 * (hi - lo), self.at + 4 * (k * n + lo))
                         for k in range(3)]
            except OSError as e:  # derived: grouped again, as a damaged block
                self.close()
                raise Damaged(self.path, e.strerror or type(e).__name__) from e
            crc = 0
            for p in parts:
                crc = zlib.crc32(p, crc)
            if any(len(p) != 4 * (hi - lo) for p in parts) or crc != self.crcs[b]:
                self.close()  # the check is made again without it
                raise Damaged(self.path, f"block {b} of where its windows are does not "
                              "match its CRC")
            a, z = np.searchsorted(positions, (lo, hi))
            for out, p in zip((seg, ep, start), parts, strict=True):
                out[a:z] = np.frombuffer(p, "<u4")[positions[a:z] - lo]
        if len(seg) and int(seg.max()) >= len(self.segments):
            raise Damaged(self.path, "a window's segment is out of range")
        info = np.array(self.segments, dtype=np.int64).reshape(-1, 2)
        batch, order = info[seg, 0], info[seg, 1]
        first = np.array(self.first, dtype=np.int64)
        episode = first[batch] + ep
        if len(episode) and (episode >= first[batch + 1]).any():
            raise Damaged(self.path, "a window's episode is out of range")
        return batch, episode, start, order


def _confirmed(hashes_at: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.uint64]],
               want: npt.NDArray[np.uint64], lo: npt.NDArray[np.int64],
               hi: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The positions in ``[lo, hi)`` (each of ``want``'s) whose hash (``hashes_at``) is that
    one of ``want``: ascending when ``want`` is, each position once."""
    counts = hi - lo
    at = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
    return np.asarray(at[hashes_at(at) == np.repeat(want, counts)], dtype=np.int64)


def grouped_file(cache: Path, held: Sequence[tuple[str, str]]) -> Path:
    """Where the grouped windows of the held batches ``held`` (``(batch, step file)`` pairs, in
    the order held) are kept."""
    key = json.dumps([FORMAT, WINDOWS_VERSION, [list(h) for h in held]], separators=(",", ":"))
    name = f"held-{hashlib.sha256(key.encode()).hexdigest()}.grouped"
    return cache / f"w{WINDOWS_VERSION}" / name


class _Layout:
    """The segments, each batch's first episode and the episodes' ids and lengths of the held
    batches given so far (`add`, batch after batch)."""

    def __init__(self) -> None:
        self.segments: list[tuple[int, int]] = []
        self.first: list[int] = [0]
        self.ids: list[str] = []
        self.lengths: list[npt.NDArray[np.int64]] = []

    def add(self, ws: Sequence[StepWindows]) -> bool:
        """Add the next batch's runs of windows (one segment each run with any); False, with
        nothing added, when they do not fit the file."""
        base = next((w for w in ws if w.order == 0), None)
        if ws and (base is None or any(w.episode_ids != base.episode_ids for w in ws)):
            return False
        runs = [w for w in ws if len(w.hashes)]
        if any(int(w.start.max()) >= _U32 or len(w.episode_ids) >= _U32 for w in runs) or (
                len(self.segments) + len(runs) >= _U32):
            return False
        b = len(self.first) - 1
        if base is not None:
            self.ids += base.episode_ids
            self.lengths.append(base.lengths.astype(np.int64))
        self.first.append(len(self.ids))
        self.segments += [(b, w.order) for w in runs]
        return True


def _by_hash(h: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    """The order that sorts ``h``, equal hashes in the order given: each hash's index in its
    low bits, sorted (``np.sort``: vectorised, 2.4 times faster than ``argsort`` at 20 M),
    then the few runs whose high bits tie put in order of their whole hash (a stable
    ``lexsort``)."""
    bits = _U64(max(1, (len(h) - 1).bit_length()))
    low = (_U64(1) << bits) - _U64(1)
    packed = h & ~low
    packed |= np.arange(len(h), dtype=np.uint64)
    packed.sort()
    by = (packed & low).view(np.int64)  # below 2**63: the same values
    packed >>= bits  # the high bits
    tie = np.zeros(len(h), dtype=bool)
    np.equal(packed[1:], packed[:-1], out=tie[1:])
    tie[:-1] |= tie[1:]
    if tie.any():  # contiguous runs, already in order of their high bits
        at = np.flatnonzero(tie)
        by[at] = by[at[np.lexsort((h[by[at]], packed[at]))]]
    return by


def _ids(ids: list[str]) -> tuple[bytes, bytes]:
    data = [v.encode("utf-8", "surrogatepass") for v in ids]
    offsets = np.concatenate(([0], np.cumsum([len(d) for d in data], dtype=np.int64)))
    return offsets.astype("<i8").tobytes(), b"".join(data)


_CRCS = ("crc_hashes", "crc_blocks", "crc_episodes")


def _head(held: Sequence[tuple[str, str]], first: list[int], segments: list[tuple[int, int]],
          n: int, ids: list[str], lengths: npt.NDArray[np.int64],
          crcs: Sequence[int]) -> tuple[bytes, bytes]:
    """`MAGIC`, the header's length and the header, padded with spaces (JSON allows them) to
    the length it has with the widest CRCs (`group_file` places the parts before it knows
    their CRCs); and the episode table (lengths, id offsets, ids), its CRC the last of
    ``crcs`` when given two."""
    at, data = _ids(ids)
    table = lengths.astype("<i8").tobytes() + at + data
    header = {"format": FORMAT, "version": WINDOWS_VERSION, "batches": [list(h) for h in held],
              "first": first, "segments": [list(s) for s in segments], "windows": n,
              "episodes": len(ids), "id_bytes": len(data)}
    widest = json.dumps({**header, **dict.fromkeys(_CRCS, _U32 - 1)}, separators=(",", ":"))
    crcs = [*crcs, zlib.crc32(table)][:3]
    head = json.dumps({**header, **dict(zip(_CRCS, crcs, strict=True))},
                      separators=(",", ":")).ljust(len(widest)).encode()
    return MAGIC + struct.pack("<I", len(head)) + head, table


RUN = 1 << 21
"""Windows `group_file` sorts at a time (2 M: about 140 MB of work), then merges."""
_MERGE = 1 << 21
"""Windows `group_file` reads ahead from its sorted runs, all runs together."""
_Parts = tuple[npt.NDArray[Any], ...]
"""A window's hash (``<u8``), segment, episode and start (``<u4``), in parallel."""


def _empty(n: int) -> _Parts:
    return np.empty(n, "<u8"), np.empty(n, "<u4"), np.empty(n, "<u4"), np.empty(n, "<u4")


def _regions(n: int) -> tuple[int, int, int, int]:
    """Where the hashes, segments, episodes and starts of ``n`` windows begin in the body."""
    return 0, 8 * n, 12 * n, 16 * n


def _pwrite(fd: int, a: npt.NDArray[Any] | bytes, at: int) -> None:
    view = (a.data if isinstance(a, np.ndarray) else memoryview(a)).cast("B")
    while view:
        done = os.pwrite(fd, view, at)
        view, at = view[done:], at + done


def _pread(fd: int, a: npt.NDArray[Any], at: int) -> None:
    view = a.data.cast("B")
    while view:
        got = os.preadv(fd, [view], at)
        if not got:
            raise OSError(errno.EIO, "the grouping's scratch file is short")
        view, at = view[got:], at + got


class _Out:
    """The windows of a grouped file, given in hash order, written into its parts at ``at``:
    the hashes' CRC as they go, a block's CRC once it is whole (`finish`: the last)."""

    def __init__(self, fd: int, at: int, n: int) -> None:
        self.fd, self.at, self.n, self.done, self.filled, self.closed = fd, at, n, 0, 0, 0
        self.block: list[_Parts] = []  # where the windows of the open block are, piece by piece
        self.crcs = np.zeros((n + BLOCK - 1) // BLOCK, "<u4")
        self.crc_hashes = 0

    def add(self, parts: _Parts) -> None:
        for region, a in zip(_regions(self.n), parts, strict=True):
            _pwrite(self.fd, a, self.at + region + a.itemsize * self.done)
        self.crc_hashes = zlib.crc32(parts[0].data, self.crc_hashes)
        m, i = len(parts[0]), 0
        while i < m:
            take = min(BLOCK - self.filled, m - i)
            self.block.append(tuple(a[i : i + take] for a in parts[1:]))
            self.filled, i = self.filled + take, i + take
            if self.filled == BLOCK:
                self.finish()
        self.done += m

    def finish(self) -> None:
        """The open block's CRC (where its windows are, part after part)."""
        if self.block:
            crc = 0
            for k in range(3):
                for piece in self.block:
                    crc = zlib.crc32(piece[k].data, crc)
            self.crcs[self.closed] = crc
            self.closed += 1
        self.block, self.filled = [], 0


class _Runs:
    """Windows given segment after segment (`add`), sorted ``run`` at a time (by hash, then as
    given); each run but the last written to a scratch file in ``where`` once the next window
    comes (its parts one after the other: hashes, segments, episodes, starts), then merged
    (`finish`). A run of all the windows when they are few: no scratch file."""

    def __init__(self, where: Path, run: int, stack: contextlib.ExitStack) -> None:
        self.where, self.run, self.stack = where, run, stack
        self.into, self.out = _empty(run), _empty(run)
        self.filled, self.n, self.fd = 0, 0, -1
        self.bounds: list[tuple[int, int]] = []  # the runs written: their first and end window

    def add(self, segment: int, w: StepWindows) -> None:
        """Add the windows of ``w``, of ``segment``."""
        off, into = 0, self.into
        while off < len(w.hashes):
            if self.filled == self.run:
                self.spill()
            o, take = self.filled, min(self.run - self.filled, len(w.hashes) - off)
            into[0][o : o + take] = w.hashes[off : off + take]
            into[1][o : o + take] = segment
            into[2][o : o + take] = w.episode[off : off + take]
            into[3][o : o + take] = w.start[off : off + take]
            self.filled, off = o + take, off + take
        self.n += len(w.hashes)

    def take(self, segments: int, ws: list[StepWindows]) -> None:
        """Add the runs of windows of a batch, its list emptied first (the caller finds a batch
        whole or empty), each run freed once added (when nothing else holds it): ``segments``
        are those of the batches so far, this one's included."""
        runs = [w for w in reversed(ws) if len(w.hashes)]
        ws.clear()
        segment = segments - len(runs)
        while runs:
            self.add(segment, runs.pop())
            segment += 1

    def sorted(self) -> _Parts:
        """The windows added since the last run written, sorted."""
        m = self.filled
        by = _by_hash(self.into[0][:m])
        for a, b in zip(self.into, self.out, strict=True):
            np.take(a[:m], by, out=b[:m], mode="clip")  # in range: "clip" is not buffered
        self.filled = 0
        return self.out[0][:m], self.out[1][:m], self.out[2][:m], self.out[3][:m]

    def spill(self) -> None:
        if self.fd < 0:
            self.fd = self.stack.enter_context(_scratch(self.where))
        lo = self.bounds[-1][1] if self.bounds else 0
        parts = self.sorted()
        for region, a in zip(_regions(len(parts[0])), parts, strict=True):
            _pwrite(self.fd, a, 20 * lo + region)
        self.bounds.append((lo, lo + len(parts[0])))

    def finish(self, out: _Out) -> None:
        """Every window added, in order of hash then as given, into ``out``; the buffers of
        the runs freed first (the merge's and the read back's memory)."""
        if not self.bounds:
            if self.filled:
                out.add(self.sorted())
        elif self.filled:
            self.spill()
        self.into = self.out = _empty(0)
        if self.bounds:
            _merge(self.fd, self.bounds, out)


def _merge(fd: int, bounds: Sequence[tuple[int, int]], out: _Out) -> None:
    """Merge the sorted runs of windows ``bounds`` (first and end window) in the scratch file
    ``fd`` into ``out``, in order of hash, then of run (the order given). Each round takes,
    from every run's windows read ahead, those below the least last hash read of a run not read
    whole (every window below it is read) and sorts them; when there are none, the windows of
    that hash are next: run after run, each read on while its hash lasts (a hash of many
    windows stays bounded)."""
    step = max(1, _MERGE // len(bounds))  # 1,024 at least below 2**32 windows
    pos = [lo for lo, _ in bounds]
    ahead = [_empty(0) for _ in bounds]

    def fill(r: int) -> bool:
        lo, hi = bounds[r]
        if not len(ahead[r][0]) and pos[r] < hi:
            ahead[r] = _empty(min(step, hi - pos[r]))
            for region, a in zip(_regions(hi - lo), ahead[r], strict=True):
                _pread(fd, a, 20 * lo + region + a.itemsize * (pos[r] - lo))
            pos[r] += len(ahead[r][0])
        return bool(len(ahead[r][0]))

    def take(r: int, c: int) -> _Parts:
        got, ahead[r] = tuple(a[:c] for a in ahead[r]), tuple(a[c:] for a in ahead[r])
        return got

    while live := [r for r in range(len(bounds)) if fill(r)]:
        bound = min((ahead[r][0][-1] for r in live if pos[r] < bounds[r][1]), default=None)
        taken = [take(r, len(ahead[r][0]) if bound is None else int(
            np.searchsorted(ahead[r][0], bound))) for r in live]
        if sum(len(t[0]) for t in taken):
            merged = [np.concatenate(a) for a in zip(*taken, strict=True)]
            by = _by_hash(merged[0])
            out.add(tuple(a[by] for a in merged))
            continue
        for r in live:  # every window below ``bound`` is out: those of ``bound``, in order
            while fill(r) and ahead[r][0][0] == bound:
                out.add(take(r, int(np.searchsorted(ahead[r][0], bound, side="right"))))


def _give_back() -> None:
    """Give the memory freed back to the system (glibc's ``malloc_trim``; elsewhere nothing,
    hold32): numpy takes arrays below 32 MB from malloc's heap, which keeps what a batch's
    windows and a merge round freed (about 350 MB at a 100x holdout) when a later array, the
    hashes read back (8 bytes a window), is mapped on its own beside it."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to do
        ctypes.CDLL(None).malloc_trim(0)


@contextlib.contextmanager
def _scratch(where: Path) -> Iterator[int]:
    """A scratch file in ``where``, unlinked as soon as it is open: nothing of it is left
    whatever ends the grouping (an exception, a signal, a kill)."""
    name = where / temp_name(".scratch")
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        name.unlink()
        yield fd
    finally:
        os.close(fd)
        name.unlink(missing_ok=True)


class _Raised(Exception):
    """``error``, raised by the caller's windows (`_given`)."""

    def __init__(self, error: OSError | FormatError) -> None:
        super().__init__(str(error))
        self.error = error


def _given(windows: Iterable[list[StepWindows]]) -> Iterator[list[StepWindows]]:
    """The batches of ``windows``, an `OSError` or `FormatError` computing one raised as
    `_Raised`: a disk that fails a step file's read is the caller's to report (exit 3), not a
    grouped file that cannot be written (None)."""
    it = iter(windows)
    while True:
        try:
            ws = next(it)
        except StopIteration:
            return
        except (OSError, FormatError) as e:
            raise _Raised(e) from e
        yield ws


def group_file(path: Path, batches: Sequence[str], windows: Iterable[list[StepWindows]],
               held: Sequence[tuple[str, str]], run: int | None = None,
               stored: Callable[[], bool] | None = None) -> Grouped | None:
    """Group the windows of each held batch (its `Compared.step_windows` with ``held``: every
    run of one episode list, the first in order 0), given batch after batch by ``windows``,
    into the file at ``path`` in bounded memory, then read it (`read`: where the windows are,
    on use). ``run`` (`RUN`) windows are sorted at a time (their index under their hash's high
    bits, `_by_hash`) into a scratch file beside ``path`` (`_Runs`), then merged into a temp
    file renamed to ``path``. Each batch's list is emptied as its windows are sorted (they are
    not needed after), before the next batch is taken from ``windows`` (hold32: one batch's
    windows held at a time, whatever computes them). None when they do not fit the file
    (another episode list in a batch, no run in order 0, a count past 2**32: that batch's list
    left as it was, no later batch taken), ``windows`` ends before every batch of ``held`` is
    given, or the file cannot be written or read back (read-only, full, deleted meanwhile): the
    caller holds them as they are (derived data; those taken again). ``stored``: whether
    the held step files are all still in the store, asked once the file is in place (rev38:
    an erasure meanwhile deleted the blob, then the grouped files, before this one was
    there): when not, the file and its filter are deleted, this call's grouping read first
    (its file held open), so nothing derived from erased data is kept."""
    run = run or RUN
    tmp = path.parent / temp_name()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        drop_stale_temps(path.parent)  # a killed grouping's
        with contextlib.ExitStack() as stack:
            runs, laid, given = _Runs(path.parent, run, stack), _Layout(), 0
            for ws in _given(windows):
                if given == len(held) or not laid.add(ws):
                    return None
                given += 1
                runs.take(len(laid.segments), ws)
            if given != len(held):
                return None
            n, first, segments, ids = runs.n, laid.first, laid.segments, laid.ids
            eps = np.concatenate(laid.lengths) if laid.lengths else np.zeros(0, np.int64)
            at = len(_head(held, first, segments, n, ids, eps, (0, 0))[0])
            with open(tmp, "xb") as f:
                out = _Out(f.fileno(), at, n)
                runs.finish(out)
                out.finish()
                head, table = _head(held, first, segments, n, ids, eps,
                                    (out.crc_hashes, zlib.crc32(out.crcs.tobytes())))
                _pwrite(f.fileno(), out.crcs, at + 20 * n)
                _pwrite(f.fileno(), table, at + 20 * n + 4 * len(out.crcs))
                _pwrite(f.fileno(), head, 0)
        filter_path(path).unlink(missing_ok=True)  # another grouping's, if any
        os.replace(tmp, path)
        _give_back()  # what the merge freed: the hashes are read back next
        got = read(path, held)
        if stored is not None and not stored():
            for gone in (path, filter_path(path), stamp_path(filter_path(path))):
                gone.unlink(missing_ok=True)
        return got
    except _Raised as e:  # by the caller's ``windows``: not the file's; goes on as raised
        raise e.error from e.error.__cause__
    except (OSError, FormatError):
        return None
    finally:
        tmp.unlink(missing_ok=True)


def _read_exactly(f: BinaryIO, size: int) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise FormatError(f"truncated: {len(data)} of {size} bytes")
    return bytes(data)


def read(path: Path, held: Sequence[tuple[str, str]], probe: bool = True) -> Grouped:
    """The grouped windows kept at ``path`` for the held batches ``held``: the header and the
    episode table read and checked; the hashes' filter beside it (`held_filter`, held37) when
    ``probe`` and it is that file's and whole (the hashes then read on use, page by page),
    else the hashes read whole and checked, and the filter written from them; where each
    window is, on use (`Grouped.placed`).

    Raises:
        FileNotFoundError: nothing is kept there.
        OSError: it cannot be read.
        FormatError: it is not such a file of ``held``, this version and format, or is damaged.
    """
    f = open_regular(path)
    try:
        size = os.fstat(f.fileno()).st_size
        if _read_exactly(f, len(MAGIC)) != MAGIC:
            raise FormatError("not a file of grouped held windows")
        (hsize,) = struct.unpack("<I", _read_exactly(f, 4))
        if hsize > _HEADER_BYTES:
            raise FormatError(f"a header of {hsize} bytes")
        raw = _read_exactly(f, hsize)
        try:
            h = json.loads(raw)
        except (ValueError, RecursionError) as e:  # nested past the limit (rev29)
            raise FormatError(f"its header is not JSON ({e})") from e
        if not isinstance(h, dict) or h.get("format") != FORMAT or (
                h.get("version") != WINDOWS_VERSION):
            raise FormatError(f"format {h.get('format') if isinstance(h, dict) else None!r}, "
                              f"version {h.get('version') if isinstance(h, dict) else None!r}")
        if h.get("batches") != [list(x) for x in held]:
            raise FormatError("grouped from other held batches")
        try:
            n, eps, m = (int(h[k]) for k in ("windows", "episodes", "id_bytes"))
            first = [int(x) for x in h["first"]]
            segments = [(int(b), int(o)) for b, o in h["segments"]]
            crcs_want = [int(h[k]) for k in ("crc_hashes", "crc_blocks", "crc_episodes")]
        except (KeyError, TypeError, ValueError, OverflowError) as bad:  # Infinity (rev29)
            raise FormatError(f"its header lacks a count ({bad})") from bad
        nb = (n + BLOCK - 1) // BLOCK
        at = len(MAGIC) + 4 + hsize
        if min(n, eps, m) < 0 or size != at + 20 * n + 4 * nb + 8 * (2 * eps + 1) + m or (
                len(first) != len(held) + 1 or first[0] != 0 or first[-1] != eps
                or any(b > a for a, b in zip(first[1:], first, strict=False))
                or any(not 0 <= b < len(held) for b, _ in segments)):
            raise FormatError(f"{size} bytes: its counts do not add up")
        head = MAGIC + struct.pack("<I", hsize) + raw
        fast = read_filter(filter_path(path), head, n) if probe else None
        hashes = np.empty(n if fast is None else 0, dtype="<u8")
        if fast is None and f.readinto(hashes.data) != 8 * n:  # type: ignore[attr-defined]
            raise FormatError("truncated")
        if fast is None and zlib.crc32(hashes.data) != crcs_want[0]:
            raise FormatError("its hashes do not match their CRC")
        f.seek(at + 20 * n)
        crcs = np.frombuffer(_read_exactly(f, 4 * nb), "<u4")
        table = _read_exactly(f, 8 * (2 * eps + 1) + m)
        if zlib.crc32(crcs.tobytes()) != crcs_want[1] or zlib.crc32(table) != crcs_want[2]:
            raise FormatError("its block CRCs or episode table do not match their CRC")
    except BaseException:
        f.close()
        raise
    lengths = np.frombuffer(table[: 8 * eps], "<i8").astype(np.int64)
    offsets = np.frombuffer(table[8 * eps : 8 * (2 * eps + 1)], "<i8").tolist()
    raw = table[8 * (2 * eps + 1) :]
    try:
        ids = [raw[a:b].decode("utf-8", "surrogatepass") for a, b in pairwise(offsets)]
    except UnicodeDecodeError as bad:
        raise FormatError(f"an episode id is not UTF-8 ({bad})") from bad
    if probe and fast is None:  # missing, stale or damaged: made again from the hashes checked
        write_filter(filter_path(path), head, hashes.astype(np.uint64, copy=False))
    return Grouped([b for b, _ in held], hashes.astype(np.uint64, copy=False), segments, first,
                   ids, lengths, path, f, at + 8 * n, crcs.astype(np.uint32), fast)


def regrouped(path: Path, why: str) -> str:
    """The warning when the grouped file at ``path`` cannot be used (``why``)."""
    return (f"the held side's grouped step windows ({path}) cannot be used "
            f"({' '.join(why.split())}): grouped again from the held batches' windows")


def forget_grouped(cache: Path) -> None:
    """Delete every grouped file of the held side (an erased batch's windows are in some:
    nothing derived from erased data is kept; the next ``dataset create`` groups again)."""
    for old in [*cache.glob("w*/held-*.grouped"), *cache.glob("w*/held-*.filter"),
                *cache.glob("w*/held-*.checked")]:
        old.unlink(missing_ok=True)
