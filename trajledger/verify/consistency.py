"""Two checkpoints of one log: is the later one an append-only extension of the earlier one.

Scope: RFC 6962 consistency proofs (`verify_consistency`, `root_from_consistency_proof`, as
``transparency-dev/merkle`` ``proof.VerifyConsistency``, line for line); `check_consistent`: a
rollback (smaller size), a fork (same size, other root) or a failed consistency proof is a
`ConsistencyError` carrying both checkpoints and the proof; `check_known_checkpoint`, which
judges a checkpoint seen earlier against a `TrustedLog`'s; and `parse_consistency_proof`, the
bundle members that carry proofs (`bundled_proof`: the one a bundle gives for two sizes).
Loaded only by a verifier that holds an earlier checkpoint (``verify --known-checkpoint``, a
ledger's floor, a witness, a monitor, a log key handover) or a bundle that carries proofs:
verifying a bundle on its own never needs it.
Non-scope: verifying each checkpoint's signature (``verify.checkpoint``), fetching proofs.
Spec: c2sp.org/tlog-checkpoint, RFC 6962 section 2.1.2 (consistency proofs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from .checkpoint import Checkpoint, verify_checkpoint
from .errors import ConsistencyError, FormatError, ProofError, ProvenanceError, VerificationError
from .merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    chain_border_right,
    chain_inner,
    check_proof_hashes,
    decompose_inclusion,
    leaf_hash,
    node_hash,
)
from .note import b64decode_strict, verifier_from_vkey
from .report import OK

if TYPE_CHECKING:
    from .evidence import Evidence
    from .log_index import LogIndex
    from .nodes import Node

__all__ = [
    "LogView",
    "bundled_proof",
    "check_consistent",
    "check_known_checkpoint",
    "not_a_checkpoint",
    "parse_consistency_proof",
    "parse_consistency_proofs",
    "root_from_consistency_proof",
    "verify_consistency",
]


class LogView(Protocol):
    """The log a checkpoint seen earlier is judged against: a `verify.trusted_log.TrustedLog`,
    which stands above this module and loads it for such a checkpoint."""

    evidence: Evidence
    log: Node
    checkpoint: Checkpoint | None
    trusted_vkeys: list[str]
    index: LogIndex


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

    inner, border = decompose_inclusion(size1 - 1, size2)
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
    check_proof_hashes(what, proof)
    rest = proof[start:]

    mask = (size1 - 1) >> shift
    hash1 = _chain_inner_right(seed, rest[:inner], mask)
    hash1 = chain_border_right(hash1, rest[inner:])
    if hash1 != root1:
        raise ProofError(f"{what} leads to old root {hash1.hex()}, want {root1.hex()}")

    hash2 = chain_inner(seed, rest[:inner], mask)
    return chain_border_right(hash2, rest[inner:])


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


def _chain_inner_right(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    # Only left siblings count: the result is the hash of the older, smaller version of the tree.
    for i, h in enumerate(proof):
        if (index >> i) & 1 == 1:
            seed = node_hash(h, seed)
    return seed


def check_consistent(old: Checkpoint, new: Checkpoint, proof: Sequence[bytes]) -> None:
    """Check that ``new`` is an append-only extension of ``old`` (both already verified).

    Steps:
        1. Require the same origin.
        2. Refuse a rollback: ``new.size < old.size``.
        3. Same size: refuse a fork (different roots); the proof must be empty.
        4. From an empty tree: ``old.root`` must be the empty root; the proof must be empty.
        5. Otherwise verify the consistency proof between the two roots.

    Args:
        old: the checkpoint seen earlier.
        new: the checkpoint seen now.
        proof: the consistency proof from ``old.size`` to ``new.size``.

    Raises:
        ConsistencyError: the checkpoints cannot both be honest, or the proof fails; it carries
            ``old``, ``new`` and ``proof``.
    """

    def fail(message: str) -> ConsistencyError:
        return ConsistencyError(message, old=old, new=new, proof=list(proof))

    # (1)
    if old.origin != new.origin:
        raise fail(f"checkpoints are of different logs: {old.origin!r} and {new.origin!r}")
    # (2)
    if new.size < old.size:
        raise fail(
            f"checkpoint rollback for {new.origin}: size {new.size} is smaller than the "
            f"{old.size} seen before"
        )
    # (3)
    if new.size == old.size:
        if new.root != old.root:
            raise fail(
                f"checkpoint fork for {new.origin}: two roots at size {new.size}: "
                f"{old.root.hex()} and {new.root.hex()}"
            )
        if proof:
            raise fail(
                f"consistency proof for equal sizes {new.size} has {len(proof)} hashes, want 0"
            )
        return
    # (4)
    if old.size == 0:
        if old.root != EMPTY_ROOT:
            raise fail(
                f"checkpoint of size 0 for {old.origin} has root {old.root.hex()}, "
                f"want {EMPTY_ROOT.hex()}"
            )
        if proof:
            raise fail(f"consistency proof from size 0 has {len(proof)} hashes, want 0")
        return
    # (5)
    try:
        verify_consistency(old.size, new.size, proof, old.root, new.root)
    except ProofError as e:
        raise fail(f"checkpoints of {new.origin} are not consistent: {e}") from e


def not_a_checkpoint(note: bytes) -> str:
    """Why ``note``, given as a checkpoint seen before, is no signed checkpoint at all (not a
    signed note, or its text not a checkpoint's), or ``""``: ``python -m verify`` then says so
    as a usage error (exit 2; the auditor's own file, as its ``--policy``: left37) before any
    work, where a signed checkpoint of another log or key stays a failed check (exit 1)."""
    from .note import Note

    try:
        Checkpoint.from_text(Note.from_bytes(note).text)
    except FormatError as e:
        return (f"not a signed checkpoint ({e}): give the checkpoint member of a bundle of "
                "this log you verified before (or leave --known-checkpoint out)")
    return ""


def check_known_checkpoint(trusted: LogView, note: bytes,
                           what: str = "checkpoint seen before") -> None:
    """Check the checkpoint ``trusted`` verified extends one seen earlier (no fork, no
    rollback).

    Steps:
        1. Verify the earlier checkpoint by a key of ``trusted.trusted_vkeys``: the policy's
           log keys, the keys they handed over to and those that handed over to them (a floor
           kept from before a rotation, `verify.log_key.predecessors`).
        2. Check it is consistent with the current one (`check_consistent`), using a proof
           from the evidence; or,
           when the evidence holds the log's extension from a size at or below the earlier
           one, the root its entries give at that size must be the earlier root.

    A failure is added to the log node, naming both sizes and roots.
    """
    if trusted.checkpoint is None:
        return
    try:
        # (1)
        old = None
        problems: list[str] = []
        for vkey in trusted.trusted_vkeys:
            try:
                old = verify_checkpoint(note, verifier_from_vkey(vkey))
                break
            except ProvenanceError as e:
                problems.append(str(e))
        if old is None:  # the user's own input: not a fork, say what it is and what to pass
            first = note.split(b"\n", 1)[0][:100].decode("utf-8", "replace")
            trusted.log.fail(
                f"consistent with the {what}",
                f"the {what} is not one this log signed (its first line reads {first!r}; "
                f"{'; '.join(problems)}): it is another log's, or another key's, or not a "
                f"checkpoint; pass a checkpoint of {trusted.checkpoint.origin} (the checkpoint "
                f"member of a bundle of it verified before), or none",
            )
            return
        # (2)
        new = trusted.checkpoint
        proof: list[bytes] = []
        ext = trusted.evidence.extension()
        if ext is not None and ext.size <= old.size <= new.size and trusted.log.ok:
            leaves = [leaf_hash(trusted.index.entry_bytes(i) or b"")
                      for i in range(ext.size, old.size)]
            got = ext.extend(leaves).root()
            if got != old.root:
                raise VerificationError(
                    f"fork: the log's entries give root {got.hex()[:16]}… at size "
                    f"{old.size}, the {what} says {old.root.hex()[:16]}…")
        elif 0 < old.size < new.size:
            proof = trusted.evidence.consistency_proof(old.size, new.size)
            check_consistent(old, new, proof)
        else:
            check_consistent(old, new, proof)
        trusted.log.add(f"consistent with the {what}", OK, f"size {old.size} -> {new.size}")
    except (ProvenanceError, OSError) as e:
        trusted.log.fail(f"consistent with the {what}", f"log fork or rollback: {e}")


def bundled_proof(
    proofs: Mapping[int, list[bytes]], old_size: int, new_size: int, size: int
) -> list[bytes]:
    """The consistency proof from ``old_size`` to ``new_size`` among a bundle's ``proofs``
    (`parse_consistency_proofs`), which all end at its checkpoint's ``size``
    (`verify.bundle.BundleEvidence.consistency_proof`).

    Raises:
        FileNotFoundError: the bundle holds none for these sizes.
    """
    proof = proofs.get(old_size)
    if proof is None or new_size != size:
        raise FileNotFoundError(
            f"the bundle holds no consistency proof from size {old_size} to {new_size} "
            f"(export it with --consistency-from {old_size})"
        )
    return list(proof)


def parse_consistency_proofs(
    members: dict[int, bytes], size: int, what: str
) -> dict[int, list[bytes]]:
    """A bundle's ``proofs/<old>.consistency`` members, by ``old``, each parsed
    (`parse_consistency_proof`) and from a size below its checkpoint's ``size``.

    Raises:
        FormatError: a proof from a size at or above ``size``, or a malformed one.
    """
    out = {}
    for old, data in members.items():
        here = f"{what}: member proofs/{old}.consistency"
        if old >= size:
            raise FormatError(f"{here}: from size {old}, not below the checkpoint's {size}")
        out[old] = parse_consistency_proof(data, here)
    return out


def parse_consistency_proof(data: bytes, what: str) -> list[bytes]:
    """Parse a ``.consistency`` member strictly.

    Raises:
        FormatError: not LF-terminated lines of canonical base64 of 32 bytes, empty, or more
            than 64 lines.
    """
    if not data or not data.endswith(b"\n"):
        raise FormatError(f"{what}: want one base64 hash per line, each ending in a newline")
    lines = data[:-1].split(b"\n")
    if len(lines) > 64:
        raise FormatError(f"{what}: {len(lines)} hashes, want at most 64")
    out = []
    for i, line in enumerate(lines):
        try:
            text = line.decode("ascii")
        except UnicodeDecodeError as e:
            raise FormatError(f"{what}: line {i + 1} is not ASCII") from e
        h = b64decode_strict(text, f"{what}: line {i + 1}")
        if len(h) != HASH_SIZE:
            raise FormatError(f"{what}: line {i + 1} holds {len(h)} bytes, want {HASH_SIZE}")
        out.append(h)
    return out
