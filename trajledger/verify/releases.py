"""The judgement of evaluations and releases: whether an evaluation ran on a held-out suite, and
whether a checkpoint's evaluations meet the policy's ``[release]`` rules.

Scope: pure functions, as ``verify.judge``, over verified records: `evaluation_problems`
(the suite is a holdout or regression dataset holding every batch a test names),
`release_named` (a release record is named by its content) and `release_requirement` (one rule
of ``[release]`` judged for a checkpoint, as a check on its node). Loaded only when a lineage
holds an evaluation or release record, or a release is decided (``trajledger release``): a
verification of data and training never needs it.
Non-scope: finding the evaluations (``verify.lineage``), the rules and their bounds
(``verify.release_rules``).
Spec: schemas/SPEC.md, sections "Evaluation" and "Release".
"""

from __future__ import annotations

from collections.abc import Sequence

from ._jcs import canonical_bytes
from .digest import digest_bytes
from .errors import FormatError
from .judge import Record, RecordFailure
from .predicates import HELD_OUT, Dataset, Evaluation, split_test_name
from .release_rules import Requirement, requirement_problems
from .report import OK, Node
from .report import short as _short

__all__ = ["evaluation_problems", "release_named", "release_requirement"]


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
