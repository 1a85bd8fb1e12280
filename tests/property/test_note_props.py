"""Property tests: signed notes, checkpoints and tlog-proofs refuse every single-byte change.

Also: whatever the parsers accept, they write back byte for byte (strict parsing has one
spelling per value), and on any input they raise nothing but FormatError.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.ledger.encode import (
    checkpoint_text,
    format_signature_line,
    note_bytes,
    tlog_proof_bytes,
)
from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.errors import FormatError, ProvenanceError
from trajledger.verify.note import (
    ALG_ED25519,
    Note,
    Verifier,
    key_hash,
    verifier_from_vkey,
    verify_note,
)
from trajledger.verify.tiles import TileReader
from trajledger.verify.tlog_proof import TlogProof, verify_tlog_proof

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[1] / "vectors/tlog/tlog-vectors.json").read_text()
)
TESSERA = VECTORS["tessera_posix_log"]
LOG = verifier_from_vkey(TESSERA["vkey"])
FILES = {k: bytes.fromhex(v) for k, v in TESSERA["files_hex"].items()}
ENTRIES = [e.encode() for e in TESSERA["entries_utf8"]]
CHECKPOINT = str(TESSERA["checkpoint_latest"]).encode()
PROOF_9 = TlogProof(9, tuple(TileReader(FILES.__getitem__, 15).inclusion_proof(9)), CHECKPOINT)

# TEST ONLY key from a fixed seed.
KEY = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"TEST ONLY note props").digest())
PUB = KEY.public_key().public_bytes_raw()

SETTINGS = settings(max_examples=300, deadline=None)


@st.composite
def byte_change(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with one byte replaced, deleted or inserted."""
    pos = draw(st.integers(0, len(data) - 1))
    kind = draw(st.sampled_from(["replace", "delete", "insert"]))
    if kind == "delete":
        return data[:pos] + data[pos + 1 :]
    value = draw(st.integers(0, 255))
    if kind == "insert":
        return data[:pos] + bytes([value]) + data[pos:]
    if value == data[pos]:
        value ^= 1
    return data[:pos] + bytes([value]) + data[pos + 1 :]


@SETTINGS
@given(byte_change(CHECKPOINT))
def test_any_single_byte_change_to_a_signed_checkpoint_is_rejected(mutated: bytes) -> None:
    with pytest.raises(ProvenanceError):
        verify_checkpoint(mutated, LOG, origin="example.com/log/testdata")


@SETTINGS
@given(byte_change(tlog_proof_bytes(PROOF_9)))
def test_any_single_byte_change_to_a_tlog_proof_is_rejected(mutated: bytes) -> None:
    # (Without an extra line: extra data is not authenticated, by the spec.)
    with pytest.raises(ProvenanceError):
        verify_tlog_proof(mutated, ENTRIES[9], LOG, origin="example.com/log/testdata")


def test_unmutated_inputs_verify() -> None:
    verify_checkpoint(CHECKPOINT, LOG, origin="example.com/log/testdata")
    verify_tlog_proof(tlog_proof_bytes(PROOF_9), ENTRIES[9], LOG, origin="example.com/log/testdata")


names = st.text(
    alphabet=st.characters(
        blacklist_categories=["Cc", "Cs", "Zs", "Zl", "Zp"], blacklist_characters="+\x85"
    ),
    min_size=1,
    max_size=20,
)
texts = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"]).filter(lambda c: c >= " " or c == "\n"),
    max_size=60,
).map(lambda t: t + "\n")


@SETTINGS
@given(texts, names)
def test_signed_notes_round_trip_and_verify(text: str, name: str) -> None:
    body = text.encode()
    kh = key_hash(name, ALG_ED25519, PUB)
    data = body + b"\n" + format_signature_line(name, kh, KEY.sign(body))
    note = Note.from_bytes(data)
    assert note.text == body
    assert note_bytes(note) == data
    assert verify_note(note, [Verifier(name, ALG_ED25519, PUB)]) == [name]


@SETTINGS
@given(st.binary(max_size=200))
def test_note_parser_accepts_only_what_it_writes_back(data: bytes) -> None:
    try:
        note = Note.from_bytes(data)
    except FormatError:
        return
    assert note_bytes(note) == data


@SETTINGS
@given(byte_change(CHECKPOINT))
def test_parsers_raise_only_format_errors(mutated: bytes) -> None:
    for parse in (
        Note.from_bytes,
        Checkpoint.from_text,
        TlogProof.from_bytes,
        lambda b: Checkpoint.from_text(Note.from_bytes(b).text),
    ):
        try:
            value = parse(mutated)
        except FormatError:
            continue
        if isinstance(value, Checkpoint):
            assert checkpoint_text(value) in mutated
