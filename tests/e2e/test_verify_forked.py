"""``trajledger verify`` re-hashes in forked worker processes (``ledger.rehash``) and reports what
the library's thread pool reports: the quickstart's ``cartpole-bc@2``, sound and with a tampered
data blob, through the command line with one blob a group (so the workers are forked from the
first blob), against ``Ledger.verify`` in this process (threads)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import testkit
from test_verify_bulk import REF, tamper_blob

from trajledger import Ledger
from trajledger.ledger import rehash
from trajledger.runner.cli import main
from trajledger.verify import blobs as blobs_module


@pytest.fixture
def home(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path / "home")


def settled(report: dict[str, Any]) -> dict[str, Any]:
    """The report with each node's checks sorted: a re-hashing failure is filed on its node when
    its group is collected, during the walk or at its end, as the hashing's timing has it."""
    for node in report["nodes"]:
        node["checks"].sort(key=lambda c: json.dumps(c, sort_keys=True))
    return report


@pytest.mark.parametrize("tampered", [False, True])
def test_the_command_hashes_in_workers_and_reports_as_the_library(
    home: Path, tampered: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if tampered:
        tamper_blob(home)
    library = json.loads(json.dumps(Ledger.open(home).verify(REF).to_json()))
    monkeypatch.setattr(blobs_module, "GROUP_BLOBS", 1)
    forks: list[int] = []
    real = os.fork

    def spy() -> int:
        pid = real()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", spy)
    # The suite's process may hold idle threads other tests left: fork anyway (when to fork is
    # tests/unit/ledger/test_rehash.py's).
    monkeypatch.setattr(rehash, "can_fork", lambda: True)
    r = testkit.new_runner().invoke(main, ["--ledger", str(home), "verify", REF, "--json"])
    assert len(forks) >= 2, "the command forked its hashing workers"
    assert r.exit_code == (1 if tampered else 0), r.output
    assert settled(json.loads(r.stdout)) == settled(library)
    if tampered:
        assert "tampered: content hashes to" in r.stdout


@pytest.mark.parametrize("tampered", [False, True])
def test_a_worker_killed_mid_walk_changes_nothing_the_command_reports(
    home: Path, tampered: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every re-hashing worker killed (SIGKILL, as the OOM killer does) at its first blob: the
    command hashes their groups itself and reports what the library reports, with its exit
    code (not an internal error)."""
    if tampered:
        tamper_blob(home)
    library = json.loads(json.dumps(Ledger.open(home).verify(REF).to_json()))
    monkeypatch.setattr(blobs_module, "GROUP_BLOBS", 1)
    monkeypatch.setattr(rehash, "can_fork", lambda: True)
    parent, real = os.getpid(), rehash.ForkedHasher.check
    killed = []

    def check(self: rehash.ForkedHasher, digest: str, size: int, stop: Any) -> str | None:
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        killed.append(digest)  # (hashed here, in the command's process)
        return real(self, digest, size, stop)

    monkeypatch.setattr(rehash.ForkedHasher, "check", check)
    r = testkit.new_runner().invoke(main, ["--ledger", str(home), "verify", REF, "--json"])
    assert killed, "the workers' groups were hashed by the command"
    assert r.exit_code == (1 if tampered else 0), r.output
    assert settled(json.loads(r.stdout)) == settled(library)


def test_the_workers_are_waited_on_whatever_the_descriptor_numbers(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process holding more than 1,024 descriptors (a long-lived caller; a worker of this
    suite reached 1,056) gets pipes numbered past ``select``'s limit: ``verify`` ended with
    ``BUG: ValueError: filedescriptor out of range in select()`` (exit 4). Found by the rev17
    review's full suite run."""
    monkeypatch.setattr(blobs_module, "GROUP_BLOBS", 1)
    monkeypatch.setattr(rehash, "can_fork", lambda: True)
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        r = testkit.new_runner().invoke(main, ["--ledger", str(home), "verify", REF, "--json"])
    finally:
        for fd in held:
            os.close(fd)
    assert r.exit_code == 0, r.output
