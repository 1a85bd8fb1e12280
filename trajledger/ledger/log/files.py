"""The write side's file operations: files written under their own names and made durable
together in one round of fsyncs, and the removal of what an interrupted writer left.

Scope: `write_new` (create or truncate, write, leave open for the round), `SyncRound` (the
files and directories one commit makes durable: their fsyncs run concurrently, and the round
ends only when all returned), `unlink`, `remove`, `drop_temp_files`. Non-scope: what is written
and in which order (``writer``; docs/PERFORMANCE.md, "Durable appends", says why).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path

from ..errors import LogError
from ..fs import TMP_PREFIX, FsyncGroup

__all__ = ["SyncRound", "drop_temp_files", "remove", "unlink", "write_new"]


def unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        unlink(path)


def drop_temp_files(directory: Path) -> None:
    """Remove temp files in a log directory (called under the lock: no live writer owns them)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(TMP_PREFIX):
            remove(directory / name)


def open_own(path: Path, flags: int) -> int:
    """``os.open`` a file the log keeps by a name of its own (created 0644 with ``O_CREAT``),
    never through a symbolic link: whoever planted one, able to write the directory, would
    make the writer write into any file its user may write.

    Raises:
        LogError: ``path`` is a symbolic link (nothing was written).
        OSError: it cannot be opened otherwise.
    """
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise LogError(
            f"{path}: is a symbolic link where the log keeps a file of its own: planted by "
            "someone who can write its directory; nothing was written through it (remove it, "
            "then run 'trajledger log verify')"
        ) from e


def write_new(path: Path, data: bytes) -> int:
    """Create (or truncate) ``path`` and write ``data``; returns it open, not yet fsynced."""
    fd = open_own(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        raise
    return fd


class SyncRound:
    """The files and directories one commit writes, made durable together: each file's fsync
    starts as soon as it is handed over (`FsyncGroup`), and leaving the ``with`` block fsyncs
    the directories too, waits for all and closes them; a failure raises and the commit goes no
    further. A batch that hands over `LIMIT` files waits for them then, so that it never holds
    more descriptors."""

    LIMIT = 64

    def __init__(self) -> None:
        self._fds: list[int] = []
        self._dirs: set[Path] = set()
        self._group = FsyncGroup()

    def __enter__(self) -> SyncRound:
        return self

    def file(self, fd: int) -> None:
        """Take an open file: its fsync starts now; it is closed once all are done."""
        self._fds.append(fd)
        self._group.start(fd)
        if len(self._fds) >= self.LIMIT:
            self._finish()

    def directory(self, path: Path) -> None:
        """Fsync this directory too, at the end (a name was created or renamed in it)."""
        self._dirs.add(path)

    def _finish(self) -> None:
        try:
            self._group.wait()
        finally:
            fds, self._fds = self._fds, []
            for fd in fds:
                os.close(fd)

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is not None:
            with contextlib.suppress(OSError):
                self._finish()
            return
        try:
            for d in sorted(self._dirs):
                fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                self._fds.append(fd)
                self._group.start(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                self._finish()
            raise
        self._finish()
