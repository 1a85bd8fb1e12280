"""rev40 finding 5: a refusal record names its time to the second. Two training runs refused
for the same reasons in one second by one trainer key were one record: the second attempt was
not logged (``record_statement`` found the first), and an auditor counting who tried to train
on unadmitted data, and how often, counted one attempt short. Each is now a record of its own,
the second at the next second (`ledger.same_second.recorded_anew`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajledger import Ledger
from trajledger.runner import train as training_runs
from trajledger.runner.admission import DataRefusedError
from trajledger.verify.log_entry import LogEntry


def test_two_refusals_in_one_second_are_two_records(
    chat_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger.open(chat_home)
    ledger.revoke(ledger.admit("chat@1").dataset, key="vendor", reason="PII")
    calls: list[int] = []

    def clock() -> str:
        calls.append(1)
        return "2026-12-06T16:30:00Z" if len(calls) <= 4 else "2026-12-06T16:30:01Z"

    monkeypatch.setattr(training_runs, "now", clock)
    size = ledger.log.size
    for _ in range(2):
        with (pytest.raises(DataRefusedError, match="dataset chat@1: refused"),
              ledger.training("chat@1", key="trainer", name="sft", version="1")):
            pass
    kinds = [LogEntry.from_bytes(e).kind for e in ledger.log.entries(size, ledger.log.size)]
    assert kinds == ["refusal", "refusal"], kinds
