"""Episode features kept with each rollout batch: computed once while recording, read by
whatever compares episodes (``dataset create``'s duplicate and contamination checks, the
audit index).

Scope:

- the **features file** (schemas/SPEC.md, "Episode features"): an Arrow IPC file with one row
  per episode of the batch, in step-file order (``episode_id``, ``num_steps``,
  ``fingerprint`` as 32 bytes, ``modality``, ``vector`` float32[128] or null,
  ``safety_interventions``), in record batches of `ROWS_PER_BATCH` episodes; its schema
  metadata ``trajledger.features`` is the JSON ``{"episodes": n, "steps": "<digest of the
  batch's steps.parquet>", "version": FEATURE_VERSION}``. The bytes depend only on the
  features, not on how the steps were read;
- `FeatureRecorder`: fed the validated step batches as recording writes them
  (``write_steps_parquet(on_steps=...)``), it computes the features
  (``ledger.episode_features``), or takes those the parallel reader's workers computed from
  the very columns written (``on_features``, `whole_episode_features`), and writes the
  features file; the rollout-batch predicate names its digest, size and version
  (``features``) and the blob is stored with the batch;
- `batch_features`: a recorded batch's features: the kept file when the signed record names
  one of the current version that hashes to its digest and names the batch's step file; else
  the derived cache (``<ledger>/index/features/``); else computed from the step file's
  verified bytes (and cached). Batches recorded before features were kept (0.1.0 ledgers,
  bundles without the blob) get the same answers, more slowly, the first time. A sealed
  batch (``ledger.sealing``) keeps no features file and its steps are not readable without a
  key: its features are the fingerprints its record publishes (`published_features`), never
  its steps nor a cache;
- `published_episodes` / `published_features`: features as a sealed batch's record publishes
  them (``sealed.episodes``: fingerprint, modality, step count and the vector as 128 float32
  little endian) and back, bit for bit;
- `verified_local_copy` / `private_workdir`: a blob as a local file whose bytes were hashed on
  the way and match its digest (a private copy when it must not change after the check), for
  whatever computes features from a batch's stored bytes.

Why a ledger writer cannot swap a kept file without detection: the file is named by its
SHA-256 in the batch's signed statement, whose envelope is named by digest in a log entry under
the signed checkpoint. A different file has a different digest (refused when read, and the
features are computed from the step file instead, with a warning); naming another file needs a
new statement signed by a producer key and a new log entry, i.e. a new record. The file also
names the step file it was computed from, so a signed record cannot reuse another batch's
file by mistake. What the binding does not give: proof that a producer's features describe its
data. The admission gate therefore never reads them: it computes features from the bytes it
verified (``ledger.contamination.verified_contamination``).

Non-scope: the feature definitions (``ledger.episode_features``), the comparisons
(``ledger.contamination``), the index tables (``ledger.index``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from trajledger.verify.digest import DIGEST_PREFIX, FileDigest, hash_file, parse_digest
from trajledger.verify.errors import DigestMismatchError, FormatError, ProvenanceError

from .episode_features import (
    FEATURE_COLUMNS,
    FEATURE_VERSION,
    FeatureChunk,
    FeatureOrderError,
    FeatureStream,
    iter_step_features,
    parquet_batches,
    whole_episodes,
)
from .episode_vectors import VECTOR_DIM
from .errors import LedgerError, read_failure
from .fs import drop_other_versions, write_file_atomic
from .hashing import copy_hashing

if TYPE_CHECKING:
    from trajledger.verify.predicates import RolloutBatch
    from trajledger.verify.sealed_files import Sealed, SealedEpisode

    from .store import ObjectStore

__all__ = [
    "FEATURES_SCHEMA",
    "METADATA_KEY",
    "ROWS_PER_BATCH",
    "BatchFeatures",
    "FeatureRecorder",
    "batch_features",
    "batch_files",
    "batch_predicate",
    "cache_path",
    "decode_features",
    "encode_features",
    "forget_cached",
    "private_workdir",
    "published_episodes",
    "published_features",
    "steps_file_of",
    "verified_local_copy",
    "whole_episode_features",
]

METADATA_KEY = b"trajledger.features"
"""The schema metadata key of a features file."""

ROWS_PER_BATCH = 4096
"""Episodes per record batch of a features file (fixed, so the bytes are canonical)."""

FEATURES_SCHEMA = pa.schema(
    [
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("num_steps", pa.int64(), nullable=False),
        pa.field("fingerprint", pa.binary(32), nullable=False),
        pa.field("modality", pa.string(), nullable=False),
        pa.field("vector", pa.list_(pa.float32(), VECTOR_DIM)),
        pa.field("safety_interventions", pa.int64()),
    ]
)
"""The columns of a features file (without its metadata)."""

_MODALITIES = ("numeric", "text")


# --------------------------------------------------------------------------------------------
# The file


def _record_batch(chunk: FeatureChunk) -> pa.RecordBatch:
    vectors = pa.FixedSizeListArray.from_arrays(
        pa.array(np.ascontiguousarray(chunk.vectors, dtype=np.float32).reshape(-1), pa.float32()),
        VECTOR_DIM,
        mask=None if np.all(chunk.valid) else pa.array(~np.asarray(chunk.valid, dtype=bool)),
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.array(chunk.episode_ids, pa.string()),
            pa.array(np.asarray(chunk.num_steps, dtype=np.int64), pa.int64()),
            pa.array([bytes.fromhex(f) for f in chunk.fingerprints], pa.binary(32)),
            pa.array(chunk.modality, pa.string()),
            vectors,
            pa.array(chunk.safety, pa.int64()),
        ],
        schema=FEATURES_SCHEMA,
    )


def _metadata(steps: str, episodes: int) -> dict[bytes, bytes]:
    body = {"episodes": episodes, "steps": steps, "version": FEATURE_VERSION}
    return {METADATA_KEY: json.dumps(body, sort_keys=True, separators=(",", ":")).encode()}


def encode_features(chunk: FeatureChunk, steps: str) -> bytes:
    """The features file of a batch's episodes (in step-file order).

    Args:
        chunk: every episode's features.
        steps: the ``sha256:<hex>`` of the step file they were computed from.
    """
    sink = pa.BufferOutputStream()
    schema = FEATURES_SCHEMA.with_metadata(_metadata(steps, len(chunk)))
    with pa.ipc.new_file(sink, schema) as writer:
        for lo in range(0, len(chunk), ROWS_PER_BATCH):
            writer.write_batch(_record_batch(chunk.slice(lo, lo + ROWS_PER_BATCH)))
    return bytes(sink.getvalue().to_pybytes())


def decode_features(data: bytes | pa.Buffer, steps: str) -> FeatureChunk:
    """Read a features file, checking that it describes the step file ``steps`` with the
    current feature definitions.

    Raises:
        FormatError: not a features file, another version, another step file, or a value out
            of range.
    """
    from .rollouts.ipc_read import check_ipc

    # A vendor's features file is read whole: its declared sizes first (a compressed batch
    # is decompressed whole).
    check_ipc(memoryview(data), "features file")
    try:
        reader = pa.ipc.open_file(pa.BufferReader(data))
        table = reader.read_all()
        table.validate(full=True)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise FormatError(f"features file: not an Arrow IPC file ({e})") from e
    info = _header(reader.schema, steps)
    if info.get("episodes") != table.num_rows:
        raise FormatError(
            f"features file: {table.num_rows} rows of {table.schema.names}, want "
            f"{info.get('episodes')!r} rows of {FEATURES_SCHEMA.names}"
        )
    steps_col = _primitive(table.column("num_steps").combine_chunks(), np.int64)
    modality = table.column("modality").to_pylist()
    if table.num_rows and (steps_col.min() < 1 or not set(modality) <= set(_MODALITIES)):
        raise FormatError("features file: an episode without steps or of an unknown modality")
    vec = table.column("vector").combine_chunks()
    valid = np.ones(len(vec), dtype=bool)
    if vec.null_count:
        bits = np.frombuffer(vec.buffers()[0], dtype=np.uint8)
        valid = np.unpackbits(bits, bitorder="little")[vec.offset : vec.offset + len(vec)] == 1
    child = _primitive(vec.values, np.float32)
    values = child[vec.offset * VECTOR_DIM : (vec.offset + len(vec)) * VECTOR_DIM].copy()
    values = values.reshape(len(vec), VECTOR_DIM)
    values[~valid] = 0.0
    if not np.isfinite(values).all():
        raise FormatError("features file: a vector holds a value that is not finite")
    return FeatureChunk(
        table.column("episode_id").to_pylist(),
        steps_col,
        [b.hex() for b in table.column("fingerprint").to_pylist()],
        modality,
        values,
        valid,
        table.column("safety_interventions").to_pylist(),
    )


def feature_columns(path: Path, steps: str, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """``columns`` of the features file at ``path``, one this ledger has just written (of the
    step file ``steps``, the current definitions), a record batch at a time, read through a
    memory map: the pages of the other columns are never read (chat41: `decode_features` of a
    2 GiB chat batch's file took about 1.8 GiB to learn which parts to compare). Not the check
    of a file from elsewhere: that is `decode_features`.

    Raises:
        FormatError: not a features file of ``steps`` with the current definitions.
        OSError: the file could not be read.
    """
    with pa.memory_map(str(path)) as source:
        try:
            reader = pa.ipc.open_file(source)
        except (pa.ArrowException, ValueError) as e:
            raise FormatError(f"features file: not an Arrow IPC file ({e})") from e
        _header(reader.schema, steps)
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i).select(list(columns))


def _header(schema: pa.Schema, steps: str) -> dict[str, Any]:
    """The ``trajledger.features`` metadata of a features file of ``schema``, checked: of the
    step file ``steps``, this `FEATURE_VERSION`, the columns of `FEATURES_SCHEMA` (the one
    check of `decode_features` and `feature_columns`).

    Raises:
        FormatError: anything else.
    """
    meta = (schema.metadata or {}).get(METADATA_KEY)
    try:
        info = json.loads(meta) if meta is not None else None
    except (ValueError, RecursionError):  # nested past the limit: no metadata either (rev29)
        info = None
    if not isinstance(info, dict):
        raise FormatError("features file: no trajledger.features metadata")
    if info.get("version") != FEATURE_VERSION:
        raise FormatError(
            f"features file: feature version {info.get('version')!r}, want {FEATURE_VERSION}"
        )
    if info.get("steps") != steps:
        raise FormatError(
            f"features file: computed from step file {str(info.get('steps'))[:19]}…, want "
            f"{steps[:19]}…"
        )
    if not schema.equals(FEATURES_SCHEMA):
        raise FormatError(f"features file: columns {schema.names}, want {FEATURES_SCHEMA.names}")
    return info


def _primitive(arr: pa.Array, dtype: type[np.generic]) -> npt.NDArray[Any]:
    """The values of an array of numbers, read from its buffer when it has no nulls (nulls:
    NaN or as pyarrow converts them). Not pyarrow's ``to_numpy``, which imports pandas the
    first time it runs: a quarter of a second of a ``dataset create`` that reads kept
    features alone."""
    if arr.null_count:
        return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=dtype)
    size = np.dtype(dtype).itemsize
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * size)


def published_episodes(
    chunk: FeatureChunk, normalised: Mapping[str, str] | None = None
) -> tuple[SealedEpisode, ...]:
    """Features as a sealed batch's record publishes them (``sealed.episodes``), in order:
    the fingerprint, modality and step count, the vector's 128 float32 (little endian,
    base64) where the episode has one, and the ``normalised`` text fingerprint of each text
    episode (episode id -> fingerprint, `text_fingerprint.normalised_of`). The safety counts
    are not published."""
    import base64

    from trajledger.verify.sealed_files import SealedEpisode

    vectors = np.ascontiguousarray(chunk.vectors, dtype="<f4")
    return tuple(
        SealedEpisode(
            eid,
            int(chunk.num_steps[i]),
            chunk.modality[i],
            chunk.fingerprints[i],
            base64.b64encode(vectors[i].tobytes()).decode("ascii") if chunk.valid[i] else None,
            (normalised or {}).get(eid),
        )
        for i, eid in enumerate(chunk.episode_ids)
    )


def published_features(sealed: Sealed) -> FeatureChunk:
    """A sealed batch's published fingerprints as features (what `iter_step_features` gives
    for its plaintext, without the safety counts).

    Raises:
        FormatError: published with other feature definitions than this version's (they
            cannot be compared), or a sketch that is not finite.
    """
    import base64

    if sealed.feature_version != FEATURE_VERSION:
        raise FormatError(
            f"its published fingerprints are of feature version {sealed.feature_version}, "
            f"want {FEATURE_VERSION}: they cannot be compared with this version's"
        )
    episodes = sealed.episodes
    vectors = np.zeros((len(episodes), VECTOR_DIM), dtype=np.float32)
    valid = np.zeros(len(episodes), dtype=bool)
    for i, e in enumerate(episodes):
        if e.sketch is not None:  # 512 bytes of base64: checked when the record was read
            vectors[i] = np.frombuffer(base64.b64decode(e.sketch), dtype="<f4")
            valid[i] = True
    if not np.isfinite(vectors).all():
        raise FormatError("a published sketch holds a value that is not finite")
    return FeatureChunk(
        [e.episode_id for e in episodes],
        np.array([e.steps for e in episodes], dtype=np.int64),
        [e.fingerprint for e in episodes],
        [e.modality for e in episodes],
        vectors,
        valid,
        [None] * len(episodes),
    )


# --------------------------------------------------------------------------------------------
# While recording


def whole_episode_features(steps: pa.RecordBatch) -> FeatureChunk | None:
    """Features of every episode of ``steps``, a batch of whole episodes (a block of the
    parallel reader's records, in its worker: ``ReaderOptions.features``).

    Returns:
        The features as `iter_step_features` gives them (each episode's from its rows alone,
        so the same as in any cut of the step file); None when the steps are not in the order
        features need (such input is refused by the reader's or the schema's checks).
    """
    try:
        return whole_episodes(steps) if steps.num_rows else None
    except FeatureOrderError:
        return None


class FeatureRecorder:
    """Computes a batch's features from its step file's row groups as they are written, or
    takes them as the parallel reader's workers computed them.

    `add` takes each row group, in file order, exactly as stored, while its columns are in
    memory for writing; the features of the episodes it completes are spooled to a temporary
    IPC stream in record batches of `ROWS_PER_BATCH` episodes, so memory holds one row group
    and a few thousand episodes' features, whatever the batch's size. `finish` writes the
    features file once the step file's digest is known. The work runs on the recording
    thread: a worker thread of its own was measured slower (numpy's many short calls fight
    the validation and Parquet threads for the interpreter lock).

    `given` takes instead, chunk by chunk, the features the reader's worker processes computed
    from the columns written (``write_steps_parquet(on_features=...)``): the work then runs
    on the other cores. The first chunk decides: given features from then on (row groups are
    not looked at), or row groups. A chunk given without features after that (its columns
    changed when normalised or written) makes `finish` compute every feature from the stored
    step file instead: the same values (each episode's features depend on its rows alone),
    more slowly.
    """

    def __init__(self, workdir: Path) -> None:
        """Write into ``workdir`` (a private temporary directory, removed by the caller)."""
        self._workdir = workdir
        self._stream = FeatureStream(workdir)  # a long episode's bytes spilled there
        self._held: list[FeatureChunk] = []
        self._spool: pa.ipc.RecordBatchStreamWriter | None = None
        self._episodes = 0
        self._source: str | None = None  # "groups", "given" or "file", once decided

    def add(self, group: pa.Table) -> None:
        """The next row group of the step file, as written.

        Raises:
            FeatureOrderError: steps out of order (schema validation rules that out first).
        """
        if self._source is None:
            self._source = "groups"
        if self._source == "groups":
            self._keep(self._stream.add(group), last=False)

    def given(self, features: FeatureChunk | None) -> None:
        """The features of the next chunk written, computed from its columns as written (None:
        not known for this chunk)."""
        if self._source is None:
            self._source = "given" if features is not None else "groups"
        if self._source == "given":
            if features is None:
                self._source = "file"
            else:
                self._keep(features, last=False)

    def _keep(self, chunk: FeatureChunk | None, *, last: bool) -> None:
        if chunk is not None:
            self._held.append(chunk)
        whole = FeatureChunk.concat(self._held)
        cut = len(whole) if last else len(whole) - len(whole) % ROWS_PER_BATCH
        if self._spool is None:
            self._spool = pa.ipc.new_stream(str(self._workdir / "features.spool"),
                                            FEATURES_SCHEMA)  # fmt: skip
        for lo in range(0, cut, ROWS_PER_BATCH):
            self._spool.write_batch(_record_batch(whole.slice(lo, min(lo + ROWS_PER_BATCH, cut))))
        self._episodes += cut
        self._held = [whole.slice(cut, len(whole))] if cut < len(whole) else []

    def finish(self, steps: str, steps_path: Path | None = None) -> FileDigest:
        """Write the features file (after the last row group).

        Args:
            steps: the digest of the step file the row groups were written to.
            steps_path: that file, read again when a chunk came without its features after
                others came with theirs (needed only when `given` was used).

        Returns:
            The features file, hashed after it was written.

        Raises:
            ValueError: the features must be computed from the step file, and no
                ``steps_path`` was given.
        """
        spool, path = self._workdir / "features.spool", self._workdir / "features.arrow"
        if self._source == "file":
            if steps_path is None:
                raise ValueError("features: some chunks came without them, want steps_path")
            if self._spool is not None:
                self._spool.close()
            self._spool, self._held, self._episodes = None, [], 0
            batches = parquet_batches(steps_path, FEATURE_COLUMNS)
            for chunk in iter_step_features(batches, self._workdir):
                self._keep(chunk, last=False)
        self._keep(self._stream.finish(), last=True)
        assert self._spool is not None
        self._spool.close()
        schema = FEATURES_SCHEMA.with_metadata(_metadata(steps, self._episodes))
        # Read, not mapped: a batch at a time in memory (a mapping's pages count in the
        # process's resident memory, 290 MiB for a 2 GiB chat file's 982,200 episodes).
        with pa.OSFile(str(spool)) as src, pa.ipc.new_file(str(path), schema) as out:
            for batch in pa.ipc.open_stream(src):
                out.write_batch(batch)
        spool.unlink()
        return hash_file(path)


# --------------------------------------------------------------------------------------------
# Reading a recorded batch's features


@dataclass(frozen=True)
class BatchFeatures:
    """A recorded batch's episode features and where they came from.

    Attributes:
        batch: the batch digest.
        chunk: every episode's features in step-file order; None when the batch's data
            cannot be read (missing, erased, damaged).
        source: ``recorded`` (the kept file), ``cache``, ``computed`` (from the step file),
            ``sealed`` (the fingerprints a sealed batch's record publishes) or ``none``.
        problems: what was wrong on the way, one line each (a kept file that does not hash to
            its digest, a step file that cannot be read).
    """

    batch: str
    chunk: FeatureChunk | None
    source: str
    problems: tuple[str, ...] = ()


def batch_files(store: ObjectStore, digest: str) -> dict[str, str]:
    """The ``{path: blob digest}`` of a recorded artifact, from its stored manifest (checked
    against ``digest`` as it is read).

    Raises:
        StoreError / DigestMismatchError / FormatError: the manifest is missing, altered or
            malformed.
    """
    from trajledger.verify.manifest import Manifest
    from trajledger.verify.strict_json import load_object

    manifest = Manifest.from_json(load_object(store.get_verified(digest), "manifest"))
    return {f.path: f.digest for f in manifest.files}


def cache_path(cache: Path, steps: str) -> Path:
    """Where the derived cache keeps the features computed from step file ``steps``."""
    return cache / f"v{FEATURE_VERSION}" / f"{parse_digest(steps, 'step file digest')}.arrow"


def batch_predicate(store: ObjectStore, envelope: str) -> RolloutBatch | None:
    """A batch's rollout-batch predicate, read from its envelope (whose bytes must hash to
    ``envelope``; the signature is not checked: for derived data only). None when the
    envelope is missing, altered or not a rollout batch's.

    Raises:
        StoreError: the disk failed its read (`errors.read_failure`): whether the batch is
            sealed, and which features it keeps, is unknown (lead26).
    """
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.kinds import KINDS
    from trajledger.verify.predicates import RolloutBatch
    from trajledger.verify.statement import Statement

    try:
        statement = Statement.from_bytes(Envelope.from_bytes(store.get_verified(envelope)).payload)
        pred = KINDS["rollout-batch"].read(statement, "rollout-batch")
    except (ProvenanceError, LedgerError) as e:
        if read_failure(e):
            raise
        return None
    return pred if isinstance(pred, RolloutBatch) else None


def forget_cached(cache: Path, steps: str) -> None:
    """Delete the cached features computed from step file ``steps`` (erased data: nothing
    derived from it is kept), of every feature version, and its kept step windows and
    normalised text fingerprints (``window_cache``) of every version, and the held side's
    grouped windows with their filters and stamps (``held_windows``, ``held_filter``: they may
    hold its windows' hashes; grouped again on use)."""
    hexa = parse_digest(steps, "step file digest")
    for old in [*cache.glob(f"v*/{hexa}.arrow"), *cache.glob(f"w*/{hexa}.windows"),
                *cache.glob("w*/held-*.grouped"), *cache.glob("w*/held-*.filter"),
                *cache.glob("w*/held-*.checked")]:
        old.unlink(missing_ok=True)


def steps_file_of(predicate: RolloutBatch) -> tuple[str, int] | None:
    """The digest and size of the batch's ``steps.parquet``, from its inline manifest."""
    if predicate.manifest is None:
        return None
    for f in predicate.manifest.files:
        if f.path == "steps.parquet":
            return f.digest, f.size
    return None


_UNREADABLE = (ProvenanceError, LedgerError, pa.ArrowException, OSError, ValueError, TypeError,
               KeyError)  # fmt: skip
"""Why a batch's data cannot give features (reported, never fatal: the caller decides)."""


def batch_features(
    store: ObjectStore,
    batch: str,
    predicate: RolloutBatch | None,
    *,
    workdir: Path,
    cache: Path | None = None,
) -> BatchFeatures:
    """The episode features of a recorded batch, the cheapest trustworthy way.

    Steps:
        0. A sealed batch: the fingerprints its record publishes (`published_features`);
           nothing else is read (it keeps no features file, its steps are ciphertexts).
        1. The step file: from the predicate's inline manifest, else from the manifest blob
           (re-hashed against the batch digest).
        2. The kept features file, when the predicate names one of the current version: read
           from the store, hashed against the named digest, its size and its step file
           checked. Anything wrong is a problem line, and the next step is taken.
        3. The derived cache (``cache``), when given: a file that reads and names the step
           file.
        4. The step file itself, hashed as it is read, streamed through
           `episode_features.iter_step_features`; the result is cached (best effort).

    Args:
        store: the object store.
        batch: the batch digest.
        predicate: its rollout-batch predicate (read by the caller from its envelope), or
            None when the envelope cannot be read.
        workdir: a private directory for a copy of a remote step file.
        cache: the derived cache directory (``<ledger>/index/features``); None: not used.

    Returns:
        The features, where they came from (``sealed`` for published fingerprints) and the
        problems met.
    """
    short = f"batch {batch[:19]}…"
    kept = ""  # why the kept features file could not be used
    # (0)
    if predicate is not None and predicate.sealed is not None:
        try:
            return BatchFeatures(batch, published_features(predicate.sealed), "sealed")
        except FormatError as e:
            return BatchFeatures(batch, None, "none", (
                f"sealed {short}: {_reason(e)}: its episodes were not compared",))  # fmt: skip
    # (1)
    steps = steps_file_of(predicate) if predicate is not None else None
    if steps is None:
        try:
            steps = (batch_files(store, batch)["steps.parquet"], -1)
        except _UNREADABLE as e:
            if read_failure(e):  # not compared because the disk failed: no finding (lead26)
                raise
            return BatchFeatures(batch, None, "none", (
                f"{short}: its record and manifest cannot be read ({_reason(e)}): its "
                "episodes were not compared",))  # fmt: skip
    digest, size = steps
    # (2)
    ref = predicate.features if predicate is not None else None
    if ref is not None and ref.version == FEATURE_VERSION:
        try:
            stored = store.size(ref.digest)  # checked before reading: the size is signed
            if stored is not None:  # absent (a bundle carries no derived data): computed below,
                if stored != ref.size:  # without a word (out46 finding 9)
                    raise FormatError(f"{stored} bytes, want {ref.size}")
                data = store.get_verified(ref.digest, size=ref.size)
                if len(data) != ref.size:
                    raise FormatError(f"{len(data)} bytes, want {ref.size}")
                return BatchFeatures(batch, decode_features(data, digest), "recorded")
        except _UNREADABLE as e:
            kept = f"its recorded features file {ref.digest[:19]}… cannot be used ({_reason(e)})"
    # (3)
    where = cache_path(cache, digest) if cache is not None else None
    chunk = None
    if where is not None:
        # (imported here: the reader's workers import this module, and `verify.ledger_dir`
        # brings the log's and the signatures' modules and cryptography, which they never use)
        from trajledger.verify.ledger_dir import read_regular

        with contextlib.suppress(OSError, FormatError):
            chunk = decode_features(read_regular(where), digest)  # (a FIFO there: not read)
    source = "cache"
    # (4)
    if chunk is None:
        try:
            chunk, source = _from_steps(store, digest, size, workdir), "computed"
        except _UNREADABLE as e:
            if read_failure(e):
                raise
            why = f"{kept}, and " if kept else ""
            return BatchFeatures(batch, None, "none", (
                f"{short}: {why}its steps.parquet cannot be read ({_reason(e)}): its episodes "
                "were not compared",))  # fmt: skip
        if where is not None:
            _cache(where, encode_features(chunk, digest))
            if not store.exists(digest):  # erased meanwhile: nothing derived kept (rev38)
                where.unlink(missing_ok=True)
    problems = (
        (f"{short}: {kept}: its features were computed from its steps.parquet instead (run "
         "'trajledger fsck')",) if kept else ()
    )  # fmt: skip
    return BatchFeatures(batch, chunk, source, problems)


def _from_steps(store: ObjectStore, digest: str, size: int, workdir: Path) -> FeatureChunk:
    path = verified_local_copy(store, digest, workdir, private=False)
    try:
        if size >= 0 and path.stat().st_size != size:
            raise FormatError(f"{path.stat().st_size} bytes, want {size}")
        chunks = list(iter_step_features(parquet_batches(path, FEATURE_COLUMNS), workdir))
    finally:
        if path.parent == workdir:
            path.unlink(missing_ok=True)
    return FeatureChunk.concat(chunks)


def _cache(where: Path, data: bytes) -> None:
    """Keep computed features (derived data: a cache that cannot be written is no error). The
    first file kept under a `FEATURE_VERSION` deletes the other versions' (`fs.drop_other_versions`:
    no release reads them again)."""
    try:
        if not where.parent.is_dir():
            drop_other_versions(where.parent)
        write_file_atomic(where, data, durable=False)
    except OSError as e:
        if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC):
            raise


def _reason(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


# --------------------------------------------------------------------------------------------
# Verified local copies of blobs


def verified_local_copy(
    store: ObjectStore, digest: str, workdir: Path, *, private: bool = True
) -> Path:
    """A local file holding the blob, whose bytes hashed to ``digest`` as they were read.

    With ``private`` (or a remote store) the blob is copied into ``workdir`` while hashing, so
    the file that is parsed afterwards is the one that was checked: nothing can change it
    between the check and the use. Without ``private``, a local store's file is hashed in place
    and returned (for derived data, where such a race changes nothing that is trusted).

    Raises:
        StoreError: the blob is absent or unreadable.
        DigestMismatchError: its bytes do not hash to ``digest``.
    """
    from .errors import StoreError
    from .store import REMOTE_CHUNK

    want = parse_digest(digest, "object digest")
    if store.is_local and not private:
        path = store.path_of(digest)
        try:
            observed = hash_file(path).digest
        except FileNotFoundError as e:
            raise StoreError(f"object {digest}: not in the store") from e
        except OSError as e:
            raise StoreError(f"object {digest}: cannot read: {e.strerror}") from e
        _check(observed, want, digest)
        return path
    fd, name = tempfile.mkstemp(dir=workdir, prefix="blob-")
    dest = Path(name)
    try:
        with os.fdopen(fd, "wb") as out, store.open_input(digest) as src:
            observed, _ = copy_hashing(src.read, out.write, REMOTE_CHUNK)
        _check(observed, want, digest)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return dest


def _check(observed: str, want: str, digest: str) -> None:
    """``observed`` (``sha256:<hex>``) must be ``want`` (the hex of ``digest``)."""
    if observed != DIGEST_PREFIX + want:
        raise DigestMismatchError(
            f"object {digest[:19]}…: content hashes to {observed[:19]}…, want {digest[:19]}…"
        )


def private_workdir(base: Path | None = None) -> tempfile.TemporaryDirectory[str]:
    """A 0700 temporary directory for verified copies (under ``base`` when given)."""
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix="trajledger-verified-", dir=base)
