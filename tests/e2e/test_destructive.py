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
    import pathlib

    unlink = pathlib.Path.unlink

    def read_only(self: pathlib.Path, missing_ok: bool = False) -> None:
        if "objects" in self.parts:
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        unlink(self, missing_ok=missing_ok)

    blobs = set(files(home, "cartpole-holdout").values())
    size = json.loads(run(home, "log", "info", "--json").stdout)["size"]
    with monkeypatch.context() as m:
        m.setattr(pathlib.Path, "unlink", read_only)
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
        m.setattr(status, "delete_erased", lambda *_a: 0)  # killed right after the record
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
