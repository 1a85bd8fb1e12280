"""Checking a whole log directory (``log verify``): every file, the chain, envelopes and data.

Scope: `verify_log_dir` runs the one chain-and-root checker (``verify.log_fsck.check_log``) over a
ledger's log directory and adds what only a writer's directory has: ``vkey``, treeState and the
signed checkpoint against each other (the tamper rules of ``state``), older partial tiles that
published checkpoints need (``.state/history``), leftovers of interrupted appends, an envelope
logged twice, and, with the object store, what each entry claims: its envelope is there, hashes
to its digest, names the entry's subject and is signed by the entry's signers (verified for the
keys given), and every blob its manifest lists is there and re-hashes to its digest (or, with
``skip_data``, has the manifest's size: "size only, not re-hashed"), unless erased.

It reads only; nothing is repaired. Every problem is reported with its file and entry index.
Non-scope: trust policy and lineage (``verify.lineage``).
Spec: schemas/log-entry.v1.md (checking).
"""

from __future__ import annotations

import base64
import itertools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.dsse import MAX_ENVELOPE_BYTES, Envelope, verify_envelope
from trajledger.verify.errors import (
    DigestMismatchError,
    FormatError,
    ProofError,
    SignatureError,
    VerificationError,
)
from trajledger.verify.keys import PublicKey
from trajledger.verify.ledger_dir import read_regular
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.log_fsck import LEAF_HASHES, LogCheck, check_log, directory_fetch
from trajledger.verify.logcheck import Finding
from trajledger.verify.merkle import leaf_hash
from trajledger.verify.note import Verifier, verifier_from_vkey
from trajledger.verify.statement import Statement
from trajledger.verify.tiles import (
    TILE_HEIGHT,
    TILE_WIDTH,
    TileReader,
    entries_path,
    format_entry_bundle,
    parse_entry_bundle,
)
from trajledger.verify.tree import manifest_from_statement

from ..encode import verifier_vkey
from ..errors import StoreError
from ..fs import TMP_PREFIX
from ..store import verify_bytes
from .layout import (
    CHECKPOINT_FILE,
    HISTORY_FILE,
    HISTORY_RECORD,
    LEGACY_INDEX_FILE,
    TREE_STATE_FILE,
    VKEY_FILE,
    behind_checkpoint,
    parse_history,
    parse_tile_rel,
    parse_tree_state,
    partial_widths,
    tile_rel,
)
from .lookup import digest_key

if TYPE_CHECKING:
    from ..store import ObjectStore

__all__ = ["DATA_REHASHED", "DATA_SIZE_ONLY", "LogReport", "Problem", "verify_log_dir"]

DATA_REHASHED = "re-hashed"
DATA_SIZE_ONLY = "size only, not re-hashed"


Problem = Finding
"""One thing wrong with a log (`verify.logcheck.Finding`): the file, relative to the log
directory, the entry index when there is one, and what is wrong."""


@dataclass
class LogReport:
    """The result of checking a log directory.

    Attributes:
        directory: the log checked.
        origin: the log's origin, when the verifier key was readable.
        size: the size checked (the larger of treeState's and the signed checkpoint's).
        root: the root rebuilt from the entries, when it could be.
        checkpoint_size: the size of the published checkpoint, when it verified.
        problems: everything wrong, with file and index.
        warnings: harmless findings (leftovers of an interrupted append, stray files).
        entries_checked: entries parsed and chained.
        envelopes_checked: envelopes read from the store and checked against their entry.
        blobs_checked: manifest blobs found in the store and checked.
        data: how blobs were checked: `DATA_REHASHED`, `DATA_SIZE_ONLY`, or None (no store).
    """

    directory: Path
    origin: str = ""
    size: int = 0
    root: bytes | None = None
    checkpoint_size: int | None = None
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    entries_checked: int = 0
    envelopes_checked: int = 0
    blobs_checked: int = 0
    data: str | None = None

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    def problem(self, file: str, message: str, index: int | None = None) -> None:
        """Record a problem."""
        self.problems.append(Problem(file, index, message))

    def to_json(self) -> dict[str, Any]:
        """A stable JSON rendering (``log verify --json``)."""
        return {
            "directory": str(self.directory),
            "origin": self.origin,
            "size": self.size,
            "root": base64.b64encode(self.root).decode() if self.root is not None else None,
            "checkpoint_size": self.checkpoint_size,
            "ok": self.ok,
            "problems": [
                {"file": p.file, "index": p.index, "message": p.message} for p in self.problems
            ],
            "warnings": list(self.warnings),
            "entries_checked": self.entries_checked,
            "envelopes_checked": self.envelopes_checked,
            "blobs_checked": self.blobs_checked,
            "data": self.data,
        }

    def raise_if_failed(self) -> None:
        """Raise if any problem was found.

        Raises:
            VerificationError: listing every problem, one per line.
        """
        if self.problems:
            lines = "\n".join(f"log/{p}" for p in self.problems)
            raise VerificationError(
                f"log {self.directory}: {len(self.problems)} problem(s):\n{lines}"
            )


def _b64(h: bytes) -> str:
    return base64.b64encode(h).decode()


def _read(directory: Path, rel: str, report: LogReport, why: str) -> bytes | None:
    try:
        return read_regular(directory / rel)
    except FileNotFoundError:
        report.problem(rel, f"missing: {why}")
    except OSError as e:
        report.problem(rel, f"cannot read: {e.strerror}")
    return None


class _Entries:
    """The per-entry checks of a trajledger log: envelopes, data, duplicates, erasures."""

    def __init__(
        self,
        report: LogReport,
        store: ObjectStore | None,
        keys: Mapping[str, PublicKey],
        skip_data: bool,
    ) -> None:
        self.report = report
        self.store = store
        self.keys = keys
        self.skip_data = skip_data
        self.env_keys: list[int] = []
        self.erased: set[str] = set()
        self.missing_blobs: list[tuple[int, str, str, str]] = []

    def __call__(self, i: int, entry: LogEntry) -> Iterable[str]:
        self.env_keys.append(digest_key(entry.envelope))
        if entry.kind == "erasure":
            self.erased.add(entry.subject)
        if self.store is None:
            return []
        return self.envelope(i, entry, self.store)

    def envelope(self, i: int, entry: LogEntry, store: ObjectStore) -> list[str]:
        what = f"envelope {entry.envelope} of entry {i}"
        try:
            data = store.get(entry.envelope, limit=MAX_ENVELOPE_BYTES)
            verify_bytes(data, entry.envelope, what)
            envelope = Envelope.from_bytes(data, what)
            statement = Statement.from_bytes(envelope.payload, f"{what}: statement")
        except (StoreError, DigestMismatchError, FormatError) as e:
            return [str(e)]
        self.report.envelopes_checked += 1
        out: list[str] = []
        try:
            statement.check_identity(entry.subject, f"{what}: statement")
        except DigestMismatchError as e:
            out.append(str(e))
        signers = tuple(sorted({s.keyid for s in envelope.signatures}))
        if signers != entry.signers:
            out.append(
                f"{what}: signed by keyids {list(signers)}, entry says {list(entry.signers)}"
            )
        for keyid in signers:
            key = self.keys.get(keyid)
            if key is None:
                continue
            try:
                verify_envelope(envelope, [key], what=what)
            except (SignatureError, FormatError) as e:
                out.append(str(e))
        if "manifest" in statement.predicate:
            try:
                manifest = manifest_from_statement(statement, f"{what}: statement")
            except (FormatError, DigestMismatchError) as e:
                return [*out, str(e)]
            sealed = (_sealed(statement.predicate["sealed"], what)
                      if entry.kind == "rollout-batch" and "sealed" in statement.predicate
                      else {})
            for f in manifest.files:
                # A sealed batch's store holds the ciphertext (digest, size) its record binds to
                # each plaintext file, never the plaintext (schemas/SPEC.md, "Sealed suites").
                path, (digest, size) = ((f"{f.path} (sealed)", sealed[f.path]) if f.path in sealed
                                        else (f.path, (f.digest, f.size)))
                message = self.blob(i, entry.subject, path, digest, size, store)
                if message:
                    out.append(message)
        return out

    def blob(
        self, i: int, subject: str, path: str, digest: str, size: int, store: ObjectStore
    ) -> str | None:
        try:
            store.check_object(digest, size=size, rehash=not self.skip_data)
        except StoreError:
            self.missing_blobs.append((i, subject, path, digest))
            return None
        except DigestMismatchError as e:
            return f"blob {path}: {e}"
        self.report.blobs_checked += 1
        return None

    def missing(self, file_of: Callable[[int], str]) -> None:
        for i, subject, path, digest in self.missing_blobs:
            if subject in self.erased or digest in self.erased:
                continue
            self.report.problem(file_of(i), f"blob {path} ({digest}): not in the store", i)


def _sealed(value: Any, what: str) -> Mapping[str, tuple[str, int]]:
    """The ciphertext (digest, size) of each file of a sealed batch, by manifest path; none
    when its ``sealed`` is malformed (its plaintext files are then looked for, and 'verify'
    reports the record)."""
    from trajledger.verify.sealed_files import Sealed

    try:
        return Sealed.from_json(value, f"{what}: sealed").files
    except FormatError:
        return {}


class _Files:
    """What is present under ``tile/``, and the checks only a log directory needs."""

    def __init__(self, directory: Path, report: LogReport) -> None:
        self.dir = directory
        self.report = report
        self.present: dict[tuple[int, int], dict[int | None, str]] = {}
        self.size = 0

    def scan(self) -> None:
        base = self.dir / "tile"
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                rel = os.path.relpath(os.path.join(dirpath, name), self.dir).replace(os.sep, "/")
                if name.startswith(TMP_PREFIX):
                    self.report.warnings.append(
                        f"{rel}: temp file of an interrupted append (removed by the next writer)"
                    )
                    continue
                parsed = parse_tile_rel(rel)
                if parsed is None:
                    self.report.warnings.append(f"{rel}: not a tile or entry bundle; ignored")
                    continue
                level, index, width = parsed
                self.present.setdefault((level, index), {})[width] = rel

    def older_versions(self, level: int, index: int, items: Sequence[bytes]) -> None:
        """Other versions of a tile present (older partials, partials of a full tile): each
        must be a prefix of the tile of the signed tree (`check_log`'s ``on_tile``: rebuilt
        from the entries, or, where a bundle was changed, its level-0 tile's leaf hashes,
        `LEAF_HASHES`). Versions past the committed size are leftovers, reported by
        `leftovers`."""
        current = len(items)
        limit = TILE_WIDTH if current == TILE_WIDTH else current
        for width, rel in sorted(
            self.present.get((max(level, -1), index), {}).items(),
            key=lambda kv: kv[0] or TILE_WIDTH,
        ):
            if width is None or width >= limit:
                continue
            try:
                data = read_regular(self.dir / rel)
            except OSError as e:
                self.report.problem(rel, f"cannot read: {e.strerror}")
                continue
            if level == LEAF_HASHES:
                self._older_entries(rel, index * TILE_WIDTH, data, items[:width])
                continue
            want = (
                format_entry_bundle(items[:width]) if level < 0 else b"".join(items[:width])
            )
            if data == want:
                continue
            if level < 0:
                self.report.problem(
                    rel,
                    f"differs from the entries it must hold ({len(data)} bytes, want "
                    f"{len(want)})",
                )
            elif len(data) != len(want):
                self.report.problem(
                    rel, f"has {len(data)} bytes, want {len(want)} ({width} hashes)"
                )
            else:
                first = index * TILE_WIDTH if level == 0 else None
                for h in range(width):
                    got, exp = data[32 * h : 32 * h + 32], want[32 * h : 32 * h + 32]
                    if got != exp:
                        self.report.problem(
                            rel,
                            f"hash {h} is {got.hex()}, want {exp.hex()} (the signed tree's)",
                            None if first is None else first + h,
                        )
                        break

    def _older_entries(self, rel: str, first: int, data: bytes, leaves: Sequence[bytes]) -> None:
        """An older version of a changed bundle: its entries must hash to ``leaves``."""
        try:
            entries = parse_entry_bundle(data, width=len(leaves))
        except FormatError as e:
            self.report.problem(rel, str(e))
            return
        for i, (entry, want) in enumerate(zip(entries, leaves, strict=True), first):
            if leaf_hash(entry) != want:
                self.report.problem(rel, f"entry {i} hashes to {leaf_hash(entry).hex()}, want "
                                         f"{want.hex()} (the signed tree's)", i)
                break

    def leftovers(self, size: int) -> None:
        """Tiles past the committed size: an interrupted append; harmless."""
        for (level, index), versions in sorted(self.present.items()):
            shift = TILE_HEIGHT * (level + 1) if level >= 0 else TILE_HEIGHT
            full = size >> shift
            width = (size >> (shift - TILE_HEIGHT)) % TILE_WIDTH
            for w, rel in versions.items():
                if index > full or (index == full and (w is None or w > width)):
                    self.report.warnings.append(
                        f"{rel}: past the committed size {size} (an interrupted append); ignored"
                    )

    def history(self, size: int, required: bool) -> None:
        report = self.report
        path = self.dir / HISTORY_FILE
        try:
            data = read_regular(path)
        except FileNotFoundError:
            if size and required:
                report.problem(
                    HISTORY_FILE, f"missing: the committed sizes up to {size} are unknown"
                )
            elif size:
                report.warnings.append(
                    f"{HISTORY_FILE}: absent; older partial tiles are not checked for presence"
                )
            return
        except OSError as e:
            report.problem(HISTORY_FILE, f"cannot read: {e.strerror}")
            return
        sizes, bad, torn = parse_history(data)
        committed = [s for s in sizes if s <= size]
        if bad is not None:
            report.problem(HISTORY_FILE, f"record {bad} has a wrong CRC-32: the file is damaged")
        elif torn and (not sizes or sizes[-1] < size):
            report.problem(
                HISTORY_FILE,
                f"ends with a partial record ({len(data)} bytes, want a multiple of "
                f"{HISTORY_RECORD.size})",
            )
        elif torn:
            report.warnings.append(
                f"{HISTORY_FILE}: a torn record past the committed size; ignored"
            )
        if any(b <= a for a, b in itertools.pairwise(sizes)):
            report.problem(HISTORY_FILE, "sizes are not strictly increasing")
        if bad is None and size and (not committed or committed[-1] != size):
            last = committed[-1] if committed else "nothing"
            report.problem(
                HISTORY_FILE, f"last committed size is {last}, want {size} (treeState's)"
            )
        if len(committed) < len(sizes) and bad is None:
            report.warnings.append(
                f"{HISTORY_FILE}: sizes past the committed size {size}; ignored"
            )
        # Every partial tile a committed size needs, unless the full tile replaced it.
        needed: set[tuple[int, int, int]] = set()
        for s in committed:
            for level, index, width in partial_widths(s):
                needed.add((level, index, width))
                if level == 0:
                    needed.add((-1, index, width))
        for level, index, width in sorted(needed):
            shift = TILE_HEIGHT * (level + 1) if level >= 0 else TILE_HEIGHT
            if index < size >> shift:
                continue  # the full tile exists now; partials of it may be garbage-collected
            if width not in self.present.get((level, index), {}):
                report.problem(
                    tile_rel(level, index, width),
                    f"missing, but {HISTORY_FILE} records a checkpoint of a size that needs it",
                )


def _bundle_of(index: int, size: int) -> str:
    """The entry bundle holding entry ``index`` in a tree of ``size`` entries."""
    b = index >> TILE_HEIGHT
    width = size - b * TILE_WIDTH
    return entries_path(b, width if width < TILE_WIDTH else None)


def _report_duplicates(directory: Path, size: int, keys: list[int], report: LogReport) -> None:
    ordered = sorted(keys)
    dups = {ordered[i] for i in range(1, len(ordered)) if ordered[i] == ordered[i - 1]}
    if not dups:
        return
    reader = TileReader(directory_fetch(directory), size)
    seen: dict[str, int] = {}
    for b in range(0, size, TILE_WIDTH):
        try:
            raws = reader.entries(b, min(size, b + TILE_WIDTH))
        except (OSError, FormatError):
            continue
        for i, raw in enumerate(raws, b):
            try:
                entry = LogEntry.from_bytes(raw)
            except FormatError:
                continue
            if digest_key(entry.envelope) not in dups:
                continue
            first = seen.setdefault(entry.envelope, i)
            if first != i:
                report.problem(
                    _bundle_of(i, size),
                    f"envelope {entry.envelope} is logged twice, at {first} and {i}; appends "
                    "are idempotent, so one is not from this log's writer",
                    i,
                )


def verify_log_dir(
    directory: Path,
    *,
    vkey: str | None = None,
    store: ObjectStore | None = None,
    keys: Mapping[str, PublicKey] | None = None,
    skip_data: bool = False,
    entry_format: bool = True,
    on_progress: Callable[[int, int], None] | None = None,
) -> LogReport:
    """Check a log directory completely and report every problem with its file and index.

    Steps:
        1. Read the verifier key: ``vkey`` when given (the caller's trust), else the ``vkey`` file.
        2. Read and parse treeState: the committed size and root.
        3. Verify the checkpoint's signature by the log key and its origin; treeState must not
           be behind it, nor at its size with another root.
        4. List every file under ``tile/``.
        5. Check the tree (`verify.log_fsck.check_log`) at the larger of the two sizes against
           the signed root (or treeState's, for an unpublished tail): bundles, leaves, tiles,
           the ``prev`` chain, and for each entry with a store its envelope (present, hashing
           to its digest, naming the subject, signed by the entry's signers, verified for the
           keys in ``keys``) and every blob of its manifest (re-hashed, or with ``skip_data``
           compared by size with the manifest) unless erased. Older partial versions of tiles
           must be prefixes of the rebuilt ones.
        6. An unpublished tail: the tiles must give the checkpoint's root at its size.
        7. The history must end at the committed size; every partial tile a committed size
           needs must be there (unless its full tile is); an envelope is logged once.
        8. Files past the committed size, temp files and unknown names are warnings.
        9. Key handovers (``key-handovers/<n>``): each is signed by both keys it names, they
           chain from the first key to the log's key (``verify.log_key.key_chain``), and each
           handed-over tree is a prefix of the log.

    Args:
        directory: the log directory.
        vkey: the trusted verifier key string; default the log's own ``vkey`` file.
        store: the object store holding the envelopes and blobs, to check them too.
        keys: public keys by keyid whose envelope signatures are verified.
        skip_data: compare each blob's size with its manifest instead of re-hashing it.
        entry_format: False for logs whose entries are not trajledger entries (a Tessera log):
            envelopes are not checked and a missing history is not a problem.
        on_progress: called with (entries done, entries to check).

    Returns:
        The report; ``report.ok`` is False when anything is wrong.
    """
    report = LogReport(directory)
    if store is not None and entry_format:
        report.data = DATA_SIZE_ONLY if skip_data else DATA_REHASHED
    # (1)
    verifier: Verifier | None = None
    text = _read(directory, VKEY_FILE, report, "the log's verifier key is unknown")
    try:
        own = text.decode("utf-8").strip() if text is not None else None
        if own is not None and vkey is not None and own != vkey:
            report.problem(VKEY_FILE, f"is {own!r}, want {vkey!r} (the trusted log key)")
        if vkey is not None or own is not None:
            verifier = verifier_from_vkey(vkey if vkey is not None else str(own))
            report.origin = verifier.name
    except UnicodeDecodeError as e:
        report.problem(VKEY_FILE, f"not UTF-8 text: {e}")
    except FormatError as e:
        report.problem(VKEY_FILE if vkey is None else "(trusted vkey)", str(e))
    # (2)
    state: tuple[int, bytes] | None = None
    data = _read(directory, TREE_STATE_FILE, report, "the committed size is unknown")
    if data is not None:
        try:
            state = parse_tree_state(data)
        except FormatError as e:
            report.problem(TREE_STATE_FILE, str(e))
    # (3)
    cp: Checkpoint | None = None
    cp_data = _read(directory, CHECKPOINT_FILE, report, "no checkpoint is published")
    if cp_data is not None and verifier is not None:
        try:
            cp = verify_checkpoint(cp_data, verifier, origin=verifier.name)
            report.checkpoint_size = cp.size
        except (FormatError, VerificationError) as e:
            report.problem(CHECKPOINT_FILE, str(e))
    if state is not None and cp is not None:
        if state[0] < cp.size:
            report.problem(TREE_STATE_FILE, behind_checkpoint(state[0], cp.size))
        elif state[0] == cp.size and state[1] != cp.root:
            report.problem(
                TREE_STATE_FILE,
                f"root at size {state[0]} is {_b64(state[1])}, but the signed checkpoint says "
                f"{_b64(cp.root)}",
            )
    if state is None and cp is None:
        return report
    size = max(state[0] if state else 0, cp.size if cp else 0)
    trusted: bytes | None
    if cp is not None and cp.size == size:
        trusted, trusted_file = cp.root, CHECKPOINT_FILE
    else:
        assert state is not None
        trusted, trusted_file = state[1], TREE_STATE_FILE
    report.size = size
    files = _Files(directory, report)
    # (4)
    files.scan()
    # (5)
    per_entry = _Entries(report, store, keys or {}, skip_data) if entry_format else None
    result: LogCheck = check_log(
        directory_fetch(directory),
        size,
        trusted,
        entry_format=entry_format,
        on_entry=per_entry,
        on_progress=on_progress,
        on_tile=files.older_versions,
    )
    report.root = result.root
    report.entries_checked = result.entries_checked
    for f in result.findings:
        file = trusted_file if f.file == CHECKPOINT_FILE else f.file
        report.problem(file, f.message, f.index)
    culprits = {id(p) for p in report.problems[len(report.problems) - len(result.findings):][
        : result.culprits]}
    # (6)
    if cp is not None and cp.size < size:
        report.warnings.append(
            f"{CHECKPOINT_FILE}: size {cp.size} lags the committed size {size} (an append was "
            "interrupted before publication; the next writer republishes)"
        )
        try:
            at = TileReader(directory_fetch(directory), size).subtree_root(0, cp.size)
        except (OSError, FormatError, ProofError) as e:
            report.problem(CHECKPOINT_FILE, f"cannot rebuild the root at size {cp.size}: {e}")
        else:
            if at != cp.root:
                report.problem(
                    CHECKPOINT_FILE,
                    f"root at size {cp.size} is {_b64(cp.root)}, want {_b64(at)} (rebuilt "
                    "from the entries)",
                )
    # (7)
    if per_entry is not None:
        per_entry.missing(lambda i: _bundle_of(i, size))
        _report_duplicates(directory, size, per_entry.env_keys, report)
    files.history(size, entry_format)
    # (8)
    files.leftovers(size)
    if (directory / LEGACY_INDEX_FILE).exists():
        report.warnings.append(
            f"{LEGACY_INDEX_FILE}: the lookup index of trajledger 0.1 (derived data now kept "
            "outside log/); removed by the next writer"
        )
    # (9)
    if verifier is not None:
        _check_handovers(directory, verifier_vkey(verifier), size, report)
    # The changed file first (`LogCheck.culprits`), then by entry index.
    report.problems.sort(key=lambda p: (id(p) not in culprits, -1 if p.index is None else p.index))
    return report


def _check_handovers(directory: Path, vkey: str, size: int, report: LogReport) -> None:
    """Step 9 of `verify_log_dir`."""
    from trajledger.verify.ledger_dir import read_handovers
    from trajledger.verify.log_key import HANDOVER_DIR, key_chain, parse_handover
    from trajledger.verify.merkle import EMPTY_ROOT

    try:
        notes = read_handovers(directory)
        if not notes:
            return
        chain = key_chain(parse_handover(notes[0], f"{HANDOVER_DIR}/1").old, notes)
    except (FormatError, VerificationError) as e:
        report.problem(HANDOVER_DIR, str(e))
        return
    if len(chain) == len(notes) and chain[-1].old == vkey:  # signed by the log's own key
        report.warnings.append(
            f"{HANDOVER_DIR}/{len(notes)}: an unfinished key rotation: it hands the log over "
            f"to {chain[-1].new}, but the log's key is still {vkey}; run 'trajledger log "
            "rotate-key' to finish it")
    elif len(chain) != len(notes) or chain[-1].new != vkey:
        report.problem(
            HANDOVER_DIR,
            f"the {len(notes)} key handover(s) do not lead from the first key to the log's key "
            f"{vkey}",
        )
    reader = TileReader(directory_fetch(directory), size)
    for n, h in enumerate(chain, 1):
        at = h.checkpoint
        try:
            root = (EMPTY_ROOT if at.size == 0 else
                    reader.subtree_root(0, at.size) if at.size <= size else None)
        except (OSError, FormatError, ProofError) as e:
            report.problem(f"{HANDOVER_DIR}/{n}", f"cannot rebuild the root at size {at.size}: {e}")
            continue
        if root != at.root:
            report.problem(
                f"{HANDOVER_DIR}/{n}",
                f"hands over a tree of size {at.size} with root {_b64(at.root)}, which is not a "
                "prefix of this log",
            )
