"""In-process training: admitted data in memory, checkpoints recorded as the trainer saves them.

Scope: `Training`, what ``with ledger.training(DATASET, key=..., name=..., version=...) as run``
gives a training script that runs its framework (Hugging Face ``Trainer``, TRL, plain PyTorch)
in the same process: the admitted data (``run.steps``, ``run.episodes`` as Arrow tables,
``run.hf_dataset()`` as a ``datasets.Dataset``, ``run.conversations()`` for chat data), parsed
from the bytes the gate hashed and never read again, and ``run.save(directory)``, which records
the files of ``directory`` as a checkpoint whose SLSA provenance names the dataset, its
environments and evaluators, the parent checkpoint, the source tree (git), the Python
environment's lock and the process's command line. `trajledger.integrations.transformers`
calls `Training.save` for each checkpoint a Trainer writes and for the final model.

The run is admitted when the ``with`` block starts (a refusal is recorded and raised, and the
block does not run); checkpoints saved inside it are recorded at once and stay recorded if the
block later fails. After the block, `Training.save` refuses.

Non-scope: the training itself; checking what the script does with the data (unlike a command's
read-only directory, memory cannot be re-hashed: an in-process run is trusted to train on what
it was given, and says so in its build type).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trajledger.ledger.errors import LedgerError

from .buildinfo import environment_lock, git_source, lock_descriptor
from .train import (
    PYTHON_BUILD_TYPE,
    RunStart,
    TrainOutcome,
    admission_tables,
    check_name_free,
    metrics_byproduct,
    record_checkpoint,
)

if TYPE_CHECKING:
    import datasets
    import pyarrow as pa

    from trajledger.ledger.catalog import CatalogItem
    from trajledger.ledger.home import LedgerHome
    from trajledger.verify.predicates import ResourceDescriptor

    from .admission import Admission

__all__ = ["Training"]


class Training:
    """An admitted dataset held for an in-process run; `save` records checkpoints.

    Build it with ``Ledger.training`` (a context manager), not directly.

    Attributes:
        ledger: the ledger the run records into.
        admission: what the gate admitted (``.dataset``, ``.name``, ``.version``, ``.report``).
        name: the checkpoint name.
        version: the final checkpoint's version (a save at a step adds ``-step<N>``).
        saved: the checkpoints recorded so far, in order.
    """

    def __init__(
        self,
        ledger: LedgerHome,
        start: RunStart,
        admission: Admission,
        *,
        name: str,
        version: str,
        cwd: Path | None = None,
    ) -> None:
        """Hold an admitted run (see ``Ledger.training``)."""
        self.ledger = ledger
        self._start = start
        self.admission = admission
        self.name = name
        self.version = version
        self.saved: list[TrainOutcome] = []
        self._tables: tuple[pa.Table, pa.Table] | None = None
        self._closed = False
        workdir = cwd or Path.cwd()
        # What ran: noted when the run starts, before the script changes anything.
        self._environment: list[ResourceDescriptor] = []
        source = git_source(workdir)
        if source is not None:
            self._environment.append(source.descriptor())
        self._environment.append(lock_descriptor("python-environment", environment_lock()))
        self._command = [sys.executable, *sys.argv]

    @property
    def parent(self) -> CatalogItem | None:
        """The checkpoint the run starts from (``parent=``), verified when the run started."""
        return self._start.parent

    # -- the data ------------------------------------------------------------------------------

    def _both(self) -> tuple[pa.Table, pa.Table]:
        if self._tables is None:
            self._tables = admission_tables(self.admission)
        return self._tables

    @property
    def steps(self) -> pa.Table:
        """The admitted step table (every batch, in the dataset's order)."""
        return self._both()[0]

    @property
    def episodes(self) -> pa.Table:
        """The admitted episode table."""
        return self._both()[1]

    def conversations(self) -> list[dict[str, Any]]:
        """Chat data as conversations: ``[{"episode_id", "messages": [{"role", "content",
        ...}]}]`` (`runner.chat.conversations`).

        Raises:
            TrainingDataError: no step is a message (observation/action data).
        """
        from .chat import conversations
        from .trainers import TrainingDataError

        convs = conversations(self.steps)
        if not convs:
            raise TrainingDataError(
                f"dataset {self.admission.name}@{self.admission.version}: no step has a role, "
                "so there are no conversations; use run.steps or run.hf_dataset()"
            )
        return convs

    def hf_dataset(
        self, table: Literal["steps", "episodes", "conversations"] = "steps"
    ) -> datasets.Dataset:
        """The admitted data as a Hugging Face ``datasets.Dataset`` (built in memory).

        Args:
            table: ``steps`` (one row per step or message), ``episodes``, or
                ``conversations`` (one row per episode: ``episode_id`` and ``messages``, what
                TRL's ``SFTTrainer`` takes as conversational data).

        Map columns (``extras``, ``judge_scores``) become lists of ``{key, value}``: datasets
        has no map type.

        Raises:
            ValueError: an unknown ``table``.
        """
        import datasets
        from datasets.table import InMemoryTable

        if table == "conversations":
            return datasets.Dataset.from_list(self.conversations())
        if table not in ("steps", "episodes"):
            raise ValueError(f"table {table!r}: want 'steps', 'episodes' or 'conversations'")
        arrow = self.steps if table == "steps" else self.episodes
        return datasets.Dataset(InMemoryTable(_without_maps(arrow)))

    # -- recording -----------------------------------------------------------------------------

    def save(
        self,
        directory: str | Path,
        *,
        step: int | None = None,
        metrics: Mapping[str, float] | None = None,
        trainer: str | None = None,
        config: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> TrainOutcome:
        """Record the files of ``directory`` as a checkpoint of this run.

        Args:
            directory: what the framework saved (``save_pretrained``, a Trainer checkpoint).
            step: the training step of an intermediate checkpoint: its version is
                ``<version>-step<N>`` (without it, the run's version: the final model).
            metrics: scalar metrics, recorded as the provenance's ``metrics`` byproduct.
            trainer: what trained (e.g. ``trl.SFTTrainer``), an external parameter.
            config: the training configuration (JSON), an external parameter.
            seed: the seed, an external parameter.

        Returns:
            The recorded checkpoint.

        Raises:
            LedgerError: the run is over, the directory holds no file, a link or a special
                file, or this ``name@version`` is already recorded.
        """
        from .settled import Settled
        from .workdir import output_files

        if self._closed:
            raise LedgerError(
                f"training run {self.name}@{self.version} is over: save inside the 'with' block"
            )
        version = self.version if step is None else f"{self.version}-step{step}"
        check_name_free(self.ledger, self.name, version)
        path = Path(directory)
        if not path.is_dir():
            raise LedgerError(f"{path}: not a directory; give the directory the model was saved in")
        files = output_files(path)
        if not files:
            raise LedgerError(f"{path}: holds no file to record")
        external: dict[str, Any] = {"command": self._command}
        if trainer is not None:
            external["trainer"] = trainer
        if config is not None:
            external["config"] = dict(config)
        if seed is not None:
            external["seed"] = seed
        if step is not None:
            external["step"] = step
        clean = {k: float(v) for k, v in (metrics or {}).items()}
        recorded = record_checkpoint(
            self.ledger, files, self._start, self.admission, build_type=PYTHON_BUILD_TYPE,
            external=external, dependencies=self._environment,
            byproducts=[metrics_byproduct(clean)] if clean else [],
            name=self.name, version=version, settled=Settled(files, {}, path),
        )
        outcome = TrainOutcome(recorded.digest, recorded.index, clean, self.admission,
                               files=len(files), new=recorded.new)
        self.saved.append(outcome)
        return outcome

    def close(self) -> None:
        """End the run: later saves are refused, the tables are let go."""
        self._closed = True
        self._tables = None


def _without_maps(table: pa.Table) -> pa.Table:
    """Map columns as lists of ``{key, value}`` structs (what Parquet stores them as)."""
    import pyarrow as pa

    fields = []
    for f in table.schema:
        t = f.type
        if pa.types.is_map(t):
            t = pa.list_(pa.struct([pa.field("key", t.key_type, nullable=False),
                                    pa.field("value", t.item_type)]))
        fields.append(pa.field(f.name, t, f.nullable))
    target = pa.schema(fields)
    if target.equals(table.schema.remove_metadata(), check_metadata=False):
        return table
    return table.cast(target)
