"""RFC 6962 Merkle tree hashing and proof verification.

Scope: the leaf and node hashes of RFC 6962 section 2.1, the Merkle Tree Hash (MTH) of a list of
leaf hashes, and the verification of inclusion and consistency proofs. Verification follows
``transparency-dev/merkle`` ``proof.VerifyInclusion`` / ``proof.VerifyConsistency`` exactly: the
same preconditions, the same exact proof lengths, the same accepted and refused inputs. On top of
Go, every proof hash must be 32 bytes long.

Non-scope: building proofs from stored data (``verify.tiles.TileReader`` does that), the right
edge of a tree (``verify.compact``, as transparency-dev's ``compact`` package), tile layout,
checkpoints and signatures.

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
    "leaf_hash",
    "node_hash",
    "root_from_consistency_proof",
    "root_from_inclusion_proof",
    "root_from_leaf_hashes",
    "verify_consistency",
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


def _decompose_inclusion(index: int, size: int) -> tuple[int, int]:
    """Split the proof for ``index`` in a tree of ``size`` into its inner and border lengths.

    The inner part runs up to where the paths to ``index`` and ``size - 1`` meet; above that, the
    path follows the right border and only left siblings (one per set bit) remain.
    """
    inner = (index ^ (size - 1)).bit_length()
    border = bin(index >> inner).count("1")
    return inner, border


def _chain_inner(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    # Bit i of index says whether the path node is a right child at level i.
    for i, h in enumerate(proof):
        seed = node_hash(seed, h) if (index >> i) & 1 == 0 else node_hash(h, seed)
    return seed


def _chain_inner_right(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    # Only left siblings count: the result is the hash of the older, smaller version of the tree.
    for i, h in enumerate(proof):
        if (index >> i) & 1 == 1:
            seed = node_hash(h, seed)
    return seed


def _chain_border_right(seed: bytes, proof: Sequence[bytes]) -> bytes:
    for h in proof:
        seed = node_hash(h, seed)
    return seed


def _check_proof_hashes(what: str, proof: Sequence[bytes]) -> None:
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
    inner, border = _decompose_inclusion(index, size)
    if len(proof) != inner + border:
        raise ProofError(f"{what} has {len(proof)} hashes, want {inner + border}")
    _check_proof_hashes(what, proof)
    res = _chain_inner(leaf_hash, proof[:inner], index)
    return _chain_border_right(res, proof[inner:])


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


def root_from_consistency_proof(
    size1: int, size2: int, proof: Sequence[bytes], root1: bytes
) -> bytes:
    """Compute the newer root implied by a consistency proof from a trusted older root.

    The proof is checked against ``root1`` along the way (it must rebuild it), because the newer
    root is only meaningful if the older one is reproduced from the same hashes.

    Args:
        size1: size of the older tree; must be positive.
        size2: size of the newer tree; must be at least ``size1``.
        proof: the RFC 6962 consistency proof (PROOF(size1, D[size2])).
        root1: the trusted root of the older tree.

    Returns:
        The root of the tree of ``size2`` leaves that the proof implies.

    Raises:
        ProofError: ``size2 < size1``; ``size1`` is 0; equal sizes with a non-empty proof; a proof
            of the wrong length or with a hash that is not 32 bytes; a proof that does not
            rebuild ``root1``.
    """
    what = f"consistency proof from size {size1} to size {size2}"
    if size1 < 0 or size2 < size1:
        raise ProofError(
            f"{what}: size2 {size2} is smaller than size1 {size1}, want size1 <= size2"
        )
    if size1 == 0:
        raise ProofError(f"{what}: a proof from the empty tree is meaningless, want size1 > 0")
    if size1 == size2:
        if proof:
            raise ProofError(f"{what} has {len(proof)} hashes, want 0")
        return root1

    inner, border = _decompose_inclusion(size1 - 1, size2)
    shift = (size1 & -size1).bit_length() - 1  # trailing zeros of size1
    inner -= shift  # the levels below `shift` are covered by one complete subtree of size1
    # The proof starts with the root of the subtree of size 2**shift that ends at size1, unless
    # that subtree is the whole older tree, whose root the verifier already trusts.
    if size1 == 1 << shift:
        seed, start = root1, 0
    else:
        seed, start = (proof[0] if proof else b""), 1
    want = start + inner + border
    if len(proof) != want:
        raise ProofError(f"{what} has {len(proof)} hashes, want {want}")
    _check_proof_hashes(what, proof)
    rest = proof[start:]

    mask = (size1 - 1) >> shift
    hash1 = _chain_inner_right(seed, rest[:inner], mask)
    hash1 = _chain_border_right(hash1, rest[inner:])
    if hash1 != root1:
        raise ProofError(f"{what} leads to old root {hash1.hex()}, want {root1.hex()}")

    hash2 = _chain_inner(seed, rest[:inner], mask)
    return _chain_border_right(hash2, rest[inner:])


def verify_consistency(
    size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes
) -> None:
    """Check that the tree of ``size2`` leaves with ``root2`` extends the one with ``root1``.

    Steps:
        1. Check the preconditions, rebuild ``root1`` from the proof and compute the newer root
           the proof implies (`root_from_consistency_proof`).
        2. Compare it with the trusted ``root2``.

    Args:
        size1: size of the older tree; must be positive.
        size2: size of the newer tree; must be at least ``size1``.
        proof: the RFC 6962 consistency proof.
        root1: trusted root of the older tree.
        root2: trusted root of the newer tree.

    Raises:
        ProofError: the proof is malformed or does not link the two roots.
    """
    # (1)
    calculated = root_from_consistency_proof(size1, size2, proof, root1)
    # (2)
    if calculated != root2:
        raise ProofError(
            f"consistency proof from size {size1} to size {size2} leads to new root "
            f"{calculated.hex()}, want {root2.hex()}"
        )
