"""held38: `Matcher` compares the train vectors of several fed chunks at once (one product of
each block of held vectors with all of them, a screen) and computes a chunk's own product only
for a block the screen cannot clear: the near findings (counts, similarities to the last bit,
best train episodes, the first on a tie) are those of each chunk compared as it was fed, block
by block (the code before held38, kept here as `reference`), at thresholds set to a computed
similarity, with non-finite and huge vectors, several chunks, blocks and flushes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajledger.ledger import contamination_matcher
from trajledger.ledger.contamination_matcher import Matcher
from trajledger.ledger.episode_features import FeatureChunk

Near = set[tuple[str, tuple[str, str], int, float]]


def chunk(prefix: str, vectors: np.ndarray, modality: str = "numeric") -> FeatureChunk:
    n = len(vectors)
    return FeatureChunk([f"{prefix}-{k}" for k in range(n)], np.full(n, 100, np.int64),
                        [None] * n, [modality] * n, vectors.astype(np.float32),
                        np.ones(n, bool), [None] * n)


def reference(held: np.ndarray, fed: list[tuple[str, FeatureChunk]], threshold: float,
              block: int) -> Near:
    """Each chunk's product with each block of held vectors as it is fed (before held38)."""
    n = len(held)
    best, count = np.full(n, -2.0), np.zeros(n, np.int64)
    of: list[tuple[str, str] | None] = [None] * n
    for b, c in fed:
        train = c.vectors
        for lo in range(0, n, block):
            sims = held[lo : lo + block] @ train.T
            over = sims >= threshold
            some = np.flatnonzero(over.any(axis=1))
            if not len(some):
                continue
            rows, sims = lo + some, sims[some]
            count[rows] += over[some].sum(axis=1)
            j = sims.argmax(axis=1)
            s = sims[np.arange(len(rows)), j]
            for k in np.flatnonzero(s > best[rows]).tolist():
                best[rows[k]], of[rows[k]] = float(s[k]), (b, c.episode_ids[int(j[k])])
    return {(f"h-{i}", of[i], int(count[i]), round(min(float(best[i]), 1.0), 6))  # type: ignore[misc]
            for i in range(n) if count[i] and of[i] is not None}


def matched(held: np.ndarray, fed: list[tuple[str, FeatureChunk]], threshold: float) -> Near:
    m = Matcher(thresholds={"numeric": threshold})
    m.hold("h", chunk("h", held))
    for b, c in fed:
        m.feed(b, c)
    return {(f.other_episode, (f.train_batch, f.train_episode), f.matches, f.similarity)
            for f in m.findings() if f.kind == "near"}


def planted(rng: np.random.Generator, n: int, chunks: int, per: int, noise: float,
            dim: int = 128) -> tuple[np.ndarray, list[tuple[str, FeatureChunk]]]:
    """``n`` unit held vectors; ``chunks`` train chunks of ``per``, a third near copies."""
    held = rng.normal(size=(n, dim))
    held /= np.linalg.norm(held, axis=1)[:, None]
    fed = []
    for b in range(chunks):
        t = rng.normal(size=(per, dim))
        k = max(1, per // 3)
        t[:k] = held[rng.choice(n, k)] + rng.normal(scale=noise, size=(k, dim))
        t /= np.linalg.norm(t, axis=1)[:, None]
        fed.append((f"t{b}", chunk(f"t{b}", t)))
    return held.astype(np.float32), fed


def at_a_computed_similarity(held: np.ndarray, fed: list[tuple[str, FeatureChunk]],
                             block: int, pick: int) -> float:
    """A threshold equal to a similarity a chunk's own product computes (a float32 value):
    a screen a few bits low would clear its block without a slack."""
    sims = np.concatenate([np.concatenate([held[lo : lo + block] @ c.vectors.T
                                           for lo in range(0, len(held), block)])
                           for _, c in fed], axis=1)
    high = np.sort(sims[sims > 0.5])
    return float(high[pick % len(high)]) if len(high) else 0.99


@pytest.mark.parametrize("seed", range(6))
def test_the_screen_decides_as_each_chunk_compared(monkeypatch: pytest.MonkeyPatch,
                                                   seed: int) -> None:
    rng = np.random.default_rng(seed)
    block = [7, 16, 33][seed % 3]
    monkeypatch.setattr(contamination_matcher, "_BLOCK", block)
    monkeypatch.setattr(contamination_matcher, "_NEAR_PENDING", [50, 90, 10**6][seed % 3])
    held, fed = planted(rng, 200, 6, 30, 0.02)
    for pick in range(0, 40, 3):
        threshold = at_a_computed_similarity(held, fed, block, pick)
        want = reference(held, fed, threshold, block)
        assert matched(held, fed, threshold) == want and want, (seed, pick)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80), chunks=st.integers(1, 5),
       per=st.integers(1, 20), block=st.integers(1, 40), pending=st.integers(1, 60),
       pick=st.integers(0, 10**6), noise=st.sampled_from([0.0, 1e-4, 0.01, 0.3]),
       odd=st.sampled_from(["none", "nan", "inf", "huge", "zero"]))
def test_the_screen_decides_as_each_chunk_compared_at_random(
        seed: int, n: int, chunks: int, per: int, block: int, pending: int, pick: int,
        noise: float, odd: str) -> None:
    rng = np.random.default_rng(seed)
    held, fed = planted(rng, n, chunks, per, noise, dim=128)
    if odd != "none":  # a kept cache's vectors are not checked to be unit and finite
        value = {"nan": np.nan, "inf": np.inf, "huge": 3e38, "zero": 0.0}[odd]
        held[rng.integers(n), rng.integers(128)] = value
        fed[-1][1].vectors[rng.integers(per), rng.integers(128)] = value
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(contamination_matcher, "_BLOCK", block)
        mp.setattr(contamination_matcher, "_NEAR_PENDING", pending)
        with np.errstate(all="ignore"):
            threshold = at_a_computed_similarity(held, fed, block, pick)
            want = reference(held, fed, threshold, block)
            assert matched(held, fed, threshold) == want


def test_the_screen_clears_blocks_without_a_near_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of it: with no near pair, no chunk's own product is computed."""
    rng = np.random.default_rng(3)
    held, fed = planted(rng, 300, 5, 20, 0.5)
    calls: list[int] = []
    real = Matcher._near_block

    def counted(self: Matcher, *args: object) -> None:
        calls.append(1)
        real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Matcher, "_near_block", counted)
    monkeypatch.setattr(contamination_matcher, "_BLOCK", 32)
    assert matched(held, fed, 0.995) == reference(held, fed, 0.995, 32) == set()
    assert calls == []
