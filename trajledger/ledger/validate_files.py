"""``trajledger validate``: check rollout files exactly as ``record`` would, recording nothing.

Scope: the same streaming path as recording (normalise, validate across batch boundaries,
derive episodes), written to a temporary directory that is then discarded, so a file that
validates here records without a data error.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajledger.verify.errors import FormatError

from .errors import LedgerError

if TYPE_CHECKING:
    from .rollouts.chunks import ReaderOptions

__all__ = ["FilesReport", "check_inputs", "validate_files"]


@dataclass(frozen=True)
class FilesReport:
    """What validating some files found."""

    num_steps: int = 0
    num_episodes: int = 0
    problems: tuple[str, ...] = field(default_factory=tuple)
    error: FormatError | None = None

    def to_json(self) -> dict[str, Any]:
        """Stable JSON form."""
        return {
            "ok": not self.problems,
            "steps": self.num_steps,
            "episodes": self.num_episodes,
            "problems": list(self.problems),
        }

    def raise_if_failed(self) -> None:
        """Re-raise the validation error (one line per problem)."""
        if self.error is not None:
            raise self.error


def check_inputs(paths: Sequence[Path]) -> None:
    """Refuse rollout inputs that are missing, or that are neither a regular file nor a directory.

    An input is read more than once (its format is detected, then its records are read): a pipe
    (``<(zcat chats.jsonl.gz)``) would give its first bytes to the detection and the rest as
    the records, and the refusal would name a line that is not the problem.

    Raises:
        LedgerError: the first such input, named.
    """
    for p in paths:
        if not p.exists():
            raise LedgerError(f"{p}: no such file or directory")
        if not (p.is_file() or p.is_dir()):
            raise LedgerError(f"{p}: not a regular file or a directory (an input is read more "
                              "than once: its format, then its records): write it to a file first")


def validate_files(
    paths: Sequence[Path], fmt: str | None = None, options: ReaderOptions | None = None
) -> FilesReport:
    """Validate rollout files (or Minari dataset directories) as one batch.

    Raises:
        LedgerError: a file is missing.
    """
    from .rollouts import RolloutValidationError, iter_batch_inputs, write_steps_parquet

    check_inputs(paths)

    def chunks() -> Any:
        yield from iter_batch_inputs(paths, fmt, options=options)

    with tempfile.TemporaryDirectory() as tmp:
        try:
            stats = write_steps_parquet(
                chunks(),
                Path(tmp) / "steps.parquet",
                episodes_path=Path(tmp) / "episodes.parquet",
                subject=", ".join(str(p) for p in paths),
            )
        except RolloutValidationError as e:
            lines = tuple(str(e).splitlines())
            return FilesReport(problems=lines, error=e)
    return FilesReport(stats.num_steps, stats.num_episodes)
