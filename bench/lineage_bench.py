"""Lineage cost over training iterations: the report is a DAG, so time per node stays flat.

RL is iterative: roll out from checkpoint N, train checkpoint N+1 on those rollouts with N as its
parent. This builds such a chain (CartPole, a few short episodes per iteration: the cost measured
is the ledger's, not the training's) and times, at iterations 25, 50 and 100 of one run, the
commands an auditor runs, through the command line in-process (no interpreter start-up):

- ``verify CK`` and ``verify CK --json`` of the newest checkpoint (its lineage spans every
  iteration: every batch, dataset and checkpoint back to the first random batch);
- ``admit DS`` of the newest dataset (dry run of the gate);
- ``lineage CK --format json``;
- ``impact B0`` of the first batch (everything downstream of it: the whole chain).

It prints, per command and iteration, the time, the graph's nodes + edges, the time per node and
the JSON size; then the ratios of time per node at 100 and 25 iterations (the target is 1.5 at
most) and of JSON bytes per node. Run by hand::

    python bench/lineage_bench.py [--iterations 100] [--dir /tmp/lineagebench] [--repeat 5]
        [--write-doc] [--quick]

``--quick`` (2 iterations, one run each, a temporary directory) only checks the script runs;
``--write-doc`` puts the results into docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c
from click.testing import CliRunner

from trajledger import Ledger
from trajledger.ledger.artifacts import create_dataset, register_environment, register_evaluator
from trajledger.ledger.status import approve, record_policy
from trajledger.runner.cli import main
from trajledger.runner.rollouts import run_policy
from trajledger.runner.train import rollout, train
from trajledger.verify.policy import load_policy_file


def build(home: Path, iterations: int, marks: list[int], on_mark: Any) -> None:
    ledger = Ledger.init(home, origin=c.unique_origin("lineage"))
    encrypt = ledger.keys.require_encrypted  # a passphrase set: the ledger's keys are encrypted
    keys = {n: ledger.keys.create(n, encrypt=encrypt) for n in ("vendor", "a", "b", "trainer")}
    (home / "policy.toml").write_text(c.POLICY.format(vkey=ledger.log.vkey))
    record_policy(ledger, home / "policy.toml", [keys["a"], keys["b"]])
    policy = load_policy_file(home / "policy.toml")
    register_environment(ledger, "cartpole", "1", keys["vendor"], gymnasium_id="CartPole-v1")
    register_evaluator(ledger, "return", "1", "deterministic", keys["vendor"])
    played = run_policy(None, "CartPole-v1", 4, 0, policy_version="random", max_steps=40)
    from trajledger.ledger.artifacts import record_batch

    first = record_batch(ledger, played.steps, episodes=played.episodes, env="cartpole@1",
                         evaluator="return@1", policy="random", signer=keys["vendor"],
                         name="b0").digest
    batch, parent = first, None
    for n in range(1, iterations + 1):
        create_dataset(ledger, "ds", str(n), "train", [batch], keys["vendor"])
        for a in ("a", "b"):
            approve(ledger, f"ds@{n}", keys[a], expires="3650d")
        ckpt = train(ledger, f"ds@{n}", "bc", keys["trainer"], policy, name="m", version=str(n),
                     parent=parent, config={"epochs": 2}).digest
        parent = f"m@{n}"
        res, _ = rollout(ledger, parent, "cartpole@1", 2, keys["vendor"], policy, seed=n,
                         max_steps=40)
        batch = res.digest
        if n in marks:
            on_mark(n, ckpt, f"ds@{n}", first)


def timed(args: list[str], home: Path, repeat: int) -> tuple[float, float, str]:
    """Median wall and CPU seconds (every thread) of ``trajledger ARGS`` run in-process."""
    runner = CliRunner()
    times, out = [], ""
    for _ in range(repeat):
        w, p = time.perf_counter(), time.process_time()
        r = runner.invoke(main, ["--ledger", str(home), *args])
        times.append((time.perf_counter() - w, time.process_time() - p))
        assert r.exit_code in (0, 1), r.output  # admit may refuse nothing here; verify passes
        out = r.stdout
    return statistics.median(t[0] for t in times), statistics.median(t[1] for t in times), out


def main_(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/lineagebench"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--write-doc", action="store_true", help="update docs/PERFORMANCE.md")
    ap.add_argument("--quick", action="store_true", help="2 iterations: check the script runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.dir = Path(tempfile.mkdtemp(prefix="lineagebench-"))
        args.iterations, args.repeat = 2, 1
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    os.environ["TRAJLEDGER_STATE_DIR"] = str(args.dir / "state")  # never the user's own
    marks = sorted({max(1, args.iterations // 4), max(1, args.iterations // 2), args.iterations})
    rows: list[dict[str, Any]] = []
    home = args.dir / "ledger"

    def on_mark(n: int, ckpt: str, ds: str, first: str) -> None:
        commands = {
            "verify CK": ["verify", ckpt],
            "verify CK --json": ["verify", ckpt, "--json"],
            "admit DS": ["admit", ds],
            "lineage CK --json": ["lineage", ckpt, "--format", "json"],
            "impact B0": ["impact", first, "--format", "json"],
        }
        for name, cmd in commands.items():
            seconds, cpu, out = timed(cmd, home, args.repeat)
            graph = None if name in ("verify CK", "admit DS") else json.loads(out)
            size = len(out.encode())
            if graph is None:  # the same graph as its --json twin
                _, _, js = timed([*cmd, "--json"], home, 1)
                doc = json.loads(js)
                graph = doc.get("report", doc)
            units = len(graph["nodes"]) + len(graph["edges"])
            rows.append({"iterations": n, "command": name, "seconds": seconds, "units": units,
                         "per_unit_ms": 1000 * seconds / units,
                         "cpu_per_unit_ms": 1000 * cpu / units, "bytes": size,
                         "bytes_per_unit": size / units})
            print(f"{n:4d} {name:18s} {seconds:8.3f} s ({cpu:.3f} CPU)  {units:5d} nodes+edges  "
                  f"{1000 * seconds / units:7.3f} ms/unit  {size:9d} bytes", flush=True)

    t0 = time.perf_counter()
    build(home, args.iterations, marks, on_mark)
    built = time.perf_counter() - t0
    text = render(rows, marks, args.repeat, built, args.iterations)
    print(text)
    if args.write_doc:
        c.write_section("lineage_bench", "### Lineage over training iterations", text)
    if args.quick:
        shutil.rmtree(args.dir)


def render(rows: list[dict[str, Any]], marks: list[int], repeat: int, built: float,
           iterations: int) -> str:
    """The section: header, one row per command, the ratios and the target (judged on wall and
    on CPU time: the machine is shared, and CPU time does not count waiting for a core)."""
    lo, hi = marks[0], marks[-1]
    verdict = {(True, True): "met", (True, False): "wall only: CPU over",
               (False, True): "CPU only: wall over", (False, False): "**not met**"}
    out = []
    for name in dict.fromkeys(r["command"] for r in rows):
        mine = {r["iterations"]: r for r in rows if r["command"] == name}
        wall = mine[hi]["per_unit_ms"] / mine[lo]["per_unit_ms"]
        cpu = mine[hi]["cpu_per_unit_ms"] / mine[lo]["cpu_per_unit_ms"]
        bratio = mine[hi]["bytes_per_unit"] / mine[lo]["bytes_per_unit"]
        out.append([
            name,
            *(f"{mine[m]['seconds']:.3f} ({mine[m]['units']}; {mine[m]['per_unit_ms']:.2f} / "
              f"{mine[m]['cpu_per_unit_ms']:.2f})" for m in marks),
            f"{wall:.2f} / {cpu:.2f}", verdict[wall <= 1.5, cpu <= 1.5],
            *(f"{mine[m]['bytes']:,}" for m in (lo, hi)), f"{bratio:.2f}",
        ])
    return "\n".join([
        f"`{c.command_line()}`; {c.machine()}. The chain of {iterations} iterations was "
        f"built in {built:.0f} s; each command runs through the command line in-process "
        f"(click's CliRunner: no interpreter start-up), median of {repeat}.",
        "",
        c.table(
            ["command", *(f"{m} it.: wall s (nodes+edges; ms per node+edge, wall / CPU)"
                          for m in marks),
             f"per node+edge {hi}/{lo} (wall / CPU)", "target <= 1.5", f"bytes at {lo}",
             f"bytes at {hi}", f"bytes per node+edge {hi}/{lo}"],
            out, "l" + "r" * (len(marks) + 1) + "lrrr",
        ),
    ])


if __name__ == "__main__":
    main_()
