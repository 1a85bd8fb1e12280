"""The closed vocabulary of a log entry's encoding: its version and its kinds.

Scope: `ENTRY_VERSION` and `KINDS`, what `verify.log_entry` (the fast, canonical path) and
`verify.entry_fields` (the field checks of a writer, and why an entry is not canonical) both
read; ``verify.log_entry`` hands them on.
Spec: schemas/log-entry.v1.md.
"""

from __future__ import annotations

__all__ = ["ENTRY_VERSION", "KINDS"]

ENTRY_VERSION = 1
"""The ``v`` field of every entry trajledger reads and writes."""

KINDS = frozenset({
    "approval", "checkpoint", "dataset", "environment", "erasure", "evaluation", "evaluator",
    "files", "import", "model-signature", "refusal", "release", "revocation", "rollout-batch",
    "trust-policy", "unsealing",
})
"""Every entry kind: the encoding's closed set (schemas/log-entry.v1.schema.json); the kind
registry (`verify.kinds.KINDS`) describes each one, and only these (a test checks both)."""
