"""A name planted beside a writer's output that looks like a killed writer's temp file
(review rev30, finding 1; docs/SECURITY.md "eighteenth round (rev30)").

``fs.drop_stale_temps`` sweeps the ``.tmp-<host>-<pid>-…`` names of this host whose pid is
gone before a command writes its ``--out`` file, a key, the grouped held windows, an index
table. A pid past ``pid_t`` (``os.kill`` raises ``OverflowError``) ended the command as a bug
(exit 4): anyone who may create a file in the output's directory (a shared ``/tmp``) could stop
another user's ``sign --out``; and a name it may not remove (another user's, in a sticky
directory) failed it too, where the sweep is housekeeping. ``fsck`` judged such a pid the same
way in the ledger's ``tmp/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import testkit

from trajledger.ledger import fs

HUGE = ("2147483648", "99999999999999999999")
HOST = fs.temp_name().split("-")[1]  # this host's tag: ".tmp-<host>-<pid>-<random>"


@pytest.fixture
def home(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path / "home")


def planted(directory: Path, pid: str, what: str = "file") -> Path:
    path = directory / f".tmp-{HOST}-{pid}-ab"
    if what == "dir":
        path.mkdir()
        (path / "inside").write_text("x")
    else:
        path.write_text("x")
    return path


@pytest.mark.parametrize("pid", HUGE)
def test_a_pid_no_process_can_have_is_swept_not_a_bug(tmp_path: Path, pid: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    f, d = planted(out, pid), planted(out, "1" + pid, "dir")
    assert fs.is_stale(f) and fs.is_stale(d)
    assert fs.drop_stale_temps(out) == 2
    assert not f.exists() and not d.exists()


def test_a_name_that_cannot_be_removed_is_left(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's in a sticky directory (root removes it, so the refusal is made here)."""
    out = tmp_path / "out"
    out.mkdir()
    theirs, ours = planted(out, "2147483647"), planted(out, "2147483646")
    unlink = Path.unlink

    def refuse(self: Path, missing_ok: bool = False) -> None:
        if self == theirs:
            raise PermissionError(1, "Operation not permitted", str(self))
        unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", refuse)
    assert fs.drop_stale_temps(out) == 1
    assert theirs.exists() and not ours.exists()


def test_a_link_named_like_a_stale_temp_is_removed_not_followed(tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (elsewhere / "kept").write_text("mine")
    (out / f".tmp-{HOST}-2147483647-aa").symlink_to(elsewhere)
    (out / f".tmp-{HOST}-2147483647-bb").symlink_to(elsewhere / "kept")
    assert fs.drop_stale_temps(out) == 2
    assert sorted(p.name for p in out.iterdir()) == []
    assert (elsewhere / "kept").read_text() == "mine"


def test_sign_and_fsck_beside_a_planted_name(home: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    planted(shared, HUGE[1])
    (tmp_path / "f.txt").write_text("hello")
    r = testkit.invoke(home, "sign", tmp_path / "f.txt", "--key", "approver-a", "--out",
                       shared / "f.intoto.json")
    assert r.exit_code == 0, r.output
    assert (shared / "f.intoto.json").exists() and list(shared.glob(".tmp-*")) == []
    (home / "tmp").mkdir(exist_ok=True)
    planted(home / "tmp", HUGE[0])
    r = testkit.invoke(home, "fsck")
    assert r.exit_code in (0, 1) and "BUG" not in r.output, r.output
    assert "leftovers\t1 (1 stale)" in r.output, r.output
