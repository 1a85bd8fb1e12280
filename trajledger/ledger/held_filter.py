"""A compact membership filter of a grouped file's hashes, kept beside it, so that a call of
``dataset create`` reads about 2.4 bytes a held window instead of the 8 of its hash, and
confirms only the candidates it finds against the hashes themselves (held37: at a 100x holdout
the grouped file holds 77.3 M windows, 619 MB of hashes read whole and checked by CRC at every
call, for about 0.4 M train windows looked up).

Scope: `filter_path` (``held-<key>.filter`` beside ``held-<key>.grouped``), `write` (from the
hashes of a grouped file, read whole and checked: `held_windows.read`'s slow path), `read`
(`Probe`, or None when there is none that matches the grouped file: the caller reads the
hashes whole, then writes the filter again), `Probe.ranges` (where each looked-up hash may
be), `Probe.hashes_at` (the hashes at some positions, read a page at a time with `os.pread`,
each page's CRC checked).

The filter: the hashes' top `Probe.bits` bits are a bucket (eight to sixteen windows a
bucket), the next 16 their fingerprint. The file: `MAGIC`, a 4-byte little-endian length, a
JSON header (``format``, ``grouped``: the SHA-256 of the grouped file's magic, length and
header, which hold its counts and the CRC of all its hashes; ``windows``, ``bits``, ``page``:
`PAGE`; ``crc``: the CRC-32 of the body; padded with spaces), then the body: each window's
fingerprint (uint16, in the hashes' order), the CRC-32 of each page of `PAGE` hashes of the
grouped file, and each bucket's first window (uint32, one more for the end).

Deciding as the hashes read whole do: a hash looked up is one of the grouped file's only if a
window of its bucket has its fingerprint, and those windows (`Probe.ranges`) are a run of
positions of the sorted hashes; their pages are read and compared exactly. So every held
window of a hash looked up is found, and a candidate whose hash differs (about 12 in 2**16 a
hash looked up) is confirmed away.

Trust: the derived cache's, as the grouped file's (``held_windows``). The filter is used only
when its header names the grouped file's header (another grouping, version or key: not used)
and its body matches its CRC (read whole at each call); a page of hashes read is checked
against the CRC the filter keeps of it, computed from the hashes once they were read whole and
matched their CRC. A damaged hash of the grouped file is thus found when a looked-up hash's
page holds it, and cannot hide a held window: the filter, made from the hashes as checked,
still points at its page. What is not checked at each call is the grouped hashes no lookup
reaches: damage there changes no decision. Neither CRC stops an attacker who writes the
ledger's directory (he can write both files and their CRCs), as before.

The body's CRC is checked once per version of the file (held38): a stamp beside it
(``held-<key>.checked``, `stamp_path`: its device, inode, size, mtime_ns and ctime_ns, the
header's CRC and grouped file) is written when it was checked and its mtime was `_SETTLED`
old, or by `write` once it set the mtime of the file it wrote that far back; a read
whose filter has that stamp skips the CRC of its body (189 MB at a 100x holdout). What that no
longer finds: a body changed while none of those changed, that is, damage below the file system
(the medium, the page cache) or a rewrite of the same size within one tick of a file system's
coarse timestamps, or by one who sets the clock back (ctime); a fingerprint so flipped can
hide a held window. A page CRC or a bucket's start so damaged is still found (pages checked
when read, buckets' sums). Any write through the file system changes mtime and ctime: the
stamp then does not match, the CRC is checked.
Non-scope: the grouped file (``held_windows``), matching (``contamination_matcher``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import time
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from trajledger.verify.errors import FormatError
from trajledger.verify.ledger_dir import open_regular

from .errors import read_failure
from .fs import temp_name

__all__ = ["MAGIC", "PAGE", "Probe", "filter_path", "read", "stamp_path", "write"]

MAGIC = b"trajledger-held-filter\n"
FORMAT = 1
PAGE = 512
"""Hashes a page of the grouped file (4 KiB): what confirming a candidate reads."""
_HEADER_BYTES = 1 << 16
_FP = 16
"""Bits of a hash's fingerprint, after its bucket's."""


def filter_path(grouped: Path) -> Path:
    """Where the filter of the grouped file ``grouped`` is kept."""
    return grouped.with_suffix(".filter")


def stamp_path(flt: Path) -> Path:
    """Where the stamp of the filter ``flt``, its body's CRC checked, is kept (held38)."""
    return flt.with_suffix(".checked")


def _stamp(st: os.stat_result, head: dict[str, object]) -> bytes:
    """What identifies a version of a filter (its status ``st``, its header ``head``)."""
    return json.dumps(["checked", 1, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                       st.st_ctime_ns, head.get("crc"), head.get("grouped")]).encode()


_SETTLED = 3 * 10**9
"""How old (ns) a filter's mtime must be when its body is checked for a stamp to be kept: a
write after the check then gives it another mtime, even where timestamps are coarse (a
jiffy; FAT's 2 s), as git's racily clean entries."""


def _stamped(flt: Path, stamp: bytes) -> bool:
    """Whether the filter ``flt``'s kept stamp is ``stamp`` (its body checked as it is)."""
    try:
        with open_regular(stamp_path(flt)) as f:
            return f.read(len(stamp) + 1) == stamp
    except OSError as e:
        if read_failure(e):  # the disk's, said by the caller (ci47 finding 7)
            raise
        return False


def _keep_stamp(flt: Path, stamp: bytes) -> None:
    """Keep ``stamp`` for the filter ``flt`` (a temp file renamed; nothing if it cannot)."""
    tmp = flt.parent / temp_name()
    try:
        with open(tmp, "xb") as f:
            f.write(stamp)
        os.replace(tmp, stamp_path(flt))
    except OSError:
        pass  # its CRC is checked again at the next call
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _bits(n: int) -> int:
    """Bucket bits for ``n`` windows: eight to sixteen windows a bucket (1 to 32 bits)."""
    return max(1, min(32, n.bit_length() - 4))


class Probe:
    """A grouped file's filter, read and checked, and the pages of its hashes read so far.

    Attributes:
        n: the grouped file's windows.
        bits: the bits of a hash that are its bucket.
    """

    def __init__(self, n: int, bits: int, first: npt.NDArray[np.uint32],
                 fps: npt.NDArray[np.uint16], crcs: npt.NDArray[np.uint32]) -> None:
        self.n, self.bits, self.first, self.fps, self.crcs = n, bits, first, fps, crcs
        self.pages: dict[int, npt.NDArray[np.uint64]] = {}

    def ranges(self, hashes: npt.NDArray[np.uint64]) -> tuple[
            npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """For each of ``hashes``, the positions ``[lo, hi)`` of the windows of its bucket and
        fingerprint: every window of that hash is there (empty: none is held)."""
        bucket = (hashes >> np.uint64(64 - self.bits)).astype(np.int64)
        fp = ((hashes >> np.uint64(64 - self.bits - _FP)) & np.uint64(0xFFFF)).astype(np.uint16)
        end = self.first[bucket + 1].astype(np.int64)
        a = self._bound(self.first[bucket].astype(np.int64), end.copy(), fp, False)
        z = a.copy()
        some = np.flatnonzero(a < end)
        some = some[self.fps[a[some]] == fp[some]]  # the candidates: few, searched again
        z[some] = self._bound(a[some], end[some], fp[some], True)
        return a, z

    def _bound(self, a: npt.NDArray[np.int64], z: npt.NDArray[np.int64],
               fp: npt.NDArray[np.uint16], right: bool) -> npt.NDArray[np.int64]:
        """The first position in ``[a, z)`` whose fingerprint is ``fp`` or more (more, with
        ``right``): a binary search of all at once (the fingerprints are sorted in a bucket);
        ``a`` and ``z`` are changed."""
        live = np.flatnonzero(a < z)
        while len(live):
            mid = (a[live] + z[live]) // 2
            f = self.fps[mid]
            below = f <= fp[live] if right else f < fp[live]
            a[live[below]] = mid[below] + 1
            z[live[~below]] = mid[~below]
            live = live[a[live] < z[live]]
        return a

    def hashes_at(self, fd: int, at: int, positions: npt.NDArray[np.int64]) -> npt.NDArray[
            np.uint64]:
        """The hashes at ``positions`` of the grouped file open as ``fd``, its hashes at
        ``at``: their pages read (those not read yet), a run of pages at a time.

        Raises:
            FormatError: a page read is short, or does not match its CRC.
            OSError: it cannot be read.
        """
        page = positions // PAGE
        need = np.unique(page)
        todo = [p for p in need.tolist() if p not in self.pages]
        k = 0
        while k < len(todo):
            j = k + 1
            while j < len(todo) and todo[j] == todo[j - 1] + 1 and j - k < 256:
                j += 1
            lo, hi = todo[k] * PAGE, min(self.n, (todo[j - 1] + 1) * PAGE)
            data = os.pread(fd, 8 * (hi - lo), at + 8 * lo)
            if len(data) != 8 * (hi - lo):
                raise FormatError(f"its hashes are short: {len(data)} of {8 * (hi - lo)} bytes")
            for p in todo[k:j]:
                part = data[8 * (p * PAGE - lo) : 8 * (min(self.n, (p + 1) * PAGE) - lo)]
                if zlib.crc32(part) != int(self.crcs[p]):
                    raise FormatError(f"page {p} of its hashes does not match its CRC")
                self.pages[p] = np.frombuffer(part, "<u8").astype(np.uint64)
            k = j
        if not len(need):
            return np.zeros(0, np.uint64)
        got = [self.pages[p] for p in need.tolist()]
        starts = np.concatenate(([0], np.cumsum([len(g) for g in got])))
        stack = np.concatenate(got)
        return np.asarray(stack[starts[np.searchsorted(need, page)] + positions % PAGE],
                          dtype=np.uint64)


_CHUNK = 1 << 20
"""Hashes `write` takes at a time: its work stays a few MB whatever the holdout (hold31)."""


def _widest(head: dict[str, object]) -> int:
    return len(json.dumps({**head, "crc": (1 << 32) - 1}, separators=(",", ":")))


def write(path: Path, grouped_head: bytes, hashes: npt.NDArray[np.uint64]) -> None:
    """Write the filter of the grouped file whose magic, length and header are
    ``grouped_head`` and whose hashes, read whole and matched to their CRC, are ``hashes``,
    at ``path`` (a temp file renamed), a chunk of `_CHUNK` hashes at a time: the
    fingerprints written as they come (the buckets of sorted hashes are a run in each chunk,
    counted there), then the pages' CRCs and the buckets' first windows, then the header
    (padded with spaces to its length with the widest CRC). Nothing when it cannot be written
    (read-only, full) or there are 2**32 windows or more: the hashes are read whole at each
    call, as before."""
    n = len(hashes)
    if n >= 1 << 32:
        return
    bits = _bits(n)
    head: dict[str, object] = {"format": FORMAT, "grouped": hashlib.sha256(grouped_head)
                               .hexdigest(), "windows": n, "bits": bits, "page": PAGE}
    at = len(MAGIC) + 4 + _widest(head)
    first = np.zeros((1 << bits) + 1, "<u4")
    raw = hashes.astype("<u8", copy=False).data.cast("B")
    tmp = path.parent / temp_name()
    try:
        with open(tmp, "xb") as f:
            f.seek(at)
            crc = 0
            for lo in range(0, n, _CHUNK):
                h = hashes[lo : lo + _CHUNK]
                bucket = (h >> np.uint64(64 - bits)).astype(np.int64)
                b0 = int(bucket[0])
                span = np.bincount(bucket - b0)
                first[1 + b0 : 1 + b0 + len(span)] += span.astype("<u4")
                fps = ((h >> np.uint64(64 - bits - _FP)) & np.uint64(0xFFFF)).astype("<u2")
                f.write(fps.data)
                crc = zlib.crc32(fps.data, crc)
            crcs = np.array([zlib.crc32(raw[8 * lo : 8 * (lo + PAGE)])
                             for lo in range(0, n, PAGE)], "<u4")
            np.cumsum(first, out=first)
            for part in (crcs, first):
                f.write(part.data)
                crc = zlib.crc32(part.data, crc)
            text = json.dumps({**head, "crc": crc}, separators=(",", ":"))
            f.seek(0)
            f.write(MAGIC + struct.pack("<I", _widest(head)) + text.ljust(_widest(head)).encode())
            ino = os.fstat(f.fileno()).st_ino
        stamp_path(path).unlink(missing_ok=True)
        os.replace(tmp, path)
        with open_regular(path) as f:  # stamped as written: its first read skips its CRC
            st = os.fstat(f.fileno())
            if st.st_ino == ino:  # its mtime set back: no later write can leave it so
                os.utime(f.fileno(), ns=(st.st_atime_ns, time.time_ns() - 2 * _SETTLED))
                st = os.fstat(f.fileno())
                _keep_stamp(path, _stamp(st, {"crc": crc, "grouped": head["grouped"]}))
    except OSError:
        pass  # derived: the next call reads the hashes whole, and tries again
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def read(path: Path, grouped_head: bytes, n: int) -> Probe | None:
    """The filter at ``path`` of the grouped file of ``n`` windows whose magic, length and
    header are ``grouped_head``, read whole and checked; None when there is none, it cannot
    be read, or it is not that file's or is damaged (never trusted: the caller reads the
    hashes whole and writes it again).

    Raises:
        OSError: the system failed the read (EIO, EACCES: `errors.read_failure`): the caller
            says so as it groups again (ci47 finding 7: passed over in silence before).
    """
    try:
        f = open_regular(path)
    except OSError as e:
        if read_failure(e):
            raise
        return None
    with f:
        try:
            return _read(f, grouped_head, n, path)
        except OSError as e:
            if read_failure(e):
                raise
            return None
        except (FormatError, ValueError, TypeError, KeyError, OverflowError, RecursionError,
                struct.error):
            return None


def _read(f: BinaryIO, grouped_head: bytes, n: int, path: Path) -> Probe:
    st = os.fstat(f.fileno())  # before its bytes are read: a later change is another stamp
    size = st.st_size
    if f.read(len(MAGIC)) != MAGIC:
        raise FormatError("not a filter of held windows")
    (hsize,) = struct.unpack("<I", f.read(4))
    if hsize > _HEADER_BYTES:
        raise FormatError(f"a header of {hsize} bytes")
    h = json.loads(f.read(hsize))
    if not isinstance(h, dict):
        raise FormatError("its header is not an object")
    bits = int(h["bits"])
    if h.get("format") != FORMAT or h.get("page") != PAGE or (
            h.get("grouped") != hashlib.sha256(grouped_head).hexdigest()
            or int(h["windows"]) != n or bits != _bits(n)):
        raise FormatError("the filter of another grouped file")
    pages = (n + PAGE - 1) // PAGE
    nb = (1 << bits) + 1
    body = np.empty(4 * nb + 2 * n + 4 * pages, np.uint8)
    if len(MAGIC) + 4 + hsize + len(body) != size:
        raise FormatError(f"{size} bytes: its counts do not add up")
    if f.readinto(body.data) != len(body):  # type: ignore[attr-defined]
        raise FormatError("truncated")
    stamp = _stamp(st, h)
    if not _stamped(path, stamp):
        if zlib.crc32(body.data) != int(h["crc"]):
            raise FormatError("its body does not match its CRC")
        if time.time_ns() - st.st_mtime_ns >= _SETTLED:
            _keep_stamp(path, stamp)
    fps = body[: 2 * n].view("<u2").astype(np.uint16, copy=False)
    crcs = body[2 * n : 2 * n + 4 * pages].view("<u4").astype(np.uint32, copy=False)
    first = body[2 * n + 4 * pages :].view("<u4")
    if first[0] != 0 or first[-1] != n or (first[1:] < first[:-1]).any():
        raise FormatError("its buckets do not add up")
    return Probe(n, bits, first, fps, crcs)
