"""A key the policy does not hold, named once as the cause of the records it signed.

Scope: `key_node`, the report node of a key that alone signed records the policy does not
trust (a `verify.judge.RecordFailure` whose cause is ``key:<keyid>:<roles>``): its one failed
check says which roles its records wanted and how to trust it, and every record it signed
fails under it (`verify.report.Check.cause`). Pure, as `verify.judge`; loaded only when a
record's envelope names such a key.
Non-scope: judging the record (`verify.judge.judge_record` finds the key and its roles).
"""

from __future__ import annotations

from .judge import RecordFailure
from .policy import TrustPolicy
from .report import Node

__all__ = ["key_node"]


def key_node(failure: RecordFailure, policy: TrustPolicy) -> Node:
    """The node of a key the policy does not trust that signed ``failure`` (its ``key:``
    cause): every record it signed counts under it."""
    assert failure.cause is not None
    _key, keyid, roles = failure.cause.split(":", 2)
    node = Node(failure.cause, "key", name=f"key {keyid[:12]}")
    node.fail("trust", f"{failure.note}: records whose envelope names only this key do not "
              f"count under policy {policy.name!r} serial {policy.serial}; if you trust its "
              f"owner as {roles}, add the key {keyid} to the policy")
    return node
