"""The Thrift compact protocol, as far as reading a Parquet page's header needs it (its sizes
and value counts, every other field skipped) and a footer's column chunks (their codecs and
size statistics, `footer_chunks`), from bytes of unknown origin (`parquet_read` checks each
page of a file by its header before Arrow decodes it, and the footer before pyarrow describes
its chunks).

Every read is bounded: a header longer than `MAX_HEADER`, a struct nested past `MAX_DEPTH`
levels, a list or map counting more elements than the bytes read, a varint over 64 bits: no
header (`read_header` gives None), never a loop or an allocation of a length the bytes state.
Read as Thrift's C++ reads it (Arrow's; rev54): a field type 0 ends a struct, a field id is an
i16, an i32 and a length the varint's low 32 bits, a uuid 16 bytes; a header refused here must
be one Arrow refuses too, since `parquet_read` then leaves that chunk's pages unchecked.
Spec: the Thrift compact protocol (thrift/doc/specs/thrift-compact-protocol.md) and
parquet-format's PageHeader (parquet.thrift).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Final

from trajledger.verify.errors import FormatError

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = ["CODECS", "HEADER_READ", "MAX_HEADER", "checked_footer", "chunk_codecs",
           "footer_chunks", "footer_codecs", "page_header", "read_header", "skip", "skip_struct",
           "varint"]

HEADER_READ: Final = 4 << 10
"""Bytes read first for one page header (more when its statistics are longer)."""
MAX_HEADER: Final = 16 << 20
"""Longest page header read (Arrow's C++ reader refuses a longer one)."""
MAX_DEPTH: Final = 100
"""Deepest struct, list or map nesting read: deeper than Arrow's Thrift reads (64 levels), so
a page header Arrow reads is read here (one refused here had its chunk's pages go unchecked:
rev54)."""


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


def page_header(b: bytes) -> tuple[int, int, int, int, int]:
    """``(uncompressed_page_size, compressed_page_size, header length, num_values, data
    values)`` of the PageHeader struct at the start of ``b`` (num_values -1 for a page without
    values: an index page; data values -1 but for a data page); every other field skipped.
    Its type, sizes (fields 1 to 3) and the num_values (field 1) of its data_page_header,
    dictionary_page_header or data_page_header_v2 (fields 5, 7, 8) are read, the last of a
    field given twice; read field by field here (every page of a file is: fix60)."""
    got = [-1, -1, -1, -1, -1, -1, -1, -1]  # (by field id - 1)
    field = pos = 0
    while True:
        head = b[pos]
        if not head & 0x0F:  # STOP (Thrift's: a field type 0)
            pos += 1
            break
        wire = head & 0x0F
        if head >> 4:
            field, pos = ((field + (head >> 4) + 0x8000) & 0xFFFF) - 0x8000, pos + 1
        else:
            field, pos = _field_id(b, pos + 1)
        if wire == 5 and 1 <= field <= 3:  # i32
            got[field - 1], pos = _zigzag(b, pos)
        elif wire == 12 and field in (5, 7, 8):
            pos = _num_values(b, pos, got, field - 1)
        else:
            pos = _value(b, pos, wire, 0)
    if got[1] < 0 or got[2] < 0:
        raise ValueError("a page header without its sizes")
    data = got[4] if got[0] == 0 else got[7] if got[0] == 3 else -1
    return got[1], got[2], pos, max(got[4], got[6], got[7]), data


def _num_values(b: bytes, pos: int, got: list[int], at: int) -> int:
    """Skip the struct at ``pos`` (one level down), its field 1 (an i32) stored at ``at``."""
    field = 0
    while True:
        head = b[pos]
        if not head & 0x0F:  # STOP (Thrift's: a field type 0)
            return pos + 1
        wire = head & 0x0F
        if head >> 4:
            field, pos = ((field + (head >> 4) + 0x8000) & 0xFFFF) - 0x8000, pos + 1
        else:
            field, pos = _field_id(b, pos + 1)
        if wire == 5 and field == 1:
            got[at], pos = _zigzag(b, pos)
        else:
            pos = _value(b, pos, wire, 1)


def _value(b: bytes, pos: int, wire: int, depth: int) -> int:
    """Skip a struct's field's value of compact type ``wire`` at ``pos`` (`skip`, its scalars
    inline: every field of every page header and footer is read so)."""
    if 4 <= wire <= 6:  # a zigzag varint
        end = pos + 9
        while b[pos] & 0x80:
            if pos == end:
                raise ValueError("varint too long")
            pos += 1
        return pos + 1
    if wire == 8:  # binary
        if b[pos] & 0x80:
            n, pos = _size(b, pos)
            return pos + n
        return pos + b[pos] + 1
    if wire in (1, 2):  # (a boolean: in its header)
        return pos
    return skip(b, pos, wire, depth)


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
    """The i32 at ``pos`` (a zigzag varint) and the position after it, as Thrift's C++ reads
    it (Arrow's): the varint's low 32 bits."""
    raw, pos = varint(b, pos)
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


def _field_id(b: bytes, pos: int) -> tuple[int, int]:
    """A field id given whole (a zigzag varint) at ``pos`` and the position after it, as
    Thrift's C++ reads it: an i16, so 65,540 is field 4 (rev54: a field read here as another
    than Arrow's was skipped, and what Arrow read in it went unchecked)."""
    raw, pos = varint(b, pos)
    raw &= 0x1FFFF  # (the i16's 16 bits and the sign)
    return ((((raw >> 1) ^ -(raw & 1)) + 0x8000) & 0xFFFF) - 0x8000, pos


def _size(b: bytes, pos: int) -> tuple[int, int]:
    """The length of a binary, list or map at ``pos`` (a varint) and the position after it, as
    Thrift's C++ reads it: an i32, its low 32 bits (`ValueError` when negative)."""
    raw, pos = varint(b, pos)
    raw &= 0xFFFFFFFF
    if raw >> 31:
        raise ValueError("a negative size")
    return raw, pos


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
    while True:  # (as `page_header`'s loop: a field's header, then its value)
        head = b[pos]
        if not head & 0x0F:  # STOP (Thrift's: a field type 0)
            return pos + 1
        kind = head & 0x0F
        if head >> 4:
            field, pos = ((field + (head >> 4) + 0x8000) & 0xFFFF) - 0x8000, pos + 1
        else:
            field, pos = _field_id(b, pos + 1)
        if want is not None:
            here = (*path, field)
            if kind == 5 and here in want:  # i32
                want[here], pos = _zigzag(b, pos)
                continue
            if kind == 12 and nests is not None and here in nests:
                pos = skip_struct(b, pos, want, depth + 1, here, nests)
                continue
        pos = _value(b, pos, kind, depth)


def skip(b: bytes, pos: int, kind: int, depth: int = 0) -> int:
    """Skip one value of compact type ``kind`` at ``pos``."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    if kind in (1, 2):  # a boolean field: in its header
        return pos
    if kind == 3:  # byte
        return pos + 1
    if kind in (4, 5, 6):  # zigzag varints
        return varint(b, pos)[1]
    if kind == 7:  # double
        return pos + 8
    if kind == 13:  # uuid (Arrow's Thrift reads it: rev54)
        return pos + 16
    if kind == 8:  # binary
        n, pos = _size(b, pos)
        return pos + n
    if kind in (9, 10):  # list, set
        head = b[pos]
        pos += 1
        n, elem = head >> 4, head & 0x0F
        if n == 15:
            n, pos = _size(b, pos)
        if n > len(b) - pos:  # each element takes a byte at least: cut short (or a lie)
            raise IndexError("a list longer than the bytes read")
        if elem in (4, 5, 6):
            for _ in range(n):
                pos = varint(b, pos)[1]
            return pos
        for _ in range(n):
            pos = pos + 1 if elem in (1, 2) else skip(b, pos, elem, depth + 1)
        return pos
    if kind == 11:  # map
        n, pos = _size(b, pos)
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
        if depth + 1 > MAX_DEPTH:
            raise ValueError("nested too deeply")
        return skip_struct(b, pos, None, depth + 1)
    raise ValueError(f"unknown compact type {kind}")


CODECS: Final = ("UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW")
"""parquet.thrift's CompressionCodec, by value."""


def chunk_codecs(footer: bytes) -> list[int]:
    """The codec of every column chunk of the FileMetaData struct ``footer``, row group by row
    group, in order (`footer_chunks`' first item: rev52 finding 6)."""
    return [chunk[0] for group in footer_chunks(footer) for chunk in group]


def footer_chunks(footer: bytes) -> list[list[tuple[int, int, int, bool]]]:
    """``(codec, repetition level histogram length, definition level histogram length,
    unencoded byte array data bytes given)`` of each column chunk of each row group of the
    FileMetaData struct ``footer``, in order (a histogram absent: 0): read here, since
    pyarrow's ``RowGroupMetaData.column(i)`` of a chunk whose size statistics Arrow refuses
    ends the process (a C++ exception through Cython: ``terminate``, rev52's Left, fix60), as
    its ``ColumnChunkMetaData.compression`` of a codec it does not know does (rev52 finding 6).

    Read as Arrow's generated Thrift reader reads it: a field of another wire type than it
    declares is skipped by its wire type (so here too), but a declared list's elements are
    read as the declared type whatever the list's header says; a list of the footer's
    declared lists (`_LISTS`) whose elements are of another type would be read otherwise
    here, so it is refused (`ValueError`), as is a chunk with encryption metadata (Arrow
    cannot read it without keys; trajledger reads no encrypted Parquet).

    Raises:
        ValueError: as said, or not a Thrift compact struct; IndexError: cut short.
    """
    out: list[list[tuple[int, int, int, bool]]] = []
    _struct(footer, 0, _FILE, out, 0)
    return out


# The structs walked field by field (the others are skipped by wire type: no declared list
# there), and each one's declared lists by field id: the element wire type (5 i32, 6 i64,
# 8 binary, 12 struct) and, for structs walked, which.
_FILE, _ROW_GROUP, _CHUNK, _META, _SIZES, _GEO = range(6)
_LISTS: Final[tuple[dict[int, tuple[int, int]], ...]] = (
    {2: (12, -1), 4: (12, _ROW_GROUP), 5: (12, -1), 7: (12, -1)},  # FileMetaData
    {1: (12, _CHUNK), 4: (12, -1)},  # RowGroup
    {},  # ColumnChunk (its crypto_metadata refused)
    {2: (5, -1), 3: (8, -1), 8: (12, -1), 13: (12, -1)},  # ColumnMetaData
    {2: (6, -1), 3: (6, -1)},  # SizeStatistics
    {2: (5, -1)},  # GeospatialStatistics
)
_NESTED: Final[tuple[dict[int, int], ...]] = ({}, {}, {3: _META}, {16: _SIZES, 17: _GEO}, {}, {})
"""The struct fields walked field by field, by the struct holding them."""


def _struct(b: bytes, pos: int, kind: int, out: list[list[tuple[int, int, int, bool]]],
            depth: int, got: list[int] | None = None) -> int:
    """Walk the struct of ``kind`` at ``pos``: ``out`` gets a list for a RowGroup and, in the
    last, a ColumnChunk's facts; ``got`` (a ColumnChunk's, being gathered) its codec,
    histograms' lengths and unencoded bytes."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    lists, nested = _LISTS[kind], _NESTED[kind]
    if kind == _CHUNK:
        got = [-1, 0, 0, 0]
    elif kind == _ROW_GROUP:
        out.append([])
    field = 0
    while True:  # (as `skip_struct`'s loop)
        head = b[pos]
        if not head & 0x0F:  # STOP (Thrift's: a field type 0)
            if kind == _CHUNK and got is not None:
                out[-1].append((got[0], got[1], got[2], bool(got[3])))
            return pos + 1
        wire = head & 0x0F
        if head >> 4:
            field, pos = ((field + (head >> 4) + 0x8000) & 0xFFFF) - 0x8000, pos + 1
        else:
            field, pos = _field_id(b, pos + 1)
        if 4 <= wire <= 6:  # a zigzag varint
            if got is not None and (kind == _META and field == 4 and wire == 5):
                got[0], pos = _zigzag(b, pos)  # codec
                continue
            if got is not None and kind == _SIZES and field == 1 and wire == 6:
                got[3] = 1  # unencoded_byte_array_data_bytes
            end = pos + 9
            while b[pos] & 0x80:
                if pos == end:
                    raise ValueError("varint too long")
                pos += 1
            pos += 1
        elif wire == 8:  # binary
            if b[pos] & 0x80:
                n, pos = _size(b, pos)
                pos += n
            else:
                pos += b[pos] + 1
        elif kind == _CHUNK and field == 8:  # crypto_metadata
            raise ValueError("a column chunk with encryption metadata")
        elif wire == 12 and field in nested:
            pos = _struct(b, pos, nested[field], out, depth + 1, got)
        elif wire == 9 and field in lists:
            want, of = lists[field]
            head = b[pos]
            n, elem, pos = head >> 4, head & 0x0F, pos + 1
            if n == 15:
                n, pos = _size(b, pos)
            if n and elem != want:
                raise ValueError(f"a list field {field} of elements of compact type {elem}, "
                                 f"want {want}")
            if n > len(b) - pos:  # each element takes a byte at least: cut short (or a lie)
                raise IndexError("a list longer than the bytes read")
            if kind == _SIZES and got is not None:
                got[field - 1] = n  # (repetition 2 -> 1, definition 3 -> 2)
            if of >= 0:
                for _ in range(n):
                    pos = _struct(b, pos, of, out, depth + 1)
            elif want == 12:
                for _ in range(n):
                    pos = skip_struct(b, pos, None, depth + 1)
            elif want == 8:
                for _ in range(n):
                    if b[pos] & 0x80:
                        size, pos = _size(b, pos)
                        pos += size
                    else:
                        pos += b[pos] + 1
            else:  # (i32, i64: varints)
                for _ in range(n):
                    pos = varint(b, pos)[1]
        elif wire not in (1, 2):  # (a boolean: in its header)
            pos = skip(b, pos, wire, depth)


def checked_footer(f: io.BufferedIOBase, whole: int, meta: pq.FileMetaData) -> list[int]:
    """Refuse a footer whose column chunks pyarrow cannot describe without ending the process
    (`footer_chunks`: its C++ exception goes through Cython, ``terminate``,
    SIGABRT; rev52's Left, fix60): a level histogram of another length than the leaf's
    levels, unencoded byte array sizes for a leaf of another type, a row group of another
    number of chunks than the schema's leaves, or a footer not read so. Returns the codec of
    each chunk, row group by row group (pyarrow's ``compression`` of one it does not know
    ends the process too: rev52 finding 6)."""
    schema = meta.schema
    try:
        f.seek(whole - 8)
        n = int.from_bytes(f.read(4), "little")
        f.seek(max(whole - 8 - n, 0))
        groups = footer_chunks(f.read(min(n, whole)))
    except (IndexError, ValueError, RecursionError) as e:
        raise FormatError(f"its footer cannot be read as Arrow reads it ({e})") from e
    leaves = [schema.column(j) for j in range(len(schema))] if groups else []
    for g, chunks in enumerate(groups):
        if len(chunks) != len(leaves):
            raise FormatError(f"row group {g} has {len(chunks)} column chunk(s), want "
                              f"{len(leaves)} (the schema's leaves)")
        for leaf, (_codec, reps, defs, unencoded) in zip(leaves, chunks, strict=True):
            for what, got, level in (("repetition", reps, leaf.max_repetition_level),
                                     ("definition", defs, leaf.max_definition_level)):
                if got and got != level + 1:
                    raise FormatError(
                        f"column {leaf.path!r}: its size statistics' {what} level histogram "
                        f"has {got} entries, want {level + 1}")
            if unencoded and leaf.physical_type != "BYTE_ARRAY":
                raise FormatError(f"column {leaf.path!r}: its size statistics give unencoded "
                                  f"byte array sizes for a {leaf.physical_type} leaf")
    return [chunk[0] for chunks in groups for chunk in chunks]


def footer_codecs(f: io.BufferedIOBase, whole: int) -> list[int]:
    """The codec of each column chunk of the file ``f`` (``whole`` bytes long), row group by
    row group (`footer_chunks`); [] when its footer cannot be read so (then no codec is
    known: `parquet_read._codec`)."""
    try:
        f.seek(whole - 8)
        n = int.from_bytes(f.read(4), "little")
        f.seek(max(whole - 8 - n, 0))
        return [c[0] for group in footer_chunks(f.read(min(n, whole))) for c in group]
    except (IndexError, ValueError, RecursionError, OSError):
        return []
