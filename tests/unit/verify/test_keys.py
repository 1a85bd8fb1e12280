"""Public keys and keyids: known answers computed without trajledger, algorithm allow-list,
signature encodings; and the keys-at-rest format SPEC.md describes (ledger/keys.py).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
import testkit
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa, x25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from trajledger.ledger.errors import KeyError_
from trajledger.ledger.keys import PASSPHRASE_ENV, KeyStore, Signer
from trajledger.verify.errors import FormatError
from trajledger.verify.keys import ALGORITHMS, PublicKey, keyid_of_spki

# TEST ONLY keys. RFC 8032 section 7.1 test 1: secret and public key.
RFC8032_SECRET = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
# RFC 6979 appendix A.2.5: P-256 private key and public point.
RFC6979_X = 0xC9AFA9D845BA75166B5C215767B1D6934E50C3DB36E89B127B8A622B120F6721
RFC6979_UX = bytes.fromhex("60FED4BA255A9D31C961EB74C6356D68C049B8923B61FA6CE669622E60F29FB6")
RFC6979_UY = bytes.fromhex("7903FE1008B8BC99A41AE9E95628BC64F2F1B20C2D7E9F5177A3C294D4462299")

# DER SubjectPublicKeyInfo prefixes, written out by hand:
#   Ed25519 (RFC 8410): SEQUENCE(42) { SEQUENCE(5) { OID 1.3.101.112 }, BIT STRING(33) 00 || key }
ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")
#   P-256 (RFC 5480): SEQUENCE(89) { SEQUENCE(19) { OID id-ecPublicKey, OID prime256v1 },
#   BIT STRING(66) 00 || 04 || X || Y }
P256_SPKI_PREFIX = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d030107034200")


def test_keyid_ed25519_known_answer() -> None:
    spki = ED25519_SPKI_PREFIX + RFC8032_PUBLIC
    key = PublicKey.from_der(spki)
    assert key.keyid == hashlib.sha256(spki).hexdigest()
    assert key.keyid == "06e3fd8fda29bb60ab59557de61edb0aecdb231134be30e75b455f8e1b792fa9"
    assert key.algorithm == "ed25519"
    assert key.spki_der == spki
    # The same key reached from its private half, as ledger/keys.py does.
    priv = ed25519.Ed25519PrivateKey.from_private_bytes(RFC8032_SECRET)
    assert Signer.from_private("t", priv).keyid == key.keyid


def test_keyid_p256_known_answer() -> None:
    spki = P256_SPKI_PREFIX + b"\x04" + RFC6979_UX + RFC6979_UY
    key = PublicKey.from_der(spki)
    assert key.keyid == hashlib.sha256(spki).hexdigest()
    assert key.keyid == "5a7a78cca4a0f420d9bc62bb669c3c2759e39f723d3ae10dcbe0f0815a07ecd4"
    assert key.algorithm == "ecdsa-p256"
    priv = ec.derive_private_key(RFC6979_X, ec.SECP256R1())
    assert Signer.from_private("t", priv).keyid == key.keyid


def test_keyid_of_spki_is_plain_sha256() -> None:
    assert keyid_of_spki(b"") == hashlib.sha256(b"").hexdigest()


def test_pem_and_der_agree() -> None:
    key = PublicKey.from_der(ED25519_SPKI_PREFIX + RFC8032_PUBLIC)
    assert key.to_pem().startswith(b"-----BEGIN PUBLIC KEY-----\n")
    again = PublicKey.from_pem(key.to_pem())
    assert again == key
    assert again.raw_ed25519() == RFC8032_PUBLIC


def test_compressed_p256_point_gets_the_uncompressed_keyid() -> None:
    """keyid is over the SPKI as re-encoded (uncompressed point), whatever form was read."""
    pub = ec.derive_private_key(RFC6979_X, ec.SECP256R1()).public_key()
    uncompressed_spki = pub.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    point = pub.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
    )
    spki_c = bytes.fromhex("3039301306072a8648ce3d020106082a8648ce3d030107032200") + point
    assert PublicKey.from_der(spki_c).keyid == hashlib.sha256(uncompressed_spki).hexdigest()


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: rsa.generate_private_key(65537, 2048).public_key(), "RSA"),
        (lambda: ec.generate_private_key(ec.SECP384R1()).public_key(), "ECDSA secp384r1"),
        (lambda: ec.generate_private_key(ec.SECP256K1()).public_key(), "ECDSA secp256k1"),
        (lambda: ed448.Ed448PrivateKey.generate().public_key(), "Ed448"),
        (lambda: x25519.X25519PrivateKey.generate().public_key(), "X25519"),
    ],
)
def test_other_algorithms_are_refused(make, name: str) -> None:
    pem = make().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(
        FormatError, match=rf"k\.pem: unsupported key algorithm {name}, want Ed25519 or ECDSA P-256"
    ):
        PublicKey.from_pem(pem, "k.pem")


def test_truncated_pem_is_refused() -> None:
    pem = PublicKey.from_der(ED25519_SPKI_PREFIX + RFC8032_PUBLIC).to_pem()
    with pytest.raises(FormatError, match=r"^k\.pem: not a valid PEM public key \("):
        PublicKey.from_pem(pem[:40], "k.pem")


def test_private_key_pem_is_not_a_public_key() -> None:
    priv = ed25519.Ed25519PrivateKey.from_private_bytes(RFC8032_SECRET).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(FormatError, match=r"not a valid PEM public key"):
        PublicKey.from_pem(priv)


@pytest.mark.parametrize("der", [b"", b"\x30\x00", ED25519_SPKI_PREFIX + RFC8032_PUBLIC[:31]])
def test_bad_der_is_refused(der: bytes) -> None:
    with pytest.raises(FormatError, match=r"not a valid DER public key"):
        PublicKey.from_der(der)


def test_raw_ed25519_of_p256_key() -> None:
    key = Signer.generate("p", "ecdsa-p256").public
    with pytest.raises(FormatError, match=r"is ecdsa-p256, want ed25519"):
        key.raw_ed25519()


def test_algorithms() -> None:
    assert ALGORITHMS == ("ed25519", "ecdsa-p256")
    with pytest.raises(KeyError_, match=r"unknown algorithm 'rsa'"):
        Signer.generate("r", "rsa")


# --- signature encodings ---------------------------------------------------------------------


def test_ed25519_signature_is_raw_64_bytes_and_rfc8032() -> None:
    signer = Signer.from_private("t", ed25519.Ed25519PrivateKey.from_private_bytes(RFC8032_SECRET))
    # RFC 8032 section 7.1 test 1: the signature of the empty message.
    want = bytes.fromhex(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e3970"
        "1cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    assert signer.sign(b"") == want
    assert signer.public.verify(want, b"")


def test_ecdsa_signature_is_der_over_sha256() -> None:
    priv = ec.derive_private_key(RFC6979_X, ec.SECP256R1())
    signer = Signer.from_private("t", priv)
    sig = signer.sign(b"sample")
    r, s = decode_dss_signature(sig)  # DER SEQUENCE { r, s }
    priv.public_key().verify(sig, b"sample", ec.ECDSA(hashes.SHA256()))
    # The same (r, s) as raw 64 bytes (IEEE P1363, as WebCrypto emits) is refused.
    raw = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    assert signer.public.verify(sig, b"sample")
    assert not signer.public.verify(raw, b"sample")


def test_ecdsa_rfc6979_known_signature_verifies() -> None:
    # RFC 6979 A.2.5, "With SHA-256, message = 'sample'" (deterministic k): encode as DER.
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    r = 0xEFD48B2AACB6A8FD1140DD9CD45E81D69D2C877B56AAF991C34D0EA84EAF3716
    s = 0xF7CB1C942D657C41D436C7A1B6E29F65F3E900DBB9AFF4064DC4AB2F843ACDA8
    key = PublicKey.from_der(P256_SPKI_PREFIX + b"\x04" + RFC6979_UX + RFC6979_UY)
    assert key.verify(encode_dss_signature(r, s), b"sample")
    assert not key.verify(encode_dss_signature(r, s), b"sample!")


@pytest.mark.parametrize("sig", [b"", b"\x00" * 63, b"\x00" * 65, b"\x30\x02\x01"])
def test_verify_never_raises_on_garbage(sig: bytes) -> None:
    for key in (Signer.generate("e").public, Signer.generate("p", "ecdsa-p256").public):
        assert key.verify(sig, b"m") is False


# --- keys at rest (ledger/keys.py; SPEC.md "Keys at rest") -----------------------------------


def test_key_at_rest_is_encrypted_pkcs8_mode_0600(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSPHRASE_ENV, "correct horse")
    store = KeyStore(tmp_path / "keys")
    made = store.create("vendor", "ecdsa-p256")
    priv = tmp_path / "keys" / "vendor.key"
    assert stat.S_IMODE(os.stat(priv).st_mode) == 0o600
    assert priv.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----\n")
    pub = (tmp_path / "keys" / "vendor.pub").read_bytes()
    assert PublicKey.from_pem(pub) == made.public
    assert store.signer("vendor").keyid == made.keyid
    monkeypatch.setenv(PASSPHRASE_ENV, "wrong")
    with pytest.raises(KeyError_, match=r"key vendor: cannot load .*: wrong passphrase or corrupt"):
        store.signer("vendor")


def test_key_at_rest_truncated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    store = KeyStore(tmp_path)
    store.create("demo", encrypt=False)
    path = tmp_path / "demo.key"
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(KeyError_, match=r"corrupt or truncated key file"):
        store.signer("demo")


def test_a_key_of_small_order_is_refused_where_it_would_verify_anything() -> None:
    """rev16: ``cryptography`` (OpenSSL) takes the identity point as an Ed25519 public key and
    verifies R = identity, S = 0 as its signature of every message; the policy's keys were
    loaded as they came. No private key stands behind such a key, and a policy listing one
    trusts whoever signs."""
    identity = (1).to_bytes(32, "little")
    forged = identity + bytes(32)
    raw = ed25519.Ed25519PublicKey.from_public_bytes(identity)
    raw.verify(forged, b"any message at all")  # what the library does: no exception
    for key in testkit.weak_ed25519_keys():
        with pytest.raises(FormatError, match="small order or not canonical"):
            PublicKey.from_der(ED25519_SPKI_PREFIX + key)
    assert PublicKey.from_der(ED25519_SPKI_PREFIX + RFC8032_PUBLIC).algorithm == "ed25519"
