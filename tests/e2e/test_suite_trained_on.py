"""A suite the checkpoint was trained on (trn35 finding 4): `dataset create` refuses a batch in
datasets of two splits, but a producer's own tooling (here `record_files`, as `dataset create`
records, without its checks) can record a regression suite holding the training batch. Until
trn35, `eval` ran on it, `release` recorded a release on that evaluation, and `verify` and the
offline verifier of its bundle said OK: an evaluation on training data counted for a release.
Now `eval` refuses before anything is read, and every verifier fails such an evaluation (its
suite check, `verify.releases.trained_on_suite`), so no release counts it; the parent's training
data counts too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluations import (  # noqa: F401
    EVALUATE,
    cartpole_ledger,
    evals_template,
    home,
    log_size,
    standalone_verify,
)
from test_runner_cli import expect, run


def _suite_of_the_train_batch(ledger: object, root: Path, tmp_path: Path) -> str:
    """regression@1 holding train@1's batch, recorded by a producer's own tooling."""
    from test_evaluations import predicate

    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.record import record_files
    from trajledger.verify import predicates
    from trajledger.verify.predicates import Dataset

    train = Catalog(ledger).resolve("train@1")  # type: ignore[arg-type]
    batch = predicate(root, train.digest, "dataset")["batches"][0]
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps({"name": "regression", "version": "1", "split": "regression",
                                "batches": [batch]}))
    body = Dataset("regression", "1", "regression", (batch,), "train").written("dataset")
    return record_files(ledger, {"dataset.json": path},  # type: ignore[arg-type]
                        ledger.keys.signer("vendor"),  # type: ignore[attr-defined]
                        predicates.DATASET, body, name="regression@1").digest


@pytest.mark.parametrize("checkpoint", ["bc@1", "bc@2"])
def test_an_evaluation_on_data_the_checkpoint_was_trained_on_counts_for_nothing(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpoint: str
) -> None:
    from trajledger.verify import releases

    home = tmp_path / "home"  # noqa: F811 - its own ledger, not the fixture
    ledger = cartpole_ledger(home, 10)
    ledger.train("train@1", key="trainer", name="bc", version="1",
                 config={"top_fraction": 0.5}, seed=1)
    if checkpoint == "bc@2":  # trained on other data, from a parent trained on the suite's
        from trajledger.runner.rollouts import run_policy

        more = run_policy(None, "CartPole-v1", 10, 300, policy_version="random")
        b = ledger.record_batch(more.steps, episodes=more.episodes, env="cartpole@1",
                                policy="random", key="vendor", name="more")
        ledger.create_dataset("train", "2", "train", [b.digest], key="vendor")
        ledger.approve("train@2", key="approver")
        ledger.train("train@2", key="trainer", name="bc", version="2",
                     config={"top_fraction": 0.5}, seed=2, parent="bc@1")
    _suite_of_the_train_batch(ledger, home, tmp_path)
    script = tmp_path / "evaluate.py"
    script.write_text(EVALUATE)
    evaluate = ["eval", checkpoint, "--suite", "regression@1", "--key", "evaluator", "--",
                sys.executable, script, "pass"]

    size = log_size(home)
    r = run(runner, home, *evaluate)
    expect(r, 1)
    whose = "it was" if checkpoint == "bc@1" else "its parent sha256:"
    assert (f"FAIL: evaluation of {checkpoint} on regression@1 > suite: dataset regression@1 "
            f"(sha256:") in r.stderr
    assert f"train@1, which {whose}" in r.stderr
    assert "an evaluation on data the checkpoint was trained on proves nothing" in r.stderr
    assert log_size(home) == size

    # Recorded anyway (the check of `eval` left out: an evaluator's own tooling), the
    # evaluation fails verification and counts for no release.
    with monkeypatch.context() as m:
        m.setattr(releases, "trained_on_suite", lambda *_a: None)
        r = run(runner, home, *evaluate)
        expect(r, 0)
    ev = r.stdout.strip().splitlines()[-1]
    r = run(runner, home, "verify", ev)
    expect(r, 1)
    assert "an evaluation on data the checkpoint was trained on proves nothing" in r.stdout
    r = run(runner, home, "release", checkpoint, "--key", "approver")
    expect(r, 1)
    assert "success_rate on regression@1: missing: no verified evaluation" in r.stderr

    # Offline: the bundle of the evaluation fails with the same line.
    bundle = tmp_path / "ev.tar.zst"
    run(runner, home, "export", ev, "--out", bundle)
    proc = standalone_verify(tmp_path, bundle, home / "policy.toml")
    assert proc.returncode == 1, proc.stderr
    assert "proves nothing" in proc.stdout


def _regression_2_of_bc1_played_from_0(runner: CliRunner, home: Path) -> None:  # noqa: F811
    """regression@2: one batch of bc@1's play from seeds 0..5 (its training seeds)."""
    r = run(runner, home, "rollout", "--checkpoint", "bc@1", "--env", "cartpole@1",
            "--episodes", "6", "--seed", "0", "--key", "vendor")
    expect(r, 0)
    r = run(runner, home, "dataset", "create", "regression", "--version", "2", "--split",
            "regression", "--batch", r.stdout.strip(), "--key", "vendor")
    expect(r, 0)


def test_the_built_in_evaluator_refuses_a_suite_replaying_training_seeds(
    runner: CliRunner, home: Path  # noqa: F811
) -> None:
    # trn35 finding 5: the built-in evaluator replays each suite episode's seed. A suite played
    # by bc@1 from seeds 0..5 shares no episode with train@1 (random play from seeds 0..29: the
    # duplicate checks find nothing, and `dataset create` records it), but every one of its
    # seeds starts an episode bc@1 was trained on: `eval` replayed them and recorded "6 of 6
    # passed" (exit 0). Refused now, before anything is read; by command it is the
    # command's own business (it may not replay seeds at all).
    _regression_2_of_bc1_played_from_0(runner, home)
    size = log_size(home)
    for ck in ("bc@1", "bc@2"):
        r = run(runner, home, "eval", ck, "--suite", "regression@2", "--key", "evaluator",
                "--pass-return", "30")
        expect(r, 1)
        assert r.stderr == (
            f"FAIL: evaluation of {ck} on regression@2: the built-in evaluator replays the "
            "suite's seeds, and 6 of them (first: 0) also started episodes of train@1, which "
            f"{ck} was trained on, in the same environment: it would be evaluated on its "
            "training episodes' starting states; nothing was read (record a suite of other "
            "seeds, or evaluate with '-- COMMAND')\n")
    assert log_size(home) == size
    # The suite of other seeds (regression@1, seeds 1000..) is replayed as before.
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            "--pass-return", "30")
    expect(r, 0)


@pytest.mark.parametrize("listed", [(), ("00", "+1", "2 ", "3_0"), ("1000",)])
def test_a_suite_whose_signed_seeds_are_not_those_it_replays_is_refused(
    runner: CliRunner, home: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
    listed: tuple[str, ...]
) -> None:
    # rev33 finding 1: the refusal of training seeds (trn35 finding 5) read the suite batches'
    # signed `seeds`, the built-in evaluator replays the seeds of their episodes.parquet. A
    # batch recorded by a producer's own tooling (here `rollout` with the metadata's seeds
    # swapped) listing no seed, the seeds in another form ("00" for 0) or other seeds, while its
    # episodes are bc@1's play from its training seeds 0..5: `eval` replayed them and recorded
    # "6 of 6 episode(s) passed", exit 0.
    from trajledger.ledger import artifacts

    made = artifacts.RolloutBatch

    def forged(**kw: object) -> object:
        return made(**{**kw, "seeds": listed})  # type: ignore[arg-type]

    forged.from_predicate = made.from_predicate  # type: ignore[attr-defined]
    with monkeypatch.context() as m:
        m.setattr(artifacts, "RolloutBatch", forged)
        _regression_2_of_bc1_played_from_0(runner, home)
    size = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@2", "--key", "evaluator",
            "--pass-return", "30")
    expect(r, 1)
    if listed[:1] == ("00",):  # the training seeds in another form: seen before the replay
        assert r.stderr.startswith("FAIL: evaluation of bc@1 on regression@2: the built-in "
                                   "evaluator replays the suite's seeds, and 3 of them (first: "
                                   "0) also started episodes of train@1")
    else:
        assert r.stderr.startswith("FAIL: batch sha256:")
        assert ("of the suite: its episodes.parquet replays seed 0, which its signed metadata "
                "(seeds) does not list") in r.stderr
    assert r.stderr.count("\n") == 1
    assert log_size(home) == size
