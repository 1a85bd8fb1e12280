"""The built-in trainer ``bc``: reward-filtered behaviour cloning on numpy.

Scope: filtered behaviour cloning (also called %BC): rank episodes by return, keep the top
fraction, and fit a policy to the kept (observation, action) pairs by supervised learning — a
softmax classifier for discrete actions, a regression for continuous ones — with a one-hidden-layer
tanh MLP (or a linear model) trained by minibatch Adam with manual backpropagation. The checkpoint
format (``trainer.json`` + ``policy.npz``) and the policy that reads it back.
Non-scope: admission and file I/O (the runner hands over verified tables), environments
(`runner.rollouts`), GPUs. Spec: ``docs/trainers.md``.

Determinism: the seed drives the weight initialisation and the minibatch order, and nothing else
is random; the checkpoint bytes are a function of (data, config, seed) on one numpy/BLAS build.
The ``.npz`` is written with fixed zip timestamps, so equal weights give equal bytes.

Imports numpy and pyarrow: only the train and rollout commands import this module.
"""

from __future__ import annotations

import io
import itertools
import json
import math
import zipfile
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from trajledger.verify.errors import FormatError

from ..chat import CHAT_HINT, is_chat
from . import (
    HEADER_FILE,
    PolicyMismatchError,
    TrainerConfigError,
    TrainingData,
    TrainingDataError,
    TrainResult,
)

__all__ = [
    "DEFAULTS",
    "FORMAT",
    "TRAINER_VERSION",
    "WEIGHTS_FILE",
    "BCPolicy",
    "BCTrainer",
    "effective_config",
    "load_bc_policy",
]

TRAINER_VERSION: Final = "1"
"""Version of the algorithm; bumped whenever the same inputs could give different weights."""

FORMAT: Final = "trajledger.bc-checkpoint/1"
"""The ``format`` field of ``trainer.json``."""

WEIGHTS_FILE: Final = "policy.npz"

DEFAULTS: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "top_fraction": 0.5,
        "hidden": 64,
        "epochs": 30,
        "lr": 3e-3,
        "batch_size": 64,
        "l2": 1e-4,
        "action_kind": "auto",
        "num_actions": 0,
    }
)
"""Every configuration key and its default. Unknown keys are refused."""

_MAX_AUTO_ACTIONS: Final = 1024
_ZIP_EPOCH: Final = (1980, 1, 1, 0, 0, 0)

ActionKind = Literal["discrete", "continuous"]
F64 = npt.NDArray[np.float64]
Params = list[F64]
"""Weights and biases, alternating, input layer first: ``[w0, b0, w1, b1]``."""


# --- configuration ---------------------------------------------------------------------------


def _number(key: str, value: object, *, integer: bool) -> float:
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    # bool is an int; `epochs = true` in a config file is a mistake, not 1.
    if not ok or isinstance(value, bool):
        want = "an integer" if integer else "a number"
        raise TrainerConfigError(f"bc config {key!r} = {value!r}, want {want}")
    assert isinstance(value, int | float)
    if not math.isfinite(value):
        raise TrainerConfigError(f"bc config {key!r} = {value!r}, want a finite number")
    return value


def effective_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` checked and completed with `DEFAULTS`.

    Args:
        config: user settings; any subset of the keys of `DEFAULTS`.

    Returns:
        Every key of `DEFAULTS`, with the user's value where given.

    Raises:
        TrainerConfigError: an unknown key, or a value of the wrong type or out of range.
    """
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise TrainerConfigError(
            f"bc config has unknown keys {', '.join(unknown)}; known: {', '.join(DEFAULTS)}"
        )
    out = {**DEFAULTS, **config}
    ranges: dict[str, tuple[bool, float, float, bool]] = {
        # key: (integer, low, high, low inclusive)
        "top_fraction": (False, 0.0, 1.0, False),
        "hidden": (True, 0, 1 << 16, True),
        "epochs": (True, 1, 1 << 20, True),
        "lr": (False, 0.0, 1.0, False),
        "batch_size": (True, 1, 1 << 24, True),
        "l2": (False, 0.0, math.inf, True),
        "num_actions": (True, 0, 1 << 24, True),
    }
    for key, (integer, low, high, low_inclusive) in ranges.items():
        value = _number(key, out[key], integer=integer)
        if not ((value >= low if low_inclusive else value > low) and value <= high):
            bracket = "[" if low_inclusive else "("
            raise TrainerConfigError(
                f"bc config {key!r} = {value!r}, want in {bracket}{low}, {high}]"
            )
        out[key] = int(value) if integer else float(value)
    if out["action_kind"] not in ("auto", "discrete", "continuous"):
        raise TrainerConfigError(
            f"bc config 'action_kind' = {out['action_kind']!r}, want auto, discrete or continuous"
        )
    return out


# --- data ------------------------------------------------------------------------------------


def _require_columns(table: pa.Table, what: str, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise TrainingDataError(f"bc: {what} table has no column {', '.join(missing)}")


def _vectors(column: pa.ChunkedArray, what: str) -> npt.NDArray[np.float64]:
    """A list column with one length throughout, as a 2-D float64 array."""
    if not pa.types.is_list(column.type):
        raise TrainingDataError(
            f"bc: {what} is {column.type} (a Dict, Tuple or Text space), want tensors; train "
            "on these rollouts with a trainer that reads their space"
        )
    lengths = pc.unique(pc.list_value_length(column)).to_pylist()
    if len(lengths) != 1 or not lengths[0]:
        raise TrainingDataError(
            f"bc: {what} vectors have lengths {sorted(lengths)}, want one length >= 1"
        )
    values = pc.list_flatten(column).to_numpy(zero_copy_only=False).astype(np.float64)
    if not np.isfinite(values).all():
        raise TrainingDataError(f"bc: {what} has NaN, infinite or null elements")
    out: npt.NDArray[np.float64] = values.reshape(-1, lengths[0])
    return out


def _episode_table(episodes: pa.Table) -> tuple[list[str], F64, npt.NDArray[np.bool_]]:
    """Episode ids, returns and the invalid flag, one entry per distinct episode."""
    _require_columns(episodes, "episode", ("episode_id", "return"))
    ids = episodes["episode_id"].to_pylist()
    returns = episodes["return"].to_pylist()
    invalid = (
        episodes["invalid"].to_pylist()
        if "invalid" in episodes.column_names
        else [False] * len(ids)
    )
    seen: dict[str, tuple[float, bool]] = {}
    for eid, ret, bad in zip(ids, returns, invalid, strict=True):
        if eid is None or ret is None or not math.isfinite(ret):
            raise TrainingDataError(f"bc: episode {eid!r} has return {ret!r}, want a finite number")
        # The same episode recorded in two batches is one episode; two returns for it are not.
        if eid in seen and seen[eid][0] != ret:
            raise TrainingDataError(
                f"bc: episode {eid!r} has two returns, {seen[eid][0]!r} and {ret!r}"
            )
        seen[eid] = (float(ret), bool(bad) or (eid in seen and seen[eid][1]))
    names = list(seen)
    return (
        names,
        np.array([seen[n][0] for n in names], dtype=np.float64),
        np.array([seen[n][1] for n in names], dtype=np.bool_),
    )


def _usable_steps(
    data: TrainingData,
) -> tuple[list[str], F64, npt.NDArray[np.int64], F64, F64]:
    """The steps to learn from: an obs and an action, in an episode not flagged invalid.

    Returns:
        Episode ids and returns (one per distinct episode), the episode index of each usable
        step, and the usable steps' observations and actions as 2-D arrays.
    """
    steps = data.steps
    if is_chat(steps):
        raise TrainingDataError(
            f"bc: none of {len(steps)} steps has an obs and an action, and bc (behaviour "
            f"cloning) learns only from those: {CHAT_HINT}"
        )
    _require_columns(steps, "step", ("episode_id", "obs", "action"))
    names, returns, invalid = _episode_table(data.episodes)
    index = pc.index_in(steps["episode_id"], value_set=pa.array(names, pa.string()))
    orphans = pc.sum(pc.is_null(index)).as_py() or 0
    if orphans:
        first = steps["episode_id"].filter(pc.is_null(index))[0].as_py()
        raise TrainingDataError(
            f"bc: {orphans} steps belong to episodes missing from the episode table "
            f"(first: {first!r})"
        )
    ep_of_step = index.to_numpy(zero_copy_only=False).astype(np.int64)
    usable = pc.and_(pc.is_valid(steps["obs"]), pc.is_valid(steps["action"]))
    keep = usable.to_numpy(zero_copy_only=False) & ~invalid[ep_of_step]
    if not keep.any():
        raise TrainingDataError(
            f"bc: none of {len(steps)} steps has an obs and an action in a valid episode"
        )
    mask = pa.array(keep)
    obs = _vectors(steps["obs"].filter(mask), "obs")
    actions = _vectors(steps["action"].filter(mask), "action")
    return names, returns, ep_of_step[keep], obs, actions


def _action_kind(actions: F64, requested: str) -> ActionKind:
    """The rule: discrete when every action is one non-negative integral float below 1024."""
    integral = (
        actions.shape[1] == 1
        and bool((actions >= 0).all())
        and bool((actions < _MAX_AUTO_ACTIONS).all())
        and bool((actions == np.round(actions)).all())
    )
    if requested == "continuous":
        return "continuous"
    if requested == "discrete":
        if not integral:
            raise TrainingDataError(
                "bc: action_kind is discrete, but actions are not all one non-negative integer "
                f"below {_MAX_AUTO_ACTIONS} (action length {actions.shape[1]})"
            )
        return "discrete"
    return "discrete" if integral else "continuous"


# --- model -----------------------------------------------------------------------------------


def _init(rng: np.random.Generator, sizes: Sequence[int]) -> Params:
    """Glorot-uniform weights, zero biases."""
    params: Params = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        params += [rng.uniform(-limit, limit, (fan_in, fan_out)), np.zeros(fan_out)]
    return params


def _forward(params: Params, x: F64) -> list[F64]:
    """Activations of every layer, input first; tanh between layers, linear output."""
    acts = [x]
    layers = len(params) // 2
    for i in range(layers):
        z = acts[-1] @ params[2 * i] + params[2 * i + 1]
        acts.append(np.tanh(z) if i < layers - 1 else z)
    return acts


def _log_softmax(z: F64) -> F64:
    shifted = z - z.max(axis=1, keepdims=True)
    out: F64 = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return out


def _loss(out: F64, y: F64, kind: ActionKind) -> tuple[float, F64]:
    """Mean loss over the batch (cross-entropy or squared error), and its output gradient."""
    n = out.shape[0]
    if kind == "discrete":
        labels = y[:, 0].astype(np.int64)
        logp = _log_softmax(out)
        grad = np.exp(logp)
        grad[np.arange(n), labels] -= 1.0
        return float(-logp[np.arange(n), labels].mean()), grad / n
    diff = out - y
    return float((diff**2).mean()), 2.0 * diff / diff.size


def _gradients(params: Params, x: F64, y: F64, kind: ActionKind, l2: float) -> Params:
    """Backpropagation; L2 applies to weights, not biases."""
    acts = _forward(params, x)
    _, d = _loss(acts[-1], y, kind)
    grads: Params = [np.empty(0)] * len(params)
    for i in range(len(params) // 2 - 1, -1, -1):
        w = params[2 * i]
        grads[2 * i] = acts[i].T @ d + l2 * w
        grads[2 * i + 1] = d.sum(axis=0)
        if i:
            d = (d @ w.T) * (1.0 - acts[i] ** 2)
    return grads


def _fit(
    x: F64, y: F64, kind: ActionKind, out_dim: int, cfg: Mapping[str, Any], seed: int,
    advance: Callable[[int], None],
) -> Params:
    """Minibatch Adam (beta 0.9 / 0.999, eps 1e-8); the seed orders init, then each epoch.

    ``advance(1)`` is called after each epoch (the bar of `TrainingData.progress`)."""
    rng = np.random.default_rng(seed)
    hidden = cfg["hidden"]
    params = _init(rng, [x.shape[1], hidden, out_dim] if hidden else [x.shape[1], out_dim])
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    lr, beta1, beta2, eps, bs = cfg["lr"], 0.9, 0.999, 1e-8, cfg["batch_size"]
    t = 0
    for _ in range(cfg["epochs"]):
        order = rng.permutation(x.shape[0])
        for start in range(0, x.shape[0], bs):
            idx = order[start : start + bs]
            grads = _gradients(params, x[idx], y[idx], kind, cfg["l2"])
            t += 1
            c1, c2 = 1.0 - beta1**t, 1.0 - beta2**t
            for j, g in enumerate(grads):
                m[j] = beta1 * m[j] + (1.0 - beta1) * g
                v[j] = beta2 * v[j] + (1.0 - beta2) * g * g
                params[j] = params[j] - lr * (m[j] / c1) / (np.sqrt(v[j] / c2) + eps)
        advance(1)
    return params


def _std(values: F64) -> F64:
    std = values.std(axis=0)
    # A constant feature carries no information; dividing by ~0 would blow it up.
    out: F64 = np.where(std < 1e-8, 1.0, std)
    return out


# --- checkpoint ------------------------------------------------------------------------------


def _npz_bytes(arrays: Mapping[str, F64]) -> bytes:
    """An ``.npz`` (as ``np.savez`` writes) with fixed timestamps, so bytes follow content."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name in sorted(arrays):
            member = io.BytesIO()
            np.lib.format.write_array(
                member, np.ascontiguousarray(arrays[name]), allow_pickle=False
            )
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_EPOCH)
            info.external_attr = 0o644 << 16
            zf.writestr(info, member.getvalue())
    return buf.getvalue()


def _floats(values: F64) -> list[float]:
    return [float(v) for v in values]


class BCTrainer:
    """Reward-filtered behaviour cloning. See the module docstring and ``docs/trainers.md``."""

    name: str = "bc"

    def check_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The effective config, checked before any data is read (see `effective_config`).

        Raises:
            TrainerConfigError: an unknown key, or a value of the wrong type or out of range.
        """
        return effective_config(config)

    def train(self, data: TrainingData, config: Mapping[str, Any], seed: int) -> TrainResult:
        """Keep the top episodes by return and clone their actions.

        Steps with a null ``obs`` or ``action`` (an LLM message, a terminal observation row) and
        episodes flagged ``invalid`` are not used.

        Args:
            data: step table with ``episode_id``, ``obs``, ``action``; episode table with
                ``episode_id``, ``return`` and optionally ``invalid``.
            config: keys of `DEFAULTS`.
            seed: a non-negative integer; the only source of randomness.

        Returns:
            ``policy.npz`` and ``trainer.json``; metrics ``loss``, ``accuracy`` (discrete) or
            ``mse`` (continuous, in action units), ``episodes_total``, ``episodes_kept``,
            ``steps_used``, ``return_threshold``, ``mean_return_all``, ``mean_return_kept``.

        Raises:
            TrainerConfigError: a bad config or seed.
            TrainingDataError: missing columns, no usable steps, ragged or non-finite vectors,
                steps of episodes absent from the episode table, actions that do not fit
                ``action_kind`` / ``num_actions``.
        """
        cfg = effective_config(config)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise TrainerConfigError(f"bc seed = {seed!r}, want a non-negative integer")

        names, returns, ep_of_step, obs, actions = _usable_steps(data)

        # The action kind and the number of actions come from all the data, not only the kept
        # episodes, so they do not depend on top_fraction.
        kind = _action_kind(actions, cfg["action_kind"])
        if kind == "discrete":
            seen_max = int(actions.max()) + 1
            out_dim = cfg["num_actions"] or seen_max
            if seen_max > out_dim:
                raise TrainingDataError(
                    f"bc: action {seen_max - 1} in the data, want < num_actions {out_dim}"
                )
        else:
            out_dim = actions.shape[1]

        # Rank the episodes that have usable steps; keep the top fraction, ties included.
        candidates = np.unique(ep_of_step)
        ranked = np.sort(returns[candidates])[::-1]
        k = max(1, math.ceil(round(cfg["top_fraction"] * len(candidates), 9)))
        threshold = float(ranked[k - 1])
        kept_episode = np.zeros(len(names), dtype=np.bool_)
        kept_episode[candidates[returns[candidates] >= threshold]] = True
        rows = kept_episode[ep_of_step]
        x_raw, a_raw = obs[rows], actions[rows]

        obs_mean, obs_std = x_raw.mean(axis=0), _std(x_raw)
        x = (x_raw - obs_mean) / obs_std
        header: dict[str, Any] = {
            "format": FORMAT,
            "trainer": self.name,
            "trainer_version": TRAINER_VERSION,
            "action_kind": kind,
            "obs_dim": int(obs.shape[1]),
            "hidden": cfg["hidden"],
            "activation": "tanh",
            "obs_mean": _floats(obs_mean),
            "obs_std": _floats(obs_std),
            "weights": WEIGHTS_FILE,
            "config": cfg,
        }
        if kind == "discrete":
            act_mean, act_std = np.zeros(1), np.ones(1)
            header["num_actions"] = out_dim
        else:
            act_mean, act_std = a_raw.mean(axis=0), _std(a_raw)
            header.update(
                action_dim=out_dim, action_mean=_floats(act_mean), action_std=_floats(act_std)
            )
        y = (a_raw - act_mean) / act_std
        with data.progress(cfg["epochs"], "training (epochs)") as advance:
            params = _fit(x, y, kind, out_dim, cfg, seed, advance)

        # Measured on the training set.
        out = _forward(params, x)[-1]
        loss, _ = _loss(out, y, kind)
        metrics: dict[str, float] = {"loss": loss}
        if kind == "discrete":
            metrics["accuracy"] = float((out.argmax(axis=1) == y[:, 0]).mean())
        else:
            pred = out * act_std + act_mean
            metrics["mse"] = float(((pred - a_raw) ** 2).mean())
        kept_returns = returns[kept_episode]
        metrics.update(
            episodes_total=float(len(candidates)),
            episodes_kept=float(kept_episode.sum()),
            steps_used=float(len(x)),
            return_threshold=threshold,
            mean_return_all=float(returns[candidates].mean()),
            mean_return_kept=float(kept_returns.mean()),
        )
        arrays = {f"{'wb'[j % 2]}{j // 2}": p for j, p in enumerate(params)}
        header_text = json.dumps(header, indent=2, sort_keys=True, allow_nan=False) + "\n"
        return TrainResult(
            files={HEADER_FILE: header_text.encode(), WEIGHTS_FILE: _npz_bytes(arrays)},
            metrics=metrics,
            config=cfg,
        )


# --- policy ----------------------------------------------------------------------------------


class BCPolicy:
    """A trained ``bc`` policy: deterministic (argmax / mean action).

    Attributes:
        action_kind: ``discrete`` or ``continuous``.
        obs_dim: the observation size it was trained on.
        action_size: number of actions (discrete) or action vector length (continuous).
    """

    def __init__(
        self,
        action_kind: ActionKind,
        params: Params,
        obs_mean: F64,
        obs_std: F64,
        action_mean: F64 | None = None,
        action_std: F64 | None = None,
    ) -> None:
        """Build a policy; shapes must agree (checked).

        Args:
            action_kind: ``discrete`` or ``continuous``.
            params: weights and biases alternating, input layer first.
            obs_mean: observation normalisation mean, shape ``(obs_dim,)``.
            obs_std: observation normalisation scale, positive, shape ``(obs_dim,)``.
            action_mean: continuous only: action de-normalisation mean.
            action_std: continuous only: action de-normalisation scale.

        Raises:
            FormatError: shapes or values that do not fit together.
        """
        if not params or len(params) % 2:
            raise FormatError(
                f"bc policy: {len(params)} weight arrays, want a positive even number"
            )
        prev = obs_mean.shape[0]
        if obs_mean.shape != (prev,) or obs_std.shape != (prev,) or not (obs_std > 0).all():
            raise FormatError(
                f"bc policy: obs_mean {obs_mean.shape} / obs_std {obs_std.shape} do not match, "
                "or obs_std is not positive"
            )
        for i in range(len(params) // 2):
            w, b = params[2 * i], params[2 * i + 1]
            if w.ndim != 2 or w.shape[0] != prev or b.shape != (w.shape[1],):
                raise FormatError(
                    f"bc policy: layer {i} has weights {w.shape} and bias {b.shape}, "
                    f"want ({prev}, n) and (n,)"
                )
            if not (np.isfinite(w).all() and np.isfinite(b).all()):
                raise FormatError(f"bc policy: layer {i} has non-finite weights")
            prev = w.shape[1]
        if action_kind == "continuous" and (
            action_mean is None
            or action_std is None
            or action_mean.shape != (prev,)
            or action_std.shape != (prev,)
        ):
            raise FormatError(
                f"bc policy: continuous actions need action_mean/std of shape ({prev},)"
            )
        self.action_kind: ActionKind = action_kind
        self.obs_dim = int(obs_mean.shape[0])
        self.action_size = int(prev)
        self._params = params
        self._obs_mean = obs_mean
        self._obs_std = obs_std
        self._action_mean = action_mean
        self._action_std = action_std

    def act(self, obs: npt.NDArray[Any]) -> npt.NDArray[np.float32] | int:
        """The action for one observation.

        Args:
            obs: any array with `obs_dim` elements.

        Returns:
            The argmax action (discrete) or the predicted action vector as float32.

        Raises:
            PolicyMismatchError: the observation has the wrong size.
        """
        x = np.asarray(obs, dtype=np.float64).reshape(-1)
        if x.shape[0] != self.obs_dim:
            raise PolicyMismatchError(
                f"bc policy: observation has {x.shape[0]} elements, want {self.obs_dim}"
            )
        out = _forward(self._params, ((x - self._obs_mean) / self._obs_std)[None, :])[-1][0]
        if self.action_kind == "discrete":
            return int(np.argmax(out))
        assert self._action_mean is not None and self._action_std is not None
        action: npt.NDArray[np.float32] = (out * self._action_std + self._action_mean).astype(
            np.float32
        )
        return action


def _field(header: Mapping[str, Any], key: str, typ: type | tuple[type, ...]) -> Any:
    value = header.get(key)
    if not isinstance(value, typ) or isinstance(value, bool):
        raise FormatError(f"checkpoint {HEADER_FILE}: {key!r} is {value!r}, want {typ}")
    return value


def _vector(header: Mapping[str, Any], key: str, size: int) -> F64:
    value = _field(header, key, list)
    if len(value) != size or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        raise FormatError(f"checkpoint {HEADER_FILE}: {key!r} is not {size} numbers")
    return np.asarray(value, dtype=np.float64)


def load_bc_policy(files: Mapping[str, bytes], header: dict[str, Any]) -> BCPolicy:
    """The policy in a ``bc`` checkpoint.

    Args:
        files: the checkpoint files; ``policy.npz`` is read with ``allow_pickle=False``.
        header: the parsed ``trainer.json``.

    Returns:
        The policy.

    Raises:
        FormatError: an unknown format, missing or malformed fields or weights, or weights whose
            shapes do not match the header.
    """
    if header.get("format") != FORMAT:
        raise FormatError(
            f"checkpoint {HEADER_FILE}: format {header.get('format')!r}, want {FORMAT!r}"
        )
    kind = _field(header, "action_kind", str)
    if kind not in ("discrete", "continuous"):
        raise FormatError(
            f"checkpoint {HEADER_FILE}: action_kind {kind!r}, want discrete or continuous"
        )
    obs_dim = _field(header, "obs_dim", int)
    hidden = _field(header, "hidden", int)
    weights_name = _field(header, "weights", str)
    if weights_name not in files:
        raise FormatError(f"checkpoint has no {weights_name} (named by {HEADER_FILE})")
    layers = 2 if hidden else 1
    want = {f"{p}{i}" for i in range(layers) for p in "wb"}
    try:
        with np.load(io.BytesIO(files[weights_name]), allow_pickle=False) as npz:
            if set(npz.files) != want:
                raise FormatError(
                    f"checkpoint {weights_name}: arrays {sorted(npz.files)}, want {sorted(want)}"
                )
            arrays = {name: np.asarray(npz[name], dtype=np.float64) for name in want}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        if isinstance(e, FormatError):
            raise
        raise FormatError(f"checkpoint {weights_name}: not a readable .npz: {e}") from e
    params = [arrays[f"{p}{i}"] for i in range(layers) for p in "wb"]
    if kind == "continuous":
        dim = _field(header, "action_dim", int)
        return BCPolicy(
            "continuous",
            params,
            _vector(header, "obs_mean", obs_dim),
            _vector(header, "obs_std", obs_dim),
            _vector(header, "action_mean", dim),
            _vector(header, "action_std", dim),
        )
    policy = BCPolicy(
        "discrete",
        params,
        _vector(header, "obs_mean", obs_dim),
        _vector(header, "obs_std", obs_dim),
    )
    if policy.action_size != _field(header, "num_actions", int):
        raise FormatError(
            f"checkpoint {weights_name}: {policy.action_size} outputs, "
            f"want num_actions {header['num_actions']}"
        )
    return policy
