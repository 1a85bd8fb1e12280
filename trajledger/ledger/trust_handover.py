"""Carrying a user's trust in a log over a rotation of the log's key.

Scope: `continue_trust`: a key of a log seen for the first time inherits the floor this user
holds under the log's earlier keys, when the log's key handovers lead to it and its checkpoint
extends every tree seen or handed over on the way; otherwise it is key confusion
(`TamperError`). `floor_across`: the floor a checkpoint of a key must extend, the newest seen
under it or under a key handed over to it (for a verification that stores nothing).
Non-scope: the state itself (`trajledger.ledger.trust_state`), writing handovers
(``ledger.log``), rotating a ledger's key (`trajledger.ledger.home.LedgerHome.rotate_log_key`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.errors import ProvenanceError
from trajledger.verify.note import verifier_from_vkey

from .errors import LedgerError, TamperError

if TYPE_CHECKING:
    from .trust_state import TrustState

__all__ = ["continue_trust", "floor_across"]


def continue_trust(
    state: TrustState,
    note: bytes,
    handovers: Sequence[bytes],
    proof: Callable[[int, int], Sequence[bytes]],
    *,
    what: str,
    distinct: Collection[str] = (),
) -> None:
    """Carry this user's floor of a log over to ``state``, a key of it seen for the first time.

    Steps:
        1. The other keys of the log (same origin) this user holds a floor for, or pinned
           ahead (`TrustState.siblings`); none: the log is new to this user, nothing to carry.
        2. For each: the key handovers (``verify.log_key.key_chain``) from it must reach
           ``state``'s key; otherwise the checkpoint is signed by a key that nobody this user
           trusted handed over to (key confusion): `TamperError`, nothing stored; so is a
           chain from a key this user already followed to another successor (`retired_to`).
        3. ``note``, the log's checkpoint signed by ``state``'s key, must extend that floor and
           every handover's tree on the way (consistency proofs from ``proof``).
        4. Store ``note`` as ``state``'s floor, and note each earlier key as retired at its
           handover (`TrustState.retire`): a larger tree it signs later is refused.

    Args:
        state: the state of the log's current key, without a floor.
        note: the log's signed checkpoint, as read now.
        handovers: the log's key handover notes (any order).
        proof: ``(old size, new size) -> consistency proof`` from the log (or the bundle).
        what: names the checkpoint in messages.
        distinct: log keys the caller trusts on their own (a policy's ``roles.log``): when
            ``state``'s key is one, a key of the same origin whose handovers do not lead to it
            is another log that happens to use the same origin name (two vendors), not key
            confusion, and nothing is carried over from it; so is such a key that is one
            when another key's handovers lead to ``state``'s (that vendor rotated its key:
            rev24 finding 4).

    Raises:
        TamperError: key confusion, a bad handover, or a checkpoint that does not extend what
            was seen under an earlier key.
        FormatError, SignatureError: ``note`` is malformed or not signed by ``state``'s key.
    """
    cp = verify_checkpoint(note, state.verifier)
    # (1)
    earlier = state.siblings()
    # (2) (3)
    reaching = {old.vkey for old in earlier if _reaches(old.vkey, handovers, state.vkey)}
    carried = []
    try:
        for old in earlier:
            if old.vkey not in reaching and (state.vkey in distinct
                                             or (reaching and old.vkey in distinct)):
                continue  # another log of the same origin name, trusted on its own
            carried.append((old, _check_continuation(state, cp, old, handovers, proof, what)))
        # (4)
        if carried:
            state.continue_from(note)
        for old, handover in carried:
            old.retire(handover)
    finally:
        for old in earlier:
            old.close()


def _reaches(old: str, handovers: Sequence[bytes], vkey: str) -> bool:
    """Whether the key handovers lead from the key ``old`` to ``vkey`` (a rotation)."""
    from trajledger.verify.log_key import key_chain

    try:
        return vkey in [h.new for h in key_chain(old, handovers)]
    except ProvenanceError:
        return False


def floor_across(vkey: str, handovers: Sequence[bytes], directory: Path | None = None, *,
                 tree: Checkpoint | None = None) -> tuple[bytes, str] | None:
    """The floor a checkpoint signed by ``vkey`` must extend, and what to call it: the newest
    checkpoint this user has seen of that log under ``vkey`` or under an earlier key of the
    same origin from which ``handovers`` lead to ``vkey`` (the size seen under the old key is
    a floor for the new key too: a bundle signed by the new key showing an older tree is a
    rollback, docs/SECURITY.md redo15 finding 2). None when they hold none; no state is made.

    ``tree``, the checkpoint ``vkey`` signed that is to be judged, is refused when this user
    followed a handover from ``vkey`` before it (`TrustState.check_retired`, rev24 finding 3).

    Raises:
        LedgerError: a state exists and cannot be read, or a key noted for the log's origin
            cannot be read (its floor would be left out: fail closed).
        TamperError: a key noted for the origin whose state was removed (`first_use.lost_floor`):
            its floor is unknown (fail closed).
        ConsistencyError: ``tree`` is beyond ``vkey``'s handover.
    """
    from .first_use import lost_floor, refuse_lost
    from .trust_state import TrustState
    from .user_state import origin_dir, read_state_file

    keys = [vkey]
    origin = origin_dir(verifier_from_vkey(vkey).name, directory)
    try:
        noted = sorted(n for n in os.listdir(origin) if not n.startswith("."))
    except FileNotFoundError:
        noted = []  # no other key of the log noted
    except OSError as e:
        raise LedgerError(f"{origin}: cannot list the keys noted for this origin: "
                          f"{e.strerror or e}") from e
    for n in noted:
        try:
            keys.append(read_state_file(origin / n, "replace").strip())
        except OSError as e:  # a FIFO or a device planted there, unreadable: not skipped
            raise LedgerError(f"{origin / n}: cannot read a log key noted for this origin "
                              f"({e.strerror or e}): its floor cannot be applied; remove the "
                              "file if it is not yours") from e
    floors = []
    for key in dict.fromkeys(keys):
        if key != vkey and not _reaches(key, handovers, vkey):
            continue
        note = TrustState.floor_seen(key, directory, tree if key == vkey else None)
        if note is not None:
            floors.append((verify_checkpoint(note, verifier_from_vkey(key)).size, note, key))
        elif (lost := lost_floor(key, directory)) is not None:  # noted, its floor removed
            refuse_lost(f"log {verifier_from_vkey(key).name}", key, lost)
    if not floors:
        return None
    size, note, key = max(floors)
    return note, ("checkpoint seen before" if key == vkey else
                  f"checkpoint of size {size} seen under key {_short_vkey(key)}, which "
                  f"handed over to {_short_vkey(vkey)}")


def _check_continuation(
    state: TrustState,
    cp: Checkpoint,
    old: TrustState,
    handovers: Sequence[bytes],
    proof: Callable[[int, int], Sequence[bytes]],
    what: str,
) -> bytes:
    """Steps 2 and 3 of `continue_trust` for one earlier key ``old``; the handover note from
    it."""
    from trajledger.verify.consistency import check_consistent
    from trajledger.verify.log_key import key_chain

    seen = old.floor_checkpoint()  # None: pinned ahead, no tree seen
    try:
        chain = key_chain(old.vkey, handovers)
    except ProvenanceError as e:
        raise TamperError(f"{what}: log {cp.origin}: its key handovers: {e}", None) from e
    # (2) (a key this user followed to one successor has no other: rev24 finding 4)
    if chain and (before := old.retired_to()) not in (None, chain[0].new):
        raise TamperError(
            f"{what}: log {cp.origin}: key {_short_vkey(old.vkey)} handed over to "
            f"{_short_vkey(str(before))} before (a rotation you followed), and now to "
            f"{_short_vkey(chain[0].new)}: two successors of one key, a fork of the log's "
            "identity; nothing was changed", Path(what))
    reached = [h.new for h in chain]
    if state.vkey not in reached:
        raise TamperError(
            f"{what}: log {cp.origin} is signed by key {_short_vkey(state.vkey)}, but this "
            f"user trusted key {_short_vkey(old.vkey)} for it ("
            + (f"size {seen.size} seen" if seen else "pinned ahead") + ") and no "
            "key handover signed by that key leads to the new one: a replaced key, not a "
            "rotation; nothing was changed (if this is another log reusing the origin, "
            f"remove {old.path} to trust it from scratch)",
            Path(what),
        )
    # (3)
    trees = [seen] if seen else []
    trees += [h.checkpoint for h in chain[: reached.index(state.vkey) + 1]]
    for tree in trees:
        try:
            check_consistent(tree, cp, list(proof(tree.size, cp.size))
                             if 0 < tree.size < cp.size else [])
        except (ProvenanceError, LedgerError, OSError) as e:
            raise TamperError(
                f"{what}: log {cp.origin} under key {_short_vkey(state.vkey)} does not "
                f"extend the tree of size {tree.size} seen or handed over under key "
                f"{_short_vkey(old.vkey)}: {e}; nothing was changed",
                Path(what),
            ) from e
    return chain[0].note


def _short_vkey(vkey: str) -> str:
    return "+".join(vkey.split("+")[:2])
