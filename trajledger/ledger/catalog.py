"""Resolve references (``NAME@VERSION``, a digest, a unique digest prefix) to recorded artifacts.

Scope: look a reference up in the user's index of the log (`ledger.trust_state`: keyed by name
and version and by digest, O(log n)), then confirm it **from the log**: the entry the index
points at is read from the log and must be the indexed one, its envelope must hash to the entry,
and the signed statement must carry the name and version asked for (or the digest). The index is
only a cache: a disagreement is a `CatalogMismatchError` (exit 1) that says to rebuild it.

Names of other logs' records (imports bring them into this log): a name means this ledger's own
record first; imported records never shadow it. Each imported record is also reachable by its
origin-qualified name, ``ORIGIN+KEYHASH+NAME@VERSION`` (`origin_name` + ``+`` + the name): a
C2SP origin is a note key name, which never holds ``+`` (nor white space), so the first ``+``
ends the origin; ``KEYHASH`` (the 8 hex digits of the log's key ID) keeps two logs that use one
origin name apart, and may be left out (``ORIGIN+NAME@VERSION``) while only one log of that
origin is known. `Origins` says which log a record came from (the import records list the
envelopes they brought).
A reference that names nothing gets an error that says why and what exists: a name recorded
without that version lists its versions; a name without a version says it needs one; a name
recorded as another kind says which; a mistyped name or digest prefix gets the closest recorded
ones (`trajledger.ledger.suggestions.suggest`, the one "did you mean" of every name the command
line takes: references, key names, environments' Gymnasium ids).
Non-scope: verifying signatures and the lineage (``verify.lineage``); the LanceDB audit index.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from trajledger.verify.digest import digest_bytes
from trajledger.verify.dsse import MAX_ENVELOPE_BYTES, Envelope
from trajledger.verify.errors import ProvenanceError, VerificationError
from trajledger.verify.kinds import NAMED, name_version
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.nodes import NAMED as SHOWN
from trajledger.verify.statement import Statement

from .errors import LedgerError, StoreError, shell_word
from .suggestions import did_you_mean, suggest

if TYPE_CHECKING:
    from collections.abc import Mapping

    from trajledger.verify.nodes import Check
    from trajledger.verify.report import Report

    from .home import LedgerHome
    from .trust_index import NameRow
    from .trust_state import TrustState

__all__ = [
    "ORIGIN_SEPARATOR",
    "Catalog",
    "CatalogItem",
    "CatalogMismatchError",
    "NameClashWarning",
    "Origins",
    "RefError",
    "command_ref",
    "imported_under",
    "named_json",
    "named_report",
    "origin_name",
    "qualified_name",
    "qualified_nodes",
    "qualified_ref",
    "renamed",
    "shown_ref",
    "taken_from",
]

_HEX = re.compile(r"[0-9a-f]{6,64}")
_SHOWN = 8
"""How many recorded versions or names an error lists before "..."."""


def _listed(values: Sequence[str]) -> str:
    shown = ", ".join(values[:_SHOWN])
    return shown + (f", ... ({len(values)} in all)" if len(values) > _SHOWN else "")

ORIGIN_SEPARATOR = "+"
"""Between an origin (a C2SP note key name: no ``+``, no white space), its key hash and a name."""
_KEYHASH = re.compile(r"([0-9a-f]{8})\+(.+)")


def origin_name(vkey: str) -> str:
    """How a log is named to people: ``<origin>+<key hash>``, its C2SP key ID (two logs that
    use one origin name have different keys). The full key decides trust; this only names."""
    return ORIGIN_SEPARATOR.join(vkey.split("+")[:2])


class Origins:
    """Which log each record of a ledger came from: its own, or another log an import brought
    it from (an import record lists the envelopes of the records it logged here). Read from the
    user's index and the import records' statements (unverified: naming, not trust)."""

    def __init__(self, ledger: LedgerHome) -> None:
        """Attach to a ledger (its index is brought up to date on first use)."""
        self.ledger = ledger
        self._vkeys: dict[int, str | None] = {}

    def of(self, index: int) -> frozenset[str]:
        """The verifier keys of the logs the record at ``index`` was imported from; empty for
        this ledger's own records."""
        state = self.ledger.trust_state()
        raw = state.entry_bytes(index)
        if raw is None:
            return frozenset()
        envelope = LogEntry.from_bytes(raw).envelope
        out = set()
        for j in state.listing(envelope):
            if j not in self._vkeys:
                self._vkeys[j] = self._import_vkey(j)
            vkey = self._vkeys[j]
            if vkey is not None:
                out.add(vkey)
        return frozenset(out)

    def _import_vkey(self, index: int) -> str | None:
        """The verifier key of the log the import record at ``index`` took records in from;
        None when it is none, or its envelope is missing or damaged (its records then count as
        this ledger's own). One the disk fails to read is not taken for missing: it ends the
        command (exit 3), since "own" decides (a name's owner, what a log's key compromise
        revokes here, what an import's stop affects)."""
        from trajledger.verify.log_index import read_record
        from trajledger.verify.other_predicates import Import

        state = self.ledger.trust_state()
        entry = state.entry(index)
        if entry is None or entry.kind != "import":
            return None
        what = f"import record at log index {index}"
        try:
            raw = self.ledger.read_blob(entry.envelope, failed=True)
        except StoreError as e:
            raise StoreError(f"{what}: {e}: which log the records it lists came from is "
                             "unknown (none is taken for this ledger's own)") from e
        try:
            _st, pred = read_record(entry, raw, what)
        except ProvenanceError:
            return None
        return str(pred.log["vkey"]) if isinstance(pred, Import) else None

    def first(self, index: int) -> str | None:
        """The verifier key of the log the first import of the record at ``index`` brought it
        from (where this ledger got it: a log that relayed it here later is not its source);
        None for this ledger's own records, or when that import record cannot be read."""
        state = self.ledger.trust_state()
        raw = state.entry_bytes(index)
        for j in state.listing(LogEntry.from_bytes(raw).envelope) if raw is not None else ():
            if (e := state.entry(j)) is not None and e.kind == "import":
                if j not in self._vkeys:
                    self._vkeys[j] = self._import_vkey(j)
                return self._vkeys[j]
        return None

    def imported(self, index: int) -> bool:
        """Whether an import brought the record at ``index``: an import record lists its
        envelope, whatever that import record says of its log (an unreadable one counts; a
        record the index does not hold counts too: fail closed)."""
        state = self.ledger.trust_state()
        raw = state.entry_bytes(index)
        if raw is None:
            return True
        return any((e := state.entry(j)) is None or e.kind == "import"
                   for j in state.listing(LogEntry.from_bytes(raw).envelope))

    def names(self, index: int) -> list[str]:
        """The origin-qualified forms of the record at ``index`` (its prefix), one per log it
        came from: ``ORIGIN+KEYHASH``."""
        return sorted(origin_name(v) for v in self.of(index))


def imported_under(ledger: LedgerHome, kind: str, name: str, version: str
                   ) -> tuple[tuple[str, str, int], ...]:
    """(origin, digest, log index) of each imported record of ``kind`` ``name@version`` here:
    read before a record of this ledger's own takes that name (`taken_from` says so after),
    so that a failing read fails the command before anything is recorded."""
    origins = Origins(ledger)
    return tuple((theirs[0], row.subject, row.index)
                 for row in ledger.trust_state().by_name(name, version)
                 if row.kind == kind and (theirs := origins.names(row.index)))


class NameClashWarning(UserWarning):
    """A record of this ledger's own took an imported record's name (`taken_from`'s line):
    ``trajledger`` shows it as a ``WARNING:`` line (`clikit.warnings_as_lines`), the Python
    API as a warning (``train`` and `runner.training`'s runs: out49)."""


def taken_from(kind: str, name: str, version: str, digest: str,
               imported: tuple[tuple[str, str, int], ...]) -> tuple[str, ...]:
    """One line per imported record (`imported_under`, read before) that this ledger's own new
    record (``digest``) now takes the name of: an import says so of a clash (`updates`), a
    record made after the import did not, and ``grid@1``, approved and trained on as the
    vendor's, silently named the buyer's own from then on (out48)."""
    return tuple(
        f"name clash: your {kind} {name}@{version} ({digest[:19]}…) takes the name of "
        f"{kind} {name}@{version} imported from {origin} ({subject[:19]}…, log "
        f"index {index}): '{name}@{version}' names yours from now on (in every "
        f"command and your scripts); refer to the imported one as "  # (a shell word: the
        f"'{shell_word(f'{origin}+{name}@{version}', SHOWN)}'"  # origin is signed, rev48)
        for origin, subject, index in imported if subject != digest)


def qualified_name(ledger: LedgerHome, index: int, kind: str, name: str, version: str,
                   digest: str, state: TrustState | None = None) -> str:
    """``NAME@VERSION`` of the record at ``index``, origin-qualified when it was imported and
    the plain name names another record here (yours wins: `catalog.Catalog.resolve`): a
    buyer told ``affected here: dataset grid@2 … is built on`` a revoked batch ran ``verify
    grid@2`` and got its own dataset of that name, passing (out48)."""
    ref = f"{name}@{version}" if version else name
    if not version:
        return ref
    state = ledger.trust_state() if state is None else state  # (the caller's, synced: once)
    others = [r for r in state.by_name(name, version) if r.kind == kind and r.subject != digest]
    if not others:
        return ref
    theirs = Origins(ledger).names(index)
    return f"{theirs[0]}+{ref}" if theirs else ref


def command_ref(ledger: LedgerHome, item: CatalogItem) -> str:
    """The reference a command the user is told to run finds ``item`` by: its name as
    commands find it (`qualified_name`) when that resolves to it, else its digest. A signed
    name is its signer's text: ``x`` version ``1@2`` reads as ``x@1`` version ``2``, another
    record (``NAME@VERSION`` splits at the last ``@``), and ``ORIGIN+…`` as a qualified name
    (rev48 finding 9). One look-up more, on the refusals that print such a step. A name that
    not every shell reads back as one argument (`shell_word.every_shell`: a parenthesis, a
    control, a leading ``-``) is its digest too (rev50 finding 4)."""
    from trajledger.verify.nodes import NAMED
    from trajledger.verify.shell_word import every_shell

    if not item.version:
        return item.digest
    ref = qualified_ref(ledger, item)
    try:
        found = Catalog(ledger).resolve(ref, {item.kind}).digest
    except LedgerError:
        found = None
    return ref if found == item.digest and every_shell(ref, NAMED) else item.digest


def qualified_ref(ledger: LedgerHome, item: CatalogItem) -> str:
    """`qualified_name` of a resolved reference: what a message names ``item`` by, so that
    the command it tells the user to run finds this record and not another of its name."""
    return qualified_name(ledger, item.index, item.kind, item.name, item.version, item.digest)


def shown_ref(ledger: LedgerHome, item: CatalogItem) -> str:
    """``item`` as a message names it: by the name that finds it (`qualified_ref`: an imported
    record after a clash by its origin-qualified name, out50), else its digest; the plain
    name when the user's state cannot be read (a line after a record says it stands)."""
    import sqlite3

    try:
        return (qualified_ref(ledger, item) if item.ref else "") or item.digest
    except (LedgerError, OSError, sqlite3.Error):
        return item.ref or item.digest


def qualified_digest(ledger: LedgerHome, kind: str, name: str, version: str, digest: str,
                     state: TrustState | None = None) -> str:
    """`qualified_name` of the record of ``digest`` named ``name@version`` (found by its name:
    a signed reference, an evaluation's suite, carries no log index of this ledger; out50)."""
    state = ledger.trust_state() if state is None else state
    index = next((r.index for r in state.by_name(name, version)
                  if r.kind == kind and r.subject == digest), None)
    return (f"{name}@{version}" if index is None else
            qualified_name(ledger, index, kind, name, version, digest, state))


def qualified_nodes(ledger: LedgerHome, report: Report, *, here: bool = True
                    ) -> dict[str, str]:
    """``{node id: ORIGIN+KEYHASH+NAME@VERSION}`` of each imported artifact of ``report`` whose
    plain name names another record here (a clash: yours wins, `qualified_name`): the trees
    named the vendor's ``grid@1`` by the name that ``verify``, ``show`` and ``approve`` take
    for the buyer's own (out48's Left, out49). ``here``: the nodes' log indexes are this
    ledger's (not a bundle's, as an import's report has them: then each record's own is looked
    up by its digest, out50). One sync of the user's state."""
    state = ledger.trust_state()
    out: dict[str, str] = {}
    for n in report.nodes.values():
        if n.kind in ("log", "bundle", "admission") or n.index is None or not n.version:
            continue
        name = (qualified_name(ledger, n.index, n.kind, n.name, n.version, n.id, state) if here
                else qualified_digest(ledger, n.kind, n.name, n.version, n.id, state))
        if name != f"{n.name}@{n.version}":
            out[n.id] = name
    return out


def named_json(doc: dict[str, Any], names: Mapping[str, str] | None) -> dict[str, Any]:
    """A report's JSON form ``doc`` with each node in ``names`` (`qualified_nodes`) given its
    ``qualifiedName`` (schemas/report.v1.md: an optional member; ``name`` stays the signed
    one)."""
    for node in doc["nodes"]:
        if names and node["id"] in names:
            node["qualifiedName"] = names[node["id"]]
    return doc


def renamed(report: Report, names: Mapping[str, str]) -> Report:
    """A copy of ``report`` whose nodes in ``names`` (`qualified_nodes`) carry those names, and
    whose checks named for such a node (``dataset grid@1: approvals``, the gate's) name it so
    too when no other node of the report has its plain name: every line drawn from it (the
    tree, `Report.failures`, the refusals' ``FAIL:`` lines and the ``approve`` they suggest)
    names the record the commands find by it (out50). A check is another node's when that
    node's start is longer (``dataset grid@1: base@2: approvals`` is not ``grid@1``'s: rev49
    finding 3)."""
    from collections import Counter

    plain = Counter((n.kind, n.name, n.version) for n in report.nodes.values())
    whats = {f"{n.kind} {n.name}@{n.version}:": f"{n.kind} {names[n.id]}:"
             if n.id in names and plain[(n.kind, n.name, n.version)] == 1 else None
             for n in report.nodes.values()}

    def check(c: Check) -> Check:
        old = max((w for w in whats if c.what.startswith(w)), key=len, default=None)
        new = whats[old] if old is not None else None
        return c if old is None or new is None else replace(c, what=new + c.what[len(old):])

    return replace(report, nodes={nid: replace(
        n, name=names[nid].removesuffix(f"@{n.version}") if nid in names else n.name,
        checks=[check(c) for c in n.checks]) for nid, n in report.nodes.items()})


def named_report(ledger: LedgerHome, report: Report) -> Report:
    """``report`` `renamed` by its `qualified_nodes` (itself when none is): for the lines of a
    refusal or an import's report, named as `lineage` names them."""
    names = qualified_nodes(ledger, report)
    return renamed(report, names) if names else report


class RefError(LedgerError):
    """A reference names nothing recorded, or more than one thing (exit 3).

    Attributes:
        unknown: nothing of the kinds asked for is recorded under this name or digest (not a
            missing version, another kind, or an ambiguity), and nothing recorded is close.
        suggestions: recorded references close to the one given, best first.
    """

    def __init__(
        self, message: str, *, unknown: bool = False, suggestions: Sequence[str] = ()
    ) -> None:
        """A refusal with its message; see the attributes."""
        super().__init__(message)
        self.unknown = unknown
        self.suggestions = tuple(suggestions)


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
    named_at: int | None = field(default=None, compare=False)
    """By name, not digest: the index of the record of that name (not its import record's);
    not part of what the item is (equal items name one artifact)."""

    @property
    def ref(self) -> str:
        """``NAME@VERSION`` when there is a version, else the name."""
        return f"{self.name}@{self.version}" if self.version else self.name


class Catalog:
    """References of one ledger, resolved through the index and confirmed from the log."""

    def __init__(self, ledger: LedgerHome) -> None:
        """Attach to a ledger; the index is brought up to date on first use."""
        self.ledger = ledger

    def _rows(self, ref: str) -> tuple[list[NameRow], bool]:
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
        return state.by_name(ref, ""), False

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
        if not isinstance(ref, str):  # a Path or a result object, from Python (out40)
            raise TypeError(f"reference {ref!r} is a {type(ref).__name__}, want a str: "
                            "NAME@VERSION, sha256:<hex> or a digest prefix (result.digest)")
        ref = ref.strip()
        if not ref.isascii() and any(0xD800 <= ord(c) < 0xE000 for c in ref):
            from trajledger.verify.nodes import UNDECODABLE  # (a byte that is not UTF-8: SQLite
            # refuses the lone surrogate it is decoded as, which was a BUG, exit 4; out40)
            raise RefError(f"{ref.translate(UNDECODABLE)}: no {what} has this name: it holds "
                           "a byte that is not UTF-8, as no recorded name does", unknown=True)
        origins = Origins(self.ledger)
        qualified = self._qualified(ref, origins)
        if qualified is not None:
            rows, by_digest = qualified, False
        else:
            rows, by_digest = self._rows(ref)
        hits = [r for r in rows if r.kind in wanted]
        if not by_digest and qualified is None and len({r.subject for r in hits}) > 1:
            # This ledger's own artifacts win: an imported name never shadows one of them (an
            # import record, this ledger's own, is named after the artifact it brought).
            mine = {r.subject for r in hits if r.kind != "import" and not origins.of(r.index)}
            hits = [r for r in hits if r.subject in mine] or hits
        # One row per artifact, its own record's rather than its import record's.
        distinct = {r.subject: r for r in sorted(hits, key=lambda r: r.kind != "import")}
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
            raise self._not_found(ref, wanted, what, by_digest)
        if len(distinct) > 1:
            listed = ", ".join(
                f"{r.kind} {self._qualify(r, origins)} {r.subject[:19]}…"
                for r in list(distinct.values())[:5]
            )
            imported = any(origins.of(r.index) for r in distinct.values())
            hint = ("give more of the digest" if by_digest
                    else "use the digest or an origin-qualified name instead" if imported
                    else "use the digest instead")
            raise RefError(
                f"{ref}: ambiguous, matches {len(distinct)} artifacts ({listed}); {hint}"
            )
        # The first record of an artifact is its identity record.
        row = min(hits, key=lambda r: r.index)
        named = [r.index for r in hits if r.kind != "import"] if not by_digest else []
        return replace(self._confirm(row, check_name=not by_digest),
                       named_at=min(named) if named else None)

    @staticmethod
    def _qualify(row: NameRow, origins: Origins) -> str:
        """The row's name, prefixed by its origin when an import brought it."""
        ref = f"{row.name}@{row.version}" if row.version else row.name
        names = origins.names(row.index)
        return f"{names[0]}{ORIGIN_SEPARATOR}{ref}" if names else ref

    def _qualified(self, ref: str, origins: Origins) -> list[NameRow] | None:
        """Rows an origin-qualified reference names (``ORIGIN+[KEYHASH+]NAME@VERSION``), or
        None when ``ref`` is not one (no ``+``, or a name of this ledger's own holds it).

        Only this ledger's own names are taken literally (not an import record's: it is named
        after what it brought): an imported artifact named ``ORIGIN+NAME`` by another log would
        otherwise answer to the reference qualified by that origin (when its log brought no
        NAME here); it keeps its own qualified form."""
        origin, sep, rest = ref.partition(ORIGIN_SEPARATOR)
        if not sep or not origin or not rest or ref.startswith("sha256:"):
            return None
        forms: list[tuple[str | None, str]] = [(None, rest)]
        m = _KEYHASH.fullmatch(rest)
        if m is not None:
            forms.append((m.group(1), m.group(2)))
        out: list[NameRow] = []
        for keyhash, name in forms:
            for r in self._rows(name)[0]:
                logs = [v.split("+")[:2] for v in origins.of(r.index)]
                if any(o == origin and keyhash in (None, h) for o, h in logs):
                    out.append(r)
        if not out and any(r.kind != "import" and not origins.of(r.index)
                           for r in self._rows(ref)[0]):
            return None
        return out

    def _not_found(
        self, ref: str, wanted: frozenset[str], what: str, by_digest: bool
    ) -> RefError:
        """Why ``ref`` names no ``wanted`` artifact, and what is recorded instead (`RefError`).

        Reads every named row of the index: only on this error path.
        """
        rows = self.ledger.trust_state().named()
        hexpart = ref.removeprefix("sha256:").lower()
        if by_digest or (_HEX.fullmatch(hexpart) and "@" not in ref):
            others = {f"{_a(r.kind)} ({f'{r.name}@{r.version}' if r.version else r.name})"
                      for r in rows if r.kind not in wanted and r.subject[7:].startswith(hexpart)}
            if others:
                return RefError(f"{ref}: is {' and '.join(sorted(others))}, not {_a(what)}")
            digests = {r.subject[7 : 7 + len(hexpart)]: r.subject
                       for r in rows if r.kind in wanted}
            close = suggest(hexpart, digests)
            found = ("with this digest is recorded" if len(hexpart) == 64
                     else f"has a digest starting with {hexpart}")
            if close:
                return RefError(f"{ref}: no {what} {found}; {did_you_mean(close)}",
                                suggestions=close)
            if not by_digest:  # six or more hex digits: a name, or a digest prefix
                by_name = self._by_name(ref, wanted, what, rows)
                if not by_name.unknown:
                    return by_name
            return RefError(f"{ref}: no {what} {found}; see 'trajledger log show'",
                            unknown=True)
        return self._by_name(ref, wanted, what, rows)

    def _by_name(
        self, ref: str, wanted: frozenset[str], what: str, rows: Sequence[NameRow]
    ) -> RefError:
        """`_not_found` for ``NAME@VERSION`` or a plain name: the name has other versions,
        needs a version, is another kind, is close to recorded names, or is unknown."""
        if not ref.strip():  # the tour keeps digests in variables: one was left empty
            return RefError(f"an empty reference where {_a(what)} is wanted (a shell variable "
                            "left empty? REF=$(trajledger ...) is empty when that command "
                            "failed; give NAME@VERSION, sha256:<hex> or a digest prefix of 6+ "
                            "hex characters)", unknown=True)
        name, at, version = ref.rpartition("@") if "@" in ref else (ref, "", "")
        mine = [r for r in rows if r.kind in wanted]
        versions = sorted({r.version for r in mine if r.name == name and r.version},
                          key=_version_key)
        if at and versions:
            kinds = " or ".join(sorted({r.kind for r in mine if r.name == name}))
            return RefError(
                f"{ref}: {kinds} {name} has no version {version!r}; recorded versions: "
                f"{_listed(versions)} (refer to one as {name}@{versions[-1]})"
            )
        if not at and versions:
            refs = [f"{name}@{v}" for v in versions]
            return RefError(f"{ref}: needs a version (NAME@VERSION); recorded: {_listed(refs)}")
        others = sorted({r.kind for r in rows if r.kind not in wanted
                         and (r.name, r.version) in ((name, version), (ref, ""))})
        if others:
            # A dataset where a batch is wanted (export --format parquet): say where they are.
            batches = (f"; give one of its batches ('trajledger show {shell_word(ref)}' lists them)"
                       if others == ["dataset"] and wanted == {"rollout-batch"} else "")
            return RefError(f"{ref}: is {' and '.join(_a(k) for k in others)}, not "
                            f"{_a(what)}{batches}")
        origins = Origins(self.ledger)
        names = {f"{n}{ORIGIN_SEPARATOR}{plain}" if n else plain
                 for r in mine
                 for plain in [f"{r.name}@{r.version}" if r.version else r.name]
                 for n in ["", *origins.names(r.index)]}
        close = suggest(ref, names)
        if close:
            return RefError(f"{ref}: no {what} has this name; {did_you_mean(close)}",
                            suggestions=close)
        how = ("see 'trajledger log show'" if at else "refer to one by NAME@VERSION, "
               "sha256:<hex> or a digest prefix of 6+ hex characters")
        return RefError(f"{ref}: no {what} has this name; {how}", unknown=True)

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
                data = self.ledger.store.get(entry.envelope, limit=MAX_ENVELOPE_BYTES)
                if digest_bytes(data) != entry.envelope:
                    raise VerificationError("its envelope does not hash to the entry")
                statement = Statement.from_bytes(Envelope.from_bytes(data).payload)
            except (ProvenanceError, OSError) as e:
                if isinstance(e, OSError) or (isinstance(e, StoreError) and isinstance(
                        e.__cause__, OSError) and not isinstance(e.__cause__, FileNotFoundError)):
                    raise  # unreadable (an I/O error): operational, exit 3, not a mismatch
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


def _a(noun: str) -> str:
    """``a checkpoint``, ``an environment``."""
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def _version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Versions in the order people count them: ``2`` before ``10``, numbers before words."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-+]", version))
