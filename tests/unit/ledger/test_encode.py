"""ledger.encode: what the ledger writes, read back by verify/'s strict parsers."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from trajledger.ledger.encode import (
    checkpoint_text,
    consistency_proof_bytes,
    format_signature_line,
    note_bytes,
)
from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.consistency import parse_consistency_proof
from trajledger.verify.errors import FormatError
from trajledger.verify.note import ALG_ED25519, Note, key_hash

KEY = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"TEST ONLY test_encode").digest())
PUB = KEY.public_key().public_bytes_raw()
NAME = "note.test/key"


def test_format_signature_line() -> None:
    kh = key_hash(NAME, ALG_ED25519, PUB)
    line = format_signature_line(NAME, kh, b"\x01\x02")
    assert line == "\u2014 note.test/key ".encode() + base64.b64encode(kh + b"\x01\x02") + b"\n"
    with pytest.raises(FormatError, match="key ID has 2 bytes and signature 2"):
        format_signature_line(NAME, kh[:2], b"\x01\x02")
    with pytest.raises(FormatError, match="must be non-empty"):
        format_signature_line("", kh, b"\x01")
    with pytest.raises(FormatError, match="without spaces"):
        format_signature_line("a\u00a0b", kh, b"\x01")  # NO-BREAK SPACE is a Unicode space


def test_a_signed_checkpoint_is_written_as_the_reader_parses_it() -> None:
    cp = Checkpoint("example.com/log", 7, bytes(range(32)), ("ext one",))
    text = checkpoint_text(cp)
    assert text == b"example.com/log\n7\n" + base64.b64encode(bytes(range(32))) + b"\next one\n"
    assert Checkpoint.from_text(text) == cp
    line = format_signature_line(NAME, key_hash(NAME, ALG_ED25519, PUB), KEY.sign(text))
    data = text + b"\n" + line
    assert note_bytes(Note.from_bytes(data)) == data


def test_a_consistency_proof_member_reads_back() -> None:
    proof = [bytes([i]) * 32 for i in range(3)]
    data = consistency_proof_bytes(proof)
    assert data.count(b"\n") == 3
    assert parse_consistency_proof(data, "proof") == proof
