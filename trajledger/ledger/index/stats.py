"""Segmented statistics of episodes from the audit index (``trajledger stats``).

Scope: the metrics of a set of episodes (success rate, return, length, invalid-action and
safety-intervention rates, judge agreement, cost per episode and per solved task; each defined
in docs/audit-index.md), overall and per segment of episode columns, with a warning for a
segment far below the aggregate (`WARN_STANDARD_ERRORS` standard errors and `WARN_RELATIVE`).
With a judge, its calibration: its agreement with the expert labels of the calibration dataset
its newest evaluator version names (`Calibration`); for a checkpoint, its evaluations as their
records say (`EvaluationRow`).
Non-scope: the tables (``index.tables``).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from trajledger.verify.errors import ProvenanceError
from trajledger.verify.kinds import KINDS
from trajledger.verify.other_predicates import Evaluation
from trajledger.verify.predicates import Evaluator, Predicate

from ..catalog import Catalog
from ..errors import LedgerError
from ..progress import ProgressFactory
from ..suggestions import did_you_mean, suggest
from .rows import statement_of
from .schema import EPISODE_COLUMNS, EPISODES, QueryError
from .tables import Index

if TYPE_CHECKING:
    from ..home import LedgerHome

__all__ = [
    "JUDGE_PASS",
    "WARN_RELATIVE",
    "WARN_STANDARD_ERRORS",
    "Calibration",
    "EvaluationRow",
    "Metrics",
    "Segment",
    "StatsReport",
    "episode_stats",
    "segment_stats",
]

JUDGE_PASS = 0.5
"""A judge score at or above this counts as the judge saying "success"."""

WARN_STANDARD_ERRORS = 2.0
WARN_RELATIVE = 0.2
"""A segment is flagged when its success rate or mean return is more than
`WARN_STANDARD_ERRORS` standard errors and at least `WARN_RELATIVE` (relative) below the
aggregate."""



@dataclass(frozen=True)
class Metrics:
    """Metrics of a set of episodes (docs/audit-index.md defines each).

    Attributes:
        episodes: how many.
        labelled: episodes whose termination_reason is ``success`` or ``failure``.
        successes: episodes labelled ``success``.
        success_rate: successes / labelled; None when nothing is labelled.
        returns: episodes that have a ``return`` (data without rewards has none).
        mean_return: mean of ``return`` over the episodes that have one; None when none do.
        return_std: sample standard deviation of ``return`` over the episodes that have one
            (None below 2 such episodes).
        mean_length: mean of ``num_steps``.
        invalid_rate: fraction of episodes flagged ``invalid``.
        intervention_rate: fraction with at least one safety intervention, over the episodes
            whose steps record interventions; None when none do.
        judged: episodes with both a judge score and a success label.
        judge_agreement: fraction of those where (judge score >= 0.5) equals success.
        total_cost: sum of known ``cost_usd``; None when no episode has a cost.
        cost_per_episode: total_cost / episodes with a known cost.
        solved_tasks: distinct tasks with a successful episode (an episode without task_id is
            its own task).
        cost_per_success: total_cost / solved_tasks; None when either is missing or zero.
    """

    episodes: int
    labelled: int
    successes: int
    success_rate: float | None
    returns: int
    mean_return: float | None
    return_std: float | None
    mean_length: float | None
    invalid_rate: float | None
    intervention_rate: float | None
    judged: int
    judge_agreement: float | None
    total_cost: float | None
    cost_per_episode: float | None
    solved_tasks: int
    cost_per_success: float | None

    def to_json(self) -> dict[str, Any]:
        """The metrics as JSON."""
        return asdict(self)


@dataclass(frozen=True)
class Segment:
    """The episodes whose ``by`` columns hold ``key`` values, with their metrics and warnings."""

    key: tuple[tuple[str, Any], ...]
    metrics: Metrics
    warnings: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``col=value,col=value``."""
        return ",".join(f"{k}={'null' if v is None else v}" for k, v in self.key)

    def to_json(self) -> dict[str, Any]:
        """The segment as JSON (``below_aggregate`` is true when there are warnings)."""
        return {
            "key": {k: v for k, v in self.key},
            "label": self.label,
            **self.metrics.to_json(),
            "below_aggregate": bool(self.warnings),
            "warnings": list(self.warnings),
        }


def _mean(x: npt.NDArray[Any]) -> float | None:
    return _scaled(np.mean, x) if len(x) else None


def _scaled(f: Callable[..., Any], x: npt.NDArray[Any], **kw: Any) -> float:
    """f(x) (a mean or a spread), which can overflow in its sum though the answer is finite:
    three returns of 1e308, 1e308 and -1e308 have the mean 3.3e307. Then x is scaled down by
    its largest magnitude and the answer scaled back up (an infinite input stays infinite)."""
    with np.errstate(over="ignore", invalid="ignore"):  # (inf - inf in unvalidated returns)
        v = float(f(x, **kw))
        if math.isfinite(v) or not np.isfinite(x).all():
            return v
        top = float(np.max(np.abs(x)))
        return top * float(f(x / top, **kw))


@dataclass(frozen=True)
class _Columns:
    """The stats columns of episode rows as numpy arrays (NaN for null)."""

    ret: npt.NDArray[np.float64]
    steps: npt.NDArray[np.float64]
    success: npt.NDArray[np.float64]
    invalid: npt.NDArray[np.float64]
    safety: npt.NDArray[np.float64]
    judge: npt.NDArray[np.float64]
    cost: npt.NDArray[np.float64]
    task: list[str]

    @classmethod
    def from_table(cls, t: pa.Table, judge_key: str | None) -> _Columns:
        def f(name: str) -> npt.NDArray[np.float64]:
            c = t.column(name).cast(pa.float64())
            return np.asarray(c.to_numpy(zero_copy_only=False), dtype=np.float64)

        if judge_key is None:
            judge = f("judge_score")
        else:
            judge = np.array(
                [
                    json.loads(s).get(judge_key, math.nan) if s is not None else math.nan
                    for s in t.column("judge_scores").to_pylist()
                ],
                dtype=np.float64,
            )
        tasks = [
            f"task:{task}" if task is not None else f"episode:{b}/{e}"
            for b, e, task in zip(
                t.column("batch").to_pylist(),
                t.column("episode_id").to_pylist(),
                t.column("task_id").to_pylist(),
                strict=True,
            )
        ]
        return cls(
            f("return"), f("num_steps"), f("success"), f("invalid"), f("safety_interventions"),
            judge, f("cost_usd"), tasks,
        )  # fmt: skip

    def metrics(self, idx: npt.NDArray[np.int64]) -> Metrics:
        ret, success = self.ret[idx], self.success[idx]
        ret = ret[~np.isnan(ret)]  # a null return (data without rewards) is no value
        labelled = ~np.isnan(success)
        successes = int(np.sum(success[labelled] == 1.0))
        safety = self.safety[idx]
        safety = safety[~np.isnan(safety)]
        judge = self.judge[idx]
        both = labelled & ~np.isnan(judge)
        cost = self.cost[idx]
        known = cost[~np.isnan(cost)]
        total = float(known.sum()) if len(known) else None
        solved = len({self.task[i] for i in idx[success == 1.0]})
        std = _scaled(np.std, ret, ddof=1) if len(ret) >= 2 else None
        return Metrics(
            episodes=len(idx),
            labelled=int(labelled.sum()),
            successes=successes,
            success_rate=successes / int(labelled.sum()) if labelled.any() else None,
            returns=len(ret),
            mean_return=_mean(ret),
            return_std=std,
            mean_length=_mean(self.steps[idx]),
            invalid_rate=_mean(np.nan_to_num(self.invalid[idx]) == 1.0),
            intervention_rate=_mean(safety > 0),
            judged=int(both.sum()),
            judge_agreement=_mean((judge[both] >= JUDGE_PASS) == (success[both] == 1.0)),
            total_cost=total,
            cost_per_episode=total / len(known) if total is not None else None,
            solved_tasks=solved,
            cost_per_success=total / solved if total is not None and solved else None,
        )


def _warnings(seg: Metrics, agg: Metrics) -> tuple[str, ...]:
    """Why a segment is far below the aggregate: more than 2 standard errors and >= 20%."""
    out = []
    if seg.success_rate is not None and agg.success_rate is not None and seg.labelled:
        p = agg.success_rate
        se = math.sqrt(p * (1 - p) / seg.labelled)
        gap = p - seg.success_rate
        if gap > WARN_STANDARD_ERRORS * se and gap >= WARN_RELATIVE * p and gap > 0:
            out.append(
                f"success rate {seg.success_rate:.3f} is far below {p:.3f} overall "
                f"({gap / se if se else math.inf:.1f} standard errors, n={seg.labelled})"
            )
    if seg.mean_return is not None and agg.mean_return is not None and agg.return_std is not None:
        m = agg.mean_return
        se = agg.return_std / math.sqrt(seg.returns)  # (a mean return has one or more)
        gap = m - seg.mean_return
        if gap > WARN_STANDARD_ERRORS * se and gap >= WARN_RELATIVE * abs(m) and gap > 0:
            out.append(
                f"mean return {seg.mean_return:.4g} is far below {m:.4g} overall "
                f"({gap / se if se else math.inf:.1f} standard errors, n={seg.returns})"
            )
    return tuple(out)


@dataclass(frozen=True)
class Calibration:
    """A judge's agreement with expert labels on the calibration dataset its newest evaluator
    version names (``stats --judge NAME``). ``calibrated`` only with such a dataset and at
    least one episode holding both an expert label (``success``) and the judge's score."""

    judge: str
    evaluator: str | None
    dataset: str | None
    agreement: float | None
    judged: int
    why: str

    @property
    def calibrated(self) -> bool:
        """True when the agreement was measured on expert labels."""
        return self.agreement is not None

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return {**asdict(self), "calibrated": self.calibrated}


@dataclass(frozen=True)
class EvaluationRow:
    """An evaluation of a checkpoint, as its record says (not verified here)."""

    digest: str
    index: int
    suite: str
    result: str
    episodes: int
    success_rate: float

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return asdict(self)


@dataclass(frozen=True)
class StatsReport:
    """Segmented statistics of a batch, dataset or checkpoint."""

    kind: str
    ref: str
    digest: str
    batches: tuple[str, ...]
    by: tuple[str, ...]
    aggregate: Metrics
    segments: tuple[Segment, ...]
    calibration: Calibration | None = None
    evaluations: tuple[EvaluationRow, ...] = ()
    left_out: tuple[str, ...] = ()
    """Why a batch's episodes are not in the figures (`Index.left_out`)."""

    @property
    def warnings(self) -> list[str]:
        """The batches left out of the figures, then every segment warning, as
        ``<segment>: <why>``."""
        return [*self.left_out, *(f"{s.label}: {w}" for s in self.segments for w in s.warnings)]

    def to_json(self) -> dict[str, Any]:
        """The report as JSON (stable keys)."""
        return {
            "kind": self.kind,
            "ref": self.ref,
            "digest": self.digest,
            "batches": list(self.batches),
            "by": list(self.by),
            "aggregate": self.aggregate.to_json(),
            "segments": [s.to_json() for s in self.segments],
            "warnings": self.warnings,
            "calibration": self.calibration.to_json() if self.calibration else None,
            "evaluations": [e.to_json() for e in self.evaluations],
        }


def episode_stats(
    index: Index, batches: Sequence[str], by: Sequence[str], *, judge_key: str | None = None
) -> tuple[Metrics, tuple[Segment, ...]]:
    """Metrics of the episodes of ``batches``, overall and per segment of ``by`` columns.

    Args:
        index: the audit index (its batches are indexed first when they are not yet).
        batches: batch digests.
        by: episode columns to segment by (none: only the aggregate).
        judge_key: the judge score to use (a key of ``judge_scores``); default the mean of
            an episode's scores (``judge_score``).

    Returns:
        The aggregate metrics, and the segments sorted by key (nulls last) with their
        far-below warnings.

    Raises:
        QueryError: an unknown or unsegmentable column.
    """
    bad = [c for c in by if c not in EPISODE_COLUMNS]
    if bad:
        close = did_you_mean(suggest(bad[0], EPISODE_COLUMNS, limit=1))
        raise QueryError(
            f"--by: no episode column {', '.join(map(repr, bad))}; {close and close + ' '}"
            "columns are " + ", ".join(EPISODE_COLUMNS)
        )
    needed = [
        "batch", "episode_id", "task_id", "return", "num_steps", "success", "invalid",
        "safety_interventions", "judge_score", "judge_scores", "cost_usd",
    ]  # fmt: skip
    cols = list(dict.fromkeys([*needed, *by]))
    t = index.query(EPISODES, columns=cols, batches=batches)
    data = _Columns.from_table(t, judge_key)
    aggregate = data.metrics(np.arange(t.num_rows))
    groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    keys = [t.column(c).to_pylist() for c in by]
    for i, key in enumerate(zip(*keys, strict=True)) if by else ():
        groups[key].append(i)
    segments = []
    for key in sorted(groups, key=lambda k: tuple((v is None, str(v)) for v in k)):
        m = data.metrics(np.array(groups[key]))
        segments.append(Segment(tuple(zip(by, key, strict=True)), m, _warnings(m, aggregate)))
    return aggregate, tuple(segments)


def segment_stats(
    ledger: LedgerHome,
    ref: str,
    by: Sequence[str] = (),
    *,
    judge_key: str | None = None,
    progress: ProgressFactory | None = None,
    note: Callable[[str], None] | None = None,
) -> StatsReport:
    """Statistics of the episodes of a batch, dataset or checkpoint, segmented by columns.

    A checkpoint's episodes are those of the batches of the datasets it was trained on.
    ``progress`` and ``note`` are `Index`'s.

    Raises:
        RefError: ``ref`` names no batch, dataset or checkpoint.
        QueryError: a ``by`` column is not an episode column; ``judge_key`` names no judge
            of these episodes and no evaluator.
    """
    item = Catalog(ledger).resolve(ref, {"rollout-batch", "dataset", "checkpoint"})
    index = Index(ledger, progress=progress, note=note)
    with index.locked():
        batches = index.batches_of(item.digest, item.kind)
        calibration = _calibration(ledger, index, judge_key) if judge_key else None
        if judge_key is not None and (calibration is None or calibration.evaluator is None):
            _refuse_unknown_judge(index, batches, judge_key)
        aggregate, segments = episode_stats(index, batches, by, judge_key=judge_key)
        left_out = tuple(index.left_out(batches))
    evaluations = _evaluations(ledger, item.digest) if item.kind == "checkpoint" else ()
    return StatsReport(
        item.kind, item.ref, item.digest, tuple(batches), tuple(by), aggregate, segments,
        calibration, evaluations, left_out,
    )


def _refuse_unknown_judge(index: Index, batches: Sequence[str], judge: str) -> None:
    """Refuse ``--judge NAME`` when no episode of ``batches`` has that judge's score and no
    evaluator is called so: a mistyped judge reported every judged figure as missing, exit 0.

    Raises:
        QueryError: naming the judges the episodes have.
    """
    t = index.query(EPISODES, columns=["judge_scores"], batches=batches)
    seen: set[str] = set()
    for s in t.column("judge_scores").to_pylist():
        if s is not None:
            seen |= set(json.loads(s))
    if judge not in seen:
        judges = ", ".join(sorted(seen)) or "none"
        raise QueryError(f"--judge {judge!r}: no episode here has that judge's score and no "
                         f"evaluator is called so (judges here: {judges})")


def _record_predicate(ledger: LedgerHome, kind: str, envelope: str) -> Predicate | None:
    """A record's typed predicate, read from its envelope (unverified: statistics)."""
    st = statement_of(ledger, envelope)
    try:
        return KINDS[kind].read(st, kind) if st is not None else None
    except (ProvenanceError, LedgerError):
        return None


def _calibration(ledger: LedgerHome, index: Index, judge: str) -> Calibration:
    """The judge's agreement with the expert labels of the calibration dataset named by the
    newest evaluator version called ``judge``."""
    versions = [i for i in Catalog(ledger).by_kind("evaluator") if i.name == judge]
    if not versions:
        return Calibration(judge, None, None, None, 0, f"no evaluator version named {judge!r} "
                           "is recorded, so none names a calibration dataset: not calibrated")
    newest = versions[-1]
    pred = _record_predicate(ledger, "evaluator", newest.envelope)
    calib = pred.calibration if isinstance(pred, Evaluator) else None
    if calib is None:
        return Calibration(judge, newest.ref, None, None, 0, f"evaluator {newest.ref} names no "
                           "calibration dataset (evaluator register --calibration): not "
                           "calibrated")
    label = f"{calib.name}@{calib.version}"
    m, _ = episode_stats(index, index.batches_of(calib.digest, "dataset"), (), judge_key=judge)
    if not m.judged or m.judge_agreement is None:
        return Calibration(judge, newest.ref, label, None, 0, f"calibration dataset {label}: no "
                           f"episode has both an expert label (success) and a {judge!r} score: "
                           "not calibrated")
    return Calibration(judge, newest.ref, label, m.judge_agreement, m.judged,
                       f"agrees with the expert labels of {label} on {m.judged} episode(s)")


def _evaluations(ledger: LedgerHome, checkpoint: str) -> tuple[EvaluationRow, ...]:
    """The evaluations of a checkpoint, in log order, as their records say."""
    state = ledger.trust_state()
    out = []
    for i, role in state.referrers(checkpoint):
        entry = state.entry(i)
        if role != "checkpoint" or entry is None or entry.kind != "evaluation":
            continue
        pred = _record_predicate(ledger, "evaluation", entry.envelope)
        if isinstance(pred, Evaluation) and pred.checkpoint.digest == checkpoint:
            out.append(EvaluationRow(
                entry.subject, i, f"{pred.suite.name}@{pred.suite.version}", pred.result,
                len(pred.passed_tests) + len(pred.failed_tests), pred.success_rate,
            ))
    return tuple(sorted(out, key=lambda r: r.index))
