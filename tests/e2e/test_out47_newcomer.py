"""End to end: a newcomer after the quickstart trains a plain PyTorch loop of their own on
rollouts they recorded from JSON lines, by docs/trainers.md (out47).

``{"action": 1}`` in a JSON line is stored as ``[1]`` (rollout schema: ``obs`` and ``action``
are lists, a number's shape ``[]``): the newcomer's ``torch.tensor(column.to_pylist())`` is
``[steps, 1]``, and ``cross_entropy`` refuses it. docs/trainers.md showed ``datasets`` and a
chat loop, not a loop over ``obs`` and ``action``. Its block is run here, as COMMAND.

Findings: docs/SECURITY.md, "Review of 2026-12-07, thirty-second round (out47)".
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluations import evals_template, home  # noqa: F401
from test_runner_cli import expect, run

DOC = Path(__file__).resolve().parents[2] / "docs" / "trainers.md"


def plain_loop() -> str:
    """docs/trainers.md's block that begins ``# a plain PyTorch loop``."""
    blocks = re.findall(r"```python\n(# a plain PyTorch loop.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "docs/trainers.md: no block '# a plain PyTorch loop'"
    return str(blocks[0])


def test_the_documented_plain_pytorch_loop_trains_on_recorded_json_lines(
    runner: CliRunner, home: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out47 finding 6: the block runs as a training command on train@1 (numbers for
    ``action``, as a newcomer's JSON lines have them) and writes its checkpoint."""
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(plain_loop())
    r = run(runner, home, "train", "--dataset", "train@1", "--key", "trainer", "--name",
            "my-net", "--version", "1", "--", sys.executable, str(script))
    expect(r, 0)
    assert "1 file(s) from" in r.stderr, r.stderr
    r = run(runner, home, "show", "my-net@1", "--json")
    assert [f["path"] for f in __import__("json").loads(r.stdout)["files"]] == ["model.pt"]
