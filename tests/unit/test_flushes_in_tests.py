"""tests/conftest.py's `flush_to_the_page_cache`, seen from a module that does not name the
flushes: each returns without waiting for the disk on a regular file or a directory, and fails
as the real call does elsewhere; the user state's SQLite commits do not wait either, unless
``TRAJLEDGER_TESTS_REAL_FLUSHES=1`` when the connection is made. (This module spells their
names in two parts: a module whose source names them whole has the real ones, which
tests/unit/test_testkit.py checks.)"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest

FLUSHES = ("f" "sync", "f" "datasync")
FS_FLUSH = "sync" "fs"
SYNCED = "PRAGMA " "syn" "chronous"
pytestmark = pytest.mark.skipif(os.environ.get("TRAJLEDGER_TESTS_REAL_FLUSHES") == "1",
                                reason="the run asked for the real flushes")


@pytest.mark.parametrize("name", FLUSHES)
def test_a_flush_returns_on_a_file_and_fails_as_the_real_one_elsewhere(
    name: str, tmp_path: Path
) -> None:
    flush = getattr(os, name)
    assert getattr(flush, "__wrapped__", None) is not None, "the real call, in a test"
    (tmp_path / "d").mkdir()
    with open(tmp_path / "f", "wb") as f:
        f.write(b"data")
        flush(f.fileno())
    fd = os.open(tmp_path / "d", os.O_RDONLY | os.O_DIRECTORY)
    flush(fd)
    os.close(fd)
    r, w = os.pipe()
    try:
        with pytest.raises(OSError) as e:
            flush(r)  # a pipe: the real call's answer
        assert e.value.errno == errno.EINVAL
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(OSError) as e:
        flush(r)  # closed
    assert e.value.errno == errno.EBADF


def test_the_file_systems_flush_checks_its_descriptor(tmp_path: Path) -> None:
    from trajledger.ledger import fs

    sync = getattr(fs, FS_FLUSH)
    assert sync.__module__ != fs.__name__, "the real call, in a test"
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    sync(fd, str(tmp_path))
    os.close(fd)
    with pytest.raises(OSError) as e:
        sync(fd, str(tmp_path))
    assert e.value.errno == errno.EBADF


@pytest.mark.parametrize(("real", "level"), [("0", 0), ("1", 2)])  # OFF, FULL
def test_the_user_states_commits_go_to_the_page_cache_unless_the_real_flushes_are_asked(
    real: str, level: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As trajledger.ledger.trust_state opens and sets the user state (its own unit test,
    # test_the_state_is_private_and_durable, sees FULL there with the real ones asked).
    monkeypatch.setenv("TRAJLEDGER_TESTS_REAL_FLUSHES", real)
    con = sqlite3.connect(tmp_path / "state.sqlite", isolation_level=None)
    con.execute(SYNCED + "=FULL")
    assert con.execute(SYNCED).fetchone() == (level,)
    con.close()
