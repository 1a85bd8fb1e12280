"""Resolve references (``NAME@VERSION``, a digest, a unique digest prefix) to recorded artifacts.

Scope: look a reference up in the user's index of the log (`ledger.trust_state`: keyed by name
and version and by digest, O(log n)), then confirm it **from the log**: the entry the index
points at is read from the log and must be the indexed one, its envelope must hash to the entry,
and the signed statement must carry the name and version asked for (or the digest). The index is
only a cache: a disagreement is a `CatalogMismatchError` (exit 1) that says to rebuild it.
Non-scope: verifying signatures and the lineage (``verify.lineage``); the LanceDB audit index.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from trajledger.verify.digest import digest_bytes
from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import ProvenanceError, VerificationError
from trajledger.verify.kinds import NAMED, name_version
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.statement import Statement

from .errors import LedgerError

if TYPE_CHECKING:
    from .home import Ledger
    from .trust_state import NameRow

__all__ = ["Catalog", "CatalogItem", "CatalogMismatchError", "RefError"]

_HEX = re.compile(r"[0-9a-f]{6,64}")


class RefError(LedgerError):
    """A reference names nothing recorded, or more than one thing (exit 3)."""


class CatalogMismatchError(VerificationError):
    """The index says a reference names a record whose signed statement says otherwise."""


@dataclass(frozen=True)
class CatalogItem:
    """One recorded artifact, confirmed from the log (its signature is not verified here)."""

    kind: str
    name: str
    version: str
    digest: str
    index: int
    envelope: str

    @property
    def ref(self) -> str:
        """``NAME@VERSION`` when there is a version, else the name."""
        return f"{self.name}@{self.version}" if self.version else self.name


class Catalog:
    """References of one ledger, resolved through the index and confirmed from the log."""

    def __init__(self, ledger: Ledger) -> None:
        """Attach to a ledger; the index is brought up to date on first use."""
        self.ledger = ledger

    def _rows(self, ref: str, what: str) -> tuple[list[NameRow], bool]:
        state = self.ledger.trust_state()
        hexpart = ref.removeprefix("sha256:").lower()
        if "@" in ref and not ref.startswith("sha256:"):
            name, _, version = ref.rpartition("@")
            # An unversioned name may itself hold "@" (a batch named after its env@version).
            return state.by_name(name, version) + state.by_name(ref, ""), False
        if _HEX.fullmatch(hexpart) and (ref.startswith("sha256:") or len(hexpart) >= 6):
            rows = state.by_prefix(hexpart)
            if rows or ref.startswith("sha256:"):
                return rows, True
        rows = state.by_name(ref, "")
        if not rows and not _HEX.fullmatch(hexpart):
            raise RefError(
                f"{ref!r}: no unversioned {what} has this name; refer to one by NAME@VERSION, "
                "sha256:<hex> or a digest prefix of 6+ hex characters"
            )
        return rows, False

    def resolve(self, ref: str, kinds: Iterable[str] | None = None) -> CatalogItem:
        """Resolve ``NAME@VERSION``, ``sha256:<hex>``, a unique hex prefix (6+ characters) or an
        unversioned name, and confirm it from the log.

        Args:
            ref: the reference.
            kinds: restrict to these kinds (e.g. ``{"environment"}``).

        Raises:
            RefError: nothing matches, or several different artifacts do.
            CatalogMismatchError: the index disagrees with the log (rebuild it).
        """
        wanted = frozenset(kinds) if kinds else NAMED
        what = " or ".join(sorted(wanted)) if kinds else "artifact"
        ref = ref.strip()
        rows, by_digest = self._rows(ref, what)
        hits = [r for r in rows if r.kind in wanted]
        distinct = {r.subject: r for r in hits}
        if not distinct:
            state = self.ledger.trust_state()
            unread = [
                (i, e.kind) for i in state.unreadable()
                if (e := state.entry(i)) is not None and e.kind in wanted
            ]
            if unread and not by_digest:
                listed = ", ".join(f"{k} at log index {i}" for i, k in unread[:5])
                raise CatalogMismatchError(
                    f"{ref}: no readable {what} has this name, and {len(unread)} record(s) "
                    f"cannot be read ({listed}: envelope missing or damaged), so one may be it; "
                    "restore them with 'trajledger fsck --repair --from BUNDLE|LEDGER'"
                )
            raise RefError(
                f"{ref}: no {what} with this reference is recorded; see 'trajledger log show'"
            )
        if len(distinct) > 1:
            listed = ", ".join(
                f"{r.kind} {r.name}{'@' + r.version if r.version else ''} {r.subject[:19]}…"
                for r in list(distinct.values())[:5]
            )
            hint = "give more of the digest" if by_digest else "use the digest instead"
            raise RefError(
                f"{ref}: ambiguous, matches {len(distinct)} artifacts ({listed}); {hint}"
            )
        # The first record of an artifact is its identity record.
        row = min(hits, key=lambda r: r.index)
        return self._confirm(row, check_name=not by_digest)

    def _confirm(self, row: NameRow, *, check_name: bool) -> CatalogItem:
        """Read the row's entry from the log and its statement from the store; they must say
        what the index says."""
        hint = "the index of the log disagrees with the log; rebuild it with 'trajledger reindex'"
        raw = self.ledger.log.entry(row.index)
        state = self.ledger.trust_state()
        if state.entry_bytes(row.index) != raw:
            raise CatalogMismatchError(
                f"log entry {row.index}: differs from the one indexed; {hint}"
            )
        entry = LogEntry.from_bytes(raw, f"log entry {row.index}")
        if (entry.kind, entry.subject) != (row.kind, row.subject):
            raise CatalogMismatchError(
                f"log entry {row.index} is {entry.kind} {entry.subject[:19]}…, the index says "
                f"{row.kind} {row.subject[:19]}…; {hint}"
            )
        if check_name:
            try:
                data = self.ledger.store.get(entry.envelope)
                if digest_bytes(data) != entry.envelope:
                    raise VerificationError("its envelope does not hash to the entry")
                statement = Statement.from_bytes(Envelope.from_bytes(data).payload)
            except (ProvenanceError, OSError) as e:
                raise CatalogMismatchError(
                    f"{row.kind} {row.name}@{row.version} (log entry {row.index}): its signed "
                    f"statement cannot be read to confirm the name: {e}"
                ) from e
            said = name_version(entry.kind, statement)
            if said != (row.name, row.version):
                raise CatalogMismatchError(
                    f"log entry {row.index}: the index names it {row.name}@{row.version}, its "
                    f"signed statement says {said[0]}@{said[1]}; {hint}"
                )
        return CatalogItem(row.kind, row.name, row.version, row.subject, row.index,
                           entry.envelope)

    def items(self, kind: str | None = None) -> list[CatalogItem]:
        """Every named record (of ``kind``) in log order, as indexed (unconfirmed)."""
        state = self.ledger.trust_state()
        out = []
        for r in state.named(kind):
            raw = state.entry_bytes(r.index)
            envelope = LogEntry.from_bytes(raw).envelope if raw is not None else ""
            out.append(CatalogItem(r.kind, r.name, r.version, r.subject, r.index, envelope))
        return out

    def by_kind(self, kind: str) -> list[CatalogItem]:
        """Every item of one kind, in log order (unconfirmed)."""
        return self.items(kind)

    def to_json(self, item: CatalogItem) -> dict[str, Any]:
        """An item as JSON."""
        return asdict(item)
