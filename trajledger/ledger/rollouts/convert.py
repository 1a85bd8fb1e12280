"""Rollout inputs: normalisation into schema v2, derived episodes, and streaming readers.

Scope:
  * `normalise_steps` turns a step table in schema v2 (or v1, or the minimal classic form
    ``episode_id, step, obs, action, reward, terminated, truncated``) into `STEP_SCHEMA`: types
    are widened where exact, tensor columns keep their value type and shape, missing optional
    columns become null, ``is_first`` and ``is_last`` are derived. `normalise_episodes` does
    the same for episode attributes.
  * `derive_episodes` computes the episode table (return, num_steps, termination reason,
    success, cost) from steps, merged with any episode attributes the input gave.
  * Readers that stream an input as `RolloutChunk` objects of bounded size: Parquet, Arrow IPC
    (file and stream) in the rollout schema; records of what LLM training libraries write (chat,
    TRL completions and dataset types, verl dumps; ``formats.py`` maps them) as JSONL, plain or
    compressed with gzip or zstd (recognised by magic bytes, decompressed as a stream, refused
    past `MAX_DECOMPRESSED_BYTES` or a line past `MAX_LINE_BYTES`), or as Parquet/Arrow rows;
    Minari dataset directories (``minari_io.py``). A reader never holds more than one chunk of
    the input in memory.
  * `rows_to_table` / `rows_to_episodes` for the Python API (a list of dicts).
Non-scope: content validation (``validate.py``; these functions check only what they need in
order to convert), writing (``parquet_io.py``), and compressed Parquet or Arrow files (both
compress internally; a gzip or zstd wrapper around them is refused).
Spec: ``schemas/rollout.v2.md`` (the tables) and ``schemas/rollout-inputs.md`` (each input
mapping).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import io
import json
import os
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from trajledger.verify.strict_json import SURROGATE_ESCAPE, lone_surrogate

from . import typed_json
from .formats import (
    CHUNK_BYTES,
    RECORD_FORMATS,
    TRUNCATION_REASONS,
    ChunkBuilder,
    ReaderOptions,
    RecordProblems,
    RolloutChunk,
    json_type,
    kind_of_record,
    map_record,
)
from .minari_io import minari_root
from .schema import (
    EPISODE_ATTR_SCHEMA,
    EPISODE_SCHEMA,
    EXTRAS_TYPE,
    STEP_INPUT_REQUIRED,
    STEP_SCHEMA,
    TENSOR_COLUMNS,
    TENSOR_VALUE_TYPES,
    VECTOR_TYPE,
    conforms,
    tensor_field,
    tensor_shape,
    with_columns,
)
from .validate import Problem, ProblemCollector, RolloutValidationError, invalid_utf8_rows

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = [
    "DEFAULT_BATCH_ROWS",
    "FORMATS",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_LINE_BYTES",
    "TRUNCATION_REASONS",
    "EpisodeBuilder",
    "ReaderOptions",
    "RolloutChunk",
    "StepNormaliser",
    "TensorTypes",
    "derive_episodes",
    "detect_format",
    "iter_batch_inputs",
    "iter_rollout_chunks",
    "iter_step_batches",
    "normalise_episodes",
    "normalise_steps",
    "rows_to_episodes",
    "rows_to_table",
]

DEFAULT_BATCH_ROWS: Final = 65536
"""Rows per streamed batch."""

MAX_LINE_BYTES: Final = 64 << 20
"""Longest accepted JSONL line (one episode), newline included; a longer line refuses the file.

Read through a bounded buffer, so a line of any length (for instance one decompressed from a
few bytes) costs at most this much memory.
"""

MAX_BLANK_BYTES: Final = 1 << 20
"""Most bytes of blank (whitespace-only) lines a JSONL file may hold; past it the file is
refused. A gzip or zstd file of nothing but newlines decompresses a thousandfold and would take
hours to read line by line (a newline bomb); no rollout file has a mebibyte of blank lines."""

MAX_DECOMPRESSED_BYTES: Final = 64 << 30
"""Most bytes a gzip or zstd JSONL file may decompress to; past it the file is refused as a
possible decompression bomb. Split larger inputs into several files of one batch."""

FORMATS: Final = ("parquet", "arrow", "arrow-stream", *RECORD_FORMATS, "minari")
"""Input formats `detect_format` recognises. ``parquet``, ``arrow`` and ``arrow-stream`` are
the rollout schema in those containers; the record formats come as JSONL (plain, gzip or zstd)
or as rows of a Parquet or Arrow file; ``minari`` is a Minari dataset directory."""

_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US: Final = dt.timedelta(microseconds=1)


# --------------------------------------------------------------------------------------------
# Column coercion


def _is_stringish(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _is_binaryish(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    )


def _is_number(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t))


def _want_text(want: pa.DataType, name: str) -> str:
    if name in TENSOR_COLUMNS:
        return "a list, fixed-size list or fixed-shape tensor of numbers or booleans, or a number"
    if want == EXTRAS_TYPE:
        return "a map or struct of field names to values"
    return str(want)


def _coerce(arr: pa.Array, field: pa.Field, offset: int, c: ProblemCollector) -> pa.Array | None:
    """Convert one input column to its schema type, or record why not and return None.

    Tensor columns are left to `_coerce_tensor` (they keep their value type).
    """
    want = field.type
    name = field.name
    if arr.type == want:
        return arr
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if pa.types.is_null(t):
        return pa.nulls(len(arr), want)
    try:
        if want == EXTRAS_TYPE:
            return _coerce_extras(arr, name, offset, c)
        if pa.types.is_map(want):
            return _coerce_scores(arr, name, offset, c)
        if pa.types.is_string(want):
            if _is_stringish(t) or (name == "episode_id" and pa.types.is_integer(t)):
                return arr.cast(want)
            if _is_binaryish(t):
                if name == "episode_id":  # checked by the caller, which also decodes the ids
                    return arr.cast(pa.binary()).view(pa.string())
                bad = [i for i, v in enumerate(arr.to_pylist()) if v is not None and not _utf8(v)]
                if bad:
                    c.add_rows(
                        f"{name}:utf8",
                        np.asarray(bad),
                        offset,
                        name,
                        lambda i: "value is not valid UTF-8",
                    )
                    return None
                return arr.cast(pa.binary()).cast(want)
        elif pa.types.is_integer(want):
            if pa.types.is_integer(t):
                return arr.cast(want)
        elif pa.types.is_floating(want):
            if _is_number(t):
                return arr.cast(want)
        elif pa.types.is_boolean(want):
            pass
        elif pa.types.is_timestamp(want):
            if pa.types.is_timestamp(t):
                # Sub-microsecond digits are dropped; naive times are taken as UTC.
                return arr.cast(want, safe=False)
            if _is_stringish(t):
                return arr.cast(pa.string()).cast(want)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        c.add(
            f"{name}:convert", f"cannot convert {t} to {_want_text(want, name)}: {e}", column=name
        )
        return None
    c.add(f"{name}:type", f"type {t}, want {_want_text(want, name)}", column=name)
    return None


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _tensor_value_type(t: pa.DataType) -> pa.DataType | None:
    """The value type of a tensor-like input type, or None when it is not one."""
    if isinstance(t, pa.FixedShapeTensorType):
        t = t.storage_type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        v = t.value_type
    elif _is_number(t) or pa.types.is_boolean(t):
        v = t
    else:
        return None
    return v if v in TENSOR_VALUE_TYPES else None


def _input_shape(field: pa.Field) -> tuple[int, ...] | None:
    """The fixed shape an input tensor field declares (extension, fixed-size list, metadata)."""
    t = field.type
    if isinstance(t, pa.FixedShapeTensorType):
        return tuple(int(d) for d in t.shape)
    if pa.types.is_fixed_size_list(t):
        return (int(t.list_size),)
    if _is_number(t) or pa.types.is_boolean(t):
        return ()
    try:
        return tensor_shape(field)
    except ValueError:
        return None


def _coerce_tensor(arr: pa.Array, value_type: pa.DataType) -> pa.Array:
    """An input tensor column as ``list<value_type>`` (the caller checked the type)."""
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return arr.cast(pa.list_(value_type))
    # A number column: each value becomes a tensor of one (shape []).
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    offsets = np.zeros(len(arr) + 1, dtype=np.int32)
    np.cumsum(valid, out=offsets[1:])
    mask = None if arr.null_count == 0 else pa.array(~valid)
    return pa.ListArray.from_arrays(
        pa.array(offsets), arr.drop_null().cast(value_type), type=pa.list_(value_type), mask=mask
    )


def _coerce_scores(arr: pa.Array, name: str, offset: int, c: ProblemCollector) -> pa.Array | None:
    t = arr.type
    want = EPISODE_SCHEMA.field("judge_scores").type
    if pa.types.is_map(t) and _is_stringish(t.key_type) and _is_number(t.item_type):
        return arr.cast(want)
    if (
        _is_pair_list(t)
        and _is_stringish(t.value_type[0].type)
        and _is_number(t.value_type[1].type)
    ):
        # A map as Parquet stores it (list of key/value structs): what plain exports hold.
        return _pairs_to_map(arr, want)
    if pa.types.is_struct(t) and all(_is_number(f.type) or pa.types.is_null(f.type) for f in t):
        # A struct is what pyarrow infers from dicts; each non-null member becomes an entry.
        rows = [
            None if d is None else [(k, float(v)) for k, v in d.items() if v is not None]
            for d in arr.to_pylist()
        ]
        return pa.array(rows, type=want)
    c.add(f"{name}:type", f"type {t}, want {want} (or a struct of numbers)", column=name)
    return None


def _is_pair_list(t: pa.DataType) -> bool:
    return bool(
        (pa.types.is_list(t) or pa.types.is_large_list(t))
        and pa.types.is_struct(t.value_type)
        and t.value_type.num_fields == 2
        and [f.name for f in t.value_type] == ["key", "value"]
    )


def _pairs_to_map(arr: pa.Array, want: pa.DataType) -> pa.Array:
    rows = [None if r is None else [(p["key"], p["value"]) for p in r] for r in arr.to_pylist()]
    return pa.array(rows, type=want)


def _coerce_extras(arr: pa.Array, name: str, offset: int, c: ProblemCollector) -> pa.Array | None:
    """Extras: a map of names to typed JSON text, or a struct / map of values to encode."""
    t = arr.type
    if (pa.types.is_map(t) or _is_pair_list(t)) and _is_stringish(
        t.key_type if pa.types.is_map(t) else t.value_type[0].type
    ):
        item = t.item_type if pa.types.is_map(t) else t.value_type[1].type
        if _is_stringish(item):
            out = arr.cast(EXTRAS_TYPE) if pa.types.is_map(t) else _pairs_to_map(arr, EXTRAS_TYPE)
            return out
    if pa.types.is_struct(t) or pa.types.is_map(t):
        rows: list[Any] = []
        for i, d in enumerate(arr.to_pylist()):
            if d is None:
                rows.append(None)
                continue
            items = d.items() if isinstance(d, dict) else d
            try:
                rows.append([(k, typed_json.dumps(v)) for k, v in items if v is not None])
            except typed_json.TypedJSONError as e:
                c.add(f"{name}:typed", str(e), row=offset + i, column=name)
                rows.append(None)
        return pa.array(rows, type=EXTRAS_TYPE)
    c.add(f"{name}:type", f"type {t}, want {_want_text(EXTRAS_TYPE, name)}", column=name)
    return None


def _run_starts(ids: pa.Array, prev_id: str | None) -> npt.NDArray[np.bool_]:
    """True where a row starts an episode: its id differs from the previous row's."""
    n = len(ids)
    out = np.empty(n, dtype=bool)
    if n > 1:
        neq = pc.not_equal(ids.slice(1), ids.slice(0, n - 1))
        out[1:] = pc.fill_null(neq, True).to_numpy(zero_copy_only=False)
    if n:
        first = ids[0].as_py()
        out[0] = prev_id is None or first is None or first != prev_id
    return out


class TensorTypes:
    """The value type and shape of each tensor column of one batch, fixed by the first values.

    A batch holds one kind of observation and one kind of action: the first non-null values of
    ``obs`` and ``action`` fix the column's value type and shape; later values must agree (a
    value type that widens exactly, e.g. int32 after int64, is converted). ``final_obs`` follows
    ``obs``.
    """

    def __init__(self) -> None:
        """Nothing fixed yet: tensor columns default to `VECTOR_TYPE`."""
        self.fields: dict[str, pa.Field] = {}

    def field(self, name: str) -> pa.Field:
        """The tensor field of ``name`` as fixed so far (``final_obs`` as ``obs``)."""
        got = self.fields.get("obs" if name == "final_obs" else name)
        if got is None:
            return tensor_field(name, VECTOR_TYPE.value_type)
        return got.with_name(name)

    def step_schema(self) -> pa.Schema:
        """`STEP_SCHEMA` with the tensor fields fixed so far."""
        return with_columns(STEP_SCHEMA, [self.field("obs"), self.field("action")])

    def episode_schema(self) -> pa.Schema:
        """`EPISODE_SCHEMA` with ``final_obs`` as ``obs``."""
        return with_columns(EPISODE_SCHEMA, [self.field("final_obs")])

    def adopt(self, field: pa.Field, all_null: bool) -> bool:
        """Whether a column already in schema form can be taken as it is (fixing its type).

        Args:
            field: the column's field (``list<T>``, maybe with shape metadata).
            all_null: the column holds no value in this batch.
        """
        if all_null:
            return True
        fixed = self.fields.get(field.name)
        if fixed is None:
            try:
                shape = tensor_shape(field)
            except ValueError:
                return False
            self.fields[field.name] = tensor_field(field.name, field.type.value_type, shape)
            return True
        return bool(field.equals(fixed, check_metadata=True))

    def coerce(
        self, arr: pa.Array, in_field: pa.Field, name: str, offset: int, c: ProblemCollector
    ) -> pa.Array | None:
        """Convert one input tensor column, fixing the column's type on its first values.

        Returns:
            The column as ``list<T>`` of the fixed type, or None (the problem is recorded).
        """
        t = in_field.type
        if pa.types.is_dictionary(t):
            arr = arr.dictionary_decode()
            t = arr.type
        key = "obs" if name == "final_obs" else name
        if pa.types.is_null(t) or arr.null_count == len(arr):
            return pa.nulls(len(arr), self.field(name).type)
        value_type = _tensor_value_type(t)
        if value_type is None:
            c.add(f"{name}:type", f"type {t}, want {_want_text(t, name)}", column=name)
            return None
        shape = _input_shape(in_field.with_type(t))
        fixed = self.fields.get(key)
        if fixed is None:
            fixed = tensor_field(key, value_type, shape)
            self.fields[key] = fixed
        want_type = fixed.type.value_type
        want_shape = tensor_shape(fixed)
        if shape is not None and want_shape is not None and shape != want_shape:
            c.add(
                f"{name}:shape",
                f"values of shape {list(shape)}, earlier values have shape {list(want_shape)}; "
                "a batch holds one kind of observation and of action",
                column=name,
            )
            return None
        if value_type != want_type:
            try:
                if not (pa.types.is_integer(value_type) or pa.types.is_floating(value_type)):
                    raise pa.ArrowInvalid("not a number")
                out = _coerce_tensor(arr, value_type).cast(pa.list_(want_type), safe=True)
                flat_in = pc.list_flatten(_coerce_tensor(arr, value_type))
                back = pc.list_flatten(out).cast(value_type, safe=False)
                if not pc.all(pc.equal(flat_in, back)).as_py() and len(flat_in):
                    raise pa.ArrowInvalid("values change")
                return out
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                c.add(
                    f"{name}:dtype",
                    f"values of type {value_type}, earlier values are {want_type}; a batch "
                    "holds one kind of observation and of action",
                    column=name,
                )
                return None
        return _coerce_tensor(arr, want_type)


class StepNormaliser:
    """Converts a stream of input step batches into `STEP_SCHEMA`, batch by batch.

    Carries the previous batch's last episode id, so ``is_first`` is right across batch
    boundaries, and the row offset, so problems name rows of the whole stream. Problems with
    the input's columns (missing, unknown, unconvertible) are reported once per stream.
    """

    def __init__(
        self, collector: ProblemCollector | None = None, tensors: TensorTypes | None = None
    ) -> None:
        """Start before the first row.

        Args:
            collector: where problems go; a new one when None.
            tensors: the tensor types of the batch (shared with the episode writer); new when
                None.
        """
        self.collector = collector if collector is not None else ProblemCollector()
        self.tensors = tensors if tensors is not None else TensorTypes()
        self._offset = 0
        self._prev_id: str | None = None
        self._reported: set[str] = set()
        self._failed_types: set[tuple[str, str]] = set()
        self.ids_rejected: pa.RecordBatch | None = None
        """The batch of the last `normalise` call when it returned None only because episode
        ids are not UTF-8: its rows' values can still be checked, not its episodes."""

    def normalise(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """Convert one batch.

        Args:
            batch: input rows in schema v2 or v1, or the minimal classic form.

        Returns:
            The rows in `STEP_SCHEMA` (tensor columns of the batch's fixed types), or None when
            the batch's columns cannot be converted or its episode ids are not UTF-8 (the
            problems are in `collector`; the caller skips the batch).
        """
        n = batch.num_rows
        offset = self._offset
        self._offset += n
        self.ids_rejected = None
        fast = conforms(batch.schema, STEP_SCHEMA) and all(
            self.tensors.adopt(batch.schema.field(name), batch.column(name).null_count == n)
            for name in ("obs", "action")
        )
        if fast:
            out = pa.RecordBatch.from_arrays(
                [
                    pa.nulls(n, f.type)
                    if f.name in ("obs", "action") and col.null_count == n
                    else col
                    for f, col in zip(self.tensors.step_schema(), batch.columns, strict=True)
                ],
                schema=self.tensors.step_schema(),
            )
            if not self._ids_utf8(out.column(0), offset):
                self.ids_rejected, out = out, None
        else:
            out = self._convert(batch, offset)
        if out is None:
            self._prev_id = None  # the next batch follows a gap
        elif n:
            self._prev_id = out.column(0)[n - 1].as_py()
        return out

    def _ids_utf8(self, ids: pa.Array, offset: int) -> bool:
        """Report episode ids that are not UTF-8: they are decoded and compared from here on."""
        bad = invalid_utf8_rows(ids)
        self.collector.add_rows(
            "episode_id:utf8", bad, offset, "episode_id", lambda i: "value is not valid UTF-8"
        )
        return not len(bad)

    def _once(self, kind: str, message: str, column: str) -> None:
        if kind not in self._reported:
            self._reported.add(kind)
            self.collector.add(kind, message, column=column)

    def _convert(self, batch: pa.RecordBatch, offset: int) -> pa.RecordBatch | None:
        names = batch.schema.names
        ok = True
        for name in sorted({x for x in names if names.count(x) > 1}):
            self._once(f"dup:{name}", f"column appears {names.count(name)} times, want once", name)
            ok = False
        for name in names:
            if STEP_SCHEMA.get_field_index(name) < 0:
                self._once(
                    f"unknown:{name}",
                    "unknown column: rollout schema v2 has no such "
                    "column (see schemas/rollout.v2.md; keep other fields in 'extras')",
                    name,
                )
                ok = False
        for name in STEP_INPUT_REQUIRED:
            if name not in names:
                self._once(f"missing:{name}", "missing required column", name)
                ok = False
        if not ok:
            return None
        n = batch.num_rows
        arrays: list[pa.Array | None] = []
        for field in STEP_SCHEMA:
            if field.name in names:
                column = batch.column(field.name)
                key = (field.name, str(column.type))
                # A column of a type that cannot be converted is reported once per stream.
                if key in self._failed_types:
                    got = None
                elif field.name in TENSOR_COLUMNS:
                    got = self.tensors.coerce(
                        column, batch.schema.field(field.name), field.name, offset, self.collector
                    )
                else:
                    got = _coerce(column, field, offset, self.collector)
                if got is None:
                    ok = False
                    if not _is_binaryish(column.type):  # binary fails per row (UTF-8)
                        self._failed_types.add(key)
                arrays.append(got)
            elif field.name in ("is_first", "is_last"):
                arrays.append(None)
            else:
                arrays.append(
                    pa.nulls(
                        n,
                        self.tensors.field(field.name).type
                        if field.name in TENSOR_COLUMNS
                        else field.type,
                    )
                )
        if not ok:
            return None
        ids = arrays[0]
        assert ids is not None  # required and converted above
        ids_ok = self._ids_utf8(ids, offset)
        if arrays[2] is None:
            # Episode starts follow the ids; with ids rejected, no episode is judged.
            starts = _run_starts(ids, self._prev_id) if ids_ok else np.zeros(n, dtype=bool)
            arrays[2] = pa.array(starts)
        if arrays[3] is None:
            final = pc.or_kleene(arrays[4], arrays[5])
            arrays[3] = pc.fill_null(final, False)
        out = pa.RecordBatch.from_arrays(arrays, schema=self.tensors.step_schema())
        if not ids_ok:
            self.ids_rejected = out
            return None
        return out


def normalise_steps(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """Convert a step table into `STEP_SCHEMA`.

    Accepts schema v2 or v1, or the minimal classic form ``episode_id, step, obs, action,
    reward, terminated, truncated`` (``obs``/``action``/``reward`` optional). ``episode_id``
    may be an integer (it becomes its decimal string); ``obs``/``action`` may be lists, large
    lists or fixed-size lists of any number type or booleans, fixed-shape tensors, or plain
    numbers (each a tensor of shape ``[]``): the value type is kept and the shape recorded.
    Integer and float columns are converted where exact. Absent optional columns become null;
    ``is_first`` (first row of an episode's run) and ``is_last`` (terminated or truncated) are
    derived when absent.

    Args:
        table: the input rows.

    Returns:
        The rows in `STEP_SCHEMA`, one chunk per input chunk.

    Raises:
        RolloutValidationError: a required column is missing, a column is unknown, or a column
            cannot be converted (naming the column, and the rows where they are known).
    """
    normaliser = StepNormaliser()
    batches = table.to_batches() if isinstance(table, pa.Table) else [table]
    out = [normaliser.normalise(b) for b in batches]
    problems = normaliser.collector.problems()
    if problems:
        raise RolloutValidationError("steps", problems)
    schema = normaliser.tensors.step_schema()
    return pa.Table.from_batches(
        [conform_batch(b, schema) for b in out if b is not None], schema=schema
    )


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with the tensor types of ``schema`` (all-null tensor columns retyped)."""
    if batch.schema.equals(schema, check_metadata=True):
        return batch
    return pa.RecordBatch.from_arrays(
        [
            col if col.type == f.type else col.cast(f.type)
            for col, f in zip(batch.columns, schema, strict=True)
        ],
        schema=schema,
    )


def _utf8_ids(ids: pa.Array | None, offset: int, c: ProblemCollector) -> pa.Array | None:
    if ids is None:
        return None
    bad = invalid_utf8_rows(ids)
    c.add_rows("episode_id:utf8", bad, offset, "episode_id", lambda i: "value is not valid UTF-8")
    return None if len(bad) else ids


def normalise_episodes(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """Convert given episode attributes into `EPISODE_ATTR_SCHEMA` (every column optional).

    ``episode_id`` is required (an integer becomes its decimal string). ``judge_scores`` may be
    a map of strings to numbers or a struct of numbers (what pyarrow infers from dicts);
    ``final_obs`` a tensor column (its value type kept); ``extras`` a map of names to typed JSON
    text, or a struct of values.

    Args:
        table: episode attribute rows.

    Returns:
        The rows in `EPISODE_ATTR_SCHEMA`; absent columns are null.

    Raises:
        RolloutValidationError: ``episode_id`` is missing, or a column is unknown or cannot be
            converted.
    """
    c = ProblemCollector()
    names = table.schema.names
    if "episode_id" not in names:
        c.add("schema", "missing required column", column="episode_id")
    for name in names:
        if EPISODE_SCHEMA.get_field_index(name) < 0:
            c.add("schema", "unknown column: rollout schema v2 has no such column", column=name)
    arrays: list[pa.Array | pa.ChunkedArray | None] = []
    tensors = TensorTypes()
    if not c.count:
        for field in EPISODE_ATTR_SCHEMA:
            if field.name in names:
                col = table.column(field.name)
                chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
                conv: list[pa.Array | None] = []
                start = 0  # problems name rows of the whole table
                for ch in chunks:
                    if field.name in TENSOR_COLUMNS:
                        got = tensors.coerce(
                            ch, table.schema.field(field.name), "final_obs", start, c
                        )
                    else:
                        got = _coerce(ch, field, start, c)
                    if field.name == "episode_id":  # decoded to match attributes to steps
                        got = _utf8_ids(got, start, c)
                    conv.append(got)
                    start += len(ch)
                want = tensors.field("final_obs").type if field.name in TENSOR_COLUMNS else None
                arrays.append(
                    None
                    if any(x is None for x in conv)
                    else pa.chunked_array(
                        [x if want is None else x.cast(want) for x in conv if x is not None],
                        type=want or field.type,
                    )
                )
            else:
                arrays.append(pa.nulls(table.num_rows, field.type))
    problems = c.problems()
    if problems:
        raise RolloutValidationError("episodes", problems)
    schema = with_columns(EPISODE_ATTR_SCHEMA, [tensors.field("final_obs")])
    return pa.Table.from_arrays(arrays, schema=schema)


# --------------------------------------------------------------------------------------------
# Derived episodes


@dataclass
class _OpenEpisode:
    """The episode whose steps reached the end of the last batch (it may continue)."""

    episode_id: str | None
    rewards: npt.NDArray[np.float64]
    reward_count: int
    costs: npt.NDArray[np.float64]
    cost_count: int
    terminated: bool
    truncated: bool


class EpisodeBuilder:
    """Derives the episode table from a stream of step batches in `STEP_SCHEMA`.

    An episode may span batches: its rewards are carried until its last step arrives, and its
    return is then summed over its full reward vector with ``np.add.reduceat``, whose result
    depends only on the values summed. So the episode table does not depend on where the input
    was cut into batches.

    The return is null when none of the episode's steps has a reward (data without rewards).
    Given episode attributes (`add_attrs`) are merged in by episode id when the episode is
    complete: ``termination_reason``, ``success``, ``cost_usd`` and ``invalid`` given override
    the derived ones; a given ``return`` or ``num_steps`` that disagrees with the steps is a
    problem. ``success`` is derived from a ``termination_reason`` of ``success`` (true) or
    ``failure`` (false). A batch that could not be converted is passed over with `skip`.
    """

    def __init__(
        self, collector: ProblemCollector | None = None, tensors: TensorTypes | None = None
    ) -> None:
        """Start before the first step.

        Args:
            collector: where problems go; a new one when None.
            tensors: the batch's tensor types (``final_obs`` follows ``obs``); new when None.
        """
        self.collector = collector if collector is not None else ProblemCollector()
        self.tensors = tensors if tensors is not None else TensorTypes()
        self._open: _OpenEpisode | None = None
        self._pending: pa.Table | None = None
        self._attr_rows = 0
        self._attr_ids: set[str] = set()
        self._episode_rows = 0
        self._drop_next = False  # after `skip`: the next episode may lack its first steps

    def add_attrs(self, attrs: pa.RecordBatch | pa.Table) -> None:
        """Queue given attributes of episodes (in `EPISODE_ATTR_SCHEMA`).

        Args:
            attrs: rows of episode attributes, each merged when its episode completes.
        """
        table = pa.Table.from_batches([attrs]) if isinstance(attrs, pa.RecordBatch) else attrs
        seen = self._attr_ids
        for eid in table.column("episode_id").to_pylist():
            if eid is None:
                self.collector.add(
                    "attrs:null-id", "episode attributes without an episode_id", column="episode_id"
                )
            elif eid in seen:
                self.collector.add(
                    "attrs:duplicate",
                    f"episode {eid!r} is given attributes twice",
                    column="episode_id",
                )
            else:
                seen.add(eid)
        self._attr_rows += table.num_rows
        self._pending = table if self._pending is None else pa.concat_tables([self._pending, table])

    def skip(self, steps: pa.RecordBatch) -> None:
        """Pass over a batch that could not be converted (its problems are reported already).

        The episodes it touches cannot be derived whole, and a partial episode would only
        bring false problems (a given return that disagrees), so none of them is emitted: the
        open episode is dropped, and so is the next episode to complete (it may continue one of
        the skipped rows). Their given attributes are dropped too, so that they are not
        reported as having no steps.

        Args:
            steps: the batch as the input gave it.
        """
        if not steps.num_rows:
            return
        if self._open is not None:
            self._take_attrs(pa.array([self._open.episode_id], type=pa.string()))
            self._open = None
        ids = _raw_ids(steps)
        if ids is not None:
            self._take_attrs(ids)
        self._drop_next = True

    def feed(self, steps: pa.RecordBatch) -> pa.RecordBatch:
        """Take the next step batch; return the episodes it completes.

        Args:
            steps: the next rows, in `STEP_SCHEMA`.

        Returns:
            Episodes that ended before the batch's last episode (which stays open until the
            next batch shows whether it continues), in `EPISODE_SCHEMA`.
        """
        n = steps.num_rows
        if n == 0:
            return _empty_episodes(self.tensors)
        ids = steps.column("episode_id")
        reward_col = steps.column("reward")
        rewards = _floats(reward_col)
        reward_ok = reward_col.is_valid().to_numpy(zero_copy_only=False).astype(np.int64)
        cost_col = steps.column("cost_usd")
        costs = _floats(cost_col)
        cost_ok = cost_col.is_valid().to_numpy(zero_copy_only=False).astype(np.int64)
        term = _flags(steps.column("terminated"))
        trunc = _flags(steps.column("truncated"))
        starts = np.flatnonzero(_flags(steps.column("is_first")))
        if not len(starts) or starts[0] != 0:
            starts = np.concatenate([[0], starts])
        opened = self._open
        continues = opened is not None and not _flags(steps.column("is_first"))[0]

        seg_ids: list[str | None] = ids.take(pa.array(starts)).to_pylist()
        returns = np.add.reduceat(rewards, starts)
        reward_counts = np.add.reduceat(reward_ok, starts)
        cost_sums = np.add.reduceat(costs, starts)
        cost_counts = np.add.reduceat(cost_ok, starts)
        counts = np.diff(np.concatenate([starts, [n]]))
        ends = np.concatenate([starts[1:], [n]]) - 1
        seg_term = term[ends]
        seg_trunc = trunc[ends]
        first_end = int(starts[1]) if len(starts) > 1 else n

        done_ids: list[str | None] = []
        done_returns: list[float | None] = []
        done_counts: list[int] = []
        done_term: list[bool] = []
        done_trunc: list[bool] = []
        done_cost: list[float | None] = []

        if opened is not None and continues:
            # Sum the open episode's rewards together with this batch's first segment.
            merged_r = np.concatenate([opened.rewards, rewards[:first_end]])
            merged_c = np.concatenate([opened.costs, costs[:first_end]])
            returns[0] = np.add.reduceat(merged_r, [0])[0]
            reward_counts[0] += opened.reward_count
            cost_sums[0] = np.add.reduceat(merged_c, [0])[0]
            cost_counts[0] += opened.cost_count
            counts[0] += len(opened.rewards)
            seg_ids[0] = opened.episode_id
            carry_r, carry_c = merged_r, merged_c
        else:
            if opened is not None:
                done_ids.append(opened.episode_id)
                done_returns.append(_return(opened))
                done_counts.append(len(opened.rewards))
                done_term.append(opened.terminated)
                done_trunc.append(opened.truncated)
                done_cost.append(
                    float(np.add.reduceat(opened.costs, [0])[0]) if opened.cost_count else None
                )
            carry_r, carry_c = rewards[:first_end], costs[:first_end]

        k = len(starts) - 1  # the last segment stays open
        last_start = int(starts[-1])
        self._open = _OpenEpisode(
            episode_id=seg_ids[k],
            rewards=(carry_r if k == 0 else rewards[last_start:]).copy(),
            reward_count=int(reward_counts[k]),
            costs=(carry_c if k == 0 else costs[last_start:]).copy(),
            cost_count=int(cost_counts[k]),
            terminated=bool(seg_term[k]),
            truncated=bool(seg_trunc[k]),
        )
        done_ids.extend(seg_ids[:k])
        done_returns.extend(
            [
                float(r) if m else None
                for r, m in zip(returns[:k].tolist(), reward_counts[:k].tolist(), strict=True)
            ]
        )
        done_counts.extend(counts[:k].tolist())
        done_term.extend(seg_term[:k].tolist())
        done_trunc.extend(seg_trunc[:k].tolist())
        done_cost.extend(
            [
                float(s) if m else None
                for s, m in zip(cost_sums[:k].tolist(), cost_counts[:k].tolist(), strict=True)
            ]
        )
        return self._emit(done_ids, done_returns, done_counts, done_term, done_trunc, done_cost)

    def finish(self) -> pa.RecordBatch:
        """Close the last episode; report given attributes whose episode had no steps.

        Returns:
            The last episode (or no rows when there were no steps), in `EPISODE_SCHEMA`.
        """
        opened, self._open = self._open, None
        if opened is None:
            out = _empty_episodes(self.tensors)
        else:
            out = self._emit(
                [opened.episode_id],
                [_return(opened)],
                [len(opened.rewards)],
                [opened.terminated],
                [opened.truncated],
                [float(np.add.reduceat(opened.costs, [0])[0]) if opened.cost_count else None],
            )
        if self._pending is not None and self._pending.num_rows:
            for eid in self._pending.column("episode_id").to_pylist():
                if eid is not None:
                    self.collector.add(
                        "attrs:no-steps",
                        f"episode {eid!r} has attributes but no steps",
                        column="episode_id",
                    )
            self._pending = None
        return out

    def _emit(
        self,
        ids: list[str | None],
        returns: list[float | None],
        counts: list[int],
        term: list[bool],
        trunc: list[bool],
        costs: list[float | None],
    ) -> pa.RecordBatch:
        if self._drop_next and ids:
            self._drop_next = False
            self._take_attrs(pa.array(ids[:1], type=pa.string()))
            ids, returns, counts = ids[1:], returns[1:], counts[1:]
            term, trunc, costs = term[1:], trunc[1:], costs[1:]
        n = len(ids)
        if not n:
            return _empty_episodes(self.tensors)
        id_arr = pa.array(ids, type=pa.string())
        reason = pa.array(
            [
                "terminated" if t else "truncated" if u else None
                for t, u in zip(term, trunc, strict=True)
            ],
            type=pa.string(),
        )
        cols: dict[str, pa.Array] = {
            "episode_id": id_arr,
            "return": pa.array(returns, type=pa.float64()),
            "num_steps": pa.array(counts, type=pa.int64()),
            "termination_reason": reason,
            "cost_usd": pa.array(costs, type=pa.float64()),
        }
        attrs = self._take_attrs(id_arr)
        schema = self.tensors.episode_schema()
        arrays = []
        for field in schema:
            name = field.name
            given = attrs.column(name).combine_chunks() if attrs is not None else None
            if name in ("return", "num_steps"):
                if given is not None and given.null_count < n:
                    self._check_given(name, given, cols[name], id_arr)
                arrays.append(cols[name])
            elif name in cols:
                arrays.append(cols[name] if given is None else pc.coalesce(given, cols[name]))
            elif name == "success":
                reason = arrays[schema.get_field_index("termination_reason")]
                derived = pc.if_else(
                    pc.equal(reason, "success"),
                    True,
                    pc.if_else(pc.equal(reason, "failure"), False, pa.scalar(None, pa.bool_())),
                )
                arrays.append(derived if given is None else pc.coalesce(given, derived))
            elif name == "invalid":
                arrays.append(
                    pa.array(np.zeros(n, dtype=bool))
                    if given is None
                    else pc.fill_null(given, False)
                )
            elif name == "final_obs" and given is not None and given.type != field.type:
                arrays.append(self._final_obs(given, field, id_arr))
            else:
                arrays.append(given if given is not None else pa.nulls(n, field.type))
        self._episode_rows += n
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _final_obs(self, given: pa.Array, field: pa.Field, ids: pa.Array) -> pa.Array:
        """Given final observations in the type of the batch's ``obs``, or nulls and a problem."""
        if given.null_count == len(given):
            return pa.nulls(len(given), field.type)
        try:
            out = given.cast(field.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            self.collector.add(
                "final_obs:type",
                f"final_obs of episode {ids[0].as_py()!r} has type {given.type}, the "
                f"observations are {field.type}",
                column="final_obs",
            )
            return pa.nulls(len(given), field.type)
        return out

    def _take_attrs(self, ids: pa.Array) -> pa.Table | None:
        pending = self._pending
        if pending is None or not pending.num_rows:
            return None
        pending_ids = pending.column("episode_id")
        where = pc.index_in(ids, value_set=pending_ids)
        if where.null_count == len(where):
            return None
        taken = pending.take(where)
        left = pending.filter(pc.invert(pc.is_in(pending_ids, value_set=ids)))
        self._pending = left.combine_chunks() if left.num_rows else None
        return taken

    def _check_given(self, name: str, given: pa.Array, derived: pa.Array, ids: pa.Array) -> None:
        g = _floats(given)
        d = _floats(derived)
        has = given.is_valid().to_numpy(zero_copy_only=False)
        known = derived.is_valid().to_numpy(zero_copy_only=False)
        tol = 1e-9 * np.maximum(1.0, np.abs(d))
        bad = np.flatnonzero(has & ~(known & (np.abs(g - d) <= tol)))
        what = "sum of its rewards" if name == "return" else "number of its steps"
        self.collector.add_rows(
            f"{name}:mismatch",
            bad,
            self._episode_rows,
            name,
            lambda i: (
                f"episode {ids[i].as_py()!r}: given {name} {_num_text(g[i])}, the {what} is "
                f"{_num_text(d[i]) if known[i] else 'null (no step has a reward)'}"
            ),
        )


def _raw_ids(steps: pa.RecordBatch) -> pa.Array | None:
    """The episode ids of an unconverted batch as strings (bytes kept as they are), or None."""
    if steps.schema.get_all_field_indices("episode_id") != [
        steps.schema.get_field_index("episode_id")
    ]:
        return None
    ids = steps.column("episode_id")
    t = ids.type
    try:
        if pa.types.is_dictionary(t):
            ids = ids.dictionary_decode()
            t = ids.type
        if pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t):
            ids = ids.cast(pa.binary())
            t = ids.type
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            ids = ids.view(pa.string() if pa.types.is_binary(t) else pa.large_string())
        if _is_stringish(ids.type) or pa.types.is_integer(ids.type):
            return ids.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    return None


def _num_text(x: np.float64) -> str:
    return repr(float(x))


def _return(ep: _OpenEpisode) -> float | None:
    return float(np.add.reduceat(ep.rewards, [0])[0]) if ep.reward_count else None


def _empty_episodes(tensors: TensorTypes) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=tensors.episode_schema())


def _floats(arr: pa.Array) -> npt.NDArray[np.float64]:
    filled = pc.fill_null(arr, 0.0) if arr.null_count else arr
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.float64)


def _flags(arr: pa.Array) -> npt.NDArray[np.bool_]:
    filled = pc.fill_null(arr, False) if arr.null_count else arr
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=bool)


def derive_episodes(steps: pa.Table | pa.RecordBatch, episodes: pa.Table | None = None) -> pa.Table:
    """Compute the episode table of a step table.

    ``return`` is the sum of the episode's rewards (null when none has one), ``num_steps`` its
    number of steps,
    ``termination_reason`` "terminated" or "truncated" from its last step (null when it has no
    final step), ``cost_usd`` the sum of its steps' costs (null when none has one), ``invalid``
    false. Given ``episodes`` attributes are merged by episode id (see `EpisodeBuilder`).
    The steps are not validated: use `validate_steps` for that.

    Args:
        steps: a step table (normalised first if it is not in `STEP_SCHEMA`).
        episodes: given episode attributes, or None.

    Returns:
        One row per episode, in order of first step, in `EPISODE_SCHEMA`.

    Raises:
        RolloutValidationError: the steps or attributes cannot be normalised, or a given
            return or step count disagrees with the steps.
    """
    table = normalise_steps(steps)
    tensors = TensorTypes()
    tensors.fields.update({n: table.schema.field(n) for n in ("obs", "action")})
    builder = EpisodeBuilder(tensors=tensors)
    if episodes is not None:
        builder.add_attrs(normalise_episodes(episodes))
    out = [builder.feed(b) for b in table.to_batches()]
    out.append(builder.finish())
    problems = builder.collector.problems()
    if problems:
        raise RolloutValidationError("episodes", problems)
    schema = tensors.episode_schema()
    return pa.Table.from_batches([conform_batch(b, schema) for b in out], schema=schema)


# --------------------------------------------------------------------------------------------
# Python rows


def _tensor_from_values(
    values: list[Any], name: str, c: ProblemCollector
) -> tuple[pa.Array, pa.Field] | None:
    """A tensor column from Python values, and its field.

    Numpy arrays keep their dtype and shape (all must agree); lists, tuples and numbers become
    the type pyarrow infers (float64, int64 or bool) with no fixed shape.
    """
    present = [v for v in values if v is not None]
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
        values = [_to_utc(v) if isinstance(v, dt.datetime) else v for v in values]
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


def _to_utc(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def _rows_to_columns(
    rows: Sequence[Mapping[str, Any]], schema: pa.Schema, what: str
) -> tuple[list[pa.Field], list[pa.Array | None], ProblemCollector]:
    c = ProblemCollector()
    seen: set[str] = set()
    for i, row in enumerate(rows):
        for key in row:
            if key not in seen:
                seen.add(key)
                if schema.get_field_index(key) < 0:
                    c.add(
                        f"unknown:{key}",
                        f"unknown {what} field: rollout schema v2 has no such column "
                        "(keep other fields in 'extras')",
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
    fields, arrays, c = _rows_to_columns(rows, STEP_SCHEMA, "step")
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
    fields, arrays, c = _rows_to_columns(rows, EPISODE_ATTR_SCHEMA, "episode")
    problems = c.problems()
    if problems:
        raise RolloutValidationError("episode rows", problems)
    if not rows:
        return EPISODE_ATTR_SCHEMA.empty_table()
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    return normalise_episodes(table)


# --------------------------------------------------------------------------------------------
# Files


_HDF5_MAGIC: Final = b"\x89HDF\r\n\x1a\n"
_OTHER_MAGIC: Final = (
    (b"PK\x03\x04", "a ZIP archive (or .npz)"),
    (b"\x93NUMPY", "a numpy .npy file"),
    (b"\x80", "a Python pickle"),
    (b"ustar", "a tar archive"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ", "xz data"),
    (b"\x0a\x0dTFRecord", "a TFRecord file"),
)
ROLLOUT_JSONL: Final = "rollout-jsonl"
"""Step rows as JSON lines (what ``export --format jsonl`` writes): one step per line."""


def _refuse(
    path: str | os.PathLike[str], message: str, line: int | None = None
) -> RolloutValidationError:
    return RolloutValidationError(str(path), [Problem(None, None, message, line=line)])


def _table_kind(names: Sequence[str], path: str | os.PathLike[str], container: str) -> str:
    """A Parquet/Arrow file in the rollout schema, or rows of a record format."""
    keys = set(names)
    if {"episode_id", "step"} <= keys:
        return {"parquet": "parquet"}.get(container, container)
    if {"observations", "actions", "rewards", "terminations"} <= keys:
        raise _refuse(
            path,
            "this looks like one episode of a Minari dataset (arrow backend); give the "
            "dataset directory (the one holding metadata.json, or its parent)",
        )
    kind = kind_of_record(keys)
    if kind is None:
        raise _refuse(
            path,
            f"cannot tell the format from the columns {sorted(keys)}: want the rollout schema "
            "(episode_id, step, ...), or the columns of a chat, TRL or verl record "
            "(see schemas/rollout-inputs.md)",
        )
    return kind


def detect_format(path: str | os.PathLike[str]) -> str:
    """Name the format of an input file or directory.

    A directory is a Minari dataset (``metadata.json`` with a ``data_format``, in it or in its
    ``data/``). Parquet and Arrow IPC are recognised by their magic bytes and named by their
    columns: the rollout schema (``episode_id``, ``step``, ...) or the fields of a record format
    (TRL's completions table, a TRL dataset, chat rollouts, a verl dump). JSONL is named by the
    keys of its first record; compressed with gzip or zstd it is recognised by its magic bytes,
    whatever the file is named. Other known kinds of file (HDF5, ZIP, pickle, ...) are named in
    the error.

    Args:
        path: the input file or directory.

    Returns:
        One of `FORMATS`, or ``rollout-jsonl``.

    Raises:
        RolloutValidationError: the input is empty, of no known format, a compressed Parquet
            or Arrow file, compressed data that is corrupt or over the limits, or its name is
            not UTF-8 (Arrow opens files by UTF-8 name, and a record names its files).
        OSError: the file cannot be read.
    """
    subject = Path(path)
    try:
        os.fsencode(subject).decode("utf-8")
    except UnicodeDecodeError as e:
        shown = os.fsencode(subject).decode("utf-8", "backslashreplace")
        raise _refuse(shown, f"{shown}: the file name is not valid UTF-8 (byte {e.start}); "
                      "rename the file") from e
    if subject.is_dir():
        if minari_root(subject) is not None:
            return "minari"
        raise _refuse(
            path,
            "a directory that is not a Minari dataset (no metadata.json with a data_format in "
            "it or in its data/); give rollout files, or a Minari dataset directory",
        )
    with open(path, "rb") as f:
        head = f.read(16)
    if head[:4] == b"PAR1":
        try:
            names = pq.ParquetFile(path).schema_arrow.names
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
            raise _refuse(path, f"Parquet file cannot be read: {e}") from e
        return _table_kind(names, path, "parquet")
    if head[:6] == b"ARROW1" or head[:4] == b"\xff\xff\xff\xff":
        container = "arrow" if head[:6] == b"ARROW1" else "arrow-stream"
        try:
            with pa.memory_map(str(path)) as source:
                reader: Any = (
                    ipc.open_file(source) if container == "arrow" else ipc.open_stream(source)
                )
                names = reader.schema.names
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
            raise _refuse(path, f"Arrow IPC file cannot be read: {e}") from e
        return _table_kind(names, path, container)
    if head[:8] == _HDF5_MAGIC:
        raise _refuse(
            path,
            "this looks like HDF5; for Minari datasets give the dataset directory (the one "
            "holding metadata.json, or its parent)",
        )
    for magic, what in _OTHER_MAGIC:
        if head.startswith(magic):
            raise _refuse(
                path, f"this looks like {what}, not a rollout input (see schemas/rollout-inputs.md)"
            )
    with _open_jsonl(subject, check_end=False) as (codec, f):
        if codec is not None:
            try:
                inner = f.peek(8)[:8]
            except _InputError as e:
                raise _refused(subject, str(e), None) from e
            if inner[:4] == b"PAR1" or inner[:6] == b"ARROW1" or inner[:4] == b"\xff" * 4:
                raise _refused(
                    subject,
                    f"{codec}-compressed Parquet or Arrow IPC is not read: both compress "
                    "internally; decompress the file",
                    None,
                )
        for number, raw in _read_lines(f, subject):
            if raw.strip():
                return _jsonl_kind(raw, number, str(path))
    raise _refuse(path, "file is empty, want a rollout input (see FORMATS)")


def _jsonl_kind(raw: bytes, number: int, subject: str) -> str:
    def fail(message: str) -> RolloutValidationError:
        return RolloutValidationError(subject, [Problem(None, None, message, line=number)])

    try:
        # Decoded as the reader decodes it, so both report bad bytes alike.
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise fail(f"not valid UTF-8 ({e.reason} at byte {e.start})") from e
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise fail(f"not Parquet, Arrow IPC, or JSON lines: {e}") from e
    except RecursionError as e:
        raise fail("not accepted: JSON nested too deeply") from e
    if not isinstance(obj, dict):
        raise fail(f"JSON {type(obj).__name__}, want an object per line")
    if {"episode_id", "step"} <= set(obj) and "completion" not in obj:
        return ROLLOUT_JSONL
    if {"data_format", "observation_space", "action_space"} <= set(obj):
        raise fail(
            "this looks like a Minari dataset's metadata.json; give the dataset directory (the "
            "one holding it, or its parent)"
        )
    kind = kind_of_record(set(obj))
    if kind is None:
        raise fail(
            f"cannot tell the format from keys {sorted(obj)}: want 'messages' (chat), "
            "'prompt'+'completion' (TRL completions or prompt-completion; with 'label': KTO), "
            "'chosen'+'rejected' (TRL preference), 'input'/'prompt'+'output'/'response' (verl), "
            "or 'episode_id'+'step' (rollout rows)"
        )
    return kind


def _container(path: Path) -> str:
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] == b"PAR1":
        return "parquet"
    if head[:6] == b"ARROW1":
        return "arrow"
    if head[:4] == b"\xff\xff\xff\xff":
        return "arrow-stream"
    return "jsonl"


def iter_rollout_chunks(
    path: str | os.PathLike[str],
    fmt: str | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    *,
    episodes: str | os.PathLike[str] | None = None,
    options: ReaderOptions | None = None,
) -> Iterator[RolloutChunk]:
    """Stream an input as chunks of at most about ``batch_rows`` steps.

    Parquet is read row group by row group, Arrow IPC batch by batch, JSONL line by line, a
    Minari dataset episode by episode; no more than one chunk is held in memory. An episode of a
    record format is never split, so a chunk may exceed ``batch_rows`` by one episode; a chunk
    is also cut once its text passes 64 MiB. Parquet and Arrow batches in the rollout schema are
    passed through as read (normalisation happens when writing). JSONL compressed with gzip or
    zstd (told by its magic bytes, also when ``fmt`` is given) is decompressed as a stream; line
    numbers count decompressed lines. The first chunk's ``meta`` names the format (and, for
    Minari, the spaces, environment spec and dataset metadata).

    Record problems (bad JSON, missing or mistyped fields, repeated episode ids) are collected
    over the whole file; good records are still yielded, and the error is raised after the last
    chunk, so the caller sees every problem at once and must treat what it received as void.

    Args:
        path: the input file, or a Minari dataset directory.
        fmt: one of `FORMATS` (or ``rollout-jsonl``), or None to `detect_format`.
        batch_rows: target rows per chunk.
        episodes: a Parquet, Arrow or rollout JSONL file of episode attributes, for steps in
            the rollout schema; read whole (episode tables are small) and yielded with the first
            chunk.
        options: choices the input cannot express (TRL reward weights, episode id prefix).

    Yields:
        `RolloutChunk` objects in input order.

    Raises:
        RolloutValidationError: the format is unknown, or records are bad (listing each with
            its line or row), or a line is over `MAX_LINE_BYTES`, or compressed data is
            corrupt, truncated or over `MAX_DECOMPRESSED_BYTES` (one problem naming the file,
            after those of the lines before it).
        OSError: the file cannot be read.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows is {batch_rows}, want >= 1")
    opts = options or ReaderOptions()
    kind = fmt if fmt is not None else detect_format(path)
    if kind not in (*FORMATS, ROLLOUT_JSONL):
        raise _refuse(path, f"format {kind!r} is unknown, want one of {', '.join(FORMATS)}")
    meta = {"format": kind}
    attrs = _read_episode_file(episodes) if episodes is not None else None
    if kind == "minari":
        if attrs is not None:
            raise ValueError("episodes= is for steps in the rollout schema; Minari has its own")
        from .minari_io import iter_minari_chunks

        root = minari_root(Path(path))
        if root is None:
            raise _refuse(path, "not a Minari dataset directory (no metadata.json)")
        yield from iter_minari_chunks(root, batch_rows, opts)
        return
    container = "directory" if Path(path).is_dir() else _container(Path(path))
    if kind in RECORD_FORMATS:
        if attrs is not None:
            raise ValueError("episodes= is for steps in the rollout schema; records have their own")
        if container == "jsonl":
            yield from _iter_jsonl(Path(path), kind, batch_rows, opts)
        else:
            yield from _iter_table_records(Path(path), container, kind, batch_rows, opts)
        return
    if kind == ROLLOUT_JSONL:
        first = True
        for batch in _iter_rollout_jsonl(Path(path), batch_rows):
            yield RolloutChunk(batch, attrs, meta if first else None)
            attrs, first = None, False
        if first:
            yield RolloutChunk(pa.RecordBatch.from_pylist([], schema=STEP_SCHEMA), attrs, meta)
        return
    if container != kind and not (
        container in ("arrow", "arrow-stream") and kind in ("arrow", "arrow-stream")
    ):
        raise _refuse(path, f"format {kind!r} was given, the file is {container}")
    first = True
    for batch in _iter_arrow(Path(path), container, batch_rows):
        yield RolloutChunk(batch, attrs, meta if first else None)
        attrs, first = None, False
    if first:  # steps file held no rows
        yield RolloutChunk(pa.RecordBatch.from_pylist([], schema=STEP_SCHEMA), attrs, meta)


def iter_batch_inputs(
    paths: Sequence[str | os.PathLike[str]],
    fmt: str | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    *,
    episodes: str | os.PathLike[str] | None = None,
    options: ReaderOptions | None = None,
) -> Iterator[RolloutChunk]:
    """Stream several inputs as the chunks of one batch (see `iter_rollout_chunks`).

    Default episode ids (``line-<n>``, ``row-<n>``, a Minari episode's number) would repeat
    from one file to the next, so with several inputs they are prefixed with the input's name,
    and its position when names repeat: ``1.jsonl:line-3``, ``2:steps.jsonl:line-3``. Episode
    ids the inputs give themselves are kept, and must be unique over the whole batch.

    Args:
        paths: the inputs, in order.
        fmt: the format of every input, or None to detect each.
        batch_rows: target rows per chunk.
        episodes: an episode attribute file for the whole batch (given with the first input).
        options: reader choices; its ``id_prefix`` is put before each input's prefix.
    """
    base = options or ReaderOptions()
    names = [Path(p).name for p in paths]
    for n, p in enumerate(paths):
        prefix = base.id_prefix
        if len(paths) > 1:
            name = names[n] if names.count(names[n]) == 1 else f"{n}:{names[n]}"
            prefix = f"{prefix}{name}:"
        opts = dataclasses.replace(base, id_prefix=prefix)
        yield from iter_rollout_chunks(
            p, fmt, batch_rows, episodes=episodes if n == 0 else None, options=opts
        )


def iter_step_batches(
    path: str | os.PathLike[str],
    fmt: str | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Stream an input file's steps as record batches (see `iter_rollout_chunks`).

    Episode attributes the input carries (JSONL task ids, judge scores, ...) are dropped; use
    `iter_rollout_chunks` to keep them.

    Args:
        path: the input file.
        fmt: one of `FORMATS`, or None to detect it.
        batch_rows: target rows per batch.

    Yields:
        Step batches: in `STEP_SCHEMA` for records, as stored for Parquet/Arrow.

    Raises:
        RolloutValidationError: as `iter_rollout_chunks`.
    """
    for chunk in iter_rollout_chunks(path, fmt, batch_rows):
        yield chunk.steps


def _read_episode_file(path: str | os.PathLike[str]) -> pa.RecordBatch:
    p = Path(path)
    container = _container(p)
    if container == "parquet":
        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
            raise _refuse(path, f"episode file: Parquet file cannot be read: {e}") from e
    elif container in ("arrow", "arrow-stream"):
        table = pa.Table.from_batches(list(_iter_arrow(p, container, DEFAULT_BATCH_ROWS)))
    elif container == "jsonl":
        table = _jsonl_rows_table(p, EPISODE_ATTR_SCHEMA, "episode")
    else:
        raise _refuse(path, "episode file: want Parquet, Arrow or rollout JSON lines")
    out = normalise_episodes(table)
    return (
        out.combine_chunks().to_batches()[0]
        if out.num_rows
        else pa.RecordBatch.from_pylist([], schema=out.schema)
    )


def _rows_for(batch_rows: int, nbytes: int, rows: int) -> int:
    """Rows per chunk: ``batch_rows``, fewer when rows average over ``CHUNK_BYTES / batch_rows``."""
    if rows <= 0:
        return batch_rows
    per_row = max(1, nbytes // rows)
    return max(1, min(batch_rows, CHUNK_BYTES // per_row))


def _fixed_row_bytes(schema: pa.Schema) -> int | None:
    """Bytes a row takes in Arrow memory when every column has a fixed width (numbers, flags,
    fixed-size lists of them), else None."""
    bits = 0
    for field in schema:
        t, n = field.type, 1
        while pa.types.is_fixed_size_list(t):
            n *= t.list_size
            t = t.value_type
        if pa.types.is_dictionary(t) or isinstance(t, pa.ExtensionType):
            return None
        try:
            bits += n * t.bit_width
        except ValueError:  # strings, lists, structs...: no fixed width
            return None
    return (bits + 7) // 8


def _iter_arrow(path: Path, kind: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The batches of a Parquet or Arrow IPC input; data pyarrow cannot decode (a corrupt page,
    a bad IPC message, a column name that is not UTF-8) refuses the file, naming it."""
    try:
        yield from _arrow_batches(path, kind, batch_rows)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        what = "Parquet file" if kind == "parquet" else "Arrow IPC file"
        raise _refuse(path, f"{what} cannot be read: {e}") from e


def _arrow_batches(path: Path, kind: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    if kind == "parquet":
        # Streamed through a 1 MiB buffer: pyarrow's default reads whole column chunks of a
        # row group into memory before the first row (all of a 1 GB row group, slowly).
        pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
        meta = pf.metadata
        # The row size in memory: from the schema when every column has a fixed width, else
        # from the first rows read (the file's sizes are of encoded data, which can be far
        # smaller); a later batch still over the bound is sliced.
        fixed = _fixed_row_bytes(pf.schema_arrow)
        if fixed is not None:
            size = fixed * meta.num_rows
        else:
            probe = next(pf.iter_batches(batch_size=16), None)
            size = 0 if probe is None else probe.nbytes * meta.num_rows // max(1, len(probe))
        for batch in pf.iter_batches(batch_size=_rows_for(batch_rows, size, meta.num_rows)):
            step = _rows_for(batch_rows, batch.nbytes, batch.num_rows)
            for start in range(0, max(batch.num_rows, 1), step):
                yield batch.slice(start, step)
        return
    with pa.memory_map(str(path)) as source:
        reader: Any = ipc.open_file(source) if kind == "arrow" else ipc.open_stream(source)
        batches: Iterable[pa.RecordBatch] = (
            (reader.get_batch(i) for i in range(reader.num_record_batches))
            if kind == "arrow"
            else reader
        )
        for batch in batches:
            # An IPC file's buffers are taken as they are (offsets, lengths): check them all
            # before anything reads a value, or a hostile file points reads out of bounds.
            batch.validate(full=True)
            step = _rows_for(batch_rows, batch.nbytes, batch.num_rows)
            for start in range(0, max(batch.num_rows, 1), step):
                yield batch.slice(start, step)


def _iter_table_records(
    path: Path, container: str, kind: str, batch_rows: int, opts: ReaderOptions
) -> Iterator[RolloutChunk]:
    """Rows of a Parquet/Arrow file of a record format (e.g. TRL's completions table)."""
    c = ProblemCollector()
    builder = ChunkBuilder(c, opts, {"format": kind})
    row = 0
    for batch in _iter_arrow(path, container, 1024):
        for obj in batch.to_pylist():
            rec = RecordProblems(row, c, unit="row")
            row += 1
            builder.add(map_record(kind, obj, rec, opts), rec)
            if builder.full(batch_rows):
                yield builder.flush()
    if builder.rows or row == 0:
        yield builder.flush()
    problems = c.problems()
    if problems:
        raise RolloutValidationError(str(path), problems)


def _jsonl_objects(
    path: Path, c: ProblemCollector
) -> Iterator[tuple[RecordProblems, dict[str, Any]]]:
    """Each non-blank line of a JSONL file, strictly decoded; bad lines are reported."""
    decoder = json.JSONDecoder(object_pairs_hook=_strict_object, parse_constant=_refuse_constant)
    with _open_jsonl(path, check_end=True) as (_, f):
        try:
            for number, raw in _read_lines(f, path):
                if not raw.strip():
                    continue
                rec = RecordProblems(number, c)
                obj = _decode(decoder, raw, rec)
                if obj is not None:
                    yield rec, obj
        except RolloutValidationError as e:
            # The rest of the file cannot be read: report the lines before it, then the cause.
            raise RolloutValidationError(str(path), [*c.problems(), *e.problems]) from e


def _iter_jsonl(
    path: Path, kind: str, batch_rows: int, opts: ReaderOptions
) -> Iterator[RolloutChunk]:
    c = ProblemCollector()
    builder = ChunkBuilder(c, opts, {"format": kind})
    seen = False
    for rec, obj in _jsonl_objects(path, c):
        seen = True
        builder.add(map_record(kind, obj, rec, opts), rec)
        if builder.full(batch_rows):
            yield builder.flush()
    if builder.rows or not seen:
        yield builder.flush()
    problems = c.problems()
    if problems:
        raise RolloutValidationError(str(path), problems)


def _jsonl_rows_table(path: Path, schema: pa.Schema, what: str) -> pa.Table:
    c = ProblemCollector()
    rows = [obj for _, obj in _jsonl_objects(path, c)]
    fields, arrays, c2 = _rows_to_columns(_json_rows(rows, schema), schema, what)
    problems = c.problems() + c2.problems()
    if problems:
        raise RolloutValidationError(str(path), problems)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields)) if fields else pa.table({})


def _json_rows(rows: list[dict[str, Any]], schema: pa.Schema) -> list[dict[str, Any]]:
    """Rows as ``export --format jsonl`` writes them: JSON values back to column values."""
    for r in rows:
        for key in ("extras",):
            v = r.get(key)
            if isinstance(v, dict):
                r[key] = {k: typed_json.loads(json.dumps(x)) for k, x in v.items()}
        for key in ("info", "reset_info"):
            v = r.get(key)
            if v is not None and not isinstance(v, str):
                r[key] = typed_json.loads(json.dumps(v))
    return rows


def _iter_rollout_jsonl(path: Path, batch_rows: int) -> Iterator[pa.RecordBatch]:
    c = ProblemCollector()
    rows: list[dict[str, Any]] = []

    def flush() -> pa.RecordBatch | None:
        fields, arrays, c2 = _rows_to_columns(_json_rows(rows, STEP_SCHEMA), STEP_SCHEMA, "step")
        rows.clear()
        for p in c2.problems():
            c.add(f"{p.column}:{p.message[:24]}", p.message, column=p.column)
        if c2.count:
            return None
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))

    for _, obj in _jsonl_objects(path, c):
        rows.append(obj)
        if len(rows) >= batch_rows:
            out = flush()
            if out is not None:
                yield out
    if rows:
        out = flush()
        if out is not None:
            yield out
    problems = c.problems()
    if problems:
        raise RolloutValidationError(str(path), problems)


# --------------------------------------------------------------------------------------------
# Reading JSONL, plain or compressed

_GZIP_MAGIC: Final = b"\x1f\x8b"
_ZSTD_MAGIC: Final = 0xFD2FB528
_ZSTD_SKIPPABLE: Final = 0x184D2A50
"""Skippable zstd frames (user data) have magic numbers 0x184D2A50 to 0x184D2A5F."""
_READ_BUFFER: Final = 1 << 20


class _InputError(Exception):
    """Compressed data that cannot be read on, raised from inside a buffered read.

    Never leaves this module: `_read_lines` and `detect_format` turn it into a
    `RolloutValidationError` naming the file (and the line being read).
    """


def _refused(path: Path, message: str, line: int | None) -> RolloutValidationError:
    # The path is in the message too: `write_steps_parquet` re-raises problems under the
    # subject of a whole batch, which may name several files.
    return RolloutValidationError(str(path), [Problem(None, None, f"{path}: {message}", line=line)])


def _codec(head: bytes) -> str | None:
    """The compression of a file from its first 4 bytes: "gzip", "zstd", or None (plain)."""
    if head[:2] == _GZIP_MAGIC:
        return "gzip"
    if len(head) >= 4:
        magic = int.from_bytes(head[:4], "little")
        if magic == _ZSTD_MAGIC or magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE:
            return "zstd"
    return None


class _Decompressed(io.RawIOBase):
    """The decompressed bytes of a gzip or zstd file, counted against a limit.

    Each read decompresses at most the caller's buffer, so memory stays constant whatever the
    compression ratio. Corrupt data and the limit raise `_InputError`.
    """

    def __init__(self, codec: str, source: BinaryIO, limit: int) -> None:
        self._codec = codec
        self._limit = limit
        self._total = 0
        self._inner: Any
        self._errors: tuple[type[Exception], ...]
        if codec == "gzip":
            self._inner = gzip.GzipFile(fileobj=source, mode="rb")
            self._errors = (EOFError, gzip.BadGzipFile, zlib.error)
        else:
            import zstandard  # lazily: only zstd inputs need it

            # Concatenated frames (pzstd, `cat`) are one stream; the library's default window
            # limit (128 MiB) bounds the decoder's own memory.
            self._inner = zstandard.ZstdDecompressor().stream_reader(
                source, read_across_frames=True, closefd=False
            )
            self._errors = (zstandard.ZstdError,)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        try:
            # One step at a time, so the bytes decoded before an error are passed on first
            # and the error names the line it cuts.
            n = int(self._inner.readinto1(buffer))
        except self._errors as e:
            # gzip raises EOFError for data that stops inside a member: a truncated file.
            what = "ends early (truncated?)" if isinstance(e, EOFError) else "is corrupt"
            raise _InputError(f"{self._codec} data {what}: {e}") from e
        self._total += n
        if self._total > self._limit:
            raise _InputError(
                f"decompresses to over {self._limit:,} bytes, want at most "
                f"{self._limit:,} (MAX_DECOMPRESSED_BYTES): refused as a possible "
                "decompression bomb"
            )
        return n

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()


def _zstd_truncation(path: Path) -> str | None:
    """Why a zstd file ends inside a frame, or None when its last frame is whole.

    The zstd stream reader takes a truncated frame for the end of the data, so the frames are
    walked first: frame and block headers only (RFC 8878, section 3.1), seeking over block
    contents. Anything that is not a frame is left for the decoder to report as corrupt.
    """
    size = path.stat().st_size
    pos = frame = 0
    with open(path, "rb", buffering=0) as f:

        def read(n: int) -> bytes:
            f.seek(pos)
            return f.read(n)

        while pos < size:
            frame += 1
            head = read(8)
            magic = int.from_bytes(head[:4], "little") if len(head) >= 4 else None
            if magic is not None and magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE and len(head) == 8:
                pos += 8 + int.from_bytes(head[4:8], "little")
            elif magic == _ZSTD_MAGIC and len(head) >= 5:
                fhd = head[4]
                single = fhd >> 5 & 1
                dict_id = (0, 1, 2, 4)[fhd & 3]
                content_size = (0, 2, 4, 8)[fhd >> 6] or single
                pos += 5 + (1 - single) + dict_id + content_size
                last = False
                while not last and pos <= size:
                    block = read(3)
                    if len(block) < 3:
                        pos = size + 1
                        break
                    header = int.from_bytes(block, "little")
                    last = bool(header & 1)
                    # An RLE block (type 1) holds one byte, repeated block-size times.
                    pos += 3 + (1 if header >> 1 & 3 == 1 else header >> 3)
                pos += 4 * (fhd >> 2 & 1)  # content checksum
            elif (
                magic is not None and magic != _ZSTD_MAGIC and magic & 0xFFFFFFF0 != _ZSTD_SKIPPABLE
            ):
                return None
            else:  # a frame header cut short
                pos = size + 1
            if pos > size:
                return (
                    f"zstd data ends early (truncated?): frame {frame} needs at least "
                    f"{pos:,} bytes, the file has {size:,}"
                )
    return None


@contextmanager
def _open_jsonl(path: Path, *, check_end: bool) -> Iterator[tuple[str | None, io.BufferedReader]]:
    """Open a JSONL file, plain or compressed, for `_read_lines`.

    Args:
        path: the file.
        check_end: check first that a zstd file does not end inside a frame (a pass over its
            headers; gzip reports a truncated member itself).

    Yields:
        The compression ("gzip", "zstd" or None) and a reader of the decompressed bytes.

    Raises:
        RolloutValidationError: a zstd file ends inside a frame.
    """
    with ExitStack() as stack:
        f = stack.enter_context(open(path, "rb"))
        codec = _codec(f.peek(4)[:4])
        if codec is None:
            yield None, f
            return
        if codec == "zstd" and check_end:
            problem = _zstd_truncation(path)
            if problem is not None:
                raise _refused(path, problem, None)
        raw = stack.enter_context(_Decompressed(codec, f, MAX_DECOMPRESSED_BYTES))
        yield codec, stack.enter_context(io.BufferedReader(raw, _READ_BUFFER))


def _read_lines(f: io.BufferedReader, path: Path) -> Iterator[tuple[int, bytes]]:
    """Yield the 1-based number and bytes of each line, refusing one over `MAX_LINE_BYTES` and
    more than `MAX_BLANK_BYTES` of blank lines in all.

    Raises:
        RolloutValidationError: a line is too long, too much blank input, or the data cannot be
            read on (one problem naming the file and the line being read).
    """
    limit = MAX_LINE_BYTES
    blank = 0
    number = 0
    while True:
        number += 1
        try:
            raw = f.readline(limit + 1)
        except _InputError as e:
            raise _refused(path, str(e), number) from e
        if not raw:
            return
        if len(raw) > limit:
            raise _refused(
                path,
                f"line is over {limit:,} bytes, want at most {limit:,} (MAX_LINE_BYTES)",
                number,
            )
        if not raw.strip():
            blank += len(raw)
            if blank > MAX_BLANK_BYTES:
                raise _refused(
                    path,
                    f"over {MAX_BLANK_BYTES:,} bytes of blank lines, want at most "
                    f"{MAX_BLANK_BYTES:,} (MAX_BLANK_BYTES): refused as a possible "
                    "decompression bomb",
                    number,
                )
        yield number, raw


# --------------------------------------------------------------------------------------------
# JSON lines: strict decoding


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        keys = [k for k, _ in pairs]
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"duplicate key {dup!r}")
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _decode(decoder: json.JSONDecoder, raw: bytes, rec: RecordProblems) -> dict[str, Any] | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        rec.error(None, f"not valid UTF-8 ({e.reason} at byte {e.start})")
        return None
    try:
        obj, end = decoder.raw_decode(text.strip())
        if end != len(text.strip()):
            raise ValueError(f"extra data after the JSON value at column {end + 1}")
    except ValueError as e:
        rec.error(None, f"not valid JSON: {e}")
        return None
    except RecursionError:
        rec.error(None, "not accepted: JSON nested too deeply")
        return None
    if SURROGATE_ESCAPE.search(text):
        bad = lone_surrogate(obj)
        if bad is not None:
            rec.error(None, f"not valid Unicode: the string {bad[:40]!r} holds a lone surrogate "
                      "(a \\ud800-\\udfff escape without its pair)")
            return None
    if not isinstance(obj, dict):
        rec.error(None, f"JSON {json_type(obj)}, want an object")
        return None
    return obj
