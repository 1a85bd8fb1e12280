"""``dataset create`` at the cost of the dataset, not of the ledger (issue 21 item 1).

Targets (issue 21): ``dataset create`` over N newly recorded batches takes at most the larger of
0.1 x the time their recording took and 1 s + 5 ms per batch; episode features are computed
while recording at no more than 10 % of the recording's time; the first call on a 100k-entry
ledger, its user's state caught up, takes at most 5 s; no LanceDB on that path.

In one run, every command a process as a user runs it (``trajledger`` with its bytecode
written, as an installed package starts), wall time beside the child's CPU time (its own
``rusage``) and peak RSS (its ``VmHWM``):

1. **Recording, then ``dataset create``**, for each N of ``--batches``: a ledger with the bench
   policy and a holdout dataset of ``--holdout`` batches (the other side of the contamination
   check); N Parquet inputs of ``--steps`` steps (obs float32[17], action float32[6],
   200-step episodes: about 0.84 MB stored each at 8,400 steps), each recorded by its own
   ``trajledger record`` process (the recording's time: the sum); the baseline, one thread of
   ``hashlib.sha256`` over the stored blobs of the N batches; then ``trajledger dataset
   create`` of the N batches (train): the first call (a fresh process, nothing derived yet),
   then ``--repeat`` more under new names.
2. **The features' share of recording**, in this process, interleaved: ``record_batch`` of the
   same shape with the features computed (as shipped) and with a recorder that computes none
   (``NoFeatures``, for the comparison only), for a batch of ``--steps`` steps, one of
   ``--big-steps`` steps, and a chat batch of ``--chat-episodes`` episodes (four messages of
   20-120 words: ``index_bench.chat_table``); medians of ``--repeat``, CPU beside wall.
3. **The first call on a large ledger**: a ledger of ``--entries`` log entries
   (``scale_bench.Filler``: 97 batches, a train dataset and two approvals per 100 entries, the
   fillers' data not stored), its user's state caught up; ``trajledger dataset create`` of one
   new batch (train), first call, then the same call again (warm).
4. **The holdout checks' cost** (holdout23), in this process: for a numeric shape (the steps
   of part 1) and a chat shape (``index_bench.chat_table``), ``--holdout-train`` train
   batches recorded in a ledger without a holdout and in one per scale of
   ``--holdout-scales`` with a holdout of ``--holdout-batches`` (10) batches (numeric:
   ``--steps`` x scale steps each, 1x being part 1's default holdout; chat:
   ``--chat-holdout`` x scale episodes each);
   then, interleaved, ``dataset create`` of the train batches without a holdout, with it, and
   with it but neither the step windows nor the normalised text fingerprints computed (the
   check as before the eleventh round, for their share); medians of ``--repeat``, CPU beside
   wall. The bound is issue 21's: max(0.1 x the train batches' recording, 1 s + 5 ms a batch).
5. **A sealed holdout's fit** (seal47's, `contamination_matcher.tangents` and `trimmed`; seal48),
   in this process: at each scale x of ``--sealed-scales``, ``dataset create`` of x train
   batches of ``--sealed-train`` episodes against a holdout of x sealed batches of
   ``--sealed-held`` episodes (episodes of ``--sealed-len`` steps of part 1's columns, all of
   one length: every sealed episode is fitted against every train one, so 10 x is 100 x the
   pairs), and of the same train batches against the same holdout not sealed
   (compared by runs of steps, no fit), each in a ledger of its own; interleaved, medians of
   ``--repeat``, CPU beside wall.

Usage::

    python bench/dataset_bench.py [--dir /tmp/datasetbench] [--batches 100,200] [--steps 8400]
        [--entries 100000] [--repeat 3] [--write-doc] [--quick]
    python bench/dataset_bench.py --only-sealed [--sealed-scales 1,10,100] [--repeat 3]

``--quick`` (tiny sizes, a temporary directory; one ``record`` process, the ``dataset create``
calls run in this process) only checks the script runs.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c

_HWM = (
    "\nwith open('/proc/self/status') as _f:\n"
    "    _hwm = [l for l in _f if l.startswith('VmHWM')][0].split()[1]\n"
    "sys.stderr.write(f'VmHWM {_hwm}\\n')\n"
)
_CLI = (
    "import sys\nfrom trajledger.runner.cli import main\n"
    "try:\n    main(args=sys.argv[1:])\nexcept SystemExit as e:\n    _code = e.code\n"
    "else:\n    _code = 0\n"
)


def trajledger(*args: str, ok: tuple[int, ...] = (0,), here: bool = False) -> dict[str, Any]:
    """``trajledger ARGS`` in a fresh interpreter: wall and CPU seconds, peak RSS, output.

    ``here`` (``--quick``): in this process instead (`_common.run_here`; its CPU time and peak
    RSS then this process's)."""
    c.compile_package()
    code_text = _CLI + _HWM + "sys.exit(_code)"
    if here:
        start, before = time.perf_counter(), c.cpu_seconds()
        code, stdout, stderr = c.run_here(code_text, args)
        wall, cpu = time.perf_counter() - start, c.cpu_seconds() - before
    else:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.perf_counter()
            proc = subprocess.Popen([sys.executable, "-c", code_text, *args], stdout=out,
                                    stderr=err)  # fmt: skip
            _pid, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage
            wall = time.perf_counter() - start
            proc.returncode = code = os.waitstatus_to_exitcode(status)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read().decode(), err.read().decode()
        cpu = usage.ru_utime + usage.ru_stime
    if code not in ok:
        raise RuntimeError(f"trajledger {' '.join(args[:6])}…: exit {code}\n{stderr[-3000:]}")
    hwm = re.search(r"VmHWM (\d+)", stderr)
    return {"wall": wall, "cpu": cpu, "rss": int(hwm.group(1)) * 1024 if hwm else 0,
            "stdout": stdout, "stderr": stderr}  # fmt: skip


def write_inputs(where: Path, n: int, steps: int, seed: int) -> list[Path]:
    import pyarrow.parquet as pq

    where.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        path = where / f"in-{seed + i}.parquet"
        pq.write_table(c.steps_table(steps, seed + i), path)
        out.append(path)
    return out


def hashlib_over(paths: list[Path]) -> float:
    """One thread of hashlib.sha256 over the files, read in 1 MiB chunks (wall seconds)."""
    t = time.perf_counter()
    for p in paths:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return time.perf_counter() - t


def stored_blobs(ledger: Any, batches: list[str]) -> list[Path]:
    from trajledger.ledger.artifacts import batch_files

    return [ledger.store.path_of(d) for b in batches for d in batch_files(ledger, b).values()]


def create_run(root: Path, args: argparse.Namespace, n: int) -> dict[str, Any]:
    """Part 1 for N batches."""
    ledger, _keys = c.new_ledger(root, f"bench.local/dataset-{n}")
    hold = [ledger.record_batch(c.steps_table(args.steps, 900_000 + i), env="bench-env@1",
                                policy="random", key="vendor").digest
            for i in range(args.holdout)]  # fmt: skip
    ledger.create_dataset("holdout", "1", "holdout", hold, key="vendor")
    inputs = write_inputs(root.parent / f"inputs-{n}", n, args.steps, 1000 * n)
    base = ["--ledger", str(root)]
    rec_wall = rec_cpu = 0.0
    batches = []
    for path in inputs:
        r = trajledger(*base, "-q", "record", str(path), "--env", "bench-env@1", "--policy",
                       "random", "--key", "vendor")  # fmt: skip
        rec_wall, rec_cpu = rec_wall + r["wall"], rec_cpu + r["cpu"]
        batches.append(r["stdout"].strip())
    baseline = hashlib_over(stored_blobs(ledger, batches))
    mb = sum(p.stat().st_size for p in stored_blobs(ledger, batches)) / 1e6
    runs = []
    for k in range(1 + args.repeat):
        refs = [x for b in batches for x in ("--batch", b)]
        runs.append(trajledger(*base, "-q", "dataset", "create", f"train-{k}", "--version", "1",
                               "--split", "train", *refs, "--key", "vendor",
                               here=args.quick))  # fmt: skip
    return {"n": n, "mb": mb, "rec_wall": rec_wall, "rec_cpu": rec_cpu, "hash": baseline,
            "first": runs[0], "again": runs[1:]}  # fmt: skip


class NoFeatures:
    """A recorder that computes no features: for the comparison of part 2 only."""

    def __init__(self, workdir: Path) -> None:
        from trajledger.ledger.batch_features import FeatureRecorder

        self._real = FeatureRecorder(workdir)

    def add(self, group: Any) -> None:
        pass

    def given(self, features: Any) -> None:
        pass

    def finish(self, steps: str, steps_path: Path | None = None) -> Any:
        return self._real.finish(steps)


def share_run(root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Part 2: record_batch with and without the features, interleaved, medians."""
    import index_bench

    from trajledger.ledger import artifacts
    from trajledger.ledger.batch_features import FeatureRecorder

    ledger, _keys = c.new_ledger(root, "bench.local/dataset-share")
    shapes = [
        (f"{args.steps:,} steps", lambda seed: c.steps_table(args.steps, seed)),
        (f"{args.big_steps:,} steps", lambda seed: c.steps_table(args.big_steps, seed)),
        (f"chat, {args.chat_episodes:,} episodes of 4 messages",
         lambda seed: index_bench.chat_table(args.chat_episodes, seed)),
    ]  # fmt: skip
    out = []
    for n, (label, make) in enumerate(shapes):
        times: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
        for r in range(args.repeat):
            for mode, recorder in (("with", FeatureRecorder), ("without", NoFeatures)):
                table = make(100 * n + 7 * r + (1 if mode == "with" else 2))
                artifacts.FeatureRecorder = recorder  # type: ignore[misc,assignment]
                try:
                    times[mode].append(c.wall_cpu(lambda t=table: ledger.record_batch(
                        t, env="bench-env@1", policy="random", key="vendor")))  # fmt: skip
                finally:
                    artifacts.FeatureRecorder = FeatureRecorder  # type: ignore[misc]
        med = {m: (c.median([w for w, _ in v]), c.median([p for _, p in v]))
               for m, v in times.items()}  # fmt: skip
        out.append({"label": label, **med})
    return out


def large_run(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Part 3: the first call on a ledger of --entries entries, the state caught up."""
    import scale_bench

    built = scale_bench.build(root, args.entries, args.quick)
    from trajledger import Ledger

    ledger = Ledger.open(root)
    batch = ledger.record_batch(c.steps_table(args.steps, 424242), env="bench-env@1",
                                policy="random", key="vendor", name="new").digest
    base = ["--ledger", str(root), "-q", "dataset", "create"]
    first = trajledger(*base, "probe-1", "--version", "1", "--split", "train", "--batch", batch,
                       "--key", "vendor", here=args.quick)  # fmt: skip
    again = trajledger(*base, "probe-2", "--version", "1", "--split", "train", "--batch", batch,
                       "--key", "vendor", here=args.quick)  # fmt: skip
    return {"entries": built["entries"], "catch_up": built["catch_up"], "first": first,
            "again": again}  # fmt: skip


def holdout_run(root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Part 4: dataset create with a holdout at each scale, without one, and without this
    round's checks; interleaved, medians."""
    import index_bench

    from trajledger.ledger import contamination

    shapes = {
        "numeric": (lambda n, seed: c.steps_table(n * args.steps, seed), f"{args.steps:,} steps"),
        "chat": (lambda n, seed: index_bench.chat_table(n * args.chat_holdout, seed),
                 f"{args.chat_holdout:,} chats"),
    }
    real = contamination.compared_parts
    out = []
    for shape, (make, unit) in shapes.items():
        def train(ledger: Any, make: Any = make) -> tuple[list[str], float, float]:
            got, wall, cpu = [], 0.0, 0.0
            for i in range(args.holdout_train):
                table = make(1, 5000 + i)
                w, p = c.wall_cpu(lambda t=table: got.append(ledger.record_batch(
                    t, env="bench-env@1", policy="random", key="vendor").digest))
                wall, cpu = wall + w, cpu + p
            return got, wall, cpu

        bare, _keys = c.new_ledger(root / f"{shape}-none", f"bench.local/holdout-{shape}-0")
        bare_batches, _w, _p = train(bare)
        for scale in (int(x) for x in args.holdout_scales.split(",")):
            ledger, _keys = c.new_ledger(root / f"{shape}-{scale}",
                                         f"bench.local/holdout-{shape}-{scale}")
            hold = [ledger.record_batch(make(scale, 900_000 + i), env="bench-env@1",
                                        policy="random", key="vendor").digest
                    for i in range(args.holdout_batches)]  # fmt: skip
            made = c.wall_cpu(lambda ledger=ledger, hold=hold: ledger.create_dataset(
                "holdout", "1", "holdout", hold, key="vendor"))
            mb = sum(p.stat().st_size for p in stored_blobs(ledger, hold)) / 1e6
            batches, rec_wall, rec_cpu = train(ledger)
            times: dict[str, list[tuple[float, float]]] = {"none": [], "with": [], "before": []}
            if args.grouping:
                times["grouping"] = []
            for r in range(args.repeat):
                for mode in times:
                    lg, bs = (bare, bare_batches) if mode == "none" else (ledger, batches)
                    if mode == "grouping":  # the held side's grouped file made again (hold30)
                        for old in (ledger.root / "index" / "features").glob("w*/held-*.grouped"):
                            old.unlink()
                    if mode == "before":
                        contamination.compared_parts = lambda chunk: (False, False)  # type: ignore[assignment]
                    try:
                        times[mode].append(c.wall_cpu(lambda lg=lg, bs=bs, k=f"{mode}-{scale}-{r}":
                                                      lg.create_dataset(f"t-{k}", "1", "train",
                                                                        bs, key="vendor")))
                    finally:
                        contamination.compared_parts = real  # type: ignore[assignment]
                    scale_label = (f"{scale}x: {args.holdout_batches} batches of {scale} x {unit}, "
                                   f"{mb:.0f} MB")
            out.append({"shape": shape, "holdout": scale_label, "rec": (rec_wall, rec_cpu),
                        "made": made,
                        **{m: c.median_wall_cpu(v) for m, v in times.items()}})
            shutil.rmtree(root / f"{shape}-{scale}", ignore_errors=True)
            print(f"  holdout {shape} {scale}x done", file=sys.stderr, flush=True)
    return out


SEALED_POLICY = "format = 2\n" + c.POLICY.replace("serial = 1", "serial = 2") + """
[roles.evaluator]
keys = ["keys/vendor.pub"]
encryption_keys = ["keys/x25519/evaluator.pub"]
"""
"""The bench policy with an evaluator whose X25519 key sealed batches are encrypted to."""


def sealed_run(root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Part 5: dataset create of train batches against a sealed holdout and against the same
    holdout not sealed, at each scale; interleaved, medians."""
    out = []
    for scale in (int(x) for x in args.sealed_scales.split(",")):
        ledgers: dict[str, tuple[Any, list[str]]] = {}
        for mode in ("plain", "sealed"):
            ledger, _keys = c.new_ledger(root / f"{mode}-{scale}", f"bench.local/sealed-{scale}")
            if mode == "sealed":
                ledger.keys.create_encryption_key("evaluator", encrypt=False)
                (ledger.root / "policy.toml").write_text(
                    SEALED_POLICY.format(vkey=ledger.log.vkey))
                ledger.set_policy(ledger.root / "policy.toml", keys=["a", "b"])
            hold = [ledger.record_batch(c.steps_table(args.sealed_held * args.sealed_len,
                                                      700_000 + i, args.sealed_len),
                                        env="bench-env@1", policy="random", key="vendor",
                                        seal=mode == "sealed").digest
                    for i in range(scale)]  # fmt: skip
            ledger.create_dataset("holdout", "1", "holdout", hold, key="vendor")
            batches = [ledger.record_batch(c.steps_table(args.sealed_train * args.sealed_len,
                                                         800_000 + i, args.sealed_len),
                                           env="bench-env@1", policy="random",
                                           key="vendor").digest
                       for i in range(scale)]  # fmt: skip
            ledgers[mode] = (ledger, batches)
        times: dict[str, list[tuple[float, float]]] = {"plain": [], "sealed": []}
        for r in range(args.repeat):
            for mode, (lg, bs) in ledgers.items():
                times[mode].append(c.wall_cpu(lambda lg=lg, bs=bs, k=f"{mode}-{r}":
                                              lg.create_dataset(f"t-{k}", "1", "train", bs,
                                                                key="vendor")))
        held_eps, train_eps = scale * args.sealed_held, scale * args.sealed_train
        out.append({"scale": scale, "held": held_eps, "train": train_eps,
                    "pairs": held_eps * train_eps,
                    **{m: c.median_wall_cpu(v) for m, v in times.items()}})
        for mode in ledgers:
            shutil.rmtree(root / f"{mode}-{scale}", ignore_errors=True)
        print(f"  sealed {scale}x done", file=sys.stderr, flush=True)
    return out


def render_sealed(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    body = []
    for r in rows:
        (w0, p0), (w1, p1) = r["plain"], r["sealed"]
        body.append([f"{r['scale']}x", f"{r['held']:,} / {r['train']:,}", f"{r['pairs']:,}",
                     f"{w0:.2f} / {p0:.2f}", f"{w1:.2f} / {p1:.2f}",
                     f"{w1 - w0:.2f} / {p1 - p0:.2f}", f"{p1 / p0:.2f}" if p0 else "-",
                     f"{(p1 - p0) / r['pairs'] * 1e6:.2f}"])  # fmt: skip
    return c.table(
        ["scale", f"held / train episodes ({args.sealed_len} steps)", "pairs fitted",
         f"dataset create, the holdout not sealed (median of {args.repeat}): s wall / CPU",
         "the holdout sealed: s wall / CPU", "the fit's share: s wall / CPU", "CPU ratio",
         "share's CPU-us a pair"], body)  # fmt: skip


def render_grouping(rows: list[dict[str, Any]]) -> str:
    """``--grouping``: what the held side's grouped file costs when it is made (hold30)."""
    return c.table(
        ["shape", "holdout", "dataset create of the holdout: s wall / CPU",
         "train set, the grouped file read (with the holdout)",
         "train set, the grouped file made again first"],
        [[r["shape"], r["holdout"], "{:.2f} / {:.2f}".format(*r["made"]),
          "{:.2f} / {:.2f}".format(*r["with"]), "{:.2f} / {:.2f}".format(*r["grouping"])]
         for r in rows])  # fmt: skip


def render_holdout(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    n = args.holdout_train
    body = []
    for r in rows:
        (w0, p0), (w1, p1), (wb, pb) = r["none"], r["with"], r["before"]
        bound = max(0.1 * r["rec"][0], 1.0 + 0.005 * n)
        body.append([r["shape"], r["holdout"], f"{r['rec'][0]:.2f} / {r['rec'][1]:.2f}",
                     f"{w0:.2f} / {p0:.2f}", f"{w1:.2f} / {p1:.2f}", f"{wb:.2f} / {pb:.2f}",
                     f"{w1 - w0:.2f} / {p1 - p0:.2f}", f"{w1 - wb:.2f} / {p1 - pb:.2f}",
                     f"{bound:.2f}", c.met(w1 - w0 <= bound)])  # fmt: skip
    return c.table(
        ["shape", "holdout", f"recording the {n} train batches: s wall / CPU",
         f"dataset create of them, no holdout (median of {args.repeat}): s wall / CPU",
         "with the holdout", "with it, no step windows nor normalised text",
         "the holdout checks' share", "of which windows + normalised text", "bound s",
         "share within the bound"], body)  # fmt: skip


def render(creates: list[dict[str, Any]], shares: list[dict[str, Any]],
           large: dict[str, Any] | None, args: argparse.Namespace) -> str:
    lines = [f"`{c.command_line()}`; {c.machine()}.", ""]
    rows = []
    for r in creates:
        n = r["n"]
        again_wall = c.median([x["wall"] for x in r["again"]]) if r["again"] else float("nan")
        again_cpu = c.median([x["cpu"] for x in r["again"]]) if r["again"] else float("nan")
        limit = max(0.1 * r["rec_wall"], 1.0 + 0.005 * n)
        rows.append([
            f"{n} batches ({r['mb']:.0f} MB stored)",
            f"{r['rec_wall']:.1f} / {r['rec_cpu']:.1f}",
            f"{r['hash']:.2f}",
            f"{r['first']['wall']:.2f} / {r['first']['cpu']:.2f}",
            f"{r['first']['rss'] / 2**20:.0f}",
            f"{again_wall:.2f} / {again_cpu:.2f}",
            f"{limit:.2f}",
            c.met(r["first"]["wall"] <= limit),
        ])  # fmt: skip
    lines.append(c.table(
        ["N new batches", "recording them, N processes: s wall / CPU", "hashlib over their blobs s",
         "dataset create, first call: s wall / CPU", "peak RSS MiB",
         f"again, median of {args.repeat}: s wall / CPU", "target s", ""], rows))  # fmt: skip
    lines.append("")
    rows = []
    for s in shares:
        (w1, p1), (w0, p0) = s["with"], s["without"]
        rows.append([s["label"], f"{w1:.3f} / {p1:.3f}", f"{w0:.3f} / {p0:.3f}",
                     f"{(w1 - w0) / w0:+.0%} / {(p1 - p0) / p0:+.0%}",
                     c.met(w1 - w0 <= 0.1 * w0)])  # fmt: skip
    lines.append(c.table(
        [f"record_batch in process (median of {args.repeat})", "with features: s wall / CPU",
         "without: s wall / CPU", "features' share: wall / CPU", "target <= 10 % (wall)"],
        rows))  # fmt: skip
    small = shares[0]  # the shape of part 1
    cost = small["with"][1] - small["without"][1]  # CPU seconds per batch of this shape
    for r in creates:
        per = r["rec_wall"] / r["n"]
        lines += ["", f"Through the CLI (part 1, {r['n']} batches), recording one batch of "
                  f"{args.steps:,} steps took {per:.2f} s wall on average; the features' CPU "
                  f"cost for that shape in process, {cost * 1000:.1f} ms, is "
                  f"{cost / per:.1%} of it: {c.met(cost <= 0.1 * per)} (<= 10 %)."]
    if large is not None:
        lines += ["", c.table(
            ["ledger", "catch-up s", "dataset create of 1 batch, first call: s wall / CPU",
             "peak RSS MiB", "the same again: s wall / CPU", "target <= 5 s"],
            [[f"{large['entries']:,} entries", f"{large['catch_up']:.1f}",
              f"{large['first']['wall']:.2f} / {large['first']['cpu']:.2f}",
              f"{large['first']['rss'] / 2**20:.0f}",
              f"{large['again']['wall']:.2f} / {large['again']['cpu']:.2f}",
              c.met(large["first"]["wall"] <= 5.0)]])]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/datasetbench"))
    ap.add_argument("--batches", default="100,200")
    ap.add_argument("--steps", type=int, default=8400)
    ap.add_argument("--big-steps", type=int, default=1_000_000)
    ap.add_argument("--chat-episodes", type=int, default=20_000)
    ap.add_argument("--holdout", type=int, default=10)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-large", action="store_true", help="leave out part 3")
    ap.add_argument("--only-holdout", action="store_true", help="part 4 alone")
    ap.add_argument("--holdout-train", type=int, default=10)
    ap.add_argument("--holdout-scales", default="1,10,100")
    ap.add_argument("--holdout-batches", type=int, default=10,
                    help="part 4: batches of the holdout at each scale")
    ap.add_argument("--chat-holdout", type=int, default=200)
    ap.add_argument("--grouping", action="store_true",
                    help="part 4: also time the holdout's creation and a train set's dataset "
                         "create with the held side's grouped file made again first")
    ap.add_argument("--only-sealed", action="store_true", help="part 5 alone")
    ap.add_argument("--sealed-scales", default="1,10,100")
    ap.add_argument("--sealed-held", type=int, default=10,
                    help="part 5: episodes of a sealed batch (x batches at x)")
    ap.add_argument("--sealed-train", type=int, default=100,
                    help="part 5: episodes of a train batch (x batches at x)")
    ap.add_argument("--sealed-len", type=int, default=200, help="part 5: steps an episode")
    ap.add_argument("--write-doc", action="store_true", help="update docs/PERFORMANCE.md")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.dir = Path(tempfile.mkdtemp(prefix="datasetbench-"))
        args.batches, args.steps, args.big_steps, args.holdout = "1", 400, 2000, 1
        args.chat_episodes = 20
        args.entries, args.repeat = 110, 1  # 110: every kind of filler record (slots 97-99)
        args.holdout_train, args.holdout_scales, args.chat_holdout = 2, "1", 5
        args.holdout_batches = 2
        args.sealed_scales, args.sealed_held, args.sealed_train = "1", 2, 4
        args.sealed_len = 20
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    os.environ["TRAJLEDGER_STATE_DIR"] = str(args.dir / "state")  # never the user's own
    if args.only_sealed:
        text = render_sealed(sealed_run(args.dir / "sealed", args), args)
        print(text)
        if args.write_doc:
            c.write_section("dataset_bench_sealed", "## Dataset create (issue 21 item 1)", text)
        shutil.rmtree(args.dir, ignore_errors=True)
        return 0
    if args.only_holdout:
        rows = holdout_run(args.dir / "holdout", args)
        text = render_holdout(rows, args)
        if args.grouping:
            text += "\n\n" + render_grouping(rows)
        print(text)
        if args.write_doc:
            c.write_section("dataset_bench_holdout", "## Dataset create (issue 21 item 1)", text)
        shutil.rmtree(args.dir, ignore_errors=True)
        return 0
    creates = []
    for n in (int(x) for x in args.batches.split(",")):
        creates.append(create_run(args.dir / f"ledger-{n}", args, n))
        print(f"  {n} batches done", file=sys.stderr, flush=True)
    shares = share_run(args.dir / "share", args)
    print("  features' share done", file=sys.stderr, flush=True)
    large = None if args.skip_large else large_run(args.dir / "large", args)
    text = render(creates, shares, large, args)
    text += "\n\n" + render_holdout(holdout_run(args.dir / "holdout", args), args)
    text += "\n\n" + render_sealed(sealed_run(args.dir / "sealed", args), args)
    print(text)
    if args.write_doc:
        c.write_section("dataset_bench", "## Dataset create (issue 21 item 1)", text)
    if args.quick:
        shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
