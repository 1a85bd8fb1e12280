"""What a user decides about a log in their state, by hand: pinning its key (and a checkpoint)
ahead of its first use, and accepting a known loss (a backup of the log restored on purpose).

Scope: ``trajledger trust VKEY [--checkpoint FILE]`` (`pin_log_key`), ``trajledger trust
VKEY --checkpoint FILE --accept-rollback HELD:NOW`` (`accept_rollback`): the floor lowered to
an older tree of the log this user saw, never another history, restated by the user, and
kept on record in the state (`TrustIndex.rollbacks`), which ``trust`` and ``monitor`` show;
and ``trajledger trust VKEY --clock-ahead TIME`` (`forget_clock_ahead`): the time the state
noted its use at, ahead of the clock, forgotten (a clock that ran ahead once).
Non-scope: the floor and its checks (``trust_state``), the first use (``first_use``).
Spec: docs/SECURITY.md ("First use, and pinning ahead"; review state26, finding 2; review
rev27, finding 1).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.errors import ConsistencyError, PolicyError, SignatureError
from trajledger.verify.note import verifier_from_vkey

from .errors import shell_word
from .trust_state import TrustState
from .user_state import REQUIRE_PIN_ENV, fingerprint, require_pin

__all__ = ["CLOCK_TOLERANCE", "Accepted", "Pinned", "accept_rollback", "forget_clock_ahead",
           "pin_log_key"]

CLOCK_TOLERANCE = dt.timedelta(minutes=5)
"""How far behind the newest time the user's state was used at a clock may read unsaid
(`runner.verification.ledger_verifier`: a use is judged no earlier than that time either way),
and how far ahead of the clock that time must be to be forgotten (`forget_clock_ahead`)."""


@dataclass(frozen=True)
class Pinned:
    """A log key pinned ahead (`pin_log_key`): its origin, fingerprint, and the floor's size
    when a checkpoint was pinned with it; ``others``: this user's other keys of that origin
    (fingerprint, and the size seen, None when pinned ahead only), known before the pin (out36
    finding 4: `trust_cli` warns of them)."""

    origin: str
    fingerprint: str
    size: int | None
    others: tuple[tuple[str, int | None], ...] = ()


def pin_log_key(vkey: str, checkpoint: bytes | None = None, directory: Path | None = None
                ) -> Pinned:
    """Pin a log's key ahead of its first use (``trajledger trust VKEY``), and, given a signed
    checkpoint of it, that checkpoint as the floor.

    Raises:
        FormatError: ``vkey`` is not a verifier key.
        ConsistencyError, SignatureError: the checkpoint is not signed by the key, or is behind
            or forks from a floor already held.
    """
    verifier = verifier_from_vkey(vkey)
    if checkpoint is not None:  # before anything is pinned
        try:
            verify_checkpoint(checkpoint, verifier)
        except SignatureError as e:  # (out50: what to give instead)
            raise SignatureError(f"{e}: the checkpoint given is not one this key signed: give "
                                 "its log's (the owner's log/checkpoint file), or the vkey of "
                                 "the log that signed this one; nothing was pinned") from e
    state = TrustState.open(vkey, directory)
    try:
        others = []
        if not state.pinned() and state.floor() is None:  # a key new to this user
            earlier = state.siblings()
            try:
                for other in earlier:
                    seen = other.floor_checkpoint()
                    others.append((fingerprint(other.vkey), seen.size if seen else None))
            finally:
                for other in earlier:
                    other.close()
        if checkpoint is not None:  # (first: a refused checkpoint pins nothing, out50)
            try:
                state.advance_floor(checkpoint, what="checkpoint given to 'trajledger trust'")
            except ConsistencyError as e:
                raise ConsistencyError(f"{e}; nothing was pinned: {_way_on(e, state.size, vkey)}",
                                       old=e.old, new=e.new, proof=e.proof) from e
        state.pin("pinned ahead ('trajledger trust')")
        floor = state.floor_checkpoint()
        return Pinned(verifier.name, fingerprint(vkey), floor.size if floor else None,
                      tuple(others))
    finally:
        state.close()


def _way_on(e: ConsistencyError, indexed: int, vkey: str) -> str:
    """What to do about a checkpoint given to ``trust`` that is behind the floor held or
    forks from it (out50): a backup of a log whose entries up to it the state indexed
    (``indexed``: a ledger's own) restored on purpose is accepted by restating the loss
    (`accept_rollback`); else nothing tells the older tree from another history, and a fork
    is never accepted."""
    if isinstance(e.old, Checkpoint) and isinstance(e.new, Checkpoint) and (
            e.new.size < e.old.size and e.new.size <= indexed):
        return ("if the log was restored from a backup on purpose, accept the loss with "
                f"'trajledger trust {vkey} --checkpoint FILE --accept-rollback {e.old.size}:"
                f"{e.new.size}'; else keep both checkpoints as evidence")
    return ("keep both checkpoints as evidence and ask the log's owner for a checkpoint that "
            "extends the one accepted before (a fork, or a rollback of a log seen through "
            "bundles or a monitor, is never accepted)")


@dataclass(frozen=True)
class Accepted:
    """A rollback accepted (`accept_rollback`): the log, its key's fingerprint, the floor
    held, the size accepted, and when (UTC, ISO 8601)."""

    origin: str
    fingerprint: str
    held: int
    now: int
    at: str


def _by_hand(what: str) -> None:
    """Refuse ``what`` (a decision a person takes) under ``TRAJLEDGER_REQUIRE_PIN=1``, which
    marks runs nobody watches.

    Raises:
        PolicyError: it is set; nothing was changed.
    """
    if require_pin():
        raise PolicyError(f"{what}, which {REQUIRE_PIN_ENV}=1 (unattended runs) never does; "
                          "nothing was changed: run it by hand without that setting")


def _now() -> dt.datetime:
    """The time a rollback is accepted at (a seam for tests)."""
    return dt.datetime.now(dt.UTC)


def accept_rollback(vkey: str, checkpoint: bytes, held: int, now: int, what: str,
                    directory: Path | None = None) -> Accepted:
    """Accept that the log of ``vkey`` is now the older tree ``checkpoint`` (a backup restored
    on purpose): the floor is lowered to it, and the acceptance (when, from what, to what) is
    kept in the state. ``held`` and ``now`` restate the floor's size and the checkpoint's: the
    user says what is lost, and a script cannot accept whatever loss comes next.

    Steps:
        1. Refused under ``TRAJLEDGER_REQUIRE_PIN=1``: it marks runs nobody watches, and
           accepting a loss takes a smaller log than the user saw as theirs.
        2. ``checkpoint`` must be signed by ``vkey`` and smaller than the floor held, and the
           sizes restated must be the floor's and its.
        3. `TrustState.accept_rollback`: it must be the root of the first entries the state
           indexed (an older copy of what was seen, not another history).

    Args:
        what: names ``checkpoint`` in messages (its file).

    Raises:
        PolicyError: refused (steps 1 and 2); nothing was changed.
        TamperError: refused (step 3); nothing was changed.
        FormatError, SignatureError: the checkpoint is malformed, or not signed by ``vkey``.
        LedgerError: the state cannot be read or written.
    """
    # (1)
    _by_hand("accepting a rollback takes a smaller log than you saw as yours")
    # (2)
    verifier = verifier_from_vkey(vkey)
    cp = verify_checkpoint(checkpoint, verifier)
    where = f"log {verifier.name}: your floor of its key {fingerprint(vkey)}"
    none = PolicyError(f"{where}: there is none, so no rollback to accept; nothing was "
                       f"changed: pin the checkpoint ('trajledger trust {shell_word(vkey)} "
                       f"--checkpoint {shell_word(what)}')")
    if TrustState.floor_seen(vkey, directory) is None:  # (no state made)
        raise none
    state = TrustState.open(vkey, directory)
    try:
        if (old := state.floor_checkpoint()) is None:
            raise none
        if cp.size >= old.size:
            raise PolicyError(f"{where}: {what} has size {cp.size}, which is not smaller than "
                              f"your floor (size {old.size}): no rollback to accept; nothing "
                              "was changed")
        if (held, now) != (old.size, cp.size):
            raise PolicyError(f"{where} is at size {old.size} and {what} has size {cp.size}: "
                              f"'--accept-rollback {held}:{now}' restates another loss; "
                              "nothing was changed")
        at = _now().strftime("%Y-%m-%dT%H:%M:%SZ")
        # (3)
        state.accept_rollback(checkpoint, state.floor() or b"", {
            "at": at, "from": old.size, "from_root": old.root.hex(), "to": cp.size,
            "to_root": cp.root.hex()})
    finally:
        state.close()
    return Accepted(verifier.name, fingerprint(vkey), old.size, cp.size, at)


def forget_clock_ahead(vkey: str, stated: str, directory: Path | None = None) -> str:
    """Forget the time the state of ``vkey``'s log noted its use at (`TrustState.used_at`),
    ahead of the clock by more than `CLOCK_TOLERANCE`: a clock that ran ahead once, or a state
    copied from such a machine, judged every approval as of that time (a fresh one expired
    too), with no way out but removing the state (review rev27, finding 1). The clock's time
    is noted instead. ``stated`` restates the time noted, as the clock note prints it: a
    script cannot forget whatever time comes next. Returns the time forgotten.

    Raises:
        PolicyError: under ``TRAJLEDGER_REQUIRE_PIN=1``, ``stated`` is not the time noted, or
            the time noted is not ahead of the clock; nothing was changed.
        FormatError: ``vkey`` is not a verifier key.
        LedgerError: the state cannot be read or written.
    """
    from trajledger.verify.times import format_time

    _by_hand("forgetting the time your state was used at lets a clock set back judge what "
             "expires")
    where = f"your state of log {verifier_from_vkey(vkey).name}"
    if TrustState.floor_seen(vkey, directory) is None:  # (no state made)
        raise PolicyError(f"{where}: there is none; nothing was changed")
    now = _now().replace(microsecond=0)
    state = TrustState.open(vkey, directory)
    try:
        if (seen := state.used_at(None)) is None:
            raise PolicyError(f"{where}: notes no time it was used at; nothing was changed")
        noted = format_time(seen)
        if seen <= now + CLOCK_TOLERANCE:
            raise PolicyError(f"{where} was last used at {noted}, which is not ahead of your "
                              f"clock ({format_time(now)}); nothing was changed")
        if noted != stated:
            raise PolicyError(f"{where} was last used at {noted}, not {stated}: "
                              f"'--clock-ahead {stated}' restates another time; nothing was "
                              "changed")
        state.used_at(now, ahead=seen)
        if (after := state.used_at(None)) is None or after > now + CLOCK_TOLERANCE:
            raise PolicyError(f"{where}: the time it was used at changed meanwhile (another "
                              "process of yours); nothing was changed: run this again")
    finally:
        state.close()
    return noted
