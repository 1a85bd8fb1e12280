"""Worker processes forked from a preloaded server, for tests that start many short-lived Python
processes whose start-up is most of their CPU.

Why. A process started with ``spawn`` (or as ``python -c``) starts an interpreter and imports
trajledger, pyarrow and pandas again: 0.3 to 1 CPU-s each, for work of a few milliseconds in
tests/unit/ledger/test_rollout_parallel.py (a pool of two workers for each of a dozen files),
tests/e2e/test_fork_writers.py's eight command-line writers, the newline bombs of
tests/e2e/test_hostile_inputs.py, the commands of tests/e2e/test_dataset_features_cli.py and the
four writers of tests/e2e/test_concurrency.py's 1,000 appends (`Script`).

How. `context` is ``multiprocessing``'s ``forkserver`` context, its server told to import
`PRELOAD` first. The server is a fresh interpreter (started by ``multiprocessing`` with this
process's ``sys.path``, not a fork of it), started on first use and kept for the session (an
xdist worker); each process started from the context is a fork of that server: a process of
its own that shares nothing with the test process but what it is sent (pickled), whose state is
that of a fresh interpreter that has imported `PRELOAD`. `Script` runs ``python -c CODE`` so,
with the caller's environment and working directory. What differs from ``spawn``: the modules
of `PRELOAD` are already imported (as each worker imports them first anyway), a pool worker's
environment is the server's (read when the first test used it; trajledger's modules read none
at import) and `trajledger.ledger.fs`'s note of when the process started is the server's (it
judges leftovers of dead writers older than an hour: see tests/zygote.py's ``MAX_AGE``; no test
here leaves one). Only tests whose assertions hold alike under either start method use it; the
start methods themselves keep tests of their own (the rollout reader's ``spawn`` pool in
test_rollout_parallel's large-file test, the ``record`` command in real processes in
tests/e2e/test_record_progress.py; tests/e2e/test_concurrency.py's writers of the same
envelopes are fresh interpreters).

The server is not a child this process waits for: its CPU and its children's are not in the
test run's children times (read them from ``/proc``, as the docs harness's zygote log does).

Not a test module: tests import it as ``preforked`` (tests/conftest.py puts this directory on
``sys.path``).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from multiprocessing.context import ForkServerContext
from pathlib import Path

PRELOAD = [
    "pyarrow", "pyarrow.parquet", "pandas", "click.testing", "trajledger.runner.cli",
    "trajledger.api", "trajledger.ledger.artifacts", "trajledger.ledger.record",
    "trajledger.ledger.rollouts.reader_process", "trajledger.ledger.trust_state",
    "trajledger.ledger.policy_state", "sqlite3", "pyarrow.pandas_compat",
]  # fmt: skip
"""What the server imports before it forks: the rollout reader's workers' modules and what a
``record`` through the command line loads (pyarrow imports pandas on its first array of a
list; the user's trust state and its SQLite database). None of it starts a thread of its own
(pyarrow's jemalloc restarts its background thread in a forked child, as under
``multiprocessing``'s ``fork``)."""


def context() -> ForkServerContext:
    """The ``forkserver`` context whose server has imported `PRELOAD` (the server reads the
    list when it starts: on the first process started from any ``forkserver`` context of this
    process)."""
    ctx = multiprocessing.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


class Script:
    """``python -c CODE ARG...`` in a process forked from the server (`context`), started now:
    the code runs as ``__main__`` with ``sys.argv`` ``["-c", *args]``, in ``cwd`` (default: this
    process's) with exactly ``env`` as its environment (default: this process's, now) and
    standard input from ``/dev/null``; its standard output and error are kept (`communicate`).
    Its exit status is a fresh interpreter's: ``sys.exit(N)`` gives N, an uncaught exception
    its traceback on standard error and 1."""

    def __init__(self, code: str, args: Sequence[str], *, cwd: str | None = None,
                 env: Mapping[str, str] | None = None) -> None:  # fmt: skip
        self._dir = Path(tempfile.mkdtemp(prefix="preforked-"))
        self.returncode: int | None = None
        self.process = context().Process(
            target=run_script,
            args=(code, list(args), cwd or os.getcwd(), dict(os.environ if env is None else env),
                  str(self._dir / "stdout"), str(self._dir / "stderr")),
        )  # fmt: skip
        self.process.start()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the process (killed, and ``subprocess.TimeoutExpired`` raised, after
        ``timeout`` seconds); its standard output and error."""
        self.process.join(timeout)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join()
            shutil.rmtree(self._dir, ignore_errors=True)
            raise subprocess.TimeoutExpired(["python", "-c", "..."], timeout or 0)
        self.returncode = self.process.exitcode
        out, err = (self._dir / "stdout", self._dir / "stderr")
        try:
            if not err.exists():  # it died before it could run the code (see the server's stderr)
                return "", f"preforked: the process ended ({self.returncode}) before it started\n"
            return out.read_text("utf-8", "replace"), err.read_text("utf-8", "replace")
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


def run_script(code: str, args: list[str], cwd: str, env: dict[str, str], out: str,
               err: str) -> None:  # fmt: skip
    """In the forked process: become ``python -c CODE ARG...`` (`Script`) and run the code."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    for path, fd in ((out, 1), (err, 2)):
        new = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(new, fd)
        os.close(new)
    sys.argv = ["-c", *args]
    exec(compile(code, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
