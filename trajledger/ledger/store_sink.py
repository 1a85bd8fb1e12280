"""The temp file of an object a local store writes from a stream, around the page cache where
it can (``O_DIRECT``): `DirectSink`, used by `ObjectStore.put_stream` (``ledger.store``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from trajledger.verify.digest import CHUNK

__all__ = ["DirectSink"]


class DirectSink:
    """The temp file of an object being stored from a stream (`ObjectStore.put_stream`).

    A durable store writes a large object around the page cache (``O_DIRECT``) when the file
    system allows it: its bytes go from the hashing buffer to the disk once, instead of being
    copied into the page cache and written back by the fsync in this process (which, for a
    GiB, costs more CPU than hashing it). Chunks are direct while they are whole blocks from
    an aligned buffer (`copy_hashing` reads files into a page-aligned one); of the first chunk
    that is not, the whole blocks still go direct, and what follows them (the file's last
    partial block, under 4 KiB), like everything after a buffer direct I/O refuses, is written
    through the page cache at the same offset. The object reads the same either way; it is
    just not cached after it is stored.
    """

    BLOCK = 4096
    """Direct writes are whole multiples of this (the largest logical block size in use)."""

    def __init__(self, opener: Callable[[int], int], *, direct: bool) -> None:
        self._opener = opener
        self._direct_ok = direct and hasattr(os, "O_DIRECT")
        self._direct = False
        self._fd: int | None = None
        self._offset = 0

    @property
    def fd(self) -> int:
        """The descriptor (for fsync), once something was written; else the file opened now."""
        if self._fd is None:
            self._fd = self._opener(os.O_WRONLY)
        return self._fd

    def __enter__(self) -> DirectSink:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def write(self, data: bytes | memoryview) -> None:
        """Write ``data`` at the end (every byte: short writes are continued)."""
        view = memoryview(data).cast("B")
        if self._fd is None:
            self._open_for(len(view))
        while view:
            part = view
            if self._direct and len(view) % self.BLOCK:
                # The whole blocks still go direct; only the last partial one (under 4 KiB)
                # through the page cache.
                part = view[: len(view) - len(view) % self.BLOCK]
                if not part:
                    self._through_cache()
                    part = view
            try:
                n = os.write(self.fd, part)
            except OSError as e:
                if not (self._direct and e.errno == errno.EINVAL):
                    raise
                self._through_cache()  # an unaligned buffer, or a file system that refuses
                continue
            view = view[n:]
            self._offset += n

    def _open_for(self, first: int) -> None:
        if self._direct_ok and first >= CHUNK and first % self.BLOCK == 0:
            try:
                self._fd = self._opener(os.O_WRONLY | os.O_DIRECT)
                self._direct = True
                return
            except OSError as e:
                if e.errno != errno.EINVAL:  # a file system without direct I/O (tmpfs)
                    raise
        self._fd = self._opener(os.O_WRONLY)

    def _through_cache(self) -> None:
        """Continue at the same offset through the page cache."""
        assert self._fd is not None
        os.close(self._fd)
        self._fd = None
        self._direct = False
        os.lseek(self.fd, self._offset, os.SEEK_SET)
