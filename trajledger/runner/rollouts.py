"""Rollouts from a policy: run it in a Gymnasium environment and return rollout tables.

Scope: `run_policy` plays N seeded episodes of a Gymnasium environment with a `Policy` (or
uniform random actions) and returns them as a step table and an episode table in the layout of
``ledger.rollouts.schema`` (classic-RL columns filled, the LLM columns null), with the returns.
Non-scope: recording, signing and logging the batch (the ``trajledger rollout`` command), loading
the checkpoint (`runner.trainers.load_policy`), vectorised or parallel environments.
Spec: ``docs/trainers.md`` (section "Rollouts"), ``schemas/rollout.v3.md``. For full-fidelity
recording of any environment (dtypes, final observation, ``info``, spaces) wrap it in
``trajledger.integrations.gymnasium.LedgerRecorder``; this module records what the policy saw.

Layout: one row per transition: the observation the action was chosen on, the action actually
sent to the environment, the reward and flags that step returned. Observations are flattened
with ``gymnasium.spaces.flatten`` to float32 (a ``Discrete`` observation becomes one-hot), and the
policy acts on exactly that vector, so what is recorded is what a trainer learns from. Actions
are float32 lists: a discrete action ``a`` is ``[float(a)]``; a ``Box`` action is flattened after
clipping to the space's bounds. Episode ``i`` is reset with seed ``seed + i`` (random actions are
drawn from the action space seeded the same way), so an episode depends on its own seed only.

Imports gymnasium, numpy and pyarrow inside `run_policy`: the CLI's start-up does not pay for
them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trajledger.verify.errors import ProvenanceError

from .trainers import Policy, PolicyMismatchError

if TYPE_CHECKING:
    import gymnasium as gym
    import numpy.typing as npt
    import pyarrow as pa

__all__ = ["RolloutError", "RolloutResult", "episode_id", "run_policy"]


class RolloutError(ProvenanceError, ValueError):
    """A rollout cannot run: unknown environment, unsupported space, bad arguments."""


@dataclass(frozen=True)
class RolloutResult:
    """Episodes played by `run_policy`.

    Attributes:
        steps: the step table (``STEP_SCHEMA``), episodes in seed order.
        episodes: the episode table (``EPISODE_SCHEMA``): id, policy version, seed, return,
            number of steps, termination reason; ``env_version`` and ``task_id`` are left null
            for the recorder to fill.
        returns: the undiscounted return of each episode, in seed order.
        seeds: the reset seed of each episode.
    """

    steps: pa.Table
    episodes: pa.Table
    returns: tuple[float, ...]
    seeds: tuple[int, ...]

    @property
    def mean_return(self) -> float:
        """Mean of `returns`."""
        return sum(self.returns) / len(self.returns)


def episode_id(policy_version: str, env_id: str, seed: int) -> str:
    """The id `run_policy` gives an episode: ``<policy_version>/<env_id>/<seed>``.

    Args:
        policy_version: the policy's version (a checkpoint digest, or ``random``).
        env_id: the Gymnasium id.
        seed: the episode's reset seed.

    Returns:
        The id. Two episodes share it only if they are the same policy, env and seed.
    """
    return f"{policy_version}/{env_id}/{seed}"


def _env_action(raw: object, space: gym.Space[Any]) -> tuple[int | npt.NDArray[Any], list[float]]:
    """The action to send to the environment, and the float32 list to record."""
    import gymnasium as gym
    import numpy as np

    if isinstance(space, gym.spaces.Discrete):
        arr = np.asarray(raw)
        if arr.size != 1 or arr.dtype.kind not in "iuf" or not np.isfinite(arr).all():
            raise PolicyMismatchError(f"policy action {raw!r} is not one integer for {space}")
        value = arr.reshape(()).item()
        if value != int(value) or not space.contains(int(value)):
            raise PolicyMismatchError(f"policy action {value!r} is not an action of {space}")
        return int(value), [float(value)]
    assert isinstance(space, gym.spaces.Box)
    if isinstance(raw, int | np.integer):
        # An int is the Policy protocol's discrete answer; a Box needs a vector.
        raise PolicyMismatchError(f"policy returned the integer {raw!r} for {space}")
    vec = np.asarray(raw, dtype=np.float32)
    if vec.size != int(np.prod(space.shape)) or not np.isfinite(vec).all():
        raise PolicyMismatchError(
            f"policy action has {vec.size} elements (finite: {bool(np.isfinite(vec).all())}), "
            f"want {int(np.prod(space.shape))} finite for {space}"
        )
    vec = np.clip(vec.reshape(space.shape), space.low, space.high).astype(space.dtype)
    return vec, vec.astype(np.float32).ravel().tolist()


def _table(schema: pa.Schema, columns: dict[str, pa.Array], rows: int) -> pa.Table:
    """A table of ``schema`` with ``columns`` given and every other column null."""
    import pyarrow as pa

    arrays = [columns.get(f.name, pa.nulls(rows, f.type)) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _vectors(rows: list[list[float]]) -> pa.Array:
    import pyarrow as pa

    return pa.array(rows, type=pa.list_(pa.float32()))


def run_policy(
    policy: Policy | None,
    env_id: str,
    episodes: int,
    seed: int,
    *,
    max_steps: int | None = None,
    policy_version: str,
    clock: Callable[[], int] | None = None,
    seeds: Sequence[int] | None = None,
    on_episode: Callable[[], None] | None = None,
) -> RolloutResult:
    """Play ``episodes`` episodes of ``env_id`` and return them as rollout tables.

    Args:
        policy: acts on the flattened float32 observation; ``None`` for uniform random actions.
        env_id: a registered Gymnasium id, e.g. ``CartPole-v1``.
        episodes: how many episodes, at least 1.
        seed: episode ``i`` is reset with ``seed + i``; non-negative.
        max_steps: truncate episodes after this many steps (``None``: the env's own limit).
        policy_version: recorded in every episode id and in the episode table.
        clock: microseconds since the Unix epoch for the ``timestamp`` column; defaults to the
            wall clock. Inject a fixed clock to get byte-identical tables for equal seeds.
        seeds: the reset seed of each episode instead (``episodes`` must be their number): a
            suite's episodes replayed (``trajledger eval``).
        on_episode: called after each episode ends (``eval``'s progress bar).

    Returns:
        The step and episode tables, the returns and the seeds.

    Raises:
        RolloutError: bad arguments, an unknown environment, or an action space that is neither
            ``Discrete`` nor ``Box``.
        PolicyMismatchError: the policy returns an action the space does not accept, or cannot
            act on the observation.
    """
    import gymnasium as gym
    import numpy as np
    import pyarrow as pa

    from trajledger.ledger.rollouts.schema import EPISODE_SCHEMA, STEP_SCHEMA

    if isinstance(episodes, bool) or episodes < 1:
        raise RolloutError(f"rollout of {env_id}: episodes = {episodes!r}, want >= 1")
    if seed < 0:
        raise RolloutError(f"rollout of {env_id}: seed = {seed}, want >= 0")
    if max_steps is not None and max_steps < 1:
        raise RolloutError(f"rollout of {env_id}: max_steps = {max_steps}, want >= 1")
    order = list(range(seed, seed + episodes)) if seeds is None else list(seeds)
    if len(order) != episodes or min(order) < 0:
        raise RolloutError(f"rollout of {env_id}: {len(order)} seed(s) for {episodes} "
                           "episode(s), want one non-negative seed each")
    now = clock or (lambda: time.time_ns() // 1000)
    if env_id.count(":") > 1:  # (make's MODULE:ID split: a ValueError, a BUG: rev50 finding 7)
        raise RolloutError(f"environment {env_id!r} cannot be made: a Gymnasium id is ID or "
                           "MODULE:ID, one ':' at most")
    try:
        env = gym.make(env_id, max_episode_steps=max_steps)
    except (gym.error.Error, ImportError) as e:  # ImportError: MODULE of MODULE:ID (out51)
        raise RolloutError(f"environment {env_id!r} cannot be made: {e}"
                           + (" (install the module, or run where Python finds it: "
                              "PYTHONPATH)" if isinstance(e, ImportError) else "")) from e
    try:
        space = env.action_space
        if not isinstance(space, gym.spaces.Discrete | gym.spaces.Box):
            raise RolloutError(
                f"environment {env_id!r}: action space {space} is not Discrete or Box"
            )
        obs_space = env.observation_space
        if not obs_space.is_np_flattenable:
            raise RolloutError(
                f"environment {env_id!r}: observation space {obs_space} has no flat vector form"
            )
        cols: dict[str, list[Any]] = {
            k: []
            for k in (
                "episode_id",
                "step",
                "is_first",
                "is_last",
                "terminated",
                "truncated",
                "reward",
                "obs",
                "action",
                "timestamp",
            )
        }
        ep_cols: dict[str, list[Any]] = {
            k: [] for k in ("episode_id", "seed", "return", "num_steps", "termination_reason")
        }
        for ep_seed in order:
            eid = episode_id(policy_version, env_id, ep_seed)
            raw_obs, _ = env.reset(seed=ep_seed)
            if policy is None:
                space.seed(ep_seed)
            total, t, terminated, truncated = 0.0, 0, False, False
            while not (terminated or truncated):
                obs = np.asarray(gym.spaces.flatten(obs_space, raw_obs), np.float32)
                chosen = space.sample() if policy is None else policy.act(obs)
                action, recorded = _env_action(chosen, space)
                raw_obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                for key, value in (
                    ("episode_id", eid),
                    ("step", t),
                    ("is_first", t == 0),
                    ("is_last", bool(terminated or truncated)),
                    ("terminated", bool(terminated)),
                    ("truncated", bool(truncated)),
                    ("reward", float(reward)),
                    ("obs", obs.tolist()),
                    ("action", recorded),
                    ("timestamp", now()),
                ):
                    cols[key].append(value)
                t += 1
            for key, value in (
                ("episode_id", eid),
                ("seed", ep_seed),
                ("return", total),
                ("num_steps", t),
                ("termination_reason", "terminated" if terminated else "truncated"),
            ):
                ep_cols[key].append(value)
            if on_episode is not None:
                on_episode()
    finally:
        env.close()

    n = len(cols["step"])
    step_arrays = {
        name: (
            _vectors(values)
            if name in ("obs", "action")
            else pa.array(values, type=STEP_SCHEMA.field(name).type)
        )
        for name, values in cols.items()
    }
    ep_arrays = {
        name: pa.array(values, type=EPISODE_SCHEMA.field(name).type)
        for name, values in ep_cols.items()
    }
    ep_arrays["policy_version"] = pa.array([policy_version] * episodes, pa.string())
    ep_arrays["invalid"] = pa.array([False] * episodes, pa.bool_())
    return RolloutResult(
        steps=_table(STEP_SCHEMA, step_arrays, n),
        episodes=_table(EPISODE_SCHEMA, ep_arrays, episodes),
        returns=tuple(ep_cols["return"]),
        seeds=tuple(ep_cols["seed"]),
    )
