"""Two ``trajledger policy set`` with the same serial, racing in two real processes: one succeeds,
the other exits 1 saying why, and the log holds exactly one successor.

Each process runs the CLI; a barrier placed in front of `Log.append` makes both pass the early
serial check before either appends, so without the check under the log's lock both would be
recorded (the bug of issue 9).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trajledger import Ledger
from trajledger.ledger.status import record_policy
from trajledger.verify.log_entry import LogEntry

POLICY = """\
name = "{name}"
serial = {serial}
max_approval_age = "90d"

[roles.producer]
keys = ["keys/vendor.pub"]
threshold = 1

[roles.approver]
keys = ["keys/approver-a.pub", "keys/approver-b.pub"]
threshold = 2

[roles.trainer]
keys = ["keys/trainer.pub"]
threshold = 1

[roles.log]
vkeys = ["{vkey}"]
threshold = 1
"""

WORKER = r"""
import os, sys, time
from pathlib import Path
from trajledger.ledger.log import Log
from trajledger.runner.cli import main

home, policy, me = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
original = Log.append

def append(self, specs, **kw):
    # Barrier: both processes have passed the early serial check before either appends.
    (home / f"ready-{me}").touch()
    deadline = time.monotonic() + 60
    while len(list(home.glob("ready-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    return original(self, specs, **kw)

Log.append = append
main(["--ledger", str(home), "policy", "set", policy, "--key", "approver-a", "--key",
      "approver-b", "--yes"], prog_name="trajledger")
"""


@pytest.mark.slow
def test_racing_policy_set_records_one(home: Path) -> None:
    ledger = Ledger.open(home)
    for name in ("vendor", "approver-a", "approver-b", "trainer"):
        ledger.keys.create(name, encrypt=False)
    first = home / "policy-1.toml"
    first.write_text(POLICY.format(name="base", serial=1, vkey=ledger.log.vkey))
    record_policy(
        ledger, first, [ledger.keys.signer("approver-a"), ledger.keys.signer("approver-b")]
    )
    files = []
    for who in ("a", "b"):
        p = home / f"policy-2{who}.toml"
        p.write_text(POLICY.format(name=f"successor-{who}", serial=2, vkey=ledger.log.vkey))
        files.append(p)
    env = dict(os.environ, PYTHONHASHSEED="0")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(home), str(p), p.stem[-1]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for p in files
    ]
    results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    loser = next(err for code, err in results if code == 1)
    assert "serial 2 does not follow serial 2" in loser, loser
    assert "Traceback" not in loser
    log = Ledger.open(home).log
    kinds = [LogEntry.from_bytes(raw).kind for raw in log.entries(0, log.size)]
    assert kinds.count("trust-policy") == 2  # the first policy and one successor
