"""The step windows and normalised text fingerprints of a batch computed while it is
recorded, so that the first ``dataset create`` of it reads them kept instead of computing
them (issue 21 item 1; win39).

Scope: `computed` (before the record's commit: what ``dataset create`` would compute for
the batch on the train side, `window_cache.compute` with the parts `window_cache.compared_parts`
of its features and not ``held``), `kept` (into the derived cache after the commit, the same
file and binding as ``dataset create`` writes: ``window_cache.keep``, named by the step file's
digest, of `window_cache.WINDOWS_VERSION`, its body hashed in its header). Where from (win40):
the columns of the row groups as they were written (`Written`), when they can be shown to be
the arrays the step file gives read back, else that file (in the page cache); a text batch read
by the reader's workers (chat, TRL, verl) takes the normalised fingerprints they computed
beside the features (`given_features`, `Given`), whatever its size. Other batches of more
than `RECORD_STEPS` steps are left to ``dataset create``: their windows cost more than their
recording (2.2-2.4 CPU-s at 1,000,000 steps against about 2 for a ``trajledger record`` of
them, issue 21 item 6; twice their recording in process at 65,536 steps); a sealed batch has
none (``dataset create`` reads what its record publishes).

Trust: the derived cache's, unchanged (``window_cache``): the file is read only when it names
the step file, is of this version and its body hashes to its header's digest; anything else is
computed again from the verified step file, with a warning. A crash between the commit and
`kept` leaves the batch without kept windows: ``dataset create`` computes them, as for a batch
recorded before this (by an older tree). A file already there is left as it is (another
record of the same step file, or the held side's, which holds more parts); none is left for a
step file erased between the commit and the write (nothing derived from erased data is kept).

Non-scope: the definitions (``step_windows``, ``text_fingerprint``), the comparison
(``contamination``), the admission gate (it never reads the cache).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from trajledger.verify.errors import ProvenanceError

from .batch_features import feature_columns
from .episode_features import FeatureChunk, parquet_batches
from .errors import LedgerError, read_failure
from .rollouts.chunks import CHUNK_BYTES

if TYPE_CHECKING:
    from .home import LedgerHome
    from .text_fingerprint import Pairs
    from .window_cache import Compared

__all__ = ["RECORD_STEPS", "Given", "Written", "computed", "given_features", "kept"]

RECORD_STEPS = 16_384
"""The most steps a batch has for its windows to be computed while it is recorded: about a
tenth of a ``trajledger record`` process at this size (2 to 3.5 CPU-us a step, against 0.45
CPU-s a process and about 1 CPU-us a step; in process, without the interpreter's start,
they cost 50 to 70 % of a ``record_batch`` of 8,400 steps: win39's run in
docs/PERFORMANCE.md, "The windows at record time"). Larger batches are left to
``dataset create``."""


class Written:
    """The columns `window_cache.compute` reads of a step file, taken from its row groups as
    they are written (``write_steps_parquet(on_steps=...)``), so that `computed` need not
    read the file back and decode it (win40): at most `RECORD_STEPS` rows and
    `chunks.CHUNK_BYTES` of them (else nothing is held, and the file is read).

    `read` gives the record batches `episode_features.parquet_batches` would read of the
    file, the same arrays cut at the same rows, or the file's own when that cannot be shown
    from the file's footer and the arrays (`_as_read`)."""

    def __init__(self) -> None:
        self.groups: list[pa.Table] | None = []
        self.rows = self.bytes = 0
        self.normalised: Pairs | None = None
        """The normalised fingerprints the reader's workers gave (`given`), in file order, as
        bytes (chat42: as Python strings, 220 MiB of a 2 GiB chat file's record); None when a
        chunk came without them, or none came (`computed` reads the file)."""
        self.chunks = 0

    def tee(self, then: Callable[[pa.Table], None]) -> Callable[[pa.Table], None]:
        """A row group hook that holds its columns here, then calls ``then``."""

        def both(group: pa.Table) -> None:
            self.add(group)
            then(group)

        return both

    def add(self, group: pa.Table) -> None:
        """The next row group of the step file, as written."""
        self.rows += group.num_rows
        if self.groups is None or self.rows > RECORD_STEPS:
            self.groups = None  # (memory: a large batch's columns are not held)
            return
        from .step_windows import WINDOW_COLUMNS  # (not for a large batch: 10-25 ms)
        from .text_fingerprint import NORMALISED_COLUMNS

        read = {*WINDOW_COLUMNS, *NORMALISED_COLUMNS}
        part = group.select([c for c in group.schema.names if c in read])
        self.bytes += part.nbytes
        self.groups = [*self.groups, part] if self.bytes <= CHUNK_BYTES else None

    def read(self, path: Path, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
        """The record batches of ``columns`` of the step file at ``path`` (`window_cache.Read`)."""
        try:
            got = None if self.groups is None else _as_read(self.groups, path, columns)
        except (pa.ArrowException, ValueError, TypeError):  # (not shown the same: the file's)
            got = None
        return iter(got) if got is not None else parquet_batches(path, columns)

    def given(self, then: Callable[[Any], None]) -> Callable[[Any], None]:
        """A features hook (``write_steps_parquet(on_features=...)``) that holds the
        normalised fingerprints of each chunk's `Given`, then calls ``then`` with its
        features (None: not known for a chunk, and the fingerprints none from then on)."""

        def both(got: Any) -> None:
            known = isinstance(got, Given) and got.normalised is not None
            if not known:
                self.normalised = None
            elif not self.chunks:
                from .text_fingerprint import Pairs

                self.normalised = Pairs()
            if known and self.normalised is not None:
                self.normalised.add(got.features.episode_ids, got.normalised)
            self.chunks += 1
            then(got.features if isinstance(got, Given) else got)

        return both


@dataclass(frozen=True)
class Given:
    """What a reader's worker computes of a block of whole episodes (`given_features`): their
    features, and the normalised text fingerprint of each (``""``: none, as
    `text_fingerprint.normalised_fingerprints` gives none for an episode without text outside
    system rows), or None when not computed. Sliced and joined as the features are
    (``reader_process._kept_features``)."""

    features: FeatureChunk
    normalised: list[str] | None

    @property
    def num_steps(self) -> npt.NDArray[np.int64]:
        """Each episode's steps (the features')."""
        return self.features.num_steps

    def slice(self, a: int, b: int) -> Given:
        """Episodes ``a`` to ``b``."""
        return Given(self.features.slice(a, b),
                     None if self.normalised is None else self.normalised[a:b])

    @staticmethod
    def concat(chunks: Sequence[Given]) -> Given:
        """The episodes of ``chunks``, in order."""
        normalised = [c.normalised for c in chunks]
        return Given(FeatureChunk.concat([c.features for c in chunks]),
                     None if None in normalised else [x for n in normalised for x in n or ()])


def given_features(steps: pa.RecordBatch) -> Given | None:
    """``ReaderOptions.features`` of the recorder (in the reader's workers: win40): the
    features of a block's episodes (`batch_features.whole_episode_features`) and their
    normalised text fingerprints, computed from the steps as they are mapped (a file read back
    holds the same values: `write_steps_parquet` gives a chunk's features only when its
    columns were written as they are), so that `computed` reads nothing for a text batch of
    any size. The fingerprints are None when an episode id is there twice (the record is
    refused then)."""
    from .batch_features import whole_episode_features
    from .text_fingerprint import NORMALISED_COLUMNS, normalised_fingerprints

    features = whole_episode_features(steps)
    if features is None:
        return None
    ids = features.episode_ids
    if len(set(ids)) != len(ids):
        return Given(features, None)
    try:
        got = dict(normalised_fingerprints([steps.select(
            [c for c in NORMALISED_COLUMNS if c in steps.schema.names])]))
    except (pa.ArrowException, ValueError, TypeError):  # derived: never a reason to fail a block
        return Given(features, None)
    return Given(features, [got.get(e, "") for e in ids])


def _as_read(groups: list[pa.Table], path: Path, columns: Sequence[str]) -> list[
        pa.RecordBatch] | None:
    """The batches ``rollouts.parquet_read.iter_parquet`` reads of ``columns`` of the file at
    ``path`` written from ``groups``, or None when their sameness is not shown: each field
    (type and metadata) as the file's footer gives it, the rows those of its row groups, cut
    as the reader cuts them (`iter_parquet`'s batch of 65,536 rows; the held columns are under
    `CHUNK_BYTES`, so never cut by their bytes), and every array of no dictionary and no null
    list or struct (whose hidden values a file read back would not have)."""
    import pyarrow.parquet as pq  # (not at the top: the reader's workers import this module)

    with pq.ParquetFile(path) as f:  # (its footer only)
        meta, file = f.metadata, f.schema_arrow
    table = pa.concat_tables(groups) if groups else None
    names = [c for c in columns if c in file.names]
    if table is None or table.num_rows != meta.num_rows or any(
            c not in table.schema.names or not _renamed(table.schema.field(c), file.field(c))
            for c in names):
        return None
    table = table.select(names)
    out, at = [], 0
    for g in range(meta.num_row_groups):
        n = meta.row_group(g).num_rows
        for lo in range(0, n, _BATCH_ROWS):
            part = table.slice(at + lo, min(_BATCH_ROWS, n - lo)).combine_chunks()
            batch = pa.RecordBatch.from_arrays(
                [(pa.concat_arrays(c.chunks) if c.num_chunks else pa.array([], c.type)).cast(
                    file.field(name).type) for name, c in zip(names, part.columns, strict=True)],
                schema=pa.schema([file.field(c) for c in names], metadata=file.metadata))
            if not all(_plain(c) for c in batch.columns):
                return None
            out.append(batch)
        at += n
    return out


_BATCH_ROWS = 65_536  # `rollouts.parquet_read.iter_parquet`'s default ``batch_rows``


def _renamed(a: pa.Field, b: pa.Field) -> bool:
    """Whether fields ``a`` (written) and ``b`` (read back) are of one name, nullability,
    metadata and type but for the names of their lists' values (``item`` is read back as
    ``element``): a cast between them is a renaming."""
    if a.name != b.name or a.nullable != b.nullable or (a.metadata or {}) != (b.metadata or {}):
        return False
    s, t = a.type, b.type
    for kind in (pa.types.is_list, pa.types.is_large_list):
        if kind(s) and kind(t):
            return _renamed(s.value_field.with_name("v"), t.value_field.with_name("v"))
    if pa.types.is_fixed_size_list(s) and pa.types.is_fixed_size_list(t):
        return s.list_size == t.list_size and _renamed(s.value_field.with_name("v"),
                                                       t.value_field.with_name("v"))
    if pa.types.is_struct(s) and pa.types.is_struct(t):
        return s.num_fields == t.num_fields and all(
            _renamed(s.field(i), t.field(i)) for i in range(s.num_fields))
    return bool(s == t)


def _plain(arr: pa.Array) -> bool:
    """Whether ``arr`` has no dictionary and no null list or struct, at any depth."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return False
    if pa.types.is_struct(t):
        return not arr.null_count and all(_plain(arr.field(i)) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return not arr.null_count and _plain(arr.flatten())
    return not pa.types.is_nested(t)


def computed(steps_path: Path, features: Path, steps: str, num_steps: int,
             written: Written | None = None) -> Compared | Pairs | None:
    """What ``dataset create`` compares of the batch being recorded on the train side,
    computed from its step file ``steps_path`` (digest ``steps``; its columns as ``written``
    holds them, when it does) and its features file ``features`` (the parts it needs); None
    when it has more than `RECORD_STEPS` steps, nothing to compare by windows or text, or when
    it cannot be computed here (then ``dataset create`` computes it, and says why). A text
    batch whose fingerprints the workers gave: those (`text_fingerprint.Pairs`), kept as they
    are held.

    Raises:
        OSError: the system failed to read those files (or an error raised from that,
            `errors.read_failure`: EIO, EACCES): nothing is committed yet; an operational
            error, as any other read of recording's.
    """
    given = None if written is None else written.normalised
    if num_steps > RECORD_STEPS and given is None:
        return None  # (and step_windows not imported: 10-25 ms)
    from .window_cache import compute

    try:
        parts = _parts(features, steps)
        if not any(parts):
            return None
        if parts == (True, False) and given is not None:  # the workers' (win40)
            return given
        if num_steps > RECORD_STEPS:
            return None
        return compute(steps_path, (*parts, False), *(() if written is None else (written.read,)))
    except (ProvenanceError, LedgerError, OSError, ValueError, TypeError, KeyError) as e:
        if read_failure(e):  # the system failed a read of the files being recorded: exit 3
            raise
        return None  # derived data: never a reason to refuse a record


def _parts(features: Path, steps: str) -> tuple[bool, bool]:
    """`window_cache.compared_parts` of the batch whose features file is at ``features``,
    from its two columns alone, a record batch at a time (`batch_features.feature_columns`):
    a chat batch's whole file decoded cost about 1 MiB a MiB of input (chat41)."""
    import pyarrow.compute as pc

    from .step_windows import WINDOW

    text = numeric = False
    for b in feature_columns(features, steps, ("modality", "num_steps")):
        modality, num_steps = b.column(0), b.column(1)
        text = text or pc.any(pc.equal(modality, "text")).as_py() is True
        numeric = numeric or pc.any(pc.and_(pc.equal(modality, "numeric"), pc.greater_equal(
            num_steps, WINDOW))).as_py() is True
    return text, numeric


def kept(ledger: LedgerHome, steps: str, got: Compared | Pairs | None) -> None:
    """Keep ``got`` (`computed`) in the derived cache of ``ledger`` for step file ``steps``,
    unless a file is there already; none when the step file was erased meanwhile (an erasure
    deletes the blob, then its derived files: `status.delete_erased`, under the log's lock,
    which the record no longer holds here)."""
    if got is None:
        return
    from .window_cache import cache_file, keep

    cache = ledger.cache_dir / "features"
    try:
        where = cache_file(cache, steps)
        if where.exists():
            return
        keep(cache, steps, got)
        if not ledger.store.exists(steps):  # erased since the commit: nothing derived kept
            where.unlink(missing_ok=True)
    except (OSError, ProvenanceError, LedgerError):  # derived: computed at dataset create
        return
