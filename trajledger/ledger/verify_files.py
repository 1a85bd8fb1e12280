"""Check files on disk against an envelope made by ``trajledger sign``.

Scope: glue between the CLI and ``verify/``: read the envelope and key files (operational errors
become `LedgerError`), then call the verifier and compare the tree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajledger.verify import predicates
from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import DigestMismatchError, FormatError
from trajledger.verify.keys import PublicKey
from trajledger.verify.statement import verify_statement
from trajledger.verify.tree import TreeDiff, diff_tree, manifest_from_statement

from .errors import KeyError_, LedgerError
from .files import collect_files

__all__ = ["FilesResult", "load_pubkey_file", "read_input", "verify_files"]


def read_input(path: Path, what: str) -> bytes:
    """Read a file the user named, turning OS errors into one-line `LedgerError`s."""
    try:
        return path.read_bytes()
    except FileNotFoundError as e:
        raise LedgerError(f"{what} {path}: no such file") from e
    except OSError as e:
        raise LedgerError(f"{what} {path}: cannot read: {e.strerror}") from e


def load_pubkey_file(path: Path) -> PublicKey:
    """Load a trusted public key PEM the user named (a bad key is operational: exit 3)."""
    data = read_input(path, "public key")
    try:
        return PublicKey.from_pem(data, f"public key {path}")
    except FormatError as e:
        raise KeyError_(str(e)) from e


@dataclass(frozen=True)
class FilesResult:
    """Outcome of `verify_files`."""

    subject: str
    signers: tuple[str, ...]
    file_count: int
    diff: TreeDiff

    def to_json(self) -> dict[str, Any]:
        """Stable JSON form."""
        return {
            "subject": self.subject,
            "signers": list(self.signers),
            "files": self.file_count,
            "ok": self.diff.ok,
            "missing": list(self.diff.missing),
            "extra": list(self.diff.extra),
            "changed": [{"path": p, "reason": r} for p, r in self.diff.changed],
        }

    def raise_if_failed(self) -> None:
        """Raise `DigestMismatchError` with one line per missing, extra or changed file."""
        if not self.diff.ok:
            raise DigestMismatchError("\n".join(self.diff.problems()), subject=self.subject)


def verify_files(
    paths: Sequence[Path],
    envelope_path: Path,
    pubkey_paths: Sequence[Path],
    *,
    threshold: int = 1,
    on_progress: Callable[..., Any] | None = None,
) -> FilesResult:
    """Verify an envelope, then compare the given paths with its manifest.

    Raises:
        LedgerError / KeyError_: unreadable inputs (exit 3).
        FormatError, SignatureError, PolicyError, DigestMismatchError: verification (exit 1).
    """
    keys = [load_pubkey_file(p) for p in pubkey_paths]
    envelope = Envelope.from_bytes(
        read_input(envelope_path, "envelope"), f"envelope {envelope_path}"
    )
    verified = verify_statement(
        envelope,
        keys,
        allowed_predicate_types={predicates.FILES},
        threshold=threshold,
        what=f"envelope {envelope_path}",
    )
    manifest = manifest_from_statement(verified.statement, f"envelope {envelope_path}")
    files = collect_files(paths)
    if on_progress is None:
        diff = diff_tree(manifest, files)
    else:
        with on_progress(len(files), "verifying") as advance:
            diff = diff_tree(manifest, files, on_done=lambda _d: advance(1))
    subject = verified.statement.subjects[0].name
    return FilesResult(
        subject, tuple(k.keyid[:16] for k in verified.signers), len(manifest.files), diff
    )
