"""trajledger's bounded Parquet reader against pyarrow's: what the decompression-bomb checks cost.

``trajledger.ledger.rollouts.parquet_read.read_parquet`` (every Parquet file trajledger reads
rows of: page headers read before a page is decompressed, string columns read as dictionaries
and their decoded sizes summed before anything is decoded; docs/SECURITY.md, "decompression
bombs in Parquet") against ``pyarrow.parquet.read_table``, on two files made here:

- **chat**: a chat step table (``episode_id``, ``step``, ``role``, ``content``) whose strings
  come to ``--chat-mb`` MiB (default 256), written with pyarrow's defaults (snappy,
  dictionary pages where pyarrow chooses them);
- **numeric**: ``--steps`` classic-RL steps (default 1,000,000: obs float32[17], action
  float32[6], reward, flags; ``ingest_bench.make_steps``).

``--big`` adds a chat file of 2.5 GiB. Each read runs in a process of its own (both readers
import the same modules first), ``--repeat`` times, interleaved; the medians of wall time, CPU
time (user + system, every thread) and peak RSS (the process's, and its growth over what the
imports took) are reported, with trajledger's over pyarrow's.

Usage::

    python bench/parquet_read_bench.py [--chat-mb 256] [--steps 1000000] [--repeat 3] [--big]
        [--json OUT] [--write-doc]
    python bench/parquet_read_bench.py --quick   (tiny sizes, in this process: tests/bench)

Not a test: only ``--quick`` runs in CI (tests/bench/test_bench_smoke.py). No target: the
readings are in docs/PERFORMANCE.md, "Recording".
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import _common as c

READERS = ("trajledger", "pyarrow")
READ = """
import json, resource, sys, time
import pyarrow.parquet as pq
from trajledger.ledger.rollouts.parquet_read import read_parquet

def usage():  # VmHWM, not ru_maxrss: that one is kept across exec (the parent's)
    r = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/self/status") as f:
        hwm = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
    return r.ru_utime + r.ru_stime, hwm * 1024

path, reader = sys.argv[1], sys.argv[2]
cpu, base = usage()
wall = time.perf_counter()
table = read_parquet(path) if reader == "trajledger" else pq.read_table(path)
wall = time.perf_counter() - wall
cpu2, peak = usage()
print(json.dumps({"wall": wall, "cpu": cpu2 - cpu, "peak": peak, "base": base,
                  "rows": table.num_rows, "bytes": table.nbytes}))
"""
"""One read in a process of its own (``python -c READ FILE READER``): its figures as JSON."""


def make_chat(path: Path, size: int, seed: int = 0) -> None:
    """A chat step table whose ``content`` strings come to about ``size`` bytes (four messages
    an episode: system, user, tool, assistant; 100 to 700 random lower-case letters and spaces
    each, so that they compress as little as text a model wrote and pyarrow stores them
    plainly, not as a dictionary), written with pyarrow's defaults."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz    ", dtype=np.uint8)
    roles = ("system", "user", "tool", "assistant")
    schema = pa.schema([("episode_id", pa.string()), ("step", pa.int64()),
                        ("role", pa.string()), ("content", pa.string())])  # fmt: skip
    written = row = 0
    with pq.ParquetWriter(path, schema) as out:
        while written < size:
            lengths = rng.integers(100, 700, min(1 << 16, (size - written) // 400 + 4))
            data = letters[rng.integers(0, len(letters), int(lengths.sum()))].tobytes()
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
            i = np.arange(row, row + len(lengths))
            out.write_table(pa.table({
                "episode_id": pa.array([f"ep-{k}" for k in i // 4]),
                "step": pa.array(i % 4, pa.int64()),
                "role": pa.array([roles[k] for k in i % 4]),
                "content": pa.StringArray.from_buffers(
                    len(lengths), pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)),
            }, schema=schema))  # fmt: skip
            written, row = written + len(data), row + len(lengths)


def read_once(path: Path, reader: str, here: bool) -> dict[str, Any]:
    """One read's figures; ``here``: in this process (``--quick``: the figures are this
    process's, which nobody reads)."""
    if here:
        code, out, err = c.run_here(READ, [str(path), reader])
    else:
        p = subprocess.run([sys.executable, "-c", READ, str(path), reader],
                           capture_output=True, text=True)  # fmt: skip
        code, out, err = p.returncode, p.stdout, p.stderr
    if code != 0:
        raise RuntimeError(f"{reader} read of {path.name}: exit {code}\n{err[-2000:]}")
    return dict(json.loads(out.strip().splitlines()[-1]))


def measure(path: Path, repeat: int, here: bool) -> dict[str, Any]:
    """Each reader's medians over ``repeat`` interleaved reads of ``path``."""
    runs: dict[str, list[dict[str, Any]]] = {r: [] for r in READERS}
    for i in range(repeat):
        for reader in READERS if i % 2 == 0 else READERS[::-1]:
            runs[reader].append(read_once(path, reader, here))
    out: dict[str, Any] = {"file": path.name, "file_bytes": path.stat().st_size}
    for reader, got in runs.items():
        out[reader] = {k: c.median([g[k] for g in got]) for k in ("wall", "cpu", "peak", "base")}
        out[reader] |= {"rows": got[0]["rows"], "table_bytes": got[0]["bytes"]}
    return out


def markdown(results: list[dict[str, Any]], repeat: int) -> str:
    mib = 1 << 20

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}" if b > 0 else "-"

    rows = []
    for r in results:
        t, p = r["trajledger"], r["pyarrow"]
        rows.append([
            f"{r['label']}: {r['file_bytes'] / mib:,.0f} MiB file, {t['rows']:,} rows, "
            f"{t['table_bytes'] / mib:,.0f} MiB decoded",
            f"{t['wall']:.2f} / {p['wall']:.2f}", ratio(t["wall"], p["wall"]),
            f"{t['cpu']:.2f} / {p['cpu']:.2f}", ratio(t["cpu"], p["cpu"]),
            f"{t['peak'] / mib:,.0f} / {p['peak'] / mib:,.0f}",
            f"{(t['peak'] - t['base']) / mib:,.0f} / {(p['peak'] - p['base']) / mib:,.0f}",
        ])  # fmt: skip
    return "\n".join([
        f"`{c.command_line()}`: {c.machine()}. Median of {repeat} reads each, interleaved, "
        "each in a process of its own that imported both readers first; CPU is user + system "
        "time of every thread; peak RSS is the process's VmHWM (and its growth over the imports).",
        "",
        c.table(["file", "wall s, trajledger / pyarrow", "ratio", "CPU s, trajledger / pyarrow",
                 "ratio", "peak RSS MiB", "growth MiB"], rows),
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--chat-mb", type=int, default=256, help="MiB of chat strings")
    ap.add_argument("--steps", type=int, default=1_000_000, help="steps of the numeric file")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--big", action="store_true", help="also a chat file of 2.5 GiB")
    ap.add_argument("--dir", type=Path, help="where the files are made (default: a temp dir)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--write-doc", action="store_true", help="update docs/PERFORMANCE.md")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.chat_mb, args.steps, args.repeat, args.big = 1, 2_000, 1, False
    from ingest_bench import make_steps

    work = Path(tempfile.mkdtemp(prefix="parquet-read-bench-", dir=args.dir))
    results = []
    try:
        cases = [("chat", args.chat_mb << 20), ("numeric", args.steps)]
        if args.big:
            cases.append(("chat, --big", 2560 << 20))
        for label, size in cases:
            path = work / f"{label.split(',')[0]}-{size}.parquet"
            print(f"writing {label} ({size:,}) to {path} ...", file=sys.stderr)
            if label == "numeric":
                make_steps(path, size)
            else:
                make_chat(path, size)
            results.append({"label": label, **measure(path, args.repeat, args.quick)})
            path.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = markdown(results, args.repeat)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.write_doc:
        c.write_section("parquet_read_bench", "### Reading Parquet: the bounded reader", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
