"""The fault injection harness the fault tests share (tests/e2e/test_faults.py,
tests/e2e/test_fault_sweep.py, tests/e2e/test_read_fault_sweep.py); they ``import faultkit``.

Scope:

- `Faults`: wraps ``os.open``/``os.write``/``os.fsync``/``os.replace``/``os.rename``/
  ``os.link``/``os.mkdir``, Python's ``open`` and (``sqlite=True``) the statements that write
  of the SQLite connections trajledger opens, for paths inside its roots; a first run counts
  the calls an operation makes, then each run fails call k: with the ``OSError`` the OS would
  give (a SQLite statement: the ``sqlite3.OperationalError`` SQLite gives for it), or a real
  SIGKILL (`killed`: in a forked child; no ``finally`` runs). ``fsync`` is a fault point but
  is not performed: durability is not what is tested (a kill keeps the page cache).
  With ``reads=True`` the points are the reads instead (opens for reading, SQLite SELECTs:
  tests/e2e/test_read_fault_sweep.py).
- `Restorer`: puts a work copy of a directory back to its pristine state between faults.

Non-scope: what an operation must leave after a fault (each test module's checks).
"""

from __future__ import annotations

import builtins
import datetime as dt
import errno
import io
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trajledger.ledger import trust_state

_real = {
    "open": os.open,
    "write": os.write,
    "fsync": os.fsync,
    "replace": os.replace,
    "rename": os.rename,
    "link": os.link,
    "mkdir": os.mkdir,
    "builtins.open": builtins.open,
    "connect": sqlite3.connect,
}
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_SQL_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "COMMIT", "CREATE", "DROP")
_SQL_ERRORS = {errno.EIO: "disk I/O error", errno.ENOSPC: "database or disk is full"}


@dataclass
class Faults:
    """Counts (and fails one of) the filesystem writes under ``roots`` (one path or several)."""

    roots: str | tuple[str, ...]
    fail_at: int | None = None
    kill: bool = False
    code: int = errno.EIO
    sqlite: bool = False
    """Whether the statements that write of SQLite databases under the roots are fault points
    (SQLite's own writes are below Python: its statement fails as SQLite would fail it)."""
    where: str | None = None
    """Fail the first write or fsync (``reads``: read) of a path containing this instead of
    call ``fail_at`` (a process other than the one that counted makes other calls before it)."""
    nth: tuple[str, str, int] | None = None
    """Fail the call of kind ``nth[0]`` whose path contains ``nth[1]`` that is the ``nth[2]``-th
    (from 0) such call, whatever other calls came before it (a digest that falls in a new
    fan-out directory of the store costs one fsync more: the lead's, att47 finding 2)."""
    reads: bool = False
    """Whether the fault points are the reads instead of the writes: opens for reading
    (``os.open``, Python's ``open``; a ``read()`` follows each) and, with ``sqlite``, the
    statements that read (SELECT): an EIO there is a disk that cannot give a file back."""
    calls: list[tuple[str, str]] = field(default_factory=list)
    reader: tuple[str, ...] = ()
    """The functions of trajledger that made the read failed (innermost first; empty before a
    fault): which reader passed over a fault, where its path cannot say (left30)."""

    def __post_init__(self) -> None:
        if isinstance(self.roots, str):
            self.roots = (self.roots,)

    def inside(self, path: Any) -> bool:
        try:
            return os.path.abspath(os.fspath(path)).startswith(self.roots)
        except TypeError:
            return False

    def rel(self, path: str) -> str:
        """``path`` named from its root's name."""
        for root in self.roots:
            if os.path.abspath(path).startswith(root):
                return f"{Path(root).name}/{os.path.relpath(path, root)}"
        return path

    def hit(self, kind: str, path: str) -> None:
        n = len(self.calls)
        self.calls.append((kind, self.rel(path)))
        if self.nth is not None and kind == self.nth[0] and self.nth[1] in self.calls[-1][1]:
            which, where, left = self.nth
            self.nth = (which, where, left - 1)
            if left == 0:
                self.fail_at = n
        if n == self.fail_at or (self.where is not None and kind in (
                ("read", "sqlite") if self.reads else ("write", "fsync"))
                and self.where in self.calls[-1][1]):
            if self.kill:
                os.kill(os.getpid(), signal.SIGKILL)
            self.reader = tuple(f.name for f in reversed(traceback.extract_stack())
                                if f"{os.sep}trajledger{os.sep}" in f.filename)
            if kind == "sqlite":
                raise sqlite3.OperationalError(_SQL_ERRORS.get(self.code, "disk I/O error"))
            raise OSError(self.code, os.strerror(self.code), path)

    def path_of_fd(self, fd: int) -> str | None:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        return target if self.inside(target) else None

    @contextmanager
    def active(self) -> Iterator[Faults]:
        faults = self

        def fopen(path: Any, flags: int, mode: int = 0o777, *a: Any, **kw: Any) -> int:
            full = path
            if (faults.reads and kw.get("dir_fd") is not None and flags & os.O_NOFOLLOW
                    and not flags & os.O_DIRECTORY):  # (a file read beneath a directory:
                # `serve._open_beneath`'s last component; not a directory's, `shutil.rmtree`'s
                # or `fs.open_dirs_below`'s, whose number varies from run to run)
                full = os.path.join(os.readlink(f"/proc/self/fd/{kw['dir_fd']}"), path)
            if bool(flags & _WRITING) != faults.reads and faults.inside(full):
                faults.hit("read" if faults.reads else "open", os.fspath(full))
            return _real["open"](path, flags, mode, *a, **kw)  # type: ignore[no-any-return]

        def fwrite(fd: int, data: Any) -> int:
            p = None if faults.reads else faults.path_of_fd(fd)
            if p is not None:
                faults.hit("write", p)
            return _real["write"](fd, data)  # type: ignore[no-any-return]

        def ffsync(fd: Any) -> None:
            # A fault point; not performed: durability is not under test (a kill keeps the
            # page cache) and fsyncs would make the sweep slow.
            n = fd if isinstance(fd, int) else fd.fileno()
            p = None if faults.reads else faults.path_of_fd(n)
            if p is not None:
                faults.hit("fsync", p)

        def frename(kind: str) -> Callable[..., None]:
            def f(src: Any, dst: Any, *a: Any, **kw: Any) -> None:
                if not faults.reads and faults.inside(dst):
                    faults.hit("rename", os.fspath(dst))
                _real[kind](src, dst, *a, **kw)

            return f

        def fmkdir(path: Any, *a: Any, **kw: Any) -> None:
            if not faults.reads and faults.inside(path):
                faults.hit("mkdir", os.fspath(path))
            _real["mkdir"](path, *a, **kw)

        def bopen(file: Any, mode: str = "r", *a: Any, **kw: Any) -> Any:
            writing = any(c in mode for c in "wax+")
            if faults.reads and not writing and not isinstance(file, int) and faults.inside(file):
                faults.hit("read", os.fspath(file))
            elif not faults.reads and writing and not isinstance(file, int) and faults.inside(file):
                faults.hit("open", os.fspath(file))
                real = _real["builtins.open"](file, mode, *a, **kw)
                return _Writer(faults, os.fspath(file), real)
            return _real["builtins.open"](file, mode, *a, **kw)

        def fconnect(database: Any, *a: Any, **kw: Any) -> Any:
            db = _real["connect"](database, *a, **kw)
            if faults.sqlite and faults.inside(database):
                return _Connection(faults, os.fspath(database), db)
            return db

        patches = [
            (os, "open", fopen),
            (os, "write", fwrite),
            (os, "fsync", ffsync),
            (os, "replace", frename("replace")),
            (os, "rename", frename("rename")),
            (os, "link", frename("link")),
            (os, "mkdir", fmkdir),
            (builtins, "open", bopen),
            (io, "open", bopen),
            (sqlite3, "connect", fconnect),
            # The user's state notes the time it is used at, at most once a minute: here at
            # every use, so that a run makes the same calls whenever it runs (a plan counted
            # once is replayed by index; a write a minute after the state was put back shifted
            # every later point: the release test failed in CI so, "cannot append").
            (trust_state, "USED_EVERY", dt.timedelta(0)),
        ]
        saved = [(mod, name, getattr(mod, name)) for mod, name, _fn in patches]
        for mod, name, fn in patches:
            setattr(mod, name, fn)
        try:
            yield self
        finally:
            for mod, name, fn in saved:
                setattr(mod, name, fn)


class _Writer:
    """A file opened for writing: each write is a fault point."""

    def __init__(self, faults: Faults, path: str, f: Any) -> None:
        self._faults, self._path, self._f = faults, path, f

    def write(self, data: Any) -> int:
        self._faults.hit("write", self._path)
        return int(self._f.write(data))

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


class _Connection:
    """A SQLite connection: each statement that writes is a fault point (before it runs)."""

    def __init__(self, faults: Faults, path: str, db: sqlite3.Connection) -> None:
        self._faults, self._path, self._db = faults, path, db

    def _check(self, sql: str) -> None:
        verb = sql.lstrip().split(" ", 1)[0].upper()
        if verb == "SELECT" if self._faults.reads else verb.startswith(_SQL_WRITES):
            self._faults.hit("sqlite", f"{self._path} {verb}")

    def execute(self, sql: str, *a: Any) -> Any:
        self._check(sql)
        return self._db.execute(sql, *a)

    def executemany(self, sql: str, *a: Any) -> Any:
        self._check(sql)
        return self._db.executemany(sql, *a)

    def executescript(self, sql: str) -> Any:
        self._check(sql)
        return self._db.executescript(sql)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


HANG = 120.0
"""Seconds a forked child may run before it is taken as hung (a guard, not a measure)."""


def killed(run: Callable[[], object]) -> bool:
    """Run ``run`` in a forked child (its `Faults` set to kill); True when it was killed at
    the point, False when it ended or hung (killed after `HANG` seconds): a library whose
    threads do not survive a fork (lance's runtime) may wait for them for ever in the child."""
    pid = os.fork()
    if pid == 0:
        try:
            run()
        finally:
            os._exit(0)
    deadline = time.monotonic() + HANG
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return False
    return os.WIFSIGNALED(done[1]) and os.WTERMSIG(done[1]) == signal.SIGKILL


CHILD = """
import os, sys
sys.path.insert(0, sys.argv[1])
from click.testing import CliRunner
from faultkit import Faults
from trajledger.runner.cli import main
with Faults(tuple(sys.argv[2].split("\\n")), kill=True, sqlite=True, where=sys.argv[3]).active():
    CliRunner().invoke(main, sys.argv[4:])
"""
"""A process of its own that runs the command ``argv[4:]`` killed at the first write or fsync
of a path containing ``argv[3]`` under the roots ``argv[2]`` (`killed_process`)."""


def killed_process(roots: tuple[str, ...], where: str, argv: list[str]) -> bool:
    """`killed`, in a new process (nothing of this one's threads or caches in it); True when
    it was killed at the point."""
    r = subprocess.run([sys.executable, "-c", CHILD, os.path.dirname(__file__),
                        "\n".join(roots), where, *argv], timeout=HANG, check=False)
    return r.returncode == -signal.SIGKILL


class Restorer:
    """Puts a work copy of a directory (a ledger, a user state) back to its pristine state
    between faults, touching only what changed (deleting and re-creating the whole tree costs
    far more than the operation).

    Write-once files (objects, tiles) are hard links to the pristine ones: each is replaced by a
    rename when written, so an inode other than the pristine one means it changed. Other files
    are copies, compared byte for byte.
    """

    def __init__(self, pristine: Path, work: Path) -> None:
        self.pristine, self.work = pristine, work
        self.files: dict[str, tuple[bool, int]] = {}  # rel -> (hard-linked, pristine inode)
        self.data: dict[str, bytes] = {}  # rel -> the pristine bytes of a copied file
        self.dirs: set[str] = set()
        for dirpath, dirnames, filenames in os.walk(pristine):
            rel_dir = os.path.relpath(dirpath, pristine)
            self.dirs.update(os.path.normpath(os.path.join(rel_dir, d)) for d in dirnames)
            for f in filenames:
                rel = os.path.normpath(os.path.join(rel_dir, f))
                linked = rel.startswith(("objects" + os.sep, os.path.join("log", "tile") + os.sep))
                self.files[rel] = (linked, os.stat(os.path.join(dirpath, f)).st_ino)
                if not linked:
                    self.data[rel] = Path(dirpath, f).read_bytes()
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        for d in sorted(self.dirs):
            (work / d).mkdir(parents=True, exist_ok=True)
        for rel in self.files:
            self._put(rel)

    def _put(self, rel: str) -> None:
        src, dst = os.path.join(self.pristine, rel), os.path.join(self.work, rel)
        if self.files[rel][0]:
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    def restore(self) -> None:
        """Make the work copy equal to the pristine ledger again."""
        present: set[str] = set()
        for dirpath, dirnames, filenames in os.walk(self.work, topdown=False):
            rel_dir = os.path.relpath(dirpath, self.work)
            for f in filenames:
                rel = os.path.normpath(os.path.join(rel_dir, f))
                path = os.path.join(dirpath, f)
                want = self.files.get(rel)
                if want is None:
                    os.unlink(path)
                    continue
                if want[0]:
                    if os.stat(path).st_ino != want[1]:
                        os.unlink(path)
                        self._put(rel)
                else:
                    with open(path, "rb") as fh:
                        same = fh.read() == self.data[rel]
                    if not same:
                        os.unlink(path)
                        self._put(rel)
                present.add(rel)
            for d in dirnames:
                rel = os.path.normpath(os.path.join(rel_dir, d))
                if rel not in self.dirs:
                    shutil.rmtree(os.path.join(dirpath, d))
        for d in sorted(self.dirs):
            os.makedirs(os.path.join(self.work, d), exist_ok=True)
        for rel in self.files.keys() - present:
            self._put(rel)
