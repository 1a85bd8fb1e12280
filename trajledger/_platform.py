"""The systems trajledger's write side runs on: POSIX (Linux, macOS).

Scope: `require_posix`, called when ``trajledger.ledger`` is imported (and so by
``trajledger.runner`` and the ``trajledger`` command), so that another system gets one clear
sentence instead of a traceback about ``fcntl``. The log's single writer and the user's state
take ``flock()`` locks, and durable writes fsync directories; neither exists on Windows.

Also `UNDECODABLE` and the stream error handler `SHOWN`: how a name that is not UTF-8 is shown,
in messages and ``--json`` alike (docs/cli.md, "Names that are not UTF-8").

Non-scope: the verifier. ``trajledger.verify`` (and a copy of ``verify/`` run as ``python -m
verify``) needs only the standard library and ``cryptography``, and runs anywhere Python does.
"""

from __future__ import annotations

import codecs
import os
import sys

__all__ = ["SHOWN", "UNDECODABLE", "UnsupportedPlatformError", "require_posix"]


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


UNDECODABLE = {c: f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c < 0xDD00 else f"\\u{c:04x}"
               for c in range(0xD800, 0xE000)}
"""A ``str.translate`` table: each lone surrogate as text any strict parser and UTF-8 encoder
takes. The one ``os.fsdecode`` makes of a byte that is no UTF-8 (a file name another tool made
under ``LANG=C``) is shown as that byte, ``\\xfd``, as Python's ``backslashreplace`` shows bytes;
any other as ``\\udXXX``. One rule for every message (`SHOWN`) and every ``--json`` document
(``ledger.clikit.emit_json``): a lone surrogate was ``\\udcfd`` in both, which strict JSON
parsers (Go's, Rust's serde_json) refuse or replace (out39's Left)."""

SHOWN = "trajledger.shown"
"""The error handler of the command's stdout and stderr: `UNDECODABLE`'s text for a lone
surrogate, ``backslashreplace``'s for a character the stream's encoding cannot hold (``✓`` on a
Latin-1 terminal, ``\\u2713``)."""


def _shown(e: UnicodeError) -> tuple[str, int]:
    if not isinstance(e, UnicodeEncodeError):
        raise e
    bad = e.object[e.start:e.end]
    return "".join(UNDECODABLE.get(ord(c)) or c.encode("ascii", "backslashreplace").decode()
                   for c in bad), e.end


codecs.register_error(SHOWN, _shown)
