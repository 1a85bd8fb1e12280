"""The commit protocol's durability order (DESIGN §4; docs/PERFORMANCE.md, "Durable appends").

Traced on the real calls (``os.fsync``, ``os.replace``; each descriptor named by
``/proc/self/fd``), one commit must:

1. fsync every new tile and entry bundle, the history file, and the temp files of treeState and
   the checkpoint, and the directories the new names are in, before treeState is renamed into
   place (the commit);
2. fsync ``.state/`` after that rename and before the checkpoint is renamed into place;
3. fsync the log directory after the checkpoint's rename, before ``on_publish`` runs.

And `fsync_all` runs every fsync it is given, to the end, even when one fails.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trajledger.ledger.fs import FsyncGroup, fsync_all
from trajledger.ledger.keys import Signer
from trajledger.ledger.log import EntrySpec, Log, verify_log_dir
from trajledger.ledger.log import writer as writer_module

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="names descriptors by /proc")

SIGNER = Signer.generate("log")  # TEST ONLY
KEYID = Signer.generate("producer").keyid  # TEST ONLY


def spec(i: int) -> EntrySpec:
    seed = str(i).encode()
    return EntrySpec(
        "files",
        "sha256:" + hashlib.sha256(b"s" + seed).hexdigest(),
        "sha256:" + hashlib.sha256(b"e" + seed).hexdigest(),
        (KEYID,),
    )


@pytest.fixture
def trace(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """Every file creation, fsync (of the path its descriptor names) and rename (to its
    target), in order."""
    events: list[tuple[str, str]] = []
    lock = threading.Lock()
    real_open, real_fsync, real_replace = os.open, os.fsync, os.replace

    def open_(path: Any, flags: int, *a: Any, **kw: Any) -> int:
        fd = real_open(path, flags, *a, **kw)
        if flags & os.O_CREAT:
            with lock:
                events.append(("create", os.fspath(path)))
        return fd

    def fsync(fd: Any) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        real_fsync(fd)
        with lock:
            events.append(("fsync", path))

    def replace(src: Any, dst: Any, *a: Any, **kw: Any) -> None:
        real_replace(src, dst, *a, **kw)
        with lock:
            events.append(("replace", os.fspath(dst)))

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    yield events


def test_one_commit_makes_everything_durable_before_the_commit_and_publication(
    tmp_path: Path, trace: list[tuple[str, str]]
) -> None:
    published: list[int] = []
    log = Log.create(tmp_path / "log", "example.org/durable", SIGNER,
                     on_publish=lambda note: published.append(len(trace)))  # fmt: skip
    log.append([spec(i) for i in range(300)])  # 0 -> 300: full tiles and partial ones
    trace.clear()
    published.clear()
    log.append([spec(i) for i in range(300, 520)])  # crosses the tile boundary at 512
    d = str(log.directory)
    commit = trace.index(("replace", f"{d}/.state/treeState"))
    publication = trace.index(("replace", f"{d}/checkpoint"))
    before = {p for kind, p in trace[:commit] if kind == "fsync"}
    tiles = {p for kind, p in trace[:commit] if kind == "create" and "/tile/" in p}
    # (1) every new tile and bundle, and its directory; history; both temp files
    assert tiles == {f"{d}/tile/entries/001", f"{d}/tile/0/001", f"{d}/tile/0/002.p/8",
                     f"{d}/tile/entries/002.p/8", f"{d}/tile/1/000.p/2"}  # fmt: skip
    assert tiles <= before
    assert {os.path.dirname(p) for p in tiles} <= before
    assert {f"{d}/.state/history", f"{d}/.state/.tmp-treeState", f"{d}/.tmp-checkpoint"} <= before
    # (2) the commit's directory between the commit and the publication
    assert ("fsync", f"{d}/.state") in trace[commit:publication]
    # (3) the publication's directory after it, before on_publish
    assert trace[publication + 1 :] == [("fsync", d)] and published == [len(trace)]
    assert verify_log_dir(log.directory).ok


def test_a_large_batch_holds_a_bounded_number_of_descriptors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outstanding = [0]
    most: list[int] = []
    real_start, real_wait = FsyncGroup.start, FsyncGroup.wait

    def start(self: FsyncGroup, fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # the last round adds directories: no limit
            outstanding[0] += 1
            most.append(outstanding[0])
        real_start(self, fd)

    def wait(self: FsyncGroup) -> None:
        real_wait(self)
        outstanding[0] = 0

    monkeypatch.setattr(FsyncGroup, "start", start)
    monkeypatch.setattr(FsyncGroup, "wait", wait)
    monkeypatch.setattr(writer_module._SyncRound, "LIMIT", 4)
    log = Log.create(tmp_path / "log", "example.org/durable", SIGNER)
    most.clear()
    log.append([spec(i) for i in range(256 * 6 + 3)])  # 12 full files, partials, history...
    assert max(most) == 4 and len(most) > 15  # 12 full files, 2 partial, the history, 2 temps
    assert log.size == 256 * 6 + 3 and verify_log_dir(log.directory).ok


def test_fsync_all_syncs_every_descriptor_and_raises_the_first_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [tmp_path / f"f{i}" for i in range(6)]
    fds = [os.open(f, os.O_WRONLY | os.O_CREAT, 0o600) for f in files]
    synced: list[int] = []
    lock = threading.Lock()

    def fsync(fd: int) -> None:
        with lock:
            synced.append(fd)
        if fd in (fds[2], fds[4]):
            raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    try:
        with pytest.raises(OSError, match="Input/output error"):
            fsync_all(fds)
        assert sorted(synced) == sorted(fds)  # none skipped because another failed
        synced.clear()
        fsync_all(fds[:2])
        fsync_all(fds[:1])
        fsync_all([])
        assert sorted(synced) == sorted(fds[:2] + fds[:1])
    finally:
        for fd in fds:
            os.close(fd)
