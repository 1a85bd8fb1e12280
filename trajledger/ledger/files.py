"""Turn paths on disk into manifest entries.

Scope: expand the PATH arguments of ``sign``, ``verify`` and ``attest`` into a map of
manifest-relative POSIX names to files: a file argument contributes its base name, a directory
contributes everything below it, relative to itself (so ``sign model/`` and
``verify model-copy/`` agree). Symbolic links and special files are refused, never followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from trajledger.verify.digest import FileDigest
from trajledger.verify.errors import FormatError
from trajledger.verify.manifest import FileEntry, Manifest, check_path

from .errors import LedgerError

__all__ = ["collect_files", "manifest_for", "media_type_for", "same_as_listed"]

_MEDIA_TYPES = {
    ".parquet": "application/vnd.apache.parquet",
    ".arrow": "application/vnd.apache.arrow.file",
    ".json": "application/json",
    ".jsonl": "application/jsonl",
    ".toml": "application/toml",
    ".txt": "text/plain",
    ".md": "text/markdown",
    ".py": "text/x-python",
    ".npz": "application/x-npz",
    ".safetensors": "application/vnd.safetensors",
}


def media_type_for(name: str) -> str:
    """A media type from the file extension; ``application/octet-stream`` otherwise."""
    return _MEDIA_TYPES.get(os.path.splitext(name)[1].lower(), "application/octet-stream")


def collect_files(
    paths: Sequence[str | os.PathLike[str]], listed: dict[str, os.stat_result] | None = None
) -> dict[str, Path]:
    """Map manifest names to files for the given arguments.

    Args:
        paths: files and directories.
        listed: when given, gets each name's ``lstat`` as listed: a reader that opens the file
            later checks it opened that file (`same_as_listed`), not a link or another file
            put at its path, or at a directory's above it, meanwhile.

    Raises:
        LedgerError: a path is missing, a link, a special file, or two arguments give the same
            name.
    """
    out: dict[str, Path] = {}

    def add(name: str, path: Path, st: os.stat_result) -> None:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:  # os.walk's undecodable bytes (surrogateescape)
            shown = os.fsencode(path).decode("utf-8", "backslashreplace")
            raise LedgerError(f"{shown}: its name is not UTF-8, which a manifest's names are: "
                              "rename it; nothing was signed") from None
        try:
            check_path(name, f"file name {name!r}")
        except FormatError as e:
            raise LedgerError(str(e)) from e
        if name in out:
            raise LedgerError(
                f"{path}: name {name!r} is also given by {out[name]}; sign them separately"
            )
        out[name] = path
        if listed is not None:
            listed[name] = st

    for arg in paths:
        p = Path(arg)
        try:
            st = p.lstat()
        except FileNotFoundError as e:
            raise LedgerError(f"{p}: no such file or directory") from e
        if stat.S_ISLNK(st.st_mode):
            raise LedgerError(f"{p}: is a symbolic link; give its target instead")
        if stat.S_ISREG(st.st_mode):
            add(p.name, p, st)
        elif stat.S_ISDIR(st.st_mode):
            for fp, rel, fst in _walk(p, st):
                add(rel, fp, fst)
        else:
            raise LedgerError(f"{p}: is not a regular file or directory")
    if not out:
        raise LedgerError("no files to sign: the paths given hold no regular files")
    return out


def _walk(top: Path, listed: os.stat_result) -> Iterator[tuple[Path, str, os.stat_result]]:
    """Each regular file below the directory ``top`` (``lstat`` ``listed``): its path, its name
    relative to ``top`` and its ``lstat``, directories in name order, a directory's files
    before its subdirectories'. Each directory is opened relative to its parent's descriptor
    without following a link (``O_NOFOLLOW``) and must be the one its parent listed (rev38:
    ``os.walk`` lists a directory by path, so one swapped for a link after its parent was
    listed was listed through it, its target's files with their own ``lstat``). A stack of its
    own, not a generator a level (rev39: a tree some 1,000 deep was a ``RecursionError``); a
    descriptor a level, open while the walk is below it.

    Raises:
        LedgerError: a link or a special file, a directory that cannot be listed (its files
            would go unsigned) or is not the one listed, a tree deeper than the descriptors
            this process may open.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fds: list[int] = []  # (the open directories, top first)

    def opened(name: str | Path, where: Path, st: os.stat_result) -> None:
        parent = fds[-1] if fds else None
        try:
            fd = os.open(name, flags, dir_fd=parent)
        except OSError as e:
            if e.errno == errno.EMFILE:
                raise LedgerError(f"{where}: cannot list: too many files open: a tree {len(fds)} "
                                  "directories deep or more, past this process's limit (raise "
                                  "it: ulimit -n); nothing was signed") from e
            if e.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):  # (ENOENT: moved)
                raise LedgerError(f"{where}: cannot list: {e.strerror}") from e
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                    raise LedgerError(f"{where}: is a symbolic link; links are not signed") from e
            fd = -1
        now = os.fstat(fd) if fd >= 0 else None
        if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            if fd >= 0:
                os.close(fd)
            raise LedgerError(f"{where}: not the directory listed a moment before (replaced, "
                              "moved or removed while it was being listed); nothing was signed")
        fds.append(fd)

    def entries(where: Path, rel: str) -> tuple[list[tuple[Path, str, os.stat_result]],
                                                 Iterator[tuple[str, os.stat_result]]]:
        """The files of the directory last opened, and its subdirectories."""
        fd = fds[-1]
        try:
            with os.scandir(fd) as it:
                names = sorted(e.name for e in it)
        except OSError as e:
            raise LedgerError(f"{where}: cannot list: {e.strerror}") from e
        files, dirs = [], []
        for name in names:
            try:
                fst = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # (removed meanwhile)
            path = where / name
            if stat.S_ISDIR(fst.st_mode):
                dirs.append((name, fst))
            elif stat.S_ISREG(fst.st_mode):
                files.append((path, f"{rel}{name}", fst))
            elif stat.S_ISLNK(fst.st_mode) and path.is_dir():
                raise LedgerError(f"{path}: is a symbolic link; links are not signed")
            else:
                kind = "a symbolic link" if stat.S_ISLNK(fst.st_mode) else "not a regular file"
                raise LedgerError(f"{path}: is {kind}; only regular files are signed")
        return files, iter(dirs)

    try:
        opened(top, top, listed)
        files, dirs = entries(top, "")
        yield from files
        stack = [(top, "", dirs)]
        while stack:
            where, rel, todo = stack[-1]
            child = next(todo, None)
            if child is None:
                stack.pop()
                os.close(fds.pop())
                continue
            name, dst = child
            opened(name, where / name, dst)
            files, dirs = entries(where / name, f"{rel}{name}/")
            yield from files
            stack.append((where / name, f"{rel}{name}/", dirs))
    finally:
        for fd in fds:
            os.close(fd)


def manifest_for(
    files: dict[str, Path], *, on_done: Callable[[FileDigest], None] | None = None
) -> Manifest:
    """Hash the files in parallel (streaming) and build their manifest."""
    from trajledger.verify.tree import hash_files  # (not loaded by `attest`: it copies)

    names = sorted(files)
    try:
        digests = list(hash_files([files[n] for n in names], on_done=on_done))
    except OSError as e:
        raise LedgerError(f"{e.filename}: cannot read: {e.strerror}") from e
    return Manifest.from_files(
        [
            FileEntry(n, d.size, d.sha256, media_type_for(n))
            for n, d in zip(names, digests, strict=True)
        ]
    )


def same_as_listed(path: str | os.PathLike[str], listed: os.stat_result,
                   opened: os.stat_result) -> None:
    """Check that the file opened (its ``fstat``) is the one `collect_files` listed at ``path``
    (the same device and inode): a link put at its path, or at a directory's above it, after
    the listing is followed by ``open``, and would have another file's bytes signed under the
    listed name.

    Raises:
        LedgerError: another file is there now.
    """
    if (opened.st_dev, opened.st_ino) != (listed.st_dev, listed.st_ino):
        raise LedgerError(
            f"{path}: not the file listed a moment before (replaced, or a link put in its place "
            "or in a directory's above it, while it was being read); nothing was recorded: "
            "record it again once nothing changes the directory"
        )
