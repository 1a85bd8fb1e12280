"""Record mappings (``ledger/rollouts/chat.py``, ``chunk_builder.py``), white-box: the fast
path for the common chat message (`_plain_message`) maps every message it takes as the general
`_message` does, with the same problems, and the column-wise `ChunkBuilder` gives the per-step
flags and rewards of its definition."""

from __future__ import annotations

from typing import Any

import pytest
import testkit
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.ledger.rollouts import chat, fields, formats
from trajledger.ledger.rollouts.chunk_builder import ChunkBuilder
from trajledger.ledger.rollouts.chunks import ReaderOptions, RecordProblems
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
    step = chat._message(m, RecordProblems(7, c), "messages[0]")
    return step, c.problems()


@settings(max_examples=400, deadline=None)
@given(_MESSAGES)
def test_plain_messages_map_as_the_general_path(m: dict[str, Any]) -> None:
    fast = _mapped(m)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(chat, "_plain_message", lambda *_: None)
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
    want = chat._LINK_JSON.encode(m) if m else None
    assert chat._tool_link({"role": "tool", "tool_call_id": call, "name": name}) == want


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["task_id", "label", "language", "x"]), _VALUES))
def test_episode_attributes_read_as_optional_strings(record: dict[str, Any]) -> None:
    """`_attrs` reads each episode key as `opt` of a string does, with the same problems."""
    c, want_c = ProblemCollector(), ProblemCollector()
    attrs = chat._attrs(record, RecordProblems(1, c))
    want = {k: fields.opt(record, k, "str", RecordProblems(1, want_c), k)
            for k in chat._EPISODE_KEYS}  # fmt: skip
    assert {k: attrs[k] for k in chat._EPISODE_KEYS} == want
    assert c.problems() == want_c.problems()


# The common chat record (`chat._plain_chat`): every field near its plain shape, and the
# values that take a record off it (wrong types, extra keys, out-of-range counts, tool calls
# that cannot be written), so both sides of each of its tests are drawn.
# (No lone surrogate: no decoder gives one, and Arrow cannot hold it.)
_TEXT = st.one_of(st.none(), st.text(max_size=4), st.sampled_from(["é\u2028", '"\\', ""]))
_ID = st.one_of(_TEXT, st.integers(-3, 3), st.lists(st.none(), max_size=1))
_NUMBER = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, width=32),
    st.sampled_from([True, "1", 1 << 53, float("inf"), [1]]),
)
_CALLS = st.one_of(
    st.none(),
    st.lists(st.dictionaries(st.sampled_from(["id", "type", "function"]), _VALUES), max_size=2),
    st.dictionaries(st.sampled_from(["id", "é"]), st.one_of(_VALUES, st.just(float("inf")))),
    st.sampled_from(['[{"id": "c"}]', "not json", 3, [[[[1]]]], [float("-inf")]]),
)
_PLAIN_MESSAGE = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["user", "assistant", "tool", "system"]), _VALUES)},
    optional={
        "content": st.one_of(_TEXT, st.just(["part"])),
        "tool_calls": _CALLS,
        "tool_call_id": _ID,
        "name": _ID,
        "reward": _NUMBER,
        "x": _VALUES,
    },
)
_USAGE = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["prompt_tokens", "completion_tokens", "total"]),
        st.one_of(st.integers(-2, 900), st.sampled_from([1 << 63, -(1 << 63), 2.0, True, None])),
    ),
    st.sampled_from([[], "usage", 3]),
)
_GOOD_NUMBER = st.one_of(st.none(), st.integers(-3, 1 << 53), st.floats(allow_nan=False))
_GOOD_TEXT = st.one_of(st.none(), st.text(max_size=4))
_GOOD_RECORD = st.fixed_dictionaries(
    {
        "messages": st.lists(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "assistant", "tool", "system", ""])},
                optional={
                    "content": _GOOD_TEXT,
                    "tool_calls": st.one_of(
                        st.none(),
                        st.lists(st.dictionaries(st.text(max_size=2), _VALUES), max_size=2),
                    ),
                    "tool_call_id": _GOOD_TEXT,
                    "name": _GOOD_TEXT,
                },
            ),
            min_size=1,
            max_size=5,
        )
    },
    optional={
        "episode_id": st.one_of(st.none(), st.text(min_size=1, max_size=3)),
        "reward": _GOOD_NUMBER,
        "judge_scores": st.one_of(
            st.none(), st.dictionaries(st.text(max_size=2), st.integers() | st.floats(-1, 1))
        ),
        "usage": st.one_of(
            st.none(),
            st.dictionaries(
                st.sampled_from(["prompt_tokens", "completion_tokens", "total"]),
                st.one_of(st.none(), st.integers(-(1 << 63), (1 << 63) - 1), _VALUES),
            ),
        ),
        "cost_usd": _GOOD_NUMBER,
        "latency_ms": _GOOD_NUMBER,
        "model_id": _GOOD_TEXT,
        "task_id": _GOOD_TEXT,
        "group_id": _GOOD_TEXT,
        "termination_reason": st.one_of(st.sampled_from(["length", "timeout", "success"])),
    },
)
_ANY_RECORD = st.fixed_dictionaries(
    {
        "messages": st.one_of(
            st.lists(_PLAIN_MESSAGE, min_size=1, max_size=5),
            st.sampled_from([[], "hi", None, [None], [{"role": "user"}, 3]]),
        )
    },
    optional={
        "episode_id": st.one_of(st.sampled_from(["e1", "e2", "", 7, True, None]), _TEXT),
        "reward": _NUMBER,
        "rewards": st.sampled_from([None, [1, 2], [0.5]]),
        "judge_scores": st.one_of(
            st.dictionaries(st.sampled_from(["acc", "safety", "é"]), _NUMBER, max_size=3),
            st.sampled_from([None, [], "good"]),
        ),
        "usage": _USAGE,
        "cost_usd": _NUMBER,
        "latency_ms": _NUMBER,
        "model_id": st.one_of(_TEXT, st.just(3)),
        "task_id": _TEXT,
        "termination_reason": st.one_of(st.sampled_from(["length", "timeout", "success"]), _VALUES),
        "language": st.one_of(_TEXT, st.just(1)),
        "seed": st.sampled_from([None, 3, "12", True]),
        "success": st.sampled_from([None, True, 1]),
        "tags": _VALUES,
    },
)
_OFF_THE_PLAIN_PATH: list[tuple[str, Any]] = [
    *(("usage", {"prompt_tokens": v}) for v in (1 << 63, True, 2.0, "3")),
    ("usage", {"completion_tokens": -(1 << 63) - 1}),
    ("usage", []),
    *(("judge_scores", {"acc": v}) for v in (True, "1", None, [1])),
    ("judge_scores", [["acc", 1]]),
    *((k, v) for k in ("reward", "cost_usd", "latency_ms") for v in (True, "3", [1], {})),
    *((k, v) for k in ("reward", "cost_usd", "latency_ms")
      for v in ((1 << 53) + 1, -(1 << 60) - 1, 10**400, -(10**400))),
    *(("judge_scores", {"acc": v}) for v in ((1 << 53) + 1, 10**400)),
    *((k, v) for k in ("model_id", "task_id", "language") for v in (3, False, ["a"])),
    *(("episode_id", v) for v in ("", 7, True, 1.5)),
    ("rewards", [1]), ("seed", 3), ("invalid", True), ("success", False), ("tags", 1),
    ("messages", []),
    ("messages", ({"role": "user"},)),
    *(("message", m) for m in (
        None, [], {"role": "user", "x": 1}, {"role": 1}, {"content": "c"},
        {"role": "user", "content": ["part"]}, {"role": "user", "content": 3},
        {"role": "assistant", "tool_calls": "[]"}, {"role": "assistant", "tool_calls": 3},
        {"role": "assistant", "tool_calls": [float("inf")]}, {"role": "user", "reward": 1},
        {"role": "tool", "tool_call_id": 3}, {"role": "tool", "name": [None]},
        {"role": "assistant", "tool_calls": [], "reasoning_content": "r"},
    )),
]  # fmt: skip
"""One change each that takes an otherwise plain record off `_plain_chat` (or not: a
changed key the general path accepts too)."""


def _one_off(draw: Any) -> dict[str, Any]:
    record = dict(draw(_GOOD_RECORD))
    key, value = draw(st.sampled_from(_OFF_THE_PLAIN_PATH))
    if key == "message":
        messages = list(record["messages"])
        messages.insert(draw(st.integers(0, len(messages))), value)
        record["messages"] = messages
    else:
        record[key] = value
    return record


_CHAT_RECORD = st.one_of(_GOOD_RECORD, st.composite(_one_off)(), _ANY_RECORD)


def _built(records: list[dict[str, Any]]) -> tuple[Any, ...]:
    """What a builder makes of the records, as the readers feed it."""
    c = ProblemCollector()
    builder = ChunkBuilder(c, ReaderOptions(id_prefix="p/"), {})
    texts = []
    for number, record in enumerate(records, 1):
        rec = RecordProblems(number, c)
        builder.add(formats.map_record("chat-jsonl", record, rec, ReaderOptions()), rec)
        texts.append((builder.rows, builder.text_bytes))
    chunk = builder.flush()
    assert chunk.episodes is not None
    return chunk.steps, chunk.episodes, texts, c.problems()


@settings(max_examples=300, deadline=None)
@given(st.lists(_CHAT_RECORD, min_size=1, max_size=4))
def test_plain_chat_records_map_as_the_general_path(records: list[dict[str, Any]]) -> None:
    """`_plain_chat` gives each record it takes the step and episode columns, row and text
    counts `map_chat` and the builder give it with the fast path off, and no problem (it
    takes no record with one): columns compared with their types, bit for bit."""
    fast = _built(records)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(chat, "_plain_chat", lambda _: None)
        general = _built(records)
    assert fast[0].schema == general[0].schema and fast[1].schema == general[1].schema
    assert fast[0].to_pydict() == general[0].to_pydict()
    assert fast[1].to_pydict() == general[1].to_pydict()
    assert fast[0].equals(general[0]) and fast[1].equals(general[1])
    assert fast[2:] == general[2:]


def test_the_common_chat_record_takes_the_plain_path() -> None:
    """The record `bench/ingest_bench.py` writes (and records like it) is taken by
    `_plain_chat`, so the test above compares something; one extra key or a numeric
    attribute sends it to the general path."""
    record = testkit.common_chat_record()
    ep = chat._plain_chat(record)
    assert ep is not None and ep.rows is not None and len(ep.rows) == 5
    assert chat._plain_chat({**record, "tags": ["a"]}) is None
    assert chat._plain_chat({**record, "language": 1}) is None
    steps, episodes, _, problems = _built([record])
    assert problems == ()
    got = steps.to_pydict()
    assert got["reward"] == [0.0, 0.0, 0.0, 0.0, 0.5]
    assert got["model_id"] == [None, None, "agent-7b", None, "agent-7b"]
    assert got["prompt_tokens"] == [None, None, None, None, 120]
    assert got["tool_calls"][2] == (
        '[{"id":"c1","type":"function",'
        '"function":{"name":"fetch","arguments":"{\\"url\\": \\"x\\"}"}}]'
    )
    assert got["tool_results"][3] == '{"tool_call_id":"c1","name":"fetch"}'
    assert episodes.to_pydict()["judge_scores"] == [[("accuracy", 0.25), ("safety", 1.0)]]


@pytest.mark.parametrize("key", ["reward", "cost_usd", "latency_ms", "judge_scores", "message"])
def test_integers_past_float64_are_problems_and_past_2_53_rounded(key: str) -> None:
    """JSON allows integers of any size; a float64 column holds those within +-2**1024 as
    their nearest double (Arrow refused to convert one past 2**53 and `record` ended in a
    BUG line) and one beyond it is a problem of its record (it ended in OverflowError)."""
    def record(v: int) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "q"},
                                          {"role": "assistant", "content": "a"}]
        r: dict[str, Any] = {"messages": messages}
        if key == "judge_scores":
            r[key] = {"acc": v}
        elif key == "message":
            messages[1]["reward"] = v
        else:
            r[key] = v
        return r

    steps, episodes, _, problems = _built([record((1 << 60) + 1)])
    assert not problems
    columns = {**steps.to_pydict(), **episodes.to_pydict()}
    got = {"reward": columns["reward"][-1], "cost_usd": columns["cost_usd"][0],
           "latency_ms": columns["latency_ms"][-1], "judge_scores": columns["judge_scores"][0],
           "message": columns["reward"][-1]}[key]
    assert got in (float((1 << 60) + 1), [("acc", float((1 << 60) + 1))]), got
    for big in (10**400, -(10**400)):
        *_, problems = _built([record(big)])
        assert [p.message for p in problems] == ["an integer of 401 digits, beyond float64's range"]


@pytest.mark.parametrize("seconds", [10**300, 1e300, -(2.0**63), 10**400],
                         ids=["int-1e300", "1e300", "-2**63", "int-1e400"])
def test_a_timestamp_beyond_the_column_is_a_problem(seconds: Any) -> None:
    """Seconds since the epoch whose microseconds int64 cannot hold: a problem of the record,
    not an overflow (a float's `inf`, `round` of it, or Arrow's refusal)."""
    messages = [{"role": "user", "content": "q", "timestamp": seconds},
                {"role": "assistant", "content": "a"}]
    *_, problems = _built([{"messages": messages}])
    assert [(p.column, p.message) for p in problems] == [(
        "messages[0].timestamp",
        "seconds since the epoch beyond a timestamp's range (int64 microseconds)")]


def _problems(kind: str, record: dict[str, Any], opts: ReaderOptions | None = None) -> Any:
    """The problems `map_record` finds in one record of ``kind`` (it must not raise)."""
    c = ProblemCollector()
    formats.map_record(kind, record, RecordProblems(1, c), opts or ReaderOptions())
    return [(p.column, p.message) for p in c.problems()]


@pytest.mark.parametrize("seed", ["²", "--5", "-", "5-", "٣", "1" * 5000, "9" * 20])
def test_a_seed_string_not_a_decimal_int64_is_a_problem(seed: str) -> None:
    """A seed may come as a decimal string (JSON's 2**53 limit); any other string, or one past
    int64, is a problem of its record. ``str.isdigit`` let superscript digits and a doubled
    minus reach `int` (ValueError, a BUG line), and 5,000 digits its digit limit."""
    problems = _problems("chat-jsonl", {"messages": [{"role": "user"}], "seed": seed})
    assert len(problems) == 1 and problems[0][0] == "seed", problems
    assert problems[0][1] in ("string, want an integer",
                              f"a decimal string of {len(seed)} digits, out of the int64 range")


@pytest.mark.parametrize(("seed", "want"), [("12", 12), ("-0012", -12),
                                           (str(-(1 << 63)), -(1 << 63))])
def test_a_decimal_seed_string_is_its_integer(seed: str, want: int) -> None:
    c = ProblemCollector()
    (ep,) = formats.map_record("chat-jsonl", {"messages": [{"role": "user"}], "seed": seed},
                               RecordProblems(1, c), ReaderOptions())  # fmt: skip
    assert not c.problems() and ep.attrs["seed"] == want


@pytest.mark.parametrize("time", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-00:30"])
def test_a_time_beyond_the_calendar_in_utc_is_a_problem(time: str) -> None:
    """An ISO time whose UTC falls before year 1 or after 9999: a problem of its record, not
    an OverflowError from `datetime.astimezone`."""
    record = {"messages": [{"role": "user", "content": "q", "timestamp": time}]}
    assert _problems("chat-jsonl", record) == [
        ("messages[0].timestamp", f"{time!r} is out of the range of times in UTC (years 1 to 9999)")
    ]


@pytest.mark.parametrize(
    ("scores", "weights"),
    [({"a": 1e308, "b": 1e308}, None), ({"a": 1.0, "b": 1.0}, {"a": 1e308, "b": 1e308}),
     ({"a": 1.0, "b": 1.0}, {"a": float("inf"), "b": float("-inf")}),
     ({"a": 1.0}, {"a": float("inf")}), ({"a": 1.0}, {"a": float("nan")})],
    ids=["scores", "weights", "inf-minus-inf", "inf", "nan"],
)
def test_a_weighted_reward_beyond_float64_is_a_problem(
    scores: dict[str, float], weights: dict[str, float] | None
) -> None:
    """TRL completions: a weighted sum of finite scores that is not finite (`math.fsum` raised
    OverflowError past float64, ValueError for inf - inf; a library caller's infinite or NaN
    weight made an infinite or NaN reward) is a problem of its record."""
    record = {"prompt": "p", "completion": "c", "step": 1, **scores}
    assert _problems("trl-completions", record, ReaderOptions(reward_weights=weights)) == [
        (None, "the weighted sum of the reward functions' scores is not a finite number")
    ]
