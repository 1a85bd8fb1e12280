"""`record`'s check of steps against the environment's declared spaces (`space_check`).

The bulk check over Arrow columns decides as Gymnasium's ``Space.contains`` does, value by
value, for values of the space's dtype (the differential tests), and takes other number types
by the Gymnasium recorder's rule (`exact_cast`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajledger.ledger.rollouts.schema import SHAPE_KEY
from trajledger.ledger.rollouts.space_check import SpaceCheck, SpaceMismatchError, exact_cast
from trajledger.ledger.rollouts.space_values import in_space_order, space_column, stack_rows
from trajledger.ledger.rollouts.spaces import space_to_json

S = gym.spaces
SPACES: dict[str, gym.Space[Any]] = {
    "box": S.Box(-1.0, 1.0, (3,), np.float32),
    "cartpole": S.Box(np.array([-4.8, -np.inf, -0.42, -np.inf], np.float32),
                      np.array([4.8, np.inf, 0.42, np.inf], np.float32), dtype=np.float32),
    "image": S.Box(0, 200, (2, 2), np.uint8),
    "int64": S.Box(-(2**62), 2**62, (2,), np.int64),
    "float16": S.Box(-10, 10, (), np.float16),
    "discrete": S.Discrete(3, start=-1),
    "multidiscrete": S.MultiDiscrete([3, 4], start=[1, -2]),
    "multibinary": S.MultiBinary(3),
    "text": S.Text(4, min_length=1, charset="abc"),
    "dict": S.Dict({"pos": S.Box(-1.0, 1.0, (2,), np.float64), "n": S.Discrete(2)}),
    "tuple": S.Tuple([S.Discrete(4), S.Box(0.0, np.inf, (1,), np.float32)]),
}  # fmt: skip


def table(space: gym.Space[Any], rows: list[Any], column: str = "obs") -> pa.Table:
    """Steps 0..n-1 of episode "e" holding ``rows`` in ``column``, as `record` writes them."""
    values, field = space_column(in_space_order(space, stack_rows(rows, column)), len(rows),
                                 column)  # fmt: skip
    steps = pa.table({"episode_id": ["e"] * len(rows), "step": list(range(len(rows)))})
    return steps.append_column(field, values)


def check(space: gym.Space[Any], steps: pa.Table, column: str = "obs") -> None:
    key = "observationSpace" if column == "obs" else "actionSpace"
    SpaceCheck("env@1", {key: space_to_json(space)})(steps)


def refused_at(space: gym.Space[Any], steps: pa.Table, column: str = "obs") -> int | None:
    try:
        check(space, steps, column)
    except SpaceMismatchError as e:
        return int(str(e).split("step ", 1)[1].split(",", 1)[0])
    return None


def broken(space: gym.Space[Any], value: Any, rng: np.random.Generator) -> Any:
    """``value`` with one member or element moved where the space may not hold it (outside the
    bounds or range, NaN, an infinity, a character not allowed, a length not allowed)."""
    if isinstance(space, S.Dict):
        key = list(space.spaces)[rng.integers(len(space.spaces))]
        return {**value, key: broken(space.spaces[key], value[key], rng)}
    if isinstance(space, S.Tuple):
        i = int(rng.integers(len(space.spaces)))
        return tuple(broken(s, v, rng) if n == i else v
                     for n, (s, v) in enumerate(zip(space.spaces, value, strict=True)))
    if isinstance(space, S.Text):
        return str(rng.choice(["", "abcab", value + "z", "d"]))
    value = np.array(value, dtype=space.dtype)
    flat = value.reshape(-1)
    i = int(rng.integers(flat.size))
    if isinstance(space, S.Box):
        low, high = space.low.reshape(-1)[i], space.high.reshape(-1)[i]
        choices = [low, high]
        if space.dtype.kind == "f":
            choices += [np.nan, np.inf, -np.inf, np.nextafter(high, np.inf, dtype=space.dtype),
                        np.nextafter(low, -np.inf, dtype=space.dtype)]
        else:
            choices += [low - 1 if low > np.iinfo(space.dtype).min else low,
                        high + 1 if high < np.iinfo(space.dtype).max else high]
        flat[i] = rng.choice(np.array(choices, dtype=space.dtype))
    elif isinstance(space, S.Discrete):
        return np.int64(rng.choice([space.start - 1, space.start + space.n, space.start]))
    elif isinstance(space, S.MultiDiscrete):
        flat[i] = rng.choice([space.start.reshape(-1)[i] - 1,
                              space.start.reshape(-1)[i] + space.nvec.reshape(-1)[i]])
    else:  # MultiBinary
        flat[i] = 2
    return value


@pytest.mark.parametrize("name", sorted(SPACES))
@pytest.mark.parametrize("seed", range(6))
def test_the_bulk_check_decides_as_gymnasium_contains(name: str, seed: int) -> None:
    """Values of the space's dtype, some broken: refused at the first row ``contains`` refuses
    (none: accepted)."""
    space = SPACES[name]
    space.seed(seed)
    rng = np.random.default_rng(seed)
    rows = [space.sample() for _ in range(40)]
    for i in rng.choice(40, size=int(rng.integers(0, 4)), replace=False):
        rows[i] = broken(space, rows[i], rng)
    rows = [in_space_order(space, stack_rows([r]))  # the values as the column holds them
            for r in rows]
    got = refused_at(space, table(space, [_one(space, r) for r in rows]))
    want = next((i for i, r in enumerate(rows) if not space.contains(_one(space, r))), None)
    assert got == want


def _one(space: gym.Space[Any], stacked: Any) -> Any:
    """The single value of a stack of one (what ``contains`` is given)."""
    if isinstance(space, S.Dict):
        return {k: _one(s, stacked[k]) for k, s in space.spaces.items()}
    if isinstance(space, S.Tuple):
        return tuple(_one(s, v) for s, v in zip(space.spaces, stacked, strict=True))
    if isinstance(space, S.Text):
        return stacked[0]
    return stacked[0]


@pytest.mark.parametrize(
    ("space", "values", "ok"),
    [
        (S.Box(-1.0, 1.0, (1,), np.float32), pa.array([[0.5]], pa.list_(pa.float64())), True),
        (S.Box(-1.0, 1.0, (1,), np.float32), pa.array([[0.1]], pa.list_(pa.float64())), True),
        (S.Box(-np.inf, np.inf, (1,), np.float32), pa.array([[1e40]], pa.list_(pa.float64())),
         False),
        (S.Box(-5, 5, (1,), np.float32), pa.array([[3]], pa.list_(pa.int64())), True),
        (S.Discrete(2), pa.array([[1.0]], pa.list_(pa.float32())), True),
        (S.Discrete(2), pa.array([[0.5]], pa.list_(pa.float32())), False),
        (S.Box(0, 255, (1,), np.uint8), pa.array([[-1]], pa.list_(pa.int16())), False),
        (S.MultiBinary(2), pa.array([[True, False]], pa.list_(pa.bool_())), True),
    ],
    ids=["float64-0.5", "float64-0.1", "float64-beyond-float32", "int-in-float",
         "float-1.0-discrete", "float-0.5-discrete", "negative-uint8", "bool-multibinary"],
)
def test_other_number_types_count_when_the_spaces_dtype_holds_them(
    space: gym.Space[Any], values: pa.Array, ok: bool
) -> None:
    """The Gymnasium recorder's rule (`exact_cast`), for files whose column type is not the
    space's: the value as the space's dtype, unchanged; but a float of another width in a float
    Box, which the file keeps (float64 0.1 in a float32 Box), unless beyond its range."""
    steps = pa.table({"episode_id": ["e"], "step": [0], "obs": values})
    assert (refused_at(space, steps) is None) is ok


def test_exact_cast_keeps_nan_and_names_what_changes() -> None:
    given = np.array([0.5, np.nan, 0.1, 1e40])
    cast, changed = exact_cast(given, np.dtype(np.float32)) or (None, None)
    assert cast is not None and cast.dtype == np.float32 and np.isnan(cast[1])
    assert changed.tolist() == [False, False, True, True]
    assert exact_cast(np.array(["a"]), np.dtype(np.float32)) is None


def test_the_refusal_names_the_step_the_field_and_both_sides() -> None:
    """One line: episode, step, field, what the environment declares, what the step holds."""
    space = SPACES["cartpole"]
    steps = pa.table({"episode_id": ["a", "a", "b"], "step": [0, 1, 0],
                      "obs": [[0.0] * 4, [0.0] * 4, [0.0, 0.0, 0.0]]})  # fmt: skip
    with pytest.raises(SpaceMismatchError) as e:
        check(space, steps)
    assert str(e.value) == (
        'episode "b", step 0, obs: environment env@1 declares a Box of shape [4] (float32), '
        "4 value(s), the step holds 3 value(s); nothing was recorded: record these rollouts "
        "under the environment they were played in (--env), or register one whose spaces "
        "they fit"
    )
    steps = pa.table({"episode_id": ["a"], "step": [7], "action": [[5]]})
    with pytest.raises(SpaceMismatchError, match=r'^episode "a", step 7, action: environment '
                       r"env@1 declares Discrete\(2, start=0\), the step holds values outside "
                       r"it, \[5\];"):  # fmt: skip
        check(S.Discrete(2), steps, "action")


def test_rows_are_counted_across_chunks_and_nulls_are_not_checked() -> None:
    space = S.Box(-1.0, 1.0, (2,), np.float32)
    good = pa.array([[0.0, 0.0], None, [1.0, -1.0]], pa.list_(pa.float32()))
    bad = pa.array([None, [0.0, 2.0]], pa.list_(pa.float32()))
    steps = pa.table({"episode_id": pa.chunked_array([["e"] * 3, ["e"] * 2]),
                      "step": pa.chunked_array([[0, 1, 2], [3, 4]]),
                      "obs": pa.chunked_array([good, bad])})  # fmt: skip
    assert refused_at(space, steps) == 4
    assert refused_at(space, steps.slice(0, 4)) is None


def test_a_declared_shape_other_than_the_spaces_is_refused() -> None:
    """A tensor column of shape [2, 2] is not a Box of shape [4], though it holds 4 values."""
    field = pa.field("obs", pa.list_(pa.float32()), metadata={SHAPE_KEY: b"[2, 2]"})
    steps = pa.table({"episode_id": ["e"], "step": [0]}).append_column(
        field, pa.array([[0.0] * 4], pa.list_(pa.float32())))  # fmt: skip
    assert refused_at(SPACES["cartpole"], steps) == 0
    assert refused_at(S.Box(-1.0, 1.0, (2, 2), np.float32), steps) is None


def test_a_dict_of_other_members_and_a_box_given_a_struct_are_refused() -> None:
    other = S.Dict({"pos": S.Box(-1.0, 1.0, (2,), np.float64), "m": S.Discrete(2)})
    steps = table(other, [other.sample()])
    assert refused_at(SPACES["dict"], steps) == 0
    assert refused_at(SPACES["box"], steps) == 0


def test_an_environment_without_spaces_checks_nothing() -> None:
    assert not SpaceCheck("env@1", {})
    assert not SpaceCheck("env@1", {"observationSpace": None})


# -- rev37: nested and edge spaces, drawn (hypothesis) ------------------------------------------

LEAVES = [
    S.Box(-np.inf, np.inf, (2,), np.float32),
    S.Box(np.array([-np.inf, 0.0], np.float32), np.array([0.0, np.inf], np.float32)),
    S.Box(np.iinfo(np.int64).min, np.iinfo(np.int64).max, (2,), np.int64),
    S.Box(-(2**62), 2**62 + 1, (1,), np.int64),
    S.Box(-65504, 65504, (2,), np.float16),
    S.Box(0.0, 1.0, (), np.float64),
    S.Box(0, 255, (1, 2, 1), np.uint8),
    S.Discrete(2**40, start=-(2**39)),
    S.MultiDiscrete([[2, 3], [4, 5]], start=[[-1, 0], [7, -3]]),
    S.MultiBinary([2, 2]),
    S.Text(3, min_length=0, charset="]^-\\a\u00e9\U0001f600"),
    S.Text(5, min_length=2, charset="x\n"),
]


def spaces(depth: int = 2) -> st.SearchStrategy[gym.Space[Any]]:
    leaf = st.sampled_from(LEAVES)
    if not depth:
        return leaf
    inner = spaces(depth - 1)
    return st.one_of(
        leaf,
        st.lists(inner, min_size=1, max_size=3).map(lambda m: S.Tuple(m)),
        st.lists(inner, min_size=1, max_size=3).map(
            lambda m: S.Dict({f"k{i}": s for i, s in enumerate(m)})),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(space=spaces(), seed=st.integers(0, 2**16), broken_rows=st.sets(
    st.integers(0, 11), max_size=3))
def test_nested_and_edge_spaces_decide_as_gymnasium_contains(
    space: gym.Space[Any], seed: int, broken_rows: set[int]
) -> None:
    """rev37: Dict in Tuple and Tuple in Dict, Boxes with infinite or int64-edge bounds,
    float16, an empty shape, a 2-D MultiDiscrete with starts, MultiBinary of shape [2, 2], Text
    with regular-expression characters, a newline and a character beyond the BMP in its
    charset: the bulk check refuses at the first row ``contains`` refuses, none otherwise."""
    space.seed(seed)
    rng = np.random.default_rng(seed)
    rows = [space.sample() for _ in range(12)]
    for i in broken_rows:
        rows[i] = broken(space, rows[i], rng)
    rows = [in_space_order(space, stack_rows([r])) for r in rows]
    got = refused_at(space, table(space, [_one(space, r) for r in rows]))
    want = next((i for i, r in enumerate(rows) if not space.contains(_one(space, r))), None)
    assert got == want


@pytest.mark.parametrize("kind", ["Sequence", "Graph", "OneOf", "box"])
def test_a_space_the_check_does_not_know_refuses_every_record(kind: str) -> None:
    """rev37, decided: an environment's record declaring a space the check does not know (one
    `spaces.space_to_json` does not write, so another tree's or a hand-made record, imported)
    refuses every `record` against it, naming it; it never passes unchecked."""
    with pytest.raises(SpaceMismatchError, match=rf"^environment env@1: its observationSpace "
                       rf"cannot be read \(space type '{kind}' is unknown\): register the "
                       "environment again as a new version$"):
        SpaceCheck("env@1", {"observationSpace": {"type": kind, "space": {"type": "Box"}}})
