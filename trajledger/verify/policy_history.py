"""A trust policy's history: which policy is in force after the log's trust-policy records.

Scope: the judgement of a succession. `check_successor` (may ``new`` replace ``current``:
higher serial, signed by the threshold of the current policy's signing role, no revocation
dropped), `policy_from_record` (a trust-policy record's envelope verified against the signers
of the policy before it, and its policy parsed) and `follow_history` (the policy in force after
a list of such records). Pure: they take bytes and parsed policies and read nothing.

Non-scope: parsing a policy (`verify.policy`), finding the records in a log or bundle (the
callers: `verify.bundle`, ``ledger.policy_state``).

Spec: schemas/SPEC.md (trust policy, succession).
"""

from __future__ import annotations

from dataclasses import replace

from . import predicates
from .dsse import Envelope
from .errors import DigestMismatchError, PolicyError, ProvenanceError
from .policy import TrustPolicy, policy_digest
from .statement import Statement, verify_statement

__all__ = ["check_successor", "follow_history", "policy_from_record"]


def check_successor(current: TrustPolicy, new: TrustPolicy, signer_keyids: frozenset[str]) -> None:
    """Check that ``new`` may replace ``current``.

    Steps:
        1. ``new.serial`` must be greater than ``current.serial`` (no rollback, no replay).
        2. At least the threshold of ``current``'s signing role signed ``new``: its approvers,
           or its producers when it has no approvers (`TrustPolicy.signing_role`).
        3. ``new`` still revokes every key and identity ``current`` revokes (a compromised
           signer stays distrusted; ``compromised_since`` may change).

    Raises:
        PolicyError: a step fails.
    """
    # (1)
    if new.serial <= current.serial:
        raise PolicyError(
            f"policy {new.name!r}: serial {new.serial} does not follow serial {current.serial}; "
            f"a successor needs a higher serial (serial = {current.serial + 1})"
        )
    # (2)
    role = current.signing_role()
    signing = current.role(role)
    got = len(signer_keyids & signing.keyids)
    if signing.threshold == 0 or got < signing.threshold:
        raise PolicyError(
            f"policy {new.name!r} serial {new.serial}: signed by {got} of the current policy's "
            f"{role}s, want {max(signing.threshold, 1)}"
        )
    # (3)
    kept = {r.keyid for r in new.revoked_keys}
    for r in current.revoked_keys:
        if r.keyid not in kept:
            raise PolicyError(
                f"policy {new.name!r} serial {new.serial}: drops the revocation of key "
                f"{r.keyid[:16]} (serial {current.serial} revokes it); a revoked key stays revoked"
            )
    kept_ids = {r.identity for r in new.revoked_identities}
    for ri in current.revoked_identities:
        if ri.identity not in kept_ids:
            raise PolicyError(
                f"policy {new.name!r} serial {new.serial}: drops the revocation of identity "
                f"{ri.identity.subject} ({ri.identity.issuer}; serial {current.serial} revokes "
                "it); a revoked identity stays revoked"
            )


def policy_from_record(
    envelope_bytes: bytes, subject: str, signers_of: TrustPolicy, what: str
) -> tuple[TrustPolicy, frozenset[str]]:
    """Verify a trust-policy record against the signers of ``signers_of`` and parse it.

    Steps:
        1. The envelope is signed by the threshold of ``signers_of``'s signing role (its
           approvers; its producers when it has none: `TrustPolicy.signing_role`).
        2. Its predicate type is trust-policy and its subject is ``subject``.
        3. The predicate's ``policy`` parses, and its digest is ``subject``.

    Returns:
        The policy and the keyids of the signers that counted.

    Raises:
        SignatureError, FormatError, PolicyError, DigestMismatchError: a step fails.
    """
    signing = signers_of.role(signers_of.signing_role())
    if not signing.keys:
        raise PolicyError(f"{what}: the policy that must approve it has no approver or "
                          "producer keys")
    # (1) (2)
    verified = verify_statement(
        Envelope.from_bytes(envelope_bytes, what),
        signing.keys,
        allowed_predicate_types={predicates.TRUST_POLICY},
        threshold=max(signing.threshold, 1),
        subject_digest=subject,
        what=what,
    )
    # (3)
    policy = TrustPolicy.from_json(verified.statement.predicate.get("policy"), f"{what}: policy")
    digest = policy_digest(policy)
    if digest != subject:
        raise DigestMismatchError(
            f"{what}: policy hashes to {digest}, want {subject}",
            subject=what,
            expected=subject,
            observed=digest,
        )
    return policy, frozenset(k.keyid for k in verified.signers)


def follow_history(
    trusted: TrustPolicy | None, records: list[tuple[int, str, bytes]]
) -> tuple[TrustPolicy | None, list[str]]:
    """Find the policy in force by following the log's trust-policy records.

    Steps:
        1. Choose the start. With a ``trusted`` policy: the first record whose subject is that
           policy's digest (later records may replace it); if no record is, ``trusted`` is in
           force as given. With none: the first record, which must be signed by the threshold
           of the policy it contains (its approvers, or its producers when it has none: trust
           on first use of this ledger).
        2. Each later record takes effect only when `check_successor` accepts it (higher
           serial, signed by the threshold of the current policy's signing role); others are
           reported and ignored.
           The policy it replaces is kept in the new one's `TrustPolicy.earlier`, with the
           record's log index: records logged before it are judged by the roles they were
           signed under (`TrustPolicy.policy_at`).

    Args:
        trusted: the policy the verifier holds, or None to start from the log's first policy.
        records: ``(log index, subject digest, envelope bytes)`` of trust-policy records in
            log order.

    Returns:
        The policy in force (None when there is none) and one note per record examined.
    """
    notes: list[str] = []
    current = trusted
    start = 0
    # (1)
    if trusted is not None:
        digest = policy_digest(trusted)
        hits = [n for n, r in enumerate(records) if r[1] == digest]
        if not hits:
            return trusted, [
                f"policy {trusted.name!r} serial {trusted.serial}: used as given "
                "(not recorded in the log)"
            ]
        start = hits[0] + 1
        notes.append(
            f"policy {trusted.name!r} serial {trusted.serial}: "
            f"recorded at log index {records[hits[0]][0]}"
        )
    elif records:
        index, subject, env = records[0]
        try:
            body = Statement.from_bytes(Envelope.from_bytes(env).payload).predicate.get("policy")
            genesis = TrustPolicy.from_json(body, f"policy at log index {index}")
            current, _ = policy_from_record(env, subject, genesis, f"policy at log index {index}")
            notes.append(
                f"policy {current.name!r} serial {current.serial}: first policy, log index {index}"
            )
        except ProvenanceError as e:
            notes.append(f"policy at log index {index}: not valid as a first policy: {e}")
            return None, notes
        start = 1
    # (2)
    for index, subject, env in records[start:]:
        assert current is not None
        what = f"policy at log index {index}"
        try:
            new, signers = policy_from_record(env, subject, current, what)
            check_successor(current, new, signers)
        except ProvenanceError as e:
            notes.append(f"{what}: ignored: {e}")
            continue
        current = replace(new, earlier=(*current.earlier, (index, replace(current, earlier=()))))
        notes.append(f"policy {new.name!r} serial {new.serial}: in force from log index {index}")
    return current, notes
