"""`errors.library_os_error` reads lance's ``RuntimeError`` for the system's error, and no other
exception (rev49 finding 4).

out51 made ``… (os error 28) …`` in an exception's text a full disk (exit 3, "free space on
the disk"), whatever the exception: a bug's ``KeyError`` of a signed name (a record named
``grid (os error 28)``) or a ``ValueError`` quoting a file's line then read as a full disk, and
the bug was never reported. docs/SECURITY.md, "Review of 2026-12-07, thirty-seventh round
(rev49)".
"""

from __future__ import annotations

import errno

import pytest

from trajledger.ledger.errors import library_os_error

LANCE_FULL = ("lance error: LanceError(IO): Generic LocalFileSystem error: Unable to copy data to "
              "file: No space left on device (os error 28), /root/.cargo/registry/src/index.crates"
              ".io-1949cf8c6b5b557f/lance-table-13.0.0/src/io/commit.rs:1663:50")


def test_lances_full_disk_is_the_disks() -> None:
    found = library_os_error(RuntimeError(LANCE_FULL))
    assert found is not None and found.errno == errno.ENOSPC


@pytest.mark.parametrize("error", [KeyError("grid (os error 28)"),
                                   ValueError("line 3: 'x (os error 28)' is no number"),
                                   TypeError("(os error 28)"), OSError(5, "(os error 28)")])
def test_another_exceptions_text_is_no_full_disk(error: Exception) -> None:
    assert library_os_error(error) is None
