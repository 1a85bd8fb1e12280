"""What the user's state keeps of a log besides its rows: the floor and the checks a newer tree
must pass.

Scope: `TrustFloor`, the part of a `trust_state.TrustState` that reads and writes its ``meta``
keys other than the indexed range: the floor (the newest signed checkpoint verified, parsed
once per note), the checks a newer checkpoint must pass against it without its entries being
read (`check_extends`: rollback, fork, a consistency proof or the log's roots; `check_retired`:
a key that handed the log over signs nothing beyond its handover), raising it (`advance_floor`,
`published`, `continue_from`), the size applied of another party's log (`applied`), the values
`first_contact` notes, and a pin ahead of first use.
A module apart from ``trust_state.py``, which opens the state, holds its write transaction and
derives its rows from the log's entries (`TrustState.sync`): the seam is the floor against the
rows; a state is one object of both.
Non-scope: the transaction and the stored range (``trust_state.py``); the queries of the rows
(``trust_index.py``); verifying records (the verifier).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.compact import CompactRange
from trajledger.verify.errors import ProvenanceError
from trajledger.verify.note import Verifier

from .log.checked import CheckedNotes
from .trust_index import TrustIndex

__all__ = ["TrustFloor"]


class TrustFloor(TrustIndex):
    """The floor of one log's state and its checks; `trust_state.TrustState` is one (it opens
    the database and provides the meta keys and the write transaction named below)."""

    vkey: str
    verifier: Verifier
    _range: CompactRange
    _note: bytes | None
    _last: bytes
    checked: CheckedNotes

    def _meta(self, key: str) -> bytes | None:
        raise NotImplementedError  # `TrustState._meta`

    def _put(self, key: str, value: bytes) -> None:
        raise NotImplementedError  # `TrustState._put`

    def _read_meta(self) -> tuple[int, CompactRange, bytes | None, bytes]:
        raise NotImplementedError  # `TrustState._read_meta`

    def _write(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError  # `TrustState._write`

    def pin(self, why: str) -> None:
        """Mark this log key as trusted ahead of its first use (`trajledger trust`, ``init``,
        a policy the user holds): its first use is then no blind one."""
        with self._write():
            self._put("pinned", why.encode("utf-8"))

    def pinned(self) -> str | None:
        """Why this key is trusted ahead of its first use, or None."""
        raw = self._meta("pinned")
        return None if raw is None else raw.decode("utf-8", "replace")

    def retire(self, handover: bytes) -> None:
        """Note that this key handed the log over (``handover``, a key handover note from it
        that `trust_handover.continue_trust` followed): `check_extends` then refuses a tree it
        signs beyond the handed-over one (rev24 finding 3)."""
        with self._write():
            self._put("retired", handover)

    @property
    def size(self) -> int:
        """The number of entries indexed (the floor checkpoint's size)."""
        return self._size

    @property
    def root(self) -> bytes:
        """The root of the indexed tree (the floor checkpoint's root)."""
        return self._range.root()

    def floor(self) -> bytes | None:
        """The newest signed checkpoint note verified for this log, or None."""
        return self._note

    def floor_checkpoint(self) -> Checkpoint | None:
        """The floor, parsed and verified by the log key (`_checkpoint`)."""
        return None if self._note is None else self._checkpoint(self._note)

    def _checkpoint(self, note: bytes) -> Checkpoint:
        """``note`` verified by the log key, once (`checked`: the floor read back, a note the
        log or this state verified before, is not verified again)."""
        return self.checked(note, self.verifier)

    def check_extends(self, note: bytes, proof: Sequence[bytes] = (), *, what: str,
                      root_at: Callable[[int], bytes | None] | None = None) -> bool:
        """Check that the signed checkpoint ``note`` extends the floor (without storing it).

        Steps:
            1. Verify ``note`` with the log's key.
            2. Against the floor: a smaller tree is a rollback, another root at the same size a
               fork; a larger tree needs ``proof``, a consistency proof from the floor's size,
               and must pass it (else it is unprovable, or a fork); or ``root_at``, the roots
               the log's extension (every entry since a size at or below the floor's, which
               rebuild ``note``'s root) gives, whose root at the floor's size must be the
               floor's.

        Returns:
            True when ``note`` is a larger tree than the floor (it would advance it).

        Raises:
            ConsistencyError: a rollback, a fork, or no proof; the message names both
                checkpoints and the error carries them.
            FormatError, SignatureError: ``note`` is malformed or not signed by the log.
        """
        from trajledger.verify.consistency import check_consistent
        from trajledger.verify.errors import ConsistencyError

        # (1)
        new = self._checkpoint(note)
        self._size, self._range, self._note, self._last = self._read_meta()
        self.check_retired(new, what)
        old = self.floor_checkpoint()
        if old is None:
            return True
        # (2)
        both = (f"{old.origin} size {old.size} root {old.root.hex()[:16]}… accepted before; "
                f"size {new.size} root {new.root.hex()[:16]}… now")
        if new.size < old.size:
            raise ConsistencyError(f"{what}: rollback: {both}", old=old, new=new)
        if new.size == old.size:
            if new.root != old.root:
                raise ConsistencyError(f"{what}: fork: two roots at one size: {both}",
                                       old=old, new=new)
            return False
        rebuilt = root_at(old.size) if root_at is not None else None
        if rebuilt is not None:
            if rebuilt != old.root:
                raise ConsistencyError(f"{what}: fork: {both}: the log's entries give root "
                                       f"{rebuilt.hex()[:16]}… at size {old.size}",
                                       old=old, new=new)
            return True
        if not proof and old.size > 0:
            raise ConsistencyError(
                f"{what}: unprovable: no consistency proof from size {old.size} ({both}); ask "
                f"for a bundle exported with --consistency-from {old.size}",
                old=old,
                new=new,
            )
        try:
            check_consistent(old, new, list(proof))
        except ProvenanceError as e:
            raise ConsistencyError(f"{what}: fork: {both}: {e}", old=old, new=new,
                                   proof=list(proof)) from e
        return True

    def retired_to(self) -> str | None:
        """The key this one handed the log over to (`retire`), or None."""
        from trajledger.verify.log_key import parse_handover

        handover = self._meta("retired")
        return None if handover is None else parse_handover(handover).new

    def check_retired(self, new: Checkpoint, what: str) -> None:
        """For a key that handed the log over (`retire`; step 1 of `check_extends`): a tree
        ``new`` it signs beyond the handed-over one, or another at its size, is not the log's
        (its successor signs from there on): a thief of the old key's fork.

        Raises:
            ConsistencyError: such a tree.
        """
        from trajledger.verify.errors import ConsistencyError
        from trajledger.verify.log_key import key_id, parse_handover

        if (handover := self._meta("retired")) is None:
            return
        h = parse_handover(handover)
        if new.size > h.checkpoint.size or (new.size == h.checkpoint.size
                                           and new.root != h.checkpoint.root):
            raise ConsistencyError(
                f"{what}: key {key_id(self.vkey)} handed the log over to {key_id(h.new)} at "
                f"size {h.checkpoint.size} (a rotation you followed), yet signs a tree of size "
                f"{new.size} (root {new.root.hex()[:16]}…): after its handover only "
                f"{key_id(h.new)} signs, so this is another history (the old key's holder, "
                "or a thief of it); nothing was changed: keep the checkpoint as evidence",
                old=h.checkpoint, new=new)

    def advance_floor(self, note: bytes, proof: Sequence[bytes] = (), *, what: str,
                      root_at: Callable[[int], bytes | None] | None = None,
                      applied: int | None = None) -> None:
        """Remember a newer signed checkpoint of this log, seen without reading its entries
        (another party's log, through a bundle or a monitor), after `check_extends`; with
        ``applied``, also that every entry up to that size was applied (`applied`).

        Raises:
            ConsistencyError, FormatError, SignatureError: as `check_extends`.
        """
        with self._write():
            if self.check_extends(note, proof, what=what, root_at=root_at):
                self._put("checkpoint", note)
                self._note = note
            if applied is not None and applied > (self.applied() or 0):
                self._put("applied", str(applied).encode())

    def applied(self) -> int | None:
        """The other party's log as applied here: every entry below this size was examined
        and the ones about what the ledger holds taken in (by an import of its extension, or
        a monitor that applied it); None when nothing was. The floor (`floor`) is the size
        checked for consistency, which a monitor may raise without applying."""
        raw = self._meta("applied")
        return None if raw is None else int(raw.decode())

    def noted(self, key: str) -> bytes | None:
        """A value `first_contact` keeps about this log (its own ``meta`` keys)."""
        return self._meta(f"first-contact.{key}")

    def note(self, key: str, value: bytes | Callable[[bytes | None], bytes | None] | None
             ) -> None:
        """Keep ``value`` as `noted`'s ``key`` (None: drop it), in a write transaction; a
        function gets the value kept there, read inside it (no other process's between)."""
        with self._write():
            if callable(value):
                value = value(self._meta(f"first-contact.{key}"))
            self._db.execute("DELETE FROM meta WHERE key = ?", (f"first-contact.{key}",))
            if value is not None:
                self._put(f"first-contact.{key}", value)

    def published(self, note: bytes) -> None:
        """Raise the floor to a checkpoint this process's own log writer just published (its
        consistency with the tree before was checked by the writer, under its lock); the
        index catches up on the next `sync`."""
        new = self._checkpoint(note)
        with self._write():
            self._size, self._range, self._note, self._last = self._read_meta()
            old = self.floor_checkpoint()  # the note published before: verified then
            same = old is not None and (new.size, new.root) == (old.size, old.root)
            if old is None or new.size > old.size or same:
                self._put("checkpoint", note)
                self._note = note

    def continue_from(self, note: bytes) -> None:
        """Store ``note`` (signed by this key) as the floor of a state that has none, after
        `continue_trust` checked it extends the floor of the key this one took over from."""
        self._checkpoint(note)
        with self._write():
            self._size, self._range, self._note, self._last = self._read_meta()
            if self._note is None:
                self._put("checkpoint", note)
                self._note = note

