"""The log a lineage verification trusts: its checkpoint, and which entries it proves included.

Scope: `TrustedLog` checks, once, the evidence's checkpoint against the policy's log key(s)
(following key handovers) and witnesses, and the entries it holds (hash chain, root or
inclusion proofs); then answers whether an entry is included under the verified checkpoint.
Its findings are checks of the report's ``log`` node.
Non-scope: whether a checkpoint seen earlier is consistent with it (no fork, no rollback:
``verify.consistency.check_known_checkpoint``, loaded on use), what the records say
(``verify.judge``), walking the lineage (``verify.lineage``).
"""

from __future__ import annotations

from itertools import takewhile
from typing import TYPE_CHECKING

from .checkpoint import Checkpoint, verify_checkpoint
from .errors import ProvenanceError, SignatureError
from .evidence import Evidence
from .log_entry import LogEntry
from .log_index import LogIndex, MemoryIndex
from .logcheck import check_entries
from .merkle import leaf_hash, verify_inclusion
from .note import verifier_from_vkey
from .policy import TrustPolicy
from .report import OK, Node

if TYPE_CHECKING:
    from .log_key import Handover

__all__ = ["TrustedLog"]


class TrustedLog:
    """The log of one evidence source, checked under one policy on construction."""

    def __init__(self, evidence: Evidence, policy: TrustPolicy, index: LogIndex | None) -> None:
        """Check the log.

        Steps:
            1. Verify the checkpoint: signed by the policy's log key(s) (threshold; a key
               counts through the keys it handed over to, `_verify_checkpoint`) and, when the
               policy requires witnesses, cosigned by their threshold.
            2. Without an ``index``: read every available entry into a `MemoryIndex`, check
               the hash chain between neighbours, and when every entry is at hand recompute
               the root once (it proves each entry included, and nothing else).
            3. With an ``index``: it must cover the checkpoint's tree.
        """
        self.evidence = evidence
        self.policy = policy
        self.log = Node("log", "log", name="log")
        self.checkpoint: Checkpoint | None = None
        self.used: set[int] = set()
        """Indices of the log entries the verification relied on (an export bundles these)."""
        self.trusted_vkeys: list[str] = []
        """The policy's log keys that verified the checkpoint, the keys they handed over to and
        their predecessors (a checkpoint seen earlier may be signed by any of them)."""
        self._proven_root: bytes | None = None
        self._proven: set[int] = set()  # entries checked under the checkpoint already
        self.index: LogIndex = index if index is not None else MemoryIndex(0, evidence)
        self._check_log(index)

    def _check_log(self, index: LogIndex | None) -> None:
        log_role = self.policy.role("log")
        note = self.evidence.checkpoint_note()
        # (1)
        if not log_role.vkeys:
            self.log.fail("checkpoint", "the policy names no log key (roles.log.vkeys)")
            return
        verified: list[Checkpoint] = []
        errors: list[str] = []
        handed: list[Handover] = []
        for vkey in log_role.vkeys:
            try:
                cp, chain = self._verify_checkpoint(note, vkey)
            except (ProvenanceError, OSError) as e:
                errors.append(str(e))
                continue
            verified.append(cp)
            handed += chain
            self.trusted_vkeys += [vkey, *(h.new for h in chain)]
        if handovers := self.evidence.key_handovers():  # a rotated key: the log's keys before it
            from .log_key import predecessors

            self.trusted_vkeys += predecessors(self.trusted_vkeys, handovers)
        need = max(log_role.threshold, 1)
        if len(verified) < need:
            from .untrusted_key import log_signers  # who signed it instead, and what to do
            self.log.fail("checkpoint", f"signed by {len(verified)} of {need} trusted log key(s) "
                          f"({'; '.join(errors)})" + log_signers(note, log_role.vkeys))
            return
        cp = verified[0]
        self.checkpoint = cp
        self.log.name = f"log {cp.origin}"
        self.log.add("checkpoint", OK, f"size {cp.size}, signed by {len(verified)} of {need} "
                     "trusted log key(s)")
        for h in handed:
            self.log.add("key handover", OK, h.describe())
        witness = self.policy.role("witness")
        if witness.witnessed(cp.origin):
            from .cosignatures import check_witnesses  # a witnessed log only

            check_witnesses(self.log, note, witness, self.trusted_vkeys)
        if index is not None:
            # (3)
            if index.size != cp.size:
                self.log.fail(
                    "index", f"the log index covers size {index.size}, the checkpoint {cp.size}"
                )
            root = getattr(index, "root", None)
            if root == cp.root:
                self._proven_root = cp.root
            return
        # (2)
        built = MemoryIndex(cp.size, self.evidence)
        self.index = built
        try:
            self._read_entries(cp, built)
        except (OSError, ProvenanceError) as e:
            where = f"{e.filename}: " if isinstance(e, OSError) and e.filename else ""
            self.log.fail("entries", f"cannot be read: {where}{getattr(e, 'strerror', None) or e}")

    def _verify_checkpoint(self, note: bytes, vkey: str) -> tuple[Checkpoint, list[Handover]]:
        """Verify the checkpoint by the trusted log key ``vkey``, or by a key it handed over to.

        Steps:
            1. Verify the note by ``vkey`` (by the index's ``checked`` when it has one: the
               ledger's trust state, which verified these bytes by this key before: ci47); done
               when it is signed by it.
            2. Otherwise follow the evidence's key handovers from ``vkey``
               (`verify.log_key.follow_handovers`, loaded only for a log whose key rotated).

        Returns:
            The checkpoint and the handovers followed (empty when ``vkey`` signed it).

        Raises:
            ProvenanceError: not signed by ``vkey`` nor a successor, a bad handover, or a tree
                the checkpoint does not extend.
            OSError: a consistency proof is not in the evidence.
        """
        # (1)
        check = getattr(self.index, "checked", verify_checkpoint)
        try:
            return check(note, verifier_from_vkey(vkey)), []
        except SignatureError as e:
            # (2)
            from .log_key import follow_handovers

            return follow_handovers(note, vkey, self.evidence, e)

    def _read_entries(self, cp: Checkpoint, built: MemoryIndex) -> None:
        """Index the evidence's entries and check them with the one chain-and-root checker
        (`verify.logcheck.check_entries`): the whole tree's root rebuilt when every entry is
        there, else each entry's inclusion proof; the ``prev`` chain between neighbours. Each
        entry is parsed once, by the checker, which indexes those that parse (the others are
        its findings)."""
        # The entries in the tree (the evidence gives them in index order).
        entries = dict(takewhile(lambda e: e[0] < cp.size, self.evidence.entries()))

        def add(index: int, entry: LogEntry) -> tuple[str, ...]:
            built.add(index, entries[index], entry)
            return ()  # no problem of its own: the checker's are its findings

        findings = check_entries(
            entries,
            cp.size,
            cp.root,
            lambda i: self.evidence.inclusion_proof(i, cp.size),
            on_entry=add,
            start=self.evidence.extension(),
        )
        for f in findings[:10]:
            self.log.fail("entries", f.message if f.file.startswith("entry ") else str(f))
        if len(findings) > 10:
            self.log.fail("entries", f"{len(findings) - 10} more problem(s)")
        bad = {f.index for f in findings}
        self._proven = {i for i in entries if i not in bad} if None not in bad else set()
        if entries and not findings:
            how = (f"root recomputed from all {cp.size} entries" if len(entries) == cp.size
                   else f"{len(entries)} entries proven included")
            self.log.add("tree", OK, how)

    def included(self, index: int) -> str | None:
        """None when entry ``index`` is included under the verified checkpoint; else why not."""
        raw = self.index.entry_bytes(index)
        if self.checkpoint is None or raw is None:
            return f"log entry {index}: not available under a verified checkpoint"
        return self.included_raw(index, raw)

    def included_raw(self, index: int, raw: bytes) -> str | None:
        """None when entry ``index`` is included under the verified checkpoint; else why not."""
        assert self.checkpoint is not None
        self.used.add(index)
        if self._proven_root is not None or index in self._proven:
            return None
        try:
            proof = self.evidence.inclusion_proof(index, self.checkpoint.size)
            verify_inclusion(index, self.checkpoint.size, leaf_hash(raw), proof,
                             self.checkpoint.root)
        except (ProvenanceError, OSError) as e:
            return f"log entry {index}: not included under the checkpoint: {e}"
        return None

