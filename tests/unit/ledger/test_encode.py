"""ledger.encode: what the ledger writes, read back by verify/'s strict parsers."""

from __future__ import annotations

import base64
import dataclasses
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from trajledger.ledger.encode import (
    bundle_index_bytes,
    checkpoint_text,
    consistency_proof_bytes,
    format_signature_line,
    log_entry,
    note_bytes,
    relinked_entry,
)
from trajledger.ledger.signing import canonical_json
from trajledger.verify.bundle_index import INDEX_KEYS, BundleIndex, Member, Terms
from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.consistency import parse_consistency_proof
from trajledger.verify.errors import FormatError
from trajledger.verify.log_entry import GENESIS_PREV, LogEntry
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


def test_a_relinked_entry_is_the_entry_log_entry_builds_and_checks_prev_and_time() -> None:
    fields = dict(kind="files", subject="sha256:" + "1" * 64, envelope="sha256:" + "2" * 64,
                  signers=("a" * 64, "b" * 64))  # fmt: skip
    first = log_entry(**fields, time="1970-01-01T00:00:00Z", prev=GENESIS_PREV)
    prev, time = "c" * 64, "2026-12-03T02:30:00Z"
    again = relinked_entry(first, prev, time)
    assert again == log_entry(**fields, time=time, prev=prev)
    assert again.raw == log_entry(**fields, time=time, prev=prev).raw
    assert LogEntry.from_bytes(again.raw) == again
    with pytest.raises(FormatError, match=r"log entry: prev 'C+' is not 64 lowercase hex"):
        relinked_entry(first, "C" * 64, time)
    with pytest.raises(FormatError, match=r"log entry: prev 'c+' is not 64 lowercase hex"):
        relinked_entry(first, "c" * 63, time)
    with pytest.raises(FormatError, match=r"log entry: time '2026-12-03' is not of the form"):
        relinked_entry(first, prev, "2026-12-03")
    with pytest.raises(FormatError, match=r"log entry: time .* is not a valid UTC date"):
        relinked_entry(first, prev, "2026-02-30T00:00:00Z")


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@given(members=st.lists(st.builds(Member, TEXT, st.integers(0, 2**53 - 1),
                                  st.text("0123456789abcdef", min_size=64, max_size=64)),
                        max_size=8),
       terms=st.lists(st.builds(Terms, TEXT, st.none() | TEXT, st.none() | TEXT,
                                st.none() | TEXT), max_size=4),
       fmt=st.sampled_from(sorted(INDEX_KEYS)))
def test_bundle_index_bytes_is_the_asdict_encoding(
    members: list[Member], terms: list[Terms], fmt: int
) -> None:
    """``bundle.json``'s members and terms, built field by field (`dataclasses.asdict`'s generic
    deep copy cost about 10 us a member): the bytes of the asdict encoding, in every format."""
    # built without its checks (which want real names and digests): only the encoding is tested
    index = object.__new__(BundleIndex)
    for name, value in (("subject", "sha256:" + "1" * 64), ("origin", "example.com/log"),
                        ("vkey", "vkey"), ("created", "2026-01-01T00:00:00Z"),
                        ("members", tuple(members)),
                        ("omitted", ("sha256:" + "2" * 64,)), ("format", fmt),
                        ("terms", tuple(terms)), ("erased", ()),
                        ("extension", 3 if fmt == 4 else None)):
        object.__setattr__(index, name, value)
    obj = {**{f.name: getattr(index, f.name) for f in dataclasses.fields(index) if f.init},
           "members": [dataclasses.asdict(m) for m in members],
           "terms": [dataclasses.asdict(t) for t in terms]}
    obj = {k: list(v) if isinstance(v, tuple) else v for k, v in obj.items()}
    assert bundle_index_bytes(index) == canonical_json({k: obj[k] for k in INDEX_KEYS[fmt]})
