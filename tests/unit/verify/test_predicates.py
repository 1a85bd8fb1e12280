"""Every typed predicate writes exactly what it wrote before the table-driven form.

1. For each kind (minimal and full, with unknown fields at the top level), reading the input
   and writing it back gives the golden JSON of ``tests/vectors/predicates/golden.json``
   (taken from the code before the predicates became table-driven): absent optional fields stay
   absent, defaults are written, lists are normalised as before.
2. The same predicates built positionally, as callers build them, write the same JSON.
3. Every golden document reads back to an equal predicate (the writer and reader agree).
4. Each field type refuses a malformed value, naming the field (and its nested path).

Regenerate the goldens (only for an intended format change) with ``--update-goldens``.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest

from trajledger.verify import other_predicates as op
from trajledger.verify import predicates as p
from trajledger.verify.errors import FormatError
from trajledger.verify.manifest import FileEntry, Manifest
from trajledger.verify.sealed_files import SEAL_SCHEME, Sealed, SealedEpisode

GOLDEN = Path(__file__).resolve().parents[2] / "vectors" / "predicates" / "golden.json"
D = "sha256:" + "ab" * 32
B = "sha256:" + "cd" * 32
T = "2025-01-02T03:04:05Z"
REF = {"name": "cartpole", "version": "1", "digest": D}
MANIFEST = Manifest.from_files([FileEntry("a.txt", 3, "ef" * 32)]).to_json()
SPACE = {"type": "Discrete", "dtype": "int64", "n": 2, "start": 0}
SEALED = {
    "scheme": SEAL_SCHEME,
    "recipients": [{"keyid": "ef" * 32, "encapsulatedKey": "AAAA"}],
    "files": [{"path": "z.parquet", "ciphertext": B, "size": 90},
              {"path": "a.parquet", "ciphertext": D, "size": 53}],
    "episodes": [{"episodeId": "e", "steps": 3, "modality": "numeric", "fingerprint": "01" * 32,
                  "sketch": base64.b64encode(bytes(512)).decode()},
                 {"episodeId": "f", "steps": 1, "modality": "text", "fingerprint": "02" * 32}],
    "featureVersion": 2,
}
DESCRIPTOR = {"name": "ds", "uri": "u", "digest": {"sha256": "ab" * 32, "md5": "x"},
              "content": "", "downloadLocation": "https://x", "mediaType": "m",
              "annotations": {"role": "dataset", "logIndex": 3}}
UNKNOWN = {"futureField": {"nested": [1, "two"]}}

CASES: dict[str, tuple[type[p.Predicate], dict[str, Any]]] = {
    "files": (p.Files, {"manifest": MANIFEST}),
    "environment-min": (p.Environment, {"name": "e", "version": "1"}),
    "environment-full": (p.Environment, {
        "name": "e", "version": "1", "source": "", "rulesDigest": D, "gymnasiumId": "X-v1",
        "manifest": MANIFEST, "observationSpace": SPACE, "actionSpace": SPACE,
        "envSpec": {"id": "X-v1"}, **UNKNOWN}),
    "evaluator-min": (p.Evaluator, {"name": "v", "version": "1", "kind": "human"}),
    "evaluator-full": (p.Evaluator, {
        "name": "v", "version": "1", "kind": "llm-judge", "modelId": "m", "rubricDigest": D,
        "promptDigest": B, "manifest": MANIFEST, "calibration": REF, **UNKNOWN}),
    "rollout-batch-min": (p.RolloutBatch, {
        "schemaVersion": "1", "environment": REF, "policyVersion": "random", "generator": "",
        "counts": {"steps": 3}, "stats": {"mean": 1.5, "n": 3, "none": None}}),
    "rollout-batch-full": (p.RolloutBatch, {
        "schemaVersion": "2", "environment": REF, "evaluator": REF, "policyVersion": D,
        "generator": "g", "seeds": ["0", "-5"], "counts": {}, "stats": {}, "consent": "c",
        "licence": "", "retention": "r", "manifest": MANIFEST, "source": {"formats": ["x"]},
        "observationSpace": SPACE, "actionSpace": SPACE, "envSpec": {"id": "X"},
        "sealed": SEALED, "failuresOf": B, **UNKNOWN}),
    "rollout-batch-features": (p.RolloutBatch, {
        "schemaVersion": "3", "environment": REF, "policyVersion": "random", "generator": "g",
        "counts": {}, "stats": {}, "features": {"digest": B, "size": 0, "version": 1},
        **UNKNOWN}),
    "dataset-min": (p.Dataset, {"name": "d", "version": "1", "split": "holdout",
                                "batches": [D, B]}),
    "dataset-full": (p.Dataset, {"name": "d", "version": "1", "split": "train",
                                 "purpose": "sft", "batches": [D, B], "manifest": MANIFEST,
                                 **UNKNOWN}),
    "dataset-v2": (p.DatasetV2, {"name": "d", "version": "1", "split": "regression",
                                 "batches": [B], "card": D, "manifest": MANIFEST, **UNKNOWN}),
    "approval-min": (p.Approval, {"purpose": "train", "approvedAt": T, "expires": T}),
    "approval-full": (p.Approval, {"purpose": "eval", "approvedAt": T, "expires": T,
                                   "note": "", "validationReport": D, **UNKNOWN}),
    "revocation": (p.Revocation, {"reason": "r", "revokedAt": T, **UNKNOWN}),
    "erasure": (p.Erasure, {"reason": "consent", "erasedAt": T, "blobs": [B, D], **UNKNOWN}),
    "erasure-empty": (p.Erasure, {"reason": "legal", "erasedAt": T, "blobs": []}),
    "import-min": (op.Import, {"artifact": {"digest": D},
                              "log": {"origin": "o", "vkey": "k", "checkpoint": "c"}}),
    "import-full": (op.Import, {
        "artifact": {"digest": D, "kind": "dataset"},
        "log": {"origin": "o", "vkey": "k", "checkpoint": "c", "x": 1},
        "entries": [{"entry": "e", "proof": []}], "dataIncluded": False, **UNKNOWN}),
    "import-updates": (op.Import, {"log": {"origin": "o", "vkey": "k", "checkpoint": "c"},
                                  "entries": [], "applied": 12, **UNKNOWN}),
    "trust-policy": (p.TrustPolicyRecord, {"policy": {"format": 2, "roles": {}}, **UNKNOWN}),
    "refusal": (op.Refusal, {"dataset": D, "trainer": "bc", "reasons": ["a", "b"],
                            "refusedAt": T, **UNKNOWN}),
    "model-signature": (op.ModelSignature, {
        "bundle": D, "signedPredicateType": "https://model_signing/signature/v1.0",
        "model": {"name": "m", "digest": {"sha256": "ab" * 32}}, "signatureName": "s.sig",
        "signedAt": T, **UNKNOWN}),
    "evaluation-min": (op.Evaluation, {
        "result": "PASSED", "checkpoint": REF, "suite": REF, "passedTests": [f"{D}/e-1"],
        "failedTests": [], "evaluatedAt": T}),
    "evaluation-full": (op.Evaluation, {
        "result": "FAILED", "checkpoint": REF, "suite": REF, "evaluator": REF,
        "passedTests": [f"{D}/e-1"], "failedTests": [f"{D}/e-2"],
        "metrics": {"episodes": 2, "success_rate": 0.5}, "evaluatedAt": T,
        "configuration": [{"name": "command", "content": "cHl0aG9u",
                           "annotations": {"role": "command"}}, DESCRIPTOR],
        "manifest": MANIFEST, **UNKNOWN}),
    "release-min": (op.Release, {"checkpoint": REF, "evaluations": [B, D], "releasedAt": T,
                                "policy": {"name": "p", "serial": 1, "digest": D}}),
    "release-full": (op.Release, {"checkpoint": REF, "evaluations": [D], "releasedAt": T,
                                 "policy": {"name": "p", "serial": 7, "digest": D},
                                 "note": "", **UNKNOWN}),
    "unsealing": (op.Unsealing, {"batches": [D, B], "recipient": "ab" * 32,
                                "purpose": "evaluation", "unsealedAt": T, **UNKNOWN}),
    "provenance-min": (p.Provenance, {
        "buildDefinition": {"buildType": "bt", "externalParameters": {}},
        "runDetails": {"builder": {"id": "b"}}}),
    "provenance-full": (p.Provenance, {
        "buildDefinition": {"buildType": "bt", "externalParameters": {"name": "m", "seed": 1},
                            "internalParameters": {"x": 1},
                            "resolvedDependencies": [DESCRIPTOR, {"uri": "git+x"}],
                            "futureBuild": 1},
        "runDetails": {"builder": {"id": "b", "version": {"x": "1"}},
                       "metadata": {"invocationId": "i", "startedOn": T},
                       "byproducts": [{"name": "log", "content": "eA=="}],
                       "futureRun": [2]},
        **UNKNOWN}),
}


def positional() -> dict[str, p.Predicate]:
    """Predicates built positionally, as the writers in ``ledger`` and ``runner`` build them."""
    ref = p.ArtifactRef("cartpole", "1", D)
    manifest = Manifest.from_json(MANIFEST)
    episode = SealedEpisode("e", 3, "numeric", "01" * 32, None)
    sealed = Sealed((("ef" * 32, "AAAA"),), {"b": (B, 90), "a": (D, 53)}, (episode,), 1)
    descriptor = p.ResourceDescriptor.of("ds", D, role="dataset")
    return {
        "files": p.Files(manifest),
        "environment": p.Environment("e", "1", None, D, "X-v1", manifest, SPACE, None,
                                     {"id": "X"}),
        "evaluator": p.Evaluator("v", "1", "human", None, None, D, None, ref),
        "rollout-batch": p.RolloutBatch("1", ref, "random", "g", {"steps": 1}, {"m": None},
                                        ref, ("1",), None, "l", None, manifest, None, SPACE,
                                        SPACE, None, None, sealed, B),
        "rollout-batch-features": p.RolloutBatch("3", ref, "p", "", {}, {}, None, (), "c",
                                                 features=p.FeaturesRef(D, 7, 1)),
        "dataset": p.Dataset("d", "1", "train", (B, D)),
        "dataset-v2": p.DatasetV2("d", "1", "holdout", (D,), "eval", manifest, card=B),
        "approval": p.Approval("train", T, T, None, D),
        "revocation": p.Revocation("r", T),
        "erasure": p.Erasure("retention", T, (D, B)),
        "refusal": op.Refusal(D, "bc", ("x",), T),
        "trust-policy": p.TrustPolicyRecord({"format": 1}),
        "import": op.Import({"digest": D}, {"origin": "o", "vkey": "k", "checkpoint": "c"}),
        "import-updates": op.Import(None, {"origin": "o", "vkey": "k", "checkpoint": "c"}, (),
                                   False, 0),
        "model-signature": op.ModelSignature(D, "t", {"name": "m"}, "s", T),
        "evaluation": op.Evaluation("FAILED", ref, ref, (f"{D}/a",), (f"{D}/b",), {"m": 1.0}, T,
                                   None, (descriptor,), manifest),
        "release": op.Release(ref, (D,), {"name": "p", "serial": 1, "digest": D}, T),
        "unsealing": op.Unsealing((D,), "ab" * 32, "evaluation", T),
        "provenance": p.Provenance("bt", {"name": "m"}, {}, (descriptor,), "b", {"x": 1}, ()),
    }


def current() -> dict[str, Any]:
    return {
        "read": {k: cls.from_predicate(obj).to_predicate() for k, (cls, obj) in CASES.items()},
        "built": {k: pred.to_predicate() for k, pred in positional().items()},
    }


def _bytes(doc: Any) -> bytes:
    """Sorted-key JSON (the goldens hold floats, which RFC 8785 here refuses)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def test_golden(update_goldens: bool) -> None:
    got = current()
    if update_goldens:
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", "utf-8")
    want = json.loads(GOLDEN.read_text("utf-8"))
    assert set(got["read"]) == set(CASES) and set(got["built"]) == set(positional())
    for part in ("read", "built"):
        for name, doc in want[part].items():
            assert got[part][name] == doc, (part, name)
            assert _bytes(got[part][name]) == _bytes(doc), (part, name)
    assert {type(x).TYPE for x in positional().values()} == p.ALL


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_reads_back_equal(name: str) -> None:
    cls, obj = CASES[name]
    first = cls.from_predicate(obj)
    again = cls.from_predicate(json.loads(json.dumps(first.to_predicate())))
    assert again == first and again.unrecognized == first.unrecognized
    assert again.to_predicate() == first.to_predicate()


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("revocation", {"reason": None}, "(revocation/v1): reason is null"),
        ("revocation", {"reason": ""}, "reason is '', want a non-empty string"),
        ("erasure", {"reason": "boredom"}, "reason is 'boredom', want one of ['retention', "),
        ("erasure", {"erasedAt": "yesterday"}, "erasedAt"),
        ("erasure", {"blobs": [D, D]}, "blobs lists a digest twice"),
        ("erasure", {"blobs": ["sha256:x"]}, "blobs[0]"),
        ("refusal", {"reasons": []}, "reasons is empty"),
        ("refusal", {"reasons": [1]}, "reasons is not a list of strings"),
        ("import-full", {"dataIncluded": 1}, "dataIncluded is 1, want true or false"),
        ("import-full", {"entries": [1]}, "entries[0] is not a JSON object"),
        ("import-full", {"log": {"origin": "o"}}, "log.vkey is missing"),
        ("import-updates", {"applied": -1}, "applied is -1, want a tree size"),
        ("import-updates", {"applied": "1"}, "applied is '1', want an integer"),
        ("rollout-batch-min", {"counts": {"steps": -1}}, "counts.steps is -1, want a count"),
        # rev29: past float's range (on main: OverflowError from math.isfinite)
        ("rollout-batch-min", {"stats": {"mean": 10**400}}, "stats.mean is 1000"),
        ("rollout-batch-min", {"environment": "x"}, "environment is not a JSON object"),
        ("rollout-batch-min", {"environment": {"name": "e", "version": "1"}},
         "environment: digest is missing"),
        ("rollout-batch-full", {"sealed": {**SEALED, "episodes": [{"episodeId": "e"}]}},
         "sealed: episodes[0]: steps is missing"),
        ("rollout-batch-full", {"sealed": {**SEALED, "files": [{"path": "a", "size": 1}]}},
         "sealed: files[0]: ciphertext is missing"),
        ("rollout-batch-features", {"features": {"digest": B, "size": -1, "version": 1}},
         "features: size -1, version 1, want >= 0 and >= 1"),
        ("rollout-batch-full", {"features": {"digest": B, "size": 1, "version": 1}},
         "a sealed batch has no features file"),
        ("provenance-min", {"runDetails": {"builder": {}}}, "runDetails: builder: id is missing"),
        ("provenance-min", {"buildDefinition": []}, "buildDefinition is not a JSON object"),
        ("provenance-full", {"runDetails": {"builder": {"id": "b"}, "byproducts": {}}},
         "runDetails: byproducts is not a list"),
        ("evaluation-full", {"configuration": [{"digest": {"sha256": "AB"}}]},
         "configuration[0]: digest.sha256"),
        ("environment-min", {"manifest": {"files": []}}, "manifest"),
        ("release-min", {"policy": {"name": "p", "serial": 1, "digest": "x"}}, "policy: digest"),
    ],
)
def test_each_field_type_refuses_with_its_message(
    name: str, change: dict[str, Any], message: str
) -> None:
    cls, obj = CASES[name]
    with pytest.raises(FormatError, match=re.escape(message)):
        cls.from_predicate({**obj, **change})


def test_a_record_class_reads_only_fields_with_specs() -> None:
    # Record.from_json sets every field from its spec without calling __init__: a class with a
    # field it would leave unset, or a __post_init__ it would skip, is refused when first read.
    from dataclasses import dataclass, field

    from trajledger.verify.records import Record, field_specs, spec

    @dataclass(frozen=True)
    class Plain(Record):
        name: str = spec("name")
        extra: int = field(default=0)

    @dataclass(frozen=True)
    class Checked(Record):
        name: str = spec("name")

        def __post_init__(self) -> None:
            pass

    for cls in (Plain, Checked):
        with pytest.raises(TypeError, match="fields all have specs, and no __post_init__"):
            field_specs(cls)

    @dataclass(frozen=True)
    class Ref(Record):
        name: str = spec("name")
        size: int = spec("size", "integer", default=0)

    read = Ref.from_json({"name": "a", "other": [1]}, "ref")
    assert read == Ref("a", unrecognized={"other": [1]}) and read.size == 0
    assert read.unrecognized == {"other": [1]} and hash(read) == hash(Ref("a"))
