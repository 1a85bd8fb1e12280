"""Read faults in ``import`` (fault27; the lead's Left of the fourteenth round): the read-fault
sweep's rule and machinery (tests/e2e/test_read_fault_sweep.py: `plan`, `problem`) on a second
ledger.

A vendor's export (tests/e2e/test_updates.py's `Vendor`: a vendor-only ledger, two batches, a
dataset ``bh@1``) imported by a buyer (`Buyer`, with its own dataset named ``bh@1`` too, so the
import reads the buyer's records of that name): the points are the reads of the buyer's ledger,
of its user state and of the bundle file (each open for reading, each SQLite SELECT), each
failed with EIO. An I/O error is exit 3 with one ``FAIL:`` line, never exit 1 (a vendor's
evidence refused for a fault of this machine's disk), never OK, never a traceback; nothing
logged unless the line says so. CI runs the sample (`SPREAD` points); ``TRAJLEDGER_FAULTS=all``
every point.
"""

from __future__ import annotations

import errno
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import testkit
from click.testing import Result
from test_read_fault_sweep import Copies, sweep_and_report
from test_updates import Buyer, Vendor

from trajledger import Ledger
from trajledger.runner.cli import main
from trajledger.verify.log_entry import LogEntry


class ImportWork(Copies):
    """The buyer's ledger and user state and the vendor's bundle, put back before each fault."""

    def __init__(self, root: Path) -> None:
        live = root / "live"
        vendor = Vendor(live, "vendor", "vendor.example/log")
        buyer = Buyer(live, [vendor], own=True)
        self.home, self.state, self.files = buyer.home, buyer.state, live / "files"
        self.files.mkdir()
        self.bundle = self.files / "bh-1.tar.zst"
        shutil.copyfile(vendor.bundle, self.bundle)
        self.dataset = vendor.dataset
        self.runner = testkit.new_runner()
        self.keep(root / "pristine")

    def run(self, *extra: str) -> Result:
        return self.runner.invoke(main, ["--ledger", str(self.home), "import", str(self.bundle),
                                         "--key", "approver", *extra], prog_name="trajledger",
                                  env={"TRAJLEDGER_STATE_DIR": str(self.state)})


IMPORT_ABSORBED = {
    r"/tmp$": "the scratch directory opened for ``syncfs`` (`exchange._whole_disk`): without it "
              "each object is fsynced instead",
    r"/tmp/\.tmp-[^/]*/trajledger-bundle-[^/]*(/objects(/sha256(/[0-9a-f]{2}){0,2})?)?$":
        "the staging directory and its object directories, removed after the import "
        "(`fs.temp_dir`; `shutil.rmtree` opens each), as `ABSORBED`'s",
    r"/bh-1\.tar\.zst$": "the bundle's first bytes read for advice (`_refuse_compressed_twice`):"
                         " the bundle reader reads the file again and judges it",
}
"""Reads whose failure ``import`` absorbs, exit 0 being right (with why)."""

LEFT = {
    r"/log/key-handovers/\d+$": "`TrustedLog._check_log` tries each log key of the buyer's "
                                "policy on the buyer's checkpoint; the vendor's fails, and the "
                                "handovers it would follow cannot be read (a `LogError` taken "
                                "as that key's failure): exit 0, right here (fault28 Left)",
}
"""Reads whose failure ``import`` passes over though it should not: not fixed this round (exit
0 accepted only there, and only when the run recorded what it should)."""


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ImportWork]:
    yield ImportWork(tmp_path_factory.mktemp("read-faults-import"))


@pytest.mark.slow
def test_a_read_fault_in_import_is_an_operational_error(
        work: ImportWork, capsys: pytest.CaptureFixture[str]) -> None:
    sweep_and_report(work, work.run, "import", (*IMPORT_ABSORBED, *LEFT), capsys)


def test_an_import_stopped_after_it_appended_says_what_is_recorded(work: ImportWork) -> None:
    """The vendor's four records were appended to the buyer's log, then a read failed (the
    log's new tile): ``FAIL: log: cannot read …: Input/output error``, exit 3, as if nothing
    had been imported. Now the line says what is recorded and to run it again, which
    finishes the import (review fault27). The records and the import record are one
    append since left28: the read of the new tile after it fails."""
    work.restore()
    size = work.size()
    with work.faults(where=f"tile/entries/000.p/{size + 5}", code=errno.EIO).active():
        r = work.run()
    assert (r.exit_code, work.size()) == (3, size + 5), r.output
    assert r.stderr == (
        f"FAIL: import bh-1.tar.zst: its 4 foreign record(s) are recorded at log indices "
        f"{size}..{size + 3} and the import record is recorded at log index {size + 4}, but "
        f"then it stopped: log: cannot read {work.home}/log/tile/entries/000.p/{size + 5}: "
        "Input/output error; run it again: it finishes what is not done\n"), r.stderr
    again = work.run()
    assert (again.exit_code, work.size()) == (0, size + 5), again.output


def test_an_import_record_that_cannot_be_read_is_not_tampered_with(work: ImportWork) -> None:
    """An import record whose envelope the disk could not read was "cannot be read …, so what
    was accepted from other logs cannot be known; restore it with 'trajledger fsck --repair
    --from BUNDLE|LEDGER'" (`updates._imports`, exit 1): a whole ledger sent to repair for a
    fault of the machine. Now the read's error, exit 3, nothing recorded (review fault27)."""
    work.restore()
    assert work.run().exit_code == 0
    ledger = Ledger.open(work.home)
    size = ledger.log.size
    envelope = LogEntry.from_bytes(ledger.log.entry(size - 1)).envelope  # the import record
    with work.faults(where=envelope.split(":")[1], code=errno.EIO).active():
        r = work.run()  # the same bundle again: the earlier imports of its log are read
    assert (r.exit_code, work.size()) == (3, size), r.output
    assert r.stderr.startswith(f"FAIL: object {envelope}: cannot read: [Errno 5]"), r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr


def test_an_import_whose_names_cannot_be_checked_says_it_is_recorded(
        work: ImportWork, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the import's OK lines, checking the vendor's names for look-alikes reads the
    user state; its disk error was ``FAIL: database: disk I/O error …`` (exit 3), which reads
    as if the import had failed. Now the line says the import is recorded (review fault27)."""
    import sqlite3

    from trajledger.ledger import record

    def failing(name: str) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    work.restore()
    size = work.size()
    monkeypatch.setattr(record, "lookalike", failing)
    r = work.run()
    assert (r.exit_code, work.size()) == (3, size + 5), r.output
    fails = [x for x in r.stderr.splitlines() if x.startswith("FAIL:")]
    assert len(fails) == 1 and re.fullmatch(
        rf"FAIL: dataset vendor\.example/log\+\w+\+bh@1 \({work.dataset[:19]}…\) from "
        rf"vendor\.example/log\+\w+: the import "
        rf"is recorded \(log index {size + 4}\), but its names could not then be checked for "
        "look-alikes: disk I/O error", fails[0]), r.stderr
    # --json: the document says what is recorded, its look-alikes unknown (null: left33
    # finding 2), and the same line follows.
    work.restore()
    r = work.run("--json")
    assert (r.exit_code, work.size()) == (3, size + 5), r.output
    doc = json.loads(r.stdout)["import"]
    assert (doc["index"], doc["recorded"], doc["lookalikes"]) == (size + 4, True, None), doc
    assert [x for x in r.stderr.splitlines() if x.startswith("FAIL:")] == fails, r.stderr
