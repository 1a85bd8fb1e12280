"""`contamination_matcher.Matcher` on shared runs of steps: held windows grouped by hash decide as
one held episode at a time did, and a holdout of many identical episodes (a deterministic
environment) costs one step per train window and group, not one per held episode."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajledger.ledger import contamination, contamination_matcher, held_filter, held_windows
from trajledger.ledger.contamination_matcher import Matcher
from trajledger.ledger.episode_features import FeatureChunk
from trajledger.ledger.step_windows import ORDERS, WINDOW, StepWindows, held_steps


def features(ids: list[str]) -> FeatureChunk:
    n = len(ids)
    return FeatureChunk(ids, np.full(n, 100, np.int64), [f"fp-{i}" for i in ids],
                        ["numeric"] * n, np.zeros((n, 128), np.float32), np.zeros(n, bool),
                        [None] * n)


def windows(ids: list[str], tracks: list[np.ndarray]) -> StepWindows:
    """Each episode's windows, their hashes given (one per window: steps - WINDOW + 1)."""
    return StepWindows(ids, np.array([len(t) + WINDOW - 1 for t in tracks], np.int64),
                       np.concatenate([np.full(len(t), e, np.int64) for e, t in enumerate(tracks)]),
                       np.concatenate([np.arange(len(t), dtype=np.int64) for t in tracks]),
                       np.concatenate(tracks).astype(np.uint64))


Decided = dict[tuple[str, str], tuple[tuple[str, str], int, tuple[int, int, int], int, bool]]


def reference(held: list[tuple[str, StepWindows]], fed: list[tuple[str, StepWindows]]
              ) -> Decided:
    """What the Matcher decided before cache24: each train window against each held episode
    holding its hash, in the order fed; the longest run shared with the first train episode,
    the first order of `ORDERS` on a tie (win25)."""
    first: dict[tuple[str, str], tuple[str, str]] = {}
    trains: dict[tuple[str, str], set[tuple[str, str]]] = {}
    starts: dict[tuple[str, str], set[tuple[int, int]]] = {}
    steps = {(b, e): int(w.lengths[k]) for b, w in held if not w.order
             for k, e in enumerate(w.episode_ids)}
    for tb, tw in fed:
        for h, te in zip(tw.hashes.tolist(), tw.episode.tolist(), strict=True):
            for hb, hw in held:
                for s, he in zip(hw.start[hw.hashes == h].tolist(),
                                 hw.episode[hw.hashes == h].tolist(), strict=True):
                    i, t = (hb, hw.episode_ids[he]), (tb, tw.episode_ids[te])
                    trains.setdefault(i, set()).add(t)
                    if first.setdefault(i, t) == t:
                        starts.setdefault(i, set()).add((hw.order, s))
    out = {}
    for i, t in first.items():
        best = (0, 0, 0)  # steps, -order, first start
        for order in sorted({o for o, _ in starts[i]}):
            s = np.array(sorted(x for o, x in starts[i] if o == order))
            run = max(np.split(s, np.flatnonzero(np.diff(s) != 1) + 1), key=len)
            best = max(best, (len(run) + WINDOW - 1, -order, int(run[0])))
        n, order, a = best[0], -best[1], best[2]
        k, _, back = ORDERS[order]
        out[i] = (t, len(trains[i]), (*held_steps(order, steps[i], a, a + n - 1), steps[i]), k,
                  back)
    return out


def decided(m: Matcher) -> Decided:
    found = m.findings()
    assert all(f.kind == "exact" and f.shared is not None for f in found)
    return {(f.other_batch, f.other_episode): ((f.train_batch, f.train_episode), f.matches,
                                               f.shared, f.every, f.reversed)  # type: ignore[misc]
            for f in found}


def matched(held: list[tuple[str, StepWindows]], fed: list[tuple[str, StepWindows]]
            ) -> tuple[Matcher, Decided]:
    m = Matcher()
    for b, w in held:
        if not w.order:
            m.hold(b, features(w.episode_ids))
        m.hold_windows(b, [w])
    for b, w in fed:
        m.feed(b, features(w.episode_ids))
        m.feed_windows(b, [w])
    return m, decided(m)


def test_grouped_windows_decide_as_each_held_episode_did() -> None:
    """Random episodes over a small alphabet of window hashes (so hashes repeat within and
    across held episodes, and train episodes hit several): the same findings as before."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        def side(name: str, n: int) -> tuple[str, StepWindows]:
            tracks = [rng.integers(0, 40, size=rng.integers(1, 12)) for _ in range(n)]
            return name, windows([f"{name}-{k}" for k in range(n)], tracks)

        held = [side("h1", 6), side("h2", 4)]
        fed = [side("t1", 5), side("t2", 5)]
        _m, got = matched(held, fed)
        assert got == reference(held, fed)
        assert got  # the alphabet is small: there are findings


def test_matching_in_one_pass_decides_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """copy26: the held windows are no longer sorted (7.8 CPU-s at 42 M windows); the train
    windows fed are matched in one pass over them, `_PENDING` at a time. Random held batches in
    several orders of `ORDERS`, findings asked after every train batch (so windows fed later
    are matched in a pass of their own) and three train windows at most a pass: the same
    findings as the per-episode reference, at each point."""
    monkeypatch.setattr(contamination_matcher, "_PENDING", 3)
    rng = np.random.default_rng(11)
    for _ in range(20):
        def side(name: str, n: int, order: int = 0) -> tuple[str, StepWindows]:
            tracks = [rng.integers(0, 60, size=rng.integers(1, 12)) for _ in range(n)]
            return name, replace(windows([f"{name}-{k}" for k in range(n)], tracks),
                                 order=order)

        held = [side(b, n, o) for b, n in (("h1", 5), ("h2", 3))
                for o in (0, *rng.choice(np.arange(1, len(ORDERS)), 3, replace=False))]
        fed = [side(f"t{k}", 4) for k in range(4)]
        m = Matcher()
        for b, w in held:
            if not w.order:
                m.hold(b, features(w.episode_ids))
            m.hold_windows(b, [w])
        for k, (b, w) in enumerate(fed):
            m.feed(b, features(w.episode_ids))
            m.feed_windows(b, [w])
            assert decided(m) == reference(held, fed[: k + 1]), k
        assert decided(m)  # the alphabet is small: there are findings


def test_many_identical_held_episodes_are_matched_per_group() -> None:
    """2,000 identical held episodes of 200 steps (185 windows each) and 300 train episodes
    copying them: before cache24 each train window took 2,000 steps of Python and the check
    ran for minutes; now each (group, train episode) is recorded once, and the findings are
    those of one held episode, 2,000 times."""
    track = np.arange(1, 186, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    k, trains = 2000, 300
    held = [("h", windows([f"h-{i}" for i in range(k)], [track] * k))]
    fed = [("t", windows([f"t-{i}" for i in range(trains)], [track] * trains))]
    m, got = matched(held, fed)
    assert len(got) == k
    assert set(got.values()) == {(("t", "t-0"), trains, (1, 200, 200), 1, False)}
    # What the train side recorded: one entry per group (distinct held window) and train
    # episode, whatever the number of held episodes holding it.
    assert len(m._group_trains) == len(track)
    assert sum(len(d) for d in m._group_trains.values()) == len(track) * trains


def test_grouped_held_windows_decide_as_held_ones(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    """hold30: the held windows grouped by hash into their file (`held_windows.group_file`,
    all at once) as grouped and as read back (where a window is read a block at a time, four
    windows a block here; held37: its hashes through their filter, four a page), and grouped
    into their file in sorted runs of a few windows (hold31), decide as the same windows
    held as they are: random held batches in several orders, some held episodes without
    features (not held: their windows are not compared), findings asked after every train
    batch, three train windows at most a pass."""
    monkeypatch.setattr(contamination_matcher, "_PENDING", 3)
    monkeypatch.setattr(held_windows, "BLOCK", 4)
    monkeypatch.setattr(held_filter, "PAGE", 4)
    rng = np.random.default_rng(30)
    for run in range(20):
        def side(name: str, n: int) -> list[StepWindows]:
            ids = [f"{name}-{k}" for k in range(n)]
            lengths = rng.integers(WINDOW, WINDOW + 12, size=n)
            out = []
            for order in (0, *rng.choice(np.arange(1, len(ORDERS)), 3, replace=False)):
                tracks = [rng.integers(0, 60, size=int(x) - WINDOW + 1) for x in lengths]
                w = replace(windows(ids, tracks), order=int(order), lengths=lengths)
                out.append(w)
            return out

        held = {b: side(b, n) for b, n in (("h1", 5), ("h2", 3))}
        fed = [(f"t{k}", windows([f"t{k}-{i}" for i in range(4)],
                                 [rng.integers(0, 60, size=rng.integers(1, 12))
                                  for _ in range(4)])) for k in range(4)]
        key = [(b, f"sha256:{k:064x}") for k, b in enumerate(held)]
        path = tmp_path / f"g{run}.grouped"
        grouped = held_windows.group_file(path, list(held), [list(ws) for ws in held.values()],
                                          key, run=1 << 30)
        assert grouped is not None
        matchers = [Matcher() for _ in range(3)]
        for m in matchers:
            for b, ws in held.items():
                m.hold(b, features(ws[0].episode_ids[1:]))  # episode 0: no features
        for b, ws in held.items():
            matchers[0].hold_windows(b, ws)
        matchers[1].hold_grouped(grouped)
        kept = held_windows.read(path, key)
        assert kept.probe is not None  # held37: through its filter, a page of 4 at a time
        matchers[2].hold_grouped(kept)
        blocked = held_windows.group_file(tmp_path / f"b{run}.grouped", list(held),
                                          [list(ws) for ws in held.values()], key,
                                          run=int(rng.integers(1, 9)))
        assert blocked is not None  # hold31: in sorted runs of a few windows, merged
        matchers.append(Matcher())
        for b, ws in held.items():
            matchers[3].hold(b, features(ws[0].episode_ids[1:]))
        matchers[3].hold_grouped(blocked)
        for k, (b, w) in enumerate(fed):
            got = []
            for m in matchers:
                m.feed(b, features(w.episode_ids))
                m.feed_windows(b, [w])
                got.append(decided(m))
            assert got[1] == got[0] and got[2] == got[0] and got[3] == got[0], (run, k)
        kept.close()
        blocked.close()
        assert decided(matchers[0])  # the alphabet is small: there are findings


def test_near_duplicates_decide_as_every_row_compared() -> None:
    """hold30: `Matcher.feed` names a best match only for the held episodes with one at the
    threshold (the others' rows are passed over): the same near findings, counts,
    similarities and best train episodes (the first on a tie) as every row's argmax kept, on
    random vectors with planted near copies, ties and several train batches."""
    rng = np.random.default_rng(5)

    def chunk(ids: list[str], vectors: np.ndarray) -> FeatureChunk:
        n = len(ids)
        return FeatureChunk(ids, np.full(n, 100, np.int64), [None] * n, ["numeric"] * n,
                            vectors.astype(np.float32), np.ones(n, bool), [None] * n)

    for _ in range(10):
        held = rng.normal(size=(300, 128))
        held /= np.linalg.norm(held, axis=1)[:, None]
        fed = []
        for b in range(3):
            t = rng.normal(size=(40, 128))
            copies = rng.choice(300, 15, replace=False)
            t[:15] = held[copies] + rng.normal(scale=0.004, size=(15, 128))
            t[15:18] = t[:3]  # ties
            t /= np.linalg.norm(t, axis=1)[:, None]
            fed.append((f"t{b}", chunk([f"t{b}-{k}" for k in range(40)], t)))
        m = Matcher()
        m.hold("h", chunk([f"h-{k}" for k in range(300)], held))
        best, count, of = np.full(300, -2.0), np.zeros(300, np.int64), [None] * 300
        for b, c in fed:
            m.feed(b, c)
            sims = held.astype(np.float32) @ c.vectors.T
            count += (sims >= contamination.NEAR_NUMERIC_THRESHOLD).sum(axis=1)
            for i, row in enumerate(sims):
                if row.max() > best[i]:  # (equal copies: any of them, below)
                    best[i] = float(row.max())
                    of[i] = {(b, c.episode_ids[j]) for j in np.flatnonzero(row >= best[i] - 1e-6)}
        want = {f"h-{i}": (of[i], int(count[i]), min(best[i], 1.0))
                for i in range(300) if count[i]}
        got = {f.other_episode: ((f.train_batch, f.train_episode), f.matches, f.similarity)
               for f in m.findings()}
        assert want and got.keys() == want.keys()
        # The first of equal copies on a tie where their products are equal; a float32
        # product's columns (and the matcher's blocks against this one product) can round
        # apart in the last bits on some CPUs: then any of the copies, and the similarity to
        # that rounding (6 decimals can round either way).
        wrong = {h: (got[h], want[h]) for h in want
                 if got[h][0] not in want[h][0] or got[h][1] != want[h][1]
                 or abs(got[h][2] - want[h][2]) > 2e-6}
        assert not wrong, wrong


# held38: `Matcher` compares the train vectors of several fed chunks at once (one product of
# each block of held vectors with all of them, a screen) and computes a chunk's own product
# only for a block the screen cannot clear: the near findings (counts, similarities to the last
# bit, best train episodes, the first on a tie) are those of each chunk compared as it was fed,
# block by block (the code before held38, kept here as `near_reference`), at thresholds set to
# a computed similarity, with non-finite and huge vectors, several chunks, blocks and flushes.

Near = set[tuple[str, tuple[str, str], int, float]]


def near_chunk(prefix: str, vectors: np.ndarray, modality: str = "numeric") -> FeatureChunk:
    n = len(vectors)
    return FeatureChunk([f"{prefix}-{k}" for k in range(n)], np.full(n, 100, np.int64),
                        [None] * n, [modality] * n, vectors.astype(np.float32),
                        np.ones(n, bool), [None] * n)


def near_reference(held: np.ndarray, fed: list[tuple[str, FeatureChunk]], threshold: float,
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


def near_matched(held: np.ndarray, fed: list[tuple[str, FeatureChunk]], threshold: float) -> Near:
    m = Matcher(thresholds={"numeric": threshold})
    m.hold("h", near_chunk("h", held))
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
        fed.append((f"t{b}", near_chunk(f"t{b}", t)))
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
        want = near_reference(held, fed, threshold, block)
        assert near_matched(held, fed, threshold) == want and want, (seed, pick)


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
            want = near_reference(held, fed, threshold, block)
            assert near_matched(held, fed, threshold) == want


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
    assert near_matched(held, fed, 0.995) == near_reference(held, fed, 0.995, 32) == set()
    assert calls == []


def overflowing(rng: np.random.Generator, dim: int = 128
                ) -> tuple[np.ndarray, list[tuple[str, FeatureChunk]]]:
    """A held vector and train chunks whose products with it are finite and far below any
    threshold as one product of them all, but may overflow to +inf as one of a chunk alone
    (huge terms of both signs, summed in another order): rev36."""
    k = int(rng.integers(3, 10))
    idx = rng.choice(dim, k, replace=False)
    h, t = np.zeros((1, dim), np.float32), np.zeros((1, dim), np.float32)
    pos = int(rng.integers(1, k))
    for j, i in enumerate(idx):
        h[0, i] = 1e19
        t[0, i] = (3.3e19 if j < pos else -3.3e19) * rng.uniform(0.5, 1.0)
    others = np.zeros((int(rng.integers(1, 40)), dim), np.float32)
    others[:, idx[0]] = -1e19  # (each -1e38: finite, far below)
    col = int(rng.integers(0, len(others) + 1))
    parts = [("o1", others[:col]), ("t", t), ("o2", others[col:])]
    return h, [(b, near_chunk(b, v)) for b, v in parts if len(v)]


def test_the_screen_decides_as_each_chunk_compared_when_a_chunks_product_overflows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """rev36: `_slack` bounds the difference of two finite products; one whose partial sums
    can overflow (``||h|| ||t||`` past float32's range: a kept cache's or a sealed batch's
    vectors are checked finite, not unit) may be +inf in one order and finite in another.
    Here the screen's product of all the pending chunks was finite and far below the
    threshold, so it cleared the block, while the chunk's own product was +inf: the reference
    flagged a near duplicate (similarity 1.0) that the screened path did not (15 of 20,000
    cases here; 3 of these 4,000). Such a row is never cleared now."""
    monkeypatch.setattr(contamination_matcher, "_NEAR_PENDING", 10**6)
    rng = np.random.default_rng(1)
    with np.errstate(all="ignore"):
        for trial in range(4000):
            held, fed = overflowing(rng)
            assert near_matched(held, fed, 0.9) == near_reference(held, fed, 0.9, 256), trial
