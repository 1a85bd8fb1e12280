"""verify/sigstore_adapter.py: parsing hostile bundles, key mode, pinned certificates, keyids.

Keyless verification is covered by the conformance cases and the private-instance tests in
tests/interop/; this file needs nothing but ``cryptography``.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from trajledger.ledger.keys import Signer
from trajledger.ledger.signing import sign_statement
from trajledger.ledger.sigstore_export import envelope_signature_bundle
from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE, Envelope, Signature, pae
from trajledger.verify.errors import FormatError, SignatureError
from trajledger.verify.keys import Identity, PublicKey
from trajledger.verify.policy import TrustPolicy, policy_digest
from trajledger.verify.sigstore_adapter import (
    BUNDLE_MEDIA_TYPE,
    SigstoreBundle,
    bundle_keyid,
    certificate_identity,
    identity_signers,
    public_key_hint,
    trusted_root_bytes,
    verify_envelope_signature,
    verify_sigstore_bundle,
)

D = "sha256:" + "ab" * 32


def _signed(*signers: Signer) -> Envelope:
    return sign_statement([("x", D)], "https://trajledger.dev/attestation/files/v1", {}, signers)


def _bundle(envelope: Envelope, i: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(envelope_signature_bundle(envelope, envelope.signatures[i]))
    return out


def _bytes(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode()


def test_public_key_hint_known_answer() -> None:
    # RFC 8032 test 1 public key; its keyid is in schemas/SPEC.md ("Key identifiers").
    spki = bytes.fromhex(
        "302a300506032b6570032100d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    )
    key = PublicKey.from_der(spki)
    assert key.keyid == "06e3fd8fda29bb60ab59557de61edb0aecdb231134be30e75b455f8e1b792fa9"
    assert public_key_hint(key) == base64.b64encode(bytes.fromhex(key.keyid)).decode()
    assert public_key_hint(key) == "BuP9j9opu2CrWVV95h7bCuzbIxE0vjDnW0Vfjht5L6k="
    assert bundle_keyid(b"{}") == hashlib.sha256(b"{}").hexdigest()


@pytest.mark.parametrize("alg", ["ed25519", "ecdsa-p256"])
def test_key_mode_round_trip_and_tampering(alg: str) -> None:
    signer = Signer.generate("k", alg)
    env = _signed(signer)
    data = envelope_signature_bundle(env, env.signatures[0])
    expected = (env.payload_type, env.payload)
    v = verify_sigstore_bundle(data, keys=[signer.public], expected_payload=expected)
    assert (v.mode, v.signer.keyid, v.payload, v.notes) == ("key", signer.keyid, env.payload, ())
    other = Signer.generate("o", alg)
    with pytest.raises(SignatureError, match="that is none of the 1 trusted key"):
        verify_sigstore_bundle(data, keys=[other.public], expected_payload=expected)
    with pytest.raises(SignatureError, match="and no key is trusted"):
        verify_sigstore_bundle(data, expected_payload=expected)
    # The payload changed (and re-encoded): the key its hint names no longer verifies it.
    obj = _bundle(env)
    obj["dsseEnvelope"]["payload"] = base64.b64encode(env.payload + b" ").decode()
    with pytest.raises(SignatureError, match="invalid signature by the key its hint names"):
        verify_sigstore_bundle(_bytes(obj), keys=[signer.public], artifact_digest=D)
    with pytest.raises(SignatureError, match="signs a different payload than the envelope's"):
        verify_sigstore_bundle(_bytes(obj), keys=[signer.public], expected_payload=expected)
    with pytest.raises(SignatureError, match="carries a different signature"):
        verify_sigstore_bundle(
            data, keys=[signer.public], expected_payload=expected, expected_signature=b"x"
        )
    # A wrong subject for the artifact digest.
    with pytest.raises(SignatureError, match="no subject of the signed statement has sha256 cd"):
        verify_sigstore_bundle(data, keys=[signer.public], artifact_digest="sha256:" + "cd" * 32)
    assert verify_sigstore_bundle(data, keys=[signer.public], artifact_digest=D).mode == "key"


def test_message_signatures_in_key_mode() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    pub = PublicKey.from_pem(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    artifact = b"the artifact"
    digest = hashlib.sha256(artifact).digest()
    from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

    sig = key.sign(digest, ec.ECDSA(Prehashed(hashes.SHA256())))
    obj = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": public_key_hint(pub)}},
        "messageSignature": {
            "messageDigest": {"algorithm": "SHA2_256", "digest": base64.b64encode(digest).decode()},
            "signature": base64.b64encode(sig).decode(),
        },
    }
    want = "sha256:" + digest.hex()
    assert verify_sigstore_bundle(_bytes(obj), keys=[pub], artifact_digest=want).mode == "key"
    with pytest.raises(SignatureError, match=r"signs sha256:.*want sha256:"):
        verify_sigstore_bundle(_bytes(obj), keys=[pub], artifact_digest=D)
    with pytest.raises(SignatureError, match="needs the artifact"):
        verify_sigstore_bundle(_bytes(obj), keys=[pub])
    with pytest.raises(SignatureError, match="want a DSSE envelope"):
        verify_sigstore_bundle(_bytes(obj), keys=[pub], expected_payload=("t", b""))
    del obj["messageSignature"]["messageDigest"]  # optional: the signature still binds it
    with pytest.raises(SignatureError, match="invalid signature by the key its hint names"):
        verify_sigstore_bundle(_bytes(obj), keys=[pub], artifact_digest=D)
    # Ed25519 signs whole messages: a bundle carrying only a digest cannot be checked.
    ed = Signer.generate("e")
    with pytest.raises(SignatureError):
        verify_sigstore_bundle(_bytes(obj), keys=[ed.public], artifact_digest=want)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b.update(extra=1), "unknown field"),
        (lambda b: b.update(mediaType="application/vnd.dev.sigstore.bundle.v9+json"), "mediaType"),
        (lambda b: b.update(messageSignature={"signature": "AA=="}), "exactly one of dsseEnvelope"),
        (lambda b: b.pop("dsseEnvelope"), "exactly one of dsseEnvelope"),
        (lambda b: b["verificationMaterial"].update(certificate={"rawBytes": "AA=="}),
         "exactly one of publicKey, certificate"),
        (lambda b: b["verificationMaterial"].pop("publicKey"), "it holds none"),
        (lambda b: b["verificationMaterial"].update(x=[]), "verificationMaterial has unknown"),
        (lambda b: b["dsseEnvelope"]["signatures"].append({"sig": "AA=="}),
         "exactly one signature, not 2"),
        (lambda b: b["dsseEnvelope"].update(payload="%%%"), "payload: is not valid base64"),
        (lambda b: b["dsseEnvelope"]["signatures"][0].update(sig=""), "signature is empty"),
        (lambda b: b["verificationMaterial"].update(tlogEntries={}), "tlogEntries must be a list"),
        # A message signature over a digest that is not SHA-256 (sig5): refused when parsed.
        (lambda b: (b.pop("dsseEnvelope"), b.update(messageSignature={"signature": "AA==",
         "messageDigest": {"algorithm": "SHA2_512", "digest": "AA=="}})),
         "messageDigest algorithm 'SHA2_512', want SHA2_256"),
        (lambda b: (b.pop("dsseEnvelope"), b.update(messageSignature={"signature": "AA==",
         "messageDigest": {"algorithm": "SHA2_256", "digest": "AA=="}})),
         "messageDigest is 1 bytes, want 32"),
    ],
)  # fmt: skip
def test_malformed_bundles_are_refused(mutate: Any, message: str) -> None:
    signer = Signer.generate("k")
    obj = _bundle(_signed(signer))
    mutate(obj)
    with pytest.raises(FormatError, match=message):
        verify_sigstore_bundle(_bytes(obj), keys=[signer.public], artifact_digest=D)


def test_bundle_bytes_are_checked_before_parsing() -> None:
    with pytest.raises(FormatError, match="duplicate JSON key 'mediaType'"):
        SigstoreBundle.from_bytes(b'{"mediaType": "a", "mediaType": "b"}')
    with pytest.raises(FormatError, match="more than"):
        SigstoreBundle.from_bytes(b" " * (64 << 20 | 1))
    with pytest.raises(FormatError, match="top level is list"):
        SigstoreBundle.from_bytes(b"[]")


def _cert(
    key: ec.EllipticCurvePrivateKey, *, sign_usage: bool, san: str = "a@example.com"
) -> bytes:
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "t")])
    usage = x509.KeyUsage(sign_usage, False, False, False, False, not sign_usage, False, False,
                          False)  # fmt: skip
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(7)
        .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.RFC822Name(san)]), critical=False)
        .add_extension(x509.UnrecognizedExtension(
            x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8"), b"\x0c\x14https://issuer.test/"
        ), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    return cert.public_bytes(serialization.Encoding.DER)


def _cert_bundle(env: Envelope, cert: bytes) -> bytes:
    obj = _bundle(env)
    obj["verificationMaterial"] = {
        "x509CertificateChain": {"certificates": [{"rawBytes": base64.b64encode(cert).decode()}]},
        "tlogEntries": [],
    }
    return _bytes(obj)


def test_pinned_certificates() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    signer = Signer.from_private("c", key)
    env = _signed(signer)
    good = _cert_bundle(env, _cert(key, sign_usage=True))
    v = verify_sigstore_bundle(good, keys=[signer.public], artifact_digest=D)
    assert (v.mode, v.signer.keyid) == ("pinned-certificate", signer.keyid)
    assert v.notes == (
        "certificate chain not checked against a CA: the policy pins the certificate's key",
    )
    assert certificate_identity(_cert(key, sign_usage=True)) == (
        "a@example.com",
        "https://issuer.test/",
    )
    with pytest.raises(SignatureError, match=r"whose key .* is none of the 1 trusted key"):
        verify_sigstore_bundle(good, keys=[Signer.generate("x").public], artifact_digest=D)
    # Identities do not make a certificate without a log count: only a pinned key does.
    with pytest.raises(SignatureError, match="none of the 0 trusted key"):
        verify_sigstore_bundle(
            good, identities=[Identity("https://issuer.test/", "a@example.com")], artifact_digest=D
        )
    no_sign = _cert_bundle(env, _cert(key, sign_usage=False))
    with pytest.raises(SignatureError, match="may not sign"):
        verify_sigstore_bundle(no_sign, keys=[signer.public], artifact_digest=D)


def test_identity_signers_skip_keys_and_report_bad_bundles() -> None:
    signer = Signer.generate("k")
    bogus = b'{"not": "a bundle"}'
    env = _signed(signer)
    env = Envelope(
        env.payload, env.payload_type, (*env.signatures, Signature(bundle_keyid(bogus), b"sig"))
    )
    blobs = {"sha256:" + bundle_keyid(bogus): bogus}
    found, notes = identity_signers(env, blobs.get, [Identity("i", "s")])
    assert found == frozenset()
    assert len(notes) == 1 and "unknown field(s) not" in notes[0]  # the key signature: skipped
    with pytest.raises(SignatureError, match="does not name this Sigstore bundle"):
        verify_envelope_signature(env, env.signatures[1], b"{}", identities=[Identity("i", "s")])
    # A key-mode bundle is not a keyless signature, even when it verifies.
    key_bundle = envelope_signature_bundle(env, env.signatures[0])
    sig = Signature(bundle_keyid(key_bundle), env.signatures[0].sig)
    with pytest.raises(SignatureError, match="and no key is trusted"):
        verify_envelope_signature(env, sig, key_bundle, identities=[Identity("i", "s")])


def test_a_policy_names_a_trusted_root(tmp_path: Path) -> None:
    root = {"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1", "tlogs": []}
    (tmp_path / "root.json").write_text(json.dumps(root))
    toml = b'sigstore_trusted_root = "root.json"\n'
    policy = TrustPolicy.from_toml(toml, tmp_path)
    assert policy.sigstore_trusted_root == root
    assert json.loads(trusted_root_bytes(policy.sigstore_trusted_root) or b"") == root
    again = TrustPolicy.from_json(policy.to_json())
    assert again.sigstore_trusted_root == root and policy_digest(again) == policy_digest(policy)
    assert policy_digest(policy) != policy_digest(TrustPolicy.from_toml(b"", tmp_path))
    assert trusted_root_bytes(TrustPolicy.from_toml(b"", tmp_path).sigstore_trusted_root) is None
    (tmp_path / "bad.json").write_text('{"mediaType": "application/json"}')
    with pytest.raises(FormatError, match="is not a Sigstore trusted root"):
        TrustPolicy.from_toml(b'sigstore_trusted_root = "bad.json"\n', tmp_path)
    with pytest.raises(FormatError, match="cannot read"):
        TrustPolicy.from_toml(b'sigstore_trusted_root = "missing.json"\n', tmp_path)
    with pytest.raises(FormatError, match=r"must be a path to a trusted_root\.json"):
        TrustPolicy.from_json(policy.to_json() | {"sigstore_trusted_root": "root.json"})


def test_pae_is_the_dsse_one() -> None:
    # What key-mode verification signs over: the same PAE as our envelopes.
    assert pae(INTOTO_PAYLOAD_TYPE, b"") == b"DSSEv1 28 application/vnd.in-toto+json 0 "


def test_a_dsse_bundle_of_another_payload_type_signs_no_artifact() -> None:
    """DSSE: a verifier rejects a payloadType it does not expect. A key-mode bundle whose
    envelope (validly signed) says ``application/x-other`` over bytes that read as an in-toto
    statement naming the artifact verified as a signature of it (rev5); only an in-toto
    payload names subjects."""
    signer = Signer.generate("k")
    statement = json.dumps({"_type": "https://in-toto.io/Statement/v1", "subject": [
        {"name": "x", "digest": {"sha256": D[7:]}}], "predicateType": "p", "predicate": {}})
    for ptype in ("application/x-other", INTOTO_PAYLOAD_TYPE):
        payload = statement.encode()
        env = Envelope(payload, ptype, (Signature(signer.keyid, signer.sign(pae(ptype, payload))),))
        data = envelope_signature_bundle(env, env.signatures[0])
        if ptype == INTOTO_PAYLOAD_TYPE:
            assert verify_sigstore_bundle(data, keys=[signer.public], artifact_digest=D)
            continue
        with pytest.raises(FormatError, match=re.escape(
                "payloadType 'application/x-other', want 'application/vnd.in-toto+json'")):
            verify_sigstore_bundle(data, keys=[signer.public], artifact_digest=D)


def test_the_signing_times_sigstore_verified_are_read_to_the_second_or_refused() -> None:
    """A keyless signature's times (`BundleSigner.signed_at`), which a revoked identity is
    judged by: each of sigstore's verified times, in UTC, to the second below (a compromise
    at 12:00:00 covers a timestamp at 12:00:00.9), named by source; none readable (another
    sigstore, or none established) refuses the signature rather than judging it by the log's
    time alone."""
    from types import SimpleNamespace

    from trajledger.verify.sigstore_adapter import _verified_times

    plus2 = dt.timezone(dt.timedelta(hours=2))
    times = [
        SimpleNamespace(source=SimpleNamespace(name="TIMESTAMP_AUTHORITY"),
                        time=dt.datetime(2026, 1, 2, 14, 0, 0, 900000, tzinfo=plus2)),
        SimpleNamespace(source=SimpleNamespace(name="TRANSPARENCY_SERVICE"),
                        time=dt.datetime(2026, 1, 2, 12, 0, 5)),  # naive: UTC
    ]
    verifier = SimpleNamespace(_establish_time=lambda bundle: times)
    assert _verified_times(verifier, None, "b") == (
        ("2026-01-02T12:00:00Z", "a signed timestamp's genTime"),
        ("2026-01-02T12:00:05Z", "Rekor's integrated time"),
    )
    for v in (SimpleNamespace(), SimpleNamespace(_establish_time=lambda bundle: [])):
        with pytest.raises(SignatureError, match=r"^b: the sigstore package verified no signing "):
            _verified_times(v, None, "b")
