"""Transparency-log checkpoints: parsing, signature and cosignature checks, consistency.

Scope: the c2sp.org/tlog-checkpoint note text (origin, tree size, root hash, optional extension
lines) and verifying a signed checkpoint against the log's key.

Non-scope: witness cosignatures (``verify.cosignatures``), judging two checkpoints of one log
(``verify.consistency``), the note format itself
(``verify.note``), Merkle proof arithmetic (``verify.merkle``),
fetching checkpoints or proofs, and trust policy (which witnesses, how many): callers pass the
keys and thresholds they trust.

Spec: c2sp.org/tlog-checkpoint, c2sp.org/tlog-cosignature, c2sp.org/signed-note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import FormatError, PolicyError, SignatureError
from .merkle import HASH_SIZE
from .note import Note, Verifier, b64decode_strict, check_text_bytes, verify_note

__all__ = ["HANDOVER_DIR", "Checkpoint", "verify_checkpoint"]

HANDOVER_DIR = "key-handovers"
"""Where a log directory keeps the checkpoints by which its key handed over to the next
(``<n>``, 1, 2, ... in order), and the prefix of their members in a bundle: here, so that
finding them does not load ``verify.log_key``, which checks them only when there are some."""

_MAX_SIZE = (1 << 64) - 1
_DECIMAL = re.compile(r"0|[1-9][0-9]*")


@dataclass(frozen=True)
class Checkpoint:
    """The signed statement of a log: its origin, its size and the root at that size.

    Attributes:
        origin: the log's identity, the first line.
        size: number of entries in the tree.
        root: the 32-byte RFC 6962 root hash at ``size``.
        extensions: optional further lines, opaque.
    """

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Check that the checkpoint can be written as a valid note text
        (``ledger.encode.checkpoint_text``).

        Raises:
            FormatError: empty origin, a field holding a newline or control character, a size
                outside ``[0, 2**64)``, a root that is not 32 bytes, or an empty extension line.
        """
        for what, line in [("origin", self.origin), *(("extension", e) for e in self.extensions)]:
            if not line:
                raise FormatError(f"checkpoint {what} line is empty")
            if any(c < " " for c in line):
                raise FormatError(f"checkpoint {what} line {line!r} holds a control character")
        if isinstance(self.size, bool) or not 0 <= self.size <= _MAX_SIZE:
            raise FormatError(f"checkpoint size {self.size}, want 0..2**64-1")
        if len(self.root) != HASH_SIZE:
            raise FormatError(f"checkpoint root has {len(self.root)} bytes, want {HASH_SIZE}")

    def horizon(self) -> str:
        """What a verdict against this checkpoint cannot know offline, and the way to know it
        (out45 finding 8: "revoked since?" and "approved by whom?" read as answered; rev43
        finding 2: a bundle cannot prove absence, so not only what came after its size)."""
        return (f"a revocation, withdrawn approval or key compromise left out of this bundle "
                f"or logged in {self.origin} after size {self.size} (`trajledger monitor` reads "
                "every entry); approvals: approve what you train on in your ledger")

    @classmethod
    def from_text(cls, body: bytes) -> Checkpoint:
        """Parse a checkpoint note text strictly.

        Args:
            body: the note text, including its final newline (``Note.text``).

        Returns:
            The checkpoint.

        Raises:
            FormatError: not UTF-8, a control character, no final newline, fewer than three
                lines, an empty line, a size with a sign, leading zeros or other characters, or
                a root that is not canonical base64 of 32 bytes.
        """
        text = check_text_bytes(body, "checkpoint")
        if not text.endswith("\n"):
            raise FormatError("checkpoint text does not end in a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise FormatError(f"checkpoint has {len(lines)} lines, want at least 3")
        origin, size_text, root_text, *extensions = lines
        if not _DECIMAL.fullmatch(size_text):
            raise FormatError(
                f"checkpoint size {size_text!r} is not a decimal without sign or leading zeros"
            )
        root = b64decode_strict(root_text, "checkpoint root")
        return cls(origin=origin, size=int(size_text), root=root, extensions=tuple(extensions))


def verify_checkpoint(
    note_bytes: bytes, log_verifier: Verifier, *, origin: str | None = None
) -> Checkpoint:
    """Verify a signed checkpoint by the log's key and return it.

    Steps:
        1. Parse the signed note.
        2. Verify it carries a valid signature by ``log_verifier`` (other signatures are
           ignored unless they are by that key and fail).
        3. Parse the checkpoint text.
        4. Require the origin to equal the log key's name, and ``origin`` when given.

    Args:
        note_bytes: the signed checkpoint as served.
        log_verifier: the log's public key.
        origin: the origin the caller expects, if it knows one.

    Returns:
        The verified checkpoint.

    Raises:
        FormatError: the note or its checkpoint text is malformed.
        SignatureError: no valid signature by the log's key, or the origin differs from the
            key's name.
        PolicyError: the origin differs from the expected ``origin``.
    """
    # (1)
    note = Note.from_bytes(note_bytes)
    # (2)
    verify_note(note, [log_verifier])
    # (3)
    cp = Checkpoint.from_text(note.text)
    # (4)
    if cp.origin != log_verifier.name:
        raise SignatureError(
            f"checkpoint origin {cp.origin!r} does not match log key name {log_verifier.name!r}"
        )
    if origin is not None and cp.origin != origin:
        raise PolicyError(f"checkpoint origin {cp.origin!r}, want {origin!r}")
    return cp
