"""The ledger as verification evidence, whatever its store.

Scope: `ledger_evidence` opens a ledger for ``verify.lineage``: the log is read from the ledger
directory, blobs from the configured object store, local or remote (``s3://``, ``gs://`` via
pyarrow.fs). A remote blob that must be streamed (a deep re-hash) is downloaded once into a
private temporary directory, removed when the evidence is closed or collected.
Non-scope: judging anything; ``verify/`` does that with these bytes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from trajledger.verify.errors import FormatError
from trajledger.verify.ledger_dir import LedgerDirEvidence

from .errors import LogError, StoreError

if TYPE_CHECKING:
    from .home import LedgerHome
    from .store import ObjectStore

__all__ = ["StoreBlobs", "ledger_evidence"]


class StoreBlobs:
    """`verify.ledger_dir.Blobs` over an `ObjectStore` (unverified reads: the verifier hashes)."""

    def __init__(self, store: ObjectStore) -> None:
        """Read blobs from ``store``."""
        self.store = store
        self._tmp: Path | None = None
        self._tmp_lock = threading.Lock()  # blob_path runs on the verifier's hashing threads

    def has_blob(self, digest: str) -> bool:
        """True when the store holds the blob."""
        return self.store.exists(digest)

    def blob(self, digest: str) -> bytes | None:
        """The blob's bytes, or None when absent."""
        try:
            return self.store.get(digest)
        except StoreError:
            return None if not self.store.exists(digest) else _raise(digest)

    def blob_size(self, digest: str) -> int | None:
        """The blob's stored size, or None when absent."""
        return self.store.size(digest)

    def blob_path(self, digest: str) -> Path | None:
        """A local file with the blob: the store's own file, or a downloaded copy."""
        if not self.store.exists(digest):
            return None
        if self.store.is_local:
            return self.store.path_of(digest)
        with self._tmp_lock:
            if self._tmp is None:
                self._tmp = Path(tempfile.mkdtemp(prefix="trajledger-blobs-"))
                weakref.finalize(self, shutil.rmtree, self._tmp, True)
        dest = self._tmp / digest.removeprefix("sha256:")
        if not dest.exists():
            # Under a name of this thread, then renamed: two threads may fetch the same blob.
            part = dest.with_name(f"{dest.name}.{threading.get_ident()}")
            self.store.copy_to(digest, part)
            os.replace(part, dest)
        return dest


def _raise(digest: str) -> bytes:
    raise StoreError(f"object {digest}: present but unreadable")


def ledger_evidence(ledger: LedgerHome) -> LedgerDirEvidence:
    """The ledger's log and store as evidence for ``verify.lineage``, pinned to the signed
    checkpoint the user's trust state was last extended to (so the two agree)."""
    state = ledger.trust_state()
    return _LedgerLog(ledger.root, StoreBlobs(ledger.store), note=state.floor())


class _LedgerLog(LedgerDirEvidence):
    """`LedgerDirEvidence` whose key handover that cannot be read (an I/O error, not bad bytes)
    is an operational `LogError` (exit 3), as the ledger's own log reader says
    (`LogReader.key_handovers`): the verifier's reader calls it a `FormatError`, which would
    fail the lineage judged (exit 1) for a fault of this machine."""

    def key_handovers(self) -> list[bytes]:
        try:
            return super().key_handovers()
        except FormatError as e:
            if isinstance(e.__cause__, OSError):
                raise LogError(str(e)) from e
            raise
