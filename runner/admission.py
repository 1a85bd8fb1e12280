"""The admission gate: a dataset is trained on only when every rule holds for every batch.

Scope: DESIGN §6. For a dataset and a trust policy, check that every member batch

1. has bytes that hash to its digests (read once from the store, kept in memory, and handed to
   the trainer: nothing is read again between the check and the use);
2. carries a valid producer signature (the policy's producer threshold);
3. is included in the log under a checkpoint signed by the policy's log key and consistent with
   the newest checkpoint this runner has seen (no fork, no rollback);
4. is approved, with the dataset, by ``threshold`` approvers for the purpose, unexpired;
5. is not revoked or erased;
6. is not in a holdout or regression split (the dataset's own split is train, and no other
   signed dataset puts the batch in holdout or regression);
7. passes schema validation.

Every failed check is reported, batch by batch, and then the gate refuses with
`DataRefusedError`: a refusal is an exception, never a boolean.
Non-scope: training (``runner.train``).
"""

from __future__ import annotations

import datetime as dt
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import LedgerError
from verify.errors import PolicyError, ProvenanceError
from verify.evidence import LedgerDirEvidence
from verify.lineage import FAIL, Check, LineageVerifier
from verify.policy import TrustPolicy

if TYPE_CHECKING:
    import pyarrow as pa

    from ledger.home import Ledger

__all__ = ["Admission", "AdmittedBatch", "DataRefusedError", "admit", "load_policy"]

SEEN_CHECKPOINT = Path("runner") / "seen-checkpoint"


class DataRefusedError(PolicyError):
    """The runner refused data. ``report`` is the full check tree; the message lists failures."""

    def __init__(self, message: str, report: Check) -> None:
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class AdmittedBatch:
    """One admitted batch: its digest, log index, and the verified tables."""

    digest: str
    index: int
    steps: pa.Table
    episodes: pa.Table


@dataclass(frozen=True)
class Admission:
    """What the gate admitted: the dataset record and each batch's verified data."""

    dataset: str
    dataset_index: int
    name: str
    version: str
    purpose: str
    policy: TrustPolicy
    report: Check
    batches: tuple[AdmittedBatch, ...]
    predicate: dict[str, Any] = field(default_factory=dict)


def load_policy(ledger: Ledger, policy_file: Path | None) -> tuple[TrustPolicy, list[str]]:
    """The policy to apply: the file given (followed through the log's policy history), or the
    ledger's policy in force.

    Raises:
        LedgerError: no policy given and none recorded.
        FormatError: the policy file is invalid.
    """
    from ledger._policy_state import current_policy

    trusted = None
    if policy_file is not None:
        try:
            data = policy_file.read_bytes()
        except OSError as e:
            raise LedgerError(f"{policy_file}: cannot read: {e.strerror}") from e
        trusted = TrustPolicy.from_toml(data, policy_file.parent, f"policy {policy_file}")
    found = current_policy(ledger, trusted)
    if found is None:
        raise LedgerError(
            "no trust policy: pass --policy FILE, or record one with 'trajledger policy set FILE'"
        )
    notes, policy = found
    return policy, notes


def admit(
    ledger: Ledger,
    dataset_ref: str,
    policy: TrustPolicy,
    *,
    purpose: str | None = None,
    now: dt.datetime | None = None,
    remember_checkpoint: bool = True,
) -> Admission:
    """Check a dataset against every rule; return its verified data or refuse.

    Steps:
        1. Resolve the dataset and open the log as evidence; verify the checkpoint and check it
           is consistent with the newest one this runner saw.
        2. Verify the dataset and each batch (records, signatures, inclusion, revocation,
           erasure, files present) and the dataset's use for training (train split, approvals
           by the threshold for the purpose, unexpired).
        3. Refuse batches that another signed dataset puts in holdout or regression.
        4. Read each batch's files once, check their digests, and validate their schema.
        5. Refuse with every failure, or return the verified tables.

    Raises:
        DataRefusedError: any rule fails (the report lists all of them).
        RefError: the dataset reference resolves to nothing.
    """
    from ledger.catalog import Catalog

    # (1)
    catalog = Catalog(ledger)
    item = catalog.resolve(dataset_ref, {"dataset"})
    evidence = LedgerDirEvidence(ledger.root)
    verifier = LineageVerifier(evidence, policy, now=now)
    seen_path = ledger.root / SEEN_CHECKPOINT
    if seen_path.is_file():
        verifier.check_known_checkpoint(seen_path.read_bytes())
    root = Check(f"admission of dataset {item.ref} ({item.digest[:19]}…)")
    root.add(verifier.log)
    # (2)
    node = verifier.artifact(item.digest, "dataset")
    root.add(node)
    rec = next(
        (
            r
            for i in verifier.records(item.digest, "dataset")
            if (r := verifier.record(i, Check(""))) is not None
        ),
        None,
    )
    batches: list[AdmittedBatch] = []
    if rec is not None:
        use = Check("admissible for training")
        node.add(use)
        split = rec.predicate.get("split")
        if split != "train":
            use.add(
                Check(
                    "split",
                    FAIL,
                    f"the dataset is {split!r}: holdout and regression data are never trained on",
                )
            )
        want_purpose = purpose or str(rec.predicate.get("purpose", "train"))
        verifier.approvals(item.digest, want_purpose, evidence_size(verifier), verifier.now, use)
        # (3)
        _contamination(verifier, catalog, item.digest, rec.predicate, root)
        # (4)
        for b in rec.predicate.get("batches", []):
            batch = _read_batch(ledger, verifier, str(b), node)
            if batch is not None:
                batches.append(batch)
    # (5)
    if not root.ok:
        failures = root.failures()
        raise DataRefusedError(
            f"dataset {item.ref}: refused, {len(failures)} problem(s)\n" + "\n".join(failures), root
        )
    if remember_checkpoint and verifier.checkpoint is not None:
        from ledger._fs import write_file_atomic

        write_file_atomic(seen_path, evidence.checkpoint_note())
    assert rec is not None
    return Admission(
        item.digest,
        rec.index,
        item.name,
        item.version,
        want_purpose,
        policy,
        root,
        tuple(batches),
        rec.predicate,
    )


def evidence_size(verifier: LineageVerifier) -> int:
    """The log size the verifier checked (uses after it are in the future)."""
    return verifier.checkpoint.size if verifier.checkpoint else 0


def _contamination(
    verifier: LineageVerifier, catalog: Any, digest: str, predicate: dict[str, Any], root: Check
) -> None:
    members = set(predicate.get("batches", []))
    node = Check("not in a holdout or regression split")
    for other in catalog.by_kind("dataset"):
        if other.digest == digest:
            continue
        rec = verifier.record(other.index, Check(""))
        if rec is None or rec.predicate.get("split") not in ("holdout", "regression"):
            continue
        for b in sorted(members & set(rec.predicate.get("batches", []))):
            node.add(
                Check(
                    f"rollout-batch {b[:19]}…",
                    FAIL,
                    f"is in {rec.predicate.get('split')} dataset {other.ref}",
                )
            )
    root.add(node)


def _read_batch(
    ledger: Ledger, verifier: LineageVerifier, digest: str, parent: Check
) -> AdmittedBatch | None:
    """Read a batch's files once, verify their digests, validate their schema."""
    import pyarrow.parquet as pq

    from ledger.rollouts import validate_episodes, validate_steps
    from verify._json import load_object
    from verify.digest import digest_bytes
    from verify.manifest import Manifest

    node = Check(f"data of rollout-batch {digest[:19]}…")
    parent.add(node)
    rec = next(
        (
            r
            for i in verifier.records(digest, "rollout-batch")
            if (r := verifier.record(i, Check(""))) is not None
        ),
        None,
    )
    if rec is None:
        node.add(Check("", FAIL, "no verified record"))
        return None
    raw = verifier.evidence.blob(digest)
    if raw is None or digest_bytes(raw) != digest:
        node.add(
            Check(
                "manifest",
                FAIL,
                "missing" if raw is None else "bytes do not hash to the batch digest",
            )
        )
        return None
    try:
        manifest = Manifest.from_json(load_object(raw, "manifest"))
    except ProvenanceError as e:
        node.add(Check("manifest", FAIL, str(e)))
        return None
    data: dict[str, bytes] = {}
    for f in manifest.files:
        blob = verifier.evidence.blob(f.digest)
        if blob is None:
            node.add(Check(f.path, FAIL, "missing (erased or lost)"))
            continue
        if len(blob) != f.size or digest_bytes(blob) != f.digest:
            node.add(
                Check(
                    f.path,
                    FAIL,
                    f"tampered: content hashes to {digest_bytes(blob)[:19]}…, want {f.digest[:19]}…",
                )
            )
            continue
        data[f.path] = blob
    if "steps.parquet" not in data or "episodes.parquet" not in data:
        if node.ok:
            node.add(Check("", FAIL, "the batch has no steps.parquet and episodes.parquet"))
        return None
    try:
        steps = pq.read_table(io.BytesIO(data["steps.parquet"]))
        episodes = pq.read_table(io.BytesIO(data["episodes.parquet"]))
    except (OSError, ValueError) as e:
        node.add(Check("schema", FAIL, f"not readable Parquet: {e}"))
        return None
    reports = [
        validate_steps(steps, subject="steps.parquet"),
        validate_episodes(episodes, steps=steps, subject="episodes.parquet"),
    ]
    problems = [f"{r.subject}: {p}" for r in reports for p in r.problems]
    if problems:
        node.add(
            Check(
                "schema",
                FAIL,
                "; ".join(str(p) for p in problems[:10])
                + (f"; ... {len(problems) - 10} more" if len(problems) > 10 else ""),
            )
        )
        return None
    node.add(
        Check(
            "schema",
            "ok",
            f"{steps.num_rows} steps, {episodes.num_rows} episodes; bytes verified and held for training",
        )
    )
    return AdmittedBatch(digest, rec.index, steps, episodes)
