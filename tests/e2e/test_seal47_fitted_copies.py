"""A sealed holdout's episodes copied into a train set with their rewards rescaled or their
actions re-encoded (seal47; seal46's finding 3): the sealed record publishes each episode's
sketch, which is linear and separable by its slots, and `dataset create --split train` reads
the train steps (plain), so it fits the published sketch in the span of each train episode's
parts (`contamination_matcher.tangents`): such a copy is an exact duplicate, refused; an
honest unrelated train set is recorded. docs/SECURITY.md, "Review of 2026-12-07,
thirty-second round (seal47)"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner
from test_evaluations import evals_template, home  # noqa: F401
from test_runner_cli import expect, run

from trajledger import Ledger


def _mapped(col: pa.ChunkedArray | pa.Array, f: object) -> pa.Array:
    """``col`` (a list column of numbers) with ``f`` applied to its values, its type kept."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    values = np.asarray(arr.flatten().to_numpy(zero_copy_only=False))
    new = pa.array(f(values).astype(values.dtype))  # type: ignore[operator]
    if pa.types.is_fixed_size_list(arr.type):
        return pa.FixedSizeListArray.from_arrays(new, arr.type.list_size)
    return pa.ListArray.from_arrays(arr.offsets, new)


def copy_re_encoded(home: Path, how: str, seed: int = 2000) -> tuple[str, int]:  # noqa: F811
    """A train batch of the sealed suite's episodes (the fixture's seeds played again; another
    ``seed``: unrelated ones) with other ids and ``how`` re-encoded, and how many of them have
    16 steps or more (the sketch is compared from there)."""
    from trajledger.runner.rollouts import run_policy

    ledger = Ledger.open(home)
    steps = run_policy(None, "CartPole-v1", 4, seed, policy_version="random").steps
    names = steps.column_names
    if how == "rewards":
        r = steps.column("reward").combine_chunks().to_numpy(zero_copy_only=False)
        steps = steps.set_column(names.index("reward"), "reward",
                                 pa.array(2 * r + 1, steps.schema.field("reward").type))
    elif how == "actions":
        steps = steps.set_column(names.index("action"), "action",
                                 _mapped(steps.column("action"), lambda a: 1 - a))
    ids = steps.column("episode_id").to_pylist()
    steps = steps.set_column(names.index("episode_id"), "episode_id",
                             pa.array([f"copy-{e}" for e in ids]))
    copy = ledger.record_batch(steps, env="cartpole@1", policy="random", key="vendor",
                               name=f"suite-{how}")
    return copy.digest, sum(1 for e in set(ids) if ids.count(e) >= 16)


@pytest.mark.parametrize("how", ["rewards", "actions"])
def test_a_copy_re_encoded_is_refused(runner: CliRunner, home: Path, how: str) -> None:  # noqa: F811
    """Rewards ``2 r + 1`` or actions ``1 - a``: before seal47 no word at all (the sketch's
    cosine 0.94 / 0.77, below the near threshold)."""
    copy, long = copy_re_encoded(home, how)
    assert long >= 1
    r = run(runner, home, "dataset", "create", "stolen", "--version", "1", "--split", "train",
            "--batch", copy, "--key", "vendor")
    expect(r, 1)
    assert f"{long} episode(s) exactly duplicate episodes of the other split" in r.stderr
    assert r.stderr.count("is a copy of train episode copy-") == min(long, 10), r.stderr
    assert "with its actions and rewards each re-encoded affinely (fitted to " in r.stderr
    assert "nothing" not in r.stdout


def test_an_unrelated_train_set_is_recorded(runner: CliRunner, home: Path) -> None:  # noqa: F811
    copy, _ = copy_re_encoded(home, "rewards", seed=4321)
    r = run(runner, home, "dataset", "create", "honest", "--version", "1", "--split", "train",
            "--batch", copy, "--key", "vendor")
    expect(r, 0)
    assert "copy of train episode" not in r.stderr and "sealed" not in r.stderr, r.stderr
