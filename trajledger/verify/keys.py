"""Public keys and key identifiers.

Scope: load a public key (PEM or DER SubjectPublicKeyInfo), name it by its keyid, and check a
signature with it. Only Ed25519 and ECDSA P-256 with SHA-256 are accepted; anything else is
refused when the key is loaded, so a verifier can never be handed a weaker algorithm; so is an
Ed25519 key of small order or not canonically encoded (`check_ed25519`), which anyone can sign as.
Non-scope: private keys (ledger/keys.py holds those).
Spec: schemas/SPEC.md section "Key identifiers": keyid = lowercase hex SHA-256 of the DER
SubjectPublicKeyInfo.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from .errors import FormatError

__all__ = ["ALGORITHMS", "Identity", "KeyLookup", "PublicKey", "check_ed25519", "keyid_of_spki"]

ALGORITHMS = ("ed25519", "ecdsa-p256")
"""Signature algorithms trajledger accepts, by the name used in key listings and policies."""

_PublicKeyType = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey
_P, _C8 = 2**255 - 19, 2707385501144840649318225287225658788936804267575313519463743609750303402022
_SMALL_ORDER_Y = frozenset((0, 1, _P - 1, _C8, _P - _C8))  # the points of order 1, 2, 4 and 8


@dataclass(frozen=True)
class Identity:
    """A Sigstore identity, which signs keylessly: OIDC issuer and certificate subject (SAN)."""

    issuer: str
    subject: str


def check_ed25519(raw: bytes, what: str) -> None:
    """Refuse a 32-byte Ed25519 public key no private key stands behind: a point of small order
    (then R = that point or the identity, S = 0, verifies as its signature of almost any
    message: ``cryptography``, like OpenSSL, accepts it) or a non-canonical encoding (y >= p,
    which no key generator writes). libsodium refuses both; so does every loader here.

    Raises:
        FormatError: such a key.
    """
    y = int.from_bytes(raw, "little") & ((1 << 255) - 1)  # (the sign of x is the top bit)
    if y >= _P or y in _SMALL_ORDER_Y:
        raise FormatError(f"{what}: an Ed25519 key of small order or not canonical: anyone "
                          "can sign as it")


def keyid_of_spki(spki_der: bytes) -> str:
    """Return the keyid (lowercase hex SHA-256) of a DER SubjectPublicKeyInfo."""
    return hashlib.sha256(spki_der).hexdigest()


@dataclass(frozen=True)
class PublicKey:
    """A verified-usable public key: Ed25519 or ECDSA P-256.

    Build with `from_pem` or `from_der`; an instance always holds a supported key.

    Attributes:
        spki_der: the DER SubjectPublicKeyInfo.
        algorithm: one of `ALGORITHMS`.
        keyid: lowercase hex SHA-256 of ``spki_der``.
    """

    spki_der: bytes
    algorithm: str
    keyid: str
    _key: _PublicKeyType = field(repr=False, compare=False)

    @classmethod
    def from_pem(cls, data: bytes, what: str = "public key") -> PublicKey:
        """Load a PEM ``PUBLIC KEY``.

        Raises:
            FormatError: not a PEM public key, truncated, or an unsupported algorithm.
        """
        return cls._load(serialization.load_pem_public_key, "PEM", data, what)

    @classmethod
    def from_der(cls, data: bytes, what: str = "public key") -> PublicKey:
        """Load a DER SubjectPublicKeyInfo.

        Raises:
            FormatError: not a DER public key, or an unsupported algorithm.
        """
        return cls._load(serialization.load_der_public_key, "DER", data, what)

    @classmethod
    def _load(cls, load: Callable[[bytes], object], form: str, data: bytes, what: str
              ) -> PublicKey:
        """A key read by ``load`` (PEM or DER, ``form``), if of an accepted algorithm."""
        try:
            key = load(data)
        except (ValueError, UnsupportedAlgorithm, TypeError) as e:
            raise FormatError(f"{what}: not a valid {form} public key (" + (  # rev25, finding 6
                "a PRIVATE key: give its public half, and replace it: whoever read it can sign"
                if b"PRIVATE KEY" in data else f"truncated, corrupt or not {form}") + ")") from e
        if isinstance(key, ed25519.Ed25519PublicKey):
            algorithm = "ed25519"
            check_ed25519(key.public_bytes_raw(), what)
        elif isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
            algorithm = "ecdsa-p256"
        else:
            name = type(key).__name__.removeprefix("_").replace("PublicKey", "")
            if isinstance(key, ec.EllipticCurvePublicKey):
                name = f"ECDSA {key.curve.name}"
            raise FormatError(
                f"{what}: unsupported key algorithm {name}, want Ed25519 or ECDSA P-256"
            )
        spki = key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return cls(spki, algorithm, keyid_of_spki(spki), key)

    def to_pem(self) -> bytes:
        """Return the key as a PEM ``PUBLIC KEY``."""
        return self._key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def raw_ed25519(self) -> bytes:
        """Return the 32 raw bytes of an Ed25519 key (for signed-note verifier keys).

        Raises:
            FormatError: the key is not Ed25519.
        """
        if not isinstance(self._key, ed25519.Ed25519PublicKey):
            raise FormatError(f"key {self.keyid[:16]}: is {self.algorithm}, want ed25519")
        return self._key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    def verify(self, signature: bytes, data: bytes) -> bool:
        """Check ``signature`` over ``data``; ECDSA signatures are DER, SHA-256.

        Returns:
            True when the signature is valid, False otherwise (never raises for a bad one).
        """
        try:
            if isinstance(self._key, ed25519.Ed25519PublicKey):
                self._key.verify(signature, data)
            else:
                self._key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, ValueError):
            return False
        return True


KeyLookup = Callable[[str], PublicKey | None]
"""Finds a public key by keyid (for policies that name keys by keyid), or returns None."""
