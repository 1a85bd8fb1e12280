"""Episode features (``ledger/episode_features.py``), white-box: its sketch span
(``_SKETCH_BLOCK``) made small, so that an episode longer than a span is cut into spans counted
from its first step, whatever the record batches it arrives in. The properties of the features
(equal when computed again from the stored bytes) are in tests/property/test_features_props.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from trajledger.ledger import episode_features
from trajledger.ledger.episode_features import FeatureChunk, iter_step_features


def test_long_episodes_are_sketched_in_spans_from_their_first_step(monkeypatch: Any) -> None:
    # An episode longer than a sketch span gets the same vector whatever the record batches.
    monkeypatch.setattr(episode_features, "_SKETCH_BLOCK", 256)
    rng = np.random.default_rng(1)
    n = 1000
    t = pa.table({
        "episode_id": ["long"] * 900 + ["short"] * 100,
        "step": pa.array(np.r_[np.arange(900), np.arange(100)], pa.int64()),
        "obs": pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=n * 5)), 5),
        "reward": rng.normal(size=n),
    })  # fmt: skip
    whole = FeatureChunk.concat(list(iter_step_features([t])))
    for size in (1, 97, 256, 512):
        cut = FeatureChunk.concat(list(iter_step_features(t.to_batches(max_chunksize=size))))
        assert np.array_equal(whole.vectors, cut.vectors), size
    assert whole.valid.all()
