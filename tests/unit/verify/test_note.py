"""verify.note: signed-note parsing, verifier keys, Ed25519 and cosignature/v1 verification.

Most malformed-note and bad-signature cases live as named vectors in tests/vectors/note/ (run
by test_vectors_generated.py); this file covers the API around them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest
import testkit
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from trajledger.ledger.encode import format_signature_line, note_bytes, verifier_vkey, vkey_string
from trajledger.verify.cosignatures import cosignature_timestamp
from trajledger.verify.errors import FormatError, SignatureError
from trajledger.verify.note import (
    ALG_COSIGNATURE_V1,
    ALG_ED25519,
    Note,
    NoteSignature,
    Verifier,
    key_hash,
    verifier_from_vkey,
    verify_note,
)

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "vectors/tlog/tlog-vectors.json").read_text()
)
EXAMPLE = VECTORS["signed_note_example"]

# TEST ONLY key from a fixed seed.
KEY = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"TEST ONLY test_note").digest())
PUB = KEY.public_key().public_bytes_raw()
NAME = "note.test/key"
TEXT = b"hello\nworld\n"


def sign(text: bytes, name: str = NAME, key: Ed25519PrivateKey = KEY) -> bytes:
    pub = key.public_key().public_bytes_raw()
    return format_signature_line(name, key_hash(name, ALG_ED25519, pub), key.sign(text))


def test_signed_note_example_from_the_spec_repository() -> None:
    v = verifier_from_vkey(EXAMPLE["vkey"])
    assert v.name == "example.com/foo"
    assert v.key_hash.hex() == "530d903a"
    assert verifier_vkey(v) == EXAMPLE["vkey"]
    note = Note.from_bytes(EXAMPLE["note"].encode())
    assert note.text == b"This is an example message.\n"
    assert [(s.name, s.key_hash.hex(), len(s.signature)) for s in note.signatures] == [
        ("example.com/foo", "530d903a", 64)
    ]
    assert note_bytes(note) == EXAMPLE["note"].encode()
    assert verify_note(note, [v]) == ["example.com/foo"]


def test_key_hash_derivation() -> None:
    # key ID = SHA-256(name || 0x0A || type || public key)[:4]
    want = hashlib.sha256(NAME.encode() + b"\n\x01" + PUB).digest()[:4]
    assert key_hash(NAME, ALG_ED25519, PUB) == want
    assert key_hash(NAME, ALG_COSIGNATURE_V1, PUB) != want


def test_vkey_string_round_trip() -> None:
    for alg in (ALG_ED25519, ALG_COSIGNATURE_V1):
        vkey = vkey_string(NAME, PUB, alg)
        name, hash_hex, key64 = vkey.split("+", 2)
        assert (name, hash_hex) == (NAME, key_hash(NAME, alg, PUB).hex())
        assert base64.b64decode(key64) == bytes([alg]) + PUB
        v = verifier_from_vkey(vkey)
        assert (v.name, v.alg, v.public_key, verifier_vkey(v)) == (NAME, alg, PUB, vkey)


def test_vkey_refuses_an_upper_case_key_id() -> None:
    """redo15 finding 1: Go's parser takes upper-case hex, but vkeys are compared as strings
    here (a user's state, pins and handovers are keyed by them): another spelling of the same
    key escaped what names it. One spelling only, the canonical lower-case one."""
    name, hash_hex, key64 = EXAMPLE["vkey"].split("+", 2)
    for spelt in (hash_hex.upper(), hash_hex[:7] + hash_hex[7].upper()):
        assert spelt != hash_hex
        with pytest.raises(FormatError, match="want <name>\\+<8 lower-case hex digits>"):
            verifier_from_vkey(f"{name}+{spelt}+{key64}")


@pytest.mark.parametrize(
    ("vkey", "message"),
    [
        ("example.com/foo", "want <name>\\+<8 lower-case hex digits>\\+<base64 key>"),
        ("example.com/foo+530d903+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k", "8 lower-case"),
        ("example.com/foo+530d903g+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k", "8 lower-case"),
        (
            "example.com/foo+530d903b+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k",
            "key ID 530d903b does not match the key, want 530d903a",
        ),
        (
            "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2",
            "not standard base64",
        ),
        ("example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k\n", "not standard"),
        ("example com+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k", "without spaces"),
        ("+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k", "must be non-empty"),
        ("example.com/foo+530d903a+AQ==", "key data has 1 bytes, want 33"),
        (
            "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv",
            "public key has 29 bytes",
        ),
        (
            "example.com/foo+530d903a+AukyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k",
            "type 0x02 is not supported",
        ),
    ],
)
def test_vkey_refusals(vkey: str, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        verifier_from_vkey(vkey)


def test_verify_note_ignores_unknown_keys_and_dedupes_names() -> None:
    stranger = Ed25519PrivateKey.from_private_bytes(b"\x07" * 32)
    note = TEXT + b"\n" + sign(TEXT, "other.test/k", stranger) + sign(TEXT) + sign(TEXT)
    v = verifier_from_vkey(vkey_string(NAME, PUB))
    assert verify_note(note, [v, v]) == [NAME]
    assert verify_note(Note.from_bytes(note), [v]) == [NAME]


def test_verify_note_attack_resigned_by_attacker_under_same_name() -> None:
    attacker = Ed25519PrivateKey.from_private_bytes(b"\x09" * 32)
    forged = b"hello\nmallory\n"
    note = forged + b"\n" + sign(forged, NAME, attacker)
    v = verifier_from_vkey(vkey_string(NAME, PUB))
    with pytest.raises(SignatureError, match=f"no signature by a known key, want one of: {NAME}"):
        verify_note(note, [v])


def test_verify_note_attack_key_id_collision_with_other_key() -> None:
    # An attacker who forges the known key ID still needs the known key's signature.
    attacker = Ed25519PrivateKey.from_private_bytes(b"\x0a" * 32)
    line = format_signature_line(NAME, key_hash(NAME, ALG_ED25519, PUB), attacker.sign(TEXT))
    v = verifier_from_vkey(vkey_string(NAME, PUB))
    with pytest.raises(
        SignatureError, match=r"signature line 1 by note.test/key\+[0-9a-f]{8} does not verify"
    ):
        verify_note(TEXT + b"\n" + line, [v])


def test_verify_note_needs_a_verifier() -> None:
    with pytest.raises(SignatureError, match="want one of: none"):
        verify_note(TEXT + b"\n" + sign(TEXT), [])


def _colliding_keys() -> tuple[bytes, bytes]:
    """Two 32-byte keys with the same key ID under NAME (a birthday search over 2**32)."""
    seen: dict[bytes, bytes] = {}
    for i in range(1 << 20):
        pub = hashlib.sha256(i.to_bytes(4, "big")).digest()
        kh = key_hash(NAME, ALG_ED25519, pub)
        if kh in seen:
            return seen[kh], pub
        seen[kh] = pub
    raise AssertionError("no collision found")


def test_verify_note_refuses_ambiguous_keys() -> None:
    # Key IDs are short: anyone can make a key that collides. Two trusted keys that do are a
    # misconfiguration (or an attack on the configuration), so refuse rather than pick one.
    pub1, pub2 = _colliding_keys()
    a, b = Verifier(NAME, ALG_ED25519, pub1), Verifier(NAME, ALG_ED25519, pub2)
    assert a.key_hash == b.key_hash
    with pytest.raises(
        SignatureError, match=r"ambiguous verifier keys: two keys named note\.test/key"
    ):
        verify_note(TEXT + b"\n" + sign(TEXT), [a, b])


def test_cosignature_verifier() -> None:
    v = Verifier(NAME, ALG_COSIGNATURE_V1, PUB)
    ts = 1_679_315_147
    msg = b"cosignature/v1\ntime 1679315147\n" + TEXT
    sig = struct.pack(">Q", ts) + KEY.sign(msg)
    assert v.verify(TEXT, sig)
    assert cosignature_timestamp(v, sig) == ts
    assert not v.verify(TEXT + b"x\n", sig)
    assert not v.verify(TEXT, sig[:-1])
    assert not v.verify(TEXT, KEY.sign(TEXT))  # a plain Ed25519 signature is not a cosignature
    big = 1 << 63
    sig_big = struct.pack(">Q", big) + KEY.sign(b"cosignature/v1\ntime %d\n" % big + TEXT)
    assert not v.verify(TEXT, sig_big)  # timestamps above 2**63-1 are refused
    assert cosignature_timestamp(Verifier(NAME, ALG_ED25519, PUB), sig) is None


def test_ed25519_verifier_refuses_wrong_lengths() -> None:
    v = Verifier(NAME, ALG_ED25519, PUB)
    sig = KEY.sign(TEXT)
    assert v.verify(TEXT, sig)
    assert not v.verify(TEXT, sig + b"\x00")
    assert not v.verify(TEXT, sig[:63])


def test_note_invariants() -> None:
    """A note built other than by parsing is held to the format when it is written."""
    sig = NoteSignature(NAME, b"\x00\x01\x02\x03", b"s")
    with pytest.raises(FormatError, match="does not end in a newline"):
        note_bytes(Note(b"hello", (sig,)))
    with pytest.raises(FormatError, match="no signature lines, want at least 1"):
        note_bytes(Note(TEXT, ()))
    with pytest.raises(FormatError, match="101 signature lines, want at most 100"):
        note_bytes(Note(TEXT, (sig,) * 101))
    with pytest.raises(FormatError, match="control character U\\+0000"):
        note_bytes(Note(b"a\x00\n", (sig,)))
    with pytest.raises(FormatError, match="key ID has 3 bytes, want 4"):
        note_bytes(Note(TEXT, (NoteSignature(NAME, b"\x00\x01\x02", b"s"),)))
    with pytest.raises(FormatError, match="signature is empty"):
        note_bytes(Note(TEXT, (NoteSignature(NAME, b"\x00\x01\x02\x03", b""),)))
    with pytest.raises(FormatError, match="without spaces or '\\+'"):
        note_bytes(Note(TEXT, (NoteSignature("a+b", b"\x00\x01\x02\x03", b"s"),)))


def test_note_round_trips_text_with_blank_lines() -> None:
    for text in (b"\n", b"a\n\n", b"a\n\nb\n", b"\n\n\n"):
        data = text + b"\n" + sign(text)
        note = Note.from_bytes(data)
        assert note.text == text
        assert note_bytes(note) == data
        assert verify_note(data, [Verifier(NAME, ALG_ED25519, PUB)]) == [NAME]


def test_a_verifier_key_of_small_order_is_refused() -> None:
    """rev16: a vkey holding the identity point verified a note "signed" with R = identity,
    S = 0 (OpenSSL's Ed25519 accepts it); every encoding of a point of small order, and any
    non-canonical one, is now refused when the key is read."""
    identity = (1).to_bytes(32, "little")
    for key in testkit.weak_ed25519_keys():
        with pytest.raises(FormatError, match="small order or not canonical"):
            Verifier(NAME, ALG_ED25519, key)
        for alg in (ALG_ED25519, ALG_COSIGNATURE_V1):
            vkey = (f"{NAME}+{key_hash(NAME, alg, key).hex()}+"
                    + base64.b64encode(bytes([alg]) + key).decode())
            with pytest.raises(FormatError, match="small order or not canonical"):
                verifier_from_vkey(vkey)
    forged = format_signature_line(NAME, key_hash(NAME, ALG_ED25519, identity),
                                   identity + bytes(32))
    with pytest.raises(FormatError, match="small order"):
        verify_note(TEXT + b"\n" + forged, [Verifier(NAME, ALG_ED25519, identity)])
