"""Record Gymnasium episodes into the ledger while they are played.

Scope: `LedgerRecorder`, a ``gymnasium.Wrapper`` around one environment. It records every
transition and the seed each episode was reset with, and every ``every`` completed episodes (and
on `LedgerRecorder.flush` / ``close()``) records them as one rollout batch through
`ledger.artifacts.record_batch`: validated, written as Parquet, stored, signed and logged.
Non-scope: vector environments (wrap each sub-environment), choosing actions, approval.
Spec: ``schemas/rollout.v2.md``.

Layout: one row per transition: the observation the action was chosen on, the action as given to
``step()``, and the reward, flags and ``info`` that step returned. Observations and actions of
Box, Discrete, MultiDiscrete and MultiBinary spaces keep their dtype and shape (float64 stays
float64, an image stays uint8 ``[H, W, C]``, a Discrete value is a tensor of shape ``[]``);
Dict and Tuple values are flattened with ``gymnasium.spaces.flatten`` and both spaces and the
environment spec go into each batch record (``observationSpace``, ``actionSpace``,
``envSpec``), so ``gymnasium.spaces.unflatten`` undoes it. The observation ``step()`` returns
last is the episode's ``final_obs``; the ``info`` of ``reset()`` its ``reset_info``. ``info``
is kept as typed JSON (arrays keep dtype and shape); an empty ``info`` is null. Episode
``seed`` is the ``seed`` given to ``reset()`` (null when none was).

Only finished episodes (terminated or truncated) are recorded. An episode left unfinished by a
new ``reset()`` or by ``close()`` is discarded with a `RuntimeWarning`: recording it would claim
an end the environment never reported.
"""

from __future__ import annotations

import secrets
import time
import warnings
from collections.abc import Callable, Mapping
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
    last_obs: npt.NDArray[Any]
    reset_info: str | None
    obs: list[npt.NDArray[Any]] = field(default_factory=list)
    actions: list[npt.NDArray[Any]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: list[bool] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    infos: list[str | None] = field(default_factory=list)
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
            ValueError: ``every`` is not a positive integer, or ``policy`` is empty, or the
                environment's spaces cannot be recorded, or differ from those the registered
                environment records.
            RefError: ``env_ref`` (or ``evaluator``) is not registered in ``ledger``.
        """
        from trajledger.ledger.artifacts import resolve_registered
        from trajledger.ledger.rollouts.spaces import SpaceError, space_to_json, spec_to_json

        super().__init__(env)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"LedgerRecorder: every = {every!r}, want a whole number >= 1")
        if not policy:
            raise ValueError("LedgerRecorder: policy is empty, want a policy / model version")
        self._env_item = resolve_registered(ledger, env_ref, "environment")
        try:
            self._meta: dict[str, Any] = {
                "observationSpace": space_to_json(env.observation_space),
                "actionSpace": space_to_json(env.action_space),
            }
            if env.spec is not None:
                self._meta["envSpec"] = spec_to_json(env.spec)
        except SpaceError as e:
            raise ValueError(f"LedgerRecorder: {e}") from e
        _check_registered_spaces(ledger, self._env_item.envelope, self._meta, env_ref)
        self._obs_flat = _composite(env.observation_space)
        self._act_flat = _composite(env.action_space)
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
        self._current = _Episode(
            f"{self._prefix}-{self._started}", seed, self._tensor_obs(obs), _info_text(info)
        )
        self._started += 1
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the environment and record the transition.

        When the step ends the episode and ``every`` episodes are finished, the batch is
        recorded before this returns.

        Raises:
            gymnasium.error.ResetNeeded: no episode is in progress (call ``reset()``).
            ValueError: ``info`` holds a value typed JSON cannot keep; the episode in progress
                is discarded.
            RolloutValidationError, PolicyError: recording the batch failed; the finished
                episodes are kept, and recording is retried at the next episode end or flush.
        """
        ep = self._current
        if ep is None or ep.done:
            raise gym.error.ResetNeeded(
                "LedgerRecorder: step() without an episode in progress; call reset() first"
            )
        recorded_action = self._tensor_action(action)
        obs, reward, terminated, truncated, info = self.env.step(action)
        try:
            info_text = _info_text(info)
        except ValueError:
            # The transition cannot be recorded whole: the episode is dropped, not recorded
            # with a hole in it (reset() starts the next one).
            self.discarded_steps += len(ep.rewards) + 1
            self._current = None
            raise
        ep.obs.append(ep.last_obs)
        ep.actions.append(recorded_action)
        ep.rewards.append(float(reward))
        ep.terminated.append(bool(terminated))
        ep.truncated.append(bool(truncated))
        ep.timestamps.append(self._clock())
        ep.infos.append(info_text)
        ep.last_obs = self._tensor_obs(obs)
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
            meta=self._meta,
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

    def _tensor_obs(self, obs: Any) -> npt.NDArray[Any]:
        space = self.env.observation_space
        if self._obs_flat:
            return np.asarray(gym.spaces.flatten(space, obs))
        return np.array(obs, dtype=space.dtype)

    def _tensor_action(self, action: Any) -> npt.NDArray[Any]:
        space = self.env.action_space
        if self._act_flat:
            return np.asarray(gym.spaces.flatten(space, action))
        return np.array(action, dtype=space.dtype)


def _composite(space: gym.Space[Any]) -> bool:
    """Dict, Tuple (and other non-array spaces) are flattened; array spaces are kept as they are."""
    return not isinstance(
        space,
        gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary,
    )


def _info_text(info: Mapping[str, Any] | None) -> str | None:
    """An ``info`` dict as typed JSON (null when empty).

    Raises:
        ValueError: a value typed JSON cannot hold (the message names it).
    """
    if not info:
        return None
    from trajledger.ledger.rollouts import typed_json

    try:
        return typed_json.dumps(dict(info))
    except typed_json.TypedJSONError as e:
        raise ValueError(f"LedgerRecorder: info {e}") from e


def _check_registered_spaces(
    ledger: Ledger, envelope: str, meta: Mapping[str, Any], env_ref: str
) -> None:
    """Refuse an environment whose spaces differ from those its registration records."""
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.errors import ProvenanceError
    from trajledger.verify.statement import Statement

    try:
        predicate = Statement.from_bytes(Envelope.from_bytes(ledger.store.get(envelope)).payload)
    except ProvenanceError:
        return  # recording verifies nothing; `verify` reports an unreadable record
    for key in ("observationSpace", "actionSpace"):
        recorded = predicate.predicate.get(key)
        if recorded is not None and recorded != meta[key]:
            raise ValueError(
                f"LedgerRecorder: the environment's {key} differs from the one recorded for "
                f"{env_ref}: register this environment as a new version"
            )


_GROUP_VALUES = 1 << 28
"""Tensor values per table chunk: list offsets are 32-bit, so many image observations are
split into several chunks."""


def _tensors(rows: list[npt.NDArray[Any]]) -> tuple[pa.Array, pa.Field]:
    """One tensor column of same-shaped arrays, and its field (dtype and shape kept)."""
    import pyarrow as pa

    from trajledger.ledger.rollouts.schema import tensor_field

    first = rows[0]
    value_type = pa.from_numpy_dtype(first.dtype)
    size = first.size
    values = np.concatenate([r.reshape(-1) for r in rows])
    offsets = np.arange(0, (len(rows) + 1) * size, size, dtype=np.int64).astype(np.int32)
    column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, value_type))
    return column, tensor_field("", value_type, first.shape)


def _tables(episodes: list[_Episode]) -> tuple[pa.Table, pa.Table]:
    """The step table and the episode attributes (id, seed, final obs, reset info).

    Episodes are grouped so that no chunk holds more than `_GROUP_VALUES` tensor values.
    """
    import pyarrow as pa

    groups: list[list[_Episode]] = [[]]
    held = 0
    for e in episodes:
        size = len(e.rewards) * (e.last_obs.size + (e.actions[0].size if e.actions else 0))
        if groups[-1] and held + size > _GROUP_VALUES:
            groups.append([])
            held = 0
        groups[-1].append(e)
        held += size
    parts = [_group_tables(g) for g in groups]
    return (
        pa.concat_tables([p[0] for p in parts]),
        pa.concat_tables([p[1] for p in parts]),
    )


def _group_tables(episodes: list[_Episode]) -> tuple[pa.Table, pa.Table]:
    import pyarrow as pa

    lengths = [len(e.rewards) for e in episodes]
    obs, obs_field = _tensors([o for e in episodes for o in e.obs])
    action, action_field = _tensors([a for e in episodes for a in e.actions])
    final, final_field = _tensors([e.last_obs for e in episodes])
    steps = pa.table(
        {
            "episode_id": pa.array(np.repeat([e.episode_id for e in episodes], lengths)),
            "step": pa.array(np.concatenate([np.arange(n, dtype=np.int64) for n in lengths])),
            "terminated": pa.array([t for e in episodes for t in e.terminated], pa.bool_()),
            "truncated": pa.array([t for e in episodes for t in e.truncated], pa.bool_()),
            "reward": pa.array([r for e in episodes for r in e.rewards], pa.float64()),
            "obs": obs,
            "action": action,
            "timestamp": pa.array(
                [t for e in episodes for t in e.timestamps], pa.timestamp("us", tz="UTC")
            ),
            "info": pa.array([i for e in episodes for i in e.infos], pa.string()),
        }
    )
    schema = steps.schema
    for name, f in (("obs", obs_field), ("action", action_field)):
        i = schema.get_field_index(name)
        schema = schema.set(i, f.with_name(name).with_type(steps.column(name).type))
    steps = steps.cast(schema)
    attrs = pa.table(
        {
            "episode_id": pa.array([e.episode_id for e in episodes], pa.string()),
            "seed": pa.array([e.seed for e in episodes], pa.int64()),
            "final_obs": final,
            "reset_info": pa.array([e.reset_info for e in episodes], pa.string()),
        }
    )
    i = attrs.schema.get_field_index("final_obs")
    attrs = attrs.cast(attrs.schema.set(i, final_field.with_name("final_obs")))
    return steps, attrs
