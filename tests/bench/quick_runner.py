"""Runs bench scripts in their ``--quick`` mode, each in a process of its own forked from this
one, which has imported what most scripts import: the smoke test's start-up paid once.

``python tests/bench/quick_runner.py`` reads one JSON request a line on stdin, ``{"script":
PATH, "cwd": DIR, "env": {...}}``, and answers each with one JSON line on stdout, ``{"code":
EXIT_CODE, "cpu": CPU_SECONDS}``, once the script has finished. Each script runs in a forked
child as ``python PATH --quick`` would run it: ``sys.argv`` and ``sys.path[0]`` set as for a
script, run as ``__main__`` (`runpy`), in ``cwd`` with exactly ``env`` as its environment and
``DIR/stdout`` and ``DIR/stderr`` as its file descriptors 1 and 2 (stdin: ``/dev/null``), its
exit code that of the interpreter (an uncaught exception prints its traceback and exits 1). A
child starts with the modules of `PRELOAD` imported (and nothing else of a script: no state
leaks from one script into another); whatever else a script imports, it imports itself. The
CPU time is the child's and that of the processes it waited for (``os.wait4``).

Scope: running each script once, as a process, without paying for the interpreter's start-up
and the common imports each time (about 1 CPU-s a script).
Non-scope: timing or judging what a script prints (tests/bench/test_bench_smoke.py asserts).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

PRELOAD = (
    "numpy", "pyarrow", "pyarrow.compute", "pyarrow.parquet", "pandas", "gymnasium",
    "click.testing", "trajledger", "trajledger.runner.cli", "trajledger.ledger.artifacts",
)  # fmt: skip
"""What most bench scripts import (pyarrow imports pandas on its first array of a list: a
ledger's first record does it). Imported once, before any fork: none of them starts a thread."""


def run_script(script: Path, cwd: str, env: dict[str, str]) -> int:
    """In the forked child: run ``script --quick`` as ``__main__``; its exit code."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    sys.argv = [str(script), "--quick"]
    sys.path[0] = str(script.parent)
    try:
        runpy.run_path(str(script), run_name="__main__")
        code = 0
    except SystemExit as e:  # what the interpreter makes of sys.exit(X)
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # an uncaught exception, reported as the interpreter reports it
        traceback.print_exc()
        code = 1
    # What the interpreter does at exit before it stops: join the non-daemon threads, run the
    # atexit functions (multiprocessing's and concurrent.futures' clean-ups among them).
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    return code


def child(request: dict[str, Any]) -> None:
    """The forked child: its descriptors 0, 1 and 2 set, the script run; never returns."""
    code = 1
    try:
        cwd = request["cwd"]
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(os.path.join(cwd, "stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(os.path.join(cwd, "stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        code = run_script(Path(request["script"]), cwd, request["env"])
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed stream: nothing left to write
                stream.flush()
        os._exit(code)


def main() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:
        raise SystemExit(f"a preloaded module started a thread: {threading.enumerate()}")
    # The requests and answers go through descriptors of their own: a script's children
    # inherit 0, 1 and 2, which are the script's.
    requests = os.fdopen(os.dup(0), "r")
    answers = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            answers.close()
            child(request)
        _, status, usage = os.wait4(pid, 0)
        answers.write(json.dumps({"code": os.waitstatus_to_exitcode(status),
                                  "cpu": usage.ru_utime + usage.ru_stime}) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
