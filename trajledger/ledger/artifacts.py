"""The artifacts RL teams record every day: environments, evaluators, rollout batches, datasets.

Scope: build each artifact's files and predicate, check what must hold before it is recorded
(a batch's environment and evaluator are registered; a dataset's batches exist and are in no
other split), and record it through `ledger.record` (signed, stored, logged).
Non-scope: approvals, revocations and erasures (``ledger.status``), checkpoints (``runner``).

Bad input leaves the ledger as it was: every check runs before the first blob is stored, and
rollout data is validated completely while it is written to a private temporary directory.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajledger.verify import predicates
from trajledger.verify.errors import FormatError, PolicyError
from trajledger.verify.kinds import name_version
from trajledger.verify.predicates import (
    CARD_PATH,
    SPLITS,
    ArtifactRef,
    Dataset,
    DatasetV2,
    Environment,
    Evaluator,
    FeaturesRef,
    RolloutBatch,
)
from trajledger.verify.sealed_files import Sealed

from .batch_features import FeatureRecorder
from .batch_features import batch_files as _files_of
from .catalog import Catalog, CatalogItem, Origins
from .episode_features import FEATURE_VERSION
from .errors import LedgerError
from .files import collect_files
from .fs import temp_dir
from .home import envelope_statement
from .keys import Signer
from .names import check_new
from .record import JudgedAgain, Recorded, judged_now, record_files
from .validate_files import check_inputs

if TYPE_CHECKING:
    import pyarrow as pa

    from trajledger.verify.digest import FileDigest
    from trajledger.verify.encryption_key import EncryptionKey
    from trajledger.verify.manifest import Manifest

    from .cards import ProducerCard
    from .home import LedgerHome
    from .progress import ProgressFactory
    from .rollouts.chunks import ReaderOptions

__all__ = [
    "BatchResult",
    "DatasetResult",
    "NamedLineages",
    "batch_files",
    "check_lineages",
    "create_dataset",
    "environment_spaces",
    "record_batch",
    "register_environment",
    "register_evaluator",
    "resolve_registered",
]

GENERATOR = "trajledger"


def _refuse_existing(catalog: Catalog, kind: str, name: str, version: str) -> None:
    # Looked up by name and version in the user's index (not a pass over every record). Only
    # this ledger's own records count: an imported one of that name is another origin's.
    check_new(catalog.ledger.trust_state(), kind, name, version)
    origins = Origins(catalog.ledger)
    for row in catalog.ledger.trust_state().by_name(name, version):
        if row.kind == kind and not origins.of(row.index):
            raise PolicyError(
                f"{kind} {name}@{version}: already recorded as {row.subject} (log index "
                f"{row.index}); versions are immutable, record a new version"
            )


def _still_free(ledger: LedgerHome, kind: str, name: str, version: str,
                then: Callable[[int], None] | None = None) -> Callable[[int], None]:
    """`_refuse_existing` again, as `record_files`' append check (under the log's lock): two
    writers that each found ``name@version`` free log one record of it, not two; then the
    caller's ``then``."""
    def check(size: int) -> None:
        _refuse_existing(Catalog(ledger), kind, name, version)
        if then is not None:
            then(size)
    return check


def _descriptor(tmp: Path, name: str, body: Mapping[str, Any]) -> dict[str, Path]:
    path = tmp / name
    path.write_bytes(json.dumps(body, sort_keys=True, indent=2).encode() + b"\n")
    return {name: path}


def register_environment(
    ledger: LedgerHome,
    name: str,
    version: str,
    signer: Signer,
    *,
    files: Sequence[Path] = (),
    source: str | None = None,
    gymnasium_id: str | None = None,
    rules: Path | None = None,
    observation_space: Mapping[str, Any] | None = None,
    action_space: Mapping[str, Any] | None = None,
    env_spec: Mapping[str, Any] | None = None,
) -> Recorded:
    """Record an environment version: its files (code, config, rules) and metadata.

    With no files, a descriptor ``environment.json`` (name, version, source, Gymnasium id and
    the installed Gymnasium version, the spaces and the spec) is recorded, so every environment
    has content to address. The spaces and spec (``ledger.rollouts.spaces``) go into the
    predicate too: with them, flattened observations and actions can be unflattened.

    Raises:
        PolicyError: NAME@VERSION is already recorded.
        FormatError / LedgerError: bad metadata or unreadable files.
    """
    catalog = Catalog(ledger)
    _refuse_existing(catalog, "environment", name, version)
    rules_digest = None
    if rules is not None:
        from trajledger.verify.digest import hash_file

        try:
            rules_digest = hash_file(rules).digest
        except OSError as e:
            raise LedgerError(f"{rules}: cannot read: {e.strerror}") from e
    predicate = Environment(
        name,
        version,
        source=source,
        rules_digest=rules_digest,
        gymnasium_id=gymnasium_id,
        observation_space=observation_space,
        action_space=action_space,
        env_spec=env_spec,
    ).written(f"environment {name}@{version}")
    listed: dict[str, os.stat_result] = {}  # (each file opened must be the one listed)
    with temp_dir(ledger.scratch) as tmp:
        if files or rules:
            found = collect_files([*files, *([rules] if rules else [])], listed)
        else:
            body: dict[str, Any] = {"name": name, "version": version}
            if source:
                body["source"] = source
            if gymnasium_id:
                import gymnasium

                body["gymnasium"] = {"id": gymnasium_id, "version": gymnasium.__version__}
            for key, value in (
                ("observationSpace", observation_space),
                ("actionSpace", action_space),
                ("envSpec", env_spec),
            ):
                if value is not None:
                    body[key] = value
            found = _descriptor(Path(tmp), "environment.json", body)
        return record_files(
            ledger, found, signer, predicates.ENVIRONMENT, predicate, name=f"{name}@{version}",
            check=_still_free(ledger, "environment", name, version), listed=listed,
        )


def environment_spaces(
    *, gymnasium_id: str | None = None, minari_dir: Path | None = None
) -> dict[str, Any]:
    """The spaces and spec to register an environment with, from Gymnasium or a Minari dataset.

    Args:
        gymnasium_id: make this environment (``gymnasium.make``) and describe it.
        minari_dir: read them from this Minari dataset's metadata (takes precedence).

    Returns:
        ``observation_space``, ``action_space`` and ``env_spec`` keyword arguments for
        `register_environment` (empty when neither source is given).

    Raises:
        LedgerError: the environment cannot be made, or the dataset cannot be read.
        FormatError: a space that cannot be described.
    """
    from .rollouts.spaces import SpaceError, space_to_json, spec_to_json

    try:
        if minari_dir is not None:
            from .rollouts.minari_io import dataset_spaces

            return dataset_spaces(minari_dir)
        if gymnasium_id is not None:
            import gymnasium

            try:
                env = gymnasium.make(gymnasium_id)
            except (gymnasium.error.Error, ImportError, TypeError, ValueError) as e:
                own = ("" if ":" in gymnasium_id or isinstance(e, ImportError) else
                       f", name the module of yours that registers it (--gym-id MODULE:"
                       f"{gymnasium_id}, run where Python finds MODULE)")  # out51
                raise LedgerError(
                    f"gymnasium environment {gymnasium_id!r} cannot be made ({e}); install its "
                    f"package{own}, or register without --gym-id"
                ) from e
            try:
                return {
                    "observation_space": space_to_json(env.observation_space),
                    "action_space": space_to_json(env.action_space),
                    "env_spec": spec_to_json(env.spec) if env.spec is not None else None,
                }
            finally:
                env.close()
    except SpaceError as e:
        raise FormatError(f"environment: {e}") from e
    return {}


def register_evaluator(
    ledger: LedgerHome,
    name: str,
    version: str,
    kind: str,
    signer: Signer,
    *,
    model_id: str | None = None,
    rubric: Path | None = None,
    prompt: Path | None = None,
    files: Sequence[Path] = (),
    calibration: str | None = None,
) -> Recorded:
    """Record an evaluator version (deterministic checks, an LLM judge, or human raters).

    ``calibration`` names the expert-labelled dataset the judge's agreement is measured on
    (``trajledger stats --judge NAME``).

    Raises:
        PolicyError: NAME@VERSION is already recorded.
        FormatError: an unknown kind; an LLM judge without a model id.
        RefError: ``calibration`` names no dataset.
    """
    if kind == "llm-judge" and not model_id:
        raise FormatError(f"evaluator {name}@{version}: an llm-judge needs --model")
    catalog = Catalog(ledger)
    _refuse_existing(catalog, "evaluator", name, version)
    calib = catalog.resolve(calibration, {"dataset"}) if calibration else None
    from trajledger.verify.digest import hash_file

    digests: dict[str, str | None] = {"rubric_digest": None, "prompt_digest": None}
    for key, path in (("rubric_digest", rubric), ("prompt_digest", prompt)):
        if path is not None:
            try:
                digests[key] = hash_file(path).digest
            except OSError as e:
                raise LedgerError(f"{path}: cannot read: {e.strerror}") from e
    predicate = Evaluator(
        name,
        version,
        kind,
        model_id=model_id,
        rubric_digest=digests.get("rubric_digest"),
        prompt_digest=digests.get("prompt_digest"),
        calibration=ArtifactRef(calib.name, calib.version, calib.digest) if calib else None,
    ).written(f"evaluator {name}@{version}")
    extra = [p for p in (rubric, prompt) if p is not None]
    listed: dict[str, os.stat_result] = {}
    with temp_dir(ledger.scratch) as tmp:
        if files or extra:
            found = collect_files([*files, *extra], listed)
        else:
            found = _descriptor(
                Path(tmp),
                "evaluator.json",
                {"name": name, "version": version, "kind": kind, "modelId": model_id},
            )
        return record_files(
            ledger, found, signer, predicates.EVALUATOR, predicate, name=f"{name}@{version}",
            check=_still_free(ledger, "evaluator", name, version), listed=listed,
        )


@dataclass(frozen=True)
class BatchResult:
    """A recorded rollout batch.

    Attributes:
        recorded: the batch digest (its manifest's), envelope digest and log index.
        stats: the summary statistics (`WriteStats.summary`).
        environment: the registered environment the batch names.
        evaluator: the registered evaluator, if any.
        warnings: lines to show the user (a sealed batch whose published sketches give its
            episodes back, `sealing.sparse_sketches`).
    """

    recorded: Recorded
    stats: dict[str, Any]
    environment: CatalogItem
    evaluator: CatalogItem | None
    warnings: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        """The batch digest, ``sha256:<hex>``."""
        return self.recorded.digest


def record_batch(
    ledger: LedgerHome,
    source: str | os.PathLike[str] | Sequence[Path | str] | pa.Table | Sequence[Mapping[str, Any]],
    *,
    env: str,
    policy: str,
    signer: Signer,
    evaluator: str | None = None,
    episodes: Path | pa.Table | None = None,
    fmt: str | None = None,
    name: str | None = None,
    consent: str | None = None,
    licence: str | None = None,
    retention: str | None = None,
    generator: str = GENERATOR,
    on_chunk: Callable[[int], None] | None = None,
    options: ReaderOptions | None = None,
    meta: Mapping[str, Any] | None = None,
    on_read: Callable[[int], None] | None = None,
    seal_to: Sequence[EncryptionKey] | None = None,
    failures_of: str | None = None,
    check: Callable[[int], None] | None = None,
) -> BatchResult:
    """Record a rollout batch from files (streamed), an Arrow table, or Python rows.

    Steps:
        1. Check the arguments; resolve the environment (and evaluator) references: each must
           be registered.
        2. Stream the input through validation into ``steps.parquet`` and ``episodes.parquet``
           in a private temporary directory (zstd, BYTE_STREAM_SPLIT floats), hashing both as
           they are written; every problem is reported with its row and column, and nothing
           reaches the ledger on failure. Episode ``env_version`` and ``policy_version`` left
           null by the input are filled with the environment digest and ``policy`` as the
           episode table is built.
        3. Build the predicate (refs, policy version, seeds, counts, summary statistics,
           consent / licence / retention, source format and metadata, spaces and spec). Refuse
           rollouts that were erased, and rollouts already recorded with other metadata (a
           batch digest names one record); with the same metadata, recording again is a no-op
           that returns the first record.
        4. Record both files with the rollout-batch predicate: moved into the store (not
           copied, not hashed again), signed, logged. With ``seal_to``, only their ciphertexts
           are stored (`ledger.sealing.seal_files`); the predicate binds them, with each
           episode's duplicate fingerprints.

    Args:
        ledger: the open ledger.
        source: an input file or several (Parquet, Arrow IPC, chat/TRL/verl JSONL; streamed),
            a step table, or one mapping per step (see ``schemas/rollout-inputs.md``).
        env: the registered environment: ``NAME@VERSION``, a digest or a unique prefix.
        policy: the policy / model version that acted (a checkpoint digest links lineage).
        signer: the producer key.
        evaluator: the registered evaluator, if the rollouts were scored by one.
        episodes: episode attributes: a Parquet/Arrow file with file inputs, a table with a
            table or rows (JSONL inputs carry their own).
        fmt: the input format (one of ``ledger.rollouts.FORMATS``); default detected per file.
        name: the batch's subject name; default ``rollouts-<env>-<policy>``.
        consent: consent basis of the data.
        licence: licence of the data.
        retention: retention rule, e.g. ``365d``.
        generator: what produced the batch (recorded in the predicate).
        on_chunk: called with the number of steps of each chunk read (progress).
        on_read: called with the bytes of the input files read so far, when the reader tells
            (JSON lines; progress over the files' sizes).
        options: reader choices the input cannot express (TRL reward weights or column).
        meta: what the caller knows about the whole batch: ``observationSpace``,
            ``actionSpace``, ``envSpec`` (``ledger.rollouts.spaces`` JSON); an input that
            states them too (a Minari dataset) must agree.
        seal_to: seal the batch to these X25519 keys (a holdout or regression suite; the
            policy's evaluator ``encryption_keys``): the store never holds its plaintext.
        failures_of: the evaluation whose failed episodes these are (``dataset create
            --from-failures``): a lineage edge to it.
        check: a precondition run under the log's lock just before the append
            (`record.record_files`); default `NamedLineages`: what the batch names (its
            environment, evaluator and generating checkpoint) must verify, now and again
            under the lock. A caller's own check replaces it (`runner.train.rollout`).

    Returns:
        The recorded batch, its statistics and the resolved references.

    Raises:
        PolicyError: an unregistered environment or evaluator, or one whose lineage fails (or
            the generating checkpoint's); the same rollouts erased, or already recorded with
            other metadata.
        RolloutValidationError: the data is invalid (every problem listed).
        FormatError: inconsistent arguments (episodes of the wrong kind, no rows, an empty
            policy).
        LedgerError: a missing input file; LogError: the log cannot be appended to.
    """
    from .index.rows import statement_of
    from .record_windows import Written, computed, given_features, kept
    from .rollouts import rows_to_table, write_steps_parquet
    from .rollouts.space_check import SpaceCheck

    # (1)
    if not policy:
        raise FormatError("rollout batch: the policy version is empty, want an id or digest")
    if isinstance(source, str | os.PathLike):
        source = [Path(source)]
    ledger.log.require_signer()  # a log that cannot be appended to fails before any work
    from .policy_state import check_signers  # (out59: as a key that may not sign: nothing stored)
    check_signers(ledger, "rollout-batch", [(signer.name, signer.keyid)], None)
    catalog = Catalog(ledger)
    env_item = _registered(catalog, env, "environment")
    eval_item = _registered(catalog, evaluator, "evaluator") if evaluator else None
    if check is None:  # (a caller's own ``check`` judged what the batch names: `rollout`)
        check = NamedLineages.judged(ledger, policy, env_item.digest,
                                     eval_item.digest if eval_item else None)
    if options is not None and options.workers > 1 and options.features is None:
        # The episode features and normalised text fingerprints computed by the reader's
        # workers, from the steps they map (record_windows.given_features).
        options = replace(options, features=given_features)
    subject = ", ".join(str(p) for p in source) if _is_paths(source) else "rollouts"
    # (2)
    with temp_dir(ledger.scratch) as tmp:
        if options is not None and options.workers > 1:  # their spills in the workdir (rec47)
            options = replace(options, spill=str(tmp))
        chunks = _counted(
            _chunks(source, episodes, fmt, rows_to_table, options, meta), on_chunk, on_read)
        steps_path, episodes_path = Path(tmp) / "steps.parquet", Path(tmp) / "episodes.parquet"
        recorder, written = FeatureRecorder(Path(tmp)), Written()
        declared = SpaceCheck(env_item.ref, getattr(statement_of(ledger, env_item.envelope),
                                                    "predicate", None) or {})
        stats = write_steps_parquet(
            chunks,
            steps_path,
            episodes_path=episodes_path,
            subject=subject,
            fill={"env_version": env_item.digest, "policy_version": policy},
            on_steps=declared.before(written.tee(recorder.add)) if declared else written.tee(
                recorder.add),
            on_features=written.given(recorder.given),
        )
        if declared:  # each episode's final observation too (rev37)
            declared.finals(episodes_path)
        features = recorder.finish(stats.steps_file.digest, steps_path)
        summary = stats.summary()
        found = dict(stats.meta)
        source_meta: dict[str, Any] = {k: found.pop(k) for k in ("formats", "minari") if k in found}
        # (3)
        predicate = RolloutBatch(
            schema_version=_schema_version(),
            environment=ArtifactRef(env_item.name, env_item.version, env_item.digest),
            evaluator=(
                ArtifactRef(eval_item.name, eval_item.version, eval_item.digest)
                if eval_item
                else None
            ),
            policy_version=policy,
            generator=generator,
            seeds=tuple(str(s) for s in summary["seeds"]),
            counts={"steps": stats.num_steps, "episodes": stats.num_episodes},
            stats={k: v for k, v in summary.items() if isinstance(v, int | float) or v is None},
            consent=consent,
            licence=licence,
            retention=retention,
            source=source_meta or None,
            observation_space=found.get("observationSpace"),
            action_space=found.get("actionSpace"),
            env_spec=found.get("envSpec"),
            # A sealed batch keeps no features file: its published fingerprints are its
            # features (SPEC, "Sealed suites").
            features=(FeaturesRef(features.digest, features.size, FEATURE_VERSION)
                      if seal_to is None else None),
        ).written("rollout-batch")
        files = {"steps.parquet": stats.steps_file, "episodes.parquet": stats.episodes_file}
        ciphertexts: dict[str, FileDigest] = {}
        label = name or f"rollouts-{env_item.ref}-{policy}"
        sparse = None
        if seal_to is not None:
            from .batch_features import decode_features, published_episodes
            from .sealing import seal_files, sparse_sketches
            from .text_fingerprint import normalised_of

            wrapped, ciphertexts = seal_files(_manifest_of(files).digest, files, seal_to,
                                              Path(tmp))
            # The features computed while recording, published: the same bytes a features
            # file would hold (and the gate computes from the plaintext), no second pass.
            chunk = decode_features(features.path.read_bytes(), stats.steps_file.digest)
            sealed = Sealed(wrapped, {p: (c.digest, c.size) for p, c in ciphertexts.items()},
                            published_episodes(chunk, normalised_of(steps_path)
                                               if "text" in chunk.modality else None),
                            FEATURE_VERSION)
            predicate = {**predicate, "sealed": sealed.to_json()}
            sparse = sparse_sketches(label, sealed.episodes)
        if failures_of is not None:
            predicate = {**predicate, "failuresOf": failures_of}
        predicate = RolloutBatch.from_predicate(predicate).written("rollout-batch")
        since = ledger.log.size  # (an erasure from here on is checked again under the lock)
        earlier = _refuse_recorded_otherwise(ledger, files, label, predicate)
        if earlier is not None:
            # The same record again: it keeps the first one's features file (or its lack of
            # one), so that the statement, and the record, are the same.
            predicate = {k: v for k, v in predicate.items() if k != "features"}
            if "features" in earlier:
                predicate["features"] = earlier["features"]
        # (4) (the train side's windows computed now, kept once committed: record_windows)
        windows = (computed(steps_path, features.path, stats.steps_file.digest, stats.num_steps,
                            written) if seal_to is None else None)
        holds = [c.digest for c in ciphertexts.values()]
        if predicate.get("features", {}).get("digest") == features.digest:
            ledger.store.adopt_file(features.path, features)
            holds.append(features.digest)
        for c in ciphertexts.values():
            ledger.store.adopt_file(c.path, c)
        recorded = record_files(
            ledger, files, signer, predicates.ROLLOUT_BATCH, predicate, name=label,
            store_files=seal_to is None, holds=holds, since=since, check=check,
        )
        kept(ledger, stats.steps_file.digest, windows)
    return BatchResult(recorded, summary, env_item, eval_item, (sparse,) if sparse else ())


def _manifest_of(files: Mapping[str, FileDigest]) -> Manifest:
    """The manifest `record_files` writes for files hashed as written."""
    from trajledger.verify.manifest import FileEntry, Manifest

    from .files import media_type_for

    return Manifest.from_files(
        [FileEntry(n, d.size, d.sha256, media_type_for(n)) for n, d in sorted(files.items())]
    )


def _refuse_recorded_otherwise(
    ledger: LedgerHome, files: Mapping[str, FileDigest], label: str, predicate: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    """Refuse rollouts that were erased, or that are recorded as a batch with other metadata.

    The files were hashed as they were written (the digests are needed to ask), and nothing is
    stored when this refuses: storing erased rollouts again would bring back the data an
    erasure deleted. The features file is derived data, not metadata: it is not compared.

    Returns:
        The predicate of the same record made earlier (the same rollouts and metadata), or
        None when there is none.
    """
    from trajledger.verify.log_entry import LogEntry

    manifest = _manifest_of(files)
    wanted = {"manifest": manifest.to_json(), **predicate}
    wanted.pop("features", None)
    entries = [
        (i, LogEntry.from_bytes(ledger.log.entry(i)))
        for i in ledger.log.find_subject(manifest.digest)
    ]
    for index, entry in entries:
        if entry.kind == "erasure":
            raise PolicyError(
                f"rollout batch {manifest.digest}: these rollouts were erased (log index "
                f"{index}); recording them again would restore erased data"
            )
    # The same files under other metadata (another policy, so another episodes table) make
    # another batch digest: a file whose blob an erasure deleted here is refused too. A blob
    # still stored (kept for another artifact that holds it) restores nothing.
    state = ledger.trust_state()
    for f in manifest.files:
        if ledger.store.exists(f.digest):
            continue
        for i in state.listing(f.digest):
            if (e := state.entry(i)) is not None and e.kind == "erasure":
                raise PolicyError(
                    f"rollout batch {manifest.digest}: {f.path}: these rollouts were erased "
                    f"(blob {f.digest[:19]}…, deleted by the erasure at log index {i}); "
                    "recording them again would restore erased data"
                )
    same: dict[str, Any] | None = None
    for index, entry in entries:
        if entry.kind != "rollout-batch":
            continue
        statement = envelope_statement(ledger, entry.envelope)
        theirs = dict(statement.predicate) if statement is not None else {}
        kept = theirs.pop("features", None)
        if statement is not None and theirs == wanted and statement.subjects[0].name == label:
            if same is None:  # the same record: recording again is idempotent
                same = {**theirs, **({"features": kept} if kept is not None else {})}
            continue
        differ = []
        if statement is not None:
            if statement.subjects[0].name != label:
                differ.append("name")
            differ += sorted(
                k
                for k in set(theirs) | set(wanted)
                if k != "manifest" and theirs.get(k) != wanted.get(k)
            )
            ref = f"as {statement.subjects[0].name!r} "
        else:
            ref = ""
        raise PolicyError(
            f"rollout batch {manifest.digest}: the same rollouts are already recorded at log "
            f"index {index} {ref}with other metadata ({', '.join(differ) or 'unreadable record'}); "
            f"a batch digest names one record: use that one ('trajledger show "
            f"{manifest.digest}' shows how it was recorded)"
        )
    return same


def _is_paths(source: Any) -> bool:
    return isinstance(source, list | tuple) and bool(source) and isinstance(source[0], str | Path)


def _schema_version() -> str:
    from .rollouts import ROLLOUT_SCHEMA_VERSION

    return str(ROLLOUT_SCHEMA_VERSION)


def resolve_registered(ledger: LedgerHome, ref: str, kind: str) -> CatalogItem:
    """Resolve a reference to a registered environment or evaluator.

    Args:
        ledger: the open ledger.
        ref: ``NAME@VERSION``, a digest or a unique digest prefix.
        kind: ``environment`` or ``evaluator``.

    Raises:
        RefError: nothing of that kind is recorded under ``ref`` (or several things are): an
            unknown reference is operational (exit 3), as everywhere.
    """
    return _registered(Catalog(ledger), ref, kind)


@dataclass(frozen=True)
class NamedLineages(JudgedAgain):
    """A batch's `check_lineages`, judged when made (`judged`) and again, as ``check`` under
    the log's lock, when the log grew since (`record.JudgedAgain`'s rule). A value rather
    than a closure, so that a Ray writer actor judges its workers' batches under its lock
    (`integrations.ray`)."""

    ledger: LedgerHome = field(repr=False)
    refs: tuple[str, str, str | None]  # (policy, environment, evaluator)
    since: int

    @classmethod
    def judged(cls, ledger: LedgerHome, policy: str, env: str,
               evaluator: str | None) -> NamedLineages:
        return judged_now(ledger, lambda since: cls(ledger, (policy, env, evaluator), since))

    def judge(self) -> None:
        check_lineages(self.ledger, *self.refs)


def check_lineages(ledger: LedgerHome, policy: str, env: str, evaluator: str | None) -> None:
    """What a batch names must verify under the policy in force (data sizes, not re-hashed),
    or the batch fails from its first day: ``policy``, the digest of a recorded checkpoint
    (the lineage links it as what generated the batch; ``rollout`` refuses to play it), the
    environment and the evaluator. A reference that names nothing recorded is left to
    `record_batch` (a policy that is no full digest names no checkpoint); with no policy
    recorded, nothing is checked.

    Raises:
        PolicyError: a lineage fails: ``KIND REF: its lineage fails, N problem(s); nothing was
            recorded``, then one line per problem, for each.
    """
    import re

    from trajledger.verify.lineage import LineageVerifier

    from .catalog import RefError
    from .evidence import ledger_evidence
    from .policy_state import current_policy

    found = current_policy(ledger)
    if found is None:
        return
    catalog, items = Catalog(ledger), []
    for ref, kind in ((policy, "checkpoint"), (env, "environment"), (evaluator, "evaluator")):
        if ref is None or (kind == "checkpoint" and not re.fullmatch(r"sha256:[0-9a-f]{64}", ref)):
            continue  # (a version that is not a digest names no checkpoint: `verify.kinds`)
        try:
            items.append(catalog.resolve(ref, {kind}))
        except RefError:
            continue
    if not items:
        return
    verifier = LineageVerifier(ledger_evidence(ledger), found[1], index=ledger.trust_state(),
                               data="size")
    problems: list[str] = []
    try:
        for item in items:
            failures = verifier.verify(item.digest).failures()
            if failures:
                problems += [f"{item.kind} {item.ref}: its lineage fails, {len(failures)} "
                             "problem(s); nothing was recorded", *failures]
    finally:
        verifier.close()
    if problems:
        raise PolicyError("\n".join(problems))


def _registered(catalog: Catalog, ref: str, kind: str) -> CatalogItem:
    from .catalog import RefError

    try:
        return catalog.resolve(ref, {kind})
    except RefError as e:
        if not e.unknown:  # another version, another kind, a close name: it says which
            raise
        raise RefError(
            f"{kind} {ref}: not registered; register it first with 'trajledger "
            f"{'env' if kind == 'environment' else kind} register' ({e})", unknown=True,
        ) from e


def _chunks(
    source: Any,
    episodes: Any,
    fmt: str | None,
    rows_to_table: Callable[..., Any],
    options: ReaderOptions | None,
    meta: Mapping[str, Any] | None,
) -> Iterator[Any]:
    """The input as a stream of chunks (episode attributes and the caller's metadata first).

    Arguments are checked here, before the stream starts: a missing file or inconsistent
    arguments fail before any work. Several files make one batch (`iter_batch_inputs`: default
    episode ids stay unique).
    """
    import pyarrow as pa

    from .rollouts import RolloutChunk, detect_format, iter_batch_inputs
    from .rollouts.schema import STEP_SCHEMA

    items: Iterable[Any]
    if isinstance(source, pa.Table) or (
        isinstance(source, Sequence)
        and not isinstance(source, str | bytes)
        and source
        and isinstance(source[0], Mapping)
    ):
        if episodes is not None and not isinstance(episodes, pa.Table):
            raise FormatError("with steps given as a table or rows, give episodes as a table too")
        table = source if isinstance(source, pa.Table) else rows_to_table(list(source))
        items = (
            RolloutChunk(b, episodes if n == 0 else None) for n, b in enumerate(table.to_batches())
        )
    elif isinstance(source, Sequence) and not isinstance(source, str | bytes):
        if not source:
            raise FormatError("rollout batch: no input given (no files, no rows)")
        if not all(isinstance(p, str | os.PathLike) for p in source):
            raise FormatError(
                "rollout batch: the input mixes files with other values; give file paths, a "
                "pyarrow Table, or one mapping per step"
            )
        paths = [Path(p) for p in source]
        check_inputs(paths)
        if isinstance(episodes, pa.Table):
            raise FormatError("with steps given as files, give episodes as a file too")
        if episodes is not None:
            if not Path(episodes).is_file():
                raise LedgerError(f"{episodes}: no such file")
            own = [
                p
                for p in paths
                if (fmt or detect_format(p)) not in ("parquet", "arrow", "arrow-stream",
                                                     "rollout-jsonl")
            ]  # fmt: skip
            if own:
                raise FormatError(
                    f"{own[0]}: this input carries its own episode attributes; --episodes is "
                    "for steps in the rollout schema (Parquet, Arrow, rollout JSON lines)"
                )
        items = iter_batch_inputs(paths, fmt, episodes=episodes, options=options)
    else:
        raise FormatError(
            f"rollout batch: input is a {type(source).__name__}, want file paths, a pyarrow "
            "Table, or one mapping per step (a pandas DataFrame: df.to_dict('records'))"
        )
    if meta:
        head = RolloutChunk(pa.RecordBatch.from_pylist([], schema=STEP_SCHEMA), None, dict(meta))
        items = itertools.chain([head], items)
    return iter(items)


def _counted(
    items: Iterable[Any],
    on_chunk: Callable[[int], None] | None,
    on_read: Callable[[int], None] | None,
) -> Iterator[Any]:
    for item in items:
        if on_chunk is not None:
            on_chunk(item.steps.num_rows)
        if on_read is not None and item.read is not None:
            on_read(item.read)
        yield item


@dataclass(frozen=True)
class DatasetResult:
    """A recorded dataset and what was noticed while building it.

    Attributes:
        recorded: the dataset digest, envelope digest and log index.
        batches: the member batches, distinct, in the order given.
        duplicate_episodes: one line per episode whose content equals an earlier member
            episode's (reported, not refused).
        near_duplicates: one line per episode that nearly duplicates an episode of a dataset
            of the other side (train vs holdout / regression), from the batches' kept
            episode features (reported, not refused, unless the policy in force says
            ``[contamination] refuse = "near"``; exact duplicates across splits are refused).
        warnings: one line per batch whose episodes could not all be compared (its data
            cannot be read) or whose kept features could not be used.
    """

    recorded: Recorded
    batches: tuple[CatalogItem, ...]
    duplicate_episodes: tuple[str, ...]
    near_duplicates: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        """The dataset digest, ``sha256:<hex>``."""
        return self.recorded.digest


def create_dataset(
    ledger: LedgerHome,
    name: str,
    version: str,
    split: str,
    batch_refs: Sequence[str],
    signer: Signer,
    *,
    purpose: str = "train",
    card: ProducerCard | None = None,
    progress: ProgressFactory | None = None,
    check: Callable[[int], None] | None = None,
) -> DatasetResult:
    """Record a dataset: a named, versioned set of batches in one split, with its card.

    Steps:
        1. Check the metadata; refuse NAME@VERSION already recorded; resolve every batch;
           with a card, check the policy in force accepts ``dataset/v2`` records.
        2. Refuse a batch already in a dataset of another split (train / holdout / regression
           must never share data). A dataset whose record cannot be read fails the check:
           its split is unknown, so sharing cannot be ruled out.
        3. Find exact duplicate episodes across the member batches (reported, not refused).
        4. Check contamination against the datasets of the other side (train vs holdout /
           regression) from the batches' episode features, kept with each batch since it was
           recorded (`contamination.check_dataset`; no audit index): an exact duplicate
           episode (byte for byte, or once its text is normalised) is refused (the same
           episode would be both trained on and held out); near duplicates are reported, or
           refused when the policy in force says ``[contamination] refuse = "near"`` (at its
           thresholds). The check is unverified: it can only add refusals, never
           admit anything (the admission gate checks again from verified bytes).
        5. Record the dataset: its manifest lists a descriptor file, ``dataset.json``, and
           with a card ``card.json`` (the card's canonical bytes), whose digest the
           ``dataset/v2`` predicate names (without a card, a ``dataset/v1`` predicate).
           Under the log's lock, NAME@VERSION must still be free, then ``check`` runs (the
           caller's, as `record.record_files`').

    Raises:
        PolicyError: a batch is in another split, an episode exactly duplicates one on the
            other side, NAME@VERSION exists, or the policy does not allow cards.
        FormatError: an unknown split, an empty name, version or batch list.
        RefError: a batch reference resolves to nothing or to several batches.
        LedgerError: a dataset record or a batch file cannot be read.
    """
    # (1)
    if not batch_refs:
        raise FormatError(f"dataset {name}@{version}: no member batches, want at least one")
    catalog = Catalog(ledger)
    _refuse_existing(catalog, "dataset", name, version)
    batches = list(
        {b.digest: b for b in (catalog.resolve(r, {"rollout-batch"}) for r in batch_refs)}.values()
    )
    digests = sorted(b.digest for b in batches)
    if split not in SPLITS:
        raise FormatError(
            f"dataset {name}@{version}: split {split!r}, want one of {', '.join(SPLITS)}"
        )
    if split == "train":
        statements = [(b, envelope_statement(ledger, b.envelope)) for b in batches]
        unknown = sorted(b.digest for b, st in statements if st is None)
        if unknown:  # a sealed batch's record would say so: fail closed (review lead26)
            raise LedgerError(
                f"dataset {name}@{version} (train): batch {unknown[0][:19]}…: its record's "
                "envelope is missing or damaged, so whether it is sealed is unknown; run "
                "'trajledger fsck' and repair the store"
            )
        sealed = [b for b, st in statements if st is not None and "sealed" in st.predicate]
        if sealed:
            raise PolicyError(
                f"dataset {name}@{version} (train): batch {sealed[0].digest[:19]}… is sealed "
                "(stored encrypted for evaluators): sealed batches belong in holdout or "
                "regression suites, never in training data"
            )
    if card is None:
        ptype = predicates.DATASET
        predicate = Dataset(name, version, split, tuple(digests), purpose).written(
            f"dataset {name}@{version}"
        )
    else:
        from .cards import check_policy_allows_cards

        check_policy_allows_cards(ledger, f"dataset {name}@{version}")
        ptype = predicates.DATASET_V2
        predicate = DatasetV2(name, version, split, tuple(digests), purpose,
                              card=card.digest).written(f"dataset {name}@{version}")
    # (2) The datasets listing these batches (through the index, not every dataset), and every
    # dataset whose envelope could not be read (it could list them).
    state = ledger.trust_state()
    unread = [i for i in state.unreadable() if (e := state.entry(i)) and e.kind == "dataset"]
    if unread:
        entry = state.entry(unread[0])
        assert entry is not None
        raise LedgerError(
            f"dataset {entry.subject} (log index {unread[0]}): its envelope {entry.envelope} "
            "cannot be read, so its split is unknown; repair the store before creating datasets"
        )
    conflicts = []
    holding = sorted({i for d in digests for i in state.listing(d)})
    for i in holding:
        entry = state.entry(i)
        if entry is None or entry.kind != "dataset":
            continue
        statement = envelope_statement(ledger, entry.envelope)
        if statement is None:
            raise LedgerError(
                f"dataset {entry.subject} (log index {i}): its envelope {entry.envelope} "
                "cannot be read, so its split is unknown; repair the store before creating "
                "datasets"
            )
        other = statement.predicate
        if other.get("split") == split:
            continue
        name_, version_ = name_version("dataset", statement)
        ref = f"{name_}@{version_}" if version_ else name_
        shared = sorted(set(digests) & set(other.get("batches") or []))
        if not shared:
            continue
        from .split_trust import untrusted_note  # the refusal path only: is it trusted here?

        why = untrusted_note(ledger, i, str(other.get("split")))
        conflicts += [f"batch {d} is already in {other.get('split')} dataset {ref} "
                      f"({entry.subject[:19]}…){why}" for d in shared]
    if conflicts:  # and the way on (out46 finding 8)
        raise PolicyError(f"dataset {name}@{version} ({split}): " + "; ".join(conflicts) + ": "
                          f"leave {'them' if len(conflicts) > 1 else 'it'} out (a batch is in "
                          f"one split), or record new rollouts for the {split} set")
    # (3) (4)
    from .contamination import check_dataset, refusal, ruled
    from .policy_state import contamination_rules

    rules = contamination_rules(ledger)
    if rules.unreadable:  # a recorded policy's threshold no one wrote: fail closed (left34)
        raise PolicyError(f"dataset {name}@{version} ({split}): {rules.refused()}")
    checked = check_dataset(ledger, split, digests, progress=progress,
                            thresholds=rules.thresholds())
    findings = ruled(checked.findings, rules)
    refused = refusal(f"dataset {name}@{version} ({split})", findings, rules)
    if refused is not None:  # whose copies: a distrusted holdout's too (left38)
        from .split_trust import held_notes

        raise PolicyError(refused + held_notes(ledger, split, {f.other_batch for f in findings}))
    near = tuple(str(f) for f in findings if f.kind != "exact")
    from .catalog import imported_under, taken_from

    imported = imported_under(ledger, "dataset", name, version)  # (read before recording)
    # (5)
    with temp_dir(ledger.scratch) as tmp:
        found = _descriptor(
            Path(tmp),
            "dataset.json",
            {"name": name, "version": version, "split": split, "batches": digests},
        )
        if card is not None:
            found[CARD_PATH] = Path(tmp) / CARD_PATH
            found[CARD_PATH].write_bytes(card.canonical_bytes())
        recorded = record_files(ledger, found, signer, ptype, predicate, name=f"{name}@{version}",
                                check=_still_free(ledger, "dataset", name, version, check))
    taken = taken_from("dataset", name, version, recorded.digest, imported)
    return DatasetResult(recorded, tuple(batches), checked.duplicates, near,
                         (*taken, *checked.warnings))


def batch_files(ledger: LedgerHome, digest: str) -> dict[str, str]:
    """The ``{path: blob digest}`` of a recorded artifact, from its stored manifest
    (`batch_features.batch_files`)."""
    return _files_of(ledger.store, digest)
