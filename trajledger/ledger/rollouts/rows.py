"""Python rows (one mapping per step or episode) into rollout tables, for the Python API.

Scope: `rows_to_table` builds a step table and `rows_to_episodes` episode attributes from
Python values (numpy arrays keep their dtype and shape), naming each row and column that does
not fit; `rows_to_columns` is the shared column builder (rollout JSON lines use it too).
Non-scope: normalising the result (``normalise.py``, which these call) and validating it.
Spec: ``schemas/rollout.v3.md``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from . import typed_json
from .fields import to_utc
from .normalise import normalise_episodes, normalise_steps
from .problems import ProblemCollector, RolloutValidationError
from .schema import (
    EPISODE_ATTR_SCHEMA,
    EXTRAS_TYPE,
    STEP_SCHEMA,
    TENSOR_COLUMNS,
    TENSOR_VALUE_TYPES,
    VECTOR_TYPE,
    meant_column,
    tensor_field,
)
from .space_values import space_column, stack_rows

__all__ = ["rows_to_columns", "rows_to_episodes", "rows_to_table"]


def _tensor_from_values(
    values: list[Any], name: str, c: ProblemCollector
) -> tuple[pa.Array, pa.Field] | None:
    """A tensor column from Python values, and its field.

    Numpy arrays keep their dtype and shape (all must agree); lists and numbers become the
    type pyarrow infers (float64, int64 or bool) with no fixed shape, and so do tuples of
    numbers; dicts, other tuples and strings (Dict, Tuple and Text values) become a space column
    (``space_values.py``).
    """
    present = [v for v in values if v is not None]
    if present and _space_value(present[0]):
        # A Dict, Tuple or Text value: a space column, each member exactly of its own type.
        if len(present) < len(values):
            c.add(f"{name}:null", "null among Dict, Tuple or Text values, want one a row",
                  column=name)  # fmt: skip
            return None
        try:
            return space_column(stack_rows(values, name), len(values), name)
        except (ValueError, pa.ArrowException) as e:
            c.add(f"{name}:type", str(e), column=name)
            return None
    if present and all(isinstance(v, np.ndarray | np.generic) for v in present):
        first = np.asarray(present[0])
        bad = [
            i
            for i, v in enumerate(values)
            if v is not None and (np.asarray(v).dtype != first.dtype or np.shape(v) != first.shape)
        ]
        for i in bad[:20]:
            v = np.asarray(values[i])
            c.add(
                f"{name}:type",
                f"array of dtype {v.dtype} and shape {list(v.shape)}, the first is "
                f"{first.dtype} of shape {list(first.shape)}; a batch holds one kind",
                row=i,
                column=name,
            )
        try:
            value_type = pa.from_numpy_dtype(first.dtype)
        except (pa.ArrowNotImplementedError, TypeError):
            value_type = None
        if value_type not in TENSOR_VALUE_TYPES:
            c.add(f"{name}:type", f"numpy dtype {first.dtype} is not a number type", column=name)
            return None
        if bad:
            return None
        flat = np.concatenate([np.asarray(v).reshape(-1) for v in present])
        valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
        offsets = np.zeros(len(values) + 1, dtype=np.int64)
        np.cumsum(valid * first.size, out=offsets[1:])
        arr = pa.ListArray.from_arrays(
            pa.array(offsets.astype(np.int32)),
            pa.array(flat, type=value_type),
            type=pa.list_(value_type),
            mask=None if valid.all() else pa.array(~valid),
        )
        return arr, tensor_field(name, value_type, first.shape)
    converted: list[Any] = []
    for i, v in enumerate(values):
        if v is None or isinstance(v, list | tuple):
            converted.append(v)
        elif isinstance(v, np.ndarray | np.generic):
            converted.append(np.asarray(v).reshape(-1).tolist())
        elif isinstance(v, int | float | bool):
            converted.append([v])
        else:
            c.add(f"{name}:type", f"{type(v).__name__}, want a list of numbers or a number",
                  row=i, column=name)  # fmt: skip
            converted.append(None)
    try:
        out = pa.array(converted)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
        c.add(f"{name}:type", f"values are not lists of numbers: {e}", column=name)
        return None
    if pa.types.is_null(out.type) or (
        pa.types.is_list(out.type) and pa.types.is_null(out.type.value_type)
    ):
        return pa.nulls(len(values), VECTOR_TYPE), tensor_field(name, VECTOR_TYPE.value_type)
    if not pa.types.is_list(out.type) or out.type.value_type not in TENSOR_VALUE_TYPES:
        c.add(f"{name}:type", f"values are {out.type}, want lists of numbers", column=name)
        return None
    return out, tensor_field(name, out.type.value_type)


def _space_value(v: object) -> bool:
    """A Dict, Tuple or Text value; a tuple of plain numbers is a vector, as a list is."""
    if isinstance(v, tuple):
        return not all(isinstance(x, int | float) for x in v)
    return isinstance(v, Mapping | str)


def _column_from_values(values: list[Any], field: pa.Field, c: ProblemCollector) -> pa.Array | None:
    """Build one column from Python values, naming each row that does not fit."""
    name = field.name
    typ = field.type
    if typ == EXTRAS_TYPE:
        out: list[Any] = []
        for i, v in enumerate(values):
            if v is None:
                out.append(None)
            elif not isinstance(v, Mapping):
                c.add(f"{name}:type", f"{type(v).__name__}, want a dict", row=i, column=name)
                out.append(None)
            else:
                try:
                    out.append([(k, typed_json.dumps(x)) for k, x in v.items() if x is not None])
                except typed_json.TypedJSONError as e:
                    c.add(f"{name}:typed", str(e), row=i, column=name)
                    out.append(None)
        values = out
    elif name in ("info", "reset_info"):
        encoded: list[Any] = []
        for i, v in enumerate(values):
            try:
                encoded.append(v if v is None or isinstance(v, str) else typed_json.dumps(v))
            except typed_json.TypedJSONError as e:
                c.add(f"{name}:typed", str(e), row=i, column=name)
                encoded.append(None)
        values = encoded
    elif pa.types.is_map(typ):
        values = [v if v is None or not isinstance(v, Mapping) else list(v.items()) for v in values]
    elif name == "episode_id":
        values = [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in values]
    elif pa.types.is_timestamp(typ):
        utc: list[Any] = []
        for i, v in enumerate(values):
            try:  # an ISO 8601 string as the schema says (what `export --format jsonl` writes)
                utc.append(to_utc(dt.datetime.fromisoformat(v) if isinstance(v, str) else v)
                           if isinstance(v, dt.datetime | str) else v)
            except ValueError:
                c.add(f"{name}:type", f"{v!r} is not an ISO 8601 time", row=i, column=name)
                utc.append(None)
            except OverflowError:  # before year 1 or after 9999 once in UTC
                message = f"{v} is out of the range of times in UTC (years 1 to 9999)"
                c.add(f"{name}:range", message, row=i, column=name)
                utc.append(None)
        values = utc
    try:
        return pa.array(values, type=typ, from_pandas=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
        whole = str(e)
    found = False
    for i, v in enumerate(values):
        try:
            pa.array([v], type=typ)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            found = True
            c.add(f"{name}:type", f"{v!r} is not a valid {field.type} value", row=i, column=name)
    if not found:  # only the combination fails; name the column
        c.add(f"{name}:type", f"values do not fit {field.type}: {whole}", column=name)
    return None


def rows_to_columns(
    rows: Sequence[Mapping[str, Any]], schema: pa.Schema, what: str
) -> tuple[list[pa.Field], list[pa.Array | None], ProblemCollector]:
    """The columns of ``schema`` that the rows name, built from their values.

    Returns:
        The fields (tensor fields with the type and shape of their values), the arrays (None
        for a column that failed) and the problems found (an unknown key, a value that does
        not fit), each with its row.
    """
    c = ProblemCollector()
    seen: set[str] = set()
    for i, row in enumerate(rows):
        for key in row:
            if key not in seen:
                seen.add(key)
                if schema.get_field_index(key) < 0:
                    c.add(
                        f"unknown:{key}",
                        f"unknown {what} field: rollout schema v3 has no such column"
                        f"{meant_column(key, schema)} (keep other fields in 'extras')",
                        row=i,
                        column=key,
                    )
    fields: list[pa.Field] = []
    arrays: list[pa.Array | None] = []
    for f in schema:
        if f.name not in seen:
            continue
        values = [r.get(f.name) for r in rows]
        if f.name in TENSOR_COLUMNS:
            got = _tensor_from_values(values, f.name, c)
            arrays.append(None if got is None else got[0])
            fields.append(f if got is None else got[1])
        else:
            arrays.append(_column_from_values(values, f, c))
            fields.append(f)
    return fields, arrays, c


def rows_to_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Build a step table in `STEP_SCHEMA` from Python dicts, one per step.

    Keys are column names of the step schema; absent keys are null. ``obs``/``action`` may be
    numpy arrays (dtype and shape kept; all of one kind), or lists, tuples or numbers;
    ``timestamp`` a datetime (naive means UTC) or an ISO 8601 string; ``info`` any value typed
    JSON holds (encoded); ``extras`` a dict. Then `normalise_steps` applies.

    Args:
        rows: one mapping per step, in step order.

    Returns:
        The steps in `STEP_SCHEMA`.

    Raises:
        RolloutValidationError: a key is unknown, a value does not fit its column (naming the
            row and column), or a required column is missing.
    """
    fields, arrays, c = rows_to_columns(rows, STEP_SCHEMA, "step")
    problems = c.problems()
    if problems:
        raise RolloutValidationError("rows", problems)
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields)) if fields else pa.table({})
    if not rows:
        return STEP_SCHEMA.empty_table()
    return normalise_steps(table)


def rows_to_episodes(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Build episode attributes in `EPISODE_ATTR_SCHEMA` from Python dicts, one per episode.

    Keys are column names of the episode schema; ``judge_scores`` is a dict of names to
    numbers, ``extras`` a dict, ``final_obs`` a numpy array. Absent keys are null; ``return``
    and ``num_steps`` are usually left out and derived from the steps.

    Args:
        rows: one mapping per episode.

    Returns:
        The attributes in `EPISODE_ATTR_SCHEMA`.

    Raises:
        RolloutValidationError: a key is unknown or a value does not fit its column.
    """
    fields, arrays, c = rows_to_columns(rows, EPISODE_ATTR_SCHEMA, "episode")
    problems = c.problems()
    if problems:
        raise RolloutValidationError("episode rows", problems)
    if not rows:
        return EPISODE_ATTR_SCHEMA.empty_table()
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    return normalise_episodes(table)
