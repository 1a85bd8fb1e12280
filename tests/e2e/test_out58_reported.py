"""What out58 found playing the ML engineer on the first day, the release manager and the
auditor; docs/SECURITY.md, "Review of 2026-12-07, fortieth round (out58)".

On test_evaluations' ledger (keys vendor, approver, trainer, evaluator; bc@1 and bc@2 trained
on train@1; regression@1 required at success_rate >= 0.5), through click's CliRunner; the
ledger's files (`ledger_files`: every path's mode and SHA-256) compared before and after every
refusal.
"""

from __future__ import annotations

import sys
from pathlib import Path

from click.testing import CliRunner
from test_evaluations import evals_template, home, log_size, script  # noqa: F401
from test_out56_reported import WRITER, ledger_files
from test_runner_cli import expect, run


def test_an_evaluation_that_writes_a_model_past_the_held_bytes_in_place_leaves_the_store(
    runner: CliRunner, home: Path, tmp_path: Path, monkeypatch: object  # noqa: F811
) -> None:
    """out56's Left (a): ``eval -- COMMAND`` whose command wrote in place a checkpoint file
    past ``workdir.HELD_BYTES`` (a 200 MiB model; here the budget is 0) wrote the store's
    object through its hard link, and the run only named it for ``fsck --repair``: the
    checkpoint, its evaluations and releases failed ``verify`` until someone found a copy. Now
    such a file is the command's own (a reflink where the filesystem has them, else a copy):
    the run is refused as before (the input changed), the store's object is untouched, and
    nothing sends the user to ``fsck``."""
    from trajledger.runner import workdir

    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    monkeypatch.setattr(workdir, "HELD_BYTES", 0)  # type: ignore[attr-defined]
    before, size = ledger_files(home), log_size(home)
    for code in ("2", "0"):
        r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
                "--", sys.executable, writer, code)
        expect(r, 1)
        assert "trainer.json" in r.stderr, r.stderr
        assert "fsck" not in r.stderr and "the store's object" not in r.stderr, r.stderr
        assert ledger_files(home) == before and log_size(home) == size
    expect(run(runner, home, "verify", "bc@1"), 0)
    expect(run(runner, home, "fsck"), 0)
