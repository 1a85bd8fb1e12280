"""Many writers: a ledger opened in a parent and used in forked children, spawned workers, and
separate CLI processes all record into one log, each exactly once, and the log verifies.

The bug this guards against (issue 11): a `Ledger` opened in a parent kept one flock descriptor;
forked children shared its open file description, so they did not exclude each other and the
log was corrupted. Now a `Log` used after ``fork()`` re-opens its lock (``os.register_at_fork``
and a pid check), including when another thread of the parent held its lock at the fork.

The eight command-line writers are processes forked from a preloaded server
(tests/preforked.py): each opens the ledger itself, as a fresh interpreter would, and skips the
second of imports that was most of its CPU (tests/e2e/test_concurrency.py's writers of the
same envelopes are fresh interpreters).

``TRAJLEDGER_WRITERS_BATCHES`` sets the batches per CLI process (10 in CI; 50 by hand).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any

import preforked
import pytest
from click.testing import CliRunner

from trajledger import Ledger
from trajledger.ledger.artifacts import register_environment
from trajledger.ledger.log import EntrySpec, verify_log_dir
from trajledger.ledger.record import record_statement
from trajledger.runner.cli import main
from trajledger.verify import predicates
from trajledger.verify.log_entry import LogEntry

_LEDGER: Ledger | None = None  # the parent's ledger, inherited by forked pool workers


def _record_in_child(i: int) -> tuple[str, int, int]:
    assert _LEDGER is not None
    signer = _LEDGER.keys.signer("producer")
    subject = "sha256:" + hashlib.sha256(b"pool-%d" % i).hexdigest()
    rec = record_statement(_LEDGER, f"item-{i}", subject, predicates.APPROVAL, {"i": i}, signer)
    return subject, rec.index, os.getpid()


def _entries(home: Path) -> list[LogEntry]:
    log = Ledger.open(home).log
    return [LogEntry.from_bytes(raw) for raw in log.entries(0, log.size)]


def _verifies(home: Path) -> None:
    ledger = Ledger.open(home)
    keys = {k.keyid: ledger.keys.public(k.name) for k in ledger.keys.list()}
    report = verify_log_dir(home / "log", store=ledger.store, keys=keys)
    assert report.ok, report.problems[:5]


@pytest.mark.slow
def test_forked_pool_workers_use_the_parents_ledger(home: Path) -> None:
    global _LEDGER
    ledger = Ledger.open(home)
    signer = ledger.keys.create("producer", encrypt=False)
    # The parent appends first: its Log now holds an open lock descriptor and a lookup cache.
    record_statement(ledger, "first", "sha256:" + "1" * 64, predicates.APPROVAL, {}, signer)
    _LEDGER = ledger
    try:
        with multiprocessing.get_context("fork").Pool(4) as pool:
            results = pool.map(_record_in_child, range(40), chunksize=1)
    finally:
        _LEDGER = None
    assert len({pid for _s, _i, pid in results}) > 1
    assert sorted(i for _s, i, _p in results) == list(range(1, 41))
    entries = _entries(home)
    assert len(entries) == 41
    for subject, index, _pid in results:
        assert entries[index].subject == subject
    # The parent goes on appending after its children.
    last = record_statement(ledger, "last", "sha256:" + "2" * 64, predicates.APPROVAL, {}, signer)
    assert last.index == 41
    _verifies(home)


def test_a_fork_while_another_thread_holds_the_lock(home: Path) -> None:
    log = Ledger.open(home).log
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with log.exclusive():
            held.set()
            release.wait(30)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(30)
    spec = EntrySpec("files", "sha256:" + "3" * 64, "sha256:" + "4" * 64, ("a" * 64,))
    pid = os.fork()
    if pid == 0:  # the child: its copy of the mutex is held by a thread that is not there
        code = 3
        try:
            code = 0 if log.append([spec]) == [0] else 2
        finally:
            os._exit(code)
    time.sleep(0.3)
    assert os.waitpid(pid, os.WNOHANG) == (0, 0), "the child must wait for the parent's lock"
    release.set()
    t.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert log.size == 1


def _recorder_ledger(home: Path) -> None:
    ledger = Ledger.open(home)
    signer = ledger.keys.create("producer", encrypt=False)
    register_environment(ledger, "cartpole", "1", signer, gymnasium_id="CartPole-v1")


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_recorder_under_async_vector_env(home: Path, context: str) -> None:
    import gymnasium as gym
    import numpy as np

    _recorder_ledger(home)
    ledger = Ledger.open(home)
    size = ledger.log.size
    path = str(home)
    n = 3 if context == "fork" else 2

    if context == "fork":
        # Fork: the parent's open ledger and loaded key are used by every sub-environment.
        signer = ledger.keys.signer("producer")
        ledger.log.find_envelope("sha256:" + "0" * 64)  # the parent's log is open and used

        def factory(i: int) -> Any:
            from trajledger.integrations.gymnasium import LedgerRecorder

            return lambda: LedgerRecorder(
                gym.make("CartPole-v1"), ledger, env_ref="cartpole@1", policy="random",
                signer=signer, every=2, episode_prefix=f"fork{i}",
            )  # fmt: skip
    else:
        # Spawn: each sub-environment opens the ledger by its path.
        def factory(i: int) -> Any:
            def make() -> Any:
                from trajledger import Ledger as L
                from trajledger.integrations.gymnasium import LedgerRecorder

                own = L.open(Path(path))
                return LedgerRecorder(
                    gym.make("CartPole-v1"), own, env_ref="cartpole@1", policy="random",
                    signer=own.keys.signer("producer"), every=2, episode_prefix=f"spawn{i}",
                )  # fmt: skip

            return make

    vec = gym.vector.AsyncVectorEnv([factory(i) for i in range(n)], context=context)
    try:
        vec.reset(seed=0)
        rng = np.random.default_rng(0)
        for _ in range(90):
            vec.step(rng.integers(0, 2, size=n))
        vec.call("flush")
        batches: list[list[str]] = list(vec.call("batches"))
    finally:
        vec.close()
    digests = [d for per_env in batches for d in per_env]
    assert all(per_env for per_env in batches) and len(batches) == n, batches
    entries = _entries(home)
    assert len(entries) == size + len(digests)
    recorded = [e.subject for e in entries if e.kind == "rollout-batch"]
    assert sorted(recorded) == sorted(digests) and len(set(recorded)) == len(recorded)
    _verifies(home)


CLI_WORKER = r"""
import json, sys
from pathlib import Path
from click.testing import CliRunner
from trajledger.runner.cli import main

home, worker, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
runner = CliRunner()
out = []
for i in range(count):
    src = home.parent / f"{worker}-{i}.jsonl"
    lines = [{"episode_id": f"{worker}-{i}-{e}", "reward": float(e),
              "messages": [{"role": "user", "content": f"{worker} {i} {e}?"},
                           {"role": "assistant", "content": "yes"}]} for e in range(3)]
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = runner.invoke(main, ["--ledger", str(home), "record", str(src), "--env", "chat@1",
                             "--policy", "p0", "--key", "producer"])
    if r.exit_code != 0:
        sys.stderr.write(r.output)
        sys.exit(1)
    out.append(r.stdout.strip().splitlines()[-1])
print(json.dumps(out))
"""


@pytest.mark.slow
def test_eight_cli_processes_record_batches(home: Path) -> None:
    per = int(os.environ.get("TRAJLEDGER_WRITERS_BATCHES", "10"))
    ledger = Ledger.open(home)
    signer = ledger.keys.create("producer", encrypt=False)
    register_environment(ledger, "chat", "1", signer)
    size = ledger.log.size
    procs = [preforked.Script(CLI_WORKER, [str(home), f"w{w}", str(per)]) for w in range(8)]
    digests: list[str] = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        digests.extend(json.loads(out))
    assert len(digests) == 8 * per == len(set(digests))
    entries = _entries(home)
    assert len(entries) == size + 8 * per
    assert sorted(e.subject for e in entries[size:]) == sorted(digests)
    r = CliRunner().invoke(main, ["--ledger", str(home), "log", "verify"])
    assert r.exit_code == 0, r.output
    print(f"8 CLI processes x {per} batches: {len(entries)} entries, log verify passed")
