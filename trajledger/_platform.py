"""The systems trajledger's write side runs on: POSIX (Linux, macOS).

Scope: `require_posix`, called when ``trajledger.ledger`` is imported (and so by
``trajledger.runner`` and the ``trajledger`` command), so that another system gets one clear
sentence instead of a traceback about ``fcntl``. The log's single writer and the user's state
take ``flock()`` locks, and durable writes fsync directories; neither exists on Windows.

Also the stream error handler `SHOWN`: a name that is not UTF-8 shown in messages as
``verify.nodes.UNDECODABLE`` shows it in ``--json`` (docs/cli.md, "Names that are not UTF-8").

Non-scope: the verifier. ``trajledger.verify`` (and a copy of ``verify/`` run as ``python -m
verify``) needs only the standard library and ``cryptography``, and runs anywhere Python does.
"""

from __future__ import annotations

import codecs
import os
import sys

__all__ = ["SHOWN", "UnsupportedPlatformError", "require_posix"]


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


SHOWN = "trajledger.shown"
"""The error handler of the command's stdout and stderr: a lone surrogate as
``verify.nodes.UNDECODABLE`` shows it (the one ``os.fsdecode`` makes of a byte that is not
UTF-8 as that byte, ``\\xfd``; any other as ``\\udXXX``), and a character the stream's encoding
cannot hold as ``backslashreplace`` does (``✓`` on a Latin-1 terminal, ``\\u2713``). This floor
stands below ``verify/``: the table's rule is computed here, and a test holds the two equal."""


def _shown(e: UnicodeError) -> tuple[str, int]:
    if not isinstance(e, UnicodeEncodeError):
        raise e
    bad = e.object[e.start:e.end]
    return "".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) < 0xDD00
                   else c.encode("ascii", "backslashreplace").decode() for c in bad), e.end


codecs.register_error(SHOWN, _shown)
