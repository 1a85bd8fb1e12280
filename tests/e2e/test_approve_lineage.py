"""End to end: ``trajledger approve`` approves only data whose lineage verifies, and ``dataset
create`` over a batch whose lineage fails says so.

On test_evaluations.py's CartPole ledger (its keys and policy, train@1 approved), with a second
batch ``b2`` and a dataset ``again@1`` of it. ``approve`` of a revoked batch, or of a dataset
holding one, printed ``OK: … approved for 'train'``, exit 0, and recorded the approval (rev23's
Left): the approver was shown OK for data the gate refuses and every verifier fails, since a
revocation is for good. ``dataset create`` took such a batch without a word.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluations import cartpole_ledger  # tests/e2e is on sys.path (its conftest)
from test_rollout_lineage import tree
from test_runner_cli import run

from trajledger import Ledger
from trajledger.runner.rollouts import run_policy


@pytest.fixture
def home(tmp_path: Path) -> Path:
    out = tmp_path / "home"
    ledger = cartpole_ledger(out, 4)
    played = run_policy(None, "CartPole-v1", 2, 50, policy_version="random")
    ledger.record_batch(played.steps, episodes=played.episodes, env="cartpole@1",
                        policy="random", key="vendor", name="b2")
    return out


def lines(r: object) -> list[str]:
    err: str = r.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in err, err
    return [x for x in err.splitlines() if not x.startswith("NOTE:")]


@pytest.mark.parametrize("ref", ["b2", "again@1"])
def test_data_whose_lineage_fails_is_not_approved(runner: CliRunner, home: Path, ref: str
                                                  ) -> None:
    ledger = Ledger.open(home)
    ledger.create_dataset("again", "1", "train", ["b2"], key="vendor")
    ledger.revoke("b2", key="vendor", reason="personal data")
    before = tree(home)
    r = run(runner, home, "approve", ref, "--key", "approver")
    got = lines(r)
    assert r.exit_code == 1, r.output
    kind = "dataset" if ref == "again@1" else "rollout-batch"
    assert got[0] == (f"FAIL: {kind} {ref}: its lineage fails, 1 problem(s); nothing was "
                      "approved"), got
    assert "rollout-batch b2" in got[1] and "revoked: personal data" in got[1], got
    assert len(got) == 2, got
    assert tree(home) == before


def test_data_that_verifies_is_approved(runner: CliRunner, home: Path) -> None:
    Ledger.open(home).create_dataset("again", "1", "train", ["b2"], key="vendor")
    r = run(runner, home, "approve", "again@1", "--key", "approver")
    assert r.exit_code == 0, r.output
    assert lines(r) == ["OK: again@1 approved for 'train' by approver for 30d (log index 7)"]


def test_a_dataset_of_a_batch_whose_lineage_fails_is_warned_of(runner: CliRunner, home: Path
                                                               ) -> None:
    Ledger.open(home).revoke("b2", key="vendor", reason="personal data")
    r = run(runner, home, "dataset", "create", "again", "--version", "1", "--split", "train",
            "--batch", "b2", "--key", "vendor")
    assert r.exit_code == 0, r.output
    warnings = [x for x in lines(r) if x.startswith("WARNING:")]
    assert len(warnings) == 1, lines(r)
    assert "rollout-batch b2" in warnings[0] and "revoked: personal data" in warnings[0], lines(r)
    assert "cannot be approved" in warnings[0], lines(r)


def test_a_dataset_of_batches_that_verify_has_no_lineage_warning(runner: CliRunner, home: Path
                                                                 ) -> None:
    r = run(runner, home, "dataset", "create", "again", "--version", "1", "--split", "train",
            "--batch", "b2", "--key", "vendor")
    assert r.exit_code == 0, r.output
    assert not [x for x in lines(r) if x.startswith("WARNING:")], lines(r)
