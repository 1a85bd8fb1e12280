"""Arrow schema of recorded rollouts, version 3 (versions 1 and 2 kept for reading).

Scope: the two tables a rollout batch is stored as (``steps.parquet`` and ``episodes.parquet``),
their column sets, which columns are required, the space columns (``obs``, ``action``,
``final_obs``: a tensor, a list of any number type with the shape in field metadata; a string,
for a Text space; or a struct of those, for a Dict or Tuple space), the typed ``extras`` map,
which float leaves are written with BYTE_STREAM_SPLIT, and the schema-level metadata that names
the table and version. Versions 1 (``STEP_SCHEMA_V1``, ``EPISODE_SCHEMA_V1``) and 2
(``STEP_SCHEMA_V2``, ``EPISODE_SCHEMA_V2``: the columns of version 3, tensors only) stay
defined: batches recorded as v1 or v2 are read and validated against them.
Non-scope: converting inputs into these tables (``normalise.py``), checking their content
(``validate.py``) and writing Parquet (``parquet_io.py``).
Spec: ``schemas/rollout.v3.md`` (every column, classic-RL and LLM use, space columns;
decisions), ``schemas/rollout-steps.v3.schema.json`` and
``schemas/rollout-episodes.v3.schema.json``; ``schemas/rollout.v2.md`` and ``rollout.v1.md`` for
versions 2 and 1.

One schema serves classic RL and LLM-agent rollouts; columns a rollout does not use are null.
`STEP_SCHEMA` and `EPISODE_SCHEMA` are the templates: a written batch has the same columns,
except that its tensor columns keep the value type and shape of its data (float64 stays
float64, an image stays ``uint8`` of shape ``[H, W, C]``); `conforms` tells whether a schema is
one of them. The ``extras`` column maps field names to typed JSON.
This module imports pyarrow, so ``ledger.rollouts`` loads it lazily: only recording pays for it.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Sequence
from typing import Final

import pyarrow as pa

__all__ = [
    "EPISODE_ATTR_SCHEMA",
    "EPISODE_COLUMNS",
    "EPISODE_REQUIRED",
    "EPISODE_SCHEMA",
    "EPISODE_SCHEMA_V1",
    "EPISODE_SCHEMA_V2",
    "EXTRAS_TYPE",
    "FLOAT_EPISODE_COLUMNS",
    "FLOAT_STEP_COLUMNS",
    "JSON_STEP_COLUMNS",
    "MAX_SHAPE_VALUES",
    "ROLLOUT_SCHEMA_VERSION",
    "SCHEMA_VERSION_KEY",
    "SHAPE_KEY",
    "SPACE_KEY",
    "STEP_COLUMNS",
    "STEP_INPUT_REQUIRED",
    "STEP_REQUIRED",
    "STEP_SCHEMA",
    "STEP_SCHEMA_V1",
    "STEP_SCHEMA_V2",
    "TENSOR_COLUMNS",
    "TENSOR_VALUE_TYPES",
    "TERMINATION_REASONS",
    "VECTOR_TYPE",
    "canonical_space_field",
    "conforms",
    "meant_column",
    "parquet_float_paths",
    "schema_version",
    "space_field_problem",
    "space_leaves",
    "struct_field",
    "tensor_field",
    "tensor_shape",
    "with_columns",
]

ROLLOUT_SCHEMA_VERSION: Final = "3"
"""Version of this schema. A change of any column's name, type or meaning bumps it."""

SCHEMA_VERSION_KEY: Final = b"trajledger.rollout.schema"
"""Arrow/Parquet schema metadata key whose value names the table and version."""

SHAPE_KEY: Final = b"trajledger.shape"
"""Field metadata of a tensor column: the JSON array of its fixed shape, e.g. ``[64,64,3]``."""

MAX_SHAPE_VALUES: Final = 1 << 53
"""Most values a declared tensor shape may hold (the product of its sizes)."""

SPACE_KEY: Final = b"trajledger.space"
"""Field metadata of a struct in a space column: ``Dict`` (members named by their keys, in the
space's order) or ``Tuple`` (members named ``0``, ``1``, ...)."""

MAX_SPACE_DEPTH: Final = 16
"""Deepest nesting of Dict and Tuple structs a space column may have."""

EXTRAS_TYPE: Final = pa.map_(pa.string(), pa.string())
"""Type of ``extras`` (step and episode tables): field name to its value as typed JSON text."""

VECTOR_TYPE: Final = pa.list_(pa.float32())
"""The default (and version 1) type of ``obs`` and ``action``: a vector of float32."""

TENSOR_VALUE_TYPES: Final = (
    pa.bool_(),
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint8(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
    pa.float16(),
    pa.float32(),
    pa.float64(),
)
"""Value types a tensor column may hold (the numpy dtypes Gymnasium spaces use)."""

TENSOR_COLUMNS: Final = frozenset({"obs", "action", "final_obs"})
"""The space columns: in v2, ``list<T>`` for T in `TENSOR_VALUE_TYPES` with an optional fixed
shape; in v3 also a string (Text) or a struct of space values (Dict, Tuple)."""

JSON_STEP_COLUMNS: Final = ("tool_calls", "tool_results", "info")
"""String columns that must hold JSON text."""

TERMINATION_REASONS: Final = ("terminated", "truncated")
"""Reasons derived from the step flags; producers may record any other string."""


def _f(name: str, typ: pa.DataType, nullable: bool = True) -> pa.Field:
    return pa.field(name, typ, nullable=nullable)


def _meta(table: str, version: str) -> dict[bytes, bytes]:
    return {SCHEMA_VERSION_KEY: f"{table}/{version}".encode()}


STEP_SCHEMA: Final = pa.schema(
    [
        _f("episode_id", pa.string(), False),
        _f("step", pa.int64(), False),
        _f("is_first", pa.bool_(), False),
        _f("is_last", pa.bool_(), False),
        _f("terminated", pa.bool_(), False),
        _f("truncated", pa.bool_(), False),
        _f("reward", pa.float64()),
        _f("discount", pa.float64()),
        _f("obs", VECTOR_TYPE),
        _f("action", VECTOR_TYPE),
        _f("action_logprob", pa.float64()),
        _f("timestamp", pa.timestamp("us", tz="UTC")),
        _f("latency_ms", pa.float64()),
        _f("role", pa.string()),
        _f("content", pa.string()),
        _f("reasoning_content", pa.string()),
        _f("tool_calls", pa.string()),
        _f("tool_results", pa.string()),
        _f("prompt_tokens", pa.int64()),
        _f("completion_tokens", pa.int64()),
        _f("model_id", pa.string()),
        _f("cost_usd", pa.float64()),
        _f("safety_interventions", pa.int32()),
        _f("info", pa.string()),
        _f("extras", EXTRAS_TYPE),
    ],
    metadata=_meta("steps", ROLLOUT_SCHEMA_VERSION),
)
"""One row per step (classic RL) or per message (LLM agents); the template of schema v3."""

EPISODE_SCHEMA: Final = pa.schema(
    [
        _f("episode_id", pa.string(), False),
        _f("task_id", pa.string()),
        _f("group_id", pa.string()),
        _f("label", pa.string()),
        _f("env_version", pa.string()),
        _f("policy_version", pa.string()),
        _f("seed", pa.int64()),
        _f("return", pa.float64()),
        _f("num_steps", pa.int64(), False),
        _f("termination_reason", pa.string(), False),
        _f("success", pa.bool_()),
        _f("judge_scores", pa.map_(pa.string(), pa.float64())),
        _f("cost_usd", pa.float64()),
        _f("language", pa.string()),
        _f("task_type", pa.string()),
        _f("invalid", pa.bool_(), False),
        _f("final_obs", VECTOR_TYPE),
        _f("reset_info", pa.string()),
        _f("extras", EXTRAS_TYPE),
    ],
    metadata=_meta("episodes", ROLLOUT_SCHEMA_VERSION),
)
"""One row per episode, in order of the episode's first step; the template of schema v3."""

EPISODE_ATTR_SCHEMA: Final = pa.schema(
    [f.with_nullable(True) for f in EPISODE_SCHEMA], metadata=EPISODE_SCHEMA.metadata
)
"""Episode columns as an input gives them: every column optional; missing ones are derived."""

STEP_SCHEMA_V2: Final = STEP_SCHEMA.with_metadata(_meta("steps", "2"))
"""Version 2 of the step table (``schemas/rollout.v3.md``): the columns of v3, with tensors
(``list<T>``) as the only space values; read and validated, never written."""

EPISODE_SCHEMA_V2: Final = EPISODE_SCHEMA.with_metadata(_meta("episodes", "2"))
"""Version 2 of the episode table: read and validated, never written."""

STEP_SCHEMA_V1: Final = pa.schema(
    [
        f.with_nullable(False) if f.name == "reward" else f
        for f in STEP_SCHEMA
        if f.name not in ("discount", "reasoning_content", "info", "extras")
    ],
    metadata=_meta("steps", "1"),
)
"""Version 1 of the step table (``schemas/rollout.v1.md``): read and validated, never written."""

EPISODE_SCHEMA_V1: Final = pa.schema(
    [
        f.with_nullable(False) if f.name == "return" else f
        for f in EPISODE_SCHEMA
        if f.name not in ("group_id", "label", "success", "final_obs", "reset_info", "extras")
    ],
    metadata=_meta("episodes", "1"),
)
"""Version 1 of the episode table: read and validated, never written."""

STEP_COLUMNS: Final = tuple(STEP_SCHEMA.names)
EPISODE_COLUMNS: Final = tuple(EPISODE_SCHEMA.names)
STEP_REQUIRED: Final = tuple(f.name for f in STEP_SCHEMA if not f.nullable)
EPISODE_REQUIRED: Final = tuple(f.name for f in EPISODE_SCHEMA if not f.nullable)
STEP_INPUT_REQUIRED: Final = ("episode_id", "step", "terminated", "truncated")
"""Columns an input must give; ``is_first`` and ``is_last`` are derived when absent, ``reward``
may be absent (data without rewards: SFT, preferences)."""

FLOAT_STEP_COLUMNS: Final = tuple(
    f.name for f in STEP_SCHEMA if pa.types.is_floating(f.type) or f.name in TENSOR_COLUMNS
)
FLOAT_EPISODE_COLUMNS: Final = tuple(f.name for f in EPISODE_SCHEMA if pa.types.is_floating(f.type))


def schema_version(schema: pa.Schema) -> str | None:
    """The version a table's schema metadata names (``"1"``, ``"2"``), or None if none."""
    meta = schema.metadata or {}
    raw = meta.get(SCHEMA_VERSION_KEY)
    if raw is None:
        return None
    _, _, version = raw.decode("utf-8", "replace").partition("/")
    return version or None


def tensor_field(
    name: str, value_type: pa.DataType, shape: Sequence[int] | None = None
) -> pa.Field:
    """A tensor column: ``list<value_type>``, with its fixed shape in field metadata.

    Args:
        name: ``obs``, ``action`` or ``final_obs``.
        value_type: one of `TENSOR_VALUE_TYPES`.
        shape: the fixed shape of every value (row-major), or None for vectors of any length.

    Returns:
        The nullable field.
    """
    meta = None if shape is None else {SHAPE_KEY: json.dumps(list(shape)).encode()}
    return pa.field(name, pa.list_(value_type), nullable=True, metadata=meta)


def tensor_shape(field: pa.Field) -> tuple[int, ...] | None:
    """The fixed shape a tensor field declares, or None (vectors of any length).

    The metadata is input (a Parquet file's), so it is read as hostile: nesting, huge numbers.

    Raises:
        ValueError: the shape metadata is not a JSON array of non-negative integers holding at
            most `MAX_SHAPE_VALUES` values in all.
    """
    raw = (field.metadata or {}).get(SHAPE_KEY)
    if raw is None:
        return None
    shown = raw[:60]
    try:
        value = json.loads(raw)
    except RecursionError as e:
        raise ValueError(f"{field.name}: shape metadata {shown!r} is nested too deeply") from e
    if not isinstance(value, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value
    ):
        raise ValueError(f"{field.name}: shape metadata {shown!r} is not a list of sizes")
    total = 1
    for d in value:
        total *= d
        if total > MAX_SHAPE_VALUES:
            raise ValueError(
                f"{field.name}: shape metadata {shown!r} holds over {MAX_SHAPE_VALUES} values"
            )
    return tuple(value)


def struct_field(name: str, kind: str, members: Sequence[pa.Field]) -> pa.Field:
    """A Dict or Tuple space column: a struct of its members' space fields.

    Args:
        name: the column (or member) name.
        kind: ``Dict`` or ``Tuple`` (members named ``0``, ``1``, ...).
        members: the members' fields, in the space's order.
    """
    return pa.field(name, pa.struct(members), nullable=True, metadata={SPACE_KEY: kind.encode()})


_SPACE_TYPES_V2: Final = "list<T> for a number or boolean type T"
_SPACE_TYPES: Final = f"{_SPACE_TYPES_V2}, a string (Text) or a struct of those (Dict, Tuple)"


def space_field_problem(field: pa.Field, version: str = ROLLOUT_SCHEMA_VERSION) -> str | None:
    """Why ``field`` is not a space column of schema ``version``, or None when it is one.

    A space column is a tensor (``list<T>``, its shape metadata well formed); in version 3 also
    a string (a Text value) or a struct (``trajledger.space`` metadata ``Dict`` or ``Tuple``)
    of space columns, nested at most `MAX_SPACE_DEPTH` deep. The field's metadata is input (a
    Parquet file's), so it is read as hostile.
    """
    return _space_problem(field, version, 0)


def _space_problem(field: pa.Field, version: str, depth: int) -> str | None:
    t = field.type
    want = _SPACE_TYPES if version == "3" else _SPACE_TYPES_V2
    if pa.types.is_list(t):
        if t.value_type not in TENSOR_VALUE_TYPES:
            return f"type {t}, want {want}"
        try:
            tensor_shape(field)
        except ValueError as e:
            return str(e)
        return None
    if version == "3" and pa.types.is_string(t):
        return None
    if version == "3" and pa.types.is_struct(t):
        kind = (field.metadata or {}).get(SPACE_KEY)
        names = [f.name for f in t]
        if kind not in (b"Dict", b"Tuple"):
            return f"a struct without {SPACE_KEY.decode()} metadata Dict or Tuple"
        if not names or len(set(names)) != len(names) or "" in names:
            return f"members {names}, want at least one, each named once"
        if kind == b"Tuple" and names != [str(i) for i in range(len(names))]:
            return f"Tuple members {names}, want 0, 1, ..."
        if depth >= MAX_SPACE_DEPTH:
            return f"nested over {MAX_SPACE_DEPTH} levels"
        for member in t:
            problem = _space_problem(member, version, depth + 1)
            if problem is not None:
                return f"member {member.name!r}: {problem}"
        return None
    return f"type {t}, want {want}"


def canonical_space_field(field: pa.Field) -> pa.Field:
    """A space column's field with every list's value field named ``item``, as the writers
    name it (Parquet readers name it ``element``): the stored Arrow schema, and so the file's
    bytes, do not depend on where the values were read from."""
    return field.with_type(_canonical(field.type))


def _canonical(t: pa.DataType) -> pa.DataType:
    if pa.types.is_list(t):
        return pa.list_(t.value_type)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_canonical(f.type)) for f in t])
    return t


def space_leaves(field: pa.Field, prefix: str | None = None) -> Iterator[tuple[str, pa.Field]]:
    """The tensors and strings of a space column, with their dotted names (``obs.pos``).

    Args:
        field: a valid space column (see `space_field_problem`).
        prefix: the name of ``field`` in the result; default its own name.
    """
    name = field.name if prefix is None else prefix
    if pa.types.is_struct(field.type):
        for member in field.type:
            yield from space_leaves(member, f"{name}.{member.name}")
    else:
        yield name, field


def with_columns(template: pa.Schema, fields: Sequence[pa.Field]) -> pa.Schema:
    """``template`` with some fields replaced (tensor columns with their value type and shape).

    Args:
        template: `STEP_SCHEMA` or `EPISODE_SCHEMA`.
        fields: fields replacing the template's field of the same name.

    Returns:
        The schema, with the template's metadata.
    """
    out = template  # (replaced by index: a list of the template's fields, each wrapped
    # anew, cost 0.1 ms a call, a few calls a batch at the gate: spd53)
    for field in fields:
        if (i := template.get_field_index(field.name)) >= 0:
            out = out.set(i, field)
    return out


def conforms(schema: pa.Schema, template: pa.Schema) -> bool:
    """Whether ``schema`` is ``template`` up to the value types and shapes of tensor columns.

    Nullability is not compared (it is a property of the values, checked by validation).
    """
    if schema.names != template.names:
        return False
    for f in template:
        got = schema.field(f.name)
        if f.name in TENSOR_COLUMNS:
            if pa.types.is_list(got.type):  # shape metadata is checked where it is read
                if got.type.value_type not in TENSOR_VALUE_TYPES:
                    return False
            elif space_field_problem(got, schema_version(template) or "3") is not None:
                return False
        elif got.type != f.type:
            return False
    return True


def parquet_float_paths(schema: pa.Schema) -> tuple[list[str], list[str]]:
    """Split a schema's Parquet leaf columns into float leaves and the others.

    Parquet names the values of a ``list`` column ``<name>.list.element``, the parts of a
    ``map`` column ``<name>.key_value.key`` / ``.value``. Float leaves are written with
    BYTE_STREAM_SPLIT (which compresses them better under zstd); the others with dictionary
    encoding.

    Args:
        schema: a schema whose columns are primitives, lists of primitives, maps or structs
            of those.

    Returns:
        ``(float_paths, other_paths)``, in column order.
    """
    floats: list[str] = []
    others: list[str] = []
    for field in schema:
        for path, leaf_type in _parquet_leaves(field.name, field.type):
            split = pa.types.is_float32(leaf_type) or pa.types.is_float64(leaf_type)
            (floats if split else others).append(path)
    return floats, others


def _parquet_leaves(path: str, t: pa.DataType) -> Iterator[tuple[str, pa.DataType]]:
    if pa.types.is_list(t):
        yield f"{path}.list.element", t.value_type
    elif pa.types.is_map(t):
        yield f"{path}.key_value.key", t.key_type
        yield f"{path}.key_value.value", t.item_type
    elif pa.types.is_struct(t):
        for member in t:
            yield from _parquet_leaves(f"{path}.{member.name}", member.type)
    else:
        yield path, t


_OTHER_NAMES: Final = {
    "observation": "obs", "observations": "obs", "state": "obs", "actions": "action",
    "rewards": "reward", "terminal": "terminated", "terminals": "terminated",
    "terminations": "terminated", "timeout": "truncated", "timeouts": "truncated",
    "truncations": "truncated", "t": "step", "timestep": "step", "episode": "episode_id",
    "infos": "info", "logprob": "action_logprob", "log_prob": "action_logprob",
    "logprobs": "action_logprob", "length": "num_steps", "episode_return": "return",
}
"""The schema's column for a name Gymnasium, Minari, D4RL or a trainer gives it."""


def meant_column(name: str, schema: pa.Schema) -> str:
    """``; did you mean 'obs'?`` for a column ``schema`` has not, naming the column of
    ``schema`` it is another name for (`_OTHER_NAMES`; ``done``: both flags) or, else, the
    closest one; ``''`` when none is close."""
    if name.lower() in ("done", "dones") and "terminated" in schema.names:
        return f"; did you mean 'terminated' and 'truncated'? ({name!r} is either: give both)"
    other = _OTHER_NAMES.get(name.lower())
    close = [other] if other in schema.names else difflib.get_close_matches(
        name, schema.names, 1, 0.75)
    return f"; did you mean {close[0]!r}?" if close else ""
