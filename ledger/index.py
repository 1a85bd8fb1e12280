"""The audit index: LanceDB tables of every log entry and every episode, for audit questions.

Scope: a derived index under ``<ledger>/index/lance/`` with two tables, ``artifacts`` (one row
per log entry: kind, digest, name, version, time, signers, split, environment / evaluator /
policy of a batch, members of a dataset, datasets of a checkpoint, revoked / erased flags) and
``episodes`` (one row per episode of every batch: the episode table's columns, an exact content
fingerprint and a feature vector for near-duplicate search). On it: SQL filters
(`query_table`), segmented statistics (`segment_stats`) and exact / near-duplicate checks
between a train split and holdout / regression splits (`contamination_findings`,
`split_contamination`). `Index.update` indexes the log entries after the last indexed size;
`Index.rebuild` (``trajledger reindex``) drops and rebuilds everything from the log and the
object store.

Non-scope: verification. NOTHING is verified against the index, and nothing it says is
evidence: it is built from unverified envelopes and data (a blob whose bytes do not hash to its
digest is skipped, not judged), it can be deleted or rebuilt at any time, and whoever can write
the ledger directory can write it. ``trajledger verify`` and the runner's admission gate check
the log and the objects themselves. A contamination finding is a reason to look (or to refuse);
the absence of findings proves nothing.

Erasure: when an erasure is indexed, the batch's episode rows are deleted, so the index never
keeps derived copies of erased data; its artifact row stays, flagged ``erased``. A batch whose
blobs are gone is indexed from its signed metadata alone.

Spec: docs/audit-index.md (tables, columns, metrics, the near-duplicate definition and its
thresholds). lancedb is imported only when an index is opened; ``trajledger --help`` never
loads it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import itertools
import json
import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import FormatError, ProvenanceError
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.merkle import leaf_hash
from trajledger.verify.statement import Statement

from ._fs import write_file_atomic
from .catalog import NAMED_KINDS, Catalog, RefError
from .errors import LedgerError

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
    "Finding",
    "Index",
    "IndexUpdate",
    "Metrics",
    "QueryError",
    "Segment",
    "StatsReport",
    "contamination_findings",
    "query_table",
    "reindex",
    "segment_stats",
    "split_contamination",
]

INDEX_FORMAT = 1
"""Version of the tables and of the feature vectors; a change rebuilds every index."""

VECTOR_DIM = 128
"""Length of an episode's feature vector (``episodes.vector``)."""

NEAR_TEXT_THRESHOLD = 0.8
"""Text episodes are near duplicates at this cosine similarity or above (docs/audit-index.md)."""

NEAR_NUMERIC_THRESHOLD = 0.995
"""Numeric episodes are near duplicates at this cosine similarity or above."""

MIN_NEAR_STEPS = 16
"""Numeric episodes shorter than this are compared exactly only: too little content to tell a
copy from a chance match (short CartPole falls under one repeated action agree to 0.999)."""

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
_OBS_SLOTS, _ACTION_SLOTS = 16, 4
_STEP_FEATURES = _OBS_SLOTS + _ACTION_SLOTS + 1  # obs, action, reward
_CHUNK_STEPS = 256
_FLUSH_EPISODES = 50_000
_ENTRY_CHUNK = 256
_WORD = re.compile(r"\w+")
_PROMPT_EXCLUDED = frozenset({"system", "assistant"})

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
# Feature vectors


@lru_cache(maxsize=8)
def _projection(chunk: int) -> npt.NDArray[np.float64]:
    """The ±1 random projection of steps ``chunk*256 ..``: bits of SHAKE-256, fixed forever."""
    rows = _CHUNK_STEPS * _STEP_FEATURES
    seed = f"trajledger/index/projection/v{INDEX_FORMAT}/{chunk}".encode()
    bits = np.unpackbits(
        np.frombuffer(hashlib.shake_256(seed).digest(rows * VECTOR_DIM // 8), np.uint8)
    )
    return (1.0 - 2.0 * bits.astype(np.float64)).reshape(rows, VECTOR_DIM)


def _unit(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float32] | None:
    norm = float(np.linalg.norm(v))
    if norm == 0.0 or not math.isfinite(norm):
        return None
    return (v / norm).astype(np.float32)


def _fold(col: pa.ChunkedArray | None, n: int, width: int) -> npt.NDArray[np.float64]:
    """A list column as ``(n, width)``: value k of a row adds to slot k % width with sign
    (-1)^(k // width), so vectors of any length fit (a count-sketch fold; identity up to width)."""
    if col is None or col.null_count == n:
        return np.zeros((n, width))
    arr = col.combine_chunks()
    lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    lengths = np.asarray(lengths, dtype=np.int64)
    values = np.asarray(pc.list_flatten(arr).to_numpy(zero_copy_only=False), dtype=np.float64)
    values = np.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0)
    rows = np.repeat(np.arange(n), lengths)
    k = np.arange(len(values)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    signed = values * (1.0 - 2.0 * ((k // width) % 2))
    folded = np.bincount(rows * width + k % width, weights=signed, minlength=n * width)
    return np.asarray(folded, dtype=np.float64).reshape(n, width)


def _numeric_vectors(
    x: npt.NDArray[np.float64], spans: Sequence[tuple[int, int]]
) -> list[npt.NDArray[np.float32] | None]:
    """Random projections of episodes' time-aligned step features (obs, action, reward).

    Episode ``k`` is the rows ``spans[k]`` of ``x``; its step ``t`` meets the projection rows of
    chunk ``t // 256``. Episodes go through each chunk's projection in groups, one matrix
    product per group.
    """
    out = np.zeros((len(spans), VECTOR_DIM))
    lengths = np.array([b - a for a, b in spans], dtype=np.int64)
    chunks = -(-lengths // _CHUNK_STEPS)
    for c in range(int(chunks.max(initial=0))):
        todo = np.flatnonzero(chunks > c)
        for g in range(0, len(todo), 512):
            group = todo[g : g + 512]
            m = np.zeros((len(group), _CHUNK_STEPS, _STEP_FEATURES))
            for j, k in enumerate(group.tolist()):
                a = spans[k][0] + c * _CHUNK_STEPS
                b = min(spans[k][1], a + _CHUNK_STEPS)
                m[j, : b - a] = x[a:b]
            out[group] += m.reshape(len(group), -1) @ _projection(c)
    return [_unit(v) for v in out]


def _numeric_vector(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float32] | None:
    """The projection of one episode's step features (`_numeric_vectors`)."""
    return _numeric_vectors(x, [(0, len(x))])[0]


def _text_vector(messages: Sequence[tuple[str | None, str]]) -> npt.NDArray[np.float32] | None:
    """Hashed bag of word unigrams and bigrams of the task side of a conversation.

    The task side is every message whose role is neither ``system`` (shared by design) nor
    ``assistant`` (the policy's answer); when there is none, every non-system message.
    """
    chosen = [t for r, t in messages if r not in _PROMPT_EXCLUDED] or [
        t for r, t in messages if r != "system"
    ]
    counts: Counter[str] = Counter()
    for text in chosen:
        words = _WORD.findall(text.lower())
        counts.update(words)
        counts.update(f"{a} {b}" for a, b in itertools.pairwise(words))
    out = np.zeros(VECTOR_DIM)
    for token, c in counts.items():
        h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
        out[h % VECTOR_DIM] += (1.0 - 2.0 * (h >> 63)) * (1.0 + math.log(c))
    return _unit(out)


@dataclass(frozen=True)
class _StepFeatures:
    fingerprint: str | None
    modality: str
    vector: npt.NDArray[np.float32] | None
    safety_interventions: int | None


def _step_features(steps: pa.Table) -> dict[str, _StepFeatures]:
    """Per episode id: fingerprint, modality, feature vector, safety interventions."""
    from .rollouts.dedup import episode_fingerprints

    if steps.num_rows == 0:
        return {}
    fingerprints = episode_fingerprints(steps)
    order = pc.sort_indices(steps, sort_keys=[("episode_id", "ascending"), ("step", "ascending")])
    t = steps.take(order)
    n = t.num_rows
    names = set(t.column_names)

    def col(name: str) -> pa.ChunkedArray | None:
        return t.column(name) if name in names else None

    ids = t.column("episode_id").to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    ends = np.append(starts[1:], n)
    reward = col("reward")
    x = np.hstack(
        [
            _fold(col("obs"), n, _OBS_SLOTS),
            _fold(col("action"), n, _ACTION_SLOTS),
            (
                np.zeros((n, 1))
                if reward is None
                else np.asarray(reward.fill_null(0).to_numpy(), dtype=np.float64).reshape(n, 1)
            ),
        ]
    )
    text_cols = [c for c in ("content", "tool_calls", "tool_results") if c in names]
    has_text = any(t.column(c).null_count < n for c in text_cols)
    texts: list[str | None] = [None] * n
    roles: list[str | None] = [None] * n
    if has_text:
        parts = [t.column(c).to_pylist() for c in text_cols]
        texts = ["\n".join(p for p in row if p) or None for row in zip(*parts, strict=True)]
        roles = col("role").to_pylist() if "role" in names else roles  # type: ignore[union-attr]
    safety_col = col("safety_interventions")
    safety = (
        None
        if safety_col is None
        else np.asarray(
            safety_col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64
        )
    )
    spans = list(zip(starts.tolist(), ends.tolist(), strict=True))
    conversations = [
        [(roles[i], texts[i]) for i in range(a, b) if texts[i] is not None] for a, b in spans
    ]
    numeric = [k for k, c in enumerate(conversations) if not c]
    vectors = dict(zip(numeric, _numeric_vectors(x, [spans[k] for k in numeric]), strict=True))
    out: dict[str, _StepFeatures] = {}
    for k, (a, b) in enumerate(spans):
        episode = str(ids[a])
        if conversations[k]:
            modality, vector = "text", _text_vector(conversations[k])  # type: ignore[arg-type]
        else:
            modality, vector = "numeric", vectors[k]
        known = None if safety is None else safety[a:b][~np.isnan(safety[a:b])]
        out[episode] = _StepFeatures(
            fingerprints.get(episode),
            modality,
            vector,
            None if known is None or not len(known) else int(known.sum()),
        )
    return out


# --------------------------------------------------------------------------------------------
# Log entries -> rows


def _statement(ledger: Ledger, entry: LogEntry) -> Statement | None:
    try:
        return Statement.from_bytes(Envelope.from_bytes(ledger.store.get(entry.envelope)).payload)
    except ProvenanceError:
        return None  # unreadable or missing envelope: the row keeps what the entry says


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ref(p: dict[str, Any], key: str) -> tuple[str | None, str | None]:
    ref = p.get(key)
    if not isinstance(ref, dict):
        return None, None
    return f"{ref.get('name')}@{ref.get('version')}", _text(ref.get("digest"))


def _artifact_row(index: int, entry: LogEntry, st: Statement | None) -> dict[str, Any]:
    """The artifacts row of a log entry. The predicate is unverified input: every field is
    type-checked and anything unexpected becomes null."""
    p = _obj(st.predicate) if st is not None else {}
    subject_name = st.subjects[0].name if st is not None and st.subjects else None
    name, version = _text(p.get("name")) or subject_name, _text(p.get("version"))
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
    )
    if entry.kind == "checkpoint":
        build = _obj(p.get("buildDefinition"))
        ext = _obj(build.get("externalParameters"))
        name, version = _text(ext.get("name")) or subject_name, _text(ext.get("version"))
        row["purpose"] = _text(ext.get("purpose"))
        deps = build.get("resolvedDependencies")
        row["datasets"] = sorted(
            "sha256:" + str(_obj(d.get("digest")).get("sha256"))
            for d in (deps if isinstance(deps, list) else [])
            if isinstance(d, dict)
            and _obj(d.get("annotations")).get("role") == "dataset"
            and isinstance(_obj(d.get("digest")).get("sha256"), str)
        )
    elif entry.kind == "rollout-batch":
        row["env"], row["env_digest"] = _ref(p, "environment")
        row["evaluator"], row["evaluator_digest"] = _ref(p, "evaluator")
        row["policy_version"] = _text(p.get("policyVersion"))
        counts = _obj(p.get("counts"))
        row["num_episodes"], row["num_steps"] = (
            _int(counts.get("episodes")),
            _int(counts.get("steps")),
        )
        row["data"], row["episodes_indexed"] = "missing", 0
    elif entry.kind == "dataset":
        row["split"], row["purpose"] = _text(p.get("split")), _text(p.get("purpose"))
        batches = p.get("batches")
        row["batches"] = sorted(
            b for b in (batches if isinstance(batches, list) else []) if isinstance(b, str)
        )
    elif entry.kind == "approval":
        row["purpose"], row["expires"] = _text(p.get("purpose")), _text(p.get("expires"))
    elif entry.kind in ("revocation", "erasure", "refusal"):
        reasons = p.get("reasons")
        row["reason"] = _text(p.get("reason")) or (
            "; ".join(map(str, reasons)) if isinstance(reasons, list) else None
        )
    row["name"], row["version"] = name, version
    row["ref"] = f"{name}@{version}" if name and version else name
    return row


def _read_parquet(ledger: Ledger, digest: str, columns: Sequence[str] | None = None) -> pa.Table:
    import pyarrow.parquet as pq

    data = ledger.store.get_verified(digest)
    if columns is not None:
        present = set(pq.read_schema(io.BytesIO(data)).names)
        columns = [c for c in columns if c in present]
    return pq.read_table(io.BytesIO(data), columns=columns)


def _batch_episodes(ledger: Ledger, row: dict[str, Any]) -> tuple[pa.Table | None, str]:
    """The episode rows of a batch and its data status (indexed / partial / missing)."""
    from .artifacts import batch_files
    from .rollouts.dedup import CONTENT_COLUMNS

    # Data that cannot be read or does not fit the schema is skipped, never fatal: the
    # index must keep working on whatever a ledger holds.
    unusable = (ProvenanceError, pa.ArrowException, OSError, ValueError, TypeError, KeyError)
    try:
        files = batch_files(ledger, row["digest"])
        episodes = _read_parquet(ledger, files["episodes.parquet"])
    except unusable:
        return None, "missing"
    try:
        steps = _read_parquet(
            ledger,
            files["steps.parquet"],
            ["episode_id", "step", *CONTENT_COLUMNS, "safety_interventions"],
        )
        features, status = _step_features(steps), "indexed"
    except unusable:
        features, status = {}, "partial"
    try:
        return _episode_table(episodes, row, features), status
    except unusable:
        return None, "missing"


def _episode_table(
    ep: pa.Table, row: Mapping[str, Any], features: Mapping[str, _StepFeatures]
) -> pa.Table:
    from .rollouts.success import episode_success

    n = ep.num_rows
    names = set(ep.column_names)

    def col(name: str, fill: str | None = None) -> Any:
        if name not in names:
            return [fill] * n
        c = ep.column(name)
        return c.fill_null(fill) if fill is not None else c

    ids = [str(i) for i in ep.column("episode_id").to_pylist()]
    judge_json: list[str | None] = []
    judge_mean: list[float | None] = []
    for scores in col("judge_scores").to_pylist() if "judge_scores" in names else [None] * n:
        items = dict(scores) if scores else {}
        judge_json.append(json.dumps(items, sort_keys=True) if scores is not None else None)
        judge_mean.append(sum(items.values()) / len(items) if items else None)
    reasons = col("termination_reason").to_pylist() if "termination_reason" in names else [None] * n
    feats = [features.get(i) for i in ids]
    vectors = [f.vector if f is not None else None for f in feats]
    valid = np.array([v is not None for v in vectors], dtype=bool)
    flat = np.zeros((n, VECTOR_DIM), dtype=np.float32)
    for i, v in enumerate(vectors):
        if v is not None:
            flat[i] = v
    vector = pa.FixedSizeListArray.from_arrays(
        pa.array(flat.reshape(-1), pa.float32()), VECTOR_DIM, mask=pa.array(~valid)
    )
    columns: dict[str, Any] = {
        "batch": [row["digest"]] * n,
        "batch_index": [row["log_index"]] * n,
        "episode_id": ids,
        "task_id": col("task_id"),
        "env_version": [
            row.get("env") if v is None or v == row.get("env_digest") else v
            for v in (col("env_version").to_pylist() if "env_version" in names else [None] * n)
        ],
        "policy_version": col("policy_version", row.get("policy_version")),
        "seed": col("seed"),
        "return": col("return"),
        "num_steps": col("num_steps"),
        "termination_reason": reasons,
        "success": episode_success(ep),  # the one definition (ledger/rollouts/success.py)
        "judge_scores": judge_json,
        "judge_score": judge_mean,
        "cost_usd": col("cost_usd"),
        "language": col("language"),
        "task_type": col("task_type"),
        "invalid": col("invalid"),
        "safety_interventions": [f.safety_interventions if f else None for f in feats],
        "modality": [f.modality if f else None for f in feats],
        "fingerprint": [f.fingerprint if f else None for f in feats],
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


class _Sink:
    """Rows waiting to be written, and status changes to apply to rows already written."""

    def __init__(self, artifacts: Any, episodes: Any) -> None:
        self.artifacts, self.episodes = artifacts, episodes
        self.rows: list[dict[str, Any]] = []
        self.tables: list[pa.Table] = []
        self.pending = 0
        self.revoked: set[str] = set()
        self.erased: set[str] = set()
        self.batches = 0
        self.episode_count = 0
        self._seen: set[str] | None = None

    def seen(self, batch: str) -> bool:
        """True when an earlier entry already indexed this batch digest (then records it)."""
        if self._seen is None:
            done = self.artifacts.search().where("kind = 'rollout-batch'").select(["digest"])
            self._seen = set(done.limit(None).to_arrow().column("digest").to_pylist())
        if batch in self._seen:
            return True
        self._seen.add(batch)
        return False

    def add(self, row: dict[str, Any], table: pa.Table | None) -> None:
        self.rows.append(row)
        if table is not None and table.num_rows:
            self.tables.append(table)
            self.pending += table.num_rows
            self.episode_count += table.num_rows
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
        if kind == "revocation":
            self.revoked.add(digest)
            return
        self.erased.add(digest)
        kept = []
        for t in self.tables:
            left = t.filter(pc.not_equal(t.column("batch"), digest))
            self.pending -= t.num_rows - left.num_rows
            self.episode_count -= t.num_rows - left.num_rows
            kept.append(left)
        self.tables = kept

    def flush(self) -> None:
        if self.rows:
            self.artifacts.add(pa.Table.from_pylist(self.rows, schema=ARTIFACTS_SCHEMA))
        if self.tables:
            self.episodes.add(pa.concat_tables(self.tables))
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
        self.rows, self.tables, self.pending = [], [], 0
        self.revoked, self.erased = set(), set()


# --------------------------------------------------------------------------------------------
# The index


@dataclass(frozen=True)
class IndexUpdate:
    """What an update did: log entries ``start .. end`` indexed."""

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

    Every public method brings the index up to date with the log first (building it when it is
    absent, rebuilding it when it does not match the log), under a lock shared with other
    processes. Nothing is verified against it (see the module docstring).
    """

    def __init__(self, ledger: Ledger) -> None:
        """Attach to a ledger; nothing is read until a method is called."""
        self.ledger = ledger
        self.dir = ledger.root / "index" / "lance"
        self.state_path = self.dir / "state.json"
        self._db: Any = None
        self._depth = 0

    # -- state and locking ----------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / "index.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._depth = 1
            yield
        finally:
            self._depth = 0
            os.close(fd)

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

    def _write_state(self, size: int, last: str, *, pending: bool) -> None:
        body = {"format": INDEX_FORMAT, "size": size, "last": last, "pending": pending}
        write_file_atomic(self.state_path, json.dumps(body, sort_keys=True).encode(), durable=False)

    def _last_hash(self, size: int) -> str:
        return leaf_hash(self.ledger.log.entry(size - 1)).hex() if size else ""

    # -- building ---------------------------------------------------------------------------

    def update(self, *, on_progress: Callable[[int], None] | None = None) -> IndexUpdate:
        """Index the log entries after the last indexed size (build the index when absent).

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
        """Drop both tables and index the whole log again (``trajledger reindex``)."""
        with self._locked():
            return self._update(on_progress, rebuild=True)

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
        if usable and start == size:
            return IndexUpdate(start, size, False, 0, 0)
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
            for i, raw in enumerate(log.entries(lo, hi), start=lo):
                self._index_entry(i, raw, sink)
                if sink.pending >= _FLUSH_EPISODES:
                    sink.flush()
            if on_progress is not None:
                on_progress(hi - lo)
        sink.flush()
        for table in (artifacts, episodes):
            if table.stats()["fragment_stats"]["num_fragments"] > 32:
                _compact(table)
        self._write_state(size, self._last_hash(size), pending=False)
        return IndexUpdate(start, size, start == 0, sink.batches, sink.episode_count)

    def _index_entry(self, i: int, raw: bytes, sink: _Sink) -> None:
        try:
            entry = LogEntry.from_bytes(raw)
        except FormatError:
            return  # `log verify` reports it; the index only skips it
        row = _artifact_row(i, entry, _statement(self.ledger, entry))
        table = None
        if entry.kind == "rollout-batch":
            if sink.seen(entry.subject):
                row["data"] = "duplicate"  # its episodes are indexed with its first entry
            else:
                table, row["data"] = _batch_episodes(self.ledger, row)
                row["episodes_indexed"] = 0 if table is None else table.num_rows
        sink.add(row, table)
        if entry.kind in ("revocation", "erasure"):
            sink.flag(entry.kind, entry.subject)

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

    def _datasets(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.query(
            ARTIFACTS,
            "kind = 'dataset'",
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

    def contamination(
        self, train_batches: Sequence[str], other_batches: Sequence[str]
    ) -> list[Finding]:
        """Exact and near-duplicate episodes between a train set and holdout / regression sets.

        Each episode of ``other_batches`` with a match in ``train_batches`` gives one finding:
        exact when some train episode has the same content fingerprint, else near when a train
        episode of the same modality reaches the near-duplicate threshold (docs/audit-index.md);
        the finding names the best match and counts all matches.

        Returns:
            Findings sorted by kind (exact first), other batch and other episode.
        """
        cols = ["batch", "episode_id", "fingerprint", "modality", "num_steps", "vector"]
        train = self.query(EPISODES, columns=cols, batches=sorted(set(train_batches)))
        other = self.query(EPISODES, columns=cols, batches=sorted(set(other_batches)))
        labels = self._dataset_labels()
        findings: list[Finding] = []

        def finding(kind: str, sim: float, ti: int, oi: int, matches: int) -> Finding:
            tb, ob = train["batch"][ti].as_py(), other["batch"][oi].as_py()
            return Finding(
                kind,
                sim,
                tb,
                train["episode_id"][ti].as_py(),
                ob,
                other["episode_id"][oi].as_py(),
                matches,
                tuple(labels["train"].get(tb, ())),
                tuple(labels["other"].get(ob, ())),
            )

        # Exact: equal content fingerprints.
        by_fp: dict[str, list[int]] = defaultdict(list)
        for i, fp in enumerate(train["fingerprint"].to_pylist()):
            if fp is not None:
                by_fp[fp].append(i)
        exact: set[int] = set()
        for row, fp in enumerate(other["fingerprint"].to_pylist()):
            if fp in by_fp:
                exact.add(row)
                findings.append(finding("exact", 1.0, by_fp[fp][0], row, len(by_fp[fp])))
        # Near: cosine similarity of feature vectors, per modality, blockwise.
        for modality, threshold in (
            ("numeric", NEAR_NUMERIC_THRESHOLD),
            ("text", NEAR_TEXT_THRESHOLD),
        ):
            ti, tv = _vectors(train, modality)
            oi, ov = _vectors(other, modality, skip=exact)
            if not len(ti) or not len(oi):
                continue
            for o_lo in range(0, len(oi), 1024):
                block = ov[o_lo : o_lo + 1024]
                best = np.full(len(block), -2.0)
                arg = np.zeros(len(block), dtype=np.int64)
                count = np.zeros(len(block), dtype=np.int64)
                for t_lo in range(0, len(ti), 16384):
                    sims = block @ tv[t_lo : t_lo + 16384].T
                    count += (sims >= threshold).sum(axis=1)
                    j = sims.argmax(axis=1)
                    s = sims[np.arange(len(block)), j]
                    better = s > best
                    best[better], arg[better] = s[better], j[better] + t_lo
                for k in np.flatnonzero(count):
                    findings.append(
                        finding(
                            "near",
                            round(min(float(best[k]), 1.0), 6),
                            int(ti[arg[k]]),
                            int(oi[o_lo + k]),
                            int(count[k]),
                        )
                    )
        findings.sort(key=lambda f: (f.kind != "exact", f.other_batch, f.other_episode))
        return findings

    def _dataset_labels(self) -> dict[str, dict[str, list[str]]]:
        """batch -> refs of the train datasets holding it, and of the holdout/regression ones."""
        out: dict[str, dict[str, list[str]]] = {
            "train": defaultdict(list),
            "other": defaultdict(list),
        }
        for d in sorted(self._datasets(), key=lambda r: r["log_index"]):
            side = "train" if d["split"] == "train" else "other"
            label = f"{d['split']} {d['ref'] or d['digest']}"
            for b in d["batches"] or []:
                if label not in out[side][b]:
                    out[side][b].append(label)
        return out


def _vectors(
    t: pa.Table,
    modality: str,
    skip: AbstractSet[int] = frozenset(),
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Row numbers and vectors of one modality (numeric: long enough episodes only)."""
    mods = t["modality"].to_pylist()
    steps = t["num_steps"].to_pylist()
    vec = t["vector"]
    keep = [
        i
        for i in range(t.num_rows)
        if mods[i] == modality
        and i not in skip
        and vec[i].is_valid
        and (modality != "numeric" or (steps[i] or 0) >= MIN_NEAR_STEPS)
    ]
    if not keep:
        return np.zeros(0, dtype=np.int64), np.zeros((0, VECTOR_DIM), dtype=np.float32)
    rows = vec.take(pa.array(keep)).combine_chunks()
    values = np.asarray(rows.flatten().to_numpy(), dtype=np.float32).reshape(len(keep), VECTOR_DIM)
    return np.array(keep, dtype=np.int64), values


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
class StatsReport:
    """Segmented statistics of a batch, dataset or checkpoint."""

    kind: str
    ref: str
    digest: str
    batches: tuple[str, ...]
    by: tuple[str, ...]
    aggregate: Metrics
    segments: tuple[Segment, ...]

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
        }


def segment_stats(
    ledger: Ledger, ref: str, by: Sequence[str] = (), *, judge_key: str | None = None
) -> StatsReport:
    """Statistics of the episodes of a batch, dataset or checkpoint, segmented by columns.

    A checkpoint's episodes are those of the batches of the datasets it was trained on.

    Raises:
        RefError: ``ref`` names no batch, dataset or checkpoint.
        QueryError: a ``by`` column is not an episode column.
    """
    item = Catalog(ledger).resolve(ref, {"rollout-batch", "dataset", "checkpoint"})
    index = Index(ledger)
    with index._locked():
        batches = index.batches_of(item.digest, item.kind)
        aggregate, segments = index.stats(batches, by, judge_key=judge_key)
    return StatsReport(
        item.kind, item.ref, item.digest, tuple(batches), tuple(by), aggregate, segments
    )


def query_table(
    ledger: Ledger,
    table: str,
    where: str | None = None,
    *,
    columns: Sequence[str] | None = None,
    limit: int | None = None,
    within: str | None = None,
) -> pa.Table:
    """`Index.query`, with ``within`` a batch, dataset or checkpoint reference."""
    index = Index(ledger)
    batches = None
    if within is not None:
        item = Catalog(ledger).resolve(within, {"rollout-batch", "dataset", "checkpoint"})
        batches = index.batches_of(item.digest, item.kind)
    return index.query(table, where, columns=columns, limit=limit, batches=batches)


def reindex(ledger: Ledger, *, on_progress: Callable[[int], None] | None = None) -> IndexUpdate:
    """Drop the index and build it again from the log and the object store."""
    return Index(ledger).rebuild(on_progress=on_progress)


# --------------------------------------------------------------------------------------------
# Contamination


@dataclass(frozen=True)
class Finding:
    """An episode of a holdout / regression batch that duplicates a train episode.

    Attributes:
        kind: ``exact`` (same content fingerprint) or ``near`` (similar features).
        similarity: cosine similarity of the feature vectors (1.0 for exact).
        train_batch / train_episode: the best-matching train episode.
        other_batch / other_episode: the holdout or regression episode.
        matches: how many train episodes match it (exactly, or at the near threshold).
        train_datasets / other_datasets: ``"<split> NAME@VERSION"`` of the recorded datasets
            holding each batch.
    """

    kind: str
    similarity: float
    train_batch: str
    train_episode: str
    other_batch: str
    other_episode: str
    matches: int = 1
    train_datasets: tuple[str, ...] = field(default=())
    other_datasets: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        what = (
            "an exact duplicate"
            if self.kind == "exact"
            else f"a near duplicate (similarity {self.similarity:.4f})"
        )
        more = f" and {self.matches - 1} more" if self.matches > 1 else ""
        o = f" ({', '.join(self.other_datasets)})" if self.other_datasets else ""
        t = f" ({', '.join(self.train_datasets)})" if self.train_datasets else ""
        return (
            f"episode {self.other_episode} of batch {self.other_batch[:19]}…{o} is {what} of "
            f"train episode {self.train_episode} of batch {self.train_batch[:19]}…{t}{more}"
        )

    def to_json(self) -> dict[str, Any]:
        """The finding as JSON."""
        out = asdict(self)
        out["train_datasets"], out["other_datasets"] = (
            list(self.train_datasets),
            list(self.other_datasets),
        )
        return out


def split_contamination(ledger: Ledger, split: str, batches: Sequence[str]) -> list[Finding]:
    """Contamination of a set of batches meant for ``split``, against the recorded datasets.

    For a train set, its episodes are compared with those of every recorded holdout and
    regression dataset; for a holdout or regression set, with those of every recorded train
    dataset. Use it before recording a dataset (``dataset create``). The index is brought up
    to date (or built) first. Unverified: see the module docstring.

    Args:
        ledger: the ledger.
        split: ``train``, ``holdout`` or ``regression``.
        batches: the batch digests of the set.

    Returns:
        Findings; empty when there is no overlap.

    Raises:
        FormatError: an unknown split.
    """
    return _split_contamination(Index(ledger), split, batches)


def _split_contamination(index: Index, split: str, batches: Sequence[str]) -> list[Finding]:
    if split not in SPLITS:
        raise FormatError(f"split {split!r}: unknown, want one of {', '.join(SPLITS)}")
    with index._locked():
        other_side: set[str] = set()
        for d in index._datasets():
            if (d["split"] == "train") != (split == "train"):
                other_side.update(d["batches"] or [])
        if split == "train":
            return index.contamination(batches, sorted(other_side))
        return index.contamination(sorted(other_side), batches)


def contamination_findings(ledger: Ledger, dataset_digest: str) -> list[Finding]:
    """Contamination of a recorded dataset: `split_contamination` of its split and batches.

    Use it from the runner before training, or after ``dataset create`` has recorded it.

    Args:
        ledger: the ledger.
        dataset_digest: the dataset's ``sha256:<hex>`` (or any reference the catalog resolves).

    Raises:
        RefError: no such dataset.
    """
    digest = dataset_digest
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        digest = Catalog(ledger).resolve(dataset_digest, {"dataset"}).digest
    index = Index(ledger)
    with index._locked():
        row = index.artifact(digest, "dataset")
        if row is None:
            raise RefError(f"dataset {dataset_digest}: not recorded in this ledger")
        return _split_contamination(index, str(row["split"]), list(row["batches"] or []))
