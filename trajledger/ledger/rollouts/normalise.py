"""Normalising rollout inputs into schema v3: column types, tensors, derived flags.

Scope:
  * `normalise_steps` turns a step table in schema v3 (or v2, v1, or the minimal classic form
    ``episode_id, step, obs, action, reward, terminated, truncated``) into `STEP_SCHEMA`: types
    are widened where exact, tensor columns keep their value type and shape, missing optional
    columns become null, ``is_first`` and ``is_last`` are derived. `StepNormaliser` does it
    batch by batch for a stream. `normalise_episodes` does the same for episode attributes.
  * `TensorTypes`: the value type and shape of a batch's tensor columns, fixed by its first
    values.
Non-scope: content validation (``validate.py``; these functions check only what they need in
order to convert), deriving the episode table (``episodes.py``), reading files (``readers.py``).
Spec: ``schemas/rollout.v3.md`` (the tables) and ``schemas/rollout-inputs.md`` (input types).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from . import typed_json
from .arrays import invalid_utf8_rows, is_binaryish, is_number, is_stringish
from .problems import ProblemCollector, RolloutValidationError
from .schema import (
    EPISODE_ATTR_SCHEMA,
    EPISODE_SCHEMA,
    EXTRAS_TYPE,
    STEP_INPUT_REQUIRED,
    STEP_SCHEMA,
    TENSOR_COLUMNS,
    TENSOR_VALUE_TYPES,
    VECTOR_TYPE,
    canonical_space_field,
    conforms,
    meant_column,
    space_field_problem,
    tensor_field,
    tensor_shape,
    with_columns,
)

__all__ = [
    "StepNormaliser",
    "TensorTypes",
    "conform_batch",
    "normalise_episodes",
    "normalise_steps",
]


def _want_text(want: pa.DataType, name: str) -> str:
    if name in TENSOR_COLUMNS:
        return (
            "a list, fixed-size list or fixed-shape tensor of numbers or booleans, a number, a "
            "string (Text) or a struct of those (Dict, Tuple)"
        )
    if want == EXTRAS_TYPE:
        return "a map or struct of field names to values"
    return str(want)


def _coerce(arr: pa.Array, field: pa.Field, offset: int, c: ProblemCollector) -> pa.Array | None:
    """Convert one input column to its schema type, or record why not and return None.

    Tensor columns are left to `_coerce_tensor` (they keep their value type).
    """
    want = field.type
    name = field.name
    if arr.type == want:
        return arr
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if pa.types.is_null(t):
        return pa.nulls(len(arr), want)
    try:
        if want == EXTRAS_TYPE:
            return _coerce_extras(arr, name, offset, c)
        if pa.types.is_map(want):
            return _coerce_scores(arr, name, offset, c)
        if pa.types.is_string(want):
            if is_stringish(t) or (name == "episode_id" and pa.types.is_integer(t)):
                return arr.cast(want)
            if is_binaryish(t):
                if name == "episode_id":  # checked by the caller, which also decodes the ids
                    return arr.cast(pa.binary()).view(pa.string())
                text = arr.cast(pa.binary())
                bad = invalid_utf8_rows(text.view(pa.string()))
                if len(bad):
                    c.add_rows(
                        f"{name}:utf8",
                        bad,
                        offset,
                        name,
                        lambda i: "value is not valid UTF-8",
                    )
                    return None
                return text.cast(want)
        elif pa.types.is_integer(want):
            if pa.types.is_integer(t):
                return arr.cast(want)
        elif pa.types.is_floating(want):
            if is_number(t):
                return arr.cast(want)
        elif pa.types.is_boolean(want):
            pass
        elif pa.types.is_timestamp(want):
            if pa.types.is_timestamp(t):
                # Sub-microsecond digits are dropped; naive times are taken as UTC.
                return arr.cast(want, safe=False)
            if is_stringish(t):
                return arr.cast(pa.string()).cast(want)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        c.add(
            f"{name}:convert", f"cannot convert {t} to {_want_text(want, name)}: {e}", column=name
        )
        return None
    c.add(f"{name}:type", f"type {t}, want {_want_text(want, name)}", column=name)
    return None


def _tensor_value_type(t: pa.DataType) -> pa.DataType | None:
    """The value type of a tensor-like input type, or None when it is not one."""
    if isinstance(t, pa.FixedShapeTensorType):
        t = t.storage_type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        v = t.value_type
    elif is_number(t) or pa.types.is_boolean(t):
        v = t
    else:
        return None
    return v if v in TENSOR_VALUE_TYPES else None


def _input_shape(field: pa.Field) -> tuple[int, ...] | None:
    """The fixed shape an input tensor field declares (extension, fixed-size list, metadata)."""
    t = field.type
    if isinstance(t, pa.FixedShapeTensorType):
        return tuple(int(d) for d in t.shape)
    if pa.types.is_fixed_size_list(t):
        return (int(t.list_size),)
    if is_number(t) or pa.types.is_boolean(t):
        return ()
    try:
        return tensor_shape(field)
    except ValueError:
        return None


def _coerce_tensor(arr: pa.Array, value_type: pa.DataType) -> pa.Array:
    """An input tensor column as ``list<value_type>`` (the caller checked the type)."""
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return arr.cast(pa.list_(value_type))
    # A number column: each value becomes a tensor of one (shape []).
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    offsets = np.zeros(len(arr) + 1, dtype=np.int32)
    np.cumsum(valid, out=offsets[1:])
    mask = None if arr.null_count == 0 else pa.array(~valid)
    return pa.ListArray.from_arrays(
        pa.array(offsets), arr.drop_null().cast(value_type), type=pa.list_(value_type), mask=mask
    )


def _coerce_scores(arr: pa.Array, name: str, offset: int, c: ProblemCollector) -> pa.Array | None:
    t = arr.type
    want = EPISODE_SCHEMA.field("judge_scores").type
    if pa.types.is_map(t) and is_stringish(t.key_type) and is_number(t.item_type):
        return arr.cast(want)
    if _is_pair_list(t) and is_stringish(t.value_type[0].type) and is_number(t.value_type[1].type):
        # A map as Parquet stores it (list of key/value structs): what plain exports hold.
        return _pairs_to_map(arr, want)
    if pa.types.is_struct(t) and all(is_number(f.type) or pa.types.is_null(f.type) for f in t):
        # A struct is what pyarrow infers from dicts; each non-null member becomes an entry.
        rows = [
            None if d is None else [(k, float(v)) for k, v in d.items() if v is not None]
            for d in arr.to_pylist()
        ]
        return pa.array(rows, type=want)
    c.add(f"{name}:type", f"type {t}, want {want} (or a struct of numbers)", column=name)
    return None


def _is_pair_list(t: pa.DataType) -> bool:
    return bool(
        (pa.types.is_list(t) or pa.types.is_large_list(t))
        and pa.types.is_struct(t.value_type)
        and t.value_type.num_fields == 2
        and [f.name for f in t.value_type] == ["key", "value"]
    )


def _pairs_to_map(arr: pa.Array, want: pa.DataType) -> pa.Array:
    rows = [None if r is None else [(p["key"], p["value"]) for p in r] for r in arr.to_pylist()]
    return pa.array(rows, type=want)


def _coerce_extras(arr: pa.Array, name: str, offset: int, c: ProblemCollector) -> pa.Array | None:
    """Extras: a map of names to typed JSON text, or a struct / map of values to encode."""
    t = arr.type
    if (pa.types.is_map(t) or _is_pair_list(t)) and is_stringish(
        t.key_type if pa.types.is_map(t) else t.value_type[0].type
    ):
        item = t.item_type if pa.types.is_map(t) else t.value_type[1].type
        if is_stringish(item):
            out = arr.cast(EXTRAS_TYPE) if pa.types.is_map(t) else _pairs_to_map(arr, EXTRAS_TYPE)
            return out
    if pa.types.is_struct(t) or pa.types.is_map(t):
        rows: list[Any] = []
        for i, d in enumerate(arr.to_pylist()):
            if d is None:
                rows.append(None)
                continue
            items = d.items() if isinstance(d, dict) else d
            try:
                rows.append([(k, typed_json.dumps(v)) for k, v in items if v is not None])
            except typed_json.TypedJSONError as e:
                c.add(f"{name}:typed", str(e), row=offset + i, column=name)
                rows.append(None)
        return pa.array(rows, type=EXTRAS_TYPE)
    c.add(f"{name}:type", f"type {t}, want {_want_text(EXTRAS_TYPE, name)}", column=name)
    return None


def _run_starts(ids: pa.Array, prev_id: str | None) -> npt.NDArray[np.bool_]:
    """True where a row starts an episode: its id differs from the previous row's."""
    n = len(ids)
    out = np.empty(n, dtype=bool)
    if n > 1:
        neq = pc.not_equal(ids.slice(1), ids.slice(0, n - 1))
        out[1:] = pc.fill_null(neq, True).to_numpy(zero_copy_only=False)
    if n:
        first = ids[0].as_py()
        out[0] = prev_id is None or first is None or first != prev_id
    return out


class TensorTypes:
    """The value type and shape of each tensor column of one batch, fixed by the first values.

    A batch holds one kind of observation and one kind of action: the first non-null values of
    ``obs`` and ``action`` fix the column's value type and shape; later values must agree (a
    value type that widens exactly, e.g. int32 after int64, is converted). ``final_obs`` follows
    ``obs``.
    """

    def __init__(self) -> None:
        """Nothing fixed yet: tensor columns default to `VECTOR_TYPE`."""
        self.fields: dict[str, pa.Field] = {}

    def field(self, name: str) -> pa.Field:
        """The tensor field of ``name`` as fixed so far (``final_obs`` as ``obs``)."""
        got = self.fields.get("obs" if name == "final_obs" else name)
        if got is None:
            return tensor_field(name, VECTOR_TYPE.value_type)
        return got.with_name(name)

    def step_schema(self) -> pa.Schema:
        """`STEP_SCHEMA` with the tensor fields fixed so far."""
        return with_columns(STEP_SCHEMA, [self.field("obs"), self.field("action")])

    def episode_schema(self) -> pa.Schema:
        """`EPISODE_SCHEMA` with ``final_obs`` as ``obs``."""
        return with_columns(EPISODE_SCHEMA, [self.field("final_obs")])

    def adopt(self, field: pa.Field, all_null: bool) -> bool:
        """Whether a column already in schema form can be taken as it is (fixing its type).

        Args:
            field: the column's field (``list<T>``, maybe with shape metadata).
            all_null: the column holds no value in this batch.
        """
        if all_null:
            return True
        fixed = self.fields.get(field.name)
        if fixed is None:
            if not pa.types.is_list(field.type):  # a Text value, or a struct of space values
                if space_field_problem(field) is not None:
                    return False
                self.fields[field.name] = canonical_space_field(field.with_nullable(True))
                return True
            try:
                shape = tensor_shape(field)
            except ValueError:
                return False
            self.fields[field.name] = tensor_field(field.name, field.type.value_type, shape)
            return True
        return bool(canonical_space_field(field).equals(fixed, check_metadata=True))

    def coerce(
        self, arr: pa.Array, in_field: pa.Field, name: str, offset: int, c: ProblemCollector
    ) -> pa.Array | None:
        """Convert one input tensor column, fixing the column's type on its first values.

        Returns:
            The column as ``list<T>`` of the fixed type, or None (the problem is recorded).
        """
        t = in_field.type
        if pa.types.is_dictionary(t):
            arr = arr.dictionary_decode()
            t = arr.type
        key = "obs" if name == "final_obs" else name
        if pa.types.is_null(t) or arr.null_count == len(arr):
            return pa.nulls(len(arr), self.field(name).type)
        if pa.types.is_struct(t) or is_stringish(t):
            return self._coerce_space(arr, in_field.with_type(t), name, c)
        value_type = _tensor_value_type(t)
        if value_type is None:
            c.add(f"{name}:type", f"type {t}, want {_want_text(t, name)}", column=name)
            return None
        shape = _input_shape(in_field.with_type(t))
        fixed = self.fields.get(key)
        if fixed is None:
            fixed = tensor_field(key, value_type, shape)
            self.fields[key] = fixed
        want_type = fixed.type.value_type
        want_shape = tensor_shape(fixed)
        if shape is not None and want_shape is not None and shape != want_shape:
            c.add(
                f"{name}:shape",
                f"values of shape {list(shape)}, earlier values have shape {list(want_shape)}; "
                "a batch holds one kind of observation and of action",
                column=name,
            )
            return None
        if value_type != want_type:
            try:
                if not (pa.types.is_integer(value_type) or pa.types.is_floating(value_type)):
                    raise pa.ArrowInvalid("not a number")
                out = _coerce_tensor(arr, value_type).cast(pa.list_(want_type), safe=True)
                flat_in = pc.list_flatten(_coerce_tensor(arr, value_type))
                back = pc.list_flatten(out).cast(value_type, safe=False)
                if not pc.all(pc.equal(flat_in, back)).as_py() and len(flat_in):
                    raise pa.ArrowInvalid("values change")
                return out
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                c.add(
                    f"{name}:dtype",
                    f"values of type {value_type}, earlier values are {want_type}; a batch "
                    "holds one kind of observation and of action",
                    column=name,
                )
                return None
        return _coerce_tensor(arr, want_type)

    def _coerce_space(
        self, arr: pa.Array, in_field: pa.Field, name: str, c: ProblemCollector
    ) -> pa.Array | None:
        """A Text or Dict / Tuple column: taken as it is when it is a space column of schema v3
        and of the batch's type (fixed by its first values)."""
        key = "obs" if name == "final_obs" else name
        field = canonical_space_field(in_field.with_name(key).with_nullable(True))
        if is_stringish(field.type):
            arr, field = arr.cast(pa.string()), field.with_type(pa.string())
        problem = space_field_problem(field)
        if problem is not None:
            c.add(f"{name}:type", problem, column=name)
            return None
        fixed = self.fields.setdefault(key, field)
        if not field.equals(fixed, check_metadata=True):
            c.add(
                f"{name}:dtype",
                f"values of type {field.type}, earlier values are {fixed.type}; a batch holds "
                "one kind of observation and of action",
                column=name,
            )
            return None
        return arr


class StepNormaliser:
    """Converts a stream of input step batches into `STEP_SCHEMA`, batch by batch.

    Carries the previous batch's last episode id, so ``is_first`` is right across batch
    boundaries, and the row offset, so problems name rows of the whole stream. Problems with
    the input's columns (missing, unknown, unconvertible) are reported once per stream.
    """

    def __init__(
        self, collector: ProblemCollector | None = None, tensors: TensorTypes | None = None
    ) -> None:
        """Start before the first row.

        Args:
            collector: where problems go; a new one when None.
            tensors: the tensor types of the batch (shared with the episode writer); new when
                None.
        """
        self.collector = collector if collector is not None else ProblemCollector()
        self.tensors = tensors if tensors is not None else TensorTypes()
        self._offset = 0
        self._prev_id: str | None = None
        self._reported: set[str] = set()
        self._failed_types: set[tuple[str, str]] = set()
        self.ids_rejected: pa.RecordBatch | None = None
        """The batch of the last `normalise` call when it returned None only because episode
        ids are not UTF-8: its rows' values can still be checked, not its episodes."""

    def normalise(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """Convert one batch.

        Args:
            batch: input rows in schema v3, v2 or v1, or the minimal classic form.

        Returns:
            The rows in `STEP_SCHEMA` (tensor columns of the batch's fixed types), or None when
            the batch's columns cannot be converted or its episode ids are not UTF-8 (the
            problems are in `collector`; the caller skips the batch).
        """
        n = batch.num_rows
        offset = self._offset
        self._offset += n
        self.ids_rejected = None
        fast = conforms(batch.schema, STEP_SCHEMA) and all(
            self.tensors.adopt(batch.schema.field(name), batch.column(name).null_count == n)
            for name in ("obs", "action")
        )
        if fast:
            out = pa.RecordBatch.from_arrays(
                [
                    pa.nulls(n, f.type)
                    if f.name in ("obs", "action") and col.null_count == n
                    else col
                    for f, col in zip(self.tensors.step_schema(), batch.columns, strict=True)
                ],
                schema=self.tensors.step_schema(),
            )
            if not self._ids_utf8(out.column(0), offset):
                self.ids_rejected, out = out, None
        else:
            out = self._convert(batch, offset)
        if out is None:
            self._prev_id = None  # the next batch follows a gap
        elif n:
            self._prev_id = out.column(0)[n - 1].as_py()
        return out

    def _ids_utf8(self, ids: pa.Array, offset: int) -> bool:
        """Report episode ids that are not UTF-8: they are decoded and compared from here on."""
        bad = invalid_utf8_rows(ids)
        self.collector.add_rows(
            "episode_id:utf8", bad, offset, "episode_id", lambda i: "value is not valid UTF-8"
        )
        return not len(bad)

    def _once(self, kind: str, message: str, column: str) -> None:
        if kind not in self._reported:
            self._reported.add(kind)
            self.collector.add(kind, message, column=column)

    def _convert(self, batch: pa.RecordBatch, offset: int) -> pa.RecordBatch | None:
        names = batch.schema.names
        ok = True
        for name in sorted({x for x in names if names.count(x) > 1}):
            self._once(f"dup:{name}", f"column appears {names.count(name)} times, want once", name)
            ok = False
        for name in names:
            if STEP_SCHEMA.get_field_index(name) < 0:
                self._once(
                    f"unknown:{name}",
                    "unknown column: rollout schema v3 has no such column"
                    f"{meant_column(name, STEP_SCHEMA)} (see schemas/rollout.v3.md; keep other "
                    "fields in 'extras')",
                    name,
                )
                ok = False
        for name in STEP_INPUT_REQUIRED:
            if name not in names:
                self._once(f"missing:{name}", "missing required column", name)
                ok = False
        if not ok:
            return None
        n = batch.num_rows
        arrays: list[pa.Array | None] = []
        for field in STEP_SCHEMA:
            if field.name in names:
                column = batch.column(field.name)
                key = (field.name, str(column.type))
                # A column of a type that cannot be converted is reported once per stream.
                if key in self._failed_types:
                    got = None
                elif field.name in TENSOR_COLUMNS:
                    got = self.tensors.coerce(
                        column, batch.schema.field(field.name), field.name, offset, self.collector
                    )
                else:
                    got = _coerce(column, field, offset, self.collector)
                if got is None:
                    ok = False
                    if not is_binaryish(column.type):  # binary fails per row (UTF-8)
                        self._failed_types.add(key)
                arrays.append(got)
            elif field.name in ("is_first", "is_last"):
                arrays.append(None)
            else:
                arrays.append(
                    pa.nulls(
                        n,
                        self.tensors.field(field.name).type
                        if field.name in TENSOR_COLUMNS
                        else field.type,
                    )
                )
        if not ok:
            return None
        ids = arrays[0]
        assert ids is not None  # required and converted above
        ids_ok = self._ids_utf8(ids, offset)
        if arrays[2] is None:
            # Episode starts follow the ids; with ids rejected, no episode is judged.
            starts = _run_starts(ids, self._prev_id) if ids_ok else np.zeros(n, dtype=bool)
            arrays[2] = pa.array(starts)
        if arrays[3] is None:
            final = pc.or_kleene(arrays[4], arrays[5])
            arrays[3] = pc.fill_null(final, False)
        out = pa.RecordBatch.from_arrays(arrays, schema=self.tensors.step_schema())
        if not ids_ok:
            self.ids_rejected = out
            return None
        return out


def normalise_steps(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """Convert a step table into `STEP_SCHEMA`.

    Accepts schema v3, v2 or v1, or the minimal classic form ``episode_id, step, obs, action,
    reward, terminated, truncated`` (``obs``/``action``/``reward`` optional). ``episode_id``
    may be an integer (it becomes its decimal string); ``obs``/``action`` may be lists, large
    lists or fixed-size lists of any number type or booleans, fixed-shape tensors, or plain
    numbers (each a tensor of shape ``[]``): the value type is kept and the shape recorded.
    Integer and float columns are converted where exact. Absent optional columns become null;
    ``is_first`` (first row of an episode's run) and ``is_last`` (terminated or truncated) are
    derived when absent.

    Args:
        table: the input rows.

    Returns:
        The rows in `STEP_SCHEMA`, one chunk per input chunk.

    Raises:
        RolloutValidationError: a required column is missing, a column is unknown, or a column
            cannot be converted (naming the column, and the rows where they are known).
    """
    normaliser = StepNormaliser()
    batches = table.to_batches() if isinstance(table, pa.Table) else [table]
    out = [normaliser.normalise(b) for b in batches]
    problems = normaliser.collector.problems()
    if problems:
        raise RolloutValidationError("steps", problems)
    schema = normaliser.tensors.step_schema()
    return pa.Table.from_batches(
        [conform_batch(b, schema) for b in out if b is not None], schema=schema
    )


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with the tensor types of ``schema`` (all-null tensor columns retyped)."""
    if batch.schema.equals(schema, check_metadata=True):
        return batch
    return pa.RecordBatch.from_arrays(
        [
            col
            if col.type == f.type
            else pa.nulls(len(col), f.type)
            if col.null_count == len(col)  # a list<float> default cannot cast to a struct
            else col.cast(f.type)
            for col, f in zip(batch.columns, schema, strict=True)
        ],
        schema=schema,
    )


def _utf8_ids(ids: pa.Array | None, offset: int, c: ProblemCollector) -> pa.Array | None:
    if ids is None:
        return None
    bad = invalid_utf8_rows(ids)
    c.add_rows("episode_id:utf8", bad, offset, "episode_id", lambda i: "value is not valid UTF-8")
    return None if len(bad) else ids


def normalise_episodes(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """Convert given episode attributes into `EPISODE_ATTR_SCHEMA` (every column optional).

    ``episode_id`` is required (an integer becomes its decimal string). ``judge_scores`` may be
    a map of strings to numbers or a struct of numbers (what pyarrow infers from dicts);
    ``final_obs`` a tensor column (its value type kept); ``extras`` a map of names to typed JSON
    text, or a struct of values.

    Args:
        table: episode attribute rows.

    Returns:
        The rows in `EPISODE_ATTR_SCHEMA`; absent columns are null.

    Raises:
        RolloutValidationError: ``episode_id`` is missing, or a column is unknown or cannot be
            converted.
    """
    c = ProblemCollector()
    names = table.schema.names
    if "episode_id" not in names:
        c.add("schema", "missing required column", column="episode_id")
    for name in names:
        if EPISODE_SCHEMA.get_field_index(name) < 0:
            c.add("schema", "unknown column: rollout schema v3 has no such column"
                  + meant_column(name, EPISODE_SCHEMA), column=name)
    arrays: list[pa.Array | pa.ChunkedArray | None] = []
    tensors = TensorTypes()
    if not c.count:
        for field in EPISODE_ATTR_SCHEMA:
            if field.name in names:
                col = table.column(field.name)
                chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
                conv: list[pa.Array | None] = []
                start = 0  # problems name rows of the whole table
                for ch in chunks:
                    if field.name in TENSOR_COLUMNS:
                        got = tensors.coerce(
                            ch, table.schema.field(field.name), "final_obs", start, c
                        )
                    else:
                        got = _coerce(ch, field, start, c)
                    if field.name == "episode_id":  # decoded to match attributes to steps
                        got = _utf8_ids(got, start, c)
                    conv.append(got)
                    start += len(ch)
                want = tensors.field("final_obs").type if field.name in TENSOR_COLUMNS else None
                arrays.append(
                    None
                    if any(x is None for x in conv)
                    else pa.chunked_array(
                        [x if want is None else x.cast(want) for x in conv if x is not None],
                        type=want or field.type,
                    )
                )
            else:
                arrays.append(pa.nulls(table.num_rows, field.type))
    problems = c.problems()
    if problems:
        raise RolloutValidationError("episodes", problems)
    schema = with_columns(EPISODE_ATTR_SCHEMA, [tensors.field("final_obs")])
    return pa.Table.from_arrays(arrays, schema=schema)
