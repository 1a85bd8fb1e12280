"""End to end: a key replaced "as the docs say" on a ledger whose policy holds more than its
roles (out45, the vendor's data engineer rotating its producer key mid-month).

On test_evaluations' ledger (policy 'evals' serial 1, format 2: an evaluator role and a
[release] requirement): `policy init` reached for to write the successor wrote a starting
policy, serial 1, which `policy set` refused (`serial 1 does not follow serial 1`); given a
higher serial, `policy set` showed its roles `unchanged` and recorded it with --yes, dropping
[release] without a line. Findings: docs/SECURITY.md, "Review of 2026-12-06, thirtieth round
(out45)".
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from test_evaluations import evals_template, home  # noqa: F401
from test_runner_cli import expect, run


def test_policy_init_on_a_ledger_with_a_policy_writes_its_successor(
        runner: CliRunner, home: Path, tmp_path: Path) -> None:  # noqa: F811
    """out45 finding 3: the successor's serial and name are the policy in force's next, and
    what the policy in force holds besides the roles asked for is named; out52 finding 1: and
    kept (its evaluator role and [release]), not lost."""
    out = tmp_path / "successor.toml"
    r = run(runner, home, "policy", "init", "--out", out)
    expect(r, 0)
    text = out.read_text()
    assert 'name = "evals"\nserial = 2\n' in text, text[:300]
    notes = [line for line in r.stderr.splitlines() if line.startswith("NOTE:")]
    assert any("keeps from serial 1 (in force) what this command was not asked to change: "
               "the evaluator role, 1 evaluator encryption key(s), [release]" in n
               for n in notes), r.stderr
    assert "[release]\napprovals = 1\n" in text and "[roles.evaluator]" in text


def test_policy_set_names_the_settings_a_successor_changes(
        runner: CliRunner, home: Path, tmp_path: Path) -> None:  # noqa: F811
    """out45 finding 3: `policy set` listed each role `unchanged` and said nothing of a
    successor that drops [release] or changes the approval age."""
    policy = (home / "policy.toml").read_text()
    file = home / "successor.toml"  # [release] left out, the approval age set to a day
    file.write_text(policy[:policy.index("[release]")].replace(
        "serial = 1", "serial = 2\nmax_approval_age = 86400", 1))
    r = run(runner, home, "policy", "set", file, "--key", "approver", "--yes")
    expect(r, 0)
    lines = r.stderr.splitlines()
    assert ("  settings  - release   1 approver(s); requires success_rate on regression@1 "
            ">= 0.5 drop <= 0.1") in lines, r.stderr
    assert any(line.startswith("  settings  + max approval age 86400s") for line in lines), (
        r.stderr)
