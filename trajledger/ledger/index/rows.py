"""Rows of the audit index: an artifacts row per log entry, episode rows per batch.

Scope: `artifact_row` reads a log entry's statement with its kind's typed reader
(``verify.kinds``) into the columns of ``artifacts`` (a record that does not read still gives a
row: kind, digest, signers); `episode_table` turns a chunk of ``episodes.parquet`` and the
features of the same episodes (``ledger.batch_features``) into ``episodes`` rows; `aligned`
pairs the two streams, checking that they list the same episodes in the same order.
Non-scope: the tables themselves (``index.tables``), verifying anything.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import FormatError, ProvenanceError
from trajledger.verify.kinds import KINDS
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.other_predicates import Refusal
from trajledger.verify.predicates import (
    Approval,
    Dataset,
    Environment,
    Erasure,
    Evaluator,
    Predicate,
    Provenance,
    Revocation,
    RolloutBatch,
)
from trajledger.verify.statement import Statement

from ..episode_features import FeatureChunk
from ..episode_vectors import VECTOR_DIM
from ..errors import LedgerError
from ..rollouts.success import episode_success
from .schema import ARTIFACTS_SCHEMA, EPISODES_SCHEMA, PENDING

if TYPE_CHECKING:
    from ..home import LedgerHome

__all__ = [
    "UNUSABLE",
    "UNUSABLE_BATCH",
    "Unusable",
    "aligned",
    "artifact_row",
    "episode_table",
    "statement_of",
]

UNUSABLE: tuple[type[BaseException], ...] = (
    ProvenanceError, LedgerError, pa.ArrowException, OSError, ValueError, TypeError, KeyError,
)  # fmt: skip
"""Why a batch's data cannot be indexed (skipped, never fatal: the index keeps working on
whatever a ledger holds)."""


def statement_of(ledger: LedgerHome, envelope: str) -> Statement | None:
    """The statement of an envelope (unverified: the index is derived data); None when the
    envelope is missing or unreadable."""
    try:
        return Statement.from_bytes(Envelope.from_bytes(ledger.store.get(envelope)).payload)
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


def artifact_row(index: int, entry: LogEntry, st: Statement | None) -> dict[str, Any]:
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
# A batch's episodes


class Unusable(Exception):
    """A batch file that cannot be read, does not verify, or breaks the expected order."""


UNUSABLE_BATCH: tuple[type[BaseException], ...] = (*UNUSABLE, Unusable)


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


def episode_table(
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


def aligned(
    episodes: Iterator[pa.RecordBatch], features: Iterator[FeatureChunk] | None
) -> Iterator[tuple[pa.Table, FeatureChunk | None]]:
    """Pair each chunk of episode rows with the features of the same episodes.

    Both files list episodes in the order of their first step (as recording writes them), so
    the two streams advance together with a small buffer.

    Raises:
        Unusable: the step file's episodes are not those of the episode file, in order.
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
                raise Unusable("steps.parquet holds fewer episodes than episodes.parquet")
            pending.append(nxt)
            have += len(nxt)
        got = FeatureChunk.concat(pending)
        mine, rest = got.slice(0, t.num_rows), got.slice(t.num_rows, len(got))
        pending, have = ([rest] if len(rest) else []), len(rest)
        ids = [str(i) for i in t.column("episode_id").to_pylist()]
        if ids != mine.episode_ids:
            raise Unusable("steps.parquet and episodes.parquet list episodes in another order")
        yield t, mine
    if features is not None and (have or next(features, None) is not None):
        raise Unusable("steps.parquet holds episodes that episodes.parquet does not")
