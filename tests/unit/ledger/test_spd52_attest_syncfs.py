"""spd52 (issue 21 item 8): `record_files` (``attest``) of many files made durable by flushes
of the store's file system (``syncfs``: `fs.FileSystemSync`) instead of an fsync of each copy.

The copies are written as the store's temp files, unnamed; one flush puts their bytes on the
disk; they are then named (renamed into place); another flush puts the names on the disk; only
then are the manifest and the log entry written. So a crash before the first flush leaves temp
files of a dead writer (swept by the next writer, listed by ``fsck`` as leftovers), one between
the flushes objects whose bytes are durable under their names or not named at all, one after
the second orphans that no record names (``gc``): never a named object with other bytes, never
a record naming an object that is not durable. A failed flush refuses the record as a failed
fsync does: nothing logged, no temp file left. Fewer than `record.SYNCFS_FILES` files, or a
file system whose ``syncfs`` may not stand for fsyncs, are fsynced file by file as before.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from trajledger import Ledger
from trajledger.ledger import fs as fs_module
from trajledger.ledger import record as record_module
from trajledger.ledger.errors import StoreError
from trajledger.ledger.fs import TMP_PREFIX
from trajledger.ledger.fsck import fsck
from trajledger.ledger.record import SYNCFS_FILES, record_files


@pytest.fixture(autouse=True)
def _syncfs_here(tmp_path: Path) -> None:
    disk = fs_module.FileSystemSync.open(tmp_path)
    if disk is None:
        pytest.skip("no syncfs that reports errors here")
    disk.close()


def _tree(root: Path, n: int) -> Path:
    for i in range(n):
        d = root / ("config", "tokenizer")[i % 2]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:03}.json").write_bytes(os.urandom(100 + i))
    return root


def _events(monkeypatch: pytest.MonkeyPatch, fail: int | None = None) -> list[str]:
    """``syncfs`` calls (failing the ``fail``-th with EIO, as a writeback error), fsyncs of
    regular files, and renames into the store's fan-out directories, in order."""
    events: list[str] = []
    real_syncfs, real_fsync, real_replace = fs_module.syncfs, os.fsync, os.replace

    def syncfs(fd: int, path: str | None = None) -> None:
        events.append("syncfs")
        if events.count("syncfs") == fail:
            raise OSError(errno.EIO, "syncfs: Input/output error", path)
        real_syncfs(fd, path)

    def fsync(fd: int) -> None:
        if os.path.isfile(f"/proc/self/fd/{fd}"):
            events.append("fsync")
        real_fsync(fd)

    def replace(src: object, dst: object, **kw: object) -> None:
        events.append("rename")
        real_replace(src, dst, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(fs_module, "syncfs", syncfs)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def _temps(home: Path) -> list[str]:
    return [p.name for p in (home / "objects" / "sha256").iterdir()
            if p.name.startswith(TMP_PREFIX)]  # fmt: skip


def test_many_files_are_durable_by_two_flushes_before_their_names_and_the_record(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger.open(home)
    key = ledger.keys.create("k", encrypt=False)
    tree = _tree(tmp_path / "model", SYNCFS_FILES)
    events = _events(monkeypatch)
    rec = record_files(ledger, [tree], key, name="model")
    monkeypatch.undo()
    copies = events[:events.index("rename")]
    # the probe, the copies' bytes; then every name; then the names, before the manifest
    assert copies == ["syncfs", "syncfs"], copies
    assert events[len(copies):len(copies) + SYNCFS_FILES] == ["rename"] * SYNCFS_FILES
    assert events[len(copies) + SYNCFS_FILES] == "syncfs"
    assert rec.manifest is not None and len(rec.manifest.files) == SYNCFS_FILES
    for f in rec.manifest.files:
        path = ledger.store.path_of(f.digest)
        assert path.read_bytes() == (tree / f.path).read_bytes()
        assert path.stat().st_mode & 0o777 == 0o444
    assert _temps(home) == []
    assert fsck(ledger).ok


@pytest.mark.parametrize("fail", [2, 3])
def test_a_failed_flush_refuses_the_record_as_a_failed_fsync(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, fail: int
) -> None:
    """The copies' flush (2) or the names' (3) reports a writeback error: nothing is logged,
    no temp file is left, what was named is intact (orphans), and the record run again goes
    through."""
    ledger = Ledger.open(home)
    key = ledger.keys.create("k", encrypt=False)
    tree = _tree(tmp_path / "model", SYNCFS_FILES)
    size = ledger.log.size
    events = _events(monkeypatch, fail)
    with pytest.raises(StoreError, match="Input/output error"):
        record_files(ledger, [tree], key, name="model")
    monkeypatch.undo()
    assert ("rename" in events) == (fail == 3)
    assert ledger.log.size == size
    assert _temps(home) == []
    report = fsck(ledger)
    assert report.ok and len(report.orphans) == (SYNCFS_FILES if fail == 3 else 0)
    record_files(ledger, [tree], key, name="model")
    assert ledger.log.size == size + 1 and fsck(ledger).ok


def test_fewer_files_are_fsynced_each_as_before(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger.open(home)
    key = ledger.keys.create("k", encrypt=False)
    tree = _tree(tmp_path / "model", SYNCFS_FILES - 1)
    events = _events(monkeypatch)
    record_files(ledger, [tree], key, name="model")
    assert "syncfs" not in events
    assert events.count("fsync") >= SYNCFS_FILES - 1
    assert events.index("fsync") < events.index("rename")


def test_where_syncfs_may_not_stand_for_fsyncs_each_file_is_fsynced(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fs.FileSystemSync.open` says no (FUSE, NFS, overlayfs, a kernel before 5.8, a
    sandbox that filters the call): each copy fsynced before its name, as before."""
    monkeypatch.setattr(record_module.FileSystemSync, "open", classmethod(lambda *_a: None))
    ledger = Ledger.open(home)
    key = ledger.keys.create("k", encrypt=False)
    events = _events(monkeypatch)
    record_files(ledger, [_tree(tmp_path / "model", SYNCFS_FILES)], key, name="model")
    assert "syncfs" not in events and events.count("fsync") >= SYNCFS_FILES
    assert fsck(ledger).ok
