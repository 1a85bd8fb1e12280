"""Rollout data layer: the Arrow schema of recorded rollouts, its inputs, validation, Parquet.

Scope: schema v2 of the step and episode tables (``schema``; v1 kept for reading), converting
inputs into it (``convert``: Parquet, Arrow IPC, Python rows; ``formats``: chat, TRL and verl
records; ``minari_io``: Minari datasets), validating (``validate``), writing Parquet with
summary statistics (``parquet_io``), the one definition of success (``success``), spaces and
typed JSON (``spaces``, ``typed_json``), and writing batches back out (``export``).
Non-scope: hashing, storing, signing and logging the written files; that is the recording
layer's job, which calls `write_steps_parquet` and puts `WriteStats.summary` in the manifest.
Spec: ``schemas/rollout.v2.md``, ``schemas/rollout-inputs.md``.

pyarrow is heavy, so names are loaded on first use (PEP 562): importing this package costs
nothing until a rollout is recorded, and ``trajledger --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .convert import (
        DEFAULT_BATCH_ROWS,
        FORMATS,
        EpisodeBuilder,
        ReaderOptions,
        RolloutChunk,
        StepNormaliser,
        derive_episodes,
        detect_format,
        iter_batch_inputs,
        iter_rollout_chunks,
        iter_step_batches,
        normalise_episodes,
        normalise_steps,
        rows_to_episodes,
        rows_to_table,
    )
    from .parquet_io import WriteStats, write_steps_parquet
    from .schema import (
        EPISODE_ATTR_SCHEMA,
        EPISODE_SCHEMA,
        ROLLOUT_SCHEMA_VERSION,
        STEP_SCHEMA,
    )
    from .validate import (
        Problem,
        RolloutValidationError,
        ValidationReport,
        validate_episodes,
        validate_steps,
    )

__all__ = [
    "DEFAULT_BATCH_ROWS",
    "EPISODE_ATTR_SCHEMA",
    "EPISODE_SCHEMA",
    "FORMATS",
    "ROLLOUT_SCHEMA_VERSION",
    "STEP_SCHEMA",
    "EpisodeBuilder",
    "Problem",
    "ReaderOptions",
    "RolloutChunk",
    "RolloutValidationError",
    "StepNormaliser",
    "ValidationReport",
    "WriteStats",
    "derive_episodes",
    "detect_format",
    "iter_batch_inputs",
    "iter_rollout_chunks",
    "iter_step_batches",
    "normalise_episodes",
    "normalise_steps",
    "rows_to_episodes",
    "rows_to_table",
    "validate_episodes",
    "validate_steps",
    "write_steps_parquet",
]

_HOME = {
    **dict.fromkeys(
        ["EPISODE_ATTR_SCHEMA", "EPISODE_SCHEMA", "ROLLOUT_SCHEMA_VERSION", "STEP_SCHEMA"],
        "schema",
    ),
    **dict.fromkeys(
        [
            "Problem",
            "RolloutValidationError",
            "ValidationReport",
            "validate_episodes",
            "validate_steps",
        ],
        "validate",
    ),
    **dict.fromkeys(["WriteStats", "write_steps_parquet"], "parquet_io"),
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f".{_HOME.get(name, 'convert')}", __name__)
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
