"""Writers back out: a recorded rollout batch as a Minari dataset, or as plain Parquet / JSONL.

Scope: `export_rollouts` takes the verified bytes of a batch's ``steps.parquet`` and
``episodes.parquet`` (schema v1, v2 or v3) and its record (spaces, spec, source metadata) and
writes:

- ``minari``: a Minari dataset directory (``OUT/data/metadata.json`` + hdf5 or arrow data) that
  ``minari.MinariDataset(OUT/data)`` loads: observations (with each episode's final one),
  actions, rewards, terminations, truncations, infos, spaces, spec, dataset metadata and each
  episode's metadata (what Minari's ``DataCollector`` wrote: ``rewards_sum``, ...).
  Observations of Dict/Tuple spaces are a v3 batch's structs as they are (every dtype exact),
  or a v2 batch's flattened values unflattened with the recorded space.
- ``parquet``: ``OUT/steps.parquet`` and ``OUT/episodes.parquet``, the tables as recorded with
  map columns written as lists of ``{key, value}`` (what Parquet stores; readers without map
  support read them): pandas, polars, DuckDB and Hugging Face ``datasets`` read them directly.
- ``jsonl``: ``OUT/steps.jsonl`` and ``OUT/episodes.jsonl``, one JSON object per row; tensors as
  flat lists, timestamps as ISO 8601, maps as objects, ``info``/``extras`` values as JSON.

Recording the parquet export again (``record OUT/steps.parquet --episodes
OUT/episodes.parquet``), or the Minari export (with the backend it was read from), gives the
same batch files; recording the jsonl export gives the same values (JSON keeps numbers exactly,
not their dtypes or shapes).
Non-scope: reading the ledger (the caller verifies the blobs), evidence bundles
(``ledger.exchange``).
Spec: ``schemas/rollout.v3.md`` section "Export".
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import typed_json
from .minari_io import is_composite, stack_infos, unflatten_batch, write_minari
from .parquet_read import read_parquet
from .schema import tensor_shape
from .space_values import column_values
from .spaces import SpaceError, space_from_json, space_to_json

__all__ = ["EXPORT_FORMATS", "ExportError", "ExportResult", "export_rollouts"]

EXPORT_FORMATS: Final = ("minari", "parquet", "jsonl")


class ExportError(ValueError):
    """The batch cannot be written in the asked format (the message says why and what to do)."""


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote.

    Attributes:
        out: the output directory.
        files: the files written, relative to ``out``.
        episodes: episodes written.
        steps: steps written.
    """

    out: Path
    files: tuple[str, ...]
    episodes: int
    steps: int


def _read(data: bytes, name: str) -> pa.Table:
    return read_parquet(data, name=f"the batch's {name}")


def export_rollouts(
    steps_data: bytes,
    episodes_data: bytes,
    record: Mapping[str, Any],
    out: Path,
    fmt: str,
    *,
    environment: Mapping[str, Any] | None = None,
    minari_format: str = "hdf5",
    dataset_id: str | None = None,
) -> ExportResult:
    """Write a batch in ``fmt`` into the new directory ``out``.

    Steps:
      1. Check the format and that ``out`` does not exist yet (its parent must).
      2. Read both tables from the given (verified) bytes.
      3. Write the format into a temporary directory beside ``out``, then rename it: a failed
         export leaves nothing.

    Args:
        steps_data: the batch's ``steps.parquet`` bytes.
        episodes_data: its ``episodes.parquet`` bytes.
        record: the batch predicate (spaces, spec, ``source.minari`` metadata).
        out: the directory to create.
        fmt: one of `EXPORT_FORMATS`.
        environment: the environment predicate, for spaces the batch does not record.
        minari_format: ``hdf5`` or ``arrow`` (Minari's backends).
        dataset_id: the Minari dataset id; default the source dataset's, else
            ``trajledger/<batch name>-v0``.

    Returns:
        What was written.

    Raises:
        ExportError: the format does not fit the data (no final observations or rewards for
            Minari, non-finite numbers for JSON, info keys that change within an episode).
        FileExistsError: ``out`` exists.
        FileNotFoundError: ``out``'s parent does not exist.
    """
    # (1)
    if fmt not in EXPORT_FORMATS:
        raise ExportError(f"export format {fmt!r} is unknown, want one of {EXPORT_FORMATS}")
    if out.exists():
        raise FileExistsError(f"{out}: exists; give a new directory")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"{out.parent}: no such directory")
    # (2)
    steps, episodes = _read(steps_data, "steps.parquet"), _read(episodes_data, "episodes.parquet")
    # (3)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.mkdir()
    try:
        if fmt == "minari":
            files = _minari(
                steps, episodes, record, environment or {}, tmp, minari_format, dataset_id
            )
        elif fmt == "parquet":
            files = _parquet(steps, episodes, tmp)
        else:
            files = _jsonl(steps, episodes, tmp)
        os.replace(tmp, out)
    except BaseException:
        _rmtree(tmp)
        raise
    return ExportResult(out, files, episodes.num_rows, steps.num_rows)


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Plain files


def _plain(table: pa.Table) -> pa.Table:
    """Maps as lists of {key, value}; everything else as recorded."""
    fields, columns = [], []
    for f, col in zip(table.schema, table.columns, strict=True):
        if pa.types.is_map(f.type):
            t = pa.list_(
                pa.struct([pa.field("key", f.type.key_type), pa.field("value", f.type.item_type)])
            )
            rows = [None if r is None else [{"key": k, "value": v} for k, v in r]
                    for r in col.to_pylist()]  # fmt: skip
            col = pa.chunked_array([pa.array(rows, type=t)], type=t)
            f = pa.field(f.name, t, nullable=f.nullable, metadata=f.metadata)
        fields.append(f)
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=table.schema.metadata))


def _parquet(steps: pa.Table, episodes: pa.Table, out: Path) -> tuple[str, ...]:
    for name, table in (("steps.parquet", steps), ("episodes.parquet", episodes)):
        pq.write_table(_plain(table), out / name, compression="zstd")
    return ("steps.parquet", "episodes.parquet")


def _json_value(name: str, v: Any, where: str) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        raise ExportError(
            f"{where}: {name} holds {v!r}, which JSON cannot; export as parquet instead"
        )
    if isinstance(v, dt.datetime):
        return v.isoformat().replace("+00:00", "Z")
    if isinstance(v, list):
        return [_json_value(name, x, where) for x in v]
    if isinstance(v, dict):  # a Dict or Tuple space value (members by name)
        return {k: _json_value(name, x, where) for k, x in v.items()}
    return v


def _jsonl(steps: pa.Table, episodes: pa.Table, out: Path) -> tuple[str, ...]:
    for name, table in (("steps.jsonl", steps), ("episodes.jsonl", episodes)):
        with open(out / name, "w", encoding="utf-8") as f:
            row_no = 0
            for batch in table.to_batches(max_chunksize=4096):
                try:  # (a time past the year 9999: rev43 finding 4)
                    rows = batch.to_pylist()
                except (OverflowError, ValueError) as e:
                    raise ExportError(f"{name}: {e}: a time outside the years 1 to 9999, which "
                                      "ISO 8601 text cannot hold; export as parquet instead"
                                      ) from None
                for row in rows:
                    obj: dict[str, Any] = {}
                    for key, v in row.items():
                        if v is None:
                            continue
                        where = f"{name} row {row_no}"
                        if key in ("judge_scores",):
                            v = {k: _json_value(key, x, where) for k, x in v}
                        elif key == "extras":
                            v = {k: json.loads(x) for k, x in v}
                        elif key in ("info", "reset_info"):
                            v = json.loads(v)
                        else:
                            v = _json_value(key, v, where)
                        obj[key] = v
                    f.write(json.dumps(obj, ensure_ascii=False, allow_nan=False) + "\n")
                    row_no += 1
    return ("steps.jsonl", "episodes.jsonl")


# ---------------------------------------------------------------------------------------------
# Minari


def _space(record: Mapping[str, Any], env: Mapping[str, Any], key: str, field: pa.Field) -> Any:
    desc = record.get(key) or env.get(key)
    if desc is not None:
        try:
            return space_from_json(desc)
        except SpaceError as e:
            raise ExportError(f"the recorded {key} cannot be read: {e}") from e
    # No space recorded (a v1 batch): an unbounded Box of the tensor's type and shape.
    import gymnasium as gym

    if not pa.types.is_list(field.type):
        raise ExportError(f"the batch records no {key} for its {field.name}; Minari needs a space")
    shape = tensor_shape(field)
    if shape is None:
        raise ExportError(
            f"the batch records no {key} and its {field.name} has no fixed shape; Minari needs "
            "a space"
        )
    dtype = field.type.value_type.to_pandas_dtype()
    if np.issubdtype(dtype, np.floating):
        low, high = -np.inf, np.inf
    else:
        info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None
        low, high = (info.min, info.max) if info is not None else (0, 1)
    return gym.spaces.Box(low, high, shape, dtype)


def _values(space: Any, flat: np.ndarray) -> Any:
    """Rows of a tensor column back to a space's values (per-leaf arrays)."""
    if is_composite(space):
        return unflatten_batch(space, flat)
    return flat.astype(space.dtype).reshape(flat.shape[0], *space.shape)


def _episode_rows(steps: pa.Table) -> Iterator[tuple[str, int, int]]:
    ids = steps.column("episode_id").to_pylist()
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[start]:
            yield ids[start], start, i
            start = i


def _space_rows(space: Any, col: pa.Array, field: pa.Field, what: str) -> Any:
    """Rows of a space column as the space's stacked values (dtype and shape exact)."""
    if col.null_count:
        raise ExportError(f"{what}: {col.null_count} value(s) are null; Minari needs every one")
    if not pa.types.is_list(col.type):  # v3: a struct (Dict, Tuple) or strings (Text)
        return column_values(col, field)
    flat = np.asarray(pc.list_flatten(col).to_numpy(zero_copy_only=False)).reshape(len(col), -1)
    return _values(space, flat)  # a tensor, or a v2 batch's flattened Dict or Tuple


def _minari(
    steps: pa.Table,
    episodes: pa.Table,
    record: Mapping[str, Any],
    env: Mapping[str, Any],
    out: Path,
    data_format: str,
    dataset_id: str | None,
) -> tuple[str, ...]:
    if "final_obs" not in episodes.column_names:
        raise ExportError(
            "the batch has no final observations (rollout schema 1): Minari needs each "
            "episode's observations including the last; record it again with schema 3"
        )
    if steps.column("reward").null_count:
        raise ExportError("some steps have no reward; Minari needs a reward for every step")
    obs_field, act_field = steps.schema.field("obs"), steps.schema.field("action")
    obs_space = _space(record, env, "observationSpace", obs_field)
    act_space = _space(record, env, "actionSpace", act_field)
    by_id = {eid: i for i, eid in enumerate(episodes.column("episode_id").to_pylist())}
    seeds = episodes.column("seed").to_pylist()
    finals = episodes.column("final_obs")
    reset_infos = episodes.column("reset_info").to_pylist()
    extras = episodes.column("extras").to_pylist()
    has_info = "info" in steps.column_names

    def episodes_iter() -> Iterator[dict[str, Any]]:
        for eid, start, end in _episode_rows(steps):
            where = f"episode {eid!r}"
            k = by_id[eid]
            n = end - start
            observed = pa.concat_arrays(
                [*steps.column("obs").slice(start, n).chunks, *finals.slice(k, 1).chunks]
            )
            observations = _space_rows(obs_space, observed, obs_field, f"{where}: obs")
            act = steps.column("action").slice(start, n).combine_chunks()
            actions = _space_rows(act_space, act, act_field, f"{where}: action")
            step_infos = steps.column("info").slice(start, end - start).to_pylist() if has_info \
                else [None] * (end - start)  # fmt: skip
            infos = None
            if reset_infos[k] is not None or any(x is not None for x in step_infos):
                dicts = [typed_json.loads(t) if t is not None else {} for t in
                         [reset_infos[k], *step_infos]]  # fmt: skip
                try:
                    infos = stack_infos(dicts, f"{where}: info")
                except ValueError as e:
                    raise ExportError(str(e)) from e
            ex = {key: typed_json.loads(text) for key, text in extras[k] or []}
            yield {
                "seed": seeds[k],
                "options": ex.pop("options", None),
                "metadata": ex,  # rewards_sum, ... as Minari wrote them, and any other key
                "observations": observations,
                "actions": actions,
                "rewards": steps.column("reward").slice(start, end - start).to_pylist(),
                "terminations": steps.column("terminated").slice(start, end - start).to_pylist(),
                "truncations": steps.column("truncated").slice(start, end - start).to_pylist(),
                "infos": infos,
            }

    source = dict((record.get("source") or {}).get("minari") or {})
    source.pop("data_format", None)
    source.pop("minari_version", None)
    source.pop("jpeg_encoding", None)  # written raw (write_minari): the values as recorded
    if dataset_id is not None:
        source["dataset_id"] = dataset_id
    source.setdefault("dataset_id", "trajledger/rollouts-v0")
    spec = record.get("envSpec") or env.get("envSpec")
    space_to_json(obs_space)  # a space that cannot be described cannot be written either
    write_minari(
        out,
        episodes_iter(),
        observation_space=obs_space,
        action_space=act_space,
        env_spec=spec,
        metadata=source,
        data_format=data_format,
    )
    return tuple(sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()))
