"""Reading JSON lines, plain or compressed with gzip or zstd, strictly and within bounds.

Scope: `open_jsonl` opens a JSONL file whose compression is told by its magic bytes and
decompresses it as a stream (refused past `MAX_DECOMPRESSED_BYTES`, or when corrupt or
truncated); `read_lines` yields its lines (refused past `MAX_LINE_BYTES` a line or
`MAX_BLANK_BYTES` of blank lines); `jsonl_objects` decodes each line strictly (no duplicate
keys, no NaN, no lone surrogates, an object per line), reporting bad lines.
`decode_line` decodes with msgspec in C the lines `fast_object` can prove the strict decoder
decodes to the same object, and every other line (every refusal) with the strict decoder.
Non-scope: what the objects mean (``formats.py``, ``readers.py``).
Spec: ``schemas/rollout-inputs.md`` section "JSON lines".

Memory stays bounded whatever the compression ratio: a read decompresses at most one buffer,
and a line is read through a buffer of at most `MAX_LINE_BYTES`.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final

import msgspec

from trajledger.verify.strict_json import SURROGATE_ESCAPE, lone_surrogate

from .chunks import RecordProblems
from .fields import json_type
from .problems import ProblemCollector, RolloutValidationError, refusal
from .typed_json import reject_constant

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = [
    "JSON_SPACE_BYTES",
    "MAX_BLANK_BYTES",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_LINE_BYTES",
    "InputError",
    "decode_line",
    "fast_object",
    "jsonl_objects",
    "open_jsonl",
    "provable",
    "read_lines",
    "read_position",
    "refused",
    "strict_decoder",
]

MAX_LINE_BYTES: Final = 64 << 20
"""Longest accepted JSONL line (one episode), newline included; a longer line refuses the file.

Read through a bounded buffer, so a line of any length (for instance one decompressed from a
few bytes) costs at most this much memory.
"""

MAX_BLANK_BYTES: Final = 1 << 20
"""Most bytes of blank (whitespace-only) lines a JSONL file may hold; past it the file is
refused. A gzip or zstd file of nothing but newlines decompresses a thousandfold and would take
hours to read line by line (a newline bomb); no rollout file has a mebibyte of blank lines."""

MAX_DECOMPRESSED_BYTES: Final = 64 << 30
"""Most bytes a gzip or zstd JSONL file may decompress to; past it the file is refused as a
possible decompression bomb. Split larger inputs into several files of one batch."""


_GZIP_MAGIC: Final = b"\x1f\x8b"
_ZSTD_MAGIC: Final = 0xFD2FB528
_ZSTD_SKIPPABLE: Final = 0x184D2A50
"""Skippable zstd frames (user data) have magic numbers 0x184D2A50 to 0x184D2A5F."""
_READ_BUFFER: Final = 1 << 20

_JSON_SPACE: Final = " \t\r\n"
"""JSON's whitespace (RFC 8259): the only characters a line's object may stand between.
`str.strip` alone would also take U+00A0, U+2028 and other Unicode spaces off a line."""

JSON_SPACE_BYTES: Final = _JSON_SPACE.encode()
"""`_JSON_SPACE` as bytes: a line of nothing else is blank. `bytes.strip` alone would also
take a vertical tab or a form feed, making a line of them blank where JSON calls it no value."""


class InputError(Exception):
    """Compressed data that cannot be read on, raised from inside a buffered read.

    Never leaves the readers: `read_lines` and ``readers.detect_format`` turn it into a
    `RolloutValidationError` naming the file (and the line being read).
    """


def refused(path: Path, message: str, line: int | None) -> RolloutValidationError:
    """The refusal of a file, naming it in the message too: `write_steps_parquet` re-raises
    problems under the subject of a whole batch, which may name several files."""
    return refusal(path, f"{path}: {message}", line)


def _codec(head: bytes) -> str | None:
    """The compression of a file from its first 4 bytes: "gzip", "zstd", or None (plain)."""
    if head[:2] == _GZIP_MAGIC:
        return "gzip"
    if len(head) >= 4:
        magic = int.from_bytes(head[:4], "little")
        if magic == _ZSTD_MAGIC or magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE:
            return "zstd"
    return None


class _Decompressed(io.RawIOBase):
    """The decompressed bytes of a gzip or zstd file, counted against a limit.

    Each read decompresses at most the caller's buffer, so memory stays constant whatever the
    compression ratio. Corrupt data and the limit raise `InputError`.
    """

    def __init__(self, codec: str, source: BinaryIO, limit: int) -> None:
        self.source = source
        self._codec = codec
        self._limit = limit
        self._total = 0
        self._inner: Any
        self._errors: tuple[type[Exception], ...]
        if codec == "gzip":
            self._inner = gzip.GzipFile(fileobj=source, mode="rb")
            self._errors = (EOFError, gzip.BadGzipFile, zlib.error)
        else:
            import zstandard  # lazily: only zstd inputs need it

            # Concatenated frames (pzstd, `cat`) are one stream; the library's default window
            # limit (128 MiB) bounds the decoder's own memory.
            self._inner = zstandard.ZstdDecompressor().stream_reader(
                source, read_across_frames=True, closefd=False
            )
            self._errors = (zstandard.ZstdError,)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        try:
            # One step at a time, so the bytes decoded before an error are passed on first
            # and the error names the line it cuts.
            n = int(self._inner.readinto1(buffer))
        except self._errors as e:
            # gzip raises EOFError for data that stops inside a member: a truncated file.
            what = "ends early (truncated?)" if isinstance(e, EOFError) else "is corrupt"
            raise InputError(f"{self._codec} data {what}: {e}") from e
        self._total += n
        if self._total > self._limit:
            raise InputError(
                f"decompresses to over {self._limit:,} bytes, want at most "
                f"{self._limit:,} (MAX_DECOMPRESSED_BYTES): refused as a possible "
                "decompression bomb"
            )
        return n

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()


def _zstd_truncation(path: Path) -> str | None:
    """Why a zstd file ends inside a frame, or None when its last frame is whole.

    The zstd stream reader takes a truncated frame for the end of the data, so the frames are
    walked first: frame and block headers only (RFC 8878, section 3.1), seeking over block
    contents. Anything that is not a frame is left for the decoder to report as corrupt.
    """
    size = path.stat().st_size
    pos = frame = 0
    with open(path, "rb", buffering=0) as f:

        def read(n: int) -> bytes:
            f.seek(pos)
            return f.read(n)

        while pos < size:
            frame += 1
            head = read(8)
            magic = int.from_bytes(head[:4], "little") if len(head) >= 4 else None
            if magic is not None and magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE and len(head) == 8:
                pos += 8 + int.from_bytes(head[4:8], "little")
            elif magic == _ZSTD_MAGIC and len(head) >= 5:
                fhd = head[4]
                single = fhd >> 5 & 1
                dict_id = (0, 1, 2, 4)[fhd & 3]
                content_size = (0, 2, 4, 8)[fhd >> 6] or single
                pos += 5 + (1 - single) + dict_id + content_size
                last = False
                while not last and pos <= size:
                    block = read(3)
                    if len(block) < 3:
                        pos = size + 1
                        break
                    header = int.from_bytes(block, "little")
                    last = bool(header & 1)
                    # An RLE block (type 1) holds one byte, repeated block-size times.
                    pos += 3 + (1 if header >> 1 & 3 == 1 else header >> 3)
                pos += 4 * (fhd >> 2 & 1)  # content checksum
            elif (
                magic is not None and magic != _ZSTD_MAGIC and magic & 0xFFFFFFF0 != _ZSTD_SKIPPABLE
            ):
                return None
            else:  # a frame header cut short
                pos = size + 1
            if pos > size:
                return (
                    f"zstd data ends early (truncated?): frame {frame} needs at least "
                    f"{pos:,} bytes, the file has {size:,}"
                )
    return None


@contextmanager
def open_jsonl(path: Path, *, check_end: bool) -> Iterator[tuple[str | None, io.BufferedReader]]:
    """Open a JSONL file, plain or compressed, for `read_lines`.

    Args:
        path: the file.
        check_end: check first that a zstd file does not end inside a frame (a pass over its
            headers; gzip reports a truncated member itself).

    Yields:
        The compression ("gzip", "zstd" or None) and a reader of the decompressed bytes.

    Raises:
        RolloutValidationError: a zstd file ends inside a frame.
    """
    with ExitStack() as stack:
        f = stack.enter_context(open(path, "rb"))
        codec = _codec(f.peek(4)[:4])
        if codec is None:
            yield None, f
            return
        if codec == "zstd" and check_end:
            problem = _zstd_truncation(path)
            if problem is not None:
                raise refused(path, problem, None)
        raw = stack.enter_context(_Decompressed(codec, f, MAX_DECOMPRESSED_BYTES))
        yield codec, stack.enter_context(io.BufferedReader(raw, _READ_BUFFER))


def read_lines(f: io.BufferedReader, path: Path) -> Iterator[tuple[int, bytes]]:
    """Yield the 1-based number and bytes of each line, refusing one over `MAX_LINE_BYTES` and
    more than `MAX_BLANK_BYTES` of blank lines in all.

    Raises:
        RolloutValidationError: a line is too long, too much blank input, or the data cannot be
            read on (one problem naming the file and the line being read).
    """
    limit = MAX_LINE_BYTES
    blank = 0
    number = 0
    while True:
        number += 1
        try:
            raw = f.readline(limit + 1)
        except InputError as e:
            raise refused(path, str(e), number) from e
        if not raw:
            return
        if len(raw) > limit:
            raise refused(
                path,
                f"line is over {limit:,} bytes, want at most {limit:,} (MAX_LINE_BYTES)",
                number,
            )
        if not raw.strip(JSON_SPACE_BYTES):
            blank += len(raw)
            if blank > MAX_BLANK_BYTES:
                raise refused(
                    path,
                    f"over {MAX_BLANK_BYTES:,} bytes of blank lines, want at most "
                    f"{MAX_BLANK_BYTES:,} (MAX_BLANK_BYTES): refused as a possible "
                    "decompression bomb",
                    number,
                )
        yield number, raw


# --------------------------------------------------------------------------------------------
# JSON lines: strict decoding


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        keys = [k for k, _ in pairs]
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"duplicate key {dup!r}")
    return out


def strict_decoder() -> json.JSONDecoder:
    """A JSON decoder that refuses duplicate keys and NaN / Infinity (for `decode_line`)."""
    return json.JSONDecoder(object_pairs_hook=_strict_object, parse_constant=reject_constant)


FAST_BRACKETS: Final = 256
"""A line with more opening brackets than this is always decoded by the strict decoder: its
nesting could reach the interpreter's recursion limit, where the two decoders may stop at
different depths."""

_MSGSPEC_JSON: Final = msgspec.json.Decoder()
_MSGSPEC_OUT: Final = msgspec.json.Encoder()


def provable(raw: bytes) -> bool:
    """Whether counting colons can prove a msgspec decoding of ``raw`` whole (`fast_object`,
    ``chat.typed_chat``): no ``\\u003a`` escape may spell a colon, and the nesting stays far
    from the interpreter's recursion limit (`FAST_BRACKETS`)."""
    return raw.count(b"[") + raw.count(b"{") <= FAST_BRACKETS and b"\\u003" not in raw


def fast_object(raw: bytes) -> dict[str, Any] | None:
    """A line's JSON object decoded by msgspec (in C), when that is proved to be the object the
    strict decoder gives; None when it is not proved (then the strict decoder decides).

    msgspec refuses everything the strict decoder refuses (bad UTF-8, lone surrogates, NaN and
    Infinity, trailing text, control characters in strings, integers past 4,300 digits) and gives
    the same values (key order, big integers, floats, null), with one exception: of a key given
    twice in an object it keeps the last value silently. That is caught by counting colons: in
    JSON text a colon is either a key's or inside a string, so, when no ``\\u003a`` escape
    spells one, the line has as many colons as the object re-encoded (compact, by msgspec) only
    if no pair was lost. Refusals and whatever is not proved go to the strict decoder, so its
    messages are the only ones. Tested against the strict decoder: test_rollout_jsonl_fast.py.
    """
    if not provable(raw):
        return None
    try:
        obj = _MSGSPEC_JSON.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    if type(obj) is not dict or raw.count(b":") != _MSGSPEC_OUT.encode(obj).count(b":"):
        return None
    return obj


_CONSTANT = re.compile(r'"([\w.-]{1,64})"\s*:\s*(?:NaN|-?Infinity)\b', re.ASCII)


def _constant_field(text: str, error: str) -> str:
    """`` (field "score"); write null for a number that is missing`` when a NaN or Infinity
    refused the line and the first such value is a field's with a plain name (as Python's
    ``json.dumps`` writes a NaN float); else nothing."""
    if not error.startswith(("NaN ", "Infinity ", "-Infinity ")):
        return ""
    m = _CONSTANT.search(text)
    where = f' (field "{m.group(1)}")' if m else ""  # a plain ASCII name only
    return f"{where}; write null for a number that is missing"


def decode_line(
    decoder: json.JSONDecoder, raw: bytes, rec: RecordProblems
) -> dict[str, Any] | None:
    """One non-blank line as a JSON object, or None with the problem reported to ``rec``:
    not UTF-8, not JSON, extra data, nested too deeply, a lone surrogate, not an object.
    `fast_object` decodes the lines it can prove equal; the others are decoded by ``decoder``."""
    obj = fast_object(raw)
    if obj is not None:
        return obj
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        rec.error(None, f"not valid UTF-8 ({e.reason} at byte {e.start})")
        return None
    try:
        text = text.strip(_JSON_SPACE)
        obj, end = decoder.raw_decode(text)
        if end != len(text):
            raise ValueError(f"extra data after the JSON value at column {end + 1}")
    except ValueError as e:
        rec.error(None, f"not valid JSON: {e}{_constant_field(text, str(e))}")
        return None
    except RecursionError:
        rec.error(None, "not accepted: JSON nested too deeply")
        return None
    if SURROGATE_ESCAPE.search(text):
        bad = lone_surrogate(obj)
        if bad is not None:
            rec.error(
                None,
                f"not valid Unicode: the string {bad[:40]!r} holds a lone surrogate "
                "(a \\ud800-\\udfff escape without its pair)",
            )
            return None
    if not isinstance(obj, dict):
        rec.error(None, f"JSON {json_type(obj)}, want an object")
        return None
    return obj


def read_position(f: io.BufferedReader) -> int:
    """Bytes of the file read so far through a reader `open_jsonl` gave (a compressed file's
    bytes as stored, ahead of the lines by at most a buffer)."""
    raw = f.raw
    return raw.source.tell() if isinstance(raw, _Decompressed) else f.tell()


def jsonl_objects(
    path: Path, c: ProblemCollector, position: list[Callable[[], int]] | None = None
) -> Iterator[tuple[RecordProblems, dict[str, Any]]]:
    """Each non-blank line of a JSONL file, strictly decoded; bad lines are reported.

    Args:
        path: the file.
        c: where problems go.
        position: when given, receives a function telling `read_position` of the file.
    """
    decoder = strict_decoder()
    with open_jsonl(path, check_end=True) as (_, f):
        if position is not None:
            position.append(lambda: read_position(f))
        try:
            for number, raw in read_lines(f, path):
                if not raw.strip(JSON_SPACE_BYTES):
                    continue
                rec = RecordProblems(number, c)
                obj = decode_line(decoder, raw, rec)
                if obj is not None:
                    yield rec, obj
        except RolloutValidationError as e:
            # The rest of the file cannot be read: report the lines before it, then the cause.
            raise RolloutValidationError(str(path), [*c.problems(), *e.problems]) from e
