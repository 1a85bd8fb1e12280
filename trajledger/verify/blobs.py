"""Re-hashing data blobs on a thread pool while a lineage walk checks signatures.

Scope: `BlobHasher`, the blob checker the lineage walker (``verify.lineage``) is given: it
re-hashes blobs from an evidence source's files in groups on worker threads, files each
failure on the node that asked, and stops promptly (and fails what it dropped) when the walk is
interrupted; with a bar factory, a bar over the bytes (``verify.hash_bar``, loaded only then).
`DataMode` says how data blobs are checked at all.
Non-scope: which blobs to check and what their digests must be (``verify.lineage``, from the
verified manifests).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from .digest import hash_file, result_of
from .report import Node
from .report import short as _short

if TYPE_CHECKING:
    from .hash_bar import HashBar, Progress

__all__ = ["BlobHasher", "DataMode", "size_problem"]


class DataMode(StrEnum):
    """How a walk checks data blobs: ``hash`` re-hashes each; ``size`` compares sizes with the
    manifest only (and every report line says so)."""

    HASH = "hash"
    SIZE = "size"


GROUP_BLOBS = 32
GROUP_BYTES = 16 << 20
"""A re-hashing task's size: at most this many blobs, or about this many bytes."""


class _Paths(Protocol):
    def blob_path(self, digest: str) -> Path | None: ...


class _Blob(NamedTuple):
    """A data blob queued for re-hashing, and the report line its result goes to."""

    node: Node
    path: str
    digest: str
    size: int


class BlobHasher:
    """Re-hashes blobs of an evidence source on a thread pool (one thread per core, at least 2).

    Blobs go to the workers in groups (up to `GROUP_BLOBS` blobs or `GROUP_BYTES` bytes): a
    worker switching between the walker's Python code and hashlib's released GIL pays for each
    switch, and one task per small blob was measured to cost about 10% more CPU
    (bench/verify_bench.py, docs/PERFORMANCE.md). The first group goes out as soon as it is
    full, so hashing overlaps the walk from its first records.

    With a progress factory, a bar over the bytes (`verify.hash_bar.HashBar`) is drawn when
    the walk finds the first blob, grows as groups go out and advances as they are hashed.
    """

    def __init__(self, evidence: _Paths, *, progress: Progress | None = None) -> None:
        """Re-hash blobs of ``evidence``; ``progress`` draws a bar over their bytes."""
        self.evidence = evidence
        self.queued = 0
        self.group: list[_Blob] = []
        self.group_bytes = 0
        self.pending: list[tuple[list[_Blob], Future[list[str | None]]]] = []
        self.pool: ThreadPoolExecutor | None = None
        self.stop = threading.Event()
        self.bar: HashBar | None = None
        if progress is not None:
            from .hash_bar import HashBar  # loaded only to draw a bar (trajledger's command)

            self.bar = HashBar(progress)

    def check(self, digest: str, size: int, stop: threading.Event) -> str | None:
        """Why the blob ``digest`` is not ``size`` bytes hashing to it; None when it is."""
        path = self.evidence.blob_path(digest)
        if path is None:
            return f"blob {_short(digest)} is missing"
        got = hash_file(path, stop)
        if got.size != size:
            return size_problem(digest, got.size, size)
        if got.digest != digest:
            return f"tampered: content hashes to sha256:{got.sha256[:12]}…, want {_short(digest)}"
        return None

    def later(self, node: Node, path: str, digest: str, size: int) -> None:
        """Queue a blob; a failure goes to ``node`` as a check named ``path`` (`finish`)."""
        self.group.append(_Blob(node, path, digest, size))
        self.group_bytes += size
        self.queued += size
        if self.bar is not None:
            self.bar.queued(self.queued)
        if len(self.group) >= GROUP_BLOBS or self.group_bytes >= GROUP_BYTES:
            self._submit()
            self._collect(wait=False)

    def _submit(self) -> None:
        group, self.group, self.group_bytes = self.group, [], 0
        if not group:
            return
        if self.pool is None:
            self.stop = threading.Event()
            self.pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1))
        stop = self.stop
        future = self.pool.submit(lambda: [self.check(b.digest, b.size, stop) for b in group])
        self.pending.append((group, future))
        if self.bar is not None:
            self.bar.queued(self.queued, sent=True)

    def _collect(self, *, wait: bool) -> None:
        """File the results of the groups hashed so far, oldest first, and advance the bar;
        with ``wait``, of every group (waiting for each)."""
        while self.pending and (wait or self.pending[0][1].done()):
            group, future = self.pending[0]
            problems: list[str | None] = result_of(future)
            self.pending.pop(0)
            for blob, problem in zip(group, problems, strict=True):
                if problem:
                    blob.node.fail(blob.path, problem)
            if self.bar is not None:
                self.bar.advance(sum(b.size for b in group))

    def finish(self) -> None:
        """Wait for the blobs being re-hashed and file their failures on their nodes.

        Interrupted (Ctrl-C), the workers stop within one chunk instead of hashing on."""
        try:
            self._submit()
            self._collect(wait=True)
        finally:
            self.close()

    def close(self) -> None:
        """Stop any re-hashing still under way (a walk that raised): the workers stop within
        one chunk and queued blobs are dropped, each failing its node (never left looking
        verified). The bar, if drawn, is closed."""
        pool, self.pool = self.pool, None
        dropped = [b for group, _ in self.pending for b in group] + self.group
        self.pending, self.group, self.group_bytes = [], [], 0
        for blob in dropped:
            blob.node.fail(blob.path, "not re-hashed: the verification was interrupted")
        if pool is not None:
            self.stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
        if self.bar is not None:
            self.bar.close()


def size_problem(digest: str, got: int, want: int) -> str:
    """The failure of blob ``digest`` stored with ``got`` bytes where its manifest says
    ``want`` (re-hashed, or with ``data="size"`` compared by size only)."""
    return f"tampered: {got} bytes, want {want} (blob {_short(digest)})"
