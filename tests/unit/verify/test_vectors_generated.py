"""Run the named vectors of tests/vectors/{note,checkpoint,tlog-proof} and check they are fresh.

Each vector names the error class it expects (or null) and a pattern for the message. The
files are regenerated in memory by tests/vectors/generate.py and must equal the committed ones.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import trajledger.verify.errors as errors
from trajledger.ledger.encode import checkpoint_text, tlog_proof_bytes
from trajledger.verify.checkpoint import verify_checkpoint
from trajledger.verify.consistency import check_consistent
from trajledger.verify.cosignatures import verify_cosignatures
from trajledger.verify.note import Note, verifier_from_vkey, verify_note
from trajledger.verify.tlog_proof import TlogProof, verify_tlog_proof

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
GROUPS = ("note", "checkpoint", "tlog-proof")


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "trajledger_vectors_generate", VECTORS / "generate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _cases(group: str) -> list[Any]:
    return [
        pytest.param(json.loads(p.read_text(encoding="utf-8")), id=p.stem)
        for p in sorted((VECTORS / group).glob("*.json"))
    ]


def _expect(case: dict[str, Any]) -> Any:
    """A context manager asserting the case's expected error (or none)."""
    name = case["expected_error"]
    if name is None:
        return contextlib.nullcontext()
    cls = getattr(errors, name)
    return pytest.raises(cls, match=case["expected_message"])


def _note_bytes(case: dict[str, Any]) -> bytes:
    if "note_b64" in case:
        return base64.b64decode(case["note_b64"])
    return str(case["note"]).encode()


def test_vectors_are_regenerated_identically() -> None:
    generator = _load_generator()
    want = generator.generate()
    have = {f"{g}/{p.name}": p.read_bytes() for g in GROUPS for p in (VECTORS / g).glob("*.json")}
    assert sorted(have) == sorted(want), "run: python tests/vectors/generate.py"
    stale = [name for name in want if have[name] != want[name]]
    assert not stale, f"stale vectors (run tests/vectors/generate.py): {stale}"


def test_every_group_has_negative_and_positive_cases() -> None:
    for group in GROUPS:
        cases = [json.loads(p.read_text()) for p in (VECTORS / group).glob("*.json")]
        assert any(c["expected_error"] is None for c in cases), group
        assert sum(c["expected_error"] is not None for c in cases) >= 10, group
        for c in cases:
            assert c["description"]
            if c["expected_error"] is not None:
                assert c["expected_message"]


@pytest.mark.parametrize("case", _cases("note"))
def test_note_vector(case: dict[str, Any]) -> None:
    with _expect(case):  # (a vkey may be what is refused)
        verifiers = [verifier_from_vkey(v) for v in case["vkeys"]]
        names = verify_note(_note_bytes(case), verifiers)
        assert names == case["expected_names"]


@pytest.mark.parametrize("case", _cases("checkpoint"))
def test_checkpoint_vector(case: dict[str, Any]) -> None:
    log = verifier_from_vkey(case["vkey"])
    check = case["check"]
    if check == "verify_checkpoint":
        with _expect(case):
            cp = verify_checkpoint(_note_bytes(case), log, origin=case["origin"])
            assert checkpoint_text(cp) == Note.from_bytes(_note_bytes(case)).text
    elif check == "verify_cosignatures":
        witnesses = [verifier_from_vkey(v) for v in case["witness_vkeys"]]
        note = _note_bytes(case)
        verify_checkpoint(note, log)
        with _expect(case):
            found = verify_cosignatures(
                note, witnesses, threshold=case["threshold"], not_after=case["not_after"]
            )
            assert sorted(found) == sorted(case["expected_witnesses"])
    else:
        assert check == "check_consistent"
        old = verify_checkpoint(case["old_note"].encode(), log)
        new = verify_checkpoint(case["new_note"].encode(), log)
        proof = [base64.b64decode(h) for h in case["proof_b64"]]
        with _expect(case) as raised:
            check_consistent(old, new, proof)
        if raised is not None:
            err = raised.value
            assert isinstance(err, errors.ConsistencyError)
            assert (err.old, err.new, err.proof) == (old, new, proof)


@pytest.mark.parametrize("case", _cases("tlog-proof"))
def test_tlog_proof_vector(case: dict[str, Any]) -> None:
    log = verifier_from_vkey(case["vkey"])
    data = case["proof"].encode()
    entry = base64.b64decode(case["entry_b64"])
    with _expect(case):
        cp = verify_tlog_proof(data, entry, log, origin=case["origin"])
        assert tlog_proof_bytes(TlogProof.from_bytes(data)) == data
        assert cp.origin == case["origin"]
