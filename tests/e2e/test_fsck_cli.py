"""``trajledger fsck``, ``fsck --repair --from BUNDLE|LEDGER`` and ``gc`` on a quickstart ledger;
a planted object is found and repaired (by the next put and by ``fsck --repair``); leftovers of
killed writers are removed by the next writer, only when no live writer can own them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import tamperkit as tk
import testkit
from click.testing import Result
from testkit import new_runner

from trajledger import Ledger
from trajledger.ledger.catalog import Catalog
from trajledger.ledger.fs import STALE_AFTER, temp_name
from trajledger.runner.cli import main
from trajledger.verify.manifest import Manifest


def run(home: Path, *args: str | Path) -> Result:
    return new_runner().invoke(main, ["--ledger", str(home), *map(str, args)])


def export_final(home: Path, final: str) -> tuple[str, Path]:
    """The final checkpoint, and a bundle of it exported beside the ledger."""
    bundle = home.parent / "final.tar.zst"
    r = run(home, "export", final, "--out", bundle)
    assert r.exit_code == 0, r.output
    return final, bundle


@pytest.fixture(scope="module")
def quick(
    quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str, Path]:
    """A quickstart ledger, its final checkpoint, and an exported bundle of it."""
    t = testkit.extend_template(tmp_path_factory.mktemp("fsck"), quickstart_template, export_final)
    return t.home, *t.value


@pytest.fixture
def home(quick: tuple[Path, str, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "ledger"
    shutil.copytree(quick[0], copy)
    tk.pin_log(copy)
    return copy


def snapshot(d: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(d)): p.read_bytes()
        for p in sorted(d.rglob("*"))
        if p.is_file() and p.relative_to(d).parts[0] != "index"
    }


def blob_of(home: Path, kind: str) -> tuple[str, Path]:
    """A data blob of the first artifact of ``kind`` (digest, path in the store)."""
    ledger = Ledger.open(home)
    item = next(i for i in Catalog(ledger).items() if i.kind == kind)
    manifest = Manifest.from_json(json.loads(ledger.store.get(item.digest)))
    digest = manifest.files[0].digest
    return digest, ledger.store.path_of(digest)


def plant(path: Path, data: bytes) -> None:
    os.chmod(path, 0o644)
    path.write_bytes(data)


def test_fsck_of_a_sound_ledger_reads_only(home: Path) -> None:
    before = snapshot(home)
    r = run(home, "fsck", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["missing"] == {} and doc["damaged"] == {}
    assert doc["checked"] == doc["named"] - doc["absent_optional"] > 20
    assert r.stderr.startswith("OK: ledger ")
    assert snapshot(home) == before


def test_fsck_finds_missing_damaged_orphans_and_leftovers(home: Path) -> None:
    digest, path = blob_of(home, "rollout-batch")
    plant(path, b"planted")
    ledger = Ledger.open(home)
    env = next(i for i in Catalog(ledger).items() if i.kind == "environment")
    ledger.store.path_of(env.envelope).unlink()
    orphan = ledger.store.put_bytes(b"nobody names me")
    dead = home / "objects" / "sha256" / temp_name().replace(f"-{os.getpid()}-", "-999999999-")
    dead.write_bytes(b"half")
    before = snapshot(home)
    r = run(home, "fsck")
    assert r.exit_code == 1, r.output
    assert f"FAIL: object {digest}: damaged: blob " in r.stderr
    assert f"FAIL: object {env.envelope}: missing (envelope of entry {env.index})" in r.stderr
    assert "restore them with 'trajledger fsck --repair --from BUNDLE|LEDGER'" in r.stderr
    assert "WARNING: 1 orphan object(s) (15 bytes)" in r.stderr
    assert "WARNING: 1 leftover(s) of killed writers" in r.stderr
    assert snapshot(home) == before
    # gc: a dry run lists them; the orphan is too young to go; --yes removes the leftover.
    r = run(home, "gc", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["young"] == 1
    r = run(home, "gc", "--min-age", "0", "--json")
    doc = json.loads(r.stdout)
    assert doc["orphans"] == {orphan: 15} and doc["leftovers"] == [str(dead)]
    assert not doc["applied"] and dead.exists() and ledger.store.exists(orphan)
    r = run(home, "gc", "--min-age", "0", "--yes")
    assert r.exit_code == 0
    assert "OK: removed 1 orphan object(s) (15 bytes), 1 leftover(s)" in r.stderr
    assert not dead.exists() and not ledger.store.exists(orphan)
    assert ledger.store.exists(digest)  # a damaged object is not an orphan: repair, not gc


def test_a_planted_object_is_repaired_by_the_next_put(home: Path, tmp_path: Path) -> None:
    src = tmp_path / "data.txt"
    src.write_text("the true bytes\n")
    r = run(home, "attest", src, "--key", "vendor")
    assert r.exit_code == 0, r.output
    ledger = Ledger.open(home)
    digest = "sha256:" + __import__("hashlib").sha256(src.read_bytes()).hexdigest()
    plant(ledger.store.path_of(digest), b"the false bytes\n")
    r = run(home, "log", "verify")
    assert r.exit_code == 1 and digest in r.stderr, r.output
    r = run(home, "attest", src, "--key", "vendor")  # the next put of the true bytes
    assert r.exit_code == 0, r.output
    assert ledger.store.path_of(digest).read_bytes() == src.read_bytes()
    assert run(home, "log", "verify").exit_code == 0


@pytest.mark.parametrize("source", ["bundle", "ledger"])
def test_fsck_repair_from_a_bundle_or_a_ledger(
    home: Path, quick: tuple[Path, str, Path], tmp_path: Path, source: str
) -> None:
    digest, path = blob_of(home, "rollout-batch")
    good = path.read_bytes()
    plant(path, b"\x00" * len(good))  # same size: only re-hashing finds it
    ledger = Ledger.open(home)
    manifest_digest = next(i.digest for i in Catalog(ledger).items() if i.kind == "dataset")
    ledger.store.path_of(manifest_digest).unlink()
    final = quick[1]
    assert run(home, "verify", final).exit_code == 1
    src = quick[2] if source == "bundle" else quick[0]
    r = run(home, "fsck", "--repair", "--from", src)
    assert r.exit_code == 0, r.output
    assert f"OK: object {digest}: restored from {src}" in r.stderr
    assert f"OK: object {manifest_digest}: restored from {src}" in r.stderr
    assert path.read_bytes() == good
    assert run(home, "verify", final).exit_code == 0
    assert run(home, "fsck").exit_code == 0


def test_fsck_repair_refuses_other_bytes_and_never_restores_erased_blobs(
    home: Path, tmp_path: Path
) -> None:
    digest, path = blob_of(home, "rollout-batch")
    other = tmp_path / "other"
    shutil.copytree(home, other)
    plant(Ledger.open(other).store.path_of(digest), b"also wrong")
    path.unlink()
    r = run(home, "fsck", "--repair", "--from", other)
    assert r.exit_code == 1
    assert f"FAIL: object {digest}: not in {other} (or not with these bytes)" in r.stderr
    assert not path.exists()
    r = run(home, "fsck", "--repair")
    assert r.exit_code == 2 and "--repair needs --from" in r.stderr
    # Erase the batch: its blobs are gone for good, and fsck counts them as erased.
    batch = next(i for i in Catalog(Ledger.open(home)).items() if i.kind == "rollout-batch")
    r = run(home, "erase", batch.digest, "--key", "vendor", "--reason", "consent")
    assert r.exit_code == 0, r.output
    r = run(home, "fsck", "--repair", "--from", tmp_path / "other", "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["erased"] >= 1, r.output
    assert not path.exists()


def test_fsck_repair_names_a_directory_in_the_way_of_an_object(
    home: Path, quick: tuple[Path, str, Path]
) -> None:
    """Review left33, finding 6 (rev29's Left): a directory in place of an object file made
    ``fsck --repair`` say ``FAIL: COPY: sha256:…: cannot store: Is a directory``, naming the
    copy it restores from, which is fine, not the directory in the way. Now the line names the
    directory and what to do; nothing in it is touched, and once it is moved away the object is
    restored."""
    digest, path = blob_of(home, "rollout-batch")
    path.unlink()
    path.mkdir()
    (path / "theirs").write_bytes(b"not the ledger's")
    r = run(home, "fsck", "--repair", "--from", quick[2])
    assert r.exit_code == 3, r.output
    assert r.stderr.splitlines() == [
        f"FAIL: {path}: a directory is in the way of object {digest[:19]}…, which is a file: "
        "it is none of the ledger's; move it out of the store, then run again"], r.stderr
    assert (path / "theirs").read_bytes() == b"not the ledger's"
    shutil.move(path, home.parent / "moved")
    r = run(home, "fsck", "--repair", "--from", quick[2])
    assert r.exit_code == 0 and f"OK: object {digest}: restored from " in r.stderr, r.output


def test_fsck_finds_a_lookup_cache_that_disagrees_with_the_log(home: Path) -> None:
    from trajledger.ledger.log import CACHE_DIR, EntrySpec

    ledger = Ledger.open(home)
    vendor = ledger.keys.signer("vendor")
    ledger.log.append(  # enough entries for the cache to write a run
        [
            EntrySpec("approval", f"sha256:{i:064x}", f"sha256:{i + 10**6:064x}", (vendor.keyid,))
            for i in range(1100)
        ]
    )
    cache = home / "index" / CACHE_DIR
    name = json.loads((cache / "MANIFEST").read_text())["runs"][0][2]
    data = bytearray((cache / name).read_bytes())
    data[40:48] = b"\xff" * 8  # the smallest envelope key is no longer any entry's
    (cache / name).write_bytes(bytes(data))
    r = run(home, "fsck")
    assert r.exit_code == 1, r.output
    assert "lookup cache" in r.stderr and "delete it (it is rebuilt" in r.stderr


def test_fsck_finds_a_trust_state_that_disagrees_with_the_log_and_reindex_rebuilds_it(
    home: Path,
) -> None:
    import sqlite3

    ledger = Ledger.open(home)
    state = ledger.trust_state()
    names = [(r.name, r.version) for r in state.named()]
    row = next(r for r in state.named() if names.count((r.name, r.version)) == 1)
    ref = f"{row.name}@{row.version}"
    r = run(home, "show", ref)
    assert r.exit_code == 0, r.output
    db = sqlite3.connect(state.path / "state.sqlite")
    with db:
        db.execute("UPDATE names SET subject = ? WHERE idx = ?", ("sha256:" + "0" * 64, row.index))
    db.close()
    r = run(home, "fsck")
    assert r.exit_code == 1, r.output
    assert f"name {ref} points at entry {row.index}, which is a {row.kind} of" in r.stderr
    assert "rebuild it with 'trajledger reindex'" in r.stderr
    r = run(home, "show", ref)
    assert r.exit_code == 1 and "rebuild it with 'trajledger reindex'" in r.stderr, r.output
    before = snapshot(home / "log")
    r = run(home, "reindex")
    assert r.exit_code == 0, r.output
    assert snapshot(home / "log") == before
    assert run(home, "fsck").exit_code == 0
    assert run(home, "show", ref).exit_code == 0


def test_the_next_writer_removes_only_dead_leftovers(home: Path, tmp_path: Path) -> None:
    dead_pid = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    objects = home / "objects" / "sha256"
    dead = objects / temp_name().replace(f"-{os.getpid()}-", f"-{dead_pid}-")
    alive = objects / temp_name()  # this process: a live writer
    old_tmp = home / "tmp" / "tmpold123"
    young_tmp = home / "tmp" / "tmpyoung45"
    for p in (dead, alive):
        p.write_bytes(b"half")
    for d in (old_tmp, young_tmp):
        d.mkdir(parents=True)
        (d / "steps.parquet").write_bytes(b"half")
    past = time.time() - STALE_AFTER - 60
    for p in (old_tmp, old_tmp / "steps.parquet"):
        os.utime(p, (past, past))
    src = tmp_path / "x.txt"
    src.write_text("x\n")
    r = run(home, "attest", src, "--key", "vendor")  # the next writer
    assert r.exit_code == 0, r.output
    assert [p.exists() for p in (dead, alive, old_tmp, young_tmp)] == [False, True, False, True]


# -- gc against a writer that keeps an orphan (review of issue 21) ---------------------------------


def _old_orphan(home: Path, data: bytes) -> tuple[Ledger, str, Path]:
    ledger = Ledger.open(home)
    digest = ledger.store.put_bytes(data)
    path = ledger.store.path_of(digest)
    two_days_ago = time.time() - 2 * 86400
    os.utime(path, (two_days_ago, two_days_ago))
    return ledger, digest, path


@pytest.mark.parametrize("keep", ["put_bytes", "put_file"])
def test_gc_does_not_remove_an_orphan_a_writer_keeps_meanwhile(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: str
) -> None:
    """An orphan gc chose is stored again by a writer (which finds it intact and keeps it, to
    name it in its next entry) before gc removes it under the log's lock: gc leaves it."""
    from trajledger.ledger import fsck as lib

    data = b"an old orphan a record is about to name"
    ledger, digest, path = _old_orphan(home, data)
    source = tmp_path / "source"
    source.write_bytes(data)
    log = ledger.log
    exclusive = log.exclusive

    def writer_first() -> Any:  # the writer keeps the object between gc's choice and its lock
        if keep == "put_bytes":
            assert ledger.store.put_bytes(data) == digest
        else:
            assert ledger.store.put_file(source).digest == digest
        return exclusive()

    monkeypatch.setattr(log, "exclusive", writer_first)
    result = lib.gc(ledger, apply=True)
    assert result.applied and digest not in result.orphans
    assert path.read_bytes() == data
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]


def test_gc_removes_an_orphan_nobody_touched(home: Path) -> None:
    from trajledger.ledger import fsck as lib

    ledger, digest, path = _old_orphan(home, b"an old orphan nobody wants")
    result = lib.gc(ledger, apply=True)
    assert result.orphans == {digest: 26} and not path.exists()
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]


def test_a_writer_that_touches_an_orphan_gc_set_aside_stores_it_again(home: Path) -> None:
    """The other order: gc has renamed the orphan aside when the writer looks for it; the
    writer finds nothing there and stores the bytes again, and gc, seeing the time it chose
    the orphan by, removes only its own copy set aside."""
    ledger, digest, path = _old_orphan(home, b"set aside")
    mtime = path.stat().st_mtime
    real_rename = os.rename

    def rename_then_writer(src: Any, dst: Any, **kw: Any) -> None:
        real_rename(src, dst, **kw)
        assert ledger.store.put_bytes(b"set aside") == digest  # the writer, meanwhile

    import trajledger.ledger.store as store_module

    with pytest.MonkeyPatch.context() as m:
        m.setattr(store_module.os, "rename", rename_then_writer)
        assert ledger.store.delete_unchanged(digest, mtime)
    assert path.read_bytes() == b"set aside"


def test_files_in_the_store_that_are_not_objects_are_not_read_as_objects(home: Path) -> None:
    # A 64-character name that is not a digest made fsck and gc fail whole (exit 1, 'object
    # digest: ... is not of the form sha256:<64 lowercase hex>'); a blob's bytes under another
    # directory are not that object (never reported or removed as an orphan).
    ledger = Ledger.open(home)
    orphan = ledger.store.put_bytes(b"nobody names me")
    stray = home / "objects" / "sha256" / "zz" / "zz" / ("g" * 64)
    misplaced = home / "objects" / "sha256" / "00" / "00" / orphan[7:]
    for p in (stray, misplaced):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"not it")
    r = run(home, "fsck", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["orphans"] == {orphan: 15}
    r = run(home, "gc", "--min-age", "0", "--yes")
    assert r.exit_code == 0 and "removed 1 orphan object(s) (15 bytes)" in r.stderr, r.output
    assert stray.exists() and misplaced.exists() and not ledger.store.exists(orphan)


def test_fsck_names_each_directory_others_may_write(home: Path) -> None:
    """A ledger made under a lax umask before rev9's fix keeps its 0777 (0775) inner
    directories: log tiles, the store's fan-out; only the few read by fixed name are refused
    at open, and ``fsck`` said nothing (others could delete or swap evidence there). Now it
    warns for each, with the chmod to run (exit 0: no data is damaged), and lists them in
    ``--json``; a sticky directory, like /tmp, passes."""
    tiles = sorted(p for p in (home / "log").rglob("*") if p.is_dir() and ".state" not in p.parts)
    fanout = sorted(p for p in (home / "objects" / "sha256").iterdir() if p.is_dir())
    lax = {tiles[-1]: 0o777, fanout[0]: 0o775, fanout[1]: 0o1777}
    for path, mode in lax.items():
        path.chmod(mode)
    r = run(home, "fsck")
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[:2] == [
        f"WARNING: {p}: writable by {who} (a ledger made under a lax umask): they could delete "
        f"or replace evidence there; run 'chmod {bits}-w {p}'"
        for p, who, bits in sorted([(str(tiles[-1]), "its group and other users", "go"),
                                    (str(fanout[0]), "its group", "g")])]
    assert r.stdout.endswith("writable dirs\t2\n"), r.stdout
    doc = json.loads(run(home, "fsck", "--json").stdout)
    assert doc["writable"] == {str(tiles[-1]): "go", str(fanout[0]): "g"}
    from dataclasses import replace

    from trajledger.ledger.fsck import writable_dirs
    from trajledger.ledger.home import LedgerHome

    shared = LedgerHome.open(home)  # a ledger shared through its group: only others count
    shared.config = replace(shared.config, group_writable=True)
    assert writable_dirs(shared) == {str(tiles[-1]): "o"}
    for path in lax:
        path.chmod(0o755)
    r = run(home, "fsck")
    assert "WARNING" not in r.stderr and r.stdout.endswith("writable dirs\t0\n"), r.output
