"""Rollout data layer: the Arrow schema of recorded rollouts, its inputs, validation, Parquet.

Scope: schema v3 of the step and episode tables (``schema``; v2 and v1 kept for reading); reading
inputs (``readers``: format detection, Parquet, Arrow IPC; ``jsonl``: JSON lines, plain or
compressed, read in worker processes by ``reader_process``; ``formats``: the record formats,
mapped by ``chat`` (chat records) and ``trl_verl`` (TRL's and verl's), reading fields alike
(``fields``), their episodes queued by ``chunk_builder`` into ``chunks``; ``minari_io``: Minari
datasets; ``rows``: Python rows); normalising them into the schema (``normalise``) and deriving
the episode table (``episodes``); validating (``validate``, with the checks of each row in
``checks`` and the problems reported in ``problems``); writing Parquet with summary statistics
(``parquet_io``); the one definition of success (``success``), spaces and typed JSON
(``spaces``, ``typed_json``), and writing batches back out (``export``).

Floors, from the ground up: ``schema``, ``typed_json``, ``spaces``, ``success``, ``arrays``,
``idset``; ``problems``, ``space_values``; ``chunks``, ``normalise``, ``dedup``; ``fields``,
``chunk_builder``, ``episodes``, ``minari_io``; ``chat``, ``jsonl``, ``rows``, ``export``;
``trl_verl``, ``checks``; ``formats``, ``validate``; ``reader_process``, ``parquet_io``;
``readers``. No module imports one on its floor or above it (function-level imports included).
Non-scope: hashing, storing, signing and logging the written files; that is the recording
layer's job, which calls `write_steps_parquet` and puts `WriteStats.summary` in the manifest.
Spec: ``schemas/rollout.v3.md``, ``schemas/rollout-inputs.md``.

pyarrow is heavy, so names are loaded on first use (PEP 562): importing this package costs
nothing until a rollout is recorded, and ``trajledger --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .chunks import ReaderOptions, RolloutChunk
    from .episodes import EpisodeBuilder, derive_episodes
    from .normalise import StepNormaliser, normalise_episodes, normalise_steps
    from .parquet_io import WriteStats, write_steps_parquet
    from .problems import Problem, RolloutValidationError, ValidationReport
    from .readers import (
        DEFAULT_BATCH_ROWS,
        FORMATS,
        detect_format,
        iter_batch_inputs,
        iter_rollout_chunks,
        iter_step_batches,
    )
    from .rows import rows_to_episodes, rows_to_table
    from .schema import (
        EPISODE_ATTR_SCHEMA,
        EPISODE_SCHEMA,
        ROLLOUT_SCHEMA_VERSION,
        STEP_SCHEMA,
    )
    from .validate import validate_episodes, validate_steps

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
    "DEFAULT_BATCH_ROWS": "readers",
    "EPISODE_ATTR_SCHEMA": "schema",
    "EPISODE_SCHEMA": "schema",
    "FORMATS": "readers",
    "ROLLOUT_SCHEMA_VERSION": "schema",
    "STEP_SCHEMA": "schema",
    "EpisodeBuilder": "episodes",
    "Problem": "problems",
    "ReaderOptions": "chunks",
    "RolloutChunk": "chunks",
    "RolloutValidationError": "problems",
    "StepNormaliser": "normalise",
    "ValidationReport": "problems",
    "WriteStats": "parquet_io",
    "derive_episodes": "episodes",
    "detect_format": "readers",
    "iter_batch_inputs": "readers",
    "iter_rollout_chunks": "readers",
    "iter_step_batches": "readers",
    "normalise_episodes": "normalise",
    "normalise_steps": "normalise",
    "rows_to_episodes": "rows",
    "rows_to_table": "rows",
    "validate_episodes": "validate",
    "validate_steps": "validate",
    "write_steps_parquet": "parquet_io",
}
"""The module that defines each name of `__all__`."""


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f".{_HOME[name]}", __name__)
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
