"""End to end: an auditor asks which checkpoints, and which releases, used a batch its vendor
revoked (out46).

On test_evaluations' ledger (bc@1 and bc@2 trained on train@1, whose batch is the one revoked;
regression@1 required at success_rate >= 0.5): bc@1 evaluated and released, then the batch
revoked. ``impact`` listed the checkpoints reached and not the release standing on one of them:
the auditor, asked "which releases must be withdrawn?", read the text tree for it.

Findings: docs/SECURITY.md, "Review of 2026-12-07, thirty-first round (out46)".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner
from test_evaluations import evals_template, evaluate, home, script  # noqa: F401
from test_runner_cli import expect, run


def test_impact_names_the_releases_a_revoked_batch_reached(
    runner: CliRunner, home: Path, script: Path  # noqa: F811
) -> None:
    """out46 finding 3."""
    evaluate(runner, home, script, "pass")
    released = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(released, 0)
    digest = released.stdout.strip()
    r = run(runner, home, "impact", "train-batch")
    expect(r, 0)
    assert "2 checkpoint(s) reached: bc@1, bc@2\n" in r.stderr, r.stderr
    assert "release(s) reached" in r.stderr and "failing" not in r.stderr.split(
        "release(s) reached")[1].splitlines()[0], r.stderr  # nothing revoked yet: no advice
    expect(run(runner, home, "revoke", "train-batch", "--key", "vendor", "--reason",
               "licence withdrawn"), 0)
    r = run(runner, home, "impact", "train-batch")
    expect(r, 0)
    line = next(x for x in r.stderr.splitlines() if "release(s) reached" in x)
    assert re.fullmatch(
        r"1 release\(s\) reached, failing with it: release of bc@1 \(sha256:[0-9a-f]{12}…\) at "
        r"log index \d+; whoever holds their bundles learns of it from an update \('trajledger "
        r"export --updates-since SIZE', SIZE: the log size they hold; docs/third-party\.md\)",
        line), line
    # --json: the same report, each release a node of kind release, failing.
    r = run(runner, home, "impact", "train-batch", "--json")
    expect(r, 0)
    doc = json.loads(r.stdout)
    releases = [n for n in doc["nodes"] if n["kind"] == "release"]
    assert [n["id"] for n in releases] == [digest]
