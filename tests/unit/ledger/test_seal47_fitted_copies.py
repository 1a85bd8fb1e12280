"""A sealed held-out episode's published sketch fitted in the span of a train episode's parts
(seal47; seal46's findings 2 and 3): a copy whose rewards were rescaled or shifted or whose
actions were re-encoded (``1 - a``, ``a + 1``) is an exact duplicate (`FIT_EXACT`), one with a
step changed a near one when the fit leaves little (`FIT_NEAR`), an unrelated episode nothing.
docs/SECURITY.md, "Review of 2026-12-07, thirty-second round (seal47)"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajledger.ledger import sealing
from trajledger.ledger.contamination import refusal, ruled, verified_contamination
from trajledger.ledger.contamination_matcher import (
    FIT_EXACT,
    FIT_NEAR,
    TRIM_NEAR,
    Matcher,
    Parts,
    SketchFinding,
    iter_parts,
    tangents,
)
from trajledger.ledger.episode_features import iter_step_features
from trajledger.ledger.episode_vectors import numeric_features, sketch_parts
from trajledger.verify.contamination_rules import ContaminationRules
from trajledger.verify.sealed_files import Sealed

HELD, TRAIN = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def episodes(prefix: str, seed: int, n: int, steps: int = 30) -> pa.Table:
    """``n`` random walks of ``steps`` steps: obs of 4, one action of 0 or 1, a reward."""
    rng = np.random.default_rng(seed)
    obs = np.cumsum(rng.normal(size=(n * steps, 4)), axis=0).astype(np.float32)
    return pa.table({
        "episode_id": [f"{prefix}{e}" for e in range(n) for _ in range(steps)],
        "step": pa.array(np.tile(np.arange(steps), n), pa.int64()),
        "obs": pa.FixedSizeListArray.from_arrays(pa.array(obs.reshape(-1)), 4),
        "action": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.integers(0, 2, n * steps).astype(np.float32)), 1),
        "reward": rng.normal(size=n * steps),
    })


def renamed(t: pa.Table, prefix: str) -> pa.Table:
    ids = [prefix + e[1:] for e in t.column("episode_id").to_pylist()]
    return t.set_column(0, "episode_id", pa.array(ids))


def with_column(t: pa.Table, name: str, values: np.ndarray) -> pa.Table:
    i = t.column_names.index(name)
    if name == "reward":
        return t.set_column(i, name, pa.array(values))
    width = t.schema.field(name).type.list_size
    return t.set_column(i, name, pa.FixedSizeListArray.from_arrays(
        pa.array(values.astype(np.float32).reshape(-1)), width))


def values(t: pa.Table, name: str) -> np.ndarray:
    col = t.column(name).combine_chunks()
    if name == "reward":
        return np.asarray(col.to_numpy(zero_copy_only=False))
    return np.asarray(col.flatten().to_numpy()).reshape(len(col), -1).astype(np.float64)


def sealed_of(t: pa.Table, tmp_path: Path) -> Sealed:
    pq.write_table(t, tmp_path / "held.parquet")
    return Sealed(recipients=(), files={}, feature_version=3,
                  episodes=sealing.fingerprints(tmp_path / "held.parquet"))


def gate(train: pa.Table, published: Sealed) -> list:
    report = verified_contamination(None, {TRAIN: train}, {HELD: ["holdout h@1"]},  # type: ignore[arg-type]
                                    sealed={HELD: published}, train_labels={TRAIN: ["train t@1"]})
    assert report.unchecked == ()
    return list(report.findings)


@pytest.mark.parametrize("how", ["rewards x 2", "rewards + 1", "actions 1 - a", "actions + 1",
                                 "both"])
def test_a_copy_re_encoded_is_an_exact_duplicate(tmp_path: Path, how: str) -> None:
    """Before seal47 none was found (the sketches' cosines 0.77 to 0.94, below near)."""
    held = episodes("h", 7, 3)
    copy = renamed(held, "t")
    r, a = values(held, "reward"), values(held, "action")
    if how in ("rewards x 2", "both"):
        copy = with_column(copy, "reward", 2 * r + (1 if how == "both" else 0))
    if how == "rewards + 1":
        copy = with_column(copy, "reward", r + 1)
    if how in ("actions 1 - a", "both"):
        copy = with_column(copy, "action", 1 - a)
    if how == "actions + 1":
        copy = with_column(copy, "action", a + 1)
    found = gate(copy, sealed_of(held, tmp_path))
    assert [(f.kind, f.other_episode, f.train_episode, type(f)) for f in found] == [
        ("exact", f"h{e}", f"t{e}", SketchFinding) for e in range(3)]
    f = found[0]
    assert f.fitted is not None and f.fitted <= 1e-6  # float32 rounding
    assert str(f).startswith(f"episode h0 of batch {HELD[:19]}… (holdout h@1) is a copy of "
                             f"train episode t0 of batch {TRAIN[:19]}… (train t@1): sealed, it "
                             "is compared by the sketch its record publishes, and it is the "
                             "train episode's with its actions and rewards each re-encoded "
                             "affinely (fitted to ")
    assert "the same observations at each of its 30 steps" in str(f)
    assert f.to_json()["sketch"] is True and f.to_json()["fitted"] == f.fitted
    line = refusal("dataset h@1 (holdout)", found, ContaminationRules())
    assert line is not None and "3 episode(s) exactly duplicate" in line
    # ranked as a shared run is: near under runs = "near"
    assert [g.kind for g in ruled(found, ContaminationRules(runs="near"))] == ["near"] * 3


def test_an_unrelated_train_set_is_not_found(tmp_path: Path) -> None:
    assert gate(episodes("t", 8, 20), sealed_of(episodes("h", 7, 3), tmp_path)) == []


def test_a_copy_with_one_step_changed_is_near(tmp_path: Path) -> None:
    """Rewards re-encoded and one step's observation changed of 120: the fit leaves about
    1 / sqrt(120) of what a whole other episode would: near (a warning), not exact; the
    sketches' cosine says nothing (below near)."""
    held = episodes("h", 11, 2, steps=120)
    obs = values(held, "obs")
    obs[60] += 3.0  # one step of the first episode
    copy = with_column(renamed(held, "t"), "reward", 2 * values(held, "reward") + 1)
    found = gate(with_column(copy, "obs", obs), sealed_of(held, tmp_path))
    assert [(f.kind, f.other_episode) for f in found] == [("exact", "h1"), ("near", "h0")]
    f = found[1]
    assert isinstance(f, SketchFinding) and f.fitted is not None
    assert FIT_EXACT < f.fitted <= FIT_NEAR
    assert "is a near copy of train episode t0" in str(f) and "a few of its 120 steps" in str(f)
    assert refusal("dataset h@1 (holdout)", found[1:], ContaminationRules()) is None


def test_a_short_copy_with_one_step_changed_is_near_by_the_trimmed_fit(tmp_path: Path) -> None:
    """Rewards re-encoded and one step's observation changed of 30: the plain fit leaves more
    than `FIT_NEAR`; without the 16 buckets it fits worst (those the changed step moved), it
    leaves float32 rounding: near, a warning."""
    held = episodes("h", 12, 3, steps=30)
    obs = values(held, "obs")
    obs[10] += 3.0  # one step of the first episode
    copy = with_column(renamed(held, "t"), "reward", 2 * values(held, "reward") + 1)
    found = gate(with_column(copy, "obs", obs), sealed_of(held, tmp_path))
    assert [(f.kind, f.other_episode) for f in found] == [
        ("exact", "h1"), ("exact", "h2"), ("near", "h0")]
    f = found[2]
    assert isinstance(f, SketchFinding) and f.fitted is not None and f.trimmed is not None
    assert f.fitted > FIT_NEAR and f.trimmed <= TRIM_NEAR
    assert ("(fitted to " in str(f) and "once the 16 buckets it fits worst are left out: a step "
            "or two of its 30 steps changed?)" in str(f))
    assert f.to_json()["trimmed"] == f.trimmed and "trimmed" not in found[0].to_json()
    assert refusal("dataset h@1 (holdout)", found[2:], ContaminationRules()) is None


def test_a_near_cosine_gives_way_to_an_exact_fit() -> None:
    """A held episode near by cosine whose fit is exact is exact (the fit says more)."""
    held = episodes("h", 5, 1)
    copy = with_column(renamed(held, "t"), "reward", 2 * values(held, "reward"))
    chunks = [next(iter_step_features([t.to_batches()[0]])) for t in (held, copy)]
    hv = chunks[0].vectors.astype(np.float64)
    assert float(hv[0] @ chunks[1].vectors[0]) < 0.999  # not equal (`EQUAL_SKETCH`)
    m = Matcher(thresholds={"numeric": -1.0})  # everything near by cosine
    m.hold(HELD, chunks[0], sealed=True)
    m.feed(TRAIN, chunks[1])
    for ids, lens, parts in iter_parts(copy.to_batches(), chunks[1].episode_ids,
                                       chunks[1].num_steps, m.fit_lengths()):
        m.feed_parts(TRAIN, ids, lens, parts)
    (f,) = m.findings()
    assert f.kind == "exact" and isinstance(f, SketchFinding) and f.fitted is not None


def test_the_parts_sum_to_the_sketch_and_are_read_across_record_batches() -> None:
    t = episodes("e", 3, 5, steps=20)
    cols = tuple(t.column(c).combine_chunks() for c in ("obs", "action", "reward"))
    starts, lens = np.arange(0, 100, 20, dtype=np.int64), np.full(5, 20, np.int64)
    parts = sketch_parts(cols, starts, lens)  # type: ignore[arg-type]
    v, ok = np.zeros((5, 128), np.float32), np.zeros(5, bool)
    numeric_features(cols, starts, lens, out=(v, ok, np.arange(5)))  # type: ignore[arg-type]
    whole = parts[:, :6].sum(axis=1)
    assert np.allclose(whole / np.linalg.norm(whole, axis=1, keepdims=True), v, atol=1e-6)
    # cut in record batches of 7 rows: the same episodes, the same parts
    ids = [f"e{k}" for k in range(5)]
    got = list(iter_parts(t.to_batches(max_chunksize=7), ids, lens, {20}))
    assert [i for ids, _, _ in got for i in ids] == ids
    assert np.array_equal(np.concatenate([p for _, _, p in got]), parts)
    # of several lengths, some wanted
    mixed = np.array([10, 30, 20, 25, 15], np.int64)
    got = list(iter_parts(t.to_batches(max_chunksize=7), ids, mixed, {20, 15}))
    assert [i for ids, _, _ in got for i in ids] == ["e2", "e4"]
    assert np.array_equal(np.concatenate([p for _, _, p in got]), sketch_parts(
        cols, np.array([40, 85], np.int64), np.array([20, 15], np.int64)))  # type: ignore[arg-type]
    # lengths not wanted: none; features of another file: refused
    assert list(iter_parts(t.to_batches(max_chunksize=7), ids, lens, {19})) == []
    with pytest.raises(ValueError, match="the step file has 100 rows, its episodes' features 99"):
        list(iter_parts(t.to_batches(), ids, lens - np.array([1, 0, 0, 0, 0]), {20}))
    # each own sketch is fitted exactly, none of the others
    tan = tangents(v, Parts.of(parts))
    assert (np.diag(tan) < 1e-6).all()
    assert (tan[~np.eye(5, dtype=bool)] > FIT_NEAR).all()


def test_observations_hidden_beside_large_rewards_are_not_compared() -> None:
    """Observations of 1e-5 beside rewards of 100: what the rewards leave of a held sketch
    is below `FIT_FLOOR` (its observations at float32 rounding): its own copy is not compared
    (it escapes: docs/audit-index.md), and no other pair is called a copy by its rewards."""
    t = episodes("e", 4, 2, steps=40)
    t = with_column(with_column(t, "obs", values(t, "obs") * 1e-5), "reward",
                    100.0 * np.sign(values(t, "reward")))
    cols = tuple(t.column(c).combine_chunks() for c in ("obs", "action", "reward"))
    starts, lens = np.array([0, 40], np.int64), np.full(2, 40, np.int64)
    v, ok = np.zeros((2, 128), np.float32), np.zeros(2, bool)
    numeric_features(cols, starts, lens, out=(v, ok, np.arange(2)))  # type: ignore[arg-type]
    tan = tangents(v, Parts.of(sketch_parts(cols, starts, lens)))  # type: ignore[arg-type]
    assert np.isinf(np.diag(tan)).all() and (tan > FIT_NEAR).all()
