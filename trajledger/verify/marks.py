"""The records a lineage report may carry about its artifacts that are not nodes of it.

Scope: `Mark`, one such record (an approval, a revocation, an erasure, an evaluation of a
checkpoint...) as ``verify.impact.with_records`` finds and verifies it, and its line under a
node of the text report. Loaded only where a report carries them (``trajledger lineage``,
``impact``); ``python -m verify BUNDLE`` never does.
Non-scope: finding and verifying them (``verify.impact``); the report (``verify.report``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .nodes import INFO, OK, Status

__all__ = ["Mark"]


@dataclass(frozen=True)
class Mark:
    """A log record about artifacts of a report that is not a node of it: an approval, a
    revocation, an erasure, an evaluation of a checkpoint... (`verify.impact.with_records`).

    Attributes:
        index: its log index.
        kind: its entry kind.
        about: ``(node id, role)`` for each artifact of the report it is about: its subject
            (the role is the kind) or a dependency it names (the dependency's role).
        signers: the keyids its entry names.
        status: ``ok`` (it verifies as a record: signature, role, inclusion), ``info`` (intact,
            not signed under the policy: ignored) or ``fail`` (missing or damaged evidence).
        detail: what it says (its predicate's plain fields), or why it does not verify.
    """

    index: int
    kind: str
    about: tuple[tuple[str, str], ...]
    signers: tuple[str, ...]
    status: Status
    detail: str

    @property
    def label(self) -> str:
        """``approval at log index 12``."""
        return f"{self.kind} at log index {self.index}"

    def line(self, role: str) -> tuple[Status, str]:
        """Its line under a node of a text report it is about in ``role``: the status drawn
        (``info`` for one that verifies: a record, not a check) and the text."""
        by = f", signed by {', '.join(s[:12] for s in self.signers)}" if self.signers else ""
        via = "" if role == self.kind else f" (names it as {role})"
        return INFO if self.status == OK else self.status, f"{self.label}{via}{by} — {self.detail}"
