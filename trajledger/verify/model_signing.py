"""OpenSSF model_signing signatures: the payload, its root digest, and a model directory against it.

Scope: the in-toto statement model_signing (https://github.com/sigstore/model-transparency,
v1.0 of its predicate) signs, one definition shared by the writer (``ledger/model_signing.py``)
and the verifier: parse it strictly, check its root digest, and compare a model directory's
per-file sha256 digests with it. The signature itself is a Sigstore bundle v0.3 with a DSSE
envelope; ``sigstore_adapter`` verifies it (key, certificate or keyless mode).

The predicate, as model_signing 1.x writes it::

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": MODEL_NAME, "digest": {"sha256": ROOT}}],
     "predicateType": "https://model_signing/signature/v1.0",
     "predicate": {"serialization": {"method": "files", "hash_type": "sha256",
                                     "allow_symlinks": false, "ignore_paths": [...]},
                   "resources": [{"name": PATH, "algorithm": "sha256", "digest": HEX}, ...]}}

ROOT is the sha256 of the concatenated raw digests of the resources, in their listed order
(model_signing lists them sorted by path components). Unlike a trajledger manifest it binds
neither sizes nor, through ROOT, names: the names are bound only by the signature over the
whole statement.

Non-scope: the ``shards`` serialization and the blake2/blake3 hashes (refused: trajledger
checks sha256 per file); the v0.2 "compat" payloads (signed with a faulty PAE; re-sign with
model_signing >= 1.0); walking the directory (the caller gives the files and their digests).

Spec: model_signing ``_signing/signing.py`` (``Payload``, ``dsse_payload_to_manifest``) and
``_serialization/file.py``; schemas/SPEC.md section "model_signing".
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .digest import HEX64
from .errors import FormatError
from .manifest import check_path
from .statement import Statement
from .tree import TreeDiff

__all__ = [
    "DEFAULT_SIGNATURE_NAME",
    "GIT_PATHS",
    "PREDICATE_TYPE",
    "ModelSignature",
    "diff_model",
    "is_ignored",
    "root_digest",
]

PREDICATE_TYPE = "https://model_signing/signature/v1.0"
DEFAULT_SIGNATURE_NAME = "model.sig"
"""The signature file model_signing writes by default, and that we write in a model directory."""
GIT_PATHS = (".git", ".gitattributes", ".github", ".gitignore")
"""Paths model_signing ignores by default (and records as ignored)."""

_SERIALIZATION_FIELDS = {"method", "hash_type", "allow_symlinks", "ignore_paths"}


def root_digest(sha256_hex: Sequence[str]) -> str:
    """model_signing's subject digest: sha256 over the raw digests in order (hex)."""
    h = hashlib.sha256()
    for d in sha256_hex:
        h.update(bytes.fromhex(d))
    return h.hexdigest()


def is_ignored(path: str, ignore_paths: Sequence[str]) -> bool:
    """True when ``path`` (POSIX, relative to the model) is or lies under an ignored path."""
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in ignore_paths)


@dataclass(frozen=True)
class ModelSignature:
    """What a model_signing statement says. Build with `from_statement`.

    Attributes:
        name: the model's name (the subject name; informative only).
        root: the subject's sha256 (hex), consistent with ``files``.
        files: path to sha256 (hex), in the statement's order.
        ignore_paths: paths the signer left out, relative to the model.
        allow_symlinks: the signer's setting (trajledger never follows links either way).
    """

    name: str
    root: str
    files: Mapping[str, str]
    ignore_paths: tuple[str, ...]
    allow_symlinks: bool

    @classmethod
    def from_statement(cls, statement: Statement, what: str = "model signature") -> ModelSignature:
        """Read a verified statement as a model_signing v1.0 payload.

        Steps:
            1. The predicate type is model_signing's v1.0; one subject.
            2. The serialization is ``files`` with sha256; ignore paths are relative paths.
            3. Every resource has a valid relative path (no ``..``, no absolute path), listed
               once, with a sha256 of 64 lowercase hex. (Their order is bound by the root
               digest; model_signing writes them sorted by path components.)
            4. The root digest over the resources is the subject's digest.

        Raises:
            FormatError: a step fails (the message names it).
        """
        # (1)
        if statement.predicate_type != PREDICATE_TYPE:
            raise FormatError(
                f"{what}: predicateType {statement.predicate_type!r}, want {PREDICATE_TYPE!r}"
                " (model_signing >= 1.0)"
            )
        if len(statement.subjects) != 1:
            raise FormatError(f"{what}: {len(statement.subjects)} subjects, want 1")
        subject = statement.subjects[0]
        predicate = statement.predicate
        # (2)
        ser = predicate.get("serialization")
        if not isinstance(ser, dict):
            raise FormatError(f"{what}: predicate has no serialization object")
        unknown = set(ser) - _SERIALIZATION_FIELDS
        if unknown:
            raise FormatError(f"{what}: serialization has unknown field(s) {sorted(unknown)}")
        if ser.get("method") != "files":
            raise FormatError(
                f"{what}: serialization method {ser.get('method')!r}: trajledger checks "
                "whole-file digests ('files') only"
            )
        if ser.get("hash_type") != "sha256":
            raise FormatError(
                f"{what}: hash_type {ser.get('hash_type')!r}: trajledger checks sha256 only"
            )
        allow_symlinks = ser.get("allow_symlinks", False)
        if not isinstance(allow_symlinks, bool):
            raise FormatError(f"{what}: allow_symlinks must be true or false")
        raw_ignore = ser.get("ignore_paths", [])
        if not isinstance(raw_ignore, list):
            raise FormatError(f"{what}: ignore_paths must be a list")
        ignore: list[str] = []
        for p in raw_ignore:
            ignore.append(check_path(p, f"{what}: ignore path {p!r}"))
        # (3)
        resources = predicate.get("resources")
        if not isinstance(resources, list):
            raise FormatError(f"{what}: predicate has no resources list")
        files: dict[str, str] = {}
        for i, r in enumerate(resources):
            if not isinstance(r, dict) or set(r) != {"name", "algorithm", "digest"}:
                raise FormatError(f"{what}: resource {i} must have exactly name, algorithm, digest")
            name = check_path(r["name"], f"{what}: resource {i} name")
            if r["algorithm"] != "sha256":
                raise FormatError(
                    f"{what}: resource {name!r} algorithm {r['algorithm']!r}, want sha256"
                )
            if not isinstance(r["digest"], str) or not HEX64.fullmatch(r["digest"]):
                raise FormatError(f"{what}: resource {name!r} digest is not 64 lowercase hex")
            if name in files:
                raise FormatError(f"{what}: resource {name!r} is listed twice")
            files[name] = r["digest"]
        # (4)
        root = root_digest(list(files.values()))
        if root != subject.sha256:
            raise FormatError(
                f"{what}: the resources hash to root sha256:{root}, the subject says "
                f"sha256:{subject.sha256}"
            )
        return cls(subject.name, root, files, tuple(ignore), allow_symlinks)


def diff_model(signature: ModelSignature, present: Mapping[str, str]) -> TreeDiff:
    """Compare the files of a model directory with a model signature.

    Args:
        signature: what was signed.
        present: the directory's files (path relative to the model, POSIX) to their sha256
            (hex), ignored paths already left out (`is_ignored`).

    Returns:
        Missing, extra and changed files (empty when the directory is what was signed).
    """
    want = signature.files
    missing = tuple(sorted(set(want) - set(present)))
    extra = tuple(sorted(set(present) - set(want)))
    changed = tuple(
        (p, f"content hashes to sha256:{present[p]}, want sha256:{want[p]}")
        for p in sorted(set(want) & set(present))
        if present[p] != want[p]
    )
    return TreeDiff(missing, extra, changed)
