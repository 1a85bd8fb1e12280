"""One rule for unknown fields (schemas/SPEC.md, "Unknown fields"), in readers and schemas alike.

- Open: statements, every predicate and every object nested in one (refs, descriptors, sealed
  data and its rows, episodes, spaces, SLSA's buildDefinition and runDetails...). An extra
  member, at the top or nested, is accepted by the reader and by the JSON Schema, and the reader
  keeps it: ``to_predicate`` writes it back where it was (``Statement.unrecognized`` keeps a
  statement's).
- Closed: what a verifier must fully understand to fail closed (the DSSE envelope, the log
  entry, the manifest, the trust policy and the dataset card, each versioned). An extra member
  is refused by the reader, with an error naming it, and by the schema.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from trajledger.ledger.cards import ProducerCard
from trajledger.ledger.encode import envelope_bytes, log_entry
from trajledger.ledger.keys import Signer
from trajledger.ledger.signing import canonical_json, sign_statement
from trajledger.verify import other_predicates as op
from trajledger.verify import predicates as p
from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import FormatError
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.manifest import FileEntry, Manifest
from trajledger.verify.policy import TrustPolicy
from trajledger.verify.sealed_files import SEAL_SCHEME
from trajledger.verify.statement import STATEMENT_TYPE, Statement

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
LOADED = {f.name: json.loads(f.read_text("utf-8")) for f in SCHEMAS.glob("*.schema.json")}
REGISTRY = Registry().with_resources(
    (doc["$id"], Resource.from_contents(doc)) for doc in LOADED.values()
)
D = "sha256:" + "ab" * 32
T = "2025-01-02T03:04:05Z"
REF = {"name": "cartpole", "version": "1", "digest": D}
POLICY = {"policy": TrustPolicy.from_json({}).to_json()}
EXTRA = {"futureField": {"added": ["by", "a", "newer", "writer"]}}
MANIFEST = Manifest.from_files([FileEntry("a.txt", 3, "ef" * 32)]).to_json()
SPACE = {"type": "Discrete", "dtype": "int64", "n": 2, "start": 0}
SEALED = {
    "scheme": SEAL_SCHEME,
    "recipients": [{"keyid": "ef" * 32, "encapsulatedKey": "AAAA"}],
    "files": [{"path": "steps.parquet", "ciphertext": D, "size": 90}],
    "episodes": [{"episodeId": "e", "steps": 3, "modality": "numeric", "fingerprint": "01" * 32,
                  "sketch": base64.b64encode(bytes(512)).decode()}],
    "featureVersion": 1,
}


def schema_errors(name: str, instance: Any) -> list[str]:
    v = Draft202012Validator(LOADED[f"{name}.schema.json"], registry=REGISTRY)
    return [e.message for e in v.iter_errors(instance)]


def with_extra(doc: Any, path: tuple[str | int, ...]) -> Any:
    """A deep copy of ``doc`` with `EXTRA` added to the object at ``path``."""
    out = json.loads(json.dumps(doc))
    target = out
    for step in path:
        target = target[step]
    target.update(EXTRA)
    return out


def at(doc: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


# (schema or None when the format is another project's, class, valid predicate, where to add)
OPEN: list[tuple[str | None, type[p.Predicate], dict[str, Any], list[tuple[str | int, ...]]]] = [
    ("files-predicate.v1", p.Files, {"manifest": MANIFEST}, [()]),
    ("environment.v1", p.Environment,
     {"name": "e", "version": "1", "observationSpace": SPACE}, [(), ("observationSpace",)]),
    ("evaluator.v1", p.Evaluator, {"name": "v", "version": "1", "kind": "llm-judge",
                                   "calibration": REF}, [(), ("calibration",)]),
    ("rollout-batch.v1", p.RolloutBatch,
     {"schemaVersion": "2", "environment": REF, "policyVersion": "p", "generator": "g",
      "counts": {"steps": 3}, "stats": {}, "sealed": SEALED, "seeds": []},
     [(), ("environment",), ("sealed",), ("sealed", "recipients", 0), ("sealed", "files", 0),
      ("sealed", "episodes", 0)]),
    ("rollout-batch.v1", p.RolloutBatch,
     {"schemaVersion": "3", "environment": REF, "policyVersion": "p", "generator": "g",
      "counts": {}, "stats": {}, "seeds": [], "features": {"digest": D, "size": 1, "version": 1}},
     [("features",)]),
    ("dataset.v1", p.Dataset,
     {"name": "d", "version": "1", "split": "train", "purpose": "train", "batches": [D]}, [()]),
    ("dataset.v2", p.DatasetV2, {"name": "d", "version": "1", "split": "train",
                                 "purpose": "train", "batches": [D], "card": D}, [()]),
    ("approval.v1", p.Approval, {"purpose": "train", "approvedAt": T, "expires": T}, [()]),
    ("revocation.v1", p.Revocation, {"reason": "r", "revokedAt": T}, [()]),
    ("erasure.v1", p.Erasure, {"reason": "consent", "erasedAt": T, "blobs": [D]}, [()]),
    ("refusal.v1", op.Refusal,
     {"dataset": D, "trainer": "bc", "reasons": ["a"], "refusedAt": T}, [()]),
    ("trust-policy.v1", p.TrustPolicyRecord, POLICY, [()]),
    ("model-signature.v1", op.ModelSignature,
     {"bundle": D, "signedPredicateType": "https://model_signing/signature/v1.0",
      "model": {"name": "m", "digest": {"sha256": "ab" * 32}},
      "signatureName": "model.sig", "signedAt": T}, [(), ("model",)]),
    ("evaluation.v1", op.Evaluation,
     {"result": "PASSED", "checkpoint": REF, "suite": REF, "passedTests": [f"{D}/e"],
      "failedTests": [], "metrics": {}, "evaluatedAt": T,
      "configuration": [{"name": "c", "content": "eA==", "annotations": {"role": "command"}}]},
     [(), ("checkpoint",), ("suite",), ("configuration", 0)]),
    ("release.v1", op.Release,
     {"checkpoint": REF, "evaluations": [D], "releasedAt": T,
      "policy": {"name": "p", "serial": 1, "digest": D}}, [(), ("checkpoint",), ("policy",)]),
    ("unsealing.v1", op.Unsealing,
     {"batches": [D], "recipient": "ab" * 32, "purpose": "evaluation", "unsealedAt": T}, [()]),
    (None, op.Import,
     {"artifact": {"digest": D}, "log": {"origin": "o", "vkey": "k", "checkpoint": "c"},
      "entries": [{"entry": "e"}], "dataIncluded": True},
     [(), ("artifact",), ("log",), ("entries", 0)]),
    (None, p.Provenance,
     {"buildDefinition": {"buildType": "bt", "externalParameters": {},
                          "resolvedDependencies": [{"name": "d", "digest": {"sha256": "ab" * 32}}]},
      "runDetails": {"builder": {"id": "b"}, "byproducts": [{"name": "l", "content": "eA=="}]}},
     [(), ("buildDefinition",), ("buildDefinition", "resolvedDependencies", 0), ("runDetails",),
      ("runDetails", "builder"), ("runDetails", "byproducts", 0)]),
]


def _signed(changes: Callable[[dict[str, Any]], None]) -> bytes:
    statement = {"_type": STATEMENT_TYPE, "predicateType": p.FILES,
                 "subject": [{"name": "x", "digest": {"sha256": "ab" * 32}}],
                 "predicate": {"manifest": MANIFEST}}
    changes(statement)
    return canonical_json(statement)


CARD = b"""title = "t"
description = "d"
[collection]
process = "simulated"
[consent]
obtained = "not applicable"
[retention]
policy = "a year"
[personal_information]
contains = false
[uses]
intended = ["tests"]
[access]
conditions = "internal"
"""


def _log_entry(obj: dict[str, Any]) -> LogEntry:
    return LogEntry.from_bytes(canonical_json(obj))


ENTRY = json.loads(log_entry("files", D, D, ("ab" * 32,), T, "00" * 32).to_bytes())
ENVELOPE = json.loads(envelope_bytes(sign_statement([("x", D)], p.FILES, {"manifest": MANIFEST},
                                     [Signer.generate("k")])))

# (schema, reader, valid document, where to add, what the reader's error names)
CLOSED: list[tuple[str, Callable[[Any], object], Any, tuple[str | int, ...], str]] = [
    ("envelope.v1", lambda d: Envelope.from_bytes(json.dumps(d).encode()), ENVELOPE, (),
     "unknown field(s) futureField"),
    ("envelope.v1", lambda d: Envelope.from_bytes(json.dumps(d).encode()), ENVELOPE,
     ("signatures", 0), "signature 0 has unknown field(s) ['futureField']"),
    ("log-entry.v1", _log_entry, ENTRY, (), "unknown field(s) ['futureField']"),
    ("manifest.v1", Manifest.from_json, MANIFEST, (), "futureField"),
    ("manifest.v1", Manifest.from_json, MANIFEST, ("files", 0), "futureField"),
    ("trust-policy.v1", lambda d: TrustPolicy.from_json(d["policy"]), POLICY,
     ("policy",), "policy: unknown setting(s) futureField"),
    ("trust-policy.v1", lambda d: TrustPolicy.from_json(d["policy"]), POLICY,
     ("policy", "roles", "producer"), "role producer: unknown field(s) futureField"),
    ("card.v1", ProducerCard, ProducerCard.from_toml(CARD).to_json(), (), "futureField"),
    ("card.v1", ProducerCard, ProducerCard.from_toml(CARD).to_json(), ("consent",),
     "futureField"),
]


@pytest.mark.parametrize(("schema", "cls", "doc", "paths"), OPEN,
                         ids=[c.TYPE.rsplit("/", 2)[-2] for _, c, _, _ in OPEN])
def test_open_records_accept_and_keep_unknown_fields(
    schema: str | None, cls: type[p.Predicate], doc: dict[str, Any],
    paths: list[tuple[str | int, ...]],
) -> None:
    assert cls.from_predicate(doc).written() == doc  # the document is valid as it is
    if schema is not None:
        assert schema_errors(schema, doc) == []
    for path in paths:
        extended = with_extra(doc, path)
        if schema is not None:
            assert schema_errors(schema, extended) == [], path
        out = cls.from_predicate(extended).to_predicate()
        assert out == extended, path
        assert at(out, path)["futureField"] == EXTRA["futureField"], path


def test_statements_accept_and_keep_unknown_fields() -> None:
    def extend(s: dict[str, Any]) -> None:
        s.update(EXTRA)
        s["subject"][0].update(EXTRA, uri="https://x")
        s["subject"][0]["digest"]["sha512"] = "cd" * 64

    payload = _signed(extend)
    assert schema_errors("statement.v1", json.loads(payload)) == []
    st = Statement.from_bytes(payload)
    assert st.unrecognized == EXTRA
    assert st.subjects[0].unrecognized == {**EXTRA, "uri": "https://x",
                                           "digest": {"sha512": "cd" * 64}}
    assert st.subjects[0].digest == D


@pytest.mark.parametrize(("schema", "reader", "doc", "path", "message"), CLOSED,
                         ids=[f"{c[0]}-{'.'.join(map(str, c[3])) or 'top'}" for c in CLOSED])
def test_closed_documents_refuse_unknown_fields(
    schema: str, reader: Callable[[Any], object], doc: Any, path: tuple[str | int, ...],
    message: str,
) -> None:
    reader(doc)  # the document is valid as it is
    assert schema_errors(schema, doc) == []
    extended = with_extra(doc, path)
    assert any("futureField" in e for e in schema_errors(schema, extended))
    with pytest.raises(FormatError, match=re.escape(message)):
        reader(extended)


def test_every_schema_is_classified() -> None:
    """Each schema is open or closed by this test (rollout tables and reports are outputs: their
    schemas describe exactly what this version writes)."""
    outputs = {n for n in LOADED if n.startswith(("rollout-steps", "rollout-episodes", "report"))}
    covered = {f"{s}.schema.json" for s, *_ in OPEN if s} | {f"{c[0]}.schema.json" for c in CLOSED}
    covered |= {"statement.v1.schema.json", "rollout-space.v2.schema.json"}
    assert set(LOADED) - outputs == covered
