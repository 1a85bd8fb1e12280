"""``--expect DIGEST``: the bundle must be the evidence of the artifact the auditor was given.

Scope: `expected_digest`, the option's value read as a full digest (``sha256:HEX``, or the 64
hex characters alone, in either case) or refused saying what to give (a usage error, exit 2);
`other_subject`, the one ``FAIL:`` line of a bundle whose subject (the checkpoint or dataset
it is the evidence of) is another artifact: a bundle of another checkpoint verifies as well,
being true about what it holds (docs/SECURITY.md, aud34 finding 1); none for a release of the
checkpoint expected, whose bundle holds that checkpoint's evidence whole (out54 finding 2).
Loaded only with ``--expect`` (off the path that verifies a bundle,
tests/unit/verify/test_core_size.py), by ``python -m verify`` and ``trajledger verify`` alike.
Non-scope: verifying the bundle (``verify.bundle``); the ``OK:`` line, unchanged when the
subject is the one expected.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from .digest import DIGEST_PREFIX, HEX64
from .nodes import short

if TYPE_CHECKING:
    from .report import Report

__all__ = ["expected_digest", "other_subject"]


def expected_digest(value: str, refuse: Callable[[str], NoReturn]) -> str:
    """``value`` as ``sha256:<64 lowercase hex>``; else ``refuse`` (a usage error: argparse's
    ``error``, or one raising click's) with a line saying what to give."""
    text = value.strip().lower()
    hexpart = text.removeprefix(DIGEST_PREFIX)
    if HEX64.fullmatch(hexpart):
        return DIGEST_PREFIX + hexpart
    if text.startswith(DIGEST_PREFIX) and 0 < len(hexpart) < 64 and HEX64.fullmatch(
            hexpart.ljust(64, "0")):
        why = f"a digest of {len(hexpart)} hex digits is a prefix, which another artifact may share"
    else:
        why = "not a digest"
    refuse(f"--expect {value!r}: {why}: give the full sha256:<64 hex> of the "
                     "checkpoint or dataset you were given")


def other_subject(report: Report, expected: str, bundle: bool = True) -> str:
    """The failure of a bundle whose subject is not ``expected``: what it is the evidence of,
    in full, and what to ask for; not ``bundle``, of a name looked up in a ledger (``trajledger
    verify REF --expect``). "" when the subject is a release of ``expected``: its evidence
    verifies that checkpoint's whole lineage too, and the OK line names the release (out54)."""
    node = report.nodes.get(report.subject) if report.subject.startswith(DIGEST_PREFIX) else None
    if node is not None and node.kind == "release" and any(
            e.src == node.id and e.role == "checkpoint" and e.dst == expected
            for e in report.edges):
        return ""
    what = node.label.replace(short(node.id), node.id) if node else "no checkpoint or dataset"
    if not bundle:
        return (f"it names {what}, not {expected}, the one expected (--expect): check the name "
                "and version given")
    return (f"the bundle is the evidence of {what}, not of {expected}, the one expected "
            "(--expect): ask its sender for the bundle of the artifact you were given")
