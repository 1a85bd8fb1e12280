"""A ledger's objects against its log: check (fsck), restore (repair), collect garbage (gc).

Scope:

- `fsck` (read-only): every object the log names (each entry's envelope; the manifest of every
  artifact with files, and each blob it lists unless erased, or for a sealed batch the
  ciphertext of each; trust-policy copies; objects of imported lineages) is looked up and
  re-hashed; it reports missing and damaged objects, objects no record names (orphans),
  leftovers of killed writers, and derived caches that disagree with the log
  (`DERIVED_CHECKS`: the log's lookup cache here; further checks are appended there).
- `repair`: restores missing or damaged objects the log names from another ledger directory or
  an exported evidence bundle (``.tar.zst``, read with ``verify.bundle``); every byte restored is
  hashed while copied and must give the digest, and an object is installed by an atomic rename
  (a damaged one replaced). Erased blobs are never restored.
- `gc` (a dry run unless told to apply): removes orphans last written more than ``min_age`` ago
  (a recorder stores blobs before it logs them: the grace period protects one in progress) and
  leftovers no live writer can own (``ledger.fs.is_stale``).
- `LedgerHome.sweep_leftovers` (``ledger.home``): what every writer does under the log's lock
  before its first append: the same leftover rule on ``objects/sha256/.tmp-*``,
  ``<ledger>/tmp/*`` and a shared ledger's ``<state>/tmp/*`` (cheap: a few directories).

Non-scope: the log itself (``log verify`` checks every tile and entry; a tampered log is refused
when opened), lineage and policy (``verify``).
Spec: DESIGN §2 (object store), schemas/log-entry.v1.md (entries).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import DigestMismatchError, FormatError, ProvenanceError
from trajledger.verify.kinds import KINDS
from trajledger.verify.ledger_dir import open_regular
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.manifest import Manifest
from trajledger.verify.sealed_files import Sealed
from trajledger.verify.statement import Statement

from .errors import LedgerError, StoreError, read_failure
from .fs import TMP_PREFIX, is_stale, remove_tree, tmp_entries

if TYPE_CHECKING:
    from .home import LedgerHome
    from .store import ObjectStore

__all__ = [
    "DERIVED_CHECKS",
    "DerivedCheck",
    "FsckReport",
    "GcResult",
    "Leftover",
    "Named",
    "RepairResult",
    "fsck",
    "gc",
    "leftovers",
    "named_objects",
    "repair",
]

FILE_KINDS = frozenset(k.name for k in KINDS.values() if k.files)
"""Entry kinds whose subject is a manifest stored with the artifact (it stays after erasure):
`verify.kinds.Kind.files`, so a new kind with files (an evaluation) is named, and kept by gc."""

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HEX = re.compile(r"[0-9a-f]{64}")
_MAX_JSON = 64 << 20  # a stored manifest or envelope larger than this is not parsed for names

Progress = Callable[[int, int], None]
DerivedCheck = Callable[["LedgerHome", Sequence[tuple[int, "LogEntry | None"]]], list[str]]
"""A check of a derived cache against the log's entries ((index, entry or None) in log order);
returns one line per problem, each saying how to rebuild the cache."""


# -- what the log names -----------------------------------------------------------------------


@dataclass(frozen=True)
class Named:
    """An object the log names.

    Attributes:
        digest: its name.
        what: the first reason it is named ("envelope of entry 3", "blob a.txt of entry 4").
        index: the log entry naming it.
        required: its absence is a problem (envelopes, manifests, blobs not erased); optional
            ones (trust-policy copies, imported lineages) are checked when present.
    """

    digest: str
    what: str
    index: int
    required: bool


def _mentions(value: Any, out: set[str]) -> None:
    """Every digest written anywhere in a JSON value (``sha256:<hex>`` or ``{"sha256": hex}``)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if _DIGEST.fullmatch(v):
                out.add(v)
        elif isinstance(v, dict):
            h = v.get("sha256")
            if isinstance(h, str) and _HEX.fullmatch(h):
                out.add("sha256:" + h)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


class _Walk:
    """One pass over the log's entries, collecting the objects they name."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.named: dict[str, Named] = {}
        self.mentioned: set[str] = set()
        self.erased: set[str] = set()
        self.entries: list[tuple[int, LogEntry | None]] = []
        self.holders: dict[str, set[str]] = {}  # blob -> the artifacts listing it (fsck)
        self.erasures: dict[str, int] = {}  # erased blob -> the first erasure listing it
        self.erased_subjects: set[str] = set()

    def hold(self, blob: str, subject: str) -> None:
        self.holders.setdefault(blob, set()).add(subject)

    def lingering(self) -> dict[str, int]:
        """Blobs an erasure lists that no artifact but erased ones holds (blob -> that
        erasure's index): still stored, the erasure did not finish (or, another log's, was
        not taken here)."""
        return {b: i for b, i in self.erasures.items()
                if not self.holders.get(b, set()) - self.erased_subjects}

    def name(self, digest: str, what: str, index: int, required: bool) -> None:
        old = self.named.get(digest)
        if old is None or (required and not old.required):
            self.named[digest] = Named(digest, what, index, required)

    def read_json(self, digest: str) -> Any:
        """A stored JSON object that hashes to its name, else None."""
        try:
            if self.store.check_object(digest, rehash=False) > _MAX_JSON:
                return None
            data = self.store.get_verified(digest)
            return json.loads(data)
        except (StoreError, DigestMismatchError, ValueError, RecursionError):
            return None

    def statement(self, digest: str) -> Statement | None:
        try:
            data = self.store.get_verified(digest)
            return Statement.from_bytes(Envelope.from_bytes(data).payload)
        except (StoreError, ProvenanceError):
            return None

    def entry(self, i: int, e: LogEntry, required: bool, depth: int = 0) -> None:
        self.name(e.envelope, f"envelope of entry {i}", i, required)
        st = self.statement(e.envelope)
        plain = required
        if st is not None:
            _mentions(st.predicate, self.mentioned)
            sealed = _sealed(st) if e.kind == "rollout-batch" else None
            if sealed is not None:
                # A sealed batch stores its ciphertexts, never the plaintext its manifest lists.
                plain = False
                for path, (digest, _size) in sorted(sealed.files.items()):
                    self.hold(digest, e.subject)
                    self.name(digest, f"sealed blob {path} of entry {i} ({e.subject[:19]}…)", i,
                              required)
            if e.kind == "erasure":
                self.erased.add(e.subject)
                self.erased_subjects.add(e.subject)
                blobs = st.predicate.get("blobs")
                if isinstance(blobs, list):
                    self.erased.update(b for b in blobs if isinstance(b, str))
                    for b in blobs:
                        if isinstance(b, str):
                            self.erasures.setdefault(b, i)
            inline = st.predicate.get("manifest")
            if isinstance(inline, dict):
                self.manifest(i, e.subject, inline, plain)
            kept = st.predicate.get("features") if e.kind == "rollout-batch" else None
            if isinstance(kept, dict) and isinstance(kept.get("digest"), str):
                # The episode features kept beside a batch: derived data (computed again from
                # the steps when absent, as in a bundle), checked when present.
                self.hold(kept["digest"], e.subject)
                self.name(kept["digest"], f"episode features of entry {i}", i, False)
        if e.kind in FILE_KINDS:
            self.name(e.subject, f"manifest of entry {i}", i, required)
            obj = self.read_json(e.subject)
            if isinstance(obj, dict) and "files" in obj:
                self.manifest(i, e.subject, obj, plain)
        elif e.kind == "trust-policy":
            self.name(e.subject, f"trust policy of entry {i}", i, False)
        if e.kind == "import" and st is not None and depth == 0:
            self.imported(i, st)

    def manifest(self, i: int, subject: str, obj: dict[str, Any], required: bool) -> None:
        _mentions(obj, self.mentioned)
        try:
            manifest = Manifest.from_json(obj)
        except FormatError:
            return  # 'log verify' / 'verify' report a bad manifest
        for f in manifest.files:
            self.hold(f.digest, subject)
            self.name(f.digest, f"blob {f.path} of entry {i} ({subject[:19]}…)", i, required)

    def imported(self, i: int, st: Statement) -> None:
        """The lineage an import record brought along: checked when present, not required."""
        entries = st.predicate.get("entries")
        if not isinstance(entries, list):
            return
        for item in entries:
            raw = item.get("entry") if isinstance(item, dict) else None
            if not isinstance(raw, str):
                continue
            try:
                foreign = LogEntry.from_bytes(raw.encode("utf-8"))
            except FormatError:
                continue
            self.entry(i, foreign, False, depth=1)


def _sealed(st: Statement) -> Sealed | None:
    """A rollout batch statement's ``sealed`` (None: not sealed, or malformed: then its
    plaintext blobs are looked for, and 'verify' reports the record)."""
    value = st.predicate.get("sealed")
    if not isinstance(value, dict):
        return None
    try:
        return Sealed.from_json(value, "sealed")
    except FormatError:
        return None


def named_objects(
    ledger: LedgerHome, *, on_progress: Progress | None = None
) -> tuple[dict[str, Named], set[str], set[str], list[tuple[int, LogEntry | None]]]:
    """Walk the log (up to its signed checkpoint) and collect what its records name.

    Returns:
        (the objects named, by digest; the erased digests; every digest mentioned anywhere in
        a record, which `gc` never removes; each entry parsed or None, in log order).

    Raises:
        TamperError: the log is tampered with (it is refused when opened).
    """
    walk = _walk(ledger, on_progress)
    return walk.named, walk.erased, walk.mentioned, walk.entries


def _walk(ledger: LedgerHome, on_progress: Progress | None) -> _Walk:
    """`named_objects`' walk, whole."""
    walk = _Walk(ledger.store)
    log = ledger.log
    size = log.size
    for lo in range(0, size, 256):
        hi = min(size, lo + 256)
        for i, raw in enumerate(log.entries(lo, hi), lo):
            try:
                e: LogEntry | None = LogEntry.from_bytes(raw, f"log entry {i}")
            except FormatError:
                e = None
            walk.entries.append((i, e))
            if e is not None:
                walk.entry(i, e, True)
        if on_progress is not None:
            on_progress(hi, size)
    for digest in walk.erased:
        old = walk.named.get(digest)
        if old is not None and old.what.startswith("blob "):
            walk.named[digest] = Named(digest, old.what + " (erased)", old.index, False)
    walk.mentioned.update(walk.named)
    return walk


# -- leftovers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leftover:
    """A temp file or directory of a writer.

    Attributes:
        path: where it is.
        stale: no live writer can own it (``ledger.fs.is_stale``): safe to remove.
    """

    path: Path
    stale: bool


def leftovers(ledger: LedgerHome, *, everywhere: bool = True) -> list[Leftover]:
    """Temp files of the store, and entries of ``<ledger>/tmp/`` and of `LedgerHome.scratch`
    (a shared ledger's ``<state>/tmp``, where its commands write since rev14), each judged stale
    or not.

    Args:
        ledger: the ledger.
        everywhere: look in every object directory (older versions wrote temps beside the
            object) and in the log's directories, not only where writers write them now.
    """
    paths: list[Path] = list(ledger.store.temp_files(everywhere=everywhere))
    for parent in dict.fromkeys((ledger.root / "tmp", ledger.scratch)):
        paths.extend(tmp_entries(parent))
    if everywhere:
        for dirpath, _dirs, files in os.walk(ledger.log_dir):
            paths.extend(Path(dirpath) / f for f in files if f.startswith(TMP_PREFIX))
    return [Leftover(p, is_stale(p)) for p in paths]


# -- fsck -----------------------------------------------------------------------------------------


def _check_lookup(ledger: LedgerHome, entries: Sequence[tuple[int, LogEntry | None]]) -> list[str]:
    from .log import CACHE_DIR
    from .log.lookup import Lookup

    path = ledger.cache_dir / CACHE_DIR
    if not path.exists():
        return []
    lookup = Lookup(path, ledger.log.origin)
    try:
        return lookup.disagreements(entries)
    finally:
        lookup.close()


def _check_trust_state(
    ledger: LedgerHome, entries: Sequence[tuple[int, LogEntry | None]]
) -> list[str]:
    """The user's trust state (the catalog's index, outside the ledger) against the entries:
    every indexed entry must be the log's, every named record must index an entry of its
    kind and subject, and every derived row (`TrustState.disagreements`: revocations,
    held-out datasets, references...) must be the one the log gives. Read only: the state is
    not extended here."""
    vkey = ledger.log_vkey()
    if vkey is None:
        return []
    state = ledger.log_state(vkey)
    rebuild = "rebuild it with 'trajledger reindex' (the checkpoint seen before is kept)"
    problems: list[str] = []
    by_index = dict(entries)
    for i in range(state.size):
        have, want = state.entry(i), by_index.get(i)
        if want is not None and have != want:
            problems.append(f"trust state {state.path}: entry {i} is not the log's; {rebuild}")
            break
    for row in state.named():
        want = by_index.get(row.index)
        if want is not None and (want.kind, want.subject) != (row.kind, row.subject):
            problems.append(
                f"trust state {state.path}: name {row.name}@{row.version} points at entry "
                f"{row.index}, which is a {want.kind} of {want.subject[:19]}…; {rebuild}"
            )
            break
    if not problems:
        try:  # a read the disk fails is not the state disagreeing: no 'reindex' advice
            problems += state.disagreements(ledger.log.entries,
                                            functools.partial(ledger.read_blob, failed=True))
        except StoreError as e:
            if read_failure(e) is None:
                raise
            problems.append(f"trust state {state.path}: not compared with the log: an object it "
                            "is derived from is unreadable (above)")
    return problems


def _unreadable(what: str, e: OSError) -> str:
    """`FsckReport.unreadable`'s line of a named object (``what``) that read failure ``e``
    kept from being checked: a special file planted in its place (`check_object`'s EINVAL)
    is said so, the disk's error by its name."""
    if e.errno == errno.EINVAL:
        return f"not a regular file, not read ({what})"
    return f"unreadable ({errno.errorcode.get(e.errno or 0, e.errno)}: {e.strerror}) ({what})"


DERIVED_CHECKS: list[DerivedCheck] = [_check_lookup, _check_trust_state]
"""Checks of derived caches against the log, run by `fsck`: the log's lookup cache and the
user's trust state (the catalog). Append to add one."""


@dataclass
class FsckReport:
    """What `fsck` found.

    Attributes:
        size: the log size walked (its signed checkpoint's).
        named: objects the log names.
        checked: named objects present and re-hashed.
        missing: required objects absent (digest -> why it is named).
        unreadable: named objects stored that cannot be read (digest -> why it is named, and
            the read's error: EIO, EACCES; a FIFO, a device or a socket in their place is not
            read); present, so not missing, and no derived cache is blamed for them (left31).
            An erased blob no other artifact holds is `unerased` instead (never restored).
        damaged: named objects present whose bytes do not hash to their name.
        absent_optional: named but optional objects not stored.
        erased: erased blobs (not failures).
        unerased: blobs an erasure lists that are still stored and that no artifact but erased
            ones lists (digest -> that erasure's log index): an erasure that did not finish
            (killed, or the store failed) or another log's erasure not taken here; a warning.
        orphans: stored objects nothing names, with their sizes.
        leftovers: temp files and directories of writers.
        derived: derived caches that disagree with the log.
        writable: the ledger's directories (and a local store's outside it) that other users
            (or, unless the ledger is shared through its group, the group) may write: made
            under a lax umask before rev9's fix; a warning (directory -> who: ``g``, ``o``,
            ``go``, as `fs.refuse_writable` names them), see `writable_dirs`.
        links: symbolic links where trajledger keeps directories of its own (the store's
            fan-out, the log's tiles), see `planted_links`: writers refuse them (fix14).
    """

    size: int = 0
    named: int = 0
    checked: int = 0
    missing: dict[str, str] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    damaged: dict[str, str] = field(default_factory=dict)
    absent_optional: int = 0
    erased: int = 0
    unerased: dict[str, int] = field(default_factory=dict)
    orphans: dict[str, int] = field(default_factory=dict)
    leftovers: list[Leftover] = field(default_factory=list)
    derived: list[str] = field(default_factory=list)
    writable: dict[str, str] = field(default_factory=dict)
    links: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No missing or damaged object, no disagreeing cache and no planted link (orphans and
        leftovers are reported, not failures)."""
        return not (self.missing or self.unreadable or self.damaged or self.derived
                    or self.links)

    def problems(self) -> list[str]:
        """One line per failure."""
        out = [f"object {d}: missing ({why})" for d, why in sorted(self.missing.items())]
        out += [f"object {d}: {why}" for d, why in sorted(self.unreadable.items())]
        out += [f"object {d}: damaged: {why}" for d, why in sorted(self.damaged.items())]
        out += [f"{p}: a symbolic link where trajledger keeps a directory of its own: planted by "
                "someone who can write the ledger's directories (writers refuse it; reads follow "
                "it): remove it, then run 'trajledger fsck' again for what it hid" for p in
                self.links]
        return out + list(self.derived)

    def to_json(self) -> dict[str, Any]:
        """A stable JSON rendering (``fsck --json``)."""
        return {
            "ok": self.ok,
            "size": self.size,
            "named": self.named,
            "checked": self.checked,
            "missing": dict(sorted(self.missing.items())),
            "unreadable": dict(sorted(self.unreadable.items())),
            "damaged": dict(sorted(self.damaged.items())),
            "absent_optional": self.absent_optional,
            "erased": self.erased,
            "unerased": dict(sorted(self.unerased.items())),
            "orphans": dict(sorted(self.orphans.items())),
            "leftovers": [{"path": str(x.path), "stale": x.stale} for x in self.leftovers],
            "derived": list(self.derived),
            "writable": dict(sorted(self.writable.items())),
            "links": list(self.links),
        }


def fsck(ledger: LedgerHome, *, on_progress: Progress | None = None) -> FsckReport:
    """Check the ledger's objects against its log; reads only.

    Steps:
        1. Walk the log up to its signed checkpoint and collect every object it names
           (`named_objects`).
        2. Re-hash each named object present; a required one absent is missing (unless erased).
        3. Stored objects that nothing names are orphans.
        4. List leftovers of writers (`leftovers`).
        5. Run the derived-cache checks (`DERIVED_CHECKS`).
        6. List the directories others may write (`writable_dirs`).
        7. List the links planted where directories belong (`planted_links`).

    Args:
        ledger: the ledger.
        on_progress: called with (units done, total) over the walk and the re-hashing.

    Raises:
        TamperError: the log is tampered with.
    """
    report = FsckReport()
    store = ledger.store
    # (1)
    walk = _walk(ledger, None)
    named, erased, mentioned, entries = walk.named, walk.erased, walk.mentioned, walk.entries
    lingering = walk.lingering()
    report.size = len(entries)
    report.named = len(named)
    # (2)
    total = len(named)
    for n, (digest, item) in enumerate(sorted(named.items()), 1):
        try:
            store.check_object(digest)
            report.checked += 1
            if digest in lingering:
                report.unerased[digest] = lingering[digest]
        except StoreError as e:
            if digest in lingering and read_failure(e):  # stored: an erasure unfinished
                report.unerased[digest] = lingering[digest]
            elif (failure := read_failure(e)) is not None:  # stored: not missing (repaired)
                report.unreadable[digest] = _unreadable(item.what, failure)
            elif digest in erased:
                report.erased += 1
            elif item.required:
                report.missing[digest] = item.what
            else:
                report.absent_optional += 1
        except DigestMismatchError as e:
            report.damaged[digest] = f"{item.what}: {e}"
        if on_progress is not None:
            on_progress(n, total)
    # (3)
    for digest in store.iter_digests():
        if digest not in mentioned:
            try:
                report.orphans[digest] = store.check_object(digest, rehash=False)
            except (StoreError, DigestMismatchError):
                continue
    # (4)
    report.leftovers = leftovers(ledger)
    # (5)
    for check in DERIVED_CHECKS:
        report.derived.extend(check(ledger, entries))
    # (6)
    report.writable = writable_dirs(ledger)
    # (7)
    report.links = planted_links(ledger)
    return report


def planted_links(ledger: LedgerHome) -> list[str]:
    """The symbolic links among the directories trajledger keeps of its own: ``sha256/`` and
    its two fan-out levels in a local store, every directory under the log's ``tile/`` (and
    any link there). A writer refuses each (`fs.open_dirs_below`); a reader follows it, to
    what it hashes. One ``scandir`` per directory (the store's objects are not listed)."""
    found: list[str] = []

    def scan(top: str, depth: int | None) -> None:
        try:
            entries = list(os.scandir(top))
        except OSError:
            return
        for e in entries:
            if e.is_symlink():
                found.append(e.path)
            elif e.is_dir(follow_symlinks=False) and (depth is None or depth > 1):
                scan(e.path, None if depth is None else depth - 1)

    store = ledger.store
    if store.is_local:
        sha = store.root / "sha256"
        if sha.is_symlink():
            found.append(str(sha))
        else:
            scan(str(sha), 2)  # the fan-out directories, not the objects in them
    tile = ledger.log_dir / "tile"
    if tile.is_symlink():
        found.append(str(tile))
    else:
        scan(str(tile), None)
    return sorted(found)


def writable_dirs(ledger: LedgerHome) -> dict[str, str]:
    """Every directory of the ledger (and of a local store outside it) that other users, or
    its group unless the ledger is shared through it (``group_writable``), may write (path ->
    ``g``, ``o`` or ``go``). Opening a ledger refuses only the few it reads by fixed name
    (`access.refuse_writable_ledger`); the rest (log tiles, the store's fan-out) kept the mode a lax
    umask gave them before rev9: what is in them is hashed or signed before use, but others
    could delete or swap evidence there. Links are not followed; a sticky directory passes."""
    roots = [ledger.root]
    store = ledger.store
    if store.is_local and not store.root.resolve().is_relative_to(ledger.root.resolve()):
        roots.append(store.root)
    group = not ledger.config.group_writable
    out: dict[str, str] = {}
    for root in roots:
        for top, _dirs, _files in os.walk(root):
            try:
                mode = os.lstat(top).st_mode
            except OSError:
                continue
            if mode & stat.S_ISVTX:
                continue
            bits = (("g" if group and mode & stat.S_IWGRP else "")
                    + ("o" if mode & stat.S_IWOTH else ""))
            if bits:
                out[top] = bits
    return out


# -- repair ---------------------------------------------------------------------------------------


@dataclass
class RepairResult:
    """What `repair` did.

    Attributes:
        restored: objects installed from the source, each re-hashed while copied.
        unavailable: objects the source does not hold (or holds with other bytes).
        unreadable: objects the source holds in a file it cannot open, or in a FIFO, a device
            or a socket (not read: a FIFO blocks, a device may never end), each with why.
        after: `fsck` after the repair.
    """

    restored: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)
    after: FsckReport | None = None


def _source(path: Path) -> tuple[Callable[[str], IO[bytes] | None], Callable[[], None]]:
    """Open a repair source: an exported bundle file, or another ledger directory.

    Returns:
        (open an object's bytes by digest, or None when absent; close the source).
    """
    if path.is_file():
        from trajledger.verify.bundle import BundleEvidence

        ev = BundleEvidence.open(path)

        def from_bundle(digest: str) -> IO[bytes] | None:
            p = ev.blob_path(digest)
            return open(p, "rb") if p is not None else None

        return from_bundle, ev.close
    from .home import LedgerHome

    other = LedgerHome.open(path)
    store = other.store

    def from_ledger(digest: str) -> IO[bytes] | None:
        if store.is_local:
            try:
                return open_regular(store.path_of(digest))
            except FileNotFoundError:
                return None
        try:
            import io

            return io.BytesIO(store.get(digest))
        except StoreError:
            return None

    return from_ledger, lambda: None


def repair(
    ledger: LedgerHome,
    source: Path,
    *,
    report: FsckReport | None = None,
    on_progress: Progress | None = None,
) -> RepairResult:
    """Restore the missing and damaged objects the log names from ``source``.

    Steps:
        1. Find what is missing or damaged (`fsck`, unless ``report`` is given). Erased blobs
           are never restored.
        2. For each: open it in the source (a bundle's objects, or another ledger's store),
           copy it into the store hashing while copying; bytes that do not give the digest
           are refused (nothing installed); a damaged object is replaced by an atomic rename.
           A file of the source that cannot be opened, or is not a regular file (a FIFO or a
           device planted there: `verify.ledger_dir.open_regular`), is not read: it is
           named in ``unreadable`` and the others are restored.
        3. Check again (`fsck`).

    Raises:
        LedgerError: the source is neither a bundle nor a ledger.
        FormatError, VerificationError: the bundle is malformed.
        TamperError: the log is tampered with.
    """
    if not source.exists():
        raise LedgerError(f"{source}: no such bundle or ledger directory")
    if ledger.store.is_local:
        ledger.store.drop_temp_files()  # a killed repair's (or another writer's)
    # (1)
    before = report if report is not None else fsck(ledger)
    wanted = sorted(set(before.missing) | set(before.unreadable) | set(before.damaged))
    result = RepairResult()
    if wanted:
        # (2)
        fetch, close = _source(source)
        try:
            for n, digest in enumerate(wanted, 1):
                try:
                    stream = fetch(digest)
                except OSError as e:  # not read; the others are restored
                    result.unreadable[digest] = f"{e.filename}: {e.strerror or e}"
                    stream = None
                if stream is None:
                    if digest not in result.unreadable:
                        result.unavailable.append(digest)
                else:
                    with stream:
                        try:
                            ledger.store.put_stream(stream, name=f"{source}: {digest}",
                                                    expect=digest)  # fmt: skip
                            result.restored.append(digest)
                        except DigestMismatchError:
                            result.unavailable.append(digest)
                if on_progress is not None:
                    on_progress(n, len(wanted))
        finally:
            close()
    # (3)
    result.after = fsck(ledger)
    return result


# -- gc -------------------------------------------------------------------------------------------


@dataclass
class GcResult:
    """What `gc` found (and removed, when applied).

    Attributes:
        orphans: stored objects nothing names, old enough to remove, with their sizes.
        young: orphans written less than ``min_age`` ago (kept: maybe a record in progress).
        leftovers: stale temp files and directories.
        applied: whether they were removed.
    """

    orphans: dict[str, int] = field(default_factory=dict)
    young: int = 0
    leftovers: list[Path] = field(default_factory=list)
    applied: bool = False

    def to_json(self) -> dict[str, Any]:
        """A stable JSON rendering (``gc --json``)."""
        return {
            "applied": self.applied,
            "orphans": dict(sorted(self.orphans.items())),
            "orphan_bytes": sum(self.orphans.values()),
            "young": self.young,
            "leftovers": [str(p) for p in self.leftovers],
        }


def gc(ledger: LedgerHome, *, apply: bool = False, min_age: float = 86400.0) -> GcResult:
    """Find (and with ``apply`` remove) orphan objects and stale leftovers.

    Steps:
        1. Collect every digest the log's records name or mention (`named_objects`).
        2. Orphans: stored objects not among them, last written more than ``min_age``
           seconds ago (younger ones may belong to a record in progress).
        3. Leftovers: temp files and directories no live writer can own.
        4. With ``apply``: remove them, holding the log's lock, after reading any entries
           appended since step 1 (an orphan they name is kept), each only if its mtime is
           still the one seen in step 2 (a writer about to name it touched it:
           `store.ObjectStore.delete_unchanged`), and only while the log's lock file is
           still the one locked (`Log.check_lock_held`, before each removal: a group member
           who removed it lets a writer in that may name an orphan meanwhile).

    Raises:
        TamperError: the log is tampered with.
        LogError: the log's lock file was removed or replaced meanwhile; nothing more removed.
    """
    store = ledger.store
    result = GcResult()
    # (1)
    _named, _erased, mentioned, entries = named_objects(ledger)
    # (2)
    now = time.time()
    seen: dict[str, float] = {}  # each orphan's mtime when chosen: removed only if unchanged
    for digest in store.iter_digests():
        if digest in mentioned:
            continue
        try:
            size = store.check_object(digest, rehash=False)
            mtime = store.modified(digest)
        except (StoreError, DigestMismatchError):
            continue
        if mtime is None or now - mtime < min_age:  # unknown age: kept
            result.young += 1
        else:
            result.orphans[digest] = size
            seen[digest] = mtime
    # (3)
    result.leftovers = [x.path for x in leftovers(ledger) if x.stale]
    if not apply:
        return result
    # (4)
    log = ledger.log
    with log.exclusive():
        if log.size != len(entries):
            _again, _e, newer, _ents = named_objects(ledger)
            for digest in newer & set(result.orphans):
                del result.orphans[digest]
        removed = 0
        for digest in list(result.orphans):
            log.check_lock_held(_nothing_more(removed))
            if store.delete_unchanged(digest, seen[digest]):
                removed += 1
            else:  # a writer keeps it
                del result.orphans[digest]
        for path in result.leftovers:
            log.check_lock_held(_nothing_more(removed))
            remove_tree(path)
            removed += 1
    result.applied = True
    return result


def _nothing_more(removed: int) -> str:
    """What a ``gc --yes`` refused under a removed lock file did not do (`Log.check_lock_held`)."""
    return f"{removed} removed, nothing more" if removed else "nothing was removed"
