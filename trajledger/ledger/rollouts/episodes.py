"""The episode table derived from steps: returns, lengths, termination, merged attributes.

Scope: `EpisodeBuilder` derives the episode table from a stream of step batches in
`STEP_SCHEMA` (an episode may span batches), merging the episode attributes an input gives;
`derive_episodes` does it for a whole table.
Non-scope: normalising the steps (``normalise.py``) and validating them (``validate.py``).
Spec: ``schemas/rollout.v3.md`` sections "Episode table" and "Files" (how returns are summed).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .arrays import bools, floats, is_stringish
from .idset import IdSet
from .normalise import TensorTypes, conform_batch, normalise_episodes, normalise_steps
from .problems import ProblemCollector, RolloutValidationError

__all__ = ["SPILL_STEPS", "EpisodeBuilder", "derive_episodes"]

SPILL_STEPS = 65_536  # an open episode's values past this many steps go to disk


class _Carried:
    """One column's values of the open episode: pieces in memory, past `SPILL_STEPS` steps
    appended to an unlinked file in a 0700 directory, and summed at the end from the file
    mapped (`np.memmap`) as ``np.add.reduceat`` sums the whole vector: bit for bit the same."""

    def __init__(self, spill: _Spill) -> None:
        self.spill = spill
        self.pieces: list[npt.NDArray[np.float64]] = []
        self.n = 0
        self.file: IO[bytes] | None = None

    def add(self, values: npt.NDArray[np.float64]) -> None:
        self.pieces.append(np.array(values, dtype=np.float64))  # a copy: not the whole batch
        self.n += len(values)
        if self.file is None and self.n > SPILL_STEPS:
            self.file = tempfile.TemporaryFile(dir=self.spill.directory())  # noqa: SIM115
        if self.file is not None:
            for piece in self.pieces:
                self.file.write(piece.tobytes())
            self.pieces = []

    def total(self) -> float:
        """The sum of the values, as ``np.add.reduceat(whole, [0])[0]`` gives it."""
        if self.file is None:
            whole = self.pieces[0] if len(self.pieces) == 1 else np.concatenate(self.pieces)
            return float(np.add.reduceat(whole, [0])[0]) if self.n else 0.0
        self.file.flush()
        if os.fstat(self.file.fileno()).st_size != 8 * self.n:
            raise OSError("an open episode's spilled values are shorter than written")
        mapped = np.memmap(self.file, dtype=np.float64, mode="r", shape=(self.n,))
        try:
            return float(np.add.reduceat(mapped, [0])[0])
        finally:
            del mapped

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        self.pieces = []


class _Spill:
    """The builder's spill directory (0700, made on first use, removed by `close` or, at the
    latest, when the builder is collected)."""

    def __init__(self, parent: str | Path | None) -> None:
        self.parent = parent
        self.path: str | None = None
        self._finalizer: Callable[[], object] | None = None

    def directory(self) -> str:
        if self.path is None:
            self.path = tempfile.mkdtemp(prefix="trajledger-returns-", dir=self.parent)
            self._finalizer = weakref.finalize(self, _remove_dir, self.path)
        return self.path

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self.path = None


def _remove_dir(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(path)  # its files were unlinked when made


@dataclass
class _OpenEpisode:
    """The episode whose steps reached the end of the last batch (it may continue)."""

    episode_id: str | None
    rewards: _Carried
    reward_count: int
    costs: _Carried
    cost_count: int
    terminated: bool
    truncated: bool

    def close(self) -> None:
        self.rewards.close()
        self.costs.close()


class EpisodeBuilder:
    """Derives the episode table from a stream of step batches in `STEP_SCHEMA`.

    An episode may span batches: its rewards are carried until its last step arrives, and its
    return is then summed over its full reward vector with ``np.add.reduceat``, whose result
    depends only on the values summed. So the episode table does not depend on where the input
    was cut into batches.

    The return is null when none of the episode's steps has a reward (data without rewards).
    Given episode attributes (`add_attrs`) are merged in by episode id when the episode is
    complete: ``termination_reason``, ``success``, ``cost_usd`` and ``invalid`` given override
    the derived ones; a given ``return`` or ``num_steps`` that disagrees with the steps is a
    problem. ``success`` is derived from a ``termination_reason`` of ``success`` (true) or
    ``failure`` (false). A batch that could not be converted is passed over with `skip`.
    """

    def __init__(
        self,
        collector: ProblemCollector | None = None,
        tensors: TensorTypes | None = None,
        spill: str | Path | None = None,
    ) -> None:
        """Start before the first step.

        Args:
            collector: where problems go; a new one when None.
            tensors: the batch's tensor types (``final_obs`` follows ``obs``); new when None.
            spill: a private directory under which an open episode's rewards and costs past
                `SPILL_STEPS` steps are kept on disk; the system's temporary one when None.
        """
        self._spill = _Spill(spill)
        self.collector = collector if collector is not None else ProblemCollector()
        self.tensors = tensors if tensors is not None else TensorTypes()
        self._open: _OpenEpisode | None = None
        self._pending: pa.Table | None = None
        self._attr_rows = 0
        self._attr_ids = IdSet()  # compact: one id each of a batch's episodes
        self._episode_rows = 0
        self._drop_next = False  # after `skip`: the next episode may lack its first steps
        self._empty: tuple[pa.Schema, pa.RecordBatch] | None = None

    def _no_episodes(self) -> pa.RecordBatch:
        """No rows in the episode schema as the tensor types now have it, made once per schema
        (a stream cut into single steps asks for one per step; building it costs a millisecond)."""
        schema = self.tensors.episode_schema()
        if self._empty is None or not self._empty[0].equals(schema, check_metadata=True):
            self._empty = (schema, pa.RecordBatch.from_arrays(  # (a third of from_pylist's)
                [pa.nulls(0, f.type) for f in schema], schema=schema))
        return self._empty[1]

    def add_attrs(self, attrs: pa.RecordBatch | pa.Table) -> None:
        """Queue given attributes of episodes (in `EPISODE_ATTR_SCHEMA`).

        Args:
            attrs: rows of episode attributes, each merged when its episode completes.
        """
        table = pa.Table.from_batches([attrs]) if isinstance(attrs, pa.RecordBatch) else attrs
        seen = self._attr_ids
        ids = table.column("episode_id").to_pylist()
        if table.column("episode_id").null_count == 0 and not seen.maybe_any(ids):
            seen.add(ids)  # none given before: the checks below would find nothing
            ids = []
        for eid in ids:
            if eid is None:
                self.collector.add(
                    "attrs:null-id", "episode attributes without an episode_id", column="episode_id"
                )
            elif eid in seen:
                self.collector.add(
                    "attrs:duplicate",
                    f"episode {eid!r} is given attributes twice",
                    column="episode_id",
                )
            else:
                seen.add([eid])
        self._attr_rows += table.num_rows
        self._pending = table if self._pending is None else pa.concat_tables([self._pending, table])

    def skip(self, steps: pa.RecordBatch) -> None:
        """Pass over a batch that could not be converted (its problems are reported already).

        The episodes it touches cannot be derived whole, and a partial episode would only
        bring false problems (a given return that disagrees), so none of them is emitted: the
        open episode is dropped, and so is the next episode to complete (it may continue one of
        the skipped rows). Their given attributes are dropped too, so that they are not
        reported as having no steps.

        Args:
            steps: the batch as the input gave it.
        """
        if not steps.num_rows:
            return
        if self._open is not None:
            self._take_attrs(pa.array([self._open.episode_id], type=pa.string()))
            self._open.close()
            self._open = None
        ids = _raw_ids(steps)
        if ids is not None:
            self._take_attrs(ids)
        self._drop_next = True

    def feed(self, steps: pa.RecordBatch) -> pa.RecordBatch:
        """Take the next step batch; return the episodes it completes.

        Args:
            steps: the next rows, in `STEP_SCHEMA`.

        Returns:
            Episodes that ended before the batch's last episode (which stays open until the
            next batch shows whether it continues), in `EPISODE_SCHEMA`.
        """
        try:
            return self._feed(steps)
        except BaseException:
            self.close()  # the open episode's spilled values removed
            raise

    def close(self) -> None:
        """Drop the open episode and remove its spilled values (after an error, or when the
        reader stops early; `finish` does it too)."""
        if self._open is not None:
            self._open.close()
            self._open = None
        self._spill.close()

    def _feed(self, steps: pa.RecordBatch) -> pa.RecordBatch:
        n = steps.num_rows
        if n == 0:
            return self._no_episodes()
        ids = steps.column("episode_id")
        reward_col = steps.column("reward")
        rewards = floats(reward_col)
        reward_ok = reward_col.is_valid().to_numpy(zero_copy_only=False).astype(np.int64)
        cost_col = steps.column("cost_usd")
        costs = floats(cost_col)
        cost_ok = cost_col.is_valid().to_numpy(zero_copy_only=False).astype(np.int64)
        term = bools(steps.column("terminated"))
        trunc = bools(steps.column("truncated"))
        starts = np.flatnonzero(bools(steps.column("is_first")))
        if not len(starts) or starts[0] != 0:
            starts = np.concatenate([[0], starts])
        opened = self._open
        continues = opened is not None and not bools(steps.column("is_first"))[0]

        seg_ids: list[str | None] = ids.take(pa.array(starts)).to_pylist()
        returns = np.add.reduceat(rewards, starts)
        reward_counts = np.add.reduceat(reward_ok, starts)
        cost_sums = np.add.reduceat(costs, starts)
        cost_counts = np.add.reduceat(cost_ok, starts)
        counts = np.diff(np.concatenate([starts, [n]]))
        ends = np.concatenate([starts[1:], [n]]) - 1
        seg_term = term[ends]
        seg_trunc = trunc[ends]
        first_end = int(starts[1]) if len(starts) > 1 else n

        done_ids: list[str | None] = []
        done_returns: list[float | None] = []
        done_counts: list[int] = []
        done_term: list[bool] = []
        done_trunc: list[bool] = []
        done_cost: list[float | None] = []

        k = len(starts) - 1  # the last segment stays open
        carried: _OpenEpisode | None = None
        if opened is not None and continues:
            # The open episode goes on: its values are carried as pieces (or on disk) and
            # summed over the whole vector when it ends.
            opened.rewards.add(rewards[:first_end])
            opened.costs.add(costs[:first_end])
            reward_counts[0] += opened.reward_count
            cost_counts[0] += opened.cost_count
            counts[0] = opened.rewards.n
            seg_ids[0] = opened.episode_id
            if k == 0:
                carried = opened
            else:
                returns[0] = opened.rewards.total()
                cost_sums[0] = opened.costs.total()
                opened.close()
        elif opened is not None:
            done_ids.append(opened.episode_id)
            done_returns.append(_return(opened))
            done_counts.append(opened.rewards.n)
            done_term.append(opened.terminated)
            done_trunc.append(opened.truncated)
            done_cost.append(opened.costs.total() if opened.cost_count else None)
            opened.close()
        self._open = None
        if carried is None:
            last_start = int(starts[-1])
            carried = _OpenEpisode(
                seg_ids[k], _Carried(self._spill), 0, _Carried(self._spill), 0, False, False
            )
            carried.rewards.add(rewards[last_start:])
            carried.costs.add(costs[last_start:])
        carried.episode_id = seg_ids[k]
        carried.reward_count = int(reward_counts[k])
        carried.cost_count = int(cost_counts[k])
        carried.terminated = bool(seg_term[k])
        carried.truncated = bool(seg_trunc[k])
        self._open = carried
        done_ids.extend(seg_ids[:k])
        done_returns.extend(
            [
                float(r) if m else None
                for r, m in zip(returns[:k].tolist(), reward_counts[:k].tolist(), strict=True)
            ]
        )
        done_counts.extend(counts[:k].tolist())
        done_term.extend(seg_term[:k].tolist())
        done_trunc.extend(seg_trunc[:k].tolist())
        done_cost.extend(
            [
                float(s) if m else None
                for s, m in zip(cost_sums[:k].tolist(), cost_counts[:k].tolist(), strict=True)
            ]
        )
        return self._emit(done_ids, done_returns, done_counts, done_term, done_trunc, done_cost)

    def finish(self) -> pa.RecordBatch:
        """Close the last episode; report given attributes whose episode had no steps.

        Returns:
            The last episode (or no rows when there were no steps), in `EPISODE_SCHEMA`.
        """
        opened = self._open
        try:
            if opened is None:
                out = self._no_episodes()
            else:
                out = self._emit(
                    [opened.episode_id],
                    [_return(opened)],
                    [opened.rewards.n],
                    [opened.terminated],
                    [opened.truncated],
                    [opened.costs.total() if opened.cost_count else None],
                )
        finally:
            self.close()
        if self._pending is not None and self._pending.num_rows:
            for eid in self._pending.column("episode_id").to_pylist():
                if eid is not None:
                    self.collector.add(
                        "attrs:no-steps",
                        f"episode {eid!r} has attributes but no steps",
                        column="episode_id",
                    )
            self._pending = None
        return out

    def _emit(
        self,
        ids: list[str | None],
        returns: list[float | None],
        counts: list[int],
        term: list[bool],
        trunc: list[bool],
        costs: list[float | None],
    ) -> pa.RecordBatch:
        if self._drop_next and ids:
            self._drop_next = False
            self._take_attrs(pa.array(ids[:1], type=pa.string()))
            ids, returns, counts = ids[1:], returns[1:], counts[1:]
            term, trunc, costs = term[1:], trunc[1:], costs[1:]
        n = len(ids)
        if not n:
            return self._no_episodes()
        id_arr = pa.array(ids, type=pa.string())
        reason = pa.array(
            [
                "terminated" if t else "truncated" if u else None
                for t, u in zip(term, trunc, strict=True)
            ],
            type=pa.string(),
        )
        cols: dict[str, pa.Array] = {
            "episode_id": id_arr,
            "return": pa.array(returns, type=pa.float64()),
            "num_steps": pa.array(counts, type=pa.int64()),
            "termination_reason": reason,
            "cost_usd": pa.array(costs, type=pa.float64()),
        }
        attrs = self._take_attrs(id_arr)
        schema = self.tensors.episode_schema()
        arrays = []
        for field in schema:
            name = field.name
            given = attrs.column(name).combine_chunks() if attrs is not None else None
            if name in ("return", "num_steps"):
                if given is not None and given.null_count < n:
                    self._check_given(name, given, cols[name], id_arr)
                arrays.append(cols[name])
            elif name in cols:
                arrays.append(cols[name] if given is None else pc.coalesce(given, cols[name]))
            elif name == "success":
                reason = arrays[schema.get_field_index("termination_reason")]
                derived = pc.if_else(
                    pc.equal(reason, "success"),
                    True,
                    pc.if_else(pc.equal(reason, "failure"), False, pa.scalar(None, pa.bool_())),
                )
                arrays.append(derived if given is None else pc.coalesce(given, derived))
            elif name == "invalid":
                arrays.append(
                    pa.array(np.zeros(n, dtype=bool))
                    if given is None
                    else pc.fill_null(given, False)
                )
            elif name == "final_obs" and given is not None and given.type != field.type:
                arrays.append(self._final_obs(given, field, id_arr))
            else:
                arrays.append(given if given is not None else pa.nulls(n, field.type))
        self._episode_rows += n
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _final_obs(self, given: pa.Array, field: pa.Field, ids: pa.Array) -> pa.Array:
        """Given final observations in the type of the batch's ``obs``, or nulls and a problem."""
        if given.null_count == len(given):
            return pa.nulls(len(given), field.type)
        try:
            out = given.cast(field.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            self.collector.add(
                "final_obs:type",
                f"final_obs of episode {ids[0].as_py()!r} has type {given.type}, the "
                f"observations are {field.type}",
                column="final_obs",
            )
            return pa.nulls(len(given), field.type)
        return out

    def _take_attrs(self, ids: pa.Array) -> pa.Table | None:
        pending = self._pending
        if pending is None or not pending.num_rows:
            return None
        pending_ids = pending.column("episode_id")
        where = pc.index_in(ids, value_set=pending_ids)
        if where.null_count == len(where):
            return None
        taken = pending.take(where)
        left = pending.filter(pc.invert(pc.is_in(pending_ids, value_set=ids)))
        self._pending = left.combine_chunks() if left.num_rows else None
        return taken

    def _check_given(self, name: str, given: pa.Array, derived: pa.Array, ids: pa.Array) -> None:
        g = floats(given)
        d = floats(derived)
        has = given.is_valid().to_numpy(zero_copy_only=False)
        known = derived.is_valid().to_numpy(zero_copy_only=False)
        tol = 1e-9 * np.maximum(1.0, np.abs(d))
        bad = np.flatnonzero(has & ~(known & (np.abs(g - d) <= tol)))
        what = "sum of its rewards" if name == "return" else "number of its steps"
        self.collector.add_rows(
            f"{name}:mismatch",
            bad,
            self._episode_rows,
            name,
            lambda i: (
                f"episode {ids[i].as_py()!r}: given {name} {_num_text(g[i])}, the {what} is "
                f"{_num_text(d[i]) if known[i] else 'null (no step has a reward)'}"
            ),
        )


def _raw_ids(steps: pa.RecordBatch) -> pa.Array | None:
    """The episode ids of an unconverted batch as strings (bytes kept as they are), or None."""
    if steps.schema.get_all_field_indices("episode_id") != [
        steps.schema.get_field_index("episode_id")
    ]:
        return None
    ids = steps.column("episode_id")
    t = ids.type
    try:
        if pa.types.is_dictionary(t):
            ids = ids.dictionary_decode()
            t = ids.type
        if pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t):
            ids = ids.cast(pa.binary())
            t = ids.type
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            ids = ids.view(pa.string() if pa.types.is_binary(t) else pa.large_string())
        if is_stringish(ids.type) or pa.types.is_integer(ids.type):
            return ids.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    return None


def _num_text(x: np.float64) -> str:
    return repr(float(x))


def _return(ep: _OpenEpisode) -> float | None:
    return ep.rewards.total() if ep.reward_count else None


def derive_episodes(steps: pa.Table | pa.RecordBatch, episodes: pa.Table | None = None) -> pa.Table:
    """Compute the episode table of a step table.

    ``return`` is the sum of the episode's rewards (null when none has one), ``num_steps`` its
    number of steps,
    ``termination_reason`` "terminated" or "truncated" from its last step (null when it has no
    final step), ``cost_usd`` the sum of its steps' costs (null when none has one), ``invalid``
    false. Given ``episodes`` attributes are merged by episode id (see `EpisodeBuilder`).
    The steps are not validated: use `validate_steps` for that.

    Args:
        steps: a step table (normalised first if it is not in `STEP_SCHEMA`).
        episodes: given episode attributes, or None.

    Returns:
        One row per episode, in order of first step, in `EPISODE_SCHEMA`.

    Raises:
        RolloutValidationError: the steps or attributes cannot be normalised, or a given
            return or step count disagrees with the steps.
    """
    table = normalise_steps(steps)
    tensors = TensorTypes()
    tensors.fields.update({n: table.schema.field(n) for n in ("obs", "action")})
    builder = EpisodeBuilder(tensors=tensors)
    if episodes is not None:
        builder.add_attrs(normalise_episodes(episodes))
    out = [builder.feed(b) for b in table.to_batches()]
    out.append(builder.finish())
    problems = builder.collector.problems()
    if problems:
        raise RolloutValidationError("episodes", problems)
    schema = tensors.episode_schema()
    return pa.Table.from_batches([conform_batch(b, schema) for b in out], schema=schema)
