"""What a public key file the user gave holds when it is not PEM (out36's Left, left37).

Decided: ``--pubkey`` reads PEM only, as every key file the ledger writes, exports and names in a
policy is PEM; reading DER or OpenSSH too would be one more parser over the bytes of the file
the user trusts, for a conversion made once, and a key would have several spellings where one
is compared. What a DER, base64 DER or OpenSSH key file holds is named instead, with the
command that converts it, where it said only "not a valid PEM public key".
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

__all__ = ["hinted", "other_form"]

_OPENSSH = {b"ssh-ed25519": "Ed25519", b"ecdsa-sha2-nistp256": "ECDSA P-256",
            b"ecdsa-sha2-nistp384": "ECDSA P-384", b"ssh-rsa": "RSA"}

_SSH_TO_PEM = ("python -c \"import sys, pathlib; from cryptography.hazmat.primitives import "
               "serialization as s; sys.stdout.buffer.write(s.load_ssh_public_key(pathlib.Path("
               "sys.argv[1]).read_bytes()).public_bytes(s.Encoding.PEM, "
               "s.PublicFormat.SubjectPublicKeyInfo))\"")
"""OpenSSH to PEM (``ssh-keygen -e -m PKCS8`` refuses Ed25519 keys): cryptography, which
trajledger needs, reads it."""


def other_form(data: bytes, path: Path) -> str:
    """The form ``data`` (not PEM) is in and how to convert it to PEM, or ``""`` if neither
    DER, base64 of DER nor an OpenSSH public key line."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization as ser

    from .errors import shell_word

    src, pem = shell_word(path), shell_word(f"{path}.pem")
    words = data.split()
    if words and words[0] in _OPENSSH:
        return (f"it is an OpenSSH {_OPENSSH[words[0]]} public key: convert it with "
                f"'{_SSH_TO_PEM} {src} > {pem}', then give {pem}")
    try:
        der = data if data[:1] == b"\x30" else base64.b64decode(b"".join(words), validate=True)
        ser.load_der_public_key(der)
    except (binascii.Error, ValueError, TypeError, UnsupportedAlgorithm):
        return ""
    how = f"openssl pkey -pubin -inform DER -out {pem}"
    if der is data:
        return f"it is a DER public key: convert it with '{how} -in {src}', then give {pem}"
    return (f"it is base64 of a DER public key: convert it with 'base64 -d {src} | {how}', "
            f"then give {pem}")


def hinted(message: str, data: bytes, path: Path) -> str:
    """``message`` (a key file that is not a PEM public key), with `other_form`'s words when
    ``data`` is in another form: ``--pubkey FILE`` (left37) and a key store's ``NAME.pub``
    (left38)."""
    hint = other_form(data, path)
    return f"{message}; {hint}" if hint else message
