"""A long first use whose worker processes fail or are interrupted (`trust_rows.Workers`): the
rows are still the ones read in this process and the reading completes; Ctrl-C prints one line,
keeps nothing, and the next command reads the log again.

Found by review (issue 21): a worker killed while it derived rows (the out-of-memory killer, a
signal) made the whole first use fail with ``BrokenProcessPool`` (exit 4, "please report"),
and every later command read the log again and could fail the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trajledger import Ledger
from trajledger.ledger import home as home_module
from trajledger.ledger import trust_rows, trust_state
from trajledger.ledger.user_state import STATE_DIR_ENV


def _rows(home: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch
          ) -> dict[str, set[tuple[Any, ...]]]:
    monkeypatch.setenv(STATE_DIR_ENV, str(state_dir))
    state = Ledger.open(home).trust_state()
    try:
        assert state.size == Ledger.open(home).log.size
        return {t: state._rows(t) for t in trust_state._TABLES}
    finally:
        state.close()


def test_a_worker_killed_mid_reading_leaves_the_rows_to_this_process(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alone = _rows(chat_home, tmp_path / "alone", monkeypatch)
    # Envelopes read by worker processes, runs of 2 entries; the first read in a worker
    # kills it (os._exit, as the out-of-memory killer would): the pool is then broken.
    monkeypatch.setattr(trust_state, "_PARALLEL_FROM", 1)
    monkeypatch.setattr(trust_state, "_CHUNK", 2)
    monkeypatch.setattr(trust_rows.Workers, "possible", staticmethod(lambda: True))
    flag = tmp_path / "killed"
    real = home_module.local_blob_reader

    def dying_reader(root: Path) -> Callable[[str], bytes | None]:
        read = real(root)

        def first_read_kills(digest: str) -> bytes | None:
            try:
                os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return read(digest)
            os._exit(9)

        return first_read_kills

    monkeypatch.setattr(home_module, "local_blob_reader", dying_reader)
    handed: list[int] = []
    derive = trust_rows.Workers.derive

    def counted(self: Any, entries: Any) -> Any:
        handed.append(len(entries))
        return derive(self, entries)

    monkeypatch.setattr(trust_rows.Workers, "derive", counted)
    assert _rows(chat_home, tmp_path / "killed-worker", monkeypatch) == alone
    assert flag.exists() and len(handed) > 2  # a worker did die, and the reading went on


INTERRUPTED = """
import sys, time
from pathlib import Path
from trajledger.ledger import trust_rows, trust_state
trust_state._PARALLEL_FROM = 1
trust_state._CHUNK = 2
trust_rows.Workers.possible = staticmethod(lambda: True)
flag = Path(sys.argv[2])

def stuck(path, done, total):  # the parent, after its first run: the workers are idle
    flag.touch()
    time.sleep(600)

trust_state._write_reading = stuck
from trajledger.runner.cli import main
sys.argv = ["trajledger", "--ledger", sys.argv[1], "log", "info"]
main()
"""


def test_ctrl_c_during_a_long_first_use_says_one_line_and_the_next_command_reads_again(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by review: Ctrl-C (SIGINT to the terminal's process group) during a first use read
    by worker processes printed a traceback of each idle worker above the one FAIL line."""
    import signal
    import subprocess
    import sys
    import time

    state_dir, flag = tmp_path / "state", tmp_path / "reading"
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED, str(chat_home), str(flag)], start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TRAJLEDGER_STATE_DIR": str(state_dir)})
    deadline = time.monotonic() + 120
    while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the workers are done with the runs handed to them, and wait for more
    os.killpg(proc.pid, signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (130, "FAIL: interrupted; nothing was half-written\n")
    # Nothing was kept of the reading: the next use reads the whole log, as a first use.
    monkeypatch.setenv(STATE_DIR_ENV, str(state_dir))
    ledger = Ledger.open(chat_home)
    state = ledger.trust_state()
    assert state.size == ledger.log.size
    assert state.disagreements(ledger.log.entries, ledger.read_blob) == []
