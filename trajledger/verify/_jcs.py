"""RFC 8785 (JCS) canonical JSON for the value types trajledger signs structurally.

Scope: objects, arrays, strings, booleans, null and integers within +-(2**53 - 1). Object keys
sort by their UTF-16 code units, strings escape as RFC 8785 section 3.2.2.2 requires (the same
escapes as ECMAScript JSON.stringify), output is UTF-8 with no whitespace.
Non-scope: floating-point numbers. Their canonical form needs the ECMAScript number
serialisation; the ledger writes such documents with the ``rfc8785`` package, and nothing the
verifier re-canonicalises may contain a float (a property test checks both agree).
"""

from __future__ import annotations

from json.encoder import encode_basestring
from typing import Any

from .errors import FormatError

__all__ = ["MAX_SAFE_INTEGER", "canonical_bytes"]

MAX_SAFE_INTEGER = 2**53 - 1


def _key(s: str) -> bytes:
    # surrogatepass: a lone surrogate still sorts; it is refused when the output is encoded.
    return s.encode("utf-16-be", "surrogatepass")


def _text(value: Any, path: str) -> str:
    """The canonical JSON text of ``value`` (``path`` names it in errors)."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true" if value else "false"
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise FormatError(f"{path}: integer {value} exceeds 2^53-1; encode it as a string")
        return str(value)
    if isinstance(value, str):
        # json's encoder without ensure_ascii (what json.dumps(ensure_ascii=False) calls for a
        # string) escapes exactly ", \, and U+0000..U+001F, using \b \t \n \f \r and
        # lowercase \u00XX otherwise: the RFC 8785 escapes.
        return encode_basestring(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_text(v, f"{path}[{i}]") for i, v in enumerate(value)) + "]"
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str):
                raise FormatError(f"{path}: object key {k!r} is not a string")
        members = (encode_basestring(k) + ":" + _text(value[k], f"{path}.{k}")
                   for k in sorted(value, key=_key))
        return "{" + ",".join(members) + "}"
    raise FormatError(
        f"{path}: {type(value).__name__} cannot be canonicalised here (only int, str, bool, "
        "null, list, object)"
    )


def canonical_bytes(value: Any, what: str = "document") -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of ``value``.

    Raises:
        FormatError: a float, an integer beyond 2^53-1, a non-string key, or a lone surrogate.
    """
    try:
        return _text(value, what).encode("utf-8")
    except UnicodeEncodeError as e:
        raise FormatError(f"{what}: contains a lone surrogate, not valid Unicode") from e
