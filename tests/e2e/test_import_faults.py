"""An import that fails while it moves the staged objects into the store (review of issue 21's
streamed import: `ledger.exchange.import_bundle`, `store.ObjectStore.adopt_files`).

Each fault is injected where the objects are renamed into the store: a store the importer
cannot write, an I/O error and an interruption half-way, another filesystem, and an object the
store already holds with other bytes. Each time the log is unchanged (nothing is logged before
every object is in), the staging under ``<ledger>/tmp`` is gone, the next import takes the
bundle in, and ``fsck`` passes. Objects already moved when the import stopped are orphans
(named by no record), which the next import of the same bundle adopts.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import tamperkit as tk
from test_updates import Buyer, Vendor, vendor_copy

from trajledger.ledger import store as store_module


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


@pytest.fixture
def parties(tmp_path: Path) -> tuple[Vendor, Buyer]:
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    return vendor, Buyer(tmp_path, [vendor])


def staged(path: Any) -> bool:
    return "trajledger-bundle-" in str(path)


def fails_at_rename(monkeypatch: pytest.MonkeyPatch, nth: int, error: BaseException) -> None:
    """Make the ``nth`` rename of a staged object into the store raise ``error`` (an OSError
    as the rename would: naming both paths)."""
    real = os.replace
    seen = [0]

    def replace(src: Any, dst: Any, **kw: Any) -> None:
        if staged(src):
            seen[0] += 1
            if seen[0] == nth and isinstance(error, OSError):
                raise OSError(error.errno, error.strerror, src, None, dst)
            if seen[0] == nth:
                raise error
        real(src, dst, **kw)

    monkeypatch.setattr(store_module.os, "replace", replace)


def sound_after(buyer: Buyer, vendor: Vendor) -> None:
    """No staging left; the import then goes through and fsck passes."""
    assert os.listdir(buyer.home / "tmp") == []
    buyer.run("import", vendor.bundle, "--key", "approver")
    r = buyer.run("fsck")
    assert "orphans\t0\n" in r.stdout and "damaged\t0\n" in r.stdout, r.stdout


def test_a_store_the_importer_cannot_write_is_named_and_nothing_changes(
    parties: tuple[Vendor, Buyer],
) -> None:
    vendor, buyer = parties
    before = buyer.size()
    subprocess.run(["chmod", "-R", "a-w", buyer.home / "objects"], check=True)
    objects = tk.snapshot(buyer.home / "objects")
    (r,) = tk.run_elsewhere(
        [["--ledger", str(buyer.home), "import", str(vendor.bundle), "--key", "approver"]],
        {"TRAJLEDGER_STATE_DIR": str(buyer.state)}, without_dac_override=True)
    assert r["exit"] == 3, r
    store = re.escape(str(buyer.home / "objects" / "sha256"))
    assert re.fullmatch(  # the directory it could not make, or the rename it could not do
        rf"FAIL: (.*trajledger-bundle-.* -> )?{store}/\w\w(/\w\w(/\w{{64}})?)?: cannot move "
        r"into the store: Permission denied\n", r["stderr"]), r["stderr"]
    assert tk.snapshot(buyer.home / "objects") == objects
    assert buyer.size() == before
    subprocess.run(["chmod", "-R", "u+w", buyer.home / "objects"], check=True)
    sound_after(buyer, vendor)


def failed_import(parties: tuple[Vendor, Buyer], monkeypatch: pytest.MonkeyPatch, nth: int,
                  error: BaseException, code: int) -> str:
    """Import with the ``nth`` rename failing with ``error``: nothing logged; its stderr (the
    fault undone)."""
    vendor, buyer = parties
    before = buyer.size()
    fails_at_rename(monkeypatch, nth, error)
    r = buyer.run("import", vendor.bundle, "--key", "approver", code=code)
    monkeypatch.undo()
    assert buyer.size() == before
    return str(r.stderr)


@pytest.mark.parametrize("nth", [1, 3])
def test_an_io_error_half_way_leaves_orphans_the_next_import_adopts(
    parties: tuple[Vendor, Buyer], monkeypatch: pytest.MonkeyPatch, nth: int,
) -> None:
    err = failed_import(parties, monkeypatch, nth, OSError(errno.EIO, "Input/output error"), 3)
    vendor, buyer = parties
    store = re.escape(str(buyer.home / "objects" / "sha256"))
    assert re.fullmatch(rf"FAIL: {re.escape(str(buyer.home / 'tmp'))}/\S*/trajledger-bundle-\S*"
                        rf"/objects/(\w{{64}}) -> {store}/\w\w/\w\w/\1: cannot move into the "
                        r"store: Input/output error\n", err), err
    sound_after(buyer, vendor)


def test_an_interrupted_import_leaves_orphans_the_next_import_adopts(
    parties: tuple[Vendor, Buyer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert failed_import(parties, monkeypatch, 3, KeyboardInterrupt(), 130) == (
        "FAIL: interrupted; nothing was recorded or half-written\n")
    vendor, buyer = parties
    r = buyer.run("fsck")
    assert "orphans\t2\n" in r.stdout  # the two objects moved before the interruption
    sound_after(buyer, vendor)


def test_another_filesystem_copies_each_object(
    parties: tuple[Vendor, Buyer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    vendor, buyer = parties
    before = buyer.size()
    real = os.replace

    def exdev(src: Any, dst: Any, **kw: Any) -> None:
        if staged(src):
            raise OSError(errno.EXDEV, "Invalid cross-device link", src, None, dst)
        real(src, dst, **kw)

    monkeypatch.setattr(store_module.os, "replace", exdev)
    buyer.run("import", vendor.bundle, "--key", "approver")
    assert buyer.size() > before
    assert os.listdir(buyer.home / "tmp") == []
    r = buyer.run("fsck")
    assert "orphans\t0\n" in r.stdout and "damaged\t0\n" in r.stdout, r.stdout
    buyer.run("verify", "bh@1")


def test_an_object_held_with_other_bytes_is_replaced(parties: tuple[Vendor, Buyer]) -> None:
    vendor, buyer = parties
    held = buyer.home / "objects" / "sha256" / vendor.dataset[7:9] / vendor.dataset[9:11] / \
        vendor.dataset[7:]  # fmt: skip
    held.parent.mkdir(parents=True)
    held.write_bytes(b"planted: not the dataset's manifest")
    buyer.run("import", vendor.bundle, "--key", "approver")
    r = buyer.run("fsck")
    assert "damaged\t0\n" in r.stdout, r.stdout
    buyer.run("verify", "bh@1")


def test_two_imports_of_one_bundle_at_once_record_it_once(
    parties: tuple[Vendor, Buyer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second import of the same bundle runs whole after the first one staged its objects,
    before it takes the log's lock (as another process could; from there to its log commit
    the first holds the lock since rev13, so another import waits): its sweep of leftovers
    spares the first one's staging, and the first one then adds nothing twice."""
    from trajledger.ledger import exchange

    vendor, buyer = parties
    real = exchange.verify_bundle
    inner: list[Any] = []

    def other_import_first(*args: Any, **kwargs: Any) -> Any:
        if not inner:
            inner.append(None)  # once: the second import's own verification goes through
            inner[0] = buyer.run("import", vendor.bundle, "--key", "approver")
        return real(*args, **kwargs)

    monkeypatch.setattr(exchange, "verify_bundle", other_import_first)
    outer = buyer.run("import", vendor.bundle, "--key", "approver")
    monkeypatch.undo()
    assert inner and inner[0].stdout == outer.stdout  # the dataset's digest
    assert buyer.size() == 6  # the policy, 4 foreign records, one import record
    r = buyer.run("fsck")
    assert "orphans\t0\n" in r.stdout and "damaged\t0\n" in r.stdout, r.stdout
