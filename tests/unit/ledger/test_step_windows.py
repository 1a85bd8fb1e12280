"""The step windows of numeric episodes (`ledger.step_windows`): what makes two steps equal,
and that the windows do not depend on how the steps are cut into record batches."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from trajledger.ledger.step_windows import (
    COLUMNS,
    LONG,
    LONG_COLUMNS,
    MAX_CLOCK_SETS,
    MIN_WHOLE,
    ORDERS,
    WINDOW,
    clock_columns,
    held_steps,
    iter_windows,
    span,
    step_hashes,
)


def batch(episodes: list[tuple[str, np.ndarray]], dtype: pa.DataType | None = None
          ) -> pa.RecordBatch:
    ids = [e for e, o in episodes for _ in range(len(o))]
    flat = np.vstack([o for _, o in episodes])
    values = pa.array(flat.ravel(), dtype or pa.float64())
    obs = pa.FixedSizeListArray.from_arrays(values, flat.shape[1])
    return pa.record_batch({"episode_id": pa.array(ids), "obs": obs})


def walk(seed: int, n: int = 40) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).normal(0, 0.05, size=(n, 4)), axis=0)


def windows(*batches: pa.RecordBatch, held: bool = False,
            columns: bool = False) -> dict[str, list[int]]:
    """Each episode's window hashes (``columns``: its `COLUMNS` ones, of `WINDOW` then of
    `LONG` steps on the held side, else the others)."""
    out: dict[str, list[int]] = {}
    for w in iter_windows(batches, held=held):
        if (w.order >= COLUMNS) != columns:
            continue
        for e, h in zip(w.episode.tolist(), w.hashes.tolist(), strict=True):
            out.setdefault(w.episode_ids[e], []).append(h)
    return out


def test_steps_equal_to_three_significant_digits_hash_alike() -> None:
    o = walk(1)
    same = [batch([("a", o)]), batch([("a", o)], pa.float32()), batch([("a", o * 1.000001)]),
            batch([("a", o + 0.0 * -1)])]
    hashes = [step_hashes(b.column("obs")).tolist() for b in same]  # type: ignore[union-attr]
    assert all(h == hashes[0] for h in hashes)
    other = step_hashes(batch([("a", o * 1.01)]).column("obs"))
    assert other is not None and not set(other.tolist()) & set(hashes[0])
    assert step_hashes(pa.array([["x"], ["y"]])) is None  # not numbers: no windows
    obs = pa.array([{"pos": [1.0, 2.0], "v": 3}, {"pos": [2.0, 1.0], "v": 3}])
    a, b = step_hashes(obs).tolist()  # type: ignore[union-attr]
    assert a != b  # a Dict space: each member, each value in its place


def test_windows_do_not_depend_on_record_batches() -> None:
    a, b, c = walk(1), walk(2, 10), walk(3)
    whole = windows(batch([("a", a), ("b", b), ("c", c)]))
    cut = windows(batch([("a", a[:7])]), batch([("a", a[7:]), ("b", b), ("c", c[:3])]),
                  batch([("c", c[3:20])]), batch([("c", c[20:])]))
    assert whole == cut
    assert sorted(whole) == ["a", "c"] and len(whole["a"]) == 40 - WINDOW + 1  # b: too short


def test_the_held_side_holds_its_steps_in_every_order() -> None:
    """win25: a held episode's windows in order (k, phase, reversed) of `ORDERS` are the
    windows of every k-th step from ``phase``, reversed or not, as a copy so made gives them
    (on main, the held side held order 0 only; copy26: every fourth step, and every second
    reversed); `held_steps` names the held steps a window is; cut in record batches or not,
    the same."""
    eps = {"a": walk(1, 70), "b": walk(2, 41), "c": walk(3, 20)}
    whole = list(iter_windows([batch(list(eps.items()))], held=True))
    cut = list(iter_windows([batch([("a", eps["a"][:9])]), batch([("a", eps["a"][9:]),
                             ("b", eps["b"]), ("c", eps["c"])])], held=True))
    assert sorted({w.order for w in whole}) == [*range(len(ORDERS)), COLUMNS, LONG_COLUMNS]
    for order, (k, phase, back) in enumerate(ORDERS):
        for e, obs in eps.items():
            copy = obs[phase::k][::-1] if back else obs[phase::k]
            want = windows(batch([(e, copy)])).get(e, [])
            for got in (whole, cut):
                mine = [(int(s), int(h)) for w in got if w.order == order
                        for i, s, h in zip(w.episode, w.start, w.hashes, strict=True)
                        if w.episode_ids[i] == e]
                assert [h for _, h in mine] == want, (order, e)
            for s, _ in mine:
                first, last = held_steps(order, len(obs), s, s + WINDOW - 1)
                assert np.array_equal(copy[s], obs[last - 1 if back else first - 1])
                assert np.array_equal(copy[s + WINDOW - 1], obs[first - 1 if back else last - 1])
                assert np.array_equal(copy[s + 1], obs[last - 1 - k if back else first - 1 + k])


def test_unrelated_walks_share_no_window() -> None:
    held = windows(batch([(f"h{i}", walk(i, 60)) for i in range(200)]), held=True)
    train = windows(batch([(f"t{i}", walk(1000 + i, 60)) for i in range(200)]))
    assert not {h for v in held.values() for h in v} & {h for v in train.values() for h in v}


def test_a_tensor_column_hashes_as_any_list_of_the_same_values() -> None:
    """The matrix path (a tensor column) and the general one (lists of any lengths) agree, for
    even and odd widths; a shorter row is another row."""
    for width in (4, 5):
        o = walk(7, 30)[:, :4].repeat(2, axis=1)[:, :width]
        fixed = step_hashes(batch([("a", o)]).column("obs"))
        lists = step_hashes(pa.array([list(map(float, r)) for r in o], pa.list_(pa.float64())))
        ragged = step_hashes(pa.array([list(map(float, r)) for r in o] + [[1.0]],
                                      pa.list_(pa.float64())))
        assert fixed is not None and lists is not None and ragged is not None
        assert fixed.tolist() == lists.tolist() == ragged[:-1].tolist()
    a, b = step_hashes(pa.array([[1.0, 2.0], [1.0, 2.0, 0.0]])).tolist()  # type: ignore[union-attr]
    assert a != b


def test_columns_windows_keep_a_copy_with_its_columns_permuted_or_repeated() -> None:
    """copy28: the `COLUMNS` windows of a copy whose observation's columns are permuted, some
    repeated, are the held episode's, on the train side as on the held side, cut in record
    batches or not; they are no window of the steps as recorded (order 0); a one-hot
    observation (values 0 and 1 alone) holds none of 16 steps (`LONG`: below), a 1-number one
    none at all."""
    a, b = walk(1, 40), walk(2, 30)
    held = windows(batch([("a", a), ("b", b)]), held=True, columns=True)
    assert len(held["a"]) == 40 - WINDOW + 1 and len(held["b"]) == 30 - WINDOW + 1
    for cols in ([2, 0, 3, 1], [3, 1, 1, 0, 2], [0, 1, 2, 3, 0, 1, 2, 3]):
        copy = a[:, cols]
        assert windows(batch([("a", copy)]), columns=True)["a"] == held["a"]
        cut = windows(batch([("a", copy[:7])]), batch([("a", copy[7:]), ("b", b[:, cols])]),
                      columns=True)
        assert cut["a"] == held["a"] and cut["b"] == held["b"]
        assert not set(windows(batch([("a", copy)]))["a"]) & set(windows(batch([("a", a)]))["a"])
    assert not set(windows(batch([("a", a[:, ::-1] * 1.01)]), columns=True)["a"]) & set(held["a"])
    assert windows(batch([("a", a[:, :1])]), columns=True) == {}


def test_few_valued_columns_windows_are_long() -> None:
    """copy30: a one-hot observation's `COLUMNS` windows are over `LONG` steps (from the
    window's first step, or near the episode's end up to its last): a copy with its columns
    permuted, cut across record batches or with its first steps dropped, holds the held
    episode's; a held run that never comes back to a cell (`MIN_REVISITS`) is not compared,
    nor are the windows of an episode shorter than `LONG` steps."""
    cells = np.random.default_rng(4).integers(9, size=70)
    one_hot = np.eye(9)[cells]
    held = windows(batch([("h", one_hot)]), held=True, columns=True)["h"]
    # starts 0-22 from the first step, 32-54 up to the last (the same 48-step runs), none between
    assert len(held) == 2 * len(set(held)) == 2 * (70 - LONG + 1)
    perm = np.random.default_rng(5).permutation(9)
    copy = windows(batch([("c", one_hot[:30, perm])]), batch([("c", one_hot[30:, perm])]),
                   columns=True)["c"]
    assert copy == held
    cut = windows(batch([("c", one_hot[5:, perm])]), columns=True)["c"]
    assert set(cut) & set(held) and set(cut) <= set(held)
    assert not set(held) & set(windows(batch([("t", one_hot[:, perm])]))["t"])  # order 0's
    sweep = np.eye(64)[np.arange(60)]  # 60 cells, each once: only "no step twice" survives
    assert windows(batch([("h", sweep)]), held=True, columns=True) == {}
    assert len(windows(batch([("t", sweep[:, ::-1])]), columns=True)["t"]) == 2 * (60 - LONG + 1)


def test_long_columns_windows_are_held_from_their_first_step() -> None:
    """copy31: the held side's `COLUMNS` windows of `LONG` steps are of order `LONG_COLUMNS`,
    each ``start`` the first of the `span` steps it is the hash of (from the window's first
    step, or near the episode's end 32 steps before it): a copy of just those steps, its
    columns permuted, holds it; those of 16 steps stay in order `COLUMNS` (on 5f64dc8 all
    were of order `COLUMNS`, each from its 16 steps' first: 32 of 55 named another run)."""
    cells = np.random.default_rng(4).integers(9, size=70)
    one_hot = np.eye(9)[cells]
    a = np.hstack([walk(1, 70), walk(2, 70), walk(3, 70)[:, :1]])  # 9 numbers, many values
    got: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for w in iter_windows([batch([("h", one_hot), ("a", a)])], held=True):
        assert w.order < COLUMNS or w.order in (COLUMNS, LONG_COLUMNS)
        for e, s, h in zip(w.episode.tolist(), w.start.tolist(), w.hashes.tolist(), strict=True):
            got.setdefault((w.order, w.episode_ids[e]), []).append((s, h))
    assert [span(o, n) for o in (COLUMNS, LONG_COLUMNS, 0) for n in (70, 40)] == [
        WINDOW, WINDOW, LONG, 40, WINDOW, WINDOW]
    assert {k for k in got if k[0] >= COLUMNS} == {(COLUMNS, "a"), (LONG_COLUMNS, "h")}
    long, short = got[LONG_COLUMNS, "h"], got[COLUMNS, "a"]
    assert sorted(s for s, _ in long) == sorted([*range(70 - LONG + 1)] * 2)
    perm = np.random.default_rng(5).permutation(9)
    for s, h in long:
        assert h in windows(batch([("c", one_hot[s : s + LONG, perm])]), columns=True)["c"], s
    for s, h in short:
        assert h in windows(batch([("c", a[s : s + WINDOW, ::-1])]), columns=True)["c"], s


def test_a_few_valued_episode_shorter_than_long_is_one_window() -> None:
    """copy31: an episode of `MIN_WHOLE` to `LONG` - 1 steps whose first 16 take few values has
    one `COLUMNS` window, over all its steps (order `LONG_COLUMNS` from step 0 on the held
    side, `span` its length), held when informative (`MIN_DISTINCT`, `MIN_REVISITS`): a copy
    with its columns permuted holds it, on the train side as on the held side, cut across
    record batches or not; one of another length does not (on 5f64dc8 no such episode held
    any `COLUMNS` window: a permuted copy was admitted)."""
    cells = np.random.default_rng(4).permutation(40) % 9
    one_hot = np.eye(9)[cells]  # 40 steps, 9 cells each visited 4 or 5 times
    held = list(iter_windows([batch([("h", one_hot)])], held=True))
    [(order, start, h)] = [(w.order, int(s), int(x)) for w in held if w.order >= COLUMNS
                           for s, x in zip(w.start, w.hashes, strict=True)]
    assert (order, start) == (LONG_COLUMNS, 0)
    perm = np.random.default_rng(5).permutation(9)
    assert windows(batch([("c", one_hot[:, perm])]), columns=True) == {"c": [h]}
    assert windows(batch([("c", one_hot[:17, perm])]), batch([("c", one_hot[17:, perm])]),
                   columns=True) == {"c": [h]}
    for cut in (one_hot[1:], one_hot[:-1], np.vstack([one_hot, one_hot[:1]])):
        assert h not in windows(batch([("c", cut[:, perm])]), columns=True).get("c", [])
    sweep = np.eye(64)[np.arange(40)]  # no step twice: every such run alike, not held
    assert windows(batch([("h", sweep)]), held=True, columns=True) == {}
    assert len(windows(batch([("t", sweep)]), columns=True)["t"]) == 1
    few = np.eye(9)[np.arange(40) % 3]  # 3 distinct steps: not held
    assert windows(batch([("h", few)]), held=True, columns=True) == {}
    for n in (15, MIN_WHOLE - 1):  # under `WINDOW`: no window; under `MIN_WHOLE`: not this one
        assert windows(batch([("h", one_hot[:n])]), columns=True) == {}


def test_columns_windows_of_dict_and_tuple_spaces() -> None:
    """copy30: a Dict or Tuple space's `COLUMNS` windows are over the columns of its members,
    each salted by its member: a copy with the columns of each member permuted holds them; one
    with a column moved to another member does not."""
    a, b = walk(1, 40), walk(2, 40)[:, :3]

    def space(x: np.ndarray, y: np.ndarray, kind: str = "pos") -> pa.RecordBatch:
        obs = pa.StructArray.from_arrays(
            [pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), x.shape[1]),
             pa.FixedSizeListArray.from_arrays(pa.array(y.ravel()), y.shape[1])], [kind, "vel"])
        return pa.record_batch({"episode_id": pa.array(["e"] * len(x)), "obs": obs})

    held = windows(space(a, b), held=True, columns=True)["e"]
    assert len(held) == 40 - WINDOW + 1
    assert windows(space(a[:, [3, 1, 0, 2]], b[:, ::-1]), columns=True)["e"] == held
    assert windows(space(a[:, [3, 1, 0, 2]], b[:, ::-1], "0"), columns=True)["e"] == held
    moved = windows(space(a[:, :3], np.hstack([b, a[:, 3:]])), columns=True)["e"]
    assert not set(moved) & set(held)
    cell = pa.StructArray.from_arrays([pa.array(np.arange(40) % 5), pa.array(a[:, 0])], ["0", "1"])
    tup = pa.record_batch({"episode_id": pa.array(["t"] * 40), "obs": cell})
    assert len(windows(tup, columns=True)["t"]) == 40 - WINDOW + 1  # a number a member


def test_columns_windows_in_blocks_are_the_windows_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The `COLUMNS` hashes and marks are computed a block of windows at a time (memory
    bounded by the block, not the record batch: 65,536 steps of 256 numbers took 0.9 GB at
    once); blocks of any size, across episodes of any length, give the same."""
    from trajledger.ledger import step_windows

    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 90, size=40).astype(np.int64)
    q = rng.integers(0, 1 << 32, size=(int(lengths.sum()), 3)).astype(np.uint32)
    q[: len(q) // 2] %= 3  # few values: marked on the held side
    episode = np.concatenate([np.full(max(0, n - WINDOW + 1), e) for e, n in enumerate(lengths)])
    start = np.concatenate([np.arange(max(0, n - WINDOW + 1)) for n in lengths])
    args = (q, lengths, episode.astype(np.int64), start.astype(np.int64))
    whole = step_windows.columns_windows(*args)
    assert len(whole[0]) > 1_000 and whole[1].any() and not whole[1].all()
    for block in (1, 7, 64, 999):
        monkeypatch.setattr(step_windows, "_COLUMN_BLOCK", block)
        hashes, few = step_windows.columns_windows(*args)
        assert hashes.tolist() == whole[0].tolist() and few.tolist() == whole[1].tolist()


# -- clock33: a clock column (Gymnasium's TimeAwareObservation) ---------------------------------

def clocked(o: np.ndarray, clock: str, at: int | None = None, first: int = 0) -> np.ndarray:
    """``o`` with a clock column (the step number from ``first``, ``t / 500`` or the time
    left) inserted before column ``at`` (None: appended, as the wrapper flattens it)."""
    t = np.arange(first, first + len(o), dtype=np.float64)
    c = {"t": t, "t/500": (t / 500).astype(np.float32), "left": 1 - t / 500}[clock]
    return np.insert(o, o.shape[1] if at is None else at, c, axis=1)


def every(*batches: pa.RecordBatch, held: bool = False) -> set[int]:
    return {h for w in iter_windows(batches, held=held) for h in w.hashes.tolist()}


def recorded(b: pa.RecordBatch) -> list[int]:
    """The held side's windows of order 0 of ``b``, as recorded (no clock left out)."""
    return [h for w in iter_windows([b], held=True) if w.order == 0 and not w.clocks
            for h in w.hashes.tolist()]


def dict_batch(members: dict[str, np.ndarray], episode: str = "e") -> pa.RecordBatch:
    obs = pa.StructArray.from_arrays(
        [pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), v.shape[1])
         for v in members.values()], list(members))
    n = len(next(iter(members.values())))
    return pa.record_batch({"episode_id": pa.array([episode] * n), "obs": obs})


@pytest.mark.parametrize("clock", ["t", "t/500", "left"])
def test_a_copy_with_a_clock_added_holds_the_held_windows(clock: str) -> None:
    """rev29's Left: a copy with a column that counts the steps (appended, as
    ``TimeAwareObservation`` flattens it, or inserted; a Dict member of its own, before or
    after the others) shared no window with the held episode. Its windows without the clock
    are the held ones, in order 0 and `COLUMNS` (a one-hot walk: of `LONG` steps), cut, inside
    unrelated steps and across record batches alike."""
    a, grid = walk(1, 60), np.eye(36)[np.random.default_rng(4).integers(0, 36, 20)[
        np.random.default_rng(5).integers(0, 20, 100)]]
    held = recorded(batch([("a", a)]))
    held_cols = windows(batch([("a", a)]), held=True, columns=True)["a"]
    assert len(held) == len(held_cols) == 60 - WINDOW + 1
    for copy in (clocked(a, clock), clocked(a, clock, 2), clocked(a, clock, 0, first=7)):
        assert set(held) <= every(batch([("c", copy)]))
        assert set(held_cols) <= every(batch([("c", copy[:, ::-1])]))  # permuted too
        assert set(held[7:]) <= every(batch([("c", copy[:20])]), batch([("c", copy[20:])]))
        assert set(held[7:]) <= every(batch([("c", copy[7:])]))  # cut
    noise = walk(9, 30) + 5
    inside = clocked(np.vstack([noise[:10], a, noise[10:]]), clock)  # one clock throughout
    assert set(held) <= every(batch([("c", inside)]))
    longs = windows(batch([("g", grid)]), held=True, columns=True)["g"]
    assert longs and set(longs) <= every(batch([("c", clocked(grid, clock)[:, ::-1])]))
    held_dict = every(dict_batch({"pos": a, "vel": a[:, :3] * 2}), held=True)
    t = clocked(a[:, :0], clock)
    for members in ({"pos": a, "vel": a[:, :3] * 2, "time": t},
                    {"pos": a, "time": t, "vel": a[:, :3] * 2},
                    {"time": t, "pos": a, "vel": a[:, :3] * 2}):
        got = every(dict_batch(members))
        assert len(held_dict & got) >= 2 * (60 - WINDOW + 1)  # order 0 and `COLUMNS`


def test_a_clock_in_another_place_in_each_episode_is_left_out_of_each() -> None:
    """Each set of clock columns is computed over the episodes that have it: twelve episodes
    of one record batch, each with its clock in another place (more than `MAX_CLOCK_SETS`:
    a cap of 8 sets a batch, its first version, left 3 of 12 out)."""
    eps = [np.cumsum(np.random.default_rng(i).normal(0, 0.05, size=(40, 12)), axis=0)
           for i in range(12)]
    assert len(eps) > MAX_CLOCK_SETS
    held = every(batch([(f"h{i}", e) for i, e in enumerate(eps)]), held=True)
    train = windows(batch([(f"c{i}", clocked(e, "t", i)) for i, e in enumerate(eps)]))
    assert sorted(c for c, hs in train.items() if set(hs) & held) == sorted(train)
    assert len(train) == 12


def test_clock_columns_are_the_windows_whose_values_step_evenly() -> None:
    """`clock_columns` (its columns passed over first by two triples of rows a window) says
    of each window and column what the definition says: every step of its 16 values equal
    to within float32 rounding, and not 0; a clock from any step, cut anywhere, rounded to
    float32, decreasing, beside noise, constants, NaN and a walk that steps evenly by chance
    for fewer than 16 steps."""
    rng = np.random.default_rng(8)
    n = 300
    t = np.arange(n, dtype=np.float64)
    cols = [t, (t / 500).astype(np.float32), 1 - t / 500, t * 1e6, rng.random(n), np.full(n, 3.0),
            np.where(t % 50 < 30, t, 0.0), np.where(t == 77, np.nan, t / 7), np.round(t / 3),
            np.concatenate([np.cumsum(rng.normal(size=20)), 20 + np.arange(15.0),
                            40 + np.cumsum(rng.normal(size=n - 35))])]
    raw = np.stack([np.asarray(c, dtype=np.float64) for c in cols], axis=1)
    got = clock_columns(raw)
    want = np.zeros_like(got)
    for p in range(n - WINDOW + 1):
        for j in range(raw.shape[1]):
            v = raw[p : p + WINDOW, j]
            d = np.diff(v)
            tol = 2.0**-20 * (np.abs(v[:-2]) + np.abs(v[1:-1]) + np.abs(v[2:]))
            want[p, j] = bool((np.abs(d[1:] - d[:-1]) <= tol).all()
                              and (np.abs(d) > 2.0**-25 * (np.abs(v[:-1]) + np.abs(v[1:]))).all()
                              and ((d > 0).all() or (d < 0).all()))
    assert np.array_equal(got, want)
    assert got[:, :4].all() and not got[:, 4:6].any() and got[:, 6].any() and not got[:, 6].all()
    assert got[:, 7].any() and not got[62:78, 7].any()  # the NaN at step 77
    assert not got[:, 8].any() and not got[:, 9].any()
    # rev31: a clock far from 0 steps by less than 2**-20 of its size (a step of 1 at 10**6
    # was taken for standing: a copy with ``10**6 + t`` added shared no window), one whose
    # steps change sign within the rounding (a value that stands but for float noise), one
    # that stands in float32 (``10**5 + t / 500``), and one step of a clock less than that
    big = np.stack([1e6 + t, 1e7 - 3 * t, 1.0 + 1e-7 * (-1.0) ** t, 1e5 + t / 500,
                    np.where(t == 150, 149 + 1e-9, t)], axis=1)
    got = clock_columns(big)
    assert got[:, :2].all() and not got[:, 2:4].any()
    assert got[:, 4].any() and not got[135:151, 4].any()
    a = walk(1, 60)
    held = recorded(batch([("a", a)]))
    for clock in (1e6 + t[:60], 1e7 - 3 * t[:60]):
        assert set(held) <= every(batch([("c", np.insert(a, 2, clock, axis=1))], pa.float32()))


def test_a_held_episode_with_a_clock_holds_the_windows_of_a_copy_without() -> None:
    """The reverse: the held episode was recorded with a clock, the copy drops it."""
    a = walk(2, 50)
    held = every(batch([("h", clocked(a, "t/500"))]), held=True)
    copy = windows(batch([("c", a[5:])]))["c"]
    assert copy and set(copy) <= held
    assert set(windows(batch([("c", a[:, ::-1])]), columns=True)["c"]) <= held


def test_a_clock_makes_no_match_out_of_nothing() -> None:
    """A clock beside an agent standing still, or beside unrelated few-valued walks, on
    either side or both: a held window's marks are decided without its clock, so nothing is
    shared (a clock on the held side made every window of a standing agent 16 distinct
    steps, and a one-hot walk's 16 steps many-valued)."""
    stand = np.tile([0.5, -1.0, 2.0], (60, 1))
    for held_obs, train_obs in ((stand, clocked(stand, "t")),
                                (clocked(stand, "t"), clocked(stand, "t")),
                                (clocked(stand, "t/500"), stand)):
        assert not every(batch([("h", held_obs)]), held=True) & every(batch([("c", train_obs)]))
    rng = np.random.default_rng(3)
    cells = [np.eye(16)[np.clip(np.cumsum(rng.integers(-1, 2, 80)) + 8, 0, 15)]
             for _ in range(60)]
    for clock in ("t", "left"):
        held = every(batch([(f"h{i}", clocked(c, clock)) for i, c in enumerate(cells[:30])]),
                     held=True)
        train = every(batch([(f"t{i}", clocked(c, clock)[:, ::-1])
                             for i, c in enumerate(cells[30:])]))
        assert not held & train
        walks = every(batch([(f"t{i}", clocked(walk(500 + i, 60), clock)) for i in range(30)]))
        assert not walks & every(batch([(f"h{i}", clocked(walk(i, 60), clock))
                                        for i in range(30)]), held=True)


def test_a_held_clock_reversed_or_subsampled_makes_no_match_out_of_nothing() -> None:
    """rev31: the held side's other orders (reversed, every k-th step) had their marks
    decided with the clock: a held agent standing still beside the step number was 16
    distinct steps reversed (the clock counting down) and every 2nd or 3rd step (the clock
    stepping by 2 or 3), so an unrelated agent standing in the same state beside a countdown
    (``T - t``) or a clock of frames (``2 t``: a frame skip of 2) shared 45 windows (a run of
    60 steps, refused). The other orders' marks are decided without their clocks too; a copy
    of a moving held episode, reversed with its clock, is still found."""
    stand = np.tile([0.5, -1.0, 2.0], (120, 1))
    t = np.arange(120.0)
    held = every(batch([("h", np.insert(stand, 3, t, axis=1))]), held=True)
    for clock in (100 - t[:60], 2 * t[:60], 3 * t[:60], 60 - 2 * t[:60], t[:60] / 2):
        assert not held & every(batch([("c", np.insert(stand[:60], 3, clock, axis=1))]))
    a = clocked(walk(6, 80), "t")
    moving = every(batch([("h", a)]), held=True)
    for copy in (a[::-1], a[::2], a[1::3][::-1]):  # reversed, every 2nd, every 3rd reversed
        got = [h for w in iter_windows([batch([("c", copy)])]) if w.order == 0 and not w.clocks
               for h in w.hashes.tolist()]
        assert got and set(got) <= moving


def test_a_copy_after_more_clock_sets_than_the_cap_is_found() -> None:
    """rev31: of an episode, only the windows of its `MAX_CLOCK_SETS` most common sets of
    clock columns were hashed without them: a held episode copied with `t` appended, after
    700 made-up steps in which a column steps evenly throughout and one or two others in
    turn (each 100 steps: 7 sets, and the windows across their joins another, each more
    common than the copy's), shared none of its 45 windows. The other sets' windows are
    hashed in order 0 over their own rows (across record batches alike)."""
    from itertools import combinations

    rng = np.random.default_rng(0)
    a = np.cumsum(rng.normal(0, 0.05, size=(60, 8)), axis=0)
    held = recorded(batch([("a", a)]))
    junk = []
    for i, cols in enumerate([s for r in (1, 2) for s in combinations(range(1, 8), r)][:12]):
        j = np.cumsum(rng.normal(0, 0.05, size=(100, 8)), axis=0) + 3
        j[:, 0] = 0.01 * np.arange(i * 100, (i + 1) * 100)
        for c in cols:
            j[:, c] = 5 + 0.01 * (c + 1) * np.arange(100)
        junk.append(j)
    for before in (junk[:7], junk):
        obs = np.vstack([*before, a])
        copy = clocked(obs, "t")
        assert len(held) == 45 and set(held) <= every(batch([("c", copy)]))
        assert set(held) <= every(batch([("c", copy[:40])]), batch([("c", copy[40:])]))


def test_the_windows_of_rare_clock_sets_are_those_of_the_common(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The windows of an episode's sets of clock columns past `MAX_CLOCK_SETS` (hashed over
    their own rows, rev31) are, hash and mark, those the episode's pass gives: every set made
    rare (a cap of 0), of walks, standing agents and a clock that resets, held and not."""
    from trajledger.ledger import step_windows

    stand = np.tile([0.5, -1.0, 2.0, 0.0], (70, 1))
    reset = clocked(walk(3, 90), "t")
    reset[:, -1] %= 23  # a clock that resets: its windows apart
    eps = [("w", clocked(walk(1, 50), "t", 1)), ("s", clocked(stand, "left")),
           ("r", reset), ("x", np.hstack([walk(2, 30), walk(7, 30)[:, :1]])),
           ("d", clocked(clocked(walk(4, 40)[:, :3], "t"), "t/500"))]
    cases = [[batch(eps)], [batch(eps[:2]), batch(eps[2:])]]

    def bare(batches: list[pa.RecordBatch], held: bool) -> list[tuple[str, int, int, bool]]:
        return [(w.episode_ids[e], s, h, bool(f))
                for w, few in step_windows._iter(batches, held, 1) if w.clocks and not w.order
                for e, s, h, f in zip(w.episode.tolist(), w.start.tolist(), w.hashes.tolist(),
                                      few.tolist(), strict=True)]

    want = [bare(b, held) for b in cases for held in (False, True)]
    assert all(want) and any(f[3] for f in want[1]) and not all(f[3] for f in want[1])
    monkeypatch.setattr(step_windows, "MAX_CLOCK_SETS", 0)
    assert [bare(b, held) for b in cases for held in (False, True)] == want


def test_the_marks_without_the_hashes_are_the_marks() -> None:
    """`_few_steps` (the other orders' marks without their clocks, rev31) marks the windows
    of whole episodes as `_marked` does: episodes shorter than a window, standing and
    moving, back to back."""
    from trajledger.ledger import step_windows

    rng = np.random.default_rng(5)
    seen = set()
    for _ in range(50):
        lengths = rng.integers(0, 60, size=int(rng.integers(1, 8))).astype(np.int64)
        n = int(lengths.sum())
        h = rng.integers(0, 4, size=n).astype(np.uint64)  # standing in one of 4 states
        moving = rng.random(n) < rng.random()
        h[moving] = 100 + np.flatnonzero(moving).astype(np.uint64)  # else a new step each
        ids = [str(i) for i in range(len(lengths))]
        want = step_windows._marked(ids, lengths, h, True)[1]
        assert step_windows._few_steps(lengths, h).tolist() == want.tolist()
        seen |= set(want.tolist())
    assert seen == {False, True}
def with_a_null_step(b: pa.RecordBatch, at: int = -1) -> pa.RecordBatch:
    """``b`` with the observation of step ``at`` null (the rollout schema allows it)."""
    rows = b.column("obs").to_pylist()
    rows[at] = None
    return pa.record_batch([b.column("episode_id"), pa.array(rows, b.column("obs").type)],
                           names=["episode_id", "obs"])


def test_a_null_observation_does_not_turn_the_columns_windows_off() -> None:
    """img34: one null observation in a train batch (another episode's step) turned off the
    whole batch's `COLUMNS` windows and, with them, its windows without a clock: a permuted
    copy (copy28), a permuted one-hot walk (copy30) and a copy with a clock added (clock33)
    beside it were found no more. Now a null step is a row of its own; only the windows that
    hold it differ."""
    a = walk(1, 40)
    other = ("z", walk(7, 20))
    held = windows(batch([("a", a)]), held=True, columns=True)["a"]
    got = windows(with_a_null_step(batch([("c", a[:, [2, 0, 3, 1]]), other])), columns=True)
    assert got["c"] == held and len(got["z"]) == 20 - WINDOW + 1
    one_hot = np.eye(9)[np.random.default_rng(4).integers(9, size=70)]
    longs = windows(batch([("h", one_hot)]), held=True, columns=True)["h"]
    perm = np.random.default_rng(5).permutation(9)
    z = np.eye(9)[np.random.default_rng(6).integers(9, size=20)]
    assert windows(with_a_null_step(batch([("c", one_hot[:, perm]), ("z", z)])),
                   columns=True)["c"] == longs
    held0 = recorded(batch([("a", a)]))
    timed = batch([("c", clocked(a, "t")), ("z", clocked(other[1], "t"))])
    assert set(held0) <= every(with_a_null_step(timed))
    mine = windows(with_a_null_step(batch([("c", a[:, ::-1])]), 39), columns=True)["c"]
    assert mine[:-1] == held[:-1] and mine[-1] not in held  # the copy's own last step null
