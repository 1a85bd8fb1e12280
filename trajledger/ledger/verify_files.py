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
from trajledger.verify.errors import DigestMismatchError, FormatError, SignatureError
from trajledger.verify.keys import PublicKey
from trajledger.verify.statement import verify_statement
from trajledger.verify.tree import TreeDiff, diff_tree, manifest_from_statement

from .errors import KeyError_, LedgerError
from .files import collect_files

__all__ = ["FilesResult", "load_pubkey_file", "read_input", "verify_files"]

_MAX_PUBKEY = 65536
"""The most of a ``--pubkey`` file read (a PEM public key is under 1 KiB)."""


def read_input(path: Path, what: str, limit: int = -1) -> bytes:
    """Read a file the user named (at most ``limit`` bytes and one more, when given: the
    caller refuses a longer one unparsed), turning OS errors into one-line `LedgerError`s."""
    try:
        with path.open("rb") as f:
            return f.read(limit + 1 if limit >= 0 else -1)
    except FileNotFoundError as e:
        raise LedgerError(f"{what} {path}: no such file") from e
    except OSError as e:
        raise LedgerError(f"{what} {path}: cannot read: {e.strerror}") from e


def load_pubkey_file(path: Path) -> PublicKey:
    """Load a trusted public key PEM the user named (a bad key is operational: exit 3). At most
    64 KiB is read, as of a key in the key store (`keys.KeyStore.public`): a larger file (or
    ``/dev/zero``) is refused unread, not parsed as PEM and then split into words (rev35)."""
    data = read_input(path, "public key", _MAX_PUBKEY)
    if len(data) > _MAX_PUBKEY:
        raise KeyError_(f"public key {path}: larger than 64 KiB, so not a public key (a PEM "
                        "public key is under 1 KiB): give the signer's .pub file")
    try:
        return PublicKey.from_pem(data, f"public key {path}")
    except FormatError as e:
        from .key_forms import hinted  # DER or OpenSSH: named, with how to convert (left37)

        raise KeyError_(hinted(str(e), data, path)) from e


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
    try:
        verified = verify_statement(
            envelope,
            keys,
            allowed_predicate_types={predicates.FILES},
            threshold=threshold,
            what=f"envelope {envelope_path}",
        )
    except SignatureError as e:
        raise SignatureError(_not_the_signers(str(e), envelope, pubkey_paths, keys)) from e
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


def _not_the_signers(message: str, envelope: Envelope, paths: Sequence[Path],
                     keys: Sequence[PublicKey]) -> str:
    """``message`` (no key given verified the envelope) with the keys that signed it, as the
    envelope names them, beside the keys given: a key file swapped at the path the user
    trusts, or another key of the same name (out36 finding 2), says so and what to do."""
    given = {k.keyid[:16] for k in keys}
    named = sorted({s.keyid[:16] for s in envelope.signatures if s.keyid} - given)
    if "no signature by a trusted key" not in message or not named:
        return message
    files = ", ".join(f"{p} ({k.algorithm}, keyid {k.keyid[:16]})"
                      for p, k in zip(paths, keys, strict=True))
    return (f"{message}; it names signing key(s) {', '.join(named)}, not the key(s) given: "
            f"{files}: a key file replaced, or another key of that name? Ask the signer for "
            "its public key ('trajledger key export NAME' prints it), compare the keyid, and "
            "give that file with --pubkey")
