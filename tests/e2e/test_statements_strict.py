"""Every statement trajledger writes is a valid in-toto Statement v1, and every checkpoint's
predicate a valid SLSA Provenance v1, checked strictly against the attestation framework's own
protobuf definitions (the ``in-toto-attestation`` package's generated classes,
``json_format.ParseDict(..., ignore_unknown_fields=False)``) and the rules protobuf cannot
express: a subject has a digest (Statement v1), every ResourceDescriptor has at least one of
``uri``, ``digest`` or ``content`` (ResourceDescriptor v1), SLSA's required fields are set
(``buildType``, ``externalParameters``, ``builder.id``), and digests are lowercase hex of the
algorithm's length.

The statements come from two small ledgers built here, between them writing one record of every
kind in the registry (`verify.kinds.KINDS`: the test fails if a kind is missing), plus the
model_signing statement of ``export --format model-signing``. The validator is shown to fail: a
trajledger 0.1.0 checkpoint (a ``metrics`` byproduct with a name only) is refused by it, and
still verifies (tests/e2e/test_compat.py).
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import statement_pb2

from trajledger import Ledger
from trajledger.verify import predicates
from trajledger.verify.dsse import Envelope
from trajledger.verify.kinds import KINDS
from trajledger.verify.log_entry import LogEntry

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "compat-0.1.0"
DIGEST_HEX = {"sha256": 64, "sha512": 128, "sha384": 96, "sha1": 40, "gitCommit": 40}


# -- the validator --------------------------------------------------------------------------------


def _descriptor_problems(rd: dict[str, Any], where: str, *, subject: bool) -> list[str]:
    """ResourceDescriptor v1 rules beyond the protobuf shape."""
    out = []
    if not (rd.get("uri") or rd.get("digest") or rd.get("content")):
        out.append(f"{where}: none of uri, digest, content")
    if subject and not rd.get("digest"):
        out.append(f"{where}: a Statement v1 subject must have a digest")
    if subject and not rd.get("name"):
        out.append(f"{where}: trajledger names every subject")
    for alg, value in (rd.get("digest") or {}).items():
        want = DIGEST_HEX.get(alg)
        if want is not None and not re.fullmatch(f"[0-9a-f]{{{want}}}", value):
            out.append(f"{where}: digest.{alg} is not {want} lowercase hex")
    if "content" in rd:
        try:
            base64.b64decode(rd["content"], validate=True)
        except ValueError:
            out.append(f"{where}: content is not base64 (protobuf bytes)")
    return out


def strict_problems(statement: dict[str, Any]) -> list[str]:
    """Every way ``statement`` (parsed JSON) is not a valid in-toto Statement v1 (and, for SLSA
    provenance, a valid Provenance v1). Empty when valid."""
    problems: list[str] = []
    try:
        json_format.ParseDict(statement, statement_pb2.Statement(), ignore_unknown_fields=False)
    except json_format.ParseError as e:
        problems.append(f"Statement: {e}")
    if statement.get("_type") != "https://in-toto.io/Statement/v1":
        problems.append(f"_type is {statement.get('_type')!r}")
    subjects = statement.get("subject") or []
    if not subjects:
        problems.append("no subject")
    for i, s in enumerate(subjects):
        problems += _descriptor_problems(s, f"subject[{i}]", subject=True)
    if not statement.get("predicateType"):
        problems.append("no predicateType")
    if statement.get("predicateType") != predicates.SLSA_PROVENANCE_V1:
        return problems
    pred = statement.get("predicate") or {}
    try:
        json_format.ParseDict(pred, provenance_pb2.Provenance(), ignore_unknown_fields=False)
    except json_format.ParseError as e:
        problems.append(f"Provenance: {e}")
    build = pred.get("buildDefinition") or {}
    run = pred.get("runDetails") or {}
    if not build.get("buildType"):
        problems.append("buildDefinition.buildType is required")
    if not isinstance(build.get("externalParameters"), dict):
        problems.append("buildDefinition.externalParameters is required")
    if not (run.get("builder") or {}).get("id"):
        problems.append("runDetails.builder.id is required")
    for i, d in enumerate(build.get("resolvedDependencies") or []):
        problems += _descriptor_problems(d, f"resolvedDependencies[{i}]", subject=False)
    for i, b in enumerate(run.get("byproducts") or []):
        problems += _descriptor_problems(b, f"byproducts[{i}]", subject=False)
    return problems


def statements_of(home: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(kind, statement JSON)`` of every log entry of a ledger directory."""
    ledger = Ledger.open(home)
    out = []
    for raw in ledger.log.entries(0, ledger.log.size):
        entry = LogEntry.from_bytes(raw)
        envelope = Envelope.from_bytes(ledger.store.get(entry.envelope))
        out.append((entry.kind, json.loads(envelope.payload)))
    return out


# -- two ledgers writing every kind --------------------------------------------------------------


def rows(episodes: int, seed: int) -> list[dict[str, Any]]:
    """Small classic rollouts, distinct per seed."""
    out = []
    for e in range(episodes):
        for s in range(4):
            out.append({
                "episode_id": f"ep-{seed}-{e}", "step": s, "obs": [float(seed), float(e), s / 4],
                "action": [float((e + s) % 2)], "reward": float(e % 3),
                "terminated": s == 3, "truncated": False,
            })  # fmt: skip
    return out


POLICY = """\
name = "{name}"
serial = 1
[roles.producer]
keys = ["{keys}/vendor.pub"]
[roles.approver]
keys = ["{keys}/approver.pub"]
[roles.trainer]
keys = ["{keys}/trainer.pub", "{keys}/trainer-p256.pub"]
[roles.log]
vkeys = [{vkeys}]
"""


EVALUATOR = """
format = 2
name = "vendor"
serial = 2
[roles.producer]
keys = ["keys/vendor.pub"]
[roles.approver]
keys = ["keys/approver.pub"]
[roles.trainer]
keys = ["keys/trainer.pub", "keys/trainer-p256.pub"]
[roles.evaluator]
keys = ["keys/evaluator.pub"]
encryption_keys = ["keys/x25519/evaluator.pub"]
[roles.log]
vkeys = ["{vkey}"]
[[release.require]]
suite = "grid-regression@1"
min = 0.5
"""

JUDGE = """
import json, os, pathlib
import pyarrow.parquet as pq
suite = pathlib.Path(os.environ["TRAJLEDGER_SUITE_DIR"])
episodes = [{"batch": b["digest"], "episode_id": e, "passed": True}
            for b in json.loads((suite / "manifest.json").read_text())["batches"]
            for e in pq.read_table(suite / b["directory"] / "episodes.parquet")
            .column("episode_id").to_pylist()]
(pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"]) / "results.json").write_text(json.dumps(
    {"format": "trajledger.eval-results/1", "episodes": episodes}))
"""


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A vendor ledger with one record of every kind but import, and a buyer that imported."""
    from trajledger.ledger.artifacts import (
        create_dataset,
        record_batch,
        register_environment,
        register_evaluator,
    )
    from trajledger.ledger.exchange import export_bundle, import_bundle
    from trajledger.ledger.model_signing_export import export_model_signing
    from trajledger.ledger.record import record_files
    from trajledger.ledger.status import approve, erase, record_policy, revoke
    from trajledger.runner.admission import DataRefusedError
    from trajledger.runner.evaluate import evaluate
    from trajledger.runner.release import release
    from trajledger.runner.train import train
    from trajledger.verify.policy import TrustPolicy

    root = tmp_path_factory.mktemp("statements")
    home = root / "vendor"
    ledger = Ledger.init(home, origin="test.example/statements-vendor")
    k = {n: ledger.keys.create(n, encrypt=False) for n in ("vendor", "approver", "trainer")}
    k["trainer-p256"] = ledger.keys.create("trainer-p256", "ecdsa-p256", encrypt=False)
    (home / "policy.toml").write_text(
        POLICY.format(name="vendor", keys="keys", vkeys=f'"{ledger.log.vkey}"')
    )
    record_policy(ledger, home / "policy.toml", [k["approver"]])
    policy = TrustPolicy.from_toml((home / "policy.toml").read_bytes(), home)
    register_environment(ledger, "grid", "1", k["vendor"], source="tests")
    register_evaluator(ledger, "score", "1", "deterministic", k["vendor"])
    batch = {}
    for seed in (1, 2, 3):
        batch[seed] = record_batch(
            ledger, rows(6, seed), env="grid@1", evaluator="score@1", policy="random",
            signer=k["vendor"], name=f"batch-{seed}", licence="CC-BY-4.0", consent="opt-in",
            retention="365d",
        ).recorded.digest  # fmt: skip
    create_dataset(ledger, "grid-train", "1", "train", [batch[1]], k["vendor"])
    approve(ledger, "grid-train@1", k["approver"])
    ckpt = train(ledger, "grid-train@1", "bc", k["trainer"], policy, name="grid-bc", version="1")
    create_dataset(ledger, "grid-unapproved", "1", "train", [batch[2]], k["vendor"])
    with pytest.raises(DataRefusedError):  # recorded as a refusal
        train(ledger, "grid-unapproved@1", "bc", k["trainer"], policy)
    revoke(ledger, batch[2], k["vendor"], reason="bad episodes")
    erase(ledger, batch[3], k["vendor"], reason="consent")
    notes = root / "notes"
    notes.mkdir()
    (notes / "README.txt").write_text("attested files\n")
    record_files(ledger, [notes], k["vendor"], name="notes")
    export_model_signing(ledger, ckpt.digest, root / "model", k["trainer-p256"], policy)
    # A format-2 successor: a sealed regression suite, its evaluation (and unsealing), a release.
    k["evaluator"] = ledger.keys.create("evaluator", encrypt=False)
    ledger.keys.create_encryption_key("evaluator", encrypt=False)
    (home / "policy2.toml").write_text(EVALUATOR.format(vkey=ledger.log.vkey))
    record_policy(ledger, home / "policy2.toml", [k["approver"]])
    policy2 = TrustPolicy.from_toml((home / "policy2.toml").read_bytes(), home)
    sealed = record_batch(ledger, rows(6, 4), env="grid@1", policy="random", signer=k["vendor"],
                          name="batch-4", seal_to=policy2.role("evaluator").encryption_keys)
    create_dataset(ledger, "grid-regression", "1", "regression", [sealed.digest], k["vendor"])
    (root / "judge.py").write_text(JUDGE)
    evaluate(ledger, ckpt.digest, "grid-regression@1", k["evaluator"], policy2,
             command=[sys.executable, str(root / "judge.py")])
    release(ledger, ckpt.digest, [k["approver"]], policy2)

    buyer = root / "buyer"
    b = Ledger.init(buyer, origin="test.example/statements-buyer")
    keys = buyer / "trust"
    shutil.copytree(home / "keys", keys, ignore=shutil.ignore_patterns("*.key"))
    bundle = root / "grid.tar.zst"
    export_bundle(ledger, "grid-train@1", bundle)
    approver = b.keys.create("approver", encrypt=False)
    shutil.copy(buyer / "keys" / "approver.pub", keys / "approver.pub")
    (buyer / "policy.toml").write_text(POLICY.format(
        name="buyer", keys="trust", vkeys=f'"{ledger.log.vkey}", "{b.log.vkey}"'))  # fmt: skip
    buyer_policy = TrustPolicy.from_toml((buyer / "policy.toml").read_bytes(), buyer)
    import_bundle(b, bundle, buyer_policy, approver)
    return home, buyer


def test_every_statement_trajledger_writes_is_strictly_valid(
    ledgers: tuple[Path, Path], record_property: Any
) -> None:
    vendor, buyer = ledgers
    seen: dict[str, int] = {}
    problems = []
    for home in (vendor, buyer):
        for kind, st in statements_of(home):
            seen[kind] = seen.get(kind, 0) + 1
            problems += [f"{home.name} {kind}: {p}" for p in strict_problems(st)]
    assert not problems, "\n".join(problems)
    assert set(seen) == set(KINDS), f"kinds never written here: {set(KINDS) - set(seen)}"
    # model_signing's own statement, inside the Sigstore bundle export wrote.
    bundle = json.loads((vendor.parent / "model" / "model.sig").read_text())
    ms = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    assert strict_problems(ms) == []
    n = sum(seen.values())
    counts = ", ".join(f"{k} {v}" for k, v in sorted(seen.items()))
    record_property(
        "summary:in-toto / SLSA strict validation",
        f"{n + 1} statements of {len(seen) + 1} kinds valid: {counts}, model_signing 1",
    )


def test_a_checkpoint_lists_its_model_files_after_its_identity(ledgers: tuple[Path, Path]) -> None:
    vendor, _ = ledgers
    ledger = Ledger.open(vendor)
    (st,) = [s for k, s in statements_of(vendor) if k == "checkpoint"]
    entry = next(
        LogEntry.from_bytes(r) for r in ledger.log.entries(0, ledger.log.size)
        if LogEntry.from_bytes(r).kind == "checkpoint"
    )  # fmt: skip
    first, *files = st["subject"]
    assert first == {"name": "grid-bc@1", "digest": {"sha256": entry.subject[7:]}}
    manifest = json.loads(ledger.store.get(entry.subject))
    assert files == [
        {"name": f["path"], "digest": f["digest"]} for f in manifest["files"]
    ] and {f["name"] for f in files} == {"policy.npz", "trainer.json"}
    for f in files:  # each model file's own digest, as sha256sum gives it
        assert ledger.store.get_verified("sha256:" + f["digest"]["sha256"])
    prov = st["predicate"]
    (metrics,) = prov["runDetails"]["byproducts"]
    assert json.loads(base64.b64decode(metrics["content"])) == metrics["annotations"]
    assert all(d["digest"]["sha256"] for d in prov["buildDefinition"]["resolvedDependencies"])


def test_the_validator_refuses_what_0_1_0_wrote(tmp_path: Path) -> None:
    """0.1.0's metrics byproduct had a name only: the strict validator says so (it can fail),
    while the record itself still verifies (test_compat)."""
    copy = tmp_path / "ledger"
    shutil.copytree(FIXTURES / "ledger", copy)
    found = [
        p for kind, st in statements_of(copy) if kind == "checkpoint"
        for p in strict_problems(st)
    ]  # fmt: skip
    assert found and all("byproducts[0]: none of uri, digest, content" in p for p in found)


MUTATIONS: list[tuple[Any, str]] = [
    (lambda s: s["subject"][0].pop("digest"), "a Statement v1 subject must have a digest"),
    (lambda s: s.update(extra=1), 'no field named "extra"'),
    (lambda s: s["predicate"]["runDetails"]["builder"].pop("id"),
     "runDetails.builder.id is required"),
    (lambda s: s["predicate"]["buildDefinition"].pop("buildType"),
     "buildDefinition.buildType is required"),
    (lambda s: s["predicate"]["buildDefinition"]["resolvedDependencies"][0].pop("digest"),
     "resolvedDependencies[0]: none of uri, digest, content"),
    (lambda s: s["predicate"]["runDetails"].update(byproducts=[{"name": "x", "contents": "eA=="}]),
     'no field named "contents"'),
    (lambda s: s["predicate"]["runDetails"]["byproducts"][0].update(content="not base64!"),
     "content is not base64"),
    (lambda s: s["subject"][1]["digest"].update(sha256="ABC"), "not 64 lowercase hex"),
    (lambda s: s["predicate"]["runDetails"]["metadata"].update(startedOn="yesterday"),
     "Provenance:"),
]


def test_the_validator_catches_each_rule(ledgers: tuple[Path, Path]) -> None:
    vendor, _ = ledgers
    (original,) = [s for k, s in statements_of(vendor) if k == "checkpoint"]
    for change, problem in MUTATIONS:
        st = json.loads(json.dumps(original))
        change(st)
        found = strict_problems(st)
        assert any(problem in p for p in found), (problem, found)
