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
    status: list[int] = []
    atexit.register(_end_past_native_teardown, status)  # the first registered runs last
    try:
        command()
    except SystemExit as e:
        status.append(_exit_status(e.code))
        raise
    status.append(0)


def _exit_status(code: object) -> int:
    """The process's exit status for ``SystemExit(code)``, as Python computes it."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _end_past_native_teardown(status: list[int]) -> None:
    """The last exit handler: once the command is done, end the process before the
    interpreter and the C++ runtime tear down, when a library with native thread pools was
    loaded.

    A process that used pyarrow can abort after its work is done and its output written:
    "terminate called without an active exception", exit 134, when a worker of Arrow's
    thread pools is still alive during that teardown (apache/arrow#34314, open; seen here once
    in CI, after ``export --format parquet`` had written its files). Registered first, this
    handler runs after every exit handler the command's libraries registered (temporary
    directories left to finalizers are removed); it flushes the output and ends with
    ``os._exit`` and the command's status. Every file the command wrote was made durable by
    the command itself before it returned. Without a status (an exception escaped the
    command: a bug) the interpreter ends as usual.
    """
    if not status or not any(name in sys.modules for name in _NATIVE_POOLS):
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`| head`), a closed stream
            stream.flush()
    os._exit(status[0])


if __name__ == "__main__":
    main()
