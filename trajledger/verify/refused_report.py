"""The report of a bundle refused before its lineage could be read: ``python -m verify --json``.

Scope: `failed_bundle`, the JSON document `verify.__main__` prints under ``--json`` when the
bundle itself is refused (a member changed, the file cut short: exit 1): a report
(schemas/report.v1.md) of the ``bundle`` node alone, failing, so a script that parses each
bundle's report reads it (out44 finding 6). Loaded only then.
"""

from __future__ import annotations

from .nodes import Node
from .report import Report
from .report_json import dumps

__all__ = ["failed_bundle"]


def failed_bundle(name: str, message: str) -> str:
    """The document for the bundle file ``name`` refused with ``message`` (a check a line)."""
    node = Node("bundle", "bundle", name=f"bundle {name}")
    for line in message.split("\n"):
        node.fail("bundle", line)
    return dumps(Report("bundle", ["bundle"], {"bundle": node}, []).to_json())
