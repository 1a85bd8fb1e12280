"""Evidence bundles: reading one as hostile input, and verifying an artifact from it offline.

Scope: a bundle (``schemas/bundle.v1.md``) is a zstd-compressed ustar/pax tar of regular files:
``bundle.json`` (the index: format, subject, log origin and key, member list with sizes and
SHA-256), ``checkpoint`` (the log's signed checkpoint), ``entries/<i>`` (log entries),
``proofs/<i>.tlog-proof`` (``c2sp.org/tlog-proof@v1`` of each entry against that checkpoint),
optional ``proofs/<n>.consistency`` (a consistency proof from tree size ``n``),
``objects/sha256/<hex>`` (envelopes, manifests, data), ``policy/<i>.json`` (the policy that
trust-policy record ``i`` is about) and, in format 3, ``key-handovers/<n>`` (each rotation of the
log's key, ``verify.log_key``, so that a verifier trusting an earlier key follows it).
`BundleEvidence` implements `verify.evidence.Evidence` over one; `verify_bundle` runs the
lineage verifier on it under a caller's trust policy.

How a bundle is read (`BundleEvidence.open`): one streaming pass, never a whole-file read. The
zstd stream is decompressed through a counter that refuses more than `Limits.total` bytes (and a
first frame declaring more is refused before decompressing); the tar is parsed by the small
strict reader of `verify.bundle_stream`, not by ``tarfile``, so no header can make it allocate
more than `Limits.pax` bytes. ``bundle.json`` must come first; every later member must be listed
in it, once, with the declared size. Objects are streamed into a private temporary directory
(mode 0700) under names derived from their validated digest, never from the member's path; every
other member is small and kept in memory under a per-kind cap. Each member is hashed while it is
read; objects must also hash to their own name. The directory is removed by `close` (use the
evidence as a context manager).

Refused, with a message naming the member: absolute paths, ``..``, any non-canonical spelling,
names outside the layout, symbolic and hard links, devices, directories, FIFOs, GNU and global
pax extensions, duplicate members, members not listed in ``bundle.json``, listed members that
are missing, a size or SHA-256 other than listed, proofs for another checkpoint or entry, and
anything decompressing beyond the limits.

Non-scope: trust. A bundle is an unauthenticated container; what makes its contents believable
is the trust policy's log key over the checkpoint, the Merkle proofs, and the signatures over
envelopes, all checked by `verify.lineage`. ``created`` is informational and not authenticated.
A bundle cannot prove absence: records left out of it (a later revocation) are invisible to it.
Writing bundles is ``ledger.exchange``. The index format (``bundle.json``, member names, its
formats) is `verify.bundle_index`; `BundleIndex` (the type of `BundleEvidence.index`) and
`Limits` (of `BundleEvidence.open`) are re-exported here.

Spec: schemas/bundle.v1.md; c2sp.org/tlog-proof; c2sp.org/tlog-checkpoint; POSIX pax/ustar.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import tempfile
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from .bundle_index import CHECKPOINT_NAME, INDEX_NAME, LAYOUT, BundleIndex, Terms, check_member_name
from .bundle_stream import BLOCK, SMALL_KINDS, Bounded, Limits, open_zstd, tar_headers
from .checkpoint import Checkpoint, verify_checkpoint
from .digest import digest_bytes, parse_digest
from .errors import DigestMismatchError, FormatError, ProofError, ProvenanceError, SignatureError
from .evidence import read_blob_file
from .lineage import INFO, OK, LineageVerifier, Node, Record, Report, name_files
from .log_entry import LogEntry
from .logcheck import check_entries
from .note import Note, Verifier, verifier_from_vkey
from .policy import TrustPolicy, policy_digest
from .policy_history import follow_history
from .predicates import RolloutBatch
from .strict_json import load_object
from .tlog_proof import TlogProof

if TYPE_CHECKING:
    from .compact import CompactRange

__all__ = ["BundleEvidence", "BundleIndex", "Limits", "signed_terms", "verify_bundle"]
_KEEP = 1 << 16  # objects up to this size are kept in memory as read, 1,024 x it in all
# The kinds whose caps differ (`Limits.cap`), by their names' first segment (`LAYOUT`).
_KINDS = {LAYOUT[kind][0].partition("/")[0]: kind for kind in ("object", "entry")}

class BundleEvidence:
    """`verify.evidence.Evidence` over an exported bundle. Build it with `open`.

    After `open` returned, the bundle is well formed: every member is listed, hashes as listed,
    and sits where the layout says; objects hash to their names; every entry has a proof of
    inclusion under the bundled checkpoint and that proof holds; the checkpoint is signed by the
    vkey the index names. None of that is trust: the policy's log key, the signatures and the
    lineage rules are `verify_bundle`'s.

    Attributes:
        path: the bundle file.
        index: the parsed ``bundle.json``.
        checkpoint: the bundled checkpoint (signature checked against ``index.vkey`` only).
        touched_entries: entry indices whose proofs a verifier asked for.
        touched_blobs: digests a verifier asked for.
    """

    def __init__(self) -> None:
        """Use `BundleEvidence.open`."""
        self.path = Path()
        self.index: BundleIndex
        self.checkpoint: Checkpoint
        # Every member but the objects, by kind and the number its name carries (0: checkpoint).
        self._small: dict[str, dict[int, bytes]] = {kind: {} for kind in SMALL_KINDS}
        self._entries = self._small["entry"]
        self._proofs: dict[int, TlogProof] = {}
        self._consistency: dict[int, list[bytes]] = {}
        self._extension: CompactRange | None = None
        self._objects: dict[str, Path] = {}
        self._sizes: dict[str, int] = {}  # each object's, as streamed
        self._kept: dict[str, bytes] = {}  # small objects' bytes, as hashed (`_KEEP`)
        self._dir: Path | None = None
        self._cleanup: Callable[[], None] = lambda: None
        self.touched_entries: set[int] = set()
        self.touched_blobs: set[str] = set()

    # -- opening --------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        limits: Limits | None = None,
        workdir: Path | None = None,
    ) -> BundleEvidence:
        """Read and check a bundle; objects go to a private temporary directory.

        Steps:
            1. Open the zstd stream with its bounds (a first frame declaring more than
               ``limits.total`` is refused unread).
            2. Read the tar: ``bundle.json`` first (parsed strictly, its sizes summed against
               the limits), then each member: the next the index lists (its order), of the
               listed size, within its kind's cap, hashing as listed (an object to its name)
               as it is read; reading stops at the first member that is not as listed.
            3. After the stream: every listed member arrived.
            4. Cross-check the members (`_check_members`).

        Args:
            path: the bundle file.
            limits: bounds on sizes; default `Limits()`.
            workdir: where to make the temporary directory (default: the system's).

        Raises:
            FormatError: the bundle is malformed, hostile, or larger than the limits.
            DigestMismatchError: a member does not hash as listed.
            ProofError: an entry is not included under the bundled checkpoint.
            SignatureError: the checkpoint is not signed by the index's vkey.
            OSError: the file cannot be read, or zstandard is not installed.
        """
        limits = limits or Limits()
        self = cls()
        self.path = Path(path)
        what = f"bundle {self.path.name}"
        self._dir = Path(tempfile.mkdtemp(prefix="trajledger-bundle-", dir=workdir))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True)
        try:
            # (1)
            fh, stream = open_zstd(self.path, limits)
            with fh:
                self._read_members(stream, limits, what)
            # (4)
            self._check_members(what)
        except BaseException:
            self.close()
            raise
        return self

    def _read_members(self, stream: Bounded, limits: Limits, what: str) -> None:
        # (2) Each member is checked once, as it streams: its name against the layout and the
        # index, its size against the index, its bytes hashed on the way to memory or disk.
        assert self._dir is not None
        objects_dir = self._dir / "objects"
        objects_dir.mkdir(mode=0o700)
        headers = tar_headers(stream, limits, what)
        first = next(headers, None)
        if first is None:
            raise FormatError(f"{what}: empty archive, no {INDEX_NAME}")
        name, size = first
        here = f"{what}: member {name}"
        if check_member_name(name)[0] != "index":
            raise FormatError(f"{here}: the first member must be {INDEX_NAME}")
        if size > limits.index:
            raise FormatError(f"{here}: {size} bytes, limit {limits.index}")
        index, need = self._read_index(stream.exact(size, here), limits, what)
        stream.exact(-size % BLOCK, here)
        # Objects go to disk: refuse before writing any when they cannot fit.
        free = shutil.disk_usage(objects_dir).free
        if need > free:
            raise OSError(
                f"{what}: its objects need {need} bytes where they are staged, "
                f"{free} are free in {objects_dir.parent.parent}; free space "
                "there (or, to verify only, set TMPDIR to a larger disk)"
            )
        # Members come in the index's (name) order; reading stops at the first that is not the
        # next listed, as listed: no more of a hostile archive is read than its first lie. So a
        # listed name before the next listed one was read already.
        listed_in_order, kept = iter(index.members), _KEEP << 10
        for name, size in headers:
            kind, key = check_member_name(name)
            here = f"{what}: member {name}"
            if (listed := next(listed_in_order, None)) is None or listed.name != name:
                raise FormatError(
                    f"{here}: not listed in {INDEX_NAME} (extra member)" if index.member(name)
                    is None else f"{here}: appears twice (duplicate member)" if listed is
                    None or name < listed.name else f"{what}: member {listed.name}: listed in "
                    f"{INDEX_NAME} but missing, or out of order ({name} came in its place)")
            # Equal to the listed size, which `_read_index` held to the kind's cap.
            if size != listed.size:
                raise FormatError(f"{here}: {size} bytes, {INDEX_NAME} says {listed.size}")
            h = hashlib.sha256()
            if kind == "object":
                target = objects_dir / key
                # Read-only from the start (the directory is private): an importer's store
                # takes it as it is, without a chmod per object. Not on Windows, where the
                # clean-up (rmtree) could not remove a read-only file: the bundle's data left.
                mode = 0o444 if os.name == "posix" else 0o600
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
                small = size <= min(_KEEP, kept)  # an envelope, a manifest: kept for `blob`
                with os.fdopen(fd, "wb") as out:
                    for chunk in [stream.exact(size, here)] if small else stream.chunks(size, here):
                        h.update(chunk)
                        out.write(chunk)
                if small:
                    self._kept["sha256:" + key], kept = chunk, kept - size
                self._objects["sha256:" + key], self._sizes["sha256:" + key] = target, size
            else:
                data = stream.exact(size, here)
                h.update(data)
                self._small[kind][int(key or 0)] = data
            pad = stream.exact(-size % BLOCK, here)
            if pad.count(0) != len(pad):
                raise FormatError(f"{here}: non-zero tar padding")
            got = h.hexdigest()
            if got != listed.sha256 or (kind == "object" and got != key):
                raise DigestMismatchError(
                    f"{here}: content hashes to sha256:{got[:16]}…, " + (
                        "not its name" if got == listed.sha256 else
                        f"{INDEX_NAME} says sha256:{listed.sha256[:16]}…") + ": changed since it "
                    "was made: get it again and compare its SHA-256 with the sender's; the same: "
                    "tampered at the source", subject=what)  # (out44 finding 7)
        # (3)
        if (missing := next(listed_in_order, None)) is not None:
            more = sum(1 for _ in listed_in_order)
            raise FormatError(f"{what}: member {missing.name}: listed in {INDEX_NAME} but "
                              f"missing" + (f" (and {more} more after it)" if more else ""))
        self.index = index

    @staticmethod
    def _read_index(data: bytes, limits: Limits, what: str) -> tuple[BundleIndex, int]:
        """``bundle.json`` parsed, its member list walked once for its sums (each name was
        checked in the layout as it was parsed: the kind is its first segment's); returns it and
        the bytes of its objects."""
        try:
            index = BundleIndex.from_bytes(data)
        except FormatError as e:
            raise FormatError(f"{what}: member {e}") from e
        if len(index.members) + 1 > limits.members:
            raise FormatError(f"{what}: {INDEX_NAME} lists {len(index.members)} members, "
                              f"limit {limits.members}")
        total = on_disk = 0
        over = None  # the first member over its kind's cap (said after the total)
        for m in index.members:
            kind = _KINDS.get(m.name.partition("/")[0], "")
            if over is None and m.size > limits.cap(kind):
                over = m, limits.cap(kind)
            total += m.size
            on_disk += m.size if kind == "object" else 0
        if total > limits.total:
            raise FormatError(f"{what}: {INDEX_NAME} declares {total} bytes of members, "
                              f"limit {limits.total}")
        if over is not None:
            raise FormatError(f"{what}: member {over[0].name}: {INDEX_NAME} declares "
                              f"{over[0].size} bytes, limit {over[1]}")
        if (in_memory := total - on_disk) > limits.memory:
            raise FormatError(f"{what}: {INDEX_NAME} declares {in_memory} bytes of entries, "
                              f"proofs and policies, limit {limits.memory}")
        return index, on_disk

    def _check_members(self, what: str) -> None:
        """Cross-check the members against each other.

        Steps:
            1. The proofs parse (``c2sp.org/tlog-proof``).
            2. The checkpoint parses, its origin is the index's, and the index's vkey (named
               after that origin) verifies its signature. Each consistency proof starts from a
               size below the checkpoint's, and its hash list parses
               (`verify.consistency.parse_consistency_proofs`).
            3. An update bundle's extension starts from a compact range it holds, at a size no
               larger than the checkpoint's (`verify.update_bundle.extension_start`). Each
               entry below the extension (all of them, without one) has a proof, and each
               proof is for a bundled entry, at its index, against the bundled checkpoint byte
               for byte.
            4. The entries pass the one chain-and-root checker (`verify.logcheck.check_entries`):
               each parses and lies inside the tree, neighbours chain by ``prev``, each is
               included under the checkpoint, and each proof carried leads to its root (also
               when the entries are the whole tree and rebuild it); the extension's entries
               (every one from its first size on) extend its compact range
               (``proofs/<n>.range``) to the root.
            5. Each ``policy/<i>.json`` is the preimage of trust-policy entry ``i``'s subject
               and parses as a policy; every bundled trust-policy entry has one.
            6. The key handovers are numbered 1, 2, ... without a gap, and each parses and is
               signed by both keys it names (``verify.log_key.parse_handovers``; whether the
               verifier trusts any of those keys is its policy's business).
        """
        index = self.index
        note = self.checkpoint_note()
        entries, policies, handovers = (self._small[k] for k in ("entry", "policy", "handover"))
        # (1)
        for i, data in self._small["proof"].items():
            try:
                self._proofs[i] = TlogProof.from_bytes(data)
            except FormatError as e:
                raise FormatError(f"{what}: member proofs/{i}.tlog-proof: {e}") from e
        # (2)
        here = f"{what}: member {CHECKPOINT_NAME}"
        if not note:
            raise FormatError(f"{here}: missing or empty")
        try:
            self.checkpoint = Checkpoint.from_text(Note.from_bytes(note).text)
        except FormatError as e:
            raise FormatError(f"{here}: {e}") from e
        if self.checkpoint.origin != index.origin:
            raise FormatError(f"{here}: origin {self.checkpoint.origin!r}, {INDEX_NAME} says "
                              f"{index.origin!r}")
        try:
            verifier: Verifier = verifier_from_vkey(index.vkey)
        except FormatError as e:
            raise FormatError(f"{what}: {INDEX_NAME}: vkey: {e}") from e
        try:
            verify_checkpoint(note, verifier, origin=index.origin)
        except ProvenanceError as e:
            raise SignatureError(f"{here}: not signed by the log key in {INDEX_NAME}: {e}") from e
        size = self.checkpoint.size
        if self._small["consistency"]:  # only a bundle with consistency proofs
            from .consistency import parse_consistency_proofs

            self._consistency = parse_consistency_proofs(self._small["consistency"], size, what)
        # (3)
        ext = index.extension
        if ext is not None:  # an update bundle (format 4)
            from .update_bundle import extension_start

            self._extension = extension_start(ext, self._small["range"], size, what)
        for i in sorted(entries):
            if i not in self._proofs and (ext is None or i < ext):
                raise FormatError(f"{what}: member entries/{i}: has no proofs/{i}.tlog-proof")
        for i, proof in sorted(self._proofs.items()):
            where = f"{what}: member proofs/{i}.tlog-proof"
            if i not in entries:
                raise FormatError(f"{where}: proves entries/{i}, which the bundle does not hold")
            if proof.index != i:
                raise ProofError(f"{where}: is for entry {proof.index}, want {i}")
            if proof.checkpoint != note:
                raise ProofError(
                    f"{where}: proves against another checkpoint, not the bundle's "
                    f"(size {size}, root {self.checkpoint.root.hex()[:16]}…)"
                )
        # (4)
        findings = check_entries(
            entries,
            size,
            self.checkpoint.root,
            lambda i: self._proofs[i].inclusion,
            name=lambda i: f"entries/{i} and proofs/{i}.tlog-proof",
            start=self.extension(),
            carried=self._proofs,  # each proof carried is checked, the whole tree's too
        )
        if findings:
            raise ProofError(f"{what}: members {findings[0].file}: {findings[0].message}")
        parsed = {i: LogEntry.from_bytes(data) for i, data in entries.items()}
        # (5)
        for i, data in sorted(policies.items()):
            where = f"{what}: member policy/{i}.json"
            entry = parsed.get(i)
            if entry is None or entry.kind != "trust-policy":
                raise FormatError(f"{where}: entries/{i} is not a bundled trust-policy record")
            if digest_bytes(data) != entry.subject:
                raise DigestMismatchError(
                    f"{where}: hashes to {digest_bytes(data)[:23]}…, want the subject of "
                    f"entries/{i}, {entry.subject[:23]}…",
                    subject=where,
                    expected=entry.subject,
                    observed=digest_bytes(data),
                )
            TrustPolicy.from_json(load_object(data, where), where)
        for i, entry in parsed.items():
            if entry.kind == "trust-policy" and i not in policies:
                raise FormatError(f"{what}: member entries/{i}: trust-policy record without "
                                  f"policy/{i}.json")
        # (6)
        if handovers:  # a rotated log key; most logs never rotate theirs
            from .log_key import parse_handovers

            parse_handovers(handovers, what)

    # -- lifetime -------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove the temporary directory (idempotent)."""
        self._cleanup()
        self._objects, self._kept = {}, {}

    def __enter__(self) -> BundleEvidence:
        """Use the evidence in a ``with`` block; it is closed at the end."""
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Close the evidence."""
        self.close()

    # -- what the bundle holds ------------------------------------------------------------------

    @property
    def subject(self) -> str | None:
        """The digest the bundle is evidence for (None: an update bundle of the extension
        alone)."""
        return self.index.subject

    @property
    def objects(self) -> dict[str, Path]:
        """Digest to extracted file, for every object member (valid until `close`)."""
        return dict(self._objects)

    def entry_bytes(self, index: int) -> bytes | None:
        """The bundled entry at ``index``, or None."""
        return self._entries.get(index)

    def policy_records(self) -> list[tuple[int, LogEntry, bytes | None]]:
        """``(index, entry, envelope bytes or None)`` of each bundled trust-policy record."""
        parsed = [(i, LogEntry.from_bytes(self._entries[i])) for i in sorted(self._small["policy"])]
        return [(i, entry, self.blob(entry.envelope)) for i, entry in parsed]

    def key_handovers(self) -> list[bytes]:
        """The bundled key handover notes, in order (format 3; empty otherwise)."""
        return [data for _n, data in sorted(self._small["handover"].items())]

    def extension(self) -> CompactRange | None:
        """The compact range the extension starts from (format 4; None otherwise): every entry
        from its size to the checkpoint's is bundled, and they rebuild the root from it."""
        return self._extension

    def unused(self) -> list[str]:
        """Members no verifier has asked for (entries, objects, omitted digests), by name."""
        out = [f"entries/{i}" for i in sorted(self._entries) if i not in self.touched_entries]
        out += [
            f"objects/sha256/{d[7:]}" for d in sorted(self._objects) if d not in self.touched_blobs
        ]
        out += [f"omitted {d}" for d in self.index.omitted if d not in self.touched_blobs]
        out += [f"erased {d}" for d in self.index.erased if d not in self.touched_blobs]
        return out

    # -- the Evidence protocol ------------------------------------------------------------------

    def checkpoint_note(self) -> bytes:
        """The bundled checkpoint note."""
        return self._small["checkpoint"].get(0, b"")

    def entries(self) -> Iterator[tuple[int, bytes]]:
        """The bundled entries only, in index order."""
        yield from sorted(self._entries.items())

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """The bundled proof of ``index`` (bundles hold proofs at their checkpoint's size only);
        for an entry of the extension, the proof its compact range and entries give.

        Raises:
            FileNotFoundError: no proof for that entry at that size.
        """
        proof = self._proofs.get(index)
        ext = self._extension
        if proof is None and size == self.checkpoint.size and ext is not None \
                and ext.size <= index < size:
            from .update_bundle import extension_inclusion

            return extension_inclusion(self, index)
        if proof is None or size != self.checkpoint.size:
            raise FileNotFoundError(
                f"the bundle holds no inclusion proof of entry {index} at size {size}"
            )
        self.touched_entries.add(index)
        return list(proof.inclusion)

    def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        """A bundled consistency proof from ``old_size`` to the checkpoint's size.

        Raises:
            FileNotFoundError: the bundle holds none for these sizes.
        """
        from .consistency import bundled_proof  # loaded only by a checkpoint seen before

        return bundled_proof(self._consistency, old_size, new_size, self.checkpoint.size)

    def blob_path(self, digest: str) -> Path | None:
        """The extracted file of an object member; None when absent or omitted."""
        parse_digest(digest, "blob digest")
        self.touched_blobs.add(digest)
        return self._objects.get(digest)

    def has_blob(self, digest: str) -> bool:
        """True when the object is bundled, or listed as omitted by ``--no-data``.

        An omitted blob counts as present for presence checks: its digest is bound by a
        verified manifest, and `verify_bundle` reports that the data was not exported.
        """
        parse_digest(digest, "blob digest")
        self.touched_blobs.add(digest)
        return digest in self._objects or digest in self.index.omitted

    def omitted(self, digest: str) -> bool:
        """True for a data blob the bundle lists as not exported (``--no-data``)."""
        self.touched_blobs.add(digest)
        return digest in self.index.omitted

    def blob_size(self, digest: str) -> int | None:
        """The size of an object member; None when absent or omitted."""
        return None if self.blob_path(digest) is None else self._sizes[digest]

    def blob(self, digest: str) -> bytes | None:
        """The bytes of an object member (a small one's as read: `_KEEP`), or None."""
        path = self.blob_path(digest)
        return self._kept[digest] if digest in self._kept else read_blob_file(path, digest)


# -- verification -------------------------------------------------------------------------------


def verify_bundle(
    evidence: BundleEvidence,
    policy: TrustPolicy,
    *,
    now: dt.datetime | None = None,
    data: str = "hash",
    known_checkpoint: bytes | None = None,
    known_what: str = "checkpoint seen before",
    files: Path | None = None,
    declared: bool = False,
) -> Report:
    """Verify the artifact a bundle is for, and its whole lineage, under ``policy``.

    Preconditions: ``evidence`` was opened (`BundleEvidence.open`), so it is well formed.

    Steps:
        1. Follow the trust-policy history the bundle carries, starting from ``policy``
           (`verify.policy_history.follow_history`): a later policy applies only when the approvers
           of the one before signed it. A trust-policy record whose envelope is missing fails
           the bundle (fail closed: it could be a successor).
        2. Build the lineage verifier on the bundle with the policy in force: it verifies the
           checkpoint by the policy's log key (and witnesses), and the hash chain.
        3. With ``known_checkpoint``: the bundled checkpoint must extend it (a consistency
           proof from the bundle, unless the sizes are equal).
        4. Verify the subject and its lineage (with the policy's ``accepted_licences``, a batch
           under another licence fails).
        5. Check the trust-policy records are included under the verified checkpoint.
        6. Format 2: the terms ``bundle.json`` states are exactly each batch's signed terms,
           and every blob it lists as erased was deleted by a verified erasure.
        7. When everything passed: no member may be unused by the verification (a bundle
           holds the lineage's evidence and nothing else).
        8. Name the subject's files with their digests (`name_files`); with ``files``, each
           is found in that directory by path and hashed (a release's: its checkpoint's).

    Args:
        evidence: the opened bundle.
        policy: the verifier's trust policy.
        now: the time approvals are judged at (default now).
        data: ``"hash"`` re-hashes data blobs; ``"size"`` compares their sizes only.
        known_checkpoint: a signed checkpoint of the same log seen earlier.
        known_what: names it in the report (whose checkpoint, under which key).
        files: a directory of the subject's files (a model) to check against its manifest.
        declared: name each key ``policy`` trusts that the exporter's own policy (the bundle's
            history from its first) declares compromised (`verify.left_out`): an auditor's
            verification (``python -m verify``, ``trajledger verify BUNDLE``); an import
            judges a vendor's declarations itself (``ledger.exchange``).

    Returns:
        The report: a graph with a ``bundle`` node, the log and the subject's lineage.
    """
    index = evidence.index
    omitted = len(index.omitted)
    bundle = Node("bundle", "bundle", name=f"bundle {evidence.path.name}")
    bundle.add("members", OK, f"{len(index.members) + 1} members, created {index.created} "
               "(unauthenticated)")
    if omitted:
        bundle.add(
            "data",
            INFO,
            f"{omitted} data blob(s) not included (exported with --no-data): their digests "
            "are bound by the verified manifests; their bytes were not checked",
        )
    # (1)
    records: list[tuple[int, str, bytes]] = []
    for i, entry, envelope in evidence.policy_records():
        if envelope is None:
            bundle.fail("policy history", f"trust-policy record {i}: envelope "
                        f"{entry.envelope[:19]}… (objects/sha256/{entry.envelope[7:]}) is "
                        "missing from the bundle")
        else:
            records.append((i, entry.subject, envelope))
    in_force, notes = follow_history(policy, records)
    assert in_force is not None  # a trusted policy was given
    for n in notes:
        bundle.add("policy history", INFO, n)
    # (2)
    verifier = LineageVerifier(evidence, in_force, now=now, data=data)
    # (3)
    if known_checkpoint is not None:
        verifier.check_known_checkpoint(known_checkpoint, known_what)
    # (4)
    subject = evidence.subject
    if subject is not None:
        report = verifier.verify(subject)
    else:
        verifier.finish()
        report = verifier.report("bundle", ["log"])
    # (5)
    if verifier.checkpoint is not None:
        for i, _subject, _env in records:
            why = verifier.included(i)
            if why is not None:
                bundle.fail("policy history", f"trust-policy record {i}: {why}")
        if index.extension is not None:  # an update bundle
            from .update_bundle import check_extension

            check_extension(evidence, verifier, bundle)
    # (6)
    if index.format >= 2:
        _check_terms(evidence, verifier, report, bundle)
    # (7) The verifier may prove inclusion of many entries at once (when the bundle holds the
    # whole tree it recomputes the root), so what it relied on counts as touched too.
    evidence.touched_entries.update(verifier.used)
    if bundle.ok and all(c.what == "revoked" for _n, checks, _d in report.causes()
                         for c in checks):
        for name in evidence.unused():
            bundle.fail("members", f"member {name} is not used by the lineage of "
                        f"{(subject or 'the extension')[:19]}…")
    if records and (not report.ok or (declared and policy_digest(in_force) != records[-1][1])):
        from .left_out import exporters_declarations  # what the exporter's policy declares

        exporters_declarations(report, bundle, in_force if declared else None, records,
                               evidence, verifier)
    # (8)
    if subject is not None:  # a release's files are its checkpoint's (out54 finding 5)
        ck = [e.dst for e in report.edges if e.src == subject and e.role == "checkpoint"
              and files is not None and report.nodes[subject].kind == "release"]
        name_files(report.nodes[(ck or [subject])[0]], evidence, files)
    bundle.add("not known offline", INFO, evidence.checkpoint.horizon())  # (rev43 finding 5)
    verifier.decision(bundle)
    if subject is None:
        return verifier.report("bundle", ["bundle", "log"])
    return verifier.report(subject, ["bundle", "log", subject])


def _check_terms(
    evidence: BundleEvidence, verifier: LineageVerifier, report: Report, bundle: Node
) -> None:
    """Step 6 of `verify_bundle`: ``bundle.json``'s terms and erased list against the records."""
    index = evidence.index
    stated = {t.batch: t for t in index.terms}
    signed = signed_terms(verifier, report)
    for digest, terms in sorted(signed.items()):
        got = stated.get(digest)
        if got != terms:  # other terms, or none
            said = got.describe() if got is not None else "no terms"
            bundle.fail("terms", f"{INDEX_NAME} states {said} for batch {digest[:19]}…; its "
                        f"signed record states {terms.describe()}")
    # Batches a failing subject kept the walk from reaching follow from its failure.
    cause = next((r for r in report.roots if r in report.failing()), None)
    for digest in sorted(set(stated) - set(signed)):
        bundle.fail("terms", f"{INDEX_NAME} states terms for {digest[:19]}…, which is not a "
                    "verified rollout batch of this lineage", cause)
    if signed and set(signed) == set(stated):
        by_licence = Counter(t.licence or "none stated" for t in signed.values())
        bundle.add("terms", OK, f"{len(signed)} batch(es), as signed: licence "
                   + ", ".join(f"{k} ({n})" for k, n in sorted(by_licence.items())))
    if index.erased:  # blobs erasures deleted: loaded only for a bundle listing some
        from .retractions import check_erased

        check_erased(index.erased, verifier.erased_blob, bundle)


def signed_terms(verifier: LineageVerifier, report: Report) -> dict[str, Terms]:
    """The terms each verified rollout batch of ``report``'s lineage states in its signed
    record, by batch digest: what an exporter writes in ``bundle.json`` and `verify_bundle`
    holds it to."""
    signed: dict[str, Terms] = {}
    for node in report.nodes.values():
        if node.kind != "rollout-batch":
            continue
        rec = verifier.identity_record(node.id, "rollout-batch")
        if isinstance(rec, Record) and isinstance(rec.predicate, RolloutBatch):
            b = rec.predicate
            signed[node.id] = Terms(node.id, b.licence, b.consent, b.retention)
    return signed
