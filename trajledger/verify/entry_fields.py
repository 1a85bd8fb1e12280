"""The fields of a log entry checked one by one: what a writer checks before it encodes an entry
(``ledger.encode.log_entry``), and why bytes that are not an entry's canonical encoding are not
(`fields_from_json`, the slow path of `verify.log_entry.LogEntry.from_bytes`).

Scope: `check_entry_fields`, `fields_from_json`. Loaded only by a writer and for an entry that
is not canonical: a verifier reading a well-formed log never needs it.
Non-scope: the canonical encoding and its fast parse (``verify.log_entry``).
Spec: schemas/log-entry.v1.md; RFC 8785.
"""

from __future__ import annotations

from ._jcs import canonical_bytes
from .digest import HEX64, parse_digest
from .entry_format import ENTRY_VERSION, KINDS
from .errors import FormatError
from .strict_json import load_object
from .times import parse_time

__all__ = ["FIELDS", "check_entry_fields", "fields_from_json"]

FIELDS = ("envelope", "kind", "prev", "signers", "subject", "time", "v")
"""An entry's keys, in their canonical order."""


def check_entry_fields(
    kind: object,
    subject: object,
    envelope: object,
    signers: object,
    time: object,
    prev: object,
    what: str,
) -> None:
    """Check the fields of an entry; ``what`` names it in messages."""
    if not isinstance(kind, str) or kind not in KINDS:
        raise FormatError(f"{what}: kind {kind!r} is unknown, want one of {sorted(KINDS)}")
    parse_digest(subject, f"{what}: subject")
    parse_digest(envelope, f"{what}: envelope")
    if not isinstance(signers, tuple) or not signers:
        raise FormatError(f"{what}: signers is empty, want at least one keyid")
    for k in signers:
        if not isinstance(k, str) or not HEX64.fullmatch(k):
            raise FormatError(f"{what}: signer keyid {k!r} is not 64 lowercase hex")
    if list(signers) != sorted(set(signers)):
        raise FormatError(f"{what}: signers {list(signers)} are not sorted and unique")
    parse_time(time, what)
    if not isinstance(prev, str) or not HEX64.fullmatch(prev):
        raise FormatError(f"{what}: prev {prev!r} is not 64 lowercase hex")


def fields_from_json(
    data: bytes, what: str
) -> tuple[str, str, str, tuple[str, ...], str, str]:
    """The slow path of `verify.log_entry.LogEntry.from_bytes`: the fields of ``data`` (kind,
    subject, envelope, signers, time, prev) when they are an entry's, else precisely why not.

    Raises:
        FormatError: not JSON, missing or unknown keys, a field of the wrong type or value, or
            JSON that is valid but not in canonical form (whitespace, key order, escapes).
    """
    obj = load_object(data, what)
    if sorted(obj) != list(FIELDS):
        missing = sorted(set(FIELDS) - set(obj))
        unknown = sorted(set(obj) - set(FIELDS))
        raise FormatError(f"{what}: missing field(s) {missing}, unknown field(s) {unknown}")
    v = obj["v"]
    if type(v) is not int or v != ENTRY_VERSION:
        raise FormatError(f"{what}: v is {v!r}, want {ENTRY_VERSION}")
    signers = obj["signers"]
    if not isinstance(signers, list):
        raise FormatError(f"{what}: signers is {type(signers).__name__}, want a list")
    fields = (obj["kind"], obj["subject"], obj["envelope"], tuple(signers), obj["time"],
              obj["prev"])
    check_entry_fields(*fields, what)
    if canonical_bytes(obj, what) != data:
        raise FormatError(
            f"{what}: is valid JSON but not in canonical form (RFC 8785: no whitespace, keys "
            "sorted, no escapes), want the canonical encoding"
        )
    return fields
