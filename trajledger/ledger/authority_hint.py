"""What to do when a producer key is refused a revocation or erasure of what another key
produced (`status._check_authority`): the key to give instead, or how to make one count.

Scope: `give`, the text of the refusal between the record's signers and the rule. A record
whose producer key was replaced by a successor policy (out47 finding 5) is revoked where
buyers count it only by that key: their policies trust a vendor's producer keys, never its
approvers (out53 finding 1), so when the old key's private half is here and not declared
compromised, the way named is to put it back for the revocation; an approver's revocation
counts in this ledger, and the line says buyers must revoke it themselves.
Non-scope: the rule itself (`verify.retractions.with_authority`), the role check.
"""

from __future__ import annotations

from collections.abc import Sequence

from trajledger.verify.policy import KEY_ROLES, TrustPolicy

__all__ = ["give"]


def give(policy: TrustPolicy, signers: Sequence[str], here: Sequence[tuple[str, str, bool]],
         signer: str, verb: str, index: int) -> str:
    """The refusal's advice: ``signers`` signed the record logged at ``index``, ``here`` the
    keys of this ledger (name, keyid, private half here), ``signer`` the key refused. A key
    is put back only if it was a producer when the record was logged (`TrustPolicy.policy_at`):
    a key of no role may sign a files record (``attest``), and "name it again" made it a
    producer (rev51 finding 5)."""
    # (a key named to give has its private half here, as the put-back's below: a public half
    # alone ends the step in 'no private key': rev51's Left, fix60)
    mine = [n for n, k, p in here if p and k in signers and policy.holds("producer", k)]
    if mine:
        return f", key {mine[0]} here: give --key {mine[0]}"
    other = [f": give an approver's key, --key {n}" for n, k, p in here
             if p and policy.holds("approver", k)][:1]
    if any(policy.holds("producer", k) for k in signers):
        return "".join(other)
    revoked, was = {r.keyid for r in policy.revoked_keys}, policy.policy_at(index)
    old = [n for n, k, p in here if k in signers and p and k not in revoked
           and was.holds("producer", k)]
    whose = (", a producer key the policy in force no longer holds" if any(
        was.holds("producer", k) for k in signers) else ", a key that held no producer role")
    roles = ",".join(r for r in KEY_ROLES if policy.role(r).keys or policy.role(r).identities)
    producers = " ".join(f"--producer {n}" for n, k, _p in here
                         if policy.holds("producer", k))
    # (a policy with approvers, a lab's: its approvers sign successors and may revoke anything)
    sign = signer if policy.signing_role() == "producer" else "APPROVER"
    noun = {"revoke": "revocation", "erase": "erasure"}.get(verb, verb)
    buyers = (f"; buyers' policies trust your producer keys, not your approvers: an approver's "
              f"{noun} counts here, and they stop its use only by revoking it in their own "
              "ledgers")
    if other:
        return other[0] + buyers
    if old and sign == signer:  # a vendor's policy: put back the key that produced it
        return (f"{whose}; key {old[0]} here is "
                f"that key: to {verb} it where buyers count it too, name it again in a successor "
                f"('trajledger policy init --roles {roles} {producers} --producer {old[0]} --out "
                f"FILE' and 'trajledger policy set FILE --key {sign}'), give --key {old[0]}, "
                f"then record a successor without it; or name an approver, whose {noun} counts "
                "here only")
    return (f"{whose}: only an approver may {verb} it now" + (
                ": ask a holder of one of the policy's approver keys" if sign != signer
                else  # (a vendor's policy, no approver: name one)
                "; to name one, 'trajledger key new approver', then 'trajledger policy init "
                f"--roles producer,approver {producers} --approver approver' and 'trajledger "
                f"policy set FILE --key {signer}', then give --key approver") + buyers + (
                f" (or by key {old[0]} here, once a successor names it again as a producer)"
                if old else ""))
