"""The tests and the hash of a `COLUMNS` window's set of column series (copy28, copy30; moved
out of ``step_windows`` by rows36 to keep it under 1,000 lines).

Scope: `set_hash` (the hash of a set of column series, a repeat once), `few_values` (whether a
run of steps takes few values: one-hot, a grid), `informative` (whether a run of few values
comes back to its steps often enough to be compared) and `kept_sets` (the columns of each set
of clock columns and their salts, all sets at once: dict36).
Non-scope: the column series (``step_windows.columns_windows``), the constants
(``step_windows.MIN_DISTINCT``, ``MIN_REVISITS``, ``WINDOW``, ``LONG``).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .episode_vectors import splitmix64

__all__ = ["few_values", "informative", "kept_sets", "set_hash"]

_U64 = np.uint64


def set_hash(acc: npt.NDArray[np.uint64], salt: np.uint64) -> npt.NDArray[np.uint64]:
    """Per row of column series hashes ``acc``: the hash of the set of them."""
    acc = np.sort(acc, axis=1)
    mixed = splitmix64(acc ^ salt)
    mixed[:, 1:][acc[:, 1:] == acc[:, :-1]] = 0  # a repeated column once
    with np.errstate(over="ignore"):
        return splitmix64(mixed.sum(axis=1, dtype=np.uint64) + salt)


def informative(v: npt.NDArray[np.uint64], first: npt.NDArray[np.int64], steps: int,
                distinct_at_least: int, revisits: int) -> npt.NDArray[np.bool_]:
    """Per run of ``steps`` steps of mixed values ``v`` (a row a step) from row ``first``:
    whether it has at least ``distinct_at_least`` distinct steps and ``revisits`` steps equal to
    an earlier one of it. Of few values, only which steps are alike survives a permutation
    of the columns: runs that never come back to a step (a path straight to a goal) all
    have the same, as do runs of a few steps alone."""
    if not len(first):
        return np.zeros(0, dtype=bool)
    with np.errstate(over="ignore"):
        odd = splitmix64(np.arange(v.shape[1], dtype=np.uint64)) | _U64(1)
        key = splitmix64(v * odd[None, :]).sum(axis=1, dtype=np.uint64)
    runs = np.sort(np.lib.stride_tricks.sliding_window_view(key, steps)[first], axis=1)
    distinct = (runs[:, 1:] != runs[:, :-1]).sum(axis=1) + 1
    return np.asarray((distinct >= distinct_at_least) & (steps - distinct >= revisits))


def few_values(v: npt.NDArray[np.uint64], window: int, fewer: int) -> npt.NDArray[np.bool_]:
    """Per run of ``window`` steps of mixed values ``v`` (a row a step): whether its values set
    fewer than ``fewer`` of 64 bits, one bit a value by its top 6 bits (so fewer than that
    many distinct values, or a few more alike there). With few values, unrelated windows
    relabel into each other: a one-hot observation (0 and 1) of any walk over distinct cells
    has the columns of any other's, a grid walk's (x, y) those of its transpose."""
    bits = np.bitwise_or.reduce(_U64(1) << (v >> _U64(58)), axis=1)
    seen = bits[: len(bits) - window + 1].copy()
    for k in range(1, window):
        seen |= bits[k : k + len(seen)]
    with np.errstate(over="ignore"):  # the bits set (SWAR popcount)
        seen -= (seen >> _U64(1)) & _U64(0x5555555555555555)
        seen = (seen & _U64(0x3333333333333333)) + ((seen >> _U64(2)) & _U64(0x3333333333333333))
        seen = (seen + (seen >> _U64(4))) & _U64(0x0F0F0F0F0F0F0F0F)
        return np.asarray((seen * _U64(0x0101010101010101)) >> _U64(56) < fewer)


def kept_sets(sets: npt.NDArray[np.uint8], used: npt.NDArray[np.bool_], width: int, split: bool,
              member: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64],
                                                      npt.NDArray[np.bool_],
                                                      npt.NDArray[np.uint64]]:
    """Of sets of left-out columns (``sets``: packed rows of ``width`` bits, or twice as many
    with ``split``: those of order 0, then those of `COLUMNS`), those ``used`` that keep a
    column in order 0 and 2 to ``width`` - 1 in `COLUMNS`: each set's index among them (-1:
    none), per such set the columns it leaves out of `COLUMNS` and each column's salt (its
    member, ``member``, ascending, renumbered from 0 among the members kept: 0 for the
    first, ``splitmix64(rank)`` after; ``step_windows._columns``). All sets at once, not a
    Python call a set (dict36)."""
    bits = np.unpackbits(sets, axis=1)[:, : 2 * width if split else width].astype(bool)
    keep = ~bits[:, width:] if split else ~bits
    n = keep.sum(axis=1)
    ok = used & ~bits[:, :width].all(axis=1) & (n >= 2) & (n < width)
    index = np.where(ok, np.cumsum(ok) - 1, -1)
    heads = np.flatnonzero(np.diff(member, prepend=member[0] - 1) != 0)  # each member's first
    of = np.repeat(np.arange(len(heads)), np.diff(np.append(heads, width)))
    kept = keep[ok]
    present = np.add.reduceat(kept, heads, axis=1, dtype=np.int64) > 0
    rank = (np.cumsum(present, axis=1) - 1)[:, of].astype(np.uint64)
    salts = np.where(rank > 0, splitmix64(rank), _U64(0))
    return index.astype(np.int64), ~kept, salts
