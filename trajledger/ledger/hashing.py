"""Copying a stream while hashing it: how the store, imports and remotes take in bytes.

Scope: `copy_hashing`, the one hash-while-copy loop (the write side: a verifier only hashes,
``verify.digest``). Non-scope: where the bytes go (``ledger.store``, ``ledger.exchange``).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable

from trajledger.verify.digest import CHUNK, DIGEST_PREFIX, read_buffer

__all__ = ["copy_hashing"]


def copy_hashing(
    read: Callable[[int], bytes] | io.BufferedIOBase | io.RawIOBase,
    write: Callable[[bytes | memoryview], object],
    chunk: int = CHUNK,
) -> tuple[str, int]:
    """Copy a stream while hashing it, in one pass: the one hash-while-copy loop.

    Args:
        read: ``read(n)`` returns up to ``n`` bytes, ``b""`` at the end (a file's ``read``); or
            a binary file, read with ``readinto`` into this thread's reused 1 MiB buffer
            (nothing allocated per chunk: a fresh megabyte per chunk costs its zeroing and page
            faults, more than the copy). ``write`` then gets views of that buffer, valid only
            during the call: a sink that keeps them (a queue, an asynchronous upload) must be
            given ``read`` instead.
        write: receives every chunk, in order.
        chunk: the read size (for ``read(n)``).

    Returns:
        The ``sha256:<hex>`` digest and the size of what was copied.
    """
    h = hashlib.sha256()
    size = 0
    if isinstance(read, io.BufferedIOBase | io.RawIOBase):
        buf, view = read_buffer()
        while n := read.readinto(buf):
            part = view[:n]
            h.update(part)
            write(part)
            size += n
        return DIGEST_PREFIX + h.hexdigest(), size
    while data := read(chunk):
        h.update(data)
        write(data)
        size += len(data)
    return DIGEST_PREFIX + h.hexdigest(), size
