"""Chat steps back into conversations, and telling chat data from observation/action data."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from trajledger import Ledger
from trajledger.runner.admission import admit
from trajledger.runner.chat import conversations, is_chat


def test_recorded_chat_comes_back_as_the_messages_given(chat_home: Path) -> None:
    ledger = Ledger.open(chat_home)
    steps = admit(ledger, "chat@1", ledger.policy()).batches[0].steps
    assert is_chat(steps)
    convs = conversations(steps)
    assert [c["episode_id"] for c in convs] == [f"conv-{i}" for i in range(8)]
    assert convs[1]["messages"] == [
        {"role": "system", "content": "answer with a number"},
        {"role": "user", "content": "what is 1 + 1 ?"},
        {"role": "assistant", "content": "2"},
    ]
    tool_use = convs[2]["messages"]
    assert tool_use[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}],
    }
    assert tool_use[3] == {"role": "tool", "content": "4", "tool_call_id": "c1", "name": "add"}


def test_observation_action_steps_are_not_chat() -> None:
    table = pa.table({
        "episode_id": ["e", "e"],
        "role": pa.array([None, None], pa.string()),
        "obs": pa.array([[0.0], [1.0]], pa.list_(pa.float32())),
        "action": pa.array([[1.0], [0.0]], pa.list_(pa.float32())),
    })
    assert not is_chat(table)
    assert conversations(table) == []
    # A message among steps with observations and actions: still not chat data.
    mixed = table.set_column(1, "role", pa.array(["user", None], pa.string()))
    assert not is_chat(mixed)
    assert not is_chat(table.slice(0, 0))


def test_other_tool_results_are_kept_parsed() -> None:
    table = pa.table({
        "episode_id": ["e", "e"],
        "role": ["assistant", "tool"],
        "content": ["x", None],
        "tool_results": pa.array([None, '[{"ok": true}]'], pa.string()),
    })
    assert conversations(table)[0]["messages"][1] == {
        "role": "tool", "content": None, "tool_results": [{"ok": True}],
    }
