"""The JSON Schemas of the project predicates describe what ``ledger/`` writes.

1. Each schema in ``schemas/<kind>.v<N>.schema.json`` is valid JSON Schema 2020-12 with the
   expected ``$id``, and each project predicate type (each version) has one (except ``files``,
   covered by ``tests/unit/verify/test_schemas.py``, and ``import``, not written yet).
2. What the typed predicates of ``verify/predicates.py`` write (minimal and full) validates,
   and reading then writing a predicate gives it back unchanged.
3. What a ledger actually records (the predicates inside the signed envelopes: manifests
   inline, trust policies, refusals) validates against the schema of its kind.
4. The schemas refuse what the typed readers refuse (a wrong split, a malformed digest or time);
   both accept and keep unknown fields (tests/unit/verify/test_unknown_fields.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from referencing import Registry, Resource

from trajledger.ledger.encode import vkey_string
from trajledger.verify import other_predicates, predicates
from trajledger.verify.dsse import Envelope
from trajledger.verify.kinds import KINDS as REGISTRY_KINDS
from trajledger.verify.kinds import predicate_class
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.sealed_files import SEAL_SCHEME
from trajledger.verify.statement import Statement

ROOT = Path(__file__).resolve().parents[3]
SCHEMAS = ROOT / "schemas"
KINDS = (
    "environment",
    "evaluator",
    "rollout-batch",
    "dataset",
    "approval",
    "revocation",
    "erasure",
    "refusal",
    "trust-policy",
    "model-signature",
    "evaluation",
    "release",
    "unsealing",
)
LATER = ("dataset.v2",)
"""Later versions of a predicate: ``<kind>.v<N>`` (the schema of ``<kind>/v<N>``)."""
D = "sha256:" + "ab" * 32
T = "2025-01-02T03:04:05Z"


def _load(name: str) -> dict[str, Any]:
    """The schema of ``kind`` (version 1) or ``kind.vN``."""
    stem = name if ".v" in name else f"{name}.v1"
    schema: dict[str, Any] = json.loads((SCHEMAS / f"{stem}.schema.json").read_text("utf-8"))
    return schema


def schema_of(predicate_type: str) -> str:
    """The schema name (`_load`) of a project predicate type."""
    kind, version = predicate_type.removeprefix(predicates.PROJECT_PREFIX).rsplit("/", 1)
    return kind if version == "v1" else f"{kind}.{version}"


SPACE = json.loads((SCHEMAS / "rollout-space.v2.schema.json").read_text("utf-8"))
REGISTRY = Registry().with_resources(
    [
        *((_load(n)["$id"], Resource.from_contents(_load(n)))
          for n in (*KINDS, *LATER, "manifest")),
        (SPACE["$id"], Resource.from_contents(SPACE)),
    ]
)


def errors(kind: str, instance: Any) -> list[str]:
    v = Draft202012Validator(_load(kind), registry=REGISTRY)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(instance)]


@pytest.mark.parametrize("name", (*KINDS, *LATER))
def test_schema_is_valid_2020_12(name: str) -> None:
    schema = _load(name)
    Draft202012Validator.check_schema(schema)
    kind, version = [*name.split("."), "v1"][:2]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"https://trajledger.dev/schemas/{kind}.{version}.schema.json"
    assert f"https://trajledger.dev/attestation/{kind}/{version}" in schema["description"]


def test_every_project_predicate_has_a_schema() -> None:
    project = {
        schema_of(u)
        for u in predicates.ALL
        if u.startswith(predicates.PROJECT_PREFIX)
    }
    assert project - {"files", "import"} == {*KINDS, *LATER}


REF = {"name": "cartpole", "version": "1", "digest": D}
MODELS: list[tuple[str, Any, dict[str, Any]]] = [
    ("environment", predicates.Environment, {"name": "e", "version": "1"}),
    (
        "environment",
        predicates.Environment,
        {"name": "e", "version": "1", "source": "s", "rulesDigest": D, "gymnasiumId": "X-v1"},
    ),
    (
        "environment",
        predicates.Environment,
        {
            "name": "e",
            "version": "1",
            "gymnasiumId": "X-v1",
            "observationSpace": {
                "type": "Dict",
                "spaces": [
                    [
                        "cam",
                        {
                            "type": "Box",
                            "dtype": "uint8",
                            "shape": [2, 2, 3],
                            "low": 0,
                            "high": 255,
                        },
                    ],
                    [
                        "pos",
                        {
                            "type": "Box",
                            "dtype": "float64",
                            "shape": [2],
                            "low": "-inf",
                            "high": [1.5, "inf"],
                        },
                    ],
                ],
            },
            "actionSpace": {"type": "Discrete", "dtype": "int64", "n": 2, "start": 0},
            "envSpec": {"id": "X-v1", "max_episode_steps": 500},
        },
    ),
    ("evaluator", predicates.Evaluator, {"name": "v", "version": "1", "kind": "human"}),
    (
        "evaluator",
        predicates.Evaluator,
        {
            "name": "v",
            "version": "1",
            "kind": "llm-judge",
            "modelId": "m",
            "rubricDigest": D,
            "promptDigest": D,
        },
    ),
    (
        "rollout-batch",
        predicates.RolloutBatch,
        {
            "schemaVersion": "1",
            "environment": REF,
            "policyVersion": "random",
            "generator": "g",
            "counts": {"steps": 3, "episodes": 1},
            "stats": {"mean_return": 1.5, "n": 3, "missing": None},
        },
    ),
    (
        "rollout-batch",
        predicates.RolloutBatch,
        {
            "schemaVersion": "1",
            "environment": REF,
            "evaluator": REF,
            "policyVersion": D,
            "generator": "g",
            "seeds": ["0", "1", "-5"],
            "counts": {},
            "stats": {},
            "consent": "c",
            "licence": "l",
            "retention": "r",
        },
    ),
    (
        "rollout-batch",
        predicates.RolloutBatch,
        {
            "schemaVersion": "2",
            "environment": REF,
            "policyVersion": "p",
            "generator": "g",
            "counts": {"steps": 3, "episodes": 1},
            "stats": {"rewarded_episodes": 0, "return_mean": None},
            "source": {"formats": ["minari"], "minari": {"dataset_id": "a/b-v0"}},
            "observationSpace": {"type": "MultiBinary", "n": [3]},
            "actionSpace": {
                "type": "Tuple",
                "spaces": [
                    {"type": "Discrete", "dtype": "int64", "n": 2, "start": 0},
                    {
                        "type": "MultiDiscrete",
                        "dtype": "int64",
                        "shape": [2],
                        "nvec": [3, 4],
                        "start": [0, 0],
                    },
                ],
            },
            "envSpec": {"id": "X-v1"},
        },
    ),
    (
        "dataset",
        predicates.Dataset,
        {"name": "d", "version": "1", "split": "holdout", "batches": [D]},
    ),
    (
        "dataset.v2",
        predicates.DatasetV2,
        {"name": "d", "version": "1", "split": "train", "batches": [D], "card": D},
    ),
    ("approval", predicates.Approval, {"purpose": "train", "approvedAt": T, "expires": T}),
    (
        "approval",
        predicates.Approval,
        {"purpose": "eval", "approvedAt": T, "expires": T, "note": "n", "validationReport": D},
    ),
    ("revocation", predicates.Revocation, {"reason": "r", "revokedAt": T}),
    ("erasure", predicates.Erasure, {"reason": "consent", "erasedAt": T, "blobs": [D]}),
    (
        "refusal",
        other_predicates.Refusal,
        {"dataset": D, "trainer": "bc", "reasons": ["a", "b"], "refusedAt": T},
    ),
    (
        "evaluator",
        predicates.Evaluator,
        {"name": "judge", "version": "2", "kind": "llm-judge", "modelId": "m", "calibration": REF},
    ),
    (
        "evaluation",
        other_predicates.Evaluation,
        {
            "result": "FAILED", "checkpoint": REF, "suite": REF, "evaluator": REF,
            "passedTests": [f"{D}/e-1"], "failedTests": [f"{D}/e-2"],
            "metrics": {"episodes": 2, "success_rate": 0.5}, "evaluatedAt": T,
            "configuration": [{"name": "command", "content": "cHl0aG9u",
                               "annotations": {"role": "command"}}],
        },
    ),
    (
        "release",
        other_predicates.Release,
        {"checkpoint": REF, "evaluations": [D], "releasedAt": T, "note": "n",
         "policy": {"name": "p", "serial": 1, "digest": D}},
    ),
    (
        "unsealing",
        other_predicates.Unsealing,
        {"batches": [D], "recipient": "ab" * 32, "purpose": "evaluation", "unsealedAt": T},
    ),
    (
        "rollout-batch",
        predicates.RolloutBatch,
        {
            "schemaVersion": "2", "environment": REF, "policyVersion": "p", "generator": "g",
            "counts": {"steps": 3, "episodes": 1}, "stats": {},
            "sealed": {
                "scheme": SEAL_SCHEME,
                "recipients": [{"keyid": "ab" * 32, "encapsulatedKey": "AAAA"}],
                "files": [{"path": "steps.parquet", "ciphertext": D, "size": 90}],
                "episodes": [{"episodeId": "e", "steps": 3, "modality": "text",
                              "fingerprint": "ab" * 32}],
                "featureVersion": 3,
            },
        },
    ),
    (
        "rollout-batch",
        predicates.RolloutBatch,
        {
            "schemaVersion": "2", "environment": REF, "policyVersion": "p", "generator": "g",
            "counts": {"steps": 3, "episodes": 1}, "stats": {},
            "features": {"digest": D, "size": 700, "version": 3},
        },
    ),
]


@pytest.mark.parametrize(("kind", "model", "fields"), MODELS)
def test_typed_predicates_write_what_the_schema_describes(
    kind: str, model: Any, fields: dict[str, Any]
) -> None:
    registry = REGISTRY_KINDS[kind.split(".")[0]]
    assert model in [predicate_class(t) for t in registry.predicate_types]
    assert schema_of(model.TYPE) == kind
    typed = model.from_predicate(fields)
    emitted = typed.written()
    assert errors(kind, emitted) == []
    # Known fields are written in one normal form: a dataset's purpose and a batch's seeds have
    # defaults; everything else comes back as it was.
    defaults = {"dataset": {"purpose": "train"}, "dataset.v2": {"purpose": "train"},
                "rollout-batch": {"seeds": []}}.get(kind, {})
    assert emitted == {**defaults, **fields}


@pytest.mark.parametrize(
    ("kind", "instance", "problem"),
    [
        (
            "dataset",
            {"name": "d", "version": "1", "split": "test", "purpose": "t", "batches": [D]},
            "split: 'test' is not one of",
        ),
        (
            "dataset",
            {"name": "d", "version": "1", "split": "train", "purpose": "t", "batches": []},
            "batches: [] should be non-empty",
        ),
        (
            "dataset.v2",
            {"name": "d", "version": "1", "split": "train", "purpose": "t", "batches": [D]},
            "'card' is a required property",
        ),
        (
            "approval",
            {"purpose": "p", "approvedAt": "2025-01-02", "expires": T},
            "approvedAt: '2025-01-02' does not match",
        ),
        (
            "erasure",
            {"reason": "boredom", "erasedAt": T, "blobs": []},
            "reason: 'boredom' is not one of",
        ),
        (
            "refusal",
            {"dataset": "sha256:AB", "trainer": "bc", "reasons": ["x"], "refusedAt": T},
            "dataset: 'sha256:AB' does not match",
        ),
        (
            "rollout-batch",
            {"schemaVersion": "2", "environment": REF, "policyVersion": "p", "generator": "g",
             "counts": {}, "stats": {}, "features": {"digest": D, "size": 1, "version": 3},
             "sealed": {"scheme": SEAL_SCHEME, "episodes": [], "featureVersion": 3,
                        "recipients": [{"keyid": "ab" * 32, "encapsulatedKey": "AAAA"}],
                        "files": [{"path": "steps.parquet", "ciphertext": D, "size": 90}]}},
            "should not be valid under",  # a sealed batch names no features file
        ),
    ],
)
def test_schemas_refuse(kind: str, instance: Any, problem: str) -> None:
    assert any(problem in e for e in errors(kind, instance)), errors(kind, instance)


# -- what a ledger records -------------------------------------------------------------------------


def test_recorded_predicates_validate(tmp_path: Path) -> None:
    from trajledger import Ledger
    from trajledger.ledger.artifacts import (
        create_dataset,
        record_batch,
        register_environment,
        register_evaluator,
    )
    from trajledger.ledger.status import approve, erase, record_policy, revoke
    from trajledger.runner.admission import DataRefusedError
    from trajledger.runner.evaluate import evaluate
    from trajledger.runner.release import release
    from trajledger.runner.rollouts import run_policy
    from trajledger.runner.train import train
    from trajledger.verify.policy import TrustPolicy

    home = tmp_path / "home"
    ledger = Ledger.init(home, origin="test/schemas")
    k = {n: ledger.keys.create(n, encrypt=False) for n in ("p", "a", "t", "e")}
    ledger.keys.create_encryption_key("e", encrypt=False)
    policy_path = home / "policy.toml"
    policy_path.write_text(
        f"""
format = 2
[roles.producer]
keys = ["keys/p.pub"]
[roles.approver]
keys = ["keys/a.pub"]
identities = [{{ issuer = "https://issuer.example", subject = "a@example.com" }}]
[roles.trainer]
keys = ["keys/t.pub"]
[roles.evaluator]
keys = ["keys/e.pub"]
encryption_keys = ["keys/x25519/e.pub"]
[roles.log]
vkeys = ["{ledger.log.vkey}"]
[[release.require]]
suite = "reg@1"
min = 0
"""
    )
    record_policy(ledger, policy_path, [k["a"]])
    register_environment(ledger, "env", "1", k["p"], gymnasium_id="CartPole-v1", source="gym")
    register_evaluator(ledger, "ev", "1", "deterministic", k["p"])
    played = run_policy(None, "CartPole-v1", 2, 0, policy_version="random")
    batch = record_batch(
        ledger,
        played.steps,
        episodes=played.episodes,
        env="env@1",
        evaluator="ev@1",
        policy="random",
        signer=k["p"],
        licence="CC-BY-4.0",
    ).recorded.digest
    create_dataset(ledger, "ds", "1", "train", [batch], k["p"])
    from trajledger.ledger.cards import ProducerCard

    card = ProducerCard.from_toml(CARD)
    create_dataset(ledger, "carded", "1", "train", [batch], k["p"], card=card)
    assert errors("card", card.to_json()) == []
    policy = TrustPolicy.from_toml(policy_path.read_bytes(), home)
    with pytest.raises(DataRefusedError):
        train(ledger, "ds@1", "bc", k["t"], policy)  # unapproved: a refusal record
    approve(ledger, "ds@1", k["a"], note="ok", validation_report=D)
    ckpt = train(ledger, "ds@1", "bc", k["t"], policy)
    held = run_policy(None, "CartPole-v1", 2, 100, policy_version="random")
    sealed = record_batch(ledger, held.steps, episodes=held.episodes, env="env@1",
                          policy="random", signer=k["p"], licence="CC-BY-4.0",
                          seal_to=policy.role("evaluator").encryption_keys).recorded.digest
    create_dataset(ledger, "reg", "1", "regression", [sealed], k["p"])
    evaluate(ledger, ckpt.digest, "reg@1", k["e"], policy, pass_return=10)
    release(ledger, ckpt.digest, [k["a"]], policy)
    revoke(ledger, "ds@1", k["a"], reason="superseded")
    erase(ledger, batch, k["p"], reason="retention")

    log = ledger.log
    seen: set[str] = set()
    for raw in log.entries(0, log.size):
        entry = LogEntry.from_bytes(raw)
        statement = Statement.from_bytes(
            Envelope.from_bytes(ledger.store.get(entry.envelope)).payload
        )
        if entry.kind == "checkpoint":
            continue  # SLSA Provenance v1: the standard's own schema
        name = schema_of(statement.predicate_type)
        assert errors(name, statement.predicate) == [], name
        seen.add(name)
    # model-signature records need a P-256 trainer key and an export: validated against their
    # schema by tests/interop/test_model_signing.py.
    assert seen == {*KINDS, *LATER} - {"model-signature"}


CARD = b"""
title = "Grid"
description = "Grid rollouts"
languages = ["en", "pt-BR"]
homepage = "https://example.com/grid"
[collection]
process = "simulated"
timeframe = [2025-01-01, 2025-02-01T12:00:00+01:00]
[consent]
obtained = "not applicable"
[retention]
policy = "two years"
until = 2027-01-01
[personal_information]
contains = true
categories = ["player names"]
[uses]
intended = ["tests"]
[access]
conditions = "internal"
"""


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda c: c.pop("access"), "'access' is a required property"),
        (lambda c: c["personal_information"].pop("categories"),
         "'categories' is a required property"),
        (lambda c: c["personal_information"].update(contains=False), "is expected to be empty"),
        (lambda c: c["uses"].update(intended=[]), "should be non-empty"),
        (lambda c: c["collection"].update(timeframe=["2025-1-1"]), "does not match"),
        (lambda c: c.update(format=2), "1 was expected"),
        (lambda c: c.update(extra="x"), "'extra' was unexpected"),
        (lambda c: c.update(description="a\x00b"), "does not match"),
    ],
)
def test_the_card_schema_refuses_what_the_reader_refuses(change: Any, problem: str) -> None:
    from trajledger.ledger.cards import ProducerCard
    from trajledger.verify.errors import FormatError

    card = ProducerCard.from_toml(CARD).to_json()
    change(card)
    assert any(problem in e for e in errors("card.v1", card)), errors("card.v1", card)
    with pytest.raises(FormatError):
        ProducerCard(card)


def test_trust_policy_terms_and_witnessed_logs_validate() -> None:
    """accepted_licences and the witness role's logs (written only when set) are in the schema;
    logs belongs to the witness role only."""
    from trajledger.verify.policy import TrustPolicy

    witness = vkey_string("witness", bytes(range(32)), 0x04)
    policy = TrustPolicy.from_json({
        "accepted_licences": ["CC-BY-4.0"],
        "roles": {"witness": {"vkeys": [witness], "threshold": 1, "logs": ["vendor/log"]}},
    }).to_json()  # fmt: skip
    assert errors("trust-policy", {"policy": policy}) == []
    policy["roles"]["log"]["logs"] = ["vendor/log"]
    assert any("logs" in e for e in errors("trust-policy", {"policy": policy}))


def test_trust_policy_revoked_identities_validate() -> None:
    """revoked_identities (written only when set) is in the schema, with its required fields."""
    from trajledger.verify.policy import TrustPolicy

    policy = TrustPolicy.from_json({"revoked_identities": [
        {"issuer": "https://issuer.test", "subject": "ci@example.com", "compromised_since": 3,
         "reason": "token leaked"},
        {"issuer": "https://issuer.test", "subject": "b@example.com",
         "compromised_since": "2025-01-01T00:00:00Z"},
    ]}).to_json()  # fmt: skip
    assert errors("trust-policy", {"policy": policy}) == []
    del policy["revoked_identities"][0]["subject"]
    assert any("subject" in e for e in errors("trust-policy", {"policy": policy}))


def test_trust_policy_format_2_validates() -> None:
    """Format 2 (the evaluator role with encryption keys, [release]) is in the schema; a
    format-1 policy may not carry either."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519, x25519

    from trajledger.verify.policy import TrustPolicy

    def pem(key: Any) -> str:
        return str(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode())

    evaluator = {"keys": [pem(ed25519.Ed25519PrivateKey.generate())],
                 "encryption_keys": [pem(x25519.X25519PrivateKey.generate())]}
    policy = TrustPolicy.from_json({
        "format": 2, "roles": {"evaluator": evaluator},
        "release": {"require": [{"suite": "regression@3", "min": 0.9, "max_drop": "0.02"}]},
    }).to_json()  # fmt: skip
    assert errors("trust-policy", {"policy": policy}) == []
    policy["format"] = 1
    assert errors("trust-policy", {"policy": policy})
    # rel48: [release] require_contamination_check, written only when true
    policy["format"] = 2
    policy["release"]["require_contamination_check"] = True
    assert errors("trust-policy", {"policy": policy}) == []
    assert TrustPolicy.from_json(policy).to_json() == policy
    policy["release"]["require_contamination_check"] = "yes"
    assert errors("trust-policy", {"policy": policy})
