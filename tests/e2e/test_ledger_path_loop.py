"""A ledger path that is valid but odd (rev37, twenty-fifth round; out39's refusals probed):
a loop of symbolic links was a bug report from every command, and now is one line, exit 3.
docs/SECURITY.md, "Review of 2026-12-06, twenty-fifth round (rev37)".
"""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from trajledger.runner.cli import main


def run(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    r = runner.invoke(main, list(args), prog_name="trajledger")
    return r.exit_code, r.stdout, r.stderr


def test_a_ledger_path_that_loops_is_refused_in_one_line(
        runner: CliRunner, tmp_path: Path) -> None:
    """``--ledger loop`` (``loop -> loop``) or a path under two links naming each other:
    `Path.resolve` raised ``RuntimeError: Symlink loop`` (exit 4, ``BUG:``) from ``init``
    (`config.ledger_path`, out39's check), ``log info`` and ``verify`` (`refuse_outputs_in`)
    and ``key list``; nothing is made, the state untouched."""
    state = Path(os.environ["TRAJLEDGER_STATE_DIR"])
    before = sorted(state.rglob("*"))
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    for where in (tmp_path / "loop", tmp_path / "a" / "sub"):
        for args in (["init", "--json"], ["log", "info"], ["verify", "x"], ["key", "list"]):
            code, out, err = run(runner, "--ledger", str(where), *args)
            assert (code, out, err) == (3, "", (
                f"FAIL: {where}: the ledger's path goes round a loop of symbolic links: give "
                "the directory's own path, or point the link at it\n")), (args, err)
        code, out, err = run(runner, "quickstart", str(where))
        assert code == 3 and "loop of symbolic links" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "loop"]
    assert sorted(state.rglob("*")) == before


def test_an_output_path_that_loops_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    """``export … --out loop`` (the output itself a loop of links): `refuse_outputs_in`
    resolved it and answered ``BUG: RuntimeError``, exit 4; now a usage error, exit 2, before
    the ledger is opened."""
    (tmp_path / "loop").symlink_to("loop")
    code, out, err = run(runner, "--ledger", str(tmp_path / "led"), "export", "x@1", "--out",
                         str(tmp_path / "loop"))
    assert code == 2 and out == "", err
    assert f"--out {tmp_path / 'loop'}: goes round a loop of symbolic links: write elsewhere" in (
        " ".join(err.split())), err
