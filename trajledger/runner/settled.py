"""A run's outputs held still while they are recorded: what is signed is what was read.

Scope: `Settled`, taken when a command's outputs are listed, after its process group was
stopped (`runner.command`): each output file's identity and times (``os.stat``: device, inode,
size, mtime and ctime in nanoseconds), the names in the output directory, and the digests
trajledger knows some files must have: the kept logs (hashed as they streamed, which the
provenance's ``stdout`` / ``stderr`` byproducts state) and an evaluation's ``results.json``
(hashed as it was parsed, which its predicate's tests and metrics come from).

- `Settled.opened` is given each file the store opens (its ``fstat``): the file listed;
- `Settled.stored` is given each file as the store hashed it (`ledger.record.record_files`'
  ``on_file``): its size and ``stat`` must be those it had when listed, and its digest the
  known one;
- `Settled.check` (under the log's lock, just before the append): every file still unchanged,
  and the output directory holding the same names.

Why: a process COMMAND started outside its process group (``setsid``, a daemon) with its output
pipes closed is not stopped when COMMAND exits; if it still writes the outputs, what is stored
is a mix of their states, and a kept ``--output`` directory is not the checkpoint recorded; a
command (or such a process) that rewrites a kept log or ``results.json`` after trajledger hashed
or parsed it had the signed record state one thing and its files another (trn35 findings 1 to
3). A change is refused (exit 1, nothing recorded; what was stored stays for ``gc``).

Non-scope: stopping such a process (it runs as the user); the inputs' check
(`runner.workdir.check_data_dir`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from trajledger.verify.errors import VerificationError

if TYPE_CHECKING:
    from trajledger.verify.digest import FileDigest

__all__ = ["OutputsChangedError", "Settled"]

HINT = ("a process the command started outside its process group (setsid, a daemon) may still "
        "write there: stop it, and run again; nothing was recorded")


class OutputsChangedError(VerificationError):
    """A run's output changed after it was listed, or a file trajledger hashed is not what it
    hashed (nothing is recorded)."""


def _fields(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _mark(path: Path) -> tuple[int, ...] | None:
    try:
        return _fields(os.lstat(path))
    except OSError:
        return None


class Settled:
    """The outputs of one run as they were listed (see the module doc)."""

    def __init__(self, files: Mapping[str, Path], known: Mapping[str, str] | None = None,
                 directory: Path | None = None) -> None:
        """``files``: manifest name to file; ``known``: manifest name to the ``sha256:``
        digest the file must have; ``directory``: the output directory whose names must stay
        those of ``files`` (its files' names, relative)."""
        self.files = dict(files)
        self.known = dict(known or {})
        self.directory = directory
        self.marks = {name: _mark(path) for name, path in self.files.items()}
        self.listed = self._listing()
        self._names = {str(path): name for name, path in self.files.items()}

    def _listing(self) -> frozenset[str] | None:
        from .workdir import output_files

        return None if self.directory is None else frozenset(output_files(self.directory))

    def _unchanged(self, name: str) -> None:
        if _mark(self.files[name]) != self.marks[name]:
            raise OutputsChangedError(f"{name}: changed while it was recorded; {HINT}")

    def opened(self, name: str, st: os.stat_result) -> None:
        """The file the store opened for ``name`` (its ``fstat``, before it is read): the one
        listed. A path holds its file's ``lstat`` before and after the read while another
        file is read, if a directory on the way is renamed away for the read and back
        (rev33 finding 3): only the file opened tells. A file of a known digest is judged by
        it (`stored`), whichever file was read.

        Raises:
            OutputsChangedError: it is another file, or this one changed.
        """
        if name in self.marks and name not in self.known and _fields(st) != self.marks[name]:
            raise OutputsChangedError(f"{name}: changed while it was recorded; {HINT}")

    def stored(self, d: FileDigest) -> None:
        """One file as the store hashed it: unchanged since listed, and of its known digest.

        Raises:
            OutputsChangedError: it is not.
        """
        name = self._names.get(str(d.path))
        if name is None:
            return
        want = self.known.get(name)
        if want is not None and want != d.digest:
            raise OutputsChangedError(
                f"{name}: stored as {d.digest}, but trajledger hashed {want} (the digest the "
                "record states): the file was replaced after that; nothing was recorded")
        mark = self.marks[name]
        if mark is None or mark[3] != d.size:
            raise OutputsChangedError(f"{name}: changed while it was recorded; {HINT}")
        self._unchanged(name)

    def check(self) -> None:
        """Every file unchanged still, and the output directory holding the names listed.

        Raises:
            OutputsChangedError: a file changed, or one was added or removed.
        """
        for name in self.files:
            self._unchanged(name)
        now = self._listing()
        if now != self.listed and now is not None and self.listed is not None:
            added, gone = sorted(now - self.listed), sorted(self.listed - now)
            what = (f"{added[0]} was added" if added else f"{gone[0]} was removed")
            raise OutputsChangedError(
                f"{self.directory}: {what} while the outputs were recorded; {HINT}")
