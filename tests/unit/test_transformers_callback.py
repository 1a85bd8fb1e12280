"""The transformers callback's metrics (trajledger/integrations/transformers.py): the latest
logged value of each, and a diverged (NaN or infinite) latest value is not hidden behind an
older finite one (review rev11). The whole callback runs under TRL in
tests/e2e/test_trl_callback.py.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

# Imported inside the tests: transformers (and torch under it) costs a worker that collects
# this file about 2.5 CPU-s, paid now only by the worker that runs it (suite44's Left).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed")


def TrainerState(**kwargs: Any) -> Any:  # (transformers' class, imported late)
    from transformers import TrainerState as State

    return State(**kwargs)


def _metrics(state: Any) -> dict[str, float]:
    from trajledger.integrations.transformers import _metrics as metrics

    return metrics(state)


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


@pytest.mark.parametrize("how", ["fsdp-argument", "accelerate-fsdp", "deepspeed-zero3"])
def test_a_sharded_run_recording_its_final_model_is_refused_before_it_starts(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # save_pretrained on the main process alone would record a model without the other ranks'
    # shards (rev11's left item): refused at on_train_begin, on every rank.
    from types import SimpleNamespace

    import transformers.integrations

    from trajledger.integrations.transformers import LedgerCallback
    from trajledger.ledger.errors import LedgerError

    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    args: Any = SimpleNamespace(fsdp=how == "fsdp-argument", output_dir=".")
    if how == "accelerate-fsdp":
        monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    if how == "deepspeed-zero3":
        monkeypatch.setattr(transformers.integrations, "is_deepspeed_zero3_enabled",
                            lambda: True)
    run: Any = object()
    state = TrainerState()
    state.is_world_process_zero = False
    with pytest.raises(LedgerError, match=r"this run shards its model \((FSDP|DeepSpeed "
                                          r"ZeRO-3)\): .* LedgerCallback\(run, final=False\)"):
        LedgerCallback(run).on_train_begin(args, state, None)  # type: ignore[arg-type]
    LedgerCallback(run, final=False).on_train_begin(args, state, None)  # type: ignore[arg-type]
    # Unsharded: nothing to refuse.
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.setattr(transformers.integrations, "is_deepspeed_zero3_enabled", lambda: False)
    LedgerCallback(run).on_train_begin(SimpleNamespace(fsdp=False, output_dir="."), state,
                                       None)  # type: ignore[arg-type]
