"""Success: one definition for the batch manifest and for every statistic derived from batches.

Scope: which episodes of a batch are successes and whether the batch labels success at all;
`episode_success` gives the per-episode answer (used by the audit index), `SuccessCount`
accumulates it over a stream of episode batches (used by the manifest summary).
Non-scope: judge scores (an evaluator's opinion, not a label), segment statistics.
Spec: ``schemas/rollout.v3.md`` section "Success".

Definition. An episode is *labelled* when its ``success`` column is not null (schema v2, v3), or
its ``termination_reason`` is ``success`` or ``failure`` (every version). A batch *labels
success* when any of its episodes is labelled. Then every episode of the batch counts: it is a
success when ``success`` is true, or, with ``success`` null, when ``termination_reason`` is
``success``; anything else (a failure, an episode cut by ``length``, an ``error``, an episode
with no label) is not a success. The success rate is successes over all the batch's episodes.
A batch that labels nothing has no success rate (null), and its episodes no success (null).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["SuccessCount", "batch_labels_success", "episode_success", "success_flags"]


def success_flags(
    episodes: pa.Table | pa.RecordBatch,
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Per episode: (is a success, is labelled), by the definition above.

    Args:
        episodes: an episode table (schema v1 or v2; only ``success`` and
            ``termination_reason`` are read, either may be absent).

    Returns:
        Two boolean arrays, one value per episode.
    """
    n = episodes.num_rows
    names = episodes.schema.names
    if "termination_reason" in names:
        reasons = episodes.column("termination_reason")
        said_yes = _bools(pc.equal(reasons, "success"))
        said = said_yes | _bools(pc.equal(reasons, "failure"))
    else:
        said_yes = said = np.zeros(n, dtype=bool)
    if "success" in names:
        given = episodes.column("success")
        has = _bools(pc.is_valid(given))
        value = _bools(given)
        return np.where(has, value, said_yes), has | said
    return said_yes, said


def batch_labels_success(episodes_path: str | os.PathLike[str]) -> bool:
    """Whether a batch's ``episodes.parquet`` labels success (reads two columns only)."""
    import pyarrow.parquet as pq

    from .parquet_read import read_parquet

    names = pq.read_schema(episodes_path).names
    cols = [c for c in ("success", "termination_reason") if c in names]
    if not cols:
        return False
    return bool(success_flags(read_parquet(episodes_path, columns=cols))[1].any())


def _bools(arr: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.bool_]:
    filled = pc.fill_null(arr, False) if arr.null_count else arr
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=bool)


def episode_success(
    episodes: pa.Table | pa.RecordBatch, *, batch_labels: bool | None = None
) -> list[bool | None]:
    """Each episode's success when the batch labels success, else None for every episode.

    Args:
        episodes: all the episodes of one batch, or a part of them with ``batch_labels``.
        batch_labels: whether the whole batch labels success (`batch_labels_success`), for a
            part read as a stream; default: decided from ``episodes`` themselves.

    Returns:
        One value per episode: True, False, or None (the batch labels nothing).
    """
    yes, labelled = success_flags(episodes)
    if not (labelled.any() if batch_labels is None else batch_labels):
        return [None] * episodes.num_rows
    return [bool(x) for x in yes.tolist()]


@dataclass
class SuccessCount:
    """Successes over a stream of episode batches of one rollout batch."""

    episodes: int = 0
    successes: int = 0
    labelled: int = 0

    def add(self, episodes: pa.Table | pa.RecordBatch) -> None:
        """Count one batch of episodes."""
        yes, labelled = success_flags(episodes)
        self.episodes += episodes.num_rows
        self.successes += int(yes.sum())
        self.labelled += int(labelled.sum())

    @property
    def count(self) -> int | None:
        """Successes, or None when no episode is labelled."""
        return self.successes if self.labelled else None

    @property
    def rate(self) -> float | None:
        """Successes over all episodes, or None when no episode is labelled."""
        return self.successes / self.episodes if self.labelled and self.episodes else None
