"""Reading one field of a record: the helpers every record mapping shares.

Scope: a field read with its JSON type checked (`opt`: a string, number, integer, boolean or
object, or absent), numbers float64 holds (`is_num`, `beyond`), times (`timestamp_us`,
`to_utc`), JSON text (`json_text`: tool calls and results), the episode id (`episode_id_of`),
and the fields a mapping does not place, kept as typed JSON (`extras_of`). Each problem goes to
the record's `RecordProblems` with the field's name; nothing is raised. A module apart from the
mappings (``chat.py``, ``trl_verl.py``) so that every format reads a field one way, with the
same messages.
Non-scope: what a field means in a format (the mappings), where a mapped episode goes
(``chunk_builder.py``).
Spec: ``schemas/rollout-inputs.md``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from typing import Any, Final

from . import typed_json
from .chunks import RecordProblems

__all__ = [
    "COMPACT_JSON",
    "beyond",
    "episode_id_of",
    "extras_of",
    "is_num",
    "json_text",
    "json_type",
    "opt",
    "timestamp_us",
    "to_utc",
]


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


COMPACT_JSON: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


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
