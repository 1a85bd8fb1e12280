"""The rollout layer's and the log's layout: modules of one job each, imported without a circle
(issue 20).

Every product module (everything under ``trajledger/``, issue 20 item 4) holds at most 1,000
lines, and the modules of ``ledger/rollouts/`` and of ``ledger/log/`` import each other in one
direction only: the graph of their imports, function-level imports included, has no circle.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "trajledger" / "ledger" / "rollouts"
LOG = ROOT / "trajledger" / "ledger" / "log"
MAX_LINES = 1000


def modules() -> list[Path]:
    """Every product module."""
    src = ROOT / "trajledger"
    return [p for p in sorted(src.rglob("*.py")) if "__pycache__" not in p.parts]


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_module_over_1000_lines(path: Path) -> None:
    lines = len(path.read_text("utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)}: {lines} lines, want <= {MAX_LINES}"


def sibling_imports(path: Path) -> set[str]:
    """The modules of its own package that ``path`` imports anywhere (functions included)."""
    package = path.parent
    names = {p.stem for p in package.glob("*.py")} - {"__init__"}
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is not None:
                found.add(node.module.split(".")[0])
            else:
                found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:3] == ["trajledger", "ledger", package.name] and len(parts) > 3:
                found.add(parts[3])
    return found & names


def test_rollout_modules_import_each_other_without_a_circle() -> None:
    graph = {
        p.stem: sibling_imports(p) for p in PACKAGE.glob("*.py") if p.name != "__init__.py"
    }
    assert len(graph) >= 15 and graph["parquet_io"] >= {"validate", "normalise"}
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        pytest.fail(f"rollouts/ modules import each other in a circle: {e.args[1]}")
    assert order.index("schema") < order.index("validate") < order.index("parquet_io")


def test_log_modules_import_each_other_without_a_circle() -> None:
    graph = {p.stem: sibling_imports(p) for p in LOG.glob("*.py") if p.name != "__init__.py"}
    assert graph["writer"] >= {"reader", "files", "recovery", "spec", "state"}
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        pytest.fail(f"log/ modules import each other in a circle: {e.args[1]}")
    for low, high in [("layout", "state"), ("state", "reader"), ("reader", "writer"),
                      ("files", "recovery"), ("writer", "witness")]:  # fmt: skip
        assert order.index(low) < order.index(high), (low, high)


def test_circle_is_caught() -> None:
    with pytest.raises(graphlib.CycleError):
        list(graphlib.TopologicalSorter({"a": {"b"}, "b": {"a"}}).static_order())
