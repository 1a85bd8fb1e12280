"""Resolve references (``NAME@VERSION``, a digest, a unique digest prefix) to recorded artifacts.

Scope: a small derived catalog of the log's named artifacts (kind, name, version, digest, log
index, envelope digest), kept in ``<ledger>/index/catalog.jsonl`` and brought up to date from the
log on each use. It is a lookup aid only: it is rebuildable at any time (delete the directory),
and everything it finds is verified from the log and the store before it is trusted.
Non-scope: verification, and the LanceDB audit index (queries, statistics).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import FormatError, ProvenanceError
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.statement import Statement

from ._fs import write_file_atomic
from .errors import LedgerError

if TYPE_CHECKING:
    from .home import Ledger

__all__ = ["NAMED_KINDS", "Catalog", "CatalogItem", "RefError"]

NAMED_KINDS = frozenset(
    {
        "files",
        "environment",
        "evaluator",
        "rollout-batch",
        "dataset",
        "checkpoint",
        "trust-policy",
        "import",
    }
)
"""Kinds whose records are artifacts a user refers to (not approvals, revocations...)."""

_HEX = re.compile(r"[0-9a-f]{6,64}")
CATALOG_FORMAT = 1


class RefError(LedgerError):
    """A reference names nothing recorded, or more than one thing."""


@dataclass(frozen=True)
class CatalogItem:
    """One recorded artifact as the catalog knows it (unverified)."""

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
    """The derived catalog of one ledger."""

    def __init__(self, ledger: Ledger) -> None:
        """Attach to a ledger; nothing is read until `items` or `resolve`."""
        self.ledger = ledger
        self.dir = ledger.root / "index"
        self.path = self.dir / "catalog.jsonl"
        self.state_path = self.dir / "catalog.state"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / "catalog.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _load(self) -> tuple[int, list[CatalogItem]]:
        try:
            state = json.loads(self.state_path.read_text("utf-8"))
            lines = self.path.read_bytes().splitlines()
            if state.get("format") != CATALOG_FORMAT or state.get("lines") != len(lines):
                return 0, []
            items = [CatalogItem(**json.loads(line)) for line in lines]
            return int(state["size"]), items
        except (OSError, ValueError, TypeError, KeyError):
            return 0, []  # derived data: when in doubt, rebuild

    def items(self) -> list[CatalogItem]:
        """Every named artifact in the log, updated from the log first."""
        log = self.ledger.log
        size = log.size
        with self._locked():
            done, items = self._load()
            if done > size:
                done, items = 0, []  # the log is smaller than the catalog: rebuild
            if done < size:
                items.extend(self._scan(done, size))
                body = b"".join(
                    json.dumps(asdict(i), sort_keys=True).encode() + b"\n" for i in items
                )
                write_file_atomic(self.path, body, durable=False)
                state = {"format": CATALOG_FORMAT, "size": size, "lines": len(items)}
                write_file_atomic(self.state_path, json.dumps(state).encode(), durable=False)
        return items

    def _scan(self, start: int, end: int) -> Iterable[CatalogItem]:
        log, store = self.ledger.log, self.ledger.store
        step = 256
        for lo in range(start, end, step):
            hi = min(lo + step, end)
            for i, raw in enumerate(log.entries(lo, hi), start=lo):
                try:
                    entry = LogEntry.from_bytes(raw)
                except FormatError:
                    continue  # `log verify` reports it; the catalog only skips it
                if entry.kind not in NAMED_KINDS:
                    continue
                name, version = "", ""
                try:
                    env = Envelope.from_bytes(store.get(entry.envelope))
                    st = Statement.from_bytes(env.payload)
                    p = st.predicate
                    name = str(p.get("name") or st.subjects[0].name)
                    version = str(p.get("version") or "")
                    if entry.kind == "checkpoint":
                        ext = (p.get("buildDefinition") or {}).get("externalParameters") or {}
                        name = str(ext.get("name") or st.subjects[0].name)
                        version = str(ext.get("version") or "")
                except (ProvenanceError, AttributeError):
                    pass  # unreadable envelope: still findable by digest
                yield CatalogItem(entry.kind, name, version, entry.subject, i, entry.envelope)

    def resolve(self, ref: str, kinds: Iterable[str] | None = None) -> CatalogItem:
        """Resolve ``NAME@VERSION``, ``sha256:<hex>``, or a unique hex prefix (6+ characters).

        Args:
            ref: the reference.
            kinds: restrict to these kinds (e.g. ``{"environment"}``).

        Raises:
            RefError: nothing matches, or several different artifacts do.
        """
        wanted = frozenset(kinds) if kinds else NAMED_KINDS
        what = " or ".join(sorted(wanted)) if kinds else "artifact"
        items = [i for i in self.items() if i.kind in wanted]
        ref = ref.strip()
        hexpart = ref.removeprefix("sha256:").lower()
        by_digest = False
        if "@" in ref and not ref.startswith("sha256:"):
            name, _, version = ref.rpartition("@")
            # An unversioned name may itself hold "@" (a batch named after its env@version).
            hits = [
                i
                for i in items
                if (i.name == name and i.version == version) or (i.name == ref and not i.version)
            ]
        elif _HEX.fullmatch(hexpart):
            by_digest = True
            hits = [i for i in items if i.digest[7:].startswith(hexpart)]
        else:
            hits = [i for i in items if i.name == ref and not i.version]
            if not hits:
                raise RefError(
                    f"{ref!r}: no unversioned {what} has this name; refer to one by NAME@VERSION, "
                    "sha256:<hex> or a digest prefix of 6+ hex characters"
                )
        distinct = {i.digest: i for i in hits}
        if not distinct:
            raise RefError(
                f"{ref}: no {what} with this reference is recorded; see 'trajledger log show'"
            )
        if len(distinct) > 1:
            listed = ", ".join(
                f"{i.kind} {i.ref} {i.digest[:19]}…" for i in list(distinct.values())[:5]
            )
            hint = "give more of the digest" if by_digest else "use the digest instead"
            raise RefError(
                f"{ref}: ambiguous, matches {len(distinct)} artifacts ({listed}); {hint}"
            )
        # The first record of an artifact is its identity record.
        return min(hits, key=lambda i: i.index)

    def by_kind(self, kind: str) -> list[CatalogItem]:
        """Every item of one kind, in log order."""
        return [i for i in self.items() if i.kind == kind]

    def to_json(self, item: CatalogItem) -> dict[str, Any]:
        """An item as JSON."""
        return asdict(item)
