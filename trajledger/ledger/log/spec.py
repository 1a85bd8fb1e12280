"""What an append is given: the entries (`EntrySpec`), the one-record rule (`OneRecord`,
`differences`), the log's key (`SignerSource`, `note_key_bytes`); and what it answers
(`Appended`).

Scope: the values a caller hands to `Log` and their checks (an `EntrySpec` is checked with the
entry parser's rules when it is made). Non-scope: appending them (``writer``).
Spec: schemas/log-entry.v1.md; c2sp.org/signed-note.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trajledger.verify.errors import FormatError
from trajledger.verify.log_entry import GENESIS_PREV, LogEntry
from trajledger.verify.statement import Statement

from ..encode import log_entry, relinked_entry
from ..errors import LogError
from ..keys import Signer

__all__ = ["Appended", "EntrySpec", "OneRecord", "SignerSource", "differences", "note_key_bytes"]

SignerSource = Signer | Callable[[], Signer] | None
"""The log's key, or a function returning it (called on the first append), or None (reader)."""


class Appended(list[int]):
    """What `Log.append` answers: each spec's log index, in the order of the specs (a list, so
    ``(index,) = log.append([spec])`` reads as before), and ``made``: for each spec, whether
    this append made its entry. False for an entry logged before (by this process, or another
    racing it under the log's lock), or made for an earlier spec of the same call.
    """

    made: tuple[bool, ...]

    def __init__(self, indices: Sequence[int], made: Sequence[bool]) -> None:
        if len(indices) != len(made):
            raise ValueError(f"{len(indices)} indices, {len(made)} flags")
        super().__init__(indices)
        self.made = tuple(made)

    @classmethod
    def since(cls, indices: Sequence[int], size: int) -> Appended:
        """The answer of an append to a log of ``size`` entries: made are the indices at or
        past it, each the first time it is given."""
        seen: set[int] = set()
        made = []
        for i in indices:
            made.append(i >= size and i not in seen)
            seen.add(i)
        return cls(indices, made)

    def part(self, start: int, stop: int) -> Appended:
        """The answer for the specs ``start`` to ``stop`` of the call (a writer's group commit
        hands each request its own)."""
        return Appended(self[start:stop], self.made[start:stop])


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
    _checked: LogEntry = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Normalise the signers and check every field with the entry parser's rules (kept as
        an entry, so that `entry` checks only the fields it fills in).

        Raises:
            FormatError: a field the entry format does not allow.
        """
        object.__setattr__(self, "signers", tuple(sorted(set(self.signers))))
        checked = log_entry(
            kind=self.kind,
            subject=self.subject,
            envelope=self.envelope,
            signers=self.signers,
            time=self.time or "1970-01-01T00:00:00Z",
            prev=GENESIS_PREV,
        )
        object.__setattr__(self, "_checked", checked)

    def entry(self, prev: str, now: str) -> LogEntry:
        """Build the entry with ``prev`` (and ``now`` unless `time` is set).

        Raises:
            FormatError: ``prev`` or the time is not what the entry format allows.
        """
        return relinked_entry(self._checked, prev, self.time or now)


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


def _signed_metadata(statement: Statement) -> dict[str, Any]:
    """An artifact's signed metadata but times: its subject name and predicate (an artifact's
    predicate holds no time)."""
    return {"name": statement.subjects[0].name, **statement.predicate}


def _checkpoint_metadata(statement: Statement) -> dict[str, Any]:
    """What makes two checkpoint records one: the same dataset, parent, trainer, config and
    seed, or the same command for a run of ``train -- COMMAND`` (its name, version, invocation
    and times may differ: training twice on identical inputs gives the same weights)."""
    pred = statement.predicate
    build = pred.get("buildDefinition")
    build = build if isinstance(build, Mapping) else {}
    ext = build.get("externalParameters")
    ext = ext if isinstance(ext, Mapping) else {}
    deps = build.get("resolvedDependencies")
    parents = sorted(
        f"sha256:{d['digest'].get('sha256')}" for d in (deps if isinstance(deps, list) else [])
        if isinstance(d, Mapping) and isinstance(d.get("annotations"), Mapping)
        and d["annotations"].get("role") == "base-checkpoint"
        and isinstance(d.get("digest"), Mapping)
    )
    return {k: ext.get(k) for k in ("dataset", "trainer", "config", "seed", "command")} | {
        "parent": parents}


_ESSENCE: Mapping[str, Callable[[Statement], dict[str, Any]]] = {
    "checkpoint": _checkpoint_metadata,
}
"""What two records of one digest must share, by artifact kind (default: `_signed_metadata`)."""


def differences(kind: str, first: Statement, second: Statement) -> list[str]:
    """How two records of one digest of the (artifact) ``kind`` differ in their signed metadata
    other than times, one ``field: first vs second`` each; none: the same record, written
    twice (the one-record rule, `OneRecord`)."""
    essence = _ESSENCE.get(kind, _signed_metadata)
    a, b = essence(first), essence(second)
    return [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(set(a) | set(b))
            if k != "manifest" and a.get(k) != b.get(k)]


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
