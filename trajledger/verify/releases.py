"""The judgement of evaluations and releases: whether an evaluation ran on a held-out suite, and
whether a checkpoint's evaluations meet the policy's ``[release]`` rules.

Scope: ``[release]`` of a policy (format 2): its rules (`ReleaseRules`, `Requirement`) and
their parsing (`parse_release`, for ``verify.policy``); and pure functions, as
``verify.judge``, over verified records: `evaluation_problems` (the suite is a holdout or
regression dataset holding every batch a test names), `release_named` (a release record is
named by its content), `requirement_problems` (one metric against one rule's bounds) and
`release_requirement` (one rule judged for a checkpoint, as a check on its node).
Loaded only for a policy with ``[release]``, a lineage holding an evaluation or release
record, or a release decided (``trajledger release``): a verification of data and training
never needs it.
Non-scope: finding the evaluations (``verify.lineage``), the rest of the policy
(``verify.policy``).
Spec: schemas/SPEC.md, sections "Evaluation" and "Release".
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._jcs import canonical_bytes
from .digest import digest_bytes
from .errors import FormatError
from .judge import Record, RecordFailure
from .policy import Role
from .predicates import HELD_OUT, Dataset, Evaluation, split_test_name
from .report import OK, Node
from .report import short as _short

__all__ = ["ReleaseRules", "Requirement", "evaluation_problems", "parse_release", "release_named",
           "release_requirement", "requirement_problems"]


def _decimal(value: object, what: str) -> float:
    """A finite number (TOML or JSON number, or a decimal string as the JSON form writes)."""
    try:
        if type(value) in (int, float) or isinstance(value, str):
            number = float(value)  # type: ignore[arg-type]
            if math.isfinite(number):
                return number
    except ValueError:
        pass
    raise FormatError(f"{what}: {value!r} is not a finite number")


@dataclass(frozen=True)
class Requirement:
    """One rule of ``[release]``: the suite ``NAME@VERSION`` a checkpoint must be evaluated
    on, and bounds on one ``metric`` of that evaluation (``success_rate``, computed from the
    passed and failed episodes, by default): at least ``min``, at most ``max``, and no drop of
    more than ``max_drop`` (in the metric's units: 0.02 is 2 points of success rate) below the
    parent checkpoint's evaluation on the same suite (judged by
    `verify.releases.requirement_problems`)."""

    suite: str
    metric: str = "success_rate"
    min: float | None = None
    max: float | None = None
    max_drop: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON form (bounds as decimal strings: the policy is hashed as RFC 8785 JSON,
        which the verifier canonicalises without floating point)."""
        out: dict[str, Any] = {"suite": self.suite, "metric": self.metric}
        for k in ("min", "max", "max_drop"):
            if (v := getattr(self, k)) is not None:
                out[k] = repr(v)
        return out


@dataclass(frozen=True)
class ReleaseRules:
    """``[release]``: the evaluations a release needs (`Requirement`) and how many approvers
    must have recorded it (``approvals``)."""

    require: tuple[Requirement, ...]
    approvals: int = 1

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {"approvals": self.approvals, "require": [r.to_json() for r in self.require]}


_METRIC = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_REQUIREMENT = {"suite", "metric", "min", "max", "max_drop"}


def parse_release(value: object, evaluator: Role, what: str) -> ReleaseRules | None:
    """``[release]``: ``approvals`` (default 1) and ``[[release.require]]`` tables of ``suite``
    (``NAME@VERSION``), ``metric`` (default ``success_rate``) and ``min`` / ``max`` /
    ``max_drop`` (at least one)."""
    if value is None:
        return None
    what = f"{what}: release"
    if not isinstance(value, dict) or set(value) - {"approvals", "require"}:
        raise FormatError(f"{what}: must be a table of approvals and require")
    approvals = value.get("approvals", 1)
    if type(approvals) is not int or approvals < 1:
        raise FormatError(f"{what}: approvals must be an integer >= 1, got {approvals!r}")
    require = value.get("require", [])
    if not isinstance(require, list):
        raise FormatError(f"{what}: require: must be a list")
    out: list[Requirement] = []
    for i, item in enumerate(require):
        here = f"{what}: require item {i}"
        if not isinstance(item, dict) or set(item) - _REQUIREMENT:
            raise FormatError(f"{here}: must be a table of {', '.join(sorted(_REQUIREMENT))}")
        suite, metric = item.get("suite"), item.get("metric", "success_rate")
        name, at, version = suite.rpartition("@") if isinstance(suite, str) else ("", "", "")
        if not (isinstance(suite, str) and name and at and version):
            raise FormatError(f"{here}: suite {suite!r} must be NAME@VERSION")
        if not isinstance(metric, str) or not _METRIC.fullmatch(metric):
            raise FormatError(f"{here}: metric {metric!r} is not a metric name")
        bounds = {k: _decimal(item[k], f"{here}: {k}") for k in ("min", "max", "max_drop")
                  if k in item}
        if not bounds or bounds.get("max_drop", 0) < 0:
            raise FormatError(f"{here}: give min, max or max_drop (max_drop >= 0)")
        if any(r.suite == suite and r.metric == metric for r in out):
            raise FormatError(f"{here}: {metric} on {suite} is required twice")
        out.append(Requirement(suite, metric, **bounds))
    if not out:
        raise FormatError(f"{what}: require names no suite; add [[release.require]] tables")
    if not (evaluator.keys or evaluator.identities):
        raise FormatError(f"{what}: needs evaluator keys (roles.evaluator) to sign evaluations")
    return ReleaseRules(tuple(out), approvals)


def evaluation_problems(ev: Evaluation, suite: Record | RecordFailure | None) -> list[str]:
    """Why an evaluation is not one of a held-out suite: the suite's verified record (``suite``)
    is a holdout or regression dataset, and each test names one of its batches."""
    if not isinstance(suite, Record) or not isinstance(suite.predicate, Dataset):
        return ["the suite's dataset record does not verify"]
    ds, out = suite.predicate, []
    if ds.split not in HELD_OUT:
        out.append(f"dataset {ds.name}@{ds.version} is a {ds.split!r} split; evaluations "
                   "run on holdout or regression suites")
    outside = {split_test_name(t)[0] for t in ev.passed_tests + ev.failed_tests} - set(ds.batches)
    if outside:
        out.append(f"tests name {len(outside)} batch(es) not in the suite "
                   f"(first {_short(min(outside))})")
    return out


def release_named(rec: Record) -> str | None:
    """Why a release record is not named by its content (its subject must be the SHA-256 of
    its predicate's canonical JSON); None when it is."""
    try:
        named = digest_bytes(canonical_bytes(rec.statement.predicate, "release"))
    except FormatError as e:
        named = str(e)
    return None if named == rec.entry.subject else (
        f"its subject is not the SHA-256 of its predicate ({named})")


def requirement_problems(req: Requirement, value: float | None,
                         parent: float | None) -> list[str]:
    """Why ``value`` (and its drop from the parent's ``parent``, when the rule has
    ``max_drop`` and the checkpoint a parent) fails the rule ``req``; empty when it passes."""
    if value is None:
        return [f"the evaluation records no metric {req.metric!r}"]
    out = []
    if req.min is not None and value < req.min:
        out.append(f"{req.metric} {value:.4g} is below the minimum {req.min:g}")
    if req.max is not None and value > req.max:
        out.append(f"{req.metric} {value:.4g} is above the maximum {req.max:g}")
    if req.max_drop is not None and parent is not None and parent - value > req.max_drop:
        out.append(f"{req.metric} {value:.4g} dropped {parent - value:.4g} from the parent's "
                   f"{parent:.4g}, more than {req.max_drop:g}")
    return out


def release_requirement(
    node: Node, req: Requirement, checkpoint: str, ev: Record | None,
    parent: Record | None, parents: Sequence[str], cited: Sequence[str] | None,
) -> set[str]:
    """Judge one requirement of the policy's ``[release]`` for ``checkpoint``: ``ev`` is its
    latest verified evaluation on the suite, ``parent`` that of its parent (``parents[0]``)
    when the rule has ``max_drop``; both must be ``cited`` when it is given. Adds a check to
    ``node``; returns the digests of the evaluations used."""
    label = f"{req.metric} on {req.suite}"
    if ev is None:
        node.fail(label, f"missing: no verified evaluation of {_short(checkpoint)} on "
                  f"{req.suite}; run 'trajledger eval {checkpoint} --suite {req.suite}'")
        return set()
    runs = [ev] + ([parent] if parent is not None else [])
    assert isinstance(ev.predicate, Evaluation)
    problems = requirement_problems(
        req, ev.predicate.metric(req.metric),
        parent.predicate.metric(req.metric) if parent is not None
        and isinstance(parent.predicate, Evaluation) else None,
    )
    if req.max_drop is not None and parents and parent is None:
        problems.append(f"the parent {_short(parents[0])} has no verified evaluation "
                        f"on {req.suite}")
    problems += [f"evaluation {_short(r.entry.subject)} (log index {r.index}) is the "
                 "latest but not cited" for r in runs
                 if cited is not None and r.entry.subject not in cited]
    what = "; ".join(f"{'parent ' if r is parent else ''}evaluation "
                     f"{_short(r.entry.subject)} (log index {r.index})" for r in runs)
    if problems:
        node.fail(label, "; ".join(problems) + f" ({what})")
    else:
        node.add(label, OK, f"{ev.predicate.metric(req.metric):.4g} ({what})")
    return {r.entry.subject for r in runs}
