"""Record and verify throughput with the blobs on an S3-compatible server vs a local directory.

Starts moto's S3 server (``moto_server``, in its own process) on 127.0.0.1, then in one run
builds two ledgers that differ only in their store: ``objects/`` on the local disk and
``s3://bench/ledger`` on the server. For each, times:

- ``record``: ``record_batch`` of ``--batches`` numeric batches of ``--steps`` steps each (obs
  float32[17], action float32[6]; validation, Parquet, hashing, storing, signing, logging);
- ``verify``: `verify_ref` of a dataset holding every batch (the lineage, every record, and
  every data blob re-hashed: verify's default);
- ``read``: reading every data blob back, checked (``get_verified``).

Each is reported as MiB/s of stored blob bytes and as a ratio S3 / local (same run, same data).
moto is an in-memory Python server on the same two cores, so the S3 numbers are a lower bound
for the client path, not a measure of real S3 (where network latency dominates small objects).

Usage::

    python bench/s3_bench.py [--batches 8] [--steps 200000] [--repeat 3] [--write-doc] [--quick]

``--quick`` (2 batches of 500 steps, one run) only checks the script runs; ``--write-doc``
puts the results into docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c
import numpy as np
import pyarrow as pa

OBS, ACT, EPISODE = 17, 6, 1000


def steps_table(steps: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    step = np.arange(steps, dtype=np.int64) % EPISODE
    return pa.table(
        {
            "episode_id": (np.arange(steps) // EPISODE + seed * 10**6).astype(str),
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    exe = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen(
        [str(exe), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                return proc, endpoint
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("moto_server did not start")


def run(store: str, root: Path, tables: list[pa.Table]) -> dict[str, float]:
    from trajledger import Ledger
    from trajledger.ledger.artifacts import (
        batch_files,
        create_dataset,
        record_batch,
        register_environment,
    )
    from trajledger.runner.verification import verify_ref
    from trajledger.verify.policy import TrustPolicy

    ledger = Ledger.init(root, origin=f"bench/{root.name}", store=store, check_store=True)
    key = ledger.keys.create("producer", encrypt=ledger.keys.require_encrypted)
    ledger.keys.create("approver", encrypt=ledger.keys.require_encrypted)
    register_environment(ledger, "mujoco", "1", key)
    start = time.perf_counter()
    digests = [
        record_batch(ledger, t, env="mujoco@1", policy="p", signer=key, name=f"b{i}").digest
        for i, t in enumerate(tables)
    ]
    record_s = time.perf_counter() - start
    create_dataset(ledger, "ds", "1", "train", digests, key)
    blobs = [d for b in digests for d in batch_files(ledger, b).values()]
    size = 0
    start = time.perf_counter()
    for d in blobs:
        size += len(ledger.store.get_verified(d))
    read_s = time.perf_counter() - start
    (root / "policy.toml").write_text(
        f'name = "bench"\n[roles.producer]\nkeys = ["keys/producer.pub"]\n'
        f'[roles.approver]\nkeys = ["keys/approver.pub"]\n'
        f'[roles.log]\nvkeys = ["{ledger.log.vkey}"]\n'
    )
    policy = TrustPolicy.from_toml((root / "policy.toml").read_bytes(), root)
    start = time.perf_counter()
    report = verify_ref(ledger, "ds@1", policy)
    verify_s = time.perf_counter() - start
    if not report.ok:
        raise SystemExit(f"verify failed: {report.failures()}")
    return {"record": record_s, "verify": verify_s, "read": read_s, "bytes": float(size)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write-doc", action="store_true", help="update docs/PERFORMANCE.md")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    a = ap.parse_args(argv)
    if a.quick:
        a.batches, a.steps, a.repeat = 2, 500, 1
    proc, endpoint = start_moto()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_ENDPOINT_URL=endpoint,
        AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
    )  # fmt: skip
    results: dict[str, list[dict[str, float]]] = {"local": [], "s3": []}
    with tempfile.TemporaryDirectory(prefix="s3bench-") as tmp:
        os.environ["TRAJLEDGER_STATE_DIR"] = str(Path(tmp) / "state")  # never the user's own
        try:
            import boto3

            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
                Bucket="bench"
            )
            tables = [steps_table(a.steps, s) for s in range(a.batches)]
            for r in range(a.repeat):
                for kind in ("local", "s3"):  # interleaved, same data
                    store = "objects" if kind == "local" else f"s3://bench/run{r}"
                    results[kind].append(run(store, Path(tmp) / f"{kind}{r}", tables))
        finally:
            proc.terminate()
            proc.wait()
    size = results["local"][0]["bytes"]
    rows = []
    for op in ("record", "verify", "read"):
        loc = statistics.median(x[op] for x in results["local"])
        s3 = statistics.median(x[op] for x in results["s3"])
        rows.append([op, f"{size / 2**20 / loc:.0f}", f"{size / 2**20 / s3:.0f}",
                     f"{s3 / loc:.2f}"])
    text = "\n".join([
        f"`{c.command_line()}`; {c.machine()}. {a.batches} batches x {a.steps:,} steps, "
        f"{size / 2**20:.0f} MiB of data blobs; median of {a.repeat} interleaved runs; moto "
        f"{_version('moto')} server (own process) on 127.0.0.1, pyarrow {pa.__version__}.",
        "",
        c.table(["operation", "local MiB/s", "S3 (moto) MiB/s", "S3 / local time"], rows),
    ])
    print(text)
    if a.write_doc:
        c.write_section("s3_bench", "## Object storage (S3)", text)
    return 0


def _version(name: str) -> Any:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    sys.exit(main())
