"""How trajledger encrypts a private key file, and how much work an encrypted one asks for.

Scope: `encrypted_pkcs8` (PBES2 with scrypt at `SCRYPT_COST` and AES-256-CBC, as ``openssl
pkcs8 -topk8 -scrypt`` writes), `private_pem` (that, or in the clear), and the reading of an
encrypted PKCS#8 PEM's parameters before it is loaded: `is_encrypted`, `kdf_cost` (bounded by
`KDF_LIMIT`) and `weakly_encrypted`. Moved out of ``keys`` (at 995 of 1,000 lines: left38);
``keys`` re-exports what it used. On the ledger's ground floor, beside ``keys``.
Non-scope: the key store (``keys.KeyStore``), loading a key (``cryptography``).
"""

from __future__ import annotations

import base64
import os

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519

__all__ = [
    "KDF_LIMIT",
    "SCRYPT_COST",
    "encrypted_pkcs8",
    "is_encrypted",
    "kdf_cost",
    "private_pem",
    "weakly_encrypted",
]

KDF_LIMIT = 10_000_000
"""The most key-derivation work an encrypted key file may ask for (PBKDF2 rounds, scrypt's
N·r·p): trajledger writes scrypt at 2^14·8·1 = 131,072 (`SCRYPT_COST`; before the seventh round
of 2026-12-03, PBKDF2 at 2,048 rounds), ``openssl pkcs8 -iter`` a few hundred thousand, 10
million take about a second. The file says how much: one
edited to 2^31 took minutes per load, to 2^40 crashed the loader (a Rust panic)."""
_SCRYPT = bytes.fromhex("2b06010401da47040b")  # 1.3.6.1.4.1.11591.4.11
_PBES2 = bytes.fromhex("2a864886f70d01050d")  # 1.2.840.113549.1.5.13
_AES256_CBC = bytes.fromhex("60864801650304012a")  # 2.16.840.1.101.3.4.1.42
SCRYPT_COST = (2**14, 8, 1)
"""scrypt's N, r and p for the private keys trajledger encrypts: ``openssl pkcs8 -topk8
-scrypt``'s own, 16 MiB and about 0.05-0.1 CPU-s per load or write here, memory-hard where
PBKDF2 is not. The most OpenSSL's loader (``cryptography``'s) takes without a memory setting
is N = 2^14 at r = 8 (its 32 MiB bound)."""

_PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey


def private_pem(key: _PrivateKey | x25519.X25519PrivateKey, passphrase: bytes | None) -> bytes:
    """``key`` as PKCS#8 PEM: `encrypted_pkcs8` with a passphrase, else in the clear."""
    if passphrase:
        return encrypted_pkcs8(key, passphrase)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def encrypted_pkcs8(key: _PrivateKey | x25519.X25519PrivateKey, passphrase: bytes) -> bytes:
    """``key`` as an encrypted PKCS#8 PEM (RFC 5958 ``EncryptedPrivateKeyInfo``): PBES2 (RFC
    8018) with scrypt (RFC 7914) at `SCRYPT_COST` and AES-256-CBC, a 16-byte salt and IV, as
    ``openssl pkcs8 -topk8 -scrypt`` writes one (its salt is 8 bytes). ``cryptography``'s own
    writer (``BestAvailableEncryption``) derives with PBKDF2 at 2,048 rounds and takes no other
    count for PKCS#8: a guessable passphrase would fall to a cheap offline search."""
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    n, r, p = SCRYPT_COST
    salt, iv = os.urandom(16), os.urandom(16)
    kek = Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(passphrase)
    padder = padding.PKCS7(128).padder()
    plain = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
    encryptor = Cipher(algorithms.AES(kek), modes.CBC(iv)).encryptor()
    sealed = encryptor.update(padder.update(plain) + padder.finalize()) + encryptor.finalize()
    kdf = _der(0x30, _der(0x06, _SCRYPT) + _der(0x30, _der(0x04, salt) + _der_int(n)
                                                  + _der_int(r) + _der_int(p)))
    scheme = _der(0x30, _der(0x06, _AES256_CBC) + _der(0x04, iv))
    der = _der(0x30, _der(0x30, _der(0x06, _PBES2) + _der(0x30, kdf + scheme))
               + _der(0x04, sealed))
    body = base64.encodebytes(der).replace(b"\n", b"")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return b"\n".join([b"-----BEGIN ENCRYPTED PRIVATE KEY-----", *lines,
                       b"-----END ENCRYPTED PRIVATE KEY-----", b""])


def _der(tag: int, body: bytes) -> bytes:
    """One DER element: ``tag``, the definite length of ``body`` (short or long form), ``body``."""
    n = len(body)
    if n < 0x80:
        return bytes([tag, n]) + body
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(size)]) + size + body


def _der_int(value: int) -> bytes:
    """A non-negative DER INTEGER: big-endian, minimal, a leading zero when the top bit is set."""
    return _der(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def weakly_encrypted(pem: bytes) -> bool:
    """Whether an encrypted private key PEM asks for less key-derivation work than
    `SCRYPT_COST`'s (PBKDF2 rounds or scrypt's N·r·p, `kdf_cost`; a damaged file is not
    "weak": loading it says what it is)."""
    try:
        return kdf_cost(pem) < SCRYPT_COST[0] * SCRYPT_COST[1] * SCRYPT_COST[2]
    except (ValueError, IndexError):
        return False


def is_encrypted(pem: bytes) -> bool:
    """Whether a private key PEM is encrypted (PKCS#8 ``ENCRYPTED PRIVATE KEY``)."""
    return b"ENCRYPTED" in pem.split(b"\n", 1)[0]


def kdf_cost(pem: bytes) -> int:
    """The key-derivation work an encrypted PKCS#8 PEM asks for: scrypt's N·r·p, else the
    largest integer of its algorithm parameters (PBKDF2's or PBES1's rounds).

    Raises:
        ValueError: not one whole PEM block of DER (a damaged or truncated file).
    """
    lines = pem.strip().splitlines()
    if len(lines) < 3 or lines[0].strip() != b"-----BEGIN ENCRYPTED PRIVATE KEY-----" or (
        lines[-1].strip() != b"-----END ENCRYPTED PRIVATE KEY-----"
    ):
        raise ValueError("not one encrypted PKCS#8 PEM block")
    der = base64.b64decode(b"".join(line.strip() for line in lines[1:-1]), validate=True)
    ints, oids, ends, at = [], [], [len(der)], 0
    while at < len(der):  # DER's primitives in order, constructed ones entered (no recursion)
        while at == ends[-1] and len(ends) > 1:
            ends.pop()
        tag, n, at = der[at], der[at + 1], at + 2
        if n & 0x80:
            k = n & 0x7F
            if not 0 < k <= 4:
                raise ValueError("bad DER length")
            n, at = int.from_bytes(der[at : at + k], "big"), at + k
        if at + n > ends[-1]:
            raise ValueError("truncated DER")
        if tag & 0x20:
            ends.append(at + n)
            continue
        if tag == 0x02:
            ints.append(int.from_bytes(der[at : at + n], "big"))
        elif tag == 0x06:
            oids.append(der[at : at + n])
        at += n
    if (len(ends) > 1 and at != ends[-1]) or not oids:
        raise ValueError("truncated DER")
    if _SCRYPT in oids:
        n_, r, p = [*ints, 0, 0, 0][:3]
        return n_ * r * p
    return max(ints, default=0)
