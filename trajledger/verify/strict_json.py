"""Strict JSON reading for hostile input.

Scope: decode UTF-8 JSON bytes into Python values, refusing what a lenient parser accepts:
duplicate object keys (two readers could disagree on which one wins), NaN and Infinity (not
JSON), a byte-order mark, invalid UTF-8, strings holding a lone surrogate (a ``\\ud800`` escape
without its pair: no UTF-8 writer can encode it; I-JSON, RFC 7493, refuses it) and non-object top
levels where an object is required.
Non-scope: canonicalisation. The verifier never re-serialises; it checks signatures over the
exact bytes it was given.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Final

from .errors import FormatError

__all__ = ["SURROGATE_ESCAPE", "json_list", "load_object", "loads_strict", "lone_surrogate",
           "utf8_text"]


class _Refused(ValueError):
    """What a decoder hook refuses, without the document's name (`loads_strict` adds it)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)  # built in C; a repeated key makes it shorter than the pairs
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"duplicate JSON key {key!r}")
            seen.add(key)
    return out


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    # json turns 1e400 into inf: refuse it as it refuses the Infinity literal.
    if value in (float("inf"), float("-inf")):
        raise _Refused(f"number {text[:40]} overflows to infinity")
    return value


_DECODER: Final = json.JSONDecoder(object_pairs_hook=_no_duplicates,
                                   parse_constant=_no_constant, parse_float=_finite_float)
"""One strict decoder for every document (its hooks name no document: made once, not per
call; a decoder keeps no state between calls, so threads share it as ``json.loads`` does)."""


SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: only where one occurs can a decoded string hold a lone
surrogate, so the walk of `lone_surrogate` is needed only then."""


def lone_surrogate(value: object) -> str | None:
    """The first string (key or value) of a decoded JSON value that holds a lone surrogate,
    which no UTF-8 writer (Arrow, the JSON canonicaliser, a terminal) can encode; None when
    there is none. Iterative: the value may be nested as deeply as the decoder allowed."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return v
        elif isinstance(v, dict):
            stack.extend(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return None


def utf8_text(data: bytes, what: str) -> str:
    """``data`` decoded as UTF-8 (JSON, a signed note's text).

    Raises:
        FormatError: not valid UTF-8 (the message names the first bad byte).
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"{what}: not valid UTF-8 at byte {e.start}") from e


def loads_strict(data: bytes | str, what: str = "JSON document") -> Any:
    """Parse JSON strictly.

    Args:
        data: the document, UTF-8 bytes or text.
        what: names the document in error messages.

    Returns:
        The decoded value.

    Raises:
        FormatError: invalid UTF-8, a BOM, malformed JSON, duplicate keys, NaN or Infinity
            (also a number that overflows to it), an integer too long to convert, a lone
            surrogate.
    """
    if isinstance(data, bytes):
        if data.startswith(b"\xef\xbb\xbf"):
            raise FormatError(f"{what}: starts with a UTF-8 byte-order mark")
        text = utf8_text(data, what)
    else:
        text = data
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate character, not an escape
            raise FormatError(f"{what}: not valid Unicode at character {e.start}") from e
    try:
        value = _DECODER.decode(text)
    except _Refused as e:
        raise FormatError(f"{what}: {e}") from None
    except json.JSONDecodeError as e:
        raise FormatError(
            f"{what}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from e
    except ValueError as e:
        # int() refuses more than sys.get_int_max_str_digits() digits with a bare ValueError.
        raise FormatError(
            f"{what}: a number has more than {sys.get_int_max_str_digits()} digits"
        ) from e
    except RecursionError as e:
        raise FormatError(f"{what}: nested too deeply") from e
    if SURROGATE_ESCAPE.search(text):
        bad = lone_surrogate(value)
        if bad is not None:
            raise FormatError(f"{what}: the string {bad[:40]!r} holds a lone surrogate (a "
                              "\\ud800-\\udfff escape without its pair), not valid Unicode")
    return value


def load_object(data: bytes | str, what: str = "JSON document") -> dict[str, Any]:
    """Parse strict JSON whose top level must be an object.

    Args:
        data: the document.
        what: names the document in error messages.

    Returns:
        The decoded object.

    Raises:
        FormatError: as `loads_strict`, or when the top level is not an object.
    """
    value = loads_strict(data, what)
    if not isinstance(value, dict):
        raise FormatError(f"{what}: top level is {type(value).__name__}, want an object")
    return value


def json_list(value: object, what: str) -> list[Any]:
    """A decoded value that must be a list (a policy's lists of keys, origins, licences...).

    Raises:
        FormatError: it is not a list.
    """
    if not isinstance(value, list):
        raise FormatError(f"{what}: must be a list")
    return value
