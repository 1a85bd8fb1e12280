"""The trust policy in force in a ledger, from its trust-policy records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from verify.policy import TrustPolicy, follow_history

from .catalog import Catalog

if TYPE_CHECKING:
    from .home import Ledger

__all__ = ["current_policy", "policy_records"]


def policy_records(ledger: Ledger) -> list[tuple[int, str, bytes]]:
    """``(log index, subject, envelope bytes)`` of every trust-policy record, in log order."""
    return [
        (i.index, i.digest, ledger.store.get(i.envelope))
        for i in Catalog(ledger).by_kind("trust-policy")
    ]


def current_policy(
    ledger: Ledger, trusted: TrustPolicy | None = None
) -> tuple[list[str], TrustPolicy] | None:
    """The policy in force (following the history from ``trusted``, or from the first record)."""
    policy, notes = follow_history(trusted, policy_records(ledger))
    return None if policy is None else (notes, policy)
