"""Commands that delete, through the CLI, on copies of the quickstart ledger (rev8, the outside
check of 2026-12-03's seventh round: docs/SECURITY.md).

- ``erase`` deletes no blob another artifact here still holds (the store keeps one blob per
  content): it keeps it, says so, and erasing that artifact too deletes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import testkit
from click.testing import Result

from trajledger.runner.cli import main


@pytest.fixture
def home(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path / "home")


def run(home: Path, *args: Any, code: int = 0) -> Result:
    r = testkit.new_runner().invoke(main, ["--ledger", str(home), *map(str, args)])
    assert r.exit_code == code, (args, r.output)
    return r


def stored(home: Path, digest: str) -> bool:
    h = digest.removeprefix("sha256:")
    return (home / "objects" / "sha256" / h[:2] / h[2:4] / h).is_file()


def files(home: Path, ref: str) -> dict[str, str]:
    got = json.loads(run(home, "show", ref, "--json").stdout)["files"]
    return {f["path"]: f["digest"] for f in got}


def test_erase_keeps_a_blob_another_artifact_here_holds(home: Path, tmp_path: Path) -> None:
    """The same rollouts recorded twice, under two policies: two batches, one steps.parquet
    blob (the quickstart's ``cartpole-random``, whose export they are, may hold it too).
    Erasing ``copy-a`` deleted it, and ``copy-b``, which nobody erased, then verified as
    "erased" by ``copy-a``'s record (exit 0), no word at the erasure but "N blob(s) deleted";
    a dataset of it was admitted without it (rev8). Now the blob is kept while another
    artifact holding it is not erased, the erasure says so and its record lists only what it
    deleted; erasing the holders too deletes it."""
    run(home, "export", "cartpole-random", "--format", "parquet", "--out", tmp_path / "ex")
    for name in ("copy-a", "copy-b"):
        run(home, "record", tmp_path / "ex" / "steps.parquet", "--env", "cartpole@1",
            "--policy", f"p-{name}", "--name", name, "--key", "vendor")  # fmt: skip
    a, b = files(home, "copy-a"), files(home, "copy-b")
    shared = a["steps.parquet"]
    assert b["steps.parquet"] == shared and a["episodes.parquet"] != b["episodes.parquet"]
    holders = {ref: json.loads(run(home, "show", ref, "--json").stdout)["digest"]
               for ref in ("copy-b", "cartpole-random")}  # fmt: skip
    labels = {f"rollout-batch {ref} ({d[:19]}…)" for ref, d in holders.items()}

    r = run(home, "erase", "copy-a", "--key", "vendor", "--reason", "consent", "--json")
    out = json.loads(r.stdout)
    kept = out["kept"]
    assert shared in kept and set(kept.values()) <= labels, kept
    assert r.stderr.splitlines()[0] == (
        f"WARNING: copy-a: {len(kept)} blob(s) kept: also a file of "
        f"{', '.join(sorted(set(kept.values())))} (not erased; the store keeps one blob per "
        "content): erase that too to delete them"), r.stderr
    said = json.loads(run(home, "show", out["envelope"], "--json").stdout)["predicate"]
    assert a["episodes.parquet"] in said["blobs"] and not set(kept) & set(said["blobs"]), said
    assert out["deleted"] == len(said["blobs"])  # the record lists what it deleted
    assert stored(home, shared)
    for ref in holders:
        r = run(home, "verify", ref)
        assert "erased" not in r.stdout + r.stderr, r.output
    assert "erased" in run(home, "verify", "copy-a").stderr

    for ref in holders:
        run(home, "erase", ref, "--key", "vendor", "--reason", "consent")
    assert not stored(home, shared)
    for ref in ("copy-a", *holders):
        assert "erased" in run(home, "verify", ref).stderr


def test_init_refuses_a_store_another_ledger_fills(tmp_path: Path, passphrase: str) -> None:
    """``init --store DIR`` took a store directory outside the ledger whatever it held: two
    ledgers on one store, and the first ``gc --yes`` of either removed every object of the
    other as an orphan (its log names none of them: ``fsck`` of the other then failed on
    every record); an ``erase`` in one deletes blobs the other holds. Now a store directory
    that already holds objects is refused (exit 3, one line, nothing made); an empty or new
    one is taken."""
    shared = tmp_path / "shared"
    run(tmp_path / "a", "init", "--origin", "t/a", "--store", shared)
    run(tmp_path / "a", "key", "new", "k")
    run(tmp_path / "a", "env", "register", "e", "--version", "1", "--gym-id", "CartPole-v1",
        "--key", "k")  # fmt: skip
    held = sorted(p.name for p in shared.rglob("*") if p.is_file())
    assert held
    for store in (shared, Path("..") / "shared"):
        r = run(tmp_path / "b", "init", "--origin", "t/b", "--store", store, code=3)
        assert r.stderr == (
            f"FAIL: --store {store}: already holds objects (another ledger's?): a ledger's "
            "'gc --yes' removes what its own log does not name, so two ledgers cannot share a "
            "store; give an empty or new directory\n"), r.stderr
        assert not (tmp_path / "b").exists()
    assert sorted(p.name for p in shared.rglob("*") if p.is_file()) == held
    run(tmp_path / "c", "init", "--origin", "t/c", "--store", tmp_path / "empty")
    run(tmp_path / "a", "fsck")


def test_an_erase_that_cannot_delete_says_what_stands(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The erasure record is appended before the blobs are deleted. With the store read-only
    from then on (EROFS), ``erase`` printed only ``FAIL: <object path>: Read-only file
    system`` (exit 3): not that the erasure now stands, nor that the data is all still there,
    nor what to do (``verify`` says "data deleted" and ``fsck`` is content). Now the line says
    so, and running the same erase again deletes them."""
    import errno
    import os

    unlink = os.unlink

    def read_only(path: Any, *, dir_fd: int | None = None) -> None:
        if dir_fd is not None or "objects" in str(path):  # (the store unlinks by descriptor)
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        unlink(path)

    blobs = set(files(home, "cartpole-holdout").values())
    size = json.loads(run(home, "log", "info", "--json").stdout)["size"]
    with monkeypatch.context() as m:
        m.setattr(os, "unlink", read_only)
        r = run(home, "erase", "cartpole-holdout", "--key", "vendor", "--reason", "consent",
                code=3)  # fmt: skip
    [line] = r.stderr.splitlines()
    assert line.startswith(
        f"FAIL: rollout-batch cartpole-holdout: the erasure is recorded (log index {size}) but "
        "3 of its 3 blob(s) are still stored: Read-only file system ("), line
    assert line.endswith("); run the same 'trajledger erase' again once the store is writable: "
                         "it deletes them"), line
    assert all(stored(home, b) for b in blobs)
    r = run(home, "erase", "cartpole-holdout", "--key", "vendor", "--reason", "consent")
    assert "3 blob(s) deleted" in r.stderr
    assert not any(stored(home, b) for b in blobs)


def test_fsck_names_an_erasure_that_did_not_finish(
    home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A kill between the erasure record and the deletions leaves every blob stored: ``verify``
    then says "data deleted" and ``fsck`` said nothing (exit 0, no word), so erased data stayed
    unnoticed. Now ``fsck`` warns, naming the erasure and what to do (still exit 0: nothing
    the log names is missing or damaged); a blob kept because an artifact that is not erased
    holds it is not named."""
    from trajledger.ledger import status

    blobs = set(files(home, "cartpole-holdout").values())
    size = json.loads(run(home, "log", "info", "--json").stdout)["size"]
    with monkeypatch.context() as m:
        m.setattr(status, "delete_erased", lambda *_a, **_k: 0)  # killed right after the record
        run(home, "erase", "cartpole-holdout", "--key", "vendor", "--reason", "consent")
    r = run(home, "fsck")
    assert (
        f"WARNING: 3 blob(s) that the erasure record(s) at log index {size} list are still "
        "stored, and no artifact that is not erased holds them: an erase that did not finish "
        "(run the same 'trajledger erase' again to delete them), or another log's erasure this "
        "ledger did not take\n") in r.stderr, r.stderr
    assert "unerased\t3\n" in r.stdout
    unerased = json.loads(run(home, "fsck", "--json").stdout)["unerased"]
    assert set(unerased) >= blobs and set(unerased.values()) == {size}
    run(home, "erase", "cartpole-holdout", "--key", "vendor", "--reason", "consent")
    r = run(home, "fsck")
    assert "WARNING" not in r.stderr and "unerased\t0\n" in r.stdout, r.output

    # Kept for another artifact: not an unfinished erasure.
    run(home, "export", "cartpole-random", "--format", "parquet", "--out", tmp_path / "ex")
    for name in ("copy-a", "copy-b"):
        run(home, "record", tmp_path / "ex" / "steps.parquet", "--env", "cartpole@1",
            "--policy", f"p-{name}", "--name", name, "--key", "vendor")  # fmt: skip
    assert "kept" in run(home, "erase", "copy-a", "--key", "vendor", "--reason", "legal").stderr
    r = run(home, "fsck")
    assert "WARNING" not in r.stderr and "unerased\t0\n" in r.stdout, r.output


def test_erasing_a_statement_says_so(home: Path) -> None:
    """``erase quickstart#1`` (the trust policy, a statement with no files) read the policy's
    JSON as a manifest and failed with ``FAIL: manifest: mediaType is None, want
    'application/vnd.trajledger.manifest.v1+json'``; now it says what it is. Exit 1, nothing
    recorded, nothing deleted."""
    before = testkit.snapshot(home)
    r = run(home, "erase", "quickstart#1", "--key", "approver-a", "--reason", "legal", code=1)
    assert r.stderr == (
        "FAIL: trust-policy quickstart#1: is a statement, not an artifact with files; nothing to "
        "erase (revoke it, or erase the artifact whose data it is about)\n"), r.stderr
    assert testkit.snapshot(home) == before


def _lock_is_free(home: Path) -> bool:
    """Whether another open file description could take the log's writer lock now."""
    import fcntl
    import os

    fd = os.open(home / "log" / ".state" / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # (closing releases a lock taken here)
    return True


def _two_copies(home: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """The export of ``cartpole-random`` recorded as ``copy-a``: its ``steps.parquet`` blob,
    and every other artifact here that holds it (erased here, so that only ``copy-a`` and
    what the test records hold it)."""
    run(home, "export", "cartpole-random", "--format", "parquet", "--out", tmp_path / "ex")
    run(home, "record", tmp_path / "ex" / "steps.parquet", "--env", "cartpole@1",
        "--policy", "p-copy-a", "--name", "copy-a", "--key", "vendor")  # fmt: skip
    shared = files(home, "copy-a")["steps.parquet"]
    others = [ref for ref in ("cartpole-random",) if files(home, ref)["steps.parquet"] == shared]
    for ref in others:
        run(home, "erase", ref, "--key", "vendor", "--reason", "consent")
    assert stored(home, shared)
    return shared, others


def test_a_record_racing_an_erase_of_the_same_bytes_never_loses_its_file(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``erase`` decided what to keep before its record and deleted after it, outside the
    log's lock: a ``record`` of the same rollouts (another policy: another batch) that found
    the blob stored, then an erase of ``copy-a`` deciding and deleting before the record's
    append, left the new batch logged without its ``steps.parquet`` (it verified "erased" by
    ``copy-a``'s erasure). Played deterministically: the erase runs at the record's racy
    point, after its blobs are stored and before its append. Now the record re-checks its blobs
    under the lock and is refused (nothing logged; recording again is refused as erased
    rollouts), and the erase decides and deletes holding the lock (checked from outside)."""
    from trajledger.ledger import status
    from trajledger.ledger.store import ObjectStore

    shared, _others = _two_copies(home, tmp_path)
    held: list[bool] = []
    kept_blobs, delete_erased = status.kept_blobs, status.delete_erased

    def deciding(*a: Any) -> dict[str, str]:
        held.append(not _lock_is_free(home))
        return kept_blobs(*a)

    def deleting(*a: Any, **k: Any) -> int:
        held.append(not _lock_is_free(home))  # (after the record's own append: still held)
        return delete_erased(*a, **k)

    monkeypatch.setattr(status, "kept_blobs", deciding)
    monkeypatch.setattr(status, "delete_erased", deleting)
    stored_all, erased = ObjectStore.sync_names, []

    def racing(self: ObjectStore, *a: Any, **k: Any) -> Any:
        got = stored_all(self, *a, **k)  # (the record's files are stored: it appends next)
        if not erased:  # the erase of copy-a, between the record's storing and its append
            erased.append(True)
            run(home, "erase", "copy-a", "--key", "vendor", "--reason", "consent")
        return got

    size = json.loads(run(home, "log", "info", "--json").stdout)["size"]
    with monkeypatch.context() as m:
        m.setattr(ObjectStore, "sync_names", racing)
        r = run(home, "record", tmp_path / "ex" / "steps.parquet", "--env", "cartpole@1",
                "--policy", "p-copy-b", "--name", "copy-b", "--key", "vendor", code=1)
    assert held == [True, True], held
    [line] = r.stderr.splitlines()  # (the steps, or the features file computed from them)
    assert line.startswith("FAIL: blob sha256:") and line.endswith(
        f"…: the erasure at log index {size}, recorded while this record was being made, "
        "deleted it; recording it now would restore erased data: nothing was recorded"), line
    assert json.loads(run(home, "log", "info", "--json").stdout)["size"] == size + 1
    assert not stored(home, shared)
    run(home, "fsck")
    r = run(home, "record", tmp_path / "ex" / "steps.parquet", "--env", "cartpole@1",
            "--policy", "p-copy-b", "--name", "copy-b", "--key", "vendor", code=1)
    assert "these rollouts were erased" in r.stderr, r.stderr


def test_a_record_whose_blob_vanished_before_its_append_is_refused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blob deleted between a record's storing and its append (``gc --yes --min-age 0``, or
    anything else that is not an erasure of this log) was logged as the record's file, missing.
    Now refused under the lock (exit 3, one line), nothing logged; recording again works."""
    from trajledger.ledger.store import ObjectStore

    run(home, "export", "cartpole-random", "--format", "parquet", "--out", tmp_path / "ex")
    before = {p.name for p in (home / "objects").rglob("*") if p.is_file()}
    stored_all, gone = ObjectStore.sync_names, []

    def vanishing(self: ObjectStore, *a: Any, **k: Any) -> Any:
        got = stored_all(self, *a, **k)  # (the record's files are stored: it appends next)
        for p in (home / "objects").rglob("*"):
            if p.is_file() and p.name not in before:  # (the new episodes table, at least)
                gone.append(f"sha256:{p.name}")
                p.unlink()
        return got

    size = json.loads(run(home, "log", "info", "--json").stdout)["size"]
    args = ("record", tmp_path / "ex" / "steps.parquet", "--env", "cartpole@1", "--policy",
            "p-new", "--name", "new", "--key", "vendor")
    with monkeypatch.context() as m:
        m.setattr(ObjectStore, "sync_names", vanishing)
        r = run(home, *args, code=3)
    assert r.stderr == (
        f"FAIL: blob {min(gone)[:19]}…: deleted from the store while this record was being "
        f"made ({len(gone)} blob(s); by 'gc --yes --min-age 0'?); nothing was recorded: record "
        "it again\n"), r.stderr
    assert json.loads(run(home, "log", "info", "--json").stdout)["size"] == size
    run(home, *args)
    run(home, "fsck")


def test_erasing_twice_records_once(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Erasing an artifact again appended a second erasure record (``0 blob(s) deleted``), one
    per attempt. Now it is refused (exit 1, nothing recorded), naming the first erasure; an
    erase that did not finish is still finished by running it again (no second record,
    test_an_erase_that_cannot_delete_says_what_stands); and a blob the first erasure kept for
    another artifact, erased since, makes a new record listing just those."""
    size = json.loads(run(home, "log", "info", "--json").stdout)["size"]
    run(home, "erase", "cartpole-holdout", "--key", "vendor", "--reason", "consent")
    before = testkit.snapshot(home)
    r = run(home, "erase", "cartpole-holdout", "--key", "vendor", "--reason", "legal", code=1)
    assert r.stderr == (
        f"FAIL: rollout-batch cartpole-holdout: already erased (log index {size}) and every "
        "blob that erasure lists is deleted; nothing to erase, nothing recorded\n"), r.stderr
    assert testkit.snapshot(home) == before

    # copy-a's erasure keeps the blob copy-b holds; copy-b's erasure is killed before it
    # deletes: copy-a's erase again deletes the blob, recording a new erasure of it alone.
    from trajledger.ledger import status

    shared, _others = _two_copies(home, tmp_path)
    run(home, "record", tmp_path / "ex" / "steps.parquet", "--env", "cartpole@1",
        "--policy", "p-copy-b", "--name", "copy-b", "--key", "vendor")  # fmt: skip
    first = json.loads(run(home, "erase", "copy-a", "--key", "vendor", "--reason", "consent",
                           "--json").stdout)  # fmt: skip
    assert shared in first["kept"]
    with monkeypatch.context() as m:
        m.setattr(status, "delete_erased", lambda *_a, **_k: 0)
        run(home, "erase", "copy-b", "--key", "vendor", "--reason", "consent")
    assert stored(home, shared)
    again = json.loads(run(home, "erase", "copy-a", "--key", "vendor", "--reason", "consent",
                           "--json").stdout)  # fmt: skip
    kept = sorted(first["kept"])  # (the steps, and the features file computed from them)
    assert again["new"] and again["logIndex"] > first["logIndex"]
    assert again["deleted"] == len(kept) and not again["kept"], again
    said = json.loads(run(home, "show", again["envelope"], "--json").stdout)["predicate"]
    assert said["blobs"] == kept, said
    assert not any(stored(home, b) for b in kept)
    r = run(home, "erase", "copy-a", "--key", "vendor", "--reason", "consent", code=1)
    assert f"already erased (log index {first['logIndex']})" in r.stderr, r.stderr
