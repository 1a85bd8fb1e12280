"""Reads of the buyer's store the disk fails are not blobs missing (left30; fault27's, fault28's
and left29's Left: `home._read_or_none` took missing and unreadable alike).

Where such a read decides (whose a record is, what an erasure already listed), an unreadable
blob (EIO, EACCES: `errors.read_failure`) ends the command, exit 3, one line, nothing recorded;
a missing one keeps what it did. Where it does not decide, it is said why: the user state's
index lists an envelope it could not read as unreadable (as a missing one) and reads it again
at the end of the same reading and at every later one (`TrustState._retry_unreadable`)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import testkit
from faultkit import Faults
from test_destructive import home, run  # noqa: F401 (the fixture)
from test_updates import Buyer, _no_shared_state, rollouts, vendor_copy  # noqa: F401 (fixture)

from trajledger import Ledger
from trajledger.runner.cli import main
from trajledger.verify.log_entry import LogEntry


def _invoke(party: testkit.Party, *args: str) -> object:
    return testkit.new_runner().invoke(main, ["--ledger", str(party.home), *args],
                                       env={"TRAJLEDGER_STATE_DIR": str(party.state)})


def _envelope(party: testkit.Party, index: int) -> str:
    with testkit.user_state(party.state):
        return LogEntry.from_bytes(Ledger.open(party.home).log.entry(index)).envelope


@pytest.fixture
def buyer_of_bh(tmp_path: Path) -> tuple[Buyer, list[str], str]:
    """A buyer that imported the vendor's ``bh@1`` and recorded a batch of its own: the
    arguments that record its own ``bh@1`` (a name only another log's record holds), and the
    envelope of the import record."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    buyer.run("import", vendor.bundle, "--key", "approver")
    envelope = _envelope(buyer, buyer.size() - 1)
    buyer.run("env", "register", "grid", "--version", "1", "--source", "sim", "--key",
              "producer")  # fmt: skip
    batch = buyer.last("record", rollouts(tmp_path / "own.parquet", 9), "--env", "grid@1",
                       "--policy", "scripted", "--name", "own-1", "--licence", "CC-BY-4.0",
                       "--key", "producer")  # fmt: skip
    return buyer, ["dataset", "create", "bh", "--version", "1", "--split", "train", "--batch",
                   batch, "--key", "producer"], envelope


def test_an_import_record_the_disk_cannot_read_makes_no_record_the_buyers_own(
        buyer_of_bh: tuple[Buyer, list[str], str]) -> None:
    """`Catalog._import_vkey` (which log an import brought a record from) read the import
    record with `read_blob` (None when missing or unreadable): an EIO made the vendor's
    ``bh@1`` the buyer's own, and recording the buyer's own ``bh@1`` was refused, exit 1,
    ``already recorded as … versions are immutable, record a new version`` (a false verdict:
    the name is free here). The same "own" decides a name's owner, what a vendor's key
    compromise revokes here and what an erasure taken in affects. Now exit 3, one line,
    nothing recorded; run again, it is recorded."""
    buyer, create, envelope = buyer_of_bh
    size = buyer.size()
    with Faults(str(buyer.home), reads=True, where=envelope.split(":")[1]).active():
        r = _invoke(buyer, *create)
    assert (r.exit_code, buyer.size()) == (3, size), r.output  # type: ignore[attr-defined]
    assert r.stderr.startswith(  # type: ignore[attr-defined]
        f"FAIL: import record at log index {size - 3}: object {envelope}: cannot read: [Errno 5]"
    ), r.stderr  # type: ignore[attr-defined]
    assert r.stderr.endswith(  # type: ignore[attr-defined]
        ": which log the records it lists came from is unknown (none is taken for this "
        "ledger's own)\n"), r.stderr  # type: ignore[attr-defined]
    buyer.run(*create)
    assert buyer.size() == size + 1


def test_an_import_record_missing_is_as_before(
        buyer_of_bh: tuple[Buyer, list[str], str]) -> None:
    """A missing import record keeps today's answer (its records count as this ledger's own:
    the name is taken, exit 1; `fsck --repair` restores it)."""
    buyer, create, envelope = buyer_of_bh
    size = buyer.size()
    with Faults(str(buyer.home), reads=True, where=envelope.split(":")[1],
                code=errno.ENOENT).active():
        r = _invoke(buyer, *create)
    assert (r.exit_code, buyer.size()) == (1, size), r.output  # type: ignore[attr-defined]
    assert "already recorded as" in r.stderr  # type: ignore[attr-defined]


def test_an_erasure_the_disk_cannot_read_is_not_recorded_again(home: Path) -> None:  # noqa: F811
    """``erase`` of an artifact erased before reads what that erasure listed
    (`status.erased_before`) after verifying it; that second read failed by the disk was
    "lists nothing", and a second erasure record listing every blob again was appended, exit 0
    (the erase-twice refusal bypassed: the log grew by a record). Now exit 3, one line, nothing
    recorded; run again, the refusal of an erase with nothing to do (exit 1)."""
    size = json.loads(run(home, "log", "info", "--json").stdout)["size"]
    run(home, "erase", "cartpole-holdout", "--key", "vendor", "--reason", "consent")
    envelope = LogEntry.from_bytes(Ledger.open(home).log.entry(size)).envelope
    argv = ["--ledger", str(home), "erase", "cartpole-holdout", "--key", "vendor", "--reason",
            "legal"]
    assert testkit.new_runner().invoke(main, argv).exit_code == 1  # (the index read it)
    counting = Faults(str(home), reads=True, sqlite=True)
    with counting.active():
        assert testkit.new_runner().invoke(main, argv).exit_code == 1
    last = max(k for k, (_op, path) in enumerate(counting.calls) if envelope[7:] in path)
    with (faulted := Faults(str(home), reads=True, sqlite=True, fail_at=last)).active():
        r = testkit.new_runner().invoke(main, argv)
    assert envelope[7:] in faulted.calls[last][1]
    assert (r.exit_code, json.loads(run(home, "log", "info", "--json").stdout)["size"]) == (
        3, size + 1), r.output
    assert r.stderr.startswith(f"FAIL: erasure at log index {size}: object {envelope}: "
                               "cannot read: [Errno 5]"), r.stderr
    assert r.stderr.endswith(": which blobs it erased is unknown; nothing was recorded: run it "
                             "again\n"), r.stderr
    r = run(home, "erase", "cartpole-holdout", "--key", "vendor", "--reason", "legal", code=1)
    assert "already erased" in r.stderr, r.stderr


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOENT])
def test_the_index_reads_an_envelope_it_could_not_read_again(
        buyer_of_bh: tuple[Buyer, list[str], str], tmp_path: Path, code: int) -> None:
    """The user state's index reads envelopes with `read_blob` (missing and unreadable alike):
    it lists the record as unreadable (every decision that meets one fails closed: a name
    that may be it, a dataset whose split is unknown) and reads it again at the end of the
    same reading and at every later one (`TrustState._retry_unreadable`): no decision takes an
    envelope the disk failed for one that is not there. Passes on main (coverage, left30):
    with the retry taken out, the record stays unreadable (checked)."""
    buyer, create, _ = buyer_of_bh
    with testkit.user_state(buyer.state):
        at, dataset = next((i, e.envelope) for i, e in enumerate(map(
            LogEntry.from_bytes, Ledger.open(buyer.home).log.entries(0, buyer.size())))
            if e.kind == "dataset")  # the vendor's, brought by the import
    first_use = {"TRAJLEDGER_STATE_DIR": str(tmp_path / "first-use")}
    create = ["--ledger", str(buyer.home), *create[:4], "2", *create[5:]]  # (bh@2)
    with testkit.user_state(tmp_path / "first-use"):
        ledger = Ledger.open(buyer.home)
        with Faults(str(buyer.home), reads=True, where=dataset[7:], code=code).active():
            assert ledger.trust_state().unreadable() == [at]  # (every read of it fails)
            r = testkit.new_runner().invoke(main, create, env=first_use)
        assert r.exit_code == 3 and r.stderr.endswith(  # (fails closed: not "lists none")
            f"(log index {at}): its envelope {dataset} cannot be read, so its split is unknown; "
            "repair the store before creating datasets\n"), r.output
        r = testkit.new_runner().invoke(main, create, env=first_use)
        assert r.exit_code == 0, r.output
        assert Ledger.open(buyer.home).trust_state().unreadable() == []


def test_fsck_says_unreadable_not_missing_and_advises_no_reindex(
        buyer_of_bh: tuple[Buyer, list[str], str]) -> None:
    """left30's Left: `fsck` took an object the disk cannot read (EIO) for a missing one
    (``object …: missing (envelope of entry …)``) and, from the trust state's re-derivation
    (`read_blob`: None either way), advised ``derive them again with 'trajledger reindex'``
    three times, for a cache that is right. Now one line says it is unreadable and why, the
    state is said not compared (no advice to rebuild it), the remedy is the one of a missing
    object (``fsck --repair``), exit 1 as before (left31)."""
    buyer, _, envelope = buyer_of_bh
    with Faults(str(buyer.home), reads=True, where=envelope.split(":")[1]).active():
        r = _invoke(buyer, "fsck")
    err = r.stderr  # type: ignore[attr-defined]
    assert r.exit_code == 1, r.output  # type: ignore[attr-defined]
    assert f"FAIL: object {envelope}: unreadable (EIO: Input/output error) (envelope of " in err
    assert "missing" not in err and "reindex" not in err, err
    assert "not compared with the log" in err and "fsck --repair" in err, err
    with Faults(str(buyer.home), reads=True, where=envelope.split(":")[1]).active():
        r = _invoke(buyer, "fsck", "--json")
    assert json.loads(r.stdout)["unreadable"] == {  # type: ignore[attr-defined]
        envelope: err.split(f"FAIL: object {envelope}: ")[1].splitlines()[0]}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fsck_says_a_fifo_in_the_store_is_not_read(
        buyer_of_bh: tuple[Buyer, list[str], str]) -> None:
    """A FIFO planted in place of a named object was "missing" too; it keeps a line of its
    own (not read: it would block), and ``fsck --repair`` still replaces it (left31)."""
    buyer, _, envelope = buyer_of_bh
    with testkit.user_state(buyer.state):
        path = Ledger.open(buyer.home).store.path_of(envelope)
    data = path.read_bytes()
    path.unlink()
    os.mkfifo(path)
    r = _invoke(buyer, "fsck")
    err = r.stderr  # type: ignore[attr-defined]
    assert r.exit_code == 1, r.output  # type: ignore[attr-defined]
    assert f"FAIL: object {envelope}: not a regular file, not read (envelope of " in err, err
    assert "missing" not in err and "reindex" not in err, err
    path.unlink()
    path.write_bytes(data)
    assert _invoke(buyer, "fsck").exit_code == 0  # type: ignore[attr-defined]


def test_fsck_takes_an_unreadable_blob_of_an_unfinished_erasure_for_stored(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """left30's note: an erased blob still stored (the erase killed before its deletions) that
    the disk cannot read is an erasure unfinished (a warning, exit 0), not a failure: above
    all not an object for ``fsck --repair`` to restore (erased blobs never are) (left31)."""
    from trajledger.ledger import status

    blobs = {f["digest"] for f in json.loads(run(home, "show", "cartpole-holdout", "--json")
                                             .stdout)["files"]}
    with monkeypatch.context() as m:
        m.setattr(status, "delete_erased", lambda *_a, **_k: 0)
        run(home, "erase", "cartpole-holdout", "--key", "vendor", "--reason", "consent")
    blob = sorted(blobs)[0]
    with Faults(str(home), reads=True, where=blob.split(":")[1]).active():
        r = run(home, "fsck", "--json")
    got = json.loads(r.stdout)
    assert got["ok"] and not got["unreadable"] and blob in got["unerased"], r.output
