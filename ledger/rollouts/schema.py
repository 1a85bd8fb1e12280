"""Arrow schema of recorded rollouts, version 1.

Scope: the two tables a rollout batch is stored as (``steps.parquet`` and ``episodes.parquet``),
their column sets, which columns are required, which float columns are written with
BYTE_STREAM_SPLIT, and the schema-level metadata that names the version.
Non-scope: converting inputs into these tables (``convert.py``), checking their content
(``validate.py``) and writing Parquet (``parquet_io.py``).
Spec: ``schemas/rollout.v1.md`` (every column, classic-RL and LLM use),
``schemas/rollout-steps.v1.schema.json`` and ``schemas/rollout-episodes.v1.schema.json``.

One schema serves classic RL and LLM-agent rollouts; columns a rollout does not use are null.
This module imports pyarrow, so ``ledger.rollouts`` loads it lazily: only recording pays for it.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

__all__ = [
    "EPISODE_ATTR_SCHEMA",
    "EPISODE_COLUMNS",
    "EPISODE_REQUIRED",
    "EPISODE_SCHEMA",
    "FLOAT_EPISODE_COLUMNS",
    "FLOAT_STEP_COLUMNS",
    "ROLLOUT_SCHEMA_VERSION",
    "SCHEMA_VERSION_KEY",
    "STEP_COLUMNS",
    "STEP_INPUT_REQUIRED",
    "STEP_REQUIRED",
    "STEP_SCHEMA",
    "TERMINATION_REASONS",
    "VECTOR_TYPE",
    "parquet_float_paths",
]

ROLLOUT_SCHEMA_VERSION: Final = "1"
"""Version of this schema. A change of any column's name, type or meaning bumps it."""

SCHEMA_VERSION_KEY: Final = b"trajledger.rollout.schema"
"""Arrow/Parquet schema metadata key whose value names the table and version."""

VECTOR_TYPE: Final = pa.list_(pa.float32())
"""Type of ``obs`` and ``action``: a variable-length vector of float32."""

TERMINATION_REASONS: Final = ("terminated", "truncated")
"""Reasons derived from the step flags; producers may record any other string."""


def _f(name: str, typ: pa.DataType, nullable: bool = True) -> pa.Field:
    return pa.field(name, typ, nullable=nullable)


STEP_SCHEMA: Final = pa.schema(
    [
        _f("episode_id", pa.string(), False),
        _f("step", pa.int64(), False),
        _f("is_first", pa.bool_(), False),
        _f("is_last", pa.bool_(), False),
        _f("terminated", pa.bool_(), False),
        _f("truncated", pa.bool_(), False),
        _f("reward", pa.float64(), False),
        _f("obs", VECTOR_TYPE),
        _f("action", VECTOR_TYPE),
        _f("action_logprob", pa.float64()),
        _f("timestamp", pa.timestamp("us", tz="UTC")),
        _f("latency_ms", pa.float64()),
        _f("role", pa.string()),
        _f("content", pa.string()),
        _f("tool_calls", pa.string()),
        _f("tool_results", pa.string()),
        _f("prompt_tokens", pa.int64()),
        _f("completion_tokens", pa.int64()),
        _f("model_id", pa.string()),
        _f("cost_usd", pa.float64()),
        _f("safety_interventions", pa.int32()),
    ],
    metadata={SCHEMA_VERSION_KEY: b"steps/" + ROLLOUT_SCHEMA_VERSION.encode()},
)
"""One row per step (classic RL) or per message (LLM agents)."""

EPISODE_SCHEMA: Final = pa.schema(
    [
        _f("episode_id", pa.string(), False),
        _f("task_id", pa.string()),
        _f("env_version", pa.string()),
        _f("policy_version", pa.string()),
        _f("seed", pa.int64()),
        _f("return", pa.float64(), False),
        _f("num_steps", pa.int64(), False),
        _f("termination_reason", pa.string(), False),
        _f("judge_scores", pa.map_(pa.string(), pa.float64())),
        _f("cost_usd", pa.float64()),
        _f("language", pa.string()),
        _f("task_type", pa.string()),
        _f("invalid", pa.bool_(), False),
    ],
    metadata={SCHEMA_VERSION_KEY: b"episodes/" + ROLLOUT_SCHEMA_VERSION.encode()},
)
"""One row per episode, in order of the episode's first step."""

EPISODE_ATTR_SCHEMA: Final = pa.schema(
    [f.with_nullable(True) for f in EPISODE_SCHEMA], metadata=EPISODE_SCHEMA.metadata
)
"""Episode columns as an input gives them: every column optional; missing ones are derived."""

STEP_COLUMNS: Final = tuple(STEP_SCHEMA.names)
EPISODE_COLUMNS: Final = tuple(EPISODE_SCHEMA.names)
STEP_REQUIRED: Final = tuple(f.name for f in STEP_SCHEMA if not f.nullable)
EPISODE_REQUIRED: Final = tuple(f.name for f in EPISODE_SCHEMA if not f.nullable)
STEP_INPUT_REQUIRED: Final = ("episode_id", "step", "reward", "terminated", "truncated")
"""Columns an input must give; ``is_first`` and ``is_last`` are derived when absent."""

FLOAT_STEP_COLUMNS: Final = tuple(
    f.name for f in STEP_SCHEMA if pa.types.is_floating(f.type) or f.type == VECTOR_TYPE
)
FLOAT_EPISODE_COLUMNS: Final = tuple(f.name for f in EPISODE_SCHEMA if pa.types.is_floating(f.type))


def parquet_float_paths(schema: pa.Schema) -> tuple[list[str], list[str]]:
    """Split a flat schema's Parquet leaf columns into float leaves and the others.

    Parquet names the values of a ``list`` column ``<name>.list.element`` and the parts of a
    ``map`` column ``<name>.key_value.key`` / ``.value``. Float leaves are written with
    BYTE_STREAM_SPLIT (which compresses them better under zstd); the others with dictionary
    encoding.

    Args:
        schema: a schema whose columns are primitives, lists of primitives or maps.

    Returns:
        ``(float_paths, other_paths)``, in column order.
    """
    floats: list[str] = []
    others: list[str] = []
    for field in schema:
        t = field.type
        if pa.types.is_list(t):
            leaves = [(f"{field.name}.list.element", t.value_type)]
        elif pa.types.is_map(t):
            leaves = [
                (f"{field.name}.key_value.key", t.key_type),
                (f"{field.name}.key_value.value", t.item_type),
            ]
        else:
            leaves = [(field.name, t)]
        for path, leaf_type in leaves:
            (floats if pa.types.is_floating(leaf_type) else others).append(path)
    return floats, others
