"""Standing columns: the observation columns that keep one value throughout an episode (a task
id, a bias feature, a clock too slow for float32 such as ``1e5 + t / 500``, a time stamp in
seconds since 1970), which a copier may add to a held-out episode's observations with one line
of numpy (copy35: such a copy shared no window with the held episode).

Scope: `still_columns` (per episode and column: whether it stands) and `left_out` (per window,
the columns `step_windows` hashes its windows without). The train side's windows are also
hashed without their episode's standing columns (and their clocks), so that such a copy holds
the held episode's windows; the held side's are not (a grid walked along one row would then be
the walk along any other row: a match out of nothing), and those windows are never compared
as held out (``StepWindows.still``).
Non-scope: the hashes (``step_windows``), the kept file (``window_cache``, part ``still``).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["in_place_of", "left_out", "still_columns"]


def still_columns(q: npt.NDArray[np.uint32], lengths: npt.NDArray[np.int64], window: int
                  ) -> npt.NDArray[np.bool_] | None:
    """Per episode (of ``lengths`` steps, whose quantised observations are ``q``, a row a
    step) and column: whether the column stands throughout the episode (one quantised value
    in every step), in an episode of ``window`` steps or more that keeps at least 2 other
    columns; None when no episode has one (the rule: a pass comparing each step with its
    episode's first)."""
    if len(q) < window or q.shape[1] < 3:
        return None
    starts = np.cumsum(lengths) - lengths
    same = q == q[np.repeat(starts, lengths)]
    still = np.logical_and.reduceat(same, starts, axis=0) & (lengths >= window)[:, None]
    still &= ((~still).sum(axis=1) >= 2)[:, None]
    return still if still.any() else None


def left_out(clock: npt.NDArray[np.bool_], still: npt.NDArray[np.bool_],
             nonzero: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Per window (a row), the columns its windows without standing columns leave out: in
    order 0 its clock columns ``clock`` and its episode's standing columns ``still``
    (`still_columns`); then, as many more, in ``step_windows.COLUMNS`` those but the standing
    columns of 0 (``nonzero``: a standing column's value is not 0), which a held window's set
    of column series holds as a one-hot's cells not visited hold it. A row is all false where
    that leaves fewer than 2 columns or the episode has no standing column, and its second
    half where no standing column but of 0."""
    both = clock | still
    use = (((~both).sum(axis=1) >= 2) & still.any(axis=1))[:, None]
    also = still & nonzero
    some = np.asarray(also.any(axis=1), dtype=bool)[:, None]
    return np.hstack((both & use, (clock | also) & use & some))


def in_place_of(acc: npt.NDArray[np.uint64], v: npt.NDArray[np.uint64],
                mask: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.uint64],
                                                      npt.NDArray[np.uint64]]:
    """Column series hashes ``acc`` (a row a window's first step) and mixed values ``v`` (a
    row a step, ``mask`` per row: the columns left out), each column left out given the
    row's first column kept: a set of series (``column_series.set_hash``, ``few_values``)
    holds a repeat once, so that a window's set is that of the columns kept."""
    other = np.argmax(~mask, axis=1)
    every = np.arange(len(v))
    vm = np.where(mask, v[every, other][:, None], v)
    am = np.where(mask[: len(acc)], acc[every[: len(acc)], other[: len(acc)]][:, None], acc)
    return am, vm
