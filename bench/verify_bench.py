"""Benchmark: verifying a checkpoint's lineage over ~1,000 batches (~1 GB of rollout data).

Builds a ledger (kept between runs with ``--keep``): one environment, ``--batches`` rollout
batches of ``--steps`` steps each (obs float32[17], action float32[6]: random, so Parquet cannot
shrink them), one train dataset of all batches approved 2-of-2, and a checkpoint whose SLSA
provenance names that dataset. The checkpoint is recorded through the same path as
``trajledger train`` but with a stand-in weights file: training a model on 1 GB is not what is
measured here.

Then, in the same run:

- baseline: one thread of ``hashlib.sha256`` over every data blob (the physical limit of one
  core reading and hashing the bytes);
- ``verify`` without re-hashing data (signatures, log inclusion, manifests, approvals, presence
  of every blob): target < 2 s for 1,000 batches;
- ``verify --deep`` (every data blob re-hashed, on both cores): target throughput >= 0.8 x the
  single-thread baseline.

Usage: ``python bench/verify_bench.py [--dir /tmp/verifybench] [--batches 1000] [--steps 6000]
[--repeat 3] [--markdown] [--keep]``
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa


def build(root: Path, batches: int, steps: int) -> tuple[str, Path, list[Path]]:
    from trajledger.ledger.artifacts import (
        batch_files,
        create_dataset,
        record_batch,
        register_environment,
    )
    from trajledger.ledger.home import Ledger
    from trajledger.ledger.record import record_files
    from trajledger.ledger.status import approve
    from trajledger.runner.train import BUILD_TYPE, BUILDER_ID, dependency_lock_digest
    from trajledger.verify import predicates

    ledger = Ledger.init(root, origin="bench.local/verify")
    keys = {n: ledger.keys.create(n, encrypt=False) for n in ("vendor", "a", "b", "trainer")}
    policy = root / "policy.toml"
    policy.write_text(
        f"""name = "bench"
[roles.producer]
keys = ["keys/vendor.pub"]
[roles.approver]
keys = ["keys/a.pub", "keys/b.pub"]
threshold = 2
[roles.trainer]
keys = ["keys/trainer.pub"]
[roles.log]
vkeys = ["{ledger.log.vkey}"]
"""
    )
    register_environment(ledger, "bench-env", "1", keys["vendor"], gymnasium_id="CartPole-v1")
    rng = np.random.default_rng(0)
    digests = []
    episode_len = 200
    t0 = time.perf_counter()
    for b in range(batches):
        n = steps
        ep = np.arange(n) // episode_len
        step = np.arange(n) % episode_len
        last = (step == episode_len - 1) | (np.arange(n) == n - 1)
        table = pa.table(
            {
                "episode_id": pa.array([f"b{b}-e{e}" for e in ep]),
                "step": pa.array(step, pa.int64()),
                "obs": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 17, dtype=np.float32)), 17),
                "action": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 6, dtype=np.float32)), 6),
                "reward": pa.array(rng.random(n)),
                "terminated": pa.array(last),
                "truncated": pa.array(np.zeros(n, dtype=bool)),
            }
        )
        res = record_batch(ledger, table, env="bench-env@1", policy="random", signer=keys["vendor"], name=f"batch-{b}")
        digests.append(res.recorded.digest)
        if b % 100 == 99:
            print(f"  {b + 1} batches recorded ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    ds = create_dataset(ledger, "bench", "1", "train", digests, keys["vendor"])
    for k in ("a", "b"):
        approve(ledger, "bench@1", keys[k])
    weights = root / "tmp" / "weights.bin"
    weights.parent.mkdir(exist_ok=True)
    weights.write_bytes(os.urandom(1 << 16))
    provenance = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"name": "bench-ckpt", "version": "1", "dataset": ds.recorded.digest, "trainer": "none", "config": {}, "seed": 0},
            "internalParameters": {},
            "resolvedDependencies": [
                {"name": "dataset:bench@1", "digest": {"sha256": ds.recorded.digest[7:]}, "annotations": {"role": "dataset", "logIndex": ds.recorded.index}},
                {"name": "dependency-lock", "digest": {"sha256": dependency_lock_digest()[7:]}, "annotations": {"role": "dependency-lock"}},
            ],
        },
        "runDetails": {"builder": {"id": BUILDER_ID}, "metadata": {}, "byproducts": []},
    }
    ckpt = record_files(
        ledger, {"weights.bin": weights}, keys["trainer"], predicates.SLSA_PROVENANCE_V1, provenance,
        kind="checkpoint", name="bench-ckpt@1", inline_manifest=False,
    )
    blobs = [ledger.store.path_of(d) for b in digests for d in batch_files(ledger, b).values()]
    return ckpt.digest, policy, blobs


def hashlib_baseline(paths: list[Path]) -> float:
    t = time.perf_counter()
    for p in paths:
        h = hashlib.sha256()
        with open(p, "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return time.perf_counter() - t


def verify_once(root: Path, digest: str, policy_file: Path, deep: bool) -> tuple[float, int, int]:
    from trajledger.verify.evidence import LedgerDirEvidence
    from trajledger.verify.lineage import LineageVerifier
    from trajledger.verify.policy import TrustPolicy

    t = time.perf_counter()
    policy = TrustPolicy.from_toml(policy_file.read_bytes(), policy_file.parent)
    report = LineageVerifier(LedgerDirEvidence(root), policy, deep=deep).verify(digest)
    elapsed = time.perf_counter() - t
    n, failed = report.count()
    return elapsed, n, failed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/verifybench"))
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="reuse the ledger in --dir if it exists")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    marker = args.dir / "bench-checkpoint"
    if args.keep and marker.is_file():
        from trajledger.ledger.artifacts import batch_files
        from trajledger.ledger.catalog import Catalog
        from trajledger.ledger.home import Ledger

        ledger = Ledger.open(args.dir)
        digest = marker.read_text().strip()
        policy = args.dir / "policy.toml"
        blobs = [ledger.store.path_of(d) for i in Catalog(ledger).by_kind("rollout-batch") for d in batch_files(ledger, i.digest).values()]
    else:
        shutil.rmtree(args.dir, ignore_errors=True)
        t = time.perf_counter()
        digest, policy, blobs = build(args.dir, args.batches, args.steps)
        marker.write_text(digest)
        print(f"built in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    total = sum(p.stat().st_size for p in blobs)
    base, shallow, deep = [], [], []
    checks = failed = 0
    for _ in range(args.repeat):
        base.append(hashlib_baseline(blobs))
        s, checks, failed = verify_once(args.dir, digest, policy, deep=False)
        shallow.append(s)
        d, checks_deep, failed_deep = verify_once(args.dir, digest, policy, deep=True)
        deep.append(d)
        failed += failed_deep
    b, s, d = statistics.median(base), statistics.median(shallow), statistics.median(deep)
    gib = total / (1 << 30)
    rows = [
        ("hashlib sha256 over the data blobs, 1 thread", b, gib / b, 1.0),
        ("verify checkpoint lineage (no data re-hash)", s, None, s / b),
        ("verify --deep (every data blob re-hashed)", d, gib / d, d / b),
    ]
    print(f"{len(blobs)} data blobs, {total} bytes ({gib:.2f} GiB), {checks} checks, {failed} failed, median of {args.repeat}")
    print("| operation | median s | GiB/s | x hashlib time |")
    print("|---|---:|---:|---:|")
    for name, sec, rate, ratio in rows:
        print(f"| {name} | {sec:.2f} | {'' if rate is None else f'{rate:.2f}'} | {ratio:.2f} |")
    print(f"\nthroughput of verify --deep / hashlib: {b / d:.2f} (target >= 0.8)")
    print(f"lineage over {len(blobs) // 2} batches without re-hashing: {s:.2f} s (target < 2 s)")


if __name__ == "__main__":
    main()
