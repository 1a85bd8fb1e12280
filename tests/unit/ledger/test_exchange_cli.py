"""`ledger.exchange_cli`'s helpers, white-box."""

from __future__ import annotations

import pytest

from trajledger.ledger.exchange_cli import _span


@pytest.mark.parametrize(("indices", "said"), [
    ((), ""),
    ((7,), " (log index 7)"),
    ((6, 7, 8, 9), " (log indices 6..9)"),
    # out43: records at 1, 2 and 6 were said to be at "1..6"
    ((1, 2, 6), " (log indices 1..2, 6)"),
    ((9, 3, 4), " (log indices 3..4, 9)"),
    (tuple(range(0, 40, 2)), " (log indices 0, 2, 4, 6, 8, 10, 12, 14, … (12 more runs))"),
])
def test_the_indices_of_the_records_taken_in_are_said_as_runs(
        indices: tuple[int, ...], said: str) -> None:
    assert _span(indices) == said
