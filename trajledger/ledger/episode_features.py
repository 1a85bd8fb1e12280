"""Episode features of a step file, streamed record batch by record batch, vectorised.

Scope: for each episode of a rollout step table (``steps.parquet``), in file order:

- the exact content **fingerprint**: SHA-256 over the same bytes as
  `ledger.rollouts.dedup.episode_fingerprints` (step count, then each content column's name and
  values in step order), so both give the same hex for the same episode;
- its **modality** (``text`` when a step has ``content``, ``tool_calls`` or ``tool_results``);
- the near-duplicate **feature vector** (128 float32, unit length): a hashed bag of word
  unigrams and bigrams of the task side of a conversation, or a count sketch of the
  time-aligned numeric step features;
- the sum of its **safety interventions** (None when no step records them).

These are the one definition of an episode's duplicate fingerprints: recording computes them
once, while the steps are in memory (`FeatureStream`, kept next to the batch by
``ledger.batch_features``), and every reader that computes them again from the stored bytes
(the admission gate, the audit index, batches recorded before features were kept) gets the same
values bit for bit: each episode's features depend only on its own rows, never on how the
steps were cut into record batches.

`iter_step_features` reads record batches and carries only the unfinished last episode from
one batch to the next; an episode of more than `SPILL_STEPS` steps is taken in pieces
(`LongEpisode`: its sketch and safety sum counted as they come, a conversation's distinct words
counted, its fingerprint's bytes spilled to disk until it ends), so memory is bounded by one
record batch and a few pieces, whatever the file's size or an episode's length. Every
feature is computed with numpy / pyarrow kernels over a whole record batch: tokenising, token
hashing (a polynomial hash over the UTF-8 bytes, finalised by SplitMix64), counting, bucketing
and sketching have no per-token or per-step Python step. Only the SHA-256 of the fingerprint
runs once per episode.

This module finds the episodes of the steps and computes their fingerprint, modality and safety
sum; for the vector it chooses each episode's rows (a chat's task side) and hands them to the
kernels of ``ledger.episode_vectors``, which tokenise, hash, fold and sketch them. The kernels
were split off when this module stood at 997 of the 1,000 lines the house allows: they know
nothing of episode ids, their order or record batches, which is all this module's job; the
definitions above stay here, where every reader of the features is pointed.

Non-scope: the vectors' kernels (``ledger.episode_vectors``); storing features
(``ledger.batch_features``, ``ledger.index``), judging them (``ledger.contamination``).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
Requires episodes to be contiguous and their steps ascending, as schema validation
guarantees for every recorded batch; a step file that breaks this within one record batch (or
across two consecutive ones) raises `FeatureOrderError`. The index also checks the episodes
against ``episodes.parquet`` in order, which catches an episode that reappears later.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from trajledger.verify.errors import FormatError

from .episode_vectors import (
    TEXT_SLICE,
    VECTOR_DIM,
    NumericSketch,
    TextCounts,
    numeric_features,
    string_parts,
    text_vectors,
)
from .rollouts.chunks import StepLimitError, max_steps
from .rollouts.dedup import CONTENT_COLUMNS, list_values
from .rollouts.parquet_read import Source, iter_parquet, stated_steps
from .rollouts.space_values import leaf_arrays

__all__ = [
    "CONTENT_COLUMNS",
    "FEATURE_COLUMNS",
    "FEATURE_VERSION",
    "SPILL_STEPS",
    "FeatureChunk",
    "FeatureOrderError",
    "FeatureStream",
    "LongEpisode",
    "iter_step_features",
    "whole_episodes",
]

FEATURE_VERSION = 3
"""Version of the feature definitions (2: vectorised token hashing; 3: numeric vectors are
count sketches); part of the index format and of every kept features file."""

FEATURE_COLUMNS = ("episode_id", "step", *CONTENT_COLUMNS, "safety_interventions")
"""The step columns `iter_step_features` reads."""

TEXT_COLUMNS = ("content", "tool_calls", "tool_results")
PROMPT_EXCLUDED = ("system", "assistant")
"""Roles left out of a text vector: shared by design (system) or the policy's answer."""


class FeatureOrderError(FormatError):
    """A step file whose episodes are not contiguous or whose steps are not ascending."""


# --------------------------------------------------------------------------------------------
# Fingerprint bytes, per column


def _bytes_view(a: npt.NDArray[Any]) -> memoryview:
    """The bytes of an array, without a copy when it is contiguous (as ``tobytes`` would give)."""
    try:
        return np.ascontiguousarray(a).data.cast("B")
    except (TypeError, ValueError):  # a dtype the buffer protocol cannot show (datetime64)
        return memoryview(a.tobytes())


class _ColumnBytes:
    """A content column of a run of steps laid out so that any episode's bytes (as
    ``ledger.rollouts.dedup``) are a few memoryview slices, without re-encoding per episode."""

    def __init__(self, name: str, arr: pa.Array) -> None:
        self.prefix = name.encode() + b"\x00"
        t = arr.type
        self.kind = "other"
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            self.kind = "list"
            counts = pc.list_value_length(arr)
            lengths = np.asarray(
                (counts.fill_null(-1) if arr.null_count else counts).to_numpy(zero_copy_only=False),
                dtype=np.int64,
            )
            flat = pc.list_flatten(arr)
            values = list_values(flat)  # (booleans with a null: float64, as integers: rec47 4)
            self.cum = np.concatenate(([0], np.cumsum(np.maximum(lengths, 0))))
            self.a, self.a_size = _bytes_view(lengths), 8
            self.b, self.b_size, self.dtype = _bytes_view(values), values.itemsize, values.dtype
            self.own: tuple[memoryview, int, npt.NDArray[np.int64]] | None = None
            if flat.null_count and (pa.types.is_integer(flat.type)
                                    or pa.types.is_boolean(flat.type)):
                # Integers (booleans) with a null among them are float64: an episode without
                # one has its values hashed in their own type, as it would alone (`dedup`),
                # whatever its neighbours in the batch hold.
                own = np.asarray(flat.fill_null(pa.types.is_integer(flat.type) and 0)
                                 .to_numpy(zero_copy_only=False))
                nulls = np.concatenate(([0], np.cumsum(_bools(flat.is_null()), dtype=np.int64)))
                self.own = (_bytes_view(own), own.itemsize, nulls)
        elif (pa.types.is_string(t) or pa.types.is_large_string(t)) and arr.null_count == len(arr):
            self.kind = "nulls"  # "\x01" per step, joined by "\x00": one shared buffer
            self.a = memoryview(b"\x01\x00" * len(arr))
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            self.kind = "string"
            joined = pc.binary_join_element_wise(arr.fill_null("\x01"), pa.scalar("", t), "\x00")
            offsets, data = string_parts(joined)
            self.offsets = offsets - offsets[0]
            self.a = _bytes_view(data[int(offsets[0]) : int(offsets[-1])])
        else:
            nulls = (
                np.asarray(arr.is_null().to_numpy(zero_copy_only=False))
                if arr.null_count
                else np.zeros(len(arr), dtype=bool)  # the same bytes, without converting
            )
            values = np.asarray(
                (arr.fill_null(0) if arr.null_count else arr).to_numpy(zero_copy_only=False)
            )
            self.a, self.a_size = _bytes_view(nulls), nulls.itemsize
            self.b, self.b_size, self.dtype = _bytes_view(values), values.itemsize, values.dtype

    def whole(self) -> list[tuple[memoryview, np.dtype[Any] | None]]:
        """The bytes of the whole run, as `parts` gives them for one episode but for the
        separator after the last step (nulls and strings), and each part's dtype where the run
        decides it (a list's values: an integer list with a null element gives float64; a
        scalar column's values: a run's schema, float32 in one batch and float64 in the next,
        promoted as the whole episode's are: rev53)."""
        if self.kind in ("nulls", "string"):
            return [(self.a, None)]
        return [(self.a, None), (self.b, self.dtype)]

    def parts(
        self, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
    ) -> list[Iterator[Any]]:
        """Each episode's bytes of this column (rows ``starts[i] .. ends[i]``, not empty), as
        parallel iterators, each giving one part per episode: the column's prefix, then views of
        the layout. The offsets are computed for all episodes in one go; the views are cut one
        episode at a time (kept all at once, they would be hundreds of thousands of objects for
        the garbage collector to walk) by ``map`` over slices, so no Python code runs per
        episode (a generator per column cost more than hashing the bytes, for short episodes)."""
        p = repeat(self.prefix, len(starts))
        if self.kind == "nulls":
            return [p, _cut(self.a, np.zeros_like(starts), 2 * (ends - starts) - 1)]
        if self.kind == "string":
            return [p, _cut(self.a, self.offsets[starts], self.offsets[ends] - 1)]
        if self.kind == "list":
            a_lo, a_hi = starts * 8, ends * 8
            b_lo, b_hi = self.cum[starts] * self.b_size, self.cum[ends] * self.b_size
            if self.own is not None:  # each episode's values in its own type (see __init__)
                view, size, nulls = self.own
                lo, hi = self.cum[starts], self.cum[ends]
                floats = nulls[hi] > nulls[lo]
                b_lo = np.where(floats, b_lo, lo * size)
                b_hi = np.where(floats, b_hi, hi * size)
                views = map((self.b, view).__getitem__, (~floats).astype(int).tolist())
                return [p, _cut(self.a, a_lo, a_hi),
                        map(memoryview.__getitem__, views, map(slice, b_lo.tolist(),
                                                              b_hi.tolist()))]  # fmt: skip
        else:
            a_lo, a_hi = starts * self.a_size, ends * self.a_size
            b_lo, b_hi = starts * self.b_size, ends * self.b_size
        return [p, _cut(self.a, a_lo, a_hi), _cut(self.b, b_lo, b_hi)]


def _cut(
    view: memoryview, lo: npt.NDArray[np.int64], hi: npt.NDArray[np.int64]
) -> Iterator[memoryview]:
    """``view[lo[i]:hi[i]]`` for each i, lazily."""
    return map(view.__getitem__, map(slice, lo.tolist(), hi.tolist()))


# --------------------------------------------------------------------------------------------
# Episodes of a run of steps


@dataclass(frozen=True)
class FeatureChunk:
    """Features of consecutive complete episodes, in file order.

    Attributes:
        episode_ids: the episodes.
        num_steps: their step counts.
        fingerprints: exact content fingerprints (hex SHA-256).
        modality: ``text`` or ``numeric`` per episode.
        vectors: ``(n, 128)`` float32 feature vectors (zero rows where not valid).
        valid: whether each vector exists (a numeric episode of zeros, or a text episode
            without a word, has none).
        safety: summed safety interventions; None where no step records them.
    """

    episode_ids: list[str]
    num_steps: npt.NDArray[np.int64]
    fingerprints: list[str]
    modality: list[str]
    vectors: npt.NDArray[np.float32]
    valid: npt.NDArray[np.bool_]
    safety: list[int | None]

    def __len__(self) -> int:
        return len(self.episode_ids)

    def slice(self, a: int, b: int) -> FeatureChunk:
        """Episodes ``a .. b``."""
        return FeatureChunk(
            self.episode_ids[a:b], self.num_steps[a:b], self.fingerprints[a:b],
            self.modality[a:b], self.vectors[a:b], self.valid[a:b], self.safety[a:b],
        )  # fmt: skip

    @staticmethod
    def concat(chunks: Sequence[FeatureChunk]) -> FeatureChunk:
        """One chunk of several, in order."""
        return FeatureChunk(
            [i for c in chunks for i in c.episode_ids],
            np.concatenate([c.num_steps for c in chunks]) if chunks else np.zeros(0, np.int64),
            [f for c in chunks for f in c.fingerprints],
            [m for c in chunks for m in c.modality],
            (
                np.concatenate([c.vectors for c in chunks])
                if chunks
                else np.zeros((0, VECTOR_DIM), np.float32)
            ),
            np.concatenate([c.valid for c in chunks]) if chunks else np.zeros(0, bool),
            [s for c in chunks for s in c.safety],
        )


def _run_starts(ids: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.int64]:
    """Start rows of each run of equal ids (one comparison of neighbours for the whole batch)."""
    if ids.null_count:
        raise FeatureOrderError("steps: an episode_id is null")
    n = len(ids)
    changes = _bools(pc.not_equal(ids.slice(1), ids.slice(0, n - 1)))
    return np.concatenate(([0], np.flatnonzero(changes) + 1)).astype(np.int64)


def _runs(
    t: pa.Table, previous: str | None, starts: npt.NDArray[np.int64] | None = None
) -> tuple[npt.NDArray[np.int64], list[str]]:
    """Start rows of each episode run of ``t`` (``starts`` when the caller found them) and the
    run ids; checks contiguity and order."""
    ids_arr = _column(t, "episode_id")
    if starts is None:
        starts = _run_starts(ids_arr)
    n = len(ids_arr)
    run_ids = [str(v) for v in ids_arr.take(pa.array(starts)).to_pylist()]
    if len(set(run_ids)) != len(run_ids) or (previous is not None and run_ids[0] == previous):
        raise FeatureOrderError("steps: an episode's steps are not contiguous")
    if "step" in t.column_names:
        step = np.asarray(_steps(t).to_numpy())
        boundary = np.zeros(n, dtype=bool)
        boundary[starts] = True
        if np.any(~boundary[1:] & (step[1:] <= step[:-1])):
            raise FeatureOrderError("steps: an episode's steps are not in ascending order")
    return starts, run_ids


def _steps(t: pa.Table) -> pa.Array:
    """The step column of ``t`` (a null as -1)."""
    step = _column(t, "step")
    return step.fill_null(-1) if step.null_count else step


def _column(t: pa.Table, name: str) -> pa.Array:
    """A column of ``t`` as one array: its only chunk as it is (no copy), or the chunks joined."""
    column = t.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


_LONG_EPISODE = 256
"""Mean steps per episode from which a fingerprint hashes each part in turn instead of joining
them first (the join copies every byte once more)."""


_JOIN_BYTES = 1 << 20
"""Mean bytes per episode from which the parts are hashed in turn too (a join of an episode of
large tensors would copy them: rec47 finding 1)."""


def _held(rows: int, size: int) -> bool:
    """Whether an open episode of ``rows`` steps and ``size`` bytes is carried whole."""
    return rows <= SPILL_STEPS and size <= SPILL_BYTES


def _sha256_hex(parts: tuple[Any, ...]) -> str:
    """The hex SHA-256 of the parts one after the other (as of their join, without it)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.hexdigest()


def _features(
    t: pa.Table, previous: str | None, starts: npt.NDArray[np.int64] | None = None
) -> FeatureChunk:
    """Features of the complete episodes that make up ``t`` (starting at rows ``starts``, when
    the caller found them)."""
    n = t.num_rows
    names = set(t.column_names)
    starts, run_ids = _runs(t, previous, starts)
    ends = np.append(starts[1:], n)
    lengths = ends - starts
    col = _columns(t)

    # Fingerprints: one SHA-256 per episode over slices of per-column byte layouts.
    layouts = _layouts(col)
    counts = map(str.encode, map(str, lengths.tolist()))
    parts = [part for layout in layouts for part in layout.parts(starts, ends)]
    per_episode = zip(counts, *parts, strict=True)
    if n >= _LONG_EPISODE * len(starts) or t.nbytes >= _JOIN_BYTES * len(starts):
        # long or large episodes: their parts hashed as they are
        fingerprints = list(map(_sha256_hex, per_episode))
    else:  # short ones: one join and one call each beat a call per part
        fingerprints = [h.hexdigest() for h in map(hashlib.sha256, map(b"".join, per_episode))]
    # Safety interventions: sum of the known values per episode.
    safety_col = col("safety_interventions")
    if safety_col is None or safety_col.null_count == n:
        safety: list[int | None] = [None] * len(starts)
    else:
        known = np.asarray(safety_col.is_valid().to_numpy(zero_copy_only=False), dtype=np.int64)
        vals = np.asarray(safety_col.fill_null(0).to_numpy(), dtype=np.int64)
        sums = np.add.reduceat(vals, starts)
        seen = np.add.reduceat(known, starts)
        safety = [int(s) if k else None for s, k in zip(sums, seen, strict=True)]
    # Modality: text when any step of the episode has non-empty text.
    text_cols = [c for c in TEXT_COLUMNS if c in names]
    has_text = _has_text(col, text_cols, n)
    text_ep = (
        np.add.reduceat(has_text.astype(np.int64), starts) > 0
        if text_cols
        else np.zeros(len(starts), dtype=bool)
    )
    vectors = np.zeros((len(starts), VECTOR_DIM), dtype=np.float32)
    valid = np.zeros(len(starts), dtype=bool)
    numeric = np.flatnonzero(~text_ep)
    if len(numeric):
        numeric_features(
            (col("obs"), col("action"), col("reward")), starts[numeric], lengths[numeric],
            out=(vectors, valid, numeric),
        )  # fmt: skip
    if text_ep.any():
        # The task side: rows whose role is neither system nor assistant; an episode with no
        # such text row uses every non-system row.
        row_ep = np.repeat(np.arange(len(starts)), lengths)
        task_row, other_row = _task_rows(col, has_text)
        task_ep = np.add.reduceat(task_row.astype(np.int64), starts) > 0
        chosen = np.where(task_ep[row_ep], task_row, other_row)
        chosen &= text_ep[row_ep]
        idx = np.flatnonzero(chosen)
        if len(idx):
            texts = _texts(col, text_cols, idx)
            owners = row_ep[idx]
            # Tokenising and hashing need ~40 bytes of scratch per byte of text: work through
            # slices of about TEXT_SLICE bytes, cut between episodes, so memory stays bounded.
            sizes = np.asarray(pc.binary_length(texts).to_numpy(zero_copy_only=False))
            cum = np.cumsum(sizes)
            lo = 0
            while lo < len(idx):
                hi = int(np.searchsorted(cum, (cum[lo - 1] if lo else 0) + TEXT_SLICE)) + 1
                hi = min(max(hi, lo + 1), len(idx))
                while hi < len(idx) and owners[hi] == owners[hi - 1]:
                    hi += 1  # never split an episode
                first, last = int(owners[lo]), int(owners[hi - 1]) + 1
                tv, tvalid = text_vectors(
                    texts.slice(lo, hi - lo), owners[lo:hi] - first, last - first
                )
                keep_ = text_ep[first:last]
                vectors[first:last][keep_] = tv[keep_]
                valid[first:last][keep_] = tvalid[keep_]
                lo = hi
    return FeatureChunk(
        run_ids,
        lengths.astype(np.int64),
        fingerprints,
        ["text" if x else "numeric" for x in text_ep.tolist()],
        vectors,
        valid,
        safety,
    )


Columns = Callable[[str], "pa.Array | None"]
"""A run of steps' column by name (None: absent), each joined into one array once."""


def _columns(t: pa.Table) -> Columns:
    """`Columns` of ``t``."""
    names, combined = set(t.column_names), dict[str, pa.Array]()

    def col(name: str) -> pa.Array | None:
        if name not in names:
            return None
        if name not in combined:
            combined[name] = _column(t, name)
        return combined[name]

    return col


def _layouts(col: Columns) -> list[_ColumnBytes]:
    """The fingerprint's byte layouts of each content column's leaves, in their order."""
    return [
        _ColumnBytes(name, leaf)
        for c in CONTENT_COLUMNS
        if (arr := col(c)) is not None
        for name, leaf in leaf_arrays(c, arr)
    ]


def _has_text(col: Columns, text_cols: Sequence[str], n: int) -> npt.NDArray[np.bool_]:
    """Whether each of the ``n`` rows has non-empty text in a text column."""
    has_text = np.zeros(n, dtype=bool)
    for c in text_cols:
        arr = col(c)
        if arr is None or arr.null_count == n:
            continue
        lens = pc.binary_length(arr).fill_null(0)
        has_text |= np.asarray(lens.to_numpy(zero_copy_only=False)) > 0
    return has_text


def _task_rows(
    col: Columns, has_text: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """The rows of a conversation's task side (text, role neither system nor assistant), and
    the rows taken instead by an episode without one (text, role not system)."""
    n = len(has_text)
    role_col = col("role")
    if role_col is None:
        excluded, system = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    else:  # a null role is neither (as the empty string)
        if not (pa.types.is_string(role_col.type) or pa.types.is_large_string(role_col.type)):
            role_col = role_col.cast(pa.string())  # a dictionary-encoded column
        roles = role_col.fill_null("")
        excluded = _bools(pc.is_in(roles, value_set=pa.array(PROMPT_EXCLUDED, roles.type)))
        system = _bools(pc.equal(roles, pa.scalar("system", roles.type)))
    return has_text & ~excluded, has_text & ~system


def _texts(col: Columns, text_cols: Sequence[str], idx: npt.NDArray[np.int64]) -> pa.Array:
    """The text of rows ``idx``: their text columns joined by newlines (nulls empty)."""
    take = pa.array(idx)
    parts = [col(c).take(take) for c in text_cols]  # type: ignore[union-attr]
    return pc.binary_join_element_wise(
        *parts, pa.scalar("\n", pa.string()), null_handling="replace", null_replacement=""
    )


def _bools(arr: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.bool_]:
    """A boolean array without nulls as numpy (its bits unpacked: a tenth of ``to_numpy``)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count or not pa.types.is_boolean(arr.type) or arr.buffers()[1] is None:
        return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)
    bits = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
    unpacked = np.unpackbits(bits, count=arr.offset + len(arr), bitorder="little")
    return unpacked[arr.offset :].view(bool)


SPILL_STEPS = 1 << 16
"""Steps from which an episode is taken in pieces (`LongEpisode`), not as one run of rows."""
SPILL_BYTES = 64 << 20
"""Bytes of an open episode's rows from which it is taken in pieces too (rec47 finding 1: a
row group of four 64 MiB tensors, one episode, was carried, joined and copied once more)."""
PIECE_STEPS = 1 << 15
"""Steps of a long episode taken at once."""
CARRY_PARTS = 1 << 10
"""Parts of a carried episode gathered into one table (a copy of their rows, once)."""
SMALL_BYTES = 1 << 20
"""Bytes of a long episode's small parts (smaller than a piece) gathered into one piece."""


class _Spilled:
    """One part of a content column's bytes (see `_ColumnBytes.whole`) of a long episode, in a
    file of its own in the spill directory: the fingerprint hashes the episode's length
    before any column, so each column's bytes wait on disk until the episode ends."""

    def __init__(self, directory: str, trim: bool) -> None:
        self.file = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115 (closed by close())
        self.trim = trim  # the separator after the last step is not hashed
        self.runs: list[list[Any]] = []  # [dtype or None, bytes] per run of one dtype

    def write(self, data: memoryview, dtype: np.dtype[Any] | None) -> None:
        self.file.write(data)
        if self.runs and self.runs[-1][0] == dtype:
            self.runs[-1][1] += len(data)
        else:
            self.runs.append([dtype, len(data)])

    def hash_into(self, h: Any) -> None:
        """Feed the bytes to ``h``: those of a run given another dtype than the rest (an
        integer list's values in pieces without a null element, float64 in those with one)
        converted to the dtype of the episode's whole array."""
        self.file.seek(0)
        total = sum(size for _, size in self.runs) - self.trim
        dtypes = {d for d, _ in self.runs}
        target = np.result_type(*dtypes) if len(dtypes) > 1 else None
        for dtype, size in self.runs:
            size = min(size, total)
            total -= size
            while size:
                block = self.file.read(min(size, 1 << 22))
                if not block:
                    raise OSError("a spilled episode's file is shorter than written")
                size -= len(block)
                if target is not None and dtype != target:
                    block = np.frombuffer(block, dtype).astype(target).tobytes()
                h.update(block)


class LongEpisode:
    """The features of one episode of more than `SPILL_STEPS` steps, fed in pieces, in memory
    bounded by a piece: the sketch (`NumericSketch`) and safety sum are linear over steps,
    counted as they come; a conversation's distinct words and bigrams are counted
    (`TextCounts`); the fingerprint's bytes are written to files in a private directory and
    hashed when the episode ends (disk, not memory). Parts smaller than a piece (an episode
    in one-row batches) are gathered into one, up to `PIECE_STEPS` steps, `SMALL_BYTES` and
    `CARRY_PARTS` parts. The
    same features, bit for bit, as `_features` of all its rows at once. `close` (also after an
    error) removes the files.
    """

    def __init__(self, previous: str | None, spill: str | Path | None) -> None:
        """Before the episode's first step; ``previous``: the episode before it; ``spill``:
        where its directory is made (the system's temporary directory when None)."""
        self.episode: pa.Scalar | None = None
        self.steps = 0
        self._previous = previous
        self._dir = tempfile.mkdtemp(prefix="trajledger-episode-", dir=spill)  # 0700
        self._spilled: list[tuple[bytes, list[_Spilled]]] = []  # per content column's leaf
        self._last_step: int | None = None
        self._numeric: NumericSketch | None = NumericSketch()
        self._task = TextCounts()
        self._other: TextCounts | None = TextCounts()  # texts if no task side is found
        self._text = False
        self._safety, self._safety_seen = 0, False
        # Small parts (one schema) wait to be taken as one piece: a piece's fixed cost, paid
        # at each of the one-row batches an episode can come in, was 0.4 ms a step (spd53).
        self._small: list[pa.Table] = []
        self._small_rows = self._small_bytes = 0

    def add(self, t: pa.Table) -> None:
        """The next rows of the episode (one id).

        Raises:
            FeatureOrderError: its steps are not ascending, or it is the previous episode's.
        """
        if not t.num_rows:
            return
        self._check(t)
        for batch in t.to_batches():  # (a batch at a time: joining chunks would copy them)
            for lo in range(0, batch.num_rows, PIECE_STEPS):
                part = pa.Table.from_batches([batch.slice(lo, PIECE_STEPS)])
                rows, size = part.num_rows, part.nbytes
                if self._small and (
                    part.schema != self._small[0].schema
                    or self._small_rows + rows > PIECE_STEPS
                    or self._small_bytes + size > SMALL_BYTES
                    or len(self._small) >= CARRY_PARTS
                ):
                    self._flush()
                if rows < PIECE_STEPS and size < SMALL_BYTES:
                    self._small.append(part)
                    self._small_rows += rows
                    self._small_bytes += size
                else:
                    self._piece(part)

    def _check(self, t: pa.Table) -> None:
        """The episode's id (not the previous episode's) and step order, checked as its rows
        come (as `_runs` checks a run: the caller gives the rows of one id)."""
        first = t.column("episode_id")[0]
        if self._previous is not None and str(first.as_py()) == self._previous:
            raise FeatureOrderError("steps: an episode's steps are not contiguous")
        if self.episode is None:
            self.episode = first
        if "step" in t.column_names:
            step = np.asarray(_steps(t).to_numpy())
            if np.any(step[1:] <= step[:-1]) or (
                self._last_step is not None and step[0] <= self._last_step
            ):
                raise FeatureOrderError("steps: an episode's steps are not in ascending order")
            self._last_step = step[-1].item()

    def _flush(self) -> None:
        """Take the small parts waiting as one piece (a copy of at most a piece)."""
        small, self._small = self._small, []
        self._small_rows = self._small_bytes = 0
        if small:
            self._piece(small[0] if len(small) == 1 else pa.concat_tables(small).combine_chunks())

    def _piece(self, t: pa.Table) -> None:
        n = t.num_rows
        self.steps += n
        col = _columns(t)
        layouts = _layouts(col)
        if not self._spilled:
            self._spilled = [
                (layout.prefix, [_Spilled(self._dir, spill) for _ in layout.whole()])
                for layout in layouts
                for spill in [layout.kind in ("nulls", "string")]
            ]
        if [layout.prefix for layout in layouts] != [prefix for prefix, _ in self._spilled]:
            raise FeatureOrderError("steps: an episode's content columns change within it")
        for layout, (_, files) in zip(layouts, self._spilled, strict=True):
            for (data, dtype), spilled in zip(layout.whole(), files, strict=True):
                spilled.write(data, dtype)
        safety = col("safety_interventions")
        if safety is not None and safety.null_count < n:
            self._safety += int(np.sum(np.asarray(safety.fill_null(0).to_numpy(), np.int64)))
            self._safety_seen = True
        text_cols = [c for c in TEXT_COLUMNS if col(c) is not None]
        has_text = _has_text(col, text_cols, n)
        if has_text.any():
            self._text, self._numeric = True, None
            task, other = _task_rows(col, has_text)
            if task.any():
                self._task.add(_texts(col, text_cols, np.flatnonzero(task)))
                self._other = None
            elif self._other is not None:
                self._other.add(_texts(col, text_cols, np.flatnonzero(other)))
        elif self._numeric is not None:
            self._numeric.add((col("obs"), col("action"), col("reward")))

    def finish(self) -> FeatureChunk:
        """The episode's features (then `close`)."""
        try:
            self._flush()
            h = hashlib.sha256(str(self.steps).encode())
            for prefix, files in self._spilled:
                h.update(prefix)
                for spilled in files:
                    spilled.hash_into(h)
            counts = self._task if self._other is None else self._other
            if self._text:
                vector, valid = counts.vector()
            else:
                assert self._numeric is not None
                vector, valid = self._numeric.vector()
            wrapped = (self._safety + (1 << 63)) % (1 << 64) - (1 << 63)  # int64, as numpy
            episode = "" if self.episode is None else str(self.episode.as_py())
            return FeatureChunk(
                [episode], np.array([self.steps], np.int64), [h.hexdigest()],
                ["text" if self._text else "numeric"], vector, valid,
                [wrapped if self._safety_seen else None],
            )  # fmt: skip
        finally:
            self.close()

    def close(self) -> None:
        """Remove the spilled files and their directory."""
        for _, files in self._spilled:
            for spilled in files:
                spilled.file.close()
        self._spilled, self._small = [], []
        shutil.rmtree(self._dir, ignore_errors=True)


def _first_other(ids: pa.ChunkedArray, value: pa.Scalar) -> int | None:
    """The first row whose id is not ``value`` (None when every row's is)."""
    differs = pc.not_equal(ids, value)
    if differs.null_count:  # (fill_null costs as much as the comparison: one-row batches)
        differs = differs.fill_null(True)
    found = pc.index(differs, True).as_py()
    return None if found < 0 else int(found)


class FeatureStream:
    """Features of a stream of step batches, episode by episode, in stream order.

    `add` takes the next record batch and returns the features of the episodes it completes;
    the last episode of each batch may go on in the next one, so its rows are carried over,
    up to `SPILL_STEPS`: a longer episode is taken in pieces (`LongEpisode`), its fingerprint's
    bytes spilled to files under ``spill``. Memory: one batch and a few pieces, however long an
    episode. `finish` gives the last episode's; `close` (after an error) removes the files.
    """

    def __init__(self, spill: str | Path | None = None) -> None:
        """Start before the first step; a long episode's files go in a directory made under
        ``spill`` (a private directory; the system's temporary directory when None)."""
        # The open episode's rows, part by part (one schema), joined once: when it ends or is
        # taken in pieces (joined at each batch, its chunk list was copied at each: quadratic
        # in the batches, spd53). Its rows and its parts' nbytes summed as they come (the
        # table's own nbytes walks every chunk: ci53).
        self._carry: list[pa.Table] = []
        self._carry_rows = self._carry_bytes = 0
        self._gathered = 0  # its first parts, each of `CARRY_PARTS` parts gathered into one
        self._long: LongEpisode | None = None
        self._previous: str | None = None
        self._spill = spill

    def add(self, batch: pa.RecordBatch | pa.Table) -> FeatureChunk | None:
        """Features of the episodes ``batch`` completes (None when it completes none).

        Raises:
            FeatureOrderError: an episode's steps are not contiguous or not ascending.
        """
        try:
            if isinstance(batch, pa.Table) and any(c.num_chunks > 1 for c in batch.columns):
                # A table of several record batches (a row group gathered from chunks) is
                # taken a batch at a time: joining its chunks would copy every column,
                # carrying over copies only the episode that spans two batches. (The features
                # of an episode never depend on how its steps were cut.)
                done = [c for b in batch.to_batches() if (c := self._add(b)) is not None]
                return FeatureChunk.concat(done) if done else None
            return self._add(batch)
        except BaseException:
            self.close()
            raise

    def _add(self, batch: pa.RecordBatch | pa.Table) -> FeatureChunk | None:
        t = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if t.num_rows == 0:
            return None
        done: list[FeatureChunk] = []
        if self._long is not None or self._carry:
            # The open episode ends where t's ids first differ from it: only its rows are
            # joined to it (joining the whole batch would copy every column).
            first = (
                self._long.episode if self._long is not None
                else self._carry[0].column("episode_id")[0]
            )  # fmt: skip
            b = _first_other(t.column("episode_id"), first)
            head = t if b is None else t.slice(0, b)
            if self._long is None:
                rows, size = self._carry_rows + head.num_rows, self._carry_bytes + head.nbytes
                if _held(rows, size):
                    self._carry_on(head, rows, size)
                    if b is None:
                        return None
                    done.append(self._complete(self._joined()))
                else:
                    self._long = LongEpisode(self._previous, self._spill)
                    self._long.add(self._joined())
            if self._long is not None:
                self._long.add(head)
                if b is None:
                    return None
                done.append(self._ended(self._long))
                self._long = None
            t = t.slice(b)
        # The episodes of t, found once: all but the last run are complete.
        starts = _run_starts(_column(t, "episode_id"))
        cut = int(starts[-1])
        if cut:
            done.append(self._complete(t.slice(0, cut), starts[:-1]))
        rest = t.slice(cut)
        if _held(rest.num_rows, size := rest.nbytes):
            self._carry_on(rest, rest.num_rows, size)
        else:
            self._long = LongEpisode(self._previous, self._spill)
            self._long.add(rest)
        return FeatureChunk.concat(done) if done else None

    def _carry_on(self, part: pa.Table, rows: int, size: int) -> None:
        """Carry ``part`` too (the open episode's ``rows`` and ``size`` with it)."""
        if self._carry and part.schema != self._carry[0].schema:
            # (as each batch was joined before: the schemas promoted, or refused, here)
            self._carry = [pa.concat_tables([*self._carry, part], promote_options="permissive")]
            self._gathered = 1
        elif part.num_rows or not self._carry:  # (none: the batch's first row ends it)
            self._carry.append(part)
            if len(self._carry) - self._gathered >= CARRY_PARTS:
                # (a part's objects cost about 1.5 KB: 60,000 one-row parts held 92 MiB)
                tail = pa.concat_tables(self._carry[self._gathered :]).combine_chunks()
                self._carry[self._gathered :] = [tail]
                self._gathered += 1
        self._carry_rows, self._carry_bytes = rows, size

    def _joined(self) -> pa.Table:
        """The carried episode's rows as one table (no longer carried)."""
        parts, self._carry = self._carry, []
        self._carry_rows = self._carry_bytes = self._gathered = 0
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def _ended(self, long: LongEpisode) -> FeatureChunk:
        chunk = long.finish()
        self._previous = chunk.episode_ids[-1]
        return chunk

    def _complete(self, t: pa.Table, starts: npt.NDArray[np.int64] | None = None) -> FeatureChunk:
        """Features of the complete episodes of ``t``: runs of episodes in one go, each of
        more than `SPILL_STEPS` steps in pieces."""
        if starts is None:
            starts = _run_starts(_column(t, "episode_id"))
        ends = np.append(starts[1:], t.num_rows)
        longer = np.flatnonzero(ends - starts > SPILL_STEPS)
        if not len(longer):
            return self._some(t, 0, t.num_rows, starts)
        _runs(t, self._previous, starts)  # contiguity, checked over all of t
        done, lo = [], 0
        for k in longer.tolist():
            if starts[k] > lo:
                done.append(self._some(t, lo, int(starts[k]), starts))
            long = LongEpisode(self._previous, self._spill)
            try:
                long.add(t.slice(int(starts[k]), int(ends[k] - starts[k])))
            except BaseException:
                long.close()
                raise
            done.append(self._ended(long))
            lo = int(ends[k])
        if lo < t.num_rows:
            done.append(self._some(t, lo, t.num_rows, starts))
        return done[0] if len(done) == 1 else FeatureChunk.concat(done)

    def _some(self, t: pa.Table, lo: int, hi: int, starts: npt.NDArray[np.int64]) -> FeatureChunk:
        """`_features` of the episodes in rows ``lo .. hi`` of ``t``."""
        whole = lo == 0 and hi == t.num_rows
        inside = starts if whole else starts[(starts >= lo) & (starts < hi)] - lo
        chunk = _features(t.slice(lo, hi - lo), self._previous, inside)
        self._previous = chunk.episode_ids[-1]
        return chunk

    def finish(self) -> FeatureChunk | None:
        """Features of the last episode (None when there were no steps)."""
        if self._long is not None:
            long, self._long = self._long, None
            return self._ended(long)
        if not self._carry:
            return None
        return self._complete(self._joined())

    def close(self) -> None:
        """Drop an open episode (its spilled files removed)."""
        if self._long is not None:
            self._long.close()
        self._long, self._carry, self._gathered = None, [], 0


def iter_step_features(
    batches: Iterable[pa.RecordBatch | pa.Table], spill: str | Path | None = None
) -> Iterator[FeatureChunk]:
    """Features of every episode of a stream of step record batches, in stream order
    (`FeatureStream` over the stream; ``spill`` as there).

    Raises:
        FeatureOrderError: an episode's steps are not contiguous or not ascending.
    """
    stream = FeatureStream(spill)
    try:
        for batch in batches:
            chunk = stream.add(batch)
            if chunk is not None:
                yield chunk
        last = stream.finish()
        if last is not None:
            yield last
    finally:
        stream.close()


def whole_episodes(steps: pa.RecordBatch, spill: str | Path | None = None) -> FeatureChunk:
    """`iter_step_features` of a batch of whole episodes in one pass (the last episode is not
    held back for a next batch). Raises FeatureOrderError as `iter_step_features` does."""
    return FeatureStream(spill)._complete(pa.Table.from_batches([steps]))


def parquet_batches(source: Source, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """The record batches of the columns of the Parquet file ``source`` (a path or its bytes)
    that exist, read as `rollouts.parquet_read` reads a file of unknown origin."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(pa.BufferReader(source) if isinstance(source, bytes) else source)
    if (rows := stated_steps(meta)) > (limit := max_steps()):  # (before any is read: rec47 2)
        raise StepLimitError(
            f"a step file holds {rows:,} steps, more than the {limit:,} a batch may "
            "(TRAJLEDGER_MAX_STEPS), refused before reading them: set TRAJLEDGER_MAX_STEPS to "
            "the steps it holds to read it whole"
        )
    present = set(meta.schema.to_arrow_schema().names)
    yield from iter_parquet(source, [c for c in columns if c in present])
