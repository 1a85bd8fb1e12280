"""The windows without their clock columns in one pass (fuse34): `step_windows._clocked` and
`columns_windows` compute them from the column series of the full `COLUMNS` windows, and group
the windows by their set of clock columns with a sort of words; the windows, hashes and marks
are those of clock33's two passes with rev31's changes (kept here only as the reference,
`two_pass`), byte for byte, over random episodes with 0, 1 or 2 clocks (appended, inserted, a
Dict member; the step number, ``t / 500``, the time left), few-valued and continuous, short and
long, the clock in another place in each episode, cut in record batches anywhere."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from unittest import mock

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trajledger.ledger import (
    frame_stacks,
    row_hashes,
    standing_columns,
    step_columns,
    step_windows,
    window_clocks,
)
from trajledger.ledger.episode_vectors import splitmix64
from trajledger.ledger.step_windows import COLUMNS, MAX_CLOCK_SETS, WINDOW, StepWindows

U64 = np.uint64


def rows_windows(quantised: npt.NDArray[np.uint32], keep: npt.NDArray[np.bool_],
                  ranks: npt.NDArray[np.int64], at: npt.NDArray[np.int64], mark: bool
                  ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
    """rev31's `_rows_windows`, a call a set (the reference; rows36 hashes all sets at once):
    the order 0 hashes and marks (`_marked`) of the windows of the `WINDOW` rows from each
    of rows ``at`` (ascending) of ``quantised``, of its columns ``keep`` (their members
    ``ranks``): each run of overlapping or adjacent windows hashed once, so that the cost is
    at most `WINDOW` rows a window, whatever the sets of clock columns an episode has."""
    new = np.concatenate(([True], at[1:] > at[:-1] + WINDOW))
    heads = np.flatnonzero(new)
    seg = np.cumsum(new) - 1
    begin = at[heads]
    lengths = np.maximum.reduceat(at + WINDOW, heads) - begin
    offset = np.cumsum(lengths) - lengths
    rows = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(begin - offset, lengths)
    hk = row_hashes.matrix_hashes(np.ascontiguousarray(quantised[rows][:, keep]), ranks)
    w, few = step_windows._marked([""] * len(heads), lengths, hk, mark)
    counts = lengths - (WINDOW - 1)
    idx = (np.cumsum(counts) - counts)[seg] + at - begin[seg]
    return w.hashes[idx], few[idx]


def reference_clocked(q: step_windows._Columns | None, lengths: npt.NDArray[np.int64],
                      first: StepWindows, mark: bool, h: npt.NDArray[np.uint64] | None,
                      drop: npt.NDArray[np.bool_] | None = None, stacks: bool = False
                      ) -> tuple[tuple[npt.NDArray[np.int64], npt.NDArray[np.uint64],
                                       npt.NDArray[np.bool_], npt.NDArray[np.uint64],
                                       npt.NDArray[np.bool_]],
                                 npt.NDArray[np.uint64] | None] | None:
    """clock33's `_clocked` with rev31's changes (its sets past `MAX_CLOCK_SETS` in order 0
    over their own rows; the step hashes without each episode's most common set, ``h``), two
    passes as they were: the sets by ``np.unique`` of rows, each set's `COLUMNS` windows
    computed again over its columns alone (a second polynomial pass). ``drop``: the columns
    left out of each window instead of its clocks (`standing_columns.left_out`, copy35).
    ``stacks`` (the held side, win37): a stacked episode's older frames left out with its
    clocks (`frame_stacks.member_stacks`)."""
    if q is None or not len(first.start) or q[2].shape[1] < 2:
        return None
    quantised, _, raw, member = q
    older = (frame_stacks.member_stacks(quantised, lengths, WINDOW, member)
             if stacks and drop is None else None)
    if drop is None and older is None and not len(window_clocks.maybe_clocks(raw, WINDOW)):
        return None
    starts = np.cumsum(lengths) - lengths
    clock = (step_windows.clock_columns(raw)[starts[first.episode] + first.start]
             if drop is None else drop)
    if older is not None:
        clock = clock | older[first.episode]
    width = raw.shape[1]
    pos = np.flatnonzero(clock.any(axis=1))
    if not len(pos):
        return None
    sets, key = np.unique(np.packbits(clock[pos], axis=1), axis=0, return_inverse=True)
    key = key.reshape(-1)
    pairs, inv, count = np.unique(np.stack((first.episode[pos], key), axis=1), axis=0,
                                  return_inverse=True, return_counts=True)
    by = np.lexsort((-count, pairs[:, 0]))
    rank = np.empty(len(by), dtype=np.int64)
    rank[by] = np.arange(len(by)) - np.searchsorted(pairs[by, 0], pairs[by, 0])
    rare = rank[inv.reshape(-1)] >= MAX_CLOCK_SETS
    h0, hc = np.zeros(len(pos), np.uint64), np.zeros(len(pos), np.uint64)
    f0, fc = np.ones(len(pos), bool), np.ones(len(pos), bool)
    top = np.full(len(lengths), -1, dtype=np.int64)
    top[pairs[rank == 0, 0]] = pairs[rank == 0, 1]
    untimed = None if h is None else h.copy()
    for k in np.unique(key).tolist():
        bits = np.unpackbits(sets[k]).astype(bool)
        keep = ~bits[:width]
        kept_c = keep if drop is None else ~bits[width : 2 * width]
        if not keep.any():
            if untimed is not None:
                untimed[np.repeat(top == k, lengths)] = 0
            continue
        these = np.flatnonzero(key == k)
        ranks = np.unique(member[keep], return_inverse=True)[1].astype(np.int64).reshape(-1)
        few_sets = these[rare[these]]
        if len(few_sets):
            at = starts[first.episode[pos[few_sets]]] + first.start[pos[few_sets]]
            h0[few_sets], f0[few_sets] = rows_windows(quantised, keep, ranks, at,
                                                                    mark)
        these = these[~rare[these]]
        if not len(these):
            continue
        sel = pos[these]
        eps, local = np.unique(first.episode[sel], return_inverse=True)
        rows = np.concatenate([np.arange(starts[e], starts[e] + lengths[e]) for e in eps])
        sub = lengths[eps]
        qk = np.ascontiguousarray(quantised[rows][:, keep])
        hk = row_hashes.matrix_hashes(qk, ranks)
        w, few = step_windows._marked([first.episode_ids[e] for e in eps], sub, hk, mark)
        if untimed is not None:
            mine = np.repeat(top[eps] == k, sub)
            untimed[rows[mine]] = hk[mine]
        counts = np.maximum(sub - (WINDOW - 1), 0)
        at = (np.cumsum(counts) - counts)[local.reshape(-1)] + first.start[sel]
        h0[these], f0[these] = w.hashes[at], few[at]
        qc = np.ascontiguousarray(quantised[rows][:, kept_c])
        if 2 <= qc.shape[1] < width:
            ranks = np.unique(member[kept_c], return_inverse=True)[1].astype(np.int64).reshape(-1)
            salts = np.where(ranks > 0, splitmix64(ranks.astype(np.uint64)), U64(0))
            hc[these], fc[these] = step_windows.columns_windows(
                qc, sub, local.reshape(-1), first.start[sel], mark, salts, few[at])
    return (pos, h0, f0, hc, fc), untimed


def reference_still(q: step_windows._Columns | None, lengths: npt.NDArray[np.int64],
                    first: StepWindows) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint64],
                                                 npt.NDArray[np.uint64]] | None:
    """The windows without their standing and clock columns (copy35): `reference_clocked`
    of the columns `standing_columns.left_out` gives, unmarked (the train side's)."""
    if q is None or not len(first.start) or q[2].shape[1] < 2:
        return None
    still, nonzero = frame_stacks.left_columns(q[0], lengths, WINDOW, q[3])  # win36: or stacked
    if still is None or nonzero is None:
        return None
    starts = np.cumsum(lengths) - lengths
    clock = step_windows.clock_columns(q[2])[starts[first.episode] + first.start]
    drop = standing_columns.left_out(clock, still[first.episode], nonzero[first.episode])
    # The windows without a clock (of a tensor) are one set an episode, apart from the
    # others: those past `MAX_CLOCK_SETS` are counted without them.
    pure = ~clock.any(axis=1) & drop[:, : q[2].shape[1]].any(axis=1) & bool((q[3] == 0).all())
    parts = [reference_clocked(q, lengths, first, False, None, np.where(p[:, None], drop, False))
             for p in (pure, ~pure)]
    got = [g[0] for g in parts if g is not None]
    if not got:
        return None
    at, h0, hc = (np.concatenate([g[j] for g in got]) for j in (0, 1, 3))
    order = np.argsort(at, kind="stable")
    return at[order], h0[order], hc[order]


def two_pass(ids: list[str], lengths: npt.NDArray[np.int64], h: npt.NDArray[np.uint64],
             q: step_windows._Columns | None, mark: bool, orders: int,
             f: npt.NDArray[np.uint64] | None = None, s: npt.NDArray[np.uint64] | None = None
             ) -> Iterator[tuple[StepWindows, npt.NDArray[np.bool_]]]:
    """clock33's `_all_orders` with rev31's marks of the other orders (and img34's image
    windows, win36's of a stacked image ``s``): the full `COLUMNS` windows, then those
    without the clocks in a second pass (`reference_clocked`)."""
    first, few = step_windows._marked(ids, lengths, h, mark)
    hashes, two = step_windows.columns_windows(None if q is None else q[0], lengths,
                                               first.episode, first.start, mark,
                                               None if q is None else q[1], few)
    if q is None and f is not None and len(f) >= WINDOW:
        hashes, two = step_windows.image_windows(f, lengths, first.episode, first.start,
                                                 WINDOW), few.copy()
    if not mark:
        two = few.copy()
    got = reference_clocked(q, lengths, first, mark, h if mark and orders > 1 else None,
                            stacks=mark and orders > 1)
    bare, untimed = (None, None) if got is None else got
    if bare is not None and mark:
        at, _, f0, hc, _ = bare
        few[at] |= f0
        two[at] |= (hc & U64(1)).astype(bool) | (hc == 0)
    yield first, few
    for order in range(1, orders):
        w, more = step_windows._marked(ids, *step_windows._reordered(lengths, h, order), mark)
        if untimed is not None:
            more |= step_windows._few_steps(*step_windows._reordered(lengths, untimed, order))
        yield replace(w, order=order), more
    yield replace(first, hashes=hashes, order=COLUMNS), two
    if bare is not None:
        at, h0, f0, hc, fc = bare
        some = replace(first, episode=first.episode[at], start=first.start[at], clocks=True)
        yield replace(some, hashes=h0), f0
        yield replace(some, hashes=hc, order=COLUMNS), fc
    still = reference_still(q, lengths, first) if orders == 1 else None  # the train side's
    if still is not None:
        at, h0, hc = still
        some = replace(first, episode=first.episode[at], start=first.start[at], still=True)
        yield replace(some, hashes=h0), np.ones(len(at), dtype=bool)
        yield replace(some, hashes=hc, order=COLUMNS), np.ones(len(at), dtype=bool)
    if s is not None:
        yield from step_windows._stacked_windows(ids, lengths, s)


CLOCKS = ("t", "t/500", "left", "t+7")


def with_clock(o: np.ndarray, kind: str, at: int) -> np.ndarray:
    t = np.arange(len(o), dtype=np.float64)
    c = {"t": t, "t/500": (t / 500).astype(np.float32), "left": 1 - t / 500, "t+7": t + 7}[kind]
    return np.insert(o, at, c, axis=1)


def episode(rng: np.random.Generator, n: int, width: int, kind: int) -> np.ndarray:
    """A walk (0), one-hot cells (1), a small grid (2) or a few states visited (3): few
    distinct steps of many values each (marked for too few distinct steps alone)."""
    if kind == 1 and width:
        return np.eye(width)[rng.integers(0, width, max(n // 3, 1))[rng.integers(
            0, max(n // 3, 1), n)]]
    if kind == 2:
        return rng.integers(0, 3, size=(n, width)).astype(np.float64)
    if kind == 3:
        states = int(rng.integers(1, 5))
        return rng.normal(size=(states, width))[rng.integers(0, states, n)]
    return np.cumsum(rng.normal(0, 0.05, size=(n, width)), axis=0)


def random_batches(seed: int, dict_member: bool) -> list[pa.RecordBatch]:
    """Random episodes of one width, each with 0, 1 or 2 clocks in a place of its own (or,
    ``dict_member``: a Dict space whose member ``time`` is a clock, or a constant, per
    episode, and members ``pos`` and ``vel`` in any order), few-valued or continuous, of 0 to
    150 steps, cut into record batches anywhere."""
    rng = np.random.default_rng(seed)
    width = int(rng.integers(0, 9))  # 0: some episodes all clocks
    ids: list[str] = []
    parts: list[np.ndarray] = []
    times: list[np.ndarray] = []
    for e in range(int(rng.integers(1, 12))):
        n = int(rng.choice([int(rng.integers(0, 16)), int(rng.integers(16, 48)),
                            int(rng.integers(48, 150))]))
        o = episode(rng, n, width, int(rng.choice([0, 0, 1, 2, 3])))
        if rng.random() < 0.2 and o.shape[1] >= 2:  # win37: a stack of 2 (the held side's)
            o = np.hstack((np.vstack((o[:1], o[:-1])), o))
        if not dict_member:
            for _ in range(int(rng.choice([0, 1, 1, 2]))):
                o = with_clock(o, str(rng.choice(CLOCKS)), int(rng.integers(0, o.shape[1] + 1)))
            if rng.random() < 0.2 and n:  # a clock cut short and one standing still
                o = np.hstack((o, np.where(np.arange(n) < n // 2, np.arange(n), 0.0)[:, None]))
            if rng.random() < 0.3:  # a standing column: a task id, a bias (copy35)
                o = np.insert(o, int(rng.integers(0, o.shape[1] + 1)),
                              float(rng.choice([0.0, 1.0, 7.0])), axis=1)
        t = np.arange(n, dtype=np.float64)
        times.append(((t / 500) if rng.random() < 0.7 else np.ones(n))[:, None])
        ids += [f"e{e}"] * n
        parts.append(o)
    widths = {p.shape[1] for p in parts}
    if len(widths) > 1:  # one schema a batch: pad the narrower ones with zeros
        top = max(widths)
        parts = [np.hstack((p, np.zeros((len(p), top - p.shape[1])))) for p in parts]
    flat = np.vstack(parts) if parts else np.zeros((0, width))
    if not flat.shape[1]:
        flat = np.zeros((len(flat), 1))
    obs: pa.Array = pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel()), flat.shape[1])
    if dict_member:  # members pos, vel (none, or a number or two a step) and time, any order
        time = pa.FixedSizeListArray.from_arrays(pa.array(np.vstack(times).ravel()), 1)
        members = {"pos": obs, "time": time}
        vel = int(rng.integers(0, 3))
        if vel:
            members["vel"] = pa.FixedSizeListArray.from_arrays(
                pa.array(rng.normal(size=len(ids) * vel)), vel)
        names = [str(k) for k in rng.permutation(sorted(members))]
        obs = pa.StructArray.from_arrays([members[k] for k in names], names)
    table = pa.table({"episode_id": pa.array(ids, pa.string()), "obs": obs})
    cuts = sorted({int(c) for c in rng.integers(0, max(len(ids), 1), int(rng.integers(0, 4)))})
    return [table.slice(a, b - a).to_batches()[0] for a, b in
            zip([0, *cuts], [*cuts, len(ids)], strict=True) if b > a]


def computed(batches: list[pa.RecordBatch], mark: bool) -> list[tuple[object, ...]]:
    return [(w.episode_ids, w.lengths.tolist(), w.episode.tolist(), w.start.tolist(),
             w.hashes.tolist(), w.order, w.clocks, w.still, f.tolist())
            for w, f in step_windows._iter(batches, mark, len(step_windows.ORDERS) if mark else 1)]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans(), st.booleans(), st.sampled_from([5, 64, 4096]))
def test_the_windows_without_clocks_in_one_pass_are_the_two_passes(
        seed: int, dict_member: bool, mark: bool, block: int) -> None:
    """Every window, hash and mark, of both sides, as clock33's two passes gave them, in
    blocks of windows of any size (`columns_windows`)."""
    one_pass_is_two(random_batches(seed, dict_member), mark, "_COLUMN_BLOCK", block)


def one_pass_is_two(batches: list[pa.RecordBatch], mark: bool, name: str, value: int) -> None:
    """Every window, hash and mark of ``batches`` (step_windows' ``name`` set to ``value``) as
    the two passes give them (`two_pass`)."""
    with mock.patch.object(step_windows, name, value):
        got = computed(batches, mark)
    with mock.patch.object(step_windows, "_all_orders", two_pass):
        want = computed(batches, mark)
    assert got == want


def test_the_random_episodes_have_clocks_of_every_kind() -> None:
    """The property above is not vacuous: its episodes hold windows without their clocks,
    order 0 and `COLUMNS`, with a hash and without (`COLUMNS`: of `LONG` steps too), compared
    as held out and not. (The seeds are taken until every kind is seen: more add to counts
    only.)"""
    seen: dict[str, int] = {}

    def every_kind() -> bool:
        return (all(seen.get(f"{k}-{o}-{what}", 0) for k in ("flat", "dict") for o in (0, COLUMNS)
                    for what in ("hashed", "kept"))
                and bool(seen.get("flat-0-none")) and bool(seen.get("still-0"))
                and bool(seen.get(f"still-{COLUMNS}"))
                and all(seen.get(f"{k}-{COLUMNS}-{what}", 0) for k in ("flat", "dict")
                        for what in ("none", "long")))  # fmt: skip

    for seed in range(60):
        if every_kind():
            break
        for dict_member, mark in ((False, True), (True, True), (False, False), (True, False)):
            for row in computed(random_batches(seed, dict_member), mark):
                _, _, _, _, hashes, order, clocks, still, marks = row
                if not mark and not still:
                    continue
                if still:  # copy35: the windows without standing columns too, never held
                    assert all(marks)
                    seen[f"still-{order}"] = seen.get(f"still-{order}", 0) + sum(
                        h != 0 for h in hashes)
                if not clocks:
                    continue
                h, f = np.array(hashes, dtype=np.uint64), np.array(marks, dtype=bool)
                name = f"{'dict' if dict_member else 'flat'}-{order}"
                seen[name + "-hashed"] = seen.get(name + "-hashed", 0) + int((h != 0).sum())
                seen[name + "-none"] = seen.get(name + "-none", 0) + int((h == 0).sum())
                seen[name + "-kept"] = seen.get(name + "-kept", 0) + int((~f).sum())
                seen[name + "-long"] = seen.get(name + "-long", 0) + int(
                    ((h & U64(1)) == 1).sum() if order == COLUMNS else 0)
    assert all(seen.get(f"{k}-{o}-{what}", 0) for k in ("flat", "dict") for o in (0, COLUMNS)
               for what in ("hashed", "kept")), seen
    assert seen["flat-0-none"], seen  # every column a clock: no hash as recorded
    assert seen["still-0"] and seen[f"still-{COLUMNS}"], seen
    assert all(seen[f"{k}-{COLUMNS}-{what}"] for k in ("flat", "dict")
               for what in ("none", "long")), seen


def test_the_random_episodes_have_stacks_both_ways() -> None:
    """The property above is not vacuous for win37's held stacks: its batches, flat and of a
    Dict space, hold episodes `frame_stacks.member_stacks` takes for stacks."""
    seen = {False: 0, True: 0}
    for seed in range(60):
        if all(seen.values()):  # (more seeds add to the counts only)
            break
        for dict_member in (False, True):
            table = pa.Table.from_batches(random_batches(seed, dict_member))
            q = step_columns.columns(table.column("obs").combine_chunks(),
                                     step_windows.MAX_COLUMNS)
            ids = table.column("episode_id").to_pylist()
            _, first, lengths = np.unique(ids, return_index=True, return_counts=True)
            lengths = lengths[np.argsort(first)].astype(np.int64)
            if q is not None and frame_stacks.member_stacks(q[0], lengths, WINDOW,
                                                            q[3]) is not None:
                seen[dict_member] += 1
    assert all(seen.values()), seen


def test_clock_sets_are_numpys_unique_rows() -> None:
    """`window_clocks.clock_sets` (a sort of 64-bit words) gives ``np.unique``'s rows and
    inverse, for rows of 1 to 256 columns (one to four words, a partial last byte)."""
    rng = np.random.default_rng(3)
    for width in (1, 7, 8, 9, 63, 64, 65, 130, 256):
        for p in (1, 2, 50, 3000):
            clock = rng.random((p, width)) < rng.choice([0.02, 0.5])
            clock[rng.integers(0, p, p // 3)] = clock[0]  # repeats
            sets, key = window_clocks.clock_sets(clock)
            want, inv = np.unique(np.packbits(clock, axis=1), axis=0, return_inverse=True)
            assert np.array_equal(sets, want) and key.tolist() == inv.reshape(-1).tolist()


def many_sets_batches(seed: int) -> list[pa.RecordBatch]:
    """Episodes whose clock moves to another column every 16 to 40 steps: more sets of clock
    columns an episode than `MAX_CLOCK_SETS` (rev31's rows windows, merged with the one pass)."""
    rng = np.random.default_rng(seed)
    width = int(rng.integers(MAX_CLOCK_SETS + 2, 16))
    ids: list[str] = []
    parts: list[np.ndarray] = []
    for e in range(int(rng.integers(1, 4))):
        chunks = [int(rng.integers(16, 41)) for _ in range(int(rng.integers(9, 14)))]
        o = episode(rng, sum(chunks), width, int(rng.choice([0, 2, 3])))
        at = 0
        for c, n in enumerate(chunks):
            o[at : at + n, c % width] = np.arange(n) / 500
            at += n
        ids += [f"e{e}"] * len(o)
        parts.append(o)
    flat = np.vstack(parts)
    obs = pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel()), width)
    return pa.table({"episode_id": pa.array(ids, pa.string()), "obs": obs}).to_batches()


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_more_sets_than_max_clock_sets_in_one_pass_are_the_two_passes(seed: int,
                                                                       mark: bool) -> None:
    """The sets past `MAX_CLOCK_SETS` (order 0 over their own rows, no `COLUMNS` hash) come out
    of the one pass as out of the two."""
    batches = many_sets_batches(seed)
    got = computed(batches, mark)
    with mock.patch.object(step_windows, "_all_orders", two_pass):
        want = computed(batches, mark)
    assert got == want
    rows = [r for r in got if r[6] and r[5] == 0]
    assert rows and any(h != 0 for r in rows for h in r[4])


def every_window_sets_batches(seed: int, dict_space: bool = False) -> list[pa.RecordBatch]:
    """rev32's attacker's batch: each column an arithmetic progression (a clock) over runs of
    16 to 30 steps at random places, so that nearly every window has its own set of clock
    columns (all, some, none), many more sets an episode than `MAX_CLOCK_SETS`; a walk, a
    grid or a few states under them (repeated steps: marks), episodes of 0 to 200 steps, one
    now and then all clocks, cut into record batches anywhere. ``dict_space`` (dict36): the
    columns as a Dict space's members of 1 to 4 numbers each (a number alone now and then),
    in an order of their own, now and then with a member of none."""
    rng = np.random.default_rng(seed)
    width = int(rng.integers(2, 14))
    ids: list[str] = []
    parts: list[np.ndarray] = []
    for e in range(int(rng.integers(1, 6))):
        n = int(rng.integers(0, 200))
        o = episode(rng, n, width, int(rng.choice([0, 2, 3])))
        for c in range(width):
            at = int(rng.integers(0, 20))
            while at < n:
                run = int(rng.integers(16, 31))
                o[at : at + run, c] = (np.arange(len(o[at : at + run])) * rng.choice([1, 0.002])
                                       + rng.integers(0, 9))
                at += run + int(rng.integers(0, 24))
        if rng.random() < 0.1:  # every column a clock
            o[:] = np.arange(n)[:, None]
        ids += [f"e{e}"] * n
        parts.append(o)
    flat = np.vstack(parts)
    obs: pa.Array = pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel()), width)
    if dict_space:
        cuts = sorted({int(c) for c in rng.integers(1, width, int(rng.integers(1, width)))})
        members = [np.ascontiguousarray(flat[:, a:b]) for a, b in
                   zip([0, *cuts], [*cuts, width], strict=True)]
        if rng.random() < 0.2:
            members.insert(int(rng.integers(0, len(members) + 1)), np.zeros((len(flat), 0)))
        arrays: list[pa.Array] = [
            pa.array([[]] * len(flat), pa.list_(pa.float64())) if not m.shape[1] else
            pa.array(m[:, 0]) if m.shape[1] == 1 and rng.random() < 0.3 else
            pa.FixedSizeListArray.from_arrays(pa.array(m.ravel()), m.shape[1]) for m in members]
        names = [f"m{k}" for k in rng.permutation(len(arrays))]
        obs = pa.StructArray.from_arrays(arrays, names)
    table = pa.table({"episode_id": pa.array(ids, pa.string()), "obs": obs})
    cuts = sorted({int(c) for c in rng.integers(0, max(len(ids), 1), int(rng.integers(0, 4)))})
    return [table.slice(a, b - a).to_batches()[0] for a, b in
            zip([0, *cuts], [*cuts, len(ids)], strict=True) if b > a]


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans(), st.sampled_from([1, 32, 10**9]),
       st.booleans())
def test_a_clock_set_a_window_in_one_pass_is_the_set_by_set_path(
        seed: int, mark: bool, few: int, attack: bool) -> None:
    """rows36: a tensor's windows without their clocks, all sets hashed at once
    (`_tensor_bare`, `_kept_windows`, `row_hashes.kept_hashes`) and their `COLUMNS` hashes of
    sets of fewer than ``few`` windows in a block at once (`_windows_block`: none, the rule,
    all), are every window, hash and mark of the set by set reference, on both sides and in
    every order, over the attacker's batches and the random ones."""
    batches = every_window_sets_batches(seed) if attack else random_batches(seed, False)
    one_pass_is_two(batches, mark, "_FEW_WINDOWS", few)


def few_values_dict_batches(seed: int) -> list[pa.RecordBatch]:
    """A Dict space of 2 to 4 members of 1 to 4 numbers, one-hot or a small grid (few values:
    the `COLUMNS` windows of `LONG` steps, or of a whole episode of `MIN_WHOLE` to `LONG` - 1
    steps), a clock over runs of 16 to 40 steps now and then in a third of the columns (sets
    of clock columns of a few windows each; the first from step 0 one time in two), episodes
    of 16 to 120 steps, cut anywhere."""
    rng = np.random.default_rng(seed)
    widths = [int(w) for w in rng.integers(1, 5, int(rng.integers(2, 5)))]
    width = sum(widths)
    clocked = np.flatnonzero(rng.random(width) < 0.35)
    ids: list[str] = []
    parts: list[np.ndarray] = []
    for e in range(int(rng.integers(1, 6))):
        n = int(rng.choice([int(rng.integers(32, 48)), int(rng.integers(16, 121))]))
        o = np.hstack([episode(rng, n, w, int(rng.choice([1, 2]))) for w in widths])
        for c in clocked.tolist():
            at = int(rng.choice([0, int(rng.integers(0, 30))]))  # 0: a whole episode's window
            while at < n:
                run = int(rng.integers(16, 41))
                o[at : at + run, c] = np.arange(len(o[at : at + run])) / 500
                at += run + int(rng.integers(0, 40))
        ids += [f"e{e}"] * n
        parts.append(o)
    flat = np.vstack(parts)
    cuts = np.cumsum(widths)[:-1].tolist()
    members = [pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(m).ravel()),
                                                 m.shape[1]) for m in np.split(flat, cuts, axis=1)]
    obs = pa.StructArray.from_arrays(members, [f"m{k}" for k in rng.permutation(len(members))])
    table = pa.table({"episode_id": pa.array(ids, pa.string()), "obs": obs})
    cut = sorted({int(c) for c in rng.integers(0, len(ids), int(rng.integers(0, 3)))})
    return [table.slice(a, b - a).to_batches()[0] for a, b in
            zip([0, *cut], [*cut, len(ids)], strict=True) if b > a]


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans(), st.sampled_from([1, 32, 10**9]),
       st.sampled_from(["attack", "random", "few"]))
@example(16, True, 10**9, "few")  # two whole episodes' windows of other salts in one call
def test_a_dicts_clock_set_a_window_in_one_pass_is_the_set_by_set_path(
        seed: int, mark: bool, few: int, data: str) -> None:
    """dict36: a Dict or Tuple space's windows without their clocks, all sets hashed at once
    (each row's members renumbered: `row_hashes.kept_hashes` with ``member``), and their
    `COLUMNS` hashes at once (`_windows_block`, each set's salts), are every window, hash and
    mark of the set by set reference (`reference_clocked`: the members renumbered a set at a
    time, `row_hashes.matrix_hashes`), both sides, every order, over the attacker's batches as
    a Dict space, the random Dict ones and Dict spaces of few values."""
    batches = (every_window_sets_batches(seed, True) if data == "attack" else
               random_batches(seed, True) if data == "random" else few_values_dict_batches(seed))
    one_pass_is_two(batches, mark, "_FEW_WINDOWS", few)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_kept_hashes_of_members_are_matrix_hashes(seed: int) -> None:
    """`row_hashes.kept_hashes` with ``member`` (dict36) of each row is `matrix_hashes` of
    that row's kept columns alone, their members renumbered from 0 (``np.unique``): members
    of 1 to 5 columns (odd and even), numbered with gaps or from 0, values repeated or not,
    any rows, in blocks of any size."""
    rng = np.random.default_rng(seed)
    widths = rng.integers(1, 6, int(rng.integers(1, 6)))
    member = np.repeat(np.sort(rng.choice(9, len(widths), replace=False)), widths)
    n = int(rng.integers(1, 40))
    q = rng.integers(0, 2**32, (n + 3, len(member)), dtype=np.uint64).astype(np.uint32)
    if rng.random() < 0.3:
        q[:] = q[0]
    keep = rng.random((n, len(member))) < rng.choice([0.2, 0.6, 1.0])
    keep[np.arange(n), rng.integers(0, len(member), n)] = True
    rows = rng.integers(0, n + 3, n)
    with mock.patch.object(row_hashes, "_BLOCK", int(rng.choice([1, 7, 1 << 21]))):
        got = row_hashes.kept_hashes(q, keep, rows, member.astype(np.int64)).tolist()
    want = [int(row_hashes.matrix_hashes(q[rows[i]][None, keep[i]], np.unique(
        member[keep[i]], return_inverse=True)[1].reshape(-1).astype(np.int64))[0])
        for i in range(n)]
    assert got == want


def test_the_attackers_batches_have_many_sets_past_the_max() -> None:
    """The property above is not vacuous: its episodes have more sets of clock columns than
    `MAX_CLOCK_SETS`, windows of those with a hash and marked both ways."""
    calls: list[int] = []
    marks: list[bool] = []
    kept = step_windows._kept_windows

    def counted(*args: object) -> tuple[np.ndarray, np.ndarray]:
        got = kept(*args)  # type: ignore[arg-type]
        calls.append(len(np.unique(args[2])))  # type: ignore[arg-type]
        assert (got[0] != 0).all()
        marks.extend(got[1].tolist())
        return got

    with mock.patch.object(step_windows, "_kept_windows", counted):
        for seed in range(20):
            computed(every_window_sets_batches(seed), True)
    assert len(calls) >= 10 and max(calls) > 5 * MAX_CLOCK_SETS, calls
    assert any(marks) and not all(marks)


def test_the_attackers_dict_batches_have_many_sets_and_few_calls() -> None:
    """The Dict property above is not vacuous (dict36): its batches are Dict spaces of 2 or
    more members with more sets of clock columns an episode than `MAX_CLOCK_SETS`, their
    windows of order 0 and `COLUMNS` with a hash and without, marked both ways; and every
    set of a batch's windows is hashed in one call of `row_hashes.kept_hashes` a kind
    (whole episodes, windows over their own rows), not one a set."""
    calls: list[int] = []
    spaces: list[int] = []
    hashed = row_hashes.kept_hashes

    def counted(q: np.ndarray, keep: np.ndarray, rows: object = None,
                member: np.ndarray | None = None) -> np.ndarray:
        assert member is not None
        spaces.append(len(np.unique(member)))
        calls.append(len(np.unique(np.packbits(keep, axis=1), axis=0)))
        return hashed(q, keep, rows, member)  # type: ignore[arg-type]

    seen = {"h0": 0, "none0": 0, "hc": 0, "nonec": 0, "kept": 0, "marked": 0}
    with mock.patch.object(step_windows, "kept_hashes", counted):
        for seed in range(20):
            for row in computed(every_window_sets_batches(seed, True), True):
                _, _, _, _, hashes, order, clocks, _, marks = row
                if clocks:
                    h = np.array(hashes, dtype=U64)
                    tag = "0" if order == 0 else "c"
                    seen["h" + tag] += int((h != 0).sum())
                    seen["none" + tag] += int((h == 0).sum())
                    f = np.array(marks, dtype=bool)
                    seen["kept"] += int((~f).sum())
                    seen["marked"] += int(f.sum())
    assert all(seen.values()), seen
    assert min(spaces) >= 2 and max(calls) > 5 * MAX_CLOCK_SETS, (spaces, calls)
