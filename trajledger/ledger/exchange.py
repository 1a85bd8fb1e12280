"""Exchange: export an artifact's evidence as a bundle; import a bundle after verifying it.

Scope: `export_bundle` writes everything needed to verify one artifact and its whole lineage
offline (``schemas/bundle.v1.md``): it walks the lineage with ``verify.lineage`` on the ledger
directory, recording every log entry whose inclusion the walk checks (artifact records,
approvals, revocations, erasures) and every blob it reads or looks for (envelopes, manifests,
data), adds the ledger's trust-policy records, and writes them with a ``c2sp.org/tlog-proof``
per entry against the published checkpoint, in one zstd-compressed tar, atomically.
`import_bundle` streams a bundle's objects once, hashed as read, into a staging directory on
the ledger's disk (``<ledger>/tmp``), verifies the bundle under the importer's policy
(``verify.bundle``) and only then renames its objects into the store (one durability pass,
`store.ObjectStore.adopt_files`), logs the foreign records in this
ledger's own log (the vendor's envelopes, unchanged: the same signatures, now also included
under this log's checkpoint, so this ledger can approve, train on and export the data like its
own), and records a signed ``import`` statement about the foreign artifact (origin log, signed
checkpoint, entries and their inclusion proofs) that says where they came from.

Re-import: importing the same evidence again (same artifact, same log, same checkpoint) is a
no-op that returns the earlier record; objects are content-addressed, so copying them again adds
nothing. A bundle of the same artifact under a newer checkpoint is new evidence and gets a new
record.

Which foreign records are logged here: every bundled entry but trust policies (the
importer's policy history is its own), imports and refusals (the vendor's own business). Each
counts here only as far as the importer's policy trusts its signers: a vendor approval counts
only when the policy names the vendor's approvers. Nothing is logged unless the whole bundle
verified.

Non-scope: reading bundles (``verify.bundle``, the one reader, shared with third parties).

Spec: schemas/bundle.v1.md; schemas/SPEC.md, section "Bundle"; DESIGN §7.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trajledger.verify.bundle import BundleEvidence, Limits, signed_terms, verify_bundle
from trajledger.verify.bundle_index import (
    BUNDLE_FORMAT,
    EXTENSION_FORMAT,
    HANDOVER_FORMAT,
    BundleIndex,
    Member,
    Terms,
)
from trajledger.verify.checkpoint import verify_checkpoint
from trajledger.verify.compact import CompactRange
from trajledger.verify.digest import FileDigest, digest_bytes
from trajledger.verify.dsse import MAX_ENVELOPE_BYTES, Envelope
from trajledger.verify.errors import (
    ConsistencyError,
    FormatError,
    PolicyError,
    ProofError,
    ProvenanceError,
    VerificationError,
)
from trajledger.verify.ledger_dir import LedgerDirEvidence
from trajledger.verify.lineage import LineageVerifier, Report
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.log_key import HANDOVER_DIR, MAX_HANDOVERS, parse_handover, predecessors
from trajledger.verify.merkle import leaf_hash, verify_inclusion
from trajledger.verify.note import verifier_from_vkey
from trajledger.verify.policy import Role, TrustPolicy
from trajledger.verify.policy_settings import published
from trajledger.verify.statement import Statement
from trajledger.verify.tiles import TileReader
from trajledger.verify.tlog_proof import TlogProof
from trajledger.verify.update_bundle import extension_root

from .bundle_keys import bundle_log_key
from .bundle_write import write_bundle
from .catalog import Catalog, origin_name
from .encode import consistency_proof_bytes, tlog_proof_bytes
from .errors import LedgerError, StoreError
from .evidence import ledger_evidence
from .fs import (
    FileSystemSync,
    sync_paths_ahead,
    sync_tree_behind,
    temp_dir,
)
from .keys import Signer
from .signing import canonical_json
from .update_reads import relay_records

if TYPE_CHECKING:
    from .home import LedgerHome
    from .updates import Changes

__all__ = ["ExportResult", "ImportResult", "bundle_log_key", "export_bundle", "import_bundle"]

PRIMARY_EXCLUDED = frozenset({"approval", "revocation", "erasure", "refusal", "import"})
"""Kinds that are statements about an artifact, not the artifact's own record."""


@dataclass(frozen=True)
class ExportResult:
    """What `export_bundle` wrote.

    Attributes:
        path: the bundle file.
        digest: the artifact exported (None: an update bundle of the extension alone).
        size: bytes written (compressed).
        entries: log indices bundled, ascending.
        objects: object members written.
        omitted: data blobs left out (``data=False``).
        erased: data blobs not exported because a verified erasure deleted them (listed in
            ``bundle.json``'s ``erased``).
        terms: each rollout batch of the lineage with its signed licence, consent and
            retention (``bundle.json``'s ``terms``).
        checkpoint_size: the tree size of the bundled checkpoint.
        extension: how many entries of the log's extension it carries (an update).
        report: the lineage walk under the exporter's policy; failures here are what the
            recipient will see too.
    """

    path: Path
    digest: str | None
    size: int
    entries: tuple[int, ...]
    objects: int
    omitted: int
    checkpoint_size: int
    report: Report
    erased: tuple[str, ...] = ()
    terms: tuple[Terms, ...] = ()
    extension: int = 0
    handovers_dropped: int = 0
    """The log key's first handovers left out (a bundle carries the last `MAX_HANDOVERS`)."""


@dataclass(frozen=True)
class ImportResult:
    """What `import_bundle` did.

    Attributes:
        digest: the foreign artifact (None: an update bundle of the extension alone).
        kind: its kind in the foreign log ("" without one).
        name: its subject name ("" without one).
        origin: the foreign log, ``ORIGIN+KEYHASH`` (`catalog.origin_name`).
        index: the log index of the import record (an earlier one on re-import; -1 when
            nothing was new).
        recorded: False when the same evidence had been imported before (nothing appended).
        objects: objects stored (already present ones count).
        report: the verification report of the bundle.
        logged: this log's indices of the foreign records (earlier ones on re-import).
        changes: what the import changed here (`updates.Changes`).
        applied: the size of the foreign log applied now (its checkpoint's): the vendor's
            next update bundle starts there (``export --updates-since``; aud34 finding 4); 0
            when ``unseen``.
        unseen: a full bundle met first: the records held here, brought by other logs and
            signed by its keys (any: one approves here), it does not carry (`unseen`), by digest.
    """

    digest: str | None
    kind: str
    name: str
    origin: str
    index: int
    recorded: bool
    objects: int
    report: Report
    logged: tuple[int, ...] = ()
    changes: Changes | None = None
    applied: int = 0
    unseen: Mapping[str, str] = field(default_factory=dict)


class _Recording:
    """Evidence that remembers what a lineage walk asked for."""

    def __init__(self, inner: LedgerDirEvidence) -> None:
        self.inner = inner
        self.indices: set[int] = set()
        self.read: set[str] = set()
        self.looked_for: set[str] = set()
        self.sizes: dict[str, int] = {}  # of the blobs read or sized: not stat'ed again

    def checkpoint_note(self) -> bytes:
        return self.inner.checkpoint_note()

    def entries(self) -> Iterator[tuple[int, bytes]]:
        return self.inner.entries()

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        self.indices.add(index)
        return self.inner.inclusion_proof(index, size)

    def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        return self.inner.consistency_proof(old_size, new_size)

    def blob(self, digest: str) -> bytes | None:
        data = self.inner.blob(digest)
        if data is not None:
            self.read.add(digest)
            self.sizes[digest] = len(data)
        return data

    def has_blob(self, digest: str) -> bool:
        self.looked_for.add(digest)
        return self.inner.has_blob(digest)

    def blob_path(self, digest: str) -> Path | None:
        self.looked_for.add(digest)
        return self.inner.blob_path(digest)

    def blob_size(self, digest: str) -> int | None:
        self.looked_for.add(digest)
        size = self.inner.blob_size(digest)
        if size is not None:
            self.sizes[digest] = size
        return size

    def omitted(self, digest: str) -> bool:
        return False

    def key_handovers(self) -> list[bytes]:
        return self.inner.key_handovers()

    def extension(self) -> CompactRange | None:
        return self.inner.extension()


def _walking_policy(policy: TrustPolicy, vkey: str) -> TrustPolicy:
    """``policy`` with this ledger's own log key as the log role and no witness requirement:
    the walk collects evidence; the recipient's policy judges it."""
    roles = dict(policy.roles)
    roles["log"] = Role("log", 1, (), (), (vkey,))
    roles["witness"] = Role("witness", 0, (), (), ())
    return dataclasses.replace(policy, roles=roles)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read_entries(ledger: LedgerHome, indices: Iterable[int]) -> dict[int, bytes]:
    """Entries by index, reading each entry bundle (256 entries) once."""
    out: dict[int, bytes] = {}
    wanted = sorted(set(indices))
    by_tile: dict[int, list[int]] = {}
    for i in wanted:
        by_tile.setdefault(i // 256, []).append(i)
    for tile, members in by_tile.items():
        start = tile * 256
        got = ledger.log.entries(start, members[-1] + 1)
        for i in members:
            out[i] = got[i - start]
    return out


def export_bundle(
    ledger: LedgerHome,
    ref: str | None,
    out: Path,
    *,
    data: bool = True,
    policy: TrustPolicy | None = None,
    consistency_from: Sequence[int] = (),
    updates_since: int | None = None,
    now: str | None = None,
) -> ExportResult:
    """Write an evidence bundle for the artifact ``ref`` names, or an update bundle.

    Steps:
        1. Resolve ``ref``; choose the policy (``policy``, else the ledger's policy in force);
           open the ledger as evidence at its published checkpoint (a consistent snapshot).
        2. Walk the lineage (`LineageVerifier`, this log's own key as the log role; data
           blobs by size, as step 8 hashes every object it writes), recording the entries
           whose inclusion it checks and the blobs it reads or looks for.
        3. Add every trust-policy record under the checkpoint, with its policy's bytes.
        4. With ``updates_since`` (an update, format 4): every entry from that size to the
           checkpoint's, the compact range they extend, and the envelopes of those of the
           kinds the policy publishes (`verify.policy_settings.published`: revocations,
           erasures and policies by default), and of the dataset records before the subject
           (a use's held-out check reads every one: unread, it fails closed); others' records
           travel as entries only.
        5. Build a tlog-proof per entry below the extension against the checkpoint
           (`_NodeCache`: each node hashed once), checked before use; the consistency
           proofs asked for; every key handover of the log, each with a consistency proof
           from its tree.
        6. Choose the objects: every blob read (envelopes, manifests); every data blob looked
           for, or, with ``data=False``, list it as omitted. A blob a verified erasure deleted
           is listed as erased (it is not here to export).
        7. State each rollout batch's terms (licence, consent, retention) from its verified
           record, for ``bundle.json``.
        8. Write the bundle: ``bundle.json`` first, then every member by name, into a temp file
           renamed over ``out`` when complete (`bundle_write.write_bundle`: each object read once,
           hashed as written, compressed on a worker thread).

    Args:
        ledger: the open ledger.
        ref: ``NAME@VERSION``, a digest or a unique digest prefix; None for an update bundle
            of the extension alone (``updates_since`` needed).
        out: the bundle file to write.
        data: include data blobs (default); False lists them as omitted.
        policy: the policy whose view the walk takes (default: the ledger's in force).
        consistency_from: tree sizes (of checkpoints the recipient holds) to include
            consistency proofs from.
        updates_since: the tree size the recipient applied (``import`` says it): every entry
            since goes in, so the recipient can take in what changed about what it holds.
        now: the ``created`` time (default now, UTC).

    Returns:
        What was written, with the walk's report.

    Raises:
        RefError: ``ref`` names nothing.
        LedgerError: no policy, a bad consistency or update size, an unreadable log or store.
        FormatError: the store is not on a local disk.
        DigestMismatchError: a stored object does not hash to its name.
    """
    # (1)
    if ref is None and updates_since is None:
        raise LedgerError("export: name what to export, or give --updates-since SIZE")
    item = Catalog(ledger).resolve(ref) if ref is not None else None
    digest = item.digest if item is not None else None
    if policy is None:
        from .policy_state import current_policy

        found = current_policy(ledger)
        if found is None:
            raise LedgerError("export: no trust policy recorded in this ledger; pass --policy FILE")
        policy = found[1]
    state = ledger.trust_state()
    inner = ledger_evidence(ledger)
    evidence = _Recording(inner)
    note = inner.checkpoint_note()
    vkey = ledger.log.vkey
    # (2)
    # Sizes only: every object is hashed as it is written into the bundle (step 8).
    verifier = LineageVerifier(evidence, _walking_policy(policy, vkey), index=state,
                               data="size")
    if digest is not None:
        report = verifier.verify(digest)
    else:
        verifier.finish()
        report = verifier.report("log", ["log"])
    checkpoint = verifier.checkpoint
    if checkpoint is None:
        raise LedgerError(f"export: the log's checkpoint does not verify: {report.failures()}")
    size = checkpoint.size
    # (3)
    indices = set(evidence.indices) | verifier.used
    policies: dict[int, bytes] = {}
    for rec in Catalog(ledger).by_kind("trust-policy"):
        if rec.index >= size:
            continue
        envelope = ledger.store.get(rec.envelope, limit=MAX_ENVELOPE_BYTES)
        policies[rec.index] = _policy_bytes(envelope, rec.digest, rec.index)
        indices.add(rec.index)
        evidence.read.add(rec.envelope)
        evidence.sizes[rec.envelope] = len(envelope)
    if updates_since is None and digest is not None and "import" in published(policy):
        # (upd45) a log publishing its imports carries those that brought the records bundled
        updates_since = min(relay_records(state, set(indices), size), default=None)
    # (4)
    extension = set()
    if updates_since is not None:
        if not 0 <= updates_since <= size:
            raise LedgerError(f"export: updates since size {updates_since}: want 0..{size} (the "
                              "checkpoint's size)")
        extension = set(range(updates_since, size))
    entries = _read_entries(ledger, indices | extension)
    publishes = set(published(policy))
    for i in extension:  # (a dataset before the subject: its held-out check reads it, hist37)
        entry = LogEntry.from_bytes(entries[i])
        read = entry.kind in publishes or (
            entry.kind == "dataset" and item is not None and i < item.index)
        if read and ledger.store.exists(entry.envelope):
            evidence.read.add(entry.envelope)
    # (5)
    # Every proof carries these same checkpoint bytes: their signature is checked once here,
    # and each proof's inclusion path against the root they sign (what `verify_tlog_proof`
    # checks of each, without re-verifying one signature a thousand times).
    signed = verify_checkpoint(note, verifier_from_vkey(vkey), origin=checkpoint.origin)
    small: dict[str, bytes] = {"checkpoint": note}
    tiles = _NodeCache(lambda rel: (ledger.log_dir / rel).read_bytes(), size)
    for i in sorted(indices | extension):
        small[f"entries/{i}"] = entries[i]
        if i in extension:
            continue  # proven by the root the extension rebuilds
        proof = TlogProof(i, tuple(tiles.inclusion_proof(i, size)), note)
        verify_inclusion(i, signed.size, leaf_hash(entries[i]), proof.inclusion, signed.root)
        small[f"proofs/{i}.tlog-proof"] = tlog_proof_bytes(proof)
    if updates_since:
        small[f"proofs/{updates_since}.range"] = consistency_proof_bytes(
            list(tiles.compact_range(updates_since).hashes))
    # An update proves itself from the size applied; a recipient following a key rotation also
    # needs that as a consistency proof (rev24 finding 2).
    for old in sorted({*consistency_from, *([updates_since] if updates_since else [])}):
        if not 0 < old <= size:
            raise LedgerError(
                f"export: consistency from size {old}: want 1..{size} (the checkpoint's size)"
            )
        if old < size:
            small[f"proofs/{old}.consistency"] = consistency_proof_bytes(
                inner.consistency_proof(old, size)
            )
    for i, body in policies.items():
        small[f"policy/{i}.json"] = body
    # Every rotation of the log key, with a proof that the log extends each handed-over tree:
    # a recipient trusting an earlier key follows them (``verify.log_key``). At most the last
    # `MAX_HANDOVERS`, renumbered from 1: more, and every verifier refused the bundle (rev36).
    handovers = ledger.log.key_handovers()
    dropped = max(len(handovers) - MAX_HANDOVERS, 0)
    for n, handover in enumerate(handovers[dropped:], 1):
        small[f"{HANDOVER_DIR}/{n}"] = handover
        at = parse_handover(handover).checkpoint.size
        if 0 < at < size:
            small[f"proofs/{at}.consistency"] = consistency_proof_bytes(
                inner.consistency_proof(at, size)
            )
    # (6)
    files: dict[str, Path] = {}
    omitted: list[str] = []
    erased: list[str] = []
    local = ledger.store.is_local
    for d in sorted(evidence.read | evidence.looked_for):
        # One the walk read or sized was stored then: no look again (one gone since is said as
        # it is written, `_still_stored`); an `isfile` each for the others.
        path = ledger.store.path_of(d) if local and d in evidence.sizes else inner.blob_path(d)
        if path is None:
            if verifier.erased_blob(d) is not None:
                erased.append(d)
            continue  # missing: the walk's report says so
        if d in evidence.read or data:
            files[f"objects/sha256/{d[7:]}"] = path
        else:
            omitted.append(d)
    # (7)
    terms = [t for _batch, t in sorted(signed_terms(verifier, report).items())]
    # (8)
    members = [Member(n, len(b), hashlib.sha256(b).hexdigest()) for n, b in small.items()]
    # Each object's size as the walk found it (a stat each for the others): one that changed
    # since is refused as it is written, as one that changed after this line always was.
    with _still_stored(ledger, files, size):
        members += [Member(n, evidence.sizes.get(f"sha256:{n[15:]}") or p.stat().st_size, n[15:])
                    for n, p in files.items()]
    members.sort(key=lambda m: m.name)
    fmt = (EXTENSION_FORMAT if updates_since is not None
           else HANDOVER_FORMAT if handovers else BUNDLE_FORMAT)
    index = BundleIndex(
        subject=digest,
        origin=checkpoint.origin,
        vkey=vkey,
        created=now or _now(),
        members=tuple(members),
        omitted=tuple(omitted),
        terms=tuple(terms),
        erased=tuple(erased),
        format=fmt,
        extension=updates_since,
    )
    from .progress import no_progress

    with (_still_stored(ledger, files, size),
          (ledger.progress or no_progress)(sum(m.size for m in index.members),
                                           "writing the bundle") as advance):
        written = write_bundle(out, index, small, files, advance)
    return ExportResult(
        path=out,
        digest=digest,
        size=written,
        entries=tuple(sorted(indices | extension)),
        objects=len(files),
        omitted=len(omitted),
        checkpoint_size=size,
        report=report,
        erased=tuple(erased),
        terms=tuple(terms),
        extension=len(extension),
        handovers_dropped=dropped,
    )


@contextlib.contextmanager
def _still_stored(ledger: LedgerHome, files: dict[str, Path], size: int) -> Iterator[None]:
    """An object of the bundle the walk found stored and that is gone when it is written was
    removed meanwhile (by an ``erase`` or a ``gc``): say so, not only which file is missing.

    Raises:
        StoreError: such an object (the bundle is not written).
    """
    try:
        yield
    except FileNotFoundError as e:
        if str(e.filename) not in {str(p) for p in files.values()}:
            raise
        now = ledger.log.size
        raise StoreError(
            f"export: {e.filename}: stored when the lineage was walked at log size {size}, and "
            "gone now: removed meanwhile ("
            + (f"the log grew to {now} entries since: an 'erase' ran, say" if now > size
               else "a 'gc' or an 'erase' ran, say")
            + "); nothing was written: run the export again, which judges the log as it is now"
        ) from e


class _NodeCache(TileReader):
    """A tile reader that keeps every node hash it computes: an export builds a proof for
    each bundled entry, and the proofs of neighbouring entries share most of their nodes
    (each would otherwise hash up to 255 tile hashes again). Every proof is still verified
    against the signed checkpoint before it is written."""

    def __init__(self, fetch: Callable[[str], bytes], size: int) -> None:
        super().__init__(fetch, size)
        self._nodes: dict[tuple[int, int], bytes] = {}

    def node_hash(self, level: int, index: int) -> bytes:
        """`TileReader.node_hash`, computed once per node."""
        got = self._nodes.get((level, index))
        if got is None:
            got = self._nodes[level, index] = super().node_hash(level, index)
        return got


def _policy_bytes(envelope: bytes, subject: str, index: int) -> bytes:
    """The canonical bytes of the policy a trust-policy record is about (its subject)."""
    what = f"trust-policy record {index}"
    try:
        statement = Statement.from_bytes(Envelope.from_bytes(envelope, what).payload, what)
        body = canonical_json(statement.predicate.get("policy"))
    except (ProvenanceError, TypeError, ValueError) as e:
        raise LedgerError(f"export: {what}: cannot read its policy: {e}") from e
    if digest_bytes(body) != subject:
        raise LedgerError(
            f"export: {what}: its policy hashes to {digest_bytes(body)}, want {subject}"
        )
    return body


# -- import --------------------------------------------------------------------------------


def _check_signers(ledger: LedgerHome, policy: TrustPolicy, signers: Sequence[Signer]) -> None:
    """The import's signers are approvers of ``policy``, as many as its threshold; each
    refusal names the way on: a ``--key`` for each, and the approver keys this ledger holds
    (upd47: out46 saw `wants 2` and no way on)."""
    approvers = policy.role("approver")
    ids = {s.keyid for s in signers}
    outsiders = sorted(s.name for s in signers if s.keyid not in approvers.keyids)
    want, here = max(approvers.threshold, 1), []
    for path in ledger.keys.list_private():
        with contextlib.suppress(LedgerError, OSError, ValueError):
            here += [path.stem] if ledger.keys.public(path.stem).keyid in approvers.keyids else []
    way = (f": give --key for each of {want} approver key(s) (" + (f"the policy's approver keys "
           f"here: {', '.join(here)}" if here else "this ledger holds none of them") + ")")
    if outsiders:
        raise PolicyError(f"import: key(s) {', '.join(outsiders)} are not approvers in policy "
                          f"{policy.name!r}{way}")
    if len(ids) < want:
        raise PolicyError(f"import: signed by {len(ids)} approver key(s), policy "
                          f"{policy.name!r} wants {want}{way}")


def _proof_for_import(ev: BundleEvidence) -> Callable[[int, int], list[bytes]]:
    """``ev``'s consistency proofs, for following the log's key handovers at import: a proof
    it lacks names the export an import takes (out53 finding 4: `--consistency-from`, the
    verifier's word, made a bundle the import refused next for lacking the log since)."""
    def proof(old: int, new: int) -> list[bytes]:
        try:
            return ev.consistency_proof(old, new)
        except FileNotFoundError as e:
            raise FileNotFoundError(
                f"the bundle holds no consistency proof from size {old} to {new}: ask for a "
                f"bundle exported with --updates-since {old}, which carries the log since then"
            ) from e
    return proof


def _checked_proof(ev: BundleEvidence, index: int, entry: bytes, what: str) -> list[bytes]:
    """The bundle's inclusion proof of entry ``index`` under its checkpoint, checked.

    A proof the bundle carries (every entry's below an update's extension) was checked by
    `BundleEvidence.open` against this root, for these entry bytes, at this size
    (`verify.logcheck.check_entries`, ``carried``: also when the entries rebuild the whole
    tree, which needs none; an open that found a problem raised): it is not checked twice
    (xfer45). One of the extension's, built from its compact range, is checked here.

    Raises:
        ProofError: it leads to another root.
    """
    proof = ev.inclusion_proof(index, ev.checkpoint.size)
    if ev.index.extension is None or index < ev.index.extension:
        return proof
    try:
        verify_inclusion(index, ev.checkpoint.size, leaf_hash(entry), proof, ev.checkpoint.root)
    except ProofError as e:
        raise ProofError(f"{what}: proofs/{index}.tlog-proof: {e}") from e
    return proof


def _primary(ev: BundleEvidence, subject: str) -> tuple[int, LogEntry, Statement]:
    """The foreign artifact's own record in the bundle (verified by `verify_bundle`)."""
    for i, data in ev.entries():
        entry = LogEntry.from_bytes(data)
        if entry.subject == subject and entry.kind not in PRIMARY_EXCLUDED:
            envelope = ev.blob(entry.envelope)
            if envelope is not None:
                return i, entry, Statement.from_bytes(Envelope.from_bytes(envelope).payload)
    raise FormatError(f"bundle {ev.path.name}: no record of {subject} in the bundle")


@contextlib.contextmanager
def _whole_disk(ledger: LedgerHome) -> Iterator[FileSystemSync | None]:
    """The import's durability by ``syncfs`` (`fs.FileSystemSync`): its descriptor opened on
    ``<ledger>/tmp`` before the bundle is read (``syncfs`` reports the writeback errors met
    since then), when the store is on that file system, local and durable, and ``syncfs`` is
    available; closed on the way out. None: each object and directory is fsynced instead."""
    if not (ledger.store.is_local and ledger.store.durable):
        yield None
        return
    disk = FileSystemSync.open(ledger.scratch, ledger.store.root)
    if disk is None:
        yield None
        return
    try:
        yield disk
    finally:
        disk.close()


@contextlib.contextmanager
def _synced_behind(
    ledger: LedgerHome, staging: Path, disk: FileSystemSync | None = None,
) -> Iterator[Callable[[], None]]:
    """While the bundle is read, the objects staged so far go to the disk on a thread (by
    ``disk``: its file system flushed every 0.1 s; else `fs.sync_tree_behind`), so that the
    pass after the reading (`_synced_ahead`) finds most of their data written; yields the
    stop (`_synced_ahead` calls it once the reading is over; it raises a failed sync), also
    called on the way out, before the staging directory is removed. Nothing when the store
    does not fsync or is not local."""
    if not (ledger.store.is_local and ledger.store.durable):
        yield lambda: None
        return
    end = disk.behind() if disk is not None else sync_tree_behind(staging)
    try:
        yield end
    except BaseException:
        with contextlib.suppress(OSError):
            end()
        raise
    end()


@contextlib.contextmanager
def _synced_ahead(
    ledger: LedgerHome, ev: BundleEvidence, read: Callable[[], None] = lambda: None,
    disk: FileSystemSync | None = None,
) -> Iterator[Callable[[], None] | None]:
    """The staged objects' data written to the disk on a thread while the bundle is verified
    (by ``disk``: one flush of its file system; else `fs.sync_paths_ahead`); yields the wait
    (None when the store does not fsync or is not local: `store.ObjectStore.adopt_files` then
    does as it does). Waited for on the way out, so no sync outlives the staging directory;
    a refused bundle abandons a pass by paths first (its objects are not kept: the refusal
    waits for one batch of fsyncs, not all of them; a flush in flight is waited for)."""
    read()  # (the pass behind the reading ends: this one takes every object)
    if not (ledger.store.is_local and ledger.store.durable):
        yield None
        return
    stop = threading.Event()
    wait = disk.ahead() if disk is not None else sync_paths_ahead(list(ev.objects.values()),
                                                                  stop)
    try:
        yield wait
    except BaseException:
        stop.set()
        raise
    finally:
        with contextlib.suppress(OSError):
            wait()  # a failure was raised to whoever needed the data durable


def max_bundle_file(limits: Limits | None = None) -> int:
    """The most bytes a bundle file read within ``limits`` (default `Limits()`) can hold: the
    uncompressed total plus zstd's worst-case growth (ZSTD_COMPRESSBOUND: 1/256, and frame
    headers, given 1 MiB)."""
    total = (limits or Limits()).total
    return total + (total >> 8) + (1 << 20)


def import_bundle(
    ledger: LedgerHome,
    path: Path,
    policy: TrustPolicy,
    signers: Signer | Sequence[Signer],
    *,
    now: dt.datetime | None = None,
    limits: Limits | None = None,
) -> ImportResult:
    """Verify a bundle under ``policy``, then take in what it brings and record the import.

    Steps:
        1. The signers must meet the approver threshold of ``policy`` (import records are
           signed by approvers): checked first, said after the bundle's own problems (a file
           that is no bundle, or does not verify, is refused as such; left37).
        2. Open the bundle (every hostile-input check of `BundleEvidence.open`), its objects
           streamed once, each hashed as read, into a staging directory under
           ``<ledger>/tmp``, whose data goes to the disk on a thread as it comes
           (`_synced_behind`), then all of it once read (`_synced_ahead`, before any is moved):
           on Linux 5.8 and later by flushing the file system (``syncfs``, `_whole_disk`: once
           more after the renames, before the log commit), else by an fsync of each file.
        3. Verify it (`verify_bundle`, data blobs by size: each already hashed to its name):
           the log key, the proofs, the signatures, roles and thresholds, approvals,
           revocations, the policy history. A failure refuses the whole bundle, and nothing
           has been stored (the staging is removed), unless every failure is a revocation that
           counts under ``policy`` (the artifact is then taken in as revoked: its records are
           kept and every decision refuses them). Each bundled inclusion proof must lead to the
           checkpoint's root (it goes into the import record; the verification of a bundle of
           the whole tree rebuilds the root instead and reads none).
        4. The bundle's log must extend what was accepted from it before (`updates.origin_state`:
           the size checked and the size applied, per log key): no rollback, no fork; and
           when the log grew past the size applied, the bundle must carry its extension from
           at or below that size (export ``--updates-since``), whose entries rebuild its root.
        5. Choose what to take in (`updates.select`): the lineage asked for, and the
           extension's entries about what this ledger holds or asks for; then take it in and
           record the import (`updates.apply_update`: objects renamed in, records logged in their
           order, the import statement signed, revocations, erasures and key compromises
           judged here). The floor advances before the first append (checked again in the
           state's transaction: a `monitor` of the same log, which holds no lock of this
           ledger, may have advanced it meanwhile), the size applied after the import record.
           Steps 4 and 5 hold the log's writer lock: two imports of one log at once (two views
           of a fork) are judged one after the other, as if run in turn.

    Raises:
        PolicyError: the signers are not enough approvers.
        FormatError, VerificationError: the bundle is malformed or does not verify.
        ConsistencyError: a rollback, a fork, or a newer log without its extension.
        StoreError, LogError: the store or log cannot be written.
    """
    from .first_contact import (  # (not at import: export needs neither)
        applied_across,
        applied_for,
        applied_why,
        brought,
        marked,
        relayed,
        saw,
        unexamined,
        unseen,
    )
    from .update_compromises import own_signed, owners_declaration
    from .updates import (
        Changes,
        Update,
        apply_update,
        earlier_import,
        origin_state,
        select,
        store_objects,
    )

    keys = [signers] if isinstance(signers, Signer) else list(signers)
    # Another log's records are judged by the policy in force alone: the policies it replaced
    # (`TrustPolicy.earlier`) hold from log indices of this ledger's log, not of the bundle's
    # (a vendor's record 4 was judged by the buyer's policy in force at the buyer's index 4).
    policy = dataclasses.replace(policy, earlier=())
    # (1) said after the bundle's own problems (left37): no approver is sought for a bad file
    try:
        _check_signers(ledger, policy, keys)
        signers_short: PolicyError | None = None
    except PolicyError as e:
        signers_short = e
    ledger.log.require_signer()
    # (2)
    with (temp_dir(ledger.scratch) as staging,
          _whole_disk(ledger) as disk,
          _synced_behind(ledger, Path(staging), disk) as read,
          BundleEvidence.open(path, limits=limits, workdir=Path(staging)) as ev,
          _synced_ahead(ledger, ev, read, disk) as synced):
        # (3)
        report = verify_bundle(ev, policy, now=now, data="size")
        n, failed = report.count()
        if any(c.what != "revoked" for _node, checks, _d in report.causes() for c in checks):
            from .relayed_keys import relayed_keys  # (who to ask about a key: out59)

            more = relayed_keys(ev, report.failures(), policy.role("log").vkeys)
            raise VerificationError(
                f"import {path.name}: {failed} of {n} checks failed; nothing imported\n"
                + "\n".join([*(f + more.get(f, "") for f in report.failures()),
                              *([str(signers_short)] if signers_short else [])]))
        if signers_short is not None:
            raise signers_short
        # Each inclusion proof taken into the import record signed here leads to the root (a
        # proof changed in transit was signed; review rev17): those carried were checked by
        # `open`, also in a bundle of the whole tree (redo15), the extension's are here.
        inclusion = {i: _checked_proof(ev, i, data, f"import {path.name}")
                     for i, data in ev.entries()}
        vkey = bundle_log_key(ev, policy, f"import {path.name}")  # never bundle.json's word
        if why := owners_declaration(  # (out59's Left 1(c): before anything is written)
                ledger, policy, {i: LogEntry.from_bytes(raw) for i, raw in ev.entries()},
                {vkey, *predecessors([vkey], ev.key_handovers())}, ev.blob):
            raise VerificationError(f"import {path.name}: {why}")
        # (4) and (5) hold the log's writer lock: the check against what was accepted
        # from this log before, and taking this view in, are one step (another import of
        # the same log, a fork of this view, may have been taken in since step 3: rev13)
        with ledger.log.exclusive():
            cp = ev.checkpoint
            what = f"import {path.name}: the log {origin_name(vkey)}"
            # (4)
            note_bytes = ev.checkpoint_note()
            origin = origin_state(ledger, vkey, distinct=policy.role("log").vkeys,
                                  handovers=ev.key_handovers(), proof=_proof_for_import(ev),
                                  note=note_bytes)
            prior = origin.floor_checkpoint()
            if prior is not None and cp.size < prior.size and ev.subject is not None and (
                    (earlier := earlier_import(ledger, ev.subject, (cp.origin, cp.size, cp.root),
                                               vkey)) is not None):
                # This very tree was accepted here with this artifact, and the floor extended
                # it since: an older bundle imported again, no record to take in, no rollback
                # (out43 finding 6); the data a first import without them lacked are stored
                # (verified in step 3; not an erased artifact's: rev41 finding 2). Any other
                # smaller tree is refused below.
                _index, entry, statement = _primary(ev, ev.subject)
                changes = Changes(origin_name(vkey))
                lacking = {d: FileDigest(p, ev.blob_size(d) or 0, d[7:])
                           for d, p in ev.objects.items() if not ledger.store.exists(d)}
                stored = store_objects(ledger, policy, Update(
                    vkey, note_bytes, {}, (), (), inclusion.__getitem__, lacking, None, 0,
                    not ev.index.omitted, synced, disk.sync if disk is not None else None,
                    frozenset({vkey})), changes, what=f"import {path.name}",
                    known=set(ev.objects)) if lacking else 0  # (upd45: an erased one's manifest)
                return ImportResult(ev.subject, entry.kind, next(
                    s.name for s in statement.subjects if s.digest == ev.subject),
                    origin_name(vkey), earlier, False, stored, report, (), changes,
                    applied_for(origin) or 0)
            if prior is not None and cp.size < prior.size and ev.subject is None and (
                    earlier_import(ledger, None, (cp.origin, cp.size, cp.root), vkey)
                    is not None):  # an update bundle taken in before, arriving again (out53)
                return ImportResult(None, "", "", origin_name(vkey), -1, False, 0, report, (),
                                    Changes(origin_name(vkey)), applied_for(origin) or 0)
            proof: list[bytes] = []
            if prior is not None and 0 < prior.size < cp.size:
                with contextlib.suppress(FileNotFoundError):
                    proof = ev.consistency_proof(prior.size, cp.size)
            root_at = functools.partial(extension_root, ev)  # the roots the extension rebuilds
            carried: list[str] = []  # (a log marked under the key it rotated from: hist40)
            applied = applied_across(ledger, vkey, applied_for(origin), ev.key_handovers(), cp,
                                     ev.consistency_proof, root_at, carried)
            ext = ev.extension()
            if applied is not None and cp.size > applied and (ext is None or ext.size > applied):
                raise ConsistencyError(
                    f"{what}: unprovable: the bundle does not carry the log since size {applied}, "
                    f"{carried[0] if carried else applied_why(origin)} ("
                    + (f"its extension starts at {ext.size}" if ext is not None else
                       "it holds no extension") + f"; its checkpoint has size {cp.size}): ask for "
                    f"a bundle exported with --updates-since {applied}",
                    old=prior, new=cp,
                )
            if (why := unexamined(ledger, applied, ext.size if ext else None)) is not None:
                raise ConsistencyError(f"{what}: {why}", old=prior, new=cp)  # out37 finding 1
            try:
                origin.check_extends(note_bytes, proof, what=what, root_at=root_at)
            except ConsistencyError as e:  # a fork or rollback: what to do (out50)
                if str(e).startswith(f"{what}: unprovable"):
                    raise  # (it names the export to ask for)
                raise ConsistencyError(
                    f"{e}; nothing was imported: keep this bundle (the log's signed checkpoint "
                    "it carries) as evidence, with the one accepted before (your state), and "
                    "ask the log's owner which tree it stands by; nothing more from this log "
                    "is imported until a bundle extends the one accepted before",
                    old=e.old, new=e.new, proof=e.proof) from e
            # (5)
            subject = ev.subject
            artifact = None
            if subject is not None:
                index, entry, statement = _primary(ev, subject)
                name = next(s.name for s in statement.subjects if s.digest == subject)
                artifact = {"digest": subject, "kind": entry.kind, "name": name, "logIndex": index}
            elif applied is not None and cp.size <= applied:
                return ImportResult(None, "", "", origin_name(vkey), -1, False, 0, report,
                                    (), Changes(origin_name(vkey)), applied)
            entries = dict(ev.entries())
            start = ext.size if ext is not None else None
            # This log's keys: its current one and those it rotated from, the handovers that
            # lead to it; not every handover the bundle carries (another log's are public,
            # signed by that log's two keys: copied in, they made its artifacts this log's own
            # to stop: rev34 finding 1).
            logs = {vkey, *predecessors([vkey], ev.key_handovers())}
            # (each object's size as it streamed: not bundle.json's list walked once more)
            objects = {d: FileDigest(p, ev.blob_size(d) or 0, d[7:]) for d, p in ev.objects.items()}
            waiting = marked(logs) if start == 0 else ()  # what a read from 0 may clear (`saw`)
            taken, consulted = select(ledger, entries, extension=start,
                                      asked=set(report.nodes),
                                      have=lambda d: d in objects or ledger.store.exists(d),
                                      logs=logs)
            hidden = unseen(ledger, applied, start, logs, entries,  # then nothing applied
                            policy.role("approver").keyids, ev.blob, {k.keyid for k in keys})
            if start is not None:  # an update alone, or an artifact's bundle since SIZE (upd46):
                # the envelopes of its extension's records neither taken in nor consulted are
                # about what this ledger does not hold: no record here would name them (orphans)
                used = {LogEntry.from_bytes(entries[i]).envelope for i in (*taken, *consulted)}
                idle = {LogEntry.from_bytes(entries[i]).envelope for i in entries if i >= start}
                objects = {d: f for d, f in objects.items() if d in used or d not in idle}
            update = Update(vkey, note_bytes, entries, taken, consulted,
                            inclusion.__getitem__, objects, artifact,
                            0 if hidden else cp.size, not ev.index.omitted, synced,
                            disk.sync if disk is not None else None, frozenset(logs))
            # The floor advances before anything is appended, checked again in the state's
            # write transaction: a monitor of this log (which takes no ledger's lock) may have
            # advanced it to another view since step 4; the size applied, after (fix11). The
            # first write under the lock: it must still be the lock file's (fix13)
            ledger.log.check_lock_held("nothing was imported")
            parsed = [LogEntry.from_bytes(raw) for raw in entries.values()]  # (once each)
            signed = {k for x in parsed for k in x.signers}
            own = own_signed(ledger, logs, entries, ev.blob)  # (`saw`: verified, rev53's Left)
            brought(ledger, [entries[i] for i in taken], logs, ev.blob,  # unread elsewhere
                    policy.role("approver").keyids)

            def floor() -> None:  # and its keys; read from 0, what waited to be read is
                origin.advance_floor(note_bytes, proof, what=what, root_at=root_at,
                                     applied=update.applied)
                saw(logs, signed, start, waiting, own)

            origin.advance_floor(note_bytes, proof, what=what, root_at=root_at)
            done = apply_update(ledger, policy, keys, update, what=f"import {path.name}",
                                floor=floor, locked=True)
            relayed(done.changes, logs)  # a stop another log signed: named
            return ImportResult(subject, str(artifact["kind"]) if artifact else "",
                                str(artifact["name"]) if artifact else "",
                                origin_name(vkey), done.index, done.recorded,
                                len(objects), report, done.logged, done.changes,
                                update.applied, hidden)
