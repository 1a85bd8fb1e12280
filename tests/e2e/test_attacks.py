"""Issue 9, one test per attack, through the command line, on a quickstart ledger.

The attacker can write the ledger directory's files but has no passphrase. Each attack is refused
with exit 1 and a message naming what is wrong, and leaves the evidence (``log/``, ``objects/``,
``keys/``) exactly as the attacker left it: no command repairs, deletes or re-signs anything.
(The log's own attacks, treeState rollback and a deleted or foreign checkpoint, are in
tests/e2e/test_log_tamper.py; import rollback and fork in tests/e2e/test_exchange_cli.py.)
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from trajledger.ledger.home import Ledger
from trajledger.runner.cli import main
from trajledger.verify.log_entry import LogEntry


def run(home: Path, *args: str | Path) -> Result:
    return CliRunner().invoke(main, ["--ledger", str(home), *map(str, args)])


def evidence(home: Path) -> dict[str, str]:
    """Every evidence file's sha256 (derived caches under index/ excluded)."""
    out = {}
    for d in ("log", "objects", "keys", "log-key"):
        for p in sorted((home / d).rglob("*")):
            if p.is_file() and p.name != "lock":
                out[p.relative_to(home).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A quickstart ledger, then: a successor policy (serial 2) and a revocation of a batch
    that is not in the final checkpoint's lineage (so the checkpoint still verifies)."""
    home = tmp_path_factory.mktemp("attacks") / "demo"
    r = CliRunner().invoke(main, ["quickstart", str(home), "--episodes", "10"])
    assert r.exit_code == 0, r.output
    ckpt = r.stdout.strip().splitlines()[-1]
    policy = home / "policy.toml"
    two = home / "policy-2.toml"
    two.write_text(policy.read_text().replace("serial = 1", "serial = 2"))
    r = run(home, "policy", "set", two, "--key", "approver-a", "--key", "approver-b")
    assert r.exit_code == 0, r.output
    r = run(home, "revoke", "cartpole-holdout@1", "--key", "approver-a", "--reason", "leak")
    assert r.exit_code == 0, r.output
    assert run(home, "verify", ckpt).exit_code == 0
    return home, ckpt


@pytest.fixture
def demo(quickstart: tuple[Path, str], tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A copy of the quickstart ledger whose log key this test's user pinned ahead (they know
    the ledger; their state holds no floor or index yet)."""
    from trajledger.ledger.trust_state import TrustState

    home = tmp_path / "demo"
    shutil.copytree(quickstart[0], home, symlinks=True)
    vkey = Ledger.open(home).log_vkey()
    assert vkey is not None
    TrustState.open(vkey).pin("test")
    yield home, quickstart[1]


def last_of(home: Path, kind: str) -> tuple[int, LogEntry]:
    ledger = Ledger.open(home)
    state = ledger.trust_state()
    i = state.of_kind(kind)[-1]
    entry = state.entry(i)
    assert entry is not None
    return i, entry


def object_path(home: Path, digest: str) -> Path:
    h = digest[7:]
    return home / "objects" / "sha256" / h[:2] / h[2:4] / h


def damage(path: Path, how: str) -> None:
    path.chmod(0o644)
    if how == "deleted":
        path.unlink()
    else:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 1
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flipped", "deleted"])
def test_a_damaged_revocation_is_not_skipped(demo: tuple[Path, str], how: str) -> None:
    home, _ = demo
    i, entry = last_of(home, "revocation")
    damage(object_path(home, entry.envelope), how)
    before = evidence(home)
    r = run(home, "verify", "cartpole-holdout@1")
    assert r.exit_code == 1, r.output
    assert f"> revocation record {i}: cannot be read, so what it says is unknown: " in r.stderr
    assert ("is missing" if how == "deleted" else "envelope hashes to") in r.stderr
    assert evidence(home) == before


@pytest.mark.parametrize("how", ["flipped", "deleted"])
def test_a_damaged_successor_policy_does_not_put_the_older_back(
    demo: tuple[Path, str], how: str
) -> None:
    home, ckpt = demo
    i, entry = last_of(home, "trust-policy")
    damage(object_path(home, entry.envelope), how)
    before = evidence(home)
    for args in (["verify", ckpt], ["admit", "cartpole@2"], ["policy", "show"]):
        r = run(home, *args)
        assert r.exit_code == 1, r.output
        assert r.stderr.startswith(
            f"FAIL: trust-policy record at log index {i}: its envelope {entry.envelope[:19]}… "
            f"{'is missing' if how == 'deleted' else 'does not hash to its entry'}, so the "
            "policy in force cannot be known; restore it with 'trajledger fsck --repair"
        ), r.stderr
    assert evidence(home) == before


def test_an_edited_name_index_is_refused(demo: tuple[Path, str]) -> None:
    home, _ = demo
    state = Ledger.open(home).trust_state()
    (one,) = [r for r in state.by_name("cartpole", "1") if r.kind == "dataset"]
    db = sqlite3.connect(state.path / "state.sqlite")
    # cartpole@2 now "names" cartpole@1's record (as many rows as before: the counts hold).
    db.execute("UPDATE names SET version = '2-old' WHERE name = 'cartpole' AND version = '2' "
               "AND kind = 'dataset'")
    db.execute("UPDATE names SET version = '2' WHERE idx = ?", (one.index,))
    db.commit()
    db.close()
    before = evidence(home)
    r = run(home, "train", "--dataset", "cartpole@2", "--key", "trainer")
    assert r.exit_code == 1, r.output
    assert r.stderr == (
        f"FAIL: log entry {one.index}: the index names it cartpole@2, its signed statement says "
        "cartpole@1; the index of the log disagrees with the log; rebuild it with 'trajledger "
        "reindex'\n"
    )
    assert evidence(home) == before


@pytest.mark.parametrize("how", ["flipped", "truncated"])
def test_verify_reads_the_data_by_default(demo: tuple[Path, str], how: str) -> None:
    from trajledger.ledger.artifacts import batch_files

    home, ckpt = demo
    ledger = Ledger.open(home)
    steps = batch_files(ledger, ledger.trust_state().by_name("cartpole-random", "")[0].subject)
    path = object_path(home, steps["steps.parquet"])
    path.chmod(0o644)
    if how == "truncated":
        path.write_bytes(path.read_bytes()[:10])
    else:
        damage(path, "flipped")
    before = evidence(home)
    r = run(home, "verify", ckpt)
    assert r.exit_code == 1, r.output
    assert "> steps.parquet: tampered: " in r.stderr
    assert steps["steps.parquet"][:19] in r.stderr
    assert evidence(home) == before


def test_a_private_key_swapped_for_another_signs_nothing(demo: tuple[Path, str]) -> None:
    home, _ = demo
    keys = home / "keys"
    (keys / "approver-a.key").unlink()
    (keys / "approver-a.key").symlink_to(keys / "vendor.key")
    size = Ledger.open(home).log.size
    before = evidence(home)
    r = run(home, "approve", "cartpole@2", "--key", "approver-a")
    assert r.exit_code == 1, r.output
    assert "approver-a.key is not the private half of " in r.stderr
    assert "the key file was replaced: nothing was signed" in r.stderr
    assert Ledger.open(home).log.size == size and evidence(home) == before


def test_a_private_key_others_can_read_is_refused(demo: tuple[Path, str]) -> None:
    home, _ = demo
    key = home / "keys" / "approver-a.key"
    key.chmod(0o644)
    r = run(home, "approve", "cartpole@2", "--key", "approver-a")
    assert r.exit_code == 3, r.output
    assert r.stderr.endswith(f"run 'chmod 600 {key}'\n")


def test_a_ledger_others_can_write_is_refused(demo: tuple[Path, str]) -> None:
    home, ckpt = demo
    (home / "objects").chmod(0o777)
    r = run(home, "verify", ckpt)
    assert r.exit_code == 3, r.output
    assert r.stderr == (
        f"FAIL: {home / 'objects'}: writable by its group and other users (mode 0777); run "
        f"'chmod go-w {home / 'objects'}' (a ledger shared through its group sets "
        "group_writable = true in ledger.toml)\n"
    )
    (home / "objects").chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP)
    assert run(home, "verify", ckpt).exit_code == 0


def test_a_name_whose_record_cannot_be_read_is_not_called_unknown(demo: tuple[Path, str]) -> None:
    """The user's index is built after the envelope of cartpole@2 was deleted: its name cannot
    be read, so "no such dataset" would be a guess; the command fails closed instead."""
    home, _ = demo
    from trajledger.ledger.log import Log
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.statement import Statement

    log = Log.open(home / "log")  # read without this user's state: it is built afterwards
    raw = [LogEntry.from_bytes(e) for e in log.entries(0, log.size)]

    def names(e: LogEntry) -> bool:
        data = object_path(home, e.envelope).read_bytes()
        p = Statement.from_bytes(Envelope.from_bytes(data).payload).predicate
        return (p.get("name"), p.get("version")) == ("cartpole", "2")

    (i,) = [n for n, e in enumerate(raw) if e.kind == "dataset" and names(e)]
    damage(object_path(home, raw[i].envelope), "deleted")
    r = run(home, "verify", "cartpole@2")
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith(
        f"FAIL: cartpole@2: no readable artifact has this name, and 1 record(s) cannot be read "
        f"(dataset at log index {i}: envelope missing or damaged), so one may be it; restore "
    ), r.stderr


def test_a_ledger_replaced_by_another_of_the_attackers_is_refused(
    demo: tuple[Path, str], tmp_path: Path
) -> None:
    """Someone who can write the directory builds a ledger of their own (their origin, keys and
    policy) and puts it in place: this user's memory of the directory refuses it, though every
    signature in it verifies under its own keys."""
    home, ckpt = demo
    assert run(home, "verify", ckpt).exit_code == 0  # this user has used the directory
    fake = tmp_path / "fake"
    r = CliRunner().invoke(main, ["quickstart", str(fake), "--episodes", "10"])
    assert r.exit_code == 0, r.output
    shutil.rmtree(home)
    shutil.copytree(fake, home)
    before = evidence(home)
    for args in (["verify", ckpt], ["admit", "cartpole@2"], ["log", "info"]):
        r = run(home, *args)
        assert r.exit_code == 1, (args, r.output)
        assert f"FAIL: {home / 'ledger.toml'}: this ledger directory held the log " in r.output
        assert "the ledger was replaced by another; nothing was changed" in r.output
    assert evidence(home) == before
    # Making a new ledger here on purpose is what init is for.
    shutil.rmtree(home)
    assert run(home, "init").exit_code == 0
    assert run(home, "log", "info").exit_code == 0


def test_without_log_pub_the_floor_still_holds(demo: tuple[Path, str], tmp_path: Path) -> None:
    """log-key/log.pub deleted and the log rolled back: the log's own vkey names the key, and
    this user's floor for it refuses the rollback."""
    home, ckpt = demo
    old = tmp_path / "old-log"
    shutil.copytree(home / "log", old)
    (row,) = [r for r in Ledger.open(home).trust_state().by_name("cartpole", "1")
              if r.kind == "dataset"]  # fmt: skip
    r = run(home, "revoke", row.subject, "--key", "approver-a", "--reason", "leak")
    assert r.exit_code == 0, r.output
    (home / "log-key" / "log.pub").unlink()
    shutil.rmtree(home / "log")
    shutil.copytree(old, home / "log")  # the revocation is gone with the newer log
    for args in (["verify", ckpt], ["admit", row.subject]):
        r = run(home, *args)
        assert r.exit_code == 1, (args, r.output)
        assert "rollback: the signed checkpoint has size" in r.output, r.output
