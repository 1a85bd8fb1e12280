"""Guards (left25, the brief's item 3; lock24 probed them by hand only): ``eval`` refuses a
revoked suite or evaluator before anything is read, exit 1, nothing recorded; ``release`` of a
checkpoint whose evaluation's suite was revoked is test_evaluations.py's
`test_a_release_on_a_revoked_suite_says_so_not_run_eval`. On test_evaluations.py's ledger.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluations import evals_template, home, log_size  # noqa: F401 (fixtures)
from test_runner_cli import run

from trajledger import Ledger


@pytest.mark.parametrize("revoked", ["regression@1", "judge@1"])
def test_eval_refuses_a_revoked_suite_or_evaluator(runner: CliRunner, home: Path,  # noqa: F811
                                                   revoked: str) -> None:
    ledger = Ledger.open(home)
    ledger.register_evaluator("judge", "1", "deterministic", key="vendor")
    ledger.revoke(revoked, key="vendor", reason="leaked")
    size = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--evaluator", "judge@1",
            "--key", "evaluator", "--pass-return", "20")
    assert r.exit_code == 1, r.output
    got = r.stderr.splitlines()
    assert got[0] == ("FAIL: evaluation of bc@1 on regression@1: refused, 1 problem(s); nothing "
                      "was read"), got
    assert "revoked: leaked" in got[1], got
    assert "Traceback" not in r.output
    assert log_size(home) == size
