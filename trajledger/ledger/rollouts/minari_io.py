"""Minari datasets in and out: reading a dataset directory, writing one that ``minari`` loads.

Scope: `iter_minari_chunks` reads a Minari dataset directory (arrow or hdf5 backend, through
Minari's own storage reader) as `RolloutChunk` objects: one step row per transition, the final
observation and the reset ``info`` of each episode in the episode table, the per-step infos as
typed JSON (an empty info stays ``{}``), observations and actions as space columns (Dict and
Tuple members in structs, every dtype exact: ``space_values.py``), the episode metadata (seed,
options, and what Minari's ``DataCollector`` adds: ``rewards_sum`` / ``mean`` / ``std`` /
``max`` / ``min``, and any other key) kept, and the spaces, environment spec and dataset
metadata (dataset id, author, reference scores, ...) as batch metadata. `write_minari` writes
episodes back as a Minari dataset with Minari's own storage writer (lossless: no JPEG), their
episode metadata included. `unflatten_batch` undoes ``gymnasium.spaces.flatten`` over many
values at once, for the Dict and Tuple values of v2 batches (stored flattened).
Non-scope: downloading datasets (no network: give the directory), Graph/Sequence/OneOf spaces.
Spec: ``schemas/rollout-inputs.md`` section "Minari", ``schemas/rollout.v3.md`` section
"Space columns".

Minari is optional (``pip install 'trajledger[minari]'``: minari, h5py, pillow); it is imported
only here, only when a Minari dataset is read or written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from . import typed_json
from .chunks import CHUNK_BYTES, ReaderOptions, RolloutChunk
from .ipc_read import MAX_RATIO, check_ipc
from .parquet_read import MAX_DECODED_BYTES, MAX_PAGE_BYTES, BombError
from .problems import RolloutValidationError, refusal
from .schema import EPISODE_ATTR_SCHEMA, STEP_SCHEMA, with_columns
from .space_values import in_space_order, space_column
from .spaces import SpaceError, space_to_json

__all__ = [
    "MINARI_EXTRA",
    "check_declared_sizes",
    "dataset_spaces",
    "is_composite",
    "iter_minari_chunks",
    "minari_root",
    "minari_total_steps",
    "require_minari",
    "stack_infos",
    "unflatten_batch",
    "write_minari",
]

MINARI_EXTRA: Final = "pip install 'trajledger[minari]'"

_META_NOT_COPIED: Final = frozenset(
    {
        "observation_space",
        "action_space",
        "env_spec",
        "total_episodes",
        "total_steps",
        "data_format",
        "dataset_size",
        "jpeg_encoding",
    }
)
"""metadata.json keys that are not dataset metadata: spaces and spec are recorded on their own,
counts and sizes are derived, ``jpeg_encoding`` is kept only where it acts (`_meta_of`)."""


def require_minari() -> Any:
    try:
        import minari
    except ImportError as e:
        raise refusal(
            "minari", f"reading or writing Minari datasets needs minari: {MINARI_EXTRA}"
        ) from e
    return minari


def minari_root(path: Path) -> Path | None:
    """The Minari data directory (the one holding ``metadata.json``) at or below ``path``.

    Only the file is looked at (minari is not needed): a ``metadata.json`` naming a
    ``data_format``, in ``path`` or in ``path/data``.
    """
    for root in (path, path / "data"):
        meta = root / "metadata.json"
        if meta.is_file():
            try:
                if '"data_format"' in meta.read_text(encoding="utf-8", errors="replace"):
                    return root
            except OSError:
                return None
    return None


def minari_total_steps(path: Path) -> int | None:
    """The step count a Minari dataset's ``metadata.json`` states (``total_steps``), or None.

    For a progress bar's total only: read without minari and trusted for nothing (the steps
    are counted again as they are read).
    """
    root = minari_root(path)
    if root is None:
        return None
    try:
        meta = json.loads((root / "metadata.json").read_bytes())
    except (OSError, ValueError):
        return None
    total = meta.get("total_steps") if isinstance(meta, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else None


def dataset_spaces(path: Path) -> dict[str, Any]:
    """A Minari dataset's spaces and environment spec, for an environment record.

    Returns:
        ``observation_space``, ``action_space`` and ``env_spec`` (``spaces`` JSON; the spec
        None when the dataset has none).

    Raises:
        RolloutValidationError: not a Minari dataset, or minari is not installed.
        SpaceError: a space that cannot be described.
    """
    from .spaces import canonical_numbers

    root = minari_root(path)
    if root is None:
        raise refusal(path, f"{path}: not a Minari dataset (no metadata.json)")
    storage_cls = require_minari().dataset.minari_storage.MinariStorage
    raw = storage_cls.read_raw_metadata(root)
    storage = _read_storage(storage_cls, root, raw)
    spec = raw.get("env_spec")
    return {
        "observation_space": space_to_json(storage.observation_space),
        "action_space": space_to_json(storage.action_space),
        "env_spec": canonical_numbers(json.loads(spec)) if isinstance(spec, str) else None,
    }


def _read_storage(storage_cls: Any, root: Path, raw: Mapping[str, Any]) -> Any:
    """``MinariStorage.read(root)``, refusing what minari fails on without a word: a
    ``metadata.json`` (written by other tooling than minari's) with neither its spaces nor an
    ``env_spec`` to make them from is an empty ``AssertionError``, and a spec naming an
    environment this Gymnasium cannot make a ``KeyError`` or an import error, a space that is
    not JSON a ``JSONDecodeError`` (out48: ``env register --from-minari`` ended as a bug, exit
    4; ``record`` said ``AssertionError()``).

    Raises:
        RolloutValidationError: it cannot be read so, saying what its metadata lacks.
    """
    lacks = [k for k in ("observation_space", "action_space") if not isinstance(raw.get(k), str)]
    if lacks and not isinstance(raw.get("env_spec"), str):
        raise refusal(root, (
            f"{root / 'metadata.json'}: no {' and no '.join(lacks)} (as minari's "
            f"serialize_space writes them) and no env_spec to make them from: minari cannot "
            f"read the dataset; write them in (minari's DataCollector does), or register the "
            f"environment with --gym-id and record the steps as Parquet or JSON lines"))
    try:
        return storage_cls.read(root)
    except (AssertionError, KeyError, ImportError, AttributeError, TypeError, ValueError) as e:
        # minari makes the environment of its env_spec when the spaces are missing
        raise refusal(root, (
            f"{root / 'metadata.json'}: minari cannot read the dataset ({type(e).__name__}: "
            f"{e}): its env_spec names an environment this Gymnasium cannot make, or its "
            f"spaces are not minari's serialized form; write observation_space and "
            f"action_space in")) from e


def is_composite(space: Any) -> bool:
    """Dict and Tuple spaces: stored as structs in v3, flattened in v2 batches."""
    import gymnasium as gym

    return isinstance(space, gym.spaces.Dict | gym.spaces.Tuple)


def unflatten_batch(space: Any, flat: npt.NDArray[Any]) -> Any:
    """``gymnasium.spaces.unflatten`` of many rows at once (a v2 batch's flattened Dict and
    Tuple values): per-leaf arrays with a leading axis (dicts, tuples)."""
    import gymnasium as gym

    s = gym.spaces
    n = flat.shape[0]
    if isinstance(space, s.Box | s.MultiBinary):
        return flat.astype(space.dtype).reshape(n, *space.shape)
    if isinstance(space, s.Discrete):
        return (np.argmax(flat, axis=1) + int(space.start)).astype(space.dtype)
    if isinstance(space, s.MultiDiscrete):
        nvec = np.asarray(space.nvec).reshape(-1)
        start = np.asarray(space.start).reshape(-1)
        cols, at = [], 0
        for j, k in enumerate(nvec.tolist()):
            cols.append(np.argmax(flat[:, at : at + k], axis=1) + start[j])
            at += k
        return np.stack(cols, axis=1).astype(space.dtype).reshape(n, *space.shape)
    if isinstance(space, s.Dict | s.Tuple):
        items = (
            list(space.spaces.items())
            if isinstance(space, s.Dict)
            else list(enumerate(space.spaces))
        )
        out: list[tuple[Any, Any]] = []
        at = 0
        for key, sub in items:
            width = int(gym.spaces.flatdim(sub))
            out.append((key, unflatten_batch(sub, flat[:, at : at + width])))
            at += width
        return dict(out) if isinstance(space, s.Dict) else tuple(v for _, v in out)
    raise SpaceError(f"space {space} has no flat form")


def _tensor(space: Any, values: Any, n: int, name: str) -> tuple[pa.Array, pa.Field]:
    """A space's values as a space column: dtypes, shapes and Dict / Tuple members kept."""
    try:
        return space_column(in_space_order(space, values), n, name)
    except ValueError as e:
        raise SpaceError(str(e)) from e


def _take(values: Any, sl: slice) -> Any:
    """A slice of a space's values (arrays, dicts and tuples of them)."""
    if isinstance(values, dict):
        return {k: _take(v, sl) for k, v in values.items()}
    if isinstance(values, tuple):
        return tuple(_take(v, sl) for v in values)
    if isinstance(values, list):
        return values[sl]
    return np.asarray(values)[sl]


def _info_at(infos: Any, i: int) -> Any:
    """The info dict at index ``i`` of Minari's stacked infos."""
    if isinstance(infos, dict):
        return {k: _info_at(v, i) for k, v in infos.items()}
    if isinstance(infos, tuple):
        return tuple(_info_at(v, i) for v in infos)
    value = infos[i]
    if isinstance(value, bytes):
        return value
    return value.copy() if isinstance(value, np.ndarray) else value


def _meta_of(raw: Mapping[str, Any], storage: Any) -> dict[str, Any]:
    from .spaces import canonical_numbers

    meta: dict[str, Any] = {
        "format": "minari",
        "observationSpace": space_to_json(storage.observation_space),
        "actionSpace": space_to_json(storage.action_space),
    }
    spec = raw.get("env_spec")
    if isinstance(spec, str):
        meta["envSpec"] = canonical_numbers(json.loads(spec))
    minari_meta: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _META_NOT_COPIED:
            continue
        if key == "eval_env_spec" and isinstance(value, str):
            value = json.loads(value)
        minari_meta[key] = canonical_numbers(value)
    minari_meta["data_format"] = raw.get("data_format")
    # minari 0.5.4 stores image spaces JPEG-encoded unless jpeg_encoding is false: the values
    # read are then the decoded JPEG, not what the environment gave; the record says so.
    jpeg = raw.get("jpeg_encoding")
    if isinstance(jpeg, bool) and any(
        _has_image(s) for s in (storage.observation_space, storage.action_space)
    ):
        minari_meta["jpeg_encoding"] = jpeg
    meta["minari"] = minari_meta
    return meta


def _has_image(space: Any) -> bool:
    """Whether ``space`` is, or holds, what minari stores as an image (``is_image_space``)."""
    import gymnasium as gym
    from minari.dataset.minari_storage import is_image_space

    if isinstance(space, gym.spaces.Dict):
        return any(_has_image(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return any(_has_image(s) for s in space.spaces)
    return bool(is_image_space(space))


def iter_minari_chunks(root: Path, batch_rows: int, opts: ReaderOptions) -> Iterator[RolloutChunk]:
    """Read a Minari dataset (its data directory) as chunks of about ``batch_rows`` steps.

    Args:
        root: the directory holding the dataset's ``metadata.json``.
        batch_rows: target rows per chunk (an episode is never split).
        opts: the episode id prefix (episode ids are ``<prefix><minari id>``).

    Yields:
        `RolloutChunk` objects; the first carries the batch metadata.

    Raises:
        RolloutValidationError: minari is not installed, the dataset cannot be read, or a space
            cannot be recorded.
    """
    minari = require_minari()
    subject = str(root)
    try:
        raw = minari.dataset.minari_storage.MinariStorage.read_raw_metadata(root)
        check_declared_sizes(root, str(raw.get("data_format")))
        storage = _read_storage(minari.dataset.minari_storage.MinariStorage, root, raw)
        meta: dict[str, Any] | None = _meta_of(raw, storage)
        total = int(storage.total_episodes)
        episodes = storage.get_episodes(range(total))
        ep_meta = storage.get_episode_metadata(range(total))
        obs_space, act_space = storage.observation_space, storage.action_space
        pending: list[tuple[dict[str, Any], dict[str, Any]]] = []
        rows = held = 0
        for ep, em in zip(episodes, ep_meta, strict=True):
            pending.append((ep, em))
            rows += len(ep["rewards"])
            held += _nbytes(ep["observations"]) + _nbytes(ep["actions"])
            if rows >= batch_rows or held >= CHUNK_BYTES:
                yield _chunk(pending, obs_space, act_space, opts, meta)
                meta, pending, rows, held = None, [], 0, 0
        if pending or meta is not None:
            yield _chunk(pending, obs_space, act_space, opts, meta)
    except RolloutValidationError:
        raise  # said already (`_read_storage`)
    except (SpaceError, typed_json.TypedJSONError, _SeedError, BombError) as e:
        raise refusal(subject, f"{root}: {e}") from e
    except (OSError, ValueError, KeyError, AssertionError, OverflowError) as e:
        # (OverflowError: minari's HDF5 storage takes `int` of an infinite seed)
        raise refusal(subject, f"{root}: Minari dataset cannot be read: {e!r}") from e


def check_declared_sizes(root: Path, data_format: str) -> None:
    """Refuse a Minari dataset whose data declare far more than they store, before minari
    reads an episode whole: an HDF5 dataset states its shape and the bytes it holds (chunks
    never written hold nothing and read as zeros), an Arrow file its compressed batches'
    sizes (`ipc_read.check_ipc`). Past `MAX_PAGE_BYTES` declared, a dataset, or the file, that
    declares over `ipc_read.MAX_RATIO` times what it stores is refused, as is a dataset over
    `MAX_DECODED_BYTES` declared.

    Raises:
        BombError: the sizes above.
    """
    if data_format == "arrow":
        for path in sorted(root.rglob("*.arrow")):
            with pa.memory_map(str(path)) as source:
                check_ipc(memoryview(source.read_buffer()), f"{path.relative_to(root)}")
        return
    if data_format != "hdf5" or not (root / "main_data.hdf5").is_file():
        return  # minari refuses what it cannot read
    import h5py

    totals = [0, 0]

    def visit(name: str, node: Any) -> None:
        if not isinstance(node, h5py.Dataset) or node.dtype.kind == "O":
            return
        declared, stored = int(node.size) * node.dtype.itemsize, int(node.id.get_storage_size())
        totals[0] += declared
        totals[1] += stored
        if _bomb(declared, stored):
            raise BombError(
                f"main_data.hdf5: dataset {name!r} declares {declared:,} bytes "
                f"({node.shape} {node.dtype}) and stores {stored:,}: refused as a possible "
                "decompression bomb"
            )

    with h5py.File(root / "main_data.hdf5", "r") as f:
        f.visititems(visit)
    declared, stored = totals
    if _bomb(declared, stored):
        raise BombError(
            f"main_data.hdf5: its datasets declare {declared:,} bytes and store {stored:,}: "
            "refused as a possible decompression bomb"
        )


def _bomb(declared: int, stored: int) -> bool:
    """Whether ``declared`` bytes, of which ``stored`` are held, pass for a bomb."""
    return declared > MAX_DECODED_BYTES or (
        declared > MAX_PAGE_BYTES and declared > MAX_RATIO * max(stored, 1)
    )


class _SeedError(ValueError):
    """An episode's seed that is no int64 integer."""


def _seed(seed: Any, eid: str) -> int | None:
    """An episode's seed as int64 (an integral float taken as its integer, as `int` took it;
    `int` truncated 1.5 to 1 and raised OverflowError past int64 or for an infinity)."""
    if isinstance(seed, float | np.floating) and float(seed).is_integer():
        seed = int(seed)
    if seed is None or (
        isinstance(seed, int | np.integer) and not isinstance(seed, bool)
        and -(1 << 63) <= int(seed) < (1 << 63)
    ):  # fmt: skip
        return None if seed is None else int(seed)
    raise _SeedError(f"episode {eid}: seed {seed}, want an integer within int64")


def _nbytes(values: Any) -> int:
    """Bytes held by a space's values (arrays, and dicts and tuples of them)."""
    if isinstance(values, dict):
        return sum(_nbytes(v) for v in values.values())
    if isinstance(values, tuple | list) and values and not isinstance(values[0], str | bytes):
        return sum(_nbytes(v) for v in values)
    return int(getattr(values, "nbytes", 0))


def _chunk(
    pending: Sequence[tuple[dict[str, Any], dict[str, Any]]],
    obs_space: Any,
    act_space: Any,
    opts: ReaderOptions,
    meta: Mapping[str, Any] | None,
) -> RolloutChunk:
    step_cols: dict[str, list[Any]] = {
        k: []
        for k in ("episode_id", "step", "is_first", "is_last", "terminated", "truncated", "reward")
    }
    obs_parts, act_parts, final_parts, infos = [], [], [], []
    attrs: dict[str, list[Any]] = {
        k: [] for k in ("episode_id", "seed", "final_obs", "reset_info", "extras")
    }
    obs_field = act_field = final_field = None
    for ep, em in pending:
        n = len(ep["rewards"])
        eid = f"{opts.id_prefix}{ep['id']}"
        step_cols["episode_id"] += [eid] * n
        step_cols["step"] += list(range(n))
        step_cols["is_first"] += [i == 0 for i in range(n)]
        step_cols["is_last"] += [i == n - 1 for i in range(n)]
        step_cols["terminated"] += np.asarray(ep["terminations"], dtype=bool).tolist()
        step_cols["truncated"] += np.asarray(ep["truncations"], dtype=bool).tolist()
        step_cols["reward"] += np.asarray(ep["rewards"], dtype=np.float64).tolist()
        obs, obs_field = _tensor(obs_space, _take(ep["observations"], slice(0, n)), n, "obs")
        act, act_field = _tensor(act_space, ep["actions"], n, "action")
        fin, final_field = _tensor(
            obs_space, _take(ep["observations"], slice(n, n + 1)), 1, "final_obs"
        )
        obs_parts.append(obs)
        act_parts.append(act)
        final_parts.append(fin)
        ep_infos = ep.get("infos")  # {} when the steps had empty infos: kept as {}
        infos += [
            None if ep_infos is None else typed_json.dumps(_info_at(ep_infos, i + 1))
            for i in range(n)
        ]
        attrs["episode_id"].append(eid)
        attrs["seed"].append(_seed(em.get("seed"), eid))
        attrs["reset_info"].append(
            None if ep_infos is None else typed_json.dumps(_info_at(ep_infos, 0))
        )
        rest = {k: v for k, v in em.items() if k not in ("id", "seed", "total_steps")}
        attrs["extras"].append(
            [(k, typed_json.dumps(v)) for k, v in sorted(rest.items())] if rest else None
        )
    total = len(step_cols["step"])
    fields = {"obs": obs_field, "action": act_field}
    schema = with_columns(
        STEP_SCHEMA,
        [f for f in fields.values() if f is not None],
    )
    arrays: list[pa.Array] = []
    for f in schema:
        if f.name in step_cols:
            arrays.append(pa.array(step_cols[f.name], type=f.type))
        elif f.name == "obs" and obs_parts:
            arrays.append(pa.concat_arrays(obs_parts))
        elif f.name == "action" and act_parts:
            arrays.append(pa.concat_arrays(act_parts))
        elif f.name == "info":
            arrays.append(pa.array(infos, type=pa.string()))
        else:
            arrays.append(pa.nulls(total, f.type))
    steps = pa.RecordBatch.from_arrays(arrays, schema=schema)
    ep_schema = pa.schema(
        [
            EPISODE_ATTR_SCHEMA.field("episode_id"),
            EPISODE_ATTR_SCHEMA.field("seed"),
            final_field if final_field is not None else EPISODE_ATTR_SCHEMA.field("final_obs"),
            EPISODE_ATTR_SCHEMA.field("reset_info"),
            EPISODE_ATTR_SCHEMA.field("extras"),
        ]
    )
    ep_arrays = [
        pa.array(attrs["episode_id"], pa.string()),
        pa.array(attrs["seed"], pa.int64()),
        pa.concat_arrays(final_parts) if final_parts else pa.nulls(0, ep_schema[2].type),
        pa.array(attrs["reset_info"], pa.string()),
        pa.array(attrs["extras"], EPISODE_ATTR_SCHEMA.field("extras").type),
    ]
    return RolloutChunk(steps, pa.RecordBatch.from_arrays(ep_arrays, schema=ep_schema), meta)


def stack_infos(dicts: Sequence[Any], where: str) -> Any:
    """Per-step info dicts stacked leaf by leaf, as Minari stores infos."""
    first = dicts[0]
    if isinstance(first, dict):
        keys = list(first)
        for d in dicts:
            if not isinstance(d, dict) or list(d) != keys:
                raise ValueError(
                    f"{where}: info keys change within the episode ({sorted(first)} and "
                    f"{sorted(d) if isinstance(d, dict) else type(d).__name__}); Minari needs "
                    "the same keys at every step"
                )
        return {k: stack_infos([d[k] for d in dicts], f"{where}.{k}") for k in keys}
    if isinstance(first, tuple):
        return tuple(stack_infos([d[i] for d in dicts], f"{where}[{i}]") for i in range(len(first)))
    if isinstance(first, str):
        return list(dicts)
    stacked = np.stack([np.asarray(d) for d in dicts])
    if stacked.ndim == 1:
        # Scalars as a list of numpy scalars: Minari's arrow backend writes a stacked 1-d
        # array with an empty shape it cannot read back.
        return list(stacked)
    return stacked


def write_minari(
    out: Path,
    episodes: Iterator[dict[str, Any]],
    *,
    observation_space: Any,
    action_space: Any,
    env_spec: Mapping[str, Any] | None,
    metadata: Mapping[str, Any],
    data_format: str = "hdf5",
) -> None:
    """Write episodes as a Minari dataset in ``out`` (``out/data/metadata.json`` and data).

    Written with Minari's own storage writer, without JPEG (lossless).

    Args:
        out: the dataset directory to create (must not exist, or be empty).
        episodes: dicts with ``seed``, ``options``, ``observations`` (n+1 values, per-leaf
            arrays), ``actions``, ``rewards``, ``terminations``, ``truncations``, ``infos``,
            and ``metadata`` (the episode's other metadata, as Minari stores it).
        observation_space: the Gymnasium observation space.
        action_space: the Gymnasium action space.
        env_spec: the environment spec (``spaces.spec_to_json``), or None.
        metadata: dataset metadata (``dataset_id``, ``author``, ...); ``dataset_id`` required.
        data_format: ``hdf5`` or ``arrow``.

    Raises:
        RolloutValidationError: minari is not installed.
        ValueError: the data does not fit Minari (e.g. info keys that change within an episode).
    """
    minari = require_minari()
    from gymnasium.envs.registration import EnvSpec
    from minari.data_collector import EpisodeBuffer

    spec = None
    if env_spec is not None:
        try:
            spec = EnvSpec.from_json(json.dumps(env_spec))
        except (TypeError, ValueError, KeyError):
            spec = None
    storage = minari.dataset.minari_storage.MinariStorage.new(
        out.resolve() / "data",  # absolute: Minari's size count joins paths it globbed
        observation_space=observation_space,
        action_space=action_space,
        env_spec=spec,
        data_format=data_format,
        jpeg_encoding=False,
    )
    meta = dict(metadata)
    for key in ("author", "author_email"):
        if isinstance(meta.get(key), list | tuple):
            meta[key] = set(meta[key])
        elif isinstance(meta.get(key), str):
            meta[key] = {meta[key]}
    if isinstance(meta.get("eval_env_spec"), dict):
        meta["eval_env_spec"] = json.dumps(meta["eval_env_spec"])
    meta["minari_version"] = minari.__version__
    storage.update_metadata(meta)
    written: list[dict[str, Any]] = []

    def buffers() -> Iterator[Any]:
        for ep in episodes:
            extra = dict(ep.get("metadata") or {})
            written.append(extra if data_format == "hdf5" else _plain_numbers(extra))
            yield EpisodeBuffer(
                id=None,
                seed=ep.get("seed"),
                options=ep.get("options"),
                observations=ep["observations"],
                actions=ep["actions"],
                rewards=list(ep["rewards"]),
                terminations=list(ep["terminations"]),
                truncations=list(ep["truncations"]),
                infos=ep.get("infos"),
            )

    storage.update_episodes(buffers())
    if any(written):  # what Minari's DataCollector adds (rewards_sum, ...), and the rest
        storage.update_episode_metadata(written, range(len(written)))


def _plain_numbers(value: Any) -> Any:
    """Numpy scalars as Python numbers: the arrow backend writes episode metadata as JSON."""
    if isinstance(value, dict):
        return {k: _plain_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_plain_numbers(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value
