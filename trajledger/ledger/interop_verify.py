"""``trajledger verify TARGET --sigstore-bundle B --policy P``: files signed by other tools.

Scope: glue between the CLI and ``verify/`` for signatures other tools make, in a Sigstore bundle:
read the bundle, verify it under the trust policy (any key or Sigstore identity of the
``producer``, ``approver`` or ``trainer`` role; the policy's ``sigstore_trusted_root`` or the
production root for keyless bundles), then check that it signs TARGET:

- a file: its sha256 is the bundle's message digest, or a subject of the signed statement
  (sigstore ``sign``, ``attest``, cosign, our own ``export --format sigstore``);
- a directory signed by OpenSSF model_signing (its predicate): every file's sha256 is the
  signed one, no file missing or extra (the paths the signer ignored, and the bundle itself
  when it lies in the directory, left out); also reported: the trajledger manifest digest of
  the same files, which is the artifact digest of a checkpoint or files record of them;
- a directory under a trajledger statement: its inline manifest (files predicate) is compared
  file by file; otherwise the directory's manifest digest must be a subject (a checkpoint).

One bundle is one signature: the result names the signer and the roles it holds; role
thresholds above 1 cannot be met by one bundle and are not claimed to be.
Non-scope: the lineage (``trajledger verify REF``), recording anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajledger.verify import model_signing
from trajledger.verify.digest import FileDigest, hash_file
from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE
from trajledger.verify.errors import DigestMismatchError, SignatureError
from trajledger.verify.manifest import FileEntry, Manifest
from trajledger.verify.policy import KEY_ROLES, TrustPolicy
from trajledger.verify.sigstore_adapter import (
    VerifiedBundle,
    trusted_root_bytes,
    verify_sigstore_bundle,
)
from trajledger.verify.statement import Statement
from trajledger.verify.strict_json import load_object
from trajledger.verify.tree import (
    TreeDiff,
    diff_tree,
    hash_files,
    manifest_from_statement,
    tree_files,
)

from .errors import LedgerError
from .files import manifest_for, media_type_for
from .verify_files import read_input

__all__ = ["InteropResult", "verify_with_bundle"]


@dataclass(frozen=True)
class InteropResult:
    """Outcome of `verify_with_bundle` (the signature verified; the files may still differ).

    Attributes:
        target: the file or directory checked.
        format: ``"sigstore"`` or ``"model_signing"`` (what the bundle signs).
        mode: the bundle's mode (``key``, ``pinned-certificate``, ``keyless``).
        signer: who signed (``key 1a2b…`` or ``identity SAN (issuer ISSUER)``).
        roles: the policy roles the signer holds.
        files: how many files were compared.
        diff: missing, extra and changed files.
        manifest_digest: the trajledger manifest digest of the files (directories only).
        notes: what was not checked, and why.
        predicate_type: the predicate type of the in-toto statement signed (None for a
            message signature): what the signer says about the files (a statement about a
            file may say anything of it, a failed verification too), named in the report.
    """

    target: str
    format: str
    mode: str
    signer: str
    roles: tuple[str, ...]
    files: int
    diff: TreeDiff
    manifest_digest: str | None
    notes: tuple[str, ...]
    predicate_type: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Stable JSON form."""
        return {
            "target": self.target,
            "format": self.format,
            "mode": self.mode,
            "signer": self.signer,
            "roles": list(self.roles),
            "files": self.files,
            "ok": self.diff.ok,
            "missing": list(self.diff.missing),
            "extra": list(self.diff.extra),
            "changed": [{"path": p, "reason": r} for p, r in self.diff.changed],
            "manifest_digest": self.manifest_digest,
            "notes": list(self.notes),
            "predicateType": self.predicate_type,
        }

    def render(self) -> list[str]:
        """The report, one line each."""
        lines = [
            f"{self.target}: {self.format} signature ({self.mode} mode) by {self.signer}, "
            f"{' and '.join(self.roles)} in the policy",
            "signs: " + (f"an in-toto statement of predicate type {self.predicate_type}"
                         if self.predicate_type else "the file's digest (a message signature)"),
            f"files: {self.files} compared" + ("" if self.diff.ok else ", differences:"),
        ]
        lines += [f"  {p}" for p in self.diff.problems()]
        if self.manifest_digest:
            lines.append(f"as trajledger files: manifest {self.manifest_digest}")
        lines += [f"note: {n}" for n in self.notes]
        return lines

    def raise_if_failed(self) -> None:
        """Raise `DigestMismatchError` listing every file that differs."""
        self.diff.raise_if_failed(self.target)


def _roles(verified: VerifiedBundle, policy: TrustPolicy) -> tuple[str, ...]:
    signer = verified.signer
    if signer.identity is not None:
        return tuple(r for r in KEY_ROLES if signer.identity in policy.role(r).identities)
    return tuple(r for r in KEY_ROLES if policy.holds(r, signer.keyid))


def verify_with_bundle(target: Path, bundle_path: Path, policy: TrustPolicy) -> InteropResult:
    """Verify that a Sigstore bundle, made by a party the policy trusts, signs TARGET.

    Steps:
        1. Read the bundle; hash TARGET when it is a file.
        2. Verify the bundle (`verify_sigstore_bundle`) against every key and identity of the
           policy's producer, approver and trainer roles.
        3. Check what it signs against TARGET (see the module docstring).

    Raises:
        LedgerError: TARGET or the bundle cannot be read (exit 3).
        FormatError, SignatureError, DigestMismatchError: the bundle is malformed, its signature
            does not hold, or it signs something else (exit 1).
    """
    # (1)
    data = read_input(bundle_path, "Sigstore bundle")
    if not target.exists():
        raise LedgerError(f"{target}: no such file or directory")
    what = f"Sigstore bundle {bundle_path}"
    digest: str | None = None
    if target.is_file():
        try:
            digest = hash_file(target).digest
        except OSError as e:
            raise LedgerError(f"{target}: cannot read: {e.strerror}") from e
    # (2)
    keys = [k for r in KEY_ROLES for k in policy.role(r).keys]
    identities = [i for r in KEY_ROLES for i in policy.role(r).identities]
    verified = verify_sigstore_bundle(
        data,
        keys=keys,
        identities=identities,
        trusted_root=trusted_root_bytes(policy.sigstore_trusted_root),
        artifact_digest=digest,
        expected_payload=None,
        what=what,
    )
    roles = _roles(verified, policy)
    in_toto = verified.payload is not None and verified.payload_type == INTOTO_PAYLOAD_TYPE
    predicate = load_object(verified.payload or b"{}", f"{what}: statement").get(
        "predicateType") if in_toto else None

    def result(fmt: str, count: int, diff: TreeDiff, manifest: str | None,
               notes: tuple[str, ...] = ()) -> InteropResult:
        return InteropResult(
            str(target), fmt, verified.mode, verified.signer.describe(), roles, count, diff,
            manifest, verified.notes + notes,
            (predicate if isinstance(predicate, str) else "(none stated)") if in_toto else None,
        )  # fmt: skip

    # (3)
    if digest is not None:
        # verify_sigstore_bundle checked the message digest or a statement subject.
        return result("sigstore", 1, TreeDiff((), (), ()), None)
    if verified.payload is None or not in_toto:
        raise SignatureError(f"{what}: signs a message digest, which cannot name a directory")
    statement = Statement.from_bytes(verified.payload, f"{what}: statement")
    files, links = _tree(target)
    inside = _inside(bundle_path, target)
    if statement.predicate_type == model_signing.PREDICATE_TYPE:
        signed = model_signing.ModelSignature.from_statement(statement, what)
        ignore = [*signed.ignore_paths, *([inside] if inside else [])]
        digests = _hash({n: p for n, p in files.items() if not model_signing.is_ignored(n, ignore)})
        diff = _with_links(
            model_signing.diff_model(signed, {n: d.sha256 for n, d in digests.items()}),
            {n: k for n, k in links.items() if not model_signing.is_ignored(n, ignore)},
        )
        manifest = Manifest.from_files(
            [FileEntry(n, d.size, d.sha256, media_type_for(n)) for n, d in sorted(digests.items())]
        )
        # What the signer left out is not verified: named, so that a file planted there (a
        # .git/config that runs a command) is not passed over in silence.
        unchecked = sorted(n for n in [*files, *links] if n != inside and
                           model_signing.is_ignored(n, signed.ignore_paths))
        return result(
            "model_signing", len(signed.files), diff, manifest.digest if diff.ok else None,
            (f"{len(unchecked)} file(s) under the signer's ignore paths, not checked: "
             + ", ".join(unchecked[:10]) + (", ..." if len(unchecked) > 10 else ""),)
            if unchecked else (),
        )
    if inside:
        files.pop(inside, None)
    if "manifest" in statement.predicate:
        listed = manifest_from_statement(statement, what)
        return result("sigstore", len(listed.files), _with_links(diff_tree(listed, files), links),
                      listed.digest)
    ours = manifest_for(files)
    if all(s.digest != ours.digest for s in statement.subjects):
        raise DigestMismatchError(
            f"{target}: its manifest {ours.digest} is not a subject of the statement the "
            f"bundle signs (subjects: {', '.join(s.digest for s in statement.subjects)})",
            subject=str(target),
            observed=ours.digest,
        )
    return result("sigstore", len(ours.files), _with_links(TreeDiff((), (), ()), links),
                  ours.digest)


def _tree(target: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """The directory's regular files by name, and what every other entry is (`tree_files`: a
    symbolic link is never followed; it is not what was signed, a failure named by
    `_with_links`, not an input that cannot be read)."""
    try:
        files, others = tree_files(target)
    except OSError as e:
        raise LedgerError(f"{e.filename}: cannot list: {e.strerror}") from e
    if not files and not others:
        raise LedgerError(f"{target}: holds no files to verify")
    return files, others


def _with_links(diff: TreeDiff, others: dict[str, str]) -> TreeDiff:
    """``diff`` with each entry that is not a regular file as a problem (saying what it is, a
    link with its target), in place of its being missing."""
    if not others:
        return diff
    return TreeDiff(tuple(p for p in diff.missing if p not in others), diff.extra,
                    tuple(sorted([*diff.changed, *others.items()])))


def _inside(bundle: Path, directory: Path) -> str | None:
    """The bundle's name relative to ``directory`` when it lies inside it (left out of the
    comparison, as model_signing leaves its signature out)."""
    try:
        return bundle.resolve().relative_to(directory.resolve()).as_posix()
    except ValueError:
        return None


def _hash(files: dict[str, Path]) -> dict[str, FileDigest]:
    names = sorted(files)
    try:
        return dict(zip(names, hash_files([files[n] for n in names]), strict=True))
    except OSError as e:
        raise LedgerError(f"{e.filename}: cannot read: {e.strerror}") from e
