"""The admission gate holds a batch's steps to `TRAJLEDGER_MAX_STEPS` as recording does (rev45
finding 2): a vendor's batch recorded elsewhere under a raised limit (a signed file of a few
kilobytes can state millions of constant steps) was read whole into memory, validated and
compared at the buyer's gate, whatever the buyer's limit; now it is refused from its footer,
before any step is decoded, naming the setting. A setting that is no number of steps refuses
the batch too, saying so. docs/SECURITY.md, "Review of 2026-12-07, thirty-third round
(rev45)"."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajledger import Ledger
from trajledger.runner.admission import DataRefusedError, admit


def test_a_batch_over_the_buyers_step_limit_is_refused_at_the_gate(
    chat_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger.open(chat_home)
    steps = admit(ledger, "chat@1", ledger.policy()).batches[0].steps.num_rows
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", str(steps - 1))
    with pytest.raises(DataRefusedError) as refused:
        admit(ledger, "chat@1", ledger.policy())
    assert (f"holds {steps:,} steps, more than the {steps - 1:,} a batch may here "
            "(TRAJLEDGER_MAX_STEPS), refused before reading them") in str(refused.value)
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", str(steps))
    assert admit(ledger, "chat@1", ledger.policy()).batches[0].steps.num_rows == steps


def test_a_step_limit_that_is_no_number_refuses_saying_so(
    chat_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger.open(chat_home)
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "lots")
    with pytest.raises(DataRefusedError, match=r"TRAJLEDGER_MAX_STEPS='lots' is not a number of "
                                               r"steps"):
        admit(ledger, "chat@1", ledger.policy())
