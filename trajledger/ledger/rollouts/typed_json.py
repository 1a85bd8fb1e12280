"""Typed JSON: Gymnasium ``info`` values (and other Python values) as JSON text, losslessly.

Scope: `dumps` turns a value built of dicts, lists, tuples, strings, numbers, booleans, None,
bytes and numpy arrays / scalars into JSON text, and `loads` gives back an equal value of the
same types: arrays keep their dtype and shape, numpy scalars their dtype, tuples stay tuples,
non-finite floats survive. Plain JSON values are written as themselves, so a reader that does not
know the typed forms still sees ordinary JSON.
Non-scope: arbitrary Python objects (refused with the path of the value), schema of the values.
Spec: ``schemas/rollout.v3.md`` section "Typed JSON".

Typed forms are objects with one key starting with ``$``:

- ``{"$nd": {"dtype": "<f4", "shape": [2, 3], "data": "<base64 of the C-order bytes>"}}``:
  a numpy array (``shape`` ``[]`` for a numpy scalar; ``"scalar": true`` marks one);
- ``{"$f": "nan" | "inf" | "-inf"}``: a non-finite Python float;
- ``{"$t": [...]}``: a tuple;
- ``{"$b": "<base64>"}``: bytes;
- ``{"$o": {...}}``: a dict that itself has exactly one key starting with ``$`` (escaped).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from typing import Any, Final

import numpy as np

__all__ = ["JSON_TEXT", "TypedJSONError", "dumps", "loads", "reject_constant"]

_TAGS: Final = frozenset({"$nd", "$f", "$t", "$b", "$o"})
_MAX_DEPTH: Final = 64


class TypedJSONError(ValueError):
    """A value that typed JSON cannot hold, or text that is not typed JSON."""


def dumps(value: object) -> str:
    """Encode ``value`` as compact typed JSON text.

    Raises:
        TypedJSONError: a part of the value has a type typed JSON cannot hold (the message
            names its path), or a dict key is not a string.
    """
    return json.dumps(
        _encode(value, "$", 0), ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )


def loads(text: str) -> Any:
    """Decode typed JSON text into the value `dumps` was given.

    Raises:
        TypedJSONError: the text is not JSON, or a typed form is malformed.
    """
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise TypedJSONError(f"not JSON: {e}") from e
    except RecursionError as e:
        raise TypedJSONError("JSON nested too deeply") from e
    return _decode(raw, 0)


def reject_constant(name: str) -> Any:
    """``json.loads(..., parse_constant=reject_constant)``: NaN and Infinity are not JSON.

    Raises:
        ValueError: always, naming the constant.
    """
    raise ValueError(f"{name} is not valid JSON")


JSON_TEXT: Final = json.JSONDecoder(parse_constant=reject_constant)
"""A decoder of JSON text that refuses NaN and Infinity, made once (``json.loads`` with an
option makes a new decoder per call): ``JSON_TEXT.decode(text)``."""


def _encode(v: object, path: str, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise TypedJSONError(f"{path}: nested deeper than {_MAX_DEPTH} levels")
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isfinite(v):
            return v
        return {"$f": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if isinstance(v, np.ndarray | np.generic):
        arr = np.asarray(v)
        if arr.dtype.kind not in "biufc?" or arr.dtype.hasobject:
            raise TypedJSONError(f"{path}: numpy dtype {arr.dtype} is not a number type")
        body: dict[str, Any] = {
            "dtype": arr.dtype.str,
            "shape": list(arr.shape),
            "data": base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode("ascii"),
        }
        if isinstance(v, np.generic):
            body["scalar"] = True
        return {"$nd": body}
    if isinstance(v, bytes | bytearray):
        return {"$b": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, tuple):
        return {"$t": [_encode(x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v)]}
    if isinstance(v, list):
        return [_encode(x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v)]
    if isinstance(v, Mapping):
        out: dict[str, Any] = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise TypedJSONError(f"{path}: key {k!r} is a {type(k).__name__}, want a string")
            out[k] = _encode(x, f"{path}.{k}", depth + 1)
        if len(out) == 1 and next(iter(out)) in _TAGS:
            return {"$o": out}
        return out
    raise TypedJSONError(
        f"{path}: a {type(v).__name__} cannot be kept losslessly; want numbers, strings, "
        "booleans, None, lists, tuples, dicts, bytes or numpy arrays"
    )


def _decode(v: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise TypedJSONError(f"nested deeper than {_MAX_DEPTH} levels")
    if isinstance(v, list):
        return [_decode(x, depth + 1) for x in v]
    if not isinstance(v, dict):
        return v
    if len(v) == 1:
        tag, body = next(iter(v.items()))
        if tag == "$o" and isinstance(body, dict):
            return {k: _decode(x, depth + 1) for k, x in body.items()}
        if tag == "$t" and isinstance(body, list):
            return tuple(_decode(x, depth + 1) for x in body)
        if tag == "$f" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "$b" and isinstance(body, str):
            return _b64(body)
        if tag == "$nd" and isinstance(body, dict):
            return _array(body)
        if tag in _TAGS:
            raise TypedJSONError(f"malformed {tag} value: {body!r:.80}")
    return {k: _decode(x, depth + 1) for k, x in v.items()}


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError as e:
        raise TypedJSONError(f"bad base64: {e}") from e


def _array(body: dict[str, Any]) -> Any:
    try:
        dtype = np.dtype(body["dtype"])
        shape = tuple(int(d) for d in body["shape"])
        data = _b64(body["data"])
    except (KeyError, TypeError, ValueError) as e:
        raise TypedJSONError(f"malformed $nd value: {e}") from e
    if dtype.kind not in "biufc?" or dtype.hasobject:
        raise TypedJSONError(f"$nd dtype {dtype} is not a number type")
    count = math.prod(shape)
    if count * dtype.itemsize != len(data):
        raise TypedJSONError(
            f"$nd of shape {list(shape)} and dtype {dtype} needs {count * dtype.itemsize} bytes, "
            f"has {len(data)}"
        )
    arr = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    if body.get("scalar") is True:
        return arr[()]
    return arr
