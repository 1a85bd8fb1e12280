"""Rollout inputs and writing: normalisation, derived episodes, readers, Parquet output."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
import zstandard

from trajledger.ledger.rollouts import jsonl, parquet_io, readers, typed_json
from trajledger.ledger.rollouts.chunks import ReaderOptions, RolloutChunk
from trajledger.ledger.rollouts.episodes import derive_episodes
from trajledger.ledger.rollouts.normalise import (
    StepNormaliser,
    normalise_episodes,
    normalise_steps,
)
from trajledger.ledger.rollouts.parquet_io import write_steps_parquet
from trajledger.ledger.rollouts.problems import RolloutValidationError
from trajledger.ledger.rollouts.readers import detect_format, iter_rollout_chunks, iter_step_batches
from trajledger.ledger.rollouts.rows import rows_to_episodes, rows_to_table
from trajledger.ledger.rollouts.schema import (
    EPISODE_ATTR_SCHEMA,
    EPISODE_SCHEMA,
    STEP_SCHEMA,
    conforms,
    tensor_shape,
)
from trajledger.ledger.rollouts.validate import validate_episodes, validate_steps


def classic(lengths: list[int], dim: int = 3, **overrides: Any) -> pa.Table:
    """The minimal classic form: int episode ids, fixed-size float32 vectors."""
    ids = np.repeat(np.arange(len(lengths)), lengths)
    step = np.concatenate([np.arange(n) for n in lengths])
    last = np.concatenate([np.arange(n) == n - 1 for n in lengths])
    n = len(step)
    rng = np.random.default_rng(0)
    cols: dict[str, Any] = {
        "episode_id": pa.array(ids, pa.int64()),
        "step": pa.array(step),
        "obs": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(n * dim).astype(np.float32)), dim
        ),
        "action": pa.array(rng.integers(0, 4, n)),
        "reward": pa.array(rng.standard_normal(n)),
        "terminated": pa.array(last),
        "truncated": pa.array(np.zeros(n, bool)),
    }
    cols.update(overrides)
    return pa.table(cols)


def not_utf8(values: list[bytes]) -> pa.Array:
    """A string column as Parquet and Arrow files may hold one: bytes never checked as UTF-8."""
    return pa.array(values, pa.binary()).view(pa.string())


def problems(info: pytest.ExceptionInfo[RolloutValidationError]) -> list[str]:
    return [str(p) for p in info.value.problems]


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text(
        "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n",
        encoding="utf-8",
    )
    return path


CHAT = {
    "episode_id": "ep-1",
    "task_id": "math-7",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?", "timestamp": "2024-05-01T12:00:00Z"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "function": {"name": "calc", "arguments": "2+2"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        {"role": "assistant", "content": "4", "logprob": -0.25},
    ],
    "reward": 1.0,
    "judge_scores": {"correct": 1.0, "style": 0.5},
    "usage": {"prompt_tokens": 30, "completion_tokens": 2},
    "cost_usd": 0.002,
    "latency_ms": 120.5,
    "language": "en",
    "task_type": "math",
    "model_id": "m-1",
    "seed": 7,
}


# --- normalisation ---------------------------------------------------------------------------


def test_normalise_minimal_classic_form() -> None:
    table = normalise_steps(classic([2, 3]))
    assert conforms(table.schema, STEP_SCHEMA)
    assert table["episode_id"].to_pylist() == ["0", "0", "1", "1", "1"]
    assert table["is_first"].to_pylist() == [True, False, True, False, False]
    assert table["is_last"].to_pylist() == [False, True, False, False, True]
    assert table["obs"].type == pa.list_(pa.float32())
    assert tensor_shape(table.schema.field("obs")) == (3,)  # a fixed-size list keeps its size
    assert table["action"].type == pa.list_(pa.int64())  # the dtype is kept
    assert tensor_shape(table.schema.field("action")) == ()
    assert len(table["obs"][0].as_py()) == 3
    assert [a[0] for a in table["action"].to_pylist()] == classic([2, 3])["action"].to_pylist()
    assert table["content"].null_count == 5
    assert validate_steps(table).ok


def test_normalise_keeps_scalar_nulls_as_null_vectors() -> None:
    table = normalise_steps(classic([3], action=pa.array([1.5, None, 2.0])))
    assert table["action"].to_pylist() == [[1.5], None, [2.0]]


def test_normalise_is_identity_on_schema_tables() -> None:
    once = normalise_steps(classic([4]))
    assert normalise_steps(once).equals(once)


def test_normalise_derives_is_first_across_chunks() -> None:
    table = classic([2, 2])
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=1))
    out = normalise_steps(chunked)
    assert out["is_first"].to_pylist() == [True, False, True, False]


def test_normalise_keeps_float64_observations() -> None:
    """v1 narrowed observations to float32 (refusing 1e300); v2 keeps float64 exactly."""
    obs = pa.array([[1.0], [1e300], [0.1]], pa.list_(pa.float64()))
    table = normalise_steps(classic([3], obs=obs))
    assert table["obs"].type == pa.list_(pa.float64())
    assert table["obs"].to_pylist() == [[1.0], [1e300], [0.1]]


def test_normalise_keeps_fixed_shape_tensors() -> None:
    frames = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
    obs = pa.FixedShapeTensorArray.from_numpy_ndarray(frames)
    table = normalise_steps(classic([2], obs=obs))
    field = table.schema.field("obs")
    assert field.type == pa.list_(pa.uint8()) and tensor_shape(field) == (4, 4, 3)
    flat = np.asarray(table["obs"].combine_chunks().values)
    assert np.array_equal(flat.reshape(2, 4, 4, 3), frames)


def test_a_batch_holds_one_kind_of_observation() -> None:
    normaliser = StepNormaliser()
    assert normaliser.normalise(classic([2]).to_batches()[0]) is not None
    other = classic([2], dim=2).set_column(0, "episode_id", pa.array([9, 9]))
    assert normaliser.normalise(other.to_batches()[0]) is None
    (p,) = normaliser.collector.problems()
    assert (p.column, p.message[:45]) == ("obs", "values of shape [2], earlier values have shap")


def test_normalise_missing_required_column() -> None:
    with pytest.raises(
        RolloutValidationError, match=r"column 'truncated': missing required column"
    ):
        normalise_steps(classic([2]).drop_columns(["truncated"]))


def test_normalise_unknown_column() -> None:
    table = classic([2]).append_column("next_obs", pa.array([1.0, 2.0]))
    with pytest.raises(RolloutValidationError, match=r"column 'next_obs': unknown column"):
        normalise_steps(table)


def test_normalise_wrong_type() -> None:
    table = classic([2], step=pa.array([0.0, 1.0]))
    with pytest.raises(RolloutValidationError, match=r"column 'step': type double, want int64"):
        normalise_steps(table)


def test_normalise_unconvertible_values() -> None:
    table = classic([2], step=pa.array([0, 2**64 - 1], pa.uint64()))
    with pytest.raises(
        RolloutValidationError, match=r"column 'step': cannot convert uint64 to int64"
    ):
        normalise_steps(table)


def test_normalise_nested_obs_refused() -> None:
    obs = pa.array([[[1.0]], [[2.0]]])
    with pytest.raises(
        RolloutValidationError,
        match=r"column 'obs': type list<item: list<item: double>>, want a list",
    ):
        normalise_steps(classic([2], obs=obs))


def test_normalise_reports_a_bad_column_type_once_per_stream() -> None:
    table = pa.Table.from_batches(classic([6], step=pa.array([0.0, 1, 2, 3, 4, 5])).to_batches(2))
    with pytest.raises(RolloutValidationError, match=r"steps: 1 problem ") as info:
        normalise_steps(table)
    assert str(info.value.problems[0]) == "column 'step': type double, want int64"


def test_normalise_binary_strings_must_be_utf8() -> None:
    content = pa.array([b"ok", b"\xc3\x28"], pa.binary())
    table = classic([2]).append_column("content", content)
    with pytest.raises(
        RolloutValidationError, match=r"row 1, column 'content': value is not valid UTF-8"
    ):
        normalise_steps(table)
    good = classic([2]).append_column("content", pa.array([b"ok", "é".encode()], pa.binary()))
    assert normalise_steps(good)["content"].to_pylist() == ["ok", "é"]


@pytest.mark.parametrize("typ", [pa.string(), pa.binary(), pa.large_binary()])
def test_normalise_refuses_episode_ids_not_utf8(typ: pa.DataType) -> None:
    ids = pa.array([b"a", b"a", b"caf\xe9"], pa.binary())
    table = classic([2, 1], episode_id=ids.view(pa.string()) if typ == pa.string() else ids)
    table = table.set_column(0, "episode_id", table["episode_id"].cast(typ, safe=False))
    want = ["row 2, column 'episode_id': value is not valid UTF-8"]
    with pytest.raises(RolloutValidationError) as info:
        normalise_steps(table)  # converted from the minimal form
    assert problems(info) == want
    schema_table = normalise_steps(classic([2, 1])).set_column(
        0, STEP_SCHEMA.field("episode_id"), ids.view(pa.string())
    )
    with pytest.raises(RolloutValidationError) as info:
        normalise_steps(schema_table)  # already in schema v1
    assert problems(info) == want


def test_normalise_episodes_refuses_ids_not_utf8() -> None:
    table = pa.Table.from_batches(
        pa.table({"episode_id": not_utf8([b"a", b"b", b"caf\xe9"])}).to_batches(max_chunksize=2)
    )
    with pytest.raises(RolloutValidationError) as info:
        normalise_episodes(table)
    assert problems(info) == ["row 2, column 'episode_id': value is not valid UTF-8"]


def test_normalise_timestamps_to_utc_microseconds() -> None:
    ts = pa.array([1_500, 2_000_999], pa.timestamp("ns"))
    out = normalise_steps(classic([2]).append_column("timestamp", ts))
    assert out["timestamp"].type == pa.timestamp("us", tz="UTC")
    assert out["timestamp"].cast(pa.int64()).to_pylist() == [1, 2000]


# --- derived episodes ------------------------------------------------------------------------


def test_derive_episodes() -> None:
    table = classic(
        [2, 3],
        truncated=pa.array([False, False, False, False, True]),
        terminated=pa.array([False, True, False, False, False]),
    )
    rewards = table["reward"].to_pylist()
    eps = derive_episodes(table)
    assert eps.schema == EPISODE_SCHEMA
    assert eps["episode_id"].to_pylist() == ["0", "1"]
    assert eps["num_steps"].to_pylist() == [2, 3]
    assert eps["return"].to_pylist() == pytest.approx([sum(rewards[:2]), sum(rewards[2:])])
    assert eps["termination_reason"].to_pylist() == ["terminated", "truncated"]
    assert eps["invalid"].to_pylist() == [False, False]
    assert eps["cost_usd"].to_pylist() == [None, None]
    assert validate_episodes(eps, steps=normalise_steps(table)).ok


def test_derive_episodes_merges_attributes() -> None:
    attrs = rows_to_episodes(
        [
            {
                "episode_id": 1,
                "seed": 42,
                "task_id": "t1",
                "judge_scores": {"acc": 0.5},
                "termination_reason": "success",
            },
        ]
    )
    eps = derive_episodes(classic([1, 2]), attrs)
    assert eps["seed"].to_pylist() == [None, 42]
    assert eps["task_id"].to_pylist() == [None, "t1"]
    assert eps["judge_scores"].to_pylist() == [None, [("acc", 0.5)]]
    assert eps["termination_reason"].to_pylist() == ["terminated", "success"]


def test_derive_episodes_refuses_a_wrong_given_return() -> None:
    attrs = rows_to_episodes([{"episode_id": 0, "return": 123.0}])
    with pytest.raises(
        RolloutValidationError, match=r"row 0, column 'return': episode '0': given return 123.0"
    ):
        derive_episodes(classic([2]), attrs)


def test_derive_episodes_attributes_without_steps() -> None:
    attrs = rows_to_episodes([{"episode_id": "ghost"}])
    with pytest.raises(
        RolloutValidationError, match=r"episode 'ghost' has attributes but no steps"
    ):
        derive_episodes(classic([2]), attrs)


def test_derive_episodes_sums_step_costs() -> None:
    rows = [
        {
            "episode_id": "a",
            "step": 0,
            "reward": 0.0,
            "terminated": False,
            "truncated": False,
            "cost_usd": 0.25,
        },
        {
            "episode_id": "a",
            "step": 1,
            "reward": 1.0,
            "terminated": True,
            "truncated": False,
            "cost_usd": 0.5,
        },
    ]
    eps = derive_episodes(rows_to_table(rows))
    assert eps["cost_usd"].to_pylist() == [0.75]
    assert eps["return"].to_pylist() == [1.0]


def test_normalise_episodes_accepts_structs() -> None:
    table = pa.Table.from_pylist([{"episode_id": "a", "judge_scores": {"x": 1, "y": None}}])
    out = normalise_episodes(table)
    assert out.schema == EPISODE_ATTR_SCHEMA
    assert out["judge_scores"].to_pylist() == [[("x", 1.0)]]


def test_normalise_episodes_unknown_column() -> None:
    with pytest.raises(RolloutValidationError, match=r"column 'score': unknown column"):
        normalise_episodes(pa.table({"episode_id": ["a"], "score": [1.0]}))


# --- Python rows -----------------------------------------------------------------------------


def test_rows_to_table() -> None:
    rows = [
        {
            "episode_id": 3,
            "step": 0,
            "obs": np.array([1.0, 2.0]),
            "action": 1,
            "reward": 0.5,
            "terminated": False,
            "truncated": False,
        },
        {
            "episode_id": 3,
            "step": 1,
            "obs": [3, 4],
            "action": (0.5,),
            "reward": 1,
            "terminated": True,
            "truncated": False,
            "latency_ms": 3,
        },
    ]
    table = rows_to_table(rows)
    assert conforms(table.schema, STEP_SCHEMA)
    assert table["obs"].to_pylist() == [[1.0, 2.0], [3.0, 4.0]]
    assert table["action"].to_pylist() == [[1.0], [0.5]]
    assert table["episode_id"].to_pylist() == ["3", "3"]
    assert validate_steps(table).ok


def test_rows_to_table_names_bad_row_and_column() -> None:
    rows = [
        {"episode_id": "a", "step": 0, "reward": 1.0, "terminated": False, "truncated": False},
        {"episode_id": "a", "step": 1, "reward": "high", "terminated": True, "truncated": False},
    ]
    with pytest.raises(
        RolloutValidationError, match=r"row 1, column 'reward': 'high' is not a valid double value"
    ):
        rows_to_table(rows)


def test_rows_to_table_unknown_key() -> None:
    rows = [
        {
            "episode_id": "a",
            "step": 0,
            "reward": 1.0,
            "terminated": True,
            "truncated": False,
            "next_obs": [1.0],
        }
    ]
    with pytest.raises(
        RolloutValidationError, match=r"row 0, column 'next_obs': unknown step field"
    ):
        rows_to_table(rows)


def test_rows_to_table_keeps_arrays_and_info() -> None:
    """2-d observations keep their shape and dtype; info keeps arrays typed (v1 refused both)."""
    rows = [
        {
            "episode_id": "a",
            "step": i,
            "obs": np.full((2, 2), i, dtype=np.float64),
            "reward": 1.0,
            "terminated": i == 1,
            "truncated": False,
            "info": {"pos": np.array([i, 2], dtype=np.int16), "ok": True},
            "extras": {"note": "x", "n": 3},
        }
        for i in range(2)
    ]
    table = rows_to_table(rows)
    assert tensor_shape(table.schema.field("obs")) == (2, 2)
    assert table["obs"].type == pa.list_(pa.float64())
    info = typed_json.loads(table["info"][1].as_py())
    assert info["ok"] is True and info["pos"].dtype == np.int16
    assert info["pos"].tolist() == [1, 2]
    assert dict(table["extras"][0].as_py()) == {"note": '"x"', "n": "3"}
    assert validate_steps(table).ok


def test_rows_to_table_refuses_arrays_of_several_kinds() -> None:
    rows = [
        {"episode_id": "a", "step": i, "obs": np.zeros(2 + i), "reward": 1.0,
         "terminated": i == 1, "truncated": False}
        for i in range(2)
    ]  # fmt: skip
    with pytest.raises(RolloutValidationError, match=r"row 1, column 'obs': array of dtype"):
        rows_to_table(rows)


def test_rows_to_table_empty() -> None:
    assert rows_to_table([]).schema == STEP_SCHEMA


# --- formats ---------------------------------------------------------------------------------


def test_detect_formats(tmp_path: Path) -> None:
    table = classic([2])
    pq.write_table(table, tmp_path / "a.parquet")
    with ipc.new_file(tmp_path / "a.arrow", table.schema) as w:
        w.write_table(table)
    with ipc.new_stream(tmp_path / "a.arrows", table.schema) as w:
        w.write_table(table)
    write_jsonl(tmp_path / "chat.jsonl", [CHAT])
    write_jsonl(tmp_path / "trl.jsonl", ["", {"prompt": "p", "completion": "c", "reward": 1}])
    write_jsonl(tmp_path / "verl.jsonl", [{"input": "p", "output": "c", "score": 1, "step": 3}])
    write_jsonl(tmp_path / "grpo.jsonl", [{"step": 3, "prompt": "p", "completion": "c",
                                            "f": 1.0, "advantage": 0.1}])  # fmt: skip
    write_jsonl(tmp_path / "pref.jsonl", [{"chosen": "a", "rejected": "b"}])
    write_jsonl(tmp_path / "kto.jsonl", [{"prompt": "p", "completion": "c", "label": True}])
    write_jsonl(tmp_path / "rows.jsonl", [{"episode_id": "e", "step": 0, "terminated": True,
                                            "truncated": False}])  # fmt: skip
    assert [
        detect_format(tmp_path / n)
        for n in ("a.parquet", "a.arrow", "a.arrows", "chat.jsonl", "trl.jsonl", "verl.jsonl",
                  "grpo.jsonl", "pref.jsonl", "kto.jsonl", "rows.jsonl")
    ] == [
        "parquet", "arrow", "arrow-stream", "chat-jsonl", "trl-prompt-completion", "verl-jsonl",
        "trl-completions", "trl-preference", "trl-kto", "rollout-jsonl",
    ]  # fmt: skip


def test_detect_unknown_jsonl(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "x.jsonl", [{"text": "hello"}])
    with pytest.raises(
        RolloutValidationError, match=r"line 1: cannot tell the format from keys \['text'\]"
    ):
        detect_format(path)


def test_detect_empty_file(tmp_path: Path) -> None:
    (tmp_path / "e.jsonl").write_bytes(b"\n\n")
    with pytest.raises(RolloutValidationError, match=r"file is empty"):
        detect_format(tmp_path / "e.jsonl")


def test_detect_invalid_utf8_on_the_first_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"messages": "caf\xe9"}\n' + json.dumps(CHAT).encode() + b"\n")
    want = ["line 1: not valid UTF-8 (invalid continuation byte at byte 17)"]
    with pytest.raises(RolloutValidationError) as info:
        detect_format(path)
    assert problems(info) == want
    with pytest.raises(RolloutValidationError) as info:  # as the reader reports it
        list(iter_rollout_chunks(path, "chat-jsonl"))
    assert problems(info) == want


def test_detect_garbage(tmp_path: Path) -> None:
    (tmp_path / "g.bin").write_bytes(b"\x00\x01garbage")
    with pytest.raises(
        RolloutValidationError, match=r"line 1: not Parquet, Arrow IPC, or JSON lines"
    ):
        detect_format(tmp_path / "g.bin")


@pytest.mark.parametrize("kind", ["parquet", "arrow", "arrow-stream"])
def test_arrow_inputs_stream_in_bounded_batches(tmp_path: Path, kind: str) -> None:
    table = classic([5, 7, 9])
    path = tmp_path / "in"
    if kind == "parquet":
        pq.write_table(table, path, row_group_size=8)
    else:
        opener = ipc.new_file if kind == "arrow" else ipc.new_stream
        with opener(path, table.schema) as w:
            w.write_table(table, max_chunksize=10)
    batches = list(iter_step_batches(path, batch_rows=4))
    assert max(b.num_rows for b in batches) <= 4
    assert sum(b.num_rows for b in batches) == 21
    assert normalise_steps(pa.Table.from_batches(batches)).equals(normalise_steps(table))


def test_chat_jsonl_mapping(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [CHAT])
    [chunk] = list(iter_rollout_chunks(path))
    steps = pa.Table.from_batches([chunk.steps])
    assert steps.schema == STEP_SCHEMA
    assert steps["role"].to_pylist() == ["system", "user", "assistant", "tool", "assistant"]
    assert steps["step"].to_pylist() == [0, 1, 2, 3, 4]
    assert steps["reward"].to_pylist() == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert steps["terminated"].to_pylist() == [False] * 4 + [True]
    assert steps["is_last"].to_pylist() == [False] * 4 + [True]
    assert json.loads(steps["tool_calls"][2].as_py())[0]["id"] == "c1"
    assert json.loads(steps["tool_results"][3].as_py()) == {"tool_call_id": "c1"}
    assert steps["prompt_tokens"].to_pylist() == [None] * 4 + [30]
    assert steps["latency_ms"].to_pylist() == [None] * 4 + [120.5]
    assert steps["model_id"].to_pylist() == [None, None, "m-1", None, "m-1"]
    assert steps["action_logprob"].to_pylist()[4] == -0.25
    assert str(steps["timestamp"][1].as_py()) == "2024-05-01 12:00:00+00:00"
    assert validate_steps(steps).ok
    eps = chunk.episodes
    assert eps is not None
    assert eps.schema == EPISODE_ATTR_SCHEMA
    row = eps.to_pylist()[0]
    assert (row["episode_id"], row["task_id"], row["seed"], row["cost_usd"]) == (
        "ep-1",
        "math-7",
        7,
        0.002,
    )
    assert row["judge_scores"] == [("correct", 1.0), ("style", 0.5)]


def test_chat_jsonl_per_message_rewards_and_truncation(tmp_path: Path) -> None:
    rec = {
        "task_id": "t",
        "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
        "rewards": [0.25, 0.5],
        "termination_reason": "length",
    }
    path = write_jsonl(tmp_path / "c.jsonl", [rec])
    [chunk] = list(iter_rollout_chunks(path))
    assert chunk.steps.column("reward").to_pylist() == [0.25, 0.5]
    assert chunk.steps.column("truncated").to_pylist() == [False, True]
    assert chunk.steps.column("terminated").to_pylist() == [False, False]
    assert chunk.steps.column("episode_id").to_pylist() == ["line-1", "line-1"]


def test_trl_completions_jsonl_mapping(tmp_path: Path) -> None:
    """Rows of TRL's completions table as pandas writes them as JSON lines (NaN as null)."""
    recs = [
        {"step": 10, "prompt": "Say hi", "completion": "hi", "fmt": 1.0, "acc": 0.25,
         "advantage": 0.1},
        {"step": 10, "prompt": [{"role": "user", "content": "x"}],
         "completion": [{"role": "assistant", "content": "y", "reasoning_content": "think"}],
         "fmt": None, "acc": 0.5, "advantage": -0.1},
        {"step": 10, "prompt": "p", "completion": "c", "fmt": None, "acc": None,
         "advantage": 0.0},
    ]  # fmt: skip
    path = write_jsonl(tmp_path / "t.jsonl", recs)
    assert detect_format(path) == "trl-completions"
    [chunk] = list(iter_rollout_chunks(path))
    steps = chunk.steps
    assert steps.column("role").to_pylist() == ["user", "assistant"] * 3
    assert steps.column("reasoning_content").to_pylist()[3] == "think"
    # The reward is the sum of the scores present; with none, there is no reward (not NaN).
    assert steps.column("reward").to_pylist() == [0.0, 1.25, 0.0, 0.5, None, None]
    assert chunk.episodes is not None
    eps = chunk.episodes.to_pylist()
    assert eps[0]["policy_version"] is None  # (TRL's step is the log's: record --policy's)
    assert eps[0]["judge_scores"] == [("fmt", 1.0), ("acc", 0.25)]
    assert eps[1]["judge_scores"] == [("acc", 0.5)]  # a missing score, not a NaN
    assert eps[2]["judge_scores"] is None
    assert dict(eps[1]["extras"]) == {"step": "10", "advantage": "-0.1"}


def test_trl_completions_reward_weights(tmp_path: Path) -> None:
    recs = [{"step": 1, "prompt": "p", "completion": "c", "fmt": 1.0, "acc": 0.25,
             "note": 2.0, "advantage": 0.0}]  # fmt: skip
    path = write_jsonl(tmp_path / "t.jsonl", recs)
    opts = ReaderOptions(reward_weights={"fmt": 2.0, "acc": 4.0})
    [chunk] = list(iter_rollout_chunks(path, options=opts))
    assert chunk.steps.column("reward").to_pylist() == [0.0, 3.0]
    assert chunk.episodes is not None
    ep = chunk.episodes.to_pylist()[0]
    assert dict(ep["extras"]) == {"step": "1", "note": "2.0", "advantage": "0.0"}
    opts = ReaderOptions(reward_column="acc")
    [chunk] = list(iter_rollout_chunks(path, options=opts))
    assert chunk.steps.column("reward").to_pylist() == [0.0, 0.25]
    with pytest.raises(RolloutValidationError, match="column 'nope': missing"):
        list(iter_rollout_chunks(path, options=ReaderOptions(reward_weights={"nope": 1})))


def test_verl_jsonl_mapping(tmp_path: Path) -> None:
    recs = [{"input": "q", "output": "a", "score": 1.0, "step": 2, "gts": "a", "acc": True}]
    path = write_jsonl(tmp_path / "v.jsonl", recs)
    [chunk] = list(iter_rollout_chunks(path))
    assert chunk.steps.column("content").to_pylist() == ["q", "a"]
    assert chunk.steps.column("reward").to_pylist() == [0.0, 1.0]
    assert chunk.episodes is not None
    assert chunk.episodes.to_pylist()[0]["judge_scores"] == [("acc", 1.0)]
    assert chunk.episodes.to_pylist()[0]["policy_version"] == "2"


def test_jsonl_chunks_are_bounded(tmp_path: Path) -> None:
    recs = [{"prompt": f"p{i}", "completion": "c", "reward": 1} for i in range(10)]
    path = write_jsonl(tmp_path / "t.jsonl", recs)
    chunks = list(iter_rollout_chunks(path, batch_rows=4))
    assert [c.steps.num_rows for c in chunks] == [4, 4, 4, 4, 4]


def expect_line_problem(tmp_path: Path, lines: list[Any], pattern: str) -> RolloutValidationError:
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    with pytest.raises(RolloutValidationError, match=pattern) as info:
        list(iter_rollout_chunks(path, "chat-jsonl"))
    return info.value


def test_jsonl_invalid_json(tmp_path: Path) -> None:
    expect_line_problem(
        tmp_path, [CHAT, '{"messages": [}'], r"line 2: not valid JSON: Expecting value"
    )


def test_jsonl_not_an_object(tmp_path: Path) -> None:
    expect_line_problem(tmp_path, ["[1, 2]"], r"line 1: JSON array, want an object")


def test_jsonl_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(json.dumps(CHAT).encode() + b"\n" + b'{"messages": "\xff"}\n')
    with pytest.raises(RolloutValidationError, match=r"line 2: not valid UTF-8"):
        list(iter_rollout_chunks(path, "chat-jsonl"))


def test_jsonl_duplicate_key(tmp_path: Path) -> None:
    expect_line_problem(
        tmp_path,
        ['{"reward": 1, "reward": 2, "messages": []}'],
        r"line 1: not valid JSON: duplicate key 'reward'",
    )


def test_jsonl_nan(tmp_path: Path) -> None:
    expect_line_problem(
        tmp_path,
        ['{"reward": NaN, "messages": [{"role": "user"}]}'],
        r'line 1: not valid JSON: NaN is not valid JSON \(field "reward"\); write null for a '
        r"number that is missing",
    )


def test_jsonl_without_reward_is_sft_data(tmp_path: Path) -> None:
    """No reward at all is valid (SFT): the steps' rewards and the return are null."""
    rec = dict(CHAT)
    del rec["reward"]
    path = write_jsonl(tmp_path / "sft.jsonl", [rec])
    stats = write_steps_parquet(iter_rollout_chunks(path), tmp_path / "steps.parquet")
    assert pq.read_table(tmp_path / "steps.parquet")["reward"].null_count == 5
    assert pq.read_table(tmp_path / "episodes.parquet")["return"].to_pylist() == [None]
    summary = stats.summary()
    assert summary["rewarded_episodes"] == 0 and summary["return_mean"] is None


@pytest.mark.parametrize(
    ("kind", "record", "problem"),
    [
        (
            "trl-prompt-completion",
            {"prompt": "p", "completion": "c", "reward": "high"},
            "line 1, column 'reward': string, want a number",
        ),
        (
            "trl-completions",
            {"step": 1, "prompt": "p", "completion": "c", "f": float("inf"), "advantage": 0},
            'line 1: not valid JSON: Infinity is not valid JSON (field "f"); write null for a '
            "number that is missing",
        ),
        (
            "verl-jsonl",
            {"input": "p", "output": "c", "score": "high"},
            "line 1, column 'score': string, want a number",
        ),
    ],
    ids=["trl-reward", "trl-infinite-score", "verl-score"],
)
def test_jsonl_mistyped_reward_is_not_also_missing(
    tmp_path: Path, kind: str, record: dict[str, Any], problem: str
) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [record])
    with pytest.raises(RolloutValidationError) as info:
        list(iter_rollout_chunks(path, kind))
    assert problems(info) == [problem]


def test_jsonl_unknown_fields_are_kept_in_extras(tmp_path: Path) -> None:
    """Nothing is dropped: unknown fields go to the episode's (or message's) extras, typed."""
    rec = dict(CHAT, metadata={"src": [1, 2]}, batch=3,
               messages=[{"role": "user", "content": "x", "mood": "happy"}])  # fmt: skip
    path = write_jsonl(tmp_path / "x.jsonl", [rec])
    [chunk] = list(iter_rollout_chunks(path))
    assert chunk.episodes is not None
    assert dict(chunk.episodes.to_pylist()[0]["extras"]) == {"metadata": '{"src":[1,2]}',
                                                            "batch": "3"}  # fmt: skip
    assert dict(chunk.steps.to_pylist()[0]["extras"]) == {"mood": '"happy"'}


def test_jsonl_mistyped_field(tmp_path: Path) -> None:
    expect_line_problem(
        tmp_path, [dict(CHAT, seed="abc")], r"line 1, column 'seed': string, want an integer"
    )


def test_jsonl_message_without_role(tmp_path: Path) -> None:
    rec = dict(CHAT, messages=[{"content": "x"}])
    expect_line_problem(
        tmp_path, [rec], r"line 1, column 'messages\[0\].role': null, want a string"
    )


def test_jsonl_rewards_length_mismatch(tmp_path: Path) -> None:
    rec = {"messages": [{"role": "user", "content": "a"}], "rewards": [1, 2]}
    expect_line_problem(tmp_path, [rec], r"line 1, column 'rewards': 2 rewards for 1 messages")


def test_jsonl_two_kinds_of_reward(tmp_path: Path) -> None:
    rec = dict(CHAT, rewards=[0] * 5)
    expect_line_problem(tmp_path, [rec], r"line 1, column 'reward': give one of reward, rewards")


def test_jsonl_empty_messages(tmp_path: Path) -> None:
    expect_line_problem(
        tmp_path, [dict(CHAT, messages=[])], r"line 1, column 'messages': empty list"
    )


def test_jsonl_repeated_episode_id(tmp_path: Path) -> None:
    expect_line_problem(
        tmp_path,
        [CHAT, "", CHAT],
        r"line 3, column 'episode_id': episode 'ep-1' already given on line 1",
    )


def test_jsonl_bad_timestamp(tmp_path: Path) -> None:
    rec = dict(CHAT, messages=[{"role": "user", "content": "x", "timestamp": "yesterday"}])
    expect_line_problem(
        tmp_path,
        [rec],
        r"line 1, column 'messages\[0\].timestamp': 'yesterday' is not an ISO 8601 time",
    )


def test_jsonl_tool_calls_string_not_json(tmp_path: Path) -> None:
    rec = dict(CHAT, messages=[{"role": "assistant", "tool_calls": "call calc"}])
    expect_line_problem(
        tmp_path, [rec], r"line 1, column 'messages\[0\].tool_calls': string is not JSON text"
    )


def test_jsonl_collects_every_bad_line(tmp_path: Path) -> None:
    lines = [
        CHAT,
        "{oops",
        dict(CHAT, episode_id="x", seed=1.5),
        "",
        dict(CHAT, episode_id="y", rewards=[1]),
    ]
    err = expect_line_problem(tmp_path, lines, r"3 problems")
    assert [p.line for p in err.problems] == [2, 3, 5]


def test_jsonl_good_lines_are_still_yielded(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [CHAT, "{oops"])
    got: list[RolloutChunk] = []
    with pytest.raises(RolloutValidationError, match=r"line 2"):
        for chunk in iter_rollout_chunks(path):
            got.append(chunk)
    assert got and got[0].steps.num_rows == 5


def test_unknown_format_name(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [CHAT])
    with pytest.raises(RolloutValidationError, match=r"format 'csv' is unknown"):
        list(iter_rollout_chunks(path, "csv"))


# --- compressed JSONL ------------------------------------------------------------------------

DUMPS: dict[str, list[Any]] = {
    "chat-jsonl": [
        CHAT,
        "",
        dict(CHAT, episode_id="ep-2", termination_reason="length"),
        dict(CHAT, episode_id="ep-3"),
    ],
    "trl-completions": [
        {"step": 10, "prompt": "Say hi", "completion": "hi", "fmt": 0.5, "advantage": 0.1},
        {"step": 10, "prompt": "p", "completion": "c", "fmt": 1.0, "advantage": -0.1},
        {"step": 10, "prompt": "q", "completion": "d", "fmt": None, "advantage": 0.0},
    ],
    "verl-jsonl": [
        {"input": "q", "output": "a", "score": 1.0, "step": 2, "gts": "a", "acc": True},
        {"prompt": "r", "response": "b", "score": 0.0, "step": 2},
        {"prompt": "s", "response": "c", "score": 0.5, "step": 3},
    ],
}


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def zst(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(write_checksum=True).compress(data)


COMPRESS = {"gzip": gz, "zstd": zst}


def compressed(path: Path, records: list[Any], codec: str) -> Path:
    """``records`` as JSONL compressed with ``codec``, at ``path`` whatever its name."""
    plain = write_jsonl(path.with_name("plain-" + path.name), records)
    path.write_bytes(COMPRESS[codec](plain.read_bytes()))
    return path


def read_all(path: Path, batch_rows: int = 4) -> tuple[pa.Table, pa.Table]:
    chunks = list(iter_rollout_chunks(path, batch_rows=batch_rows))
    eps = [c.episodes for c in chunks if c.episodes is not None]
    return (
        pa.Table.from_batches([c.steps for c in chunks], schema=STEP_SCHEMA),
        pa.Table.from_batches(eps, schema=EPISODE_ATTR_SCHEMA),
    )


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
@pytest.mark.parametrize("kind", sorted(DUMPS))
def test_compressed_jsonl_reads_as_the_plain_file(tmp_path: Path, kind: str, codec: str) -> None:
    plain = write_jsonl(tmp_path / "in.jsonl", DUMPS[kind])
    packed = compressed(tmp_path / f"in.jsonl.{codec[0:2]}", DUMPS[kind], codec)
    assert detect_format(packed) == detect_format(plain) == kind
    steps, eps = read_all(packed)
    want_steps, want_eps = read_all(plain)
    assert steps.num_rows > 4  # several chunks
    assert steps.equals(want_steps)
    assert eps.equals(want_eps)
    out = tmp_path / "out"
    out.mkdir()
    stats = write_steps_parquet(iter_rollout_chunks(packed, kind), out / "steps.parquet")
    assert pq.read_table(stats.steps_path).equals(normalise_steps(want_steps))


@pytest.mark.parametrize(
    ("codec", "name"),
    [("gzip", "rollouts.jsonl"), ("gzip", "rollouts.parquet"), ("zstd", "rollouts.jsonl.gz")],
)
def test_compression_is_detected_by_magic_bytes_not_name(
    tmp_path: Path, codec: str, name: str
) -> None:
    path = compressed(tmp_path / name, DUMPS["trl-completions"], codec)
    assert detect_format(path) == "trl-completions"
    steps, _ = read_all(path)
    assert steps.column("content").to_pylist()[:2] == ["Say hi", "hi"]


def test_zstd_concatenated_and_skippable_frames(tmp_path: Path) -> None:
    plain = write_jsonl(tmp_path / "in.jsonl", DUMPS["chat-jsonl"]).read_bytes()
    cut = len(plain) // 2
    skippable = (0x184D2A53).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    path = tmp_path / "in.jsonl.zst"
    path.write_bytes(skippable + zst(plain[:cut]) + zstandard.compress(plain[cut:]))
    assert read_all(path)[0].equals(read_all(tmp_path / "in.jsonl")[0])


def test_compressed_line_numbers_are_decompressed_lines(tmp_path: Path) -> None:
    path = compressed(tmp_path / "in.jsonl.gz", [CHAT, "", "{oops"], "gzip")
    with pytest.raises(RolloutValidationError) as info:
        list(iter_rollout_chunks(path))
    assert [p.line for p in info.value.problems] == [3]


def test_truncated_gzip_refused(tmp_path: Path) -> None:
    records = [CHAT, "{oops", *(dict(CHAT, episode_id=f"e{i}") for i in range(50))]
    path = compressed(tmp_path / "in.jsonl.gz", records, "gzip")
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(RolloutValidationError) as info:
        list(iter_rollout_chunks(path))
    *before, last = problems(info)
    assert before == [
        "line 2: not valid JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)"
    ]
    assert re.fullmatch(
        rf"line \d+: {re.escape(str(path))}: gzip data ends early \(truncated\?\): "
        r"Compressed file ended before the end-of-stream marker was reached",
        last,
    )
    assert info.value.subject == str(path)


def test_corrupt_gzip_refused(tmp_path: Path) -> None:
    path = compressed(tmp_path / "in.jsonl.gz", [CHAT] * 3, "gzip")
    data = bytearray(path.read_bytes())
    data[-8] ^= 0xFF  # the CRC-32 of the member
    path.write_bytes(bytes(data))
    with pytest.raises(RolloutValidationError, match=r"gzip data is corrupt: CRC check failed"):
        list(iter_rollout_chunks(path))


def test_corrupt_zstd_refused(tmp_path: Path) -> None:
    path = compressed(tmp_path / "in.jsonl.zst", [CHAT] * 3, "zstd")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    want = f"{path}: zstd data is corrupt: zstd decompress error: Restored data doesn't match"
    with pytest.raises(RolloutValidationError) as info:
        detect_format(path)
    assert problems(info)[0].startswith(want)
    with pytest.raises(RolloutValidationError) as info:
        list(iter_rollout_chunks(path, "chat-jsonl"))
    assert problems(info)[0].startswith(f"line 1: {want}")


@pytest.mark.parametrize("cut", [4, 6, 10, -1])
def test_truncated_zstd_refused(tmp_path: Path, cut: int) -> None:
    # The zstd stream reader ends quietly at a cut frame; the frame walk refuses it.
    path = compressed(tmp_path / "in.jsonl.zst", [CHAT] * 3, "zstd")
    data = path.read_bytes()
    path.write_bytes(data[:cut])
    size = len(data[:cut])
    with pytest.raises(RolloutValidationError) as info:
        list(iter_rollout_chunks(path, "chat-jsonl"))
    [problem] = problems(info)
    assert re.fullmatch(
        rf"{re.escape(str(path))}: zstd data ends early \(truncated\?\): frame 1 needs at "
        rf"least [\d,]+ bytes, the file has {size:,}",
        problem,
    )


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_decompression_bomb_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str
) -> None:
    monkeypatch.setattr(jsonl, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    line = json.dumps(CHAT).encode() + b"\n"
    records = [dict(CHAT, episode_id=f"e{i}") for i in range(3 * (1 << 20) // len(line))]
    path = compressed(tmp_path / "bomb.jsonl.x", records, codec)
    assert path.stat().st_size < 64 << 10  # highly compressible: a small file
    with pytest.raises(RolloutValidationError) as info:
        list(iter_rollout_chunks(path))
    [problem] = problems(info)
    assert re.fullmatch(
        rf"line \d+: {re.escape(str(path))}: decompresses to over 1,048,576 bytes, want at most "
        r"1,048,576 \(MAX_DECOMPRESSED_BYTES\): refused as a possible decompression bomb",
        problem,
    )


def test_decompression_bomb_of_blank_lines_refused_by_detect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonl, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    path = tmp_path / "blank.jsonl.zst"
    path.write_bytes(zst(b"\n" * (4 << 20)))
    with pytest.raises(RolloutValidationError, match=r"decompresses to over 1,048,576 bytes"):
        detect_format(path)


@pytest.mark.parametrize("codec", ["gzip", "zstd", None])
def test_line_over_limit_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str | None
) -> None:
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 1000)
    long = dict(CHAT, episode_id="long", task_id="x" * 1000)
    records = [CHAT, long]
    path = (
        write_jsonl(tmp_path / "in.jsonl", records)
        if codec is None
        else compressed(tmp_path / "in.jsonl.c", records, codec)
    )
    with pytest.raises(RolloutValidationError) as info:
        list(iter_rollout_chunks(path))
    assert problems(info) == [
        f"line 2: {path}: line is over 1,000 bytes, want at most 1,000 (MAX_LINE_BYTES)"
    ]


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_compressed_parquet_refused(tmp_path: Path, codec: str) -> None:
    pq.write_table(classic([2]), tmp_path / "a.parquet")
    path = tmp_path / "a.parquet.c"
    path.write_bytes(COMPRESS[codec]((tmp_path / "a.parquet").read_bytes()))
    with pytest.raises(RolloutValidationError) as info:
        detect_format(path)
    assert problems(info) == [
        f"{path}: {codec}-compressed Parquet or Arrow IPC is not read: both compress "
        "internally; decompress the file"
    ]


def test_compressed_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl.gz"
    path.write_bytes(gz(b"\n"))
    with pytest.raises(RolloutValidationError, match=r"file is empty"):
        detect_format(path)


# --- writing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("rewards", "costs"), [
    ([1e308, 1e308], None),  # the returns' sum
    ([1e308, -1e308, 1e308], None),  # their spread (the mean is finite)
    ([1.0, 2.0, 3.0], [1e308, 1e308, 1e308]),  # the costs' sum
])
def test_statistics_a_float64_cannot_hold_are_a_problem_not_a_bug(
        tmp_path: Path, rewards: list[float], costs: list[float] | None,
        recwarn: pytest.WarningsRecorder) -> None:
    """out42 (the lead at its merge): one-step episodes of finite rewards whose sum over the
    batch overflows made `record` a bug report (``math.fsum``: OverflowError, exit 4), with
    numpy's overflow warnings on stderr; an overflowing spread was refused only by the manifest's
    check, after the files were written. Now one problem line, nothing written, no warning."""
    table = classic([1] * len(rewards)).set_column(4, "reward", pa.array(rewards))
    if costs is not None:
        table = table.append_column("cost_usd", pa.array(costs))
    with pytest.raises(RolloutValidationError) as info:
        write_steps_parquet(table.to_batches(), tmp_path / "steps.parquet")
    column = "reward" if costs is None else "cost_usd"
    assert problems(info) == [next(str(p) for p in info.value.problems)] and \
        info.value.problems[0].column == column and "overflow a float64" in problems(info)[0]
    assert list(tmp_path.iterdir()) == []
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_write_round_trip(tmp_path: Path) -> None:
    table = classic([3, 4, 5])
    stats = write_steps_parquet(table.to_batches(max_chunksize=5), tmp_path / "steps.parquet")
    written = pq.read_table(tmp_path / "steps.parquet")
    assert written.equals(normalise_steps(table))
    assert written.schema.metadata[b"trajledger.rollout.schema"] == b"steps/3"
    eps = pq.read_table(tmp_path / "episodes.parquet")
    assert eps.equals(derive_episodes(table))
    returns = eps["return"].to_numpy()
    assert (stats.num_steps, stats.num_episodes) == (12, 3)
    assert stats.mean_episode_length == 4.0
    assert stats.return_mean == pytest.approx(returns.mean())
    assert stats.return_std == pytest.approx(returns.std())
    assert (stats.return_min, stats.return_max) == (returns.min(), returns.max())
    assert stats.reward_sum == pytest.approx(sum(table["reward"].to_pylist()))
    assert stats.success_count is None and stats.success_rate is None
    assert stats.total_cost_usd is None
    assert stats.steps_bytes == (tmp_path / "steps.parquet").stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episodes.parquet", "steps.parquet"]


def test_write_uses_zstd_and_byte_stream_split(tmp_path: Path) -> None:
    write_steps_parquet([classic([3])], tmp_path / "steps.parquet")
    meta = pq.ParquetFile(tmp_path / "steps.parquet").metadata.row_group(0)
    cols = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    for path in ("reward", "obs.list.element", "cost_usd"):
        assert "BYTE_STREAM_SPLIT" in cols[path].encodings, path
    assert "BYTE_STREAM_SPLIT" not in cols["action.list.element"].encodings  # int64 actions
    assert "BYTE_STREAM_SPLIT" not in cols["episode_id"].encodings
    assert {c.compression for c in cols.values()} == {"ZSTD"}
    # Statistics for the columns a query filters on, not for tensor values.
    assert cols["reward"].is_stats_set and cols["episode_id"].is_stats_set
    assert not cols["obs.list.element"].is_stats_set
    eps = pq.ParquetFile(tmp_path / "episodes.parquet").metadata.row_group(0)
    enc = {eps.column(i).path_in_schema: eps.column(i).encodings for i in range(eps.num_columns)}
    assert "BYTE_STREAM_SPLIT" in enc["return"]
    assert "BYTE_STREAM_SPLIT" in enc["judge_scores.key_value.value"]


def test_write_cuts_row_groups_independently_of_batches(tmp_path: Path) -> None:
    table = classic([10, 10, 5])
    stats = []
    for name, size in (("a", 3), ("b", 7)):
        (tmp_path / name).mkdir()
        batches = table.to_batches(max_chunksize=size)
        stats.append(
            write_steps_parquet(batches, tmp_path / name / "steps.parquet", row_group_rows=8)
        )
    a, b = stats
    meta = pq.ParquetFile(a.steps_path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [8, 8, 8, 1]
    assert a.steps_path.read_bytes() == b.steps_path.read_bytes()
    assert a.episodes_path.read_bytes() == b.episodes_path.read_bytes()


def test_write_digests_are_of_the_bytes_on_disk_written_in_line_or_on_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Many row groups: the file is hashed in pieces as the writer thread goes. Row groups too
    # large for the thread are written in line, to the same bytes.
    written = []
    for limit in (parquet_io.THREADED_GROUP_BYTES, 0):
        monkeypatch.setattr(parquet_io, "THREADED_GROUP_BYTES", limit)
        out = tmp_path / str(limit)
        out.mkdir()
        stats = write_steps_parquet(
            classic([10, 10, 5]).to_batches(max_chunksize=3), out / "steps.parquet",
            row_group_rows=4,
        )  # fmt: skip
        for got, path in ((stats.steps_file, stats.steps_path),
                          (stats.episodes_file, stats.episodes_path)):  # fmt: skip
            data = path.read_bytes()
            assert (got.size, got.sha256) == (len(data), hashlib.sha256(data).hexdigest())
        written.append((stats.steps_file.sha256, stats.episodes_file.sha256))
    assert written[0] == written[1]


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rollout-writer"]


def test_write_error_on_the_writer_thread_is_raised_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = pq.ParquetWriter.write_table
    calls = []

    def full_disk(self: pq.ParquetWriter, table: pa.Table, *a: Any, **kw: Any) -> None:
        calls.append(table.num_rows)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(self, table, *a, **kw)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_steps_parquet(
            classic([10] * 20).to_batches(max_chunksize=4), tmp_path / "steps.parquet",
            row_group_rows=8,
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == [] and not _writer_threads()


@pytest.mark.parametrize("failing", [1, 2], ids=["step file", "episode file"])
def test_a_file_that_cannot_be_opened_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: int
) -> None:
    real, calls = pa.OSFile, []

    def out_of_descriptors(*args: Any, **kw: Any) -> pa.NativeFile:
        calls.append(args)
        if len(calls) == failing:
            raise OSError(24, "Too many open files")
        return real(*args, **kw)

    monkeypatch.setattr(pa, "OSFile", out_of_descriptors)
    with pytest.raises(OSError, match="Too many open files"):
        write_steps_parquet([classic([3])], tmp_path / "steps.parquet")
    assert list(tmp_path.iterdir()) == [] and not _writer_threads()


def test_write_interrupted_mid_stream_leaves_nothing(tmp_path: Path) -> None:
    def interrupted() -> Iterator[pa.RecordBatch]:
        batches = classic([10] * 20).to_batches(max_chunksize=4)
        yield from batches[:30]  # several row groups handed to the writer thread
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_steps_parquet(interrupted(), tmp_path / "steps.parquet", row_group_rows=8)
    assert list(tmp_path.iterdir()) == [] and not _writer_threads()


def test_fixed_width_rows_are_sized_from_the_schema() -> None:
    fixed = pa.schema([("obs", pa.list_(pa.float32(), 17)), ("step", pa.int64()),
                       ("done", pa.bool_())])  # fmt: skip
    assert readers._fixed_row_bytes(fixed) == 17 * 4 + 8 + 1
    for other in (pa.string(), pa.list_(pa.float32()), pa.struct([("x", pa.int8())]),
                  pa.dictionary(pa.int8(), pa.string())):  # fmt: skip
        assert readers._fixed_row_bytes(pa.schema([("step", pa.int64()), ("x", other)])) is None


def test_write_episode_spanning_batches(tmp_path: Path) -> None:
    table = classic([7, 2])
    stats = write_steps_parquet(table.to_batches(max_chunksize=2), tmp_path / "steps.parquet")
    eps = pq.read_table(stats.episodes_path)
    assert eps["num_steps"].to_pylist() == [7, 2]
    assert eps.equals(derive_episodes(table))


def test_write_refuses_invalid_input_and_leaves_nothing(tmp_path: Path) -> None:
    table = normalise_steps(classic([3, 3]))
    rewards = table["reward"].to_pylist()
    rewards[4] = float("nan")
    table = table.set_column(6, STEP_SCHEMA.field("reward"), pa.array(rewards))
    step = table["step"].to_pylist()
    step[2] = 5
    table = table.set_column(1, STEP_SCHEMA.field("step"), pa.array(step))
    with pytest.raises(RolloutValidationError, match=r"steps.parquet: 2 problems") as info:
        write_steps_parquet(table.to_batches(max_chunksize=2), tmp_path / "steps.parquet")
    assert [(p.row, p.column) for p in info.value.problems] == [(2, "step"), (4, "reward")]
    assert list(tmp_path.iterdir()) == []


def test_write_refuses_gap_across_batch_boundary(tmp_path: Path) -> None:
    table = classic([4], step=pa.array([0, 1, 3, 4]))
    with pytest.raises(
        RolloutValidationError, match=r"row 2, column 'step': episode '0': step 3 follows step 1"
    ):
        write_steps_parquet(table.to_batches(max_chunksize=2), tmp_path / "steps.parquet")
    assert list(tmp_path.iterdir()) == []


def test_write_refuses_unfinished_last_episode(tmp_path: Path) -> None:
    table = classic([2, 3], terminated=pa.array([False, True, False, False, False]))
    with pytest.raises(
        RolloutValidationError, match=r"row 4, column 'terminated': episode '1' has no final step"
    ):
        write_steps_parquet(table.to_batches(max_chunksize=2), tmp_path / "steps.parquet")


@pytest.mark.parametrize("chunk", [5, 2, 1])
@pytest.mark.parametrize(
    ("terminated", "problem"),
    [
        ([False, False, False, False, True], "row 1, column 'terminated': episode '0' has no "
         "final step: its last step 1 is neither terminated nor truncated"),
        ([False, True, False, False, False], "row 4, column 'terminated': episode '1' has no "
         "final step: its last step 2 is neither terminated nor truncated"),
    ],
    ids=["first", "last"],
)  # fmt: skip
def test_write_reports_episode_without_final_step_once(
    tmp_path: Path, chunk: int, terminated: list[bool], problem: str
) -> None:
    # Its derived termination_reason is null: a consequence, not a second problem.
    table = classic([2, 3], terminated=pa.array(terminated))
    with pytest.raises(RolloutValidationError) as info:
        write_steps_parquet(table.to_batches(max_chunksize=chunk), tmp_path / "steps.parquet")
    assert problems(info) == [problem]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("binary", [False, True], ids=["string", "binary"])
@pytest.mark.parametrize("chunk", [9, 6, 4, 2, 1])
def test_write_refuses_episode_id_not_utf8(tmp_path: Path, chunk: int, binary: bool) -> None:
    # Row 4 belongs to episode b. The episodes of its batch cannot be checked, its rows' values
    # can; later rows keep their numbers, and nothing is reported about the episodes next to
    # the gap.
    ids = not_utf8([b"a", b"a", b"a", b"b", b"caf\xe9", b"b", b"c", b"c", b"c"])
    if binary:
        ids = ids.view(pa.binary())
    rewards = [1.0] * 9
    rewards[7] = float("nan")
    table = normalise_steps(classic([3, 3, 3])).drop_columns(["episode_id", "reward"])
    table = table.add_column(0, "episode_id", ids).add_column(6, "reward", pa.array(rewards))
    if not binary:  # exactly schema v1, as a recorded file: the normaliser's fast path
        table = pa.Table.from_arrays(table.columns, schema=STEP_SCHEMA)
    attrs = normalise_episodes(pa.table({"episode_id": ["a", "b", "c"], "seed": [1, 2, 3]}))
    batches = table.to_batches(max_chunksize=chunk)
    chunks = [RolloutChunk(batches[0], attrs.to_batches()[0]), *batches[1:]]
    with pytest.raises(RolloutValidationError) as info:
        write_steps_parquet(chunks, tmp_path / "steps.parquet")
    assert problems(info) == [
        "row 4, column 'episode_id': value is not valid UTF-8",
        "row 7, column 'reward': reward is nan, want a finite number",
    ]
    assert list(tmp_path.iterdir()) == []


def test_write_keeps_float64_beyond_float32(tmp_path: Path) -> None:
    obs = pa.array([[1.0], [-1e300], [2.0]], pa.list_(pa.float64()))
    write_steps_parquet([classic([3], obs=obs)], tmp_path / "steps.parquet")
    assert pq.read_table(tmp_path / "steps.parquet")["obs"].to_pylist() == [[1.0], [-1e300], [2.0]]


def test_write_refuses_nan_obs(tmp_path: Path) -> None:
    obs = pa.array([1.0, float("nan"), None], pa.float64())  # numbers: vectors of one
    with pytest.raises(RolloutValidationError) as info:
        write_steps_parquet([classic([3], obs=obs)], tmp_path / "steps.parquet")
    assert problems(info) == ["row 1, column 'obs': obs[0] is nan, want a number"]
    assert list(tmp_path.iterdir()) == []


def test_write_refuses_empty_input(tmp_path: Path) -> None:
    with pytest.raises(RolloutValidationError, match=r"the input holds no steps"):
        write_steps_parquet([], tmp_path / "steps.parquet")
    assert list(tmp_path.iterdir()) == []


def test_write_refuses_same_path_for_both_tables(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"is the step file"):
        write_steps_parquet(
            [classic([1])], tmp_path / "x.parquet", episodes_path=tmp_path / "x.parquet"
        )


def test_write_reports_bad_jsonl_lines_with_table_problems(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "in.jsonl", [CHAT, "{oops", dict(CHAT, episode_id="n", reward=1e400)]
    )
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(RolloutValidationError, match=r"line 2: not valid JSON") as info:
        write_steps_parquet(iter_rollout_chunks(path), out / "steps.parquet")
    assert len(info.value.problems) == 2
    assert list(out.iterdir()) == []


def test_write_chat_rollouts_with_stats(tmp_path: Path) -> None:
    recs = [
        dict(CHAT, episode_id="a", termination_reason="success", seed=3),
        dict(CHAT, episode_id="b", termination_reason="failure", reward=0.0, seed=1, invalid=True),
        dict(CHAT, episode_id="c", seed=3, cost_usd=0.5),
    ]
    path = write_jsonl(tmp_path / "in.jsonl", recs)
    stats = write_steps_parquet(iter_rollout_chunks(path, batch_rows=6), tmp_path / "steps.parquet")
    assert (stats.num_steps, stats.num_episodes) == (15, 3)
    assert stats.seeds == (1, 3)
    assert (stats.success_count, stats.success_rate) == (1, 1 / 3)
    assert stats.num_invalid == 1
    assert stats.total_cost_usd == pytest.approx(0.504)
    assert stats.reward_sum == 2.0
    eps = pq.read_table(stats.episodes_path)
    assert eps["termination_reason"].to_pylist() == ["success", "failure", "terminated"]
    assert eps["task_id"].to_pylist() == ["math-7"] * 3
    assert validate_episodes(eps, steps=pq.read_table(stats.steps_path)).ok
    summary = stats.summary()
    assert summary["seeds"] == ["1", "3"]
    json.dumps(summary, allow_nan=False)


def test_summary_keeps_every_seed_exactly(tmp_path: Path) -> None:
    # int64 seeds beyond ±2^53 do not survive a JSON number; the summary gives decimal strings.
    seeds = [2**63 - 1, 7, -(2**53) - 1, 2**53 + 1]
    recs = [dict(CHAT, episode_id=f"e{i}", seed=str(s)) for i, s in enumerate(seeds)]
    path = write_jsonl(tmp_path / "in.jsonl", recs)
    stats = write_steps_parquet(iter_rollout_chunks(path), tmp_path / "steps.parquet")
    assert stats.seeds == tuple(sorted(seeds))
    summary = json.loads(json.dumps(stats.summary(), allow_nan=False))
    assert summary["seeds"] == [str(s) for s in sorted(seeds)]
    assert [int(s) for s in summary["seeds"]] == sorted(seeds)


def test_write_parquet_input_with_episode_file(tmp_path: Path) -> None:
    pq.write_table(classic([2, 2]), tmp_path / "in.parquet")
    pq.write_table(pa.table({"episode_id": [0, 1], "seed": [11, 12]}), tmp_path / "eps.parquet")
    out = tmp_path / "out"
    out.mkdir()
    chunks = iter_rollout_chunks(tmp_path / "in.parquet", episodes=tmp_path / "eps.parquet")
    stats = write_steps_parquet(chunks, out / "steps.parquet")
    assert stats.seeds == (11, 12)


def test_write_refuses_oversized_field(tmp_path: Path) -> None:
    rec = dict(CHAT, messages=[{"role": "user", "content": "x" * 50}])
    path = write_jsonl(tmp_path / "in.jsonl", [rec])
    with pytest.raises(
        RolloutValidationError,
        match=r"row 0, column 'content': value has 50 bytes, over the limit of 10",
    ):
        write_steps_parquet(
            iter_rollout_chunks(path), tmp_path / "steps.parquet", max_field_bytes=10
        )


class _Boom(Exception):
    pass


def test_write_passes_input_errors_through_and_leaves_nothing(tmp_path: Path) -> None:
    def batches() -> Any:
        yield from classic([3]).to_batches()
        raise _Boom("disk went away")

    with pytest.raises(_Boom, match="disk went away"):
        write_steps_parquet(batches(), tmp_path / "steps.parquet")
    assert list(tmp_path.iterdir()) == []


def test_write_refuses_other_input_types(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"input item is a dict, want a pyarrow RecordBatch"):
        write_steps_parquet([{"episode_id": "a"}], tmp_path / "steps.parquet")  # type: ignore[list-item]
    assert list(tmp_path.iterdir()) == []


def test_write_accepts_tables_and_many_batches(tmp_path: Path) -> None:
    table = classic([40, 60])
    stats = write_steps_parquet(
        [table.slice(0, 30), *table.slice(30).to_batches(max_chunksize=7)],
        tmp_path / "steps.parquet",
    )
    assert stats.num_steps == 100
    assert pq.read_table(stats.steps_path).equals(normalise_steps(table))


@pytest.mark.parametrize(
    ("column", "value", "want"),
    [("info", {"$nd": 1}, "malformed $nd value: 1"),
     ("reset_info", {"$f": "x"}, "malformed $f value: 'x'"),
     ("extras", {"a": {"$t": 3}}, "malformed $t value: 3"),
     ("info", "deep", "nested deeper than 64 levels")],
    ids=["info", "reset_info", "extras", "deep"],
)  # fmt: skip
def test_rollout_jsonl_typed_json_that_does_not_decode_is_a_problem(
    tmp_path: Path, column: str, value: Any, want: str
) -> None:
    """Rollout JSON lines (and an episodes file in them): a typed JSON value that is not one
    (a malformed ``$nd``, ``$f`` or ``$t``, nesting past typed JSON's depth) is a problem of
    the input, as in Parquet; it ended in TypedJSONError (``BUG`` through the CLI)."""
    if value == "deep":
        value = json.loads("[" * 70 + "]" * 70)
    row = {"episode_id": "e", "step": 0, "reward": 1.0, "terminated": True, "truncated": False,
           column: value}  # fmt: skip
    path = tmp_path / "steps.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(RolloutValidationError) as info:
        list(iter_rollout_chunks(path, "rollout-jsonl"))
    assert any(want in p for p in problems(info)), problems(info)


def test_an_episodes_file_whose_typed_json_does_not_decode_is_refused(tmp_path: Path) -> None:
    """The same for an episodes file in rollout JSON lines (read whole, `_jsonl_rows_table`)."""
    steps = write_jsonl(tmp_path / "steps.jsonl", [
        {"episode_id": "e", "step": 0, "reward": 1.0, "terminated": True, "truncated": False}])
    eps = write_jsonl(tmp_path / "eps.jsonl", [{"episode_id": "e", "extras": {"a": {"$t": 3}}}])
    with pytest.raises(RolloutValidationError) as info:
        list(iter_rollout_chunks(steps, "rollout-jsonl", episodes=eps))
    assert any("malformed $t value: 3" in p for p in problems(info)), problems(info)


@pytest.mark.parametrize("hours", [1, -1])
def test_rows_whose_time_in_utc_leaves_the_calendar_are_refused(hours: int) -> None:
    """`rows_to_table` of a timezone-aware time whose UTC is before year 1 or after 9999: a
    problem naming the row and column, not OverflowError from ``astimezone``."""
    import datetime as dt

    tz = dt.timezone(dt.timedelta(hours=hours))
    when = dt.datetime(1, 1, 1, tzinfo=tz) if hours > 0 else dt.datetime.max.replace(tzinfo=tz)
    row = {"episode_id": "e", "step": 0, "reward": 1.0, "terminated": True, "truncated": False,
           "timestamp": when}  # fmt: skip
    with pytest.raises(RolloutValidationError) as info:
        rows_to_table([row])
    assert any("out of the range of times in UTC (years 1 to 9999)" in p
               for p in problems(info)), problems(info)  # fmt: skip


def test_rows_take_iso_8601_times_as_the_schema_says() -> None:
    """schemas/rollout-inputs.md: "ISO 8601 strings are parsed" (out45 finding 5: JSON lines
    `export --format jsonl` wrote could not be recorded again): with a zone, naive (UTC) and
    `Z`, to the same microseconds as the datetime; anything else a problem naming the row."""
    import datetime as dt

    base = {"episode_id": "e", "reward": 1.0, "terminated": False, "truncated": False}
    times = ["2026-12-06T22:14:28.347580Z", "2026-12-06T23:14:28.347580+01:00",
             "2026-12-06T22:14:28.347580"]
    rows = [{**base, "step": i, "timestamp": t} for i, t in enumerate(times)]
    rows[-1]["terminated"] = True
    got = rows_to_table(rows).column("timestamp").to_pylist()
    want = dt.datetime(2026, 12, 6, 22, 14, 28, 347580, tzinfo=dt.UTC)
    assert got == [want] * 3
    rows[1]["timestamp"] = "yesterday"
    with pytest.raises(RolloutValidationError) as info:
        rows_to_table(rows)
    assert any("'yesterday' is not an ISO 8601 time" in p for p in problems(info)), problems(info)
