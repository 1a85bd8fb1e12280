"""The data directory a training command gets: layout, read-only, hard links, the re-check.

Each change a command could make (a byte changed, a file removed, a file added, a link added,
the store's object changed through a hard link) is one test that expects the named problem.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from trajledger import Ledger
from trajledger.ledger.store import ObjectStore
from trajledger.runner.admission import Admission, admit
from trajledger.runner.workdir import (
    DATA_DIR_FORMAT,
    DataDir,
    DataDirChangedError,
    TreeFile,
    check_data_dir,
    output_files,
    write_data_dir,
    write_tree,
)
from trajledger.verify.digest import digest_bytes, hash_file


def _admitted(home: Path) -> tuple[Ledger, Admission]:
    ledger = Ledger.open(home)
    return ledger, admit(ledger, "chat@1", ledger.policy())


def _write(ledger: Ledger, admission: Admission, dest: Path) -> DataDir:
    return write_data_dir(
        dest,
        ledger.store,
        {"name": admission.name, "version": admission.version, "digest": admission.dataset},
        admission.batches,
    )


@pytest.fixture
def written(chat_home: Path) -> tuple[Ledger, Admission, DataDir]:
    ledger, admission = _admitted(chat_home)
    (chat_home / "tmp").mkdir(exist_ok=True)
    data = _write(ledger, admission, chat_home / "tmp" / "data")
    return ledger, admission, data


def _make_writable(path: Path) -> None:
    for d, _dirs, files in os.walk(path):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)


def test_layout_manifest_and_read_only(written: tuple[Ledger, Admission, DataDir]) -> None:
    ledger, admission, data = written
    batch = admission.batches[0]
    bdir = f"batches/00000-{batch.digest.removeprefix('sha256:')[:12]}"
    assert sorted(output_files(data.path)) == [
        "README.md", f"{bdir}/episodes.parquet", f"{bdir}/steps.parquet", "manifest.json",
    ]
    for name, blob in batch.files.items():
        assert (data.path / bdir / name).read_bytes() == blob  # the verified bytes, as recorded
    body = json.loads((data.path / "manifest.json").read_text())
    assert body["format"] == DATA_DIR_FORMAT
    assert body["dataset"]["digest"] == admission.dataset
    assert body["batches"][0]["digest"] == batch.digest
    assert body["batches"][0]["logIndex"] == batch.index
    listed = {f["path"]: f["digest"]["sha256"] for f in body["manifest"]["files"]}
    assert listed[f"{bdir}/steps.parquet"] == hash_file(data.path / bdir / "steps.parquet").sha256
    assert "manifest.json" not in listed
    for d, _dirs, files in os.walk(data.path):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o555
        for f in files:
            assert stat.S_IMODE(os.stat(os.path.join(d, f)).st_mode) == 0o444
    check_data_dir(data, ledger.store)  # unchanged: passes


def test_hard_linked_from_a_local_store_else_copied(
    written: tuple[Ledger, Admission, DataDir], tmp_path: Path
) -> None:
    ledger, admission, data = written
    assert data.hard_linked == 2
    for rel, digest in data.linked.items():
        assert os.stat(data.path / rel).st_ino == os.stat(ledger.store.path_of(digest)).st_ino
    # A store elsewhere (no object to link): the verified bytes are written instead.
    copied = write_data_dir(tmp_path / "copied", ObjectStore(tmp_path / "empty-store"),
                            {"name": "chat"}, admission.batches)
    assert copied.hard_linked == 0
    assert data.manifest.by_path().keys() - {"manifest.json", "README.md"} == (
        copied.manifest.by_path().keys() - {"manifest.json", "README.md"}
    )
    check_data_dir(copied, ledger.store)


def test_a_store_object_that_does_not_hash_is_not_linked(
    chat_home: Path, tmp_path: Path
) -> None:
    ledger, admission = _admitted(chat_home)
    digest = digest_bytes(admission.batches[0].files["steps.parquet"])
    obj = ledger.store.path_of(digest)
    os.chmod(obj, 0o644)
    obj.write_bytes(b"damaged after admission")
    data = _write(ledger, admission, tmp_path / "data")
    assert data.hard_linked == 1  # episodes.parquet only; steps.parquet written from memory
    check_data_dir(data, ledger.store)


def test_a_store_object_replaced_by_a_link_is_not_linked(
    chat_home: Path, tmp_path: Path
) -> None:
    ledger, admission = _admitted(chat_home)
    blob = admission.batches[0].files["episodes.parquet"]
    obj = ledger.store.path_of(digest_bytes(blob))
    (tmp_path / "same-bytes").write_bytes(blob)  # even with the right bytes behind it
    obj.unlink()
    obj.symlink_to(tmp_path / "same-bytes")
    data = _write(ledger, admission, tmp_path / "data")
    assert data.hard_linked == 1
    assert not (data.path / next(p for p in data.manifest.by_path()
                                 if p.endswith("episodes.parquet"))).is_symlink()
    check_data_dir(data, ledger.store)


def test_datasets_reads_the_directory(
    written: tuple[Ledger, Admission, DataDir], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    ledger, admission, data = written
    steps = datasets.load_dataset(str(data.path), "steps", split="train",
                                  cache_dir=str(tmp_path / "hf-cache"))
    assert steps.num_rows == admission.batches[0].steps.num_rows
    assert steps[1]["role"] == "user" and steps[1]["content"] == "what is 0 + 0 ?"
    assert "extras" not in steps.column_names  # a map column: datasets has no map type
    episodes = datasets.load_dataset(str(data.path), "episodes", split="train",
                                     cache_dir=str(tmp_path / "hf-cache"))
    assert episodes["episode_id"] == [f"conv-{i}" for i in range(8)]
    check_data_dir(data, ledger.store)  # reading wrote nothing into it


def _expect_changed(data: DataDir, store: ObjectStore, *lines: str) -> DataDirChangedError:
    with pytest.raises(DataDirChangedError) as info:
        check_data_dir(data, store, what="$TRAJLEDGER_DATA_DIR")
    message = str(info.value).splitlines()
    assert message[0] == (
        f"$TRAJLEDGER_DATA_DIR was changed by the command: {len(info.value.problems)} "
        "problem(s); nothing was recorded"
    )
    assert message[1:] == list(lines)
    return info.value


def test_a_changed_file_is_named_and_the_linked_store_object_put_back(
    written: tuple[Ledger, Admission, DataDir],
) -> None:
    ledger, admission, data = written
    rel = next(p for p in data.linked if p.endswith("steps.parquet"))
    digest = data.linked[rel]
    _make_writable(data.path)
    target = data.path / rel
    raw = bytearray(target.read_bytes())
    raw[10] ^= 1
    with open(target, "r+b") as f:  # in place: the store's object shares the inode
        f.write(bytes(raw))
    got = digest_bytes(bytes(raw))
    assert ledger.store.path_of(digest).read_bytes() == bytes(raw)
    err = _expect_changed(
        data, ledger.store,
        f"data/{rel}: content hashes to {got}, want {digest}",
        f"data/{rel}: the store's object {digest[:19]}… shared the file and was changed with "
        "it; it was put back from the verified bytes",
    )
    assert len(err.repaired) == 1
    ledger.store.check_object(digest)  # intact again
    assert ledger.store.get_verified(digest) == admission.batches[0].files["steps.parquet"]


def test_a_removed_file_and_an_added_file_are_named(
    written: tuple[Ledger, Admission, DataDir],
) -> None:
    ledger, _admission, data = written
    _make_writable(data.path)
    rel = next(p for p in data.linked if p.endswith("episodes.parquet"))
    (data.path / rel).unlink()
    (data.path / "notes.txt").write_text("scratch")
    _expect_changed(
        data, ledger.store,
        f"data/{rel}: missing",
        "data/notes.txt: extra file, not in the manifest",
    )
    ledger.store.check_object(data.linked[rel])  # unlinking a hard link leaves the object


def test_an_added_link_is_a_change(written: tuple[Ledger, Admission, DataDir]) -> None:
    ledger, _admission, data = written
    _make_writable(data.path)
    (data.path / "elsewhere").symlink_to("/etc/hostname")
    _expect_changed(
        data, ledger.store,
        f"{data.path / 'elsewhere'}: is a symbolic link; only regular files are signed",
    )


def test_write_tree_copies_what_it_cannot_link_and_checks_it(
    chat_home: Path, tmp_path: Path
) -> None:
    ledger = Ledger.open(chat_home)
    blob = b"weights" * 100
    digest = ledger.store.put_bytes(blob)
    import pyarrow.fs

    # The same objects through pyarrow.fs, as a remote store is read: nothing to link.
    remote = ObjectStore.with_filesystem(pyarrow.fs.LocalFileSystem(), str(ledger.store.root))
    tree = write_tree(tmp_path / "parent", remote, [TreeFile("model/w.bin", digest, len(blob))])
    assert tree.hard_linked == 0 and not tree.verified
    assert (tmp_path / "parent" / "model" / "w.bin").read_bytes() == blob
    # A store whose object was changed: the copy does not hash, nothing is left behind.
    os.chmod(ledger.store.path_of(digest), 0o644)
    ledger.store.path_of(digest).write_bytes(b"x" * len(blob))
    with pytest.raises(Exception, match="hashes to"):
        write_tree(tmp_path / "parent2", remote, [TreeFile("w.bin", digest, len(blob))])
    assert not (tmp_path / "parent2").exists()


def test_a_file_past_the_held_bytes_is_the_commands_own_a_clone_else_a_copy(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """out58 (out56's Left): a checkpoint file past ``HELD_BYTES`` is not hard-linked (a
    command writing it in place would write the store's object, with no bytes to put it back
    from): it is cloned where the filesystem has reflinks (``FICLONE``, faked here: this
    machine's ext4 has none), else copied; either way another inode, hashed, read-only."""
    import fcntl

    from trajledger.runner import workdir

    ledger = Ledger.open(chat_home)
    blob = b"weights" * 100
    digest = ledger.store.put_bytes(blob)
    monkeypatch.setattr(workdir, "HELD_BYTES", 10)
    cloned: list[int] = []

    def clone(fd: int, request: int, src: int) -> int:
        assert request == 0x40049409
        cloned.append(fd)
        os.write(fd, os.read(src, len(blob) + 1))
        return 0

    for fake in (clone, None):
        if fake is not None:
            monkeypatch.setattr(fcntl, "ioctl", fake)
        else:
            monkeypatch.undo()  # the real ioctl: ext4 refuses it, the file is copied
            monkeypatch.setattr(workdir, "HELD_BYTES", 10)
        dest = tmp_path / f"ck-{len(cloned)}-{fake is None}"
        tree = workdir.write_tree(dest, ledger.store, [TreeFile("w.bin", digest, len(blob))])
        st, obj = os.stat(dest / "w.bin"), os.stat(ledger.store.path_of(digest))
        assert tree.hard_linked == 0 and not tree.verified
        assert (st.st_dev, st.st_ino) != (obj.st_dev, obj.st_ino)
        assert (dest / "w.bin").read_bytes() == blob and stat.S_IMODE(st.st_mode) == 0o444
    assert len(cloned) == 1


def test_the_directory_must_be_new(written: tuple[Ledger, Admission, DataDir]) -> None:
    from trajledger.ledger.errors import LedgerError

    ledger, admission, data = written
    with pytest.raises(LedgerError, match="cannot create the directory: File exists"):
        _write(ledger, admission, data.path)


def test_a_workspace_names_its_inputs_hides_the_passphrase_and_cleans_up(
    chat_home: Path, tmp_path: Path
) -> None:
    from trajledger.ledger.errors import LedgerError
    from trajledger.runner.workdir import Workspace

    ledger, admission = _admitted(chat_home)
    with Workspace(chat_home / "tmp", ledger.store) as ws:
        data = ws.add("TRAJLEDGER_DATA_DIR", lambda d: _write(ledger, admission, d), "data")
        env = ws.environment({"PATH": "/bin", "TRAJLEDGER_PASSPHRASE": "secret",
                              "TRAJLEDGER_PASSPHRASE_VENDOR": "secret",
                              "TRAJLEDGER_PASSPHRASEFILE": "/run/secret",
                              "TRAJLEDGER_PASSPHRASEFILE_VENDOR": "/run/secret"})
        assert env == {"PATH": "/bin", "TRAJLEDGER_DATA_DIR": str(data.path.absolute()),
                       "TRAJLEDGER_OUTPUT_DIR": str(ws.output.absolute())}
        assert ws.output.is_dir() and ws.outputs() == {}
        (ws.output / "m.bin").write_bytes(b"m")
        assert ws.outputs() == {"m.bin": ws.output / "m.bin"}
        ws.check()
        _make_writable(data.path)
        (data.path / "README.md").write_text("x")
        with pytest.raises(DataDirChangedError, match=r"^\$TRAJLEDGER_DATA_DIR \("):
            ws.check()
        os.chmod(data.path, 0o555)
    assert list((chat_home / "tmp").iterdir()) == []  # read-only inputs included
    # A directory of the user's: must be empty, and is kept.
    mine = tmp_path / "mine"
    with Workspace(chat_home / "tmp", ledger.store, output=mine) as ws:
        (ws.output / "m.bin").write_bytes(b"m")
    assert (mine / "m.bin").read_bytes() == b"m"
    with pytest.raises(LedgerError, match="not empty"):
        Workspace(chat_home / "tmp", ledger.store, output=mine)


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda p: p.symlink_to("/etc/passwd"), "a symbolic link"),
        (lambda p: p.symlink_to(p.parent / "sub"), "a symbolic link"),
        (lambda p: os.mkfifo(p), "not a regular file"),  # (`files`' words: out43)
    ],
    ids=["link", "link-to-directory", "fifo"],
)
def test_an_output_that_is_no_regular_file_is_named_as_the_command_knows_it(
    tmp_path: Path, make: Any, kind: str
) -> None:
    """`train -- COMMAND` whose output held a link or a FIFO said `/…/ledger/tmp/.tmp-…/output/m:
    is a symbolic link; only regular files are signed`, naming a directory removed before the
    line was read, and not that nothing was recorded (out42)."""
    from trajledger.ledger.errors import LedgerError
    from trajledger.ledger.store import ObjectStore
    from trajledger.runner.workdir import Workspace

    with Workspace(tmp_path, ObjectStore(tmp_path / "objects")) as ws:
        (ws.output / "sub").mkdir()
        (ws.output / "sub" / "model.bin").write_bytes(b"weights")
        make(ws.output / "sub" / "m")
        with pytest.raises(LedgerError) as e:
            ws.outputs()
    assert str(e.value) == (
        f"$TRAJLEDGER_OUTPUT_DIR: sub/m is {kind}: only regular files are recorded (write the "
        "file itself there, not a link to it); nothing was recorded"
    )


def test_an_output_of_empty_directories_holds_no_file(tmp_path: Path) -> None:
    """An output holding only an empty directory is no checkpoint, as an empty output is (`train`
    says the command wrote no file, exit 1): it was `no files to sign: the paths given hold no
    regular files`, exit 3 (out42)."""
    (tmp_path / "out" / "logs" / "empty").mkdir(parents=True)
    assert output_files(tmp_path / "out") == {}


def test_a_sound_output_is_walked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`output_files` walked the output with `os.walk` for a line naming a link, then again in
    `collect_files` (out42's Left): a checkpoint of many files was listed twice. Now only a
    refusal is looked at again."""
    from trajledger.ledger.files import collect_files

    out = tmp_path / "out"
    (out / "ckpt" / "shard").mkdir(parents=True)
    for i in range(3):
        (out / "ckpt" / "shard" / f"{i}.bin").write_bytes(b"w" * i)
    (out / "config.json").write_text("{}")
    walks: list[object] = []
    walk = os.walk
    monkeypatch.setattr(os, "walk", lambda *a, **k: walks.append(a) or walk(*a, **k))
    assert output_files(out) == collect_files([out])
    assert walks == []


def test_a_linked_file_written_through_then_replaced_still_puts_the_object_back(
    written: tuple[Ledger, Admission, DataDir],
) -> None:
    """rev52 finding 3: a command wrote its input in place (the store's object with it: one
    inode), then put a new file of the verified bytes where it was: the directory read as
    written, so the objects the links shared were not looked at, and the damaged object stayed
    in the store while the run was recorded. Expected: the change named, the object put back."""
    ledger, admission, data = written
    rel = next(p for p in data.linked if p.endswith("steps.parquet"))
    digest = data.linked[rel]
    _make_writable(data.path)
    target = data.path / rel
    original = target.read_bytes()
    with open(target, "r+b") as f:  # in place: the store's object shares the inode
        f.write(b"\0" * 16)
    target.unlink()
    target.write_bytes(original)  # a new inode, the verified bytes
    os.chmod(target, 0o444)
    assert ledger.store.path_of(digest).read_bytes() != original
    err = _expect_changed(
        data, ledger.store,
        f"data/{rel}: replaced by another file after the store's object it was linked to was "
        "written through it",
        f"data/{rel}: the store's object {digest[:19]}… shared the file and was changed with "
        "it; it was put back from the verified bytes",
    )
    assert len(err.repaired) == 1
    assert ledger.store.get_verified(digest) == admission.batches[0].files["steps.parquet"]


def test_a_linked_file_replaced_by_the_same_bytes_is_no_change(
    written: tuple[Ledger, Admission, DataDir],
) -> None:
    """A command that rewrites an input with the same bytes (a new file, the object untouched)
    changed nothing: no problem, the object as it was."""
    ledger, _admission, data = written
    rel = next(p for p in data.linked if p.endswith("steps.parquet"))
    _make_writable(data.path)
    target = data.path / rel
    original = target.read_bytes()
    target.unlink()
    target.write_bytes(original)
    check_data_dir(data, ledger.store)
    ledger.store.check_object(data.linked[rel])
