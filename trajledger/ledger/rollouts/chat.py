"""Chat rollouts (``messages``) mapped onto rollout schema v3, one record at a time.

Scope: a chat record (``chat-jsonl``: a JSON line, or a row of a table, with ``messages``) to
one episode (`map_chat`): each message to a step (`_message`; the TRL and verl formats' prompts
and completions too, `text_or_messages`), and the record's attributes, rewards, usage and
latency. The common record (plain messages, plain fields) is mapped in one pass straight to the
builder's rows (`_plain_chat`), tested against the general path on random records
(tests/unit/ledger/test_rollout_formats.py). A module of its own: the largest mapping, and the
hot path of chat recording.
Non-scope: reading one field (``fields.py``), the TRL and verl formats (``trl_verl.py``), which
format a record is (``formats.py``), queueing the episodes (``chunk_builder.py``).
Spec: ``schemas/rollout-inputs.md`` (the chat format, field by field).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from .chunk_builder import LATENCY, Episode
from .chunks import ReaderOptions, RecordProblems
from .fields import (
    COMPACT_JSON,
    beyond,
    episode_id_of,
    extras_of,
    is_num,
    json_text,
    json_type,
    opt,
    timestamp_us,
)
from .jsonl import provable

__all__ = ["TRUNCATION_REASONS", "map_chat", "plain_chat", "text_or_messages", "typed_chat"]


TRUNCATION_REASONS: Final = frozenset(
    {"truncated", "length", "max_tokens", "max_turns", "timeout", "time_limit"}
)
"""``termination_reason`` values that mark the last step truncated, not terminated."""


_quoted: Final = json.encoder.encode_basestring  # a string as `_LINK_JSON` quotes it


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
    ``ChunkBuilder.queue`` give it: tested against them with this path off, on random records
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
        if role == "assistant":
            target = i
        rows.append(_row(before_last if i < last else reward, role, content, calls, link, model))
    return _episode(eid, attrs, rows, target, latency, prompt, completion)


plain_chat: Final = _plain_chat
"""`_plain_chat`, for the reader's workers (``reader_process._map_block``): what it maps, it
maps without a problem, so a worker queues it without the general path's steps."""


# --------------------------------------------------------------------------------------------
# The common chat record decoded straight from its line (issue 21 item 5, chat48)


class _Message(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A message `_plain_message` takes, as msgspec decodes it: `_PLAIN_MESSAGE_KEYS` only.
    An absent key is `UNSET` (never encoded), so a message encodes back to the keys it had."""

    role: str
    content: str | UnsetType | None = UNSET
    tool_calls: list[Any] | dict[str, Any] | UnsetType | None = UNSET
    tool_call_id: str | UnsetType | None = UNSET
    name: str | UnsetType | None = UNSET


_Number = int | float | None | UnsetType
_Text = str | None | UnsetType


class _Chat(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A record whose keys are `_PLAIN_CHAT_KEYS` and whose values have the types
    `_plain_chat` takes (the checks of range and emptiness are `typed_chat`'s)."""

    messages: list[_Message]
    episode_id: _Text = UNSET
    reward: _Number = UNSET
    judge_scores: dict[str, int | float] | UnsetType | None = UNSET
    usage: dict[str, Any] | UnsetType | None = UNSET
    cost_usd: _Number = UNSET
    latency_ms: _Number = UNSET
    model_id: _Text = UNSET
    task_id: _Text = UNSET
    group_id: _Text = UNSET
    label: _Text = UNSET
    env_version: _Text = UNSET
    policy_version: _Text = UNSET
    language: _Text = UNSET
    task_type: _Text = UNSET
    termination_reason: _Text = UNSET


_CHAT_DECODER: Final = msgspec.json.Decoder(_Chat)
_ENCODER: Final = msgspec.json.Encoder()


def _none(v: Any) -> Any:
    return None if v is UNSET else v


def typed_chat(raw: bytes) -> Episode | None:
    """`_plain_chat` of the line ``raw`` decoded by `fast_object`, decoded by msgspec straight
    into `_Chat` (its keys, types and nesting checked in C); None when it is not proved to be
    that episode, and then the caller decodes and maps the line as before.

    The proof is `fast_object`'s: the line may be decoded by msgspec (`provable`), and it has
    as many colons as the decoded record encoded again, so no key was given twice (msgspec
    keeps the last value of a repeated key, in a struct as in a dict; an absent key is `UNSET`
    and not encoded, so nothing is added to the count either). Unknown keys and wrong types
    are refused by the decoder; what remains of `_plain_chat`'s checks (a non-empty list and
    id, integers within float64's exact range or int64, tool calls that `COMPACT_JSON` writes)
    is made here, and the episode is built as `_plain_chat` builds it. Tested against it on
    random records and lines (tests/unit/ledger/test_chat_typed.py)."""
    if not provable(raw):
        return None
    try:
        r = _CHAT_DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):  # (ValidationError is a DecodeError)
        return None
    if raw.count(b":") != _ENCODER.encode(r).count(b":"):
        return None
    messages, eid, reward = r.messages, _none(r.episode_id), _none(r.reward)
    cost, latency = _none(r.cost_usd), _none(r.latency_ms)
    if not messages or eid == "":
        return None
    if not ((reward is None or _num(reward)) and (cost is None or _num(cost))
            and (latency is None or _num(latency))):  # fmt: skip
        return None
    scores = _none(r.judge_scores)
    if scores is not None:
        if not all(map(_num, scores.values())):
            return None
        scores = [(k, float(v)) for k, v in scores.items()]
    prompt = completion = None
    usage = _none(r.usage)
    if usage is not None:
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        for v in (prompt, completion):
            if v is not None and (type(v) is not int or v not in _INT64):
                return None
    model = _none(r.model_id)
    attrs: dict[str, Any] = {
        "task_id": _none(r.task_id), "group_id": _none(r.group_id), "label": _none(r.label),
        "env_version": _none(r.env_version), "policy_version": _none(r.policy_version),
        "language": _none(r.language), "task_type": _none(r.task_type),
        "termination_reason": _none(r.termination_reason),
        "seed": None, "invalid": None, "success": None, "cost_usd": cost, "judge_scores": scores,
    }  # fmt: skip
    rows: list[tuple[Any, ...]] = []
    last = len(messages) - 1
    before_last = None if reward is None else 0.0  # an episode's reward: on its last step
    target = -1  # the last assistant message, which takes the episode's usage and latency
    for i, m in enumerate(messages):
        content, calls, call, name = m.content, m.tool_calls, m.tool_call_id, m.name
        if content is UNSET:
            content = None
        text = link = None  # the tool calls as JSON text, the tool link
        if calls is not UNSET or call is not UNSET or name is not UNSET:  # (most messages: none)
            if calls is not UNSET and calls is not None:
                try:
                    c = _COMPACT_C
                    text = "".join(c(calls, 0)) if c else COMPACT_JSON.encode(calls)
                except (TypeError, ValueError, RecursionError):
                    return None
            call = None if call is UNSET else call
            name = None if name is UNSET else name
            if call is not None and name is not None:  # as `_tool_link` writes it
                link = f'{{"tool_call_id":{_quoted(call)},"name":{_quoted(name)}}}'
            elif call is not None or name is not None:
                link = _LINK_JSON.encode({"tool_call_id": call} if name is None else {"name": name})
        role = m.role
        if role == "assistant":
            target = i
        rows.append(_row(before_last if i < last else reward, role, content, text, link, model))
    return _episode(eid, attrs, rows, target, latency, prompt, completion)


def _row(reward: Any, role: str, content: Any, calls: Any, link: Any, model: Any
         ) -> tuple[Any, ...]:
    """One message's step row of the two fast paths (`_plain_chat`, `typed_chat`): the model
    named on the assistant's only."""
    return (reward, role, content, None, calls, link, None, None, None, None, None,
            model if role == "assistant" else None, None, None, None)


def _episode(eid: Any, attrs: dict[str, Any], rows: list[tuple[Any, ...]], target: int,
             latency: Any, prompt: Any, completion: Any) -> Episode:
    """The fast paths' episode: the usage on the assistant's last step (the last step when no
    message is the assistant's: ``target`` -1)."""
    if latency is not None or prompt is not None or completion is not None:
        row = rows[target]
        rows[target] = (*row[:LATENCY], latency, prompt, completion, *row[LATENCY + 3:])
    truncated = attrs["termination_reason"] in TRUNCATION_REASONS
    return Episode(eid, [], attrs, None, truncated, rows=rows)
