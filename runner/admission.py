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

The runner remembers the newest log checkpoint it verified in ``<ledger>/runner/seen-checkpoint``
and refuses a log that does not extend it (a fork: another root at the same size; a rollback: a
smaller tree).
Non-scope: training (``runner.train``).
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajledger.ledger.errors import LedgerError
from trajledger.ledger.evidence import ledger_evidence
from trajledger.verify.errors import FormatError, PolicyError, ProvenanceError
from trajledger.verify.lineage import FAIL, INFO, OK, Check, LineageVerifier, Record
from trajledger.verify.policy import TrustPolicy

if TYPE_CHECKING:
    import pyarrow as pa

    from trajledger.ledger.home import Ledger

__all__ = [
    "SEEN_CHECKPOINT",
    "Admission",
    "AdmittedBatch",
    "DataRefusedError",
    "Dependency",
    "admit",
    "load_policy",
]

SEEN_CHECKPOINT = Path("runner") / "seen-checkpoint"
"""Where a ledger's runner keeps the newest log checkpoint it verified (relative to the ledger)."""


class DataRefusedError(PolicyError):
    """The runner refused data. ``report`` is the full check tree; the message lists failures."""

    def __init__(self, message: str, report: Check) -> None:
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class AdmittedBatch:
    """One admitted batch: its digest, log index, the verified tables and predicate."""

    digest: str
    index: int
    steps: pa.Table
    episodes: pa.Table
    predicate: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Dependency:
    """A verified artifact the admitted data depends on (an environment or an evaluator)."""

    role: str
    name: str
    digest: str
    index: int


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
    dependencies: tuple[Dependency, ...] = ()


def load_policy(ledger: Ledger, policy_file: Path | None) -> tuple[TrustPolicy, list[str]]:
    """The policy to apply: the file given (followed through the log's policy history), or the
    ledger's policy in force.

    Raises:
        LedgerError: no policy given and none recorded; the file cannot be read.
        FormatError: the policy file is invalid.
    """
    from trajledger.ledger._policy_state import current_policy, key_lookup
    from trajledger.ledger.verify_files import read_input

    trusted = None
    if policy_file is not None:
        trusted = TrustPolicy.from_toml(
            read_input(policy_file, "policy"),
            policy_file.parent,
            f"policy {policy_file}",
            key_lookup=key_lookup(ledger),
        )
    found = current_policy(ledger, trusted)
    if found is None:
        raise LedgerError(
            "no trust policy: pass --policy FILE, or record one with "
            "'trajledger policy set FILE --key APPROVER...'"
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
        2. Verify the dataset and each batch (records, producer signatures, inclusion,
           revocation, files present, environment and evaluator).
        3. Check the rules of training on it now: train split, no batch in a holdout or
           regression dataset, approvals by the threshold for the purpose, unexpired.
        4. Refuse erased data: the dataset or a batch with a verified erasure record.
        5. Read each batch's files once, check their digests, and validate their schema.
        6. Contamination: no episode exactly duplicates one of a holdout or regression dataset
           (the audit index finds them; near duplicates are reported, not refused). The index
           is derived data, so it can only add refusals.
        7. Remember the checkpoint when the log checks passed; refuse with every failure, or
           return the verified tables.

    Args:
        ledger: the open ledger.
        dataset_ref: ``NAME@VERSION``, a digest or a digest prefix.
        policy: the trust policy to apply.
        purpose: the purpose approvals must name (default the dataset's own purpose).
        now: the time approvals are judged at (default: now).
        remember_checkpoint: update the runner's seen checkpoint (off for a dry run).

    Raises:
        DataRefusedError: any rule fails (the report lists all of them).
        RefError: the dataset reference resolves to nothing.
    """
    from trajledger.ledger.catalog import Catalog

    # (1)
    item = Catalog(ledger).resolve(dataset_ref, {"dataset"})
    evidence = ledger_evidence(ledger)
    verifier = LineageVerifier(evidence, policy, now=now)
    seen_path = ledger.root / SEEN_CHECKPOINT
    seen = _read_seen(seen_path)
    if seen is not None:
        verifier.check_known_checkpoint(seen)
    root = Check(f"admission of dataset {item.ref} ({item.digest[:19]}…)", anchor=True)
    root.add(verifier.log)
    # (2)
    node = verifier.artifact(item.digest, "dataset")
    root.add(node)
    rec = verifier.artifact_record(item.digest, ["dataset"], Check(""))
    batches: list[AdmittedBatch] = []
    deps: dict[str, Dependency] = {}
    want_purpose = purpose or "train"
    if rec is not None:
        want_purpose = purpose or str(rec.predicate.get("purpose", "train"))
        # (3)
        size = verifier.checkpoint.size if verifier.checkpoint else 0
        root.add(
            verifier.dataset_use(
                item.digest,
                size,
                verifier.now,
                purpose=want_purpose,
                what="admissible for training",
            )
        )
        # (4)
        _refuse_erased(verifier, item.digest, node)
        members = rec.predicate.get("batches")
        for b in members if isinstance(members, list) else []:
            batch_node = verifier.artifact(str(b), "rollout-batch")
            if _refuse_erased(verifier, str(b), batch_node):
                continue
            # (5)
            batch = _read_batch(verifier, str(b), batch_node)
            if batch is not None:
                batches.append(batch)
                _dependencies(verifier, batch, deps)
        # (6)
        root.add(_contamination(ledger, item.digest))
    # (7)
    if remember_checkpoint and verifier.log.ok and verifier.checkpoint is not None:
        _remember(seen_path, seen, verifier, evidence.checkpoint_note())
    if not root.ok or rec is None:
        failures = root.failures()
        raise DataRefusedError(
            f"dataset {item.ref}: refused, {len(failures)} problem(s)\n" + "\n".join(failures), root
        )
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
        tuple(deps.values()),
    )


def _contamination(ledger: Ledger, digest: str) -> Check:
    """Exact duplicates of held-out episodes fail; near duplicates are information."""
    from trajledger.ledger.index import contamination_findings

    node = Check("no episode duplicates a holdout or regression episode")
    # A batch that is itself in both splits is reported by the split rule; here, only episodes
    # that reached the other side in another batch.
    findings = [f for f in contamination_findings(ledger, digest) if f.train_batch != f.other_batch]
    exact = [f for f in findings if f.kind == "exact"]
    for f in exact[:20]:
        node.add(Check("exact duplicate", FAIL, str(f)))
    if len(exact) > 20:
        node.add(Check("exact duplicates", FAIL, f"... and {len(exact) - 20} more"))
    near = [f for f in findings if f.kind != "exact"]
    if near:
        node.add(Check("near duplicates", INFO, f"{len(near)} (first: {near[0]})"))
    node.detail = f"{len(exact)} exact, {len(near)} near duplicate(s) (audit index, unverified)"
    return node


def _read_seen(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise LedgerError(f"{path}: cannot read the runner's seen checkpoint: {e.strerror}") from e


def _remember(path: Path, seen: bytes | None, verifier: LineageVerifier, note: bytes) -> None:
    """Keep the newest verified checkpoint (never a smaller one: runners may race)."""
    from trajledger.ledger._fs import write_file_atomic
    from trajledger.verify.checkpoint import Checkpoint
    from trajledger.verify.note import Note

    assert verifier.checkpoint is not None
    if seen is not None:
        try:
            old = Checkpoint.from_text(Note.from_bytes(seen).text)
            if old.size >= verifier.checkpoint.size:
                return
        except FormatError:
            pass  # unreadable: replace it with one that verified
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(path, note)


def _refuse_erased(verifier: LineageVerifier, digest: str, node: Check) -> bool:
    erased = verifier.erasure(digest)
    if erased is None:
        return False
    node.add(
        Check(
            "erased",
            FAIL,
            f"{erased.predicate.get('reason', '')} (log index {erased.index}): "
            "erased data is never trained on",
        )
    )
    return True


def _dependencies(
    verifier: LineageVerifier, batch: AdmittedBatch, out: dict[str, Dependency]
) -> None:
    for role in ("environment", "evaluator"):
        ref = batch.predicate.get(role)
        digest = ref.get("digest") if isinstance(ref, dict) else None
        if not isinstance(digest, str) or digest in out:
            continue
        rec: Record | None = verifier.artifact_record(digest, [role], Check(""))
        if rec is None:
            continue
        name = f"{rec.predicate.get('name')}@{rec.predicate.get('version')}"
        out[digest] = Dependency(role, name, digest, rec.index)


def _read_batch(verifier: LineageVerifier, digest: str, node: Check) -> AdmittedBatch | None:
    """Read a batch's files once, verify their digests, validate their schema.

    The returned tables are parsed from the very bytes that were hashed: the trainer gets
    these, and the store is not read again.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trajledger.ledger.rollouts import validate_episodes, validate_steps
    from trajledger.verify._json import load_object
    from trajledger.verify.digest import digest_bytes
    from trajledger.verify.manifest import Manifest

    rec = verifier.artifact_record(digest, ["rollout-batch"], Check(""))
    if rec is None:
        return None  # the artifact node already says why
    raw = verifier.evidence.blob(digest)
    if raw is None or digest_bytes(raw) != digest:
        return None  # the artifact's "files" check already says why
    try:
        manifest = Manifest.from_json(load_object(raw, "manifest"))
    except ProvenanceError:
        return None
    data: dict[str, bytes] = {}
    for f in manifest.files:
        blob = verifier.evidence.blob(f.digest)
        if blob is None:
            node.add(Check(f.path, FAIL, f"blob {f.digest[:19]}… is missing"))
            continue
        got = digest_bytes(blob)
        if len(blob) != f.size:
            node.add(Check(f.path, FAIL, f"tampered: {len(blob)} bytes, want {f.size}"))
            continue
        if got != f.digest:
            node.add(
                Check(
                    f.path, FAIL, f"tampered: content hashes to {got[:19]}…, want {f.digest[:19]}…"
                )
            )
            continue
        data[f.path] = blob
    if len(data) != len(manifest.files):
        return None
    missing = [p for p in ("steps.parquet", "episodes.parquet") if p not in data]
    if missing:
        node.add(Check("schema", FAIL, f"the batch has no {' and no '.join(missing)}"))
        return None
    try:
        steps = pq.read_table(io.BytesIO(data["steps.parquet"]))
        episodes = pq.read_table(io.BytesIO(data["episodes.parquet"]))
    except (OSError, ValueError, pa.ArrowException) as e:
        node.add(Check("schema", FAIL, f"not readable Parquet: {e}"))
        return None
    steps_report = validate_steps(steps, subject="steps.parquet")
    # Episodes are compared with their steps only when the steps are valid (the comparison
    # derives episodes from the steps).
    reports = [
        steps_report,
        validate_episodes(
            episodes, steps=steps if steps_report.ok else None, subject="episodes.parquet"
        ),
    ]
    problems = [f"{r.subject}: {p}" for r in reports for p in r.problems]
    if problems:
        more = f"; ... {len(problems) - 5} more" if len(problems) > 5 else ""
        node.add(Check("schema", FAIL, "; ".join(problems[:5]) + more))
        return None
    node.add(
        Check(
            "data",
            OK,
            f"{steps.num_rows} steps, {episodes.num_rows} episodes; "
            "bytes verified, schema valid, held in memory for training",
        )
    )
    return AdmittedBatch(digest, rec.index, steps, episodes, dict(rec.predicate))
