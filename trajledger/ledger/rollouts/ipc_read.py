"""Arrow IPC inputs (files and streams) checked for decompression bombs before a batch is read.

Scope: `check_ipc` walks an IPC stream's messages (an IPC file's are its stream, after its
8-byte magic), reading for each record batch and dictionary batch only its metadata (the
flatbuffer ``Message``: its ``RecordBatch`` and the body's buffer list) and the first eight
bytes of each compressed buffer, which state its decompressed length. A message whose buffers
declare over `parquet_read.MAX_PAGE_BYTES` decompressed, over 1,000 times their compressed size,
or a file over `parquet_read.MAX_DECODED_BYTES`, is refused (`BombError`). An uncompressed IPC
file is memory-mapped as it is and costs what it holds.
Why: pyarrow decompresses a compressed record batch whole before any of it can be checked: a
27,746-byte file (4 rows sharing a 200 MiB string, zstd) used 1.5 GB before the schema's field
limit refused it.
Not covered: dictionary-encoded columns are expanded where the rows are normalised, after the
batch is read (the declared sizes bound the dictionary and the indices, not the expansion).
Spec: Arrow's IPC format (Message.fbs, Schema.fbs; a buffer of a compressed body starts with
its decompressed length as a little-endian int64, -1 when left uncompressed).
"""

from __future__ import annotations

import struct
from typing import Final

from .parquet_read import MAX_DECODED_BYTES, MAX_PAGE_BYTES, BombError

__all__ = ["MAX_RATIO", "check_ipc"]

MAX_RATIO: Final = 1000
"""Most a message's buffers may declare decompressed per byte compressed (LZ4 tops out near 255;
zstd reaches tens of thousands only on runs of one byte)."""

_RECORD_BATCH, _DICTIONARY_BATCH = 3, 2
"""``MessageHeader`` union types (Message.fbs)."""
_CONTINUATION: Final = 0xFFFFFFFF


def check_ipc(data: bytes | memoryview, what: str) -> None:
    """Refuse the IPC file or stream ``data`` (``what`` names it in the message) when a batch
    declares a decompression bomb; a layout not understood is left to pyarrow, which refuses
    it as it reads."""
    view = memoryview(data)
    pos = 8 if bytes(view[:6]) == b"ARROW1" else 0
    total = 0
    while pos + 8 <= len(view):
        (size,) = struct.unpack_from("<I", view, pos)
        if size == _CONTINUATION:
            (size,) = struct.unpack_from("<i", view, pos + 4)
            pos += 8
        else:  # the format before 0.15: the length alone
            size = struct.unpack_from("<i", view, pos)[0]
            pos += 4
        if size <= 0 or pos + size > len(view):
            return  # end of stream, or not a stream: pyarrow decides
        try:
            body_length, buffers = _message(view[pos : pos + size])
        except (IndexError, struct.error, ValueError):
            return
        body = pos + size
        if body_length < 0 or body + body_length > len(view):
            return  # cut short: pyarrow refuses it
        if buffers:
            declared = _declared(view, body, body_length, buffers)
            total += declared
            if declared > MAX_PAGE_BYTES and declared > MAX_RATIO * max(body_length, 1):
                raise BombError(
                    f"{what}: a record batch of {body_length:,} compressed bytes declares "
                    f"{declared:,} decompressed, over {MAX_RATIO:,} times as many and over "
                    f"{MAX_PAGE_BYTES:,} (MAX_PAGE_BYTES): refused as a possible decompression "
                    "bomb; write it uncompressed or in smaller batches"
                )
            if total > MAX_DECODED_BYTES:
                raise BombError(
                    f"{what}: its batches declare over {MAX_DECODED_BYTES:,} bytes "
                    "decompressed (MAX_DECODED_BYTES): refused as a possible decompression "
                    "bomb; split larger inputs into several files"
                )
        pos = body + body_length


def _declared(
    view: memoryview, body: int, body_length: int, buffers: list[tuple[int, int]]
) -> int:
    """Decompressed bytes the compressed ``buffers`` (offset, length in the body) declare."""
    out = 0
    for offset, length in buffers:
        if length < 8 or offset < 0 or offset + length > body_length:
            continue  # empty, or not inside the body: pyarrow refuses it
        (n,) = struct.unpack_from("<q", view, body + offset)
        out += length - 8 if n < 0 else n
    return out


def _message(b: memoryview) -> tuple[int, list[tuple[int, int]]]:
    """``(bodyLength, buffers)`` of a ``Message`` flatbuffer; buffers only for a compressed
    record batch or dictionary batch (else empty)."""
    root = _u32(b, 0)
    header_type = _field_scalar(b, root, 1, "<B", 0)
    body_length = _field_scalar(b, root, 3, "<q", 0)
    if header_type not in (_RECORD_BATCH, _DICTIONARY_BATCH):
        return body_length, []
    header = _field_table(b, root, 2)
    if header is None:
        return body_length, []
    if header_type == _DICTIONARY_BATCH:  # DictionaryBatch { id, data: RecordBatch, isDelta }
        header = _field_table(b, header, 1)
        if header is None:
            return body_length, []
    if _field_table(b, header, 3) is None:  # RecordBatch.compression: none, not compressed
        return body_length, []
    vector = _field_table(b, header, 2)  # RecordBatch.buffers: [Buffer { offset, length }]
    if vector is None:
        return body_length, []
    count = _u32(b, vector)
    if count > len(b) // 16:
        raise ValueError("more buffers than bytes")
    return body_length, [struct.unpack_from("<qq", b, vector + 4 + 16 * i) for i in range(count)]


def _u32(b: memoryview, at: int) -> int:
    return int(struct.unpack_from("<I", b, at)[0])


def _field(b: memoryview, table: int, index: int) -> int:
    """The position of field ``index`` of the table at ``table``, 0 when absent."""
    vtable = table - int(struct.unpack_from("<i", b, table)[0])
    (vsize,) = struct.unpack_from("<H", b, vtable)
    if 4 + 2 * index + 2 > vsize:
        return 0
    (offset,) = struct.unpack_from("<H", b, vtable + 4 + 2 * index)
    return table + offset if offset else 0


def _field_scalar(b: memoryview, table: int, index: int, fmt: str, default: int) -> int:
    at = _field(b, table, index)
    return int(struct.unpack_from(fmt, b, at)[0]) if at else default


def _field_table(b: memoryview, table: int, index: int) -> int | None:
    """Where the table or vector that field ``index`` points to starts, None when absent."""
    at = _field(b, table, index)
    return at + _u32(b, at) if at else None
