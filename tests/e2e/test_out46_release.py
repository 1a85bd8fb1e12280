"""End to end: what ``release`` says to do when an evaluation it needs stands on a record
revoked since (out46; out45's Left).

On test_evaluations' ledger (bc@1, regression@1 required at success_rate >= 0.5). An
evaluation team retires an evaluator version as buggy, or the suite itself is revoked: the
release is refused, as before, and its line now says what to do next (evaluate again under a
version that stands; name another suite in a successor policy), in text and in ``--json``.

Findings: docs/SECURITY.md, "Review of 2026-12-07, thirty-first round (out46)".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner
from test_evaluations import evals_template, home, log_size, note_episode_ids, script  # noqa: F401
from test_runner_cli import expect, run


def judged_by(runner: CliRunner, home: Path, script: Path, evaluator: str) -> str:  # noqa: F811
    """bc@1 evaluated on regression@1 (every episode passed) by ``evaluator``."""
    note_episode_ids(home, script)
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            "--evaluator", evaluator, "--", sys.executable, script, "pass")
    expect(r, 0)
    return r.stdout.strip().splitlines()[-1]


def register(runner: CliRunner, home: Path, version: str) -> None:  # noqa: F811
    rubric = home / "rubric.md"
    rubric.write_text(f"judge version {version}\n")
    expect(run(runner, home, "evaluator", "register", "judge", "--version", version, "--kind",
               "deterministic", "--rubric", str(rubric), "--key", "vendor"), 0)


def refused(runner: CliRunner, home: Path, *said: str) -> None:  # noqa: F811
    """``release`` and ``release --dry-run`` of bc@1 refuse (exit 1) and say each of ``said``."""
    for args in ((), ("--dry-run",)):
        r = run(runner, home, "release", "bc@1", "--key", "approver", *args)
        expect(r, 1)
        assert all(s in r.stderr for s in said), r.stderr


def test_a_release_on_a_retired_evaluator_says_to_evaluate_again(
    runner: CliRunner, home: Path, script: Path  # noqa: F811
) -> None:
    """out46 finding 1: the evaluator version an evaluation ran under revoked as buggy, the
    release's refusal named the revocation and not the way on."""
    register(runner, home, "1")
    judged_by(runner, home, script, "judge@1")
    expect(run(runner, home, "release", "bc@1", "--dry-run"), 0)
    expect(run(runner, home, "revoke", "judge@1", "--key", "vendor", "--reason",
               "off-by-one in the threshold"), 0)
    size = log_size(home)
    refused(runner, home, "> revoked: off-by-one in the threshold (log index ",
            # out47 finding 2: the requirement fails with the revocation as its cause, so the
            # decision counts among what depends on it, as `verify` of a release counts it
            "; and 2 records that depend on it; evaluation of bc@1 on regression@1 (sha256:",
            "stands on it: evaluate bc@1 again on regression@1 under an evaluator version that "
            "stands ('trajledger eval bc@1 --suite regression@1 --key KEY --evaluator "
            "NAME@VERSION'; one made in another ledger comes by 'trajledger import'), then run "
            "'trajledger release' again\n")
    r = run(runner, home, "release", "bc@1", "--dry-run", "--json")
    expect(r, 1)
    doc = json.loads(r.stdout)
    assert doc["releasable"] is False
    assert len(doc["next"]) == 1 and doc["next"][0].startswith("evaluate bc@1 again on "
                                                                "regression@1"), doc
    assert log_size(home) == size
    register(runner, home, "2")
    judged_by(runner, home, script, "judge@2")
    expect(run(runner, home, "release", "bc@1", "--key", "approver"), 0)


def test_a_release_on_a_revoked_suite_says_to_name_another_suite(
    runner: CliRunner, home: Path, script: Path  # noqa: F811
) -> None:
    """out46 finding 2 (out45's Left): the suite revoked once found out, the refusal said
    ``no new evaluation on it can`` and not what to do."""
    note_episode_ids(home, script)
    expect(run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
               "--", sys.executable, script, "pass"), 0)
    expect(run(runner, home, "revoke", "regression@1", "--key", "vendor", "--reason",
               "holds copies of train@1's episodes"), 0)
    refused(runner, home, "no new evaluation on it can; see 'trajledger verify regression@1': "
            "name another holdout or regression suite in [[release.require]] of a successor "
            "policy ('trajledger policy set'), evaluate bc@1 on it, then run 'trajledger "
            "release' again\n")
    r = run(runner, home, "release", "bc@1", "--dry-run", "--json")
    expect(r, 1)
    assert json.loads(r.stdout)["next"] == [
        "name another holdout or regression suite in [[release.require]] of a successor policy "
        "('trajledger policy set'), evaluate bc@1 on it, then run 'trajledger release' again"]


def test_a_suite_pinned_from_another_log_says_to_import_it(
    runner: CliRunner, home: Path  # noqa: F811
) -> None:
    """out46 finding 11: the training team pins the evaluation team's suite (recorded in that
    team's ledger); before the evaluation's bundle is imported, the refusal said ``no dataset
    record of it is logged before the release`` and not where it comes from."""
    from test_evaluations import pin_suite

    pin_suite(home, "heldout@1", "sha256:" + "ab" * 32)
    r = run(runner, home, "release", "bc@1", "--dry-run")
    expect(r, 1)
    assert ("no dataset record of it is logged before the release: if another ledger recorded "
            "it, import it ('trajledger import BUNDLE': the bundle of an evaluation on it carries "
            "it), then run 'trajledger release' again\n") in r.stderr, r.stderr
