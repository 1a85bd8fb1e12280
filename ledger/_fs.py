"""Durable file writes: temp file, fsync, rename, directory fsync."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["fsync_dir", "write_file_atomic"]

TMP_PREFIX = ".tmp-"


def fsync_dir(directory: Path) -> None:
    """fsync a directory so a rename in it is durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomic(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a mix.

    The temp file is created with ``mode`` from the start (a private key is never briefly
    world-readable), fsynced, renamed over ``path``, and the directory fsynced.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)
