"""An import never brings back the bytes of what this ledger erased (hist28 finding 1).

A buyer that erased data it imported (its approver's ``erase``: consent withdrawn, a legal
request) or took a vendor's erasure in had its copy of the files deleted (docs/third-party.md
"What an import adds to your ledger"; DESIGN.md 5 "erasure deletes blobs but keeps
digests"). An import stored every object its bundle carried before anything else: the same
bundle imported again (a retry, a script run twice), an older bundle of the vendor's, or a
new ship of a dataset of that batch put the erased files back in the store, with the erasure
still recorded and nothing said. Found by tests/e2e/test_histories_exchange.py's own steps
of the buyer (R13).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_updates import Buyer, Vendor, rollouts, vendor_copy

pytestmark = pytest.mark.usefixtures("_no_shared_state")


@pytest.fixture
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


def files_of(party: Buyer | Vendor, digest: str) -> set[str]:
    """The digests of the files the manifest ``digest`` lists (what an erasure deletes)."""
    import json

    blob = party.home / "objects" / "sha256" / digest[7:9] / digest[9:11] / digest[7:]
    return {"sha256:" + f["digest"]["sha256"] for f in json.loads(blob.read_text())["files"]}


def stored(party: Buyer | Vendor) -> set[str]:
    return {"sha256:" + p.name for p in (party.home / "objects").rglob("*") if p.is_file()}


def an_erased_import(tmp_path: Path) -> tuple[Vendor, Buyer, str, set[str]]:
    """The vendor's bundle imported, its first batch erased by the buyer's approver: the
    parties, the batch and the digests of its files."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    buyer.run("import", vendor.bundle, "--key", "approver")
    batch = vendor.batches[0]
    erased = files_of(buyer, batch)
    buyer.run("erase", batch, "--reason", "consent", "--key", "approver")
    return vendor, buyer, batch, erased


def test_an_import_again_does_not_restore_what_the_buyer_erased(tmp_path: Path) -> None:
    vendor, buyer, batch, erased = an_erased_import(tmp_path)
    assert not erased & stored(buyer)
    # The same bundle again, and a new ship of a dataset of the erased batch.
    r = buyer.run("import", vendor.bundle, "--key", "approver")
    assert not erased & stored(buyer), "the same bundle again put the erased files back"
    assert "already imported at log index" in r.stderr, r.stderr
    assert re.search(r"NOTE: erased here: rollout-batch vendor-1 \(sha256:\w{12}…\) \(erasure at "
                     r"log index \d+\): the 2 file\(s\) of it this import carries are not "
                     "stored", r.stderr), r.stderr
    size = buyer.size()
    vendor.run("dataset", "create", "again", "--version", "1", "--split", "train", "--batch",
               batch, "--key", "vendor")
    ship = tmp_path / "again.tar.zst"
    vendor.run("export", "again@1", "--updates-since", str(vendor.size() - 1), "--out", ship)
    buyer.run("import", ship, "--key", "approver")
    assert buyer.size() > size
    assert not erased & stored(buyer), "a ship of a dataset of it put the erased files back"
    # The other batch's files, not erased, stayed.
    assert files_of(buyer, vendor.batches[1]) <= stored(buyer)



def test_an_import_stopped_after_its_log_commit_leaves_no_erased_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """left29 finding 1: the erased files were stored at step 1 and deleted again at step 5,
    so an import stopped between (the log committed; a kill, an EIO) left them in the store
    until it ran again, and nothing said so. They are never stored now."""
    import errno

    from trajledger.ledger import updates

    vendor, buyer, batch, erased = an_erased_import(tmp_path)
    vendor.run("dataset", "create", "again", "--version", "1", "--split", "train", "--batch",
               batch, "--key", "vendor")
    ship = tmp_path / "again.tar.zst"
    vendor.run("export", "again@1", "--updates-since", str(vendor.size() - 1), "--out", ship)
    size = buyer.size()

    def stop(*_a: object, **_k: object) -> None:  # step 5, right after the log's commit
        raise OSError(errno.EIO, "Input/output error", "disk")

    with monkeypatch.context() as m:
        m.setattr(updates, "_judge", stop)
        r = buyer.run("import", ship, "--key", "approver", code=3)
    assert "the import record is recorded at log index" in r.stderr, r.stderr
    assert buyer.size() > size
    assert not erased & stored(buyer), "the erased files were in the store after the stop"
    buyer.run("import", ship, "--key", "approver")  # run again: it finishes
    assert not erased & stored(buyer)
    assert files_of(buyer, vendor.batches[1]) <= stored(buyer)


def _moved_on(tmp_path: Path, vendor: Vendor, buyer: Buyer) -> None:
    """The vendor's log moves on (a new record); the buyer imports that update."""
    size = vendor.size()
    vendor.run("env", "register", "grid", "--version", "2", "--source", "sim", "--key",
               "vendor")  # fmt: skip
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(size), "--out", update)
    buyer.run("import", update, "--key", "approver")


def _erased_between(tmp_path: Path) -> tuple[Vendor, Buyer, str]:
    """The lead's Left (twenty-ninth round, fix 5): the vendor exports its dataset twice at one
    tree, ``--no-data`` and whole; the buyer imports the first, erases the vendor's first batch,
    takes an update of the vendor's log (a new record), then imports the whole bundle: an
    import of this tree taken in before (`updates.earlier_import`), whose objects the store
    lacks are stored by `updates.store_objects`. Returns the parties and the whole import's
    stderr."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    meta = tmp_path / "meta.tar.zst"
    vendor.run("export", "bh@1", "--no-data", "--out", meta)
    buyer = Buyer(tmp_path, [vendor])
    buyer.run("import", meta, "--key", "approver")
    buyer.run("erase", vendor.batches[0], "--reason", "consent", "--key", "approver")
    _moved_on(tmp_path, vendor, buyer)
    r = buyer.run("import", vendor.bundle, "--key", "approver")
    assert "already imported at log index" in r.stderr, r.stderr
    return vendor, buyer, r.stderr


def test_an_artifact_erased_between_a_no_data_import_and_the_whole_stays_out(
        tmp_path: Path) -> None:
    """The erased batch's files stay out (`update_judge.left_out`), with the line that says so;
    the other batch's come in and it verifies with its data."""
    vendor, buyer, stderr = _erased_between(tmp_path)
    erased, kept = files_of(vendor, vendor.batches[0]), files_of(vendor, vendor.batches[1])
    assert not erased & stored(buyer)
    assert kept <= stored(buyer)
    assert "NOTE: erased here: rollout-batch vendor-1" in stderr, stderr
    buyer.run("verify", vendor.batches[1])



def test_an_older_bundle_again_stores_only_what_this_ledger_names(tmp_path: Path) -> None:
    """upd45 (the brief's item 4): the vendor revokes a batch of its own the buyer never
    holds, then exports its dataset twice at one tree, ``--no-data`` and whole with its log
    since 0 (the revocation's envelope carried: a record of the extension). The buyer imports
    the first, an update, then the whole: `already imported`; its data come in, and before,
    so did the revocation's envelope, which no record of the buyer's names (an orphan a vendor
    sends at will: an update alone drops those). Only what the buyer's records name is
    stored now."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    other = vendor.last("record", rollouts(tmp_path / "z.parquet", 7), "--env", "grid@1",
                        "--policy", "scripted", "--name", "z-1", "--licence", "CC-BY-4.0",
                        "--key", "vendor")  # fmt: skip
    vendor.run("revoke", other, "--reason", "bad", "--key", "vendor")
    meta, whole = tmp_path / "meta.tar.zst", tmp_path / "whole.tar.zst"
    vendor.run("export", "bh@1", "--no-data", "--out", meta)
    vendor.run("export", "bh@1", "--updates-since", "0", "--out", whole)
    buyer = Buyer(tmp_path, [vendor])
    buyer.run("import", meta, "--key", "approver")
    _moved_on(tmp_path, vendor, buyer)
    before = stored(buyer)
    r = buyer.run("import", whole, "--key", "approver")
    assert "already imported at log index" in r.stderr, r.stderr
    new = stored(buyer) - before
    envelopes = {d for d in new if (buyer.home / "objects" / "sha256" / d[7:9] / d[9:11]
                                    / d[7:]).read_bytes().startswith(b'{"payload"')}
    assert not envelopes, envelopes
    assert files_of(vendor, vendor.batches[0]) | files_of(vendor, vendor.batches[1]) <= new
    buyer.run("verify", "bh@1")
