"""Step hashes of observations (``step_windows.step_hashes``'s parts; moved out of
``step_windows`` by rows36 to keep it under 1,000 lines): of a leaf's rows, of the rows of a
matrix of quantised values, or of each row's own columns kept.

Scope: `quantised` (a step's values as hashed), `tensor_width`, `row_sums` (per row of a
leaf, the sum of its mixed pairs), `pair_salts` (the salt of each pair of values of a leaf),
`matrix_hashes` (``step_windows.step_hashes`` of observations of these quantised values: the
windows without their clock columns, rev31) and `kept_hashes` (the same, each row of its own
columns alone, in one pass: a tensor's windows without standing columns, copy35, or without
their clock columns whatever their sets, rows36).
Non-scope: the windows of these hashes (``step_windows``).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .episode_vectors import splitmix64

__all__ = ["kept_hashes", "matrix_hashes", "pair_salts", "quantised", "row_sums", "tensor_width"]

_U64 = np.uint64
_SALT = _U64(0xD6E8FEB86659FD93)
_BLOCK = 1 << 21  # values hashed at once by `kept_hashes`: bounded memory
_ROUND = np.uint32(1 << 12)  # half of the 13 mantissa bits dropped
_KEEP = np.uint32(0xFFFFE000)


def pair_salts(leaf: int, pairs: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The salt of each pair (its position ``pairs``) of values of leaf ``leaf``."""
    with np.errstate(over="ignore"):
        return splitmix64(pairs + _SALT * _U64(leaf + 1))


def quantised(values: pa.Array) -> npt.NDArray[np.uint32]:
    """Each value as float32 rounded to 10 bits of mantissa (nearest), -0.0 as 0.0, a null as
    NaN (integers through float64, as a float64 copy of them)."""
    if not pa.types.is_floating(values.type):
        values = values.cast(pa.float64())
    if values.null_count:
        values = values.fill_null(float("nan"))
    with np.errstate(over="ignore", invalid="ignore"):
        f = np.asarray(values.to_numpy(zero_copy_only=False)).astype(np.float32) + np.float32(0)
    with np.errstate(over="ignore"):
        return np.asarray((f.view(np.uint32) + _ROUND) & _KEEP, dtype=np.uint32)


def _leaf_rows(arr: pa.Array) -> tuple[pa.Array, npt.NDArray[np.int64]]:
    """The values of a (nested) list column and the row of each."""
    rows: npt.NDArray[np.int64] = np.arange(len(arr), dtype=np.int64)
    while pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or (
        pa.types.is_fixed_size_list(arr.type)
    ):
        parents = np.asarray(pc.list_parent_indices(arr).to_numpy(zero_copy_only=False))
        rows = rows[parents.astype(np.int64)]
        arr = pc.list_flatten(arr)
    return arr, rows


def tensor_width(arr: pa.Array) -> int | None:
    """The one length of a list column of numbers without null rows (a tensor), else None."""
    if arr.null_count or not len(arr) or not (
            pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)
            or pa.types.is_fixed_size_list(arr.type)):
        return None
    t = arr.type.value_type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
        return None
    if pa.types.is_fixed_size_list(arr.type):
        return int(arr.type.list_size)
    bounds = pc.min_max(pc.list_value_length(arr)).as_py()
    return int(bounds["min"]) if bounds["min"] == bounds["max"] else None


def row_sums(arr: pa.Array, leaf: int, n: int) -> tuple[npt.NDArray[np.uint64],
                                                        npt.NDArray[np.uint64]] | None:
    """Per row: the sum of the mixed pairs of its quantised values (value 2j in the low and
    2j + 1 in the high half of pair j, salted by j) and its number of values; None when a
    value is not a number. A tensor column takes a matrix path with the same result."""
    width = tensor_width(arr)
    if width is not None:  # (by blocks of rows: a frame's bytes take 8 x in uint64 pairs)
        flat, sums = pc.list_flatten(arr), np.empty(n, dtype=np.uint64)
        salts = pair_salts(leaf, np.arange((width + 1) // 2, dtype=np.uint64))
        step = max(1, _BLOCK // max(width, 1))
        for r in range(0, n, step):
            m = min(step, n - r)
            q = quantised(flat.slice(r * width, m * width)).reshape(m, width)
            if width % 2:
                q = np.hstack((q, np.zeros((m, 1), dtype=np.uint32)))
            pairs = q[:, 0::2].astype(np.uint64) | (q[:, 1::2].astype(np.uint64) << _U64(32))
            sums[r:r + m] = splitmix64(pairs ^ salts[None, :]).sum(axis=1, dtype=np.uint64)
        return sums, np.full(n, width, dtype=np.uint64)
    values, rows = _leaf_rows(arr)
    t = values.type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
        return None
    starts = np.searchsorted(rows, np.arange(n))
    ends = np.searchsorted(rows, np.arange(n), side="right")
    sums = np.zeros(n, dtype=np.uint64)
    if len(rows):
        at = np.arange(len(rows)) - starts[rows]
        shifted = quantised(values).astype(np.uint64) << ((at % 2) * 32).astype(np.uint64)
        first = np.flatnonzero(at % 2 == 0)
        mixed = splitmix64(np.add.reduceat(shifted, first) ^ pair_salts(
            leaf, (at[first] // 2).astype(np.uint64)))
        by_row = np.concatenate(([_U64(0)], np.cumsum(mixed, dtype=np.uint64)))
        p0, p1 = np.searchsorted(first, starts), np.searchsorted(first, ends)
        with np.errstate(over="ignore"):
            sums = by_row[p1] - by_row[p0]
    return sums, (ends - starts).astype(np.uint64)


def matrix_hashes(q: npt.NDArray[np.uint32], member: npt.NDArray[np.int64]
                  ) -> npt.NDArray[np.uint64]:
    """``step_windows.step_hashes`` of observations whose quantised values are ``q`` (a row a
    step), each column of member ``member`` (from 0: a Dict or Tuple space's, or all 0: a
    tensor), no null among them."""
    n = len(q)
    total = np.zeros(n, dtype=np.uint64)
    for k in np.unique(member).tolist():
        part = q[:, member == k]
        width = part.shape[1]
        if width % 2:
            part = np.hstack((part, np.zeros((n, 1), dtype=np.uint32)))
        pairs = part[:, 0::2].astype(np.uint64) | (part[:, 1::2].astype(np.uint64) << _U64(32))
        salts = pair_salts(k, np.arange(pairs.shape[1], dtype=np.uint64))
        sums = splitmix64(pairs ^ salts[None, :]).sum(axis=1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            total += splitmix64(sums ^ splitmix64(np.full(n, width + k, dtype=np.uint64)))
    return splitmix64(total)


def kept_hashes(q: npt.NDArray[np.uint32], keep: npt.NDArray[np.bool_],
                rows: npt.NDArray[np.int64] | None = None,
                member: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.uint64]:
    """Per row of a tensor's quantised values ``q`` (or per row ``rows`` of it): `matrix_hashes`
    of its columns ``keep`` (a row each; at least one) alone, in one pass whatever their sets:
    each row's kept
    values moved up in order, the rest 0 and their pairs left out, the width its own count.
    Not a call per set of columns: an attacker's batch whose every window has its own set of
    clock columns cost a Python call a window so (rev32). ``member``: each column's member of
    a Dict or Tuple space (ascending, `_members_kept`)."""
    if member is not None and member.any():
        return _members_kept(q, keep, rows, member)
    width = q.shape[1]
    out = np.empty(len(keep), dtype=np.uint64)
    cols = np.arange(width + width % 2)
    salts = pair_salts(0, np.arange(len(cols) // 2, dtype=np.uint64))
    step = max(1, _BLOCK // max(width, 1))
    for lo in range(0, len(keep), step):
        m = keep[lo : lo + step]
        n = m.sum(axis=1)
        g = np.zeros((len(m), len(cols)), dtype=np.uint32)
        part = q[lo : lo + step] if rows is None else q[rows[lo : lo + step]]
        g[cols[None, :] < n[:, None]] = part[m]  # row-major order: each row compacted
        pairs = g[:, 0::2].astype(np.uint64) | (g[:, 1::2].astype(np.uint64) << _U64(32))
        mixed = splitmix64(pairs ^ salts[None, :])
        mixed[cols[None, : len(salts)] >= ((n + 1) // 2)[:, None]] = 0
        out[lo : lo + step] = splitmix64(splitmix64(
            mixed.sum(axis=1, dtype=np.uint64) ^ splitmix64(n.astype(np.uint64))))
    return out


def _members_kept(q: npt.NDArray[np.uint32], keep: npt.NDArray[np.bool_],
                  rows: npt.NDArray[np.int64] | None, member: npt.NDArray[np.int64]
                  ) -> npt.NDArray[np.uint64]:
    """`kept_hashes` of a Dict or Tuple space (``member``: each column's, ascending), each row's
    members renumbered from 0 among those it keeps a column of (as ``np.unique`` of the kept
    columns' members renumbers them for `matrix_hashes`), all sets at once (dict36): member
    by member (the space's, a few), each row's kept values moved up as a tensor's are, its
    pairs salted by the row's rank of the member (a table of ranks and places), its sum mixed
    with its count plus that rank, a member the row keeps none of left out. A block of rows
    of one set (the rule: a clock in one place) is `matrix_hashes` of it. Not a call per set:
    a Dict space's windows, each with its own set of clock columns, cost a Python call a set
    so (rows36's Left)."""
    width = q.shape[1]
    heads = np.flatnonzero(np.diff(member, prepend=member[0] - 1) != 0)  # each member's first
    ends = np.append(heads[1:], width)
    most = int((ends - heads).max())
    table = np.stack([pair_salts(k, np.arange((most + 1) // 2, dtype=np.uint64))
                      for k in range(len(heads))])  # per rank and pair: its salt
    out = np.empty(len(keep), dtype=np.uint64)
    step = max(1, _BLOCK // max(width, 1))
    for lo in range(0, len(keep), step):
        m = keep[lo : lo + step]
        part = q[lo : lo + step] if rows is None else q[rows[lo : lo + step]]
        if (m == m[0]).all():  # one set
            ranks = np.unique(member[m[0]], return_inverse=True)[1].astype(np.int64)
            out[lo : lo + step] = matrix_hashes(part[:, m[0]], ranks.reshape(-1))
            continue
        total = np.zeros(len(m), dtype=np.uint64)
        rank = np.zeros(len(m), dtype=np.int64)
        for h, e in zip(heads.tolist(), ends.tolist(), strict=True):
            mm = m[:, h:e]
            n = mm.sum(axis=1)
            cols = np.arange(e - h + (e - h) % 2)
            g = np.zeros((len(m), len(cols)), dtype=np.uint32)
            g[cols[None, :] < n[:, None]] = part[:, h:e][mm]  # each row compacted
            pairs = g[:, 0::2].astype(np.uint64) | (g[:, 1::2].astype(np.uint64) << _U64(32))
            mixed = splitmix64(pairs ^ table[:, : len(cols) // 2][rank])
            mixed[cols[None, : len(cols) // 2] >= ((n + 1) // 2)[:, None]] = 0
            each = splitmix64(mixed.sum(axis=1, dtype=np.uint64) ^ splitmix64(
                (n + rank).astype(np.uint64)))
            with np.errstate(over="ignore"):
                total += np.where(n > 0, each, _U64(0))
            rank += n > 0
        out[lo : lo + step] = splitmix64(total)
    return out
