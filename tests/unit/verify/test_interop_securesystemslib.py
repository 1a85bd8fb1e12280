"""Interop with an independent DSSE implementation: securesystemslib (>= 1.0).

trajledger -> securesystemslib: an envelope from ``ledger.signing.sign_statement``, written as
bytes, read by ``securesystemslib.dsse.Envelope.from_dict`` and verified with an ``SSlibKey``.
securesystemslib matches a signature to a key only by keyid (its own Envelope.verify docstring
says so), so the key is built with trajledger's keyid: hex SHA-256 of the SPKI DER.

securesystemslib -> trajledger: an envelope signed by a ``CryptoSigner`` whose keyid is
securesystemslib's default (a hash of its own key JSON, not ours), serialised with ``to_dict``
and verified by ``verify.dsse.verify_envelope``: the keyid names no trusted key, so it is an
unauthenticated hint and every trusted key is tried (SPEC.md, "DSSE envelope").
"""

from __future__ import annotations

import json

import pytest
import securesystemslib.exceptions as sslib_exceptions
import securesystemslib.signer as sslib_signer
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from securesystemslib import dsse

from trajledger.ledger.encode import envelope_bytes
from trajledger.ledger.keys import Signer
from trajledger.ledger.signing import files_predicate, sign_statement
from trajledger.verify import predicates
from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE, Envelope, Signature, pae, verify_envelope
from trajledger.verify.errors import SignatureError
from trajledger.verify.keys import PublicKey
from trajledger.verify.manifest import FileEntry, Manifest
from trajledger.verify.statement import verify_statement
from trajledger.verify.tree import manifest_from_statement

ALGS = ["ed25519", "ecdsa-p256"]


def _private(alg: str) -> ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey:
    if alg == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    return ec.generate_private_key(ec.SECP256R1())


def _manifest() -> Manifest:
    return Manifest.from_files([FileEntry("data/steps.parquet", 3, "a" * 64)])


def _trajledger_envelope(signer: Signer) -> bytes:
    m = _manifest()
    ptype, predicate = files_predicate(m)
    return envelope_bytes(sign_statement([("dataset", m.digest)], ptype, predicate, [signer]))


@pytest.mark.parametrize("alg", ALGS)
def test_trajledger_envelope_verifies_with_securesystemslib(alg: str) -> None:
    private = _private(alg)
    signer = Signer.from_private("vendor", private)
    data = _trajledger_envelope(signer)

    env = dsse.Envelope.from_dict(json.loads(data))
    key = sslib_signer.SSlibKey.from_crypto(private.public_key(), keyid=signer.keyid)
    expected_scheme = "ed25519" if alg == "ed25519" else "ecdsa-sha2-nistp256"
    assert key.scheme == expected_scheme
    accepted = env.verify([key], 1)
    assert list(accepted) == [signer.keyid]
    assert env.payload_type == INTOTO_PAYLOAD_TYPE
    # Both implementations compute the same PAE over the same payload bytes.
    assert env.pae() == pae(INTOTO_PAYLOAD_TYPE, Envelope.from_bytes(data).payload)


@pytest.mark.parametrize("alg", ALGS)
def test_securesystemslib_refuses_tampered_trajledger_envelope(alg: str) -> None:
    private = _private(alg)
    signer = Signer.from_private("vendor", private)
    obj = json.loads(_trajledger_envelope(signer))
    obj["payloadType"] = "application/json"
    env = dsse.Envelope.from_dict(obj)
    key = sslib_signer.SSlibKey.from_crypto(private.public_key(), keyid=signer.keyid)
    with pytest.raises(sslib_exceptions.VerificationError):
        env.verify([key], 1)


def _securesystemslib_envelope(private: object, payload: bytes) -> tuple[bytes, str]:
    crypto_signer = sslib_signer.CryptoSigner(private)  # default securesystemslib keyid
    env = dsse.Envelope(payload, INTOTO_PAYLOAD_TYPE, {})
    env.sign(crypto_signer)
    return json.dumps(env.to_dict()).encode(), crypto_signer.public_key.keyid


@pytest.mark.parametrize("alg", ALGS)
def test_securesystemslib_envelope_verifies_with_trajledger(alg: str) -> None:
    private = _private(alg)
    m = _manifest()
    ptype, predicate = files_predicate(m)
    subject = {"name": "dataset", "digest": {"sha256": m.digest.removeprefix("sha256:")}}
    payload = json.dumps(
        {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [subject],
            "predicateType": ptype,
            "predicate": predicate,
        },
        indent=2,  # not canonical: the verifier never re-serialises, any bytes will do
    ).encode()
    data, sslib_keyid = _securesystemslib_envelope(private, payload)

    trusted = Signer.from_private("vendor", private).public
    assert sslib_keyid != trusted.keyid
    env = Envelope.from_bytes(data)
    assert env.payload == payload
    # A keyid naming no trusted key narrows the keys tried to none (DSSE allows the hint to
    # narrow, never to widen): the envelope must carry trajledger's keyid to count.
    with pytest.raises(SignatureError, match=r"no signature by a trusted key: 0 of 1"):
        verify_envelope(env, [trusted])
    resigned = (Signature(trusted.keyid, env.signatures[0].sig),)
    rekeyed = Envelope(env.payload, env.payload_type, resigned)
    assert verify_envelope(rekeyed, [trusted]) == (trusted,)
    verified = verify_statement(
        rekeyed, [trusted], allowed_predicate_types={predicates.FILES}, subject_digest=m.digest
    )
    assert manifest_from_statement(verified.statement) == m


@pytest.mark.parametrize("alg", ALGS)
def test_securesystemslib_envelope_with_our_keyid(alg: str) -> None:
    private = _private(alg)
    trusted = Signer.from_private("vendor", private).public
    key = sslib_signer.SSlibKey.from_crypto(private.public_key(), keyid=trusted.keyid)
    env = dsse.Envelope(b"hello", INTOTO_PAYLOAD_TYPE, {})
    env.sign(sslib_signer.CryptoSigner(private, key))
    parsed = Envelope.from_bytes(json.dumps(env.to_dict()).encode())
    assert parsed.signatures[0].keyid == trusted.keyid
    assert verify_envelope(parsed, [trusted]) == (trusted,)


@pytest.mark.parametrize("alg", ALGS)
def test_securesystemslib_envelope_by_untrusted_key_is_refused(alg: str) -> None:
    data, _ = _securesystemslib_envelope(_private(alg), b"hello")
    other = Signer.generate("other", alg).public
    with pytest.raises(SignatureError, match=r"no signature by a trusted key"):
        verify_envelope(Envelope.from_bytes(data), [other])


def test_public_keys_agree() -> None:
    """securesystemslib reads the PEM trajledger writes as the same key."""
    private = ed25519.Ed25519PrivateKey.generate()
    ours = PublicKey.from_pem(Signer.from_private("k", private).public.to_pem())
    theirs = sslib_signer.SSlibKey.from_crypto(private.public_key(), keyid=ours.keyid)
    assert theirs.keyval["public"] == ours.raw_ed25519().hex()
