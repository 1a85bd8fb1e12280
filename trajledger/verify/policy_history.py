"""A trust policy's history: which policy is in force after the log's trust-policy records.

Scope: `follow_history`, the policy in force after a list of a log's trust-policy records,
each succession judged, and the records after the start followed, by ``verify.succession``
(loaded only when a record goes beyond the policy the verifier holds). Pure: it takes bytes
and parsed policies and reads nothing.

Non-scope: parsing a policy (`verify.policy`), the judgement of successions
(`verify.succession`), finding the records in a log or bundle (the callers: `verify.bundle`,
``ledger.policy_state``).

Spec: schemas/SPEC.md (trust policy, succession).
"""

from __future__ import annotations

from .policy import TrustPolicy, policy_digest

__all__ = ["follow_history"]


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
        2. Each later record takes effect only when `verify.succession.check_successor`
           accepts it (higher serial, signed by the threshold of the current policy's signing
           role); others are reported and ignored.
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
    start = 0
    # (1)
    if trusted is not None:
        digest = policy_digest(trusted)
        hits = [n for n, r in enumerate(records) if r[1] == digest]
        if not hits:  # a policy given by hand (its note loads on use)
            from .policy_as_given import as_given
            return trusted, [as_given(trusted, records)]
        start = hits[0] + 1
        notes.append(
            f"policy {trusted.name!r} serial {trusted.serial}: "
            f"recorded at log index {records[hits[0]][0]}"
        )
        if start == len(records):
            return trusted, notes  # no later record: no succession to judge
    elif not records:
        return None, notes
    # Loaded only here: most logs record one policy, the one the verifier holds.
    from .succession import follow_successions

    return follow_successions(trusted, records, start, notes)
