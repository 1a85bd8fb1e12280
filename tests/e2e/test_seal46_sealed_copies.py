"""A sealed holdout's episodes copied into a train set, the holdout made first (seal46; the other
direction of out45's finding 6, tests/e2e/test_out45_reported.py): `dataset create --split
train` refuses the copy by the sketches the sealed record publishes, with the words a plain
holdout's copy gets, and so it does with the sealed batch's ciphertexts gone from the store (a
ledger that imported the suite without its data holds only what the record publishes).
docs/SECURITY.md, "Review of 2026-12-07, thirty-first round (seal46)"."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from test_evaluations import evals_template, home  # noqa: F401
from test_runner_cli import expect, run

from trajledger import Ledger


def copy_of_the_sealed_suite(home: Path) -> tuple[str, int]:  # noqa: F811
    """A train batch recorded from the same episodes (the
    fixture's seeds played again) with other ids and float64 observations (another exact
    fingerprint, the same sketch), and how many of them have 16 steps or more."""
    from trajledger.runner.rollouts import run_policy

    ledger = Ledger.open(home)
    held = run_policy(None, "CartPole-v1", 4, 2000, policy_version="random")  # as the fixture's
    steps = held.steps
    obs = steps.column("obs")
    wide = pa.list_(pa.float64(), obs.type.list_size) if pa.types.is_fixed_size_list(
        obs.type) else pa.list_(pa.float64())
    steps = steps.set_column(steps.column_names.index("obs"), "obs", obs.cast(wide))
    ids = steps.column("episode_id").to_pylist()
    steps = steps.set_column(steps.column_names.index("episode_id"), "episode_id",
                             pa.array([f"copy-{e}" for e in ids]))
    copy = ledger.record_batch(steps, env="cartpole@1", policy="random", key="vendor",
                               name="suite-copy")
    long = sum(1 for e in set(ids) if ids.count(e) >= 16)
    return copy.digest, long


def test_a_train_set_of_a_sealed_holdouts_episodes_is_refused(
        runner: CliRunner, home: Path) -> None:  # noqa: F811
    copy, long = copy_of_the_sealed_suite(home)
    assert long >= 1
    r = run(runner, home, "dataset", "create", "stolen", "--version", "1", "--split", "train",
            "--batch", copy, "--key", "vendor")
    expect(r, 1)
    assert f"{long} episode(s) exactly duplicate episodes of the other split" in r.stderr
    assert "(holdout holdout@1) is a copy of train episode copy-" in r.stderr
    assert "sealed, it is compared by the sketch its record publishes" in r.stderr


def test_it_is_refused_from_what_the_sealed_record_publishes_alone(
        runner: CliRunner, home: Path) -> None:  # noqa: F811
    """The sealed batch's ciphertexts deleted from the store: no bytes, the record only (an
    import without the data)."""
    from trajledger.verify.sealed_files import SEAL_MAGIC

    copy, long = copy_of_the_sealed_suite(home)
    gone = [p for p in (home / "objects").rglob("*") if p.is_file()
            and p.open("rb").read(len(SEAL_MAGIC)) == SEAL_MAGIC]
    assert gone  # the fixture's one sealed batch: its ciphertexts
    for p in gone:
        p.unlink()
    r = run(runner, home, "dataset", "create", "stolen", "--version", "1", "--split", "train",
            "--batch", copy, "--key", "vendor")
    expect(r, 1)
    assert f"{long} episode(s) exactly duplicate episodes of the other split" in r.stderr


@pytest.fixture
def near_runs(home: Path) -> Path:  # noqa: F811
    """``home`` under a successor policy saying ``[contamination] runs = "near"``."""
    policy = home / "policy.toml"
    text = policy.read_text()
    serial = next(int(line.split("=")[1]) for line in text.splitlines()
                  if line.startswith("serial"))
    text = text.replace(f"serial = {serial}", f"serial = {serial + 1}")
    policy.write_text(text + '\n[contamination]\nruns = "near"\n')
    Ledger.open(home).set_policy(policy, keys=["approver"])
    return home


def test_runs_near_warns_of_it_instead(runner: CliRunner, near_runs: Path) -> None:
    """Under ``runs = "near"`` (genuine episodes share runs) the equal sketch is near too, as a
    shared run is: a WARNING per episode, the set recorded."""
    copy, long = copy_of_the_sealed_suite(near_runs)
    r = run(runner, near_runs, "dataset", "create", "stolen", "--version", "1", "--split",
            "train", "--batch", copy, "--key", "vendor")
    expect(r, 0)
    assert r.stderr.count("is a near duplicate (similarity 1.0000)") == long, r.stderr
