"""The fsync pool (`fs.SyncPool`) and `FsyncGroup` on it: every fsync started is waited for,
the first failure in the order started is the one raised (whenever it happened), a group serves
round after round, and the pool's threads end when the process would fork (`only_thread`)."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from trajledger.ledger.fs import FsyncGroup, only_thread


def files(tmp_path: Path, n: int) -> list[int]:
    return [os.open(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT, 0o600) for i in range(n)]


def test_the_first_failure_in_the_order_started_is_raised_once_all_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fds = files(tmp_path, 6)
    later = threading.Event()
    done: list[int] = []
    lock = threading.Lock()

    def fsync(fd: int) -> None:
        if fd == fds[1]:  # started second, fails last
            assert later.wait(10)
        with lock:
            done.append(fd)
        if fd == fds[1]:
            raise OSError(errno.EIO, "the second started")
        if fd == fds[4]:  # started fifth, fails first
            later.set()
            raise OSError(errno.ENOSPC, "the fifth started")

    monkeypatch.setattr(os, "fsync", fsync)
    group = FsyncGroup()
    for fd in fds:
        group.start(fd)
    with pytest.raises(OSError, match="the second started"):
        group.wait()
    assert sorted(done) == sorted(fds)  # none abandoned because one failed
    done.clear()
    later.clear()
    group.start(fds[0])  # the group serves the next round
    group.wait()
    assert done == [fds[0]]
    for fd in fds:
        os.close(fd)


def test_a_wait_with_nothing_started_returns_at_once() -> None:
    FsyncGroup().wait()


def test_the_pools_threads_end_before_a_fork(tmp_path: Path) -> None:
    fds = files(tmp_path, 3)
    group = FsyncGroup()
    for fd in fds:
        group.start(fd)
    group.wait()
    assert any(t.name.startswith("trajledger-fsync") for t in threading.enumerate())
    if threading.active_count() - sum(
        t.name.startswith("trajledger-fsync") for t in threading.enumerate()
    ) == 1:
        assert only_thread()
        assert not any(t.name.startswith("trajledger-fsync") for t in threading.enumerate())
    for fd in fds:
        os.close(fd)
