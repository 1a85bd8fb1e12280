"""The Parquet list-bomb check's cost (docs/SECURITY.md, twenty-ninth round (lead), fix 1).

N rows of 80 float32 zeros (constant data: a row group of 1Mi rows holds 320 MiB of values
under lists, over 8 x its stored bytes, so its pages are read for their repetition levels by
``parquet_read._list_rows``) and of 80 random float32 (not read again), each file read as a
process by trajledger's ``iter_parquet``, by pyarrow's ``iter_batches`` (the baseline: both
import the same modules) and by ``_list_rows`` alone (the scan: what the check costs on its
own), interleaved, ``--repeat`` times; medians of wall and CPU (user + system of the child).
``--base TREE`` adds ``iter_parquet`` and the scan of another tree (``PYTHONPATH=TREE``: the
revision before a change, compiled as this one is), in the same run.

Usage::

    python bench/list_scan_bench.py [--rows 1000000 10000000] [--repeat 3] [--base TREE]
        [--json OUT] [--write-doc]
    python bench/list_scan_bench.py --quick   (tiny sizes, in this process: tests/bench)

Not a test: only ``--quick`` runs in CI (tests/bench/test_bench_smoke.py). Target (issue 21
item 6's check, brief pq45): the scan under 0.5 x pyarrow's read of the same file; the readings
are in docs/PERFORMANCE.md, "Recording".
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c

READ = {
    "trajledger": "from trajledger.ledger.rollouts.parquet_read import iter_parquet as it\n"
                  "import sys\nn = sum(b.num_rows for b in it(sys.argv[1]))",
    "pyarrow": "import pyarrow.parquet as pq, sys\n"
               "from trajledger.ledger.rollouts import parquet_read\n"
               "n = sum(b.num_rows for b in pq.ParquetFile(sys.argv[1]).iter_batches("
               "batch_size=65536))",
    "scan": "import pyarrow.parquet as pq, sys\n"
            "from trajledger.ledger.rollouts import parquet_read as r\n"
            "m = pq.ParquetFile(sys.argv[1]).metadata\n"
            "caps = r._list_rows(sys.argv[1], m, set(m.schema.to_arrow_schema().names))",
}
"""What each reader runs (``python -c CODE FILE``)."""


def make(path: Path, n: int, zeros: bool) -> None:
    """``n`` rows of a list of 80 float32 (zeros, or random), zstd, row groups of 1Mi rows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    schema = pa.schema([("obs", pa.list_(pa.float32()))])
    with pq.ParquetWriter(path, schema, compression="zstd") as w:
        for lo in range(0, n, 1 << 20):
            k = min(1 << 20, n - lo)
            v = np.zeros(80 * k, np.float32) if zeros else rng.random(80 * k, dtype=np.float32)
            w.write_table(pa.table({"obs": pa.FixedSizeListArray.from_arrays(pa.array(v), 80)}
                                   ).cast(schema), row_group_size=1 << 20)


def run(code: str, path: Path, tree: str | None, here: bool) -> tuple[float, float]:
    """Wall and CPU seconds of one read (``tree``: on PYTHONPATH instead of this one's)."""
    if here:
        t0, r0 = time.perf_counter(), c.cpu_seconds()
        status, _out, err = c.run_here(code, [str(path)])
        if status:
            raise RuntimeError(err[-2000:])
        return time.perf_counter() - t0, c.cpu_seconds() - r0
    env = dict(os.environ, **({"PYTHONPATH": tree} if tree else {}))
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, env=env)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t0, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def measure(path: Path, repeat: int, base: str | None, here: bool) -> dict[str, Any]:
    """Each reader's median wall and CPU over ``repeat`` interleaved reads of ``path``."""
    readers = [(k, code, None) for k, code in READ.items()]
    if base:
        readers += [(f"{k} (base)", READ[k], base) for k in ("trajledger", "scan")]
    got: dict[str, list[tuple[float, float]]] = {k: [] for k, _code, _tree in readers}
    for i in range(repeat):
        for k, code, tree in readers if i % 2 == 0 else readers[::-1]:
            got[k].append(run(code, path, tree, here))
    return {k: dict(zip(("wall", "cpu"), c.median_wall_cpu(v), strict=True))
            for k, v in got.items()}


def markdown(results: list[dict[str, Any]], repeat: int) -> str:
    names = list(results[0]["readers"])
    rows = []
    for r in results:
        got, arrow = r["readers"], r["readers"]["pyarrow"]["cpu"]
        ratios = [f"{got[k]['cpu'] / arrow:.2f}" if arrow > 0 else "-"
                  for k in ("trajledger", "scan")]
        rows.append([r["label"], *(f"{got[k]['wall']:.2f} / {got[k]['cpu']:.2f}" for k in names),
                     *ratios])
    return "\n".join([
        f"`{c.command_line()}`: {c.machine()}. Median of {repeat} reads each, interleaved, each "
        "a process of its own; CPU is user + system of the child. The scan is `_list_rows` "
        "alone (its interpreter and imports included).",
        "",
        c.table(["file", *(f"{k}: wall / CPU s" for k in names), "iter_parquet / pyarrow CPU",
                 "scan / pyarrow CPU"], rows),
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="3,000 rows, once, in this process")
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--repeat", type=int, default=3, help="reads of each file by each reader")
    ap.add_argument("--base", help="another tree whose iter_parquet and scan are read too")
    ap.add_argument("--dir", type=Path, help="scratch directory (the random files are large)")
    ap.add_argument("--json", type=Path, help="the readings as JSON")
    ap.add_argument("--write-doc", action="store_true", help="their block in PERFORMANCE.md")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.repeat, args.base = [3_000], 1, None
    results = []
    with tempfile.TemporaryDirectory(prefix="list-scan-bench-", dir=args.dir) as work:
        for n in args.rows:
            for zeros in (True, False):
                path = Path(work) / f"scan-{n}-{int(zeros)}.parquet"
                make(path, n, zeros)
                size = path.stat().st_size
                label = (f"{n:,} rows, {'zeros' if zeros else 'random'}, " + (
                    f"{size / 2**20:,.1f} MiB" if size >= 1 << 20 else f"{size / 1024:.1f} KiB"))
                results.append({"label": label,
                                "readers": measure(path, args.repeat, args.base, args.quick)})
                print(label, results[-1]["readers"], file=sys.stderr, flush=True)
                path.unlink()  # (the next file's room: ten million random rows take 2.7 GB)
    if args.json:
        args.json.write_text(json.dumps({"rows": args.rows, "runs": results}, indent=2) + "\n")
    text = markdown(results, args.repeat)
    if args.write_doc:
        c.write_section("list_scan_bench", "### The list-bomb check's cost (list_scan_bench)", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
