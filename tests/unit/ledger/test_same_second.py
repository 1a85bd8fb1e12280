"""`ledger.same_second.recorded_anew` (rev40): a record the log holds already, or whose digest
it holds with other signed metadata, is made again at the next second the clock tells; a clock
set back is taken at its word (the record made at that second), not waited out."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from trajledger.ledger import same_second
from trajledger.ledger.errors import AlreadyRecordedError, LedgerError
from trajledger.ledger.record import Recorded


def clock_of(times: list[str]) -> Callable[[], str]:
    it: Iterator[str] = iter(times)
    return lambda: next(it)


def recorder(held: set[str], clashing: set[str], tried: list[str]) -> Callable[[str], Recorded]:
    def record(when: str) -> Recorded:
        tried.append(when)
        if when in clashing:
            raise AlreadyRecordedError("other signed metadata", 3)
        return Recorded("sha256:" + "0" * 64, "sha256:" + "1" * 64, 7, new=when not in held)
    return record


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(same_second.time, "sleep", lambda _s: None)


def test_a_new_record_is_made_once() -> None:
    tried: list[str] = []
    rec = same_second.recorded_anew(recorder(set(), set(), tried), clock_of(["T0"]))
    assert rec.new and tried == ["T0"]


def test_a_record_held_already_or_clashing_is_made_at_the_next_second() -> None:
    tried: list[str] = []
    rec = same_second.recorded_anew(recorder({"T0"}, {"T1"}, tried),
                                    clock_of(["T0", "T0", "T0", "T1", "T1", "T2"]))
    assert rec.new and tried == ["T0", "T1", "T2"]


def test_a_clock_set_back_is_taken_at_its_word() -> None:
    tried: list[str] = []
    rec = same_second.recorded_anew(recorder({"T5"}, set(), tried), clock_of(["T5", "T3"]))
    assert rec.new and tried == ["T5", "T3"]


def test_a_record_held_that_still_stands_is_the_answer() -> None:
    tried: list[str] = []
    rec = same_second.recorded_anew(recorder({"T0"}, set(), tried), clock_of(["T0"]),
                                    lambda _rec: True)
    assert not rec.new and tried == ["T0"]


def test_a_clock_that_does_not_move_is_an_error_not_a_hang() -> None:
    tried: list[str] = []
    with pytest.raises(LedgerError, match="the clock did not move on"):
        same_second.recorded_anew(recorder({"T0"}, set(), tried), lambda: "T0")
    assert tried == ["T0"]


def test_a_clash_at_every_second_is_raised_not_looped() -> None:
    """The lead, reading rev40's loop: a digest held with other signed metadata whatever the
    time (no same-second matter) was tried again at each later second for ever."""
    tried: list[str] = []
    seconds = [f"T{i}" for i in range(20)]
    with pytest.raises(AlreadyRecordedError):
        same_second.recorded_anew(recorder(set(), set(seconds), tried), clock_of(seconds))
    assert tried == seconds[:same_second._TRIES]


def test_a_record_held_at_every_second_is_an_error_not_a_loop() -> None:
    tried: list[str] = []
    seconds = [f"T{i}" for i in range(20)]
    with pytest.raises(LedgerError, match=f"held already at each of {same_second._TRIES} "
                                          f"seconds up to T{same_second._TRIES - 1}"):
        same_second.recorded_anew(recorder(set(seconds), set(), tried), clock_of(seconds))
    assert tried == seconds[:same_second._TRIES]
