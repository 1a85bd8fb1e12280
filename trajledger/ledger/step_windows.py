"""Shared runs of steps: the windows of `WINDOW` consecutive observations of numeric episodes,
so that a held-out episode copied into training data cut, extended, shifted or split in parts
is still found.

Scope: `step_hashes` (one 64-bit hash per step of an observation column) and `iter_windows`
(the hash of every run of `WINDOW` consecutive steps of each episode of a run of step record
batches, streamed, with where it starts; `iter_marked`: every window, each marked when it has
too few distinct steps). A step's hash is over its observation alone: every
value cast to float32 (so a float64 episode and its float32 copy agree), rounded to 10 bits of
mantissa (about three significant digits, so that float64 -> float32 -> shifted copies and
copies perturbed in the last digits still agree), -0.0 taken as 0.0; values paired in row order
(two 32-bit values in one 64-bit word), each pair mixed (SplitMix64) with its position, summed,
then mixed with the row's length. Actions and rewards are left out: they are labels a copier
may change at will (rewards are rescaled, actions re-encoded), and the observations alone of 16
steps identify a trajectory of any environment whose state moves. A window is the hash of its
`WINDOW` step hashes in order (a polynomial mod 2**64, then SplitMix64). Held-out windows with
fewer than `MIN_DISTINCT` distinct steps (padding, static frames, an agent standing still) are
left out: such runs repeat in unrelated episodes. The held side also holds the windows of its
steps reversed, of every 2nd, 3rd, 4th and 5th step, and of every 2nd and 3rd step reversed
(`ORDERS`: a reversed or frame-skipped copy's windows are those; the train side is compared
as recorded).
Both sides also hold a second kind of window (`COLUMNS`, copy28): per window, the set of the
series its observation's columns take over its steps (a copy with its columns permuted or
duplicated has the same set), for observations of 2 to `MAX_COLUMNS` numbers a step (a Dict
or Tuple space's per member, copy30); a held one is compared only when it has at least
`MIN_DISTINCT` distinct values, else (one-hot, a grid) it is of `LONG` steps instead, compared
only when they come back to earlier steps often enough (`columns_windows`, copy30); an
episode of `MIN_WHOLE` to `LONG` - 1 steps has one such window, over all its steps (copy31).
The held side holds these apart, in order `LONG_COLUMNS`, each from its first step
(`columns_spans`), so that the run they share is named whole (`span`, copy31). An image (a
declared shape of more than `MAX_COLUMNS` numbers) has instead, in order `COLUMNS`, the
windows of its frames as they are, flipped or turned, channels in any order, each scaled to
its range (`image_windows`, img34, rev32).
Both sides also hash each window with a clock column (`clock_columns`: its values over the
window's 16 steps an arithmetic progression, the step number or the time Gymnasium's
``TimeAwareObservation`` adds, flattened into the vector or a Dict member of its own) without
its clock columns, in order 0 and `COLUMNS` (`_clocked`, ``StepWindows.clocks``), so that a
copy with a clock added holds the held episode's windows, and a held episode recorded with one
those of a copy without it; a held window's marks (`MIN_DISTINCT`, few values) are decided
without its clocks, so that a clock beside an agent standing still is no match (clock33), in
every order (rev31: reversed or subsampled, such a clock is a countdown or a clock of frames).
The gate computes them from the bytes it verified; ``dataset create`` keeps them in the
derived cache (``window_cache``, bound to the step file's digest and
``window_cache.WINDOWS_VERSION``: a change here takes a new number), never in the kept
features (``episode_features.FEATURE_VERSION`` is unchanged).
A step whose observation is null is a null step of its episode (a hash of its own), however
the file's record batches are cut (one of null observations only is joined to its neighbour:
rev38 finding 7); steps none of which has an observation (a chat's) have no windows.
Non-scope: comparing (``ledger.contamination_matcher.Matcher``); episodes shorter than
`WINDOW` (their exact fingerprint only); observations that are not numbers (strings).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .column_series import few_values, informative, kept_sets, set_hash
from .episode_vectors import splitmix64
from .frame_stacks import FrameStacks, left_columns, member_stacks
from .image_windows import image_steps, image_windows
from .rollouts.space_values import leaf_arrays
from .row_hashes import kept_hashes, row_sums
from .standing_columns import in_place_of, left_out
from .step_columns import Columns, columns, joined, observed, one_width
from .window_clocks import clock_columns as clocks_over
from .window_clocks import clock_sets, maybe_clocks

__all__ = ["COLUMNS", "LONG", "LONG_COLUMNS", "MAX_CLOCK_SETS", "MAX_COLUMNS", "MIN_DISTINCT",
           "MIN_WHOLE", "ORDERS", "WINDOW", "WINDOW_COLUMNS", "StepWindows", "clock_columns",
           "columns_kept", "columns_spans", "columns_windows", "held_steps", "iter_marked",
           "iter_windows", "kept", "order_lengths", "order_steps", "span", "step_hashes"]

WINDOW = 16
"""Steps in a window: the shortest shared run found. Shorter runs (a fixed start, an opening)
recur in unrelated episodes of one environment; 16 is also `contamination.MIN_NEAR_STEPS`."""
MIN_DISTINCT = 8
"""Distinct steps a held-out window needs to be compared: padding and static frames are not."""
WINDOW_COLUMNS = ("episode_id", "obs")
"""The step columns `iter_windows` reads."""
ORDERS: tuple[tuple[int, int, bool], ...] = (
    (1, 0, False), (1, 0, True), (2, 0, False), (2, 1, False), (3, 0, False), (3, 1, False),
    (3, 2, False), (2, 0, True), (2, 1, True), (4, 0, False), (4, 1, False), (4, 2, False),
    (4, 3, False), (3, 0, True), (3, 1, True), (3, 2, True), (5, 0, False), (5, 1, False),
    (5, 2, False), (5, 3, False), (5, 4, False))  # fmt: skip
"""The orders of a held-out episode's steps whose windows are held, each ``(k, phase,
reversed)``: every k-th step from step ``phase`` (from 0), then reversed in time or not: as
recorded (order 0, the one order of the train side), reversed, every 2nd, 3rd or 4th step (a
frame-skipped copy; win25 2 and 3, copy26 4, copy28 5), every 2nd step reversed (copy26),
every 3rd step reversed (copy28). A train window
is compared as recorded only: a reversed or subsampled copy of a held episode holds windows of
the held episode's reversed or subsampled steps. Each line costs about ``1 / k`` window a held
step (a held step has about 8 windows, with `COLUMNS`)."""
COLUMNS = len(ORDERS)
"""The order (``StepWindows.order``) of the windows of the set of their columns' series, on
both sides (`columns_windows`): their steps as recorded, after every order of `ORDERS`."""
MAX_COLUMNS = 256
"""The most numbers a step's observation may have for its `COLUMNS` windows (each window
costs a sort of its columns); wider ones have none, but for images (`image_windows`)."""
LONG = 48
"""Steps of a `COLUMNS` window whose 16 steps take few values (`column_series.few_values`):
of a one-hot or grid observation, the set of its columns' series says little more than which
steps are alike, which 16 steps of unrelated walks share (copy28: 4,432 of 90,000 windows); over 48
steps, with `MIN_REVISITS`, unrelated random walks and paths to goals share none (32 steps:
paths to goals did, copy30). A multiple of `WINDOW`."""
MIN_REVISITS = 8
"""Steps of a held `LONG` window that must equal an earlier one of it for it to be compared
(`column_series.informative`)."""
MIN_WHOLE = 32
"""The fewest steps of an episode shorter than `LONG` whose `COLUMNS` window of few values is
over all its steps (copy31): of 16 to 31 steps, unrelated paths to goals shared such windows
(20 steps: one episode pair of 4 x 10^6)."""
MAX_CLOCK_SETS = 8
"""The most sets of clock columns (`clock_columns`) the windows of an episode are hashed
without in order 0 and `COLUMNS` over its whole steps (`_clocked`), the most common first: a
wrapper adds its clock in one place, so one set an episode is the rule, and each set costs a
pass over the episode's steps. The windows of its other sets are hashed in order 0 over their
own rows (at most `WINDOW` rows a window, rev31), without a `COLUMNS` hash."""
LONG_COLUMNS = COLUMNS + 1
"""The order of a held episode's `COLUMNS` windows of `LONG` steps (`columns_spans`): their
``start`` is their first step (a window near its episode's end is hashed up to its last), and
they cover `LONG` steps from it (`span`), so that the run a copy shares is named whole: counted
as 16 steps a window, a permuted one-hot copy of 60 steps said 28 (copy31)."""

_U64 = np.uint64
_POLY = _U64(0x100000001B3)  # odd: the window polynomial's base
_COLUMN_SALT = _U64(0x9E3779B97F4A7C15)
_COLUMN_BLOCK = 4096  # windows whose `COLUMNS` hashes are computed at once
_FEW_WINDOWS = 32  # a set with fewer windows in a block: `_windows_block`, not a pass a set
_LONG_SALT = _U64(0x3C6EF372FE94F82B)
_POLY_WINDOW = _U64(pow(int(_POLY), WINDOW, 1 << 64))  # shifts a polynomial by WINDOW steps
_NO_SETS = (np.zeros((0, 0), dtype=bool), np.zeros((0, 0), dtype=np.uint64))  # `_Bare.columns`


def step_hashes(col: pa.Array) -> npt.NDArray[np.uint64] | None:
    """One hash per row of an observation column (lists of numbers, nested lists, a Dict or
    Tuple space of them, or numbers); None when a value is not a number (a string)."""
    n = len(col)
    total = np.zeros(n, dtype=np.uint64)
    for k, (_, leaf) in enumerate(leaf_arrays("", col)):
        got = row_sums(leaf, k, n)
        if got is None:
            return None
        sums, length = got
        if leaf.null_count:
            nulls = np.asarray(leaf.is_null().to_numpy(zero_copy_only=False), dtype=np.uint64)
            length = length + nulls * _U64(1 << 40)
        with np.errstate(over="ignore"):
            total += splitmix64(sums ^ splitmix64(length + _U64(k)))
    return splitmix64(total)


@dataclass(frozen=True)
class StepWindows:
    """The windows of the episodes of some steps.

    Attributes:
        episode_ids: the episodes, in file order.
        lengths: each episode's number of steps.
        episode: the index (into ``episode_ids``) of each window's episode.
        start: each window's first step, counted from 0 within its episode.
        hashes: each window's hash.
        order: the order of the steps (`ORDERS`): ``lengths`` and ``start`` count the steps
            in that order (`order_lengths`, `held_steps`).
        clocks: the windows are hashed without their clock columns (`_clocked`): of order 0
            or `COLUMNS`, only those with a clock, each of a hash (0: none, not compared).
        still: the windows are hashed without their clock columns and their episode's
            standing columns (`standing_columns`): of order 0 or `COLUMNS`, of episodes
            with one, each of a hash (0: none); the train side's alone (never held, copy35).
    """

    episode_ids: list[str]
    lengths: npt.NDArray[np.int64]
    episode: npt.NDArray[np.int64]
    start: npt.NDArray[np.int64]
    hashes: npt.NDArray[np.uint64]
    order: int = 0
    clocks: bool = False
    still: bool = False


def kept(w: StepWindows, keep: npt.NDArray[np.bool_]) -> StepWindows:
    """The windows of ``w`` where ``keep`` is true (the episodes stay)."""
    return replace(w, episode=w.episode[keep], start=w.start[keep], hashes=w.hashes[keep])


def order_steps(order: int) -> tuple[int, int, bool]:
    """``(k, phase, reversed)`` of order ``order`` (`ORDERS`; `COLUMNS`, `LONG_COLUMNS`: as
    recorded)."""
    return ORDERS[order] if order < len(ORDERS) else ORDERS[0]


def order_lengths(lengths: npt.NDArray[np.int64], order: int) -> npt.NDArray[np.int64]:
    """The number of steps of episodes of ``lengths`` steps taken in order ``order``."""
    k, phase, _ = order_steps(order)
    return np.asarray(np.maximum(lengths - phase + k - 1, 0) // k, dtype=np.int64)


def span(order: int, steps: int) -> int:
    """The steps from its ``start`` a window of order ``order`` of an episode of ``steps``
    steps (in that order) is the hash of: for `LONG_COLUMNS`, `LONG`, or the whole episode
    when it is shorter; else `WINDOW`."""
    return min(LONG, steps) if order == LONG_COLUMNS else WINDOW


def columns_spans(w: StepWindows) -> list[StepWindows]:
    """`COLUMNS` windows ``w`` (those `columns_windows` gives) as two: those of `WINDOW` steps
    (order `COLUMNS`), then those of `LONG` steps (order `LONG_COLUMNS`, told by their hash's
    low bit), each ``start`` moved to its first step (32 steps back for one near its episode's
    end: `columns_windows`); another order's ``w`` as it is."""
    if w.order != COLUMNS:
        return [w]
    long = (w.hashes & _U64(1)).astype(bool)
    n = w.lengths[w.episode]
    back = np.where((n >= LONG) & (n - w.start < LONG), LONG - WINDOW, 0)
    longs = kept(w, long)
    return [kept(w, ~long), replace(longs, start=longs.start - back[long], order=LONG_COLUMNS)]


def held_steps(order: int, steps: int, first: int, last: int) -> tuple[int, int]:
    """The first and last step (counted from 1, first <= last) of an episode of ``steps``
    steps that positions ``first`` to ``last`` (from 0) of its steps in ``order`` are."""
    k, phase, back = order_steps(order)
    if back:  # position p is the (m - 1 - p)-th of the m steps taken forward
        m = int(order_lengths(np.array([steps], dtype=np.int64), order)[0])
        first, last = m - 1 - last, m - 1 - first
    return phase + k * first + 1, phase + k * last + 1


def _reordered(lengths: npt.NDArray[np.int64], h: npt.NDArray[np.uint64],
               order: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint64]]:
    """The step hashes ``h`` of whole episodes of ``lengths`` steps, in ``order``."""
    k, phase, back = ORDERS[order]
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)
    local = np.arange(len(h), dtype=np.int64) - first
    if k > 1:  # every k-th step from step ``phase``
        h = h[(local >= phase) & ((local - phase) % k == 0)]
        lengths = order_lengths(lengths, order)
        first = np.repeat(np.cumsum(lengths) - lengths, lengths)
        local = np.arange(len(h), dtype=np.int64) - first
    if back:  # then in reverse, within each episode
        h = h[first + np.repeat(lengths, lengths) - 1 - local]
    return lengths, h


def _all_orders(
    ids: list[str], lengths: npt.NDArray[np.int64], h: npt.NDArray[np.uint64],
    q: _Columns | None, mark: bool, orders: int, f: npt.NDArray[np.uint64] | None = None,
    s: npt.NDArray[np.uint64] | None = None
) -> Iterator[tuple[StepWindows, npt.NDArray[np.bool_]]]:
    """`_marked` of the steps in each of the first ``orders`` `ORDERS`, then their `COLUMNS`
    windows (``q``: the quantised observations, a row a step, the columns' salts, their raw
    values and members, or None: `step_columns.columns`; of an image, ``f``, its
    `image_steps`, in their place: `image_windows`), then the windows without their clock
    columns (`_clocked`; ``clocks``: order 0 then `COLUMNS`, those windows with a clock only;
    their `COLUMNS` hashes from the same column series as the full ones: `columns_windows`)."""
    first, few = _marked(ids, lengths, h, mark)
    got = _clocked(q, lengths, first, mark, h if mark and orders > 1 else None, orders == 1)
    bare, untimed, stilled = (None, None, None) if got is None else got
    hashes, two = columns_windows(None if q is None else q[0], lengths, first.episode,
                                  first.start, mark, None if q is None else q[1], few, bare,
                                  stilled)
    if q is None and f is not None and len(f) >= WINDOW:  # an image (img34)
        hashes, two = image_windows(f, lengths, first.episode, first.start, WINDOW), few.copy()
    if not mark:
        two = few.copy()
    if bare is not None and mark:  # a window's marks are decided without its clocks
        few[bare.at] |= bare.f0
        two[bare.at] |= (bare.hc & _U64(1)).astype(bool) | (bare.hc == 0)
    yield first, few
    for order in range(1, orders):
        w, more = _marked(ids, *_reordered(lengths, h, order), mark)
        if untimed is not None:  # and so are its other orders' (rev31)
            more |= _few_steps(*_reordered(lengths, untimed, order))
        yield replace(w, order=order), more
    yield replace(first, hashes=hashes, order=COLUMNS), two
    if bare is not None:
        some = replace(first, episode=first.episode[bare.at], start=first.start[bare.at],
                       clocks=True)
        yield replace(some, hashes=bare.h0), bare.f0
        yield replace(some, hashes=bare.hc, order=COLUMNS), bare.fc
    if stilled is not None:  # the train side's: never held (copy35)
        some = replace(first, episode=first.episode[stilled.at], start=first.start[stilled.at],
                       still=True)
        never = np.ones(len(stilled.at), dtype=bool)
        yield replace(some, hashes=stilled.h0), never
        yield replace(some, hashes=stilled.hc, order=COLUMNS), never
    if s is not None:  # a stacked image's newest frames: the train side's (win36)
        yield from _stacked_windows(ids, lengths, s)


def _stacked_windows(ids: list[str], lengths: npt.NDArray[np.int64],
                     s: npt.NDArray[np.uint64]) -> Iterator[tuple[StepWindows,
                                                                  npt.NDArray[np.bool_]]]:
    """The windows of the episodes of a stacked image (``s``, a row a step: its newest
    frame's step hash and image hash, and whether its episode is a stack:
    `frame_stacks.FrameStacks`) each of whose steps after its first is, over their newest
    frames (order 0 and `COLUMNS`, ``still``: never held); nothing when none is."""
    ends = np.cumsum(lengths)
    bad = s[:, 2] == 0
    bad[ends - lengths] = False
    ok = ~np.logical_or.reduceat(bad, ends - lengths) & (lengths >= WINDOW)
    eps = np.flatnonzero(ok)
    if not len(eps):
        return
    sub = lengths[eps]
    rows = np.repeat(ends[eps] - sub - (np.cumsum(sub) - sub), sub) + np.arange(int(sub.sum()))
    w, _ = _marked([ids[e] for e in eps], sub, s[rows, 0], False)
    never = np.ones(len(w.hashes), dtype=bool)
    some = StepWindows(ids, lengths, eps[w.episode], w.start, w.hashes, still=True)
    yield some, never
    img = s[rows, 1]
    hc = image_windows(img, sub, w.episode, w.start, WINDOW)
    hc[~np.logical_and.reduceat(img != 0, np.cumsum(sub) - sub)[w.episode]] = 0  # no image
    yield replace(some, hashes=hc, order=COLUMNS), never


def clock_columns(raw: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    """Per run of `WINDOW` rows of ``raw`` (a row a step) and column: whether the column is a
    clock over the run (`window_clocks.clock_columns`: the step number, ``t / 500``, the time
    left, a time stamp)."""
    return clocks_over(raw, WINDOW)


@dataclass
class _Bare:
    """The windows of order 0 with a clock column, hashed without their clock columns
    (`_clocked`).

    Attributes:
        at: their indexes into the windows of order 0 (ascending).
        h0: their hashes as recorded (`_marked`; 0: none, every column a clock).
        f0: their marks (`_marked`: too few distinct steps).
        sets: the index into ``columns`` of each one's columns without its clocks, or -1:
            no `COLUMNS` hash (fewer than 2 columns left, or a set past `MAX_CLOCK_SETS`).
        columns: per set of clock columns (a row each), the columns it leaves out of
            `COLUMNS` and each column's salt (the members renumbered: `_columns`;
            `column_series.kept_sets`).
        hc: their `COLUMNS` hashes (`columns_windows` fills them in; 0: none).
        fc: their `COLUMNS` marks (idem; true: not compared as held out).
        still: of windows without standing columns (copy35), per episode the columns
            those of set -2 (no clock, a tensor: `_still_hashes`) leave out of `COLUMNS`.
    """

    at: npt.NDArray[np.int64]
    h0: npt.NDArray[np.uint64]
    f0: npt.NDArray[np.bool_]
    sets: npt.NDArray[np.int64]
    columns: tuple[npt.NDArray[np.bool_], npt.NDArray[np.uint64]]
    hc: npt.NDArray[np.uint64]
    fc: npt.NDArray[np.bool_]
    still: npt.NDArray[np.bool_] | None = None


def _clocked(q: _Columns | None, lengths: npt.NDArray[np.int64], first: StepWindows,
             mark: bool, h: npt.NDArray[np.uint64] | None = None, stand: bool = False
             ) -> tuple[_Bare | None, npt.NDArray[np.uint64] | None, _Bare | None] | None:
    """The windows ``first`` (order 0) with a clock column (`clock_columns`) hashed without
    every clock column of their first `WINDOW` steps (`_bare`), and the step hashes without
    each episode's most common set of them (with ``h``: `_bare`); then, of the windows of
    episodes with standing columns (`standing_columns`), those hashed without their clock
    and standing columns (``stand``, the train side: `standing_columns.left_out`, never
    compared as held out, copy35; a tensor's windows without a clock in one pass,
    `_still_hashes`). The held side (``mark``, not ``stand``) leaves a stacked episode's older
    frames out with its clocks (`frame_stacks.member_stacks`, win37). None when no window has
    either."""
    if q is None or not len(first.start) or q[2].shape[1] < 2:
        return None
    quantised, raw = q[0], q[2]
    still, nonzero = left_columns(quantised, lengths, WINDOW, q[3]) if stand else (None, None)
    older = None if stand or not mark else member_stacks(quantised, lengths, WINDOW, q[3])
    if still is None and older is None and not len(maybe_clocks(raw, WINDOW)):  # the rule
        return None
    starts = np.cumsum(lengths) - lengths
    clock = clock_columns(raw)[starts[first.episode] + first.start]
    if older is not None:  # a held stack's older frames, as its clocks (win37)
        clock = clock | older[first.episode]
    got = _bare(q, lengths, first, mark, clock, h)
    bare, untimed = (None, None) if got is None else got
    stilled = None
    if still is not None and nonzero is not None:
        at = first.episode
        drop = left_out(clock, still[at], nonzero[at])
        width = raw.shape[1]
        pure = ~clock.any(axis=1) & drop[:, :width].any(axis=1) & bool((q[3] == 0).all())
        drop[pure] = False  # those in one pass, the others by their sets
        stilled = (_bare(q, lengths, first, False, drop) or (None, None))[0]
        if pure.any():
            stilled = _still_hashes(quantised, lengths, first, pure, still, stilled, nonzero)
    return (None if bare is None and stilled is None else (bare, untimed, stilled))


def _still_hashes(q: npt.NDArray[np.uint32], lengths: npt.NDArray[np.int64],
                  first: StepWindows, pure: npt.NDArray[np.bool_],
                  still: npt.NDArray[np.bool_], some: _Bare | None,
                  nonzero: npt.NDArray[np.bool_]) -> _Bare:
    """``some`` (`_bare`'s windows without standing columns) and the windows ``pure`` (of a
    tensor, without a clock: their episode's standing columns ``still`` left out, a set an
    episode) in one pass: each step's hash without its episode's standing columns (its other
    values moved up: `row_hashes.kept_hashes`), the windows of those
    (`_marked`); their `COLUMNS` hashes set -2 (`_still_block`). Not a loop over the
    episodes: a batch of short episodes, each with its own standing columns, cost 17 times
    its windows so (an attacker's batch, copy35)."""
    idx = np.flatnonzero(pure)
    eps, local = np.unique(first.episode[idx], return_inverse=True)
    starts = np.cumsum(lengths) - lengths
    sub = lengths[eps]
    rows = np.repeat(starts[eps] - (np.cumsum(sub) - sub), sub) + np.arange(int(sub.sum()))
    h = kept_hashes(q, ~still[np.repeat(eps, sub)], rows)
    w, _ = _marked([first.episode_ids[e] for e in eps], sub, h, False)
    counts = np.maximum(sub - (WINDOW - 1), 0)
    h0 = w.hashes[(np.cumsum(counts) - counts)[local.reshape(-1)] + first.start[idx]]
    drop_c = np.zeros_like(still)  # per episode: `standing_columns.left_out`'s second half
    also = np.asarray(still & nonzero, dtype=bool)
    drop_c[eps] = also[eps] & np.asarray(also[eps].any(axis=1), dtype=bool)[:, None]
    none = np.zeros(0, dtype=np.int64)
    if some is None:
        some = _Bare(none, np.zeros(0, np.uint64), np.zeros(0, bool), none, _NO_SETS,
                     np.zeros(0, np.uint64), np.zeros(0, bool))
    order = np.argsort(np.concatenate((some.at, idx)), kind="stable")
    sets = np.where(drop_c[first.episode[idx]].any(axis=1), -2, -1)
    return _Bare(np.concatenate((some.at, idx))[order], np.concatenate((some.h0, h0))[order],
                 np.ones(len(order), bool), np.concatenate((some.sets, sets))[order],
                 some.columns, np.zeros(len(order), np.uint64), np.ones(len(order), bool),
                 drop_c)


def _still_block(bare: _Bare, lo: int, hi: int, acc: npt.NDArray[np.uint64],
                 v: npt.NDArray[np.uint64], r: npt.NDArray[np.int64], ep: npt.NDArray[np.int64],
                 room: npt.NDArray[np.int64], start: npt.NDArray[np.int64],
                 steps_of: npt.NDArray[np.int64]) -> None:
    """`_bare_block` of ``bare``'s windows of set -2 (`_still_hashes`) among windows ``lo`` to
    ``hi``, all at once (`standing_columns.in_place_of`; ``ep``: each row's episode), so
    that each window's hash is that over the columns kept."""
    a, b = np.searchsorted(bare.at, lo), np.searchsorted(bare.at, hi)
    these = a + np.flatnonzero(bare.sets[a:b] == -2)
    if not len(these) or bare.still is None:
        return
    w = bare.at[these]
    am, vm = in_place_of(acc, v, bare.still[ep])
    bare.hc[these] = _block(am, vm, r[w - lo], room[w], start[w], steps_of[w], None, None,
                            False)[0]


def _bare(q: _Columns, lengths: npt.NDArray[np.int64], first: StepWindows, mark: bool,
          clock: npt.NDArray[np.bool_], h: npt.NDArray[np.uint64] | None = None
          ) -> tuple[_Bare, npt.NDArray[np.uint64] | None] | None:
    """The windows ``first`` (order 0) with a column left out (``clock``, a row a window:
    its clock columns, `clock_columns`; or twice as many, `standing_columns.left_out`: those
    left out in order 0, then in `COLUMNS`) hashed without them (`_Bare`: their `COLUMNS` hashes are
    left to `columns_windows`, from the column series it computes for the full ones), the
    marks decided without them; None when no window has one. A copy of a held-out
    episode with a clock added (the train side) then holds the held episode's windows, and a
    held-out episode recorded with one holds the windows of a copy without it. Every set of
    clock columns at once (`_tensor_bare`, a tensor's or a Dict's: a copier may put the clock
    in another place in each episode, or in each window): each episode's most common set
    over its steps, the other windows over their own rows (`_kept_windows`: a copier who adds
    more sets before the copy hid it after them, rev31); a `COLUMNS` hash for the windows of
    an episode's `MAX_CLOCK_SETS` most common sets only (`column_series.kept_sets`), the
    others' 0 (none). With ``h`` (the step hashes,
    of the held side), also the step hashes without each episode's most common set of clock
    columns (the others' as they are; else None), whose windows in the other `ORDERS` decide
    those orders' marks (`_few_steps`: rev31)."""
    quantised, _, raw, member = q
    split = clock.shape[1] > raw.shape[1]
    pos = np.flatnonzero(clock.any(axis=1))
    if not len(pos):
        return None
    sets, key = clock_sets(clock[pos])
    pair, inv, count = np.unique(first.episode[pos] * len(sets) + key, return_inverse=True,
                                 return_counts=True)  # (episode, set), in that order
    ep = pair // len(sets)
    by = np.lexsort((-count, ep))  # each episode's sets, the most common first
    rank = np.empty(len(by), dtype=np.int64)
    rank[by] = np.arange(len(by)) - np.searchsorted(ep[by], ep[by])
    rare = rank[inv.reshape(-1)] >= MAX_CLOCK_SETS
    top = np.full(len(lengths), -1, dtype=np.int64)  # each episode's most common set
    top[ep[rank == 0]] = (pair % len(sets))[rank == 0]
    untimed = None if h is None else h.copy()
    width = raw.shape[1]
    bare = _Bare(pos, np.zeros(len(pos), np.uint64), np.ones(len(pos), bool),
                 np.full(len(pos), -1, np.int64), _NO_SETS, np.zeros(len(pos), np.uint64),
                 np.ones(len(pos), bool))
    _tensor_bare(bare, quantised, lengths, first, mark, ~clock[pos][:, :width], sets, key,
                 top, untimed, member)  # every set at once (rows36; a Dict's too, dict36)
    index, left, salts = kept_sets(sets, np.bincount(key[~rare], minlength=len(sets)) > 0,
                                   width, split, member)
    bare.sets[~rare] = index[key[~rare]]  # those past `MAX_CLOCK_SETS`: no `COLUMNS` hash
    bare.columns = (left, salts)
    return bare, untimed


def _tensor_bare(bare: _Bare, quantised: npt.NDArray[np.uint32], lengths: npt.NDArray[np.int64],
                 first: StepWindows, mark: bool, keep: npt.NDArray[np.bool_],
                 sets: npt.NDArray[np.uint8], key: npt.NDArray[np.int64],
                 top: npt.NDArray[np.int64], untimed: npt.NDArray[np.uint64] | None,
                 member: npt.NDArray[np.int64]) -> None:
    """`_bare`'s order 0 hashes and marks of a tensor's windows (``keep``: each one's columns
    kept; ``key``: its set), every set at once (rows36): each episode's steps without its most
    common set (``top``; ``untimed``), the windows of that set from them; the others' over
    their own rows (`_kept_windows`). Not a pass a set: an attacker's batch whose every
    window has its own set of clock columns paid a Python call a window so (rev32). Of a
    Dict or Tuple space (``member``) the same, each row's members renumbered (dict36)."""
    starts = np.cumsum(lengths) - lengths
    eps = np.flatnonzero(top >= 0)
    sub = lengths[eps]
    rows = np.repeat(starts[eps] - (np.cumsum(sub) - sub), sub) + np.arange(int(sub.sum()))
    tk = ~np.unpackbits(sets[top[eps]], axis=1)[:, : keep.shape[1]].astype(bool)
    ok = np.repeat(tk.any(axis=1), sub)
    hk = np.zeros(len(rows), dtype=np.uint64)  # nothing but clocks: every step alike
    hk[ok] = kept_hashes(quantised, np.repeat(tk, sub, axis=0)[ok], rows[ok], member)
    if untimed is not None:
        untimed[rows] = hk
    w, few = _marked([""] * len(eps), sub, hk, mark)
    wep = first.episode[bare.at]
    mine = np.flatnonzero((key == top[wep]) & keep.any(axis=1))
    counts = np.maximum(sub - (WINDOW - 1), 0)
    at = (np.cumsum(counts) - counts)[np.searchsorted(eps, wep[mine])] + first.start[
        bare.at[mine]]
    bare.h0[mine], bare.f0[mine] = w.hashes[at], few[at]
    some = np.flatnonzero((key != top[wep]) & keep.any(axis=1))
    if len(some):
        bare.h0[some], bare.f0[some] = _kept_windows(
            quantised, keep[some], key[some], starts[wep[some]] + first.start[bare.at[some]], mark,
            member)


def _kept_windows(quantised: npt.NDArray[np.uint32], keep: npt.NDArray[np.bool_],
                  key: npt.NDArray[np.int64], at: npt.NDArray[np.int64], mark: bool,
                  member: npt.NDArray[np.int64] | None = None
                  ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
    """The order 0 hashes and marks (`_marked`) of the windows of the `WINDOW` rows from each
    of rows ``at`` of ``quantised``, each of its columns ``keep`` (a row a window; ``key``: its
    set) alone: each run of overlapping or adjacent windows of one set hashed once, so that
    the cost is at most `WINDOW` rows a window, whatever the sets of clock columns an episode
    has (rev31); all sets in one pass (`row_hashes.kept_hashes`: a tensor's, rows36; with
    ``member``, each column's member, a Dict or Tuple space's, dict36)."""
    order = np.lexsort((at, key))
    a, k = at[order], key[order]
    new = np.ones(len(a), dtype=bool)
    new[1:] = (k[1:] != k[:-1]) | (a[1:] > a[:-1] + WINDOW)
    heads = np.flatnonzero(new)
    seg = np.cumsum(new) - 1
    begin = a[heads]
    lengths = np.maximum.reduceat(a + WINDOW, heads) - begin
    offset = np.cumsum(lengths) - lengths
    rows = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(begin - offset, lengths)
    h = kept_hashes(quantised, np.repeat(keep[order[heads]], lengths, axis=0), rows, member)
    w, few = _marked([""] * len(heads), lengths, h, mark)
    counts = lengths - (WINDOW - 1)
    idx = (np.cumsum(counts) - counts)[seg] + a - begin[seg]
    hashes, marks = np.empty(len(a), dtype=np.uint64), np.empty(len(a), dtype=bool)
    hashes[order], marks[order] = w.hashes[idx], few[idx]
    return hashes, marks


def columns_windows(
    q: npt.NDArray[np.uint32] | None, lengths: npt.NDArray[np.int64],
    episode: npt.NDArray[np.int64], start: npt.NDArray[np.int64], mark: bool = True,
    salts: npt.NDArray[np.uint64] | None = None, steps: npt.NDArray[np.bool_] | None = None,
    bare: _Bare | None = None, stilled: _Bare | None = None
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
    """The `COLUMNS` hash of each window (``start`` steps into ``episode``, of `_marked`) of
    the steps of episodes of ``lengths`` steps whose quantised observations are ``q`` (a row
    a step): each column's series over the window's steps hashed (a polynomial of its mixed
    values, unsalted by its place; ``salts``: by its Dict or Tuple member, `_columns`), the
    distinct ones summed mixed, so that permuting or repeating columns keeps it. A window
    whose 16 steps take few values (`column_series.few_values`: one-hot, a grid) is hashed over the
    `LONG` steps from its first (or, near its episode's end, up to its last) instead, and
    has no hash when its episode has neither, but for the window at the first step of an
    episode of `MIN_WHOLE` to `LONG` - 1 steps: over all its steps (copy31); a hash's low
    bit says which (1: over `LONG` steps or the whole episode, `columns_spans`); and per
    window whether it is not compared as held out: few values and not
    `column_series.informative` over those steps, or else too few
    distinct steps (``steps``, of `_marked`; without ``mark``, all false: the train side).
    0 and true when ``q`` is None (no such observations). ``bare`` (`_clocked`, of these
    windows): its windows' hashes without their clock columns are filled in from the same
    column series (a column's series does not depend on the others: only the set, the
    salts and the few values change), one polynomial pass for both (fuse34); ``stilled``
    the same, without standing columns too (`standing_columns.left_out`, copy35)."""
    m, n = len(episode), int(lengths.sum())
    if q is None or n < WINDOW or not m:
        return np.zeros(m, dtype=np.uint64), np.ones(m, dtype=bool)
    at = (np.cumsum(lengths) - lengths)[episode] + start  # the windows kept, ascending
    room = lengths[episode] - start  # steps from each window's first to its episode's end
    steps_of = lengths[episode]
    hashes, few = np.empty(m, dtype=np.uint64), np.zeros(m, dtype=bool)
    salted = salts is not None and bool(salts.any())
    for lo in range(0, m, _COLUMN_BLOCK):  # a block of windows at a time: bounded memory
        hi = min(lo + _COLUMN_BLOCK, m)
        rows = at[lo:hi]
        base, top = max(int(rows[0]) - (LONG - WINDOW), 0), min(int(rows[-1]) + LONG, n)
        with np.errstate(over="ignore"):
            v = splitmix64(q[base:top].astype(np.uint64) ^ _COLUMN_SALT)
            acc = np.zeros((len(v) - WINDOW + 1, q.shape[1]), dtype=np.uint64)
            for k in range(WINDOW):
                acc = acc * _POLY + v[k : k + len(acc)]
        part = slice(lo, hi)
        hashes[part], more = _block(acc ^ salts[None, :] if salted else acc,  # type: ignore[index]
                                    v, rows - base, room[part], start[part], steps_of[part],
                                    salts if salted else None,
                                    None if steps is None else steps[part], mark)
        if mark:
            few[part] = more
        if bare is not None:
            _bare_block(bare, lo, hi, acc, v, rows - base, room, start, steps_of, mark)
        if stilled is not None:  # idem without standing columns (copy35), never held
            _bare_block(stilled, lo, hi, acc, v, rows - base, room, start, steps_of, False)
            ep = np.searchsorted(np.cumsum(lengths), np.arange(base, top), side="right")
            _still_block(stilled, lo, hi, acc, v, rows - base, ep, room, start, steps_of)
    return hashes, few


def _bare_block(bare: _Bare, lo: int, hi: int, acc: npt.NDArray[np.uint64],
                v: npt.NDArray[np.uint64], r: npt.NDArray[np.int64],
                room: npt.NDArray[np.int64], start: npt.NDArray[np.int64],
                steps_of: npt.NDArray[np.int64], mark: bool) -> None:
    """`columns_windows`'s hashes of ``bare``'s windows among windows ``lo`` to ``hi`` (the
    block whose column series are ``acc``, mixed values ``v``, the windows' rows ``r``), each
    over its columns without its clocks, their salts renumbered: as computed over those
    columns alone. Each set's windows take the rows from 32 before to 48 after each of them
    (only those: a set may be one window of each of thousands of episodes, fuse34)."""
    a, b = np.searchsorted(bare.at, lo), np.searchsorted(bare.at, hi)
    ids, count = np.unique(bare.sets[a:b], return_counts=True)
    few = a + np.flatnonzero(np.isin(bare.sets[a:b], ids[(ids >= 0) & (count < _FEW_WINDOWS)]))
    if len(few):  # sets of few windows, at once (rows36; a Dict's too, dict36)
        _windows_block(bare, few, lo, acc, v, r, room, start, steps_of, mark)
    for s in ids[(ids >= 0) & (count >= _FEW_WINDOWS)].tolist():
        these = a + np.flatnonzero(bare.sets[a:b] == s)
        w = bare.at[these]
        cols = np.flatnonzero(~bare.columns[0][s])
        salts = bare.columns[1][s, cols]
        rs = r[w - lo]  # ascending, as are the runs of rows below
        first, last = np.maximum(rs - (LONG - WINDOW), 0), np.minimum(rs + LONG, len(v))
        new = np.ones(len(rs), dtype=bool)
        new[1:] = first[1:] > last[:-1]  # the runs of rows, overlapping ones joined
        ends = last[np.append(np.flatnonzero(new)[1:] - 1, len(rs) - 1)]
        runs = ends - first[new]
        part: slice | npt.NDArray[np.int64] = cols
        if int(cols[-1] - cols[0]) + 1 == len(cols):  # the clocks first or last: no copy
            part = slice(int(cols[0]), int(cols[-1]) + 1)
        if len(runs) == 1:  # the rule: one set, contiguous windows
            f, e = int(first[0]), int(ends[0])
            sub, vs, at = acc[f : e - WINDOW + 1, part], v[f:e, part], rs - f
        else:
            rows = np.repeat(first[new] - np.cumsum(runs) + runs, runs) + np.arange(
                int(runs.sum()))
            sub = acc[np.minimum(rows, len(acc) - 1)][:, part]
            vs, at = v[rows][:, part], np.searchsorted(rows, rs)
        salted = bool(salts.any())
        bare.hc[these], more = _block(sub ^ salts[None, :] if salted else sub, vs, at,
                                      room[w], start[w], steps_of[w],
                                      salts if salted else None, bare.f0[these], mark)
        bare.fc[these] = more if mark else False


def _windows_block(bare: _Bare, these: npt.NDArray[np.int64], lo: int,
                   acc: npt.NDArray[np.uint64], v: npt.NDArray[np.uint64],
                   r: npt.NDArray[np.int64], room: npt.NDArray[np.int64],
                   start: npt.NDArray[np.int64], steps_of: npt.NDArray[np.int64],
                   mark: bool) -> None:
    """`_bare_block` of windows ``these``, whatever their sets, at once: each window's rows
    copied, its columns left out (``bare.columns``) given its first kept column's series and
    salt (`in_place_of`: a set of series holds a repeat once; whether steps are alike does
    not change; a Dict's salts are its set's, dict36); its own `WINDOW` rows first, then, of
    few values (`column_series.few_values`), the 80 around it (`LONG` - `WINDOW` before,
    `LONG` from it) that `_block` reads."""
    ext, span, width = LONG - WINDOW, 2 * LONG - WINDOW, v.shape[1]
    left, salts = bare.columns
    step = max(1, (1 << 21) // (WINDOW * width))
    for i in range(0, len(these), step):
        t = these[i : i + step]
        rs, mask = r[bare.at[t] - lo], left[bare.sets[t]]
        first = np.argmax(~mask, axis=1)[:, None]
        vr = v[rs[:, None] + np.arange(WINDOW)]  # a window, its rows, its columns
        vm = np.where(mask[:, None, :], np.take_along_axis(vr, first[:, None, :], axis=2), vr)
        short = few_values(vm.reshape(-1, width), WINDOW, MIN_DISTINCT)[::WINDOW]
        s = salts[bare.sets[t]]
        s = np.where(mask, np.take_along_axis(s, first, axis=1), s)  # the salts, in place
        ar = acc[rs]
        bare.hc[t] = set_hash(np.where(mask, np.take_along_axis(ar, first, axis=1), ar) ^ s,
                              _COLUMN_SALT) & ~_U64(1)
        bare.fc[t] = bare.f0[t] if mark else False
        t, s = t[short], s[short]
        step_ = max(1, (1 << 21) // (span * width))
        for j in range(0, len(t), step_):
            u, su = t[j : j + step_], s[j : j + step_]
            w = bare.at[u]
            rows = np.clip((r[w - lo] - ext)[:, None] + np.arange(span), 0, len(v) - 1).ravel()
            am, vm2 = in_place_of(acc[np.minimum(rows, len(acc) - 1)], v[rows],
                                  np.repeat(left[bare.sets[u]], span, axis=0))
            salted = bool(su.any())
            bare.hc[u], more = _block(am ^ np.repeat(su, span, axis=0) if salted else am, vm2,
                                      np.arange(len(u)) * span + ext, room[w], start[w],
                                      steps_of[w], su if salted else None, bare.f0[u], mark)
            bare.fc[u] = more if mark else False


def _block(acc: npt.NDArray[np.uint64], v: npt.NDArray[np.uint64], r: npt.NDArray[np.int64],
           room: npt.NDArray[np.int64], start: npt.NDArray[np.int64],
           steps_of: npt.NDArray[np.int64], salts: npt.NDArray[np.uint64] | None,
           steps: npt.NDArray[np.bool_] | None, mark: bool
           ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
    """`columns_windows` of windows at rows ``r`` of the column series ``acc`` (salted by
    ``salts``: a column's, or a row a window's) of mixed values ``v`` (a row a step), each
    ``room`` steps from its episode's end, ``start`` from its start, of an episode of
    ``steps_of`` steps: the hashes and marks (``mark``)."""
    ext = LONG - WINDOW
    short = few_values(v, WINDOW, MIN_DISTINCT)[r]
    ahead = short & (room >= LONG)
    longs = np.flatnonzero(short & (ahead | (start >= ext)))
    whole = np.flatnonzero(short & (steps_of >= MIN_WHOLE) & (steps_of < LONG) & (start == 0))
    first = r[longs] - np.where(ahead[longs], 0, ext)  # each long window's first row
    wide = acc[first]
    with np.errstate(over="ignore"):
        for k in range(1, LONG // WINDOW):  # the polynomial over LONG steps, in parts
            wide = wide * _POLY_WINDOW + acc[first + k * WINDOW]
    got = set_hash(acc[r], _COLUMN_SALT) & ~_U64(1)
    got[short] = 0
    got[longs] = set_hash(wide, _LONG_SALT) | _U64(1)
    more = short.copy()
    if mark:
        if steps is not None:
            more |= steps
        more[longs] = ~informative(v, first, LONG, MIN_DISTINCT, MIN_REVISITS)
    for n_ in np.unique(steps_of[whole]).tolist():  # an episode shorter than LONG: whole
        these = whole[steps_of[whole] == n_]
        wide = np.zeros((len(these), v.shape[1]), dtype=np.uint64)
        with np.errstate(over="ignore"):
            for k in range(n_):
                wide = wide * _POLY + v[r[these] + k]
        if salts is not None:  # a column's, or a window's (`_windows_block`)
            wide ^= salts[None, :] if salts.ndim == 1 else salts[these]
        got[these] = set_hash(wide, _LONG_SALT) | _U64(1)
        if mark:
            more[these] = ~informative(v, r[these], n_, MIN_DISTINCT, MIN_REVISITS)
    return got, more


def _marked(
    ids: list[str], lengths: npt.NDArray[np.int64], h: npt.NDArray[np.uint64], mark: bool
) -> tuple[StepWindows, npt.NDArray[np.bool_]]:
    """Every window of whole episodes (``lengths`` steps each, ``h`` their step hashes in
    order), in order, and per window whether it has fewer than `MIN_DISTINCT` distinct steps
    (with ``mark``; else all false)."""
    n = len(h)
    empty = np.zeros(0, dtype=np.int64)
    if n < WINDOW:
        return (StepWindows(ids, lengths, empty, empty, np.zeros(0, dtype=np.uint64)),
                np.zeros(0, dtype=bool))
    m = n - WINDOW + 1
    acc = np.zeros(m, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(WINDOW):  # a polynomial over the (mixed) step hashes: order matters
            acc = acc * _POLY + h[k : k + m]
    hashes = splitmix64(acc)
    first = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    episode = np.repeat(np.arange(len(ids), dtype=np.int64), lengths)[:m]
    start = np.arange(m, dtype=np.int64) - first[episode]
    keep = start + WINDOW <= lengths[episode]  # not across two episodes
    few = _few_runs(h) if mark else np.zeros(m, dtype=bool)
    return StepWindows(ids, lengths, episode[keep], start[keep], hashes[keep]), few[keep]


def _few_runs(h: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
    """Per run of `WINDOW` step hashes ``h`` (at least `WINDOW`): whether it has fewer than
    `MIN_DISTINCT` distinct steps."""
    few = np.zeros(len(h) - WINDOW + 1, dtype=bool)
    # Only a window holding a step seen again within it can have few distinct steps: those
    # alone are sorted and counted.
    again = np.zeros(len(h), dtype=bool)
    for d in range(1, WINDOW):
        again[d:] |= h[d:] == h[:-d]
    maybe = np.flatnonzero(np.lib.stride_tricks.sliding_window_view(again, WINDOW)
                           [:, 1:].any(axis=1))
    runs = np.sort(np.lib.stride_tricks.sliding_window_view(h, WINDOW)[maybe], axis=1)
    few[maybe] = (runs[:, 1:] != runs[:, :-1]).sum(axis=1) + 1 < MIN_DISTINCT
    return few


def _few_steps(lengths: npt.NDArray[np.int64], h: npt.NDArray[np.uint64]
               ) -> npt.NDArray[np.bool_]:
    """`_marked`'s marks of the windows of whole episodes of ``lengths`` steps whose step
    hashes are ``h``, without their hashes."""
    if len(h) < WINDOW:
        return np.zeros(0, dtype=bool)
    ends = np.cumsum(lengths)
    last = np.repeat(ends, lengths)[: len(h) - WINDOW + 1]  # each run's episode's end
    return _few_runs(h)[np.arange(len(last)) + WINDOW <= last]


def iter_marked(batches: Iterable[pa.RecordBatch], *, orders: bool = False) -> Iterator[
        tuple[StepWindows, npt.NDArray[np.bool_]]]:
    """Every window of the episodes of step record batches, one `StepWindows` per batch of
    whole episodes (``orders``: and per other order of `ORDERS`, after it; then its
    `COLUMNS` windows), each window with whether it has too few distinct steps for a
    held-out one (`MIN_DISTINCT`; `COLUMNS`: or no such hash, `columns_windows`): what
    `iter_windows` gives with ``held`` is the windows not so marked. Every episode's windows
    are there, each start from 0 to its length (in that order) - `WINDOW`."""
    return _iter(batches, True, len(ORDERS) if orders else 1)


def iter_windows(batches: Iterable[pa.RecordBatch], *, held: bool = False) -> Iterator[StepWindows]:
    """The windows of the episodes of step record batches (episodes contiguous, steps in
    order, as schema validation guarantees), one `StepWindows` per batch of whole episodes;
    an episode may run across record batches. Nothing for steps without numeric
    observations; after each its `COLUMNS` windows (those it has). ``held``: leave out
    windows of too few distinct steps (`MIN_DISTINCT`), add the windows of the steps in
    every other order of `ORDERS`, and hold the `COLUMNS` windows of `LONG` steps apart
    (`columns_spans`)."""
    for w, few in _iter(batches, held, len(ORDERS) if held else 1):
        if held:
            if not w.still:
                yield from columns_spans(kept(w, ~few))
        else:
            yield columns_kept(w)


def columns_kept(w: StepWindows) -> StepWindows:
    """``w``, but of `COLUMNS` windows, and of windows without their clocks, those with a
    hash (not 0: `columns_windows`, `_clocked`)."""
    return kept(w, w.hashes != 0) if w.order == COLUMNS or w.clocks or w.still else w


_Columns = Columns


def _iter(batches: Iterable[pa.RecordBatch], mark: bool, orders: int) -> Iterator[tuple[
        StepWindows, npt.NDArray[np.bool_]]]:
    carry_id: str | None = None
    carry = np.zeros(0, dtype=np.uint64)
    carry_q: _Columns | None = None
    carry_f: npt.NDArray[np.uint64] | None = None
    stacks: FrameStacks | None = None
    for batch in one_width(observed(batches)):
        obs = batch.column("obs")
        h = step_hashes(obs)
        if h is None:
            continue
        q = columns(obs, MAX_COLUMNS)
        f = None if q is not None else image_steps(obs, batch.schema.field("obs"), MAX_COLUMNS)
        if stacks is None and orders == 1:
            stacks = FrameStacks(batch.schema.field("obs"), MAX_COLUMNS)
        eids = batch.column("episode_id").cast(pa.string())
        change = np.flatnonzero(np.asarray(
            pc.not_equal(eids[1:], eids[:-1]).to_numpy(zero_copy_only=False), dtype=bool)) + 1
        firsts = np.concatenate(([0], change)).astype(np.int64)
        ids = [str(eids[int(i)].as_py()) for i in firsts]
        lengths = np.diff(np.concatenate((firsts, [len(h)]))).astype(np.int64)
        goes_on = ids[0] == carry_id
        s = None if stacks is None else stacks.add(obs, firsts, goes_on)
        if carry_id is not None and _apart(carry_q, q, carry_f, f):
            # the episode under way is of other columns than the batch's others: alone (it is
            # ragged when it goes on here), so that theirs are as in any other cut (frames43)
            n = len(carry) + (int(lengths[0]) if goes_on else 0)
            if goes_on:
                carry = np.concatenate((carry, h[: lengths[0]]))
                carry_q = carry_f = None
            if not goes_on or len(ids) > 1:
                yield from _all_orders([carry_id], np.array([n], dtype=np.int64), carry,
                                       carry_q, mark, orders, carry_f,
                                       None if s is None else s[:n])
                s = None if s is None else s[n:]
                if goes_on:
                    skip = int(lengths[0])
                    h, f, ids, lengths = h[skip:], None if f is None else f[skip:], ids[1:], \
                        lengths[1:]
                    q = None if q is None else (q[0][skip:], q[1], q[2][skip:], q[3])
            else:  # the batch is of that episode alone: on
                h, q, f = carry, None, None
                lengths[0] = n
            carry_id = None
        if carry_id is not None:
            h, q = np.concatenate((carry, h)), joined(carry_q, q)
            f = None if f is None or carry_f is None else np.concatenate((carry_f, f))
            if ids[0] == carry_id:
                lengths[0] += len(carry)
            else:
                ids.insert(0, carry_id)
                lengths = np.concatenate(([len(carry)], lengths))
        cut = len(h) - int(lengths[-1])
        carry_id, carry = ids[-1], h[cut:]
        carry_q = None if q is None else (q[0][cut:], q[1], q[2][cut:], q[3])
        carry_f = None if f is None else f[cut:]
        if len(ids) > 1:
            yield from _all_orders(ids[:-1], lengths[:-1], h[:cut], None if q is None else (
                q[0][:cut], q[1], q[2][:cut], q[3]), mark, orders, None if f is None else f[:cut],
                s)
    if carry_id is not None:
        yield from _all_orders([carry_id], np.array([len(carry)], dtype=np.int64), carry,
                               carry_q, mark, orders, carry_f,
                               None if stacks is None else stacks.ended())


def _apart(a: _Columns | None, b: _Columns | None, fa: npt.NDArray[np.uint64] | None,
           fb: npt.NDArray[np.uint64] | None) -> bool:
    """Whether the columns ``a`` (or image steps ``fa``) of the steps before a record batch
    and ``b`` (``fb``) of the batch's cannot be joined though one of them is there."""
    return ((a is not None or b is not None) and joined(a, b) is None) or (
        (fa is None) != (fb is None))
