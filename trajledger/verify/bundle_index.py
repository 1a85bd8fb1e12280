"""The bundle index, ``bundle.json``: its format, its members and the bundle's layout.

Scope: `BundleIndex` (what a bundle claims to hold: subject, log origin and key, creation time,
members with sizes and SHA-256, omitted and erased blobs, terms, extension), `Member`, `Terms`,
`check_member_name` (a member name is canonical and in the layout). Every field is checked
when an index is built, so an invalid index cannot exist; `BundleIndex.from_bytes` also
requires the canonical (RFC 8785) bytes (which ``ledger.encode.bundle_index_bytes`` writes).

Non-scope: reading the archive (`verify.bundle_stream`), cross-checking the members and
verifying (`verify.bundle`). Nothing in the index is trusted by itself.

Spec: schemas/bundle.v1.md.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass

from ._jcs import canonical_bytes
from .checkpoint import HANDOVER_DIR
from .digest import HEX64, parse_digest
from .errors import FormatError
from .strict_json import load_object
from .times import parse_time

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
_DEC, _POS = r"(0|[1-9][0-9]{0,19})", r"[1-9][0-9]{0,19}"
# The bundle's member layout, its one source (schemas/bundle.v1.md): each kind of member (but
# bundle.json) and its name's start, key (a regular expression) and end.
LAYOUT = {
    "checkpoint": ("", "checkpoint", ""), "entry": ("entries/", _DEC, ""),
    "proof": ("proofs/", _DEC, r"\.tlog-proof"), "consistency": ("proofs/", _POS, r"\.consistency"),
    "range": ("proofs/", _POS, r"\.range"), "object": ("objects/sha256/", "[0-9a-f]{64}", ""),
    "policy": ("policy/", _DEC, r"\.json"), "handover": (f"{HANDOVER_DIR}/", "[1-9][0-9]{0,5}", ""),
}
_LAYOUT = re.compile("|".join(f"{a}(?P<{kind}>{key}){z}" for kind, (a, key, z) in LAYOUT.items()))
_INDEX_KEYS_V1 = frozenset(
    {"format", "subject", "origin", "vkey", "created", "omitted", "members"}
)
INDEX_KEYS = {1: _INDEX_KEYS_V1, 2: _INDEX_KEYS_V1 | {"terms", "erased"},
              3: _INDEX_KEYS_V1 | {"terms", "erased"},
              4: _INDEX_KEYS_V1 | {"terms", "erased", "extension"}}
"""The members of ``bundle.json`` in each format: exactly these, no more, no fewer."""
_MEMBER_KEYS = frozenset({"name", "size", "sha256"})
_TERMS_KEYS = frozenset({"batch", "licence", "consent", "retention"})
_MAX_INT = 2**53 - 1


@dataclass(frozen=True)
class Member:
    """One member as listed in ``bundle.json``."""

    name: str
    size: int
    sha256: str


# One member as canonical ``bundle.json`` lists it, then the ``,`` or ``]`` after it.
_MEMBER = re.compile(
    rb'{"name":"([^"\\]*)","sha256":"([^"\\]*)","size":(0|[1-9][0-9]{0,15})}([],])')
_CANONICAL = '{"name":…,"sha256":…,"size":…} in canonical form'
_WHOLE = 1 << 20


class Members:
    """The members ``bundle.json`` lists, read from its bytes when used: the parse keeps one
    offset a member (8 bytes), not an object (a hostile index listing 350,000 absent members
    cost 460 MB parsed whole; left23)."""

    def __init__(self, data: bytes, starts: array[int]) -> None:
        self._data, self._starts = data, starts

    def __len__(self) -> int:
        return len(self._starts)

    def __iter__(self) -> Iterator[Member]:
        return (self[i] for i in range(len(self)))

    def __getitem__(self, i: int) -> Member:
        m = _MEMBER.match(self._data, self._starts[i])
        assert m is not None  # (matched when the index was read)
        return Member(m[1].decode("latin-1"), int(m[3]), m[2].decode("latin-1"))


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


def _check_format(fmt: object) -> int:
    if type(fmt) is not int or fmt not in READABLE_FORMATS:
        raise FormatError(f"{INDEX_NAME}: format {fmt!r}, want one of {list(READABLE_FORMATS)} "
                          "(a newer trajledger wrote it? upgrade the verifier)")
    return fmt


def check_member_name(name: str, where: str = "") -> tuple[str, str]:
    """Check a member name is canonical and in the bundle layout; ``where`` starts each
    message (``bundle.json: `` for a listed name).

    Returns:
        ``(kind, key)``: kind one of ``index checkpoint entry proof consistency object policy
        handover`` and key the index, size or hex digest the name carries ("" for the first two).

    Raises:
        FormatError: an absolute path, a ``..`` or ``.`` segment, a backslash, NUL or other
            control character, a non-ASCII or empty name, an empty segment, or a name outside
            the layout (which also refuses leading zeros and upper-case hex).
    """
    what = f"{where}member {name!r}"
    if not name:
        raise FormatError(f"{where}member with an empty name")
    if name.startswith("/"):
        raise FormatError(f"{what}: absolute path")
    segments = name.split("/")
    if ".." in segments:
        raise FormatError(f"{what}: path escapes the bundle ('..')")
    if not (name.isascii() and name.isprintable()) or "\\" in name:  # no control character
        raise FormatError(f"{what}: non-canonical name (non-ASCII, control or backslash)")
    if "." in segments or "" in segments:
        raise FormatError(f"{what}: non-canonical name (empty or '.' segment)")
    if name == INDEX_NAME:
        return "index", ""
    m = _LAYOUT.fullmatch(name)
    if m is None:
        raise FormatError(f"{what}: not in the bundle layout (see schemas/bundle.v1.md)")
    kind = str(m.lastgroup)  # the outermost named group matched (each alternative has one)
    return kind, "" if kind == "checkpoint" else m.group(kind)


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
    members: tuple[Member, ...] | Members
    omitted: tuple[str, ...] = ()
    format: int = BUNDLE_FORMAT
    terms: tuple[Terms, ...] = ()
    erased: tuple[str, ...] = ()
    extension: int | None = None

    def __post_init__(self) -> None:
        """Check every field, so that an invalid index cannot exist.

        Raises:
            FormatError: a field is not what the format allows.
        """
        what = INDEX_NAME
        _check_format(self.format)
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
        parse_time(self.created, f"{what}: created")
        kinds: set[str] = set()
        before = ""
        for m in self.members:
            kind, _ = check_member_name(m.name, f"{what}: ")
            kinds.add(kind)
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
            if not isinstance(m.sha256, str) or not HEX64.fullmatch(m.sha256):
                raise FormatError(f"{what}: member {m.name}: sha256 must be 64 lowercase hex")
            if before >= m.name:
                problem = "listed twice" if before == m.name else "out of order"
                raise FormatError(f"{what}: member {m.name}: {problem} (want sorted, unique)")
            before = m.name
        for key, digests in (("omitted", self.omitted), ("erased", self.erased)):
            for i, d in enumerate(digests):
                parse_digest(d, f"{what}: {key}[{i}]")
                if i and digests[i - 1] >= d:
                    raise FormatError(f"{what}: {key} digests must be sorted and unique")
        for i, t in enumerate(self.terms):
            if i and self.terms[i - 1].batch >= t.batch:
                raise FormatError(f"{what}: terms must be sorted by batch, one per batch")
        if self.format == HANDOVER_FORMAT and "handover" not in kinds:
            raise FormatError(f"{what}: format {HANDOVER_FORMAT} without key handovers")
        for d in self.omitted:
            if self.member(f"objects/sha256/{d[7:]}"):
                raise FormatError(f"{what}: {d} is both a member and omitted")
        for d in self.erased:
            if self.member(f"objects/sha256/{d[7:]}") or d in self.omitted:
                raise FormatError(f"{what}: {d} is listed as erased and also present or omitted")

    @classmethod
    def from_bytes(cls, data: bytes) -> BundleIndex:
        """Parse ``bundle.json`` strictly: exact members, canonical bytes.

        Raises:
            FormatError: not strict JSON, missing or unknown members, invalid values, or bytes
                other than the canonical encoding.
        """
        # Canonical JSON lists the members after "format" (the keys before it hold no ',"'
        # outside a nested object, and none holds one): each is matched in place, kept as its
        # offset; the rest is parsed without them.
        raw, pos = data, data.find(b',"members":[')
        starts, at = array("Q"), pos + 11 + (data[pos + 12:pos + 13] == b"]")  # "[" ("]": none)
        while pos >= 0 and data[at:at + 1] != b"]":
            if (m := _MEMBER.match(data, at + 1)) is None:
                raise FormatError(f"{INDEX_NAME}: members[{len(starts)}] is not " + _CANONICAL)
            starts.append(at + 1)
            at = m.end() - 1  # at the "," or "]" after it
        # (without that list, only its first _WHOLE bytes are parsed, to say what is wrong)
        data = data[:pos + 12] + data[at:] if pos >= 0 else data[:_WHOLE]
        obj = load_object(data, INDEX_NAME)
        fmt = _check_format(obj.get("format"))
        keys = INDEX_KEYS[fmt]
        if set(obj) != keys:
            missing, extra = sorted(keys - set(obj)), sorted(set(obj) - keys)
            raise FormatError(f"{INDEX_NAME}: missing {missing}, unknown {extra}")
        if obj["members"] != [] or pos < 0:
            raise FormatError(f"{INDEX_NAME}: members must be a list of " + _CANONICAL)
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
            members=Members(raw, starts),
            omitted=tuple(omitted),
            format=fmt,
            terms=tuple(
                Terms.from_json(t, f"{INDEX_NAME}: terms[{i}]") for i, t in enumerate(raw_terms)
            ),
            erased=tuple(erased),
            extension=obj.get("extension"),
        )
        if canonical_bytes(obj, INDEX_NAME) != data:
            raise FormatError(f"{INDEX_NAME}: not in canonical form (RFC 8785, no whitespace)")
        return index

    def member(self, name: str) -> Member | None:
        """The member listed as ``name`` (they are sorted), or None."""
        i = bisect_left(range(len(self.members)), name, key=lambda j: self.members[j].name)
        found = self.members[i] if i < len(self.members) else None
        return found if found is not None and found.name == name else None
