"""Every command with ``--out`` refuses a device, FIFO or socket put at its path after the
option was checked (`clikit.OutPath`), just before its file is renamed into place
(`fs.write_file_atomic(..., output=True)`, `fs.refuse_special`; left34, the lead's Left of the
eighteenth round): before, only ``export``'s bundle was checked there, and the others replaced
it with a regular file (as root, a system device). A cache or the user's state still replaces
a planted special file (tests/e2e/test_special_files.py)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
import testkit
from click.testing import CliRunner
from test_runner_cli import expect, run  # tests/e2e is on sys.path (its conftest)

from trajledger.ledger import fs


@pytest.fixture
def home(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path / "home")


@pytest.mark.parametrize("command", [
    ["lineage", "cartpole-bc@2", "--format", "html"],
    ["log", "proof", "3"],
    ["sign", "{data}", "--key", "vendor"],
    ["card", "cartpole-train@2", "--format", "hf"],
    ["policy", "init"],
    ["export", "cartpole-train@2", "--format", "sigstore"],
], ids=lambda c: " ".join(c[:2]))
def test_a_fifo_put_at_the_out_path_after_it_was_checked_is_not_replaced(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    out = tmp_path / "out" / "result"
    out.parent.mkdir()
    data = tmp_path / "data.txt"
    data.write_text("some data\n")
    real = fs.temp_name

    def plant(suffix: str = "") -> str:  # the moment between the option's check and the rename
        if sys._getframe(1).f_locals.get("path") == out and not os.path.lexists(out):
            os.mkfifo(out)  # (called by write_file_atomic for the output: its temp file's name)
        return real(suffix)

    monkeypatch.setattr(fs, "temp_name", plant)
    args = [a.replace("{data}", str(data)) for a in command]
    r = run(CliRunner(), home, *args, "--out", out)
    expect(r, 3)
    assert r.stderr.splitlines()[-1].endswith("is a FIFO, not a file: not replaced; write to the "
                                              "path of a file"), r.stderr
    assert stat.S_ISFIFO(os.lstat(out).st_mode)
    assert [p.name for p in out.parent.iterdir()] == ["result"]  # no temp file left


def test_a_file_the_user_did_not_name_still_replaces_a_planted_fifo(tmp_path: Path) -> None:
    """The flag is the output's only: without it a special file is replaced, as a cache's is
    meant to be."""
    path = tmp_path / "cache"
    os.mkfifo(path)
    fs.write_file_atomic(path, b"built again")
    assert path.read_bytes() == b"built again"
    os.unlink(path)
    os.mkfifo(path)
    with pytest.raises(OSError, match="is a FIFO, not a file: not replaced"):
        fs.write_file_atomic(path, b"x", output=True)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)
