"""How the ``trajledger`` command and its worker processes end when they are told to.

Scope: the command's own process turns SIGTERM and SIGHUP into `Terminated`, a
``KeyboardInterrupt``, so that a scheduler's or a closed terminal's stop takes the path Ctrl-C
takes: every ``finally`` runs, worker pools are shut down, temporary files go, and the command
prints one line and exits 128 + the signal's number (143 for SIGTERM, as shells report it).
Before this, SIGTERM ended the process where it stood: its worker processes lived on, holding
the caller's pipes open (``out=$(trajledger record ...)`` waited for ever), and its
temporary files stayed until a later writer found them an hour old.

Worker processes call `exit_with_parent` when they start: they take the default action of
SIGTERM and SIGHUP (a forked worker inherits the command's handler, and must not print an
interruption of its own; one the command was started with ignored stays ignored), and they exit
as soon as their parent is gone, however it went (SIGKILL, the kernel's out-of-memory killer): a
``concurrent.futures`` worker otherwise waits for its next task for ever, because every worker
holds the writing end of the queue it reads.

What the line says: the log writer notes each append of this process before its commit and
after its publication (`appending`, `Append.published`), so that the line answers "was it
recorded?" (`stopped_line`): nothing; entries i..j of a log (published before the stop: readers
see them); or, stopped between the two, which entries the next writer of that log completes
(committed: it publishes them) or drops (not committed).

Non-scope: a library user's process. Only the command's entry point installs the handlers
(`stop_on_termination`); a signal a user's program already ignores (``nohup`` ignores SIGHUP)
stays ignored.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["STOPPING", "Append", "Terminated", "appending", "default_stops", "exit_with_parent",
           "forget_appends", "held", "stop_on_termination", "stopped_line"]

STOPPING = (signal.SIGTERM, signal.SIGHUP)
"""The signals that stop the command as Ctrl-C does."""


class Terminated(KeyboardInterrupt):
    """The command was told to stop by `signum` (SIGTERM or SIGHUP)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        """The signal's name, e.g. ``SIGTERM``."""
        return signal.Signals(self.signum).name

    @property
    def status(self) -> int:
        """The exit status a shell reports for a process this signal ended: 128 + its number."""
        return 128 + self.signum


class Append:
    """One append of this process to a log: entries ``first`` to ``end - 1`` of ``origin``,
    ``done`` once published (`Append.published`)."""

    def __init__(self, origin: str, first: int, end: int) -> None:
        self.origin, self.first, self.end, self.done = origin, first, end, False

    def published(self) -> None:
        """The entries are in the log and readers see them: the checkpoint's rename returned."""
        self.done = True

    def failed(self) -> None:
        """The commit failed before its rename (an I/O error): nothing of it to report."""
        _APPENDS.remove(self)

    def entries(self) -> str:
        """E.g. ``entries 5..7 of log example.org/log``."""
        last = self.end - 1
        span = f"entry {last}" if last == self.first else f"entries {self.first}..{last}"
        return f"{span} of log {self.origin}"


_APPENDS: list[Append] = []
"""This process's appends, in order (a command makes a few: no bound needed)."""


def appending(origin: str, first: int, end: int) -> Append:
    """Note, just before its commit, an append of entries ``first``..``end - 1`` to ``origin``;
    the writer calls `Append.published` when the new checkpoint's rename returned."""
    append = Append(origin, first, end)
    _APPENDS.append(append)
    return append


def forget_appends() -> None:
    """Forget the appends noted so far: a command line starts (many run in one process under
    a test runner), or what they recorded was removed (an unfinished quickstart's demo)."""
    _APPENDS.clear()


def stopped_line(how: str) -> str:
    """The line a command stopped by ``how`` (``interrupted``, ``stopped by SIGTERM``) prints:
    whether it recorded anything (`appending`), and that nothing was half-written (every write
    is a temporary file renamed into place, an append commits all or nothing)."""
    unsure = [a for a in _APPENDS if not a.done]
    if unsure:
        a = unsure[-1]
        return (f"FAIL: {how} while recording {a.entries()}; nothing was half-written: the "
                "next command that writes to that log completes or drops them")
    if _APPENDS:
        done = "; ".join(a.entries() for a in _APPENDS)
        return f"FAIL: {how} after recording {done}; nothing was half-written"
    return f"FAIL: {how}; nothing was recorded or half-written"


def stop_on_termination() -> None:
    """In the command's process: raise `Terminated` where SIGTERM or SIGHUP arrives, unless the
    process was started with that signal ignored."""
    for signum in STOPPING:
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _raise_terminated)


def _raise_terminated(signum: int, _frame: FrameType | None) -> None:
    raise Terminated(signum)


def exit_with_parent() -> None:
    """In a worker process, at its start: `default_stops`, and an end as soon as the parent
    process is gone (a daemon thread waits on the parent's sentinel).

    For a worker made by ``multiprocessing`` (fork or spawn); a worker forked by hand, which
    ends when its request pipe does, only resets the signals (`default_stops`).
    """
    import multiprocessing
    from multiprocessing.connection import wait

    default_stops()
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        wait([sentinel])
        os._exit(1)  # nothing of the parent's to flush or finalize: it is gone

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def default_stops() -> None:
    """In a forked process: the default action again for SIGTERM and SIGHUP where it inherited
    the command's handler (a signal the command was started with ignored stays ignored)."""
    for signum in STOPPING:
        if signal.getsignal(signum) is _raise_terminated:
            signal.signal(signum, signal.SIG_DFL)


@contextlib.contextmanager
def held() -> Iterator[list[int]]:
    """Hold Ctrl-C, SIGTERM and SIGHUP while the block runs (in the main thread; elsewhere a
    no-op): each one that arrives is noted in the list yielded, not raised, and the handlers
    are put back after. For the short repairs a stopping command makes on its way out (a store
    object its command changed through a hard link, put back: out56), which a second Ctrl-C
    would otherwise leave half done. A signal ignored stays ignored."""
    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield arrived
        return
    previous = {s: h for s in (signal.SIGINT, *STOPPING)
                if (h := signal.getsignal(s)) not in (signal.SIG_IGN, None)}
    for signum in previous:
        signal.signal(signum, lambda n, _f: arrived.append(n))
    try:
        yield arrived
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
