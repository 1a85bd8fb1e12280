"""The audit index's tables: their Arrow schemas, format version, and SQL helpers.

Scope: ``artifacts`` (one row per log entry) and ``episodes`` (one row per episode of every
indexed batch), as docs/audit-index.md lists their columns; the index format (a change rebuilds
every index); quoting values into the LanceDB (DataFusion) SQL the index runs, and its errors
as one readable line.
Non-scope: filling the tables (``index.rows``, ``index.tables``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pyarrow as pa

from trajledger.verify.kinds import NAMED as NAMED_KINDS

from ..episode_features import FEATURE_VERSION
from ..episode_vectors import VECTOR_DIM
from ..errors import LedgerError

__all__ = [
    "ARTIFACTS",
    "ARTIFACTS_SCHEMA",
    "EPISODES",
    "EPISODES_SCHEMA",
    "EPISODE_COLUMNS",
    "INDEX_FORMAT",
    "NAMED_SQL",
    "PENDING",
    "QueryError",
    "one_expression",
    "sql_list",
    "sql_message",
]

INDEX_FORMAT = 2 * 100 + FEATURE_VERSION
"""Version of the tables and of the feature vectors; a change rebuilds every index
(202: batches indexed lazily, feature version 2; 203: feature version 3, episode features
taken from the file kept with each batch)."""

ARTIFACTS = "artifacts"
EPISODES = "episodes"
PENDING = "pending"
"""``artifacts.data`` of a batch whose episodes are not indexed yet."""

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

EPISODE_COLUMNS = tuple(n for n in EPISODES_SCHEMA.names if n != "vector")
"""The episode columns other than ``vector`` (what ``--by`` and ``--columns`` may name)."""


class QueryError(LedgerError):
    """A filter or column name the index cannot use (the CLI maps it to a usage error)."""


def sql_message(e: BaseException) -> str:
    """LanceDB's error as one line, without its SQL wrapper and Rust source locations."""
    message = " ".join(str(e).split()).removeprefix("Invalid input, ")
    parse = re.search(r"sql parser error: (.*?)\)?$", message)
    if parse:
        return f"SQL syntax error: {parse.group(1)}"
    message = message.split("Invalid user input: ", 1)[-1]
    return re.sub(r",? /\S+\.rs:\d+:\d+", "", message)


def one_expression(where: str) -> str:
    """A user's filter as one parenthesised expression, as LanceDB must run it.

    LanceDB parses the first expression of a filter and ignores what follows it: ``return > 1
    garbage`` ran as ``return > 1``, and ``x) OR (true`` pasted before another condition (the
    batches of ``--in``) closed the parenthesis around it and dropped that condition. So a
    ``)`` outside quotes and comments that closes more than the filter opened is refused, and
    the filter is wrapped in parentheses (the closing one on a line of its own, after a line
    comment): LanceDB then refuses whatever follows the first expression (``Expected: ),
    found: garbage``).

    Raises:
        QueryError: a ``)`` the filter did not open.
    """
    depth, i = 0, 0
    ends = {"'": "'", '"': '"', "`": "`", "--": "\n", "/*": "*/"}
    while i < len(where):
        start = next((s for s in ends if where.startswith(s, i)), None)
        if start is not None:  # a quoted string or name, or a comment: skipped whole
            end = where.find(ends[start], i + len(start))
            if end < 0:
                break  # unterminated: LanceDB says so
            i = end + len(ends[start])
            continue
        depth += {"(": 1, ")": -1}.get(where[i], 0)
        if depth < 0:
            raise QueryError(f"--where {where!r}: the ')' at character {i + 1} closes a "
                             "parenthesis the filter did not open; a filter is one expression")
        i += 1
    return f"(\n{where}\n)"


def sql_list(values: Iterable[str]) -> str:
    """Values quoted as the items of an SQL list (quotes doubled)."""
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


NAMED_SQL = sql_list(sorted(NAMED_KINDS))
"""The named kinds (artifacts), as an SQL list."""
