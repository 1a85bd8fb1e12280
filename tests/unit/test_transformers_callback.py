"""The transformers callback's metrics (trajledger/integrations/transformers.py): the latest
logged value of each, and a diverged (NaN or infinite) latest value is not hidden behind an
older finite one (review rev11). The whole callback runs under TRL in
tests/e2e/test_trl_callback.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from transformers import TrainerState

from trajledger.integrations.transformers import _metrics


def test_the_latest_value_of_each_metric() -> None:
    state = TrainerState(log_history=[{"loss": 0.5, "step": 10}, {"loss": 0.25, "step": 20}])
    assert _metrics(state) == {"loss": 0.25, "step": 20.0}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_diverged_metric_is_left_out_not_reported_stale(bad: float) -> None:
    state = TrainerState(
        log_history=[
            {"loss": 0.5, "grad_norm": 1.0, "step": 10},
            {"loss": bad, "grad_norm": bad, "step": 20, "done": True},
        ]
    )
    assert _metrics(state) == {"step": 20.0}
    state.log_history.append({"loss": 0.75, "step": 30})  # it came back: that value counts
    assert _metrics(state) == {"loss": 0.75, "step": 30.0}
