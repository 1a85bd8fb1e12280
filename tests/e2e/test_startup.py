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


# -- pandas: pyarrow's first pa.array would import it for nothing -----------------------------

_STEPS = "".join(
    f'{{"episode_id": {e}, "step": {t}, "obs": [0.5, 0.25], "action": 1, "reward": 1.0, '
    f'"terminated": {"true" if t == 3 else "false"}, "truncated": false}}\n'
    for e in range(2) for t in range(4)
)
_RUN_THEN = """
import sys
from trajledger.__main__ import main
sys.argv = ["trajledger", "validate", sys.argv[1]]
try:
    main()
except SystemExit as e:
    assert e.code in (0, None), e.code
assert "pyarrow" in sys.modules, "the command built no table: the test tests nothing"
print("pandas loaded by the command:", "pandas" in sys.modules)
"""


def _python(code: str, *args: str) -> str:
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture
def steps(tmp_path: Path) -> str:
    pytest.importorskip("pandas")  # without pandas there is nothing to spare
    path = tmp_path / "steps.jsonl"
    path.write_text(_STEPS)
    return str(path)


def test_a_command_that_builds_tables_does_not_import_pandas(steps: str) -> None:
    out = _python(_RUN_THEN, steps)
    assert "pandas loaded by the command: False" in out


def test_pandas_imported_after_the_command_converts_as_pandas(steps: str) -> None:
    """What imports pandas later in the command's process (a trainer's ``datasets``) gets
    pyarrow's pandas conversions: a pandas NaN is a null, as in any other process."""
    out = _python(_RUN_THEN + """
import pandas as pd
import pyarrow as pa
print("nulls:", pa.array(pd.Series([1.0, None])).null_count)
print("frame:", pa.table({"a": [1, 2]}).to_pandas()["a"].tolist())
""", steps)
    assert "nulls: 1" in out and "frame: [1, 2]" in out


def test_a_library_users_process_is_not_touched(steps: str) -> None:
    """Only the command's entry point settles pyarrow: importing trajledger changes nothing."""
    out = _python("""
import sys
import trajledger
from trajledger import Ledger
import pyarrow as pa
pa.array([1, 2])
print("pandas loaded:", "pandas" in sys.modules)
""")
    assert "pandas loaded: True" in out
