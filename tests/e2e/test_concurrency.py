"""Several processes append to one ledger at once: they serialise on the log's flock, nothing is
lost or doubled, and the log verifies (envelopes and all).

The four writers of 250 appends are forked from tests/preforked.py's preloaded server (each a
process of its own that opens the ledger itself, as a fresh interpreter would: what is tested is
their appends, not their start-up, which was a third of their CPU); the three writers of the
same envelopes are fresh interpreters (``python -c``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import preforked
import pytest

from trajledger import Ledger
from trajledger.ledger.log import verify_log_dir
from trajledger.verify.log_entry import LogEntry

WORKER = r"""
import hashlib, json, os, sys, time
from pathlib import Path
from trajledger import Ledger
from trajledger.ledger.record import record_statement
from trajledger.verify import predicates

home, worker, count, shared = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
ledger = Ledger.open(home)
signer = ledger.keys.signer("producer")
while not (home / "go").exists():
    time.sleep(0.001)
out = []
for i in range(count):
    tag = f"shared-{i}" if shared else f"{worker}-{i}"
    subject = "sha256:" + hashlib.sha256(tag.encode()).hexdigest()
    rec = record_statement(ledger, tag, subject, predicates.APPROVAL, {"tag": tag}, signer)
    out.append([tag, rec.envelope_digest, rec.index])
print(json.dumps(out))
"""


def start(home: Path, worker: str, count: int, shared: bool) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONHASHSEED="0")
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(home), worker, str(count), "1" if shared else "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def start_forked(home: Path, worker: str, count: int, shared: bool) -> preforked.Script:
    return preforked.Script(WORKER, [str(home), worker, str(count), "1" if shared else "0"])


def run_workers(
    home: Path, workers: int, count: int, shared: bool, *, forked: bool = False
) -> list[list[object]]:
    starter = start_forked if forked else start
    procs = [starter(home, f"w{w}", count, shared) for w in range(workers)]
    time.sleep(0.5)  # let every worker import and open the ledger, then release them together
    (home / "go").touch()
    results: list[list[object]] = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.extend(json.loads(out))
    return results


@pytest.fixture
def ledger(home: Path) -> Ledger:
    ledger = Ledger.open(home)
    ledger.keys.create("producer", encrypt=False)
    return ledger


@pytest.mark.slow
def test_four_processes_append_250_each(home: Path, ledger: Ledger) -> None:
    results = run_workers(home, 4, 250, shared=False, forked=True)
    log = Ledger.open(home).log
    assert log.size == 1000
    indices = sorted(int(r[2]) for r in results)  # type: ignore[call-overload]
    assert indices == list(range(1000))
    for tag, envelope, index in results:
        assert LogEntry.from_bytes(log.entry(int(index))).envelope == envelope, tag  # type: ignore[call-overload]
    keys = {ledger.keys.public("producer").keyid: ledger.keys.public("producer")}
    report = verify_log_dir(home / "log", store=ledger.store, keys=keys)
    assert report.ok, report.problems[:5]
    assert (report.entries_checked, report.envelopes_checked) == (1000, 1000)


@pytest.mark.slow
def test_processes_appending_the_same_envelopes_add_each_once(home: Path, ledger: Ledger) -> None:
    results = run_workers(home, 3, 60, shared=True)
    log = Ledger.open(home).log
    assert log.size == 60
    by_tag: dict[object, set[object]] = {}
    for tag, _envelope, index in results:
        by_tag.setdefault(tag, set()).add(index)
    assert all(len(v) == 1 for v in by_tag.values())  # every process got the same index
    assert sorted(next(iter(v)) for v in by_tag.values()) == list(range(60))  # type: ignore[type-var]
    assert verify_log_dir(home / "log", store=ledger.store).ok
