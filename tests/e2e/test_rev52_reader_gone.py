"""rev52: every command that prints a report and then a verdict ends with that verdict when the
report's reader went away (``| true``, ``| head -c1``, ``| head -n0``, a closed stdout, SIGPIPE
ignored by the shell); docs/SECURITY.md, "Review of 2026-12-07, fortieth round (rev52)"."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import testkit
from test_monitor import Vendor

from trajledger.ledger.serve import LogServer


@dataclass(frozen=True)
class Lab:
    home: Path
    state: Path
    files: Path
    buyer: Path  # a ledger of another origin that imports the lab's bundle (rev53)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory,
        quickstart_template: testkit.Template[str]) -> Lab:
    """The quickstart with cartpole-train@2 revoked (cartpole-bc@2 fails, cartpole-bc@1
    verifies), a file changed since it was signed into an envelope, a directory grown since its
    Sigstore bundle was exported, and a Parquet file that is not one."""
    root = tmp_path_factory.mktemp("rev52-reader-gone")
    lab = Lab(root / "lab", Path(os.environ["TRAJLEDGER_STATE_DIR"]), root / "files",
              root / "buyer")
    testkit.copy_template(quickstart_template, lab.home)
    lab.files.mkdir()
    (lab.files / "a.txt").write_text("hello\n")
    (d := lab.files / "d").mkdir()
    (d / "x").write_text("1\n")
    (d / "y").write_text("2\n")
    (lab.files / "steps.parquet").write_bytes(b"not parquet")
    for args in (["revoke", "cartpole-train@2", "--key", "approver-a", "--reason", "withdrawn"],
                 ["sign", lab.files / "a.txt", "--key", "vendor", "--out",
                  lab.files / "a.dsse"],
                 ["attest", d, "--key", "vendor", "--name", "adir"],
                 ["export", "adir", "--format", "sigstore", "--out", lab.files / "d.json"],
                 ["export", "cartpole-bc@2", "--out", lab.files / "bc2.tar.zst"]):
        r = testkit.invoke(lab.home, *args)
        assert r.exit_code == 0, (args, r.output)
    r = testkit.invoke(lab.buyer, "init", "--origin", "buyer.example/log")
    assert r.exit_code == 0, r.output
    (lab.buyer / "keys").mkdir(exist_ok=True)
    for key in lab.home.glob("keys/approver-*"):
        shutil.copy(key, lab.buyer / "keys" / key.name)
    (lab.files / "a.txt").write_text("bye\n")
    (d / "z").write_text("3\n")
    return lab


def _run(mode: str, args: list[str], state: Path) -> subprocess.CompletedProcess[str]:
    """``python -m trajledger ARGS`` whose stdout's reader is gone (``gone``: a pipe whose read
    end is closed before it starts), closed (``closed``: ``>&-``), or ``head -c1`` in a shell
    that ignores SIGPIPE (``head``); its own exit status."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["TRAJLEDGER_STATE_DIR"] = str(state)
    cmd = [sys.executable, "-m", "trajledger", *args]
    if mode == "gone":
        read, write = os.pipe()
        os.close(read)
        with os.fdopen(write, "w") as pipe:
            return subprocess.run(cmd, stdout=pipe, stderr=subprocess.PIPE, text=True,
                                  timeout=300, env=env, check=False)
    script = {"closed": '"$@" >&-',
              "head": 'trap "" PIPE; "$@" | head -c1 >/dev/null; exit "${PIPESTATUS[0]}"'}[mode]
    return subprocess.run(["bash", "-c", script, "bash", *cmd], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=300, env=env, check=False)


F = "{files}"
FAILING = [  # (args, the FAIL: line's words); a verdict 1 that must stay 1
    (["verify", "cartpole-bc@2"], "1 of 30 checks failed"),
    (["verify", "cartpole-bc@2", "--json"], "1 of 30 checks failed"),
    (["lineage", "cartpole-bc@2", "--json"], "1 of 30 checks failed"),
    (["admit", "cartpole-train@2", "--json"], "FAIL:"),
    (["validate", f"{F}/steps.parquet"], "FAIL:"),
    (["validate", f"{F}/steps.parquet", "--json"], "FAIL:"),
    (["verify", f"{F}/a.txt", "--envelope", f"{F}/a.dsse", "--pubkey", "{home}/keys/vendor.pub"],
     "size 4, want 6"),
    (["verify", f"{F}/a.txt", "--envelope", f"{F}/a.dsse", "--pubkey", "{home}/keys/vendor.pub",
      "--json"], "size 4, want 6"),
    (["verify", f"{F}/d", "--sigstore-bundle", f"{F}/d.json", "--policy", "{home}/policy.toml"],
     "z: extra file, not in the manifest"),
    (["verify", f"{F}/d", "--sigstore-bundle", f"{F}/d.json", "--policy", "{home}/policy.toml",
      "--json"], "z: extra file, not in the manifest"),
    (["release", "cartpole-bc@2", "--key", "approver-a", "--json"], "FAIL:"),
    (["export", "cartpole-bc@2", "--format", "jsonl", "--out", "-"], "FAIL:"),
]
PASSING = [  # a verdict 0 (or a listing, a figure) that must stay 0
    ["verify", "cartpole-bc@1", "--json"], ["lineage", "cartpole-bc@1"],
    ["show", "cartpole-bc@2", "--json"], ["stats", "cartpole-bc@2"],
    ["query", "artifacts", "--json"], ["impact", "cartpole-train@2"], ["policy", "show"],
    ["log", "show"], ["fsck"],
]


WARNED = [  # (args, what stderr says after the report); a verdict 0 whose lines must follow
    (["import", f"{F}/bc2.tar.zst", "--policy", "{home}/policy.toml", "--key", "approver-a",
      "--key", "approver-b"], "WARNING: affected here: checkpoint"),
]  # (`--json`'s document is in the same `verdict_follows` block: not run again, for CI's time)


def _args(lab: Lab, args: list[str]) -> list[str]:
    return ["--ledger", str(lab.home),
            *(a.format(files=lab.files, home=lab.home) for a in args)]


@pytest.mark.parametrize(("args", "words"), FAILING, ids=[" ".join(a) for a, _w in FAILING])
def test_a_failing_verdict_to_a_reader_gone_still_fails(lab: Lab, args: list[str],
                                                        words: str) -> None:
    """finding 1: ``validate --json``, ``verify FILES --envelope … --json`` and ``verify DIR
    --sigstore-bundle …`` of what fails printed their report, met the closed pipe and ended 0
    (`Group.invoke`'s "a reader gone is no error"): their verdict never came. Expected, as for
    ``verify REF`` (rev51 finding 6): 1 and the ``FAIL:`` line, however the reader left."""
    for mode in ("gone", "closed", "head"):
        r = _run(mode, _args(lab, args), lab.state)
        assert r.returncode == 1, (mode, r.returncode, r.stderr)
        assert words in r.stderr and "Traceback" not in r.stderr, (mode, r.stderr)


@pytest.mark.parametrize("args", PASSING, ids=[" ".join(a) for a in PASSING])
def test_a_passing_verdict_to_a_reader_gone_still_passes(lab: Lab, args: list[str]) -> None:
    """A command that passes, or only lists, ends 0 however its reader left (a closed stdout
    is /dev/null: `trajledger.__main__._standard_streams`)."""
    for mode in ("gone", "head"):
        r = _run(mode, _args(lab, args), lab.state)
        assert r.returncode == 0, (mode, r.returncode, r.stderr)
        assert "FAIL" not in r.stderr and "Traceback" not in r.stderr, (mode, r.stderr)


@pytest.mark.parametrize(("args", "words"), WARNED, ids=[" ".join(a) for a, _w in WARNED])
def test_what_follows_a_report_to_a_reader_gone_is_still_said(
    lab: Lab, args: list[str], words: str, tmp_path: Path
) -> None:
    """rev53: ``import`` of a bundle whose checkpoint is built on a revoked dataset printed its
    report, met the closed pipe and ended 0 with nothing on stderr: no OK line, no ``WARNING:
    affected here``, no revocation or look-alike WARNING, and a look-alike check that failed
    after the import was recorded (exit 3) ended 0. Expected: each line, however the reader
    left (a fresh copy of the buyer each time: the first import is the one that says it)."""
    for mode in ("gone", "closed", "head"):
        buyer = tmp_path / mode
        shutil.copytree(lab.buyer, buyer, symlinks=True)
        state = tmp_path / f"{mode}-state"
        state.mkdir()
        r = _run(mode, ["--ledger", str(buyer), *_args(lab, args)[2:]], state)
        assert r.returncode == 0, (mode, r.returncode, r.stderr)
        assert words in r.stderr and "OK: " in r.stderr, (mode, r.stderr)


@pytest.fixture
def served() -> Iterator[list[LogServer]]:
    servers: list[LogServer] = []
    yield servers
    for s in servers:
        s.stop()


def test_a_monitor_that_finds_a_fork_to_a_reader_gone_still_fails(
    tmp_path: Path, served: list[LogServer]
) -> None:
    """finding 2: ``monitor URL --vkey K`` of a log that forked prints the conflicting signed
    checkpoint on stdout (the evidence) and then fails; to a reader gone (a cron's ``| logger``
    that died) the print met the closed pipe inside the ``except ConsistencyError`` and the
    BrokenPipeError that replaced it ended the command 0: a split view of a vendor's log
    passed unseen. Expected: 1 and the fork's ``FAIL:`` line."""
    vendor = Vendor(tmp_path / "vendor")
    vendor.add(3)
    other = vendor.copy(tmp_path / "other")
    vendor.add(2, tag="a")
    other.add(2, tag="b")
    state = tmp_path / "monitor-state"
    state.mkdir()
    for home in (vendor.home, other.home):
        served.append(LogServer(home / "log"))
        served[-1].start()
    first = _run("gone", ["monitor", served[0].url, "--vkey", vendor.vkey], state)
    assert first.returncode == 0, first.stderr
    for mode in ("gone", "closed", "head"):
        r = _run(mode, ["monitor", served[1].url, "--vkey", vendor.vkey], state)
        assert r.returncode == 1, (mode, r.returncode, r.stderr)
        assert "FAIL:" in r.stderr and "fork" in r.stderr, (mode, r.stderr)
