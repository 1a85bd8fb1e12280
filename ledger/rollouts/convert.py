"""Rollout inputs: normalisation into schema v1, derived episodes, and streaming readers.

Scope:
  * `normalise_steps` turns a step table in schema v1 or the minimal classic form
    (``episode_id, step, obs, action, reward, terminated, truncated``) into `STEP_SCHEMA`:
    types are widened or narrowed where exact, missing optional columns become null,
    ``is_first`` and ``is_last`` are derived. `normalise_episodes` does the same for episode
    attributes.
  * `derive_episodes` computes the episode table (return, num_steps, termination reason,
    cost) from steps, merged with any episode attributes the input gave.
  * Readers that stream an input as `RolloutChunk` objects of bounded size: Parquet, Arrow IPC
    (file and stream), and JSONL of chat rollouts, TRL dumps and verl dumps, plain or
    compressed with gzip or zstd (recognised by magic bytes, decompressed as a stream, refused
    past `MAX_DECOMPRESSED_BYTES` or a line past `MAX_LINE_BYTES`). A reader never holds more
    than one chunk of the input in memory.
  * `rows_to_table` / `rows_to_episodes` for the Python API (a list of dicts).
Non-scope: content validation (``validate.py``; these functions check only what they need in
order to convert), writing (``parquet_io.py``), and compressed Parquet or Arrow files (both
compress internally; a gzip or zstd wrapper around them is refused).
Spec: ``schemas/rollout.v1.md`` (the tables) and ``schemas/rollout-inputs.md`` (each input
mapping).
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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

from .schema import (
    EPISODE_ATTR_SCHEMA,
    EPISODE_SCHEMA,
    STEP_INPUT_REQUIRED,
    STEP_SCHEMA,
    VECTOR_TYPE,
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
    "RolloutChunk",
    "StepNormaliser",
    "derive_episodes",
    "detect_format",
    "iter_rollout_chunks",
    "iter_step_batches",
    "normalise_episodes",
    "normalise_steps",
    "rows_to_episodes",
    "rows_to_table",
]

DEFAULT_BATCH_ROWS: Final = 65536
"""Rows per streamed batch."""

CHUNK_TEXT_BYTES: Final = 64 << 20
"""A JSONL chunk is cut early once its text fields hold this many bytes (bounds memory)."""

MAX_LINE_BYTES: Final = 64 << 20
"""Longest accepted JSONL line (one episode), newline included; a longer line refuses the file.

Read through a bounded buffer, so a line of any length (for instance one decompressed from a
few bytes) costs at most this much memory.
"""

MAX_DECOMPRESSED_BYTES: Final = 64 << 30
"""Most bytes a gzip or zstd JSONL file may decompress to; past it the file is refused as a
possible decompression bomb. Split larger inputs into several files of one batch."""

FORMATS: Final = ("parquet", "arrow", "arrow-stream", "chat-jsonl", "trl-jsonl", "verl-jsonl")
"""Input formats `detect_format` recognises."""

TRUNCATION_REASONS: Final = frozenset(
    {"truncated", "length", "max_tokens", "max_turns", "timeout", "time_limit"}
)
"""JSONL ``termination_reason`` values that mark the last step truncated, not terminated."""

_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US: Final = dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class RolloutChunk:
    """A slice of an input: steps in `STEP_SCHEMA`, plus attributes of some episodes.

    Attributes:
        steps: step rows, in `STEP_SCHEMA`.
        episodes: episode attributes given by the input (`EPISODE_ATTR_SCHEMA`), for episodes
            whose steps are in this chunk or another one; None when the input gives none.
    """

    steps: pa.RecordBatch
    episodes: pa.RecordBatch | None = None


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


def _want_text(want: pa.DataType) -> str:
    return "a list or fixed-size list of numbers, or a number" if want == VECTOR_TYPE else str(want)


def _coerce(arr: pa.Array, field: pa.Field, offset: int, c: ProblemCollector) -> pa.Array | None:
    """Convert one input column to its schema type, or record why not and return None."""
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
        if want == VECTOR_TYPE:
            return _coerce_vector(arr, name, offset, c)
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
        c.add(f"{name}:convert", f"cannot convert {t} to {_want_text(want)}: {e}", column=name)
        return None
    c.add(f"{name}:type", f"type {t}, want {_want_text(want)}", column=name)
    return None


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _coerce_vector(arr: pa.Array, name: str, offset: int, c: ProblemCollector) -> pa.Array | None:
    t = arr.type
    if (
        pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    ) and _is_number(t.value_type):
        out = arr.cast(VECTOR_TYPE)
        if pa.types.is_float64(t.value_type):
            narrow = pc.list_flatten(out)
            fixed = _check_float32_range(
                pc.list_flatten(arr), narrow, pc.list_parent_indices(arr), name, offset, c
            )
            if fixed is not narrow:
                out = _with_values(out, fixed)
        return out
    if _is_number(t):
        valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        values = arr.drop_null().cast(pa.float32())
        if pa.types.is_float64(t):
            values = _check_float32_range(
                arr.drop_null(), values, pa.array(np.flatnonzero(valid)), name, offset, c
            )
        offsets = np.zeros(len(arr) + 1, dtype=np.int32)
        np.cumsum(valid, out=offsets[1:])
        mask = None if arr.null_count == 0 else pa.array(~valid)
        return pa.ListArray.from_arrays(pa.array(offsets), values, type=VECTOR_TYPE, mask=mask)
    c.add(f"{name}:type", f"type {t}, want {_want_text(VECTOR_TYPE)}", column=name)
    return None


def _check_float32_range(
    wide: pa.Array, narrow: pa.Array, parents: pa.Array, name: str, offset: int, c: ProblemCollector
) -> pa.Array:
    """Report rows where a finite float64 became infinite as float32.

    Returns ``narrow``, or when a row is reported, a copy with those values clamped to the
    float32 range: validation would otherwise report the same value again as infinite. The
    copy is never written, since a problem is on record.
    """
    w = np.asarray(wide.to_numpy(zero_copy_only=False))
    n = np.asarray(narrow.to_numpy(zero_copy_only=False))
    over = np.isfinite(w) & ~np.isfinite(n)
    if not over.any():
        return narrow
    rows = np.unique(np.asarray(parents.to_numpy(zero_copy_only=False))[over])
    c.add_rows(
        f"{name}:float32",
        rows,
        offset,
        name,
        lambda i: "holds a value beyond the float32 range (±3.4e38)",
    )
    limit = float(np.finfo(np.float32).max)
    clamped = pa.array(np.clip(w, -limit, limit).astype(np.float32), type=pa.float32())
    return pc.if_else(pa.array(over), clamped, narrow)


def _with_values(lists: pa.Array, values: pa.Array) -> pa.Array:
    """``lists`` (a `VECTOR_TYPE` array) with its flattened values replaced by ``values``."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lists) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    mask = pa.array(np.asarray(lists.is_null().to_numpy(zero_copy_only=False), dtype=bool))
    return pa.ListArray.from_arrays(
        pa.array(offsets), values, type=VECTOR_TYPE, mask=mask if lists.null_count else None
    )


def _coerce_scores(arr: pa.Array, name: str, offset: int, c: ProblemCollector) -> pa.Array | None:
    t = arr.type
    want = EPISODE_SCHEMA.field("judge_scores").type
    if pa.types.is_map(t) and _is_stringish(t.key_type) and _is_number(t.item_type):
        return arr.cast(want)
    if pa.types.is_struct(t) and all(_is_number(f.type) or pa.types.is_null(f.type) for f in t):
        # A struct is what pyarrow infers from dicts; each non-null member becomes an entry.
        rows = [
            None if d is None else [(k, float(v)) for k, v in d.items() if v is not None]
            for d in arr.to_pylist()
        ]
        return pa.array(rows, type=want)
    c.add(f"{name}:type", f"type {t}, want {want} (or a struct of numbers)", column=name)
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


class StepNormaliser:
    """Converts a stream of input step batches into `STEP_SCHEMA`, batch by batch.

    Carries the previous batch's last episode id, so ``is_first`` is right across batch
    boundaries, and the row offset, so problems name rows of the whole stream. Problems with
    the input's columns (missing, unknown, unconvertible) are reported once per stream.
    """

    def __init__(self, collector: ProblemCollector | None = None) -> None:
        """Start before the first row.

        Args:
            collector: where problems go; a new one when None.
        """
        self.collector = collector if collector is not None else ProblemCollector()
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
            batch: input rows in schema v1 or the minimal classic form.

        Returns:
            The rows in `STEP_SCHEMA`, or None when the batch's columns cannot be converted or
            its episode ids are not UTF-8 (the problems are in `collector`; the caller skips
            the batch).
        """
        n = batch.num_rows
        offset = self._offset
        self._offset += n
        self.ids_rejected = None
        if batch.schema.equals(STEP_SCHEMA, check_metadata=False):
            out = batch.replace_schema_metadata(STEP_SCHEMA.metadata)
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
                    "unknown column: rollout schema v1 has no such "
                    "column (see schemas/rollout.v1.md)",
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
                got = (
                    None
                    if key in self._failed_types
                    else _coerce(column, field, offset, self.collector)
                )
                if got is None:
                    ok = False
                    if not _is_binaryish(column.type):  # binary fails per row (UTF-8)
                        self._failed_types.add(key)
                arrays.append(got)
            elif field.name in ("is_first", "is_last"):
                arrays.append(None)
            else:
                arrays.append(pa.nulls(n, field.type))
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
        out = pa.RecordBatch.from_arrays(arrays, schema=STEP_SCHEMA)
        if not ids_ok:
            self.ids_rejected = out
            return None
        return out


def normalise_steps(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """Convert a step table into `STEP_SCHEMA`.

    Accepts schema v1 or the minimal classic form ``episode_id, step, obs, action, reward,
    terminated, truncated`` (``obs``/``action`` optional). ``episode_id`` may be an integer
    (it becomes its decimal string); ``obs``/``action`` may be lists, large lists or
    fixed-size lists of any numeric type, or plain numbers (each becomes a vector of one);
    integer and float columns are converted where exact. Absent optional columns become null;
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
    return pa.Table.from_batches([b for b in out if b is not None], schema=STEP_SCHEMA)


def _utf8_ids(ids: pa.Array | None, offset: int, c: ProblemCollector) -> pa.Array | None:
    if ids is None:
        return None
    bad = invalid_utf8_rows(ids)
    c.add_rows("episode_id:utf8", bad, offset, "episode_id", lambda i: "value is not valid UTF-8")
    return None if len(bad) else ids


def normalise_episodes(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """Convert given episode attributes into `EPISODE_ATTR_SCHEMA` (every column optional).

    ``episode_id`` is required (an integer becomes its decimal string). ``judge_scores`` may be
    a map of strings to numbers or a struct of numbers (what pyarrow infers from dicts).

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
            c.add("schema", "unknown column: rollout schema v1 has no such column", column=name)
    arrays: list[pa.Array | pa.ChunkedArray | None] = []
    if not c.count:
        for field in EPISODE_ATTR_SCHEMA:
            if field.name in names:
                col = table.column(field.name)
                chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
                conv: list[pa.Array | None] = []
                start = 0  # problems name rows of the whole table
                for ch in chunks:
                    got = _coerce(ch, field, start, c)
                    if field.name == "episode_id":  # decoded to match attributes to steps
                        got = _utf8_ids(got, start, c)
                    conv.append(got)
                    start += len(ch)
                arrays.append(
                    None
                    if any(x is None for x in conv)
                    else pa.chunked_array(conv, type=field.type)
                )
            else:
                arrays.append(pa.nulls(table.num_rows, field.type))
    problems = c.problems()
    if problems:
        raise RolloutValidationError("episodes", problems)
    return pa.Table.from_arrays(arrays, schema=EPISODE_ATTR_SCHEMA)


# --------------------------------------------------------------------------------------------
# Derived episodes


@dataclass
class _OpenEpisode:
    """The episode whose steps reached the end of the last batch (it may continue)."""

    episode_id: str | None
    rewards: npt.NDArray[np.float64]
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

    Given episode attributes (`add_attrs`) are merged in by episode id when the episode is
    complete: ``termination_reason``, ``cost_usd`` and ``invalid`` given override the derived
    ones; a given ``return`` or ``num_steps`` that disagrees with the steps is a problem.
    A batch that could not be converted is passed over with `skip`.
    """

    def __init__(self, collector: ProblemCollector | None = None) -> None:
        """Start before the first step.

        Args:
            collector: where problems go; a new one when None.
        """
        self.collector = collector if collector is not None else ProblemCollector()
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
            return _empty_episodes()
        ids = steps.column("episode_id")
        rewards = _floats(steps.column("reward"))
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
        cost_sums = np.add.reduceat(costs, starts)
        cost_counts = np.add.reduceat(cost_ok, starts)
        counts = np.diff(np.concatenate([starts, [n]]))
        ends = np.concatenate([starts[1:], [n]]) - 1
        seg_term = term[ends]
        seg_trunc = trunc[ends]
        first_end = int(starts[1]) if len(starts) > 1 else n

        done_ids: list[str | None] = []
        done_returns: list[float] = []
        done_counts: list[int] = []
        done_term: list[bool] = []
        done_trunc: list[bool] = []
        done_cost: list[float | None] = []

        if opened is not None and continues:
            # Sum the open episode's rewards together with this batch's first segment.
            merged_r = np.concatenate([opened.rewards, rewards[:first_end]])
            merged_c = np.concatenate([opened.costs, costs[:first_end]])
            returns[0] = np.add.reduceat(merged_r, [0])[0]
            cost_sums[0] = np.add.reduceat(merged_c, [0])[0]
            cost_counts[0] += opened.cost_count
            counts[0] += len(opened.rewards)
            seg_ids[0] = opened.episode_id
            carry_r, carry_c = merged_r, merged_c
        else:
            if opened is not None:
                done_ids.append(opened.episode_id)
                done_returns.append(float(np.add.reduceat(opened.rewards, [0])[0]))
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
            costs=(carry_c if k == 0 else costs[last_start:]).copy(),
            cost_count=int(cost_counts[k]),
            terminated=bool(seg_term[k]),
            truncated=bool(seg_trunc[k]),
        )
        done_ids.extend(seg_ids[:k])
        done_returns.extend(returns[:k].tolist())
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
            out = _empty_episodes()
        else:
            out = self._emit(
                [opened.episode_id],
                [float(np.add.reduceat(opened.rewards, [0])[0])],
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
        returns: list[float],
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
            return _empty_episodes()
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
        arrays = []
        for field in EPISODE_SCHEMA:
            name = field.name
            given = attrs.column(name).combine_chunks() if attrs is not None else None
            if name in ("return", "num_steps"):
                if given is not None and given.null_count < n:
                    self._check_given(name, given, cols[name], id_arr)
                arrays.append(cols[name])
            elif name in cols:
                arrays.append(cols[name] if given is None else pc.coalesce(given, cols[name]))
            elif name == "invalid":
                arrays.append(
                    pa.array(np.zeros(n, dtype=bool))
                    if given is None
                    else pc.fill_null(given, False)
                )
            else:
                arrays.append(given if given is not None else pa.nulls(n, field.type))
        self._episode_rows += n
        return pa.RecordBatch.from_arrays(arrays, schema=EPISODE_SCHEMA)

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
        tol = 1e-9 * np.maximum(1.0, np.abs(d))
        bad = np.flatnonzero(has & ~(np.abs(g - d) <= tol))
        what = "sum of its rewards" if name == "return" else "number of its steps"
        self.collector.add_rows(
            f"{name}:mismatch",
            bad,
            self._episode_rows,
            name,
            lambda i: (
                f"episode {ids[i].as_py()!r}: given {name} {_num_text(g[i])}, the {what} is "
                f"{_num_text(d[i])}"
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


def _empty_episodes() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=EPISODE_SCHEMA)


def _floats(arr: pa.Array) -> npt.NDArray[np.float64]:
    filled = pc.fill_null(arr, 0.0) if arr.null_count else arr
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.float64)


def _flags(arr: pa.Array) -> npt.NDArray[np.bool_]:
    filled = pc.fill_null(arr, False) if arr.null_count else arr
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=bool)


def derive_episodes(steps: pa.Table | pa.RecordBatch, episodes: pa.Table | None = None) -> pa.Table:
    """Compute the episode table of a step table.

    ``return`` is the sum of the episode's rewards, ``num_steps`` its number of steps,
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
    builder = EpisodeBuilder()
    if episodes is not None:
        builder.add_attrs(normalise_episodes(episodes))
    out = [builder.feed(b) for b in table.to_batches()]
    out.append(builder.finish())
    problems = builder.collector.problems()
    if problems:
        raise RolloutValidationError("episodes", problems)
    return pa.Table.from_batches(out, schema=EPISODE_SCHEMA)


# --------------------------------------------------------------------------------------------
# Python rows


def _vector_value(v: object) -> object:
    """Accept a list, tuple or 1-d numpy array of numbers, or a number (a vector of one)."""
    if v is None or isinstance(v, list | tuple):
        return v
    if isinstance(v, np.ndarray):
        if v.ndim > 1:
            raise TypeError(f"a {v.ndim}-d array, want a flat vector")
        return v.astype(np.float64, copy=False)
    if isinstance(v, int | float | np.number) and not isinstance(v, bool):
        return [v]
    raise TypeError(f"{type(v).__name__}, want a list of numbers or a number")


def _column_from_values(values: list[Any], field: pa.Field, c: ProblemCollector) -> pa.Array | None:
    """Build one column from Python values, naming each row that does not fit."""
    name = field.name
    typ = field.type
    if typ == VECTOR_TYPE:
        typ = pa.list_(pa.float64())  # narrowed to float32, with a range check, by normalise
        converted = []
        for i, v in enumerate(values):
            try:
                converted.append(_vector_value(v))
            except TypeError as e:
                c.add(f"{name}:type", f"{e}", row=i, column=name)
                converted.append(None)
        values = converted
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
) -> tuple[list[str], list[pa.Array | None], ProblemCollector]:
    c = ProblemCollector()
    seen: set[str] = set()
    for i, row in enumerate(rows):
        for key in row:
            if key not in seen:
                seen.add(key)
                if schema.get_field_index(key) < 0:
                    c.add(
                        f"unknown:{key}",
                        f"unknown {what} field: rollout schema v1 has no such column",
                        row=i,
                        column=key,
                    )
    order = [f.name for f in schema if f.name in seen]
    arrays = [
        _column_from_values([r.get(name) for r in rows], schema.field(name), c) for name in order
    ]
    return order, arrays, c


def rows_to_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Build a step table in `STEP_SCHEMA` from Python dicts, one per step.

    Keys are column names of the step schema; absent keys are null. ``obs``/``action`` may be
    lists, tuples or 1-d numpy arrays of numbers, or a number; ``timestamp`` a datetime
    (naive means UTC) or an ISO 8601 string. Then `normalise_steps` applies.

    Args:
        rows: one mapping per step, in step order.

    Returns:
        The steps in `STEP_SCHEMA`.

    Raises:
        RolloutValidationError: a key is unknown, a value does not fit its column (naming the
            row and column), or a required column is missing.
    """
    names, arrays, c = _rows_to_columns(rows, STEP_SCHEMA, "step")
    problems = c.problems()
    if problems:
        raise RolloutValidationError("rows", problems)
    vector_fields = {n: pa.field(n, pa.list_(pa.float64())) for n in ("obs", "action")}
    fields = [vector_fields.get(n, STEP_SCHEMA.field(n)) for n in names]
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields)) if names else pa.table({})
    if not rows:
        return STEP_SCHEMA.empty_table()
    return normalise_steps(table)


def rows_to_episodes(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Build episode attributes in `EPISODE_ATTR_SCHEMA` from Python dicts, one per episode.

    Keys are column names of the episode schema; ``judge_scores`` is a dict of names to
    numbers. Absent keys are null; ``return`` and ``num_steps`` are usually left out and
    derived from the steps.

    Args:
        rows: one mapping per episode.

    Returns:
        The attributes in `EPISODE_ATTR_SCHEMA`.

    Raises:
        RolloutValidationError: a key is unknown or a value does not fit its column.
    """
    names, arrays, c = _rows_to_columns(rows, EPISODE_ATTR_SCHEMA, "episode")
    problems = c.problems()
    if problems:
        raise RolloutValidationError("episode rows", problems)
    if not rows:
        return EPISODE_ATTR_SCHEMA.empty_table()
    table = pa.Table.from_arrays(
        arrays, schema=pa.schema([EPISODE_ATTR_SCHEMA.field(n) for n in names])
    )
    return normalise_episodes(table)


# --------------------------------------------------------------------------------------------
# Files


def detect_format(path: str | os.PathLike[str]) -> str:
    """Name the format of an input file.

    Parquet and Arrow IPC are recognised by their magic bytes; JSONL by the keys of its first
    record: ``messages`` (chat), ``completion`` (TRL), ``response`` or ``output`` (verl). JSONL
    compressed with gzip or zstd is recognised by its magic bytes, whatever the file is named,
    and named by its decompressed first record.

    Args:
        path: the input file.

    Returns:
        One of `FORMATS`.

    Raises:
        RolloutValidationError: the file is empty, of no known format, a compressed Parquet or
            Arrow file, or compressed data that is corrupt or over the limits.
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] == b"PAR1":
        return "parquet"
    if head[:6] == b"ARROW1":
        return "arrow"
    if head[:4] == b"\xff\xff\xff\xff":
        return "arrow-stream"
    subject = Path(path)
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
    raise RolloutValidationError(
        str(path), [Problem(None, None, "file is empty, want a rollout input (see FORMATS)")]
    )


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
    if not isinstance(obj, dict):
        raise fail(f"JSON {type(obj).__name__}, want an object per line")
    if "messages" in obj:
        return "chat-jsonl"
    if "completion" in obj:
        return "trl-jsonl"
    if "response" in obj or "output" in obj:
        return "verl-jsonl"
    raise fail(
        f"cannot tell the format from keys {sorted(obj)}: want 'messages' (chat), "
        "'prompt'+'completion' (TRL) or 'prompt'/'input'+'response'/'output' (verl)"
    )


def iter_rollout_chunks(
    path: str | os.PathLike[str],
    fmt: str | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    *,
    episodes: str | os.PathLike[str] | None = None,
) -> Iterator[RolloutChunk]:
    """Stream an input file as chunks of at most about ``batch_rows`` steps.

    Parquet is read row group by row group, Arrow IPC batch by batch, JSONL line by line; no
    more than one chunk is held in memory. A JSONL episode is never split, so a chunk may
    exceed ``batch_rows`` by one episode; a chunk is also cut once its text passes 64 MiB.
    Parquet and Arrow batches are passed through as read (normalisation happens when writing).
    JSONL compressed with gzip or zstd (told by its magic bytes, also when ``fmt`` is given)
    is decompressed as a stream; line numbers count decompressed lines.

    JSONL problems (bad JSON, missing or mistyped fields, repeated episode ids) are collected
    over the whole file; good lines are still yielded, and the error is raised after the last
    chunk, so the caller sees every problem at once and must treat what it received as void.

    Args:
        path: the input file.
        fmt: one of `FORMATS`, or None to `detect_format`.
        batch_rows: target rows per chunk.
        episodes: a Parquet or Arrow file of episode attributes, for Parquet/Arrow steps; read
            whole (episode tables are small) and yielded with the first chunk.

    Yields:
        `RolloutChunk` objects in input order.

    Raises:
        RolloutValidationError: the format is unknown, or JSONL lines are bad (listing each
            with its line number), or a line is over `MAX_LINE_BYTES`, or compressed data is
            corrupt, truncated or over `MAX_DECOMPRESSED_BYTES` (one problem naming the file,
            after those of the lines before it).
        OSError: the file cannot be read.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows is {batch_rows}, want >= 1")
    kind = fmt if fmt is not None else detect_format(path)
    if kind not in FORMATS:
        raise RolloutValidationError(
            str(path),
            [Problem(None, None, f"format {kind!r} is unknown, want one of {', '.join(FORMATS)}")],
        )
    attrs = _read_episode_file(episodes) if episodes is not None else None
    if kind.endswith("-jsonl"):
        if attrs is not None:
            raise ValueError("episodes= is for Parquet/Arrow steps; JSONL carries its own")
        yield from _iter_jsonl(Path(path), kind, batch_rows)
        return
    for batch in _iter_arrow(Path(path), kind, batch_rows):
        yield RolloutChunk(batch, attrs)
        attrs = None
    if attrs is not None:  # steps file held no rows
        yield RolloutChunk(pa.RecordBatch.from_pylist([], schema=STEP_SCHEMA), attrs)


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
        Step batches: in `STEP_SCHEMA` for JSONL, as stored for Parquet/Arrow.

    Raises:
        RolloutValidationError: as `iter_rollout_chunks`.
    """
    for chunk in iter_rollout_chunks(path, fmt, batch_rows):
        yield chunk.steps


def _read_episode_file(path: str | os.PathLike[str]) -> pa.RecordBatch:
    kind = detect_format(path)
    if kind == "parquet":
        table = pq.read_table(path)
    elif kind in ("arrow", "arrow-stream"):
        table = pa.Table.from_batches(list(_iter_arrow(Path(path), kind, DEFAULT_BATCH_ROWS)))
    else:
        raise RolloutValidationError(
            str(path), [Problem(None, None, f"episode file is {kind}, want parquet or arrow")]
        )
    return (
        normalise_episodes(table).combine_chunks().to_batches()[0]
        if table.num_rows
        else pa.RecordBatch.from_pylist([], schema=EPISODE_ATTR_SCHEMA)
    )


def _iter_arrow(path: Path, kind: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    if kind == "parquet":
        pf = pq.ParquetFile(path)
        yield from pf.iter_batches(batch_size=batch_rows)
        return
    with pa.memory_map(str(path)) as source:
        reader: Any = ipc.open_file(source) if kind == "arrow" else ipc.open_stream(source)
        batches: Iterable[pa.RecordBatch] = (
            (reader.get_batch(i) for i in range(reader.num_record_batches))
            if kind == "arrow"
            else reader
        )
        for batch in batches:
            for start in range(0, max(batch.num_rows, 1), batch_rows):
                yield batch.slice(start, batch_rows)


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
    """Yield the 1-based number and bytes of each line, refusing one over `MAX_LINE_BYTES`.

    Raises:
        RolloutValidationError: a line is too long, or the data cannot be read on (one problem
            naming the file and the line being read).
    """
    limit = MAX_LINE_BYTES
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
        yield number, raw


# --------------------------------------------------------------------------------------------
# JSONL


class _Line:
    """Problems found in one JSONL line; the line is skipped if there is any."""

    def __init__(self, number: int, collector: ProblemCollector) -> None:
        self.number = number
        self.c = collector
        self.failed = False

    def error(self, field: str | None, message: str) -> None:
        self.failed = True
        self.c.add(f"line:{field}:{message[:24]}", message, column=field, line=self.number)


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        keys = [k for k, _ in pairs]
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"duplicate key {dup!r}")
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _is_num(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _json_text(v: object, line: _Line, field: str) -> str | None:
    """Tool calls and results are stored as JSON text; a string must already be JSON."""
    if v is None:
        return None
    if isinstance(v, str):
        try:
            json.loads(v, parse_constant=_refuse_constant)
        except ValueError as e:
            line.error(field, f"string is not JSON text ({e}); give the JSON value itself")
            return None
        return v
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def _opt(obj: Mapping[str, Any], key: str, kind: str, line: _Line, field: str) -> Any:
    """Read an optional field, checking its JSON type."""
    v = obj.get(key)
    if v is None:
        return None
    ok = {
        "str": isinstance(v, str),
        "num": _is_num(v),
        "int": isinstance(v, int) and not isinstance(v, bool),
        "bool": isinstance(v, bool),
        "obj": isinstance(v, dict),
    }[kind]
    if not ok:
        names = {
            "str": "a string",
            "num": "a number",
            "int": "an integer",
            "bool": "a boolean",
            "obj": "an object",
        }
        line.error(field, f"{_jtype(v)}, want {names[kind]}")
        return None
    if kind == "int" and not -(1 << 63) <= v < (1 << 63):
        line.error(field, f"{v} is out of the int64 range")
        return None
    return v


def _jtype(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _timestamp_us(v: object, line: _Line, field: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, str):
        try:
            parsed = dt.datetime.fromisoformat(v)
        except ValueError:
            line.error(field, f"{v!r} is not an ISO 8601 time")
            return None
        return (_to_utc(parsed) - _EPOCH) // _US
    if isinstance(v, int | float) and not isinstance(v, bool):
        return round(float(v) * 1_000_000)  # seconds since the Unix epoch
    line.error(field, f"{_jtype(v)}, want an ISO 8601 string or seconds since the epoch")
    return None


_MESSAGE_KEYS: Final = frozenset(
    {
        "role",
        "content",
        "tool_calls",
        "tool_results",
        "tool_call_id",
        "name",
        "reward",
        "logprob",
        "timestamp",
        "latency_ms",
        "usage",
        "cost_usd",
        "model_id",
        "safety_interventions",
    }
)
_EPISODE_KEYS: Final = (
    "task_id",
    "env_version",
    "policy_version",
    "language",
    "task_type",
    "termination_reason",
)
_CHAT_KEYS: Final = frozenset(
    {
        "episode_id",
        "messages",
        "reward",
        "rewards",
        "judge_scores",
        "usage",
        "cost_usd",
        "latency_ms",
        "model_id",
        "seed",
        "invalid",
        *_EPISODE_KEYS,
    }
)
_TRL_KEYS: Final = frozenset(
    {"episode_id", "task_id", "prompt", "completion", "reward", "rewards", "step", "advantage"}
)
_VERL_KEYS: Final = frozenset(
    {
        "episode_id",
        "task_id",
        "prompt",
        "input",
        "response",
        "output",
        "score",
        "reward",
        "step",
        "gts",
    }
)


def _message(m: object, line: _Line, where: str) -> dict[str, Any] | None:
    """Map one chat message to the step columns it fills."""
    if not isinstance(m, dict):
        line.error(where, f"{_jtype(m)}, want a message object")
        return None
    for key in m:
        if key not in _MESSAGE_KEYS:
            line.error(
                f"{where}.{key}",
                f"unknown message field; known: {', '.join(sorted(_MESSAGE_KEYS))}",
            )
    role = m.get("role")
    if not isinstance(role, str):
        line.error(f"{where}.role", f"{_jtype(role)}, want a string")
    content = m.get("content")
    if content is not None and not isinstance(content, str):
        # Multi-part content (a list of parts) is kept whole, as JSON text.
        content = json.dumps(content, ensure_ascii=False, separators=(",", ":"))
    tool_results = _json_text(m.get("tool_results"), line, f"{where}.tool_results")
    if tool_results is None and ("tool_call_id" in m or "name" in m):
        link = {k: m[k] for k in ("tool_call_id", "name") if k in m}
        tool_results = json.dumps(link, ensure_ascii=False, separators=(",", ":"))
    usage = _opt(m, "usage", "obj", line, f"{where}.usage") or {}
    out = {
        "role": role,
        "content": content,
        "tool_calls": _json_text(m.get("tool_calls"), line, f"{where}.tool_calls"),
        "tool_results": tool_results,
        "reward": _opt(m, "reward", "num", line, f"{where}.reward"),
        "action_logprob": _opt(m, "logprob", "num", line, f"{where}.logprob"),
        "timestamp": _timestamp_us(m.get("timestamp"), line, f"{where}.timestamp"),
        "latency_ms": _opt(m, "latency_ms", "num", line, f"{where}.latency_ms"),
        "prompt_tokens": _opt(usage, "prompt_tokens", "int", line, f"{where}.usage.prompt_tokens"),
        "completion_tokens": _opt(
            usage, "completion_tokens", "int", line, f"{where}.usage.completion_tokens"
        ),
        "cost_usd": _opt(m, "cost_usd", "num", line, f"{where}.cost_usd"),
        "model_id": _opt(m, "model_id", "str", line, f"{where}.model_id"),
        "safety_interventions": _opt(
            m, "safety_interventions", "int", line, f"{where}.safety_interventions"
        ),
    }
    return out


def _text_or_messages(v: object, role: str, line: _Line, field: str) -> list[dict[str, Any]]:
    """TRL/verl prompts and completions: a string (one message) or a list of messages."""
    if isinstance(v, str):
        return [_message({"role": role, "content": v}, line, field) or {}]
    if isinstance(v, list):
        out = [_message(m, line, f"{field}[{i}]") for i, m in enumerate(v)]
        if not out:
            line.error(field, "empty list, want at least one message")
        return [m for m in out if m is not None]
    line.error(field, f"{_jtype(v)}, want a string or a list of messages")
    return []


def _scores(v: object, line: _Line, field: str) -> list[tuple[str, float]] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        line.error(field, f"{_jtype(v)}, want an object of names to numbers")
        return None
    out = []
    for k, s in v.items():
        if not _is_num(s):
            line.error(f"{field}.{k}", f"{_jtype(s)}, want a number")
        else:
            out.append((k, float(s)))
    return out


@dataclass
class _Episode:
    episode_id: str | None
    steps: list[dict[str, Any]]
    attrs: dict[str, Any]
    reward: float | None  # episode-level reward, put on the last step
    truncated: bool


def _map_chat(obj: dict[str, Any], line: _Line) -> _Episode:
    for key in obj:
        if key not in _CHAT_KEYS:
            line.error(key, f"unknown field; known: {', '.join(sorted(_CHAT_KEYS))}")
    messages = obj.get("messages")
    steps: list[dict[str, Any]] = []
    if not isinstance(messages, list) or not messages:
        line.error(
            "messages",
            f"{_jtype(messages)}, want a non-empty list of messages"
            if not isinstance(messages, list)
            else "empty list, want at least one message",
        )
    else:
        for i, m in enumerate(messages):
            step = _message(m, line, f"messages[{i}]")
            if step is not None:
                steps.append(step)
    attrs = _attrs(obj, line)
    _episode_usage(obj, steps, line)
    return _Episode(
        _episode_id(obj, line),
        steps,
        attrs,
        _rewards(obj, steps, line),
        truncated=attrs.get("termination_reason") in TRUNCATION_REASONS,
    )


def _attrs(obj: dict[str, Any], line: _Line) -> dict[str, Any]:
    attrs: dict[str, Any] = {k: _opt(obj, k, "str", line, k) for k in _EPISODE_KEYS}
    seed = obj.get("seed")
    if isinstance(seed, str) and seed.lstrip("-").isdigit():
        seed = int(seed)  # large seeds may come as decimal strings (JSON's 2^53 limit)
    attrs["seed"] = _opt({"seed": seed}, "seed", "int", line, "seed")
    attrs["invalid"] = _opt(obj, "invalid", "bool", line, "invalid")
    attrs["cost_usd"] = _opt(obj, "cost_usd", "num", line, "cost_usd")
    attrs["judge_scores"] = _scores(obj.get("judge_scores"), line, "judge_scores")
    return attrs


def _episode_usage(obj: dict[str, Any], steps: list[dict[str, Any]], line: _Line) -> None:
    """Episode-level usage and latency go to the last assistant message, model_id to each."""
    if not steps:
        return
    assistant = [s for s in steps if s.get("role") == "assistant"]
    target = assistant[-1] if assistant else steps[-1]
    usage = _opt(obj, "usage", "obj", line, "usage") or {}
    for key in ("prompt_tokens", "completion_tokens"):
        v = _opt(usage, key, "int", line, f"usage.{key}")
        if v is not None and target[key] is None:
            target[key] = v
    latency = _opt(obj, "latency_ms", "num", line, "latency_ms")
    if latency is not None and target["latency_ms"] is None:
        target["latency_ms"] = latency
    model = _opt(obj, "model_id", "str", line, "model_id")
    if model is not None:
        for s in assistant:
            if s["model_id"] is None:
                s["model_id"] = model


def _rewards(obj: dict[str, Any], steps: list[dict[str, Any]], line: _Line) -> float | None:
    """Fill per-step rewards; return the episode-level reward (for the last step), if any."""
    given = [k for k in ("reward", "rewards") if obj.get(k) is not None]
    per_message = any(s["reward"] is not None for s in steps)
    if len(given) + per_message > 1:
        line.error(
            given[0] if given else "reward", "give one of reward, rewards or per-message rewards"
        )
        return None
    if per_message:
        return None
    if "rewards" in given:
        rewards = obj["rewards"]
        if not isinstance(rewards, list) or not all(_is_num(r) for r in rewards):
            line.error("rewards", "want a list of numbers, one per message")
        elif len(rewards) != len(steps):
            line.error(
                "rewards", f"{len(rewards)} rewards for {len(steps)} messages, want one per message"
            )
        else:
            for s, r in zip(steps, rewards, strict=True):
                s["reward"] = r
        return None
    if "reward" in given:
        return _opt(obj, "reward", "num", line, "reward")  # type: ignore[no-any-return]
    line.error(
        "reward",
        "missing, want reward (a number), rewards (one per message) or per-message rewards",
    )
    return None


def _episode_id(obj: dict[str, Any], line: _Line) -> str | None:
    eid = obj.get("episode_id")
    if eid is None:
        return None
    if isinstance(eid, int) and not isinstance(eid, bool):
        return str(eid)
    if isinstance(eid, str) and eid:
        return eid
    line.error("episode_id", f"{_jtype(eid)}, want a non-empty string or an integer")
    return None


def _policy_step(obj: dict[str, Any], line: _Line) -> str | None:
    step = _opt(obj, "step", "int", line, "step")
    return None if step is None else str(step)


def _map_trl(obj: dict[str, Any], line: _Line) -> _Episode:
    for key in obj:
        if key not in _TRL_KEYS:
            line.error(key, f"unknown field; known: {', '.join(sorted(_TRL_KEYS))}")
    steps = _text_or_messages(obj.get("prompt"), "user", line, "prompt")
    steps += _text_or_messages(obj.get("completion"), "assistant", line, "completion")
    scores = _scores(obj.get("rewards"), line, "rewards")
    reward = _opt(obj, "reward", "num", line, "reward")
    if reward is None and scores is not None:
        reward = sum(s for _, s in scores)  # TRL's total is the sum of its reward functions
    if obj.get("reward") is None and obj.get("rewards") is None:  # a mistyped one is reported
        line.error("reward", "missing, want reward (a number) or rewards (an object)")
    attrs = {
        "task_id": _opt(obj, "task_id", "str", line, "task_id"),
        "policy_version": _policy_step(obj, line),
        "judge_scores": scores,
    }
    return _Episode(_episode_id(obj, line), steps, attrs, reward, truncated=False)


def _map_verl(obj: dict[str, Any], line: _Line) -> _Episode:
    extra: list[tuple[str, float]] = []
    for key, v in obj.items():
        if key in _VERL_KEYS:
            continue
        if _is_num(v) or isinstance(v, bool):
            extra.append((key, float(v)))  # verl's reward_extra_info: kept as judge scores
        else:
            line.error(
                key,
                f"unknown field holding {_jtype(v)}; known: "
                f"{', '.join(sorted(_VERL_KEYS))}, or numeric reward details",
            )
    pair = {
        k: obj[k] for k in obj if k in ("prompt", "input", "response", "output", "score", "reward")
    }
    for a, b in (("prompt", "input"), ("response", "output"), ("score", "reward")):
        if a in pair and b in pair:
            line.error(b, f"both {a} and {b} given, want one")
    prompt = obj.get("prompt", obj.get("input"))
    response = obj.get("response", obj.get("output"))
    steps = _text_or_messages(prompt, "user", line, "prompt" if "prompt" in obj else "input")
    steps += _text_or_messages(
        response, "assistant", line, "response" if "response" in obj else "output"
    )
    key = "score" if "score" in obj else "reward"
    reward = _opt(obj, key, "num", line, key)
    if obj.get(key) is None:  # a mistyped one is reported by _opt
        line.error(key, "missing, want score (a number)")
    attrs = {
        "task_id": _opt(obj, "task_id", "str", line, "task_id"),
        "policy_version": _policy_step(obj, line),
        "judge_scores": extra or None,
    }
    return _Episode(_episode_id(obj, line), steps, attrs, reward, truncated=False)


_MAPPERS: Final[dict[str, Callable[[dict[str, Any], _Line], _Episode]]] = {
    "chat-jsonl": _map_chat,
    "trl-jsonl": _map_trl,
    "verl-jsonl": _map_verl,
}

_STEP_FIELDS: Final = (
    "role",
    "content",
    "tool_calls",
    "tool_results",
    "action_logprob",
    "timestamp",
    "latency_ms",
    "prompt_tokens",
    "completion_tokens",
    "model_id",
    "cost_usd",
    "safety_interventions",
)


class _ChunkBuffer:
    """Columns of the chunk being built, as Python lists."""

    def __init__(self) -> None:
        self.steps: dict[str, list[Any]] = {f.name: [] for f in STEP_SCHEMA}
        self.attrs: dict[str, list[Any]] = {f.name: [] for f in EPISODE_ATTR_SCHEMA}
        self.rows = 0
        self.text_bytes = 0

    def add(self, eid: str, ep: _Episode) -> None:
        s = self.steps
        n = len(ep.steps)
        last = n - 1
        for i, step in enumerate(ep.steps):
            s["episode_id"].append(eid)
            s["step"].append(i)
            s["is_first"].append(i == 0)
            s["is_last"].append(i == last)
            s["terminated"].append(i == last and not ep.truncated)
            s["truncated"].append(i == last and ep.truncated)
            reward = step["reward"]
            if reward is None:
                reward = ep.reward if i == last and ep.reward is not None else 0.0
            s["reward"].append(float(reward))
            s["obs"].append(None)
            s["action"].append(None)
            for name in _STEP_FIELDS:
                s[name].append(step[name])
            content = step["content"]
            if content is not None:
                self.text_bytes += len(content)
        a = self.attrs
        for name in a:
            a[name].append(ep.attrs.get(name))
        a["episode_id"][-1] = eid
        self.rows += n

    def flush(self) -> RolloutChunk:
        steps = pa.RecordBatch.from_arrays(
            [_list_array(self.steps[f.name], f.type) for f in STEP_SCHEMA], schema=STEP_SCHEMA
        )
        attrs = pa.RecordBatch.from_arrays(
            [pa.array(self.attrs[f.name], type=f.type) for f in EPISODE_ATTR_SCHEMA],
            schema=EPISODE_ATTR_SCHEMA,
        )
        self.__init__()  # type: ignore[misc]
        return RolloutChunk(steps, attrs)


def _list_array(values: list[Any], typ: pa.DataType) -> pa.Array:
    if pa.types.is_timestamp(typ):
        return pa.array(values, type=pa.int64()).cast(typ)
    return pa.array(values, type=typ)


def _iter_jsonl(path: Path, kind: str, batch_rows: int) -> Iterator[RolloutChunk]:
    mapper = _MAPPERS[kind]
    c = ProblemCollector()
    ids: dict[str, int] = {}
    buf = _ChunkBuffer()
    decoder = json.JSONDecoder(object_pairs_hook=_strict_object, parse_constant=_refuse_constant)
    with _open_jsonl(path, check_end=True) as (_, f):
        try:
            for number, raw in _read_lines(f, path):
                if not raw.strip():
                    continue
                line = _Line(number, c)
                obj = _decode(decoder, raw, line)
                if obj is None:
                    continue
                ep = mapper(obj, line)
                eid = ep.episode_id if ep.episode_id is not None else f"line-{number}"
                if eid in ids:
                    line.error("episode_id", f"episode {eid!r} already given on line {ids[eid]}")
                if line.failed:
                    continue
                ids[eid] = number
                buf.add(eid, ep)
                if buf.rows >= batch_rows or buf.text_bytes >= CHUNK_TEXT_BYTES:
                    yield buf.flush()
        except RolloutValidationError as e:
            # The rest of the file cannot be read: report the lines before it, then the cause.
            raise RolloutValidationError(str(path), [*c.problems(), *e.problems]) from e
    if buf.rows:
        yield buf.flush()
    problems = c.problems()
    if problems:
        raise RolloutValidationError(str(path), problems)


def _decode(decoder: json.JSONDecoder, raw: bytes, line: _Line) -> dict[str, Any] | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line.error(None, f"not valid UTF-8 ({e.reason} at byte {e.start})")
        return None
    try:
        obj, end = decoder.raw_decode(text.strip())
        if end != len(text.strip()):
            raise ValueError(f"extra data after the JSON value at column {end + 1}")
    except ValueError as e:
        line.error(None, f"not valid JSON: {e}")
        return None
    if not isinstance(obj, dict):
        line.error(None, f"JSON {_jtype(obj)}, want an object")
        return None
    return obj
