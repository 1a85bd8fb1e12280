"""A command's process ends with ``os._exit`` once its exit handlers ran (walk50).

``trajledger.__main__`` did so only when pyarrow or lancedb was loaded (Arrow's teardown abort,
apache/arrow#34314); the interpreter's teardown of any other command freed, one by one, every
object the process still held (about 6 ms of CPU, paid by ``verify`` on one core after its
re-hashing workers ended). Its output is flushed and its exit status kept; the exit handlers
run first.
"""

from __future__ import annotations

import subprocess
import sys

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
