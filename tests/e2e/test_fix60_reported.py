"""fix60: the fortieth round's Left, the small ones (rev52, out58, spd53); docs/SECURITY.md,
"Review of 2026-12-07, forty-first round (fix60)"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_updates import Buyer, vendor_copy

FAILING_LOOKALIKES = """
import errno, runpy, sys
from trajledger.ledger import exchange_cli

def failing(_ledger, _rows):
    raise OSError(errno.EIO, "Input/output error")

exchange_cli.lookalike_warnings = failing  # (the trust state's disk, after the record)
sys.argv = ["trajledger", *sys.argv[1:]]
runpy.run_module("trajledger", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("as_json", [False, True])
def test_an_import_to_a_reader_gone_whose_lookalike_check_fails_is_still_exit_3(
    tmp_path: Path, as_json: bool
) -> None:
    """rev52's Left: ``import``'s report met the closed pipe, `Group.invoke` ended it 0, and
    the failed look-alike check after the record (exit 3, `fault27`) was never said."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    before = buyer.size()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["TRAJLEDGER_STATE_DIR"] = str(buyer.state)
    read, write = os.pipe()
    os.close(read)  # the reader gone before the command starts
    with os.fdopen(write, "w") as pipe:
        r = subprocess.run(
            [sys.executable, "-c", FAILING_LOOKALIKES, "--ledger", str(buyer.home), "import",
             str(vendor.bundle), "--key", "approver", *(["--json"] if as_json else [])],
            stdout=pipe, stderr=subprocess.PIPE, text=True, timeout=300, env=env, check=False)
    assert r.returncode == 3, r.stderr
    assert buyer.size() > before  # recorded, as the line says
    assert "could not then be checked for look-alikes: " in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
