"""A ledger copied file by file while a command appended to it (review out38, finding 2).

A team copies the vendor's ledger to a second machine (``cp -r``, ``rsync``) while its CI
records. Such a copy is no snapshot: it can hold the log's new signed checkpoint and the
treeState of before the append (in a probe, 1 of 82 copies taken during twelve ``env
register``: ``cp -a`` read ``.state/treeState`` before the writer replaced it and
``checkpoint`` after). No crash leaves that state, so every command refuses it, as it must (a
writer would append over the last entry the checkpoint signed); but it said only "the log was
rolled back" and "restore the log from a copy you trust", a false alarm of tampering with a
wrong way on. It now names the copy made during an append, and what to do.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from trajledger.runner.cli import main


def files(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*"))
            if p.is_file()}


def run(home: Path, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["--ledger", str(home), *args], prog_name="trajledger")
    assert "Traceback" not in r.output
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("command", [("log", "info"), ("log", "verify"), ("show", "cart@1")])
def test_a_copy_taken_during_an_append_says_so(
        alice_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        command: tuple[str, ...]) -> None:
    state = alice_home / "log" / ".state" / "treeState"
    before = state.read_bytes()
    code, _, err = run(alice_home, "env", "register", "grid", "--version", "1", "--key", "alice")
    assert code == 0, err
    # what cp -r took: every file as it is after the append, but treeState as it was before
    copy = tmp_path / "copy"
    shutil.copytree(alice_home, copy)
    (copy / "log" / ".state" / "treeState").write_bytes(before)
    # on a second machine: a user state of its own
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "second-machine"))
    taken = files(copy)
    code, out, err = run(copy, *command)
    size = json.loads(run(alice_home, "log", "info", "--json")[1])["size"]
    assert code == 1 and (out == "" or command == ("log", "verify")), out
    assert err.splitlines()[-1] == (
        f"FAIL: {copy / 'log' / '.state' / 'treeState'}: size {size - 1} is behind the signed "
        f"checkpoint's {size}: the log was rolled back, or copied file by file while a command "
        "appended to it (copy it again while no command writes to it); nothing was changed; "
        "run 'trajledger log verify' for every problem and restore the log from a copy you trust"
        if command != ("log", "verify") else
        f"FAIL: log/.state/treeState: size {size - 1} is behind the signed checkpoint's {size}: "
        "the log was rolled back, or copied file by file while a command appended to it (copy "
        "it again while no command writes to it)"), err
    assert files(copy) == taken
    # copied again, with nothing writing: the second machine reads it
    shutil.rmtree(copy)
    shutil.copytree(alice_home, copy)
    code, _, err = run(copy, *command)
    assert code == 0, err
