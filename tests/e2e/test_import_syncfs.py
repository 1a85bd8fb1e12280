"""An import made durable by ``syncfs`` (`ledger.fs.FileSystemSync`, Linux 5.8 and later) instead
of an fsync of each staged object and of each directory that gained a name.

The staged objects' file system is flushed while the bundle is read (on a thread), once after
the reading (ahead, while the bundle is verified: waited for before any object is named), and
once after the renames, before the log commit. A failure of any of them refuses the import as a
failed fsync does: the log is unchanged, the staging is gone, objects already named are orphans
that the next import adopts, and ``fsck`` passes. Where ``syncfs`` is unavailable, or its first
call fails, each object and directory is fsynced (`store.ObjectStore.adopt_files`).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
import tamperkit as tk
from test_import_faults import sound_after
from test_updates import Buyer, Vendor, vendor_copy

from trajledger.ledger import exchange as exchange_module
from trajledger.ledger import fs as fs_module
from trajledger.ledger import store as store_module


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


@pytest.fixture
def parties(tmp_path: Path) -> tuple[Vendor, Buyer]:
    disk = fs_module.FileSystemSync.open(tmp_path)
    if disk is None:
        pytest.skip("no syncfs that reports errors here")
    disk.close()
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    return vendor, Buyer(tmp_path, [vendor])


STAGES = {"MainThread": "probe", "trajledger-syncfs-behind": "behind",
          "trajledger-syncfs-ahead": "ahead"}


def spy_syncfs(monkeypatch: pytest.MonkeyPatch, fail: str | None = None) -> list[str]:
    """`fs.syncfs` replaced by one that records each call's stage (``probe``, ``behind``,
    ``ahead``, ``flush``: the main thread's calls after the probe) and fails the first call of
    stage ``fail`` with EIO, as the real one reports a writeback error."""
    real = fs_module.syncfs
    calls: list[str] = []

    def syncfs(fd: int, path: str | None = None) -> None:
        stage = STAGES[threading.current_thread().name]
        if stage == "probe" and "probe" in calls:
            stage = "flush"
        calls.append(stage)
        if stage == fail and calls.count(stage) == 1:
            raise OSError(errno.EIO, "syncfs: Input/output error", path)
        real(fd, path)

    monkeypatch.setattr(fs_module, "syncfs", syncfs)
    return calls


def no_fsync_pass(monkeypatch: pytest.MonkeyPatch) -> list[list[Path]]:
    """`store.sync_paths` (the per-file pass) recorded."""
    real = store_module.sync_paths
    passes: list[list[Path]] = []

    def sync_paths(paths: list[Path], stop: Any = None) -> None:
        passes.append(list(paths))
        real(paths, stop)

    monkeypatch.setattr(store_module, "sync_paths", sync_paths)
    return passes


def test_an_import_is_made_durable_by_a_few_flushes(
    parties: tuple[Vendor, Buyer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    vendor, buyer = parties
    calls = spy_syncfs(monkeypatch)
    passes = no_fsync_pass(monkeypatch)
    buyer.run("import", vendor.bundle, "--key", "approver")
    assert calls[0] == "probe" and calls[-2:] == ["ahead", "flush"], calls
    assert set(calls[1:-2]) <= {"behind"}
    assert passes == []  # no object or directory fsynced one by one
    r = buyer.run("fsck")
    assert "orphans\t0\n" in r.stdout and "damaged\t0\n" in r.stdout, r.stdout
    buyer.run("verify", "bh@1")


def test_a_first_call_that_fails_means_an_fsync_of_each(
    parties: tuple[Vendor, Buyer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    vendor, buyer = parties
    calls = spy_syncfs(monkeypatch, fail="probe")
    passes = no_fsync_pass(monkeypatch)
    buyer.run("import", vendor.bundle, "--key", "approver")
    assert calls == ["probe"]
    assert len(passes) == 1 and passes[0]  # the directories that gained a name
    r = buyer.run("fsck")
    assert "orphans\t0\n" in r.stdout and "damaged\t0\n" in r.stdout, r.stdout


def behind_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reading waits for the pass behind it to have run once (a small bundle is read
    before the first 0.1 s are over)."""
    ran = threading.Event()
    real_sync = fs_module.FileSystemSync.sync

    def sync(self: fs_module.FileSystemSync) -> None:
        if threading.current_thread().name == "trajledger-syncfs-behind":
            ran.set()
        real_sync(self)

    real_behind = fs_module.FileSystemSync.behind
    monkeypatch.setattr(fs_module.FileSystemSync, "sync", sync)
    monkeypatch.setattr(fs_module.FileSystemSync, "behind",
                        lambda self, interval=0.1: real_behind(self, 0.001))
    real_open = exchange_module.BundleEvidence.open

    def bundle_open(*args: Any, **kwargs: Any) -> Any:
        assert ran.wait(30)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(exchange_module.BundleEvidence, "open", bundle_open)


@pytest.mark.parametrize("stage", ["behind", "ahead", "flush"])
def test_a_failed_flush_refuses_the_import_as_a_failed_fsync(
    parties: tuple[Vendor, Buyer], monkeypatch: pytest.MonkeyPatch, stage: str,
) -> None:
    """Behind the reading or ahead of the renames: nothing is named in the store. After the
    renames: the objects named are orphans; nothing is logged either way."""
    vendor, buyer = parties
    before = buyer.size()
    objects = tk.snapshot(buyer.home / "objects")
    if stage == "behind":
        behind_first(monkeypatch)
    calls = spy_syncfs(monkeypatch, fail=stage)
    r = buyer.run("import", vendor.bundle, "--key", "approver", code=3)
    monkeypatch.undo()
    assert stage in calls
    tmp = re.escape(str(buyer.home / "tmp"))
    moving = "" if stage == "behind" else "cannot move into the store: "
    assert re.fullmatch(rf"FAIL: {tmp}: {moving}syncfs: Input/output error\n", r.stderr), r.stderr
    assert buyer.size() == before
    if stage == "flush":
        assert "orphans\t0\n" not in buyer.run("fsck").stdout
    else:
        assert tk.snapshot(buyer.home / "objects") == objects
    sound_after(buyer, vendor)


def test_on_a_file_system_syncfs_may_not_cover_each_object_is_fsynced(
    parties: tuple[Vendor, Buyer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ledger on FUSE (or NFS, overlayfs, ...: not `fs.SYNCFS_FILE_SYSTEMS`): ``syncfs``
    could return 0 with the objects not durable, so it is not called; each object and
    directory is fsynced as before."""
    vendor, buyer = parties
    monkeypatch.setattr(fs_module, "SYNCFS_FILE_SYSTEMS", {})  # (this one not among them)
    calls = spy_syncfs(monkeypatch)
    passes = no_fsync_pass(monkeypatch)
    buyer.run("import", vendor.bundle, "--key", "approver")
    assert calls == []
    assert len(passes) == 1 and passes[0]  # the directories that gained a name
    r = buyer.run("fsck")
    assert "orphans\t0\n" in r.stdout and "damaged\t0\n" in r.stdout, r.stdout


@pytest.mark.parametrize("umask", [0o077, 0o027])
def test_objects_staged_read_only_are_stored_read_only_whatever_the_umask(
    parties: tuple[Vendor, Buyer], umask: int,
) -> None:
    """Staged objects are created 0444 less the umask (0400 under 077): the store makes any
    that is not 0444 so; a refused import's read-only staging is removed all the same."""
    vendor, buyer = parties
    old = os.umask(umask)
    try:
        buyer.run("import", vendor.bundle, "--key", "approver")
    finally:
        os.umask(old)
    objects = [p for p in (buyer.home / "objects").rglob("*") if p.is_file()]
    assert objects and {stat.S_IMODE(p.stat().st_mode) for p in objects} == {0o444}
    assert os.listdir(buyer.home / "tmp") == []
