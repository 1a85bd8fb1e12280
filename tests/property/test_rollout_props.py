"""Properties of the rollout data layer.

- Streaming equals one-shot: validating, deriving episodes and writing give the same result
  however the input is cut into batches (state carried across batch boundaries is exact).
- Valid rollouts validate; a single structural mutation (drop, repeat or swap a row, poison a
  reward or an observation) is always reported.
- Returns equal the sum of rewards (to rounding) and do not depend on batching (bit for bit).
"""

from __future__ import annotations

import math
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.ledger.rollouts.episodes import EpisodeBuilder, derive_episodes
from trajledger.ledger.rollouts.normalise import conform_batch, normalise_steps
from trajledger.ledger.rollouts.parquet_io import write_steps_parquet
from trajledger.ledger.rollouts.validate import StreamValidator, validate_steps

finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)


@st.composite
def rollouts(draw: st.DrawFn) -> pa.Table:
    lengths = draw(st.lists(st.integers(1, 12), min_size=1, max_size=8))
    n = sum(lengths)
    rewards = draw(st.lists(finite, min_size=n, max_size=n))
    truncate = draw(st.lists(st.booleans(), min_size=len(lengths), max_size=len(lengths)))
    ids, steps, term, trunc = [], [], [], []
    for e, (length, cut) in enumerate(zip(lengths, truncate, strict=True)):
        for s in range(length):
            ids.append(f"ep{e}")
            steps.append(s)
            term.append(s == length - 1 and not cut)
            trunc.append(s == length - 1 and cut)
    return normalise_steps(
        pa.table(
            {
                "episode_id": ids,
                "step": steps,
                "obs": [[float(s)] for s in steps],
                "reward": rewards,
                "terminated": term,
                "truncated": trunc,
            }
        )
    )


def cut(table: pa.Table, sizes: list[int]) -> list[pa.RecordBatch]:
    out, start = [], 0
    for size in sizes:
        if start >= table.num_rows:
            break
        out.extend(table.slice(start, size).to_batches())
        start += size
    if start < table.num_rows:
        out.extend(table.slice(start).to_batches())
    return [b for b in out if b.num_rows]


sizes = st.lists(st.integers(1, 7), min_size=1, max_size=20)


@given(rollouts())
def test_valid_rollouts_validate(table: pa.Table) -> None:
    assert validate_steps(table).ok


@given(rollouts(), sizes)
def test_streamed_validation_equals_one_shot(table: pa.Table, split: list[int]) -> None:
    mutated = _mutate_some(table)
    v = StreamValidator("steps")
    for batch in cut(mutated, split):
        v.feed(batch)
    assert v.finish().problems == validate_steps(mutated).problems


def _mutate_some(table: pa.Table) -> pa.Table:
    """Deterministically break a table a little, so the comparison sees problems too."""
    if table.num_rows < 3:
        return table
    idx = list(range(table.num_rows))
    del idx[table.num_rows // 2]
    return table.take(idx)


@given(rollouts(), sizes)
def test_episodes_do_not_depend_on_batching(table: pa.Table, split: list[int]) -> None:
    one_shot = derive_episodes(table)
    builder = EpisodeBuilder()
    parts = [builder.feed(b) for b in cut(table, split)]
    parts.append(builder.finish())
    streamed = pa.Table.from_batches(
        [conform_batch(p, one_shot.schema) for p in parts], schema=one_shot.schema
    )
    assert streamed.equals(one_shot)
    ids = table["episode_id"].to_pylist()
    rewards = table["reward"].to_pylist()
    for eid, ret, n in zip(
        one_shot["episode_id"].to_pylist(),
        one_shot["return"].to_pylist(),
        one_shot["num_steps"].to_pylist(),
        strict=True,
    ):
        mine = [r for i, r in zip(ids, rewards, strict=True) if i == eid]
        assert n == len(mine)
        assert math.isclose(ret, math.fsum(mine), rel_tol=1e-9, abs_tol=1e-6)


@given(rollouts(), st.data())
def test_any_structural_mutation_is_reported(table: pa.Table, data: st.DataObject) -> None:
    n = table.num_rows
    kind = data.draw(
        st.sampled_from(["drop", "repeat", "swap", "nan", "inf", "obs-nan", "action-inf"])
    )
    i = data.draw(st.integers(0, n - 1))
    idx = list(range(n))
    if kind == "drop":
        if n == 1:
            return
        del idx[i]
        mutated = table.take(idx)
        # Dropping a whole one-step episode leaves a valid table.
        if table["is_first"][i].as_py() and table["is_last"][i].as_py():
            return
    elif kind == "repeat":
        idx.insert(i, i)
        mutated = table.take(idx)
    elif kind == "swap":
        j = data.draw(st.integers(0, n - 1))
        if table["step"][i].as_py() == table["step"][j].as_py() or (
            table["episode_id"][i].as_py() == table["episode_id"][j].as_py() and i == j
        ):
            return
        idx[i], idx[j] = idx[j], idx[i]
        mutated = table.take(idx)
    elif kind in ("obs-nan", "action-inf"):
        name = "obs" if kind == "obs-nan" else "action"
        vec = table[name].to_pylist()
        vec[i] = [*(vec[i] or []), float("nan") if kind == "obs-nan" else -float("inf")]
        col = table.schema.get_field_index(name)
        field = table.schema.field(col)
        mutated = table.set_column(col, field, pa.array(vec, field.type))
    else:
        rewards = table["reward"].to_pylist()
        rewards[i] = float("nan") if kind == "nan" else float("inf")
        col = table.schema.get_field_index("reward")
        mutated = table.set_column(col, table.schema.field(col), pa.array(rewards))
    assert not validate_steps(mutated).ok


@settings(max_examples=25, deadline=None)
@given(rollouts(), st.integers(1, 9), st.integers(1, 9))
def test_written_files_do_not_depend_on_batching(table: pa.Table, a: int, b: int) -> None:
    with TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "a").mkdir()
        (root / "b").mkdir()
        sa = write_steps_parquet(
            table.to_batches(max_chunksize=a), root / "a" / "steps.parquet", row_group_rows=5
        )
        sb = write_steps_parquet(
            table.to_batches(max_chunksize=b), root / "b" / "steps.parquet", row_group_rows=5
        )
        assert sa.steps_path.read_bytes() == sb.steps_path.read_bytes()
        assert sa.episodes_path.read_bytes() == sb.episodes_path.read_bytes()
        assert sa.summary() == sb.summary()
        assert pq.read_table(sa.steps_path).equals(table)
        returns = np.asarray(pq.read_table(sa.episodes_path)["return"])
        assert sa.return_mean == float(np.mean(returns))
