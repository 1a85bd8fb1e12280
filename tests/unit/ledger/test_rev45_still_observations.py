"""A sealed held sketch fitted to train episodes whose observations say nothing of the episode
(rev45 finding 1): observations constant over the episode (a bandit's or a stateless
environment's ``[1.0]``) or a step counter are the same, to one scale, in every such episode
of a length, and the fit lets the held episode's actions and rewards be "re-encoded" by a
scale of 0. A vendor's sealed suite of such episodes with constant actions and rewards was an
exact duplicate of every honest train episode of those lengths with one constant observation
(or a counter), whatever its actions and rewards: `dataset create` refused the buyer's train set.
docs/SECURITY.md, "Review of 2026-12-07, thirty-third round (rev45)"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajledger.ledger import sealing
from trajledger.ledger.contamination import refusal, verified_contamination
from trajledger.ledger.contamination_matcher import FIT_EXACT, Parts, tangents
from trajledger.ledger.episode_vectors import sketch_parts
from trajledger.verify.contamination_rules import ContaminationRules
from trajledger.verify.sealed_files import Sealed

HELD, TRAIN = "sha256:" + "a" * 64, "sha256:" + "b" * 64
STEPS = 30


def table(prefix: str, obs: np.ndarray, action: np.ndarray, reward: np.ndarray) -> pa.Table:
    """Episodes of `STEPS` steps, one observation and one action a step."""
    n = len(reward) // STEPS
    return pa.table({
        "episode_id": [f"{prefix}{e}" for e in range(n) for _ in range(STEPS)],
        "step": pa.array(np.tile(np.arange(STEPS), n), pa.int64()),
        "obs": pa.FixedSizeListArray.from_arrays(pa.array(obs.astype(np.float32)), 1),
        "action": pa.FixedSizeListArray.from_arrays(pa.array(action.astype(np.float32)), 1),
        "reward": reward.astype(np.float64),
    })


def observations(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` episodes' observations: each its own constant (``still``) or the step, scaled by
    the episode's own factor (``counter``)."""
    scale = rng.uniform(0.2, 5.0, n)
    if kind == "still":
        return np.repeat(scale, STEPS)
    return (np.arange(STEPS)[None, :] * scale[:, None]).ravel()


def gate(train: pa.Table, held: pa.Table, tmp_path: Path) -> list:
    pq.write_table(held, tmp_path / "held.parquet")
    published = Sealed(recipients=(), files={}, feature_version=3,
                       episodes=sealing.fingerprints(tmp_path / "held.parquet"))
    report = verified_contamination(None, {TRAIN: train}, {HELD: ["holdout h@1"]},  # type: ignore[arg-type]
                                    sealed={HELD: published}, train_labels={TRAIN: ["train t@1"]})
    assert report.unchecked == ()
    return list(report.findings)


@pytest.mark.parametrize("kind", ["still", "counter"])
def test_a_crafted_sealed_suite_does_not_make_honest_train_episodes_copies(
    tmp_path: Path, kind: str
) -> None:
    """Before the fix: an exact duplicate fitted to 0.0 (still) or 3e-8 (counter), the set
    refused. A counter's sketches may still be near by their cosine (the counter outweighs
    actions and rewards): a warning, as before seal47, never a refusal."""
    rng = np.random.default_rng(5)
    n = 20
    train = table("t", observations(kind, n, rng), rng.integers(0, 3, n * STEPS),
                  rng.normal(size=n * STEPS))
    crafted = table("h", observations(kind, 1, rng), np.zeros(STEPS), np.zeros(STEPS))
    found = gate(train, crafted, tmp_path)
    assert [f for f in found if f.kind == "exact" or getattr(f, "fitted", None) is not None] == []
    assert refusal("dataset t@1 (train)", found, ContaminationRules()) is None


def test_such_train_episodes_are_not_fitted_and_others_still_are() -> None:
    """The pairs: an episode whose observations are a constant or the step is not fitted
    (inf), one whose observations move is, to its own copy re-encoded."""
    rng = np.random.default_rng(6)
    moving = np.cumsum(rng.normal(size=STEPS))
    obs = np.concatenate([np.full(STEPS, 2.0), np.arange(STEPS) * 0.5, moving])
    action = rng.integers(0, 2, 3 * STEPS).astype(np.float64)
    reward = rng.normal(size=3 * STEPS)
    t = table("t", obs, action, reward)
    cols = tuple(t.column(c).combine_chunks() for c in ("obs", "action", "reward"))
    starts, lens = np.arange(3, dtype=np.int64) * STEPS, np.full(3, STEPS, np.int64)
    parts = sketch_parts(cols, starts, lens)  # type: ignore[arg-type]
    own = parts.sum(axis=1)  # each episode's own sketch, unscaled
    still = table("h", np.full(STEPS, 1.0), np.zeros(STEPS), np.zeros(STEPS))
    hc = tuple(still.column(c).combine_chunks() for c in ("obs", "action", "reward"))
    crafted = sketch_parts(hc, starts[:1], lens[:1]).sum(axis=1)  # type: ignore[arg-type]
    tan = tangents(np.vstack([own, crafted]), Parts.of(parts, STEPS))
    assert np.isinf(tan[:, :2]).all()
    assert tan[2, 2] <= FIT_EXACT and tan[3, 2] > FIT_EXACT


def test_a_re_encoded_copy_of_a_slow_train_episode_is_found(tmp_path: Path) -> None:
    """rev46 finding 5: a train episode whose observation barely moves (a car that hardly
    leaves its start: half of MountainCar's random episodes of 16 to 50 steps are under
    `STILL_FLOOR`) was not fitted, so a sealed suite's copy of it with its actions re-encoded
    (``2 - a``) and its rewards rescaled escaped, where seal47 found it exact; this one leaves
    0.0078, and is exact again (fitted to exact copies only: `STILL_FIT`)."""
    rng = np.random.default_rng(7)
    n = 10
    obs = (-0.5 + np.cumsum(rng.normal(scale=0.004, size=(n, STEPS)), axis=1)).ravel()
    action, reward = rng.integers(0, 3, n * STEPS).astype(np.float64), rng.normal(size=n * STEPS)
    train = table("t", obs, action, reward)
    cols = tuple(train.column(c).combine_chunks() for c in ("obs", "action", "reward"))
    parts = sketch_parts(cols, np.arange(n, dtype=np.int64) * STEPS,  # type: ignore[arg-type]
                         np.full(n, STEPS, np.int64))
    most = Parts.of(parts, STEPS).most
    assert 0 < most[3] <= FIT_EXACT  # under the floor: exact copies only
    k = slice(3 * STEPS, 4 * STEPS)
    copy = table("h", obs[k], 2.0 - action[k], 3.0 * reward[k] + 1.0)
    found = gate(train, copy, tmp_path)
    assert [(f.kind, f.train_episode) for f in found] == [("exact", "t3")], found
    crafted = table("h", np.full(STEPS, -0.5), np.zeros(STEPS), np.zeros(STEPS))
    found = gate(train, crafted, tmp_path)  # a still episode is never near by the fit
    still = {f"t{e}" for e in np.flatnonzero(np.isfinite(most))}
    assert len(still) > 5, still
    assert [f for f in found if getattr(f, "fitted", None) is not None
            and f.train_episode in still] == [], found


def test_a_crafted_sketch_with_a_terminal_reward_does_not_copy_constant_episodes(
    tmp_path: Path,
) -> None:
    """A guard for finding 5's fix (rev46): a sealed sketch of constant observations and
    actions whose reward is 1 at its last step fits every train episode with a constant
    observation and a reward at its last step alone, whatever its actions, when such train
    episodes are fitted (rev46's first fix, a test on the held sketch alone, made all 20
    exact); it must stay nothing, as rev45 made it."""
    rng = np.random.default_rng(3)
    n = 20
    last = np.zeros(STEPS)
    last[-1] = 1.0
    train = table("t", observations("still", n, rng), rng.integers(0, 3, n * STEPS),
                  np.concatenate([last * rng.uniform(0.5, 2.0) for _ in range(n)]))
    found = gate(train, table("h", np.ones(STEPS), np.zeros(STEPS), last), tmp_path)
    assert [f for f in found if f.kind == "exact" or getattr(f, "fitted", None) is not None] == []
    assert refusal("dataset t@1 (train)", found, ContaminationRules()) is None
