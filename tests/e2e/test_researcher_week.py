"""An RL researcher's first week and an auditor's scripts (out42): what they met that the
project had not, each kept fixed here. The Gymnasium recorder's Ctrl-C is in
tests/unit/test_gymnasium_recorder.py, an output that is no regular file in
tests/unit/runner/test_workdir.py, a query cut short in tests/e2e/test_index_cli.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tamperkit as tk
import testkit
from click.testing import CliRunner

from trajledger.runner.cli import main


@pytest.fixture
def home(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    out = testkit.copy_template(quickstart_template, tmp_path / "demo")
    tk.pin_log(out)
    return out


def _approve(home: Path, expires: str) -> list[str]:
    r = CliRunner().invoke(main, ["--ledger", str(home), "approve", "cartpole-train@1", "--key",
                                  "approver-a", "--expires", expires])  # fmt: skip
    assert r.exit_code == 0, r.output
    return [line for line in r.stderr.splitlines() if not line.startswith("NOTE:")]


def test_an_approval_longer_than_the_policy_counts_says_how_long_it_counts(home: Path) -> None:
    """`approve --expires 365d` under the quickstart's policy (max_approval_age 90d) said `OK:
    … approved … for 365d`; the gate and every verifier count it 90 days only, and the
    researcher learnt it when training was refused three months later."""
    assert _approve(home, "365d")[0] == (
        "WARNING: the policy in force 'quickstart' counts an approval for at most 90d after the "
        "log takes it in (max_approval_age), so this one counts for 90d, not 365d: approve "
        "again before then, or record a policy with a longer max_approval_age"
    )
    assert [line.split(" (log index")[0] for line in _approve(home, "90d")] == [
        "OK: cartpole-train@1 approved for 'train' by approver-a for 90d"
    ]


@pytest.mark.parametrize("command", ["lineage", "impact"])
def test_out_naming_a_directory_is_a_usage_error_naming_it(
    home: Path, tmp_path: Path, command: str
) -> None:
    """`impact cartpole-random --out reports` (a directory) judged the whole graph, then said
    `FAIL: cannot write in /tmp/…: Is a directory`, naming the parent, exit 3."""
    reports = tmp_path / "reports"
    reports.mkdir()
    ref = "cartpole-bc@2" if command == "lineage" else "cartpole-random"
    r = CliRunner().invoke(
        main, ["--ledger", str(home), command, ref, "--out", str(reports)], prog_name="trajledger"
    )
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == (
        f"Error: Invalid value for '--out': {reports}: is a directory; give the path of a file "
        f"in it, such as --out {reports}/{command}.html; see 'trajledger {command} --help'\n"
    )
    assert not any(reports.iterdir())
