"""What an append is given: the entries (`EntrySpec`), the one-record rule (`OneRecord`), the
log's key (`SignerSource`, `note_key_bytes`).

Scope: the values a caller hands to `Log` and their checks (an `EntrySpec` is checked with the
entry parser's rules when it is made). Non-scope: appending them (``writer``).
Spec: schemas/log-entry.v1.md; c2sp.org/signed-note.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trajledger.verify.errors import FormatError
from trajledger.verify.log_entry import GENESIS_PREV, LogEntry

from ..errors import LogError
from ..keys import Signer

__all__ = ["EntrySpec", "OneRecord", "SignerSource", "note_key_bytes"]

SignerSource = Signer | Callable[[], Signer] | None
"""The log's key, or a function returning it (called on the first append), or None (reader)."""


@dataclass(frozen=True)
class EntrySpec:
    """What to append: everything of an entry but ``prev``, which the log fills in.

    Attributes:
        kind: one of `KINDS`.
        subject: ``sha256:<hex>`` of the artifact.
        envelope: ``sha256:<hex>`` of the envelope's bytes; appending is idempotent by it.
        signers: keyids of the envelope's signatures (sorted and deduplicated here).
        time: ``YYYY-MM-DDTHH:MM:SSZ``; None for the time of the append.
    """

    kind: str
    subject: str
    envelope: str
    signers: tuple[str, ...]
    time: str | None = None

    def __post_init__(self) -> None:
        """Normalise the signers and check every field with the entry parser's rules.

        Raises:
            FormatError: a field the entry format does not allow.
        """
        object.__setattr__(self, "signers", tuple(sorted(set(self.signers))))
        self.entry(GENESIS_PREV, self.time or "1970-01-01T00:00:00Z")

    def entry(self, prev: str, now: str) -> LogEntry:
        """Build the entry with ``prev`` (and ``now`` unless `time` is set)."""
        return LogEntry(
            kind=self.kind,
            subject=self.subject,
            envelope=self.envelope,
            signers=self.signers,
            time=self.time or now,
            prev=prev,
        )


@dataclass(frozen=True)
class OneRecord:
    """The rule that keeps one record per digest (`Log.one_record`), run under the log's lock.

    Attributes:
        kinds: the entry kinds of which a log holds one record per subject (artifacts).
        judge: given an entry of such a kind to append and ``(index, envelope)`` of the entries
            of its kind about its subject already in the log (or earlier in the same append):
            the index of the record it repeats (nothing is appended), None to append it, or an
            exception to refuse it.
    """

    kinds: frozenset[str]
    judge: Callable[[EntrySpec, Sequence[tuple[int, str]]], int | None]


def note_key_bytes(signer: Signer, role: str) -> bytes:
    """The raw Ed25519 public key of a signed-note key (the log's, a witness's).

    Raises:
        LogError: the key is not Ed25519 (``role`` names it in the message).
    """
    try:
        return signer.public.raw_ed25519()
    except FormatError as e:
        algorithm = signer.public.algorithm
        raise LogError(f"{role} key {signer.name}: is {algorithm}, want ed25519") from e
