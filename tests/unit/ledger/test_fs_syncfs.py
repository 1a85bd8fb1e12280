"""One flush of a whole file system instead of an fsync per file and per directory
(`ledger.fs.FileSystemSync`, an import's durability): when it is used, when the caller must
fall back to fsyncing each file, and how its failures reach the caller.

``syncfs`` reports writeback errors only from Linux 5.8 on (`fs.SYNCFS_KERNEL`); before, it
returned 0 after an I/O error, so it is not used there. A failure is reported once per
descriptor: a thread that calls it raises what it met to whoever waits for it.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from trajledger.ledger import fs

linux_syncfs = pytest.mark.skipif(fs._libc_syncfs() is None,
                                  reason="no syncfs that reports errors here")


@pytest.mark.parametrize(("release", "floor", "ok"), [
    ("6.18.44-fc-v1045", (5, 8), True), ("5.8.0", (5, 8), True), ("5.10", (5, 8), True),
    ("5.7.19-generic", (5, 8), False), ("4.19.0", (5, 8), False), ("unknown", (5, 8), False),
])
def test_the_kernel_floor(release: str, floor: tuple[int, int], ok: bool) -> None:
    assert fs._release_at_least(release, floor) is ok


def test_none_where_syncfs_is_not_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fs, "_libc_syncfs", lambda: None)
    assert fs.FileSystemSync.open(tmp_path) is None
    with pytest.raises(OSError, match="syncfs: not available here") as e:
        fs.syncfs(0, "x")
    assert (e.value.errno, e.value.filename) == (errno.ENOSYS, "x")


def test_none_off_linux_or_before_the_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    fs._libc_syncfs.cache_clear()
    try:
        monkeypatch.setattr(sys, "platform", "darwin")
        assert fs._libc_syncfs() is None
        fs._libc_syncfs.cache_clear()
        monkeypatch.setattr(sys, "platform", "linux")
        monkeypatch.setattr(os, "uname", lambda: os.uname_result(
            ("Linux", "h", "5.4.0-old", "#1", "x86_64")))
        assert fs._libc_syncfs() is None
    finally:
        monkeypatch.undo()
        fs._libc_syncfs.cache_clear()


@linux_syncfs
def test_open_sync_and_close(tmp_path: Path) -> None:
    disk = fs.FileSystemSync.open(tmp_path, tmp_path / "not" / "yet" / "made")
    assert disk is not None and disk.path == tmp_path
    (tmp_path / "f").write_bytes(b"data")
    disk.sync()
    disk.ahead()()
    disk.close()
    disk.close()  # idempotent


@linux_syncfs
def test_none_when_another_path_is_on_another_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store on another disk than the staging: a flush of one would not cover the other."""
    other = tmp_path / "store"
    other.mkdir()
    real = os.stat

    def stat(path: os.PathLike[str] | str, *args: object, **kwargs: object) -> os.stat_result:
        st = real(path)
        if Path(path) == other:
            return os.stat_result((*st[:2], st.st_dev + 1, *st[3:]))
        return st

    monkeypatch.setattr(os, "stat", stat)
    assert fs.FileSystemSync.open(tmp_path, other) is None
    assert fs.FileSystemSync.open(tmp_path, tmp_path) is not None


def _failing(monkeypatch: pytest.MonkeyPatch, calls: list[str], fail_at: set[int]) -> None:
    """`fs.syncfs` replaced: each call recorded by its thread's name; the calls numbered in
    ``fail_at`` (from 1) raise EIO as the real one would."""
    def syncfs(fd: int, path: str | None = None) -> None:
        calls.append(threading.current_thread().name)
        if len(calls) in fail_at:
            raise OSError(errno.EIO, "syncfs: Input/output error", path)

    monkeypatch.setattr(fs, "syncfs", syncfs)


@linux_syncfs
def test_a_probe_that_fails_means_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first call that fails (a sandbox filtering it, or an old error of the file system):
    the caller fsyncs each file, as where syncfs does not exist."""
    calls: list[str] = []
    _failing(monkeypatch, calls, {1})
    assert fs.FileSystemSync.open(tmp_path) is None
    assert len(calls) == 1


@linux_syncfs
def test_failures_are_raised_where_they_are_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    _failing(monkeypatch, calls, {2, 3, 5})
    disk = fs.FileSystemSync.open(tmp_path)
    assert disk is not None
    try:
        with pytest.raises(OSError, match="syncfs: Input/output error") as e:
            disk.sync()
        assert (e.value.errno, e.value.filename) == (errno.EIO, str(tmp_path))
        with pytest.raises(OSError, match="Input/output error"):
            disk.ahead()()  # (3) on its thread, raised by the wait
        disk.ahead()()  # (4) succeeds
        stop = disk.behind(interval=0.001)
        deadline = threading.Event()
        while len(calls) < 5 and not deadline.wait(0.01):
            pass
        with pytest.raises(OSError, match="Input/output error"):
            stop()  # (5) ended the thread; raised by the stop
        assert calls[:4] == ["MainThread", "MainThread", "trajledger-syncfs-ahead",
                             "trajledger-syncfs-ahead"]
        assert calls[4:] == ["trajledger-syncfs-behind"]  # no pass after the failure
    finally:
        disk.close()


@linux_syncfs
def test_a_pass_behind_runs_until_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    _failing(monkeypatch, calls, set())
    disk = fs.FileSystemSync.open(tmp_path)
    assert disk is not None
    stop = disk.behind(interval=0.001)
    while len(calls) < 4:
        threading.Event().wait(0.005)
    stop()
    n = len(calls)
    threading.Event().wait(0.02)
    assert len(calls) == n and set(calls[1:]) == {"trajledger-syncfs-behind"}
    disk.close()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@linux_syncfs
def test_the_file_system_type_is_the_kernel_s(tmp_path: Path) -> None:
    """`fs._fs_type` reads ``statfs``'s f_type as ``stat -f`` prints it."""
    try:
        shown = subprocess.run(["stat", "-f", "-c", "%t", str(tmp_path)], check=True,
                               capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no stat -f here")
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert fs._fs_type(fd) == int(shown, 16)
    finally:
        os.close(fd)


@linux_syncfs
@pytest.mark.parametrize("magic", [
    0x65735546,  # FUSE: syncfs does not reach the daemon (FUSE_SYNCFS: virtiofs only)
    0x01021997,  # 9p (WSL's /mnt, some sandboxes): no sync_fs at all
    0x6969, 0xFE534D42,  # NFS, SMB2
    0x794C7630,  # overlayfs: the upper layer's writeback errors are not the overlay's
    0x2FC12FC1,  # ZFS
    None,  # not told
])
def test_none_on_a_file_system_whose_syncfs_may_not_stand_for_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, magic: int | None
) -> None:
    """There ``syncfs`` may return 0 while an fsync of each file would have asked the layer
    below (or reported its error): the caller fsyncs each file. Not probed; no descriptor
    left open."""
    calls: list[str] = []
    _failing(monkeypatch, calls, set())
    monkeypatch.setattr(fs, "_fs_type", lambda fd: magic)
    before = _open_fds()
    assert fs.FileSystemSync.open(tmp_path) is None
    assert calls == [] and _open_fds() == before


@linux_syncfs
def test_no_descriptor_is_left_open_on_any_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _open_fds()
    assert fs.FileSystemSync.open(tmp_path / "missing") is None  # cannot be opened
    calls: list[str] = []
    _failing(monkeypatch, calls, {1})
    assert fs.FileSystemSync.open(tmp_path) is None  # the probe fails
    assert _open_fds() == before
    monkeypatch.undo()
    disk = fs.FileSystemSync.open(tmp_path)
    assert disk is not None and _open_fds() == before + 1
    disk.close()
    assert _open_fds() == before
