"""A key the policy does not hold, named once as the cause of the records it signed.

Scope: `key_node`, the report node of a key that alone signed records the policy does not
trust (a `verify.judge.RecordFailure` whose cause is ``key:<keyid>:<roles>``): its one failed
check says which roles its records wanted and how to trust it, and every record it signed
fails under it (`verify.report.Check.cause`). Pure, as `verify.judge`; loaded only when a
record's envelope names such a key.
`log_signers`: the log keys that signed a checkpoint no key of the policy's log role signed
(a log the policy does not name, or a key rotated without a handover the evidence carries),
and what to do; loaded only when the log's checkpoint fails.
Non-scope: judging the record (`verify.judge.judge_record` finds the key and its roles), the
log's checkpoint (`verify.trusted_log`).
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import ProvenanceError
from .judge import RecordFailure
from .note import Note
from .policy import TrustPolicy
from .report import Node

__all__ = ["key_node", "log_signers"]


def key_node(failure: RecordFailure, policy: TrustPolicy) -> Node:
    """The node of a key the policy does not trust that signed ``failure`` (its ``key:``
    cause): every record it signed counts under it."""
    assert failure.cause is not None
    _key, keyid, roles = failure.cause.split(":", 2)
    node = Node(failure.cause, "key", name=f"key {keyid[:12]}")
    # The same policy may declare the key compromised (a lab's successor that replaced it):
    # it cannot be added then (a policy may not revoke a key a role holds), and what it signed
    # before counts under the policy in force then, followed from the first (aud34).
    revoked = next((r for r in policy.revoked_keys if r.keyid == keyid), None)
    advice = (f"; if you trust its owner as {roles}, add the key {keyid} to the policy" if revoked
              is None else f"; the policy declares it {revoked.describe()}; what it signed "
              "before then counts under the policy in force then: verify from the first policy "
              "of its log (a bundle's policy/0.json), whose recorded successors are followed")
    if revoked is None and ("add it to [roles." in failure.note or "Sigstore bundle" in
                            failure.note or "signed by the key that produced it" in failure.note):
        advice = ""  # (`key_roles.signed_by` said how already: out44 finding 5)
    node.fail("trust", f"{failure.note}: records whose envelope names only this key do not "
              f"count under policy {policy.name!r} serial {policy.serial}{advice}")
    return node


def log_signers(note: bytes, trusted: Sequence[str]) -> str:
    """What follows ``signed by 0 of N trusted log key(s) (…)``: the keys that did sign the
    checkpoint ``note`` (``ORIGIN+KEYID``), other than the ``trusted`` verifier keys, and what
    to do (aud34 finding 2: the failure named only the keys it wanted); "" when none did."""
    try:
        signatures = Note.from_bytes(note).signatures
    except ProvenanceError:
        return ""  # the failure says why the note does not parse
    known = {"+".join(v.split("+")[:2]).lower() for v in trusted}
    others = list(dict.fromkeys(f"{s.name}+{s.key_hash.hex()}" for s in signatures))
    others = [o for o in others if o.lower() not in known]
    if not others:
        return ""
    return (f"; the log's checkpoint is signed by {', '.join(others)}, which your policy's "
            "log role does not name: get that log's verifier key (its owner's 'trajledger log "
            "info' prints it) through a channel you trust and add it to roles.log.vkeys; if "
            "you trust the log already and its key was rotated, ask for evidence exported "
            "since the rotation (it carries the key handover)")
