"""A held-out episode copied as a frame stack (Gymnasium's ``FrameStackObservation``, Atari's
4 frames, SB3's ``VecFrameStack``): the train side's windows over each stacked step's newest
frame are the held ones (`frame_stacks`, win36); unrelated stacked episodes share none, and the
held side holds no such window."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajledger.ledger.frame_stacks import stacked_columns
from trajledger.ledger.rollouts.schema import tensor_field
from trajledger.ledger.row_hashes import quantised
from trajledger.ledger.step_windows import COLUMNS, WINDOW, iter_windows
from trajledger.ledger.window_cache import compute, decode, encode


def stack(o: np.ndarray, k: int, zeros: bool = False) -> np.ndarray:
    """``(steps, k, ...)``: each step the last ``k`` observations, oldest first, the first
    steps padded with the first observation (Gymnasium's "reset" padding) or zeros."""
    pad = np.zeros_like(o[:1]) if zeros else o[:1]
    x = np.concatenate([np.repeat(pad, k - 1, axis=0), o])
    return np.stack([x[j : j + len(o)] for j in range(k)], axis=1)


def batch(episodes: list[tuple[str, np.ndarray]], shape: tuple[int, ...] | None = None
          ) -> pa.RecordBatch:
    """Steps of episodes, a row a step flattened; ``shape``: the field declares it."""
    ids = [e for e, o in episodes for _ in range(len(o))]
    flat = np.concatenate([o.reshape(len(o), -1) for _, o in episodes])
    typ = pa.from_numpy_dtype(flat.dtype)
    obs = pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel(), typ), flat.shape[1])
    if shape is None:
        return pa.record_batch({"episode_id": pa.array(ids), "obs": obs})
    schema = pa.schema([pa.field("episode_id", pa.string()), tensor_field("obs", typ, shape)])
    return pa.record_batch([pa.array(ids), obs.cast(pa.list_(typ))], schema=schema)


def windows(*batches: pa.RecordBatch, held: bool = False) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for w in iter_windows(batches, held=held):
        for e, h in zip(w.episode.tolist(), w.hashes.tolist(), strict=True):
            out.setdefault(w.episode_ids[e], set()).add(h)
    return out


def walk(seed: int, n: int = 60, width: int = 4) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).normal(size=(n, width)), axis=0)


def grid(seed: int, n: int = 60, size: int = 6, one_hot: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    moves = np.array([(0, 1), (1, 0), (0, -1), (-1, 0)])
    at, out = rng.integers(0, size, 2), []
    for _ in range(n):
        out.append(at.copy())
        at = np.clip(at + moves[rng.integers(4)], 0, size - 1)
    xy = np.array(out, dtype=np.float64)
    return np.eye(size * size)[(xy[:, 0] * size + xy[:, 1]).astype(int)] if one_hot else xy


def flat(s: np.ndarray) -> np.ndarray:
    return s.reshape(len(s), -1)


VECTORS = {
    "4 frames": lambda o: flat(stack(o, 4)),
    "4 frames, zeros first": lambda o: flat(stack(o, 4, zeros=True)),
    "2 frames": lambda o: flat(stack(o, 2)),
    "3 frames, first 10 steps dropped": lambda o: flat(stack(o, 3))[10:],
    "4 frames, the newest first": lambda o: flat(stack(o, 4)[:, ::-1]),
    "4 frames interleaved (a stack along the last axis of (d, 1))": lambda o: flat(
        stack(o, 4).transpose(0, 2, 1)),
    "4 frames, reversed in time": lambda o: flat(stack(o, 4))[::-1],
    "3 frames, every other step": lambda o: flat(stack(o, 3))[::2],
    "4 frames, a column of each frame permuted": lambda o: flat(stack(o[:, ::-1], 4)),
    "4 frames of a one-hot grid": lambda o: flat(stack(o, 4)),
}
"""Stacked copies of a held episode, each found."""


@pytest.mark.parametrize("name", list(VECTORS))
def test_a_stacked_copy_of_a_vector_episode_holds_the_held_windows(name: str) -> None:
    """Every copy shares windows with its held episode (cut across record batches or not),
    none with another held episode; on 62f580e6 none was found (each step's hash covers every
    frame)."""
    kinds = [walk(1), walk(2), walk(3)]
    if "one-hot" in name:
        kinds = [grid(1, one_hot=True), grid(2, one_hot=True), grid(4, one_hot=True)]
    held = windows(batch([(f"h{i}", o) for i, o in enumerate(kinds)]), held=True)
    for i, o in enumerate(kinds):
        c = VECTORS[name](o)
        got = windows(batch([("c", c)]))["c"]
        assert got & held[f"h{i}"], (name, i)
        assert not got & (set().union(*held.values()) - held[f"h{i}"])
        half = len(c) // 2
        cut = windows(batch([("c", c[:7])]), batch([("c", c[7:half])]), batch([("c", c[half:])]))
        assert cut["c"] == got


IMAGES = {
    "gray, 4 frames (4 x H x W)": (False, lambda o: stack(o, 4)),
    "gray, 4 frames on the last axis (H x W x 4)": (False, lambda o: np.moveaxis(
        stack(o, 4), 1, -1)),
    "gray, 4 frames, zeros first, first 5 steps dropped": (False, lambda o: stack(
        o, 4, zeros=True)[5:]),
    "RGB, 4 frames (4 x H x W x 3)": (True, lambda o: stack(o, 4)),
    "RGB, 4 frames on the channels (H x W x 12)": (True, lambda o: np.concatenate(
        list(stack(o, 4).transpose(1, 0, 2, 3, 4)), axis=3)),
    "RGB, 3 frames channels first (9 x H x W)": (True, lambda o: np.concatenate(
        list(stack(o, 3).transpose(1, 0, 2, 3, 4)), axis=3).transpose(0, 3, 1, 2)),
    "RGB, 4 frames, each flipped": (True, lambda o: stack(o, 4)[:, :, :, ::-1]),
    "RGB, 2 frames, float32 / 255": (True, lambda o: stack(o, 2).astype(np.float32) / 255),
}


def sprites(seed: int, n: int = 40) -> np.ndarray:
    """24 x 20 RGB frames: a sprite's walk over a background every episode shares."""
    h, w = 24, 20
    bg = np.full((h, w, 3), 40, dtype=np.uint8)
    bg[:4] = np.random.default_rng(0).integers(0, 255, size=(4, w, 3))
    rng = np.random.default_rng(seed)
    out, at = np.repeat(bg[None], n, axis=0), np.array([h // 2, w // 2])
    for t in range(n):
        out[t, at[0] : at[0] + 3, at[1] : at[1] + 3] = (230, 60, 60)
        at = np.clip(at + rng.integers(-2, 3, size=2), (5, 1), (h - 4, w - 4))
    return out


@pytest.mark.parametrize("name", list(IMAGES))
def test_a_stacked_copy_of_an_image_episode_holds_the_held_windows(name: str) -> None:
    """A stacked copy of a held image episode (gray or RGB, stacked on a leading axis or the
    channels) shares its held episode's windows, cut across record batches or not, and none
    of another's; unrelated episodes over the same background, stacked alike, share none."""
    rgb, copy = IMAGES[name]
    eps = [sprites(s) for s in (1, 2, 3)]
    if not rgb:
        eps = [o.mean(axis=3).astype(np.uint8) for o in eps]
    held = windows(batch([(f"h{i}", o) for i, o in enumerate(eps)], eps[0].shape[1:]),
                   held=True)
    for i, o in enumerate(eps):
        c = copy(o)
        got = windows(batch([("c", c)], c.shape[1:]))["c"]
        assert got & held[f"h{i}"], i
        assert not got & (set().union(*held.values()) - held[f"h{i}"])
        cut = windows(batch([("c", c[:9])], c.shape[1:]), batch([("c", c[9:])], c.shape[1:]))
        assert cut["c"] == got
    others = [sprites(s) for s in range(100, 120)]
    if not rgb:
        others = [o.mean(axis=3).astype(np.uint8) for o in others]
    cs = [copy(o) for o in others]
    got = windows(batch([(f"t{i}", c) for i, c in enumerate(cs)], cs[0].shape[1:]))
    assert not set().union(*got.values()) & set().union(*held.values())


@pytest.mark.parametrize("kind", ["walks", "grid (x, y)", "one-hot grid"])
def test_unrelated_stacked_episodes_share_no_held_window(kind: str) -> None:
    """A stack's newest frame is an observation of its own episode: unrelated episodes
    stacked (2, 4 frames) share no window with held ones of the same kind; and the held side
    holds no window without standing columns (``still``: the train side's alone)."""
    def make(seed: int) -> np.ndarray:
        return (walk(seed) if kind == "walks" else grid(seed, size=10) if kind == "grid (x, y)"
                else grid(seed, one_hot=True))
    held_eps = [make(s) for s in range(60)]
    held = set().union(*windows(batch([(f"h{i}", o) for i, o in enumerate(held_eps)]),
                                held=True).values())
    for k in (2, 4):
        train = windows(batch([(f"t{i}", flat(stack(make(s), k)))
                               for i, s in enumerate(range(1000, 1060))]))
        assert not set().union(*train.values()) & held
    o = flat(stack(held_eps[0], 4))
    plain = [(w.order, len(w.hashes)) for w in iter_windows([batch([("h", o)])], held=True)]
    assert all(order <= COLUMNS + 1 for order, _ in plain)
    assert not [w for w in iter_windows([batch([("h", o)])], held=True) if w.still]


def stacked_reference(q: np.ndarray) -> np.ndarray | None:
    """The older frames' columns of an episode ``q`` by the definition, step by step: the
    first way (the fewest frames a step apart first, then the most frames, in blocks then
    interleaved, the newest last then first) in which every step after the first has each
    frame (but the ``shift`` newest) equal to the frame ``shift`` newer of the step before."""
    width = q.shape[1]
    cols = np.arange(width)
    top = min(8, width // 2)
    if any(all(np.array_equal(q[t, cols[a]], q[t - 1, cols[b]]) for t in range(1, len(q)))
           for a, b in ((slice(0, -1), slice(1, None)), (slice(1, None), slice(0, -1)))):
        return None  # a delay line of one number: every grouping of its columns a stack
    for shift in range(1, 8):
        for k in range(top, 1, -1):
            if width % k or shift >= k:
                continue
            for frames in (cols.reshape(k, width // k), cols.reshape(width // k, k).T):
                for newest_last in (True, False):
                    ok = all(np.array_equal(q[t, frames[j]], q[t - 1, frames[j + shift]])
                             if newest_last else
                             np.array_equal(q[t, frames[j + shift]], q[t - 1, frames[j]])
                             for t in range(1, len(q)) for j in range(k - shift))
                    if ok:
                        out = np.ones(width, dtype=bool)
                        out[frames[-1] if newest_last else frames[0]] = False
                        return out
    return None


@pytest.mark.parametrize("seed", range(40))
def test_stacked_columns_are_the_definition(seed: int) -> None:
    """Random episodes of one width (2 to 4 frames of 2 to 5 numbers, in blocks or
    interleaved, the newest last or first, whole or every other step), stacked or not, or
    stacked with one value changed: `stacked_columns` marks, per episode of `WINDOW` steps
    or more, what `stacked_reference` marks."""
    rng = np.random.default_rng(seed)
    k, d = int(rng.integers(2, 5)), int(rng.integers(2, 6))
    eps = []
    for _ in range(6):
        n = int(rng.integers(10, 50))
        o = np.round(rng.normal(size=(2 * n, d)), 2)
        s = stack(o, k)
        if rng.random() < 0.5:
            s = s[:, ::-1]
        s = flat(s) if rng.random() < 0.5 else flat(s.transpose(0, 2, 1))
        s = s[:: int(rng.integers(1, 3))][:n]
        if rng.random() < 0.25:
            s = np.round(rng.normal(size=s.shape), 2)  # not a stack
        elif rng.random() < 0.15:
            s = np.eye(k * d)[np.arange(len(s)) % (k * d)]  # a one-hot sweep: a delay line
        elif rng.random() < 0.3:
            s[int(rng.integers(1, len(s))), int(rng.integers(0, s.shape[1]))] += 1  # one off
        eps.append(s)
    lengths = np.array([len(e) for e in eps], dtype=np.int64)
    q = quantised(pa.array(np.vstack(eps).astype(np.float32).ravel())).reshape(-1, k * d)
    got = stacked_columns(q, lengths, WINDOW)
    found = 0
    for i in range(len(eps)):
        qi = q[int(lengths[:i].sum()) : int(lengths[: i + 1].sum())]
        want = stacked_reference(qi) if len(qi) >= WINDOW else None
        mine = None if got is None or not got[i].any() else got[i]
        assert (mine is None) == (want is None), i
        if want is not None and mine is not None:
            assert np.array_equal(mine, want), i
            found += 1
    assert got is None or found


def test_the_kept_file_holds_a_stacks_windows(tmp_path: Path) -> None:
    """`window_cache.compute` of a train batch of stacked episodes (a vector's and an
    image's) gives the windows `iter_windows` gives, those over the newest frames among
    them (part ``still``), and the file written and read back gives them again."""
    o = flat(stack(walk(1), 4))
    img = stack(sprites(1), 4)
    for name, b in (("vector", batch([("a", o), ("b", flat(stack(walk(2), 4, zeros=True)))])),
                    ("image", batch([("a", img), ("b", stack(sprites(2), 4))], img.shape[1:]))):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.Table.from_batches([b]), path, row_group_size=17)
        want = windows(b)
        c = compute(path, (False, True, False))
        got: dict[str, set[int]] = {}
        for w in c.step_windows(False):
            for e, h in zip(w.episode.tolist(), w.hashes.tolist(), strict=True):
                got.setdefault(w.episode_ids[e], set()).add(h)
        assert got == want
        steps = 60 if name == "vector" else 40
        assert c.still is not None and len(c.still[0]) == 2 * (steps - WINDOW + 1)
        digest = "sha256:" + "ab" * 32
        data = encode(c, digest)
        assert data is not None
        back = decode(data, digest)
        assert back.still is not None and all(
            np.array_equal(x, y) for x, y in zip(back.still, c.still, strict=True))


def dict_batch(episodes: list[tuple[str, np.ndarray, np.ndarray]]) -> pa.RecordBatch:
    """Steps of episodes of a Dict space ``{"pos": vector, "vel": vector}``."""
    ids = [e for e, p, _ in episodes for _ in range(len(p))]
    members = []
    for j in (1, 2):
        x = np.concatenate([e[j] for e in episodes])
        members.append(pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), x.shape[1]))
    return pa.record_batch({"episode_id": pa.array(ids),
                            "obs": pa.StructArray.from_arrays(members, ["pos", "vel"])})


UNSTACKED = {
    "4 frames": lambda o: flat(stack(o, 4)),
    "2 frames, zeros first": lambda o: flat(stack(o, 2, zeros=True)),
    "3 frames interleaved, the newest first": lambda o: flat(
        stack(o, 3)[:, ::-1].transpose(0, 2, 1)),
}
"""Held episodes recorded stacked, each copied without the stack (its newest frames)."""


@pytest.mark.parametrize("kind", ["walks", "one-hot grid"])
@pytest.mark.parametrize("name", list(UNSTACKED))
def test_a_held_stacked_episode_copied_without_the_stack_is_found(name: str, kind: str) -> None:
    """win37: a held episode recorded stacked (2 to 4 frames, blocks or interleaved) and
    copied as its newest frames alone (the train side keeps each step's newest observation)
    shares its held episode's windows, held cut across record batches or not, and none of
    another's; unrelated episodes, stacked or not, share none. On e5d93d4b none was found
    (the held side held no window over a newest frame)."""
    def make(seed: int) -> np.ndarray:
        return walk(seed) if kind == "walks" else grid(seed, one_hot=True)
    eps = [make(s) for s in (1, 2, 4)]
    stacked = [UNSTACKED[name](o) for o in eps]
    held = windows(batch([(f"h{i}", c) for i, c in enumerate(stacked)]), held=True)
    cut = windows(batch([("h0", stacked[0][:20])]),
                  batch([("h0", stacked[0][20:]), ("h1", stacked[1]), ("h2", stacked[2])]),
                  held=True)
    assert cut == held
    for i, o in enumerate(eps):
        got = windows(batch([("c", o[7:])]))["c"]
        assert got & held[f"h{i}"], i
        assert not got & (set().union(*held.values()) - held[f"h{i}"]), i
    others = [make(s) for s in range(1000, 1040)]
    allh = set().union(*held.values())
    for train in (batch([(f"t{i}", o) for i, o in enumerate(others)]),
                  batch([(f"t{i}", UNSTACKED[name](o)) for i, o in enumerate(others)])):
        assert not set().union(*windows(train).values()) & allh


def test_a_stacked_member_of_a_dict_space_is_found_both_ways() -> None:
    """win37: a Dict space whose member ``pos`` is stacked (4 frames) beside a member that is
    not: a copy of a held episode so stacked shares its windows, and a held episode recorded
    so, copied with ``pos`` unstacked, shares its windows; none of another's, and unrelated
    episodes, stacked or not, none. On e5d93d4b neither was found (a stack of the whole space
    is no stack: its member ``vel`` is none)."""
    eps = [(walk(s), walk(s + 500, width=2)) for s in (1, 2, 3)]
    plain = dict_batch([(f"h{i}", p, v) for i, (p, v) in enumerate(eps)])
    stacked = dict_batch([(f"h{i}", flat(stack(p, 4)), v) for i, (p, v) in enumerate(eps)])
    for held_b, copy in ((plain, lambda p: flat(stack(p, 4))), (stacked, lambda p: p)):
        held = windows(held_b, held=True)
        allh = set().union(*held.values())
        for i, (p, v) in enumerate(eps):
            got = windows(dict_batch([("c", copy(p)[5:], v[5:])]))["c"]
            assert got & held[f"h{i}"], i
            assert not got & (allh - held[f"h{i}"]), i
        for s in range(1000, 1020):
            p, v = walk(s), walk(s + 500, width=2)
            for c in (p, flat(stack(p, 4))):
                assert not set().union(*windows(dict_batch([("t", c, v)])).values()) & allh


def test_the_kept_file_holds_a_held_stacks_windows(tmp_path: Path) -> None:
    """win37: `window_cache.compute` of a held batch of stacked episodes (a vector's, a Dict
    member's) gives the held windows `iter_windows` gives, those over the newest frames among
    them (part ``clocks``), and the file written and read back gives them again."""
    plain = batch([("a", flat(stack(walk(1), 4))), ("b", flat(stack(walk(2), 4, zeros=True)))])
    member = dict_batch([("a", flat(stack(walk(3), 4)), walk(4, width=2))])
    for name, b in (("vector", plain), ("dict", member)):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.Table.from_batches([b]), path, row_group_size=17)
        want = windows(b, held=True)
        c = compute(path, (False, True, True))
        digest = "sha256:" + "cd" * 32
        data = encode(c, digest)
        assert data is not None
        for kept_c in (c, decode(data, digest)):
            got: dict[str, set[int]] = {}
            for w in kept_c.step_windows(True):
                for e, h in zip(w.episode.tolist(), w.hashes.tolist(), strict=True):
                    got.setdefault(w.episode_ids[e], set()).add(h)
            assert got == want, name
        assert c.clocks is not None and len(c.clocks[0]), name


def broken_stacks(seed: int, where: str) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Episodes of 4 frames of 4 numbers (in blocks, the newest last), stacked at every step
    but one replaced by noise (``where``: the last, one in the middle, or none), beside
    random ones: ``(q, lengths, each episode's q)``."""
    rng = np.random.default_rng(seed)
    eps = []
    for i in range(12):
        n = int(rng.integers(WINDOW, 60))
        s = flat(stack(np.round(rng.normal(size=(n, 4)), 2), 4))
        if i % 4 == 3:
            s = np.round(rng.normal(size=s.shape), 2)
        elif where != "none":
            s[n - 1 if where == "end" else int(rng.integers(2, n - 1))] = rng.normal(size=16)
        eps.append(s)
    lengths = np.array([len(e) for e in eps], dtype=np.int64)
    q = quantised(pa.array(np.vstack(eps).astype(np.float32).ravel())).reshape(-1, 16)
    return q, lengths, np.split(q, np.cumsum(lengths)[:-1])


@pytest.mark.parametrize("where", ["end", "middle", "none"])
@pytest.mark.parametrize("seed", range(6))
def test_stacks_broken_at_one_step_are_the_definition(seed: int, where: str) -> None:
    """rev35: each episode's last step, then the step an earlier way found unstacked, is
    compared before the episode whole; the decisions are the definition's still, for episodes
    stacked but at their last step, at one in the middle, or at none."""
    q, lengths, eps = broken_stacks(seed, where)
    got = stacked_columns(q, lengths, WINDOW)
    for i, qi in enumerate(eps):
        want = stacked_reference(qi)
        mine = None if got is None or not got[i].any() else got[i]
        assert (mine is None) == (want is None), i
        assert want is None or np.array_equal(mine, want), i
        assert (want is not None) == (where == "none" and i % 4 != 3), i


@pytest.mark.parametrize("where", ["end", "middle"])
def test_a_batch_stacked_but_at_one_step_is_read_whole_once_at_most(
        where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """rev34's Left: an episode stacked at every step but its last passed every way's first
    look (its first two steps) and was compared whole in each (4.8x the CPU of random data).
    Now the steps compared whole are at most the batch's once (broken in the middle: the way
    that found the break looks there first in the next way)."""
    from trajledger.ledger import frame_stacks

    read = []
    real = frame_stacks._linked

    def counted(x: np.ndarray, frames: np.ndarray, shift: int) -> tuple[np.ndarray, np.ndarray]:
        read.append(len(x))
        return real(x, frames, shift)

    monkeypatch.setattr(frame_stacks, "_linked", counted)
    q, lengths, _eps = broken_stacks(0, where)
    assert stacked_columns(q, lengths, WINDOW) is None
    assert sum(read) <= len(q), (sum(read), len(q))
