"""verify.checkpoint: checkpoint text, log signature, witness cosignatures and consistency.

Named negative cases live in tests/vectors/checkpoint/ (run by test_vectors_generated.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from trajledger.ledger.encode import checkpoint_text, format_signature_line
from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.consistency import check_consistent, parse_consistency_proofs
from trajledger.verify.cosignatures import verify_cosignatures
from trajledger.verify.cosigned import cosignature_message
from trajledger.verify.errors import ConsistencyError, FormatError, PolicyError, SignatureError
from trajledger.verify.merkle import EMPTY_ROOT, leaf_hash
from trajledger.verify.note import (
    ALG_COSIGNATURE_V1,
    ALG_ED25519,
    Note,
    Verifier,
    key_hash,
    verifier_from_vkey,
)
from trajledger.verify.tiles import TileReader

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "vectors/tlog/tlog-vectors.json").read_text()
)
TESSERA = VECTORS["tessera_posix_log"]
TESSERA_LOG = verifier_from_vkey(TESSERA["vkey"])
TESSERA_FILES = {k: bytes.fromhex(v) for k, v in TESSERA["files_hex"].items()}

# The example checkpoint of c2sp.org/tlog-checkpoint and tlog-cosignature.
SPEC_BODY = b"example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"

# TEST ONLY witness key from a fixed seed.
WITNESS_KEY = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"TEST ONLY witness").digest())
WITNESS_PUB = WITNESS_KEY.public_key().public_bytes_raw()
WITNESS = Verifier("witness.test/w", ALG_COSIGNATURE_V1, WITNESS_PUB)


def tessera(size: int) -> bytes:
    return str(TESSERA["checkpoints"][str(size)]).encode()


def cosign(note: bytes, ts: int) -> bytes:
    """Append a cosignature/v1 line by the TEST ONLY witness."""
    text = Note.from_bytes(note).text
    sig = struct.pack(">Q", ts) + WITNESS_KEY.sign(cosignature_message(text, ts))
    return note + format_signature_line(WITNESS.name, WITNESS.key_hash, sig)


def fetch(path: str) -> bytes:
    try:
        return TESSERA_FILES[path]
    except KeyError:
        raise FileNotFoundError(path) from None


# -- text -----------------------------------------------------------------------------------


def test_spec_example_parses_and_round_trips() -> None:
    cp = Checkpoint.from_text(SPEC_BODY)
    assert cp.origin == "example.com/behind-the-sofa"
    assert cp.size == 20852163
    assert cp.root == base64.b64decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=")
    assert cp.extensions == ()
    assert checkpoint_text(cp) == SPEC_BODY


def test_extensions_round_trip() -> None:
    body = SPEC_BODY + b"ext 1\n\xe2\x80\x94 unicode ok\n"
    cp = Checkpoint.from_text(body)
    assert cp.extensions == ("ext 1", "\u2014 unicode ok")
    assert checkpoint_text(cp) == body


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (SPEC_BODY[:-1], "does not end in a newline"),
        (SPEC_BODY.replace(b"sofa", b"s\xffa"), "not valid UTF-8"),
        (SPEC_BODY.replace(b"sofa", b"so\tfa"), "control character U\\+0009"),
        (SPEC_BODY.replace(b"20852163", b"20852163 "), "not a decimal"),
        (SPEC_BODY.replace(b"20852163", b""), "not a decimal"),
        (SPEC_BODY + b"\n", "extension line is empty"),
        (b"\n\n\n", "not a decimal"),
        (SPEC_BODY.replace(b"=\n", b"\n"), "not standard base64"),
    ],
)
def test_strict_text(body: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        Checkpoint.from_text(body)


def test_checkpoint_invariants() -> None:
    root = EMPTY_ROOT
    with pytest.raises(FormatError, match="origin line is empty"):
        Checkpoint("", 0, root)
    with pytest.raises(FormatError, match="origin line 'a\\\\nb' holds a control character"):
        Checkpoint("a\nb", 0, root)
    with pytest.raises(FormatError, match=r"size -1, want 0\.\.2"):
        Checkpoint("o", -1, root)
    with pytest.raises(FormatError, match="size True"):
        Checkpoint("o", True, root)
    with pytest.raises(FormatError, match="root has 33 bytes, want 32"):
        Checkpoint("o", 1, root + b"x")
    with pytest.raises(FormatError, match="extension line is empty"):
        Checkpoint("o", 1, root, ("",))
    assert checkpoint_text(Checkpoint("o", (1 << 64) - 1, root)) == b"o\n18446744073709551615\n" + (
        base64.b64encode(root) + b"\n"
    )


# -- log signature --------------------------------------------------------------------------


def test_tessera_checkpoints_verify() -> None:
    for size in range(16):
        cp = verify_checkpoint(tessera(size), TESSERA_LOG, origin="example.com/log/testdata")
        assert cp.size == size
        assert cp.root == TileReader(fetch, size).root()


def test_wrong_expected_origin_is_a_policy_error() -> None:
    with pytest.raises(PolicyError, match=r"origin 'example\.com/log/testdata', want 'x'"):
        verify_checkpoint(tessera(3), TESSERA_LOG, origin="x")


def test_checkpoint_signed_by_other_key_is_refused() -> None:
    other = verifier_from_vkey(VECTORS["signed_note_example"]["vkey"])
    with pytest.raises(SignatureError, match="no signature by a known key"):
        verify_checkpoint(tessera(3), other)


def test_attack_modified_size_keeps_the_log_signature() -> None:
    # Change the size, keep the signature: the signature no longer matches.
    forged = tessera(15).replace(b"\n15\n", b"\n16\n", 1)
    with pytest.raises(SignatureError, match="does not verify"):
        verify_checkpoint(forged, TESSERA_LOG)


def test_malformed_note_is_a_format_error() -> None:
    with pytest.raises(FormatError, match="no blank line"):
        verify_checkpoint(tessera(3).replace(b"\n\n", b"\n"), TESSERA_LOG)


# -- cosignatures ---------------------------------------------------------------------------


def test_cosignature_message_matches_the_spec_example() -> None:
    assert cosignature_message(SPEC_BODY, 1679315147) == (
        b"cosignature/v1\ntime 1679315147\n" + SPEC_BODY
    )
    with pytest.raises(ValueError, match="timestamp -1"):
        cosignature_message(SPEC_BODY, -1)
    with pytest.raises(ValueError, match="timestamp 9223372036854775808"):
        cosignature_message(SPEC_BODY, 1 << 63)


def test_cosigned_tessera_checkpoint() -> None:
    note = cosign(tessera(15), 1_700_000_000)
    # The log signature still verifies; the cosignature is an unknown key to the log verifier.
    assert verify_checkpoint(note, TESSERA_LOG).size == 15
    assert verify_cosignatures(note, [WITNESS]) == {WITNESS.name: 1_700_000_000}
    assert verify_cosignatures(note, [WITNESS], not_after=1_700_000_000) == {
        WITNESS.name: 1_700_000_000
    }
    with pytest.raises(SignatureError, match="timestamped 1700000000, want at most 1699999999"):
        verify_cosignatures(note, [WITNESS], not_after=1_699_999_999)


def test_a_witnessed_log_refuses_a_cosignature_from_the_future() -> None:
    """redo15 finding 5: a verification's ``witnesses`` check took a cosignature dated years
    ahead (a witness with a wrong or malicious clock makes a checkpoint look fresh); now one
    more than `COSIGNATURE_SKEW` seconds ahead of this clock fails, saying so."""
    from trajledger.ledger.encode import vkey_string
    from trajledger.verify.cosignatures import check_witnesses
    from trajledger.verify.policy import Role
    from trajledger.verify.report import Node
    from trajledger.verify.times import COSIGNATURE_SKEW

    origin = Checkpoint.from_text(Note.from_bytes(tessera(15)).text).origin
    role = Role("witness", 1, vkeys=(vkey_string(WITNESS.name, WITNESS_PUB, ALG_COSIGNATURE_V1),),
                logs=(origin,))
    now = int(time.time())
    for ts, ok in ((now, True), (now + COSIGNATURE_SKEW // 2, True),
                   (now + COSIGNATURE_SKEW + 60, False), (now + 10 * 365 * 86400, False)):
        log = Node("log", "log", name="log")
        check_witnesses(log, cosign(tessera(15), ts), role)
        assert log.ok is ok, (ts - now, [c.detail for c in log.checks])
        if not ok:
            (check,) = log.checks
            assert f"cosignature by {WITNESS.name} is timestamped {ts}, want at most " \
                in check.detail and "dated in the future" in check.detail


def test_cosignatures_threshold_counts_distinct_witnesses() -> None:
    note = cosign(cosign(tessera(15), 1), 2)  # the same witness twice
    assert verify_cosignatures(note, [WITNESS]) == {WITNESS.name: 1}
    with pytest.raises(SignatureError, match="1 valid witness cosignatures, want at least 2"):
        verify_cosignatures(note, [WITNESS], threshold=2)
    with pytest.raises(SignatureError, match="0 valid witness cosignatures, want at least 1"):
        verify_cosignatures(tessera(15), [WITNESS])
    with pytest.raises(ValueError, match="threshold 0"):
        verify_cosignatures(note, [WITNESS], threshold=0)


def test_a_witness_counts_once_under_two_names() -> None:
    """Issue 18: the cosignature message does not name the witness, so w1's line copied under
    another name (with that name's key id) verifies too: it counts once, by key."""
    alias = Verifier("witness.test/alias", ALG_COSIGNATURE_V1, WITNESS_PUB)
    note = cosign(tessera(15), 7)
    line = Note.from_bytes(note).signatures[-1]
    copied = note + format_signature_line(alias.name, alias.key_hash, line.signature)
    assert verify_cosignatures(copied, [WITNESS, alias]) == {WITNESS.name: 7}
    with pytest.raises(SignatureError, match="1 valid witness cosignatures, want at least 2"):
        verify_cosignatures(copied, [WITNESS, alias], threshold=2)


def test_plain_ed25519_witness_has_no_timestamp() -> None:
    key = Ed25519PrivateKey.from_private_bytes(b"\x05" * 32)
    pub = key.public_key().public_bytes_raw()
    text = Note.from_bytes(tessera(4)).text
    kh = key_hash("w.test/ed", ALG_ED25519, pub)
    line = format_signature_line("w.test/ed", kh, key.sign(text))
    found = verify_cosignatures(tessera(4) + line, [Verifier("w.test/ed", ALG_ED25519, pub)])
    assert found == {"w.test/ed": None}


def test_cosignature_needs_a_checkpoint_body() -> None:
    text = b"not a checkpoint\n"
    note = text + b"\n" + format_signature_line("x.test/k", b"\x00\x00\x00\x00", b"s")
    with pytest.raises(FormatError, match="checkpoint has 1 lines, want at least 3"):
        verify_cosignatures(note, [WITNESS])


# -- consistency ----------------------------------------------------------------------------


def _cp(size: int) -> Checkpoint:
    return verify_checkpoint(tessera(size), TESSERA_LOG)


def test_all_tessera_checkpoints_are_consistent() -> None:
    reader = TileReader(fetch, 15)
    for old in range(16):
        for new in range(old, 16):
            proof = reader.consistency_proof(old, new) if old > 0 else []
            check_consistent(_cp(old), _cp(new), proof)


def test_rollback_carries_evidence() -> None:
    old, new = _cp(10), _cp(9)
    with pytest.raises(ConsistencyError, match=r"rollback for .*testdata: size 9") as e:
        check_consistent(old, new, [])
    assert (e.value.old, e.value.new, e.value.proof) == (old, new, [])


def test_fork_at_same_size() -> None:
    old = _cp(9)
    forked = Checkpoint(old.origin, 9, leaf_hash(b"evil"))
    with pytest.raises(ConsistencyError, match=r"fork for .*: two roots at size 9"):
        check_consistent(old, forked, [])
    with pytest.raises(ConsistencyError, match="equal sizes 9 has 1 hashes, want 0"):
        check_consistent(old, old, [old.root])


def test_fork_at_larger_size_fails_the_proof() -> None:
    reader = TileReader(fetch, 15)
    old = _cp(6)
    forked = Checkpoint(old.origin, 15, leaf_hash(b"evil"))
    proof = reader.consistency_proof(6)
    with pytest.raises(ConsistencyError, match="not consistent: consistency proof from") as e:
        check_consistent(old, forked, proof)
    assert e.value.proof == proof
    assert e.value.__cause__ is not None


def test_empty_tree_and_other_log() -> None:
    empty = _cp(0)
    check_consistent(empty, _cp(5), [])
    with pytest.raises(ConsistencyError, match="from size 0 has 1 hashes, want 0"):
        check_consistent(empty, _cp(5), [EMPTY_ROOT])
    bogus_empty = Checkpoint(empty.origin, 0, leaf_hash(b""))
    with pytest.raises(ConsistencyError, match=r"checkpoint of size 0 .* has root 6e34"):
        check_consistent(bogus_empty, _cp(5), [])
    with pytest.raises(ConsistencyError, match=r"different logs: '.*testdata' and 'b'"):
        check_consistent(_cp(5), Checkpoint("b", 5, _cp(5).root), [])


def test_a_bundle_s_consistency_proofs_start_below_its_checkpoint() -> None:
    h = bytes(range(32))
    line = base64.b64encode(h) + b"\n"
    assert parse_consistency_proofs({3: line}, 5, "b") == {3: [h]}
    with pytest.raises(FormatError, match=r"^b: member proofs/5\.consistency: from size 5, not "
                       r"below the checkpoint's 5$"):
        parse_consistency_proofs({3: line, 5: line}, 5, "b")
    with pytest.raises(FormatError, match=r"^b: member proofs/3\.consistency: want one base64"):
        parse_consistency_proofs({3: b""}, 5, "b")
