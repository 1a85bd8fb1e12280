"""Offline transparency-log proofs in the ``c2sp.org/tlog-proof@v1`` text format.

Scope: parsing the format (header line, optional ``extra`` line, ``index`` line, inclusion proof
hashes, a blank line, the signed checkpoint verbatim) and verifying that an entry is included in
the log under a checkpoint signed by the log's key.

Non-scope: witness cosignature policy (call ``verify.cosignatures.verify_cosignatures`` on
``TlogProof.checkpoint``), consistency with other checkpoints
(``verify.consistency.check_consistent``), building and writing proofs
(``verify.tiles.TileReader``, ``ledger.encode.tlog_proof_bytes``), and
the meaning of the extra data, which is not authenticated and must not be trusted.

Spec: c2sp.org/tlog-proof (v1), c2sp.org/tlog-checkpoint, RFC 6962 section 2.1.1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .checkpoint import Checkpoint, verify_checkpoint
from .errors import FormatError
from .merkle import HASH_SIZE, leaf_hash, verify_inclusion
from .note import Note, Verifier, b64decode_strict

__all__ = ["MAX_PROOF_HASHES", "TLOG_PROOF_HEADER", "TlogProof", "verify_tlog_proof"]

TLOG_PROOF_HEADER = b"c2sp.org/tlog-proof@v1"
"""The first line of every proof."""

MAX_PROOF_HASHES = 64
"""Most inclusion hashes a proof can need: the height of a tree of 2**64 leaves."""

_INDEX_LINE = re.compile(rb"index (0|[1-9][0-9]*)")
_MAX_INDEX = (1 << 64) - 1


@dataclass(frozen=True)
class TlogProof:
    """An offline proof that the entry at ``index`` is in the log at a signed checkpoint.

    Attributes:
        index: zero-based index of the entry in the log.
        inclusion: the RFC 6962 inclusion proof, from the leaf's sibling up.
        checkpoint: the signed checkpoint note, verbatim.
        extra: optional opaque, unauthenticated application data (non-empty when present).
    """

    index: int
    inclusion: tuple[bytes, ...]
    checkpoint: bytes
    extra: bytes | None = None

    def __post_init__(self) -> None:
        """Check the fields can be written as a valid proof.

        Raises:
            FormatError: an index outside ``[0, 2**64)``, a hash that is not 32 bytes, more
                than 64 hashes, empty extra data, or a checkpoint that is not a signed note
                holding a checkpoint text.
        """
        if isinstance(self.index, bool) or not 0 <= self.index <= _MAX_INDEX:
            raise FormatError(f"tlog-proof index {self.index}, want 0..2**64-1")
        if len(self.inclusion) > MAX_PROOF_HASHES:
            raise FormatError(
                f"tlog-proof has {len(self.inclusion)} inclusion hashes, want at most "
                f"{MAX_PROOF_HASHES}"
            )
        for i, h in enumerate(self.inclusion):
            if len(h) != HASH_SIZE:
                raise FormatError(f"tlog-proof hash {i} has {len(h)} bytes, want {HASH_SIZE}")
        if self.extra is not None and not self.extra:
            raise FormatError("tlog-proof extra data is empty, want it omitted instead")
        _check_note(self.checkpoint)

    @classmethod
    def from_bytes(cls, data: bytes) -> TlogProof:
        """Parse a proof strictly.

        Args:
            data: the proof file's bytes.

        Returns:
            The proof.

        Raises:
            FormatError: a wrong header, a malformed ``extra`` or ``index`` line, a hash line
                that is not canonical base64 of 32 bytes, no blank line before the checkpoint,
                or a malformed checkpoint note.
        """
        header, sep, rest = data.partition(b"\n")
        if header != TLOG_PROOF_HEADER or not sep:
            raise FormatError(f"tlog-proof starts with {header[:40]!r}, want {TLOG_PROOF_HEADER!r}")
        line, _, rest = rest.partition(b"\n")
        extra: bytes | None = None
        if line.startswith(b"extra "):
            extra = b64decode_strict(_ascii(line[6:], "extra"), "tlog-proof extra data")
            line, _, rest = rest.partition(b"\n")
        m = _INDEX_LINE.fullmatch(line)
        if m is None:
            raise FormatError(
                f"tlog-proof line {line[:40]!r}, want 'index <decimal without leading zeros>'"
            )
        hashes: list[bytes] = []
        while True:
            line, sep, rest = rest.partition(b"\n")
            if not sep:
                raise FormatError("tlog-proof has no blank line before its checkpoint")
            if not line:
                break
            if len(hashes) == MAX_PROOF_HASHES:
                raise FormatError(f"tlog-proof has more than {MAX_PROOF_HASHES} inclusion hashes")
            hashes.append(b64decode_strict(_ascii(line, "hash"), f"tlog-proof hash {len(hashes)}"))
        # The constructor checks what the lines hold: the index's range, each hash's size, the
        # extra data and the checkpoint.
        return cls(index=int(m.group(1)), inclusion=tuple(hashes), checkpoint=rest, extra=extra)


@lru_cache(maxsize=4)
def _check_note(note: bytes) -> None:
    """Parse a checkpoint note, once for the same bytes: the ~1,000 proofs of a bundle carry
    one note (the parse depends on the bytes alone; a note that fails is parsed again)."""
    Checkpoint.from_text(Note.from_bytes(note).text)


def _ascii(line: bytes, what: str) -> str:
    try:
        return line.decode("ascii")
    except UnicodeDecodeError as e:
        raise FormatError(f"tlog-proof {what} line is not ASCII") from e


def verify_tlog_proof(
    proof: TlogProof | bytes, entry: bytes, log_verifier: Verifier, origin: str | None = None
) -> Checkpoint:
    """Verify that ``entry`` is in the log, at the proof's index, under a signed checkpoint.

    Steps:
        1. Parse the proof if bytes were given.
        2. Verify the checkpoint's signature by the log's key, and its origin
           (`verify_checkpoint`).
        3. Verify the inclusion of ``leaf_hash(entry)`` at ``proof.index`` against the
           checkpoint's size and root.

    Args:
        proof: the proof, parsed or as bytes.
        entry: the exact bytes of the log entry.
        log_verifier: the log's public key.
        origin: the log origin the caller expects, if it knows one.

    Returns:
        The verified checkpoint.

    Raises:
        FormatError: the proof or its checkpoint is malformed.
        SignatureError: the checkpoint is not signed by the log's key.
        PolicyError: the origin is not the expected one.
        ProofError: the entry is not included at that index.
    """
    # (1)
    if isinstance(proof, bytes):
        proof = TlogProof.from_bytes(proof)
    # (2)
    cp = verify_checkpoint(proof.checkpoint, log_verifier, origin=origin)
    # (3)
    verify_inclusion(proof.index, cp.size, leaf_hash(entry), proof.inclusion, cp.root)
    return cp
