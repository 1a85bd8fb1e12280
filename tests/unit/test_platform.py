"""The platforms: the write side refuses a system that is not POSIX in one sentence.

Run in a child interpreter whose ``os.name`` is set to ``nt`` before trajledger loads (the
rest of the standard library is already loaded, as on Windows it would be its own).
"""

from __future__ import annotations

import io
import subprocess
import sys

from trajledger._platform import SHOWN
from trajledger.verify.nodes import UNDECODABLE

MESSAGE = (
    "{platform}: trajledger's ledger and runner need a POSIX system (Linux or macOS): the log's "
    "single writer holds flock() locks and durable writes fsync directories. The verifier runs "
    "here: python -m trajledger.verify BUNDLE --policy POLICY"
)


def _child(code: str) -> subprocess.CompletedProcess[str]:
    prelude = "import os, sys, pathlib, shutil; os.name = 'nt'\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_importing_the_write_side_off_posix_says_what_runs() -> None:
    r = _child(
        "from trajledger._platform import UnsupportedPlatformError\n"
        "try:\n"
        "    import trajledger.ledger.log\n"
        "except UnsupportedPlatformError as e:\n"
        "    print(type(e).__mro__[1].__name__, e)\n"
        "print(sorted(m for m in sys.modules if m.startswith('trajledger.ledger.')))\n"
    )
    assert r.returncode == 0, r.stderr
    want = "ImportError " + MESSAGE.format(platform=sys.platform)
    assert r.stdout.splitlines() == [want, "[]"]  # nothing of the write side was loaded


def test_the_command_off_posix_exits_3_with_one_line() -> None:
    r = _child("sys.argv = ['trajledger', '--help']\nfrom trajledger.__main__ import main\nmain()")
    assert r.returncode == 3
    assert r.stderr == "FAIL: " + MESSAGE.format(platform=sys.platform) + "\n"
    assert r.stdout == ""


def test_the_declared_platforms_are_posix_ones() -> None:
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    classifiers = tomllib.loads(pyproject.read_text("utf-8"))["project"]["classifiers"]
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert "Operating System :: MacOS" in classifiers
    assert not any("Windows" in c or "OS Independent" in c for c in classifiers)


def test_the_stream_handler_shows_every_lone_surrogate_as_the_table() -> None:
    """rev39: the handler computes `verify.nodes.UNDECODABLE`'s rule (this floor stands below
    ``verify/``): the same text for each of the 2,048 lone surrogates."""
    surrogates = [chr(c) for c in range(0xD800, 0xE000)]
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors=SHOWN)
    stream.write("".join(surrogates) + "✓")
    stream.flush()
    text = stream.buffer.getvalue().decode("utf-8")
    assert text == "".join(surrogates).translate(UNDECODABLE) + "✓"
    latin = io.TextIOWrapper(io.BytesIO(), encoding="latin-1", errors=SHOWN)
    latin.write("\udcfd ✓")
    latin.flush()
    assert latin.buffer.getvalue() == b"\\xfd \\u2713"
