"""C2SP signed notes: parsing, verifier keys and signature verification.

Scope: the signed-note text format (a text, a blank line, signature lines
``— <name> <base64(key ID || signature)>``), verifier keys (``<name>+<8 hex key ID>+<base64(type
|| public key)>``), key IDs, Ed25519 note signatures (type 0x01) and timestamped Ed25519 witness
cosignatures (type 0x04, c2sp.org/tlog-cosignature v1: their message is
``verify.cosigned``, loaded for a witness's key), and `verify_note`, which checks a note
against known keys the way Go's ``golang.org/x/mod/sumdb/note.Open`` does.

Non-scope: the meaning of the text (``verify.checkpoint`` parses checkpoints), signing keys and
signing and writing notes (the ledger holds keys and appends lines made with
``ledger.encode.format_signature_line``), ECDSA
(type 0x02), ML-DSA and other signature types: verifier keys of those types are refused.

Spec: c2sp.org/signed-note, c2sp.org/tlog-cosignature (Ed25519 signed message).

Parsing is strict: valid UTF-8 without control characters other than newline; the text ends in
a newline and is separated from the signatures by the last blank line; every line after it is a
signature line with the em dash U+2014, a valid key name (non-empty, no Unicode space, no '+'),
one space and canonical standard base64 of at least 5 bytes; at most 100 signatures. A verifier
key of small order or not canonically encoded is refused (`verify.keys.check_ed25519`): OpenSSL
would verify a signature no key made.
`Note.from_bytes` only parses: the text must be ignored until `verify_note` accepted it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .errors import FormatError, SignatureError
from .keys import check_ed25519
from .strict_json import utf8_text

__all__ = ["ALG_COSIGNATURE_V1", "ALG_ED25519", "MAX_SIGNATURES", "Note", "NoteSignature",
           "Verifier", "b64decode_strict", "check_key_name", "check_text_bytes", "key_hash",
           "verified_signatures", "verifier_from_vkey", "verify_note"]

ALG_ED25519 = 0x01
"""Signature type of plain Ed25519 note signatures."""

ALG_COSIGNATURE_V1 = 0x04
"""Signature type of timestamped Ed25519 witness cosignatures (tlog-cosignature v1)."""

MAX_SIGNATURES = 100
"""Most signature lines a note may carry (Go's limit; the spec requires accepting 16)."""

_EM_DASH_PREFIX = "\u2014 ".encode()
_KEY_HASH_SIZE = 4
_ED25519_KEY_SIZE = 32
_ED25519_SIG_SIZE = 64
# Unicode spaces: Python's str.isspace() covers the White_Space property Go's unicode.IsSpace tests.
_HEX8 = re.compile(r"[0-9a-f]{8}")  # lower case only: vkeys are compared as strings


def check_key_name(name: str, what: str) -> None:
    """Refuse a key name the signed-note format does not allow: empty, holding a Unicode space
    or a '+'.

    Raises:
        FormatError: such a name.
    """
    if not name or "+" in name or any(c.isspace() for c in name):
        raise FormatError(f"{what}: key name {name!r} must be non-empty, without spaces or '+'")


def b64decode_strict(text: str, what: str) -> bytes:
    """Decode standard base64 with padding, refusing any other spelling of the same bytes.

    Args:
        text: the base64 text.
        what: names the value in messages.

    Returns:
        The decoded bytes.

    Raises:
        FormatError: not standard base64, or not its canonical spelling (padding, zero bits).
    """
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise FormatError(f"{what}: {text!r} is not standard base64") from e
    if base64.b64encode(raw).decode("ascii") != text:
        raise FormatError(f"{what}: {text!r} is not canonical standard base64")
    return raw


def check_text_bytes(data: bytes, what: str) -> str:
    """Decode a note's text: UTF-8 with no control character but newline (signed-note).

    Args:
        data: the bytes.
        what: names them in messages.

    Returns:
        The text.

    Raises:
        FormatError: not UTF-8, or a control character other than newline.
    """
    text = utf8_text(data, what)
    for i, c in enumerate(text):
        if c < " " and c != "\n":
            raise FormatError(
                f"{what}: control character U+{ord(c):04X} at character {i}, want only newline"
            )
    return text


def key_hash(name: str, alg: int, pub: bytes) -> bytes:
    """Return the 4-byte key ID ``SHA-256(name || 0x0A || alg || pub)[:4]``.

    Args:
        name: the key name.
        alg: the signature type byte (0x01 Ed25519, 0x04 cosignature v1).
        pub: the encoded public key.

    Returns:
        The key ID, big-endian as it appears in signatures.
    """
    return hashlib.sha256(name.encode() + b"\n" + bytes([alg]) + pub).digest()[:_KEY_HASH_SIZE]


@dataclass(frozen=True)
class NoteSignature:
    """One signature line of a note, parsed but not verified. `Note.from_bytes` builds only
    valid ones; ``ledger.encode.signature_line`` checks one built otherwise before writing it.

    Attributes:
        name: the key name.
        key_hash: the 4-byte key ID.
        signature: the signature bytes after the key ID.
    """

    name: str
    key_hash: bytes
    signature: bytes


@dataclass(frozen=True)
class Note:
    """A signed note: its text and its (unverified) signatures.

    Build it with `Note.from_bytes`, which holds it to the format; ``ledger.encode.note_bytes``
    gives back the exact input (and checks a note built otherwise before writing it).

    Attributes:
        text: the signed message, including its final newline but not the blank line.
        signatures: the signature lines, in order.
    """

    text: bytes
    signatures: tuple[NoteSignature, ...]

    @classmethod
    def from_bytes(cls, data: bytes) -> Note:
        """Parse a signed note strictly, without verifying any signature.

        Args:
            data: the note as stored or received.

        Returns:
            The parsed note.

        Raises:
            FormatError: the bytes are not a well-formed signed note.
        """
        check_text_bytes(data, "signed note")
        split = data.rfind(b"\n\n")
        if split < 0:
            raise FormatError("signed note has no blank line before its signatures")
        text, block = data[: split + 1], data[split + 2 :]
        if not block:
            raise FormatError("signed note has no signature lines after its blank line")
        if not block.endswith(b"\n"):
            raise FormatError("signed note does not end in a newline")
        lines = block[:-1].split(b"\n")
        if len(lines) > MAX_SIGNATURES:
            raise FormatError(
                f"signed note has {len(lines)} signature lines, want at most {MAX_SIGNATURES}"
            )
        sigs = tuple(_parse_signature_line(line, i) for i, line in enumerate(lines))
        return cls(text=text, signatures=sigs)


def _parse_signature_line(line: bytes, i: int) -> NoteSignature:
    what = f"signature line {i + 1}"
    if not line.startswith(_EM_DASH_PREFIX):
        raise FormatError(f"{what}: does not start with an em dash (U+2014) and a space")
    rest = line[len(_EM_DASH_PREFIX) :].decode("utf-8")
    name, sep, b64 = rest.partition(" ")
    if not sep:
        raise FormatError(f"{what}: no space between key name and signature")
    check_key_name(name, what)
    raw = b64decode_strict(b64, what)
    if len(raw) < _KEY_HASH_SIZE + 1:
        raise FormatError(f"{what}: signature has {len(raw)} bytes, want at least 5")
    return NoteSignature(name=name, key_hash=raw[:_KEY_HASH_SIZE], signature=raw[_KEY_HASH_SIZE:])



@dataclass(frozen=True)
class Verifier:
    """A public key that can verify note signatures of one type under one name.

    Build it from a verifier key string with `verifier_from_vkey`.

    Attributes:
        name: the key name.
        alg: the signature type byte (`ALG_ED25519` or `ALG_COSIGNATURE_V1`).
        public_key: the 32-byte Ed25519 public key.
    """

    name: str
    alg: int
    public_key: bytes

    def __post_init__(self) -> None:
        """Check name, type and key size.

        Raises:
            FormatError: invalid name, unsupported type, a key that is not 32 bytes, or one of
                small order (`verify.keys.check_ed25519`).
        """
        check_key_name(self.name, "verifier key")
        if self.alg not in (ALG_ED25519, ALG_COSIGNATURE_V1):
            raise FormatError(
                f"verifier key {self.name}: signature type 0x{self.alg:02x} is not supported, "
                f"want 0x01 (Ed25519) or 0x04 (cosignature/v1)"
            )
        if len(self.public_key) != _ED25519_KEY_SIZE:
            raise FormatError(
                f"verifier key {self.name}: public key has {len(self.public_key)} bytes, want 32"
            )
        check_ed25519(self.public_key, f"verifier key {self.name}")

    @property
    def key_hash(self) -> bytes:
        """The 4-byte key ID that signature lines by this key carry."""
        return key_hash(self.name, self.alg, self.public_key)

    def verify(self, msg: bytes, sig: bytes) -> bool:
        r"""Check a signature over a note text.

        For type 0x04 the signature is ``u64 timestamp || Ed25519 signature`` over
        ``"cosignature/v1\ntime <timestamp>\n" || msg``, with the timestamp at most 2**63 - 1.

        Args:
            msg: the note text, including its final newline.
            sig: the signature bytes after the key ID.

        Returns:
            True if the signature is valid.
        """
        if self.alg == ALG_COSIGNATURE_V1:  # a witness's key: loaded only for a policy with some
            from .cosigned import cosigned_message

            signed = cosigned_message(msg, sig)
            if signed is None:
                return False
            msg, sig = signed
        if len(sig) != _ED25519_SIG_SIZE:
            return False
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(sig, msg)
        except InvalidSignature:
            return False
        return True


def verifier_from_vkey(vkey: str) -> Verifier:
    """Parse a verifier key ``<name>+<8 hex key ID>+<base64(type || public key)>``, its key ID
    in lower case: vkeys are compared as strings (a user's state, pins, key handovers), and an
    upper-case spelling of a key escaped what names it (Go's parser accepts it; redo15).

    Args:
        vkey: the verifier key string.

    Returns:
        The verifier.

    Raises:
        FormatError: malformed string (a key ID not in lower case), unsupported type, wrong key
            size, or a key ID that does not match the name and key.
    """
    name, sep1, rest = vkey.partition("+")
    hash_hex, sep2, key_b64 = rest.partition("+")
    if not (sep1 and sep2) or not _HEX8.fullmatch(hash_hex):
        raise FormatError(
            f"verifier key {vkey!r}: want <name>+<8 lower-case hex digits>+<base64 key>")
    check_key_name(name, "verifier key")
    key = b64decode_strict(key_b64, f"verifier key {name}")
    if len(key) < 2:
        raise FormatError(f"verifier key {name}: key data has {len(key)} bytes, want 33")
    verifier = Verifier(name=name, alg=key[0], public_key=key[1:])
    if verifier.key_hash != bytes.fromhex(hash_hex):
        raise FormatError(
            f"verifier key {name}: key ID {hash_hex} does not match the key, "
            f"want {verifier.key_hash.hex()}"
        )
    return verifier


def verified_signatures(
    note: Note, verifiers: Sequence[Verifier]
) -> list[tuple[NoteSignature, Verifier]]:
    """Steps 2 and 3 of `verify_note`: the signature lines by known keys, all verified.

    Args:
        note: the parsed note.
        verifiers: the known keys.

    Returns:
        Each signature line by a known key, with the key that verified it, in note order.

    Raises:
        SignatureError: two different keys share a name and key ID, or a line by a known key
            does not verify.
    """
    known: dict[tuple[str, bytes], Verifier] = {}
    for v in verifiers:
        other = known.setdefault((v.name, v.key_hash), v)
        if other != v:
            raise SignatureError(
                f"ambiguous verifier keys: two keys named {v.name} with key ID {v.key_hash.hex()}"
            )
    out: list[tuple[NoteSignature, Verifier]] = []
    for i, sig in enumerate(note.signatures):
        match = known.get((sig.name, sig.key_hash))
        if match is None:
            continue
        if not match.verify(note.text, sig.signature):
            raise SignatureError(
                f"note signature line {i + 1} by {sig.name}+{sig.key_hash.hex()} does not verify"
            )
        out.append((sig, match))
    return out


def verify_note(note: Note | bytes, verifiers: Sequence[Verifier]) -> list[str]:
    """Verify a note's signatures by the known keys.

    Steps:
        1. Parse the note if bytes were given.
        2. Index the known keys by (name, key ID); two different keys under one index are
           refused as ambiguous.
        3. For each signature line: skip it if no known key has its name and key ID (the spec
           requires ignoring unknown keys); otherwise verify it and reject the whole note if it
           fails. Every line of a known key is checked, also repeats (Go checks only the first).
        4. Require at least one verified signature.

    Args:
        note: the note, parsed or as bytes.
        verifiers: the known keys.

    Returns:
        The names of the known keys whose signatures verified, in signature order, each once.

    Raises:
        FormatError: ``note`` bytes do not parse.
        SignatureError: ambiguous keys, a signature by a known key that fails, or no signature
            by any known key.
    """
    # (1)
    if isinstance(note, bytes):
        note = Note.from_bytes(note)
    # (2) and (3)
    verified = list(dict.fromkeys(v.name for _sig, v in verified_signatures(note, verifiers)))
    # (4)
    if not verified:
        wanted = ", ".join(f"{v.name}+{v.key_hash.hex()}" for v in verifiers) or "none"
        raise SignatureError(f"note has no signature by a known key, want one of: {wanted}")
    return verified
