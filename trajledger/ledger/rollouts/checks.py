"""The checks of each row of a rollout table on its own, table-driven.

Scope: per kind of table (``steps``, ``episodes``), which columns must be finite numbers,
non-negative numbers, counts or lengths, valid UTF-8 strings of bounded size, JSON text, well
formed ``extras`` or judge scores, and tensors of bounded size and fixed shape without NaN
(`ROW_RULES`); `check_row_values` runs them over a batch's columns, reporting each offending
row; `check_nulls` reports nulls in required columns.
Non-scope: checks across rows (episode structure, unique ids: ``validate.py``), column types
(``validate.check_schema``).
Spec: ``schemas/rollout.v3.md`` section "Validity".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .arrays import bools as _bools
from .arrays import invalid_utf8_rows
from .arrays import numbers as _numbers
from .jsonl import FAST_BRACKETS
from .problems import ProblemCollector
from .schema import tensor_shape
from .typed_json import JSON_TEXT

__all__ = [
    "ROW_RULES",
    "RowRules",
    "check_nulls",
    "check_row_values",
    "shape_or_none",
    "value_at",
    "values_of",
]


def value_at(arr: pa.Array, i: int) -> object:
    """One value for a message; bytes when a string is not UTF-8 (reported on its own)."""
    try:
        return arr[i].as_py()
    except UnicodeDecodeError:
        return arr.view(pa.binary())[i].as_py()


def values_of(arr: pa.Array) -> list[Any]:
    """The values of an array, each as `value_at` gives it."""
    try:
        values: list[Any] = arr.to_pylist()
    except UnicodeDecodeError:
        values = [_decoded(v) for v in arr.view(pa.binary()).to_pylist()]
    return values


def _decoded(raw: bytes | None) -> object:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def check_nulls(
    cols: dict[str, pa.Array], required: Iterable[str], offset: int, c: ProblemCollector
) -> None:
    for name in required:
        arr = cols.get(name)
        if arr is not None and arr.null_count:
            rows = np.flatnonzero(_bools(arr.is_null()))
            c.add_rows(
                f"{name}:null",
                rows,
                offset,
                name,
                lambda i: "null, want a value (the column is required)",
            )


def _check_finite(
    cols: dict[str, pa.Array],
    name: str,
    offset: int,
    c: ProblemCollector,
    *,
    non_negative: bool = False,
) -> None:
    arr = cols.get(name)
    if arr is None or arr.null_count == len(arr):
        return
    values = _numbers(arr, 0.0)
    bad = ~np.isfinite(values)
    if non_negative:
        bad |= values < 0
    if bad.any():
        want = "a finite number >= 0" if non_negative else "a finite number"
        c.add_rows(
            f"{name}:not-finite",
            np.flatnonzero(bad),
            offset,
            name,
            lambda i: f"{name} is {float(values[i])!r}, want {want}",
        )


def _check_at_least(
    cols: dict[str, pa.Array], name: str, offset: int, c: ProblemCollector, *, minimum: int
) -> None:
    """An integer column's values are at least ``minimum`` (token counts >= 0, lengths >= 1)."""
    arr = cols.get(name)
    if arr is None or arr.null_count == len(arr):
        return
    values = _numbers(arr, minimum)
    bad = values < minimum
    if bad.any():
        c.add_rows(
            f"{name}:{'negative' if minimum == 0 else 'short'}",
            np.flatnonzero(bad),
            offset,
            name,
            lambda i: f"{name} is {int(values[i])}, want >= {minimum}",
        )


def _time(cols: dict[str, pa.Array], name: str, offset: int, c: ProblemCollector) -> None:
    """A time is within the years 1 to 9999 in UTC, as ISO 8601 text and Python's datetime
    hold them (rev43 finding 4: a Parquet time past them was recorded, JSON lines refused it,
    and `export --format jsonl` of its batch failed)."""
    arr = cols.get(name)
    if arr is None or arr.null_count == len(arr):
        return
    values = _numbers(arr.cast(pa.timestamp("us", tz="UTC"), safe=False).cast(pa.int64()), 0)
    bad = (values < _TIMES[0]) | (values > _TIMES[1])
    if bad.any():
        c.add_rows(f"{name}:range", np.flatnonzero(bad), offset, name, lambda i: (
            f"{name} is {int(values[i]):,} microseconds since the epoch, out of the range of "
            "times in UTC (years 1 to 9999)"))


_TIMES: Final = (-62_135_596_800_000_000, 253_402_300_800_000_000 - 1)
"""The first and last microseconds of the years 1 to 9999 (UTC), since the epoch."""

_NumberCheck = Callable[[dict[str, pa.Array], str, int, ProblemCollector], None]


def _finite(cols: dict[str, pa.Array], name: str, offset: int, c: ProblemCollector) -> None:
    _check_finite(cols, name, offset, c)


def _finite_non_negative(
    cols: dict[str, pa.Array], name: str, offset: int, c: ProblemCollector
) -> None:
    _check_finite(cols, name, offset, c, non_negative=True)


def _count(cols: dict[str, pa.Array], name: str, offset: int, c: ProblemCollector) -> None:
    _check_at_least(cols, name, offset, c, minimum=0)


def _length(cols: dict[str, pa.Array], name: str, offset: int, c: ProblemCollector) -> None:
    _check_at_least(cols, name, offset, c, minimum=1)


@dataclass(frozen=True)
class RowRules:
    """The checks of each row on its own for one kind of table, in the order they report.

    Attributes:
        numbers: number columns and the check of each.
        strings: string columns (UTF-8, at most ``max_field_bytes``).
        json: string columns that must hold JSON text.
        tensors: space columns (each tensor's size, shape, NaN, infinities too in
            ``action``; each string's UTF-8 and size; every member of a struct present).
    """

    numbers: tuple[tuple[str, _NumberCheck], ...]
    strings: tuple[str, ...]
    json: tuple[str, ...]
    tensors: tuple[str, ...]


ROW_RULES: Final = {
    "steps": RowRules(
        numbers=(
            ("reward", _finite),
            ("action_logprob", _finite),
            ("latency_ms", _finite_non_negative),
            ("cost_usd", _finite_non_negative),
            ("prompt_tokens", _count),
            ("completion_tokens", _count),
            ("safety_interventions", _count),
            ("discount", _finite_non_negative),
            ("timestamp", _time),
        ),
        strings=(
            "episode_id",
            "role",
            "content",
            "reasoning_content",
            "tool_calls",
            "tool_results",
            "model_id",
            "info",
        ),
        json=("tool_calls", "tool_results", "info"),
        tensors=("obs", "action"),
    ),
    "episodes": RowRules(
        numbers=(("return", _finite), ("cost_usd", _finite_non_negative), ("num_steps", _length)),
        strings=(
            "episode_id",
            "task_id",
            "group_id",
            "label",
            "env_version",
            "policy_version",
            "termination_reason",
            "language",
            "task_type",
            "reset_info",
        ),
        json=("reset_info",),
        tensors=("final_obs",),
    ),
}
"""Per kind of table, what `StreamValidator` checks of each row on its own."""


def _each_column(
    cols: dict[str, pa.Array], names: Iterable[str], check: Callable[[pa.Array, str], None]
) -> None:
    """Run ``check(array, name)`` on each named column present with at least one value."""
    for name in names:
        arr = cols.get(name)
        if arr is not None and arr.null_count < len(arr):
            check(arr, name)


def _check_string_column(
    arr: pa.Array, name: str, offset: int, c: ProblemCollector, max_bytes: int
) -> None:
    rows = invalid_utf8_rows(arr)
    c.add_rows(f"{name}:utf8", rows, offset, name, lambda i: "value is not valid UTF-8")
    lengths = _numbers(pc.binary_length(arr), 0)
    big = np.flatnonzero(lengths > max_bytes)
    c.add_rows(
        f"{name}:size",
        big,
        offset,
        name,
        lambda i: f"value has {int(lengths[i])} bytes, over the limit of {max_bytes}",
    )


def _check_json_column(arr: pa.Array, name: str, offset: int, c: ProblemCollector) -> None:
    valid = _bools(arr.is_valid())
    valid[invalid_utf8_rows(arr)] = False  # reported as not UTF-8; it cannot be decoded
    rows = np.flatnonzero(valid)
    errors: dict[int, str] = {}
    for i, text in zip(rows.tolist(), arr.filter(pa.array(valid)).to_pylist(), strict=True):
        if _proved_json_text(text):
            continue
        error = _json_error(text)
        if error is not None:
            errors[i] = error
    c.add_rows(
        f"{name}:json",
        np.asarray(list(errors), dtype=np.int64),
        offset,
        name,
        lambda i: f"value is not valid JSON: {errors[i]}",
    )


_MSGSPEC_JSON: Final = msgspec.json.Decoder()


def _proved_json_text(text: str) -> bool:
    """Whether ``text`` is proved JSON text as `_json_error` judges it (`JSON_TEXT` decodes
    it), by msgspec in C: a text msgspec decodes, with at most ``jsonl.FAST_BRACKETS``
    opening brackets (so neither decoder nears the recursion limit). msgspec refuses
    everything `JSON_TEXT` refuses (NaN and Infinity, trailing text, control characters in
    strings, integers past 4,300 digits: see ``jsonl.fast_object``); what it refuses that
    `JSON_TEXT` takes (a lone surrogate escape, ``1e400``) is not proved, and `_json_error`
    decides it. A repeated key, which msgspec takes silently, `JSON_TEXT` takes too. About a
    quarter of the time of decoding with `JSON_TEXT` (tested against it:
    tests/unit/ledger/test_rollout_validate.py)."""
    if text.count("[") + text.count("{") > FAST_BRACKETS:
        return False
    try:
        _MSGSPEC_JSON.decode(text)
    except (msgspec.DecodeError, RecursionError, UnicodeEncodeError):  # (a lone surrogate)
        return False
    return True


def _json_error(text: str) -> str | None:
    """Why ``text`` is not JSON text (NaN and Infinity are not JSON), or None."""
    try:
        JSON_TEXT.decode(text)
    except ValueError as e:
        return str(e)
    except RecursionError:
        return "nested too deeply"
    return None


def _repeated_key_rows(keys: pa.Array, parents: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The rows of a map column (each entry's row in ``parents``) that repeat a key."""
    if not len(keys):
        return np.zeros(0, dtype=np.int64)
    codes = _numbers(keys.dictionary_encode().indices, 0).astype(np.int64)
    pair = parents.astype(np.int64) * (int(codes.max()) + 1) + codes
    _, first_idx, counts = np.unique(pair, return_index=True, return_counts=True)
    out: npt.NDArray[Any] = np.unique(parents[first_idx[counts > 1]])
    return out


def _check_scores(scores: pa.MapArray, name: str, off: int, c: ProblemCollector) -> None:
    """Judge scores finite, keys unique."""
    offsets = _numbers(scores.offsets, 0).astype(np.int64)
    start = int(offsets[0])
    values = _numbers(scores.items.slice(start, int(offsets[-1]) - start), 0.0)
    # Map each score to its row: repeat each row index by its number of entries.
    parents = np.repeat(np.arange(len(scores)), np.diff(offsets))
    c.add_rows(
        f"{name}:not-finite",
        np.unique(parents[~np.isfinite(values)]),
        off,
        name,
        lambda i: f"{name} {value_at(scores, i)!r} holds a non-finite score, want finite numbers",
    )
    keys = scores.keys.slice(start, int(offsets[-1]) - start)
    c.add_rows(
        f"{name}:duplicate-key",
        _repeated_key_rows(keys, parents),
        off,
        name,
        lambda i: f"{name} {value_at(scores, i)!r} repeats a key, want each key once",
    )


def _check_tensor_column(
    arr: pa.Array,
    name: str,
    offset: int,
    c: ProblemCollector,
    max_bytes: int,
    shape: tuple[int, ...] | None,
) -> None:
    width = max(1, arr.type.value_type.bit_width // 8)
    lengths = _numbers(pc.list_value_length(arr), 0)
    big = np.flatnonzero(lengths * width > max_bytes)
    c.add_rows(
        f"{name}:size",
        big,
        offset,
        name,
        lambda i: (
            f"tensor of {int(lengths[i])} {arr.type.value_type} ({int(lengths[i]) * width} bytes)"
            f" is over the limit of {max_bytes} bytes"
        ),
    )
    if shape is not None:
        size = int(np.prod(shape, dtype=np.int64))
        wrong = np.flatnonzero(_bools(arr.is_valid()) & (lengths != size))
        c.add_rows(
            f"{name}:shape",
            wrong,
            offset,
            name,
            lambda i: f"{int(lengths[i])} values, the shape {list(shape)} holds {size}",
        )
    if not pa.types.is_floating(arr.type.value_type):
        return
    # list_flatten skips null vectors; a null value inside a vector is not a number to judge.
    # NaN is never data. Infinity is refused in actions, but observations may hold it (a
    # range sensor that saw nothing), as Gymnasium's unbounded Box spaces allow.
    raw = _numbers(pc.list_flatten(arr), 0.0)
    action = name.partition(".")[0] == "action"
    # One sum in the values' own type first: a NaN anywhere makes it NaN, an infinity NaN or
    # infinite; only a sum that says so (or finite values overflowing it) looks at each value.
    with np.errstate(over="ignore", invalid="ignore"):
        total = raw.sum()
    if np.isfinite(total) or not (action or np.isnan(total)):
        return
    values = np.asarray(raw, dtype=np.float64)
    bad = ~np.isfinite(values) if action else np.isnan(values)
    if bad.any():
        flat = np.flatnonzero(bad)
        owners = _numbers(pc.list_parent_indices(arr), 0).astype(np.int64)[flat]
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)

        def message(i: int) -> str:
            at = int(flat[np.searchsorted(owners, i)])  # the row's first non-finite value
            want = "a finite number" if action else "a number"
            return f"{name}[{at - int(starts[i])}] is {float(values[at])!r}, want {want}"

        c.add_rows(f"{name}:not-finite", np.unique(owners), offset, name, message)


def _check_extras(arr: pa.MapArray, name: str, offset: int, c: ProblemCollector) -> None:
    """Keys unique and non-empty, values JSON text (typed JSON)."""
    if arr.null_count == len(arr):
        return
    offsets = _numbers(arr.offsets, 0).astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    parents = np.repeat(np.arange(len(arr)), np.diff(offsets))
    keys = arr.keys.slice(start, end - start)
    values = arr.items.slice(start, end - start)
    null_keys = np.flatnonzero(_bools(keys.is_null()) | _bools(pc.equal(keys, "")))
    c.add_rows(
        f"{name}:key",
        np.unique(parents[null_keys]),
        offset,
        name,
        lambda i: f"{name} has an empty or null key",
    )
    c.add_rows(
        f"{name}:duplicate-key",
        _repeated_key_rows(keys, parents),
        offset,
        name,
        lambda i: f"{name} repeats a key, want each key once",
    )
    errors: dict[int, str] = {}
    for k, text in enumerate(values.to_pylist()):
        row = int(parents[k])
        if row in errors:
            continue
        if text is None:
            errors[row] = f"{name} value of {keys[k].as_py()!r} is null, want JSON text"
            continue
        error = _json_error(text)
        if error == "nested too deeply":
            errors[row] = f"{name} value of {keys[k].as_py()!r} is {error}"
        elif error is not None:
            errors[row] = f"{name} value of {keys[k].as_py()!r} is not valid JSON: {error}"
    c.add_rows(
        f"{name}:json",
        np.asarray(sorted(errors), dtype=np.int64),
        offset,
        name,
        lambda i: errors[i],
    )


def shape_or_none(field: pa.Field) -> tuple[int, ...] | None:
    try:
        return tensor_shape(field)
    except ValueError:
        return None  # reported by check_schema


def check_row_values(
    rules: RowRules,
    schema: pa.Schema,
    cols: dict[str, pa.Array],
    offset: int,
    c: ProblemCollector,
    *,
    max_field_bytes: int,
    max_tensor_bytes: int,
) -> None:
    """Run every check of ``rules`` on the columns present, in the order they report.

    Args:
        rules: `ROWROW_RULES` of the table.
        schema: the batch's schema (the tensor fields' shapes).
        cols: the batch's columns by name; absent columns are not checked.
        offset: row number of the batch's first row in the whole stream.
        c: where problems go.
        max_field_bytes: largest accepted string field.
        max_tensor_bytes: largest accepted tensor value.
    """
    for name, check in rules.numbers:
        check(cols, name, offset, c)
    _each_column(cols, ("judge_scores",), lambda a, n: _check_scores(a, n, offset, c))
    m = max_field_bytes
    _each_column(cols, rules.strings, lambda a, n: _check_string_column(a, n, offset, c, m))
    _each_column(cols, rules.json, lambda a, n: _check_json_column(a, n, offset, c))
    _each_column(cols, ("extras",), lambda a, n: _check_extras(a, n, offset, c))
    _each_column(
        cols,
        rules.tensors,
        lambda a, n: _check_space_column(
            a, schema.field(n), n, offset, c, max_field_bytes, max_tensor_bytes
        ),
    )


def _check_space_column(
    arr: pa.Array,
    field: pa.Field,
    name: str,
    offset: int,
    c: ProblemCollector,
    max_field_bytes: int,
    max_tensor_bytes: int,
) -> None:
    """A space column: each tensor and string in it, and every member of a present struct."""
    if pa.types.is_struct(arr.type):
        present = _bools(arr.is_valid())
        for member, values in zip(field.type, arr.flatten(), strict=True):
            where = f"{name}.{member.name}"
            missing = np.flatnonzero(present & ~_bools(values.is_valid()))
            message = _same_message(f"{where} is null, want a value (a member of the space)")
            c.add_rows(f"{where}:null", missing, offset, where, message)
            if values.null_count < len(values):
                _check_space_column(
                    values, member, where, offset, c, max_field_bytes, max_tensor_bytes
                )
    elif pa.types.is_list(arr.type):
        _check_tensor_column(arr, name, offset, c, max_tensor_bytes, shape_or_none(field))
    else:
        _check_string_column(arr, name, offset, c, max_field_bytes)


def _same_message(text: str) -> Callable[[int], str]:
    """A message builder for `ProblemCollector.add_rows` that says the same for every row."""
    return lambda i: text
