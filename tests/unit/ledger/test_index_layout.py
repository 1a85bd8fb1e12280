"""The audit index and the episode features, split by job (issue 20 item 4 for ledger/index.py).

- No module of ``ledger/index/`` and of the features and duplicate checks is over 1,000 lines.
- They depend only downward, counting imports inside functions (issue 20 item 2): the index
  package imports ``verify/`` and the ledger modules below it (never ``artifacts``, ``home``
  or another module that records), its own modules in the order schema < rows < tables <
  stats; the features and checks never import the index, ``artifacts`` or ``home`` (only as
  types, under ``TYPE_CHECKING``). So ``dataset create`` cannot reach LanceDB through them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "trajledger"
LEDGER = SRC / "ledger"
INDEX_ORDER = ["schema", "rows", "tables", "stats", "__init__"]
FEATURES = ["episode_vectors", "episode_features", "batch_features", "text_fingerprint",
            "image_windows", "window_clocks", "standing_columns", "row_hashes",
            "column_series", "frame_stacks", "step_columns", "step_windows", "window_cache",
            "held_filter", "held_windows", "finding", "contamination_matcher", "contamination"]
"""In this order: each may import only those before it (and `BASE`)."""
BASE = {"catalog", "errors", "fs", "hashing", "progress", "rollouts", "store", "suggestions"}
"""Ledger modules below both (they import nothing that records or indexes; ``suggestions``,
the "did you mean" that ``catalog`` uses too, only the standard library)."""


def modules() -> list[Path]:
    return sorted(LEDGER.joinpath("index").glob("*.py")) + [LEDGER / f"{m}.py" for m in FEATURES]


def imports(source: str, package: tuple[str, ...]) -> list[tuple[int, str]]:
    """Every import of a module of ``package`` that runs (module level or in a function), as
    the module path relative to ``trajledger`` (``ledger.index.rows``, ``verify.kinds``)."""
    tree = ast.parse(source)
    out: list[tuple[int, str]] = []

    class Visit(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if "TYPE_CHECKING" in ast.unparse(node.test):
                for n in node.orelse:
                    self.visit(n)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            out.extend((node.lineno, a.name.removeprefix("trajledger.")) for a in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = (node.module or "").removeprefix("trajledger.")
            out.append((node.lineno, name))

    Visit().visit(tree)
    return out


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_module_over_1000_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= 1000, f"{path.relative_to(SRC)}: {lines} lines, want at most 1,000"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_run_downward_only(path: Path) -> None:
    here = path.stem
    bad = []
    for line, name in imports(path.read_text(), path.parent.relative_to(SRC).parts):
        parts = name.split(".")
        if parts[0] != "ledger" or parts[1] in BASE:
            continue  # verify/, the standard library, third parties, the modules below
        if path.parent.name == "index":
            if parts[1] == "index":
                target = parts[2] if len(parts) > 2 else "__init__"
                if INDEX_ORDER.index(target) >= INDEX_ORDER.index(here):
                    bad.append(f"line {line}: {name} (not below {here} in the index package)")
            elif parts[1] not in FEATURES:
                bad.append(f"line {line}: {name} (above the index)")
        elif parts[1] not in FEATURES[: FEATURES.index(here)]:
            bad.append(f"line {line}: {name} (not below {here})")
    assert not bad, f"{path.relative_to(SRC)} imports upward:\n" + "\n".join(bad)


def test_the_checker_sees_imports_inside_functions() -> None:
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..home import Ledger\n"
        "from .schema import X\nfrom trajledger.verify.kinds import KINDS\n"
        "def f():\n    from ..artifacts import batch_files\n"
    )
    found = [name for _line, name in imports(source, ("ledger", "index"))]
    assert found == ["typing", "ledger.index.schema", "verify.kinds", "ledger.artifacts"]
