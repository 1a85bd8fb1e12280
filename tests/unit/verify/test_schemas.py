"""The JSON Schemas in schemas/ describe what ledger/ writes, and agree with verify/'s readers.

1. Every schema is a valid JSON Schema 2020-12 document.
2. What ``ledger.signing`` and ``ledger.files`` write (statements, envelopes, manifests)
   validates.
3. On the committed vectors, a schema refuses what the reader refuses and accepts what it
   accepts, except for the rules JSON Schema cannot state (listed per case below, and in each
   schema's description).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from trajledger.ledger.encode import envelope_bytes
from trajledger.ledger.files import collect_files, manifest_for
from trajledger.ledger.keys import Signer
from trajledger.ledger.signing import files_predicate, sign_statement
from trajledger.verify import predicates
from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import FormatError
from trajledger.verify.manifest import FileEntry, Manifest
from trajledger.verify.statement import Statement
from trajledger.verify.strict_json import loads_strict
from trajledger.verify.tree import manifest_from_statement

ROOT = Path(__file__).resolve().parents[3]
SCHEMAS = ROOT / "schemas"
VECTORS = ROOT / "tests" / "vectors"
NAMES = ("statement", "envelope", "manifest", "files-predicate")


def _load(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{name}.v1.schema.json").read_text("utf-8"))


REGISTRY = Registry().with_resources(
    (_load(n)["$id"], Resource.from_contents(_load(n))) for n in NAMES
)


def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(_load(name), registry=REGISTRY)


def errors(name: str, instance: Any) -> list[str]:
    return [e.message for e in validator(name).iter_errors(instance)]


@pytest.mark.parametrize("name", NAMES)
def test_schema_is_valid_2020_12(name: str) -> None:
    schema = _load(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"https://trajledger.dev/schemas/{name}.v1.schema.json"


# --- (2) writer output -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Envelope, Manifest]:
    """What `trajledger sign` writes for a small directory, via the same library calls."""
    root = tmp_path_factory.mktemp("data")
    for rel, data in {
        "README.md": b"# d\n",
        "data/steps.parquet": b"PAR1",
        "data/episodes.parquet": b"PAR1PAR1",
        "odd name \u00e9/x.bin": b"",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    manifest = manifest_for(collect_files([root]))
    ptype, predicate = files_predicate(manifest)
    signers = [Signer.generate("a"), Signer.generate("p", "ecdsa-p256")]
    env = sign_statement([("dataset", manifest.digest)], ptype, predicate, signers)
    return env, manifest


def test_written_envelope_validates(written: tuple[Envelope, Manifest]) -> None:
    env, _ = written
    assert errors("envelope", json.loads(envelope_bytes(env))) == []


def test_written_statement_validates(written: tuple[Envelope, Manifest]) -> None:
    env = written[0]
    statement = json.loads(env.payload)
    assert errors("statement", statement) == []
    assert errors("files-predicate", statement["predicate"]) == []
    Statement.from_bytes(env.payload)  # and the reader agrees


def test_written_manifest_validates(written: tuple[Envelope, Manifest]) -> None:
    manifest = written[1]
    assert errors("manifest", manifest.to_json()) == []
    assert errors("manifest", json.loads(manifest.canonical_bytes())) == []


@pytest.mark.parametrize(
    "ptype", [predicates.APPROVAL, predicates.SLSA_PROVENANCE_V1, predicates.DATASET]
)
def test_other_predicate_types_are_not_held_to_the_files_schema(ptype: str) -> None:
    env = sign_statement([("x", "sha256:" + "a" * 64)], ptype, {"any": 1}, [Signer.generate("k")])
    assert errors("statement", json.loads(env.payload)) == []


# --- the schemas refuse -----------------------------------------------------------------------


def _statement(**changes: Any) -> dict[str, Any]:
    m = Manifest.from_files([FileEntry("a", 1, "a" * 64)])
    obj: dict[str, Any] = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "x", "digest": {"sha256": "a" * 64}}],
        "predicateType": predicates.FILES,
        "predicate": {"manifest": m.to_json()},
    }
    obj.update(changes)
    return obj


@pytest.mark.parametrize(
    "changes",
    [
        {"_type": "https://in-toto.io/Statement/v0.1"},
        {"subject": []},
        {"subject": [{"digest": {"sha256": "a" * 64}}]},
        {"subject": [{"name": "x", "digest": {"sha512": "a" * 128}}]},
        {"subject": [{"name": "x", "digest": {"sha256": "A" * 64}}]},
        {"predicateType": ""},
        {"predicate": {}},  # a files statement without its manifest
        {"predicate": {"manifest": {"files": [], "mediaType": "x"}}},
    ],
)
def test_statement_schema_refuses(changes: dict[str, Any]) -> None:
    assert errors("statement", _statement(**changes))
    with pytest.raises(FormatError):  # and the reader refuses it too
        st = Statement.from_bytes(json.dumps(_statement(**changes)).encode())
        manifest_from_statement(st)


# --- (3) schemas and readers agree on the vectors ---------------------------------------------

# Rules a JSON Schema cannot state; the reader enforces them (each schema's description says so).
MANIFEST_NOT_IN_SCHEMA = {
    "manifest/unsorted-paths",
    "manifest/duplicate-path",
    "manifest/file-and-directory",
}
ENVELOPE_NOT_IN_SCHEMA = {"dsse/payload-type-lone-surrogate"}  # a string to JSON Schema
STATEMENT_NOT_IN_SCHEMA = {"statement/duplicate-subject-name"}


def _data(case: dict[str, Any], name: str) -> bytes:
    if f"{name}_base64" in case:
        return base64.b64decode(case[f"{name}_base64"])
    return str(case[name]).encode("utf-8")


def _is_json(data: bytes) -> bool:
    """Whether strict JSON reading accepts ``data``: schemas apply only to what it returns."""
    try:
        loads_strict(data)
    except FormatError:
        return False
    return True


def _cases(directory: str, field: str, *, payload: bool = False) -> list[Path]:
    out = []
    for path in sorted((VECTORS / directory).glob("*.json")):
        case = json.loads(path.read_text("utf-8"))
        if field not in case and f"{field}_base64" not in case:
            continue
        data = _data(case, field)
        if payload:
            try:
                data = Envelope.from_bytes(data).payload
            except FormatError:
                continue
        if _is_json(data):
            out.append(path)
    return out


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("path", _cases("manifest", "manifest"), ids=_id)
def test_manifest_schema_agrees_with_reader(path: Path) -> None:
    case = json.loads(path.read_text())
    doc = loads_strict(_data(case, "manifest"))
    schema_ok = not errors("manifest", doc)
    reader_ok = case["expected_error"] is None
    if _id(path) in MANIFEST_NOT_IN_SCHEMA:
        assert schema_ok and not reader_ok
    else:
        assert schema_ok == reader_ok, errors("manifest", doc)


@pytest.mark.parametrize(
    "path", _cases("dsse", "envelope") + _cases("statement", "envelope"), ids=_id
)
def test_envelope_schema_agrees_with_parser(path: Path) -> None:
    data = _data(json.loads(path.read_text()), "envelope")
    doc = loads_strict(data)
    try:
        Envelope.from_bytes(data)
        parser_ok = True
    except FormatError:
        parser_ok = False
    schema_ok = not errors("envelope", doc)
    if _id(path) in ENVELOPE_NOT_IN_SCHEMA:
        assert schema_ok and not parser_ok
    else:
        assert schema_ok == parser_ok, errors("envelope", doc)


@pytest.mark.parametrize("path", _cases("statement", "envelope", payload=True), ids=_id)
def test_statement_schema_agrees_with_parser(path: Path) -> None:
    case = json.loads(path.read_text())
    payload = Envelope.from_bytes(_data(case, "envelope")).payload
    doc = loads_strict(payload)
    try:
        Statement.from_bytes(payload)
        parser_ok = True
    except FormatError:
        parser_ok = False
    schema_ok = not errors("statement", doc)
    if _id(path) in STATEMENT_NOT_IN_SCHEMA:
        assert schema_ok and not parser_ok
        return
    if parser_ok and doc.get("predicateType") == predicates.FILES:
        # The statement schema includes the files predicate's rules (manifest_from_statement).
        predicate = doc["predicate"]
        parser_ok = "manifest" in predicate and not errors("manifest", predicate["manifest"])
    assert schema_ok == parser_ok, errors("statement", doc)
