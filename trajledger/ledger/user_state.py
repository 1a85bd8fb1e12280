"""The user's state directory: where each user keeps what write access to a ledger must not
change (the floors and indexes of `trajledger.ledger.trust_state`, the pins of
`trajledger.ledger.home`), and how its directories are named, made and checked.

Scope: the state directory's location (`state_dir`), its per-origin and per-key directory names,
making them private (0700) or refusing them when others may write them, a log key's fingerprint
as people compare it, and the one-line notices to the user.
Non-scope: what is kept inside (``trust_state``, ``home``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from pathlib import Path

from trajledger.verify.ledger_dir import read_regular

from .errors import LedgerError, shell_word
from .fs import refuse_writable

__all__ = [
    "REQUIRE_PIN_ENV",
    "STATE_DIR_ENV",
    "check_enclosing",
    "fingerprint",
    "known_origin",
    "log_id",
    "notice",
    "origin_dir",
    "private_dir",
    "read_state_file",
    "refuse_foreign",
    "require_pin",
    "scratch_dir",
    "state_dir",
]

STATE_DIR_ENV = "TRAJLEDGER_STATE_DIR"
REQUIRE_PIN_ENV = "TRAJLEDGER_REQUIRE_PIN"
"""Set to 1: the first use of a log whose key was not pinned ahead (`trajledger trust`, a
``--policy`` naming it, ``init``) is refused instead of announced (`require_pin`)."""
STATE_FILE_BYTES = 1 << 20
"""The most read of a small file of the user's state (`read_state_file`): a pin, a key."""


def require_pin() -> bool:
    """Whether ``TRAJLEDGER_REQUIRE_PIN`` requires logs to be pinned ahead: 1, true, yes or on
    (any case) do; unset, empty, 0, false, no or off do not.

    Raises:
        LedgerError: any other value (a setting that guards trust is never guessed as off).
    """
    raw = os.environ.get(REQUIRE_PIN_ENV, "")
    value = raw.strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise LedgerError(f"{REQUIRE_PIN_ENV}={raw!r}: want 1 (a log must be pinned ahead) or 0; "
                      "nothing was read")


def notice(message: str) -> None:
    """Tell the user something they must know but that fails nothing (``NOTE: ...`` on
    stderr): a first use of a log, a setting of an older trajledger to upgrade."""
    sys.stderr.write(f"NOTE: {message}\n")
    sys.stderr.flush()


def state_dir() -> Path:
    """The user's trajledger state directory, outside every ledger.

    It holds what write access to a ledger directory must not be able to change: the newest
    checkpoint of each log this user has seen (a floor: the log only grows) and the status of
    each log derived from verified entries. ``$TRAJLEDGER_STATE_DIR``, else
    ``$XDG_STATE_HOME/trajledger``, else ``~/.local/state/trajledger``. A relative
    ``XDG_STATE_HOME`` is ignored, as the XDG specification says.

    Raises:
        LedgerError: the path is relative (``TRAJLEDGER_STATE_DIR`` or ``HOME``): the state,
            and every floor and pin in it, would change with the current directory, and one
            found in a directory someone handed over would be theirs (review rev25); a
            directory enclosing it is another user's to rename (`check_enclosing`).
    """
    explicit = os.environ.get(STATE_DIR_ENV)
    xdg = os.environ.get("XDG_STATE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "state"
    where = Path(explicit) if explicit else base / "trajledger"
    if not where.is_absolute():
        how = f"{STATE_DIR_ENV}={explicit!r}" if explicit else f"HOME={os.environ.get('HOME')!r}"
        raise LedgerError(f"your state directory {where} is not an absolute path ({how}): it "
                          "would follow the current directory; set "
                          f"{STATE_DIR_ENV} to an absolute path; nothing was read or changed")
    check_enclosing(where)
    return where


def fingerprint(vkey: str) -> str:
    """A log key as people compare it: ``<origin>+<8 hex key id>+sha256:<16 hex>`` (the C2SP key
    id, then a SHA-256 of the 32-byte public key, which a collision of the short id cannot
    match)."""
    import base64

    parts = vkey.split("+", 2)
    try:
        raw = base64.b64decode(parts[2])[1:]
    except (IndexError, ValueError):
        return vkey
    return f"{parts[0]}+{parts[1]}+sha256:{hashlib.sha256(raw).hexdigest()[:16]}"


def private_dir(path: Path, *, parent: bool = True) -> Path:
    """Make (mode 0700) or check a directory of the user's state: one that others or the
    group may write (sticky or not) or that another user owns is refused (`refuse_foreign`),
    since whoever writes it decides what this user trusts; so is its parent unless ``parent``
    is False (the state directory's own parent is not the state's).

    Raises:
        LedgerError: it is writable by others or owned by another user (the message says what
            to do), or cannot be made.
    """
    if parent:
        refuse_foreign(path.parent)  # before anything is made in it
    else:
        check_enclosing(path)
    missing = []
    here = path
    while not here.exists() and here != here.parent:
        missing.append(here)
        here = here.parent
    try:
        for d in reversed(missing):  # each made 0700 (mkdir's parents would get the umask's)
            d.mkdir(mode=0o700, exist_ok=True)
    except OSError as e:
        what = f" ({here} is not a directory)" if here.exists() and not here.is_dir() else ""
        raise LedgerError(f"trust state {path}: cannot create: {e.strerror or e}{what}"
                          f"{state_step()}") from e
    refuse_foreign(path)
    return path


def state_step() -> str:
    """What to do about a state directory that cannot be made or written (out52): the end of
    the line that says so."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return (f"; nothing was changed: set {STATE_DIR_ENV} (now {explicit!r}) to a directory "
                "of yours that you can write, or unset it to use ~/.local/state/trajledger")
    return ("; nothing was changed: make it a directory of yours that you can write, or set "
            f"{STATE_DIR_ENV} to one")


def refuse_foreign(path: Path) -> None:
    """Refuse a file or directory of the user's state that is not theirs alone: owned by
    another user (a state directory named in a shared place, a ``sudo`` run on another
    user's state, a symbolic link to another user's directory), or writable by the group or
    others, a sticky directory too (another user could make a name in it first, a log's
    directory or a pin, and own it). A path that does not exist passes.

    Raises:
        LedgerError: the path, its owner or mode, and what to do.
    """
    try:
        owner = path.stat().st_uid
    except OSError:
        return
    if owner != os.geteuid():
        raise LedgerError(
            f"{path}: owned by another user (uid {owner}), who decides through it what you "
            f"trust; nothing was read or changed: use a state directory of your own "
            f"({STATE_DIR_ENV}), or if it is yours run 'chown -R {os.geteuid()} {shell_word(path)}'"
        )
    refuse_writable(path, sticky=False)


_SAID: set[Path] = set()
"""The group-writable enclosing directories `check_enclosing` has said (once a process)."""


def check_enclosing(state: Path) -> None:
    """Check the directories enclosing the state directory ``state``, as ssh does those above
    ``~/.ssh`` and gpg those above its home (review state26, finding 4): whoever may write one
    can rename the state directory away (the next use is then a first use) or put another in
    its place. One that others may write and that is not sticky, or that a user other than
    this one and root owns, is refused; one its group may write is said once (gpg's "unsafe
    enclosing directory permissions"), not refused: umask 002 systems make ``~/.local/state``
    0775; and passes in silence when that group is the user's own (a user-private group: its
    name is the user's, no other member), as Debian's ssh allows. Missing ones pass (they are
    made 0700). A state directory reached through links is checked where it is too (the
    parents of its real path, as ssh checks a ``realpath``), and a link on the way that another
    user owns is refused: they may point it elsewhere (review rev27, finding 2).

    Raises:
        LedgerError: a parent others may write, or another user owns, or a link on the way
            another user owns (exit 3).
    """
    import grp
    import pwd
    import stat

    me = os.geteuid()
    real = Path(os.path.realpath(state))
    for link in (state, *state.parents) if real != state else ():  # (no link on the way)
        with contextlib.suppress(OSError):
            if link.is_symlink() and (uid := link.lstat().st_uid) not in (me, 0):
                raise LedgerError(
                    f"{link}: a link owned by another user (uid {uid}), who can point it, and "
                    f"your state directory {state} with it, elsewhere; nothing was read or "
                    f"changed: use a state directory elsewhere ({STATE_DIR_ENV}), e.g. {real}")
    for parent in [*state.parents, *(p for p in real.parents if p not in state.parents)]:
        try:
            st = parent.stat()
        except OSError:
            continue
        mode = stat.S_IMODE(st.st_mode)
        sticky = bool(st.st_mode & stat.S_ISVTX)
        if st.st_uid not in (me, 0):
            raise LedgerError(
                f"{parent}: owned by another user (uid {st.st_uid}), who can rename your state "
                f"directory {state} away or put theirs in its place; nothing was read or "
                f"changed: use a state directory elsewhere ({STATE_DIR_ENV})")
        if mode & stat.S_IWOTH and not sticky:
            raise LedgerError(
                f"{parent}: writable by other users (mode {mode:04o}), not sticky: another user "
                f"can rename your state directory {state} away or put theirs in its place; "
                f"nothing was read or changed: run 'chmod o-w {shell_word(parent)}', or use a "
                f"state directory elsewhere ({STATE_DIR_ENV})")
        if not mode & stat.S_IWGRP or sticky or parent in _SAID:
            continue
        try:
            group, user = grp.getgrgid(st.st_gid), pwd.getpwuid(me).pw_name
            if group.gr_name == user and set(group.gr_mem) <= {user}:
                continue  # the user's own group
            name = group.gr_name
        except KeyError:
            name = str(st.st_gid)
        _SAID.add(parent)
        notice(f"{parent}: writable by its group {name} (mode {mode:04o}): a member can rename "
               f"your state directory {state} away (the next use is then a first use); run "
               f"'chmod g-w {shell_word(parent)}' unless you share it on purpose")


def scratch_dir(ledger: Path, *, shared: bool) -> Path:
    """Where commands write the files they will hash, store and sign (descriptors, converted
    rollouts, a run's workspace, an import's staging): ``<ledger>/tmp``; for a ledger shared
    through its group (``shared``), ``<state>/tmp`` instead, private to this user (0700). A
    group member may rename any directory of a shared ledger and put theirs in its place
    between a command's write and its hash, and have their bytes signed (rev14); nothing the
    group can write is on the path to a private directory of the state.

    Raises:
        LedgerError: the state directory is writable by others (`private_dir`).
    """
    return private_dir(state_dir() / "tmp") if shared else ledger / "tmp"


def origin_dir(origin: str, directory: Path | None = None) -> Path:
    """The state's directory of a log's origin: a note per key of that log seen (named by the
    key), and the pinned settings of its ledger (``.settings.json``)."""
    return (directory or state_dir()) / "origins" / log_id(origin)


def known_origin(origin: str, directory: Path | None = None) -> Path | None:
    """Where this user's state notes the keys of a log of ``origin``, if it knows one."""
    path = origin_dir(origin, directory)
    try:
        return path if any(not n.startswith(".") for n in os.listdir(path)) else None
    except OSError:
        return None


def log_id(vkey: str) -> str:
    """The name of a log's (or an origin's) directory in the state: a hash of its key."""
    return hashlib.sha256(vkey.encode()).hexdigest()[:32]


def read_state_file(path: Path, errors: str = "strict") -> str:
    """A small file of the user's state (a ledger's pin or settings, a log key noted for an
    origin, a reading's progress) as text, at most `STATE_FILE_BYTES`, opened as
    `verify.ledger_dir.read_regular` opens it: a FIFO, a device or a socket planted there is
    refused before a byte is read, where ``Path.read_text`` waited for ever for a writer or
    read ``/dev/zero`` until memory ran out (docs/SECURITY.md, review left22, finding 3).

    Raises:
        OSError: it cannot be opened, is not a regular file, or cannot be read.
        UnicodeDecodeError: not UTF-8 (with ``errors="strict"``).
        LedgerError: another user owns it, or others may write it (`refuse_foreign`).
    """
    refuse_foreign(path)
    return read_regular(path, STATE_FILE_BYTES).decode("utf-8", errors)
