"""The audit index's LanceDB tables under ``<ledger>/index/lance/``, kept up incrementally.

Scope: `Index` follows the log (``artifacts``: one row per entry, added by every public
method) and indexes a batch's episodes the first time a question needs that batch
(``episodes``: `Index.index_batches`), with the features kept with the batch since it was
recorded (``ledger.batch_features``), so indexing reads ``episodes.parquet`` and a small
features file, not the steps. Everything runs under a lock shared with other processes; an
interrupted update is rolled back or the index rebuilt; a ledger whose index directory cannot
be written is queried through a temporary copy. `query_table` and `reindex` are the library
calls behind ``trajledger query`` and ``trajledger reindex``.

Non-scope: verification (nothing is verified against the index; see the package docstring),
statistics (``index.stats``), duplicate checks (``ledger.contamination``).
lancedb is imported only when a table is opened (`Index._connect`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import tempfile
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trajledger.verify.errors import FormatError
from trajledger.verify.kinds import NAMED as NAMED_KINDS
from trajledger.verify.ledger_dir import read_regular
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.merkle import leaf_hash

from ..batch_features import (
    batch_features,
    batch_files,
    batch_predicate,
    private_workdir,
    verified_local_copy,
)
from ..catalog import Catalog, RefError
from ..episode_features import (
    FeatureChunk,
    parquet_batches,
)
from ..errors import LedgerError
from ..fs import drop_stale_temps, write_file_atomic
from ..progress import ProgressFactory
from ..rollouts.success import batch_labels_success
from .rows import UNUSABLE, UNUSABLE_BATCH, aligned, artifact_row, episode_table, statement_of
from .schema import (
    ARTIFACTS,
    ARTIFACTS_SCHEMA,
    EPISODES,
    EPISODES_SCHEMA,
    INDEX_FORMAT,
    NAMED_SQL,
    PENDING,
    QueryError,
    one_expression,
    sql_list,
    sql_message,
)

if TYPE_CHECKING:
    from ..home import LedgerHome

__all__ = ["Index", "IndexUpdate", "query_table", "reindex"]

_FLUSH_EPISODES = 50_000
_READ_ONLY_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)
"""Why an index directory cannot be written (then it is read in place, changed in a copy)."""
_STATE_BYTES = 1 << 16
"""The most read of ``state.json`` (a few hundred bytes): more is not one this index wrote."""
_ENTRY_CHUNK = 256


def _compact(table: Any) -> None:
    """Merge small fragments and drop old table versions (each update adds some)."""
    import datetime as dt
    import warnings

    with warnings.catch_warnings():
        # LanceDB warns that concurrent users of old versions would fail; there are none:
        # every reader and writer of the index holds its lock.
        warnings.simplefilter("ignore", UserWarning)
        table.optimize(cleanup_older_than=dt.timedelta(0))


_SCALAR_INDEXES: dict[str, tuple[tuple[str, str], ...]] = {
    ARTIFACTS: (("digest", "BTree"), ("kind", "Bitmap")),
    EPISODES: (("batch", "BTree"),),
}
"""The columns every lookup filters on, by table, and the kind of scalar index for each."""

_INDEX_MIN_ROWS = 10_000
"""Tables smaller than this are scanned: an index would cost more than it saves."""


def _ensure_scalar_indexes(table: Any, name: str) -> None:
    """Index the filtered columns of a table grown past `_INDEX_MIN_ROWS` (once: `_compact`
    brings the indexes up to date with the rows added since, which are scanned until then).

    Without them each lookup of a batch or a dataset scans the whole table, one row per log
    entry: about 25 ms at 100,000 entries, against 4 ms with them (bench/scale_bench.py)."""
    wanted = _SCALAR_INDEXES.get(name, ())
    if not wanted or table.count_rows() < _INDEX_MIN_ROWS:
        return
    import lancedb.index

    # Only faster lookups: a failure (a full disk) leaves the table scanned, as before.
    with contextlib.suppress(OSError, RuntimeError, ValueError):
        have = {column for index in table.list_indices() for column in index.columns}
        for column, kind in wanted:
            if column not in have:
                table.create_index(column, config=getattr(lancedb.index, kind)(), replace=True)


class _Sink:
    """Artifact rows waiting to be written, and status changes for rows already written."""

    def __init__(self, artifacts: Any, episodes: Any) -> None:
        self.artifacts, self.episodes = artifacts, episodes
        self.rows: list[dict[str, Any]] = []
        self.revoked: set[str] = set()
        self.erased: set[str] = set()
        self.batches = 0
        self._seen: set[str] = set()

    def mark_duplicates(self, rows: Sequence[dict[str, Any]]) -> None:
        """Batch rows whose digest an earlier entry already holds become ``duplicate`` (the
        episodes are indexed once, with the first entry). One query per chunk of entries."""
        new = sorted({r["digest"] for r in rows if r["kind"] == "rollout-batch"} - self._seen)
        if new:
            where = f"kind = 'rollout-batch' AND digest IN ({sql_list(new)})"
            found = self.artifacts.search().where(where).select(["digest"]).limit(None)
            self._seen.update(found.to_arrow().column("digest").to_pylist())
        for r in rows:
            if r["kind"] != "rollout-batch":
                continue
            if r["digest"] in self._seen:
                r["data"] = "duplicate"
            self._seen.add(r["digest"])

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if row["kind"] == "rollout-batch":
            self.batches += 1

    def flag(self, kind: str, digest: str) -> None:
        """A revocation or erasure of ``digest``: applied to pending rows now, to written ones
        at the next flush. Erasure also drops the batch's episode rows."""
        for r in self.rows:
            if r["digest"] == digest and r["kind"] in NAMED_KINDS:
                if kind == "revocation":
                    r["revoked"] = True
                else:
                    r.update(erased=True, data="erased")
                    if r["kind"] == "rollout-batch":
                        r["episodes_indexed"] = 0
        (self.revoked if kind == "revocation" else self.erased).add(digest)

    def flush(self) -> None:
        if self.rows:
            self.artifacts.add(pa.Table.from_pylist(self.rows, schema=ARTIFACTS_SCHEMA))
        if self.revoked:
            self.artifacts.update(
                where=f"digest IN ({sql_list(sorted(self.revoked))}) AND kind IN ({NAMED_SQL})",
                values={"revoked": True},
            )
        if self.erased:
            gone = sql_list(sorted(self.erased))
            self.artifacts.update(
                where=f"digest IN ({gone}) AND kind IN ({NAMED_SQL})",
                values={"erased": True, "data": "erased"},
            )
            self.artifacts.update(
                where=f"digest IN ({gone}) AND kind = 'rollout-batch'",
                values={"episodes_indexed": 0},
            )
            self.episodes.delete(f"batch IN ({gone})")
        self.rows, self.revoked, self.erased = [], set(), set()


def _not_regular(root: Path) -> Path | None:
    """The first entry under ``root`` that is neither a directory nor a regular file (a FIFO,
    a device, a symbolic link), read with ``lstat``; None when there is none."""
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            with contextlib.suppress(FileNotFoundError):  # (removed meanwhile)
                mode = os.lstat(os.path.join(top, name)).st_mode
                if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                    return Path(top, name)
    return None


def _rows_by(table: pa.Table, key: str) -> dict[Any, list[str]]:
    """A table's rows grouped by column ``key``, each group's rows as sorted JSON texts."""
    out: dict[Any, list[str]] = {}
    for row in table.to_pylist():
        out.setdefault(row[key], []).append(json.dumps(row, sort_keys=True, default=str))
    return {k: sorted(v) for k, v in out.items()}


# --------------------------------------------------------------------------------------------
# The index


def _lists(table: Any, message: str) -> str:
    """What to do when LanceDB refused a filter for comparing a list column with a value (its
    line names ``List(Utf8)``, not the column): which columns hold lists, and ``array_has``
    (out48: the auditor's ``datasets LIKE '%…%'`` for "which checkpoints used this dataset?")."""
    if "List(" not in message:
        return ""
    lists = [f.name for f in table.schema if pa.types.is_list(f.type)]
    if not lists:  # the episodes' only list is `vector`, the near-duplicate features
        return "; 'vector' holds the near-duplicate features, not a value to filter on"
    return (f"; {', '.join(lists)} hold lists: a row whose list holds a value is "
            f"array_has(COLUMN, 'VALUE'), e.g. \"array_has({lists[-1]}, 'sha256:…')\" "
            f"(docs/audit-index.md)")


@contextlib.contextmanager
def _no_progress(total: int, label: str) -> Iterator[Callable[[int], None]]:
    yield lambda n: None


@dataclass(frozen=True)
class IndexUpdate:
    """What an update did: log entries ``start .. end`` indexed, and the batches whose episodes
    were indexed during the call."""

    start: int
    end: int
    rebuilt: bool
    batches: int
    episodes: int

    @property
    def entries(self) -> int:
        """How many log entries were indexed."""
        return self.end - self.start


class Index:
    """The audit index of one ledger, in ``<ledger>/index/lance/``.

    Two levels, both incremental: the ``artifacts`` table follows the log (one row per entry,
    brought up to date by every public method), and a batch's episode rows are added the first
    time something asks about that batch (`index_batches`; ``query episodes`` without a batch
    restriction asks about every batch). So ``dataset create`` and the contamination check
    index only the batches they compare. Everything runs under a lock shared with other
    processes. Nothing is verified against the index (see the module docstring).
    """

    def __init__(
        self,
        ledger: LedgerHome,
        *,
        progress: ProgressFactory | None = None,
        note: Callable[[str], None] | None = None,
    ) -> None:
        """Attach to a ledger; nothing is read until a method is called.

        Args:
            ledger: the ledger.
            progress: shows progress while batches are indexed (``clikit.progress``).
            note: told once when the index has to be brought up to date in a temporary copy
                because the ledger's cannot be written (see `_to_scratch`).
        """
        self.ledger = ledger
        self.dir = ledger.root / "index" / "lance"
        self.state_path = self.dir / "state.json"
        self.progress: ProgressFactory = progress or _no_progress
        self.note = note
        self._db: Any = None
        self._depth = 0
        self._tmp_root = ledger.root / "tmp"
        self._features_cache: Path | None = ledger.root / "index" / "features"
        self._read_only = False
        self._scratch: Callable[[], Any] | None = None  # removes the temporary copy

    def _move_to(self, where: Path, tmp: Path) -> None:
        """Work on the index in the directory ``where`` (a temporary one), temporary files in
        ``tmp``, no features kept (computed again: the cache is the ledger's to keep)."""
        self.dir, self.state_path = where, where / "state.json"
        self._tmp_root, self._features_cache = tmp, None
        self._db = None

    # -- state and locking ----------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the index's lock (reentrant). An index directory that cannot be written (a
        read-only copy of a ledger) is read in place under a shared lock, when it has a lock
        file, and the first change it needs is made in a temporary copy (`_to_scratch`)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        fd = self._open_lock()
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_SH if self._read_only else fcntl.LOCK_EX)
            self._depth = 1
            yield
        finally:
            self._depth = 0
            if fd is not None:
                os.close(fd)

    def _open_lock(self) -> int | None:
        """The lock file, open for writing; or, when the index directory cannot be written,
        read-only mode and the lock file open for reading (None when there is none)."""
        if not self._read_only:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                return os.open(self.dir / "index.lock", os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                if e.errno not in _READ_ONLY_ERRNOS:
                    raise
                self._read_only = True
        try:
            return os.open(self.dir / "index.lock", os.O_RDONLY)
        except OSError:
            return None

    def _to_scratch(self) -> None:
        """Continue in a private temporary copy of the index (deleted when this object is),
        because the ledger's index directory cannot be written: the index is derived data, so
        a read-only ledger is still queried, and nothing is written to it.

        Nothing has been changed yet when this is called, so the copy holds what was read.
        """
        tmp = Path(tempfile.mkdtemp(prefix="trajledger-index-"))
        self._scratch = weakref.finalize(self, shutil.rmtree, tmp, ignore_errors=True)
        where = tmp / "lance"
        where.mkdir()
        for src in sorted(self.dir.rglob("*")) if self.dir.is_dir() else []:
            dst = where / src.relative_to(self.dir)
            if src.is_dir():
                dst.mkdir(exist_ok=True)
            elif src.is_file() and src.name != "index.lock":
                shutil.copyfile(src, dst)
        if self.note is not None:
            self.note(
                f"the audit index in {self.dir} cannot be written; it is brought up to date "
                "in a temporary copy for this command (run 'trajledger reindex' where the "
                "ledger can be written to keep one)"
            )
        self._move_to(where, tmp / "tmp")
        self._read_only = False

    def _connect(self) -> Any:
        if self._db is None:
            import lancedb

            if (odd := _not_regular(self.dir)) is not None:
                self._drop_tables(odd)
            self._db = lancedb.connect(str(self.dir))
        return self._db

    def _drop_tables(self, odd: Path) -> None:
        """The index holds ``odd``, neither a directory nor a regular file (lance makes none):
        a FIFO there made lance wait for ever, a link to ``/dev/zero`` read until memory ran
        out or ended the command with exit 2 (left22, Left). Derived data: the tables are
        dropped before lance opens them, so they are built again (in a temporary copy of the
        regular files when the directory cannot be written: `_to_scratch`)."""
        if self.note is not None:
            self.note(f"the audit index holds {odd}, not a regular file: it is built again")
        if self._read_only:
            self._to_scratch()
            return
        for table in (ARTIFACTS, EPISODES):
            shutil.rmtree(self.dir / f"{table}.lance", ignore_errors=True)

    def _table(self, name: str) -> Any:
        """The table, or None when it is absent or cannot be opened (then it is rebuilt)."""
        try:
            table = self._connect().open_table(name)
            table.count_rows()
        except (ValueError, OSError, RuntimeError):
            return None
        return table

    def _read_state(self) -> dict[str, Any] | None:
        try:
            # (not waiting on a FIFO planted there, nor reading a device: left22 finding 3)
            state = json.loads(read_regular(self.state_path, _STATE_BYTES))
        except (OSError, ValueError):
            return None
        if not isinstance(state, dict) or state.get("format") != INDEX_FORMAT:
            return None
        if state.get("pending") or not isinstance(state.get("size"), int):
            return None  # an update was interrupted: rebuild
        return state

    def _write_state(
        self, size: int, last: str, *, pending: bool, batch: str | None = None
    ) -> None:
        body = {
            "format": INDEX_FORMAT,
            "size": size,
            "last": last,
            "pending": pending,
            "batch": batch,
        }
        drop_stale_temps(self.dir)  # a killed reindex's
        write_file_atomic(self.state_path, json.dumps(body, sort_keys=True).encode(), durable=False)

    def _last_hash(self, size: int) -> str:
        return leaf_hash(self.ledger.log.entry(size - 1)).hex() if size else ""

    # -- building ---------------------------------------------------------------------------

    def update(self, *, on_progress: Callable[[int], None] | None = None) -> IndexUpdate:
        """Add the artifact rows of the log entries after the last indexed size (build the
        index when absent). Episodes are indexed per batch, when asked for (`index_batches`).

        The index is rebuilt from scratch when its state is missing or of another format, an
        earlier update was interrupted, or the log no longer holds the entry the index ended
        at (another log).

        Args:
            on_progress: called with the number of entries done, as they are done.

        Raises:
            LogError / StoreError: the log or the store cannot be read.
        """
        with self.locked():
            return self._update(on_progress, rebuild=False)

    def rebuild(self, *, on_progress: Callable[[int], None] | None = None) -> IndexUpdate:
        """Drop both tables, index the whole log again, then every batch's episodes
        (``trajledger reindex``).

        Args:
            on_progress: called with the number of log entries done.

        Raises:
            LedgerError: the index directory cannot be written.
        """
        with self.locked():
            if self._read_only:
                raise LedgerError(f"{self.dir}: cannot be written, so the index is not rebuilt")
            if self._features_cache is not None:  # derived from the steps too: rebuilt
                shutil.rmtree(self._features_cache, ignore_errors=True)
            meta = self._update(on_progress, rebuild=True)
            batches, episodes = self._index_batches(None)
            return IndexUpdate(meta.start, meta.end, True, batches, episodes)

    def index_batches(self, digests: Sequence[str] | None = None) -> tuple[int, int]:
        """Index the episodes of these batches (None: of every batch) not indexed yet.

        Each batch's files are streamed (row group by row group), so memory stays bounded
        whatever their size; progress goes to the index's progress factory, in steps.

        Returns:
            How many batches and episodes were indexed.
        """
        with self.locked():
            self._update(None, rebuild=False)
            return self._index_batches(digests)

    def _update(
        self, on_progress: Callable[[int], None] | None, *, rebuild: bool, upto: int | None = None
    ) -> IndexUpdate:
        log = self.ledger.log
        size = log.size if upto is None else upto
        state = None if rebuild else self._read_state()
        artifacts, episodes = self._table(ARTIFACTS), self._table(EPISODES)
        usable = (
            state is not None
            and artifacts is not None
            and episodes is not None
            and state["size"] <= size
            and state.get("last") == self._last_hash(state["size"])
        )
        start = state["size"] if usable and state is not None else 0
        if usable and state is not None and state.get("batch"):
            self._recover_batch(str(state["batch"]), start, str(state["last"]))
        if usable and start == size:
            return IndexUpdate(start, size, False, 0, 0)
        if self._read_only:  # the index must change: from here on, in a temporary copy
            self._to_scratch()
            artifacts, episodes = self._table(ARTIFACTS), self._table(EPISODES)
        if start == 0:
            db = self._connect()
            for name in (ARTIFACTS, EPISODES):
                db.drop_table(name, ignore_missing=True)
            artifacts = db.create_table(ARTIFACTS, schema=ARTIFACTS_SCHEMA)
            episodes = db.create_table(EPISODES, schema=EPISODES_SCHEMA)
        self._write_state(start, self._last_hash(start), pending=True)
        sink = _Sink(artifacts, episodes)
        for lo in range(start, size, _ENTRY_CHUNK):
            hi = min(lo + _ENTRY_CHUNK, size)
            parsed = []
            for i, raw in enumerate(log.entries(lo, hi), start=lo):
                try:
                    parsed.append((i, LogEntry.from_bytes(raw)))
                except FormatError:
                    continue  # `log verify` reports it; the index only skips it
            rows = [
                (e, artifact_row(i, e, statement_of(self.ledger, e.envelope))) for i, e in parsed
            ]
            sink.mark_duplicates([r for _, r in rows])
            for entry, row in rows:
                sink.add(row)
                if entry.kind in ("revocation", "erasure"):
                    sink.flag(entry.kind, entry.subject)
            sink.flush()
            if on_progress is not None:
                on_progress(hi - lo)
        if artifacts.stats()["fragment_stats"]["num_fragments"] > 32:
            _compact(artifacts)
        self._write_state(size, self._last_hash(size), pending=False)
        _ensure_scalar_indexes(artifacts, ARTIFACTS)
        return IndexUpdate(start, size, start == 0, sink.batches, 0)

    def _recover_batch(self, digest: str, size: int, last: str) -> None:
        """An interrupted batch: drop its episode rows unless its row says it finished."""
        if self._read_only:
            self._to_scratch()
        artifacts, episodes = self._table(ARTIFACTS), self._table(EPISODES)
        where = f"kind = 'rollout-batch' AND digest = {sql_list([digest])} AND data = '{PENDING}'"
        if artifacts.search().where(where).limit(1).to_arrow().num_rows:
            episodes.delete(f"batch = {sql_list([digest])}")
        self._write_state(size, last, pending=False)

    def _index_batches(self, digests: Sequence[str] | None) -> tuple[int, int]:
        where = f"kind = 'rollout-batch' AND data = '{PENDING}'"
        if digests is not None:
            if not digests:
                return 0, 0
            where += f" AND digest IN ({sql_list(sorted(set(digests)))})"
        artifacts = self._table(ARTIFACTS)
        todo = artifacts.search().where(where).limit(None).to_arrow()
        todo = todo.sort_by("log_index").to_pylist()
        if not todo:
            return 0, 0
        if self._read_only:
            self._to_scratch()
            artifacts = self._table(ARTIFACTS)
        state = self._read_state()
        assert state is not None  # _update wrote it
        total = sum(int(r["num_steps"] or 0) for r in todo)
        episodes = 0
        with self.progress(total, f"indexing {len(todo)} batch(es)") as advance:
            for row in todo:
                self._write_state(state["size"], state["last"], pending=False, batch=row["digest"])
                status, count = self._index_batch(row, advance)
                artifacts.update(
                    where=f"kind = 'rollout-batch' AND digest = {sql_list([row['digest']])} "
                    f"AND data = '{PENDING}'",
                    values={"data": status, "episodes_indexed": count},
                )
                episodes += count
            self._write_state(state["size"], state["last"], pending=False)
        for name, table in ((ARTIFACTS, artifacts), (EPISODES, self._table(EPISODES))):
            if table.stats()["fragment_stats"]["num_fragments"] > 32:
                _compact(table)
            _ensure_scalar_indexes(table, name)
        return len(todo), episodes

    def _index_batch(self, row: dict[str, Any], advance: Callable[[int], None]) -> tuple[str, int]:
        """Write one batch's episode rows: its status and episode count.

        The features are the ones kept with the batch when it was recorded (or computed from
        its step file, `batch_features.batch_features`); ``episodes.parquet`` gives the rest.
        Data that cannot be read or does not fit the schema is skipped, never fatal: the index
        must keep working on whatever a ledger holds. A sealed batch is indexed from the
        fingerprints its record publishes (status ``sealed``; its other columns stay null):
        nothing of its ciphertexts is read.
        """
        store = self.ledger.store
        try:
            pred = batch_predicate(store, row["envelope"])
        except UNUSABLE:  # the disk failed the read: indexed as if it were missing
            pred = None
        with private_workdir(self._tmp_root) as tmp:
            if pred is not None and pred.sealed is not None:
                found = batch_features(store, row["digest"], pred, workdir=Path(tmp))
                if found.chunk is None:
                    return "missing", 0
                chunk = found.chunk
                ep = pa.table(
                    {
                        "episode_id": pa.array(chunk.episode_ids, pa.string()),
                        "num_steps": pa.array(chunk.num_steps, pa.int64()),
                    }
                )
                if len(chunk):
                    self._episodes_table().add(episode_table(ep, row, chunk, False))
                advance(int(chunk.num_steps.sum()))
                return "sealed", len(chunk)
            try:
                files = batch_files(store, row["digest"])
                ep_path = verified_local_copy(
                    store, files["episodes.parquet"], Path(tmp), private=False
                )
            except UNUSABLE:
                return "missing", 0
            try:  # (a step file the disk cannot read: skipped here, as one that is missing)
                found = batch_features(store, row["digest"], pred, workdir=Path(tmp),
                                       cache=self._features_cache)  # fmt: skip
            except UNUSABLE:
                return "missing", 0
            if found.chunk is not None:
                try:
                    return "indexed", self._stream_batch(row, ep_path, found.chunk, advance)
                except UNUSABLE_BATCH:
                    self._episodes_table().delete(f"batch = {sql_list([row['digest']])}")
            try:
                return "partial", self._stream_batch(row, ep_path, None, advance)
            except UNUSABLE_BATCH:
                self._episodes_table().delete(f"batch = {sql_list([row['digest']])}")
                return "missing", 0

    def _episodes_table(self) -> Any:
        return self._connect().open_table(EPISODES)

    def _stream_batch(
        self,
        row: dict[str, Any],
        episodes_path: Path,
        features: FeatureChunk | None,
        advance: Callable[[int], None],
    ) -> int:
        import pyarrow.parquet as pq

        table = self._episodes_table()
        count, buffered, rows = 0, [], 0
        labels_success = batch_labels_success(episodes_path)
        chunks = iter([features]) if features is not None else None
        names = pq.read_schema(episodes_path).names
        for ep, feats in aligned(parquet_batches(episodes_path, names), chunks):
            part = episode_table(ep, row, feats, labels_success)
            buffered.append(part)
            rows += part.num_rows
            steps = pc.sum(part.column("num_steps")).as_py()
            advance(int(steps or 0))
            if rows >= _FLUSH_EPISODES:
                table.add(pa.concat_tables(buffered))
                count, buffered, rows = count + rows, [], 0
        if buffered:
            table.add(pa.concat_tables(buffered))
            count += rows
        return count

    # -- checking ---------------------------------------------------------------------------

    def disagreements(self) -> list[str]:
        """Derive the index again, in a temporary directory, up to the size the index holds and
        with the batches it indexed, and compare table by table (``trajledger reindex
        --check``): nothing of the ledger's index changes. An empty list when they agree.

        Raises:
            LogError / StoreError: the log or the store cannot be read.
        """
        if not self.state_path.is_file():
            return []  # no index (and no lock file made for it: a check writes nothing)
        with self.locked():
            state = self._read_state()
            artifacts, episodes = self._table(ARTIFACTS), self._table(EPISODES)
            if state is None or state.get("batch") or artifacts is None or episodes is None:
                return []  # none, or one the next query rebuilds or repairs: nothing believed
            live = {
                ARTIFACTS: artifacts.search().limit(None).to_arrow(),
                EPISODES: episodes.search().limit(None).to_arrow(),
            }
        done = [r["digest"] for r in live[ARTIFACTS].to_pylist()
                if r["kind"] == "rollout-batch" and r["data"] not in (PENDING, "duplicate")]
        with tempfile.TemporaryDirectory(prefix="trajledger-index-check-") as tmp:
            scratch = Index(self.ledger)
            scratch._move_to(Path(tmp) / "lance", Path(tmp) / "tmp")
            with scratch.locked():
                scratch._update(None, rebuild=True, upto=int(state["size"]))
                scratch._index_batches(done)
                again = {name: scratch._table(name).search().limit(None).to_arrow()
                         for name in (ARTIFACTS, EPISODES)}
        out = []
        for name, key in ((ARTIFACTS, "log_index"), (EPISODES, "batch")):
            a, b = (_rows_by(t, key) for t in (live[name], again[name]))
            differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            if not differ:
                continue
            first = (f"log entry {differ[0]}" if name == ARTIFACTS
                     else f"batch {str(differ[0])[:19]}…")
            out.append(
                f"audit index {self.dir}: table {name}: the rows of {len(differ)} "
                f"{'log entries' if name == ARTIFACTS else 'batch(es)'} differ from those derived "
                f"again from the log and the store (first: {first}): edited outside trajledger, "
                "or built from data repaired since; rebuild it with 'trajledger reindex'"
            )
        return out

    # -- reading ----------------------------------------------------------------------------

    def _scan(
        self,
        name: str,
        where: str | None = None,
        columns: Sequence[str] | None = None,
        limit: int | None = None,
        *,
        shown: str | None = None,
    ) -> pa.Table:
        table = self._table(name)
        if table is None:
            raise LedgerError(
                f"{self.dir}: the index has no table {name!r}; run 'trajledger reindex'"
            )
        q = table.search()
        if where:
            q = q.where(where)
        if columns is not None:
            q = q.select(list(columns))
        try:
            result: pa.Table = q.limit(limit).to_arrow()
        except (ValueError, RuntimeError) as e:
            message = sql_message(e)
            if shown:
                # Report the user's filter alone, not the parentheses and batch restriction
                # added to it; when LanceDB takes it alone, what follows its first expression.
                for alone, hint in ((shown, ""), (one_expression(shown), ": a filter is one "
                                                   "expression, and nothing may follow it")):
                    try:
                        table.search().where(alone).limit(0).to_arrow()
                    except (ValueError, RuntimeError) as refused:
                        message = sql_message(refused) + hint
                        break
            raise QueryError(f"--where {shown or where!r}: {message}{_lists(table, message)}"
                             ) from e
        return result

    def query(
        self,
        table: str,
        where: str | None = None,
        *,
        columns: Sequence[str] | None = None,
        limit: int | None = None,
        batches: Sequence[str] | None = None,
    ) -> pa.Table:
        """Rows of ``artifacts`` or ``episodes`` matching an SQL filter (DataFusion syntax).

        Episodes of batches not indexed yet are indexed first: those of ``batches`` when it is
        given, else every batch's.

        Args:
            table: ``"artifacts"`` or ``"episodes"``.
            where: e.g. ``"return > 100 AND env_version = 'cartpole@1'"``; None for every row.
            columns: the columns to return (default: all but ``vector``).
            limit: at most this many rows; None for all.
            batches: keep only episodes of these batches (episodes only).

        Raises:
            QueryError: an unknown table or column, or a filter LanceDB cannot run.
        """
        schema = {ARTIFACTS: ARTIFACTS_SCHEMA, EPISODES: EPISODES_SCHEMA}.get(table)
        if schema is None:
            raise QueryError(f"table {table!r}: unknown, want artifacts or episodes")
        names = [n for n in schema.names if n != "vector"]
        if columns is not None:
            unknown = [c for c in columns if c not in schema.names]
            if unknown:
                raise QueryError(
                    f"{table}: no column {', '.join(map(repr, unknown))}; "
                    f"columns are {', '.join(names)}"
                )
        where = where if where and where.strip() else None
        combined = one_expression(where) if where else None
        if batches is not None:
            if table != EPISODES:
                raise QueryError("only episodes can be restricted to batches")
            restrict = f"batch IN ({sql_list(batches)})" if batches else "false"
            combined = f"{combined} AND {restrict}" if combined else restrict
        with self.locked():
            self._update(None, rebuild=False)
            if table == EPISODES:
                self._index_batches(batches)
            return self._scan(table, combined, list(columns or names), limit, shown=where)

    def artifact(self, digest: str, kind: str | None = None) -> dict[str, Any] | None:
        """The first (identity) row of ``digest``, of ``kind`` when given; None when absent."""
        where = f"digest = {sql_list([digest])}" + (
            f" AND kind = {sql_list([kind])}" if kind else ""
        )
        rows = self.query(ARTIFACTS, where).to_pylist()
        return min(rows, key=lambda r: r["log_index"]) if rows else None

    def left_out(
        self, batches: Sequence[str], what: str = "figures", *, erased: bool = False
    ) -> list[str]:
        """A warning for each of ``batches`` (indexed already) whose episodes the index does not
        hold: its files could not be read when it was taken in (``data = 'missing'``, kept
        until a rebuild), it has no row at all, or (with ``erased``) it was erased. Answers over
        ``batches`` leave those episodes out; ``what`` names the answer (``figures``, ``rows``).
        ``stats`` names erasures itself, from the trust state."""
        if not batches:
            return []
        found = self._scan(
            ARTIFACTS,
            f"kind = 'rollout-batch' AND digest IN ({sql_list(sorted(set(batches)))})",
            ["digest", "data"],
        ).to_pylist()
        status: dict[str, set[str]] = {}
        for r in found:
            status.setdefault(r["digest"], set()).add(r["data"])
        out = []
        for d in dict.fromkeys(batches):
            data = status.get(d, set()) - {"duplicate"}
            if not data:
                why = "it has no row in the audit index"
            elif data <= {"missing"}:
                why = "its episodes could not be read when the audit index took it in (data " \
                      "'missing')"
            elif erased and data <= {"erased"}:
                out.append(f"batch {d[:19]}…: erased: the audit index keeps none of its "
                           f"episodes, so these {what} leave it out")
                continue
            else:
                continue
            out.append(f"batch {d[:19]}…: {why}: these {what} leave it out; run 'trajledger "
                       "fsck', and 'trajledger reindex' once it is repaired")
        return out

    def batches_of(self, digest: str, kind: str) -> list[str]:
        """The batches of a batch (itself), a dataset (its members) or a checkpoint (the members
        of the datasets it was trained on), from the index.

        Raises:
            RefError: ``digest`` is not an indexed artifact of that kind.
        """
        if kind == "rollout-batch":
            return [digest]
        row = self.artifact(digest, kind)
        if row is None:
            raise RefError(f"{kind} {digest}: not in the audit index {self.dir} (edited or "
                           "damaged: the log holds it); rebuild it with 'trajledger reindex'")
        if kind == "dataset":
            return list(row["batches"] or [])
        if kind == "checkpoint":
            out: set[str] = set()
            for d in row["datasets"] or []:
                out.update(self.batches_of(d, "dataset"))
            return sorted(out)
        raise RefError(f"{kind} {digest}: has no batches; want a batch, dataset or checkpoint")


def query_table(
    ledger: LedgerHome,
    table: str,
    where: str | None = None,
    *,
    columns: Sequence[str] | None = None,
    limit: int | None = None,
    within: str | None = None,
    batches: Sequence[str] | None = None,
    progress: ProgressFactory | None = None,
    note: Callable[[str], None] | None = None,
) -> pa.Table:
    """`Index.query`, with ``within`` a batch, dataset or checkpoint reference, or ``batches``
    its batches already found (``progress`` and ``note`` are `Index`'s)."""
    index = Index(ledger, progress=progress, note=note)
    if within is not None:
        item = Catalog(ledger).resolve(within, {"rollout-batch", "dataset", "checkpoint"})
        batches = index.batches_of(item.digest, item.kind)
    flags = table == ARTIFACTS
    wanted = list(columns) if columns is not None else None
    if flags and wanted is not None:
        columns = [*wanted, *(c for c in _FLAG_KEYS if c not in wanted)]
    with index.locked():
        result = index.query(table, where, columns=columns, limit=limit, batches=batches)
        if flags:
            state = index._read_state()
            result = _flags_as_the_trust_state_says(
                ledger, result, state["size"] if state else ledger.log.size, note)
            if wanted is not None:
                result = result.select(wanted)
        if note is not None:
            for warning in index.left_out(batches or [], "rows", erased=True):
                note(warning)
    return result


_FLAG_KEYS = ("log_index", "kind", "ref", "digest", "revoked", "erased")
"""The columns `_flags_as_the_trust_state_says` reads of each artifact row."""


def _flags_as_the_trust_state_says(
    ledger: LedgerHome, rows: pa.Table, size: int, note: Callable[[str], None] | None
) -> pa.Table:
    """``rows`` of the artifacts table with each row's ``revoked`` and ``erased`` cells as the
    user's trust state says (the log holds a revocation, an erasure, of its digest among its
    first ``size`` entries, which the index was built from; named kinds only, as the index
    flags them), one look-up of the rows' digests in all. The index is derived data anyone
    who can write the ledger may edit: a cell that says otherwise (a revocation hidden) is
    printed as the trust state says, with a WARNING naming the row and what to run (rev12). A
    row an edited flag kept out of a ``--where`` filter is not among ``rows``: only
    ``reindex --check`` finds it."""
    if rows.num_rows == 0:
        return rows
    digests = rows.column("digest").to_pylist()
    about = ledger.trust_state().entries_about(sorted(set(digests)))
    held = {(e.kind, e.subject) for i, (e, _raw) in about.items() if i < size}
    cells: dict[str, list[bool]] = {"revoked": [], "erased": []}
    for row in rows.select(list(_FLAG_KEYS)).to_pylist():
        for flag, kind in (("revoked", "revocation"), ("erased", "erasure")):
            want = row["kind"] in NAMED_KINDS and (kind, row["digest"]) in held
            cells[flag].append(want)
            if bool(row[flag]) != want and note is not None:
                note(f"audit index: the row of log entry {row['log_index']} ({row['kind']} "
                     f"{row['ref']}) says {flag} {str(bool(row[flag])).lower()}, but your "
                     f"trust state says {str(want).lower()} (the log "
                     f"{'holds' if want else 'holds no'} {'an' if kind == 'erasure' else 'a'} "
                     f"{kind} of it): printed as your trust state says; the index was edited "
                     "outside trajledger, or built from another log: rebuild it with "
                     "'trajledger reindex'")
    for flag, values in cells.items():
        at = rows.schema.get_field_index(flag)
        rows = rows.set_column(at, rows.schema.field(at), pa.array(values, pa.bool_()))
    return rows


def reindex(
    ledger: LedgerHome,
    *,
    on_progress: Callable[[int], None] | None = None,
    progress: ProgressFactory | None = None,
) -> IndexUpdate:
    """Drop the index and build it again from the log and the object store (every batch).

    Args:
        ledger: the ledger.
        on_progress: called with the number of log entries done.
        progress: shows progress while batches are indexed.
    """
    return Index(ledger, progress=progress).rebuild(on_progress=on_progress)
