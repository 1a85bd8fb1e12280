"""The directories enclosing the user's state directory (docs/SECURITY.md, review state26,
finding 4).

Review rev25 refused a state directory that another user owns or may add to; its parents were
not looked at: whoever may write one can rename the state directory away (the next use is a
first use) or swap in another. Now, as ssh and gpg check the directories above a private one:
a parent that others may write (not sticky) or that another user owns is refused, exit 3,
nothing made; one its group may write is said once, as gpg's "unsafe enclosing directory
permissions" (umask 002 systems make ``~/.local/state`` 0775), and passes silently when the
group is the user's own (a user-private group, as Debian's ssh allows). Through the CLI.
"""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

import pytest
from click.testing import Result
from testkit import Party, new_runner

from trajledger.runner.cli import main

ORIGIN = "x.example/log"


def use(home: Path, state: Path) -> Result:
    """``trajledger --ledger HOME log info`` with the state directory ``state``."""
    r = new_runner().invoke(main, ["--ledger", str(home), "log", "info"],
                            env={"TRAJLEDGER_STATE_DIR": str(state)})
    assert "Traceback" not in r.output
    return r


def refused(home: Path, state: Path, untouched: Path, message: str) -> None:
    """``state`` refused, exit 3, with ``message`` alone; nothing made in ``untouched``."""
    r = use(home, state)
    assert r.exit_code == 3, r.output
    assert r.stderr == message, r.stderr
    assert os.listdir(untouched) == []


def others_may_write(shared: Path, state: Path) -> str:
    """The refusal of ``state`` under ``shared``, of mode 0777."""
    return (f"FAIL: {shared}: writable by other users (mode 0777), not sticky: another user "
            f"can rename your state directory {state} away or put theirs in its place; nothing "
            f"was read or changed: run 'chmod o-w {shared}', or use a state directory "
            "elsewhere (TRAJLEDGER_STATE_DIR)\n")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    p = Party(tmp_path, "alice")
    p.run("init", "--origin", ORIGIN)
    return p.home


@pytest.mark.parametrize("depth", [1, 2])
def test_a_parent_others_may_write_is_refused(home: Path, tmp_path: Path, depth: int) -> None:
    """A parent (or a grandparent) of mode 0777, not sticky: taken before (exit 0, a first
    use, the state made there); refused now, exit 3, nothing made."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    state = shared / "deep" / "state" if depth == 2 else shared / "state"
    r = use(home, state)
    assert r.exit_code == 3, r.output
    assert r.stderr == others_may_write(shared, state), r.stderr
    assert os.listdir(shared) == []
    shared.chmod(0o1777)  # sticky: only its owner renames the state directory
    r = use(home, state)
    assert r.exit_code == 0, r.output
    assert "writable" not in r.stderr, r.stderr


def test_a_parent_its_group_may_write_is_said(home: Path, tmp_path: Path) -> None:
    """Group-writable (umask 002): the user's own group passes in silence; another group is
    said once, and the command goes on (gpg's practice)."""
    team = tmp_path / "team"
    team.mkdir()
    team.chmod(0o775)
    me = pwd.getpwuid(os.geteuid())
    own = grp.getgrgid(me.pw_gid)
    os.chown(team, -1, me.pw_gid)
    r = use(home, team / "state")
    assert r.exit_code == 0, r.output
    private = own.gr_name == me.pw_name and set(own.gr_mem) <= {me.pw_name}
    assert ("writable by its group" in r.stderr) is not private, r.stderr
    if os.geteuid() != 0:
        return
    os.chown(team, -1, 65534)
    r = use(home, team / "state")
    assert r.exit_code == 0, r.output
    gid = grp.getgrgid(65534).gr_name
    assert r.stderr == (
        f"NOTE: {team}: writable by its group {gid} (mode 0775): a member can rename your "
        f"state directory {team / 'state'} away (the next use is then a first use); run "
        f"'chmod g-w {team}' unless you share it on purpose\n"), r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory of another user needs root")
def test_a_parent_another_user_owns_is_refused(home: Path, tmp_path: Path) -> None:
    """A parent of mode 0755 owned by uid 65534: they may rename the state directory."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, -1)
    state = theirs / "state"
    refused(home, state, theirs, (
        f"FAIL: {theirs}: owned by another user (uid 65534), who can rename your state "
        f"directory {state} away or put theirs in its place; nothing was read or changed: "
        "use a state directory elsewhere (TRAJLEDGER_STATE_DIR)\n"))


def test_a_state_directory_reached_through_a_link_is_checked_where_it_is(
    home: Path, tmp_path: Path
) -> None:
    """Review rev27, finding 2. The state directory a link (``~/.local/state`` moved to
    another disk and linked back, say) to a directory in a parent of mode 0777: only the
    parents of the path as given were looked at, which are the user's, so it was taken (exit
    0), and any user could rename it away. Now the parents of where it is are looked at too."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "state").mkdir(mode=0o700)
    shared.chmod(0o777)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    state = mine / "state"
    state.symlink_to(shared / "state")
    r = use(home, state)
    assert r.exit_code == 3, r.output
    assert r.stderr == others_may_write(shared, state), r.stderr
    assert os.listdir(shared / "state") == []
    shared.chmod(0o755)
    r = use(home, state)
    assert r.exit_code == 0, r.output


@pytest.mark.skipif(os.geteuid() != 0, reason="a link of another user needs root to make")
def test_a_link_another_user_owns_on_the_way_is_refused(home: Path, tmp_path: Path) -> None:
    """Review rev27, finding 2. A link in a sticky directory (``/tmp``) owned by another
    user, on the way to the state directory: its owner may point it elsewhere at any time
    (they may replace what they own there), and the state with it. Taken before (exit 0: every
    directory on the way and where it points were in order); refused now, exit 3."""
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = sticky / "link"
    link.symlink_to(mine)
    os.lchown(link, 65534, -1)
    state = link / "state"
    refused(home, state, mine, (
        f"FAIL: {link}: a link owned by another user (uid 65534), who can point it, and your "
        f"state directory {state} with it, elsewhere; nothing was read or changed: use a "
        f"state directory elsewhere (TRAJLEDGER_STATE_DIR), e.g. {mine / 'state'}\n"))
