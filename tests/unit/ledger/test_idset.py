"""`idset.IdSet` decides as a dict of ids does (issue 21: the fast paths decide as the slow
ones did), in any sequence of adds of any size (small ones waiting in ``_small``, large ones
made runs straight away, runs merged), with ids that are not strings (bytes, numbers, a ``str``
subclass such as numpy's), with hashes that collide, and ``maybe_any`` only ever saying False
when no id given is held or given twice."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.ledger.rollouts import idset
from trajledger.ledger.rollouts.idset import IdSet


class Tagged(str):
    """A str subclass (as numpy's ``np.str_``): a dict takes it for the equal str."""


def _id(n: int, kind: int) -> object:
    text = f"ep-{n}"
    return [text, text, text, text.encode() + b"\xff", n, np.str_(text), Tagged(text)][kind]


IDS = st.builds(_id, st.integers(0, 300), st.integers(0, 6))
STRINGS = st.builds(lambda n: f"ep-{n}", st.integers(0, 300))
SIZES = st.one_of(st.integers(0, 3), st.integers(60, 70), st.integers(100, 260))
HASHES = {
    "hash": hash,
    "three": lambda s: len(str(s)) % 3,  # most ids collide with others
    "one": lambda s: 0,  # every id collides
    "extremes": lambda s: [-(1 << 63), (1 << 63) - 1, 0][hash(s) % 3],
}


@settings(max_examples=60, deadline=None)
@given(
    hashing=st.sampled_from(sorted(HASHES)),
    small=st.sampled_from([3, 64, IdSet.SMALL]),
    steps=st.lists(
        st.tuples(SIZES, st.randoms(use_true_random=False), st.lists(STRINGS, max_size=80)),
        max_size=12,
    ),
)
def test_idset_decides_as_a_dict(
    hashing: str, small: int, steps: list[tuple[int, Any, list[str]]]
) -> None:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(idset, "_hash", HASHES[hashing])
        m.setattr(IdSet, "SMALL", small)
        model: dict[object, int] = {}
        ids = IdSet()
        for size, rnd, probe in steps:
            batch = [_id(rnd.randint(0, 300), rnd.choice([0, 0, 0, 0, 1, 2, 3, 4, 5, 6]))
                     for _ in range(size)]
            # (1) maybe_any: False proves none is held and none is given twice.
            for strings in (probe, [e for e in batch if type(e) is str]):
                if not ids.maybe_any(strings):
                    assert not any(e in model for e in strings)
                    assert len(set(strings)) == len(strings)
            # (2) get and `in` agree with the dict, for the batch and for the probes.
            for e in [*batch, *probe]:
                assert ids.get(e) == model.get(e), e
                assert (e in ids) == (e in model), e
            # (3) add what is new (the callers' contract), with a number each or one for all.
            fresh = list(dict.fromkeys(e for e in batch if e not in model))
            numbers: list[int] | int = [rnd.randint(-(1 << 40), 1 << 40) for _ in fresh]
            if rnd.random() < 0.3:
                numbers = rnd.randint(0, 9)
            ids.add(fresh, numbers)
            model.update(zip(fresh, [numbers] * len(fresh) if isinstance(numbers, int)
                             else numbers, strict=True))
            assert len(ids) == len(model)
        for n in range(301):
            for kind in range(7):
                e = _id(n, kind)
                assert ids.get(e) == model.get(e), e


def test_a_str_subclass_is_the_equal_str() -> None:
    """An id added as ``np.str_`` (a str subclass) is found by the equal str, and the other
    way round, as in a dict; the set knows it as held in `maybe_any`."""
    for given_as, asked_as in ((np.str_("a"), "a"), ("a", np.str_("a")), (Tagged("b"), "b")):
        for size in (1, 100):  # a small add, and a run
            ids = IdSet()
            others = [f"x{i}" for i in range(size - 1)]
            ids.add([given_as, *others], 7)
            assert ids.get(asked_as) == 7 and asked_as in ids
            assert ids.maybe_any([str(asked_as)])
            assert len(ids) == size
