"""Exit codes that are rules of the whole command line (DESIGN §8), one test per rule.

- Ctrl-C exits 130 (128 + SIGINT) at once, saying nothing was half-written, and leaves nothing
  behind: the output file is not written and the ledger still verifies.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("trajledger")


def cli(*args: str | Path) -> list[str]:
    if SCRIPT.is_file():
        return [str(SCRIPT), *map(str, args)]
    return [sys.executable, "-c", "import sys; from trajledger.runner.cli import main; "
            "sys.argv[0] = 'trajledger'; main()", *map(str, args)]


def test_ctrl_c_exits_130_at_once_with_nothing_half_written(tmp_path: Path) -> None:
    home = tmp_path / "ledger"
    env = dict(os.environ)
    for args in (["init"], ["key", "new", "k", "--no-encrypt"]):
        subprocess.run(cli("--ledger", home, *args), check=True, env=env, capture_output=True)
    data = tmp_path / "data"
    data.mkdir()
    with open(data / "huge.bin", "wb") as f:
        f.truncate(1 << 40)  # 1 TiB, sparse: hashing it takes far longer than the wait below
    out = tmp_path / "envelope.json"
    proc = subprocess.Popen(
        cli("--ledger", home, "sign", data, "--key", "k", "--out", out),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    time.sleep(1.5)
    if proc.poll() is not None:
        pytest.fail(f"sign finished before it could be interrupted: {proc.communicate()}")
    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=30)  # within one chunk per worker, not hours
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("Ctrl-C did not stop the command")
    assert proc.returncode == 130, err
    assert err.endswith("FAIL: interrupted; nothing was half-written\n"), err
    assert "Traceback" not in err
    assert not out.exists()
    assert not list(tmp_path.glob("*.tmp*")) and not list(data.glob(".*"))
    r = subprocess.run(cli("--ledger", home, "log", "verify"), capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stderr
