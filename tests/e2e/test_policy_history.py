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
    assert ("> dataset cartpole-train@2: approvals: 2 of 3 required approver(s) for 'train': "
            "approve it with 1 more approver key") in r.stderr.splitlines()[-1], r.stderr
    assert run(runner, home, "approve", "cartpole-train@2", "--key", "approver-c").exit_code == 0
    r = run(runner, home, "admit", "cartpole-train@2")
    assert r.exit_code == 0, r.output


def test_a_policy_naming_another_log_key_fails_cleanly(
    runner: CliRunner, demo: tuple[Path, str]
) -> None:
    """A policy whose log key is not this log's verifies no checkpoint: `verify` and `admit`
    fail with one line naming it (exit 1), not an internal error (the gate's clock floor read
    the verified checkpoint unconditionally)."""
    import re

    home, ckpt = demo
    vkey = "other.example/log+91e881e8+AeRPSU9F2HZm2ydDZSDzaR6RwPpPcBmOSkXFfQ3i1kT4"
    policy = (home / "policy.toml").read_text()
    other = re.sub(r'vkeys = \["[^"]*"\]', f'vkeys = ["{vkey}"]', policy)
    (home / "other.toml").write_text(other)
    for args in (("verify", ckpt), ("admit", "cartpole-train@2")):
        r = run(runner, home, *args, "--policy", str(home / "other.toml"))
        assert r.exit_code == 1, (args, r.output)
        assert "BUG" not in r.stderr and "signed by 0 of 1 trusted log key(s)" in r.stderr, r.stderr
