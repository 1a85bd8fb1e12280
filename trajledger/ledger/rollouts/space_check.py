"""Rollout steps against the observation and action spaces their environment declares, in bulk.

Scope: `SpaceCheck` reads the spaces of an environment's record (``observationSpace``,
``actionSpace``: ``spaces.py`` JSON) and checks each row group of steps as `record` writes it,
column by column over the Arrow arrays (no loop over steps in Python): the ``obs`` and
``action`` of every step whose value is not null must be a value of its space as Gymnasium's
``Space.contains`` decides, with the Gymnasium recorder's rule for dtypes (`exact_cast`: a value
of another number type counts when the space's dtype holds it unchanged, so an integer-valued
float is a Discrete's, 0.5 is not), but for floats of another width in a float Box, which a
file keeps as they are (float64 ``0.1`` counts in a float32 Box, compared as float32 holds it;
``1e40`` does not). Box: the values per
step (a declared tensor shape must be the space's), the dtype rule, ``low <= x <= high`` (NaN is
in no Box; an infinity only within an infinite bound). Discrete, MultiDiscrete, MultiBinary:
the shape, integers in range (0 or 1). Text: a string of the allowed length and characters.
Dict and Tuple: a struct column of the same members, each checked. The first step that does not
fit raises `SpaceMismatchError`: its episode and step, the field, what the space wants, what
the step holds.
Each episode's ``final_obs`` (the episode file) is checked against the observation space
too, once the files are written (`SpaceCheck.finals`, rev37).
Non-scope: an environment registered without spaces (nothing to check against); null values
(chat and text steps carry none; an episode without a final observation).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trajledger.verify.errors import FormatError

from .schema import SPACE_KEY, tensor_shape
from .spaces import SpaceError, box_bounds

__all__ = ["SpaceCheck", "SpaceMismatchError", "exact_cast"]


class SpaceMismatchError(FormatError):
    """Steps that do not fit the spaces their environment declares (the first one named)."""


def exact_cast(given: np.ndarray, dtype: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """``given`` as ``dtype`` and where that cast changed a value (the Gymnasium recorder's
    rule: a value is the space's when its dtype holds it unchanged; NaN stays NaN).

    Returns:
        The values cast (``given`` itself when of that dtype) and a mask of the changed ones;
        None when ``given`` holds no numbers (strings, objects).
    """
    if given.dtype == dtype:
        return given, np.zeros(given.shape, dtype=bool)
    if given.dtype.kind not in "biufc":
        return None
    with np.errstate(all="ignore"):
        cast = given.astype(dtype)
        back = cast.astype(given.dtype)
        changed = back != given
        if given.dtype.kind in "fc" and cast.dtype.kind in "fc":
            changed &= ~(np.isnan(back) & np.isnan(given))
    return cast, np.asarray(changed)


class _Unfit(Exception):
    """One row that does not fit: its index in the column, the field (``obs.pos``), what the
    space wants and what the row holds."""

    def __init__(self, row: int, field: str, want: str, got: str) -> None:
        super().__init__(f"{field}: want {want}, got {got}")
        self.row, self.field, self.want, self.got = row, field, want, got


def _describe(space: Mapping[str, Any]) -> str:
    kind = space.get("type")
    if kind == "Box":
        return f"a Box of shape {space.get('shape')} ({space.get('dtype')})"
    if kind == "Discrete":
        return f"Discrete({space.get('n')}, start={space.get('start')})"
    if kind == "MultiDiscrete":
        return f"MultiDiscrete(nvec={space.get('nvec')}, start={space.get('start')})"
    if kind == "MultiBinary":
        return f"MultiBinary({space.get('n')})"
    if kind == "Text":
        return f"Text({space.get('min_length')}-{space.get('max_length')} characters)"
    return f"a {kind}"


def _shown(values: np.ndarray) -> str:
    text = np.array2string(values.reshape(-1)[:8], separator=", ", threshold=8)
    return text if values.size <= 8 else text[:-1] + ", ...]"


class _Rule:
    """One space (member) as arrays ready for bulk comparisons."""

    def __init__(self, space: Mapping[str, Any]) -> None:
        self.space = space
        self.kind = space.get("type")
        self.members: list[tuple[str, _Rule]] = []
        self.low: np.ndarray
        self.high: np.ndarray
        unknown = ""
        try:
            if self.kind == "Box":
                self.shape, self.dtype, low, high = box_bounds(space)
                self.low, self.high = low.reshape(-1), high.reshape(-1)
            elif self.kind == "Discrete":
                self.shape, self.dtype = (), np.dtype(space["dtype"])
                start = int(space["start"])
                self.low = np.array([start], dtype=object)
                self.high = np.array([start + int(space["n"]) - 1], dtype=object)
            elif self.kind == "MultiDiscrete":
                self.shape, self.dtype = tuple(int(x) for x in space["shape"]), np.dtype(
                    space["dtype"])  # fmt: skip
                starts = np.array([int(x) for x in space["start"]], dtype=object)
                self.low = starts
                self.high = starts + np.array([int(x) for x in space["nvec"]], dtype=object) - 1
            elif self.kind == "MultiBinary":
                self.shape, self.dtype = tuple(int(x) for x in space["n"]), np.dtype(np.int8)
                self.low, self.high = np.zeros(1, dtype=np.int8), np.ones(1, dtype=np.int8)
            elif self.kind == "Text":
                self.lengths = (int(space["min_length"]), int(space["max_length"]))
                self.charset = str(space["charset"])
            elif self.kind == "Dict":
                self.members = [(str(k), _Rule(v)) for k, v in space["spaces"]]
            elif self.kind == "Tuple":
                self.members = [(str(i), _Rule(v)) for i, v in enumerate(space["spaces"])]
            else:  # (Sequence, Graph, OneOf: `spaces.space_to_json` writes none; refused)
                unknown = f"space type {self.kind!r} is unknown"
        except (KeyError, TypeError, ValueError) as e:
            raise SpaceError(f"{self.kind} space description is malformed: {e}") from e
        if unknown:  # refused, not passed unchecked (rev37)
            raise SpaceError(unknown)
        if self.kind in ("Discrete", "MultiDiscrete"):
            # Integer bounds compared in the space's dtype (exact beyond 2^53).
            self.low = self.low.astype(self.dtype)
            self.high = self.high.astype(self.dtype)

    def check(self, arr: pa.Array, field: pa.Field, valid: np.ndarray, name: str) -> None:
        """Raise `_Unfit` for the first row of ``arr`` where ``valid`` that does not fit."""
        rows = np.flatnonzero(valid)
        if not rows.size:
            return
        missing = ~arr.is_valid().to_numpy(zero_copy_only=False)[rows]
        if missing.any():
            raise _Unfit(int(rows[np.argmax(missing)]), name, _describe(self.space), "null")
        if self.members:
            self._check_struct(arr, field, valid, rows, name)
        elif self.kind == "Text":
            self._check_text(arr, rows, name)
        else:
            self._check_tensor(arr, field, rows, name)

    def _check_struct(
        self, arr: pa.Array, field: pa.Field, valid: np.ndarray, rows: np.ndarray, name: str
    ) -> None:
        want = str(self.kind)
        got = (field.metadata or {}).get(SPACE_KEY, b"").decode(errors="replace")
        names = [m.name for m in field.type] if pa.types.is_struct(field.type) else None
        keys = [k for k, _ in self.members]
        if names is None or got != want or sorted(names) != sorted(keys):
            held = f"a {got or 'struct'} of members {names}" if names is not None else (
                f"{field.type} values")  # fmt: skip
            raise _Unfit(int(rows[0]), name, f"a {want} of members {keys}", held)
        first: _Unfit | None = None  # the first row any member refuses
        for key, rule in self.members:
            i = field.type.get_field_index(key)
            try:
                rule.check(arr.field(i), field.type.field(i), valid, f"{name}.{key}")
            except _Unfit as e:
                first = e if first is None or e.row < first.row else first
        if first is not None:
            raise first

    def _check_text(self, arr: pa.Array, rows: np.ndarray, name: str) -> None:
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            raise _Unfit(int(rows[0]), name, _describe(self.space), f"{arr.type} values")
        lo, hi = self.lengths
        lengths = pc.utf8_length(arr).to_numpy(zero_copy_only=False)[rows]
        bad = (lengths < lo) | (lengths > hi)
        if self.charset:
            allowed = "".join(f"\\x{{{ord(c):x}}}" for c in self.charset)
            fits = pc.match_substring_regex(arr, f"^[{allowed}]*$").to_numpy(zero_copy_only=False)
            bad |= ~fits[rows].astype(bool)
        else:
            bad |= lengths > 0
        if bad.any():
            row = int(rows[np.argmax(bad)])
            raise _Unfit(row, name, _describe(self.space), f"{arr[row].as_py()!r:.60}")

    def _check_tensor(self, arr: pa.Array, field: pa.Field, rows: np.ndarray, name: str) -> None:
        want = _describe(self.space)
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)
                or pa.types.is_fixed_size_list(arr.type)):  # fmt: skip
            raise _Unfit(int(rows[0]), name, want, f"{arr.type} values")
        size = int(np.prod(self.shape, dtype=np.int64))
        try:
            declared = tensor_shape(field)
        except ValueError:
            declared = None  # the schema checks reported it
        if declared is not None and declared != self.shape and not (
            size == 1 and int(np.prod(declared, dtype=np.int64)) == 1
        ):
            raise _Unfit(int(rows[0]), name, want, f"values of shape {list(declared)}")
        lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)[rows]
        bad = lengths != size
        if bad.any():
            row = int(rows[np.argmax(bad)])
            raise _Unfit(row, name, f"{want}, {size} value(s)",
                         f"{int(lengths[np.argmax(bad)])} value(s)")
        held = arr if len(rows) == len(arr) else arr.take(pa.array(rows))
        values = np.asarray(pc.list_flatten(held).to_numpy(zero_copy_only=False))
        fitted = exact_cast(values, self.dtype)
        if fitted is None:
            raise _Unfit(int(rows[0]), name, want, f"{values.dtype} values")
        cast, changed = fitted
        if values.dtype.kind == "f" and self.dtype.kind == "f":
            # A file keeps its own float width (float64 stays float64): 0.1 counts, compared
            # as the space's dtype holds it; a value beyond that dtype's range does not.
            changed = np.isinf(cast) & np.isfinite(values)
        with np.errstate(invalid="ignore"):
            table = cast.reshape(len(rows), size)
            outside = ~((table >= self.low) & (table <= self.high))
        wrong = changed.reshape(len(rows), size) | outside
        if wrong.any():
            at = int(np.argmax(wrong.any(axis=1)))
            got = values.reshape(len(rows), size)[at]
            why = (f"{values.dtype} values its {self.dtype} would change"
                   if changed.reshape(len(rows), size)[at].any() else "values outside it")
            raise _Unfit(int(rows[at]), name, want, f"{why}, {_shown(got)}")


class SpaceCheck:
    """The declared spaces of one environment, checked against each row group of steps."""

    def __init__(self, env_ref: str, spaces: Mapping[str, Any]) -> None:
        """Read the spaces an environment's record declares.

        Args:
            env_ref: the environment as the user named it (for the message).
            spaces: the environment's predicate (``observationSpace``, ``actionSpace``).

        Raises:
            SpaceMismatchError: a declared space that cannot be read.
        """
        self.env_ref = env_ref
        self.rules: list[tuple[str, _Rule]] = []
        for column, key in (("obs", "observationSpace"), ("action", "actionSpace")):
            space = spaces.get(key)
            if isinstance(space, Mapping):
                try:
                    self.rules.append((column, _Rule(space)))
                except SpaceError as e:
                    raise SpaceMismatchError(
                        f"environment {env_ref}: its {key} cannot be read ({e}): register the "
                        "environment again as a new version"
                    ) from e

    def __bool__(self) -> bool:
        """Whether the environment declares a space to check."""
        return bool(self.rules)

    def before(self, then: Callable[[pa.Table], None]) -> Callable[[pa.Table], None]:
        """``then`` called with each row group this check passed."""

        def checked(steps: pa.Table) -> None:
            self(steps)
            then(steps)

        return checked

    def __call__(self, steps: pa.Table) -> None:
        """Check one row group of steps (as written: normalised to the rollout schema).

        Raises:
            SpaceMismatchError: the first step that does not fit, in one line.
        """
        first: tuple[int, _Unfit] | None = None  # the first step either column refuses
        for column, rule in self.rules:
            if column not in steps.column_names:
                continue
            field = steps.schema.field(column)
            offset = 0
            for chunk in steps.column(column).chunks:
                valid = chunk.is_valid().to_numpy(zero_copy_only=False)
                try:
                    rule.check(chunk, field, valid, column)
                except _Unfit as e:
                    if first is None or offset + e.row < first[0]:
                        first = (offset + e.row, e)
                    break
                offset += len(chunk)
        if first is not None:
            raise self._refusal(steps, *first)

    def finals(self, episodes_path: Path) -> None:
        """Check each episode's ``final_obs`` in the episode file ``episodes_path`` (the
        observation after its last step, when given) against the observation space, as the
        steps' (rev37: it was signed unchecked).

        Raises:
            SpaceMismatchError: the first episode whose final observation does not fit.
        """
        import pyarrow.parquet as pq

        rule = dict(self.rules).get("obs")
        if rule is None or "final_obs" not in pq.read_schema(episodes_path).names:
            return
        episodes = pq.read_table(episodes_path, columns=["episode_id", "final_obs"])
        field, offset = episodes.schema.field("final_obs"), 0
        for chunk in episodes.column("final_obs").chunks:
            try:
                rule.check(chunk, field, chunk.is_valid().to_numpy(zero_copy_only=False),
                           "final_obs")
            except _Unfit as e:
                raise self._refusal(episodes, offset + e.row, e) from None
            offset += len(chunk)

    def _refusal(self, table: pa.Table, row: int, e: _Unfit) -> SpaceMismatchError:
        episode = table.column("episode_id")[row].as_py()
        where, held = (("", "its final observation") if "step" not in table.column_names else
                       (f"step {table.column('step')[row].as_py()}, ", "the step"))
        return SpaceMismatchError(
            f"episode {json.dumps(episode)}, {where}{e.field}: environment {self.env_ref} "
            f"declares {e.want}, {held} holds {e.got}; nothing was recorded: record these "
            "rollouts under the environment they were played in (--env), or register one whose "
            "spaces they fit"
        )
