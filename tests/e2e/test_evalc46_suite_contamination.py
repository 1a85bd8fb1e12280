"""`eval` compares the suite with the checkpoint's training data (evalc46; seal46 finding 4).

On copies of test_evaluations' ledger (bc@1 trained on train@1, seeds 0-29; holdout@1 sealed
to the evaluator, seeds 2000-2003): a suite made of train episodes, the train set first (a
sealed copy its sketch does not find, rewards doubled; a plain copy recorded under ``runs =
"near"``) or the suite first (a train set of holdout@1's episodes, rewards doubled, and a
checkpoint trained on it), is refused by `eval` with the words `dataset create` uses, nothing
but the unsealing logged; under ``runs = "near"`` it is a WARNING and the evaluation records
what was checked. docs/SECURITY.md, "Review of 2026-12-07, thirty-first round (evalc46)"."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from test_evaluations import evals_template, home, log_size, predicate  # noqa: F401
from test_runner_cli import expect, run

from trajledger import Ledger

COMMAND = ("--", sys.executable, "-c", "import sys; sys.exit(5)")
"""A command that would fail: each refusal here comes before it runs."""


def copied(steps: pa.Table, prefix: str) -> pa.Table:
    """``steps`` with other episode ids and every reward doubled (another fingerprint, and a
    sketch of cosine about 0.94 with the original's: seal46 finding 3)."""
    ids = pa.array([f"{prefix}{e}" for e in steps.column("episode_id").to_pylist()])
    steps = steps.set_column(steps.column_names.index("episode_id"), "episode_id", ids)
    reward = steps.column("reward")
    steps = steps.set_column(steps.column_names.index("reward"), "reward",
                             pc.multiply(reward, pa.scalar(2, reward.type)))
    # each episode's first step dropped: a copy shifted by one step, which the sealed record's
    # sketch (time-aligned) and its fit (seal47: episodes of one length) do not find
    steps = steps.filter(pc.not_equal(steps.column("step"), 0))
    step = pc.subtract(steps.column("step"), pa.scalar(1, steps.schema.field("step").type))
    steps = steps.set_column(steps.column_names.index("step"), "step", step)
    return steps.set_column(steps.column_names.index("is_first"), "is_first",
                            pc.equal(step, pa.scalar(0, step.type)))


def train_copy(home: Path, *, seal: bool, name: str = "copied") -> str:  # noqa: F811
    """A holdout NAME@1 of train@1's episodes (its seeds played again), recorded; its batch."""
    from trajledger.runner.rollouts import run_policy

    ledger = Ledger.open(home)
    played = run_policy(None, "CartPole-v1", 30, 0, policy_version="random")  # train@1's
    batch = ledger.record_batch(copied(played.steps, "copy-"), env="cartpole@1",
                                policy="random", key="vendor", name=f"{name}-batch", seal=seal)
    ledger.create_dataset(name, "1", "holdout", [batch.digest], key="vendor")
    return batch.digest


def set_contamination(home: Path, section: str) -> None:  # noqa: F811
    """A successor policy: the fixture's with ``section`` (``""``: none) as its
    ``[contamination]``."""
    policy = home / "policy.toml"
    text = policy.read_text().split("\n[contamination]")[0]
    serial = next(int(line.split("=")[1]) for line in text.splitlines()
                  if line.startswith("serial"))
    text = text.replace(f"serial = {serial}", f"serial = {serial + 1}")
    policy.write_text(text + (f"\n[contamination]\n{section}\n" if section else ""))
    Ledger.open(home).set_policy(policy, keys=["approver"])


def evaluation(home: Path, digest: str) -> dict[str, Any]:  # noqa: F811
    config = predicate(home, digest, "evaluation")["configuration"]
    return next(d["annotations"] for d in config if d.get("name") == "contamination")


def test_a_sealed_copy_of_the_train_set_is_refused(runner: CliRunner, home: Path) -> None:  # noqa: F811
    """The train set first: a sealed holdout of its episodes, rewards doubled, is recorded
    (its published sketch is not near the train episodes'); `eval`, which opens it, finds
    their runs of steps and refuses it, the unsealing alone logged."""
    train_copy(home, seal=True)  # recorded: `dataset create` found nothing
    size = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", "copied@1", "--key", "evaluator",
            *COMMAND)
    expect(r, 1)
    assert r.stderr.startswith("FAIL: evaluation of bc@1 on copied@1: ")
    assert "episode(s) exactly duplicate episodes of the other split: train episode " in r.stderr
    assert "consecutive steps" in r.stderr and "(holdout copied@1)" in r.stderr
    assert ("the suite holds episodes bc@1 was trained on (of train train@1), so it proves "
            f"nothing of it; nothing was recorded but the unsealing (log index {size}), which "
            "stays logged (evaluate on a suite of other episodes") in r.stderr
    assert [e["kind"] for e in log_entries(runner, home)[size:]] == ["unsealing"]


def test_a_plain_copy_is_a_warning_under_runs_near_and_refused_without(
        runner: CliRunner, home: Path) -> None:  # noqa: F811
    """A plain holdout of train@1's episodes, recorded under ``runs = "near"`` (`dataset
    create` warns of each shared run): `eval` warns as it did, and its evaluation says what
    was checked and by which rule; the policy back to the default, `eval` refuses it."""
    set_contamination(home, 'runs = "near"')
    train_copy(home, seal=False)
    r = run(runner, home, "eval", "bc@1", "--suite", "copied@1", "--key", "evaluator",
            "--", sys.executable, "-c", EVALUATE_ALL)
    expect(r, 0)
    warned = [x for x in r.stderr.splitlines() if x.startswith("WARNING: evaluation of bc@1 on "
                                                               "copied@1: suite train episode")]
    assert warned and "consecutive steps" in warned[0], r.stderr
    checked = evaluation(home, r.stdout.strip())
    assert checked["runs"] == "near" and checked["near"] >= len(warned) > 0
    assert checked["exact"] == 0 and checked["trainBatches"] == 1 and checked["unchecked"] == 0
    set_contamination(home, "")
    r = run(runner, home, "eval", "bc@1", "--suite", "copied@1", "--key", "evaluator",
            *COMMAND)
    expect(r, 1)
    assert "episode(s) exactly duplicate episodes of the other split" in r.stderr
    assert "nothing was recorded (evaluate on a suite of other episodes" in r.stderr


def test_a_checkpoint_trained_on_a_sealed_suites_episodes_is_refused_on_it(
        runner: CliRunner, home: Path) -> None:  # noqa: F811
    """The suite first: a train set of holdout@1's episodes (rewards doubled: neither `dataset
    create` nor the gate finds it by the sealed record's sketch), approved, trained on; `eval`
    of that checkpoint on holdout@1 refuses, of bc@1 (not trained on it) does not."""
    from trajledger.runner.rollouts import run_policy

    ledger = Ledger.open(home)
    held = run_policy(None, "CartPole-v1", 4, 2000, policy_version="random")  # holdout@1's
    batch = ledger.record_batch(copied(held.steps, "stolen-"), env="cartpole@1",
                                policy="random", key="vendor", name="stolen-batch")
    ledger.create_dataset("stolen", "1", "train", [batch.digest], key="vendor")
    ledger.approve("stolen@1", key="approver")
    ledger.train("stolen@1", key="trainer", name="bc", version="3",
                 config={"top_fraction": 0.5}, seed=3)
    r = run(runner, home, "eval", "bc@3", "--suite", "holdout@1", "--key", "evaluator",
            *COMMAND)
    expect(r, 1)
    assert "FAIL: evaluation of bc@3 on holdout@1: " in r.stderr
    assert "exactly duplicate episodes of the other split" in r.stderr
    assert "(train stolen@1)" in r.stderr and "(holdout holdout@1)" in r.stderr
    r = run(runner, home, "eval", "bc@1", "--suite", "holdout@1", "--key", "evaluator",
            "--", sys.executable, "-c", EVALUATE_ALL)
    expect(r, 0)
    assert "WARNING" not in r.stderr
    assert evaluation(home, r.stdout.strip())["suiteEpisodes"] == 4


def test_a_suite_whose_creation_was_refused_is_said_to_be_maybe_refused(
        runner: CliRunner, home: Path) -> None:  # noqa: F811
    """`eval --suite NAME@V` on a name nothing holds: with a recorded batch in no dataset (what
    a refused `dataset create` leaves), that refusal is named as a cause, with the way to read
    why; with none, the line is as it was."""
    from trajledger.verify.errors import PolicyError

    r = run(runner, home, "eval", "bc@1", "--suite", "copied@1", "--key", "evaluator",
            *COMMAND)
    expect(r, 3)
    assert r.stderr == "FAIL: copied@1: no dataset has this name; see 'trajledger log show'\n"
    with pytest.raises(PolicyError, match="exactly duplicate episodes"):
        train_copy(home, seal=False)  # refused: nothing recorded of copied@1, its batch kept
    r = run(runner, home, "eval", "bc@1", "--suite", "copied@1", "--key", "evaluator",
            *COMMAND)
    expect(r, 3)
    assert r.stderr.startswith(
        "FAIL: copied@1: no dataset has this name; see 'trajledger log show'; 1 recorded "
        "batch(es) are in no dataset (first: sha256:"), r.stderr
    assert r.stderr.endswith("…): a 'dataset create' of them that was refused (a holdout of a "
                             "train set's episodes, say) recorded nothing: run it again to read "
                             "why\n"), r.stderr


EVALUATE_ALL = """
import json, os, pathlib
import pyarrow.parquet as pq
suite = pathlib.Path(os.environ["TRAJLEDGER_SUITE_DIR"])
eps = []
for b in json.loads((suite / "manifest.json").read_text())["batches"]:
    ids = pq.read_table(suite / b["directory"] / "episodes.parquet").column("episode_id")
    eps += [{"batch": b["digest"], "episode_id": e, "passed": True} for e in ids.to_pylist()]
out = pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"]) / "results.json"
out.write_text(json.dumps({"format": "trajledger.eval-results/1", "episodes": eps}))
"""


def log_entries(runner: CliRunner, home: Path) -> list[dict[str, Any]]:  # noqa: F811
    r = run(runner, home, "log", "show", "--json")
    expect(r, 0)
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_training_data_erased_since_is_said_not_compared(
        runner: CliRunner, home: Path) -> None:  # noqa: F811
    """train@1's batch erased by an approver after bc@1 was trained on it: `eval` cannot
    compare the suite with it, says so, and the evaluation records it (unchecked 1)."""
    expect(run(runner, home, "erase", "train-batch", "--key", "approver", "--reason",
               "consent"), 0)
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            "--", sys.executable, "-c", EVALUATE_ALL)
    expect(r, 0)
    assert ("WARNING: evaluation of bc@1 on regression@1: not compared with bc@1's training "
            "data: train batch sha256:") in r.stderr, r.stderr
    checked = evaluation(home, r.stdout.strip())
    assert checked["unchecked"] == 1 and checked["trainEpisodes"] == 0, r.stderr


def test_a_threshold_no_one_wrote_fails_the_suites_check_closed() -> None:
    """The lead's reading of evalc46's Left: a recorded policy whose ``[contamination]``
    threshold is a string no one wrote (left34: ``"0.9_9"``) fails every `dataset create`;
    `eval`'s check of the suite ran at the default thresholds instead. It fails closed too,
    naming the threshold, before anything is read."""
    from types import SimpleNamespace

    from trajledger.runner.suite_contamination import check_suite
    from trajledger.verify.contamination_rules import ContaminationRules
    from trajledger.verify.errors import VerificationError

    rules = ContaminationRules(unreadable="numeric_threshold '0.9_9' is not a JSON number")
    policy: Any = SimpleNamespace(contamination=rules)
    ck: Any = SimpleNamespace(ref="bc@1", digest="sha256:" + "0" * 64)
    suite: Any = SimpleNamespace(ref="holdout@1")
    with pytest.raises(VerificationError, match=r"^evaluation of bc@1 on holdout@1: the "
                       r"policy's contamination: numeric_threshold '0.9_9' is not a JSON number, "
                       "so no dataset passes its check"):
        check_suite(policy, None, policy, ck, suite, "holdout holdout@1", [], None)
