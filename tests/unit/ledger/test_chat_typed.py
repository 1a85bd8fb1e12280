"""The common chat record decoded straight into typed structs (``chat.typed_chat``, issue 21
item 5, chat48) is the episode the two steps it stands in for give: `jsonl.fast_object`, then
``chat._plain_chat``; or it is not taken (None: the caller decodes the line as before), which
it is for every line either of them refuses, in particular every line with a key given twice,
at any depth.

The records are test_rollout_formats.py's (every field near its plain shape, one change off it,
or anything), written as JSON text in several ways (ASCII or not, spaced or compact).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import testkit
from hypothesis import event, given, settings
from hypothesis import strategies as st

from trajledger.ledger.rollouts import chat, reader_process
from trajledger.ledger.rollouts.chunks import ReaderOptions
from trajledger.ledger.rollouts.jsonl import fast_object


def _tests_module(name: str, relative: str) -> Any:
    path = Path(__file__).parent / relative
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_F = _tests_module("_chat48_formats", "test_rollout_formats.py")


def _two_steps(raw: bytes) -> Any:
    obj = fast_object(raw)
    return None if obj is None else chat._plain_chat(obj)


def _text(record: Any, ascii_only: bool, compact: bool) -> bytes:
    seps = (",", ":") if compact else (", ", ": ")
    return json.dumps(record, ensure_ascii=ascii_only, separators=seps).encode() + b"\n"


@settings(max_examples=500, deadline=None)
@given(_F._CHAT_RECORD, st.booleans(), st.booleans())
def test_a_typed_record_is_the_two_steps_episode(
    record: dict[str, Any], ascii_only: bool, compact: bool
) -> None:
    """When taken, the same episode (rows, attributes, flags); a line the two steps refuse is
    refused. (A record the two steps take may be left to them: a tool call id that is not a
    string, which the structs do not type.)"""
    raw = _text(record, ascii_only, compact)
    typed, two = chat.typed_chat(raw), _two_steps(raw)
    event("typed" if typed is not None else "two steps" if two is not None else "neither")
    assert typed is None or typed == two


def _with_a_repeat(v: Any, at: list[int], key_index: int, again: Any) -> str:
    """``v`` as JSON text whose ``at[0]``-th object (in document order) gives one of its keys
    twice: first as in ``v``, then, last in the object, with the value ``again``."""
    if isinstance(v, dict):
        here = at[0] == 0
        at[0] -= 1
        pairs = [f"{json.dumps(k)}: {_with_a_repeat(x, at, key_index, again)}"
                 for k, x in v.items()]  # fmt: skip
        if here and v:
            k = list(v)[key_index % len(v)]
            pairs.append(f"{json.dumps(k)}: {json.dumps(again)}")
        return "{" + ", ".join(pairs) + "}"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_with_a_repeat(x, at, key_index, again) for x in v) + "]"
    return json.dumps(v)


_AGAIN = st.one_of(
    st.none(), st.integers(-3, 3), st.text(max_size=3), st.just([]), st.just({}),
    st.just([{"role": "user", "content": "x"}]),
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.one_of(_F._GOOD_RECORD, _F._CHAT_RECORD), st.data())
def test_a_key_given_twice_is_never_typed(record: dict[str, Any], data: Any) -> None:
    """A key given twice in any object of the line, with any second value (the same one too):
    not taken, as `fast_object` does not take it (the strict decoder refuses the line)."""
    which = data.draw(st.integers(0, len(_flat(record)) - 1))
    key_index = data.draw(st.integers(0, 20))
    again = data.draw(st.one_of(_AGAIN, st.just("same")))
    obj = _flat(record)[which]
    if not obj:
        return
    if again == "same":  # the value it had: msgspec's result is then unchanged
        again = obj[list(obj)[key_index % len(obj)]]
    raw = (_with_a_repeat(record, [which], key_index, again) + "\n").encode()
    assert fast_object(raw) is None
    assert chat.typed_chat(raw) is None


def _flat(record: Any) -> list[dict[str, Any]]:
    """The objects of ``record``, in document order."""
    flat: list[dict[str, Any]] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            flat.append(v)
            for x in v.values():
                walk(x)
        elif isinstance(v, list | tuple):
            for x in v:
                walk(x)

    walk(record)
    return flat


def test_the_bench_record_is_typed() -> None:
    """The record `bench/ingest_bench.py` writes is taken, so the tests above compare episodes;
    one unknown key, in the record or in a message, or a mistyped field is not."""
    record: dict[str, Any] = testkit.common_chat_record()
    record["messages"][1]["content"] = "u: v"  # (a colon in a value: the count's case)
    raw = _text(record, True, False)
    ep = chat.typed_chat(raw)
    assert ep is not None and ep == _two_steps(raw) and ep.rows is not None
    assert len(ep.rows) == 5
    assert chat.typed_chat(_text({**record, "tags": ["a"]}, True, False)) is None
    assert chat.typed_chat(_text({**record, "language": 1}, True, False)) is None
    assert chat.typed_chat(_text({**record, "reward": True}, True, False)) is None
    odd = [*record["messages"], {"role": "user", "content": "x", "x": 1}]
    assert chat.typed_chat(_text({**record, "messages": odd}, True, False)) is None
    assert chat.typed_chat(raw.replace(b'"ep-1"', b'"ep\\u003a1"')) is None  # not provable


def _hostile_chat_lines() -> list[bytes]:
    """Every hostile line of test_rollout_jsonl_fast.py, spliced into each place of a chat
    record the structs type (a message's content, tool calls, a record's number, id, usage and
    judge scores), the hostile chat lines of tests/e2e/test_hostile_inputs.py, and
    test_rollout_parallel.py's kinds of line."""
    fast = _tests_module("_chat48_jsonl_fast", "test_rollout_jsonl_fast.py")
    e2e = Path(__file__).parents[2] / "e2e" / "test_hostile_inputs.py"
    text = e2e.read_text()
    lines: list[bytes] = []
    for raw in fast.HOSTILE:
        v = raw.strip()
        lines += [
            raw,
            b'{"messages":[{"role":"user","content":"x"}],"usage":' + v + b"}",
            b'{"messages":[{"role":"assistant","tool_calls":' + v + b"}]}",
            b'{"messages":[{"role":"user"}],"judge_scores":' + v + b"}",
            b'{"messages":[' + raw.replace(b'{"a"', b'{"role":"user","content"', 1) + b"]}",
            raw.replace(b'{"a"', b'{"messages":[{"role":"user"}],"reward"', 1),
            raw.replace(b'{"a"', b'{"messages":[{"role":"tool"}],"episode_id"', 1),
            raw.replace(b'{"a"', b'{"messages":[{"role":"tool","name"', 1) + b"]}",
        ]
    assert "def chat_line" in text and "NEST" in text  # the shapes below are that file's
    base = '"episode_id":"e1","reward":1,'
    deep = "[" * 100_000 + "]" * 100_000
    for tail in (
        f'"messages":[{{"role":"user","content":{deep}}}]',
        f'"messages":[{{"role":"assistant","content":null,"tool_calls":{deep}}}]',
        '"messages":[{"role":"user"}],"judge_scores":' + '{"a":' * 100_000 + "1" + "}" * 100_000,
        '"messages":[{"role":"user","content":"a\\ud800b"}]',
        '"messages":[{"role":"user"}],"episode_id":"e\\udfff"',
        '"messages":[{"role":"user"}],"judge_scores":{"\\ud800":1}',
        '"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"\\udc00"}]}]',
        '"messages":[{"role":"user","content":"\\ud83d\\ude00"}]',
    ):
        lines.append(("{" + base + tail + "}").encode())
    lines.append(b'{"episode_id":"e\xff","messages":[{"role":"user"}]}')
    parallel = _tests_module("_chat48_parallel", "test_rollout_parallel.py")
    lines += [make(n).encode() for n in range(3) for make in parallel.LINES.values()]
    return [line if line.endswith(b"\n") else line + b"\n" for line in lines]


def _block(data: bytes) -> Any:
    b = reader_process._map_block("chat-jsonl", ReaderOptions(id_prefix="p/"), 3, data)
    c = b.chunk
    chunk = None if c is None else (
        c.steps.to_pylist(), None if c.episodes is None else c.episodes.to_pylist(), c.meta, c.read
    )  # fmt: skip
    return chunk, b.records, b.blanks, b.events, b.more


def test_hostile_chat_lines_decide_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's block of each hostile line, and of all of them, is what it was before the
    structs (`typed_chat` off: the two steps and the general path, as at 1c149981): the same
    rows, records, problems and line numbers; and a line the structs take is the two steps'."""
    lines = _hostile_chat_lines()
    taken = 0
    for raw in lines:
        typed = chat.typed_chat(raw)
        assert typed is None or typed == _two_steps(raw), raw[:200]
        taken += typed is not None
    assert taken >= 10  # the splices are chat records, so some are typed and compared
    blocks = [*lines, b"".join(lines)]
    now = [_block(data) for data in blocks]
    monkeypatch.setattr(reader_process, "typed_chat", lambda raw: None)
    before = [_block(data) for data in blocks]
    for data, a, b in zip(blocks, now, before, strict=True):
        assert a == b, data[:200]
