"""A compact, exact set of episode ids, for the checks that remember every id of a batch.

Scope: `IdSet` remembers ids, each with a number (the line that gave it, or nothing), in about
35 bytes an id, where a Python set or dict of strings takes 107-120 (the string object, its
slot, an int per value). Recording a 2 GiB chat file (982,200 episodes) held every id three
times, about 335 MiB, the largest part of the recording's memory that grows with the file
(issue 21 item 5): the reader's id-to-line map, the steps' contiguity check and the episode
builder's attributes check each keep one now.
How: each id's hash (``hash()``, SipHash keyed per process, cached in the string) in sorted
numpy runs beside the id's number, the ids themselves in Arrow string arrays (their bytes and
an offset). A lookup whose hash matches is confirmed by comparing the id itself, so the set is
exact: equal hashes never make two ids equal. Ids that are not strings (bytes that are not
UTF-8, reported on their own) are kept in a plain dict; an instance of a subclass of str (numpy's
``np.str_``) is the str of its text, as a dict takes it.
Non-scope: what a repeated id means (the callers report it, as before).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["IdSet"]

_I64: Final = np.int64

_hash: Callable[[object], int] = hash
"""The hash of an id (a module name so that a test can make every id collide)."""


class IdSet:
    """Ids seen so far, each with a number; exact, compact, added a batch at a time.

    The hashes are kept in sorted runs whose sizes halve from the first (a new batch is a run;
    runs of comparable size are merged), so adding costs O(log n) an id, amortised, and a
    lookup one binary search a run. Strings added a few at a time (the callers' slow paths:
    an id or a record at a time) wait in a plain dict until `SMALL` of them are held, then
    become one run together: never an Arrow array of one id.
    """

    SMALL: Final = 4096
    """Strings from small adds (under 64 ids) kept in a plain dict, at most."""

    def __init__(self) -> None:
        """Start empty."""
        self._runs: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
        self._chunks: list[pa.Array] = []
        self._values: list[npt.NDArray[np.int64]] = []
        self._ends: list[int] = []  # ids held after each chunk
        self._count = 0
        self._other: dict[object, int] = {}
        self._small: dict[str, int] = {}

    def __len__(self) -> int:
        return self._count + len(self._other) + len(self._small)

    def get(self, eid: object) -> int | None:
        """The number kept with ``eid``, or None when it was never added."""
        if type(eid) is not str:
            if not isinstance(eid, str):
                return self._other.get(eid)
            eid = str.__str__(eid)  # a subclass's text, as a plain str
        if eid in self._small:
            return self._small[eid]
        h = _hash(eid)
        for keys, slots in self._runs:
            lo = int(np.searchsorted(keys, h, "left"))
            hi = lo
            while hi < len(keys) and keys[hi] == h:
                hi += 1
            for slot in slots[lo:hi].tolist():
                at = bisect.bisect_right(self._ends, slot)
                start = self._ends[at - 1] if at else 0
                if self._chunks[at][slot - start].as_py() == eid:
                    return int(self._values[at][slot - start])
        return None

    def __contains__(self, eid: object) -> bool:
        return self.get(eid) is not None

    def maybe_any(self, ids: Sequence[str]) -> bool:
        """Whether any of ``ids`` (strings) may be held already or appear twice among them:
        False proves none does; True sends the caller to `get`, which is exact (a hash shared
        by two different ids gives True here, and nothing wrong there)."""
        if not ids:
            return False
        if self._small and not self._small.keys().isdisjoint(ids):
            return True
        h = np.fromiter(map(_hash, ids), _I64, len(ids))
        h.sort()
        if len(h) > 1 and bool((h[1:] == h[:-1]).any()):
            return True
        for keys, _ in self._runs:
            at = np.searchsorted(keys, h)
            np.minimum(at, len(keys) - 1, out=at)
            if bool((keys[at] == h).any()):
                return True
        return False

    def add(self, ids: Sequence[object], values: Iterable[int] | int = 0) -> None:
        """Remember ``ids`` (none of them held already: the caller checked) with their numbers
        (one each, or one for all)."""
        if not ids:
            return
        nums = (
            np.full(len(ids), values, dtype=_I64)
            if isinstance(values, int)
            else np.fromiter(values, _I64, len(ids))
        )
        if any(type(e) is not str for e in ids):
            keep = [i for i, e in enumerate(ids) if isinstance(e, str)]
            for i, e in enumerate(ids):
                if not isinstance(e, str):
                    self._other[e] = int(nums[i])
            ids, nums = [str.__str__(ids[i]) for i in keep], nums[keep]
            if not ids:
                return
        if len(ids) < 64:
            self._small.update((str(e), n) for e, n in zip(ids, nums.tolist(), strict=True))
            if len(self._small) < self.SMALL:
                return
            small, self._small = self._small, {}
            ids, nums = list(small), np.fromiter(small.values(), _I64, len(small))
        h = np.fromiter(map(_hash, ids), _I64, len(ids))
        slots = np.arange(self._count, self._count + len(ids), dtype=_I64)
        self._chunks.append(pa.array(ids, pa.large_string()))
        self._values.append(nums)
        self._count += len(ids)
        self._ends.append(self._count)
        order = np.argsort(h, kind="stable")
        self._runs.append((h[order], slots[order]))
        while len(self._runs) > 1 and len(self._runs[-2][0]) <= 2 * len(self._runs[-1][0]):
            (k1, s1), (k2, s2) = self._runs[-2], self._runs[-1]
            keys = np.concatenate([k1, k2])
            order = np.argsort(keys, kind="stable")
            self._runs[-2:] = [(keys[order], np.concatenate([s1, s2])[order])]
