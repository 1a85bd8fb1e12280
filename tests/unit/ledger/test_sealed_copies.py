"""A sealed held-out episode whose published sketch equals a train episode's is an exact
duplicate (seal46; out45's finding 6): a sealed batch publishes no runs of steps, so the equal
sketch stands in for the shared run that refuses a plain copy (`contamination_matcher.
SketchFinding`, `EQUAL_SKETCH`); ranked near under ``runs = "near"`` as a shared run is.
docs/SECURITY.md, "Review of 2026-12-07, thirty-first round (seal46)"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajledger.ledger import sealing
from trajledger.ledger.contamination import refusal, ruled, verified_contamination
from trajledger.ledger.contamination_matcher import EQUAL_SKETCH, Matcher, SketchFinding
from trajledger.ledger.episode_features import FeatureChunk
from trajledger.verify.contamination_rules import ContaminationRules
from trajledger.verify.sealed_files import Sealed

HELD, TRAIN = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, 128))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def chunk(prefix: str, vectors: np.ndarray, *, modality: str = "numeric",
          steps: int = 40) -> FeatureChunk:
    n = len(vectors)
    return FeatureChunk([f"{prefix}-{k}" for k in range(n)], np.full(n, steps, np.int64),
                        [f"{prefix}-fp-{k}" for k in range(n)], [modality] * n,
                        vectors.astype(np.float32), np.ones(n, bool), [None] * n)


def matched(held: FeatureChunk, train: FeatureChunk, *, sealed: bool) -> list:
    m = Matcher({TRAIN: ["train t@1"]}, {HELD: ["holdout h@1"]})
    m.hold(HELD, held, sealed=sealed)
    m.feed(TRAIN, train)
    return m.findings()


def test_an_equal_sketch_of_a_sealed_episode_is_an_exact_duplicate() -> None:
    v = unit(np.random.default_rng(1), 3)
    found = matched(chunk("h", v, steps=24), chunk("t", v[::-1]), sealed=True)
    assert [(f.kind, f.other_episode, f.train_episode) for f in found] == [
        ("exact", "h-0", "t-2"), ("exact", "h-1", "t-1"), ("exact", "h-2", "t-0")]
    f = found[0]
    assert isinstance(f, SketchFinding) and f.steps == 24
    assert str(f).startswith(f"episode h-0 of batch {HELD[:19]}… (holdout h@1) is a copy of "
                             f"train episode t-2 of batch {TRAIN[:19]}… (train t@1): sealed, "
                             "it is compared by the sketch its record publishes")
    assert "at each of its 24 steps" in str(f)
    assert f.to_json()["sketch"] is True and f.to_json()["kind"] == "exact"
    # The words `dataset create` refuses with, as for a plain copy.
    line = refusal("dataset h@1 (holdout)", found, ContaminationRules())
    assert line is not None and line.startswith(
        "dataset h@1 (holdout): 3 episode(s) exactly duplicate episodes of the other split: ")


def test_a_plain_held_episode_of_an_equal_sketch_stays_near() -> None:
    """A plain held episode is judged by its runs of steps (finer: a copy cut or shifted); its
    equal sketch alone is a near duplicate, as before."""
    v = unit(np.random.default_rng(2), 2)
    found = matched(chunk("h", v), chunk("t", v), sealed=False)
    assert [(f.kind, type(f)) for f in found] == [("near", type(found[0]))] * 2
    assert not isinstance(found[0], SketchFinding)


def test_a_sketch_below_equal_a_text_one_and_a_short_one_are_not_exact() -> None:
    rng = np.random.default_rng(3)
    v = unit(rng, 1)
    # a copy with noise: cosine about 0.9999, near (CartPole with N(0, 0.01) noise)
    noisy = v + 0.012 * unit(rng, 1)
    noisy /= np.linalg.norm(noisy)
    cos = float(noisy[0] @ v[0])
    assert 0.995 < cos < EQUAL_SKETCH
    assert [f.kind for f in matched(chunk("h", v), chunk("t", noisy), sealed=True)] == ["near"]
    # a text episode's sketch is a bag of words: equal for its words reordered
    found = matched(chunk("h", v, modality="text"), chunk("t", v, modality="text"), sealed=True)
    assert [f.kind for f in found] == ["near"]
    # under 16 steps a numeric sketch is not compared at all (`MIN_NEAR_STEPS`)
    assert matched(chunk("h", v, steps=15), chunk("t", v, steps=15), sealed=True) == []


def test_runs_near_ranks_an_equal_sketch_near_as_it_does_a_shared_run() -> None:
    v = unit(np.random.default_rng(4), 1)
    found = matched(chunk("h", v), chunk("t", v), sealed=True)
    near = ruled(found, ContaminationRules(runs="near"))
    assert [f.kind for f in near] == ["near"]
    assert "is a near duplicate (similarity 1.0000)" in str(near[0])
    assert refusal("dataset h@1 (holdout)", near, ContaminationRules(runs="near")) is None
    assert [f.kind for f in ruled(found, ContaminationRules())] == ["exact"]


def episodes(prefix: str, seed: int, n: int, *, wide: bool) -> pa.Table:
    """``n`` random walks of 30 steps (obs of 4, one action, the reward); ``wide``: the
    observations as float64 (the same values: another exact fingerprint, the same sketch, as
    a copy exported to JSON lines and recorded again)."""
    rng = np.random.default_rng(seed)
    obs = np.cumsum(rng.normal(size=(n * 30, 4)), axis=0).astype(np.float32)
    cols = {
        "episode_id": [f"{prefix}{e}" for e in range(n) for _ in range(30)],
        "step": pa.array(np.tile(np.arange(30), n), pa.int64()),
        "obs": pa.FixedSizeListArray.from_arrays(
            pa.array(obs.reshape(-1).astype(np.float64 if wide else np.float32)), 4),
        "action": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.integers(0, 2, n * 30).astype(np.int64)), 1),
        "reward": np.ones(n * 30),
    }
    return pa.table(cols)


def test_the_gate_refuses_a_train_set_copying_a_sealed_holdout(tmp_path: Path) -> None:
    """`verified_contamination` (the admission gate) holds a sealed batch by its published
    fingerprints: a train copy of its episodes with other ids and float64 observations
    (another exact fingerprint) is an exact duplicate, by the equal sketch; an unrelated train
    set is not."""
    pq.write_table(episodes("h", 7, 3, wide=False), tmp_path / "held.parquet")
    published = Sealed(recipients=(), files={}, feature_version=3,
                       episodes=sealing.fingerprints(tmp_path / "held.parquet"))
    copy = episodes("t", 7, 3, wide=True)
    report = verified_contamination(None, {TRAIN: copy}, {HELD: ["holdout h@1"]},  # type: ignore[arg-type]
                                    sealed={HELD: published})
    assert report.unchecked == ()
    assert [(f.kind, f.other_episode, f.train_episode, type(f).__name__)
            for f in report.findings] == [("exact", f"h{e}", f"t{e}", "SketchFinding")
                                          for e in range(3)]
    other = verified_contamination(None, {TRAIN: episodes("t", 8, 3, wide=True)},  # type: ignore[arg-type]
                                   {HELD: ["holdout h@1"]}, sealed={HELD: published})
    assert other.findings == ()


@pytest.mark.parametrize("scale", [1.0, 1.000001])
def test_a_copy_read_back_through_float32_is_equal(tmp_path: Path, scale: float) -> None:
    """The copy's sketch is the held one's to float32 rounding (cosine 1 within 1e-6), far
    above `EQUAL_SKETCH`: the margin is for noise, not for rounding."""
    held = episodes("h", 9, 2, wide=False)
    pq.write_table(held, tmp_path / "held.parquet")
    a = sealing.fingerprints(tmp_path / "held.parquet")
    copy = held.set_column(2, "obs", pa.FixedSizeListArray.from_arrays(
        pa.array((held.column("obs").combine_chunks().values.to_numpy() * scale)
                 .astype(np.float32)), 4))
    pq.write_table(copy, tmp_path / "copy.parquet")
    b = sealing.fingerprints(tmp_path / "copy.parquet")
    import base64

    for x, y in zip(a, b, strict=True):
        u, w = (np.frombuffer(base64.b64decode(e.sketch or ""), "<f4") for e in (x, y))
        assert float(u.astype(np.float64) @ w.astype(np.float64)) > 1 - 1e-6
