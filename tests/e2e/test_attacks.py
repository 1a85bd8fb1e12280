"""Issues 9 and 18, one test per attack, through the command line, on a quickstart ledger.

The attacker can write the ledger directory's files but has no passphrase. Each attack is refused
with exit 1 and a message naming what is wrong, and leaves the evidence (``log/``, ``objects/``,
``keys/``) exactly as the attacker left it: no command repairs, deletes or re-signs anything.
(The log's own attacks, treeState rollback and a deleted or foreign checkpoint, are in
tests/e2e/test_log_tamper.py; import rollback and fork in tests/e2e/test_exchange_cli.py.)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tamperkit as tk
import testkit
from click.testing import CliRunner, Result

from trajledger import Ledger
from trajledger.ledger.config import LedgerConfig
from trajledger.ledger.encode import vkey_string
from trajledger.ledger.keys import KeyStore, Signer
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


def succeed_and_revoke(home: Path, ckpt: str) -> str:
    """A successor policy (serial 2) and a revocation of a batch that is not in the final
    checkpoint's lineage (so the checkpoint still verifies)."""
    policy = home / "policy.toml"
    two = home / "policy-2.toml"
    two.write_text(policy.read_text().replace("serial = 1", "serial = 2"))
    r = run(home, "policy", "set", two, "--key", "approver-a", "--key", "approver-b")
    assert r.exit_code == 0, r.output
    r = run(home, "revoke", "cartpole-holdout@1", "--key", "approver-a", "--reason", "leak")
    assert r.exit_code == 0, r.output
    assert run(home, "verify", ckpt).exit_code == 0
    return ckpt


@pytest.fixture(scope="module")
def quickstart(
    quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    """A quickstart ledger, then `succeed_and_revoke` (in a user state of its own)."""
    t = testkit.extend_template(
        tmp_path_factory.mktemp("attacks"), quickstart_template, succeed_and_revoke
    )
    return t.home, t.value


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
    for args in (["verify", ckpt], ["admit", "cartpole-train@2"], ["policy", "show"]):
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
    (one,) = [r for r in state.by_name("cartpole-train", "1") if r.kind == "dataset"]
    db = sqlite3.connect(state.path / "state.sqlite")
    # cartpole-train@2 now "names" cartpole-train@1's record (as many rows as before: the
    # counts hold).
    db.execute("UPDATE names SET version = '2-old' WHERE name = 'cartpole-train' AND "
               "version = '2' AND kind = 'dataset'")
    db.execute("UPDATE names SET version = '2' WHERE idx = ?", (one.index,))
    db.commit()
    db.close()
    before = evidence(home)
    r = run(home, "train", "--dataset", "cartpole-train@2", "--key", "trainer")
    assert r.exit_code == 1, r.output
    assert r.stderr == (
        f"FAIL: log entry {one.index}: the index names it cartpole-train@2, its signed statement "
        "says cartpole-train@1; the index of the log disagrees with the log; rebuild it with "
        "'trajledger reindex'\n"
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
    r = run(home, "approve", "cartpole-train@2", "--key", "approver-a")
    assert r.exit_code == 1, r.output
    assert "approver-a.key is not the private half of " in r.stderr
    assert "the key file was replaced: nothing was signed" in r.stderr
    assert Ledger.open(home).log.size == size and evidence(home) == before


def test_a_private_key_others_can_read_is_refused(demo: tuple[Path, str]) -> None:
    home, _ = demo
    key = home / "keys" / "approver-a.key"
    key.chmod(0o644)
    r = run(home, "approve", "cartpole-train@2", "--key", "approver-a")
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
    """The user's index is built after the envelope of cartpole-train@2 was deleted: its name cannot
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
        return (p.get("name"), p.get("version")) == ("cartpole-train", "2")

    (i,) = [n for n, e in enumerate(raw) if e.kind == "dataset" and names(e)]
    damage(object_path(home, raw[i].envelope), "deleted")
    r = run(home, "verify", "cartpole-train@2")
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith(
        f"FAIL: cartpole-train@2: no readable artifact has this name, and 1 record(s) cannot be "
        f"read (dataset at log index {i}: envelope missing or damaged), so one may be it; restore "
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
    for args in (["verify", ckpt], ["admit", "cartpole-train@2"], ["log", "info"]):
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
    (row,) = [r for r in Ledger.open(home).trust_state().by_name("cartpole-train", "1")
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


# -- Issue 18: pinned trust ----------------------------------------------------------------------
#
# The same attacker (writes the ledger directory, has no passphrase), on a quickstart ledger whose
# keys are encrypted (TRAJLEDGER_PASSPHRASE set), each scenario with the user's own state
# directory. One test per finding of issue 18, each refused with exit 1 (3 for permissions), a
# message naming the file, key or entry, and the evidence unchanged.


@dataclass
class Scene:
    """A copy of an encrypted quickstart ledger and of its user's state."""

    home: Path
    state: Path
    checkpoint: str

    def run(self, *args: str | Path, state: Path | None = None, input: str | None = None,
            **env: str) -> Result:
        """A command line as this ledger's user (or the user of ``state``), passphrase set
        unless ``TRAJLEDGER_PASSPHRASE=""`` is given."""
        full = {"TRAJLEDGER_STATE_DIR": str(state or self.state),
                "TRAJLEDGER_PASSPHRASE": tk.PASSPHRASE, **env}
        return tk.new_runner().invoke(main, ["--ledger", str(self.home), *map(str, args)],
                                      env={k: v or None for k, v in full.items()}, input=input)

    def size(self) -> int:
        return int(json.loads(self.run("log", "info", "--json").stdout)["size"])


@pytest.fixture(scope="module")
def secured(secured_quickstart: tk.Quickstart) -> tk.Quickstart:
    return secured_quickstart


@pytest.fixture
def scene(secured: tk.Quickstart, tmp_path: Path) -> Scene:
    home, state = tmp_path / "ledger", tmp_path / "state"
    shutil.copytree(secured.home, home, symlinks=True)
    shutil.copytree(secured.state, state, symlinks=True)
    return Scene(home, state, secured.checkpoint)


def attacker_key(path: Path, name: str) -> Signer:
    """The attacker's own key pair written over ``path/NAME.key`` (plaintext: they have no
    passphrase) and ``path/NAME.pub``."""
    key = Signer.generate(name)
    (path / f"{name}.key").unlink(missing_ok=True)
    (path / f"{name}.key").write_bytes(key.private_pem(None))
    (path / f"{name}.key").chmod(0o600)
    (path / f"{name}.pub").write_bytes(key.public.to_pem())
    return key


def path_policy(scene: Scene, serial: int) -> Path:
    """The quickstart's policy as trajledger 0.1.0 wrote it (keys named by path), serial N."""
    text = (scene.home / "policy.toml").read_text()
    for name in ("vendor", "approver-a", "approver-b", "trainer"):
        block = re.search(rf'  # {re.escape(name)}: [^\n]*\n  """[^"]*""",\n', text)
        assert block is not None, name
        text = text.replace(block.group(0), f'  "keys/{name}.pub",\n')
    path = scene.home / f"policy-{serial}.toml"
    path.write_text(text.replace("serial = 1", f"serial = {serial}"))
    return path


def test_a_planted_public_key_does_not_enter_a_succession_unseen(scene: Scene) -> None:
    """Finding 1: keys/vendor.pub replaced, and the owner's routine succession names keys by
    path: policy set lists the producer role's change by fingerprint and records nothing without
    --yes."""
    real = KeyStore(scene.home / "keys").public("vendor").keyid
    planted = attacker_key(scene.home / "keys", "vendor")
    policy = path_policy(scene, 2)
    size, before = scene.size(), evidence(scene.home)
    r = scene.run("policy", "set", policy, "--key", "approver-a", "--key", "approver-b")
    assert r.exit_code == 1, r.output
    assert f"  producer    + key {planted.keyid}\n  producer    - key {real}\n" in r.stderr
    assert r.stderr.endswith(
        f"FAIL: policy {policy}: changes the members of a role, or lowers its "
        "threshold (listed above, by fingerprint); nothing was recorded. Compare each "
        "fingerprint with its owner, then run again with "
        "--yes\n"
    )
    assert f"NOTE: {policy}: names 4 key(s) by path (keys/vendor.pub, " in r.stderr
    assert scene.size() == size and evidence(scene.home) == before


def test_a_planted_plaintext_key_signs_nothing(scene: Scene) -> None:
    """Finding 1: the attacker's plaintext vendor.key (and .pub) beside the encrypted ones:
    refused, naming the file, whether the passphrase is set or not (the ledger records that its
    keys are encrypted)."""
    attacker_key(scene.home / "keys", "vendor")
    data = scene.home.parent / "steps.jsonl"
    data.write_text('{"episode_id": "e", "step": 0, "obs": [0.0], "action": 0, "reward": 1.0, '
                    '"terminated": true, "truncated": false}\n')
    size, before = scene.size(), evidence(scene.home)
    key = scene.home / "keys" / "vendor.key"
    for env in ({}, {"TRAJLEDGER_PASSPHRASE": ""}):
        r = scene.run("record", data, "--env", "cartpole@1", "--policy", "random", "--key",
                      "vendor", **env)
        assert r.exit_code == 1, r.output
        assert r.stderr.startswith(f"FAIL: key vendor: {key} is not encrypted, but "), r.stderr
        assert "a key file planted by someone without the passphrase; nothing was signed" \
            in r.stderr
    assert scene.size() == size and evidence(scene.home) == before


def test_a_key_pair_the_policy_does_not_hold_signs_nothing(demo: tuple[Path, str]) -> None:
    """Finding 1, in a ledger of demo (plaintext) keys: a planted trainer.key/.pub pair loads,
    but the policy in force holds another trainer key: refused before signing, naming both
    fingerprints (not only the pair of NAME.pub)."""
    home, _ = demo
    real = Ledger.open(home).policy().role("producer").keys[0].keyid
    planted = attacker_key(home / "keys", "vendor")
    size, before = Ledger.open(home).log.size, evidence(home)
    r = run(home, "revoke", "cartpole-random", "--key", "vendor", "--reason", "x")
    assert r.exit_code == 1, r.output
    assert (f"FAIL: key vendor ({planted.keyid[:12]}): cannot revoke cartpole-random: it holds no "
            f"role in policy 'quickstart' serial 2, want producer or approver (fingerprint "
            f"{planted.keyid[:16]}; the policy's producer or approver key(s): ") in r.stderr
    assert real[:16] in r.stderr and "nothing was signed" in r.stderr
    trainer = attacker_key(home / "keys", "trainer")
    before = evidence(home)
    r = run(home, "train", "--dataset", "cartpole-train@2", "--key", "trainer", "--seed", "7")
    assert r.exit_code == 1, r.output
    assert f"FAIL: key trainer ({trainer.keyid[:12]}): does not hold the trainer role in " \
        "policy 'quickstart' serial 2" in r.stderr
    assert Ledger.open(home).log.size == size and evidence(home) == before


@pytest.mark.parametrize("what", ["ledger", "keys", "pub"])
def test_group_writable_ledgers_and_key_files_are_refused(scene: Scene, what: str) -> None:
    """Finding 1: a group-writable ledger or keys/ (0770), a 0666 .pub: exit 3 with the chmod."""
    path = {"ledger": scene.home, "keys": scene.home / "keys",
            "pub": scene.home / "keys" / "vendor.pub"}[what]
    path.chmod(0o666 if what == "pub" else 0o770)
    r = scene.run("verify", scene.checkpoint)
    assert r.exit_code == 3, r.output
    bits, who = ("go", "its group and other users") if what == "pub" else ("g", "its group")
    mode = "0666" if what == "pub" else "0770"
    assert r.stderr == (
        f"FAIL: {path}: writable by {who} (mode {mode}); run 'chmod {bits}-w {path}' (a ledger "
        "shared through its group sets group_writable = true in ledger.toml)\n"
    )


def test_a_shared_ledger_accepts_its_group_but_not_others(scene: Scene) -> None:
    """group_writable = true, set by the owner and accepted (trust --settings): group write is
    accepted, others' never."""
    toml = scene.home / "ledger.toml"
    toml.write_text(toml.read_text() + "group_writable = true\n")
    r = scene.run("verify", scene.checkpoint)
    assert r.exit_code == 1 and "group_writable is true, but it was not when you last used" \
        in r.stderr, r.output
    assert scene.run("trust", "--settings").exit_code == 0
    (scene.home / "keys").chmod(0o770)
    assert scene.run("verify", scene.checkpoint).exit_code == 0
    (scene.home / "keys").chmod(0o777)
    r = scene.run("verify", scene.checkpoint)
    assert r.exit_code == 3 and "writable by other users (mode 0777)" in r.stderr, r.output


def test_first_use_is_announced_and_can_be_required_pinned(scene: Scene, tmp_path: Path) -> None:
    """Finding 2: with a fresh state directory, a log rolled back to before a revocation. The
    first use says so (origin, key fingerprint, size, how to pin); TRAJLEDGER_REQUIRE_PIN=1
    refuses it; a key and checkpoint pinned ahead refuse the rollback."""
    old = tmp_path / "old-log"
    shutil.copytree(scene.home / "log", old)
    r = scene.run("revoke", "cartpole-random", "--key", "approver-a", "--reason", "leak")
    assert r.exit_code == 0, r.output
    note = (scene.home / "log" / "checkpoint").read_bytes()
    shutil.rmtree(scene.home / "log")
    shutil.copytree(old, scene.home / "log")  # the revocation is gone with the newer log
    vkey = (scene.home / "log" / "vkey").read_text().strip()
    before = evidence(scene.home)
    fresh = tmp_path / "fresh"
    r = scene.run("verify", scene.checkpoint, state=fresh, TRAJLEDGER_REQUIRE_PIN="1")
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith(
        f"FAIL: log {vkey.split('+')[0]} ({scene.home / 'log'}): first use, and its key "
        f"{vkey.split('+')[0]}+{vkey.split('+')[1]}+sha256:"
    ), r.stderr
    assert "was not pinned ahead (TRAJLEDGER_REQUIRE_PIN=1): nothing was read or changed" \
        in r.stderr
    r = scene.run("verify", scene.checkpoint, state=fresh)
    assert r.exit_code == 0, r.output  # nothing to compare it with: but it is announced
    size = int((scene.home / "log" / "checkpoint").read_text().splitlines()[1])
    assert r.stderr.startswith(f"NOTE: first use of log {vkey.split('+')[0]}: its key ")
    assert f"is now pinned for you at size {size} " in r.stderr
    assert f"'trajledger trust {vkey}'" in r.stderr
    # Pinned ahead with the checkpoint its owner published: the rollback is refused.
    pinned = tmp_path / "pinned"
    cp = tmp_path / "checkpoint"
    cp.write_bytes(note)
    r = scene.run("trust", vkey, "--checkpoint", cp, state=pinned)
    assert r.exit_code == 0 and "floor at size" in r.stderr, r.output
    shown = json.loads(scene.run("trust", "--json", state=pinned).stdout)
    assert (shown["vkey"], shown["pinned"]) == (vkey, "pinned ahead ('trajledger trust')")
    assert shown["floor"] == int(note.decode().splitlines()[1]) and shown["store"] == "objects"
    r = scene.run("verify", scene.checkpoint, state=pinned, TRAJLEDGER_REQUIRE_PIN="1")
    assert r.exit_code == 1, r.output
    assert f"FAIL: {scene.home / 'log' / 'checkpoint'}: rollback: the signed checkpoint has " \
        "size" in r.stderr
    assert evidence(scene.home) == before


def test_a_key_pinned_ahead_is_not_replaced_by_another_of_its_origin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user pinned a log's key ahead ('trajledger trust VKEY', no checkpoint); the ledger
    they are handed holds another log of the same origin (a forgery). Before, without
    TRAJLEDGER_REQUIRE_PIN, the forgery's key was trusted as a first use (a NOTE), and the
    genuine log was then refused as a replaced key: pinning ahead made things worse. Now the
    forgery is refused like a key replaced after a floor; a key the user pinned itself, or a
    rotation whose handover the pinned key signed, is still followed. Found by rev4."""
    from testkit import Party

    real, forged = Party(tmp_path, "real"), Party(tmp_path, "forged")
    for party in (real, forged):
        party.run("init", "--origin", "x.example/log")
    victim = Party(tmp_path, "victim")
    victim.home = forged.home
    victim.run("trust", real.vkey())
    r = victim.run("log", "info", code=1)
    assert r.stderr.startswith(f"FAIL: {forged.home / 'log' / 'checkpoint'}: log x.example/log "
                               "is signed by key x.example/log+"), r.stderr
    assert "(pinned ahead) and no key handover signed by that key leads to the new one: a " \
        "replaced key, not a rotation; nothing was changed" in r.stderr  # fmt: skip
    victim.run("log", "info", code=1)  # and stays refused: nothing was pinned
    # The real log rotates its key: the handover the pinned key signed is followed.
    real.run("log", "rotate-key")
    victim.home = real.home
    monkeypatch.setenv("TRAJLEDGER_REQUIRE_PIN", "1")
    victim.run("log", "info")
    # Two logs of one origin, each pinned by the user: each is trusted on its own.
    victim.home = forged.home
    victim.run("trust", forged.vkey())
    victim.run("log", "info")


def test_a_forged_ledger_is_refused_on_first_use(scene: Scene, tmp_path: Path) -> None:
    """Finding 2: the ledger replaced wholesale by a forged one (same origin, the attacker's
    log key stored unencrypted, a policy listing the victim's public trainer key) used from a
    fresh state: its plaintext log key is refused; so is its first use under
    TRAJLEDGER_REQUIRE_PIN=1."""
    origin = LedgerConfig.from_toml((scene.home / "ledger.toml").read_bytes(), scene.home).origin
    forged = tmp_path / "forged"
    with pytest.MonkeyPatch.context() as m:
        m.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "attacker-state"))
        m.delenv("TRAJLEDGER_PASSPHRASE", raising=False)
        fake = Ledger.init(forged, origin=origin)
        for name in ("vendor", "approver-a", "approver-b"):
            fake.keys.create(name, encrypt=False)
    # The victim's trainer key (public and, encrypted, private) carried into the forgery.
    for f in ("trainer.pub", "trainer.key"):
        shutil.copy2(scene.home / "keys" / f, forged / "keys" / f)
    shutil.rmtree(scene.home)
    shutil.copytree(forged, scene.home)
    before = evidence(scene.home)
    fresh = tmp_path / "fresh"
    r = scene.run("train", "--dataset", "cartpole-train@2", "--key", "trainer", state=fresh)
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith(f"FAIL: {scene.home / 'log-key' / 'log.key'}: the log's key is "
                               "not encrypted, but a passphrase for it is set: ")
    r = scene.run("log", "info", state=tmp_path / "fresh2", TRAJLEDGER_PASSPHRASE="",
                  TRAJLEDGER_REQUIRE_PIN="1")
    assert r.exit_code == 1 and "first use, and its key" in r.stderr, r.output
    assert evidence(scene.home) == before


def test_a_witness_counts_once_whatever_its_name(scene: Scene) -> None:
    """Finding 3: one witness key listed as w1 and w1-alias: refused by policy check and set
    (the cosignature counting by key is tests/unit/verify/test_checkpoint.py)."""
    from trajledger.verify.note import ALG_COSIGNATURE_V1

    pub = Signer.generate("w1").public.raw_ed25519()
    one = vkey_string("w1", pub, ALG_COSIGNATURE_V1)
    alias = vkey_string("w1-alias", pub, ALG_COSIGNATURE_V1)
    policy = scene.home / "policy-2.toml"
    policy.write_text((scene.home / "policy.toml").read_text().replace("serial = 1", "serial = 2")
                      + f'\n[roles.witness]\nvkeys = ["{one}", "{alias}"]\nthreshold = 2\n')
    size, before = scene.size(), evidence(scene.home)
    for args in (["policy", "check", policy],
                 ["policy", "set", policy, "--key", "approver-a", "--key", "approver-b", "--yes"]):
        r = scene.run(*args)  # check judges the file: 1; set: the user's file to fix, 2 (left36)
        assert r.exit_code == (1 if args[1] == "check" else 2), r.output
        assert r.stderr == (
            f"FAIL: policy {policy}: role witness: vkey 1 (w1-alias) is the key of vkey 0 (w1) "
            "under another name: a member counts once however it is named\n"
        )
    assert scene.size() == size and evidence(scene.home) == before


def test_the_signers_clock_does_not_decide_age(scene: Scene) -> None:
    """Finding 4: approvals logged now carrying a 2029 approvedAt: they do not count (a signed
    time ahead of the log's), so admit refuses, naming each."""
    from trajledger.ledger.status import approve

    with pytest.MonkeyPatch.context() as m:
        m.setenv("TRAJLEDGER_STATE_DIR", str(scene.state))
        m.setenv("TRAJLEDGER_PASSPHRASE", tk.PASSPHRASE)
        ledger = Ledger.open(scene.home)
        r = scene.run("dataset", "create", "future", "--version", "1", "--split", "train",
                      "--batch", "cartpole-random", "--key", "vendor")
        assert r.exit_code == 0, r.output
        when = dt.datetime(2029, 1, 1, tzinfo=dt.UTC)
        indices = [approve(ledger, "future@1", ledger.keys.signer(a), now=when).index
                   for a in ("approver-a", "approver-b")]
    before = evidence(scene.home)
    r = scene.run("admit", "future@1")
    assert r.exit_code == 1, r.output
    for i in indices:
        assert (f"approval {i} is dated 2029-01-01T00:00:00Z, after the log took it in at ") \
            in r.stderr
    assert "a signer's clock does not decide how old an approval is" in r.stderr
    assert evidence(scene.home) == before


def test_a_state_others_can_write_is_refused(scene: Scene) -> None:
    """Finding 5: a 0777 state directory, a 0666 state.sqlite: exit 3 with the chmod."""
    assert scene.run("verify", scene.checkpoint).exit_code == 0
    (db,) = scene.state.glob("logs/*/state.sqlite")
    db.chmod(0o666)
    r = scene.run("verify", scene.checkpoint)
    assert r.exit_code == 3, r.output
    assert r.stderr == f"FAIL: {db}: writable by its group and other users (mode 0666); run " \
        f"'chmod go-w {db}'\n"
    db.chmod(0o600)
    scene.state.chmod(0o777)
    r = scene.run("verify", scene.checkpoint)
    assert r.exit_code == 3, r.output
    assert r.stderr == (f"FAIL: {scene.state}: writable by its group and other users (mode "
                        f"0777); run 'chmod go-w {scene.state}'\n")


def state_rows(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the user's state database (its bytes change with SQLite's housekeeping)."""
    con = sqlite3.connect(db)
    try:
        tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
    finally:
        con.close()


@pytest.mark.parametrize("table", ["revocation", "held_out", "refs"])
def test_rows_deleted_from_the_state_are_refused(scene: Scene, table: str) -> None:
    """Finding 5: one sqlite3 delete of the revocation row, of the held_out rows or of the refs
    rows: verify, admit and impact refuse the state (naming it), reindex --check and fsck
    report it, read-only; reindex derives the rows again."""
    r = scene.run("revoke", "cartpole-holdout@1", "--key", "approver-a", "--reason", "leak")
    assert r.exit_code == 0, r.output
    assert scene.run("verify", "cartpole-holdout@1").exit_code == 1  # indexed: revoked
    (db,) = scene.state.glob("logs/*/state.sqlite")
    sql = {"revocation": "DELETE FROM entries WHERE kind = 'revocation'",
           "held_out": "DELETE FROM held_out", "refs": "DELETE FROM refs"}[table]
    con = sqlite3.connect(db)
    con.execute(sql)
    con.commit()
    con.close()
    before = evidence(scene.home), state_rows(db)
    for args in (["verify", "cartpole-holdout@1"], ["admit", "cartpole-train@2"],
                 ["impact", "cartpole-random"]):
        r = scene.run(*args)
        assert r.exit_code == 1, (args, r.output)
        assert r.stderr.startswith(f"FAIL: trust state {db}: "), r.stderr
        assert "were derived from the log: rows that decide what is revoked, held out or built " \
            "on were changed outside trajledger" in r.stderr
    r = scene.run("reindex", "--check")
    assert r.exit_code == 1, r.output
    assert f"FAIL: trust state {db}: table " in r.stderr and "derived from the log are missing" \
        in r.stderr
    r = scene.run("fsck")
    assert r.exit_code == 1, r.output
    assert (evidence(scene.home), state_rows(db)) == before
    assert scene.run("reindex").exit_code == 0
    assert scene.run("reindex", "--check").exit_code == 0
    r = scene.run("verify", "cartpole-holdout@1")
    assert r.exit_code == 1 and "> revoked: leak" in r.stderr


def test_a_failing_lineage_looks_failing(scene: Scene, tmp_path: Path) -> None:
    """Finding 6: after a revocation of a batch in a checkpoint's lineage, lineage exits 1, its
    first line is the verdict with the count of problems, the checkpoint is marked failing,
    the HTML page shows the verdict and the root cause first; verify starts the same way."""
    r = scene.run("revoke", "cartpole-random", "--key", "approver-a", "--reason", "PII")
    assert r.exit_code == 0, r.output
    before = evidence(scene.home)
    for cmd in ("lineage", "verify"):
        r = scene.run(cmd, scene.checkpoint)
        assert r.exit_code == 1, r.output
        lines = r.stdout.splitlines()
        assert lines[0].startswith("✗ FAIL: checkpoint cartpole-bc@2 (sha256:"), lines[0]
        assert re.search(r": 1 problem\(s\) in \d+ checks, in 1 node\(s\); \d+ more fail through "
                         r"their lineage$", lines[0]), lines[0]
        assert any(x.startswith("✗ checkpoint cartpole-bc@2 (") for x in lines)
        assert not any(x.startswith("✓ checkpoint cartpole-bc@2") for x in lines)
        assert "    ✗ lineage — depends on " in r.stdout
        assert "> revoked: PII (log index " in r.stderr
    page = tmp_path / "lineage.html"
    r = scene.run("lineage", scene.checkpoint, "--format", "html", "--out", page)
    assert r.exit_code == 1, r.output
    html = page.read_text()
    body = html[html.index("<body>"):]
    assert body.index('class="verdict fail">✗ FAIL: checkpoint cartpole-bc@2') < body.index("<svg")
    assert "Root cause(s):" in body and "revoked</b>" not in body.split("<svg")[0]
    assert "&gt; revoked: PII (log index" in body.split("<svg")[0]
    assert "lineage fails" in body
    assert evidence(scene.home) == before


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "sigstore"])
def test_revoked_data_does_not_leave_without_a_word(
    scene: Scene, tmp_path: Path, fmt: str
) -> None:
    """Finding 7: export of a revoked batch in a plain format exits 1 naming the revocation;
    --include-revoked writes the revocation into the output's metadata."""
    r = scene.run("revoke", "cartpole-random", "--key", "approver-a", "--reason", "PII")
    assert r.exit_code == 0, r.output
    index = scene.size() - 1
    out = tmp_path / ("out.sigstore.json" if fmt == "sigstore" else "out")
    before = evidence(scene.home)
    r = scene.run("export", "cartpole-random", "--format", fmt, "--out", out)
    assert r.exit_code == 1, r.output
    assert re.match(rf"FAIL: rollout-batch cartpole-random: revoked at log index {index} "
                    r"\(\S+\): PII: a plain format does not carry that, so nothing was written;",
                    r.stderr), r.stderr
    assert not out.exists() and evidence(scene.home) == before
    r = scene.run("export", "cartpole-random", "--format", fmt, "--out", out, "--include-revoked")
    assert r.exit_code == 0, r.output
    meta = (out.with_name(out.name + ".revocations.json") if fmt == "sigstore"
            else out / "revocations.json")
    doc = json.loads(meta.read_text())
    assert doc["revoked"][0].startswith(f"revoked at log index {index} (") and \
        doc["revoked"][0].endswith("): PII")
    assert "WARNING: sha256:" in r.stderr and "written anyway, with" in r.stderr
    # An evidence bundle carries it, and says so.
    r = scene.run("export", "cartpole-random", "--out", tmp_path / "b.tar.zst")
    assert r.exit_code == 0, r.output
    assert "WARNING: the bundle carries 1 revoked artifact(s)" in r.stderr


def test_what_was_built_on_revoked_data_does_not_leave_without_a_word(
    scene: Scene, tmp_path: Path
) -> None:
    """Finding 7 again (rev4): only the revocations of REF itself were looked at, so the
    checkpoint trained on a revoked batch left as a Sigstore bundle of its record (exit 0, no
    word), as a model would under --format model-signing. Now a revocation anywhere in REF's
    lineage refuses a plain format the same way, naming it; --include-revoked writes it down."""
    r = scene.run("revoke", "cartpole-random", "--key", "approver-a", "--reason", "PII")
    assert r.exit_code == 0, r.output
    out = tmp_path / "ck.sigstore.json"
    before = evidence(scene.home)
    r = scene.run("export", scene.checkpoint, "--format", "sigstore", "--out", out)
    assert r.exit_code == 1, r.output
    assert re.match(r"FAIL: checkpoint cartpole-bc@2: in its lineage: rollout-batch "
                    r"cartpole-random \(sha256:[0-9a-f]{12}…\) > revoked: PII \(log index \d+\)"
                    r".*: a plain format does not carry that, so nothing was written;",
                    r.stderr), r.stderr
    assert not out.exists() and evidence(scene.home) == before
    r = scene.run("export", scene.checkpoint, "--format", "sigstore", "--out", out,
                  "--include-revoked")
    assert r.exit_code == 0, r.output
    doc = json.loads(out.with_name(out.name + ".revocations.json").read_text())
    assert doc["revoked"][0].startswith("in its lineage: rollout-batch cartpole-random (")


def test_one_digest_names_one_record(scene: Scene, tmp_path: Path) -> None:
    """Finding 8: the same rows recorded twice with other metadata: the second is refused
    naming the first record; with the same metadata it is that record (exit 0, already
    recorded); training twice on identical inputs finds its checkpoint."""
    data = tmp_path / "steps.jsonl"
    data.write_text('{"episode_id": "e", "step": 0, "obs": [0.0], "action": 0, "reward": 1.0, '
                    '"terminated": true, "truncated": false}\n')
    args = ("record", data, "--env", "cartpole@1", "--policy", "random", "--key", "vendor")
    r = scene.run(*args, "--licence", "CC-BY-4.0")
    assert r.exit_code == 0, r.output
    index, digest = scene.size() - 1, r.stdout.strip()
    before = evidence(scene.home)
    r = scene.run(*args, "--licence", "proprietary")
    assert r.exit_code == 1, r.output
    assert f"same rollouts are already recorded at log index {index}" in r.stderr
    assert "licence" in r.stderr and evidence(scene.home) == before
    r = scene.run(*args, "--licence", "CC-BY-4.0")
    assert r.exit_code == 0 and r.stdout.strip() == digest, r.output
    assert f"already recorded at log index {index}" in r.stderr
    # The quickstart trained cartpole-bc@1 on cartpole-train@1 with the bc trainer, seed 0: the same
    # inputs give the same weights, whatever the new name and version.
    size = scene.size()
    r = scene.run("train", "--dataset", "cartpole-train@1", "--key", "trainer", "--name", "again",
                  "--version", "1")
    assert r.exit_code == 0, r.output
    first = json.loads(scene.run("show", "cartpole-bc@1", "--json").stdout)["index"]
    assert f"OK: checkpoint already recorded as cartpole-bc@1 at log index {first} (" in r.stderr
    assert r.stderr.endswith("); again@1 was not recorded\n"), r.stderr
    assert r.stdout.strip() == json.loads(
        scene.run("show", "cartpole-bc@1", "--json").stdout)["digest"]
    assert scene.size() == size


def test_passphrases_are_asked_for_every_key_and_each_may_have_its_own(
    scene: Scene, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 9: on a terminal without TRAJLEDGER_PASSPHRASE, approve asks for the approver's
    key and then for the log's; an interactive init encrypts the log key, asking twice; a key's
    own passphrase (TRAJLEDGER_PASSPHRASE_<NAME>) is used for it."""
    from trajledger.ledger import clikit

    monkeypatch.setattr(clikit, "interactive", lambda: True)
    r = scene.run("dataset", "create", "asked", "--version", "1", "--split", "train",
                  "--batch", "cartpole-random", "--key", "vendor")
    assert r.exit_code == 0, r.output
    r = scene.run("approve", "asked@1", "--key", "approver-a", TRAJLEDGER_PASSPHRASE="",
                  input=f"{tk.PASSPHRASE}\n{tk.PASSPHRASE}\n")
    assert r.exit_code == 0, r.output
    assert "Passphrase for key approver-a" in r.output and "Passphrase for the log's key" \
        in r.output
    home = tmp_path / "interactive"
    r = tk.new_runner().invoke(main, ["--ledger", str(home), "init"], input="s3cret\ns3cret\n",
                               env={"TRAJLEDGER_STATE_DIR": str(tmp_path / "st")})
    assert r.exit_code == 0, r.output
    assert (home / "log-key" / "log.key").read_bytes().startswith(
        b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert 'keys = "encrypted"' in (home / "ledger.toml").read_text()
    monkeypatch.setattr(clikit, "interactive", lambda: False)
    own = {"TRAJLEDGER_STATE_DIR": str(tmp_path / "st"), "TRAJLEDGER_PASSPHRASE_LOG": "s3cret",
           "TRAJLEDGER_PASSPHRASE_ALICE": "alice's own"}
    r = tk.new_runner().invoke(main, ["--ledger", str(home), "key", "new", "alice"], env=own)
    assert r.exit_code == 0, r.output
    r = tk.new_runner().invoke(main, ["--ledger", str(home), "sign", str(home / "ledger.toml"),
                                      "--key", "alice", "--out", str(tmp_path / "e.json")],
                               env=own)
    assert r.exit_code == 0, r.output


def test_the_store_cannot_be_redirected(scene: Scene, tmp_path: Path) -> None:
    """Finding 10: ledger.toml's store pointed at another directory: refused, naming both and
    the command that accepts a move; the store moved on purpose is accepted with it."""
    toml = scene.home / "ledger.toml"
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(scene.home / "objects", elsewhere)
    toml.write_text(toml.read_text().replace('store = "objects"', f'store = "{elsewhere}"'))
    before = evidence(scene.home)
    for args in (["verify", scene.checkpoint], ["erase", "cartpole-holdout@1", "--key",
                                                 "approver-a", "--reason", "legal"]):
        r = scene.run(*args)
        assert r.exit_code == 1, r.output
        assert r.stderr == (
            f"FAIL: {toml}: store is '{elsewhere}', but it was 'objects' when you last used this "
            "ledger (blobs would be read from and written to another place); nothing was read "
            "or changed. If you changed it on purpose, accept it with 'trajledger trust "
            "--settings'\n"
        )
    assert evidence(scene.home) == before
    r = scene.run("trust", "--settings")
    assert r.exit_code == 0 and "OK: accepted: store is" in r.stderr, r.output
    assert scene.run("verify", scene.checkpoint).exit_code == 0
