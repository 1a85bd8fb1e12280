"""End to end: what ``release`` and ``release --dry-run`` say of the note, and the keys of
their ``--json`` as docs/cli.md's table lists them (out45, out44's Left).

On test_evaluations' ledger (bc@1, regression@1 required at success_rate >= 0.5). A dry run
is the command a CI job would run with ``--dry-run`` added: the note it is given is taken and
reported (kept with the release that would be recorded, or not kept: a release that stands
is the answer), never silently dropped.

Findings: docs/SECURITY.md, "Review of 2026-12-06, thirtieth round (out45)".
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from test_evaluations import evals_template, evaluate, home, log_size, script  # noqa: F401
from test_json_contract import documented_keys
from test_runner_cli import expect, run


def test_a_dry_run_says_what_becomes_of_the_note(
    runner: CliRunner, home: Path, script: Path  # noqa: F811
) -> None:
    """out45 finding 1: ``release --dry-run --note X`` took the note and said nothing of it."""
    evaluate(runner, home, script, "pass")
    size = log_size(home)
    r = run(runner, home, "release", "bc@1", "--dry-run", "--note", "CI run 7")
    expect(r, 0, "OK: release of bc@1: releasable on 1 evaluation(s) under policy 'evals' serial "
                 "1 (dry run: nothing was signed or recorded); the note 'CI run 7' would be "
                 "kept with it\n")
    r = run(runner, home, "release", "bc@1", "--dry-run", "--note", "CI run 7", "--json")
    expect(r, 0)
    doc = json.loads(r.stdout)
    assert (doc["note"], doc["noteKept"]) == ("CI run 7", True)
    assert log_size(home) == size
    released = run(runner, home, "release", "bc@1", "--key", "approver", "--note", "CI run 7")
    expect(released, 0)
    # Released: the release that stands is the answer, and its note is the one kept.
    r = run(runner, home, "release", "bc@1", "--dry-run", "--note", "CI run 8", "--json")
    expect(r, 0)
    doc = json.loads(r.stdout)
    assert (doc["note"], doc["noteKept"]) == ("CI run 8", False)
    assert r.stderr.rstrip().endswith(
        "; the note 'CI run 8' would not be kept: the release that stands has its own "
        "('CI run 7')"), r.stderr
    r = run(runner, home, "release", "bc@1", "--key", "approver", "--note", "CI run 8")
    expect(r, 0)
    assert r.stderr.rstrip().endswith(
        "nothing new was recorded (a new evaluation, a new release); the note 'CI run 8' was "
        "not kept: the release that stands has its own ('CI run 7')"), r.stderr
    assert r.stdout == released.stdout and log_size(home) == size + 1
    # No note given: nothing said of one, and --json's note is null.
    r = run(runner, home, "release", "bc@1", "--dry-run", "--json")
    expect(r, 0)
    assert "note" not in r.stderr
    doc = json.loads(r.stdout)
    assert (doc["note"], doc["noteKept"]) == (None, False)


def test_release_json_has_the_keys_docs_cli_md_lists(
    runner: CliRunner, home: Path, script: Path  # noqa: F811
) -> None:
    """out45 finding 2: ``release`` and ``release --dry-run`` had no row in docs/cli.md's
    table of ``--json`` keys (the quickstart's policy has no ``[release]``, so
    test_json_contract.py cannot run them: they are run here, against the table)."""
    table = documented_keys()

    def check(command: str, doc: dict[str, object]) -> None:
        shape, keys = table[command]
        assert shape == "object" and keys is not None, command
        always, sometimes = keys
        assert always <= set(doc) <= always | sometimes, (command, sorted(doc), keys)

    r = run(runner, home, "release", "bc@1", "--dry-run", "--json")
    expect(r, 1)
    check("release --dry-run", json.loads(r.stdout))
    evaluate(runner, home, script, "pass")
    r = run(runner, home, "release", "bc@1", "--dry-run", "--json")
    expect(r, 0)
    check("release --dry-run", json.loads(r.stdout))
    for _ in range(2):  # recorded, then answered by the release that stands
        r = run(runner, home, "release", "bc@1", "--key", "approver", "--json")
        expect(r, 0)
        check("release", json.loads(r.stdout))
