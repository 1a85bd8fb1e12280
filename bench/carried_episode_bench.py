"""The recorder's carried episode: one episode fed to ``FeatureStream`` one step a batch.

What ``record`` does with an episode that arrives in many small batches (ci53's finding, the
lead's "carried episode at 10x and 100x" in docs/PERFORMANCE.md): ``--steps`` steps of one
episode (four float32 observations and an int64 action a step, a reward), each its own
record batch, then ``finish``. Prints the CPU seconds of the feeding (``time.process_time``)
and the episode's fingerprint and vector digest, so two versions' outputs can be compared.

To compare two versions, run this script with each version's package on the path
(``PYTHONPATH=/path/to/checkout``), in pairs: ``farm-bench --vs``.

Usage::

    python bench/carried_episode_bench.py [--steps 10000] [--episodes 1]
    python bench/carried_episode_bench.py --quick   (tiny sizes: check the script runs)

Not a test.
"""

from __future__ import annotations

import argparse
import hashlib
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--steps", type=int, default=10_000, help="steps of each episode")
    ap.add_argument("--episodes", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.episodes = 50, 2

    import numpy as np
    import pyarrow as pa

    from trajledger.ledger.episode_features import FeatureChunk, FeatureStream

    rng = np.random.default_rng(0)
    n = args.steps * args.episodes
    table = pa.table({
        "episode_id": pa.array(np.repeat([f"e{i}" for i in range(args.episodes)], args.steps)),
        "step": pa.array(np.tile(np.arange(args.steps), args.episodes), pa.int64()),
        "obs": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.normal(size=4 * n).astype(np.float32)), 4),
        "action": pa.array(rng.integers(0, 4, n), pa.int64()),
        "reward": pa.array(rng.normal(size=n)),
    })  # fmt: skip
    batches = [table.slice(i, 1).to_batches()[0] for i in range(n)]
    t0 = time.process_time()
    stream = FeatureStream()
    done = [c for b in batches if (c := stream.add(b)) is not None]
    if (last := stream.finish()) is not None:
        done.append(last)
    cpu = time.process_time() - t0
    chunk = FeatureChunk.concat(done)
    vectors = hashlib.sha256(chunk.vectors.tobytes() + chunk.valid.tobytes()).hexdigest()
    print(f"steps {n} in {len(chunk)} episodes: {cpu:.3f} CPU-s")
    print(f"fingerprints {hashlib.sha256(''.join(chunk.fingerprints).encode()).hexdigest()}")
    print(f"vectors {vectors}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
