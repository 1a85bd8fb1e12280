"""Entries of trajledger's transparency log: their canonical encoding, strict parsing, the chain.

Scope: one log entry is the RFC 8785 (JCS) JSON object

    {"envelope":"sha256:<hex>","kind":<kind>,"prev":"<hex>","signers":["<keyid>",...],
     "subject":"sha256:<hex>","time":"YYYY-MM-DDTHH:MM:SSZ","v":1}

(keys in JCS order, no whitespace). `LogEntry` is the one definition of that format: the writer
(``ledger.log``) builds entries with ``ledger.encode.log_entry`` (its fields checked by
``verify.entry_fields.check_entry_fields``, then encoded), and verifiers read them with
`LogEntry.from_bytes`, which accepts exactly the canonical bytes and nothing else (why other
bytes are not an entry is found by ``verify.entry_fields``, loaded only then), so one entry
has one encoding and one leaf hash. ``prev`` is the RFC 6962 leaf hash of the entry before it
(64 zeros for entry 0): ``verify.logcheck.check_entries`` checks that hash chain.

Non-scope: where entries live (``verify.tiles``), Merkle proofs (``verify.merkle``), and whether
the envelope an entry names exists or is validly signed (the ledger's ``log verify`` and the
lineage verifier check envelopes against the entry).

Spec: schemas/log-entry.v1.md; RFC 8785; RFC 6962 section 2.1 (leaf hash).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .entry_format import ENTRY_VERSION, KINDS
from .errors import FormatError
from .merkle import leaf_hash
from .times import parse_time

__all__ = [
    "ENTRY_VERSION",
    "GENESIS_PREV",
    "KINDS",
    "MAX_ENTRY_SIZE",
    "LogEntry",
]

MAX_ENTRY_SIZE = 0xFFFF
"""Largest entry a log holds: an entry bundle (c2sp.org/tlog-tiles) stores its length as a
uint16. `verify.tiles` re-exports it."""

GENESIS_PREV = "0" * 64
"""The ``prev`` of entry 0: there is no entry before it."""

_KIND_ALT = "|".join(sorted(KINDS, key=len, reverse=True))
# The canonical encoding, field by field. Every value is ASCII without characters JSON escapes,
# so JCS reduces to this template; anything else (whitespace, other key order, escapes, other
# number spellings, duplicate keys) fails to match and goes to the slow path for a precise error.
_CANONICAL = re.compile(
    rb'\{"envelope":"sha256:([0-9a-f]{64})","kind":"(' + _KIND_ALT.encode() + rb')",'
    rb'"prev":"([0-9a-f]{64})","signers":\[("[0-9a-f]{64}"(?:,"[0-9a-f]{64}")*)\],'
    rb'"subject":"sha256:([0-9a-f]{64})",'
    rb'"time":"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z)","v":1\}'
)


@dataclass(frozen=True)
class LogEntry:
    """One log entry. Build it with `from_bytes` (a writer: ``ledger.encode.log_entry``), so
    that it holds valid fields and `to_bytes` is their only encoding.

    Attributes:
        kind: one of `KINDS`.
        subject: ``sha256:<hex>`` of the artifact the envelope's statement is about.
        envelope: ``sha256:<hex>`` of the DSSE envelope's exact bytes (a blob in the store).
        signers: keyids (64 lowercase hex) of the envelope's signatures, sorted, unique, >= 1.
        time: when the log appended the entry, ``YYYY-MM-DDTHH:MM:SSZ`` (UTC).
        prev: hex leaf hash of the entry before, `GENESIS_PREV` for entry 0.
        raw: the entry's canonical bytes (`to_bytes`).
    """

    kind: str
    subject: str
    envelope: str
    signers: tuple[str, ...]
    time: str
    prev: str
    raw: bytes = field(repr=False, compare=False)

    def to_bytes(self) -> bytes:
        """Return the canonical (RFC 8785) bytes of the entry: what the log stores and hashes."""
        return self.raw

    @property
    def leaf_hash(self) -> bytes:
        """The RFC 6962 leaf hash of `to_bytes`; the next entry's ``prev`` is its hex."""
        return leaf_hash(self.raw)

    @classmethod
    def from_bytes(cls, data: bytes, what: str = "log entry") -> LogEntry:
        """Parse an entry strictly: only its canonical encoding is accepted.

        Args:
            data: the entry's exact bytes, as stored in an entry bundle.
            what: names the entry in error messages (for example ``log entry 17``).

        Returns:
            The entry; ``to_bytes()`` gives back ``data``.

        Raises:
            FormatError: more than 65,535 bytes, not JSON, duplicate or missing or unknown keys,
                a field of the wrong type or value, or JSON that is valid but not in canonical
                form (whitespace, key order, escapes).
        """
        if len(data) > MAX_ENTRY_SIZE:
            raise FormatError(f"{what}: {len(data)} bytes, want at most {MAX_ENTRY_SIZE}")
        m = _CANONICAL.fullmatch(data)
        if m is None:  # why it is not canonical: loaded only for such an entry
            from .entry_fields import fields_from_json

            return cls(*fields_from_json(data, what), bytes(data))
        # The pattern fixed every byte but two things: signer order and calendar validity.
        signers = tuple(s[1:-1] for s in m.group(4).decode().split(","))
        if list(signers) != sorted(set(signers)):
            raise FormatError(f"{what}: signers {list(signers)} are not sorted and unique")
        time = m.group(6).decode()
        parse_time(time, what)
        return cls(
            kind=m.group(2).decode(),
            subject="sha256:" + m.group(5).decode(),
            envelope="sha256:" + m.group(1).decode(),
            signers=signers,
            time=time,
            prev=m.group(3).decode(),
            raw=bytes(data),
        )
