"""Problems found in rollout inputs and tables, and the error that lists them.

Scope: `Problem` (one thing wrong, with its row, column or line), `ProblemCollector` (problems
gathered over a whole input, at most `ROWS_PER_KIND` listed per kind, the rest counted),
`ValidationReport` (the outcome of validating a table) and `RolloutValidationError` (raised
with every problem listed); `refusal` builds the error for one problem with a whole input.
Non-scope: finding problems (``validate.py``, ``normalise.py``, the readers).
Spec: ``schemas/rollout.v3.md`` section "Validity" (how problems are reported).

Row numbers count from 0 across the whole table (or the whole stream of batches). Line numbers
of text inputs count from 1.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from trajledger.verify.errors import FormatError

from .schema import ROLLOUT_SCHEMA_VERSION

__all__ = [
    "MAX_LISTED_PROBLEMS",
    "ROWS_PER_KIND",
    "Problem",
    "ProblemCollector",
    "RolloutValidationError",
    "ValidationReport",
    "refusal",
]

ROWS_PER_KIND: Final = 20
"""Rows listed for each kind of problem; the rest are counted in one summary problem."""

MAX_LISTED_PROBLEMS: Final = 50
"""Problems listed in a `RolloutValidationError` message; the rest are counted."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input.

    Attributes:
        row: 0-based row of the table (or of the stream of batches), or None when the problem
            concerns a whole column, table or line.
        column: the column (or JSON field path) concerned, or None.
        message: what is wrong: observed against expected.
        line: 1-based line of a text input (JSONL), or None.
    """

    row: int | None
    column: str | None
    message: str
    line: int | None = None

    def __str__(self) -> str:
        """Render as ``line L, row R, column 'C': message``, leaving out what is unknown."""
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.column is not None:
            where.append(f"column {self.column!r}")
        return f"{', '.join(where)}: {self.message}" if where else self.message


class RolloutValidationError(FormatError):
    """A rollout input or table breaks the rollout schema.

    The message has a summary line, then one line per problem (at most `MAX_LISTED_PROBLEMS`,
    then a count of the rest).

    Attributes:
        subject: what was validated (a path, "steps" or "episodes").
        problems: every problem found, in the order found.
    """

    def __init__(self, subject: str, problems: Sequence[Problem]) -> None:
        """Build the message from the problems.

        Args:
            subject: what was validated.
            problems: every problem found.
        """
        self.subject = subject
        self.problems: tuple[Problem, ...] = tuple(problems)
        n = len(self.problems)
        lines = [
            f"{subject}: {n} problem{'s' if n != 1 else ''} "
            f"(rollout schema v{ROLLOUT_SCHEMA_VERSION})"
        ]
        lines.extend(f"  {p}" for p in self.problems[:MAX_LISTED_PROBLEMS])
        if n > MAX_LISTED_PROBLEMS:
            lines.append(f"  ... and {n - MAX_LISTED_PROBLEMS} more problems")
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class ValidationReport:
    """The outcome of validating one table or stream.

    Attributes:
        subject: what was validated, for messages.
        problems: every problem found; empty when the input is valid.
    """

    subject: str
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    def raise_if_failed(self) -> None:
        """Raise when any problem was found.

        Raises:
            RolloutValidationError: listing the problems.
        """
        if self.problems:
            raise RolloutValidationError(self.subject, self.problems)


class ProblemCollector:
    """Accumulates problems, listing at most ``rows_per_kind`` rows of each kind.

    A *kind* is a short key such as ``"reward:not-finite"``; its first ``rows_per_kind``
    occurrences are kept as problems, the others only counted. `problems` appends one summary
    problem per kind that overflowed.
    """

    def __init__(self, rows_per_kind: int = ROWS_PER_KIND) -> None:
        """Start empty.

        Args:
            rows_per_kind: occurrences of one kind listed before the rest are only counted.
        """
        self._rows_per_kind = rows_per_kind
        self._problems: list[Problem] = []
        self._counts: dict[str, int] = {}
        self._describe: dict[str, tuple[str | None, str]] = {}

    @property
    def count(self) -> int:
        """Number of problems seen, listed or not."""
        return sum(self._counts.values())

    def seen(self, kind: str) -> bool:
        """Whether a problem of this kind was recorded."""
        return kind in self._counts

    def add(
        self,
        kind: str,
        message: str,
        *,
        row: int | None = None,
        column: str | None = None,
        line: int | None = None,
    ) -> None:
        """Record one occurrence of a problem.

        Args:
            kind: the key under which occurrences are capped.
            message: what is wrong.
            row: the row, if any.
            column: the column or field, if any.
            line: the line of a text input, if any.
        """
        seen = self._counts.get(kind, 0)
        self._counts[kind] = seen + 1
        if seen < self._rows_per_kind:
            self._problems.append(Problem(row, column, message, line))
        else:
            self._describe.setdefault(kind, (column, message))

    def add_rows(
        self,
        kind: str,
        rows: npt.NDArray[np.intp] | npt.NDArray[np.int64],
        offset: int,
        column: str | None,
        message: Callable[[int], str],
    ) -> None:
        """Record a vector of offending rows, building messages only for those listed.

        Args:
            kind: the key under which occurrences are capped.
            rows: offending row indices within the current batch.
            offset: row number of the batch's first row in the whole stream.
            column: the column concerned.
            message: builds the message for a batch-relative row index.
        """
        n = len(rows)
        if not n:
            return
        seen = self._counts.get(kind, 0)
        room = max(0, self._rows_per_kind - seen)
        for i in rows[:room].tolist():
            self._problems.append(Problem(offset + i, column, message(i)))
        self._counts[kind] = seen + n
        if n > room:
            self._describe.setdefault(kind, (column, message(int(rows[room]))))

    def count_more(self, kind: str, n: int) -> None:
        """Count ``n`` more occurrences of a kind already listed in full (none listed)."""
        if n:
            self._counts[kind] = self._counts.get(kind, 0) + n

    def problems(self) -> tuple[Problem, ...]:
        """Return the listed problems, then one summary per kind that overflowed."""
        out = list(self._problems)
        for kind, (column, example) in self._describe.items():
            extra = self._counts[kind] - self._rows_per_kind
            out.append(Problem(None, column, f"{extra} more like {example!r} not listed ({kind})"))
        return tuple(out)


def refusal(
    subject: str | os.PathLike[str], message: str, line: int | None = None
) -> RolloutValidationError:
    """The error for one problem with a whole input (a file that cannot be read, a format that
    cannot be told), naming ``subject``."""
    return RolloutValidationError(str(subject), [Problem(None, None, message, line=line)])
