"""Why a bundle lacks what its verification needed: the exporter's own policy says so.

Scope: `explain_left_out`: a bundle's record that verifies under the verifier's policy but
whose manifest or data blob the bundle lacks, because the exporter's policy (the history of
trust-policy records the bundle carries, followed from its first) declares the key that signed
the record compromised: its export read nothing of it (the record failed there), so left it
out. The failing check then names the key, that policy and since when, not only "manifest …
is missing" (docs/SECURITY.md, rev18 "Left" and redo15 finding 3). Loaded only for a bundle
whose verification failed; it explains, and never changes what passes.
Non-scope: judging records (``verify.judge``), the verifier's own revocations
(``verify.key_roles.signed_by`` says those).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import ProvenanceError
from .log_entry import LogEntry
from .nodes import FAIL
from .policy_history import follow_history

if TYPE_CHECKING:
    from .report import Report

__all__ = ["explain_left_out"]


def explain_left_out(report: Report, entry_bytes: Callable[[int], bytes | None],
                     records: list[tuple[int, str, bytes]]) -> None:
    """Add the exporter's reason to each failed "… is missing" check of ``report`` whose
    record a key its policy declares compromised signed (``entry_bytes``: the bundle's log
    entry at an index; ``records``: its trust-policy records, as
    `verify.policy_history.follow_history` takes them)."""
    try:
        theirs, _notes = follow_history(None, records)
    except ProvenanceError:
        return  # a history that cannot be followed declares nothing
    if theirs is None or not theirs.revoked_keys:
        return
    for node in report.nodes.values():
        missing = [i for i, c in enumerate(node.checks)
                   if c.status == FAIL and c.detail.endswith(" is missing")]
        raw = entry_bytes(node.index) if missing and node.index is not None else None
        if raw is None or node.index is None:
            continue
        entry = LogEntry.from_bytes(raw)  # checked when the bundle was opened
        why = "; ".join(
            f"signed by key {rk.keyid[:12]}, which the exporter's policy {theirs.name!r} serial "
            f"{theirs.serial} declares {rk.describe()}"
            for rk in theirs.revoked_keys
            if rk.keyid in entry.signers and rk.covers(node.index, entry.time))
        for i in missing if why else ():
            node.checks[i] = dataclasses.replace(node.checks[i], detail=(
                f"{node.checks[i].detail}: the exporter left it out, its record (log index "
                f"{node.index}) {why}"))
