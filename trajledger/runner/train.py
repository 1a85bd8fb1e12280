"""Train on admitted data only, and record the checkpoint with its SLSA provenance.

Scope: `train` runs the admission gate, hands the verified Arrow tables (the bytes the gate
hashed, never re-read) to a trainer plug-in, records the checkpoint files as a ``checkpoint``
artifact whose predicate is SLSA Provenance v1, signed by a trainer key and logged. A refused
run trains nothing and appends a signed ``refusal`` record saying why.
`rollout` plays a checkpoint's policy in Gymnasium and records the episodes as a batch whose
policy version is the checkpoint's digest, so lineage spans training iterations.
Non-scope: the rules (``runner.admission``), the algorithms (``runner.trainers``).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import inspect
import platform
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajledger.ledger.fs import temp_dir
from trajledger.verify import predicates
from trajledger.verify.errors import PolicyError
from trajledger.verify.predicates import Provenance, Refusal, ResourceDescriptor
from trajledger.verify.times import now

from .admission import Admission, DataRefusedError, admit

if TYPE_CHECKING:
    from trajledger.ledger.home import Ledger
    from trajledger.ledger.keys import Signer
    from trajledger.verify.policy import TrustPolicy

__all__ = ["BUILDER_ID", "BUILD_TYPE", "TrainOutcome", "dependency_lock_digest", "rollout", "train"]

BUILD_TYPE = "https://trajledger.dev/build/train/v1"
BUILDER_ID = "https://trajledger.dev/runner/v1"


@dataclass(frozen=True)
class TrainOutcome:
    """A recorded checkpoint."""

    digest: str
    index: int
    metrics: dict[str, float]
    admission: Admission
    new: bool = True
    """False: the same checkpoint (same dataset, parent, trainer, config and seed) was
    already recorded, at ``index``."""


def dependency_lock_digest() -> str:
    """sha256 of the sorted ``name==version`` lines of every installed distribution."""
    lines = sorted(
        {
            f"{d.metadata['Name'].lower()}=={d.version}"
            for d in importlib.metadata.distributions()
            if d.metadata["Name"]
        }
    )
    return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


def trainer_code_digest(trainer: object) -> str:
    """sha256 of the trainer's source file (the code that turned data into weights)."""
    try:
        source = inspect.getsourcefile(type(trainer))
        data = Path(source).read_bytes() if source else repr(type(trainer)).encode()
    except (OSError, TypeError):
        data = repr(type(trainer)).encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()


def train(
    ledger: Ledger,
    dataset_ref: str,
    trainer_name: str,
    signer: Signer,
    policy: TrustPolicy,
    *,
    config: Mapping[str, Any] | None = None,
    seed: int = 0,
    name: str | None = None,
    version: str | None = None,
    parent: str | None = None,
) -> TrainOutcome:
    """Admit a dataset, train on its verified bytes, record the checkpoint.

    Steps:
        1. Check the signer holds the trainer role, load the trainer, check its config (when
           the trainer can) and resolve the parent, all before any data is read.
        2. Admit the dataset. On refusal: record one signed refusal naming every reason, and
           re-raise; nothing is trained.
        3. Train on the admitted tables (concatenated in the dataset's batch order): the bytes
           the gate hashed, parsed once and held in memory; the store is not read again.
        4. Record the checkpoint files with SLSA provenance (subjects: the manifest digest, the
           artifact's identity, then each model file's path and sha256): the dataset (with its
           log index), the environments and evaluators of its batches (from their verified
           records), the trainer code digest, the dependency lock digest, the parent
           checkpoint; config and seed as external parameters; metrics as a byproduct.

    Raises:
        DataRefusedError: admission failed (a refusal record was appended).
        PolicyError: the signer is not a trainer of the policy.
        TrainingDataError: the admitted batches cannot be combined (different schemas).
    """
    import pyarrow as pa

    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.record import record_files

    from .trainers import TrainingData, TrainingDataError, load_trainer

    # (1)
    if not policy.holds("trainer", signer.keyid):
        raise PolicyError(
            f"key {signer.name} ({signer.keyid[:12]}): does not hold the trainer role in "
            f"policy {policy.name!r} serial {policy.serial}"
        )
    trainer = load_trainer(trainer_name)
    check_config = getattr(trainer, "check_config", None)  # optional plug-in hook
    if callable(check_config):
        check_config(dict(config or {}))
    catalog = Catalog(ledger)
    parent_item = catalog.resolve(parent, {"checkpoint"}) if parent else None
    started = now()
    # (2)
    try:
        admission = admit(ledger, dataset_ref, policy)
    except DataRefusedError as e:
        _record_refusal(ledger, dataset_ref, trainer_name, signer, e)
        raise
    # (3)
    try:
        steps = pa.concat_tables([b.steps for b in admission.batches], promote_options="none")
        episodes = pa.concat_tables([b.episodes for b in admission.batches], promote_options="none")
    except pa.ArrowInvalid as e:
        raise TrainingDataError(
            f"dataset {admission.name}@{admission.version}: its batches have different "
            f"schemas and cannot be trained on together: {e}"
        ) from e
    result = trainer.train(TrainingData(steps, episodes), dict(config or {}), seed)
    # (4)
    deps = [
        ResourceDescriptor.of(
            f"dataset:{admission.name}@{admission.version}",
            admission.dataset,
            role="dataset",
            logIndex=admission.dataset_index,
        )
    ]
    for d in admission.dependencies:
        deps.append(ResourceDescriptor.of(f"{d.role}:{d.name}", d.digest, role=d.role,
                                          logIndex=d.index))
    deps.append(ResourceDescriptor.of(f"trainer-code:{trainer_name}",
                                      trainer_code_digest(trainer), role="trainer-code"))
    deps.append(ResourceDescriptor.of("dependency-lock", dependency_lock_digest(),
                                      role="dependency-lock"))
    if parent_item is not None:
        deps.append(
            ResourceDescriptor.of(
                f"checkpoint:{parent_item.ref}",
                parent_item.digest,
                role="base-checkpoint",
                logIndex=parent_item.index,
            )
        )
    ckpt_name = name or f"{admission.name}-{trainer_name}"
    ckpt_version = version or f"seed{seed}-{uuid.uuid4().hex[:8]}"
    from trajledger.ledger.signing import canonical_json
    from trajledger.verify.policy import policy_digest

    metrics = dict(result.metrics)
    provenance = Provenance(
        build_type=BUILD_TYPE,
        external_parameters={
            "name": ckpt_name,
            "version": ckpt_version,
            "dataset": admission.dataset,
            "purpose": admission.purpose,
            "trainer": trainer_name,
            "config": result.config,
            "seed": seed,
        },
        internal_parameters={
            "policy": policy_digest(policy),
            "python": platform.python_version(),
            "trajledger": _version(),
        },
        resolved_dependencies=tuple(deps),
        builder_id=BUILDER_ID,
        metadata={"invocationId": str(uuid.uuid4()), "startedOn": started, "finishedOn": now()},
        byproducts=(
            ResourceDescriptor(
                name="metrics",
                content=base64.b64encode(canonical_json(metrics)).decode("ascii"),
                media_type="application/json",
                annotations=metrics,
            ),
        ),
    ).to_predicate()
    with temp_dir(ledger.root / "tmp") as tmp:
        files: dict[str, Path] = {}
        for rel, data in result.files.items():
            p = Path(tmp) / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            files[rel] = p
        recorded = record_files(
            ledger,
            files,
            signer,
            predicates.SLSA_PROVENANCE_V1,
            provenance,
            kind="checkpoint",
            name=f"{ckpt_name}@{ckpt_version}",
            inline_manifest=False,
            file_subjects=True,
        )
    return TrainOutcome(recorded.digest, recorded.index, dict(result.metrics), admission,
                        recorded.new)


def _record_refusal(
    ledger: Ledger, dataset_ref: str, trainer_name: str, signer: Signer, error: DataRefusedError
) -> None:
    """Append the signed refusal record; a failure to write it is noted on ``error``."""
    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.record import record_statement
    from trajledger.verify.errors import ProvenanceError

    try:
        item = Catalog(ledger).resolve(dataset_ref, {"dataset"})
        refusal = Refusal(
            item.digest,
            trainer_name,
            tuple(error.report.failures()[:50] or [str(error)]),
            now(),
        )
        record_statement(ledger, item.ref, item.digest, predicates.REFUSAL,
                         refusal.to_predicate(), signer)
    except ProvenanceError as e:
        # The refusal stands either way; say that its record is missing.
        error.args = (f"{error}\nthe refusal could not be recorded: {e}",)


def _version() -> str:
    try:
        return importlib.metadata.version("trajledger")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def checkpoint_files(ledger: Ledger, ref: str) -> tuple[Any, dict[str, bytes]]:
    """A recorded checkpoint's catalog item and files, each checked against its digest."""
    from trajledger.ledger.artifacts import batch_files
    from trajledger.ledger.catalog import Catalog

    item = Catalog(ledger).resolve(ref, {"checkpoint"})
    files = {
        path: ledger.store.get_verified(d) for path, d in batch_files(ledger, item.digest).items()
    }
    return item, files


def rollout(
    ledger: Ledger,
    checkpoint_ref: str,
    env: str,
    episodes: int,
    signer: Signer,
    *,
    seed: int = 0,
    max_steps: int | None = None,
) -> tuple[Any, float]:
    """Play a checkpoint's policy and record the episodes as a batch.

    ``env`` is a registered environment (NAME@VERSION or digest) or a Gymnasium id that a
    registered environment names (the newest such registration is used).

    Returns:
        The `BatchResult` and the mean return.

    Raises:
        RefError: no such checkpoint or environment.
    """
    from trajledger.ledger.artifacts import record_batch
    from trajledger.ledger.catalog import Catalog, RefError

    from .rollouts import run_policy
    from .trainers import load_policy

    item, files = checkpoint_files(ledger, checkpoint_ref)
    policy = load_policy(files)
    catalog = Catalog(ledger)
    try:
        env_item = catalog.resolve(env, {"environment"})
        gym_id = _env_gym_id(ledger, env_item.envelope) or env
    except RefError:
        envs = [i for i in catalog.by_kind("environment") if _env_gym_id(ledger, i.envelope) == env]
        if not envs:
            raise RefError(
                f"{env}: no registered environment has this name or Gymnasium id; register "
                f"it with 'trajledger env register NAME --version V --gym-id {env}'"
            ) from None
        env_item, gym_id = envs[-1], env
    result = run_policy(
        policy, gym_id, episodes, seed, max_steps=max_steps, policy_version=item.digest
    )
    batch = record_batch(
        ledger,
        result.steps,
        episodes=result.episodes,
        env=env_item.digest,
        policy=item.digest,
        signer=signer,
        name=f"rollouts-{item.ref}-seed{seed}",
        generator="trajledger rollout",
    )
    return batch, float(result.mean_return)


def _env_gym_id(ledger: Ledger, envelope: str) -> str | None:
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.errors import ProvenanceError
    from trajledger.verify.statement import Statement

    try:
        p = Statement.from_bytes(Envelope.from_bytes(ledger.store.get(envelope)).payload).predicate
    except ProvenanceError:
        return None
    value = p.get("gymnasiumId")
    return str(value) if value else None
