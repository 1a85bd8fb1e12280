"""The lineage verifier's floors inside ``verify/``, checked on the source (every import,
function-level and TYPE_CHECKING ones included):

- one way down: ``report`` < ``judge`` < ``blobs``, ``trusted_log`` < ``lineage`` < ``impact``;
  no module imports one above it;
- the judgement floors (``report``, ``judge``) do no I/O and start no threads: they import no
  module that reads files, sockets or processes, nor the evidence, index or walker modules;
- what ``python -m verify BUNDLE`` loads never imports the ledger-directory evidence or the
  impact views (they load only when used).
"""

from __future__ import annotations

import ast
from pathlib import Path

VERIFY = Path(__file__).resolve().parents[3] / "trajledger" / "verify"
ORDER = ("report", "judge", "blobs", "trusted_log", "lineage", "impact")
NO_IO = frozenset({"os", "io", "threading", "concurrent", "pathlib", "socket", "subprocess",
                   "tempfile", "shutil", "mmap", "evidence", "ledger_dir", "log_index",
                   "bundle", "blobs", "trusted_log", "lineage", "impact"})
CORE = ("__main__", "bundle", "lineage", "trusted_log", "blobs", "judge", "report", "evidence",
        "log_index", "policy", "logcheck")


def imports(module: str) -> set[str]:
    """The first component of every module ``verify/<module>.py`` imports: a sibling's name
    for a relative import, the top-level package for an absolute one."""
    tree = ast.parse((VERIFY / f"{module}.py").read_text("utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level and node.module:
                out.add(node.module.split(".")[0])
            elif node.level:
                out |= {a.name for a in node.names}
            elif node.module:
                out.add(node.module.split(".")[0])
    return out


def test_the_floors_import_one_way_down() -> None:
    for n, module in enumerate(ORDER):
        above = set(ORDER[n + 1:]) & imports(module)
        assert not above, f"verify/{module}.py imports {sorted(above)}, a floor above it"


def test_the_judgement_does_no_io() -> None:
    for module in ("report", "judge"):
        found = imports(module) & NO_IO
        assert not found, f"verify/{module}.py imports {sorted(found)}: it must judge bytes only"


def test_the_bundle_path_loads_no_ledger_directory_nor_views() -> None:
    for module in CORE:
        found = imports(module) & {"ledger_dir", "impact"}
        assert not found, f"verify/{module}.py imports {sorted(found)}"
