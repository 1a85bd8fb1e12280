"""RFC 6962 Merkle tree hashing and proof verification.

Scope: the leaf and node hashes of RFC 6962 section 2.1, the Merkle Tree Hash (MTH) of a list of
leaf hashes, the verification of inclusion proofs, and the proof arithmetic consistency proofs
share (`decompose_inclusion`, `chain_inner`, `chain_border_right`, `check_proof_hashes`).
Verification follows ``transparency-dev/merkle`` ``proof.VerifyInclusion`` exactly: the same
preconditions, the same exact proof lengths, the same accepted and refused inputs. On top of Go,
every proof hash must be 32 bytes long.

Non-scope: consistency proofs (``verify.consistency``, ``proof.VerifyConsistency``: only a
verifier holding an earlier checkpoint checks one), building proofs from stored data
(``verify.tiles.TileReader`` does that), the right edge of a tree (``verify.compact``, as
transparency-dev's ``compact`` package), tile layout, checkpoints and signatures.

Spec: RFC 6962 section 2.1 (hashes, MTH, PATH, PROOF); c2sp.org/tlog-tiles uses the same tree.

``root_from_*`` functions compute a root from a proof without comparing it to a trusted one (they
still refuse proofs of the wrong shape); ``verify_*`` functions compare and raise `ProofError`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from .errors import FormatError, ProofError

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "LEAF_PREFIX",
    "NODE_PREFIX",
    "chain_border_right",
    "chain_inner",
    "check_proof_hashes",
    "decompose_inclusion",
    "leaf_hash",
    "node_hash",
    "root_from_inclusion_proof",
    "root_from_leaf_hashes",
    "verify_inclusion",
]

HASH_SIZE = 32
"""Size in bytes of every hash in the tree (SHA-256)."""

LEAF_PREFIX = b"\x00"
"""Domain-separation byte prepended to an entry before hashing it as a leaf."""

NODE_PREFIX = b"\x01"
"""Domain-separation byte prepended to two child hashes before hashing them as a node."""

EMPTY_ROOT: bytes = hashlib.sha256(b"").digest()
"""MTH of the empty tree: SHA-256 of the empty string."""


def leaf_hash(entry: bytes) -> bytes:
    """Return the RFC 6962 leaf hash ``SHA-256(0x00 || entry)``.

    Args:
        entry: the exact bytes of one log entry.

    Returns:
        The 32-byte leaf hash.
    """
    return hashlib.sha256(LEAF_PREFIX + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Return the RFC 6962 interior node hash ``SHA-256(0x01 || left || right)``.

    Lengths are not checked: the hash is defined over any two byte strings.

    Args:
        left: hash of the left child.
        right: hash of the right child.

    Returns:
        The 32-byte node hash.
    """
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def root_from_leaf_hashes(hashes: Sequence[bytes]) -> bytes:
    """Return the Merkle Tree Hash of a list of leaf hashes.

    Hashes level by level, promoting an unpaired last node unchanged; this is the same tree as the
    RFC 6962 recursion, which splits at the largest power of two smaller than the size.

    Args:
        hashes: the leaf hashes, in log order.

    Returns:
        The 32-byte root; `EMPTY_ROOT` for no leaves.

    Raises:
        FormatError: a hash is not 32 bytes long.
    """
    for i, h in enumerate(hashes):
        if len(h) != HASH_SIZE:
            raise FormatError(f"leaf hash {i} has {len(h)} bytes, want {HASH_SIZE}")
    if not hashes:
        return EMPTY_ROOT
    level = list(hashes)
    while len(level) > 1:
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def decompose_inclusion(index: int, size: int) -> tuple[int, int]:
    """Split the proof for ``index`` in a tree of ``size`` into its inner and border lengths.

    The inner part runs up to where the paths to ``index`` and ``size - 1`` meet; above that, the
    path follows the right border and only left siblings (one per set bit) remain.
    """
    inner = (index ^ (size - 1)).bit_length()
    border = bin(index >> inner).count("1")
    return inner, border


def chain_inner(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    # Bit i of index says whether the path node is a right child at level i.
    for i, h in enumerate(proof):
        seed = node_hash(seed, h) if (index >> i) & 1 == 0 else node_hash(h, seed)
    return seed


def chain_border_right(seed: bytes, proof: Sequence[bytes]) -> bytes:
    for h in proof:
        seed = node_hash(h, seed)
    return seed


def check_proof_hashes(what: str, proof: Sequence[bytes]) -> None:
    for i, h in enumerate(proof):
        if len(h) != HASH_SIZE:
            raise ProofError(f"{what}: proof hash {i} has {len(h)} bytes, want {HASH_SIZE}")


def root_from_inclusion_proof(
    index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes]
) -> bytes:
    """Compute the root implied by an inclusion proof, without judging it.

    Args:
        index: zero-based index of the leaf.
        size: size of the tree the proof is for.
        leaf_hash: the leaf's hash (see `leaf_hash`).
        proof: sibling hashes from the leaf's level upwards (RFC 6962 PATH).

    Returns:
        The root of a tree of ``size`` leaves that holds ``leaf_hash`` at ``index``.

    Raises:
        ProofError: ``index`` is not in ``[0, size)``, a hash is not 32 bytes long, or the proof
            does not have exactly the number of hashes a tree of that size needs.
    """
    what = f"inclusion proof for leaf {index} (size {size})"
    if index < 0 or index >= size:
        raise ProofError(
            f"{what}: leaf index {index} is outside the tree, want 0 <= index < {size}"
        )
    if len(leaf_hash) != HASH_SIZE:
        raise ProofError(f"{what}: leaf hash has {len(leaf_hash)} bytes, want {HASH_SIZE}")
    inner, border = decompose_inclusion(index, size)
    if len(proof) != inner + border:
        raise ProofError(f"{what} has {len(proof)} hashes, want {inner + border}")
    check_proof_hashes(what, proof)
    res = chain_inner(leaf_hash, proof[:inner], index)
    return chain_border_right(res, proof[inner:])


def verify_inclusion(
    index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that ``leaf_hash`` is at ``index`` in the tree of ``size`` leaves with ``root``.

    Steps:
        1. Check the preconditions and compute the root the proof implies
           (`root_from_inclusion_proof`).
        2. Compare it with the trusted ``root``.

    Args:
        index: zero-based index of the leaf.
        size: size of the tree the proof is for.
        leaf_hash: the leaf's hash (see `leaf_hash`).
        proof: sibling hashes from the leaf's level upwards.
        root: the trusted root of the tree of ``size`` leaves (from a verified checkpoint).

    Raises:
        ProofError: the proof is malformed or leads to another root.
    """
    # (1)
    calculated = root_from_inclusion_proof(index, size, leaf_hash, proof)
    # (2)
    if calculated != root:
        raise ProofError(
            f"inclusion proof for leaf {index} (size {size}) leads to root {calculated.hex()}, "
            f"want {root.hex()}"
        )
