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

__all__ = ["FilesReport", "validate_files"]


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


def validate_files(
    paths: Sequence[Path], fmt: str | None = None, options: ReaderOptions | None = None
) -> FilesReport:
    """Validate rollout files (or Minari dataset directories) as one batch.

    Raises:
        LedgerError: a file is missing.
    """
    from .rollouts import RolloutValidationError, iter_batch_inputs, write_steps_parquet

    for p in paths:
        if not p.exists():
            raise LedgerError(f"{p}: no such file or directory")

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
