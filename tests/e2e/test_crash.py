"""SIGKILL sweep: a process appends in a loop and is killed at random points, at least 50 times.
Each is a process of its own, forked by a server that imported trajledger once (`SERVER`: a
fresh interpreter's imports cost ten times the child's own work), and killed for real.

After every kill: a new process's open recovers the log, every append the killed process had
acknowledged (printed after `Log.append` returned) is in the log at the index it was given,
nothing is there twice, and ``trajledger log verify`` passes. Each restart re-sends the items
that were in flight when it was killed, so idempotence after a crash is exercised too.

The children wait for the disk at each ``fsync`` (this module names the call, so its tests and
the processes they start keep the real flushes: tests/conftest.py, `_real_flushes`): where a
kill lands, inside a commit or between two, follows how long a commit takes; with flushes that
do not wait, a child acknowledges more appends before its kill, and each kill's checks read a
longer log (33.6 against 24.5 s of wall, ci52).

After each kill ``log verify --no-store`` checks the log; the store (the envelopes, written
before the child's READY, so before any kill can land) is checked with it once, at the end.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
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

SERVER = r"""
import hashlib, json, os, random, sys, time, traceback
from pathlib import Path
from trajledger import Ledger
from trajledger.ledger.encode import envelope_bytes
from trajledger.ledger.log import EntrySpec
from trajledger.ledger.signing import sign_statement
from trajledger.ledger.store import ObjectStore
from trajledger.verify import predicates

def child(home, item, seed):
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

for line in sys.stdin:  # [home, item, seed, fifo]: fork a child writing to the fifo
    home, item, seed, fifo = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            fd = os.open(fifo, os.O_WRONLY)
            os.dup2(fd, 1)
            os.close(fd)
            child(Path(home), item, seed)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(1)
    print(pid, flush=True)
    print(os.waitpid(pid, 0)[1], flush=True)
"""
"""The appending processes' fork server: it imports what a child uses once, then for each
request forks a child (a process of its own, killed for real) that opens the ledger, prepares
200 envelopes, prints READY, appends them in random batches printing ``ACK item index`` for
each acknowledged append, then waits for its kill; it reports the child's pid, then its wait
status."""


def subject_of(item: int) -> str:
    return "sha256:" + hashlib.sha256(b"item-%d" % item).hexdigest()


@contextlib.contextmanager
def fork_server(log: Path) -> Iterator[subprocess.Popen[str]]:
    """`SERVER` running (its and its children's stderr in ``log``); stopped at the end."""
    with log.open("w") as err:
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=err, text=True,
        )  # fmt: skip
    try:
        yield server
    finally:
        assert server.stdin is not None
        server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def start_child(
    server: subprocess.Popen[str], home: Path, item: int, seed: int, fifo: Path
) -> tuple[int, int]:
    """Have the server fork a child appending from ``item``; its pid, and the read end of the
    fifo its output comes through (opened first, so that the child's opening does not wait)."""
    assert server.stdin is not None and server.stdout is not None
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    server.stdin.write(json.dumps([str(home), item, seed, str(fifo)]) + "\n")
    server.stdin.flush()
    return int(server.stdout.readline()), fd


@pytest.mark.slow
def test_sigkill_at_random_points_loses_no_acknowledged_append(home: Path, tmp_path: Path) -> None:
    ledger = Ledger.open(home)
    ledger.keys.create("producer", encrypt=False)
    rng = random.Random(20240601)
    acked: dict[int, int] = {}  # item -> index
    next_item = 0
    runner = CliRunner()
    interrupted = 0  # kills that landed between an append's first write and its publication
    errors = tmp_path / "children.err"
    with fork_server(errors) as server:
        assert server.stdout is not None
        for kill in range(KILLS):
            pid, fd = start_child(server, home, next_item, kill, tmp_path / "out")
            with os.fdopen(fd, "rb") as child:
                # A hang guard, not a timing assertion: a child that neither starts nor dies
                # fails here; one that dies first (the server reports its status) too.
                # (selectors, not select.select: a long session's descriptors pass 1,023)
                with selectors.DefaultSelector() as sel:
                    sel.register(child, selectors.EVENT_READ)
                    sel.register(server.stdout, selectors.EVENT_READ)
                    ready = [key.fileobj for key, _ in sel.select(START_GUARD)]
                if not ready:
                    os.kill(pid, signal.SIGKILL)
                    pytest.fail(f"kill {kill}: the child printed nothing in {START_GUARD} s")
                if child not in ready:
                    pytest.fail(f"kill {kill}: the child ended first:\n{errors.read_text()}")
                os.set_blocking(fd, True)
                assert child.readline() == b"READY\n", errors.read_text()
                time.sleep(rng.uniform(0.0, 0.05))
                os.kill(pid, signal.SIGKILL)
                out = child.read()
            status = int(server.stdout.readline())
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
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
            # The log alone after each kill (what a kill in Log.append can leave): the envelopes
            # were stored before READY, out of the kills' reach, so they are checked once, at
            # the end (each kill's check of all of them was most of this test's time, ci55).
            result = runner.invoke(main, ["--ledger", str(home), "log", "verify", "--no-store"])
            assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["--ledger", str(home), "log", "verify"])
    assert result.exit_code == 0, result.output
    assert len(acked) > KILLS, "the children should have acknowledged appends"
    assert interrupted > 0, "no kill landed inside a commit"
    print(f"{KILLS} kills, {interrupted} inside a commit, {len(acked)} appends acknowledged")
