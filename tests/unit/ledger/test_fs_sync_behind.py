"""The data of a file being written, sent to the disk on a thread as it grows
(`ledger.fs.SyncBehind`, an export's bundle): passes start as the file grows, one at a time,
and a pass that failed is raised to the writer (an export then refuses and leaves no bundle:
``test_exchange_write.py``); and the files of a tree synced while they are written there
(`ledger.fs.sync_tree_behind`, an import's staged objects).

An error ``fdatasync`` reports is reported once per open file: a pass on a thread that swallowed
it would let the final ``fsync`` succeed over data that never reached the disk.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from trajledger.ledger import fs


def _recording(monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> list[int]:
    """``os.fdatasync`` replaced: each call recorded (a slow pass: at most one may run);
    ``fail``: each raises EIO."""
    calls: list[int] = []
    running = threading.Lock()

    def fdatasync(fd: int) -> None:
        assert running.acquire(blocking=False), "two passes at once"
        try:
            calls.append(os.fstat(fd).st_size)
            if fail:
                raise OSError(errno.EIO, "Input/output error")
        finally:
            running.release()

    monkeypatch.setattr(os, "fdatasync", fdatasync, raising=False)
    return calls


def test_passes_start_as_the_file_grows_one_at_a_time(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _recording(monkeypatch)
    with open(tmp_path / "f", "wb", buffering=0) as fh:
        behind = fs.SyncBehind(fh.fileno(), every=1000)
        behind.wrote(fh.write(b"x" * 999))
        assert not calls  # not yet `every` bytes
        for _ in range(50):
            behind.wrote(fh.write(b"y" * 400))
        behind.wait()
    assert calls and calls[0] >= 1000
    assert calls == sorted(calls) and calls[-1] <= 999 + 50 * 400
    assert (tmp_path / "f").read_bytes() == b"x" * 999 + b"y" * 400 * 50


def test_a_failed_pass_is_raised_to_the_writer(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _recording(monkeypatch, fail=True)
    with open(tmp_path / "f", "wb", buffering=0) as fh:
        behind = fs.SyncBehind(fh.fileno(), every=10)
        behind.wrote(fh.write(b"x" * 10))
        with pytest.raises(OSError, match="Input/output error"):
            behind.wait()
        behind.wrote(fh.write(b"x" * 10))  # the next pass; raised by a write after it ended
        with pytest.raises(OSError, match="Input/output error"):
            for _ in range(10_000):  # (at most 10 s for the pass on the thread to end)
                behind.wrote(fh.write(b"x" * 10))
                threading.Event().wait(0.001)


def test_files_written_under_a_tree_are_synced_while_they_come(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fs.sync_tree_behind` (an import's reading pass): each file that appears under the tree,
    in any directory, is fsynced on the thread, once; the stop waits for the thread."""
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.fstat(fd).st_ino) or real(fd))
    (tmp_path / "objects").mkdir()
    end = fs.sync_tree_behind(tmp_path, interval=0.01)
    inodes = set()
    for n in range(20):
        path = tmp_path / ("objects" if n % 2 else "") / f"f{n}"
        path.write_bytes(b"%d" % n)
        inodes.add(path.stat().st_ino)
    for _ in range(500):
        if inodes <= set(synced):
            break
        threading.Event().wait(0.01)
    end()
    assert inodes <= set(synced) and len(synced) == len(set(synced))


def test_a_failed_sync_behind_is_raised_by_its_stop(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[int] = []

    def fsync(fd: int) -> None:
        tried.append(fd)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    (tmp_path / "f").write_bytes(b"x")
    end = fs.sync_tree_behind(tmp_path, interval=0.01)
    for _ in range(1000):
        if tried:
            break
        threading.Event().wait(0.01)
    with pytest.raises(OSError, match="Input/output error"):
        end()
