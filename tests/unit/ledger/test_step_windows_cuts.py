"""A step file's windows are a function of its steps alone: the same steps written in row
groups of other sizes give the same windows (rev38 finding 7: a record batch whose
observations were all null was skipped, so its steps left their episode when a row group held
nothing else, and stayed as null steps when it held others too)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.ledger.window_cache import Compared, compute


def _steps(episodes: list[tuple[int, list[bool]]], width: int, seed: int) -> pa.Table:
    """Episodes of the given null masks (True: the step's observation is null), observations
    of ``width`` float32 numbers a step (0: one number a step), distinct in every step."""
    rng = np.random.default_rng(seed)
    ids, obs = [], []
    for e, nulls in episodes:
        for null in nulls:
            ids.append(f"ep-{e}")
            row = rng.normal(size=max(width, 1)).astype(np.float32)
            obs.append(None if null else (float(row[0]) if not width else row.tolist()))
    kind = pa.float32() if not width else pa.list_(pa.float32())
    return pa.table({"episode_id": pa.array(ids, pa.string()), "obs": pa.array(obs, kind)})


def _same(a: Compared, b: Compared) -> None:
    assert (a.windows is None) == (b.windows is None)
    if a.windows is None or b.windows is None:
        return
    for name in ("episode_ids", "lengths", "episode", "start", "hashes"):
        x, y = getattr(a.windows, name), getattr(b.windows, name)
        assert np.array_equal(np.asarray(x), np.asarray(y)), name
    assert np.array_equal(a.few, b.few)
    for x, y in zip(a.orders or [], b.orders or [], strict=True):
        assert np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1])
    for p, q in ((a.columns, b.columns), (a.clocks, b.clocks), (a.still, b.still)):
        assert (p is None) == (q is None)
        for x, y in zip(p or (), q or (), strict=True):
            assert np.array_equal(x, y)


def _cut_everywhere(table: pa.Table, sizes: list[int], *, held: bool, where: Path) -> None:
    """The windows of ``table`` in one row group are those in row groups of each of
    ``sizes`` rows."""
    got = []
    for rows in [table.num_rows, *sizes]:
        path = where / f"steps-{rows}.parquet"
        pq.write_table(table, path, row_group_size=rows)
        got.append(compute(path, (False, True, held)))
    for other in got[1:]:
        _same(got[0], other)


_EPISODE = st.tuples(st.integers(1, 60), st.sampled_from(["none", "all", "run", "some"]))


@settings(max_examples=40)
@given(episodes=st.lists(_EPISODE, min_size=1, max_size=5), width=st.sampled_from([0, 3, 6]),
       sizes=st.lists(st.integers(1, 70), min_size=1, max_size=3), held=st.booleans(),
       seed=st.integers(0, 2**16))
def test_the_same_steps_in_other_row_groups_give_the_same_windows(
        tmp_path_factory: pytest.TempPathFactory, episodes: list[tuple[int, str]], width: int,
        sizes: list[int], held: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    masks = []
    for e, (n, kind) in enumerate(episodes):
        mask = [kind == "all"] * n
        if kind == "run":  # a run of null steps inside the episode
            a = int(rng.integers(0, n))
            b = int(rng.integers(a, n + 1))
            mask = [a <= i < b for i in range(n)]
        elif kind == "some":
            mask = (rng.random(n) < 0.3).tolist()
        masks.append((e, mask))
    table = _steps(masks, width, seed)
    _cut_everywhere(table, sizes, held=held, where=tmp_path_factory.mktemp("cuts"))


def test_an_all_null_row_group_inside_an_episode_is_null_steps_as_within_a_row_group(
        tmp_path: Path) -> None:
    """rev38's reproducer: 64 steps of one episode, steps 16 to 31 null, in one row group and
    in four: one episode of 64 steps, 49 windows, either way."""
    table = _steps([(0, [16 <= i < 32 for i in range(64)])], 4, 1)
    got = []
    for rows in (64, 16):
        pq.write_table(table, tmp_path / f"{rows}.parquet", row_group_size=rows)
        got.append(compute(tmp_path / f"{rows}.parquet", (False, True, False)))
    for c in got:
        assert c.windows is not None
        assert c.windows.lengths.tolist() == [64] and len(c.windows.hashes) == 49
    _same(got[0], got[1])


def test_steps_without_any_observation_have_no_windows(tmp_path: Path) -> None:
    """A file none of whose steps has an observation (a chat's) has none, in any cut."""
    table = _steps([(0, [True] * 40), (1, [True] * 20)], 3, 2)
    for rows in (60, 7):
        pq.write_table(table, tmp_path / f"{rows}.parquet", row_group_size=rows)
        c = compute(tmp_path / f"{rows}.parquet", (False, True, False))
        assert c.windows is not None and not len(c.windows.hashes)


_SIDE, _K = 17, 4  # frames of 17 x 17 (an image: more than 256 numbers) stacked 4 deep


def _stacked_steps(episodes: list[tuple[int, str]], seed: int) -> pa.Table:
    """Episodes of image observations (17, 17, 4) each of a kind: four frames stacked newest
    last or newest first, stacked with a null step or a step broken, or not stacked."""
    from trajledger.ledger.rollouts.schema import tensor_field

    rng = np.random.default_rng(seed)
    ids: list[str] = []
    obs: list[list[int] | None] = []
    for e, (n, kind) in enumerate(episodes):
        o = rng.integers(0, 256, (n + _K, _SIDE, _SIDE), dtype=np.uint8)
        for t in range(n):
            frames = [o[max(t + j - _K + 1, 0)] for j in range(_K)]  # oldest first
            if kind == "first":
                frames = frames[::-1]
            step = np.stack(frames, axis=-1)
            if kind == "random" or (kind == "broken" and t == n // 2):
                step = rng.integers(0, 256, step.shape, dtype=np.uint8)
            ids.append(f"ep-{e}")
            obs.append(None if kind == "null" and t == n // 2 else step.ravel().tolist())
    field = tensor_field("obs", pa.uint8(), (_SIDE, _SIDE, _K))
    return pa.table([pa.array(ids, pa.string()), pa.array(obs, field.type)],
                    schema=pa.schema([pa.field("episode_id", pa.string()), field]))


_STACKED = st.tuples(st.integers(1, 40), st.sampled_from(
    ["last", "last", "first", "null", "broken", "random"]))


@settings(max_examples=30, deadline=None)
@given(episodes=st.lists(_STACKED, min_size=1, max_size=5),
       sizes=st.lists(st.integers(1, 50), min_size=1, max_size=3), seed=st.integers(0, 2**16))
def test_the_stack_windows_of_the_same_steps_in_other_row_groups_are_the_same(
        tmp_path_factory: pytest.TempPathFactory, episodes: list[tuple[int, str]],
        sizes: list[int], seed: int) -> None:
    """frames43 (chat42's Left): the windows over a stack's newest frames were decided per
    record batch: none for a batch holding a null step, the way most of its steps took, its
    first step never compared with the step before; so an episode's depended on the episodes
    that shared its row group."""
    table = _stacked_steps(episodes, seed)
    _cut_everywhere(table, sizes, held=False, where=tmp_path_factory.mktemp("stacks"))


def test_each_stacked_episode_of_at_least_a_window_has_its_stack_windows(tmp_path: Path) -> None:
    """Beside a null step, a broken stack, a stack the other way and steps not stacked, in one
    row group: each stacked episode its windows over its newest frames (the order 0 and the
    image ones), the others none."""
    kinds = ["last", "null", "first", "random", "last", "broken"]
    table = _stacked_steps([(20, k) for k in kinds], 3)
    pq.write_table(table, tmp_path / "s.parquet")
    c = compute(tmp_path / "s.parquet", (False, True, False))
    assert c.windows is not None and c.still is not None
    per_episode = np.maximum(c.windows.lengths - 15, 0)
    episode = np.repeat(np.arange(len(per_episode)), per_episode)[c.still[0]]
    assert sorted(set(episode.tolist())) == [0, 2, 4]
    assert len(c.still[0]) == 3 * 5 and c.still[2].all() and c.still[1].all()


def _ragged_steps(episodes: list[tuple[int, str]], seed: int) -> pa.Table:
    """Episodes of observations of 3 or 5 numbers a step, or of both (a ragged episode), some
    steps null."""
    rng = np.random.default_rng(seed)
    ids: list[str] = []
    obs: list[list[float] | None] = []
    for e, (n, kind) in enumerate(episodes):
        walk = np.cumsum(rng.normal(size=(n, 5)), axis=0).astype(np.float32)
        for t in range(n):
            width = {"3": 3, "5": 5, "ragged": 3 + 2 * (t % 2), "null": 3}[kind]
            ids.append(f"ep-{e}")
            obs.append(None if kind == "null" and t % 7 == 3 else walk[t, :width].tolist())
    return pa.table({"episode_id": pa.array(ids, pa.string()),
                     "obs": pa.array(obs, pa.list_(pa.float32()))})


@settings(max_examples=30, deadline=None)
@given(episodes=st.lists(st.tuples(st.integers(1, 60), st.sampled_from(
           ["3", "5", "ragged", "null"])), min_size=1, max_size=5),
       sizes=st.lists(st.integers(1, 70), min_size=1, max_size=3), held=st.booleans(),
       seed=st.integers(0, 2**16))
def test_the_columns_windows_of_episodes_of_other_widths_do_not_depend_on_the_cut(
        tmp_path_factory: pytest.TempPathFactory, episodes: list[tuple[int, str]],
        sizes: list[int], held: bool, seed: int) -> None:
    """frames43 (chat42's Left): a record batch holding observations of two widths had no
    `COLUMNS` windows (nor clocks), for any episode in it, and an episode that ended where a
    batch of another width began lost its."""
    table = _ragged_steps(episodes, seed)
    _cut_everywhere(table, sizes, held=held, where=tmp_path_factory.mktemp("ragged"))


def test_an_episode_of_one_width_beside_another_has_its_columns_windows(tmp_path: Path) -> None:
    """Alone, or in one row group with an episode of another width and a ragged one: the same
    `COLUMNS` windows (30 steps: 15 windows, each with a hash)."""
    path = tmp_path / "s.parquet"
    pq.write_table(_ragged_steps([(30, "3")], 5), path)
    alone = compute(path, (False, True, False))
    pq.write_table(_ragged_steps([(30, "3"), (30, "5"), (30, "ragged")], 5), path)
    beside = compute(path, (False, True, False))
    assert alone.columns is not None and beside.columns is not None
    assert alone.columns[0].all() and len(alone.columns[0]) == 15
    assert np.array_equal(beside.columns[0][:15], alone.columns[0])
    assert beside.columns[0][15:30].all() and not beside.columns[0][30:].any()
