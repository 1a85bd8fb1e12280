"""A directory compared with a manifest: which files are missing, extra or changed.

Scope: `tree_files` (the regular files under a directory, never following a link),
`hash_files` (many files hashed on a thread pool, in input order) and `diff_tree` (a directory
against a manifest: sizes first, then SHA-256), with the result a `TreeDiff`; `check_tree`, that
comparison as one check per file of a report's node (``--files``); `manifest_from_statement`, the
manifest inline in an artifact's statement, bound to its identity (what one envelope's files
are compared with: ``verify-files``, a log's checks). Loaded only when
files on disk are checked (``verify BUNDLE --files DIR``, ``trajledger verify-files``, a
training work directory): a verification of evidence never needs it.
Non-scope: the manifest format (``verify.manifest``), hashing one file (``verify.digest``).
Spec: schemas/SPEC.md section "Manifest".
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .digest import FileDigest, hash_file, result_of
from .errors import DigestMismatchError, FormatError
from .manifest import Manifest
from .report import OK, Node

__all__ = ["TreeDiff", "check_tree", "diff_tree", "hash_files", "manifest_from_statement",
           "tree_files"]


def manifest_from_statement(statement: Any, what: str = "statement") -> Manifest:
    """Extract the inline manifest of an artifact statement and bind it to its identity.

    Steps:
        1. The predicate must carry a ``manifest`` object; validate it.
        2. Its canonical bytes must hash to the digest of the statement's first subject (the
           artifact's identity).

    Args:
        statement: a `verify.statement.Statement` (already signature-verified).
        what: names the statement in error messages.

    Raises:
        FormatError: no or invalid manifest.
        DigestMismatchError: the manifest is not what the statement's first subject names.
    """
    # (1)
    raw = statement.predicate.get("manifest")
    if raw is None:
        raise FormatError(f"{what}: predicate has no manifest")
    manifest = Manifest.from_json(raw, f"{what}: manifest")
    # (2)
    digest = manifest.digest
    if statement.subjects[0].digest != digest:
        raise DigestMismatchError(
            f"{what}: manifest hashes to {digest}, but the first subject (the artifact) is "
            f"{statement.subjects[0].digest}",
            subject=what,
            observed=digest,
        )
    return manifest


def hash_files(
    paths: Iterable[str | os.PathLike[str]],
    *,
    workers: int | None = None,
    on_done: Callable[[FileDigest], None] | None = None,
) -> Iterator[FileDigest]:
    """Hash many files on a thread pool, yielding results in input order.

    Interrupting the caller (Ctrl-C) or closing the generator stops the workers within one
    chunk instead of finishing every file.

    Args:
        paths: files to hash.
        workers: threads to use; default one per core (at least 2).
        on_done: called with each result as it is yielded (for progress bars).

    Yields:
        One `FileDigest` per path, in the order given.
    """
    n = workers or max(2, os.cpu_count() or 1)
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=n)
    try:
        futures = [pool.submit(hash_file, p, stop) for p in paths]
        for future in futures:
            result = result_of(future)
            if on_done is not None:
                on_done(result)
            yield result
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)



@dataclass(frozen=True)
class TreeDiff:
    """How a directory differs from a manifest. Empty lists mean it matches."""

    missing: tuple[str, ...]
    extra: tuple[str, ...]
    changed: tuple[tuple[str, str], ...]
    """(path, reason) pairs: size or digest observed vs expected."""

    @property
    def ok(self) -> bool:
        """True when nothing is missing, extra or changed."""
        return not (self.missing or self.extra or self.changed)

    def problems(self) -> list[str]:
        """One readable line per problem."""
        return (
            [f"{p}: missing" for p in self.missing]
            + [f"{p}: extra file, not in the manifest" for p in self.extra]
            + [f"{p}: {why}" for p, why in self.changed]
        )

    def raise_if_failed(self, what: str = "files") -> None:
        """Raise `DigestMismatchError` listing every problem, one per line."""
        if not self.ok:
            lines = self.problems()
            raise DigestMismatchError(
                f"{what}: {len(lines)} problem(s)\n" + "\n".join(lines), subject=what
            )


def diff_tree(
    manifest: Manifest,
    files: Mapping[str, Path],
    *,
    workers: int | None = None,
    on_done: Any = None,
) -> TreeDiff:
    """Compare files on disk with a manifest: sizes first (cheap), then hashes in parallel.

    Args:
        manifest: what the signer listed.
        files: the files present, by manifest-relative path.
        workers: hashing threads.
        on_done: progress callback receiving each `FileDigest`.

    Returns:
        The differences (hashing only files whose size already matches).
    """
    want = manifest.by_path()
    missing = sorted(set(want) - set(files))
    extra = sorted(set(files) - set(want))
    changed: list[tuple[str, str]] = []
    to_hash: list[str] = []
    for path in sorted(set(want) & set(files)):
        try:
            size = os.stat(files[path]).st_size
        except OSError:
            missing.append(path)
            continue
        if size != want[path].size:
            changed.append((path, f"size {size}, want {want[path].size}"))
        else:
            to_hash.append(path)
    results: list[FileDigest] = list(
        hash_files([files[p] for p in to_hash], workers=workers, on_done=on_done)
    )
    for path, got in zip(to_hash, results, strict=True):
        exp = want[path]
        if got.size != exp.size:
            changed.append((path, f"size {got.size}, want {exp.size}"))
        elif got.sha256 != exp.sha256:
            changed.append((path, f"content hashes to sha256:{got.sha256}, want {exp.digest}"))
    changed.sort()
    return TreeDiff(tuple(sorted(missing)), tuple(extra), tuple(changed))


def tree_files(root: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """The regular files under ``root`` by manifest path, never following a symbolic link.

    Returns:
        The regular files, and every other entry (a symbolic link, to a file or a directory,
        inside or outside ``root``; a device, a FIFO...) with what it is: none is read or
        entered, so nothing outside ``root`` is hashed.

    Raises:
        OSError: a directory cannot be listed (its files are not silently left out).
    """
    files: dict[str, Path] = {}
    other: dict[str, str] = {}

    def refuse(e: OSError) -> None:
        raise e

    for dirpath, dirnames, filenames in os.walk(root, onerror=refuse):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            mode = path.lstat().st_mode
            rel = path.relative_to(root).as_posix()
            if stat.S_ISREG(mode):
                files[rel] = path
            elif stat.S_ISLNK(mode):
                other[rel] = f"a symbolic link (to {os.readlink(path)}), not followed"
            elif not stat.S_ISDIR(mode):
                other[rel] = "not a regular file, not read"
    return files, other


def check_tree(node: Node, manifest: Manifest, files: Path) -> None:
    """Check the directory ``files`` against ``node``'s verified ``manifest``, one check per
    file (``verify BUNDLE --files DIR``, `verify.lineage.name_files`).

    Steps:
        1. The directory's regular files by path (`tree_files`: no symbolic link is followed,
           so nothing outside it is read), compared with the manifest (`diff_tree`: sizes,
           then SHA-256).
        2. Each listed file matches, differs or is missing (the last two fail); so does a
           file the manifest does not list, or a link or special file there: a loader may read
           it (``model.safetensors`` beside a listed ``pytorch_model.bin``), so the directory
           is the artifact only when it holds exactly its files.

    Raises:
        OSError: ``files`` is not a directory, or cannot be listed.
    """
    # (1)
    if not files.is_dir():
        raise OSError(f"--files {files}: not a directory")
    found, other = tree_files(files)
    diff = diff_tree(manifest, found)
    why = dict(diff.changed)
    missing = set(diff.missing)
    # (2)
    for f in manifest.files:
        what, want = f"file {f.path}", f"{f.digest}, {f.size} bytes"
        if f.path in why:
            node.fail(what, f"{want}: {files / f.path} differs: {why[f.path]}")
        elif f.path in missing:
            link = next((f"{files / o} is {other[o]}" for o in sorted(other)
                         if f.path == o or f.path.startswith(o + "/")), "no such file")
            node.fail(what, f"{want}: missing from {files} ({link})")
        else:
            node.add(what, OK, f"{want}: matches {files / f.path}")
    for rel in diff.extra:
        node.fail(f"extra file {rel}", f"in {files}, not listed by {node.label}")
    for rel, kind in sorted(other.items()):
        if rel not in manifest.by_path():
            node.fail(f"extra file {rel}", f"in {files}: {kind}")
