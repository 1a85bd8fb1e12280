"""Which policy roles the keys an envelope names hold: the explanation a record that did not
verify carries.

Scope: `signed_by`, what `verify.judge.judge_record` adds to a failed record's message (and to
the note of a key the policy does not hold, `verify.untrusted_key`): each keyid the envelope
names, with the roles it holds under the policy in force when the record was logged, or the
revocation that took it out. Pure, as `verify.judge`; loaded only when a record's signatures
do not verify.
Non-scope: verifying signatures (`verify.dsse`), choosing the keys that may sign
(`verify.judge.signing_keys`).
"""

from __future__ import annotations

from .dsse import Envelope
from .policy import KEY_ROLES, TrustPolicy

__all__ = ["signed_by"]


def signed_by(policy: TrustPolicy, envelope: Envelope, roles: tuple[str, ...], index: int,
              time: str) -> str:
    """Which policy roles the keys an envelope names hold (the keyids are only hints)."""
    then = policy.policy_at(index)
    by = f"policy {policy.name!r} serial {policy.serial}"
    named = []
    for sig in envelope.signatures:
        revoked = policy.revocation(sig.keyid, index, time) if sig.keyid else None
        held = [r for r in KEY_ROLES if sig.keyid and then.holds(r, sig.keyid)]
        if revoked is not None:
            who = f"revoked by {by}: {revoked.describe()}"
        else:
            who = f"{', '.join(held)} role" if held else "not in the policy"
        named.append(f"key {sig.keyid[:12] or '(no keyid)'} ({who})")
    out = f"the envelope names {'; '.join(named)}, want {' or '.join(roles)} key(s)"
    for ident in (i for r in roles for i in then.role(r).identities):
        gone = policy.revocation(ident, index, time)
        if gone is not None:  # its keyless signatures were not even checked
            out += f"; identity {ident.subject} ({ident.issuer}) revoked by {by}: " \
                + gone.describe()
    return out
