"""Episode fingerprints: find the same episode recorded twice.

Scope: a content fingerprint per episode of a step table: SHA-256 over the episode's step count,
then for each content column (obs, action, reward, terminated, truncated, role, content,
tool_calls, tool_results; each member of a Dict or Tuple space column on its own, as
``obs.pos``) the column name and its values in step order. Two episodes with equal
fingerprints have identical content, whatever their ids, batches or timestamps.
Non-scope: near duplicates (the audit index compares episodes by similarity).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .space_values import leaf_arrays

__all__ = ["CONTENT_COLUMNS", "episode_fingerprints", "list_values"]

CONTENT_COLUMNS = (
    "obs",
    "action",
    "reward",
    "terminated",
    "truncated",
    "role",
    "content",
    "tool_calls",
    "tool_results",
)


def list_values(flat: pa.Array) -> np.ndarray[Any, Any]:
    """The values under a list as numpy gives them, but booleans with a null among them as
    float64 (1, 0, NaN), as numpy gives integers with a null: numpy gives them as an array of
    Python objects, whose bytes are their addresses (rec47 finding 4: the same episode had
    another fingerprint in every process)."""
    if flat.null_count and pa.types.is_boolean(flat.type):
        flat = flat.cast(pa.float64())
    return np.asarray(flat.to_numpy(zero_copy_only=False))


def _column_bytes(col: pa.ChunkedArray, start: int, end: int) -> bytes:
    arr = col.slice(start, end - start).combine_chunks()
    if (
        pa.types.is_list(arr.type)
        or pa.types.is_large_list(arr.type)
        or pa.types.is_fixed_size_list(arr.type)
    ):
        lengths = pc.list_value_length(arr).fill_null(-1).to_numpy(zero_copy_only=False)
        values = list_values(pc.list_flatten(arr))
        return np.asarray(lengths, dtype=np.int64).tobytes() + values.tobytes()
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return "\x00".join("\x01" if v is None else v for v in arr.to_pylist()).encode("utf-8")
    nulls = arr.is_null().to_numpy(zero_copy_only=False)
    values = (
        arr.fill_null(0).to_numpy(zero_copy_only=False)
        if arr.null_count
        else arr.to_numpy(zero_copy_only=False)
    )
    return np.asarray(nulls).tobytes() + np.asarray(values).tobytes()


def episode_fingerprints(steps: pa.Table) -> dict[str, str]:
    """Map each episode id to the hex fingerprint of its content (steps in step order)."""
    if steps.num_rows == 0:
        return {}
    order = pc.sort_indices(steps, sort_keys=[("episode_id", "ascending"), ("step", "ascending")])
    table = steps.take(order)
    ids = table.column("episode_id").to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    ends = np.append(starts[1:], len(ids))
    cols: list[tuple[str, Any]] = []
    for c in CONTENT_COLUMNS:
        if c not in table.column_names:
            continue
        col = table.column(c)
        if pa.types.is_struct(col.type):  # a Dict or Tuple space: each member in order
            leaves = leaf_arrays(c, col.combine_chunks())
            cols.extend((name, pa.chunked_array([leaf])) for name, leaf in leaves)
        else:
            cols.append((c, col))
    out: dict[str, str] = {}
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        h = hashlib.sha256(str(b - a).encode())
        for name, col in cols:
            h.update(name.encode() + b"\x00")
            h.update(_column_bytes(col, a, b))
        out[str(ids[a])] = h.hexdigest()
    return out
