"""Keyless signing through Sigstore: a short-lived Fulcio certificate for an OIDC identity.

Scope: `KeylessSigner` signs a DSSE payload (an in-toto statement) the way ``sigstore sign``
does, through the ``sigstore`` package (imported lazily, inside `KeylessSigner.sign_dsse`):

1. an OIDC identity token: the one given, else ``SIGSTORE_ID_TOKEN``, else the ambient
   credential of a CI provider (sigstore's detection: GitHub Actions with ``id-token: write``,
   GitLab CI, Buildkite, CircleCI, Google Cloud);
2. the Sigstore instance: the production one (its trust material refreshed by TUF), or the
   client trust configuration file named by ``TRAJLEDGER_SIGSTORE_TRUST_CONFIG`` (sigstore's
   ``--trust-config`` format: trusted root + signing config, for staging or a private instance);
3. an ephemeral P-256 key, a Fulcio certificate binding it to the token's identity (its SCT
   checked), the DSSE signature over our exact payload bytes, a Rekor entry; the result is a
   Sigstore bundle v0.3.

The signature goes into our envelope with keyid = `bundle_keyid` (sha256 of the bundle's
bytes), and the bundle is stored in the object store under that digest
(``ledger/record.py``), so the envelope and its log entry name it; ``verify.sigstore_adapter``
verifies it offline. Network: Fulcio and Rekor (and TUF for production) are contacted while
signing; nothing else needs the network.

Loading this module loads neither ``sigstore`` nor the Sigstore bundle adapter: a command that
takes ``--sigstore`` and is run with keys only pays for neither.

Non-scope: the interactive browser flow (run ``python -m sigstore`` or pass a token); verifying
(``verify/sigstore_adapter.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE

from .errors import KeyError_, LedgerError

__all__ = [
    "TOKEN_ENV",
    "TRUST_CONFIG_ENV",
    "KeylessSignature",
    "KeylessSigner",
    "signers_from_options",
]

TOKEN_ENV = "SIGSTORE_ID_TOKEN"
"""The environment variable holding an OIDC identity token (sigstore's own name for it)."""
TRUST_CONFIG_ENV = "TRAJLEDGER_SIGSTORE_TRUST_CONFIG"
"""Names a Sigstore client trust configuration file; unset: the production instance."""

_RENEW_BEFORE = timedelta(minutes=1)
"""A certificate this close to its expiry is replaced before signing (Fulcio's last ten
minutes, sigstore's check and ours read different clocks)."""

_NO_TOKEN = (
    "keyless signing needs an OIDC identity token: set {env}, or run where sigstore detects an "
    "ambient one (GitHub Actions with 'permissions: id-token: write', GitLab CI, Buildkite, "
    "CircleCI, Google Cloud)"
)


@dataclass(frozen=True)
class KeylessSignature:
    """One keyless signature.

    Attributes:
        signature: the DSSE signature bytes (over PAE of our payload).
        bundle: the Sigstore bundle (JSON bytes) holding the certificate, the Rekor entry and
            the signature; stored as an object under ``sha256:<keyid>``.
        subject: the certificate's identity (SAN).
        issuer: the certificate's OIDC issuer.
    """

    signature: bytes
    bundle: bytes
    subject: str
    issuer: str

    @property
    def keyid(self) -> str:
        """The keyid this signature carries in our envelopes (hex sha256 of the bundle)."""
        from trajledger.verify.sigstore_adapter import bundle_keyid

        return bundle_keyid(self.bundle)


class KeylessSigner:
    """Signs with Sigstore keyless signing. Build with `from_environment` (or give a token).

    One signer holds one Fulcio certificate for all it signs (until the certificate expires).
    """

    name = "sigstore"

    def __init__(self, token: str | None = None, *, trust_config: Path | None = None) -> None:
        """Keep the settings; nothing is contacted until `sign_dsse`.

        Args:
            token: an OIDC identity token; None to detect an ambient one when signing.
            trust_config: a Sigstore client trust configuration file; None for production.
        """
        self._token = token
        self._trust_config = trust_config
        self._signer: Any = None
        self._context: Any = None
        self._not_after: datetime | None = None
        self.signed: list[KeylessSignature] = []
        """Every signature made, in order (for reports)."""

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> KeylessSigner:
        """Settings from ``SIGSTORE_ID_TOKEN`` and ``TRAJLEDGER_SIGSTORE_TRUST_CONFIG``."""
        env = os.environ if env is None else env
        trust = env.get(TRUST_CONFIG_ENV, "").strip()
        return cls(
            env.get(TOKEN_ENV, "").strip() or None, trust_config=Path(trust) if trust else None
        )

    def identity_token(self) -> Any:
        """The parsed ``sigstore.oidc.IdentityToken`` (given, else detected).

        Raises:
            KeyError_: no token, or a malformed or expired one, or ``sigstore`` is missing.
        """
        from trajledger.verify.sigstore_adapter import sigstore_available

        if not sigstore_available():
            raise KeyError_(
                "keyless signing needs the sigstore package, which is not installed: "
                "pip install 'trajledger[sigstore]'"
            )
        from sigstore.oidc import IdentityError, IdentityToken, detect_credential

        raw = self._token
        if raw is None:
            try:
                raw = detect_credential()
            except IdentityError as e:
                raise KeyError_(f"keyless signing: ambient OIDC credential: {e}") from e
        if not raw:
            raise KeyError_(_NO_TOKEN.format(env=TOKEN_ENV))
        try:
            return IdentityToken(raw)
        except IdentityError as e:
            # Its cause names the claim that is wrong (audience, expiry, a missing claim).
            cause = f": {e.__cause__}" if e.__cause__ else ""
            raise KeyError_(
                f"keyless signing: the OIDC identity token is not usable: {e}{cause}"
            ) from e

    def _certificate_expiring(self) -> bool:
        """Whether the certificate the signer holds expires within `_RENEW_BEFORE` (then a new
        one is requested: sigstore's signer would refuse to sign with it)."""
        if self._not_after is None:
            return False
        return datetime.now(UTC) + _RENEW_BEFORE >= self._not_after

    def _signing_context(self) -> Any:
        from sigstore.models import ClientTrustConfig
        from sigstore.sign import SigningContext

        if self._trust_config is None:
            config = ClientTrustConfig.production()
        else:
            try:
                data = self._trust_config.read_text("utf-8")
            except OSError as e:
                raise LedgerError(
                    f"Sigstore trust config {self._trust_config}: cannot read: {e.strerror}"
                ) from e
            try:
                config = ClientTrustConfig.from_json(data)
            except ValueError as e:
                raise LedgerError(
                    f"Sigstore trust config {self._trust_config}: not a client trust "
                    f"configuration: {str(e).splitlines()[0]}"
                ) from e
        return SigningContext.from_trust_config(config)

    def sign_dsse(self, payload_type: str, payload: bytes) -> KeylessSignature:
        """Sign a DSSE payload keylessly.

        Steps:
            1. The payload is an in-toto statement (Sigstore signs nothing else as DSSE).
            2. Get the identity token (`identity_token`) and the signing context.
            3. Get a Fulcio certificate (once per signer, again when it is about to expire) and
               sign; Rekor logs the entry.
            4. Check the bundle: it signs exactly ``payload``, with one signature.

        Returns:
            The signature, its bundle and the certificate's identity.

        Raises:
            FormatError: the payload type is not in-toto.
            KeyError_: no usable identity token; ``sigstore`` not installed.
            LedgerError: Fulcio, Rekor or TUF cannot be reached or refuse (the message says
                which and why).
        """
        from cryptography import x509

        from trajledger.verify.errors import FormatError
        from trajledger.verify.sigstore_adapter import SigstoreBundle, certificate_identity

        # (1)
        if payload_type != INTOTO_PAYLOAD_TYPE:
            raise FormatError(
                f"keyless signing: payloadType {payload_type!r}, Sigstore signs "
                f"{INTOTO_PAYLOAD_TYPE!r} only"
            )
        # (2)
        token = self.identity_token()
        from sigstore import dsse

        step = "trust"
        try:
            if self._context is None:
                self._context = self._signing_context()
            # (3)
            step = "certificate"
            if self._signer is None or self._certificate_expiring():
                self._signer = self._context.signer(token, cache=True).__enter__()
                self._not_after = None
            step = "entry"
            bundle = self._signer.sign_dsse(dsse.Statement(payload))
        except Exception as e:
            if not _sigstore_failure(e):
                raise  # a bug, ours or sigstore's: not a service's answer
            raise LedgerError(f"keyless signing failed: {_where(step, e)}{_describe(e)}") from e
        data = bundle.to_json().encode("utf-8")
        # (4)
        parsed = SigstoreBundle.from_bytes(data, "Sigstore bundle from signing")
        env = parsed.envelope
        if env is None or env.payload != payload or env.payload_type != payload_type:
            raise LedgerError("keyless signing: the Sigstore bundle does not sign our payload")
        certificate = parsed.certificates[0]
        self._not_after = x509.load_der_x509_certificate(certificate).not_valid_after_utc
        subject, issuer = certificate_identity(certificate)
        out = KeylessSignature(env.signatures[0].sig, data, subject, issuer)
        self.signed.append(out)
        return out


def _sigstore_failure(e: Exception) -> bool:
    """Whether ``e`` is a signing service's (or the network's) answer rather than a bug.

    sigstore's public errors and the HTTP errors of ``requests`` are named. Its Fulcio and Rekor
    clients raise exception classes that it defines only in its private modules
    (``sigstore._internal``, which change between releases without notice): those are
    recognised by the package that defines them, never imported by name.
    """
    import requests
    from sigstore.errors import Error as SigstoreError
    from sigstore.oidc import ExpiredIdentity

    if isinstance(e, SigstoreError | ExpiredIdentity | requests.RequestException):
        return True
    return any(k.__module__.split(".", 1)[0] == "sigstore" for k in type(e).__mro__)


def _where(step: str, e: Exception) -> str:
    """Which service failed, from the step that raised ``e`` (see `KeylessSigner.sign_dsse`)."""
    from sigstore.errors import TUFError
    from sigstore.oidc import ExpiredIdentity

    if isinstance(e, ExpiredIdentity):
        return "the OIDC identity token expired: "
    if isinstance(e, TUFError):
        return (
            "the production trust root is refreshed over the network "
            f"(tuf-repo-cdn.sigstore.dev; or set {TRUST_CONFIG_ENV}): "
        )
    return {
        "certificate": "Fulcio (the certificate authority) refused or failed: ",
        "entry": "Rekor (the transparency log) refused or failed: ",
    }.get(step, "")


def _describe(e: BaseException) -> str:
    """One line: what failed, and the underlying cause (e.g. a refused connection)."""
    text = str(e).strip()
    cause = e.__cause__ or e.__context__
    if cause is not None and str(cause).strip() and str(cause) not in text:
        text = f"{text} ({str(cause).strip()})" if text else str(cause).strip()
    return (text or type(e).__name__).splitlines()[0][:400]


def signers_from_options(ledger: Any, key_names: Sequence[str], sigstore: bool) -> list[Any]:
    """The signers a command's ``--key NAME`` (repeatable) and ``--sigstore`` options name.

    Keys come first (they never need the network); the keyless signer, if asked for, last.

    Raises:
        KeyError_: an unknown key (from the key store).
        ValueError: neither a key nor ``--sigstore`` (a usage error for the command).
    """
    if not key_names and not sigstore:
        raise ValueError("give --key NAME (repeatable) or --sigstore")
    out: list[Any] = [ledger.keys.signer(k) for k in key_names]
    if sigstore:
        out.append(KeylessSigner.from_environment())
    return out
