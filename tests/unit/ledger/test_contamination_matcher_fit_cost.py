"""seal47's fit of a sealed held sketch made cheaper without changing what it finds (seal48):
`contamination_matcher.trimmed` makes each train episode's scaled parts and Gram matrix once,
not once a pair, and `Matcher.feed_parts` fits again without the worst buckets only the held
episodes whose finding that fit can still make (none fitted within `FIT_NEAR`). Checked
against seal47's fit as it was, pair by pair and whole, over random affine copies.
docs/PERFORMANCE.md, "The seal48 pass (thirty-fourth round)"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajledger.ledger import contamination_matcher as cm
from trajledger.ledger.contamination_matcher import (
    FIT_EXACT,
    FIT_NEAR,
    TRIM_BUCKETS,
    TRIM_NEAR,
    TRIM_SCREEN,
    Matcher,
    Parts,
    iter_parts,
    tangents,
)
from trajledger.ledger.episode_features import FeatureChunk, iter_step_features

HELD = "sha256:" + "a" * 64


def seal47_trimmed(held: npt.NDArray[np.floating], parts: npt.NDArray[np.float64]) -> Any:
    """`trimmed` as seal47 wrote it (4e834e9b): pair k is ``held[k]`` and ``parts[k]``, each
    pair's parts scaled and its weighted normal equations summed over the 128 buckets."""
    out = np.full(len(held), np.inf)
    a = parts.transpose(0, 2, 1)
    norm = np.linalg.norm(a, axis=1)
    a = a / np.where(norm > 0, norm, 1.0)[:, None, :]
    at = a.transpose(0, 2, 1)
    h = np.asarray(held, dtype=np.float64)
    w = np.ones(h.shape)
    for rounds in range(4):
        c = np.linalg.solve((at * w[:, None, :]) @ a + np.eye(a.shape[2]) * 1e-10,
                            at @ (w * h)[..., None])
        left = h - (a @ c)[..., 0]
        if rounds < 3:
            w = np.ones(h.shape)
            worst = np.argpartition(-np.abs(left), TRIM_BUCKETS - 1, axis=1)[:, :TRIM_BUCKETS]
            np.put_along_axis(w, worst, 0.0, axis=1)
    alpha = c[:, 0, 0]
    rest = np.sqrt(np.einsum("pk,pk->p", w, left * left))
    obs = np.abs(alpha) * np.sqrt(np.einsum("pk,pk->p", w, a[:, :, 0] ** 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        out[:] = np.where((alpha > 0) & (obs > 0), rest / obs, np.inf)
    return out


class Seal47Matcher(Matcher):
    """`Matcher` with seal47's `feed_parts`: every pair the plain fit leaves in
    (`FIT_NEAR`, `TRIM_SCREEN`] fitted again by `seal47_trimmed`, whatever its held episode."""

    def feed_parts(self, batch: str, ids: Sequence[str], lengths: npt.NDArray[np.int64],
                   parts: npt.NDArray[np.float64]) -> None:
        for n in np.unique(lengths).tolist():
            if n not in self._fit:
                continue
            rows, vectors = self._fit[n]
            cols = np.flatnonzero(lengths == n)
            held = np.stack(vectors)
            tan = tangents(held, Parts.of(parts[cols], n))
            best = tan.argmin(axis=1)
            for r, row in enumerate(rows):
                t = float(tan[r, best[r]])
                if t > FIT_NEAR:
                    continue
                self._fit_count[row] = self._fit_count.get(row, 0) + int((tan[r] <= FIT_NEAR).sum())
                if row not in self._fit_best or t < self._fit_best[row][0]:
                    self._fit_best[row] = (t, batch, ids[int(cols[best[r]])])
            ia, jb = np.nonzero((tan > FIT_NEAR) & (tan <= TRIM_SCREEN))
            ratio = seal47_trimmed(held[ia], parts[cols[jb]])
            for k in np.flatnonzero(ratio <= TRIM_NEAR).tolist():
                row, t = rows[int(ia[k])], float(ratio[k])
                self._trim_count[row] = self._trim_count.get(row, 0) + 1
                if row not in self._trim_best or t < self._trim_best[row][0]:
                    self._trim_best[row] = (t, float(tan[ia[k], jb[k]]), batch,
                                            ids[int(cols[jb[k]])])


def table(prefix: str, obs: np.ndarray, action: np.ndarray, reward: np.ndarray,
          lengths: Sequence[int]) -> pa.Table:
    """Episodes ``prefix0``, ... of ``lengths`` steps: obs (n, k), one action slot, rewards."""
    ids = [f"{prefix}{e}" for e, n in enumerate(lengths) for _ in range(n)]
    return pa.table({
        "episode_id": ids,
        "step": pa.array(np.concatenate([np.arange(n) for n in lengths]), pa.int64()),
        "obs": pa.FixedSizeListArray.from_arrays(pa.array(
            obs.astype(np.float32).reshape(-1)), obs.shape[1]),
        "action": pa.FixedSizeListArray.from_arrays(pa.array(action.astype(np.float32)), 1),
        "reward": reward.astype(np.float64),
    })


def corpus(seed: int) -> tuple[pa.Table, list[pa.Table], dict[str, str]]:
    """A sealed holdout of random walks (lengths 20, 30 and 60) and two train batches: each
    held episode's copy re-encoded at random (rewards ``s r + b``, actions ``1 - a`` or
    ``a + c``, observations scaled; some with one step's observation changed), or none, among
    unrelated episodes of the same lengths and of uniform random ones (whose plain fits fall in
    (`FIT_NEAR`, `TRIM_SCREEN`] more often). Returns the held table, the train tables and what
    each held episode's copy is (its train episode's id, or "")."""
    rng = np.random.default_rng(seed)
    lengths = [int(rng.choice([20, 30, 60])) for _ in range(8)]
    total = sum(lengths)
    obs = np.cumsum(rng.normal(size=(total, 4)), axis=0)
    action = rng.integers(0, 2, total).astype(np.float64)
    reward = rng.normal(size=total)
    held = table("h", obs, action, reward, lengths)
    starts = np.cumsum(lengths) - lengths
    batches, copies = [], {}
    for b in range(2):
        t_lengths, t_obs, t_action, t_reward = [], [], [], []
        for e, (s, n) in enumerate(zip(starts.tolist(), lengths, strict=True)):
            if e % 2 != b or rng.random() < 0.2:
                continue  # each held episode copied in one batch at most
            o, a, r = obs[s : s + n].copy(), action[s : s + n].copy(), reward[s : s + n].copy()
            r = float(rng.uniform(0.5, 3.0)) * r + float(rng.normal())
            a = 1 - a if rng.random() < 0.5 else a + float(rng.integers(1, 4))
            o *= float(rng.uniform(0.5, 2.0))
            if rng.random() < 0.4:
                o[int(rng.integers(n))] += 3.0
            copies[f"h{e}"] = f"t{b}-{len(t_lengths)}"
            t_lengths.append(n)
            t_obs.append(o)
            t_action.append(a)
            t_reward.append(r)
        for _ in range(int(rng.integers(10, 30))):
            n = int(rng.choice([20, 30, 60]))
            walk = rng.random() < 0.5
            t_lengths.append(n)
            t_obs.append(np.cumsum(rng.normal(size=(n, 4)), axis=0) if walk
                         else rng.random((n, 4)))
            t_action.append(rng.integers(0, 2, n).astype(np.float64) if walk else rng.random(n))
            t_reward.append(rng.normal(size=n) if walk else rng.random(n))
        order = rng.permutation(len(t_lengths))
        copies = {h: f"t{b}-{int(np.flatnonzero(order == int(t.split('-')[1]))[0])}"
                  if t.startswith(f"t{b}-") else t for h, t in copies.items()}
        batches.append(table(f"t{b}-", np.concatenate([t_obs[i] for i in order]),
                             np.concatenate([t_action[i] for i in order]),
                             np.concatenate([t_reward[i] for i in order]),
                             [t_lengths[i] for i in order]))
    return held, batches, copies


def chunk_of(t: pa.Table) -> FeatureChunk:
    return FeatureChunk.concat(list(iter_step_features(t.to_batches(max_chunksize=97))))


def matched(matcher: Matcher, held: pa.Table, train: list[pa.Table]) -> list[Any]:
    """``matcher``'s findings of ``train`` against ``held`` sealed, each with what it says."""
    matcher.hold(HELD, chunk_of(held), sealed=True)
    for b, t in enumerate(train):
        name, chunk = f"sha256:{b:064x}", chunk_of(t)
        matcher.feed(name, chunk)
        for ids, lens, parts in iter_parts(t.to_batches(max_chunksize=97), chunk.episode_ids,
                                           chunk.num_steps, matcher.fit_lengths(chunk)):
            matcher.feed_parts(name, ids, lens, parts)
    return [(f.kind, f.other_episode, f.train_batch, f.train_episode, f.matches,
             f.similarity, getattr(f, "fitted", None), getattr(f, "trimmed", None))
            for f in matcher.findings()]


def same(got: list[Any], want: list[Any]) -> None:
    """The same findings (kinds, episodes, counts, similarities), their fitted tangents and
    trimmed ratios to rounding: a copy's are float32 rounding, about 5e-8, and move by 1e-8
    with the order the products sum in (fitted in groups, not a record batch at a time);
    `FIT_EXACT` and `TRIM_NEAR` are 1e-3."""
    assert [g[:6] for g in got] == [w[:6] for w in want]
    for g, w in zip(got, want, strict=True):
        for x, y in zip(g[6:], w[6:], strict=True):
            assert (x is None) == (y is None)
            if x is not None:
                assert x == pytest.approx(y, rel=1e-6, abs=1e-6)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_the_cut_finds_what_seal47s_fit_finds(seed: int) -> None:
    """Random affine copies (rewards, actions, observations' scale; some with a step changed)
    among unrelated episodes: the same findings as seal47's
    fit pair by pair (`same`); an exact finding names the copy made of its held episode."""
    held, train, copies = corpus(seed)
    got = matched(Matcher(), held, train)
    want = matched(Seal47Matcher(), held, train)
    same(got, want)
    exact = {g[1]: g[3] for g in got if g[0] == "exact"}
    for h, t in copies.items():
        if h in exact:
            assert exact[h] == t


def test_the_corpus_has_exact_and_trimmed_findings() -> None:
    """The property above is not empty: over its first seeds, copies are found exact by the
    plain fit, and some (a step changed) near by the trimmed fit only."""
    kinds = set()
    for seed in range(6):
        held, train, _ = corpus(seed)
        for f in matched(Matcher(), held, train):
            if f[6] is not None:
                kinds.add("exact" if f[6] <= FIT_EXACT else "trimmed" if f[7] else "near")
    assert {"exact", "trimmed"} <= kinds


@pytest.mark.parametrize("shape", ["walks", "uniform"])
def test_trimmed_is_seal47s_pair_by_pair(shape: str) -> None:
    """Each pair's trimmed ratio as seal47's (to rounding): unrelated pairs of one length and
    copies with one step changed, the pairs the plain fit screens in."""
    rng = np.random.default_rng(48 if shape == "walks" else 49)
    n, steps = 40, 30
    if shape == "walks":
        obs = np.cumsum(rng.normal(size=(n * steps, 4)), axis=0)
    else:
        obs = rng.random((n * steps, 4))
    action, reward = rng.integers(0, 2, n * steps).astype(np.float64), rng.random(n * steps)
    held = table("h", obs, action, reward, [steps] * n)
    changed = obs.copy()
    changed[10::steps] += 3.0 if shape == "walks" else 0.5  # one step of each copy
    train = table("t", changed, 1 - action, 2 * reward + 1, [steps] * n)
    hv = chunk_of(held).vectors.astype(np.float64)
    tc = chunk_of(train)
    parts = np.concatenate([p for _, _, p in iter_parts(train.to_batches(), tc.episode_ids,
                                                        tc.num_steps, {steps})])
    tan = tangents(hv, Parts.of(parts, steps))
    ia, jb = np.nonzero((tan > FIT_NEAR) & (tan <= TRIM_SCREEN))
    assert len(ia) > 40
    got, want = cm.trimmed(hv, parts, ia, jb), seal47_trimmed(hv[ia], parts[jb])
    assert np.array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    assert np.allclose(got[fin], want[fin], rtol=1e-6, atol=1e-9)
    assert (got[ia == jb] <= TRIM_NEAR).any()  # some copies found by it


def test_a_held_episode_fitted_already_is_not_fitted_again_without_buckets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A held episode whose copy the first train batch holds: the second batch's unrelated
    episodes that the plain fit screens in are not fitted again (seal47 fitted them: its
    finding is the plain fit's whatever they give); the finding is seal47's."""
    rng = np.random.default_rng(7)
    steps = 30
    obs, action, reward = rng.random((steps, 4)), rng.random(steps), rng.random(steps)
    held = table("h", obs, action, reward, [steps])
    copy = table("t0-", obs, 1 - action, 3 * reward, [steps])
    n = 60
    other = table("t1-", rng.random((n * steps, 4)), rng.random(n * steps),
                  rng.random(n * steps), [steps] * n)
    hv = chunk_of(held).vectors.astype(np.float64)
    oc = chunk_of(other)
    parts = np.concatenate([p for _, _, p in iter_parts(other.to_batches(), oc.episode_ids,
                                                        oc.num_steps, {steps})])
    tan = tangents(hv, Parts.of(parts, steps))
    screened = int(((tan > FIT_NEAR) & (tan <= TRIM_SCREEN)).sum())
    assert screened > 10  # seal47 fitted these again
    fitted: list[int] = []
    real = cm.trimmed

    def spy(*args: Any) -> Any:
        out = real(*args)
        fitted.append(len(out))
        return out

    monkeypatch.setattr(cm, "trimmed", spy)
    got = matched(Matcher(), held, [copy, other])
    assert sum(fitted) == 0
    monkeypatch.setattr(cm, "trimmed", real)
    assert got == matched(Seal47Matcher(), held, [copy, other])
    assert [(g[0], g[3]) for g in got] == [("exact", "t0-0")]


@pytest.mark.parametrize("seed", range(4))
def test_fitted_in_groups_and_blocks_the_same(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Train episodes fitted a few at a time, across record batches and train batches, and the
    held sketches in small blocks (`_FIT_PENDING`, `_FIT_CELLS` made small): the findings of
    seal47's fit, which fitted each record batch as it came."""
    monkeypatch.setattr(cm, "_FIT_PENDING", 5)
    monkeypatch.setattr(cm, "_FIT_CELLS", 37)
    held, train, _ = corpus(1000 + seed)
    got, want = matched(Matcher(), held, train), matched(Seal47Matcher(), held, train)
    same(got, want)


def test_the_train_parts_waiting_are_bounded_whatever_their_lengths(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Train episodes of many sealed lengths: at most `_FIT_PENDING` of them wait, in all (11
    KiB of parts each), not that many of each length."""
    monkeypatch.setattr(cm, "_FIT_PENDING", 6)
    rng = np.random.default_rng(3)
    lengths = [16 + k for k in range(8)]
    total = sum(lengths)
    held = table("h", rng.random((total, 4)), rng.random(total), rng.random(total), lengths)
    m = Matcher()
    m.hold(HELD, chunk_of(held), sealed=True)
    most = 0
    for b in range(6):
        t = table(f"t{b}-", rng.random((total, 4)), rng.random(total), rng.random(total), lengths)
        chunk = chunk_of(t)
        m.feed(f"sha256:{b:064x}", chunk)
        for ids, lens, parts in iter_parts(t.to_batches(max_chunksize=40), chunk.episode_ids,
                                           chunk.num_steps, m.fit_lengths(chunk)):
            m.feed_parts(f"sha256:{b:064x}", ids, lens, parts)
            most = max(most, sum(len(p[1]) for q in m._fit_pending.values() for p in q))
    assert 0 < most < 6
