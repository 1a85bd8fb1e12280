"""The admission gate on a dataset of many tiny batches (spd52; out53's shape): per-batch CPU of
``trajledger admit`` against ``trajledger verify`` of the same dataset.

Builds a ledger through the public API: the bench policy, one environment, ``--batches``
rollout batches of ``--steps`` steps each (one or a few: a Parquet file a batch that holds
almost nothing, where the per-batch costs are all there is), one train dataset of all of them
approved 2-of-2. Then, in one run, ``--rounds`` interleaved rounds of, each a process as a user
runs it (warm page cache, the user's trust state already caught up by an untimed ``verify``):

- ``verify``: ``trajledger verify DATASET`` (every record, signature and blob of the lineage,
  each batch's files re-hashed): the baseline;
- ``admit``: ``trajledger admit DATASET`` (the gate's dry run: the same walk, and every batch's
  files read, hashed, parsed and validated, the contamination check);
- ``version``: ``trajledger --version`` (the start-up both pay).

The same two commands on ``tenth@1``, a dataset of the first tenth of the batches (approved
too), in the same rounds, give what a batch costs each: the difference between the two datasets'
CPU over the batches between them (the start-up and every fixed cost, imports included, cancel).

Reported: median wall and CPU seconds (user + system of the process and its threads), the CPU
a batch costs each, and ``admit`` less ``verify`` a batch: what the gate adds to a verification
(target: a few ms a batch).

Usage::

    python bench/gate_bench.py [--batches 400] [--steps 1] [--rounds 3] [--dir DIR] [--keep]
                               [--write-doc]

``--keep`` reuses the ledger in ``--dir`` when it holds one (per-commit comparisons with
``farm-bench --vs``: ``--build-only`` makes it and prints the commands).
    python bench/gate_bench.py --quick   (4 batches, one round, a temporary directory; the
                                          commands run in this process: tests/bench)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c

KINDS = ("version", "verify", "admit", "verify-tenth", "admit-tenth")


def build(root: Path, batches: int, steps: int) -> None:
    """The ledger: ``batches`` batches of ``steps`` steps, dataset ``bench@1`` approved."""
    ledger, keys = c.new_ledger(root, "bench.local/gate")
    digests = []
    for b in range(batches):
        res = ledger.record_batch(c.steps_table(steps, b), env="bench-env@1", policy="random",
                                  signer=keys["vendor"], name=f"batch-{b}")
        digests.append(res.digest)
    ledger.create_dataset("bench", "1", "train", digests, key=keys["vendor"])
    ledger.create_dataset("tenth", "1", "train", digests[:max(1, batches // 10)],
                          key=keys["vendor"])
    for ref in ("bench@1", "tenth@1"):
        for k in ("a", "b"):
            ledger.approve(ref, key=keys[k], expires="3650d")
    (root / "bench-gate").write_text(json.dumps({"batches": batches, "steps": steps}))


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(args: list[str], env: dict[str, str], quick: bool) -> tuple[float, float]:
    """Wall and CPU seconds of ``trajledger ARGS`` as a process (``quick``: in this one)."""
    if quick:
        return c.wall_cpu(lambda: c.run_cli(args, here=True, env=env))
    w, p = time.perf_counter(), children_cpu()
    proc = subprocess.run([*c.cli(), *args], capture_output=True, text=True, env=env,
                          check=False)
    wall, cpu = time.perf_counter() - w, children_cpu() - p
    if proc.returncode:
        raise SystemExit(f"trajledger {' '.join(args)}: exit {proc.returncode}\n"
                         f"{proc.stderr[-3000:]}")
    return wall, cpu


def run(root: Path, rounds: int, quick: bool) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("TRAJLEDGER_PASSPHRASE", None)
    ops = {"version": ["--version"]}
    for kind in KINDS[1:]:
        command, _, part = kind.partition("-")
        ops[kind] = ["--ledger", str(root), command, "tenth@1" if part else "bench@1"]
    timed(ops["verify"], env, quick)  # the user's state caught up, the page cache warm
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in KINDS}
    for r in range(rounds):
        for kind in KINDS[r % len(KINDS):] + KINDS[: r % len(KINDS)]:
            got[kind].append(timed(ops[kind], env, quick))
    shape = json.loads((root / "bench-gate").read_text())
    out: dict[str, Any] = {**shape, "rounds": rounds, "machine": c.machine()}
    for kind in KINDS:
        wall, cpu = c.median_wall_cpu(got[kind])
        out[kind] = {"wall_s": wall, "cpu_s": cpu, "all": got[kind]}
    return out


def markdown(r: dict[str, Any]) -> str:
    n = r["batches"]
    between = n - max(1, n // 10)

    def per(kind: str) -> float:
        """CPU-ms a batch: the whole dataset's less its tenth's, over the batches between."""
        return 1000 * (r[kind]["cpu_s"] - r[f"{kind}-tenth"]["cpu_s"]) / max(1, between)

    def row(label: str, kind: str, ms: str = "") -> list[str]:
        return [label, f"{r[kind]['wall_s']:.2f}", f"{r[kind]['cpu_s']:.2f}", ms]

    rows = [
        row("`trajledger --version` (start-up)", "version"),
        row("`trajledger verify bench@1` (the baseline)", "verify", f"{per('verify'):.2f}"),
        row("`trajledger admit bench@1` (the gate)", "admit", f"{per('admit'):.2f}"),
        row("`trajledger verify tenth@1`", "verify-tenth"),
        row("`trajledger admit tenth@1`", "admit-tenth"),
    ]
    extra = per("admit") - per("verify")
    return (
        f"`{c.command_line()}`: {n} batches of {r['steps']} step(s) in `bench@1`, the first "
        f"tenth of them in `tenth@1`; each operation a process, {r['rounds']} interleaved "
        f"rounds, medians; CPU is user + system of the process and its threads. "
        f"{r['machine']}.\n\n"
        + c.table(["operation", "wall s", "CPU s", "CPU ms a batch"], rows)
        + f"\n\nWhat the gate adds to `verify`: {extra:.2f} CPU-ms a batch "
        f"(target: a few ms, {c.met(extra <= 5)})."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=400)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="the ledger (default: a temp)")
    ap.add_argument("--keep", action="store_true", help="reuse the ledger in --dir")
    ap.add_argument("--build-only", action="store_true",
                    help="build the ledger in --dir and print the commands to time")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--write-doc", action="store_true", help="update docs/PERFORMANCE.md")
    ap.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    args = ap.parse_args()
    if args.quick:
        args.batches, args.rounds, args.dir, args.keep = 4, 1, None, False
    work = Path(args.dir or tempfile.mkdtemp(prefix="gate-bench-"))
    root = work / "ledger"
    os.environ["TRAJLEDGER_STATE_DIR"] = str(work / "state")
    try:
        if not (args.keep and (root / "bench-gate").is_file()):
            shutil.rmtree(work / "state", ignore_errors=True)
            t = time.perf_counter()
            build(root, args.batches, args.steps)
            print(f"built in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        if args.build_only:
            print(f"TRAJLEDGER_STATE_DIR={work / 'state'} trajledger --ledger {root} "
                  "admit bench@1")
            return
        result = run(root, args.rounds, args.quick)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    c.emit(args, result, markdown(result), "gate_bench", "## The admission gate on tiny batches")


if __name__ == "__main__":
    main()
