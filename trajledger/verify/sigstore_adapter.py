"""Sigstore bundles: read them, verify them offline, and the one door to the ``sigstore`` package.

Scope:
- parse a Sigstore bundle (v0.1, v0.2, v0.3; protobuf-specs ``dev.sigstore.bundle.v1.Bundle`` in
  its JSON form) strictly enough to know what it claims: DSSE envelope or message signature,
  verified by a public key (``publicKey.hint``), a certificate, or a certificate chain;
- verify one, offline, against the keys and Sigstore identities (OIDC issuer + certificate SAN)
  a trust policy names:
  - key mode (a ``publicKey`` hint, as our own export and model_signing's key mode write): the
    signature is checked with the trusted keys here, with ``cryptography`` alone;
  - pinned-certificate mode (a certificate without transparency-log entries, as
    model_signing's certificate mode writes): the leaf certificate's key must be a trusted key;
  - keyless mode (a Fulcio certificate with transparency-log entries and/or signed timestamps):
    the whole Sigstore verification (certificate chain to the trusted root at a verified time,
    SCT, inclusion proof and checkpoint or promise, signed timestamps, the entry's consistency
    with the bundle, the signature) is done by the ``sigstore`` package, against its production
    trusted root (the copy it ships, never refreshed here) or a ``trusted_root.json`` given as
    bytes; then the certificate's identity and issuer must be one the policy names (the issuer
    in each of Fulcio's two issuer extensions present);
- the keyless signatures of our own envelopes: such a signature's keyid is the hex sha256 of the
  Sigstore bundle that carries its certificate (`bundle_keyid`), and `verify_envelope_signature`
  checks one against its bundle.

This is the only module of ``verify/`` that may import ``sigstore``, and only inside functions:
a copy of ``verify/`` without it still imports this module, verifies key-mode bundles, and
reports keyless ones as "not verifiable here" (`NotVerifiableHere`), counting them for nothing.

Non-scope: signing (``ledger/sigstore_sign.py``), writing bundles (``ledger/sigstore_export.py``),
deciding what a verified signer may do (``policy``, ``lineage``). Transparency-log entries in a
key-mode bundle are not checked: there the trusted key is the anchor (cosign's
``--insecure-ignore-tlog``); the result says so in its notes.

Spec: https://github.com/sigstore/protobuf-specs (``sigstore_bundle.proto``), the Sigstore
client spec (https://docs.sigstore.dev/about/bundle/), DSSE v1; schemas/SPEC.md section
"Sigstore bundles".
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

from .compromise import RevokedIdentity, RevokedKey
from .digest import parse_digest
from .dsse import INTOTO_PAYLOAD_TYPE, MAX_ENVELOPE_BYTES, Envelope, Signature, b64decode, pae
from .errors import FormatError, SignatureError
from .keys import Identity, PublicKey
from .strict_json import load_object

__all__ = [
    "BUNDLE_MEDIA_TYPE",
    "MEDIA_TYPES",
    "NOT_INSTALLED",
    "BundleSigner",
    "NotVerifiableHere",
    "SigstoreBundle",
    "VerifiedBundle",
    "bundle_keyid",
    "certificate_identity",
    "identity_signers",
    "parse_trusted_root",
    "public_key_hint",
    "sigstore_available",
    "trusted_root_bytes",
    "verify_envelope_signature",
    "verify_sigstore_bundle",
]

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
"""The media type this project writes (bundle v0.3)."""

MEDIA_TYPES = frozenset(
    {
        "application/vnd.dev.sigstore.bundle+json;version=0.1",
        "application/vnd.dev.sigstore.bundle+json;version=0.2",
        "application/vnd.dev.sigstore.bundle+json;version=0.3",
        BUNDLE_MEDIA_TYPE,
    }
)
"""Every bundle media type this module reads."""

NOT_INSTALLED = "not verifiable here (the sigstore package is not installed)"

_TOP_FIELDS = {"mediaType", "verificationMaterial", "dsseEnvelope", "messageSignature"}
_MATERIAL_FIELDS = {
    "publicKey",
    "certificate",
    "x509CertificateChain",
    "tlogEntries",
    "timestampVerificationData",
}
_HEX64 = re.compile(r"[0-9a-f]{64}")
_STATEMENT_TYPES = ("https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1")


class NotVerifiableHere(SignatureError):
    """A keyless (certificate) signature, and the ``sigstore`` package is not installed.

    It counts for nothing: a verifier that cannot check a signature must not accept it.
    """


def sigstore_available() -> bool:
    """True when the ``sigstore`` package can be imported (it is not imported by this check)."""
    try:
        return importlib.util.find_spec("sigstore") is not None
    except (ImportError, ValueError):  # a broken or half-removed installation
        return False


def public_key_hint(key: PublicKey) -> str:
    """The bundle's ``publicKey.hint`` for ``key``: base64 of the sha256 of its DER SPKI."""
    return base64.b64encode(hashlib.sha256(key.spki_der).digest()).decode("ascii")


def bundle_keyid(bundle_bytes: bytes) -> str:
    """The keyid a keyless signature carries in our envelopes: hex sha256 of its bundle's bytes.

    The bundle is stored in the object store under ``sha256:<keyid>``, so the envelope names the
    certificate that verifies the signature, and the log entry (which lists the envelope's
    keyids) names it too.
    """
    return hashlib.sha256(bundle_bytes).hexdigest()


@dataclass(frozen=True)
class SigstoreBundle:
    """A parsed Sigstore bundle (not yet verified). Build with `from_bytes`.

    Attributes:
        data: the exact bytes.
        media_type: the bundle's ``mediaType``.
        material: ``"public-key"``, ``"certificate"`` or ``"x509-chain"``.
        hint: the ``publicKey.hint`` (key mode), else None.
        certificates: DER certificates, the signing (leaf) certificate first (empty in key mode).
        envelope: the DSSE envelope (exactly one signature), or None for a message signature.
        message_signature: the signature over the artifact digest, or None.
        message_digest: the sha256 the bundle says the artifact has (may be absent: None).
        tlog_entries: how many transparency-log entries it carries.
        timestamps: how many RFC 3161 signed timestamps it carries.
    """

    data: bytes = field(repr=False)
    media_type: str
    material: str
    hint: str | None
    certificates: tuple[bytes, ...] = field(repr=False)
    envelope: Envelope | None
    message_signature: bytes | None
    message_digest: bytes | None
    tlog_entries: int
    timestamps: int

    @classmethod
    def from_bytes(cls, data: bytes, what: str = "sigstore bundle") -> SigstoreBundle:
        """Parse a bundle.

        Refuses: oversize input, malformed JSON or duplicate keys, an unknown media type or
        top-level field, not exactly one of ``dsseEnvelope`` / ``messageSignature``, not
        exactly one kind of verification material, a DSSE envelope without exactly one
        signature, bad base64.

        Raises:
            FormatError: naming the problem.
        """
        if len(data) > MAX_ENVELOPE_BYTES:
            raise FormatError(f"{what}: {len(data)} bytes, more than {MAX_ENVELOPE_BYTES}")
        obj = load_object(data, what)
        unknown = set(obj) - _TOP_FIELDS
        if unknown:
            raise FormatError(f"{what}: unknown field(s) {', '.join(sorted(unknown))}")
        media_type = obj.get("mediaType")
        if media_type not in MEDIA_TYPES:
            raise FormatError(
                f"{what}: mediaType {media_type!r} is not a Sigstore bundle version this "
                f"verifier reads, want one of {', '.join(sorted(MEDIA_TYPES))}"
            )
        vm = _obj(obj.get("verificationMaterial"), f"{what}: verificationMaterial")
        extra = set(vm) - _MATERIAL_FIELDS
        if extra:
            raise FormatError(
                f"{what}: verificationMaterial has unknown field(s) {', '.join(sorted(extra))}"
            )
        kinds = [k for k in ("publicKey", "certificate", "x509CertificateChain") if k in vm]
        if len(kinds) != 1:
            raise FormatError(
                f"{what}: verificationMaterial must hold exactly one of publicKey, certificate, "
                f"x509CertificateChain; it holds {', '.join(kinds) or 'none'}"
            )
        hint: str | None = None
        certs: list[bytes] = []
        if kinds[0] == "publicKey":
            material = "public-key"
            pk = _obj(vm["publicKey"], f"{what}: publicKey")
            raw_hint = pk.get("hint", "")
            if not isinstance(raw_hint, str):
                raise FormatError(f"{what}: publicKey.hint must be a string")
            hint = raw_hint
        elif kinds[0] == "certificate":
            material = "certificate"
            cert = _obj(vm["certificate"], f"{what}: certificate")
            certs.append(b64decode(cert.get("rawBytes"), f"{what}: certificate.rawBytes"))
        else:
            material = "x509-chain"
            chain = _obj(vm["x509CertificateChain"], f"{what}: x509CertificateChain")
            raw_certs = chain.get("certificates")
            if not isinstance(raw_certs, list) or not raw_certs:
                raise FormatError(f"{what}: x509CertificateChain has no certificates")
            for i, c in enumerate(raw_certs):
                c = _obj(c, f"{what}: certificate {i}")
                certs.append(b64decode(c.get("rawBytes"), f"{what}: certificate {i} rawBytes"))
        entries = vm.get("tlogEntries", [])
        if not isinstance(entries, list):
            raise FormatError(f"{what}: tlogEntries must be a list")
        tsd = vm.get("timestampVerificationData") or {}
        stamps = _obj(tsd, f"{what}: timestampVerificationData").get("rfc3161Timestamps", [])
        if not isinstance(stamps, list):
            raise FormatError(f"{what}: rfc3161Timestamps must be a list")
        contents = [k for k in ("dsseEnvelope", "messageSignature") if k in obj]
        if len(contents) != 1:
            raise FormatError(
                f"{what}: must hold exactly one of dsseEnvelope, messageSignature; "
                f"it holds {', '.join(contents) or 'none'}"
            )
        envelope: Envelope | None = None
        msg_sig: bytes | None = None
        msg_digest: bytes | None = None
        if contents[0] == "dsseEnvelope":
            envelope = _envelope(_obj(obj["dsseEnvelope"], f"{what}: dsseEnvelope"), what)
        else:
            ms = _obj(obj["messageSignature"], f"{what}: messageSignature")
            msg_sig = b64decode(ms.get("signature"), f"{what}: messageSignature.signature")
            if not msg_sig:
                raise FormatError(f"{what}: messageSignature.signature is empty")
            if "messageDigest" in ms:
                md = _obj(ms["messageDigest"], f"{what}: messageDigest")
                if md.get("algorithm") != "SHA2_256":
                    raise FormatError(
                        f"{what}: messageDigest algorithm {md.get('algorithm')!r}, want SHA2_256"
                    )
                msg_digest = b64decode(md.get("digest"), f"{what}: messageDigest.digest")
                if len(msg_digest) != 32:
                    raise FormatError(f"{what}: messageDigest is {len(msg_digest)} bytes, want 32")
        return cls(
            data,
            media_type,
            material,
            hint,
            tuple(certs),
            envelope,
            msg_sig,
            msg_digest,
            len(entries),
            len(stamps),
        )

    @property
    def signature(self) -> bytes:
        """The signature bytes (the DSSE signature, or the message signature)."""
        if self.envelope is not None:
            return self.envelope.signatures[0].sig
        assert self.message_signature is not None
        return self.message_signature

    @property
    def keyless(self) -> bool:
        """True for a certificate with log entries or timestamps: the ``sigstore`` package's job.

        A certificate without either is model_signing's certificate mode (`verify_sigstore_bundle`
        checks it by the leaf's key).
        """
        return self.material != "public-key" and bool(self.tlog_entries or self.timestamps)


def _obj(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FormatError(f"{what}: must be an object")
    return value


def _envelope(raw: dict[str, Any], what: str) -> Envelope:
    unknown = set(raw) - {"payload", "payloadType", "signatures"}
    if unknown:
        raise FormatError(f"{what}: dsseEnvelope has unknown field(s) {sorted(unknown)}")
    payload_type = raw.get("payloadType")
    if not isinstance(payload_type, str) or not payload_type:
        raise FormatError(f"{what}: dsseEnvelope.payloadType must be a non-empty string")
    payload = b64decode(raw.get("payload"), f"{what}: dsseEnvelope.payload")
    sigs = raw.get("signatures")
    if not isinstance(sigs, list) or len(sigs) != 1:
        n = len(sigs) if isinstance(sigs, list) else 0
        raise FormatError(f"{what}: a bundle's DSSE envelope has exactly one signature, not {n}")
    sig = _obj(sigs[0], f"{what}: signature")
    if set(sig) - {"sig", "keyid"}:
        raise FormatError(
            f"{what}: signature has unknown field(s) {sorted(set(sig) - {'sig', 'keyid'})}"
        )
    keyid = sig.get("keyid", "")
    if not isinstance(keyid, str):
        raise FormatError(f"{what}: signature keyid must be a string")
    raw_sig = b64decode(sig.get("sig"), f"{what}: signature")
    if not raw_sig:
        raise FormatError(f"{what}: signature is empty")
    return Envelope(payload, payload_type, (Signature(keyid, raw_sig),))


@dataclass(frozen=True)
class BundleSigner:
    """Who a verified bundle says signed.

    Attributes:
        keyid: key and pinned-certificate modes: the trusted key's keyid; keyless mode: the hex
            sha256 of the certificate's DER SPKI (an ephemeral key: it identifies nothing).
        identity: keyless mode: the policy identity the certificate matched; else None.
        signed_at: keyless mode: the signing times sigstore verified (Rekor's integrated time
            bound by its promise, each trusted RFC 3161 timestamp's genTime), each
            ``YYYY-MM-DDTHH:MM:SSZ`` (to the second below) with its source; else empty.
    """

    keyid: str
    identity: Identity | None = None
    signed_at: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        """``key 1a2b3c…`` or ``identity SAN (issuer ISSUER)``."""
        if self.identity is not None:
            return f"identity {self.identity.subject} (issuer {self.identity.issuer})"
        return f"key {self.keyid[:16]}"


@dataclass(frozen=True)
class VerifiedBundle:
    """A bundle whose signature verified, with what it signed.

    Attributes:
        bundle: the parsed bundle.
        signer: who signed.
        mode: ``"key"``, ``"pinned-certificate"`` or ``"keyless"``.
        notes: what was not checked, and why.
    """

    bundle: SigstoreBundle
    signer: BundleSigner
    mode: str
    notes: tuple[str, ...] = ()

    @property
    def payload(self) -> bytes | None:
        """The DSSE payload's exact bytes (None for a message signature)."""
        return self.bundle.envelope.payload if self.bundle.envelope is not None else None

    @property
    def payload_type(self) -> str | None:
        """The DSSE payloadType (None for a message signature)."""
        return self.bundle.envelope.payload_type if self.bundle.envelope is not None else None


def verify_sigstore_bundle(
    data: bytes,
    *,
    keys: Iterable[PublicKey] = (),
    identities: Iterable[Identity] = (),
    trusted_root: bytes | None = None,
    expected_payload: tuple[str, bytes] | None = None,
    expected_signature: bytes | None = None,
    artifact_digest: str | None = None,
    what: str = "sigstore bundle",
) -> VerifiedBundle:
    """Verify a Sigstore bundle offline against trusted keys and identities.

    Steps:
        1. Check the artifact digest's syntax.
        2. Parse the bundle (`SigstoreBundle.from_bytes`).
        3. Check what it signs before any cryptography: the DSSE payloadType and payload are
           exactly ``expected_payload``, the signature is ``expected_signature``; a message
           signature's stated digest is ``artifact_digest``.
        4. Verify the signature by its material:
           - key mode: some trusted key verifies it (the hint is unauthenticated and only
             reported);
           - pinned-certificate mode: the leaf certificate may sign (digitalSignature key usage
             or the codeSigning extended key usage), its key is a trusted key, and that key
             verifies the signature;
           - keyless mode: without ``sigstore`` installed, `NotVerifiableHere`; with it, the
             ``sigstore`` verifier checks the bundle against the trusted root, requiring the
             certificate's SAN and issuer to be one of ``identities``.
        5. With ``artifact_digest`` and a DSSE bundle: the payload is an in-toto statement one of
           whose subjects has that sha256. With neither ``artifact_digest`` nor
           ``expected_payload``, the caller must check the payload it gets back.

    Args:
        data: the bundle's bytes.
        keys: trusted public keys (key and pinned-certificate modes).
        identities: trusted Sigstore identities (keyless mode).
        trusted_root: a ``trusted_root.json`` (bytes); None for the ``sigstore`` package's
            production root.
        expected_payload: ``(payloadType, payload bytes)`` the DSSE envelope must carry.
        expected_signature: the signature bytes the bundle must carry.
        artifact_digest: ``sha256:<hex>`` of the artifact (message signatures; DSSE subjects).
        what: names the bundle in messages.

    Returns:
        The verified bundle, its signer and notes on what was not checked.

    Raises:
        FormatError: the bundle is malformed, or a DSSE payload is not an in-toto statement.
        SignatureError: the signature does not verify, no trusted key or identity signed, or
            the bundle signs something other than what was expected.
        NotVerifiableHere: keyless, and ``sigstore`` is not installed.
    """
    # (1)
    digest = (
        bytes.fromhex(parse_digest(artifact_digest, "artifact digest")) if artifact_digest else None
    )
    keys = tuple(keys)
    identities = tuple(identities)
    # (2)
    bundle = SigstoreBundle.from_bytes(data, what)
    # (3)
    env = bundle.envelope
    if expected_payload is not None:
        if env is None:
            raise SignatureError(f"{what}: holds a message signature, want a DSSE envelope")
        if env.payload_type != expected_payload[0]:
            raise SignatureError(
                f"{what}: payloadType {env.payload_type!r}, want {expected_payload[0]!r}"
            )
        if env.payload != expected_payload[1]:
            raise SignatureError(f"{what}: signs a different payload than the envelope's")
    if expected_signature is not None and bundle.signature != expected_signature:
        raise SignatureError(f"{what}: carries a different signature than the envelope's")
    if env is None:
        if digest is None:
            raise SignatureError(f"{what}: a message signature needs the artifact to verify")
        if bundle.message_digest is not None and bundle.message_digest != digest:
            raise SignatureError(
                f"{what}: signs sha256:{bundle.message_digest.hex()}, "
                f"want sha256:{digest.hex()} (the artifact's)"
            )
    # (4)
    notes: list[str] = []
    if bundle.material == "public-key":
        mode = "key"
        signer = BundleSigner(_verify_with_keys(bundle, keys, digest, what).keyid)
        if bundle.tlog_entries or bundle.timestamps:
            notes.append(
                f"{bundle.tlog_entries} transparency-log entry(ies) and {bundle.timestamps} "
                "timestamp(s) not checked: in key mode the trusted key is the trust anchor"
            )
    elif not bundle.keyless:
        mode = "pinned-certificate"
        leaf = _load_certificate(bundle.certificates[0], what)
        _check_signing_usage(leaf, what)
        leaf_key = _public_key_of(leaf, what)
        pinned = [k for k in keys if k.keyid == leaf_key.keyid]
        if not pinned:
            raise SignatureError(
                f"{what}: signed by a certificate whose key {leaf_key.keyid[:16]} is none of "
                f"the {len(keys)} trusted key(s); a certificate without a transparency log is "
                "trusted by its key only"
            )
        signer = BundleSigner(_verify_with_keys(bundle, pinned, digest, what).keyid)
        notes.append(
            "certificate chain not checked against a CA: the policy pins the certificate's key"
        )
    else:
        mode = "keyless"
        if not sigstore_available():
            raise NotVerifiableHere(f"{what}: keyless Sigstore signature: {NOT_INSTALLED}")
        if not identities:
            raise SignatureError(
                f"{what}: a keyless Sigstore signature, and no Sigstore identity is trusted "
                "(add issuer and subject to a role's identities in the trust policy)"
            )
        signer = _verify_keyless(bundle, identities, trusted_root, digest, what)
    # (5)
    if env is not None and digest is not None:
        _check_subject(env, digest, what)
    return VerifiedBundle(bundle, signer, mode, tuple(notes))


def _load_certificate(der: bytes, what: str) -> x509.Certificate:
    """The certificate, its extensions parsed here (cryptography keeps them): an extension
    given twice or unreadable is refused once, not raised by whatever reads it next."""
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError as e:
        raise FormatError(f"{what}: signing certificate is not valid DER") from e
    try:
        cert.extensions  # noqa: B018 (parsed for the check)
    except (ValueError, x509.DuplicateExtension, x509.UnsupportedGeneralNameType) as e:
        raise FormatError(f"{what}: signing certificate's extensions cannot be read: {e}") from e
    return cert


def _public_key_of(cert: x509.Certificate, what: str) -> PublicKey:
    try:
        spki = cert.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    except (ValueError, UnsupportedAlgorithm) as e:
        raise FormatError(f"{what}: signing certificate's key cannot be read") from e
    try:
        return PublicKey.from_der(spki, f"{what}: signing certificate's key")
    except FormatError as e:
        raise SignatureError(str(e)) from e


_OIDC_ISSUER_V1 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
_OIDC_ISSUER_V2 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")


def _issuers(cert: x509.Certificate) -> list[tuple[x509.ObjectIdentifier, str]]:
    """The OIDC issuer each of Fulcio's two issuer extensions present states."""
    out: list[tuple[x509.ObjectIdentifier, str]] = []
    for oid in (_OIDC_ISSUER_V1, _OIDC_ISSUER_V2):
        try:
            ext = cert.extensions.get_extension_for_oid(oid).value
        except x509.ExtensionNotFound:
            continue
        raw = ext.value if isinstance(ext, x509.UnrecognizedExtension) else b""
        out.append((oid, _der_utf8(raw) if oid == _OIDC_ISSUER_V2 else
                    raw.decode("utf-8", "replace")))
    return out


def certificate_identity(cert_der: bytes) -> tuple[str, str]:
    """The Sigstore identity a Fulcio certificate states: (SAN, OIDC issuer).

    The SAN is the first email address or URI (``""`` when there is neither); the issuer comes
    from Fulcio's issuer extension (``1.3.6.1.4.1.57264.1.8``, else the older ``.1.1``), ``""``
    when absent. Nothing is verified here: use it to name a signer in messages, and let
    `verify_sigstore_bundle` decide.

    Raises:
        FormatError: not a DER certificate.
    """
    cert = _load_certificate(cert_der, "certificate")
    subject = ""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = san.get_values_for_type(x509.RFC822Name) + san.get_values_for_type(
            x509.UniformResourceIdentifier
        )
        subject = names[0] if names else ""
    except x509.ExtensionNotFound:
        pass
    issuer = ""
    for oid, der in ((_OIDC_ISSUER_V2, True), (_OIDC_ISSUER_V1, False)):
        try:
            ext = cert.extensions.get_extension_for_oid(oid).value
        except x509.ExtensionNotFound:
            continue
        raw = ext.value if isinstance(ext, x509.UnrecognizedExtension) else b""
        issuer = (_der_utf8(raw) if der else raw.decode("utf-8", "replace")) or issuer
        if issuer:
            break
    return subject, issuer


def _der_utf8(raw: bytes) -> str:
    """The text of a DER UTF8String (tag 12), ``""`` when it is not one."""
    if len(raw) < 2 or raw[0] != 0x0C:
        return ""
    n, start = raw[1], 2
    if n & 0x80:
        width = n & 0x7F
        n, start = int.from_bytes(raw[2 : 2 + width], "big"), 2 + width
    return raw[start : start + n].decode("utf-8", "replace")


def _check_signing_usage(cert: x509.Certificate, what: str) -> None:
    """model_signing's rule: digitalSignature key usage, or the codeSigning extended usage."""
    try:
        if cert.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature:
            return
    except x509.ExtensionNotFound:
        pass
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        if x509.oid.ExtendedKeyUsageOID.CODE_SIGNING in eku:
            return
    except x509.ExtensionNotFound:
        pass
    raise SignatureError(
        f"{what}: the signing certificate may not sign (no digitalSignature usage)"
    )


def _verify_with_keys(
    bundle: SigstoreBundle, keys: Sequence[PublicKey], digest: bytes | None, what: str
) -> PublicKey:
    """The first trusted key that verifies the bundle's signature."""
    if not keys:
        raise SignatureError(
            f"{what}: signed by a public key (hint {bundle.hint or 'none'}), and no key is trusted"
        )
    env = bundle.envelope
    for key in keys:
        if env is not None:
            ok = key.verify(env.signatures[0].sig, pae(env.payload_type, env.payload))
        else:
            assert digest is not None and bundle.message_signature is not None
            ok = _verify_prehashed(key, bundle.message_signature, digest)
        if ok:
            return key
    hinted = [k for k in keys if bundle.hint in (public_key_hint(k), _model_signing_hint(k))]
    detail = (
        f"invalid signature by the key its hint names ({hinted[0].keyid[:16]})"
        if hinted
        else f"signed by a key (hint {bundle.hint or 'none'}) that is none of the "
        f"{len(keys)} trusted key(s)"
    )
    raise SignatureError(f"{what}: {detail}")


def _model_signing_hint(key: PublicKey) -> str:
    """model_signing's key-mode hint: hex sha256 of the key's PEM."""
    return hashlib.sha256(key.to_pem()).hexdigest()


def _verify_prehashed(key: PublicKey, signature: bytes, digest: bytes) -> bool:
    """An ECDSA P-256 signature over a SHA-256 digest (a message signature in key mode)."""
    pub = serialization.load_der_public_key(key.spki_der)
    if isinstance(pub, ed25519.Ed25519PublicKey) or not isinstance(pub, ec.EllipticCurvePublicKey):
        # Ed25519 signs the message itself; a bundle carries only its digest.
        return False
    try:
        pub.verify(signature, digest, ec.ECDSA(Prehashed(hashes.SHA256())))
    except (InvalidSignature, ValueError):
        return False
    return True


def _check_subject(env: Envelope, digest: bytes, what: str) -> None:
    # Only an in-toto payload has subjects: a signer's envelope of another type is not read as
    # one, whatever its bytes say (DSSE: reject a payloadType the verifier does not expect).
    if env.payload_type != INTOTO_PAYLOAD_TYPE:
        raise FormatError(
            f"{what}: payloadType {env.payload_type!r}, want {INTOTO_PAYLOAD_TYPE!r}")
    obj = load_object(env.payload, f"{what}: DSSE payload")
    if obj.get("_type") not in _STATEMENT_TYPES:
        raise FormatError(f"{what}: DSSE payload is not an in-toto statement")
    subjects = obj.get("subject")
    if not isinstance(subjects, list):
        raise FormatError(f"{what}: statement has no subject list")
    want = digest.hex()
    for s in subjects:
        if (
            isinstance(s, dict)
            and isinstance(s.get("digest"), dict)
            and s["digest"].get("sha256") == want
        ):
            return
    raise SignatureError(f"{what}: no subject of the signed statement has sha256 {want}")


# -- keyless: the sigstore package ------------------------------------------------------------


def _verify_keyless(
    bundle: SigstoreBundle,
    identities: Sequence[Identity],
    trusted_root: bytes | None,
    digest: bytes | None,
    what: str,
) -> BundleSigner:
    """Verify a keyless bundle with the ``sigstore`` package (imported here, lazily)."""
    try:
        from sigstore.errors import Error as SigstoreError
        from sigstore.hashes import HashAlgorithm, Hashed  # type: ignore[attr-defined]
        from sigstore.models import Bundle
        from sigstore.verify import Verifier
        from sigstore.verify.policy import Identity as SigstoreIdentity
    except ImportError as e:
        raise NotVerifiableHere(f"{what}: keyless Sigstore signature: {NOT_INSTALLED} ({e})") from e
    _quiet_sigstore_logs()
    # The identity first (certificate only, sigstore's own matching), to name the signer when
    # it is not trusted; then the full verification, for the identity that matched. The
    # certificate is the attacker's until the chain is checked: whatever its extensions hold
    # (no SAN, text that is not UTF-8) it is refused, never raised through.
    leaf = _load_certificate(bundle.certificates[0], what)
    matched = None
    for ident in identities:
        try:
            SigstoreIdentity(identity=ident.subject, issuer=ident.issuer).verify(leaf)
        except (SigstoreError, ValueError, x509.ExtensionNotFound):
            continue
        matched = ident
        break
    if matched is None:
        subject, issuer = certificate_identity(bundle.certificates[0])
        why = ""
        if Identity(issuer, subject) in identities and _OIDC_ISSUER_V1 not in dict(_issuers(leaf)):
            why = (f": its certificate has no OIDC issuer extension {_OIDC_ISSUER_V1.dotted_string}"
                   ", the one the sigstore package checks")
        raise SignatureError(
            f"{what}: signed by identity {subject or '(none)'} (issuer {issuer or 'none'}), "
            f"which is none of the {len(identities)} trusted identit"
            f"{'y' if len(identities) == 1 else 'ies'}{why}"
        )
    # sigstore reads the issuer from .1.1 only; the certificate may say another in .1.8 (which
    # our messages read first, and newer clients trust): every issuer it states must be ours.
    for oid, value in _issuers(leaf):
        if value != matched.issuer:
            raise SignatureError(
                f"{what}: signed by identity {matched.subject} (issuer {matched.issuer}), but "
                f"its OIDC issuer extension {oid.dotted_string} says {value!r}"
            )
    policy = SigstoreIdentity(identity=matched.subject, issuer=matched.issuer)
    try:
        root = _trusted_root(trusted_root)
        sbundle = Bundle.from_json(bundle.data)
        verifier = Verifier(trusted_root=root)
        if bundle.envelope is not None:
            verifier.verify_dsse(sbundle, policy)
        else:
            assert digest is not None
            verifier.verify_artifact(
                Hashed(algorithm=HashAlgorithm.SHA2_256, digest=digest), sbundle, policy
            )
        cert = sbundle.signing_certificate
        signed_at = _verified_times(verifier, sbundle, what)
    # pydantic's ValidationError is a ValueError; a certificate of the trusted CA without the
    # key usages sigstore reads raises ExtensionNotFound.
    except (SigstoreError, ValueError, x509.ExtensionNotFound) as e:
        raise SignatureError(f"{what}: keyless signature does not verify: {_first_line(e)}") from e
    # The ephemeral key identifies nothing; its keyid is reported, never trusted.
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return BundleSigner(hashlib.sha256(spki).hexdigest(), matched, signed_at)


def _verified_times(verifier: Any, sbundle: Any, what: str) -> tuple[tuple[str, str], ...]:
    """The signing times sigstore established for a bundle it has just verified, with their
    sources: its ``_establish_time`` (sigstore 4.x), the times it checked the chain at.

    A revoked identity is judged by them (`identity_signers`). Where the installed ``sigstore``
    yields none (another version), the signature counts for nothing: fail closed.
    """
    establish = getattr(verifier, "_establish_time", None)
    found = establish(sbundle) if callable(establish) else None
    if not found:
        raise SignatureError(
            f"{what}: the sigstore package verified no signing time that can be read here "
            "(a revoked identity is judged by it)"
        )
    out = []
    for ts in found:
        when = ts.time if ts.time.tzinfo else ts.time.replace(tzinfo=UTC)
        source = _TIME_SOURCES.get(getattr(ts.source, "name", ""), "a time sigstore verified")
        out.append((when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), source))
    return tuple(out)


_TIME_SOURCES = {
    "TRANSPARENCY_SERVICE": "Rekor's integrated time",
    "TIMESTAMP_AUTHORITY": "a signed timestamp's genTime",
}


def _first_line(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    if isinstance(e.args, tuple) and len(e.args) > 1:
        text = " ".join(str(a) for a in e.args)
    return text.strip().splitlines()[0][:300]


def trusted_root_bytes(root: Mapping[str, Any] | None) -> bytes | None:
    """A policy's ``sigstore_trusted_root`` (`verify.policy.TrustPolicy`) as the
    ``trusted_root.json`` bytes the functions here take; None (the production root) for none."""
    return None if root is None else json.dumps(root, sort_keys=True).encode("utf-8")


@functools.lru_cache(maxsize=8)
def _trusted_root(data: bytes | None) -> Any:
    """The ``sigstore`` TrustedRoot from ``trusted_root.json`` bytes, or the production one.

    The production root is the one the installed ``sigstore`` package ships (or its TUF cache
    holds): offline, it is never refreshed here.
    """
    # trustroot_v1 is what TrustedRoot.from_file parses with; it reads a path, we have bytes.
    from sigstore.models import (  # type: ignore[attr-defined]
        ClientTrustConfig,
        TrustedRoot,
        trustroot_v1,
    )

    if data is None:
        return ClientTrustConfig.production(offline=True).trusted_root
    return TrustedRoot(trustroot_v1.TrustedRoot.from_json(data))


def _quiet_sigstore_logs() -> None:
    # sigstore logs warnings (offline TUF, root CAs in chains) through the root logger's last
    # resort handler; our messages say what matters, on our terms.
    log = logging.getLogger("sigstore")
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())


# -- our envelopes' keyless signatures ------------------------------------------------------


def verify_envelope_signature(
    envelope: Envelope,
    signature: Signature,
    bundle_bytes: bytes,
    *,
    identities: Iterable[Identity],
    trusted_root: bytes | None = None,
    what: str = "envelope",
) -> BundleSigner:
    """Verify one keyless signature of one of our envelopes with its Sigstore bundle.

    Steps:
        1. The signature's keyid is `bundle_keyid` of the bundle (the envelope names it).
        2. The bundle signs exactly this envelope's payloadType and payload, with exactly this
           signature, and verifies in keyless mode for one of ``identities``.

    Args:
        envelope: the envelope the signature belongs to.
        signature: one of its signatures.
        bundle_bytes: the bundle stored under ``sha256:<signature.keyid>``.
        identities: the identities that may count (e.g. one role's).
        trusted_root: ``trusted_root.json`` bytes named by the policy, or None for production.
        what: names the envelope in messages.

    Returns:
        The signer, with the matched identity.

    Raises:
        SignatureError: the keyid does not name this bundle, or the bundle does not verify.
        NotVerifiableHere: the ``sigstore`` package is not installed.
        FormatError: the bundle is malformed.
    """
    # (1)
    if signature.keyid != bundle_keyid(bundle_bytes):
        raise SignatureError(
            f"{what}: signature keyid {signature.keyid[:16]} does not name this Sigstore bundle"
        )
    # (2)
    verified = verify_sigstore_bundle(
        bundle_bytes,
        identities=identities,
        trusted_root=trusted_root,
        expected_payload=(envelope.payload_type, envelope.payload),
        expected_signature=signature.sig,
        what=f"{what}: Sigstore bundle {signature.keyid[:16]}",
    )
    if verified.mode != "keyless":
        raise SignatureError(f"{what}: bundle {signature.keyid[:16]} is not a keyless signature")
    return verified.signer


def identity_signers(
    envelope: Envelope,
    blob: Callable[[str], bytes | None],
    identities: Iterable[Identity],
    *,
    trusted_root: bytes | None = None,
    revoked: Callable[[Identity, str], RevokedKey | RevokedIdentity | None] = lambda i, t: None,
    what: str = "envelope",
) -> tuple[frozenset[Identity], tuple[str, ...]]:
    """Which trusted identities signed an envelope by keyless signatures, and notes on the rest.

    A signature counts when its keyid names a blob (``blob("sha256:" + keyid)``) that is a
    Sigstore bundle verifying for it (`verify_envelope_signature`). Signatures whose keyid names
    no blob are key signatures (or keyless ones whose bundle is missing): they are left to
    ``dsse.verify_envelope`` and count for nothing here. A bundle that cannot be verified here,
    or does not verify, is reported in a note and counts for nothing (fail closed); so is one
    whose identity ``revoked`` names a revocation for at any signing time sigstore verified
    (`BundleSigner.signed_at`): the log entry's time, which ``revoked_identities`` are first
    judged by (`verify.judge.signing_keys`), is written by the log's operator, who could
    backdate it before the compromise.

    Args:
        envelope: the envelope.
        blob: reads a stored blob by digest, None when absent.
        identities: the identities that may count.
        trusted_root: as `verify_envelope_signature`.
        revoked: the revocation of an identity at a time (``YYYY-MM-DDTHH:MM:SSZ``), None when
            its signature counts (`verify.policy.TrustPolicy.revocation` at the record's index).
        what: names the envelope in notes.

    Returns:
        The distinct identities that verified, and one note per keyless signature that did not.
    """
    trusted = tuple(identities)
    found: set[Identity] = set()
    notes: list[str] = []
    for sig in envelope.signatures:
        if not _HEX64.fullmatch(sig.keyid):
            continue
        data = blob("sha256:" + sig.keyid)
        if data is None:
            continue
        try:
            signer = verify_envelope_signature(
                envelope, sig, data, identities=trusted, trusted_root=trusted_root, what=what
            )
        except (SignatureError, FormatError) as e:
            notes.append(str(e))
            continue
        assert signer.identity is not None
        gone = [(t, src, r) for t, src in signer.signed_at if (r := revoked(signer.identity, t))]
        if gone:
            t, src, r = gone[0]
            notes.append(
                f"{what}: signed by identity {signer.identity.subject} (issuer "
                f"{signer.identity.issuer}) at {t} ({src}), which the policy revokes: "
                f"{r.describe()}"
            )
            continue
        found.add(signer.identity)
    return frozenset(found), tuple(notes)


def parse_trusted_root(value: object, base_dir: Path | None, what: str) -> dict[str, Any]:
    """A policy's ``sigstore_trusted_root`` (for ``verify.policy``): a path to a
    ``trusted_root.json`` (TOML form, relative to the policy file) or the object itself (JSON
    form, so the recorded policy verifies alone).

    Raises:
        FormatError: not readable, not an object, or not a Sigstore trusted root.
    """
    what = f"{what}: sigstore_trusted_root"
    if isinstance(value, str) and base_dir is not None:
        path = (base_dir / value) if not Path(value).is_absolute() else Path(value)
        try:
            value = load_object(path.read_bytes(), f"{what} ({path})")
        except OSError as e:
            raise FormatError(f"{what}: cannot read {path}: {e.strerror}") from e
    if not isinstance(value, dict):
        raise FormatError(
            f"{what}: must be a path to a trusted_root.json (or, in JSON, its object)"
        )
    media_type = value.get("mediaType")
    if not isinstance(media_type, str) or not media_type.startswith(
        "application/vnd.dev.sigstore.trustedroot"
    ):
        raise FormatError(f"{what}: mediaType {media_type!r} is not a Sigstore trusted root")
    return value
