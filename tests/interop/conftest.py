"""Fixtures for the interoperability tests (Sigstore, sigstore-js, model_signing).

- ``sigstore_instance``: a private Sigstore instance on 127.0.0.1, built for the tests (TEST
  ONLY keys, generated per session): a Fulcio that issues real X.509 code-signing certificates
  with an embedded SCT from its CT log key, for the identity in an OIDC token it issued (an
  HS256 JWT it checks); a Rekor (API v1) that logs ``dsse`` and ``hashedrekord`` entries in an
  RFC 6962 tree, returning inclusion proofs, signed checkpoints and signed entry timestamps.
  Its ``trusted_root.json`` and client trust configuration let the real ``sigstore`` package
  sign against it (``SigningContext``) and verify what it signed (``Verifier``): the whole
  keyless path runs offline. It is not a complete Fulcio or Rekor: one CA, no OIDC discovery,
  no search API, no Rekor v2, no timestamp authority; its OIDC discovery document exists
  (model_signing reads it) but no OAuth flow does.
- ``sigstore_js_verify``: verifies a Sigstore bundle with sigstore-js offline, the public key
  as its only trust material: ``(bundle, public key PEM file, key hint) -> result`` (a dict
  with ``verified`` and, on success, the key type and the payload's sha256).
- ``sigstore_js``: the sigstore-js verifier (npm ``sigstore``, pinned), installed once into a
  cache directory (``$TRAJLEDGER_TEST_NPM_CACHE``, default ``$XDG_CACHE_HOME/trajledger-tests``,
  else ``~/.cache/trajledger-tests``) when
  node and npm are present; the tests that need it skip, saying why, when they are not.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, hmac, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ISSUER_V1 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
ISSUER_V2 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
SCT_LIST = x509.ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")
TOKEN_ISSUER = "https://oidc.test.invalid"
"""The OIDC issuer of the test instance's tokens (never contacted)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _der(tag: int, body: bytes) -> bytes:
    return bytes([tag]) + _der_length(len(body)) + body


def _spki(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 Merkle tree hash over leaf hashes."""
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def _path(index: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 6962 PATH(m, D[n]): the audit path of leaf ``index``."""
    if len(leaves) == 1:
        return []
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    if index < k:
        return [*_path(index, leaves[:k]), _mth(leaves[k:])]
    return [*_path(index - k, leaves[k:]), _mth(leaves[:k])]


@dataclass
class SigstoreInstance:
    """A private Sigstore instance for tests: see the module docstring."""

    url: str = ""
    ca_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    ct_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    rekor_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    token_secret: bytes = field(default_factory=lambda: os.urandom(32))
    leaves: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ca_cert: x509.Certificate | None = None
    start: datetime = field(default_factory=lambda: datetime.now(UTC) - timedelta(hours=1))
    fail_fulcio: bool = False
    fail_rekor: bool = False

    def __post_init__(self) -> None:
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "trajledger tests (TEST ONLY)"),
                x509.NameAttribute(NameOID.COMMON_NAME, "test-fulcio"),
            ]
        )
        pub = self.ca_key.public_key()
        self.ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(pub)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.start)
            .not_valid_after(self.start + timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(pub), critical=False)
            .sign(self.ca_key, hashes.SHA256())
        )

    # -- trust material --------------------------------------------------------------------

    @property
    def rekor_log_id(self) -> bytes:
        return hashlib.sha256(_spki(self.rekor_key.public_key())).digest()

    @property
    def ct_log_id(self) -> bytes:
        return hashlib.sha256(_spki(self.ct_key.public_key())).digest()

    def _log(self, key: ec.EllipticCurvePrivateKey, url: str) -> dict[str, Any]:
        spki = _spki(key.public_key())
        return {
            "baseUrl": url,
            "hashAlgorithm": "SHA2_256",
            "publicKey": {
                "rawBytes": _b64(spki),
                "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                "validFor": {"start": self.start.strftime("%Y-%m-%dT%H:%M:%SZ")},
            },
            "logId": {"keyId": _b64(hashlib.sha256(spki).digest())},
        }

    def trusted_root(self) -> dict[str, Any]:
        assert self.ca_cert is not None
        start = self.start.strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [self._log(self.rekor_key, self.url)],
            "certificateAuthorities": [
                {
                    "subject": {"organization": "trajledger tests", "commonName": "test-fulcio"},
                    "uri": self.url,
                    "certChain": {
                        "certificates": [
                            {
                                "rawBytes": _b64(
                                    self.ca_cert.public_bytes(serialization.Encoding.DER)
                                )
                            }
                        ]
                    },
                    "validFor": {"start": start},
                }
            ],
            "ctlogs": [self._log(self.ct_key, self.url)],
            "timestampAuthorities": [],
        }

    def trust_config(self) -> dict[str, Any]:
        start = self.start.strftime("%Y-%m-%dT%H:%M:%SZ")

        def service(url: str) -> dict[str, Any]:
            return {
                "url": url,
                "majorApiVersion": 1,
                "validFor": {"start": start},
                "operator": "trajledger-tests",
            }

        return {
            "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
            "trustedRoot": self.trusted_root(),
            "signingConfig": {
                "mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
                "caUrls": [service(self.url)],
                "oidcUrls": [service(self.url + "/oauth2")],
                "rekorTlogUrls": [service(self.url)],
                "tsaUrls": [],
                "rekorTlogConfig": {"selector": "ANY"},
                "tsaConfig": {"selector": "ANY"},
            },
        }

    # -- OIDC -----------------------------------------------------------------------------

    def token(self, email: str, *, ttl: int = 600, aud: str = "sigstore") -> str:
        """An HS256 identity token for ``email``, as an OIDC provider would issue it."""
        now = int(time.time())
        header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        claims = {
            "iss": TOKEN_ISSUER,
            "sub": email,
            "email": email,
            "email_verified": True,
            "aud": aud,
            "iat": now - 5,
            "nbf": now - 5,
            "exp": now + ttl,
        }
        body = _b64url(json.dumps(claims).encode())
        mac = hmac.HMAC(self.token_secret, hashes.SHA256())
        mac.update(f"{header}.{body}".encode())
        return f"{header}.{body}.{_b64url(mac.finalize())}"

    def _check_token(self, token: str) -> dict[str, Any]:
        header, body, sig = token.split(".")
        mac = hmac.HMAC(self.token_secret, hashes.SHA256())
        mac.update(f"{header}.{body}".encode())
        mac.verify(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)))
        claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        if claims["exp"] < time.time() or claims["aud"] != "sigstore":
            raise ValueError("token expired or for another audience")
        return claims

    # -- Fulcio ---------------------------------------------------------------------------

    def issue(
        self,
        public_key: ec.EllipticCurvePublicKey,
        email: str,
        *,
        issuer_v1: str | None = TOKEN_ISSUER,
        issuer_v2: str | None = TOKEN_ISSUER,
        valid: tuple[timedelta, timedelta] = (timedelta(seconds=-30), timedelta(minutes=10)),
    ) -> x509.Certificate:
        """A Fulcio-style code-signing certificate for ``email``, with an embedded SCT.

        The keywords make the certificates a faulty or hostile CA would issue: the OIDC issuer
        in the old (``.1.1``) and new (``.1.8``) extensions (None: left out), and the validity
        window (start and end, from now)."""
        assert self.ca_cert is not None
        now = datetime.now(UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.ca_cert.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now + valid[0])
            .not_valid_after(now + valid[1])
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()),
                False,
            )
            .add_extension(x509.SubjectAlternativeName([x509.RFC822Name(email)]), critical=True)
        )
        if issuer_v1 is not None:
            builder = builder.add_extension(
                x509.UnrecognizedExtension(ISSUER_V1, issuer_v1.encode()), False
            )
        if issuer_v2 is not None:
            builder = builder.add_extension(
                x509.UnrecognizedExtension(ISSUER_V2, _der(0x0C, issuer_v2.encode())), False
            )
        precert = builder.sign(self.ca_key, hashes.SHA256())
        tbs = precert.tbs_certificate_bytes
        ts = int(time.time() * 1000)
        issuer_key_hash = hashlib.sha256(_spki(self.ca_key.public_key())).digest()
        signed = (
            struct.pack("!BBQH", 0, 0, ts, 1)
            + issuer_key_hash
            + len(tbs).to_bytes(3, "big")
            + tbs
            + struct.pack("!H", 0)
        )
        sig = self.ct_key.sign(signed, ec.ECDSA(hashes.SHA256()))
        sct = (
            b"\x00"
            + self.ct_log_id
            + struct.pack("!QH", ts, 0)
            + bytes([4, 3])
            + struct.pack("!H", len(sig))
            + sig
        )
        sct_list = struct.pack("!HH", len(sct) + 2, len(sct)) + sct
        cert = builder.add_extension(
            x509.UnrecognizedExtension(SCT_LIST, _der(0x04, sct_list)), False
        ).sign(self.ca_key, hashes.SHA256())
        assert cert.tbs_precertificate_bytes == tbs, "the SCT must cover the final certificate"
        return cert

    def fulcio(self, body: dict[str, Any], authorization: str) -> dict[str, Any]:
        claims = self._check_token(authorization.removeprefix("Bearer "))
        csr = x509.load_pem_x509_csr(base64.b64decode(body["certificateSigningRequest"]))
        assert csr.is_signature_valid
        key = csr.public_key()
        assert isinstance(key, ec.EllipticCurvePublicKey)
        cert = self.issue(key, claims["email"])
        assert self.ca_cert is not None
        chain = [c.public_bytes(serialization.Encoding.PEM).decode() for c in (cert, self.ca_cert)]
        return {"signedCertificateEmbeddedSct": {"chain": {"certificates": chain}}}

    # -- Rekor v1 -------------------------------------------------------------------------

    def rekor(self, proposed: dict[str, Any]) -> dict[str, Any]:
        if proposed["kind"] == "dsse":
            content = proposed["spec"]["proposedContent"]
            envelope = json.loads(content["envelope"])
            payload = base64.b64decode(envelope["payload"])
            spec = {
                "envelopeHash": {
                    "algorithm": "sha256",
                    "value": hashlib.sha256(content["envelope"].encode()).hexdigest(),
                },
                "payloadHash": {
                    "algorithm": "sha256",
                    "value": hashlib.sha256(payload).hexdigest(),
                },
                "signatures": [
                    {"signature": s["sig"], "verifier": content["verifiers"][0]}
                    for s in envelope["signatures"]
                ],
            }
            entry = {"apiVersion": "0.0.1", "kind": "dsse", "spec": spec}
        else:
            entry = proposed
        body = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
        with self.lock:
            index = len(self.leaves)
            self.leaves.append(hashlib.sha256(b"\x00" + body).digest())
            leaves = list(self.leaves)
        root = _mth(leaves)
        integrated = int(time.time())
        log_id = self.rekor_log_id
        set_payload = json.dumps(
            {
                "body": _b64(body),
                "integratedTime": integrated,
                "logID": log_id.hex(),
                "logIndex": index,
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        note = f"test-rekor - 1\n{len(leaves)}\n{_b64(root)}\n"
        note_sig = self.rekor_key.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
        checkpoint = f"{note}\n\u2014 test-rekor {_b64(log_id[:4] + note_sig)}\n"
        return {
            hashlib.sha256(body).hexdigest(): {
                "body": _b64(body),
                "integratedTime": integrated,
                "logID": log_id.hex(),
                "logIndex": index,
                "verification": {
                    "inclusionProof": {
                        "checkpoint": checkpoint,
                        "hashes": [h.hex() for h in _path(index, leaves)],
                        "logIndex": index,
                        "rootHash": root.hex(),
                        "treeSize": len(leaves),
                    },
                    "signedEntryTimestamp": _b64(
                        self.rekor_key.sign(set_payload, ec.ECDSA(hashes.SHA256()))
                    ),
                },
            }
        }


def _handler(instance: SigstoreInstance) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            # OIDC discovery only (model_signing's signer reads it even with a token given).
            if self.path != "/oauth2/.well-known/openid-configuration":
                self.send_error(404)
                return
            data = json.dumps(
                {
                    "issuer": TOKEN_ISSUER,
                    "authorization_endpoint": instance.url + "/oauth2/auth",
                    "token_endpoint": instance.url + "/oauth2/token",
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            try:
                if self.path == "/api/v2/signingCert" and not instance.fail_fulcio:
                    out = instance.fulcio(body, self.headers.get("Authorization", ""))
                    code = 200
                elif self.path == "/api/v1/log/entries" and not instance.fail_rekor:
                    out, code = instance.rekor(body), 201
                else:
                    out, code = {"code": 503, "message": "unavailable (test)"}, 503
            except (ValueError, KeyError, AssertionError) as e:
                out, code = {"code": 400, "message": f"refused: {e}"}, 400
            data = json.dumps(out).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@pytest.fixture(scope="session")
def sigstore_instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SigstoreInstance]:
    """A private Sigstore instance on 127.0.0.1 (see the module docstring)."""
    pytest.importorskip("sigstore", reason="the sigstore package (trajledger[sigstore])")
    instance = SigstoreInstance()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(instance))
    instance.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    old = os.environ.get("NO_PROXY")
    os.environ["NO_PROXY"] = ",".join(filter(None, [old, "127.0.0.1", "localhost"]))
    try:
        yield instance
    finally:
        server.shutdown()
        server.server_close()
        if old is None:
            os.environ.pop("NO_PROXY", None)
        else:
            os.environ["NO_PROXY"] = old


@pytest.fixture
def trust_files(sigstore_instance: SigstoreInstance, tmp_path: Path) -> tuple[Path, Path]:
    """The instance's client trust config and trusted root, as files: ``(config, root)``."""
    config = tmp_path / "client-trust-config.json"
    config.write_text(json.dumps(sigstore_instance.trust_config()))
    root = tmp_path / "trusted_root.json"
    root.write_text(json.dumps(sigstore_instance.trusted_root()))
    return config, root


# -- sigstore-js -------------------------------------------------------------------------------

SIGSTORE_JS = {"sigstore": "4.1.0", "@sigstore/verify": "3.1.0", "@sigstore/bundle": "4.0.0"}
"""Pinned npm packages: sigstore-js 4.1.0 and the verifier it is built on (node >= 20.17)."""


@pytest.fixture(scope="session")
def sigstore_js(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with sigstore-js installed (``node_modules``), cached across sessions."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are not installed: sigstore-js cannot run here")
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    base = Path(os.environ.get("TRAJLEDGER_TEST_NPM_CACHE") or Path(xdg) / "trajledger-tests")
    tag = hashlib.sha256(json.dumps(SIGSTORE_JS, sort_keys=True).encode()).hexdigest()[:12]
    target = base / f"sigstore-js-{tag}"
    if not (target / "node_modules" / "@sigstore" / "verify").is_dir():
        # Install into a fresh directory, then rename: parallel workers never see half of it.
        work = base / f".sigstore-js-{tag}-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        (work / "package.json").write_text(
            json.dumps({"name": "trajledger-tests", "private": True, "dependencies": SIGSTORE_JS})
        )
        run = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if run.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            pytest.skip(f"npm install of sigstore-js failed (no registry?): {run.stderr[-300:]}")
        try:
            work.rename(target)
        except OSError:
            shutil.rmtree(work, ignore_errors=True)  # another worker finished first
    return target


NODE_VERIFY = r"""
// Verify a Sigstore bundle with sigstore-js's verifier, offline: the public key is the only
// trust material (found by the bundle's hint), no transparency log or timestamp required.
const fs = require('fs');
const crypto = require('crypto');
const { bundleFromJSON } = require('@sigstore/bundle');
const { Verifier, toSignedEntity, toTrustMaterial } = require('@sigstore/verify');
const [bundleFile, keyFile, hint] = process.argv.slice(2);
const bundle = bundleFromJSON(JSON.parse(fs.readFileSync(bundleFile, 'utf8')));
const key = crypto.createPublicKey(fs.readFileSync(keyFile));
const root = { mediaType: 'application/vnd.dev.sigstore.trustedroot+json;version=0.1',
  tlogs: [], certificateAuthorities: [], ctlogs: [], timestampAuthorities: [] };
const keys = (h) => {
  if (h !== hint) throw new Error(`unknown key hint ${h}`);
  return { publicKey: key, validFor: () => true };
};
const verifier = new Verifier(toTrustMaterial(root, keys),
  { tlogThreshold: 0, ctlogThreshold: 0, tsaThreshold: 0 });
try {
  const signer = verifier.verify(toSignedEntity(bundle));
  const env = bundle.content.dsseEnvelope;
  console.log(JSON.stringify({ verified: true, key: signer.key.asymmetricKeyType,
    payloadType: env.payloadType, payloadSha256:
      crypto.createHash('sha256').update(env.payload).digest('hex') }));
} catch (e) {
  console.log(JSON.stringify({ verified: false, code: e.code || '', message: e.message }));
  process.exit(1);
}
"""


@pytest.fixture(scope="session")
def sigstore_js_verify(
    sigstore_js: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[Path, Path, str], dict[str, Any]]:
    """``verify(bundle, public_key_pem_file, hint)``: sigstore-js's verdict on a bundle."""
    node = shutil.which("node")
    assert node is not None
    script = tmp_path_factory.mktemp("sigstore-js") / "verify.js"
    script.write_text(NODE_VERIFY)

    def verify(bundle: Path, pub: Path, hint: str) -> dict[str, Any]:
        run = subprocess.run(
            [node, str(script), str(bundle), str(pub), hint],
            env={**os.environ, "NODE_PATH": str(sigstore_js / "node_modules")},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert run.stdout, run.stderr
        result: dict[str, Any] = json.loads(run.stdout)
        assert (run.returncode == 0) == result["verified"], run.stderr
        return result

    return verify
