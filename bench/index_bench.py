"""The audit index at scale (issue 11 item 2): per-batch indexing, bounded memory, throughput.

Builds (or reuses, with ``--dir``) a ledger holding about ``--gb`` GiB of unrelated rollouts:
numeric batches of ``--batch-steps`` steps (obs float32[17], action float32[6], 1,000-step
episodes) and one chat batch of ``--chat-episodes`` episodes; plus a small train dataset and
one small new batch. Then, in one run:

1. **dataset create next to the big ledger**: ``trajledger dataset create`` of a holdout made of
   the one small batch, as a subprocess; wall time and the child's peak RSS (``os.wait4``).
   It reads the episode features kept with the small batch and the train dataset's batch
   (issue 21; it opened the audit index and indexed those two before): the unrelated rollouts
   are never read, and no batch is indexed.
2. **Indexing throughput, features only**, on the same tables in this process: the old
   per-token path (feature version 1, kept below as the baseline: a Python BLAKE2b per token,
   a ``Counter`` per episode, the whole step table in memory) against the new vectorised
   streaming path (``ledger.episode_features.iter_step_features``), for the chat batch and a
   numeric batch.
3. **Indexing a whole batch** (``Index.index_batches`` of the largest numeric batch and of the
   chat batch), as a subprocess: wall time, MB/s of step file, and peak RSS against the
   step file's size (memory bounded by a row group, not the file).
4. **Recording** (``record_batch``) of the batches, timed while building: the ingest cost,
   which excludes indexing (recording never touches the index).

Usage::

    python bench/index_bench.py [--dir /tmp/indexbench] [--gb 5] [--write-doc] [--quick]

``--quick`` (a ledger of a few hundred KiB in a temporary directory: a chat batch, two numeric
ones; the children of parts 2 and 3 run in this process) only checks the script runs;
``--write-doc`` puts the results into docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import _common as c
import numpy as np
import pyarrow as pa

OBS, ACT, EPISODE = 17, 6, 1000
VOCAB = [f"w{i:04d}" for i in range(20_000)]
OLD_COLUMNS = ("episode_id", "step", "role", "content", "obs", "action", "reward", "terminated",
               "truncated")  # fmt: skip


def numeric_table(steps: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    step = np.arange(steps, dtype=np.int64) % EPISODE
    return pa.table(
        {
            "episode_id": (np.arange(steps, dtype=np.int64) // EPISODE + seed * 10**7).astype(str),
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


def chat_table(episodes: int, seed: int) -> pa.Table:
    """4 messages per episode (system, user, assistant, tool), 20-120 words each."""
    rng = np.random.default_rng(seed)
    roles = ["system", "user", "assistant", "tool"]
    n = episodes * 4
    lengths = rng.integers(20, 121, n)
    words = rng.integers(0, len(VOCAB), int(lengths.sum()))
    vocab = np.array(VOCAB, dtype=object)
    text, at = [], 0
    for length in lengths.tolist():
        text.append(" ".join(vocab[words[at : at + length]]))
        at += length
    step = np.tile(np.arange(4, dtype=np.int64), episodes)
    return pa.table(
        {
            "episode_id": np.repeat(np.arange(episodes) + seed * 10**7, 4).astype(str),
            "step": step,
            "role": roles * episodes,
            "content": text,
            "reward": np.where(step == 3, 1.0, 0.0),
            "terminated": step == 3,
            "truncated": np.zeros(n, dtype=bool),
        }
    )


# ------------------------------------------------------------------------------------------
# The baseline: feature version 1's per-token text vector and in-memory step features, as they
# were in ledger/index.py before the vectorised streaming path (kept here only to measure).

_WORD = re.compile(r"\w+")


def _old_text_vector(messages: list[tuple[str | None, str]]) -> np.ndarray | None:
    chosen = [t for r, t in messages if r not in ("system", "assistant")] or [
        t for r, t in messages if r != "system"
    ]
    counts: Counter[str] = Counter()
    for text in chosen:
        words = _WORD.findall(text.lower())
        counts.update(words)
        counts.update(f"{a} {b}" for a, b in itertools.pairwise(words))
    out = np.zeros(128)
    for token, count in counts.items():
        h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
        out[h % 128] += (1.0 - 2.0 * (h >> 63)) * (1.0 + math.log(count))
    norm = float(np.linalg.norm(out))
    return (out / norm).astype(np.float32) if norm else None


def old_features(steps: pa.Table) -> int:
    """Version 1: fingerprints (dedup), then per episode a Python loop (text) or a projection."""
    import pyarrow.compute as pc

    from trajledger.ledger.episode_vectors import fold, numeric_vectors
    from trajledger.ledger.rollouts.dedup import episode_fingerprints

    episode_fingerprints(steps)
    order = pc.sort_indices(steps, sort_keys=[("episode_id", "ascending"), ("step", "ascending")])
    t = steps.take(order)
    n = t.num_rows
    ids = t.column("episode_id").to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    ends = np.append(starts[1:], n)
    if "content" in t.column_names:
        texts = t.column("content").to_pylist()
        roles = t.column("role").to_pylist()
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            _old_text_vector([(roles[i], texts[i]) for i in range(a, b) if texts[i]])
    else:
        x = np.hstack([fold(t.column("obs"), n, 16), fold(t.column("action"), n, 4),
                       t.column("reward").to_numpy().reshape(n, 1)])  # fmt: skip
        numeric_vectors(x, starts, ends - starts)
    return len(starts)


def new_features(path: Path) -> int:
    from trajledger.ledger.episode_features import (
        FEATURE_COLUMNS,
        iter_step_features,
        parquet_batches,
    )

    return sum(len(c) for c in iter_step_features(parquet_batches(path, FEATURE_COLUMNS)))


# ------------------------------------------------------------------------------------------


_HWM = (
    "\nwith open('/proc/self/status') as _f:\n"
    "    _hwm = [l for l in _f if l.startswith('VmHWM')][0].split()[1]\n"
    "sys.stderr.write(f'VmHWM {_hwm}\\n')\n"
)


def run_child(code: str, *args: str, fresh: bool = True) -> tuple[float, int, str]:
    """Run Python code in a fresh child; wall seconds, its peak RSS bytes, stdout.

    The peak is the child's own ``VmHWM`` (``ru_maxrss`` of a child also counts its parent's
    pages at spawn, which says nothing about the child). ``fresh=False`` (``--quick``): the
    code runs in this process instead (`_common.run_here`), its peak that of this process."""
    start = time.perf_counter()
    if fresh:
        proc = subprocess.run(
            [sys.executable, "-c", "import sys\n" + code + _HWM, *args], capture_output=True
        )
        status, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    else:
        status, out, err = c.run_here("import sys\n" + code + _HWM, args)
        stdout, stderr = out.encode(), err.encode()
    elapsed = time.perf_counter() - start
    if status:
        raise SystemExit(f"child failed: {stderr.decode()[-2000:]}")
    hwm = re.search(rb"VmHWM (\d+)", stderr)
    assert hwm is not None
    return elapsed, int(hwm.group(1)) * 1024, stdout.decode()


def run_cli(*args: str) -> tuple[float, int, str]:
    """``trajledger ARGS`` in a fresh child; wall seconds, its peak RSS (VmHWM), stdout."""
    c.compile_package()  # start as an installed package starts
    code = (
        "from trajledger.runner.cli import main\n"
        "try:\n    main(args=sys.argv[1:])\nexcept SystemExit as e:\n"
        "    assert not e.code, e.code\n"
    )
    return run_child(code, *args)


def build(root: Path, gb: float, batch_steps: int, chat_episodes: int) -> dict[str, Any]:
    from trajledger import Ledger
    from trajledger.ledger.artifacts import create_dataset, record_batch, register_environment

    meta_path = root / "bench.json"
    if meta_path.is_file():
        return dict(json.loads(meta_path.read_text()))
    ledger = Ledger.init(root, origin=c.unique_origin("index"))
    key = ledger.keys.create("producer", encrypt=ledger.keys.require_encrypted)
    register_environment(ledger, "mujoco", "1", key)
    register_environment(ledger, "chat", "1", key)
    meta: dict[str, Any] = {"numeric": [], "record_s": [], "record_bytes": []}

    def store_bytes(digest: str) -> int:
        from trajledger.ledger.artifacts import batch_files

        files = batch_files(ledger, digest).values()
        return sum(ledger.store.path_of(d).stat().st_size for d in files)

    t = chat_table(chat_episodes, 1)
    start = time.perf_counter()
    chat = record_batch(ledger, t, env="chat@1", policy="m1", signer=key, name="chat").digest
    meta["record_s"].append(time.perf_counter() - start)
    meta["record_bytes"].append(store_bytes(chat))
    meta["chat"] = chat
    total = meta["record_bytes"][-1]
    seed = 10
    while total < gb * (1 << 30):
        t = numeric_table(batch_steps, seed)
        start = time.perf_counter()
        d = record_batch(ledger, t, env="mujoco@1", policy="p0", signer=key, name=f"n{seed}").digest
        meta["record_s"].append(time.perf_counter() - start)
        meta["record_bytes"].append(store_bytes(d))
        total += meta["record_bytes"][-1]
        meta["numeric"].append(d)
        seed += 1
        print(f"  built {total / (1 << 30):.2f} GiB", file=sys.stderr)
    del t
    train = record_batch(ledger, numeric_table(5000, 3), env="mujoco@1", policy="p1", signer=key,
                         name="train").digest  # fmt: skip
    create_dataset(ledger, "train", "1", "train", [train], key)
    meta["small"] = record_batch(
        ledger, numeric_table(3000, 4), env="mujoco@1", policy="p1", signer=key, name="small"
    ).digest
    meta["total_bytes"] = total
    meta_path.write_text(json.dumps(meta))
    return meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", type=Path, default=None, help="keep the ledger here (reused)")
    ap.add_argument("--gb", type=float, default=5.0)
    ap.add_argument("--batch-steps", type=int, default=4_000_000)
    ap.add_argument("--chat-episodes", type=int, default=200_000)
    ap.add_argument("--markdown", action="store_true", help="(the output is markdown)")
    ap.add_argument("--write-doc", action="store_true", help="update docs/PERFORMANCE.md")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    a = ap.parse_args()
    if a.quick:  # a chat batch, two numeric ones
        a.dir, a.gb, a.batch_steps, a.chat_episodes = None, 0.0003, 2_000, 20
    work = a.dir or Path(tempfile.mkdtemp(prefix="indexbench-"))
    root = work / "ledger"
    os.environ["TRAJLEDGER_STATE_DIR"] = str(work / "state")  # never the user's own
    meta = build(root, a.gb, a.batch_steps, a.chat_episodes)
    shutil.rmtree(root / "index" / "lance", ignore_errors=True)  # a cold index every run
    from trajledger import Ledger
    from trajledger.ledger.artifacts import batch_files

    ledger = Ledger.open(root)
    steps_of = {
        d: ledger.store.path_of(batch_files(ledger, d)["steps.parquet"])
        for d in [meta["chat"], meta["numeric"][0]]
    }
    rows: list[tuple[str, str]] = []

    # (1) dataset create of one small batch next to the big ledger.
    create_s, create_rss, _ = run_cli(
        "--ledger", str(root), "dataset", "create", "hold", "--version", str(time.time_ns()),
        "--split", "holdout", "--batch", meta["small"], "--key", "producer",
    )  # fmt: skip
    idx = Ledger.open(root)
    from trajledger.ledger.index import Index

    pending = Index(idx).query("artifacts", "kind = 'rollout-batch' AND data = 'pending'")
    rows.append(("dataset create, 1 small batch, next to the ledger (CLI)",
                 f"{create_s:.2f} s, peak RSS {create_rss / 2**20:.0f} MiB, "
                 f"{pending.num_rows} unrelated batches left unindexed"))  # fmt: skip

    # (2) features of one batch, old in-memory per-token path vs new streaming path, each in a
    # fresh child (time and the child's own peak RSS), on the same step files. --quick runs
    # these and (3) in this process: a child importing pyarrow or lancedb (3.5 CPU-s) each
    # time would cost more than the rest of the run; (1) is its one child.
    fresh = not a.quick
    bench_dir = str(Path(__file__).resolve().parent)
    feat: list[tuple[str, int, float, int, float, int]] = []
    targets = (("chat", meta["chat"]), ("numeric", meta["numeric"][0]))
    for label, d in targets:
        path = str(steps_of[d])
        old_code = (
            f"sys.path.insert(0, {bench_dir!r}); import index_bench as ib; "
            "import pyarrow.parquet as pq; "
            "t = pq.read_table(sys.argv[1], columns=[c for c in ib.OLD_COLUMNS "
            "if c in pq.read_schema(sys.argv[1]).names]); print(ib.old_features(t))"
        )
        new_code = (
            f"sys.path.insert(0, {bench_dir!r}); import index_bench as ib; "
            "from pathlib import Path; print(ib.new_features(Path(sys.argv[1])))"
        )
        old_s, old_rss, n_old = run_child(old_code, path, fresh=fresh)
        new_s, new_rss, n_new = run_child(new_code, path, fresh=fresh)
        assert n_old.strip() == n_new.strip(), (n_old, n_new)
        feat.append((label, int(n_new), old_s, old_rss, new_s, new_rss))

    # (3) index whole batches (the small new one, the chat one, a 4M-step one) in a child:
    # time, MiB/s of step file, peak RSS against the step file's size.
    whole = []
    for label, d in (("small (3,000 steps)", meta["small"]), *targets):
        code = (
            "from pathlib import Path; from trajledger import Ledger; "
            "from trajledger.ledger.index import Index; "
            "print(Index(Ledger.open(Path(sys.argv[1]))).index_batches([sys.argv[2]]))"
        )
        size = ledger.store.path_of(batch_files(ledger, d)["steps.parquet"]).stat().st_size
        secs, rss, out = run_child(code, str(root), d, fresh=fresh)
        whole.append((label, secs, rss, size, out.strip()))

    rec_s, rec_b = sum(meta["record_s"]), sum(meta["record_bytes"])
    out = [
        f"`{c.command_line()}`; {c.machine()}.",
        "",
        f"Ledger: {meta['total_bytes'] / 2**30:.2f} GiB of unrelated rollouts in "
        f"{len(meta['numeric']) + 1} batches (+ a 5,000-step train dataset and a 3,000-step "
        "new batch).",
        "",
        c.table(["operation", "result"], [
            *rows,
            ("recording (ingest, index excluded)",
             f"{rec_b / 2**20 / rec_s:.0f} MiB/s of stored blobs ({rec_s:.0f} s for "
             f"{rec_b / 2**30:.2f} GiB)"),
        ], "ll"),
        "",
        c.table(["features of one batch (child)", "episodes", "old per-token: s",
                 "peak RSS MiB", "new streaming: s", "peak RSS MiB", "speed-up"], [
            (label, f"{n:,}", f"{old_s:.2f}", f"{old_rss / 2**20:.0f}", f"{new_s:.2f}",
             f"{new_rss / 2**20:.0f}", f"{old_s / new_s:.1f} x")
            for label, n, old_s, old_rss, new_s, new_rss in feat
        ]),
        "",
        c.table(["index one whole batch (child)", "s", "MiB/s of steps.parquet", "peak RSS MiB",
                 "steps.parquet MiB"], [
            (label, f"{secs:.2f}", f"{size / 2**20 / secs:.0f}", f"{rss / 2**20:.0f}",
             f"{size / 2**20:.0f}")
            for label, secs, rss, size, _out in whole
        ]),
    ]
    text = "\n".join(out)
    print(text)
    if a.write_doc:
        c.write_section("index_bench", "## Audit index", text)
    if a.quick:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
