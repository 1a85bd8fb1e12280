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
import hashlib
import json
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sigstore")

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from trajledger.ledger.keys import Signer
from trajledger.ledger.sigstore_sign import KeylessSigner
from trajledger.runner.cli import main
from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE
from trajledger.verify.errors import FormatError, SignatureError
from trajledger.verify.keys import Identity
from trajledger.verify.sigstore_adapter import verify_sigstore_bundle

ISSUER = "https://issuer.test/"
TOKEN_ISSUER = "https://oidc.test.invalid"  # the private instance's (conftest.TOKEN_ISSUER)
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
    "UnicodeDecodeError", "DuplicateExtension") instead of refusing it, and an extension twice
    did so in model_signing's certificate mode too (sig5 finding 1)."""
    bundle = _keyless_bundle(HOSTILE[case]())
    with pytest.raises((FormatError, SignatureError)) as caught:
        verify_sigstore_bundle(bundle, identities=[Identity(ISSUER, ALICE)],
                               artifact_digest="sha256:" + DIGEST)  # fmt: skip
    assert "\n" not in str(caught.value)
    # Without a log entry it is model_signing's certificate mode (the key pinned): the same.
    pinned = json.loads(bundle)
    pinned["verificationMaterial"]["tlogEntries"] = []
    with pytest.raises((FormatError, SignatureError)):
        verify_sigstore_bundle(json.dumps(pinned).encode(), keys=[Signer.generate("k").public],
                               artifact_digest="sha256:" + DIGEST)  # fmt: skip
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


# -- genuine bundles of the private instance, then edited ---------------------------------------


def _statement(digest: str) -> bytes:
    return json.dumps({
        "_type": "https://in-toto.io/Statement/v1", "predicateType": "https://example.test/p",
        "predicate": {}, "subject": [{"name": "f.txt", "digest": {"sha256": digest}}]},
        separators=(",", ":")).encode()  # fmt: skip


class Keyless:
    """Signs statements about ``f.txt`` as an identity of the private instance, and runs
    ``verify f.txt --sigstore-bundle`` under a policy trusting ``alice@example.com``."""

    def __init__(self, instance: Any, trust: tuple[Path, Path], root: Path, runner: Any,
                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
        self.instance, self.config, self.root, self.runner = instance, trust[0], root, runner
        self.monkeypatch = monkeypatch
        self.file = root / "f.txt"
        self.file.write_text("signed")
        self.digest = hashlib.sha256(b"signed").hexdigest()
        self.policy = root / "policy.toml"
        self.policy.write_text(
            f'name = "p"\nserial = 1\nsigstore_trusted_root = "{trust[1]}"\n[roles.producer]\n'
            f'identities = [{{issuer = "{TOKEN_ISSUER}", subject = "{ALICE}"}}]\n'
        )

    def sign(self, email: str = ALICE, digest: str | None = None, **issue: Any) -> dict[str, Any]:
        with self.monkeypatch.context() as m:
            m.setattr(self.instance, "issue", partial(type(self.instance).issue, self.instance,
                                                      **issue))  # fmt: skip
            signer = KeylessSigner(self.instance.token(email), trust_config=self.config)
            sig = signer.sign_dsse(INTOTO_PAYLOAD_TYPE, _statement(digest or self.digest))
        out: dict[str, Any] = json.loads(sig.bundle)
        return out

    def verify(self, bundle: dict[str, Any] | bytes, *extra: str) -> Any:
        path = self.root / "b.json"
        path.write_bytes(bundle if isinstance(bundle, bytes) else json.dumps(bundle).encode())
        return self.runner.invoke(main, ["verify", str(self.file), "--sigstore-bundle", str(path),
                                         "--policy", str(self.policy), *extra])  # fmt: skip

    def refused(self, bundle: dict[str, Any] | bytes, message: str) -> str:
        """Refused with one line holding ``message``, with and without --json."""
        line = ""
        for extra in ([], ["--json"]):
            r = self.verify(bundle, *extra)
            lines = r.stderr.strip().splitlines()
            assert r.exit_code == 1 and len(lines) == 1, (extra, r.output, r.stderr)
            assert message in lines[0] and "BUG" not in lines[0], lines[0]
            line = lines[0]
        return line


@pytest.fixture
def keyless(sigstore_instance: Any, trust_files: tuple[Path, Path], tmp_path: Path, runner: Any,
            monkeypatch: pytest.MonkeyPatch) -> Keyless:  # fmt: skip
    return Keyless(sigstore_instance, trust_files, tmp_path, runner, monkeypatch)


def test_the_issuer_extensions_must_agree(keyless: Keyless) -> None:
    """Fulcio writes the token's issuer twice: raw in the deprecated ``.1.1`` extension and as
    a DER UTF8String in ``.1.8``. sigstore 4.5.1's identity policy reads ``.1.1`` only, our
    messages ``.1.8`` first: a certificate whose ``.1.8`` named another issuer verified as
    the policy's identity, and was reported so (sig5 finding 2). Both must name the policy's
    issuer; ``.1.1`` alone (older Fulcio) still verifies."""
    assert keyless.verify(keyless.sign()).exit_code == 0
    assert keyless.verify(keyless.sign(issuer_v2=None)).exit_code == 0
    keyless.refused(keyless.sign(issuer_v1="https://evil.test", issuer_v2="https://evil.test"),
                    f"signed by identity {ALICE} (issuer https://evil.test), which is none of")
    keyless.refused(keyless.sign(issuer_v2="https://evil.test"),
                    "its OIDC issuer extension 1.3.6.1.4.1.57264.1.8 says 'https://evil.test'")
    # Only the new extension: sigstore 4.5.1 cannot check it; the refusal says so rather than
    # calling the policy's own identity untrusted.
    keyless.refused(keyless.sign(issuer_v1=None),
                    "has no OIDC issuer extension 1.3.6.1.4.1.57264.1.1")


def _entry(bundle: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = bundle["verificationMaterial"]["tlogEntries"][0]
    return entry


def _flip(b64: str) -> str:
    raw = bytearray(base64.b64decode(b64))
    raw[5] ^= 1
    return base64.b64encode(bytes(raw)).decode()


def _resign_set(instance: Any, bundle: dict[str, Any], integrated: int) -> None:
    """The entry's integrated time moved, and its SET signed again by the trusted log key."""
    entry = _entry(bundle)
    entry["integratedTime"] = str(integrated)
    payload = json.dumps({"body": entry["canonicalizedBody"], "integratedTime": integrated,
                          "logID": instance.rekor_log_id.hex(), "logIndex": int(entry["logIndex"])},
                         sort_keys=True, separators=(",", ":")).encode()  # fmt: skip
    sig = instance.rekor_key.sign(payload, ec.ECDSA(hashes.SHA256()))
    entry["inclusionPromise"]["signedEntryTimestamp"] = base64.b64encode(sig).decode()


def _chain(bundle: dict[str, Any], media_type: str) -> None:
    bundle["mediaType"] = media_type
    vm = bundle["verificationMaterial"]
    vm["x509CertificateChain"] = {"certificates": [vm.pop("certificate")]}


V01 = "application/vnd.dev.sigstore.bundle+json;version=0.1"
V02 = "application/vnd.dev.sigstore.bundle+json;version=0.2"
V03 = "application/vnd.dev.sigstore.bundle+json;version=0.3"
EDITS: dict[str, tuple[Any, str]] = {
    # (edit(bundle, another bundle of the same signer for another artifact, instance), message)
    "the entry of another artifact": (
        lambda b, o, i: b["verificationMaterial"].update(tlogEntries=o["verificationMaterial"][
            "tlogEntries"]), "log entry payload hash does not match bundle"),
    "the signature of another artifact": (
        lambda b, o, i: b["dsseEnvelope"].update(signatures=o["dsseEnvelope"]["signatures"]),
        "DSSE: invalid signature"),
    "a root hash flipped": (
        lambda b, o, i: _entry(b)["inclusionProof"].update(
            rootHash=_flip(_entry(b)["inclusionProof"]["rootHash"])),
        "inclusion proof contains invalid root hash"),
    "the SET flipped": (
        lambda b, o, i: _entry(b)["inclusionPromise"].update(
            signedEntryTimestamp=_flip(_entry(b)["inclusionPromise"]["signedEntryTimestamp"])),
        "SET: invalid inclusion promise"),
    "the integrated time moved": (
        lambda b, o, i: _entry(b).update(integratedTime=str(int(_entry(b)["integratedTime"]) + 60)),
        "SET: invalid inclusion promise"),
    "a logged time after the certificate expired": (
        lambda b, o, i: _resign_set(i, b, int(_entry(b)["integratedTime"]) + 3600),
        "cert is not valid at validation time"),
    "a logged time before the certificate": (
        lambda b, o, i: _resign_set(i, b, int(_entry(b)["integratedTime"]) - 3600),
        "cert is not valid at validation time"),
    "no inclusion promise nor timestamp": (
        lambda b, o, i: _entry(b).pop("inclusionPromise"),
        "bundle must contain an inclusion promise or signed timestamp(s)"),
    "another log's id": (
        lambda b, o, i: _entry(b)["logId"].update(keyId=_flip(_entry(b)["logId"]["keyId"])),
        "SET: invalid inclusion promise"),
    "an entry of another kind": (
        lambda b, o, i: _entry(b)["kindVersion"].update(kind="hashedrekord"),
        "Unsupported DSSE log entry type: hashedrekord/0.0.1"),
    "the entry twice": (
        lambda b, o, i: b["verificationMaterial"]["tlogEntries"].append(_entry(b)),
        "expected exactly one log entry in bundle"),
    "a timestamp no authority signed": (
        lambda b, o, i: b["verificationMaterial"].update(timestampVerificationData={
            "rfc3161Timestamps": [{"signedTimestamp": "AAAA"}]}),
        "Invalid Timestamp Response"),
    "v0.1 with a v0.3 certificate": (
        lambda b, o, i: b.update(mediaType=V01), "expected certificate chain in bundle"),
    "v0.2 with a v0.3 certificate": (
        lambda b, o, i: b.update(mediaType=V02), "expected certificate chain in bundle"),
    "v0.3 with a chain": (lambda b, o, i: _chain(b, V03), "expected certificate in bundle"),
    "the other artifact's certificate": (
        lambda b, o, i: b["verificationMaterial"].update(certificate=o["verificationMaterial"][
            "certificate"]), "DSSE: invalid signature"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(EDITS))
def test_an_edited_genuine_bundle_is_refused_in_one_line(case: str, keyless: Keyless) -> None:
    """A genuine keyless bundle, edited the ways the brief lists (an entry or signature of
    another artifact, proofs and promises that do not verify, a logged time outside the
    certificate's validity though signed by the log, duplicate entries, a media type that does
    not match the material): each is refused by the sigstore package, and we print it as one
    line, exit 1 (found sound: sig5)."""
    edit, message = EDITS[case]
    bundle, other = keyless.sign(), keyless.sign(digest="cd" * 32)
    assert keyless.verify(bundle).exit_code == 0
    edit(bundle, other, keyless.instance)
    keyless.refused(bundle, message)


def test_older_bundle_versions_and_exact_identities(keyless: Keyless) -> None:
    """v0.1 and v0.2 bundles (a certificate chain) of the same signature verify; a SAN that
    differs from the policy's subject in case, by a trailing dot, a prefix or a suffix is
    another identity (sig5, found sound)."""
    for media_type in (V01, V02):
        bundle = keyless.sign()
        _chain(bundle, media_type)
        assert keyless.verify(bundle).exit_code == 0, media_type
    for who in ("Alice@example.com", "alice@Example.com", "alice@example.com.",
                "xalice@example.com", "alice@example.com.evil", "alice@example.co"):
        keyless.refused(keyless.sign(email=who),
                        f"signed by identity {who} (issuer {TOKEN_ISSUER}), which is none of "
                        "the 1 trusted identity")  # fmt: skip


def _ca(name: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, Any] | None,
        ca: bool) -> x509.Certificate:  # fmt: skip
    """A CA certificate (``ca``) or a certificate that only claims to issue (not a CA)."""
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, issuer_key = issuer if issuer else (subject, key)
    usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
    return (
        x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(issuer_key, hashes.SHA256())
    )  # fmt: skip


@pytest.mark.parametrize("listed", ["the intermediate and its root", "the intermediate as not a CA",
                                    "another intermediate and root"])
def test_the_chain_must_reach_the_trusted_root_through_cas(
    listed: str, keyless: Keyless, trust_files: tuple[Path, Path]
) -> None:
    """Fulcio issues through an intermediate; the trusted root lists it and the root. The same
    intermediate key in a certificate that is not a CA (basicConstraints CA:FALSE), or another
    intermediate and root, refuse the signature (sig5, found sound: the chain is built from
    the trusted root's certificates only, never the bundle's, by cryptography's web PKI
    rules; sigstore's signer already refuses a certificate from a non-CA)."""
    def key() -> ec.EllipticCurvePrivateKey:
        return ec.generate_private_key(ec.SECP256R1())

    root_key, mid_key = key(), key()
    root = _ca("root", root_key, None, True)
    mid = _ca("mid", mid_key, (root.subject, root_key), True)
    keyless.monkeypatch.setattr(keyless.instance, "ca_key", mid_key)
    keyless.monkeypatch.setattr(keyless.instance, "ca_cert", mid)
    bundle = keyless.sign()
    if listed == "the intermediate as not a CA":
        mid = _ca("mid", mid_key, (root.subject, root_key), False)
    elif listed == "another intermediate and root":
        other_key = key()
        root = _ca("root", other_key, None, True)
        mid = _ca("mid", key(), (root.subject, other_key), True)
    trusted = json.loads(trust_files[1].read_text())
    trusted["certificateAuthorities"][0]["certChain"]["certificates"] = [
        {"rawBytes": base64.b64encode(c.public_bytes(serialization.Encoding.DER)).decode()}
        for c in (mid, root)]  # fmt: skip
    trust_files[1].write_text(json.dumps(trusted))
    if listed == "the intermediate and its root":
        assert keyless.verify(bundle).exit_code == 0
    elif listed == "the intermediate as not a CA":
        keyless.refused(bundle, "basicConstraints.cA must be asserted in a CA certificate")
    else:
        keyless.refused(bundle, "failed to build timestamp certificate chain")
