"""The record batches of a step file as ``step_windows`` reads them: each run of batches of
null observations joined to a neighbour (`observed`), each cut where its observations' width
changes (`one_width`), and each batch's observations as a matrix of quantised columns
(`columns`, `joined`).

Scope: the steps' observations, batch by batch, before any window is hashed.
Non-scope: the windows and their hashes (``step_windows``); the step hashes
(``row_hashes``).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .episode_vectors import splitmix64
from .rollouts.space_values import leaf_arrays
from .row_hashes import quantised, tensor_width

__all__ = ["Columns", "columns", "joined", "observed", "one_width"]

_NULL_ROW = np.uint32(0x7FC01000)  # a null step's quantised values (a NaN no value rounds to)
_U64 = np.uint64


Columns = tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint64], npt.NDArray[np.float64],
                 npt.NDArray[np.int64]]


def columns(obs: pa.Array, most: int) -> Columns | None:
    """The quantised observations of a column of 2 to ``most`` numbers a row (a matrix,
    a row a step; `row_hashes.quantised`), and each column's salt: 0, or its member's of a
    Dict or Tuple space (a tensor or a number each; copy30), so that columns are permuted
    within a member;
    the raw values (float64) and each column's member (from 0, for the clocks); else None
    (``step_windows.COLUMNS``: none). A null step is a row of `_NULL_ROW` (raw: NaN), so
    that one null observation does not turn a batch's windows off (img34)."""
    if obs.null_count and obs.null_count < len(obs):
        valid = np.asarray(obs.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        some = columns(obs.filter(pa.array(valid)), most)
        if some is None:
            return None
        q = np.full((len(obs), some[0].shape[1]), _NULL_ROW, dtype=np.uint32)
        values = np.full(q.shape, np.nan)
        q[valid], values[valid] = some[0], some[2]
        return q, some[1], values, some[3]
    parts: list[npt.NDArray[np.uint32]] = []
    salts, raw, member = [], [], []
    for k, (_, leaf) in enumerate(leaf_arrays("", obs)):
        t = leaf.type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
            width = tensor_width(leaf)
            if width is None:
                return None
            values = pc.list_flatten(leaf)
        elif leaf.null_count or (k == 0 and not pa.types.is_struct(obs.type)):
            return None  # a number a step: no columns to permute
        else:
            width, values = 1, leaf
        if sum(p.shape[1] for p in parts) + width > most:
            return None  # (before a frame's values are quantised and copied: 12 x its bytes)
        parts.append(quantised(values).reshape(len(obs), width))
        salt = splitmix64(np.array([k], dtype=np.uint64))[0] if k else _U64(0)
        salts.append(np.full(width, salt, dtype=np.uint64))
        raw.append(np.asarray(values.cast(pa.float64()).to_numpy(zero_copy_only=False),
                              dtype=np.float64).reshape(len(obs), width))
        member.append(np.full(width, k, dtype=np.int64))
    if not parts or not 2 <= sum(p.shape[1] for p in parts) <= most:
        return None
    one = len(parts) == 1  # a tensor: no copy
    return (parts[0] if one else np.hstack(parts), np.concatenate(salts),
            raw[0] if one else np.hstack(raw), np.concatenate(member))


def joined(a: Columns | None, b: Columns | None) -> Columns | None:
    """The rows of ``a`` then ``b`` (None when either is, or their columns differ)."""
    if a is None or b is None or not np.array_equal(a[1], b[1]) or not np.array_equal(
            a[3], b[3]):
        return None
    return np.vstack((a[0], b[0])), a[1], np.vstack((a[2], b[2])), a[3]


def observed(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The record batches with steps, each run of batches whose observations are all null
    joined to the batch before it (a first run: to the one after it), so that their steps are
    null steps of their episodes as within one batch, and a file's windows its steps', however
    its row groups are cut (rev38 finding 7: such a batch was skipped, its steps left out of
    their episode). Nothing when no step has an observation (a chat's)."""
    run: list[pa.RecordBatch] = []
    seen = False  # whether ``run`` holds an observation
    for batch in batches:
        if "obs" not in batch.schema.names or not batch.num_rows:
            continue
        blank = batch.column("obs").null_count == batch.num_rows
        if seen and not blank:
            yield _one_batch(run)
            run, seen = [], False
        run.append(batch)
        seen = seen or not blank
    if seen:
        yield _one_batch(run)


def _one_batch(run: list[pa.RecordBatch]) -> pa.RecordBatch:
    """The episode ids and observations of ``run``, one batch (copied only when there are
    several: a batch of null observations is rare)."""
    if len(run) == 1:
        return run[0]
    field = run[0].schema.field("obs")
    return pa.RecordBatch.from_arrays(
        [pa.concat_arrays([b.column("episode_id").cast(pa.string()) for b in run]),
         pa.concat_arrays([b.column("obs") for b in run])],
        schema=pa.schema([pa.field("episode_id", pa.string()), field]))


def one_width(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each record batch cut where its observations' number of values changes (a list
    column's; a null step has none), so that each part's are of one width and its episodes'
    `columns` are not turned off by another episode's width (frames43: a batch holding two
    widths had no ``step_windows.COLUMNS`` windows, for any episode in it)."""
    for batch in batches:
        obs = batch.column("obs")
        if not (pa.types.is_list(obs.type) or pa.types.is_large_list(obs.type)):
            yield batch
            continue
        w = np.asarray(pc.fill_null(pc.list_value_length(obs), -1).to_numpy(
            zero_copy_only=False))
        at = np.flatnonzero(w >= 0)
        cuts = at[1:][w[at[1:]] != w[at[:-1]]].tolist()
        for lo, hi in zip([0, *cuts], [*cuts, len(w)], strict=True):
            yield batch if not cuts else batch.slice(lo, hi - lo)
