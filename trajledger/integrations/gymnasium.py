"""Record Gymnasium episodes into the ledger while they are played.

Scope: `LedgerRecorder`, a ``gymnasium.Wrapper`` around one environment. It records every
transition and the seed each episode was reset with, and every ``every`` completed episodes (and
on `LedgerRecorder.flush` / ``close()``) records them as one rollout batch through
`ledger.artifacts.record_batch`: validated, written as Parquet, stored, signed and logged.
Non-scope: vector environments (wrap each sub-environment), choosing actions, approval.
Spec: ``schemas/rollout.v1.md``; the layout is the one ``trajledger rollout`` writes
(``runner/rollouts.py``), so recorded and generated batches train alike.

Layout: one row per transition: the observation the action was chosen on, the action as given to
``step()``, and the reward and flags that step returned. Observations are flattened with
``gymnasium.spaces.flatten`` to float32 (a ``Discrete`` observation becomes one-hot); a
``Discrete`` action ``a`` is recorded as ``[float(a)]``, any other action flattened to float32.
The observation ``step()`` returns last (the final one of an episode) is not a row: no action
was chosen on it. Episode ``seed`` is the ``seed`` given to ``reset()`` (null when none was).

Only finished episodes (terminated or truncated) are recorded. An episode left unfinished by a
new ``reset()`` or by ``close()`` is discarded with a `RuntimeWarning`: recording it would claim
an end the environment never reported.
"""

from __future__ import annotations

import secrets
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, SupportsFloat

import gymnasium as gym
import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import pyarrow as pa

    from trajledger.ledger.artifacts import BatchResult
    from trajledger.ledger.home import Ledger
    from trajledger.ledger.keys import Signer

__all__ = ["LedgerRecorder"]

GENERATOR = "trajledger.integrations.gymnasium"


@dataclass
class _Episode:
    """The transitions of one episode, as recorded so far."""

    episode_id: str
    seed: int | None
    last_obs: npt.NDArray[np.float32]
    obs: list[npt.NDArray[np.float32]] = field(default_factory=list)
    actions: list[npt.NDArray[np.float32]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: list[bool] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    done: bool = False


class LedgerRecorder(gym.Wrapper[Any, Any, Any, Any]):
    """Record an environment's episodes as signed rollout batches, one every ``every`` episodes.

    Example::

        env = LedgerRecorder(gym.make("CartPole-v1"), ledger, env_ref="cartpole@1",
                             policy="ppo-step-2000", signer=ledger.keys.signer("producer"),
                             every=100)
        obs, info = env.reset(seed=0)
        ...                      # play as usual
        env.close()              # records the finished episodes not yet recorded
        env.batches              # the recorded batch digests, in order

    Attributes:
        batches: digests of the batches recorded so far, in order.
        results: the `BatchResult` of each (statistics, log index).
        discarded_steps: steps of unfinished episodes that were dropped.
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        ledger: Ledger,
        *,
        env_ref: str,
        policy: str,
        signer: Signer,
        every: int = 100,
        evaluator: str | None = None,
        name: str | None = None,
        episode_prefix: str | None = None,
        consent: str | None = None,
        licence: str | None = None,
        retention: str | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        """Wrap ``env``; nothing is recorded until ``every`` episodes have finished.

        Args:
            env: the environment to record.
            ledger: the open ledger to record into.
            env_ref: the registered environment this is (``NAME@VERSION`` or digest).
            policy: the policy / model version acting (a checkpoint digest links lineage).
            signer: the producer key that signs each batch.
            every: record a batch each time this many episodes have finished (>= 1).
            evaluator: a registered evaluator, if rewards come from one.
            name: batch names are ``<name>-<n>`` (n from 1); default
                ``gym-<env id>-<episode prefix>``.
            episode_prefix: episode ids are ``<prefix>-<n>`` (n from 0); default 8 random hex
                digits, so ids do not repeat across recorders.
            consent: consent basis, recorded in each batch.
            licence: licence, recorded in each batch.
            retention: retention rule, recorded in each batch.
            clock: microseconds since the Unix epoch for each step's ``timestamp``; default the
                wall clock.

        Raises:
            ValueError: ``every`` is not a positive integer, or ``policy`` is empty.
            PolicyError: ``env_ref`` (or ``evaluator``) is not registered in ``ledger``.
        """
        from trajledger.ledger.artifacts import resolve_registered

        super().__init__(env)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"LedgerRecorder: every = {every!r}, want a whole number >= 1")
        if not policy:
            raise ValueError("LedgerRecorder: policy is empty, want a policy / model version")
        self._env_item = resolve_registered(ledger, env_ref, "environment")
        if evaluator is not None:
            resolve_registered(ledger, evaluator, "evaluator")
        self._ledger = ledger
        self._signer = signer
        self._policy = policy
        self._every = every
        self._evaluator = evaluator
        self._consent, self._licence, self._retention = consent, licence, retention
        self._prefix = episode_prefix if episode_prefix is not None else secrets.token_hex(4)
        spec_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
        self._name = name if name is not None else f"gym-{spec_id}-{self._prefix}"
        self._clock = clock if clock is not None else (lambda: time.time_ns() // 1000)
        self._started = 0
        self._current: _Episode | None = None
        self._finished: list[_Episode] = []
        self._closed = False
        self.batches: list[str] = []
        self.results: list[BatchResult] = []
        self.discarded_steps = 0

    @property
    def pending_episodes(self) -> int:
        """Finished episodes not yet recorded."""
        return len(self._finished)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the environment and start recording a new episode.

        An unfinished episode in progress is discarded (with a `RuntimeWarning`).
        """
        self._discard_unfinished("reset() was called")
        obs, info = self.env.reset(seed=seed, options=options)
        self._current = _Episode(f"{self._prefix}-{self._started}", seed, self._flat_obs(obs))
        self._started += 1
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the environment and record the transition.

        When the step ends the episode and ``every`` episodes are finished, the batch is
        recorded before this returns.

        Raises:
            gymnasium.error.ResetNeeded: no episode is in progress (call ``reset()``).
            RolloutValidationError, PolicyError: recording the batch failed; the finished
                episodes are kept, and recording is retried at the next episode end or flush.
        """
        ep = self._current
        if ep is None or ep.done:
            raise gym.error.ResetNeeded(
                "LedgerRecorder: step() without an episode in progress; call reset() first"
            )
        flat_action = self._flat_action(action)
        obs, reward, terminated, truncated, info = self.env.step(action)
        ep.obs.append(ep.last_obs)
        ep.actions.append(flat_action)
        ep.rewards.append(float(reward))
        ep.terminated.append(bool(terminated))
        ep.truncated.append(bool(truncated))
        ep.timestamps.append(self._clock())
        ep.last_obs = self._flat_obs(obs)
        if terminated or truncated:
            ep.done = True
            self._finished.append(ep)
            if len(self._finished) >= self._every:
                self.flush()
        return obs, reward, terminated, truncated, info

    def flush(self) -> str | None:
        """Record the finished episodes not yet recorded as one batch.

        Returns:
            The batch digest, or None when no episode was waiting.

        Raises:
            RolloutValidationError, PolicyError: as `ledger.artifacts.record_batch`; the
                episodes stay pending.
        """
        from trajledger.ledger.artifacts import record_batch

        if not self._finished:
            return None
        steps, episodes = _tables(self._finished)
        result = record_batch(
            self._ledger,
            steps,
            episodes=episodes,
            env=self._env_item.digest,
            policy=self._policy,
            signer=self._signer,
            evaluator=self._evaluator,
            name=f"{self._name}-{len(self.batches) + 1}",
            generator=GENERATOR,
            consent=self._consent,
            licence=self._licence,
            retention=self._retention,
        )
        self._finished = []
        self.batches.append(result.digest)
        self.results.append(result)
        return result.digest

    def close(self) -> None:
        """Record the finished episodes, discard an unfinished one, and close the environment.

        The environment is closed even when recording fails; the episodes then stay pending,
        and `flush` can record them. Closing twice is harmless.

        Raises:
            RolloutValidationError, PolicyError: as `flush`.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.flush()
        finally:
            self._discard_unfinished("close() was called")
            super().close()

    def _discard_unfinished(self, why: str) -> None:
        ep = self._current
        if ep is not None and not ep.done and ep.rewards:
            self.discarded_steps += len(ep.rewards)
            warnings.warn(
                f"LedgerRecorder: episode {ep.episode_id} discarded after {len(ep.rewards)} "
                f"step(s): {why} before it terminated or was truncated",
                RuntimeWarning,
                stacklevel=3,
            )
        self._current = None

    def _flat_obs(self, obs: Any) -> npt.NDArray[np.float32]:
        flat = gym.spaces.flatten(self.env.observation_space, obs)
        return np.asarray(flat, dtype=np.float32).ravel()

    def _flat_action(self, action: Any) -> npt.NDArray[np.float32]:
        space = self.env.action_space
        if isinstance(space, gym.spaces.Discrete):
            return np.asarray([action], dtype=np.float32).ravel()
        if isinstance(space, gym.spaces.Box | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary):
            return np.asarray(action, dtype=np.float32).ravel()
        return np.asarray(gym.spaces.flatten(space, action), dtype=np.float32).ravel()


def _vectors(rows: list[npt.NDArray[np.float32]]) -> pa.Array:
    import pyarrow as pa

    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    values = np.concatenate(rows) if rows else np.zeros(0, dtype=np.float32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=pa.float32()))


def _tables(episodes: list[_Episode]) -> tuple[pa.Table, pa.Table]:
    """The step table and the episode attributes (id, seed) of finished episodes."""
    import pyarrow as pa

    lengths = [len(e.rewards) for e in episodes]
    steps = pa.table(
        {
            "episode_id": pa.array(np.repeat([e.episode_id for e in episodes], lengths)),
            "step": pa.array(np.concatenate([np.arange(n, dtype=np.int64) for n in lengths])),
            "terminated": pa.array([t for e in episodes for t in e.terminated], pa.bool_()),
            "truncated": pa.array([t for e in episodes for t in e.truncated], pa.bool_()),
            "reward": pa.array([r for e in episodes for r in e.rewards], pa.float64()),
            "obs": _vectors([o for e in episodes for o in e.obs]),
            "action": _vectors([a for e in episodes for a in e.actions]),
            "timestamp": pa.array(
                [t for e in episodes for t in e.timestamps], pa.timestamp("us", tz="UTC")
            ),
        }
    )
    attrs = pa.table(
        {
            "episode_id": pa.array([e.episode_id for e in episodes], pa.string()),
            "seed": pa.array([e.seed for e in episodes], pa.int64()),
        }
    )
    return steps, attrs
