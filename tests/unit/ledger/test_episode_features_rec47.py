"""A ``list<bool>`` observation or action with a null element (rec47 finding 4): the rollout
schema takes it (``validate``: OK), and numpy gave its values as an array of Python objects,
so the fingerprint hashed their addresses: the same episode had another exact-duplicate
fingerprint in every process (`record` of one file twice: two features files). Such values are
now hashed as float64 (1, 0, NaN), as integers with a null element are, by `dedup` and by the
features alike, whatever the cut.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from trajledger.ledger import episode_features
from trajledger.ledger.episode_features import FeatureChunk, iter_step_features, whole_episodes
from trajledger.ledger.rollouts.dedup import episode_fingerprints


def _episodes(obs: pa.Array, lengths: list[int]) -> pa.Table:
    ids = np.repeat([f"e{i}" for i in range(len(lengths))], lengths)
    n = len(ids)
    return pa.table({
        "episode_id": pa.array(ids),
        "step": pa.array(np.concatenate([np.arange(k) for k in lengths]), pa.int64()),
        "obs": obs,
        "reward": pa.array(np.ones(n)),
    })  # fmt: skip


def _obs(n: int, nulls: list[int], kind: pa.DataType) -> pa.Array:
    values: list[list[bool | float | None]] = [[bool(i % 2), bool(i % 3)] for i in range(n)]
    for i in nulls:
        values[i][1] = None
    if kind == pa.float64():
        values = [[None if v is None else float(v) for v in row] for row in values]
    return pa.array(values, pa.list_(kind))


def test_booleans_with_a_null_are_hashed_as_their_float64_values(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Episodes of 5, 300 and 7 steps, a null in the second only: every fingerprint that of
    the same episode with the values as float64 (the null a NaN) where it holds the null, and
    as booleans where it does not; `dedup`, the whole batch, and the stream cut in batches of
    17 with episodes of over 50 steps in pieces of 13 agree."""
    lengths = [5, 300, 7]
    n = sum(lengths)
    bools = _episodes(_obs(n, [100], pa.bool_()), lengths)
    floats = _episodes(_obs(n, [100], pa.float64()), lengths)
    plain = _episodes(_obs(n, [], pa.bool_()), lengths)
    want = episode_fingerprints(bools)
    assert want["e1"] == episode_fingerprints(floats)["e1"]
    assert want["e0"] == episode_fingerprints(plain)["e0"] != episode_fingerprints(floats)["e0"]
    whole = whole_episodes(bools.combine_chunks().to_batches()[0])
    assert whole.fingerprints == [want[e] for e in whole.episode_ids]
    monkeypatch.setattr(episode_features, "SPILL_STEPS", 50)
    monkeypatch.setattr(episode_features, "PIECE_STEPS", 13)
    cut = FeatureChunk.concat(list(iter_step_features(bools.to_batches(17), tmp_path)))
    assert cut.fingerprints == whole.fingerprints
    assert cut.vectors.tobytes() == whole.vectors.tobytes()
