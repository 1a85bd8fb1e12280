"""The X25519 public keys of the evaluator role (policy format 2): sealed suites wrap their
data keys to them.

Scope: `EncryptionKey`, read from and written as a PEM ``PUBLIC KEY``, with its keyid. Loaded
only for a policy that names one (``roles.evaluator.encryption_keys``) and by the sealing side
(``ledger.sealing``): verifying a bundle under a policy without sealed suites never needs it.
Non-scope: sealing and unsealing (``ledger.sealing``), signing keys (``verify.keys``).
Spec: keys/README.md (the evaluator role), schemas/SPEC.md (sealed suites).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import FormatError
from .keys import keyid_of_spki

__all__ = ["EncryptionKey"]


@dataclass(frozen=True)
class EncryptionKey:
    """An X25519 public key of the evaluator role (format 2): sealed suites wrap their data
    keys to it. ``keyid`` is the lowercase hex SHA-256 of its DER SubjectPublicKeyInfo, as for
    signing keys."""

    keyid: str
    raw: bytes

    @classmethod
    def from_pem(cls, data: bytes, what: str = "encryption key") -> EncryptionKey:
        """Load a PEM ``PUBLIC KEY`` holding an X25519 key.

        Raises:
            FormatError: not PEM, or not X25519.
        """
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization as ser
        from cryptography.hazmat.primitives.asymmetric import x25519

        try:
            key = ser.load_pem_public_key(data)
        except (ValueError, UnsupportedAlgorithm, TypeError) as e:
            raise FormatError(f"{what}: not a valid PEM public key") from e
        if not isinstance(key, x25519.X25519PublicKey):
            raise FormatError(f"{what}: {type(key).__name__.strip('_')} is not an X25519 key")
        spki = key.public_bytes(ser.Encoding.DER, ser.PublicFormat.SubjectPublicKeyInfo)
        return cls(keyid_of_spki(spki), key.public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw))

    @property
    def algorithm(self) -> str:
        """``x25519``, as `keys.PublicKey.algorithm` names a signing key's."""
        return "x25519"

    def to_pem(self) -> str:
        """The key as a PEM ``PUBLIC KEY``."""
        from cryptography.hazmat.primitives import serialization as ser
        from cryptography.hazmat.primitives.asymmetric import x25519

        key = x25519.X25519PublicKey.from_public_bytes(self.raw)
        return key.public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo).decode()
