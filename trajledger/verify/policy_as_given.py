"""The note on a policy the verifier holds that the log does not record (out36's Left, left37).

Loaded only then (`verify.policy_history.follow_history`): a policy given by hand. When the log
records another policy of the same name and serial, the file was changed after it was recorded
(a key replaced, a setting edited) or is another policy that took its name: the note says so,
with the record's log index, and what to do. The verdict is unchanged: the file given is the
verifier's trust root by design, and every decision is made under it (fail closed where its keys
are not the records' signers). The records' policies are read unverified, for their name and
serial only: the note names a record, it trusts nothing in it.
"""

from __future__ import annotations

from .dsse import Envelope
from .errors import ProvenanceError
from .policy import TrustPolicy
from .statement import Statement

__all__ = ["OTHER", "as_given"]

OTHER = "the log records another policy of that name and serial"
"""What a note says when the file given is not the policy the log records under its name and
serial (a command line shows that note as a ``WARNING:``)."""


def as_given(trusted: TrustPolicy, records: list[tuple[int, str, bytes]]) -> str:
    """The note on ``trusted``, which no record of ``records`` holds (by digest)."""
    head = f"policy {trusted.name!r} serial {trusted.serial}: used as given"
    for index, subject, env in records:
        try:
            body = Statement.from_bytes(Envelope.from_bytes(env).payload).predicate.get("policy")
            name, serial = body.get("name"), body.get("serial")  # type: ignore[union-attr]
        except (ProvenanceError, AttributeError, ValueError):
            continue
        if (name, serial) == (trusted.name, trusted.serial):
            return (f"{head}, but {OTHER}, at log index {index} ({subject}): the file was "
                    "changed after it was recorded, or is another policy of that name; compare "
                    "it with the recorded one ('trajledger policy show'); a changed policy needs "
                    "a higher serial, recorded with 'trajledger policy set'")
    return f"{head} (not recorded in the log)"
