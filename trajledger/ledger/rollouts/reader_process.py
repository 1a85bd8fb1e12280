"""JSON lines of records read in blocks on every core, deciding exactly as the reader in line.

Scope: `iter_jsonl_parallel` reads a JSON-lines file of records (chat, TRL, verl) as
`RolloutChunk` objects, the parsing and mapping of its lines (``jsonl.decode_line``, then
``formats.map_record`` in Python) done in worker processes, one block of lines each, while this
process splits the file into blocks and assembles the workers' Arrow batches. What
depends on the whole file stays here and runs in line order, as in `readers._iter_jsonl`:
line numbers, the blank-line and line-length limits, episode ids given twice, the cap on
problems listed per kind, and the cut of chunks (every ``batch_rows`` steps or 64 MiB of text,
at the same records). So the chunks, the problems and the refusal are those of the reader in
line (tested), and only the time differs. With ``ReaderOptions.features`` (the recorder's
episode features) a worker also computes the features of its block's steps (whole records, so
whole episodes), and each chunk carries those of the records kept (`_kept_features`): the
recording process no longer computes them on its one thread.
Non-scope: the mappings (``formats.py``), decoding (``jsonl.py``), other inputs.
Spec: ``schemas/rollout-inputs.md``.

Why processes, msgspec and the strict decoder behind it, not pyarrow's JSON reader or orjson
(measured on the bench's chat records, issue 21 item 5): decoding is about a quarter of a
worker's time, the mapping (messages to steps, fields to extras and typed JSON) the rest, and
the mapping is Python whatever parses the text. ``jsonl.decode_line`` decodes a line with
msgspec (``jsonl.fast_object``) when it can prove the object is the strict decoder's, and with
the standard library's strict decoder otherwise; msgspec refuses everything the strict decoder
refuses and keeps key order, big integers, null against missing, and a colon count catches the
one thing it loses silently (the first of two equal keys). orjson was not taken: it turns an
integer past 64 bits into a float, silently. pyarrow's reader refuses duplicate keys, but a
whole block at once (the strict path would have to run again to name the line and go on with
the next ones), infers one Arrow type per block (a record whose field changes type, ``1`` then
``"x"``, refuses the block too, and multi-part content or a tool call with other fields gives
another struct type), and its output has lost what the strict path keeps: the JSON text of
tool calls and extras with their keys in order. Mapping its columns with Arrow kernels and
falling back per block is the way to pyarrow's speed, but some of what it loses it loses
silently, so a block cannot be proved mappable from the reader's output alone (pyarrow 26,
checked): an object's keys come back in the order of the block's first record that had them
(``{"y": 3, "x": 4}`` reads as ``{"x": 4, "y": 3}``), a missing key and an explicit null are
one null (``judge_scores`` with a null score is refused by the strict path), an integer past
int64 becomes a float, an integer column with one float becomes floats, and blank lines are
dropped (line numbers and default ids shift). An explicit schema with unexpected fields refused
catches the type changes; key order and null against missing would need a check over the text
itself. Not done. So the same decoding and mapping run, on every core. Workers are started
with ``spawn`` (no state or lock of this process's threads is copied) and get at most `IN_FLIGHT`
blocks at a time, so memory stays bounded.
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import gc
import importlib.abc
import io
import multiprocessing
import os
import signal
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_not
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa

from trajledger._signals import exit_with_parent

from .chat import plain_chat, typed_chat
from .chunk_builder import ChunkBuilder, repeated_id
from .chunks import CHUNK_TEXT_BYTES, ReaderOptions, RecordProblems, RolloutChunk
from .formats import map_record
from .idset import IdSet
from .jsonl import (
    JSON_SPACE_BYTES,
    MAX_BLANK_BYTES,
    MAX_LINE_BYTES,
    InputError,
    decode_line,
    fast_object,
    open_jsonl,
    read_position,
    refused,
    strict_decoder,
)
from .problems import ROWS_PER_KIND, ProblemCollector, RolloutValidationError
from .schema import EPISODE_ATTR_SCHEMA, STEP_SCHEMA

__all__ = [
    "BLOCK_BYTES",
    "IN_FLIGHT",
    "PROCESS_MIN_BYTES",
    "freed_memory_returned",
    "iter_jsonl_parallel",
]

PROCESS_MIN_BYTES: Final = 32 << 20
"""Files at least this large are read in parallel; a smaller one in line (starting the worker
interpreters and importing pyarrow costs about 0.3 s)."""

BLOCK_BYTES: Final = 1 << 20
"""Bytes of lines handed to a worker at a time (cut at a line end). A worker's peak memory
grows with its block (the block's decoded objects, step dicts and Arrow batch, and what the
allocators keep of them): 1 MiB rather than 4 MiB took about 140 MiB off the recording of a
256 MiB chat file, summed over its processes, at no cost in CPU time (measured, issue 21)."""

IN_FLIGHT: Final = 4
"""Blocks given to the workers and not yet assembled, at most: bounds the lines and mapped
batches held for the workers and this process at once to about ``IN_FLIGHT`` blocks' worth,
whatever the file's size (tested: test_rollout_parallel.py)."""

_READ: Final = 1 << 20

PLAIN_KINDS: Final = frozenset({"chat-jsonl"})
"""Formats whose common record a worker maps in one step (`_map_block`): a line `fast_object`
decodes into a record `chat.plain_chat` takes is queued as the general path below would queue
it (same episode, id, counts; no problem), without its calls, problem object and blank check
(about 8 % of decoding, mapping and building a block of the bench's chat records, measured).
Tested against the general path: test_rollout_parallel.py."""

_Event = tuple[str, str, "str | None", "int | None", "int | None"]
_Record = tuple[int, bool, "list[str] | None", int, int, int]


class _Events(ProblemCollector):
    """A worker's problems, kept as events for the parent to replay in line order: the first
    ``ROWS_PER_KIND + 1`` of each kind, and a count of the rest (which are never listed)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[_Event] = []
        self.more: dict[str, int] = {}
        self._sent: dict[str, int] = {}

    def add(
        self,
        kind: str,
        message: str,
        *,
        row: int | None = None,
        column: str | None = None,
        line: int | None = None,
    ) -> None:
        """Keep the occurrence (the first ``ROWS_PER_KIND + 1`` of a kind), or count it."""
        sent = self._sent.get(kind, 0)
        if sent <= ROWS_PER_KIND:
            self._sent[kind] = sent + 1
            self.events.append((kind, message, column, line, row))
        else:
            self.more[kind] = self.more.get(kind, 0) + 1


@dataclass
class _Block:
    """What a worker made of one block of lines."""

    chunk: RolloutChunk | None = None
    records: list[_Record] = field(default_factory=list)
    """Per non-blank line: (line, failed, episode ids (None: not a JSON object), steps,
    episodes, text bytes); a failed record's steps and episodes are not in ``chunk``."""
    blanks: list[tuple[int, int]] = field(default_factory=list)
    """Per blank line: (line, bytes), until the block alone passes `MAX_BLANK_BYTES`."""
    events: list[_Event] = field(default_factory=list)
    more: dict[str, int] = field(default_factory=dict)
    features: Any = None
    """``ReaderOptions.features`` of ``chunk.steps`` (None when not asked, or it gave None)."""

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (sent to the parent) with the chunk's batches as Arrow IPC streams: one
        copy of their buffers each way, read back without a copy (about 1 ms less a block of
        the bench's chat records than pickling the arrays, measured)."""
        state = dict(self.__dict__)
        c = self.chunk
        if c is not None:
            state["chunk"] = (_ipc(c.steps), _ipc(_batch(c.episodes)), c.meta, c.read, c.features)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state["chunk"] is not None:
            steps, episodes, meta, read, features = state["chunk"]
            state["chunk"] = RolloutChunk(_read_ipc(steps), _read_ipc(episodes), meta, read,
                                          features)  # fmt: skip
        self.__dict__.update(state)


def _ipc(batch: pa.RecordBatch) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as out:
        out.write_batch(batch)
    return sink.getvalue()


def _read_ipc(data: pa.Buffer) -> pa.RecordBatch:
    return pa.ipc.open_stream(data).read_next_batch()


def _map_block(kind: str, opts: ReaderOptions, first_line: int, data: bytes) -> _Block:
    """A worker's job: decode and map the lines of one block, as `readers._iter_jsonl` does,
    leaving to the parent what needs the lines before (repeated ids, limits, the cut)."""
    events = _Events()
    builder = ChunkBuilder(events, opts, {})
    decoder = strict_decoder()
    block = _Block()
    blank = 0
    plain = kind in PLAIN_KINDS
    default = f"{opts.id_prefix}line-"  # `ChunkBuilder.ids_of`'s id of a line's one episode
    for number, raw in enumerate(io.BytesIO(data), first_line):
        # The common chat record decoded into its typed structs, then (when that is not
        # proved) decoded and mapped in two steps; never a blank line: msgspec refuses it.
        ep = typed_chat(raw) if plain else None
        obj = None
        if ep is None and plain:
            obj = fast_object(raw)
            ep = None if obj is None else plain_chat(obj)
        if ep is not None:  # the common chat record: the steps below, without their detours
            eid = f"{default}{number}" if ep.episode_id is None else ep.episode_id
            rows, text = builder.rows, builder.text_bytes
            builder.queue(eid, ep)
            block.records.append(
                (number, False, [eid], builder.rows - rows, 1, builder.text_bytes - text)
            )  # fmt: skip
            continue
        if not raw.strip(JSON_SPACE_BYTES):
            if blank <= MAX_BLANK_BYTES:
                blank += len(raw)
                block.blanks.append((number, len(raw)))
            continue
        rec = RecordProblems(number, events)
        if obj is None:
            obj = decode_line(decoder, raw, rec)
        if obj is None:
            block.records.append((number, True, None, 0, 0, 0))
            continue
        episodes = map_record(kind, obj, rec, opts)
        ids = builder.ids_of(episodes, rec)
        rows, eps, text = builder.rows, builder.episodes, builder.text_bytes
        builder.take(ids, episodes, rec)
        block.records.append(
            (number, rec.failed, ids, builder.rows - rows,
             builder.episodes - eps, builder.text_bytes - text)
        )  # fmt: skip
    if builder.rows:
        block.chunk = builder.flush()
        if opts.features is not None:  # a block holds whole records, so whole episodes
            with _spill_in(opts.spill):
                block.features = opts.features(block.chunk.steps)
    block.events, block.more = events.events, events.more
    return block


@contextmanager
def _spill_in(directory: str | None) -> Iterator[None]:
    """The worker's temporary files (a long episode's spilled features) made in ``directory``,
    the recorder's private workdir, not the system's temporary directory (rec47 finding 3). A
    worker runs one job at a time, on one thread: the module's setting is its own."""
    if directory is None:
        yield
        return
    before, tempfile.tempdir = tempfile.tempdir, directory
    try:
        yield
    finally:
        tempfile.tempdir = before


class _ReadError(Exception):
    """The file cannot be read on at some line (too long, undecodable): the lines before it are
    assembled first, then the refusal is raised with their problems."""

    def __init__(self, refusal: RolloutValidationError) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal


def _blocks(f: io.BufferedReader, path: Path) -> Iterator[tuple[int, bytes]]:
    """The file's lines in blocks of about `BLOCK_BYTES`, each cut at a line end, with the
    number of its first line. A line over `MAX_LINE_BYTES` (as `jsonl.read_lines` reads it) or
    data that cannot be read on ends the blocks with `_ReadError`, after the lines before it."""
    limit = MAX_LINE_BYTES
    line = 1  # the number of the first line of ``pending``
    pending = b""
    while True:
        try:
            data = f.read1(_READ)
        except InputError as e:
            end = pending.rfind(b"\n") + 1
            if end:
                yield line, pending[:end]
                line += pending.count(b"\n", 0, end)
            raise _ReadError(refused(path, str(e), line)) from e
        pending += data
        if data and len(pending) < BLOCK_BYTES and len(pending) <= limit:
            continue
        if len(pending) > limit:  # only then can a line be too long
            at = 0
            for number, raw in enumerate(io.BytesIO(pending), line):
                if len(raw) > limit:
                    if at:
                        yield line, pending[:at]
                    message = f"line is over {limit:,} bytes, want at most {limit:,} "
                    raise _ReadError(refused(path, message + "(MAX_LINE_BYTES)", number))
                at += len(raw)
        end = pending.rfind(b"\n") + 1 if data else len(pending)
        if end:
            block, pending = pending[:end], pending[end:]
            yield line, block
            line += _newlines(block)
        if not data:
            return


def _newlines(data: bytes) -> int:
    """``data.count(b"\\n")``, in a fifth of its time (numpy compares 32 bytes at a time;
    ``bytes.count`` of one byte goes a byte at a time): 0.08 against 0.39 ms a block."""
    return int(np.count_nonzero(np.frombuffer(data, np.uint8) == _NEWLINE))


_NEWLINE: Final = ord("\n")


class _Assembly:
    """The parent's side: replays each block's results in line order and cuts the chunks."""

    def __init__(self, path: Path, kind: str, batch_rows: int) -> None:
        self.path = path
        self.c = ProblemCollector()
        self.ids = IdSet()  # every good record's episode ids, with its line (compact)
        self.batch_rows = batch_rows
        self.meta: dict[str, Any] | None = {"format": kind}
        self.blank = 0
        self.seen = False
        self.parts: list[_Part] = []
        self.rows = self.text = 0
        self.read: int | None = None  # bytes of the file read by the block being taken

    def take(self, block: _Block) -> Iterator[RolloutChunk]:
        """Replay one block; yield each chunk the reader in line would have yielded by then."""
        events = deque(block.events)
        blanks = deque(block.blanks)
        step_at = ep_at = 0
        keep_steps: list[tuple[int, int]] = []
        keep_eps: list[tuple[int, int]] = []
        # The block's ids proved new and distinct at once (the common case): no record's ids
        # are then reported, and the good records' ids are remembered at the end of the block.
        given = [e for r in block.records if r[2] is not None for e in r[2]]
        quick = all(type(e) is str for e in given) and not self.ids.maybe_any(given)
        if quick and not (events or blanks or block.more) and _all_kept(block.records):
            yield from self._take_clean(block)
            return
        new_ids: list[str] = []
        new_lines: list[int] = []
        for number, failed, ids, steps, eps, text in block.records:
            while blanks and blanks[0][0] < number:
                self._blank(*blanks.popleft())
            rec = RecordProblems(number, self.c)
            while events and events[0][3] == number:
                kind, message, column, line, row = events.popleft()
                self.c.add(kind, message, column=column, line=line, row=row)
            rec.failed = failed
            if ids is not None:  # a JSON object: its ids checked as the reader in line does
                self.seen = True
                if not quick:
                    self._check_ids(ids, rec)
                elif not rec.failed:
                    new_ids += ids
                    new_lines += [number] * len(ids)
            if not rec.failed:
                keep_steps.append((step_at, steps))
                keep_eps.append((ep_at, eps))
                self.rows += steps
                self.text += text
            if not failed:  # the worker kept its rows
                step_at, ep_at = step_at + steps, ep_at + eps
            if self.rows >= self.batch_rows or self.text >= CHUNK_TEXT_BYTES:
                self._part(block, keep_steps, keep_eps)
                keep_steps, keep_eps = [], []
                yield self.flush()
        self.ids.add(new_ids, new_lines)
        while blanks:
            self._blank(*blanks.popleft())
        for kind, n in block.more.items():
            self.c.count_more(kind, n)
        self._part(block, keep_steps, keep_eps)

    def _take_clean(self, block: _Block) -> Iterator[RolloutChunk]:
        """`take` of a block whose records all are kept (no problem, blank line or id seen
        before): the same parts, cuts and ids, from sums over the records instead of a step of
        Python per record (tested against `take`'s loop: test_rollout_parallel.py)."""
        records = block.records
        if not records:
            return
        _, _, _, *columns = zip(*records, strict=True)
        steps, eps, text = (np.array(c, dtype=np.int64) for c in columns)
        self.seen = True
        at = step_at = ep_at = 0
        while at < len(records):
            rows = self.rows + np.cumsum(steps[at:])
            texts = self.text + np.cumsum(text[at:])
            cut = np.flatnonzero((rows >= self.batch_rows) | (texts >= CHUNK_TEXT_BYTES))
            end = at + (int(cut[0]) + 1 if len(cut) else len(records) - at)
            n_steps, n_eps = int(steps[at:end].sum()), int(eps[at:end].sum())
            self._part(block, [(step_at, n_steps)], [(ep_at, n_eps)])
            self.rows, self.text = int(rows[end - at - 1]), int(texts[end - at - 1])
            step_at, ep_at, at = step_at + n_steps, ep_at + n_eps, end
            if len(cut):
                yield self.flush()
        self.ids.add([e for r in records for e in r[2] or ()],
                     [r[0] for r in records for _ in r[2] or ()])  # fmt: skip

    def _check_ids(self, ids: list[str], rec: RecordProblems) -> None:
        """`ChunkBuilder.check_ids`, over the compact set of ids."""
        for eid in ids:
            line = self.ids.get(eid)
            if line is not None:
                rec.error("episode_id", repeated_id(eid, rec.unit, line))
        if not rec.failed:
            self.ids.add(ids, rec.number)

    def _blank(self, number: int, size: int) -> None:
        self.blank += size
        if self.blank > MAX_BLANK_BYTES:
            cause = refused(
                self.path,
                f"over {MAX_BLANK_BYTES:,} bytes of blank lines, want at most "
                f"{MAX_BLANK_BYTES:,} (MAX_BLANK_BYTES): refused as a possible "
                "decompression bomb",
                number,
            )
            raise RolloutValidationError(str(self.path), [*self.c.problems(), *cause.problems])

    def _part(
        self, block: _Block, steps: list[tuple[int, int]], eps: list[tuple[int, int]]
    ) -> None:
        if block.chunk is not None and steps:
            self.parts.append((block.chunk, steps, eps, block.features))

    def flush(self) -> RolloutChunk:
        """The records taken since the last chunk, as one chunk."""
        _trim()
        steps = [b for c, r, _, _ in self.parts for b in _rows(c.steps, r)]
        eps = [b for c, _, r, _ in self.parts for b in _rows(_batch(c.episodes), r)]
        features = _kept_features(self.parts)
        meta, self.meta = self.meta, None
        self.parts, self.rows, self.text = [], 0, 0
        return RolloutChunk(
            _concat(steps, STEP_SCHEMA), _concat(eps, EPISODE_ATTR_SCHEMA), meta, self.read,
            features,
        )  # fmt: skip


def _all_kept(records: list[_Record]) -> bool:
    """Whether every record of a block is a JSON object the worker kept."""
    if not records:
        return True
    _, failed, ids, *_ = zip(*records, strict=True)
    return not any(failed) and all(map(is_not, ids, repeat(None)))  # (no == per id)


_Part = tuple[RolloutChunk, list[tuple[int, int]], list[tuple[int, int]], Any]
"""A block's chunk, the step and episode row ranges kept of it, and its features."""


def _kept_features(parts: list[_Part]) -> Any:
    """The features of the steps kept of each part, in order: each part's features sliced to
    the episodes its kept step ranges hold (per episode, so the same as of the kept steps
    alone). None when a part has none, or a range does not hold whole episodes of them."""
    kept: list[Any] = []
    for _, ranges, _, features in parts:
        if features is None:
            return None
        ends = np.cumsum(features.num_steps)
        ends = np.concatenate((np.zeros(1, ends.dtype), ends))
        for at, n in _merged(ranges):
            lo, hi = np.searchsorted(ends, (at, at + n))
            if hi >= len(ends) or ends[lo] != at or ends[hi] != at + n:
                return None
            kept.append(features.slice(int(lo), int(hi)))
    return type(kept[0]).concat(kept) if kept else None


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Row ranges ``(at, n)`` with neighbouring ones joined."""
    out: list[tuple[int, int]] = []
    for at, n in ranges:
        if out and at == out[-1][0] + out[-1][1]:
            out[-1] = (out[-1][0], out[-1][1] + n)
        elif n:
            out.append((at, n))
    return out


def _rows(batch: pa.RecordBatch, ranges: list[tuple[int, int]]) -> list[pa.RecordBatch]:
    """The given row ranges of a batch, neighbouring ranges joined."""
    return [batch.slice(at, n) for at, n in _merged(ranges)]


def _batch(episodes: pa.RecordBatch | pa.Table | None) -> pa.RecordBatch:
    assert isinstance(episodes, pa.RecordBatch)  # ChunkBuilder.flush makes one
    return episodes


def _concat(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=schema)
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def _libc(name: str) -> Callable[..., int] | None:
    try:
        return getattr(ctypes.CDLL(None), name, None)  # glibc only
    except OSError:
        return None


_MALLOC_TRIM: Final = _libc("malloc_trim")
_MALLOPT: Final = _libc("mallopt")
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h

WORKER_HEAP: Final = (32 << 20, 64 << 20)
"""A worker's C heap: blocks up to the first size come from the heap, not a mapping of their
own, and its top is given back to the system past the second. Each block's features allocate
and free numpy scratch of tens of MiB; by default glibc mapped each anew and every page of it
faulted in again (2,300-2,900 page faults and 4-7 ms of system time a 1 MiB block of the
bench's chat records; with these settings about 70 and 1-2 ms, the peak memory within 5 MiB,
measured, issue 21 item 5)."""


def _trim() -> None:
    """Give the C library's free memory back to the system, once a chunk (about 65,536 steps).

    The recording process frees much of what it allocates for a chunk (the features' numpy
    scratch, message texts, Arrow buffers), and glibc keeps the freed pages in its arenas:
    for a 256 MiB chat file, 388 MiB of 503 were free at the peak (``mallinfo2``). Trimming
    costs a walk over the arenas, about a millisecond; taking every buffer straight from the
    system instead (``MALLOC_MMAP_THRESHOLD_``) cost a quarter more CPU time (measured)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class _NoPandas(importlib.abc.MetaPathFinder):
    """Refuses to import pandas, which nothing in a worker uses.

    pyarrow imports pandas (when installed) at its first conversion of a Python list
    (``pa.array`` asks whether the list is a pandas object): 0.2-0.25 CPU-s and tens of MiB in
    each worker, for an answer that is always no here (measured, issue 21 item 5). With the
    import refused, pyarrow takes pandas as absent; the arrays it builds are the same."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ImportError(f"{fullname} is not imported in a reader worker")


GC_THRESHOLD: Final = (20_000, 20, 20)
"""A worker's collector thresholds (Python's default is 700, 10, 10). Mapping a block allocates
a dict or a list per message, few of them in cycles: with the default the collector ran every
700 of them, about 8 % of a worker's time; the objects alive after start-up are frozen out of
its passes. Cycles are still collected (measured, issue 21 item 5)."""


def _worker_start() -> None:
    """A worker leaves Ctrl-C to the recording process, which stops it (no traceback of its own:
    the terminal sends the signal to the whole process group), ends with that process
    (`trajledger._signals.exit_with_parent`), allocates Arrow's memory
    as `freed_memory_returned` says, keeps freed scratch in its heap (`WORKER_HEAP`), refuses
    pandas (`_NoPandas`) and collects garbage less often (`GC_THRESHOLD`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        pa.set_memory_pool(pa.system_memory_pool())
    if "pandas" not in sys.modules:
        sys.meta_path.insert(0, _NoPandas())
    if _MALLOPT is not None:
        _MALLOPT(_M_MMAP_THRESHOLD, WORKER_HEAP[0])
        _MALLOPT(_M_TRIM_THRESHOLD, WORKER_HEAP[1])
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


@contextmanager
def freed_memory_returned() -> Iterator[None]:
    """Arrow allocates from the C library's allocator while the file is read (unless
    ``ARROW_DEFAULT_MEMORY_POOL`` says otherwise), then from the pool it used before.

    Arrow's default pool (mimalloc) keeps freed memory for reuse; reading a large file
    allocates and frees a block's or a chunk's buffers many times, and the pages it keeps
    count in the recording's memory. The C library's allocator returns large buffers to the
    system when they are freed: about 65 MiB less in the recording process and 18 MiB less in
    each worker for a 256 MiB chat file, in the same CPU time (measured, issue 21 item 5).
    Buffers keep the pool they came from, so switching back is safe. The ``record`` command
    holds it for the whole recording (the last row group, the features file, storing).
    """
    if "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        yield
        return
    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(before)


def iter_jsonl_parallel(
    path: Path, kind: str, batch_rows: int, opts: ReaderOptions, workers: int | None = None
) -> Iterator[RolloutChunk]:
    """`readers._iter_jsonl`, with the lines parsed and mapped in worker processes.

    Args:
        path: the JSON-lines file (plain, gzip or zstd).
        kind: its record format.
        batch_rows: target steps per chunk.
        opts: reader options (TRL reward weights, the id prefix).
        workers: worker processes; default the number of cores.

    Yields:
        The chunks `readers._iter_jsonl` yields.

    Raises:
        RolloutValidationError: as `readers._iter_jsonl`, with the same problems.
    """
    assembly = _Assembly(path, kind, batch_rows)
    ctx = multiprocessing.get_context("spawn")
    pool = cf.ProcessPoolExecutor(
        max_workers=workers or os.cpu_count() or 1, mp_context=ctx, initializer=_worker_start
    )
    try:
        with freed_memory_returned(), open_jsonl(path, check_end=True) as (_, f):
            pending: deque[tuple[cf.Future[_Block], int]] = deque()

            def take() -> Iterator[RolloutChunk]:
                future, assembly.read = pending.popleft()
                yield from assembly.take(future.result())

            try:
                for first_line, data in _blocks(f, path):
                    block = pool.submit(_map_block, kind, opts, first_line, data)
                    pending.append((block, read_position(f)))
                    while len(pending) >= IN_FLIGHT:
                        yield from take()
            except _ReadError as e:
                # The rest of the file cannot be read: the lines before it first, then the cause.
                while pending:
                    yield from take()
                raise RolloutValidationError(
                    str(path), [*assembly.c.problems(), *e.refusal.problems]
                ) from e
            while pending:
                yield from take()
        if assembly.rows or not assembly.seen:
            assembly.read = path.stat().st_size
            yield assembly.flush()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    problems = assembly.c.problems()
    if problems:
        raise RolloutValidationError(str(path), problems)
