"""First use (issue 21 item 4): the first command of a user who has never read a ledger's log.

Target: at most 0.08 ms CPU and 0.05 ms wall (two cores) per log entry at 100k entries, linear
to 1M, under 200 MB.

A user's first command on a ledger reads the whole log once into their trust state (entries
parsed and chained to the signed root; the envelopes of named, listing and lineage records read
to index names, listings, references and held-out sets). This script builds ledgers of the given
sizes with the scale bench's real filler records (``scale_bench.build``: per 100 entries 97
rollout batches, one dataset listing them, two approvals, each a signed statement whose envelope
is in the store), then, in ``--repeat`` rounds interleaved across the sizes, runs as a process:

- ``first``: ``trajledger show template --json`` with a new, empty state directory (the first
  use: the whole log is read);
- ``warm``: the same command again on that state (the baseline: the command without the
  reading).

Each process's own CPU time and peak RSS come from ``os.wait4``. The cost of first use per entry
is (first - warm) / entries. Built ledgers are kept under ``--dir`` and reused by later runs.

Usage::

    python bench/firstuse_bench.py [--dir /tmp/firstuse] [--sizes 10000,100000] [--repeat 3]
        [--write-doc]
    python bench/firstuse_bench.py --quick    (one tiny ledger: tests/bench checks the script runs)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import _common as c


def _built(root: Path, size: int, quick: bool) -> int:
    """The ledger of ``size`` entries at ``root`` (built unless there); its entry count."""
    import scale_bench

    marker = root / "BUILT"
    if not marker.exists():
        if root.exists():
            shutil.rmtree(root)
        scale_bench.build(root, size, quick)
        marker.write_text(str(size))
    from trajledger import Ledger

    return int(Ledger.open(root).log.size)


_LAUNCH = """
import os, subprocess, sys, time
t = time.perf_counter()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read()
_, status, u = os.wait4(p.pid, 0)
wall = time.perf_counter() - t
sys.stderr.buffer.write(err)
print(os.waitstatus_to_exitcode(status), wall, u.ru_utime + u.ru_stime, u.ru_maxrss)
"""
"""Runs a command and prints its exit code, wall s, CPU s and peak RSS KiB: a small process
that forks it, since a child's peak RSS counts its parent's at the fork (this script's is
large)."""


def _run(root: Path, state: Path) -> tuple[float, float, float]:
    """``trajledger show template --json`` as a process: wall s, CPU s, peak RSS MiB."""
    env = {**os.environ, "TRAJLEDGER_STATE_DIR": str(state), "TRAJLEDGER_HOME": str(root)}
    env.pop("TRAJLEDGER_REQUIRE_PIN", None)
    p = subprocess.run([sys.executable, "-c", _LAUNCH, *c.cli(), "-q", "show", "template",
                        "--json"], env=env, capture_output=True, text=True, check=True)
    code, wall, cpu, rss = p.stdout.split()
    if code != "0":
        raise RuntimeError(f"show template: exit {code}\n{p.stderr[-2000:]}")
    return float(wall), float(cpu), int(rss) / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "firstuse")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write-doc", action="store_true")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    tmp = None
    if a.quick:
        tmp = tempfile.mkdtemp(prefix="firstuse-")
        a.dir, a.sizes, a.repeat = Path(tmp), "110", 1  # 110: every kind of filler record
    sizes = [int(s) for s in a.sizes.split(",")]
    roots = {s: a.dir / f"ledger-{s}" for s in sizes}
    entries = {s: _built(roots[s], s, a.quick) for s in sizes}
    runs: dict[int, list[tuple[tuple[float, float, float], tuple[float, float, float]]]] = {
        s: [] for s in sizes}
    for _ in range(a.repeat):
        for s in sizes:
            with tempfile.TemporaryDirectory(prefix="state-") as state:
                first = _run(roots[s], Path(state))
                warm = _run(roots[s], Path(state))
            runs[s].append((first, warm))
    rows = []
    for s in sizes:
        n = entries[s]
        fw = c.median([f[0] for f, _ in runs[s]])
        fc = c.median([f[1] for f, _ in runs[s]])
        ww = c.median([w[0] for _, w in runs[s]])
        wc = c.median([w[1] for _, w in runs[s]])
        rss = max(f[2] for f, _ in runs[s])
        per_cpu, per_wall = (fc - wc) / n * 1000, (fw - ww) / n * 1000
        rows.append([f"{n:,}", f"{fw:.2f} / {fc:.2f}", f"{ww:.2f} / {wc:.2f}",
                     f"{per_wall:.4f} / {per_cpu:.4f}", f"{rss:.0f}",
                     c.met(per_cpu <= 0.08 and rss <= 200), c.met(per_wall <= 0.05)])
    body = (
        f"`{c.command_line()}`: `trajledger show template --json` as a process on ledgers of "
        f"scale-bench filler records, first with an empty state directory (first use: the "
        f"whole log read), then again on that state (warm); medians of {a.repeat} rounds "
        f"interleaved across sizes; CPU and peak RSS of the process from wait4. "
        f"{c.machine()}.\n\n"
        + c.table(["entries", "first use: wall / CPU s", "warm: wall / CPU s",
                   "per entry: wall / CPU ms", "peak RSS MiB",
                   "target: CPU <= 0.08 ms, 200 MB", "target: wall <= 0.05 ms (quiet)"], rows)
    )
    print(body)
    if a.write_doc:
        c.write_section("firstuse_bench", "## First use (issue 21 item 4)", body)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
