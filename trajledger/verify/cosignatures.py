"""Witness cosignatures on a checkpoint, counted against a threshold.

Scope: `verify_cosignatures`: the c2sp.org/tlog-cosignature v1 (Ed25519, timestamped)
signatures of trusted witnesses on a log's checkpoint note, each witness key counted once;
`check_witnesses`, that count as the ``witnesses`` check of a verification's log;
`cosignature_timestamp`, the time a witness's cosignature states.
Loaded only when a policy requires witnesses for the log (``roles.witness``): a checkpoint
signed by its log alone never needs it.
Non-scope: the log's own signature (``verify.checkpoint.verify_checkpoint``), the signed-note
format (``verify.note``), the cosignature message (``verify.cosigned``), which witnesses a
policy trusts.
Spec: c2sp.org/tlog-cosignature, c2sp.org/tlog-checkpoint, c2sp.org/signed-note.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .checkpoint import Checkpoint
from .cosigned import signed_timestamp
from .errors import ProvenanceError, SignatureError
from .note import ALG_COSIGNATURE_V1, Note, Verifier, verified_signatures, verifier_from_vkey
from .report import OK, Node
from .times import COSIGNATURE_SKEW

if TYPE_CHECKING:
    from .policy import Role

__all__ = ["check_witnesses", "cosignature_timestamp", "verify_cosignatures"]


def cosignature_timestamp(verifier: Verifier, sig: bytes) -> int | None:
    """Return the timestamp of a cosignature/v1 signature, None for other types.

    Args:
        verifier: the key that verified it.
        sig: the signature bytes after the key ID.

    Returns:
        The POSIX timestamp, or None when ``verifier`` is not a cosignature key or ``sig`` is
        not 72 bytes.
    """
    return signed_timestamp(sig) if verifier.alg == ALG_COSIGNATURE_V1 else None


def check_witnesses(log: Node, note: bytes, witness: Role, log_vkeys: Sequence[str] = ()) -> None:
    """The ``witnesses`` check of a verification's ``log`` node: ``note`` (its checkpoint,
    verified by the log key) cosigned by the threshold of the policy's ``witness`` role
    (`verify_cosignatures`), for `verify.trusted_log.TrustedLog`. A witness key that is one of
    ``log_vkeys`` (the keys that verified the checkpoint: the policy's, and those the log was
    handed over to, which `policy check` cannot see) does not count: a log cannot witness
    itself, or it would cosign its own forks. A cosignature dated more than `COSIGNATURE_SKEW`
    seconds ahead of this clock fails the check (redo15 finding 5)."""
    own = {verifier_from_vkey(v).public_key for v in log_vkeys}
    counted = [w for w in witness.note_verifiers() if w.public_key not in own]
    why = "".join(f"; witness {w.name} is a key of the log itself: not counted"
                  for w in witness.note_verifiers() if w.public_key in own)
    try:  # dated ahead of this clock: a witness's clock, wrong or lying, made it look fresh
        names = verify_cosignatures(note, counted, threshold=witness.threshold,
                                    not_after=int(time.time()) + COSIGNATURE_SKEW)
        log.add("witnesses", OK, f"cosigned by {', '.join(sorted(names))}{why}")
    except ProvenanceError as e:
        log.fail("witnesses", f"{e}{why}")


def verify_cosignatures(
    note_bytes: bytes,
    witnesses: Sequence[Verifier],
    *,
    threshold: int = 1,
    not_after: int | None = None,
) -> dict[str, int | None]:
    """Verify witness cosignatures on a checkpoint and count them against a threshold.

    Steps:
        1. Parse the note and its checkpoint text (cosignatures only sign checkpoints).
        2. Verify the signatures by the given witness keys; a failing one rejects the note.
        3. When ``not_after`` is given, refuse cosignatures timestamped after it.
        4. Count each witness key once (two names of one key are one witness), and require at
           least ``threshold`` of them.

    This does not check the log's own signature: call `verify_checkpoint` as well.

    Args:
        note_bytes: the signed checkpoint with its cosignature lines.
        witnesses: the trusted witness keys (usually cosignature/v1, type 0x04).
        threshold: the number of distinct witness keys required, at least 1.
        not_after: latest acceptable cosignature time (POSIX seconds), e.g. now plus skew.

    Returns:
        Each witness that verified (by the first name its key verified under), with its
        cosignature timestamp (None for keys of a type without one).

    Raises:
        ValueError: ``threshold`` is below 1.
        FormatError: the note or checkpoint is malformed.
        SignatureError: a witness cosignature fails, is from the future, or fewer than
            ``threshold`` witnesses cosigned.
    """
    if threshold < 1:
        raise ValueError(f"cosignature threshold {threshold}, want >= 1")
    # (1)
    note = Note.from_bytes(note_bytes)
    origin = Checkpoint.from_text(note.text).origin
    # (2)
    found: dict[str, int | None] = {}
    counted: set[bytes] = set()
    try:
        verified = verified_signatures(note, witnesses)
    except SignatureError as e:  # what it can be, and the way on (out55)
        raise SignatureError(
            f"{e}: a cosignature of another checkpoint (the log's before it grew), or a line or "
            "checkpoint changed since it was signed: get the bundle again; the same, ask the "
            "log's owner for one its witnesses cosigned as it is") from e
    for sig, w in verified:
        ts = cosignature_timestamp(w, sig.signature)
        # (3)
        if not_after is not None and ts is not None and ts > not_after:
            raise SignatureError(
                f"cosignature by {w.name} is timestamped {ts}, want at most {not_after}: "
                "dated in the future (a witness's clock ahead, or a checkpoint made to look fresh)"
            )
        # A witness counts once by its key, whatever name its line carries: the signed
        # message does not name the witness, so a line copied under another name verifies too.
        if w.public_key not in counted:
            counted.add(w.public_key)
            found.setdefault(w.name, ts)
    # (4)
    if len(found) < threshold:
        raise SignatureError(
            f"checkpoint has {len(found)} valid witness cosignatures, want at least {threshold} "
            f"(of {', '.join(f'{w.name}+{w.key_hash.hex()}' for w in witnesses)}, the witness "
            f"key(s) your policy names for {origin}): ask the "
            "log's owner to publish the witnesses' cosignatures of this checkpoint ('trajledger "
            "log add-cosignature', docs/third-party.md \"Witnesses\") and export again")
    return found
