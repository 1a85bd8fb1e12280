"""Episode features computed while recording equal those computed again from the stored bytes
(issue 21 item 1): for random step tables (tensor, Dict and Tuple observations and actions of
every recordable dtype, text leaves, chat columns), cut into random chunks and written in
random row groups, the features file the recorder writes holds, bit for bit, what
`iter_step_features` computes from the step file read back (and its bytes are `encode_features`
of those), and every fingerprint is the one `rollouts.dedup.episode_fingerprints` gives.
(Episodes longer than a sketch span: the white-box test in
tests/unit/ledger/test_episode_vectors.py.) And the features of a stream cut anywhere, into
batches down to one row (episodes carried over many of them, spd53), are those of every
episode at once.
"""
from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajledger.ledger import episode_features
from trajledger.ledger.batch_features import FeatureRecorder, decode_features, encode_features
from trajledger.ledger.episode_features import (
    FEATURE_COLUMNS,
    FeatureChunk,
    iter_step_features,
    parquet_batches,
    whole_episodes,
)
from trajledger.ledger.rollouts.dedup import episode_fingerprints
from trajledger.ledger.rollouts.parquet_io import write_steps_parquet
from trajledger.ledger.rollouts.space_values import space_column

DTYPES = ["float32", "float64", "float16", "int64", "uint64", "int8", "bool"]


def leaf(rng: np.random.Generator, kind: str, shape: tuple[int, ...], n: int, finite: bool) -> Any:
    """``n`` stacked values of one leaf (``finite``: no infinity, as actions must be)."""
    if kind == "text":
        return ["".join(rng.choice(list("ab c"), size=rng.integers(0, 5))) for _ in range(n)]
    if kind == "bool":
        return rng.integers(0, 2, (n, *shape)).astype(bool)
    if kind == "uint64":
        return rng.integers(0, 2**64 - 1, (n, *shape), dtype=np.uint64, endpoint=True)
    if kind in ("int64", "int8"):
        info = np.iinfo(kind)
        return rng.integers(info.min, info.max, (n, *shape), dtype=kind, endpoint=True)
    values = rng.normal(0, 100, (n, *shape)).astype(kind)
    if not finite and kind != "float16" and values.size:
        values.reshape(-1)[0] = np.inf  # observations may be infinite; sketches count it as 0
    return values


@st.composite
def spaces(draw: st.DrawFn, depth: int = 0) -> Any:
    """A space's structure: a leaf ``(dtype, shape)``, or a dict or tuple of structures."""
    kind = draw(st.sampled_from(["leaf", "leaf", "dict", "tuple"] if depth < 2 else ["leaf"]))
    if kind == "leaf":
        dtype = draw(st.sampled_from([*DTYPES, "text"]))
        size = draw(st.sampled_from([1, 3, 16, 17, 40]))
        return (dtype, (size,) if dtype != "text" else ())
    members = draw(st.lists(spaces(depth + 1), min_size=1, max_size=3))
    return {f"k{i}": m for i, m in enumerate(members)} if kind == "dict" else tuple(members)


def values(rng: np.random.Generator, space: Any, n: int, finite: bool) -> Any:
    if isinstance(space, dict):
        return {k: values(rng, v, n, finite) for k, v in space.items()}
    if isinstance(space, tuple) and space and not isinstance(space[0], str):
        return tuple(values(rng, v, n, finite) for v in space)
    return leaf(rng, space[0], space[1], n, finite)


@st.composite
def step_tables(draw: st.DrawFn) -> pa.Table:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    lengths = draw(st.lists(st.integers(1, 40), min_size=1, max_size=6))
    if draw(st.booleans()):
        lengths.append(draw(st.sampled_from([300, 700])))  # past a chunk of sketch tables
    n = sum(lengths)
    ids = np.repeat([f"e{i}" for i in range(len(lengths))], lengths)
    step = np.concatenate([np.arange(k) for k in lengths])
    last = np.concatenate([np.arange(k) == k - 1 for k in lengths])
    columns: dict[str, Any] = {
        "episode_id": pa.array(ids),
        "step": pa.array(step, pa.int64()),
        "terminated": pa.array(last),
        "truncated": pa.array(np.zeros(n, dtype=bool)),
        "reward": pa.array(rng.normal(size=n)),
    }
    fields = {}
    for name in ("obs", "action"):
        if draw(st.booleans()) or name == "obs":
            arr, field = space_column(values(rng, draw(spaces()), n, name == "action"), n, name)
            columns[name], fields[name] = arr, field
    if draw(st.booleans()):  # chat columns on some episodes
        chat = rng.integers(0, 2, len(lengths)).astype(bool)[np.repeat(np.arange(len(lengths)),
                                                                        lengths)]  # fmt: skip
        roles = rng.choice(["system", "user", "assistant"], size=n)
        words = rng.choice(["alpha", "beta", "gamma", "delta", "é", "x1"], size=(n, 6))
        columns["role"] = pa.array([r if c else None for r, c in zip(roles, chat, strict=True)])
        columns["content"] = pa.array(
            [" ".join(w) if c else None for w, c in zip(words, chat, strict=True)]
        )
    table = pa.table(columns)
    for name, field in fields.items():
        table = table.set_column(table.schema.get_field_index(name), field, table.column(name))
    return table


@pytest.mark.slow  # some examples write 700 steps a row at a time
# Each size the step table is cut into is a case of its own (10 examples each, 40 in all, as
# when it was drawn): the two workers of a run share them.
@pytest.mark.parametrize("chunk", [1, 5, 64, 1 << 20])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(table=step_tables(), group=st.sampled_from([3, 50, 1 << 17]))
def test_recorded_features_equal_those_of_the_stored_bytes(
    tmp_path_factory: Any, table: pa.Table, chunk: int, group: int
) -> None:
    tmp = Path(tmp_path_factory.mktemp("features"))
    recorder = FeatureRecorder(tmp)
    stats = write_steps_parquet(
        table.to_batches(max_chunksize=chunk), tmp / "steps.parquet", row_group_rows=group,
        on_steps=recorder.add,
    )  # fmt: skip
    kept = recorder.finish(stats.steps_file.digest)
    recorded = decode_features(kept.path.read_bytes(), stats.steps_file.digest)
    again = FeatureChunk.concat(
        list(iter_step_features(parquet_batches(tmp / "steps.parquet", FEATURE_COLUMNS))))
    assert recorded.episode_ids == again.episode_ids
    assert recorded.fingerprints == again.fingerprints
    assert recorded.modality == again.modality and recorded.safety == again.safety
    assert np.array_equal(recorded.num_steps, again.num_steps)
    assert np.array_equal(recorded.valid, again.valid)
    assert np.array_equal(recorded.vectors, again.vectors)  # bit for bit
    assert kept.path.read_bytes() == encode_features(again, stats.steps_file.digest)
    stored = pq.read_table(tmp / "steps.parquet")
    assert dict(zip(again.episode_ids, again.fingerprints, strict=True)) == episode_fingerprints(
        stored
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=step_tables(), data=st.data())
def test_carried_episodes_have_the_features_of_the_whole_episodes(
    table: pa.Table, data: st.DataObject
) -> None:
    """spd53: episodes carried over batches cut at random rows (runs of one-row batches among
    them), their parts gathered, and long episodes taken in small pieces, have, bit for bit,
    the features of the whole episodes at once."""
    for name in ("role", "content"):  # (all null: typed as the step schema types them)
        if name in table.column_names and pa.types.is_null(table.schema.field(name).type):
            i = table.schema.get_field_index(name)
            table = table.set_column(i, name, table.column(name).cast(pa.string()))
    n = table.num_rows
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, n - 1)), max_size=n))))
    if data.draw(st.booleans()):  # a run of one-row batches somewhere
        lo = data.draw(st.integers(0, n - 1))
        cuts = sorted({*cuts, *range(lo + 1, min(n, lo + 60))})
    bounds = [0, *[c for c in cuts if 0 < c < n], n]
    want = whole_episodes(table.combine_chunks().to_batches()[0])
    with pytest.MonkeyPatch.context() as m:
        if data.draw(st.booleans()):  # episodes of more than 8 steps taken in pieces of 5
            m.setattr(episode_features, "SPILL_STEPS", 8)
            m.setattr(episode_features, "PIECE_STEPS", 5)
        if data.draw(st.booleans()):  # carried parts gathered three at a time
            m.setattr(episode_features, "CARRY_PARTS", 3)
        got = FeatureChunk.concat(list(iter_step_features(
            table.slice(lo, hi - lo) for lo, hi in pairwise(bounds))))
    assert got.episode_ids == want.episode_ids and got.fingerprints == want.fingerprints
    assert got.modality == want.modality and got.safety == want.safety
    assert got.num_steps.tolist() == want.num_steps.tolist()
    assert got.valid.tolist() == want.valid.tolist()
    assert got.vectors.tobytes() == want.vectors.tobytes()  # bit for bit
