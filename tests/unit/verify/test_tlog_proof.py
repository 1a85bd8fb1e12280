"""verify.tlog_proof: the c2sp.org/tlog-proof@v1 text format and its verification.

Named negative cases live in tests/vectors/tlog-proof/ (run by test_vectors_generated.py).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from trajledger.ledger.encode import tlog_proof_bytes
from trajledger.verify.errors import FormatError, PolicyError, ProofError
from trajledger.verify.note import verifier_from_vkey
from trajledger.verify.tiles import TileReader
from trajledger.verify.tlog_proof import (
    MAX_PROOF_HASHES,
    TLOG_PROOF_HEADER,
    TlogProof,
    verify_tlog_proof,
)

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "vectors/tlog/tlog-vectors.json").read_text()
)
TESSERA = VECTORS["tessera_posix_log"]
LOG = verifier_from_vkey(TESSERA["vkey"])
FILES = {k: bytes.fromhex(v) for k, v in TESSERA["files_hex"].items()}
ENTRIES = [e.encode() for e in TESSERA["entries_utf8"]]
CHECKPOINT = str(TESSERA["checkpoint_latest"]).encode()
READER = TileReader(lambda p: FILES[p], 15)


def proof_for(index: int, extra: bytes | None = None) -> TlogProof:
    return TlogProof(index, tuple(READER.inclusion_proof(index)), CHECKPOINT, extra)


def test_every_tessera_entry_has_a_verifying_proof() -> None:
    for i, entry in enumerate(ENTRIES):
        data = tlog_proof_bytes(proof_for(i))
        cp = verify_tlog_proof(data, entry, LOG, origin="example.com/log/testdata")
        assert (cp.origin, cp.size) == ("example.com/log/testdata", 15)


def test_text_layout_and_round_trip() -> None:
    p = proof_for(6, extra=b"\x00extra")
    data = tlog_proof_bytes(p)
    lines = data.split(b"\n")
    assert lines[0] == TLOG_PROOF_HEADER
    assert lines[1] == b"extra " + base64.b64encode(b"\x00extra")
    assert lines[2] == b"index 6"
    assert [base64.b64decode(x) for x in lines[3 : 3 + len(p.inclusion)]] == list(p.inclusion)
    assert lines[3 + len(p.inclusion)] == b""
    assert data.endswith(b"\n\n" + CHECKPOINT) or data.endswith(b"\n" + CHECKPOINT)
    assert TlogProof.from_bytes(data) == p
    assert TlogProof.from_bytes(tlog_proof_bytes(proof_for(6))).extra is None


def test_single_entry_tree_has_no_hash_lines() -> None:
    one = str(TESSERA["checkpoints"]["1"]).encode()
    data = tlog_proof_bytes(TlogProof(0, (), one))
    assert data.startswith(TLOG_PROOF_HEADER + b"\nindex 0\n\n")
    verify_tlog_proof(data, ENTRIES[0], LOG)


def test_extra_data_is_not_authenticated() -> None:
    # Changing the extra data changes nothing that is verified: callers must not trust it.
    verify_tlog_proof(tlog_proof_bytes(proof_for(3, extra=b"anything")), ENTRIES[3], LOG)


def test_verification_errors() -> None:
    with pytest.raises(ProofError, match=r"inclusion proof for leaf 3 \(size 15\) leads to root"):
        verify_tlog_proof(proof_for(3), ENTRIES[4], LOG)
    with pytest.raises(PolicyError, match="want 'other'"):
        verify_tlog_proof(proof_for(3), ENTRIES[3], LOG, origin="other")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.replace(b"@v1\n", b"@v1 \n", 1), "want b'c2sp.org/tlog-proof@v1'"),
        (lambda d: d.replace(b"index 3\n", b"index +3\n", 1), "want 'index <decimal"),
        (lambda d: d.replace(b"index 3\n", b"index  3\n", 1), "want 'index <decimal"),
        (lambda d: d.replace(b"index 3\n", b"", 1), "want 'index <decimal"),
        (lambda d: d.replace(b"index 3\n", b"index 3\nextra AA==\n", 1), "hash 0: 'extra AA=="),
        (lambda d: d.replace(b"index 3\n", b"index 3\n\xc3\xa9\n", 1), "hash line is not ASCII"),
        (lambda d: d.replace(b"index 3\n", b"extra \nindex 3\n", 1), "extra data is empty"),
        (lambda d: TLOG_PROOF_HEADER, "starts with"),
        (lambda d: d.split(b"\n\n")[0], "no blank line before its checkpoint"),
        (lambda d: d.split(b"\n\n")[0] + b"\n\n", "no blank line before its signatures"),
        (lambda d: d + b"x", "does not end in a newline"),
    ],
)
def test_strict_parsing(mutate: Any, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        TlogProof.from_bytes(mutate(tlog_proof_bytes(proof_for(3))))


def test_invariants() -> None:
    h = READER.inclusion_proof(3)
    with pytest.raises(FormatError, match=r"index -1, want 0\.\.2"):
        TlogProof(-1, tuple(h), CHECKPOINT)
    with pytest.raises(FormatError, match="hash 1 has 31 bytes, want 32"):
        TlogProof(3, (h[0], h[1][:31]), CHECKPOINT)
    with pytest.raises(FormatError, match=f"65 inclusion hashes, want at most {MAX_PROOF_HASHES}"):
        TlogProof(3, (h[0],) * 65, CHECKPOINT)
    with pytest.raises(FormatError, match="extra data is empty"):
        TlogProof(3, tuple(h), CHECKPOINT, b"")
    with pytest.raises(FormatError, match="no blank line"):
        TlogProof(3, tuple(h), b"not a note\n")
    too_many = TLOG_PROOF_HEADER + b"\nindex 3\n" + (base64.b64encode(h[0]) + b"\n") * 65 + b"\n"
    with pytest.raises(FormatError, match="more than 64 inclusion hashes"):
        TlogProof.from_bytes(too_many + CHECKPOINT)
