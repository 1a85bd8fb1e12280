"""``trajledger attest`` of a large directory against one hashing pass (issue 21 item 8).

Builds a directory of random files (default ~1 GiB in 200 files of varied sizes, nested, as
bench/sign_bench.py does), then in one run, with a warm page cache, each operation a process as
a user runs it, the kinds interleaved round by round:

- ``hash``: one hashing pass, the baseline: a Python process that reads every file in 1 MiB
  chunks into one buffer and SHA-256es it on one thread (what any tool that hashes must do);
- ``attest``: ``trajledger attest DIR --key K`` into a new ledger (made before the clock
  starts): every file copied into the object store and hashed on the way (durably: fsync), the
  manifest, the signed statement, the log entry;
- ``copy``: for reference, what storing costs without hashing: a process that copies the same
  files into a new directory (``shutil.copyfile``: an in-kernel copy, through the page cache) and
  fsyncs each. ``hash`` + ``copy`` is about what any tool pays that keeps a durable copy of
  bytes it hashed.

Dirty pages are written out (``os.sync``) before each operation, so none pays for another's
writes. Reported: median wall and CPU seconds (user + system of the process and its threads),
and CPU against ``hash`` (target for ``attest``: at most 1.5), then the floor any tool that
hashes and durably keeps the bytes pays (``hash`` + ``copy``) and what ``attest`` adds to it.

``--baseline DIR`` (a tree of another commit, its bytecode written) adds ``base``: the same
``attest`` with DIR's code (``PYTHONPATH``), in the same rounds, each into its own new ledger;
reported with the ratio ``attest`` / ``base`` taken round by round (pairs: load cancels).

Usage::

    python bench/attest_bench.py [--size-mb 1024] [--files 200] [--rounds 3] [--markdown]
                                 [--write-doc] [--shape spread|model] [--baseline DIR]

``--shape model`` (att47): a model's directory, a few large files and many small ones: five
shards sharing the size (``model-0000N-of-00005.safetensors``) and ``--files`` small files of
1-64 KiB (configs, a tokenizer's pieces, per-layer statistics) in a few directories, where the
per-file costs (a temp file, an fsync, a name) weigh as much as the bytes.
    python bench/attest_bench.py --quick      (tiny: tests/bench checks the script runs; the
                                               ledger made by commands run in this process)
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c
from sign_bench import make_tree

KINDS = ("hash", "attest", "copy")

HASH_PASS = """
import hashlib, sys
from pathlib import Path
buf = bytearray(1 << 20)
view = memoryview(buf)
for p in sorted(q for q in Path(sys.argv[1]).rglob("*") if q.is_file()):
    h = hashlib.sha256()
    with open(p, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
"""

COPY = """
import os, shutil, sys
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
for i, p in enumerate(sorted(q for q in src.rglob("*") if q.is_file())):
    out = dst / str(i)
    shutil.copyfile(p, out)
    fd = os.open(out, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
"""


def make_model_tree(root: Path, total: int, small: int, seed: int = 7) -> None:
    """Five large shards and ``small`` files of 1-64 KiB, ``total`` bytes in all."""
    rng = random.Random(seed)
    sizes = [rng.randint(1 << 10, 64 << 10) for _ in range(small)]
    for i, size in enumerate(sizes):
        path = root / ("tokenizer", "config", "stats")[i % 3] / f"part-{i % 7}" / f"f{i:05}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
    left = total - sum(sizes)
    if left < 5 << 20:
        raise SystemExit("--size-mb too small for --files")
    for i in range(5):
        size = left // (5 - i)
        left -= size
        with open(root / f"model-{i + 1:05}-of-00005.safetensors", "wb") as f:
            while size:
                n = min(size, 8 << 20)
                f.write(os.urandom(n))
                size -= n


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one process (CPU: user + system, all its threads)."""
    os.sync()
    w, p = time.perf_counter(), children_cpu()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall, cpu = time.perf_counter() - w, children_cpu() - p
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return wall, cpu


def run(tree: Path, work: Path, rounds: int, quick: bool = False,
        baseline: Path | None = None) -> dict[str, Any]:
    """Every kind, ``rounds`` times, interleaved. ``quick``: the ledger ``attest`` records into
    is made by the same commands run in this process. ``baseline``: ``base`` too."""
    env = dict(os.environ, TRAJLEDGER_STATE_DIR=str(work / "state"))
    env.pop("TRAJLEDGER_PASSPHRASE", None)
    kinds = KINDS + (("base",) if baseline is not None else ())
    cli = c.cli()
    for p in tree.rglob("*"):  # warm the page cache
        if p.is_file():
            p.read_bytes()
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for r in range(rounds):
        for kind in kinds[r % len(kinds):] + kinds[: r % len(kinds)]:
            where = work / f"{kind}-{r}"
            if kind == "base":
                assert baseline is not None
                base_env = dict(env, PYTHONPATH=str(baseline))
                main = [sys.executable, "-c", c.CLI_MAIN, "--ledger", str(where)]
                for args in (["init"], ["key", "new", "k", "--no-encrypt"]):
                    subprocess.run([*main, *args], env=base_env, capture_output=True,
                                   check=True)  # fmt: skip
                got[kind].append(timed([*main, "attest", str(tree), "--key", "k"], base_env))
            elif kind == "hash":
                got[kind].append(timed([sys.executable, "-c", HASH_PASS, str(tree)], env))
            elif kind == "copy":
                where.mkdir()
                got[kind].append(timed([sys.executable, "-c", COPY, str(tree), str(where)], env))
            else:
                for args in (["init"], ["key", "new", "k", "--no-encrypt"]):
                    if quick:
                        c.run_cli(["--ledger", str(where), *args], here=True, env=env)
                    else:
                        subprocess.run([*cli, "--ledger", str(where), *args], env=env,
                                       capture_output=True, check=True)  # fmt: skip
                got[kind].append(timed(
                    [*cli, "--ledger", str(where), "attest", str(tree), "--key", "k"], env
                ))  # fmt: skip
            shutil.rmtree(where, ignore_errors=True)
    size = sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
    files = sum(1 for p in tree.rglob("*") if p.is_file())
    out: dict[str, Any] = {"bytes": size, "files": files, "rounds": rounds, "machine": c.machine()}
    _, base_cpu = c.median_wall_cpu(got["hash"])
    for kind in kinds:
        wall, cpu = c.median_wall_cpu(got[kind])
        out[kind] = {"wall_s": wall, "cpu_s": cpu, "cpu_x_hash": cpu / base_cpu,
                     "all": got[kind]}  # fmt: skip
    if baseline is not None:
        pairs = [a[1] / b[1] for a, b in zip(got["attest"], got["base"], strict=True)]
        out["pairs"] = {"baseline": str(baseline), "cpu_ratios": pairs,
                        "cpu_ratio": c.median(pairs)}
    return out


def markdown(r: dict[str, Any]) -> str:
    names = {
        "hash": "one hashing pass (1 thread, the baseline)",
        "attest": "`trajledger attest DIR --key K`",
        "copy": "copy + fsync each file, no hashing (`shutil.copyfile`: in the kernel)",
    }
    rows = []
    for kind in KINDS:
        k = r[kind]
        target = c.met(k["cpu_x_hash"] <= 1.5) if kind == "attest" else ""
        rows.append([names[kind], f"{k['wall_s']:.2f}", f"{k['cpu_s']:.2f}",
                     f"{k['cpu_x_hash']:.2f}", target])  # fmt: skip
    head = (
        f"`{c.command_line()}`: {r['files']} files, {r['bytes']:,} bytes, warm page cache, "
        f"dirty pages written out before each operation; each operation a process, "
        f"{r['rounds']} interleaved rounds, medians. CPU is user + system time of the process "
        f"and its threads. {r['machine']}.\n\n"
    )
    if "base" in r:
        k = r["base"]
        rows.append([f"`attest` with {r['pairs']['baseline']}'s code (the pair's baseline)",
                     f"{k['wall_s']:.2f}", f"{k['cpu_s']:.2f}", f"{k['cpu_x_hash']:.2f}", ""])
    floor = 1 + r["copy"]["cpu_x_hash"]
    tail = (
        f"\n\nThe floor of any tool that hashes and durably keeps the bytes (the hashing pass plus "
        f"the copy row): {floor:.2f} x the hashing pass; `attest` less the hashing pass "
        f"{r['attest']['cpu_s'] - r['hash']['cpu_s']:.2f} CPU-s against the copy's "
        f"{r['copy']['cpu_s']:.2f}."
    )
    if "pairs" in r:
        ratios = r["pairs"]["cpu_ratios"]
        tail += (f" `attest` / baseline, CPU, round by round: median {r['pairs']['cpu_ratio']:.2f}"
                 f" ({', '.join(f'{x:.2f}' for x in ratios)}).")
    return head + c.table(
        ["operation", "wall s", "CPU s", "CPU x hashing pass", "target <= 1.5"], rows
    ) + tail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--write-doc", action="store_true", help="update docs/PERFORMANCE.md")
    ap.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a tree of another commit: its attest in the same rounds")
    ap.add_argument("--shape", choices=("spread", "model"), default="spread",
                    help="spread: sizes over ~3 decades (default); model: 5 shards and "
                         "--files small files")
    args = ap.parse_args()
    if args.quick:
        args.size_mb, args.files, args.rounds = (8, 20, 1) if args.shape == "model" else (1, 4, 1)
    work = Path(args.dir or tempfile.mkdtemp(prefix="attest-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    tree = work / "tree"
    try:
        if not tree.is_dir():
            tree.mkdir()
            if args.shape == "model":
                make_model_tree(tree, args.size_mb << 20, args.files)
            else:
                make_tree(tree, args.size_mb << 20, args.files)
        result = run(tree, work, args.rounds, args.quick,
                     None if args.quick else args.baseline)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    c.emit(args, result, markdown(result), "attest_bench", "## Attest")


if __name__ == "__main__":
    main()
