"""End to end: replacing keys after a compromise (issue 9, item 8), through the command line.

A. Producer and approver keys are replaced by a trust-policy succession (``policy set`` with the
   next serial, signed by the current approvers). What the old key signed before the
   succession's log index stays valid; what it signs afterwards counts for nothing; the new key
   counts. A successor may say the old key was compromised since a log index
   (``revoked_keys``): then everything it signed from there on counts for nothing, and
   recording with it is refused.
B. The log key is replaced by ``trajledger log rotate-key``: the current tree is signed by the
   old key and the new one, naming both (the handover); then only the new key signs. A user who
   trusted the old key continues (the floor carries over, a rollback across the rotation is
   still caught); a checkpoint signed by a key no handover names is refused (key confusion);
   bundles exported afterwards verify and import for a buyer trusting either key; a monitor
   follows the rotation; an interrupted rotation is finished by running it again.

Every refusal asserts the exit code, the message naming the key or role, no traceback, and
that nothing was written.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tamperkit as tk
from click.testing import Result
from testkit import new_runner

from trajledger import Ledger
from trajledger.ledger.encode import (
    bundle_index_bytes,
    checkpoint_text,
    format_signature_line,
    vkey_string,
)
from trajledger.ledger.errors import LogError, TamperError
from trajledger.ledger.keys import KeyStore, Signer
from trajledger.ledger.log import EntrySpec
from trajledger.ledger.serve import LogServer
from trajledger.ledger.trust_state import TrustState
from trajledger.ledger.user_state import STATE_DIR_ENV
from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main
from trajledger.verify.bundle_index import BundleIndex
from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.note import Note, verifier_from_vkey

ORIGIN = "test/rotation"
KEYS = ("vendor", "vendor2", "approver-a", "approver-b", "approver-c", "trainer")

POLICY = """\
name = "p"
serial = {serial}

[roles.producer]
keys = ["keys/{producer}.pub"]

[roles.approver]
keys = [{approvers}]
threshold = 2

[roles.trainer]
keys = ["keys/trainer.pub"]

[roles.log]
vkeys = [{vkeys}]
{extra}"""


def run(home: Path, *args: str | Path, state: Path | None = None) -> Result:
    """Run a command on ``home``; ``state`` is another user's state directory."""
    env = {STATE_DIR_ENV: str(state)} if state is not None else None
    return new_runner().invoke(main, ["--ledger", str(home), *map(str, args)], env=env)


def expect(result: Result, code: int, stderr: str | None = None) -> None:
    """Exit code, exact stderr when given, no escaped exception or traceback."""
    assert result.exit_code == code, result.output
    if stderr is not None:
        assert result.stderr == stderr, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output


def ok(home: Path, *args: str | Path) -> str:
    r = run(home, *args)
    expect(r, 0)
    return r.stdout


class World:
    """A ledger with producer ``vendor``, approvers a and b (2 of 2), a trainer, the policy
    serial 1 recorded, and a dataset ``ds-old@1`` of one batch, approved."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.n = 0
        ok(self.home, "init", "--origin", ORIGIN)
        for k in KEYS:
            ok(self.home, "key", "new", k, "--no-encrypt")
        self.v1 = self.vkey()
        self.policy(1)
        ok(self.home, "env", "register", "cart", "--version", "1", "--gym-id", "CartPole-v1",
           "--key", "vendor")
        self.old_batch = self.batch("vendor")
        self.dataset("ds-old", "vendor", self.old_batch)

    @property
    def ledger(self) -> Ledger:
        return Ledger.open(self.home)

    def vkey(self) -> str:
        return str(json.loads(ok(self.home, "log", "info", "--json"))["vkey"])

    def size(self) -> int:
        return int(json.loads(ok(self.home, "log", "info", "--json"))["size"])

    def keyid(self, name: str) -> str:
        return KeyStore(self.home / "keys").public(name).keyid

    def policy_file(
        self,
        serial: int,
        producer: str = "vendor",
        approvers: tuple[str, ...] = ("approver-a", "approver-b"),
        vkeys: tuple[str, ...] = (),
        extra: str = "",
    ) -> Path:
        path = self.home / f"policy-{serial}.toml"
        path.write_text(POLICY.format(
            serial=serial, producer=producer,
            approvers=", ".join(f'"keys/{a}.pub"' for a in approvers),
            vkeys=", ".join(f'"{v}"' for v in (vkeys or (self.v1,))), extra=extra,
        ))  # fmt: skip
        return path

    def policy(self, serial: int, *signers: str, **kw: Any) -> Result:
        """``policy set`` of serial ``serial`` (its changes of membership confirmed)."""
        path = self.policy_file(serial, **kw)
        keys = [x for s in (signers or ("approver-a", "approver-b")) for x in ("--key", s)]
        return run(self.home, "policy", "set", path, *keys, "--yes")

    def parquet(self) -> Path:
        """A small batch file, new each time."""
        self.n += 1
        path = self.root / f"b{self.n}.parquet"
        pq.write_table(pa.table({
            "episode_id": [f"ep-{self.n}"] * 2, "step": [0, 1],
            "obs": [[0.0] * 4, [0.0, float(self.n), 0.0, 0.0]],  # fits CartPole's Box
            "action": [[0.0], [1.0]], "reward": [1.0, float(self.n)],
            "terminated": [False, True], "truncated": [False, False],
        }), path)  # fmt: skip
        return path

    def batch(self, key: str, *, checked: bool = True) -> str:
        """Record a small batch signed by ``key``; its digest. ``checked=False``: without
        trajledger's check that the key holds the producer role (a thief's own tool)."""
        from trajledger.ledger import policy_state

        with pytest.MonkeyPatch.context() as m:
            if not checked:
                m.setattr(policy_state, "check_signers", lambda *_a, **_k: None)
            r = run(self.home, "record", self.parquet(), "--env", "cart@1", "--policy", "p0",
                    "--key", key, "--name", f"batch-{self.n}")
        expect(r, 0)
        return r.stdout.splitlines()[-1]

    def dataset(self, name: str, key: str, batch: str, approvers: tuple[str, ...] = (
            "approver-a", "approver-b")) -> None:
        ok(self.home, "dataset", "create", name, "--version", "1", "--split", "train",
           "--batch", batch, "--key", key)
        for a in approvers:
            ok(self.home, "approve", f"{name}@1", "--key", a)

    def index_of(self, digest: str) -> int:
        for line in ok(self.home, "log", "show", "--json").splitlines():
            e = json.loads(line)
            if e["subject"] == digest:
                return int(e["index"])
        raise AssertionError(digest)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> World:
    old = os.environ.get(STATE_DIR_ENV)
    root = tmp_path_factory.mktemp("rotation")
    os.environ[STATE_DIR_ENV] = str(root / "template-state")
    try:
        return World(root)
    finally:
        if old is not None:
            os.environ[STATE_DIR_ENV] = old


@pytest.fixture
def world(template: World, tmp_path: Path) -> World:
    """A copy of the template ledger (each test's user state is its own, fresh)."""
    w = World.__new__(World)
    w.root, w.home, w.n, w.v1, w.old_batch = (
        tmp_path, tmp_path / "home", template.n, template.v1, template.old_batch)
    shutil.copytree(template.home, w.home, symlinks=True)
    tk.pin_log(w.home)
    return w


def short(vkey: str) -> str:
    return "+".join(vkey.split("+")[:2])


# -- A. producer and approver keys ----------------------------------------------------------------


def test_a_producer_key_is_replaced_by_a_policy_succession(world: World) -> None:
    expect(run(world.home, "admit", "ds-old@1"), 0)
    # Serial 2, signed by the current approvers, makes vendor2 the producer.
    size = world.size()
    expect(world.policy(2, producer="vendor2"), 0)
    # Records the old key signed before the succession's log index were signed under serial 1.
    expect(run(world.home, "admit", "ds-old@1"), 0)
    expect(run(world.home, "verify", "ds-old@1"), 0)
    # What the old key signs now counts for nothing, wherever it is used: trajledger refuses to
    # sign with it, and what a thief's own tool records with it is refused by the verifier.
    r = run(world.home, "record", world.parquet(), "--env", "cart@1", "--policy", "p0",
            "--key", "vendor")
    expect(r, 1)
    assert r.stderr.endswith(
        f"it holds no role in policy 'p' serial 2, want producer (fingerprint "
        f"{world.keyid('vendor')[:16]}; the policy's producer key(s): "
        f"{world.keyid('vendor2')[:16]}); nothing was signed\n"
    )
    stolen = world.batch("vendor", checked=False)
    assert world.index_of(stolen) > size
    world.dataset("ds-stolen", "vendor2", stolen, approvers=())
    refused = (
        f"record: rollout-batch record {world.index_of(stolen)}: no signature by a trusted key: "
        f"0 of 1 required signature(s) verified; the envelope names key "
        f"{world.keyid('vendor')[:12]} (not in the policy), want producer key(s)"
    )
    # An approver is not told OK for it (approve23), and the gate refuses it.
    for a in ("approver-a", "approver-b"):
        r = run(world.home, "approve", "ds-stolen@1", "--key", a)
        expect(r, 1)
        assert refused in r.stderr and "nothing was approved" in r.stderr, r.stderr
    r = run(world.home, "admit", "ds-stolen@1")
    expect(r, 1)
    assert refused in r.stderr
    # The new key counts.
    fresh = world.batch("vendor2")
    world.dataset("ds-new", "vendor2", fresh)
    expect(run(world.home, "admit", "ds-new@1"), 0)
    r = run(world.home, "policy", "show")
    expect(r, 0)
    assert f"in force from log index {size}" in r.stdout


def test_an_approver_key_is_replaced_by_a_policy_succession(world: World) -> None:
    expect(world.policy(2, approvers=("approver-a", "approver-c")), 0)
    # Approvals b gave before the succession still count: 2 of 2.
    expect(run(world.home, "admit", "ds-old@1"), 0)
    # b can no longer approve: refused before anything is written, naming the key and role.
    batch = world.batch("vendor")
    world.dataset("ds-2", "vendor", batch, approvers=("approver-a",))
    size = world.size()
    r = run(world.home, "approve", "ds-2@1", "--key", "approver-b")
    expect(
        r, 1,
        f"FAIL: key approver-b ({world.keyid('approver-b')[:12]}): cannot approve ds-2@1: it "
        f"holds no role in policy 'p' serial 2, want approver (fingerprint "
        f"{world.keyid('approver-b')[:16]}; the policy's approver key(s): "
        f"{', '.join(sorted(world.keyid(a)[:16] for a in ('approver-a', 'approver-c')))}); "
        "nothing was signed\n",
    )  # fmt: skip
    assert world.size() == size
    r = run(world.home, "admit", "ds-2@1")
    expect(r, 1)
    assert "approvals: 1 of 2 required approver(s) for 'train'" in r.stderr
    ok(world.home, "approve", "ds-2@1", "--key", "approver-c")
    expect(run(world.home, "admit", "ds-2@1"), 0)


def test_a_compromised_key_is_distrusted_from_a_log_index(world: World) -> None:
    # The thief records with the stolen key before anyone notices.
    evil = world.batch("vendor")
    since = world.index_of(evil)
    world.dataset("ds-evil", "vendor", evil)
    expect(run(world.home, "admit", "ds-evil@1"), 0)  # nobody knows yet
    revoked = (f'\n[[revoked_keys]]\nkey = "keys/vendor.pub"\ncompromised_since = {since}\n'
               'reason = "laptop stolen"\n')
    expect(world.policy(2, producer="vendor2", extra=revoked), 0)
    # Before the compromise: still valid. From it on: nothing the key signed counts.
    expect(run(world.home, "admit", "ds-old@1"), 0)
    r = run(world.home, "admit", "ds-evil@1")
    expect(r, 1)
    assert (
        f"the envelope names key {world.keyid('vendor')[:12]} (revoked by policy 'p' serial 2: "
        f"compromised since log index {since}: laptop stolen), want producer key(s)"
    ) in r.stderr
    r = run(world.home, "verify", "ds-evil@1")
    expect(r, 1)
    assert "revoked by policy 'p' serial 2" in r.stderr
    # Recording with the revoked key is refused before anything is written.
    size = world.size()
    r = run(world.home, "record", world.parquet(), "--env", "cart@1", "--policy", "p0",
            "--key", "vendor")
    expect(
        r, 1,
        f"FAIL: key vendor ({world.keyid('vendor')[:12]}): revoked by policy 'p' serial 2 "
        f"(compromised since log index {since}: laptop stolen); it cannot sign records\n",
    )  # fmt: skip
    assert world.size() == size
    # A successor cannot quietly trust the key again ...
    r = world.policy(3, producer="vendor2")
    expect(r, 1)
    assert r.stderr.endswith(
        f"FAIL: policy 'p' serial 3: drops the revocation of key {world.keyid('vendor')[:16]} "
        "(serial 2 revokes it); a revoked key stays revoked\n"
    )
    # ... but may distrust everything it ever signed.
    expect(world.policy(3, producer="vendor2", extra=revoked.replace(f"= {since}\n", "= 0\n")),
           0)
    r = run(world.home, "admit", "ds-old@1")
    expect(r, 1)
    assert "compromised since log index 0: laptop stolen" in r.stderr


def test_a_compromise_by_time(world: World) -> None:
    revoked = ('\n[[revoked_keys]]\nkey = "keys/vendor.pub"\n'
               'compromised_since = "2000-01-01T00:00:00Z"\n')
    expect(world.policy(2, producer="vendor2", extra=revoked), 0)
    r = run(world.home, "admit", "ds-old@1")  # every record is newer than 2000
    expect(r, 1)
    assert "compromised since 2000-01-01T00:00:00Z" in r.stderr
    bad = world.policy_file(3, producer="vendor2", extra=revoked.replace('"2000', "2000")
                            .replace('00Z"', "00Z"))
    r = run(world.home, "policy", "check", bad)
    expect(r, 1)
    assert "compromised_since must be a log index (an integer >= 0) or a time" in r.stderr


# -- B. the log key --------------------------------------------------------------------------------


def rotate(home: Path, state: Path | None = None) -> str:
    r = run(home, "log", "rotate-key", state=state)
    expect(r, 0)
    # (another user's first use of the log is announced first)
    assert r.stderr.splitlines()[-1].startswith(f"OK: log {ORIGIN}: key rotated at size ")
    return r.stdout.strip()


def signature_lines(path: Path) -> int:
    return len(Note.from_bytes(path.read_bytes()).signatures)


def test_rotate_the_log_key(world: World) -> None:
    ledger_key = (world.home / "log-key" / "log.key").read_bytes()
    size = world.size()
    v2 = rotate(world.home)
    assert v2 != world.v1 and v2.startswith(ORIGIN + "+")
    # The handover: the current tree, signed by both keys, naming both.
    cp = world.home / "log" / "checkpoint"
    assert signature_lines(cp) == 2
    handover = (world.home / "log" / "key-handovers" / "1").read_bytes()
    assert handover == cp.read_bytes()
    body = Checkpoint.from_text(Note.from_bytes(handover).text)
    assert body.size == size
    assert body.extensions == (f"trajledger.dev/log-key-handover {world.v1} {v2}",)
    # log-key/ holds the new key only; log/vkey names it.
    assert sorted(p.name for p in (world.home / "log-key").iterdir()) == ["log.key", "log.pub"]
    assert (world.home / "log-key" / "log.key").read_bytes() != ledger_key
    assert (world.home / "log" / "vkey").read_text().strip() == v2 == world.vkey()
    # From now on only the new key signs.
    batch = world.batch("vendor")
    assert signature_lines(cp) == 1
    world.dataset("ds-after", "vendor", batch)
    # The recorded policy trusts the old key: it follows the handover.
    r = run(world.home, "verify", "ds-after@1")
    expect(r, 0)
    assert (f"✓ key handover — log key {short(world.v1)} handed over to {short(v2)} at size "
            f"{size}, signed by both; the log since extends that tree") in r.stdout
    expect(run(world.home, "admit", "ds-old@1"), 0)
    expect(run(world.home, "log", "verify"), 0)
    # A policy trusting only the new key verifies too.
    expect(run(world.home, "verify", "ds-after@1", "--policy",
               world.policy_file(9, vkeys=(v2,))), 0)
    # Rotating again chains: old -> v2 -> v3.
    v3 = rotate(world.home)
    expect(run(world.home, "verify", "ds-old@1"), 0)
    assert (world.home / "log" / "key-handovers" / "2").exists() and v3 not in (v2, world.v1)


def test_a_user_who_trusted_the_old_key_continues(world: World, tmp_path: Path) -> None:
    other = tmp_path / "other-user"
    expect(run(world.home, "verify", "ds-old@1", state=other), 0)  # saw it under the old key
    seen = world.size()
    assert TrustState.open(world.v1, other).floor_checkpoint().size == seen  # type: ignore[union-attr]
    v2 = rotate(world.home)
    world.batch("vendor")
    expect(run(world.home, "verify", "ds-old@1", state=other), 0)
    # The other user's state of the new key continued from the old key's floor.
    assert TrustState.open(v2, other).floor_checkpoint().size == seen + 1  # type: ignore[union-attr]


def seen_ahead(world: World, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the ledger at size n (old key), and the state of another user who then saw
    it at size n + 2."""
    seed = tmp_path / "seed"
    shutil.copytree(world.home, seed, symlinks=True)  # the log at size n, old key
    other = tmp_path / "other-user"
    world.batch("vendor")
    world.batch("vendor")
    expect(run(world.home, "verify", "ds-old@1", state=other), 0)  # saw size n + 2, old key
    return seed, other


def test_a_rollback_across_the_rotation_is_refused(world: World, tmp_path: Path) -> None:
    seed, other = seen_ahead(world, tmp_path)
    # Whoever holds the old ledger rotates it and grows another history from size n.
    shutil.rmtree(world.home)
    shutil.copytree(seed, world.home, symlinks=True)
    rotate(world.home, state=tmp_path / "operator")
    r = run(world.home, "log", "info", state=other)
    expect(r, 1)
    assert "does not extend the tree of size" in r.stderr
    assert "checkpoint rollback" in r.stderr and "nothing was changed" in r.stderr


def test_verify_bundle_applies_the_floor_seen_under_the_old_key(
    world: World, tmp_path: Path
) -> None:
    """redo15 finding 2: a bundle signed by the new key showing an older tree than this user
    saw under the old key is a rollback across the handover (before: OK, no floor was held
    under the new key)."""
    seed, other = seen_ahead(world, tmp_path)
    seen = world.size()
    # Whoever holds the old ledger rotates it at size n and exports from the new key.
    rotate(seed, state=tmp_path / "operator")
    bundle = tmp_path / "rolled-back.tar.zst"
    expect(run(seed, "export", "ds-old@1", "--out", bundle, state=tmp_path / "operator"), 0)
    r = run(world.home, "verify", bundle, "--policy", world.policy_file(1), state=other)
    expect(r, 1)
    assert "log fork or rollback" in r.stderr, r.output
    assert f"size {seen} seen under key {short(world.v1)}" in r.stderr, r.output
    # The same user with a floor no newer than the bundle's tree verifies it.
    fresh = tmp_path / "fresh-user"
    r = run(world.home, "verify", bundle, "--policy", world.policy_file(1), state=fresh)
    expect(r, 0)


def test_a_log_key_spelt_in_upper_case_is_refused(world: World, tmp_path: Path) -> None:
    """redo15 finding 1: the same log key with its key ID in upper case was another key to
    this user's state (keyed by the vkey string): a bundle naming it so escaped the floor
    held under the key, and a rollback verified. Now such a vkey is refused where it is read
    (exit 1 for a bundle, 2 for a user's argument)."""
    seed = tmp_path / "seed"
    shutil.copytree(world.home, seed, symlinks=True)  # the log at size n
    bundle = tmp_path / "old.tar.zst"
    ok(seed, "export", "ds-old@1", "--out", bundle)
    world.batch("vendor")
    expect(run(world.home, "verify", "ds-old@1"), 0)  # this user saw size n + 1
    expect(run(world.home, "verify", bundle, "--policy", world.policy_file(1)), 1)  # rollback
    name, key_id, key = world.v1.split("+", 2)
    if key_id == key_id.upper():  # about 1 run in 40: a random key ID of digits only
        pytest.skip(f"this run's log key ID {key_id} has no letter, so no other spelling")
    members = tk.bundle_members(bundle)
    index = replace(BundleIndex.from_bytes(members[0][1]), vkey=f"{name}+{key_id.upper()}+{key}")
    spelt = tk.write_bundle(tmp_path / "spelt.tar.zst", [
        ("bundle.json", bundle_index_bytes(index)), *members[1:]])
    r = run(world.home, "verify", spelt, "--policy", world.policy_file(1))
    expect(r, 1)
    assert "8 lower-case hex digits" in r.stderr and len(r.stderr.splitlines()) == 1, r.output
    r = run(world.home, "trust", f"{name}+{key_id.upper()}+{key}")
    expect(r, 2)
    assert "8 lower-case hex digits" in r.stderr, r.output


def test_the_floor_seen_under_the_old_key_holds_for_a_policy_of_the_new_key(
    world: World, tmp_path: Path
) -> None:
    """Finding 2 with a policy that names only the new key: the floor this user saw under the
    old key is a checkpoint of the same log (the bundle's handovers lead from that key to the
    trusted one), so a genuine bundle that extends it verifies, and a rollback behind it is
    refused (before: 'not one this log signed' for both)."""
    seed, other = seen_ahead(world, tmp_path)
    seen = world.size()
    v2 = rotate(world.home, state=tmp_path / "operator")
    policy = world.policy_file(9, vkeys=(v2,))
    genuine = tmp_path / "genuine.tar.zst"
    ok(world.home, "export", "ds-old@1", "--out", genuine, "--consistency-from", str(seen))
    expect(run(world.home, "verify", genuine, "--policy", policy, state=other), 0)
    rotate(seed, state=tmp_path / "operator2")  # another new key, from the old size
    rolled = tmp_path / "rolled-back.tar.zst"
    expect(run(seed, "export", "ds-old@1", "--out", rolled, state=tmp_path / "operator2"), 0)
    r = run(world.home, "verify", rolled, "--policy", world.policy_file(10, vkeys=(
        (seed / "log" / "vkey").read_text().strip(),)), state=other)
    expect(r, 1)
    assert f"size {seen} seen under key {short(world.v1)}" in r.stderr, r.output
    assert "log fork or rollback" in r.stderr, r.output


def forge_key(world: World, name: str = "forged") -> Signer:
    """Replace the log's key by an unknown one, re-signing the checkpoint (no handover)."""
    forged = Signer.generate(name)
    keys = world.home / "log-key"
    (keys / "log.key").write_bytes(forged.private_pem(None))
    (keys / "log.pub").write_bytes(forged.public.to_pem())
    vkey = vkey_string(ORIGIN, forged.public.raw_ed25519())
    cp = world.home / "log" / "checkpoint"
    text = Note.from_bytes(cp.read_bytes()).text
    v = vkey.split("+")
    kh = bytes.fromhex(v[1])
    cp.write_bytes(text + b"\n" + format_signature_line(ORIGIN, kh, forged.sign(text)))
    (world.home / "log" / "vkey").write_text(vkey + "\n")
    return forged


def test_a_key_no_handover_names_is_refused(world: World) -> None:
    v2 = rotate(world.home)
    expect(run(world.home, "verify", "ds-old@1"), 0)  # this user trusts v2 now
    forged = forge_key(world)
    r = run(world.home, "log", "info")
    expect(r, 1)
    assert "no key handover signed by that key leads to the new one: a replaced key, not a " \
        "rotation; nothing was changed" in r.stderr
    # A handover to the forged key that the key it hands over from did not sign does not help.
    vkey = vkey_string(ORIGIN, forged.public.raw_ed25519())
    tree = Checkpoint.from_text(Note.from_bytes(
        (world.home / "log" / "checkpoint").read_bytes()).text)
    text = checkpoint_text(Checkpoint(tree.origin, tree.size, tree.root,
                      (f"trajledger.dev/log-key-handover {v2} {vkey}",)))
    kh = bytes.fromhex(vkey.split("+")[1])
    (world.home / "log" / "key-handovers" / "2").write_bytes(
        text + b"\n" + format_signature_line(ORIGIN, kh, forged.sign(text)))
    r = run(world.home, "log", "info")
    expect(r, 1)
    assert f"key handover 2: not signed by the old key {v2}" in r.stderr
    # Whoever holds the policy (the first key) and reads the directory alone refuses it too.
    r = run(world.home, "verify", "ds-old@1", "--policy", world.policy_file(1))
    expect(r, 1)


def test_bundles_after_a_rotation_verify_for_either_key(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v2 = rotate(world.home)
    batch = world.batch("vendor")
    world.dataset("ds-after", "vendor", batch)
    bundle = tmp_path / "after.tar.zst"
    ok(world.home, "export", "ds-after@1", "--out", bundle)
    for vkeys, code in (((world.v1,), 0), ((v2,), 0), ((world.v1, v2), 0),
                        ((vkey_string(ORIGIN, Signer.generate("x").public.raw_ed25519()),), 1)):
        policy = world.policy_file(9, vkeys=vkeys)
        assert verify_main([str(bundle), "--policy", str(policy)]) == code, capsys.readouterr()
    capsys.readouterr()
    # A buyer trusting the old key imports it.
    buyer = tmp_path / "buyer"
    ok(buyer, "init", "--origin", "test/buyer")
    for k in ("b1", "b2"):
        ok(buyer, "key", "new", k, "--no-encrypt")
    shutil.copytree(world.home / "keys", buyer / "trust", ignore=shutil.ignore_patterns("*.key"))
    for b in ("b1", "b2"):
        shutil.copy(buyer / "keys" / f"{b}.pub", buyer / "trust" / f"{b}.pub")
    policy = buyer / "policy.toml"
    policy.write_text(
        POLICY.format(serial=1, producer="vendor", approvers='"keys/b1.pub", "keys/b2.pub"',
                      vkeys=f'"{world.v1}"', extra="").replace('"keys/vendor', '"trust/vendor')
        .replace('"keys/trainer', '"trust/trainer')
    )  # fmt: skip
    r = run(buyer, "import", bundle, "--policy", policy, "--key", "b1", "--key", "b2")
    expect(r, 0)


def test_an_import_before_and_after_the_rotation_continues(world: World, tmp_path: Path) -> None:
    buyer, state = tmp_path / "buyer", tmp_path / "buyer-state"  # another user than the vendor
    expect(run(buyer, "init", "--origin", "test/buyer", state=state), 0)
    for k in ("b1", "b2"):
        ok(buyer, "key", "new", k, "--no-encrypt")
    policy = buyer / "policy.toml"
    keys = {k: world.home / "keys" / f"{k}.pub" for k in ("vendor", "trainer")}
    policy.write_text(
        POLICY.format(serial=1, producer="vendor", approvers='"keys/b1.pub", "keys/b2.pub"',
                      vkeys=f'"{world.v1}"', extra="")
        .replace('"keys/vendor.pub"', f'"{keys["vendor"]}"')
        .replace('"keys/trainer.pub"', f'"{keys["trainer"]}"')
    )  # fmt: skip
    before = tmp_path / "before.tar.zst"
    ok(world.home, "export", "ds-old@1", "--out", before)
    args = ("import", "--policy", policy, "--key", "b1", "--key", "b2")
    expect(run(buyer, *args, before, state=state), 0)
    seen = world.size()
    world.batch("vendor")
    rotate(world.home)  # at another size than the buyer saw
    world.batch("vendor")
    after = tmp_path / "after.tar.zst"
    # Without a proof from the size the buyer saw, the continuation cannot be shown.
    ok(world.home, "export", "ds-old@1", "--out", after)
    r = run(buyer, *args, after, state=state)
    expect(r, 1)
    assert f"the bundle holds no consistency proof from size {seen}" in r.stderr
    # With the proof, the buyer's size applied under the old key counts under the new one
    # (out37 finding 2): the log since it must come too, as without a rotation.
    ok(world.home, "export", "ds-old@1", "--out", after, "--consistency-from", str(seen))
    r = run(buyer, *args, after, state=state)
    expect(r, 1)
    assert f"unprovable: the bundle does not carry the log since size {seen}" in r.stderr
    ok(world.home, "export", "ds-old@1", "--out", after, "--updates-since", str(seen))
    expect(run(buyer, *args, after, state=state), 0)


@pytest.fixture
def served(world: World) -> Iterator[str]:
    server = LogServer(world.home / "log")
    server.start()
    yield server.url
    server.stop()


def test_a_monitor_follows_the_rotation(world: World, served: str, tmp_path: Path) -> None:
    watcher = {STATE_DIR_ENV: str(tmp_path / "watcher")}  # another user than the vendor

    def monitor(*args: str) -> Result:
        return new_runner().invoke(main, ["monitor", served, *args], env=watcher)

    expect(monitor("--vkey", world.v1), 0)
    seen = world.size()
    rotate(world.home)
    world.batch("vendor")
    r = monitor("--vkey", world.v1, "--json")
    expect(r, 0)
    result = json.loads(r.stdout)
    assert result["vkey"] == world.vkey() != world.v1
    assert (result["old_size"], result["size"], result["advanced"]) == (seen, seen + 1, True)
    assert "WARNING: the log's key was rotated" in r.stderr
    expect(monitor("--vkey", world.v1), 0)  # again: nothing new
    expect(monitor("--vkey", result["vkey"]), 0)
    forge_key(world)
    r = monitor("--vkey", world.v1)
    expect(r, 1)
    assert "note has no signature by a known key" in r.stderr


def test_an_interrupted_rotation_is_finished_by_running_it_again(world: World) -> None:
    ledger = world.ledger
    keys = KeyStore(world.home / "log-key")
    new = keys.create("next", encrypt=False)
    ledger.log.rotate_key(new)  # the handover is published; the key files are not swapped yet
    expect(run(world.home, "log", "info"), 0)
    world.batch("vendor")  # appends sign with the next key meanwhile
    v2 = rotate(world.home)
    assert v2 == vkey_string(ORIGIN, new.public.raw_ed25519())
    assert sorted(p.name for p in (world.home / "log-key").iterdir()) == ["log.key", "log.pub"]
    expect(run(world.home, "verify", "ds-old@1"), 0)
    assert len(list((world.home / "log" / "key-handovers").iterdir())) == 1


def test_a_reader_opened_before_a_rotation_follows_its_handover(world: World) -> None:
    """A process that opened the log under the old key reads a checkpoint published after a
    rotation (signed by the new key only): it follows the handover the old key signed, and
    its state continues (fix11; it reported tampering before: 'not a checkpoint signed by the
    log key')."""
    reader = world.ledger
    seen = reader.trust_state().size
    reader.log.require_signer()  # (as a record does when it starts: the key of then)
    assert reader.log.vkey == world.v1
    v2 = rotate(world.home)
    world.batch("vendor")  # signed by the new key only
    assert reader.log.size == seen + 1
    assert reader.log.vkey == v2
    assert reader.trust_state().size == seen + 1
    assert TrustState.open(v2).floor_checkpoint().size == seen + 1  # type: ignore[union-attr]
    expect(run(world.home, "verify", "ds-old@1"), 0)
    # It holds the retired key (rev13 finding 1): it never signs with it, but with the key
    # it followed to, loaded again (fix13; rev13 refused the append).
    reader.record_batch(pq.read_table(world.parquet()), env="cart@1", policy="p0",
                        key="vendor", name="after")
    assert world.size() == seen + 2
    note = (world.home / "log" / "checkpoint").read_bytes()
    assert len(Note.from_bytes(note).signatures) == 1
    verify_checkpoint(note, verifier_from_vkey(v2))
    assert TrustState.open(v2).floor_checkpoint().size == seen + 2  # type: ignore[union-attr]
    expect(run(world.home, "log", "verify"), 0)


def test_a_reader_opened_before_a_rotation_that_cannot_read_its_handover_is_no_tamper(
        world: World) -> None:
    """A reader opened under the old key follows the handover to read a checkpoint signed by
    the new key only; a handover its disk failed (EIO) was taken for none, and the rotation
    for a replaced key: `TamperError` "not a checkpoint signed by the log key" (exit 1), the
    log accused for a fault of the disk (`LogReader._follow_rotation`, fault27's Left). Now
    the read's error, operational (exit 3), and nothing followed (review fault28)."""
    import errno

    from faultkit import Faults

    reader = world.ledger
    reader.trust_state()
    reader.log.require_signer()
    rotate(world.home)
    world.batch("vendor")  # signed by the new key only
    with Faults(str(world.home), reads=True, where="key-handovers/1",
                code=errno.EIO).active(), pytest.raises(LogError) as failed:
        reader.log.checkpoint()
    assert not isinstance(failed.value, TamperError)
    assert str(failed.value) == (
        f"log {ORIGIN}: its checkpoint is not signed by the key this command opened it with, "
        "and whether the key was rotated cannot be read: key handover "
        f"{world.home / 'log' / 'key-handovers' / '1'}: cannot read: Input/output error")
    assert reader.log.vkey == world.v1
    reader.log.checkpoint()  # the disk reads it again: followed
    assert reader.log.vkey != world.v1


def _log_files(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home / "log")): p.read_bytes()
            for p in sorted((home / "log").rglob("*")) if p.is_file() and p.name != "lock"}


@pytest.mark.parametrize("handover", ["none", "signed by the new key alone"])
def test_a_writer_holding_the_log_key_does_not_follow_a_replaced_key(
    world: World, handover: str
) -> None:
    """A writer holding the log's key (loaded when it started) finds the log's key replaced:
    ``vkey`` names a key no verified handover leads to (none at all; one signed by the new
    key alone), whose private key is in ``log-key/`` and which signed the checkpoint again.
    It is refused as in rev13: nothing appended, the replaced key never signs. fix13 follows
    only a verified rotation: each case fails with the chain check removed from the writer's
    follow (the planted key then signs the append)."""
    writer = world.ledger
    seen = writer.trust_state().size
    writer.log.require_signer()
    planted = forge_key(world, "planted")
    vkey = vkey_string(ORIGIN, planted.public.raw_ed25519())
    if handover != "none":
        tree = Checkpoint.from_text(Note.from_bytes(
            (world.home / "log" / "checkpoint").read_bytes()).text)
        text = checkpoint_text(Checkpoint(tree.origin, tree.size, tree.root,
                               (f"trajledger.dev/log-key-handover {world.v1} {vkey}",)))
        (world.home / "log" / "key-handovers").mkdir()
        (world.home / "log" / "key-handovers" / "1").write_bytes(
            text + b"\n" + format_signature_line(ORIGIN, bytes.fromhex(vkey.split("+")[1]),
                                                 planted.sign(text)))
    before = _log_files(world.home)
    with pytest.raises(LogError) as refused:
        writer.log.append([EntrySpec("files", "sha256:" + "0" * 64, "sha256:" + "1" * 64,
                                     [world.keyid("vendor")])])
    assert str(refused.value) == (
        f"log {ORIGIN}: its key was rotated by another command while this one ran (the log's "
        "vkey file now names another key); nothing was appended: run the command again")
    assert _log_files(world.home) == before
    assert TrustState.open(world.v1).floor_checkpoint().size == seen  # type: ignore[union-attr]


def test_a_reader_opened_before_a_replaced_key_does_not_follow_it(world: World) -> None:
    """A key no handover signed by the reader's key names (here: none at all; or one signed
    by the new key alone) is still refused as tampering by a reader already open."""
    reader = world.ledger
    reader.trust_state()
    forged = forge_key(world)
    with pytest.raises(TamperError, match="not a checkpoint signed by the log key"):
        reader.log.checkpoint()
    vkey = vkey_string(ORIGIN, forged.public.raw_ed25519())
    tree = Checkpoint.from_text(Note.from_bytes(
        (world.home / "log" / "checkpoint").read_bytes()).text)
    text = checkpoint_text(Checkpoint(tree.origin, tree.size, tree.root,
                      (f"trajledger.dev/log-key-handover {world.v1} {vkey}",)))
    kh = bytes.fromhex(vkey.split("+")[1])
    (world.home / "log" / "key-handovers").mkdir()
    (world.home / "log" / "key-handovers" / "1").write_bytes(
        text + b"\n" + format_signature_line(ORIGIN, kh, forged.sign(text)))
    with pytest.raises(TamperError, match="not a checkpoint signed by the log key"):
        reader.log.checkpoint()
    assert reader.log.vkey == world.v1
