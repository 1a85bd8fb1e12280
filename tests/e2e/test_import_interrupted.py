"""End to end: an import stopped between taking the vendor's records in and recording the import
(fifteenth review round, left28; docs/SECURITY.md "Review of 2026-12-05, fifteenth round
(left28)").

``import`` appended the vendor's records, then, in a second append, the import record that lists
them. Stopped between the two (a crash, an I/O error, a kill), the buyer's log held the vendor's
records with nothing saying another log brought them: `verify.releases.brought_by` took the
vendor's ``regression@1`` for the buyer's own suite, and a run on it released the checkpoint
(rev26's finding 2, reopened by the interruption). The records and the import record that
lists them are now one group commit: the import is in the log whole or not at all.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_release_suites_across_logs import EVALUATE, vendor_suite_and_buyer
from testkit import Party

from trajledger.ledger.log.spec import EntrySpec
from trajledger.ledger.log.writer import Log
from trajledger.verify.log_entry import LogEntry


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


def the_import_records_append_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The append that would add an import record fails before it writes anything (as an I/O
    error or a kill before its commit would leave it)."""
    real = Log.append

    def append(self: Log, specs: Sequence[EntrySpec], **kw: Any) -> list[int]:
        if any(s.kind == "import" for s in specs):
            raise OSError(errno.EIO, "Input/output error", str(self.directory / "checkpoint"))
        return real(self, specs, **kw)

    monkeypatch.setattr(Log, "append", append)


def test_an_import_stopped_before_its_record_leaves_no_foreign_record_as_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    theirs, bundle, buyer = vendor_suite_and_buyer(tmp_path)
    size = buyer.size()

    the_import_records_append_fails(monkeypatch)
    r = buyer.run("import", bundle, "--key", "approver", code=3)
    monkeypatch.undo()
    # Before: the vendor's records stayed in the log (size + 3), no import record listing
    # them, and the line said to run the import again.
    assert buyer.size() == size, r.stderr
    assert r.stderr.startswith("FAIL: ") and "Input/output error" in r.stderr, r.stderr

    # The vendor's suite is not in this log: no run on it, no release on it.
    script = tmp_path / "evaluate.py"
    script.write_text(EVALUATE)
    r = buyer.run("eval", "pol@1", "--suite", "regression@1", "--key", "evaluator", "--",
                  sys.executable, script, "pass", code=3)  # fmt: skip
    assert r.stderr == "FAIL: regression@1: no dataset has this name; see 'trajledger log " \
        "show'\n", r.stderr
    r = buyer.run("release", "pol@1", "--key", "approver", code=1)
    assert "> success_rate on regression@1: missing: no holdout or regression dataset " \
        "regression@1 of the release's own log" in r.stderr, r.stderr

    # Run again, the import is whole: the vendor's suite is another log's, as rev26 judges.
    buyer.run("import", bundle, "--key", "approver")
    entries = [LogEntry.from_bytes(e) for e in _entries(buyer)]
    assert entries[-1].kind == "import" and len(entries) > size + 1
    buyer.run("eval", "pol@1", "--suite", "regression@1", "--key", "evaluator", "--",
              sys.executable, script, "pass")  # fmt: skip
    r = buyer.run("release", "pol@1", "--key", "approver", code=1)
    assert f"{theirs} (log index " in r.stderr and "came from another log, by import" in (
        r.stderr), r.stderr


def _entries(party: Party) -> list[bytes]:
    from trajledger import Ledger

    log = Ledger.open(party.home).log
    return [log.entry(i) for i in range(log.size)]


def test_an_error_naming_a_path_that_says_is_recorded_still_says_what_the_import_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An operational error after the import's append says what is recorded (fault27), unless
    its line says so already. That was told by the text " is recorded" in the error: an I/O
    error on a file whose path holds those words (a directory ``what is recorded``) went out
    alone, as if nothing had been imported. Now a typed error says it
    (`errors.StoppedAfterRecordError`)."""
    from test_updates import Buyer, Vendor

    from trajledger.ledger.trust_state import TrustState

    vendor = Vendor(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    size = buyer.size()
    where = str(tmp_path / "what is recorded" / "features")

    real = TrustState.advance_floor

    def failing(self: TrustState, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("applied") is not None:  # the size applied, noted after the append
            raise OSError(errno.EIO, "Input/output error", where)
        real(self, *args, **kwargs)

    monkeypatch.setattr(TrustState, "advance_floor", failing)
    r = buyer.run("import", vendor.bundle, "--key", "approver", code=3)
    monkeypatch.undo()
    assert r.stderr == (
        f"FAIL: import {vendor.bundle.name}: its 4 foreign record(s) are recorded at log indices "
        f"{size}..{size + 3} and the import record is recorded at log index {size + 4}, but then "
        f"it stopped: Input/output error: {where}; run it again: it finishes what is not "
        "done\n"), r.stderr
    buyer.run("import", vendor.bundle, "--key", "approver")
    assert buyer.size() == size + 5
