"""``trajledger record`` shows progress on a terminal (issue 23 item 4): for JSON lines, a bar
over the bytes of the files (plain or compressed: their sizes are known) with its percentage,
drawn from the start; none under ``-q`` or when stderr is not a terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard
from testkit import run_on_terminal

from trajledger.ledger.artifacts import register_environment
from trajledger.ledger.home import Ledger


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    Ledger.init(home, origin="test/progress")
    ledger = Ledger.open(home)
    signer = ledger.keys.create("producer", encrypt=False)
    register_environment(ledger, "tutor", "1", signer)
    lines = [
        json.dumps({"messages": [{"role": "user", "content": f"q{n} " * 50},
                                 {"role": "assistant", "content": f"a{n}"}], "reward": 1.0})
        for n in range(3000)
    ]  # fmt: skip
    chat = tmp_path / "chat.jsonl.zst"
    chat.write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines) + "\n").encode()))
    return home, chat


def record(home: Path, chat: Path, *extra: str, tty: bool) -> tuple[int, str]:
    """Run ``trajledger record`` with stderr on a pseudo-terminal (or a pipe); its stderr."""
    cmd = [sys.executable, "-m", "trajledger", *extra, "--ledger", str(home), "record",
           str(chat), "--env", "tutor@1", "--policy", "p", "--key", "producer"]  # fmt: skip
    env = dict(os.environ, COLUMNS="100")
    if not tty:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        return r.returncode, r.stderr
    return run_on_terminal(cmd, env)


def test_a_bar_with_its_percentage_on_a_terminal(world: tuple[Path, Path]) -> None:
    home, chat = world
    code, err = record(home, chat, tty=True)
    assert code == 0, err
    assert "recording" in err and "100%" in err
    assert "OK: batch of 3000 episode(s), 6000 step(s)" in err


def test_no_bar_under_quiet_or_off_a_terminal(world: tuple[Path, Path]) -> None:
    home, chat = world
    code, err = record(home, chat, "-q", tty=True)
    assert code == 0, err
    assert "%" not in err
    code, err = record(home, chat, tty=False)
    assert code == 0, err
    assert "%" not in err and "recording" not in err
