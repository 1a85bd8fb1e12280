"""The Gymnasium recorder's cost per step: CartPole-v1 played with and without ``LedgerRecorder``.

Plays ``--episodes`` seeded random CartPole-v1 episodes (about 22 steps each) three ways in one
run: the bare environment, wrapped by ``LedgerRecorder`` (``every=--every``: batches recorded,
signed and logged during play, the rest on ``close()``), and the same with ``--image`` (a
64x64x3 uint8 observation added by a wrapper, to show the cost of image tensors). Reports the
median over ``--repeat`` runs of the time per step and the recorder's overhead per step.

To compare two versions (issue 12: "as fast as today"), run this script with each version's
package on the path (``PYTHONPATH=/path/to/checkout``), on the same machine, one after the other.

Usage::

    python bench/recorder_bench.py [--episodes 2000] [--every 500] [--repeat 5] [--json OUT]
    python bench/recorder_bench.py --quick   (tiny sizes: tests/bench checks the script runs)

Not a test: only ``--quick`` runs in CI (tests/bench/test_bench_smoke.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

PASSPHRASE = "bench passphrase (not secret)"


def play(env: Any, episodes: int) -> int:
    steps = 0
    for seed in range(episodes):
        env.reset(seed=seed)
        env.action_space.seed(seed)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
            steps += 1
    env.close()
    return steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.episodes, args.every, args.repeat = 4, 2, 1

    import gymnasium as gym
    import numpy as np

    from trajledger import Ledger
    from trajledger.integrations.gymnasium import LedgerRecorder
    from trajledger.ledger.artifacts import register_environment

    os.environ["TRAJLEDGER_PASSPHRASE"] = PASSPHRASE

    class Camera(gym.ObservationWrapper[Any, Any, Any]):
        def __init__(self, env: Any) -> None:
            super().__init__(env)
            self.observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)

        def observation(self, obs: Any) -> Any:
            return np.full((64, 64, 3), int(abs(obs[0]) * 50) % 256, np.uint8)

    work = Path(tempfile.mkdtemp(prefix="recorder-bench-"))
    times: dict[str, list[float]] = {"bare": [], "recorded": [], "recorded, 64x64x3 images": []}
    steps = 0
    try:
        for r in range(args.repeat):
            for name in times:
                home = work / f"ledger-{r}-{len(times[name])}-{name[:5]}"
                origin = f"bench/recorder-{os.urandom(4).hex()}"  # one origin per log
                ledger = Ledger.init(home, origin=origin) if name != "bare" else None
                image = "images" in name
                env: Any = gym.make("CartPole-v1")
                if image:
                    env = Camera(env)
                if ledger is not None:
                    encrypt = ledger.keys.require_encrypted  # the passphrase is set
                    signer = ledger.keys.create("bench", encrypt=encrypt)
                    register_environment(ledger, "cartpole", "1", signer)
                    env = LedgerRecorder(env, ledger, env_ref="cartpole@1", policy="random",
                                         signer=signer, every=args.every)  # fmt: skip
                start = time.perf_counter()
                steps = play(env, args.episodes)
                times[name].append((time.perf_counter() - start) / steps)
                if home.exists():
                    shutil.rmtree(home)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "steps": steps,
        "episodes": args.episodes,
        "every": args.every,
        "repeat": args.repeat,
        "us_per_step": {k: v * 1e6 for k, v in med.items()},
        "overhead_us_per_step": {k: (v - med["bare"]) * 1e6 for k, v in med.items() if k != "bare"},
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
