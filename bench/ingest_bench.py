"""Recording rollouts (issue 4): ``trajledger record`` against plain pyarrow and JSON lines.

Builds a Parquet file of N classic-RL steps (default 1,000,000: obs float32[17], action
float32[6], reward float64, terminated / truncated, episode_id and step int64; episodes of 1,000
steps, like a MuJoCo HalfCheetah run), then, in one run with a warm page cache, times:

- ``pyarrow read + write zstd``: ``pq.read_table`` of the file and ``pq.write_table(...,
  compression="zstd")`` of the table, in this process (no interpreter start-up: the strict
  baseline);
- ``trajledger record (CLI)``: ``trajledger record FILE --env ... --key ...`` as a subprocess into
  a fresh ledger (start-up, key decryption, validation, Parquet writing, hashing, storing with
  fsync, signing and the log append included);
- ``trajledger record (library)``: ``ledger.artifacts.record_batch`` in this process, fresh ledger;
- ``JSON lines``: the same rows read from the file and written with ``json.dumps`` per row (what
  many teams do today); run once (``--jsonl-repeat``), it is slow.

Each timed operation runs ``--repeat`` times (default 7), interleaved, each after ``sync`` (no
dirty pages left by the previous one); the median is reported, wall time and CPU time (user +
system of every thread, and of child processes) side by side. The targets (issue 21 item 6):
record <= 1.15 x the pyarrow read + write in CPU time, in-process, and in wall time. The ratios
are given like for like (the CLI against pyarrow as a process, the library against pyarrow in
this process) and strict (the CLI against pyarrow in this process).

``--memory`` adds the chat case (issue 21 item 5): a chat-style JSONL file of ``--jsonl-mb`` MiB
(default 2048) is generated in the work directory and, ``--chat-repeat`` times, alternating,
read by ``pyarrow.json.read_json`` and written with zstd by a Python process (the baseline), and
recorded by ``trajledger record`` (whose reader parses in worker processes); each process
tree's wall time, CPU time (``os.wait4``: the process and the children it waited for) and peak
resident memory (the sum over the tree, sampled every 20 ms) are reported. Targets: record <=
1.5 x the baseline's wall time, and under 1 GiB of memory for 2 GiB of input. The file is
deleted afterwards. The load average is printed with the results: the machine is shared.

Usage::

    python bench/ingest_bench.py [--steps 1000000] [--repeat 7] [--markdown] [--write-doc]
    python bench/ingest_bench.py --memory [--jsonl-mb 2048] [--markdown] [--write-doc]

``--quick`` (2,000 steps, one run, a 1 MiB chat file; the ledgers made by commands run in this
process, the sizes read from the CLI's run) only checks the script runs;
``--write-doc`` puts the markdown section into docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as c

PASSPHRASE = "bench passphrase (not secret)"
BASE = "pyarrow read + write zstd (in-process)"
BASE_PROC = "pyarrow read + write zstd (process)"
CLI = "trajledger record (CLI)"
CHAT_BASE = "pyarrow.json.read_json + write zstd (process)"
CHAT_REC = "trajledger record (CLI)"
CHAT_SCRIPT = (
    "import sys, pyarrow.json as pj, pyarrow.parquet as pq; "
    "pq.write_table(pj.read_json(sys.argv[1]), sys.argv[2], compression='zstd')"
)
CHAT_TARGET = 1.5
LIB = "trajledger record (library)"
JSONL = "JSON lines (json.dumps per row)"
PYARROW_SCRIPT = (
    "import sys, pyarrow.parquet as pq; "
    "pq.write_table(pq.read_table(sys.argv[1]), sys.argv[2], compression='zstd')"
)
OBS, ACT, EPISODE = 17, 6, 1000
TARGET = 1.15
MEMORY_TARGET = 1 << 30


def bin_of(name: str) -> str:
    local = Path(sys.executable).with_name(name)
    found = str(local) if local.is_file() else shutil.which(name)
    if not found:
        raise SystemExit(f"{name}: not found next to {sys.executable} or on PATH")
    return found


def make_steps(path: Path, steps: int, seed: int = 0) -> None:
    """The classic-RL input: random float32 observations and actions, 1,000-step episodes."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    step = np.arange(steps, dtype=np.int64) % EPISODE
    table = pa.table(
        {
            "episode_id": np.arange(steps, dtype=np.int64) // EPISODE,
            "step": step,
            "obs": pa.FixedSizeListArray.from_arrays(
                rng.standard_normal(steps * OBS, dtype=np.float32), OBS
            ),
            "action": pa.FixedSizeListArray.from_arrays(
                rng.uniform(-1, 1, steps * ACT).astype(np.float32), ACT
            ),
            "reward": rng.standard_normal(steps),
            "terminated": np.zeros(steps, dtype=bool),
            "truncated": (step == EPISODE - 1) | (np.arange(steps) == steps - 1),
        }
    )
    pq.write_table(table, path)  # pyarrow's defaults (snappy), as a producer would


WORDS = (
    "the agent calls a tool to fetch the page and then summarises what it found for the user",
    "while the judge scores accuracy format and safety of every answer it reads carefully",
)


def make_chat(path: Path, size: int, seed: int = 0) -> int:
    """Chat-style JSONL of about ``size`` bytes; returns the number of lines."""
    rng = random.Random(seed)
    words = " ".join(WORDS).split(" ")
    pool = [" ".join(rng.choices(words, k=rng.randint(20, 120))) for _ in range(2000)]
    written = lines = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < size:
            n = lines
            record = {
                "episode_id": f"ep-{n}",
                "task_id": f"task-{n % 997}",
                "messages": [
                    {"role": "system", "content": pool[n % 7]},
                    {"role": "user", "content": pool[rng.randrange(2000)]},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": f"c{n}", "type": "function",
                             "function": {"name": "fetch", "arguments": '{"url": "x"}'}}
                        ],
                    },
                    {"role": "tool", "tool_call_id": f"c{n}", "name": "fetch",
                     "content": pool[rng.randrange(2000)]},
                    {"role": "assistant", "content": pool[rng.randrange(2000)]},
                ],
                "reward": rng.random(),
                "judge_scores": {"accuracy": rng.random(), "safety": 1.0},
                "usage": {"prompt_tokens": rng.randint(100, 900), "completion_tokens": 60},
                "cost_usd": 0.0012,
                "latency_ms": rng.randint(200, 3000),
                "termination_reason": "success" if n % 3 else "failure",
                "language": "en",
                "task_type": "web",
                "model_id": "agent-7b",
            }  # fmt: skip
            line = json.dumps(record) + "\n"
            f.write(line)
            written += len(line.encode())
            lines += 1
    return lines


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def fresh_ledger(tl: str, root: Path, env: dict[str, str], here: bool = False) -> Path:
    """A new ledger with key ``bench`` (encrypted) and environment ``bench@1``, made by three
    ``trajledger`` processes (``here``, for --quick: the same commands in this process)."""
    home = Path(tempfile.mkdtemp(prefix="ledger-", dir=root))
    shutil.rmtree(home)
    for args in (["init", "--origin", c.unique_origin("ingest")], ["key", "new", "bench"],
                 ["env", "register", "bench", "--version", "1", "--key", "bench"]):
        if here:
            c.run_cli(["--ledger", str(home), *args], here=True, env=env)
        else:
            run([tl, "--ledger", str(home), *args], env)
    return home


def record_cmd(tl: str, home: Path, src: Path) -> list[str]:
    return [tl, "-q", "--ledger", str(home), "record", str(src), "--env", "bench@1",
            "--policy", "bench-policy", "--key", "bench"]  # fmt: skip


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU time of ``fn``, started with no dirty pages left by the previous one."""
    gc.collect()
    os.sync()
    time.sleep(0.2)
    return c.wall_cpu(fn)


def pyarrow_copy(src: Path, out: Path) -> None:
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(src), out, compression="zstd")


def jsonl_copy(src: Path, out: Path) -> None:
    import pyarrow.parquet as pq

    with open(out, "w", encoding="utf-8") as f:
        for batch in pq.ParquetFile(src).iter_batches(batch_size=65536):
            for row in batch.to_pylist():
                f.write(json.dumps(row) + "\n")


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo.extend(int(x) for x in task.read_text().split())
    return out


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def measured(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Run ``cmd``; its wall time, CPU time (with the children it waited for) and the peak of
    the summed resident memory of its process tree (sampled every 20 ms)."""
    gc.collect()
    os.sync()
    time.sleep(0.2)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], sum(_rss(p) for p in _tree(proc.pid)))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    done.set()
    sampler.join()
    err = proc.stderr.read()  # type: ignore[union-attr]
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err!r}")
    return elapsed, usage.ru_utime + usage.ru_stime, peak[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=7, help="timed runs per operation")
    ap.add_argument("--jsonl-repeat", type=int, default=1, help="runs of the JSON-lines baseline")
    ap.add_argument("--memory", action="store_true", help="also record a large chat JSONL file")
    ap.add_argument("--jsonl-mb", type=int, default=2048, help="size of that file in MiB")
    ap.add_argument("--chat-repeat", type=int, default=1, help="runs of each chat operation")
    ap.add_argument("--workdir", type=Path, help="where to work (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    ap.add_argument("--markdown", action="store_true", help="print a docs/PERFORMANCE.md section")
    ap.add_argument("--write-doc", action="store_true", help="update docs/PERFORMANCE.md")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.repeat, args.jsonl_repeat, args.memory, args.jsonl_mb = (
            2_000, 1, 1, True, 1)

    from trajledger import Ledger
    from trajledger.ledger.artifacts import record_batch

    tl = bin_of("trajledger")
    c.compile_package()  # start the CLI as an installed package starts
    env = dict(os.environ, TRAJLEDGER_PASSPHRASE=PASSPHRASE)
    os.environ["TRAJLEDGER_PASSPHRASE"] = PASSPHRASE
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ingest-bench-", dir=args.workdir))
    os.environ["TRAJLEDGER_STATE_DIR"] = env["TRAJLEDGER_STATE_DIR"] = str(work / "state")
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "steps": args.steps, "repeat": args.repeat,
    }  # fmt: skip
    try:
        src = work / "steps.parquet"
        print(f"writing {args.steps:,} steps to {src} ...", file=sys.stderr)
        make_steps(src, args.steps)
        result["input_bytes"] = src.stat().st_size

        homes: list[Path] = []
        cli_homes: list[Path] = []

        def cli_record() -> None:
            home = fresh_ledger(tl, work, env, here=args.quick)
            homes.append(home)
            cli_homes.append(home)
            cli_times.append(timed(lambda: run(record_cmd(tl, home, src), env)))

        def lib_record() -> None:
            home = fresh_ledger(tl, work, env, here=args.quick)
            homes.append(home)
            ledger = Ledger.open(home)

            def go() -> None:
                record_batch(
                    ledger, [src], env="bench@1", policy="bench-policy",
                    signer=ledger.keys.signer("bench"),
                )  # fmt: skip

            lib_times.append(timed(go))

        out = work / "pyarrow.parquet"
        cli_times: list[tuple[float, float]] = []
        lib_times: list[tuple[float, float]] = []
        inproc: list[tuple[float, float]] = []
        proc: list[tuple[float, float]] = []
        copy_cmd = [sys.executable, "-c", PYARROW_SCRIPT, str(src), str(out)]
        pyarrow_copy(src, out)  # warm the page cache and pyarrow
        for i in range(args.repeat):
            # The two subprocesses first (in alternating order), then the two in-process runs:
            # a subprocess started just after a large in-process run is slowed by its aftermath.
            if i % 2:
                cli_record()
                proc.append(timed(lambda: run(copy_cmd, env)))
            else:
                proc.append(timed(lambda: run(copy_cmd, env)))
                cli_record()
            inproc.append(timed(lambda: pyarrow_copy(src, out)))
            lib_record()
            print(
                f"  run {i + 1}: pyarrow {inproc[-1][0]:.2f} s (process {proc[-1][0]:.2f} s), "
                f"record CLI {cli_times[-1][0]:.2f} s, library {lib_times[-1][0]:.2f} s",
                file=sys.stderr,
            )
            keep = cli_homes[-1] if args.quick else None  # --quick reads the sizes from it
            while homes:
                if (home := homes.pop()) != keep:
                    shutil.rmtree(home)
        times: dict[str, list[tuple[float, float]]] = {
            BASE: inproc,
            BASE_PROC: proc,
            CLI: cli_times,
            LIB: lib_times,
        }
        jsonl = work / "steps.jsonl"
        result["sizes"] = {
            "input (pyarrow default, snappy)": src.stat().st_size,
            "pyarrow zstd": out.stat().st_size,
        }
        if args.jsonl_repeat:  # 0 skips the slow JSON-lines baseline
            times[JSONL] = [
                timed(lambda: jsonl_copy(src, jsonl)) for _ in range(args.jsonl_repeat)
            ]
            result["sizes"]["JSON lines"] = jsonl.stat().st_size
            jsonl.unlink()
        if args.quick:  # the ledger the timed CLI run recorded into: one more would repeat it
            home = cli_homes[-1]
        else:
            home = fresh_ledger(tl, work, env)
            run(record_cmd(tl, home, src), env)
        ledger = Ledger.open(home)
        batch = ledger.log.size - 1
        from trajledger.ledger.catalog import Catalog

        (item,) = [i for i in Catalog(ledger).items() if i.index == batch]
        from trajledger.ledger.artifacts import batch_files

        files = batch_files(ledger, item.digest)
        result["sizes"]["trajledger steps.parquet"] = (
            ledger.store.path_of(files["steps.parquet"]).stat().st_size
        )
        result["sizes"]["trajledger episodes.parquet"] = (
            ledger.store.path_of(files["episodes.parquet"]).stat().st_size
        )
        shutil.rmtree(home)

        med = {n: statistics.median(w for w, _ in t) for n, t in times.items()}
        cpu = {n: statistics.median(u for _, u in t) for n, t in times.items()}
        result["median_s"] = med
        result["median_cpu_s"] = cpu
        result["min_s"] = {n: min(w for w, _ in t) for n, t in times.items()}
        result["runs_s"] = times
        result["x_pyarrow"] = {n: m / med[BASE] for n, m in med.items()}
        result["ratios"] = {
            "record library / pyarrow in-process, CPU time": cpu[LIB] / cpu[BASE],
            "record library / pyarrow in-process, wall time": med[LIB] / med[BASE],
            "record CLI / pyarrow process, wall time (both pay start-up)": (
                med[CLI] / med[BASE_PROC]
            ),
            "record CLI / pyarrow process, CPU time": cpu[CLI] / cpu[BASE_PROC],
            "record CLI / pyarrow in-process, wall time (strict)": med[CLI] / med[BASE],
        }

        if args.memory:
            chat = work / "chat.jsonl"
            size = args.jsonl_mb << 20
            print(f"writing ~{args.jsonl_mb} MiB of chat JSONL to {chat} ...", file=sys.stderr)
            lines = make_chat(chat, size)
            runs: dict[str, list[tuple[float, float, int]]] = {CHAT_BASE: [], CHAT_REC: []}
            base_cmd = [sys.executable, "-c", CHAT_SCRIPT, str(chat), str(work / "chat.parquet")]
            for i in range(args.chat_repeat):
                order = [CHAT_BASE, CHAT_REC] if i % 2 == 0 else [CHAT_REC, CHAT_BASE]
                for name in order:
                    if name == CHAT_BASE:
                        runs[name].append(measured(base_cmd, env))
                    else:
                        home = fresh_ledger(tl, work, env, here=args.quick)
                        runs[name].append(measured(record_cmd(tl, home, chat), env))
                        shutil.rmtree(home)
                    print(f"  chat {i + 1}: {name} {runs[name][-1][0]:.1f} s", file=sys.stderr)
            result["memory"] = {
                "jsonl_bytes": chat.stat().st_size, "episodes": lines,
                "runs": runs, "load_average": os.getloadavg(),
            }  # fmt: skip
            chat.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result) if args.markdown else json.dumps(result, indent=2))
    if args.write_doc:
        c.write_section("ingest_bench", "## Recording", markdown(result))
    return 0


def markdown(r: dict[str, Any]) -> str:
    med, cpu, low, x = r["median_s"], r["median_cpu_s"], r["min_s"], r["x_pyarrow"]
    steps = r["steps"]
    rows = [
        f"| {n} | {m:.2f} | {cpu[n]:.2f} | {low[n]:.2f} | {steps / m:,.0f} | {x[n]:.2f} |"
        for n, m in med.items()
    ]
    ratios = "\n".join(
        f"| {n} | {v:.2f} | {'met' if v <= TARGET else 'missed'} |" for n, v in r["ratios"].items()
    )
    sizes = "\n".join(f"| {n} | {b / 2**20:,.1f} |" for n, b in r["sizes"].items())
    m = r["machine"]
    text = (
        f"`{c.command_line()}`; {c.machine()}.\n\n"
        f"{steps:,} steps (obs float32[{OBS}], action float32[{ACT}], reward, flags, ids; "
        f"{EPISODE}-step episodes), median of {r['repeat']} runs (JSON lines: "
        f"{len(r['runs_s'].get(JSONL, []))}), warm page cache, {m['cpus']} CPUs.\n\n"
        "| operation | median wall s | median CPU s | min wall s | steps/s | wall x pyarrow "
        "in-process |\n|---|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n\n"
        f"| ratio | value | target <= {TARGET} |\n|---|---:|---|\n" + ratios + "\n\n"
        "| file | MiB |\n|---|---:|\n" + sizes + "\n"
    )
    if "memory" in r:
        mem = r["memory"]
        runs = mem["runs"]

        def med3(name: str, k: int) -> float:
            return float(statistics.median(run[k] for run in runs[name]))

        rows = [
            f"| {n} | {med3(n, 0):.1f} | {med3(n, 1):.1f} | {med3(n, 2) / 2**20:,.0f} |"
            for n in (CHAT_BASE, CHAT_REC)
        ]
        wall = med3(CHAT_REC, 0) / med3(CHAT_BASE, 0)
        cpu_ratio = med3(CHAT_REC, 1) / med3(CHAT_BASE, 1)
        rss = med3(CHAT_REC, 2)
        load = mem["load_average"]
        text += (
            f"\nChat JSONL, {mem['jsonl_bytes'] / 2**30:.2f} GiB ({mem['episodes']:,} episodes, "
            f"5 messages each), median of {len(runs[CHAT_REC])} run(s) of each, alternating "
            f"(load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} after them):\n\n"
            "| operation (as a process) | wall s | CPU s | peak RSS of the process tree, "
            "MiB |\n|---|---:|---:|---:|\n" + "\n".join(rows) + "\n\n"
            f"Record / baseline: {wall:.2f} x in wall time (target <= {CHAT_TARGET}: "
            f"{'met' if wall <= CHAT_TARGET else 'missed'}), {cpu_ratio:.2f} x in CPU time; "
            f"peak memory {rss / 2**20:,.0f} MiB (target < 1 GiB for 2 GiB: "
            + (f"{'met' if rss < MEMORY_TARGET else 'missed'}).\n"
               if mem["jsonl_bytes"] >= 2 << 30 else "not judged: run --jsonl-mb 2048).\n")
        )
    return text


if __name__ == "__main__":
    raise SystemExit(main())
