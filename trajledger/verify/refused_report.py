"""The report of a bundle refused before its lineage could be read: ``python -m verify --json``.

Scope: `refused` and `failed_bundle`: the report, and its JSON document, that
`verify.__main__` and ``trajledger verify BUNDLE`` print under ``--json`` when the bundle
itself is refused (a member changed, the file cut short: exit 1): a report (schemas/
report.v1.md) of the ``bundle`` node alone, failing, so a script that parses each bundle's
report reads it (out44 finding 6). Loaded only then.
"""

from __future__ import annotations

from .nodes import Node
from .report import Report
from .report_json import dumps

__all__ = ["failed_bundle", "refused"]


def refused(name: str, message: str) -> Report:
    """The report of the bundle file ``name`` refused with ``message`` (a check a line);
    ``trajledger verify BUNDLE --json`` prints it too."""
    node = Node("bundle", "bundle", name=f"bundle {name}")
    for line in message.split("\n"):
        node.fail("bundle", line)
    return Report("bundle", ["bundle"], {"bundle": node}, [])


def failed_bundle(name: str, message: str) -> str:
    """`refused`'s document, as ``python -m verify --json`` prints it."""
    return dumps(refused(name, message).to_json())
