"""End to end: what TRL and Minari write goes in (``record``, ``env register --from-minari``) and
comes back out (``export --format minari|parquet|jsonl``), via CliRunner; refusals name the
problem, exit with the documented code and leave the ledger as it was.

The TRL file is written as TRL 1.16.0's ``GRPOTrainer.log`` writes it (pandas ``to_parquet``
of the completions table); the Minari dataset by minari 0.5.4's ``create_dataset_from_buffers``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import testkit
from click.testing import CliRunner, Result

from trajledger.runner.cli import main

minari = pytest.importorskip("minari")
pd = pytest.importorskip("pandas")

KEY = ("--key", "alice")


def run(runner: CliRunner, home: Path, *args: str | Path) -> Result:
    return runner.invoke(main, ["--ledger", str(home), *map(str, args)], prog_name="trajledger")


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def minari_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CartPole Minari dataset (hdf5), written by minari itself."""
    from minari.data_collector import EpisodeBuffer

    root = tmp_path_factory.mktemp("minari")
    env = gym.make("CartPole-v1")
    buffers = []
    for seed in (0, 1):
        obs, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        observations, actions, rewards, terms, truncs = [obs], [], [], [], []
        done = False
        while not done:
            a = env.action_space.sample()
            obs, r, te, tr, _ = env.step(a)
            observations.append(obs)
            actions.append(a)
            rewards.append(r)
            terms.append(te)
            truncs.append(tr)
            done = te or tr
        buffers.append(EpisodeBuffer(seed=seed, observations=np.stack(observations),
                                     actions=np.array(actions), rewards=rewards,
                                     terminations=terms, truncations=truncs))  # fmt: skip
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        ds = minari.create_dataset_from_buffers(
            "e2e/cartpole-v0", buffers, env="CartPole-v1", algorithm_name="random",
            author="tester", ref_min_score=0.0, ref_max_score=500.0,
        )  # fmt: skip
    return Path(ds.storage.data_path).parent


@pytest.fixture(scope="module")
def home_template(
    tmp_path_factory: pytest.TempPathFactory, minari_data: Path
) -> testkit.Template[None]:
    """A ledger with key alice (encrypted under the test passphrase), environments cart@1
    (from `minari_data`) and llm@1: built once per module (ci54: each test built it, an
    encrypted key and a Minari dataset read, 0.6 to 1.9 s of each test's set-up under load)."""

    def build(home: Path) -> None:
        runner = testkit.new_runner()
        with pytest.MonkeyPatch.context() as m:
            m.setenv("TRAJLEDGER_PASSPHRASE", testkit.TEST_PASSPHRASE)
            for args in (
                ["init", "--origin", "test/e2e"],
                ["key", "new", "alice"],
                ["env", "register", "cart", "--version", "1", "--from-minari", minari_data, *KEY],
                ["env", "register", "llm", "--version", "1", *KEY],
            ):
                ok(run(runner, home, *args))

    return testkit.build_template(tmp_path_factory.mktemp("rollout-io"), build)


@pytest.fixture
def home(home_template: testkit.Template[None], tmp_path: Path, passphrase: str) -> Path:
    """A copy of `home_template` for one test, known to its user (`testkit.copy_template`),
    the passphrase of its key set."""
    return testkit.copy_template(home_template, tmp_path / "home")


def predicate(runner: CliRunner, home: Path, ref: str) -> dict[str, Any]:
    r = run(runner, home, "show", ref, "--json")
    ok(r)
    return json.loads(r.stdout)["predicate"]  # type: ignore[no-any-return]


def test_env_register_from_minari_records_spaces(runner: CliRunner, home: Path) -> None:
    p = predicate(runner, home, "cart@1")
    assert p["observationSpace"]["type"] == "Box" and p["actionSpace"]["n"] == 2
    assert p["envSpec"]["id"] == "CartPole-v1"


def test_minari_in_and_out(
    runner: CliRunner, home: Path, minari_data: Path, tmp_path: Path
) -> None:
    batch = ok(run(runner, home, "record", minari_data, "--env", "cart@1", "--policy", "random",
                   *KEY))  # fmt: skip
    p = predicate(runner, home, batch)
    assert p["schemaVersion"] == "3" and p["source"]["formats"] == ["minari"]
    assert p["source"]["minari"]["dataset_id"] == "e2e/cartpole-v0"
    assert p["source"]["minari"]["ref_max_score"] == 500
    out = tmp_path / "export"
    assert ok(run(runner, home, "export", batch, "--format", "minari", "--out", out)) == batch
    back = minari.MinariDataset(out / "data")
    orig = minari.MinariDataset(minari_data / "data")
    for a, b in zip(back.iterate_episodes(), orig.iterate_episodes(), strict=True):
        assert np.array_equal(a.observations, b.observations)
        assert np.array_equal(a.actions, b.actions) and np.array_equal(a.rewards, b.rewards)
    again = ok(run(runner, home, "record", out, "--env", "cart@1", "--policy", "random", *KEY))
    assert again == batch  # the same files and metadata: recording again is a no-op
    arrow = tmp_path / "arrow"
    ok(run(runner, home, "export", batch, "--format", "minari", "--out", arrow,
           "--minari-backend", "arrow"))  # fmt: skip
    assert json.loads((arrow / "data" / "metadata.json").read_text())["data_format"] == "arrow"


def test_trl_completions_with_reward_weights(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    table = {
        "step": [5, 5],
        "prompt": ["2+2?", "3+3?"],
        "completion": ["4", "7"],
        "accuracy_reward": [1.0, 0.0],
        "format_reward": [1.0, float("nan")],
        "advantage": [0.5, -0.5],
    }
    path = tmp_path / "completions" / "completions_00005.parquet"
    path.parent.mkdir()
    pd.DataFrame(table).to_parquet(path)
    batch = ok(run(runner, home, "record", path, "--env", "llm@1", "--policy", "grpo-5",
                   "--reward-weights", "accuracy_reward=2,format_reward=0.5", *KEY))  # fmt: skip
    stats = predicate(runner, home, batch)["stats"]
    assert (stats["reward_sum"], stats["rewarded_episodes"]) == (2.5, 2)
    out = tmp_path / "plain"
    ok(run(runner, home, "export", batch, "--format", "parquet", "--out", out))
    eps = pd.read_parquet(out / "episodes.parquet")
    assert eps["return"].tolist() == [2.5, 0.0]
    r = run(runner, home, "record", path, "--env", "llm@1", "--policy", "p",
            "--reward-weights", "accuracy_reward=x", *KEY)  # fmt: skip
    assert r.exit_code == 2 and "want NAME=WEIGHT with a finite number" in r.stderr


def test_export_refusals(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    chat = tmp_path / "sft.jsonl"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    batch = ok(run(runner, home, "record", chat, "--env", "llm@1", "--policy", "p", *KEY))
    r = run(runner, home, "export", batch, "--format", "minari", "--out", tmp_path / "m")
    assert r.exit_code == 1 and "Minari needs a reward for every step" in r.stderr
    assert not (tmp_path / "m").exists()
    (tmp_path / "there").mkdir()
    r = run(runner, home, "export", batch, "--format", "jsonl", "--out", tmp_path / "there")
    assert r.exit_code == 3 and "exists; give a new directory" in r.stderr
    r = run(runner, home, "export", "llm@1", "--format", "parquet", "--out", tmp_path / "e")
    assert r.exit_code == 3 and "Traceback" not in r.output
    ok(run(runner, home, "export", batch, "--format", "jsonl", "--out", tmp_path / "j"))
    rows = [json.loads(x) for x in (tmp_path / "j" / "steps.jsonl").read_text().splitlines()]
    assert rows == [
        {
            "episode_id": "line-1",
            "step": 0,
            "is_first": True,
            "is_last": True,
            "terminated": True,
            "truncated": False,
            "role": "user",
            "content": "hi",
        }
    ]


def test_hdf5_file_named(runner: CliRunner, home: Path, minari_data: Path) -> None:
    h5 = minari_data / "data" / "main_data.hdf5"
    r = run(runner, home, "record", h5, "--env", "cart@1", "--policy", "p", *KEY)
    assert r.exit_code == 1
    assert r.stderr == (
        f"FAIL: {h5}: 1 problem (rollout schema v3)\n"
        "FAIL:   this looks like HDF5; for Minari datasets give the dataset directory (the one "
        "holding metadata.json, or its parent)\n"
    )


def test_a_010_batch_stays_readable_and_exports(runner: CliRunner, tmp_path: Path) -> None:
    """Batches recorded under rollout schema 1 validate as v1 and export as plain files; Minari
    needs final observations, which v1 did not keep: refused with that reason."""
    import shutil

    import pyarrow.parquet as pq

    from trajledger.ledger.rollouts import validate_episodes, validate_steps

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "compat-0.1.0" / "ledger"
    home = tmp_path / "ledger"
    shutil.copytree(fixtures, home)
    batch = "sha256:d1e813861584cc7a24221a0509b0642849dd10ca83df9d180636ecab8a95efe1"
    out = tmp_path / "plain"
    assert ok(run(runner, home, "export", batch, "--format", "parquet", "--out", out)) == batch
    steps, eps = pq.read_table(out / "steps.parquet"), pq.read_table(out / "episodes.parquet")
    assert steps.schema.metadata[b"trajledger.rollout.schema"] == b"steps/1"
    assert validate_steps(steps).ok and "info" not in steps.column_names
    assert eps["return"].null_count == 0
    r = run(runner, home, "export", batch, "--format", "minari", "--out", tmp_path / "m")
    assert r.exit_code == 1 and "no final observations (rollout schema 1)" in r.stderr
    stored = [pq.read_table(p) for p in home.rglob("*") if p.is_file() and p.read_bytes()[:4]
              == b"PAR1"]  # fmt: skip
    assert stored and all(
        validate_steps(t).ok if "step" in t.column_names else validate_episodes(t).ok
        for t in stored
    )


def test_manifest_and_stats_agree_on_success(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    """One definition (issue 12): episodes cut by length or error count, as non-successes."""
    reasons = ["success", "failure", "length", "length", "error", "success", "success"]
    lines = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant",
              "content": "a"}], "reward": 1.0, "termination_reason": r}
             for i, r in enumerate(reasons)]  # fmt: skip
    src = tmp_path / "chat.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    batch = ok(run(runner, home, "record", src, "--env", "llm@1", "--policy", "p", *KEY))
    manifest = predicate(runner, home, batch)["stats"]["success_rate"]
    r = run(runner, home, "stats", batch, "--json")
    ok(r)
    report = json.loads(r.stdout)
    assert manifest == report["aggregate"]["success_rate"] == 3 / 7


@pytest.mark.parametrize("weight", ["inf", "-inf", "nan", "1e400"])
def test_reward_weights_must_be_finite(
    runner: CliRunner, home: Path, tmp_path: Path, weight: str
) -> None:
    """``float`` takes inf and nan: a weight must be a finite number (an infinite one made
    every reward infinite or NaN, or the weighted sum raise)."""
    chat = tmp_path / "c.jsonl"
    chat.write_text(json.dumps({"prompt": "p", "completion": "c", "step": 1, "a": 1}) + "\n")
    r = run(runner, home, "record", chat, "--env", "llm@1", "--policy", "p",
            "--reward-weights", f"a={weight}", *KEY)  # fmt: skip
    assert r.exit_code == 2 and "want NAME=WEIGHT with a finite number" in r.stderr


def test_minari_export_refuses_a_batch_verify_refuses(
    runner: CliRunner, home: Path, minari_data: Path, tmp_path: Path
) -> None:
    """Review redo20, finding 1: a batch whose producer's key the policy declares compromised
    left as a Minari dataset (exit 0); now the export refuses it as ``verify`` does."""
    from trajledger import Ledger

    batch = ok(run(runner, home, "record", minari_data, "--env", "cart@1", "--policy", "random",
                   *KEY))  # fmt: skip
    ledger = Ledger.open(home)
    alice = ledger.keys.signer("alice").keyid
    policy = tmp_path / "policy.toml"
    ok(run(runner, home, "key", "new", "bob"))
    (tmp_path / "bob.pub").write_bytes((home / "keys" / "bob.pub").read_bytes())
    policy.write_text(f'[roles.producer]\nkeys = ["bob.pub"]\n[roles.log]\nvkeys = '
                      f'["{ledger.log.vkey}"]\n[[revoked_keys]]\nkey = "{alice}"\n'
                      'compromised_since = 0\nreason = "leaked"\n')
    verified = run(runner, home, "verify", batch, "--policy", policy)
    assert verified.exit_code == 1 and "compromised since log index 0: leaked" in verified.stderr
    out = tmp_path / "export"
    r = run(runner, home, "export", batch, "--format", "minari", "--out", out, "--policy", policy)
    assert r.exit_code == 1, r.output
    assert r.stderr == verified.stderr and not out.exists()
