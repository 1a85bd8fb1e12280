"""The benchmark scripts keep working: each one under ``bench/`` runs in its ``--quick`` mode.

Scope: every ``bench/*.py`` script (the ``_`` helpers excepted) has a ``--quick`` mode (tiny
sizes, a temporary directory) and exits 0 in it, having printed its results; the helper that
writes a script's block into docs/PERFORMANCE.md replaces only that block. Nothing is timed or
compared here: the numbers go to docs/PERFORMANCE.md when the scripts are run by hand at full
size. Each script runs as a process of its own, forked by one ``quick_runner.py`` per test
process, which has imported what most scripts import (the start-up and those imports, about
1 CPU-s a script, are paid once).
Non-scope: whether a target is met (the full runs say, in docs/PERFORMANCE.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

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


class QuickRunner:
    """One ``quick_runner.py`` process (in a session of its own, so that a timeout ends it with
    whatever its scripts started), started on first use; a new one after one dies."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.proc: subprocess.Popen[str] | None = None

    def run(self, script: Path, cwd: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
        """Run ``script --quick`` in ``cwd`` with environment ``env``; the runner's answer."""
        if self.proc is None or self.proc.poll() is not None:
            with open(self.log, "a") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, str(Path(__file__).with_name("quick_runner.py"))],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                    start_new_session=True,
                )  # fmt: skip
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"script": str(script), "cwd": str(cwd), "env": env}))
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        poller = select.poll()  # (not select: a long session's descriptors pass 1,023)
        poller.register(self.proc.stdout, select.POLLIN)
        answer = self.proc.stdout.readline() if poller.poll(timeout * 1000) else ""
        if not answer:
            self.close()
            pytest.fail(f"{script.name}: no answer from the runner (timeout {timeout} s, or it "
                        f"died):\n{self.log.read_text()[-4000:]}")
        return dict(json.loads(answer))

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
            self.proc = None


@pytest.fixture(scope="session")
def quick_runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuickRunner]:
    runner = QuickRunner(tmp_path_factory.mktemp("quick-runner") / "runner.log")
    yield runner
    runner.close()


@pytest.mark.slow  # each script builds its own ledgers and starts processes of its own
@pytest.mark.parametrize("name", SCRIPTS)
def test_quick_mode_runs(
    name: str, tmp_path: Path, quick_runner: QuickRunner, record_property: Any
) -> None:
    for module in NEEDS.get(name, ()):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{name} needs {module}")
    env = dict(os.environ, TRAJLEDGER_STATE_DIR=str(tmp_path / "state"), TMPDIR=str(tmp_path))
    got = quick_runner.run(BENCH / f"{name}.py", tmp_path, env, timeout=900)
    record_property("summary:bench --quick: CPU-s of each script (its process and children)",
                    f"{got['cpu']:6.2f}  {name}")
    stdout, stderr = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    assert got["code"] == 0, f"{name} --quick exited {got['code']}:\n{stderr[-4000:]}"
    assert stdout.strip(), f"{name} --quick printed nothing"


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
