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

from trajledger import Ledger
from trajledger.ledger.artifacts import register_environment


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


def test_one_json_line_per_step_moves_the_bar_too(tmp_path: Path) -> None:
    """The README's own format (one JSON line per step) gave its chunks no count of the bytes
    read: the bar stood at 0% for the whole of a long ``record`` and closed there. Now each
    chunk carries it, rising to the file's size, and the bar reaches 100%."""
    from trajledger.ledger.rollouts import iter_rollout_chunks

    steps = tmp_path / "steps.jsonl"
    steps.write_text("".join(json.dumps(
        {"episode_id": f"ep-{n // 10}", "step": n % 10, "obs": [0.5, n], "action": 1,
         "reward": 1.0, "terminated": n % 10 == 9, "truncated": False}) + "\n"
        for n in range(3000)))
    reads = [c.read for c in iter_rollout_chunks(steps, None, 500)]
    assert len(reads) == 6 and None not in reads
    assert reads == sorted(reads) and 0 < reads[0] < reads[-1] == steps.stat().st_size
    home = tmp_path / "home"
    Ledger.init(home, origin="test/progress-steps")
    ledger = Ledger.open(home)
    register_environment(ledger, "tutor", "1", ledger.keys.create("producer", encrypt=False))
    code, err = record(home, steps, tty=True)
    assert code == 0, err
    assert "100%" in err and "OK: batch of 300 episode(s), 3000 step(s)" in err
