"""What a command wrote outside its output directory, looked for after it exited 0: the
files under its working directory changed since it started (a training loop saving where it
always did: out46 finding 7), and among them files of the checkpoint's kind beside a full
output (a launcher's rank saving its part where it always did: out58). Bounded walks
(rev44 finding 3): hidden directories, the ledger's and the output's not read.

Non-scope: deciding what a checkpoint is (`train.train_command` records the output's files).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

__all__ = ["BESIDE_GIVEN", "BesideOutputWarning", "beside_output", "written_elsewhere"]


def written_elsewhere(workdir: Path, since: float, skip: Path, most: int = 20_000) -> str:
    """``; it wrote a/b, … under WORKDIR: write ...``, naming up to three files changed in
    ``workdir`` since ``since`` (out46 finding 7: a training loop saving where it always did),
    names escaped to keep one line (`_written`); or empty."""
    found = _written(workdir, since, (skip,), most)
    if not found:
        return ""
    return (f"; it wrote {', '.join(found[:3])}{', …' if len(found) > 3 else ''} under "
            f"{workdir}: save checkpoints under $TRAJLEDGER_OUTPUT_DIR instead")


class BesideOutputWarning(UserWarning):
    """A command whose output holds the checkpoint's files also wrote files of the same kind
    in its working directory (a launcher's rank saving its part where it always did): they
    are not in the checkpoint (out58)."""


BESIDE_GIVEN: Final = 1_000
"""Entries read under a given output's parent (`beside_output`)."""
_TEXT_SUFFIXES: Final = frozenset({"", ".json", ".jsonl", ".txt", ".log", ".yaml", ".yml",
                                   ".toml", ".csv", ".md", ".out", ".err"})
"""Suffixes a run writes beside its output for its own reading (configs, logs): no sign that
a file there belongs to the model (`beside_output`)."""


def beside_output(workdir: Path, since: float, files: Mapping[str, Path],
                  skip: Sequence[Path], most: int = 5_000, given: Path | None = None) -> None:
    """Warn (`BesideOutputWarning`) when the command also wrote, under ``workdir`` since
    ``since`` (not under ``skip``: the ledger, the output), a file with a suffix of one of the
    output's ``files`` other than a config's or a log's (``rank1.bin`` beside ``rank0.bin``):
    the checkpoint about to be recorded leaves it out (out56's Left, out58). The walk of
    `written_elsewhere`, bounded lower (every successful run pays it: about 0.1 s for 5,000
    entries, docs/PERFORMANCE.md); a rank saves near the top of the directory. With a
    ``given`` output (``train --output DIR``), DIR's parent is looked under too when the first
    walk found nothing and it is not under ``workdir`` (a launcher's rank writing
    ``DIR/../rank1.bin``: out58's Left, fix60), ``workdir`` not again, bounded by
    `BESIDE_GIVEN` entries: a parent such as /tmp or $HOME is cut there, not read whole."""
    kinds = {Path(n).suffix.lower() for n in files} - _TEXT_SUFFIXES
    if not kinds:
        return
    where = workdir
    found = _written(workdir, since, skip, most, lambda n: Path(n).suffix.lower() in kinds)
    if not found and given is not None:
        parent = given.resolve().parent
        if not parent.is_relative_to(workdir.resolve()):
            where = parent
            found = _written(parent, since, (*skip, workdir), BESIDE_GIVEN,
                             lambda n: Path(n).suffix.lower() in kinds)
    if found:
        warnings.warn(BesideOutputWarning(
            f"the command also wrote {', '.join(found[:3])}{', …' if len(found) > 3 else ''} "
            f"under {where}, outside $TRAJLEDGER_OUTPUT_DIR, files of the kind of the "
            f"checkpoint's ({', '.join(sorted(kinds))}): they are not in the checkpoint "
            "recorded now (a rank saving its part of the model where it always did?); if they "
            "belong to the model, write every part under $TRAJLEDGER_OUTPUT_DIR and train again"),
            stacklevel=3)


def _written(workdir: Path, since: float, skip: Sequence[Path], most: int,
             keep: Callable[[str], bool] = lambda name: True) -> list[str]:
    """Up to three (or a few more) files under ``workdir`` changed since ``since`` whose
    relative name ``keep`` keeps, escaped to keep one line; hidden directories and those
    under ``skip`` not read, nor more than ``most`` entries, in one directory too (rev44
    finding 3)."""
    found: list[str] = []
    seen, todo = 0, [os.fspath(workdir)]  # (todo: depth first, by name)
    skipped = {p.resolve() for p in skip}
    while todo and len(found) < 3 and seen < most:
        try:
            with os.scandir(todo.pop()) as listing:
                entries = sorted(itertools.islice(listing, most - seen), key=lambda e: e.name)
        except OSError:
            continue
        seen += len(entries)
        with contextlib.suppress(OSError):
            todo += [e.path for e in reversed(entries) if e.is_dir(follow_symlinks=False)
                     and not e.name.startswith(".") and Path(e.path).resolve() not in skipped]
        found += [n if n.isprintable() else ascii(n)[1:-1] for e in entries
                  if _changed(e, since)
                  for n in [os.path.relpath(e.path, workdir)] if keep(n)]
    return found


def _changed(entry: os.DirEntry[str], since: float) -> bool:
    with contextlib.suppress(OSError):  # (an entry gone meanwhile is not: False)
        return not entry.is_dir(follow_symlinks=False) and entry.stat(
            follow_symlinks=False).st_mtime >= since - 1
    return False
