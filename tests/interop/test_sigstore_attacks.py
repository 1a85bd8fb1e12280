"""Keyless Sigstore bundles made by an attacker (sig5's review, docs/SECURITY.md).

Each bundle starts from something the attacker can make: a certificate of their own (no CA
needed: the identity is matched before the chain is checked), or a genuine bundle of the
private instance (``sigstore_instance``) edited afterwards. Every refusal is one line: a
``FormatError`` or ``SignatureError`` from the API, exit 1 from the command line (``--json``
too), never a traceback or the "BUG" exit.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sigstore")

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from trajledger.runner.cli import main
from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE
from trajledger.verify.errors import FormatError, SignatureError
from trajledger.verify.keys import Identity
from trajledger.verify.sigstore_adapter import verify_sigstore_bundle

ISSUER = "https://issuer.test/"
ALICE = "alice@example.com"
DIGEST = "ab" * 32
V1 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
V2 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
V9 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.9")
OTHER_NAME = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.7")


def _utf8(text: str) -> bytes:
    raw = text.encode()
    return bytes([0x0C, len(raw)]) + raw


def _cert(extensions: Sequence[x509.ExtensionType]) -> bytes:
    """A self-signed certificate with ``extensions``: what anyone can make."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "attacker")])
    builder = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(7)
        .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
    )  # fmt: skip
    for ext in extensions:
        builder = builder.add_extension(ext, critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def _keyless_bundle(cert: bytes) -> bytes:
    """A bundle that reads as keyless (a certificate and a log entry); nothing in it verifies."""
    statement = json.dumps({
        "_type": "https://in-toto.io/Statement/v1", "predicateType": "p", "predicate": {},
        "subject": [{"name": "f.txt", "digest": {"sha256": DIGEST}}]}).encode()
    return json.dumps({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"certificate": {"rawBytes": base64.b64encode(cert).decode()},
                                 "tlogEntries": [{}]},
        "dsseEnvelope": {"payload": base64.b64encode(statement).decode(),
                         "payloadType": INTOTO_PAYLOAD_TYPE, "signatures": [{"sig": "AAAA"}]},
    }).encode()  # fmt: skip


def _duplicate_extension() -> bytes:
    """The issuer extension twice (DER: an extension may appear once): the second made from a
    ``.9`` extension by rewriting its OID's last byte (the signature is then wrong, which the
    identity check before the chain never looks at)."""
    der = _cert([
        x509.UnrecognizedExtension(V2, _utf8(ISSUER)),
        x509.UnrecognizedExtension(V9, _utf8(ISSUER)),
        x509.SubjectAlternativeName([x509.RFC822Name(ALICE)]),
    ])  # fmt: skip
    oid9 = bytes.fromhex("060a2b0601040183bf300109")
    assert der.count(oid9) == 1
    return der.replace(oid9, oid9[:-1] + b"\x08")


HOSTILE = {
    "no SAN": lambda: _cert([x509.UnrecognizedExtension(V1, ISSUER.encode())]),
    "other name not UTF-8": lambda: _cert([
        x509.UnrecognizedExtension(V1, ISSUER.encode()),
        x509.SubjectAlternativeName([x509.OtherName(OTHER_NAME, b"\x0c\x02\xff\xfe")]),
    ]),
    "issuer not UTF-8": lambda: _cert([
        x509.UnrecognizedExtension(V1, b"\xff\xfe"),
        x509.SubjectAlternativeName([x509.RFC822Name(ALICE)]),
    ]),
    "duplicate extension": _duplicate_extension,
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_certificate_is_refused_in_one_line(
    case: str, tmp_path: Path, runner: Any
) -> None:
    """The identity is matched first, on a certificate nobody has checked yet: a certificate
    without SAN, with an issuer or other-name SAN that is not UTF-8, or with an extension twice
    made ``verify FILE --sigstore-bundle`` exit 4 ("BUG: ExtensionNotFound",
    "UnicodeDecodeError", "DuplicateExtension") instead of refusing it (sig5 finding 1)."""
    bundle = _keyless_bundle(HOSTILE[case]())
    with pytest.raises((FormatError, SignatureError)) as caught:
        verify_sigstore_bundle(bundle, identities=[Identity(ISSUER, ALICE)],
                               artifact_digest="sha256:" + DIGEST)  # fmt: skip
    assert "\n" not in str(caught.value)
    (tmp_path / "f.txt").write_text("x")
    (tmp_path / "b.json").write_bytes(bundle)
    (tmp_path / "policy.toml").write_text(
        f'name = "p"\nserial = 1\n[roles.producer]\n'
        f'identities = [{{issuer = "{ISSUER}", subject = "{ALICE}"}}]\n'
    )
    for extra in ([], ["--json"]):
        r = runner.invoke(main, ["verify", str(tmp_path / "f.txt"), "--sigstore-bundle",
                                 str(tmp_path / "b.json"), "--policy",
                                 str(tmp_path / "policy.toml"), *extra])  # fmt: skip
        assert r.exit_code == 1, (extra, r.output, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "BUG" not in lines[0] and "Sigstore bundle" in lines[0], lines
