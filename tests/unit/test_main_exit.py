"""A command's process ends with ``os._exit`` once its exit handlers ran (walk50).

``trajledger.__main__`` did so only when pyarrow or lancedb was loaded (Arrow's teardown abort,
apache/arrow#34314); the interpreter's teardown of any other command freed, one by one, every
object the process still held (about 6 ms of CPU, paid by ``verify`` on one core after its
re-hashing workers ended). Its output is flushed and its exit status kept; the exit handlers
run first.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_RUN = """
import os
import sys
import types
from trajledger.__main__ import main

class Held:
    def __del__(self, write=os.write):  # (the streams may be gone by then: the descriptor)
        write(2, b"finalized\\n")

# An object only a loaded module holds: the interpreter's teardown clears the module and frees it.
probe = types.ModuleType("probe")
probe.held = Held()
sys.modules["probe"] = probe
del probe
sys.argv = ["trajledger", *sys.argv[1:]]
main()
"""

_HANDLER = """
import atexit
import sys
from trajledger.__main__ import main

def later():  # registered after the entry point's: it runs before it
    sys.stdout.write("handler ran\\n")

sys.argv = ["trajledger", *sys.argv[1:]]
real = atexit.register
atexit.register = lambda f, *a: (real(f, *a), real(later))[0]
main()
"""


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120)


def test_a_command_ends_before_the_interpreters_teardown() -> None:
    r = _run(_RUN, "--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("trajledger, version "), r.stdout  # flushed before the end
    assert "pyarrow" not in r.stderr
    assert "finalized" not in r.stderr, "the interpreter tore down: its objects were freed"


def test_its_exit_status_and_its_message_are_kept() -> None:
    r = _run(_RUN, "--no-such-option")
    assert r.returncode == 2, (r.returncode, r.stderr)  # a usage error
    assert "No such option" in r.stderr and "finalized" not in r.stderr


def test_the_exit_handlers_registered_after_it_run_first() -> None:
    r = _run(_HANDLER, "--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [r.stdout.splitlines()[0], "handler ran"], r.stdout


_UNFLUSHED = """
import sys
import trajledger.runner.cli
from trajledger.__main__ import main

def command():  # a command that succeeds, its output left in the stream's buffer (as
    sys.stdout.write("output\\n")  # show --content's bytes were)

trajledger.runner.cli.main = command
main()
"""


def _buffered(code: str, stdout: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run([sys.executable, "-c", code], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=120, env=env)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_output_that_cannot_be_written_is_said_and_exits_3() -> None:
    """rev49 finding 1: a full disk at the last flush ended 0, the output lost."""
    with open("/dev/full", "w") as full:
        r = _buffered(_UNFLUSHED, full)
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert r.stderr.splitlines() == [
        "FAIL: standard output: cannot write: No space left on device; free space on the disk "
        "written to (the ledger's, or where --out writes) or write elsewhere, then run the "
        "command again"], r.stderr


def test_a_reader_gone_is_no_error() -> None:
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as pipe:
        r = _buffered(_UNFLUSHED, pipe)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert "FAIL" not in r.stderr and "Exception" not in r.stderr, r.stderr


_FAILED_UNFLUSHED = _UNFLUSHED.replace('sys.stdout.write("output\\n")',
                                       'sys.stdout.write("output\\n"); raise SystemExit(3)')


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_command_that_failed_is_not_told_twice() -> None:
    """A command whose write to stdout failed has said so (``clikit``: ``FAIL: No space left on
    device; …``, exit 3) and left its bytes in the buffer: no second line at the end."""
    assert _FAILED_UNFLUSHED != _UNFLUSHED
    with open("/dev/full", "w") as full:
        r = _buffered(_FAILED_UNFLUSHED, full)
    assert r.returncode == 3 and r.stderr == "", (r.returncode, r.stderr)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_what_click_writes_while_parsing_to_a_full_disk_is_one_line() -> None:
    """``trajledger --version > /dev/full``: a traceback (click's ``--version`` writes before a
    command's ``invoke``, whose ``FAIL:`` line it never reached), exit 1 (rev49)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "trajledger", "--version"], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=120, env=env)
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert r.stderr.splitlines() == [
        "FAIL: No space left on device; free space on the disk written to (the ledger's, or "
        "where --out writes) or write elsewhere, then run the command again"], r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("args", [["--version"], ["--ledger", "/nonexistent/rev50", "log",
                                                  "info"]])
def test_a_failure_that_cannot_be_said_keeps_its_exit_status(args: list[str]) -> None:
    """rev50 finding 6: ``trajledger … > FILE 2>&1`` on a full disk: the ``FAIL:`` line's own
    write raised, out of `Group.main`'s handler, and the interpreter ended 1, the status of a
    verification that failed (a missing ledger, a full disk: 3 each)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "trajledger", *args], stdout=full,
                           stderr=full, timeout=120, env=env)
    assert r.returncode == 3, r.returncode


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["log", "--help"]])
def test_what_click_writes_while_parsing_to_a_reader_gone_is_no_error(args: list[str]) -> None:
    """rev50 finding 6: ``trajledger --help | head -c 0``: click's ``main`` ends 1 on a closed
    pipe (``EPIPE``), the status of a verification that failed; a command's output to a reader
    gone is no error (exit 0, `Group.invoke`)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as pipe:
        r = subprocess.run([sys.executable, "-m", "trajledger", *args], stdout=pipe,
                           stderr=subprocess.PIPE, text=True, timeout=120, env=env)
    assert r.returncode == 0 and r.stderr == "", (r.returncode, r.stderr)


def test_a_failure_with_stdout_wrapped_by_others_keeps_its_exit_status(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """rev50 finding 6's fix reads click's ``EPIPE`` exit by click's own wrapper of stdout: a
    command (an in-process trainer's console capture: wandb's) that wraps stdout and then
    fails keeps its 1."""
    import io

    from trajledger.ledger.clikit import Group

    group = Group("t")

    class Capture:
        def __init__(self, wrapped: object) -> None:
            self.wrapped = wrapped

    @group.command()
    def fails() -> None:
        sys.stdout = Capture(sys.stdout)  # type: ignore[assignment]
        raise SystemExit(1)

    monkeypatch.setattr(sys, "stdout", io.StringIO())
    with pytest.raises(SystemExit) as e:
        group.main(["fails"])
    assert e.value.code == 1
