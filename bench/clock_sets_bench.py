"""What an attacker's clock sets cost the windows (docs/PERFORMANCE.md, "An attacker's clock
sets", rows36 and dict36): CPU seconds of ``step_windows.iter_windows`` in process.

Not an end-to-end timing: one process reads record batches of 8,192 steps of 17 numbers a
step and takes every window of them, the train side (``held=False``) and the held side
(``held=True``), the least CPU of ``--runs`` passes each. The data:

- **attack**: each column an arithmetic progression (a clock) for 20 steps every 40 to 80, so
  that nearly every window has its own set of clock columns (rev32's Left); as a tensor
  (``attack-tensor``) or as a Dict space of members ``pos`` (8), ``vel`` (8) and ``t`` (1)
  (``attack-dict``, dict36);
- **ordinary**: a walk of 16 numbers, as a Dict space ``pos`` / ``vel``, with a clock member
  ``t`` (``t / 500``, ``dict-clock``) or without (``dict``), or as a tensor with the step
  number appended (``tensor-clock``).

Run it once a tree (``PYTHONPATH=TREE python bench/clock_sets_bench.py``), trees in turn in
one job, to take ratios against a baseline measured beside it.

Usage::

    python bench/clock_sets_bench.py [--steps 100000] [--episode 1000] [--runs 2]
        [--kinds attack-dict,dict,dict-clock] [--quick]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

KINDS = ("attack-dict", "attack-tensor", "dict", "dict-clock", "tensor-clock")
BATCH = 8192


def observations(rng: np.random.Generator, n: int, kind: str) -> np.ndarray:
    """One episode's 17 numbers a step (``kind``: `KINDS`)."""
    o = np.cumsum(rng.normal(0, 0.05, size=(n, 17)), axis=0)
    t = np.arange(n, dtype=np.float64)
    if kind.startswith("attack"):
        for c in range(17):
            at = int(rng.integers(0, 40))
            while at < n:
                run = min(20, n - at)
                o[at : at + run, c] = np.arange(run) * 0.25 + float(rng.integers(0, 9))
                at += int(rng.integers(40, 81))
    elif kind in ("dict-clock", "tensor-clock"):
        o[:, 16] = t / 500 if kind == "dict-clock" else t
    return o


def table(steps: int, episode: int, kind: str, seed: int = 0) -> pa.Table:
    """``steps`` steps of episodes of ``episode`` steps (the last one shorter)."""
    rng = np.random.default_rng(seed)
    ids: list[str] = []
    parts: list[np.ndarray] = []
    for e in range(-(-steps // episode)):
        n = min(episode, steps - e * episode)
        parts.append(observations(rng, n, kind))
        ids += [f"e{e}"] * n
    flat = np.vstack(parts)
    if kind.endswith("tensor") or kind == "tensor-clock":
        obs: pa.Array = pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel()), 17)
    else:
        member = {"pos": flat[:, :8], "vel": flat[:, 8:16], "t": flat[:, 16:]}
        if kind == "dict":
            del member["t"]
        obs = pa.StructArray.from_arrays(
            [pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(v).ravel()),
                                               v.shape[1]) for v in member.values()],
            list(member))
    return pa.table({"episode_id": pa.array(ids, pa.string()), "obs": obs})


def batches(t: pa.Table) -> Iterator[pa.RecordBatch]:
    yield from t.to_batches(max_chunksize=BATCH)


def cpu(t: pa.Table, held: bool, runs: int) -> tuple[float, int]:
    """The least CPU seconds of ``runs`` passes of `iter_windows` over ``t``, and the windows."""
    from trajledger.ledger.step_windows import iter_windows

    best, count = float("inf"), 0
    for _ in range(runs):
        c0 = time.process_time()
        count = sum(len(w.hashes) for w in iter_windows(batches(t), held=held))
        best = min(best, time.process_time() - c0)
    return best, count


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--episode", type=int, default=1000)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test)")
    a = p.parse_args(argv)
    steps, runs = (3000, 1) if a.quick else (a.steps, a.runs)
    import trajledger

    print(f"tree {trajledger.__file__.rsplit('/', 2)[0]}, {steps} steps, episodes of "
          f"{a.episode}, least of {runs}")
    for kind in a.kinds.split(","):
        t = table(steps, a.episode, kind)
        (train, n0), (held, n1) = cpu(t, False, runs), cpu(t, True, runs)
        print(f"{kind:14} train {train:7.3f} CPU-s ({n0} windows)  held {held:7.3f} CPU-s "
              f"({n1} windows)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
