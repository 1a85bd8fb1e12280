"""Which policy roles the keys an envelope names hold: the explanation a record that did not
verify carries.

Scope: `signed_by`, what `verify.judge.judge_record` adds to a failed record's message (and to
the note of a key the policy does not hold, `verify.untrusted_key`): each keyid the envelope
names, with the roles it holds under the policy in force when the record was logged, or the
revocation that took it out (a signature whose keyid names no key held then is also tried
against the compromised keys of the roles: its keyid may have been left out or changed).
Pure, as `verify.judge`; loaded only when a record's signatures do not verify.
Non-scope: verifying signatures (`verify.dsse`), choosing the keys that may sign
(`verify.judge.signing_keys`).
"""

from __future__ import annotations

from collections.abc import Sequence

from .dsse import Envelope, pae
from .policy import KEY_ROLES, TrustPolicy

__all__ = ["signed_by"]


def signed_by(policy: TrustPolicy, envelope: Envelope, roles: tuple[str, ...], index: int,
              time: str, notes: Sequence[str] = ()) -> str:
    """Which policy roles the keys an envelope names hold (the keyids are only hints).
    ``notes``: `verify.sigstore_adapter.identity_signers`' on the keyless signatures that did
    not count, which name each by its Sigstore bundle: such a keyid is no key to add to a role
    (out55: the advice said to add it), its identity is."""
    then = policy.policy_at(index)
    by = f"policy {policy.name!r} serial {policy.serial}"
    # A keyid is a hint only: a signature by a compromised key whose keyid was left out or
    # changed is found by verifying it, so the refusal says why (redo15 finding 3).
    compromised = [k for r in roles for k in then.role(r).keys
                   if policy.revocation(k.keyid, index, time) is not None]
    message = pae(envelope.payload_type, envelope.payload)
    named, keyless, unchecked = [], False, False
    # With identities and no keys in the roles, a keyid that names no key may be a keyless
    # signature's Sigstore bundle that was not checked: its identity revoked, or the bundle not
    # in the evidence (an exporter leaves it out then): no key to add (out59 finding 4).
    idents = (any(then.role(r).identities for r in roles)
              and not any(then.role(r).keys for r in roles))
    for sig in envelope.signatures:
        keyid = sig.keyid
        if keyid and any(f"Sigstore bundle {keyid[:16]}:" in n for n in notes):
            named.append(f"keyless signature {keyid[:12]} (a Sigstore bundle, whose identity "
                         "this line names)")
            keyless = True
            continue
        if not (keyid and any(then.holds(r, keyid) for r in KEY_ROLES)):
            keyid = next((k.keyid for k in compromised if k.verify(sig.sig, message)), keyid)
        revoked = policy.revocation(keyid, index, time) if keyid else None
        held = [r for r in KEY_ROLES if keyid and then.holds(r, keyid)]
        if idents and not held and revoked is None and keyid == sig.keyid and len(keyid) == 64:
            named.append(f"key {keyid[:12]} (no key of the policy: the digest of a keyless "
                         "signature's Sigstore bundle, if it is one, not checked here)")
            unchecked = True
            continue
        if revoked is not None:
            who = f"revoked by {by}: {revoked.describe()}"
        else:
            who = f"{', '.join(held)} role" if held else "not in the policy"
        found = (f" (found by its signature; the envelope names {sig.keyid[:12] or 'no keyid'})"
                 if keyid != sig.keyid else "")
        named.append(f"key {keyid[:12] or '(no keyid)'}{found} ({who})")
    out = (f"the envelope names {'; '.join(named)}, want {' or '.join(roles)} key(s)"
           + (" or identities" if keyless or unchecked else ""))  # (the policy names some)
    if any(n.endswith("(not in the policy)") for n in named) and "approver" in roles[1:]:
        # a revocation or erasure: a producer key counts for what it produced only, and an
        # approver of another organisation's does not belong in yours (out53 finding 2)
        out += ("; a revocation or erasure counts signed by the key that produced what it names "
                "or by one of your approvers: ask its signer for one signed by the key that "
                "produced it (once that key is in your policy's [roles.producer])")
    elif any(n.endswith("(not in the policy)") for n in named):  # (out43 finding 8)
        out += (f"; if the signer confirms the key is theirs (ask them, not the data), add it to "
                f"[roles.{roles[0]}] of the policy you verify with (the --policy file, or a "
                "ledger's, then 'policy set'); otherwise treat the record as forged")
    if keyless and "approver" not in roles[1:]:
        out += (f"; if the signer confirms that identity is theirs (ask them, not the data), add "
                f"its issuer and subject to the identities of [roles.{roles[0]}] of the policy "
                "you verify with; otherwise treat the record as forged")
    revoked_identity = False
    for ident in (i for r in roles for i in then.role(r).identities):
        gone = policy.revocation(ident, index, time)
        if gone is not None:  # its keyless signatures were not even checked
            out += f"; identity {ident.subject} ({ident.issuer}) revoked by {by}: " \
                + gone.describe()
            revoked_identity = True
    if unchecked and revoked_identity:
        out += ("; what a revoked identity signed from that point on counts for nothing: ask "
                "the signer to sign the record again with an identity or key the policy trusts")
    elif unchecked:
        out += ("; if it is a keyless signature, this evidence does not hold its Sigstore "
                "bundle: ask its sender for evidence that does (an exporter leaves it out when "
                "its own policy no longer counts that identity, as when it declared it "
                "compromised: ask them)")
    return out
