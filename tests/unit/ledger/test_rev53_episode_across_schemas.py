"""rev53: an episode whose rows come in batches of different schemas (a scalar column float32
in one, float64 in the next) has the features of the whole episode (the batches joined, their
types promoted), whether it is carried over the batches or, past `SPILL_STEPS`, taken in pieces
(`LongEpisode`); docs/SECURITY.md, "Review of 2026-12-07, forty-first round (rev53)"."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from trajledger.ledger import episode_features
from trajledger.ledger.episode_features import FeatureChunk, iter_step_features, whole_episodes


def _steps(rows: range, reward: pa.DataType, action: pa.DataType) -> pa.Table:
    n = len(rows)
    return pa.table({
        "episode_id": pa.array(["e1"] * n),
        "step": pa.array(np.array(rows), pa.int64()),
        "obs": pa.array([[float(i), 0.5] for i in rows], pa.list_(pa.float32())),
        "action": pa.array(np.array(rows) % 3, action),
        "reward": pa.array([0.25 * i if i % 7 else None for i in rows], reward),
    })


@pytest.mark.parametrize("long", [False, True], ids=["carried", "in pieces"])
@pytest.mark.parametrize(("first", "then"), [
    ((pa.float32(), pa.int64()), (pa.float64(), pa.int64())),
    ((pa.float64(), pa.int32()), (pa.float64(), pa.int64())),
])  # fmt: skip
def test_an_episode_over_batches_of_two_schemas_has_the_whole_episodes_features(
    monkeypatch: pytest.MonkeyPatch, long: bool, first: tuple[pa.DataType, pa.DataType],
    then: tuple[pa.DataType, pa.DataType],
) -> None:
    """Taken in pieces, each piece's scalar column was hashed in its own type (float32 bytes,
    then float64 bytes) where the whole episode hashes them promoted: another fingerprint than
    the same episode's carried, or read whole (a list column's values were converted; a
    scalar's not). Expected: one fingerprint, however the steps were cut."""
    a, b = _steps(range(0, 12), *first), _steps(range(12, 30), *then)
    whole = pa.concat_tables([a, b], promote_options="permissive").combine_chunks()
    want = whole_episodes(whole.to_batches()[0])
    if long:  # (more than 8 steps taken in pieces of 5)
        monkeypatch.setattr(episode_features, "SPILL_STEPS", 8)
        monkeypatch.setattr(episode_features, "PIECE_STEPS", 5)
    got = FeatureChunk.concat(list(iter_step_features([a, b])))
    assert got.fingerprints == want.fingerprints
    assert got.vectors.tobytes() == want.vectors.tobytes()
