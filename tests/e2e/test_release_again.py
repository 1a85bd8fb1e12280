"""End to end: ``release`` run again on the same evaluations, and ``release --dry-run``
(out44, the release engineer's CI).

On test_evaluations' ledger (bc@1 with no parent, regression@1 required at success_rate >=
0.5): a CI job retried runs ``release`` twice on one decision, and a job that must not release
yet asks "is it releasable?" without recording anything.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from click.testing import CliRunner
from test_evaluations import evals_template, evaluate, home, log_size, script  # noqa: F401
from test_runner_cli import expect, run


def files_of(top: Path) -> dict[str, str]:
    """Every file under ``top`` by its SHA-256: what a dry run must leave as it was."""
    out = {}
    for where, _, names in os.walk(top):
        for name in names:
            path = os.path.join(where, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, top)] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_a_release_run_again_on_the_same_evaluations_answers_with_the_one_recorded(
    runner: CliRunner, home: Path, script: Path  # noqa: F811
) -> None:
    """out44 finding 1: a CI job retried (the same `release` on the same evaluations)
    recorded a second release of the same decision at each run."""
    evaluate(runner, home, script, "pass")
    r = run(runner, home, "release", "bc@1", "--key", "approver", "--note", "run 1")
    expect(r, 0)
    first, size = r.stdout.strip(), log_size(home)
    r = run(runner, home, "release", "bc@1", "--key", "approver", "--note", "run 1, again")
    expect(r, 0, f"OK: release of bc@1: released already at log index {size - 1} on the same 1 "
                 "evaluation(s) under policy 'evals' serial 1; nothing new was recorded (a new "
                 "evaluation, a new release); the note 'run 1, again' was not kept: the release "
                 "that stands has its own ('run 1')\n")
    assert r.stdout.strip() == first and log_size(home) == size
    r = run(runner, home, "release", "bc@1", "--key", "approver", "--json")
    expect(r, 0)
    doc = json.loads(r.stdout)
    assert (doc["released"], doc["recorded"], doc["digest"], doc["logIndex"]) == (
        True, False, first, size - 1)
    # A new evaluation is a new decision: a release of its own.
    evaluate(runner, home, script, "pass")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    assert r.stdout.strip() != first and log_size(home) == size + 2
    second = r.stdout.strip()
    # A revoked release is not the answer: the same decision is recorded anew.
    expect(run(runner, home, "revoke", second, "--key", "approver", "--reason", "test"), 0)
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    assert r.stdout.strip() not in (first, second) and "recorded at log index" in r.stderr


def test_a_dry_run_says_whether_release_would_record_and_records_nothing(
    runner: CliRunner, home: Path, script: Path  # noqa: F811
) -> None:
    """out44 finding 2 (out43's Left): "is it releasable?" was asked only by releasing."""
    before = files_of(home)
    r = run(runner, home, "release", "bc@1", "--dry-run")
    expect(r, 1)
    lines = r.stderr.splitlines()
    assert lines[0] == "FAIL: release of bc@1: refused, 1 problem(s); nothing was recorded"
    assert "success_rate on regression@1: missing: " in lines[1]
    r = run(runner, home, "release", "bc@1", "--dry-run", "--json")
    expect(r, 1)
    assert json.loads(r.stdout)["releasable"] is False
    assert files_of(home) == before
    evaluation = evaluate(runner, home, script, "pass")
    before, size = files_of(home), log_size(home)
    r = run(runner, home, "release", "bc@1", "--dry-run", "--key", "approver")
    expect(r, 0, "OK: release of bc@1: releasable on 1 evaluation(s) under policy 'evals' serial "
                 "1 (dry run: nothing was signed or recorded)\n")
    assert r.stdout == ""
    r = run(runner, home, "release", "bc@1", "--dry-run", "--json")
    expect(r, 0)
    doc = json.loads(r.stdout)
    assert (doc["releasable"], doc["released"], doc["dryRun"], doc["evaluations"]) == (
        True, False, True, [evaluation])
    assert files_of(home) == before and log_size(home) == size
    # A key that is no approver is refused as `release` refuses it.
    r = run(runner, home, "release", "bc@1", "--dry-run", "--key", "trainer")
    expect(r, 1)
    assert "does not hold the approver role" in r.stderr
    # Released, the dry run names the release `release` would answer with.
    released = run(runner, home, "release", "bc@1", "--key", "approver").stdout.strip()
    r = run(runner, home, "release", "bc@1", "--dry-run", "--json")
    expect(r, 0)
    doc = json.loads(r.stdout)
    assert (doc["released"], doc["digest"]) == (True, released)
    assert f"released already at log index {size} ({released})" in r.stderr
    # Without --dry-run, a key is still needed (a usage error, nothing judged).
    r = run(runner, home, "release", "bc@1")
    expect(r, 2)
    assert "--key NAME (a --dry-run may go without)" in r.stderr
