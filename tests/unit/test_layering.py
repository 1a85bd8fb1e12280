"""The layers of DESIGN §1, enforced on the source.

- The packages are ``trajledger.verify``, ``trajledger.ledger`` and ``trajledger.runner``: real
  directories under ``trajledger/``, no symlink anywhere in the repository.
- ``verify/`` imports the standard library, ``cryptography`` and itself, itself only by relative
  imports (a copy of ``verify/`` runs on its own as ``verify``); ``zstandard`` only in a module
  that reads bundles (its name contains ``bundle``); ``sigstore`` only lazily (inside a function)
  and in one adapter module at most. Never ``ledger`` or ``runner``.
- ``ledger/`` never imports ``runner``.
- No module imports another package's private module (a name starting with ``_``): what a
  package offers the others is its public modules.
- Every module stands on one floor (`FLOORS`: the house from the ground up, ledger/'s floor
  order written down there and in docs/ARCHITECTURE.md); no import that runs points up a floor,
  and no modules import each other in a circle: function-level imports count, and so do imports
  under ``if TYPE_CHECKING:`` (types only: a module that names another's type depends on it,
  as ``farm-studio look`` draws it), except a package's ``__init__`` (its face: it names, for
  type checkers, what it hands on lazily).
- Start-up modules (``runner/cli.py``, ``ledger/cli.py``, ``ledger/clikit.py``) and everything they
  import at module level load no heavy package; checked statically on the import graph and by
  importing ``runner.cli`` in a fresh interpreter.
- ``verify/`` copied alone into a new venv holding only ``cryptography`` imports and verifies a
  signed tree (slow: it installs cryptography from PyPI or pip's cache).
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import testkit

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("verify", "ledger", "runner")  # trajledger/<name>, installed as trajledger.<name>
TOP = "trajledger"
SRC = REPO / TOP
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}
HEAVY = frozenset(
    {"pyarrow", "lancedb", "gymnasium", "sigstore", "pydantic", "numpy", "pandas", "polars",
     "torch"}
)
STARTUP = ("trajledger.runner.cli", "trajledger.ledger.cli", "trajledger.ledger.clikit")


@dataclass(frozen=True)
class Import:
    """One import in a module: the absolute module name it loads and where it is."""

    module: str  # absolute dotted name ("" when a relative import escapes the top package)
    file: str
    line: int
    top_level: bool  # runs when the module is imported (not inside a def or TYPE_CHECKING)
    relative: bool = False  # written as a relative import (``from .x import y``)
    type_only: bool = False  # under ``if TYPE_CHECKING:``: types only, never run

    @property
    def root(self) -> str:
        return self.module.split(".")[0]

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.module or '<relative import above the package>'}"


def module_name(path: Path) -> str:
    """The installed name of a file: ``trajledger/verify/x.py`` is ``trajledger.verify.x``."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_dir(path: Path) -> str:
    """``verify``, ``ledger`` or ``runner`` for a file of that package; else ``""``."""
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 and parts[0] in PACKAGES else ""


def package_of(module: str) -> str:
    """``verify``, ``ledger`` or ``runner`` for a module under ``trajledger``; else ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == TOP and parts[1] in PACKAGES else ""


def imports_of(source: str, module: str, file: str, *, is_package: bool = False) -> list[Import]:
    """Every import in ``source``, resolved to absolute names.

    Also counts ``importlib.import_module("x")`` and ``__import__("x")`` with a literal name.
    """
    package = module if is_package else module.rpartition(".")[0]
    found: list[Import] = []

    def resolve(level: int, name: str | None) -> str:
        if level == 0:
            return name or ""
        base = package.split(".")
        if level - 1 >= len(base):
            return ""
        base = base[: len(base) - (level - 1)]
        return ".".join(base + ([name] if name else []))

    def visit(node: ast.AST, top: bool, types: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            top = False
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child, top, types)
            for child in node.body:
                visit(child, False, True)
            return
        if isinstance(node, ast.Import):
            found.extend(Import(a.name, file, node.lineno, top, type_only=types)
                         for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = resolve(node.level, node.module)
            rel = node.level > 0
            found.append(Import(base, file, node.lineno, top, rel, types))
            if base:
                # ``from pkg import name`` may load the submodule pkg.name.
                found.extend(Import(f"{base}.{a.name}", file, node.lineno, top, rel, types)
                             for a in node.names if a.name != "*")
        elif isinstance(node, ast.Call) and _literal_import_call(node):
            found.append(Import(node.args[0].value, file, node.lineno, top,  # type: ignore[attr-defined]
                                type_only=types))
        for child in ast.iter_child_nodes(node):
            visit(child, top, types)

    visit(ast.parse(source, file), True, False)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _literal_import_call(node: ast.Call) -> bool:
    f = node.func
    named = (isinstance(f, ast.Name) and f.id == "__import__") or (
        isinstance(f, ast.Attribute) and f.attr == "import_module"
    )
    return named and bool(node.args) and isinstance(node.args[0], ast.Constant) and isinstance(
        node.args[0].value, str
    )


def project_files() -> Iterator[Path]:
    """Every module of the product: everything under ``trajledger/``."""
    yield from sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def all_imports(path: Path) -> list[Import]:
    """`imports_of` a file of the product, parsed once per session (per xdist worker): the
    tests below read the same files, and each parse of them all costs about a second of CPU."""
    return list(_parsed_imports(path))


@functools.cache
def _parsed_imports(path: Path) -> tuple[Import, ...]:
    return tuple(imports_of(path.read_text("utf-8"), module_name(path),
                            str(path.relative_to(REPO)), is_package=path.name == "__init__.py"))


# -- the rules, as functions the self-tests below can feed -----------------------------------------


def verify_violations(imports: list[Import], file: str) -> list[str]:
    """Imports a ``verify/`` module may not make."""
    bad = []
    for imp in imports:
        root = imp.root
        if root in STDLIB or root == "cryptography":
            continue
        if imp.relative and package_of(imp.module) == "verify":
            continue  # itself, relatively: works installed and as a standalone copy
        if root == "zstandard" and "bundle" in Path(file).stem:
            continue
        if root == "sigstore" and not imp.top_level:
            continue  # counted separately: one lazy adapter at most
        bad.append(str(imp))
    return bad


def ledger_violations(imports: list[Import]) -> list[str]:
    return [str(i) for i in imports if i.module == "" or package_of(i.module) == "runner"
            or i.module.startswith(f"{TOP}.integrations")
            or i.root in PACKAGES]  # bare ``ledger``/``runner`` is another PyPI project


def test_verify_imports_only_stdlib_and_cryptography() -> None:
    files = [p for p in project_files() if package_dir(p) == "verify"]
    assert len(files) >= 5, "verify/ modules not found"
    bad: list[str] = []
    sigstore_users: set[str] = set()
    for path in files:
        imports = all_imports(path)
        bad += verify_violations(imports, str(path))
        sigstore_users |= {i.file for i in imports if i.root == "sigstore"}
    assert bad == [], "verify/ may import only the stdlib and cryptography:\n" + "\n".join(bad)
    assert len(sigstore_users) <= 1, f"sigstore used by several verify modules: {sigstore_users}"


def test_ledger_never_imports_runner() -> None:
    bad: list[str] = []
    for path in project_files():
        if package_dir(path) == "ledger":
            bad += ledger_violations(all_imports(path))
    assert bad == [], "ledger/ imports runner/ (layers run runner -> ledger -> verify):\n" + (
        "\n".join(bad)
    )


def test_packages_name_each_other_under_trajledger() -> None:
    """``ledger``, ``runner`` and ``verify`` at the top are other PyPI projects: never imported."""
    bad = [
        str(imp)
        for path in project_files()
        for imp in all_imports(path)
        if imp.root in PACKAGES or imp.module == ""
    ]
    assert bad == [], "imports outside the trajledger package:\n" + "\n".join(bad)


def private_violations(module: str, imports: list[Import]) -> list[str]:
    """Imports of a private module (``_name``) of another package than ``module``'s."""
    bad = []
    for imp in imports:
        parts = imp.module.split(".")
        if parts[0] != TOP:
            continue
        for k, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                if _local_file(".".join(parts[: k + 1])) is None:
                    break  # a private name inside a module: the module's own business
                owner = ".".join(parts[:k])  # the package whose private module this is
                if not (module == owner or module.startswith(owner + ".")):
                    bad.append(f"{imp} (private to {owner})")
                break
    return bad


def test_no_module_imports_another_packages_private_module() -> None:
    bad: list[str] = []
    for path in project_files():
        bad += private_violations(module_name(path), all_imports(path))
    assert bad == [], "private modules imported from another package:\n" + "\n".join(bad)


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


# -- the floors: every import that runs points down ----------------------------------------------
#
# The house from the ground up (docs/ARCHITECTURE.md draws it). A module imports modules of its
# own floor or of floors below, never above; both count every import that runs, at module level
# or inside a function. An import under ``if TYPE_CHECKING:`` never runs (types for annotations
# only): it may point up a floor, but it may not close a circle (`typed_graph`): a module that
# stands below another and names its types takes them from a `typing.Protocol` of its own.
# ``fnmatch`` patterns on module names; every product module stands on exactly one floor.

FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("platform: the system and the process", ("trajledger._platform", "trajledger._signals")),
    ("verify: formats and verification", ("trajledger.verify", "trajledger.verify.*")),
    # ledger/, its floor order:
    ("ledger ground: what the handle is made of", (
        "trajledger.ledger", "trajledger.ledger.errors", "trajledger.ledger.config",
        "trajledger.ledger.fs", "trajledger.ledger.access", "trajledger.ledger.progress",
        "trajledger.ledger.suggestions", "trajledger.ledger.authority_hint",
        "trajledger.ledger.user_state", "trajledger.ledger.keys", "trajledger.ledger.key_pkcs8",
        "trajledger.ledger.remote",
        "trajledger.ledger.store", "trajledger.ledger.store_sink", "trajledger.ledger.files",
        "trajledger.ledger.signing",
        "trajledger.ledger.encode", "trajledger.ledger.bundle_write", "trajledger.ledger.hashing",
        "trajledger.ledger.rehash",
        "trajledger.ledger.sigstore_sign",
        "trajledger.ledger.validate_files", "trajledger.ledger.verify_files",
        "trajledger.ledger.key_forms",
        "trajledger.ledger.interop_verify", "trajledger.ledger.episode_vectors",
        "trajledger.ledger.episode_features", "trajledger.ledger.step_windows",
        "trajledger.ledger.image_windows", "trajledger.ledger.window_clocks",
        "trajledger.ledger.standing_columns", "trajledger.ledger.row_hashes",
        "trajledger.ledger.column_series", "trajledger.ledger.frame_stacks",
        "trajledger.ledger.step_columns",
        "trajledger.ledger.rollouts", "trajledger.ledger.rollouts.*",
        "trajledger.ledger.log", "trajledger.ledger.log.*",
        "trajledger.ledger.trust_rows", "trajledger.ledger.trust_index", "trajledger.ledger.names",
        "trajledger.ledger.trust_schema", "trajledger.ledger.trust_floor",
        "trajledger.ledger.trust_state",
        "trajledger.ledger.trust_handover", "trajledger.ledger.first_use",
        "trajledger.ledger.trust_pins",
    )),
    ("ledger handle: LedgerHome", ("trajledger.ledger.home",)),
    ("ledger services: they take the handle", (
        "trajledger.ledger.policy_state", "trajledger.ledger.record", "trajledger.ledger.catalog",
        "trajledger.ledger.sealing", "trajledger.ledger.same_second",
        "trajledger.ledger.evidence", "trajledger.ledger.batch_features",
        "trajledger.ledger.text_fingerprint", "trajledger.ledger.window_cache",
        "trajledger.ledger.record_windows",
        "trajledger.ledger.held_filter", "trajledger.ledger.held_windows",
        "trajledger.ledger.finding",
        "trajledger.ledger.contamination_matcher",
        "trajledger.ledger.contamination", "trajledger.ledger.cards",
        "trajledger.ledger.card_formats", "trajledger.ledger.split_trust",
        "trajledger.ledger.artifacts", "trajledger.ledger.keyless_check",
        "trajledger.ledger.status", "trajledger.ledger.suites", "trajledger.ledger.update_changes",
        "trajledger.ledger.update_reads", "trajledger.ledger.update_judge",
        "trajledger.ledger.update_compromises", "trajledger.ledger.identity_compromises",
        "trajledger.ledger.update_keys", "trajledger.ledger.relayed_keys",
        "trajledger.ledger.updates",
        "trajledger.ledger.own_records", "trajledger.ledger.first_contact",
        "trajledger.ledger.bundle_keys",
        "trajledger.ledger.exchange", "trajledger.ledger.fsck", "trajledger.ledger.index",
        "trajledger.ledger.index.*", "trajledger.ledger.show", "trajledger.ledger.serve",
        "trajledger.ledger.monitor", "trajledger.ledger.rollout_export",
        "trajledger.ledger.sigstore_export", "trajledger.ledger.model_signing_export",
    )),
    ("runner services: verify before they act", (
        "trajledger.runner", "trajledger.runner.admission", "trajledger.runner.buildinfo",
        "trajledger.runner.chat", "trajledger.runner.command", "trajledger.runner.evaluate",
        "trajledger.runner.lineage", "trajledger.runner.lineage_layout",
        "trajledger.runner.release", "trajledger.runner.revokers", "trajledger.runner.rollouts",
        "trajledger.runner.settled",
        "trajledger.runner.suite_contamination", "trajledger.runner.train",
        "trajledger.runner.trainers", "trajledger.runner.trainers.*",
        "trajledger.runner.training", "trajledger.runner.verification",
        "trajledger.runner.workdir", "trajledger.runner.written",
    )),
    ("the facade: trajledger.Ledger", ("trajledger", "trajledger.api")),
    ("integrations", ("trajledger.integrations", "trajledger.integrations.*")),
    ("commands: the command line over the facade", (
        "trajledger.ledger.clikit", "trajledger.ledger.cli", "trajledger.ledger.*_cli",
        "trajledger.runner.cli", "trajledger.runner.*_cli", "trajledger.runner.commands",
        "trajledger.runner.quickstart", "trajledger.__main__",
        "trajledger.runner.api",  # the deprecated alias of trajledger.Ledger (one release)
    )),
)

def floor_of(module: str) -> int | None:
    """The index in `FLOORS` of the floor ``module`` stands on; None when on none."""
    found = [i for i, (_, patterns) in enumerate(FLOORS)
             if any(fnmatch.fnmatchcase(module, p) for p in patterns)]
    assert len(found) <= 1, f"{module} stands on several floors: {found}"
    return found[0] if found else None


def running_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], Import]]:
    """Who imports whom among the product's modules, every import that runs (module level and
    inside functions; not those under TYPE_CHECKING), with one import for each arrow."""
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], Import] = {}
    for path in project_files():
        name = module_name(path)
        targets = graph.setdefault(name, set())
        for imp in all_imports(path):
            if (not imp.type_only and imp.root == TOP and imp.module != name
                    and _local_file(imp.module) is not None):
                targets.add(imp.module)
                where.setdefault((name, imp.module), imp)
    return graph, where


def climbs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The arrows ``(a, b)`` that run up a floor, or from or to a module on no floor."""
    bad = []
    for a, targets in sorted(graph.items()):
        fa = floor_of(a)
        for b in sorted(targets):
            fb = floor_of(b)
            if fa is None or fb is None or fb > fa:
                bad.append((a, b))
    return bad


def _floor_name(module: str) -> str:
    i = floor_of(module)
    return FLOORS[i][0] if i is not None else "no floor"


def test_every_module_stands_on_one_floor() -> None:
    graph, _ = running_graph()
    assert len(graph) > 100
    lost = sorted(m for m in graph if floor_of(m) is None)
    assert lost == [], f"modules on no floor (add each to FLOORS above): {lost}"


def test_no_import_runs_back_up() -> None:
    graph, where = running_graph()
    bad = [f"{where[a, b]}: {a} ({_floor_name(a)}) imports {b} ({_floor_name(b)})"
           for a, b in climbs(graph)]
    assert bad == [], "imports that run up a floor (FLOORS; function-level ones count):\n" + (
        "\n".join(bad))


def typed_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], Import]]:
    """`running_graph` and the imports under TYPE_CHECKING, except a package's ``__init__``'s
    (its face names, for type checkers, what its ``__getattr__`` hands on)."""
    graph, where = running_graph()
    for path in project_files():
        if path.name == "__init__.py":
            continue
        name = module_name(path)
        for imp in all_imports(path):
            if (imp.type_only and imp.root == TOP and imp.module != name
                    and _local_file(imp.module) is not None):
                graph[name].add(imp.module)
                where.setdefault((name, imp.module), imp)
    return graph, where


def test_no_import_cycles() -> None:
    """No circle: module-level, function-level and TYPE_CHECKING imports alike."""
    graph, where = typed_graph()
    cycles = import_cycles(graph)
    described = [" <-> ".join(c) + ": " + "; ".join(
        str(where[a, b]) for a in c for b in sorted(graph[a] & set(c))) for c in cycles]
    assert cycles == [], "import cycles:\n" + "\n".join(described)


def test_checker_catches_imports_running_up() -> None:
    """A function-level import up a floor is caught; the same import for types only is not."""
    up = {"trajledger.ledger.home": {"trajledger.ledger.artifacts", "trajledger.ledger.keys"},
          "trajledger.ledger.keys": {"trajledger.runner.train"},
          "trajledger.ledger.nowhere": set()}
    assert climbs(up) == [("trajledger.ledger.home", "trajledger.ledger.artifacts"),
                          ("trajledger.ledger.keys", "trajledger.runner.train")]
    assert floor_of("trajledger.ledger.nowhere") is None
    assert floor_of("trajledger.ledger.log.writer") == floor_of("trajledger.ledger.keys")
    assert floor_of("trajledger.ledger.home") < floor_of("trajledger.ledger.artifacts")  # type: ignore[operator]
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from .artifacts import BatchResult
        def sweep():
            from .fsck import sweep_leftovers
        """
    )
    found = {(i.module, i.top_level, i.type_only)
             for i in imports_of(source, "trajledger.ledger.home", "ledger/home.py")}
    assert ("trajledger.ledger.artifacts", False, True) in found
    assert ("trajledger.ledger.fsck", False, False) in found


def test_checkers_catch_private_imports_and_cycles() -> None:
    imp = Import("trajledger.verify._jcs", "ledger/x.py", 3, True)
    assert _local_file(imp.module) is not None
    assert private_violations("trajledger.ledger.x", [imp]) == [
        "ledger/x.py:3: trajledger.verify._jcs (private to trajledger.verify)"
    ]
    assert private_violations("trajledger.verify.bundle", [imp]) == []
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def _local_file(module: str) -> Path | None:
    parts = module.split(".")
    if parts[0] != TOP:
        return None
    base = REPO.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def startup_closure(roots: tuple[str, ...]) -> dict[str, list[str]]:
    """Every module loaded at import time from ``roots``, with the chain that loads it."""
    chains: dict[str, list[str]] = {}
    todo = [(r, [r]) for r in roots]
    while todo:
        module, chain = todo.pop()
        if module in chains:
            continue
        chains[module] = chain
        parts = module.split(".")
        parents = [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += [(p, [*chain, p]) for p in parents if p not in chains]
        path = _local_file(module)
        if path is None:
            continue
        for imp in all_imports(path):
            if imp.top_level and imp.module and imp.module not in chains:
                if imp.root == TOP and _local_file(imp.module) is None:
                    continue  # ``from pkg import name`` where name is not a module
                todo.append((imp.module, [*chain, f"{imp.module} ({imp.file}:{imp.line})"]))
    return chains


def test_startup_modules_import_nothing_heavy_at_top_level() -> None:
    chains = startup_closure(STARTUP)
    assert "trajledger.ledger.clikit" in chains and "click" in chains
    heavy = {m: " -> ".join(c) for m, c in chains.items() if m.split(".")[0] in HEAVY}
    assert heavy == {}, "heavy modules imported at start-up:\n" + "\n".join(heavy.values())


def test_importing_the_cli_loads_nothing_heavy() -> None:
    code = "import json, sys, trajledger.runner.cli; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True, timeout=60)
    loaded = {m.split(".")[0] for m in json.loads(out.stdout)}
    assert "click" in loaded and "trajledger" in loaded
    assert loaded & HEAVY == set()


# -- the checker itself must catch what it is for --------------------------------------------------


@pytest.mark.parametrize(
    ("source", "module", "violation"),
    [
        ("import numpy", "trajledger.verify.x", "numpy"),
        ("from trajledger.ledger.keys import KeyStore", "trajledger.verify.x",
         "trajledger.ledger.keys"),
        ("from ..runner import cli", "trajledger.verify.x", "trajledger.runner"),
        ("from ... import x", "trajledger.verify.x", ""),  # escapes the trajledger package
        ("from trajledger.verify.errors import FormatError", "trajledger.verify.x",
         "trajledger.verify.errors"),  # absolute: breaks the standalone copy
        ("import verify.errors", "trajledger.verify.x", "verify.errors"),
        ("import pydantic.main", "trajledger.verify.x", "pydantic.main"),
        ("import importlib\nimportlib.import_module('pyarrow')", "trajledger.verify.x", "pyarrow"),
        ("import zstandard", "trajledger.verify.digest", "zstandard"),
        ("import sigstore", "trajledger.verify.sig", "sigstore"),
    ],
)
def test_checker_catches_verify_violations(source: str, module: str, violation: str) -> None:
    file = f"{module.removeprefix('trajledger.').replace('.', '/')}.py"
    bad = verify_violations(imports_of(source, module, file), file)
    assert any(b.endswith(f": {violation or '<relative import above the package>'}") for b in bad)


@pytest.mark.parametrize(
    ("source", "file"),
    [
        ("from . import dsse\nfrom .errors import FormatError\nimport hashlib", "verify/x.py"),
        ("from cryptography.hazmat.primitives import hashes", "verify/x.py"),
        ("import zstandard", "verify/bundle.py"),
        ("def f():\n    import sigstore\n", "verify/sigstore_adapter.py"),
    ],
)
def test_checker_allows_what_verify_may_use(source: str, file: str) -> None:
    assert verify_violations(imports_of(source, module_name(SRC / file), file), file) == []


def test_checker_separates_lazy_and_type_checking_imports() -> None:
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING
        import click
        if TYPE_CHECKING:
            import pyarrow
        def command():
            import lancedb
        """
    )
    top = {i.module for i in imports_of(source, "trajledger.ledger.cli", "ledger/cli.py")
           if i.top_level}
    assert top == {"typing", "typing.TYPE_CHECKING", "click"}
    for bad in ("from trajledger.runner import cli", "from ..runner import cli",
                "from ....x import y", "from runner import cli", "import verify"):
        assert ledger_violations(imports_of(bad, "trajledger.ledger.x", "f")) != [], bad
    ok = "from trajledger.verify import errors\nfrom . import store"
    assert ledger_violations(imports_of(ok, "trajledger.ledger.x", "f")) == []


# -- verify/ alone, in a venv with only cryptography ----------------------------------------------

_THIRD_PARTY_CHECK = """
import importlib, importlib.util, json, pathlib, sys
present = [m for m in ("trajledger", "ledger", "runner", "click", "pyarrow", "pydantic",
                       "rfc8785")
           if importlib.util.find_spec(m) is not None]
assert not present, f"not a clean venv: {present}"
import verify, verify.dsse, verify.statement, verify.manifest, verify.tree
for m in sys.argv[1].split(","):
    importlib.import_module(m)
from verify import predicates
from verify.dsse import Envelope
from verify.keys import PublicKey
from verify.tree import diff_tree, manifest_from_statement
from verify.statement import verify_statement
work = pathlib.Path(sys.argv[2])
key = PublicKey.from_pem((work / "key.pub").read_bytes())
envelope = Envelope.from_bytes((work / "envelope.json").read_bytes())
verified = verify_statement(envelope, [key], allowed_predicate_types={predicates.FILES})
manifest = manifest_from_statement(verified.statement)
data = work / "data"
files = {p.relative_to(data).as_posix(): p for p in data.rglob("*") if p.is_file()}
diff = diff_tree(manifest, files)
assert diff.ok, diff.problems()
(data / "a.txt").write_text("changed")
assert not diff_tree(manifest, files).ok
print("verified", len(manifest.files), "files")
"""

_NETWORK_TROUBLE = ("Could not find a version", "No matching distribution", "NewConnectionError",
                    "Failed to establish a new connection", "Temporary failure in name resolution",
                    "Network is unreachable", "ProxyError", "ConnectTimeout", "ReadTimeout")


@pytest.mark.slow
def test_verify_alone_in_a_venv_with_only_cryptography(tmp_path: Path) -> None:
    from trajledger.ledger.encode import envelope_bytes
    from trajledger.ledger.files import collect_files, manifest_for
    from trajledger.ledger.keys import Signer
    from trajledger.ledger.signing import files_predicate, sign_statement

    # A tree signed by the write side, to be checked by the copied verify/ alone.
    work = tmp_path / "work"
    (work / "data" / "sub").mkdir(parents=True)
    (work / "data" / "a.txt").write_text("a")
    (work / "data" / "sub" / "b.bin").write_bytes(os.urandom(3000))
    signer = Signer.generate("t", "ecdsa-p256")
    manifest = manifest_for(collect_files([work / "data"]))
    ptype, predicate = files_predicate(manifest)
    envelope = sign_statement([("data", manifest.digest)], ptype, predicate, [signer])
    (work / "envelope.json").write_bytes(envelope_bytes(envelope))
    (work / "key.pub").write_bytes(signer.public.to_pem())

    venv_dir = tmp_path / "venv"
    # Without a pip of its own (installing one costs seconds): this environment's pip installs
    # into it and lists it (``--python``).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv_dir)], check=True,
                   timeout=120)
    python = venv_dir / "bin" / "python"
    venv_pip = [sys.executable, "-m", "pip", "--python", str(python)]
    crypto = f"cryptography=={importlib.metadata.version('cryptography')}"
    pip = subprocess.run(
        [*venv_pip, "install", "--disable-pip-version-check", "--no-compile", "-q", crypto],
        capture_output=True, text=True, timeout=600,
    )
    if pip.returncode != 0:
        if any(s in pip.stdout + pip.stderr for s in _NETWORK_TROUBLE):
            pytest.skip(f"pip cannot install {crypto} (no network?): {pip.stderr.strip()[-300:]}")
        pytest.fail(f"pip install {crypto} failed:\n{pip.stdout}\n{pip.stderr}")
    installed = {name.lower() for name in testkit.installed_distributions(python)}
    assert installed <= {"cryptography", "cffi", "pycparser", "pip", "setuptools", "wheel"}

    src = tmp_path / "src"
    shutil.copytree(SRC / "verify", src / "verify", ignore=shutil.ignore_patterns("__pycache__"))
    modules = sorted(module_name(SRC / p.relative_to(src)).removeprefix(f"{TOP}.")
                     for p in (src / "verify").rglob("*.py"))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    run = subprocess.run(
        [str(python), "-s", "-c", _THIRD_PARTY_CHECK, ",".join(modules), str(work)],
        cwd=src, env=env, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "verified 2 files\n"


# -- packaging: one top-level name, real directories, every install mode ---------------------------


def test_no_symlink_is_tracked() -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True,
                            check=True, timeout=60).stdout.splitlines()
    links = [line.split("\t", 1)[1] for line in listed if line.startswith("120000 ")]
    assert links == [], f"symlinks in the repository: {links}"


def test_no_second_copy_from_the_repository_root() -> None:
    """Run from the root, ``ledger``, ``runner`` and ``verify`` are not importable top-level
    names: each module loads once, as ``trajledger.<package>.<module>``."""
    code = ("import importlib.util, sys; sys.path.insert(0, '.'); "
            "print([m for m in ('ledger', 'runner', 'verify') "
            "if importlib.util.find_spec(m) is not None])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def _clone_without_symlinks(tmp_path: Path) -> Path:
    """A clone of HEAD as a system without symlinks (Windows by default) checks it out."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "-c", "core.symlinks=false", "clone", "-q", "--no-hardlinks",
                    str(REPO), str(clone)], check=True, capture_output=True, timeout=300)
    return clone


def _tracked_modules(clone: Path) -> set[str]:
    listed = subprocess.run(["git", "ls-files", "trajledger"], cwd=clone, capture_output=True,
                            text=True, check=True, timeout=60).stdout.split()
    return {p for p in listed if p.endswith((".py", "py.typed"))}


@pytest.mark.slow
def test_wheel_and_sdist_from_a_clone_without_symlinks(tmp_path: Path) -> None:
    import tarfile
    import zipfile

    clone = _clone_without_symlinks(tmp_path)
    modules = _tracked_modules(clone)
    assert len(modules) > 100
    for package in PACKAGES:
        assert f"trajledger/{package}/__init__.py" in modules
        assert f"trajledger/{package}/py.typed" in modules
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-q", "-w", str(tmp_path / "dist"), str(clone)],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("trajledger-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"trajledger"}, f"the wheel installs other top-level names: {sorted(top)}"
    missing = sorted(modules - names)
    assert missing == [], f"modules of the repository missing from the wheel: {missing}"
    extra = sorted(n for n in names - modules if n.startswith("trajledger/"))
    assert extra == [], f"files in the wheel that the repository does not track: {extra}"

    sdist_dir = tmp_path / "sdist"
    made = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
         "print(b.build_sdist(sys.argv[1]))", str(sdist_dir)],
        cwd=clone, capture_output=True, text=True, timeout=300,
    )
    assert made.returncode == 0, made.stderr
    with tarfile.open(sdist_dir / made.stdout.strip().splitlines()[-1]) as tar:
        members = tar.getmembers()
    assert [m.name for m in members if m.issym() or m.islnk()] == []
    in_sdist = {m.name.split("/", 1)[1] for m in members if "/" in m.name}
    missing = sorted(modules - in_sdist)
    assert missing == [], f"modules missing from the sdist: {missing}"


@pytest.mark.slow
def test_editable_install_imports_from_outside_the_repository(tmp_path: Path) -> None:
    """``pip install -e`` (setuptools' editable wheel) of a clone without symlinks: from another
    directory every package resolves to the clone's files, and the command runs."""
    import site
    import sysconfig

    clone = _clone_without_symlinks(tmp_path)
    venv_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv_dir)], check=True,
                   timeout=120)
    python = venv_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # This environment's packages (pip, setuptools, click, cryptography, ...) after the new
    # venv's own: a path line, so this environment's own .pth files (its editable install of
    # the working tree) are not processed.
    here = [p for p in {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
            if Path(p).is_dir()]
    Path(purelib, "outer.pth").write_text("\n".join(here) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the clone, not a tree
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q",
         "--disable-pip-version-check", "-e", str(clone)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )
    assert install.returncode == 0, install.stderr
    code = ("import json, trajledger, trajledger.verify.errors, trajledger.ledger.errors, "
            "trajledger.runner; print(json.dumps([m.__file__ for m in (trajledger, "
            "trajledger.verify.errors, trajledger.ledger.errors, trajledger.runner)]))")
    # Without the caller's PYTHONPATH (which may name a working tree): the clone must be found.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(python), "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    for file in json.loads(out.stdout):
        assert Path(file).resolve().is_relative_to(clone.resolve()), file
    version = subprocess.run([str(python), "-m", "trajledger", "--version"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120, env=env)
    assert version.returncode == 0, version.stderr
    assert "trajledger" in version.stdout
