"""Run a user's command in its own process group, its output shown, hashed and optionally kept.

Scope: `run_command` starts COMMAND (an argument vector, no shell) as the leader of a new process
group, with standard input from ``/dev/null``, and copies its standard output and standard error
to this process's standard error as they come (standard output stays free for the command line's
result), hashing each stream and, when asked, writing it to a file. It returns the exit code and
both digests.

Signals: while COMMAND runs, SIGINT (Ctrl-C: the terminal sends it to this process's group, not
COMMAND's), SIGTERM and SIGHUP are forwarded to COMMAND's whole process group, so a launcher
(``torchrun``, ``accelerate launch``) and its workers all get them; a second one, or a group
still alive 10 s after the first, gets SIGKILL. `CommandInterrupted` (a ``KeyboardInterrupt``:
exit 128 + the first signal's number, 130 for Ctrl-C) is raised once COMMAND has stopped.
Signal handlers can be installed only in the main thread; elsewhere the caller's own handling
applies.

If this process dies without a chance to pass anything on (SIGKILL, the out-of-memory killer),
COMMAND's leader gets SIGTERM from the kernel on Linux (``PR_SET_PDEATHSIG``, set in the child
before it runs COMMAND, `_dies_with_us`), and a watcher started beside it (`_watch`, a small
process of its own session) stops COMMAND's whole group: SIGTERM, then SIGKILL after 5 s (rev37;
before, what the leader started ran on unless the leader stopped it), so nothing goes on
writing to an output directory no one will read, or the next run makes again.

When COMMAND's leader exits, whatever it left running in its process group is stopped (SIGTERM,
then SIGKILL after 5 s), so nothing changes its outputs while they are hashed: on Linux waited
for even when it holds no output pipe (``/proc``, rev37); elsewhere only while it holds one.
The leader is waited for without being reaped (``waitid(WNOWAIT)``) until then, so its process
group id cannot be reused by another process meanwhile. On Linux this process is a child
subreaper (``PR_SET_CHILD_SUBREAPER``) while COMMAND runs, so a process COMMAND started that
left its group (``setsid``, a daemon's double fork) becomes this process's child once its
parents have exited, and is stopped in the same way, with a `LeftRunningWarning` (rev39; before,
it ran on, free to change the outputs being hashed); one still running after SIGKILL refuses
the run. Such a process is told to be COMMAND's by the `MARK` in its environment (rev40: not
another call's, and one in this process's own group too). Elsewhere, a process that left the
group and keeps the output pipes open is an error (the digests could not cover its output);
one that closed them runs on.

Non-scope: what COMMAND is given (``runner.workdir``) and what is recorded (``runner.train``).
COMMAND runs with the user's rights, unsandboxed (docs/SECURITY.md). POSIX only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, ClassVar, Final

from trajledger.ledger.errors import LedgerError

__all__ = [
    "CommandInterrupted",
    "CommandResult",
    "LeftRunningWarning",
    "StreamDigest",
    "run_command",
]

FORWARDED: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals passed on to COMMAND's process group."""

KILL_AFTER: Final = 10.0
"""Seconds an interrupted group has to stop before SIGKILL."""

STRAGGLER_GRACE: Final = 5.0
"""Seconds the processes COMMAND's leader left behind get between SIGTERM and SIGKILL."""

_POLL: Final = 0.05

_PR_SET_PDEATHSIG: Final = 1
"""``prctl`` option (linux/prctl.h): the signal the calling process gets when its parent dies."""

_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37
"""``prctl`` options (linux/prctl.h): orphaned descendants become the caller's children."""


class LeftRunningWarning(UserWarning):
    """Processes COMMAND started outside its process group, left running, were stopped."""


def _prctl() -> Callable[..., int] | None:
    """Linux's ``prctl``, or None (another system, or it cannot be found)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


class _Subreaping:
    """Whether this process is a child subreaper for `run_command` calls (threads may run
    several), and whether it was made one here (a process that was one already stays one);
    ``started``: the COMMANDs and watchers of the calls running, none of which another call
    takes for a process that left its group (each started and registered, or scanned for, under
    ``lock``: a concurrent call's scan sees it registered or not yet started)."""

    lock = threading.Lock()
    holders = 0
    made_here = False
    started: ClassVar[set[int]] = set()
    marks: ClassVar[dict[int, bytes]] = {}
    """Each running call's `MARK` value, by its COMMAND's pid."""


MARK: Final = "TRAJLEDGER_RUN"
"""An environment variable COMMAND is given: the marks of the `run_command` calls it runs under
(a random one a call, after those of the calls above it: ``A:B``). A process that came here
during the run (orphaned) is the call's when its environment carries the call's mark; another
call's when it carries only others' (rev40 finding 7: the first call to end took and killed
the second's daemon); without one (an environment cleared, or unreadable), it is taken when it
is in a process group other than this process's own (rev39) and left alone in this process's
own, where a library's other threads' children are (one with the mark there: finding 6)."""


@contextlib.contextmanager
def _subreaper() -> Iterator[frozenset[int] | None]:
    """While COMMAND runs, on Linux, make this process a child subreaper: a process COMMAND
    started whose parents have exited (``setsid``, a daemon's double fork: it left COMMAND's
    group) becomes its child, not init's, to be found and stopped (rev39). Yields this
    process's children at the start (not COMMAND's: `_running`), or None when this process
    cannot be one (another system: such a process is not looked for, as before). Put back
    once the last concurrent call ends."""
    import ctypes

    prctl, held = _prctl(), False
    with _Subreaping.lock:
        if prctl is not None and not _Subreaping.holders:
            was = ctypes.c_int()
            if not prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0):
                held = bool(was.value) or not prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
                _Subreaping.made_here = held and not was.value
        held = held or (prctl is not None and _Subreaping.holders > 0)
        _Subreaping.holders += held
    if not held:
        yield None
        return
    try:
        yield frozenset(p for p, (_s, ppid, _g) in _table().items() if ppid == os.getpid())
    finally:
        with _Subreaping.lock:
            _Subreaping.holders -= 1
            if not _Subreaping.holders and _Subreaping.made_here and prctl is not None:
                prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _dies_with_us() -> Callable[[], None] | None:
    """On Linux, what the child runs before COMMAND (``preexec_fn``): ``PR_SET_PDEATHSIG``
    SIGTERM, so that the kernel stops COMMAND when this process dies, SIGKILL included; then,
    should this process have died already (before the call), SIGTERM to itself. None elsewhere,
    or when ``prctl`` cannot be found: COMMAND then outlives a SIGKILL, as before.

    The setting belongs to the thread that starts COMMAND: `run_command` waits for COMMAND in
    that thread, so it cannot end first.
    """
    prctl = _prctl()
    if prctl is None:
        return None
    parent, sigterm = os.getpid(), int(signal.SIGTERM)

    def in_child() -> None:  # after fork, before exec: nothing but two system calls
        prctl(_PR_SET_PDEATHSIG, sigterm, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sigterm)

    return in_child


_WATCHER: Final = """
import os, signal, sys, time
group, mark = int(sys.argv[1]), sys.argv[3].encode()
def send(signum):  # to COMMAND's group and each process with the run's mark: was one there?
    global group
    there = False
    try:
        if group:
            os.killpg(group, signum)
            there = True
    except OSError:
        group = 0  # ended: its id may be another group's by the next signal (rev41)
    for name in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else ()):
        try:
            env = open("/proc/" + name + "/environ", "rb").read().split(b"\\0")
        except OSError:
            continue
        if any(v.startswith(b"TRAJLEDGER_RUN=") and mark in v[15:].split(b":") for v in env):
            try:
                os.kill(int(name), signum)
                there = True
            except OSError:
                pass
    return there
if not sys.stdin.buffer.read(1):  # end of file: trajledger ended, none of its code ran
    for signum in (signal.SIGTERM, signal.SIGKILL):
        if not send(signum):
            break
        for _ in range(int(float(sys.argv[2]) * 10)):
            time.sleep(0.1)
            if not send(0):
                break
"""
"""What `_watch` runs: it waits for one byte from trajledger; on end of file instead (trajledger
killed: SIGKILL, the out-of-memory killer) it stops COMMAND's whole group and every process
carrying the run's `MARK` (one that left the group: init's now, rev39's Left), SIGTERM, then
SIGKILL after the grace; the group's id no more once the group has ended (a marked process may
keep it waiting the whole grace, and a group made meanwhile may hold that id: rev41)."""


def _watch(pgid: int, mark: str) -> tuple[Callable[[], None], int]:
    """Start a watcher of COMMAND's process group ``pgid`` that outlives this process (its own
    session: a terminal's Ctrl-C or hang-up does not reach it), and return what tells it that
    the group was seen to (rev37: ``PR_SET_PDEATHSIG`` reaches the leader only, and a shell or
    a launcher that does not pass SIGTERM on left its workers running, writing to an output
    directory the next run makes again), and its pid. No watcher when none can be started (as
    before). One that does not end within the grace once told (COMMAND stopped it: SIGSTOP) is
    killed: it held trajledger for ever (rev38's Left)."""
    try:
        watcher = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCHER, str(pgid), str(STRAGGLER_GRACE), mark],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True,
        )
    except OSError:
        return lambda: None, -1

    def dismiss() -> None:
        assert watcher.stdin is not None
        with contextlib.suppress(OSError):
            watcher.stdin.write(b"x")
            watcher.stdin.close()
        try:
            watcher.wait(STRAGGLER_GRACE)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()

    return dismiss, watcher.pid


_CHUNK: Final = 1 << 16


class CommandInterrupted(KeyboardInterrupt):
    """COMMAND was stopped by a forwarded signal (Ctrl-C, SIGTERM, SIGHUP); nothing recorded.

    Attributes:
        signum: the first signal received.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


@dataclass(frozen=True)
class StreamDigest:
    """What one output stream carried: ``sha256:<hex>``, its size, and where it was kept."""

    digest: str
    size: int
    kept: Path | None = None


@dataclass(frozen=True)
class CommandResult:
    """How COMMAND ended.

    Attributes:
        argv: the command line as run.
        returncode: its exit status (negative: killed by that signal).
        stdout: digest of its standard output.
        stderr: digest of its standard error.
        started: when it started (seconds since the epoch).
        finished: when it ended.
    """

    argv: tuple[str, ...]
    returncode: int
    stdout: StreamDigest
    stderr: StreamDigest
    started: float
    finished: float


class _Stream:
    """One of COMMAND's output pipes: read, hashed, echoed and optionally kept."""

    def __init__(self, pipe: IO[bytes], echo: Callable[[bytes], None],
                 kept: tuple[Path, IO[bytes]] | None) -> None:
        self.fd = pipe.fileno()
        self.pipe = pipe
        self.echo = echo
        self.keep: Path | None = kept[0] if kept is not None else None
        self.file: IO[bytes] | None = kept[1] if kept is not None else None
        self.hash = hashlib.sha256()
        self.size = 0

    def pump(self) -> bool:
        """Copy what is available; False at end of stream."""
        chunk = os.read(self.fd, _CHUNK)
        if not chunk:
            return False
        self.hash.update(chunk)
        self.size += len(chunk)
        if self.file is not None:
            self.file.write(chunk)
        self.echo(chunk)
        return True

    def close(self) -> StreamDigest:
        self.pipe.close()
        if self.file is not None:
            self.file.close()
        return StreamDigest("sha256:" + self.hash.hexdigest(), self.size, self.keep)


def _stderr_echo() -> Callable[[bytes], None]:
    """Write bytes to this process's standard error as they come."""
    err = sys.stderr
    buffer = getattr(err, "buffer", None)
    if buffer is not None:

        def write_bytes(data: bytes) -> None:
            err.flush()
            buffer.write(data)
            buffer.flush()

        return write_bytes

    def write_text(data: bytes) -> None:
        err.write(data.decode("utf-8", "replace"))
        err.flush()

    return write_text


def _exited(pid: int) -> bool:
    """Whether the leader exited, leaving it unreaped (its pid and group id stay taken)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _table() -> dict[int, tuple[bytes, int, int]]:
    """Each process in ``/proc`` (Linux): its state, parent and process group; empty elsewhere.
    The state is parsed after the last ``)``, which a renamed command cannot move."""
    table: dict[int, tuple[bytes, int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue  # (ended meanwhile)
            state, ppid, group = stat[stat.rfind(b")") + 2:].split()[:3]
            table[int(name)] = (state, int(ppid), int(group))
    return table


def _running(pgid: int, leader: int, known: frozenset[int] | None, ours: set[int]
             ) -> dict[int, str]:
    """The live processes COMMAND left, each ``group``, ``left`` or ``below``: those of group
    ``pgid`` but ``leader`` (exited, not reaped); with a subreaper (``known``: this process's
    children before COMMAND and those it started), its children that are none of those (or carry
    the call's mark: a pid given again, rev41) and are COMMAND's by `MARK` (``left``: processes
    of COMMAND's that left its group, orphaned here), and their descendants (``below``). A
    zombie counts as live while one of its threads runs (`_threads_live`); one that is this
    process's child is reaped when it is in COMMAND's group or was seen carrying the call's
    mark (``ours``: it came here as an orphan; another's child, unmarked, is its parent's to
    reap: rev40 finding 8). Linux (``/proc``); elsewhere nothing (what holds no pipe is not
    waited for)."""
    with _Subreaping.lock:  # (another call's COMMAND registered, or not yet started)
        table, others = _table(), frozenset(_Subreaping.started)
    me, own = os.getpid(), os.getpgrp()
    found = {p: "group" for p, (_s, _pp, g) in table.items() if g == pgid and p != leader}
    if known is not None:
        children: dict[int, list[int]] = {}
        for p, (_s, pp, _g) in table.items():
            children.setdefault(pp, []).append(p)
        stack = []
        for p in children.get(me, ()):
            if p in others:
                continue
            mine = _marked(p, _Subreaping.marks.get(leader))
            if p in known and not mine:  # (the call's mark: its own, under a reused pid too)
                continue
            ours.update([p] if mine else [])
            if mine or p in ours or (mine is None and table[p][2] != own):
                stack.append(p)
        while stack:
            p = stack.pop()
            if p not in found:
                found[p] = "left" if table[p][1] == me else "below"
                stack.extend(children.get(p, ()))
    live = {}
    for p, where in found.items():
        state = table[p][0]
        if state not in (b"Z", b"X") or _threads_live(str(p)):
            live[p] = where
        elif p in ours or (where == "group" and table[p][1] == me):  # (an orphan of COMMAND's)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(p, os.WNOHANG)
            ours.discard(p)  # (its pid may be another's next: rev41)
    return live


def _marked(pid: int, mark: bytes | None) -> bool | None:
    """Whether ``pid``'s environment (at its start) carries ``mark`` among its `MARK` values:
    True; False when it carries another running call's; None when it carries neither (no `MARK`,
    one no call here made, or an environment that cannot be read: a zombie's is empty)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return None
    found = [v for v in env.split(b"\0") if v.startswith(MARK.encode() + b"=")]
    marks = set(found[0].split(b"=", 1)[1].split(b":")) if found else set()
    if mark is not None and mark in marks:
        return True
    with _Subreaping.lock:  # (a mark no call running here made: none; the lead, rev40 merge)
        return False if marks & set(_Subreaping.marks.values()) else None


def _threads_live(pid: str) -> bool:
    """Whether a thread of process ``pid`` (whose first thread is a zombie) runs: its main
    thread may have exited (``pthread_exit``) while others run on (rev38)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2:].split()[0] not in (b"Z", b"X"):
            return True
    return False


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def run_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    keep_logs: Path | None = None,
    echo: Callable[[bytes], None] | None = None,
) -> CommandResult:
    """Run COMMAND to its end (see the module doc).

    Steps:
        1. Start it as a process-group leader, stdin from /dev/null, stdout and stderr piped.
        2. Until both pipes close: copy, hash (and keep) what comes; forward signals; once the
           leader has exited, stop what it left in its group.
        3. Reap the leader; raise `CommandInterrupted` if a signal was forwarded.

    Args:
        argv: the program and its arguments (looked up on ``PATH`` of ``env``).
        env: COMMAND's whole environment.
        cwd: its working directory (default: this process's).
        keep_logs: a directory to write ``stdout.log`` and ``stderr.log`` into.
        echo: where output goes (default: this process's standard error).

    Returns:
        The exit code and the streams' digests; a non-zero exit is the caller's to judge.

    Raises:
        LedgerError: COMMAND cannot be started (not found, not executable), or a process it
            started outside its group held its output open after it exited.
        CommandInterrupted: Ctrl-C, SIGTERM or SIGHUP arrived; COMMAND was stopped.
    """
    if not argv:
        raise LedgerError("no command given: put it after '--' (trajledger train ... -- COMMAND)")
    out = echo or _stderr_echo()
    mine: list[int] = []
    with _subreaper() as known:
        try:
            return _run(argv, env, cwd, keep_logs, out, known, mine)
        finally:
            with _Subreaping.lock:
                _Subreaping.started.difference_update(mine)
                for pid in mine:
                    _Subreaping.marks.pop(pid, None)


def _run(argv: Sequence[str], env: Mapping[str, str], cwd: Path | None, keep_logs: Path | None,
         out: Callable[[bytes], None], known: frozenset[int] | None, mine: list[int]
         ) -> CommandResult:
    """`run_command`'s steps, this process a subreaper when ``known`` (its children before);
    COMMAND's and its watcher's pids are put in ``mine`` and `_Subreaping.started`."""
    # (1)
    started = time.time()
    mark = os.urandom(8).hex()
    env = {**env, MARK: f"{env[MARK]}:{mark}" if env.get(MARK) else mark}
    kept = _open_logs(keep_logs)
    try:
        with _Subreaping.lock:
            proc = _start(argv, env, cwd)
    except BaseException:
        _drop_logs(kept)  # (nothing started: nothing of it left, as `_open_logs` leaves none)
        raise
    with _Subreaping.lock:
        dismiss, watcher = _watch(proc.pid, mark)
        mine += (proc.pid, watcher)
        _Subreaping.started.update(mine)
        _Subreaping.marks[proc.pid] = mark.encode()
    assert proc.stdout is not None and proc.stderr is not None
    pgid = proc.pid
    known = None if known is None else known | {proc.pid, watcher}
    return _watched(argv, proc, pgid, dismiss, known, kept, out, started)


def _open_logs(keep_logs: Path | None) -> list[tuple[Path, IO[bytes]]]:
    """``stdout.log`` and ``stderr.log`` created in ``keep_logs`` (none without it), before
    COMMAND starts: its first line finds both, and what it does to them after is a
    replacement the recording sees, never a race with their creation. A file already there is
    an error, not overwritten."""
    if keep_logs is None:
        return []
    keep_logs.mkdir(parents=True, exist_ok=True)
    kept: list[tuple[Path, IO[bytes]]] = []
    try:
        for name in ("stdout.log", "stderr.log"):
            path = keep_logs / name
            kept.append((path, open(path, "xb")))  # noqa: SIM115 - closed by its _Stream
    except OSError as e:
        _drop_logs(kept)
        why = "it already exists" if isinstance(e, FileExistsError) else e.strerror or str(e)
        raise LedgerError(f"{path}: cannot keep the command's output there: {why}; "
                          "the command was not started") from e
    return kept


def _drop_logs(kept: list[tuple[Path, IO[bytes]]]) -> None:
    """Close and remove the kept logs `_open_logs` made, when COMMAND did not start: a run
    again with the same directory finds none (rev44 finding 2: a command not on PATH left
    both, and the next run was refused, 'it already exists')."""
    for made, file in kept:
        file.close()
        with contextlib.suppress(FileNotFoundError):
            made.unlink()


def _start(argv: Sequence[str], env: Mapping[str, str], cwd: Path | None
           ) -> subprocess.Popen[bytes]:
    """COMMAND started in a process group of its own, its output piped."""
    try:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            process_group=0,
            close_fds=True,
            preexec_fn=_dies_with_us(),
        )
    except OSError as e:
        raise LedgerError(
            f"command {argv[0]!r}: cannot be started: {e.strerror or e}"
            + ("; is it installed and on PATH?" if isinstance(e, FileNotFoundError) else "")
        ) from e


def _watched(argv: Sequence[str], proc: subprocess.Popen[bytes], pgid: int,
             dismiss: Callable[[], None], known: frozenset[int] | None,
             kept: list[tuple[Path, IO[bytes]]], out: Callable[[bytes], None], started: float
             ) -> CommandResult:
    """`run_command` from COMMAND started: its output copied and digested, its group policed."""
    assert proc.stdout is not None and proc.stderr is not None
    interrupted: list[tuple[int, float]] = []

    def forward(signum: int, _frame: object) -> None:
        # A second signal does not wait for the grace period.
        _signal_group(pgid, signal.SIGKILL if interrupted else signum)
        interrupted.append((signum, time.monotonic()))

    previous: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in FORWARDED:
            previous[signum] = signal.signal(signum, forward)
    streams: list[_Stream] = []
    try:
        streams = [_Stream(pipe, out, kept[i] if kept else None)
                   for i, pipe in enumerate((proc.stdout, proc.stderr))]
        # (2)
        left = _pump(proc.pid, pgid, streams, interrupted, known)
    except BaseException:
        _signal_group(pgid, signal.SIGKILL)
        dismiss()
        proc.wait()
        for stream in streams:
            stream.close()
        if not streams:
            for _, file in kept:
                file.close()
        raise
    finally:
        for restored, handler in previous.items():
            signal.signal(restored, handler)  # type: ignore[arg-type]
    # (3)
    dismiss()  # (before the leader is reaped: its group's id is not reused until then)
    returncode = proc.wait()
    digests = [s.close() for s in streams]
    if left:
        warnings.warn(f"stopped {len(left)} process(es) the command left running outside its "
                      f"process group: {', '.join(left)}; a process the command starts does not "
                      "outlive it (docs/trainers.md)", LeftRunningWarning, stacklevel=4)
    if interrupted:
        raise CommandInterrupted(interrupted[0][0])
    return CommandResult(tuple(argv), returncode, digests[0], digests[1], started, time.time())


def _pump(pid: int, pgid: int, streams: list[_Stream], interrupted: list[tuple[int, float]],
          known: frozenset[int] | None) -> list[str]:
    """Copy output until both pipes close and the leader has exited; police the group, and
    (``known``: a subreaper) the processes that left it. Returns those stopped that had left
    it (``PID (name)``; not what they started in turn)."""
    sel = selectors.DefaultSelector()
    for s in streams:
        sel.register(s.fd, selectors.EVENT_READ, s)
    exited_at: float | None = None
    stage = 0  # after the leader's exit: 0 nothing sent, 1 SIGTERM sent, 2 SIGKILL sent
    killed = False
    left: dict[int, str] = {}
    sent: dict[int, int] = {}  # (a process that left the group: the last signal sent it)
    escaped: dict[int, str] = {}
    ours: set[int] = set()  # (this process's children seen carrying the call's mark)
    try:
        # Until the pipes close, the leader exits and (Linux) what it left in its group, which
        # holds the pipes no more (its output elsewhere) and ignores SIGTERM, is killed (rev37),
        # and what left the group (rev39).
        while sel.get_map() or exited_at is None or left:
            if sel.get_map():
                for key, _ in sel.select(timeout=_POLL):
                    stream: _Stream = key.data
                    if not stream.pump():
                        sel.unregister(stream.fd)
            else:
                time.sleep(_POLL)
            now = time.monotonic()
            if interrupted and not killed and now - interrupted[0][1] > KILL_AFTER:
                _signal_group(pgid, signal.SIGKILL)
                killed = True
            if exited_at is None:
                if not _exited(pid):
                    continue
                exited_at = now
                _signal_group(pgid, signal.SIGTERM)
                stage = 1
            elif stage == 1 and now - exited_at > STRAGGLER_GRACE:
                _signal_group(pgid, signal.SIGKILL)
                stage = 2
            elif stage == 2 and now - exited_at > 2 * STRAGGLER_GRACE:
                if sel.get_map():
                    raise LedgerError(
                        "the command exited, but a process it started outside its process "
                        "group still holds its standard output or error open, so their digests "
                        "cannot be complete; nothing was recorded (stop that process, or start "
                        "it with its output redirected)"
                    )
                if any(where != "group" for where in left.values()):
                    raise LedgerError(
                        "the command exited, but a process it started outside its process "
                        "group still runs after SIGKILL (" + ", ".join(
                            f"{p} ({_name(p)})" for p, w in left.items() if w != "group")
                        + "), and could change its outputs; nothing was recorded (stop it, "
                        "and run again)")
                break  # (killed: one in an uninterruptible wait ends as it returns)
            left = _running(pgid, pid, known, ours)
            signum = signal.SIGTERM if stage == 1 else signal.SIGKILL
            for p in (p for p, w in left.items() if w != "group" and sent.get(p) != signum):
                if left[p] == "left":
                    escaped.setdefault(p, f"{p} ({_name(p)})")
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p, signum)
                sent[p] = signum
    finally:
        sel.close()
    return list(escaped.values())


def _name(pid: int) -> str:
    """A process's command name (``/proc/PID/comm``), or ``?``."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().strip().decode("utf-8", "replace")
    except OSError:
        return "?"
