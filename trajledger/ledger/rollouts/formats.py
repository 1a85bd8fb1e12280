"""What LLM training libraries write, mapped onto rollout schema v3, one record at a time.

Scope: the record formats (a record is a JSON line, or a row of a Parquet/Arrow file read as a
dict): chat rollouts (``messages``), TRL's completions table (what ``GRPOTrainer.log`` writes to
``completions/completions_NNNNN.parquet`` with ``log_completions``, and its pandas JSONL
export), TRL's dataset types (prompt/completion, preference pairs, unpaired preference with a
KTO label; conversational ``messages`` is the chat format), and verl's rollout dumps
(``_write_generations``). `kind_of_record` names the format from a record's keys; `Mapper`
objects turn records into episodes; `ChunkBuilder` collects episodes into `RolloutChunk`
objects of bounded size.
Non-scope: reading files and decompressing (``readers.py``, ``jsonl.py``), normalising and
validating the tables (``normalise.py``, ``validate.py``).
Spec: ``schemas/rollout-inputs.md`` (each mapping, field by field), ``schemas/rollout.v3.md``.

Nothing is dropped: fields a mapping does not place in a column are kept in the episode's (or,
for message fields, the step's) ``extras`` as typed JSON. Each bad record is reported with its
line (or row) and field, and left out; the caller raises after the whole input is read.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Final

import numpy as np
import pyarrow as pa

from . import typed_json
from .chunks import CHUNK_BYTES, CHUNK_TEXT_BYTES, ReaderOptions, RecordProblems, RolloutChunk
from .problems import ProblemCollector
from .schema import EPISODE_ATTR_SCHEMA, STEP_SCHEMA

__all__ = [
    "CHUNK_BYTES",
    "CHUNK_TEXT_BYTES",
    "RECORD_FORMATS",
    "TRUNCATION_REASONS",
    "ChunkBuilder",
    "ReaderOptions",
    "RecordProblems",
    "RolloutChunk",
    "json_type",
    "kind_of_record",
    "map_record",
    "repeated_id",
    "to_utc",
]

RECORD_FORMATS: Final = (
    "chat-jsonl",
    "trl-completions",
    "trl-prompt-completion",
    "trl-preference",
    "trl-kto",
    "verl-jsonl",
)
"""Formats whose records are mapped here (as JSON lines, or rows of Parquet/Arrow files)."""

TRUNCATION_REASONS: Final = frozenset(
    {"truncated", "length", "max_tokens", "max_turns", "timeout", "time_limit"}
)
"""``termination_reason`` values that mark the last step truncated, not terminated."""

_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US: Final = dt.timedelta(microseconds=1)


def is_num(v: object) -> bool:
    """A JSON number (never a boolean) that float64 holds: an integer beyond float64's range
    (JSON allows any number of digits) is none."""
    if isinstance(v, bool):
        return False
    return isinstance(v, float) or (isinstance(v, int) and -_FLOAT_INT < v < _FLOAT_INT)


_FLOAT_INT: Final = 1 << 1024
"""Integers strictly within +-2**1024 round to a finite float64; from it on, `float` raises."""


def beyond(v: object) -> str:
    """The problem of a number `is_num` refuses for its size alone, or of any other value."""
    if isinstance(v, int) and not isinstance(v, bool):
        return f"an integer of {len(str(abs(v)))} digits, beyond float64's range"
    return f"{json_type(v)}, want a number"


def json_type(v: object) -> str:
    """The JSON type name of a decoded value, for messages (``null``, ``number``...)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list | tuple):
        return "array"
    return "object"


def to_utc(value: dt.datetime) -> dt.datetime:
    """A time in UTC; a naive time is taken as UTC."""
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


_quoted: Final = json.encoder.encode_basestring  # a string as `_LINK_JSON` quotes it
COMPACT_JSON: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_COMPACT_C: Final[Callable[[object, int], tuple[str, ...]] | None] = (
    None if json.encoder.c_make_encoder is None  # type: ignore[attr-defined]
    else json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        None, COMPACT_JSON.default, json.encoder.encode_basestring, None, ":", ",", False,
        False, False,
    )
)  # fmt: skip
"""The C encoder `COMPACT_JSON.encode` makes anew for each list or object, made once (with no
check for cycles, which decoded JSON cannot have: one would end in `RecursionError`)."""
_LINK_JSON: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""Made once: ``json.dumps`` with options makes a new encoder per call."""


def json_text(v: object, rec: RecordProblems, field: str) -> str | None:
    """Tool calls and results are stored as JSON text; a string must already be JSON."""
    if v is None:
        return None
    if isinstance(v, str):
        try:
            typed_json.JSON_TEXT.decode(v)
        except ValueError as e:
            rec.error(field, f"string is not JSON text ({e}); give the JSON value itself")
            return None
        except RecursionError:
            rec.error(field, "JSON text nested too deeply")
            return None
        return v
    try:
        return COMPACT_JSON.encode(v)
    except (TypeError, ValueError) as e:
        rec.error(field, f"cannot be written as JSON: {e}")
        return None


_KIND_NAMES: Final = {
    "str": "a string",
    "num": "a number",
    "int": "an integer",
    "bool": "a boolean",
    "obj": "an object",
}


def opt(obj: Mapping[str, Any], key: str, kind: str, rec: RecordProblems, field: str) -> Any:
    """Read an optional field, checking its JSON type (a boolean is not a number)."""
    v = obj.get(key)
    if v is None:
        return None
    if kind == "str":
        ok = isinstance(v, str)
    elif kind == "num":
        ok = isinstance(v, int | float) and not isinstance(v, bool)
        if ok and not is_num(v):
            rec.error(field, beyond(v))
            return None
    elif kind == "int":
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif kind == "bool":
        ok = isinstance(v, bool)
    else:
        ok = isinstance(v, dict)
    if not ok:
        rec.error(field, f"{json_type(v)}, want {_KIND_NAMES[kind]}")
        return None
    if kind == "int" and not -(1 << 63) <= v < (1 << 63):
        rec.error(field, f"{v} is out of the int64 range")
        return None
    return float(v) if kind == "num" else v  # an integer past 2**53: float64's nearest


def timestamp_us(v: object, rec: RecordProblems, field: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, dt.datetime | str):
        try:
            parsed = v if isinstance(v, dt.datetime) else dt.datetime.fromisoformat(v)
        except ValueError:
            rec.error(field, f"{v!r} is not an ISO 8601 time")
            return None
        try:
            return (to_utc(parsed) - _EPOCH) // _US
        except OverflowError:  # before year 1 or after 9999 once in UTC
            rec.error(field, f"{v!r} is out of the range of times in UTC (years 1 to 9999)")
            return None
    if isinstance(v, int | float) and not isinstance(v, bool):  # seconds since the epoch
        us = float(v) * 1_000_000 if is_num(v) else math.inf
        if math.isfinite(us) and -(1 << 63) <= us < (1 << 63):
            return round(us)
        rec.error(field, "seconds since the epoch beyond a timestamp's range (int64 microseconds)")
        return None
    rec.error(field, f"{json_type(v)}, want an ISO 8601 string or seconds since the epoch")
    return None


def _typed(v: object, rec: RecordProblems, field: str) -> str | None:
    """A value as typed JSON text for ``extras``; None (absent) for None."""
    if v is None:
        return None
    try:
        return typed_json.dumps(v)
    except typed_json.TypedJSONError as e:
        rec.error(field, str(e).replace("$", field, 1))
        return None


def extras_of(
    obj: Mapping[str, Any], known: frozenset[str], rec: RecordProblems, where: str = ""
) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in obj.items():
        if k in known or v is None:
            continue
        text = _typed(v, rec, f"{where}{k}")
        if text is not None:
            out[k] = text
    return out


_MESSAGE_KEYS: Final = frozenset(
    {
        "role",
        "content",
        "reasoning_content",
        "tool_calls",
        "tool_results",
        "tool_call_id",
        "name",
        "reward",
        "logprob",
        "timestamp",
        "latency_ms",
        "usage",
        "cost_usd",
        "model_id",
        "safety_interventions",
    }
)

_MESSAGE_KEYS_NO_LINK: Final = _MESSAGE_KEYS - {"tool_call_id", "name"}

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


def _tool_link(m: dict[str, Any]) -> str | None:
    """A tool message's ``tool_call_id`` and ``name`` as JSON text (None when it has neither)."""
    call, name = m.get("tool_call_id"), m.get("name")
    if call is None and name is None:
        return None
    if type(call) is str and type(name) is str:  # the common case, as `_LINK_JSON` writes it
        return f'{{"tool_call_id":{_quoted(call)},"name":{_quoted(name)}}}'
    return _LINK_JSON.encode({k: m[k] for k in ("tool_call_id", "name") if m.get(k) is not None})


_PLAIN_MESSAGE_KEYS: Final = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})


def _plain_message(m: dict[str, Any], rec: RecordProblems, where: str) -> dict[str, Any] | None:
    """`_message` of the common message: only `_PLAIN_MESSAGE_KEYS`, a string role, string or
    null content; None when ``m`` is not one (then `_message` maps it). Every check `_message`
    makes that could fail on such a message is made here, in the same order, and the step is
    the same (tests/unit/ledger/test_rollout_formats.py compares both)."""
    if not m.keys() <= _PLAIN_MESSAGE_KEYS:
        return None
    role, content = m.get("role"), m.get("content")
    if type(role) is not str or not (content is None or type(content) is str):
        return None
    calls = m.get("tool_calls")
    tool_calls = None if calls is None else json_text(calls, rec, f"{where}.tool_calls")
    tool_results = _tool_link(m)
    return {
        "role": role, "content": content, "reasoning_content": None, "tool_calls": tool_calls,
        "tool_results": tool_results, "reward": None, "action_logprob": None, "timestamp": None,
        "latency_ms": None, "prompt_tokens": None, "completion_tokens": None, "cost_usd": None,
        "model_id": None, "safety_interventions": None, "extras": None,
    }  # fmt: skip


def _message(m: object, rec: RecordProblems, where: str) -> dict[str, Any] | None:
    """Map one chat message to the step columns it fills; other fields go to step extras."""
    if type(m) is dict:
        plain = _plain_message(m, rec, where)
        if plain is not None:
            return plain
    if not isinstance(m, dict):
        rec.error(where, f"{json_type(m)}, want a message object")
        return None
    role = m.get("role")
    if not isinstance(role, str):
        rec.error(f"{where}.role", f"{json_type(role)}, want a string")
    content = m.get("content")
    if content is not None and not isinstance(content, str):
        # Multi-part content (a list of parts) is kept whole, as JSON text.
        content = json_text(content, rec, f"{where}.content")
    reasoning = opt(m, "reasoning_content", "str", rec, f"{where}.reasoning_content")
    tool_results = json_text(m.get("tool_results"), rec, f"{where}.tool_results")
    known = _MESSAGE_KEYS
    link = None if tool_results is not None else _tool_link(m)
    if link is not None:
        tool_results = link
    else:
        known = _MESSAGE_KEYS_NO_LINK  # kept in extras: tool_results holds the results
    usage = opt(m, "usage", "obj", rec, f"{where}.usage") or {}
    return {
        "role": role,
        "content": content,
        "reasoning_content": reasoning,
        "tool_calls": json_text(m.get("tool_calls"), rec, f"{where}.tool_calls"),
        "tool_results": tool_results,
        "reward": opt(m, "reward", "num", rec, f"{where}.reward"),
        "action_logprob": opt(m, "logprob", "num", rec, f"{where}.logprob"),
        "timestamp": timestamp_us(m.get("timestamp"), rec, f"{where}.timestamp"),
        "latency_ms": opt(m, "latency_ms", "num", rec, f"{where}.latency_ms"),
        "prompt_tokens": opt(usage, "prompt_tokens", "int", rec, f"{where}.usage.prompt_tokens"),
        "completion_tokens": opt(
            usage, "completion_tokens", "int", rec, f"{where}.usage.completion_tokens"
        ),
        "cost_usd": opt(m, "cost_usd", "num", rec, f"{where}.cost_usd"),
        "model_id": opt(m, "model_id", "str", rec, f"{where}.model_id"),
        "safety_interventions": opt(
            m, "safety_interventions", "int", rec, f"{where}.safety_interventions"
        ),
        "extras": extras_of(m, known, rec, f"{where}.") or None,
    }


def text_or_messages(
    v: object, role: str, rec: RecordProblems, field: str
) -> list[dict[str, Any]]:
    """Prompts and completions: a string (one message) or a list of messages."""
    if isinstance(v, str):
        return [_message({"role": role, "content": v}, rec, field) or {}]
    if isinstance(v, list | tuple):
        out = [_message(m, rec, f"{field}[{i}]") for i, m in enumerate(v)]
        if not out:
            rec.error(field, "empty list, want at least one message")
        return [m for m in out if m is not None]
    rec.error(field, f"{json_type(v)}, want a string or a list of messages")
    return []


def _scores(v: object, rec: RecordProblems, field: str) -> list[tuple[str, float]] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        rec.error(field, f"{json_type(v)}, want an object of names to numbers")
        return None
    out = []
    for k, s in v.items():
        if not is_num(s):
            rec.error(f"{field}.{k}", beyond(s))
        else:
            out.append((k, float(s)))
    return out


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


_EPISODE_KEYS: Final = (
    "task_id", "group_id", "label", "env_version", "policy_version", "language", "task_type",
    "termination_reason",
)  # fmt: skip
_CHAT_KEYS: Final = frozenset(
    {"episode_id", "messages", "reward", "rewards", "judge_scores", "usage", "cost_usd",
     "latency_ms", "model_id", "seed", "invalid", "success", *_EPISODE_KEYS}
)  # fmt: skip


_DECIMAL: Final = re.compile("-?[0-9]+")
"""A decimal integer's text (``str.isdigit`` takes superscripts, which `int` refuses)."""


def _attrs(obj: dict[str, Any], rec: RecordProblems) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for k in _EPISODE_KEYS:  # `opt` of a string, without its call for absent keys and strings
        v = obj.get(k)
        attrs[k] = v if v is None or type(v) is str else opt(obj, k, "str", rec, k)
    seed = obj.get("seed")
    if isinstance(seed, str) and _DECIMAL.fullmatch(seed):  # large seeds may come as decimal
        digits = len(seed.lstrip("-").lstrip("0"))  # strings (JSON's 2^53 limit)
        if digits > 19:  # past int64 (and past `int`'s 4,300 digits, in the end)
            rec.error("seed", f"a decimal string of {len(seed)} digits, out of the int64 range")
        seed = int(seed) if digits <= 19 else None
    attrs["seed"] = opt({"seed": seed}, "seed", "int", rec, "seed")
    attrs["invalid"] = opt(obj, "invalid", "bool", rec, "invalid")
    attrs["success"] = opt(obj, "success", "bool", rec, "success")
    attrs["cost_usd"] = opt(obj, "cost_usd", "num", rec, "cost_usd")
    attrs["judge_scores"] = _scores(obj.get("judge_scores"), rec, "judge_scores")
    return attrs


def _episode_usage(obj: dict[str, Any], steps: list[dict[str, Any]], rec: RecordProblems) -> None:
    """Episode-level usage and latency go to the last assistant message, model_id to each."""
    if not steps:
        return
    assistant = [s for s in steps if s.get("role") == "assistant"]
    target = assistant[-1] if assistant else steps[-1]
    usage = opt(obj, "usage", "obj", rec, "usage") or {}
    for key in ("prompt_tokens", "completion_tokens"):
        v = opt(usage, key, "int", rec, f"usage.{key}")
        if v is not None and target[key] is None:
            target[key] = v
    latency = opt(obj, "latency_ms", "num", rec, "latency_ms")
    if latency is not None and target["latency_ms"] is None:
        target["latency_ms"] = latency
    model = opt(obj, "model_id", "str", rec, "model_id")
    if model is not None:
        for s in assistant:
            if s["model_id"] is None:
                s["model_id"] = model


def _rewards(obj: dict[str, Any], steps: list[dict[str, Any]], rec: RecordProblems) -> float | None:
    """Fill per-step rewards; return the episode-level reward (for the last step), if any.

    No reward at all is valid (SFT data): the steps' rewards stay null.
    """
    given = [k for k in ("reward", "rewards") if obj.get(k) is not None]
    per_message = any(s["reward"] is not None for s in steps)
    if len(given) + per_message > 1:
        rec.error(
            given[0] if given else "reward", "give one of reward, rewards or per-message rewards"
        )
        return None
    if "rewards" in given:
        rewards = obj["rewards"]
        if not isinstance(rewards, list) or not all(is_num(r) for r in rewards):
            rec.error("rewards", "want a list of numbers, one per message")
        elif len(rewards) != len(steps):
            rec.error(
                "rewards", f"{len(rewards)} rewards for {len(steps)} messages, want one per message"
            )
        else:
            for s, r in zip(steps, rewards, strict=True):
                s["reward"] = r
        return None
    if "reward" in given:
        return opt(obj, "reward", "num", rec, "reward")  # type: ignore[no-any-return]
    return None


def episode_id_of(obj: Mapping[str, Any], rec: RecordProblems) -> str | None:
    eid = obj.get("episode_id")
    if eid is None:
        return None
    if isinstance(eid, int) and not isinstance(eid, bool):
        return str(eid)
    if isinstance(eid, str) and eid:
        return eid
    rec.error("episode_id", f"{json_type(eid)}, want a non-empty string or an integer")
    return None


def _policy_step(obj: dict[str, Any], rec: RecordProblems) -> str | None:
    step = obj.get("step")
    if isinstance(step, float) and step.is_integer():
        step = int(step)  # pandas may write an integer column as floats
    step = opt({"step": step}, "step", "int", rec, "step")
    return None if step is None else str(step)


def map_chat(obj: dict[str, Any], rec: RecordProblems, opts: ReaderOptions) -> list[Episode]:
    plain = _plain_chat(obj)
    if plain is not None:
        return [plain]
    messages = obj.get("messages")
    steps: list[dict[str, Any]] = []
    if not isinstance(messages, list | tuple) or not messages:
        rec.error(
            "messages",
            f"{json_type(messages)}, want a non-empty list of messages"
            if not isinstance(messages, list | tuple)
            else "empty list, want at least one message",
        )
    else:
        for i, m in enumerate(messages):
            step = _message(m, rec, f"messages[{i}]")
            if step is not None:
                steps.append(step)
    attrs = _attrs(obj, rec)
    _episode_usage(obj, steps, rec)
    return [
        Episode(
            episode_id_of(obj, rec),
            steps,
            attrs,
            _rewards(obj, steps, rec),
            truncated=attrs.get("termination_reason") in TRUNCATION_REASONS,
            extras=extras_of(obj, _CHAT_KEYS, rec),
        )
    ]


_PLAIN_CHAT_KEYS: Final = frozenset(
    {"episode_id", "messages", "reward", "judge_scores", "usage", "cost_usd", "latency_ms",
     "model_id", *_EPISODE_KEYS}
)  # fmt: skip
_INT64: Final = range(-(1 << 63), 1 << 63)


def _num(v: object) -> bool:
    """A JSON number as `opt` of a number takes it (never a boolean), and as float64 holds it
    exactly (an integer past 2**53 goes to `map_chat`, which rounds it or refuses it)."""
    return type(v) is float or (type(v) is int and -_EXACT_INT <= v <= _EXACT_INT)


_EXACT_INT: Final = 1 << 53


def _plain_chat(obj: dict[str, Any]) -> Episode | None:
    """`map_chat` of the common chat record, its steps straight as `ChunkBuilder` keeps them;
    None when ``obj`` is not one, and then `map_chat` maps it (with its problems).

    The common record has only `_PLAIN_CHAT_KEYS`; an episode id that is a non-empty string or
    none; a non-empty list of messages, each one `_plain_message` takes, with tool calls a list
    or an object (written by `COMPACT_JSON`); string episode attributes; numbers for reward,
    cost and latency; judge scores an object of numbers; usage an object whose token counts are
    int64 integers or absent; a string model_id. No check of `map_chat` fails on such a record
    (it has no problem), and the steps, attributes and flags are those `map_chat` and
    ``ChunkBuilder._add`` give it: tested against them with this path off, on random records
    of every shape (tests/unit/ledger/test_rollout_formats.py). Nothing is raised here: what
    could raise is left to `map_chat`."""
    if not obj.keys() <= _PLAIN_CHAT_KEYS:
        return None
    get = obj.get
    messages, eid, reward = get("messages"), get("episode_id"), get("reward")
    if type(messages) is not list or not messages:
        return None
    if eid is not None and (type(eid) is not str or not eid):
        return None
    attrs: dict[str, Any] = {k: get(k) for k in _EPISODE_KEYS}
    if not all(v is None or type(v) is str for v in attrs.values()):
        return None
    cost, scores, usage = get("cost_usd"), get("judge_scores"), get("usage")
    latency, model = get("latency_ms"), get("model_id")
    if not (
        (reward is None or _num(reward))
        and (cost is None or _num(cost))
        and (latency is None or _num(latency))
        and (model is None or type(model) is str)
    ):
        return None
    if scores is not None:
        if type(scores) is not dict or not all(map(_num, scores.values())):
            return None
        scores = [(k, float(v)) for k, v in scores.items()]
    prompt = completion = None
    if usage is not None:
        if type(usage) is not dict:
            return None
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        for v in (prompt, completion):
            if v is not None and (type(v) is not int or v not in _INT64):
                return None
    attrs.update(seed=None, invalid=None, success=None, cost_usd=cost, judge_scores=scores)
    rows: list[tuple[Any, ...]] = []
    last = len(messages) - 1
    before_last = None if reward is None else 0.0  # an episode's reward: on its last step
    target = -1  # the last assistant message, which takes the episode's usage and latency
    for i, m in enumerate(messages):
        if type(m) is not dict or not m.keys() <= _PLAIN_MESSAGE_KEYS:
            return None
        role, content, calls = m.get("role"), m.get("content"), m.get("tool_calls")
        if type(role) is not str or not (content is None or type(content) is str):
            return None
        try:
            if calls is not None:
                if type(calls) is not list and type(calls) is not dict:
                    return None
                calls = "".join(_COMPACT_C(calls, 0)) if _COMPACT_C else COMPACT_JSON.encode(calls)
            link = _tool_link(m)
        except (TypeError, ValueError, RecursionError):
            return None
        assistant = role == "assistant"
        if assistant:
            target = i
        rows.append(
            (before_last if i < last else reward, role, content, None, calls, link, None, None,
             None, None, None, model if assistant else None, None, None, None)
        )  # fmt: skip
    if latency is not None or prompt is not None or completion is not None:
        r = rows[target]  # the last step when no message is the assistant's (target -1)
        rows[target] = (*r[:LATENCY], latency, prompt, completion, *r[LATENCY + 3:])
    truncated = attrs["termination_reason"] in TRUNCATION_REASONS
    return Episode(eid, [], attrs, None, truncated, rows=rows)


_TRL_FIXED: Final = frozenset({"episode_id", "task_id", "step", "prompt", "completion", "success"})


def map_trl_completions(
    obj: dict[str, Any], rec: RecordProblems, opts: ReaderOptions
) -> list[Episode]:
    """A row of TRL's completions table (``GRPOTrainer.log``; see rollout-inputs.md)."""
    steps = text_or_messages(obj.get("prompt"), "user", rec, "prompt")
    steps += text_or_messages(obj.get("completion"), "assistant", rec, "completion")
    weights = opts.reward_weights
    if weights is not None:
        for name in weights:
            if name not in obj:
                rec.error(name, "missing: a reward function named by --reward-weights")
        reward_cols = list(weights)
    else:
        reward_cols = [
            k
            for k, v in obj.items()
            if k not in _TRL_FIXED and k != "advantage" and (v is None or is_num(v))
        ]
    scores: list[tuple[str, float]] = []
    for name in reward_cols:
        v = obj.get(name)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue  # the function did not apply: a missing score, never a NaN reward
        if not is_num(v) or not math.isfinite(v):
            rec.error(name, f"reward function score {v!r}, want a finite number or NaN")
            continue
        scores.append((name, float(v)))
    reward: float | None
    if opts.reward_column is not None:
        v = obj.get(opts.reward_column)
        if opts.reward_column not in obj:
            rec.error(opts.reward_column, "missing: the column named by --reward-column")
        if v is None or (isinstance(v, float) and math.isnan(v)):
            reward = None
        elif is_num(v):
            reward = float(v)
        else:
            rec.error(opts.reward_column, beyond(v))
            reward = None
    elif scores:
        w = weights or {}
        try:  # TRL: weighted nansum (OverflowError past float64, ValueError of inf - inf)
            reward = math.fsum(w.get(n, 1.0) * s for n, s in scores)
        except (OverflowError, ValueError):
            reward = math.nan
        if not math.isfinite(reward):  # (an infinite or NaN weight, too)
            rec.error(None, "the weighted sum of the reward functions' scores is not a finite "
                      "number")  # fmt: skip
            reward = None
    else:
        reward = None  # every function returned None: unscorable, no reward
    attrs = {
        "task_id": opt(obj, "task_id", "str", rec, "task_id"),
        "policy_version": _policy_step(obj, rec),
        "judge_scores": scores or None,
        "success": opt(obj, "success", "bool", rec, "success"),
    }
    extras = extras_of(obj, _TRL_FIXED | set(reward_cols), rec)
    return [Episode(episode_id_of(obj, rec), steps, attrs, reward, False, extras)]


def map_trl_prompt_completion(
    obj: dict[str, Any], rec: RecordProblems, opts: ReaderOptions
) -> list[Episode]:
    """TRL prompt-completion dataset rows; with a boolean ``label``, unpaired preference (KTO)."""
    steps: list[dict[str, Any]] = []
    if obj.get("prompt") is not None:
        steps = text_or_messages(obj["prompt"], "user", rec, "prompt")
    steps += text_or_messages(obj.get("completion"), "assistant", rec, "completion")
    attrs: dict[str, Any] = {
        "task_id": opt(obj, "task_id", "str", rec, "task_id"),
        "success": opt(obj, "success", "bool", rec, "success"),
    }
    known = {"episode_id", "task_id", "prompt", "completion", "success"}
    if "label" in obj:
        label = opt(obj, "label", "bool", rec, "label")
        if label is None and obj.get("label") is None:
            rec.error("label", "null, want a boolean (KTO: desirable or not)")
        attrs["label"] = None if label is None else ("desirable" if label else "undesirable")
        known.add("label")
    reward = opt(obj, "reward", "num", rec, "reward")
    known.add("reward")
    extras = extras_of(obj, frozenset(known), rec)
    return [Episode(episode_id_of(obj, rec), steps, attrs, reward, False, extras)]


def map_trl_preference(
    obj: dict[str, Any], rec: RecordProblems, opts: ReaderOptions
) -> list[Episode]:
    """TRL preference rows: ``chosen`` and ``rejected`` (with or without ``prompt``) become two
    episodes of one group, labelled ``chosen`` and ``rejected``."""
    prompt: list[dict[str, Any]] = []
    if obj.get("prompt") is not None:
        prompt = text_or_messages(obj["prompt"], "user", rec, "prompt")
    base = episode_id_of(obj, rec)
    task = opt(obj, "task_id", "str", rec, "task_id")
    extras = extras_of(
        obj, frozenset({"episode_id", "task_id", "prompt", "chosen", "rejected"}), rec
    )
    out = []
    for side in ("chosen", "rejected"):
        steps = [dict(s) for s in prompt]
        steps += text_or_messages(obj.get(side), "assistant", rec, side)
        attrs = {"task_id": task, "label": side, "group_id": base}
        out.append(
            Episode(
                None if base is None else f"{base}/{side}",
                steps,
                attrs,
                None,
                False,
                dict(extras),
                id_suffix=f"/{side}",
            )
        )
    return out


_VERL_FIXED: Final = frozenset(
    {
        "episode_id",
        "task_id",
        "prompt",
        "input",
        "response",
        "output",
        "score",
        "reward",
        "step",
        "success",
    }
)


def map_verl(obj: dict[str, Any], rec: RecordProblems, opts: ReaderOptions) -> list[Episode]:
    """A line of verl's rollout dump (``RayPPOTrainer._write_generations``)."""
    for a, b in (("prompt", "input"), ("response", "output"), ("score", "reward")):
        if a in obj and b in obj:
            rec.error(b, f"both {a} and {b} given, want one")
    prompt = obj.get("prompt", obj.get("input"))
    response = obj.get("response", obj.get("output"))
    steps = text_or_messages(prompt, "user", rec, "prompt" if "prompt" in obj else "input")
    steps += text_or_messages(
        response, "assistant", rec, "response" if "response" in obj else "output"
    )
    key = "score" if "score" in obj else "reward"
    reward = opt(obj, key, "num", rec, key)
    extras = extras_of(obj, _VERL_FIXED, rec)
    # Numeric reward details (verl's reward_extra_info, e.g. acc) are also judge scores.
    scores = [
        (k, float(v))
        for k, v in obj.items()
        if k not in _VERL_FIXED
        and (is_num(v) or isinstance(v, bool))
        and math.isfinite(float(v))
        and k != "gts"
    ]
    uid = obj.get("uid")
    attrs = {
        "task_id": opt(obj, "task_id", "str", rec, "task_id"),
        "policy_version": _policy_step(obj, rec),
        "judge_scores": scores or None,
        # verl's uid names the prompt a group of n responses answers (GRPO's group).
        "group_id": uid if isinstance(uid, str) else None,
        "success": opt(obj, "success", "bool", rec, "success"),
    }
    return [Episode(episode_id_of(obj, rec), steps, attrs, reward, False, extras)]


_MAPPERS: Final[
    dict[str, Callable[[dict[str, Any], RecordProblems, ReaderOptions], list[Episode]]]
] = {
    "chat-jsonl": map_chat,
    "trl-completions": map_trl_completions,
    "trl-prompt-completion": map_trl_prompt_completion,
    "trl-kto": map_trl_prompt_completion,
    "trl-preference": map_trl_preference,
    "verl-jsonl": map_verl,
}


def kind_of_record(keys: set[str] | frozenset[str]) -> str | None:
    """Name a record format from the keys of a first record (or the columns of a table).

    Returns:
        One of `RECORD_FORMATS`, or None when the keys fit none.
    """
    if "messages" in keys:
        return "chat-jsonl"
    if "chosen" in keys and "rejected" in keys:
        return "trl-preference"
    if "completion" in keys and "prompt" in keys and ("advantage" in keys or "step" in keys):
        return "trl-completions"
    if "completion" in keys and "label" in keys:
        return "trl-kto"
    if "completion" in keys:
        return "trl-prompt-completion"
    if ("response" in keys or "output" in keys) and ("prompt" in keys or "input" in keys):
        return "verl-jsonl"
    return None


def map_record(
    kind: str, obj: dict[str, Any], rec: RecordProblems, opts: ReaderOptions
) -> list[Episode]:
    """Map one record of format ``kind`` to its episodes (two for a preference pair)."""
    return _MAPPERS[kind](obj, rec, opts)


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
                self._add(eid, ep)

    def _add(self, eid: str, ep: Episode) -> None:
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
