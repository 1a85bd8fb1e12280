"""Small helpers over Arrow arrays, shared by normalising, deriving episodes and validating.

Scope: what kind of Arrow type a column has (string-like, binary-like, number), a column as a
numpy vector with nulls filled, and the rows of a string column whose bytes are not UTF-8.
Non-scope: any judgement of the values (``validate.py``) or conversion (``normalise.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "bools",
    "floats",
    "invalid_utf8_rows",
    "is_binaryish",
    "is_number",
    "is_stringish",
    "numbers",
]


def is_stringish(t: pa.DataType) -> bool:
    """A string, large string or string view type."""
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def is_binaryish(t: pa.DataType) -> bool:
    """A binary, large binary, fixed-size binary or binary view type."""
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    )


def is_number(t: pa.DataType) -> bool:
    """An integer or floating-point type."""
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t))


def bools(arr: pa.Array, null_as: bool = False) -> npt.NDArray[np.bool_]:
    """A boolean array as numpy, nulls as ``null_as``."""
    filled = pc.fill_null(arr, null_as) if arr.null_count else arr
    if (
        not isinstance(filled, pa.Array)
        or filled.null_count
        or not pa.types.is_boolean(filled.type)
        or filled.buffers()[1] is None
    ):
        return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=bool)
    # The bits unpacked: a tenth of ``to_numpy``'s time, which converts value by value.
    bits = np.frombuffer(filled.buffers()[1], dtype=np.uint8)
    unpacked = np.unpackbits(bits, count=filled.offset + len(filled), bitorder="little")
    return unpacked[filled.offset :].view(bool)


def numbers(arr: pa.Array, null_as: float | int = 0) -> npt.NDArray[Any]:
    """A number array as numpy (its own dtype), nulls as ``null_as``."""
    filled = pc.fill_null(arr, pa.scalar(null_as, arr.type)) if arr.null_count else arr
    out: npt.NDArray[Any] = filled.to_numpy(zero_copy_only=False)
    return out


def floats(arr: pa.Array) -> npt.NDArray[np.float64]:
    """A number array as float64 numpy, nulls as 0."""
    return np.asarray(numbers(arr, 0), dtype=np.float64)


def invalid_utf8_rows(arr: pa.Array) -> npt.NDArray[np.int64]:
    """Find the rows of a string array whose bytes are not UTF-8.

    pyarrow reads Parquet and Arrow string columns without checking their bytes, and decoding
    such a value (``as_py``) raises, so code that reads values checks them with this first.

    Args:
        arr: a string array.

    Returns:
        The offending row indices, ascending; empty when every value is UTF-8.
    """
    try:
        arr.validate(full=True)  # checks the UTF-8 of every value, in C
    except pa.ArrowInvalid:
        pass
    else:
        return np.zeros(0, dtype=np.int64)
    bad = []
    for i, value in enumerate(arr.view(pa.binary()).to_pylist()):
        if value is None:
            continue
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(i)
    return np.asarray(bad, dtype=np.int64)
