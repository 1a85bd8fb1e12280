"""verify.merkle: RFC 6962 known answers, reference proofs, and every transparency-dev probe.

Vectors: tests/vectors/tlog/tlog-vectors.json, collected from transparency-dev/merkle
(rfc6962_test.go, testonly/constants.go, testdata/inclusion/**, testdata/consistency/**).
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from trajledger.verify.consistency import root_from_consistency_proof, verify_consistency
from trajledger.verify.errors import FormatError, ProofError
from trajledger.verify.merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    leaf_hash,
    node_hash,
    root_from_inclusion_proof,
    root_from_leaf_hashes,
    verify_inclusion,
)

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "vectors/tlog/tlog-vectors.json").read_text()
)
REF = VECTORS["reference_tree"]
LEAVES = [bytes.fromhex(x) for x in REF["leaf_inputs_hex"]]
LEAF_HASHES = [leaf_hash(x) for x in LEAVES]
ROOTS = [bytes.fromhex(x) for x in REF["root_hashes_by_size_hex"]]


def _b64(x: str | None) -> bytes:
    return b"" if x is None else base64.b64decode(x)


# -- known answers --------------------------------------------------------------------------


def test_known_answers_from_rfc6962_test() -> None:
    kinds = set()
    for kat in VECTORS["hasher"]:
        want = bytes.fromhex(kat["want"])
        kinds.add(kat["kind"])
        if kat["kind"] == "empty_root":
            assert want == EMPTY_ROOT
            assert root_from_leaf_hashes([]) == want
        elif kat["kind"] == "leaf":
            assert leaf_hash(bytes.fromhex(kat["input_hex"])) == want
        else:
            assert kat["kind"] == "node"
            assert (
                node_hash(bytes.fromhex(kat["left_hex"]), bytes.fromhex(kat["right_hex"])) == want
            )
    assert kinds == {"empty_root", "leaf", "node"}


def test_known_answer_derivations() -> None:
    # Empty tree: MTH({}) = SHA-256("") = e3b0c442...b855.
    assert EMPTY_ROOT.hex().startswith("e3b0c442")
    # Leaf of the empty entry: SHA-256(0x00) = 6e340b9c...a01d.
    assert leaf_hash(b"") == hashlib.sha256(b"\x00").digest()
    assert (
        leaf_hash(b"").hex() == "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    )
    # Node: SHA-256(0x01 || left || right), here over 4-byte "N123" and "N456".
    assert node_hash(b"N123", b"N456") == hashlib.sha256(b"\x01N123N456").digest()
    # Domain separation: a leaf of (l || r) never equals the node over l and r.
    assert leaf_hash(b"N123N456") != node_hash(b"N123", b"N456")
    assert HASH_SIZE == 32


def test_reference_tree_node_hashes_by_level() -> None:
    level = LEAF_HASHES
    for want_hex in REF["node_hashes_by_level_hex"]:
        assert [h.hex() for h in level] == want_hex
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]


@pytest.mark.parametrize("size", range(len(ROOTS)))
def test_reference_roots_by_size(size: int) -> None:
    assert root_from_leaf_hashes(LEAF_HASHES[:size]) == ROOTS[size]


def test_root_from_leaf_hashes_refuses_short_hash() -> None:
    with pytest.raises(FormatError, match="leaf hash 1 has 31 bytes, want 32"):
        root_from_leaf_hashes([LEAF_HASHES[0], LEAF_HASHES[1][:31]])


def test_subtree_hash_rolling_vector() -> None:
    # transparency-dev/merkle testonly: hash one line per valid subtree [start, end) of 130
    # single-byte leaves; "valid" means start is 0 or aligned to the subtree's bit_ceil.
    leaves = [leaf_hash(bytes([i])) for i in range(130)]
    rolling = hashlib.sha256()
    for end in range(131):
        for start in range(end + 1):
            n = end - start
            if start == 0 or start == end or start % (1 << (n - 1).bit_length()) == 0:
                mth = root_from_leaf_hashes(leaves[start:end])
                rolling.update(f"[{start}, {end}) {mth.hex()}\n".encode())
    assert rolling.hexdigest() == VECTORS["subtree_hash_rolling_vector"]["want"]


# -- reference proofs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "case", VECTORS["reference_inclusion_proofs"], ids=lambda c: f"{c['index']}-of-{c['size']}"
)
def test_reference_inclusion_proofs(case: dict[str, Any]) -> None:
    proof = [bytes.fromhex(h) for h in case["proof"]]
    index, size = case["index"], case["size"]
    verify_inclusion(index, size, LEAF_HASHES[index], proof, ROOTS[size])
    assert root_from_inclusion_proof(index, size, LEAF_HASHES[index], proof) == ROOTS[size]


@pytest.mark.parametrize(
    "case", VECTORS["reference_consistency_proofs"], ids=lambda c: f"{c['size1']}-to-{c['size2']}"
)
def test_reference_consistency_proofs(case: dict[str, Any]) -> None:
    proof = [bytes.fromhex(h) for h in case["proof"]]
    s1, s2 = case["size1"], case["size2"]
    verify_consistency(s1, s2, proof, ROOTS[s1], ROOTS[s2])
    assert root_from_consistency_proof(s1, s2, proof, ROOTS[s1]) == ROOTS[s2]


# -- transparency-dev/merkle testdata probes -------------------------------------------------


@pytest.mark.parametrize(
    "probe", VECTORS["inclusion_probes_b64"], ids=lambda p: p["file"].removeprefix("testdata/")
)
def test_inclusion_probe(probe: dict[str, Any]) -> None:
    args = (
        probe["leafIdx"],
        probe["treeSize"],
        _b64(probe["leafHash"]),
        [_b64(h) for h in probe["proof"] or []],
        _b64(probe["root"]),
    )
    if probe["wantErr"]:
        with pytest.raises(ProofError, match=r"inclusion proof for leaf \d+ \(size \d+\)"):
            verify_inclusion(*args)
    else:
        verify_inclusion(*args)


@pytest.mark.parametrize(
    "probe", VECTORS["consistency_probes_b64"], ids=lambda p: p["file"].removeprefix("testdata/")
)
def test_consistency_probe(probe: dict[str, Any]) -> None:
    args = (
        probe["size1"],
        probe["size2"],
        [_b64(h) for h in probe["proof"] or []],
        _b64(probe["root1"]),
        _b64(probe["root2"]),
    )
    if probe["wantErr"]:
        with pytest.raises(ProofError, match=r"consistency proof from size \d+ to size \d+"):
            verify_consistency(*args)
    else:
        verify_consistency(*args)


def test_probe_file_is_fully_covered() -> None:
    # Every positive and negative probe of the source repository is present (98 + 98).
    assert len(VECTORS["inclusion_probes_b64"]) == 98
    assert len(VECTORS["consistency_probes_b64"]) == 98
    assert sum(not p["wantErr"] for p in VECTORS["inclusion_probes_b64"]) == 6


# -- messages: observed vs expected ---------------------------------------------------------


def _proof_5_of_8() -> list[bytes]:
    case = next(c for c in VECTORS["reference_inclusion_proofs"] if c["index"] == 5)
    return [bytes.fromhex(h) for h in case["proof"]]


def test_inclusion_wrong_length_message() -> None:
    proof = _proof_5_of_8()
    with pytest.raises(
        ProofError, match=r"^inclusion proof for leaf 5 \(size 8\) has 2 hashes, want 3$"
    ):
        verify_inclusion(5, 8, LEAF_HASHES[5], proof[:2], ROOTS[8])
    with pytest.raises(
        ProofError, match=r"^inclusion proof for leaf 5 \(size 6\) has 3 hashes, want 2$"
    ):
        verify_inclusion(5, 6, LEAF_HASHES[5], proof, ROOTS[6])


def test_inclusion_index_beyond_size() -> None:
    with pytest.raises(ProofError, match=r"leaf index 8 is outside the tree, want 0 <= index < 8"):
        verify_inclusion(8, 8, LEAF_HASHES[0], _proof_5_of_8(), ROOTS[8])
    with pytest.raises(ProofError, match="leaf index -1 is outside the tree"):
        verify_inclusion(-1, 8, LEAF_HASHES[0], _proof_5_of_8(), ROOTS[8])


def test_inclusion_hash_sizes_are_checked() -> None:
    proof = _proof_5_of_8()
    with pytest.raises(ProofError, match="leaf hash has 31 bytes, want 32"):
        verify_inclusion(5, 8, LEAF_HASHES[5][:31], proof, ROOTS[8])
    with pytest.raises(ProofError, match="proof hash 1 has 33 bytes, want 32"):
        verify_inclusion(5, 8, LEAF_HASHES[5], [proof[0], proof[1] + b"x", proof[2]], ROOTS[8])


def test_inclusion_root_mismatch_names_both_roots() -> None:
    with pytest.raises(ProofError, match=f"leads to root {ROOTS[8].hex()}, want {ROOTS[7].hex()}"):
        verify_inclusion(5, 8, LEAF_HASHES[5], _proof_5_of_8(), ROOTS[7])


def test_root_from_inclusion_proof_does_not_judge_the_root() -> None:
    # A wrong leaf still gives a root (of another tree): computing is not verifying.
    other = root_from_inclusion_proof(5, 8, LEAF_HASHES[4], _proof_5_of_8())
    assert len(other) == 32 and other != ROOTS[8]


def test_consistency_preconditions() -> None:
    with pytest.raises(ProofError, match="size2 4 is smaller than size1 5"):
        verify_consistency(5, 4, [], ROOTS[5], ROOTS[4])
    with pytest.raises(ProofError, match="from the empty tree is meaningless"):
        verify_consistency(0, 4, [], EMPTY_ROOT, ROOTS[4])
    with pytest.raises(ProofError, match=r"from size 4 to size 4 has 1 hashes, want 0"):
        verify_consistency(4, 4, [ROOTS[4]], ROOTS[4], ROOTS[4])
    with pytest.raises(ProofError, match=r"from size 4 to size 4 leads to new root"):
        verify_consistency(4, 4, [], ROOTS[4], ROOTS[5])
    with pytest.raises(ProofError, match=r"from size 2 to size 5 has 0 hashes, want 2"):
        verify_consistency(2, 5, [], ROOTS[2], ROOTS[5])


def test_consistency_old_root_mismatch() -> None:
    case = next(c for c in VECTORS["reference_consistency_proofs"] if c["size1"] == 6)
    proof = [bytes.fromhex(h) for h in case["proof"]]
    with pytest.raises(
        ProofError, match=f"leads to old root {ROOTS[6].hex()}, want {ROOTS[5].hex()}"
    ):
        root_from_consistency_proof(6, 8, proof, ROOTS[5])
    with pytest.raises(ProofError, match="proof hash 2 has 0 bytes, want 32"):
        verify_consistency(6, 8, [proof[0], proof[1], b""], ROOTS[6], ROOTS[8])
