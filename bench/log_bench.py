"""Benchmark of the transparency log (issue 3): durable appends, proofs, full verification.

Measures, in one run on one directory:

- durable appends: N entries appended in batches (default 1,000,000 in batches of 256), each
  batch a group commit (bundles, tiles, history fsynced; treeState; signed checkpoint);
- the baseline: hashing the same N leaves (``sha256(0x00 || entry)``) with hashlib alone;
- inclusion proof time at size N (cold: a new reader; warm: tiles cached), consistency proof
  time, and a tlog-proof (inclusion + signed checkpoint, self-verified);
- full ``verify_log_dir`` time (rebuilds the tree from every entry, parses and chains every
  entry, checks every tile).

And with ``--scaling 1000,10000,100000`` (issue 11: cost independent of the log's size): the
log is grown to each size, then at each size, with the derived lookup cache in a cache directory
as a ledger has it:

- ``Log.open`` (a new process's open: classify the state, read the right edge);
- open + append of one new entry (what one CLI ``record`` does to the log, idempotence check
  included), and append of one entry by a writer that stays open;
- ``find_envelope`` of a random entry by a fresh reader.

Each size is rounded to 128 past a multiple of 256 (1000 -> 896, 100000 -> 99968), so that the
partial tiles are alike and only the size differs.

The baseline is the same operation at the smallest size, in the same run: the ratio at 100k
should be about 1 (O(batch + log n), not O(n)).

Usage::

    python bench/log_bench.py --dir /tmp/logbench [--entries 1000000] [--batch 256]
    python bench/log_bench.py --dir /tmp/logbench --scaling 1000,10000,100000 --markdown
    python bench/log_bench.py --quick        (tiny sizes: tests/bench checks the script runs)

Prints a Markdown table (and ``--json`` a JSON document). Not a test: only ``--quick`` runs in CI
(tests/bench/test_bench_smoke.py), untimed.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import random
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import _common as c

from trajledger.ledger.keys import Signer
from trajledger.ledger.log import EntrySpec, Log, verify_log_dir
from trajledger.verify.consistency import verify_consistency
from trajledger.verify.merkle import leaf_hash, verify_inclusion

KINDS = ("files", "rollout-batch", "dataset", "approval")


def make_specs(start: int, count: int, signers: tuple[str, ...]) -> list[EntrySpec]:
    """Deterministic, distinct entries: digests derived from the index."""
    out = []
    for i in range(start, start + count):
        seed = i.to_bytes(8, "big")
        out.append(
            EntrySpec(
                kind=KINDS[i % len(KINDS)],
                subject="sha256:" + hashlib.sha256(b"s" + seed).hexdigest(),
                envelope="sha256:" + hashlib.sha256(b"e" + seed).hexdigest(),
                signers=signers,
                time="2025-01-01T00:00:00Z",
            )
        )
    return out


def timed(fn: Any, repeat: int) -> list[float]:
    """Run ``fn`` ``repeat`` times; return the durations in seconds."""
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def markdown(r: dict[str, Any], proofs: int) -> str:
    """The "Log" section of docs/PERFORMANCE.md."""
    n, base = r["entries"], r["baseline_hashlib_s"]
    rows = [
        ("hashlib: leaf hashes of the same entries, 1 thread", base, n / base, 1.0),
        (
            f"durable appends, batches of {r['batch']}",
            r["append_s"],
            r["durable_entries_per_s"],
            r["append_vs_baseline"],
        ),
        (
            "log verify (every entry, tile, chain; no store)",
            r["verify_s"],
            r["verify_entries_per_s"],
            r["verify_vs_baseline"],
        ),
    ]
    lines = [
        "## Log",
        "",
        f"`python bench/log_bench.py --dir /tmp/logbench --entries {n} --batch {r['batch']} "
        "--markdown` (one process, one fresh log on the local ext4 disk; every batch is a group "
        "commit: bundles, tiles, history, treeState and checkpoint temp files and the new names' "
        "directories fsynced in one concurrent round, then the treeState rename and its directory "
        f"fsync, then the checkpoint's). {r['machine']}.",
        "",
        "| operation | total s | entries/s | x hashlib |",
        "|---|---:|---:|---:|",
        *(f"| {a} | {b:.2f} | {c:,.0f} | {d:.1f} |" for a, b, c, d in rows),
        "",
        f"Batch latency: median {r['batch_ms_median']:.1f} ms, p99 {r['batch_ms_p99']:.1f} ms.",
        f"Disk: {r['disk_bytes'] / 2**20:.0f} MiB for {n:,} entries "
        f"({r['disk_bytes'] / n:.0f} bytes per entry, tiles included).",
        "",
        f"| at {n:,} entries ({proofs} random proofs) | median ms | max ms | target |",
        "|---|---:|---:|---|",
        f"| inclusion proof + entry read + check, new reader (tiles from the page cache) | "
        f"{r['inclusion_cold_ms_median']:.2f} | {r['inclusion_cold_ms_max']:.2f} | < 5 ms: "
        f"{'met' if r['inclusion_cold_ms_max'] < 5 else 'NOT met'} |",
        f"| inclusion proof, warm reader | {r['inclusion_warm_ms_median']:.2f} | | |",
        f"| consistency proof | {r['consistency_ms_median']:.2f} | "
        f"{r['consistency_ms_max']:.2f} | |",
        f"| tlog-proof (inclusion + checkpoint signature check + self-verification) | "
        f"{r['tlog_proof_ms_median']:.2f} | | |",
        "",
        f"Targets: >= 10,000 durable appends/s in batches of 256: "
        f"{'met' if r['durable_entries_per_s'] >= 10_000 else 'NOT met'} "
        f"({r['durable_entries_per_s']:,.0f}/s); inclusion proof at 1M < 5 ms: "
        f"{'met' if r['inclusion_cold_ms_max'] < 5 else 'NOT met'}.",
    ]
    return "\n".join(lines)


def scaling(directory: Path, sizes: list[int], repeat: int) -> dict[str, Any]:
    """Per-operation medians (ms, wall and CPU) at each log size; see the module docstring.

    One log per size is built first; then each round measures every operation on every log in
    turn, so the load of a shared machine falls on all sizes alike.
    """
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    signer = Signer.generate("bench-log")
    signers = (Signer.generate("producer").keyid,)
    logs: dict[int, tuple[Log, Path]] = {}
    # The right edge's cost depends on where the size falls in its tiles (partial widths), not
    # on the size: every log gets the same remainder modulo 256, so only the size differs.
    asked = sorted(sizes)
    sizes = [s - s % 256 + 128 for s in sizes]
    for size in sorted(sizes):
        cache = directory / f"index-{size}"
        log = Log.create(directory / f"log-{size}", "bench.example/log", signer, cache_dir=cache)
        while log.size < size:
            log.append(make_specs(log.size, min(4096, size - log.size), signers))
        log.find_envelope(make_specs(0, 1, signers)[0].envelope)  # the cache covers the log
        logs[size] = (log, cache)
    rng = random.Random(2)
    names = ("open", "open_append", "append", "find")
    wall: dict[int, dict[str, list[float]]] = {s: {k: [] for k in names} for s in logs}
    cpu: dict[int, dict[str, list[float]]] = {s: {k: [] for k in names} for s in logs}
    fresh = 10**9  # indices of entries never appended before (new envelopes)

    def measure(size: int, name: str, fn: Any) -> None:
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall[size][name].append(time.perf_counter() - t)
        cpu[size][name].append(time.process_time() - c)

    for _ in range(repeat):
        for size, (log, cache) in logs.items():
            one, two = make_specs(fresh, 1, signers), make_specs(fresh + 1, 1, signers)
            fresh += 2
            target = make_specs(rng.randrange(size), 1, signers)[0].envelope
            where = log.directory
            measure(size, "open", functools.partial(Log.open, where, signer, cache_dir=cache))

            def open_append(w: Path = where, c: Path = cache, e: list[EntrySpec] = one) -> None:
                Log.open(w, signer, cache_dir=c).append(e)

            def find(w: Path = where, c: Path = cache, t: str = target) -> None:
                Log.open(w, cache_dir=c).find_envelope(t)

            measure(size, "open_append", open_append)
            measure(size, "append", functools.partial(log.append, two))
            measure(size, "find", find)
    for log, _cache in logs.values():
        log.close()
    ms = 1000.0
    return {
        "asked": asked,
        "sizes": sorted(logs),
        "repeat": repeat,
        "ops": {s: {k: statistics.median(v) * ms for k, v in wall[s].items()} for s in logs},
        "cpu": {s: {k: statistics.median(v) * ms for k, v in cpu[s].items()} for s in logs},
    }


def scaling_markdown(r: dict[str, Any], machine: str) -> str:
    """The scaling table of docs/PERFORMANCE.md."""
    sizes = sorted(r["ops"])
    names = {
        "open": "Log.open (classify the state, load the right edge)",
        "open_append": "open + append of 1 entry (a CLI record's log part)",
        "append": "append of 1 entry, writer kept open",
        "find": "open + find_envelope of a random entry",
    }
    head = " | ".join(f"{s:,}" for s in sizes)
    lines = [
        f"`python bench/log_bench.py --dir /tmp/logscale --scaling "
        f"{','.join(str(s) for s in r['asked'])} --repeat {r['repeat']} --markdown` (sizes "
        "rounded to 128 past a multiple of 256; one log per size, operations "
        f"interleaved across the sizes, median of {r['repeat']}; durable appends; lookup cache "
        f"in a cache directory). {machine}.",
        "",
        f"| operation: ms at log size (wall / CPU) | {head} | x at {sizes[0]:,} (wall / CPU) |",
        "|---|" + "---:|" * (len(sizes) + 1),
    ]
    for key, label in names.items():
        w = [r["ops"][s][key] for s in sizes]
        c = [r["cpu"][s][key] for s in sizes]
        cells = " | ".join(f"{a:.2f} / {b:.2f}" for a, b in zip(w, c, strict=True))
        lines.append(f"| {label} | {cells} | {w[-1] / w[0]:.2f} / {c[-1] / c[0]:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--dir", type=Path, help="scratch directory (wiped); required but --quick")
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--proofs", type=int, default=200, help="proofs to time")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--markdown", action="store_true", help="print the docs/PERFORMANCE.md section")
    ap.add_argument("--scaling", help="comma-separated log sizes: time the per-append costs")
    ap.add_argument("--repeat", type=int, default=30, help="runs per operation (--scaling)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes in a temporary directory: check the script runs")
    args = ap.parse_args(argv)
    if args.quick:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="logbench-") as tmp:
            base = ["--entries", "600", "--batch", "64", "--proofs", "20", "--markdown"]
            main([*base, "--dir", f"{tmp}/log"])
            return main(["--dir", f"{tmp}/scale", "--scaling", "100,300", "--repeat", "2",
                         "--markdown"])
    if args.dir is None:
        ap.error("--dir is required")
    if args.scaling:
        sizes = [int(x) for x in args.scaling.split(",")]
        r = scaling(args.dir, sizes, args.repeat)
        print(scaling_markdown(r, c.machine()) if args.markdown else json.dumps(r, indent=1))
        return 0

    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    signer = Signer.generate("bench-log")
    producer = Signer.generate("producer")
    log = Log.create(args.dir / "log", "bench.example/log", signer, cache_dir=args.dir / "index")
    n, batch = args.entries, args.batch
    signers = (producer.keyid,)

    # Entries are built per batch outside the timers, so the append time measures the log (entry
    # encoding, chaining, tiles, fsyncs, signing), not the benchmark's own data generation.
    append_s = 0.0
    baseline_s = 0.0
    batch_times = []
    prev = "0" * 64
    for start in range(0, n, batch):
        specs = make_specs(start, min(batch, n - start), signers)
        raws = []
        for s in specs:
            raw = s.entry(prev, "2025-01-01T00:00:00Z").to_bytes()
            prev = hashlib.sha256(b"\x00" + raw).hexdigest()
            raws.append(raw)
        # Baseline: hash the same leaves with hashlib alone.
        t = time.perf_counter()
        for raw in raws:
            hashlib.sha256(b"\x00" + raw).digest()
        baseline_s += time.perf_counter() - t
        t = time.perf_counter()
        log.append(specs)
        dt = time.perf_counter() - t
        batch_times.append(dt)
        append_s += dt
    assert log.size == n, (log.size, n)

    cp = log.checkpoint()
    rng = random.Random(1)
    indices = [rng.randrange(n) for _ in range(args.proofs)]

    def cold_inclusion() -> None:
        i = rng.randrange(n)
        log._readers = {}  # a fresh reader: every tile read from disk (page cache)
        verify_inclusion(i, n, leaf_hash(log.entry(i)), log.inclusion_proof(i), cp.root)

    it = iter(indices)

    def warm_inclusion() -> None:
        log.inclusion_proof(next(it))

    olds = [rng.randrange(1, n) for _ in range(args.proofs)]
    roots = {o: log.root_at(o) for o in olds[:20]}
    ot = iter(olds)

    def consistency() -> None:
        log.consistency_proof(next(ot))

    incl_cold = timed(cold_inclusion, args.proofs)
    incl_warm = timed(warm_inclusion, args.proofs)
    cons = timed(consistency, args.proofs)
    for o, r in roots.items():
        verify_consistency(o, n, log.consistency_proof(o), r, cp.root)
    tlog = timed(lambda: log.tlog_proof(rng.randrange(n)), 50)

    t = time.perf_counter()
    report = verify_log_dir(log.directory)
    verify_s = time.perf_counter() - t
    assert report.ok, report.problems[:5]

    disk = sum(f.stat().st_size for f in (args.dir / "log").rglob("*") if f.is_file())
    ms = 1000.0
    res = {
        "entries": n,
        "batch": batch,
        "machine": c.machine(),
        "append_s": append_s,
        "durable_entries_per_s": n / append_s,
        "batch_ms_median": statistics.median(batch_times) * ms,
        "batch_ms_p99": sorted(batch_times)[int(len(batch_times) * 0.99) - 1] * ms,
        "baseline_hashlib_s": baseline_s,
        "baseline_leaves_per_s": n / baseline_s,
        "append_vs_baseline": append_s / baseline_s,
        "inclusion_cold_ms_median": statistics.median(incl_cold) * ms,
        "inclusion_cold_ms_max": max(incl_cold) * ms,
        "inclusion_warm_ms_median": statistics.median(incl_warm) * ms,
        "consistency_ms_median": statistics.median(cons) * ms,
        "consistency_ms_max": max(cons) * ms,
        "tlog_proof_ms_median": statistics.median(tlog) * ms,
        "verify_s": verify_s,
        "verify_entries_per_s": n / verify_s,
        "verify_vs_baseline": verify_s / baseline_s,
        "disk_bytes": disk,
    }
    log.close()
    if args.json:
        print(json.dumps(res, indent=1))
    elif args.markdown:
        print(markdown(res, args.proofs))
    else:
        for k, v in res.items():
            print(f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
