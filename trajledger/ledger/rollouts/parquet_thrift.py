"""The Thrift compact protocol, as far as reading a Parquet page's header needs it: its sizes
and value counts, every other field skipped, from bytes of unknown origin (`parquet_read`
checks each page of a file by its header before Arrow decodes it).

Every read is bounded: a header longer than `MAX_HEADER`, a struct nested past 32 levels, a
list or map counting more elements than the bytes read, a varint over 64 bits: no header
(`read_header` gives None), never a loop or an allocation of a length the bytes state.
Spec: the Thrift compact protocol (thrift/doc/specs/thrift-compact-protocol.md) and
parquet-format's PageHeader (parquet.thrift).
"""

from __future__ import annotations

import io
from typing import Final

__all__ = ["CODECS", "HEADER_READ", "MAX_HEADER", "chunk_codecs", "page_header", "read_header",
           "skip", "skip_struct", "varint"]

HEADER_READ: Final = 4 << 10
"""Bytes read first for one page header (more when its statistics are longer)."""
MAX_HEADER: Final = 16 << 20
"""Longest page header read (Arrow's C++ reader refuses a longer one)."""


def read_header(f: io.BufferedIOBase, pos: int, left: int
                ) -> tuple[int, int, int, int, int] | None:
    """`page_header` of the page at ``pos``, None when there is no valid header there."""
    n = HEADER_READ
    while True:
        f.seek(pos)
        head = f.read(min(n, left))
        try:
            return page_header(head)
        except IndexError:  # cut short: read more
            if n >= min(MAX_HEADER, left):
                return None
            n *= 4
        except (ValueError, RecursionError):
            return None


_WANT: Final = ((1,), (2,), (3,), (5, 1), (7, 1), (8, 1))
"""The PageHeader's type, uncompressed_page_size, compressed_page_size, and the num_values of
its data_page_header, dictionary_page_header or data_page_header_v2."""
_WANT_NESTS: Final = frozenset({(5,), (7,), (8,)})


def page_header(b: bytes) -> tuple[int, int, int, int, int]:
    """``(uncompressed_page_size, compressed_page_size, header length, num_values, data
    values)`` of the PageHeader struct at the start of ``b`` (num_values -1 for a page without
    values: an index page; data values -1 but for a data page); every other field skipped."""
    got = dict.fromkeys(_WANT, -1)
    pos = skip_struct(b, 0, got, nests=_WANT_NESTS)
    if got[2,] < 0 or got[3,] < 0:
        raise ValueError("a page header without its sizes")
    data = got[5, 1] if got[1,] == 0 else got[8, 1] if got[1,] == 3 else -1
    return got[2,], got[3,], pos, max(got[5, 1], got[7, 1], got[8, 1]), data


def varint(b: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it (`IndexError` when cut short,
    `ValueError` past 64 bits)."""
    out = shift = 0
    while True:
        byte = b[pos]
        pos += 1
        out |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return out, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _zigzag(b: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint (i16, i32, i64) at ``pos`` and the position after it."""
    raw, pos = varint(b, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def _field(b: bytes, pos: int, field: int) -> tuple[int, int, int]:
    """The compact type, id and end of the field header at ``pos`` (the previous field's id
    ``field``: a header states a delta to it, or the id after it); type -1 for STOP."""
    head = b[pos]
    if head == 0:
        return -1, field, pos + 1
    if head >> 4:
        return head & 0x0F, field + (head >> 4), pos + 1
    got, pos = _zigzag(b, pos + 1)
    return head & 0x0F, got, pos


def skip_struct(
    b: bytes, pos: int, want: dict[tuple[int, ...], int] | None = None, depth: int = 0,
    path: tuple[int, ...] = (), nests: frozenset[tuple[int, ...]] | None = None,
) -> int:
    """Skip the struct at ``pos``; the i32 fields of ``want`` (by their path of field ids from
    the outer struct) are stored in it (``nests``: the paths of the structs that hold them,
    worked out from ``want`` when not given)."""
    if want is not None and nests is None:
        nests = frozenset(k[:i] for k in want for i in range(1, len(k)))
    field = 0
    while True:
        kind, field, pos = _field(b, pos, field)
        if kind < 0:  # STOP
            return pos
        here = (*path, field)
        if want is not None and here in want and kind == 5:  # i32
            want[here], pos = _zigzag(b, pos)
        elif kind == 12 and nests is not None and here in nests:
            pos = skip_struct(b, pos, want, depth + 1, here, nests)
        else:
            pos = skip(b, pos, kind, depth)


def skip(b: bytes, pos: int, kind: int, depth: int = 0) -> int:
    """Skip one value of compact type ``kind`` at ``pos``."""
    if depth > 32:
        raise ValueError("nested too deeply")
    if kind in (1, 2):  # a boolean field: in its header
        return pos
    if kind == 3:  # byte
        return pos + 1
    if kind in (4, 5, 6):  # zigzag varints
        return varint(b, pos)[1]
    if kind == 7:  # double
        return pos + 8
    if kind == 8:  # binary
        n, pos = varint(b, pos)
        return pos + n
    if kind in (9, 10):  # list, set
        head = b[pos]
        pos += 1
        n, elem = head >> 4, head & 0x0F
        if n == 15:
            n, pos = varint(b, pos)
        if n > len(b) - pos:  # each element takes a byte at least: cut short (or a lie)
            raise IndexError("a list longer than the bytes read")
        for _ in range(n):
            pos = pos + 1 if elem in (1, 2) else skip(b, pos, elem, depth + 1)
        return pos
    if kind == 11:  # map
        n, pos = varint(b, pos)
        if n > len(b) - pos:  # each entry takes a byte at least: cut short (or a lie)
            raise IndexError("a map longer than the bytes read")
        if n:
            types = b[pos]
            pos += 1
            for _ in range(n):
                pos = skip(b, pos, types >> 4, depth + 1)
                pos = skip(b, pos, types & 0x0F, depth + 1)
        return pos
    if kind == 12:  # struct
        return skip_struct(b, pos, None, depth + 1)
    raise ValueError(f"unknown compact type {kind}")


CODECS: Final = ("UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW")
"""parquet.thrift's CompressionCodec, by value."""


def chunk_codecs(footer: bytes) -> list[int]:
    """The codec of every column chunk (``FileMetaData.row_groups[*].columns[*].meta_data
    .codec``) of the FileMetaData struct ``footer``, row group by row group, in order: read
    here, since pyarrow's ``ColumnChunkMetaData.compression`` of a value it does not know
    ends the process (a C++ exception through Cython: ``terminate``, rev52 finding 6)."""
    out: list[int] = []
    _codecs(footer, 0, (4, 1, 3, 4), out, 0)
    return out


def _codecs(b: bytes, pos: int, path: tuple[int, ...], out: list[int], depth: int) -> int:
    """Skip the struct at ``pos``, each i32 at ``path`` (field ids; a list of structs stepped
    through) added to ``out``."""
    if depth > 32:
        raise ValueError("nested too deeply")
    field = 0
    while True:
        kind, field, pos = _field(b, pos, field)
        if kind < 0:  # STOP
            return pos
        if field != path[0]:
            pos = skip(b, pos, kind, depth)
        elif len(path) == 1 and kind == 5:
            code, pos = _zigzag(b, pos)
            out.append(code)
        elif len(path) > 1 and kind == 12:
            pos = _codecs(b, pos, path[1:], out, depth + 1)
        elif len(path) > 1 and kind in (9, 10) and b[pos] & 0x0F == 12:
            n, pos = b[pos] >> 4, pos + 1
            if n == 15:
                n, pos = varint(b, pos)
            if n > len(b) - pos:
                raise IndexError("a list longer than the bytes read")
            for _ in range(n):
                pos = _codecs(b, pos, path[1:], out, depth + 1)
        else:
            pos = skip(b, pos, kind, depth)
