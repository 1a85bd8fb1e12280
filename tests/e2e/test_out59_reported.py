"""What out59 found playing three organisations as outsiders (README.md, docs/ and ``--help``
only): a vendor A that records and exports, a lab B that imports, approves, trains and
re-exports, a third party C that verifies and trains; A replacing its producer key (the planned
rotation of keys/README.md, not a compromise) while B and C pin the old one; and two vendors
whose datasets, batches and key files have the same names. docs/SECURITY.md, "Review of
2026-12-07, forty-first round (out59)". Every refusal leaves the party's ledger and user state
as they were, file by file (`refused`).
"""

from __future__ import annotations

from pathlib import Path

from test_out55_reported import refused
from test_third_party_updates import third_party
from test_updates import Buyer, Vendor, rollouts, train_a_buyer, vendor_copy
from testkit import Party, built_once

LAB_POLICY = 'name = "buyer"\nserial = {serial}\n{publish}' + """\
accepted_licences = ["CC-BY-4.0"]
[roles.producer]
keys = [{producers}]
[roles.approver]
keys = ["keys/approver.pub"]
[roles.trainer]
keys = ["keys/trainer.pub"]
[roles.log]
vkeys = [{vkeys}]
"""
PUBLISH = 'format = 3\npublish = ["revocation", "erasure", "trust-policy", "import"]\n'


def origin(party: Party) -> str:
    """A party's log as lines name it: ``ORIGIN+KEYHASH``."""
    return "+".join(party.vkey().split("+")[:2])


def keyid(party: Party, name: str) -> str:
    """The keyid of ``party``'s key ``name`` (``key list --json``)."""
    import json

    keys = json.loads(party.run("key", "list", "--json").stdout)
    return str(next(k["keyid"] for k in keys if k["name"] == name))


def lab_policy(lab: Party, vendor: Vendor, serial: int, producers: tuple[str, ...],
               publish: str = "") -> None:
    """Record the lab's successor of ``serial`` trusting the vendor's ``producers`` (its key
    files, copied under the lab's ``trust/``) and its own producer."""
    for name in producers:
        (lab.home / "trust" / f"{name}.pub").write_bytes(
            (vendor.home / "keys" / f"{name}.pub").read_bytes())
    text = LAB_POLICY.format(
        serial=serial, publish=publish, vkeys=f'"{vendor.vkey()}", "{lab.vkey()}"',
        producers=", ".join([*(f'"trust/{n}.pub"' for n in producers), '"keys/producer.pub"']))
    (lab.home / f"policy{serial}.toml").write_text(text)
    lab.run("policy", "set", lab.home / f"policy{serial}.toml", "--key", "approver", "--yes")


def rotated(root: Path) -> tuple[Vendor, Party, Party, str]:
    """A's dataset trained on by B, B's checkpoint imported by C (whose policy pins A's
    producer key); then A replaces its producer key ``vendor`` by ``vendor2`` (a successor
    policy), records a batch and ``bh@2`` with it and exports its update since what B applied
    (``vendor-update.tar.zst``) and ``bh@2`` (``vendor-bh2.tar.zst``). Built once per test
    process and copied (`testkit.built_once`)."""
    return built_once("rotated", root, _build_rotated)


def _build_rotated(root: Path) -> tuple[Vendor, Party, Party, str]:
    vendor, lab, ckpt = train_a_buyer(root)
    lab.run("export", "bh-policy@1", "--out", root / "lab-checkpoint.tar.zst")
    third = third_party(root, vendor, lab)
    third.run("import", root / "lab-checkpoint.tar.zst", "--key", "approver")
    applied = vendor.size()
    vendor.run("key", "new", "vendor2", "--no-encrypt")
    vendor.run("policy", "init", "--roles", "producer", "--producer", "vendor2",
               "--out", root / "vendor-p2.toml")
    vendor.run("policy", "set", root / "vendor-p2.toml", "--key", "vendor", "--yes")
    batch = vendor.last("record", rollouts(root / "r3.parquet", 3), "--env", "grid@1",
                        "--policy", "scripted", "--name", "vendor-3", "--licence", "CC-BY-4.0",
                        "--key", "vendor2")  # fmt: skip
    vendor.run("dataset", "create", "bh", "--version", "2", "--split", "train", "--batch",
               batch, "--key", "vendor2")
    vendor.run("export", "--updates-since", str(applied), "--out", root / "vendor-update.tar.zst")
    vendor.run("export", "bh@2", "--out", root / "vendor-bh2.tar.zst")
    return vendor, lab, third, ckpt


def test_a_planned_key_rotation_reaches_the_lab_with_a_way_on_that_works(tmp_path: Path) -> None:
    """A replaced its producer key (not compromised). Its old key cannot sign there any more;
    B's import of A's update names the key added and the key removed. The removal said ``if
    you added it for vendor.example/log, take it out of your policy``: done as said (and the
    new key added), B's import of A's next dataset, ``bh@2``, was refused, because its
    environment ``grid@1`` is a record the old key signed before the rotation, and the
    refusal said to add the old key back (``key … (not in the policy) …; if the signer
    confirms the key is theirs …, add it to [roles.producer]``): two messages sending B round
    in a circle. Expected: the removal says what taking it out costs and to keep it while
    B takes A's records in; done so, ``bh@2`` imports, B trains on it, and the checkpoint made
    before the rotation still verifies."""
    vendor, lab, _third, ckpt = rotated(tmp_path)
    old, new = keyid(vendor, "vendor"), keyid(vendor, "vendor2")
    err = refused(vendor, "record", rollouts(tmp_path / "r4.parquet", 4), "--env", "grid@1",
                  "--policy", "scripted", "--name", "vendor-4", "--licence", "CC-BY-4.0",
                  "--key", "vendor")  # fmt: skip
    assert err.startswith(f"FAIL: key vendor ({old[:12]}): cannot sign a rollout-batch record: "
                          "it holds no role in policy 'vendor.example/log' serial 2, want "
                          "producer"), err
    err = lab.run("import", tmp_path / "vendor-update.tar.zst", "--key", "approver").stderr
    a = origin(vendor)
    assert (f"WARNING: the policy of {a} (serial 2, was 1) adds key {new[:16]} as producer "
            f"(fingerprint {new}): records it signs from this log are refused here") in err, err
    assert (f"WARNING: the policy of {a} (serial 2, was 1) removes key {old[:16]} from "
            f"producer (fingerprint {old}): your policy still trusts it as producer: what it "
            f"signed there before stays valid ({a} does not declare it compromised), and a "
            "bundle of theirs that carries such a record (a later dataset built on one) is "
            "refused here without it; keep it while you take those in, then take it out of "
            "your policy and run 'trajledger policy set FILE --key APPROVER' (what you hold "
            "keeps verifying)") in err, err
    bh2 = tmp_path / "vendor-bh2.tar.zst"
    err = refused(lab, "import", bh2, "--key", "approver")  # (the new key not trusted yet)
    assert (f"the envelope names key {new[:12]} (not in the policy), want producer key(s); "
            "if the signer confirms the key is theirs") in err, err
    assert err.rstrip().endswith(
        f"; {a}'s policy (serial 2, in this bundle) trusts the key as producer: ask {a}'s "
        "owner whose key it is (its own, or of a log whose records it relays), then ask that "
        "owner"), err
    lab_policy(lab, vendor, 2, ("vendor2",))  # the old advice: the old key out, the new in
    err = refused(lab, "import", bh2, "--key", "approver")
    assert (f"environment sha256:0622612f7652… > record: environment record 1: no signature "
            f"by a trusted key: 0 of 1 required signature(s) verified; the envelope names key "
            f"{old[:12]} (not in the policy)") in err, err
    lab.run("verify", ckpt)  # (what B holds still verifies: judged as of its import)
    lab_policy(lab, vendor, 3, ("vendor", "vendor2"))  # as the removal now says
    lab.run("import", bh2, "--key", "approver")
    lab.run("approve", "bh@2", "--key", "approver")
    lab.run("train", "--dataset", "bh@2", "--key", "trainer", "--name", "bh-policy",
            "--version", "2")
    lab.run("verify", "bh-policy@2")
    lab.run("verify", ckpt)


def relayed(root: Path) -> tuple[Vendor, Party, Party, str]:
    """`rotated`, then B trusts both of A's keys (as the removal says), imports ``bh@2``,
    approves it and trains ``bh-policy@2``, and exports it twice: under its policy as
    written (``lab-2.tar.zst``: its import records do not travel) and after a successor
    whose ``publish`` lists ``import`` (``lab-2-imports.tar.zst``). Built once per process."""
    return built_once("relayed", root, _build_relayed)


def _build_relayed(root: Path) -> tuple[Vendor, Party, Party, str]:
    vendor, lab, third, ckpt = rotated(root)
    lab.run("import", root / "vendor-update.tar.zst", "--key", "approver")
    lab_policy(lab, vendor, 2, ("vendor", "vendor2"))
    lab.run("import", root / "vendor-bh2.tar.zst", "--key", "approver")
    lab.run("approve", "bh@2", "--key", "approver")
    lab.run("train", "--dataset", "bh@2", "--key", "trainer", "--name", "bh-policy",
            "--version", "2")
    lab.run("export", "bh-policy@2", "--out", root / "lab-2.tar.zst")
    lab_policy(lab, vendor, 3, ("vendor", "vendor2"), PUBLISH)
    lab.run("export", "bh-policy@2", "--out", root / "lab-2-imports.tar.zst")
    return vendor, lab, third, ckpt


def test_the_third_party_is_told_whose_key_the_lab_relayed(tmp_path: Path) -> None:
    """C pins A's old key; B relays ``bh-policy@2``, trained on A's ``bh@2`` that A's new key
    signed. C's ``import`` and ``verify BUNDLE`` refused it naming ``key 8183458c18ca (not in
    the policy)`` and ``if the signer confirms the key is theirs (ask them, not the data)``:
    a keyid alone, and "the signer" where the party that sent the bundle is not the one that
    signed (out57's Left). Expected: the line says who to ask, from what the bundle carries:
    the lab's import record (its policy publishes imports: A's log and the record's index
    there), or else the lab's policy that trusts the key (ask the lab whose it is). Done (A's
    new key added to C's policy), B's checkpoint imports; the one made before the rotation
    verifies throughout."""
    vendor, lab, third, _ckpt = relayed(tmp_path)
    a, b, new = origin(vendor), origin(lab), keyid(vendor, "vendor2")
    named = f"the envelope names key {new[:12]} (not in the policy), want producer key(s)"
    policy = third.home / "policy.toml"
    for bundle, said in (
        ("lab-2.tar.zst", f"; {b}'s policy (serial 2, in this bundle) trusts the key as "
         f"producer: ask {b}'s owner whose key it is (its own, or of a log whose records it "
         "relays), then ask that owner"),
        ("lab-2-imports.tar.zst", f"; the key signed a record of {a} (its log index 7), which "
         f"{b} relayed: the signer to ask is {a}'s owner, not {b}, whose bundle brought it"),
    ):
        for args in (("import", tmp_path / bundle, "--key", "approver"),
                     ("verify", tmp_path / bundle, "--policy", policy)):
            err = refused(third, *args)
            line = next(x for x in err.splitlines() if named in x)
            assert line.startswith("FAIL: dataset sha256:3c7e717f2f60… > record: dataset record "
                                   "11: ") and line.endswith(said), line
    third.run("verify", "bh-policy@1")
    text = policy.read_text().replace('"trust/vendor.pub"', '"trust/vendor.pub", "trust/v2.pub"')
    (third.home / "trust" / "v2.pub").write_bytes((vendor.home / "keys" / "vendor2.pub")
                                                  .read_bytes())
    text = text.replace('name = "third"', 'name = "third"\nserial = 2')
    (third.home / "p2.toml").write_text(text)
    third.run("policy", "set", third.home / "p2.toml", "--key", "approver", "--yes")
    third.run("import", tmp_path / "lab-2-imports.tar.zst", "--key", "approver")
    third.run("verify", "bh-policy@2")
    third.run("verify", "bh-policy@1")


def two_vendors(root: Path) -> tuple[Vendor, Vendor, Party]:
    """A and A' (origins ``vendor.example/log`` and ``vendor2.example/log``), each a vendor
    named ``vendor``: its key file ``keys/vendor.pub``, its batches ``vendor-1`` and
    ``vendor-2``, its dataset ``bh@1`` (other rollouts), both of one ``grid@1``; B trusts
    both keys (``trust/vendor.pub``, ``trust2/vendor.pub``) and imports both bundles."""
    return built_once("two_vendors", root, _build_two_vendors)


def _build_two_vendors(root: Path) -> tuple[Vendor, Vendor, Party]:
    one = vendor_copy(root / "a", "vendor", "vendor.example/log")
    two = vendor_copy(root / "a2", "vendor", "vendor2.example/log", seeds=(3, 4))
    lab = Buyer(root, [one])
    (lab.home / "trust2").mkdir()
    (lab.home / "trust2" / "vendor.pub").write_bytes((two.home / "keys" / "vendor.pub")
                                                     .read_bytes())
    text = (lab.home / "policy.toml").read_text()
    text = text.replace('"trust/vendor.pub"', '"trust/vendor.pub", "trust2/vendor.pub"').replace(
        'name = "buyer"', 'name = "buyer"\nserial = 2').replace(
        "vkeys = [", f'vkeys = ["{two.vkey()}", ')
    (lab.home / "p2.toml").write_text(text)
    lab.run("policy", "set", lab.home / "p2.toml", "--key", "approver", "--yes")
    lab.run("import", one.bundle, "--key", "approver")
    lab.run("import", two.bundle, "--key", "approver")
    return one, two, lab


def test_two_vendors_of_one_name_neither_shadows_the_other(tmp_path: Path) -> None:
    """Held: A and A' ship ``bh@1`` of batches ``vendor-1`` and ``vendor-2`` signed by keys
    both named ``vendor``. ``bh@1`` at B is ambiguous (refused, exit 3, naming both
    origin-qualified names); A''s revocation of its own ``vendor-1`` fails A''s ``bh@1``
    only, naming A' as the revoker; A's stays whole. The environment both recorded with the
    same bytes is one artifact: A' may revoke it (a producer's revocation counts for bytes it
    signed a record of: SECURITY.md, hist39 finding 1, twenty-fourth round), and A's dataset
    then fails too, naming A' (by design, fail closed)."""
    one, two, lab = two_vendors(tmp_path)
    a, a2 = origin(one), origin(two)
    err = refused(lab, "approve", "bh@1", "--key", "approver", code=3)
    assert (f"FAIL: bh@1: ambiguous, matches 2 artifacts (dataset {a}+bh@1 sha256:8a944a246ed7…, "
            f"dataset {a2}+bh@1 sha256:") in err, err
    s0 = two.size()
    two.run("revoke", two.batches[0], "--reason", "withdrawn", "--key", "vendor")
    two.run("export", "--updates-since", str(s0), "--out", tmp_path / "a2u.tar.zst")
    err = lab.run("import", tmp_path / "a2u.tar.zst", "--key", "approver").stderr
    assert f"WARNING: revoked by {a2}: rollout-batch vendor-1 (" in err, err
    assert f"dataset {a2}+bh@1 (" in err and f"{a}+bh@1" not in err, err
    lab.run("verify", f"{a}+bh@1")
    err = refused(lab, "verify", f"{a2}+bh@1")
    assert f"; revoked by {a2} (signed by " in err, err
    s1 = two.size()
    two.run("revoke", "grid@1", "--reason", "wrong rules", "--key", "vendor")
    two.run("export", "--updates-since", str(s1), "--out", tmp_path / "a2u2.tar.zst")
    lab.run("import", tmp_path / "a2u2.tar.zst", "--key", "approver")
    err = refused(lab, "verify", f"{a}+bh@1")
    assert "> revoked: wrong rules (log index " in err and f"; revoked by {a2} (signed by " \
        in err, err

