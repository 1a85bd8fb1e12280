"""collect_files (paths on disk -> manifest names) and manifest_for (names -> manifest)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trajledger.ledger.errors import LedgerError
from trajledger.ledger.files import collect_files, manifest_for, media_type_for
from trajledger.verify.manifest import MANIFEST_MEDIA_TYPE

MakeTree = Callable[..., Path]


def test_directory_is_expanded_to_relative_posix_names(make_tree: MakeTree) -> None:
    root = make_tree({"b.txt": "b", "a/x.bin": "x", "a/deep/y": "y", ".hidden": "h"})
    files = collect_files([root])
    assert files == {
        ".hidden": root / ".hidden",
        "a/deep/y": root / "a/deep/y",
        "a/x.bin": root / "a/x.bin",
        "b.txt": root / "b.txt",
    }


def test_same_names_whatever_the_directory_is_called(make_tree: MakeTree, tmp_path: Path) -> None:
    spec = {"a/x": "x", "y": "y"}
    one = make_tree(spec, tmp_path / "model")
    two = make_tree(spec, tmp_path / "copy-of-model")
    assert sorted(collect_files([one])) == sorted(collect_files([two])) == ["a/x", "y"]


def test_file_argument_contributes_its_base_name(make_tree: MakeTree) -> None:
    root = make_tree({"sub/w.json": "{}", "d/z": "z"})
    files = collect_files([root / "sub" / "w.json", root / "d"])
    assert files == {"w.json": root / "sub/w.json", "z": root / "d/z"}


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match=r"^.*/nope: no such file or directory$"):
        collect_files([tmp_path / "nope"])


def test_symlink_argument_is_refused(make_tree: MakeTree) -> None:
    root = make_tree({"real": "r"})
    (root / "link").symlink_to(root / "real")
    with pytest.raises(LedgerError, match=r"/link: is a symbolic link; give its target instead$"):
        collect_files([root / "link"])


def test_symlinked_file_inside_directory_is_refused(make_tree: MakeTree) -> None:
    root = make_tree({"real": "r"})
    (root / "link").symlink_to("real")
    with pytest.raises(
        LedgerError, match=r"/link: is a symbolic link; only regular files are signed$"
    ):
        collect_files([root])


def test_dangling_symlink_inside_directory_is_refused(make_tree: MakeTree) -> None:
    root = make_tree({"real": "r"})
    (root / "gone").symlink_to("does-not-exist")
    with pytest.raises(LedgerError, match=r"/gone: is a symbolic link"):
        collect_files([root])


def test_symlinked_directory_inside_directory_is_refused(
    make_tree: MakeTree, tmp_path: Path
) -> None:
    outside = make_tree({"secret": "s"}, tmp_path / "outside")
    root = make_tree({"a": "a"})
    (root / "sub").symlink_to(outside, target_is_directory=True)
    with pytest.raises(LedgerError, match=r"/sub: is a symbolic link; links are not signed$"):
        collect_files([root])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs mkfifo")
def test_special_files_are_refused(make_tree: MakeTree) -> None:
    root = make_tree({"a": "a"})
    os.mkfifo(root / "pipe")
    with pytest.raises(LedgerError, match=r"/pipe: is not a regular file; only regular files"):
        collect_files([root])
    with pytest.raises(LedgerError, match=r"/pipe: is not a regular file or directory$"):
        collect_files([root / "pipe"])


def test_two_arguments_giving_one_name(make_tree: MakeTree, tmp_path: Path) -> None:
    one = make_tree({"same.txt": "1"}, tmp_path / "one")
    two = make_tree({"same.txt": "2"}, tmp_path / "two")
    with pytest.raises(LedgerError, match=r"name 'same.txt' is also given by .*/one/same\.txt"):
        collect_files([one, two])


def test_no_files(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(
        LedgerError, match=r"^no files to sign: the paths given hold no regular files$"
    ):
        collect_files([tmp_path / "empty"])


def test_name_that_is_not_a_safe_manifest_path(make_tree: MakeTree) -> None:
    root = make_tree({"back\\slash": "x"})
    with pytest.raises(LedgerError, match="must be a relative POSIX path"):
        collect_files([root])


def test_unreadable_directory_is_an_error_not_a_silent_skip(
    make_tree: MakeTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    # os.walk ignores directories it cannot list unless told otherwise; signing would then
    # quietly leave those files out. Simulated, since permission bits do not stop root: the
    # directory cannot be opened (rev38: each is opened relative to its parent, then listed).
    root = make_tree({"a": "a", "locked/secret": "s"})
    real_open = os.open

    def open_(path: object, *a: Any, **kw: Any) -> object:
        if Path(os.fsdecode(path)).name == "locked":  # type: ignore[arg-type]
            raise PermissionError(13, "Permission denied", os.fsdecode(path))  # type: ignore[arg-type]
        return real_open(path, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", open_)
    with pytest.raises(LedgerError, match=r"/locked: cannot list: Permission denied$"):
        collect_files([root])


def test_manifest_known_answer(make_tree: MakeTree) -> None:
    root = make_tree({"b/c.parquet": b"\x00\x01", "a.txt": "hi"})
    manifest = manifest_for(collect_files([root]))
    hi = hashlib.sha256(b"hi").hexdigest()
    c = hashlib.sha256(b"\x00\x01").hexdigest()
    # RFC 8785: keys sorted, no spaces; files sorted by path; sizes as JSON integers.
    expected = (
        '{"files":['
        f'{{"digest":{{"sha256":"{hi}"}},"mediaType":"text/plain","path":"a.txt","size":2}},'
        f'{{"digest":{{"sha256":"{c}"}},"mediaType":"application/vnd.apache.parquet",'
        '"path":"b/c.parquet","size":2}],'
        f'"mediaType":"{MANIFEST_MEDIA_TYPE}"}}'
    ).encode()
    assert manifest.canonical_bytes() == expected
    assert manifest.digest == "sha256:" + hashlib.sha256(expected).hexdigest()
    assert manifest.total_size == 4


def test_manifest_binds_names_and_sizes(make_tree: MakeTree, tmp_path: Path) -> None:
    base = manifest_for(collect_files([make_tree({"a": "xy", "b": "z"}, tmp_path / "1")]))
    renamed = manifest_for(collect_files([make_tree({"a": "xy", "c": "z"}, tmp_path / "2")]))
    moved = manifest_for(collect_files([make_tree({"a": "xy", "d/b": "z"}, tmp_path / "3")]))
    assert len({base.digest, renamed.digest, moved.digest}) == 3


def test_manifest_of_many_files_matches_hashlib(make_tree: MakeTree) -> None:
    spec = {f"d{i % 3}/f{i:03}": (i * 7919) % 300_000 for i in range(40)}
    root = make_tree(spec)
    done: list[object] = []
    manifest = manifest_for(collect_files([root]), on_done=done.append)
    assert len(done) == 40
    assert [f.path for f in manifest.files] == sorted(spec)
    for entry in manifest.files:
        data = (root / entry.path).read_bytes()
        assert entry.size == len(data)
        assert entry.sha256 == hashlib.sha256(data).hexdigest()


def test_manifest_for_unreadable_file(make_tree: MakeTree) -> None:
    root = make_tree({"a": "a", "b": "b"})
    files = collect_files([root])
    (root / "b").unlink()  # vanished between listing and hashing
    with pytest.raises(LedgerError, match=r"/b: cannot read: No such file or directory$"):
        manifest_for(files)


@pytest.mark.parametrize(
    ("name", "media_type"),
    [
        ("x.parquet", "application/vnd.apache.parquet"),
        ("dir/X.JSON", "application/json"),
        ("a.jsonl", "application/jsonl"),
        ("model.safetensors", "application/vnd.safetensors"),
        ("noext", "application/octet-stream"),
        ("archive.tar.gz", "application/octet-stream"),
    ],
)
def test_media_type_for(name: str, media_type: str) -> None:
    assert media_type_for(name) == media_type


def test_a_tree_deeper_than_pythons_recursion_limit_is_listed(tmp_path: Path) -> None:
    """rev39: the walk nested one generator a level, so a tree some 1,000 directories deep (a
    loop of `mkdir -p` gone wrong, an archive unpacked into itself) stopped `sign` and
    `attest` with `BUG: RecursionError`, exit 4. The walk keeps its own stack."""
    top = where = tmp_path / "top"
    top.mkdir()
    for _ in range(1200):
        os.mkdir(where := where / "d")  # (one level at a time: short paths)
    (where / "f").write_bytes(b"x")
    try:
        files = collect_files([top])
        assert list(files) == ["d/" * 1200 + "f"]
        assert files["d/" * 1200 + "f"].read_bytes() == b"x"
    finally:  # (pytest's clean-up of its temporary directories recurses: not this deep)
        (where / "f").unlink()
        while where != top:
            where.rmdir()
            where = where.parent


def test_a_tree_deeper_than_the_descriptors_allowed_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev39: each level holds its directory open (rev38: opened relative to its parent): a
    tree deeper than ``ulimit -n`` allows is an operational error that says which limit."""
    import errno

    opened = os.open
    depth = [0]

    def few(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        if flags & os.O_DIRECTORY:
            depth[0] += 1
            if depth[0] > 5:
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return opened(path, flags, *args, **kw)

    where = tmp_path / "top"
    for _ in range(8):
        os.makedirs(where := where / "d")
    (where / "f").write_bytes(b"x")
    monkeypatch.setattr(os, "open", few)
    with pytest.raises(LedgerError, match=r"/d: cannot list: too many files open: a tree 5 "
                                          r"directories deep or more, past this process's limit "
                                          r"\(raise it: ulimit -n\); nothing was signed"):
        collect_files([tmp_path / "top"])


def test_a_directory_moved_away_between_listing_and_opening_says_so(
    make_tree: MakeTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev39: a subdirectory renamed (or removed) after its parent was listed, before it was
    opened, said ``cannot list: No such file or directory``, as if the user had named a
    missing path; it is the race rev38 refuses for a swap, and says so."""
    root = make_tree({"a": "a", "sub/f": "f"})
    real_open = os.open

    def moved(path: Any, flags: int, *a: Any, **kw: Any) -> int:
        if path == "sub" and kw.get("dir_fd") is not None:
            (root / "sub").rename(root / "elsewhere")
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(os, "open", moved)
    with pytest.raises(LedgerError, match=r"/sub: not the directory listed a moment before "
                                          r"\(replaced, moved or removed while it was being "
                                          r"listed\); nothing was signed$"):
        collect_files([root])
