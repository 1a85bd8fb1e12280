"""A mapped episode, and `ChunkBuilder`, which collects mapped episodes into chunks.

Scope: `Episode` (what a record mapping gives: steps, attributes, the episode's reward and end;
from the common chat record, its steps already as the builder keeps them), a step as the builder
keeps it (a tuple of `_ROW_FIELDS`; `LATENCY`: where the latency and the token counts go), and
`ChunkBuilder`, which checks that episode ids are unique, gives the default ids, and builds the
columns of `RolloutChunk` objects of bounded size. A module below the mappings: they make what
it takes, and the record readers (``readers.py``, ``reader_process.py``) drive it.
Non-scope: mapping records (``formats.py``, ``chat.py``, ``trl_verl.py``), what a chunk is
(``chunks.py``).
Spec: ``schemas/rollout.v3.md`` (the step and episode tables).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Final

import numpy as np
import pyarrow as pa

from .chunks import CHUNK_TEXT_BYTES, ReaderOptions, RecordProblems, RolloutChunk
from .problems import ProblemCollector
from .schema import EPISODE_ATTR_SCHEMA, STEP_SCHEMA

__all__ = ["LATENCY", "ChunkBuilder", "Episode", "repeated_id"]


_STEP_FIELDS: Final = (
    "role",
    "content",
    "reasoning_content",
    "tool_calls",
    "tool_results",
    "action_logprob",
    "timestamp",
    "latency_ms",
    "prompt_tokens",
    "completion_tokens",
    "model_id",
    "cost_usd",
    "safety_interventions",
    "extras",
)

_ROW_FIELDS: Final = ("reward", *_STEP_FIELDS)
"""The fields of a step as `ChunkBuilder` keeps it (a tuple), in this order."""
_ROW: Final = itemgetter(*_ROW_FIELDS)
_ROW_INDEX: Final = {name: i for i, name in enumerate(_ROW_FIELDS)}
_CONTENT: Final = _ROW_INDEX["content"]
LATENCY: Final = _ROW_INDEX["latency_ms"]  # (then prompt_tokens and completion_tokens)
_ATTR_NAMES: Final = tuple(
    n for n in EPISODE_ATTR_SCHEMA.names if n not in ("episode_id", "extras")
)
"""The episode attributes a mapping gives (``Episode.attrs``); `ChunkBuilder` sets the id and
``extras``. An episode's attributes are kept as ``(id, extras, *these)``."""


@dataclass
class Episode:
    episode_id: str | None
    steps: list[dict[str, Any]]
    attrs: dict[str, Any]
    reward: float | None  # episode-level reward, put on the last step
    truncated: bool
    extras: dict[str, str] = field(default_factory=dict)
    id_suffix: str = ""  # for the default id of a pair's episodes ("/chosen", "/rejected")
    rows: list[tuple[Any, ...]] | None = None
    """`_plain_chat`'s steps, as `ChunkBuilder` keeps them (``_ROW_FIELDS``, the episode's
    reward already on them); ``steps`` and ``reward`` are then empty."""


class ChunkBuilder:
    """Collects mapped episodes into `RolloutChunk` objects, checking episode ids are unique.

    Default ids are ``<prefix>line-<n>`` (``row-<n>`` for table rows), with ``/chosen`` and
    ``/rejected`` for a preference pair's episodes.
    """

    def __init__(self, collector: ProblemCollector, opts: ReaderOptions, meta: Mapping[str, Any]):
        """Start empty.

        Args:
            collector: where problems go.
            opts: reader options (the id prefix).
            meta: batch metadata, given with the first chunk.
        """
        self.c = collector
        self.opts = opts
        self._meta: Mapping[str, Any] | None = meta
        self._ids: dict[str, int] = {}
        self._reset()

    def _reset(self) -> None:
        self._rows: list[tuple[Any, ...]] = []  # every step's `_ROW_FIELDS`, in order
        self._episodes: list[tuple[str, int, bool]] = []  # (id, steps, truncated)
        self._attrs: list[tuple[Any, ...]] = []  # each episode's `EPISODE_ATTR_SCHEMA` values
        self.rows = 0
        self.text_bytes = 0

    def add(self, episodes: list[Episode], rec: RecordProblems) -> None:
        """Check the ids of one record's episodes and queue them (unless the record failed)."""
        ids = self.ids_of(episodes, rec)
        self.check_ids(ids, rec)
        self.take(ids, episodes, rec)

    def ids_of(self, episodes: list[Episode], rec: RecordProblems) -> list[str]:
        """The episode ids of one record's episodes: given, or ``<prefix><unit>-<n>``."""
        ids = []
        for ep in episodes:
            eid = ep.episode_id
            if eid is None:
                eid = f"{self.opts.id_prefix}{rec.unit}-{rec.number}{ep.id_suffix}"
                if ep.id_suffix and ep.attrs.get("group_id") is None:
                    ep.attrs["group_id"] = f"{self.opts.id_prefix}{rec.unit}-{rec.number}"
            ids.append(eid)
        return ids

    def check_ids(self, ids: list[str], rec: RecordProblems) -> None:
        """Report ids given before (on an earlier line or row); remember those of a good record."""
        for eid in ids:
            if eid in self._ids:
                rec.error("episode_id", repeated_id(eid, rec.unit, self._ids[eid]))
        if not rec.failed:
            for eid in ids:
                self._ids[eid] = rec.number

    def take(self, ids: list[str], episodes: list[Episode], rec: RecordProblems) -> None:
        """Queue a record's episodes under ``ids``, unless the record failed."""
        if not rec.failed:
            for eid, ep in zip(ids, episodes, strict=True):
                self.queue(eid, ep)

    def queue(self, eid: str, ep: Episode) -> None:
        """Queue one episode of a record that has no problem, under ``eid`` (`take`'s step)."""
        rows = ep.rows
        if rows is None:
            steps = ep.steps
            if ep.reward is not None:  # an episode-level reward: on the last step, 0 before it
                for i, step in enumerate(steps):
                    if step["reward"] is None:
                        step["reward"] = ep.reward if i == len(steps) - 1 else 0.0
            rows = list(map(_ROW, steps))
        n = len(rows)
        self._rows.extend(rows)
        self._episodes.append((eid, n, ep.truncated))
        self.text_bytes += sum(len(c) for row in rows if (c := row[_CONTENT]) is not None)
        extras = list(ep.extras.items()) if ep.extras else None
        self._attrs.append((eid, extras, *map(ep.attrs.get, _ATTR_NAMES)))
        self.rows += n

    @property
    def episodes(self) -> int:
        """Episodes queued."""
        return len(self._episodes)

    def full(self, batch_rows: int) -> bool:
        """Whether the chunk should be flushed now."""
        return self.rows >= batch_rows or self.text_bytes >= CHUNK_TEXT_BYTES

    def flush(self) -> RolloutChunk:
        """The queued episodes as one chunk; the builder starts empty again."""
        columns = list(zip(*self._rows, strict=True)) or [()] * len(_ROW_FIELDS)
        flags = self._episode_columns()
        steps = pa.RecordBatch.from_arrays(
            [flags[f.name] if f.name in flags else self._column(f.name, f.type, columns)
             for f in STEP_SCHEMA], schema=STEP_SCHEMA,
        )  # fmt: skip
        names = ("episode_id", "extras", *_ATTR_NAMES)
        given = dict(zip(names, zip(*self._attrs, strict=True), strict=True)) if self._attrs else {}
        attrs = pa.RecordBatch.from_arrays(
            [pa.array(given.get(f.name, ()), type=f.type) for f in EPISODE_ATTR_SCHEMA],
            schema=EPISODE_ATTR_SCHEMA,
        )
        meta, self._meta = self._meta, None
        self._reset()
        return RolloutChunk(steps, attrs, meta or None)

    def _column(self, name: str, typ: pa.DataType, columns: list[tuple[Any, ...]]) -> pa.Array:
        """One step column of the queued episodes (``columns``: the rows' fields, transposed)."""
        n = self.rows
        if name in ("discount", "obs", "action", "info"):
            return pa.nulls(n, typ)
        if name in _ROW_INDEX:
            values: Sequence[Any] = columns[_ROW_INDEX[name]]
            if name == "extras":
                values = [list(v.items()) if v else v for v in values]
            elif name == "reward":
                values = [None if v is None else float(v) for v in values]
            return _list_array(values, typ)
        raise AssertionError(name)  # the columns of `_episode_columns`

    def _episode_columns(self) -> dict[str, pa.Array]:
        """The step columns that come from the queued episodes (id, step, flags), made once."""
        ids, lengths, ends = zip(*self._episodes, strict=True) if self._episodes else ((), (), ())
        length = np.array(lengths, dtype=np.int64)
        truncated = np.array(ends, dtype=bool)
        episode = np.repeat(np.arange(len(length)), length)
        first = np.cumsum(length) - length
        step = np.arange(self.rows, dtype=np.int64) - first[episode]
        last = step == (length - 1)[episode]
        columns = {
            "step": step,
            "is_first": step == 0,
            "is_last": last,
            "terminated": last & ~truncated[episode],
            "truncated": last & truncated[episode],
        }
        out = {k: pa.array(v, STEP_SCHEMA.field(k).type) for k, v in columns.items()}
        out["episode_id"] = pa.array(ids, STEP_SCHEMA.field("episode_id").type).take(episode)
        return out


def repeated_id(eid: str, unit: str, first: int) -> str:
    """The problem of an episode id given again (first on line or row ``first``)."""
    return f"episode {eid!r} already given on {unit} {first}"


def _list_array(values: Sequence[Any], typ: pa.DataType) -> pa.Array:
    if pa.types.is_timestamp(typ):
        return pa.array(values, type=pa.int64()).cast(typ)
    return pa.array(values, type=typ)
