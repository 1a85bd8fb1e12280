"""SIGKILL sweep: a process appends in a loop and is killed at random points, at least 50 times.

After every kill: a new process's open recovers the log, every append the killed process had
acknowledged (printed after `Log.append` returned) is in the log at the index it was given,
nothing is there twice, and ``trajledger log verify`` passes. Each restart re-sends the items
that were in flight when it was killed, so idempotence after a crash is exercised too.
"""

from __future__ import annotations

import hashlib
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from trajledger import Ledger
from trajledger.runner.cli import main
from trajledger.verify.log_entry import LogEntry

KILLS = 55
START_GUARD = 120
"""Seconds a child may take to print READY before the test fails as hung (it takes well under
one: a guard against hangs, not a measure of speed)."""

CHILD = r"""
import hashlib, random, sys, time
from pathlib import Path
from trajledger import Ledger
from trajledger.ledger.encode import envelope_bytes
from trajledger.ledger.log import EntrySpec
from trajledger.ledger.signing import sign_statement
from trajledger.ledger.store import ObjectStore
from trajledger.verify import predicates

home, item, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
ledger = Ledger.open(home)
signer = ledger.keys.signer("producer")
log = ledger.log
# Envelopes are made before the loop (the blobs need not be durable: a kill keeps the page
# cache), so the kills land in Log.append, not in signing.
store = ObjectStore(ledger.store.root, durable=False)
specs = []
for i in range(item, item + 200):
    subject = "sha256:" + hashlib.sha256(b"item-%d" % i).hexdigest()
    env = sign_statement([("item", subject)], predicates.APPROVAL, {"item": i}, [signer])
    data = envelope_bytes(env)
    specs.append(EntrySpec("approval", subject, store.put_bytes(data), (signer.keyid,)))
log.find_envelope(specs[0].envelope)  # load the lookup index before the kills start
print("READY", flush=True)
pos = 0
while pos < len(specs):
    n = rng.choice([1, 1, 2, 3, 5, 8, 17, 40])
    batch = specs[pos : pos + n]
    indices = log.append(batch)
    sys.stdout.write("".join(f"ACK {item + pos + k} {x}\n" for k, x in enumerate(indices)))
    sys.stdout.flush()
    pos += len(batch)
time.sleep(60)  # out of prepared items: wait for the kill
"""


def subject_of(item: int) -> str:
    return "sha256:" + hashlib.sha256(b"item-%d" % item).hexdigest()


@pytest.mark.slow
def test_sigkill_at_random_points_loses_no_acknowledged_append(home: Path) -> None:
    ledger = Ledger.open(home)
    ledger.keys.create("producer", encrypt=False)
    rng = random.Random(20240601)
    acked: dict[int, int] = {}  # item -> index
    next_item = 0
    runner = CliRunner()
    interrupted = 0  # kills that landed between an append's first write and its publication
    for kill in range(KILLS):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(home), str(next_item), str(kill)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert child.stdout is not None
        # A hang guard, not a timing assertion: a child that neither starts nor dies fails here.
        if not select.select([child.stdout], [], [], START_GUARD)[0]:
            child.kill()
            pytest.fail(f"kill {kill}: the child printed nothing in {START_GUARD} s")
        assert child.stdout.readline() == b"READY\n", child.stderr.read() if child.stderr else ""
        time.sleep(rng.uniform(0.0, 0.05))
        os.kill(child.pid, signal.SIGKILL)
        out, _err = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL
        for line in out.split(b"\n")[:-1]:  # a line cut by the kill has no newline: not acked
            _, got_item, got_index = line.split()
            assert acked.setdefault(int(got_item), int(got_index)) == int(got_index)
        # Resend what was in flight: the first item not acknowledged.
        while next_item in acked:
            next_item += 1

        if (home / "log/.state/lock").read_bytes()[:1] == b"1":  # an append was in flight
            interrupted += 1
        # A new process opens (and recovers) the log.
        log = Ledger.open(home).log
        size = log.size
        for item, index in acked.items():
            assert index < size, f"acknowledged item {item} at {index} lost (size {size})"
        entries = [LogEntry.from_bytes(raw) for raw in log.entries(0, size)]
        for item, index in acked.items():
            assert entries[index].subject == subject_of(item), (item, index)
        subjects = [e.subject for e in entries]
        assert len(set(subjects)) == len(subjects), "an item was appended twice"
        result = runner.invoke(main, ["--ledger", str(home), "log", "verify"])
        assert result.exit_code == 0, result.output
    assert len(acked) > KILLS, "the children should have acknowledged appends"
    assert interrupted > 0, "no kill landed inside a commit"
    print(f"{KILLS} kills, {interrupted} inside a commit, {len(acked)} appends acknowledged")
