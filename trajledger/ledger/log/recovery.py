"""Recovering forward: what a writer removes, under the lock, before it appends after a crash.

Scope: `remove_leftovers` (temp files, and every tile or bundle past the committed size: an
append that died before its commit), `truncate_history` (history records past the committed
size). Nothing at or below the committed size is touched. Non-scope: classifying the state
(``state``), republishing a committed tail (``writer``).
Spec: schemas/log-entry.v1.md ("Appending").
"""

from __future__ import annotations

import os
from pathlib import Path

from trajledger.verify.tiles import TILE_HEIGHT, TILE_WIDTH

from .files import drop_temp_files, remove
from .layout import (
    HANDOVER_DIR,
    HISTORY_FILE,
    HISTORY_RECORD,
    STATE_DIR,
    parse_history,
    tile_rel,
)
from .state import tamper

__all__ = ["remove_leftovers", "truncate_history"]


def remove_leftovers(directory: Path, size: int) -> None:
    """Remove temp files (of the log, its state and its key handovers) and every tile or
    bundle past the committed size."""
    for d in (directory, directory / STATE_DIR, directory / HANDOVER_DIR):
        drop_temp_files(d)
    levels = [-1]
    level = 0
    while (directory / "tile" / str(level)).is_dir():
        levels.append(level)
        level += 1
    for level in levels:
        shift = TILE_HEIGHT * (level + 1) if level >= 0 else TILE_HEIGHT
        full = size >> shift
        width = (size >> (shift - TILE_HEIGHT)) % TILE_WIDTH
        seen: set[Path] = set()
        index = full
        while True:
            path = directory / tile_rel(level, index)
            pdir = Path(str(path) + ".p")
            if path.parent not in seen:
                seen.add(path.parent)
                drop_temp_files(path.parent)
                drop_temp_files(pdir)
            if not (path.exists() or pdir.exists()):
                break
            remove(path)
            if index == full and pdir.is_dir():
                for name in os.listdir(pdir):
                    if not (name.isdigit() and int(name) <= width):
                        remove(pdir / name)
            else:
                remove(pdir)
            index += 1
        # Partial tiles of tiles completed just before a crash: garbage, as after a commit.
        index = full - 1
        while index >= 0:
            pdir = directory / (tile_rel(level, index) + ".p")
            if not pdir.exists():
                break
            remove(pdir)
            index -= 1


def truncate_history(directory: Path, size: int) -> None:
    """Drop history records past the committed size (an append that did not commit).

    Reads only the file's tail: the records past the committed size are the last ones. A
    commit makes its history record durable before it commits, so a history without a record
    of the committed size (deleted, truncated, edited) is tampering, not a crash: refused, so
    that an append does not bury it (`log verify` would then pass).

    Raises:
        TamperError: a committed size above 0 and no history, or a history (its records
            intact) that does not record it.
    """
    path = directory / HISTORY_FILE
    try:
        length = path.stat().st_size
    except FileNotFoundError:
        if size > 0:
            raise tamper(path, f"missing, but the committed size {size} needs it") from None
        return
    n = HISTORY_RECORD.size
    whole = length - length % n
    with open(path, "rb") as f:
        tail_from = max(0, whole - 64 * n)
        f.seek(tail_from)
        data = f.read(whole - tail_from)
    sizes, bad, _torn = parse_history(data)
    if bad is not None:
        return  # damaged, not interrupted: leave it for 'log verify' to report
    keep = [i for i, s in enumerate(sizes) if s <= size]
    if not keep and size == 0 and tail_from == 0:
        end = 0
    elif not keep or sizes[keep[-1]] != size:
        last = f"its last record is size {sizes[keep[-1]]}" if keep else "it records no size"
        raise tamper(path, f"{last}, not the committed size {size}: it was truncated or edited")
    else:
        end = tail_from + (keep[-1] + 1) * n
    if end < length:
        with open(path, "r+b") as f:
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())
