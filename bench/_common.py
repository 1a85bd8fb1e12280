"""Pieces the benchmark scripts share: a ledger with the usual keys and policy, the machine
line, timing helpers, and the writer of a script's block in docs/PERFORMANCE.md.

Scope: what two or more scripts under ``bench/`` need. The scripts are run by hand
(``python bench/<name>.py``, which puts this directory first on ``sys.path``) and, with
``--quick``, by tests/bench/test_bench_smoke.py so that they keep working.
Non-scope: measuring anything itself; the targets (each script states its own).

docs/PERFORMANCE.md keeps hand-written readings next to generated numbers. A script run with
``--write-doc`` replaces only the text between ``<!-- bench:NAME -->`` and
``<!-- /bench:NAME -->`` (NAME is the script's); without those markers it appends a new section
under the heading it is given. Everything else in the file is left as it is.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "PERFORMANCE.md"

POLICY = """\
name = "bench"
serial = 1
max_approval_age = "3650d"
[roles.producer]
keys = ["keys/vendor.pub"]
[roles.approver]
keys = ["keys/a.pub", "keys/b.pub"]
threshold = 2
[roles.trainer]
keys = ["keys/trainer.pub"]
[roles.log]
vkeys = ["{vkey}"]
"""


def unique_origin(name: str) -> str:
    """A log origin no other bench ledger uses: an origin names one log (c2sp.org/tlog-tiles),
    and the user state refuses a second log key for an origin it knows (a replaced key)."""
    return f"bench/{name}-{os.urandom(4).hex()}"


def new_ledger(root: Path, origin: str) -> tuple[Any, dict[str, Any]]:
    """A new ledger at ``root`` (wiped first) with keys ``vendor``, ``a``, ``b`` and
    ``trainer`` (unencrypted), the bench policy in force (``root/policy.toml``: vendor
    produces, a and b approve 2-of-2, trainer trains) and an environment ``bench-env@1``.

    Returns:
        The open `trajledger.Ledger` and the signers by name.
    """
    from trajledger import Ledger

    shutil.rmtree(root, ignore_errors=True)
    ledger = Ledger.init(root, origin=unique_origin(origin.removeprefix("bench/")))
    encrypt = ledger.keys.require_encrypted  # a passphrase set: the ledger's keys are encrypted
    keys = {n: ledger.keys.create(n, encrypt=encrypt) for n in ("vendor", "a", "b", "trainer")}
    (root / "policy.toml").write_text(POLICY.format(vkey=ledger.log.vkey))
    ledger.set_policy(root / "policy.toml", keys=[keys["a"], keys["b"]])
    ledger.register_environment("bench-env", "1", key=keys["vendor"], gym_id="CartPole-v1")
    return ledger, keys


def steps_table(steps: int, seed: int, episode_len: int = 200) -> Any:
    """A step table of random MuJoCo-like data: obs float32[17], action float32[6], float64
    reward, ``episode_len``-step episodes. Random floats do not compress, so the Parquet file
    is about 100 bytes per step."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    ep = np.arange(steps) // episode_len
    step = np.arange(steps) % episode_len
    last = (step == episode_len - 1) | (np.arange(steps) == steps - 1)
    return pa.table(
        {
            "episode_id": pa.array([f"s{seed}-e{e}" for e in ep]),
            "step": pa.array(step, pa.int64()),
            "obs": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.random(steps * 17, dtype=np.float32)), 17),
            "action": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.random(steps * 6, dtype=np.float32)), 6),
            "reward": pa.array(rng.random(steps)),
            "terminated": pa.array(last),
            "truncated": pa.array(np.zeros(steps, dtype=bool)),
        }
    )


@functools.cache
def compile_package() -> None:
    """Write the bytecode of trajledger's modules, as ``pip install`` of a wheel does.

    A process timed as a user would run it must not compile modules from source: an editable
    install in an environment with ``PYTHONDONTWRITEBYTECODE`` set (this machine's) recompiles
    every module changed since its last cached bytecode on every start (about 50 ms)."""
    import compileall

    import trajledger

    for name in ("", "verify", "ledger", "runner", "integrations"):
        path = Path(trajledger.__file__).parent / name
        if path.is_dir():  # real directories: compileall does not follow symlinked ones
            compileall.compile_dir(path.resolve(), quiet=1)


def cli() -> list[str]:
    """The ``trajledger`` console script of this interpreter's environment (its bytecode
    written first, `compile_package`)."""
    compile_package()
    script = Path(sys.executable).parent / "trajledger"
    return [str(script)] if script.exists() else [sys.executable, "-m", "trajledger.runner.cli"]


CLI_MAIN = "import sys\nfrom trajledger.runner.cli import main\nmain(args=sys.argv[1:])\n"
"""``python -c CLI_MAIN ARGS`` is ``trajledger ARGS``."""
SCRIPT_MAIN = (
    "import runpy, sys\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
)
"""``python -c SCRIPT_MAIN SCRIPT ARGS`` is ``python SCRIPT ARGS``."""


def run_cli(args: Sequence[str], ok: Sequence[int] = (0,), *, here: bool = False,
            env: dict[str, str] | None = None) -> float:
    """Run ``trajledger ARGS`` as a process (``here``: in this process, `run_here`, for the
    ``--quick`` modes), in environment ``env`` (default: this one's); return its wall time in
    seconds.

    Raises:
        RuntimeError: it exited with a code not in ``ok``.
    """
    t = time.perf_counter()
    if here:
        code, _, err = run_here(CLI_MAIN, args, env=env)
    else:
        p = subprocess.run([*cli(), *args], capture_output=True, text=True, env=env)
        code, err = p.returncode, p.stderr
    elapsed = time.perf_counter() - t
    if code not in ok:
        raise RuntimeError(f"trajledger {' '.join(args)}: exit {code}\n{err[-2000:]}")
    return elapsed


def run_here(code: str, args: Sequence[str], *, env: dict[str, str] | None = None
             ) -> tuple[int, str, str]:
    """Run ``code`` as ``python -c CODE ARGS`` runs it, but in this process: its exit code,
    stdout and stderr. ``env`` (default: this process's) is its environment while it runs;
    ``sys.argv``, ``sys.path``, the environment and the streams are restored after it.

    For the ``--quick`` modes only, where a process started for each run would cost more than
    all the rest (the interpreter and its imports): a run in this process exercises the same
    code, and its figures (times, peak RSS) are this process's, which nobody reads.
    """
    import contextlib
    import io
    import traceback

    # Streams with a binary buffer under them, as sys.stdout has (a command may write bytes).
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2))
    argv, path, environ = sys.argv, list(sys.path), dict(os.environ)
    sys.argv = ["-c", *args]
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
                status = 0
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
            except Exception:  # reported as the interpreter reports it
                traceback.print_exc()
                status = 1
    finally:
        sys.argv, sys.path[:] = argv, path
        if env is not None:
            os.environ.clear()
            os.environ.update(environ)
    return status, _text(out), _text(err)


def _text(stream: Any) -> str:
    stream.flush()
    return str(stream.buffer.getvalue().decode("utf-8", "replace"))


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and its finished children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def wall_cpu(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of one call (CPU of every thread, and of child processes)."""
    w, p = time.perf_counter(), cpu_seconds()
    fn()
    return time.perf_counter() - w, cpu_seconds() - p


def median(values: Sequence[float]) -> float:
    """The median (of one value: that value)."""
    return statistics.median(values)


def median_wall_cpu(runs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The median wall time and the median CPU time of (wall, CPU) pairs."""
    return statistics.median(w for w, _ in runs), statistics.median(p for _, p in runs)


def machine() -> str:
    """One line naming the machine and the load it was under, for a section's header."""
    load = os.getloadavg()
    return (
        f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs (load average "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end of the run), "
        f"Python {platform.python_version()}, {dt.date.today().isoformat()}"
    )


def command_line() -> str:
    """The command as it was run, for a section's header."""
    return "python bench/" + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])


def emit(args: Any, result: Any, text: str, name: str, heading: str) -> None:
    """A bench's result printed (its markdown ``text`` with ``--markdown``, ``--write-doc`` or
    ``--quick``, else ``result`` as JSON) and, with ``--write-doc``, written into docs/
    PERFORMANCE.md's section ``name`` (`write_section`)."""
    import json

    print(text if args.markdown or args.write_doc or args.quick
          else json.dumps(result, indent=2))
    if args.write_doc:
        write_section(name, heading, text)


def write_section(name: str, heading: str, body: str, doc: Path = DOC) -> None:
    """Put ``body`` between the ``bench:NAME`` markers of ``doc``.

    Without markers, a section ``heading`` holding the markers is appended at the end.
    """
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    text = doc.read_text() if doc.exists() else "# Performance\n"
    block = f"{begin}\n{body.strip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + f"\n\n{heading}\n\n{block}\n"
    doc.write_text(text)


def table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A markdown table; ``align`` gives one of ``l``/``r`` per column (default: first left,
    others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def met(ok: bool) -> str:
    """The word a target gets."""
    return "met" if ok else "**not met**"
