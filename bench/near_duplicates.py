"""How well the near-duplicate vectors tell copies from unrelated episodes (docs/audit-index.md).

Not a timing: the cosine similarities behind the thresholds of ``ledger.contamination``
(numeric 0.995 with at least 16 steps, text 0.8), for the feature definitions in
``ledger.episode_features`` (version ``FEATURE_VERSION``):

- **numeric**: ``--episodes`` random CartPole-v1 episodes (seeded), every pair of different
  seeds (both at least 16 steps), and copies of each: Gaussian noise on the observations,
  float16 rounding, the last step dropped, shifted by one step;
- **text**: ``--prompts`` synthetic prompts of 15-60 words from a 5,000-word vocabulary, every
  unrelated pair, and copies with one, two and five words changed.

Usage::

    python bench/near_duplicates.py [--episodes 1500] [--prompts 2000] [--write-doc] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import _common as c
import numpy as np
import pyarrow as pa


def features(tables: list[pa.Table]) -> tuple[np.ndarray, np.ndarray]:
    """Each table's one episode: its vector and whether it has one."""
    from trajledger.ledger.episode_features import FeatureChunk, iter_step_features

    chunk = FeatureChunk.concat([ch for t in tables for ch in iter_step_features([t])])
    return chunk.vectors, chunk.valid


def cartpole(episodes: int) -> list[tuple[np.ndarray, np.ndarray]]:
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    out = []
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        steps, acts = [obs], []
        while True:
            a = int(rng.integers(2))
            obs, _r, term, trunc, _ = env.step(a)
            acts.append(a)
            if term or trunc:
                break
            steps.append(obs)
        out.append((np.array(steps, dtype=np.float32), np.array(acts)))
    env.close()
    return out


def numeric_table(name: str, obs: np.ndarray, acts: np.ndarray) -> pa.Table:
    n = len(obs)
    return pa.table({
        "episode_id": [name] * n,
        "step": pa.array(np.arange(n), pa.int64()),
        "obs": pa.FixedSizeListArray.from_arrays(pa.array(obs.reshape(-1)), obs.shape[1]),
        "action": pa.FixedSizeListArray.from_arrays(pa.array(acts.astype(np.int64)), 1),
        "reward": np.ones(n),
    })  # fmt: skip


def numeric_rows(episodes: int) -> list[list[str]]:
    played = cartpole(episodes)
    base, valid = features([numeric_table(f"e{i}", o, a) for i, (o, a) in enumerate(played)])
    long = np.array([len(a) >= 16 for _o, a in played]) & valid
    sims = base[long] @ base[long].T
    np.fill_diagonal(sims, -1)
    rng = np.random.default_rng(0)
    rows = [["different seeds, both >= 16 steps, max", f"{sims.max():.4f}", ""]]
    short = base[valid & ~long] @ base[valid & ~long].T
    np.fill_diagonal(short, -1)
    over = int((short > 0.999).sum() // 2)
    rows.append(["different seeds, shorter than 16 steps: pairs above 0.999", f"{over}", ""])

    def copies(label: str, change: Any) -> None:
        tables, keep = [], []
        for i, (o, a) in enumerate(played):
            if len(a) < 17 or not valid[i]:
                continue
            o2, a2 = change(o, a)
            tables.append(numeric_table(f"c{i}", o2, a2))
            keep.append(i)
        vec, _ = features(tables)
        s = np.einsum("ij,ij->i", vec, base[keep])
        rows.append([label, f"{np.median(s):.5f}", f"{s.min():.5f}"])

    for sd in (0.01, 0.05, 0.1):
        copies(f"copy with N(0, {sd}) noise on the observations",
               lambda o, a, sd=sd: (o + rng.normal(0, sd, o.shape).astype(np.float32), a))
    copies("float16 rounding", lambda o, a: (o.astype(np.float16).astype(np.float32), a))
    copies("last step dropped", lambda o, a: (o[:-1], a[:-1]))
    copies("shifted by one step", lambda o, a: (o[1:], a[1:]))
    return rows


def text_rows(prompts: int) -> list[list[str]]:
    rng = np.random.default_rng(1)
    vocab = np.array([f"w{i}" for i in range(5000)])

    def table(name: str, words: list[str]) -> pa.Table:
        return pa.table({"episode_id": [name], "step": pa.array([0], pa.int64()),
                         "role": ["user"], "content": [" ".join(words)]})  # fmt: skip

    texts = [list(rng.choice(vocab, int(rng.integers(15, 61)))) for _ in range(prompts)]
    base, _ = features([table(f"p{i}", t) for i, t in enumerate(texts)])
    sims = base @ base.T
    np.fill_diagonal(sims, -1)
    pairs = prompts * (prompts - 1) // 2
    rows = [[f"unrelated, max over {pairs:,} pairs", f"{sims.max():.2f}", ""]]
    for k in (1, 2, 5):
        edited = []
        for t in texts[: prompts // 2]:
            t2 = list(t)
            for j in rng.choice(len(t2), k, replace=False):
                t2[j] = "changed" + str(rng.integers(10**6))
            edited.append(t2)
        vec, _ = features([table(f"e{i}", t) for i, t in enumerate(edited)])
        s = np.einsum("ij,ij->i", vec, base[: len(edited)])
        rows.append([f"{k} word(s) changed", f"{np.median(s):.2f}", f"{s.min():.2f}"])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=1500)
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--write-doc", action="store_true", help="update docs/audit-index.md")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.episodes, args.prompts = 20, 10
    from trajledger.ledger.episode_features import FEATURE_VERSION

    text = "\n".join([
        f"`{c.command_line()}`, feature version {FEATURE_VERSION}.", "",
        c.table(["numeric pairs (CartPole-v1)", "cosine (median)", "min"],
                numeric_rows(args.episodes)),
        "",
        c.table(["text pairs (synthetic prompts)", "cosine (median)", "min"],
                text_rows(args.prompts)),
    ])  # fmt: skip
    print(text)
    if args.write_doc:
        c.write_section("near_duplicates", "### Measured", text, doc=c.ROOT / "docs" /
                        "audit-index.md")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
