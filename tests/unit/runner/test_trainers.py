"""The trainer plug-in interface and the built-in ``bc`` trainer, on synthetic data."""

from __future__ import annotations

import importlib.metadata
import io
import json
import subprocess
import sys
import types
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pytest

from trajledger.runner.trainers import (
    ENTRY_POINT_GROUP,
    PolicyMismatchError,
    TrainerConfigError,
    TrainerPluginError,
    TrainingData,
    TrainingDataError,
    TrainResult,
    UnknownTrainerError,
    available_trainers,
    load_policy,
    load_trainer,
)
from trajledger.runner.trainers.bc import BCPolicy, BCTrainer, effective_config
from trajledger.verify.errors import FormatError

F32 = npt.NDArray[np.float32]
VEC = pa.list_(pa.float32())


def make_data(
    obs: F32,
    actions: F32,
    episode_len: int,
    returns: list[float] | None = None,
    invalid: list[bool] | None = None,
) -> TrainingData:
    """Steps cut into episodes of ``episode_len``; returns default to the episode index."""
    n_ep = len(obs) // episode_len
    ids = [f"ep{i}" for i in range(n_ep) for _ in range(episode_len)]
    steps = pa.table(
        {
            "episode_id": ids,
            "obs": pa.array(list(obs), VEC),
            "action": pa.array(list(actions.reshape(len(obs), -1)), VEC),
        }
    )
    cols: dict[str, Any] = {
        "episode_id": [f"ep{i}" for i in range(n_ep)],
        "return": returns if returns is not None else [float(i) for i in range(n_ep)],
    }
    if invalid is not None:
        cols["invalid"] = invalid
    return TrainingData(steps=steps, episodes=pa.table(cols))


def separable(n: int = 1200, seed: int = 0) -> tuple[F32, F32]:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    labels = (obs[:, 0] - 0.7 * obs[:, 2] > 0).astype(np.float32)
    return obs, labels


def linear(n: int = 1200, seed: int = 0) -> tuple[F32, F32, npt.NDArray[np.float64]]:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    weights = np.array([[1.0, -2.0], [0.5, 0.0], [-1.5, 3.0]])
    return obs, (obs @ weights + np.array([0.25, -1.0])).astype(np.float32), weights


def header(result: TrainResult) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(result.files["trainer.json"])
    return out


# --- fitting -------------------------------------------------------------------------------------


def test_discrete_separable_data_is_fitted() -> None:
    obs, labels = separable()
    result = BCTrainer().train(make_data(obs, labels, 20), {"top_fraction": 1.0}, seed=0)
    assert result.metrics["accuracy"] >= 0.97
    assert header(result)["action_kind"] == "discrete"
    assert header(result)["num_actions"] == 2
    policy = load_policy(result.files)
    test_obs, test_labels = separable(300, seed=1)
    predicted = np.array([policy.act(o) for o in test_obs])
    assert all(isinstance(policy.act(o), int) for o in test_obs[:5])
    assert (predicted == test_labels).mean() >= 0.95


def test_continuous_linear_target_is_recovered() -> None:
    obs, actions, weights = linear()
    result = BCTrainer().train(
        make_data(obs, actions, 20),
        {"top_fraction": 1.0, "hidden": 0, "lr": 1e-2, "epochs": 100, "l2": 0.0},
        seed=0,
    )
    assert result.metrics["mse"] < 1e-4
    assert header(result)["action_kind"] == "continuous"
    assert header(result)["action_dim"] == 2
    policy = load_policy(result.files)
    probe = np.array([0.3, -1.0, 2.0], dtype=np.float32)
    action = policy.act(probe)
    assert isinstance(action, np.ndarray) and action.dtype == np.float32
    np.testing.assert_allclose(action, probe @ weights + [0.25, -1.0], atol=0.02)


def test_continuous_nonlinear_target_with_mlp() -> None:
    rng = np.random.default_rng(3)
    obs = rng.uniform(-2, 2, size=(1500, 2)).astype(np.float32)
    actions = np.sin(obs[:, :1] * 1.5).astype(np.float32)
    data = make_data(obs, actions, 15)
    mlp = BCTrainer().train(data, {"top_fraction": 1.0, "hidden": 32, "lr": 1e-2, "epochs": 80}, 0)
    lin = BCTrainer().train(data, {"top_fraction": 1.0, "hidden": 0, "lr": 1e-2, "epochs": 80}, 0)
    assert mlp.metrics["mse"] < 0.01 < lin.metrics["mse"]


def test_top_fraction_keeps_the_best_episodes_only() -> None:
    # Good episodes (return 10) always push 1, bad ones (return 0) always push 0.
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(400, 2)).astype(np.float32)
    good = [i % 4 == 0 for i in range(40)]
    actions = np.array([1.0 if good[i // 10] else 0.0 for i in range(400)], np.float32)
    returns = [10.0 if g else 0.0 for g in good]
    result = BCTrainer().train(
        make_data(obs, actions, 10, returns), {"top_fraction": 0.25, "num_actions": 2}, 0
    )
    m = result.metrics
    assert (m["episodes_total"], m["episodes_kept"], m["steps_used"]) == (40, 10, 100)
    assert (m["return_threshold"], m["mean_return_kept"], m["mean_return_all"]) == (10, 10, 2.5)
    policy = load_policy(result.files)
    assert {policy.act(o) for o in obs} == {1}


def test_ties_at_the_threshold_are_all_kept() -> None:
    obs, labels = separable(100)
    result = BCTrainer().train(make_data(obs, labels, 10, [5.0] * 10), {"top_fraction": 0.1}, 0)
    assert result.metrics["episodes_kept"] == 10


def test_invalid_episodes_and_rows_without_action_are_skipped() -> None:
    obs, labels = separable(100)
    data = make_data(obs, labels, 10, invalid=[i == 9 for i in range(10)])
    steps = data.steps.set_column(2, "action", pa.array([None, *list(labels[1:, None])], VEC))
    result = BCTrainer().train(TrainingData(steps, data.episodes), {"top_fraction": 1.0}, 0)
    assert result.metrics["episodes_total"] == 9
    assert result.metrics["steps_used"] == 89


def test_action_kind_override() -> None:
    obs, labels = separable(200)
    data = make_data(obs, labels, 10)
    assert header(BCTrainer().train(data, {"action_kind": "continuous"}, 0))["action_kind"] == (
        "continuous"
    )
    _, actions, _ = linear(200)
    with pytest.raises(TrainingDataError, match="action_kind is discrete, but actions"):
        BCTrainer().train(make_data(obs, actions, 10), {"action_kind": "discrete"}, 0)


def test_num_actions_widens_the_classifier_and_is_checked() -> None:
    obs, labels = separable(200)
    result = BCTrainer().train(make_data(obs, labels, 10), {"num_actions": 5}, 0)
    assert header(result)["num_actions"] == 5
    with pytest.raises(TrainingDataError, match=r"action 1 in the data, want < num_actions 1"):
        BCTrainer().train(make_data(obs, labels, 10), {"num_actions": 1}, 0)


# --- determinism and checkpoints ---------------------------------------------------------------


def test_same_seed_gives_identical_bytes_and_other_seed_differs() -> None:
    obs, labels = separable(300)
    data = make_data(obs, labels, 10)
    a = BCTrainer().train(data, {"epochs": 5}, seed=7)
    b = BCTrainer().train(data, {"epochs": 5}, seed=7)
    c = BCTrainer().train(data, {"epochs": 5}, seed=8)
    assert a.files == b.files and a.metrics == b.metrics
    assert a.files["policy.npz"] != c.files["policy.npz"]
    assert sorted(a.files) == ["policy.npz", "trainer.json"]


def test_checkpoint_contents_and_effective_config() -> None:
    obs, labels = separable(200)
    result = BCTrainer().train(make_data(obs, labels, 10), {"hidden": 8, "epochs": 2}, 0)
    assert result.config == {**effective_config({}), "hidden": 8, "epochs": 2}
    h = header(result)
    assert (h["trainer"], h["trainer_version"], h["obs_dim"], h["hidden"]) == ("bc", "1", 4, 8)
    assert h["config"] == result.config and len(h["obs_mean"]) == len(h["obs_std"]) == 4
    with np.load(io.BytesIO(result.files["policy.npz"]), allow_pickle=False) as npz:
        assert {k: npz[k].shape for k in npz.files} == {
            "w0": (4, 8),
            "b0": (8,),
            "w1": (8, 2),
            "b1": (2,),
        }
    with zipfile.ZipFile(io.BytesIO(result.files["policy.npz"])) as zf:
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}


def test_policy_matches_training_predictions_after_round_trip() -> None:
    obs, labels = separable(300)
    result = BCTrainer().train(make_data(obs, labels, 10), {"top_fraction": 1.0}, 0)
    policy = load_policy(result.files)
    accuracy = np.mean([policy.act(o) == y for o, y in zip(obs, labels, strict=True)])
    assert accuracy == pytest.approx(result.metrics["accuracy"])


def test_policy_refuses_wrong_observation_size() -> None:
    obs, labels = separable(100)
    policy = load_policy(BCTrainer().train(make_data(obs, labels, 10), {"epochs": 1}, 0).files)
    with pytest.raises(PolicyMismatchError, match="observation has 3 elements, want 4"):
        policy.act(np.zeros(3, np.float32))


def _npz(arrays: Mapping[str, Any]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


@pytest.fixture
def checkpoint() -> dict[str, bytes]:
    obs, labels = separable(100)
    return BCTrainer().train(make_data(obs, labels, 10), {"epochs": 1, "hidden": 4}, 0).files


def test_load_policy_needs_a_header(checkpoint: dict[str, bytes]) -> None:
    with pytest.raises(FormatError, match=r"checkpoint has no trainer.json \(files: policy.npz\)"):
        load_policy({"policy.npz": checkpoint["policy.npz"]})


def test_load_policy_refuses_unknown_trainer_and_duplicate_keys() -> None:
    with pytest.raises(FormatError, match="trainer 'torch-ppo' has no built-in policy loader"):
        load_policy({"trainer.json": b'{"trainer": "torch-ppo"}'})
    with pytest.raises(FormatError, match="duplicate JSON key 'trainer'"):
        load_policy({"trainer.json": b'{"trainer": "bc", "trainer": "x"}'})


def test_load_policy_refuses_pickled_arrays(checkpoint: dict[str, bytes]) -> None:
    evil = dict(checkpoint)
    arrays = {"w0": np.array([{"pickled": 1}], dtype=object), "b0": np.zeros(4)}
    arrays |= {"w1": np.zeros((4, 2)), "b1": np.zeros(2)}
    evil["policy.npz"] = _npz(arrays)
    with pytest.raises(FormatError, match=r"policy\.npz: not a readable \.npz: .*pickle"):
        load_policy(evil)


def test_load_policy_checks_shapes_against_header(checkpoint: dict[str, bytes]) -> None:
    bad = dict(checkpoint)
    arrays = {"w0": np.zeros((5, 4)), "b0": np.zeros(4), "w1": np.zeros((4, 2)), "b1": np.zeros(2)}
    bad["policy.npz"] = _npz(arrays)
    with pytest.raises(FormatError, match=r"layer 0 has weights \(5, 4\) .* want \(4, n\)"):
        load_policy(bad)
    bad["policy.npz"] = _npz({"w0": np.zeros((4, 2)), "b0": np.zeros(2)})
    with pytest.raises(
        FormatError, match=r"arrays \['b0', 'w0'\], want \['b0', 'b1', 'w0', 'w1'\]"
    ):
        load_policy(bad)
    bad["policy.npz"] = b"not a zip"
    with pytest.raises(FormatError, match=r"not a readable \.npz"):
        load_policy(bad)


def test_bc_policy_validates_in_init() -> None:
    with pytest.raises(FormatError, match="continuous actions need action_mean/std"):
        BCPolicy("continuous", [np.zeros((2, 1)), np.zeros(1)], np.zeros(2), np.ones(2))


# --- configuration and data errors ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"epoch": 3}, "bc config has unknown keys epoch; known: top_fraction"),
        ({"epochs": True}, "bc config 'epochs' = True, want an integer"),
        ({"hidden": 2.5}, "bc config 'hidden' = 2.5, want an integer"),
        ({"top_fraction": 0}, r"bc config 'top_fraction' = 0, want in \(0.0, 1.0\]"),
        ({"lr": float("nan")}, "bc config 'lr' = nan, want a finite number"),
        ({"action_kind": "mixed"}, "'action_kind' = 'mixed', want auto, discrete or continuous"),
    ],
)
def test_bad_config_is_refused(config: dict[str, Any], message: str) -> None:
    obs, labels = separable(20)
    with pytest.raises(TrainerConfigError, match=message):
        BCTrainer().train(make_data(obs, labels, 10), config, 0)


def test_negative_seed_is_refused() -> None:
    obs, labels = separable(20)
    with pytest.raises(TrainerConfigError, match="bc seed = -1, want a non-negative integer"):
        BCTrainer().train(make_data(obs, labels, 10), {}, -1)


def test_unusable_data_is_refused() -> None:
    obs, labels = separable(40)
    data = make_data(obs, labels, 10)
    with pytest.raises(TrainingDataError, match="step table has no column obs"):
        BCTrainer().train(TrainingData(data.steps.drop_columns(["obs"]), data.episodes), {}, 0)
    with pytest.raises(TrainingDataError, match=r"10 steps belong to episodes missing .*'ep3'"):
        BCTrainer().train(TrainingData(data.steps, data.episodes.slice(0, 3)), {}, 0)
    ragged = data.steps.set_column(1, "obs", pa.array([[1.0]] + [[0.0, 1.0]] * 39, VEC))
    with pytest.raises(TrainingDataError, match=r"obs vectors have lengths \[1, 2\]"):
        BCTrainer().train(TrainingData(ragged, data.episodes), {}, 0)
    nan = data.steps.set_column(1, "obs", pa.array([[float("nan")]] * 40, VEC))
    with pytest.raises(TrainingDataError, match="obs has NaN, infinite or null elements"):
        BCTrainer().train(TrainingData(nan, data.episodes), {}, 0)
    twice = pa.concat_tables(
        [data.episodes, data.episodes.slice(0, 1).set_column(1, "return", pa.array([9.0]))]
    )
    with pytest.raises(TrainingDataError, match=r"episode 'ep0' has two returns, 0.0 and 9.0"):
        BCTrainer().train(TrainingData(data.steps, twice), {}, 0)
    no_actions = data.steps.set_column(2, "action", pa.nulls(40, VEC))
    with pytest.raises(TrainingDataError, match="none of 40 steps has an obs and an action"):
        BCTrainer().train(TrainingData(no_actions, data.episodes), {}, 0)


def test_an_episode_recorded_twice_counts_once() -> None:
    obs, labels = separable(40)
    data = make_data(obs, labels, 10)
    both = TrainingData(data.steps, pa.concat_tables([data.episodes, data.episodes]))
    assert BCTrainer().train(both, {}, 0).metrics["episodes_total"] == 4


# --- discovery ------------------------------------------------------------------------------------


def test_builtin_is_found() -> None:
    trainer = load_trainer("bc")
    assert isinstance(trainer, BCTrainer) and trainer.name == "bc"
    assert "bc" in available_trainers()


def test_unknown_trainer_lists_the_available_ones() -> None:
    with pytest.raises(
        UnknownTrainerError, match=r"trainer 'ppo' is not installed; available: bc"
    ) as e:
        load_trainer("ppo")
    assert isinstance(e.value, ValueError) and e.value.available == available_trainers()


class FakeTrainer:
    name = "fake"

    def train(self, data: TrainingData, config: Mapping[str, Any], seed: int) -> TrainResult:
        return TrainResult(files={"w.bin": bytes([seed])}, metrics={"rows": float(len(data.steps))})


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch) -> list[importlib.metadata.EntryPoint]:
    """Entry points as installed distributions would declare them, over a fake module."""
    module = types.ModuleType("fake_trainer_plugin")
    module.FakeTrainer = FakeTrainer  # type: ignore[attr-defined]
    module.instance = FakeTrainer()  # type: ignore[attr-defined]
    module.not_a_trainer = object()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_trainer_plugin", module)
    eps: list[importlib.metadata.EntryPoint] = []

    def fake_entry_points(**selection: str) -> importlib.metadata.EntryPoints:
        assert selection == {"group": ENTRY_POINT_GROUP}
        return importlib.metadata.EntryPoints(eps)

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    return eps


def ep(name: str, value: str) -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


def test_entry_point_class_is_discovered(plugins: list[importlib.metadata.EntryPoint]) -> None:
    plugins.append(ep("fake", "fake_trainer_plugin:FakeTrainer"))
    assert available_trainers() == ["bc", "fake"]
    trainer = load_trainer("fake")
    assert isinstance(trainer, FakeTrainer)
    obs, labels = separable(20)
    assert trainer.train(make_data(obs, labels, 10), {}, 3).files == {"w.bin": b"\x03"}


def test_entry_point_instance_is_discovered(plugins: list[importlib.metadata.EntryPoint]) -> None:
    plugins.append(ep("fake", "fake_trainer_plugin:instance"))
    assert load_trainer("fake") is sys.modules["fake_trainer_plugin"].instance


def test_plugin_cannot_replace_a_builtin(plugins: list[importlib.metadata.EntryPoint]) -> None:
    plugins.append(ep("bc", "fake_trainer_plugin:FakeTrainer"))
    assert isinstance(load_trainer("bc"), BCTrainer)
    assert available_trainers() == ["bc"]


def test_broken_plugins_are_reported(plugins: list[importlib.metadata.EntryPoint]) -> None:
    plugins += [
        ep("gone", "no_such_module_xyz:Trainer"),
        ep("odd", "fake_trainer_plugin:not_a_trainer"),
        ep("alias", "fake_trainer_plugin:FakeTrainer"),
    ]
    with pytest.raises(
        TrainerPluginError, match=r"trainer 'gone' \(no_such_module_xyz:Trainer\) cannot be loaded"
    ):
        load_trainer("gone")
    with pytest.raises(
        TrainerPluginError, match=r"trainer 'odd' .* is of type 'object', want a trainer class"
    ):
        load_trainer("odd")
    with pytest.raises(
        TrainerPluginError, match=r"trainer 'alias' .* calls itself 'fake', want 'alias'"
    ):
        load_trainer("alias")


def test_one_name_from_two_distributions_is_refused(
    plugins: list[importlib.metadata.EntryPoint],
) -> None:
    plugins += [ep("fake", "fake_trainer_plugin:FakeTrainer"), ep("fake", "other:Trainer")]
    with pytest.raises(TrainerPluginError, match="trainer 'fake' is registered twice"):
        load_trainer("fake")
    plugins[1] = ep("fake", "fake_trainer_plugin:FakeTrainer")  # the same one seen twice is fine
    assert isinstance(load_trainer("fake"), FakeTrainer)


def test_interface_modules_import_no_heavy_packages() -> None:
    code = (
        "import sys, trajledger.runner.trainers, trajledger.runner.rollouts; "
        "print(sorted(m for m in ('numpy', 'pyarrow', 'gymnasium') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_bc_checks_its_config_without_data() -> None:
    from trajledger.runner.trainers import load_trainer
    from trajledger.runner.trainers.bc import DEFAULTS

    trainer = load_trainer("bc")
    assert trainer.check_config({}) == DEFAULTS  # type: ignore[attr-defined]
    with pytest.raises(TrainerConfigError, match="epoch"):
        trainer.check_config({"epoch": 3})  # type: ignore[attr-defined]
