"""Reading Parquet of unknown origin without expanding a decompression bomb.

Scope: every Parquet file trajledger reads rows of (a rollout input given to ``record`` or
``validate``, and the step and episode files of a recorded or imported batch, read by the
admission gate, evaluations, sealed suites, exports and the audit index) is read here.
`iter_parquet` yields its record batches and `read_parquet` its whole table, decoded as usual,
after checking what they decode to:

- string and binary columns (at any depth: a map's values, a list of messages' contents) are
  read as dictionaries first, so a dictionary page is never expanded before its cost is known;
- the bytes each row decodes to are summed from the lengths of the dictionary values it uses,
  and the file is refused (`BombError`) when one value is over `MAX_VALUE_BYTES`, one row
  over `MAX_ROW_BYTES`, or the file over `MAX_DECODED_BYTES` (`read_parquet`, which holds the
  whole table: over `MAX_TABLE_BYTES`);
- the rows are decoded in slices of at most `CHUNK_BYTES` of such bytes;
- before pyarrow is asked to describe any column chunk, the footer's chunks are read as Arrow
  reads them (`parquet_thrift.checked_footer`): one whose size statistics Arrow refuses is
  refused here in one line, where pyarrow's description ended the process (SIGABRT: fix60).

Why: a Parquet page may hold a dictionary of values and indices into it. A 9,779-byte file of
eight rows that all point at one 256 MiB string decoded to 2 GiB (4.3 GB resident, 7 s) before
the schema's value limits refused it; with more rows it takes every byte of memory. The same
is true of a batch a vendor signed and the buyer imported, read in full by the gate.

- values under lists (a tensor's numbers, a list of strings' indices) are counted row by row
  from the pages' repetition levels alone, in a row group whose footer or pages' headers state
  more of them than `MAX_ROW_BYTES` (`_list_rows`, over the bytes Arrow reads of a chunk;
  levels in runs of under 8, which no common writer makes, within a budget: rev42 finding 5):
  a row over `MAX_ROW_BYTES` is refused before anything is
  decoded, and the batches are cut so that one holds about `CHUNK_BYTES` of them (rev41
  finding 3: 874 bytes of dictionary-coded zeros declared one row of 40M numbers, 1 GiB
  resident before the schema refused the tensor).

Not covered: fixed-width columns outside lists decode to at most their row count times their
width, which the footer states, in batches of a bounded number of rows; a footer that states a
vast row count for a few bytes is refused by pyarrow when the pages do not hold those rows,
after decoding the pages there are. The costs are those of the data: string columns are hashed
into dictionaries as they are read where their pages are plainly encoded.
Spec: docs/SECURITY.md ("Decompression bombs in Parquet").
"""

from __future__ import annotations

import functools
import io
import os
import re
import struct
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from trajledger.verify.errors import FormatError

from .chunks import CHUNK_BYTES, StepLimitError, max_steps
from .parquet_thrift import (
    CODECS,
    HEADER_READ,
    MAX_HEADER,
    checked_footer,
    footer_codecs,
    read_header,
    skip_struct,
    varint,
)

if TYPE_CHECKING:  # (imported where a file is opened: the reader's workers never open one, and
    # pyarrow.parquet brings pyarrow.fs's cloud file systems and ssl: chat50)
    import pyarrow.parquet as pq

__all__ = [
    "MAX_DECODED_BYTES",
    "MAX_PAGE_BYTES",
    "MAX_ROW_BYTES",
    "MAX_TABLE_BYTES",
    "MAX_VALUE_BYTES",
    "BombError",
    "Source",
    "iter_parquet",
    "read_parquet",
    "stated_steps",
]

MAX_VALUE_BYTES: Final = 64 << 20
"""Longest string or binary value read from a Parquet file: the schema's largest value (a 64 MiB
tensor, ``validate.DEFAULT_MAX_TENSOR_BYTES``); strings are held to 1 MiB after reading."""
MAX_ROW_BYTES: Final = 256 << 20
"""Most string and binary bytes one row may decode to (a step with its largest tensor and its
texts, or a record's list of messages, is far below it)."""
MAX_DECODED_BYTES: Final = 64 << 30
"""Most string and binary bytes a file may decode to, as for a compressed JSON lines file
(``jsonl.MAX_DECOMPRESSED_BYTES``): split larger inputs into several files."""
MAX_TABLE_BYTES: Final = 16 << 30
"""Most string and binary bytes of a file read whole into memory (`read_parquet`)."""
MAX_PAGE_BYTES: Final = 256 << 20
"""Largest page, decompressed. Writers cut pages at about 1 MiB (pyarrow, parquet-mr, Arrow's
Rust writer, by default) and dictionaries at 1 MiB; a page is decompressed whole before any of
its values can be judged, so a few kilobytes of zstd declaring a 1 GiB page cost 4 GiB of
memory."""

_BYTE_ARRAY_LOGICAL: Final = frozenset({"STRING", "NONE", "JSON", "ENUM", "BSON"})
"""Logical types of a BYTE_ARRAY leaf that pyarrow reads as strings or binary."""

Source = str | os.PathLike[str] | bytes


class BombError(FormatError):
    """An input decodes to more than its limits allow (refused as malformed): a Parquet file
    here, an Arrow IPC file in `check_ipc`."""


def stated_steps(meta: pq.FileMetaData) -> int:
    """The rows a reader decodes from the file of footer ``meta``: its row groups' rows, each
    at least 0, or the footer's total when that is more. The total is a field of its own, which
    pyarrow reads rows by nothing of: a crafted footer stating 1 row over row groups of
    millions passed every bound read from it (rev46 finding 1)."""
    groups: int = sum(max(0, meta.row_group(g).num_rows) for g in range(meta.num_row_groups))
    return max(int(meta.num_rows), groups)


def iter_parquet(
    source: Source, columns: Sequence[str] | None = None, batch_rows: int = 65536
) -> Iterator[pa.RecordBatch]:
    """The record batches of ``source`` (a path or the file's bytes), decoded, each of at most
    ``batch_rows`` rows and `CHUNK_BYTES` of string and binary bytes (a single larger row
    alone), from one row group (rev42 finding 4).

    Raises:
        BombError: a value, a row or the file over its limit; nothing of it decoded.
        pyarrow.ArrowException, OSError: not a readable Parquet file.
    """
    dense, coded, caps, _listed = _open(source, columns)
    try:
        yield from _decoded(dense, coded, columns, batch_rows, caps)
    finally:
        _close(dense, coded)


def _decoded(
    dense: pq.ParquetFile, coded: pq.ParquetFile | None, columns: Sequence[str] | None,
    batch_rows: int, caps: dict[int, int],
) -> Iterator[pa.RecordBatch]:
    if coded is None:  # (a row group at a time: rev42 finding 4)
        yield from _coded_batches(dense, batch_rows, columns, caps)
        return
    total = 0
    for batch in _coded_batches(coded, batch_rows, columns, caps):
        schema = _dense_schema(batch.schema, dense.schema_arrow)
        sizes = _checked_rows(batch)
        total += int(sizes.sum())
        if total > MAX_DECODED_BYTES:
            raise BombError(
                f"its string and binary values decode to over {MAX_DECODED_BYTES:,} bytes "
                "(MAX_DECODED_BYTES): refused as a possible decompression bomb; split larger "
                "inputs into several files"
            )
        for lo, hi in _slices(sizes):
            part = batch.slice(lo, hi - lo)
            yield pa.RecordBatch.from_arrays(
                [col.cast(f.type) for col, f in zip(part.columns, schema, strict=True)],
                schema=schema,
            )


def read_parquet(
    source: Source, columns: Sequence[str] | None = None, *, name: str = "the Parquet file",
    metadata: pq.FileMetaData | None = None,
) -> pa.Table:
    """The whole table of ``source`` (a path or the file's bytes), decoded, once what it
    decodes to is known to be within `MAX_TABLE_BYTES`, and its rows (`stated_steps`) within
    ``TRAJLEDGER_MAX_STEPS`` (a batch's step or episode file, an input's: every whole read;
    rev46 finding 2: a suite's batch was read whole by eval, whatever the limit); ``name``
    says which file in that refusal. ``metadata``: its footer, when the caller read it already
    (from the same bytes: it is not parsed again).

    Raises:
        BombError: a value, a row or the table over its limit; nothing of it decoded.
        StepLimitError: more rows than a batch may hold, or a limit that is no number.
        pyarrow.ArrowException, OSError: not a readable Parquet file.
    """
    dense, coded, _caps, listed = _open(source, columns, metadata)
    try:
        if (rows := stated_steps(dense.metadata)) > (limit := max_steps()):
            raise StepLimitError(
                f"{name} holds {rows:,} rows, more than the {limit:,} steps a batch may here "
                "(TRAJLEDGER_MAX_STEPS), refused before reading them: set "
                "TRAJLEDGER_MAX_STEPS to the rows it holds to read it whole"
            )
        if listed > MAX_TABLE_BYTES:
            raise BombError(
                f"its values under lists decode to {listed:,} bytes, over the "
                f"{MAX_TABLE_BYTES:,} (MAX_TABLE_BYTES) read whole into memory: refused as a "
                "possible decompression bomb"
            )
        return _whole(dense, coded, columns)
    finally:
        _close(dense, coded)


def _whole(
    dense: pq.ParquetFile, coded: pq.ParquetFile | None, columns: Sequence[str] | None
) -> pa.Table:
    if coded is None:
        # (a small file on this thread: Arrow's pool costs more than its columns, 0.2 ms a file)
        meta = dense.metadata
        stated = sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
        return dense.read(columns=columns, use_threads=stated > _THREADED_BYTES)
    batches = list(_coded_batches(coded, 1 << 16, columns))
    size = sum(int(_checked_rows(b).sum()) for b in batches)
    if size > MAX_TABLE_BYTES:
        raise BombError(
            f"its string and binary values decode to {size:,} bytes, over the "
            f"{MAX_TABLE_BYTES:,} (MAX_TABLE_BYTES) read whole into memory: refused as a "
            "possible decompression bomb"
        )
    if not batches:
        return dense.read(columns=columns)
    schema = _dense_schema(batches[0].schema, dense.schema_arrow)
    return pa.Table.from_batches([b.cast(schema) for b in batches], schema=schema)


_THREADED_BYTES: Final = 1 << 20
"""A file whose row groups state more bytes is read on Arrow's threads (a column each)."""

# --------------------------------------------------------------------------------------------


def _open(
    source: Source, columns: Sequence[str] | None, metadata: pq.FileMetaData | None = None,
) -> tuple[pq.ParquetFile, pq.ParquetFile | None, dict[int, int], int]:
    """The file as pyarrow reads it, (when it has string or binary leaves among ``columns``)
    the same file with those leaves read as dictionaries, the most rows a batch of a row
    group may hold where its lists are long (`_list_rows`), and the bytes its values under
    lists decode to at least (`_listed_chunks`)."""

    def handle() -> str | os.PathLike[str] | pa.BufferReader:
        # (bytes in memory read by Arrow itself: through a Python file object each read of a
        # column chunk took the GIL, 0.1 ms a small file: spd52)
        return pa.BufferReader(source) if isinstance(source, bytes) else source

    import pyarrow.parquet as pq

    # Streamed through a 1 MiB buffer: pyarrow's default reads whole column chunks of a row
    # group into memory before the first row.
    dense = pq.ParquetFile(handle(), pre_buffer=False, buffer_size=1 << 20, metadata=metadata)
    arrow = dense.schema_arrow  # (made anew at each use)
    wanted = set(arrow.names if columns is None else columns)
    walked: dict[tuple[int, int], int] = {}
    codecs: list[int] = []  # (the footer's, read once: `checked_footer`)
    try:
        declared = _check_pages(source, dense.metadata, walked, codecs)
        caps = _list_rows(source, dense.metadata, wanted, declared, codecs)
        listed = sum(n * w for _g, _j, n, w in _listed_chunks(dense.metadata, wanted, declared))
    except BaseException:
        dense.close()
        raise
    schema = dense.metadata.schema
    # (pyarrow cannot cast a dictionary to a string view: such columns are read as they are,
    # their pages still checked)
    wanted -= {f.name for f in arrow if _has_view(f.type)}
    leaves = {}
    for j in range(len(schema)):
        leaf = schema.column(j)
        if leaf.physical_type != "BYTE_ARRAY" or leaf.logical_type.type not in _BYTE_ARRAY_LOGICAL:
            continue
        if leaf.path.split(".", 1)[0] in wanted:
            leaves[leaf.path] = j
    if not leaves or _small(dense.metadata, leaves, declared, walked):
        return dense, None, caps, listed
    coded = pq.ParquetFile(handle(), pre_buffer=False, buffer_size=1 << 20,
                           read_dictionary=list(leaves), metadata=dense.metadata)
    return dense, coded, caps, listed


def _small(meta: pq.FileMetaData, leaves: dict[str, int], declared: dict[tuple[int, int], int],
           walked: dict[tuple[int, int], int]) -> bool:
    """Whether the string and binary ``leaves`` (their columns by path) cannot decode to more
    than any limit allows, nor to more than `CHUNK_BYTES`, by their pages' headers alone
    (spd52): then they are read as they are, without dictionaries (a one-row file read as
    dictionaries cost 3 ms, for nothing).

    A value of a chunk, whatever its encoding (a dictionary's entry, a plain value, a delta
    encoding's prefix and suffix), is made of bytes its pages hold once decompressed, so it is
    no longer than their sum (``walked``: only for a chunk whose headers were read to its end,
    as Arrow reads them); it has at most as many values as its data pages' headers or its
    footer state, the more (``declared``): the chunk decodes to at most the product. When the
    products add up to no more than the least of the limits, no value, row, batch or table can
    be over its limit, and `_checked_rows` would refuse nothing. Only chunks whose footer names
    encodings Arrow reads as dictionaries (`_CODED_ENCODINGS`): a delta-encoded string is not
    readable so, and was refused as not readable Parquet; it still is (a footer that hides a
    delta encoding gets its file read, within the same bound)."""
    bound, limit = 0, min(MAX_VALUE_BYTES, MAX_ROW_BYTES, MAX_TABLE_BYTES, CHUNK_BYTES)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for j in leaves.values():
            chunk = group.column(j)
            if (g, j) not in walked or not _CODED_ENCODINGS.issuperset(chunk.encodings):
                return False
            values = max(chunk.num_values, declared.get((g, j), 0), 0)
            bound += (values + 1) * walked[g, j]
            if bound > limit:
                return False
    return True


_CODED_ENCODINGS: Final = frozenset({"PLAIN", "RLE", "BIT_PACKED", "PLAIN_DICTIONARY",
                                     "RLE_DICTIONARY"})
"""Encodings of a string chunk (with its levels') that Arrow decodes into a dictionary (the
delta encodings it does not: "DecodeArrow of DictAccumulator ... not yet implemented")."""


def _close(*files: pq.ParquetFile | None) -> None:
    for f in filter(None, files):
        f.close()


def _coded_batches(
    coded: pq.ParquetFile, rows: int, columns: Sequence[str] | None,
    caps: dict[int, int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The batches of ``coded``, row group by row group (pyarrow cannot read a nested
    dictionary column across row groups: "Nested data conversions not implemented for chunked
    array outputs"), each of at most ``rows`` rows, or the group's cap (`_list_rows`)."""
    caps = caps or {}
    for g in range(coded.metadata.num_row_groups):
        yield from coded.iter_batches(batch_size=min(rows, caps.get(g, rows)), row_groups=[g],
                                      columns=columns)


def _has_view(t: pa.DataType) -> bool:
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return True
    return any(_has_view(t.field(i).type) for i in range(t.num_fields))


def _dense_schema(coded: pa.Schema, dense: pa.Schema) -> pa.Schema:
    """The fields of ``coded`` (read with dictionaries) as pyarrow reads them without."""
    return pa.schema([dense.field(name) for name in coded.names], metadata=coded.metadata)


def _checked_rows(batch: pa.RecordBatch) -> npt.NDArray[np.int64]:
    """The string and binary bytes each row of ``batch`` (read with dictionaries) decodes to;
    `BombError` when a value or a row is over its limit."""
    sizes = np.zeros(batch.num_rows, dtype=np.int64)
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        sizes += _row_bytes(col, name)
    if len(sizes) and int(sizes.max()) > MAX_ROW_BYTES:
        row = int(sizes.argmax())
        raise BombError(
            f"a row (number {row} of its batch) decodes to {int(sizes[row]):,} bytes of strings "
            f"and binary values, over {MAX_ROW_BYTES:,} (MAX_ROW_BYTES): refused as a possible "
            "decompression bomb"
        )
    return sizes


def _row_bytes(arr: pa.Array, name: str) -> npt.NDArray[np.int64]:
    """Bytes of dictionary values each element of ``arr`` decodes to, at any depth."""
    t = arr.type
    if not _coded(t):  # (no zeros per value of a frame's list: 3 x 8 bytes a value, out42)
        return np.zeros(len(arr), dtype=np.int64)
    if pa.types.is_dictionary(t):
        lengths = pc.binary_length(arr.dictionary).fill_null(0).to_numpy(zero_copy_only=False)
        lengths = np.asarray(lengths, dtype=np.int64)
        if len(lengths) and int(lengths.max()) > MAX_VALUE_BYTES:
            raise BombError(
                f"column {name!r}: a value of {int(lengths.max()):,} bytes, over "
                f"{MAX_VALUE_BYTES:,} (MAX_VALUE_BYTES): refused as a possible decompression "
                "bomb"
            )
        indices = np.asarray(arr.indices.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        if len(lengths) and len(indices) and not 0 <= indices.min() <= indices.max() < len(
                lengths):  # (Arrow reads them unchecked: an IndexError, exit 4; rev52 f. 7)
            raise pa.ArrowInvalid(f"column {name!r}: a dictionary index past its dictionary of "
                                  f"{len(lengths):,} value(s)")
        out = lengths[indices] if len(lengths) else np.zeros(
            len(arr), dtype=np.int64)
        if arr.null_count:
            out[np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)] = 0
        return out
    if pa.types.is_struct(t):
        out = np.zeros(len(arr), dtype=np.int64)
        for i, child in enumerate(arr.flatten()):
            out += _row_bytes(child, f"{name}.{t.field(i).name}")
        return out
    if pa.types.is_fixed_size_list(t):
        # Every row's slots, a null row's too (`flatten` drops them: rev38 finding 6).
        size = t.list_size
        child = _row_bytes(arr.values.slice(arr.offset * size, len(arr) * size), name)
        out = np.asarray(child.reshape(len(arr), size).sum(axis=1), dtype=np.int64)
        if arr.null_count:
            out[np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)] = 0
        return out
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        # Offsets index the whole child (a slice's too), a null's sub-list included.
        child = _row_bytes(arr.values, name)
        offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        sums = np.concatenate(([0], np.cumsum(child)))
        out = np.asarray(sums[offsets[1:]] - sums[offsets[:-1]], dtype=np.int64)
        if arr.null_count:
            out[np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)] = 0
        return out
    return np.zeros(len(arr), dtype=np.int64)


def _coded(t: pa.DataType) -> bool:
    """Whether values of type ``t`` hold a dictionary at any depth (`_row_bytes` counts
    nothing else)."""
    return pa.types.is_dictionary(t) or any(_coded(t.field(i).type) for i in range(t.num_fields))


def _slices(sizes: npt.NDArray[np.int64]) -> Iterator[tuple[int, int]]:
    """Consecutive row ranges of at most `CHUNK_BYTES` of ``sizes`` (a larger row alone)."""
    n, lo = len(sizes), 0
    if int(sizes.sum()) <= CHUNK_BYTES:
        if n:
            yield 0, n
        return
    ends = np.cumsum(sizes)
    while lo < n:
        base = int(ends[lo - 1]) if lo else 0
        hi = int(np.searchsorted(ends, base + CHUNK_BYTES, side="right"))
        hi = max(hi, lo + 1)
        yield lo, hi
        lo = hi


# --------------------------------------------------------------------------------------------
# Page headers (Thrift compact protocol: parquet.thrift's PageHeader), read before any page is
# decompressed


def _check_pages(source: Source, meta: pq.FileMetaData,
                 walked: dict[tuple[int, int], int] | None = None,
                 codecs: list[int] | None = None) -> dict[tuple[int, int], int]:
    """Refuse a page whose declared decompressed size is over `MAX_PAGE_BYTES`, or a file whose
    pages declare over `MAX_DECODED_BYTES` in all, reading only the pages' headers; the values
    the data pages of each (row group, column) declare (pq45 finding 3: not the footer's word;
    a dictionary page's values are not levels: pqrev). ``walked`` gets the decompressed bytes
    of each chunk whose headers were read one after another to its very end (`_small`);
    ``codecs`` the codec of each chunk, row group by row group (`parquet_thrift.checked_footer`)."""
    f: io.BufferedIOBase
    f = io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")  # noqa: SIM115
    declared: dict[tuple[int, int], int] = {}
    whole = len(source) if isinstance(source, bytes) else os.path.getsize(source)
    with f:
        found = checked_footer(f, whole, meta)  # (before pyarrow describes any chunk)
        if codecs is not None:
            codecs[:] = found
        total = 0
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                chunk = group.column(c)
                pos, end = _span(chunk, meta.created_by, whole)
                sizes = 0
                while pos < end:
                    got = read_header(f, pos, end - pos)
                    if got is None:
                        # Not a page header: pyarrow refuses this leaf if it reads it. The
                        # other leaves' pages are still checked: pyarrow reads only the columns
                        # asked for, so junk may stand in a leaf nobody reads.
                        break
                    size, compressed, length, values, data = got
                    # a page nothing decompresses (an uncompressed chunk, a v2 page not marked
                    # compressed) is its stored bytes whatever its header says (rev52 f. 4)
                    size = max(size, compressed)
                    if values >= 0 and size > values * (MAX_VALUE_BYTES + 16) + 4096:
                        raise BombError(
                            f"column {chunk.path_in_schema!r}: a page of {values:,} value(s) "
                            f"decompresses to {size:,} bytes, so one is over {MAX_VALUE_BYTES:,}"
                            " (MAX_VALUE_BYTES): refused as a possible decompression bomb"
                        )
                    if size > MAX_PAGE_BYTES:
                        raise BombError(
                            f"column {chunk.path_in_schema!r}: a page decompresses to {size:,} "
                            f"bytes, over {MAX_PAGE_BYTES:,} (MAX_PAGE_BYTES): refused as a "
                            "possible decompression bomb"
                        )
                    total += size
                    sizes += size if size >= 0 else whole + MAX_DECODED_BYTES  # (not small)
                    declared[g, c] = declared.get((g, c), 0) + max(data, 0)
                    if total > MAX_DECODED_BYTES:
                        raise BombError(
                            f"its pages decompress to over {MAX_DECODED_BYTES:,} bytes "
                            "(MAX_DECODED_BYTES): refused as a possible decompression bomb; "
                            "split larger inputs into several files"
                        )
                    pos += length + max(compressed, 0)
                if walked is not None and pos == end:
                    walked[g, c] = sizes
    return declared


def _span(chunk: pq.ColumnChunkMetaData, created_by: str | None, whole: int) -> tuple[int, int]:
    """Where the pages of ``chunk`` start and end as Arrow reads them: past the bytes its footer
    states by up to `_PARQUET_816` (within the ``whole`` file) when the file says it was
    written by parquet-mr before 1.2.9 (pq45 finding 4: a page there was decoded unchecked)."""
    start = chunk.data_page_offset
    if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
        start = chunk.dictionary_page_offset
    end = start + chunk.total_compressed_size
    if _parquet_816(created_by):
        end += max(0, min(_PARQUET_816, whole - end))
    return start, end


@functools.lru_cache(maxsize=64)
def _parquet_816(created_by: str | None) -> bool:
    """Whether a file ``created_by`` this writer is read as PARQUET-816's (`_span`)."""
    app, _, version = (created_by or "").lower().partition("version")
    got = re.match(r"\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    return app.strip() == "parquet-mr" and (  # (a version Arrow cannot read is its 0.0.0)
        not got or tuple(int(x or 0) for x in got.groups()) < (1, 2, 9))


_PARQUET_816: Final = 100
"""Bytes Arrow reads past a column chunk's stated end in a file of parquet-mr before 1.2.9
(PARQUET-816: that writer left the dictionary page's header out of the chunk's sizes)."""

_WIDTH: Final = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12,
                 "BYTE_ARRAY": 8}
"""Bytes a value under a list takes once decoded, at least (a string: its offset and its index
into a dictionary; a fixed-length array: its length, from the schema)."""
_CODECS: Final = {"ZSTD": "zstd", "SNAPPY": "snappy", "GZIP": "gzip", "BROTLI": "brotli",
                  "LZ4_RAW": "lz4_raw", "LZ4": "lz4_hadoop"}


def _listed_chunks(
    meta: pq.FileMetaData, wanted: set[str], declared: dict[tuple[int, int], int] | None = None
) -> Iterator[tuple[int, int, int, int]]:
    """``(row group, column, values, width)`` of each column chunk of ``wanted`` under a list:
    the values its footer states or its pages do (``declared``, `_check_pages`), the more."""
    schema = meta.schema
    leaves = []
    for j in range(len(schema)):
        leaf = schema.column(j)
        if leaf.max_repetition_level and leaf.path.split(".", 1)[0] in wanted:
            kind = leaf.physical_type
            leaves.append((j, leaf.length if kind == "FIXED_LEN_BYTE_ARRAY" else _WIDTH[kind]))
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for j, width in leaves:
            values = max(group.column(j).num_values, (declared or {}).get((g, j), 0))
            yield g, j, values, max(width, 1)


def _list_rows(source: Source, meta: pq.FileMetaData, wanted: set[str],
               declared: dict[tuple[int, int], int] | None = None,
               codecs: Sequence[int] | None = None) -> dict[int, int]:
    """The most rows a batch of a row group may hold so that its values under lists decode to
    about `CHUNK_BYTES` (its longest row's bytes: each row as long); `BombError` when a row
    holds over `MAX_ROW_BYTES` of them (a leaf's longest row times its width, summed over the
    leaves). Counted only in the column chunks whose footer or pages (``declared``) state more
    than `MAX_ROW_BYTES` of such values in their row group and over `_RATIO` times their
    stored bytes (the values of any other chunk decode to no more than one row may, or to a
    few times the bytes it takes in the file, as any data does; the file's bytes counted once
    among such chunks, as an honest file's are: rev43 finding 1). Their pages are read for
    their repetition levels (each row starts at a level 0), streamed: nothing of their values
    is decoded. The cost falls on constant data (a bomb's shape); rows of one length repeat
    their levels' bytes, counted a stretch at a time (`_period`): about 0.04 CPU-s for a
    million rows of 80 zeros (2.3 run by run); random numbers are not read. ``codecs``: each
    chunk's codec, row group by row group, as the footer gives them (`checked_footer`; read
    here when not given)."""
    chunks: dict[int, list[tuple[int, int, int]]] = {}
    for g, j, values, width in _listed_chunks(meta, wanted, declared):
        chunks.setdefault(g, []).append((j, values, width))
    caps: dict[int, int] = {}
    f: io.BufferedIOBase | None = None
    whole = len(source) if isinstance(source, bytes) else os.path.getsize(source)
    short, room = [0], whole  # (`_SHORT_RUNS`; the bytes spared chunks hold: the file's, once)
    try:
        for g, cols in chunks.items():
            group = meta.row_group(g)
            size = sum(values * w for _j, values, w in cols)
            if size > CHUNK_BYTES:  # (rows of their mean, not the whole group: rec47 1)
                caps[g] = max(1, group.num_rows * CHUNK_BYTES // size)
            if size <= MAX_ROW_BYTES:
                continue
            row = 0
            for j, values, width in cols:
                chunk = group.column(j)
                stored = min(chunk.total_compressed_size, room)  # (not each the file's: rev43 1)
                if values * width <= _RATIO * stored:
                    room -= stored
                    continue
                if f is None:
                    f = io.BytesIO(source) if isinstance(source, bytes) else open(  # noqa: SIM115
                        source, "rb")
                codecs = footer_codecs(f, whole) if codecs is None else codecs
                row += _longest_row(f, chunk, meta.schema.column(j).max_repetition_level,
                                    (MAX_ROW_BYTES - row) // width + 1,
                                    _span(chunk, meta.created_by, whole), short,
                                    _codec(codecs, meta, g, j)) * width
                if row > MAX_ROW_BYTES:
                    raise BombError(
                        f"column {chunk.path_in_schema!r}: a row of row group {g} holds values "
                        f"under lists that decode to over {MAX_ROW_BYTES:,} bytes "
                        "(MAX_ROW_BYTES): refused as a possible decompression bomb"
                    )
            if row:
                caps[g] = min(caps.get(g, group.num_rows), max(1, CHUNK_BYTES // row))
    finally:
        if f is not None:
            f.close()
    return caps


def _codec(codecs: Sequence[int], meta: pq.FileMetaData, g: int, j: int) -> str:
    """The name of the codec of column ``j`` of row group ``g`` by the footer's ``codecs``
    (pyarrow's ``compression`` of one it does not know ends the process: rev52 finding 6);
    ``UNKNOWN`` when it is none Parquet names, or the footer did not give one a chunk."""
    at = sum(meta.row_group(i).num_columns for i in range(g)) + j
    if len(codecs) != sum(meta.row_group(i).num_columns for i in range(meta.num_row_groups)):
        return "UNKNOWN"
    return CODECS[codecs[at]] if 0 <= codecs[at] < len(CODECS) else "UNKNOWN"


_RATIO: Final = 8
"""Most bytes a value under a list may decode to per byte it takes in the file, in a row group
whose lists are not counted row by row (`_list_rows`): zstd takes random numbers to about their
size, images to a half or a third; a row of 40M zeros takes 874 bytes (rev41 finding 3)."""


def _longest_row(f: io.BufferedIOBase, chunk: pq.ColumnChunkMetaData, max_level: int,
                 limit: int, span: tuple[int, int] | None = None,
                 short: list[int] | None = None, compression: str | None = None) -> int:
    """The most levels (values, nulls, empty lists) a row of ``chunk`` holds, from its pages'
    repetition levels (``span``: where they are, `_span`; default the footer's bytes);
    ``limit`` as soon as one holds that many. Pages are read as Arrow's page reader reads them:
    until they hold the footer's values (a footer that understates them has its first page
    read whole; past an old parquet-mr chunk, another's pages are not taken for its own)."""
    bits = int(max_level).bit_length()
    compression = chunk.compression if compression is None else compression  # (`_codec`)
    codec = _CODECS.get(compression)
    if compression != "UNCOMPRESSED" and codec is None:
        raise BombError(f"column {chunk.path_in_schema!r}: its lists cannot be counted before "
                        f"they are decoded ({compression} pages): refused as a possible "
                        "decompression bomb; write it with zstd or snappy")
    pos, end = span or _span(chunk, None, 0)
    rows = _Rows(limit, short)
    seen = 0  # (Arrow reads pages while their values are fewer than the footer's)
    while pos < end and rows.longest < limit and seen < max(chunk.num_values, 1):
        f.seek(pos)
        head = f.read(min(HEADER_READ, end - pos))
        got = dict.fromkeys(_LEVELS, -1)
        try:
            length = skip_struct(head, 0, got)
        except (IndexError, ValueError, RecursionError):
            got = dict.fromkeys(_LEVELS, -1)
            f.seek(pos)
            head = f.read(min(MAX_HEADER, end - pos))
            try:
                length = skip_struct(head, 0, got)
            except (IndexError, ValueError, RecursionError):
                break  # (not a page header: pyarrow refuses the column)
        size, compressed, kind = got[2,], got[3,], got[1,]
        if size < 0 or compressed < 0:  # no header to `_check_pages` either, nor what follows
            break  # (rev52 finding 5: Arrow asked to decompress into -5 bytes, exit 4)
        f.seek(pos + length)
        pos += length + compressed
        if kind == 0:  # DATA_PAGE: [length][repetition levels][definition levels][values]
            values, coding = got[5, 1], got[5, 4]
            body = f.read(compressed)
            try:
                data = _decompressed(body, codec, size)
            except (OSError, pa.ArrowException):
                break  # (not its codec's data: pyarrow refuses the column)
            if coding != 3 or len(data) < 4:
                raise BombError(f"column {chunk.path_in_schema!r}: repetition levels coded "
                                f"{coding}, not RLE: its lists cannot be counted before they "
                                "are decoded: refused as a possible decompression bomb")
            (n,) = struct.unpack_from("<I", data, 0)
            levels = data[4:4 + n]
        elif kind == 3:  # DATA_PAGE_V2: the repetition levels first, never compressed
            if not 0 <= got[8, 6] <= compressed:  # (not within its page: Arrow refuses it; a
                break  # read of the 2^40 bytes stated was a MemoryError, exit 3: rev52 f. 8)
            values, levels = got[8, 1], f.read(got[8, 6])
        else:
            continue  # a dictionary or index page
        seen += max(values, 0)
        try:
            _levels(rows, levels, bits, max(values, 0))
        except _ShortRuns:
            raise BombError(
                f"column {chunk.path_in_schema!r}: its repetition levels come in over "
                f"{_SHORT_RUNS:,} runs of under 8 levels (no common writer makes them): refused "
                "as a possible decompression bomb; write the file again with pyarrow"
            ) from None
        except (IndexError, ValueError):
            break  # (levels cut short: pyarrow refuses the column, past the rows counted)
    return min(rows.done(), limit)


def _decompressed(body: bytes, codec: str | None, size: int) -> bytes:
    """A page's ``body`` decompressed to its ``size`` bytes. Parquet's LZ4 is Hadoop's framing
    (big-endian sizes before each raw block), or a raw block from older writers, which Arrow
    reads either way."""
    if codec is None:
        return body
    if codec != "lz4_hadoop":
        return bytes(pa.Codec(codec).decompress(body, decompressed_size=size, asbytes=True))
    raw, out, pos = pa.Codec("lz4_raw"), bytearray(), 0
    try:
        while pos < len(body) and len(out) < size:
            whole, part = struct.unpack_from(">II", body, pos)
            out += raw.decompress(body[pos + 8:pos + 8 + part], decompressed_size=whole,
                                  asbytes=True)
            pos += 8 + part
        if len(out) == size and pos == len(body):
            return bytes(out)
    except (struct.error, OSError, pa.ArrowException):
        pass
    return bytes(raw.decompress(body, decompressed_size=size, asbytes=True))


_LEVELS: Final = ((1,), (2,), (3,), (5, 1), (5, 4), (8, 1), (8, 6))
"""The PageHeader's type, sizes, the num_values and repetition_level_encoding of its
data_page_header, the num_values and repetition_levels_byte_length of its data_page_header_v2."""


class _Rows:
    """The longest row seen in a stream of repetition levels, given segment by segment as the
    positions where rows start (a level 0)."""

    def __init__(self, limit: int, short: list[int] | None = None) -> None:
        self.limit, self.longest, self.current = limit, 0, 0
        self.short = [0] if short is None else short  # (`_SHORT_RUNS`: shared by a file's)

    def segment(self, lo: int, hi: int, starts: npt.NDArray[np.int64],
                ones: npt.NDArray[np.int64]) -> None:
        """Levels ``lo`` to ``hi``: rows start at ``starts`` (in order), and each start in
        ``ones`` is followed by rows of one level up to the next start (a run of zeros, given
        by its ends)."""
        if not len(starts):
            self.current += hi - lo
        else:
            gaps = np.diff(starts)
            if len(ones):
                gaps[np.searchsorted(starts, ones)] = 1
            self.longest = max(self.longest, self.current + int(starts[0]) - lo,
                               int(gaps.max(initial=1)))
            self.current = hi - int(starts[-1])
        self.longest = max(self.longest, min(self.current, self.limit))

    def done(self) -> int:
        return max(self.longest, self.current)


def _levels(rows: _Rows, levels: bytes, bits: int, n: int) -> None:
    """Feed ``rows`` the first ``n`` levels of an RLE / bit-packed hybrid run of ``bits``-bit
    levels: the run headers read here, the bit-packed levels unpacked by numpy, about 2**16
    runs or `_PACKED` packed bytes at a time (a bit-packed run cut in pieces: its levels take
    eight bytes each once unpacked); a stretch of runs whose bytes come again and again (rows
    of one length) read once and counted for all its repeats (`_period`, `_repeat`)."""
    width, weights = (bits + 7) // 8, 1 << np.arange(bits, dtype=np.int64)
    at = pos = lo = weight = 0
    size = len(levels)
    starts: list[int] = []  # where a run of zeros starts (and, if longer than one, ends)
    ones: list[int] = []  # the runs of zeros longer than one, by their start
    packed: list[tuple[int, int, int]] = []  # bit-packed pieces: (their bytes at, groups, level)

    def flush() -> None:
        nonlocal lo, weight, starts, ones, packed
        _flush(rows, levels, bits, weights, lo, min(at, n), starts, ones, packed)
        lo, weight, starts, ones, packed = min(at, n), 0, [], [], []

    # Runs read one by one, when to look for a repeating stretch next, and the runs that may
    # be read looking (each run read or counted in bulk adds one: looking at most doubles the
    # cost of levels that never repeat, however they are made).
    runs = retry = 0
    gap, budget = _RETRY, _STRETCH_RUNS  # (budget: as of run ``runs``)
    short = False
    try:  # (levels cut short: pyarrow decodes the rows before the cut, so they count: pq45 1)
        while at < n and pos < size and rows.longest < rows.limit:
            if runs >= retry:  # rows of one length: in bulk
                got = _period(levels, pos, bits, width, weights)
                reps = _repeats(levels, pos, got[0], (n - at) // got[1]) if got else 0
                budget -= _STRETCH_RUNS
                if got and reps > 1:
                    flush()
                    _repeat(rows, at, got[1], reps, got[2], got[3])
                    at, pos, gap, budget = at + reps * got[1], pos + reps * got[0], _RETRY, (
                        budget + reps * got[4])
                    lo, retry = at, runs + max(0, _STRETCH_RUNS - budget)
                    budget += retry - runs
                    continue
                retry = runs + max(gap, _STRETCH_RUNS - budget)
                budget, gap = budget + retry - runs, min(gap * 2, 1 << 16)
            runs += 1
            head = levels[pos]
            pos += 1
            if head & 0x80:
                head, pos = varint(levels, pos - 1)
            if not head >> 1:  # a run of no levels: their end, as Arrow's decoder takes it
                break
            if short:  # the run before held under 8 levels and was not the page's last
                rows.short[0] += 1
                if rows.short[0] > _SHORT_RUNS:
                    raise _ShortRuns
            short = not head & 1 and head >> 1 < 8
            if head & 1:  # bit-packed: groups of 8 levels, ``bits`` bytes a group
                groups = min(head >> 1, (size - pos) // max(bits, 1))
                piece = max(1, _PACKED // max(bits, 1))
                for first in range(0, groups, piece):
                    part = min(piece, groups - first)
                    packed.append((pos + first * bits, part, at))
                    at += part * 8
                    weight += part * bits
                    if weight >= _PACKED or at >= n:
                        flush()
                    if at >= n:
                        break
                pos += groups * bits
            else:  # a run of one level
                count = min(head >> 1, n - at)
                value = levels[pos] if width == 1 else int.from_bytes(levels[pos:pos + width],
                                                                       "little")
                pos += width
                if value == 0 and count:
                    _zero_run(starts, ones, at, count)
                at += count
            if len(starts) + len(packed) > 1 << 16:
                flush()
    finally:
        flush()


_SHORT_RUNS: Final = 1 << 20
"""Most runs of fewer than 8 levels read one by one in a file's level scan, but for each
page's last (rev42 finding 5: about a CPU-second). Arrow's, parquet-mr's and Rust's encoders
write a run of one level only when 8 or more come in a row (others are bit-packed, 8 levels a
group), so their pages hold none but the last; runs of one level each walk the scan through a
page's bytes two at a time (a 16 MiB page of them, 1,695 bytes of zstd: 4.5 CPU-s)."""


class _ShortRuns(Exception):
    """Over `_SHORT_RUNS` runs of fewer than 8 levels (a `BombError` in `_longest_row`)."""


_RETRY: Final = 16
"""Runs read one by one before a repeating stretch is looked for again where none was found
(each miss doubles it, to 65,536 runs; one found resets it)."""
_WINDOW: Final = 16
_MAX_PERIOD: Final = 1 << 10
"""Longest stretch of runs looked for as repeating, in bytes (rows of one length: their
bit-packed groups come back in line after a few rows)."""
_STRETCH_RUNS: Final = 64
"""Most runs in a repeating stretch (rows of one length: two or three runs a row, eight rows
at most before the bit-packed groups come back in line, at one bit a level)."""


def _period(levels: bytes, pos: int, bits: int, width: int, weights: npt.NDArray[np.int64]
            ) -> tuple[int, int, list[int], list[int], int] | None:
    """``(bytes, levels, starts, ones, runs)`` of the runs from ``pos`` up to where its next
    `_WINDOW` bytes come again (at most `_MAX_PERIOD` bytes on), when that stretch is whole
    runs (at most `_STRETCH_RUNS`) of at least one level: the rows' starts in it and its runs
    of zeros longer than one (as `_levels` gathers them, counted from 0). None when there is no
    such stretch."""
    window = levels[pos:pos + _WINDOW]
    end = levels.find(window, pos + 1, pos + _MAX_PERIOD + _WINDOW) if len(
        window) == _WINDOW else -1
    first, at, runs = pos, 0, 0
    starts: list[int] = []
    ones: list[int] = []
    while 0 <= pos < end and runs < _STRETCH_RUNS:
        runs += 1
        head = levels[pos]
        pos += 1
        if head & 0x80:
            try:  # (a header the levels read one by one may never reach: not refused here)
                head, pos = varint(levels, pos - 1)
            except (IndexError, ValueError):
                return None
        if not head >> 1:  # (a run of no levels ends them: `_levels` reads it one by one)
            return None
        if head & 1:  # bit-packed: its groups whole, inside the stretch
            last = pos + (head >> 1) * bits
            if last > end:
                return None
            got = np.unpackbits(np.frombuffer(levels[pos:last], np.uint8),
                                bitorder="little").reshape(-1, bits) @ weights
            starts += (np.flatnonzero(got == 0) + at).tolist()
            at, pos = at + (head >> 1) * 8, last
        else:
            count, value = head >> 1, int.from_bytes(levels[pos:pos + width], "little")
            pos += width
            if value == 0 and count:
                _zero_run(starts, ones, at, count)
            at += count
    return (end - first, at, starts, ones, runs) if pos == end and at else None


def _zero_run(starts: list[int], ones: list[int], at: int, count: int) -> None:
    """Note a run of ``count`` zero levels (row starts) at ``at`` as `_levels` gathers them:
    its start, and for a run longer than one its end too, and it among ``ones``."""
    starts.append(at)
    if count > 1:
        ones.append(at)
        starts.append(at + count - 1)


def _repeats(levels: bytes, pos: int, span: int, most: int) -> int:
    """How many times (up to ``most``) the ``span`` bytes at ``pos`` come one after another
    there, compared a growing number at a time (no more than twice the bytes that repeat)."""
    first = np.frombuffer(levels, np.uint8, count=span, offset=pos)
    done, step = 0, 8
    while done < most:
        k = min(step, most - done, (len(levels) - pos) // span - done)
        if k <= 0:
            break
        block = np.frombuffer(levels, np.uint8, count=k * span, offset=pos + done * span)
        same = (block.reshape(k, span) == first).all(axis=1)
        if not same.all():
            return done + int(np.argmin(same))
        done, step = done + k, step * 4
    return done


def _repeat(rows: _Rows, at: int, count: int, reps: int, starts: list[int], ones: list[int]
            ) -> None:
    """Feed ``rows`` ``reps`` (2 or more) times the ``count`` levels of a stretch from `_period`,
    from level ``at``: twice as levels (the rows inside it and across its end), then the same
    rows again change nothing but where the current row starts (or, without a start, its
    length)."""
    here = np.array(starts, np.int64) + at
    there = np.array(ones, np.int64) + at
    rows.segment(at, at + 2 * count, np.concatenate((here, here + count)),
                 np.concatenate((there, there + count)))
    if not starts:
        rows.current += (reps - 2) * count
        rows.longest = max(rows.longest, min(rows.current, rows.limit))


_PACKED: Final = 1 << 14
"""Bit-packed bytes of repetition levels unpacked at once (at one bit a level, 131,072 levels:
about 3 MB of numpy arrays)."""


def _flush(rows: _Rows, levels: bytes, bits: int, weights: npt.NDArray[np.int64], lo: int,
           hi: int, starts: list[int], ones: list[int], packed: list[tuple[int, int, int]]
           ) -> None:
    found = [np.array(starts, np.int64)]
    if packed:
        raw = np.frombuffer(b"".join(levels[p:p + g * bits] for p, g, _at in packed), np.uint8)
        got = np.unpackbits(raw, bitorder="little").reshape(-1, bits) @ weights
        first = np.repeat(np.array([a for _p, _g, a in packed], np.int64),
                          [g * 8 for _p, g, _a in packed])
        base = np.repeat(np.cumsum([0] + [g * 8 for _p, g, _a in packed[:-1]]),
                         [g * 8 for _p, g, _a in packed])
        where = np.flatnonzero(got == 0)
        found.append(first[where] + where - base[where])
    every = np.concatenate(found)
    every = np.sort(every[every < hi])
    rows.segment(lo, hi, every, np.array(ones, np.int64))
