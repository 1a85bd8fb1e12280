"""Errors of the write side. They extend the hierarchy in `verify.errors`.

``LedgerError`` and its subclasses are operational: a missing ledger, an unreadable store, an
unknown or undecryptable key. The CLI maps them to exit code 3.
"""

from __future__ import annotations

from trajledger.verify.errors import ProvenanceError

__all__ = ["KeyError_", "LedgerError", "LogError", "StoreError"]


class LedgerError(ProvenanceError):
    """An operational problem with the ledger: missing, unreadable or misconfigured."""


class StoreError(LedgerError):
    """The object store cannot read or write a blob."""


class LogError(LedgerError):
    """The log cannot be opened, locked or appended to."""


class KeyError_(LedgerError):
    """A key is unknown, unreadable, or its passphrase is wrong."""
