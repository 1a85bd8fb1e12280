"""rev54: page headers and footers read as Arrow's Thrift reads them (docs/SECURITY.md,
"Review of 2026-12-07, forty-first round (rev54)"). A page header `parquet_thrift` could not
read but Arrow could left its chunk's pages unchecked (`_check_pages`: "pyarrow refuses this
leaf if it reads it"): a decompression bomb past `MAX_PAGE_BYTES`; a footer field whose id
Arrow reads as another (an i16) hid a size statistic pyarrow aborts on."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajledger.ledger.rollouts import parquet_read, parquet_thrift
from trajledger.ledger.rollouts.parquet_read import BombError, read_parquet
from trajledger.verify.errors import FormatError


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


def _with_stats(probe: bytes) -> bytes:
    """A file of one compressed page (about 300 kB decompressed) whose header's statistics
    struct holds ``probe`` then a binary field 100 of filler (the header as long: no offset
    moves); ``probe`` b"!" instead makes the header's last STOP byte 0x10."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"s": ["a" * 300] * 1_000 + ["b" * 300]}), sink,
                   compression="zstd", use_dictionary=False)
    data = sink.getvalue()
    pos = pq.read_metadata(pa.BufferReader(data)).row_group(0).column(0).data_page_offset
    length = parquet_thrift.page_header(data[pos:pos + 8192])[2]
    header = data[pos:pos + length]
    if probe == b"!":
        return data[:pos + length - 1] + b"\x10" + data[pos + length:]
    start = header.index(b"\x1c") + 1  # (data_page_header's field 5, its statistics)
    end = parquet_thrift.skip_struct(header, start) - 1
    left = end - start - len(probe) - 3
    filler = b"\x08\xc8\x01" + _varint(left - 2) + b"z" * (left - 2)  # (a 2-byte length)
    new = header[:start] + probe + filler + header[end:]
    assert len(new) == length and len(_varint(left - 2)) == 2
    return data[:pos] + new + data[pos + length:]


@pytest.mark.parametrize("probe", [
    b"",  # as written
    b"!",  # the header's STOP written 0x10 (a field type 0 ends a struct)
    b"\x1d" + bytes(16),  # a uuid field (compact type 13)
    b"\x19\x3d" + bytes(48),  # a list of three uuids
    b"\x18" + _varint((1 << 32) + 3) + b"abc",  # a binary of length 2**32 + 3: 3 bytes
    b"\x19\xf5" + _varint((1 << 32) + 1) + b"\x02",  # a list of 2**32 + 1 i32s: one
    b"\x1c" * 40 + b"\x00" * 40,  # structs nested 40 deep (Arrow reads 60)
], ids=["plain", "stop", "uuid", "uuids", "binary", "list", "deep"])  # fmt: skip
def test_a_page_header_arrow_reads_is_checked(probe: bytes,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``probe`` Arrow reads (a process reading them all was run: each file read whole);
    the header was refused here (None), so the page, over the limit, went unchecked."""
    data = _with_stats(probe)
    monkeypatch.setattr(parquet_read, "MAX_PAGE_BYTES", 10_000)
    with pytest.raises(BombError, match="MAX_PAGE_BYTES"):
        read_parquet(data)


def test_a_footer_field_id_arrow_reads_as_another_is_read_so() -> None:
    """A size statistics' definition level histogram of one entry (its leaf has two levels:
    pyarrow's ``column(0)`` aborts the process) given under field id 65,539, which Arrow
    reads as an i16: field 3. It was skipped here as an unknown field."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"x": pa.array([1, None, 3], pa.int64())}), sink,
                   compression="none")
    data = sink.getvalue()
    n = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - n:-8]
    assert footer.count(b"\x19\x26\x02\x04\x00") == 1  # (field 3: a list of two i64)
    footer = footer.replace(b"\x19\x26\x02\x04\x00",
                            b"\x09" + _varint(2 * 65539) + b"\x16\x02\x00")
    data = data[:-8 - n] + footer + len(footer).to_bytes(4, "little") + b"PAR1"
    pq.read_metadata(pa.BufferReader(data))  # (Arrow parses it)
    assert parquet_thrift.footer_chunks(footer) == [[(0, 0, 1, False)]]
    with pytest.raises(FormatError, match="definition level histogram has 1 entries, want 2"):
        read_parquet(data)
