"""in-toto Statement v1: strict parsing, and verify_statement's order of checks.

DESIGN §3 fixes the order: signature over the exact payload bytes, then payloadType, then parse,
then predicateType against an allow-list, then the subject digest. The attack tests below sign
honestly where the attack is in the content (the signature holds; a later check must refuse).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from trajledger.ledger.encode import envelope_bytes
from trajledger.ledger.keys import Signer
from trajledger.ledger.signing import (
    canonical_json,
    files_predicate,
    sign_statement,
    statement_bytes,
)
from trajledger.verify import predicates
from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE, Envelope, Signature, pae
from trajledger.verify.errors import DigestMismatchError, FormatError, PolicyError, SignatureError
from trajledger.verify.manifest import FileEntry, Manifest
from trajledger.verify.statement import STATEMENT_TYPE, Statement, Subject, verify_statement
from trajledger.verify.tree import manifest_from_statement

HEX_A = "a" * 64
HEX_B = "b" * 64
FILES = {predicates.FILES}


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate("vendor")


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return Manifest.from_files(
        [FileEntry("data/steps.parquet", 3, HEX_A), FileEntry("README.md", 5, HEX_B)]
    )


def statement_obj(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": "dataset", "digest": {"sha256": HEX_A}}],
        "predicateType": predicates.FILES,
        "predicate": {},
    }
    obj.update(changes)
    return obj


def sign_payload(
    signer: Signer, payload: bytes, payload_type: str = INTOTO_PAYLOAD_TYPE
) -> Envelope:
    sig = signer.sign(pae(payload_type, payload))
    return Envelope(payload, payload_type, (Signature(signer.keyid, sig),))


def sign_obj(signer: Signer, obj: dict[str, Any]) -> Envelope:
    return sign_payload(signer, canonical_json(obj))


def reparse(env: Envelope) -> Envelope:
    return Envelope.from_bytes(envelope_bytes(env))


# --- parsing ---------------------------------------------------------------------------------


def test_parse_minimal() -> None:
    st = Statement.from_bytes(canonical_json(statement_obj()))
    assert st.subjects == (Subject("dataset", HEX_A),)
    assert st.subjects[0].digest == "sha256:" + HEX_A
    assert st.predicate_type == predicates.FILES
    assert st.predicate == {}


def test_parse_predicate_defaults_to_empty() -> None:
    obj = statement_obj()
    del obj["predicate"]
    assert Statement.from_bytes(canonical_json(obj)).predicate == {}


def test_parse_other_digest_algorithms_alongside_sha256_are_kept_out() -> None:
    obj = statement_obj(subject=[{"name": "x", "digest": {"sha256": HEX_A, "sha512": "c" * 128}}])
    assert Statement.from_bytes(canonical_json(obj)).subjects == (Subject("x", HEX_A),)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"_type": "https://in-toto.io/Statement/v0.1"}, r"_type is 'https://in-toto\.io/"),
        ({"subject": []}, r"subject must be a non-empty list"),
        ({"subject": {"name": "x"}}, r"subject must be a non-empty list"),
        ({"subject": ["x"]}, r"subject 0 is not an object"),
        ({"subject": [{"digest": {"sha256": HEX_A}}]}, r"subject 0 has no name"),
        ({"subject": [{"name": "", "digest": {"sha256": HEX_A}}]}, r"subject 0 has no name"),
        ({"subject": [{"name": "x", "digest": {"sha512": HEX_A}}]}, r"'x' has no sha256 digest"),
        ({"subject": [{"name": "x", "digest": {"sha256": HEX_A.upper()}}]}, r"64 lowercase hex"),
        ({"subject": [{"name": "x", "digest": {"sha256": HEX_A[:-1]}}]}, r"64 lowercase hex"),
        ({"subject": [{"name": "x", "digest": "sha256:" + HEX_A}]}, r"has no sha256 digest"),
        (
            {"subject": [{"name": "x", "digest": {"sha256": HEX_A}}] * 2},
            r"subject name 'x' appears twice",
        ),
        ({"predicateType": ""}, r"predicateType must be a non-empty string"),
        ({"predicateType": 1}, r"predicateType must be a non-empty string"),
        ({"predicate": []}, r"predicate must be an object"),
    ],
)
def test_parse_refuses(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(FormatError, match=match):
        Statement.from_bytes(canonical_json(statement_obj(**changes)))


# --- verify_statement ------------------------------------------------------------------------


def test_verify_statement_made_by_the_writer(signer: Signer, manifest: Manifest) -> None:
    ptype, predicate = files_predicate(manifest)
    env = reparse(sign_statement([("dataset", manifest.digest)], ptype, predicate, [signer]))
    verified = verify_statement(
        env, [signer.public], allowed_predicate_types=FILES, subject_digest=manifest.digest
    )
    assert verified.signers == (signer.public,)
    assert manifest_from_statement(verified.statement) == manifest


def test_writer_output_is_canonical(manifest: Manifest) -> None:
    ptype, predicate = files_predicate(manifest)
    payload = statement_bytes([("dataset", manifest.digest)], ptype, predicate)
    assert payload == canonical_json(json.loads(payload))
    assert b" " not in payload


def test_verify_statement_p256_co_signed(signer: Signer) -> None:
    p = Signer.generate("p", "ecdsa-p256")
    env = reparse(sign_statement([("x", "sha256:" + HEX_A)], predicates.FILES, {}, [signer, p]))
    verified = verify_statement(
        env, [signer.public, p.public], allowed_predicate_types=FILES, threshold=2
    )
    assert {k.keyid for k in verified.signers} == {signer.keyid, p.keyid}


def test_order_signature_before_payload_type(signer: Signer) -> None:
    outsider = Signer.generate("outsider")
    env = sign_payload(outsider, canonical_json(statement_obj()), "application/json")
    with pytest.raises(SignatureError, match=r"no signature by a trusted key"):
        verify_statement(env, [signer.public], allowed_predicate_types=FILES)


def test_order_signature_before_parse(signer: Signer) -> None:
    outsider = Signer.generate("outsider")
    env = sign_payload(outsider, b"{ not json")
    with pytest.raises(SignatureError, match=r"no signature by a trusted key"):
        verify_statement(env, [signer.public], allowed_predicate_types=FILES)


def test_order_parse_before_predicate_type(signer: Signer) -> None:
    obj = statement_obj(predicateType="https://example.com/other", subject=[])
    with pytest.raises(FormatError, match=r"subject must be a non-empty list"):
        verify_statement(sign_obj(signer, obj), [signer.public], allowed_predicate_types=FILES)


def test_order_predicate_type_before_subject(signer: Signer) -> None:
    obj = statement_obj(predicateType="https://example.com/other")
    with pytest.raises(PolicyError):
        verify_statement(
            sign_obj(signer, obj),
            [signer.public],
            allowed_predicate_types=FILES,
            subject_digest="sha256:" + HEX_B,
        )


# --- attacks: one test each ------------------------------------------------------------------


def test_attack_signature_wrapping(signer: Signer) -> None:
    """A valid signature over statement X carried with statement Y."""
    good = sign_obj(signer, statement_obj())
    evil = canonical_json(statement_obj(subject=[{"name": "x", "digest": {"sha256": HEX_B}}]))
    env = reparse(Envelope(evil, good.payload_type, good.signatures))
    with pytest.raises(SignatureError, match=r"envelope: invalid signature by key"):
        verify_statement(env, [signer.public], allowed_predicate_types=FILES)


def test_attack_wrong_payload_type_after_valid_signature(signer: Signer) -> None:
    env = sign_payload(signer, canonical_json(statement_obj()), "application/json")
    with pytest.raises(FormatError, match=r"envelope: payloadType is 'application/json'"):
        verify_statement(env, [signer.public], allowed_predicate_types=FILES)


def test_attack_predicate_type_not_allowed(signer: Signer) -> None:
    """A valid approval presented where a files attestation is required."""
    env = sign_obj(signer, statement_obj(predicateType=predicates.APPROVAL))
    with pytest.raises(
        PolicyError,
        match=r"predicateType 'https://trajledger\.dev/attestation/approval/v1' is not allowed",
    ):
        verify_statement(env, [signer.public], allowed_predicate_types=FILES)


def test_attack_subject_is_another_artifact(signer: Signer) -> None:
    env = sign_obj(signer, statement_obj())
    with pytest.raises(
        DigestMismatchError,
        match=r"the first subject \(the artifact\) is sha256:a{64}, want sha256:b{64}$",
    ):
        verify_statement(
            env, [signer.public], allowed_predicate_types=FILES, subject_digest="sha256:" + HEX_B
        )


def test_attack_duplicate_json_keys_in_payload(signer: Signer) -> None:
    text = canonical_json(statement_obj()).decode()
    dup = text.replace('"predicateType":', '"predicateType":"x","predicateType":', 1)
    env = sign_payload(signer, dup.encode())
    with pytest.raises(FormatError, match=r"statement: duplicate JSON key 'predicateType'"):
        verify_statement(env, [signer.public], allowed_predicate_types=FILES)


def test_attack_nan_in_payload(signer: Signer) -> None:
    text = canonical_json(statement_obj()).replace(b'"predicate":{}', b'"predicate":{"r":NaN}')
    env = sign_payload(signer, text)
    with pytest.raises(FormatError, match=r"statement: NaN is not valid JSON"):
        verify_statement(env, [signer.public], allowed_predicate_types=FILES)


def test_attack_bom_in_payload(signer: Signer) -> None:
    env = sign_payload(signer, b"\xef\xbb\xbf" + canonical_json(statement_obj()))
    with pytest.raises(FormatError, match=r"statement: starts with a UTF-8 byte-order mark"):
        verify_statement(env, [signer.public], allowed_predicate_types=FILES)


def test_attack_invalid_utf8_in_payload(signer: Signer) -> None:
    payload = canonical_json(statement_obj()).replace(b'"dataset"', b'"data\xffset"')
    env = sign_payload(signer, payload)
    with pytest.raises(FormatError, match=r"statement: not valid UTF-8 at byte \d+"):
        verify_statement(env, [signer.public], allowed_predicate_types=FILES)


def test_attack_payload_not_an_object(signer: Signer) -> None:
    env = sign_payload(signer, b"[]")
    with pytest.raises(FormatError, match=r"statement: top level is list, want an object"):
        verify_statement(env, [signer.public], allowed_predicate_types=FILES)
