"""Frame stacks: observations that hold the last k observations of an episode (Gymnasium's
``FrameStackObservation``, Atari's 4 frames, SB3's ``VecFrameStack``), its first steps padded
with its first observation or zeros, which a copier may make of a held-out episode with one
wrapper (win36: such a copy shared no window with the held episode, every step's hash covering
every frame).

Scope: `stacked_columns` (per episode of a vector observation and column: whether it is of a
frame other than the newest of a stack) and `FrameStacks` (per episode of an image
observation stacked along an axis of its declared shape, the hashes of its steps' newest
frames alone). A step is stacked on the step before when each of its frames but the newest
is the next newer frame of the step before (the frames in blocks of the vector, or
interleaved, newest last or first); an episode is stacked when every step after its first
is. The train side also
hashes the windows of a stacked episode over its newest frame alone (``step_windows``, kept
with the windows without standing columns: ``StepWindows.still``), so that the copy holds the
held episode's windows, cut, subsampled or permuted; a stack's newest frame is an observation
of the episode, so nothing matches that the episode's own observations would not.
The held side (win37) leaves a stacked episode's older frames out with its clock columns
(``step_windows._clocked``: `member_stacks`), so that a held episode recorded stacked holds the
windows of a copy without the stack; a Dict or Tuple space's member is a stack by itself.
Non-scope: a held image recorded stacked and copied without the stack, a stack of one number
a step (no columns left to compare), grayscale and
resizing (docs/SECURITY.md, twenty-first round, win36), the hashes (``step_windows``,
``image_windows``).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .image_windows import image_steps
from .rollouts.schema import tensor_field, tensor_shape
from .row_hashes import matrix_hashes, quantised
from .standing_columns import still_columns

__all__ = ["MAX_STACK", "FrameStacks", "left_columns", "member_stacks", "stacked_columns"]

MAX_STACK = 8
"""The most frames a stack may hold (Atari's 4, Gymnasium's examples' 4 to 8)."""
_VALUES = 1 << 21  # numbers compared at once: bounded memory


def _layouts(width: int) -> list[npt.NDArray[np.int64]]:
    """The column indexes of each frame of a vector of ``width`` numbers stacked k times, a
    row a frame: in blocks (Gymnasium, SB3 on a vector), then interleaved (a stack along the
    last axis of ``(d, 1)``), for every k from 2 to `MAX_STACK` leaving at least 2 numbers a
    frame."""
    out = []
    for k in range(min(MAX_STACK, width // 2), 1, -1):  # an interleaved stack of 4 is one of 2
        if not width % k:
            cols = np.arange(width, dtype=np.int64)
            out += [cols.reshape(k, width // k), cols.reshape(width // k, k).T.copy()]
    return out


def _linked(x: npt.NDArray[np.generic], frames: npt.NDArray[np.int64], shift: int
            ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Per step of ``x`` (a row a step) but the first: whether it is stacked on the step
    before, ``shift`` frames on (every second step of a stack: 2), its frames (``frames``, a
    row each) newest last, and newest first."""
    older, newer = frames[:-shift].ravel(), frames[shift:].ravel()
    last = np.all(x[1:, older] == x[:-1, newer], axis=1)
    first = np.all(x[1:, newer] == x[:-1, older], axis=1)
    return last, first


def stacked_columns(q: npt.NDArray[np.uint32], lengths: npt.NDArray[np.int64], window: int
                    ) -> npt.NDArray[np.bool_] | None:
    """Per episode (of ``lengths`` steps, whose quantised observations are ``q``, a row a
    step) and column: whether it is of a frame other than the newest, in an episode of
    ``window`` steps or more each of whose steps after the first is stacked on the step
    before (the first way of `_layouts` that fits, the fewest frames a step apart first);
    None when no episode is. An episode whose every column is the one before it a step
    later, or earlier (a delay line of one number: a sweep of a one-hot), is none: it is a
    stack of every grouping of its columns, and its frames are no observation."""
    width = q.shape[1]
    starts = np.cumsum(lengths) - lengths
    todo = np.flatnonzero(lengths >= window)
    if not len(todo) or width < 4:
        return None
    out = np.zeros((len(lengths), width), dtype=bool)
    line = np.arange(width, dtype=np.int64)[:, None]
    heads = np.zeros((len(lengths), 2, width), dtype=q.dtype)  # each episode's first 2 steps
    heads[todo] = np.stack((q[starts[todo]], q[starts[todo] + 1]), axis=1)
    # Per episode a step compared before the whole: its last, then the first a way found not
    # stacked (rev35: an episode broken at one step was read whole by every way its head fits)
    probe = starts + lengths - 1
    for direction in (0, 1):
        todo = np.setdiff1d(todo, _fitting(q, heads, starts, lengths, todo, line, 1, direction,
                                           probe))
    layouts = _layouts(width)  # the fewest steps between frames first: 4 frames of d, one
    ways = [(f, k) for k in range(1, MAX_STACK) for f in layouts if k < len(f)]  # step apart,
    for frames, shift in ways:  # are also 8 of d / 2, two apart
        for direction in (0, 1):
            got = _fitting(q, heads, starts, lengths, todo, frames, shift, direction, probe)
            older = np.ones(width, dtype=bool)
            older[frames[-1] if direction == 0 else frames[0]] = False
            out[got] = older
            todo = np.setdiff1d(todo, got)
    return out if out.any() else None


def _fitting(q: npt.NDArray[np.uint32], heads: npt.NDArray[np.uint32],
             starts: npt.NDArray[np.int64],
             lengths: npt.NDArray[np.int64], todo: npt.NDArray[np.int64],
             frames: npt.NDArray[np.int64], shift: int, direction: int,
             probe: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The episodes among ``todo`` each of whose steps after the first is stacked on the step
    before in ``frames``, ``shift`` frames on, the newest last (``direction`` 0) or first: each
    episode's second step compared first (``heads``: per episode its first two steps, gathered
    once for every way), then its step ``probe`` (a row of ``q`` after the episode's first: its
    last, or the first step an earlier way found not stacked, which this call updates), only
    those both leave compared whole."""
    if not len(todo):
        return todo
    older, newer = frames[:-shift].ravel(), frames[shift:].ravel()
    if direction:
        older, newer = newer, older
    h = heads[todo]
    eps = todo[np.all(h[:, 1, older] == h[:, 0, newer], axis=1)]  # `_linked` of the two
    at = probe[eps]
    eps = eps[np.all(q[at][:, older] == q[at - 1][:, newer], axis=1)]
    if not len(eps):
        return eps
    sub = lengths[eps]
    first = np.cumsum(sub) - sub
    rows = np.repeat(starts[eps] - first, sub) + np.arange(int(sub.sum()))
    x = q[rows]
    bad = np.ones(len(x), dtype=bool)  # per step: not stacked (its episode's first is)
    bad[1:] = ~_linked(x, frames, shift)[direction]
    bad[first] = False
    broken = np.logical_or.reduceat(bad, first)
    where = np.flatnonzero(bad)  # each broken episode's first step not stacked: its probe
    firsts = where[np.searchsorted(where, first[broken])]
    probe[eps[broken]] = rows[firsts]
    return eps[~broken]


def member_stacks(q: npt.NDArray[np.uint32], lengths: npt.NDArray[np.int64], window: int,
                  member: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.bool_] | None:
    """`stacked_columns` of a tensor (``member`` None or all 0), or of each member of a Dict
    or Tuple space (``member``: each column's, ascending) of 4 numbers or more on its own, a
    stacked member beside others (win37: a stack of the whole space is no stack of any of
    its members); None when no episode has one."""
    if member is None or not member.any():
        return stacked_columns(q, lengths, window)
    out = None
    for k in np.unique(member).tolist():
        cols = np.flatnonzero(member == k)
        got = stacked_columns(q[:, cols], lengths, window) if len(cols) >= 4 else None
        if got is not None:
            out = np.zeros((len(lengths), q.shape[1]), dtype=bool) if out is None else out
            out[:, cols] = got
    return out


def left_columns(q: npt.NDArray[np.uint32], lengths: npt.NDArray[np.int64], window: int,
                 member: npt.NDArray[np.int64] | None = None
                 ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]] | tuple[None, None]:
    """Per episode and column: whether the train side's windows without standing columns
    leave it out (an episode's standing columns, `standing_columns.still_columns`; of a
    stacked episode, `member_stacks`, its older frames' columns instead), and whether they
    leave it out of `step_windows.COLUMNS` too (a standing column not 0, every older frame's
    column; `standing_columns.left_out`); None and None when no episode has either."""
    still = still_columns(q, lengths, window)
    stacked = member_stacks(q, lengths, window, member)
    if still is None and stacked is None:
        return None, None
    starts = np.cumsum(lengths) - lengths
    nonzero = np.asarray(q[starts] != 0, dtype=bool)
    if stacked is None:
        assert still is not None
        return still, nonzero
    some = np.asarray(stacked.any(axis=1), dtype=bool)[:, None]
    out = stacked if still is None else np.where(some, stacked, still)
    return out, np.asarray(nonzero | stacked, dtype=bool)


def _candidates(shape: tuple[int, ...]) -> list[tuple[int, int, tuple[int, ...], bool]]:
    """The ways a declared shape may be a stack: ``(k, axis, frame shape, channels axis moved
    last)``, k frames along ``axis`` (0 or the last), each of the frame shape; a channel axis
    of k frames of 1, 3 or 4 channels, or a leading axis of k whole frames."""
    out: list[tuple[int, int, tuple[int, ...], bool]] = []
    if len(shape) == 4 and 2 <= shape[0] <= MAX_STACK:  # (k, H, W, C) or (k, C, H, W)
        out.append((shape[0], 0, shape[1:], False))
    if len(shape) == 3:
        for axis, m, rest in ((0, shape[0], shape[1:]), (2, shape[2], shape[:2])):
            for c in (1, 3, 4):
                k = m // c
                if m % c or not 2 <= k <= MAX_STACK or min(rest) <= MAX_STACK:
                    continue
                frame = rest if c == 1 else ((c, *rest) if axis == 0 else (*rest, c))
                out.append((k, axis, frame, axis == 2 and c > 1))
    return out


class FrameStacks:
    """The newest frames of the episodes of an image observation column stacked along an axis
    of its declared shape (`_candidates`), over a file's record batches: per episode the first
    way (newest last, then first) each of whose steps after its first is stacked on the step
    before, no step null; its steps' newest frames' step hashes (``step_windows.step_hashes``
    of that frame, as an observation of its own) and image hashes
    (``image_windows.image_steps``, 0 when it is no image of more than ``least`` numbers).
    Decided per episode, its steps compared across record batches: the same for any cut of
    the file (frames43: a batch holding a null step, or whose steps were mostly of another
    way, had none, for every episode that shared it)."""

    def __init__(self, field: pa.Field, least: int) -> None:
        """For the observation ``field`` (no ways: its shape is no stack of more than
        ``least`` numbers, or not of numbers)."""
        try:
            shape = tensor_shape(field)
        except ValueError:
            shape = None
        t = field.type
        listed = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
        numeric = listed and (pa.types.is_integer(t.value_type) or
                              pa.types.is_floating(t.value_type))
        self.shape: tuple[int, ...] = shape or ()
        self.size = int(np.prod(self.shape)) if shape else 0
        self.ways = [(k, axis, frame, moved, d) for k, axis, frame, moved in _candidates(
            self.shape) for d in (0, 1)] if numeric and self.size > least else []
        self.least, self.type = least, t.value_type if listed else None
        self.last: npt.NDArray[np.generic] | None = None  # the step before's values
        self.n = 0  # the steps of the episode under way
        self.alive = np.ones(len(self.ways), dtype=bool)  # its ways so far
        self.got: list[list[npt.NDArray[np.uint64]]] = [[] for _ in self.ways]

    def add(self, obs: pa.Array, firsts: npt.NDArray[np.int64], goes_on: bool
            ) -> npt.NDArray[np.uint64] | None:
        """The steps of the episodes ended before the last one of the record batch whose
        observations are ``obs`` (episodes from rows ``firsts``; ``goes_on``: its first
        continues the one under way, which else ended before it): a row a step, its newest
        frame's step hash and image hash and 1, or 0, 0, 0 where its episode is no stack;
        None when this column has no way."""
        if not self.ways:
            return None
        n = len(obs)
        x, bad = self._values(obs)
        ends = np.append(firsts[1:], n).astype(np.int64)
        judged = firsts + np.where((np.arange(len(firsts)) == 0) & goes_on, 0, 1)
        parts = np.zeros((len(self.ways), len(firsts)), dtype=bool)
        for i, way in enumerate(self.ways):
            parts[i] = self._linked(x, bad, judged, ends, way)
        out: list[npt.NDArray[np.uint64]] = []
        if self.n and not goes_on:
            out.append(self._ended())
        for j in range(len(firsts)):
            on, last = j == 0 and goes_on, j == len(firsts) - 1
            alive = parts[:, j] & (self.alive if on else True)
            rows = np.arange(firsts[j], ends[j])
            if on or last:  # under way (the state is a new episode's unless ``on``): each
                self.alive, self.n = alive, self.n + len(rows)  # way still alive
                for i in np.flatnonzero(alive).tolist():
                    self.got[i].append(self._newest(x, rows, self.ways[i]))
                if not last:
                    out.append(self._ended())
                continue
            some = np.flatnonzero(alive)
            out.append(self._newest(x, rows, self.ways[some[0]]) if len(some) else
                       np.zeros((len(rows), 3), dtype=np.uint64))
        self.last = None if bad[n - 1] else np.array(x[n - 1])
        return np.concatenate(out) if out else np.zeros((0, 3), dtype=np.uint64)

    def ended(self) -> npt.NDArray[np.uint64] | None:
        """`add`'s rows of the episode under way, the file's last."""
        return self._ended() if self.ways else None

    def _ended(self) -> npt.NDArray[np.uint64]:
        some = np.flatnonzero(self.alive)
        got = (np.concatenate(self.got[some[0]]) if len(some) else
               np.zeros((self.n, 3), dtype=np.uint64))
        self.n, self.alive = 0, np.ones(len(self.ways), dtype=bool)
        self.got = [[] for _ in self.ways]
        return got

    def _values(self, obs: pa.Array) -> tuple[npt.NDArray[np.generic], npt.NDArray[np.bool_]]:
        """The steps' values (a row a step; a null step's, or one of another size, zeros)
        and per step whether it is such."""
        n = len(obs)
        sizes = np.asarray(pc.fill_null(pc.list_value_length(obs), -1).to_numpy(
            zero_copy_only=False))
        bad = np.asarray(sizes != self.size, dtype=bool)
        if not bad.any():
            flat = np.asarray(pc.list_flatten(obs).to_numpy(zero_copy_only=False))
            return flat.reshape(n, self.size), bad
        flat = np.asarray(pc.list_flatten(obs.filter(pa.array(~bad))).to_numpy(
            zero_copy_only=False))
        x = np.zeros((n, self.size), dtype=flat.dtype)
        x[~bad] = flat.reshape(-1, self.size)
        return x, bad

    def _frames(self, v: npt.NDArray[np.generic], way: tuple[int, int, tuple[int, ...], bool,
                                                               int]) -> npt.NDArray[np.generic]:
        k, axis = way[0], way[1]
        x = v.reshape(len(v), *self.shape)
        return (np.moveaxis(x, axis + 1, 1) if axis else x).reshape(len(v), k, -1)

    def _linked(self, x: npt.NDArray[np.generic], bad: npt.NDArray[np.bool_],
                judged: npt.NDArray[np.int64], ends: npt.NDArray[np.int64],
                way: tuple[int, int, tuple[int, ...], bool, int]) -> npt.NDArray[np.bool_]:
        """Per part of episode (rows ``judged`` to ``ends``, each stacked on the row before:
        the previous batch's last for row 0): whether every row is; a part's first and last
        rows compared before the whole."""
        prior = np.concatenate((np.cumsum(bad) - bad, [int(bad.sum())]))
        ok = np.asarray(prior[ends] - prior[np.maximum(judged - 1, 0)] == 0, dtype=bool)  # none bad
        if self.last is None:
            ok &= judged > 0
        for probe in (judged, ends - 1):
            todo = np.flatnonzero(ok & (judged < ends))
            ok[todo] = self._rows_linked(x, probe[todo], way)
        todo = np.flatnonzero(ok & (judged + 2 < ends))
        if len(todo):
            lens = ends[todo] - judged[todo]
            rows = np.repeat(judged[todo] - (np.cumsum(lens) - lens), lens) + np.arange(
                int(lens.sum()))
            linked = self._rows_linked(x, rows, way)
            ok[todo] = np.logical_and.reduceat(linked, np.cumsum(lens) - lens)
        return ok

    def _rows_linked(self, x: npt.NDArray[np.generic], rows: npt.NDArray[np.int64],
                     way: tuple[int, int, tuple[int, ...], bool, int]) -> npt.NDArray[np.bool_]:
        """Per row of ``rows``: whether it is stacked on the row before (row 0: on
        ``self.last``), `_VALUES` numbers at a time."""
        k, direction = way[0], way[4]
        older, newer = (slice(0, k - 1), slice(1, k)) if direction == 0 else (
            slice(1, k), slice(0, k - 1))
        out = np.empty(len(rows), dtype=bool)
        step = max(1, _VALUES // max(1, self.size))
        for lo in range(0, len(rows), step):
            r = rows[lo : lo + step]
            now = x[r]
            before = x[np.maximum(r - 1, 0)]
            if self.last is not None and (r == 0).any():
                before[r == 0] = self.last
            out[lo : lo + len(r)] = np.all(self._frames(now, way)[:, older] ==
                                           self._frames(before, way)[:, newer], axis=(1, 2))
        return out

    def _newest(self, x: npt.NDArray[np.generic], rows: npt.NDArray[np.int64],
                way: tuple[int, int, tuple[int, ...], bool, int]) -> npt.NDArray[np.uint64]:
        """Per row of ``rows``: the step hash and image hash of its newest frame under
        ``way``, and 1; `_VALUES` numbers at a time."""
        k, _, frame, moved, direction = way
        out = np.ones((len(rows), 3), dtype=np.uint64)
        step = max(1, _VALUES // max(1, self.size))
        width = self.size // k
        for lo in range(0, len(rows), step):
            r = rows[lo : lo + step]
            m = len(r)
            newest = self._frames(x[r], way)[:, k - 1 if direction == 0 else 0]
            if moved:  # the frame's channels back last, as the step held them
                newest = np.moveaxis(newest.reshape(m, frame[-1], -1), 1, 2)
            newest = np.ascontiguousarray(newest).reshape(m, width)
            values = pa.array(newest.ravel())
            out[lo : lo + m, 0] = matrix_hashes(quantised(values).reshape(m, width),
                                                np.zeros(width, dtype=np.int64))
            arr = pa.FixedSizeListArray.from_arrays(values, width)
            img = image_steps(arr, tensor_field("obs", self.type, frame), self.least)
            out[lo : lo + m, 1] = 0 if img is None else img
        return out
