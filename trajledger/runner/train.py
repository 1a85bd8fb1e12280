"""Train on admitted data only, and record each checkpoint with its SLSA provenance.

Scope: the three ways to train, through one gate (DESIGN §6; docs/trainers.md):

- `train`: a trainer plug-in receives the verified Arrow tables (the bytes the gate hashed,
  never re-read) and returns the checkpoint files;
- `train_command`: any command (``trajledger train ... -- COMMAND``) gets a read-only directory
  of the verified bytes and an empty output directory (`runner.workdir`, `runner.command`); when
  it exits 0 and left its data unchanged, its output files are the checkpoint;
- `runner.training.Training` (``with ledger.training(...) as run``): in-process frameworks (the
  Hugging Face Trainer, TRL) read the verified data from memory and `run.save(directory)`
  records a checkpoint.

Each records the checkpoint files as a ``checkpoint`` artifact whose predicate is SLSA
Provenance v1 (`record_checkpoint`), signed by a trainer key and logged. A refused run trains
nothing and appends a signed ``refusal`` record saying why.
`rollout` plays a checkpoint's policy in Gymnasium and records the episodes as a batch whose
policy version is the checkpoint's digest, so lineage spans training iterations.
Non-scope: the rules (``runner.admission``), the algorithms (``runner.trainers``).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import inspect
import os
import platform
import shlex
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from trajledger.ledger.errors import LedgerError
from trajledger.ledger.fs import temp_dir
from trajledger.verify import predicates
from trajledger.verify.digest import FileDigest, digest_bytes
from trajledger.verify.errors import FormatError, PolicyError, VerificationError
from trajledger.verify.other_predicates import Refusal
from trajledger.verify.predicates import Provenance, ResourceDescriptor
from trajledger.verify.times import now

from .admission import Admission, DataRefusedError, admit
from .buildinfo import GitSource, command_lock, environment_lock, git_source, lock_descriptor
from .written import beside_output, written_elsewhere

if TYPE_CHECKING:
    from trajledger.ledger.catalog import CatalogItem
    from trajledger.ledger.home import LedgerHome
    from trajledger.ledger.keys import Signer
    from trajledger.ledger.record import Recorded
    from trajledger.verify.policy import TrustPolicy

    from .command import CommandResult
    from .settled import Settled

__all__ = [
    "BUILDER_ID",
    "BUILD_TYPE",
    "COMMAND_BUILD_TYPE",
    "LOGS_DIR",
    "PYTHON_BUILD_TYPE",
    "REFUSED_ROLLOUT",
    "CommandFailedError",
    "RunStart",
    "TrainOutcome",
    "admit_for_training",
    "check_lineage",
    "dependency_lock_digest",
    "environment_dependencies",
    "exit_message",
    "kept_digests",
    "kept_logs",
    "lineage_dependencies",
    "record_checkpoint",
    "rollout",
    "run_byproducts",
    "start_run",
    "train",
    "train_command",
    "write_checkpoint_dir",
]

BUILD_TYPE: Final = "https://trajledger.dev/build/train/v1"
"""A trainer plug-in's run (`train`)."""
COMMAND_BUILD_TYPE: Final = "https://trajledger.dev/build/command/v1"
"""A command's run (`train_command`)."""
PYTHON_BUILD_TYPE: Final = "https://trajledger.dev/build/python/v1"
"""An in-process run (`runner.training`)."""
BUILDER_ID: Final = "https://trajledger.dev/runner/v1"

RECORDING_MARGIN: Final = 60
"""Seconds an approval must still hold after the re-check before a checkpoint is recorded
(`check_still_admitted`): the entry's log time, at which its lineage judges approvals, comes
a moment later."""

LOGS_DIR: Final = "trajledger-run"
"""Where a command's kept logs go among the checkpoint's files (``--keep-logs``)."""

class CommandFailedError(VerificationError):
    """A training command did not produce a checkpoint: non-zero exit, or no output file.

    Nothing is recorded (exit 1).

    Attributes:
        returncode: the command's exit status (negative: the signal that killed it).
    """

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


@dataclass(frozen=True)
class TrainOutcome:
    """A recorded checkpoint.

    Attributes:
        digest: the checkpoint's identity (its manifest digest).
        index: its log index.
        metrics: the metrics its provenance records.
        admission: what the gate admitted.
        run: how the command ended (`train_command` only).
        files: how many files the checkpoint holds.
    """

    digest: str
    index: int
    metrics: dict[str, float]
    admission: Admission
    run: CommandResult | None = None
    files: int = 0
    new: bool = True
    """False: the same checkpoint (same dataset, parent, trainer, config and seed) was
    already recorded, at ``index``."""


@dataclass(frozen=True)
class RunStart:
    """What is settled before a run reads any data: signer, policy, parent, name, start time."""

    signer: Signer
    policy: TrustPolicy
    parent: CatalogItem | None
    name: str | None
    version: str | None
    started: str


def dependency_lock_digest() -> str:
    """sha256 of the sorted ``name==version`` lines of every installed distribution."""
    return digest_bytes(environment_lock())


def trainer_code_digest(trainer: object) -> str:
    """sha256 of the trainer's source file (the code that turned data into weights)."""
    try:
        source = inspect.getsourcefile(type(trainer))
        data = Path(source).read_bytes() if source else repr(type(trainer)).encode()
    except (OSError, TypeError):
        data = repr(type(trainer)).encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()


def start_run(
    ledger: LedgerHome,
    signer: Signer,
    policy: TrustPolicy,
    *,
    parent: str | None,
    name: str | None,
    version: str | None,
) -> RunStart:
    """The checks every run makes before it reads data.

    Raises:
        PolicyError: the signer does not hold the trainer role.
        RefError: the parent is not a recorded checkpoint.
        DataRefusedError: the parent's lineage fails (revoked, say).
        LedgerError: a checkpoint ``name@version`` is already recorded.
    """
    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.policy_state import not_in_role

    if not policy.holds("trainer", signer.keyid):
        raise PolicyError(
            not_in_role(signer.name, signer.keyid, policy, "trainer")
            + "; sign with one of its trainer keys ("
            + (", ".join(k.keyid[:16] for k in policy.role("trainer").keys) or "none")
            + "; 'trajledger key list' shows your keys' fingerprints)"
        )
    catalog = Catalog(ledger)
    parent_item = catalog.resolve(parent, {"checkpoint"}) if parent else None
    if name is not None and version is not None:
        check_name_free(ledger, name, version)
    if parent_item is not None:
        _check_parent(ledger, policy, parent_item)
    return RunStart(signer, policy, parent_item, name, version, now())


def _check_parent(ledger: LedgerHome, policy: TrustPolicy, parent: CatalogItem) -> None:
    """A run starts from a parent checkpoint only when the parent's lineage verifies (its
    files are hashed when they are handed over): a child of a failing parent fails too.

    Raises:
        DataRefusedError: it does not (nothing has run).
    """
    check_lineage(ledger, policy, parent, "parent checkpoint", "nothing was run")


def check_lineage(
    ledger: LedgerHome, policy: TrustPolicy, item: CatalogItem, what: str, consequence: str
) -> None:
    """Refuse to use ``item`` (a parent checkpoint, a checkpoint or environment to play) when
    its lineage fails: what is built on it would fail from its first day.

    Raises:
        DataRefusedError: ``WHAT REF: its lineage fails, N problem(s); CONSEQUENCE``, then one
            line per problem.
    """
    from trajledger.ledger.catalog import named_report, qualified_ref

    from .verification import verify_ref

    report = verify_ref(ledger, item.digest, policy, data="size")
    if not report.ok:
        from .revokers import revokers, with_words

        named = named_report(ledger, report)  # (after a clash: out50)
        failures = with_words(named.failures(),  # (who: out57)
                              revokers(ledger, named, policy))
        raise DataRefusedError(f"{what} {qualified_ref(ledger, item)}: its lineage fails, "
                               f"{len(failures)} "
                               f"problem(s); {consequence}\n" + "\n".join(failures), report)


def check_name_free(ledger: LedgerHome, name: str, version: str) -> None:
    """Refuse a checkpoint ``name@version`` this ledger recorded already (it would be
    ambiguous). An imported checkpoint's name is another origin's: yours takes it, with a
    warning (`record_checkpoint`), as a dataset, environment or evaluator of yours does and as
    an import of a clashing name is taken (out49: one rule; it was refused here alone).

    Raises:
        LedgerError: it is.
    """
    from trajledger.ledger.catalog import Origins
    from trajledger.ledger.names import check_new

    state = ledger.trust_state()
    check_new(state, "checkpoint", name, version)
    origins = Origins(ledger)
    for row in state.by_name(name, version):
        if row.kind == "checkpoint" and not origins.of(row.index):
            raise LedgerError(
                f"checkpoint {name}@{version} is already recorded ({row.subject[:19]}…, log "
                f"index {row.index}); give another --version"
            )


def admit_for_training(
    ledger: LedgerHome, dataset_ref: str, start: RunStart, trainer_label: str
) -> Admission:
    """Admit the dataset; on refusal record a signed refusal naming every reason, and re-raise.

    Raises:
        DataRefusedError: admission failed (a refusal record was appended).
    """
    try:
        return admit(ledger, dataset_ref, start.policy)
    except DataRefusedError as e:
        _record_refusal(ledger, dataset_ref, trainer_label, start.signer, e)
        raise


def lineage_dependencies(
    admission: Admission, parent: CatalogItem | None
) -> list[ResourceDescriptor]:
    """The dependencies that are artifacts of the log: the dataset (with its log index), the
    environments and evaluators of its batches (from their verified records), the parent."""
    deps = [ResourceDescriptor.of(f"dataset:{admission.name}@{admission.version}",
                                  admission.dataset, role="dataset",
                                  logIndex=admission.dataset_index)]
    for d in admission.dependencies:
        deps.append(ResourceDescriptor.of(f"{d.role}:{d.name}", d.digest, role=d.role,
                                          logIndex=d.index))
    if parent is not None:
        deps.append(ResourceDescriptor.of(f"checkpoint:{parent.ref}", parent.digest,
                                          role="base-checkpoint", logIndex=parent.index))
    return deps


def metrics_byproduct(metrics: Mapping[str, float]) -> ResourceDescriptor:
    """The ``metrics`` byproduct: the canonical JSON as content, the values as annotations."""
    from trajledger.ledger.signing import canonical_json

    return ResourceDescriptor(
        name="metrics",
        content=base64.b64encode(canonical_json(dict(metrics))).decode("ascii"),
        media_type="application/json",
        annotations=dict(metrics),
    )


def record_checkpoint(
    ledger: LedgerHome,
    files: Mapping[str, Path | FileDigest],
    start: RunStart,
    admission: Admission,
    *,
    build_type: str,
    external: Mapping[str, Any],
    dependencies: Sequence[ResourceDescriptor],
    byproducts: Sequence[ResourceDescriptor] = (),
    name: str,
    version: str,
    settled: Settled | None = None,
) -> Recorded:
    """Record checkpoint files with their SLSA provenance, signed by the run's trainer key.

    The provenance: ``externalParameters`` = name, version, dataset, purpose and ``external``;
    ``internalParameters`` = the policy's digest, Python and trajledger versions;
    ``resolvedDependencies`` = `lineage_dependencies` then ``dependencies``; the run's
    invocation id and times; ``byproducts``. Subjects: the manifest digest (``NAME@VERSION``),
    then each file's path and sha256. Before the files are stored, and again under the log's
    lock, the rules are judged again (`check_still_admitted`); under the lock, the name must
    still be free (another run may have taken it). ``settled``: the outputs as listed, each
    checked as it is stored and all again under the lock (`runner.settled`).
    """
    from trajledger.ledger.record import record_files
    from trajledger.verify.policy import policy_digest

    provenance = Provenance(
        build_type=build_type,
        external_parameters={
            "name": name,
            "version": version,
            "dataset": admission.dataset,
            "purpose": admission.purpose,
            **external,
        },
        internal_parameters={
            "policy": policy_digest(start.policy),
            "python": platform.python_version(),
            "trajledger": _version(),
        },
        resolved_dependencies=(*lineage_dependencies(admission, start.parent), *dependencies),
        builder_id=BUILDER_ID,
        metadata={"invocationId": str(uuid.uuid4()), "startedOn": start.started,
                  "finishedOn": now()},
        byproducts=tuple(byproducts),
    ).to_predicate()
    def still_free_and_admitted(_size: int) -> None:
        # Under the log's lock: another run may have taken the name, or the rules changed.
        check_name_free(ledger, name, version)
        check_still_admitted(ledger, start, admission)
        if settled is not None:
            settled.check()

    from trajledger.ledger.catalog import imported_under

    imported = imported_under(ledger, "checkpoint", name, version)  # (read before recording)
    try:
        # Judged before the files are stored (a refusal leaves no orphan in the store), and
        # again under the log's lock, just before the append.
        check_still_admitted(ledger, start, admission)
        recorded = record_files(
            ledger,
            files,
            start.signer,
            predicates.SLSA_PROVENANCE_V1,
            provenance,
            kind="checkpoint",
            name=f"{name}@{version}",
            inline_manifest=False,
            file_subjects=True,
            check=still_free_and_admitted,
            on_file=settled.stored if settled is not None else None,
            on_open=settled.opened if settled is not None else None,
        )
    except DataRefusedError as e:
        command = external.get("command")
        label = f"command: {shlex.join(command)}" if isinstance(command, list) else build_type
        _record_refusal(ledger, admission.dataset, label[:200], start.signer, e)
        raise
    from trajledger.ledger.catalog import NameClashWarning, taken_from

    for line in taken_from("checkpoint", name, version, recorded.digest, imported):
        warnings.warn(NameClashWarning(line), stacklevel=2)
    return recorded


def policy_in_force(ledger: LedgerHome, policy: TrustPolicy) -> TrustPolicy:
    """``policy`` followed again through the log's trust-policy records from the same start
    (the policy given or the log's first): a successor recorded since ``policy`` was loaded is
    in force for a record logged now, and judges it (rev13 finding 2)."""
    from trajledger.ledger.policy_state import current_policy

    anchor = policy.earlier[0][1] if policy.earlier else policy
    found = current_policy(ledger, anchor)
    return policy if found is None else found[1]


def check_still_admitted(ledger: LedgerHome, start: RunStart, admission: Admission) -> None:
    """Judge again, just before a checkpoint is appended, the rules its lineage is judged by.

    The gate admitted the data when the run started; a checkpoint's lineage is judged at its
    own log index and time. What changed during the run (a revocation or erasure of the
    dataset, a batch or the parent; the dataset held out; an approval expired; a key revoked;
    a successor policy with a higher threshold or a shorter approval age, judged as the policy
    in force now, `policy_in_force`) would make the recorded checkpoint fail verification from
    the start: the record is refused instead. Approvals must still hold `RECORDING_MARGIN`
    seconds from now (the entry time comes a moment later). The data's bytes are not hashed
    again: the run was handed the bytes the gate hashed, whatever the store holds now; their
    blobs must still be present.

    Raises:
        DataRefusedError: a rule no longer holds (nothing is recorded).
    """
    import datetime as dt

    from trajledger.verify.lineage import Edge, Node

    from .admission import refuse_erased
    from .verification import decide, ledger_verifier

    verifier = ledger_verifier(ledger, policy_in_force(ledger, start.policy), data="size")
    verifier.caller_hashes = frozenset({"rollout-batch"})  # (held in memory since the gate)
    verifier.now += dt.timedelta(seconds=RECORDING_MARGIN)  # (now, or the log's last time)
    from trajledger.ledger.catalog import qualified_name

    ref = qualified_name(ledger, admission.dataset_index, "dataset", admission.name,
                         admission.version, admission.dataset)  # (after a clash: out50)
    decision = Node(f"recording:{admission.dataset}", "admission",
                    name=f"recording a checkpoint trained on dataset {ref}")

    def walk() -> list[Edge]:
        node = verifier.artifact(admission.dataset, "dataset")
        verifier.dataset_use(decision, admission.dataset, None, purpose=admission.purpose)
        refuse_erased(verifier, decision, node)
        for b in admission.batches:
            refuse_erased(verifier, decision, verifier.artifact(b.digest, "rollout-batch"))
        edges = [Edge(decision.id, admission.dataset, "dataset")]
        if start.parent is not None:
            verifier.artifact(start.parent.digest, "checkpoint")
            edges.append(Edge(decision.id, start.parent.digest, "base-checkpoint"))
        return edges

    report = decide(verifier, decision, admission.dataset, walk)
    if not report.ok:
        from trajledger.ledger.catalog import named_report

        failures = named_report(ledger, report).failures()
        raise DataRefusedError(
            f"dataset {ref}: refused when the checkpoint was to be recorded (the rules changed "
            f"during the run), {len(failures)} problem(s); nothing was recorded\n"
            + "\n".join(failures),
            report,
        )


def train(
    ledger: LedgerHome,
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
    """Admit a dataset, train a plug-in on its verified bytes, record the checkpoint.

    Steps:
        1. Check the signer holds the trainer role, load the trainer, check its config (when
           the trainer can), resolve the parent and check the name is free, all before any
           data is read.
        2. Admit the dataset. On refusal: record one signed refusal naming every reason, and
           re-raise; nothing is trained.
        3. Train on the admitted tables (concatenated in the dataset's batch order): the bytes
           the gate hashed, parsed once and held in memory; the store is not read again.
        4. Record the checkpoint files with SLSA provenance (`record_checkpoint`): the trainer
           code digest and the dependency lock as dependencies, config and seed as external
           parameters, metrics as a byproduct.

    Raises:
        DataRefusedError: admission failed (a refusal record was appended).
        PolicyError: the signer is not a trainer of the policy.
        TrainingDataError: the admitted batches cannot be combined (different schemas).
    """
    from trajledger.ledger.progress import no_progress

    from .trainers import TrainingData, check_result, load_trainer

    # (1)
    trainer = load_trainer(trainer_name)
    check_config = getattr(trainer, "check_config", None)  # optional plug-in hook
    if callable(check_config):
        check_config(dict(config or {}))
    start = start_run(ledger, signer, policy, parent=parent, name=name, version=version)
    # (2)
    admission = admit_for_training(ledger, dataset_ref, start, trainer_name)
    ckpt_name = name or f"{admission.name}-{trainer_name}"
    ckpt_version = version or f"seed{seed}-{uuid.uuid4().hex[:8]}"
    try:  # a default name too, before training: an older dataset's name may be off the grammar
        check_name_free(ledger, ckpt_name, ckpt_version)
    except FormatError as e:
        raise FormatError(f"{e}; give --name and --version" if name is None else str(e)) from e
    # (3)
    steps, episodes = admission_tables(admission)
    tables = TrainingData(steps, episodes, progress=ledger.progress or no_progress)
    result = trainer.train(tables, dict(config or {}), seed)
    check_result(trainer_name, result)
    # (4)
    deps = [
        ResourceDescriptor.of(f"trainer-code:{trainer_name}", trainer_code_digest(trainer),
                              role="trainer-code"),
        lock_descriptor("dependency-lock", environment_lock()),
    ]
    metrics = dict(result.metrics)
    with temp_dir(ledger.scratch) as tmp:
        files: dict[str, Path] = {}
        for rel, data in result.files.items():
            p = Path(tmp) / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            files[rel] = p
        recorded = record_checkpoint(
            ledger, files, start, admission, build_type=BUILD_TYPE,
            external={"trainer": trainer_name, "config": result.config, "seed": seed},
            dependencies=deps, byproducts=[metrics_byproduct(metrics)],
            name=ckpt_name, version=ckpt_version,
        )
    return TrainOutcome(recorded.digest, recorded.index, metrics, admission,
                        files=len(files), new=recorded.new)


def admission_tables(admission: Admission) -> tuple[Any, Any]:
    """The admitted step and episode tables, each concatenated in the dataset's batch order.

    Raises:
        TrainingDataError: the batches have different schemas.
    """
    import pyarrow as pa

    from .trainers import TrainingDataError

    try:
        steps = pa.concat_tables([b.steps for b in admission.batches], promote_options="none")
        episodes = pa.concat_tables([b.episodes for b in admission.batches], promote_options="none")
    except pa.ArrowInvalid as e:
        raise TrainingDataError(
            f"dataset {admission.name}@{admission.version}: its batches have different "
            f"schemas and cannot be trained on together: {e}"
        ) from e
    return steps, episodes


def train_command(
    ledger: LedgerHome,
    dataset_ref: str,
    argv: Sequence[str],
    signer: Signer,
    policy: TrustPolicy,
    *,
    name: str,
    version: str,
    parent: str | None = None,
    output: Path | None = None,
    keep_logs: bool = False,
    cwd: Path | None = None,
) -> TrainOutcome:
    """Admit a dataset, run COMMAND on its verified bytes, record what COMMAND wrote.

    Steps:
        1. Before any data is read: the command is given, the signer holds the trainer role,
           the parent resolves, ``name@version`` is free, ``output`` is absent or empty.
        2. Admit the dataset (a refusal is recorded and raised, as for `train`).
        3. In a `Workspace` (a temporary directory of the ledger): the verified bytes in a
           read-only data directory (`write_data_dir`), the parent checkpoint's files in
           another (when given), the output directory (``output``, else a new one).
        4. Note the source tree (git) and the Python environment's lock, then run COMMAND
           (`run_command`) with ``TRAJLEDGER_DATA_DIR``, ``TRAJLEDGER_OUTPUT_DIR`` (and
           ``TRAJLEDGER_PARENT_DIR``) set and the passphrase variable removed.
        5. A non-zero exit: `CommandFailedError`, nothing recorded.
        6. Re-hash the data (and parent) directory: any change is a `DataDirChangedError`,
           nothing recorded.
        7. Hash and store every output file (and, with ``keep_logs``, the two logs under
           ``trajledger-run/``) as the checkpoint, with SLSA provenance: the command line,
           source, locks (the environment's and one COMMAND left in its output), exit code,
           and the digests of stdout and stderr.
        8. Remove the temporary directories (a given ``output`` is kept).

    Raises:
        DataRefusedError: admission failed (a refusal record was appended).
        CommandFailedError: COMMAND exited non-zero or wrote no file.
        DataDirChangedError: COMMAND changed its data.
        CommandInterrupted: Ctrl-C, SIGTERM or SIGHUP (exit 130, 143, 129).
        LedgerError: COMMAND cannot be started, ``output`` is not empty, ``name@version`` is
            taken, an output file is a link.
    """
    from .command import run_command
    from .settled import Settled
    from .workdir import Workspace, write_data_dir

    # (1)
    if not argv:
        raise LedgerError("no command given: put it after '--' (trajledger train ... -- COMMAND)")
    workspace = Workspace(ledger.scratch, ledger.store, output=output)
    start = start_run(ledger, signer, policy, parent=parent, name=name, version=version)
    # (2)
    admission = admit_for_training(ledger, dataset_ref, start, f"command: {shlex.join(argv)}"[:200])
    with workspace as ws:
        # (3)
        described = {"name": admission.name, "version": admission.version,
                     "digest": admission.dataset, "logIndex": admission.dataset_index,
                     "purpose": admission.purpose}
        ws.add("TRAJLEDGER_DATA_DIR",
               lambda d: write_data_dir(d, ledger.store, described, admission.batches), "data")
        if start.parent is not None:
            parent_digest = start.parent.digest
            ws.add("TRAJLEDGER_PARENT_DIR",
                   lambda d: write_checkpoint_dir(ledger, parent_digest, d), "parent")
        # (4)
        workdir = cwd or Path.cwd()
        source = git_source(workdir)
        lock = environment_lock()
        started = time.time()
        result = run_command(argv, env=ws.environment(os.environ), cwd=workdir,
                             keep_logs=ws.logs if keep_logs else None)
        # (5)
        if result.returncode != 0:
            raise CommandFailedError(exit_message(argv, result.returncode) + ws.changed(),
                                     result.returncode)
        # (6)
        ws.check()
        # (7)
        files = ws.outputs()
        if not files:
            raise CommandFailedError(
                f"command {shlex.join(argv)!r} exited 0 but wrote no file in "
                f"$TRAJLEDGER_OUTPUT_DIR ({ws.output}): there is no checkpoint to record"
                + written_elsewhere(workdir, started, skip=ledger.root), 0)
        beside_output(workdir, started, files, skip=(ledger.root, ws.output),
                      given=output)
        # Refused with or without --keep-logs: a reader takes trajledger-run/ for trajledger's.
        clash = sorted(p for p in files if p.split("/")[0] == LOGS_DIR)
        if clash:
            raise LedgerError(
                f"the command wrote {clash[0]} in its output directory, where "
                f"--keep-logs puts the logs ({LOGS_DIR}/); nothing was recorded"
            )
        # As listed (before the lock COMMAND left is read): each file checked as it is stored.
        settled = Settled({**files, **(kept_logs(ws.logs) if keep_logs else {})},
                          kept_digests(result) if keep_logs else {}, ws.output)
        files = settled.files
        recorded = record_checkpoint(
            ledger, files, start, admission, build_type=COMMAND_BUILD_TYPE,
            external={"command": list(argv)},
            dependencies=environment_dependencies(source, lock, files),
            byproducts=run_byproducts(result), name=name, version=version, settled=settled,
        )
        # (8) on leaving: the inputs and the temporary directory are removed
    return TrainOutcome(recorded.digest, recorded.index, {}, admission, result, len(files),
                        recorded.new)


def exit_message(argv: Sequence[str], code: int) -> str:
    """``command '...' exited with code N`` (or was killed by a signal); nothing recorded."""
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    return f"command {shlex.join(argv)!r} {how}; nothing was recorded"


def write_checkpoint_dir(ledger: LedgerHome, digest: str, dest: Path) -> Any:
    """The parent checkpoint's files, verified, in a read-only directory (`write_tree`)."""
    from trajledger.verify.manifest import Manifest
    from trajledger.verify.strict_json import load_object

    from .workdir import TreeFile, write_tree

    manifest = Manifest.from_json(load_object(ledger.store.get_verified(digest), "manifest"))
    return write_tree(dest, ledger.store,
                      [TreeFile(f.path, f.digest, f.size) for f in manifest.files])


def kept_logs(logs: Path) -> dict[str, Path]:
    """The kept logs by manifest name (``--keep-logs``)."""
    return {f"{LOGS_DIR}/{s}.log": logs / f"{s}.log" for s in ("stdout", "stderr")}


def kept_digests(result: CommandResult) -> dict[str, str]:
    """The digests the kept logs must have: those of the streams as they came (the
    provenance's byproducts state them)."""
    return {f"{LOGS_DIR}/stdout.log": result.stdout.digest,
            f"{LOGS_DIR}/stderr.log": result.stderr.digest}


def run_byproducts(result: CommandResult) -> list[ResourceDescriptor]:
    """A command's run as descriptors: the exit code, and the digests of stdout and stderr
    (their text only in kept logs)."""
    out = [
        ResourceDescriptor(
            name="exit-code",
            content=base64.b64encode(str(result.returncode).encode()).decode("ascii"),
            media_type="text/plain",
            annotations={"exitCode": result.returncode},
        )
    ]
    for stream, d in (("stdout", result.stdout), ("stderr", result.stderr)):
        annotations: dict[str, Any] = {"size": d.size}
        if d.kept is not None:
            annotations["file"] = f"{LOGS_DIR}/{stream}.log"
        out.append(ResourceDescriptor(name=stream, digest={"sha256": d.digest[7:]},
                                      media_type="text/plain", annotations=annotations))
    return out


def environment_dependencies(
    source: GitSource | None, lock: bytes, files: Mapping[str, Path]
) -> list[ResourceDescriptor]:
    """Source tree, this environment's lock, and a lock the command left in its output."""
    deps: list[ResourceDescriptor] = []
    if source is not None:
        deps.append(source.descriptor())
    deps.append(lock_descriptor("python-environment", lock))
    deps.extend(command_lock(files))
    return deps


def _record_refusal(
    ledger: LedgerHome, dataset_ref: str, trainer_name: str, signer: Signer, error: DataRefusedError
) -> None:
    """Append the signed refusal record; a failure to write it is noted on ``error``."""
    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.record import record_statement
    from trajledger.ledger.same_second import recorded_anew
    from trajledger.verify.errors import ProvenanceError

    def record(when: str) -> Recorded:
        failures = tuple(error.report.failures()[:50] or [str(error)])
        refusal = Refusal(item.digest, trainer_name, failures, when)
        return record_statement(ledger, item.ref, item.digest, predicates.REFUSAL,
                                refusal.to_predicate(), signer)

    try:
        item = Catalog(ledger).resolve(dataset_ref, {"dataset"})
        recorded_anew(record, now)  # (each refused run: one in the same second too, rev40)
    except ProvenanceError as e:
        # The refusal stands either way; say that its record is missing.
        error.args = (f"{error}\nthe refusal could not be recorded: {e}",)


def _version() -> str:
    try:
        return importlib.metadata.version("trajledger")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def checkpoint_files(ledger: LedgerHome, ref: str) -> tuple[Any, dict[str, bytes]]:
    """A recorded checkpoint's catalog item and files, each checked against its digest."""
    from trajledger.ledger.artifacts import batch_files
    from trajledger.ledger.catalog import Catalog

    item = Catalog(ledger).resolve(ref, {"checkpoint"})
    files = {
        path: ledger.store.get_verified(d) for path, d in batch_files(ledger, item.digest).items()
    }
    return item, files


def copy_checkpoint_files(ledger: LedgerHome, ref: str, dest: Path) -> list[str]:
    """Write a recorded checkpoint's files, each checked against its digest, into ``dest``
    (new or empty; ``train --output`` with a trainer plug-in): plain copies the user may
    change, never links into the store.

    Returns:
        The files' paths, as the manifest names them.

    Raises:
        LedgerError: ``dest`` is not a new or empty directory.
    """
    from trajledger.ledger.fs import write_file_atomic
    from trajledger.verify.manifest import check_path

    from .workdir import check_output_dir

    check_output_dir(dest)
    _item, files = checkpoint_files(ledger, ref)
    dest.mkdir(exist_ok=True)
    for path, data in files.items():
        target = dest / check_path(path, f"file name {path!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(target, data, output=True)
    return sorted(files)


REFUSED_ROLLOUT: Final = "nothing was played or recorded"
"""How a refused `rollout` ends its first line."""


def rollout(
    ledger: LedgerHome,
    checkpoint_ref: str,
    env: str,
    episodes: int,
    signer: Signer,
    trust: TrustPolicy,
    *,
    seed: int = 0,
    max_steps: int | None = None,
    allow_env_modules: Sequence[str] = (),
) -> tuple[Any, float]:
    """Play a checkpoint's policy and record the episodes as a batch.

    The checkpoint's lineage and the environment's must verify under ``trust`` before anything
    is played (`check_lineage`): the batch names both, and would fail with them. They are
    judged again under the log's lock when another writer appended meanwhile (a revocation
    while the episodes were played): refused then, the batch's blobs are left for ``gc``.

    ``env`` is a registered environment (NAME@VERSION or digest) or a Gymnasium id that a
    registered environment names (the newest such registration is used). The module part of
    an imported record's Gymnasium id is refused unless ``allow_env_modules`` names it
    (`check_env_module`).

    Returns:
        The `BatchResult` and the mean return.

    Raises:
        RefError: no such checkpoint or environment.
        DataRefusedError: the checkpoint's or the environment's lineage fails.
        PolicyError: an imported environment's Gymnasium id names a module not allowed.
    """
    from trajledger.ledger.artifacts import record_batch
    from trajledger.ledger.catalog import Catalog, RefError
    from trajledger.ledger.suggestions import did_you_mean, suggest

    from .rollouts import run_policy
    from .trainers import load_policy

    catalog = Catalog(ledger)
    item = catalog.resolve(checkpoint_ref, {"checkpoint"})
    since = ledger.log.size  # (judged again under the log's lock if it grew: `judged_again`)
    check_lineage(ledger, trust, item, "checkpoint", REFUSED_ROLLOUT)
    _item, files = checkpoint_files(ledger, item.digest)
    try:
        policy = load_policy(files)
    except FormatError as e:  # out51: a COMMAND's checkpoint, as eval's refusal says it
        raise FormatError(f"checkpoint {item.ref}: 'rollout' plays policies of the built-in "
                          f"trainers only ({e}); record your own policy's episodes with "
                          "LedgerRecorder, or write them to files and 'trajledger record' them "
                          "(docs/recording.md)") from e
    try:
        env_item = catalog.resolve(env, {"environment"})
        gym_id = _env_gym_id(ledger, env_item.envelope) or env
    except RefError as e:
        registered = {i: _env_gym_id(ledger, i.envelope) for i in catalog.by_kind("environment")}
        envs = [i for i, gym in registered.items() if gym == env]
        if not envs:
            if not e.unknown and not e.suggestions:  # a missing version, another kind
                raise
            names = {i.ref: i.ref for i in registered} | {g: g for g in registered.values() if g}
            close = suggest(env, names) or list(e.suggestions)
            what = f"{env}: no registered environment has this name or Gymnasium id"
            if close:
                raise RefError(f"{what}; {did_you_mean(close)}", suggestions=close) from None
            gym = "ID" if "@" in env else env
            raise RefError(
                f"{what}; register it with 'trajledger env register NAME --version V --gym-id "
                f"{gym}'", unknown=True,
            ) from None
        env_item, gym_id = envs[-1], env
    check_env_module(ledger, env_item.index, gym_id, allow_env_modules,
                     f"environment {env_item.ref}")
    check_lineage(ledger, trust, env_item, "environment", REFUSED_ROLLOUT)

    def again(size: int) -> None:
        if size != since:  # another writer appended while this one checked or played
            for it, what in ((item, "checkpoint"), (env_item, "environment")):
                check_lineage(ledger, trust, it, what, "the episodes played were not recorded")

    result = run_policy(policy, gym_id, episodes, seed, max_steps=max_steps,
                        policy_version=item.digest)
    batch = record_batch(ledger, result.steps, episodes=result.episodes, env=env_item.digest,
                         policy=item.digest, signer=signer,
                         name=f"rollouts-{item.ref}-seed{seed}", generator="trajledger rollout",
                         check=again)
    return batch, float(result.mean_return)


def check_env_module(
    ledger: LedgerHome, index: int, gym_id: str, allowed: Sequence[str], what: str
) -> None:
    """Refuse a Gymnasium id ``MODULE:ID`` (``gymnasium.make`` imports ``MODULE``) in the
    environment record at log index ``index`` when an import brought it (`Origins.imported`),
    unless ``allowed`` names ``MODULE``: a vendor's record would choose code to run here (any
    installed module, or a ``.py`` in the working directory). This ledger's own records are
    the user's own choice, and pass.

    Raises:
        PolicyError: imported, with a module part not in ``allowed`` (exit 1).
    """
    from trajledger.ledger.catalog import Origins

    module, colon, _name = gym_id.partition(":")
    if not colon or module in allowed:
        return
    origins = Origins(ledger)
    if not origins.imported(index):
        return
    where = ", ".join(origins.names(index)) or "another log"
    raise PolicyError(
        f"{what} (imported from {where}): its Gymnasium id {gym_id!r} would import the Python "
        f"module {module!r}; refused, nothing was run: a record from another origin does not "
        f"choose code to run here. If you trust that module, pass --allow-env-module {module}"
    )


def _env_gym_id(ledger: LedgerHome, envelope: str) -> str | None:
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.errors import ProvenanceError
    from trajledger.verify.statement import Statement

    try:
        p = Statement.from_bytes(Envelope.from_bytes(ledger.store.get(envelope)).payload).predicate
    except ProvenanceError:
        return None
    value = p.get("gymnasiumId")
    return str(value) if value else None
