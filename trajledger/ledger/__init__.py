"""trajledger's write side: keys, object store, log, manifests, recording, index, exchange.

Imports ``verify`` for every shared format definition; never the other way round.
"""

from __future__ import annotations

from .._platform import require_posix

require_posix()  # before anything imports fcntl: one clear sentence on another system

from .errors import KeyError_, LedgerError, LogError, StoreError  # noqa: E402

__all__ = ["KeyError_", "LedgerError", "LogError", "StoreError"]
