"""Writing rollout batches as Parquet, validating, summarising and hashing as they stream.

Scope: `write_steps_parquet` takes a stream of step batches (or `RolloutChunk` objects, or
tables), normalises, validates and writes them to ``steps.parquet`` batch by batch, derives
the episode table into ``episodes.parquet`` (filling episode columns the caller fixes, such as
``env_version``, as it goes), hashes both files as they grow, and returns `WriteStats` for
the batch manifest: one pass over the data, no rewrite. Row groups are encoded on a writer
thread (Arrow's native file stream, no call into Python per write) while the next chunks are
validated; the new bytes are hashed from the page cache as the writer goes. Validation state
crosses batch boundaries (step continuity, episode completion, duplicate episodes). Files are
written under temporary names and renamed only when the whole input is valid: bad input leaves
nothing behind.
Non-scope: storing and signing the files (the object store and manifest writers), reading
inputs (``readers.py``).
Spec: ``schemas/rollout.v3.md`` section "Files".

Encoding: zstd; float columns (and float tensor values) BYTE_STREAM_SPLIT, which zstd
compresses better than plain floats; other columns dictionary-encoded. Row groups hold exactly
``row_group_rows`` rows (the last one fewer), so the bytes written do not depend on how the
input was cut into batches (for a given pyarrow version), unless rows are so large that 128 MiB
of them (or `ROW_GROUP_VALUES` values under lists: frames) fill a row group first: memory stays
bounded whatever the input.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import queue
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trajledger.verify.digest import FileDigest

from .chunks import CHUNK_BYTES, RolloutChunk, StepLimitError, max_steps
from .episodes import EpisodeBuilder
from .normalise import StepNormaliser, TensorTypes, conform_batch, normalise_episodes
from .problems import Problem, ProblemCollector, RolloutValidationError
from .schema import parquet_float_paths
from .success import SuccessCount
from .validate import DEFAULT_MAX_FIELD_BYTES, DEFAULT_MAX_TENSOR_BYTES, StreamValidator

__all__ = [
    "DEFAULT_ROW_GROUP_ROWS",
    "ROW_GROUP_BYTES",
    "ROW_GROUP_VALUES",
    "WriteStats",
    "parquet_writer",
    "row_groups",
    "write_steps_parquet",
]

DEFAULT_ROW_GROUP_ROWS: Final = 1 << 17
"""Rows per Parquet row group of the step file."""

_T = TypeVar("_T")
_END: Final = object()


ROW_GROUP_BYTES: Final = 128 << 20
"""A row group is cut early once it holds this much Arrow data (bounds memory on long texts)."""
ROW_GROUP_VALUES: Final = 1 << 22
"""The most values under lists (tensors: each frame's numbers) a row group holds, but for a
row alone: Arrow's Parquet writer takes about 12 bytes a value (its levels, its encodings) of
a row group at once, so 20 frames of 1024x1024x3 (60 MiB) took 750 MiB to write (frames43)."""

_WRITEBACK_BYTES: Final = 32 << 20
_fdatasync: Final = getattr(os, "fdatasync", os.fsync)  # macOS has only fsync

THREADED_GROUP_BYTES: Final = 32 << 20
"""Row groups up to this much Arrow data (numeric steps: 131,072 rows of up to 256 bytes) are
written on the writer thread while the next one is gathered, which costs memory for one more
row group and the writer's buffers (about 120 MiB more for chat text, measured); larger ones
(long texts, images) are written in line, so their peak memory stays that of one row group."""


@dataclass(frozen=True)
class WriteStats:
    """Summary of a written rollout batch.

    Attributes:
        steps_path: where the step table was written.
        episodes_path: where the episode table was written.
        num_steps: rows of the step table.
        num_episodes: rows of the episode table.
        rewarded_episodes: episodes with a return (at least one step with a reward); the
            return statistics are over these, and are None when there is none (SFT,
            preference data).
        reward_sum: sum of all rewards (exactly rounded sum of the episode returns), or None.
        return_mean: mean episode return, or None.
        return_min: smallest episode return, or None.
        return_max: largest episode return, or None.
        return_std: population standard deviation of episode returns, or None.
        mean_episode_length: mean steps per episode.
        seeds: distinct non-null episode seeds, ascending.
        success_count: successes (see ``success.py``), or None when the batch labels none.
        success_rate: successes over all episodes, or None likewise.
        num_invalid: episodes flagged invalid.
        total_cost_usd: sum of episode costs, or None when no episode has a cost.
        steps_file: the step file's size and SHA-256, computed from the bytes as written.
        episodes_file: the episode file's size and SHA-256, likewise.
        meta: what the input said about the whole batch (source formats, spaces, environment
            spec, dataset metadata), for the batch predicate.
    """

    steps_path: Path
    episodes_path: Path
    num_steps: int
    num_episodes: int
    rewarded_episodes: int
    reward_sum: float | None
    return_mean: float | None
    return_min: float | None
    return_max: float | None
    return_std: float | None
    mean_episode_length: float
    seeds: tuple[int, ...]
    success_count: int | None
    success_rate: float | None
    num_invalid: int
    total_cost_usd: float | None
    steps_file: FileDigest
    episodes_file: FileDigest
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def steps_bytes(self) -> int:
        """Size of the step file."""
        return self.steps_file.size

    @property
    def episodes_bytes(self) -> int:
        """Size of the episode file."""
        return self.episodes_file.size

    def summary(self) -> dict[str, Any]:
        """Return the statistics as JSON-ready values for a manifest.

        Paths and file sizes are left out (the manifest lists the files itself). Seeds are
        decimal strings, since int64 seeds can exceed the 2^53 that canonical JSON allows.
        """
        return {
            "num_steps": self.num_steps,
            "num_episodes": self.num_episodes,
            "rewarded_episodes": self.rewarded_episodes,
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


def parquet_writer(where: str | os.PathLike[str] | Any, schema: pa.Schema) -> pq.ParquetWriter:
    """Open a Parquet writer with the rollout encodings (zstd, BYTE_STREAM_SPLIT floats,
    statistics on the columns that are not lists).

    Args:
        where: the file to create, or a writable binary file object.
        schema: the step or episode schema of the batch.

    Returns:
        An open writer; the caller closes it.
    """
    floats, others = parquet_float_paths(schema)
    # Statistics (min / max / nulls per page and row group) for columns a query filters on;
    # not for the values of tensors and lists, where they cost ~3% of the writing for nothing.
    scalars = [path for path in floats + others if ".list." not in path]
    return pq.ParquetWriter(
        where if not isinstance(where, os.PathLike) else str(where),
        schema,
        compression="zstd",
        use_byte_stream_split=floats,
        use_dictionary=others,
        write_statistics=scalars,
    )


class _Sink:
    """A new file written by Arrow's own file stream and hashed by a reader trailing it.

    Arrow writes without calling into Python (a Python file object costs a call and the GIL
    for each of the thousands of writes of a row group, which stalls a writer thread next to
    the busy validating thread). The writing thread records how far it has written
    (`mark_written`); `catch_up`, on another thread, hashes that far from the page cache. The
    file is created here, under a name nobody else uses, in the recorder's private temporary
    directory, and is renamed into place only after `finish` has hashed every byte.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        stream: pa.NativeFile | None = None
        try:
            stream = pa.OSFile(str(path), "wb")
            self._reader = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by close()
        except BaseException:
            with contextlib.suppress(Exception):
                if stream is not None:
                    stream.close()
                path.unlink(missing_ok=True)
            raise
        self.stream = stream
        self._h = hashlib.sha256()
        self._view = memoryview(bytearray(1 << 20))
        self.size = 0
        self.written = 0
        self._synced = 0

    def mark_written(self) -> None:
        """Record how far the file is written (by the thread writing it)."""
        self.written = self.stream.tell()

    def catch_up(self) -> None:
        """Hash every byte written as far as last marked; every `_WRITEBACK_BYTES`, also
        write them to disk, so that the store's fsync at the end finds little left to do."""
        end = self.written
        while self.size < end:
            n = self._reader.readinto(self._view[: min(len(self._view), end - self.size)])
            if not n:
                raise OSError(f"{self.path}: {end - self.size} written byte(s) cannot be read back")
            self._h.update(self._view[:n])
            self.size += n
        if self.size - self._synced >= _WRITEBACK_BYTES:
            self._synced = self.size
            with contextlib.suppress(OSError):  # early write-back only; the store fsyncs
                _fdatasync(self._reader.fileno())

    def finish(self, final: Path) -> FileDigest:
        """Hash the rest, close, and check the file holds exactly the bytes hashed."""
        self.mark_written()
        self.catch_up()
        self.close()
        size = self.path.stat().st_size
        if size != self.size:
            raise OSError(f"{self.path}: {size} bytes on disk, {self.size} written")
        return FileDigest(final, self.size, self._h.hexdigest())

    def close(self) -> None:
        """Close both ends (idempotent)."""
        try:
            if not self.stream.closed:
                self.stream.close()
        finally:
            self._reader.close()


@dataclass
class _EpisodeTotals:
    """Running numbers over emitted episodes, for `WriteStats`."""

    returns: list[npt.NDArray[np.float64]] = field(default_factory=list)
    lengths: int = 0
    count: int = 0
    seeds: set[int] = field(default_factory=set)
    success: SuccessCount = field(default_factory=SuccessCount)
    invalid: int = 0
    costs: list[npt.NDArray[np.float64]] = field(default_factory=list)

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self.count += batch.num_rows
        self.returns.append(
            np.asarray(
                batch.column("return").drop_null().to_numpy(zero_copy_only=False),
                dtype=np.float64,
            )
        )
        self.lengths += int(np.sum(batch.column("num_steps").fill_null(0).to_numpy()))
        self.seeds.update(s for s in batch.column("seed").drop_null().to_pylist())
        self.success.add(batch)
        self.invalid += int(pc.sum(batch.column("invalid")).as_py() or 0)
        self.costs.append(np.asarray(batch.column("cost_usd").drop_null(), dtype=np.float64))


class _RowGroupBuffer:
    """Re-cuts a batch stream into row groups of ``rows`` rows (fewer past `ROW_GROUP_BYTES`)
    and writes them on a thread of its own, so that encoding and compressing a row group
    overlaps validating the next chunks (Arrow releases the GIL while it writes).

    The writer is opened at the first write, with the schema known by then (the tensor types
    are fixed by the first values); batches are conformed to it. A row group is handed over
    only when the writer thread is idle, so memory holds at most the row group being written
    and the one being gathered, and only row groups of at most `THREADED_GROUP_BYTES` go to
    the thread (larger ones are written in line); the thread's error is raised here.
    """

    def __init__(
        self,
        sink: _Sink,
        schema: Callable[[], pa.Schema],
        rows: int,
        on_group: Callable[[pa.Table], None] | None = None,
    ) -> None:
        self._sink = sink
        self._on_group = on_group
        self._schema = schema
        self._writer: pq.ParquetWriter | None = None
        self._rows = rows
        self._batches: list[pa.RecordBatch] = []
        self._held = 0
        self._bytes = 0
        self._queue: queue.Queue[pa.Table | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._stop = threading.Event()
        self._error: BaseException | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        self._batches.append(batch)
        self._held += batch.num_rows
        self._bytes += batch.nbytes
        if self._held >= self._rows:
            self._write(final=False)
        elif self._bytes >= ROW_GROUP_BYTES:
            self._write(final=True)

    def close(self, final: Path) -> FileDigest:
        """Write what is held, wait for the writer thread, close the file; return its digest."""
        self._write(final=True)
        writer = self._open()
        if self._thread is not None:
            self._put(None)
            while self._thread.is_alive():  # waking to run Python code: Ctrl-C is seen
                self._thread.join(timeout=0.1)
            self._raise()
        writer.close()
        return self._sink.finish(final)

    def stop(self) -> None:
        """Tell the writer thread to stop after the row group it is writing (no wait)."""
        self._stop.set()

    def abort(self) -> None:
        """Stop the writer thread and close the file (its row group in progress ends first).
        Raises nothing: it runs while another error is on its way out."""
        self._stop.set()
        with contextlib.suppress(Exception):
            if self._thread is not None:
                self._thread.join()
            if self._writer is not None:
                self._writer.close()  # the file is deleted: its end is moot
        with contextlib.suppress(Exception):
            self._sink.close()

    @property
    def schema(self) -> pa.Schema:
        """The schema the file was written with (after `close`)."""
        return self._open().schema

    def _open(self) -> pq.ParquetWriter:
        if self._writer is None:
            self._writer = parquet_writer(self._sink.stream, self._schema())
        return self._writer

    def _write(self, *, final: bool) -> None:
        if not self._held:
            return
        writer = self._open()
        schema = writer.schema
        table = pa.Table.from_batches([conform_batch(b, schema) for b in self._batches], schema)
        whole = self._held if final else self._held - self._held % self._rows
        group = table.slice(0, whole)
        if self._on_group is not None:
            self._on_group(group)
        if group.nbytes > THREADED_GROUP_BYTES:
            self._wait_idle()  # the row groups before it are written: the order is kept
            for part, size in row_groups(group, self._rows):
                writer.write_table(part, row_group_size=size)
            self._sink.mark_written()
        else:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, args=(writer,), name="rollout-writer", daemon=True
                )
                self._thread.start()
            self._put(group)
        rest = table.slice(whole)
        self._batches = rest.to_batches()
        self._held = rest.num_rows
        self._bytes = rest.nbytes if self._held else 0

    def _put(self, item: pa.Table | None) -> None:
        self._wait_idle()
        self._idle.clear()
        self._queue.put(item)

    def _wait_idle(self) -> None:
        """Wait until the writer thread has written every row group handed to it."""
        while True:
            self._raise()
            self._sink.catch_up()  # here, off the writer thread, while it encodes
            if self._idle.wait(timeout=0.1):  # waking to run Python code: Ctrl-C is seen
                break
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self, writer: pq.ParquetWriter) -> None:
        try:
            while not self._stop.is_set():
                try:
                    table = self._queue.get(timeout=0.1)
                except queue.Empty:
                    continue
                if table is None:
                    return
                for part, size in row_groups(table, self._rows):
                    writer.write_table(part, row_group_size=size)
                self._sink.mark_written()
                self._idle.set()
        except BaseException as e:  # raised by the recording thread at its next hand-over
            self._error = e
            self._stop.set()
            self._idle.set()


def _chunks(
    batches: Iterable[pa.RecordBatch | pa.Table | RolloutChunk],
) -> Iterator[
    tuple[pa.RecordBatch | None, pa.RecordBatch | pa.Table | None, Mapping[str, Any] | None, Any]
]:
    for item in batches:
        if isinstance(item, RolloutChunk):
            yield item.steps, item.episodes, item.meta, item.features
        elif isinstance(item, pa.Table):
            for b in item.to_batches():
                yield b, None, None, None
        elif isinstance(item, pa.RecordBatch):
            yield item, None, None, None
        else:
            raise TypeError(
                f"rollout input item is a {type(item).__name__}, want a pyarrow RecordBatch, "
                "Table or RolloutChunk"
            )


def _prefetch(items: Iterable[_T], depth: int = 2) -> Iterator[_T]:
    """Iterate ``items`` on a helper thread, ``depth`` items ahead, and none further while
    those waiting hold `CHUNK_BYTES` (rows of 64 MiB tensors were read three ahead: rec47
    finding 1).

    Reading and decoding the input (pyarrow releases the GIL) then overlaps validating and
    writing, so recording costs about as much as copying. Memory grows by ``depth`` items.
    An exception from the input is re-raised here; when the consumer stops early, the helper
    stops after the item it is reading.
    """
    q: queue.Queue[tuple[bool, object, int]] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    room = threading.Condition()
    waiting = [0]  # bytes of the items queued

    def put(entry: tuple[bool, object, int]) -> bool:
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            it = iter(items)
            while True:
                with room:
                    while waiting[0] >= CHUNK_BYTES and not stop.is_set():
                        room.wait(0.05)
                item = next(it, _END)
                if item is _END or stop.is_set():
                    break
                size = _item_bytes(item)
                with room:
                    waiting[0] += size
                if not put((True, item, size)):
                    return
            put((True, _END, 0))
        except BaseException as e:  # handed to the consumer, which re-raises it
            put((False, e, 0))

    helper = threading.Thread(target=run, name="rollout-prefetch", daemon=True)
    helper.start()
    try:
        while True:
            try:  # waking to run Python code: a Ctrl-C handed to the helper thread is seen
                ok, item, size = q.get(timeout=0.1)
            except queue.Empty:
                continue
            with room:
                waiting[0] -= size
                room.notify()
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


def _item_bytes(item: object) -> int:
    """The bytes of an input item's steps (0 for what holds none)."""
    steps = item.steps if isinstance(item, RolloutChunk) else item
    return int(steps.nbytes) if isinstance(steps, pa.RecordBatch | pa.Table) else 0


def row_groups(table: pa.Table, rows: int) -> Iterator[tuple[pa.Table, int]]:
    """``table`` as written: (part, rows of its row groups). Row groups of ``rows`` rows, or
    fewer so that one holds at most `ROW_GROUP_VALUES` values under lists (at least one row),
    cut by each row's own values from the start of each block of ``rows`` rows: wide frames
    beside narrow steps are not one group (rev41 finding 4: a cut by the table's average
    held 24 frames of 1 MiB in one group, 11.5 x the frames in Arrow's pool), and where the
    input's batches were cut changes nothing."""
    counts = _row_values(table)
    if int(counts.sum()) <= ROW_GROUP_VALUES:
        yield table, rows
        return
    ends = np.cumsum(counts)
    for lo in range(0, table.num_rows, rows):
        hi = min(table.num_rows, lo + rows)
        start = lo
        while start < hi:
            before = int(ends[start - 1]) if start else 0
            end = int(np.searchsorted(ends[start:hi], before + ROW_GROUP_VALUES, "right"))
            end = start + max(1, end)
            yield table.slice(start, end - start), end - start
            start = end


def _row_values(table: pa.Table) -> npt.NDArray[np.int64]:
    """The values each row of ``table`` holds under lists, counted at their leaves."""
    counts = np.zeros(table.num_rows, np.int64)
    for column in table.columns:
        pos = 0
        for chunk in column.chunks:
            counts[pos:pos + len(chunk)] += _listed(chunk)
            pos += len(chunk)
    return counts


def _listed(arr: pa.Array, under: bool = False) -> npt.NDArray[np.int64]:
    """The values under a list (``under``: ``arr`` is under one) of each element of ``arr``,
    counted at its leaves; a null list holds none (values behind its slot are not written).

    Work is per element of ``arr`` and of the lists it nests, never per leaf value, and only
    over the values its elements span: a list's values are a slice of an array that may back
    many more rows (a row group cut from a chunk), and leaves each count one. Before (pq48
    finding 1), every leaf value of the whole backing array was counted, an int64 each: 0.1
    CPU-s per 1M steps of 23 floats, 36 MiB per row group of them, 16 x a group's frames."""
    t, n = arr.type, len(arr)
    if not n:
        return np.zeros(0, np.int64)
    if pa.types.is_struct(t):
        summed = np.zeros(n, np.int64)
        for child in arr.flatten():
            summed += _listed(child, under)
        return summed
    if pa.types.is_fixed_size_list(t):
        k = t.list_size
        offsets = np.arange(n + 1, dtype=np.int64) * k
        values = arr.values.slice(arr.offset * k, n * k)
    elif _is_list(t):
        offsets = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        first = int(offsets[0]) if n else 0
        values = arr.values.slice(first, int(offsets[-1]) - first)
        offsets -= first
    else:
        return np.ones(n, np.int64) if under else np.zeros(n, np.int64)
    if _is_list(values.type) or pa.types.is_fixed_size_list(values.type) or pa.types.is_struct(
        values.type
    ):
        inner = np.concatenate([[0], np.cumsum(_listed(values, True))]).astype(np.int64)
        counts: npt.NDArray[np.int64] = inner[offsets[1:]] - inner[offsets[:-1]]
    else:  # leaves, one value each
        counts = np.diff(offsets)
    if arr.null_count:
        counts[arr.is_null().to_numpy(zero_copy_only=False)] = 0
    return counts


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t))


def _temp_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


@np.errstate(over="ignore", invalid="ignore")  # (an overflowing sum is a problem: `_overflows`)
def write_steps_parquet(
    batches: Iterable[pa.RecordBatch | pa.Table | RolloutChunk],
    path: str | os.PathLike[str],
    *,
    episodes_path: str | os.PathLike[str] | None = None,
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    subject: str | None = None,
    fill: Mapping[str, str] | None = None,
    on_steps: Callable[[pa.Table], None] | None = None,
    on_features: Callable[[Any], None] | None = None,
) -> WriteStats:
    """Validate a stream of step batches and write the step and episode tables.

    Steps:
      1. For each chunk: normalise the steps into `STEP_SCHEMA` (tensor columns keep the type
         of their first values); validate them, carrying state across chunks; derive the
         episodes they complete (merged with any episode attributes the chunk carries), fill
         the ``fill`` columns where null, and validate them; write both while no problem has
         been found (afterwards, keep validating so the error lists every problem). Both files
         are hashed as their bytes are written.
      2. At the end of the stream: check that the last episode has a final step, then close
         it; check that the stream held steps and that every given episode attribute found
         its steps.
      3. On any problem: delete the temporary files and raise, listing all problems (those the
         input reader raised come first). Otherwise rename the files into place.

    Args:
        batches: step record batches, tables, or `RolloutChunk` objects (as yielded by
            `readers.iter_rollout_chunks`), in step order.
        path: the step file to write (conventionally ``steps.parquet``).
        episodes_path: the episode file; default ``episodes.parquet`` beside ``path``.
        max_field_bytes: largest accepted string field.
        max_tensor_bytes: largest accepted tensor value (an observation or action).
        row_group_rows: rows per row group of the step file.
        subject: names the input in error messages; default ``path``.
        fill: episode string columns to set where the input left them null (the recorder
            fills ``env_version`` and ``policy_version``).
        on_steps: called with each row group of the step file as it is written, in order,
            exactly as stored (the recorder computes episode features from them).
        on_features: called for each chunk with steps, in order, as it is taken for the step
            file, with the chunk's ``features`` when the file stores the very columns they
            were computed from (the chunk's, unchanged by normalising and by the writer's
            schema), else None; and once more with None at the end if the writer's schema
            turned out not to be the chunks'.

    Returns:
        Summary statistics, the files' digests and the input's batch metadata.

    Raises:
        RolloutValidationError: the input breaks schema v3 (nothing is written).
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
    fills = dict(fill or {})

    collector = ProblemCollector()
    tensors = TensorTypes()
    normaliser = StepNormaliser(collector, tensors)
    step_check = StreamValidator(
        "steps",
        max_field_bytes=max_field_bytes,
        max_tensor_bytes=max_tensor_bytes,
        collector=collector,
    )
    builder = EpisodeBuilder(collector, tensors, spill=steps_path.parent)  # (beside the files)
    episode_check = StreamValidator(
        "episodes",
        max_field_bytes=max_field_bytes,
        max_tensor_bytes=max_tensor_bytes,
        collector=collector,
        check_unique_ids=False,
    )
    totals = _EpisodeTotals()
    meta = _Meta(collector)
    reader_problems: tuple[Problem, ...] = ()
    given_schema: pa.Schema | None = None  # of the chunks written with their features

    tmp_steps, tmp_eps = _temp_path(steps_path), _temp_path(ep_path)
    steps_sink = _Sink(tmp_steps)
    eps_sink: _Sink | None = None
    groups = episode_groups = None
    try:
        eps_sink = _Sink(tmp_eps)
        groups = _RowGroupBuffer(steps_sink, tensors.step_schema, row_group_rows, on_steps)
        episode_groups = _RowGroupBuffer(eps_sink, tensors.episode_schema, row_group_rows)

        def emit(episodes: pa.RecordBatch) -> None:
            for column, value in fills.items():
                i = episodes.schema.get_field_index(column)
                col = episodes.column(i)
                if col.null_count:
                    episodes = episodes.set_column(
                        i, episodes.schema.field(i), col.fill_null(pa.scalar(value, col.type))
                    )
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
        limit, seen = max_steps(), 0
        try:
            for steps, attrs, chunk_meta, features in _chunks(_prefetch(batches)):
                seen += 0 if steps is None else steps.num_rows
                if seen > limit:
                    raise StepLimitError(
                        f"{subject or path}: holds over {limit:,} steps, more than one batch "
                        "may (TRAJLEDGER_MAX_STEPS), refused before reading on: split it into "
                        "batches of fewer steps, or set TRAJLEDGER_MAX_STEPS to the steps it "
                        "holds to take it whole"
                    )
                if chunk_meta is not None:
                    meta.add(chunk_meta)
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
                    if on_features is not None and batch.num_rows:
                        same = features is not None and _unchanged(steps, batch, given_schema)
                        given_schema = batch.schema if same else given_schema
                        on_features(features if same else None)
                    groups.add(batch)
        except RolloutValidationError as e:
            reader_problems += e.problems
        # (2) The steps first: the last episode's problems are its steps' (see emit).
        step_check.finish()
        emit(builder.finish())
        if step_check.rows == 0 and not collector.count and not reader_problems:
            collector.add("empty", "the input holds no steps, want at least one")
        problems = reader_problems + collector.problems()
        if not problems:
            problems = tuple(_overflows(totals))
        # (3)
        if problems:
            raise RolloutValidationError(name, problems)
        steps_file = groups.close(steps_path)
        if given_schema is not None and not given_schema.equals(groups.schema, True):
            assert on_features is not None
            on_features(None)  # conformed to another schema when written
        episodes_file = episode_groups.close(ep_path)
        os.replace(tmp_steps, steps_path)
        try:
            os.replace(tmp_eps, ep_path)
        except BaseException:
            steps_path.unlink(missing_ok=True)  # never leave a step file without its episodes
            raise
    except BaseException:
        builder.close()  # a long open episode's spilled values (ep46)
        buffers = [b for b in (groups, episode_groups) if b is not None]
        for buffer in buffers:  # both threads told first, so that neither outlives a failure
            buffer.stop()
        for buffer in buffers:
            buffer.abort()
        for sink in (steps_sink, eps_sink):
            if sink is not None:
                with contextlib.suppress(Exception):
                    sink.close()
        for tmp in (tmp_steps, tmp_eps):
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        raise
    return _stats(
        steps_file,
        episodes_file,
        step_check.rows,
        totals,
        meta.value(),
    )


def _unchanged(given: pa.RecordBatch, taken: pa.RecordBatch, schema: pa.Schema | None) -> bool:
    """Whether ``taken`` (a chunk normalised) holds ``given``'s columns as they were, in the
    schema of the chunks before it (``schema``, when any): then what was computed from the
    chunk's steps holds for the rows written."""
    return (
        taken.schema.equals(given.schema, True)
        and (schema is None or taken.schema.equals(schema, True))
        and all(a.equals(b) for a, b in zip(taken.columns, given.columns, strict=True))
    )


class _Meta:
    """Batch metadata from the input's chunks: formats are collected, other keys must agree."""

    def __init__(self, collector: ProblemCollector) -> None:
        self._c = collector
        self._formats: list[str] = []
        self._other: dict[str, Any] = {}

    def add(self, meta: Mapping[str, Any]) -> None:
        for key, value in meta.items():
            if key == "format":
                if value not in self._formats:
                    self._formats.append(value)
            elif key not in self._other:
                self._other[key] = value
            elif self._other[key] != value:
                self._c.add(
                    f"meta:{key}",
                    f"the inputs disagree on {key}: one batch holds one environment's data",
                )

    def value(self) -> dict[str, Any]:
        out = dict(self._other)
        if self._formats:
            out["formats"] = self._formats
        return out


def _total(values: npt.NDArray[np.float64]) -> float:
    """The exactly rounded sum of ``values``, or numpy's (an infinity) when it overflows."""
    try:
        return math.fsum(values.tolist())
    except OverflowError:  # (an intermediate sum past the largest float64)
        with np.errstate(over="ignore", invalid="ignore"):
            return float(np.sum(values))


def _overflows(t: _EpisodeTotals) -> list[Problem]:
    """The batch's statistics (`WriteStats`) that a float64 cannot hold, each a problem: finite
    rewards or costs whose sum over the batch, or whose returns' mean or spread, overflows (the
    manifest's statistics must be finite numbers: DESIGN §2). Before, ``math.fsum`` raised
    ``OverflowError`` (exit 4) or the manifest was refused after the files were written."""
    out = []
    returns = np.concatenate(t.returns) if t.returns else np.zeros(0)
    costs = np.concatenate(t.costs) if t.costs else np.zeros(0)
    with np.errstate(over="ignore", invalid="ignore"):
        if len(returns) and not all(map(math.isfinite, (
                _total(returns), float(np.mean(returns)), float(np.std(returns))))):
            out.append(Problem(None, "reward", "the episodes' returns summed over the batch (or "
                               "their mean or spread) overflow a float64 (beyond 1.8e308): "
                               "record fewer episodes per batch, or scale the rewards down"))
        if len(costs) and not math.isfinite(_total(costs)):
            out.append(Problem(None, "cost_usd", "the episodes' costs summed over the batch "
                               "overflow a float64 (beyond 1.8e308)"))
    return out


def _stats(
    steps: FileDigest, episodes: FileDigest, num_steps: int, t: _EpisodeTotals,
    meta: Mapping[str, Any],
) -> WriteStats:  # fmt: skip
    returns = np.concatenate(t.returns) if t.returns else np.zeros(0)
    n = t.count
    rewarded = len(returns)
    return WriteStats(
        steps_path=steps.path,
        episodes_path=episodes.path,
        num_steps=num_steps,
        num_episodes=n,
        rewarded_episodes=rewarded,
        reward_sum=_total(returns) if rewarded else None,
        return_mean=float(np.mean(returns)) if rewarded else None,
        return_min=float(np.min(returns)) if rewarded else None,
        return_max=float(np.max(returns)) if rewarded else None,
        return_std=float(np.std(returns)) if rewarded else None,
        mean_episode_length=t.lengths / n,
        seeds=tuple(sorted(t.seeds)),
        success_count=t.success.count,
        success_rate=t.success.rate,
        num_invalid=t.invalid,
        total_cost_usd=_total(np.concatenate(t.costs))
        if any(map(len, t.costs))
        else None,
        steps_file=steps,
        episodes_file=episodes,
        meta=meta,
    )
