"""tests/subprocess_site/sitecustomize.py, seen from the Python processes a test starts: their
flushes return without waiting for the disk on a regular file or a directory and fail as the
real call does elsewhere, the file system's flush too once its module is imported, and the
user state's SQLite commits do not wait either once ``sqlite3`` is (its setting made OFF); with
``TRAJLEDGER_TESTS_REAL_FLUSHES=1`` (what a module that names the flushes has for each test)
they are the real ones. (This module spells their names in two parts, as
tests/unit/test_flushes_in_tests.py does: a module whose source names them whole has the real
ones.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FLUSHES = ("f" "sync", "f" "datasync")
FS_FLUSH = "sync" "fs"
SYNCED = "PRAGMA " "syn" "chronous"
REAL = "TRAJLEDGER_TESTS_REAL_FLUSHES"

PROBE = """
import errno, json, os, sys
before = "trajledger.ledger.fs" in sys.modules or "sqlite3" in sys.modules
seen = {}
for name in sys.argv[3:5]:
    flush = getattr(os, name)
    with open(sys.argv[1], "wb") as f:
        f.write(b"data")
        flush(f.fileno())
    r, w = os.pipe()
    try:
        flush(r)
        pipe = 0
    except OSError as e:
        pipe = e.errno
    os.close(r)
    os.close(w)
    try:
        flush(r)
        closed = 0
    except OSError as e:
        closed = e.errno
    seen[name] = [hasattr(flush, "__wrapped__"), pipe == errno.EINVAL, closed == errno.EBADF]
from trajledger.ledger import fs
sync = getattr(fs, sys.argv[5])
fd = os.open(sys.argv[2], os.O_RDONLY | os.O_DIRECTORY)
sync(fd, sys.argv[2])
os.close(fd)
try:
    sync(fd, sys.argv[2])
    closed = 0
except OSError as e:
    closed = e.errno
seen["fs"] = [sync.__module__ != fs.__name__, closed == errno.EBADF, before]
import sqlite3
con = sqlite3.connect(sys.argv[2] + "/state.sqlite")
con.execute(sys.argv[6] + "=FULL")
seen["sqlite"] = con.execute(sys.argv[6]).fetchone()[0]
print(json.dumps(seen))
"""


def probe(tmp_path: Path, env: dict[str, str]) -> dict[str, list[bool] | int]:
    r = subprocess.run([sys.executable, "-c", PROBE, tmp_path / "f", tmp_path, *FLUSHES, FS_FLUSH,
                        SYNCED],
                       capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    seen: dict[str, list[bool] | int] = json.loads(r.stdout)
    return seen


@pytest.mark.skipif(os.environ.get(REAL) == "1", reason="the run asked for the real flushes")
def test_a_started_process_flushes_to_the_page_cache(tmp_path: Path) -> None:
    seen = probe(tmp_path, {k: v for k, v in os.environ.items() if k != REAL})
    assert seen == {FLUSHES[0]: [True, True, True], FLUSHES[1]: [True, True, True],
                    "fs": [True, True, False], "sqlite": 0}  # OFF


def test_with_the_real_flushes_asked_a_started_process_has_them(tmp_path: Path) -> None:
    seen = probe(tmp_path, {**os.environ, REAL: "1"})
    assert seen == {FLUSHES[0]: [False, True, True], FLUSHES[1]: [False, True, True],
                    "fs": [False, True, False], "sqlite": 2}  # FULL
