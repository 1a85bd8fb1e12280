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
from typing import Any

from trajledger.verify.errors import FormatError

from .errors import LedgerError

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


def validate_files(paths: Sequence[Path], fmt: str | None = None) -> FilesReport:
    """Validate rollout files as one batch.

    Raises:
        LedgerError: a file is missing.
    """
    from .rollouts import RolloutValidationError, iter_rollout_chunks, write_steps_parquet

    for p in paths:
        if not p.is_file():
            raise LedgerError(f"{p}: no such file")

    def chunks() -> Any:
        for p in paths:
            yield from iter_rollout_chunks(p, fmt)

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
