"""End to end: ``record`` of a file checks the steps against the spaces of the environment it
names (docs/SECURITY.md, twenty-fourth round, spaces39; out38 finding 1).

Each refusal: exit 1, one line naming the first step that does not fit, nothing recorded (the
ledger's files as they were). An environment registered without spaces has nothing to check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import testkit
from click.testing import CliRunner, Result

from trajledger.runner.cli import main

KEY = ("--key", "alice")
BOX4 = "a Box of shape [4] (float32)"


@pytest.fixture
def home(alice_home: Path) -> Path:
    """A ledger with key alice and cart@1 (CartPole-v1: a Box of shape [4], Discrete(2))."""
    return alice_home


def run(runner: CliRunner, home: Path, *args: str | Path) -> Result:
    return runner.invoke(main, ["--ledger", str(home), *map(str, args)], prog_name="trajledger")


def cartpole_steps(path: Path, obs: list[list[float]] | None = None) -> Path:
    """Two episodes of CartPole steps (4 observation values, actions 0 and 1)."""
    obs = obs or [[0.01 * s, 0.0, -0.01 * s, 0.5] for s in range(6)]
    pq.write_table(pa.table({
        "episode_id": ["a"] * 3 + ["b"] * 3, "step": [0, 1, 2] * 2,
        "obs": pa.array(obs, pa.list_(pa.float32())), "action": [0, 1, 0, 1, 1, 0],
        "reward": [1.0] * 6, "terminated": [False, False, True] * 2, "truncated": [False] * 6,
    }), path)  # fmt: skip
    return path


def refused(runner: CliRunner, home: Path, args: list[Any], line: str) -> None:
    before = testkit.snapshot(home)
    r = run(runner, home, "record", *args, "--policy", "p0", *KEY)
    assert (r.exit_code, r.stderr, r.stdout) == (1, f"FAIL: {line}\n", ""), r.output
    assert testkit.snapshot(home) == before


def test_cartpole_steps_are_not_signed_as_mountain_car_rollouts(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    """out38's probe: before, ``record cartpole.parquet --env mc@1`` signed them, exit 0."""
    r = run(runner, home, "env", "register", "mc", "--version", "1", "--gym-id",
            "MountainCar-v0", *KEY)  # fmt: skip
    assert r.exit_code == 0, r.output
    steps = cartpole_steps(tmp_path / "cartpole.parquet")
    refused(runner, home, [steps, "--env", "mc@1"],
            'episode "a", step 0, obs: environment mc@1 declares a Box of shape [2] (float32), '
            "2 value(s), the step holds 4 value(s); nothing was recorded: record these rollouts "
            "under the environment they were played in (--env), or register one whose spaces "
            "they fit")  # fmt: skip
    r = run(runner, home, "record", steps, "--env", "cart@1", "--policy", "p0", *KEY)
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    ("value", "at", "field", "want", "got"),
    [
        (float("inf"), 2, "obs", BOX4, "values outside it, [ 0.,  0., inf,  0.]"),
        (9.0, 0, "obs", BOX4, "values outside it, [9., 0., 0., 0.]"),
    ],
    ids=["inf-at-a-finite-bound", "beyond-the-bound"],
)  # fmt: skip
def test_an_observation_outside_the_box_is_refused(
    runner: CliRunner, home: Path, tmp_path: Path, value: float, at: int, field: str, want: str,
    got: str,
) -> None:
    """An infinity where the bound is finite (CartPole's pole angle, 0.42) and 9.0 beyond the
    cart's position's 4.8 are out of the Box (as ``Box.contains``); an infinity where the bound
    is infinite is a value of the space. (NaN the rollout schema refuses before: "is nan, want
    a number".)"""
    obs = [[0.0] * 4 for _ in range(6)]
    obs[4][at] = value
    refused(runner, home, [cartpole_steps(tmp_path / "bad.parquet", obs), "--env", "cart@1"],
            f'episode "b", step 1, {field}: environment cart@1 declares {want}, the step holds '
            f"{got}; nothing was recorded: record these rollouts under the environment they "
            "were played in (--env), or register one whose spaces they fit")  # fmt: skip
    obs[4] = [0.0, float("inf"), 0.0, float("-inf")]
    path = cartpole_steps(tmp_path / "inf.parquet", obs)
    r = run(runner, home, "record", path, "--env", "cart@1", "--policy", "p0", *KEY)
    assert r.exit_code == 0, r.output


def test_an_action_out_of_the_discrete_range_is_refused_from_json_lines(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    """Rollout JSON lines go through the same check as Parquet (every reader does)."""
    lines = [{"episode_id": "a", "step": s, "obs": [0.0, 0.0, 0.0, 0.0], "action": [s],
              "reward": 1.0, "terminated": s == 2, "truncated": False} for s in range(3)]
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    refused(runner, home, [path, "--env", "cart@1"],
            'episode "a", step 2, action: environment cart@1 declares Discrete(2, start=0), the '
            "step holds values outside it, [2]; nothing was recorded: record these rollouts "
            "under the environment they were played in (--env), or register one whose spaces "
            "they fit")  # fmt: skip


def test_an_environment_without_spaces_checks_nothing(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    """Registered without --gym-id or --from-minari: no space to compare with; 3 values are
    recorded as given."""
    r = run(runner, home, "env", "register", "free", "--version", "1", *KEY)
    assert r.exit_code == 0, r.output
    path = cartpole_steps(tmp_path / "three.parquet", [[0.0, 1.0, 2.0]] * 6)
    r = run(runner, home, "record", path, "--env", "free@1", "--policy", "p0", *KEY)
    assert r.exit_code == 0, r.output


def test_a_final_observation_outside_the_space_is_refused(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    """rev37 (spaces39's Left): each episode's ``final_obs`` (an episode attribute file,
    ``record --episodes``) was signed unchecked against the observation space: 9.0 beyond
    CartPole's 4.8 bound, or 2 values where it declares 4, exit 0. A final observation that
    fits, and an episode without one, record as before."""
    steps = cartpole_steps(tmp_path / "cartpole.parquet")

    def episodes(b: list[float] | None) -> Path:
        path = tmp_path / "episodes.parquet"
        pq.write_table(pa.table({"episode_id": ["a", "b"], "final_obs": pa.array(
            [[0.0, 0.1, 0.0, 0.2], b], pa.list_(pa.float32()))}), path)
        return path

    refused(runner, home, [steps, "--env", "cart@1", "--episodes", episodes(
        [9.0, 0.0, 0.0, 0.0])], f'episode "b", final_obs: environment cart@1 declares {BOX4}, '
        "its final observation holds values outside it, [9., 0., 0., 0.]; nothing was "
        "recorded: record these rollouts under the environment they were played in (--env), "
        "or register one whose spaces they fit")
    refused(runner, home, [steps, "--env", "cart@1", "--episodes", episodes([0.0, 0.0])],
            f'episode "b", final_obs: environment cart@1 declares {BOX4}, 4 value(s), its '
            "final observation holds 2 value(s); nothing was recorded: record these rollouts "
            "under the environment they were played in (--env), or register one whose spaces "
            "they fit")
    for fits in ([0.0, 0.0, 0.0, 0.0], None):
        r = run(runner, home, "record", steps, "--env", "cart@1", "--episodes", episodes(fits),
                "--policy", "p0", "--name", f"fits{fits is None}", *KEY)
        assert r.exit_code == 0, r.output


def test_a_minari_dataset_that_is_not_there_is_operational(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    """out42 (the lead at its merge): ``env register --from-minari`` of a path that does not
    exist said ``1 problem (rollout schema v3) / not a Minari dataset``, exit 1 (refused data),
    where ``record`` of the same path says it is not there, exit 3; now as ``record`` does."""
    r = run(runner, home, "env", "register", "m", "--version", "1", "--from-minari",
            tmp_path / "nowhere", *KEY)
    assert r.exit_code == 3 and "nowhere: no such file or directory" in r.output, r.output
