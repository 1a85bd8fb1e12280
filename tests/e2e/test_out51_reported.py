"""What out51 found playing outsiders (a new ML engineer's first hour with an environment of
their own, an auditor with public keys and bundles); docs/SECURITY.md, "Review of 2026-12-07,
thirty-sixth round (out51)".
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
from test_out48_reported import vendor_only
from testkit import Party

from trajledger import Ledger

CORRIDOR = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Corridor(gym.Env):
    def __init__(self):
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, a):
        self.pos = max(0, self.pos + (1 if a == 1 else -1))
        done = self.pos >= 4
        obs = np.array([min(1.0, self.pos / 4 + float(self.np_random.uniform(0, 0.01)))],
                       dtype=np.float32)
        return obs, 1.0 if done else -0.01, done, False, {}


gym.register("Out51Corridor-v0", entry_point="out51_corridor:Corridor", max_episode_steps=20)
'''


def test_an_environment_registered_by_module_and_id_is_recorded_by_the_same_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newcomer's own Gymnasium environment: the command line can make it only as
    ``MODULE:ID`` (``env register corridor --gym-id out51_corridor:Out51Corridor-v0``,
    Gymnasium's way to import the module that registers it; the runner and ``eval`` take the
    form). Wrapping ``gym.make`` of that very id in ``LedgerRecorder`` was refused: ``the
    environment is Out51Corridor-v0, but corridor@1 is registered for
    out51_corridor:Out51Corridor-v0: wrap out51_corridor:Out51Corridor-v0``, which is what
    was wrapped. Expected: recorded; another environment still refused."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "out51_corridor.py").write_text(CORRIDOR)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    vendor = Party(tmp_path, "vendor")
    vendor_only(vendor, tmp_path)
    vendor.run("env", "register", "corridor", "--version", "1", "--gym-id",
               "out51_corridor:Out51Corridor-v0", "--key", "vendor")
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(vendor.state))
    ledger = Ledger.open(vendor.home)
    env = gym.make("out51_corridor:Out51Corridor-v0")
    from trajledger.integrations.gymnasium import LedgerRecorder

    rec = LedgerRecorder(env, ledger, env_ref="corridor@1", policy="right",
                         signer=ledger.keys.signer("vendor"))
    for seed in range(3):
        rec.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, _ = rec.step(1)
            done = terminated or truncated
    rec.close()
    assert len(rec.batches) == 1
    vendor.run("verify", rec.batches[0])
    with pytest.raises(ValueError, match="the environment is CartPole-v1"):
        LedgerRecorder(gym.make("CartPole-v1"), ledger, env_ref="corridor@1", policy="random",
                       signer=ledger.keys.signer("vendor"))
