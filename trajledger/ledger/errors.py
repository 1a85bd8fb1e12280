"""Errors of the write side. They extend the hierarchy in `verify.errors`.

``LedgerError`` and its subclasses are operational: a missing ledger, an unreadable store, an
unknown or undecryptable key. The CLI maps them to exit code 3.
"""

from __future__ import annotations

from pathlib import Path

from trajledger.verify.errors import ProvenanceError, VerificationError

__all__ = [
    "AlreadyRecordedError",
    "KeyError_",
    "LedgerError",
    "LogError",
    "StoreError",
    "TamperError",
]


class LedgerError(ProvenanceError):
    """An operational problem with the ledger: missing, unreadable or misconfigured."""


class StoreError(LedgerError):
    """The object store cannot read or write a blob."""


class LogError(LedgerError):
    """The log cannot be opened, locked or appended to."""


class KeyError_(LedgerError):
    """A key is unknown, unreadable, or its passphrase is wrong."""


class TamperError(LedgerError, VerificationError):
    """Evidence on disk was changed behind the ledger's back (exit code 1, not 3).

    Raised where a file contradicts what was signed or committed: a ``treeState`` behind the
    signed checkpoint, a missing or foreign checkpoint, a stored object that does not hash to its
    name. Nothing is repaired or deleted on the way: the files are left exactly as found.

    Attributes:
        path: the file that is wrong (None when the problem is not one file's).
    """

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


class AlreadyRecordedError(LedgerError, VerificationError):
    """The digest is already recorded, with other signed metadata (exit code 1): one digest
    names one record of a log, so the new one is refused (nothing appended).

    Attributes:
        index: the log index of the record already there.
    """

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index
