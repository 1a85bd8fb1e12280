"""trajledger's write side: keys, object store, log, manifests, recording, index, exchange.

Imports ``verify`` for every shared format definition; never the other way round.
"""

from __future__ import annotations

from .errors import KeyError_, LedgerError, LogError, StoreError

__all__ = ["KeyError_", "LedgerError", "LogError", "StoreError"]
