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
    where = tmp_path_factory.mktemp("cuts")
    got = []
    for rows in [table.num_rows, *sizes]:
        path = where / f"steps-{rows}.parquet"
        pq.write_table(table, path, row_group_size=rows)
        got.append(compute(path, (False, True, held)))
    for other in got[1:]:
        _same(got[0], other)


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
