"""The log key a bundle's floor is looked up by: the trusted key that signed its checkpoint.

Scope: `bundle_log_key`, for `exchange.import_bundle` and `verify BUNDLE` (which share this
user's floors of the logs they have seen, `TrustState`). Moved out of ``ledger.exchange``
(its 1,000-line cap); `exchange` re-exports it.
"""

from __future__ import annotations

import contextlib

from trajledger.verify.bundle import BundleEvidence
from trajledger.verify.bundle_index import INDEX_NAME
from trajledger.verify.checkpoint import verify_checkpoint
from trajledger.verify.errors import ProvenanceError, VerificationError
from trajledger.verify.log_key import key_chain
from trajledger.verify.note import verifier_from_vkey
from trajledger.verify.policy import TrustPolicy
from trajledger.verify.policy_history import follow_history

from .encode import verifier_vkey

__all__ = ["bundle_log_key"]


def bundle_log_key(ev: BundleEvidence, policy: TrustPolicy, what: str) -> str:
    """The log key this user's floor of a bundle's log is looked up by (`TrustState`,
    `updates.origin_state`), from what is verified: the key that signed its checkpoint among
    the log keys ``policy`` trusts and those they handed over to (the bundle's handovers),
    spelled as keys are written (`encode.verifier_vkey`). ``bundle.json``, which nobody signs,
    must name that key: another string (a throwaway key of the origin's name that added its
    own signature line, or the key's ID in capitals) found no floor, and a rollback or a fork
    of a log the user had seen passed (docs/SECURITY.md, review redo21, finding 1).

    The log keys looked in are those of ``policy`` and of the policy in force after the
    bundle's policy history (`follow_history`, as `verify_bundle`): a log key only a later
    policy names was taken from ``bundle.json`` unchecked (review left22, finding 2). When
    no trusted key signed the checkpoint, the index's key in that spelling: the
    verification refuses the bundle.

    Raises:
        VerificationError: ``bundle.json`` names another key than the trusted one that signed.
    """
    note, signed, in_force = ev.checkpoint_note(), [], policy
    with contextlib.suppress(ProvenanceError):  # a history not followed: the verification says
        in_force = follow_history(policy, [(i, e.subject, env) for i, e, env
                                           in ev.policy_records() if env is not None])[0] or policy
    for trusted in dict.fromkeys([*policy.role("log").vkeys, *in_force.role("log").vkeys]):
        with contextlib.suppress(ProvenanceError):  # a bad handover: the verification says so
            for key in (trusted, *(h.new for h in key_chain(trusted, ev.key_handovers()))):
                with contextlib.suppress(ProvenanceError):
                    verify_checkpoint(note, verifier := verifier_from_vkey(key))
                    signed.append(verifier_vkey(verifier))
    if not signed:
        return verifier_vkey(verifier_from_vkey(ev.index.vkey))  # checked by BundleEvidence.open
    if ev.index.vkey not in signed:
        raise VerificationError(
            f"{what}: {INDEX_NAME} names the log key {ev.index.vkey}, but the key that signed "
            f"its checkpoint, trusted by the policy, is {signed[0]} ({INDEX_NAME} is not signed)")
    return ev.index.vkey
