"""Reading a bundle's archive as hostile input: a bounded zstd stream and a strict tar reader.

Scope: `open_zstd` opens a bundle file as a decompressed stream that refuses more than
`Limits.total` bytes (a first frame declaring more is refused before decompressing), with a
bounded zstd window; `tar_headers` parses ustar/pax headers strictly (regular files only; pax
keys ``path`` and ``size`` only, at most `Limits.pax` bytes), so no header can make it allocate
more than that. `Limits` bounds what reading one bundle may cost.

Non-scope: what the members mean (`verify.bundle_index`, `verify.bundle`).

Spec: POSIX pax/ustar; RFC 8878 (zstd frame header).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .errors import FormatError
from .log_entry import MAX_ENTRY_SIZE

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_WINDOW = 1 << 27
"""Largest zstd window accepted (128 MiB, zstd's default limit): bounds decompressor memory."""

BLOCK = 512
CHUNK = 1 << 20
SMALL_KINDS = ("checkpoint", "entry", "proof", "consistency", "range", "policy", "handover")
"""The kinds of member (`verify.bundle_index.check_member_name`) held in memory, each under
its kind's cap (`Limits.cap`); objects stream to disk."""
_PAX_KEYS = frozenset({"path", "size"})
REPACKED = ": re-packed by tar? verify the file 'trajledger export' wrote, as it was sent"


@dataclass(frozen=True)
class Limits:
    """Bounds on what reading one bundle may cost. Every one is checked before the bytes are.

    Attributes:
        total: uncompressed bytes of the whole tar stream (default 64 GiB).
        member: bytes of any one member (default 64 GiB).
        members: number of members.
        index: bytes of ``bundle.json``.
        small: bytes of a checkpoint, a proof or a policy (held in memory).
        memory: bytes of all members but objects together (entries, proofs, policies, the
            checkpoint: they are held in memory; objects go to disk).
        pax: bytes of one pax extended header.
    """

    total: int = 64 << 30
    member: int = 64 << 30
    members: int = 1_000_000
    index: int = 64 << 20
    small: int = 1 << 20
    memory: int = 1 << 30
    pax: int = 1 << 16

    def cap(self, kind: str) -> int:
        """The most bytes a member of ``kind`` may hold."""
        if kind == "entry":
            return min(MAX_ENTRY_SIZE, self.member)
        if kind == "object":
            return self.member
        return min(self.small, self.member)




@dataclass
class Bounded:
    """A reader that refuses to deliver more than ``limit`` bytes in total.

    Attributes:
        raw: the decompressing reader.
        limit: the most bytes it may deliver.
        what: the bundle, for messages.
        errors: what ``raw`` raises on corrupt input (reported as `FormatError`).
        count: bytes delivered so far.
    """

    raw: Any
    limit: int
    what: str
    errors: tuple[type[BaseException], ...]
    count: int = 0

    def read(self, n: int) -> bytes:
        try:
            data: bytes = self.raw.read(n)
        except self.errors as e:
            raise FormatError(f"{self.what}: corrupt zstd stream ({e}): get it again") from e
        self.count += len(data)
        if self.count > self.limit:
            raise FormatError(
                f"{self.what}: decompresses to more than {self.limit} bytes (the limit); "
                "refusing a possible decompression bomb"
            )
        return data

    def chunks(self, n: int, what: str) -> Iterator[bytes]:
        """The next ``n`` bytes, in pieces of at most `CHUNK` (``what`` is truncated if fewer
        come)."""
        left = n
        while left:
            chunk = self.read(min(left, CHUNK))
            if not chunk:
                raise FormatError(f"{what}: truncated ({n - left} of {n} bytes): get it again")
            left -= len(chunk)
            yield chunk

    def exact(self, n: int, what: str) -> bytes:
        """The next ``n`` bytes (``what`` is truncated if fewer come)."""
        return b"".join(self.chunks(n, what))


def _octal(field_bytes: bytes, what: str) -> int:
    text = field_bytes.rstrip(b"\x00 ").lstrip(b" ")
    if field_bytes[:1] and field_bytes[0] & 0x80:
        raise FormatError(f"{what}: base-256 number fields are not allowed (use pax)")
    if not text:
        return 0
    if not re.fullmatch(rb"[0-7]+", text):
        raise FormatError(f"{what}: {field_bytes!r} is not an octal number")
    return int(text, 8)


_TYPE_NAMES = {
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a character device",
    b"4": "a block device",
    b"5": "a directory",
    b"6": "a FIFO",
    b"7": "a contiguous file",
    b"g": "a global pax header",
    b"L": "a GNU long name",
    b"K": "a GNU long link name",
    b"S": "a GNU sparse file",
}


def _parse_pax(data: bytes, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    rest = data
    while rest:
        length_text, sep, _ = rest.partition(b" ")
        if not sep or not re.fullmatch(rb"[1-9][0-9]{0,5}", length_text):
            raise FormatError(f"{what}: malformed pax record")
        length = int(length_text)
        record, rest = rest[:length], rest[length:]
        if len(record) != length or not record.endswith(b"\n"):
            raise FormatError(f"{what}: malformed pax record")
        key, eq, value = record[len(length_text) + 1 : -1].partition(b"=")
        try:
            k, v = key.decode("ascii"), value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"{what}: pax record is not text") from e
        if not eq or k not in _PAX_KEYS:
            raise FormatError(f"{what}: pax key {k!r} not allowed (only path and size){REPACKED}")
        if k in out:
            raise FormatError(f"{what}: pax key {k!r} appears twice")
        out[k] = v
    return out


def tar_headers(stream: Bounded, limits: Limits, what: str) -> Iterator[tuple[str, int]]:
    """Yield each regular member's name and size; the caller must then read exactly its
    content.

    Steps:
        1. Read a 512-byte header; two zero blocks end the archive, and only zero padding may
           follow them, at most `CHUNK` (1 MiB) of it: tar pads to a record (10 KiB by default,
           as ``tarfile`` and trajledger write; 1 MiB with GNU tar's ``-b 2048``), and 2 GiB of
           zeros there cost 1.1 CPU-s to read before the bundle was judged.
        2. Check the ustar magic and version and the header checksum.
        3. A pax extended header (type ``x``, at most ``limits.pax`` bytes, keys ``path`` and
           ``size`` only) applies to the next header, which must be a regular file.
        4. Refuse every type but a regular file, naming what it is; refuse a link name.
    """
    pax: dict[str, str] | None = None
    number = 0
    while True:
        # (1)
        block = stream.exact(BLOCK, f"{what}: tar header {number}")
        if block == bytes(BLOCK):
            second = stream.exact(BLOCK, f"{what}: tar end-of-archive")
            if second != bytes(BLOCK) or pax is not None:
                raise FormatError(f"{what}: malformed end of the tar archive")
            end = stream.count  # a bound on the padding: tar's records are 10 KiB (tarfile, GNU)
            while tail := stream.read(CHUNK):
                if tail.count(0) != len(tail) or stream.count - end > CHUNK:
                    raise FormatError(f"{what}: data after the end of the tar archive (only zero "
                                      f"padding, at most {CHUNK} bytes, may follow): get it again")
            return
        # (2)
        here = f"{what}: tar header {number}"
        if block[257:263] != b"ustar\x00" or block[263:265] != b"00":
            raise FormatError(f"{here}: not a POSIX ustar/pax header{REPACKED}")
        want = _octal(block[148:156], f"{here}: checksum")
        if sum(block[:148]) + 8 * 32 + sum(block[156:]) != want:
            raise FormatError(f"{here}: header checksum does not match")
        size = _octal(block[124:136], f"{here}: size")
        typeflag = block[156:157]
        try:
            raw_name = block[:100].split(b"\x00", 1)[0].decode("ascii")
            prefix = block[345:500].split(b"\x00", 1)[0].decode("ascii")
        except UnicodeDecodeError as e:
            raise FormatError(f"{here}: member name is not ASCII (non-canonical)") from e
        name = f"{prefix}/{raw_name}" if prefix else raw_name
        number += 1
        # (3)
        if typeflag == b"x":
            if pax is not None:
                raise FormatError(f"{here}: two pax headers in a row")
            if size > limits.pax:
                raise FormatError(f"{here}: pax header of {size} bytes, limit {limits.pax}")
            data = stream.exact(size, here)
            stream.exact(-size % BLOCK, here)
            pax = _parse_pax(data, here)
            continue
        if pax is not None:
            name = pax.get("path", name)
            if "size" in pax:
                if not re.fullmatch(r"0|[1-9][0-9]{0,19}", pax["size"]):
                    raise FormatError(f"{here}: pax size {pax['size']!r} is not a decimal")
                size = int(pax["size"])
            pax = None
        # (4)
        if typeflag not in (b"0", b"\x00"):
            kind = _TYPE_NAMES.get(typeflag, f"of tar type {typeflag!r}")
            raise FormatError(f"{what}: member {name!r} is {kind}; only regular files allowed")
        if block[157:257].strip(b"\x00"):
            raise FormatError(f"{what}: member {name!r} carries a link name")
        yield name, size


def open_zstd(path: Path, limits: Limits) -> tuple[IO[bytes], Bounded]:
    """Open ``path`` as a bounded decompressed stream (the caller closes the file)."""
    try:
        import zstandard
    except ImportError as e:
        raise OSError("reading a bundle needs 'zstandard' (pip install zstandard)") from e
    what = f"bundle {path.name}"
    fh = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    try:
        head = fh.read(18)
        try:
            if head[:4] != ZSTD_MAGIC:  # (no frame: said below, as a corrupt frame header is)
                raise zstandard.ZstdError("no zstd magic number")
            declared = zstandard.get_frame_parameters(head).content_size
        except zstandard.ZstdError as e:
            from .not_bundle import not_a_bundle_line  # (out52, out55: loaded on this failure)
            raise FormatError(not_a_bundle_line(what, head, e)) from e
        if 0 <= declared < (1 << 63) and declared > limits.total:
            raise FormatError(
                f"{what}: zstd frame declares {declared} bytes, more than the limit {limits.total}"
            )
        fh.seek(0)
        dctx = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)
        reader = dctx.stream_reader(fh, read_size=CHUNK, read_across_frames=True)
    except BaseException:
        fh.close()
        raise
    return fh, Bounded(reader, limits.total, what, (zstandard.ZstdError,))
