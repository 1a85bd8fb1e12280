"""``trajledger export CHECKPOINT --format model-signing --key K --out DIR``.

Scope: write a checkpoint's files into DIR with an OpenSSF model_signing signature,
``DIR/model.sig``, that ``model_signing verify key DIR --signature DIR/model.sig --public_key
K.pub`` accepts, and record in the log that K signed it (a ``model-signature`` record about the
checkpoint).

1. The checkpoint resolves; K is an ECDSA P-256 key of the policy's trainer role
   (model_signing's key mode takes ECDSA P-256/384/521 keys only: not Ed25519, trajledger's
   default);
2. its manifest is read from the store (it must hash to the checkpoint's digest), and every
   file's blob is copied into a new directory next to DIR, hashed as written, and compared with
   the manifest (a changed blob stops the export: TamperError);
3. model_signing's statement (``verify.model_signing``) over those files: resources sorted by
   path, the root digest, ``serialization`` ``files``/sha256 ignoring ``model.sig`` and the git
   paths (as ``model_signing sign`` records them); signed by K over PAE as DSSE; wrapped in a
   Sigstore bundle v0.3 whose ``publicKey.hint`` is model_signing's (hex sha256 of K's PEM);
   checked by ``verify.sigstore_adapter`` before anything is kept;
4. the bundle is stored as an object and the ``model-signature`` record (predicate
   ``https://trajledger.dev/attestation/model-signature/v1``, schema
   ``schemas/model-signature.v1.schema.json``) appended, signed by K;
5. the new directory is renamed to DIR.

Nothing is left behind when a step fails before (4); DIR must not exist or be empty.
Non-scope: verification of such directories (``interop_verify``), keyless model_signing (sign
with the ``model_signing`` tool itself; ``trajledger verify`` checks the result).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from trajledger.verify import model_signing, predicates
from trajledger.verify.digest import hash_file
from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE, pae
from trajledger.verify.manifest import Manifest
from trajledger.verify.policy import TrustPolicy
from trajledger.verify.sigstore_adapter import BUNDLE_MEDIA_TYPE, verify_sigstore_bundle
from trajledger.verify.statement import STATEMENT_TYPE
from trajledger.verify.strict_json import load_object

from .encode import b64encode
from .errors import KeyError_, LedgerError, TamperError
from .record import record_statement
from .signing import canonical_json

if TYPE_CHECKING:
    from .home import LedgerHome
    from .keys import Signer

__all__ = ["ModelSigningExport", "export_model_signing", "model_signing_bundle"]

SERIALIZATION_IGNORES = (model_signing.DEFAULT_SIGNATURE_NAME, *model_signing.GIT_PATHS)


@dataclass(frozen=True)
class ModelSigningExport:
    """What `export_model_signing` wrote and recorded.

    Attributes:
        digest: the checkpoint's digest (the record's subject).
        out: the model directory written.
        files: how many model files (besides ``model.sig``).
        root: model_signing's root digest (hex).
        bundle: ``sha256:`` of the signature file (a blob in the store).
        index: the log index of the ``model-signature`` record.
    """

    digest: str
    out: Path
    files: int
    root: str
    bundle: str
    index: int


def model_signing_bundle(name: str, files: dict[str, str], signer: Signer) -> bytes:
    """model_signing's signature of ``files`` (path -> sha256 hex): a Sigstore bundle v0.3.

    Raises:
        KeyError_: the key is not ECDSA P-256.
    """
    if signer.public.algorithm != "ecdsa-p256":
        raise KeyError_(_not_ecdsa(signer))
    order = sorted(files, key=PurePosixPath)  # model_signing's own order (path components)
    resources = [{"name": p, "algorithm": "sha256", "digest": files[p]} for p in order]
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [
            {
                "name": name,
                "digest": {"sha256": model_signing.root_digest([files[p] for p in order])},
            }
        ],
        "predicateType": model_signing.PREDICATE_TYPE,
        "predicate": {
            "serialization": {
                "method": "files",
                "hash_type": "sha256",
                "allow_symlinks": False,
                "ignore_paths": list(SERIALIZATION_IGNORES),
            },
            "resources": resources,
        },
    }
    payload = canonical_json(statement)
    sig = signer.sign(pae(INTOTO_PAYLOAD_TYPE, payload))
    bundle = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {
            # model_signing's key hint (hex sha256 of the PEM), which its verifier compares.
            "publicKey": {"hint": hashlib.sha256(signer.public.to_pem()).hexdigest()},
            "tlogEntries": [],
        },
        "dsseEnvelope": {
            "payload": b64encode(payload),
            "payloadType": INTOTO_PAYLOAD_TYPE,
            "signatures": [{"sig": base64.b64encode(sig).decode(), "keyid": signer.keyid}],
        },
    }
    return json.dumps(bundle, indent=2).encode("utf-8") + b"\n"


def _not_ecdsa(signer: Signer) -> str:
    return (
        f"key {signer.name} is {signer.public.algorithm}: model_signing's key mode takes ECDSA "
        "keys only (P-256 here), not Ed25519; create one with 'trajledger key new NAME --alg "
        "p256' and list it in the policy's trainer role"
    )


def export_model_signing(
    ledger: LedgerHome, ref: str, out: Path, signer: Signer, policy: TrustPolicy
) -> ModelSigningExport:
    """Export a checkpoint as a model_signing-signed directory and record the signature.

    See the module docstring for the steps.

    Raises:
        RefError: REF is not a recorded checkpoint.
        KeyError_: the key is not ECDSA P-256.
        PolicyError: the key is not a trainer key of the policy.
        LedgerError: DIR exists and is not empty; a blob is missing (erased?) or unreadable.
        TamperError, DigestMismatchError: the manifest or a blob does not hash to its digest.
    """
    from trajledger.verify.errors import PolicyError

    from .catalog import Catalog

    # (1)
    item = Catalog(ledger).resolve(ref, {"checkpoint"})
    if signer.public.algorithm != "ecdsa-p256":
        raise KeyError_(_not_ecdsa(signer))
    if not policy.holds("trainer", signer.keyid):
        raise PolicyError(
            f"key {signer.name} ({signer.keyid[:16]}) is not a trainer key of policy "
            f"{policy.name!r}: only the trainer role signs checkpoints"
        )
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise LedgerError(f"{out}: exists and is not an empty directory; choose a new --out")
    # (2)
    data = ledger.store.get_verified(item.digest)
    manifest = Manifest.from_json(
        load_object(data, f"manifest of {item.ref}"), f"manifest of {item.ref}"
    )
    clash = [
        f.path for f in manifest.files if model_signing.is_ignored(f.path, SERIALIZATION_IGNORES)
    ]
    if clash:
        raise LedgerError(
            f"checkpoint {item.ref}: file {clash[0]!r} is a path model_signing ignores "
            f"({', '.join(SERIALIZATION_IGNORES)}); it cannot be signed in that format"
        )
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{out.name}-", dir=out.parent))
    try:
        files: dict[str, str] = {}
        for f in manifest.files:
            dest = work / f.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            ledger.store.copy_to(f.digest, dest)
            got = hash_file(dest)
            if got.sha256 != f.sha256 or got.size != f.size:
                raise TamperError(
                    f"checkpoint {item.ref}: file {f.path}: its blob hashes to {got.digest} "
                    f"({got.size} bytes), the manifest says {f.digest} ({f.size} bytes)",
                    ledger.store.path_of(f.digest) if ledger.store.is_local else None,
                )
            files[f.path] = got.sha256
        # (3)
        bundle = model_signing_bundle(item.name, files, signer)
        verify_sigstore_bundle(bundle, keys=[signer.public], what="model_signing signature")
        sig_path = work / model_signing.DEFAULT_SIGNATURE_NAME
        sig_path.write_bytes(bundle)
        # (4)
        bundle_digest = ledger.store.put_bytes(bundle)
        root = model_signing.root_digest([files[p] for p in sorted(files, key=PurePosixPath)])
        rec = record_statement(
            ledger,
            item.name,
            item.digest,
            predicates.MODEL_SIGNATURE,
            {
                "bundle": bundle_digest,
                "signedPredicateType": model_signing.PREDICATE_TYPE,
                "model": {"name": item.name, "digest": {"sha256": root}},
                "signatureName": model_signing.DEFAULT_SIGNATURE_NAME,
                "signedAt": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
            signer,
        )
        # (5)
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return ModelSigningExport(item.digest, out, len(files), root, bundle_digest, rec.index)
