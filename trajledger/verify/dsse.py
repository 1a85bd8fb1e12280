"""DSSE envelopes: parsing, the pre-authentication encoding, and signature verification.

Scope: the DSSE v1 JSON envelope (github.com/secure-systems-lab/dsse, protocol.md and
envelope.md) with one or several signatures, verified against Ed25519 / ECDSA P-256 keys.
Non-scope: what the payload means (statement.py) and signing (ledger/signing.py).
Spec: schemas/SPEC.md section "DSSE envelope".

The signature covers PAE(payloadType, payload) over the exact payload bytes; the payload is
never re-serialised. Known answer:
``PAE("http://example.com/HelloWorld", b"hello world") ==
b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"``.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import FormatError, SignatureError
from .keys import PublicKey
from .strict_json import load_object

__all__ = [
    "INTOTO_PAYLOAD_TYPE",
    "MAX_ENVELOPE_BYTES",
    "MAX_SIGNATURES",
    "Envelope",
    "Signature",
    "b64decode",
    "pae",
    "verify_envelope",
]

INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
MAX_ENVELOPE_BYTES = 64 << 20
"""Envelopes larger than this are refused before parsing (64 MiB)."""
MAX_SIGNATURES = 64
"""An envelope with more signatures is refused before any is checked (each costs a verification;
no policy needs more co-signers than this)."""

_FIELDS, _SIG_FIELDS = frozenset(("payload", "payloadType", "signatures")), {"keyid", "sig"}
_B64_STD = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_B64_URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def pae(payload_type: str, payload: bytes) -> bytes:
    """Return the DSSE v1 pre-authentication encoding of a payload.

    ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``, lengths in decimal ASCII bytes.
    """
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def b64decode(value: object, what: str) -> bytes:
    """Decode standard or URL-safe base64 (not a mix of both); padding optional.

    Raises:
        FormatError: not a string, characters outside one alphabet, or bad length.
    """
    if not isinstance(value, str):
        raise FormatError(f"{what}: is {type(value).__name__}, want a base64 string")
    # The common case, standard and canonical, decoded in C in one pass; anything else is
    # decided (and named) by the checks below.
    if (len(value) % 4 == 0 or not value.endswith("=")) and not value.endswith("==="):
        try:
            out = binascii.a2b_base64(value + "=" * (-len(value) % 4), strict_mode=True)
        except ValueError:  # binascii.Error, or not ASCII
            pass
        else:
            # Only a last, partial group of 2 or 3 characters has padding bits.
            tail = len(out) % 3
            if not tail or base64.b64encode(out[-tail:]).decode("ascii").rstrip("=") \
                    == value[-4:].rstrip("=")[-tail - 1:]:
                return out
    alt = None if _B64_STD.fullmatch(value) else b"-_"  # standard, else URL-safe
    if alt and not _B64_URL.fullmatch(value):
        raise FormatError(f"{what}: is not valid base64")
    unpadded = value.rstrip("=")
    if len(unpadded) % 4 == 1 or (value != unpadded and len(value) % 4 != 0):
        raise FormatError(f"{what}: is not valid base64 (bad length or padding)")
    padded = unpadded + "=" * (-len(unpadded) % 4)
    try:
        out = base64.b64decode(padded, altchars=alt, validate=True)
    except binascii.Error as e:
        raise FormatError(f"{what}: is not valid base64 ({e})") from e
    # Refuse non-canonical encodings (non-zero trailing bits): one byte string, one encoding.
    if base64.b64encode(out, altchars=alt).decode("ascii").rstrip("=") != unpadded:
        raise FormatError(f"{what}: is not canonical base64 (non-zero padding bits)")
    return out


@dataclass(frozen=True)
class Signature:
    """One DSSE signature: the signer's keyid (may be empty) and the raw signature bytes."""

    keyid: str
    sig: bytes


@dataclass(frozen=True)
class Envelope:
    """A parsed DSSE envelope. Build with `from_bytes`, or directly when signing (the ledger
    writes it with ``ledger.encode.envelope_bytes``).

    Attributes:
        payload: the exact signed payload bytes.
        payload_type: the payloadType string.
        signatures: one or more signatures.
    """

    payload: bytes
    payload_type: str
    signatures: tuple[Signature, ...]

    @classmethod
    def from_bytes(cls, data: bytes, what: str = "envelope") -> Envelope:
        """Parse an envelope strictly.

        Refuses: oversize input, invalid UTF-8, malformed JSON, duplicate keys, unknown or
        missing fields, non-string fields, bad base64, an empty signature list.

        Raises:
            FormatError: with one line naming the problem.
        """
        if len(data) > MAX_ENVELOPE_BYTES:
            raise FormatError(f"{what}: {len(data)} bytes, more than {MAX_ENVELOPE_BYTES}")
        obj = load_object(data, what)
        if obj.keys() != _FIELDS:  # unknown fields first; else the first missing, by name
            unknown = sorted(obj.keys() - _FIELDS)
            raise FormatError(f"{what}: unknown field(s) {', '.join(unknown)}" if unknown else
                              f"{what}: missing field {min(_FIELDS - obj.keys())!r}")
        payload_type = obj["payloadType"]
        if not isinstance(payload_type, str) or not payload_type:
            raise FormatError(f"{what}: payloadType must be a non-empty string")
        payload = b64decode(obj["payload"], f"{what}: payload")
        raw_sigs = obj["signatures"]
        if not isinstance(raw_sigs, list) or not raw_sigs:
            raise FormatError(f"{what}: signatures must be a non-empty list")
        if len(raw_sigs) > MAX_SIGNATURES:
            raise FormatError(
                f"{what}: {len(raw_sigs)} signatures, more than {MAX_SIGNATURES}: refused before "
                "any is checked"
            )
        sigs = []
        for i, raw in enumerate(raw_sigs):
            if not isinstance(raw, dict):
                raise FormatError(f"{what}: signature {i} is not an object")
            if extra := raw.keys() - _SIG_FIELDS:
                raise FormatError(f"{what}: signature {i} has unknown field(s) {sorted(extra)}")
            keyid = raw.get("keyid", "")
            if not isinstance(keyid, str):
                raise FormatError(f"{what}: signature {i} keyid must be a string")
            if "sig" not in raw:
                raise FormatError(f"{what}: signature {i} has no 'sig'")
            sig = b64decode(raw["sig"], f"{what}: signature {i}")
            if not sig:
                raise FormatError(f"{what}: signature {i} is empty")
            sigs.append(Signature(keyid, sig))
        return cls(payload, payload_type, tuple(sigs))


def verify_envelope(
    envelope: Envelope,
    keys: Iterable[PublicKey],
    *,
    threshold: int = 1,
    payload_type: str = INTOTO_PAYLOAD_TYPE,
    what: str = "envelope",
) -> tuple[PublicKey, ...]:
    """Verify an envelope's signatures, then its payloadType.

    Steps:
        1. Check preconditions: at least one trusted key, threshold >= 1.
        2. For each signature, pick the trusted key(s) it may be from. The keyid is an
           unauthenticated hint that, as the DSSE protocol allows, only narrows the keys tried:
           a keyid naming a trusted key selects that key; an empty keyid selects every trusted
           key; any other keyid selects none, so the signature is ignored (co-signers outside
           the policy are allowed, and an edited keyid can never make a signature count).
        3. Verify the signature over PAE(payloadType, payload), the exact bytes received.
        4. Count distinct keys that verified; fewer than ``threshold`` fails.
        5. Only then check payloadType against the expected one.

    Args:
        envelope: the parsed envelope.
        keys: the trusted public keys.
        threshold: how many distinct trusted keys must have signed.
        payload_type: the payloadType the caller expects.
        what: names the envelope in error messages.

    Returns:
        The keys whose signatures verified, in the order of ``keys``.

    Raises:
        SignatureError: fewer than ``threshold`` distinct trusted keys signed validly.
        FormatError: the signatures hold but the payloadType is not the expected one.
        ValueError: a precondition does not hold (a caller bug).
    """
    trusted = {k.keyid: k for k in keys}
    # (1)
    if not trusted:
        raise ValueError("verify_envelope needs at least one trusted key")
    if threshold < 1:
        raise ValueError(f"threshold must be at least 1, got {threshold}")
    message = pae(envelope.payload_type, envelope.payload)
    verified: set[str] = set()
    bad_named: list[str] = []
    for sig in envelope.signatures:
        # (2)
        if sig.keyid:
            candidates = [trusted[sig.keyid]] if sig.keyid in trusted else []
        else:
            candidates = list(trusted.values())
        # A second signature by a key already counted adds nothing, and is not "invalid".
        candidates = [k for k in candidates if k.keyid not in verified]
        if not candidates:
            continue
        # (3)
        ok = [k for k in candidates if k.verify(sig.sig, message)]
        if ok:
            verified.add(ok[0].keyid)
        elif sig.keyid in trusted:
            bad_named.append(sig.keyid)
    # (4)
    if len(verified) < threshold:
        if bad_named:
            detail = f"invalid signature by key {bad_named[0][:16]}"
        elif not verified:
            detail = "no signature by a trusted key"
        else:
            detail = "too few signatures by trusted keys"
        raise SignatureError(
            f"{what}: {detail}: {len(verified)} of {threshold} required signature(s) verified"
        )
    # (5)
    if envelope.payload_type != payload_type:
        raise FormatError(
            f"{what}: payloadType is {envelope.payload_type!r}, want {payload_type!r}"
        )
    return tuple(k for k in trusted.values() if k.keyid in verified)
