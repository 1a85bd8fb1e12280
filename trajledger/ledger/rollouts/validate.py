"""Validation of rollout tables against schema v2 (and v1, for batches recorded as v1).

Scope: checking a step table or an episode table (whole, or streamed batch by batch) and
reporting every problem with its row and column: missing required columns, wrong types, nulls
in required columns, non-finite rewards and obs/action values, tensors of the wrong size,
episodes with no final step, step gaps and repeats, duplicate episode ids, invalid UTF-8,
oversized fields, malformed JSON in the JSON columns and in ``extras``.
Non-scope: converting inputs into the schema (``convert.py``) and writing Parquet
(``parquet_io.py``). Validation never changes data.
Spec: ``schemas/rollout.v2.md`` section "Validity" (``rollout.v1.md`` for v1 tables).

Checks are vectorised with numpy and pyarrow.compute; Python loops run once per episode (for
duplicate ids) or once per reported problem, never once per step. Each kind of problem lists
at most `ROWS_PER_KIND` rows, then one summary line with the count of the rest, so a broken
file of a billion rows yields a report of bounded size.

Row numbers count from 0 across the whole table (or the whole stream of batches). Line numbers
of text inputs count from 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from trajledger.verify.errors import FormatError

from .schema import (
    EPISODE_SCHEMA,
    EPISODE_SCHEMA_V1,
    ROLLOUT_SCHEMA_VERSION,
    STEP_SCHEMA,
    STEP_SCHEMA_V1,
    TENSOR_COLUMNS,
    TENSOR_VALUE_TYPES,
    schema_version,
    tensor_shape,
)

if TYPE_CHECKING:
    BoolVec = npt.NDArray[np.bool_]
    IntVec = npt.NDArray[np.int64]

__all__ = [
    "DEFAULT_MAX_FIELD_BYTES",
    "DEFAULT_MAX_TENSOR_BYTES",
    "MAX_LISTED_PROBLEMS",
    "ROWS_PER_KIND",
    "EpisodeStreamValidator",
    "Problem",
    "ProblemCollector",
    "RolloutValidationError",
    "StepStreamValidator",
    "ValidationReport",
    "check_schema",
    "invalid_utf8_rows",
    "validate_episodes",
    "validate_steps",
]

DEFAULT_MAX_FIELD_BYTES: Final = 1 << 20
"""Largest accepted string field, in bytes."""

DEFAULT_MAX_TENSOR_BYTES: Final = 64 << 20
"""Largest accepted tensor value (one observation or action), in bytes: a 4096x4096x4 uint8
image fits, so do real image observations (a 512x512x3 frame is 768 KiB)."""

ROWS_PER_KIND: Final = 20
"""Rows listed for each kind of problem; the rest are counted in one summary problem."""

MAX_LISTED_PROBLEMS: Final = 50
"""Problems listed in a `RolloutValidationError` message; the rest are counted."""

_STRING_STEP_COLUMNS: Final = (
    "episode_id",
    "role",
    "content",
    "reasoning_content",
    "tool_calls",
    "tool_results",
    "model_id",
    "info",
)
_JSON_STEP_COLUMNS: Final = ("tool_calls", "tool_results", "info")
_STRING_EPISODE_COLUMNS: Final = (
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
)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input.

    Attributes:
        row: 0-based row of the table (or of the stream of batches), or None when the problem
            concerns a whole column, table or line.
        column: the column (or JSON field path) concerned, or None.
        message: what is wrong: observed against expected.
        line: 1-based line of a text input (JSONL), or None.
    """

    row: int | None
    column: str | None
    message: str
    line: int | None = None

    def __str__(self) -> str:
        """Render as ``line L, row R, column 'C': message``, leaving out what is unknown."""
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.column is not None:
            where.append(f"column {self.column!r}")
        return f"{', '.join(where)}: {self.message}" if where else self.message


class RolloutValidationError(FormatError):
    """A rollout input or table breaks the rollout schema.

    The message has a summary line, then one line per problem (at most `MAX_LISTED_PROBLEMS`,
    then a count of the rest).

    Attributes:
        subject: what was validated (a path, "steps" or "episodes").
        problems: every problem found, in the order found.
    """

    def __init__(self, subject: str, problems: Sequence[Problem]) -> None:
        """Build the message from the problems.

        Args:
            subject: what was validated.
            problems: every problem found.
        """
        self.subject = subject
        self.problems: tuple[Problem, ...] = tuple(problems)
        n = len(self.problems)
        lines = [
            f"{subject}: {n} problem{'s' if n != 1 else ''} "
            f"(rollout schema v{ROLLOUT_SCHEMA_VERSION})"
        ]
        lines.extend(f"  {p}" for p in self.problems[:MAX_LISTED_PROBLEMS])
        if n > MAX_LISTED_PROBLEMS:
            lines.append(f"  ... and {n - MAX_LISTED_PROBLEMS} more problems")
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class ValidationReport:
    """The outcome of validating one table or stream.

    Attributes:
        subject: what was validated, for messages.
        problems: every problem found; empty when the input is valid.
    """

    subject: str
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    def raise_if_failed(self) -> None:
        """Raise when any problem was found.

        Raises:
            RolloutValidationError: listing the problems.
        """
        if self.problems:
            raise RolloutValidationError(self.subject, self.problems)


class ProblemCollector:
    """Accumulates problems, listing at most ``rows_per_kind`` rows of each kind.

    A *kind* is a short key such as ``"reward:not-finite"``; its first ``rows_per_kind``
    occurrences are kept as problems, the others only counted. `problems` appends one summary
    problem per kind that overflowed.
    """

    def __init__(self, rows_per_kind: int = ROWS_PER_KIND) -> None:
        """Start empty.

        Args:
            rows_per_kind: occurrences of one kind listed before the rest are only counted.
        """
        self._rows_per_kind = rows_per_kind
        self._problems: list[Problem] = []
        self._counts: dict[str, int] = {}
        self._describe: dict[str, tuple[str | None, str]] = {}

    @property
    def count(self) -> int:
        """Number of problems seen, listed or not."""
        return sum(self._counts.values())

    def seen(self, kind: str) -> bool:
        """Whether a problem of this kind was recorded."""
        return kind in self._counts

    def add(
        self,
        kind: str,
        message: str,
        *,
        row: int | None = None,
        column: str | None = None,
        line: int | None = None,
    ) -> None:
        """Record one occurrence of a problem.

        Args:
            kind: the key under which occurrences are capped.
            message: what is wrong.
            row: the row, if any.
            column: the column or field, if any.
            line: the line of a text input, if any.
        """
        seen = self._counts.get(kind, 0)
        self._counts[kind] = seen + 1
        if seen < self._rows_per_kind:
            self._problems.append(Problem(row, column, message, line))
        else:
            self._describe.setdefault(kind, (column, message))

    def add_rows(
        self,
        kind: str,
        rows: npt.NDArray[np.intp] | npt.NDArray[np.int64],
        offset: int,
        column: str | None,
        message: Callable[[int], str],
    ) -> None:
        """Record a vector of offending rows, building messages only for those listed.

        Args:
            kind: the key under which occurrences are capped.
            rows: offending row indices within the current batch.
            offset: row number of the batch's first row in the whole stream.
            column: the column concerned.
            message: builds the message for a batch-relative row index.
        """
        n = len(rows)
        if not n:
            return
        seen = self._counts.get(kind, 0)
        room = max(0, self._rows_per_kind - seen)
        for i in rows[:room].tolist():
            self._problems.append(Problem(offset + i, column, message(i)))
        self._counts[kind] = seen + n
        if n > room:
            self._describe.setdefault(kind, (column, message(int(rows[room]))))

    def problems(self) -> tuple[Problem, ...]:
        """Return the listed problems, then one summary per kind that overflowed."""
        out = list(self._problems)
        for kind, (column, example) in self._describe.items():
            extra = self._counts[kind] - self._rows_per_kind
            out.append(Problem(None, column, f"{extra} more like {example!r} not listed ({kind})"))
        return tuple(out)


def check_schema(
    schema: pa.Schema,
    expected: pa.Schema,
    collector: ProblemCollector,
    *,
    allow_missing_optional: bool = True,
) -> frozenset[str]:
    """Compare a table's column names and types with a schema.

    A tensor column (``obs``, ``action``, ``final_obs``) matches with any value type of
    `TENSOR_VALUE_TYPES`, and its shape metadata must be well formed.

    Args:
        schema: the schema of the table under test.
        expected: a step or episode schema of v2 or v1.
        collector: receives one problem per missing, unknown, repeated or mistyped column.
        allow_missing_optional: when True, a missing nullable column counts as all null.

    Returns:
        The names of the columns whose type matches, which later checks may read.
    """
    usable: set[str] = set()
    names = schema.names
    for name in sorted({n for n in names if names.count(n) > 1}):
        collector.add("schema", f"column appears {names.count(name)} times, want once", column=name)
    for field in expected:
        if field.name not in names:
            if not field.nullable:
                collector.add("schema", "missing required column", column=field.name)
            elif not allow_missing_optional:
                collector.add("schema", "missing column", column=field.name)
            continue
        if names.count(field.name) > 1:
            continue
        got_field = schema.field(field.name)
        got = got_field.type
        if field.name in TENSOR_COLUMNS:
            if not (pa.types.is_list(got) and got.value_type in TENSOR_VALUE_TYPES):
                collector.add(
                    "schema",
                    f"type {got}, want list<T> for a number or boolean type T",
                    column=field.name,
                )
                continue
            try:
                tensor_shape(got_field)
            except ValueError as e:
                collector.add("schema", str(e), column=field.name)
                continue
            usable.add(field.name)
        elif got != field.type:
            collector.add("schema", f"type {got}, want {field.type}", column=field.name)
        else:
            usable.add(field.name)
    version = (expected.metadata or {}).get(b"trajledger.rollout.schema", b"/?").split(b"/")[-1]
    for name in names:
        if expected.get_field_index(name) < 0:
            collector.add(
                "schema",
                f"unknown column: rollout schema v{version.decode()} has no such column",
                column=name,
            )
    return frozenset(usable)


def _required(schema: pa.Schema) -> tuple[str, ...]:
    return tuple(f.name for f in schema if not f.nullable)


def _bools(arr: pa.Array, null_as: bool = False) -> BoolVec:
    filled = pc.fill_null(arr, null_as) if arr.null_count else arr
    out: BoolVec = filled.to_numpy(zero_copy_only=False)
    return out


def _numbers(arr: pa.Array, null_as: float | int = 0) -> npt.NDArray[Any]:
    filled = pc.fill_null(arr, pa.scalar(null_as, arr.type)) if arr.null_count else arr
    out: npt.NDArray[Any] = filled.to_numpy(zero_copy_only=False)
    return out


def _value(arr: pa.Array, i: int) -> object:
    """One value for a message; bytes when a string is not UTF-8 (reported on its own)."""
    try:
        return arr[i].as_py()
    except UnicodeDecodeError:
        return arr.view(pa.binary())[i].as_py()


def _pylist(arr: pa.Array) -> list[Any]:
    """The values of an array, each as `_value` gives it."""
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


def _check_nulls(
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


def _check_non_negative_int(
    cols: dict[str, pa.Array], name: str, offset: int, c: ProblemCollector
) -> None:
    arr = cols.get(name)
    if arr is None or arr.null_count == len(arr):
        return
    values = _numbers(arr, 0)
    bad = values < 0
    if bad.any():
        c.add_rows(
            f"{name}:negative",
            np.flatnonzero(bad),
            offset,
            name,
            lambda i: f"{name} is {int(values[i])}, want >= 0",
        )


def invalid_utf8_rows(arr: pa.Array) -> IntVec:
    """Find the rows of a string array whose bytes are not UTF-8.

    pyarrow reads Parquet and Arrow string columns without checking their bytes, and decoding
    such a value (``as_py``) raises, so code that reads values checks them with this first.

    Args:
        arr: a string array.

    Returns:
        The offending row indices, ascending; empty when every value is UTF-8.
    """
    try:
        arr.validate(full=True)  # checks the UTF-8 of every value, in C
    except pa.ArrowInvalid:
        pass
    else:
        return np.zeros(0, dtype=np.int64)
    bad = []
    for i, value in enumerate(arr.view(pa.binary()).to_pylist()):
        if value is None:
            continue
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(i)
    return np.asarray(bad, dtype=np.int64)


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
        try:
            json.loads(text, parse_constant=_refuse_constant)
        except ValueError as e:
            errors[i] = str(e)
        except RecursionError:
            errors[i] = "nested too deeply"
    c.add_rows(
        f"{name}:json",
        np.asarray(list(errors), dtype=np.int64),
        offset,
        name,
        lambda i: f"value is not valid JSON: {errors[i]}",
    )


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


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
    values = np.asarray(_numbers(pc.list_flatten(arr), 0.0), dtype=np.float64)
    bad = np.isnan(values) if name != "action" else ~np.isfinite(values)
    if bad.any():
        flat = np.flatnonzero(bad)
        owners = _numbers(pc.list_parent_indices(arr), 0).astype(np.int64)[flat]
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)

        def message(i: int) -> str:
            at = int(flat[np.searchsorted(owners, i)])  # the row's first non-finite value
            want = "a finite number" if name == "action" else "a number"
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
    if len(keys):
        codes = _numbers(keys.dictionary_encode().indices, 0).astype(np.int64)
        pair = parents.astype(np.int64) * (int(codes.max()) + 1) + codes
        _, first_idx, counts = np.unique(pair, return_index=True, return_counts=True)
        c.add_rows(
            f"{name}:duplicate-key",
            np.unique(parents[first_idx[counts > 1]]),
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
        try:
            json.loads(text, parse_constant=_refuse_constant)
        except ValueError as e:
            errors[row] = f"{name} value of {keys[k].as_py()!r} is not valid JSON: {e}"
        except RecursionError:
            errors[row] = f"{name} value of {keys[k].as_py()!r} is nested too deeply"
    c.add_rows(
        f"{name}:json",
        np.asarray(sorted(errors), dtype=np.int64),
        offset,
        name,
        lambda i: errors[i],
    )


class StepStreamValidator:
    """Validates a step table delivered as a stream of record batches.

    State carried from one batch to the next: the row offset, the last row's episode id, step
    and terminal flags (so step continuity and episode completion are checked across batch
    boundaries), and the set of episode ids seen (so an episode that reappears after another
    one is reported). Memory grows with the number of episodes, not steps. Rows that could not
    be converted are passed over with `skip`.

    Each batch must hold columns of the schema's types; `validate_steps` checks the schema
    first and passes only the columns whose type matches.
    """

    def __init__(
        self,
        *,
        max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
        max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
        collector: ProblemCollector | None = None,
        subject: str = "steps",
        schema: pa.Schema = STEP_SCHEMA,
    ) -> None:
        """Start before the first row.

        Args:
            max_field_bytes: largest accepted string field.
            max_tensor_bytes: largest accepted tensor value (an observation or action).
            collector: where problems go; a new one when None.
            subject: names the stream in the report.
            schema: the schema version the rows follow (`STEP_SCHEMA` or `STEP_SCHEMA_V1`):
                which columns are required.
        """
        self.collector = collector if collector is not None else ProblemCollector()
        self.subject = subject
        self._max = max_field_bytes
        self._max_tensor = max_tensor_bytes
        self._required = _required(schema)
        self._offset = 0
        self._seen: set[object] = set()  # str ids (bytes if not UTF-8, reported on their own)
        # Last row of the previous batch: (episode id, step, terminated, truncated); None
        # before the first row. A null id or step is carried as None.
        self._last: tuple[object, int | None, bool, bool] | None = None
        # True after `skip`: the next row may continue an episode of the skipped rows.
        self._after_gap = False

    @property
    def rows(self) -> int:
        """Rows fed so far."""
        return self._offset

    def skip(self, rows: int, values: pa.RecordBatch | None = None) -> None:
        """Pass over rows whose episode structure cannot be checked.

        Their batch could not be converted, or its episode ids are not UTF-8; that problem is
        reported already. Later rows keep their row numbers, and the rows next to the gap are
        not judged against each other: whether the next row continues an episode of the
        skipped rows is unknown, so it is not reported as a bad start (step, ``is_first``, a
        reappearing id), nor the row before the gap as a missing final step.

        Args:
            rows: the number of rows skipped.
            values: the rows, converted but for their episode ids, when they are; each row's
                values (rewards, strings, vectors, ...) are then checked.
        """
        if values is not None and values.num_rows:
            cols = {
                name: col
                for name, col in zip(values.schema.names, values.columns, strict=True)
                if name != "episode_id"
            }
            _check_nulls(cols, self._required, self._offset, self.collector)
            self._check_values(cols, self._offset)
        if rows:
            self._offset += rows
            self._last = None
            self._after_gap = True

    def feed(self, batch: pa.RecordBatch) -> None:
        """Check one batch and remember what the next batch must continue.

        Args:
            batch: the next rows; columns absent from it are not checked.
        """
        n = batch.num_rows
        if n == 0:
            return
        cols = dict(zip(batch.schema.names, batch.columns, strict=True))
        off = self._offset
        c = self.collector
        _check_nulls(cols, self._required, off, c)
        if "episode_id" in cols and "step" in cols:
            self._check_structure(cols, n, off)
        self._shapes = {
            name: _shape_or_none(batch.schema.field(name))
            for name in ("obs", "action")
            if name in cols
        }
        self._check_values(cols, off)
        self._offset += n

    def _check_values(self, cols: dict[str, pa.Array], off: int) -> None:
        """Checks of each row on its own, which need no episode structure."""
        c = self.collector
        _check_finite(cols, "reward", off, c)
        _check_finite(cols, "action_logprob", off, c)
        _check_finite(cols, "latency_ms", off, c, non_negative=True)
        _check_finite(cols, "cost_usd", off, c, non_negative=True)
        for name in ("prompt_tokens", "completion_tokens", "safety_interventions"):
            _check_non_negative_int(cols, name, off, c)
        _check_finite(cols, "discount", off, c, non_negative=True)
        m = self._max
        _each_column(cols, _STRING_STEP_COLUMNS, lambda a, n: _check_string_column(a, n, off, c, m))
        _each_column(cols, _JSON_STEP_COLUMNS, lambda a, n: _check_json_column(a, n, off, c))
        _each_column(cols, ("extras",), lambda a, n: _check_extras(a, n, off, c))
        shapes = getattr(self, "_shapes", {})
        mt = self._max_tensor
        _each_column(
            cols,
            ("obs", "action"),
            lambda a, n: _check_tensor_column(a, n, off, c, mt, shapes.get(n)),
        )

    def _check_structure(self, cols: dict[str, pa.Array], n: int, off: int) -> None:
        c = self.collector
        ids: pa.Array = cols["episode_id"]
        steps = _numbers(cols["step"], 0).astype(np.int64, copy=False)
        step_ok = _bools(cols["step"].is_valid(), True)
        term = _bools(cols["terminated"]) if "terminated" in cols else np.zeros(n, bool)
        trunc = _bools(cols["truncated"]) if "truncated" in cols else np.zeros(n, bool)
        final = term | trunc

        # (1) Where does a new episode start? A null id starts a run of its own.
        boundary = np.empty(n, dtype=bool)
        if n > 1:
            boundary[1:] = _bools(pc.not_equal(ids.slice(1), ids.slice(0, n - 1)), True)
        first_id = _value(ids, 0)
        last = self._last
        gap, self._after_gap = self._after_gap, False
        boundary[0] = last is None or last[0] is None or first_id is None or first_id != last[0]

        # (2) Steps count 0, 1, 2, ... within an episode.
        prev = np.empty(n, dtype=np.int64)
        prev_ok = np.empty(n, dtype=bool)
        prev[1:] = steps[:-1]
        prev_ok[1:] = step_ok[:-1]
        prev[0] = last[1] if last is not None and last[1] is not None else -1
        prev_ok[0] = last is not None and last[1] is not None
        expected = prev + 1
        expected[boundary] = 0
        bad = (steps != expected) & step_ok & (boundary | prev_ok)
        bad[0] &= not gap
        if bad.any():
            rows = np.flatnonzero(bad)
            starts = rows[boundary[rows]]
            inner = rows[~boundary[rows]]
            gaps = inner[steps[inner] > prev[inner] + 1]
            backs = inner[steps[inner] <= prev[inner]]
            c.add_rows(
                "step:start",
                starts,
                off,
                "step",
                lambda i: f"episode {_value(ids, i)!r} starts at step {int(steps[i])}, want 0",
            )
            c.add_rows(
                "step:gap",
                gaps,
                off,
                "step",
                lambda i: _gap_message(_value(ids, i), int(prev[i]), int(steps[i])),
            )
            c.add_rows(
                "step:repeat",
                backs,
                off,
                "step",
                lambda i: (
                    f"episode {_value(ids, i)!r}: step {int(steps[i])} follows "
                    f"step {int(prev[i])}, want {int(prev[i]) + 1} (a repeat or a step back)"
                ),
            )

        # (3) The last step of an episode, and only it, is terminated or truncated. The last
        # row of this batch is judged when the next batch (or `finish`) shows what follows.
        run_end = np.zeros(n, dtype=bool)
        run_end[:-1] = boundary[1:]
        early = np.flatnonzero(final[:-1] & ~run_end[:-1])
        c.add_rows(
            "final:continues",
            early,
            off,
            "terminated",
            lambda i: (
                f"episode {_value(ids, i)!r} ends at step {int(steps[i])} "
                f"({_reason(bool(term[i]))}) but continues at row {off + i + 1}"
            ),
        )
        open_ends = np.flatnonzero(run_end & ~final)
        c.add_rows(
            "final:missing",
            open_ends,
            off,
            "terminated",
            lambda i: _open_message(_value(ids, i), int(steps[i])),
        )
        if last is not None:
            if boundary[0] and not (last[2] or last[3]):
                c.add_rows(
                    "final:missing",
                    np.array([-1]),
                    off,
                    "terminated",
                    lambda i: _open_message(last[0], last[1]),
                )
            elif not boundary[0] and (last[2] or last[3]):
                c.add_rows(
                    "final:continues",
                    np.array([-1]),
                    off,
                    "terminated",
                    lambda i: (
                        f"episode {last[0]!r} ends at step {last[1]} "
                        f"({_reason(last[2])}) but continues at row {off}"
                    ),
                )

        # (4) is_first / is_last agree with the structure.
        if "is_first" in cols:
            is_first = _bools(cols["is_first"])
            wrong = np.flatnonzero(is_first != boundary)
            if gap:
                wrong = wrong[wrong > 0]
            c.add_rows(
                "is_first",
                wrong,
                off,
                "is_first",
                lambda i: (
                    f"is_first is {bool(is_first[i])}, want {bool(boundary[i])} "
                    f"(row {'starts' if boundary[i] else 'continues'} episode "
                    f"{_value(ids, i)!r})"
                ),
            )
        if "is_last" in cols:
            is_last = _bools(cols["is_last"])
            wrong = np.flatnonzero(is_last != final)
            c.add_rows(
                "is_last",
                wrong,
                off,
                "is_last",
                lambda i: (
                    f"is_last is {bool(is_last[i])}, want {bool(final[i])} "
                    "(is_last must equal terminated or truncated)"
                ),
            )

        # (5) An episode's steps are contiguous: its id never reappears after another episode.
        starts_idx = np.flatnonzero(boundary)
        run_ids = _pylist(ids.take(pa.array(starts_idx)))
        seen = self._seen
        again: list[int] = []
        for i, eid in zip(starts_idx.tolist(), run_ids, strict=True):
            if eid is None:
                continue
            if eid in seen:
                if i == 0 and gap:
                    continue
                again.append(i)
            else:
                seen.add(eid)
        c.add_rows(
            "episode:again",
            np.asarray(again, dtype=np.int64),
            off,
            "episode_id",
            lambda i: (
                f"episode {_value(ids, i)!r} appears again after other episodes; "
                "its steps must be contiguous"
            ),
        )

        tail = n - 1
        self._last = (
            _value(ids, tail),
            int(steps[tail]) if step_ok[tail] else None,
            bool(term[tail]),
            bool(trunc[tail]),
        )

    def finish(self) -> ValidationReport:
        """Close the stream: the last episode must have a final step.

        Returns:
            The report over every batch fed.
        """
        last = self._last
        if last is not None and not (last[2] or last[3]):
            self.collector.add_rows(
                "final:missing",
                np.array([0]),
                self._offset - 1,
                "terminated",
                lambda i: _open_message(last[0], last[1]),
            )
            self._last = (last[0], last[1], True, False)  # report once even if called twice
        return ValidationReport(self.subject, self.collector.problems())


def _reason(terminated: bool) -> str:
    return "terminated" if terminated else "truncated"


def _gap_message(eid: object, prev: int, step: int) -> str:
    missing = f"step {prev + 1} is" if step == prev + 2 else f"steps {prev + 1}..{step - 1} are"
    return f"episode {eid!r}: step {step} follows step {prev}; {missing} missing"


def _open_message(eid: object, step: int | None) -> str:
    return (
        f"episode {eid!r} has no final step: its last step {step} is neither terminated "
        "nor truncated"
    )


class EpisodeStreamValidator:
    """Validates an episode table delivered as a stream of record batches.

    Carries the row offset and the episode ids seen, so a duplicate id is reported wherever it
    occurs.
    """

    def __init__(
        self,
        *,
        max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
        max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
        collector: ProblemCollector | None = None,
        subject: str = "episodes",
        check_unique_ids: bool = True,
        schema: pa.Schema = EPISODE_SCHEMA,
    ) -> None:
        """Start before the first row.

        Args:
            max_field_bytes: largest accepted string field.
            max_tensor_bytes: largest accepted final observation.
            collector: where problems go; a new one when None.
            subject: names the stream in the report.
            check_unique_ids: False when the ids are known unique already (episodes derived
                from steps that a `StepStreamValidator` checks), to save the memory of the ids.
            schema: the schema version the rows follow: which columns are required.
        """
        self.collector = collector if collector is not None else ProblemCollector()
        self.subject = subject
        self._max = max_field_bytes
        self._max_tensor = max_tensor_bytes
        self._required = _required(schema)
        self._offset = 0
        self._check_ids = check_unique_ids
        self._first_row: dict[object, int] = {}

    def feed(self, batch: pa.RecordBatch) -> None:
        """Check one batch of episode rows.

        Args:
            batch: the next rows; columns absent from it are not checked.
        """
        n = batch.num_rows
        if n == 0:
            return
        cols = dict(zip(batch.schema.names, batch.columns, strict=True))
        off = self._offset
        c = self.collector
        _check_nulls(cols, self._required, off, c)
        if "episode_id" in cols and self._check_ids:
            ids = cols["episode_id"]
            first = self._first_row
            again: list[int] = []
            for i, eid in enumerate(_pylist(ids)):
                if eid is None:
                    continue
                if eid in first:
                    again.append(i)
                else:
                    first[eid] = off + i
            c.add_rows(
                "episode_id:duplicate",
                np.asarray(again, dtype=np.int64),
                off,
                "episode_id",
                lambda i: (
                    f"episode {_value(ids, i)!r} is listed again "
                    f"(first at row {first[_value(ids, i)]})"
                ),
            )
        _check_finite(cols, "return", off, c)
        _check_finite(cols, "cost_usd", off, c, non_negative=True)
        if "num_steps" in cols:
            num_steps = cols["num_steps"]
            counts = _numbers(num_steps, 1)
            short = np.flatnonzero(counts < 1)
            c.add_rows(
                "num_steps:short",
                short,
                off,
                "num_steps",
                lambda i: f"num_steps is {int(counts[i])}, want >= 1",
            )
        if "judge_scores" in cols:
            self._check_scores(cols["judge_scores"], off)
        m = self._max
        _each_column(
            cols, _STRING_EPISODE_COLUMNS, lambda a, n: _check_string_column(a, n, off, c, m)
        )
        _each_column(cols, ("reset_info",), lambda a, n: _check_json_column(a, n, off, c))
        _each_column(cols, ("extras",), lambda a, n: _check_extras(a, n, off, c))
        if "final_obs" in cols:
            shape = _shape_or_none(batch.schema.field("final_obs"))
            mt = self._max_tensor
            _each_column(
                cols,
                ("final_obs",),
                lambda a, n: _check_tensor_column(a, n, off, c, mt, shape),
            )
        self._offset += n

    def _check_scores(self, scores: pa.MapArray, off: int) -> None:
        if scores.null_count == len(scores):
            return
        offsets = _numbers(scores.offsets, 0).astype(np.int64)
        start = int(offsets[0])
        values = _numbers(scores.items.slice(start, int(offsets[-1]) - start), 0.0)
        # Map each score to its row: repeat each row index by its number of entries.
        parents = np.repeat(np.arange(len(scores)), np.diff(offsets))
        bad_rows = np.unique(parents[~np.isfinite(values)])
        c = self.collector
        c.add_rows(
            "judge_scores:not-finite",
            bad_rows,
            off,
            "judge_scores",
            lambda i: (
                f"judge_scores {_value(scores, i)!r} holds a non-finite score, want finite numbers"
            ),
        )
        keys = scores.keys.slice(start, int(offsets[-1]) - start)
        if len(keys):
            codes = _numbers(keys.dictionary_encode().indices, 0).astype(np.int64)
            pair = parents.astype(np.int64) * (int(codes.max()) + 1) + codes
            _, first_idx, counts = np.unique(pair, return_index=True, return_counts=True)
            dup_rows = np.unique(parents[first_idx[counts > 1]])
            c.add_rows(
                "judge_scores:duplicate-key",
                dup_rows,
                off,
                "judge_scores",
                lambda i: f"judge_scores {_value(scores, i)!r} repeats a key, want each key once",
            )

    def finish(self) -> ValidationReport:
        """Return the report over every batch fed."""
        return ValidationReport(self.subject, self.collector.problems())


def _batches(table: pa.Table | pa.RecordBatch, usable: frozenset[str]) -> list[pa.RecordBatch]:
    names = [n for n in table.schema.names if n in usable]
    sub = table.select(names)
    if isinstance(sub, pa.RecordBatch):
        return [sub]
    return [b for b in sub.to_batches() if b.num_rows]


def validate_steps(
    table: pa.Table | pa.RecordBatch,
    *,
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    subject: str = "steps",
) -> ValidationReport:
    """Validate a whole step table against schema v2 (v1 when its metadata says ``steps/1``).

    Steps:
      1. Check column names and types; a missing nullable column counts as all null, a column
         of the wrong type is reported and not read further.
      2. Check content: required values present; rewards and obs/action values finite;
         steps 0, 1, 2, ... within each episode; exactly the last step of each episode
         terminated or truncated; ``is_first``/``is_last`` consistent; each episode's rows
         contiguous; strings valid UTF-8 and at most ``max_field_bytes``; tool columns valid
         JSON; costs, latencies and token counts non-negative.

    Args:
        table: the step table (use `convert.normalise_steps` first for raw inputs).
        max_field_bytes: largest accepted string field, in bytes.
        max_tensor_bytes: largest accepted tensor value, in bytes.
        subject: names the table in the report.

    Returns:
        A report listing every problem; ``report.ok`` when there is none.
    """
    collector = ProblemCollector()
    # (1)
    expected = STEP_SCHEMA_V1 if schema_version(table.schema) == "1" else STEP_SCHEMA
    usable = check_schema(table.schema, expected, collector)
    # (2)
    checker = StepStreamValidator(
        max_field_bytes=max_field_bytes,
        max_tensor_bytes=max_tensor_bytes,
        collector=collector,
        subject=subject,
        schema=expected,
    )
    for batch in _batches(table, usable):
        checker.feed(batch)
    return checker.finish()


def validate_episodes(
    table: pa.Table | pa.RecordBatch,
    *,
    steps: pa.Table | None = None,
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    subject: str = "episodes",
) -> ValidationReport:
    """Validate a whole episode table against schema v2 (v1 when its metadata says so),
    optionally against its steps.

    Steps:
      1. Check column names and types.
      2. Check content: required values present; episode ids unique; returns finite;
         ``num_steps`` >= 1; judge scores finite with unique keys; cost non-negative; strings
         valid UTF-8 and at most ``max_field_bytes``.
      3. When ``steps`` is given (a valid step table): every episode of one table appears in
         the other, and ``num_steps`` and ``return`` equal those derived from the steps.

    Args:
        table: the episode table.
        steps: the step table it summarises, or None to skip step (3).
        max_field_bytes: largest accepted string field, in bytes.
        max_tensor_bytes: largest accepted final observation, in bytes.
        subject: names the table in the report.

    Returns:
        A report listing every problem; ``report.ok`` when there is none.
    """
    collector = ProblemCollector()
    # (1)
    expected = EPISODE_SCHEMA_V1 if schema_version(table.schema) == "1" else EPISODE_SCHEMA
    usable = check_schema(table.schema, expected, collector)
    # (2)
    checker = EpisodeStreamValidator(
        max_field_bytes=max_field_bytes,
        max_tensor_bytes=max_tensor_bytes,
        collector=collector,
        subject=subject,
        schema=expected,
    )
    for batch in _batches(table, usable):
        checker.feed(batch)
    # (3)
    if steps is not None and {"episode_id", "num_steps", "return"} <= usable:
        # Imported here: convert builds on this module, so a top-level import would cycle.
        from .convert import derive_episodes

        _compare_with_steps(table, derive_episodes(steps), collector)
    return checker.finish()


def _compare_with_steps(
    table: pa.Table | pa.RecordBatch, derived: pa.Table, c: ProblemCollector
) -> None:
    ids = table.column("episode_id")
    derived_ids = derived.column("episode_id")
    where = pc.index_in(ids, value_set=derived_ids)
    missing = np.flatnonzero(_bools(where.is_null()))
    c.add_rows(
        "episode:no-steps",
        missing,
        0,
        "episode_id",
        lambda i: f"episode {_value(ids, i)!r} has no steps",
    )
    unlisted = np.flatnonzero(~_bools(pc.is_in(derived_ids, value_set=ids)))
    for i in unlisted.tolist():
        c.add(
            "episode:unlisted",
            f"episode {derived_ids[i].as_py()!r} has steps but no row",
            column="episode_id",
        )
    found = np.flatnonzero(_bools(where.is_valid()))
    idx = _numbers(where, 0).astype(np.int64)[found]
    got_n = _numbers(table.column("num_steps"), 0).astype(np.int64)[found]
    want_n = _numbers(derived.column("num_steps"), 0).astype(np.int64)[idx]
    for k in np.flatnonzero(got_n != want_n).tolist():
        row = int(found[k])
        c.add(
            "num_steps:mismatch",
            f"num_steps is {int(got_n[k])}, the steps of episode "
            f"{_value(ids, row)!r} number {int(want_n[k])}",
            row=row,
            column="num_steps",
        )
    got_r = _numbers(table.column("return"), 0.0).astype(np.float64)[found]
    want_r = _numbers(derived.column("return"), 0.0).astype(np.float64)[idx]
    for k in np.flatnonzero(~_returns_match(got_r, want_r)).tolist():
        row = int(found[k])
        c.add(
            "return:mismatch",
            f"return is {float(got_r[k])!r}, the rewards of episode "
            f"{_value(ids, row)!r} sum to {float(want_r[k])!r}",
            row=row,
            column="return",
        )


def _returns_match(got: npt.NDArray[np.float64], want: npt.NDArray[np.float64]) -> BoolVec:
    """A stated return matches the summed rewards up to summation-order rounding."""
    tol = 1e-9 * np.maximum(1.0, np.abs(want))
    out: BoolVec = (np.abs(got - want) <= tol) | ((got == want) & ~np.isnan(got))
    return out


def _shape_or_none(field: pa.Field) -> tuple[int, ...] | None:
    try:
        return tensor_shape(field)
    except ValueError:
        return None  # reported by check_schema
