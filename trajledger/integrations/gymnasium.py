"""Record Gymnasium episodes into the ledger while they are played, from one environment or many.

Scope: `LedgerRecorder` wraps one environment (a ``gymnasium.Wrapper``) or a vector environment
(``gymnasium.make_vec``, ``SyncVectorEnv``, ``AsyncVectorEnv``: it then builds a
`VectorLedgerRecorder`, a ``gymnasium.vector.VectorWrapper``). It records every transition and
the seed each episode was reset with, and every ``every`` completed episodes (of all
sub-environments together) and on ``flush()`` / ``close()`` records them as one rollout batch
through `ledger.artifacts.record_batch`: validated, written as Parquet, stored, signed and logged.
Non-scope: choosing actions, approval.
Spec: ``schemas/rollout.v3.md``.

Layout: one row per transition: the observation the action was chosen on, the action as given to
``step()``, and the reward, flags and ``info`` that step returned. Observations and actions keep
their exact values (rollout schema v3): Box, Discrete, MultiDiscrete and MultiBinary values keep
their dtype and shape (float64 stays float64, an image stays uint8 ``[H, W, C]``, a Discrete
value is a tensor of shape ``[]``); Dict and Tuple values are structs whose members keep theirs
(an int64 member above 2^53 next to a float member is exact); Text values are strings. Both
spaces and the environment spec go into each batch record (``observationSpace``,
``actionSpace``, ``envSpec``). The observation ``step()`` returns last is the episode's
``final_obs``; the ``info`` of ``reset()`` its ``reset_info``. ``info`` is kept as typed JSON
(arrays keep dtype and shape; an empty ``info`` is ``{}``). Episode ``seed`` is the seed the
episode was reset with (null when none was, as for an automatic reset).

Vector environments, in each autoreset mode of Gymnasium 1.x (``NextStep``, the only one of
Gymnasium 1.0 and the default; ``SameStep`` and ``Disabled`` from Gymnasium 1.1), give each
sub-environment's episodes their own ids; a sub-environment's automatic reset starts its next
episode (``NextStep``: the step that resets it is not a transition and is not recorded;
``SameStep``: the final observation and info come from ``final_obs`` / ``final_info``;
``Disabled``: ``reset(options={"reset_mask": ...})`` starts the masked ones). The seed of
``reset(seed=s)`` is ``s + i`` for sub-environment ``i`` (a list gives each its own), as
Gymnasium seeds them. Gymnasium 0.29's vector API is refused with a message.

Every value is checked when it arrives, so that nothing half-recorded or unrecordable waits
for a batch: an action must fit the action space (else ``step()`` raises ValueError before the
environment is stepped); a step's observation must fit the observation space (structure and
shape; a value the space's dtype would change, such as float64 0.1 in a float32 Box, is
refused rather than rounded; a value out of a Box's bounds, NaN, or out of a Discrete's range,
as ``Space.contains`` decides: `record` of files checks the same, `space_check`), its reward
must be a finite number, its flags booleans and its ``info`` typed JSON, none over the rollout
schema's size limits (1 MiB of ``info`` or text, 64 MiB a tensor), else the episode is
discarded and ``step()`` raises ValueError.

Only finished episodes (terminated or truncated) are recorded. An episode left unfinished by a
new ``reset()`` or by ``close()`` is discarded with a `RuntimeWarning`: recording it would claim
an end the environment never reported.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import secrets
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, SupportsFloat

import gymnasium as gym
import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

    from trajledger.ledger.artifacts import BatchResult
    from trajledger.ledger.catalog import CatalogItem
    from trajledger.ledger.home import LedgerHome
    from trajledger.ledger.keys import Signer

__all__ = ["LedgerRecorder", "VectorLedgerRecorder"]

GENERATOR = "trajledger.integrations.gymnasium"

_VECTOR_SPEC_KWARGS = ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers")
"""Keys ``make_vec`` adds to its spec's kwargs: not the sub-environment's own."""

_SAME_STEP_KEYS = frozenset({"final_obs", "_final_obs", "final_info", "_final_info"})


@dataclass
class _Episode:
    """The transitions of one episode, as recorded so far."""

    episode_id: str
    seed: int | None
    last_obs: Any
    reset_info: str | None
    obs: list[Any] = field(default_factory=list)
    actions: list[Any] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: list[bool] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    infos: list[str | None] = field(default_factory=list)
    done: bool = False


class _Recording:
    """What both recorders share: the episodes being played, the finished ones, and recording
    them as batches."""

    def __init__(
        self,
        ledger: LedgerHome,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        spec: Any,
        default_name: str,
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
        from trajledger.ledger.artifacts import resolve_registered
        from trajledger.ledger.rollouts.spaces import SpaceError, space_to_json, spec_to_json

        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"LedgerRecorder: every = {every!r}, want a whole number >= 1")
        if not policy:
            raise ValueError("LedgerRecorder: policy is empty, want a policy / model version")
        self.env_item: CatalogItem = resolve_registered(ledger, env_ref, "environment")
        try:
            self.meta: dict[str, Any] = {
                "observationSpace": space_to_json(observation_space),
                "actionSpace": space_to_json(action_space),
            }
            if spec is not None:
                self.meta["envSpec"] = spec_to_json(spec)
        except SpaceError as e:
            raise ValueError(f"LedgerRecorder: {e}") from e
        _check_registered_spaces(ledger, self.env_item.envelope, self.meta, env_ref)
        if evaluator is not None:
            resolve_registered(ledger, evaluator, "evaluator")
        self.observation_space = observation_space
        self.action_space = action_space
        self._ledger = ledger
        self._signer = signer
        self._policy = policy
        self._every = every
        self._evaluator = evaluator
        self._consent, self._licence, self._retention = consent, licence, retention
        self._prefix = episode_prefix if episode_prefix is not None else secrets.token_hex(4)
        self._name = name if name is not None else f"{default_name}-{self._prefix}"
        self._clock = clock if clock is not None else (lambda: time.time_ns() // 1000)
        self._started = 0
        self.finished: list[_Episode] = []
        self.batches: list[str] = []
        self.results: list[BatchResult] = []
        self.discarded_steps = 0

    def start(self, seed: int | None, obs: Any, info: Mapping[str, Any] | None) -> _Episode:
        """A new episode, reset with ``seed`` to ``obs`` and ``info``."""
        ep = _Episode(
            f"{self._prefix}-{self._started}",
            seed,
            self.value(self.observation_space, obs, "reset() observation"),
            _info_text(info),
        )
        self._started += 1
        return ep

    def value(self, space: gym.Space[Any], value: Any, where: str) -> Any:
        """A copy of a space value as it is recorded (the environment may reuse its arrays).

        Raises:
            ValueError: the value does not have the space's structure or shape, or the space's
                dtype would change it (the message names ``where``).
        """
        return _conform(space, value, where)

    def transition(
        self,
        ep: _Episode,
        action: Any,
        obs: Any,
        reward: SupportsFloat,
        terminated: bool,
        truncated: bool,
        info: Mapping[str, Any] | None,
    ) -> bool:
        """Add one transition to ``ep``, whole or not at all; at the episode's end, finish it.

        Every value is checked before ``ep`` changes, so that a finished episode always
        records (a value the rollout schema refuses would otherwise fail every later flush).

        Returns:
            Whether ``every`` finished episodes are waiting: the caller then calls
            `record_ready`.

        Raises:
            ValueError: the reward is not a finite number, a flag is not a boolean, the
                observation does not fit the space, or ``info`` holds a value typed JSON cannot
                keep (``ep`` is unchanged).
        """
        info_text = _info_text(info)
        value = _reward(reward)
        flags = _flag(terminated, "terminated"), _flag(truncated, "truncated")
        last_obs = self.value(self.observation_space, obs, "step() observation")
        ep.obs.append(ep.last_obs)
        ep.actions.append(action)
        ep.rewards.append(value)
        ep.terminated.append(flags[0])
        ep.truncated.append(flags[1])
        ep.timestamps.append(self._clock())
        ep.infos.append(info_text)
        ep.last_obs = last_obs
        if flags[0] or flags[1]:
            ep.done = True
            self.finished.append(ep)
        return len(self.finished) >= self._every

    def drop(self, ep: _Episode | None, why: str, *, steps: int = 0) -> None:
        """Discard an unfinished episode with a `RuntimeWarning` (``steps`` more were lost)."""
        if ep is None or ep.done or not (ep.rewards or steps):
            return
        lost = len(ep.rewards) + steps
        self.discarded_steps += lost
        warnings.warn(
            f"LedgerRecorder: episode {ep.episode_id} discarded after {lost} step(s): {why}",
            RuntimeWarning,
            stacklevel=3,
        )

    def record_ready(self) -> None:
        """Record the finished episodes in batches of ``every``, while that many wait."""
        while len(self.finished) >= self._every:
            self.flush(self._every)

    def flush(self, limit: int | None = None) -> str | None:
        """Record the finished episodes not yet recorded (the first ``limit``) as one batch
        (see the recorders)."""
        from trajledger.ledger.artifacts import record_batch

        batch = self.finished[:limit]
        if not batch:
            return None
        steps, episodes = _tables(batch, self.observation_space, self.action_space)
        result = record_batch(
            self._ledger,
            steps,
            episodes=episodes,
            env=self.env_item.digest,
            policy=self._policy,
            signer=self._signer,
            evaluator=self._evaluator,
            name=f"{self._name}-{len(self.batches) + 1}",
            generator=GENERATOR,
            consent=self._consent,
            licence=self._licence,
            retention=self._retention,
            meta=self.meta,
        )
        self.finished = self.finished[len(batch) :]
        self.batches.append(result.digest)
        self.results.append(result)
        return result.digest


class _Recorded:
    """The recorders' common face: what was recorded, and `flush`."""

    _rec: _Recording

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Refuse pickling and copying, with a message (they failed on the signing key)."""
        raise TypeError(
            f"{type(self).__name__} cannot be pickled or copied: it holds the open ledger and a "
            "signing key, and a copy would repeat its episode ids; build a recorder in each "
            "process, around that process's environment"
        )

    @property
    def batches(self) -> list[str]:
        """Digests of the batches recorded so far, in order."""
        return self._rec.batches

    @property
    def results(self) -> list[BatchResult]:
        """The `BatchResult` of each batch (statistics, log index)."""
        return self._rec.results

    @property
    def discarded_steps(self) -> int:
        """Steps of unfinished episodes that were dropped."""
        return self._rec.discarded_steps

    @property
    def pending_episodes(self) -> int:
        """Finished episodes not yet recorded."""
        return len(self._rec.finished)

    def flush(self) -> str | None:
        """Record the finished episodes not yet recorded as one batch.

        Returns:
            The batch digest, or None when no episode was waiting.

        Raises:
            RolloutValidationError, PolicyError: as `ledger.artifacts.record_batch`; the
                episodes stay pending.
        """
        return self._rec.flush()


class LedgerRecorder(_Recorded, gym.Wrapper[Any, Any, Any, Any]):
    """Record an environment's episodes as signed rollout batches, one every ``every`` episodes.

    Given a vector environment, builds a `VectorLedgerRecorder` instead (same arguments).

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

    def __new__(cls, env: Any, *args: Any, **kwargs: Any) -> LedgerRecorder:
        """A `VectorLedgerRecorder` for a vector environment, else a `LedgerRecorder`."""
        if isinstance(env, gym.vector.VectorEnv):
            return VectorLedgerRecorder(env, *args, **kwargs)  # type: ignore[return-value]
        return super().__new__(cls)

    def __init__(
        self,
        env: gym.Env[Any, Any],
        ledger: LedgerHome,
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
            env: the environment to record (a vector environment gives a
                `VectorLedgerRecorder`).
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
        super().__init__(env)
        spec_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
        self._rec = _Recording(
            ledger, env.observation_space, env.action_space, env.spec, f"gym-{spec_id}",
            env_ref=env_ref, policy=policy, signer=signer, every=every, evaluator=evaluator,
            name=name, episode_prefix=episode_prefix, consent=consent, licence=licence,
            retention=retention, clock=clock,
        )  # fmt: skip
        self._current: _Episode | None = None
        self._closed = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the environment and start recording a new episode.

        An unfinished episode in progress is discarded (with a `RuntimeWarning`).

        Raises:
            ValueError: the observation or ``info`` cannot be recorded (as in `step`); no
                episode is started.
        """
        self._rec.drop(self._current, "reset() was called before it terminated or was truncated")
        self._current = None
        obs, info = self.env.reset(seed=seed, options=options)
        self._current = self._rec.start(seed, obs, info)
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the environment and record the transition.

        When the step ends the episode and ``every`` episodes are finished, the batch is
        recorded before this returns.

        Raises:
            gymnasium.error.ResetNeeded: no episode is in progress (call ``reset()``).
            ValueError: the action does not fit the action space (the environment is not
                stepped; the episode goes on); or the step returned a reward that is not a
                finite number, a flag that is not a boolean, an observation that does not fit
                the observation space, or an ``info`` typed JSON cannot keep: the episode in
                progress is discarded.
            RolloutValidationError, PolicyError: recording the batch failed; the finished
                episodes are kept, and recording is retried at the next episode end or flush.
        """
        ep = self._current
        if ep is None or ep.done:
            raise gym.error.ResetNeeded(
                "LedgerRecorder: step() without an episode in progress; call reset() first"
            )
        recorded_action = self._rec.value(self.env.action_space, action, "action")
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except BaseException as e:  # a Ctrl-C in the step: the environment may have moved on
            self._current = None
            self._rec.drop(ep, _interrupted(e), steps=1)
            raise
        try:
            ready = self._rec.transition(
                ep, recorded_action, obs, reward, terminated, truncated, info
            )
        except BaseException:
            # The transition cannot be recorded whole (a refused value, a Ctrl-C part way): the
            # episode is dropped, not recorded with a hole in it (reset() starts the next one).
            if not ep.done:
                self._rec.discarded_steps += len(ep.rewards) + 1
                self._current = None
            raise
        if ready:
            self._rec.record_ready()  # a failure keeps the finished episodes pending
        return obs, reward, terminated, truncated, info

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
            self._rec.drop(self._current, "close() was called before it terminated or was "
                           "truncated")  # fmt: skip
            self._current = None
            super().close()


class VectorLedgerRecorder(_Recorded, gym.vector.VectorWrapper):
    """Record a vector environment's episodes, all sub-environments' in one batch per flush.

    Built by `LedgerRecorder` when it is given a vector environment (``gymnasium.make_vec``,
    ``SyncVectorEnv``, ``AsyncVectorEnv``); the arguments are `LedgerRecorder`'s. Episode ids
    are ``<prefix>-<n>``, numbered in the order episodes start over all sub-environments.

    Example::

        envs = LedgerRecorder(gym.make_vec("CartPole-v1", num_envs=4,
                                           vectorization_mode="sync"),
                              ledger, env_ref="cartpole@1", policy="random",
                              signer=ledger.keys.signer("producer"), every=20)
        obs, infos = envs.reset(seed=0)          # sub-environment i is seeded 0 + i
        for _ in range(1000):
            obs, rewards, terminated, truncated, infos = envs.step(envs.action_space.sample())
        envs.close()                             # records what finished, discards the rest
    """

    def __init__(
        self, env: gym.vector.VectorEnv[Any, Any, Any], ledger: LedgerHome, **options: Any
    ) -> None:
        """Wrap the vector environment ``env``.

        Args:
            env: the vector environment.
            ledger: the open ledger to record into.
            options: the keyword arguments of `LedgerRecorder` (``env_ref``, ``policy``,
                ``signer``, ``every``, ...).

        Raises:
            ValueError: as `LedgerRecorder`, or the vector environment's autoreset mode is not
                one of Gymnasium 1.x (Gymnasium 0.29's vector API).
            RefError: as `LedgerRecorder`.
        """
        super().__init__(env)
        mode = env.metadata.get("autoreset_mode", "NextStep")  # Gymnasium 1.0: NextStep only
        self._mode = str(getattr(mode, "value", mode))
        if self._mode not in ("NextStep", "SameStep", "Disabled") or not hasattr(
            gym.vector, "VectorWrapper"
        ):
            raise ValueError(
                f"LedgerRecorder: vector environment autoreset mode {mode!r} is unknown, want "
                "NextStep, SameStep or Disabled (Gymnasium 1.x)"
            )
        spec = env.spec
        if spec is not None:  # the sub-environment's spec, without make_vec's own arguments
            kwargs = {k: v for k, v in spec.kwargs.items() if k not in _VECTOR_SPEC_KWARGS}
            spec = dataclasses.replace(spec, kwargs=kwargs)
        spec_id = spec.id if spec is not None else type(env.unwrapped).__name__
        self._rec = _Recording(
            ledger, env.single_observation_space, env.single_action_space, spec,
            f"gym-{spec_id}", **options,
        )  # fmt: skip
        self._current: list[_Episode | None] = [None] * env.num_envs
        self._autoreset = np.zeros(env.num_envs, dtype=bool)  # NextStep: reset at next step
        self._closed = False

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-environments (those of ``options["reset_mask"]``, when given) and
        start recording a new episode in each; unfinished episodes there are discarded."""
        n = self.num_envs
        mask = (options or {}).get("reset_mask")
        which = np.ones(n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        for i in np.flatnonzero(which).tolist():
            self._rec.drop(self._current[i], "reset() was called before it terminated or was "
                           "truncated")  # fmt: skip
            self._current[i] = None
        obs, infos = self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]
        seeds = seed if isinstance(seed, list) else [
            None if seed is None else seed + i for i in range(n)
        ]  # fmt: skip
        rows = list(gym.vector.utils.iterate(self.env.observation_space, obs))
        for i in np.flatnonzero(which).tolist():
            self._current[i] = self._rec.start(seeds[i], rows[i], _env_info(infos, i))
            self._autoreset[i] = False
        return obs, infos

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every sub-environment and record each one's transition.

        Episodes that end are finished (and recorded, ``every`` to a batch, once every
        sub-environment's transition is); a sub-environment that the vector environment resets
        on its own starts its next episode. A value that cannot be recorded (as in
        `LedgerRecorder.step`) drops that sub-environment's episode with a `RuntimeWarning` (the
        others' transitions are kept, and this step returns); an action that does not fit
        raises ValueError before any sub-environment is stepped.

        Raises:
            gymnasium.error.ResetNeeded: ``reset()`` was never called.
            RolloutValidationError, PolicyError: recording a batch failed; the finished
                episodes are kept, and recording is retried at the next episode end or flush.
        """
        if all(ep is None for ep in self._current) and not self._autoreset.any():
            raise gym.error.ResetNeeded(
                "LedgerRecorder: step() without episodes in progress; call reset() first"
            )
        recorded = [
            self._rec.value(self._rec.action_space, a, f"action of sub-environment {i}")
            for i, a in enumerate(gym.vector.utils.iterate(self.env.action_space, actions))
        ]
        try:
            obs, rewards, terminated, truncated, infos = self.env.step(actions)
            ready = self._transitions(recorded, obs, rewards, terminated, truncated, infos)
        except BaseException as e:  # a Ctrl-C: which sub-environments moved on is unknown
            for i, ep in enumerate(self._current):
                self._current[i] = None
                self._rec.drop(ep, _interrupted(e), steps=1)
            self._autoreset[:] = False
            raise
        if ready:  # after every sub-environment's transition: a failure leaves no hole
            self._rec.record_ready()
        return obs, rewards, terminated, truncated, infos

    def _transitions(self, recorded: list[Any], obs: Any, rewards: Any, terminated: Any,
                     truncated: Any, infos: dict[str, Any]) -> bool:  # fmt: skip
        """Record each sub-environment's transition of a step; whether a batch is ready."""
        rows = list(gym.vector.utils.iterate(self.env.observation_space, obs))
        ready = False
        for i in range(self.num_envs):
            if self._autoreset[i]:  # NextStep: this step reset the sub-environment
                self._autoreset[i] = False
                self._current[i] = self._restart(i, rows[i], infos)
                continue
            ep = self._current[i]
            if ep is None or ep.done:  # Disabled: stepped after its end, before a reset
                continue
            done = bool(terminated[i] or truncated[i])
            final, info = rows[i], _env_info(infos, i)
            if self._mode == "SameStep" and done:
                final = infos["final_obs"][i]
                info = _env_info(infos.get("final_info", {}), i)
            try:
                waiting = self._rec.transition(
                    ep, recorded[i], final, rewards[i], terminated[i], truncated[i], info
                )
            except ValueError as e:
                self._rec.drop(ep, f"{e}", steps=1)
                self._current[i] = None
                self._autoreset[i] = done and self._mode == "NextStep"
                continue
            ready = ready or waiting
            if done and self._mode == "NextStep":
                self._autoreset[i] = True
            elif done and self._mode == "SameStep":
                self._current[i] = self._restart(i, rows[i], infos)
        return ready

    def _restart(self, i: int, obs: Any, infos: Mapping[str, Any]) -> _Episode | None:
        """Sub-environment ``i``'s next episode after an automatic reset; None, with a
        `RuntimeWarning`, when its first observation or info cannot be recorded."""
        try:
            return self._rec.start(None, obs, _env_info(infos, i))
        except ValueError as e:
            warnings.warn(f"LedgerRecorder: sub-environment {i}'s next episode is not "
                          f"recorded: {e}", RuntimeWarning, stacklevel=3)  # fmt: skip
            return None

    def close(self, **kwargs: Any) -> None:
        """Record the finished episodes, discard unfinished ones, and close the environments.

        Raises:
            RolloutValidationError, PolicyError: as `flush`.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.flush()
        finally:
            for i, ep in enumerate(self._current):
                self._rec.drop(ep, "close() was called before it terminated or was truncated")
                self._current[i] = None
            self.env.close(**kwargs)


def _interrupted(e: BaseException) -> str:
    """Why an episode whose step() raised is dropped: going on would leave a hole in it."""
    return (f"step() raised {type(e).__name__}, so the environment may have moved on without "
            "the transition being recorded; call reset() to record the next episode")  # fmt: skip


def _env_info(infos: Mapping[str, Any], i: int) -> dict[str, Any]:
    """Sub-environment ``i``'s info from a vector environment's infos: each key whose ``_key``
    mask is set for ``i``, nested infos likewise (``final_obs`` / ``final_info`` left out)."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if key.startswith("_") or key in _SAME_STEP_KEYS:
            continue
        mask = infos.get(f"_{key}")
        if mask is not None and not bool(mask[i]):
            continue
        out[key] = _env_info(value, i) if isinstance(value, Mapping) else value[i]
    return out


def _conform(space: gym.Space[Any], value: Any, where: str) -> Any:
    """A copy of ``value`` as recorded: tensors as numpy arrays of the space's dtype and shape
    (cast only when no value changes), Dict and Tuple values member by member, Text values as
    strings; values of other spaces are copied as they are.

    Raises:
        ValueError: the value does not fit (the message names ``where`` and the member).
    """
    if _is_tensor_space(space):
        from trajledger.ledger.rollouts.space_check import exact_cast

        try:
            given = np.asarray(value)
            fitted = exact_cast(given, np.dtype(space.dtype))
            if fitted is None:
                raise TypeError(f"{given.dtype} values")
        except (TypeError, ValueError) as e:
            raise ValueError(f"LedgerRecorder: {where} {value!r:.80} is not a {space}: "
                             f"{e}") from e  # fmt: skip
        cast = fitted[0].copy() if fitted[0] is given else fitted[0]
        if fitted[1].any():
            raise ValueError(
                f"LedgerRecorder: {where} is {given.dtype}, and the space's {space.dtype} "
                f"would change its values ({value!r:.80}): give {space.dtype} values, or "
                "declare the space with the dtype the environment uses"
            )
        if cast.shape != space.shape:
            raise ValueError(
                f"LedgerRecorder: {where} has shape {list(cast.shape)}, the space "
                f"{list(space.shape or ())}"
            )
        if not space.contains(cast):  # the bounds, a Discrete's range (`record` checks alike)
            raise ValueError(f"LedgerRecorder: {where} {value!r:.80} is outside {space}")
        _check_bytes(cast.nbytes, "tensor", where)
        return cast
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(value, Mapping) or set(value) != set(space.spaces):
            raise ValueError(f"LedgerRecorder: {where} is not a dict of the space's keys "
                             f"{sorted(space.spaces)}")  # fmt: skip
        return {k: _conform(space.spaces[k], value[k], f"{where}[{k!r}]") for k in value}
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(value, tuple) or len(value) != len(space.spaces):
            raise ValueError(f"LedgerRecorder: {where} is not a tuple of "
                             f"{len(space.spaces)} values")  # fmt: skip
        return tuple(_conform(s, v, f"{where}[{n}]") for n, (s, v) in enumerate(
            zip(space.spaces, value, strict=True)))  # fmt: skip
    if isinstance(space, gym.spaces.Text):
        if not isinstance(value, str):
            raise ValueError(f"LedgerRecorder: {where} is a {type(value).__name__}, want a string")
        if not space.contains(value):
            raise ValueError(f"LedgerRecorder: {where} {value!r:.80} is outside {space}")
        _check_bytes(len(value.encode()), "field", where)
    return copy.deepcopy(value)


def _reward(reward: Any) -> float:
    """A reward as recorded: a finite real number (the rollout schema keeps no other).

    Raises:
        ValueError: it is not a real number, or not finite.
    """
    if type(reward) is float:
        value = reward
    elif isinstance(reward, str | bytes) or np.ndim(reward) != 0:  # float("1") parses
        raise ValueError(f"LedgerRecorder: reward {reward!r:.80} is not a number")
    else:
        try:
            value = float(reward)
        except (TypeError, ValueError) as e:
            raise ValueError(f"LedgerRecorder: reward {reward!r:.80} is not a number") from e
    if not math.isfinite(value):
        raise ValueError(f"LedgerRecorder: reward is {value}, want a finite number")
    return value


def _flag(value: Any, name: str) -> bool:
    """``terminated`` or ``truncated`` as recorded: a boolean, not anything truthy.

    Raises:
        ValueError: it is not a boolean.
    """
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"LedgerRecorder: {name} is {value!r:.80}, want a boolean")
    return bool(value)


def _is_tensor_space(space: gym.Space[Any]) -> bool:
    """Box, Discrete, MultiDiscrete and MultiBinary values are numpy arrays of the space's
    dtype; Dict, Tuple and Text values are kept as they are (copied)."""
    return isinstance(
        space,
        gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary,
    )


def _info_text(info: Mapping[str, Any] | None) -> str | None:
    """An ``info`` dict as typed JSON (``{}`` when empty; null only when there is none).

    Raises:
        ValueError: a value typed JSON cannot hold (the message names it).
    """
    if info is None:
        return None
    from trajledger.ledger.rollouts import typed_json

    try:
        text = typed_json.dumps(dict(info))
    except typed_json.TypedJSONError as e:
        raise ValueError(f"LedgerRecorder: info {e}") from e
    _check_bytes(len(text.encode()), "field", "info")
    return text


def _check_bytes(size: int, kind: str, what: str) -> None:
    """Refuse a value the rollout schema's validation would refuse for its size (a string
    ``field`` or a ``tensor``).

    Raises:
        ValueError: ``size`` is over the limit.
    """
    from trajledger.ledger.rollouts import validate

    limit = (
        validate.DEFAULT_MAX_TENSOR_BYTES if kind == "tensor" else validate.DEFAULT_MAX_FIELD_BYTES
    )
    if size > limit:
        raise ValueError(f"LedgerRecorder: {what} has {size} bytes, over the limit of {limit}")


def _check_registered_spaces(
    ledger: LedgerHome, envelope: str, meta: Mapping[str, Any], env_ref: str
) -> None:
    """Refuse an environment whose spaces differ from those its registration records, or that
    is another Gymnasium environment than the one it names."""
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.errors import ProvenanceError
    from trajledger.verify.statement import Statement

    try:
        predicate = Statement.from_bytes(Envelope.from_bytes(ledger.store.get(envelope)).payload)
    except ProvenanceError:
        return  # recording verifies nothing; `verify` reports an unreadable record
    registered, playing = predicate.predicate.get("gymnasiumId"), meta.get("envSpec", {}).get("id")
    # "module:Name-v0" (Gymnasium imports the module, then makes Name-v0) plays as Name-v0
    if registered and playing and playing not in (registered, str(registered).rpartition(":")[2]):
        from trajledger.ledger.errors import shell_word

        raise ValueError(
            f"LedgerRecorder: the environment is {playing}, but {env_ref} is registered for "
            f"{registered}: wrap {registered}, or register {playing} as an environment of its "
            f"own (trajledger env register NAME --version V --gym-id {shell_word(playing)})"
        )
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


def _size(value: Any) -> int:
    """Values held by a space value (array elements, string characters)."""
    if isinstance(value, Mapping):
        return sum(_size(v) for v in value.values())
    if isinstance(value, tuple):
        return sum(_size(v) for v in value)
    return len(value) if isinstance(value, str) else int(np.size(value))


def _tables(
    episodes: list[_Episode], obs_space: gym.Space[Any], act_space: gym.Space[Any]
) -> tuple[pa.Table, pa.Table]:
    """The step table and the episode attributes (id, seed, final obs, reset info).

    Episodes are grouped so that no chunk holds more than `_GROUP_VALUES` tensor values.
    """
    import pyarrow as pa

    groups: list[list[_Episode]] = [[]]
    held = 0
    for e in episodes:
        size = len(e.rewards) * (_size(e.last_obs) + (_size(e.actions[0]) if e.actions else 0))
        if groups[-1] and held + size > _GROUP_VALUES:
            groups.append([])
            held = 0
        groups[-1].append(e)
        held += size
    parts = [_group_tables(g, obs_space, act_space) for g in groups]
    return (
        pa.concat_tables([p[0] for p in parts]),
        pa.concat_tables([p[1] for p in parts]),
    )


def _column(space: gym.Space[Any], rows: list[Any], name: str) -> tuple[pa.Array, pa.Field]:
    """One space column of the rows, exactly (``ledger.rollouts.space_values``)."""
    from trajledger.ledger.rollouts.space_values import in_space_order, space_column, stack_rows

    return space_column(in_space_order(space, stack_rows(rows, name)), len(rows), name)


def _group_tables(
    episodes: list[_Episode], obs_space: gym.Space[Any], act_space: gym.Space[Any]
) -> tuple[pa.Table, pa.Table]:
    import pyarrow as pa

    lengths = [len(e.rewards) for e in episodes]
    obs, obs_field = _column(obs_space, [o for e in episodes for o in e.obs], "obs")
    action, action_field = _column(act_space, [a for e in episodes for a in e.actions], "action")
    final, final_field = _column(obs_space, [e.last_obs for e in episodes], "final_obs")
    step_fields = [
        pa.field("episode_id", pa.string()),
        pa.field("step", pa.int64()),
        pa.field("terminated", pa.bool_()),
        pa.field("truncated", pa.bool_()),
        pa.field("reward", pa.float64()),
        obs_field,
        action_field,
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("info", pa.string()),
    ]
    steps = pa.Table.from_arrays(
        [
            pa.array(np.repeat([e.episode_id for e in episodes], lengths), pa.string()),
            pa.array(np.concatenate([np.arange(n, dtype=np.int64) for n in lengths])),
            pa.array([t for e in episodes for t in e.terminated], pa.bool_()),
            pa.array([t for e in episodes for t in e.truncated], pa.bool_()),
            pa.array([r for e in episodes for r in e.rewards], pa.float64()),
            obs,
            action,
            pa.array([t for e in episodes for t in e.timestamps], pa.timestamp("us", tz="UTC")),
            pa.array([i for e in episodes for i in e.infos], pa.string()),
        ],
        schema=pa.schema(step_fields),
    )
    attrs = pa.Table.from_arrays(
        [
            pa.array([e.episode_id for e in episodes], pa.string()),
            pa.array([e.seed for e in episodes], pa.int64()),
            final,
            pa.array([e.reset_info for e in episodes], pa.string()),
        ],
        schema=pa.schema(
            [
                pa.field("episode_id", pa.string()),
                pa.field("seed", pa.int64()),
                final_field,
                pa.field("reset_info", pa.string()),
            ]
        ),
    )
    return steps, attrs
