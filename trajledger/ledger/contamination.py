"""Exact and near-duplicate episodes: within a set of batches, and between a train set and
holdout / regression sets.

Scope: `Matcher` (``contamination_matcher``) holds the episodes of the other side (holdout,
regression) and is fed the train episodes chunk by chunk, so the train side is never in
memory at once; it gives one `Finding` per other-side episode that duplicates a train
episode (exact: equal content fingerprint; near: cosine similarity of feature vectors at or
above the threshold of its modality). Two front ends feed it:

- `check_dataset` (``dataset create``) and `contamination_findings` (an audit of a recorded
  dataset): each batch's features as kept with it since recording
  (``ledger.batch_features``; computed from its step file for older batches; a sealed batch's
  are the fingerprints its record publishes), its step windows and normalised text
  fingerprints as kept in the derived cache (``ledger.window_cache``; computed from its step
  file the first time), the other side's datasets from the user's index of the log. No
  LanceDB: the cost is that of the batches compared, not of the ledger's history. Also
  `duplicate_lines`, exact duplicates within the set;
- `verified_contamination`, for the runner's admission gate: the other side is read from
  blobs re-hashed on the way (the batch manifest from the batch digest, then
  ``steps.parquet`` from the manifest's digest, each checked) and the train side from tables
  the caller verified; a sealed holdout batch by the fingerprints its verified record
  publishes (no key). No kept features or index rows are trusted, so neither a producer's
  features nor an edited cache can hide a holdout duplicate.

Exact findings include text episodes equal once normalised (``ledger.text_fingerprint``); near
ones are made at the thresholds given (a policy's ``[contamination]``, which may lower them).
`refusal` words what ``dataset create`` refuses (exact findings, and near ones under
``refuse = "near"``).
Non-scope: the decision (``dataset create`` refuses exact duplicates across splits and reports
near ones, or refuses them too under the policy's ``[contamination]``, and duplicates within;
the runner fails likewise), reading the policy (``ledger.policy_state.contamination_rules``),
verifying the dataset records `check_dataset` reads (its checks only add refusals: the gate
decides).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajledger.verify.contamination_rules import NEAR_NUMERIC_THRESHOLD, NEAR_TEXT_THRESHOLD

from .batch_features import private_workdir, published_features, verified_local_copy
from .contamination_matcher import MIN_NEAR_STEPS, PARTS_COLUMNS, Matcher, SketchFinding, iter_parts
from .episode_features import (
    FEATURE_COLUMNS,
    FeatureChunk,
    iter_step_features,
    parquet_batches,
)
from .errors import read_failure
from .finding import Finding, duplicate_lines
from .held_windows import (
    Damaged,
    forget_grouped,
    group_file,
    grouped_file,
    regrouped,
)
from .held_windows import read as read_grouped
from .progress import ProgressFactory, no_progress
from .step_windows import (
    WINDOW_COLUMNS,
    StepWindows,
    iter_windows,
)
from .text_fingerprint import NORMALISED_COLUMNS, normalised_fingerprints
from .window_cache import cache_file, compared_parts, compute, keep, read_kept

if TYPE_CHECKING:
    import pyarrow as pa

    from trajledger.verify.contamination_rules import ContaminationRules
    from trajledger.verify.predicates import Dataset, RolloutBatch
    from trajledger.verify.sealed_files import Sealed

    from .batch_features import BatchFeatures
    from .home import LedgerHome
    from .store import ObjectStore

__all__ = [
    "MIN_NEAR_STEPS",
    "NEAR_NUMERIC_THRESHOLD",
    "NEAR_TEXT_THRESHOLD",
    "SPLITS",
    "ContaminationReport",
    "DatasetCheck",
    "Finding",
    "Matcher",
    "check_dataset",
    "contamination_findings",
    "duplicate_lines",
    "refusal",
    "ruled",
    "verified_contamination",
]

SPLITS = ("train", "holdout", "regression")


@dataclass(frozen=True)
class ContaminationReport:
    """What `verified_contamination` found.

    Attributes:
        findings: one per other-side episode that duplicates a train episode.
        unchecked: one line per other-side batch whose data could not be read and verified
            (missing, altered, unreadable): contamination with it cannot be ruled out, so a
            gate that must be sure fails on any.
        episodes: how many other-side and train episodes were compared.
        unchecked_batches: the digests of the batches ``unchecked`` names.
    """

    findings: tuple[Finding, ...]
    unchecked: tuple[str, ...]
    episodes: tuple[int, int] = (0, 0)
    unchecked_batches: tuple[str, ...] = ()


def _steps_digest(store: ObjectStore, batch: str) -> tuple[str, int]:
    """The digest and size of a batch's ``steps.parquet``, from its re-hashed manifest."""
    from trajledger.verify.manifest import Manifest
    from trajledger.verify.strict_json import load_object

    manifest = Manifest.from_json(load_object(store.get_verified(batch), "manifest"))
    for f in manifest.files:
        if f.path == "steps.parquet":
            return f.digest, f.size
    from trajledger.verify.errors import FormatError

    raise FormatError(f"batch {batch[:19]}…: its manifest lists no steps.parquet")


def _extras(path: Path, wanted: tuple[bool, bool], held: bool, normalised: list[tuple[str, str]],
            windows: list[StepWindows]) -> None:
    """Add the normalised text fingerprints and the step windows (``held``: of the held
    side) of a step file to ``normalised`` and ``windows``, as ``wanted`` (`compared_parts`)."""
    if wanted[0]:
        normalised += normalised_fingerprints(parquet_batches(path, NORMALISED_COLUMNS))
    if wanted[1]:
        windows += iter_windows(parquet_batches(path, WINDOW_COLUMNS), held=held)


def _published_normalised(sealed: Sealed) -> list[tuple[str, str]]:
    """The normalised text fingerprints a sealed batch publishes (none before holdout23)."""
    return [(e.episode_id, e.normalised) for e in sealed.episodes if e.normalised]


def _verified_chunks(
    store: ObjectStore, batch: str, workdir: Path, normalised: list[tuple[str, str]],
    windows: list[StepWindows], held: bool, fit: Matcher | None = None,
) -> Iterator[FeatureChunk]:
    """Features of a batch's episodes, from a private copy of its re-hashed step file; once
    they are all given, the normalised text fingerprints of a batch with text episodes and
    the step windows of one with numeric episodes are added to ``normalised`` and
    ``windows``, from the same copy (`_extras`), and the train episodes of the lengths
    ``fit`` wants are fed to it by their sketches' parts (`_feed_parts`)."""
    digest, size = _steps_digest(store, batch)
    path = verified_local_copy(store, digest, workdir, private=True)
    try:
        got = path.stat().st_size
        if got != size:
            from trajledger.verify.errors import DigestMismatchError

            raise DigestMismatchError(
                f"steps.parquet of batch {batch[:19]}…: {got} bytes, want {size}"
            )
        wanted, fed = (False, False), list[FeatureChunk]()
        for chunk in iter_step_features(parquet_batches(path, FEATURE_COLUMNS)):
            more = compared_parts(chunk)
            wanted = (wanted[0] or more[0], wanted[1] or more[1])
            yield chunk
            fed.append(chunk)
        _extras(path, wanted, held, normalised, windows)
        if fit is not None and fed:
            _feed_parts(fit, batch, lambda: parquet_batches(path, PARTS_COLUMNS),
                        FeatureChunk.concat(fed))
    finally:
        path.unlink(missing_ok=True)


def _feed_parts(matcher: Matcher, batch: str,
                steps: Callable[[], Iterable[pa.RecordBatch | pa.Table]],
                chunk: FeatureChunk) -> None:
    """Feed ``matcher`` the sketches' parts of the train episodes of ``batch`` (``chunk``: its
    features, in file order; ``steps``: its step file's record batches, read only when some
    episode has the length of a sealed held one: `Matcher.feed_parts`)."""
    lengths = matcher.fit_lengths(chunk)
    if lengths:
        for ids, lens, parts in iter_parts(steps(), chunk.episode_ids, chunk.num_steps,
                                           lengths):
            matcher.feed_parts(batch, ids, lens, parts)


def _table_chunks(table: pa.Table, normalised: list[tuple[str, str]],
                  windows: list[StepWindows], held: bool) -> Iterator[FeatureChunk]:
    """`_verified_chunks` of a step table the caller verified: its episodes' features, then
    its normalised text fingerprints and step windows as they are wanted."""
    wanted = (False, False)
    for chunk in iter_step_features(table.to_batches(max_chunksize=1 << 16)):
        more = compared_parts(chunk)
        wanted = (wanted[0] or more[0], wanted[1] or more[1])
        yield chunk
    if wanted[0]:
        cols = [c for c in NORMALISED_COLUMNS if c in table.column_names]
        normalised += normalised_fingerprints(table.select(cols).to_batches(1 << 16))
    if wanted[1]:
        cols = [c for c in WINDOW_COLUMNS if c in table.column_names]
        windows += iter_windows(table.select(cols).to_batches(1 << 16), held=held)


def verified_contamination(
    store: ObjectStore,
    train: Mapping[str, pa.Table | None],
    others: Mapping[str, Sequence[str]],
    *,
    train_labels: Mapping[str, Sequence[str]] | None = None,
    workdir: Path | None = None,
    sealed: Mapping[str, Sealed] | None = None,
    thresholds: Mapping[str, float] | None = None,
    held_tables: Mapping[str, pa.Table] | None = None,
) -> ContaminationReport:
    """Contamination of verified train data by holdout / regression batches, from re-hashed
    blobs only (for the admission gate).

    Steps:
        1. For each other-side batch (in digest order): read its manifest, checking that it
           hashes to the batch digest; copy its ``steps.parquet`` into a private directory,
           checking size and digest on the way; compute its episodes' features from that copy.
           A batch that fails any of this is listed in ``unchecked`` (not skipped silently). A
           sealed batch is held by the fingerprints of its verified record (``sealed``). A
           batch with text episodes: their normalised text fingerprints too, from the same
           copy (`text_fingerprint`).
        2. For each train batch: compute features (and, with text episodes, normalised text
           fingerprints) from the table given (the bytes the caller verified), or, when the
           table is None, from the store as in (1) (a train batch that cannot be verified is
           listed in ``unchecked`` too).
        3. Match (`Matcher`): exact duplicates by fingerprint or normalised text fingerprint,
           near ones by feature vectors at ``thresholds`` (default `_THRESHOLDS`).

    Args:
        store: the object store holding the batches.
        train: train batch digest -> its verified step table, or None to read it verified.
        others: other-side batch digest -> labels of the datasets holding it (for example
            ``["holdout eval@1"]``), from verified dataset records.
        train_labels: train batch digest -> labels, for the findings' messages.
        workdir: where private copies are made (default the system temporary directory).
        sealed: other-side batch digest -> its verified record's ``sealed``, for sealed
            batches: compared by the fingerprints it publishes (their bytes are not readable
            here); published with other feature definitions, the batch is ``unchecked``.
        thresholds: modality -> near-duplicate similarity (a policy's ``[contamination]``).
        held_tables: other-side batch digest -> its step table as the caller verified it (a
            sealed one's plaintext, opened by an evaluator: ``eval``), compared as a plain
            batch is, by its runs of steps too, in place of reading the store.

    Returns:
        The findings and the batches that could not be checked. Nothing is read from the
        audit index.
    """
    from trajledger.verify.errors import ProvenanceError

    from .errors import LedgerError

    # Anything that stops a batch from being read and checked makes it "unchecked".
    unusable = (ProvenanceError, LedgerError, OSError, ValueError, TypeError, KeyError)
    matcher = Matcher(train_labels, others, thresholds)
    unchecked: list[str] = []
    unread: list[str] = []  # (their digests)
    held = fed = 0
    with private_workdir(workdir) as tmp:
        # (1)
        for batch in sorted(others):
            pairs: list[tuple[str, str]] = []
            windows: list[StepWindows] = []
            try:
                if held_tables and batch in held_tables:
                    chunks = list(_table_chunks(held_tables[batch], pairs, windows, True))
                elif sealed and batch in sealed:
                    chunks = [published_features(sealed[batch])]
                    pairs = _published_normalised(sealed[batch])
                else:
                    chunks = list(_verified_chunks(store, batch, Path(tmp), pairs, windows, True))
            except unusable as e:
                if read_failure(e):  # the check did not run: operational, not a finding
                    raise
                unchecked.append(f"holdout/regression batch {batch[:19]}…: {e}")
                unread.append(batch)
                continue
            by_sketch = bool(sealed and batch in sealed and batch not in (held_tables or {}))
            for chunk in chunks:
                matcher.hold(batch, chunk, sealed=by_sketch)
                held += len(chunk)
            matcher.hold_normalised(batch, pairs)
            matcher.hold_windows(batch, windows)
        # (2) (3)
        for batch in sorted(train):
            table = train[batch]
            pairs, windows = [], []
            try:
                chunks_iter: Iterable[FeatureChunk] = (
                    _table_chunks(table, pairs, windows, False) if table is not None
                    else _verified_chunks(store, batch, Path(tmp), pairs, windows, False, matcher)
                )
                chunks = []
                for chunk in chunks_iter:
                    matcher.feed(batch, chunk)
                    fed += len(chunk)
                    chunks.append(chunk)
                if table is not None and chunks:
                    _feed_parts(matcher, batch, lambda t=table: t.select(  # type: ignore[misc]
                        [c for c in PARTS_COLUMNS if c in t.column_names]).to_batches(1 << 16),
                        FeatureChunk.concat(chunks))
                matcher.feed_normalised(batch, pairs)
                matcher.feed_windows(batch, windows)
            except unusable as e:
                if read_failure(e):
                    raise
                unchecked.append(f"train batch {batch[:19]}…: {e}")
                unread.append(batch)
    return ContaminationReport(tuple(matcher.findings()), tuple(unchecked), (held, fed),
                               tuple(unread))


# --------------------------------------------------------------------------------------------
# Before a dataset is recorded, and audits of recorded ones: kept features, no index


@dataclass(frozen=True)
class DatasetCheck:
    """What `check_dataset` found.

    Attributes:
        duplicates: one line per episode of the set whose content equals an earlier one's
            (`duplicate_lines`).
        findings: one per other-side episode duplicated across splits (exact or near).
        warnings: one line per batch whose episodes could not all be compared (its data is
            missing or damaged), or whose kept features could not be used. A read the disk
            fails (`errors.read_failure`) is no warning: it ends the check (exit 3).
        sources: batch digest -> where its features came from (``recorded``, ``cache``,
            ``computed``, ``sealed``: the fingerprints a sealed batch publishes, ``none``).
    """

    duplicates: tuple[str, ...]
    findings: tuple[Finding, ...]
    warnings: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)


class _Reader:
    """Records and features of one ledger, read once each (unverified: see `check_dataset`)."""

    def __init__(self, ledger: LedgerHome, workdir: Path, progress: ProgressFactory | None) -> None:
        self.ledger = ledger
        self.state = ledger.trust_state()
        self.workdir = workdir
        self.cache = ledger.root / "index" / "features"
        self.progress = progress
        self.failed: set[str] = set()  # batches whose windows or fingerprints were not read

    def predicate(self, index: int, kind: str) -> Any:
        """The typed predicate of log entry ``index`` when it is of ``kind`` (else None)."""
        from trajledger.verify.dsse import Envelope
        from trajledger.verify.errors import ProvenanceError
        from trajledger.verify.kinds import KINDS
        from trajledger.verify.statement import Statement

        from .errors import LedgerError

        entry = self.state.entry(index)
        if entry is None or entry.kind != kind:
            return None
        try:
            envelope = Envelope.from_bytes(self.ledger.store.get_verified(entry.envelope))
            return KINDS[kind].read(Statement.from_bytes(envelope.payload), f"log entry {index}")
        except (ProvenanceError, LedgerError) as e:
            if read_failure(e):  # a holdout's record passed over would hide its duplicates
                raise
            return None

    def batch(self, digest: str) -> RolloutBatch | None:
        """The rollout-batch predicate of the first record of ``digest``."""
        from .batch_features import batch_predicate

        for i in self.state.about(digest):
            entry = self.state.entry(i)
            if entry is not None and entry.kind == "rollout-batch":
                pred = batch_predicate(self.ledger.store, entry.envelope)
                if pred is not None:
                    return pred
        return None

    def compared(
        self, f: BatchFeatures, problems: list[str], held: bool, windows_too: bool = True
    ) -> tuple[list[tuple[str, str]], list[StepWindows]]:
        """The normalised text fingerprints of a batch with text episodes and the step windows
        of one with numeric episodes (``held``: of the held side), as kept in the derived cache
        (`window_cache`), else from its step file, then kept (unverified, as its features); a
        problem line when it cannot be read, or when what was kept cannot be used. Not
        ``windows_too``: the normalised text fingerprints alone."""
        from trajledger.verify.errors import ProvenanceError

        from .batch_features import verified_local_copy
        from .errors import LedgerError

        pairs: list[tuple[str, str]] = []
        windows: list[StepWindows] = []
        wanted = compared_parts(f.chunk) if f.chunk is not None else (False, False)
        wanted = (wanted[0], wanted[1] and windows_too)
        if not any(wanted):
            return pairs, windows
        try:
            pred = self.batch(f.batch)
            if f.source == "sealed":  # its published normalised fingerprints; no windows
                sealed = pred.sealed if pred is not None else None
                return (_published_normalised(sealed) if sealed is not None else []), []
            digest = self.steps(f.batch, pred)
            got, why = read_kept(self.cache, digest, (*wanted, held))
            if why:
                problems.append(f"batch {f.batch[:19]}…: its kept runs of steps and normalised "
                                f"text ({cache_file(self.cache, digest)}) cannot be used ({why}): "
                                "computed from its steps.parquet again")
            if got is None:
                path = verified_local_copy(self.ledger.store, digest, self.workdir, private=False)
                try:
                    got = compute(path, (*wanted, held))
                finally:
                    if path.parent == self.workdir:
                        path.unlink(missing_ok=True)
                keep(self.cache, digest, got)
                if not self.ledger.store.exists(digest):  # erased meanwhile (rev37): as
                    cache_file(self.cache, digest).unlink(missing_ok=True)  # `record_windows`
            return got.normalised or [], got.step_windows(held)
        except (ProvenanceError, LedgerError, OSError, ValueError, TypeError, KeyError) as e:
            if read_failure(e):  # the check did not run: operational (lead26)
                raise
            what = " and ".join(w for w, on in zip(("text episodes were not compared once "
                                                    "normalised", "numeric episodes were not "
                                                    "compared by runs of steps"), wanted,
                                                   strict=True) if on)
            problems.append(f"batch {f.batch[:19]}…: its {what} ({e})")
            self.failed.add(f.batch)
        return pairs, windows

    def feed_parts(self, matcher: Matcher, f: BatchFeatures, problems: list[str]) -> None:
        """Feed ``matcher`` the sketches' parts of the train episodes of ``f`` of the lengths of
        its sealed held ones (`Matcher.feed_parts`), from the batch's step file (hashed in
        place: derived, as its features); a problem line when it cannot be read."""
        import pyarrow as pa

        from trajledger.verify.errors import ProvenanceError

        from .batch_features import verified_local_copy
        from .errors import LedgerError

        if f.chunk is None or f.source == "sealed" or not matcher.fit_lengths(f.chunk):
            return
        try:
            digest = self.steps(f.batch, self.batch(f.batch))
            path = verified_local_copy(self.ledger.store, digest, self.workdir, private=False)
            try:
                _feed_parts(matcher, f.batch, lambda: parquet_batches(path, PARTS_COLUMNS),
                            f.chunk)
            finally:
                if path.parent == self.workdir:
                    path.unlink(missing_ok=True)
        except (ProvenanceError, LedgerError, OSError, ValueError, TypeError, KeyError,
                pa.ArrowException) as e:
            if read_failure(e):
                raise
            problems.append(f"batch {f.batch[:19]}…: its numeric episodes were not compared "
                            f"with the sketches of sealed held-out episodes of their lengths ({e})")

    def steps(self, batch: str, pred: RolloutBatch | None) -> str:
        """The digest of the step file of ``batch`` (record ``pred``)."""
        from .batch_features import batch_files, steps_file_of

        steps = steps_file_of(pred) if pred is not None else None
        return steps[0] if steps else batch_files(self.ledger.store, batch)["steps.parquet"]

    def hold_windows(self, matcher: Matcher, held: Sequence[BatchFeatures],
                     problems: list[str]) -> None:
        """Hold the step windows of the held batches ``held`` (those `hold` holds): grouped by
        hash as kept for them (`held_windows`: read, looked up on use), else grouped from each
        batch's windows (`compared`) into its file (`group_file`), batch by batch (hold32: each
        computed once the one before it was taken into the grouping's runs); each batch's
        windows as they are (`Matcher.hold_windows`) when a batch's cannot be read or that
        file not made (those the grouping took, taken again)."""
        from trajledger.verify.errors import FormatError, ProvenanceError

        from .errors import LedgerError

        todo = [f for f in held if f.chunk is not None and f.source != "sealed"
                and compared_parts(f.chunk)[1]]
        key: list[tuple[str, str]] = []
        try:
            key = [(f.batch, self.steps(f.batch, self.batch(f.batch))) for f in todo]
        except (ProvenanceError, LedgerError, OSError, ValueError, TypeError, KeyError) as e:
            if read_failure(e):
                raise
            key = []  # `compared` says which batch and why
        if key:
            path = grouped_file(self.cache, key)
            try:
                matcher.hold_grouped(read_grouped(path, key))
                return
            except FileNotFoundError:
                pass
            except (OSError, FormatError) as e:  # derived: even a disk's EIO is grouped again
                problems.append(regrouped(path, e.strerror if isinstance(e, OSError)
                                          and e.strerror else str(e)))
        pulled: list[list[StepWindows]] = []  # each batch's windows taken so far

        def each() -> Iterator[list[StepWindows]]:  # one batch's at a time (hold32)
            for f in todo:
                pulled.append(self.compared(f, problems, True)[1])
                if f.batch in self.failed:
                    return  # not grouped: a batch's missing from a kept file would go unsaid
                yield pulled[-1]

        grouped = None
        if key and not self.failed & {f.batch for f in todo}:
            forget_grouped(self.cache)  # one kept at a time: this call's held side's
            grouped = group_file(grouped_file(self.cache, key), [f.batch for f in todo], each(),
                                 key, stored=lambda: all(map(self.ledger.store.exists,
                                                             (s for _, s in key))))
        if grouped is None:  # as they are; those emptied by `group_file` taken again
            for f, ws in itertools.zip_longest(todo, pulled):
                again = ws is None or (not ws and f.batch not in self.failed)
                matcher.hold_windows(f.batch, self.compared(f, problems, True)[1] if again else ws)
            return
        matcher.hold_grouped(grouped)

    def erased(self, digest: str) -> bool:
        return any((e := self.state.entry(i)) is not None and e.kind == "erasure"
                   for i in self.state.about(digest))  # fmt: skip

    def features(self, digests: Sequence[str]) -> Iterator[BatchFeatures]:
        """Each batch's features in turn (`batch_features.batch_features`; only one batch's
        are held here), with a progress bar over the batches. An erased batch has none, not
        even a sealed one's published fingerprints: its data is gone, and nothing about its
        episodes is reported."""
        from .batch_features import BatchFeatures, batch_features

        label = f"episode features of {len(digests)} batch(es)"
        with (self.progress or no_progress)(len(digests), label) as advance:
            for d in digests:
                yield BatchFeatures(d, None, "none") if self.erased(d) else batch_features(
                    self.ledger.store, d, self.batch(d), workdir=self.workdir, cache=self.cache
                )
                advance(1)


def _label(ds: Dataset) -> str:
    return f"{ds.split} {ds.name}@{ds.version}"


def check_dataset(
    ledger: LedgerHome,
    split: str,
    batches: Sequence[str],
    *,
    progress: ProgressFactory | None = None,
    thresholds: Mapping[str, float] | None = None,
) -> DatasetCheck:
    """Duplicates within a set of batches meant for ``split``, and its contamination with the
    recorded datasets of the other side, from the batches' kept features.

    Steps:
        1. The features of every batch of the set (`batch_features.batch_features`: the kept
           file, else the derived cache, else computed from the step file).
        2. Exact duplicates within the set (`duplicate_lines`).
        3. The other side, from the user's index of the log: for a train set, every holdout
           and regression dataset; for a holdout or regression set, every train dataset. Their
           records are read from envelopes that hash to their log entries; each batch's labels
           name the datasets holding it.
        4. Match (`Matcher`): the other side held, the train side fed; near duplicates at
           ``thresholds`` (modality -> similarity; default `_THRESHOLDS`). Batches with text
           episodes are also matched by their normalised text fingerprints, from their step
           files (`text_fingerprint`).

    Unverified: signatures are not checked here and the features are a producer's (or a
    cache's); nothing this finds admits anything. The admission gate checks contamination
    again from the bytes it verified (`verified_contamination`).

    Raises:
        FormatError: an unknown split.
        StoreError / OSError: the disk failed a read of a record or a batch's data (EIO,
            EACCES: `errors.read_failure`): the check did not run.
    """
    from trajledger.verify.errors import FormatError

    if split not in SPLITS:
        raise FormatError(f"split {split!r}: unknown, want one of {', '.join(SPLITS)}")
    try:
        return _check_dataset(ledger, split, batches, progress, thresholds, [])
    except Damaged as e:  # found on use: grouped again, the whole check made again
        forget_grouped(ledger.root / "index" / "features")
        line = regrouped(e.path or Path(), str(e))
        return _check_dataset(ledger, split, batches, progress, thresholds, [line])


def _check_dataset(
    ledger: LedgerHome, split: str, batches: Sequence[str], progress: ProgressFactory | None,
    thresholds: Mapping[str, float] | None, regrouped: list[str],
) -> DatasetCheck:
    """`check_dataset`, with ``regrouped`` (a grouped file found damaged) among its warnings."""
    from .fs import temp_dir

    mine = sorted(set(batches))
    with temp_dir(ledger.scratch) as tmp:
        reader = _Reader(ledger, Path(tmp), progress)
        # (1) (2)
        own = list(reader.features(mine))
        duplicates = duplicate_lines(own)
        # (3)
        state = reader.state
        held_out = set(state.held_out())
        indices = sorted(held_out) if split == "train" else [
            i for i in state.of_kind("dataset") if i not in held_out
        ]  # fmt: skip
        other_labels: dict[str, list[str]] = {}
        for i in indices:
            ds = reader.predicate(i, "dataset")
            if ds is None or (ds.split == "train") == (split == "train"):
                continue
            for b in ds.batches:
                if _label(ds) not in other_labels.setdefault(b, []):
                    other_labels[b].append(_label(ds))
        mine_labels: dict[str, list[str]] = {}  # the recorded datasets of this side holding them
        for i in sorted({i for b in mine for i in state.listing(b)}):
            ds = reader.predicate(i, "dataset")
            if ds is None or (ds.split == "train") != (split == "train"):
                continue
            for b in ds.batches:
                if b in mine and _label(ds) not in mine_labels.setdefault(b, []):
                    mine_labels[b].append(_label(ds))
        others = reader.features(sorted(other_labels))  # read in turn, never all at once
        # (4) The other side (holdout, regression) is held; the train side streams through.
        train_labels = mine_labels if split == "train" else other_labels
        held_labels = other_labels if split == "train" else mine_labels
        matcher = Matcher(train_labels, held_labels, thresholds)
        # What is kept of each batch once compared: where its features came from, whether
        # there were any, and the problems met (never the features of the streamed side).
        done: list[tuple[str, str, bool, tuple[str, ...]]] = []
        unread: list[str] = []  # batches whose text episodes could not be normalised

        def note(f: BatchFeatures) -> BatchFeatures:
            done.append((f.batch, f.source, f.chunk is None, f.problems))
            return f

        held: list[BatchFeatures] = []
        for f in map(note, own) if split != "train" else map(note, others):
            if f.chunk is not None:
                matcher.hold(f.batch, f.chunk, sealed=f.source == "sealed")
                pairs, _ = reader.compared(f, unread, True, windows_too=False)
                matcher.hold_normalised(f.batch, pairs)
                held.append(f)
        unread += regrouped
        reader.hold_windows(matcher, held, unread)
        for f in map(note, own) if split == "train" else map(note, others):
            if f.chunk is not None:
                matcher.feed(f.batch, f.chunk)
                reader.feed_parts(matcher, f, unread)
                pairs, windows = reader.compared(f, unread, False)
                matcher.feed_normalised(f.batch, pairs)
                matcher.feed_windows(f.batch, windows)
        findings = matcher.findings() if other_labels and mine else []
        matcher.close()
    warnings = [
        line
        for batch, _source, missing, problems in done
        for line in problems
        if not (missing and reader.erased(batch))
    ] + unread
    sources = {batch: source for batch, source, _missing, _problems in done}
    return DatasetCheck(tuple(duplicates), tuple(findings), tuple(warnings), sources)


def ruled(findings: Sequence[Finding], rules: ContaminationRules | None) -> list[Finding]:
    """``findings`` as the policy's ``[contamination]`` ranks them: with ``runs = "near"``, a
    shared run of steps (`Finding.shared`), or a sealed episode's equal sketch
    (`SketchFinding`, its stand-in), is a near duplicate, not an exact one (its similarity
    stays: what was shared was equal)."""
    if rules is None or rules.runs != "near":
        return list(findings)
    return [replace(f, kind="near") if f.kind == "exact" and (
        f.shared is not None or isinstance(f, SketchFinding)) else f for f in findings]


def refusal(what: str, findings: Sequence[Finding], rules: ContaminationRules) -> str | None:
    """Why ``dataset create`` refuses a set (``what``), one line per refused finding (at most
    20), or None: exact duplicates, and near ones when ``rules.refuse`` is ``"near"``."""
    refused = [f for f in findings if f.kind == "exact" or rules.refuse == "near"]
    if not refused:
        return None
    if rules.refuse != "near":  # today's message, on one line
        listed = "; ".join(str(f) for f in refused[:10])
        more = f"; ... and {len(refused) - 10} more" if len(refused) > 10 else ""
        return (f"{what}: {len(refused)} episode(s) exactly duplicate episodes of the other "
                f"split: {listed}{more}")
    lines = [f"{what}: {len(refused)} episode(s) duplicate episodes of the other split, "
             "exactly or nearly (the policy's [contamination] refuses near duplicates):"]
    lines += [f"  {f}" for f in refused[:20]]
    if len(refused) > 20:
        lines.append(f"  ... and {len(refused) - 20} more")
    return "\n".join(lines)


def contamination_findings(
    ledger: LedgerHome, dataset: str, *, progress: ProgressFactory | None = None
) -> list[Finding]:
    """Contamination of a recorded dataset: `check_dataset` of its split and batches.

    Args:
        ledger: the ledger.
        dataset: the dataset's ``sha256:<hex>``, or any reference the catalog resolves.
        progress: shows progress over the batches compared.

    Raises:
        RefError: no such dataset.
    """
    from .catalog import Catalog, RefError

    if re.fullmatch(r"sha256:[0-9a-f]{64}", dataset):
        rows = list(ledger.trust_state().about(dataset))
    else:
        rows = [Catalog(ledger).resolve(dataset, {"dataset"}).index]
    reader = _Reader(ledger, ledger.root, None)
    ds = next((p for i in rows if (p := reader.predicate(i, "dataset")) is not None), None)
    if ds is None:
        raise RefError(f"dataset {dataset}: not recorded in this ledger")
    return list(check_dataset(ledger, ds.split, ds.batches, progress=progress).findings)
