"""Clock columns (clock33, rev31; moved out of ``step_windows`` by copy35 to keep it under
1,000 lines): per run of a window's rows, the columns whose values step evenly (the step
number Gymnasium's ``TimeAwareObservation`` adds, ``t / 500``, the time left, a time stamp).

Scope: `clock_columns` (the definition), `maybe_clocks` (the columns worth looking at),
`clock_sets` (the distinct sets of them; moved from ``step_windows`` by rows36).
Non-scope: the windows without them (``step_windows._clocked``).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["clock_columns", "clock_sets", "maybe_clocks"]

_CLOCK_ROUNDING = 2.0**-20  # of a value's size: 8 times float32's rounding (2**-24, 3 values)
_STANDING = 2.0**-25  # of two values' size: a step below half a float32 unit is no step (rev31)


def clock_columns(raw: npt.NDArray[np.float64], window: int) -> npt.NDArray[np.bool_]:
    """Per run of ``window`` rows of ``raw`` (a row a step; ``len(raw) - window + 1`` runs) and
    column: whether the column is a clock over the run: its values an arithmetic progression
    to within float32 rounding (`_CLOCK_ROUNDING` of their size), increasing or decreasing,
    never standing (each step more than half a float32 unit, `_STANDING`: a step smaller
    than the rounding, as of ``1e6 + t``, was taken for standing, rev31), each the sign of the
    next (the step number, ``t / 500``, the time left: Gymnasium's ``TimeAwareObservation``;
    a time stamp). Only the columns `maybe_clocks` gives are looked at."""
    runs = len(raw) - window + 1
    out = np.zeros((max(runs, 0), raw.shape[1]), dtype=bool)
    maybe = maybe_clocks(raw, window)
    if runs < 1 or not len(maybe):
        return out
    r = raw[:, maybe]
    with np.errstate(invalid="ignore", over="ignore"):
        size = np.abs(r)
        d = np.diff(r, axis=0)
        tol = _CLOCK_ROUNDING * (size[:-2] + size[1:-1] + size[2:])
        step = np.abs(d) > _STANDING * (size[:-1] + size[1:])
        good = (np.abs(d[1:] - d[:-1]) <= tol) & step[:-1] & step[1:] & (
            (d[:-1] > 0) == (d[1:] > 0))
    bad = np.zeros((len(good) + 1, len(maybe)), dtype=np.int32)
    np.cumsum(~good, axis=0, out=bad[1:])
    out[:, maybe] = bad[window - 2 : window - 2 + runs] == bad[:runs]
    return out


def maybe_clocks(raw: npt.NDArray[np.float64], window: int) -> npt.NDArray[np.int64]:
    """The columns of ``raw`` that may be a clock over some ``window`` rows (`clock_columns`):
    a window's rows (16 or more) hold the triples of rows from two consecutive multiples of
    7, and both must step evenly (3/7 of a pass over the rows)."""
    if len(raw) < window:
        return np.zeros(0, dtype=np.int64)
    m = (len(raw) - 3) // 7 + 1
    a, b, c = raw[0 : 7 * m : 7], raw[1 : 7 * m + 1 : 7], raw[2 : 7 * m + 2 : 7]
    with np.errstate(invalid="ignore", over="ignore"):
        step = b - a
        good = (np.abs(c - b - step) <= _CLOCK_ROUNDING * (np.abs(a) + np.abs(b) + np.abs(c))) & (
            step != 0)
    return np.flatnonzero((good[1:] & good[:-1]).any(axis=0)).astype(np.int64)


def clock_sets(clock: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.uint8],
                                                       npt.NDArray[np.int64]]:
    """The distinct rows of ``clock`` (packed in bytes, in their bytes' order) and the index
    of each row's: ``np.unique(np.packbits(clock, axis=1), axis=0, return_inverse=True)``,
    by a sort of 64-bit words (big-endian: their order is the bytes') instead of rows of
    bytes compared one by one (most of the cost of a batch with a clock, fuse34)."""
    packed = np.packbits(clock, axis=1)
    width = -(-packed.shape[1] // 8) * 8
    padded = np.zeros((len(packed), width), dtype=np.uint8)
    padded[:, : packed.shape[1]] = packed
    words = padded.view(">u8").astype(np.uint64)
    order = np.lexsort(words.T[::-1])
    rows = words[order]
    new = np.ones(len(rows), dtype=bool)
    new[1:] = (rows[1:] != rows[:-1]).any(axis=1)
    key = np.empty(len(rows), dtype=np.int64)
    key[order] = np.cumsum(new) - 1
    return packed[order[new]], key
