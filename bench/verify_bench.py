"""Benchmark: ``verify`` of a checkpoint over ~1,000 batches (~1 GB), every blob re-hashed.

Target (issue 9): ``verify`` with its default re-hash of every data blob runs at no less than
0.8 x the throughput of one thread of ``hashlib.sha256`` over the same files, on about 1 GB in
about 1,000 batches, both in-process and through the command line; the command line's start-up
is measured and stated.

Builds a ledger (kept between runs with ``--keep``) through the public API: the bench policy,
one environment, ``--batches`` rollout batches of ``--steps`` steps (obs float32[17], action
float32[6], random: Parquet cannot shrink them, about 100 bytes a step), one train dataset of
all of them approved 2-of-2, and a checkpoint whose SLSA provenance names that dataset, so that
``verify CK`` walks every batch. The checkpoint is recorded as ``trajledger train`` records one,
with a 64 KiB stand-in weights file: training on 1 GB is not what is measured.

Then, in one run, ``--repeat`` rounds of (warm page cache, the order fixed):

- baseline: one thread of ``hashlib.sha256`` over exactly the blobs ``verify`` re-hashes, each
  read with ``readinto`` into one reused 1 MiB buffer (the fair floor of one core);
- ``Ledger.open(DIR).verify(CK)`` in this process (open, policy, the trust state brought up to
  date, every record, signature and blob);
- the same with ``skip_data=True`` (sizes only: what verification costs besides hashing);
- ``trajledger --ledger DIR verify CK`` as a process;
- ``trajledger --version`` as a process (the command line's start-up, median of 10);
- the baseline again on one thread per core: not a target, it shows how much of the other
  cores the run could get on a shared machine.

The first ``trust_state()`` of the user (it reads the whole log once) is timed separately as
the catch-up and excluded from the rounds.

``--shape issue21`` measures issue 21's lineage instead (1,000 batches of 970 steps with obs
float32[256], about 0.85 MB each: `SHAPES`), ``--shape both`` one after the other, each with
its own baseline rounds; each also times ``verify --skip-data`` as a process (the walk, against
issue 21's 0.2 ms per record) and the signature checks of the walked records alone.

Usage::

    python bench/verify_bench.py [--shape bench|issue21|both] [--dir /tmp/verifybench]
        [--batches 1000] [--steps 12500] [--repeat 3] [--keep] [--write-doc] [--quick]

``--quick`` (2 batches of 300 steps, one round, one start-up, a temporary directory) only
checks the script runs; ``--write-doc`` puts the results into docs/PERFORMANCE.md (block
``verify_bench_SHAPE``).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _common as c

CHUNK = 1 << 20


SHAPES = {
    # name: (batches, steps per batch, obs width, default directory)
    "bench": (1000, 12500, 17, Path("/tmp/verifybench")),
    "issue21": (1000, 970, 256, Path("/tmp/verifybench-issue21")),
}
"""The lineages measured: the project's own (about 1 MB of obs float32[17] per batch) and
issue 21's (about 0.85 MB of obs float32[256] per batch: fewer, wider steps)."""


def table(steps: int, seed: int, obs: int) -> Any:
    """`_common.steps_table` with obs float32[``obs``] (random, so Parquet cannot shrink it)."""
    import numpy as np
    import pyarrow as pa

    t = c.steps_table(steps, seed)
    if obs == 17:
        return t
    rng = np.random.default_rng(seed + 1)
    wide = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.random(steps * obs, dtype=np.float32)), obs)
    return t.set_column(t.schema.get_field_index("obs"), "obs", wide)


def build(root: Path, batches: int, steps: int, obs: int = 17) -> str:
    """Record the ledger; returns the checkpoint's digest."""
    from trajledger.ledger.record import record_files
    from trajledger.ledger.signing import canonical_json
    from trajledger.runner.train import BUILD_TYPE, BUILDER_ID, dependency_lock_digest
    from trajledger.verify import predicates
    from trajledger.verify.predicates import Provenance, ResourceDescriptor

    ledger, keys = c.new_ledger(root, "bench.local/verify")
    digests = []
    t0 = time.perf_counter()
    for b in range(batches):
        res = ledger.record_batch(table(steps, b, obs), env="bench-env@1", policy="random",
                                  signer=keys["vendor"], name=f"batch-{b}")
        digests.append(res.digest)
        if b % 100 == 99:
            print(f"  {b + 1} batches recorded ({time.perf_counter() - t0:.0f} s)",
                  file=sys.stderr)
    ds = ledger.create_dataset("bench", "1", "train", digests, key=keys["vendor"])
    for k in ("a", "b"):
        ledger.approve("bench@1", key=keys[k], expires="3650d")
    metrics = {"loss": 0.0}
    provenance = Provenance(
        build_type=BUILD_TYPE,
        external_parameters={"name": "bench-ckpt", "version": "1", "dataset": ds.digest,
                             "purpose": "train", "trainer": "none", "config": {}, "seed": 0},
        resolved_dependencies=(
            ResourceDescriptor.of("dataset:bench@1", ds.digest, role="dataset",
                                  logIndex=ds.recorded.index),
            ResourceDescriptor.of("dependency-lock", dependency_lock_digest(),
                                  role="dependency-lock"),
        ),
        builder_id=BUILDER_ID,
        byproducts=(ResourceDescriptor(
            name="metrics", content=base64.b64encode(canonical_json(metrics)).decode("ascii"),
            media_type="application/json", annotations=metrics),),
    ).to_predicate()
    weights = root / "tmp" / "weights.bin"
    weights.parent.mkdir(exist_ok=True)
    weights.write_bytes(os.urandom(1 << 16))
    ckpt = record_files(ledger, {"weights.bin": weights}, keys["trainer"],
                        predicates.SLSA_PROVENANCE_V1, provenance, kind="checkpoint",
                        name="bench-ckpt@1", inline_manifest=False, file_subjects=True)
    return ckpt.digest


def rehashed_blobs(root: Path, digest: str) -> tuple[list[Path], int, int]:
    """The files ``verify`` re-hashes (every blob of every manifest in the lineage), the
    number of rollout batches in it and of the artifacts the walk verifies (each its identity
    record, manifest and status; the checkpoint included)."""
    from trajledger import Ledger
    from trajledger.verify.kinds import KINDS
    from trajledger.verify.manifest import Manifest
    from trajledger.verify.strict_json import load_object

    ledger = Ledger.open(root)
    report = ledger.verify(digest, skip_data=True)
    paths = []
    for node in report.nodes.values():
        if node.kind in KINDS and KINDS[node.kind].files:
            manifest = Manifest.from_json(load_object(ledger.store.get(node.id), "manifest"))
            paths += [ledger.store.path_of(f.digest) for f in manifest.files]
    batches = sum(1 for n in report.nodes.values() if n.kind == "rollout-batch")
    return paths, batches, sum(1 for n in report.nodes.values() if n.kind != "log")


def hashlib_baseline(paths: list[Path]) -> float:
    """One thread, ``readinto`` into one reused buffer; returns seconds."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    t = time.perf_counter()
    for p in paths:
        h = hashlib.sha256()
        with open(p, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                h.update(view[:n])
    return time.perf_counter() - t


def hashlib_parallel(paths: list[Path]) -> float:
    """The same on one thread per core (at least 2), each with its own reused buffer: how much
    of the other cores this run could get. Returns seconds."""
    from concurrent.futures import ThreadPoolExecutor

    local = threading.local()

    def one(p: Path) -> None:
        buf = getattr(local, "buf", None)
        if buf is None:
            buf = local.buf = bytearray(CHUNK)
        view = memoryview(buf)
        h = hashlib.sha256()
        with open(p, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                h.update(view[:n])

    t = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        list(pool.map(one, paths))
    return time.perf_counter() - t


def signature_checks(root: Path, digest: str) -> tuple[int, Any]:
    """The envelopes of the records the walk verifies, parsed, and a function that checks
    each one's signatures by the policy's keys (what the walk cannot skip): returns the count
    and that function."""
    from trajledger import Ledger
    from trajledger.verify.dsse import Envelope, pae

    ledger = Ledger.open(root)
    policy, state = ledger.policy(), ledger.trust_state()
    keys = {k.keyid: k for name in ("producer", "trainer", "approver")
            for k in policy.role(name).keys}
    report = ledger.verify(digest, skip_data=True)
    signed = []
    for node in report.nodes.values():
        if node.index is None:
            continue
        entry = state.entry(node.index)
        assert entry is not None
        env = Envelope.from_bytes(ledger.store.get(entry.envelope), "envelope")
        message = pae(env.payload_type, env.payload)
        signed += [(keys[s.keyid], s.sig, message) for s in env.signatures if s.keyid in keys]

    def check() -> None:
        for key, sig, message in signed:
            if not key.verify(sig, message):
                raise RuntimeError("a signature does not verify")

    return len(signed), check


def verify_in_process(root: Path, digest: str, skip_data: bool) -> int:
    """``Ledger.open(root).verify(digest)``; returns the number of checks.

    Raises:
        RuntimeError: a check failed.
    """
    from trajledger import Ledger

    report = Ledger.open(root).verify(digest, skip_data=skip_data)
    checks, failed = report.count()
    if failed:
        raise RuntimeError(f"verify failed: {report.failures()[:5]}")
    return checks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=[*SHAPES, "both"], default="bench",
                    help="the lineage measured (both: one after the other, each with its own "
                    "baseline rounds)")
    ap.add_argument("--dir", type=Path, help="the ledger (default per shape, /tmp/verifybench*)")
    ap.add_argument("--batches", type=int, help="batches (default per shape: 1000)")
    ap.add_argument("--steps", type=int, help="steps per batch (default per shape)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="reuse the ledger in --dir if it exists")
    ap.add_argument("--write-doc", action="store_true", help="update docs/PERFORMANCE.md")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args(argv)
    shapes = list(SHAPES) if args.shape == "both" else [args.shape]
    if args.dir is not None and len(shapes) > 1:
        ap.error("--dir names one ledger: give --shape bench or issue21 with it")
    for shape in shapes:
        batches, steps, obs, root = SHAPES[shape]
        root = args.dir or root
        batches = args.batches or batches
        steps = args.steps or steps
        repeat = args.repeat
        if args.quick:
            root = Path(tempfile.mkdtemp(prefix="verifybench-"))
            batches, steps, repeat = 2, 300, 1
        text = run_shape(shape, root, batches, steps, obs, repeat, keep=args.keep,
                         quick=args.quick)
        print(text)
        if args.write_doc:
            c.write_section(f"verify_bench_{shape}", "## Verification", text)
    return 0


def run_shape(shape: str, root: Path, batches: int, steps: int, obs: int, repeat: int, *,
              keep: bool, quick: bool) -> str:
    """Build (or reuse) the ledger of one shape, measure it; returns the rendered section."""
    # The bench's own user state (never the user's): the catch-up is measured from empty.
    state = root.parent / (root.name + "-state")
    os.environ["TRAJLEDGER_STATE_DIR"] = str(state)
    marker = root / "bench-checkpoint"
    if keep and marker.is_file():
        digest = marker.read_text().strip()
    else:
        t = time.perf_counter()
        digest = build(root, batches, steps, obs)
        marker.write_text(digest)
        print(f"built in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    shutil.rmtree(state, ignore_errors=True)
    results = measure(root, digest, repeat, 1 if quick else 10)
    results["shape"] = shape
    results["obs"] = obs
    if quick:
        shutil.rmtree(root)
        shutil.rmtree(state)
    return render(results)


def measure(root: Path, digest: str, repeat: int, startups: int) -> dict[str, Any]:
    """Run every operation ``repeat`` times (the start-up ``startups`` times)."""
    from trajledger import Ledger

    ledger = Ledger.open(root)
    catch_up = c.timed(ledger.trust_state)
    entries = ledger.log.size
    blobs, batches, records = rehashed_blobs(root, digest)
    total = sum(p.stat().st_size for p in blobs)
    signatures, check_signatures = signature_checks(root, digest)
    hashlib_baseline(blobs)  # warm the page cache
    ops = {
        "base": lambda: hashlib_baseline(blobs),
        "parallel": lambda: hashlib_parallel(blobs),
        "api": lambda: verify_in_process(root, digest, skip_data=False),
        "api_skip": lambda: verify_in_process(root, digest, skip_data=True),
        "cli": lambda: c.run_cli(["--ledger", str(root), "verify", digest]),
        "cli_skip": lambda: c.run_cli(["--ledger", str(root), "verify", "--skip-data", digest]),
        "signatures": check_signatures,
    }
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in ops}
    for _ in range(repeat):  # interleaved: each round's baseline runs next to its verifies
        for name, op in ops.items():
            runs[name].append(c.wall_cpu(op))
    startup = [c.run_cli(["--version"]) for _ in range(startups)]
    return {
        "batches": batches, "records": records, "blobs": len(blobs), "bytes": total,
        "entries": entries, "signatures": signatures,
        "checks": verify_in_process(root, digest, skip_data=False), "catch_up": catch_up,
        "repeat": repeat, "startup": c.median(startup), "runs": runs,
    }


def render(r: dict[str, Any]) -> str:
    """The section: header, the table, the targets. Ratios are medians of each round's own
    ratio (its baseline ran next to it), so load that changes between rounds cancels out."""
    gb = r["bytes"] / 1e9
    runs = r["runs"]
    wall = {k: c.median([w for w, _ in v]) for k, v in runs.items()}
    cpu = {k: c.median([p for _, p in v]) for k, v in runs.items()}

    def ratio(name: str) -> float:
        return c.median([b[0] / o[0] for b, o in zip(runs["base"], runs[name], strict=True)])

    def cpu_ratio(name: str) -> float:
        return c.median([b[1] / o[1] for b, o in zip(runs["base"], runs[name], strict=True)])

    def row(label: str, name: str, data: bool = True) -> list[str]:
        return [label, f"{wall[name]:.2f}", f"{cpu[name]:.2f}",
                f"{gb / wall[name]:.2f}" if data else "", f"{ratio(name):.2f}" if data else "",
                f"{cpu_ratio(name):.2f}" if data else ""]

    startup = r["startup"]
    records = r["records"]
    walk_api = 1000 * wall["api_skip"] / records
    walk_cli = 1000 * (wall["cli_skip"] - startup) / records
    walk_cpu = 1000 * cpu["api_skip"] / records
    sig_cpu = 1000 * cpu["signatures"] / records
    no_startup = c.median([b[0] / (o[0] - startup)
                           for b, o in zip(runs["base"], runs["cli"], strict=True)])
    lines = [
        f"`{c.command_line()}`; {c.machine()}.",
        "",
        f"Shape `{r['shape']}` (obs float32[{r['obs']}]): "
        f"{r['batches']:,} batches + a checkpoint ({records:,} artifacts walked): "
        f"{r['blobs']:,} blobs "
        f"re-hashed, {r['bytes']:,} bytes ({gb:.2f} GB), {r['entries']:,} log entries, "
        f"{r['checks']:,} checks, none failed; median of {r['repeat']} interleaved rounds, warm "
        "page cache. CPU is user + system time of every thread (and of the child process).",
        "",
        c.table(
            ["operation", "wall s", "CPU s", "GB/s", "throughput x hashlib",
             "CPU of hashlib / CPU"],
            [
                row("hashlib.sha256, 1 thread, readinto a reused 1 MiB buffer (baseline)",
                    "base"),
                row("the same on one thread per core (what the machine gave this run)",
                    "parallel"),
                row("`Ledger.verify(CK)` in-process (default: every blob re-hashed)", "api"),
                row("`trajledger verify CK` as a process", "cli"),
                row("`Ledger.verify(CK, skip_data=True)` (sizes only: the walk)", "api_skip",
                    False),
                row("`trajledger verify --skip-data CK` as a process", "cli_skip", False),
                row(f"the {r['signatures']:,} signature checks alone (each record's "
                    "envelope by the policy's key: what no fast path skips)", "signatures",
                    False),
                ["`trajledger --version` as a process (start-up)", f"{startup:.2f}", "", "", "",
                 ""],
            ],
        ),
        "",
        f"First `trust_state()` of the user (reads the whole log of {r['entries']:,} entries "
        f"once; excluded above): {r['catch_up']:.2f} s.",
        "",
        c.table(
            ["target (issues 9, 21)", "measured", ""],
            [
                ["in-process >= 0.8", f"{ratio('api'):.2f}", c.met(ratio("api") >= 0.8)],
                ["command line >= 0.8", f"{ratio('cli'):.2f}", c.met(ratio("cli") >= 0.8)],
                ["in-process, in CPU time (hashlib's CPU / verify's CPU)",
                 f"{cpu_ratio('api'):.2f}", ""],
                ["command line, in CPU time", f"{cpu_ratio('cli'):.2f}", ""],
                ["command line, its start-up taken off", f"{no_startup:.2f}",
                 f"start-up {1000 * startup:.0f} ms"],
                ["the walk in-process <= 0.2 ms per artifact", f"{walk_api:.3f} ms",
                 c.met(walk_api <= 0.2)],
                ["the walk as a process, start-up taken off, <= 0.2 ms per artifact",
                 f"{walk_cli:.3f} ms", c.met(walk_cli <= 0.2)],
                ["the walk in-process, CPU per artifact", f"{walk_cpu:.3f} ms",
                 f"of which signature checks {sig_cpu:.3f} ms"],
            ],
            "lrl",
        ),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
