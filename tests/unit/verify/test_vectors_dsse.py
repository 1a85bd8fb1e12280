"""Run every vector in tests/vectors/{dsse,statement,manifest}/, and check that
tests/vectors/generate_dsse.py regenerates exactly the committed files.

To refresh after an intended change: ``python tests/vectors/generate_dsse.py``, then review the
diff. P-256 signatures are reused from the committed files (ECDSA is randomised), so only cases
whose signed content changed get new ones.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import trajledger.verify.errors as verify_errors
from trajledger.verify.dsse import Envelope, pae, verify_envelope
from trajledger.verify.keys import PublicKey
from trajledger.verify.manifest import Manifest
from trajledger.verify.statement import verify_statement
from trajledger.verify.strict_json import load_object
from trajledger.verify.tree import manifest_from_statement

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
DIRS = ("dsse", "statement", "manifest")
CASES = sorted(p for d in DIRS for p in (VECTORS / d).glob("*.json"))


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_dsse", VECTORS / "generate_dsse.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("generate_dsse", module)
    spec.loader.exec_module(module)
    return module


def _bytes(case: dict[str, Any], name: str) -> bytes:
    if f"{name}_base64" in case:
        return base64.b64decode(case[f"{name}_base64"], validate=True)
    return str(case[name]).encode("utf-8")


def _keys(case: dict[str, Any]) -> list[PublicKey]:
    keys = []
    for k in case["trusted_keys"]:
        key = PublicKey.from_pem(k["public_key_pem"].encode())
        assert (key.keyid, key.algorithm) == (k["keyid"], k["algorithm"]), k["name"]
        keys.append(key)
    return keys


def _run(case: dict[str, Any]) -> Any:
    kind = case["kind"]
    if kind == "pae":
        return pae(case["payload_type"], case["payload"].encode("utf-8")).decode("utf-8")
    if kind == "envelope":
        env = Envelope.from_bytes(_bytes(case, "envelope"))
        signers = verify_envelope(
            env, _keys(case), threshold=case["threshold"], payload_type=case["payload_type"]
        )
        return [k.keyid for k in signers]
    if kind == "statement":
        env = Envelope.from_bytes(_bytes(case, "envelope"))
        verified = verify_statement(
            env,
            _keys(case),
            allowed_predicate_types=set(case["allowed_predicate_types"]),
            threshold=case["threshold"],
            subject_digest=case["subject_digest"],
        )
        if case["check_manifest"]:
            return manifest_from_statement(verified.statement).digest
        return None
    if kind == "manifest":
        m = Manifest.from_json(load_object(_bytes(case, "manifest"), "manifest"))
        return m.canonical_bytes().decode("utf-8"), m.digest
    raise AssertionError(f"unknown vector kind {kind!r}")


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_vector(path: Path) -> None:
    case = json.loads(path.read_text("utf-8"))
    assert path.parent.name in DIRS
    assert isinstance(case["description"], str) and case["description"]
    error = case["expected_error"]
    if error is None:
        got = _run(case)
        if case["kind"] == "pae":
            assert got == case["expected_pae"]
        elif case["kind"] == "envelope":
            assert got == case["expected_signers"]
        elif case["kind"] == "statement":
            assert got == case["expected_manifest_digest"]
        else:
            assert got == (case["expected_canonical"], case["expected_digest"])
        return
    exc_type = getattr(verify_errors, error)
    with pytest.raises(exc_type, match=case["expected_error_match"]) as e:
        _run(case)
    # Exactly the named class: a subclass would be a different verdict (e.g. exit code).
    assert type(e.value) is exc_type


def test_required_vectors_exist() -> None:
    names = {p.stem for p in CASES}
    for required in (
        "pae-known-answer",
        "wrong-payload-type",
        "duplicate-key",
        "bad-base64",
        "urlsafe-base64-accepted",
        "unknown-field",
        "empty-signatures",
        "sig-bit-flip",
        "wrong-key",
        "p256-valid",
        "subject-missing-sha256",
        "path-traversal",
        "unsorted-paths",
        "size-over-2^53",
    ):
        assert required in names


def test_pae_known_answer_vector_is_the_dsse_spec_one() -> None:
    case = json.loads((VECTORS / "dsse" / "pae-known-answer.json").read_text())
    assert case["expected_pae"] == "DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def test_regeneration_matches_committed_files() -> None:
    generated = _generator().generate(VECTORS)
    committed = {
        f"{p.parent.name}/{p.name}": p.read_bytes()
        for d in DIRS
        for p in (VECTORS / d).glob("*.json")
    }
    assert sorted(generated) == sorted(committed), "run python tests/vectors/generate_dsse.py"
    stale = [name for name in generated if generated[name] != committed[name]]
    assert not stale, f"vectors differ from the generator: {stale}"


def test_p256_signatures_are_reused_not_regenerated() -> None:
    """The committed P-256 signatures are the ones the generator emits (ECDSA is randomised)."""
    case = json.loads((VECTORS / "dsse" / "p256-valid.json").read_text())
    committed_sig = Envelope.from_bytes(_bytes(case, "envelope")).signatures[0].sig
    again = json.loads(_generator().generate(VECTORS)["dsse/p256-valid.json"])
    assert Envelope.from_bytes(_bytes(again, "envelope")).signatures[0].sig == committed_sig


def test_error_names_are_verify_errors() -> None:
    for path in CASES:
        error = json.loads(path.read_text())["expected_error"]
        assert error is None or re.fullmatch(r"[A-Z][A-Za-z]+Error", error), path
        assert error is None or hasattr(verify_errors, error), path
