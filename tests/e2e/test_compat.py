"""What trajledger 0.1.0 wrote keeps verifying: its ledger directory and its evidence bundle.

The fixtures in ``tests/fixtures/compat-0.1.0`` were made once by the first release and are never
regenerated (see their README). Each test works on a copy, so nothing a command writes (caches,
state) reaches the fixture.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from trajledger.runner.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "compat-0.1.0"
CHECKPOINT = "sha256:28b383f77e14d2fa2bbffd25ad7db864c9bfcb020f4963ad8a46afc62f850152"


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    copy = tmp_path / "ledger"
    shutil.copytree(FIXTURES / "ledger", copy)
    return copy


def test_the_010_ledger_verifies_the_final_checkpoint(ledger: Path) -> None:
    r = CliRunner().invoke(
        main, ["--ledger", str(ledger), "verify", CHECKPOINT, "--policy",
               str(ledger / "policy.toml")],
    )
    assert r.exit_code == 0, r.output
    assert "cartpole-bc@1" in r.output


def test_the_010_log_verifies(ledger: Path) -> None:
    r = CliRunner().invoke(main, ["--ledger", str(ledger), "log", "verify"])
    assert r.exit_code == 0, r.output


def test_the_010_bundle_verifies_with_verify_alone(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES, tmp_path / "f")
    run = subprocess.run(
        [sys.executable, "-m", "trajledger.verify", str(tmp_path / "f" / "checkpoint.tar.zst"),
         "--policy", str(tmp_path / "f" / "ledger" / "policy.toml")],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr.startswith("OK: ")
