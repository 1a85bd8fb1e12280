"""Record mappings (``ledger/rollouts/formats.py``), white-box: the fast path for the common
chat message (`_plain_message`) maps every message it takes as the general `_message` does,
with the same problems, and the column-wise `ChunkBuilder` gives the per-step flags and rewards
of its definition."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.ledger.rollouts import formats
from trajledger.ledger.rollouts.formats import ChunkBuilder, ReaderOptions, RecordProblems
from trajledger.ledger.rollouts.problems import ProblemCollector

_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.text(max_size=5),
    st.sampled_from(['{"a": 1}', "[1, 2]", "not json", "NaN", "1e999"]),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["id", "type", "x"]), st.integers(0, 3), max_size=2),
)
_MESSAGES = st.dictionaries(
    st.sampled_from(["role", "content", "tool_calls", "tool_call_id", "name", "reward", "x"]),
    _VALUES,
    max_size=6,
)


def _mapped(m: dict[str, Any]) -> tuple[dict[str, Any] | None, tuple[Any, ...]]:
    c = ProblemCollector()
    step = formats._message(m, RecordProblems(7, c), "messages[0]")
    return step, c.problems()


@settings(max_examples=400, deadline=None)
@given(_MESSAGES)
def test_plain_messages_map_as_the_general_path(m: dict[str, Any]) -> None:
    fast = _mapped(m)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(formats, "_plain_message", lambda *_: None)
        general = _mapped(m)
    assert fast == general


def test_the_builder_sets_flags_and_episode_rewards_per_step() -> None:
    c = ProblemCollector()
    builder = ChunkBuilder(c, ReaderOptions(), {})
    records = [
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "bc"}],
         "reward": 2, "termination_reason": "length"},
        {"messages": [{"role": "user", "content": "d", "reward": 0.5}]},
        {"episode_id": "e", "messages": [{"role": "user"}] * 3, "rewards": [1, 2, 3]},
    ]  # fmt: skip
    for number, record in enumerate(records, 1):
        rec = RecordProblems(number, c)
        builder.add(formats.map_record("chat-jsonl", record, rec, ReaderOptions()), rec)
    assert builder.text_bytes == 4
    steps = builder.flush().steps.to_pydict()
    assert steps["episode_id"] == ["line-1", "line-1", "line-2", "e", "e", "e"]
    assert steps["step"] == [0, 1, 0, 0, 1, 2]
    assert steps["is_first"] == [True, False, True, True, False, False]
    assert steps["is_last"] == [False, True, True, False, False, True]
    assert steps["terminated"] == [False, False, True, False, False, True]
    assert steps["truncated"] == [False, True, False, False, False, False]
    assert steps["reward"] == [0.0, 2.0, 0.5, 1.0, 2.0, 3.0]
    assert steps["obs"] == [None] * 6


_LINK = st.one_of(
    st.none(),
    st.text(max_size=6),
    st.sampled_from(["\ud800", 'é\u2028\x00"\\', "</x>"]),
    st.integers(-3, 3),
    st.lists(st.none(), max_size=1),
)


@settings(max_examples=200, deadline=None)
@given(call=_LINK, name=_LINK)
def test_a_tool_link_is_written_as_the_encoder_writes_it(call: Any, name: Any) -> None:
    """`_tool_link` quotes two strings itself: the text `_LINK_JSON` would write (any text,
    escapes and lone surrogates too), and the encoder's for other values."""
    m = {k: v for k, v in (("tool_call_id", call), ("name", name)) if v is not None}
    want = formats._LINK_JSON.encode(m) if m else None
    assert formats._tool_link({"role": "tool", "tool_call_id": call, "name": name}) == want


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["task_id", "label", "language", "x"]), _VALUES))
def test_episode_attributes_read_as_optional_strings(record: dict[str, Any]) -> None:
    """`_attrs` reads each episode key as `_opt` of a string does, with the same problems."""
    c, want_c = ProblemCollector(), ProblemCollector()
    attrs = formats._attrs(record, RecordProblems(1, c))
    want = {k: formats._opt(record, k, "str", RecordProblems(1, want_c), k)
            for k in formats._EPISODE_KEYS}  # fmt: skip
    assert {k: attrs[k] for k in formats._EPISODE_KEYS} == want
    assert c.problems() == want_c.problems()
