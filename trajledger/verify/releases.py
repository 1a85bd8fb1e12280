"""The judgement of evaluations and releases: whether an evaluation ran on a held-out suite, and
whether a checkpoint's evaluations meet the policy's ``[release]`` rules.

Scope: pure functions, as ``verify.judge``, over verified records: `evaluation_problems`
(the suite is a holdout or regression dataset holding every batch a test names),
`release_named` (a release record is named by its content) and `release_requirement` (one rule
of ``[release]`` judged for a checkpoint, as a check on its node); and over a
`LineageVerifier`, `judge_use` (the checks of an evaluation's or a release's node) and
`release_rules` (which evaluations count for each rule: the latest verified one). Loaded only
when a lineage holds an evaluation or release record, or a release is decided (``trajledger
release``): a verification of data and training never needs it.
Non-scope: verifying the records (``verify.lineage``), the rules and their bounds
(``verify.release_rules``).
Spec: schemas/SPEC.md, sections "Evaluation" and "Release".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from ._jcs import canonical_bytes
from .digest import HEX64, digest_bytes
from .errors import FormatError
from .judge import Record, RecordFailure
from .nodes import NAMED
from .other_predicates import Evaluation, Release, split_test_name
from .predicates import HELD_OUT, Dataset, Environment, RolloutBatch
from .release_rules import Requirement, requirement_problems
from .report import INFO, OK, Node
from .report import short as _short

if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .evidence import Evidence
    from .kinds import Dependency
    from .log_entry import LogEntry
    from .log_index import LogIndex
    from .policy import TrustPolicy

__all__ = ["CHECK_AGAIN", "NEAR_REFUSED", "Walk", "brought_by", "check_again", "compared",
           "evaluation_problems", "judge_use", "near_duplicates", "other_environments",
           "release_named", "release_requirement", "release_rules", "release_suite",
           "train_batches", "trained_on_suite", "unchecked"]


class Walk(Protocol):
    """What evaluations and releases are judged from: a `verify.lineage.LineageVerifier`,
    which stands above this module and loads it for an evaluation or a release."""

    policy: TrustPolicy
    checkpoint: Checkpoint | None
    evidence: Evidence

    @property
    def index(self) -> LogIndex: ...

    def entry(self, index: int) -> LogEntry | None: ...

    def kind_at(self, index: int, kind: str) -> LogEntry | None: ...

    def records(self, subject: str, kind: str) -> list[int]: ...

    def record(self, index: int) -> Record | RecordFailure: ...

    def identity_record(self, digest: str, kind: str) -> Record | RecordFailure | None: ...

    def node(self, digest: str) -> Node: ...

    def artifact(self, digest: str, kind: str, *, follow: bool = True) -> Node: ...

    def dependencies(self, digest: str) -> list[Dependency]: ...


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


def _eval_line(checkpoint: str, suite: str) -> str:
    """The command that evaluates ``checkpoint`` on ``suite``, as a user runs it (out43
    finding 7: without ``--key`` it was a usage error as printed): each a shell word
    (`shell_word`, escaped as `NAMED` escapes a name: a signed name is its signer's text,
    rev48 finding 1)."""
    from .shell_word import shell_word

    return (f"'trajledger eval {shell_word(checkpoint, NAMED)} --suite "
            f"{shell_word(suite, NAMED)} --key KEY' (KEY: a key of the policy's evaluator role)")


def release_requirement(
    node: Node, req: Requirement, checkpoint: str, ev: Record | None,
    parent: Record | None, parents: Sequence[str], cited: Sequence[str] | None,
    suite_failed: int | None = None, fails_with: Node | None = None, *,
    train: Callable[[str], dict[str, list[str]]] = lambda ck: {}, strict: bool = False,
    refuse_near: bool = False,
    environments: Callable[[Record], str | None] = lambda r: None,
) -> set[str]:
    """Judge one requirement of the policy's ``[release]`` for ``checkpoint``: ``ev`` is its
    latest verified evaluation on the suite, ``parent`` that of its parent (``parents[0]``)
    when the rule has ``max_drop``; both must be ``cited`` when it is given. Adds a check to
    ``node``; returns the digests of the evaluations used. ``suite_failed``: the log index of
    the latest evaluation, not counted because its suite does not verify (no new run helps).
    ``fails_with``: a failing record the evaluations stand on (`failing_below`): the check
    fails with it as its cause, so it is no second problem, and never reads ok while its
    evidence fails (out46's Left: a revoked evaluator version). Once the rule is met, each
    evaluation used that did not compare its suite with every train batch of its checkpoint's
    lineage (``train``: checkpoint digest -> those batches' labels, `train_batches`) is
    said: an ``info`` check, or a failing one when ``strict`` (``[release]
    require_contamination_check``; rel48) or ``refuse_near`` (an evaluation that never
    compared cannot show its suite is not near that data: fix60). Each evaluation used that
    found near duplicates of that training data (`near_duplicates`) is said too: an ``info``
    check, or a failing one when ``refuse_near`` (the policy's ``[contamination] refuse =
    "near"``; out56); and one run in another environment version than its checkpoint was
    trained in (``environments``: an evaluation's `other_environments`), an ``info`` check
    (out56)."""
    label = f"{req.metric} on {req.suite}"
    if ev is None and suite_failed is not None:
        node.fail(label, f"missing: the latest evaluation of {_short(checkpoint)} on "
                  f"{req.suite} (log index {suite_failed}) does not count: the suite does not "
                  f"verify (revoked, say), and no new evaluation on it can; see 'trajledger "
                  f"verify {req.suite}'")
        return set()
    if ev is None:
        node.fail(label, f"missing: no verified evaluation of {_short(checkpoint)} on "
                  f"{req.suite}; run {_eval_line(checkpoint, req.suite)}")
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
                        f"on {req.suite}: run {_eval_line(parents[0], req.suite)}")
    problems += [f"evaluation {_short(r.entry.subject)} (log index {r.index}) is the "
                 "latest but not cited" for r in runs
                 if cited is not None and r.entry.subject not in cited]
    what = "; ".join(f"{'parent ' if r is parent else ''}evaluation "
                     f"{_short(r.entry.subject)} (log index {r.index})" for r in runs)
    if problems:
        node.fail(label, "; ".join(problems) + f" ({what})")
    elif fails_with is not None:
        node.fail(label, f"{ev.predicate.metric(req.metric):.4g} ({what}), which does not "
                  f"count while {fails_with.label} fails: it stands on it", cause=fails_with.id)
    else:
        node.add(label, OK, f"{ev.predicate.metric(req.metric):.4g} ({what})")
        for r in runs:
            if (said := unchecked(r, train)) is not None:
                _contamination(node, req, r, said, strict or refuse_near,
                               REQUIRE if strict else NEAR)
            if (moved := environments(r)) is not None:
                node.add(f"environment on {req.suite}", INFO, f"evaluation "
                         f"{_short(r.entry.subject)} (log index {r.index}): {moved}")
            if (near := near_duplicates(r)) is None:
                continue
            if not refuse_near:
                node.add(f"contamination on {req.suite}", INFO, near + NEAR_COUNTS)
                continue
            node.fail(f"contamination on {req.suite}", f"{near}; {NEAR_REFUSED}")
    return {r.entry.subject for r in runs}


def near_duplicates(rec: Record) -> str | None:
    """The words of a release's ``info`` check for an evaluation it uses whose comparison found
    suite episodes near duplicates of its checkpoint's training data (its ``contamination``
    entry's ``near``: ``eval`` warned of them, and the policy refused exact duplicates only);
    None when it found none. The evaluation counts; whoever releases, or verifies the release,
    learns it (out54 finding 4)."""
    ev = rec.predicate
    assert isinstance(ev, Evaluation)
    for entry in _check_entries(rec):
        near, of = entry.get("near"), entry.get("suiteEpisodes")
        if type(near) is int and near > 0:
            ck = f"{ev.checkpoint.name}@{ev.checkpoint.version}".translate(NAMED)
            return (f"evaluation {_short(rec.entry.subject)} (log index {rec.index}) found "
                    f"{near}{f' of its {of}' if type(of) is int else ''} suite episode(s) near "
                    f"duplicates of {ck}'s training data")
    return None


def other_environments(v: Walk, checkpoint: str, named: str, suite: str) -> str | None:
    """Whether the suite's episodes were recorded in an environment version the checkpoint (or
    a base checkpoint of it) was not trained in: ``suite SUITE's episodes were recorded in
    environment E@2, and NAMED was trained in E@1`` (environments compared by digest; names as
    their signed records give them), or None (the same ones, or none known). An evaluation
    in another version of the environment measures the checkpoint there: said where it is
    made (``eval``) and in every release that uses it, an ``info`` check (out56)."""
    def name(digest: str) -> str:
        rec = v.identity_record(digest, "environment")
        p = rec.predicate if isinstance(rec, Record) else None
        return f"{p.name}@{p.version}" if isinstance(p, Environment) else _short(digest)

    trained: set[str] = set()
    lineage = [checkpoint]  # (each base checkpoint once, as `train_batches` walks them)
    for ck in lineage:
        for d in v.dependencies(ck):
            if d.role == "base-checkpoint" and d.digest not in lineage:
                lineage.append(d.digest)
            elif d.role == "environment":
                trained.add(d.digest)
    ds = v.identity_record(suite, "dataset")
    if not trained or not isinstance(ds, Record) or not isinstance(ds.predicate, Dataset):
        return None
    recorded: dict[str, None] = {}
    for b in ds.predicate.batches:
        rec = v.identity_record(b, "rollout-batch")
        if isinstance(rec, Record) and isinstance(rec.predicate, RolloutBatch):
            recorded[rec.predicate.environment.digest] = None
    other = [e for e in recorded if e not in trained]
    if not other:
        return None
    return (f"suite {ds.predicate.name}@{ds.predicate.version}'s episodes were recorded in "
            f"environment {', '.join(map(name, other))}, and {named} was trained in "
            f"{', '.join(sorted(map(name, trained)))}: the evaluation measures it in another "
            "version of its environment").translate(NAMED)


NEAR_COUNTS = ("; it counts, as an evaluation does whatever near duplicates it found "
               "([contamination] refuse = \"near\" in a successor policy has 'eval' refuse such "
               "a suite, and a release that uses such an evaluation fail)")
"""The end of `near_duplicates`' ``info`` check under a policy refusing exact duplicates only."""


NEAR_REFUSED = ("the policy's [contamination] refuse = \"near\" refuses such a suite ('eval' "
                "refuses it now), so the evaluation does not count for [release], whenever it "
                "was recorded (the policy that judges the release decides): record a suite "
                "without them and a successor policy whose [release] requires it ('trajledger "
                "policy set'), evaluate the checkpoint on it, then 'trajledger release' again")
"""The end of the failing check of an evaluation a release uses that found near duplicates of
its checkpoint's training data, under ``[contamination] refuse = "near"`` (out56); ``release``'s
next step."""


def compared(rec: Record) -> bool:
    """Whether an evaluation records the comparison of its suite with its checkpoint's
    training data (its ``contamination`` configuration entry, role ``contamination-check``,
    which ``eval`` writes since the thirty-first round: evalc46). One without it still counts
    (older releases verify as they did); the release says so (out47 finding 3)."""
    return _check_entry(rec) is not None


def _check_entry(rec: Record) -> Mapping[str, object] | None:
    """The annotations of an evaluation's ``contamination`` entry (`compared`), or None."""
    return next(iter(_check_entries(rec)), None)


def _check_entries(rec: Record) -> list[Mapping[str, object]]:
    """The annotations of each of an evaluation's ``contamination`` entries (other tooling may
    write more than one: each is read, rev47 finding 2)."""
    ev = rec.predicate
    return [d.annotations for d in ev.configuration if d.name == "contamination"
            and d.annotations.get("role") == "contamination-check"] if isinstance(
        ev, Evaluation) else []


def unchecked(rec: Record, train: Callable[[str], dict[str, list[str]]]) -> str | None:
    """What the evaluation ``rec`` did not compare its suite with, of its checkpoint's training
    data (``train``: `train_batches` of a checkpoint digest), as the words of a release's
    ``contamination`` check; None when it compared every train batch: its entry
    (`compared`) says ``unchecked`` 0 of ``trainBatches`` no fewer than the lineage holds.
    Named: the lineage's train batches for an evaluation with no entry (or one counting too
    few); the entry's ``uncheckedBatches`` (``eval`` writes them since rel48), or their count
    alone, for one that could not read some (erased, or imported without their data). rel48,
    out47's Left."""
    ev, entries = rec.predicate, _check_entries(rec)
    assert isinstance(ev, Evaluation)
    ck = f"{ev.checkpoint.name}@{ev.checkpoint.version}".translate(NAMED)
    head = f"evaluation {_short(rec.entry.subject)} (log index {rec.index})"
    if not entries:
        held = train(ev.checkpoint.digest)
        return (f"{head} records no comparison of its suite with {ck}'s training data (no "
                "'contamination' entry: made before 'eval' compared them, or by other "
                f"tooling), {_batches(held, list(held))}") if held else None
    # (every entry: one saying some batch unchecked is not hidden by another: rev47 finding 2)
    return next(filter(None, (_entry_unchecked(e, ev, train, head, ck) for e in entries)), None)


def _entry_unchecked(entry: Mapping[str, object], ev: Evaluation,
                     train: Callable[[str], dict[str, list[str]]], head: str,
                     ck: str) -> str | None:
    """What one ``contamination`` entry of the evaluation ``ev`` says was not compared
    (`unchecked`), or None when it says every train batch was."""
    count, listed = entry.get("unchecked"), entry.get("uncheckedBatches")
    named = [b for b in listed if isinstance(b, str) and b[:7] == "sha256:" and HEX64.fullmatch(
        b[7:])] if isinstance(listed, list) else []  # (digests only: signed text, printed)
    # (an entry listing anything is unchecked, its items digests or not: rev47 finding 1)
    if count == 0 and type(count) is int and listed in (None, []):
        # Every batch it counted compared: as many as the lineage holds (an entry of other
        # tooling counting fewer compared fewer; eval counts them all: the suite shares none)
        held, n = train(ev.checkpoint.digest), entry.get("trainBatches")
        return None if type(n) is int and n >= len(held) else (
            f"{head} compared its suite with {n if type(n) is int else 'an unstated number of'} "
            f"train batch(es) of {ck}'s training data, which holds {_batches(held, list(held))}")
    some = (f"{count} train batch{'' if count == 1 else 'es'}" if type(count) is int
            and count > 0 else "some train batches")
    return (f"{head} did not compare its suite with "
            + (_batches(train(ev.checkpoint.digest), named) if named else some)
            + f" of {ck}'s training data, unreadable where it ran (erased, or imported without "
            "their data)")


def _batches(labels: dict[str, list[str]], batches: Sequence[str]) -> str:
    """``N train batch(es): sha256:…, … (train NAME@VERSION); …`` (the first five named)."""
    shown: dict[str, list[str]] = {}
    for b in sorted(batches)[:5]:
        shown.setdefault(", ".join(labels.get(b, [])).translate(NAMED)
                         or "a dataset not verified here", []).append(_short(b))
    more = f"; and {len(batches) - 5} more" if len(batches) > 5 else ""
    return (f"{len(batches)} train batch{'es' if len(batches) > 1 else ''}: "
            + "; ".join(f"{', '.join(bs)} ({of})" for of, bs in shown.items()) + more)


def _contamination(node: Node, req: Requirement, rec: Record, said: str, strict: bool,
                   setting: str) -> None:
    """The ``contamination on SUITE`` check of an evaluation a release uses (`unchecked`
    says what it did not compare): ``info`` (it counts, unchecked: out47), or a failure
    under the policy's ``setting`` that requires the comparison (`REQUIRE`: rel48; `NEAR`,
    which implies it: fix60)."""
    p = rec.predicate
    assert isinstance(p, Evaluation)
    # the checkpoint evaluated by its digest, as the other steps here: the name in an
    # evaluation is its signer's, and after a name clash names another record (rev48 finding 8)
    ck = p.checkpoint.digest
    label = f"contamination on {req.suite}"
    if not strict:
        node.add(label, INFO, f"{said}; it counts, unchecked; for one that is checked, run "
                 + _eval_line(ck, req.suite))
        return
    why = (" (one never compared cannot show its suite holds no near duplicates of that data)"
           if setting == NEAR else "")
    node.fail(label, f"{said}; the policy's {setting} counts no such evaluation{why}: "
              + check_again(ck, req.suite, setting))


REQUIRE = "[release] require_contamination_check"
NEAR = '[contamination] refuse = "near"'
SETTINGS = (REQUIRE, NEAR)
"""The settings that require every evaluation a release uses to have compared its suite
with its checkpoint's training data: ``refuse = "near"`` implies it (fix60)."""


def check_again(checkpoint: str, suite: str, setting: str = REQUIRE) -> str:
    """`CHECK_AGAIN` for ``checkpoint`` (a digest, or a name as commands find it) on ``suite``
    under the policy's ``setting`` (`SETTINGS`): the end of the failing check's line, and
    ``release``'s next step, which it words from its report's checkpoints, not from the line
    (that names the lineage's datasets: signed text, rev47)."""
    return CHECK_AGAIN.format(run=_eval_line(checkpoint, suite),
                              setting=setting.removeprefix("[release] "))


CHECK_AGAIN = ("run {run} (it compares the suite with every train batch; a batch erased, or "
               "imported without its data, stays unchecked until its data is here), then "
               "'trajledger release' again; or record a successor policy without "
               "{setting} ('trajledger policy set')")
"""What to do when a setting of `SETTINGS` refuses an evaluation (the end of its check's
line, which ``release`` gives as a next step)."""


def judge_use(v: Walk, node: Node, rec: Record) -> None:
    """Add to an evaluation's node whether it ran on a held-out suite, and to a release's
    whether it is named by its content and meets the policy's ``[release]`` on the
    evaluations it cites (`release_rules`); ``rec`` is the artifact's identity record."""
    if isinstance(rec.predicate, Evaluation) and node.kind == "evaluation":
        ev = rec.predicate
        problems = _suite_problems(v, ev)
        for p in problems:
            node.fail("suite", p)
        if not problems:
            tests = len(ev.passed_tests) + len(ev.failed_tests)
            node.add("suite", OK, f"{ev.suite.name}@{ev.suite.version}: "
                     f"{len(ev.passed_tests)} of {tests} episode(s) passed")
    elif isinstance(rec.predicate, Release) and node.kind == "release":
        problem = release_named(rec)
        if problem is not None:
            node.fail("release", problem)
        release_rules(v, node, rec.predicate.checkpoint.digest, rec.predicate.evaluations,
                      len(rec.signers) + len(rec.identities), before=rec.index)


def _suite_problems(v: Walk, ev: Evaluation) -> list[str]:
    v.artifact(ev.suite.digest, "dataset")
    suite = v.identity_record(ev.suite.digest, "dataset")
    shared = trained_on_suite(v, ev.checkpoint.digest, suite)
    return evaluation_problems(ev, suite) + ([shared] if shared else [])


def trained_on_suite(v: Walk, checkpoint: str, suite: Record | RecordFailure | None) -> str | None:
    """Why ``suite`` (a dataset's verified record) is no held-out suite for ``checkpoint``:
    it, or one of its batches, is in a dataset the checkpoint or one of its base checkpoints
    was trained on (`dataset create` refuses such a dataset; a producer's own tooling does
    not: trn35); None when it is not, or is no held-out split (`evaluation_problems` says so).
    The lineage must have been walked (`dependencies`)."""
    if (not isinstance(suite, Record) or not isinstance(suite.predicate, Dataset)
            or suite.predicate.split not in HELD_OUT):  # (a train split is refused as one)
        return None
    held = {suite.entry.subject, *suite.predicate.batches}
    todo, seen = [checkpoint], set()
    while todo:
        if (ck := todo.pop()) in seen:
            continue
        seen.add(ck)
        for d in v.dependencies(ck):
            todo += [d.digest] if d.role == "base-checkpoint" else []
            rec = v.identity_record(d.digest, "dataset") if d.role == "dataset" else None
            if isinstance(rec, Record) and isinstance(ds := rec.predicate, Dataset) and (
                    shared := held & {d.digest, *ds.batches}):
                whose = "it was" if ck == checkpoint else f"its parent {_short(ck)} was"
                return (f"{ds.name}@{ds.version}, which {whose} trained on, holds "
                        f"{_short(min(shared))} of the suite: an evaluation on data the "
                        "checkpoint was trained on proves nothing")
    return None


def release_rules(
    v: Walk, node: Node, checkpoint: str, cited: Sequence[str] | None,
    approvers: int, *, before: int | None = None,
) -> set[str]:
    """Check the policy's ``[release]`` for releasing ``checkpoint`` (verified already by
    ``v`` with `LineageVerifier.artifact`), adding one check per requirement to ``node``.

    Steps:
        1. The policy has ``[release]``; ``approvers`` reach its ``approvals``.
        2. For each requirement, the evaluation that counts is the latest verified one
           (signed by the evaluator role) of the checkpoint on the suite ``NAME@VERSION``
           (`release_suite`: the first holdout or regression dataset of the name, or the
           one of the pinned ``digest``) logged before ``before``, among those the index
           knows and those ``cited``; it must exist and, when ``cited`` is given,
           be cited (no choosing an older, better run).
        3. Its metric is within ``min`` / ``max``; with ``max_drop`` and a parent
           checkpoint, the parent's evaluation on the same suite (found as in 2) exists,
           is cited, and the metric dropped no more than ``max_drop`` from it
           (`release_requirement`).

    Args:
        cited: the evaluations a release cites; None to choose them (``trajledger
            release`` before recording).
        approvers: how many approver keys sign the release.
        before: the log index of the release (default: the end of the log).

    Returns:
        The digests of the evaluations the rules used (what a release must cite).
    """
    rules = v.policy.release
    assert v.checkpoint is not None
    until = v.checkpoint.size if before is None else before
    origin = frozenset() if before is None else brought_by(v, before)
    used: set[str] = set()
    # (1)
    if rules is None:
        node.fail("release", f"policy {v.policy.name!r} serial {v.policy.serial} has "
                  "no [release]: nothing is released under it")
        return used
    if approvers < rules.approvals:
        node.fail("release", f"signed by {approvers} approver(s), [release] needs "
                  f"{rules.approvals}")
    parents = [d.digest for d in v.dependencies(checkpoint) if d.role == "base-checkpoint"]
    lineages: dict[str, dict[str, list[str]]] = {}  # (each checkpoint's walked once)

    def train(ck: str) -> dict[str, list[str]]:
        return lineages[ck] if ck in lineages else lineages.setdefault(ck, train_batches(v, ck))

    def environments(r: Record) -> str | None:
        p = r.predicate
        assert isinstance(p, Evaluation)
        return other_environments(v, p.checkpoint.digest,
                                  f"{p.checkpoint.name}@{p.checkpoint.version}", p.suite.digest)

    for req in rules.require:
        # (2)
        suite, problem = release_suite(v, req, until, origin)
        if suite is None and problem is None:  # unpinned, and no dataset of the name at all
            from .shell_word import shell_word

            name, _, version = (shell_word(w, NAMED) for w in req.suite.rpartition("@"))
            problem = (f"missing: no holdout or regression dataset {req.suite} of the "
                       "release's own log is logged before it: record the suite in this log "
                       f"('trajledger dataset create {name} --version {version} --split "
                       "regression --batch …'), or pin another log's in [[release.require]] "
                       "(digest = \"sha256:…\"); then run "
                       + _eval_line(checkpoint, req.suite))
        if problem is not None:
            node.fail(f"{req.metric} on {req.suite}", problem)
            continue
        ev, failed = _latest_evaluation(v, checkpoint, suite, cited or (), until)
        parent = None
        if ev is not None and req.max_drop is not None and parents:
            parent = _latest_evaluation(v, parents[0], suite, cited or (), until)[0]
        # (3)
        below = next(filter(None, (failing_below(v, r.entry.subject)
                                   for r in (ev, parent) if r is not None)), None)
        used |= release_requirement(node, req, checkpoint, ev, parent, parents, cited, failed,
                                    below, train=train, strict=rules.require_contamination_check,
                                    refuse_near=v.policy.contamination is not None
                                    and v.policy.contamination.refuse == "near",
                                    environments=environments)
    return used


def train_batches(v: Walk, checkpoint: str) -> dict[str, list[str]]:
    """Train batch digest -> labels (``train NAME@VERSION``) of the verified datasets the
    checkpoint and its base checkpoints were trained on (its lineage, walked already): what
    ``eval`` compares a suite with (``runner.suite_contamination``)."""
    out: dict[str, list[str]] = {}
    lineage = [checkpoint]  # grows as it is read: each base checkpoint once
    seen = {checkpoint}  # (a set beside it, and each dataset read once: a chain of continued
    for ck in lineage:  # training names one dataset at every generation; rev44 finding 1)
        deps = v.dependencies(ck)
        bases, datasets = ([x for x in dict.fromkeys(d.digest for d in deps if d.role == role)
                            if x not in seen] for role in ("base-checkpoint", "dataset"))
        lineage += bases
        seen.update(bases, datasets)
        for rec in (v.identity_record(d, "dataset") for d in datasets):
            ds = rec.predicate if isinstance(rec, Record) else None
            if not isinstance(ds, Dataset):
                continue
            label = f"{ds.split} {ds.name}@{ds.version}"
            for b in ds.batches:
                if label not in out.setdefault(b, []):
                    out[b].append(label)
    return out


def failing_below(v: Walk, evaluation: str) -> Node | None:
    """The first record the verified ``evaluation`` stands on (its evaluator, its suite and
    theirs) whose own checks fail, or None. The evaluation's own checks are judged where it
    is chosen (`_latest_evaluation`); its checkpoint's lineage is the release's own, failing
    it there."""
    todo = [d.digest for d in v.dependencies(evaluation) if d.role != "checkpoint"]
    seen: set[str] = set()
    while todo:
        if (digest := todo.pop()) in seen:
            continue
        seen.add(digest)
        try:
            if not (n := v.node(digest)).ok:
                return n
        except KeyError:  # not verified: nothing known to fail
            continue
        todo += [d.digest for d in v.dependencies(digest)]
    return None


def release_suite(v: Walk, req: Requirement, before: int,
                  origin: frozenset[str] = frozenset()) -> tuple[str | None, str | None]:
    """The digest of a requirement's suite logged before ``before`` (None: none) and why a
    pinned one is refused (None: it is not). Unpinned, the suite is the first verified holdout
    or regression dataset of its ``NAME@VERSION`` that the release's own log recorded
    (``origin``, `brought_by`: none, this log's own; or one of the logs an import brought the
    release from): another log's dataset of the name, imported here, is not this log's suite
    (a vendor names its datasets at will; rev26). Versions are immutable: a later record of
    the name is another suite, whoever signed it. Pinned (``digest``), it is that dataset,
    whichever log recorded it, which must carry the name and be held out, and no other record
    of the name counts."""
    if req.digest is None:
        named = [(i, r.entry.subject) for i in v.index.held_out() if i < before
                 and isinstance(r := v.record(i), Record)
                 and isinstance(p := r.predicate, Dataset) and f"{p.name}@{p.version}" == req.suite]
        own = next((d for i, d in named if _same_log(origin, brought_by(v, i))), None)
        if own is not None or not named:
            return own, None if named else _unverified_suite(v, req, before)
        at, theirs = named[0]
        return None, (f"no holdout or regression dataset {req.suite} of the release's own log "
                      f"is logged before it; {theirs} (log index {at}) came from another log, "
                      "by import, and is not its suite: to release on it, pin it in "
                      f"[[release.require]] (digest = \"{theirs}\")")
    pinned = f"the suite is pinned to {req.digest}: "
    found = [i for i in v.records(req.digest, "dataset") if i < before]
    if not found:
        other = next((e.kind for i in v.index.about(req.digest)
                      if i < before and (e := v.entry(i)) is not None), None)
        return None, pinned + (f"found a {other} record, not a dataset" if other else
                               "no dataset record of it is logged before the release")
    rec = v.record(found[0])
    if isinstance(rec, RecordFailure):
        return None, pinned + _why_not(rec, f"its dataset record (log index {found[0]})")
    if not isinstance(ds := rec.predicate, Dataset):
        return None, pinned + f"its dataset record (log index {found[0]}) does not verify"
    if ds.split not in HELD_OUT:
        return None, pinned + (f"found dataset {ds.name}@{ds.version}, a {ds.split!r} split; "
                               "suites are holdout or regression")
    if f"{ds.name}@{ds.version}" != req.suite:
        return None, pinned + f"found dataset {ds.name}@{ds.version}, not {req.suite}"
    return req.digest, None


def _unverified_suite(v: Walk, req: Requirement, before: int) -> str | None:
    """Why no verified held-out dataset of ``req``'s ``NAME@VERSION`` is logged before
    ``before``, when one of that name, or of a name no one can read, is there but does not
    verify (hold35's Left: such a record was skipped and the suite said "missing"); None when
    there is none at all. An evaluation counts only on a suite whose record verifies."""
    from .distrusted import distrusted_holdout

    unknown = None
    for i in sorted({*v.index.held_out(), *v.index.unreadable()}):
        if i >= before or isinstance(rec := v.record(i), Record):
            continue
        ds = distrusted_holdout(v, i)  # what it declares, its signers not trusted
        if ds is not None and f"{ds.name}@{ds.version}" == req.suite:
            return _why_not(rec, f"the {ds.split} dataset {req.suite} (log index {i})")
        if ds is None and rec.damaged and unknown is None and v.kind_at(i, "dataset"):
            unknown = _why_not(rec, f"dataset record {i}, whose name cannot be read (it may be "
                               "the suite),")
    return None if unknown is None else (f"missing: no verified holdout or regression dataset "
                                         f"{req.suite} is logged before it; {unknown}")


def _why_not(rec: RecordFailure, what: str) -> str:
    """Why the suite's record ``what`` counts for nothing, and the way on."""
    from .judge import REPAIR_HINT

    if rec.damaged:
        return f"{what} is damaged ({rec.message}): {REPAIR_HINT}; an evaluation counts only " \
            "on a suite whose record verifies"
    return (f"{what} is not trusted by the policy ({rec.message}): an evaluation counts only "
            "on a suite whose record verifies; if the policy should trust its signer, give that "
            "key the producer role in a policy successor (a key declared compromised stays "
            "so), else record the suite again with a producer key, under another version, and "
            "name that one in [[release.require]]")


def brought_by(v: Walk, index: int) -> frozenset[str]:
    """The logs an import brought the record at ``index`` from (the log keys of the import
    records that list its envelope); empty for a record of this log's own. An import record
    that does not verify names no log: ``?`` (fail closed: it is no own record)."""
    from .other_predicates import Import

    entry = v.entry(index)
    if entry is None:
        return frozenset({"?"})
    out = set()
    for j in v.index.listing(entry.envelope):
        if (e := v.entry(j)) is not None and e.kind == "import":
            rec = v.record(j)
            pred = rec.predicate if isinstance(rec, Record) else None
            out.add(str(pred.log["vkey"]) if isinstance(pred, Import) else "?")
    return frozenset(out)


def _same_log(release: frozenset[str], suite: frozenset[str]) -> bool:
    """Whether a suite `brought_by` ``suite`` is of the release's log (`brought_by`
    ``release``): both this log's own, or brought from one log by both."""
    return bool((release & suite) - {"?"}) if release else not suite


def _latest_evaluation(
    v: Walk, checkpoint: str, suite: str | None, cited: Iterable[str], before: int
) -> tuple[Record | None, int | None]:
    """The latest verified evaluation record of ``checkpoint`` on the suite of digest ``suite``
    (`release_suite`) logged before ``before``, among the index's referrers and the records of
    ``cited`` evaluations, or None when there is none or the latest an evaluator signed does
    not verify (revoked, say). Each record counts on its own (a run whose results equal an
    earlier run's is a later record of the same artifact). Second: the log index of the latest
    when it does not count because its suite's node fails (None otherwise)."""
    found, failed = None, None
    seen = {i for i, role in v.index.referrers(checkpoint) if role == "checkpoint"}
    seen |= {i for d in cited for i in v.records(d, "evaluation")}
    for i in sorted(seen):
        e = v.kind_at(i, "evaluation")
        if e is None or i >= before:
            continue
        node = v.artifact(e.subject, "evaluation")
        rec = v.record(i)
        if not isinstance(rec, Record):
            continue
        ev = rec.predicate
        assert isinstance(ev, Evaluation)
        if ev.checkpoint.digest != checkpoint or ev.suite.digest != suite:
            continue
        # The latest run an evaluator signed decides: one that fails (revoked, say) leaves
        # the requirement missing; an earlier, better run does not count again.
        found = (rec if node.ok and not _suite_problems(v, ev) and v.node(ev.suite.digest).ok
                 else None)
        failed = i if found is None and not _verified(v, ev.suite.digest) else None
    return found, failed


def _verified(v: Walk, digest: str) -> bool:
    """Whether ``digest``'s node, when verified already, passes (True when it was not)."""
    try:
        return v.node(digest).ok
    except KeyError:
        return True
