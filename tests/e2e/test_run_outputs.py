"""End to end: ``train --output`` and ``eval --output`` are not inside the ledger's own files.

Every other option that names where a command writes (``export --out``, ``sign``, ``lineage``,
``card``, ``log proof``, ``policy init``, ``monitor``) refuses a path under the ledger's own
files and directories (``ledger.toml``, ``log/``, ``log-key/``, ``keys/``, ``objects/``,
``index/``, ``tmp/``) with exit 2 before anything is written. ``train --output`` and ``eval
--output``, the directories COMMAND writes into and the user keeps, did not (rev23): ``train
--output LEDGER/objects/model -- COMMAND`` ran, wrote the model there and kept it, exit 0; the
same in ``keys/``, ``log/``, ``log-key/``, ``tmp/`` and ``index/`` (where ``eval`` left its
results.json beside the episode index). Like every other output path, the directory's parent must
now exist.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluations import cartpole_ledger  # tests/e2e is on sys.path (its conftest)
from test_rollout_lineage import tree
from test_runner_cli import run

from trajledger.ledger.clikit import MANAGED

WRITE = "import os, pathlib; pathlib.Path(os.environ['TRAJLEDGER_OUTPUT_DIR'], 'w').write_text('w')"


@pytest.mark.parametrize("managed", [m for m in MANAGED if m != "ledger.toml"])
def test_a_run_s_output_directory_inside_the_ledger_s_files_is_a_usage_error(
    runner: CliRunner, tmp_path: Path, managed: str
) -> None:
    home = tmp_path / "home"
    cartpole_ledger(home, 4)
    (home / managed).mkdir(exist_ok=True)
    before = tree(home)
    out = home / managed / "model"
    for args in (["train", "--dataset", "train@1", "--key", "trainer", "--name", "m",
                  "--version", "1", "--output", out, "--", sys.executable, "-c", WRITE],
                 ["eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
                  "--output", out, "--", sys.executable, "-c", WRITE]):
        r = run(runner, home, *args)
        assert r.exit_code == 2, r.output
        assert f"--output {out}: inside the ledger's own files" in r.stderr, r.stderr
        assert not out.exists()
        assert tree(home) == before


def test_an_output_directory_beside_the_ledger_s_files_is_fine(
    runner: CliRunner, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    cartpole_ledger(home, 4)
    out = home / "m1"
    r = run(runner, home, "train", "--dataset", "train@1", "--key", "trainer", "--name", "m",
            "--version", "1", "--output", out, "--", sys.executable, "-c", WRITE)
    assert r.exit_code == 0, r.output
    assert (out / "w").read_text() == "w"
    before = tree(home)
    (tmp_path / "file").write_text("x")
    # A file, or a directory whose parent is missing or a file: usage errors before anything
    # runs, for COMMAND and for a plug-in (which trained, recorded and then failed to copy its
    # files into a missing parent, exit 3, before).
    for bad in (tmp_path / "file", tmp_path / "missing" / "out", tmp_path / "file" / "out"):
        for command in (["--", sys.executable, "-c", WRITE], ["--seed", "3"]):
            r = run(runner, home, "train", "--dataset", "train@1", "--key", "trainer",
                    "--name", "m", "--version", "2", "--output", bad, *command)
            assert r.exit_code == 2, r.output
            assert tree(home) == before
