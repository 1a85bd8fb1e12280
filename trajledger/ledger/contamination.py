"""Exact and near-duplicate episodes between a train set and holdout / regression sets.

Scope: `Matcher` holds the episodes of the other side (holdout, regression) and is fed the
train episodes chunk by chunk, so the train side is never in memory at once; it gives one
`Finding` per other-side episode that duplicates a train episode (exact: equal content
fingerprint; near: cosine similarity of feature vectors at or above the threshold of its
modality). Two front ends feed it:

- the audit index (``ledger.index``: `split_contamination`, `contamination_findings`), from
  derived rows, for ``dataset create`` and audits;
- `verified_contamination`, for the runner's admission gate: the other side is read from
  blobs re-hashed on the way (the batch manifest from the batch digest, then
  ``steps.parquet`` from the manifest's digest, each checked) and the train side from tables
  the caller verified. No index row is trusted, so editing the index cannot hide a holdout
  duplicate.

Non-scope: which datasets are on the other side (the caller reads them from verified records),
the decision (the runner fails on exact duplicates and reports near ones).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .episode_features import (
    FEATURE_COLUMNS,
    FeatureChunk,
    iter_step_features,
    parquet_batches,
    private_workdir,
    verified_local_copy,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from trajledger.verify.predicates import SealedEpisode

    from .store import ObjectStore

__all__ = [
    "MIN_NEAR_STEPS",
    "NEAR_NUMERIC_THRESHOLD",
    "NEAR_TEXT_THRESHOLD",
    "ContaminationReport",
    "Finding",
    "Matcher",
    "verified_contamination",
]

NEAR_TEXT_THRESHOLD = 0.8
"""Text episodes are near duplicates at this cosine similarity or above (docs/audit-index.md)."""

NEAR_NUMERIC_THRESHOLD = 0.995
"""Numeric episodes are near duplicates at this cosine similarity or above."""

MIN_NEAR_STEPS = 16
"""Numeric episodes shorter than this are compared exactly only: too little content to tell a
copy from a chance match (short CartPole falls under one repeated action agree to 0.999)."""

_THRESHOLDS = {"numeric": NEAR_NUMERIC_THRESHOLD, "text": NEAR_TEXT_THRESHOLD}
_BLOCK = 1024


@dataclass(frozen=True)
class Finding:
    """An episode of a holdout / regression batch that duplicates a train episode.

    Attributes:
        kind: ``exact`` (same content fingerprint) or ``near`` (similar features).
        similarity: cosine similarity of the feature vectors (1.0 for exact).
        train_batch / train_episode: the best-matching train episode.
        other_batch / other_episode: the holdout or regression episode.
        matches: how many train episodes match it (exactly, or at the near threshold).
        train_datasets / other_datasets: ``"<split> NAME@VERSION"`` of the recorded datasets
            holding each batch.
    """

    kind: str
    similarity: float
    train_batch: str
    train_episode: str
    other_batch: str
    other_episode: str
    matches: int = 1
    train_datasets: tuple[str, ...] = field(default=())
    other_datasets: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        what = (
            "an exact duplicate"
            if self.kind == "exact"
            else f"a near duplicate (similarity {self.similarity:.4f})"
        )
        more = f" and {self.matches - 1} more" if self.matches > 1 else ""
        o = f" ({', '.join(self.other_datasets)})" if self.other_datasets else ""
        t = f" ({', '.join(self.train_datasets)})" if self.train_datasets else ""
        return (
            f"episode {self.other_episode} of batch {self.other_batch[:19]}…{o} is {what} of "
            f"train episode {self.train_episode} of batch {self.train_batch[:19]}…{t}{more}"
        )

    def to_json(self) -> dict[str, Any]:
        """The finding as JSON."""
        out = asdict(self)
        out["train_datasets"], out["other_datasets"] = (
            list(self.train_datasets),
            list(self.other_datasets),
        )
        return out


def _near_mask(chunk: FeatureChunk, modality: str) -> npt.NDArray[np.bool_]:
    mods = np.array(chunk.modality, dtype=object) == modality
    mask = mods & chunk.valid
    if modality == "numeric":
        mask &= chunk.num_steps >= MIN_NEAR_STEPS
    return np.asarray(mask, dtype=bool)


class Matcher:
    """Held other-side episodes, matched against train episodes fed in chunks.

    Memory: the other side's fingerprints and vectors (about 600 bytes per episode), never the
    train side. The comparison is exact (blockwise matrix products, no approximate index), so
    nothing above a threshold is missed.
    """

    def __init__(
        self,
        train_labels: Mapping[str, Sequence[str]] | None = None,
        other_labels: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Start empty; `hold` the other side, then `feed` the train side."""
        self.train_labels = dict(train_labels or {})
        self.other_labels = dict(other_labels or {})
        self._batches: list[str] = []
        self._episodes: list[str] = []
        self._fp: dict[str, list[int]] = {}
        self._held: list[FeatureChunk] = []
        self._near: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]] = {}
        self._exact_first: dict[int, tuple[str, str]] = {}
        self._exact_count: dict[int, int] = {}
        self._best: npt.NDArray[np.float64] = np.zeros(0)
        self._count: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._best_of: list[tuple[str, str] | None] = []
        self._frozen = False

    def hold(self, batch: str, chunk: FeatureChunk) -> None:
        """Add other-side episodes of ``batch``."""
        if self._frozen:
            raise RuntimeError("Matcher.hold after feed")
        base = len(self._episodes)
        self._batches.extend([batch] * len(chunk))
        self._episodes.extend(chunk.episode_ids)
        for i, fp in enumerate(chunk.fingerprints):
            if fp is not None:
                self._fp.setdefault(fp, []).append(base + i)
        self._held.append(chunk)

    def _freeze(self) -> None:
        if self._frozen:
            return
        self._frozen = True
        held = FeatureChunk.concat(self._held)
        self._held = []
        for modality in _THRESHOLDS:
            rows = np.flatnonzero(_near_mask(held, modality)) if len(held) else np.zeros(0, int)
            self._near[modality] = (rows.astype(np.int64), held.vectors[rows])
        n = len(self._episodes)
        self._best = np.full(n, -2.0)
        self._count = np.zeros(n, dtype=np.int64)
        self._best_of = [None] * n

    def feed(self, batch: str, chunk: FeatureChunk) -> None:
        """Match train episodes of ``batch`` against every held episode."""
        self._freeze()
        if not len(chunk) or not self._episodes:
            return
        # Exact: equal content fingerprints.
        for j, fp in enumerate(chunk.fingerprints):
            for i in self._fp.get(fp, ()) if fp is not None else ():
                self._exact_first.setdefault(i, (batch, chunk.episode_ids[j]))
                self._exact_count[i] = self._exact_count.get(i, 0) + 1
        # Near: cosine similarity per modality, blockwise.
        for modality, threshold in _THRESHOLDS.items():
            rows, held = self._near[modality]
            cols = np.flatnonzero(_near_mask(chunk, modality))
            if not len(rows) or not len(cols):
                continue
            train = chunk.vectors[cols]
            for lo in range(0, len(rows), _BLOCK):
                block_rows = rows[lo : lo + _BLOCK]
                sims = held[lo : lo + _BLOCK] @ train.T
                self._count[block_rows] += (sims >= threshold).sum(axis=1)
                j = sims.argmax(axis=1)
                s = sims[np.arange(len(block_rows)), j]
                better = np.flatnonzero(s > self._best[block_rows])
                for k in better.tolist():
                    i = int(block_rows[k])
                    self._best[i] = float(s[k])
                    self._best_of[i] = (batch, chunk.episode_ids[int(cols[j[k]])])

    def findings(self) -> list[Finding]:
        """One finding per held episode with a match: exact first, then by batch and episode."""
        self._freeze()
        out = []
        for i in range(len(self._episodes)):
            b, e = self._batches[i], self._episodes[i]
            if i in self._exact_first:
                tb, te = self._exact_first[i]
                kind, sim, matches = "exact", 1.0, self._exact_count[i]
            elif self._count[i] > 0 and self._best_of[i] is not None:
                tb, te = self._best_of[i]  # type: ignore[misc]
                kind, sim, matches = (
                    "near",
                    round(min(float(self._best[i]), 1.0), 6),
                    int(self._count[i]),
                )
            else:
                continue
            train_labels = tuple(self.train_labels.get(tb, ()))
            other_labels = tuple(self.other_labels.get(b, ()))
            out.append(Finding(kind, sim, tb, te, b, e, matches, train_labels, other_labels))
        out.sort(key=lambda f: (f.kind != "exact", f.other_batch, f.other_episode))
        return out


@dataclass(frozen=True)
class ContaminationReport:
    """What `verified_contamination` found.

    Attributes:
        findings: one per other-side episode that duplicates a train episode.
        unchecked: one line per other-side batch whose data could not be read and verified
            (missing, altered, unreadable): contamination with it cannot be ruled out, so a
            gate that must be sure fails on any.
        episodes: how many other-side and train episodes were compared.
    """

    findings: tuple[Finding, ...]
    unchecked: tuple[str, ...]
    episodes: tuple[int, int] = (0, 0)


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


def _verified_chunks(store: ObjectStore, batch: str, workdir: Path) -> Iterator[FeatureChunk]:
    """Features of a batch's episodes, from a private copy of its re-hashed step file."""
    import pyarrow.parquet as pq

    digest, size = _steps_digest(store, batch)
    path = verified_local_copy(store, digest, workdir, private=True)
    try:
        got = path.stat().st_size
        if got != size:
            from trajledger.verify.errors import DigestMismatchError

            raise DigestMismatchError(
                f"steps.parquet of batch {batch[:19]}…: {got} bytes, want {size}"
            )
        with pq.ParquetFile(path) as pf:
            yield from iter_step_features(parquet_batches(pf, FEATURE_COLUMNS))
    finally:
        path.unlink(missing_ok=True)


def verified_contamination(
    store: ObjectStore,
    train: Mapping[str, pa.Table | None],
    others: Mapping[str, Sequence[str]],
    *,
    train_labels: Mapping[str, Sequence[str]] | None = None,
    workdir: Path | None = None,
    sealed: Mapping[str, Sequence[SealedEpisode]] | None = None,
) -> ContaminationReport:
    """Contamination of verified train data by holdout / regression batches, from re-hashed
    blobs only (for the admission gate).

    Steps:
        1. For each other-side batch (in digest order): read its manifest, checking that it
           hashes to the batch digest; copy its ``steps.parquet`` into a private directory,
           checking size and digest on the way; compute its episodes' features from that copy.
           A batch that fails any of this is listed in ``unchecked`` (not skipped silently). A
           sealed batch is held by the fingerprints of its verified record (``sealed``).
        2. For each train batch: compute features from the table given (the bytes the caller
           verified), or, when the table is None, from the store as in (1) (a train batch that
           cannot be verified is listed in ``unchecked`` too).
        3. Match (`Matcher`): exact duplicates by fingerprint, near ones by feature vectors.

    Args:
        store: the object store holding the batches.
        train: train batch digest -> its verified step table, or None to read it verified.
        others: other-side batch digest -> labels of the datasets holding it (for example
            ``["holdout eval@1"]``), from verified dataset records.
        train_labels: train batch digest -> labels, for the findings' messages.
        workdir: where private copies are made (default the system temporary directory).
        sealed: other-side batch digest -> the fingerprints its verified record publishes, for
            sealed batches (their bytes are not readable here).

    Returns:
        The findings and the batches that could not be checked. Nothing is read from the
        audit index.
    """
    from trajledger.verify.errors import ProvenanceError

    from .errors import LedgerError

    # Anything that stops a batch from being read and checked makes it "unchecked".
    unusable = (ProvenanceError, LedgerError, OSError, ValueError, TypeError, KeyError)
    matcher = Matcher(train_labels, others)
    unchecked: list[str] = []
    held = fed = 0
    with private_workdir(workdir) as tmp:
        # (1)
        for batch in sorted(others):
            try:
                if sealed and batch in sealed:
                    from .sealing import sealed_features

                    chunks = [sealed_features(sealed[batch])]
                else:
                    chunks = list(_verified_chunks(store, batch, Path(tmp)))
            except unusable as e:
                unchecked.append(f"holdout/regression batch {batch[:19]}…: {e}")
                continue
            for chunk in chunks:
                matcher.hold(batch, chunk)
                held += len(chunk)
        # (2) (3)
        for batch in sorted(train):
            table = train[batch]
            try:
                chunks_iter: Iterable[FeatureChunk] = (
                    iter_step_features(table.to_batches(max_chunksize=1 << 16))
                    if table is not None
                    else _verified_chunks(store, batch, Path(tmp))
                )
                for chunk in chunks_iter:
                    matcher.feed(batch, chunk)
                    fed += len(chunk)
            except unusable as e:
                unchecked.append(f"train batch {batch[:19]}…: {e}")
    return ContaminationReport(tuple(matcher.findings()), tuple(unchecked), (held, fed))
