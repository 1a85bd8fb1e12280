"""Values of Gymnasium spaces as Arrow space columns (rollout schema v3), and back, exactly.

Scope: `space_column` turns stacked space values (what Minari stores, and what `stack_rows`
makes of per-step values) into a space column: a numpy array with a leading axis of ``n`` rows
becomes a tensor (``list<T>``, its dtype and shape kept); a dict of those a struct marked
``Dict``, a tuple a struct marked ``Tuple`` (members ``0``, ``1``, ...), a list of strings (a
Text space) a string column. `column_values` is the inverse. Integers stay integers of their
own width (an int64 above 2^53 or a uint64 is exact), unlike ``gymnasium.spaces.flatten``,
which puts every member of a Dict into one float array. `leaf_arrays` lists a column's tensors
and strings, for code that reads every value (fingerprints, features).
Non-scope: checking values against the space (the environment's job), describing spaces
(``spaces.py``), validating columns (``checks.py``).
Spec: ``schemas/rollout.v3.md`` section "Space columns".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .schema import SPACE_KEY, TENSOR_VALUE_TYPES, struct_field, tensor_field

__all__ = ["column_values", "in_space_order", "leaf_arrays", "space_column", "stack_rows"]


def stack_rows(rows: Sequence[Any], where: str = "value") -> Any:
    """Per-step space values stacked member by member, as Minari stores them.

    Args:
        rows: one value per step: a numpy array or scalar, a Python number or list, a string,
            or a dict or tuple of those (the same keys, or length, at every step).
        where: names the values in errors.

    Returns:
        A numpy array with a leading axis of ``len(rows)``, a list of strings, or a dict or
        tuple of those.

    Raises:
        ValueError: the rows do not share one structure, or a member's values do not share
            one shape (the message names the member).
    """
    first = rows[0]
    if isinstance(first, Mapping):
        keys = list(first)
        for r in rows:
            if not isinstance(r, Mapping) or r.keys() != first.keys():
                raise ValueError(
                    f"{where}: the keys change from step to step ({keys} and "
                    f"{list(r) if isinstance(r, Mapping) else type(r).__name__}); a space "
                    "value has the same members at every step"
                )
        return {k: stack_rows([r[k] for r in rows], f"{where}.{k}") for k in keys}
    if isinstance(first, tuple):
        for r in rows:
            if not isinstance(r, tuple) or len(r) != len(first):
                raise ValueError(f"{where}: the tuple's length changes from step to step")
        return tuple(stack_rows([r[i] for r in rows], f"{where}.{i}") for i in range(len(first)))
    if isinstance(first, str):
        if not all(isinstance(r, str) for r in rows):
            raise ValueError(f"{where}: strings mixed with other values")
        return list(rows)
    try:
        return np.stack([np.asarray(r) for r in rows])
    except ValueError as e:
        raise ValueError(f"{where}: values of different shapes ({e})") from e


def space_column(values: Any, n: int, name: str) -> tuple[pa.Array, pa.Field]:
    """A space column of ``n`` rows from stacked values.

    Args:
        values: a numpy array of shape ``(n, *shape)`` (a tensor of that shape per row), a
            list of ``n`` strings, or a dict or tuple of those.
        n: the number of rows.
        name: the column (or member) name.

    Returns:
        The column and its field (shape and ``Dict`` / ``Tuple`` metadata).

    Raises:
        ValueError: a value type that a space column cannot hold (the message names it).
    """
    if isinstance(values, Mapping | tuple):
        items = (
            [(str(k), v) for k, v in values.items()]
            if isinstance(values, Mapping)
            else [(str(i), v) for i, v in enumerate(values)]
        )
        if not items:
            raise ValueError(f"{name}: a Dict or Tuple of no members cannot be recorded")
        columns = [space_column(v, n, k) for k, v in items]
        kind = "Dict" if isinstance(values, Mapping) else "Tuple"
        field = struct_field(name, kind, [f for _, f in columns])
        arr = pa.StructArray.from_arrays([a for a, _ in columns], fields=list(field.type))
        return arr, field
    if isinstance(values, list) and all(isinstance(v, str) for v in values):
        return pa.array(values, type=pa.string()), pa.field(name, pa.string())
    arr = np.ascontiguousarray(values)
    if arr.shape[:1] != (n,):
        raise ValueError(f"{name}: {arr.shape[0] if arr.ndim else 0} values, want {n}")
    try:
        value_type = pa.from_numpy_dtype(arr.dtype)
    except (pa.ArrowNotImplementedError, TypeError):
        value_type = None
    if value_type not in TENSOR_VALUE_TYPES:
        raise ValueError(f"{name}: numpy dtype {arr.dtype} is not a number or boolean type")
    shape = arr.shape[1:]
    size = int(np.prod(shape, dtype=np.int64))
    offsets = np.arange(0, (n + 1) * size, size, dtype=np.int64)
    list_type = pa.list_(value_type) if offsets[-1] < 2**31 else pa.large_list(value_type)
    column = pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32 if offsets[-1] < 2**31 else np.int64)),
        pa.array(arr.reshape(-1), type=value_type),
        type=list_type,
    )
    return column, tensor_field(name, value_type, shape)


def column_values(arr: pa.Array, field: pa.Field) -> Any:
    """The stacked values of a space column (the inverse of `space_column`).

    Args:
        arr: the column, no row null.
        field: its field; a tensor without a fixed shape gives ``(n, length)`` arrays.

    Returns:
        A numpy array of shape ``(n, *shape)``, a list of strings, or a dict (``Dict``) or
        tuple (``Tuple``) of those.
    """
    from .schema import tensor_shape

    t = field.type
    if pa.types.is_struct(t):
        members = [
            column_values(values, member)
            for member, values in zip(t, arr.flatten(), strict=True)
        ]
        if (field.metadata or {}).get(SPACE_KEY) == b"Tuple":
            return tuple(members)
        return {member.name: v for member, v in zip(t, members, strict=True)}
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return arr.to_pylist()
    flat = np.asarray(pc.list_flatten(arr).to_numpy(zero_copy_only=False))
    shape = tensor_shape(field)
    return flat.reshape(len(arr), *shape) if shape is not None else flat.reshape(len(arr), -1)


def leaf_arrays(name: str, arr: pa.Array) -> list[tuple[str, pa.Array]]:
    """The tensors and strings of a space column with their dotted names (``obs.pos``), a
    struct's nulls carried into its members; any other column is its own only leaf."""
    if not pa.types.is_struct(arr.type):
        return [(name, arr)]
    out: list[tuple[str, pa.Array]] = []
    for member, values in zip(arr.type, arr.flatten(), strict=True):
        out.extend(leaf_arrays(f"{name}.{member.name}", values))
    return out


def in_space_order(space: Any, values: Any) -> Any:
    """Stacked values of ``space`` with Dict members in the space's order and each tensor of
    the space's dtype, ready for `space_values.space_column`.

    Raises:
        SpaceError: a space a space column cannot hold (Graph, Sequence, OneOf).
    """
    import gymnasium as gym

    from .spaces import SpaceError

    s = gym.spaces
    if isinstance(space, s.Dict):
        return {k: in_space_order(sub, values[k]) for k, sub in space.spaces.items()}
    if isinstance(space, s.Tuple):
        return tuple(in_space_order(sub, values[i]) for i, sub in enumerate(space.spaces))
    if isinstance(space, s.Text):
        return [str(v) for v in values]
    if isinstance(space, s.Box | s.Discrete | s.MultiDiscrete | s.MultiBinary):
        return np.asarray(values, dtype=space.dtype)
    raise SpaceError(
        f"space {space} ({type(space).__name__}) cannot be recorded; want Box, Discrete, "
        "MultiDiscrete, MultiBinary, Text, Dict or Tuple"
    )
