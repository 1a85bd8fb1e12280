"""Re-hashing a walk's blobs in forked worker processes, for a command in a process of its own.

Scope: `ForkedHasher`, a `verify.blobs.BlobHasher` whose groups of blobs are hashed by worker
processes (one per core) forked when the first group goes out, each checking its blobs with
the same `BlobHasher.check`: the same digests compared, the same failures filed on the same
nodes, in the same order. Non-scope: which blobs and what they must hash to
(``verify.lineage``); a process with other threads, or a caller's own process: there the
thread pool of `BlobHasher` runs (a fork copies one thread, and a lock another thread held
stays held in the child).

Why processes: a thread of the pool takes the GIL back after every read and every hashlib
call, and the walking thread, which gives the GIL up at each of its system calls (a few every
record) and takes it straight back, wins nearly every hand-over: on an idle core the hashing
waited for the walk to end (docs/PERFORMANCE.md, "`verify` at hashing speed"). A worker
process has a GIL of its own, so the walk and the hashing run side by side.

The protocol, over two pipes a worker: a request is one line of JSON, ``[[digest, size],
...]``, one group; the answer one line, ``[problem or null, ...]`` in the same order, or
``{"errno": n, "strerror": s, "filename": f}`` when a blob could not be read (raised in the
caller as the `OSError` the thread would have raised). At most `IN_FLIGHT` groups wait on a
worker, so neither pipe fills while the other waits. Each worker answers its groups in the
order they were sent, so answers are matched to groups by order, per worker.

A worker that dies (killed, or out of memory) is reaped and the groups it had not answered are
hashed in this process (`ForkedHasher._lost`): the walk decides as if it had lived; once no
worker is left, the thread pool hashes the groups still to come. A fork that fails (no memory,
too many processes) leaves the workers forked before it, or the thread pool. Ctrl-C is held
back while a worker is forked, and each is recorded before the next, so `close` finds and
kills every one.
"""

from __future__ import annotations

import json
import os
import select
import signal
import threading
import traceback
from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from trajledger._signals import default_stops
from trajledger.verify import blobs
from trajledger.verify.blobs import BlobHasher

from .fs import only_thread

if TYPE_CHECKING:
    from trajledger.verify.hash_bar import Progress

__all__ = ["IN_FLIGHT", "ForkedHasher", "can_fork"]

IN_FLIGHT = 8
"""Groups sent to one worker and not yet answered, at most (each line under 4 KiB)."""


def can_fork() -> bool:
    """Whether this process may fork hashing workers: POSIX, and no thread but this one once
    the fsync pool's idle threads are ended (`ledger.fs.only_thread`)."""
    return hasattr(os, "fork") and only_thread()


_Owed = tuple[Future[list[str | None]], list[Any], int]
"""A group sent to a worker and not yet answered: its future, its blobs, their bytes."""


class _Worker:
    """One forked worker: its pid, the two pipe ends this process keeps, the answers owed."""

    def __init__(self, pid: int, requests: int, answers: int) -> None:
        self.pid = pid
        self.requests = requests
        self.answers = answers
        self.buffer = b""
        self.owed: deque[_Owed] = deque()
        self.bytes = 0

    def read(self) -> bool:
        """Take what the worker has written (the pipe is readable) and settle the futures of
        each whole line; False when the pipe has ended (the worker exited: a line it had
        begun is dropped, its group still owed)."""
        data = os.read(self.answers, 1 << 16)
        if not data:
            return False
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if not self.owed:
                raise RuntimeError(f"re-hashing worker {self.pid} answered a group it was "
                                   "not sent")
            future, _group, size = self.owed.popleft()
            self.bytes -= size
            answer = json.loads(line)
            if isinstance(answer, dict):
                future.set_exception(
                    OSError(answer["errno"], answer["strerror"], answer["filename"])
                )
            else:
                future.set_result(answer)
        return True


class ForkedHasher(BlobHasher):
    """A `BlobHasher` whose groups go to forked worker processes (see the module's docstring).

    The workers are forked when the first full group goes out (a lineage of fewer blobs is
    hashed on the thread pool: a fork would cost more than it saves), if the process can fork
    then (`can_fork`); otherwise the thread pool hashes every group.
    """

    def __init__(
        self, evidence: Any, *, progress: Progress | None = None, workers: int | None = None
    ) -> None:
        """Re-hash blobs of ``evidence`` on ``workers`` processes (default: one per core)."""
        super().__init__(evidence, progress=progress)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        self.count = workers or max(2, cores or os.cpu_count() or 1)
        self.workers: list[_Worker] | None = None

    def _submit(self) -> None:
        if self.workers is None:
            full = (len(self.group) >= blobs.GROUP_BLOBS
                    or self.group_bytes >= blobs.GROUP_BYTES)
            self.workers = []
            if full and can_fork():
                self._fork(self.workers)
        worker = self._free() if self.group else None
        if worker is None:  # no worker (none forked, or every one lost), or nothing to send
            super()._submit()
            return
        group, self.group, self.group_bytes = self.group, [], 0
        size = sum(b.size for b in group)
        future: Future[list[str | None]] = Future()
        worker.owed.append((future, group, size))
        worker.bytes += size
        self.pending.append((group, future))
        line = json.dumps([[b.digest, b.size] for b in group]).encode() + b"\n"
        try:
            while line:
                line = line[os.write(worker.requests, line):]
        except BrokenPipeError:  # the worker has exited: this group is hashed here
            self._lost(worker)
        if self.bar is not None:
            self.bar.queued(self.queued, sent=True)

    def _free(self) -> _Worker | None:
        """The worker with room for a group that owes the fewest bytes (waiting for answers
        while every one is full); None when no worker is left."""
        while self.workers:
            free = [w for w in self.workers if len(w.owed) < IN_FLIGHT]
            if free:
                return min(free, key=lambda w: w.bytes)
            self._read(block=True)
        return None

    def _read(self, *, block: bool) -> None:
        """Settle the answers the workers have written (with ``block``, wait for one)."""
        busy = {w.answers: w for w in self.workers or () if w.owed}
        if not busy:
            return
        # poll, not select: a descriptor numbered 1024 or more (a process holding many open
        # files, a long test session) is refused by select ("filedescriptor out of range")
        poller = select.poll()
        for fd in busy:
            poller.register(fd, select.POLLIN)
        for fd, _event in poller.poll(None if block else 0):  # (an exited worker: POLLHUP)
            if not busy[fd].read():
                self._lost(busy[fd])

    def _lost(self, worker: _Worker) -> None:
        """A worker that exited before answering every group (killed, out of memory): reaped,
        and the groups it owed hashed in this process, in order, as it would have hashed them
        (an unreadable blob raises its `OSError` where the worker's answer would have)."""
        if self.workers is not None:
            self.workers.remove(worker)
        os.close(worker.requests)
        os.close(worker.answers)
        os.kill(worker.pid, signal.SIGKILL)  # (if it only closed its pipe)
        os.waitpid(worker.pid, 0)
        for future, group, _size in worker.owed:
            try:
                future.set_result([self.check(b.digest, b.size, self.stop) for b in group])
            except OSError as e:
                future.set_exception(e)
        worker.owed.clear()

    def _collect(self, *, wait: bool) -> None:
        if self.workers:
            self._read(block=False)
            while wait and any(w.owed for w in self.workers):
                self._read(block=True)
        super()._collect(wait=wait)

    def close(self) -> None:
        """Stop the workers (killed: a walk that raised drops what they were hashing) and
        reap them, then `BlobHasher.close`."""
        workers, self.workers = self.workers or [], None
        for w in workers:  # killed first: none is left to write into a closed pipe
            os.kill(w.pid, signal.SIGKILL)
        for w in workers:
            os.close(w.requests)
            os.close(w.answers)
            os.waitpid(w.pid, 0)
        super().close()

    def _fork(self, workers: list[_Worker]) -> None:
        """Fork the workers into ``workers``, each added as soon as it runs (interrupted
        between two forks, `close` still finds every one), with SIGINT held back around each
        fork: a Ctrl-C reaches the parent only, after the child has set it aside. A fork that
        fails ends the forking: the workers so far hash (none: the thread pool)."""
        for _ in range(self.count):
            requests_r, requests_w = os.pipe()
            answers_r, answers_w = os.pipe()
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                try:
                    pid = os.fork()
                except OSError:
                    for fd in (requests_r, requests_w, answers_r, answers_w):
                        os.close(fd)
                    return
                if pid == 0:  # the worker: never returns
                    inherited = [fd for w in workers for fd in (w.requests, w.answers)]
                    self._serve(requests_r, answers_w, [requests_w, answers_r, *inherited], mask)
                os.close(requests_r)
                os.close(answers_w)
                workers.append(_Worker(pid, requests_w, answers_r))
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def _serve(self, requests: int, answers: int, others: list[int], mask: set[Any]) -> None:
        """A worker's life: answer each group in turn until the requests end; exit without
        running anything of the parent's (no atexit, no flush of its buffers)."""
        status = 1
        try:
            # Ctrl-C is the parent's to handle (it kills the workers): ignored before the
            # signal mask the parent held it back with is restored.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            default_stops()  # (SIGTERM and SIGHUP: the command's handler is not the worker's)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            for fd in others:
                os.close(fd)
            stop = threading.Event()
            with open(requests, "rb") as lines:
                for line in lines:
                    try:
                        answer: Any = [self.check(d, s, stop) for d, s in json.loads(line)]
                    except OSError as e:
                        answer = {"errno": e.errno, "strerror": e.strerror,
                                  "filename": e.filename}
                    out = json.dumps(answer).encode() + b"\n"
                    while out:  # a write to a pipe may be cut short (by a signal)
                        out = out[os.write(answers, out):]
            status = 0
        except BrokenPipeError:  # the parent has closed the answers: it needs none now
            status = 0
        except BaseException:
            # Said on the inherited stderr, unbuffered (the parent's buffers stay unwritten);
            # the parent then finds the answers cut short.
            os.write(2, traceback.format_exc().encode())
            raise
        finally:
            os._exit(status)
