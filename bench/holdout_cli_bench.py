"""The holdout checks through the command line, first runs included (issue 21 item 1).

For each scale of ``--scales``, with or without a clock column (``--clock``: every observation
carries an 18th value, the step number / 500, as Gymnasium's ``TimeAwareObservation`` adds,
so every window has a clock), in a new ledger: 10 held batches of scale x ``--steps`` steps
and 10 train batches of ``--steps`` steps recorded in-process; then, each a ``trajledger``
process (`dataset_bench.trajledger`: wall, the child's CPU, its peak RSS), the holdout's own
``dataset create`` (it computes and groups the held side) and three ``dataset create`` of the
10 train batches (the first computes their windows; the others read them kept).

``--baseline DIR`` (a worktree of another commit, e.g. ``git worktree add /tmp/base REV``)
runs the same in turn on that tree (``PYTHONPATH=DIR``): the baseline of the same run. The
bound of a train create is issue 21's: 1 s + 5 ms a batch (1.05 s for 10).

Usage::

    python bench/holdout_cli_bench.py [--scales 10,100] [--clock] [--baseline DIR]
        [--steps 8400] [--dir /tmp/holdoutcli] [--quick]

``--quick`` (one scale of 1, 400 steps, the creates run in this process) only checks the
script runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def table(steps: int, seed: int, clock: bool) -> Any:
    """`_common.steps_table`, with the step number / 500 appended to each observation."""
    import _common as c
    import numpy as np
    import pyarrow as pa

    t = c.steps_table(steps, seed)
    if not clock:
        return t
    obs = t.column("obs").combine_chunks()
    flat = obs.values.to_numpy().reshape(-1, obs.type.list_size)
    step = t.column("step").to_numpy().astype(np.float32) / 500
    both = np.hstack((flat, step[:, None])).reshape(-1)
    return t.set_column(t.schema.get_field_index("obs"), "obs",
                        pa.FixedSizeListArray.from_arrays(pa.array(both), flat.shape[1] + 1))


def one(root: Path, scale: int, steps: int, clock: bool, here: bool) -> list[list[float]]:
    """The four creates on a new ledger at ``root``: ``[wall, CPU, peak MB]`` each."""
    import _common as c
    import dataset_bench as d

    ledger, _keys = c.new_ledger(root, f"bench.local/holdoutcli-{scale}-{int(clock)}")
    hold = [ledger.record_batch(table(scale * steps, 900_000 + i, clock), env="bench-env@1",
                                policy="random", key="vendor").digest for i in range(10)]
    train = [ledger.record_batch(table(steps, 5000 + i, clock), env="bench-env@1",
                                 policy="random", key="vendor").digest for i in range(10)]
    ledger.close()
    base = ["--ledger", str(root), "-q", "dataset", "create"]
    rows = [d.trajledger(*base, "holdout", "--version", "1", "--split", "holdout",
                         *[x for b in hold for x in ("--batch", b)], "--key", "vendor",
                         here=here)]
    for k in range(3):
        rows.append(d.trajledger(*base, f"train-{k}", "--version", "1", "--split", "train",
                                 *[x for b in train for x in ("--batch", b)], "--key", "vendor",
                                 here=here))
    return [[round(r["wall"], 2), round(r["cpu"], 2), round(r["rss"] / 2**20)] for r in rows]


def in_tree(tree: Path, root: Path, scale: int, args: argparse.Namespace) -> list[list[float]]:
    """`one` in a process whose trajledger and bench helpers are ``tree``'s."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # Run from outside every tree: ``python -c`` (each create) puts its working directory
    # first on sys.path, before PYTHONPATH, so a checkout there would be the one measured.
    out = subprocess.run([sys.executable, str(HERE), "--one", str(root), str(scale),
                          str(args.steps), str(int(args.clock)), str(tree / "bench")],
                         env=env, check=True, capture_output=True, text=True,
                         cwd=root.parent).stdout
    rows: list[list[float]] = json.loads(out.strip().splitlines()[-1])
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--one"]:  # a child: ROOT SCALE STEPS CLOCK BENCH
        sys.path.insert(0, argv[5])
        print(json.dumps(one(Path(argv[1]), int(argv[2]), int(argv[3]), argv[4] == "1",
                             False)))
        return 0
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", default="10,100")
    ap.add_argument("--steps", type=int, default=8400)
    ap.add_argument("--clock", action="store_true")
    ap.add_argument("--baseline", type=Path, help="a worktree of the commit to compare with")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/holdoutcli"))
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE.parent))
    import _common as c

    if args.quick:
        args.dir = Path(tempfile.mkdtemp(prefix="holdoutcli-"))
        args.scales, args.steps = "1", 400
    os.environ["TRAJLEDGER_STATE_DIR"] = str(args.dir / "state")  # never the user's own
    trees = ([("baseline", args.baseline.resolve())] if args.baseline else []) + [
        ("this tree", HERE.parent.parent)]
    body = []
    for scale in (int(x) for x in args.scales.split(",")):
        for label, tree in trees:
            root = args.dir / f"ledger-{scale}"
            shutil.rmtree(root, ignore_errors=True)
            args.dir.mkdir(parents=True, exist_ok=True)
            rows = (one(root, scale, args.steps, args.clock, True) if args.quick
                    else in_tree(tree, root, scale, args))
            shutil.rmtree(root, ignore_errors=True)
            body.append([f"{scale}x", "clock" if args.clock else "no clock", label,
                         *("{:.2f} / {:.2f} / {:,}".format(*r) for r in rows)])
            print(f"  {scale}x {label} done", file=sys.stderr, flush=True)
    print(f"`{c.command_line()}`; {c.machine()}.\n")
    print(c.table(["holdout", "data", "tree", "the holdout's own create: s wall / CPU-s / MB",
                   "train, 1st", "train, 2nd", "train, 3rd"], body))
    shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
