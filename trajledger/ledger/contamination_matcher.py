"""`Matcher`: the other side's episodes (holdout, regression) held, the train side's fed in
chunks, one `Finding` per held episode that duplicates a train episode (exact: equal content
fingerprint, or normalised text fingerprint; a shared run of steps, `step_windows`; near:
cosine similarity of feature vectors at or above the threshold of its modality).

Scope: holding and matching, and the run a shared window names (`Matcher._shared`); a sealed
held episode's published sketch fitted in the span of a train episode's parts (`Parts`,
`tangents`, `iter_parts`: seal47), the train side's steps being plain.
Non-scope: reading the batches, their features and windows (``ledger.contamination``'s front
ends `check_dataset` and `verified_contamination` feed it), the windows' definitions
(``step_windows``), the held windows kept grouped (``held_windows``).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from trajledger.verify.contamination_rules import NEAR_NUMERIC_THRESHOLD, NEAR_TEXT_THRESHOLD

from .episode_features import FeatureChunk
from .episode_vectors import sketch_parts, still_parts
from .finding import Finding
from .held_windows import Grouped
from .step_windows import COLUMNS, StepWindows, held_steps, order_steps, span

__all__ = ["EQUAL_SKETCH", "FIT_EXACT", "FIT_FLOOR", "FIT_NEAR", "MIN_NEAR_STEPS", "PARTS_COLUMNS",
           "STILL_FLOOR", "TRIM_BUCKETS", "TRIM_NEAR", "TRIM_SCREEN", "Matcher", "Parts",
           "SketchFinding", "iter_parts", "tangents", "trimmed"]

MIN_NEAR_STEPS = 16
"""Numeric episodes shorter than this are compared exactly only: too little content to tell a
copy from a chance match (short CartPole falls under one repeated action agree to 0.999)."""

EQUAL_SKETCH = 0.99995
"""The cosine at which a sealed held-out numeric episode's published sketch and a train
episode's are equal (printed 1.0000): an exact duplicate of it (`SketchFinding`), as a shared
run of steps is of a plain one. A copy gives 1 to float32 rounding, N(0, 0.01) noise on
CartPole's observations 0.9998 (docs/SECURITY.md, thirty-first round, seal46)."""

FIT_EXACT = 1e-3
"""A sealed held-out numeric episode whose published sketch a train episode of its length
explains to this (`tangents`: its actions and rewards each mapped affinely, its
observations scaled) is a copy of it, re-encoded: an exact duplicate (`SketchFinding`). Copies
as recorded, rewards x 2 or + 1, actions 1 - a or + 1 fit to 6.3e-7 at most; unrelated
episodes of one length to 0.0146 at the least (CartPole twins of 16 steps, cosine 0.99993),
0.47 of Pendulum (docs/SECURITY.md, thirty-second round, seal47)."""
FIT_NEAR = 0.1
"""At or below this (above `FIT_EXACT`), where the cosine is not near already: a near
duplicate, a copy with a few steps changed (found for some: CartPole one step's observation
replaced 17-29%, Pendulum 54-60%). A warning, not a refusal, as the margin is not wide: the
unrelated CartPole pairs at or below it were near by cosine already, but one at 0.17 was not
(cosine 0.990)."""

TRIM_NEAR = 1e-3
"""A sealed held sketch that the plain fit leaves above `FIT_NEAR` (at most `TRIM_SCREEN`) but
that a train episode of its length explains to this once the `TRIM_BUCKETS` buckets it fits
worst are left out (`trimmed`): a near duplicate, a copy with a step or two changed (a changed
step moves at most 21 buckets, its observation at most 16). Found with the plain fit: CartPole
one step's observation replaced 99%, two steps 92%, four 81%, one action all; unrelated
CartPole pairs 0.0059 at the least (docs/SECURITY.md, thirty-second round, seal47): a
warning."""
TRIM_SCREEN = 1.0
"""Pairs whose plain fit leaves more than this are not fitted again (`trimmed`)."""
TRIM_BUCKETS = 16
"""Buckets `trimmed` leaves out: those of one step's observation (16 slots) at most."""

_THRESHOLDS = {"numeric": NEAR_NUMERIC_THRESHOLD, "text": NEAR_TEXT_THRESHOLD}
_BLOCK = 1024
_NEAR_PENDING = 4096
"""Train episodes fed before their near duplicates are looked for (`Matcher._compare`: 512
bytes each; the screen's block of similarities 4 bytes a held episode of `_BLOCK` each)."""
_PENDING = 1 << 20
"""Train windows fed before they are matched (`Matcher._match`: one pass over the held ones)."""
_FIT_PENDING = 1024
"""Train episodes fed before they are fitted (`Matcher._fit_now`: 11 KiB of parts each, 11 MiB
in all, whatever their lengths): each block of held sketches is fitted against all of them in
one product, not in one a record batch (products of a few rows cost their BLAS threads' waits
on a loaded machine, not their arithmetic: seal48)."""
_FIT_CELLS = 1 << 21
"""Pairs fitted at once (`Matcher._fit_now`: the held sketches in blocks of this over the
train episodes; 16 MiB an array of their tangents)."""
_PLAIN, _CLOCKS, _STILL = 1, 2, 4  # a train window as recorded, without its clocks, without
# its standing columns too (copy35): a run none of whose windows is plain had such columns
# added to the copy (`Finding.added`)


def _slack(norms: npt.NDArray[np.float64], reach: float, threshold: float,
           dim: int) -> npt.NDArray[np.float64]:
    """Per held vector (its norm in ``norms``), more than two float32 products of it with a
    train vector (of norm ``reach`` at most) of ``dim`` terms can differ, doubled, plus the
    threshold's rounding to float32 (a comparison with a float32 array rounds it): a
    non-finite norm gives an infinite slack (such a row is never cleared), and so does one
    whose products' partial sums may pass float32's range (``||h|| ||t||`` bounds them):
    summed in another order, such a product is +inf where the screen's was finite (rev36)."""
    u = 2.0**-24
    gamma = dim * u / (1 - dim * u)
    slack = 4 * gamma * norms * reach + abs(threshold) * 2.0**-20 + 1e-30
    return np.where(np.isfinite(slack) & (norms * reach < 2.0**127), slack, np.inf)


def _near_mask(chunk: FeatureChunk, modality: str) -> npt.NDArray[np.bool_]:
    mods = np.array(chunk.modality, dtype=object) == modality
    mask = mods & chunk.valid
    if modality == "numeric":
        mask &= chunk.num_steps >= MIN_NEAR_STEPS
    return np.asarray(mask, dtype=bool)


@dataclass(frozen=True)
class SketchFinding(Finding):
    """A sealed held-out numeric episode whose published sketch equals a train episode's (at
    `EQUAL_SKETCH` or more): ``exact``, the sealed stand-in for a shared run of steps (a sealed
    batch publishes none), ``near`` under ``runs = "near"`` (`contamination.ruled`)."""

    steps: int = 0
    """The held episode's steps (as its record publishes them)."""
    fitted: float | None = None
    """Found by the fit (`tangents`: `FIT_EXACT`, `FIT_NEAR`), its tangent; None:
    by equal sketches (`EQUAL_SKETCH`)."""
    trimmed: float | None = None
    """Found by the fit with its worst buckets left out (`trimmed`: `TRIM_NEAR`), its ratio."""

    def __str__(self) -> str:
        if self.kind != "exact" and self.fitted is None:
            return super().__str__()
        more = f" and {self.matches - 1} more near" if self.matches > 1 else ""
        o = f" ({', '.join(self.other_datasets)})" if self.other_datasets else ""
        t = f" ({', '.join(self.train_datasets)})" if self.train_datasets else ""
        train = f"train episode {self.train_episode} of batch {self.train_batch[:19]}…{t}{more}"
        held = f"episode {self.other_episode} of batch {self.other_batch[:19]}…{o}"
        if self.fitted is None:
            why = (f"the two are equal (similarity {self.similarity:.4f}: the same observations, "
                   f"actions and rewards at each of its {self.steps} steps, to rounding and one "
                   "scale)")
        elif self.fitted <= FIT_EXACT:
            why = (f"it is the train episode's with its actions and rewards each re-encoded "
                   f"affinely (fitted to {self.fitted:.1e}: the same observations at each of its "
                   f"{self.steps} steps, to rounding and one scale)")
        elif self.trimmed is None:
            why = (f"it is nearly the train episode's with its actions and rewards each "
                   f"re-encoded affinely (fitted to {self.fitted:.3f}, {FIT_NEAR} or less: a few "
                   f"of its {self.steps} steps changed?)")
        else:
            why = (f"it is nearly the train episode's with its actions and rewards each "
                   f"re-encoded affinely (fitted to {self.fitted:.3f}; to {self.trimmed:.1e} once "
                   f"the {TRIM_BUCKETS} buckets it fits worst are left out: a step or two of its "
                   f"{self.steps} steps changed?)")
        copy = "a copy" if self.kind == "exact" else "a near copy"
        return f"{held} is {copy} of {train}: sealed, it is compared by the sketch its record " \
               f"publishes, and {why}"

    def to_json(self) -> dict[str, Any]:
        """The finding as JSON, with ``sketch``: true (and ``fitted`` and ``trimmed``, found by
        the fit)."""
        fit = {k: v for k, v in (("fitted", self.fitted), ("trimmed", self.trimmed))
               if v is not None}
        return {**{k: v for k, v in super().to_json().items() if k not in ("fitted", "trimmed")},
                "sketch": True, **fit}


class Matcher:
    """Held other-side episodes, matched against train episodes fed in chunks.

    Memory: the other side's fingerprints and vectors (about 600 bytes per episode) and its
    step windows (32 bytes a window, about 9 windows a step of a numeric episode in its
    `step_windows.ORDERS` and `step_windows.COLUMNS`), never the train side (but the hashes
    and episodes of up to `_PENDING` train windows, 16 bytes each, matched together, and the
    vectors of up to `_NEAR_PENDING` train episodes, compared together, and the sketches' parts
    of up to `_FIT_PENDING` train episodes of a sealed held one's length, fitted together). The
    comparison is exact (blockwise matrix products, no approximate index), so nothing above a
    threshold is missed.
    """

    def __init__(
        self,
        train_labels: Mapping[str, Sequence[str]] | None = None,
        other_labels: Mapping[str, Sequence[str]] | None = None,
        thresholds: Mapping[str, float] | None = None,
    ) -> None:
        """Start empty; `hold` the other side, then `feed` the train side. ``thresholds``:
        modality -> the near-duplicate similarity (default `_THRESHOLDS`; a policy's
        ``[contamination]`` may lower them)."""
        self.train_labels = dict(train_labels or {})
        self.other_labels = dict(other_labels or {})
        self.thresholds = {**_THRESHOLDS, **(thresholds or {})}
        self._where: dict[tuple[str, str], int] = {}
        self._norm: dict[str, list[int]] = {}
        self._norm_first: dict[int, tuple[str, str]] = {}
        self._norm_count: dict[int, int] = {}
        self._batches: list[str] = []
        self._episodes: list[str] = []
        self._fp: dict[str, list[int]] = {}
        self._held: list[FeatureChunk] = []
        self._near: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]] = {}
        self._norms: dict[str, npt.NDArray[np.float64]] = {}  # of `_near`'s vectors
        # modality -> the train chunks fed, not compared yet: (batch, episode ids, the
        # columns of those compared, their vectors)
        self._near_pending: dict[str, list[tuple[str, Sequence[str], npt.NDArray[np.int64],
                                                 npt.NDArray[np.float32]]]] = {}
        self._exact_first: dict[int, tuple[str, str]] = {}
        self._exact_count: dict[int, int] = {}
        self._best: npt.NDArray[np.float64] = np.zeros(0)
        self._count: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._best_of: list[tuple[str, str] | None] = []
        self._runs: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64],
                               npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
        self._steps: dict[int, int] = {}
        self._pending: list[tuple[str, list[str], npt.NDArray[np.uint64],
                                  npt.NDArray[np.int64], int]] = []
        self._hits: dict[int, list[npt.NDArray[np.int64]]] = {}  # held run -> windows hit
        # by window hash: the train episodes hitting it, each with the kinds of its windows
        # that did (`_PLAIN`, `_CLOCKS`, `_STILL`)
        self._group_trains: dict[int, dict[tuple[str, str], int]] = {}
        self._grouped: list[Grouped] = []  # held windows kept grouped (`held_windows`)
        self._grouped_hits: dict[int, list[npt.NDArray[np.int64]]] = {}  # positions hit
        self._run_info: dict[int, tuple[tuple[str, str], int, tuple[int, int, int], int,
                                        int]] | None = None
        self._frozen = False
        self._sealed: dict[int, int] = {}  # a sealed held episode -> its steps
        # the sealed held episodes fitted (`feed_parts`): by length, their rows and sketches
        self._fit: dict[int, tuple[list[int], list[npt.NDArray[np.float32]]]] = {}
        self._fit_best: dict[int, tuple[float, str, str]] = {}  # row -> tangent, train episode
        self._fit_count: dict[int, int] = {}  # row -> train episodes within `FIT_NEAR`
        # row -> (trimmed ratio, plain tangent, train episode), the best within `TRIM_NEAR`
        self._trim_best: dict[int, tuple[float, float, str, str]] = {}
        self._trim_count: dict[int, int] = {}
        # length -> the train episodes fed, not fitted yet: (batch, their ids, their parts)
        self._fit_pending: dict[int, list[tuple[str, list[str], npt.NDArray[np.float64]]]] = {}

    def hold(self, batch: str, chunk: FeatureChunk, *, sealed: bool = False) -> None:
        """Add other-side episodes of ``batch`` (``sealed``: the sketches its record publishes,
        whose equal to a train episode's is an exact duplicate, `SketchFinding`)."""
        if self._frozen:
            raise RuntimeError("Matcher.hold after feed")
        base = len(self._episodes)
        if sealed:
            self._sealed.update(zip(range(base, base + len(chunk)), chunk.num_steps.tolist(),
                                    strict=True))
            for k in np.flatnonzero(_near_mask(chunk, "numeric")).tolist():
                rows, vectors = self._fit.setdefault(int(chunk.num_steps[k]), ([], []))
                rows.append(base + k)
                vectors.append(chunk.vectors[k])
        self._batches.extend([batch] * len(chunk))
        self._episodes.extend(chunk.episode_ids)
        for i, episode in enumerate(chunk.episode_ids):
            self._where.setdefault((batch, episode), base + i)
        for i, fp in enumerate(chunk.fingerprints):
            if fp is not None:
                self._fp.setdefault(fp, []).append(base + i)
        self._held.append(chunk)

    def fit_lengths(self, chunk: FeatureChunk | None = None) -> set[int]:
        """The lengths of the sealed held numeric episodes (`feed_parts` wants train episodes of
        these lengths); with ``chunk``, those of its numeric episodes among them."""
        if chunk is None:
            return set(self._fit)
        return set(chunk.num_steps[_near_mask(chunk, "numeric")].tolist()) & set(self._fit)

    def feed_parts(self, batch: str, ids: Sequence[str], lengths: npt.NDArray[np.int64],
                   parts: npt.NDArray[np.float64]) -> None:
        """Fit each sealed held sketch in the span of the parts (`episode_vectors.sketch_parts`)
        of the train episodes ``ids`` of ``batch`` of its length (`tangents`); keep
        the best (the first on a tie) and the count within `FIT_NEAR`. Fitted once
        `_FIT_PENDING` train episodes wait, of all lengths (`_fit_now`; the rest by
        `findings`)."""
        for n in np.unique(lengths).tolist():
            if n not in self._fit:
                continue
            cols = np.flatnonzero(lengths == n)
            self._fit_pending.setdefault(n, []).append(
                (batch, [ids[int(c)] for c in cols], parts[cols]))
        waiting = sum(len(p[1]) for pending in self._fit_pending.values() for p in pending)
        if waiting >= _FIT_PENDING:
            for n in list(self._fit_pending):
                self._fit_now(n)

    def _fit_now(self, n: int) -> None:
        """Fit the sealed held sketches of ``n`` steps against the train episodes of that
        length fed since the last call, in the order fed; the held ones in blocks of
        `_FIT_CELLS` pairs."""
        pending = self._fit_pending.pop(n, [])
        if not pending:
            return
        names = [(batch, e) for batch, ids, _ in pending for e in ids]
        parts = np.concatenate([p for _, _, p in pending])
        fitted = Parts.of(parts, n)
        rows_all, vectors = self._fit[n]
        step = max(1, _FIT_CELLS // len(names))
        for lo in range(0, len(rows_all), step):
            rows = rows_all[lo : lo + step]
            held = np.stack(vectors[lo : lo + step])
            tan = tangents(held, fitted)
            best = tan.argmin(axis=1)
            least = tan[np.arange(len(rows)), best]
            for r in np.flatnonzero(least <= FIT_NEAR).tolist():
                row, t = rows[r], float(least[r])
                self._fit_count[row] = self._fit_count.get(row, 0) + int((tan[r] <= FIT_NEAR).sum())
                if row not in self._fit_best or t < self._fit_best[row][0]:
                    self._fit_best[row] = (t, *names[int(best[r])])
            # Fitted again without the buckets a changed step moves (`trimmed`), for the held
            # episodes whose finding it can still make (`_open`).
            screened = (tan > FIT_NEAR) & (tan <= TRIM_SCREEN)
            if not screened.any():
                continue
            ia, jb = np.nonzero(screened & self._open(rows)[:, None])
            ratio = trimmed(held, parts, ia, jb)
            for k in np.flatnonzero(ratio <= TRIM_NEAR).tolist():
                row, t = rows[int(ia[k])], float(ratio[k])
                self._trim_count[row] = self._trim_count.get(row, 0) + 1
                if row not in self._trim_best or t < self._trim_best[row][0]:
                    self._trim_best[row] = (t, float(tan[ia[k], jb[k]]), *names[int(jb[k])])

    def _open(self, rows: list[int]) -> npt.NDArray[np.bool_]:
        """Per held row of ``rows``: whether `trimmed` can still make its finding. Not once it
        is fitted within `FIT_NEAR`: `_by_sketch` then takes the plain fit, the equal sketch or
        the near cosine, never the trimmed fit (seal48)."""
        return np.array([r not in self._fit_best for r in rows], dtype=bool)

    def close(self) -> None:
        """Close the grouped files held (`held_windows.Grouped.close`), once matched."""
        for grouped in self._grouped:
            grouped.close()

    def hold_normalised(self, batch: str, pairs: Iterable[tuple[str, str]]) -> None:
        """Add the normalised text fingerprints (`text_fingerprint`) of held episodes of
        ``batch``, after `hold` of their features."""
        for episode, fp in pairs:
            if (i := self._where.get((batch, episode))) is not None:
                self._norm.setdefault(fp, []).append(i)

    def hold_windows(self, batch: str, windows: Iterable[StepWindows]) -> None:
        """Add the step windows (`step_windows.iter_windows` with ``held``) of held episodes of
        ``batch``, after `hold` of their features; windows in another order of
        `step_windows.ORDERS` (or `step_windows.COLUMNS`) after those in order 0."""
        for w in windows:
            where = np.array([self._where.get((batch, e), -1) for e in w.episode_ids], np.int64)
            for e, i in enumerate(where.tolist()):
                if i >= 0 and not w.order:
                    self._steps[i] = int(w.lengths[e])
            i = where[w.episode]
            ok = i >= 0
            self._runs.append((w.hashes[ok], i[ok], w.start[ok],
                               np.full(int(ok.sum()), w.order, dtype=np.int64)))

    def hold_grouped(self, grouped: Grouped) -> None:
        """Add held windows grouped by hash (`held_windows.Grouped`), after `hold` of their
        batches' features: matched as those `hold_windows` adds, looked up instead of scanned
        (where a window is, only for those a train window hits)."""
        if self._frozen:
            raise RuntimeError("Matcher.hold_grouped after feed")
        self._grouped.append(grouped)

    def _placed(self, k: int, positions: npt.NDArray[np.int64]) -> tuple[
            list[int], list[int], list[int], list[int]]:
        """Held episode (-1: not held), start, order and steps of the windows of grouped
        windows ``k`` at ``positions``."""
        g = self._grouped[k]
        batch, episode, start, order = g.placed(positions)
        rows = [self._where.get((g.batches[b], g.ids[e]), -1)
                for b, e in zip(batch.tolist(), episode.tolist(), strict=True)]
        return rows, start.tolist(), order.tolist(), g.lengths[episode].tolist()

    def feed_windows(self, batch: str, windows: Iterable[StepWindows]) -> None:
        """Match the step windows of train episodes of ``batch``: a train episode sharing a
        window with a held one shares a run of `step_windows.WINDOW` steps with it. Held
        windows are grouped by hash: a train window costs one step per group it hits, never
        one per held episode holding it (a deterministic environment's identical episodes).
        Matched in `_match`, up to `_PENDING` train windows at once."""
        self._freeze()
        for w in windows:
            if len(w.hashes):
                kind = _CLOCKS if w.clocks else _STILL if w.still else _PLAIN
                self._pending.append((batch, w.episode_ids, w.hashes, w.episode, kind))
        if sum(len(p[2]) for p in self._pending) >= _PENDING:
            self._match()
        self._run_info = None

    def _match(self) -> None:
        """Match the train windows fed since the last call. One pass over the held windows
        finds those of a hash some of them has (a table of the train hashes' first bits, then
        exactly: no sort of the held side, copy26; sorting 42 M held windows cost 7.8 CPU-s);
        then each train window hitting a group (the held windows of one hash) records (group,
        train episode) once, in the order fed."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        train = np.sort(np.concatenate([p[2] for p in pending]))
        distinct = np.ones(len(train), dtype=bool)  # not np.unique: it hashes (1.7 s at 1.7 M)
        distinct[1:] = train[1:] != train[:-1]
        train = train[distinct]
        bits = max(16, len(train).bit_length() + 4)  # at most 1/16 of the table is set
        shift = np.uint64(64 - bits)
        table = np.zeros(1 << bits, dtype=bool)
        table[train >> shift] = True
        found = []
        for r, (hashes, _rows, _starts, _orders) in enumerate(self._runs):
            maybe = np.flatnonzero(table[hashes >> shift])
            at = np.minimum(np.searchsorted(train, hashes[maybe]), len(train) - 1)
            hit = maybe[train[at] == hashes[maybe]]
            if len(hit):
                self._hits.setdefault(r, []).append(hit)
                found.append(hashes[hit])
        for k, grouped in enumerate(self._grouped):  # sorted by hash: looked up
            pos = grouped.lookup(train)
            pos = pos[np.array(self._placed(k, pos)[0], dtype=np.int64) >= 0]
            if len(pos):
                self._grouped_hits.setdefault(k, []).append(pos)
                found.append(grouped.hashes_at(pos))
        uniq = np.unique(np.concatenate(found)) if found else np.zeros(0, np.uint64)
        for batch, ids, hashes, episode, kind in pending:
            g = np.searchsorted(uniq, hashes)
            hit = g < len(uniq)
            hit[hit] = uniq[g[hit]] == hashes[hit]
            g, t = g[hit], episode[hit]
            # Each (group, train episode) once, in the order the train windows meet them.
            _, first = np.unique(g * max(len(ids), 1) + t, return_index=True)
            first.sort()
            for h, ti in zip(uniq[g[first]].tolist(), t[first].tolist(), strict=True):
                trains = self._group_trains.setdefault(h, {})
                trains[(batch, ids[ti])] = trains.get((batch, ids[ti]), 0) | kind

    def _runs_of(self) -> dict[int, tuple[tuple[str, str], int, tuple[int, int, int], int,
                                          int]]:
        """Per held episode sharing a run with train episodes: the first train episode met
        (in the order fed), how many train episodes share a run with it, and the longest run
        it shares with the first (`_shared`). Groups are expanded to held episodes here, once."""
        if self._run_info is not None:
            return self._run_info
        self._match()
        if not self._group_trains:
            self._run_info = {}
            return self._run_info
        # The held windows of the groups hit (found by `_match`), each group's in the order
        # held: (held episode, start, order).
        of_group: dict[int, list[tuple[int, int, int]]] = {}
        for r in sorted(self._hits):
            hashes, rows, starts, orders = self._runs[r]
            js = np.unique(np.concatenate(self._hits[r]))
            for g, i, s, o in zip(hashes[js].tolist(), rows[js].tolist(), starts[js].tolist(),
                                  orders[js].tolist(), strict=True):
                of_group.setdefault(g, []).append((i, s, o))
        for k in sorted(self._grouped_hits):
            js = np.unique(np.concatenate(self._grouped_hits[k]))
            for g, i, s, o, n in zip(self._grouped[k].hashes_at(js).tolist(), *self._placed(k, js),
                                     strict=True):
                of_group.setdefault(g, []).append((i, s, o))
                self._steps[i] = n
        # The first train episode met of each group is its dict's first: groups are ranked
        # by when that was, so a held episode's first train episode is its first group's.
        order = {g: k for k, g in enumerate(self._group_trains)}
        met: dict[int, list[int]] = {}  # held episode -> its groups hit
        at: dict[int, list[tuple[int, int, int]]] = {}  # held episode -> (group, order, start)
        for g in self._group_trains:
            for i, s, o in of_group[g]:
                met.setdefault(i, []).append(g)
                at.setdefault(i, []).append((g, o, s))
        firsts = {g: next(iter(trains)) for g, trains in self._group_trains.items()}
        union: dict[tuple[int, ...], int] = {}  # held episodes of the same groups: counted once
        out = {}
        for i, groups in met.items():
            g0 = min(groups, key=order.__getitem__)
            te = firsts[g0]
            key = tuple(sorted(set(groups)))
            if key not in union:
                union[key] = len(set().union(*(self._group_trains[g] for g in key)))
            shared = {(o, s) for g, o, s in at[i] if te in self._group_trains[g]}
            kinds = 0
            for g, _, _ in at[i]:
                kinds |= self._group_trains[g].get(te, 0)
            out[i] = (te, union[key], *self._shared(shared, i), kinds)
        self._run_info = out
        return out

    def _shared(self, starts: set[tuple[int, int]], i: int) -> tuple[tuple[int, int, int], int]:
        """The longest run of steps held episode ``i`` shares with its first train match (the
        ``(order, start)`` of its windows that train episode shares, each the hash of the
        `step_windows.span` steps from its start; the first order of the longest), and its
        order."""
        best = (0, 0, 0, 0)  # steps, -order, first, last
        for order in sorted({o for o, _ in starts}):
            s = np.array(sorted(x for o, x in starts if o == order), dtype=np.int64)
            breaks = np.flatnonzero(np.diff(s) != 1)
            firsts = np.concatenate(([0], breaks + 1))
            lasts = np.concatenate((breaks, [len(s) - 1]))
            k = int(np.argmax(lasts - firsts))
            first, last = int(s[firsts[k]]), int(s[lasts[k]])
            steps = span(order, self._steps.get(i, 0))
            best = max(best, (last - first + steps, -order, first, last + steps - 1))
        _, order, first, last = best
        n = self._steps.get(i, 0)
        return (*held_steps(-order, n, first, last), n), -order

    def feed_normalised(self, batch: str, pairs: Iterable[tuple[str, str]]) -> None:
        """Match the normalised text fingerprints of train episodes of ``batch``."""
        self._freeze()
        for episode, fp in pairs:
            for i in self._norm.get(fp, ()):
                self._norm_first.setdefault(i, (batch, episode))
                self._norm_count[i] = self._norm_count.get(i, 0) + 1

    def _freeze(self) -> None:
        if self._frozen:
            return
        self._frozen = True
        held = FeatureChunk.concat(self._held)
        self._held = []
        for modality in self.thresholds:
            rows = np.flatnonzero(_near_mask(held, modality)) if len(held) else np.zeros(0, int)
            self._near[modality] = (rows.astype(np.int64), held.vectors[rows])
        n = len(self._episodes)
        self._best = np.full(n, -2.0)
        self._count = np.zeros(n, dtype=np.int64)
        self._best_of = [None] * n
        # The held windows stay as held, never sorted nor grouped (`_match`).

    def feed(self, batch: str, chunk: FeatureChunk) -> None:
        """Match train episodes of ``batch`` against every held episode."""
        self._freeze()
        if not len(chunk) or not self._episodes:
            return
        # Exact: equal content fingerprints.
        for j, fp in enumerate(chunk.fingerprints):
            for i in self._fp.get(fp, ()) if fp is not None else ():
                self._exact_first.setdefault(i, (batch, chunk.episode_ids[j]))
                self._exact_count[i] = self._exact_count.get(i, 0) + 1
        # Near: cosine similarity per modality, compared `_NEAR_PENDING` train episodes at a time.
        for modality in self.thresholds:
            rows, _held = self._near[modality]
            cols = np.flatnonzero(_near_mask(chunk, modality))
            if not len(rows) or not len(cols):
                continue
            pending = self._near_pending.setdefault(modality, [])
            pending.append((batch, chunk.episode_ids, cols, chunk.vectors[cols]))
            if sum(len(p[2]) for p in pending) >= _NEAR_PENDING:
                self._compare(modality)

    def _compare(self, modality: str) -> None:
        """Compare the train episodes of ``modality`` fed since the last call with every held
        one: a screen (one product of each block of `_BLOCK` held vectors with all of theirs;
        held38: ten batches' products of a block cost ten calls of the BLAS), then, only for
        a block the screen cannot clear, each fed chunk's own product, in the order fed
        (`_near_block`): the very products, and so the very decisions, of comparing each
        chunk as it is fed. The screen clears a block when each of its similarities is finite
        and below its held row's threshold less `_slack`: the two products of a pair differ by
        less than that (both within ``n u ||h|| ||t|| / (1 - n u)`` of the exact dot product
        of the same float32 vectors, whatever the order of their sums; Higham, Accuracy and
        Stability of Numerical Algorithms, 3.1), so no pair the chunk's product would flag is
        in a block cleared."""
        pending = self._near_pending.pop(modality, [])
        if not pending:
            return
        rows, held = self._near[modality]
        threshold = self.thresholds[modality]
        train = pending[0][3] if len(pending) == 1 else np.concatenate([p[3] for p in pending])
        with np.errstate(all="ignore"):
            reach = float(np.max(np.linalg.norm(train.astype(np.float64), axis=1)))
            limit = threshold - _slack(self._held_norms(modality), reach, threshold,
                                       held.shape[1])
        for lo in range(0, len(rows), _BLOCK):
            if len(pending) > 1:
                sims = held[lo : lo + _BLOCK] @ train.T
                if np.isfinite(sims).all() and not (
                        sims.max(axis=1).astype(np.float64) >= limit[lo : lo + _BLOCK]).any():
                    continue  # no pair of this block reaches its threshold
            for batch, ids, cols, vectors in pending:
                self._near_block(rows, held, lo, threshold, batch, ids, cols, vectors)

    def _held_norms(self, modality: str) -> npt.NDArray[np.float64]:
        """The norms of the held vectors of ``modality`` (float64), computed once."""
        if modality not in self._norms:
            held = self._near[modality][1]
            with np.errstate(all="ignore"):  # a slice at a time: 4 MB, not 1 KiB a row
                self._norms[modality] = np.concatenate(
                    [np.zeros(0)] + [np.linalg.norm(held[lo : lo + 4096].astype(np.float64),
                                                    axis=1) for lo in range(0, len(held), 4096)])
        return self._norms[modality]

    def _near_block(self, rows: npt.NDArray[np.int64], held: npt.NDArray[np.float32], lo: int,
                    threshold: float, batch: str, ids: Sequence[str],
                    cols: npt.NDArray[np.int64], train: npt.NDArray[np.float32]) -> None:
        """Compare the held vectors ``held[lo : lo + _BLOCK]`` (rows ``rows[lo:]``) with the
        vectors ``train`` of a chunk of ``batch`` (its episodes ``ids`` at ``cols``)."""
        sims = held[lo : lo + _BLOCK] @ train.T
        over = sims >= threshold
        # Only a held episode with a match has a best one to name (`findings`): the
        # others' rows are passed over (hold30; the same best, its first on a tie).
        some = np.flatnonzero(over.any(axis=1))
        if not len(some):
            return
        block_rows, sims = rows[lo + some], sims[some]
        self._count[block_rows] += over[some].sum(axis=1)
        j = sims.argmax(axis=1)
        s = sims[np.arange(len(block_rows)), j]
        better = np.flatnonzero(s > self._best[block_rows])
        for k in better.tolist():
            i = int(block_rows[k])
            self._best[i] = float(s[k])
            self._best_of[i] = (batch, ids[int(cols[j[k]])])

    def findings(self) -> list[Finding]:
        """One finding per held episode with a match: exact first, then by batch and episode."""
        self._freeze()
        for modality in list(self._near_pending):
            self._compare(modality)
        for n in list(self._fit_pending):
            self._fit_now(n)
        runs = self._runs_of()
        numeric = set(self._near["numeric"][0].tolist()) if "numeric" in self._near else set()
        out: list[Finding] = []
        for i in range(len(self._episodes)):
            b, e = self._batches[i], self._episodes[i]
            normalised = i not in self._exact_first and i in self._norm_first
            shared, order, kinds = None, 0, _PLAIN
            if i in self._exact_first:
                tb, te = self._exact_first[i]
                kind, sim, matches = "exact", 1.0, self._exact_count[i]
            elif normalised:
                tb, te = self._norm_first[i]
                kind, sim, matches = "exact", 1.0, self._norm_count[i]
            elif i in runs:
                (tb, te), matches, shared, order, kinds = runs[i]
                kind, sim = "exact", 1.0
            elif (sketch := self._by_sketch(i, i in numeric)) is not None:
                out.append(sketch)
                continue
            elif self._count[i] > 0 and self._best_of[i] is not None:
                tb, te = self._best_of[i]  # type: ignore[misc]
                kind, sim, matches = (
                    "near",
                    round(min(float(self._best[i]), 1.0), 6),
                    int(self._count[i]),
                )
            else:
                continue
            train_labels = tuple(self.train_labels.get(tb, ()))
            other_labels = tuple(self.other_labels.get(b, ()))
            k, _, back = order_steps(order)
            added = () if kinds & _PLAIN else tuple(  # known of the train side's windows only
                name for bit, name in ((_CLOCKS, "clock"), (_STILL, "standing")) if kinds & bit)
            out.append(Finding(kind, sim, tb, te, b, e, matches, train_labels, other_labels,
                               normalised, shared, k, back, order >= COLUMNS, added))
        out.sort(key=lambda f: (f.kind != "exact", f.other_batch, f.other_episode))
        return out


    def _by_sketch(self, i: int, numeric: bool) -> SketchFinding | None:
        """The finding of sealed held episode ``i`` by its published sketch, if any: equal to a
        train episode's (`EQUAL_SKETCH`: exact), else fitted (`FIT_EXACT`: exact), else near
        by cosine (None: a plain near `Finding`), else fitted within `FIT_NEAR` (near)."""
        if i not in self._sealed:
            return None
        b, e, steps = self._batches[i], self._episodes[i], self._sealed[i]
        other = tuple(self.other_labels.get(b, ()))
        near = self._count[i] > 0 and self._best_of[i] is not None
        if near and numeric and self._best[i] >= EQUAL_SKETCH:
            tb, te = self._best_of[i]  # type: ignore[misc]
            return SketchFinding("exact", round(min(float(self._best[i]), 1.0), 6), tb, te, b, e,
                                 int(self._count[i]), tuple(self.train_labels.get(tb, ())),
                                 other, steps=steps)
        if i in self._fit_best and (not near or self._fit_best[i][0] <= FIT_EXACT):
            fitted, tb, te = self._fit_best[i]
            return SketchFinding("exact" if fitted <= FIT_EXACT else "near", _cosine(fitted), tb,
                                 te, b, e, self._fit_count[i],
                                 tuple(self.train_labels.get(tb, ())), other, steps=steps,
                                 fitted=fitted)
        if i in self._trim_best and not near:
            ratio, fitted, tb, te = self._trim_best[i]
            return SketchFinding("near", _cosine(fitted), tb, te, b, e, self._trim_count[i],
                                 tuple(self.train_labels.get(tb, ())), other, steps=steps,
                                 fitted=fitted, trimmed=ratio)
        return None

def _cosine(tangent: float) -> float:
    """The cosine of the angle of ``tangent`` (a fitted finding's similarity), to 6 places."""
    return round(1.0 / float(np.hypot(1.0, tangent)), 6)


# --------------------------------------------------------------------------------------------
# A sealed held-out episode's published sketch fitted in the span of a train episode's parts
# (seal47): `Parts` (each train episode's observation part, made orthogonal to the span of its
# actions' and rewards' parts, `episode_vectors.sketch_parts`) and `tangents`, how far a held
# sketch is from that span. A copy, its rewards scaled or shifted or its actions mapped
# ``1 - a`` or ``a + 1``, gives float32 rounding (below 1e-6); one whose observations at one
# of N steps were replaced about ``1 / sqrt(N)`` of them changed; unrelated episodes far more.
# Spec: docs/audit-index.md ("Sealed held-out episodes").


PARTS_COLUMNS = ("obs", "action", "reward")
"""The step columns `iter_parts` reads."""

FIT_FLOOR = 1e-3
"""What the actions and rewards must leave of a held sketch (of its norm) for a fit to say
anything: below, its observations hardly show beside them (their part at float32 rounding
would be 6e-5 of what is left), and the pair is not compared."""
_RANK = 1e-9
"""A part within this of the span of the others (relative to the largest) adds no direction:
CartPole's reward of 1 at every step is its ones' part, an action slot never used is zero."""
_BLOCK = 256
STILL_FLOOR = 1e-2
"""What a train episode's observations must leave of their part beyond the span of constant
and counter observations (`episode_vectors.still_parts`) for any fit to it to count (rev45
finding 1); below, a still episode, only an exact one within `STILL_FIT`. Every episode of a
length with such observations is its copy to a scale, and a held sketch's actions and rewards
may be "re-encoded" by a scale of 0, so a sealed suite of one constant observation with
constant actions and rewards was an exact duplicate of each of them. A held sketch made of
that span (whatever its constants, actions and rewards) fits an episode leaving r of its
observations to about r: 0.98 r at least (the best such sketch, each MountainCar episode's own
still part, 300 episodes of 16 to 50 steps). Least of real episodes (random policies, 16
steps or more): CartPole 0.17, Pendulum 0.068, Acrobot 0.14, MountainCar 0.0014 (half of its
episodes of 16 to 50 steps are still: the car hardly leaves its start; rev46 finding 5)."""
STILL_FIT = 0.25
"""A fit to a still train episode leaving r of its observations counts when its tangent is at
most ``r * STILL_FIT`` (and `FIT_EXACT`): an exact copy, never a near one, so a sketch of
constants and counters (about r) never counts, while a copy re-encoded does (its tangent is
float32 rounding over r: 1.5e-7 at most, 300 MountainCar copies). rev45 fitted no still
episode, and their re-encoded copies escaped (rev46 finding 5)."""
STILL_LEAST = 1e-5
"""A still train episode leaving less than this (float32 rounding's reach: constant or counter
observations) is not fitted at all."""


@dataclass(frozen=True)
class Parts:
    """Train episodes' parts of one length, ready to fit: ``ones`` (128, k) an orthonormal basis
    of the parts of ones (the same for every episode of a length), ``span`` (n, 128, r) one of
    what each episode's actions' and rewards' values add to it (columns of zeros beyond an
    episode's rank: r is the largest), ``obs`` (n, 128) the observations' part less its
    projection on both, scaled to unit length, ``ok`` (n,) whether any of it is left
    (observations not made of the actions and rewards), ``most`` (n,) the largest tangent a
    fit to the episode may have (`STILL_FLOOR`; inf but for still episodes)."""

    ones: npt.NDArray[np.float64]
    span: npt.NDArray[np.float64]
    obs: npt.NDArray[np.float64]
    ok: npt.NDArray[np.bool_]
    most: npt.NDArray[np.float64]

    @classmethod
    def of(cls, parts: npt.NDArray[np.float64], length: int | None = None) -> Parts:
        """From `episode_vectors.sketch_parts` of episodes of one length; with ``length``
        (theirs), an episode whose observations leave r <= `STILL_FLOOR` of their part
        beyond `episode_vectors.still_parts` (constant, or a counter) is fitted only to
        ``r * STILL_FIT`` (``most``), and not at all when r is under `STILL_LEAST`."""
        if not len(parts):
            return cls(np.zeros((parts.shape[2], 0)), np.zeros((0, parts.shape[2], 0)),
                       parts[:, 0, :], np.zeros(0, dtype=bool), np.zeros(0))
        scale = np.linalg.norm(parts[:, 1:, :], axis=2).max(axis=1)  # each episode's largest
        u, s, _ = np.linalg.svd(parts[0, 6:, :].T, full_matrices=False)
        ones = u[:, s > _RANK * max(float(s[0]), 1e-300)]
        values = parts[:, 1:6, :] - (parts[:, 1:6, :] @ ones) @ ones.T
        u, s, _ = np.linalg.svd(values.transpose(0, 2, 1), full_matrices=False)
        kept = s > _RANK * scale[:, None]
        rank = int(kept.sum(axis=1).max())
        span = u[:, :, :rank] * kept[:, None, :rank]
        obs = parts[:, 0, :] - (parts[:, 0, :] @ ones) @ ones.T
        obs -= np.einsum("nkr,nr->nk", span, np.einsum("nkr,nk->nr", span, obs))
        norm = np.linalg.norm(obs, axis=1)
        ok = norm > _RANK * np.linalg.norm(parts[:, 0, :], axis=1)
        most = np.full(len(parts), np.inf)
        if length is not None:  # rev45 finding 1: observations that tell no episode apart
            u, s, _ = np.linalg.svd(np.hstack([ones, still_parts(length).T]),
                                    full_matrices=False)
            still = u[:, s > _RANK * float(s[0])]
            moved = parts[:, 0, :] - (parts[:, 0, :] @ still) @ still.T
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.linalg.norm(moved, axis=1) / np.linalg.norm(parts[:, 0, :], axis=1)
            r = np.nan_to_num(r, nan=0.0)
            most = np.where(r > STILL_FLOOR, np.inf,
                            np.where(r >= STILL_LEAST, np.minimum(r * STILL_FIT, FIT_EXACT),
                                     -1.0))
        return cls(ones, span, obs / np.where(ok, norm, 1.0)[:, None], ok, most)


def tangents(held: npt.NDArray[np.floating], parts: Parts) -> npt.NDArray[np.float64]:
    """``(len(held), n)``: for held sketch h and train episode t (of its length), with h' what
    t's actions and rewards leave of h, the tangent of the angle between h' and t's
    observation part (what the least-squares fit of h in t's 11 parts leaves over, against
    the fit's observation term); ``inf`` where h' is below `FIT_FLOOR` of h, the angle is 90
    degrees or more, t's observations are made of its actions and rewards, or the tangent
    is over t's ``most`` (a still episode: `STILL_FIT`)."""
    h = np.asarray(held, dtype=np.float64)
    n = len(parts.ok)
    out = np.full((len(h), n), np.inf)
    if not len(h) or not n:
        return out
    floor = FIT_FLOOR**2 * np.einsum("ak,ak->a", h, h)[:, None]
    h = h - (h @ parts.ones) @ parts.ones.T  # the same span for all: taken out once
    hh = np.einsum("ak,ak->a", h, h)[:, None]
    for lo in range(0, n, _BLOCK):
        span, obs, ok = (parts.span[lo : lo + _BLOCK], parts.obs[lo : lo + _BLOCK],
                         parts.ok[lo : lo + _BLOCK])  # fmt: skip
        b, dim, rank = span.shape
        proj = (h @ span.transpose(1, 0, 2).reshape(dim, b * rank)).reshape(len(h), b, rank)
        left = hh - np.einsum("abr,abr->ab", proj, proj)
        dot = h @ obs.T
        rest = np.sqrt(np.maximum(left - dot * dot, 0.0))
        seen = (left >= floor) & (dot > 0) & ok[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            tan = np.where(seen, rest / dot, np.inf)
        out[:, lo : lo + b] = np.where(tan <= parts.most[None, lo : lo + b], tan, np.inf)
    return out


def iter_parts(batches: Iterable[pa.RecordBatch | pa.Table], ids: Sequence[str],
               steps: npt.NDArray[np.int64], lengths: set[int]) -> Iterator[
        tuple[list[str], npt.NDArray[np.int64], npt.NDArray[np.float64]]]:
    """The ids, lengths and `episode_vectors.sketch_parts` of the episodes of ``lengths``
    steps in a stream of step record batches whose episodes are ``ids`` of ``steps`` steps,
    in file order (their features': no string column is read). An episode cut between two
    record batches is carried to the next: memory is one record batch and one episode.

    Raises:
        ValueError: the stream's rows are not the episodes' (features of another file).
    """
    ends = np.cumsum(steps)
    starts = ends - steps
    picked = np.flatnonzero(np.isin(steps, list(lengths))).tolist()
    k, rows = 0, 0  # the next picked episode; the rows read
    carry, at = None, 0  # rows of a picked episode cut by a record batch; its first row
    for batch in batches:
        t = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        if not t.num_rows:
            continue
        t = t.select([c for c in PARTS_COLUMNS if c in t.column_names])
        lo = at if carry is not None else rows
        rows += t.num_rows
        t = pa.concat_tables([carry, t]) if carry is not None else t
        j = k
        while j < len(picked) and ends[picked[j]] <= rows:
            j += 1
        if j > k:
            cols = tuple(t.column(c).combine_chunks() if c in t.column_names else None
                         for c in PARTS_COLUMNS)
            done = picked[k:j]
            yield ([ids[e] for e in done], steps[done],
                   sketch_parts(cols, starts[done] - lo, steps[done]))  # type: ignore[arg-type]
            k = j
        carry = None
        if k < len(picked) and starts[picked[k]] < rows:
            at = int(starts[picked[k]])
            carry = t.slice(at - lo)
    if rows != (int(ends[-1]) if len(ends) else 0):
        raise ValueError(f"the step file has {rows} rows, its episodes' features "
                         f"{int(ends[-1]) if len(ends) else 0}: features of another file")


def trimmed(held: npt.NDArray[np.floating], parts: npt.NDArray[np.float64],
            ia: npt.NDArray[np.intp], jb: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
    """For each pair k of a held sketch ``held[ia[k]]`` and a train episode's parts
    ``parts[jb[k]]`` (`episode_vectors.sketch_parts`, of its length): the least-squares fit of
    the sketch in the span of the parts, made again `_TRIM_ROUNDS` times without the
    `TRIM_BUCKETS` buckets the fit before left most of (a copy with a step or two changed
    differs from the train episode's sketch in those buckets only), and what it leaves there
    over its observation term (``inf`` where that term is not positive). The parts are scaled
    to unit length and the normal equations carry a ridge of 1e-10: a part of zeros or one
    equal to another (CartPole's rewards of 1, its ones) stays solvable.

    Each train episode's scaled parts and their Gram matrix are made once (for those of some
    pair), not once a pair (seal48), and a fit without buckets takes theirs out of that matrix
    (16 of 128 rows: the normal equations of the weighted fit, as seal47 summed them over the
    112 kept)."""
    out = np.full(len(ia), np.inf)
    if not len(ia):
        return out
    used, jb = np.unique(jb, return_inverse=True)  # the train episodes of some pair
    a_all = parts[used].transpose(0, 2, 1)  # (n, 128, 11)
    norm = np.linalg.norm(a_all, axis=1)
    a_all = a_all / np.where(norm > 0, norm, 1.0)[:, None, :]
    gram = a_all.transpose(0, 2, 1) @ a_all + np.eye(a_all.shape[2]) * 1e-10
    ones = np.einsum("nki,nki->ni", a_all, a_all)[:, 0]  # the observation part's, 1 or 0
    h_all = np.asarray(held, dtype=np.float64)
    for lo in range(0, len(ia), _TRIM_BLOCK):
        j = jb[lo : lo + _TRIM_BLOCK]
        a, g, h = a_all[j], gram[j], h_all[ia[lo : lo + _TRIM_BLOCK]]
        at = np.arange(len(j))[:, None]
        ath = a.transpose(0, 2, 1) @ h[..., None]  # (P, 11, 1)
        c = np.linalg.solve(g, ath)
        left = h - (a @ c)[..., 0]
        for _ in range(_TRIM_ROUNDS):  # (stacked matmul: einsum of these was 2-5 x slower)
            worst = np.argpartition(-np.abs(left), TRIM_BUCKETS - 1, axis=1)[:, :TRIM_BUCKETS]
            a_s = a[at, worst]  # (P, 16, 11)
            a_st = a_s.transpose(0, 2, 1)
            c = np.linalg.solve(g - a_st @ a_s, ath - a_st @ h[at, worst][..., None])
            left = h - (a @ c)[..., 0]
        alpha = c[:, 0, 0]
        left[at, worst] = 0.0  # what is left in the buckets kept (summed: no cancellation)
        rest = np.sqrt(np.einsum("pk,pk->p", left, left))
        kept = ones[j] - np.einsum("pk,pk->p", a_s[:, :, 0], a_s[:, :, 0])
        obs = np.abs(alpha) * np.sqrt(np.maximum(kept, 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            out[lo : lo + _TRIM_BLOCK] = np.where((alpha > 0) & (obs > 0), rest / obs, np.inf)
    return out


_TRIM_ROUNDS = 3
"""Fits after the first, each without the buckets the one before it left most of."""
_TRIM_BLOCK = 512
"""Pairs fitted at once: about 6 MiB an array of them."""
