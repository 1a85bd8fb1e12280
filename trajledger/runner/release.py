"""Releases: record that approvers release a checkpoint, only when the policy's rules hold.

Scope: ``trajledger release CK --key APPROVER`` (docs/evaluations.md). The decision is the one
every verifier makes again offline (``verify.releases.release_rules``): the
checkpoint's whole lineage verifies, and for each ``[release]`` requirement the latest verified
evaluation of the checkpoint on the suite ``NAME@VERSION`` (signed by an evaluator key, on a
holdout or regression dataset) exists and meets its bounds, and its drop from the parent's
evaluation is within ``max_drop``. Only then is a ``release/v1`` record appended, citing those
evaluations, named by the digest of its predicate and signed by the approver keys; otherwise
`ReleaseRefusedError` names each missing or failing evaluation and nothing is recorded. The log
must not grow between the decision and the append (a later evaluation would change it). A
release that stands on the same decision (the same evaluations and policy, these keys) is the
answer of a run again: nothing new is recorded (out44). `judge_release` is the decision alone,
nothing signed or recorded (``trajledger release --dry-run``).
Non-scope: the rules themselves (``verify.release_rules.ReleaseRules``, ``verify.lineage``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trajledger.ledger.errors import LedgerError
from trajledger.verify import predicates
from trajledger.verify.errors import PolicyError, VerificationError
from trajledger.verify.other_predicates import Release
from trajledger.verify.predicates import ArtifactRef
from trajledger.verify.times import now

if TYPE_CHECKING:
    from trajledger.ledger.catalog import CatalogItem
    from trajledger.ledger.home import LedgerHome
    from trajledger.ledger.keys import Signer
    from trajledger.verify.lineage import LineageVerifier, Report
    from trajledger.verify.policy import TrustPolicy

__all__ = ["ReleaseJudged", "ReleaseOutcome", "ReleaseRefusedError", "judge_release", "release"]


class ReleaseRefusedError(VerificationError):
    """The policy's release rules do not hold; ``report`` says which (nothing is recorded),
    ``next`` what to do where an evaluation the release needs cannot count (out46)."""

    def __init__(self, message: str, report: Report, next_steps: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.report = report
        self.next = list(next_steps)


@dataclass(frozen=True)
class ReleaseOutcome:
    """A release: its digest, log index, predicate and the verified graph; ``recorded`` False
    when a release standing on the same decision was held already (nothing new recorded)."""

    digest: str
    index: int
    release: Release
    report: Report
    recorded: bool = True


@dataclass(frozen=True)
class ReleaseJudged:
    """A dry run's answer (nothing signed or recorded): the checkpoint, the evaluations a
    release would cite, the verified graph, the log's size judged, and the standing release
    already made on them (None: none)."""

    ref: CatalogItem
    evaluations: tuple[str, ...]
    report: Report
    size: int
    held: ReleaseOutcome | None


def release(
    ledger: LedgerHome,
    checkpoint_ref: str,
    signers: Sequence[Signer],
    policy: TrustPolicy,
    *,
    note: str | None = None,
) -> ReleaseOutcome:
    """Release a checkpoint when the policy's ``[release]`` holds (see the module doc).

    Steps:
        1. Every signer holds the approver role (a key given twice counts once); the policy
           has ``[release]``.
        2. Verify the checkpoint's lineage; judge the rules (`release_rules`), which choose
           the evaluations; any failure refuses with every one named.
        3. A release of the checkpoint that stands (not revoked) on the same evaluations under
           the same policy, signed by these keys (among others), is the answer: nothing new is
           recorded (a CI job run again; its note is not compared).
        4. Record the release (subject: the SHA-256 of its RFC 8785 predicate), under the
           condition that the log still has the size it was judged at.

    Raises:
        PolicyError: a signer is not an approver; the policy has no ``[release]``.
        ReleaseRefusedError: the lineage or a requirement fails.
        LedgerError: the log grew during the decision (run again).
    """
    from trajledger.ledger.record import Recorded, record_statement
    from trajledger.ledger.same_second import recorded_anew
    from trajledger.ledger.signing import canonical_json
    from trajledger.verify.digest import digest_bytes
    from trajledger.verify.policy import policy_digest

    # (1) (a key counts once however often, or under however many names, it is given: the
    # verifier counts a release's distinct signing keys)
    if not signers:
        raise PolicyError("release: give at least one approver --key")
    signers = list({s.keyid: s for s in signers}.values())
    # (2), (3)
    judged = judge_release(ledger, checkpoint_ref, [(s.name, s.keyid) for s in signers],
                           policy, publish=True)
    if judged.held is not None:
        return judged.held
    # (4)
    ck, report, used, size = judged.ref, judged.report, judged.evaluations, judged.size
    bodies: list[dict[str, Any]] = []

    def unchanged(now_size: int) -> None:
        # (A release made again in the same second is one the log holds: `recorded_anew`
        # records it at the next second, when the log has grown by none.)
        if now_size != size:
            raise LedgerError(f"release of {ck.ref}: the log grew from {size} to {now_size} "
                              "entries while the release was judged; run it again")

    def record(when: str) -> Recorded:
        bodies.append(Release(
            ArtifactRef(ck.name, ck.version or ck.digest[7:19], ck.digest), used,
            {"name": policy.name, "serial": policy.serial, "digest": policy_digest(policy)},
            when, note,
        ).written("release"))
        return record_statement(ledger, f"release of {ck.ref}",
                                digest_bytes(canonical_json(bodies[-1])), predicates.RELEASE,
                                bodies[-1], list(signers), check=unchanged)

    # The same release made again in one second after its revocation is a record of its own
    # (rev40 finding 1), not the revoked one.
    rec = recorded_anew(record, now, lambda r: _stands(ledger, r.digest))
    return ReleaseOutcome(rec.digest, rec.index, Release.from_predicate(bodies[-1]), report)


def judge_release(
    ledger: LedgerHome,
    checkpoint_ref: str,
    keys: Sequence[tuple[str, str]],
    policy: TrustPolicy,
    *,
    publish: bool = False,
) -> ReleaseJudged:
    """Whether ``release`` would record a release of the checkpoint by ``keys`` (name, keyid;
    none: as many approvers as ``[release] approvals``, not judged), and on which evaluations:
    steps 1 to 3 of `release`, nothing signed or recorded (``trajledger release --dry-run``).
    ``publish``: publish first a committed tail a writer that stopped left (which signs a
    checkpoint; the dry run judges the published log as it is).

    Raises:
        PolicyError, ReleaseRefusedError: as `release`.
    """
    from trajledger.ledger.catalog import Catalog, named_report, qualified_ref
    from trajledger.ledger.policy_state import not_in_role
    from trajledger.verify.lineage import Edge, Node
    from trajledger.verify.releases import release_rules

    from .verification import decide, ledger_verifier

    for name, keyid in keys:
        if not policy.holds("approver", keyid):
            raise PolicyError(f"{not_in_role(name, keyid, policy, 'approver')}; a release "
                              "is signed by approver keys ('trajledger key list' shows yours)")
    if policy.release is None:
        raise PolicyError(
            f"policy {policy.name!r} serial {policy.serial} has no [release]: name the suites a "
            "release needs (format = 2, [[release.require]]; keys/README.md)"
        )
    ck = Catalog(ledger).resolve(checkpoint_ref, {"checkpoint"})
    if publish:
        ledger.log.publish_tail()  # entries committed by a writer that stopped are judged too
    ref = qualified_ref(ledger, ck)  # (an imported one after a clash: out50)
    verifier = ledger_verifier(ledger, policy)
    decision = Node(f"release:{ck.digest}", "release-decision", name=f"release of {ref}")
    used: set[str] = set()
    approvers = len(keys) if keys else policy.release.approvals

    def walk() -> list[Edge]:
        verifier.artifact(ck.digest, "checkpoint")
        used.update(release_rules(verifier, decision, ck.digest, None, approvers))
        return [Edge(decision.id, ck.digest, "checkpoint"),
                *(Edge(decision.id, d, "evaluation") for d in sorted(used))]

    report = decide(verifier, decision, ck.digest, walk)
    if not report.ok:
        from trajledger.ledger.catalog import command_ref

        # the steps name the checkpoint as commands find it: after a name clash its plain
        # name is the buyer's own (rev48 finding 6); a name that parses as another's, by its
        # digest (finding 9); the lines name every node so too (out50)
        named = command_ref(ledger, ck)
        failures, steps = _refusal(named_report(ledger, report), decision.id, named,
                                   _more_approvers(ledger, policy, named, keys))
        raise ReleaseRefusedError(f"release of {ref}: refused, {len(failures)} problem(s); "
                                  "nothing was recorded\n" + "\n".join(failures), report, steps)
    cited = tuple(sorted(used))
    assert verifier.checkpoint is not None
    return ReleaseJudged(ck, cited, report, verifier.checkpoint.size,
                         _held(ledger, verifier, ck.digest, cited, keys, report))


def _more_approvers(ledger: LedgerHome, policy: TrustPolicy, ck: str,
                    keys: Sequence[tuple[str, str]]) -> str:
    """What to do when ``keys`` are fewer approvers than ``[release] approvals`` (out47
    finding 4): which keys here hold the role, and the command giving each."""
    assert policy.release is not None
    more = policy.release.approvals - len({k for _, k in keys})
    mine = sorted(k.name + ("" if k.private else " (its public half only: its holder signs)")
                  for k in ledger.keys.list() if policy.holds("approver", k.keyid))  # (out48)
    from trajledger.verify.nodes import NAMED
    from trajledger.verify.shell_word import shell_word

    given = "".join(f" --key {shell_word(name)}" for name, _ in keys)  # (rev48 finding 1)
    return (f"sign it with {more if more > 0 else 'another'} more approver key"
            f"{'s' if more > 1 else ''}, each given by its own --key ('trajledger release "
            f"{shell_word(ck, NAMED)}"
            f"{given} --key NAME'; the policy's approver keys here: "
            f"{', '.join(mine) or 'none (ask its approvers)'}; each key counts once), then run "
            "'trajledger release' again")


def _refusal(report: Report, decision: str, ck: str,
             approvers: str) -> tuple[list[str], list[str]]:
    """The refusal's lines (`Report.failures`) and what to do next, added to the line of each
    root cause that makes an evaluation the release needs fail and is not in the checkpoint's
    own lineage (out46): a suite that no longer verifies (name another suite), a revoked
    evaluator version (evaluate again under one that stands), anything else (evaluate again);
    to a cause in the checkpoint's own lineage (its dataset revoked after training, say), train
    another (out54); and to too few approvers, ``approvers`` (`_more_approvers`)."""
    from trajledger.verify.blame import failure_lines
    from trajledger.verify.nodes import NAMED
    from trajledger.verify.releases import NEAR_REFUSED, SETTINGS, check_again
    from trajledger.verify.report import HIDDEN
    from trajledger.verify.shell_word import every_shell, shell_word

    below = report.edges_by("src")

    def upstream(start: str, parents: bool = True) -> set[str]:
        """``start`` and every node it depends on (not through a base checkpoint when not
        ``parents``)."""
        out: set[str] = set()
        frontier = {start}
        while frontier:
            out |= frontier
            frontier = {e.dst for n in frontier for e in below.get(n, [])
                        if parents or e.role != "base-checkpoint"} - out
        return out

    edges = below.get(decision, [])
    released = {e.dst for e in edges if e.role == "checkpoint"}
    own = set().union(*(upstream(d) for d in released))
    # what the released checkpoint was trained on itself, its base checkpoints' lineage aside
    trained = set().union(*(upstream(d, parents=False) for d in released))
    bases = set().union(*(upstream(e.dst) for d in released for e in below.get(d, [])
                          if e.role == "base-checkpoint"))
    runs = [e.dst for e in edges if e.role == "evaluation"]
    again = "then run 'trajledger release' again"
    other = ("name another holdout or regression suite in [[release.require]] of a successor "
             f"policy ('trajledger policy set'), evaluate {ck} on it, {again}")
    lines: list[str] = []
    steps: list[str] = []
    for node, checks, depend in report.causes():
        text = [line.translate(HIDDEN) for line in failure_lines([(node, checks, depend)])]
        step = None
        if node.id == decision:  # a line per check (`failure_lines`), in order
            for i, c in enumerate(checks):
                # The latest evaluation's suite does not verify (verify.releases): none on it
                # counts; a suite pinned by digest that no record here names is another log's.
                # (that line only, by its start: others name datasets, evaluators and suites,
                # signed text that may hold these words: rev47 finding 7)
                hint = (other if c.detail.startswith("missing: the latest evaluation of ")
                        and "the suite does not verify" in c.detail else
                        approvers if c.what == "release" and c.detail.startswith("signed by ")
                        else
                        "if another ledger recorded it, import it ('trajledger import BUNDLE': "
                        f"the bundle of an evaluation on it carries it), {again}"
                        if c.detail.endswith("no dataset record of it is logged before the "
                                             "release") else None)
                if hint is not None:
                    text[i] += f": {hint}"
                    steps += [hint] if hint not in steps else []
                # [release] require_contamination_check (rel48), or [contamination] refuse =
                # "near", which implies it (fix60): the line ends with the way on,
                # worded here for a checkpoint of the report, not cut from the line (which
                # names the lineage's datasets before it: signed text, rev47 finding 5)
                named = c.what.removeprefix("contamination on ")  # (the suite)
                # (the line names the checkpoint by digest; the step, the released one's by the
                # name commands find it: rev48 findings 6 and 8)
                way = next((check_again(ck, named, s) if n.id in released else w
                            for n in report.nodes.values() if n.kind == "checkpoint"
                            for s in SETTINGS
                            if c.detail.endswith(": " + (w := check_again(n.id, named, s)))),
                           None)
                if c.what.startswith("contamination on ") and c.detail.endswith(NEAR_REFUSED):
                    way = NEAR_REFUSED  # ([contamination] refuse = "near": out56)
                steps += [way] if c.what.startswith("contamination on ") and way and (
                    way not in steps) else []
        elif node.id not in own and (run := next(
                (r for r in runs if node.id in upstream(r)), None)) is not None:
            suite = next((report.nodes[e.dst] for e in below.get(run, []) if e.role == "suite"),
                         None)
            on = "its suite" if suite is None else f"{suite.name}@{suite.version}"
            # the command's words as shell words (signed names: rev48 finding 1), and no
            # str.format over them (a name holding '{x}' ended in a KeyError: finding 2)
            word = "SUITE" if suite is None else shell_word(  # (its digest: rev50 finding 4)
                on if every_shell(on, NAMED) else suite.id, NAMED)
            cmd = f"'trajledger eval {shell_word(ck, NAMED)} --suite {word} --key KEY"
            how = f"; one made in another ledger comes by 'trajledger import'), {again}"
            if suite is not None and node.id in upstream(suite.id):
                step = other
            elif node.kind == "evaluator":
                step = (f"evaluate {ck} again on {on} under an evaluator version that stands "
                        f"({cmd} --evaluator NAME@VERSION'{how}")
            else:
                step = f"evaluate {ck} again on {on} ({cmd}'{how}"
            text[-1] += f"; {report.nodes[run].label} stands on it: {step}"
        elif node.id in own and node.id not in released:  # (out54 finding 6)
            # (a base checkpoint, revoked say, is no data: train without it, out56; nor is
            # data reached only through one: the same --parent fails again, out58)
            parent = (", with no --parent or a --parent that does not stand on it"
                      if node.id in bases else "")
            step = (f"{ck} stands on it, and no release of it can stand: train a checkpoint on "
                    f"data that stands ('trajledger train --dataset NAME@VERSION --key KEY'"
                    f"{parent}), evaluate it, then release that one"
                    if node.kind != "checkpoint" and node.id in trained else
                    f"{ck} stands on it, and no release of it can stand: train a checkpoint "
                    "that does not ('trajledger train --dataset NAME@VERSION --key KEY', with no "
                    "--parent or a --parent that stands), evaluate it, then release that one")
            text[-1] += f"; {step}"
        lines += text
        steps += [step] if step is not None and step not in steps else []
    return lines, steps


def _held(ledger: LedgerHome, verifier: LineageVerifier, checkpoint: str,
          cited: tuple[str, ...], keys: Sequence[tuple[str, str]],
          report: Report) -> ReleaseOutcome | None:
    """The latest release of ``checkpoint`` that verifies, stands (not revoked), cites
    ``cited`` under the verifier's policy and is signed by every one of ``keys``: the
    decision made again (None: none). Only the releases logged after the last evaluation
    cited are read (one citing it comes after it): a log's older releases cost nothing."""
    from trajledger.verify.judge import Record
    from trajledger.verify.policy import policy_digest

    digest = policy_digest(verifier.policy)
    after = max((min(verifier.records(d, "evaluation"), default=-1) for d in cited), default=-1)
    for i in reversed(verifier.index.of_kind("release")):
        if i < after:
            break
        rec = verifier.record(i)
        if (isinstance(rec, Record) and isinstance(r := rec.predicate, Release)
                and r.checkpoint.digest == checkpoint and r.evaluations == cited
                and r.policy.get("digest") == digest and {k for _, k in keys} <= rec.signers
                and _stands(ledger, rec.entry.subject)):
            return ReleaseOutcome(rec.entry.subject, i, r, report, recorded=False)
    return None


def _stands(ledger: LedgerHome, digest: str) -> bool:
    """No revocation is held about the release ``digest``."""
    state = ledger.trust_state()
    return not any((e := state.entry(i)) is not None and e.kind == "revocation"
                   for i in state.about(digest))
