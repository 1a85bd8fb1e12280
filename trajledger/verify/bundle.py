"""Evidence bundles: reading one as hostile input, and verifying an artifact from it offline.

Scope: a bundle (``schemas/bundle.v1.md``) is a zstd-compressed ustar/pax tar of regular files:
``bundle.json`` (the index: format, subject, log origin and key, member list with sizes and
SHA-256), ``checkpoint`` (the log's signed checkpoint), ``entries/<i>`` (log entries),
``proofs/<i>.tlog-proof`` (``c2sp.org/tlog-proof@v1`` of each entry against that checkpoint),
optional ``proofs/<n>.consistency`` (a consistency proof from tree size ``n``),
``objects/sha256/<hex>`` (envelopes, manifests, data), ``policy/<i>.json`` (the policy that
trust-policy record ``i`` is about) and, in format 3, ``key-handovers/<n>`` (each rotation of the
log's key, ``verify.log_key``, so that a verifier trusting an earlier key follows it).
`BundleEvidence` implements `verify.evidence.Evidence` over one; `verify_bundle` runs the
lineage verifier on it under a caller's trust policy.

How a bundle is read (`BundleEvidence.open`): one streaming pass, never a whole-file read. The
zstd stream is decompressed through a counter that refuses more than `Limits.total` bytes (and
a first frame declaring more is refused before decompressing); the tar is parsed by the small
strict reader below, not by ``tarfile``, so no header can make it allocate more than
`Limits.pax` bytes. ``bundle.json`` must come first; every later member must be listed in it,
once, with the declared size. Objects are streamed into a private temporary directory (mode
0700) under names derived from their validated digest, never from the member's path; every
other member is small and kept in memory under a per-kind cap. Each member is hashed while it is
read; objects must also hash to their own name. The directory is removed by `close` (use the
evidence as a context manager).

Refused, with a message naming the member: absolute paths, ``..``, any non-canonical spelling,
names outside the layout, symbolic and hard links, devices, directories, FIFOs, GNU and global
pax extensions, duplicate members, members not listed in ``bundle.json``, listed members that
are missing, a size or SHA-256 other than listed, proofs for another checkpoint or entry, and
anything decompressing beyond the limits.

Non-scope: trust. A bundle is an unauthenticated container; what makes its contents believable
is the trust policy's log key over the checkpoint, the Merkle proofs, and the signatures over
envelopes, all checked by `verify.lineage`. ``created`` is informational and not authenticated.
A bundle cannot prove absence: records left out of it (a later revocation) are invisible to it.
Writing bundles is ``ledger.exchange``.

Spec: schemas/bundle.v1.md; c2sp.org/tlog-proof; c2sp.org/tlog-checkpoint; POSIX pax/ustar.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ._jcs import canonical_bytes
from .checkpoint import Checkpoint, verify_checkpoint
from .digest import digest_bytes, parse_digest
from .errors import DigestMismatchError, FormatError, ProofError, ProvenanceError, SignatureError
from .evidence import MAX_BLOB_READ
from .lineage import INFO, OK, LineageVerifier, Node, Record, Report
from .log_entry import LogEntry
from .log_key import HANDOVER_DIR, parse_handover
from .logcheck import check_entries
from .merkle import HASH_SIZE, CompactRange, leaf_hash
from .note import Note, Verifier, b64decode_strict, verifier_from_vkey
from .policy import TrustPolicy, follow_history
from .predicates import RolloutBatch
from .strict_json import load_object
from .tiles import MAX_ENTRY_SIZE
from .tlog_proof import TlogProof

__all__ = [
    "BUNDLE_FORMAT",
    "EXTENSION_FORMAT",
    "HANDOVER_FORMAT",
    "INDEX_NAME",
    "READABLE_FORMATS",
    "BundleEvidence",
    "BundleIndex",
    "Limits",
    "Member",
    "Terms",
    "check_member_name",
    "consistency_proof_bytes",
    "parse_consistency_proof",
    "verify_bundle",
]

BUNDLE_FORMAT = 2
"""The ``format`` of ``bundle.json`` written: 2 adds ``terms`` and ``erased`` to format 1."""

HANDOVER_FORMAT = 3
"""The ``format`` of a bundle that holds ``key-handovers/<n>`` members (a log whose key was
rotated); otherwise as format 2, which is written whenever there are none."""

EXTENSION_FORMAT = 4
"""The ``format`` of an update bundle: it carries the log's extension, every entry since a tree
size the recipient accepted (``extension``), proven by the root they rebuild; its ``subject``
may be null (the extension alone). It may hold key handovers too."""

READABLE_FORMATS = (1, 2, 3, 4)
"""Every ``format`` of ``bundle.json`` this module reads (trajledger 0.1.0 wrote 1)."""

INDEX_NAME = "bundle.json"
CHECKPOINT_NAME = "checkpoint"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_WINDOW = 1 << 27
"""Largest zstd window accepted (128 MiB, zstd's default limit): bounds decompressor memory."""

_BLOCK = 512
_CHUNK = 1 << 20
_DEC = r"(0|[1-9][0-9]{0,19})"
_LAYOUT = re.compile(
    rf"(?P<checkpoint>checkpoint)"
    rf"|entries/(?P<entry>{_DEC})"
    rf"|proofs/(?P<proof>{_DEC})\.tlog-proof"
    rf"|proofs/(?P<consistency>[1-9][0-9]{{0,19}})\.consistency"
    rf"|proofs/(?P<range>[1-9][0-9]{{0,19}})\.range"
    rf"|objects/sha256/(?P<object>[0-9a-f]{{64}})"
    rf"|policy/(?P<policy>{_DEC})\.json"
    rf"|{HANDOVER_DIR}/(?P<handover>[1-9][0-9]{{0,5}})"
)
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_INDEX_KEYS_V1 = frozenset(
    {"format", "subject", "origin", "vkey", "created", "omitted", "members"}
)
_INDEX_KEYS = {1: _INDEX_KEYS_V1, 2: _INDEX_KEYS_V1 | {"terms", "erased"},
               3: _INDEX_KEYS_V1 | {"terms", "erased"},
               4: _INDEX_KEYS_V1 | {"terms", "erased", "extension"}}
_MEMBER_KEYS = frozenset({"name", "size", "sha256"})
_TERMS_KEYS = frozenset({"batch", "licence", "consent", "retention"})
_PAX_KEYS = frozenset({"path", "size"})
_MAX_INT = 2**53 - 1


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


@dataclass(frozen=True)
class Member:
    """One member as listed in ``bundle.json``."""

    name: str
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """The member's object in ``bundle.json``."""
        return {"name": self.name, "sha256": self.sha256, "size": self.size}


@dataclass(frozen=True)
class Terms:
    """The terms a rollout batch travels with, as ``bundle.json`` states them (format 2).

    Copied by the exporter from the batch's signed record; the reader checks them against that
    record (`verify_bundle`), so what a buyer reads in the index is what the vendor signed.
    """

    batch: str
    licence: str | None = None
    consent: str | None = None
    retention: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The object in ``bundle.json``'s ``terms`` (absent values are null)."""
        return {"batch": self.batch, "consent": self.consent, "licence": self.licence,
                "retention": self.retention}

    @classmethod
    def from_json(cls, obj: object, what: str) -> Terms:
        """Read one ``terms`` object strictly.

        Raises:
            FormatError: other members, a bad digest, a value neither a string nor null.
        """
        if not isinstance(obj, dict) or set(obj) != _TERMS_KEYS:
            raise FormatError(f"{what}: must have exactly batch, consent, licence, retention")
        parse_digest(obj["batch"], f"{what}: batch")
        for k in ("licence", "consent", "retention"):
            if obj[k] is not None and not isinstance(obj[k], str):
                raise FormatError(f"{what}: {k} must be a string or null")
        return cls(obj["batch"], obj["licence"], obj["consent"], obj["retention"])

    def describe(self) -> str:
        """``licence X, consent Y, retention Z`` (``none`` for absent values)."""
        return ", ".join(f"{k} {v if v is not None else 'none'}" for k, v in (
            ("licence", self.licence), ("consent", self.consent), ("retention", self.retention)))


def check_member_name(name: str) -> tuple[str, str]:
    """Check a member name is canonical and in the bundle layout.

    Returns:
        ``(kind, key)``: kind one of ``index checkpoint entry proof consistency object policy
        handover`` and key the index, size or hex digest the name carries ("" for the first two).

    Raises:
        FormatError: an absolute path, a ``..`` or ``.`` segment, a backslash, NUL or other
            control character, a non-ASCII or empty name, an empty segment, or a name outside
            the layout (which also refuses leading zeros and upper-case hex).
    """
    what = f"member {name!r}"
    if not name:
        raise FormatError("member with an empty name")
    if name.startswith("/"):
        raise FormatError(f"{what}: absolute path")
    segments = name.split("/")
    if ".." in segments:
        raise FormatError(f"{what}: path escapes the bundle ('..')")
    if not name.isascii() or any(c < " " or c == "\x7f" or c == "\\" for c in name):
        raise FormatError(f"{what}: non-canonical name (non-ASCII, control or backslash)")
    if "." in segments or "" in segments:
        raise FormatError(f"{what}: non-canonical name (empty or '.' segment)")
    if name == INDEX_NAME:
        return "index", ""
    m = _LAYOUT.fullmatch(name)
    if m is None:
        raise FormatError(f"{what}: not in the bundle layout (see schemas/bundle.v1.md)")
    kind = next(k for k, v in m.groupdict().items() if v is not None)
    return kind, "" if kind == "checkpoint" else m.group(kind)


def _check_time(value: object, what: str) -> str:
    if not isinstance(value, str) or not _TIME.fullmatch(value):
        raise FormatError(f"{what}: {value!r} is not YYYY-MM-DDTHH:MM:SSZ")
    try:
        dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError as e:
        raise FormatError(f"{what}: {value!r} is not a valid date and time") from e
    return value


@dataclass(frozen=True)
class BundleIndex:
    """``bundle.json``: what the bundle claims to hold. Nothing in it is trusted by itself.

    Attributes:
        subject: ``sha256:<hex>`` of the artifact the bundle is evidence for.
        origin: the log's origin (must be the checkpoint's).
        vkey: the log's verifier key (must verify the checkpoint; the policy decides trust).
        created: when the bundle was written, UTC (informational, unauthenticated).
        members: every member but ``bundle.json``, sorted by name.
        omitted: data blobs the lineage uses that were left out (export ``--no-data``).
        terms: (format 2) each rollout batch of the lineage with the licence, consent and
            retention its signed record states, sorted by batch digest.
        erased: (format 2) data blobs of the lineage that a verified erasure deleted: not in
            the bundle, by law rather than by choice, sorted.
        format: 1 (trajledger 0.1.0; no terms, no erased), 2, 3 (2 with key handovers) or 4
            (an update: the log's extension).
        extension: (format 4) the tree size from which the bundle holds every entry of the
            log up to its checkpoint; None in other formats.
    """

    subject: str | None
    origin: str
    vkey: str
    created: str
    members: tuple[Member, ...]
    omitted: tuple[str, ...] = ()
    format: int = BUNDLE_FORMAT
    terms: tuple[Terms, ...] = ()
    erased: tuple[str, ...] = ()
    extension: int | None = None
    by_name: dict[str, Member] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Check every field, so that an invalid index cannot exist.

        Raises:
            FormatError: a field is not what the format allows.
        """
        what = INDEX_NAME
        if type(self.format) is not int or self.format not in READABLE_FORMATS:
            raise FormatError(
                f"{what}: format {self.format!r}, want one of {list(READABLE_FORMATS)} (a newer "
                "trajledger wrote it? upgrade the verifier)"
            )
        if self.format == 1 and (self.terms or self.erased):
            raise FormatError(f"{what}: format 1 has no terms or erased")
        if (self.format == EXTENSION_FORMAT) != (self.extension is not None) or (
                self.extension is not None
                and (type(self.extension) is not int or not 0 <= self.extension <= _MAX_INT)):
            raise FormatError(f"{what}: extension {self.extension!r}: format "
                              f"{EXTENSION_FORMAT} has an extension (a tree size), no other "
                              "format has one")
        if self.subject is not None or self.format != EXTENSION_FORMAT:
            parse_digest(self.subject, f"{what}: subject")
        if not isinstance(self.origin, str) or not self.origin:
            raise FormatError(f"{what}: origin must be a non-empty string")
        if not isinstance(self.vkey, str):
            raise FormatError(f"{what}: vkey must be a string")
        _check_time(self.created, f"{what}: created")
        names = [m.name for m in self.members]
        for i, m in enumerate(self.members):
            try:
                kind, _ = check_member_name(m.name)
            except FormatError as e:
                raise FormatError(f"{what}: {e}") from e
            if kind == "index":
                raise FormatError(f"{what}: lists itself as a member")
            if kind == "handover" and self.format < HANDOVER_FORMAT:
                raise FormatError(
                    f"{what}: member {m.name}: key handovers need format {HANDOVER_FORMAT}"
                )
            if kind == "range" and m.name != f"proofs/{self.extension}.range":
                raise FormatError(f"{what}: member {m.name}: a compact range only for the "
                                  f"extension's first size ({self.extension})")
            if type(m.size) is not int or not 0 <= m.size <= _MAX_INT:
                raise FormatError(f"{what}: member {m.name}: size {m.size!r}, want 0..2^53-1")
            if not isinstance(m.sha256, str) or not _HEX64.fullmatch(m.sha256):
                raise FormatError(f"{what}: member {m.name}: sha256 must be 64 lowercase hex")
            if i and names[i - 1] >= m.name:
                problem = "listed twice" if names[i - 1] == m.name else "out of order"
                raise FormatError(f"{what}: member {m.name}: {problem} (want sorted, unique)")
        for i, d in enumerate(self.omitted):
            parse_digest(d, f"{what}: omitted[{i}]")
            if i and self.omitted[i - 1] >= d:
                raise FormatError(f"{what}: omitted digests must be sorted and unique")
        for i, d in enumerate(self.erased):
            parse_digest(d, f"{what}: erased[{i}]")
            if i and self.erased[i - 1] >= d:
                raise FormatError(f"{what}: erased digests must be sorted and unique")
        for i, t in enumerate(self.terms):
            if i and self.terms[i - 1].batch >= t.batch:
                raise FormatError(f"{what}: terms must be sorted by batch, one per batch")
        if self.format == HANDOVER_FORMAT and not any(
            n.startswith(HANDOVER_DIR + "/") for n in names
        ):
            raise FormatError(f"{what}: format {HANDOVER_FORMAT} without key handovers")
        object.__setattr__(self, "by_name", {m.name: m for m in self.members})
        for d in self.omitted:
            if f"objects/sha256/{d[7:]}" in self.by_name:
                raise FormatError(f"{what}: {d} is both a member and omitted")
        for d in self.erased:
            if f"objects/sha256/{d[7:]}" in self.by_name or d in self.omitted:
                raise FormatError(f"{what}: {d} is listed as erased and also present or omitted")

    def to_bytes(self) -> bytes:
        """The canonical (RFC 8785) bytes of ``bundle.json``: the only encoding."""
        obj: dict[str, Any] = {
            "created": self.created,
            "format": self.format,
            "members": [m.to_json() for m in self.members],
            "omitted": list(self.omitted),
            "origin": self.origin,
            "subject": self.subject,
            "vkey": self.vkey,
        }
        if self.format >= 2:
            obj["terms"] = [t.to_json() for t in self.terms]
            obj["erased"] = list(self.erased)
        if self.format >= EXTENSION_FORMAT:
            obj["extension"] = self.extension
        return canonical_bytes(obj, INDEX_NAME)

    @classmethod
    def from_bytes(cls, data: bytes) -> BundleIndex:
        """Parse ``bundle.json`` strictly: exact members, canonical bytes.

        Raises:
            FormatError: not strict JSON, missing or unknown members, invalid values, or bytes
                other than the canonical encoding.
        """
        obj = load_object(data, INDEX_NAME)
        fmt = obj.get("format")
        if type(fmt) is not int or fmt not in READABLE_FORMATS:
            raise FormatError(
                f"{INDEX_NAME}: format {fmt!r}, want one of {list(READABLE_FORMATS)} (a newer "
                "trajledger wrote it? upgrade the verifier)"
            )
        keys = _INDEX_KEYS[fmt]
        if set(obj) != keys:
            missing, extra = sorted(keys - set(obj)), sorted(set(obj) - keys)
            raise FormatError(f"{INDEX_NAME}: missing {missing}, unknown {extra}")
        raw_members = obj["members"]
        if not isinstance(raw_members, list):
            raise FormatError(f"{INDEX_NAME}: members must be a list")
        members = []
        for i, m in enumerate(raw_members):
            if not isinstance(m, dict) or set(m) != _MEMBER_KEYS:
                raise FormatError(
                    f"{INDEX_NAME}: members[{i}] must have exactly name, sha256, size"
                )
            if not isinstance(m["name"], str):
                raise FormatError(f"{INDEX_NAME}: members[{i}].name must be a string")
            members.append(Member(m["name"], m["size"], m["sha256"]))
        omitted = obj["omitted"]
        if not isinstance(omitted, list):
            raise FormatError(f"{INDEX_NAME}: omitted must be a list")
        raw_terms = obj.get("terms", [])
        erased = obj.get("erased", [])
        if not isinstance(raw_terms, list) or not isinstance(erased, list):
            raise FormatError(f"{INDEX_NAME}: terms and erased must be lists")
        index = cls(
            subject=obj["subject"],
            origin=obj["origin"],
            vkey=obj["vkey"],
            created=obj["created"],
            members=tuple(members),
            omitted=tuple(omitted),
            format=fmt,
            terms=tuple(
                Terms.from_json(t, f"{INDEX_NAME}: terms[{i}]") for i, t in enumerate(raw_terms)
            ),
            erased=tuple(erased),
            extension=obj.get("extension"),
        )
        if index.to_bytes() != data:
            raise FormatError(f"{INDEX_NAME}: not in canonical form (RFC 8785, no whitespace)")
        return index


def consistency_proof_bytes(proof: list[bytes]) -> bytes:
    """A ``proofs/<n>.consistency`` member: one standard base64 hash per line, each ending LF."""
    import base64

    return b"".join(base64.b64encode(h) + b"\n" for h in proof)


def parse_consistency_proof(data: bytes, what: str) -> list[bytes]:
    """Parse a ``.consistency`` member strictly.

    Raises:
        FormatError: not LF-terminated lines of canonical base64 of 32 bytes, empty, or more
            than 64 lines.
    """
    if not data or not data.endswith(b"\n"):
        raise FormatError(f"{what}: want one base64 hash per line, each ending in a newline")
    lines = data[:-1].split(b"\n")
    if len(lines) > 64:
        raise FormatError(f"{what}: {len(lines)} hashes, want at most 64")
    out = []
    for i, line in enumerate(lines):
        try:
            text = line.decode("ascii")
        except UnicodeDecodeError as e:
            raise FormatError(f"{what}: line {i + 1} is not ASCII") from e
        h = b64decode_strict(text, f"{what}: line {i + 1}")
        if len(h) != HASH_SIZE:
            raise FormatError(f"{what}: line {i + 1} holds {len(h)} bytes, want {HASH_SIZE}")
        out.append(h)
    return out


# -- the stream: bounded zstd, strict tar -----------------------------------------------------


class _Bounded:
    """A reader that refuses to deliver more than ``limit`` bytes in total."""

    def __init__(
        self, raw: Any, limit: int, what: str, errors: tuple[type[BaseException], ...]
    ) -> None:
        self.raw = raw
        self.limit = limit
        self.count = 0
        self.what = what
        self.errors = errors

    def read(self, n: int) -> bytes:
        try:
            data: bytes = self.raw.read(n)
        except self.errors as e:
            raise FormatError(f"{self.what}: corrupt zstd stream: {e}") from e
        self.count += len(data)
        if self.count > self.limit:
            raise FormatError(
                f"{self.what}: decompresses to more than {self.limit} bytes (the limit); "
                "refusing a possible decompression bomb"
            )
        return data

    def exact(self, n: int, what: str) -> bytes:
        parts = []
        left = n
        while left:
            chunk = self.read(min(left, _CHUNK))
            if not chunk:
                raise FormatError(f"{what}: truncated ({n - left} of {n} bytes)")
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)


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


@dataclass(frozen=True)
class _Header:
    name: str
    size: int


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
            raise FormatError(f"{what}: pax key {k!r} is not allowed (only path and size)")
        if k in out:
            raise FormatError(f"{what}: pax key {k!r} appears twice")
        out[k] = v
    return out


def _tar_headers(stream: _Bounded, limits: Limits, what: str) -> Iterator[_Header]:
    """Yield each regular member's header; the caller must then read exactly its content.

    Steps:
        1. Read a 512-byte header; two zero blocks end the archive, and only zero padding may
           follow them.
        2. Check the ustar magic and version and the header checksum.
        3. A pax extended header (type ``x``, at most ``limits.pax`` bytes, keys ``path`` and
           ``size`` only) applies to the next header, which must be a regular file.
        4. Refuse every type but a regular file, naming what it is; refuse a link name.
    """
    pax: dict[str, str] | None = None
    number = 0
    while True:
        # (1)
        block = stream.exact(_BLOCK, f"{what}: tar header {number}")
        if block == bytes(_BLOCK):
            second = stream.exact(_BLOCK, f"{what}: tar end-of-archive")
            if second != bytes(_BLOCK) or pax is not None:
                raise FormatError(f"{what}: malformed end of the tar archive")
            while tail := stream.read(_CHUNK):
                if tail.count(0) != len(tail):
                    raise FormatError(f"{what}: data after the end of the tar archive")
            return
        # (2)
        here = f"{what}: tar header {number}"
        if block[257:263] != b"ustar\x00" or block[263:265] != b"00":
            raise FormatError(f"{here}: not a POSIX ustar/pax header")
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
            stream.exact(-size % _BLOCK, here)
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
        yield _Header(name, size)


def _open_zstd(path: Path, limits: Limits) -> tuple[IO[bytes], _Bounded]:
    """Open ``path`` as a bounded decompressed stream (the caller closes the file)."""
    try:
        import zstandard
    except ImportError as e:
        raise OSError(
            "reading a bundle needs the 'zstandard' package (pip install zstandard)"
        ) from e
    what = f"bundle {path.name}"
    fh = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    try:
        head = fh.read(18)
        if head[:4] != ZSTD_MAGIC:
            raise FormatError(f"{what}: not zstd-compressed (magic {head[:4].hex()})")
        try:
            declared = zstandard.get_frame_parameters(head).content_size
        except zstandard.ZstdError as e:
            raise FormatError(f"{what}: corrupt zstd frame header: {e}") from e
        if 0 <= declared < (1 << 63) and declared > limits.total:
            raise FormatError(
                f"{what}: zstd frame declares {declared} bytes, more than the limit {limits.total}"
            )
        fh.seek(0)
        dctx = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)
        reader = dctx.stream_reader(fh, read_size=_CHUNK, read_across_frames=True)
    except BaseException:
        fh.close()
        raise
    return fh, _Bounded(reader, limits.total, what, (zstandard.ZstdError,))


# -- the evidence ------------------------------------------------------------------------------


class BundleEvidence:
    """`verify.evidence.Evidence` over an exported bundle. Build it with `open`.

    After `open` returned, the bundle is well formed: every member is listed, hashes as listed,
    and sits where the layout says; objects hash to their names; every entry has a proof of
    inclusion under the bundled checkpoint and that proof holds; the checkpoint is signed by the
    vkey the index names. None of that is trust: the policy's log key, the signatures and the
    lineage rules are `verify_bundle`'s.

    Attributes:
        path: the bundle file.
        index: the parsed ``bundle.json``.
        checkpoint: the bundled checkpoint (signature checked against ``index.vkey`` only).
        touched_entries: entry indices whose proofs a verifier asked for.
        touched_blobs: digests a verifier asked for.
    """

    def __init__(self) -> None:
        """Use `BundleEvidence.open`."""
        self.path = Path()
        self.index: BundleIndex
        self.checkpoint: Checkpoint
        self._note = b""
        self._entries: dict[int, bytes] = {}
        self._proofs: dict[int, TlogProof] = {}
        self._consistency: dict[int, list[bytes]] = {}
        self._policies: dict[int, bytes] = {}
        self._handovers: dict[int, bytes] = {}
        self._range: list[bytes] = []
        self._objects: dict[str, Path] = {}
        self._dir: Path | None = None
        self._cleanup: Callable[[], None] = lambda: None
        self.touched_entries: set[int] = set()
        self.touched_blobs: set[str] = set()

    # -- opening --------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        limits: Limits | None = None,
        workdir: Path | None = None,
    ) -> BundleEvidence:
        """Read and check a bundle; objects go to a private temporary directory.

        Steps:
            1. Open the zstd stream with its bounds (a first frame declaring more than
               ``limits.total`` is refused unread).
            2. Read the tar: ``bundle.json`` first (parsed strictly, its sizes summed against
               the limits), then each member: listed, not seen before, of the listed size,
               within its kind's cap; hash it while reading it.
            3. After the stream: every listed member arrived; every hash matched (all
               mismatches are reported together); objects hash to their names.
            4. Cross-check the members (`_check_members`).

        Args:
            path: the bundle file.
            limits: bounds on sizes; default `Limits()`.
            workdir: where to make the temporary directory (default: the system's).

        Raises:
            FormatError: the bundle is malformed, hostile, or larger than the limits.
            DigestMismatchError: a member does not hash as listed.
            ProofError: an entry is not included under the bundled checkpoint.
            SignatureError: the checkpoint is not signed by the index's vkey.
            OSError: the file cannot be read, or zstandard is not installed.
        """
        limits = limits or Limits()
        self = cls()
        self.path = Path(path)
        what = f"bundle {self.path.name}"
        self._dir = Path(tempfile.mkdtemp(prefix="trajledger-bundle-", dir=workdir))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True)
        try:
            # (1)
            fh, stream = _open_zstd(self.path, limits)
            with fh:
                self._read_members(stream, limits, what)
            # (4)
            self._check_members(what)
        except BaseException:
            self.close()
            raise
        return self

    def _read_members(self, stream: _Bounded, limits: Limits, what: str) -> None:
        # (2)
        seen: set[str] = set()
        mismatches: list[str] = []
        index: BundleIndex | None = None
        small: dict[str, bytes] = {}
        assert self._dir is not None
        objects_dir = self._dir / "objects"
        objects_dir.mkdir(mode=0o700)
        for header in _tar_headers(stream, limits, what):
            name = header.name
            kind, key = check_member_name(name)
            here = f"{what}: member {name}"
            if name in seen:
                raise FormatError(f"{here}: appears twice (duplicate member)")
            seen.add(name)
            if index is None:
                if kind != "index":
                    raise FormatError(f"{here}: the first member must be {INDEX_NAME}")
                if header.size > limits.index:
                    raise FormatError(f"{here}: {header.size} bytes, limit {limits.index}")
                index = self._read_index(stream.exact(header.size, here), limits, what)
                stream.exact(-header.size % _BLOCK, here)
                # Objects go to disk: refuse before writing any when they cannot fit.
                need = sum(m.size for m in index.members if m.name.startswith("objects/"))
                free = shutil.disk_usage(objects_dir).free
                if need > free:
                    raise OSError(
                        f"{what}: its objects need {need} bytes of temporary space, "
                        f"{free} are free in {objects_dir.parent.parent}; set TMPDIR to a "
                        "larger disk"
                    )
                continue
            listed = index.by_name.get(name)
            if listed is None:
                raise FormatError(f"{here}: not listed in {INDEX_NAME} (extra member)")
            if header.size != listed.size:
                raise FormatError(f"{here}: {header.size} bytes, {INDEX_NAME} says {listed.size}")
            if header.size > limits.cap(kind):
                raise FormatError(f"{here}: {header.size} bytes, limit {limits.cap(kind)}")
            h = hashlib.sha256()
            if kind == "object":
                target = objects_dir / key
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    left = header.size
                    while left:
                        chunk = stream.exact(min(left, _CHUNK), here)
                        h.update(chunk)
                        out.write(chunk)
                        left -= len(chunk)
                self._objects["sha256:" + key] = target
            else:
                data = stream.exact(header.size, here)
                h.update(data)
                small[name] = data
            pad = stream.exact(-header.size % _BLOCK, here)
            if pad.count(0) != len(pad):
                raise FormatError(f"{here}: non-zero tar padding")
            got = h.hexdigest()
            if got != listed.sha256:
                mismatches.append(
                    f"{here}: content hashes to sha256:{got[:16]}…, {INDEX_NAME} says "
                    f"sha256:{listed.sha256[:16]}…"
                )
            elif kind == "object" and got != key:
                mismatches.append(f"{here}: content hashes to sha256:{got[:16]}…, not its name")
        if index is None:
            raise FormatError(f"{what}: empty archive, no {INDEX_NAME}")
        # (3)
        missing = [n for n in index.by_name if n not in seen]
        if missing:
            raise FormatError(
                "\n".join(
                    f"{what}: member {n}: listed in {INDEX_NAME} but missing" for n in missing
                )
                + ("\n" + "\n".join(mismatches) if mismatches else "")
            )
        if mismatches:
            raise DigestMismatchError("\n".join(mismatches), subject=what)
        self.index = index
        self._sort_small(small)

    @staticmethod
    def _read_index(data: bytes, limits: Limits, what: str) -> BundleIndex:
        try:
            index = BundleIndex.from_bytes(data)
        except FormatError as e:
            raise FormatError(f"{what}: member {e}") from e
        if len(index.members) + 1 > limits.members:
            raise FormatError(
                f"{what}: {INDEX_NAME} lists {len(index.members)} members, limit {limits.members}"
            )
        total = sum(m.size for m in index.members)
        if total > limits.total:
            raise FormatError(
                f"{what}: {INDEX_NAME} declares {total} bytes of members, limit {limits.total}"
            )
        in_memory = 0
        for m in index.members:
            kind, _ = check_member_name(m.name)
            if m.size > limits.cap(kind):
                raise FormatError(
                    f"{what}: member {m.name}: {INDEX_NAME} declares {m.size} bytes, "
                    f"limit {limits.cap(kind)}"
                )
            in_memory += m.size if kind != "object" else 0
        if in_memory > limits.memory:
            raise FormatError(
                f"{what}: {INDEX_NAME} declares {in_memory} bytes of entries, proofs and "
                f"policies, limit {limits.memory}"
            )
        return index

    def _sort_small(self, small: dict[str, bytes]) -> None:
        for name, data in small.items():
            kind, key = check_member_name(name)
            if kind == "checkpoint":
                self._note = data
            elif kind == "entry":
                self._entries[int(key)] = data
            elif kind == "proof":
                try:
                    proof = TlogProof.from_bytes(data)
                except FormatError as e:
                    raise FormatError(f"bundle {self.path.name}: member {name}: {e}") from e
                self._proofs[int(key)] = proof
            elif kind == "consistency":
                self._consistency[int(key)] = parse_consistency_proof(
                    data, f"bundle {self.path.name}: member {name}"
                )
            elif kind == "policy":
                self._policies[int(key)] = data
            elif kind == "handover":
                self._handovers[int(key)] = data
            elif kind == "range":
                self._range = parse_consistency_proof(
                    data, f"bundle {self.path.name}: member {name}")

    def _check_members(self, what: str) -> None:
        """Cross-check the members against each other.

        Steps:
            1. The checkpoint parses, its origin is the index's, and the index's vkey (named
               after that origin) verifies its signature.
            2. Each entry below the extension (all of them, without one) has a proof, and each
               proof is for a bundled entry, at its index, against the bundled checkpoint byte
               for byte.
            3. The entries pass the one chain-and-root checker (`verify.logcheck.check_entries`):
               each parses and lies inside the tree, neighbours chain by ``prev``, each is
               included under the checkpoint; the extension's entries (every one from its first
               size on) extend its compact range (``proofs/<n>.range``) to the root.
            4. Each consistency proof starts from a size below the checkpoint's.
            5. Each ``policy/<i>.json`` is the preimage of trust-policy entry ``i``'s subject
               and parses as a policy; every bundled trust-policy entry has one.
            6. No omitted digest is also present.
            7. The key handovers are numbered 1, 2, ... without a gap, and each parses and is
               signed by both keys it names (``verify.log_key.parse_handover``; whether the
               verifier trusts any of those keys is its policy's business).
        """
        index = self.index
        # (1)
        here = f"{what}: member {CHECKPOINT_NAME}"
        if not self._note:
            raise FormatError(f"{here}: missing or empty")
        try:
            self.checkpoint = Checkpoint.from_text(Note.from_bytes(self._note).text)
        except FormatError as e:
            raise FormatError(f"{here}: {e}") from e
        if self.checkpoint.origin != index.origin:
            raise FormatError(
                f"{here}: origin {self.checkpoint.origin!r}, {INDEX_NAME} says {index.origin!r}"
            )
        try:
            verifier: Verifier = verifier_from_vkey(index.vkey)
        except FormatError as e:
            raise FormatError(f"{what}: {INDEX_NAME}: vkey: {e}") from e
        try:
            verify_checkpoint(self._note, verifier, origin=index.origin)
        except ProvenanceError as e:
            raise SignatureError(f"{here}: not signed by the log key in {INDEX_NAME}: {e}") from e
        size = self.checkpoint.size
        # (2)
        ext = index.extension
        if ext is not None and (ext > size or bool(ext) != bool(self._range)):
            raise FormatError(f"{what}: {INDEX_NAME}: an extension from size {ext} needs "
                              f"proofs/{ext}.range (none from 0) and a checkpoint of at least "
                              f"that size (it has {size})")
        for i in sorted(self._entries):
            if i not in self._proofs and (ext is None or i < ext):
                raise FormatError(f"{what}: member entries/{i}: has no proofs/{i}.tlog-proof")
        for i, proof in sorted(self._proofs.items()):
            where = f"{what}: member proofs/{i}.tlog-proof"
            if i not in self._entries:
                raise FormatError(f"{where}: proves entries/{i}, which the bundle does not hold")
            if proof.index != i:
                raise ProofError(f"{where}: is for entry {proof.index}, want {i}")
            if proof.checkpoint != self._note:
                raise ProofError(
                    f"{where}: proves against another checkpoint, not the bundle's "
                    f"(size {size}, root {self.checkpoint.root.hex()[:16]}…)"
                )
        # (3)
        findings = check_entries(
            self._entries,
            size,
            self.checkpoint.root,
            lambda i: self._proofs[i].inclusion,
            name=lambda i: f"entries/{i} and proofs/{i}.tlog-proof",
            start=self.extension(),
        )
        if findings:
            raise ProofError(f"{what}: members {findings[0].file}: {findings[0].message}")
        parsed = {i: LogEntry.from_bytes(data) for i, data in self._entries.items()}
        # (4)
        for old in self._consistency:
            if old >= size:
                raise FormatError(
                    f"{what}: member proofs/{old}.consistency: from size {old}, not below the "
                    f"checkpoint's {size}"
                )
        # (5)
        for i, data in sorted(self._policies.items()):
            where = f"{what}: member policy/{i}.json"
            entry = parsed.get(i)
            if entry is None or entry.kind != "trust-policy":
                raise FormatError(f"{where}: entries/{i} is not a bundled trust-policy record")
            if digest_bytes(data) != entry.subject:
                raise DigestMismatchError(
                    f"{where}: hashes to {digest_bytes(data)[:23]}…, want the subject of "
                    f"entries/{i}, {entry.subject[:23]}…",
                    subject=where,
                    expected=entry.subject,
                    observed=digest_bytes(data),
                )
            try:
                TrustPolicy.from_json(load_object(data, where), where)
            except FormatError as e:
                raise FormatError(str(e)) from e
        for i, entry in parsed.items():
            if entry.kind == "trust-policy" and i not in self._policies:
                raise FormatError(
                    f"{what}: member entries/{i}: trust-policy record without policy/{i}.json"
                )
        # (6)
        for d in index.omitted:
            if d in self._objects:
                raise FormatError(f"{what}: {INDEX_NAME}: {d} is omitted but present")
        # (7)
        if sorted(self._handovers) != list(range(1, len(self._handovers) + 1)):
            raise FormatError(f"{what}: key handovers are not numbered 1..{len(self._handovers)}")
        for n, data in sorted(self._handovers.items()):
            where = f"{what}: member {HANDOVER_DIR}/{n}"
            parse_handover(data, where)

    # -- lifetime -------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove the temporary directory (idempotent)."""
        self._cleanup()
        self._objects = {}

    def __enter__(self) -> BundleEvidence:
        """Use the evidence in a ``with`` block; it is closed at the end."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the evidence."""
        self.close()

    # -- what the bundle holds ------------------------------------------------------------------

    @property
    def subject(self) -> str | None:
        """The digest the bundle is evidence for (None: an update bundle of the extension
        alone)."""
        return self.index.subject

    @property
    def objects(self) -> dict[str, Path]:
        """Digest to extracted file, for every object member (valid until `close`)."""
        return dict(self._objects)

    def entry_bytes(self, index: int) -> bytes | None:
        """The bundled entry at ``index``, or None."""
        return self._entries.get(index)

    def tlog_proof(self, index: int) -> TlogProof | None:
        """The bundled proof of entry ``index``, or None."""
        return self._proofs.get(index)

    def policy_records(self) -> list[tuple[int, str, bytes | None]]:
        """``(index, subject, envelope bytes or None)`` of each bundled trust-policy record."""
        out = []
        for i in sorted(self._policies):
            entry = LogEntry.from_bytes(self._entries[i])
            out.append((i, entry.subject, self.blob(entry.envelope)))
        return out

    def key_handovers(self) -> list[bytes]:
        """The bundled key handover notes, in order (format 3; empty otherwise)."""
        return [self._handovers[n] for n in sorted(self._handovers)]

    def extension(self) -> CompactRange | None:
        """The compact range the extension starts from (format 4; None otherwise): every entry
        from its size to the checkpoint's is bundled, and they rebuild the root from it."""
        ext = self.index.extension
        return None if ext is None else CompactRange(ext, tuple(self._range))

    def root_at(self, size: int) -> bytes | None:
        """The root of the log's first ``size`` entries, rebuilt from the extension (checked
        against the checkpoint when the bundle was opened); None when the extension does not
        cover ``size``."""
        ext = self.extension()
        if ext is None or not ext.size <= size <= self.checkpoint.size:
            return None
        return ext.extend([leaf_hash(self._entries[i]) for i in range(ext.size, size)]).root()

    def unused(self) -> list[str]:
        """Members no verifier has asked for (entries, objects, omitted digests), by name."""
        out = [f"entries/{i}" for i in sorted(self._entries) if i not in self.touched_entries]
        out += [
            f"objects/sha256/{d[7:]}" for d in sorted(self._objects) if d not in self.touched_blobs
        ]
        out += [f"omitted {d}" for d in self.index.omitted if d not in self.touched_blobs]
        out += [f"erased {d}" for d in self.index.erased if d not in self.touched_blobs]
        return out

    # -- the Evidence protocol ------------------------------------------------------------------

    def checkpoint_note(self) -> bytes:
        """The bundled checkpoint note."""
        return self._note

    def entries(self) -> Iterator[tuple[int, bytes]]:
        """The bundled entries only, in index order."""
        yield from sorted(self._entries.items())

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """The bundled proof of ``index`` (bundles hold proofs at their checkpoint's size only);
        for an entry of the extension, the proof its compact range and entries give.

        Raises:
            FileNotFoundError: no proof for that entry at that size.
        """
        proof = self._proofs.get(index)
        ext = self.extension()
        if size == self.checkpoint.size and proof is None and ext is not None \
                and ext.size <= index < size:
            self.touched_entries.add(index)
            leaves = [leaf_hash(self._entries[i]) for i in range(ext.size, size)]
            return ext.inclusion_proof(leaves, index)
        if proof is None or size != self.checkpoint.size:
            raise FileNotFoundError(
                f"the bundle holds no inclusion proof of entry {index} at size {size}"
            )
        self.touched_entries.add(index)
        return list(proof.inclusion)

    def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        """A bundled consistency proof from ``old_size`` to the checkpoint's size.

        Raises:
            FileNotFoundError: the bundle holds none for these sizes.
        """
        proof = self._consistency.get(old_size)
        if proof is None or new_size != self.checkpoint.size:
            raise FileNotFoundError(
                f"the bundle holds no consistency proof from size {old_size} to {new_size} "
                f"(export it with --consistency-from {old_size})"
            )
        return list(proof)

    def blob_path(self, digest: str) -> Path | None:
        """The extracted file of an object member; None when absent or omitted."""
        parse_digest(digest, "blob digest")
        self.touched_blobs.add(digest)
        return self._objects.get(digest)

    def has_blob(self, digest: str) -> bool:
        """True when the object is bundled, or listed as omitted by ``--no-data``.

        An omitted blob counts as present for presence checks: its digest is bound by a
        verified manifest, and `verify_bundle` reports that the data was not exported.
        """
        parse_digest(digest, "blob digest")
        self.touched_blobs.add(digest)
        return digest in self._objects or digest in self.index.omitted

    def omitted(self, digest: str) -> bool:
        """True for a data blob the bundle lists as not exported (``--no-data``)."""
        self.touched_blobs.add(digest)
        return digest in self.index.omitted

    def blob_size(self, digest: str) -> int | None:
        """The size of an object member; None when absent or omitted."""
        path = self.blob_path(digest)
        return None if path is None else path.stat().st_size

    def blob(self, digest: str) -> bytes | None:
        """The bytes of an object member, or None."""
        path = self.blob_path(digest)
        if path is None:
            return None
        if path.stat().st_size > MAX_BLOB_READ:
            raise FormatError(f"blob {digest}: larger than {MAX_BLOB_READ} bytes")
        return path.read_bytes()


# -- verification -------------------------------------------------------------------------------


def verify_bundle(
    evidence: BundleEvidence,
    policy: TrustPolicy,
    *,
    now: dt.datetime | None = None,
    data: str = "hash",
    known_checkpoint: bytes | None = None,
) -> Report:
    """Verify the artifact a bundle is for, and its whole lineage, under ``policy``.

    Preconditions: ``evidence`` was opened (`BundleEvidence.open`), so it is well formed.

    Steps:
        1. Follow the trust-policy history the bundle carries, starting from ``policy``
           (`verify.policy.follow_history`): a later policy applies only when the approvers
           of the one before signed it. A trust-policy record whose envelope is missing fails
           the bundle (fail closed: it could be a successor).
        2. Build the lineage verifier on the bundle with the policy in force: it verifies the
           checkpoint by the policy's log key (and witnesses), and the hash chain.
        3. With ``known_checkpoint``: the bundled checkpoint must extend it (a consistency
           proof from the bundle, unless the sizes are equal).
        4. Verify the subject and its lineage (with the policy's ``accepted_licences``, a batch
           under another licence fails).
        5. Check the trust-policy records are included under the verified checkpoint.
        6. Format 2: the terms ``bundle.json`` states are exactly each batch's signed terms,
           and every blob it lists as erased was deleted by a verified erasure.
        7. When everything passed: no member may be unused by the verification (a bundle
           holds the lineage's evidence and nothing else).

    Args:
        evidence: the opened bundle.
        policy: the verifier's trust policy.
        now: the time approvals are judged at (default now).
        data: ``"hash"`` re-hashes data blobs; ``"size"`` compares their sizes only.
        known_checkpoint: a signed checkpoint of the same log seen earlier.

    Returns:
        The report: a graph with a ``bundle`` node, the log and the subject's lineage.
    """
    index = evidence.index
    omitted = len(index.omitted)
    bundle = Node("bundle", "bundle", name=f"bundle {evidence.path.name}")
    bundle.add("members", OK, f"{len(index.members) + 1} members, created {index.created} "
               "(unauthenticated)")
    if omitted:
        bundle.add(
            "data",
            INFO,
            f"{omitted} data blob(s) not included (exported with --no-data): their digests "
            "are bound by the verified manifests; their bytes were not checked",
        )
    # (1)
    records: list[tuple[int, str, bytes]] = []
    for i, about, envelope in evidence.policy_records():
        if envelope is None:
            digest = LogEntry.from_bytes(evidence.entry_bytes(i) or b"").envelope
            bundle.fail(
                "policy history",
                f"trust-policy record {i}: envelope {digest[:19]}… "
                f"(objects/sha256/{digest[7:]}) is missing from the bundle",
            )
        else:
            records.append((i, about, envelope))
    in_force, notes = follow_history(policy, records)
    assert in_force is not None  # a trusted policy was given
    for n in notes:
        bundle.add("policy history", INFO, n)
    # (2)
    verifier = LineageVerifier(evidence, in_force, now=now, data=data)
    # (3)
    if known_checkpoint is not None:
        verifier.check_known_checkpoint(known_checkpoint)
    # (4)
    subject = evidence.subject
    if subject is not None:
        report = verifier.verify(subject)
    else:
        verifier.finish()
        report = verifier.report("bundle", ["log"])
    # (5)
    if verifier.checkpoint is not None:
        for i, _subject, _env in records:
            why = verifier.included(i)
            if why is not None:
                bundle.fail("policy history", f"trust-policy record {i}: {why}")
        _check_extension(evidence, verifier, bundle)
    # (6)
    if index.format >= 2:
        _check_terms(evidence, verifier, report, bundle)
    # (7) The verifier may prove inclusion of many entries at once (when the bundle holds the
    # whole tree it recomputes the root), so what it relied on counts as touched too.
    evidence.touched_entries.update(verifier.used)
    if bundle.ok and all(c.what == "revoked" for _n, checks, _d in report.causes()
                         for c in checks):
        for name in evidence.unused():
            bundle.fail("members", f"member {name} is not used by the lineage of "
                        f"{(subject or 'the extension')[:19]}…")
    verifier.decision(bundle)
    if subject is None:
        return verifier.report("bundle", ["bundle", "log"])
    return verifier.report(subject, ["bundle", "log", subject])


def _check_extension(evidence: BundleEvidence, verifier: LineageVerifier, bundle: Node) -> None:
    """Step 5 of `verify_bundle`, for an update bundle: the extension's entries were proven by
    the root they rebuild (the log's check); each one whose envelope the bundle carries (what
    the log publishes: revocations, erasures, policies) is verified as a record, and what it
    says is listed. The others are other parties' records: hashed, not shown."""
    ext = evidence.extension()
    cp = verifier.checkpoint
    if ext is None or cp is None or not verifier.log.ok:
        return
    evidence.touched_entries.update(range(ext.size, cp.size))
    shown = 0
    for i in range(ext.size, cp.size):
        entry = LogEntry.from_bytes(evidence.entry_bytes(i) or b"")
        if entry.kind == "trust-policy" or entry.envelope not in evidence.objects:
            continue
        shown += 1
        rec = verifier.record(i)
        about = f"about {entry.subject[:19]}…"
        if isinstance(rec, Record):
            reason = getattr(rec.predicate, "reason", None)
            bundle.add(f"{entry.kind} record {i}", INFO, f"{about}: verified"
                       + (f": {reason}" if reason else ""))
        else:
            bundle.add(f"{entry.kind} record {i}", INFO, f"{about}: ignored: {rec.message}")
    bundle.add("extension", OK, f"entries {ext.size}..{cp.size - 1} of the log rebuild its "
               f"root from the tree of size {ext.size}; {shown} with their records")


def _check_terms(
    evidence: BundleEvidence, verifier: LineageVerifier, report: Report, bundle: Node
) -> None:
    """Step 6 of `verify_bundle`: ``bundle.json``'s terms and erased list against the records."""
    index = evidence.index
    stated = {t.batch: t for t in index.terms}
    signed: dict[str, Terms] = {}
    for node in report.nodes.values():
        if node.kind != "rollout-batch":
            continue
        rec = verifier.identity_record(node.id, "rollout-batch")
        if isinstance(rec, Record) and isinstance(rec.predicate, RolloutBatch):
            b = rec.predicate
            signed[node.id] = Terms(node.id, b.licence, b.consent, b.retention)
    for digest, terms in sorted(signed.items()):
        got = stated.get(digest)
        if got is None:
            bundle.fail("terms", f"{INDEX_NAME} states no terms for batch {digest[:19]}…; its "
                        f"signed record states {terms.describe()}")
        elif got != terms:
            bundle.fail("terms", f"{INDEX_NAME} states {got.describe()} for batch "
                        f"{digest[:19]}…; its signed record states {terms.describe()}")
    # Batches a failing subject kept the walk from reaching follow from its failure.
    cause = next((r for r in report.roots if r in report.failing()), None)
    for digest in sorted(set(stated) - set(signed)):
        bundle.fail("terms", f"{INDEX_NAME} states terms for {digest[:19]}…, which is not a "
                    "verified rollout batch of this lineage", cause)
    if signed and set(signed) == set(stated):
        by_licence: dict[str, int] = {}
        for t in signed.values():
            key = t.licence or "none stated"
            by_licence[key] = by_licence.get(key, 0) + 1
        bundle.add("terms", OK, f"{len(signed)} batch(es), as signed: licence "
                   + ", ".join(f"{k} ({n})" for k, n in sorted(by_licence.items())))
    for digest in index.erased:
        if verifier.erased_blob(digest) is None:
            bundle.fail("erased", f"{INDEX_NAME} lists {digest[:19]}… as erased, but no "
                        "verified erasure record of this lineage deleted it")
    if index.erased:
        bundle.add("erased", INFO, f"{len(index.erased)} blob(s) not in the bundle: deleted "
                   "by verified erasure records (their digests still verify)")
