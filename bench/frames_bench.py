"""Wide image frames recorded three ways, each a process under ``/usr/bin/time -v``: peak RSS
beside the bytes recorded, CPU beside wall (frames43, twenty-eighth round).

The case is out42's: frames of ``SIDE`` x ``SIDE`` x 3 ``uint8`` (1024: 3 MiB a frame; random,
so neither zstd nor Parquet's dictionary shrinks them), episodes of ``--frames`` frames (20),
at each scale of ``--scales`` episodes (1, 10: 1x and 10x the 20-frame case). For each scale,
in one ledger (the bench's keys and policy, `_common.new_ledger`, an environment without a
Gymnasium id):

1. **recorder**: a process that plays the episodes through
   `trajledger.integrations.gymnasium.LedgerRecorder` (``every`` ``--every`` episodes: a
   batch of ``--every`` x ``--frames`` frames);
2. **input**: a process that writes the same number of frames as a Parquet step file (row
   groups of ``--frames`` rows; ``obs`` a tensor column with its declared shape); not timed;
3. **pyarrow**: the baseline, a process that reads that file with pyarrow and writes it again
   with zstd (what any recording of it must do at least);
4. **record**: ``trajledger record`` of that file;
5. **dataset create**: ``trajledger dataset create`` over every batch of the scale.

Peak RSS is ``/usr/bin/time``'s "Maximum resident set size" of the command: the largest of
the peaks of its processes (a worker's counted alone, not added), each its own since its
``exec``. Not ``ru_maxrss`` of ``os.wait4`` on a process started by ``subprocess`` from a
large parent: Linux keeps the parent's high-water mark in the child's across ``vfork`` and
``exec`` (``--inherit`` shows it: a parent that touched 1.5 GiB, then freed it, starts
``python -c pass``: ``wait4`` says 1.5 GiB, ``/usr/bin/time`` 11 MiB).

``--quick``: tiny frames, one scale (checks the script runs; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import _common as c

RECORDER = """\
import sys
import gymnasium as gym
import numpy as np
from trajledger import Ledger
from trajledger.integrations.gymnasium import LedgerRecorder

root, episodes, frames, side, every = sys.argv[1], *map(int, sys.argv[2:6])


class Frames(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (side, side, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.rng, self.t = np.random.default_rng(0), 0

    def frame(self):
        return self.rng.integers(0, 256, (side, side, 3), dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self.frame(), {}

    def step(self, action):
        self.t += 1
        return self.frame(), 0.0, self.t >= frames, False, {}


ledger = Ledger.open(root)
env = LedgerRecorder(Frames(), ledger, env_ref="frames@1", policy="random",
                     signer=ledger.keys.signer("vendor"), every=every)
for _ in range(episodes):
    env.reset()
    done = False
    while not done:
        _, _, done, _, _ = env.step(0)
env.close()
print(" ".join(env.batches))
"""

INPUT = """\
import sys
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from trajledger.ledger.rollouts.schema import tensor_field

path, episodes, frames, side = sys.argv[1], *map(int, sys.argv[2:5])
rng = np.random.default_rng(1)
field = tensor_field("obs", pa.uint8(), (side, side, 3))
schema = pa.schema([pa.field("episode_id", pa.string()), pa.field("step", pa.int64()), field,
                    pa.field("action", pa.int64()), pa.field("reward", pa.float64()),
                    pa.field("terminated", pa.bool_()), pa.field("truncated", pa.bool_())])
with pq.ParquetWriter(path, schema) as out:
    for e in range(episodes):
        values = pa.array(rng.integers(0, 256, frames * side * side * 3, dtype=np.uint8))
        offsets = pa.array(np.arange(frames + 1, dtype=np.int32) * (side * side * 3))
        last = np.arange(frames) == frames - 1
        out.write_table(pa.table([
            pa.array([f"file-{e}"] * frames), pa.array(np.arange(frames)),
            pa.ListArray.from_arrays(offsets, values), pa.array(np.zeros(frames, np.int64)),
            pa.array(np.zeros(frames)), pa.array(last), pa.array(np.zeros(frames, bool))],
            schema=schema), row_group_size=frames)
"""

PYARROW = """\
import sys
import pyarrow.parquet as pq

pq.write_table(pq.read_table(sys.argv[1]), sys.argv[2], compression="zstd")
"""

INHERIT = """\
import os, subprocess, sys
import numpy as np

grown = np.ones(1536 << 20, dtype=np.uint8)  # 1.5 GiB touched, then freed
del grown
proc = subprocess.Popen([sys.executable, "-c", "pass"])
_, _, usage = os.wait4(proc.pid, 0)
timed = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", "pass"],
                       capture_output=True, text=True)
rss = int(re.search(r"Maximum resident set size \\(kbytes\\): (\\d+)", timed.stderr).group(1))
print(usage.ru_maxrss // 1024, rss // 1024)
"""

_TIME = {"user": r"User time \(seconds\): ([\d.]+)", "sys": r"System time \(seconds\): ([\d.]+)",
         "rss": r"Maximum resident set size \(kbytes\): (\d+)",
         "wall": r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)"}


def timed(argv: list[str]) -> dict[str, Any]:
    """``argv`` under ``/usr/bin/time -v``: wall and CPU seconds, peak RSS in MiB, stdout.

    Raises:
        RuntimeError: it failed.
    """
    p = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"{' '.join(argv[:4])}…: exit {p.returncode}\n{p.stderr[-3000:]}")
    got = {k: re.search(v, p.stderr) for k, v in _TIME.items()}
    if not all(got.values()):
        raise RuntimeError(f"no /usr/bin/time figures in: {p.stderr[-2000:]}")
    val = {k: m.group(1) for k, m in got.items() if m is not None}
    wall = 0.0
    for part in val["wall"].split(":"):
        wall = wall * 60 + float(part)
    return {"wall": wall, "cpu": float(val["user"]) + float(val["sys"]),
            "rss": int(val["rss"]) / 1024, "stdout": p.stdout}


def scale_run(work: Path, episodes: int, args: argparse.Namespace) -> dict[str, Any]:
    """One scale: the five processes (the module's docstring)."""
    root = work / f"ledger-{episodes}"
    ledger, keys = c.new_ledger(root, f"bench.local/frames-{episodes}")
    ledger.register_environment("frames", "1", key=keys["vendor"])
    py = sys.executable
    base = ["--ledger", str(root), "-q"]
    frame = args.side * args.side * 3
    out: dict[str, Any] = {"episodes": episodes, "frames": episodes * args.frames,
                           "mib": episodes * args.frames * frame / 2**20,
                           "batch_mib": args.every * args.frames * frame / 2**20,
                           "group_mib": args.frames * frame / 2**20}
    sizes = [str(episodes), str(args.frames), str(args.side)]
    batches: list[str] = []
    if importlib.util.find_spec("gymnasium") is not None:  # (an optional extra)
        out["recorder"] = timed([py, "-c", RECORDER, str(root), *sizes, str(args.every)])
        batches += out["recorder"]["stdout"].split()
    src, again = work / f"frames-{episodes}.parquet", work / f"zstd-{episodes}.parquet"
    timed([py, "-c", INPUT, str(src), *sizes])
    out["file_mib"] = src.stat().st_size / 2**20
    out["pyarrow"] = timed([py, "-c", PYARROW, str(src), str(again)])
    again.unlink()
    out["record"] = timed([py, "-c", c.CLI_MAIN, *base, "record", str(src), "--env", "frames@1",
                           "--policy", "random", "--key", "vendor"])
    batches += out["record"]["stdout"].split()
    src.unlink()
    refs = [x for b in batches for x in ("--batch", b)]
    out["create"] = timed([py, "-c", c.CLI_MAIN, *base, "dataset", "create", "frames", "--version",
                           "1", "--split", "train", *refs, "--key", "vendor"])
    for k in ("recorder", "pyarrow", "record", "create"):
        if k in out:
            out[k].pop("stdout")
    shutil.rmtree(root, ignore_errors=True)
    return out


def render(rows: list[dict[str, Any]], inherit: tuple[int, int] | None) -> str:
    """The runs as a markdown table."""
    lines = ["| frames (MiB) | largest batch / row group MiB | process | wall s | CPU-s "
             "| peak RSS MiB | peak / largest batch |", "|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        for k, name, big in (("recorder", "`LedgerRecorder`", r["batch_mib"]),
                             ("pyarrow", "pyarrow read + zstd write", r["group_mib"]),
                             ("record", "`trajledger record` of the Parquet", r["group_mib"]),
                             ("create", "`dataset create` of both", r["batch_mib"])):
            if k not in r:
                continue
            x = r[k]
            lines.append(f"| {r['frames']} ({r['mib']:,.0f}) | {big:,.0f} | {name} | "
                         f"{x['wall']:.2f} | {x['cpu']:.2f} | {x['rss']:,.0f} | "
                         f"{x['rss'] / big:.1f} |")
    if inherit is not None:
        lines.append(f"\n`--inherit`: `python -c pass` started from a parent that touched 1.5 "
                     f"GiB: `wait4`'s `ru_maxrss` {inherit[0]:,} MiB, `/usr/bin/time`'s "
                     f"{inherit[1]:,} MiB.")
    return "\n".join(lines) + f"\n\n{c.machine()}; load at the start {os.getloadavg()[0]:.1f}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--scales", default="1,10", help="episodes per run, comma separated")
    ap.add_argument("--frames", type=int, default=20, help="frames an episode")
    ap.add_argument("--side", type=int, default=1024, help="a frame's height and width")
    ap.add_argument("--every", type=int, default=1, help="episodes a recorder batch")
    ap.add_argument("--inherit", action="store_true", help="show wait4's inherited peak")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.scales, args.frames, args.side = "1", 4, 16
    if not Path("/usr/bin/time").exists():
        print("frames_bench needs /usr/bin/time (GNU time)", file=sys.stderr)
        return 3
    c.compile_package()
    inherit = None
    if args.inherit:
        p = subprocess.run([sys.executable, "-c", "import re\n" + INHERIT], capture_output=True,
                           text=True, check=True)
        a, b = p.stdout.split()
        inherit = (int(a), int(b))
    work = Path(tempfile.mkdtemp(prefix="frames-bench-"))
    try:
        rows = [scale_run(work, int(s), args) for s in args.scales.split(",")]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "inherit": inherit}, indent=2) + "\n")
    print(render(rows, inherit))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
