"""End to end: a release manager's questions once the evidence of a release fails (out47).

On test_evaluations' ledger (bc@1, regression@1 required at success_rate >= 0.5): bc@1 is
evaluated under ``judge@1``, released, and ``judge@1`` is revoked as buggy. What ``release``,
``verify`` and ``show`` say, in text and in ``--json``, and what a release says of an
evaluation that records no check of its suite against the training data.

Findings: docs/SECURITY.md, "Review of 2026-12-07, thirty-second round (out47)".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluations import evals_template, home, log_size, note_episode_ids, script  # noqa: F401
from test_out46_release import judged_by, register
from test_runner_cli import expect, run

REQUIREMENT = "success_rate on regression@1"


def released_then_retired(runner: CliRunner, home: Path, script: Path) -> str:  # noqa: F811
    """bc@1 released on an evaluation under judge@1, then judge@1 revoked: the release."""
    register(runner, home, "1")
    judged_by(runner, home, script, "judge@1")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    expect(run(runner, home, "revoke", "judge@1", "--key", "vendor", "--reason",
               "off-by-one in the threshold"), 0)
    return r.stdout.strip().splitlines()[-1]


def checks(doc: dict, kind: str) -> dict[str, dict]:  # type: ignore[type-arg]
    """The checks of the one node of ``kind`` in a report's JSON, by what they check."""
    (node,) = [n for n in doc["nodes"] if n["kind"] == kind]
    return {c["what"]: c for c in node["checks"]}


def test_a_requirement_on_an_evaluation_whose_evaluator_is_revoked_does_not_read_ok(
    runner: CliRunner, home: Path, script: Path  # noqa: F811
) -> None:
    """out47 finding 2 (out46's Left): the release's requirement said ``✓ success_rate on
    regression@1 — 1 (evaluation …)`` under a report that fails because that evaluation's
    evaluator is revoked; ``--json`` had it ``ok`` too. It fails now, naming the failing
    record as its cause, and the problem is still counted once (the revocation)."""
    rel = released_then_retired(runner, home, script)
    r = run(runner, home, "verify", rel)
    expect(r, 1)
    assert f"✓ {REQUIREMENT}" not in r.stdout, r.stdout
    assert (f"✗ {REQUIREMENT} — 1 (evaluation sha256:") in r.stdout, r.stdout
    assert "does not count while evaluator judge@1 (sha256:" in r.stdout, r.stdout
    assert ": 1 problem(s) in " in r.stdout, r.stdout
    r = run(runner, home, "verify", rel, "--json")
    expect(r, 1)
    doc = json.loads(r.stdout)
    req = checks(doc, "release")[REQUIREMENT]
    (evaluator,) = [n["id"] for n in doc["nodes"] if n["kind"] == "evaluator"]
    assert req["status"] == "fail" and req["cause"] == evaluator, req
    assert len(doc["causes"]) == 1 and doc["causes"][0]["node"] == evaluator, doc["causes"]
    r = run(runner, home, "release", "bc@1", "--dry-run", "--json")
    expect(r, 1)
    req = checks(json.loads(r.stdout)["report"], "release-decision")[REQUIREMENT]
    assert req["status"] == "fail" and req["cause"] == evaluator, req
    r = run(runner, home, "release", "bc@1", "--dry-run")
    expect(r, 1)
    assert "refused, 1 problem(s)" in r.stderr, r.stderr



def test_a_release_with_too_few_approvers_says_which_keys_and_how(
    runner: CliRunner, home: Path, script: Path  # noqa: F811
) -> None:
    """out47 finding 4 (the brief's d): ``[release] approvals = 2`` and one ``--key``: the
    refusal said ``signed by 1 approver(s), [release] needs 2`` and not which keys or how to
    give them; ``--json``'s ``next`` was empty."""
    from trajledger import Ledger

    expect(run(runner, home, "key", "new", "approver-b", "--no-encrypt"), 0)
    policy = (home / "policy.toml").read_text()
    (home / "policy-2.toml").write_text(
        policy.replace("serial = 1", "serial = 2").replace("approvals = 1", "approvals = 2")
        .replace('keys = ["keys/approver.pub"]', 'keys = ["keys/approver.pub", '
                 '"keys/approver-b.pub"]'))
    Ledger.open(home).set_policy(home / "policy-2.toml", keys=["approver"])
    register(runner, home, "1")
    judged_by(runner, home, script, "judge@1")
    size = log_size(home)
    way = ("sign it with 1 more approver key, each given by its own --key ('trajledger release "
           "bc@1 --key approver --key NAME'; the policy's approver keys here: approver, "
           "approver-b; each key counts once), then run 'trajledger release' again")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 1)
    assert f"> release: signed by 1 approver(s), [release] needs 2: {way}\n" in r.stderr, r.stderr
    r = run(runner, home, "release", "bc@1", "--key", "approver", "--dry-run", "--json")
    expect(r, 1)
    assert json.loads(r.stdout)["next"] == [way], r.stdout
    assert log_size(home) == size
    expect(run(runner, home, "release", "bc@1", "--key", "approver", "--key", "approver-b"), 0)


def test_a_release_on_an_evaluation_with_no_contamination_entry_says_so(
    runner: CliRunner, home: Path, script: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """out47 finding 3 (evalc46's Left, the brief's c): ``release`` counted an evaluation that
    records no comparison of its suite with the checkpoint's training data (one made before
    the thirty-first round, or by other tooling) without a word. It still counts (older
    releases verify as they did), and ``release``, ``release --dry-run`` and ``verify``
    of the release say so: a ``NOTE:`` line, an ``info`` check of the decision in --json."""
    from trajledger.runner import suite_contamination
    from trajledger.verify.predicates import ResourceDescriptor

    register(runner, home, "1")
    with monkeypatch.context() as m:  # an evaluation as older tooling recorded it
        m.setattr(suite_contamination.SuiteCheck, "descriptor", lambda self: ResourceDescriptor(
            name="older-tooling", uri="https://example.invalid/eval"))
        judged_by(runner, home, script, "judge@1")
    said = ("records no comparison of its suite with bc@1's training data (no 'contamination' "
            "entry: made before 'eval' compared them, or by other tooling), 1 train batch: "
            "sha256:")  # (rel48: the train batches not compared are named)
    ck = json.loads(run(runner, home, "show", "bc@1", "--json").stdout)["digest"]
    said_end = ("(train train@1); it counts, unchecked; for one that is checked, run 'trajledger "
                f"eval {ck} --suite regression@1 --key KEY' (KEY: a key of the policy's "
                "evaluator role)")  # (the checkpoint by its digest: rev48 finding 8)
    r = run(runner, home, "release", "bc@1", "--dry-run", "--json")
    expect(r, 0)
    assert "NOTE: release of bc@1: contamination on regression@1: evaluation sha256:" in r.stderr
    assert said in r.stderr and said_end in r.stderr, r.stderr
    info = checks(json.loads(r.stdout)["report"], "release-decision")["contamination on "
                                                                       "regression@1"]
    assert info["status"] == "info" and said in info["detail"] and said_end in info["detail"], info
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    assert said in r.stderr, r.stderr
    rel = r.stdout.strip().splitlines()[-1]
    r = run(runner, home, "verify", rel)
    expect(r, 0)
    assert "· contamination on regression@1 — evaluation sha256:" in r.stdout, r.stdout
    # an evaluation that records the comparison (eval does now) says nothing of it
    judged_by(runner, home, script, "judge@1")
    r = run(runner, home, "release", "bc@1", "--dry-run")
    expect(r, 0)
    assert "NOTE" not in r.stderr and "contamination" not in r.stderr, r.stderr
