"""Errors of the write side. They extend the hierarchy in `verify.errors`.

``LedgerError`` and its subclasses are operational: a missing ledger, an unreadable store, an
unknown or undecryptable key. The CLI maps them to exit code 3.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

from trajledger.verify.errors import FormatError, ProvenanceError, VerificationError
from trajledger.verify.shell_word import shell_word

__all__ = [
    "AlreadyRecordedError",
    "KeyError_",
    "LedgerError",
    "LogError",
    "OptionValueError",
    "PolicyFileError",
    "StoppedAfterRecordError",
    "StoreError",
    "TamperError",
    "cannot_write",
    "disk_error",
    "read_failure",
    "shell_word",
    "sqlite_next_step",
]


class LedgerError(ProvenanceError):
    """An operational problem with the ledger: missing, unreadable or misconfigured."""


class PolicyFileError(FormatError):
    """The user's own policy FILE is invalid (not TOML or JSON, an unknown setting or role, a
    key it cannot read or no key store holds): a usage error, exit 2 (DESIGN §8: input the
    user wrote and must fix), not evidence that failed, on every command that takes one
    (``--policy``, ``policy set FILE``; left36, as left35 made ``verify``). ``policy check
    FILE`` judges the file: its verdict stays a `FormatError`, exit 1. A file that cannot be
    read stays an `OSError` (exit 3); a damaged policy in a log or bundle stays exit 1."""


class OptionValueError(FormatError):
    """A value the user typed for an option can never be used (``revoke --reason ''``, a
    ``--known-checkpoint`` that is no checkpoint): a usage error, exit 2 (DESIGN §8), said in
    the one line of any usage error, with what to type (left37). A `FormatError`, so that
    callers of the Python API catching that are unchanged."""


class StoreError(LedgerError):
    """The object store cannot read or write a blob."""


class LogError(LedgerError):
    """The log cannot be opened, locked or appended to."""


class StoppedAfterRecordError(LogError):
    """A command stopped after it recorded: its line says what is recorded and what was not
    done, so that a caller adds no second line of it (`updates.apply_update`)."""


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


_NOT_THERE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR})
"""What a read of a ledger file meets when the file is not there (or a directory is in its
place, lock24): a finding about the ledger (missing), not about the machine."""


def read_failure(e: BaseException) -> OSError | None:
    """The system's failure to read behind ``e`` (``e`` itself, or an error it was raised from,
    as `StoreError` is from the ``OSError`` of its read): an error number other than a file not
    being there (`_NOT_THERE`), e.g. EIO or EACCES; else None.

    A check that meets one did not run: it must end the command as an operational error (exit
    3), never be taken as the data failing (exit 1) or be passed over (review lead26). A
    format error has no error number (pyarrow's, say), and is not one."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None and seen.errno not in _NOT_THERE:
            return seen
        seen = seen.__cause__
    return None


def disk_error(e: BaseException) -> bool:
    """A SQLite error the disk caused (I/O error, disk full, cannot open), not a bug's SQL."""
    import sqlite3

    if not isinstance(e, sqlite3.DatabaseError):
        return False
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (10, 13, 14)  # SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN
    return str(e) in ("disk I/O error", "database or disk is full", "unable to open database file")


def library_os_error(e: BaseException) -> OSError | None:
    """The system's error a library written in Rust reports in its own exception's words
    (lance's ``RuntimeError: lance error: LanceError(IO): … No space left on device (os error
    28), …`` on a full disk, out51): an ``OSError`` of that number, else None. Not a bug:
    the disk's (exit 3, the system's words and `next_step`). A ``RuntimeError`` only, as lance
    raises: any other exception whose text holds ``(os error 28)`` (a ``KeyError`` of a signed
    name, a bug's) is no full disk (rev49 finding 4)."""
    import re

    if not isinstance(e, RuntimeError) or not (found := re.search(r"\(os error (\d+)\)", str(e))):
        return None
    number = int(found.group(1))
    return OSError(number, os.strerror(number))


def after_update(e: Exception, logged: Sequence[int], what: str, undone: str) -> Exception:
    """What to raise for ``e``, met after an update recorded this log's indices ``logged``: ``e``
    itself when it is a verdict or not the disk's (a bug's SQL), else a `LedgerError` that says
    what is recorded and ``undone`` (fault27: exit 3, one line that says so)."""
    import sqlite3

    if isinstance(e, VerificationError) or (isinstance(e, sqlite3.Error) and not disk_error(e)):
        return e
    lo, hi = min(logged), max(logged)
    where = f"log index {lo}" if lo == hi else f"log indices {lo}..{hi}"
    return LedgerError(f"{what}: its update is recorded ({where}), but {undone}: {e}")


_NEXT_STEP = {
    errno.ENOSPC: "free space on the disk written to (the ledger's, or where --out writes) or "
                  "write elsewhere, then run the command again",
    errno.EDQUOT: "free space within your disk quota or write elsewhere, then run the command "
                  "again",
    errno.EFBIG: "a file grew past the largest this process may write ('ulimit -f', or the "
                 "file system's own limit): raise the limit or write elsewhere, then run the "
                 "command again",
    errno.EROFS: "write elsewhere (another --out, --ledger or directory)",
    errno.EACCES: "check who owns it and its mode ('ls -ld'), or use a place of yours",
}
_NEXT_STEP[errno.EPERM] = _NEXT_STEP[errno.EACCES]


def next_step(e: OSError) -> str:
    """``"; <what to do>"`` for a full disk or quota, a read-only file system or a permission
    refused, else ``""``: the end of the one line that reports ``e``. A library's error without
    an ``errno`` (pyarrow's ``[errno 28] ...``) is read for one."""
    import re

    number = e.errno
    if number is None and (found := re.search(r"\[errno (\d+)\]", str(e))):
        number = int(found.group(1))
    step = _NEXT_STEP.get(number) if number is not None else None
    return f"; {step}" if step else ""


def cannot_write(what: str, e: OSError) -> str:
    """The one line of a failed write of ``what`` (a state file, an output): the system's words
    and, for a full disk or quota, a read-only file system or a permission refused, what to do
    next (`next_step`; hour33's Left, left34)."""
    return f"{what}: cannot write: {e.strerror or e}{next_step(e)}"


_SQLITE_ERRNO = {13: errno.ENOSPC, 8: errno.EACCES, 3: errno.EACCES, 14: errno.EACCES}
"""SQLite's primary result codes (``sqlite_errorcode & 0xFF``) whose next step is the system's
(`next_step`): SQLITE_FULL, a full disk; SQLITE_READONLY, SQLITE_PERM and SQLITE_CANTOPEN, a file
or directory this user may not write or open (or a read-only file system)."""
_SQLITE_STEP = {
    5: "another trajledger process of yours holds it: let it finish, then run the command again",
    10: "the disk failed a read or write (full, removed or failing: 'dmesg' says which); fix it, "
        "then run the command again",
}
"""The next step of SQLITE_BUSY and SQLITE_IOERR (and its extended codes), which no errno says."""


def sqlite_next_step(e: BaseException) -> str:
    """``"; <what to do>"`` for a SQLite error, by its ``sqlite_errorcode`` (left34's Left): a
    full disk, a file or directory that may not be written or opened, as `next_step` says it
    for the system's errors; a database another process holds; a disk that failed. For an
    ``OSError``, `next_step`; else ``""``."""
    if isinstance(e, OSError):
        return next_step(e)
    code = getattr(e, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if primary in _SQLITE_ERRNO:
        return next_step(OSError(_SQLITE_ERRNO[primary], str(e)))
    step = _SQLITE_STEP.get(primary) if primary is not None else None
    return f"; {step}" if step else ""


