"""The ``trajledger`` command (also ``python -m trajledger``).

Only the standard library is imported here, so that a Ctrl-C while the command's modules load
(click, cryptography, pyarrow: most of a second on a cold cache) exits 130 with one line, as a
Ctrl-C during the command does (``ledger.clikit.Group.invoke``), not with a traceback. On a
system that is not POSIX, the command says so in one line and exits 3 (``trajledger._platform``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys

__all__ = ["main"]

_NATIVE_POOLS = ("pyarrow", "lancedb")
"""Libraries whose native thread pools can abort the interpreter's own teardown."""


def main() -> None:
    """Load the command line and run it."""
    from trajledger._platform import UnsupportedPlatformError

    try:
        from trajledger.runner.cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write("FAIL: interrupted; nothing was half-written\n")
        raise SystemExit(130) from None
    except UnsupportedPlatformError as e:
        sys.stderr.write(f"FAIL: {e}\n")
        raise SystemExit(3) from None  # operational: this system, not the input
    try:
        command()
    except SystemExit as e:
        _finish(e.code)
    _finish(0)


def _finish(code: object) -> None:
    """Exit with ``code`` once the command is done, past Arrow's teardown when it was loaded.

    A process that used pyarrow can abort after its work is done and its output written:
    "terminate called without an active exception", exit 134, when a worker of Arrow's
    thread pools is still alive while the interpreter and then the C++ runtime tear down
    (apache/arrow#34314, open; seen here once in CI, after ``export --format parquet`` had
    written its files). So when a library with native thread pools was loaded, the command's
    exit handlers run (temporary directories left to finalizers are removed), the output is
    flushed, and the process ends with ``os._exit``: nothing is left to tear down. Every
    file the command wrote was made durable by the command itself before it returned.
    """
    if isinstance(code, str):  # SystemExit("message"): printed, exit 1, as Python does
        sys.stderr.write(code + "\n")
        code = 1
    status = 0 if code is None else code if isinstance(code, int) else 1
    if not any(name in sys.modules for name in _NATIVE_POOLS):
        raise SystemExit(status)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`| head`), a closed stream
            stream.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
