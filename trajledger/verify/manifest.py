"""Artifact manifests: the list of blobs an artifact is made of, with names and sizes bound.

Scope: parse a manifest, compute its identity, and compare it with files on disk or bytes in
hand. A manifest is RFC 8785 JSON::

    {"files": [{"digest": {"sha256": <hex>}, "mediaType": <str>, "path": <str>, "size": <int>}],
     "mediaType": "application/vnd.trajledger.manifest.v1+json"}

``files`` sorted by ``path`` (relative POSIX, no ``.``/``..``/empty segments, unique). The
artifact's identity is ``sha256:`` of those canonical bytes.
Non-scope: where the bytes live (ledger object store, an exported bundle, a directory); the
manifest inline in one artifact statement (`verify.tree.manifest_from_statement`).
Spec: schemas/SPEC.md section "Manifest".
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._jcs import MAX_SAFE_INTEGER, canonical_bytes
from .digest import DIGEST_PREFIX, HEX64
from .errors import DigestMismatchError, FormatError
from .strict_json import load_object

__all__ = [
    "MANIFEST_MEDIA_TYPE",
    "FileEntry",
    "Manifest",
    "check_file_subjects",
    "check_path",
]

MANIFEST_MEDIA_TYPE = "application/vnd.trajledger.manifest.v1+json"
MAX_FILES = 1_000_000
_FILE_KEYS, _BAD_SEGMENTS = frozenset(("digest", "mediaType", "path", "size")), {"", ".", ".."}


def check_path(path: object, what: str = "path") -> str:
    """Check a manifest path: relative POSIX, no empty, ``.`` or ``..`` segment, no NUL or ``\\``.

    Raises:
        FormatError: the path could escape its root or is ambiguous.
    """
    if not isinstance(path, str) or not path:
        raise FormatError(f"{what}: must be a non-empty string")
    if path.startswith("/") or "\\" in path or "\x00" in path:
        raise FormatError(f"{what}: {path!r} must be a relative POSIX path")
    if not _BAD_SEGMENTS.isdisjoint(path.split("/")):
        raise FormatError(f"{what}: {path!r} has an empty, '.' or '..' segment")
    return path


@dataclass(frozen=True)
class FileEntry:
    """One blob of an artifact."""

    path: str
    size: int
    sha256: str
    media_type: str = "application/octet-stream"

    @property
    def digest(self) -> str:
        """The blob's ``sha256:<hex>`` digest string."""
        return DIGEST_PREFIX + self.sha256

    def to_json(self) -> dict[str, Any]:
        """The entry as a JSON object."""
        return {
            "digest": {"sha256": self.sha256},
            "mediaType": self.media_type,
            "path": self.path,
            "size": self.size,
        }


@dataclass(frozen=True)
class Manifest:
    """A validated manifest. Build with `from_files` (writer) or `from_json` (reader)."""

    files: tuple[FileEntry, ...]

    @classmethod
    def from_files(cls, files: list[FileEntry]) -> Manifest:
        """Build a manifest, sorting by path and refusing duplicates and unsafe paths."""
        ordered = sorted(files, key=lambda f: f.path)
        return cls.from_json({"mediaType": MANIFEST_MEDIA_TYPE,
                              "files": [f.to_json() for f in ordered]})

    @classmethod
    def from_json(cls, obj: object, what: str = "manifest") -> Manifest:
        """Validate a parsed manifest object.

        Raises:
            FormatError: wrong mediaType, unknown fields, bad paths, sizes or digests, paths
                unsorted or duplicated.
        """
        if not isinstance(obj, dict):
            raise FormatError(f"{what}: must be an object")
        if obj.get("mediaType") != MANIFEST_MEDIA_TYPE:
            raise FormatError(
                f"{what}: mediaType is {obj.get('mediaType')!r}, want {MANIFEST_MEDIA_TYPE!r}"
            )
        if set(obj) != {"mediaType", "files"}:
            raise FormatError(f"{what}: fields are {sorted(obj)}, want ['files', 'mediaType']")
        raw = obj["files"]
        if not isinstance(raw, list):
            raise FormatError(f"{what}: files must be a list")
        if len(raw) > MAX_FILES:
            raise FormatError(f"{what}: {len(raw)} files, more than {MAX_FILES}")
        entries = []
        for i, f in enumerate(raw):
            w = f"{what}: file {i}"
            if not isinstance(f, dict) or f.keys() != _FILE_KEYS:
                got = sorted(f) if isinstance(f, dict) else type(f).__name__
                raise FormatError(f"{w}: has {got}, want exactly digest, mediaType, path, size")
            path = check_path(f["path"], f"{w} path")
            size = f["size"]
            if type(size) is not int or not 0 <= size <= MAX_SAFE_INTEGER:
                raise FormatError(f"{w} ({path}): size {size!r} is not an integer in [0, 2^53)")
            d = f["digest"]
            if not isinstance(d, dict) or set(d) != {"sha256"} or not isinstance(d["sha256"], str):
                raise FormatError(f"{w} ({path}): digest must be {{'sha256': <hex>}}")
            if not HEX64.fullmatch(d["sha256"]):
                raise FormatError(f"{w} ({path}): sha256 is not 64 lowercase hex")
            if not isinstance(f["mediaType"], str) or not f["mediaType"]:
                raise FormatError(f"{w} ({path}): mediaType must be a non-empty string")
            entries.append(FileEntry(path, size, d["sha256"], f["mediaType"]))
        paths = [e.path for e in entries]
        for a, b in itertools.pairwise(paths):
            if a == b:
                raise FormatError(f"{what}: path {a!r} appears twice")
            if a > b:
                raise FormatError(f"{what}: paths not sorted ({a!r} before {b!r})")
        dirs = {p.rsplit("/", 1)[0] for p in paths if "/" in p}
        prefixes = {"/".join(d.split("/")[: i + 1]) for d in dirs for i in range(d.count("/") + 1)}
        clash = prefixes & set(paths)
        if clash:
            raise FormatError(f"{what}: {sorted(clash)[0]!r} is both a file and a directory")
        return cls(tuple(entries))

    @classmethod
    def from_bytes(cls, data: bytes, signed: Manifest | None = None) -> Manifest:
        """Read a manifest's bytes (strict JSON, `from_json`). ``signed``, a manifest read
        already (the copy a signed predicate holds), is returned when ``data`` is its JSON
        written out byte for byte, which would read as exactly it: one parse, not two.

        Raises:
            FormatError: as `verify.strict_json.load_object` and `from_json`.
        """
        if signed is not None and data == ('{"files":[' + ",".join(
                f'{{"digest":{{"sha256":"{f.sha256}"}},"mediaType":{json.dumps(f.media_type)},'
                f'"path":{json.dumps(f.path)},"size":{f.size}}}' for f in signed.files)
                + f'],"mediaType":"{MANIFEST_MEDIA_TYPE}"}}').encode():
            return signed  # (the bytes of json.dumps(signed.to_json(), sort_keys=True,
            # separators=(",", ":")), written out directly: half the time)
        return cls.from_json(load_object(data, "manifest"))

    def to_json(self) -> dict[str, Any]:
        """The manifest as a JSON object."""
        return {"files": [f.to_json() for f in self.files], "mediaType": MANIFEST_MEDIA_TYPE}

    def canonical_bytes(self) -> bytes:
        """The RFC 8785 bytes whose SHA-256 is the artifact's identity."""
        return canonical_bytes(self.to_json(), "manifest")

    @property
    def digest(self) -> str:
        """The artifact digest: ``sha256:`` of `canonical_bytes`."""
        from .digest import digest_bytes

        return digest_bytes(self.canonical_bytes())

    @property
    def total_size(self) -> int:
        """Sum of all file sizes."""
        return sum(f.size for f in self.files)

    def by_path(self) -> Mapping[str, FileEntry]:
        """Entries keyed by path."""
        return {f.path: f for f in self.files}


def check_file_subjects(statement: Any, manifest: Manifest, what: str = "statement") -> int:
    """Check the subjects after the first (a checkpoint's model files) against its manifest.

    A statement may list the artifact's files as subjects after the manifest digest (SLSA
    provenance does, so that tools checking one model file find its digest). Each such subject
    must be a file of the manifest, by path, with the manifest's sha256: a statement cannot
    name a file digest its manifest does not bind.

    Args:
        statement: a `verify.statement.Statement` whose first subject is ``manifest``'s digest.
        manifest: the artifact's verified manifest.
        what: names the statement in error messages.

    Returns:
        How many file subjects were checked.

    Raises:
        DigestMismatchError: a subject names a path the manifest lacks, or another digest.
    """
    files = {f.path: f for f in manifest.files} if len(statement.subjects) > 1 else {}
    for s in statement.subjects[1:]:
        f = files.get(s.name)
        if f is None:
            raise DigestMismatchError(
                f"{what}: subject {s.name!r} is not a file of the artifact's manifest",
                subject=s.name,
                observed=s.digest,
            )
        if f.sha256 != s.sha256:
            raise DigestMismatchError(
                f"{what}: subject {s.name!r} has {s.digest}, the manifest says {f.digest}",
                subject=s.name,
                expected=f.digest,
                observed=s.digest,
            )
    return len(statement.subjects) - 1
