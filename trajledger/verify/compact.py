"""Compact ranges: the right edge of an RFC 6962 tree, the hashes that stand for its leaves.

Scope: `CompactRange` (the roots of a tree's maximal perfect subtrees, left to right): extending
it by leaf hashes, its root, and inclusion proofs for leaves appended to it. As
``transparency-dev/merkle``'s ``compact`` package beside its ``proof`` package. Loaded only
where a tree is rebuilt from its entries (a log's extension in a bundle, a whole log, a trust
state's floor): checking entries by inclusion proofs never needs it.
Non-scope: leaf and node hashes and proof verification (``verify.merkle``).
Spec: RFC 6962 section 2.1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .errors import ProofError
from .merkle import EMPTY_ROOT, HASH_SIZE, node_hash, root_from_leaf_hashes

__all__ = ["CompactRange"]


@dataclass(frozen=True)
class CompactRange:
    """The right edge of a tree: the roots of its maximal perfect subtrees, left to right.

    ``O(log n)`` hashes stand for the first ``size`` leaves: appending leaves and computing the
    root needs nothing else, so whoever holds a trusted compact range can check that new
    entries extend a log to a signed root by reading only the new entries.
    """

    size: int = 0
    hashes: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        """Check the range holds one hash per set bit of ``size``."""
        if self.size < 0 or len(self.hashes) != bin(self.size).count("1"):
            raise ProofError(
                f"compact range of size {self.size} has {len(self.hashes)} hashes, want "
                f"{bin(max(self.size, 0)).count('1')}"
            )
        if any(len(h) != HASH_SIZE for h in self.hashes):
            raise ProofError("compact range: a hash is not 32 bytes long")

    def extend(self, leaf_hashes: Sequence[bytes]) -> CompactRange:
        """The range after appending ``leaf_hashes``."""
        size = self.size
        stack = list(self.hashes)
        for leaf in leaf_hashes:
            stack.append(leaf)
            n = size
            while n & 1:  # merge while the new subtree completes a larger one
                right = stack.pop()
                stack[-1] = node_hash(stack[-1], right)
                n >>= 1
            size += 1
        return CompactRange(size, tuple(stack))

    def root(self) -> bytes:
        """The root of the tree of ``size`` leaves (the empty root for size 0)."""
        if not self.hashes:
            return EMPTY_ROOT
        r = self.hashes[-1]
        for h in reversed(self.hashes[:-1]):
            r = node_hash(h, r)
        return r

    def inclusion_proof(self, leaves: Sequence[bytes], index: int) -> list[bytes]:
        """RFC 6962 PATH(index, D[n]) in the tree of this range followed by ``leaves`` (leaf
        hashes; n = ``size + len(leaves)``), for a leaf ``index >= size``: every node the path
        needs left of ``size`` is a subtree of the range (nodes it cuts are rebuilt from it
        and the leaves after it).

        Raises:
            ProofError: ``index`` is not one of ``leaves``.
        """
        n = self.size + len(leaves)
        if not self.size <= index < n:
            raise ProofError(f"leaf {index} is not in the extension {self.size}..{n - 1}")
        known: dict[tuple[int, int], bytes] = {}
        at = 0
        for level in range(self.size.bit_length() - 1, -1, -1):
            if self.size >> level & 1:
                known[(at, at + (1 << level))] = self.hashes[len(known)]
                at += 1 << level

        def mth(a: int, b: int) -> bytes:
            if (a, b) in known:
                return known[(a, b)]
            if a >= self.size:
                known[(a, b)] = root_from_leaf_hashes(leaves[a - self.size : b - self.size])
            else:
                k = 1 << ((b - a - 1).bit_length() - 1)
                known[(a, b)] = node_hash(mth(a, a + k), mth(a + k, b))
            return known[(a, b)]

        path: list[bytes] = []
        a, b = 0, n
        while b - a > 1:
            k = 1 << ((b - a - 1).bit_length() - 1)
            if index < a + k:
                path.append(mth(a + k, b))
                b = a + k
            else:
                path.append(mth(a, a + k))
                a += k
        return path[::-1]
