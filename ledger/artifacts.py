"""The artifacts RL teams record every day: environments, evaluators, rollout batches, datasets.

Scope: build each artifact's files and predicate, check what must hold before it is recorded
(a batch's environment and evaluator are registered; a dataset's batches exist and are in no
other split), and record it through `ledger.record` (signed, stored, logged).
Non-scope: approvals, revocations and erasures (``ledger.status``), checkpoints (``runner``).

Bad input leaves the ledger as it was: every check runs before the first blob is stored, and
rollout data is validated completely while it is written to a private temporary directory.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verify import predicates
from verify.errors import FormatError, PolicyError

from .catalog import Catalog, CatalogItem
from .errors import LedgerError
from .files import collect_files
from .keys import Signer
from .models import (
    ArtifactRef,
    DatasetPredicate,
    EnvironmentPredicate,
    EvaluatorPredicate,
    RolloutBatchPredicate,
)
from .record import Recorded, record_files

if TYPE_CHECKING:
    import pyarrow as pa

    from .home import Ledger

__all__ = [
    "BatchResult",
    "DatasetResult",
    "create_dataset",
    "record_batch",
    "register_environment",
    "register_evaluator",
]

GENERATOR = "trajledger"


def _model(cls: type[Any], **fields: Any) -> dict[str, Any]:
    from pydantic import ValidationError

    try:
        out: dict[str, Any] = cls(**fields).to_json()
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}" for err in e.errors()
        )
        raise FormatError(f"{cls.__name__.removesuffix('Predicate').lower()}: {problems}") from e
    return out


def _refuse_existing(catalog: Catalog, kind: str, name: str, version: str) -> None:
    for item in catalog.by_kind(kind):
        if item.name == name and item.version == version:
            raise PolicyError(
                f"{kind} {name}@{version}: already recorded as {item.digest} (log index "
                f"{item.index}); versions are immutable, record a new version"
            )


def _descriptor(tmp: Path, name: str, body: Mapping[str, Any]) -> dict[str, Path]:
    path = tmp / name
    path.write_bytes(json.dumps(body, sort_keys=True, indent=2).encode() + b"\n")
    return {name: path}


def register_environment(
    ledger: Ledger,
    name: str,
    version: str,
    signer: Signer,
    *,
    files: Sequence[Path] = (),
    source: str | None = None,
    gymnasium_id: str | None = None,
    rules: Path | None = None,
) -> Recorded:
    """Record an environment version: its files (code, config, rules) and metadata.

    With no files, a descriptor ``environment.json`` (name, version, source, Gymnasium id and
    the installed Gymnasium version) is recorded, so every environment has content to address.

    Raises:
        PolicyError: NAME@VERSION is already recorded.
        FormatError / LedgerError: bad metadata or unreadable files.
    """
    catalog = Catalog(ledger)
    _refuse_existing(catalog, "environment", name, version)
    rules_digest = None
    if rules is not None:
        from verify.digest import hash_file

        try:
            rules_digest = hash_file(rules).digest
        except OSError as e:
            raise LedgerError(f"{rules}: cannot read: {e.strerror}") from e
    predicate = _model(
        EnvironmentPredicate,
        name=name,
        version=version,
        source=source,
        rules_digest=rules_digest,
        gymnasium_id=gymnasium_id,
    )
    with tempfile.TemporaryDirectory(dir=_tmp_root(ledger)) as tmp:
        if files or rules:
            found = collect_files([*files, *([rules] if rules else [])])
        else:
            body: dict[str, Any] = {"name": name, "version": version}
            if source:
                body["source"] = source
            if gymnasium_id:
                import gymnasium

                body["gymnasium"] = {"id": gymnasium_id, "version": gymnasium.__version__}
            found = _descriptor(Path(tmp), "environment.json", body)
        return record_files(
            ledger, found, signer, predicates.ENVIRONMENT, predicate, name=f"{name}@{version}"
        )


def register_evaluator(
    ledger: Ledger,
    name: str,
    version: str,
    kind: str,
    signer: Signer,
    *,
    model_id: str | None = None,
    rubric: Path | None = None,
    prompt: Path | None = None,
    files: Sequence[Path] = (),
) -> Recorded:
    """Record an evaluator version (deterministic checks, an LLM judge, or human raters).

    Raises:
        PolicyError: NAME@VERSION is already recorded.
        FormatError: an unknown kind; an LLM judge without a model id.
    """
    if kind == "llm-judge" and not model_id:
        raise FormatError(f"evaluator {name}@{version}: an llm-judge needs --model")
    catalog = Catalog(ledger)
    _refuse_existing(catalog, "evaluator", name, version)
    from verify.digest import hash_file

    digests: dict[str, str | None] = {"rubric_digest": None, "prompt_digest": None}
    for key, path in (("rubric_digest", rubric), ("prompt_digest", prompt)):
        if path is not None:
            try:
                digests[key] = hash_file(path).digest
            except OSError as e:
                raise LedgerError(f"{path}: cannot read: {e.strerror}") from e
    predicate = _model(
        EvaluatorPredicate, name=name, version=version, kind=kind, model_id=model_id, **digests
    )
    extra = [p for p in (rubric, prompt) if p is not None]
    with tempfile.TemporaryDirectory(dir=_tmp_root(ledger)) as tmp:
        if files or extra:
            found = collect_files([*files, *extra])
        else:
            found = _descriptor(
                Path(tmp),
                "evaluator.json",
                {"name": name, "version": version, "kind": kind, "modelId": model_id},
            )
        return record_files(
            ledger, found, signer, predicates.EVALUATOR, predicate, name=f"{name}@{version}"
        )


def _tmp_root(ledger: Ledger) -> Path:
    root = ledger.root / "tmp"
    root.mkdir(exist_ok=True)
    return root


@dataclass(frozen=True)
class BatchResult:
    """A recorded rollout batch."""

    recorded: Recorded
    stats: dict[str, Any]
    environment: CatalogItem
    evaluator: CatalogItem | None


def record_batch(
    ledger: Ledger,
    source: Sequence[Path] | pa.Table | Sequence[Mapping[str, Any]],
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
) -> BatchResult:
    """Record a rollout batch from files (streamed), an Arrow table, or Python rows.

    Steps:
        1. Resolve the environment (and evaluator) references: each must be registered.
        2. Stream the input through validation into ``steps.parquet`` and ``episodes.parquet``
           in a private temporary directory (zstd, BYTE_STREAM_SPLIT floats); every problem is
           reported with its row and column, and nothing reaches the ledger on failure.
        3. Record both files with the rollout-batch predicate (refs, policy version, seeds,
           counts, summary statistics, consent / licence / retention).

    Raises:
        RefError / PolicyError: an unregistered environment or evaluator.
        RolloutValidationError: the data is invalid (every problem listed).
    """
    from .rollouts import iter_rollout_chunks, rows_to_table, write_steps_parquet

    # (1)
    catalog = Catalog(ledger)
    env_item = _registered(catalog, env, "environment")
    eval_item = _registered(catalog, evaluator, "evaluator") if evaluator else None
    # (2)
    with tempfile.TemporaryDirectory(dir=_tmp_root(ledger)) as tmp:
        steps_path, episodes_path = Path(tmp) / "steps.parquet", Path(tmp) / "episodes.parquet"
        chunks = _chunks(source, episodes, fmt, rows_to_table, iter_rollout_chunks, on_chunk)
        subject = ", ".join(str(p) for p in source) if _is_paths(source) else "rollouts"
        stats = write_steps_parquet(
            chunks, steps_path, episodes_path=episodes_path, subject=subject
        )
        summary = stats.summary()
        # (3)
        counts = {"steps": stats.num_steps, "episodes": stats.num_episodes}
        predicate = _model(
            RolloutBatchPredicate,
            schema_version=_schema_version(),
            environment=ArtifactRef(
                name=env_item.name, version=env_item.version, digest=env_item.digest
            ),
            evaluator=(
                ArtifactRef(name=eval_item.name, version=eval_item.version, digest=eval_item.digest)
                if eval_item
                else None
            ),
            policy_version=policy,
            generator=generator,
            seeds=[s for s in stats.seeds if -(2**53) < s < 2**53],
            counts=counts,
            stats={k: v for k, v in summary.items() if isinstance(v, int | float) or v is None},
            consent=consent,
            licence=licence,
            retention=retention,
        )
        label = name or f"rollouts-{env_item.ref}-{policy}"
        recorded = record_files(
            ledger,
            {"steps.parquet": steps_path, "episodes.parquet": episodes_path},
            signer,
            predicates.ROLLOUT_BATCH,
            predicate,
            name=label,
        )
    return BatchResult(recorded, summary, env_item, eval_item)


def _is_paths(source: Any) -> bool:
    return isinstance(source, list | tuple) and bool(source) and isinstance(source[0], str | Path)


def _schema_version() -> str:
    from .rollouts import ROLLOUT_SCHEMA_VERSION

    return str(ROLLOUT_SCHEMA_VERSION)


def _registered(catalog: Catalog, ref: str, kind: str) -> CatalogItem:
    from .catalog import RefError

    try:
        return catalog.resolve(ref, {kind})
    except RefError as e:
        raise PolicyError(
            f"{kind} {ref}: not registered; register it first with 'trajledger "
            f"{'env' if kind == 'environment' else kind} register' ({e})"
        ) from e


def _chunks(
    source: Any,
    episodes: Any,
    fmt: str | None,
    rows_to_table: Callable[..., Any],
    iter_rollout_chunks: Callable[..., Any],
    on_chunk: Callable[[int], None] | None,
) -> Iterable[Any]:
    """The input as a stream of record batches / chunks (episode attributes with the first)."""
    import pyarrow as pa

    from .rollouts import RolloutChunk

    if isinstance(source, pa.Table) or (
        source and isinstance(source, Sequence) and isinstance(source[0], Mapping)
    ):
        table = source if isinstance(source, pa.Table) else rows_to_table(list(source))
        if episodes is not None and not isinstance(episodes, pa.Table):
            raise FormatError("with steps given as a table, give episodes as a table too")
        items: Iterable[Any] = (
            RolloutChunk(b, episodes if n == 0 else None) for n, b in enumerate(table.to_batches())
        )
    else:
        paths = [Path(p) for p in source]
        if not paths:
            raise LedgerError("no input files given")
        for p in paths:
            if not p.is_file():
                raise LedgerError(f"{p}: no such file")
        if isinstance(episodes, pa.Table):
            raise FormatError("with steps given as files, give episodes as a file too")

        def from_files() -> Iterable[Any]:
            for p in paths:
                yield from iter_rollout_chunks(p, fmt, episodes=episodes)

        items = from_files()
    for item in items:
        if on_chunk is not None:
            on_chunk(item.steps.num_rows)
        yield item


@dataclass(frozen=True)
class DatasetResult:
    """A recorded dataset and what was noticed while building it."""

    recorded: Recorded
    batches: tuple[CatalogItem, ...]
    duplicate_episodes: tuple[str, ...]


def create_dataset(
    ledger: Ledger,
    name: str,
    version: str,
    split: str,
    batch_refs: Sequence[str],
    signer: Signer,
    *,
    purpose: str = "train",
) -> DatasetResult:
    """Record a dataset: a named, versioned set of batches in one split.

    Steps:
        1. Resolve every batch; refuse NAME@VERSION already recorded.
        2. Refuse a batch already in a dataset of another split (train / holdout / regression
           must never share data).
        3. Find exact duplicate episodes across the member batches (reported, not refused).
        4. Record the dataset (its manifest lists one descriptor file, ``dataset.json``).

    Raises:
        PolicyError: a batch is in another split, or NAME@VERSION exists.
        RefError: a batch reference resolves to nothing or to several batches.
    """
    # (1)
    catalog = Catalog(ledger)
    _refuse_existing(catalog, "dataset", name, version)
    batches = [catalog.resolve(r, {"rollout-batch"}) for r in batch_refs]
    digests = sorted({b.digest for b in batches})
    predicate = _model(
        DatasetPredicate, name=name, version=version, split=split, purpose=purpose, batches=digests
    )
    # (2)
    conflicts = []
    for item in catalog.by_kind("dataset"):
        other = _dataset_predicate(ledger, item)
        if other is None or other.get("split") == split:
            continue
        shared = set(digests) & set(other.get("batches", []))
        for d in sorted(shared):
            conflicts.append(
                f"batch {d[:19]}… is already in {other.get('split')} dataset {item.ref} "
                f"({item.digest[:19]}…)"
            )
    if conflicts:
        raise PolicyError(f"dataset {name}@{version} ({split}): " + "; ".join(conflicts))
    # (3)
    duplicates = tuple(_duplicate_episodes(ledger, digests))
    # (4)
    with tempfile.TemporaryDirectory(dir=_tmp_root(ledger)) as tmp:
        found = _descriptor(
            Path(tmp),
            "dataset.json",
            {"name": name, "version": version, "split": split, "batches": digests},
        )
        recorded = record_files(
            ledger, found, signer, predicates.DATASET, predicate, name=f"{name}@{version}"
        )
    return DatasetResult(recorded, tuple(batches), duplicates)


def _dataset_predicate(ledger: Ledger, item: CatalogItem) -> dict[str, Any] | None:
    from verify.dsse import Envelope
    from verify.errors import ProvenanceError
    from verify.statement import Statement

    try:
        st = Statement.from_bytes(Envelope.from_bytes(ledger.store.get(item.envelope)).payload)
    except ProvenanceError:
        return None
    return st.predicate


def batch_files(ledger: Ledger, digest: str) -> dict[str, str]:
    """The ``{path: blob digest}`` of a recorded artifact, from its stored manifest."""
    from verify._json import load_object
    from verify.manifest import Manifest

    manifest = Manifest.from_json(load_object(ledger.store.get_verified(digest), "manifest"))
    return {f.path: f.digest for f in manifest.files}


def _duplicate_episodes(ledger: Ledger, batch_digests: Sequence[str]) -> Iterable[str]:
    """Episodes whose step content (obs, action, reward, flags) is identical across batches."""
    import io

    import pyarrow.parquet as pq

    from .rollouts.dedup import episode_fingerprints

    seen: dict[str, str] = {}
    for d in batch_digests:
        files = batch_files(ledger, d)
        if "steps.parquet" not in files:
            continue
        table = pq.read_table(io.BytesIO(ledger.store.get_verified(files["steps.parquet"])))
        for episode_id, fp in episode_fingerprints(table).items():
            if fp in seen and seen[fp] != f"{d}/{episode_id}":
                yield f"episode {episode_id} of batch {d[:19]}… duplicates {seen[fp]}"
            else:
                seen.setdefault(fp, f"{d[:19]}…/{episode_id}")
