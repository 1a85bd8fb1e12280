"""A clock set back (rev6 finding 4): the gate judges approvals no earlier than the log's last
entry.

On a copy of the chat ledger (tests/conftest.py): ``chat@2`` approved for one second; once it
expired and the log took another entry in, the runner's clock is set back ten minutes (the
verifier's clock, read from the system). Before the fix `admit` judged the expired approval
valid, and a run would have trained on it. (A log *writer* whose clock is set back still dates
its entries in the past: docs/SECURITY.md, rev6's design limits.)
"""

from __future__ import annotations

import datetime as dt
import time
import types
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_runner_cli import expect  # tests/e2e is on sys.path (its conftest)

from trajledger import Ledger
from trajledger.runner.cli import main
from trajledger.verify import lineage
from trajledger.verify.log_entry import LogEntry

BACK = dt.timedelta(minutes=10)


class _Behind(dt.datetime):
    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> _Behind:  # type: ignore[override]
        return super().now(tz) - BACK


def set_clock_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lineage, "dt", types.SimpleNamespace(
        datetime=_Behind, UTC=dt.UTC, timedelta=dt.timedelta, timezone=dt.timezone))


def test_an_expired_approval_stays_expired_when_the_clock_is_set_back(
    chat_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger.open(chat_home)
    batch = next(LogEntry.from_bytes(e).subject for e in ledger.log.entries(0, ledger.log.size)
                 if LogEntry.from_bytes(e).kind == "rollout-batch")
    ledger.create_dataset("chat", "2", "train", [batch], key="vendor")
    ledger.approve("chat@2", key="approver", expires="1s")
    time.sleep(2)  # past the expiry by a second (a log time may be truncated to one)
    ledger.approve("chat@1", key="approver")  # the log moves on past the expiry
    set_clock_back(monkeypatch)
    r = CliRunner().invoke(main, ["--ledger", str(chat_home), "admit", "chat@2"],
                           prog_name="trajledger")
    expect(r, 1)
    assert "approvals: 0 of 1 required approver(s) for 'train'; approval" in r.stderr
    assert "expired at" in r.stderr


class _Ahead(dt.datetime):
    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> _Ahead:  # type: ignore[override]
        return super().now(tz) + dt.timedelta(days=1)


AHEAD = types.SimpleNamespace(datetime=_Ahead, UTC=dt.UTC, timedelta=dt.timedelta,
                              timezone=dt.timezone)
"""`lineage.dt` with its clock a day ahead."""


def approved_for_an_hour(chat_home: Path) -> Ledger:
    """The chat ledger with ``chat@2`` (its batch) approved for an hour, the log's last entry
    (a quiet log)."""
    ledger = Ledger.open(chat_home)
    batch = next(LogEntry.from_bytes(e).subject for e in ledger.log.entries(0, ledger.log.size)
                 if LogEntry.from_bytes(e).kind == "rollout-batch")
    ledger.create_dataset("chat", "2", "train", [batch], key="vendor")
    ledger.approve("chat@2", key="approver", expires="1h")
    return ledger


def test_a_clock_set_back_on_a_quiet_log_does_not_revive_an_expired_approval(
    chat_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quiet log (rev25's Left, docs/SECURITY.md review state26 finding 3): nothing logged
    after the approval, so the log's last entry tells no later time. Yesterday's run (the
    clock a day ahead of the approval's writer) found it expired; today the clock is set back
    a day (here: the real clock). Before, `admit` counted the approval again (exit 0). Now the
    user's state remembers the newest time it was used at: a use is judged no earlier, and a
    clock behind it by more than five minutes is said, with what to do."""
    approved_for_an_hour(chat_home)
    with monkeypatch.context() as m:
        m.setattr(lineage, "dt", AHEAD)
        r = CliRunner().invoke(main, ["--ledger", str(chat_home), "admit", "chat@2"],
                               prog_name="trajledger")
        expect(r, 1)  # a day later: expired
        assert "expired at" in r.stderr
    r = CliRunner().invoke(main, ["--ledger", str(chat_home), "admit", "chat@2"],
                           prog_name="trajledger")
    expect(r, 1)
    assert "expired at" in r.stderr
    (note,) = [ln for ln in r.stderr.splitlines() if ln.startswith("NOTE: your clock")]
    assert note.startswith("NOTE: your clock reads 20"), note
    assert " is 23 h 59 min behind the newest time your state of log " in note \
        or " is 1 d 0 h 0 min behind the newest time your state of log " in note, note
    assert (": set it right (NTP, 'timedatectl'); until then what expires or rotates is "
            "judged as of that time; ") in note, note


def test_a_time_given_to_the_admission_is_floored_too(
    chat_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`runner.admission.admit(..., now=T)` (the Python admission; a time to judge at) set the
    verifier's time to T after `ledger_verifier` had floored it: a T behind the newest time
    the user's state was used at counted an approval that run found expired (admitted; left27).
    Now a given time only makes the judgement later, as the floor does."""
    from trajledger.runner.admission import DataRefusedError, admit

    ledger = approved_for_an_hour(chat_home)
    with monkeypatch.context() as m:
        m.setattr(lineage, "dt", AHEAD)
        with pytest.raises(DataRefusedError, match="expired at"):
            admit(ledger, "chat@2", ledger.policy())  # a day later: expired, and noted
    with pytest.raises(DataRefusedError, match="expired at"):
        admit(ledger, "chat@2", ledger.policy(), now=dt.datetime.now(dt.UTC))


class _YearAhead(dt.datetime):
    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> _YearAhead:  # type: ignore[override]
        return super().now(tz) + dt.timedelta(days=400)


def test_a_time_noted_ahead_by_a_wrong_clock_can_be_forgotten_by_hand(
    chat_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clock that ran ahead once (a VM started with a wrong clock, a state directory copied
    from such a machine) left the state's memory of its use 400 days ahead (review rev27,
    finding 1). Every approval, a fresh one too, was then judged 400 days on, expired: `admit`
    refused everything until that day, and the note's advice ("set it right") was to fix a
    clock that is right. The only way out was removing the state, which loses every floor.
    Now the note names the way out, `trust VKEY --clock-ahead TIME` restating the time noted;
    refused (exit 1, the state unchanged) under TRAJLEDGER_REQUIRE_PIN=1, for another time,
    or when nothing is ahead."""
    ledger = approved_for_an_hour(chat_home)
    run = CliRunner().invoke
    home = ["--ledger", str(chat_home)]
    with monkeypatch.context() as m:
        m.setattr(lineage, "dt", types.SimpleNamespace(
            datetime=_YearAhead, UTC=dt.UTC, timedelta=dt.timedelta, timezone=dt.timezone))
        expect(run(main, [*home, "admit", "chat@2"], prog_name="trajledger"), 1)
    ledger.approve("chat@2", key="approver", note="again, today")  # a fresh approval, 30 days
    r = run(main, [*home, "admit", "chat@2"], prog_name="trajledger")
    expect(r, 1)  # judged 400 days on: the fresh approval expired too
    (note,) = [ln for ln in r.stderr.splitlines() if ln.startswith("NOTE: your clock")]
    vkey = ledger.log_vkey()
    assert vkey is not None
    origin = vkey.split("+")[0]
    ahead = note.split("was used at (")[1].split(")")[0]
    assert note.endswith(
        f"; if your clock is right and that time is not (a clock that ran ahead once, a "
        f"state copied from another machine): 'trajledger trust {vkey} --clock-ahead "
        f"{ahead}'"), note

    def trust(*args: str) -> object:
        return run(main, [*home, "trust", vkey, *args], prog_name="trajledger")

    r = trust("--clock-ahead", "2020-01-01T00:00:00Z")
    expect(r, 1)
    assert f"your state of log {origin} was last used at {ahead}, not " \
           "2020-01-01T00:00:00Z: '--clock-ahead 2020-01-01T00:00:00Z' restates another " \
           "time; nothing was changed" in r.stderr, r.stderr
    monkeypatch.setenv("TRAJLEDGER_REQUIRE_PIN", "1")
    r = trust("--clock-ahead", ahead)
    expect(r, 1)
    assert "TRAJLEDGER_REQUIRE_PIN=1" in r.stderr
    monkeypatch.delenv("TRAJLEDGER_REQUIRE_PIN")
    expect(run(main, [*home, "admit", "chat@2"], prog_name="trajledger"), 1)  # unchanged
    r = trust("--clock-ahead", ahead)
    expect(r, 0)
    assert f"OK: log {origin}: the time your state noted, {ahead}, is " \
           "forgotten as a clock running ahead; what expires is judged by your clock again" \
           in r.output, r.output
    r = run(main, [*home, "admit", "chat@2"], prog_name="trajledger")
    expect(r, 0)
    assert "NOTE: your clock" not in r.stderr
    r = trust("--clock-ahead", ahead)  # once: nothing ahead now
    expect(r, 1)
    assert "is not ahead of your clock" in r.stderr, r.stderr
