"""End to end: a hostile vendor against a buyer that imports from two vendors (the fifth review
round, rev4; docs/SECURITY.md "Review of 2026-12-03, fifth round").

Each party has its own ledger and state directory (`test_updates.Vendor`, `Buyer`); every
command goes through the CLI. A hostile vendor controls its own log: what its log writer appends
(an entry's kind, subject and signers) is its word, proven only to be in its log.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_updates import Buyer, Vendor, rollouts, short, two_vendors_trained, vendor_copy

from trajledger.ledger.home import LedgerHome
from trajledger.ledger.log import EntrySpec


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


def keyid(party: Vendor | Buyer, name: str) -> str:
    return str(next(k["keyid"] for k in json.loads(party.run("key", "list", "--json").stdout)
                    if k["name"] == name))


def append_claim(party: Vendor, subject: str, signer: str) -> None:
    """What a hostile vendor's log writer can append: an entry claiming that ``signer`` signed a
    rollout-batch record of ``subject`` (its envelope is any bytes of the vendor's)."""
    os.environ["TRAJLEDGER_STATE_DIR"] = str(party.state)
    home = LedgerHome.open(party.home)
    envelope = home.store.put_bytes(f'{{"claim": "{subject}"}}'.encode())
    home.log.append([EntrySpec("rollout-batch", subject, envelope, (signer,))])


def test_a_vendor_cannot_declare_another_partys_key_compromised_here(tmp_path: Path) -> None:
    """Vendor two lists vendor one's producer key and the buyer's trainer key in its own policy,
    appends entries saying those keys signed vendor one's batch and the buyer's checkpoint,
    then declares both keys compromised since 0. Before the fix the buyer's import revoked both
    here, signed by the buyer's own approver (so they counted everywhere), and told the buyer to
    distrust vendor one's key: a vendor stopped another vendor's data and the buyer's own."""
    one, two, buyer, ckpt = two_vendors_trained(tmp_path, ("one", "two"), "p")
    applied = two.size()
    victims = {"one": (one.home / "keys" / "vendor.pub", one.batches[0]),
               "trainer": (buyer.home / "keys" / "trainer.pub", ckpt)}
    ids = {"one": keyid(one, "vendor"), "trainer": keyid(buyer, "trainer")}
    policy = two.home / "policy.toml"
    first = policy.read_text()
    for name, (pub, _subject) in victims.items():
        (two.home / f"{name}.pub").write_bytes(pub.read_bytes())
    policy.write_text(first.replace("serial = 1", "serial = 2").replace(
        "keys = [", 'keys = ["one.pub", "trainer.pub", ', 1))
    two.run("policy", "set", policy, "--key", "vendor", "--yes")
    for name, (_pub, subject) in victims.items():
        append_claim(two, subject, ids[name])
    policy.write_text(first.replace("serial = 1", "serial = 3") + "".join(
        f'\n[[revoked_keys]]\nkey = "{k}"\ncompromised_since = 0\nreason = "hostile"\n'
        for k in ids.values()))
    two.run("policy", "set", policy, "--key", "vendor", "--yes")
    update = tmp_path / "update.tar.zst"
    two.run("export", "--updates-since", str(applied), "--out", update)
    before = buyer.size()
    r = buyer.run("import", update, "--key", "approver")
    assert " is compromised" not in r.stderr and "still trusts" not in r.stderr, r.stderr
    for subject, key in ((one.batches[0], ids["one"]), (ckpt, ids["trainer"])):
        assert any(line.startswith("NOTE: ignored: key compromise at log index ")
                   and f" of {two.origin} about " in line and f"({short(subject)}): its log "
                   f"says key {key[:16]} signed it, and declares that key compromised, but you "
                   "hold it as your own or from another log" in line
                   for line in r.stderr.splitlines()), r.stderr
    assert buyer.size() == before + 1  # the import record, no revocation
    buyer.run("admit", one.dataset)
    buyer.run("verify", ckpt)


def test_a_vendor_declaring_a_key_of_anothers_that_its_log_never_used_does_not_say_distrust_it(
        tmp_path: Path) -> None:
    """The attack above without the claims (hist41 finding 6): vendor two lists vendor one's
    producer key in its policy and declares it compromised, with no entry of its log signed by
    it. The buyer's import said ``your policy still trusts it as producer: record a successor
    without it``, as if vendor two's word on another party's key were proof. It is named now as
    what it is: nothing of two's log signed by it, and the way on only if the key is theirs."""
    one, two, buyer, _ckpt = two_vendors_trained(tmp_path, ("one", "two"), "p")
    applied = two.size()
    theirs = keyid(one, "vendor")
    (two.home / "one.pub").write_bytes((one.home / "keys" / "vendor.pub").read_bytes())
    policy = two.home / "policy.toml"
    first = policy.read_text()
    policy.write_text(first.replace("serial = 1", "serial = 2").replace(
        "keys = [", 'keys = ["one.pub", ', 1))
    two.run("policy", "set", policy, "--key", "vendor", "--yes")
    policy.write_text(first.replace("serial = 1", "serial = 3") + f'\n[[revoked_keys]]\nkey = '
                      f'"{theirs}"\ncompromised_since = 0\nreason = "hostile"\n')
    two.run("policy", "set", policy, "--key", "vendor", "--yes")
    update = tmp_path / "update.tar.zst"
    two.run("export", "--updates-since", str(applied), "--out", update)
    r = buyer.run("import", update, "--key", "approver")
    assert "still trusts" not in r.stderr, r.stderr
    # (upd46: one's key signed one's policies, none of two's: two's word is a claim)
    assert f"signed the policies of {one.origin} and none of {two.origin}'s: {two.origin}'s " \
        "word on it is a claim, not its owner's declaration (not revoked here)" in r.stderr, \
        r.stderr
    assert f'record a successor with [[revoked_keys]] key = "{theirs}"' in r.stderr, r.stderr
    buyer.run("admit", one.dataset)


def test_a_vendors_erasure_deletes_no_blob_another_artifact_here_holds(tmp_path: Path) -> None:
    """The buyer recorded, as its own batch, a rollout file the vendor's batch also holds (the
    store keeps one blob per content). The vendor's erasure of its batch deleted that blob here:
    the buyer's own batch lost its steps.parquet (and features file) and then verified as
    "erased" by the vendor's record. A vendor's erasure now deletes only what no other
    artifact here (not erased) lists, and says what it kept."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    buyer.run("import", vendor.bundle, "--key", "approver")
    buyer.run("env", "register", "grid", "--version", "1", "--source", "sim", "--key",
              "producer")  # fmt: skip
    own = buyer.last("record", tmp_path / "vendor-1.parquet", "--env", "grid@1", "--policy",
                     "mine", "--name", "own-1", "--licence", "CC-BY-4.0", "--key", "producer")
    files = {f["path"]: f["digest"] for f in json.loads(buyer.run("show", own, "--json").stdout)
             ["files"]}  # fmt: skip
    shared = files["steps.parquet"]
    theirs = {f["digest"] for f in json.loads(buyer.run("show", vendor.batches[0], "--json")
                                              .stdout)["files"]}  # fmt: skip
    assert shared in theirs  # one blob, two batches
    applied = vendor.size()
    vendor.run("erase", vendor.batches[0], "--reason", "consent", "--key", "vendor")
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    r = buyer.run("import", update, "--key", "approver")
    line = next(x for x in r.stderr.splitlines() if x.startswith("WARNING: erased by "))
    assert line.endswith("1 blob(s) deleted here; 2 kept: also a file of rollout-batch own-1 "
                         f"({short(own)})"), line
    r = buyer.run("verify", own)
    assert "erased" not in r.stderr + r.stdout, r.output
    r = buyer.run("verify", vendor.batches[0])
    assert "1 erased" in r.stderr or "erased" in r.stdout, r.output


def test_a_vendor_cannot_answer_to_another_vendors_qualified_name(tmp_path: Path) -> None:
    """An origin-qualified reference (``ORIGIN+[KEYHASH+]NAME``) names what that origin's log
    brought here. Vendor two named a batch ``<one's origin>+one-3``, a name vendor one never
    used: before the fix, ``show``, ``dataset create --batch`` and every other command given
    the reference the buyer would write for vendor one's ``one-3`` took vendor two's batch (the
    literal name was the fallback when the origin held no such name). A reference qualified by
    an origin names nothing else; vendor two's batch keeps its own qualified name (rev5)."""
    one = vendor_copy(tmp_path, "one", "one.example/log")
    two = vendor_copy(tmp_path, "two", "two.example/log", seeds=(3, 4))
    buyer = Buyer(tmp_path, [one, two])
    buyer.run("import", one.bundle, "--key", "approver")
    bare = one.origin.split("+")[0]
    squats = [two.last("record", rollouts(tmp_path / f"squat-{k}.parquet", 5 + k), "--env",
                       "grid@1", "--policy", "scripted", "--name", f"{origin}+one-3",
                       "--licence", "CC-BY-4.0", "--key", "vendor")
              for k, origin in enumerate((one.origin, bare))]  # fmt: skip
    for squat in squats:
        bundle = tmp_path / f"{squat[7:15]}.tar.zst"
        two.run("export", squat, "--out", bundle)
        buyer.run("import", bundle, "--key", "approver")
    assert json.loads(buyer.run("show", f"{bare}+one-1", "--json").stdout)["digest"] == \
        one.batches[0]  # one's own batch, by its qualified name
    for ref in (f"{one.origin}+one-3", f"{bare}+one-3"):
        r = buyer.run("show", ref, code=3)
        assert r.stderr.startswith(f"FAIL: {ref}: no "), r.stderr
    for squat, origin in zip(squats, (one.origin, bare), strict=True):
        shown = json.loads(buyer.run("show", f"{two.origin}+{origin}+one-3", "--json").stdout)
        assert shown["digest"] == squat


@pytest.mark.parametrize("unreadable", [False, True])
def test_a_key_its_vendor_declared_compromised_is_named_when_another_log_brings_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unreadable: bool,
) -> None:
    """Vendor one declares its producer key compromised; the buyer takes that in. The thief
    (vendor two, a log the buyer also trusts) lists the stolen key in its policy, records a
    dataset with it and sells it. Before the fix the import took it in without a word and
    `approve`, `admit` and `train` passed: one's declaration stops only what one's log brought
    (a policy may list anyone's key, rev4), and the buyer's policy still trusts the key until
    it records a successor. The import now names the key, who declared it and what it signed
    (rev24 finding 1)."""
    import shutil

    one = vendor_copy(tmp_path, "one", "one.example/log")
    two = vendor_copy(tmp_path, "two", "two.example/log", seeds=(3, 4))
    buyer = Buyer(tmp_path, [one, two])
    buyer.run("import", one.bundle, "--key", "approver")
    applied, stolen = one.size(), keyid(one, "vendor")
    one.run("key", "new", "vendor-new", "--no-encrypt")
    new = tmp_path / "new.toml"
    one.run("policy", "init", "--roles", "producer", "--producer", "vendor-new", "--out", new)
    new.write_text(new.read_text().replace("serial = 1", "serial = 2") + f'\n[[revoked_keys]]\n'
                   f'key = "{stolen}"\ncompromised_since = 0\nreason = "stolen laptop"\n')
    one.run("policy", "set", new, "--key", "vendor", "--yes")
    update = tmp_path / "update.tar.zst"
    one.run("export", "--updates-since", str(applied), "--out", update)
    assert " is compromised " in buyer.run("import", update, "--key", "approver").stderr
    r = buyer.run("import", two.bundle, "--key", "approver")  # signed by two's own key
    seen = two.size()
    assert " declares compromised" not in r.stderr, r.stderr
    for end in ("key", "pub"):
        shutil.copy(one.home / "keys" / f"vendor.{end}", two.home / "keys" / f"stolen.{end}")
    policy = two.home / "policy.toml"
    policy.write_text(policy.read_text().replace("serial = 1", "serial = 2")
                      .replace("keys = [", 'keys = ["keys/stolen.pub", ', 1))  # fmt: skip
    two.run("policy", "set", policy, "--key", "vendor", "--yes")
    two.run("env", "register", "loot", "--version", "1", "--source", "sim", "--key", "stolen")
    batch = two.last("record", rollouts(tmp_path / "loot.parquet", 11), "--env", "loot@1",
                     "--policy", "scripted", "--name", "loot-1", "--licence", "CC-BY-4.0",
                     "--key", "stolen")  # fmt: skip
    loot = two.last("dataset", "create", "loot", "--version", "2", "--split", "train",
                    "--batch", batch, "--key", "stolen")  # fmt: skip
    bundle = tmp_path / "loot.tar.zst"
    two.run("export", "loot@2", "--updates-since", str(seen), "--out", bundle)
    if unreadable:  # left29 finding 2: one's policy record, unreadable, was taken for absent
        _eio_on_reading(monkeypatch, b"stolen laptop")
        r = buyer.run("import", bundle, "--key", "approver", code=3)
        assert "the import record is recorded at log index" in r.stderr, r.stderr
        assert "Input/output error" in r.stderr and "run it again" in r.stderr, r.stderr
        return
    r = buyer.run("import", bundle, "--key", "approver", "--json")
    line = next((x for x in r.stderr.splitlines() if x.startswith(f"WARNING: key {stolen[:16]}")),
                r.stderr)  # fmt: skip
    assert line.startswith(f"WARNING: key {stolen[:16]}, which {one.origin} declares compromised "
                           "(compromised since log index 0: stolen laptop; its policy "
                           f"'one.example/log' serial 2), signed what was just taken in from "
                           f"{two.origin}: "), line  # fmt: skip
    assert f"rollout-batch loot-1 ({short(batch)})" in line and f"dataset loot@2 ({short(loot)})" \
        in line and line.endswith(f'record a successor with [[revoked_keys]] key = "{stolen}"')
    suspect = json.loads(r.stdout)["import"]["suspect"]
    assert [(s["key"], s["declaredBy"], loot in s["digests"]) for s in suspect] == \
        [(stolen, one.origin, True)]  # fmt: skip


def _eio_on_reading(monkeypatch: pytest.MonkeyPatch, text: bytes) -> None:
    """Reading a stored envelope whose payload holds ``text`` fails with EIO."""
    import base64
    import errno

    from trajledger.ledger.store import ObjectStore

    get = ObjectStore.get

    def failing(self: ObjectStore, digest: str, **kw: object) -> bytes:
        data = get(self, digest, **kw)  # type: ignore[arg-type]
        try:
            payload = base64.b64decode(json.loads(data)["payload"])
        except (ValueError, KeyError, TypeError):
            return data
        if text in payload:
            raise OSError(errno.EIO, "Input/output error", digest)
        return data

    monkeypatch.setattr(ObjectStore, "get", failing)
