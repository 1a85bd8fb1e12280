"""The audit index: LanceDB tables of every log entry and every episode, for audit questions.

Scope: a derived index under ``<ledger>/index/lance/`` with two tables, ``artifacts`` (one row
per log entry: kind, digest, name, version, time, signers, split, environment / evaluator /
policy of a batch, members of a dataset, datasets of a checkpoint, revoked / erased flags) and
``episodes`` (one row per episode of every indexed batch: the episode table's columns, an exact
content fingerprint and a feature vector for near-duplicate search). On it: SQL filters
(`query_table`, ``trajledger query``) and segmented statistics (`segment_stats`,
``trajledger stats``).

The package, by job (each module imports only those listed before it, and modules of
``ledger/`` below the index: never ``artifacts`` or ``home``):

- ``schema``: the tables' Arrow schemas, the index format, SQL quoting;
- ``rows``: log entries and a batch's episodes as rows;
- ``tables``: `Index` (the tables, their lock, incremental updates, queries), `query_table`,
  `reindex`;
- ``stats``: `segment_stats` and its metrics, a judge's calibration, a checkpoint's
  evaluations.

Kept up incrementally, off the recording path: `Index.update` adds the artifact rows of the log
entries after the last indexed size; a batch's episodes are indexed the first time a question
needs that batch (`Index.index_batches`), from the episode features kept with the batch since
it was recorded (``ledger.batch_features``; computed from its step file for older batches), so
indexing a batch reads its small features file and ``episodes.parquet``, streamed in row
groups; a sealed batch from the fingerprints its record publishes (its other columns null).
`Index.rebuild` (``trajledger reindex``) drops and rebuilds everything from the log and the
object store, with progress.

Duplicate and contamination checks (``dataset create``, the admission gate) do not use the
index: they compare the kept features (``ledger.contamination``), so only ``query``, ``stats``
and ``reindex`` load lancedb.

Non-scope: verification. NOTHING is verified against the index, and nothing it says is
evidence: it is built from unverified envelopes and data (a blob whose bytes do not hash to its
digest is skipped, not judged), it can be deleted or rebuilt at any time, and whoever can write
the ledger directory can write it.

Erasure: when an erasure is indexed, the batch's episode rows are deleted, so the index never
keeps derived copies of erased data; its artifact row stays, flagged ``erased``, and the batch
is never indexed again. A batch whose blobs are gone is indexed from its signed metadata alone.

Spec: docs/audit-index.md (tables, columns, metrics, the near-duplicate definition and its
thresholds). lancedb is imported only when an index is opened; ``trajledger --help`` never
loads it.
"""

from __future__ import annotations

from ..contamination import MIN_NEAR_STEPS, NEAR_NUMERIC_THRESHOLD, NEAR_TEXT_THRESHOLD
from ..episode_vectors import VECTOR_DIM
from ..progress import ProgressFactory
from .schema import ARTIFACTS_SCHEMA, EPISODES_SCHEMA, QueryError
from .stats import (
    JUDGE_PASS,
    WARN_RELATIVE,
    WARN_STANDARD_ERRORS,
    Calibration,
    EvaluationRow,
    Metrics,
    Segment,
    StatsReport,
    episode_stats,
    segment_stats,
)
from .tables import Index, IndexUpdate, query_table, reindex

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
    "Index",
    "IndexUpdate",
    "Metrics",
    "ProgressFactory",
    "QueryError",
    "Segment",
    "StatsReport",
    "episode_stats",
    "query_table",
    "reindex",
    "segment_stats",
]
