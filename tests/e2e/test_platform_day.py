"""The platform engineer's day (out39): trajledger in CI and cron, no terminal, ``LANG=C``,
paths with spaces and bytes that are not UTF-8.

Its findings, and the probes that held: docs/SECURITY.md, "Review of 2026-12-06,
twenty-fourth round (out39)".
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
import testkit
from click.testing import CliRunner

from trajledger.runner.cli import main

NOT_UTF8 = os.fsdecode(b"led\xfe ger")
"""A directory name another tool made under ``LANG=C`` (byte 0xfe is no UTF-8)."""


def run(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    r = runner.invoke(main, list(args), prog_name="trajledger")
    return r.exit_code, r.stdout, r.stderr


def test_a_ledger_path_that_is_not_utf8_is_refused_before_anything_is_made(
        runner: CliRunner, tmp_path: Path) -> None:
    """``init`` there was exit 4 (``BUG: UnicodeEncodeError``, from the pin of the ledger's
    path in the user's state), and ``quickstart`` too (from Arrow, which opens files by UTF-8
    name): now one line saying to rename it, exit 3, nothing made, the state untouched."""
    state = Path(os.environ["TRAJLEDGER_STATE_DIR"])
    before = sorted(state.rglob("*"))
    where = tmp_path / NOT_UTF8
    byte = len(os.fsencode(tmp_path)) + 4  # the byte 0xfe of the absolute path shown
    for args in (["--ledger", str(where), "init", "--json"], ["quickstart", str(where)]):
        code, out, err = run(runner, *args)
        assert code == 3 and out == "", (args, code, err)
        assert err == (f"FAIL: {tmp_path}/led\\xfe ger: the ledger's path is not valid UTF-8 "
                       f"(byte {byte}), which Arrow cannot open: rename the directory\n"), err
        assert not where.exists() and sorted(state.rglob("*")) == before
    # A ledger written elsewhere, then moved there (a copy by another tool): read commands that
    # open Parquet were exit 4 too; every command now refuses it the same way.
    home = tmp_path / "made"
    assert run(runner, "--ledger", str(home), "init")[0] == 0
    home.rename(where)
    for args in (["log", "info"], ["query", "episodes", "--json"]):
        code, out, err = run(runner, "--ledger", str(where), *args)
        assert code == 3 and out == "" and f"not valid UTF-8 (byte {byte})" in err, (args, err)
    # Reached through a link whose own name is UTF-8: the directory it leads to is refused too.
    (tmp_path / "link").symlink_to(where)
    code, _, err = run(runner, "--ledger", str(tmp_path / "link"), "log", "info")
    assert code == 3 and f"not valid UTF-8 (byte {byte})" in err, err


def test_the_quickstarts_hint_can_be_copied_with_a_path_with_spaces(
        runner: CliRunner, tmp_path: Path) -> None:
    """The quickstart's last lines are what a user copies: ``try: trajledger --ledger DIR
    verify …``. Under a path with spaces (``~/My Projects/demo``) the copy ran ``--ledger
    ~/My`` and failed; the path is quoted now as the shell reads it."""
    where = tmp_path / "my projects" / "démo"
    code, _, err = run(runner, "quickstart", str(where), "--episodes", "10")
    assert code == 0, err
    hints = [line.strip().removeprefix("try: ") for line in err.splitlines()
             if "trajledger --ledger" in line]
    assert len(hints) == 2, err
    for hint in hints:
        words = shlex.split(hint)
        assert words[:3] == ["trajledger", "--ledger", str(where)], hint
        code, _, err = run(runner, *words[1:])
        assert code == 0, (hint, err)


@pytest.mark.parametrize("umask", [0o077, 0o022])
def test_a_ledger_made_under_either_umask_reads_the_same(
        runner: CliRunner, tmp_path: Path, umask: int) -> None:
    """A cron job under ``umask 077`` and a CI runner under ``022``: the ledger's own
    directories are 0755 whatever the umask (README), so the same commands read it."""
    old = os.umask(umask)
    try:
        home = tmp_path / "led"
        testkit.quickstart(home, episodes=10)
    finally:
        os.umask(old)
    assert {oct(p.stat().st_mode & 0o777) for p in (home, home / "log", home / "objects")} == {
        "0o755"}
    code, _, err = run(runner, "--ledger", str(home), "verify", "cartpole-bc@2")
    assert code == 0, err


def test_a_ledger_copied_without_its_modes_is_fixed_by_the_one_chmod_it_names(
        runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    """Copied to a second machine by a tool that keeps no modes (``rsync -r`` without ``-a``,
    a CI cache, under ``umask 002``): every directory and file group-writable. Each command
    refused the first such path and named its chmod; the user ran it 17 times, one path each,
    to learn them all. Now the refusal (exit 3, the ledger not opened) names the first, how
    many more, and the one ``chmod -R`` that fixes them; after it the ledger opens."""
    home = testkit.copy_template(quickstart_template, tmp_path / "copied")
    for p in (home, *home.rglob("*")):
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o020)
    code, out, err = run(runner, "--ledger", str(home), "verify", "cartpole-bc@2", "--json")
    assert code == 3 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"FAIL: {home}: writable by its group (mode 0775); run 'chmod g-w "
                          f"{home}'"), err
    assert err.endswith(f"; and 16 more path(s) of this ledger likewise: 'chmod -R go-w {home}' "
                        "fixes them all\n"), err
    for p in (home, *home.rglob("*")):
        if not p.is_symlink():
            p.chmod(p.stat().st_mode & ~0o022)  # chmod -R go-w
    code, _, err = run(runner, "--ledger", str(home), "verify", "cartpole-bc@2")
    assert code == 0, err
