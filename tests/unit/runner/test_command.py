"""Running a training command: exit code, output digests, process group, signals.

The launcher tests use a small torchrun-like program (the ``launcher`` fixture of
tests/conftest.py): it starts two worker processes, does not pass signals on itself, and waits
for them. A signal reaches the workers only if it is sent to the whole process group, which is
what `run_command` must do.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from trajledger.ledger.errors import LedgerError
from trajledger.runner import command
from trajledger.runner.command import CommandInterrupted, LeftRunningWarning, run_command


def _env() -> dict[str, str]:
    return dict(os.environ)


GRACE = 0.5
"""`STRAGGLER_GRACE` in the tests whose stragglers ignore SIGTERM (they wait for its end: the
product's 5 s, six times over, was most of this module's time, ci53)."""


@pytest.fixture
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(command, "STRAGGLER_GRACE", GRACE)


def test_exit_code_and_the_digests_of_both_streams(tmp_path: Path) -> None:
    seen: list[bytes] = []
    code = "import sys; sys.stdout.write('out-1\\n'); sys.stderr.write('err'); sys.exit(3)"
    result = run_command([sys.executable, "-c", code], env=_env(), echo=seen.append,
                         keep_logs=tmp_path / "logs")
    assert result.returncode == 3
    assert result.stdout.digest == "sha256:" + hashlib.sha256(b"out-1\n").hexdigest()
    assert result.stdout.size == 6
    assert result.stderr.digest == "sha256:" + hashlib.sha256(b"err").hexdigest()
    assert sorted(seen) == [b"err", b"out-1\n"]  # both shown (on stderr by default)
    assert (tmp_path / "logs" / "stdout.log").read_bytes() == b"out-1\n"
    assert (tmp_path / "logs" / "stderr.log").read_bytes() == b"err"
    assert result.stdout.kept == tmp_path / "logs" / "stdout.log"
    assert result.argv == (sys.executable, "-c", code)


def test_the_kept_logs_exist_before_the_command_starts(tmp_path: Path) -> None:
    # COMMAND's first line finds both kept logs (they were created before it started): a
    # command that replaces one at once is a replacement the recording refuses, never a race
    # in which trajledger's own `open(..., "xb")` failed or wrote into a file already unlinked.
    code = ("import os, sys; d = sys.argv[1]; "
            "print(sorted(os.listdir(d)), os.path.getsize(os.path.join(d, 'stdout.log')))")
    seen: list[bytes] = []
    result = run_command([sys.executable, "-c", code, str(tmp_path / "logs")], env=_env(),
                         echo=seen.append, keep_logs=tmp_path / "logs")
    assert result.returncode == 0
    assert b"".join(seen) == b"['stderr.log', 'stdout.log'] 0\n"


def test_a_kept_log_that_exists_is_not_overwritten_and_nothing_starts(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "stderr.log").write_bytes(b"earlier")
    with pytest.raises(LedgerError, match=r"stderr\.log.*already exists"):
        run_command([sys.executable, "-c", "open('started', 'w')"], env=_env(), cwd=tmp_path,
                    keep_logs=tmp_path / "logs")
    assert not (tmp_path / "started").exists()
    assert (tmp_path / "logs" / "stderr.log").read_bytes() == b"earlier"
    assert not (tmp_path / "logs" / "stdout.log").exists()


def test_no_logs_kept_without_asking(tmp_path: Path) -> None:
    result = run_command([sys.executable, "-c", "print('x')"], env=_env(), echo=lambda b: None,
                         cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.kept is None
    assert list(tmp_path.iterdir()) == []


def test_stdin_is_empty_and_env_and_cwd_are_given(tmp_path: Path) -> None:
    seen: list[bytes] = []
    code = "import os, sys; print(repr(sys.stdin.read()), os.environ['X_GIVEN'], os.getcwd())"
    result = run_command([sys.executable, "-c", code], env={**_env(), "X_GIVEN": "yes"},
                         cwd=tmp_path, echo=seen.append)
    assert result.returncode == 0
    assert b"".join(seen).decode().split() == ["''", "yes", str(tmp_path)]


def test_a_missing_program_is_operational() -> None:
    with pytest.raises(LedgerError, match=r"^command 'no-such-program-xyz': cannot be started: "
                       r"No such file or directory; is it installed and on PATH\?$"):
        run_command(["no-such-program-xyz"], env=_env())
    with pytest.raises(LedgerError, match="no command given"):
        run_command([], env=_env())


def test_a_launcher_and_its_workers_all_write_to_the_captured_streams(launcher: Path) -> None:
    seen: list[bytes] = []
    result = run_command([sys.executable, str(launcher / "launcher.py"), str(launcher), "run"],
                         env=_env(), echo=seen.append, keep_logs=launcher / "logs")
    assert result.returncode == 0
    out = (launcher / "logs" / "stdout.log").read_text().splitlines()
    assert sorted(out) == sorted([
        "worker 0 ready", "worker 0 done", "worker 1 ready", "worker 1 done",
        "launcher: workers exited [0, 0]",
    ])
    assert result.stdout.digest == "sha256:" + hashlib.sha256(
        (launcher / "logs" / "stdout.log").read_bytes()).hexdigest()


def test_what_the_leader_leaves_running_is_stopped(tmp_path: Path, launcher: Path) -> None:
    # The leader starts a worker that would run for ten minutes, and exits at once.
    code = textwrap.dedent(
        f"""
        import subprocess, sys
        p = subprocess.Popen([sys.executable, {str(tmp_path / 'worker.py')!r},
                              {str(tmp_path)!r}, "0", "wait"])
        import pathlib, time
        while not pathlib.Path({str(tmp_path / 'worker0.pid')!r}).exists():
            time.sleep(0.01)
        """
    )
    shutil.copy(launcher / "worker.py", tmp_path / "worker.py")
    result = run_command([sys.executable, "-c", code], env=_env(), echo=lambda b: None)
    assert result.returncode == 0
    # It was sent SIGTERM, and it had exited (closing the output pipes it shared) by the time
    # run_command returned.
    assert (tmp_path / "worker0.signal").read_text() == "SIGTERM"


def _send_when_ready(directory: Path, signum: int) -> threading.Thread:
    """Signal this process once both workers have started and `run_command`'s handler for the
    signal is in place (as a user's Ctrl-C would, while the command runs). Without the second
    condition a signal sent outside that window meets the default action, and SIGTERM's kills
    the test process: once, under load, the xdist worker running the SIGTERM case died instead
    of the test failing (a main thread held off the processor between starting the launcher and
    installing its handlers is the likely window; a command that ended early is the other)."""
    before = signal.getsignal(signum)

    def send() -> None:
        for _ in range(6000):
            if (signal.getsignal(signum) is not before
                    and all((directory / f"worker{i}.pid").exists() for i in range(2))):
                os.kill(os.getpid(), signum)
                return
            time.sleep(0.01)

    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_reaches_the_launchers_whole_process_group(
    launcher: Path, signum: signal.Signals
) -> None:
    before = signal.getsignal(signum)
    sender = _send_when_ready(launcher, signum)
    with pytest.raises(CommandInterrupted) as info:
        run_command([sys.executable, str(launcher / "launcher.py"), str(launcher), "wait"],
                    env=_env(), echo=lambda b: None)
    sender.join()
    assert info.value.signum == signum
    assert isinstance(info.value, KeyboardInterrupt)  # the command line exits 128 + signum
    name = signal.Signals(signum).name
    assert (launcher / "worker0.signal").read_text() == name
    assert (launcher / "worker1.signal").read_text() == name
    assert (launcher / "launcher.signal").read_text() == name.removeprefix("SIG")
    assert signal.getsignal(signum) is before  # the handlers are put back


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the group is read in /proc")
@pytest.mark.usefixtures("short_grace")
def test_what_the_leader_leaves_running_without_its_pipes_is_killed(tmp_path: Path) -> None:
    """rev37: a process the leader leaves in its group that ignores SIGTERM and writes its
    output elsewhere (holding no pipe) ran on after `run_command` returned, free to change
    the outputs being hashed (the leader's SIGTERM, then nothing: the SIGKILL came only while
    a pipe was open). It is killed once the grace is over."""
    pidfile = tmp_path / "straggler.pid"
    straggler = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                 f"open({str(pidfile)!r} + '.tmp', 'w').write(str(os.getpid())); "
                 f"os.rename({str(pidfile)!r} + '.tmp', {str(pidfile)!r}); time.sleep(600)")
    pid = _leave_behind(straggler, pidfile)
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return  # killed and reaped
    assert stat[stat.rfind(b")") + 2:].split()[0] in (b"Z", b"X"), stat  # killed, not reaped


def _leave_behind(straggler: str, pidfile: Path, then: float = 0.0) -> int:
    """Run a COMMAND whose leader starts ``straggler`` (Python, its output to /dev/null), waits
    for it to write its pid to ``pidfile``, then ``then`` seconds, and exits 0; its pid."""
    code = textwrap.dedent(
        f"""
        import pathlib, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {straggler!r}], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        while not pathlib.Path({str(pidfile)!r}).exists():
            time.sleep(0.01)
        time.sleep({then})
        """
    )
    result = run_command([sys.executable, "-c", code], env=_env(), echo=lambda b: None)
    assert result.returncode == 0
    return int(pidfile.read_text())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the test reads /proc")
@pytest.mark.usefixtures("short_grace")
def test_a_straggler_whose_main_thread_exited_is_killed_too(tmp_path: Path) -> None:
    """rev38: a process whose main thread has exited (``pthread_exit``) while another thread
    runs on shows ``Z`` in ``/proc/PID/stat``, the state of its first thread, and was taken for
    a zombie: left in the group, ignoring SIGTERM and holding no pipe, it ran on after
    `run_command` returned (probed: a file written by its thread grew for seconds after it).
    Its threads are looked at, and it is killed once the grace is over."""
    pidfile = tmp_path / "straggler.pid"
    straggler = textwrap.dedent(
        f"""
        import ctypes, os, signal, threading, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        threading.Thread(target=time.sleep, args=(600,)).start()
        open({str(pidfile)!r} + '.tmp', 'w').write(str(os.getpid()))
        os.rename({str(pidfile)!r} + '.tmp', {str(pidfile)!r})
        ctypes.CDLL(None).pthread_exit(None)  # (the GIL released: the thread runs on)
        """
    )
    pid = _leave_behind(straggler, pidfile, then=0.2)  # (its main thread gone by then)
    try:
        live = [t for t in os.listdir(f"/proc/{pid}/task") if not _gone_task(pid, t)]
    except FileNotFoundError:
        return  # killed and reaped
    if live:
        os.kill(pid, signal.SIGKILL)
    assert not live, "a thread of the straggler still runs"


def _gone_task(pid: int, task: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/task/{task}/stat").read_bytes()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(b")") + 2:].split()[0] in (b"Z", b"X")


def _gone(pid: int) -> bool:
    """``pid`` ended (gone, or a zombie no one reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(b")") + 2:].split()[0] in (b"Z", b"X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the test reads /proc")
def test_the_whole_group_is_stopped_when_trajledger_is_killed(tmp_path: Path) -> None:
    """rev37: ``PR_SET_PDEATHSIG`` (spaces39) reaches COMMAND's leader only. A leader that
    does not pass SIGTERM on (a shell running workers in the background, a launcher that does
    not) left its workers running once trajledger was SIGKILLed, writing to an output
    directory the next run makes again. The watcher stops the whole group."""
    pidfile = tmp_path / "worker.pid"
    worker = (f"import os, time; open({str(pidfile)!r} + '.tmp', 'w').write(str(os.getpid())); "
              f"os.rename({str(pidfile)!r} + '.tmp', {str(pidfile)!r}); time.sleep(600)")
    leader = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
              f"{worker!r}]); time.sleep(600)")
    _kill_trajledger(leader, pidfile, "COMMAND's worker outlived trajledger")


def _kill_trajledger(leader: str, pidfile: Path, failure: str) -> None:
    """Run COMMAND ``leader`` under `run_command` in a process of its own, kill that process
    outright (none of its code runs) once ``pidfile`` is written, and see the process it names
    end."""
    host = ("import os, sys; from trajledger.runner import command; "
            f"command.STRAGGLER_GRACE = {GRACE}; "
            f"command.run_command([sys.executable, '-c', {leader!r}], env=dict(os.environ))")
    proc = subprocess.Popen([sys.executable, "-c", host], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        assert _within(60, lambda: proc.poll() is not None or pidfile.exists())
        assert proc.poll() is None, "the host ended before the process ran"
        proc.kill()
        proc.wait()
        pid = int(pidfile.read_text())
        assert _within(60, lambda: _gone(pid)), failure
    finally:
        proc.kill()
        if pidfile.exists() and not _gone(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the test reads /proc")
def test_a_process_that_left_the_group_is_stopped_when_trajledger_is_killed(
        tmp_path: Path) -> None:
    """rev39's Left (rev40): once trajledger was SIGKILLed, its watcher stopped COMMAND's
    group only, and a daemon COMMAND had started (setsid, double fork, SIGTERM ignored) was
    init's, running on. The watcher stops every process carrying the run's mark too."""
    pidfile = tmp_path / "daemon.pid"
    daemon = textwrap.dedent(
        f"""
        import os, signal, time
        os.setsid()
        if os.fork():
            os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open({str(pidfile)!r} + '.tmp', 'w').write(str(os.getpid()))
        os.rename({str(pidfile)!r} + '.tmp', {str(pidfile)!r})
        time.sleep(600)
        """
    )
    leader = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
              f"{daemon!r}], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
              "time.sleep(600)")
    _kill_trajledger(leader, pidfile, "COMMAND's daemon outlived trajledger")


def _within(seconds: float, done: Callable[[], bool]) -> bool:
    """Whether ``done()`` holds within a generous ``seconds`` (asked every 10 ms)."""
    end = time.monotonic() + seconds
    while not done():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
@pytest.mark.parametrize("how", ["setsid", "setpgid"])
@pytest.mark.usefixtures("short_grace")
def test_a_process_that_left_the_group_is_stopped_too(tmp_path: Path, how: str) -> None:
    """rev38's Left: a process COMMAND started that leaves its process group (``setsid``, a
    daemon's double fork) and ignores SIGTERM, its output elsewhere, ran on after
    `run_command` returned, free to change the outputs being hashed. trajledger is a child
    subreaper while COMMAND runs: such a process, orphaned, becomes its child, and is stopped
    as the group's stragglers are (SIGTERM, SIGKILL at the grace's end), with a warning."""
    pidfile = tmp_path / "escaped.pid"
    leave = "os.setsid()" if how == "setsid" else "os.setpgid(0, 0)"
    escaped = textwrap.dedent(
        f"""
        import os, signal, sys, time
        {leave}
        if os.fork():  # (the daemon's double fork: its parent exits, it is orphaned)
            os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open({str(pidfile)!r} + '.tmp', 'w').write(str(os.getpid()))
        os.rename({str(pidfile)!r} + '.tmp', {str(pidfile)!r})
        time.sleep(600)
        """
    )
    with pytest.warns(UserWarning, match=r"stopped 1 process\(es\) the command left running "
                                         r"outside its process group: \d+ \(python"):
        pid = _leave_behind(escaped, pidfile)
    alive = not _gone(pid)
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "the process that left COMMAND's group still runs"
    with contextlib.suppress(ChildProcessError):  # (reaped already: it was this process's)
        assert os.waitpid(pid, os.WNOHANG) == (0, 0), "it was left a zombie"


WATCHER = b"sys.stdin.buffer.read(1)"
"""A part of the watcher's command line (``runner.command``'s program)."""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the test reads /proc")
@pytest.mark.usefixtures("short_grace")
def test_a_watcher_stopped_by_the_command_does_not_hold_trajledger(tmp_path: Path) -> None:
    """rev38's Left: COMMAND can find trajledger's watcher (a child of its parent) and stop it
    (SIGSTOP): `run_command` then waited for it for ever once COMMAND had exited. The watcher
    gets the grace, then SIGKILL. (Only the watcher is stopped: this test process may have other
    children.)"""
    stop = textwrap.dedent(
        f"""
        import os, signal
        me, parent = os.getpid(), os.getppid()
        for name in filter(str.isdigit, os.listdir("/proc")):
            if int(name) == me:  # (its own command line holds the watcher's words too)
                continue
            try:
                stat = open(f"/proc/{{name}}/stat", "rb").read()
                argv = open(f"/proc/{{name}}/cmdline", "rb").read()
            except OSError:
                continue
            if int(stat[stat.rfind(b")") + 2:].split()[1]) == parent and {WATCHER!r} in argv:
                os.kill(int(name), signal.SIGSTOP)
        """
    )
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(run_command(
        [sys.executable, "-c", stop], env=_env(), echo=lambda b: None).returncode), daemon=True)
    thread.start()
    thread.join(120)
    held = thread.is_alive()
    if held:  # (let it go: the stopped watcher continued)
        for name in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{name}/stat").read_bytes()
                if int(stat[stat.rfind(b")") + 2:].split()[1]) == os.getpid() and \
                        WATCHER in Path(f"/proc/{name}/cmdline").read_bytes():
                    os.kill(int(name), signal.SIGCONT)
        thread.join(30)
    assert not held, "run_command waited for the stopped watcher"
    assert done == [0]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
def test_two_commands_at_once_leave_each_other_alone(tmp_path: Path) -> None:
    """The lead, at rev39's merge: with two `run_command` calls in threads, the first to end
    took the second's COMMAND and watcher (children of this process in groups of their own) for
    processes that had left its group: it killed them and reaped the COMMAND, whose
    ``returncode`` then read 0 though it never finished. Each call now leaves the COMMANDs and
    watchers of the others alone."""
    results: dict[str, tuple[int, list[str]]] = {}
    returned = tmp_path / "first-returned"  # the first call has ended (its clean-up done)

    def run(name: str, delay: float, wait: str) -> None:
        time.sleep(delay)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            code = run_command(
                [sys.executable, "-c", f"import os, time\n{wait}\n"
                 f"open({str(tmp_path / name)!r}, 'w').write('done')"],
                env=_env(), echo=lambda b: None).returncode
        results[name] = (code, [str(w.message) for w in seen])
        if name == "first":
            returned.write_text("")

    # The second runs until the first call has returned (not a fixed 3 s: ci56), then ends.
    until = (f"end = time.monotonic() + 60\nwhile not os.path.exists({str(returned)!r}) "
             "and time.monotonic() < end: time.sleep(0.01)")
    threads = [threading.Thread(target=run, args=("first", 0, "time.sleep(1)")),
               threading.Thread(target=run, args=("second", 0.5, until))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == {"first": (0, []), "second": (0, [])}
    assert (tmp_path / "second").read_text() == "done", "the second command was stopped"


# -- rev40: which process that came here during a run is COMMAND's: the call's mark in its
# environment (`runner.command.MARK`) says so, in trajledger's own process group too (finding
# 6), not for another call's (finding 7); a child of another thread that is taken is not reaped
# here, so its own parent reads how it ended (finding 8).

MARKS_WAIT = textwrap.dedent(
    """
    import os, pathlib, sys, time
    def wait_for(path):
        end = time.monotonic() + 60
        while not pathlib.Path(path).exists():
            if time.monotonic() > end:
                sys.exit(9)
            time.sleep(0.01)
    def note(path, text):
        open(path + ".tmp", "w").write(text)
        os.rename(path + ".tmp", path)
    """
)
"""What the COMMANDs here start with: a bounded wait for a file, a file written whole."""


def _stop(pid: int) -> bool:
    """Whether ``pid`` still ran (it is killed then)."""
    alive = not _gone(pid)
    if alive:
        os.kill(pid, signal.SIGKILL)
    return alive


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the test reads /proc")
def test_a_process_that_joins_trajledgers_own_group_is_stopped_too(tmp_path: Path) -> None:
    """Finding 6: a process COMMAND started that moved into trajledger's own process group (the
    same session: the kernel allows it) and outlived COMMAND ran on after `run_command`
    returned: `_running` leaves this process's own group alone (a library's other threads'
    children are there). One carrying the call's mark is COMMAND's wherever it is."""
    joined = str(tmp_path / "joined.pid")
    code = MARKS_WAIT + textwrap.dedent(
        f"""
        if os.fork() == 0:
            os.setpgid(0, {os.getpgrp()})
            os.close(1); os.close(2)
            note({joined!r}, str(os.getpid()))
            time.sleep(600)
            os._exit(0)
        wait_for({joined!r})
        """
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = run_command([sys.executable, "-c", code], env=_env(),
                             echo=lambda b: None)
    pid = int(Path(joined).read_text())
    assert not _stop(pid), "the process that joined trajledger's group still runs"
    assert result.returncode == 0
    assert [str(w.message) for w in seen if w.category is LeftRunningWarning] == [
        f"stopped 1 process(es) the command left running outside its process group: {pid} "
        "(python); a process the command starts does not outlive it (docs/trainers.md)"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the test reads /proc")
def test_a_call_leaves_another_calls_daemon_alone(tmp_path: Path) -> None:
    """Finding 7: two calls at once (a library's threads). A's COMMAND starts a daemon (setsid,
    double fork) after B started, and uses it until it ends. Orphaned here, the daemon was
    neither among B's children at its start nor a registered COMMAND: when B's leader exited,
    B warned of it as its own and killed it under A's running COMMAND. It carries A's mark, not
    B's: B leaves it; A stops it when A's COMMAND has ended."""
    b_started, daemon, b_done = (str(tmp_path / n) for n in ("b-started", "daemon", "b-done"))
    a_code = MARKS_WAIT + textwrap.dedent(
        f"""
        wait_for({b_started!r})
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.close(1); os.close(2)
                note({daemon!r}, str(os.getpid()))
                time.sleep(600)
            os._exit(0)
        wait_for({b_done!r})
        stat = open("/proc/%s/stat" % open({daemon!r}).read(), "rb").read()
        sys.exit(0 if stat[stat.rfind(b")") + 2:].split()[0] not in (b"Z", b"X") else 7)
        """
    )
    b_code = MARKS_WAIT + f"note({b_started!r}, 'x'); wait_for({daemon!r})"
    results: dict[str, tuple[int, list[str]]] = {}

    def call(name: str, code: str) -> None:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            got = run_command([sys.executable, "-c", code], env=_env(),
                              echo=lambda b: None).returncode
        results[name] = (got, [str(w.message) for w in seen])
        if name == "B":
            Path(b_done).write_text("x")

    threads = [threading.Thread(target=call, args=n) for n in (("A", a_code), ("B", b_code))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    pid = int(Path(daemon).read_text())
    assert not _stop(pid), "A's daemon still runs after A's run"
    assert results["B"] == (0, []), "B took A's daemon for its own"
    assert results["A"][0] == 0, "A's daemon was gone before A's COMMAND ended"
    assert [m.split(";")[0] for m in results["A"][1]] == [
        f"stopped 1 process(es) the command left running outside its process group: {pid} "
        "(python)"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the test reads /proc")
def test_another_threads_child_is_reaped_by_its_own_parent(tmp_path: Path) -> None:
    """Finding 8: a library's other thread starts a server in a session of its own while
    COMMAND runs. It is taken for COMMAND's and stopped (rev39's Left), and it was reaped
    here: its own `Popen` then read ``returncode`` 0, a killed process read as a success. It
    is now its parent's to reap: it reads that it was killed (or, left alone, runs on)."""
    started, serving = str(tmp_path / "started"), str(tmp_path / "serving")
    servers: list[subprocess.Popen[bytes]] = []

    def other_thread() -> None:
        end = threading.Event()
        while not Path(started).exists() and not end.wait(0.01):
            pass
        servers.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                        start_new_session=True))
        Path(serving).write_text("x")

    t = threading.Thread(target=other_thread)
    t.start()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LeftRunningWarning)
        code = MARKS_WAIT + f"note({started!r}, 'x'); wait_for({serving!r})"
        run_command([sys.executable, "-c", code], env=_env(), echo=lambda b: None)
    t.join(60)
    (server,) = servers
    code = server.poll()
    if code is None:
        server.kill()
        server.wait()
    assert code != 0, "a killed process read as a success by its own parent"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the test reads /proc")
def test_a_daemon_with_a_mark_of_its_own_making_is_stopped(tmp_path: Path) -> None:
    """The lead, at rev40's merge: a process is left alone as another call's only when the mark
    it carries is a running call's. A daemon COMMAND started (setsid, double fork) with a
    `TRAJLEDGER_RUN` of its own making ran on after the run, free to change the outputs: a mark
    said "another call's" though no call had made it."""
    daemon = str(tmp_path / "daemon.pid")
    code = MARKS_WAIT + textwrap.dedent(
        f"""
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.close(1); os.close(2)
                env = dict(os.environ, TRAJLEDGER_RUN="0123456789abcdef")
                os.execve(sys.executable, [sys.executable, "-c", "import os, time; "
                          "open({daemon!r} + '.tmp', 'w').write(str(os.getpid())); "
                          "os.rename({daemon!r} + '.tmp', {daemon!r}); time.sleep(600)"], env)
            os._exit(0)
        wait_for({daemon!r})
        """
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = run_command([sys.executable, "-c", code], env=_env(), echo=lambda b: None)
    pid = int(Path(daemon).read_text())
    assert not _stop(pid), "a daemon with a forged mark still runs after the run"
    assert result.returncode == 0
    assert [str(w.message).split(";")[0] for w in seen if w.category is LeftRunningWarning] == [
        f"stopped 1 process(es) the command left running outside its process group: {pid} "
        "(python)"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the watcher reads /proc")
def test_the_watcher_signals_no_group_once_it_has_ended(tmp_path: Path) -> None:
    """rev41: after a SIGKILL of trajledger the watcher sends SIGTERM, waits the grace while
    COMMAND's group or a process carrying the run's mark is there, then sends SIGKILL to both.
    Since the mark (rev40) a marked daemon that ignores SIGTERM kept it waiting after the group
    had ended, and the SIGKILL then went to the group's id, free for the whole grace: a process
    group made meanwhile under that id (pids wrap: a busy machine's 32,768) was killed. Once
    its group has ended the watcher signals that id no more. (The watcher's program is run here
    with ``os.killpg`` logged: the pid space cannot be made to wrap in a test.)"""
    from trajledger.runner import command

    log, mark = tmp_path / "killpg.log", "rev41test"
    group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             process_group=0)
    daemon = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; "
         "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(600)"],
        env={**os.environ, command.MARK: f"other:{mark}"}, stdout=subprocess.PIPE)
    assert daemon.stdout is not None and daemon.stdout.readline()  # (SIGTERM ignored now)
    logged = textwrap.dedent(
        f"""
        import os
        def _killpg(group, signum, _real=os.killpg):
            try:
                _real(group, signum)
            except OSError:
                open({str(log)!r}, "a").write(f"{{group}} {{signum}} gone\\n")
                raise
            open({str(log)!r}, "a").write(f"{{group}} {{signum}} sent\\n")
        os.killpg = _killpg
        """)
    watcher = subprocess.Popen([sys.executable, "-c", logged + command._WATCHER,
                                str(group.pid), "1.0", mark], stdin=subprocess.PIPE)
    try:
        assert watcher.stdin is not None
        watcher.stdin.close()  # (end of file: trajledger killed)
        assert group.wait(60) == -signal.SIGTERM  # (reaped at once: its id is free)
        assert daemon.wait(60) == -signal.SIGKILL  # (the marked daemon, at the grace's end)
        assert watcher.wait(60) == 0
    finally:
        for p in (group, daemon, watcher):
            p.kill()
            p.wait()
    lines = log.read_text().splitlines()
    ended = next(i for i, line in enumerate(lines) if line.endswith("gone"))
    assert lines[ended + 1:] == [], lines  # (before: SIGKILL to the ended group's id)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
def test_a_pid_reaped_as_the_calls_is_the_calls_no_more() -> None:
    """rev41: `_running` keeps the children it saw carrying the call's mark (``ours``: taken in
    any group, reaped here, even once their environment cannot be read), and reaps them once
    they exit; the pid stayed in ``ours``, so a process that got that pid later (the pid space
    wrapped during the stop's grace: another thread's child, unmarked, in this process's own
    group) was taken for the call's, killed and reaped here (rev40 finding 8's case again).
    A reaped pid is forgotten."""
    from trajledger.runner import command

    leader, mark = -12345, b"rev41pid"  # (a key no COMMAND has: this call's mark only)
    command._Subreaping.marks[leader] = mark
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE, env={**os.environ, command.MARK: "rev41pid"})
    ours: set[int] = set()
    try:
        assert _within(60, lambda: command._marked(child.pid, mark) is True)
        assert child.pid in command._running(-1, leader, frozenset(), ours)  # (seen marked)
        assert child.stdin is not None
        child.stdin.close()
        assert _within(60, lambda: _gone(child.pid))
        assert child.pid not in command._running(-1, leader, frozenset(), ours)  # (reaped)
        assert child.pid not in ours, "a reaped pid stays the call's"
    finally:
        command._Subreaping.marks.pop(leader, None)
        child.kill()
        with contextlib.suppress(ChildProcessError):
            child.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
def test_a_process_with_the_calls_mark_is_the_calls_under_a_pid_known_before() -> None:
    """rev40's Left (rev41): ``known`` holds this process's children at the call's start (a
    library's own, left alone). One of them that ended during a long run could have its pid
    given again (the pid space wrapped) to a daemon COMMAND started, orphaned here: it was left
    running, as if it were the library's. A process carrying the call's mark is the call's
    whatever its pid was before (no process had the mark then)."""
    from trajledger.runner import command

    leader, mark = -12346, b"rev41known"
    command._Subreaping.marks[leader] = mark
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE, env={**os.environ, command.MARK: "rev41known"})
    try:
        assert _within(60, lambda: command._marked(child.pid, mark) is True)
        found = command._running(-1, leader, frozenset({child.pid}), set())
        assert found.get(child.pid) == "left", found
    finally:
        command._Subreaping.marks.pop(leader, None)
        child.kill()
        child.wait()
