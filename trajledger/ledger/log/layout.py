"""Where things are in a log directory (Tessera's POSIX layout) and the small state formats.

Scope: the file names under ``<ledger>/log/``; the path of a tile or entry bundle and its
parser; which partial tiles a tree size has; the ``.state/treeState`` format (Tessera's) and the
``.state/history`` format (trajledger's: every committed size, so that the partial tiles of
every published checkpoint can be checked for presence).

Non-scope: reading or writing these files (``writer``, ``state``, ``check`` do).
Spec: schemas/log-entry.v1.md (files), c2sp.org/tlog-tiles (paths).
"""

from __future__ import annotations

import base64
import binascii
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from trajledger.verify.errors import FormatError
from trajledger.verify.log_key import HANDOVER_DIR as _HANDOVER_DIR
from trajledger.verify.merkle import HASH_SIZE
from trajledger.verify.strict_json import load_object
from trajledger.verify.tiles import TILE_HEIGHT, TILE_WIDTH, entries_path, tile_path

from ..fs import TMP_PREFIX

__all__ = [
    "CHECKPOINT_FILE",
    "HANDOVER_DIR",
    "HISTORY_FILE",
    "HISTORY_RECORD",
    "INFLIGHT_FILE",
    "INFLIGHT_MARK",
    "LEGACY_INDEX_FILE",
    "LOCK_FILE",
    "STATE_DIR",
    "TREE_STATE_FILE",
    "VKEY_FILE",
    "LogPaths",
    "behind_checkpoint",
    "format_tree_state",
    "history_record",
    "parse_history",
    "parse_tile_rel",
    "parse_tree_state",
    "partial_widths",
    "tile_rel",
]

CHECKPOINT_FILE = "checkpoint"
VKEY_FILE = "vkey"
HANDOVER_DIR = _HANDOVER_DIR
"""``key-handovers/<n>``: the log key's handovers, 1, 2, ... (``verify.log_key``)."""
STATE_DIR = ".state"
LOCK_FILE = ".state/lock"
TREE_STATE_FILE = ".state/treeState"
HISTORY_FILE = ".state/history"
INFLIGHT_MARK = b"1"
"""The first byte of ``.state/lock`` from an append's first write until its publication (``0``,
or an empty file, otherwise): written on the descriptor the writer holds locked, so a commit
creates and frees no inode for it."""
INFLIGHT_FILE = ".state/inflight"
"""The marker of writers before the lock's byte (`INFLIGHT_MARK`): still honoured, and removed,
by recovery."""
LEGACY_INDEX_FILE = ".state/index"
"""Where trajledger 0.1 kept its lookup index; now derived data lives outside ``log/``."""


class LogPaths:
    """The paths of a log directory's own files that every append reads or writes, as strings,
    built once per directory (a commit names each several times: joining `Path` objects cost
    more than the system calls they name)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        root = os.fspath(directory)
        self.root = root
        self.state = f"{root}/{STATE_DIR}"
        self.lock = f"{root}/{LOCK_FILE}"
        self.tree_state = f"{root}/{TREE_STATE_FILE}"
        self.ts_tmp = f"{root}/{STATE_DIR}/{TMP_PREFIX}treeState"
        self.checkpoint = f"{root}/{CHECKPOINT_FILE}"
        self.cp_tmp = f"{root}/{TMP_PREFIX}{CHECKPOINT_FILE}"
        self.history = f"{root}/{HISTORY_FILE}"
        self.vkey = f"{root}/{VKEY_FILE}"


HISTORY_RECORD = struct.Struct(">QI")
"""One history record: the committed size (u64 BE) and the CRC-32 of those 8 bytes (u32 BE)."""


def behind_checkpoint(size: int, signed: int) -> str:
    """Why a treeState of ``size`` behind the signed checkpoint's ``signed`` is refused: no
    crash leaves it (treeState is durable before the checkpoint), but a rollback does, and so
    does a copy made file by file (``cp -r``, ``rsync``) while a command appended: it can take
    the old treeState and the new checkpoint (review out38, finding 2)."""
    return (f"size {size} is behind the signed checkpoint's {signed}: the log was rolled back, "
            "or copied file by file while a command appended to it (copy it again while no "
            "command writes to it)")


def tile_rel(level: int, index: int, width: int | None = None) -> str:
    """Path of a hash tile (level >= 0) or an entry bundle (level -1)."""
    return entries_path(index, width) if level < 0 else tile_path(level, index, width)


def parse_tile_rel(rel: str) -> tuple[int, int, int | None] | None:
    """Parse a canonical path below ``tile/`` into (level or -1 for entries, index, width).

    Returns None for anything that is not exactly the path `tile_rel` would build.
    """
    parts = rel.split("/")
    if len(parts) < 3 or parts[0] != "tile":
        return None
    if parts[1] == "entries":
        level = -1
    elif parts[1].isdigit() and str(int(parts[1])) == parts[1] and int(parts[1]) <= 63:
        level = int(parts[1])
    else:
        return None
    rest = parts[2:]
    width: int | None = None
    if len(rest) >= 2 and rest[-2].endswith(".p"):
        if not rest[-1].isdigit():
            return None
        width = int(rest[-1])
        rest = [*rest[:-2], rest[-2][:-2]]
    index = 0
    for i, group in enumerate(rest):
        digits = group[1:] if i < len(rest) - 1 else group
        if (i < len(rest) - 1 and not group.startswith("x")) or not (
            len(digits) == 3 and digits.isdigit()
        ):
            return None
        index = index * 1000 + int(digits)
    try:
        canonical = tile_rel(level, index, width)
    except ValueError:
        return None
    return (level, index, width) if canonical == rel else None


def partial_widths(size: int) -> Iterator[tuple[int, int, int]]:
    """Yield (level, tile index, width) of every partial hash tile a tree of ``size`` has.

    The partial entry bundle has the level-0 tile's index and width.
    """
    level = 0
    while size >> (TILE_HEIGHT * level):
        width = (size >> (TILE_HEIGHT * level)) % TILE_WIDTH
        if width:
            yield level, size >> (TILE_HEIGHT * (level + 1)), width
        level += 1


# -- treeState --------------------------------------------------------------------------------


def format_tree_state(size: int, root: bytes) -> bytes:
    """Return the ``.state/treeState`` bytes: ``{"size":n,"root":"<b64>"}`` (Tessera's form)."""
    return b'{"size":%d,"root":"%s"}' % (size, base64.b64encode(root))


def parse_tree_state(data: bytes) -> tuple[int, bytes]:
    """Parse ``.state/treeState`` strictly.

    Args:
        data: the file's bytes.

    Returns:
        The committed size and root.

    Raises:
        FormatError: not a JSON object with exactly an integer ``size`` >= 0 and a ``root`` of
            canonical base64 of 32 bytes.
    """
    obj = load_object(data, "treeState")
    if set(obj) != {"size", "root"}:
        raise FormatError(f"treeState: fields are {sorted(obj)}, want ['root', 'size']")
    size, root_b64 = obj["size"], obj["root"]
    if type(size) is not int or size < 0:
        raise FormatError(f"treeState: size {size!r}, want an integer >= 0")
    if not isinstance(root_b64, str):
        raise FormatError(f"treeState: root is {type(root_b64).__name__}, want base64 text")
    try:
        root = base64.b64decode(root_b64, validate=True)
    except binascii.Error as e:
        raise FormatError(f"treeState: root {root_b64!r} is not base64") from e
    if len(root) != HASH_SIZE or base64.b64encode(root).decode() != root_b64:
        raise FormatError(f"treeState: root {root_b64!r} is not canonical base64 of 32 bytes")
    return size, root


# -- history ----------------------------------------------------------------------------------


def history_record(size: int) -> bytes:
    """The history record of a committed size."""
    body = struct.pack(">Q", size)
    return HISTORY_RECORD.pack(size, zlib.crc32(body))


def parse_history(data: bytes) -> tuple[list[int], int | None, bool]:
    """Split history bytes into sizes.

    Returns:
        (sizes up to the first bad record, the record number of a bad CRC or None, whether a
        torn partial record ends the data).
    """
    sizes: list[int] = []
    n = HISTORY_RECORD.size
    whole = len(data) - len(data) % n
    for off in range(0, whole, n):
        size, crc = HISTORY_RECORD.unpack_from(data, off)
        if zlib.crc32(data[off : off + 8]) != crc:
            return sizes, off // n, whole != len(data)
        sizes.append(size)
    return sizes, None, whole != len(data)
