"""Writing rollout batches as Parquet, validating and summarising as they stream.

Scope: `write_steps_parquet` takes a stream of step batches (or `RolloutChunk` objects, or
tables), normalises, validates and writes them to ``steps.parquet`` batch by batch, derives
the episode table into ``episodes.parquet``, and returns `WriteStats` for the batch manifest.
Validation state crosses batch boundaries (step continuity, episode completion, duplicate
episodes). Files are written under temporary names and renamed only when the whole input is
valid: bad input leaves nothing behind.
Non-scope: hashing, storing and signing the files (the object store and manifest writers),
reading inputs (``convert.py``).
Spec: ``schemas/rollout.v1.md`` section "Files".

Encoding: zstd; float columns (and float vector values) BYTE_STREAM_SPLIT, which zstd
compresses better than plain floats; other columns dictionary-encoded. Row groups hold exactly
``row_group_rows`` rows (the last one fewer), so the bytes written do not depend on how the
input was cut into batches (for a given pyarrow version), unless rows are so large that 128 MiB
of them fill a row group first: memory stays bounded whatever the input.
"""

from __future__ import annotations

import math
import os
import queue
import secrets
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .convert import EpisodeBuilder, RolloutChunk, StepNormaliser, normalise_episodes
from .schema import EPISODE_SCHEMA, STEP_SCHEMA, parquet_float_paths
from .validate import (
    DEFAULT_MAX_FIELD_BYTES,
    EpisodeStreamValidator,
    Problem,
    ProblemCollector,
    RolloutValidationError,
    StepStreamValidator,
)

__all__ = [
    "DEFAULT_ROW_GROUP_ROWS",
    "FAILURE_REASON",
    "ROW_GROUP_BYTES",
    "SUCCESS_REASON",
    "WriteStats",
    "parquet_writer",
    "write_steps_parquet",
]

DEFAULT_ROW_GROUP_ROWS: Final = 1 << 17
"""Rows per Parquet row group of the step file."""

SUCCESS_REASON: Final = "success"
FAILURE_REASON: Final = "failure"
"""``termination_reason`` values that make success derivable (see `WriteStats`)."""

_T = TypeVar("_T")
_END: Final = object()

ROW_GROUP_BYTES: Final = 128 << 20
"""A row group is cut early once it holds this much Arrow data (bounds memory on long texts)."""


@dataclass(frozen=True)
class WriteStats:
    """Summary of a written rollout batch.

    Attributes:
        steps_path: where the step table was written.
        episodes_path: where the episode table was written.
        num_steps: rows of the step table.
        num_episodes: rows of the episode table.
        reward_sum: sum of all rewards (exactly rounded sum of the episode returns).
        return_mean: mean episode return.
        return_min: smallest episode return.
        return_max: largest episode return.
        return_std: population standard deviation of episode returns.
        mean_episode_length: mean steps per episode.
        seeds: distinct non-null episode seeds, ascending.
        success_count: episodes whose termination_reason is "success", or None when no
            episode is labelled "success" or "failure" (success is then not derivable).
        success_rate: success_count / num_episodes, or None likewise.
        num_invalid: episodes flagged invalid.
        total_cost_usd: sum of episode costs, or None when no episode has a cost.
        steps_bytes: size of the step file.
        episodes_bytes: size of the episode file.
    """

    steps_path: Path
    episodes_path: Path
    num_steps: int
    num_episodes: int
    reward_sum: float
    return_mean: float
    return_min: float
    return_max: float
    return_std: float
    mean_episode_length: float
    seeds: tuple[int, ...]
    success_count: int | None
    success_rate: float | None
    num_invalid: int
    total_cost_usd: float | None
    steps_bytes: int
    episodes_bytes: int

    def summary(self) -> dict[str, Any]:
        """Return the statistics as JSON-ready values for a manifest.

        Paths and file sizes are left out (the manifest lists the files itself). Seeds are
        decimal strings, since int64 seeds can exceed the 2^53 that canonical JSON allows.
        """
        return {
            "num_steps": self.num_steps,
            "num_episodes": self.num_episodes,
            "reward_sum": self.reward_sum,
            "return_mean": self.return_mean,
            "return_min": self.return_min,
            "return_max": self.return_max,
            "return_std": self.return_std,
            "mean_episode_length": self.mean_episode_length,
            "seeds": [str(s) for s in self.seeds],
            "success_count": self.success_count,
            "success_rate": self.success_rate,
            "num_invalid": self.num_invalid,
            "total_cost_usd": self.total_cost_usd,
        }


def parquet_writer(path: str | os.PathLike[str], schema: pa.Schema) -> pq.ParquetWriter:
    """Open a Parquet writer with the rollout encodings (zstd, BYTE_STREAM_SPLIT floats).

    Args:
        path: the file to create.
        schema: `STEP_SCHEMA` or `EPISODE_SCHEMA`.

    Returns:
        An open writer; the caller closes it.
    """
    floats, others = parquet_float_paths(schema)
    return pq.ParquetWriter(
        str(path),
        schema,
        compression="zstd",
        use_byte_stream_split=floats,
        use_dictionary=others,
        write_statistics=True,
    )


@dataclass
class _EpisodeTotals:
    """Running numbers over emitted episodes, for `WriteStats`."""

    returns: list[npt.NDArray[np.float64]] = field(default_factory=list)
    lengths: int = 0
    count: int = 0
    seeds: set[int] = field(default_factory=set)
    success: int = 0
    labelled: int = 0
    invalid: int = 0
    costs: list[npt.NDArray[np.float64]] = field(default_factory=list)

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self.count += batch.num_rows
        self.returns.append(
            np.asarray(
                batch.column("return").fill_null(0.0).to_numpy(zero_copy_only=False),
                dtype=np.float64,
            )
        )
        self.lengths += int(np.sum(batch.column("num_steps").fill_null(0).to_numpy()))
        self.seeds.update(s for s in batch.column("seed").drop_null().to_pylist())
        reasons = batch.column("termination_reason")
        self.success += int(pc.sum(pc.equal(reasons, SUCCESS_REASON)).as_py() or 0)
        self.labelled += int(
            pc.sum(pc.is_in(reasons, value_set=pa.array([SUCCESS_REASON, FAILURE_REASON]))).as_py()
            or 0
        )
        self.invalid += int(pc.sum(batch.column("invalid")).as_py() or 0)
        self.costs.append(np.asarray(batch.column("cost_usd").drop_null(), dtype=np.float64))


class _RowGroupBuffer:
    """Re-cuts a batch stream into row groups of ``rows`` rows (fewer past `ROW_GROUP_BYTES`)."""

    def __init__(self, writer: pq.ParquetWriter, rows: int) -> None:
        self._writer = writer
        self._rows = rows
        self._batches: list[pa.RecordBatch] = []
        self._held = 0
        self._bytes = 0

    def add(self, batch: pa.RecordBatch) -> None:
        self._batches.append(batch)
        self._held += batch.num_rows
        self._bytes += batch.nbytes
        if self._held >= self._rows:
            self._write(final=False)
        elif self._bytes >= ROW_GROUP_BYTES:
            self._write(final=True)

    def close(self) -> None:
        self._write(final=True)

    def _write(self, *, final: bool) -> None:
        if not self._held:
            return
        table = pa.Table.from_batches(self._batches)
        whole = self._held if final else self._held - self._held % self._rows
        self._writer.write_table(table.slice(0, whole), row_group_size=self._rows)
        rest = table.slice(whole)
        self._batches = rest.to_batches()
        self._held = rest.num_rows
        self._bytes = rest.nbytes if self._held else 0


def _chunks(
    batches: Iterable[pa.RecordBatch | pa.Table | RolloutChunk],
) -> Iterator[tuple[pa.RecordBatch | None, pa.RecordBatch | pa.Table | None]]:
    for item in batches:
        if isinstance(item, RolloutChunk):
            yield item.steps, item.episodes
        elif isinstance(item, pa.Table):
            for b in item.to_batches():
                yield b, None
        elif isinstance(item, pa.RecordBatch):
            yield item, None
        else:
            raise TypeError(
                f"rollout input item is a {type(item).__name__}, want a pyarrow RecordBatch, "
                "Table or RolloutChunk"
            )


def _prefetch(items: Iterable[_T], depth: int = 2) -> Iterator[_T]:
    """Iterate ``items`` on a helper thread, ``depth`` items ahead.

    Reading and decoding the input (pyarrow releases the GIL) then overlaps validating and
    writing, so recording costs about as much as copying. Memory grows by ``depth`` items.
    An exception from the input is re-raised here; when the consumer stops early, the helper
    stops after the item it is reading.
    """
    q: queue.Queue[tuple[bool, object]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple[bool, object]) -> bool:
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
            put((True, _END))
        except BaseException as e:  # handed to the consumer, which re-raises it
            put((False, e))

    helper = threading.Thread(target=run, name="rollout-prefetch", daemon=True)
    helper.start()
    try:
        while True:
            ok, item = q.get()
            if not ok:
                assert isinstance(item, BaseException)
                raise item
            if item is _END:
                return
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        helper.join()
        close = getattr(items, "close", None)
        if close is not None:
            close()


def _temp_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def write_steps_parquet(
    batches: Iterable[pa.RecordBatch | pa.Table | RolloutChunk],
    path: str | os.PathLike[str],
    *,
    episodes_path: str | os.PathLike[str] | None = None,
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    subject: str | None = None,
) -> WriteStats:
    """Validate a stream of step batches and write the step and episode tables.

    Steps:
      1. For each chunk: normalise the steps into `STEP_SCHEMA`; validate them, carrying
         state across chunks; derive the episodes they complete (merged with any episode
         attributes the chunk carries) and validate those; write both while no problem has
         been found (afterwards, keep validating so the error lists every problem).
      2. At the end of the stream: check that the last episode has a final step, then close
         it; check that the stream held steps and that every given episode attribute found
         its steps.
      3. On any problem: delete the temporary files and raise, listing all problems (those the
         input reader raised come first). Otherwise rename the files into place.

    Args:
        batches: step record batches, tables, or `RolloutChunk` objects (as yielded by
            `convert.iter_rollout_chunks`), in step order.
        path: the step file to write (conventionally ``steps.parquet``).
        episodes_path: the episode file; default ``episodes.parquet`` beside ``path``.
        max_field_bytes: largest accepted string or vector field.
        row_group_rows: rows per row group of the step file.
        subject: names the input in error messages; default ``path``.

    Returns:
        Summary statistics of what was written.

    Raises:
        RolloutValidationError: the input breaks schema v1 (nothing is written).
        ValueError: ``path`` and ``episodes_path`` are the same file, or row_group_rows < 1.
        OSError: a file cannot be written (temporary files are removed).
    """
    steps_path = Path(path)
    ep_path = (
        Path(episodes_path)
        if episodes_path is not None
        else steps_path.with_name("episodes.parquet")
    )
    if ep_path.resolve() == steps_path.resolve():
        raise ValueError(f"episodes_path {ep_path} is the step file, want another file")
    if row_group_rows < 1:
        raise ValueError(f"row_group_rows is {row_group_rows}, want >= 1")
    name = subject if subject is not None else str(steps_path)

    collector = ProblemCollector()
    normaliser = StepNormaliser(collector)
    step_check = StepStreamValidator(max_field_bytes=max_field_bytes, collector=collector)
    builder = EpisodeBuilder(collector)
    episode_check = EpisodeStreamValidator(
        max_field_bytes=max_field_bytes, collector=collector, check_unique_ids=False
    )
    totals = _EpisodeTotals()
    reader_problems: tuple[Problem, ...] = ()

    tmp_steps, tmp_eps = _temp_path(steps_path), _temp_path(ep_path)
    steps_writer = parquet_writer(tmp_steps, STEP_SCHEMA)
    eps_writer: pq.ParquetWriter | None = None
    try:
        eps_writer = parquet_writer(tmp_eps, EPISODE_SCHEMA)
        groups = _RowGroupBuffer(steps_writer, row_group_rows)
        episode_groups = _RowGroupBuffer(eps_writer, row_group_rows)

        def emit(episodes: pa.RecordBatch) -> None:
            checked = episodes
            if collector.seen("reward:not-finite"):
                # A non-finite reward makes its return non-finite: reported once, as the reward.
                checked = episodes.select([n for n in episodes.schema.names if n != "return"])
            reasons = checked.column("termination_reason")
            if reasons.null_count and (collector.count or reader_problems):
                # A derived reason is null only when the episode's last step is neither
                # terminated nor truncated, which the step checks have reported (before this
                # call): the null is its consequence, not a second problem. With no problem on
                # record, the episode check still reports it.
                i = checked.schema.get_field_index("termination_reason")
                checked = checked.set_column(i, checked.schema.field(i), pc.fill_null(reasons, ""))
            episode_check.feed(checked)
            totals.add(episodes)
            if not collector.count and not reader_problems and episodes.num_rows:
                episode_groups.add(episodes)

        # (1)
        try:
            for steps, attrs in _chunks(_prefetch(batches)):
                if attrs is not None:
                    try:
                        builder.add_attrs(normalise_episodes(attrs))
                    except RolloutValidationError as e:
                        reader_problems += e.problems
                if steps is None:
                    continue
                batch = normaliser.normalise(steps)
                if batch is None:  # its problems are reported; keep the row numbers right
                    step_check.skip(steps.num_rows, normaliser.ids_rejected)
                    builder.skip(steps)
                    continue
                step_check.feed(batch)
                emit(builder.feed(batch))
                if not collector.count and not reader_problems:
                    groups.add(batch)
        except RolloutValidationError as e:
            reader_problems += e.problems
        # (2) The steps first: the last episode's problems are its steps' (see emit).
        step_check.finish()
        emit(builder.finish())
        if step_check.rows == 0 and not collector.count and not reader_problems:
            collector.add("empty", "the input holds no steps, want at least one")
        problems = reader_problems + collector.problems()
        # (3)
        if problems:
            raise RolloutValidationError(name, problems)
        groups.close()
        episode_groups.close()
        steps_writer.close()
        eps_writer.close()
        os.replace(tmp_steps, steps_path)
        try:
            os.replace(tmp_eps, ep_path)
        except BaseException:
            steps_path.unlink(missing_ok=True)  # never leave a step file without its episodes
            raise
    except BaseException:
        steps_writer.close()
        if eps_writer is not None:
            eps_writer.close()
        for tmp in (tmp_steps, tmp_eps):
            tmp.unlink(missing_ok=True)
        raise
    return _stats(steps_path, ep_path, step_check.rows, totals)


def _stats(steps_path: Path, ep_path: Path, num_steps: int, t: _EpisodeTotals) -> WriteStats:
    returns = np.concatenate(t.returns) if t.returns else np.zeros(0)
    n = t.count
    return WriteStats(
        steps_path=steps_path,
        episodes_path=ep_path,
        num_steps=num_steps,
        num_episodes=n,
        reward_sum=math.fsum(returns.tolist()),
        return_mean=float(np.mean(returns)),
        return_min=float(np.min(returns)),
        return_max=float(np.max(returns)),
        return_std=float(np.std(returns)),
        mean_episode_length=t.lengths / n,
        seeds=tuple(sorted(t.seeds)),
        success_count=t.success if t.labelled else None,
        success_rate=t.success / n if t.labelled else None,
        num_invalid=t.invalid,
        total_cost_usd=math.fsum(np.concatenate(t.costs).tolist())
        if any(map(len, t.costs))
        else None,
        steps_bytes=steps_path.stat().st_size,
        episodes_bytes=ep_path.stat().st_size,
    )
