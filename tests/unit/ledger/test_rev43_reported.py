"""Findings of rev43 in files other helpers own, as strict xfails for the lead or the owner
(each fails now; remove the mark with the fix). docs/SECURITY.md, "Review of 2026-12-07,
thirty-first round (rev43)"; reproducers in /tmp/rev43-s/. Finding 6 fixed by feat46 (a long
episode taken in pieces): its mark removed.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa

from trajledger.ledger.batch_features import FeatureRecorder
from trajledger.ledger.rollouts.normalise import normalise_steps


def _episodes(steps: int, length: int) -> pa.Table:
    """``steps`` steps of constant data in episodes of ``length`` steps."""
    at = np.arange(steps)
    return normalise_steps(pa.table({
        "episode_id": pa.array([f"e{i}" for i in at // length]),
        "step": pa.array(at % length, pa.int64()), "obs": pa.array(np.zeros(steps, np.float32)),
        "action": pa.array(np.zeros(steps, np.int64)), "reward": pa.array(np.zeros(steps)),
        "terminated": pa.array(at % length == length - 1),
        "truncated": pa.array(np.zeros(steps, bool))}))  # fmt: skip


def _features_peak(table: pa.Table, workdir: Path) -> int:
    """Bytes numpy held at most (tracemalloc) while a batch's episode features were computed
    from ``table``, fed as `record` feeds them (one row group of the steps file at a time)."""
    workdir.mkdir()
    recorder = FeatureRecorder(workdir)
    tracemalloc.start()
    try:
        for batch in table.to_batches(max_chunksize=65536):
            recorder.add(pa.Table.from_batches([batch]))
        recorder.finish("sha256:" + "0" * 64)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_one_long_episodes_features_take_no_more_memory_than_many_short_ones(
        tmp_path: Path) -> None:
    """`record` of one episode of 8,000,000 constant steps (a 212,763-byte Parquet file, every
    footer true: /tmp/rev43-s/mkrows.py) peaked at 3,488 MiB; the same steps in episodes of
    1,000 at 353 MiB (mkrows_eps.py); 2,000,000 steps in one episode at 1,018 MiB. The
    features of an episode (`FeatureRecorder.finish`: `episode_features._features`,
    `episode_vectors.numeric_features`' scratch of 320 MiB for 2M steps) hold all its steps;
    no limit bounds an episode's length, and a page of a few bytes holds 2**31 values, so a
    vendor's signed batch of kilobytes takes a buyer's gate out of memory. Here 400,000 steps:
    one episode against 400 of 1,000 steps."""
    many = _features_peak(_episodes(400_000, 1_000), tmp_path / "many")
    one = _features_peak(_episodes(400_000, 400_000), tmp_path / "one")
    assert one < 2 * many + (16 << 20), (one >> 20, many >> 20)
