"""No private reach (issue 20 item 6), checked on the source of ``trajledger/``.

- No module imports a private module of another project (a dotted part ``_name``, such as
  ``sigstore._internal``): those change between releases without notice. The only exception is
  ``_typeshed``, which exists for type checkers only (imported under ``TYPE_CHECKING``).
- No module imports another module's private name (``from .note import _helper``): a helper
  two modules share is public in the one that defines it (in its ``__all__``).

(Private *modules* of trajledger's own packages are the business of tests/unit/test_layering.py.)
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "trajledger"
TYPING_ONLY = frozenset({"_typeshed"})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_module(file: str, level: int, module: str | None, name: str) -> bool:
    """Whether ``from <level dots><module> import <name>`` in ``file`` names a module of ours
    (a private module of trajledger's own packages: test_layering's business, not a name)."""
    if level:
        base = (SRC.parent / file).parent
        for _ in range(level - 1):
            base = base.parent
    elif module and module.split(".")[0] == "trajledger":
        base = SRC.parent
    else:
        return False
    target = base.joinpath(*(module.split(".") if module else []), name)
    return target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()


def violations(source: str, file: str) -> list[str]:
    """The private reaches in one module's source (``file``: its path from the repository)."""
    bad: list[str] = []
    for node in ast.walk(ast.parse(source, file)):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""] if node.level == 0 else []
            bad += [
                f"{file}:{node.lineno}: imports the private name {a.name} of "
                f"{'.' * node.level}{node.module or ''}"
                for a in node.names
                if _private(a.name) and not _is_module(file, node.level, node.module, a.name)
            ]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] == "trajledger" or parts[0] in TYPING_ONLY:
                continue
            if any(_private(p) for p in parts):
                bad.append(f"{file}:{node.lineno}: imports {module}, private to {parts[0]}")
    return bad


def test_no_private_module_of_another_project_and_no_private_name_of_another_module() -> None:
    files = sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)
    assert len(files) > 50
    bad: list[str] = []
    for path in files:
        bad += violations(path.read_text("utf-8"), str(path.relative_to(SRC.parent)))
    assert bad == [], "private reach:\n" + "\n".join(bad)


def test_the_checker_catches_both_kinds() -> None:
    source = (
        "from sigstore._internal.rekor import RekorClientError\n"
        "import sigstore._internal.fulcio.client\n"
        "from .note import Note, _b64decode_strict\n"
        "from .merkle import node_hash as _hash_children\n"  # a public name, aliased: fine
        "from trajledger.verify import _jcs\n"  # trajledger's own modules: test_layering's
        "from _typeshed import WriteableBuffer\n"
        "import sigstore.errors\n"
    )
    file = "trajledger/verify/x.py"
    assert violations(source, file) == [
        f"{file}:1: imports sigstore._internal.rekor, private to sigstore",
        f"{file}:2: imports sigstore._internal.fulcio.client, private to sigstore",
        f"{file}:3: imports the private name _b64decode_strict of .note",
    ]
