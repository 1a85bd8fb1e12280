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

from testkit import Party, new_runner

from trajledger.ledger.serve import LogServer
from trajledger.runner.cli import main

ORIGIN = "x.example/log"


def listing(path: Path) -> list[str]:
    """The files and directories under ``path`` (SQLite's -wal and -shm files aside)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")
                  if not p.name.endswith(("-wal", "-shm")))


def rolled_back(tmp_path: Path, more: int = 1) -> tuple[Party, Path, Path]:
    """Alice's ledger, one environment registered, copied (``old``), then ``more`` versions
    registered: the party, the copy and the checkpoint of the newer log."""
    p = Party(tmp_path, "alice")
    p.run("init", "--origin", ORIGIN)
    p.run("key", "new", "alice", "--no-encrypt")
    p.run("policy", "init", "--roles", "producer", "--producer", "alice", "--out",
          tmp_path / "policy.toml")
    p.run("env", "register", "cart", "--version", "1", "--gym-id", "CartPole-v1", "--key", "alice")
    old = tmp_path / "old"
    shutil.copytree(p.home, old, symlinks=True)
    for v in range(2, 2 + more):
        p.run("env", "register", "cart", "--version", str(v), "--gym-id", "CartPole-v1", "--key",
              "alice")
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


def test_a_rollback_restored_on_purpose_is_accepted_when_restated(tmp_path: Path) -> None:
    """Finding 2. A backup restored on purpose (size 1, where the state saw 3) was refused for
    ever: the only way on was to remove the state and pin a checkpoint. Now `trust VKEY
    --checkpoint FILE --accept-rollback 3:1` accepts it, restating the floor held and the size
    now; refused (exit 1, the state as it was) when the sizes restated are not the state's
    and the checkpoint's, when the checkpoint is not smaller, when it is another history than
    the one seen (a fork), and under TRAJLEDGER_REQUIRE_PIN=1. Once accepted, the log is used
    and grows again, and `trust` says when the rollback was accepted, from what to what."""
    p, old, _ = rolled_back(tmp_path, more=2)
    vkey = p.vkey()
    forked = tmp_path / "forked-checkpoint"
    restore(p, old)
    r = p.run("log", "info", code=1)
    assert "rollback: the signed checkpoint has size 1, but size 3" in r.stderr, r.stderr
    assert "(a copy you restored on purpose: 'trajledger trust --help', --accept-rollback)" \
        in r.stderr, r.stderr
    cp = p.home / "log" / "checkpoint"
    before = listing(p.state)

    def refused(*args: str | Path, code: int = 1, **env: str) -> str:
        r = new_runner().invoke(main, ["--ledger", str(p.home), "trust", vkey, *map(str, args)],
                                env={"TRAJLEDGER_STATE_DIR": str(p.state), **env})
        assert r.exit_code == code and "Traceback" not in r.output, r.output
        assert listing(p.state) == before
        return str(r.stderr)

    assert "HELD:NOW" in refused("--checkpoint", cp, "--accept-rollback", "yes", code=2)
    assert "--checkpoint" in refused("--accept-rollback", "3:1", code=2)
    assert "no --settings" in refused("--checkpoint", cp, "--accept-rollback", "3:1",
                                      "--settings", code=2)
    fp = "x.example/log+" + vkey.split("+")[1]
    assert refused("--checkpoint", cp, "--accept-rollback", "2:1").startswith(
        f"FAIL: log {ORIGIN}: your floor of its key {fp}+sha256:")
    assert refused("--checkpoint", cp, "--accept-rollback", "2:1").endswith(
        f" is at size 3 and {cp} has size 1: '--accept-rollback 2:1' restates another loss; "
        "nothing was changed\n")
    assert refused("--checkpoint", cp, "--accept-rollback", "3:1",
                   TRAJLEDGER_REQUIRE_PIN="1") == (
        "FAIL: accepting a rollback takes a smaller log than you saw as yours, which "
        "TRAJLEDGER_REQUIRE_PIN=1 (unattended runs) never does; nothing was changed: run it "
        "by hand without that setting\n")
    newer = tmp_path / "checkpoint"
    assert "is not smaller than your floor (size 3): no rollback to accept" in refused(
        "--checkpoint", newer, "--accept-rollback", "3:3")
    shutil.copytree(old, tmp_path / "fork-build", symlinks=True)
    build = Party(tmp_path, "build")
    build.home = tmp_path / "fork-build"
    build.run("env", "register", "cart", "--version", "9", "--gym-id", "CartPole-v1", "--key",
              "alice")
    shutil.copy(build.home / "log" / "checkpoint", forked)
    assert "is not the first 2 entries of the log you saw" in refused(
        "--checkpoint", forked, "--accept-rollback", "3:2")
    r = p.run("trust", vkey, "--checkpoint", cp, "--accept-rollback", "3:1")
    assert r.stderr.startswith(f"OK: log {ORIGIN}: the rollback of key {fp}+sha256:"), r.stderr
    assert " from size 3 to size 1 is accepted (20" in r.stderr, r.stderr
    p.run("log", "info")
    p.run("env", "register", "cart", "--version", "4", "--gym-id", "CartPole-v1", "--key",
          "alice")
    assert p.size() == 2
    p.run("reindex", "--check")  # the rows beyond size 1 were forgotten, the rest kept
    server = LogServer(p.home / "log")
    server.start()
    try:
        r = new_runner().invoke(main, ["monitor", server.url, "--vkey", vkey],
                                env={"TRAJLEDGER_STATE_DIR": str(p.state)})
    finally:
        server.stop()
    assert r.exit_code == 0, r.output
    assert f"\nNOTE: log {ORIGIN}: you accepted a rollback of it on 20" in r.stderr, r.stderr
    assert r.stderr.endswith(", from size 3 to size 1 ('trajledger trust --accept-rollback'): "
                             "what it held beyond was lost\n"), r.stderr
    r = p.run("trust")
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("rollback accepted")]
    assert line.startswith("rollback accepted\t20") and line.endswith(": size 3 to size 1"), line
