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

from trajledger.ledger.errors import shell_word
from trajledger.ledger.evidence import ledger_evidence
from trajledger.verify.lineage import Edge, LineageVerifier, Node, Report

if TYPE_CHECKING:
    from trajledger.ledger.catalog import CatalogItem
    from trajledger.ledger.home import LedgerHome
    from trajledger.verify.policy import TrustPolicy

__all__ = ["chosen", "decide", "ledger_verifier", "verify_naming_files", "verify_ref"]


def ledger_verifier(
    ledger: LedgerHome, policy: TrustPolicy, *, data: str = "hash"
) -> LineageVerifier:
    """A lineage verifier over the live ledger, indexed by the user's trust state; in a
    command's own process, the blobs of a local store re-hashed by forked workers
    (`ledger.rehash`), else on threads. Its ``now`` (a use now, the gate's) is no earlier
    than the log's last entry nor than the newest time the user's state was used at.

    The one floor of the clock: ``LineageVerifier.now`` is read only to judge a use now
    (`LineageVerifier.dataset_use` without a use record: `admit`, `train`), and those build
    their verifier here. The verifiers other commands build (cards, exports, imports and
    updates, `dataset create --from-failures`, erase, revoke, the policy's pinned suites)
    judge records at their own log times and read no clock (review left27)."""
    from trajledger.ledger.trust_pins import CLOCK_TOLERANCE
    from trajledger.ledger.user_state import notice
    from trajledger.verify.blobs import BlobHasher
    from trajledger.verify.times import format_time, parse_time

    state = ledger.trust_state()
    evidence = ledger_evidence(ledger)
    hasher = BlobHasher
    # A remote store's blobs are downloaded on demand into a directory this process removes
    # at exit (`ledger.evidence`): a worker's downloads would outlive it. Those stay on threads.
    if ledger.own_process and data == "hash" and ledger.store.is_local:
        from trajledger.ledger.rehash import ForkedHasher as hasher
    verifier = LineageVerifier(evidence, policy, index=state, data=data,
                               blobs=hasher(evidence, progress=ledger.progress))
    # A use now (the gate) is judged no earlier than the log's last entry, nor than the newest
    # time this user's state was used at: a clock set back behind either does not make an
    # expired approval valid again (rev6; on a quiet log, state26 finding 3).
    # (No verified checkpoint: no entry is trusted, and the log's check fails the report.)
    seen = state.used_at(verifier.now)
    if seen is not None and verifier.now < seen - CLOCK_TOLERANCE:
        minutes = int((seen - verifier.now).total_seconds() // 60)
        notice(f"your clock reads {format_time(verifier.now)}, is "
               f"{f'{minutes // 1440} d ' if minutes >= 1440 else ''}{minutes // 60 % 24} h "
               f"{minutes % 60} min behind the newest time your state of log "
               f"{ledger.config.origin} was used at ({format_time(seen)}): set it right (NTP, "
               "'timedatectl'); until then what expires or rotates is judged as of that time; "
               "if your clock is right and that time is not (a clock that ran ahead once, a "
               f"state copied from another machine): 'trajledger trust {shell_word(state.vkey)} "
               f"--clock-ahead {format_time(seen)}'")
    cp = verifier.checkpoint
    last = verifier.entry(cp.size - 1) if cp is not None and cp.size else None
    verifier.now = max(verifier.now, seen or verifier.now,
                       parse_time(last.time) if last is not None else verifier.now)
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
    verifier = chosen(ledger_verifier(ledger, policy, data=data), item)
    return verify_naming_files(verifier, item.digest, files)


def chosen(verifier: LineageVerifier, item: CatalogItem) -> LineageVerifier:
    """``verifier``, judging an artifact named by name by the record of that name where other
    records of its kind claim the same bytes (a checkpoint, a dataset, a batch); by digest every
    record is judged (`verify.claims`: a gate, an evaluation or a release, which record the
    digest, so)."""
    named = item.named_at
    if named is not None and (e := verifier.entry(named)) is not None and e.kind == item.kind:
        verifier.chosen[item.digest] = named
    return verifier


def verify_naming_files(
    verifier: LineageVerifier, digest: str, files: Path | None = None
) -> Report:
    """`LineageVerifier.verify` of ``digest``, its files then named (`verify.lineage.name_files`:
    every report of an artifact names them); with ``files``, a directory checked against them
    (a release's: its checkpoint's files, out54 finding 5).

    Raises:
        OSError: ``files`` is not a directory, or cannot be listed.
    """
    from trajledger.verify.lineage import name_files

    report = verifier.verify(digest)
    ck = [e.dst for e in report.edges if e.src == digest and e.role == "checkpoint"
          and files is not None and report.nodes[digest].kind == "release"]
    name_files(report.nodes[(ck or [digest])[0]], verifier.evidence, files)  # (out54 finding 5)
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
