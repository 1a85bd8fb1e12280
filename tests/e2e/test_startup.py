"""``trajledger --help`` (and each command's help) loads no heavy package.

Measured with ``PYTHONPROFILEIMPORTTIME`` (the ``-X importtime`` report) on the installed console
script, so the whole start-up path counts: entry point, click, every command module. Wall time is
recorded by ``bench/sign_bench.py`` in docs/PERFORMANCE.md, not asserted here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = frozenset(
    {"pyarrow", "lancedb", "gymnasium", "sigstore", "pydantic", "numpy", "pandas", "polars",
     "torch"}
)
SCRIPT = Path(sys.executable).with_name("trajledger")


def imported_modules(importtime_report: str) -> set[str]:
    """Module names from ``-X importtime`` lines: ``import time: self | cumulative | name``."""
    names = set()
    for line in importtime_report.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    if SCRIPT.is_file():
        cmd = [str(SCRIPT), *args]
    else:  # not installed as a script: the same entry point, through the interpreter
        cmd = [sys.executable, "-c", "import sys; from trajledger.runner.cli import main; "
               "sys.argv[0] = 'trajledger'; main()", *args]
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)


def test_importtime_parser() -> None:
    report = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       120 |        120 |   pyarrow.lib\n"
        "import time:        80 |        200 | click\n"
    )
    assert imported_modules(report) == {"pyarrow.lib", "click"}


@pytest.mark.parametrize(
    "args",
    [["--help"], ["sign", "--help"], ["verify", "--help"], ["key", "new", "--help"],
     ["attest", "--help"], ["export", "--help"]],
    ids=["main", "sign", "verify", "key-new", "attest", "export"],
)
def test_help_imports_nothing_heavy(args: list[str]) -> None:
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: ")
    modules = imported_modules(result.stderr)
    expected = {"click", "trajledger.runner.cli", "trajledger.ledger.cli"}
    assert expected <= modules, "no import-time report"
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert heavy == [], f"trajledger {' '.join(args)} imports heavy modules: {heavy}"


def test_help_lists_the_commands() -> None:
    result = run_cli("--help")
    for command in ("init", "key", "sign", "verify"):
        assert f"\n  {command} " in result.stdout
