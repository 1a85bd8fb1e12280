"""The systems trajledger's write side runs on: POSIX (Linux, macOS).

Scope: `require_posix`, called when ``trajledger.ledger`` is imported (and so by
``trajledger.runner`` and the ``trajledger`` command), so that another system gets one clear
sentence instead of a traceback about ``fcntl``. The log's single writer and the user's state
take ``flock()`` locks, and durable writes fsync directories; neither exists on Windows.

Non-scope: the verifier. ``trajledger.verify`` (and a copy of ``verify/`` run as ``python -m
verify``) needs only the standard library and ``cryptography``, and runs anywhere Python does.
"""

from __future__ import annotations

import os
import sys

__all__ = ["UnsupportedPlatformError", "require_posix"]


class UnsupportedPlatformError(ImportError):
    """The write side cannot run on this system (it is not POSIX)."""


def require_posix() -> None:
    """Refuse to load the write side off POSIX.

    Raises:
        UnsupportedPlatformError: ``os.name`` is not ``posix``; the message says what runs.
    """
    if os.name != "posix":
        raise UnsupportedPlatformError(
            f"{sys.platform}: trajledger's ledger and runner need a POSIX system (Linux or "
            "macOS): the log's single writer holds flock() locks and durable writes fsync "
            "directories. The verifier runs here: python -m trajledger.verify BUNDLE --policy "
            "POLICY"
        )
