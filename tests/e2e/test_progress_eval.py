"""Progress of ``trajledger eval`` (issue 23 item 4), seen on a pseudo-terminal: the built-in
evaluator draws a bar over the suite's episodes (their number is known once the suite is
read), with a percentage and the time left; none under ``-q`` or when stderr is not a terminal.
(``eval -- COMMAND`` shows COMMAND's own output as it comes: trajledger cannot know how far
COMMAND is.) ``trajledger train`` with the built-in trainer draws one over its epochs
(`TrainingData.progress`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_evaluations import cartpole_ledger  # tests/e2e is on sys.path (its conftest)
from testkit import run_on_terminal


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The evaluations ledger (format-2 policy, evaluator key) with bc@1 and regression@1 of
    six random CartPole episodes."""
    from trajledger.runner.rollouts import run_policy

    home = tmp_path_factory.mktemp("eval-progress") / "home"
    ledger = cartpole_ledger(home, 10)
    ledger.train("train@1", key="trainer", name="bc", version="1", seed=1)
    reg = run_policy(None, "CartPole-v1", 6, 1000, policy_version="random")
    rb = ledger.record_batch(reg.steps, episodes=reg.episodes, env="cartpole@1",
                             policy="random", key="vendor", name="regression-batch")
    ledger.create_dataset("regression", "1", "regression", [rb.digest], key="vendor")
    return home


def _eval(home: Path, *first: str) -> list[str]:
    return [sys.executable, "-m", "trajledger", "--ledger", str(home), *first, "eval", "bc@1",
            "--suite", "regression@1", "--key", "evaluator", "--pass-return", "20",
            "--max-steps", "50"]


def _env() -> dict[str, str]:
    # Read when the test runs: the test session's state directory is set by then.
    return dict(os.environ, COLUMNS="100")


def test_eval_draws_a_bar_over_the_episodes(home: Path) -> None:
    code, err = run_on_terminal(_eval(home), _env())
    assert code == 0, err
    assert "evaluating episodes" in err, err
    # click adds the time left once an episode has taken a second or more: not on this pace.
    assert "0%" in err and "50%" in err and "100%" in err, err
    assert "OK: evaluation of bc@1 on regression@1 recorded" in err


def test_eval_draws_no_bar_under_quiet_or_off_a_terminal(home: Path) -> None:
    code, err = run_on_terminal(_eval(home, "-q"), _env())
    assert code == 0, err
    assert "evaluating episodes" not in err and "%" not in err, err
    r = subprocess.run(_eval(home), capture_output=True, text=True, env=_env(), check=False)
    assert r.returncode == 0, r.stderr
    assert "evaluating episodes" not in r.stderr and "%" not in r.stderr, r.stderr


def _train(home: Path, version: str, *first: str) -> list[str]:
    config = home.parent / "bc.toml"
    config.write_text("epochs = 4\n")
    return [sys.executable, "-m", "trajledger", "--ledger", str(home), *first, "train",
            "--dataset", "train@1", "--key", "trainer", "--name", "bc-bar", "--version",
            version, "--config", str(config)]


def test_train_draws_a_bar_over_the_built_in_trainers_epochs(home: Path) -> None:
    code, err = run_on_terminal(_train(home, "1"), _env())
    assert code == 0, err
    assert "training (epochs)" in err, err
    assert "0%" in err and "50%" in err and "100%" in err, err
    code, err = run_on_terminal(_train(home, "2", "-q"), _env())
    assert code == 0, err
    assert "training (epochs)" not in err and "%" not in err, err
