"""Worker processes forked from a preloaded server, for tests that start many short-lived Python
processes whose start-up is most of their CPU.

Why. A process started with ``spawn`` (or as ``python -c``) starts an interpreter and imports
trajledger and pyarrow again: 0.3 to 0.6 CPU-s each, for work of a few milliseconds in
tests/unit/ledger/test_rollout_parallel.py (a pool of two workers for each of a dozen files).

How. `context` is ``multiprocessing``'s ``forkserver`` context, its server told to import
`PRELOAD` first. The server is a fresh interpreter (started by ``multiprocessing`` with this
process's ``sys.path``, not a fork of it), started on first use and kept for the session (an
xdist worker); each process started from the context is a fork of that server: a process of
its own that shares nothing with the test process but what it is sent (pickled), whose state is
that of a fresh interpreter that has imported `PRELOAD`. What differs from ``spawn``: the
modules of `PRELOAD` are already imported (as each worker imports them first anyway), the
environment is the server's (read when the first test used it; trajledger's modules read none
at import) and `trajledger.ledger.fs`'s note of when the process started is the server's (it
judges leftovers of dead writers older than an hour: see tests/zygote.py's ``MAX_AGE``; no test
here leaves one). Only tests whose assertions hold alike under either start method use it; the
start methods themselves keep tests of their own (the rollout reader's ``spawn`` pool in
test_rollout_parallel's large-file test and the record command's tests).

Not a test module: tests import it as ``preforked`` (tests/conftest.py puts this directory on
``sys.path``).
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import ForkServerContext

PRELOAD = ["pyarrow", "trajledger.ledger.rollouts.reader_process"]
"""What the server imports before it forks (the rollout reader's workers import no more).
None of it starts a thread of its own (pyarrow's jemalloc restarts its background thread in a
forked child, as under ``multiprocessing``'s ``fork``)."""


def context() -> ForkServerContext:
    """The ``forkserver`` context whose server has imported `PRELOAD` (the server reads the
    list when it starts: on the first process started from any ``forkserver`` context of this
    process)."""
    ctx = multiprocessing.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    ctx.set_forkserver_preload(PRELOAD)
    return ctx
