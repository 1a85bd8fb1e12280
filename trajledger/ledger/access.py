"""Who may write a ledger: the paths refused when others (or the group) may write them, and the
process umask that keeps what is made later in the ledger out of their reach (moved out of
`home`, which calls both when it opens or makes a ledger)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .config import CONFIG_NAME, LedgerConfig

__all__ = ["LOG_KEY_DIR", "private_umask", "refuse_writable_ledger"]

LOG_KEY_DIR = "log-key"
"""The log key's directory, beside ``keys/`` (`home` re-exports it)."""


def refuse_writable_ledger(root: Path, config: LedgerConfig) -> None:
    """Refuse a ledger whose directories, settings or key files others may write (or its group,
    unless the ledger is shared through it, ``group_writable = true``): they could replace
    evidence, a setting or a key between a check and its use. Private keys are checked again
    when loaded (readable by nobody else).

    Every such path is looked at before the refusal, which names the first and, when there are
    more (a ledger copied by a tool that kept no modes: 17 paths in the quickstart's), how many
    and the one ``chmod -R`` that fixes them all: a user ran the command 17 times, one chmod
    each, to learn them.

    Raises:
        LedgerError: such a path (the message names the chmod to run).
    """
    from .errors import LedgerError, shell_word
    from .fs import refuse_writable

    hint = (
        "" if config.group_writable
        else " (a ledger shared through its group sets group_writable = true in ledger.toml)"
    )
    # log/.state: the files the log's writer opens by fixed names (its lock, tree state, history).
    paths = [root, root / CONFIG_NAME, root / "log", root / "log" / ".state", root / "objects"]
    for d in (root / "keys", root / LOG_KEY_DIR):
        paths.append(d)
        with contextlib.suppress(OSError):
            paths += sorted(d.iterdir())
    refused: list[LedgerError] = []
    for path in paths:
        try:
            refuse_writable(path, group=not config.group_writable,
                            hint=hint if path != root / CONFIG_NAME else "")
        except LedgerError as e:
            refused.append(e)
    if len(refused) > 1:
        bits = "o" if config.group_writable else "go"
        raise LedgerError(f"{refused[0]}; and {len(refused) - 1} more path(s) of this ledger "
                          f"likewise: 'chmod -R {bits}-w {shell_word(root)}' fixes them "
                          "all") from refused[0]
    if refused:
        raise refused[0]


def private_umask(config: LedgerConfig) -> None:
    """Take write for others (and for the group, unless the ledger is shared through it) out
    of this process's umask: the ledger's own directories are made 0755 whatever the umask,
    but what is made in them later (the log's state and tiles, the store's fan-out, temporary
    directories) takes the umask, and under 000 (or 002 with a group of others) it would be
    writable by users `refuse_writable_ledger` keeps out. Bits are only ever added: a stricter
    umask stays (during the change it is 077, never looser)."""
    mask = 0o002 if config.group_writable else 0o022
    os.umask(os.umask(0o077) | mask)
