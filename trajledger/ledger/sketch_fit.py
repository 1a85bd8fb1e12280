"""A sealed held-out episode's published sketch fitted in the span of a train episode's parts:
the copy whose actions or rewards were re-encoded affinely, or a few of whose steps changed.

Scope: `Parts` (each train episode's observation part, made orthogonal to the span of its
actions' and rewards' parts, `episode_vectors.sketch_parts`) and `tangents`: for each pair of
held sketch and train episode of one length, how far the held sketch is from that span, as the
tangent of the angle between what the actions and rewards leave of it and what they leave of
the train episode's observations. A copy, its rewards scaled or shifted or its actions mapped
``1 - a`` or ``a + 1``, gives float32 rounding (below 1e-6); one whose observations at one of
N steps were replaced about ``1 / sqrt(N)`` of them changed; unrelated episodes far more.
Non-scope: which pairs are compared and what a tangent is called (``contamination_matcher``:
`FIT_EXACT`, `FIT_NEAR`); the sketch's definition (``episode_vectors``).
Spec: docs/audit-index.md ("Sealed held-out episodes").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .episode_vectors import sketch_parts

__all__ = ["FIT_FLOOR", "PARTS_COLUMNS", "Parts", "iter_parts", "tangents"]

PARTS_COLUMNS = ("episode_id", "obs", "action", "reward")
"""The step columns `iter_parts` reads."""

FIT_FLOOR = 1e-3
"""What the actions and rewards must leave of a held sketch (of its norm) for a fit to say
anything: below, its observations hardly show beside them (their part at float32 rounding
would be 6e-5 of what is left), and the pair is not compared."""
_RANK = 1e-9
"""A part within this of the span of the others (relative to the largest) adds no direction:
CartPole's reward of 1 at every step is its ones' part, an action slot never used is zero."""
_BLOCK = 256


@dataclass(frozen=True)
class Parts:
    """Train episodes' parts, ready to fit: ``span`` (n, 128, 10) an orthonormal basis of the
    actions' and rewards' parts (columns of zeros beyond its rank), ``obs`` (n, 128) the
    observations' part less its projection on that span, scaled to unit length, ``ok``
    (n,) whether any of it is left (observations not made of the actions and rewards)."""

    span: npt.NDArray[np.float64]
    obs: npt.NDArray[np.float64]
    ok: npt.NDArray[np.bool_]

    @classmethod
    def of(cls, parts: npt.NDArray[np.float64]) -> Parts:
        """From `episode_vectors.sketch_parts`."""
        nuisance = parts[:, 1:, :].transpose(0, 2, 1)
        if not len(parts):
            return cls(nuisance, parts[:, 0, :], np.zeros(0, dtype=bool))
        u, s, _ = np.linalg.svd(nuisance, full_matrices=False)
        u *= (s > _RANK * s[:, :1])[:, None, :]
        obs = parts[:, 0, :]
        left = obs - np.einsum("nkr,nr->nk", u, np.einsum("nkr,nk->nr", u, obs))
        norm = np.linalg.norm(left, axis=1)
        ok = norm > _RANK * np.linalg.norm(obs, axis=1)
        return cls(u, left / np.where(ok, norm, 1.0)[:, None], ok)


def tangents(held: npt.NDArray[np.floating], parts: Parts) -> npt.NDArray[np.float64]:
    """``(len(held), n)``: for held sketch h and train episode t, with h' what t's actions and
    rewards leave of h, the tangent of the angle between h' and t's observation part (what
    the least-squares fit of h in t's 11 parts leaves over, against the fit's observation
    term); ``inf`` where h' is below `FIT_FLOOR` of h, the angle is 90 degrees or more, or
    t's observations are made of its actions and rewards."""
    h = np.asarray(held, dtype=np.float64)
    n = len(parts.ok)
    out = np.full((len(h), n), np.inf)
    if not len(h) or not n:
        return out
    hh = np.einsum("ak,ak->a", h, h)
    for lo in range(0, n, _BLOCK):
        span, obs, ok = (parts.span[lo : lo + _BLOCK], parts.obs[lo : lo + _BLOCK],
                         parts.ok[lo : lo + _BLOCK])  # fmt: skip
        b, dim, rank = span.shape
        proj = (h @ span.transpose(1, 0, 2).reshape(dim, b * rank)).reshape(len(h), b, rank)
        left = hh[:, None] - np.einsum("abr,abr->ab", proj, proj)
        dot = h @ obs.T
        rest = np.sqrt(np.maximum(left - dot * dot, 0.0))
        seen = (left >= FIT_FLOOR**2 * hh[:, None]) & (dot > 0) & ok[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            out[:, lo : lo + b] = np.where(seen, rest / dot, np.inf)
    return out


def iter_parts(batches: Iterable[pa.RecordBatch | pa.Table], lengths: set[int]) -> Iterator[
        tuple[list[str], npt.NDArray[np.int64], npt.NDArray[np.float64]]]:
    """The ids, lengths and `episode_vectors.sketch_parts` of the episodes of ``lengths``
    steps in a stream of step record batches (episodes contiguous, as a recorded batch's are;
    the unfinished last one carried to the next batch, and dropped once longer than any of
    ``lengths``: memory is one record batch and one wanted episode)."""
    longest = max(lengths, default=0)
    carry: pa.Table | None = None
    dropping: object = None  # the id of an episode too long to be wanted, while it lasts
    for batch in batches:
        t = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        if not t.num_rows:
            continue
        t = t.select([c for c in PARTS_COLUMNS if c in t.column_names])
        if dropping is not None:
            ids = t.column("episode_id")
            keep = pc.not_equal(ids, pa.scalar(dropping, ids.type)).fill_null(True)
            first = int(np.argmax(np.asarray(keep.to_numpy(zero_copy_only=False))))
            if not bool(keep[first].as_py()):
                continue  # all of it the episode dropped
            t, dropping = t.slice(first), None
        t = pa.concat_tables([carry, t]) if carry is not None else t
        starts = _starts(t)
        carry = t.slice(int(starts[-1]))
        yield from _parts(t.slice(0, int(starts[-1])), starts[:-1], lengths)
        if carry.num_rows > longest:
            dropping, carry = carry.column("episode_id")[0].as_py(), None
    if carry is not None and carry.num_rows:
        yield from _parts(carry, np.zeros(1, np.int64), lengths)


def _starts(t: pa.Table) -> npt.NDArray[np.int64]:
    ids = t.column("episode_id").combine_chunks()
    n = len(ids)
    changes = np.asarray(pc.not_equal(ids.slice(1), ids.slice(0, n - 1)).fill_null(True)
                         .to_numpy(zero_copy_only=False), dtype=bool)
    return np.concatenate(([0], np.flatnonzero(changes) + 1)).astype(np.int64)


def _parts(t: pa.Table, starts: npt.NDArray[np.int64], lengths: set[int]) -> Iterator[
        tuple[list[str], npt.NDArray[np.int64], npt.NDArray[np.float64]]]:
    """The parts of the episodes of ``t`` starting at ``starts`` whose length is wanted."""
    if not len(starts):
        return
    lens = np.diff(np.append(starts, t.num_rows)).astype(np.int64)
    pick = np.flatnonzero(np.isin(lens, list(lengths)))
    if not len(pick):
        return

    def col(name: str) -> pa.Array | None:
        return t.column(name).combine_chunks() if name in t.column_names else None

    ids = t.column("episode_id").combine_chunks()
    names = [str(ids[int(s)].as_py()) for s in starts[pick].tolist()]
    yield names, lens[pick], sketch_parts((col("obs"), col("action"), col("reward")),
                                          starts[pick], lens[pick])
