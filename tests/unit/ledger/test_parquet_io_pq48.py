"""Cutting a row group by the values it holds under lists (`parquet_io.row_groups`) counts per
row, over the rows the group spans (pq48 finding 1): before, every leaf value of the arrays
behind the group was counted one by one (an int64 a value, three times over): 0.1 CPU-s per
1M steps of 23 floats on the writer thread, 36 MiB of numpy memory per row group of them, and
16 x the frames of a row group of images (384 MiB for 24 frames of 1 MiB, where the reader and
the other passes take a block: out42, frames43). The peaks are numpy's allocations as
`tracemalloc` sees them; the cuts are checked against a count made row by row in Python."""

from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from trajledger.ledger.rollouts import parquet_io
from trajledger.ledger.rollouts.parquet_io import row_groups

ROWS = 1 << 17


def _peak_of_cutting(table: pa.Table, rows: int) -> int:
    tracemalloc.start()
    try:
        next(row_groups(table, rows))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_row_group_of_steps_is_counted_per_row_not_per_value() -> None:
    rng = np.random.default_rng(0)
    table = pa.table({
        "obs": pa.FixedSizeListArray.from_arrays(rng.standard_normal(ROWS * 17, np.float32), 17),
        "action": pa.ListArray.from_arrays(
            pa.array(np.arange(ROWS + 1, dtype=np.int32) * 6), pa.array(np.zeros(ROWS * 6))),
        "reward": pa.array(np.zeros(ROWS)),
    })
    # 23 values a row: an int64 each is 24 MiB; a count per row is 1 MiB.
    assert _peak_of_cutting(table, ROWS) < 8 * 8 * ROWS  # (36 MiB before, 3 MiB now)


def test_a_few_rows_sliced_from_a_long_list_cost_those_rows_only() -> None:
    values = pa.array(np.zeros(1 << 22, np.float32))
    long = pa.ListArray.from_arrays(pa.array(np.arange(0, (1 << 22) + 1, 1 << 10, np.int32)),
                                    values)  # 4,096 rows of 1,024 values
    table = pa.table({"obs": long.slice(100, 2)})
    assert _peak_of_cutting(table, ROWS) < 1 << 16  # (64 MiB before, 2 KiB now)


def test_wide_frames_are_cut_without_a_count_per_value() -> None:
    rows, width = 24, 1 << 20  # 24 MiB of uint8 frames: 6 row groups of 4 (ROW_GROUP_VALUES)
    frames = pa.ListArray.from_arrays(
        pa.array(np.arange(rows + 1, dtype=np.int32) * width),
        pa.array(np.zeros(rows * width, np.uint8)),
    )
    table = pa.table({"obs": frames})
    tracemalloc.start()
    try:
        sizes = [size for _, size in row_groups(table, ROWS)]
        top = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    per = parquet_io.ROW_GROUP_VALUES // width
    assert sizes == [per] * (rows // per)
    assert top < rows * width // 8  # (16 x the frames before: 384 MiB)


def _count(value: Any, t: pa.DataType, under: bool) -> int:
    """The values under lists of one value, as the writer counts them (reference)."""
    if pa.types.is_struct(t):
        return sum(_count(None if value is None else value[f.name], f.type, under) for f in t)
    if pa.types.is_map(t):
        items = value or []
        return sum(_count(k, t.key_type, True) + _count(v, t.item_type, True) for k, v in items)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return sum(_count(v, t.value_type, True) for v in (value or []))
    return int(under)


TYPES = [
    pa.list_(pa.float32()),
    pa.list_(pa.list_(pa.int64())),
    pa.list_(pa.float32(), 3),
    pa.list_(pa.list_(pa.float32(), 4), 2),
    pa.large_list(pa.string()),
    pa.map_(pa.string(), pa.list_(pa.int32())),
    pa.struct([("a", pa.list_(pa.int8())), ("b", pa.int64())]),
    pa.list_(pa.struct([("x", pa.list_(pa.int16())), ("y", pa.float32())])),
]


def _value(t: pa.DataType, rng: np.random.Generator) -> Any:
    if rng.random() < 0.15:
        return None
    if pa.types.is_fixed_size_list(t):
        return [_value(t.value_type, rng) for _ in range(t.list_size)]
    if pa.types.is_map(t):
        return [(str(i), _value(t.item_type, rng)) for i in range(rng.integers(0, 4))]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_value(t.value_type, rng) for _ in range(rng.integers(0, 5))]
    if pa.types.is_struct(t):
        return {f.name: _value(f.type, rng) for f in t}
    return "s" if pa.types.is_string(t) else 1


@pytest.mark.parametrize("t", TYPES, ids=str)
def test_cuts_follow_each_rows_own_values_in_slices_and_chunks(
    t: pa.DataType, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(len(str(t)))
    rows = [_value(t, rng) for _ in range(60)]
    whole = pa.array(rows, type=t)
    for lo, hi in ((0, 60), (7, 41), (33, 34), (59, 60)):
        part = whole.slice(lo, hi - lo)
        table = pa.table({"c": pa.chunked_array([part.slice(0, 5), part.slice(5)], type=t)})
        counts = [_count(v, t, False) for v in rows[lo:hi]]
        limit = max(1, sum(counts) // 3)
        monkeypatch.setattr(parquet_io, "ROW_GROUP_VALUES", limit)
        want, start = [], 0
        while start < len(counts):  # each cut as large as the limit allows, one row at least
            end, held = start + 1, counts[start]
            while end < len(counts) and held + counts[end] <= limit:
                held += counts[end]
                end += 1
            want.append(end - start)
            start = end
        got = [size for _, size in row_groups(table, 1000)]
        assert got == (want if sum(counts) > limit else [1000])
