"""``trajledger export REF --format sigstore``: an artifact's envelope as a Sigstore bundle v0.3.

Scope: one signature of a recorded envelope, written as the Sigstore bundle that sigstore-js,
sigstore-python, sigstore-go and ``cosign verify-blob-attestation`` read:

- a key signature: ``{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
  "verificationMaterial": {"publicKey": {"hint": H}, "tlogEntries": []}, "dsseEnvelope":
  {"payload", "payloadType", "signatures": [{"sig", "keyid"}]}}`` where H is the base64 sha256
  of the key's DER SPKI (our keyid, in base64) and the envelope is ours, byte for byte in its
  payload and signature. There is no transparency-log entry: a verifier checks it with the
  public key (cosign: ``--key K --insecure-ignore-tlog``; sigstore-js: a key selector and a
  tlog threshold of 0); our own log's inclusion proof travels in evidence bundles instead.
- a keyless signature: the Sigstore bundle stored when it was signed (its keyid names it),
  as it is.

A bundle holds exactly one signature. An envelope with several (co-signing) is refused unless
``--key`` names the signature to export (a key name of this ledger, or a keyid prefix); export
once per signer to hand over all of them.

Non-scope: verification (``verify/sigstore_adapter.py``), the evidence bundle (``exchange``).
Spec: protobuf-specs ``sigstore_bundle.proto``; DSSE v1; schemas/SPEC.md "Sigstore bundles".
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trajledger.verify.dsse import Envelope, Signature
from trajledger.verify.errors import FormatError
from trajledger.verify.sigstore_adapter import (
    BUNDLE_MEDIA_TYPE,
    SigstoreBundle,
    bundle_keyid,
    certificate_identity,
    verify_sigstore_bundle,
)

from .encode import b64encode
from .errors import LedgerError, cannot_write
from .fs import write_file_atomic

if TYPE_CHECKING:
    from .home import LedgerHome

__all__ = ["SigstoreExport", "envelope_signature_bundle", "export_sigstore"]

_HEX64 = re.compile(r"[0-9a-f]{64}")


def envelope_signature_bundle(envelope: Envelope, signature: Signature) -> bytes:
    """The Sigstore bundle v0.3 (key mode, no tlog entries) of one key signature of an envelope.

    Raises:
        ValueError: the signature is not one of the envelope's, or its keyid is not a keyid
            (64 lowercase hex: the hint is derived from it).
    """
    if signature not in envelope.signatures:
        raise ValueError("the signature is not one of the envelope's")
    if not _HEX64.fullmatch(signature.keyid):
        raise ValueError(f"signature keyid {signature.keyid!r} is not a key's sha256")
    bundle = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {
            "publicKey": {"hint": base64.b64encode(bytes.fromhex(signature.keyid)).decode()},
            "tlogEntries": [],
        },
        "dsseEnvelope": {
            "payload": b64encode(envelope.payload),
            "payloadType": envelope.payload_type,
            "signatures": [{"sig": b64encode(signature.sig), "keyid": signature.keyid}],
        },
    }
    return json.dumps(bundle, indent=2).encode("utf-8") + b"\n"


@dataclass(frozen=True)
class SigstoreExport:
    """What `export_sigstore` wrote.

    Attributes:
        digest: the artifact's digest.
        keyid: the exported signature's keyid.
        signer: who signed (a key name of this ledger, ``key <keyid>``, or the identity of a
            keyless signature).
        keyless: True when the stored Sigstore bundle was written as it is.
        checked: True when the bundle was verified with the signer's public key before writing.
        size: bytes written.
    """

    digest: str
    keyid: str
    signer: str
    keyless: bool
    checked: bool
    size: int


def _choose(envelope: Envelope, key: str | None, names: dict[str, str], what: str) -> Signature:
    sigs = envelope.signatures
    if key is None:
        if len(sigs) == 1:
            return sigs[0]
        listed = ", ".join(
            f"{s.keyid[:16]}" + (f" ({names[s.keyid]})" if s.keyid in names else "") for s in sigs
        )
        raise ValueError(
            f"{what} has {len(sigs)} signatures ({listed}) and a Sigstore bundle holds one: "
            "choose with --key NAME or --key KEYID (export once per signer)"
        )
    by_name = [s for s in sigs if names.get(s.keyid) == key]
    prefix = key.removeprefix("sha256:").lower()
    by_id = [s for s in sigs if len(prefix) >= 8 and s.keyid.startswith(prefix)]
    found = by_name or by_id
    if len(found) != 1:
        have = ", ".join(s.keyid[:16] for s in sigs)
        raise ValueError(f"--key {key}: names {len(found)} of the signatures of {what} ({have})")
    return found[0]


def export_sigstore(
    ledger: LedgerHome, ref: str, out: Path, *, key: str | None = None
) -> SigstoreExport:
    """Write the Sigstore bundle of one signature of REF's envelope to ``out``.

    Steps:
        1. Resolve REF and read its envelope (it must hash to the digest its record names).
        2. Choose the signature (the only one, or the one ``key`` names).
        3. A keyless signature: its stored bundle. A key signature: build the bundle, and
           verify it with the public key when this ledger holds it.
        4. Write ``out`` atomically.

    Raises:
        RefError, StoreError: REF unknown, envelope missing.
        TamperError: the stored envelope does not hash to its digest.
        ValueError: several signatures and no (or an ambiguous) ``key``.
    """
    from trajledger.verify.digest import digest_bytes

    from .catalog import Catalog
    from .errors import TamperError

    # (1)
    item = Catalog(ledger).resolve(ref)
    data = ledger.store.get(item.envelope)
    if digest_bytes(data) != item.envelope:
        raise TamperError(
            f"envelope {item.envelope}: the stored bytes hash to {digest_bytes(data)}",
            ledger.store.path_of(item.envelope) if ledger.store.is_local else None,
        )
    what = f"envelope of {item.kind} {item.ref}"
    envelope = Envelope.from_bytes(data, what)
    # (2)
    names = {k.keyid: k.name for k in ledger.keys.list()}
    sig = _choose(envelope, key, names, what)
    # (3)
    keyless = False
    checked = False
    stored = (
        ledger.store.get("sha256:" + sig.keyid)
        if ledger.store.exists("sha256:" + sig.keyid)
        else None
    )
    if stored is not None and bundle_keyid(stored) == sig.keyid:
        try:
            parsed = SigstoreBundle.from_bytes(stored, f"Sigstore bundle {sig.keyid[:16]}")
        except FormatError as e:
            raise LedgerError(
                f"{what}: signature {sig.keyid[:16]} names a blob that is not a Sigstore "
                f"bundle: {e}"
            ) from e
        if (
            parsed.envelope is None
            or parsed.envelope.payload != envelope.payload
            or parsed.signature != sig.sig
        ):
            raise LedgerError(
                f"{what}: the Sigstore bundle {sig.keyid[:16]} does not carry this signature"
            )
        subject, issuer = certificate_identity(parsed.certificates[0])
        bundle, keyless, signer = stored, True, f"{subject} (issuer {issuer}, keyless)"
    else:
        bundle = envelope_signature_bundle(envelope, sig)
        signer = names.get(sig.keyid, f"key {sig.keyid[:16]}")
        if sig.keyid in names:
            verify_sigstore_bundle(
                bundle,
                keys=[ledger.keys.public(names[sig.keyid])],
                expected_payload=(envelope.payload_type, envelope.payload),
                what=f"Sigstore bundle of {what}",
            )
            checked = True
    # (4)
    try:
        write_file_atomic(out, bundle, output=True)
    except OSError as e:
        raise LedgerError(cannot_write(str(out), e)) from e
    return SigstoreExport(item.digest, sig.keyid, signer, keyless, checked, len(bundle))
