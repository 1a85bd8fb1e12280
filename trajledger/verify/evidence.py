"""Where a verifier reads evidence from: a ledger directory or an exported bundle.

Scope: a small read-only protocol, `Evidence`, over the things lineage verification needs (the
signed checkpoint, log entries with their indices, inclusion proofs, blobs by digest). Its
implementations: over an exported bundle in ``verify.bundle``; over a ledger directory on local
disk in ``verify.ledger_dir`` (loaded only by those who read one).
Non-scope: deciding anything. Every byte returned here is checked by the caller against a
signature, a digest or a Merkle proof before it is believed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .errors import FormatError

if TYPE_CHECKING:
    from .compact import CompactRange

__all__ = ["MAX_BLOB_READ", "Evidence", "read_blob_file"]

MAX_BLOB_READ = 1 << 34
"""A verifier never reads a blob larger than this into memory (16 GiB)."""


def read_blob_file(path: Path | None, digest: str) -> bytes | None:
    """The bytes of the file holding blob ``digest`` (None: absent), refusing one larger than
    `MAX_BLOB_READ` before reading it.

    Raises:
        FormatError: the file is larger than `MAX_BLOB_READ`.
    """
    if path is None:
        return None
    if path.stat().st_size > MAX_BLOB_READ:
        raise FormatError(f"blob {digest}: larger than {MAX_BLOB_READ} bytes")
    return path.read_bytes()


class Evidence(Protocol):
    """Read-only access to a log and its blobs; nothing returned is trusted yet."""

    def checkpoint_note(self) -> bytes:
        """The newest signed checkpoint note (unverified)."""
        ...

    def entries(self) -> Iterator[tuple[int, bytes]]:
        """Every available ``(index, entry bytes)``, in index order (a bundle holds a subset)."""
        ...

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """An inclusion proof of entry ``index`` in the tree of ``size``."""
        ...

    def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        """A consistency proof between two tree sizes (FileNotFoundError when not available)."""
        ...

    def blob(self, digest: str) -> bytes | None:
        """The bytes stored under ``digest``, or None when absent (erased or not exported)."""
        ...

    def has_blob(self, digest: str) -> bool:
        """True when a blob is present (without reading it)."""
        ...

    def blob_path(self, digest: str) -> Path | None:
        """A local file holding the blob, for streaming hashes; None when absent. Called on
        the verifier's hashing threads while the verifying thread calls the other methods."""
        ...

    def blob_size(self, digest: str) -> int | None:
        """The stored size of a blob (without reading it); None when absent or unknown."""
        ...

    def omitted(self, digest: str) -> bool:
        """True when the evidence deliberately leaves a data blob out (a bundle exported
        without data): its digest is bound, its bytes are not here to check."""
        ...

    def key_handovers(self) -> list[bytes]:
        """The log's key handover notes (``verify.log_key``), oldest first; empty when its key
        was never rotated."""
        ...

    def extension(self) -> CompactRange | None:
        """The compact range of the log's first entries when the evidence holds every entry
        after them (an update bundle's extension: they prove themselves by rebuilding the
        root); None when each entry comes with its own proof."""
        ...
