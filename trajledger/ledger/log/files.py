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


def unlink(path: str | Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


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


def open_own(path: str | Path, flags: int, *, dir_fd: int | None = None) -> int:
    """``os.open`` a file the log keeps by a name of its own (created 0644 with ``O_CREAT``),
    never through a symbolic link: whoever planted one, able to write the directory, would
    make the writer write into any file its user may write. With ``dir_fd`` (a descriptor of
    ``path``'s directory, walked to by `fs.open_dirs_below`), the name is opened relative to it.

    Raises:
        LogError: ``path`` is a symbolic link (nothing was written).
        OSError: it cannot be opened otherwise.
    """
    try:
        return os.open(path if dir_fd is None else os.path.basename(path),
                       flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise LogError(
            f"{path}: is a symbolic link where the log keeps a file of its own: planted by "
            "someone who can write its directory; nothing was written through it (remove it, "
            "then run 'trajledger log verify')"
        ) from e


def write_new(path: str | Path, data: bytes, *, dir_fd: int | None = None) -> int:
    """Create (or truncate) ``path`` and write ``data``; returns it open, not yet fsynced.
    ``dir_fd``: as `open_own`."""
    fd = open_own(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, dir_fd=dir_fd)
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
    the directories too (the last on the calling thread, which would otherwise only wait),
    waits for all and closes them; a failure raises and the commit goes no
    further. A batch that hands over `LIMIT` files waits for them then, so that it never holds
    more descriptors."""

    LIMIT = 64

    def __init__(self) -> None:
        self._fds: list[int] = []
        self._dirs: set[str] = set()
        self._dir_fds: dict[str, int] = {}
        self._group = FsyncGroup()

    def __enter__(self) -> SyncRound:
        return self

    def file(self, fd: int) -> None:
        """Take an open file: its fsync starts now; it is closed once all are done."""
        self._fds.append(fd)
        self._group.start(fd)
        if len(self._fds) >= self.LIMIT:
            self._finish()

    def directory(self, path: str | Path) -> None:
        """Fsync this directory too, at the end (a name was created or renamed in it)."""
        self._dirs.add(os.fspath(path))

    def directory_fd(self, path: str, fd: int) -> None:
        """Fsync the directory ``path`` too, at the end, by ``fd``: the descriptor its name
        was created by (taken: closed with the round; a second one of the same path is closed
        now)."""
        if path in self._dir_fds:
            os.close(fd)
        else:
            self._dir_fds[path] = fd

    def _finish(self) -> None:
        try:
            self._group.wait()
        finally:
            fds, self._fds = self._fds, []
            for fd in fds:
                os.close(fd)

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        held, self._dir_fds = self._dir_fds, {}
        if kind is not None:
            self._fds.extend(held.values())
            with contextlib.suppress(OSError):
                self._finish()
            return
        todo = list(held.values())
        self._fds.extend(todo)
        try:
            for d in sorted(self._dirs - held.keys()):
                fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                self._fds.append(fd)
                todo.append(fd)
            for fd in todo[:-1]:
                self._group.start(fd)
            if todo:  # the last on this thread, while it would only wait: one hand-off fewer
                os.fsync(todo[-1])
        except BaseException:
            with contextlib.suppress(OSError):
                self._finish()
            raise
        self._finish()
