"""One episode's vector fed in pieces (``ledger/episode_vectors.py`` `TextCounts`,
`NumericSketch`: rev43 finding 6, feat46): the bits of `text_vectors` and `numeric_vectors`
of all its rows at once, whatever the pieces and however often the counts are merged."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from trajledger.ledger import episode_vectors
from trajledger.ledger.episode_vectors import NumericSketch, TextCounts, text_vectors


@pytest.mark.parametrize("merge_min", [1, 50, 1 << 16])
def test_text_counts_merged_at_any_time_give_the_vector_of_all_texts(
    merge_min: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3,000 texts of words repeated and new (ASCII and not, empty and null), in pieces of 1
    to 200 texts, the counts merged after every piece, every few or only at the end."""
    monkeypatch.setattr(TextCounts, "_MERGE_MIN", merge_min)
    rng = np.random.default_rng(merge_min)
    words = [f"w{i}" for i in range(400)] + ["naïve", "Größe", "x_1"]
    texts = [
        None if k == 0 else " ".join(rng.choice(words, k)) if k > 1 else ""
        for k in rng.integers(0, 12, 3_000)
    ]
    arr = pa.array(texts, pa.string())
    want = text_vectors(arr, np.zeros(len(arr), np.int64), 1)
    counts = TextCounts()
    at = 0
    while at < len(arr):
        k = int(rng.integers(1, 200))
        counts.add(arr.slice(at, k))
        at += k
    got = counts.vector()
    assert got[0].tobytes() == want[0].tobytes() and got[1].tolist() == want[1].tolist() == [True]
    empty = TextCounts()
    empty.add(pa.array([None, ""], pa.string()))
    assert empty.vector()[1].tolist() == [False]


def test_a_numeric_sketch_in_pieces_across_its_spans() -> None:
    """40,000 steps (spans of 16,384) in pieces of 1 to 9,000 steps: the bits of
    `numeric_vectors` of all of them; an episode of zeros has no vector."""
    rng = np.random.default_rng(7)
    n = 40_000
    obs = pa.array(list(rng.normal(size=(n, 5)).astype(np.float32)), pa.list_(pa.float32()))
    action = pa.array(rng.integers(0, 3, n))
    reward = pa.array(rng.normal(size=n))
    sketch = NumericSketch()
    at = 0
    while at < n:
        k = int(rng.integers(1, 9_000))
        sketch.add((obs.slice(at, k), action.slice(at, k), reward.slice(at, k)))
        at += k
    vectors, valid = np.zeros((1, 128), np.float32), np.zeros(1, bool)
    episode_vectors.numeric_features(
        (obs, action, reward), np.zeros(1, np.int64), np.array([n]),
        out=(vectors, valid, np.zeros(1, np.int64)),
    )  # fmt: skip
    got = sketch.vector()
    assert got[0].tobytes() == vectors.tobytes() and got[1].tolist() == valid.tolist() == [True]
    zeros = NumericSketch()
    zeros.add((None, None, pa.array(np.zeros(20_000))))
    assert zeros.vector()[1].tolist() == [False]
