"""Record what a Hugging Face ``Trainer`` (or a TRL trainer) saves, with its lineage.

Scope: `LedgerCallback`, a ``transformers.TrainerCallback`` for a run opened with
``ledger.training(...)`` (`trajledger.runner.training.Training`)::

    from trajledger import Ledger
    from trajledger.integrations.transformers import LedgerCallback
    from trl import SFTConfig, SFTTrainer

    ledger = Ledger.open(".trajledger")
    with ledger.training("chat@1", key="trainer", name="sft-chat", version="1") as run:
        trainer = SFTTrainer(model=model, args=SFTConfig(output_dir="out", save_steps=50),
                             train_dataset=run.hf_dataset("conversations"),
                             processing_class=tokenizer, callbacks=[LedgerCallback(run)])
        trainer.train()

- each checkpoint the Trainer writes (``OUTPUT_DIR/checkpoint-<step>``, on ``on_save``) is
  recorded as checkpoint ``NAME@VERSION-step<step>``: every file of the directory as written
  (weights, optimizer and scheduler state, trainer state, training arguments);
- when training ends (``on_train_end``), the final model (``save_pretrained`` of the model and
  of the tokenizer or processor, in safetensors) is recorded as ``NAME@VERSION``.

Each one's SLSA provenance names the dataset, its environments and evaluators, the parent
checkpoint, the source tree, the Python environment's lock and the process's command line
(`Training.save`), plus the trainer (the arguments' class), its configuration (the arguments
as JSON: tokens are redacted by ``TrainingArguments.to_dict``; non-finite numbers become
strings, which canonical JSON cannot hold), the seed, the step and the logged metrics (the
latest value of each; one whose latest value is NaN or infinite is left out, not reported with
an older finite value).
Only the main process records (``state.is_world_process_zero``).

Non-scope: loading a recorded checkpoint (``trajledger verify`` first; files such as
``training_args.bin`` and ``*.pt`` are pickles: load them only from a source you trust).
Imports ``transformers`` when imported (install the ``train`` extra).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from trajledger.ledger.fs import temp_dir

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from trajledger.runner.train import TrainOutcome
    from trajledger.runner.training import Training

__all__ = ["LedgerCallback"]


def _finite(value: Any) -> Any:
    """JSON canonical form needs finite numbers: infinities and NaN become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _metrics(state: TrainerState) -> dict[str, float]:
    """The logged scalar metrics, the latest value of each: a metric whose latest value is not
    finite (a diverged loss) is left out, as canonical JSON cannot hold it; an earlier finite
    value would claim what the run no longer showed."""
    out: dict[str, float] = {}
    for entry in state.log_history:
        for k, v in entry.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                if math.isfinite(v):
                    out[str(k)] = float(v)
                else:
                    out.pop(str(k), None)
    return out


class LedgerCallback(TrainerCallback):
    """Records each checkpoint a Trainer saves, and the final model, into a training run.

    Args:
        run: the open run (``with ledger.training(...) as run``).
        final: record the final model when training ends (default True).
        trainer: what to call the trainer in the provenance (default: the training
            arguments' package and class, e.g. ``trl:SFTConfig``).

    Attributes:
        recorded: the checkpoints recorded so far, in order.
    """

    def __init__(self, run: Training, *, final: bool = True, trainer: str | None = None) -> None:
        """Attach to ``run``."""
        self.run = run
        self.final = final
        self.trainer = trainer
        self.recorded: list[TrainOutcome] = []

    def _describe(self, args: TrainingArguments) -> dict[str, Any]:
        kind = type(args)
        try:
            with warnings.catch_warnings():  # serialising reads deprecated aliases too
                warnings.simplefilter("ignore", FutureWarning)
                text = args.to_json_string()
            config = _finite(json.loads(text))
        except (TypeError, ValueError):
            config = {"repr": repr(args)[:10_000]}
        return {
            "trainer": self.trainer or f"{kind.__module__.split('.')[0]}:{kind.__name__}",
            "config": config,
            "seed": int(args.seed),
        }

    def on_save(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """Record ``OUTPUT_DIR/checkpoint-<step>`` as ``NAME@VERSION-step<step>``."""
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        if not state.is_world_process_zero:
            return
        directory = Path(args.output_dir or ".") / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        self.recorded.append(
            self.run.save(directory, step=state.global_step, metrics=_metrics(state),
                          **self._describe(args))
        )

    def on_train_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: Any = None,
        processing_class: Any = None,
        **kwargs: Any,
    ) -> None:
        """Save the final model (and tokenizer) with ``save_pretrained`` and record it."""
        if not self.final or not state.is_world_process_zero or model is None:
            return
        tokenizer = processing_class if processing_class is not None else kwargs.get("tokenizer")
        with temp_dir(self.run.ledger.root / "tmp") as tmp:
            out = os.path.join(tmp, "model")
            model.save_pretrained(out)  # safetensors (the default since transformers 4.35)
            if tokenizer is not None and hasattr(tokenizer, "save_pretrained"):
                tokenizer.save_pretrained(out)
            self.recorded.append(
                self.run.save(out, metrics=_metrics(state), **self._describe(args))
            )
