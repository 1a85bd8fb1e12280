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

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from .episode_vectors import sketch_parts

__all__ = ["FIT_FLOOR", "PARTS_COLUMNS", "Parts", "iter_parts", "tangents"]

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


@dataclass(frozen=True)
class Parts:
    """Train episodes' parts of one length, ready to fit: ``ones`` (128, k) an orthonormal basis
    of the parts of ones (the same for every episode of a length), ``span`` (n, 128, r) one of
    what each episode's actions' and rewards' values add to it (columns of zeros beyond an
    episode's rank: r is the largest), ``obs`` (n, 128) the observations' part less its
    projection on both, scaled to unit length, ``ok`` (n,) whether any of it is left
    (observations not made of the actions and rewards)."""

    ones: npt.NDArray[np.float64]
    span: npt.NDArray[np.float64]
    obs: npt.NDArray[np.float64]
    ok: npt.NDArray[np.bool_]

    @classmethod
    def of(cls, parts: npt.NDArray[np.float64]) -> Parts:
        """From `episode_vectors.sketch_parts` of episodes of one length."""
        if not len(parts):
            return cls(np.zeros((parts.shape[2], 0)), np.zeros((0, parts.shape[2], 0)),
                       parts[:, 0, :], np.zeros(0, dtype=bool))
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
        return cls(ones, span, obs / np.where(ok, norm, 1.0)[:, None], ok)


def tangents(held: npt.NDArray[np.floating], parts: Parts) -> npt.NDArray[np.float64]:
    """``(len(held), n)``: for held sketch h and train episode t (of its length), with h' what
    t's actions and rewards leave of h, the tangent of the angle between h' and t's
    observation part (what the least-squares fit of h in t's 11 parts leaves over, against
    the fit's observation term); ``inf`` where h' is below `FIT_FLOOR` of h, the angle is 90
    degrees or more, or t's observations are made of its actions and rewards."""
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
            out[:, lo : lo + b] = np.where(seen, rest / dot, np.inf)
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
