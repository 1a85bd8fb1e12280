"""trajledger._signals: worker processes end with their parent, whichever way it ended, and take
the default action for the signals their parent turned into `Terminated` (one the parent was
started with ignored stays ignored)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trajledger._signals import Terminated

PARENT = """
import concurrent.futures as cf, json, multiprocessing, os, signal, sys, time
from trajledger._signals import exit_with_parent, stop_on_termination

def dispositions():
    return os.getpid(), [int(signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGHUP)]

if __name__ == "__main__":  # (a spawned worker imports this file again)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    stop_on_termination()
    pool = cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(sys.argv[1]),
                                  initializer=exit_with_parent)
    answers = [pool.submit(dispositions).result() for _ in range(4)]
    print(json.dumps(answers), flush=True)
    time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs Linux /proc")
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_end_when_their_parent_is_killed(tmp_path: Path, method: str) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, script, method], stdout=subprocess.PIPE,
                              text=True)
    assert parent.stdout is not None
    answers = json.loads(parent.stdout.readline())
    workers = {pid for pid, _ in answers}
    # SIGTERM the default again (a forked worker inherited the parent's handler); SIGHUP,
    # ignored when the parent started, still ignored.
    assert all(d == [int(signal.SIG_DFL), int(signal.SIG_IGN)] for _, d in answers), answers
    parent.kill()
    parent.wait(timeout=30)
    deadline = time.monotonic() + 30
    while alive := [pid for pid in workers if _running(pid)]:
        assert time.monotonic() < deadline, f"workers {alive} outlived their parent"
        time.sleep(0.05)


def test_terminated_says_which_signal_and_its_status() -> None:
    stop = Terminated(signal.SIGTERM)
    assert isinstance(stop, KeyboardInterrupt)
    assert (stop.name, stop.status) == ("SIGTERM", 143)
    assert (Terminated(signal.SIGHUP).name, Terminated(signal.SIGHUP).status) == ("SIGHUP", 129)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
