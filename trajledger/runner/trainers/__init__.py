"""Trainer plug-ins: the interface the runner trains through, and how trainers are found.

Scope: the `Trainer` and `Policy` protocols, the values passed across them (`TrainingData`,
`TrainResult`), discovery of trainers (the built-ins plus the entry points of group
``trajledger.trainers``), loading a policy from a checkpoint a built-in trainer wrote, and the
errors of these steps.
Non-scope: admission (the runner verifies the data before it builds a `TrainingData`; trainers
never read files), signing and recording checkpoints (the runner), running a policy in an
environment (`runner.rollouts`). Spec: ``docs/trainers.md``.

This module imports neither numpy nor pyarrow at start-up: the CLI can import it cheaply, and
only a command that trains or rolls out pays for them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from trajledger.ledger.errors import LedgerError
from trajledger.ledger.progress import ProgressFactory, no_progress
from trajledger.verify.errors import FormatError, ProvenanceError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

__all__ = [
    "BUILTIN_TRAINERS",
    "ENTRY_POINT_GROUP",
    "HEADER_FILE",
    "Policy",
    "PolicyMismatchError",
    "TrainResult",
    "Trainer",
    "TrainerConfigError",
    "TrainerPluginError",
    "TrainingData",
    "TrainingDataError",
    "UnknownTrainerError",
    "available_trainers",
    "check_result",
    "load_policy",
    "load_trainer",
]

ENTRY_POINT_GROUP: Final = "trajledger.trainers"
"""Entry point group a distribution registers its trainers under."""

BUILTIN_TRAINERS: Final[Mapping[str, str]] = {"bc": "trajledger.runner.trainers.bc:BCTrainer"}
"""Built-in trainers by name, as ``module:attribute`` (imported only when asked for)."""

HEADER_FILE: Final = "trainer.json"
"""The small JSON file of a checkpoint that names the trainer that wrote it."""

_POLICY_LOADERS: Final[Mapping[str, str]] = {"bc": "trajledger.runner.trainers.bc:load_bc_policy"}


class UnknownTrainerError(LedgerError, ValueError):
    """No built-in trainer and no installed plug-in has the requested name.

    Attributes:
        name: the name asked for.
        available: the names that exist, sorted.
    """

    def __init__(self, name: str, available: list[str]) -> None:
        super().__init__(
            f"trainer {name!r} is not installed; available: {', '.join(available) or 'none'}"
        )
        self.name = name
        self.available = available


class TrainerPluginError(LedgerError):
    """A trainer plug-in is installed but cannot be used (import fails, wrong shape, clash)."""


class TrainerConfigError(FormatError):
    """A trainer configuration has an unknown key, or a value of the wrong type or range."""


class TrainingDataError(FormatError):
    """Verified data that this trainer cannot learn from (missing columns, ragged vectors, ...)."""


class PolicyMismatchError(ProvenanceError, ValueError):
    """A policy and what it is given do not fit: wrong observation size, invalid action."""


@dataclass(frozen=True)
class TrainingData:
    """The verified rollouts a trainer learns from, exactly the bytes the runner admitted.

    Attributes:
        steps: the step table (``ledger.rollouts.schema.STEP_SCHEMA``) of every admitted batch.
        episodes: the episode table (``EPISODE_SCHEMA``) of the same batches.
        progress: how a long run shows how far it is: ``with data.progress(total, label) as
            advance:`` then ``advance(n)`` as work is done (an epoch, a step). The command
            line draws it as a bar on stderr (none under ``-q`` or off a terminal); a library
            caller's default draws nothing. A trainer need not use it.
    """

    steps: pa.Table
    episodes: pa.Table
    progress: ProgressFactory = no_progress


@dataclass(frozen=True)
class TrainResult:
    """What a trainer hands back; the runner stores, signs and records it.

    Attributes:
        files: checkpoint files by relative name (``/``-separated), their exact bytes.
        metrics: scalar training metrics, recorded in the checkpoint's provenance.
        config: the effective configuration, defaults filled in.
    """

    files: dict[str, bytes]
    metrics: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)


def check_result(trainer: str, result: object) -> None:
    """What a trainer handed back can be recorded: a `TrainResult` of at least one file,
    each named by a relative ``/``-separated path (no ``..``, none also a directory of another)
    and given as bytes. Checked before any file is written: a name such as ``../x`` or
    ``/abs/x`` was written outside the run's temporary directory before the record refused it,
    no file at all recorded an empty checkpoint (exit 0), and text for bytes was a bug (trn35).

    Raises:
        TrainerPluginError: it cannot (nothing is written or recorded).
    """
    from trajledger.verify.manifest import check_path

    files = result.files if isinstance(result, TrainResult) else None
    problem = ("returned no TrainResult" if files is None else
               "returned no file: there is no checkpoint to record" if not files else None)
    dirs = {n[:i] for n in files or {} if isinstance(n, str) for i, c in enumerate(n) if c == "/"}
    for name, data in (files or {}).items():
        try:
            check_path(name, f"file name {name!r}")
        except FormatError as e:
            problem = str(e)
        if problem is None and not isinstance(data, bytes | bytearray | memoryview):
            problem = f"file {name!r} is a {type(data).__name__}, want bytes"
        if problem is None and name in dirs:
            problem = f"file name {name!r} is also a directory of another file"
        if problem is not None:
            break
    if problem is not None:
        raise TrainerPluginError(f"trainer {trainer!r}: {problem}; nothing was recorded")


@runtime_checkable
class Trainer(Protocol):
    """A training algorithm. Implementations must be deterministic given data, config and seed.

    A trainer may also define ``check_config(config) -> dict``, raising `TrainerConfigError`
    for a bad config: the runner then calls it before admission, so a typo fails in
    milliseconds instead of after every batch was read and verified.

    Attributes:
        name: the name it is registered under (entry point name or built-in name).
    """

    name: str

    def train(self, data: TrainingData, config: Mapping[str, Any], seed: int) -> TrainResult:
        """Train on verified data.

        Args:
            data: the admitted step and episode tables.
            config: trainer-specific settings; unknown keys should be refused.
            seed: the only source of randomness.

        Returns:
            The checkpoint files, metrics and the effective configuration.
        """
        ...


class Policy(Protocol):
    """Something that chooses an action for an observation."""

    def act(self, obs: npt.NDArray[Any]) -> npt.NDArray[np.float32] | int:
        """Choose an action.

        Args:
            obs: one observation, as the environment returns it.

        Returns:
            An ``int`` for a discrete action space, else a float32 array of the action's shape.
        """
        ...


def _import_target(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """Installed trainer entry points by name; a built-in name cannot be taken over."""
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN_TRAINERS:
            # A plug-in must not silently replace the trainer a checkpoint's provenance names.
            continue
        seen = found.get(ep.name)
        if seen is not None and seen.value != ep.value:
            raise TrainerPluginError(
                f"trainer {ep.name!r} is registered twice: {seen.value} and {ep.value}"
            )
        found[ep.name] = ep
    return found


def available_trainers() -> list[str]:
    """Names of the built-in and installed trainers, sorted.

    Raises:
        TrainerPluginError: two installed distributions register one name differently.
    """
    return sorted({*BUILTIN_TRAINERS, *_entry_points()})


def load_trainer(name: str) -> Trainer:
    """The trainer registered under ``name``.

    Built-ins win over plug-ins of the same name. An entry point may name a class (instantiated
    without arguments) or an instance; either way the result must have ``name == name`` and a
    ``train`` method.

    Args:
        name: a built-in name (``bc``) or an entry point name in group ``trajledger.trainers``.

    Returns:
        A ready trainer.

    Raises:
        UnknownTrainerError: nothing has that name; the message lists what is available.
        TrainerPluginError: the plug-in cannot be imported or is not a trainer.
    """
    if name in BUILTIN_TRAINERS:
        obj = _import_target(BUILTIN_TRAINERS[name])
        origin = BUILTIN_TRAINERS[name]
    else:
        eps = _entry_points()
        if name not in eps:
            raise UnknownTrainerError(name, sorted({*BUILTIN_TRAINERS, *eps}))
        origin = eps[name].value
        try:
            obj = eps[name].load()
        except (ImportError, AttributeError) as e:
            raise TrainerPluginError(f"trainer {name!r} ({origin}) cannot be loaded: {e}") from e
    trainer = obj() if isinstance(obj, type) else obj
    if not isinstance(trainer, Trainer):
        raise TrainerPluginError(
            f"trainer {name!r} ({origin}) is of type {type(trainer).__name__!r}, "
            "want a trainer class or object (with `name` and `train`)"
        )
    if trainer.name != name:
        raise TrainerPluginError(
            f"trainer {name!r} ({origin}) calls itself {trainer.name!r}, want {name!r}"
        )
    return trainer


def load_policy(files: Mapping[str, bytes]) -> Policy:
    """The policy in a checkpoint written by a built-in trainer.

    Args:
        files: the checkpoint's files by relative name; ``trainer.json`` names the trainer.

    Returns:
        The policy, ready to act.

    Raises:
        FormatError: no ``trainer.json``, a malformed one, a trainer with no built-in policy
            loader, or checkpoint files that do not match their header.
    """
    from trajledger.verify.strict_json import load_object

    if HEADER_FILE not in files:
        raise FormatError(
            f"checkpoint has no {HEADER_FILE} (files: {', '.join(sorted(files)) or 'none'})"
        )
    header = load_object(files[HEADER_FILE], f"checkpoint {HEADER_FILE}")
    trainer = header.get("trainer")
    if not isinstance(trainer, str) or trainer not in _POLICY_LOADERS:
        raise FormatError(
            f"checkpoint {HEADER_FILE}: trainer {trainer!r} has no built-in policy loader; "
            f"want one of {', '.join(sorted(_POLICY_LOADERS))}"
        )
    loader: Callable[[Mapping[str, bytes], dict[str, Any]], Policy] = _import_target(
        _POLICY_LOADERS[trainer]
    )
    return loader(files, header)
