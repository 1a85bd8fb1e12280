"""A floor the user's state lost, a rollback the user accepts on purpose (docs/SECURITY.md,
review state26, findings 1 and 2).

Review rev25 refused the first use of a log whose floor the state lost (its key still noted
under its origin); a ``--policy`` file naming the log's key still re-pinned it, taking the
rolled-back log as found. And a backup restored on purpose was refused for ever. Each through
the CLI.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from testkit import Party

ORIGIN = "x.example/log"


def listing(path: Path) -> list[str]:
    """The files and directories under ``path`` (SQLite's -wal and -shm files aside)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")
                  if not p.name.endswith(("-wal", "-shm")))


def rolled_back(tmp_path: Path) -> tuple[Party, Path, Path]:
    """Alice's ledger, one environment registered, copied (``old``), then a second one
    registered: the party, the copy and the checkpoint of the newer log."""
    p = Party(tmp_path, "alice")
    p.run("init", "--origin", ORIGIN)
    p.run("key", "new", "alice", "--no-encrypt")
    p.run("policy", "init", "--roles", "producer", "--producer", "alice", "--out",
          tmp_path / "policy.toml")
    p.run("env", "register", "cart", "--version", "1", "--gym-id", "CartPole-v1", "--key", "alice")
    old = tmp_path / "old"
    shutil.copytree(p.home, old, symlinks=True)
    p.run("env", "register", "cart", "--version", "2", "--gym-id", "CartPole-v1", "--key", "alice")
    checkpoint = tmp_path / "checkpoint"
    shutil.copy(p.home / "log" / "checkpoint", checkpoint)
    return p, old, checkpoint


def restore(p: Party, old: Path) -> None:
    """Put the older copy in the ledger's place."""
    shutil.rmtree(p.home)
    shutil.copytree(old, p.home, symlinks=True)


def test_a_policy_naming_the_key_does_not_take_a_log_whose_floor_was_lost(tmp_path: Path
                                                                          ) -> None:
    """Finding 1. The floor removed, its note kept, the log rolled back: `--policy P`, P naming
    the log's key, pinned it as found (exit 0), where the same command without it is refused.
    A policy holds keys, not a checkpoint: it says whose log this is, never how large it was.
    Now refused the same way, the state as it was; a state that never noted the key is still
    pinned by the policy, in silence (the legitimate case), and so is the lost one once the
    user pins the checkpoint they trust (which then refuses the rollback as one)."""
    p, old, checkpoint = rolled_back(tmp_path)
    vkey, policy = p.vkey(), tmp_path / "policy.toml"
    (floor,) = p.state.glob("logs/*")
    (note,) = p.state.glob(f"origins/*/{floor.name}")
    shutil.rmtree(floor)
    restore(p, old)
    before = listing(p.state)
    r = p.run("verify", "cart@1", "--policy", policy, code=1)
    assert r.stderr == (
        f"FAIL: log {ORIGIN} ({p.home / 'log'}): your state noted its key {ORIGIN}+"
        + r.stderr.split(f"{ORIGIN}+", 1)[1].split(" ", 1)[0]
        + f" ({note}) but holds no floor of it: its state was removed, so a rollback since "
        "cannot be seen; nothing was read or changed. Pin the checkpoint you trust: "
        f"'trajledger trust {vkey} --checkpoint FILE'; or, to take the log as it is now, "
        f"remove {note} and run again\n"), r.stderr
    assert listing(p.state) == before
    p.run("verify", "cart@1", "--policy", policy, code=1)  # again: nothing was kept
    # The legitimate case: a state that never saw this log.
    fresh = Party(tmp_path, "fresh")
    fresh.home = p.home
    r = fresh.run("verify", "cart@1", "--policy", policy)
    assert "NOTE" not in r.stderr, r.stderr
    # The checkpoint the user trusts pinned: the rollback is one.
    p.run("trust", vkey, "--checkpoint", checkpoint)
    r = p.run("verify", "cart@1", "--policy", policy, code=1)
    assert "rollback: the signed checkpoint has size 1, but size 2" in r.stderr, r.stderr
