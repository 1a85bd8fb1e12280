"""Where the user's state directory is, and whose it is (docs/SECURITY.md, review rev25).

The state decides what a user trusts (the floors, the pins, the settings of each ledger). An
outsider's cases: a state directory in a shared place that others may add to (sticky, like
/tmp), one another user made or owns (a ``sudo`` run, a directory named in a shared place), and
a state path that follows the current directory (a relative ``TRAJLEDGER_STATE_DIR``,
``XDG_STATE_HOME`` or ``HOME``), a log's floor removed from a state that still notes its key.
Each through the CLI.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import Result
from testkit import Party, new_runner

from trajledger.runner.cli import main

ORIGIN = "x.example/log"


def run(home: Path, *args: str | Path, **env: str | None) -> Result:
    """``trajledger --ledger HOME ARGS`` with ``env`` (None: unset)."""
    r = new_runner().invoke(main, ["--ledger", str(home), *map(str, args)], env=env)
    assert "Traceback" not in r.output
    return r


def listing(path: Path) -> list[str]:
    """The files and directories under ``path`` (SQLite's -wal and -shm files aside)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")
                  if not p.name.endswith(("-wal", "-shm")))


@pytest.fixture
def forged(tmp_path: Path) -> Party:
    """Another user's ledger, which the victim is handed."""
    party = Party(tmp_path, "forged")
    party.run("init", "--origin", ORIGIN)
    return party


def test_a_state_directory_others_may_add_to_is_refused(forged: Party, tmp_path: Path) -> None:
    """A state directory in a sticky place (mode 1777, as /tmp): others cannot replace the
    user's entries but may make the ones not yet made (a log's directory, a ledger's pin) and
    own them. Before, it passed (the sticky bit excused it) and a first use was taken there."""
    state = tmp_path / "shared-state"
    state.mkdir()
    state.chmod(0o1777)
    r = run(forged.home, "log", "info", TRAJLEDGER_STATE_DIR=str(state))
    assert r.exit_code == 3, r.output
    assert r.stderr == (f"FAIL: {state}: writable by its group and other users (mode 1777); "
                        f"run 'chmod go-w {state}'\n")
    assert listing(state) == []  # nothing made in it


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another user needs root")
def test_a_state_another_user_owns_is_refused(forged: Party, tmp_path: Path) -> None:
    """Another user made the state directory the victim names (in a shared place, or the
    victim runs as root on a user's state) and pinned their forged log's key in it: under
    TRAJLEDGER_REQUIRE_PIN=1 the victim's first use of the forgery passed in silence. Now a
    directory or file of the state that another user owns is refused (exit 3), nothing made."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    state = shared / "state"
    forged.state = state
    state.mkdir(mode=0o755)
    forged.run("trust", forged.vkey())  # the attacker's pin of their own key
    for p in (state, *state.rglob("*")):
        os.chown(p, 65534, 65534)
    before = listing(state)
    r = run(forged.home, "log", "info", TRAJLEDGER_STATE_DIR=str(state),
            TRAJLEDGER_REQUIRE_PIN="1")
    assert r.exit_code == 3, r.output
    assert r.stderr.startswith(f"FAIL: {state}") and ": owned by another user (uid 65534), " \
        "who decides through it what you trust; nothing was read or changed: use a state " \
        "directory of your own (TRAJLEDGER_STATE_DIR), or if it is yours run 'chown -R " \
        in r.stderr, r.stderr  # fmt: skip
    assert r.stderr.count("\n") == 1
    assert listing(state) == before
    # Only the database owned by another user (the rest the victim's): refused too.
    for p in (state, *state.rglob("*")):
        os.chown(p, 0, 0)
    (db,) = state.glob("logs/*/state.sqlite")
    os.chown(db, 65534, 65534)
    r = run(forged.home, "log", "info", TRAJLEDGER_STATE_DIR=str(state),
            TRAJLEDGER_REQUIRE_PIN="1")
    assert r.exit_code == 3, r.output
    assert r.stderr.startswith(f"FAIL: {db}: owned by another user (uid 65534), "), r.stderr


def test_a_relative_state_directory_is_refused(
    forged: Party, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative TRAJLEDGER_STATE_DIR (or HOME) put the state in the current directory: the
    floors and pins changed with `cd` (a rollback seen from another directory was a first use),
    and a state found in a directory someone handed over (an unpacked archive) was theirs.
    Now refused (exit 3), nothing made; a relative XDG_STATE_HOME is ignored, as the XDG
    specification says (the state is then under HOME)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    r = run(forged.home, "log", "info", TRAJLEDGER_STATE_DIR="state")
    assert r.exit_code == 3, r.output
    assert r.stderr == ("FAIL: your state directory state is not an absolute path "
                        "(TRAJLEDGER_STATE_DIR='state'): it would follow the current directory; "
                        "set TRAJLEDGER_STATE_DIR to an absolute path; nothing was read or "
                        "changed\n")
    r = run(forged.home, "log", "info", TRAJLEDGER_STATE_DIR=None, XDG_STATE_HOME=None,
            HOME="home")
    assert r.exit_code == 3, r.output
    assert "(HOME='home'): it would follow the current directory" in r.stderr
    assert listing(work) == []
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    r = run(forged.home, "log", "info", TRAJLEDGER_STATE_DIR=None, XDG_STATE_HOME="xdg",
            HOME=str(home))
    assert r.exit_code == 0, r.output
    assert f"pinned for you at size 0 ({home}/.local/state/trajledger/logs/" in r.stderr, \
        r.stderr
    assert listing(work) == []


def test_a_floor_the_state_lost_is_no_first_use(tmp_path: Path) -> None:
    """The state of a log the user has seen grow is removed (a "damaged" state's directory, as
    its message advised, or ~/.local cleaned), while the state still notes the key under its
    origin; the log is then rolled back (an older copy put in place). Before, that was a first
    use: `NOTE: ... nothing earlier was known to check it against`, exit 0, and the rollback
    (what was logged since, a revocation) was taken as found. Now refused (exit 1), the state
    as it was, again on the next run; `trust VKEY --checkpoint` restores the floor, and the
    rollback is refused as one; removing the note takes the log as it is (announced)."""
    p = Party(tmp_path, "alice")
    p.run("init", "--origin", ORIGIN)
    p.run("key", "new", "alice", "--no-encrypt")
    old = tmp_path / "old"
    shutil.copytree(p.home, old, symlinks=True)
    p.run("env", "register", "cart", "--version", "1", "--gym-id", "CartPole-v1", "--key", "alice")
    vkey, checkpoint = p.vkey(), tmp_path / "checkpoint"
    shutil.copy(p.home / "log" / "checkpoint", checkpoint)
    (floor,) = p.state.glob("logs/*")
    (note,) = p.state.glob(f"origins/*/{floor.name}")
    shutil.rmtree(floor)
    shutil.rmtree(p.home)
    shutil.copytree(old, p.home, symlinks=True)  # rolled back
    before = listing(p.state)
    for _ in range(2):
        r = p.run("log", "info", code=1)
        assert r.stderr.startswith(f"FAIL: log {ORIGIN} ({p.home / 'log'}): your state noted "
                                   f"its key {ORIGIN}+"), r.stderr
        assert f"({note}) but holds no floor of it: its state was removed, so a rollback " \
            "since cannot be seen; nothing was read or changed. Pin the checkpoint you trust: " \
            f"'trajledger trust {vkey} --checkpoint FILE'; " \
            f"or, to take the log as it is now, remove {note} and run again\n" in r.stderr
        assert r.stderr.count("\n") == 1 and listing(p.state) == before
    lost = tmp_path / "lost"
    shutil.copytree(p.state, lost)
    p.run("trust", vkey, "--checkpoint", checkpoint)
    r = p.run("log", "info", code=1)
    assert "rollback: the signed checkpoint has size" in r.stderr, r.stderr
    p.state = lost
    (lost / note.relative_to(tmp_path / "alice-state")).unlink()
    r = p.run("log", "info")
    assert r.stderr.startswith(f"NOTE: first use of log {ORIGIN}: "), r.stderr


def test_the_state_of_another_log_copied_in_says_what_to_do(tmp_path: Path) -> None:
    """Another log's state copied over this log's (a state directory put together from two
    machines): refused (exit 3) as before, now naming whose it is and what to do next; the
    way it names is taken (the note of the key is there: the floor must be pinned)."""
    a, b = Party(tmp_path, "a"), Party(tmp_path, "b")
    a.run("init", "--origin", ORIGIN)
    b.run("init", "--origin", "y.example/log")
    (mine,) = a.state.glob("logs/*")
    (theirs,) = b.state.glob("logs/*")
    shutil.rmtree(mine)
    shutil.copytree(theirs, mine)
    before = listing(a.state)
    r = a.run("log", "info", code=3)
    vkey = (a.home / "log" / "vkey").read_text().strip()
    assert r.stderr == (
        f"FAIL: trust state {mine}: holds the state of another log key (y.example/log+"
        f"{b.vkey().split('+')[1]}+sha256:"
    ) + r.stderr.split("+sha256:", 1)[1].split(")", 1)[0] + (
        "), copied or moved here; nothing was read or changed: remove "
        f"{mine}, then pin the checkpoint of {ORIGIN} you trust ('trajledger trust {vkey} "
        "--checkpoint FILE')\n"), r.stderr
    assert listing(a.state) == before
    shutil.rmtree(mine)
    a.run("log", "info", code=1)  # the floor is gone: pin it (test_a_floor_the_state_lost...)
    a.run("trust", vkey, "--checkpoint", a.home / "log" / "checkpoint")
    a.run("log", "info")


def test_a_damaged_state_says_to_pin_what_it_loses(tmp_path: Path) -> None:
    """A damaged state's message said "remove the directory to rebuild it from the log":
    removing it loses the floor, which the log cannot give back (finding 3). It now says to pin
    a checkpoint the user trusts after removing it, and following it works."""
    import sqlite3

    p = Party(tmp_path, "alice")
    p.run("init", "--origin", ORIGIN)
    vkey, checkpoint = p.vkey(), tmp_path / "checkpoint"
    shutil.copy(p.home / "log" / "checkpoint", checkpoint)
    (floor,) = p.state.glob("logs/*")
    db = sqlite3.connect(floor / "state.sqlite")
    with db:
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('range', x'7b7d')")
    db.close()
    r = p.run("log", "info", code=3)
    assert r.stderr.startswith(f"FAIL: trust state {floor}: damaged ("), r.stderr
    assert r.stderr.endswith(f"); remove the directory, then pin a checkpoint you trust "
                             f"('trajledger trust {vkey} --checkpoint FILE')\n"), r.stderr
    shutil.rmtree(floor)
    p.run("trust", vkey, "--checkpoint", checkpoint)
    p.run("log", "info")


def test_verify_bundle_refuses_a_log_whose_floor_the_state_lost(tmp_path: Path) -> None:
    """`verify BUNDLE` applies the floor the user holds for the bundle's log: with the log's
    state removed and its key still noted, an older bundle (exported before what the log
    recorded since) passed in silence, exit 0, where finding 3 refuses the ledger's own use.
    Now refused the same way (exit 1); with the state intact it is a rollback, as before."""
    from test_updates import Vendor

    vendor = Vendor(tmp_path, "vendor", "vendor.example/log")
    policy, vkey = vendor.home / "policy.toml", vendor.vkey()
    vendor.run("env", "register", "grid", "--version", "2", "--source", "sim", "--key", "vendor")
    r = vendor.run("verify", vendor.bundle, "--policy", policy, code=1)
    assert "log fork or rollback: checkpoint rollback" in r.stderr, r.stderr
    (floor,) = vendor.state.glob("logs/*")
    (note,) = vendor.state.glob(f"origins/*/{floor.name}")
    shutil.rmtree(floor)
    before = listing(vendor.state)
    r = vendor.run("verify", vendor.bundle, "--policy", policy, code=1)
    assert r.stderr == (
        f"FAIL: log vendor.example/log: your state noted its key {vendor.origin}+sha256:"
        + r.stderr.split("+sha256:", 1)[1].split(" ", 1)[0]
        + f" ({note}) but holds no floor of it: its state was removed, so a rollback since "
        "cannot be seen; nothing was read or changed. Pin the checkpoint you trust: "
        f"'trajledger trust {vkey} --checkpoint FILE'; or, to take the log as it is "
        f"now, remove {note} and run again\n"), r.stderr
    assert listing(vendor.state) == before
