"""The Python processes the tests start flush to the page cache, as the test processes
themselves do (tests/conftest.py, `flush_to_the_page_cache`): ``os.fsync``, ``os.fdatasync``
and ``trajledger.ledger.fs.syncfs`` check their descriptor and return without waiting for the
disk, and a SQLite connection's ``PRAGMA synchronous=FULL`` (the user state's) is ``OFF``
(tests/conftest.py, `page_cache_commits`); unless ``TRAJLEDGER_TESTS_REAL_FLUSHES=1``.

How it gets there: tests/conftest.py puts this directory first on ``PYTHONPATH`` for the run,
and Python imports ``sitecustomize`` at start-up from the search path (not under ``-I``,
``-S`` or an environment without that ``PYTHONPATH``: such processes flush for real). Each
test of a module whose source names a flush (``_real_flushes``: the durability tests, the
fault sweeps, the spies that count flushes) has ``TRAJLEDGER_TESTS_REAL_FLUSHES=1`` set, so
the processes it starts flush for real too.

Why it is sound: a flush gives durability across a power cut or a kernel crash, which no test
can cause; a process killed (the crash tests' SIGKILL) loses nothing the kernel holds, and a
file written and closed is read back the same from the page cache either way. Every call still
runs where the product makes it, fails as the real one on a descriptor that is not open
(``EBADF``), and is passed to the real call on anything but a regular file or a directory.
What it saves: the wait for a disk that a CI machine's other jobs keep busy (``syncfs`` waits
for every dirty file of the file system, other processes' too).

Each replacement keeps the real call as its ``__wrapped__``: the xdist workers are processes
the run started too, and tests/conftest.py takes the real calls from under these for the
modules that keep them.

Nothing is imported here that Python's start-up has not imported (no trajledger module, no
sqlite3: a test of what a command imports sees what it saw): ``trajledger.ledger.fs`` and
``sqlite3`` are patched when the process imports them, by a finder that wraps their loaders
and leaves once both are.
"""

from __future__ import annotations

import os
import stat
import sys

REAL_FLUSHES_ENV = "TRAJLEDGER_TESTS_REAL_FLUSHES"
FS_MODULE = "trajledger.ledger.fs"


def _checked(real):
    def flush(fd):
        mode = os.fstat(fd).st_mode  # (EBADF, as the real call)
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            real(fd)

    flush.__wrapped__ = real
    return flush


def _syncfs_of(real):
    def syncfs(fd, path=None):
        os.fstat(fd)

    syncfs.__wrapped__ = real
    return syncfs


SYNCED = "PRAGMA synchronous=FULL"


def _page_cache_commits(sqlite3):
    """tests/conftest.py's `page_cache_commits`, on the module ``sqlite3`` just imported."""
    connect = sqlite3.connect

    class PageCacheCommits(sqlite3.Connection):
        def execute(self, sql, *args):
            return super().execute("PRAGMA synchronous=OFF" if sql == SYNCED else sql, *args)

    def page_cache_connect(*args, **kwargs):
        kwargs.setdefault("factory", PageCacheCommits)
        return connect(*args, **kwargs)

    page_cache_connect.__wrapped__ = connect
    sqlite3.connect = page_cache_connect


def _patch_fs(module):
    module.syncfs = _syncfs_of(module.syncfs)


class _Patch:
    """A ``sys.meta_path`` finder that finds nothing itself: for a module of `PATCHES`, it asks
    the other finders and wraps the loader's ``exec_module`` to patch the module once it has
    run; it leaves ``sys.meta_path`` once each is found."""

    def __init__(self, patches):
        self.patches = dict(patches)

    def find_spec(self, name, path, target=None):
        patch = self.patches.pop(name, None)
        if patch is None:
            return None
        if not self.patches:
            sys.meta_path.remove(self)
        specs = (finder.find_spec(name, path, target) for finder in sys.meta_path
                 if finder is not self and hasattr(finder, "find_spec"))  # fmt: skip
        spec = next((spec for spec in specs if spec is not None), None)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                patch(module)

            spec.loader.exec_module = exec_module
        return spec


PATCHES = {FS_MODULE: _patch_fs, "sqlite3": _page_cache_commits}
"""What `_Patch` patches, by module, when it is imported."""

if os.environ.get(REAL_FLUSHES_ENV) != "1":
    os.fsync = _checked(os.fsync)
    os.fdatasync = _checked(os.fdatasync)
    sys.meta_path.insert(0, _Patch(PATCHES))
