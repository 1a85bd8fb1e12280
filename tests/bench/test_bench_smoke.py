"""The benchmark scripts keep working: each one under ``bench/`` runs in its ``--quick`` mode.

Scope: every ``bench/*.py`` script (the ``_`` helpers excepted) has a ``--quick`` mode (tiny
sizes, a temporary directory) and exits 0 in it; the helper that writes a script's block into
docs/PERFORMANCE.md replaces only that block. Nothing is timed or compared here: the numbers
go to docs/PERFORMANCE.md when the scripts are run by hand at full size.
Non-scope: whether a target is met (the full runs say, in docs/PERFORMANCE.md).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py") if not p.stem.startswith("_"))
NEEDS = {
    "lineage_bench": ("gymnasium",),
    "recorder_bench": ("gymnasium",),
    "s3_bench": ("moto", "boto3"),
    "sign_bench": ("model_signing",),
}
"""Optional packages a script needs (test extras): without them its smoke test is skipped."""


def test_every_script_has_a_quick_mode() -> None:
    assert SCRIPTS, f"no scripts in {BENCH}"
    missing = [s for s in SCRIPTS if '"--quick"' not in (BENCH / f"{s}.py").read_text()]
    assert not missing, f"scripts without --quick: {missing}"


@pytest.mark.slow  # a process per script, each building its own ledgers
@pytest.mark.parametrize("name", SCRIPTS)
def test_quick_mode_runs(name: str, tmp_path: Path) -> None:
    for module in NEEDS.get(name, ()):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{name} needs {module}")
    env = dict(os.environ, TRAJLEDGER_STATE_DIR=str(tmp_path / "state"), TMPDIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), "--quick"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, f"{name} --quick exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip(), f"{name} --quick printed nothing"


def _common() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_common", BENCH / "_common.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_write_section_replaces_only_its_block(tmp_path: Path) -> None:
    common = _common()
    doc = tmp_path / "PERFORMANCE.md"
    doc.write_text("# Performance\n\n## Verification\n\nReading: kept.\n")
    common.write_section("verify_bench", "## Verification (bench)", "first numbers", doc)
    assert doc.read_text() == (
        "# Performance\n\n## Verification\n\nReading: kept.\n\n## Verification (bench)\n\n"
        "<!-- bench:verify_bench -->\nfirst numbers\n<!-- /bench:verify_bench -->\n"
    )
    text = doc.read_text().replace("Reading: kept.", "Reading: kept.\n\nMore prose.")
    doc.write_text(text + "\nAfter.\n")
    common.write_section("verify_bench", "## ignored: the block exists", "new numbers\n", doc)
    assert doc.read_text() == text.replace("first numbers", "new numbers") + "\nAfter.\n"
