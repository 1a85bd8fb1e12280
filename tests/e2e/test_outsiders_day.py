"""The outsiders of the twenty-sixth round (out41): the buyer's security auditor, with only public
keys and ``python -m trajledger.verify`` (and a copy of ``verify/``), and the vendor's release
engineer (passphrases and prompts, a read-only or full disk, races, a stop at every step); and
out40's Left: ``python -m trajledger.verify`` and a name that is not UTF-8, a `Report` in a
notebook.

Its findings, and the probes that held: docs/SECURITY.md, "Review of 2026-12-06, twenty-sixth
round (out41)".
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJLEDGER_PASSPHRASE")}
    state = tmp_path / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    return env | {"HOME": str(tmp_path), "TRAJLEDGER_STATE_DIR": str(state)}


def _stop_at_prompt(cmd: list[str], env: dict[str, str], sig: int) -> tuple[int, str]:
    """Run ``cmd`` on a pseudo-terminal (stdin, stdout and stderr: it prompts), send ``sig``
    once its prompt is shown; its exit code and what it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)
    os.close(slave)
    out, sent, deadline = b"", False, time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 0.2)[0]:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not data:
                break
            out += data
            if not sent and out.rstrip().endswith(b":"):
                proc.send_signal(sig)
                sent = True
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert sent, out
    return proc.returncode, out.decode("utf-8", "replace")


@pytest.mark.parametrize(("sig", "code", "said"), [
    (signal.SIGTERM, 143, "stopped by SIGTERM"), (signal.SIGHUP, 129, "stopped by SIGHUP"),
    (signal.SIGINT, 130, "interrupted")])
def test_a_stop_at_a_passphrase_prompt_says_which_signal(
        tmp_path: Path, sig: int, code: int, said: str) -> None:
    """A release engineer's terminal closed (SIGHUP), or a CI job cancelled (SIGTERM), while
    ``key new`` asked for its passphrase: the command said ``FAIL: interrupted`` and exited 130,
    as for Ctrl-C, where every other step exits 143 (129) and names the signal (click's prompt
    turns any KeyboardInterrupt into its Abort); no key is written."""
    env = _env(tmp_path)
    ledger = tmp_path / "led"
    subprocess.run([sys.executable, "-m", "trajledger", "--ledger", str(ledger), "init"],
                   env=env, check=True, capture_output=True)
    got, out = _stop_at_prompt(
        [sys.executable, "-m", "trajledger", "--ledger", str(ledger), "key", "new", "rel"], env,
        sig)
    assert "Passphrase for key rel" in out, out
    assert got == code and f"FAIL: {said}; nothing was recorded or half-written" in out, out
    assert "Traceback" not in out, out
    assert not list((ledger / "keys").glob("rel.*"))
