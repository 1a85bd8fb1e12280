"""``trajledger verify REF``: an artifact's whole lineage, from the live ledger.

Scope: resolve the reference (confirmed from the log), then run ``verify.lineage`` on the ledger
directory with the policy in force, looking records up in the user's trust state (so the cost
does not grow with the log), and name the artifact's files (or check a directory of them,
``--files``); the same verifier checks an exported bundle (``python -m verify``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trajledger.ledger.evidence import ledger_evidence
from trajledger.verify.lineage import Edge, LineageVerifier, Node, Report

if TYPE_CHECKING:
    from trajledger.ledger.home import LedgerHome
    from trajledger.verify.policy import TrustPolicy

__all__ = ["decide", "ledger_verifier", "verify_naming_files", "verify_ref"]


def ledger_verifier(
    ledger: LedgerHome, policy: TrustPolicy, *, data: str = "hash"
) -> LineageVerifier:
    """A lineage verifier over the live ledger, indexed by the user's trust state; in a
    command's own process, the blobs of a local store re-hashed by forked workers
    (`ledger.rehash`), else on threads. Its ``now`` (a use now, the gate's) is no earlier
    than the log's last entry."""
    from trajledger.verify.blobs import BlobHasher
    from trajledger.verify.times import parse_time

    state = ledger.trust_state()
    evidence = ledger_evidence(ledger)
    hasher = BlobHasher
    # A remote store's blobs are downloaded on demand into a directory this process removes
    # at exit (`ledger.evidence`): a worker's downloads would outlive it. Those stay on threads.
    if ledger.own_process and data == "hash" and ledger.store.is_local:
        from trajledger.ledger.rehash import ForkedHasher as hasher
    verifier = LineageVerifier(evidence, policy, index=state, data=data,
                               blobs=hasher(evidence, progress=ledger.progress))
    # A use now (the gate) is judged no earlier than the log's last entry: a clock set back
    # behind the log does not make an expired approval valid again.
    # (No verified checkpoint: no entry is trusted, and the log's check fails the report.)
    cp = verifier.checkpoint
    last = verifier.entry(cp.size - 1) if cp is not None and cp.size else None
    if last is not None:
        verifier.now = max(verifier.now, parse_time(last.time))
    return verifier


def verify_ref(
    ledger: LedgerHome, ref: str, policy: TrustPolicy, *, data: str = "hash",
    files: Path | None = None,
) -> Report:
    """Verify the artifact ``ref`` names and its lineage; returns the report graph. Its files
    are named with their digests (`verify.lineage.name_files`, as a bundle's report names
    them); with ``files``, a directory of them (a model) is checked against its manifest.

    Raises:
        OSError: ``files`` is not a directory, or cannot be listed.
    """
    from trajledger.ledger.catalog import Catalog

    item = Catalog(ledger).resolve(ref)
    return verify_naming_files(ledger_verifier(ledger, policy, data=data), item.digest, files)


def verify_naming_files(
    verifier: LineageVerifier, digest: str, files: Path | None = None
) -> Report:
    """`LineageVerifier.verify` of ``digest``, its files then named (`verify.lineage.name_files`:
    every report of an artifact names them); with ``files``, a directory checked against them.

    Raises:
        OSError: ``files`` is not a directory, or cannot be listed.
    """
    from trajledger.verify.lineage import name_files

    report = verifier.verify(digest)
    name_files(report.nodes[digest], verifier.evidence, files)
    return report


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
