"""A column that stands throughout an episode (a task id, a bias feature, a clock too slow for
float32) added to a copy of a held-out episode (copy35; rev31's Left): the train side's
windows without their episode's standing columns are the held ones; the held side holds no
such window (`standing_columns`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from trajledger.ledger.standing_columns import left_out, still_columns
from trajledger.ledger.step_windows import COLUMNS, WINDOW, iter_marked, iter_windows


def batch(episodes: list[tuple[str, np.ndarray]], dtype: pa.DataType | None = None
          ) -> pa.RecordBatch:
    ids = [e for e, o in episodes for _ in range(len(o))]
    flat = np.vstack([o for _, o in episodes])
    obs = pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel(), dtype or pa.float32()),
                                            flat.shape[1])
    return pa.record_batch({"episode_id": pa.array(ids), "obs": obs})


def dict_batch(members: dict[str, np.ndarray], episode: str) -> pa.RecordBatch:
    obs = pa.StructArray.from_arrays(
        [pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), v.shape[1])
         for v in members.values()], list(members))
    n = len(next(iter(members.values())))
    return pa.record_batch({"episode_id": pa.array([episode] * n), "obs": obs})


def walk(seed: int, n: int = 60, width: int = 4) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).normal(size=(n, width)), axis=0)


def held_windows(*batches: pa.RecordBatch, columns: bool | None = None) -> dict[str, set[int]]:
    """Each held episode's windows (every order; ``columns``: `COLUMNS` ones only, or none)."""
    out: dict[str, set[int]] = {}
    for w in iter_windows(batches, held=True):
        if columns is not None and (w.order >= COLUMNS) != columns:
            continue
        for e, h in zip(w.episode.tolist(), w.hashes.tolist(), strict=True):
            out.setdefault(w.episode_ids[e], set()).add(h)
    return out


def train_windows(*batches: pa.RecordBatch) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for w in iter_windows(batches):
        for e, h in zip(w.episode.tolist(), w.hashes.tolist(), strict=True):
            out.setdefault(w.episode_ids[e], set()).add(h)
    return out


def stand(o: np.ndarray, value: float, at: int | None = None) -> np.ndarray:
    return np.insert(o, o.shape[1] if at is None else at, value, axis=1)


T = np.arange(60, dtype=np.float64)[:, None]
COPIES = {
    "a task id appended": lambda o: stand(o, 7.0),
    "0 appended": lambda o: stand(o, 0.0),
    "a bias first": lambda o: stand(o, 1.0, 0),
    "two, between the columns": lambda o: stand(stand(o, 7.0, 1), -2.5, 3),
    "a one-hot task id of 10": lambda o: np.hstack((o, np.eye(10)[np.full(len(o), 3)])),
    "a task id and the step number": lambda o: np.hstack((stand(o, 7.0), T[: len(o)])),
    "a clock too slow for float32 (1e5 + t / 500)": lambda o: np.hstack((o, 1e5 + T / 500)),
    "a time stamp (1.7e9 + 0.02 t)": lambda o: np.hstack((o, 1.7e9 + 0.02 * T)),
    "a task id, first 10 steps dropped": lambda o: stand(o, 7.0)[10:],
    "a task id, reversed": lambda o: stand(o, 7.0)[::-1],
    "a task id, every other step": lambda o: stand(o, 7.0)[::2],
}
PERMUTED = {  # `COLUMNS`: the held set of series holds no standing one
    "a task id, columns permuted": lambda o: stand(o, 7.0)[:, [2, 4, 0, 3, 1]],
    "a bias, columns permuted, first 5 steps dropped": lambda o: stand(o, 1.0, 2)[5:, ::-1],
}


@pytest.mark.parametrize("name", [*COPIES, *PERMUTED])
def test_a_copy_with_a_standing_column_added_holds_the_held_windows(name: str) -> None:
    """Each copy shares windows with its held episode (of three in one record batch), none
    with another; cut across record batches alike. Every window of the train side's order 0
    copy without its standing columns (not reversed or subsampled) is a held one."""
    held = [walk(s) for s in (1, 2, 3)]
    hw = held_windows(batch([(f"h{i}", o) for i, o in enumerate(held)]),
                      columns=name in PERMUTED)
    f = {**COPIES, **PERMUTED}[name]
    copies = [(f"c{i}", f(o)) for i, o in enumerate(held)]
    flat = batch(copies)
    for got in (train_windows(flat), train_windows(flat.slice(0, 70), flat.slice(70))):
        for i in range(3):
            assert got[f"c{i}"] & hw[f"h{i}"], name
            assert not got[f"c{i}"] & (hw[f"h{(i + 1) % 3}"] | hw[f"h{(i + 2) % 3}"])
    if name in ("a task id appended", "0 appended", "a bias first"):
        still = [h for w in iter_windows([flat]) if w.still and w.order == 0
                 for h in w.hashes.tolist()]
        assert len(still) == 3 * (60 - WINDOW + 1) and set(still) <= set().union(*hw.values())


def test_a_dict_member_that_stands_is_left_out() -> None:
    """A Dict space's member ``task`` added between ``pos`` and ``vel``: its members are
    renumbered as without it (their salts), order 0 and `COLUMNS`."""
    a = walk(4)
    held = held_windows(dict_batch({"pos": a, "vel": a[:, :3] * 2}, "h"))["h"]
    for members in ({"pos": a, "task": np.full((60, 1), 3.0), "vel": a[:, :3] * 2},
                    {"task": np.full((60, 2), 3.0), "pos": a, "vel": a[:, :3] * 2}):
        got = train_windows(dict_batch(members, "c"))["c"]
        assert len(held & got) >= 2 * (60 - WINDOW + 1)  # order 0 and `COLUMNS`


def test_standing_columns_make_no_match_out_of_nothing() -> None:
    """Only the train side leaves its standing columns out: held agents walking along one row
    of a grid (x, y) share no window with train agents walking the same way along another
    row (the windows without y would be equal), nor unrelated one-hot walks (cells not
    visited stand) or walks with another task id; the held side holds no such window."""
    rng = np.random.default_rng(0)
    xs = [np.clip(np.cumsum(rng.choice([-1, 1], 60)), -9, 9) + 10 for _ in range(40)]
    rows = batch([(f"h{i}", np.stack((x, np.full(60, 3.0), x % 3), 1)) for i, x in enumerate(xs)])
    other = batch([(f"t{i}", np.stack((x, np.full(60, 5.0), x % 3), 1)) for i, x in enumerate(xs)])
    assert not {h for w in iter_windows([rows], held=True) if w.still for h in w.hashes}
    held = set().union(*held_windows(rows).values())
    assert held and not held & set().union(*train_windows(other).values())
    assert not [w for w, _ in iter_marked([rows]) if w.still and len(w.hashes) and not _.all()]
    cells = [rng.integers(0, 36, 20)[rng.integers(0, 20, 80)] for _ in range(40)]
    one_hot = [np.eye(36)[c] for c in cells]
    held = set().union(*held_windows(batch([(f"h{i}", o) for i, o in enumerate(one_hot[:20])]
                                           )).values())
    train = train_windows(batch([(f"t{i}", o) for i, o in enumerate(one_hot[20:])]))
    assert held and not held & set().union(*train.values())
    walks = [walk(s, 60, 3) for s in range(20)]
    held = set().union(*held_windows(batch([(f"h{i}", stand(o, 1.0)) for i, o in
                                            enumerate(walks[:10])])).values())
    train = train_windows(batch([(f"t{i}", stand(o, 2.0)) for i, o in enumerate(walks[10:])]))
    assert held and not held & set().union(*train.values())


def test_still_columns_are_the_columns_of_one_value_an_episode() -> None:
    """`still_columns` against its definition: per episode of at least ``window`` steps, the
    columns of one value in every step, where at least 2 others are not."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        width = int(rng.integers(1, 7))
        lengths = rng.integers(1, 40, int(rng.integers(1, 6))).astype(np.int64)
        q = rng.integers(0, 3, (int(lengths.sum()), width)).astype(np.uint32)
        at = np.cumsum(lengths) - lengths
        for e, n in enumerate(lengths.tolist()):
            for c in range(width):
                if rng.random() < 0.4:
                    q[at[e] : at[e] + n, c] = rng.integers(0, 3)
        got = still_columns(q, lengths, WINDOW)
        want = np.zeros((len(lengths), width), dtype=bool)
        for e, n in enumerate(lengths.tolist()):
            rows = q[at[e] : at[e] + n]
            one = (rows == rows[0]).all(axis=0)
            if n >= WINDOW and width >= 3 and (~one).sum() >= 2:
                want[e] = one
        assert (got is None and not want.any()) or np.array_equal(got, want)


def test_left_out_in_order_0_and_columns() -> None:
    """`left_out`: clocks and standing columns in order 0; in `COLUMNS` not those of 0; none
    where fewer than 2 columns would be left, or nothing stands."""
    clock = np.array([[0, 0, 0, 0, 1], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0], [1, 1, 0, 1, 0]], bool)
    still = np.array([[1, 0, 0, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 0], [0, 0, 1, 0, 0]], bool)
    nonzero = np.array([[1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]],
                       bool)
    got = left_out(clock, still, nonzero).astype(int).tolist()
    assert got == [[1, 0, 0, 0, 1, 1, 0, 0, 0, 1],  # a task id and a clock
                   [0, 0, 0, 1, 1, 0, 0, 0, 0, 0],  # a standing 0: kept in `COLUMNS`
                   [0] * 10,  # nothing stands: the clock windows' alone
                   [0] * 10]  # 2 clocks and 1 standing of 5: fewer than 2 left
