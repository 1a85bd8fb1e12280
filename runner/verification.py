"""``trajledger verify REF``: an artifact's whole lineage, from the live ledger.

Scope: resolve the reference, then run ``verify.lineage`` on the ledger directory with the
policy in force; the same code verifies an exported bundle (``python -m verify``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajledger.ledger.evidence import ledger_evidence
from trajledger.verify.lineage import Check, LineageVerifier

if TYPE_CHECKING:
    from trajledger.ledger.home import Ledger
    from trajledger.verify.policy import TrustPolicy

__all__ = ["verify_ref"]


def verify_ref(ledger: Ledger, ref: str, policy: TrustPolicy, *, deep: bool = False) -> Check:
    """Verify the artifact ``ref`` names and its lineage; returns the report tree."""
    from trajledger.ledger.catalog import Catalog

    item = Catalog(ledger).resolve(ref)
    verifier = LineageVerifier(ledger_evidence(ledger), policy, deep=deep)
    return verifier.verify(item.digest)
