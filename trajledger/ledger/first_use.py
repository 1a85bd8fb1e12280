"""The first use of a log by this user: their state holds no floor of it and no pin.

Scope: whether such a log is taken as found (pinned now, and announced once: `announce`) or
refused (`judge`): a key this user's state noted under its origin whose floor is gone is refused
(`lost_floor`: a first use there would take a rolled-back log as found, review rev25), here,
where a bundle is checked against the floor, and where a log is monitored (`refuse_lost`),
whatever policy names the key (a policy holds keys, never a size: state26); else a key a policy
the user holds names is pinned; ``TRAJLEDGER_REQUIRE_PIN=1`` refuses the rest.
Non-scope: the floor itself and its comparisons (``trust_state``), following a key rotation
(``trust_handover``), where the state lives and whose it is (``user_state``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from .errors import TamperError, shell_word
from .fs import remove_tree
from .user_state import REQUIRE_PIN_ENV, fingerprint, log_id, notice, origin_dir, state_dir

if TYPE_CHECKING:
    from collections.abc import Container

    from .trust_state import TrustState

__all__ = ["announce", "drop_lost", "judge", "lost_floor", "refuse_lost"]


def lost_floor(vkey: str, directory: Path | None = None) -> Path | None:
    """The note of ``vkey`` under its origin in this user's state when the key's own state (its
    floor) is gone: removed by hand (a "damaged" state's directory, a cleaning of ~/.local),
    or lost with a restored home directory. Called before the state is opened (which makes
    it again, empty). None when the key was never noted, or its state is there."""
    root = directory or state_dir()  # (checked once: ci47)
    mark = origin_dir(vkey.split("+", 1)[0], root) / log_id(vkey)
    held = root / "logs" / log_id(vkey) / "state.sqlite"
    return mark if mark.is_file() and not held.exists() else None


def refuse_lost(where: str, vkey: str, lost: Path, also: str = "") -> NoReturn:
    """Refuse a log whose floor this user's state lost (`lost_floor`), saying how to go on.

    Raises:
        TamperError: always.
    """
    raise TamperError(
        f"{where}: your state noted its key {fingerprint(vkey)} ({lost}) but holds no floor "
        "of it: its state was removed, so a rollback since cannot be seen; nothing was read or "
        f"changed. Pin the checkpoint you trust: 'trajledger trust {shell_word(vkey)} --checkpoint "
        f"FILE'{also}; or, to take the log as it is now, remove {lost} and run again",
        lost,
    )


def drop_lost(state: TrustState, where: str, lost: Path, also: str = "") -> NoReturn:
    """Remove ``state``, just made again by its open though `lost_floor` found it lost (so that
    the next use is refused too), and refuse its log (`refuse_lost`).

    Raises:
        TamperError: always.
    """
    state.close()
    remove_tree(state.path)
    refuse_lost(where, state.vkey, lost, also)


def judge(state: TrustState, where: str, vkey_file: Path, *, pinned_ahead: Container[str],
          required: bool, lost: Path | None) -> bool:
    """Whether the first use of the log of ``state`` (no floor, not pinned) goes ahead, taken
    as found: False when a policy the user holds names its key (it is pinned now).

    The lost floor is judged first: a policy names the log's keys, never how large the log
    was, so it cannot tell a rolled-back log from the one the user saw (review state26,
    finding 1); only a checkpoint pinned ('trajledger trust VKEY --checkpoint') can.

    Args:
        state: this user's state of the log, just opened.
        where: the log as the messages name it (``log ORIGIN (DIRECTORY)``).
        vkey_file: the log's ``vkey`` file (what a refusal names as wrong).
        pinned_ahead: the log keys of the policies the user gave.
        required: ``TRAJLEDGER_REQUIRE_PIN`` is set.
        lost: `lost_floor`'s answer before ``state`` was opened.

    Raises:
        TamperError: the state noted the key but lost its floor (the state made by this open
            is removed again, so the next use is refused too), or a pin is required.
    """
    if lost is not None:
        drop_lost(state, where, lost)
    if state.vkey in pinned_ahead:
        state.pin("a policy you hold names it")
        return False
    if required:
        raise TamperError(
            f"{where}: first use, and its key {fingerprint(state.vkey)} was not pinned ahead "
            f"({REQUIRE_PIN_ENV}=1): nothing was read or changed. If this is the log you "
            "expect, pin its key: 'trajledger trust VKEY' (its owner gives you the vkey), or "
            "verify under a policy you hold (--policy FILE)",
            vkey_file,
        )
    return True


def announce(origin: str, state: TrustState) -> None:
    """Say once that the log of ``state`` was taken as found and pinned at its size now."""
    notice(
        f"first use of log {origin}: its key {fingerprint(state.vkey)} is now pinned for you "
        f"at size {state.size} ({state.path}); nothing earlier was known to check it against. "
        "To pin a log ahead instead, run "
        f"'trajledger trust {shell_word(state.vkey)}' before its first use "
        f"(or verify under --policy FILE); {REQUIRE_PIN_ENV}=1 refuses logs not pinned ahead"
    )
