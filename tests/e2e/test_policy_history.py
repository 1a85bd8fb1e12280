"""End to end: a policy succession that raises the approver threshold judges uses from then on.

Each record's signatures are judged by the policy in force when it was logged
(`TrustPolicy.policy_at`); so are the approvals a use counts: a checkpoint trained on a dataset
two approvers approved, under a policy asking two, stays verified after a successor asks
three, while a use now (the gate) needs three (rev6's design limit, decided at the merge).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import testkit
from click.testing import CliRunner, Result

from trajledger.runner.cli import main


def run(runner: CliRunner, home: Path, *args: str) -> Result:
    return runner.invoke(main, ["--ledger", str(home), *args], prog_name="trajledger")


@pytest.fixture
def demo(quickstart_template: testkit.Template[str], tmp_path: Path) -> tuple[Path, str]:
    """A copy of the session's quickstart ledger (approvers a and b, 2 of 2) and its final
    checkpoint."""
    return testkit.copy_template(quickstart_template, tmp_path / "demo"), quickstart_template.value


def test_a_raised_approver_threshold_judges_uses_from_then_on(
    runner: CliRunner, demo: tuple[Path, str]
) -> None:
    home, ckpt = demo
    assert run(runner, home, "key", "new", "approver-c", "--no-encrypt").exit_code == 0
    pem = run(runner, home, "key", "export", "approver-c").stdout
    text = (home / "policy.toml").read_text().replace("serial = 1", "serial = 2", 1)
    role = text.index("[roles.approver]")
    end = text.index("threshold = 2", role)
    text = (text[:end].rstrip().removesuffix("]").rstrip() + f'\n  """{pem}""",\n]\n'
            + "threshold = 3" + text[end + len("threshold = 2"):])
    (home / "policy-2.toml").write_text(text)
    r = run(runner, home, "policy", "set", str(home / "policy-2.toml"), "--key", "approver-a",
            "--key", "approver-b", "--yes")
    assert r.exit_code == 0, r.output
    assert "approver  threshold 3 of 3" in run(runner, home, "policy", "show").stdout

    # Trained under serial 1 on two approvals: still verified, lineage and all.
    for command in ("verify", "lineage"):
        r = run(runner, home, command, ckpt)
        assert r.exit_code == 0, (command, r.output)
    # A use now is judged by the policy now: two of three.
    r = run(runner, home, "admit", "cartpole-train@2")
    assert r.exit_code == 1, r.output
    assert r.stderr.splitlines()[-1].endswith(
        "> dataset cartpole-train@2: approvals: 2 of 3 required approver(s) for 'train'")
    assert run(runner, home, "approve", "cartpole-train@2", "--key", "approver-c").exit_code == 0
    r = run(runner, home, "admit", "cartpole-train@2")
    assert r.exit_code == 0, r.output
