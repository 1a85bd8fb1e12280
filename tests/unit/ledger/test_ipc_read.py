"""Arrow IPC inputs checked for decompression bombs (``ledger.rollouts.ipc_read``)."""

from __future__ import annotations

import contextlib
import io
import struct

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.ledger.rollouts import ipc_read
from trajledger.ledger.rollouts.ipc_read import check_ipc
from trajledger.ledger.rollouts.parquet_read import BombError


def _ipc(table: pa.Table, compression: str | None, file: bool = True, rows: int = 300) -> bytes:
    sink = io.BytesIO()
    options = ipc.IpcWriteOptions(compression=compression)
    new = ipc.new_file if file else ipc.new_stream
    with new(sink, table.schema, options=options) as w:
        w.write_table(table, max_chunksize=rows)
    return sink.getvalue()


def _buffers(data: bytes) -> list[list[int]]:
    """Each message's buffers as declared: compressed, their first eight bytes (a -1 there:
    the buffer's own length less those eight); uncompressed, their lengths."""
    view, out = memoryview(data), []
    pos = 8 if data[:6] == b"ARROW1" else 0
    while pos + 8 <= len(view):
        size = struct.unpack_from("<i", view, pos + 4)[0]
        pos += 8
        if size <= 0:
            break
        meta = view[pos : pos + size]
        body_length, compressed = ipc_read._message(meta)
        body = pos + size
        if compressed:
            out.append([ipc_read._declared(view, body, body_length, [b]) for b in compressed])
        else:
            msg = ipc.read_message(pa.py_buffer(data[pos - 8 : body + body_length]))
            if msg.type in ("record batch", "dictionary"):
                batch_lengths = _lengths_of(msg)
                out.append(batch_lengths)
        pos = body + body_length
    return out


def _lengths_of(msg: ipc.Message) -> list[int]:
    """The buffer lengths of an uncompressed message, from the same flatbuffer walk with the
    compression check left out (the known answer the compressed declarations must give)."""
    b = memoryview(msg.metadata.to_pybytes())
    root = ipc_read._u32(b, 0)
    header = ipc_read._field_table(b, root, 2)
    assert header is not None
    if msg.type == "dictionary":
        header = ipc_read._field_table(b, header, 1)
        assert header is not None
    vector = ipc_read._field_table(b, header, 2)
    assert vector is not None
    return [struct.unpack_from("<qq", b, vector + 4 + 16 * i)[1]
            for i in range(ipc_read._u32(b, vector))]


TABLE = pa.table({
    "s": [f"text {i}" * (i % 7) for i in range(1000)],
    "n": np.arange(1000),
    "d": pa.array(["a" * 500, "b" * 900] * 500).dictionary_encode(),
    "l": pa.array([[float(i)] * (i % 3) for i in range(1000)], pa.list_(pa.float32())),
})  # fmt: skip


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
@pytest.mark.parametrize("file", [True, False], ids=["file", "stream"])
def test_declared_sizes_are_the_uncompressed_buffers(compression: str, file: bool) -> None:
    """Known answer: the sizes compressed buffers declare are the lengths of the buffers
    pyarrow writes for the same batches uncompressed (padding aside: it pads to 8 bytes)."""
    declared = _buffers(_ipc(TABLE, compression, file))
    plain = _buffers(_ipc(TABLE, None, file))
    assert len(declared) == len(plain) > 3
    for got, want in zip(declared, plain, strict=True):
        assert [(g + 7) // 8 * 8 for g in got] == [(w + 7) // 8 * 8 for w in want]
    check_ipc(_ipc(TABLE, compression, file), "x")


def test_a_batch_declaring_a_thousandfold_more_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ipc_read, "MAX_PAGE_BYTES", 1 << 20)
    bomb = pa.table({"info": pa.array(["a" * (1 << 20)] * 8)})
    for file in (True, False):
        with pytest.raises(BombError, match=r"x: a record batch of [\d,]+ compressed bytes "
                                            r"declares 8,388,6\d\d decompressed"):
            check_ipc(_ipc(bomb, "zstd", file, rows=8), "x")
        check_ipc(_ipc(bomb, None, file, rows=8), "x")  # uncompressed: mapped as it is
    # A dictionary batch declares its dictionary the same way (LZ4 compresses at most about
    # 255 to 1: never a thousandfold).
    encoded = pa.table({"info": pa.array(["a" * (2 << 20)]).dictionary_encode()})
    with pytest.raises(BombError, match="decompression bomb"):
        check_ipc(_ipc(encoded, "zstd"), "x")
    check_ipc(_ipc(encoded, "lz4"), "x")
    monkeypatch.setattr(ipc_read, "MAX_DECODED_BYTES", 1 << 20)
    with pytest.raises(BombError, match="MAX_DECODED_BYTES"):
        check_ipc(_ipc(pa.table({"x": ["y" * 4096] * 600}), "zstd", rows=100), "x")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.booleans())
def test_any_bytes_are_checked_without_an_error_of_their_own(junk: bytes, magic: bool) -> None:
    data = (b"ARROW1\0\0" if magic else b"") + junk
    with contextlib.suppress(BombError):  # (a buffer may declare anything: refused)
        check_ipc(data, "x")
