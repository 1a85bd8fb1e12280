"""rev52 findings 4 to 8: page headers, a footer and dictionary indices that lie. A page header
that understates its page's decompressed size, where nothing decompresses it (an uncompressed
chunk, a v2 page marked not compressed), bounds nothing: Arrow takes the page's stored bytes
whatever the header says, and the gate's small path (spd52) took such a file for small and read
it as it is. One stating a negative size made the count of a list column's rows crash; a
footer's codec pyarrow does not know, its process; an index past its dictionary, the count of
a row's strings; v2 levels longer than their page, its memory. docs/SECURITY.md, "Review of
2026-12-07, fortieth round (rev52)"."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajledger.ledger.rollouts import parquet_read, parquet_thrift
from trajledger.ledger.rollouts.parquet_read import BombError, read_parquet


def _padded(n: int, width: int) -> bytes:
    """``n`` as a varint of ``width`` bytes (continuation bytes of zeros: Thrift reads them)."""
    out = []
    for i in range(width):
        out.append(n & 0x7F | (0x80 if i < width - 1 else 0))
        n >>= 7
    assert n == 0
    return bytes(out)


def _understated(data: bytes, column: int = 0) -> bytes:
    """``data`` with every page header of the first row group's ``column`` stating its page
    decompresses to 10 bytes (the varint rewritten in its own width)."""
    out = bytearray(data)
    chunk = pq.read_metadata(pa.BufferReader(data)).row_group(0).column(column)
    pos = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    end = pos + chunk.total_compressed_size
    while pos < end:
        _size, compressed, length, _v, _d = parquet_thrift.page_header(bytes(out[pos:end]))
        assert out[pos] == 0x15  # field 1 (type), an i32, then field 2 (uncompressed size)
        _type, at = parquet_thrift.varint(bytes(out), pos + 1)
        assert out[at] == 0x15
        _old, after = parquet_thrift.varint(bytes(out), at + 1)
        out[at + 1 : after] = _padded(10 << 1, after - at - 1)
        pos += length + compressed
    return bytes(out)


def _outcome(data: bytes, monkeypatch: pytest.MonkeyPatch, limit: str, cap: int,
             slow: bool) -> str:
    with monkeypatch.context() as m:
        m.setattr(parquet_read, limit, cap)
        if slow:  # every file read as before spd52: its strings as dictionaries, counted
            m.setattr(parquet_read, "_small", lambda *_a: False)
        try:
            return f"read {read_parquet(data).num_rows}"
        except BombError:
            return "refused"


def test_an_uncompressed_dictionary_understated_is_no_small_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bomb: one 10,000-byte dictionary entry, 1,000 rows pointing at it, the chunk stored
    uncompressed and its dictionary page's header saying 10 bytes. 10 kB of file decoded to
    10 MB by the small path (at the real limits: a 1 MiB entry, 20,000 rows, 20 GiB from a
    1 MiB file), where the rows counted refuse it. Expected: refused as before spd52."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"text": ["y" * 10_000] * 1_000}), sink, compression="NONE")
    data = _understated(sink.getvalue())
    assert len(data) < 11_000
    for slow in (True, False):
        assert _outcome(data, monkeypatch, "MAX_TABLE_BYTES", 1 << 20, slow) == "refused", slow


@pytest.mark.parametrize("options", [
    {"compression": "NONE", "use_dictionary": False},
    {"compression": "NONE"},
    {"compression": "zstd", "data_page_version": "2.0", "use_dictionary": False},
])  # fmt: skip
@pytest.mark.parametrize("limit", ["MAX_VALUE_BYTES", "MAX_ROW_BYTES", "MAX_TABLE_BYTES",
                                   "CHUNK_BYTES"])
def test_a_page_understated_is_decided_as_the_dictionaries_do(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, object], limit: str
) -> None:
    """A value of 5,000 bytes in a page whose header says 10: read, or refused, as when every
    file was read as dictionaries (the small path read it under a limit of 1,000). A page
    compressed, whose header understates it, is not readable (Arrow decompresses into the
    stated size): no decision of the small path."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"text": ["x" * 5_000, "y"]}), sink, **options)  # type: ignore[arg-type]
    data = _understated(sink.getvalue())
    for cap in (1_000, 100_000):
        try:
            slow = _outcome(data, monkeypatch, limit, cap, True)
        except (OSError, pa.ArrowException):
            slow = "unreadable"
        try:
            small = _outcome(data, monkeypatch, limit, cap, False)
        except (OSError, pa.ArrowException):
            small = "unreadable"
        assert small == slow, (cap, small, slow)


def test_a_negative_page_size_under_counted_lists_is_not_readable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """finding 5: a list column whose rows are counted (`_list_rows`: its values over
    `MAX_ROW_BYTES` and eight times its stored bytes), its data page's header stating a
    negative decompressed size: `_check_pages` stops at it (no header), but `_longest_row` went
    on and asked Arrow to decompress into -5 bytes: ``SystemError`` (the command's ``BUG``,
    exit 4), and past it read pages `_check_pages` never bounded. Expected: not a page header,
    so not readable Parquet, as Arrow says."""
    monkeypatch.setattr(parquet_read, "MAX_ROW_BYTES", 1 << 10)
    sink = io.BytesIO()
    pq.write_table(pa.table({"obs": pa.array([[0.0] * 100] * 100, pa.list_(pa.float64()))}),
                   sink, compression="zstd", use_dictionary=False)
    out = bytearray(sink.getvalue())
    pos = pq.read_metadata(pa.BufferReader(bytes(out))).row_group(0).column(0).data_page_offset
    _type, at = parquet_thrift.varint(bytes(out), pos + 1)
    _old, after = parquet_thrift.varint(bytes(out), at + 1)
    out[at + 1 : after] = _padded(9, after - at - 1)  # zigzag 9: -5
    with pytest.raises((OSError, pa.ArrowException)):
        read_parquet(bytes(out))


def test_a_codec_pyarrow_does_not_know_under_counted_lists_is_refused_not_an_abort(
    tmp_path: Path,
) -> None:
    """finding 6: a footer naming codec 30 for a list column whose rows are counted: pyarrow's
    ``ColumnChunkMetaData.compression`` of it throws a C++ exception through Cython, and the
    process ended at once (``terminate``, SIGABRT: no line, no exit code of the design). The
    codecs are now read from the footer's bytes (`parquet_thrift.chunk_codecs`). Expected: a
    refusal (the lists cannot be counted), the process alive."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"obs": pa.array([[0.0] * 100] * 100, pa.list_(pa.float64()))}),
                   sink, compression="zstd", use_dictionary=False)
    data = bytearray(sink.getvalue())
    start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    footer = bytes(data[start:-8])
    assert parquet_thrift.chunk_codecs(footer) == [6]  # ZSTD
    at = max(i for i in range(start, len(data) - 8) if data[i] == 12 and data[i - 1] & 0xF == 5)
    data[at] = 30 << 1  # (the codec: zigzag 30, one byte as 6 was)
    assert parquet_thrift.chunk_codecs(bytes(data[start:-8])) == [30]
    (tmp_path / "codec30.parquet").write_bytes(bytes(data))
    code = ("import sys\nfrom trajledger.ledger.rollouts import parquet_read\n"
            "parquet_read.MAX_ROW_BYTES = 1 << 10\n"
            "try:\n    parquet_read.read_parquet(sys.argv[1])\n"
            "except parquet_read.BombError as e:\n    print('refused:', e)\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "codec30.parquet")],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, (r.returncode, r.stderr[-300:])
    assert r.stdout.startswith("refused: column 'obs.list.element': its lists cannot be "
                               "counted before they are decoded (UNKNOWN pages)"), r.stdout


@pytest.mark.parametrize("options", [
    {"compression": "zstd"}, {"compression": "snappy", "row_group_size": 3},
    {"compression": {"a": "gzip", "b": "NONE"}, "row_group_size": 4}, {"compression": "brotli"},
    {"compression": "lz4"},
])  # fmt: skip
def test_the_footers_codecs_are_pyarrows(options: dict[str, object]) -> None:
    """`chunk_codecs` reads what pyarrow reads: each chunk's codec, in order."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"a": list(range(10)), "b": [[1.0]] * 10}), sink,
                   **options)  # type: ignore[arg-type]
    data = sink.getvalue()
    meta = pq.read_metadata(pa.BufferReader(data))
    got = parquet_thrift.chunk_codecs(data[-8 - int.from_bytes(data[-8:-4], "little"):-8])
    names = {"LZ4": "LZ4_RAW"}  # (pyarrow names Parquet's LZ4_RAW as Arrow's LZ4)
    assert [parquet_thrift.CODECS[c] for c in got] == [
        names.get(n, n) for g in range(meta.num_row_groups)
        for n in (meta.row_group(g).column(j).compression for j in range(meta.num_columns))]


def test_a_dictionary_index_past_its_dictionary_is_not_readable() -> None:
    """finding 7: rows read as dictionaries to be counted (`_checked_rows`) whose indices point
    past their dictionary (Arrow reads a file's indices unchecked there: found by a fuzz of
    file bytes) raised ``IndexError``, which the gate's ``not readable Parquet`` does not catch:
    ``BUG``, exit 4. Expected: not readable (an ``ArrowInvalid``)."""
    arr = pa.DictionaryArray.from_arrays(pa.array([0, 139], pa.int32()), pa.array(["x"]),
                                         safe=False)
    with pytest.raises(pa.ArrowInvalid, match="a dictionary index past its dictionary of 1"):
        parquet_read._checked_rows(pa.RecordBatch.from_arrays([arr], ["text"]))
    ok = pa.DictionaryArray.from_arrays(pa.array([0, None, 1], pa.int32()), pa.array(["x", "yy"]))
    assert list(parquet_read._checked_rows(pa.RecordBatch.from_arrays([ok], ["text"]))) == [
        1, 0, 2]


def test_v2_repetition_levels_longer_than_their_page_are_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """finding 8: a v2 data page of a list column whose rows are counted, its header stating
    2^40 bytes of repetition levels (its varint widened, the footer moved with the file):
    `_longest_row` asked the file for them, a ``MemoryError`` (``out of memory``, exit 3) on a
    file read by path. Expected: not a page Arrow reads (levels past their page), so not
    readable Parquet, as Arrow says."""
    monkeypatch.setattr(parquet_read, "MAX_ROW_BYTES", 1 << 10)
    sink = io.BytesIO()
    pq.write_table(pa.table({"obs": pa.array([[0.0] * 100] * 100, pa.list_(pa.float64()))}),
                   sink, compression="zstd", use_dictionary=False, data_page_version="2.0")
    data = sink.getvalue()
    pos = pq.read_metadata(pa.BufferReader(data)).row_group(0).column(0).data_page_offset
    at = _field(data, _field(data, pos, 8), 6)  # DataPageHeaderV2.repetition_levels_byte_length
    _old, after = parquet_thrift.varint(data, at)
    wide = (1 << 40) << 1  # (zigzag)
    huge = bytes([*(wide >> 7 * i & 0x7F | 0x80 for i in range(5)), wide >> 35])
    (path := tmp_path / "levels.parquet").write_bytes(data[:at] + huge + data[after:])
    assert parquet_thrift.page_header(path.read_bytes()[pos:pos + 4096])[3] == 10_000
    with pytest.raises((OSError, pa.ArrowException)):
        read_parquet(path)


def _field(data: bytes, pos: int, wanted: int) -> int:
    """Where the value of field ``wanted`` of the Thrift compact struct at ``pos`` starts."""
    field = 0
    while data[pos]:
        kind, field = data[pos] & 0x0F, field + (data[pos] >> 4)
        if field == wanted:
            return pos + 1
        pos = parquet_thrift.skip(data, pos + 1, kind)
    raise AssertionError(f"no field {wanted}")
