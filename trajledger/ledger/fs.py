"""Durable file writes (temp file, fsync, rename, directory fsync) and their leftovers.

Temp files and directories are named ``.tmp-<host>-<pid>-<random>`` (`temp_name`): ``host`` is
8 hex digits of the SHA-256 of this machine's host name and, on Linux, of its process-id
namespace (`_host_tag`), ``pid`` the writing process. A process killed mid-write leaves one
behind. `is_stale` decides whether one can still belong to a live writer, so that the next
writer (and ``trajledger gc``) removes only dead ones:

- named by this host: stale when that process is gone (``kill(pid, 0)`` says no such process;
  a reused pid only delays the removal, never hastens it);
- anything else (another host sharing the directory, a container of this host with a process-id
  namespace of its own, whose pids mean nothing here, or a name without an owner such as
  ``tmpXXXXXXXX`` from ``tempfile`` or a ``.tmp-`` file of trajledger 0.1): stale when nothing in
  it changed for `STALE_AFTER` seconds and not since this process started (a writer that has
  been silent for an hour on another host is presumed dead).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import queue
import re
import secrets
import shutil
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import cast

from .errors import LedgerError, shell_word

__all__ = [
    "STALE_AFTER",
    "SYNCFS_FILE_SYSTEMS",
    "SYNCFS_KERNEL",
    "TMP_PREFIX",
    "FileSystemSync",
    "FsyncGroup",
    "SyncBehind",
    "SyncPool",
    "drop_other_versions",
    "fsync_all",
    "fsync_dir",
    "is_stale",
    "move_into_place",
    "only_thread",
    "open_dirs_below",
    "refuse_special",
    "refuse_writable",
    "remove_tree",
    "special_kind",
    "sync_paths",
    "sync_paths_ahead",
    "sync_tree_behind",
    "syncfs",
    "temp_dir",
    "temp_name",
    "tmp_entries",
    "write_file_atomic",
]

TMP_PREFIX = ".tmp-"
STALE_AFTER = 3600.0
"""Seconds without change after which a leftover of unknown owner is presumed dead."""


def _host_tag() -> str:
    """Who can judge a pid in a temp name by ``kill(pid, 0)``: processes of this host name in
    this process-id namespace. Containers often share a host name (``--network host``) and a
    ledger volume, each with pids of its own: a pid one names is not the other's (without the
    namespace, a live writer's staging in one was swept by a writer in the other)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux, or no /proc: the host name alone
        namespace = ""
    ident = os.uname().nodename + (f"\0{namespace}" if namespace else "")
    return hashlib.sha256(ident.encode("utf-8", "replace")).hexdigest()[:8]


_HOST = _host_tag()
_STARTED = time.time()
_OWNED = re.compile(r"\.tmp-([0-9a-f]{8})-([0-9]+)-[0-9a-f]+(?:\..*)?")


def temp_name(suffix: str = "") -> str:
    """A temp file name owned by this process: ``.tmp-<host>-<pid>-<random><suffix>``."""
    return f"{TMP_PREFIX}{_HOST}-{os.getpid()}-{secrets.token_hex(6)}{suffix}"


def temp_dir(parent: Path) -> tempfile.TemporaryDirectory[str]:
    """A temporary directory in ``parent`` (created if needed) named like `temp_name`, so the
    next writer can tell a killed process's leftover from a live one's at once. A failure to
    remove it at the end (a disk that cannot read it back: EIO) is not the command's: its work
    is done, and the next writer sweeps what is left (`fsck.leftovers`)."""
    parent.mkdir(exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=temp_name(".d"), dir=parent,
                                       ignore_cleanup_errors=True)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # (past pid_t: no process has it, rev30)
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def _newest_mtime(path: Path) -> float:
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                with contextlib.suppress(OSError):
                    newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
    return newest


def is_stale(path: Path, *, now: float | None = None) -> bool:
    """Whether the temp file or directory ``path`` cannot belong to a live writer (see above).

    Returns False for a path that vanished meanwhile.
    """
    m = _OWNED.fullmatch(path.name)
    if m is not None and m.group(1) == _HOST:
        return not _pid_alive(int(m.group(2)))
    try:
        newest = _newest_mtime(path)
    except FileNotFoundError:
        return False
    current = time.time() if now is None else now
    return newest < _STARTED and current - newest > STALE_AFTER


def tmp_entries(tmp: Path) -> Iterator[Path]:
    """What writers made in a ledger's ``tmp/`` directory (``tmp*`` and ``.tmp-*`` files and
    directories), sorted; none when it does not exist."""
    try:
        names = sorted(os.listdir(tmp))
    except (FileNotFoundError, NotADirectoryError):
        return
    for n in names:
        if n.startswith(("tmp", TMP_PREFIX)):
            yield tmp / n


def remove_tree(path: Path) -> None:
    """Remove a file or a directory tree (a missing one is fine), read-only directories too (a
    command's data directory is made read-only: ``runner.workdir``)."""
    if path.is_dir() and not path.is_symlink():
        _open_up(None, str(path))
        shutil.rmtree(path, ignore_errors=True)  # (it refuses a link itself)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


_DIR_NOFOLLOW = os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_PATH", os.O_RDONLY)


def _open_up(parent: int | None, name: str) -> None:
    """Give the directory ``name`` (in the directory open as ``parent``; None: a path) and each
    directory below it mode 0700 where this process may not write or search it, so that
    `remove_tree` can empty it; errors are ignored (what cannot be opened up stays). No link is
    followed at any level: each directory is opened by name in its parent with ``O_NOFOLLOW``
    and changed through that descriptor (``/proc/self/fd``), so a link swapped in since it was
    listed (a top-level one after `remove_tree`'s check: a shared directory's race, review
    rev30's Left) fails to open and what it points at is untouched (left34)."""
    try:
        fd = os.open(name, _DIR_NOFOLLOW, dir_fd=parent)
    except OSError:  # a link (not followed), gone, or not to be opened
        return
    try:
        here = f"/proc/self/fd/{fd}"  # the directory opened, whatever its name points at now
        with contextlib.suppress(OSError):
            if not os.access(here, os.W_OK | os.X_OK):
                os.chmod(here, 0o700)
        below: list[str] = []
        with contextlib.suppress(OSError), os.scandir(here) as entries:
            below = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
        for child in below:
            _open_up(fd, child)
    finally:
        os.close(fd)


def fsync_dir(directory: str | Path) -> None:
    """fsync a directory so a rename in it is durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


DIR_BELOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""How a writer opens a directory below its root (`open_dirs_below`)."""


def open_dirs_below(
    at: int, base: str, parts: Sequence[str], refuse: Callable[[str], LedgerError], *,
    make: bool = True, made: set[str] | None = None,
) -> int:
    """A new descriptor of the directory ``base/parts...``, opened from ``at`` (a descriptor
    of ``base``, left open) one component at a time, each relative to the last and none
    followed if it is a link (``O_NOFOLLOW | O_DIRECTORY``; Python 3.11 has no ``openat2``
    ``RESOLVE_BENEATH``). A missing component is made (its parent's path added to ``made``,
    when given, to be made durable), unless ``make`` is false (then FileNotFoundError).
    Whoever can write a ledger's directories cannot have a writer write through a directory
    they replaced by a link to one of theirs (rev14): the writer creates and renames relative
    to the descriptor returned.

    Raises:
        LedgerError: ``refuse(message)`` for a component that is a link or not a directory:
            the message names it and says nothing was written through it.
        OSError: a directory cannot be opened or made.
    """
    cur = at
    try:
        for part in parts:
            try:
                try:
                    nxt = _open_below(part, cur, base, refuse)
                except FileNotFoundError:
                    if not make:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, dir_fd=cur)
                        if made is not None:
                            made.add(base)
                    nxt = _open_below(part, cur, base, refuse)
            except OSError as e:  # named by its path, not by the part alone
                raise OSError(e.errno, e.strerror, f"{base}/{part}") from e
            if cur != at:
                os.close(cur)
            cur = nxt
            base = f"{base}/{part}"
    except BaseException:
        if cur != at:
            os.close(cur)
        raise
    return cur if cur != at else os.dup(at)


def _open_below(name: str, at: int, base: str, refuse: Callable[[str], LedgerError]) -> int:
    try:
        return os.open(name, DIR_BELOW, dir_fd=at)
    except OSError as e:
        if e.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        try:
            what = f"a symbolic link (to {os.readlink(name, dir_fd=at)})"
        except OSError:
            what = "not a directory"
        raise refuse(
            f"{base}/{name}: is {what} where trajledger keeps a directory of its own: planted "
            "by someone who can write the ledger's directories; nothing was written through "
            "it (remove it, then run 'trajledger fsck')"
        ) from e


_SYNC_THREADS = 8


class SyncPool:
    """The fsync threads: `_SYNC_THREADS` of them (named ``trajledger-fsync_<n>``), each taking
    ``(function, descriptor, done)`` jobs from one queue, running ``function(descriptor)`` and
    calling ``done`` with what it raised (None: it returned). Lighter than a
    ``ThreadPoolExecutor`` (no future, work item or waiter per job): a commit hands it six
    fsyncs. Daemon threads, so that an idle pool never holds the interpreter's exit; every
    caller waits for its own jobs before it goes on."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[int], object], int, Callable[[BaseException | None], None]] | None
        ] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"trajledger-fsync_{n}",
                                          daemon=True) for n in range(_SYNC_THREADS)]  # fmt: skip
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            function, fd, done = job
            try:
                function(fd)
            except BaseException as e:  # (handed to the waiting caller, as a future would)
                done(e)
            else:
                done(None)
            del job, function, done

    def run(self, function: Callable[[int], object], fd: int,
            done: Callable[[BaseException | None], None]) -> None:  # fmt: skip
        """Run ``function(fd)`` on a thread of the pool, then ``done`` with its error or None."""
        self._jobs.put((function, fd, done))

    def submit(self, function: Callable[[int], object], fd: int) -> Future[None]:
        """``function(fd)`` on the pool, as a future."""
        future: Future[None] = Future()
        future.set_running_or_notify_cancel()

        def done(error: BaseException | None) -> None:
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

        self.run(function, fd, done)
        return future

    def shutdown(self) -> None:
        """End the threads (each finishes the job it holds first) and wait for them."""
        for _ in self._threads:
            self._jobs.put(None)
        for t in self._threads:
            t.join()


_sync_pool: SyncPool | None = None
_sync_lock = threading.Lock()


def _forget_sync_pool() -> None:
    global _sync_pool
    _sync_pool = None  # a forked child has none of the parent's threads


os.register_at_fork(after_in_child=_forget_sync_pool)


def only_thread() -> bool:
    """Whether the calling thread is the process's only one, once the fsync pool's threads are
    ended when they are the only others (idle between commits: every fsync is waited for; the
    next one starts a new pool). A process forks safely only then: a fork keeps the calling
    thread alone, and a lock another thread held stays held in the child."""
    global _sync_pool
    me = threading.current_thread()
    others = [t for t in threading.enumerate() if t is not me]
    if others and all(t.name.startswith("trajledger-fsync") for t in others):
        with _sync_lock:
            pool, _sync_pool = _sync_pool, None
        if pool is not None:
            pool.shutdown()
    return threading.active_count() == 1


def _pool() -> SyncPool:
    global _sync_pool
    with _sync_lock:
        if _sync_pool is None:
            _sync_pool = SyncPool()
        return _sync_pool


class FsyncGroup:
    """fsyncs that run concurrently, each started as soon as its file is written (`start`, on a
    small thread pool) and all waited for together (`wait`).

    Each descriptor gets its own ``fsync``, exactly as one after the other would; running them
    at once lets a journaling file system (ext4, XFS) commit them together and the device's
    cache flushes coalesce, and starting each as soon as it can overlaps them with the writing of
    the next files.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Lock()  # held while an fsync of the group runs
        self._running = 0
        self._started = 0
        self._errors: list[tuple[int, BaseException]] = []

    def start(self, fd: int) -> None:
        """Start fsyncing ``fd`` (the caller keeps it open until `wait` returned)."""
        pool = _pool()  # (a pool that cannot start its threads raises before anything counts)
        with self._lock:
            if not self._running:
                self._idle.acquire()
            self._running += 1
            n = self._started
            self._started += 1
        pool.run(os.fsync, fd, lambda error: self._done(n, error))

    def _done(self, n: int, error: BaseException | None) -> None:
        with self._lock:
            if error is not None:
                self._errors.append((n, error))
            self._running -= 1
            if not self._running:
                self._idle.release()

    def wait(self) -> None:
        """Wait for every fsync started (even when one failed).

        Raises:
            OSError: the first one (in the order started) that failed.
        """
        with self._idle:  # no descriptor may be closed while its fsync runs
            pass
        errors, self._errors = sorted(self._errors, key=lambda e: e[0]), []
        if errors:
            raise errors[0][1]


class SyncBehind:
    """The data of a file being written sent to the disk on a thread as the file grows, so that
    its one final ``fsync`` finds little left to write: the disk works while the writer still
    computes what comes next (an export's compression), instead of after it.

    `wrote` is told of every byte written; each time ``every`` (default `EVERY`) more bytes
    have been written and no earlier pass is still running, one ``fdatasync`` of the whole file
    starts on the fsync pool. It only moves work earlier: the writer still fsyncs the file
    once it is complete, after `wait`. The file's descriptor must stay open until `wait`
    returned (also when the writing failed: a pass may be running).
    """

    EVERY = 32 << 20
    """Bytes between two passes: large enough that a pass is a long sequential write."""

    def __init__(self, fd: int, every: int | None = None) -> None:
        self._fd = fd
        self._every = self.EVERY if every is None else every
        self._pending = 0
        self._running: Future[None] | None = None

    def wrote(self, n: int) -> None:
        """``n`` more bytes were written to the file.

        Raises:
            OSError: an earlier pass failed (an error ``fdatasync`` reports once per open
                file: the final ``fsync`` would not see it again).
        """
        self._pending += n
        if self._pending < self._every:
            return
        if self._running is not None:
            if not self._running.done():
                return  # the disk is behind: the next pass takes this data too
            self._running.result()
        self._pending = 0
        self._running = _pool().submit(getattr(os, "fdatasync", os.fsync), self._fd)

    def wait(self) -> None:
        """Wait for the pass in flight, if any.

        Raises:
            OSError: it failed.
        """
        running, self._running = self._running, None
        if running is not None:
            running.result()


def fsync_all(fds: Sequence[int]) -> None:
    """fsync several open files and directories, all of them concurrently (`FsyncGroup`; this
    thread takes the first). Returns when every one is done.

    Args:
        fds: open descriptors of regular files or directories (the caller closes them).

    Raises:
        OSError: the first fsync that failed (raised once all have finished).
    """
    if len(fds) <= 1:
        for fd in fds:
            os.fsync(fd)
        return
    group = FsyncGroup()
    for fd in fds[1:]:
        group.start(fd)
    try:
        os.fsync(fds[0])
    except OSError:
        with contextlib.suppress(OSError):
            group.wait()
        raise
    group.wait()


_SYNC_BATCH = 256
"""`sync_paths` holds at most this many descriptors open at once (`_sync_batch`)."""


def _sync_batch() -> int:
    """`_SYNC_BATCH`, or a quarter of the process's soft limit of open files when that is
    smaller (macOS's default is 256): the rest of the command keeps files open too."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _SYNC_BATCH
    return max(1, min(_SYNC_BATCH, soft // 4))


def sync_paths(paths: Sequence[str | Path], stop: threading.Event | None = None) -> None:
    """fsync files and directories by path, concurrently (`fsync_all`, in batches of at most
    `_SYNC_BATCH` open descriptors): one durability pass over many files instead of one
    fsync after each. Once ``stop`` is set, no further batch starts (the pass is abandoned:
    its files will not be kept).

    Raises:
        OSError: a path cannot be opened, or the first fsync that failed.
    """
    batch = _sync_batch()
    for start in range(0, len(paths), batch):
        if stop is not None and stop.is_set():
            return
        fds: list[int] = []
        try:
            for path in paths[start:start + batch]:
                fds.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
            fsync_all(fds)
        finally:
            for fd in fds:
                os.close(fd)


def sync_paths_ahead(
    paths: Sequence[Path], stop: threading.Event | None = None
) -> Callable[[], None]:
    """Start `sync_paths` on a thread of its own (the disk writes while the caller works on);
    returns the wait, which raises what `sync_paths` raised. Setting ``stop`` abandons the
    pass after the batch in flight (then wait, before removing the files it opens by name)."""
    return _on_thread(lambda: sync_paths(paths, stop), "trajledger-sync-ahead")


def _on_thread(
    work: Callable[[], None], name: str, stop: threading.Event | None = None
) -> Callable[[], None]:
    """Run ``work`` on a thread of its own; returns the wait, which sets ``stop`` (when given),
    joins the thread and raises the `OSError` ``work`` raised."""
    failed: list[OSError] = []

    def run() -> None:
        try:
            work()
        except OSError as e:
            failed.append(e)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()

    def wait() -> None:
        if stop is not None:
            stop.set()
        thread.join()
        if failed:
            raise failed[0]

    return wait


def sync_tree_behind(root: Path, interval: float = 0.1) -> Callable[[], None]:
    """fsync, on a thread, the regular files that appear under ``root`` while something else
    writes them there (an import's reading pass, staging the bundle's objects), so that the
    disk writes them meanwhile; returns the stop, which ends the thread, waits for it and
    raises the first fsync that failed.

    It only moves work earlier: a file may be synced before it is complete, and whoever needs
    the files durable still syncs them all once written (`sync_paths`). Every ``interval``
    seconds the tree is listed again and the files not seen before are synced together
    (`fsync_all`, in batches of `_sync_batch`); a file that cannot be opened (removed
    meanwhile) is skipped. A failed fsync ends the pass and is raised by the stop: the error
    is reported to the first fsync after it only, so the later pass would not see it again.
    """
    stop = threading.Event()

    def run() -> None:
        seen: set[str] = set()
        while not stop.wait(interval):
            found = []
            for parent, _dirs, names in os.walk(root):
                for name in names:
                    path = os.path.join(parent, name)
                    if path not in seen:
                        seen.add(path)
                        found.append(path)
            batch = _sync_batch()
            for start in range(0, len(found), batch):
                if stop.is_set():
                    return
                fds: list[int] = []
                try:
                    for path in found[start:start + batch]:
                        with contextlib.suppress(OSError):
                            fds.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW))
                    fsync_all(fds)  # a failure ends the pass, raised by the stop
                finally:
                    for fd in fds:
                        os.close(fd)

    return _on_thread(run, "trajledger-sync-behind", stop)


SYNCFS_KERNEL = (5, 8)
"""The first Linux release whose ``syncfs`` reports writeback errors (`FileSystemSync`): before
it, ``syncfs`` returned 0 after an I/O error, so it could not stand for the fsyncs it replaces."""


def _release_at_least(release: str, floor: tuple[int, int]) -> bool:
    m = re.match(r"(\d+)\.(\d+)", release)
    return m is not None and (int(m[1]), int(m[2])) >= floor


@functools.cache
def _libc_syncfs() -> Callable[[int], int] | None:
    """libc's ``syncfs`` (through ctypes: the call leaves the GIL), on Linux from
    `SYNCFS_KERNEL` on; None elsewhere, or when libc has none."""
    if not sys.platform.startswith("linux") or not _release_at_least(os.uname().release,
                                                                     SYNCFS_KERNEL):
        return None
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return cast("Callable[[int], int]", fn)


SYNCFS_FILE_SYSTEMS = {
    0xEF53: "ext2/ext3/ext4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0xF2F52010: "f2fs",
    0x01021994: "tmpfs",
}
"""The file systems (``statfs`` type) whose ``syncfs`` stands for an fsync of each file and
directory (`FileSystemSync`): local ones whose writeback errors reach the superblock that
``syncfs`` reports from (tmpfs: nothing to write either way). Not the others, where ``syncfs``
can return 0 with the data not durable or an error unseen while an fsync asks the layer below:
FUSE (no ``FUSE_FSYNC``; ``FUSE_SYNCFS`` for virtiofs only), 9p, SMB and NFS, overlayfs (the
upper layer's writeback errors are recorded on its own superblock, not the overlay's), ZFS."""


def _fs_type(fd: int) -> int | None:
    """The ``statfs`` type (magic number) of the file system holding the open ``fd`` (Linux);
    None when it cannot be told."""
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).fstatfs
    except (OSError, AttributeError):
        return None
    buf = ctypes.create_string_buffer(256)  # struct statfs: 120 bytes on 64-bit Linux
    if fn(ctypes.c_int(fd), buf) != 0:
        return None
    # f_type comes first, a C long (where it is not, s390x, the value matches none of
    # `SYNCFS_FILE_SYSTEMS`: the caller fsyncs each file, the safe side).
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def syncfs(fd: int, path: str | None = None) -> None:
    """Write the whole file system holding the open ``fd`` to its disk (Linux ``syncfs``: every
    dirty file's data and metadata, the journal, the device's cache), and report a writeback
    error it met since ``fd`` was opened, on any file of that file system.

    Raises:
        OSError: the flush failed (``EIO``, ``ENOSPC``, ...), or ``ENOSYS`` where there is no
            ``syncfs`` that reports errors (not Linux, or before `SYNCFS_KERNEL`); its
            filename is ``path`` (what ``fd`` is open on), when given.
    """
    fn = _libc_syncfs()
    if fn is None:
        raise OSError(errno.ENOSYS, "syncfs: not available here (Linux 5.8 or later needed)",
                      path)
    if fn(fd) != 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, f"syncfs: {os.strerror(code)}", path)


class FileSystemSync:
    """Many new files and names on one file system made durable by a few ``syncfs`` calls
    instead of an fsync of each file and of each directory that gained a name (an import's
    staged objects and their renames into the store).

    Build it with `open` before anything it must cover is written: ``syncfs`` reports the
    writeback errors met since its descriptor was opened (and on any file of that file system:
    another process's failed write refuses the work too, which is the safe side). Each error
    is reported once, so every call here raises what it met, and whoever waits for a thread
    that calls it gets the error raised.

    Cost: ``syncfs`` writes every dirty file of the file system, other processes' too; when
    other work dirties the same disk, the flush waits for their data as well.
    """

    def __init__(self, fd: int, path: Path) -> None:
        """Use `open`."""
        self._fd = fd
        self.path = path

    @classmethod
    def open(cls, directory: Path, *others: Path) -> FileSystemSync | None:
        """A ``syncfs`` handle on the file system of ``directory``, or None when ``syncfs`` is
        not available (not Linux, a kernel before `SYNCFS_KERNEL`, or a first call on the new
        descriptor fails: a sandbox that filters it), when the file system is not one of
        `SYNCFS_FILE_SYSTEMS` (FUSE, NFS, overlayfs, ...) or when one of ``others`` (the
        nearest existing directory of each) is on another file system: the caller then fsyncs
        each file and directory."""
        if _libc_syncfs() is None:
            return None
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            dev = os.fstat(fd).st_dev
            if _fs_type(fd) not in SYNCFS_FILE_SYSTEMS:
                os.close(fd)
                return None
            for other in others:
                while not other.exists() and other.parent != other:
                    other = other.parent
                if os.stat(other).st_dev != dev:
                    os.close(fd)
                    return None
            syncfs(fd)  # the probe: also writes what was dirty before, not this work's
        except OSError:
            os.close(fd)
            return None
        return cls(fd, directory)

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def sync(self) -> None:
        """One ``syncfs``: everything written on the file system so far is on the disk.

        Raises:
            OSError: it failed, or reported a writeback error (its filename: `path`).
        """
        syncfs(self._fd, str(self.path))

    def ahead(self) -> Callable[[], None]:
        """`sync` on a thread of its own (the disk writes while the caller works on); returns
        the wait, which raises what it raised. Wait before `close`."""
        return _on_thread(self.sync, "trajledger-syncfs-ahead")

    def behind(self, interval: float = 0.1) -> Callable[[], None]:
        """`sync` on a thread every ``interval`` seconds while something else writes (it only
        moves the disk's work earlier: whoever needs the data durable calls `sync` once it is
        all written); returns the stop, which ends the thread, waits for it and raises the
        first failure (which ended the thread). Stop before `close`."""
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(interval):
                self.sync()

        return _on_thread(run, "trajledger-syncfs-behind", stop)


def drop_other_versions(current: Path) -> None:
    """Delete the directories beside ``current`` (a derived cache's version directory, such as
    ``index/features/w6`` or ``v3``: letters, then the version number) named by the same
    letters and another number: what a version's new number left behind, never read again
    (the lead's ``w<N>``, seventeenth round; left33 the features' ``v<N>``). Any other name, a
    file, and a link (what it points at too) stay."""
    import re
    import shutil

    kind = re.fullmatch(r"([a-z]+)\d+", current.name)
    if kind is None:
        raise ValueError(f"{current.name!r} is no version directory's name")
    for old in current.parent.glob(f"{kind[1]}*"):
        if (re.fullmatch(rf"{kind[1]}\d+", old.name) and old.name != current.name
                and old.is_dir() and not old.is_symlink()):
            shutil.rmtree(old, ignore_errors=True)


def drop_stale_temps(directory: Path) -> int:
    """Remove the temp files and directories (named by `temp_name`) that a process of this
    host left in ``directory`` and that is gone (killed: its pid is not alive); those of
    another host, of a live process or named otherwise are kept. Housekeeping: an error is
    ignored (one that cannot be removed, another user's in a shared directory say, is left;
    review rev30). Returns how many were removed."""
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    n = 0
    for name in names:
        m = _OWNED.fullmatch(name)
        if m is not None and m.group(1) == _HOST and not _pid_alive(int(m.group(2))):
            try:
                remove_tree(directory / name)
            except OSError:
                continue
            n += 1
    return n


def write_output(path: Path, data: bytes, *, durable: bool = True, output: bool = False) -> None:
    """Write a file whole, atomically (`write_file_atomic`: a command's ``--out``, a witness's
    state, a key file), first removing the temp files a killed run left beside it
    (`drop_stale_temps`). ``output``: as `write_file_atomic`'s."""
    drop_stale_temps(path.parent)
    write_file_atomic(path, data, durable=durable, output=output)


def write_file_atomic(
    path: Path, data: bytes, *, mode: int = 0o644, durable: bool = True, exclusive: bool = False,
    output: bool = False,
) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a mix.

    The temp file (`temp_name`, in the same directory) is created with ``mode`` from the start
    (a private key is never briefly world-readable), fsynced, renamed over ``path``, and the
    directory fsynced. ``exclusive``: linked to ``path`` instead of renamed, so that a file
    another process made there meanwhile is never replaced (`FileExistsError`; where the file
    system has no hard links, a rename after a check that nothing is there).
    A special file at ``path`` is replaced, as a planted one in a cache or the user's state is
    meant to be (built again). ``output``: a file the user named (a command's ``--out``), where
    a device, FIFO or socket found there just before the rename is refused (`refuse_special`:
    one put there since ``--out`` was checked, `clikit.OutPath`; left34).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / temp_name()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:
            try:
                os.link(tmp, path)
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise
                # A file system without hard links: a rename over nothing, checked just
                # before (a narrower window, not none).
                if os.path.lexists(path):
                    raise FileExistsError(errno.EEXIST, "File exists", str(path)) from e
                os.rename(tmp, path)
            else:
                os.unlink(tmp)
        else:
            if output:
                refuse_special(path)
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


_SPECIAL = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
            (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def special_kind(mode: int) -> str | None:
    """What a file of ``mode`` (``st_mode``) is when it is a device, FIFO or socket, which an
    output must never replace ("a FIFO"...), else None."""
    return next((what for is_kind, what in _SPECIAL if is_kind(mode)), None)


def refuse_special(path: Path) -> None:
    """Raise `OSError` (EEXIST) when ``path`` is a device, FIFO or socket (a link is not
    followed: a rename replaces the link itself); nothing there, or it cannot be looked at:
    the rename decides. Called just before an output the user named is renamed into place
    (``export``'s bundle: one put there after ``--out`` was checked, `clikit.OutPath`; run as
    root, ``/dev/null`` would be replaced: the lead, eighteenth round)."""
    try:
        kind = special_kind(os.lstat(path).st_mode)
    except OSError:
        return
    if kind is not None:
        raise OSError(errno.EEXIST, f"is {kind}, not a file: not replaced; write to the path "
                      "of a file", str(path))


def refuse_writable(path: Path, *, group: bool = True, hint: str = "", sticky: bool = True) -> None:
    """Refuse a file or directory that other users may write (and, unless ``group`` is False,
    members of its group): they could replace a key, a setting or evidence between a check and
    its use. A directory with the sticky bit set (like /tmp) only lets owners replace entries,
    so it passes. A path that does not exist passes (its creator sets the mode).

    Args:
        path: the file or directory.
        group: refuse group write too (False: a team shares it through its group).
        hint: appended to the message (another way out than chmod).
        sticky: a sticky directory passes (False: one that others may add entries to is
            refused too, as the user's state directory, where a name they add first is theirs).

    Raises:
        LedgerError: it is writable by others (or the group); the message names the chmod.
    """
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if sticky and stat.S_ISDIR(mode) and mode & stat.S_ISVTX:
        return
    bits = ("g" if group and mode & stat.S_IWGRP else "") + ("o" if mode & stat.S_IWOTH else "")
    if not bits:
        return
    who = {"g": "its group", "o": "other users", "go": "its group and other users"}[bits]
    raise LedgerError(
        f"{path}: writable by {who} (mode {stat.S_IMODE(mode):04o}); run "
        f"'chmod {bits}-w {shell_word(path)}'{hint}"
    )


def move_into_place(build: Path, root: Path, *, last: str) -> list[Callable[[], None]]:
    """Move the directory ``build`` to ``root`` (into it when it holds files, ``last`` moved
    last, each name refused when ``root`` has it already); return how to undo it."""
    if not root.exists() or not any(root.iterdir()):
        os.replace(build, root)  # onto an empty directory too (rename(2) replaces it)
        fsync_dir(root.absolute().parent)
        return [lambda: remove_tree(root)]
    undo: list[Callable[[], None]] = [lambda: remove_tree(build)]
    parts = sorted(build.iterdir(), key=lambda p: p.name == last)
    for part in parts:
        dst = root / part.name
        if dst.exists() or dst.is_symlink():
            raise LedgerError(f"{dst}: exists; init a ledger in an empty or new directory")
    for part in parts:
        dst = root / part.name
        os.rename(part, dst)
        undo.append(lambda dst=dst: remove_tree(dst))  # type: ignore[misc]
    fsync_dir(root)
    remove_tree(build)
    return undo
