"""The audit index: LanceDB tables of every log entry and every episode, for audit questions.

Scope: a derived index under ``<ledger>/index/lance/`` with two tables, ``artifacts`` (one row
per log entry: kind, digest, name, version, time, signers, split, environment / evaluator /
policy of a batch, members of a dataset, datasets of a checkpoint, revoked / erased flags) and
``episodes`` (one row per episode of every indexed batch: the episode table's columns, an exact
content fingerprint and a feature vector for near-duplicate search). On it: SQL filters
(`query_table`), segmented statistics (`segment_stats`), duplicate episodes within a set of
batches (`duplicate_episodes`) and exact / near-duplicate checks between a train split and
holdout / regression splits (`contamination_findings`, `split_contamination`).

Kept up incrementally, off the recording path: `Index.update` adds the artifact rows of the log
entries after the last indexed size; a batch's episodes are indexed the first time a question
needs that batch (`Index.index_batches`), streamed row group by row group with vectorised
features (``ledger.episode_features``), so memory stays bounded and ``dataset create`` or a
contamination check never indexes unrelated batches. `Index.rebuild` (``trajledger reindex``)
drops and rebuilds everything from the log and the object store, with progress.

Non-scope: verification. NOTHING is verified against the index, and nothing it says is
evidence: it is built from unverified envelopes and data (a blob whose bytes do not hash to its
digest is skipped, not judged), it can be deleted or rebuilt at any time, and whoever can write
the ledger directory can write it. ``trajledger verify`` and the runner's admission gate check
the log and the objects themselves (the gate's contamination check is
`ledger.contamination.verified_contamination`, which reads re-hashed blobs). A contamination
finding is a reason to look (or to refuse); the absence of findings proves nothing.

Erasure: when an erasure is indexed, the batch's episode rows are deleted, so the index never
keeps derived copies of erased data; its artifact row stays, flagged ``erased``, and the batch
is never indexed again. A batch whose blobs are gone is indexed from its signed metadata alone.

Spec: docs/audit-index.md (tables, columns, metrics, the near-duplicate definition and its
thresholds). lancedb is imported only when an index is opened; ``trajledger --help`` never
loads it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import json
import math
import os
import re
import shutil
import tempfile
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import FormatError, ProvenanceError
from trajledger.verify.kinds import KINDS
from trajledger.verify.kinds import NAMED as NAMED_KINDS
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.merkle import leaf_hash
from trajledger.verify.predicates import (
    Approval,
    Dataset,
    Environment,
    Erasure,
    Evaluation,
    Evaluator,
    Predicate,
    Provenance,
    Refusal,
    Revocation,
    RolloutBatch,
    SealedEpisode,
)
from trajledger.verify.statement import Statement

from .catalog import Catalog, RefError
from .contamination import (
    MIN_NEAR_STEPS,
    NEAR_NUMERIC_THRESHOLD,
    NEAR_TEXT_THRESHOLD,
    Finding,
    Matcher,
)
from .episode_features import (
    FEATURE_COLUMNS,
    FEATURE_VERSION,
    VECTOR_DIM,
    FeatureChunk,
    iter_step_features,
    parquet_batches,
    private_workdir,
    verified_local_copy,
)
from .errors import LedgerError
from .fs import write_file_atomic
from .rollouts.success import batch_labels_success, episode_success

if TYPE_CHECKING:
    from .home import Ledger

__all__ = [
    "ARTIFACTS_SCHEMA",
    "EPISODES_SCHEMA",
    "JUDGE_PASS",
    "MIN_NEAR_STEPS",
    "NEAR_NUMERIC_THRESHOLD",
    "NEAR_TEXT_THRESHOLD",
    "VECTOR_DIM",
    "WARN_RELATIVE",
    "WARN_STANDARD_ERRORS",
    "Calibration",
    "EvaluationRow",
    "Finding",
    "Index",
    "IndexUpdate",
    "Metrics",
    "ProgressFactory",
    "QueryError",
    "Segment",
    "StatsReport",
    "contamination_findings",
    "duplicate_episodes",
    "query_table",
    "reindex",
    "segment_stats",
    "split_contamination",
]

INDEX_FORMAT = 2 * 100 + FEATURE_VERSION
"""Version of the tables and of the feature vectors; a change rebuilds every index
(202: batches indexed lazily, feature version 2)."""

JUDGE_PASS = 0.5
"""A judge score at or above this counts as the judge saying "success"."""

WARN_STANDARD_ERRORS = 2.0
WARN_RELATIVE = 0.2
"""A segment is flagged when its success rate or mean return is more than
`WARN_STANDARD_ERRORS` standard errors and at least `WARN_RELATIVE` (relative) below the
aggregate."""

ARTIFACTS = "artifacts"
EPISODES = "episodes"
SPLITS = ("train", "holdout", "regression")
PENDING = "pending"
"""``artifacts.data`` of a batch whose episodes are not indexed yet."""
_FLUSH_EPISODES = 50_000
_READ_ONLY_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)
"""Why an index directory cannot be written (then it is read in place, changed in a copy)."""
_ENTRY_CHUNK = 256
_UNUSABLE: tuple[type[BaseException], ...] = (
    ProvenanceError, LedgerError, pa.ArrowException, OSError, ValueError, TypeError, KeyError,
)  # fmt: skip

ARTIFACTS_SCHEMA = pa.schema(
    [
        pa.field("log_index", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("digest", pa.string(), nullable=False),
        pa.field("envelope", pa.string(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("version", pa.string()),
        pa.field("ref", pa.string()),
        pa.field("time", pa.string(), nullable=False),
        pa.field("signers", pa.list_(pa.string())),
        pa.field("split", pa.string()),
        pa.field("purpose", pa.string()),
        pa.field("expires", pa.string()),
        pa.field("env", pa.string()),
        pa.field("env_digest", pa.string()),
        pa.field("evaluator", pa.string()),
        pa.field("evaluator_digest", pa.string()),
        pa.field("policy_version", pa.string()),
        pa.field("num_episodes", pa.int64()),
        pa.field("num_steps", pa.int64()),
        pa.field("batches", pa.list_(pa.string())),
        pa.field("datasets", pa.list_(pa.string())),
        pa.field("reason", pa.string()),
        pa.field("revoked", pa.bool_(), nullable=False),
        pa.field("erased", pa.bool_(), nullable=False),
        pa.field("data", pa.string()),
        pa.field("episodes_indexed", pa.int64()),
    ]
)
"""One row per log entry. ``digest`` is the entry's subject; the flags describe that subject."""

EPISODES_SCHEMA = pa.schema(
    [
        pa.field("batch", pa.string(), nullable=False),
        pa.field("batch_index", pa.int64(), nullable=False),
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("task_id", pa.string()),
        pa.field("env_version", pa.string()),
        pa.field("policy_version", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("return", pa.float64()),
        pa.field("num_steps", pa.int64()),
        pa.field("termination_reason", pa.string()),
        pa.field("success", pa.bool_()),
        pa.field("judge_scores", pa.string()),
        pa.field("judge_score", pa.float64()),
        pa.field("cost_usd", pa.float64()),
        pa.field("language", pa.string()),
        pa.field("task_type", pa.string()),
        pa.field("invalid", pa.bool_()),
        pa.field("safety_interventions", pa.int64()),
        pa.field("modality", pa.string()),
        pa.field("fingerprint", pa.string()),
        pa.field("vector", pa.list_(pa.float32(), VECTOR_DIM)),
    ]
)
"""One row per episode of every indexed batch (docs/audit-index.md lists the meanings)."""

_SCALAR_EPISODE_COLUMNS = tuple(n for n in EPISODES_SCHEMA.names if n != "vector")


class QueryError(LedgerError):
    """A filter or column name the index cannot use (the CLI maps it to a usage error)."""


# --------------------------------------------------------------------------------------------
# Log entries -> rows


def _statement(ledger: Ledger, entry: LogEntry) -> Statement | None:
    try:
        return Statement.from_bytes(Envelope.from_bytes(ledger.store.get(entry.envelope)).payload)
    except ProvenanceError:
        return None  # unreadable or missing envelope: the row keeps what the entry says
    except LedgerError:
        return None


def _predicate_fields(pred: Predicate) -> dict[str, Any]:
    """The artifacts-row columns one typed predicate fills (`verify.predicates`)."""
    if isinstance(pred, Provenance):
        return {
            "name": pred.name,
            "version": pred.version,
            "purpose": pred.purpose,
            "datasets": sorted(d.sha256 for d in pred.dependencies("dataset") if d.sha256),
        }
    if isinstance(pred, RolloutBatch):
        ev = pred.evaluator
        return {
            "env": f"{pred.environment.name}@{pred.environment.version}",
            "env_digest": pred.environment.digest,
            "evaluator": f"{ev.name}@{ev.version}" if ev is not None else None,
            "evaluator_digest": ev.digest if ev is not None else None,
            "policy_version": pred.policy_version,
            "num_episodes": pred.counts.get("episodes"),
            "num_steps": pred.counts.get("steps"),
        }
    if isinstance(pred, Dataset):
        return {"name": pred.name, "version": pred.version, "split": pred.split,
                "purpose": pred.purpose, "batches": sorted(pred.batches)}
    if isinstance(pred, Environment | Evaluator):
        return {"name": pred.name, "version": pred.version}
    if isinstance(pred, Approval):
        return {"purpose": pred.purpose, "expires": pred.expires}
    if isinstance(pred, Revocation | Erasure):
        return {"reason": pred.reason}
    if isinstance(pred, Refusal):
        return {"reason": "; ".join(pred.reasons)}
    return {}


def _artifact_row(index: int, entry: LogEntry, st: Statement | None) -> dict[str, Any]:
    """The artifacts row of a log entry (a batch's episodes are indexed later, per batch).

    The predicate is read with its kind's typed reader (`verify.kinds`); one that does not
    read still gives a row (kind, digest, signers), so the record can be found and verified.
    """
    subject_name = st.subjects[0].name if st is not None and st.subjects else None
    row: dict[str, Any] = dict.fromkeys(ARTIFACTS_SCHEMA.names)
    row.update(
        log_index=index,
        kind=entry.kind,
        digest=entry.subject,
        envelope=entry.envelope,
        time=entry.time,
        signers=list(entry.signers),
        revoked=False,
        erased=False,
        name=subject_name,
    )
    if st is not None:
        with contextlib.suppress(FormatError):
            fields = _predicate_fields(KINDS[entry.kind].read(st, f"log entry {index}"))
            row.update({k: v for k, v in fields.items() if v is not None or k not in row})
            row["name"] = row["name"] or subject_name
    if entry.kind == "rollout-batch":
        row.update(data=PENDING, episodes_indexed=0)
    name, version = row["name"], row["version"]
    row["ref"] = f"{name}@{version}" if name and version else name
    return row


# --------------------------------------------------------------------------------------------
# A batch's episodes, streamed


class _Unusable(Exception):
    """A batch file that cannot be read, does not verify, or breaks the expected order."""


_UNUSABLE_BATCH: tuple[type[BaseException], ...] = (*_UNUSABLE, _Unusable)


def _judge_columns(ep: pa.Table) -> tuple[list[str | None], list[float | None]]:
    """The judge score map as sorted-key JSON text, and the mean of its scores."""
    n = ep.num_rows
    if "judge_scores" not in ep.column_names:
        return [None] * n, [None] * n
    texts: list[str | None] = []
    means: list[float | None] = []
    for scores in ep.column("judge_scores").to_pylist():
        items = dict(scores) if scores else {}
        texts.append(json.dumps(items, sort_keys=True) if scores is not None else None)
        means.append(sum(items.values()) / len(items) if items else None)
    return texts, means


def _episode_table(
    ep: pa.Table, row: Mapping[str, Any], features: Any | None, labels_success: bool
) -> pa.Table:
    """Episode rows of a chunk of ``episodes.parquet`` with the aligned step features (a
    `FeatureChunk` of the same episodes in the same order), or None when the steps are
    unusable. ``labels_success``: whether the whole batch labels success."""
    n = ep.num_rows
    names = set(ep.column_names)

    def col(name: str, fill: str | None = None) -> Any:
        if name not in names:
            return [fill] * n
        c = ep.column(name)
        return c.fill_null(fill) if fill is not None else c

    judge_json, judge_mean = _judge_columns(ep)
    reasons = (
        ep.column("termination_reason").combine_chunks()
        if "termination_reason" in names
        else pa.nulls(n, pa.string())
    )
    env_versions = ep.column("env_version").to_pylist() if "env_version" in names else [None] * n
    if features is not None:
        valid = features.valid
        flat = features.vectors
        safety: list[int | None] = features.safety
        modality: list[str | None] = list(features.modality)
        fingerprints: list[str | None] = list(features.fingerprints)
    else:
        valid = np.zeros(n, dtype=bool)
        flat = np.zeros((n, VECTOR_DIM), dtype=np.float32)
        safety, modality, fingerprints = [None] * n, [None] * n, [None] * n
    vector = pa.FixedSizeListArray.from_arrays(
        pa.array(np.ascontiguousarray(flat, dtype=np.float32).reshape(-1), pa.float32()),
        VECTOR_DIM,
        mask=pa.array(~valid),
    )
    columns: dict[str, Any] = {
        "batch": [row["digest"]] * n,
        "batch_index": [row["log_index"]] * n,
        "episode_id": ep.column("episode_id").cast(pa.string()),
        "task_id": col("task_id"),
        "env_version": [
            row.get("env") if v is None or v == row.get("env_digest") else v for v in env_versions
        ],
        "policy_version": col("policy_version", row.get("policy_version")),
        "seed": col("seed"),
        "return": col("return"),
        "num_steps": col("num_steps"),
        "termination_reason": reasons,
        # The one definition of success (ledger/rollouts/success.py), for the whole batch.
        "success": episode_success(ep, batch_labels=labels_success),
        "judge_scores": judge_json,
        "judge_score": judge_mean,
        "cost_usd": col("cost_usd"),
        "language": col("language"),
        "task_type": col("task_type"),
        "invalid": col("invalid"),
        "safety_interventions": safety,
        "modality": modality,
        "fingerprint": fingerprints,
        "vector": vector,
    }
    return pa.table(
        {
            k: pa.array(v, EPISODES_SCHEMA.field(k).type)
            if isinstance(v, list)
            else v.cast(EPISODES_SCHEMA.field(k).type)
            for k, v in columns.items()
        },
        schema=EPISODES_SCHEMA,
    )


def _aligned(
    episodes: Iterator[pa.RecordBatch], features: Iterator[FeatureChunk] | None
) -> Iterator[tuple[pa.Table, FeatureChunk | None]]:
    """Pair each chunk of episode rows with the features of the same episodes.

    Both files list episodes in the order of their first step (as recording writes them), so
    the two streams advance together with a small buffer.

    Raises:
        _Unusable: the step file's episodes are not those of the episode file, in order.
    """
    pending: list[FeatureChunk] = []
    have = 0
    for batch in episodes:
        t = pa.Table.from_batches([batch])
        if features is None:
            yield t, None
            continue
        while have < t.num_rows:
            nxt = next(features, None)
            if nxt is None:
                raise _Unusable("steps.parquet holds fewer episodes than episodes.parquet")
            pending.append(nxt)
            have += len(nxt)
        got = FeatureChunk.concat(pending)
        mine, rest = got.slice(0, t.num_rows), got.slice(t.num_rows, len(got))
        pending, have = ([rest] if len(rest) else []), len(rest)
        ids = [str(i) for i in t.column("episode_id").to_pylist()]
        if ids != mine.episode_ids:
            raise _Unusable("steps.parquet and episodes.parquet list episodes in another order")
        yield t, mine
    if features is not None and (have or next(features, None) is not None):
        raise _Unusable("steps.parquet holds episodes that episodes.parquet does not")


def _sql_message(e: BaseException) -> str:
    """LanceDB's error as one line, without its SQL wrapper and Rust source locations."""
    message = " ".join(str(e).split()).removeprefix("Invalid input, ")
    parse = re.search(r"sql parser error: (.*?)\)?$", message)
    if parse:
        return f"SQL syntax error: {parse.group(1)}"
    message = message.split("Invalid user input: ", 1)[-1]
    return re.sub(r",? /\S+\.rs:\d+:\d+", "", message)


def _sql_list(values: Iterable[str]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


_NAMED_SQL = _sql_list(sorted(NAMED_KINDS))


def _compact(table: Any) -> None:
    """Merge small fragments and drop old table versions (each update adds some)."""
    import datetime as dt
    import warnings

    with warnings.catch_warnings():
        # LanceDB warns that concurrent users of old versions would fail; there are none:
        # every reader and writer of the index holds its lock.
        warnings.simplefilter("ignore", UserWarning)
        table.optimize(cleanup_older_than=dt.timedelta(0))


_SCALAR_INDEXES: dict[str, tuple[tuple[str, str], ...]] = {
    ARTIFACTS: (("digest", "BTree"), ("kind", "Bitmap")),
    EPISODES: (("batch", "BTree"),),
}
"""The columns every lookup filters on, by table, and the kind of scalar index for each."""

_INDEX_MIN_ROWS = 10_000
"""Tables smaller than this are scanned: an index would cost more than it saves."""


def _ensure_scalar_indexes(table: Any, name: str) -> None:
    """Index the filtered columns of a table grown past `_INDEX_MIN_ROWS` (once: `_compact`
    brings the indexes up to date with the rows added since, which are scanned until then).

    Without them each lookup of a batch or a dataset scans the whole table, one row per log
    entry: about 25 ms at 100,000 entries, against 4 ms with them (bench/scale_bench.py)."""
    wanted = _SCALAR_INDEXES.get(name, ())
    if not wanted or table.count_rows() < _INDEX_MIN_ROWS:
        return
    import lancedb.index

    # Only faster lookups: a failure (a full disk) leaves the table scanned, as before.
    with contextlib.suppress(OSError, RuntimeError, ValueError):
        have = {column for index in table.list_indices() for column in index.columns}
        for column, kind in wanted:
            if column not in have:
                table.create_index(column, config=getattr(lancedb.index, kind)(), replace=True)


class _Sink:
    """Artifact rows waiting to be written, and status changes for rows already written."""

    def __init__(self, artifacts: Any, episodes: Any) -> None:
        self.artifacts, self.episodes = artifacts, episodes
        self.rows: list[dict[str, Any]] = []
        self.revoked: set[str] = set()
        self.erased: set[str] = set()
        self.batches = 0
        self._seen: set[str] = set()

    def mark_duplicates(self, rows: Sequence[dict[str, Any]]) -> None:
        """Batch rows whose digest an earlier entry already holds become ``duplicate`` (the
        episodes are indexed once, with the first entry). One query per chunk of entries."""
        new = sorted({r["digest"] for r in rows if r["kind"] == "rollout-batch"} - self._seen)
        if new:
            where = f"kind = 'rollout-batch' AND digest IN ({_sql_list(new)})"
            found = self.artifacts.search().where(where).select(["digest"]).limit(None)
            self._seen.update(found.to_arrow().column("digest").to_pylist())
        for r in rows:
            if r["kind"] != "rollout-batch":
                continue
            if r["digest"] in self._seen:
                r["data"] = "duplicate"
            self._seen.add(r["digest"])

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if row["kind"] == "rollout-batch":
            self.batches += 1

    def flag(self, kind: str, digest: str) -> None:
        """A revocation or erasure of ``digest``: applied to pending rows now, to written ones
        at the next flush. Erasure also drops the batch's episode rows."""
        for r in self.rows:
            if r["digest"] == digest and r["kind"] in NAMED_KINDS:
                if kind == "revocation":
                    r["revoked"] = True
                else:
                    r.update(erased=True, data="erased")
                    if r["kind"] == "rollout-batch":
                        r["episodes_indexed"] = 0
        (self.revoked if kind == "revocation" else self.erased).add(digest)

    def flush(self) -> None:
        if self.rows:
            self.artifacts.add(pa.Table.from_pylist(self.rows, schema=ARTIFACTS_SCHEMA))
        if self.revoked:
            self.artifacts.update(
                where=f"digest IN ({_sql_list(sorted(self.revoked))}) AND kind IN ({_NAMED_SQL})",
                values={"revoked": True},
            )
        if self.erased:
            gone = _sql_list(sorted(self.erased))
            self.artifacts.update(
                where=f"digest IN ({gone}) AND kind IN ({_NAMED_SQL})",
                values={"erased": True, "data": "erased"},
            )
            self.artifacts.update(
                where=f"digest IN ({gone}) AND kind = 'rollout-batch'",
                values={"episodes_indexed": 0},
            )
            self.episodes.delete(f"batch IN ({gone})")
        self.rows, self.revoked, self.erased = [], set(), set()


# --------------------------------------------------------------------------------------------
# The index


ProgressFactory = Callable[[int, str], contextlib.AbstractContextManager[Callable[[int], None]]]
"""``progress(total, label)`` -> a context yielding ``advance(n)`` (as ``clikit.progress``)."""


@contextlib.contextmanager
def _no_progress(total: int, label: str) -> Iterator[Callable[[int], None]]:
    yield lambda n: None


@dataclass(frozen=True)
class IndexUpdate:
    """What an update did: log entries ``start .. end`` indexed, and the batches whose episodes
    were indexed during the call."""

    start: int
    end: int
    rebuilt: bool
    batches: int
    episodes: int

    @property
    def entries(self) -> int:
        """How many log entries were indexed."""
        return self.end - self.start


class Index:
    """The audit index of one ledger, in ``<ledger>/index/lance/``.

    Two levels, both incremental: the ``artifacts`` table follows the log (one row per entry,
    brought up to date by every public method), and a batch's episode rows are added the first
    time something asks about that batch (`index_batches`; ``query episodes`` without a batch
    restriction asks about every batch). So ``dataset create`` and the contamination check
    index only the batches they compare. Everything runs under a lock shared with other
    processes. Nothing is verified against the index (see the module docstring).
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        progress: ProgressFactory | None = None,
        note: Callable[[str], None] | None = None,
    ) -> None:
        """Attach to a ledger; nothing is read until a method is called.

        Args:
            ledger: the ledger.
            progress: shows progress while batches are indexed (``clikit.progress``).
            note: told once when the index has to be brought up to date in a temporary copy
                because the ledger's cannot be written (see `_to_scratch`).
        """
        self.ledger = ledger
        self.dir = ledger.root / "index" / "lance"
        self.state_path = self.dir / "state.json"
        self.progress: ProgressFactory = progress or _no_progress
        self.note = note
        self._db: Any = None
        self._depth = 0
        self._tmp_root = ledger.root / "tmp"
        self._read_only = False
        self._scratch: Callable[[], Any] | None = None  # removes the temporary copy

    # -- state and locking ----------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the index's lock (reentrant). An index directory that cannot be written (a
        read-only copy of a ledger) is read in place under a shared lock, when it has a lock
        file, and the first change it needs is made in a temporary copy (`_to_scratch`)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        fd = self._open_lock()
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_SH if self._read_only else fcntl.LOCK_EX)
            self._depth = 1
            yield
        finally:
            self._depth = 0
            if fd is not None:
                os.close(fd)

    def _open_lock(self) -> int | None:
        """The lock file, open for writing; or, when the index directory cannot be written,
        read-only mode and the lock file open for reading (None when there is none)."""
        if not self._read_only:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                return os.open(self.dir / "index.lock", os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                if e.errno not in _READ_ONLY_ERRNOS:
                    raise
                self._read_only = True
        try:
            return os.open(self.dir / "index.lock", os.O_RDONLY)
        except OSError:
            return None

    def _to_scratch(self) -> None:
        """Continue in a private temporary copy of the index (deleted when this object is),
        because the ledger's index directory cannot be written: the index is derived data, so
        a read-only ledger is still queried, and nothing is written to it.

        Nothing has been changed yet when this is called, so the copy holds what was read.
        """
        tmp = Path(tempfile.mkdtemp(prefix="trajledger-index-"))
        self._scratch = weakref.finalize(self, shutil.rmtree, tmp, ignore_errors=True)
        where = tmp / "lance"
        where.mkdir()
        for src in sorted(self.dir.rglob("*")) if self.dir.is_dir() else []:
            dst = where / src.relative_to(self.dir)
            if src.is_dir():
                dst.mkdir(exist_ok=True)
            elif src.is_file() and src.name != "index.lock":
                shutil.copyfile(src, dst)
        if self.note is not None:
            self.note(
                f"the audit index in {self.dir} cannot be written; it is brought up to date "
                "in a temporary copy for this command (run 'trajledger reindex' where the "
                "ledger can be written to keep one)"
            )
        self.dir, self.state_path = where, where / "state.json"
        self._tmp_root = tmp / "tmp"
        self._db = None
        self._read_only = False

    def _connect(self) -> Any:
        if self._db is None:
            import lancedb

            self._db = lancedb.connect(str(self.dir))
        return self._db

    def _table(self, name: str) -> Any:
        """The table, or None when it is absent or cannot be opened (then it is rebuilt)."""
        try:
            table = self._connect().open_table(name)
            table.count_rows()
        except (ValueError, OSError, RuntimeError):
            return None
        return table

    def _read_state(self) -> dict[str, Any] | None:
        try:
            state = json.loads(self.state_path.read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(state, dict) or state.get("format") != INDEX_FORMAT:
            return None
        if state.get("pending") or not isinstance(state.get("size"), int):
            return None  # an update was interrupted: rebuild
        return state

    def _write_state(
        self, size: int, last: str, *, pending: bool, batch: str | None = None
    ) -> None:
        body = {
            "format": INDEX_FORMAT,
            "size": size,
            "last": last,
            "pending": pending,
            "batch": batch,
        }
        write_file_atomic(self.state_path, json.dumps(body, sort_keys=True).encode(), durable=False)

    def _last_hash(self, size: int) -> str:
        return leaf_hash(self.ledger.log.entry(size - 1)).hex() if size else ""

    # -- building ---------------------------------------------------------------------------

    def update(self, *, on_progress: Callable[[int], None] | None = None) -> IndexUpdate:
        """Add the artifact rows of the log entries after the last indexed size (build the
        index when absent). Episodes are indexed per batch, when asked for (`index_batches`).

        The index is rebuilt from scratch when its state is missing or of another format, an
        earlier update was interrupted, or the log no longer holds the entry the index ended
        at (another log).

        Args:
            on_progress: called with the number of entries done, as they are done.

        Raises:
            LogError / StoreError: the log or the store cannot be read.
        """
        with self._locked():
            return self._update(on_progress, rebuild=False)

    def rebuild(self, *, on_progress: Callable[[int], None] | None = None) -> IndexUpdate:
        """Drop both tables, index the whole log again, then every batch's episodes
        (``trajledger reindex``).

        Args:
            on_progress: called with the number of log entries done.

        Raises:
            LedgerError: the index directory cannot be written.
        """
        with self._locked():
            if self._read_only:
                raise LedgerError(f"{self.dir}: cannot be written, so the index is not rebuilt")
            meta = self._update(on_progress, rebuild=True)
            batches, episodes = self._index_batches(None)
            return IndexUpdate(meta.start, meta.end, True, batches, episodes)

    def index_batches(self, digests: Sequence[str] | None = None) -> tuple[int, int]:
        """Index the episodes of these batches (None: of every batch) not indexed yet.

        Each batch's files are streamed (row group by row group), so memory stays bounded
        whatever their size; progress goes to the index's progress factory, in steps.

        Returns:
            How many batches and episodes were indexed.
        """
        with self._locked():
            self._update(None, rebuild=False)
            return self._index_batches(digests)

    def _update(self, on_progress: Callable[[int], None] | None, *, rebuild: bool) -> IndexUpdate:
        log = self.ledger.log
        size = log.size
        state = None if rebuild else self._read_state()
        artifacts, episodes = self._table(ARTIFACTS), self._table(EPISODES)
        usable = (
            state is not None
            and artifacts is not None
            and episodes is not None
            and state["size"] <= size
            and state.get("last") == self._last_hash(state["size"])
        )
        start = state["size"] if usable and state is not None else 0
        if usable and state is not None and state.get("batch"):
            self._recover_batch(str(state["batch"]), start, str(state["last"]))
        if usable and start == size:
            return IndexUpdate(start, size, False, 0, 0)
        if self._read_only:  # the index must change: from here on, in a temporary copy
            self._to_scratch()
            artifacts, episodes = self._table(ARTIFACTS), self._table(EPISODES)
        if start == 0:
            db = self._connect()
            for name in (ARTIFACTS, EPISODES):
                db.drop_table(name, ignore_missing=True)
            artifacts = db.create_table(ARTIFACTS, schema=ARTIFACTS_SCHEMA)
            episodes = db.create_table(EPISODES, schema=EPISODES_SCHEMA)
        self._write_state(start, self._last_hash(start), pending=True)
        sink = _Sink(artifacts, episodes)
        for lo in range(start, size, _ENTRY_CHUNK):
            hi = min(lo + _ENTRY_CHUNK, size)
            parsed = []
            for i, raw in enumerate(log.entries(lo, hi), start=lo):
                try:
                    parsed.append((i, LogEntry.from_bytes(raw)))
                except FormatError:
                    continue  # `log verify` reports it; the index only skips it
            rows = [(e, _artifact_row(i, e, _statement(self.ledger, e))) for i, e in parsed]
            sink.mark_duplicates([r for _, r in rows])
            for entry, row in rows:
                sink.add(row)
                if entry.kind in ("revocation", "erasure"):
                    sink.flag(entry.kind, entry.subject)
            sink.flush()
            if on_progress is not None:
                on_progress(hi - lo)
        if artifacts.stats()["fragment_stats"]["num_fragments"] > 32:
            _compact(artifacts)
        self._write_state(size, self._last_hash(size), pending=False)
        _ensure_scalar_indexes(artifacts, ARTIFACTS)
        return IndexUpdate(start, size, start == 0, sink.batches, 0)

    def _recover_batch(self, digest: str, size: int, last: str) -> None:
        """An interrupted batch: drop its episode rows unless its row says it finished."""
        if self._read_only:
            self._to_scratch()
        artifacts, episodes = self._table(ARTIFACTS), self._table(EPISODES)
        where = f"kind = 'rollout-batch' AND digest = {_sql_list([digest])} AND data = '{PENDING}'"
        if artifacts.search().where(where).limit(1).to_arrow().num_rows:
            episodes.delete(f"batch = {_sql_list([digest])}")
        self._write_state(size, last, pending=False)

    def _index_batches(self, digests: Sequence[str] | None) -> tuple[int, int]:
        where = f"kind = 'rollout-batch' AND data = '{PENDING}'"
        if digests is not None:
            if not digests:
                return 0, 0
            where += f" AND digest IN ({_sql_list(sorted(set(digests)))})"
        artifacts = self._table(ARTIFACTS)
        todo = artifacts.search().where(where).limit(None).to_arrow()
        todo = todo.sort_by("log_index").to_pylist()
        if not todo:
            return 0, 0
        if self._read_only:
            self._to_scratch()
            artifacts = self._table(ARTIFACTS)
        state = self._read_state()
        assert state is not None  # _update wrote it
        total = sum(int(r["num_steps"] or 0) for r in todo)
        episodes = 0
        with self.progress(total, f"indexing {len(todo)} batch(es)") as advance:
            for row in todo:
                self._write_state(state["size"], state["last"], pending=False, batch=row["digest"])
                status, count = self._index_batch(row, advance)
                artifacts.update(
                    where=f"kind = 'rollout-batch' AND digest = {_sql_list([row['digest']])} "
                    f"AND data = '{PENDING}'",
                    values={"data": status, "episodes_indexed": count},
                )
                episodes += count
            self._write_state(state["size"], state["last"], pending=False)
        for name, table in ((ARTIFACTS, artifacts), (EPISODES, self._table(EPISODES))):
            if table.stats()["fragment_stats"]["num_fragments"] > 32:
                _compact(table)
            _ensure_scalar_indexes(table, name)
        return len(todo), episodes

    def _index_batch(self, row: dict[str, Any], advance: Callable[[int], None]) -> tuple[str, int]:
        """Stream one batch's episode rows into the table: its status and episode count."""
        from .artifacts import batch_files

        # Data that cannot be read or does not fit the schema is skipped, never fatal: the
        # index must keep working on whatever a ledger holds.
        store = self.ledger.store
        sealed = _sealed_episodes(self.ledger, row["envelope"])
        if sealed is not None:
            # A sealed batch is indexed from the fingerprints its record publishes (what the
            # duplicate and contamination checks compare); its other columns stay null.
            from .sealing import sealed_features

            chunk = sealed_features(sealed)
            ep = pa.table({"episode_id": pa.array(chunk.episode_ids, pa.string()),
                           "num_steps": pa.array(chunk.num_steps, pa.int64())})
            if len(chunk):
                self._episodes_table().add(_episode_table(ep, row, chunk, False))
            return "sealed", len(chunk)
        with private_workdir(self._tmp_root) as tmp:
            try:
                files = batch_files(self.ledger, row["digest"])
                ep_path = verified_local_copy(
                    store, files["episodes.parquet"], Path(tmp), private=False
                )
            except _UNUSABLE:
                return "missing", 0
            try:
                steps_path: Path | None = verified_local_copy(
                    store, files["steps.parquet"], Path(tmp), private=False
                )
            except _UNUSABLE:
                steps_path = None
            if steps_path is not None:
                try:
                    return "indexed", self._stream_batch(row, ep_path, steps_path, advance)
                except _UNUSABLE_BATCH:
                    self._episodes_table().delete(f"batch = {_sql_list([row['digest']])}")
            try:
                return "partial", self._stream_batch(row, ep_path, None, advance)
            except _UNUSABLE_BATCH:
                self._episodes_table().delete(f"batch = {_sql_list([row['digest']])}")
                return "missing", 0

    def _episodes_table(self) -> Any:
        return self._connect().open_table(EPISODES)

    def _stream_batch(
        self,
        row: dict[str, Any],
        episodes_path: Path,
        steps_path: Path | None,
        advance: Callable[[int], None],
    ) -> int:
        import pyarrow.parquet as pq

        table = self._episodes_table()
        count, buffered, rows = 0, [], 0
        labels_success = batch_labels_success(episodes_path)
        with contextlib.ExitStack() as stack:
            epf = stack.enter_context(pq.ParquetFile(episodes_path))
            features = None
            if steps_path is not None:
                spf = stack.enter_context(pq.ParquetFile(steps_path))
                features = iter_step_features(parquet_batches(spf, FEATURE_COLUMNS))
            for ep, feats in _aligned(parquet_batches(epf, epf.schema_arrow.names), features):
                part = _episode_table(ep, row, feats, labels_success)
                buffered.append(part)
                rows += part.num_rows
                steps = pc.sum(part.column("num_steps")).as_py()
                advance(int(steps or 0))
                if rows >= _FLUSH_EPISODES:
                    table.add(pa.concat_tables(buffered))
                    count, buffered, rows = count + rows, [], 0
        if buffered:
            table.add(pa.concat_tables(buffered))
            count += rows
        return count

    # -- reading ----------------------------------------------------------------------------

    def _scan(
        self,
        name: str,
        where: str | None = None,
        columns: Sequence[str] | None = None,
        limit: int | None = None,
        *,
        shown: str | None = None,
    ) -> pa.Table:
        table = self._table(name)
        if table is None:
            raise LedgerError(
                f"{self.dir}: the index has no table {name!r}; run 'trajledger reindex'"
            )
        q = table.search()
        if where:
            q = q.where(where)
        if columns is not None:
            q = q.select(list(columns))
        try:
            result: pa.Table = q.limit(limit).to_arrow()
        except (ValueError, RuntimeError) as e:
            error: BaseException = e
            if shown and shown != where:
                # Report the user's filter alone, not the batch restriction added to it.
                try:
                    table.search().where(shown).limit(0).to_arrow()
                except (ValueError, RuntimeError) as alone:
                    error = alone
            raise QueryError(f"--where {shown or where!r}: {_sql_message(error)}") from e
        return result

    def query(
        self,
        table: str,
        where: str | None = None,
        *,
        columns: Sequence[str] | None = None,
        limit: int | None = None,
        batches: Sequence[str] | None = None,
    ) -> pa.Table:
        """Rows of ``artifacts`` or ``episodes`` matching an SQL filter (DataFusion syntax).

        Episodes of batches not indexed yet are indexed first: those of ``batches`` when it is
        given, else every batch's.

        Args:
            table: ``"artifacts"`` or ``"episodes"``.
            where: e.g. ``"return > 100 AND env_version = 'cartpole@1'"``; None for every row.
            columns: the columns to return (default: all but ``vector``).
            limit: at most this many rows; None for all.
            batches: keep only episodes of these batches (episodes only).

        Raises:
            QueryError: an unknown table or column, or a filter LanceDB cannot run.
        """
        schema = {ARTIFACTS: ARTIFACTS_SCHEMA, EPISODES: EPISODES_SCHEMA}.get(table)
        if schema is None:
            raise QueryError(f"table {table!r}: unknown, want artifacts or episodes")
        names = [n for n in schema.names if n != "vector"]
        if columns is not None:
            unknown = [c for c in columns if c not in schema.names]
            if unknown:
                raise QueryError(
                    f"{table}: no column {', '.join(map(repr, unknown))}; "
                    f"columns are {', '.join(names)}"
                )
        where = where if where and where.strip() else None
        combined = where
        if batches is not None:
            if table != EPISODES:
                raise QueryError("only episodes can be restricted to batches")
            restrict = f"batch IN ({_sql_list(batches)})" if batches else "false"
            combined = f"({where}) AND {restrict}" if where else restrict
        with self._locked():
            self._update(None, rebuild=False)
            if table == EPISODES:
                self._index_batches(batches)
            return self._scan(table, combined, list(columns or names), limit, shown=where)

    def artifact(self, digest: str, kind: str | None = None) -> dict[str, Any] | None:
        """The first (identity) row of ``digest``, of ``kind`` when given; None when absent."""
        where = f"digest = {_sql_list([digest])}" + (
            f" AND kind = {_sql_list([kind])}" if kind else ""
        )
        rows = self.query(ARTIFACTS, where).to_pylist()
        return min(rows, key=lambda r: r["log_index"]) if rows else None

    def batches_of(self, digest: str, kind: str) -> list[str]:
        """The batches of a batch (itself), a dataset (its members) or a checkpoint (the members
        of the datasets it was trained on), from the index.

        Raises:
            RefError: ``digest`` is not an indexed artifact of that kind.
        """
        if kind == "rollout-batch":
            return [digest]
        row = self.artifact(digest, kind)
        if row is None:
            raise RefError(f"{kind} {digest}: not in the index")
        if kind == "dataset":
            return list(row["batches"] or [])
        if kind == "checkpoint":
            out: set[str] = set()
            for d in row["datasets"] or []:
                out.update(self.batches_of(d, "dataset"))
            return sorted(out)
        raise RefError(f"{kind} {digest}: has no batches; want a batch, dataset or checkpoint")

    def _datasets(self, where: str | None = None) -> list[dict[str, Any]]:
        """The dataset rows (matching ``where``, an SQL filter)."""
        rows: list[dict[str, Any]] = self.query(
            ARTIFACTS,
            "kind = 'dataset'" + (f" AND ({where})" if where else ""),
            columns=["log_index", "digest", "ref", "split", "batches"],
        ).to_pylist()
        return rows

    # -- statistics -------------------------------------------------------------------------

    def stats(
        self, batches: Sequence[str], by: Sequence[str], *, judge_key: str | None = None
    ) -> tuple[Metrics, tuple[Segment, ...]]:
        """Metrics of the episodes of ``batches``, overall and per segment of ``by`` columns.

        Args:
            batches: batch digests.
            by: episode columns to segment by (none: only the aggregate).
            judge_key: the judge score to use (a key of ``judge_scores``); default the mean of
                an episode's scores (``judge_score``).

        Returns:
            The aggregate metrics, and the segments sorted by key (nulls last) with their
            far-below warnings.

        Raises:
            QueryError: an unknown or unsegmentable column.
        """
        bad = [c for c in by if c not in _SCALAR_EPISODE_COLUMNS]
        if bad:
            raise QueryError(
                f"--by: no episode column {', '.join(map(repr, bad))}; columns are "
                + ", ".join(_SCALAR_EPISODE_COLUMNS)
            )
        needed = [
            "batch", "episode_id", "task_id", "return", "num_steps", "success", "invalid",
            "safety_interventions", "judge_score", "judge_scores", "cost_usd",
        ]  # fmt: skip
        cols = list(dict.fromkeys([*needed, *by]))
        t = self.query(EPISODES, columns=cols, batches=batches)
        data = _Columns.from_table(t, judge_key)
        aggregate = data.metrics(np.arange(t.num_rows))
        groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        keys = [t.column(c).to_pylist() for c in by]
        for i, key in enumerate(zip(*keys, strict=True)) if by else ():
            groups[key].append(i)
        segments = []
        for key in sorted(groups, key=lambda k: tuple((v is None, str(v)) for v in k)):
            m = data.metrics(np.array(groups[key]))
            segments.append(Segment(tuple(zip(by, key, strict=True)), m, _warnings(m, aggregate)))
        return aggregate, tuple(segments)

    # -- contamination ----------------------------------------------------------------------

    # -- contamination ----------------------------------------------------------------------

    def contamination(
        self, train_batches: Sequence[str], other_batches: Sequence[str]
    ) -> list[Finding]:
        """Exact and near-duplicate episodes between a train set and holdout / regression sets.

        Each episode of ``other_batches`` with a match in ``train_batches`` gives one finding:
        exact when some train episode has the same content fingerprint, else near when a train
        episode of the same modality reaches the near-duplicate threshold (docs/audit-index.md);
        the finding names the best match and counts all matches. Only these batches are
        indexed (when they are not yet); the other side is held in memory, the train side is
        streamed.

        Returns:
            Findings sorted by kind (exact first), other batch and other episode.
        """
        train, other = sorted(set(train_batches)), sorted(set(other_batches))
        with self._locked():
            self._update(None, rebuild=False)
            self._index_batches(sorted(set(train) | set(other)))
            if not train or not other:
                return []
            labels = self._dataset_labels(sorted(set(train) | set(other)))
            matcher = Matcher(labels["train"], labels["other"])
            cols = ["batch", "episode_id", "fingerprint", "modality", "num_steps", "vector"]
            held = self._scan(EPISODES, f"batch IN ({_sql_list(other)})", cols)
            for batch, chunk in _feature_chunks(held):
                matcher.hold(batch, chunk)
            q = (
                self._table(EPISODES)
                .search()
                .where(f"batch IN ({_sql_list(train)})")
                .select(cols)
                .limit(None)
            )
            for rb in q.to_batches(_FLUSH_EPISODES):
                for batch, chunk in _feature_chunks(pa.Table.from_batches([rb])):
                    matcher.feed(batch, chunk)
            return matcher.findings()

    def _dataset_labels(self, batches: Sequence[str]) -> dict[str, dict[str, list[str]]]:
        """batch -> refs of the train datasets holding it, and of the holdout/regression ones,
        for ``batches`` (only the datasets holding one of them are read)."""
        out: dict[str, dict[str, list[str]]] = {
            "train": defaultdict(list),
            "other": defaultdict(list),
        }
        wanted = set(batches)
        holding = self._datasets(f"array_has_any(batches, make_array({_sql_list(batches)}))")
        for d in sorted(holding, key=lambda r: r["log_index"]):
            side = "train" if d["split"] == "train" else "other"
            label = f"{d['split']} {d['ref'] or d['digest']}"
            for b in d["batches"] or []:
                if b in wanted and label not in out[side][b]:
                    out[side][b].append(label)
        return out


def _sealed_episodes(ledger: Ledger, envelope: str) -> Sequence[SealedEpisode] | None:
    """The published fingerprints of a sealed batch (from its envelope, unverified: the index
    is derived data), or None when the batch is not sealed or its envelope cannot be read."""
    try:
        st = Statement.from_bytes(Envelope.from_bytes(ledger.store.get(envelope)).payload)
        sealed = KINDS["rollout-batch"].read(st, "rollout-batch")
    except (ProvenanceError, LedgerError):
        return None
    return sealed.sealed.episodes if isinstance(sealed, RolloutBatch) and sealed.sealed else None


def _feature_chunks(t: pa.Table) -> Iterator[tuple[str, FeatureChunk]]:
    """Index rows as `FeatureChunk` runs of one batch each (for the matcher)."""
    if t.num_rows == 0:
        return
    batch = t.column("batch").to_pylist()
    cuts = [0, *(i for i in range(1, len(batch)) if batch[i] != batch[i - 1]), len(batch)]
    vec = t.column("vector").combine_chunks()
    valid = np.asarray(vec.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    # The child array holds 128 values for every slot, null or not.
    child = np.asarray(vec.values.to_numpy(zero_copy_only=False), dtype=np.float32)
    values = child[vec.offset * VECTOR_DIM : (vec.offset + len(vec)) * VECTOR_DIM]
    values = np.nan_to_num(values.reshape(len(vec), VECTOR_DIM))
    values[~valid] = 0.0
    ids = [str(i) for i in t.column("episode_id").to_pylist()]
    steps = np.asarray(t.column("num_steps").fill_null(0).to_numpy(), dtype=np.int64)
    fps = t.column("fingerprint").to_pylist()
    mods = t.column("modality").to_pylist()
    for a, b in itertools.pairwise(cuts):
        yield (
            batch[a],
            FeatureChunk(
                ids[a:b], steps[a:b], fps[a:b], mods[a:b], values[a:b], valid[a:b], [None] * (b - a)
            ),
        )


# --------------------------------------------------------------------------------------------
# Statistics


@dataclass(frozen=True)
class Metrics:
    """Metrics of a set of episodes (docs/audit-index.md defines each).

    Attributes:
        episodes: how many.
        labelled: episodes whose termination_reason is ``success`` or ``failure``.
        successes: episodes labelled ``success``.
        success_rate: successes / labelled; None when nothing is labelled.
        mean_return: mean of ``return``.
        return_std: sample standard deviation of ``return`` (None below 2 episodes).
        mean_length: mean of ``num_steps``.
        invalid_rate: fraction of episodes flagged ``invalid``.
        intervention_rate: fraction with at least one safety intervention, over the episodes
            whose steps record interventions; None when none do.
        judged: episodes with both a judge score and a success label.
        judge_agreement: fraction of those where (judge score >= 0.5) equals success.
        total_cost: sum of known ``cost_usd``; None when no episode has a cost.
        cost_per_episode: total_cost / episodes with a known cost.
        solved_tasks: distinct tasks with a successful episode (an episode without task_id is
            its own task).
        cost_per_success: total_cost / solved_tasks; None when either is missing or zero.
    """

    episodes: int
    labelled: int
    successes: int
    success_rate: float | None
    mean_return: float | None
    return_std: float | None
    mean_length: float | None
    invalid_rate: float | None
    intervention_rate: float | None
    judged: int
    judge_agreement: float | None
    total_cost: float | None
    cost_per_episode: float | None
    solved_tasks: int
    cost_per_success: float | None

    def to_json(self) -> dict[str, Any]:
        """The metrics as JSON."""
        return asdict(self)


@dataclass(frozen=True)
class Segment:
    """The episodes whose ``by`` columns hold ``key`` values, with their metrics and warnings."""

    key: tuple[tuple[str, Any], ...]
    metrics: Metrics
    warnings: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``col=value,col=value``."""
        return ",".join(f"{k}={'null' if v is None else v}" for k, v in self.key)

    def to_json(self) -> dict[str, Any]:
        """The segment as JSON (``below_aggregate`` is true when there are warnings)."""
        return {
            "key": {k: v for k, v in self.key},
            "label": self.label,
            **self.metrics.to_json(),
            "below_aggregate": bool(self.warnings),
            "warnings": list(self.warnings),
        }


def _mean(x: npt.NDArray[Any]) -> float | None:
    return float(np.mean(x)) if len(x) else None


@dataclass(frozen=True)
class _Columns:
    """The stats columns of episode rows as numpy arrays (NaN for null)."""

    ret: npt.NDArray[np.float64]
    steps: npt.NDArray[np.float64]
    success: npt.NDArray[np.float64]
    invalid: npt.NDArray[np.float64]
    safety: npt.NDArray[np.float64]
    judge: npt.NDArray[np.float64]
    cost: npt.NDArray[np.float64]
    task: list[str]

    @classmethod
    def from_table(cls, t: pa.Table, judge_key: str | None) -> _Columns:
        def f(name: str) -> npt.NDArray[np.float64]:
            c = t.column(name).cast(pa.float64())
            return np.asarray(c.to_numpy(zero_copy_only=False), dtype=np.float64)

        if judge_key is None:
            judge = f("judge_score")
        else:
            judge = np.array(
                [
                    json.loads(s).get(judge_key, math.nan) if s is not None else math.nan
                    for s in t.column("judge_scores").to_pylist()
                ],
                dtype=np.float64,
            )
        tasks = [
            f"task:{task}" if task is not None else f"episode:{b}/{e}"
            for b, e, task in zip(
                t.column("batch").to_pylist(),
                t.column("episode_id").to_pylist(),
                t.column("task_id").to_pylist(),
                strict=True,
            )
        ]
        return cls(
            f("return"), f("num_steps"), f("success"), f("invalid"), f("safety_interventions"),
            judge, f("cost_usd"), tasks,
        )  # fmt: skip

    def metrics(self, idx: npt.NDArray[np.int64]) -> Metrics:
        ret, success = self.ret[idx], self.success[idx]
        labelled = ~np.isnan(success)
        successes = int(np.sum(success[labelled] == 1.0))
        safety = self.safety[idx]
        safety = safety[~np.isnan(safety)]
        judge = self.judge[idx]
        both = labelled & ~np.isnan(judge)
        cost = self.cost[idx]
        known = cost[~np.isnan(cost)]
        total = float(known.sum()) if len(known) else None
        solved = len({self.task[i] for i in idx[success == 1.0]})
        return Metrics(
            episodes=len(idx),
            labelled=int(labelled.sum()),
            successes=successes,
            success_rate=successes / int(labelled.sum()) if labelled.any() else None,
            mean_return=_mean(ret[~np.isnan(ret)]),
            return_std=float(np.std(ret, ddof=1)) if len(ret) >= 2 else None,
            mean_length=_mean(self.steps[idx]),
            invalid_rate=_mean(np.nan_to_num(self.invalid[idx]) == 1.0),
            intervention_rate=_mean(safety > 0),
            judged=int(both.sum()),
            judge_agreement=_mean((judge[both] >= JUDGE_PASS) == (success[both] == 1.0)),
            total_cost=total,
            cost_per_episode=total / len(known) if total is not None else None,
            solved_tasks=solved,
            cost_per_success=total / solved if total is not None and solved else None,
        )


def _warnings(seg: Metrics, agg: Metrics) -> tuple[str, ...]:
    """Why a segment is far below the aggregate: more than 2 standard errors and >= 20%."""
    out = []
    if seg.success_rate is not None and agg.success_rate is not None and seg.labelled:
        p = agg.success_rate
        se = math.sqrt(p * (1 - p) / seg.labelled)
        gap = p - seg.success_rate
        if gap > WARN_STANDARD_ERRORS * se and gap >= WARN_RELATIVE * p and gap > 0:
            out.append(
                f"success rate {seg.success_rate:.3f} is far below {p:.3f} overall "
                f"({gap / se if se else math.inf:.1f} standard errors, n={seg.labelled})"
            )
    if seg.mean_return is not None and agg.mean_return is not None and agg.return_std is not None:
        m = agg.mean_return
        se = agg.return_std / math.sqrt(seg.episodes)
        gap = m - seg.mean_return
        if gap > WARN_STANDARD_ERRORS * se and gap >= WARN_RELATIVE * abs(m) and gap > 0:
            out.append(
                f"mean return {seg.mean_return:.4g} is far below {m:.4g} overall "
                f"({gap / se if se else math.inf:.1f} standard errors, n={seg.episodes})"
            )
    return tuple(out)


@dataclass(frozen=True)
class Calibration:
    """A judge's agreement with expert labels on the calibration dataset its newest evaluator
    version names (``stats --judge NAME``). ``calibrated`` only with such a dataset and at
    least one episode holding both an expert label (``success``) and the judge's score."""

    judge: str
    evaluator: str | None
    dataset: str | None
    agreement: float | None
    judged: int
    why: str

    @property
    def calibrated(self) -> bool:
        """True when the agreement was measured on expert labels."""
        return self.agreement is not None

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return {**asdict(self), "calibrated": self.calibrated}


@dataclass(frozen=True)
class EvaluationRow:
    """An evaluation of a checkpoint, as its record says (not verified here)."""

    digest: str
    index: int
    suite: str
    result: str
    episodes: int
    success_rate: float

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return asdict(self)


@dataclass(frozen=True)
class StatsReport:
    """Segmented statistics of a batch, dataset or checkpoint."""

    kind: str
    ref: str
    digest: str
    batches: tuple[str, ...]
    by: tuple[str, ...]
    aggregate: Metrics
    segments: tuple[Segment, ...]
    calibration: Calibration | None = None
    evaluations: tuple[EvaluationRow, ...] = ()

    @property
    def warnings(self) -> list[str]:
        """Every segment warning, as ``<segment>: <why>``."""
        return [f"{s.label}: {w}" for s in self.segments for w in s.warnings]

    def to_json(self) -> dict[str, Any]:
        """The report as JSON (stable keys)."""
        return {
            "kind": self.kind,
            "ref": self.ref,
            "digest": self.digest,
            "batches": list(self.batches),
            "by": list(self.by),
            "aggregate": self.aggregate.to_json(),
            "segments": [s.to_json() for s in self.segments],
            "warnings": self.warnings,
            "calibration": self.calibration.to_json() if self.calibration else None,
            "evaluations": [e.to_json() for e in self.evaluations],
        }


def segment_stats(
    ledger: Ledger,
    ref: str,
    by: Sequence[str] = (),
    *,
    judge_key: str | None = None,
    progress: ProgressFactory | None = None,
    note: Callable[[str], None] | None = None,
) -> StatsReport:
    """Statistics of the episodes of a batch, dataset or checkpoint, segmented by columns.

    A checkpoint's episodes are those of the batches of the datasets it was trained on.
    ``progress`` and ``note`` are `Index`'s.

    Raises:
        RefError: ``ref`` names no batch, dataset or checkpoint.
        QueryError: a ``by`` column is not an episode column.
    """
    catalog = Catalog(ledger)
    item = catalog.resolve(ref, {"rollout-batch", "dataset", "checkpoint"})
    index = Index(ledger, progress=progress, note=note)
    with index._locked():
        batches = index.batches_of(item.digest, item.kind)
        aggregate, segments = index.stats(batches, by, judge_key=judge_key)
        calibration = _calibration(ledger, index, judge_key) if judge_key else None
    evaluations = _evaluations(ledger, item.digest) if item.kind == "checkpoint" else ()
    return StatsReport(
        item.kind, item.ref, item.digest, tuple(batches), tuple(by), aggregate, segments,
        calibration, evaluations,
    )


def _record_predicate(ledger: Ledger, kind: str, envelope: str) -> Predicate | None:
    """A record's typed predicate, read from its envelope (unverified: statistics)."""
    try:
        st = Statement.from_bytes(Envelope.from_bytes(ledger.store.get(envelope)).payload)
        return KINDS[kind].read(st, kind)
    except (ProvenanceError, LedgerError):
        return None


def _calibration(ledger: Ledger, index: Index, judge: str) -> Calibration:
    """The judge's agreement with the expert labels of the calibration dataset named by the
    newest evaluator version called ``judge``."""
    versions = [i for i in Catalog(ledger).by_kind("evaluator") if i.name == judge]
    if not versions:
        return Calibration(judge, None, None, None, 0, f"no evaluator version named {judge!r} "
                           "is recorded, so none names a calibration dataset: not calibrated")
    newest = versions[-1]
    pred = _record_predicate(ledger, "evaluator", newest.envelope)
    calib = pred.calibration if isinstance(pred, Evaluator) else None
    if calib is None:
        return Calibration(judge, newest.ref, None, None, 0, f"evaluator {newest.ref} names no "
                           "calibration dataset (evaluator register --calibration): not "
                           "calibrated")
    label = f"{calib.name}@{calib.version}"
    m, _ = index.stats(index.batches_of(calib.digest, "dataset"), (), judge_key=judge)
    if not m.judged or m.judge_agreement is None:
        return Calibration(judge, newest.ref, label, None, 0, f"calibration dataset {label}: no "
                           f"episode has both an expert label (success) and a {judge!r} score: "
                           "not calibrated")
    return Calibration(judge, newest.ref, label, m.judge_agreement, m.judged,
                       f"agrees with the expert labels of {label} on {m.judged} episode(s)")


def _evaluations(ledger: Ledger, checkpoint: str) -> tuple[EvaluationRow, ...]:
    """The evaluations of a checkpoint, in log order, as their records say."""
    state = ledger.trust_state()
    out = []
    for i, role in state.referrers(checkpoint):
        entry = state.entry(i)
        if role != "checkpoint" or entry is None or entry.kind != "evaluation":
            continue
        pred = _record_predicate(ledger, "evaluation", entry.envelope)
        if isinstance(pred, Evaluation) and pred.checkpoint.digest == checkpoint:
            out.append(EvaluationRow(
                entry.subject, i, f"{pred.suite.name}@{pred.suite.version}", pred.result,
                len(pred.passed_tests) + len(pred.failed_tests), pred.success_rate,
            ))
    return tuple(sorted(out, key=lambda r: r.index))


def query_table(
    ledger: Ledger,
    table: str,
    where: str | None = None,
    *,
    columns: Sequence[str] | None = None,
    limit: int | None = None,
    within: str | None = None,
    progress: ProgressFactory | None = None,
    note: Callable[[str], None] | None = None,
) -> pa.Table:
    """`Index.query`, with ``within`` a batch, dataset or checkpoint reference (``progress``
    and ``note`` are `Index`'s)."""
    index = Index(ledger, progress=progress, note=note)
    batches = None
    if within is not None:
        item = Catalog(ledger).resolve(within, {"rollout-batch", "dataset", "checkpoint"})
        batches = index.batches_of(item.digest, item.kind)
    return index.query(table, where, columns=columns, limit=limit, batches=batches)


def reindex(
    ledger: Ledger,
    *,
    on_progress: Callable[[int], None] | None = None,
    progress: ProgressFactory | None = None,
) -> IndexUpdate:
    """Drop the index and build it again from the log and the object store (every batch).

    Args:
        ledger: the ledger.
        on_progress: called with the number of log entries done.
        progress: shows progress while batches are indexed.
    """
    return Index(ledger, progress=progress).rebuild(on_progress=on_progress)


# --------------------------------------------------------------------------------------------
# Contamination through the index (derived data; the runner uses `verified_contamination`)


def split_contamination(
    ledger: Ledger,
    split: str,
    batches: Sequence[str],
    *,
    progress: ProgressFactory | None = None,
) -> list[Finding]:
    """Contamination of a set of batches meant for ``split``, against the recorded datasets.

    For a train set, its episodes are compared with those of every recorded holdout and
    regression dataset; for a holdout or regression set, with those of every recorded train
    dataset. Use it before recording a dataset (``dataset create``). The index is brought up
    to date first, and only the batches compared are indexed. Unverified: see the module
    docstring.

    Args:
        ledger: the ledger.
        split: ``train``, ``holdout`` or ``regression``.
        batches: the batch digests of the set.
        progress: shows progress while batches are indexed.

    Returns:
        Findings; empty when there is no overlap.

    Raises:
        FormatError: an unknown split.
    """
    return _split_contamination(Index(ledger, progress=progress), split, batches)


def _split_contamination(index: Index, split: str, batches: Sequence[str]) -> list[Finding]:
    if split not in SPLITS:
        raise FormatError(f"split {split!r}: unknown, want one of {', '.join(SPLITS)}")
    with index._locked():
        other_side: set[str] = set()
        # Only the datasets of the other side are read (for a train set: the held-out ones).
        other = "split = 'train'" if split != "train" else "split != 'train'"
        for d in index._datasets(other):
            other_side.update(d["batches"] or [])
        if split == "train":
            return index.contamination(batches, sorted(other_side))
        return index.contamination(sorted(other_side), batches)


def contamination_findings(
    ledger: Ledger, dataset_digest: str, *, progress: ProgressFactory | None = None
) -> list[Finding]:
    """Contamination of a recorded dataset: `split_contamination` of its split and batches.

    Derived data: for a decision that must not rest on the index, use
    `ledger.contamination.verified_contamination`.

    Args:
        ledger: the ledger.
        dataset_digest: the dataset's ``sha256:<hex>`` (or any reference the catalog resolves).
        progress: shows progress while batches are indexed.

    Raises:
        RefError: no such dataset.
    """
    digest = dataset_digest
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        digest = Catalog(ledger).resolve(dataset_digest, {"dataset"}).digest
    index = Index(ledger, progress=progress)
    with index._locked():
        row = index.artifact(digest, "dataset")
        if row is None:
            raise RefError(f"dataset {dataset_digest}: not recorded in this ledger")
        return _split_contamination(index, str(row["split"]), list(row["batches"] or []))


def duplicate_episodes(
    ledger: Ledger, batches: Sequence[str], *, progress: ProgressFactory | None = None
) -> list[str]:
    """Episodes of ``batches`` whose content equals an earlier one's (same fingerprint).

    Batches are taken in digest order and episodes in id order, so the report is stable. The
    batches are indexed first when they are not yet (streamed, bounded memory); then only
    8-byte fingerprint prefixes of every episode are held, and the rows of colliding prefixes
    are read again to compare full fingerprints.

    Returns:
        One line per duplicate episode, naming the first episode it duplicates.
    """
    order = sorted(set(batches))
    if not order:
        return []
    index = Index(ledger, progress=progress)
    with index._locked():
        index._update(None, rebuild=False)
        index._index_batches(order)
        where = f"batch IN ({_sql_list(order)}) AND fingerprint IS NOT NULL"
        q = index._table(EPISODES).search().where(where).select(["fingerprint"]).limit(None)
        prefixes = [
            np.frombuffer(
                b"".join(bytes.fromhex(fp[:16]) for fp in rb.column(0).to_pylist()), dtype=">u8"
            )
            for rb in q.to_batches(_FLUSH_EPISODES)
        ]
        values = np.concatenate(prefixes) if prefixes else np.zeros(0, dtype=">u8")
        uniq, counts = np.unique(values, return_counts=True)
        clash = [f"{int(v):016x}" for v in uniq[counts > 1]]
        if not clash:
            return []
        rows: list[dict[str, Any]] = []
        for lo in range(0, len(clash), 512):
            like = " OR ".join(f"starts_with(fingerprint, '{p}')" for p in clash[lo : lo + 512])
            rows += index._scan(
                EPISODES, f"({like}) AND batch IN ({_sql_list(order)})",
                ["batch", "episode_id", "fingerprint"],
            ).to_pylist()  # fmt: skip
    rank = {b: i for i, b in enumerate(order)}
    rows.sort(key=lambda r: (rank[r["batch"]], r["episode_id"]))
    seen: dict[str, tuple[str, str]] = {}
    out = []
    for r in rows:
        first = seen.setdefault(r["fingerprint"], (r["batch"], r["episode_id"]))
        if first != (r["batch"], r["episode_id"]):
            out.append(
                f"episode {r['episode_id']!r} of batch {r['batch'][:19]}… duplicates episode "
                f"{first[1]!r} of batch {first[0][:19]}…"
            )
    return out
