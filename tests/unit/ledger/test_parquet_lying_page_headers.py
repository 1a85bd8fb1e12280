"""rev52 findings 4 and 5: page headers that lie. One that understates its page's decompressed
size, where nothing decompresses it (an uncompressed chunk, a v2 page marked not compressed),
bounds nothing: Arrow takes the page's stored bytes whatever the header says, and the gate's
small path (spd52) took such a file for small and read it as it is. One stating a negative size
made the count of a list column's rows crash. docs/SECURITY.md, "Review of 2026-12-07, fortieth
round (rev52)"."""

from __future__ import annotations

import io

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
