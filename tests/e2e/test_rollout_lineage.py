"""End to end: ``trajledger rollout`` plays only a checkpoint (in an environment) that verifies.

On test_evaluations.py's CartPole ledger (its keys and policy, train@1 approved) with checkpoint
bc@1 trained on train@1 in cartpole@1. ``rollout`` played a checkpoint whose lineage fails (its
training data revoked, say), or in an environment that is revoked, and recorded the episodes as a
batch whose lineage fails from its first day, exit 0, without a word (rev23): the batch the
producer key signed names the checkpoint as its policy, so it fails as the checkpoint does, and
the docs' next step turns such rollouts into a regression suite. ``train --parent`` and ``eval``
refuse such a checkpoint before anything runs; ``rollout`` now does too.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import testkit
from click.testing import CliRunner
from test_evaluations import cartpole_ledger  # tests/e2e is on sys.path (its conftest)
from test_runner_cli import run

from trajledger import Ledger


def build_home(out: Path) -> None:
    cartpole_ledger(out, 10).train("train@1", key="trainer", name="bc", version="1", seed=1)


@pytest.fixture(scope="module")
def home_template(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[None]:
    """`build_home`, once per module (ci54: each test built it, 1.3 to 1.6 s of set-up under
    load: ten rollouts and a training)."""
    return testkit.build_template(tmp_path_factory.mktemp("rollout-lineage"), build_home)


@pytest.fixture
def home(home_template: testkit.Template[None], tmp_path: Path) -> Path:
    """A copy of `home_template` for one test, known to its user (`testkit.copy_template`)."""
    return testkit.copy_template(home_template, tmp_path / "home")


def tree(home: Path) -> str:
    """A digest of every file of the ledger but its temporary directory."""
    h = hashlib.sha256()
    for p in sorted(home.rglob("*")):
        rel = p.relative_to(home)
        if rel.parts[0] == "tmp" or not p.is_file():
            continue
        h.update(str(rel).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def rollout(runner: CliRunner, home: Path, *args: str) -> tuple[int, list[str]]:
    r = run(runner, home, "rollout", "--checkpoint", "bc@1", "--episodes", "2", "--seed", "7",
            "--key", "vendor", *args)
    assert "Traceback" not in r.output, r.output
    return r.exit_code, [x for x in r.stderr.splitlines() if not x.startswith("NOTE:")]


def test_a_checkpoint_whose_lineage_fails_is_not_played(runner: CliRunner, home: Path) -> None:
    Ledger.open(home).revoke("train@1", key="approver", reason="personal data")
    before = tree(home)
    code, lines = rollout(runner, home, "--env", "cartpole@1")
    assert code == 1, lines
    assert lines[0] == ("FAIL: checkpoint bc@1: its lineage fails, 1 problem(s); nothing was "
                        "played or recorded"), lines
    assert "dataset train@1" in lines[1] and "revoked: personal data" in lines[1], lines
    assert tree(home) == before


def test_a_revoked_environment_is_not_played_in(runner: CliRunner, home: Path) -> None:
    ledger = Ledger.open(home)
    ledger.register_environment("cartpole-other", "1", key="vendor", gym_id="CartPole-v1")
    ledger.revoke("cartpole-other@1", key="vendor", reason="wrong physics")
    before = tree(home)
    code, lines = rollout(runner, home, "--env", "cartpole-other@1")
    assert code == 1, lines
    assert lines[0] == ("FAIL: environment cartpole-other@1: its lineage fails, 1 problem(s); "
                        "nothing was played or recorded"), lines
    assert "revoked: wrong physics" in lines[1], lines
    assert tree(home) == before


def test_a_checkpoint_that_verifies_is_played(runner: CliRunner, home: Path) -> None:
    code, lines = rollout(runner, home, "--env", "cartpole@1", "--json")
    assert code == 0, lines
