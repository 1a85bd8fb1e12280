"""Signed checkpoints verified once by their holder: the same note by the same key answers the same.

Scope: `CheckedNotes`, what one holder (a ledger's handle, for the command it serves: its log, its
trust state and the verifier it builds over that state; or a log or a trust state of its own)
verified of a log's checkpoint notes, by the note's bytes and the key. A `verify` verified the
same note by the same key four times (ci47 finding 6: the log's floor, its checkpoint file, the
trust state's sync, the verifier's log), 0.1-0.3 ms of Ed25519 each.
Non-scope: what a checkpoint must extend (``state.check_floor``, ``trust_floor``), which keys
are trusted (the callers, the policy).
"""

from __future__ import annotations

from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.note import Verifier

__all__ = ["CheckedNotes"]

_KEPT = 8
"""Notes kept at most (a long-lived handle sees one more a publication); a new one then
replaces the oldest (`_keep`): emptying them all made a ledger's writer verify its floor, the
note it published last, again at every seventh publication (app51)."""


class CheckedNotes:
    """`verify_checkpoint` of a note by a key, verified once for one holder: an answer is kept
    under the note's exact bytes and the whole key (name, type and public key), so it answers
    for no other note, key or log; a note that fails is kept nowhere and fails again."""

    def __init__(self) -> None:
        self._seen: dict[tuple[bytes, Verifier], Checkpoint] = {}

    def __call__(self, note: bytes, verifier: Verifier) -> Checkpoint:
        """``note`` verified by ``verifier`` (`verify_checkpoint`, whose origin is the key's
        name), once for these bytes and this key.

        Raises:
            FormatError, SignatureError: as `verify_checkpoint`, each time.
        """
        key = (note, verifier)
        cp = self._seen.get(key)
        if cp is None:
            cp = verify_checkpoint(note, verifier)
            self._keep(key, cp)
        return cp

    def own(self, note: bytes, verifier: Verifier, checkpoint: Checkpoint) -> None:
        """Keep ``note`` as verified by ``verifier``, saying ``checkpoint``, without verifying
        it: only for a note its caller signed in this process with the private key of
        ``verifier``'s public key (`Signer.derived_ed25519`), the text ``checkpoint``'s
        (`encode.checkpoint_text`) and one signature line by that key (the log's writer,
        `Log._sign`). Such a note verifies by that key; verifying it again (the user's floor
        raised to it by ``on_publish``, dur46 finding 3) costs an Ed25519 verification and
        tells nothing more."""
        self._keep((note, verifier), checkpoint)

    def _keep(self, key: tuple[bytes, Verifier], checkpoint: Checkpoint) -> None:
        """Keep ``key``'s answer, the oldest kept (by insertion) making room when `_KEPT` are.
        Another thread changing them meanwhile (a holder shared by threads) empties them, as
        before: never an error."""
        seen = self._seen
        if key not in seen and len(seen) >= _KEPT:
            try:
                del seen[next(iter(seen))]
            except (RuntimeError, KeyError, StopIteration):
                seen.clear()
        seen[key] = checkpoint
