"""Check that the README's first command installed only what running trajledger needs.

Run between the README's two commands: every distribution named by the ``test`` extra that the
runtime dependencies do not themselves need (directly or through their own requirements) must
be absent. Exit 1 naming them otherwise. Uses only the standard library.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

VENV_OWN = {"pip", "setuptools", "wheel"}  # a new venv of Python 3.11 brings them itself
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> str:
    m = NAME.match(spec)
    if m is None:
        raise SystemExit(f"cannot read requirement {spec!r}")
    return canonical(m.group(1))


def runtime_closure(root: str) -> set[str]:
    """Every installed distribution that ``root`` needs without extras, transitively."""
    seen: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        todo += [requirement_name(r) for r in requires if "extra==" not in r.replace(" ", "")]
    return seen


def main() -> int:
    project = tomllib.loads(Path(__file__).resolve().parents[1].joinpath("pyproject.toml")
                            .read_text("utf-8"))["project"]
    test_only = {requirement_name(r) for r in project["optional-dependencies"]["test"]}
    test_only -= runtime_closure("trajledger")
    test_only -= VENV_OWN
    installed = sorted(n for n in test_only if _installed(n))
    if installed:
        print(f"FAIL: the first command installed test-only packages: {', '.join(installed)}",
              file=sys.stderr)
        return 1
    print(f"OK: none of the {len(test_only)} test-only packages is installed", file=sys.stderr)
    return 0


def _installed(name: str) -> bool:
    try:
        md.distribution(name)
    except md.PackageNotFoundError:
        return False
    return True


if __name__ == "__main__":
    raise SystemExit(main())
