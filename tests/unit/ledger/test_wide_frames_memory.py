"""Recording wide frames (an image a step) takes memory in proportion to a block, not to the
batch: out42 recorded 50 frames of 1024x1024x3 (150 MiB) with a 5 GiB peak, where the step
hashes (`row_hashes.row_sums`), the column windows (`step_columns.columns`, computed whole
before finding a frame has too many columns) and the Parquet reader's bomb check
(`parquet_read._row_bytes`, a zero per value) each took 8 to 24 bytes a value (the lead, at
out42's merge). The peaks are numpy's allocations as `tracemalloc` sees them."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trajledger.ledger.rollouts.parquet_read import iter_parquet
from trajledger.ledger.row_hashes import row_sums
from trajledger.ledger.step_windows import iter_marked

WIDTH, ROWS = 1 << 20, 8  # (8 MiB of uint8 values, 1 MiB a frame)
VALUES = np.random.default_rng(0).integers(0, 256, WIDTH * ROWS, dtype=np.uint8)
FRAMES = pa.FixedSizeListArray.from_arrays(pa.array(VALUES), WIDTH)


def peak(work: Callable[[], object]) -> float:
    """The peak of the allocations ``work`` makes, in bytes of `VALUES`."""
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1] / VALUES.nbytes
    finally:
        tracemalloc.stop()


def test_step_hashes_of_wide_frames_take_a_block_of_memory() -> None:
    assert peak(lambda: row_sums(FRAMES, 0, ROWS)) < 8  # (16.5 before)


def test_step_hashes_by_blocks_are_the_hashes_of_the_whole() -> None:
    whole = row_sums(FRAMES, 3, ROWS)
    assert whole is not None
    alone = [row_sums(FRAMES.slice(i, 1), 3, 1) for i in range(ROWS)]
    assert np.array_equal(whole[0], np.concatenate([a[0] for a in alone if a is not None]))
    assert whole[1].tolist() == [WIDTH] * ROWS


def test_windows_of_wide_frames_take_a_block_of_memory() -> None:
    steps = pa.record_batch({
        "episode_id": pa.array(["a"] * ROWS), "step": pa.array(np.arange(ROWS)),
        "obs": FRAMES, "is_first": pa.array([True] + [False] * (ROWS - 1)),
        "terminated": pa.array([False] * (ROWS - 1) + [True]),
        "truncated": pa.array([False] * ROWS)})
    assert peak(lambda: list(iter_marked([steps], orders=True))) < 8  # (16.5 before)


def test_reading_wide_frames_checks_no_value_one_by_one(tmp_path: Path) -> None:
    path = tmp_path / "wide.parquet"
    offsets = pa.array(np.arange(0, WIDTH * ROWS + 1, WIDTH, dtype=np.int32))
    pq.write_table(pa.table({"id": pa.array(["e"] * ROWS),
                             "obs": pa.ListArray.from_arrays(offsets, pa.array(VALUES))}), path)
    assert peak(lambda: list(iter_parquet(path, ["id", "obs"]))) < 1  # (24 before)


def test_windows_of_stacked_wide_frames_take_a_block_of_memory() -> None:
    """24 frames of (512, 512, 4) stacked along the last axis (24 MiB): the windows over their
    newest frames (`frame_stacks.FrameStacks`) by blocks of steps, not the batch's newest
    frames copied, quantised and hashed at once (5.4 x the values before, frames43)."""
    from trajledger.ledger.rollouts.schema import tensor_field

    rows, side = 24, 512
    o = np.random.default_rng(1).integers(0, 256, (rows, side, side), dtype=np.uint8)
    steps = np.stack([np.stack([o[max(t + j - 3, 0)] for j in range(4)], axis=-1)
                      for t in range(rows)])
    field = tensor_field("obs", pa.uint8(), (side, side, 4))
    obs = pa.FixedSizeListArray.from_arrays(pa.array(steps.ravel()), side * side * 4)
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["a"] * rows), obs.cast(field.type)],
        schema=pa.schema([pa.field("episode_id", pa.string()), field]))
    got: list[int] = []
    tracemalloc.start()
    try:
        got += [len(w.hashes) for w, _ in iter_marked([batch]) if w.still]
        top = tracemalloc.get_traced_memory()[1] / steps.nbytes
    finally:
        tracemalloc.stop()
    assert got == [rows - 15, rows - 15]  # the stack's windows, order 0 and its images'
    assert top < 2.5  # (5.4 before)


_WRITE = """
import sys, tempfile
from pathlib import Path
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from trajledger.ledger.rollouts.parquet_io import write_steps_parquet
rows, width = 24, 1 << 20
values = np.random.default_rng(0).integers(0, 256, rows * width, dtype=np.uint8)
obs = pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32) * width),
                               pa.array(values))
steps = pa.table({"episode_id": pa.array(["e"] * rows), "step": pa.array(np.arange(rows)),
                  "obs": obs, "action": pa.array(np.zeros(rows, np.int64)),
                  "reward": pa.array(np.zeros(rows)), "truncated": pa.array(np.zeros(rows, bool)),
                  "terminated": pa.array(np.arange(rows) == rows - 1)})
with tempfile.TemporaryDirectory() as d:
    write_steps_parquet([steps], Path(d) / "s.parquet", episodes_path=Path(d) / "e.parquet")
    top = pa.default_memory_pool().max_memory() / values.nbytes
    back = pq.read_table(Path(d) / "s.parquet")
    assert back.column("obs").combine_chunks().flatten().to_numpy().tobytes() == values.tobytes()
print(top)
"""


def test_writing_wide_frames_takes_a_row_group_of_values_at_a_time() -> None:
    """24 frames of 1 MiB written as a step file: Arrow's Parquet writer takes about 12 bytes
    a value of a row group at once (its levels and encodings), so row groups are cut by the
    values under lists they hold (`parquet_io.ROW_GROUP_VALUES`), not only by 128 MiB. The
    peak of Arrow's memory pool, in a process of its own (the pool's peak is the process's):
    11.5 x the values before (frames43)."""
    import subprocess
    import sys

    got = subprocess.run([sys.executable, "-c", _WRITE], capture_output=True, text=True,
                         check=True)
    assert float(got.stdout) < 4  # (11.5 before)
