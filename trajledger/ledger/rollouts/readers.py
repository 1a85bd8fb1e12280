"""Reading rollout inputs as a stream of chunks: format detection and one reader per container.

Scope:
  * `detect_format` names an input's format: Parquet and Arrow IPC by their magic bytes and
    columns (the rollout schema, or the records of an LLM training library), JSON lines by the
    keys of the first record (plain, gzip or zstd), a Minari dataset directory by its
    ``metadata.json``; other known kinds of file are named in the refusal.
  * `iter_rollout_chunks` streams one input as `RolloutChunk` objects of bounded size: Parquet
    row group by row group (through a 1 MiB buffer), Arrow IPC batch by batch, JSONL line by
    line (``jsonl.py``; records mapped by ``formats.py``), Minari episode by episode
    (``minari_io.py``). A reader never holds more than one chunk of the input in memory.
    `iter_batch_inputs` streams several inputs as one batch (episode ids kept unique).
Non-scope: normalising and validating the chunks (``normalise.py``, ``validate.py``, done when
writing), compressed Parquet or Arrow files (both compress internally; a gzip or zstd wrapper
around them is refused).
Spec: ``schemas/rollout-inputs.md`` (each input mapping).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from . import typed_json
from .chunk_builder import ChunkBuilder
from .chunks import (
    CHUNK_BYTES,
    ReaderOptions,
    RecordProblems,
    RolloutChunk,
    StepLimitError,
    max_steps,
)
from .formats import RECORD_FORMATS, kind_of_record, map_record
from .ipc_read import check_ipc
from .jsonl import (
    JSON_SPACE_BYTES,
    InputError,
    jsonl_objects,
    open_jsonl,
    read_lines,
    refused,
)
from .minari_io import iter_minari_chunks, minari_root
from .normalise import normalise_episodes
from .parquet_read import BombError, iter_parquet, read_parquet, stated_steps
from .problems import ProblemCollector, RolloutValidationError, refusal
from .reader_process import PROCESS_MIN_BYTES, iter_jsonl_parallel
from .rows import rows_to_columns
from .schema import EPISODE_ATTR_SCHEMA, STEP_SCHEMA

__all__ = [
    "DEFAULT_BATCH_ROWS",
    "FORMATS",
    "ROLLOUT_JSONL",
    "detect_format",
    "iter_batch_inputs",
    "iter_rollout_chunks",
    "iter_step_batches",
]

DEFAULT_BATCH_ROWS: Final = 65536
"""Rows per streamed batch."""

FORMATS: Final = ("parquet", "arrow", "arrow-stream", *RECORD_FORMATS, "minari")
"""Input formats `detect_format` recognises. ``parquet``, ``arrow`` and ``arrow-stream`` are
the rollout schema in those containers; the record formats come as JSONL (plain, gzip or zstd)
or as rows of a Parquet or Arrow file; ``minari`` is a Minari dataset directory."""


_HDF5_MAGIC: Final = b"\x89HDF\r\n\x1a\n"
_OTHER_MAGIC: Final = (
    (b"PK\x03\x04", "a ZIP archive (or .npz)"),
    (b"\x93NUMPY", "a numpy .npy file"),
    (b"\x80", "a Python pickle"),
    (b"ustar", "a tar archive"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ", "xz data"),
    (b"\x0a\x0dTFRecord", "a TFRecord file"),
)
ROLLOUT_JSONL: Final = "rollout-jsonl"
"""Step rows as JSON lines (what ``export --format jsonl`` writes): one step per line."""


def _table_kind(names: Sequence[str], path: str | os.PathLike[str], container: str) -> str:
    """A Parquet/Arrow file in the rollout schema, or rows of a record format."""
    keys = set(names)
    if {"episode_id", "step"} <= keys:
        return {"parquet": "parquet"}.get(container, container)
    if {"observations", "actions", "rewards", "terminations"} <= keys:
        raise refusal(
            path,
            "this looks like one episode of a Minari dataset (arrow backend); give the "
            "dataset directory (the one holding metadata.json, or its parent)",
        )
    kind = kind_of_record(keys)
    if kind is None:
        raise refusal(
            path,
            f"cannot tell the format from the columns {sorted(keys)}: want the rollout schema "
            "(episode_id, step, ...), or the columns of a chat, TRL or verl record "
            "(see schemas/rollout-inputs.md)",
        )
    return kind


def detect_format(path: str | os.PathLike[str]) -> str:
    """Name the format of an input file or directory.

    A directory is a Minari dataset (``metadata.json`` with a ``data_format``, in it or in its
    ``data/``). Parquet and Arrow IPC are recognised by their magic bytes and named by their
    columns: the rollout schema (``episode_id``, ``step``, ...) or the fields of a record format
    (TRL's completions table, a TRL dataset, chat rollouts, a verl dump). JSONL is named by the
    keys of its first record; compressed with gzip or zstd it is recognised by its magic bytes,
    whatever the file is named. Other known kinds of file (HDF5, ZIP, pickle, ...) are named in
    the error.

    Args:
        path: the input file or directory.

    Returns:
        One of `FORMATS`, or ``rollout-jsonl``.

    Raises:
        RolloutValidationError: the input is empty, of no known format, a compressed Parquet
            or Arrow file, compressed data that is corrupt or over the limits, or its name is
            not UTF-8 (Arrow opens files by UTF-8 name, and a record names its files).
        OSError: the file cannot be read.
    """
    subject = Path(path)
    try:
        os.fsencode(subject).decode("utf-8")
    except UnicodeDecodeError as e:
        shown = os.fsencode(subject).decode("utf-8", "backslashreplace")
        raise refusal(
            shown, f"{shown}: the file name is not valid UTF-8 (byte {e.start}); rename the file"
        ) from e
    if subject.is_dir():
        if minari_root(subject) is not None:
            return "minari"
        for ext in ("parquet", "jsonl"):  # what `trajledger export --format parquet|jsonl` wrote
            steps, episodes = subject / f"steps.{ext}", subject / f"episodes.{ext}"
            if steps.is_file():
                given = f"{steps} --episodes {episodes}" if episodes.is_file() else str(steps)
                raise refusal(
                    path,
                    f"a directory, not a rollout file; it holds an export's {steps.name}: "
                    f"give {given}",
                )
        raise refusal(
            path,
            "a directory that is not a Minari dataset (no metadata.json with a data_format in "
            "it or in its data/); give rollout files, or a Minari dataset directory",
        )
    with open(path, "rb") as f:
        head = f.read(16)
    if head[:4] == b"PAR1":
        try:
            names = pq.ParquetFile(path).schema_arrow.names
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
            raise refusal(path, f"Parquet file cannot be read: {e}") from e
        return _table_kind(names, path, "parquet")
    if head[:6] == b"ARROW1" or head[:4] == b"\xff\xff\xff\xff":
        container = "arrow" if head[:6] == b"ARROW1" else "arrow-stream"
        try:
            with pa.memory_map(str(path)) as source:
                reader: Any = (
                    ipc.open_file(source) if container == "arrow" else ipc.open_stream(source)
                )
                names = reader.schema.names
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
            raise refusal(path, f"Arrow IPC file cannot be read: {e}") from e
        return _table_kind(names, path, container)
    if head[:8] == _HDF5_MAGIC:
        raise refusal(
            path,
            "this looks like HDF5; for Minari datasets give the dataset directory (the one "
            "holding metadata.json, or its parent)",
        )
    for magic, what in _OTHER_MAGIC:
        if head.startswith(magic):
            raise refusal(
                path, f"this looks like {what}, not a rollout input (see schemas/rollout-inputs.md)"
            )
    with open_jsonl(subject, check_end=False) as (codec, f):
        if codec is not None:
            try:
                inner = f.peek(8)[:8]
            except InputError as e:
                raise refused(subject, str(e), None) from e
            if inner[:4] == b"PAR1" or inner[:6] == b"ARROW1" or inner[:4] == b"\xff" * 4:
                raise refused(
                    subject,
                    f"{codec}-compressed Parquet or Arrow IPC is not read: both compress "
                    "internally; decompress the file",
                    None,
                )
        for number, raw in read_lines(f, subject):
            if raw.strip(JSON_SPACE_BYTES):
                return _jsonl_kind(raw, number, str(path))
    raise refusal(path, "file is empty, want a rollout input (see FORMATS)")


def _jsonl_kind(raw: bytes, number: int, subject: str) -> str:
    def fail(message: str) -> RolloutValidationError:
        return refusal(subject, message, number)

    try:
        # Decoded as the reader decodes it, so both report bad bytes alike.
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise fail(f"not valid UTF-8 ({e.reason} at byte {e.start})") from e
    if number == 1 and text.startswith("\ufeff"):  # out51: Notepad's, PowerShell's UTF-8
        raise fail("the file starts with a UTF-8 byte order mark (BOM), which JSON lines do "
                   "not have (RFC 8259): save it as UTF-8 without one (Notepad: 'UTF-8', not "
                   "'UTF-8 with BOM'; or: sed -i '1s/^\\xEF\\xBB\\xBF//' FILE), then run "
                   "this again")
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise fail(f"not Parquet, Arrow IPC, or JSON lines: {e}") from e
    except RecursionError as e:
        raise fail("not accepted: JSON nested too deeply") from e
    if not isinstance(obj, dict):
        raise fail(f"JSON {type(obj).__name__}, want an object per line")
    if {"episode_id", "step"} <= set(obj) and "completion" not in obj:
        return ROLLOUT_JSONL
    if {"data_format", "observation_space", "action_space"} <= set(obj):
        raise fail(
            "this looks like a Minari dataset's metadata.json; give the dataset directory (the "
            "one holding it, or its parent)"
        )
    kind = kind_of_record(set(obj))
    if kind is None:
        raise fail(
            f"cannot tell the format from keys {sorted(obj)}: want 'messages' (chat), "
            "'prompt'+'completion' (TRL completions or prompt-completion; with 'label': KTO), "
            "'chosen'+'rejected' (TRL preference), 'input'/'prompt'+'output'/'response' (verl), "
            "or 'episode_id'+'step' (rollout rows)"
        )
    return kind


def _container(path: Path) -> str:
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] == b"PAR1":
        return "parquet"
    if head[:6] == b"ARROW1":
        return "arrow"
    if head[:4] == b"\xff\xff\xff\xff":
        return "arrow-stream"
    return "jsonl"


def iter_rollout_chunks(
    path: str | os.PathLike[str],
    fmt: str | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    *,
    episodes: str | os.PathLike[str] | None = None,
    options: ReaderOptions | None = None,
    process_min_bytes: int = PROCESS_MIN_BYTES,
) -> Iterator[RolloutChunk]:
    """Stream an input as chunks of at most about ``batch_rows`` steps.

    Parquet is read row group by row group, Arrow IPC batch by batch, JSONL line by line, a
    Minari dataset episode by episode; no more than one chunk is held in memory. An episode of a
    record format is never split, so a chunk may exceed ``batch_rows`` by one episode; a chunk
    is also cut once its text passes 64 MiB. Parquet and Arrow batches in the rollout schema are
    passed through as read (normalisation happens when writing). JSONL compressed with gzip or
    zstd (told by its magic bytes, also when ``fmt`` is given) is decompressed as a stream; line
    numbers count decompressed lines. The first chunk's ``meta`` names the format (and, for
    Minari, the spaces, environment spec and dataset metadata).

    Record problems (bad JSON, missing or mistyped fields, repeated episode ids) are collected
    over the whole file; good records are still yielded, and the error is raised after the last
    chunk, so the caller sees every problem at once and must treat what it received as void.

    Args:
        path: the input file, or a Minari dataset directory.
        fmt: one of `FORMATS` (or ``rollout-jsonl``), or None to `detect_format`.
        batch_rows: target rows per chunk.
        episodes: a Parquet, Arrow or rollout JSONL file of episode attributes, for steps in
            the rollout schema; read whole (episode tables are small) and yielded with the first
            chunk.
        options: choices the input cannot express (TRL reward weights, episode id prefix).
        process_min_bytes: with ``options.workers`` over 1, JSON lines of records (chat, TRL,
            verl) of at least this many bytes are parsed and mapped in blocks by that many
            worker processes (``reader_process.py``); the chunks and problems are the same.

    Yields:
        `RolloutChunk` objects in input order.

    Raises:
        RolloutValidationError: the format is unknown, or records are bad (listing each with
            its line or row), or a line is over `MAX_LINE_BYTES`, or compressed data is
            corrupt, truncated or over `MAX_DECOMPRESSED_BYTES` (one problem naming the file,
            after those of the lines before it).
        OSError: the file cannot be read.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows is {batch_rows}, want >= 1")
    opts = options or ReaderOptions()
    kind = fmt if fmt is not None else detect_format(path)
    if kind not in (*FORMATS, ROLLOUT_JSONL):
        raise refusal(path, f"format {kind!r} is unknown, want one of {', '.join(FORMATS)}")
    meta = {"format": kind}
    attrs = _read_episode_file(episodes) if episodes is not None else None
    if kind == "minari":
        if attrs is not None:
            raise ValueError("episodes= is for steps in the rollout schema; Minari has its own")
        root = minari_root(Path(path))
        if root is None:
            raise refusal(path, "not a Minari dataset directory (no metadata.json)")
        yield from iter_minari_chunks(root, batch_rows, opts)
        return
    container = "directory" if Path(path).is_dir() else _container(Path(path))
    if kind in RECORD_FORMATS:
        if attrs is not None:
            raise ValueError("episodes= is for steps in the rollout schema; records have their own")
        if container == "jsonl":
            if opts.workers > 1 and Path(path).stat().st_size >= process_min_bytes:
                # Parsing and mapping records is Python: in blocks, in worker processes, on
                # every core (``reader_process.py``), deciding as the reader in line.
                yield from iter_jsonl_parallel(Path(path), kind, batch_rows, opts, opts.workers)
            else:
                yield from _iter_jsonl(Path(path), kind, batch_rows, opts)
        else:
            yield from _iter_table_records(Path(path), container, kind, batch_rows, opts)
        return
    if kind == ROLLOUT_JSONL:
        first = True
        for batch, read in _iter_rollout_jsonl(Path(path), batch_rows):
            yield RolloutChunk(batch, attrs, meta if first else None, read)
            attrs, first = None, False
        if first:
            yield RolloutChunk(pa.RecordBatch.from_pylist([], schema=STEP_SCHEMA), attrs, meta)
        return
    if container != kind and not (
        container in ("arrow", "arrow-stream") and kind in ("arrow", "arrow-stream")
    ):
        raise refusal(path, f"format {kind!r} was given, the file is {container}")
    first = True
    for batch in _iter_arrow(Path(path), container, batch_rows):
        yield RolloutChunk(batch, attrs, meta if first else None)
        attrs, first = None, False
    if first:  # steps file held no rows
        yield RolloutChunk(pa.RecordBatch.from_pylist([], schema=STEP_SCHEMA), attrs, meta)


def iter_batch_inputs(
    paths: Sequence[str | os.PathLike[str]],
    fmt: str | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    *,
    episodes: str | os.PathLike[str] | None = None,
    options: ReaderOptions | None = None,
) -> Iterator[RolloutChunk]:
    """Stream several inputs as the chunks of one batch (see `iter_rollout_chunks`).

    A chunk's ``read`` counts the bytes of every file before its own too (progress over the
    batch). Default episode ids (``line-<n>``, ``row-<n>``, a Minari episode's number) would repeat
    from one file to the next, so with several inputs they are prefixed with the input's name,
    and its position when names repeat: ``1.jsonl:line-3``, ``2:steps.jsonl:line-3``. Episode
    ids the inputs give themselves are kept, and must be unique over the whole batch.

    Args:
        paths: the inputs, in order.
        fmt: the format of every input, or None to detect each.
        batch_rows: target rows per chunk.
        episodes: an episode attribute file for the whole batch (given with the first input).
        options: reader choices; its ``id_prefix`` is put before each input's prefix.
    """
    base = options or ReaderOptions()
    names = [Path(p).name for p in paths]
    before = 0  # bytes of the files before this one
    for n, p in enumerate(paths):
        prefix = base.id_prefix
        if len(paths) > 1:
            name = names[n] if names.count(names[n]) == 1 else f"{n}:{names[n]}"
            prefix = f"{prefix}{name}:"
        opts = dataclasses.replace(base, id_prefix=prefix)
        for chunk in iter_rollout_chunks(
            p, fmt, batch_rows, episodes=episodes if n == 0 else None, options=opts
        ):
            yield chunk if chunk.read is None else dataclasses.replace(
                chunk, read=before + chunk.read
            )
        before += Path(p).stat().st_size if Path(p).is_file() else 0


def iter_step_batches(
    path: str | os.PathLike[str],
    fmt: str | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Stream an input file's steps as record batches (see `iter_rollout_chunks`).

    Episode attributes the input carries (JSONL task ids, judge scores, ...) are dropped; use
    `iter_rollout_chunks` to keep them.

    Args:
        path: the input file.
        fmt: one of `FORMATS`, or None to detect it.
        batch_rows: target rows per batch.

    Yields:
        Step batches: in `STEP_SCHEMA` for records, as stored for Parquet/Arrow.

    Raises:
        RolloutValidationError: as `iter_rollout_chunks`.
    """
    for chunk in iter_rollout_chunks(path, fmt, batch_rows):
        yield chunk.steps


def _read_episode_file(path: str | os.PathLike[str]) -> pa.RecordBatch:
    p = Path(path)
    container = _container(p)
    if container == "parquet":
        try:
            table = read_parquet(path, name=f"episode file {path}")
        except BombError as e:
            raise refusal(path, f"episode file: Parquet file: {e}") from e
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
            raise refusal(path, f"episode file: Parquet file cannot be read: {e}") from e
    elif container in ("arrow", "arrow-stream"):
        table = pa.Table.from_batches(list(_iter_arrow(p, container, DEFAULT_BATCH_ROWS)))
    elif container == "jsonl":
        table = _jsonl_rows_table(p, EPISODE_ATTR_SCHEMA, "episode")
    else:
        raise refusal(path, "episode file: want Parquet, Arrow or rollout JSON lines")
    out = normalise_episodes(table)
    return (
        out.combine_chunks().to_batches()[0]
        if out.num_rows
        else pa.RecordBatch.from_pylist([], schema=out.schema)
    )


def _rows_for(batch_rows: int, nbytes: int, rows: int) -> int:
    """Rows per chunk: ``batch_rows``, fewer when rows average over ``CHUNK_BYTES / batch_rows``."""
    if rows <= 0:
        return batch_rows
    per_row = max(1, nbytes // rows)
    return max(1, min(batch_rows, CHUNK_BYTES // per_row))


def _fixed_row_bytes(schema: pa.Schema) -> int | None:
    """Bytes a row takes in Arrow memory when every column has a fixed width (numbers, flags,
    fixed-size lists of them), else None."""
    bits = 0
    for field in schema:
        t, n = field.type, 1
        while pa.types.is_fixed_size_list(t):
            n *= t.list_size
            t = t.value_type
        if pa.types.is_dictionary(t) or isinstance(t, pa.ExtensionType):
            return None
        try:
            bits += n * t.bit_width
        except ValueError:  # strings, lists, structs...: no fixed width
            return None
    return (bits + 7) // 8


def _iter_arrow(path: Path, kind: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The batches of a Parquet or Arrow IPC input; data pyarrow cannot decode (a corrupt page,
    a bad IPC message, a column name that is not UTF-8) refuses the file, naming it."""
    what = "Parquet file" if kind == "parquet" else "Arrow IPC file"
    try:
        yield from _arrow_batches(path, kind, batch_rows)
    except BombError as e:
        raise refusal(path, str(e) if kind != "parquet" else f"{what}: {e}") from e
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise refusal(path, f"{what} cannot be read: {e}") from e


def _arrow_batches(path: Path, kind: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    if kind == "parquet":
        # Streamed (`parquet_read`: strings read as dictionaries first, so a decompression
        # bomb is refused before it is expanded).
        with pq.ParquetFile(path) as pf:
            rows, arrow = stated_steps(pf.metadata), pf.schema_arrow
        if rows > (limit := max_steps()):  # (from the footer, before any is read: rec47 2)
            raise StepLimitError(
                f"{path}: holds {rows:,} steps, more than one batch may ({limit:,}: "
                "TRAJLEDGER_MAX_STEPS), refused before reading them: split it into batches of "
                "fewer steps, or set TRAJLEDGER_MAX_STEPS to the steps it holds to take it whole"
            )
        # The row size in memory: from the schema when every column has a fixed width, else
        # from the first rows read (the file's sizes are of encoded data, which can be far
        # smaller); a later batch still over the bound is sliced.
        fixed = _fixed_row_bytes(arrow)
        if fixed is not None:
            size = fixed * rows
        else:
            probe = next(iter_parquet(path, batch_rows=16), None)
            size = 0 if probe is None else probe.nbytes * rows // max(1, len(probe))
        for batch in iter_parquet(path, batch_rows=_rows_for(batch_rows, size, rows)):
            step = _rows_for(batch_rows, batch.nbytes, batch.num_rows)
            for start in range(0, max(batch.num_rows, 1), step):
                yield batch.slice(start, step)
        return
    with pa.memory_map(str(path)) as source:
        # Compressed batches are decompressed whole when read: their declared sizes first.
        check_ipc(memoryview(source.read_buffer()), "Arrow IPC file")
        source.seek(0)
        reader: Any = ipc.open_file(source) if kind == "arrow" else ipc.open_stream(source)
        batches: Iterable[pa.RecordBatch] = (
            (reader.get_batch(i) for i in range(reader.num_record_batches))
            if kind == "arrow"
            else reader
        )
        for batch in batches:
            # An IPC file's buffers are taken as they are (offsets, lengths): check them all
            # before anything reads a value, or a hostile file points reads out of bounds.
            batch.validate(full=True)
            step = _rows_for(batch_rows, batch.nbytes, batch.num_rows)
            for start in range(0, max(batch.num_rows, 1), step):
                yield batch.slice(start, step)


def _iter_table_records(
    path: Path, container: str, kind: str, batch_rows: int, opts: ReaderOptions
) -> Iterator[RolloutChunk]:
    """Rows of a Parquet/Arrow file of a record format (e.g. TRL's completions table)."""
    c = ProblemCollector()
    builder = ChunkBuilder(c, opts, {"format": kind})
    row = 0
    for batch in _iter_arrow(path, container, 1024):
        for obj in batch.to_pylist():
            rec = RecordProblems(row, c, unit="row")
            row += 1
            builder.add(map_record(kind, obj, rec, opts), rec)
            if builder.full(batch_rows):
                yield builder.flush()
    if builder.rows or row == 0:
        yield builder.flush()
    problems = c.problems()
    if problems:
        raise RolloutValidationError(str(path), problems)


def _iter_jsonl(
    path: Path, kind: str, batch_rows: int, opts: ReaderOptions
) -> Iterator[RolloutChunk]:
    c = ProblemCollector()
    builder = ChunkBuilder(c, opts, {"format": kind})
    seen = False
    position: list[Callable[[], int]] = []
    for rec, obj in jsonl_objects(path, c, position):
        seen = True
        builder.add(map_record(kind, obj, rec, opts), rec)
        if builder.full(batch_rows):
            yield dataclasses.replace(builder.flush(), read=position[0]())
    if builder.rows or not seen:
        yield dataclasses.replace(builder.flush(), read=path.stat().st_size)
    problems = c.problems()
    if problems:
        raise RolloutValidationError(str(path), problems)


def _jsonl_rows_table(path: Path, schema: pa.Schema, what: str) -> pa.Table:
    c = ProblemCollector()
    rows = [obj for _, obj in jsonl_objects(path, c)]
    fields, arrays, c2 = rows_to_columns(_json_rows(rows, schema, c), schema, what)
    problems = c.problems() + c2.problems()
    if problems:
        raise RolloutValidationError(str(path), problems)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields)) if fields else pa.table({})


def _json_rows(
    rows: list[dict[str, Any]], schema: pa.Schema, c: ProblemCollector
) -> list[dict[str, Any]]:
    """Rows as ``export --format jsonl`` writes them: JSON values back to column values; a
    typed JSON value that does not decode is a problem in ``c`` (its row's value left null)."""
    for i, r in enumerate(rows):
        for key in ("extras", "info", "reset_info"):
            v = r.get(key)
            try:
                if key == "extras" and isinstance(v, dict):
                    r[key] = {k: typed_json.loads(json.dumps(x)) for k, x in v.items()}
                elif key != "extras" and v is not None and not isinstance(v, str):
                    r[key] = typed_json.loads(json.dumps(v))
            except typed_json.TypedJSONError as e:
                c.add(f"{key}:typed", str(e), row=i, column=key)
                r[key] = None
            except RecursionError:
                c.add(f"{key}:typed", "nested too deeply", row=i, column=key)
                r[key] = None
    return rows


def _iter_rollout_jsonl(path: Path, batch_rows: int) -> Iterator[tuple[pa.RecordBatch, int]]:
    """Step rows of a JSON-lines file, each batch with the bytes of the file read by then (for
    ``record``'s progress bar)."""
    c = ProblemCollector()
    rows: list[dict[str, Any]] = []
    position: list[Callable[[], int]] = []

    def flush() -> pa.RecordBatch | None:
        typed = ProblemCollector()
        rows_typed = _json_rows(rows, STEP_SCHEMA, typed)
        fields, arrays, c2 = rows_to_columns(rows_typed, STEP_SCHEMA, "step")
        rows.clear()
        for p in (*typed.problems(), *c2.problems()):
            c.add(f"{p.column}:{p.message[:24]}", p.message, column=p.column)
        if c2.count or typed.count:
            return None
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))

    for _, obj in jsonl_objects(path, c, position):
        rows.append(obj)
        if len(rows) >= batch_rows:
            out = flush()
            if out is not None:
                yield out, position[0]()
    if rows:
        out = flush()
        if out is not None:
            yield out, path.stat().st_size
    problems = c.problems()
    if problems:
        raise RolloutValidationError(str(path), problems)
