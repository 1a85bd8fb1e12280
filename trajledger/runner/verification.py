"""``trajledger verify REF``: an artifact's whole lineage, from the live ledger.

Scope: resolve the reference (confirmed from the log), then run ``verify.lineage`` on the ledger
directory with the policy in force, looking records up in the user's trust state (so the cost
does not grow with the log); the same verifier checks an exported bundle (``python -m verify``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from trajledger.ledger.evidence import ledger_evidence
from trajledger.verify.lineage import Edge, LineageVerifier, Node, Report

if TYPE_CHECKING:
    from trajledger.ledger.home import LedgerHome
    from trajledger.verify.policy import TrustPolicy

__all__ = ["decide", "ledger_verifier", "verify_ref"]


def ledger_verifier(
    ledger: LedgerHome, policy: TrustPolicy, *, data: str = "hash"
) -> LineageVerifier:
    """A lineage verifier over the live ledger, indexed by the user's trust state."""
    from trajledger.verify.blobs import BlobHasher

    state = ledger.trust_state()
    evidence = ledger_evidence(ledger)
    return LineageVerifier(evidence, policy, index=state, data=data,
                           blobs=BlobHasher(evidence, progress=ledger.progress))


def verify_ref(ledger: LedgerHome, ref: str, policy: TrustPolicy, *, data: str = "hash") -> Report:
    """Verify the artifact ``ref`` names and its lineage; returns the report graph."""
    from trajledger.ledger.catalog import Catalog

    item = Catalog(ledger).resolve(ref)
    return ledger_verifier(ledger, policy, data=data).verify(item.digest)


def decide(
    verifier: LineageVerifier, decision: Node, subject: str, walk: Callable[[], Sequence[Edge]]
) -> Report:
    """A decision made on the verified graph (an evaluation run, a release): ``walk`` verifies
    what it needs and returns the decision's edges; the blobs still being re-hashed are
    collected (or stopped, when the walk raises); the report's roots are the log and the
    decision."""
    try:
        verifier.decision(decision, walk())
        verifier.finish()
    finally:
        verifier.close()
    return verifier.report(subject, ["log", decision.id])
