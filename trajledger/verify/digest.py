"""Content digests: the identity of every blob and artifact.

Scope: the ``sha256:<64 lowercase hex>`` digest string, hashing bytes and files with constant
memory (one reused 1 MiB buffer per thread, `read_buffer`, which the ledger's hash-while-copy
shares), on many threads at once: hashlib releases the GIL while it hashes buffers larger than
2 KiB, so threads use every core without copying data between processes.
Non-scope: storage. Callers hand in bytes or paths.
Spec: schemas/SPEC.md section "Digests".
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import threading
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .errors import FormatError

__all__ = [
    "DIGEST_PREFIX",
    "HEX64",
    "Cancelled",
    "FileDigest",
    "digest_bytes",
    "hash_file",
    "parse_digest",
    "read_buffer",
    "result_of",
    "sha256_hex",
]

_T = TypeVar("_T")

DIGEST_PREFIX = "sha256:"
HEX64 = re.compile(r"[0-9a-f]{64}")
"""64 lowercase hex: a SHA-256 written out (a digest's hex part, a keyid, a fingerprint)."""
CHUNK = 1 << 20


def sha256_hex(data: bytes) -> str:
    """Return the lowercase hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def digest_bytes(data: bytes) -> str:
    """Return the digest string ``sha256:<hex>`` of ``data``."""
    return DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def parse_digest(value: object, what: str = "digest") -> str:
    """Check a digest string and return its 64 hex characters.

    Args:
        value: a candidate ``sha256:<64 lowercase hex>`` string.
        what: names the value in error messages.

    Returns:
        The hex part.

    Raises:
        FormatError: any other algorithm, case or length.
    """
    hexpart = value.removeprefix(DIGEST_PREFIX) if isinstance(value, str) else ""
    if hexpart == value or not HEX64.fullmatch(hexpart):  # no prefix, or not 64 hex after it
        raise FormatError(f"{what}: {value!r} is not of the form sha256:<64 lowercase hex>")
    return hexpart


@dataclass(frozen=True)
class FileDigest:
    """The size and SHA-256 of one file, as read from disk."""

    path: Path
    size: int
    sha256: str

    @property
    def digest(self) -> str:
        """The ``sha256:<hex>`` string."""
        return DIGEST_PREFIX + self.sha256


_local = threading.local()


def read_buffer() -> tuple[mmap.mmap, memoryview]:
    """This thread's 1 MiB read buffer, reused from file to file (a fresh megabyte per file
    costs an allocation, zeroing and page faults for every file). An anonymous mapping, so it
    starts on a page boundary: a writer may hand its views to direct I/O (``O_DIRECT``).
    Private: Python maps ``-1`` shared by default, and a forked child (`ledger.rehash`'s
    workers) would then read its files into the very buffer its parent and siblings use."""
    buf: tuple[mmap.mmap, memoryview] | None = getattr(_local, "buf", None)
    if buf is None:
        raw = mmap.mmap(-1, CHUNK, flags=mmap.MAP_PRIVATE)
        buf = _local.buf = (raw, memoryview(raw))
    return buf


def hash_file(
    path: str | os.PathLike[str], stop: threading.Event | None = None
) -> FileDigest:
    """Hash one file in 1 MiB chunks (constant memory: one buffer per thread, reused).

    Args:
        path: the file.
        stop: when set (the caller was interrupted), hashing stops at the next chunk.

    Raises:
        OSError: the file cannot be read. Callers map this to an operational error.
        Cancelled: ``stop`` was set.
    """
    h = hashlib.sha256()
    size = 0
    buf, view = read_buffer()
    with open(path, "rb", buffering=0) as f:
        while True:
            if stop is not None and stop.is_set():
                raise Cancelled(f"hashing {path}: stopped")
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
            size += n
    return FileDigest(Path(path), size, h.hexdigest())


class Cancelled(Exception):
    """Work stopped because its caller was interrupted (not an error of the input)."""


def result_of(future: Future[_T]) -> _T:
    """``future.result()``, waking every 0.1 s to run Python code: a signal (Ctrl-C) that the
    kernel delivers to a worker thread is handled only when the main thread next runs Python
    code, which a thread blocked on a future that takes hours never does."""
    while not wait([future], timeout=0.1).done:
        pass
    return future.result()
