"""Gymnasium spaces and environment specs as canonical JSON, for environment and batch records.

Scope: `space_to_json` describes a space (Box, Discrete, MultiDiscrete, MultiBinary, Text,
Dict, Tuple) as JSON that RFC 8785 can canonicalise (no NaN, no infinities, no integer beyond
2^53: those are written as strings), and `space_from_json` rebuilds an equal space, so a
flattened observation can be unflattened (``gymnasium.spaces.unflatten``) from the record alone.
`spec_to_json` keeps an environment spec (``EnvSpec.to_json``) in the same canonical form.
Non-scope: Graph, Sequence and OneOf spaces (refused with a clear error).
Spec: ``schemas/rollout.v3.md`` section "Spaces".

Numbers: a finite float is a JSON number (float64, round-trips exactly); ``inf``, ``-inf`` and
``nan`` are the strings of those names; an integer beyond +-2^53 is its decimal string. Box
bounds equal everywhere are one number; otherwise a flat row-major list.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final

import numpy as np

__all__ = [
    "SpaceError",
    "box_bounds",
    "canonical_numbers",
    "space_from_json",
    "space_to_json",
    "spec_to_json",
]

_SAFE_INT: Final = 1 << 53


class SpaceError(ValueError):
    """A space or spec that cannot be described, or a description that is malformed."""


def _num(x: Any) -> Any:
    if isinstance(x, bool | np.bool_):
        return bool(x)
    if isinstance(x, int | np.integer):
        i = int(x)
        return i if -_SAFE_INT <= i <= _SAFE_INT else str(i)
    f = float(x)
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return f


def _unnum(x: Any, where: str) -> Any:
    if isinstance(x, str):
        if x in ("inf", "-inf", "nan"):
            return float(x)
        try:
            return int(x)
        except ValueError as e:
            raise SpaceError(f"{where}: {x!r} is not a number") from e
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise SpaceError(f"{where}: {x!r} is not a number")
    return x


def _bounds(arr: Any) -> Any:
    a = np.asarray(arr)
    flat = a.reshape(-1)
    if flat.size and np.all(flat == flat[0]) | np.all(np.isnan(flat.astype(np.float64))):
        return _num(flat[0])
    return [_num(x) for x in flat.tolist()]


def space_to_json(space: Any) -> dict[str, Any]:
    """Describe a Gymnasium space as canonical JSON.

    Raises:
        SpaceError: the space is of a kind that cannot be described.
    """
    import gymnasium as gym

    s = gym.spaces
    if isinstance(space, s.Box):
        return {
            "type": "Box",
            "dtype": str(space.dtype),
            "shape": list(space.shape),
            "low": _bounds(space.low),
            "high": _bounds(space.high),
        }
    if isinstance(space, s.Discrete):
        return {
            "type": "Discrete",
            "dtype": str(space.dtype),
            "n": _num(space.n),
            "start": _num(space.start),
        }
    if isinstance(space, s.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "dtype": str(space.dtype),
            "shape": list(space.shape),
            "nvec": [_num(x) for x in np.asarray(space.nvec).reshape(-1).tolist()],
            "start": [_num(x) for x in np.asarray(space.start).reshape(-1).tolist()],
        }
    if isinstance(space, s.MultiBinary):
        return {"type": "MultiBinary", "n": [int(x) for x in np.atleast_1d(space.n).tolist()]}
    if isinstance(space, s.Text):
        return {
            "type": "Text",
            "min_length": space.min_length,
            "max_length": space.max_length,
            "charset": "".join(sorted(space.character_set)),
        }
    if isinstance(space, s.Dict):
        return {
            "type": "Dict",
            "spaces": [[k, space_to_json(v)] for k, v in space.spaces.items()],
        }
    if isinstance(space, s.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(v) for v in space.spaces]}
    raise SpaceError(
        f"space {space} ({type(space).__name__}) cannot be recorded; want Box, Discrete, "
        "MultiDiscrete, MultiBinary, Text, Dict or Tuple"
    )


def space_from_json(d: Mapping[str, Any]) -> Any:
    """Rebuild the Gymnasium space `space_to_json` described.

    Raises:
        SpaceError: the description is malformed or of an unknown type.
    """
    import gymnasium as gym

    s = gym.spaces
    kind = d.get("type") if isinstance(d, Mapping) else None
    try:
        if kind == "Box":
            shape, dtype, low, high = box_bounds(d)
            return s.Box(low, high, shape, dtype)
        if kind == "Discrete":
            return s.Discrete(
                int(_unnum(d["n"], "n")), start=int(_unnum(d["start"], "start")),
                dtype=np.dtype(d["dtype"]),
            )  # fmt: skip
        if kind == "MultiDiscrete":
            shape = tuple(int(x) for x in d["shape"])
            nvec = np.asarray([_unnum(x, "nvec") for x in d["nvec"]]).reshape(shape)
            start = np.asarray([_unnum(x, "start") for x in d["start"]]).reshape(shape)
            return s.MultiDiscrete(nvec, dtype=np.dtype(d["dtype"]), start=start)
        if kind == "MultiBinary":
            n = [int(x) for x in d["n"]]
            return s.MultiBinary(n[0] if len(n) == 1 else n)
        if kind == "Text":
            return s.Text(
                max_length=int(d["max_length"]), min_length=int(d["min_length"]),
                charset=str(d["charset"]),
            )  # fmt: skip
        if kind == "Dict":
            return s.Dict({str(k): space_from_json(v) for k, v in d["spaces"]})
        if kind == "Tuple":
            return s.Tuple([space_from_json(v) for v in d["spaces"]])
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, SpaceError):
            raise
        raise SpaceError(f"{kind} space description is malformed: {e}") from e
    raise SpaceError(f"space type {kind!r} is unknown")


def box_bounds(d: Mapping[str, Any]) -> tuple[tuple[int, ...], np.dtype[Any], Any, Any]:
    """A Box description's shape, dtype and bounds (arrays of that shape and dtype), without
    Gymnasium (`space_check` reads them for every `record` of a file).

    Raises:
        KeyError / TypeError / ValueError: a malformed description (SpaceError for a bound
            that is not a number).
    """
    shape = tuple(int(x) for x in d["shape"])
    dtype = np.dtype(d["dtype"])

    def full(v: Any, where: str) -> Any:
        # Integers are built as integers: int64 bounds do not survive float64.
        via = dtype if np.issubdtype(dtype, np.integer) else np.float64
        if isinstance(v, list):
            vals = [_unnum(x, where) for x in v]
            return np.asarray(vals, dtype=via).astype(dtype).reshape(shape)
        return np.full(shape, _unnum(v, where), dtype=via).astype(dtype)

    with np.errstate(invalid="ignore", over="ignore"):
        return shape, dtype, full(d["low"], "low"), full(d["high"], "high")


def spec_to_json(spec: Any) -> dict[str, Any]:
    """An environment spec (``gymnasium.envs.registration.EnvSpec``) as canonical JSON.

    The spec's own JSON (``EnvSpec.to_json``) is parsed and its numbers made canonical.

    Raises:
        SpaceError: the spec cannot be serialised (e.g. a callable in its kwargs).
    """
    try:
        raw = json.loads(spec.to_json())
    except (TypeError, ValueError) as e:
        raise SpaceError(f"environment spec {getattr(spec, 'id', spec)!r}: {e}") from e
    out: dict[str, Any] = canonical_numbers(raw)
    return out


def canonical_numbers(v: Any) -> Any:
    """JSON data with numbers RFC 8785 cannot hold written as strings (see the module doc)."""
    if isinstance(v, dict):
        return {str(k): canonical_numbers(x) for k, x in v.items()}
    if isinstance(v, list):
        return [canonical_numbers(x) for x in v]
    if isinstance(v, int | float) and not isinstance(v, bool):
        return _num(v)
    return v
