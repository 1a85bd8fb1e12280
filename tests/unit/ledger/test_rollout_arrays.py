"""`ledger.rollouts.arrays.bools`: the unpacked bits equal Arrow's own conversion."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from trajledger.ledger.rollouts.arrays import bools


@pytest.mark.parametrize("null_as", [False, True])
def test_bools_equal_arrows_conversion_for_any_slice(null_as: bool) -> None:
    rng = np.random.default_rng(7)
    values = (rng.random(203) < 0.4).tolist()
    with_nulls = [None if i % 11 == 3 else v for i, v in enumerate(values)]
    for data in (values, with_nulls):
        arr = pa.array(data, pa.bool_())
        for lo, hi in ((0, 203), (1, 203), (5, 6), (9, 9), (13, 190), (0, 0)):
            part = arr.slice(lo, hi - lo)
            want = [null_as if v is None else v for v in part.to_pylist()]
            got = bools(part, null_as)
            assert got.dtype == np.bool_
            assert got.tolist() == want


def test_bools_of_other_inputs() -> None:
    chunked = pa.chunked_array([[True, None], [False]])
    assert bools(chunked).tolist() == [True, False, False]  # type: ignore[arg-type]
    assert bools(pa.nulls(3, pa.bool_()), True).tolist() == [True, True, True]
