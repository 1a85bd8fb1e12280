"""Validation of rollout tables: one test per kind of bad input, asserting row and column."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.ledger.rollouts import checks
from trajledger.ledger.rollouts.normalise import normalise_steps
from trajledger.ledger.rollouts.problems import (
    MAX_LISTED_PROBLEMS,
    ROWS_PER_KIND,
    Problem,
    RolloutValidationError,
    ValidationReport,
)
from trajledger.ledger.rollouts.rows import rows_to_table
from trajledger.ledger.rollouts.schema import (
    EPISODE_SCHEMA,
    STEP_SCHEMA,
    STEP_SCHEMA_V1,
    tensor_field,
)
from trajledger.ledger.rollouts.validate import StreamValidator, validate_episodes, validate_steps


def steps(lengths: list[int], **overrides: list[Any]) -> pa.Table:
    """A valid classic step table: episode i ("e0", "e1", ...) has lengths[i] steps."""
    ids = [f"e{i}" for i, n in enumerate(lengths) for _ in range(n)]
    step = [s for n in lengths for s in range(n)]
    last = [s == n - 1 for n in lengths for s in range(n)]
    cols: dict[str, list[Any]] = {
        "episode_id": ids,
        "step": step,
        "obs": [[float(s), 0.5] for s in step],
        "action": [[1.0] for _ in step],
        "reward": [1.0] * len(step),
        "terminated": last,
        "truncated": [False] * len(step),
    }
    cols.update(overrides)
    return normalise_steps(pa.table(cols))


def replace(table: pa.Table, name: str, values: list[Any]) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


def only(report: ValidationReport) -> Problem:
    assert len(report.problems) == 1, report.problems
    return report.problems[0]


def episodes(n: int = 2, **overrides: list[Any]) -> pa.Table:
    cols: dict[str, list[Any]] = {
        "episode_id": [f"e{i}" for i in range(n)],
        "task_id": ["t"] * n,
        "env_version": [None] * n,
        "policy_version": [None] * n,
        "seed": list(range(n)),
        "return": [3.0] * n,
        "num_steps": [3] * n,
        "termination_reason": ["terminated"] * n,
        "judge_scores": [[("acc", 1.0)]] * n,
        "cost_usd": [0.1] * n,
        "language": ["en"] * n,
        "task_type": [None] * n,
        "invalid": [False] * n,
    }
    for name in ("group_id", "label", "success", "final_obs", "reset_info", "extras"):
        cols[name] = [None] * n
    cols.update(overrides)
    return pa.Table.from_pydict(cols, schema=EPISODE_SCHEMA)


# --- valid input -----------------------------------------------------------------------------


def test_valid_steps_pass() -> None:
    report = validate_steps(steps([3, 1, 4]))
    assert report.ok
    report.raise_if_failed()


def test_valid_episodes_pass_and_match_their_steps() -> None:
    report = validate_episodes(episodes(2), steps=steps([3, 3]))
    assert report.ok, report.problems


def test_missing_optional_columns_count_as_null() -> None:
    table = steps([2]).drop_columns(["obs", "content", "timestamp"])
    assert validate_steps(table).ok


# --- schema ----------------------------------------------------------------------------------


def test_missing_required_column() -> None:
    p = only(validate_steps(steps([2]).drop_columns(["truncated"])))
    assert (p.row, p.column, p.message) == (None, "truncated", "missing required column")


def test_reward_may_be_absent_in_v2_not_in_v1() -> None:
    """Data without rewards (SFT, preference) is valid in v2; a v1 table needs its rewards."""
    assert validate_steps(steps([2]).drop_columns(["reward"])).ok
    assert validate_steps(replace(steps([2]), "reward", [None, None])).ok
    v1 = pa.table(
        {f.name: steps([2]).column(f.name) for f in STEP_SCHEMA_V1 if f.name != "reward"}
    ).replace_schema_metadata(STEP_SCHEMA_V1.metadata)
    p = only(validate_steps(v1))
    assert (p.column, p.message) == ("reward", "missing required column")


def test_wrong_type() -> None:
    table = steps([2])
    table = table.set_column(1, "step", table["step"].cast(pa.int32()))
    p = only(validate_steps(table))
    assert (p.column, p.message) == ("step", "type int32, want int64")


def test_unknown_column() -> None:
    table = steps([2]).append_column("next_obs", pa.array([1, 2]))
    p = only(validate_steps(table))
    assert p.column == "next_obs"
    assert p.message.startswith("unknown column")


def test_repeated_column() -> None:
    table = steps([2])
    table = table.append_column("reward", table["reward"])
    p = only(validate_steps(table))
    assert (p.column, p.message) == ("reward", "column appears 2 times, want once")


def test_null_in_required_column() -> None:
    table = replace(steps([3]), "terminated", [False, None, True])
    p = only(validate_steps(table))
    assert (p.row, p.column) == (1, "terminated")
    assert p.message == "null, want a value (the column is required)"


# --- rewards and numbers ---------------------------------------------------------------------


def test_nan_reward() -> None:
    p = only(validate_steps(replace(steps([3]), "reward", [0.0, float("nan"), 1.0])))
    assert (p.row, p.column, p.message) == (1, "reward", "reward is nan, want a finite number")


def test_infinite_reward() -> None:
    p = only(validate_steps(replace(steps([2, 2]), "reward", [0.0, 0.0, 0.0, -float("inf")])))
    assert (p.row, p.column, p.message) == (3, "reward", "reward is -inf, want a finite number")


def test_negative_cost() -> None:
    p = only(validate_steps(replace(steps([2]), "cost_usd", [None, -0.5])))
    assert (p.row, p.column, p.message) == (
        1,
        "cost_usd",
        "cost_usd is -0.5, want a finite number >= 0",
    )


def test_negative_token_count() -> None:
    p = only(validate_steps(replace(steps([2]), "completion_tokens", [3, -1])))
    assert (p.row, p.column, p.message) == (
        1,
        "completion_tokens",
        "completion_tokens is -1, want >= 0",
    )


def test_infinite_logprob() -> None:
    p = only(validate_steps(replace(steps([2]), "action_logprob", [-0.1, -float("inf")])))
    assert (p.row, p.column) == (1, "action_logprob")


def test_nan_obs() -> None:
    obs = [[0.0, 0.5], [1.0, float("nan")], [2.0, 0.5]]
    p = only(validate_steps(replace(steps([3]), "obs", obs)))
    assert (p.row, p.column, p.message) == (1, "obs", "obs[1] is nan, want a number")


def test_infinite_obs_is_data() -> None:
    """An unbounded Box space may observe infinity (a range sensor that saw nothing)."""
    obs = [[0.0, float("inf")], [1.0, -float("inf")], [2.0, 0.5]]
    assert validate_steps(replace(steps([3]), "obs", obs)).ok


def test_infinite_action() -> None:
    action = [[1.0], None, [0.0, -float("inf"), float("inf")], [1.0]]
    p = only(validate_steps(replace(steps([2, 2]), "action", action)))
    assert (p.row, p.column, p.message) == (2, "action", "action[1] is -inf, want a finite number")


def test_vector_sums_that_overflow_are_not_refused() -> None:
    """Finite values whose sum overflows (the check's first, summed look) pass."""
    big = float(np.finfo(np.float64).max)
    for column in ("obs", "action"):
        assert validate_steps(replace(steps([3]), column, [[big, big], [big], [-big, big]])).ok


def test_opposite_infinities_in_obs_are_data_and_nan_beside_them_is_found() -> None:
    """inf + -inf sums to NaN: the values are then looked at one by one."""
    inf = float("inf")
    assert validate_steps(replace(steps([2]), "obs", [[inf, 0.0], [-inf, 1.0]])).ok
    p = only(validate_steps(replace(steps([3]), "obs", [[inf], [-inf], [float("nan")]])))
    assert (p.row, p.column, p.message) == (2, "obs", "obs[0] is nan, want a number")


def test_non_finite_vectors_name_rows_of_the_stream() -> None:
    obs = [[0.0], [1.0], [], [2.0, 3.0], None, [float("nan")]]
    table = replace(steps([3, 3]), "obs", obs)
    v = StreamValidator("steps")
    for start in range(0, 6, 4):
        v.feed(table.slice(start, 4).to_batches()[0])
    assert [str(p) for p in v.finish().problems] == [
        "row 5, column 'obs': obs[0] is nan, want a number"
    ]


# --- episode structure -----------------------------------------------------------------------


def test_episode_without_final_step() -> None:
    table = steps([2, 3], terminated=[False, False, False, False, True])
    table = replace(table, "is_last", [False] * 4 + [True])
    p = only(validate_steps(table))
    assert (p.row, p.column) == (1, "terminated")
    assert p.message == (
        "episode 'e0' has no final step: its last step 1 is neither terminated nor truncated"
    )


def test_last_episode_without_final_step() -> None:
    table = steps([2, 2], terminated=[False, True, False, False])
    p = only(validate_steps(table))
    assert (p.row, p.column) == (3, "terminated")
    assert "episode 'e1' has no final step: its last step 1" in p.message


def test_episode_that_continues_after_its_final_step() -> None:
    table = steps([4], terminated=[False, True, False, True])
    p = only(validate_steps(table))
    assert (p.row, p.column) == (1, "terminated")
    assert p.message == "episode 'e0' ends at step 1 (terminated) but continues at row 2"


def test_truncated_counts_as_final() -> None:
    table = steps([2], terminated=[False, False], truncated=[False, True])
    assert validate_steps(table).ok


def test_step_gap() -> None:
    table = replace(steps([4]), "step", [0, 1, 3, 4])
    p = only(validate_steps(table))
    assert (p.row, p.column, p.message) == (
        2,
        "step",
        "episode 'e0': step 3 follows step 1; step 2 is missing",
    )


def test_step_gap_of_several() -> None:
    table = replace(steps([3]), "step", [0, 1, 5])
    p = only(validate_steps(table))
    assert p.message == "episode 'e0': step 5 follows step 1; steps 2..4 are missing"


def test_step_repeat() -> None:
    table = replace(steps([3]), "step", [0, 1, 1])
    p = only(validate_steps(table))
    assert (p.row, p.column) == (2, "step")
    assert p.message == "episode 'e0': step 1 follows step 1, want 2 (a repeat or a step back)"


def test_episode_not_starting_at_zero() -> None:
    table = replace(steps([2, 2]), "step", [0, 1, 1, 2])
    p = only(validate_steps(table))
    assert (p.row, p.column, p.message) == (2, "step", "episode 'e1' starts at step 1, want 0")


def test_episode_in_two_runs() -> None:
    table = steps([2, 1, 2], episode_id=["a", "a", "b", "a", "a"])
    p = only(validate_steps(table))
    assert (p.row, p.column) == (3, "episode_id")
    assert (
        p.message == "episode 'a' appears again after other episodes; its steps must be contiguous"
    )


def test_is_first_inconsistent() -> None:
    table = replace(steps([3]), "is_first", [True, True, False])
    p = only(validate_steps(table))
    assert (p.row, p.column) == (1, "is_first")
    assert p.message.startswith("is_first is True, want False")


def test_is_last_inconsistent() -> None:
    table = replace(steps([3]), "is_last", [False, True, True])
    p = only(validate_steps(table))
    assert (p.row, p.column) == (1, "is_last")
    assert p.message.startswith("is_last is True, want False")


# --- strings and sizes -----------------------------------------------------------------------


def invalid_utf8_strings() -> pa.Array:
    raw = pa.array([b"fine", b"\xff\xfebad"], pa.binary())
    return pa.Array.from_buffers(pa.string(), 2, raw.buffers())


def test_invalid_utf8() -> None:
    table = steps([2])
    i = table.schema.get_field_index("content")
    table = table.set_column(i, table.schema.field(i), invalid_utf8_strings())
    p = only(validate_steps(table))
    assert (p.row, p.column, p.message) == (1, "content", "value is not valid UTF-8")


def test_invalid_utf8_episode_id_is_reported_not_raised() -> None:
    table = steps([2, 1])
    i = table.schema.get_field_index("episode_id")
    raw = pa.array([b"e0", b"e0", b"caf\xe9"], pa.binary()).view(pa.string())
    report = validate_steps(table.set_column(i, table.schema.field(i), raw))
    assert [str(p) for p in report.problems] == [
        "row 2, column 'episode_id': value is not valid UTF-8"
    ]


def test_invalid_utf8_in_a_json_column_is_reported_once() -> None:
    table = steps([2])
    i = table.schema.get_field_index("tool_calls")
    raw = pa.array([b"[]", b'["\xff"]'], pa.binary()).view(pa.string())
    p = only(validate_steps(table.set_column(i, table.schema.field(i), raw)))
    assert (p.row, p.column, p.message) == (1, "tool_calls", "value is not valid UTF-8")


def test_oversized_string() -> None:
    table = replace(steps([2]), "content", ["short", "x" * 101])
    p = only(validate_steps(table, max_field_bytes=100))
    assert (p.row, p.column) == (1, "content")
    assert p.message == "value has 101 bytes, over the limit of 100"


def test_oversized_tensor() -> None:
    table = replace(steps([2]), "obs", [[0.0] * 12, [0.0] * 13])
    p = only(validate_steps(table, max_tensor_bytes=100))
    assert (p.row, p.column) == (1, "obs")
    assert p.message == "tensor of 13 double (104 bytes) is over the limit of 100 bytes"


def test_image_observations_fit_the_default_limit() -> None:
    """A 512x512x3 uint8 frame (768 KiB) was refused by v1's 1 MiB-per-field limit for float32
    vectors; v2 keeps uint8 and allows 64 MiB per tensor value."""
    frame = np.zeros((512, 512, 3), dtype=np.uint8)
    table = rows_to_table(
        [{"episode_id": "e", "step": i, "obs": frame, "reward": 0.0, "terminated": i == 1,
          "truncated": False} for i in range(2)]
    )  # fmt: skip
    assert table.schema.field("obs").type == pa.list_(pa.uint8())
    assert validate_steps(table).ok


def test_tensor_of_the_wrong_size_for_its_shape() -> None:
    table = steps([2])
    i = table.schema.get_field_index("obs")
    field = tensor_field("obs", pa.float64(), (2,))
    table = table.set_column(i, field, pa.array([[1.0, 2.0], [1.0]], pa.list_(pa.float64())))
    p = only(validate_steps(table))
    assert (p.row, p.column, p.message) == (1, "obs", "1 values, the shape [2] holds 2")


def test_extras_and_info_must_be_json() -> None:
    table = replace(steps([2]), "info", ['{"a": 1}', "{a: 1}"])
    p = only(validate_steps(table))
    assert (p.row, p.column) == (1, "info")
    table = replace(steps([2]), "extras", [[("k", "1"), ("k", "2")], [("u", "not json")]])
    problems = validate_steps(table).problems
    assert [(p.row, p.message[:32]) for p in problems] == [
        (0, "extras repeats a key, want each "),
        (1, "extras value of 'u' is not valid"),
    ]


def test_tool_calls_not_json() -> None:
    table = replace(steps([2]), "tool_calls", ['[{"name": "f"}]', "{name: f}"])
    p = only(validate_steps(table))
    assert (p.row, p.column) == (1, "tool_calls")
    assert p.message.startswith("value is not valid JSON: Expecting property name")


# --- episode table ---------------------------------------------------------------------------


def test_duplicate_episode_id_in_episode_table() -> None:
    table = episodes(3, episode_id=["a", "b", "a"])
    p = only(validate_episodes(table))
    assert (p.row, p.column, p.message) == (
        2,
        "episode_id",
        "episode 'a' is listed again (first at row 0)",
    )


def test_episode_nan_return() -> None:
    p = only(validate_episodes(episodes(2, **{"return": [1.0, float("nan")]})))
    assert (p.row, p.column, p.message) == (1, "return", "return is nan, want a finite number")


def test_episode_zero_steps() -> None:
    p = only(validate_episodes(episodes(2, num_steps=[3, 0])))
    assert (p.row, p.column, p.message) == (1, "num_steps", "num_steps is 0, want >= 1")


def test_judge_score_not_finite() -> None:
    scores = [[("acc", 1.0)], [("acc", 0.5), ("style", float("inf"))]]
    p = only(validate_episodes(episodes(2, judge_scores=scores)))
    assert (p.row, p.column) == (1, "judge_scores")
    assert "holds a non-finite score" in p.message


def test_judge_score_repeated_key() -> None:
    scores = [[("acc", 1.0), ("acc", 0.0)], [("acc", 0.5)]]
    p = only(validate_episodes(episodes(2, judge_scores=scores)))
    assert (p.row, p.column) == (0, "judge_scores")
    assert "repeats a key" in p.message


def test_episode_table_wrong_type() -> None:
    table = episodes(1)
    i = table.schema.get_field_index("seed")
    table = table.set_column(i, "seed", table["seed"].cast(pa.string()))
    p = only(validate_episodes(table))
    assert (p.column, p.message) == ("seed", "type string, want int64")


def test_episode_num_steps_disagrees_with_steps() -> None:
    p = only(validate_episodes(episodes(2, **{"return": [3.0, 2.0]}), steps=steps([3, 2])))
    assert (p.row, p.column) == (1, "num_steps")
    assert p.message == "num_steps is 3, the steps of episode 'e1' number 2"


def test_episode_return_disagrees_with_steps() -> None:
    p = only(validate_episodes(episodes(2, **{"return": [3.0, 2.5]}), steps=steps([3, 3])))
    assert (p.row, p.column) == (1, "return")
    assert p.message == "return is 2.5, the rewards of episode 'e1' sum to 3.0"


def test_episode_without_steps() -> None:
    p = only(
        validate_episodes(episodes(2, episode_id=["e0", "zz"], num_steps=[3, 3]), steps=steps([3]))
    )
    assert (p.row, p.column, p.message) == (1, "episode_id", "episode 'zz' has no steps")


def test_steps_without_episode_row() -> None:
    p = only(validate_episodes(episodes(1), steps=steps([3, 3])))
    assert (p.row, p.column, p.message) == (None, "episode_id", "episode 'e1' has steps but no row")


@pytest.mark.parametrize(
    ("reward", "episode_id", "rows"),
    [
        (1.0, "e0", {}),  # matches
        (None, "e0", {"return": [None]}),  # no reward: a null return
        (-0.0, "é🙂", {"episode_id": ["é🙂"], "return": [0.0]}),
        (1e308, "e0", {"return": [1e308 * (1 + 1e-12)], "num_steps": [2]}),  # steps off, return not
        (2.5, "e0", {"episode_id": ["zz"]}),  # no steps, and steps with no row
        (2.5, "e0", {"episode_id": ["e0", "e0"], "return": [2.5, 2.0], "num_steps": [1, 1]}),
    ],
)
def test_one_step_compared_as_derive_episodes_does(
    reward: float | None, episode_id: str, rows: dict[str, list[Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A one-step table's episode is read from its values (spd55), not derived by
    `derive_episodes`: the same three columns, the same report."""
    from trajledger.ledger.rollouts import validate
    from trajledger.ledger.rollouts.episodes import derive_episodes

    one = steps([1], episode_id=[episode_id], reward=[reward])
    n = len(rows.get("episode_id", [episode_id]))
    table = episodes(n, **{"episode_id": [episode_id] * n, "num_steps": [1] * n,
                           "return": [reward] * n, **rows})
    derived = derive_episodes(one).select(["episode_id", "num_steps", "return"])
    assert validate._derived(one).to_pylist() == derived.to_pylist()
    fast = validate_episodes(table, steps=one).problems
    monkeypatch.setattr(validate, "_derived", derive_episodes)
    assert fast == validate_episodes(table, steps=one).problems


# --- streaming -------------------------------------------------------------------------------


def test_stream_checks_cross_batch_boundaries() -> None:
    # A gap whose two sides fall in different batches, and an episode left open in batch 1
    # but closed in batch 2, and one left open at the end of the stream.
    table = replace(steps([3, 3]), "step", [0, 1, 2, 0, 2, 3])
    table = replace(table, "terminated", [False, False, True, False, False, False])
    table = replace(table, "is_last", [False, False, True, False, False, False])
    v = StreamValidator("steps")
    v.feed(table.slice(0, 4).to_batches()[0])
    v.feed(table.slice(4).to_batches()[0])
    report = v.finish()
    assert [(p.row, p.column) for p in report.problems] == [(4, "step"), (5, "terminated")]
    assert report.problems[0].message == "episode 'e1': step 2 follows step 0; step 1 is missing"


def test_stream_reports_episode_open_at_batch_end() -> None:
    table = steps([2, 2], terminated=[False, False, False, True])
    table = replace(table, "is_last", [False, False, False, True])
    v = StreamValidator("steps")
    for b in (table.slice(0, 2), table.slice(2)):
        v.feed(b.to_batches()[0])
    p = only(v.finish())
    assert (p.row, p.column) == (1, "terminated")
    assert "episode 'e0' has no final step" in p.message


def test_stream_reports_termination_before_boundary() -> None:
    table = steps([4], terminated=[False, True, False, True])
    table = replace(table, "is_last", [False, True, False, True])
    v = StreamValidator("steps")
    for b in (table.slice(0, 2), table.slice(2)):
        v.feed(b.to_batches()[0])
    p = only(v.finish())
    assert (p.row, p.message) == (
        1,
        "episode 'e0' ends at step 1 (terminated) but continues at row 2",
    )


def test_stream_reports_duplicate_across_batches() -> None:
    table = steps([1, 1, 1], episode_id=["a", "b", "a"])
    v = StreamValidator("steps")
    for i in range(3):
        v.feed(table.slice(i, 1).to_batches()[0])
    p = only(v.finish())
    assert (p.row, p.column) == (2, "episode_id")


def test_episode_stream_duplicate_across_batches() -> None:
    table = episodes(2, episode_id=["a", "a"])
    v = StreamValidator("episodes")
    v.feed(table.slice(0, 1).to_batches()[0])
    v.feed(table.slice(1, 1).to_batches()[0])
    p = only(v.finish())
    assert (p.row, p.message) == (1, "episode 'a' is listed again (first at row 0)")


# --- reporting -------------------------------------------------------------------------------


def test_every_problem_is_reported() -> None:
    table = replace(steps([3]), "reward", [float("nan"), 1.0, 1.0])
    table = replace(table, "step", [0, 2, 3])
    table = replace(table, "content", ["a", "b", "x" * 200])
    report = validate_steps(table, max_field_bytes=100)
    assert {(p.row, p.column) for p in report.problems} == {
        (0, "reward"),
        (1, "step"),
        (2, "content"),
    }


def test_rows_listed_per_kind_are_capped() -> None:
    n = ROWS_PER_KIND + 30
    table = steps([n], reward=[float("nan")] * n)
    report = validate_steps(table)
    assert len(report.problems) == ROWS_PER_KIND + 1
    assert [p.row for p in report.problems[:-1]] == list(range(ROWS_PER_KIND))
    summary = report.problems[-1]
    assert (summary.row, summary.column) == (None, "reward")
    assert summary.message.startswith(
        "30 more like 'reward is nan, want a finite number' not listed"
    )


def test_error_lists_one_line_per_problem() -> None:
    table = replace(steps([3]), "reward", [float("nan"), 1.0, float("inf")])
    with pytest.raises(RolloutValidationError, match=r"steps: 2 problems") as info:
        validate_steps(table).raise_if_failed()
    assert str(info.value).splitlines() == [
        "steps: 2 problems (rollout schema v3)",
        "  row 0, column 'reward': reward is nan, want a finite number",
        "  row 2, column 'reward': reward is inf, want a finite number",
    ]
    assert len(info.value.problems) == 2


def test_error_listing_is_capped() -> None:
    problems = [Problem(i, "reward", "bad") for i in range(MAX_LISTED_PROBLEMS + 7)]
    err = RolloutValidationError("x", problems)
    lines = str(err).splitlines()
    assert len(lines) == MAX_LISTED_PROBLEMS + 2
    assert lines[-1] == "  ... and 7 more problems"


def test_error_is_a_format_error() -> None:
    from trajledger.verify.errors import FormatError

    assert issubclass(RolloutValidationError, FormatError)
    assert issubclass(RolloutValidationError, ValueError)


def test_problem_renders_line_numbers() -> None:
    assert str(Problem(None, "messages[0].role", "null, want a string", line=7)) == (
        "line 7, column 'messages[0].role': null, want a string"
    )


def test_validation_is_vectorised_over_a_million_steps() -> None:
    # Not a benchmark: guards against an accidental per-row Python loop, by counting instead of
    # timing. Every Python line, call and return validate_steps runs is traced: a loop over the
    # rows runs at least one per row (a million), the vectorised validation a few per episode
    # (about 5,000 here). 1000 episodes of 1000 steps.
    import sys
    from types import FrameType

    n = 1_000_000
    step = np.tile(np.arange(1000), 1000)
    table = pa.table(
        {
            "episode_id": np.repeat(np.arange(1000), 1000),
            "step": step,
            "reward": np.ones(n),
            "terminated": step == 999,
            "truncated": np.zeros(n, bool),
        }
    )
    table = normalise_steps(table)
    events = 0

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal events
        events += 1
        return trace

    before = sys.gettrace()
    sys.settrace(trace)
    try:
        report = validate_steps(table)
    finally:
        sys.settrace(before)
    assert report.ok
    assert events < n // 10, f"{events} Python events validating {n} steps: a loop per row?"


def test_report_is_frozen() -> None:
    report = ValidationReport("steps")
    with pytest.raises(AttributeError):
        report.problems = ()  # type: ignore[misc]


def test_schema_names_match_step_schema() -> None:
    assert re.fullmatch(r"steps/3", STEP_SCHEMA.metadata[b"trajledger.rollout.schema"].decode())


def test_discount_is_kept_and_checked() -> None:
    assert validate_steps(replace(steps([2]), "discount", [0.99, None])).ok
    p = only(validate_steps(replace(steps([2]), "discount", [0.99, -1.0])))
    assert (p.row, p.column, p.message) == (
        1,
        "discount",
        "discount is -1.0, want a finite number >= 0",
    )


@pytest.mark.parametrize("colliding", [False, True])
def test_reappearing_episodes_found_alike_in_any_cut(
    colliding: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ids seen are kept in the compact `idset.IdSet` (issue 21 item 5): in any cut of the
    stream, and when every id's hash collides with others', the repeats found are those a set of
    ids finds (the model below), and the problems those of the whole table at once."""
    from trajledger.ledger.rollouts import idset

    rng = random.Random(11)
    runs: list[str] = []
    while len(runs) < 40:
        eid = rng.choice("abcdefgh")
        if not runs or runs[-1] != eid:
            runs.append(eid)
    lengths = [rng.randint(1, 3) for _ in runs]
    ids = [e for e, n in zip(runs, lengths, strict=True) for _ in range(n)]
    table = steps(lengths, episode_id=ids)
    whole = [str(p) for p in validate_steps(table).problems]
    seen: set[str] = set()
    model: list[int] = []
    row = 0
    for eid, n in zip(runs, lengths, strict=True):
        if eid in seen:
            model.append(row)
        seen.add(eid)
        row += n
    found = [
        p.row
        for p in validate_steps(table).problems
        if "appears again" in p.message and p.row is not None  # (past the cap: a count)
    ]
    assert found == model[: len(found)] and found
    if colliding:
        monkeypatch.setattr(idset, "_hash", lambda s: len(s) % 2)
    for _ in range(5):
        v = StreamValidator("steps")
        at = 0
        while at < table.num_rows:
            n = rng.randint(1, 9)
            v.feed(table.slice(at, n).to_batches()[0])
            at += n
        assert [str(p) for p in v.finish().problems] == whole


# --- JSON text proved by msgspec (checks._proved_json_text) --------------------------------

_JSON_VALUES = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70),
        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4),
    ),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
_ODD = [
    "NaN", "Infinity", "-Infinity", "1e400", "-1e400", "01", "1.", ".5", "+1", "0x10", "[1,]",
    '{"a":1,}', '{"a":1,"a":2}', '{"a":{"b":1,"b":2}}', '"\\ud800"', '"\\udc00x"', '"\\u00"',
    '"a\tb"', '"\x00"', '"\\x41"', "'a'", "[1] [2]", "[1]x", " [1] ", "\n{}\r\n", "\x0b[]",
    "\xa0[]", "[]\u2028", "\ufeff[]", "", " ", "tru", "nul", "1" * 4301, "-",
    "[" * 255 + "]" * 255, "[" * 257 + "]" * 257, "[" * 990 + "]" * 990,
    "[" * 1200 + "]" * 1200, '{"a":[1,{"b":2}]}',
]  # fmt: skip


@st.composite
def _json_texts(draw: Any) -> str:
    """JSON texts as writers spell them, and near misses: a character put in or taken out,
    and the cases where JSON decoders differ."""
    kind = draw(st.sampled_from(["json", "odd", "edit", "text"]))
    if kind == "odd":
        return str(draw(st.sampled_from(_ODD)))
    if kind == "text":
        return str(draw(st.text(alphabet='[]{}",:0123456789.eE+-aNIn \t\\u', max_size=12)))
    text = json.dumps(
        draw(_JSON_VALUES), ensure_ascii=draw(st.booleans()),
        separators=draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,", " :")])),
    )  # fmt: skip
    if kind == "edit" and text:
        at = draw(st.integers(0, len(text)))
        if draw(st.booleans()):
            extra = draw(st.sampled_from([*',:[]{}"\\ \x01', "NaN", "1e999"]))
            text = text[:at] + extra + text[at:]
        else:
            text = text[:at] + text[at + 1 :]
    return text


@settings(max_examples=500, deadline=None)
@given(_json_texts())
def test_json_text_proved_by_msgspec_is_json_text(text: str) -> None:
    """Whatever `_proved_json_text` proves, `JSON_TEXT` decodes (its check finds no error)."""
    if checks._proved_json_text(text):
        assert checks._json_error(text) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(_json_texts(), min_size=1, max_size=6))
def test_json_columns_are_judged_alike_with_and_without_the_proof(texts: list[str]) -> None:
    """The problems of a JSON text column (tool calls, info) are the same with the msgspec
    proof and with `JSON_TEXT` alone: same rows, same messages."""
    table = replace(steps([len(texts)]), "tool_calls", texts)
    table = replace(table, "info", list(reversed(texts)))
    fast = [str(p) for p in validate_steps(table).problems]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checks, "_proved_json_text", lambda _: False)
        slow = [str(p) for p in validate_steps(table).problems]
    assert fast == slow


def test_the_common_json_texts_are_proved() -> None:
    """The texts a recording stores are proved (so the tests above compare something)."""
    for text in ('[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]',
                 '{"tool_call_id":"c1","name":"fetch"}', "[]", '"x"', "1.5"):  # fmt: skip
        assert checks._proved_json_text(text)
    for text in ("NaN", "1e400", '"\\ud800"', "[1]x", "[" * 300 + "]" * 300):
        assert not checks._proved_json_text(text)


def test_a_text_msgspec_cannot_encode_is_not_proved() -> None:
    """A str holding a lone surrogate (no Arrow column gives one, a library caller's str may):
    msgspec raises UnicodeEncodeError encoding it for its decoder; not proved, and
    `_json_error` decides (it was raised out of the check)."""
    for text in ("\ud800", '"\ud800"', '["a\udfff"]'):
        assert not checks._proved_json_text(text)


def test_times_outside_years_1_to_9999_are_refused_in_every_format() -> None:
    """rev43 finding 4: a Parquet or Arrow time outside the years 1 to 9999 (UTC), or seconds
    since the epoch as far, was recorded (JSON lines' ISO text refused it: "out of the range of
    times in UTC"), and `export --format jsonl` of the batch then failed (`BUG: OverflowError:
    date value out of range`, exit 4). The first and last microseconds of that range pass."""
    first, last = -62_135_596_800_000_000, 253_402_300_800_000_000 - 1  # (0001-01-01, 9999-…)
    times = [first, last, 0, first - 1, last + 1, 1 << 62]
    table = steps([len(times)], timestamp=pa.array(times, pa.timestamp("us", tz="UTC")))
    report = validate_steps(table)
    assert [(p.row, p.column) for p in report.problems] == [
        (3, "timestamp"), (4, "timestamp"), (5, "timestamp")]
    assert all("out of the range of times in UTC (years 1 to 9999)" in p.message
               for p in report.problems), report.problems
    assert validate_steps(steps([3], timestamp=pa.array(times[:3], pa.timestamp(
        "us", tz="UTC")))).ok
