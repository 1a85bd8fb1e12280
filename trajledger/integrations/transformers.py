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
Only the main process records (``state.is_world_process_zero``), once every process has saved
its part: in a distributed run (``torch.distributed`` initialised, more than one process) each
``on_save`` first waits at a barrier, so that the other ranks' shards (DeepSpeed's optimizer
states, say) are written before the directory is hashed.

A resumed run (``trainer.train(resume_from_checkpoint=...)``: the Trainer starts at the step its
``trainer_state.json`` says) must name, as its parent (``ledger.training(..., parent=...)``), the
recorded checkpoint it resumed from: at ``on_train_begin`` the parent's recorded
``trainer_state.json`` must hold the step and the log history the Trainer loaded, and
``OUTPUT_DIR/checkpoint-<step>``, when it is there, must be that checkpoint's files; else
`LedgerError` stops the run before its first step (its checkpoints would have claimed a lineage
without the training before the resumed step).

The final model of a sharded run (FSDP, DeepSpeed ZeRO-3): ``save_pretrained`` on the main
process alone does not gather the shards, so such a run with ``final=True`` (the default) is
refused at ``on_train_begin``, before its first step: pass ``final=False``, save with
``trainer.save_model(DIR)`` and record ``DIR`` with ``run.save`` on the main process.

Non-scope: loading a recorded checkpoint (``trajledger verify`` first; files such as
``training_args.bin`` and ``*.pt`` are pickles: load them only from a source you trust).
Imports ``transformers`` when imported (install the ``train`` extra).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from trajledger.ledger.errors import LedgerError
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


def _every_rank_saved() -> None:
    """Wait until every process of a distributed run has reached this point (each has written
    its part of the checkpoint); nothing to wait for in a single process."""
    try:
        import torch.distributed as dist
    except ImportError:  # transformers without torch: one process
        return
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _sharded(args: TrainingArguments) -> str | None:
    """How the run shards its model across processes, when it does (FSDP, in the arguments or
    from ``accelerate launch``; DeepSpeed ZeRO-3), so that ``save_pretrained`` on the main
    process alone would not save the trained model (its shards are not gathered)."""
    if getattr(args, "fsdp", None) or os.environ.get("ACCELERATE_USE_FSDP", "").lower() in (
            "1", "true"):
        return "FSDP"
    try:
        from transformers.integrations import is_deepspeed_zero3_enabled
    except ImportError:  # a transformers without it: no DeepSpeed either
        return None
    return "DeepSpeed ZeRO-3" if is_deepspeed_zero3_enabled() else None


def _history(state: Mapping[str, Any]) -> str:
    """The step and log history of a trainer state, as comparable text (NaN as ``NaN``)."""
    return json.dumps([state.get("global_step"), state.get("log_history")], sort_keys=True)


def _object(data: bytes) -> Mapping[str, Any]:
    """A JSON object, or an empty one (a recorded file that is not a trainer state)."""
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


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

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """A run that shards its model records no final model; a resumed run must name the
        checkpoint it resumed from as its parent."""
        if self.final and (how := _sharded(args)) is not None:
            raise LedgerError(
                f"this run shards its model ({how}): the final model the main process would "
                "save alone is not the trained one: pass LedgerCallback(run, final=False), save "
                "it with trainer.save_model(DIR) and record DIR with run.save(DIR) on the main "
                "process"
            )
        if state.global_step and state.is_world_process_zero:
            self._check_resumed(args, state)

    def _check_resumed(self, args: TrainingArguments, state: TrainerState) -> None:
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        from trajledger.ledger.artifacts import batch_files
        from trajledger.runner.workdir import output_files

        step, parent = state.global_step, self.run.parent
        resumed = f"this run resumed at step {step} from a Trainer checkpoint"
        if parent is None:
            raise LedgerError(
                f"{resumed} but names no parent, so its checkpoints would claim a lineage "
                "without the training before that step: open it with ledger.training(..., "
                f"parent=<the checkpoint resumed from, e.g. NAME@VERSION-step{step}>), or "
                "record that checkpoint first"
            )
        store = self.run.ledger.store
        recorded = batch_files(self.run.ledger, parent.digest).get("trainer_state.json")
        loaded = _history({"global_step": step, "log_history": state.log_history})
        if recorded is None or _history(_object(store.get_verified(recorded))) != loaded:
            raise LedgerError(
                f"{resumed}, but its parent {parent.ref} is not that checkpoint (its "
                "trainer_state.json holds another step or log history): give as parent the "
                "checkpoint the run resumed from"
            )
        directory = Path(args.output_dir or ".") / f"{PREFIX_CHECKPOINT_DIR}-{step}"
        if directory.is_dir():
            from trajledger.ledger.files import manifest_for

            found = manifest_for(output_files(directory)).digest
            if found != parent.digest:
                raise LedgerError(
                    f"{resumed}: {directory} holds other files ({found}) than its parent "
                    f"{parent.ref} ({parent.digest}): give as parent the checkpoint the run "
                    "resumed from, recorded from that directory"
                )

    def on_save(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """Record ``OUTPUT_DIR/checkpoint-<step>`` as ``NAME@VERSION-step<step>``, once every
        process of a distributed run has saved its part."""
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        _every_rank_saved()
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
        with temp_dir(self.run.ledger.scratch) as tmp:
            out = os.path.join(tmp, "model")
            model.save_pretrained(out)  # safetensors (the default since transformers 4.35)
            if tokenizer is not None and hasattr(tokenizer, "save_pretrained"):
                tokenizer.save_pretrained(out)
            self.recorded.append(
                self.run.save(out, metrics=_metrics(state), **self._describe(args))
            )
