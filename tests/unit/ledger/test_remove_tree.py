"""`fs.remove_tree` opens up read-only directories before removing them (a command's data
directory is made read-only) without following a link at any level (left34, review rev30's
Left): a link swapped in for the tree between its check and the walk made the walk give the
link's target, a directory of the victim's, mode 0700 at every level it could not write.

Run as root here, so `os.access` is made to answer as for the owner without root's override:
what the owner's mode bits allow."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trajledger.ledger import fs


def as_owner(path: object, mode: int) -> bool:
    want = (0o200 if mode & os.W_OK else 0) | (0o100 if mode & os.X_OK else 0)
    return os.stat(path).st_mode & want == want  # type: ignore[arg-type]


def read_only_tree(root: Path) -> Path:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    for d in (root / "a" / "b", root / "a", root):
        d.chmod(0o500)
    return root


def open_up(root: Path) -> None:
    """(For the temp directory's cleanup by a user who is not root.)"""
    for d in (root, root / "a", root / "a" / "b"):
        d.chmod(0o700)


def test_a_read_only_tree_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "access", as_owner)
    tree = read_only_tree(tmp_path / "tree")
    fs.remove_tree(tree)
    assert not os.path.lexists(tree)


def test_a_link_swapped_in_after_the_check_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = read_only_tree(tmp_path / "victim")
    tree = tmp_path / "tree"
    tree.mkdir()
    real = Path.is_symlink

    def swap(self: Path) -> bool:  # the check sees a directory; then a link takes its place
        seen = real(self)
        if self == tree and not seen:
            tree.rmdir()
            tree.symlink_to(victim)
        return seen

    monkeypatch.setattr(os, "access", as_owner)
    monkeypatch.setattr(Path, "is_symlink", swap)
    fs.remove_tree(tree)
    monkeypatch.undo()
    modes = [stat.S_IMODE(os.stat(d).st_mode) for d in (victim, victim / "a", victim / "a" / "b")]
    assert modes == [0o500] * 3
    assert (victim / "a" / "b" / "f").read_text() == "x"
    open_up(victim)


def test_a_link_inside_the_tree_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = read_only_tree(tmp_path / "victim")
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "link").symlink_to(victim)
    (tree / "d").chmod(0o500)
    monkeypatch.setattr(os, "access", as_owner)
    fs.remove_tree(tree)
    assert not os.path.lexists(tree)
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o500
    assert (victim / "a" / "b" / "f").read_text() == "x"
    open_up(victim)
