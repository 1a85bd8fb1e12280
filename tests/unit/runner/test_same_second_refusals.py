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
    assert _two_refusals_in_one_second(chat_home, monkeypatch) == ["refusal", "refusal"]


def test_a_refusal_another_process_logged_first_is_made_again(
    chat_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev41: four `training` runs refused at once in four processes (the real clock) logged
    one refusal record, not four (/tmp/rev41-s/probe_refusal_race.py). `record.
    _sign_store_append` asks `find_envelope` before `Log.append` takes the lock, and `append`
    answers the index of an envelope logged meanwhile, so each racing run's `Recorded.new` is
    true and `recorded_anew` takes the other's record for its own. The interleaving here, in
    one process: each run read the log before the other appended (`find_envelope` None)."""
    from trajledger.ledger.log.reader import LogReader

    monkeypatch.setattr(LogReader, "find_envelope", lambda _self, _digest: None)
    assert _two_refusals_in_one_second(chat_home, monkeypatch) == ["refusal", "refusal"]


def _two_refusals_in_one_second(chat_home: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Two refused trainings of chat@1 (revoked) by one trainer key, the clock held at one
    second for the first two asks: the kinds of the entries they logged."""
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
    return [LogEntry.from_bytes(e).kind for e in ledger.log.entries(size, ledger.log.size)]
