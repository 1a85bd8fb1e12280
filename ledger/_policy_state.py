"""The trust policy in force in a ledger, from its trust-policy records.

Scope: read the ledger's trust-policy records and follow their history
(`verify.policy.follow_history`); look keys up by keyid in the ledger's key store, for policies
that name keys that way.
Non-scope: judging evidence with a policy (``verify.lineage``), recording one (``ledger.status``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajledger.verify.policy import KeyLookup, TrustPolicy, follow_history

from .catalog import Catalog

if TYPE_CHECKING:
    from trajledger.verify.keys import PublicKey

    from .home import Ledger

__all__ = ["current_policy", "key_lookup", "policy_records"]


def policy_records(ledger: Ledger) -> list[tuple[int, str, bytes]]:
    """``(log index, subject, envelope bytes)`` of every trust-policy record, in log order.

    Envelopes missing from the store are passed as empty bytes: `follow_history` then reports
    that record as invalid instead of the whole lookup failing.
    """
    store = ledger.store
    return [
        (i.index, i.digest, store.get(i.envelope) if store.exists(i.envelope) else b"")
        for i in Catalog(ledger).by_kind("trust-policy")
    ]


def current_policy(
    ledger: Ledger, trusted: TrustPolicy | None = None
) -> tuple[list[str], TrustPolicy] | None:
    """The policy in force (following the history from ``trusted``, or from the first record).

    Returns:
        The notes on the history (one per record examined) and the policy; None when no policy
        is given and none is recorded.
    """
    policy, notes = follow_history(trusted, policy_records(ledger))
    return None if policy is None else (notes, policy)


def key_lookup(ledger: Ledger) -> KeyLookup:
    """Find a public key of the ledger's key store by its keyid (None when there is none)."""

    def lookup(keyid: str) -> PublicKey | None:
        for info in ledger.keys.list():
            if info.keyid == keyid:
                return ledger.keys.public(info.name)
        return None

    return lookup
