"""The bundle file: the tar of ``bundle.json`` and the members, zstd-compressed, written atomically.

Scope: `write_bundle` (for `exchange.export_bundle`): each object read once, hashed as written
(it must hash to its name), handed to zstd's worker threads; the tar byte for byte what
``tarfile`` writes (`tar_header`); the file's data synced behind the writing, fsynced once
complete, renamed over the destination.

Non-scope: choosing the members (`exchange.export_bundle`); reading bundles (``verify.bundle``).

Spec: schemas/bundle.v1.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, BinaryIO, cast

from trajledger.verify.bundle_index import INDEX_NAME, BundleIndex, Member
from trajledger.verify.digest import CHUNK, DIGEST_PREFIX
from trajledger.verify.errors import DigestMismatchError

from .encode import bundle_index_bytes
from .fs import SyncBehind, drop_stale_temps, fsync_dir, refuse_special, temp_name
from .hashing import copy_hashing

__all__ = ["ZSTD_LEVEL", "ZSTD_THREADS", "tar_header", "write_bundle"]

ZSTD_LEVEL = 1
"""zstd's fastest regular level. A bundle is mostly data that compresses little (rollout
batches are Parquet files, compressed already): on the bench lineage (319 MB of tar) level 1
writes 299.6 MB against level 3's 293.8 (+2.0 %) for about half the compressor's CPU (0.33 to
0.45 against 0.77 CPU-s), the largest part of an export beside the walk and the hashing.
Text members (envelopes, manifests, ``bundle.json``) come out about 15 % larger than at
level 3 (this repository's sources: 3.02 x against 3.48 x). The reader does not depend on
the level."""
ZSTD_THREADS = 2
"""Compression workers beside the thread that reads and hashes the members. zstd's output does
not depend on how many workers make it (one frame, the same bytes for 1, 2 or more), so this
is a matter of time only: with one worker (as ``tar --zstd`` runs ``zstd``) a core waited
while the other compressed, whenever the hashing thread was ahead. The frames are standard
zstd, read by ``verify.bundle`` and ``tar --zstd -x`` alike."""

WRITE_SIZE = 1 << 20
"""The largest piece the compressor hands the file at once (its output buffer)."""


def write_bundle(
    out: Path, index: BundleIndex, small: dict[str, bytes], files: dict[str, Path],
    advance: Callable[[int], None],
) -> int:
    """Write the tar.zst to a temp file next to ``out``, then rename it; returns its size.
    ``advance(n)`` is told of each member's bytes as they are written.

    Each object is read once, in 1 MiB chunks, hashed (it must hash to its name) and handed
    to the compressor, which runs on its own worker threads (`ZSTD_THREADS`) meanwhile. The
    tar is what ``tarfile`` writes in ``w|`` pax mode, byte for byte (`tar_header`, then the
    content padded to 512 bytes; two zero blocks and zero padding to a 10,240-byte record at
    the end), without its 16 KiB copy loop. The file's data goes to the disk on a thread as it
    grows (`fs.SyncBehind`), while the rest is compressed; it is fsynced once complete."""
    drop_stale_temps(out.parent)  # a killed export's
    tmp = str(out.parent / temp_name())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as raw:
            behind = SyncBehind(raw.fileno())
            try:
                _compress_members(_SyncedSink(raw, behind), index, small, files, advance)
                raw.flush()
            except BaseException:
                with contextlib.suppress(OSError):
                    behind.wait()  # (a pass may be running on the file's descriptor)
                raise
            behind.wait()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o644)
        refuse_special(out)  # a device or FIFO put there since --out was parsed (the lead)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(out.parent)
    return out.stat().st_size


class _SyncedSink:
    """The bundle file as the compressor writes it: each write told to `fs.SyncBehind`."""

    def __init__(self, raw: BinaryIO, behind: SyncBehind) -> None:
        self.raw = raw
        self.behind = behind

    def write(self, data: bytes) -> int:
        n = self.raw.write(data)
        self.behind.wrote(len(data))
        return n

    def flush(self) -> None:
        self.raw.flush()


def _compress_members(
    sink: _SyncedSink, index: BundleIndex, small: dict[str, bytes], files: dict[str, Path],
    advance: Callable[[int], None],
) -> None:
    """The tar of ``bundle.json`` and the members, compressed into ``sink`` (`write_bundle`)."""
    import zstandard

    cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=ZSTD_THREADS)
    ahead = _HashAhead()
    # (the compressor only calls ``write`` and ``flush``: a sink, not a whole file object; in
    # pieces of up to `WRITE_SIZE`, not zstd's 128 KiB: 2,400 calls into Python for 300 MB)
    with (ThreadPoolExecutor(1, thread_name_prefix="trajledger-export-hash") as ahead.pool,
          cctx.stream_writer(cast("IO[bytes]", sink), write_size=WRITE_SIZE, closefd=False) as zw):
        written = 0
        last: tuple[Future[str], Member, Path, int] | None = None  # the object hashing ahead

        def put(data: bytes | memoryview) -> None:
            nonlocal written
            zw.write(data)
            written += len(data)

        def member(name: str, size: int) -> None:
            put(tar_header(name, size))

        member(INDEX_NAME, len(data := bundle_index_bytes(index)))
        put(data + bytes(-len(data) % _BLOCK))
        for m in index.members:
            member(m.name, m.size)
            if m.name in small:
                put(small[m.name] + bytes(-m.size % _BLOCK))
                advance(m.size)
                continue
            with open(files[m.name], "rb", buffering=0) as fh:
                if m.size < _AHEAD:
                    _check(m, files[m.name], *copy_hashing(fh, put))
                else:  # hashed on the pool's thread while compressed: checked one object on
                    digest, size = ahead.copy(fh, put)
                    if last is not None:
                        _check(last[1], last[2], DIGEST_PREFIX + last[0].result(), last[3])
                    last = digest, m, files[m.name], size
            put(bytes(-m.size % _BLOCK))
            advance(m.size)
        if last is not None:
            _check(last[1], last[2], DIGEST_PREFIX + last[0].result(), last[3])
        put(bytes(2 * _BLOCK))
        put(bytes(-written % _RECORD))


def _check(m: Member, path: Path, got: str, size: int) -> None:
    """An object written must be the one listed: its size, and its name's digest.

    Raises:
        DigestMismatchError: it changed behind the ledger's back: refused as every verifying
            path refuses it (exit 1), not as an operational error (rev18 finding 2).
    """
    if (size, got) != (m.size, DIGEST_PREFIX + m.sha256):
        raise DigestMismatchError(
            f"export: object sha256:{m.sha256} in the store is {size} bytes hashing to {got}, "
            f"want {m.size} bytes; nothing was exported: 'trajledger fsck' names every damaged "
            f"object, 'trajledger fsck --repair --from BUNDLE|LEDGER' restores them",
            subject=str(path), expected=DIGEST_PREFIX + m.sha256, observed=got,
        )


_AHEAD = 1 << 16
"""An object of this size or more is hashed on a thread of its own (`_HashAhead`) while the
compressor takes its bytes on the writing thread; a smaller one (an envelope, a manifest) is
hashed where it is read, as handing it over would cost more than hashing it."""


class _HashAhead:
    """The export's hashing off its writing thread, which is the writing's critical path (the
    zstd workers take about a third of its CPU; xfer44): each chunk is read into one of
    `RING` reused buffers, handed to the hashing thread (``pool``, one worker: the chunks of an
    object are hashed in order) and to the compressor at once; a buffer is read into again only
    once its hashing is done. `hashlib` and the compressor both leave the GIL for such chunks."""

    RING = 4

    def __init__(self) -> None:
        self.pool: ThreadPoolExecutor
        self._buffers = [bytearray(CHUNK) for _ in range(self.RING)]
        self._hashing: list[Future[None] | None] = [None] * self.RING
        self._next = 0

    def copy(self, fh: io.FileIO, put: Callable[[memoryview], None]) -> tuple[Future[str], int]:
        """Hand every chunk of ``fh`` to ``put``, hashed meanwhile on the pool's thread;
        returns the digest to come (hex) and the size."""
        h, size = hashlib.sha256(), 0
        while True:
            i, self._next = self._next, (self._next + 1) % self.RING
            if (busy := self._hashing[i]) is not None:
                busy.result()  # (and raises what the hashing did)
            if not (n := fh.readinto(self._buffers[i])):
                return self.pool.submit(h.hexdigest), size
            view = memoryview(self._buffers[i])[:n]
            self._hashing[i] = self.pool.submit(h.update, view)
            put(view)
            size += n


_BLOCK = 512
_RECORD = 20 * _BLOCK
"""tar's block and record sizes (``tarfile.BLOCKSIZE``, ``tarfile.RECORDSIZE``)."""
_USTAR_OWNER = b"0000644\0" + b"0000000\0" * 2
"""A member's mode (0644), uid and gid (0) fields, as ``tarfile`` writes them."""
_USTAR_TAIL = b"".join((
    b"00000000000\0",  # mtime 0
    b" " * 8,  # the checksum field, counted as spaces
    b"0",  # a regular file
    bytes(100),  # no link name
    b"ustar\x0000",  # POSIX magic and version
    bytes(32 + 32 + 8 + 8 + 155 + 12),  # no uname, gname, device numbers, prefix; padding
))
"""The fields of a member's ustar block after its size (``tarfile``'s ``_create_header``)."""


def tar_header(name: str, size: int) -> bytes:
    """The pax/ustar header block(s) of a regular member: mode 0644, owner 0, mtime 0, so the
    same evidence gives the same tar.

    A member whose name is ASCII of at most 100 characters and whose size fits 11 octal digits
    (every name a bundle's layout allows) needs no pax record: its one ustar block is built
    here, the bytes ``tarfile`` builds for it (about 20x cheaper: a bundle has thousands of
    members; tests/unit/ledger/test_exchange_write.py compares the two). Any other goes
    through ``tarfile``."""
    if name.isascii() and len(name) <= 100 and 0 <= size < 8**11:
        block = b"".join((name.encode("ascii").ljust(100, b"\0"), _USTAR_OWNER,
                          b"%011o\0" % size, _USTAR_TAIL))
        return b"%s%06o\0%s" % (block[:148], sum(block), block[155:])
    import tarfile

    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
