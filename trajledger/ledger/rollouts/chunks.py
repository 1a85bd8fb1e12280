"""What the rollout readers hand on, and how a record's problems are kept.

Scope: `RolloutChunk` (a slice of an input: steps, episode attributes, batch metadata, and the
features the parallel reader's workers computed), `ReaderOptions` (what an input cannot say
itself), `RecordProblems` (the problems of one record, a line or a row) and the chunks' size
bounds. Moved out of ``formats.py`` to keep each module under 1,000 lines.
Non-scope: the mappings (``formats.py``), building chunks from mapped episodes
(``chunk_builder.py``), the readers (``readers.py``, ``reader_process.py``).
Spec: ``schemas/rollout-inputs.md``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from trajledger.verify.errors import FormatError

from .problems import ProblemCollector

__all__ = [
    "CHUNK_BYTES",
    "CHUNK_TEXT_BYTES",
    "MAX_STEPS",
    "ReaderOptions",
    "RecordProblems",
    "RolloutChunk",
    "StepLimitError",
    "max_steps",
]

CHUNK_BYTES: Final = 64 << 20
"""A chunk of any input holds about this much data at most: a chunk is cut early once its text
fields (records) or values (Parquet, Arrow, Minari) reach it, so memory stays bounded however
large the rows are (long texts, image observations)."""

CHUNK_TEXT_BYTES: Final = CHUNK_BYTES
"""A record chunk is cut early once its text fields hold this many bytes."""

MAX_STEPS: Final = 1 << 24
"""Most steps one batch may hold unless ``TRAJLEDGER_MAX_STEPS`` says otherwise (rec47 finding
2): the cost of recording or validating a batch is linear in its steps, and a Parquet file of a
few kilobytes holds millions of constant ones (8M steps in 212 KB: about 10 CPU-s), as honest
constant data does (1M rows of 80 zeros in 5.3 KB), so no ratio of steps to bytes can tell them
apart. 16,777,216 steps take about 30 CPU-s to record (the bench's 2 CPU-s a million)."""


class StepLimitError(FormatError):
    """A batch holds more steps than `max_steps` allows: refused, nothing more is read."""


def max_steps() -> int:
    """The most steps one batch may hold: ``TRAJLEDGER_MAX_STEPS``, or `MAX_STEPS`.

    Raises:
        StepLimitError: the variable is set to something other than a positive whole number.
    """
    text = os.environ.get("TRAJLEDGER_MAX_STEPS", "").strip().replace("_", "")
    if not text:
        return MAX_STEPS
    if not text.isascii() or not text.isdigit() or not text.strip("0"):
        raise StepLimitError(
            f"TRAJLEDGER_MAX_STEPS={text[:40]!r} is not a number of steps: set it to a whole "
            f"number (the default is {MAX_STEPS:,}) or unset it"
        )
    # (past int64, no batch can hold more: `int` of over 4,300 digits raised a bug, rev46 3)
    digits = text.lstrip("0")
    return int(digits) if len(digits) < 19 else (1 << 63) - 1



@dataclass(frozen=True)
class RolloutChunk:
    """A slice of an input: steps, plus attributes of some episodes, plus batch metadata.

    Attributes:
        steps: step rows (in `STEP_SCHEMA`, or as a Parquet/Arrow input stores them: they are
            normalised when written).
        episodes: episode attributes given by the input (`EPISODE_ATTR_SCHEMA` columns), for
            episodes whose steps are in this chunk or another one; None when the input gives
            none.
        meta: what the input says about the whole batch (source format, spaces, environment
            spec, dataset metadata), recorded in the batch predicate; None when nothing.
        read: bytes of the input files read by the time the chunk was cut (a compressed
            file's bytes as stored), for progress; None when the reader does not tell.
        features: what ``ReaderOptions.features`` made of ``steps`` (their episodes' features,
            computed in the parallel reader's workers), when the chunk holds whole episodes
            only; None otherwise.
    """

    steps: pa.RecordBatch
    episodes: pa.RecordBatch | pa.Table | None = None
    meta: Mapping[str, Any] | None = None
    read: int | None = None
    features: Any = None


@dataclass(frozen=True)
class ReaderOptions:
    """Choices the input cannot express itself.

    Attributes:
        reward_weights: TRL completions: the reward-function columns and their weights (TRL's
            ``reward_weights``); the reward is their weighted sum over the scores present
            (``nansum``). None: every numeric column is a reward function of weight 1.
        reward_column: TRL completions: take the reward from this one column instead.
        id_prefix: prefix of default episode ids (``<prefix>line-<n>``), so that several files
            of one batch give unique ids.
        workers: processes that parse and map a large JSON-lines file of records (chat, TRL,
            verl) in blocks (``reader_process.py``); 1 reads it in line. More than one starts
            worker interpreters (``spawn``): a script that asks for them needs the
            ``if __name__ == "__main__":`` guard that ``multiprocessing`` needs. The batch and
            every refusal are the same either way. ``trajledger record`` uses every core.
        features: with ``workers`` above 1, a module-level function the workers apply to the
            steps of each block of whole records (the recorder passes the episode features',
            so they are computed where the steps already are); its result, sliced to the
            records kept, is each chunk's ``features``. None: nothing computed.
        spill: where ``features`` in the workers writes its temporary files (a long episode's
            spilled bytes): the recorder's private workdir, removed with it (rec47 finding 3).
            None: the system's temporary directory.
    """

    reward_weights: Mapping[str, float] | None = None
    reward_column: str | None = None
    id_prefix: str = ""
    workers: int = 1
    features: Callable[[pa.RecordBatch], Any] | None = None
    spill: str | None = None


class RecordProblems:
    """Problems found in one record (a line, or a row); the record is skipped if there is any."""

    def __init__(self, number: int, collector: ProblemCollector, *, unit: str = "line") -> None:
        """Start a record.

        Args:
            number: 1-based line, or 0-based row.
            collector: where problems go.
            unit: ``line`` (problems carry the line) or ``row``.
        """
        self.number = number
        self.unit = unit
        self.c = collector
        self.failed = False

    def error(self, field: str | None, message: str) -> None:
        """Record a problem with ``field`` (a path such as ``messages[2].role``)."""
        self.failed = True
        if self.unit == "line":
            self.c.add(f"line:{field}:{message[:24]}", message, column=field, line=self.number)
        else:
            self.c.add(f"row:{field}:{message[:24]}", message, column=field, row=self.number)
