"""A ledger's settings file, ``<home>/ledger.toml``.

Scope: the settings (`LedgerConfig`: origin, store location, whether keys are encrypted, group
sharing), their TOML text and its checks, a new log origin (`default_origin`), and which changes
of pinned settings a user must accept (`setting_changes`).
Non-scope: pinning them in the user's state and opening the ledger (`trajledger.ledger.home`).
"""

from __future__ import annotations

import itertools
import os
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import LedgerError, shell_word

__all__ = [
    "CONFIG_NAME",
    "DEFAULT_HOME",
    "FORMAT_VERSION",
    "KEYS_ENCRYPTED",
    "KEYS_PLAIN",
    "LedgerConfig",
    "default_origin",
    "init_refusal",
    "no_ledger",
    "setting_changes",
]

FORMAT_VERSION = 1
CONFIG_NAME = "ledger.toml"
DEFAULT_HOME = ".trajledger"
"""The ledger directory ``trajledger init`` makes in the current directory."""
KEYS_ENCRYPTED, KEYS_PLAIN = "encrypted", "plain"
_SETTINGS = ("format", "origin", "store", "keys", "group_writable")
"""Every setting of ``[ledger]``."""


def _toml_str(value: str) -> str:
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    # TOML forbids raw control characters, DEL (U+007F) included, in basic strings.
    out = "".join(c if " " <= c != "\x7f" else f"\\u{ord(c):04x}" for c in out)
    return f'"{out}"'


def default_origin() -> str:
    """A unique log origin: ``trajledger/<host>/<8 random hex>`` (no spaces, no '+')."""
    host = "".join(c for c in os.uname().nodename if c.isalnum() or c in ".-")[:40] or "host"
    return f"trajledger/{host}/{secrets.token_hex(4)}"


@dataclass(frozen=True)
class LedgerConfig:
    """Settings from ``ledger.toml``.

    Attributes:
        origin: the log's origin (its name).
        store: where blobs live: a directory relative to the ledger, or a URI.
        format: the settings format.
        keys: ``encrypted`` (a plaintext private key here is refused as planted) or ``plain``
            (demo keys), recorded at ``init``; None in a ledger of trajledger 0.1.0, which did
            not record it (``trajledger upgrade`` does).
        group_writable: the ledger is shared through its directory's group: members of the
            group may write it (others never).
    """

    origin: str
    store: str = "objects"
    format: int = FORMAT_VERSION
    keys: str | None = None
    group_writable: bool = False

    def to_toml(self) -> bytes:
        """The TOML text of these settings."""
        out = (
            "# trajledger ledger settings\n[ledger]\n"
            f"format = {self.format}\n"
            f"origin = {_toml_str(self.origin)}\n"
            f"# where blobs live: a directory relative to this file, or a URI (s3://bucket/prefix)\n"
            f"store = {_toml_str(self.store)}\n"
        )
        if self.keys is not None:
            out += (
                '# "encrypted": a private key file here that is not encrypted is refused\n'
                f"keys = {_toml_str(self.keys)}\n"
            )
        if self.group_writable:
            out += "# members of this directory's group may write the ledger (others never)\n"
            out += "group_writable = true\n"
        return out.encode()

    @property
    def store_pin(self) -> str:
        """The store setting as pinned: a relative directory normalised (it stays valid when
        the ledger moves), an absolute path or a URI exactly as written."""
        if "://" in self.store or os.path.isabs(self.store):
            return self.store
        return os.path.normpath(self.store)

    @classmethod
    def from_toml(cls, data: bytes, where: Path) -> LedgerConfig:
        """Parse and check ``ledger.toml``.

        Raises:
            LedgerError: not TOML, missing, unknown or ill-typed settings, an unknown format
                version.
        """
        try:
            doc: dict[str, Any] = tomllib.loads(data.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise LedgerError(f"{where}: not valid TOML: {e}") from e
        except RecursionError as e:
            raise LedgerError(f"{where}: not valid TOML: nested too deeply") from e
        section = doc.get("ledger")
        if not isinstance(section, dict):
            raise LedgerError(f"{where}: no [ledger] section")
        fmt = section.get("format")
        if fmt != FORMAT_VERSION:
            raise LedgerError(
                f"{where}: format {fmt!r}, this trajledger reads format {FORMAT_VERSION}"
            )
        # A setting misspelt would be a default taken in silence (`key = "encrypted"`: keys
        # in the clear accepted; review rev17).
        if other := sorted(set(doc) - {"ledger"}):
            raise LedgerError(f"{where}: unknown table or setting {other[0]!r} (ledger.toml "
                              "holds [ledger] only)")
        if unknown := sorted(set(section) - set(_SETTINGS)):
            raise LedgerError(f"{where}: unknown setting {unknown[0]!r} in [ledger] (the "
                              f"settings are {', '.join(_SETTINGS)})")
        origin = section.get("origin")
        store = section.get("store", "objects")
        if (
            not isinstance(origin, str)
            or not origin
            or any(c.isspace() or c == "+" for c in origin)
        ):
            raise LedgerError(f"{where}: origin must be a non-empty string without spaces or '+'")
        if not isinstance(store, str) or not store:
            raise LedgerError(f"{where}: store must be a non-empty string")
        keys = section.get("keys")
        if keys is not None and keys not in (KEYS_ENCRYPTED, KEYS_PLAIN):
            raise LedgerError(f'{where}: keys must be "{KEYS_ENCRYPTED}" or "{KEYS_PLAIN}"')
        group = section.get("group_writable", False)
        if not isinstance(group, bool):
            raise LedgerError(f"{where}: group_writable must be true or false")
        return cls(origin, store, fmt, keys, group)


def setting_changes(old: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """The changes of pinned settings a user must accept (weaker ones, or a store moved)."""
    out = []
    if old.get("store") != now["store"]:
        out.append(f"store is {now['store']!r}, but it was {old.get('store')!r} when you last "
                   "used this ledger (blobs would be read from and written to another place)")
    if old.get("keys") == KEYS_ENCRYPTED and now["keys"] != KEYS_ENCRYPTED:
        out.append(f"keys is {now['keys']!r}" if now["keys"] else "keys is not set (as in a "
                   "ledger of trajledger 0.1.0)")
        out[-1] += (f", but this ledger's keys were {KEYS_ENCRYPTED!r} when you last used it "
                    "(plaintext keys would be accepted)")
    if not old.get("group_writable") and now["group_writable"]:
        out.append("group_writable is true, but it was not when you last used this ledger "
                   "(members of its group could replace keys and evidence)")
    return out


def _inner(root: Path) -> Path | None:
    """``root/.trajledger`` when ``root`` is no ledger but holds one there (``trajledger init``
    was run in ``root``)."""
    inner = root / DEFAULT_HOME
    return inner if not (root / CONFIG_NAME).exists() and (inner / CONFIG_NAME).is_file() else None


def _ledgers_below(here: Path) -> list[str]:
    """The first two directories of ``here`` (of at most 1,000 entries looked at) that are a
    ledger (``demo`` after ``trajledger quickstart demo``, when a command is run where the
    quickstart was) or hold one (``lab/.trajledger``), as ``--ledger`` takes them."""
    found: list[str] = []
    try:
        for e in sorted(itertools.islice(os.scandir(here), 1000), key=lambda e: e.name):
            d = Path(e.name)
            if not e.is_dir():
                continue
            if (here / d / CONFIG_NAME).is_file() and (here / d / "log").is_dir():
                found.append(str(d))
            elif (here / d / DEFAULT_HOME / CONFIG_NAME).is_file():
                found.append(str(d / DEFAULT_HOME))
    except OSError:
        pass
    return found[:2]


def ledger_path(root: str | os.PathLike[str]) -> Path:
    """``root`` as a `Path`, refused when it (or where it leads) is not valid UTF-8: Arrow and
    the index open files by UTF-8 name, so such a ledger would fail at its first batch with a
    bug report (``LANG=C`` and a name made by another tool). A loop of symbolic links is
    refused too (rev37: it was a bug report, ``RuntimeError`` from `Path.resolve`)."""
    def shown(where: Path) -> str:
        return os.fsencode(where).decode("utf-8", "backslashreplace")

    try:
        resolved = Path(root).resolve()
    except (RuntimeError, OSError):  # (ELOOP: RuntimeError before Python 3.13)
        raise LedgerError(f"{shown(Path(root).absolute())}: the ledger's path goes round a "
                          "loop of symbolic links: give the directory's own path, or point the "
                          "link at it") from None
    for where in (Path(root).absolute(), resolved):
        try:
            os.fsencode(where).decode("utf-8")
        except UnicodeDecodeError as e:
            raise LedgerError(f"{shown(where)}: the ledger's path is not valid UTF-8 (byte "
                              f"{e.start}), which Arrow cannot open: rename the directory"
                              ) from None
    return Path(root)


def no_ledger(root: Path) -> str:
    """Why no ledger opens at ``root``; it names ``root/.trajledger`` when that is one (given
    ``--ledger lab`` for the ``lab/.trajledger`` that ``cd lab && trajledger init`` made)."""
    inner = _inner(root)
    if inner is None and root == Path(DEFAULT_HOME):  # none from here up: one just below?
        found = _ledgers_below(Path.cwd() if root.parent == Path() else root.parent)
        if found:
            names = " and ".join(str(d) for d in found)
            return (f"{root}: no ledger here or above, but {names} "
                    f"{'is one' if len(found) == 1 else 'are ledgers'}: give --ledger "
                    f"{shell_word(found[0])} (or cd {shell_word(Path(found[0]).parts[0])} "
                    "first), or run 'trajledger init' for a new ledger here")
    if inner is None:
        return f"{root}: no ledger here; run 'trajledger init' or pass --ledger DIR"
    return (f"{root}: no ledger here, but {inner} is one (made by 'trajledger init' in {root}): "
            f"give that (--ledger {shell_word(inner)}; Ledger.open({str(inner)!r}))")


def init_refusal(root: Path) -> str | None:
    """Why no ledger may be made at ``root``: one is there; ``root`` is inside a ledger's
    directory (its ``.trajledger`` or ``keys/``), where one of the two would hide the other; or
    one is in ``root/.trajledger``, which a ledger at ``root`` would hide from every command run
    in ``root`` (they find ``root`` first). None when it may."""
    if (root / CONFIG_NAME).exists():
        return f"{root}: a ledger already exists here"
    outer = next((d for d in root.absolute().parents
                  if (d / CONFIG_NAME).is_file() and (d / "log").is_dir()), None)
    if outer is not None:  # 'cd demo && trajledger init' after the quickstart
        return (f"{root}: inside the ledger {outer}, which commands run there would find first "
                "or which this one would hide: make a new ledger outside it (--ledger DIR)")
    inner = _inner(root)
    if inner is None:
        return None
    return (f"{root}: holds the ledger {inner}: a second ledger here would hide it from every "
            f"command run in {root}; give --ledger {shell_word(inner)} to use it, or another "
            "directory for a new ledger")
