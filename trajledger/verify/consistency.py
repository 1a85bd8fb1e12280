"""Two checkpoints of one log: is the later one an append-only extension of the earlier one.

Scope: `check_consistent`: a rollback (smaller size), a fork (same size, other root) or a failed
consistency proof (``verify.merkle.verify_consistency``) is a `ConsistencyError` carrying both
checkpoints and the proof. Loaded only by a verifier that holds an earlier checkpoint (``verify
--known-checkpoint``, a ledger's floor, a witness, a monitor, a log key handover): verifying a
bundle on its own never needs it.
Non-scope: verifying each checkpoint's signature (``verify.checkpoint``), fetching proofs.
Spec: c2sp.org/tlog-checkpoint, RFC 6962 section 2.1.2 (consistency proofs).
"""

from __future__ import annotations

from collections.abc import Sequence

from .checkpoint import Checkpoint
from .errors import ConsistencyError, ProofError
from .merkle import EMPTY_ROOT, verify_consistency

__all__ = ["check_consistent"]


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
