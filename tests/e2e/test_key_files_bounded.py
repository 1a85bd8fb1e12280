"""End to end (rev34, twenty-second round): what ``key list`` and ``key export`` read of the
key store's files.

``key export NAME`` lists the store's other keys (out36's warning of a key under two names),
so every file of ``keys/`` is read. A ``.pub`` file was read whole (a 2 GB file took its size
in memory before it was found not to be a key; under a memory bound, the command died), and a
``.key`` file was opened as any file (a FIFO left there hung both commands for good, whatever
key was asked for). Now a key file is read up to 64 KiB, opened without blocking, and one that
is no regular file is one line, exit 3. Each case runs in a process of its own, bounded in
memory and time.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import testkit

CLI = "from trajledger.runner.cli import main; main()"


def _run(home: Path, *args: str, memory: int | None = None) -> subprocess.CompletedProcess[str]:
    def bound() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run(
        [sys.executable, "-c", CLI, "--ledger", str(home), *args], capture_output=True,
        text=True, timeout=120, preexec_fn=bound,
        env={**os.environ, "TRAJLEDGER_STATE_DIR": str(home.parent / "state")},
    )  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A ledger with keys vendor and other, made in process as the user of ``tmp_path /
    "state"`` (`_run`'s): only the commands under test run in a bounded process of their own
    (ci54: the three set-up commands were processes too, 1 to 2 s of each test's set-up)."""
    from trajledger.runner.cli import main

    home = tmp_path / "lab"
    for args in (["init", "--origin", "lab.example/log"], ["key", "new", "vendor", "--no-encrypt"],
                 ["key", "new", "other", "--no-encrypt"]):
        r = testkit.new_runner().invoke(main, ["--ledger", str(home), *args],
                                        env={"TRAJLEDGER_STATE_DIR": str(tmp_path / "state")})
        assert r.exit_code == 0, r.output
    return home


def test_a_huge_public_key_file_is_not_read_whole(store: Path) -> None:
    pub = store / "keys" / "other.pub"
    with pub.open("wb") as f:
        f.truncate(2 << 30)  # sparse: 2 GB of nothing
    for args in (["key", "list"], ["key", "export", "vendor"]):
        r = _run(store, *args, memory=1536 << 20)
        assert r.returncode == 3, (args, r.stderr)
        assert r.stderr.startswith("FAIL: key other ") and len(r.stderr.splitlines()) == 1, (
            args, r.stderr)


def test_a_fifo_for_a_private_key_file_is_refused_not_waited_on(store: Path) -> None:
    key = store / "keys" / "other.key"
    key.unlink()
    os.mkfifo(key)
    for args in (["key", "list"], ["key", "export", "vendor"]):
        r = _run(store, *args)  # before: blocked until the timeout
        assert r.returncode == 3, (args, r.stderr)
        assert r.stderr == f"FAIL: key other: cannot read {key}: not a regular file but a FIFO\n"
