"""Rollout schema v2 (and v1, still read): the Arrow schemas, and the documents in schemas/ that
describe them."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import trajledger.ledger.rollouts as rollouts
from trajledger.ledger.rollouts.normalise import normalise_steps
from trajledger.ledger.rollouts.rows import rows_to_table
from trajledger.ledger.rollouts.schema import (
    EPISODE_ATTR_SCHEMA,
    EPISODE_SCHEMA,
    EPISODE_SCHEMA_V1,
    EPISODE_SCHEMA_V2,
    FLOAT_STEP_COLUMNS,
    ROLLOUT_SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    STEP_INPUT_REQUIRED,
    STEP_SCHEMA,
    STEP_SCHEMA_V1,
    STEP_SCHEMA_V2,
    TENSOR_COLUMNS,
    conforms,
    parquet_float_paths,
    schema_version,
    tensor_field,
    tensor_shape,
    with_columns,
)

ROOT = Path(__file__).resolve().parents[3]
SCHEMAS = ROOT / "schemas"

STRING, INT64, BOOL, FLOAT64 = pa.string(), pa.int64(), pa.bool_(), pa.float64()
VECTOR = pa.list_(pa.float32())
EXTRAS = pa.map_(STRING, STRING)

EXPECTED_STEPS = {
    "episode_id": STRING, "step": INT64, "is_first": BOOL, "is_last": BOOL,
    "terminated": BOOL, "truncated": BOOL, "reward": FLOAT64, "discount": FLOAT64,
    "obs": VECTOR, "action": VECTOR,
    "action_logprob": FLOAT64, "timestamp": pa.timestamp("us", tz="UTC"), "latency_ms": FLOAT64,
    "role": STRING, "content": STRING, "reasoning_content": STRING, "tool_calls": STRING,
    "tool_results": STRING, "prompt_tokens": INT64, "completion_tokens": INT64,
    "model_id": STRING, "cost_usd": FLOAT64, "safety_interventions": pa.int32(),
    "info": STRING, "extras": EXTRAS,
}  # fmt: skip
EXPECTED_EPISODES = {
    "episode_id": STRING, "task_id": STRING, "group_id": STRING, "label": STRING,
    "env_version": STRING, "policy_version": STRING,
    "seed": INT64, "return": FLOAT64, "num_steps": INT64, "termination_reason": STRING,
    "success": BOOL, "judge_scores": pa.map_(STRING, FLOAT64), "cost_usd": FLOAT64,
    "language": STRING, "task_type": STRING, "invalid": BOOL, "final_obs": VECTOR,
    "reset_info": STRING, "extras": EXTRAS,
}  # fmt: skip


def test_version() -> None:
    assert ROLLOUT_SCHEMA_VERSION == "3"
    assert STEP_SCHEMA.metadata[SCHEMA_VERSION_KEY] == b"steps/3"
    assert EPISODE_SCHEMA.metadata[SCHEMA_VERSION_KEY] == b"episodes/3"
    assert STEP_SCHEMA_V1.metadata[SCHEMA_VERSION_KEY] == b"steps/1"
    assert EPISODE_SCHEMA_V1.metadata[SCHEMA_VERSION_KEY] == b"episodes/1"
    assert schema_version(STEP_SCHEMA_V1) == "1" and schema_version(EPISODE_SCHEMA) == "3"
    assert schema_version(STEP_SCHEMA_V2) == "2" and schema_version(EPISODE_SCHEMA_V2) == "2"
    assert STEP_SCHEMA_V2.names == STEP_SCHEMA.names
    assert EPISODE_SCHEMA_V2.types == EPISODE_SCHEMA.types
    assert schema_version(pa.schema([])) is None


def test_step_columns_and_types() -> None:
    assert {f.name: f.type for f in STEP_SCHEMA} == EXPECTED_STEPS
    required = [f.name for f in STEP_SCHEMA if not f.nullable]
    assert required == ["episode_id", "step", "is_first", "is_last", "terminated", "truncated"]
    assert set(STEP_INPUT_REQUIRED) <= set(required)


def test_episode_columns_and_types() -> None:
    assert {f.name: f.type for f in EPISODE_SCHEMA} == EXPECTED_EPISODES
    required = [f.name for f in EPISODE_SCHEMA if not f.nullable]
    assert required == ["episode_id", "num_steps", "termination_reason", "invalid"]
    assert all(f.nullable for f in EPISODE_ATTR_SCHEMA)
    assert EPISODE_ATTR_SCHEMA.names == EPISODE_SCHEMA.names


def test_version_1_schemas_are_kept() -> None:
    """Batches recorded as v1 are read and validated against the v1 schema, unchanged."""
    assert [f.name for f in STEP_SCHEMA_V1 if not f.nullable] == [
        "episode_id", "step", "is_first", "is_last", "terminated", "truncated", "reward"
    ]  # fmt: skip
    assert "info" not in STEP_SCHEMA_V1.names and "final_obs" not in EPISODE_SCHEMA_V1.names
    assert [f.name for f in EPISODE_SCHEMA_V1 if not f.nullable] == [
        "episode_id", "return", "num_steps", "termination_reason", "invalid"
    ]  # fmt: skip


def test_tensor_fields_keep_type_and_shape() -> None:
    f = tensor_field("obs", pa.uint8(), (64, 64, 3))
    assert f.type == pa.list_(pa.uint8()) and tensor_shape(f) == (64, 64, 3)
    assert tensor_shape(tensor_field("action", pa.int64(), ())) == ()
    assert tensor_shape(tensor_field("obs", pa.float64())) is None
    bad = pa.field("obs", pa.list_(pa.float32()), metadata={b"trajledger.shape": b"[-1]"})
    with pytest.raises(ValueError, match="not a list of sizes"):
        tensor_shape(bad)
    image = with_columns(STEP_SCHEMA, [f])
    assert conforms(image, STEP_SCHEMA) and not conforms(image, EPISODE_SCHEMA)
    text = with_columns(STEP_SCHEMA, [pa.field("obs", pa.list_(pa.string()))])
    assert not conforms(text, STEP_SCHEMA)


def test_with_columns_replaces_fields_by_name_keeping_every_metadata() -> None:
    """spd53: the fields replaced by index (no list of the template's fields): the schema, its
    metadata and every field's (a shape) exactly as the template's fields listed with those
    replaced; a field the template has not is left out."""
    obs = tensor_field("obs", pa.uint8(), (64, 64, 3))
    action = tensor_field("action", pa.int64(), ())
    stray = pa.field("no_such_column", pa.int8())
    for template in (STEP_SCHEMA, EPISODE_SCHEMA):
        fields = [obs, stray, action, tensor_field("final_obs", pa.float32(), (2,))]
        by_name = {f.name: f for f in fields}
        want = pa.schema([by_name.get(f.name, f) for f in template], metadata=template.metadata)
        got = with_columns(template, fields)
        assert got.equals(want, check_metadata=True)
        assert [f.metadata for f in got] == [f.metadata for f in want]
        assert got.metadata == template.metadata and "no_such_column" not in got.names


def test_float_columns() -> None:
    assert FLOAT_STEP_COLUMNS == ("reward", "discount", "obs", "action", "action_logprob",
                                  "latency_ms", "cost_usd")  # fmt: skip
    floats, others = parquet_float_paths(EPISODE_SCHEMA)
    assert floats == [
        "return",
        "judge_scores.key_value.value",
        "cost_usd",
        "final_obs.list.element",
    ]
    assert "judge_scores.key_value.key" in others and "extras.key_value.value" in others
    floats, _ = parquet_float_paths(STEP_SCHEMA)
    assert "obs.list.element" in floats and "reward" in floats
    floats, others = parquet_float_paths(with_columns(STEP_SCHEMA, [
        tensor_field("obs", pa.uint8(), (2,)), tensor_field("action", pa.float16())
    ]))  # fmt: skip
    assert "obs.list.element" in others and "action.list.element" in others


DOCS = [
    ("rollout.v3.md", STEP_SCHEMA, "steps"),
    ("rollout.v3.md", EPISODE_SCHEMA, "episodes"),
    ("rollout.v2.md", STEP_SCHEMA_V2, "steps"),
    ("rollout.v2.md", EPISODE_SCHEMA_V2, "episodes"),
    ("rollout.v1.md", STEP_SCHEMA_V1, "steps"),
    ("rollout.v1.md", EPISODE_SCHEMA_V1, "episodes"),
]


@pytest.mark.parametrize(("doc", "schema", "table"), DOCS, ids=[f"{d}-{t}" for d, _, t in DOCS])
def test_markdown_documents_every_column(doc: str, schema: pa.Schema, table: str) -> None:
    text = (SCHEMAS / doc).read_text(encoding="utf-8")
    section = text.split("## Step table")[1].split("## Episode table")
    end = {"rollout.v2.md": "## Tensors", "rollout.v3.md": "## Space columns"}.get(
        doc, "## Validity"
    )
    body = section[0] if table == "steps" else section[1].split(end)[0]
    rows = {
        m.group(1): (m.group(2), m.group(3))
        for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \| (yes|no) \|", body, re.M)
    }
    assert list(rows) == schema.names
    for field in schema:
        documented = rows[field.name][0].replace("\\", "").strip()
        space = {"rollout.v2.md": "tensor", "rollout.v3.md": "space"}.get(doc)
        want = space if space and field.name in TENSOR_COLUMNS else DOC_TYPES[str(field.type)]
        assert documented.removesuffix(" (JSON)") == want, field.name
        assert (rows[field.name][1] == "no") == field.nullable, field.name


DOC_TYPES = {
    "string": "string", "int64": "int64", "int32": "int32", "bool": "bool", "double": "float64",
    "list<item: float>": "list<float32>", "timestamp[us, tz=UTC]": "timestamp[us, UTC]",
    "map<string, double>": "map<string, float64>", "map<string, string>": "map<string, string>",
}  # fmt: skip


def _load(name: str) -> dict[str, Any]:
    doc = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    return doc  # type: ignore[no-any-return]


JSON_TYPES = {"string": STRING, "boolean": BOOL}


@pytest.mark.parametrize(
    ("name", "schema"),
    [
        ("rollout-steps.v3.schema.json", STEP_SCHEMA),
        ("rollout-episodes.v3.schema.json", EPISODE_SCHEMA),
        ("rollout-steps.v2.schema.json", STEP_SCHEMA_V2),
        ("rollout-episodes.v2.schema.json", EPISODE_SCHEMA_V2),
        ("rollout-steps.v1.schema.json", STEP_SCHEMA_V1),
        ("rollout-episodes.v1.schema.json", EPISODE_SCHEMA_V1),
    ],
)
def test_json_schema_mirrors_arrow_schema(name: str, schema: pa.Schema) -> None:
    doc = _load(name)
    assert doc["additionalProperties"] is False
    assert list(doc["properties"]) == schema.names
    assert doc["required"] == [f.name for f in schema if not f.nullable]
    for field in schema:
        prop = doc["properties"][field.name]
        types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
        if "$id" in doc and doc["$id"].endswith(":v2") and field.name in TENSOR_COLUMNS:
            assert types == ["array", "null"], field.name
            continue
        if "$id" in doc and doc["$id"].endswith(":v3") and field.name in TENSOR_COLUMNS:
            assert types == ["array", "object", "string", "null"], field.name
            continue
        assert ("null" in types) == field.nullable, field.name
        main = next(t for t in types if t != "null")
        t = field.type
        expected = (
            "integer" if pa.types.is_integer(t) else "number" if pa.types.is_floating(t)
            else "array" if pa.types.is_list(t) else "object" if pa.types.is_map(t)
            else "boolean" if pa.types.is_boolean(t) else "string"
        )  # fmt: skip
        assert main == expected, field.name
        assert prop["description"]


def _conforms(value: Any, schema: dict[str, Any]) -> list[str]:
    """The subset of JSON Schema 2020-12 these documents use."""
    errors: list[str] = []
    types = schema.get("type")
    if types is not None:
        types = types if isinstance(types, list) else [types]
        checks = {
            "null": value is None, "boolean": isinstance(value, bool),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, int | float) and not isinstance(value, bool),
            "string": isinstance(value, str), "array": isinstance(value, list),
            "object": isinstance(value, dict),
        }  # fmt: skip
        if not any(checks[t] for t in types):
            return [f"{value!r} is not {types}"]
    if isinstance(value, int | float) and "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{value} < {schema['minimum']}")
    if isinstance(value, list) and "items" in schema:
        for v in value:
            errors += _conforms(v, schema["items"])
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"missing {key}")
        props = schema.get("properties", {})
        for key, v in value.items():
            if key in props:
                errors += [f"{key}: {e}" for e in _conforms(v, props[key])]
            elif schema.get("additionalProperties") is False:
                errors.append(f"unknown {key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += _conforms(v, schema["additionalProperties"])
    return errors


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in row.items():
        if isinstance(v, dt.datetime):
            v = v.isoformat()
        elif k in ("judge_scores", "extras") and v is not None:
            v = dict(v)
        out[k] = v
    return out


def test_written_rows_conform_to_json_schemas() -> None:
    from trajledger.ledger.rollouts.episodes import derive_episodes
    from trajledger.ledger.rollouts.rows import rows_to_episodes

    rows = [
        {"episode_id": "a", "step": 0, "role": "user", "content": "hi", "reward": 0.0,
         "terminated": False, "truncated": False,
         "timestamp": dt.datetime(2024, 1, 1, tzinfo=dt.UTC)},
        {"episode_id": "a", "step": 1, "role": "assistant", "content": "yo", "reward": 1.0,
         "terminated": True, "truncated": False, "prompt_tokens": 3, "completion_tokens": 1,
         "cost_usd": 0.01, "tool_calls": "[]", "safety_interventions": 0},
    ]  # fmt: skip
    rows[0]["info"] = {"x": 1}
    rows[1]["extras"] = {"k": "v"}
    steps = rows_to_table(rows)
    step_doc = _load("rollout-steps.v3.schema.json")
    for row in steps.to_pylist():
        assert _conforms(_json_row(row), step_doc) == []
    eps = derive_episodes(steps, rows_to_episodes([{"episode_id": "a", "judge_scores": {"j": 1}}]))
    ep_doc = _load("rollout-episodes.v3.schema.json")
    for row in eps.to_pylist():
        assert _conforms(_json_row(row), ep_doc) == []
    assert _conforms({"episode_id": "a"}, step_doc)  # the checker does reject


def test_classic_rows_conform_to_json_schema() -> None:
    table = normalise_steps(pa.table({
        "episode_id": [1, 1], "step": [0, 1], "obs": [[0.5], [1.5]], "action": [0, 1],
        "reward": [0.0, 1.0], "terminated": [False, True], "truncated": [False, False],
    }))  # fmt: skip
    doc = _load("rollout-steps.v3.schema.json")
    for row in table.to_pylist():
        assert _conforms(_json_row(row), doc) == []


def test_package_exports_resolve() -> None:
    for name in rollouts.__all__:
        assert getattr(rollouts, name) is not None
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        rollouts.nope  # noqa: B018


def test_package_import_does_not_load_pyarrow() -> None:
    code = (
        "import sys, trajledger.ledger.rollouts as r; "
        "assert 'pyarrow' not in sys.modules, 'eager'; r.STEP_SCHEMA; "
        "assert 'pyarrow' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_no_episodes_follow_the_tensor_types_as_they_are_fixed() -> None:
    """The empty episode batch is made once per schema: when a tensor type is fixed later (or
    only its shape, which lives in the field's metadata), the next one has the new schema."""
    from trajledger.ledger.rollouts.episodes import EpisodeBuilder
    from trajledger.ledger.rollouts.normalise import TensorTypes

    tensors = TensorTypes()
    builder = EpisodeBuilder(tensors=tensors)
    first = builder.finish()
    assert first.num_rows == 0 and first.schema.equals(tensors.episode_schema(), True)
    assert builder.finish() is first
    for shape in ((2,), (3,)):  # the same type: the shape, in the metadata, differs
        tensors.fields["obs"] = tensor_field("obs", pa.uint8(), shape)
        out = builder.finish()
        assert out.num_rows == 0 and out is not first
        assert tensor_shape(out.schema.field("final_obs")) == shape
        assert out.schema.equals(tensors.episode_schema(), check_metadata=True)
        first = out
