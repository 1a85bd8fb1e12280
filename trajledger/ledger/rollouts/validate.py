"""Validation of rollout tables against schema v3 (and v2, v1, for batches recorded so).

Scope: checking a step table or an episode table (whole, or streamed batch by batch) and
reporting every problem with its row and column: missing required columns, wrong types, nulls
in required columns, non-finite rewards and obs/action values, tensors of the wrong size,
episodes with no final step, step gaps and repeats, duplicate episode ids, invalid UTF-8,
oversized fields, malformed JSON in the JSON columns and in ``extras``. One `StreamValidator`
checks both tables: the checks of each row on its own are a table per kind of table (`ROW_RULES`),
the checks across rows are the steps' episode runs (`_EpisodeRuns`) or the episodes' unique ids
(`_UniqueIds`).
Non-scope: converting inputs into the schema (``normalise.py``) and writing Parquet
(``parquet_io.py``). Validation never changes data.
Spec: ``schemas/rollout.v3.md`` section "Validity" (``rollout.v1.md`` for v1 tables).

Checks are vectorised with numpy and pyarrow.compute; Python loops run once per episode (for
duplicate ids) or once per reported problem, never once per step. Each kind of problem lists
at most `ROWS_PER_KIND` rows, then one summary line with the count of the rest, so a broken
file of a billion rows yields a report of bounded size.
"""

from __future__ import annotations

from typing import Final, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .arrays import bools as _bools
from .arrays import numbers as _numbers
from .checks import ROW_RULES, check_nulls, check_row_values, value_at, values_of
from .episodes import derive_episodes
from .idset import IdSet
from .problems import ProblemCollector, ValidationReport
from .schema import (
    EPISODE_SCHEMA,
    EPISODE_SCHEMA_V1,
    EPISODE_SCHEMA_V2,
    ROLLOUT_SCHEMA_VERSION,
    STEP_SCHEMA,
    STEP_SCHEMA_V1,
    STEP_SCHEMA_V2,
    TENSOR_COLUMNS,
    schema_version,
    space_field_problem,
)

__all__ = [
    "DEFAULT_MAX_FIELD_BYTES",
    "DEFAULT_MAX_TENSOR_BYTES",
    "StreamValidator",
    "check_schema",
    "validate_episodes",
    "validate_steps",
]

DEFAULT_MAX_FIELD_BYTES: Final = 1 << 20
"""Largest accepted string field, in bytes."""

DEFAULT_MAX_TENSOR_BYTES: Final = 64 << 20
"""Largest accepted tensor value (one observation or action), in bytes: a 4096x4096x4 uint8
image fits, so do real image observations (a 512x512x3 frame is 768 KiB)."""


def check_schema(
    schema: pa.Schema,
    expected: pa.Schema,
    collector: ProblemCollector,
    *,
    allow_missing_optional: bool = True,
) -> frozenset[str]:
    """Compare a table's column names and types with a schema.

    A space column (``obs``, ``action``, ``final_obs``) matches any space type of the schema's
    version (`schema.space_field_problem`): a tensor of any value type of `TENSOR_VALUE_TYPES`
    with well formed shape metadata; in v3 also a string or a struct of those.

    Args:
        schema: the schema of the table under test.
        expected: a step or episode schema of v3, v2 or v1.
        collector: receives one problem per missing, unknown, repeated or mistyped column.
        allow_missing_optional: when True, a missing nullable column counts as all null.

    Returns:
        The names of the columns whose type matches, which later checks may read.
    """
    usable: set[str] = set()
    names = schema.names
    for name in sorted({n for n in names if names.count(n) > 1}):
        collector.add("schema", f"column appears {names.count(name)} times, want once", column=name)
    for field in expected:
        if field.name not in names:
            if not field.nullable:
                collector.add("schema", "missing required column", column=field.name)
            elif not allow_missing_optional:
                collector.add("schema", "missing column", column=field.name)
            continue
        if names.count(field.name) > 1:
            continue
        got_field = schema.field(field.name)
        got = got_field.type
        if field.name in TENSOR_COLUMNS:
            problem = space_field_problem(got_field, schema_version(expected) or "3")
            if problem is not None:
                collector.add("schema", problem, column=field.name)
                continue
            usable.add(field.name)
        elif got != field.type:
            collector.add("schema", f"type {got}, want {field.type}", column=field.name)
        else:
            usable.add(field.name)
    version = (expected.metadata or {}).get(b"trajledger.rollout.schema", b"/?").split(b"/")[-1]
    for name in names:
        if expected.get_field_index(name) < 0:
            collector.add(
                "schema",
                f"unknown column: rollout schema v{version.decode()} has no such column",
                column=name,
            )
    return frozenset(usable)


class _Order(Protocol):
    """The checks across rows of one kind of table, carried from batch to batch."""

    def feed(self, cols: dict[str, pa.Array], n: int, off: int, c: ProblemCollector) -> None:
        """Check one batch's rows against each other and against the rows before."""

    def gap(self) -> None:
        """Rows were skipped: the next row is not judged against the row before the gap."""

    def finish(self, rows: int, c: ProblemCollector) -> None:
        """Check what only the end of the stream shows."""


class _EpisodeRuns:
    """The steps' episode structure: steps 0, 1, 2, ... within an episode; exactly the last
    step terminated or truncated; ``is_first`` / ``is_last`` agreeing; each episode's rows
    contiguous.

    Carries the last row's episode id, step and terminal flags (so step continuity and episode
    completion are checked across batch boundaries), and the episode ids seen (so an episode
    that reappears after another one is reported): memory grows with episodes, not steps.
    """

    def __init__(self) -> None:
        self._seen = IdSet()  # str ids (bytes if not UTF-8, reported on their own)
        # Last row of the previous batch: (episode id, step, terminated, truncated); None
        # before the first row. A null id or step is carried as None.
        self._last: tuple[object, int | None, bool, bool] | None = None
        # True after `gap`: the next row may continue an episode of the skipped rows.
        self._after_gap = False

    def gap(self) -> None:
        self._last = None
        self._after_gap = True

    def feed(self, cols: dict[str, pa.Array], n: int, off: int, c: ProblemCollector) -> None:
        if "episode_id" not in cols or "step" not in cols:
            return
        ids: pa.Array = cols["episode_id"]
        steps = _numbers(cols["step"], 0).astype(np.int64, copy=False)
        step_ok = _bools(cols["step"].is_valid(), True)
        term = _bools(cols["terminated"]) if "terminated" in cols else np.zeros(n, bool)
        trunc = _bools(cols["truncated"]) if "truncated" in cols else np.zeros(n, bool)
        final = term | trunc

        # (1) Where does a new episode start? A null id starts a run of its own.
        boundary = np.empty(n, dtype=bool)
        if n > 1:
            boundary[1:] = _bools(pc.not_equal(ids.slice(1), ids.slice(0, n - 1)), True)
        first_id = value_at(ids, 0)
        last = self._last
        gap, self._after_gap = self._after_gap, False
        boundary[0] = last is None or last[0] is None or first_id is None or first_id != last[0]

        # (2) Steps count 0, 1, 2, ... within an episode.
        prev = np.empty(n, dtype=np.int64)
        prev_ok = np.empty(n, dtype=bool)
        prev[1:] = steps[:-1]
        prev_ok[1:] = step_ok[:-1]
        prev[0] = last[1] if last is not None and last[1] is not None else -1
        prev_ok[0] = last is not None and last[1] is not None
        expected = prev + 1
        expected[boundary] = 0
        bad = (steps != expected) & step_ok & (boundary | prev_ok)
        bad[0] &= not gap
        if bad.any():
            rows = np.flatnonzero(bad)
            starts = rows[boundary[rows]]
            inner = rows[~boundary[rows]]
            gaps = inner[steps[inner] > prev[inner] + 1]
            backs = inner[steps[inner] <= prev[inner]]
            c.add_rows(
                "step:start",
                starts,
                off,
                "step",
                lambda i: f"episode {value_at(ids, i)!r} starts at step {int(steps[i])}, want 0",
            )
            c.add_rows(
                "step:gap",
                gaps,
                off,
                "step",
                lambda i: _gap_message(value_at(ids, i), int(prev[i]), int(steps[i])),
            )
            c.add_rows(
                "step:repeat",
                backs,
                off,
                "step",
                lambda i: (
                    f"episode {value_at(ids, i)!r}: step {int(steps[i])} follows "
                    f"step {int(prev[i])}, want {int(prev[i]) + 1} (a repeat or a step back)"
                ),
            )

        # (3) The last step of an episode, and only it, is terminated or truncated. The last
        # row of this batch is judged when the next batch (or `finish`) shows what follows.
        run_end = np.zeros(n, dtype=bool)
        run_end[:-1] = boundary[1:]
        early = np.flatnonzero(final[:-1] & ~run_end[:-1])
        c.add_rows(
            "final:continues",
            early,
            off,
            "terminated",
            lambda i: (
                f"episode {value_at(ids, i)!r} ends at step {int(steps[i])} "
                f"({_reason(bool(term[i]))}) but continues at row {off + i + 1}"
            ),
        )
        open_ends = np.flatnonzero(run_end & ~final)
        c.add_rows(
            "final:missing",
            open_ends,
            off,
            "terminated",
            lambda i: _open_message(value_at(ids, i), int(steps[i])),
        )
        if last is not None:
            if boundary[0] and not (last[2] or last[3]):
                c.add_rows(
                    "final:missing",
                    np.array([-1]),
                    off,
                    "terminated",
                    lambda i: _open_message(last[0], last[1]),
                )
            elif not boundary[0] and (last[2] or last[3]):
                c.add_rows(
                    "final:continues",
                    np.array([-1]),
                    off,
                    "terminated",
                    lambda i: (
                        f"episode {last[0]!r} ends at step {last[1]} "
                        f"({_reason(last[2])}) but continues at row {off}"
                    ),
                )

        # (4) is_first / is_last agree with the structure.
        if "is_first" in cols:
            is_first = _bools(cols["is_first"])
            wrong = np.flatnonzero(is_first != boundary)
            if gap:
                wrong = wrong[wrong > 0]
            c.add_rows(
                "is_first",
                wrong,
                off,
                "is_first",
                lambda i: (
                    f"is_first is {bool(is_first[i])}, want {bool(boundary[i])} "
                    f"(row {'starts' if boundary[i] else 'continues'} episode "
                    f"{value_at(ids, i)!r})"
                ),
            )
        if "is_last" in cols:
            is_last = _bools(cols["is_last"])
            wrong = np.flatnonzero(is_last != final)
            c.add_rows(
                "is_last",
                wrong,
                off,
                "is_last",
                lambda i: (
                    f"is_last is {bool(is_last[i])}, want {bool(final[i])} "
                    "(is_last must equal terminated or truncated)"
                ),
            )

        # (5) An episode's steps are contiguous: its id never reappears after another episode.
        starts_idx = np.flatnonzero(boundary)
        run_ids = values_of(ids.take(pa.array(starts_idx)))
        seen = self._seen
        again: list[int] = []
        starts_list = starts_idx.tolist()
        # The first run after a gap may continue an episode already seen; judged alone, first.
        head = 1 if starts_list and starts_list[0] == 0 and gap else 0
        for part in ((starts_list[:head], run_ids[:head]), (starts_list[head:], run_ids[head:])):
            at, eids = part
            if eids and all(type(e) is str for e in eids) and not seen.maybe_any(eids):
                seen.add(eids)  # proved at once: none seen before, none twice
                continue
            for i, eid in zip(at, eids, strict=True):
                if eid is None:
                    continue
                if eid in seen:
                    if i == 0 and gap:
                        continue
                    again.append(i)
                else:
                    seen.add([eid])
        c.add_rows(
            "episode:again",
            np.asarray(again, dtype=np.int64),
            off,
            "episode_id",
            lambda i: (
                f"episode {value_at(ids, i)!r} appears again after other episodes; "
                "its steps must be contiguous"
            ),
        )

        tail = n - 1
        self._last = (
            value_at(ids, tail),
            int(steps[tail]) if step_ok[tail] else None,
            bool(term[tail]),
            bool(trunc[tail]),
        )

    def finish(self, rows: int, c: ProblemCollector) -> None:
        """The last episode must have a final step."""
        last = self._last
        if last is not None and not (last[2] or last[3]):
            c.add_rows(
                "final:missing",
                np.array([0]),
                rows - 1,
                "terminated",
                lambda i: _open_message(last[0], last[1]),
            )
            self._last = (last[0], last[1], True, False)  # report once even if called twice


class _UniqueIds:
    """The episodes' ids are unique: each repeat is reported with the row of the first."""

    def __init__(self) -> None:
        self._first_row: dict[object, int] = {}

    def gap(self) -> None:
        pass

    def feed(self, cols: dict[str, pa.Array], n: int, off: int, c: ProblemCollector) -> None:
        if "episode_id" not in cols:
            return
        ids = cols["episode_id"]
        first = self._first_row
        again: list[int] = []
        for i, eid in enumerate(values_of(ids)):
            if eid is None:
                continue
            if eid in first:
                again.append(i)
            else:
                first[eid] = off + i
        c.add_rows(
            "episode_id:duplicate",
            np.asarray(again, dtype=np.int64),
            off,
            "episode_id",
            lambda i: (
                f"episode {value_at(ids, i)!r} is listed again "
                f"(first at row {first[value_at(ids, i)]})"
            ),
        )

    def finish(self, rows: int, c: ProblemCollector) -> None:
        pass


class StreamValidator:
    """Validates a step or episode table delivered as a stream of record batches.

    Each batch gets the same stream of checks: required values present; the checks across
    rows (steps: the episode structure, `_EpisodeRuns`; episodes: unique ids, `_UniqueIds`),
    carried across batch boundaries; then the checks of each row on its own (`ROW_RULES`). Rows
    that could not be converted are passed over with `skip`.

    Each batch must hold columns of the schema's types; `validate_steps` checks the schema
    first and passes only the columns whose type matches.
    """

    def __init__(
        self,
        table: str = "steps",
        *,
        schema: pa.Schema | None = None,
        max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
        max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
        collector: ProblemCollector | None = None,
        subject: str | None = None,
        check_unique_ids: bool = True,
    ) -> None:
        """Start before the first row.

        Args:
            table: ``steps`` or ``episodes``.
            schema: the schema version the rows follow (which columns are required); default
                `STEP_SCHEMA` or `EPISODE_SCHEMA`.
            max_field_bytes: largest accepted string field.
            max_tensor_bytes: largest accepted tensor value (an observation or action).
            collector: where problems go; a new one when None.
            subject: names the stream in the report; default ``table``.
            check_unique_ids: episodes only: False when the ids are known unique already
                (episodes derived from steps that a step validator checks), to save the
                memory of the ids.

        Raises:
            ValueError: ``table`` is neither ``steps`` nor ``episodes``.
        """
        if table not in ROW_RULES:
            raise ValueError(f"table {table!r}, want 'steps' or 'episodes'")
        if schema is None:
            schema = STEP_SCHEMA if table == "steps" else EPISODE_SCHEMA
        self.collector = collector if collector is not None else ProblemCollector()
        self.subject = subject if subject is not None else table
        self._rules = ROW_RULES[table]
        self._max = max_field_bytes
        self._max_tensor = max_tensor_bytes
        self._required = tuple(f.name for f in schema if not f.nullable)
        self._offset = 0
        self._order: _Order | None = (
            _EpisodeRuns() if table == "steps" else _UniqueIds() if check_unique_ids else None
        )

    @property
    def rows(self) -> int:
        """Rows fed (or skipped) so far."""
        return self._offset

    def feed(self, batch: pa.RecordBatch) -> None:
        """Check one batch and remember what the next batch must continue.

        Args:
            batch: the next rows; columns absent from it are not checked.
        """
        n = batch.num_rows
        if n == 0:
            return
        cols = dict(zip(batch.schema.names, batch.columns, strict=True))
        check_nulls(cols, self._required, self._offset, self.collector)
        if self._order is not None:
            self._order.feed(cols, n, self._offset, self.collector)
        self._check_values(batch.schema, cols, self._offset)
        self._offset += n

    def skip(self, rows: int, values: pa.RecordBatch | None = None) -> None:
        """Pass over rows whose order cannot be checked.

        Their batch could not be converted, or its episode ids are not UTF-8; that problem is
        reported already. Later rows keep their row numbers, and the rows next to the gap are
        not judged against each other: whether the next row continues an episode of the
        skipped rows is unknown, so it is not reported as a bad start (step, ``is_first``, a
        reappearing id), nor the row before the gap as a missing final step.

        Args:
            rows: the number of rows skipped.
            values: the rows, converted but for their episode ids, when they are; each row's
                values (rewards, strings, vectors, ...) are then checked.
        """
        if values is not None and values.num_rows:
            cols = {
                name: col
                for name, col in zip(values.schema.names, values.columns, strict=True)
                if name != "episode_id"
            }
            check_nulls(cols, self._required, self._offset, self.collector)
            self._check_values(values.schema, cols, self._offset)
        if rows:
            self._offset += rows
            if self._order is not None:
                self._order.gap()

    def finish(self) -> ValidationReport:
        """Close the stream (steps: the last episode must have a final step).

        Returns:
            The report over every batch fed.
        """
        if self._order is not None:
            self._order.finish(self._offset, self.collector)
        return ValidationReport(self.subject, self.collector.problems())

    def _check_values(self, schema: pa.Schema, cols: dict[str, pa.Array], off: int) -> None:
        """Checks of each row on its own, which need no order."""
        check_row_values(
            self._rules,
            schema,
            cols,
            off,
            self.collector,
            max_field_bytes=self._max,
            max_tensor_bytes=self._max_tensor,
        )


def _reason(terminated: bool) -> str:
    return "terminated" if terminated else "truncated"


def _gap_message(eid: object, prev: int, step: int) -> str:
    missing = f"step {prev + 1} is" if step == prev + 2 else f"steps {prev + 1}..{step - 1} are"
    return f"episode {eid!r}: step {step} follows step {prev}; {missing} missing"


def _open_message(eid: object, step: int | None) -> str:
    return (
        f"episode {eid!r} has no final step: its last step {step} is neither terminated "
        "nor truncated"
    )


_SCHEMAS: Final = {
    ("steps", "1"): STEP_SCHEMA_V1,
    ("steps", "2"): STEP_SCHEMA_V2,
    ("steps", ROLLOUT_SCHEMA_VERSION): STEP_SCHEMA,
    ("episodes", "1"): EPISODE_SCHEMA_V1,
    ("episodes", "2"): EPISODE_SCHEMA_V2,
    ("episodes", ROLLOUT_SCHEMA_VERSION): EPISODE_SCHEMA,
}
"""Each table's schema by the version its metadata names (a table naming none is current)."""


def _check_table(
    table: pa.Table | pa.RecordBatch,
    kind: str,
    max_field_bytes: int,
    max_tensor_bytes: int,
    subject: str,
) -> tuple[StreamValidator, frozenset[str]]:
    """Check a whole table's schema, then feed its usable columns to a `StreamValidator`."""
    collector = ProblemCollector()
    version = schema_version(table.schema) or ROLLOUT_SCHEMA_VERSION
    expected = _SCHEMAS.get((kind, version)) or _SCHEMAS[kind, ROLLOUT_SCHEMA_VERSION]
    usable = check_schema(table.schema, expected, collector)
    checker = StreamValidator(
        kind,
        schema=expected,
        max_field_bytes=max_field_bytes,
        max_tensor_bytes=max_tensor_bytes,
        collector=collector,
        subject=subject,
    )
    sub = table.select([n for n in table.schema.names if n in usable])
    for batch in [sub] if isinstance(sub, pa.RecordBatch) else sub.to_batches():
        checker.feed(batch)
    return checker, usable


def validate_steps(
    table: pa.Table | pa.RecordBatch,
    *,
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    subject: str = "steps",
) -> ValidationReport:
    """Validate a whole step table against schema v3 (v2 or v1 when its metadata says so).

    Steps:
      1. Check column names and types; a missing nullable column counts as all null, a column
         of the wrong type is reported and not read further.
      2. Check content: required values present; rewards and obs/action values finite;
         steps 0, 1, 2, ... within each episode; exactly the last step of each episode
         terminated or truncated; ``is_first``/``is_last`` consistent; each episode's rows
         contiguous; strings valid UTF-8 and at most ``max_field_bytes``; tool columns valid
         JSON; costs, latencies and token counts non-negative.

    Args:
        table: the step table (use `normalise.normalise_steps` first for raw inputs).
        max_field_bytes: largest accepted string field, in bytes.
        max_tensor_bytes: largest accepted tensor value, in bytes.
        subject: names the table in the report.

    Returns:
        A report listing every problem; ``report.ok`` when there is none.
    """
    # (1) and (2)
    checker, _ = _check_table(table, "steps", max_field_bytes, max_tensor_bytes, subject)
    return checker.finish()


def validate_episodes(
    table: pa.Table | pa.RecordBatch,
    *,
    steps: pa.Table | None = None,
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    subject: str = "episodes",
) -> ValidationReport:
    """Validate a whole episode table against schema v3 (v2 or v1 when its metadata says so),
    optionally against its steps.

    Steps:
      1. Check column names and types.
      2. Check content: required values present; episode ids unique; returns finite;
         ``num_steps`` >= 1; judge scores finite with unique keys; cost non-negative; strings
         valid UTF-8 and at most ``max_field_bytes``.
      3. When ``steps`` is given (a valid step table): every episode of one table appears in
         the other, and ``num_steps`` and ``return`` equal those derived from the steps.

    Args:
        table: the episode table.
        steps: the step table it summarises, or None to skip step (3).
        max_field_bytes: largest accepted string field, in bytes.
        max_tensor_bytes: largest accepted final observation, in bytes.
        subject: names the table in the report.

    Returns:
        A report listing every problem; ``report.ok`` when there is none.
    """
    # (1) and (2)
    checker, usable = _check_table(table, "episodes", max_field_bytes, max_tensor_bytes, subject)
    # (3)
    if steps is not None and {"episode_id", "num_steps", "return"} <= usable:
        _compare_with_steps(table, _derived(steps), checker.collector)
    return checker.finish()


def _derived(steps: pa.Table) -> pa.Table:
    """The ``episode_id``, ``num_steps`` and ``return`` of `derive_episodes` of the valid
    ``steps`` (the columns `_compare_with_steps` reads). A table of one step (a string id, a
    float64 reward) is one episode of one step: its id, 1, and its reward (null when it has
    none; a sum of one value is that value), read from its values: `derive_episodes`
    normalises the steps and builds every column of the episode table, about 1 ms of Arrow
    calls on one row (spd55: the gate on batches of one step). Other tables: `derive_episodes`.
    """
    schema = steps.schema
    ids, rewards = schema.get_field_index("episode_id"), schema.get_field_index("reward")
    if (
        steps.num_rows == 1
        and min(ids, rewards) >= 0
        and schema.field(ids).type == pa.string()
        and schema.field(rewards).type == pa.float64()
    ):
        try:
            episode_id = steps.column(ids)[0].as_py()
        except UnicodeDecodeError:
            episode_id = None
        if episode_id is None:  # (not valid steps: `derive_episodes` as before)
            return derive_episodes(steps)
        return pa.table(
            {
                "episode_id": pa.array([episode_id], pa.string()),
                "num_steps": pa.array([1], pa.int64()),
                "return": pa.array([steps.column(rewards)[0].as_py()], pa.float64()),
            }
        )
    return derive_episodes(steps)


def _compare_with_steps(
    table: pa.Table | pa.RecordBatch, derived: pa.Table, c: ProblemCollector
) -> None:
    ids = table.column("episode_id")
    derived_ids = derived.column("episode_id")
    where = pc.index_in(ids, value_set=derived_ids)
    missing = np.flatnonzero(_bools(where.is_null()))
    c.add_rows(
        "episode:no-steps",
        missing,
        0,
        "episode_id",
        lambda i: f"episode {value_at(ids, i)!r} has no steps",
    )
    unlisted = np.flatnonzero(~_bools(pc.is_in(derived_ids, value_set=ids)))
    for i in unlisted.tolist():
        c.add(
            "episode:unlisted",
            f"episode {derived_ids[i].as_py()!r} has steps but no row",
            column="episode_id",
        )
    found = np.flatnonzero(_bools(where.is_valid()))
    idx = _numbers(where, 0).astype(np.int64)[found]
    got_n = _numbers(table.column("num_steps"), 0).astype(np.int64)[found]
    want_n = _numbers(derived.column("num_steps"), 0).astype(np.int64)[idx]
    for k in np.flatnonzero(got_n != want_n).tolist():
        row = int(found[k])
        c.add(
            "num_steps:mismatch",
            f"num_steps is {int(got_n[k])}, the steps of episode "
            f"{value_at(ids, row)!r} number {int(want_n[k])}",
            row=row,
            column="num_steps",
        )
    got_r = _numbers(table.column("return"), 0.0).astype(np.float64)[found]
    want_r = _numbers(derived.column("return"), 0.0).astype(np.float64)[idx]
    for k in np.flatnonzero(~_returns_match(got_r, want_r)).tolist():
        row = int(found[k])
        c.add(
            "return:mismatch",
            f"return is {float(got_r[k])!r}, the rewards of episode "
            f"{value_at(ids, row)!r} sum to {float(want_r[k])!r}",
            row=row,
            column="return",
        )


def _returns_match(
    got: npt.NDArray[np.float64], want: npt.NDArray[np.float64]
) -> npt.NDArray[np.bool_]:
    """A stated return matches the summed rewards up to summation-order rounding."""
    tol = 1e-9 * np.maximum(1.0, np.abs(want))
    out: npt.NDArray[np.bool_] = (np.abs(got - want) <= tol) | ((got == want) & ~np.isnan(got))
    return out
