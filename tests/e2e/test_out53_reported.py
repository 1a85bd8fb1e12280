"""What out53 found playing a data vendor and its buyer as outsiders (README.md, docs/ and
``--help`` only): keys and log keys rotated between deliveries, revocations reaching a buyer,
update bundles out of order, and out52's **Left**; docs/SECURITY.md, "Review of 2026-12-07,
thirty-eighth round (out53)".
"""

from __future__ import annotations

import json
from pathlib import Path

from testkit import Party

from trajledger import Ledger


def test_policy_init_keeps_the_witness_role_of_the_policy_in_force(tmp_path: Path) -> None:
    """out52's Left: ``policy init`` on a ledger whose policy in force has a
    ``[roles.witness]`` wrote a successor without it (a NOTE said to copy it in), while every
    other role and setting is kept: recorded as written, the log's checkpoints were no longer
    required to carry the witnesses' cosignatures. Expected: kept, and said so."""
    from trajledger.ledger.keys import Signer
    from trajledger.ledger.monitor import witness_vkey

    lab = Party(tmp_path, "lab")
    ledger = Ledger.init(lab.home, origin="lab.example/log")
    ledger.keys.create("vendor", encrypt=False)
    lab.run("policy", "init", "--roles", "producer", "--out", tmp_path / "p1.toml")
    wit = witness_vkey(Signer.generate("w1"))
    text = (tmp_path / "p1.toml").read_text()
    (tmp_path / "p1.toml").write_text(
        text + f'\n[roles.witness]\nvkeys = ["{wit}"]\nthreshold = 1\n'
        'logs = ["other.example/log"]\n')
    lab.run("policy", "set", tmp_path / "p1.toml", "--key", "vendor", "--yes")
    before = json.loads(lab.run("policy", "show", "--json").stdout)["policy"]["roles"]["witness"]
    assert before["vkeys"] == [wit]
    err = lab.run("policy", "init", "--roles", "producer", "--out", tmp_path / "p2.toml").stderr
    assert "drops [roles.witness]" not in err, err
    assert "keeps from serial 1 (in force) what this command was not asked to change: " \
        "[roles.witness] (1 witness key(s), threshold 1)" in err, err
    lab.run("policy", "set", tmp_path / "p2.toml", "--key", "vendor", "--yes")
    after = json.loads(lab.run("policy", "show", "--json").stdout)["policy"]
    assert after["serial"] == 2 and after["roles"]["witness"] == before


def tree(home: Path) -> dict[str, bytes]:
    """Every file of a ledger but its scratch directory, by path: a refusal leaves it as it
    was."""
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*"))
            if p.is_file() and "tmp" not in p.relative_to(home).parts}


def test_a_vendor_whose_producer_key_was_replaced_is_told_the_revocation_buyers_count(
    tmp_path: Path,
) -> None:
    """A vendor (a vendor-only ledger) replaced its producer key ``vendor`` by ``vendor2`` in a
    successor policy, then had to revoke a batch ``vendor`` produced, which a buyer had
    imported and trained on. ``revoke --key vendor2`` was refused saying only an approver may
    revoke it now and how to name one; done as said, the vendor's revocation was logged
    (``OK: … revoked``), and at the buyer it counted for nothing: a buyer's policy trusts the
    vendor's producer keys, never its approvers (an import WARNING said `not applied here`,
    and ``verify`` of the checkpoint trained on the batch passed, exit 0). Expected: the
    refusal names the key here that produced it and the way its revocation reaches buyers;
    followed as printed, the buyer's ``verify`` fails naming the revocation, exit 1."""
    from test_updates import train_a_buyer

    vendor, buyer, ckpt = train_a_buyer(tmp_path)
    applied = vendor.size()  # what the buyer's import applied of the vendor's log
    vendor.run("key", "new", "vendor2", "--no-encrypt")
    vendor.run("policy", "init", "--roles", "producer", "--producer", "vendor2",
               "--out", tmp_path / "p2.toml")
    vendor.run("policy", "set", tmp_path / "p2.toml", "--key", "vendor", "--yes")
    before = tree(vendor.home)
    r = vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn",
                   "--key", "vendor2", code=1)
    assert tree(vendor.home) == before
    assert ("a producer key the policy in force no longer holds; key vendor here is that key: "
            "to revoke it where buyers count it too, name it again in a successor ('trajledger "
            "policy init --roles producer --producer vendor2 --producer vendor --out FILE' and "
            "'trajledger policy set FILE --key vendor2'), give --key vendor, then record a "
            "successor without it; or name an approver, whose revocation counts here only"
            ) in r.stderr, r.stderr
    # done as printed
    vendor.run("policy", "init", "--roles", "producer", "--producer", "vendor2", "--producer",
               "vendor", "--out", tmp_path / "p3.toml")
    vendor.run("policy", "set", tmp_path / "p3.toml", "--key", "vendor2", "--yes")
    vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    vendor.run("policy", "init", "--roles", "producer", "--producer", "vendor2",
               "--out", tmp_path / "p4.toml")
    vendor.run("policy", "set", tmp_path / "p4.toml", "--key", "vendor2", "--yes")
    vendor.run("export", "--updates-since", str(applied), "--out", tmp_path / "u.tar.zst")
    err = buyer.run("import", tmp_path / "u.tar.zst", "--key", "approver").stderr
    assert "WARNING: revoked by " in err and "consent withdrawn" in err, err
    r = buyer.run("verify", ckpt, code=1)
    assert "> revoked: consent withdrawn" in r.stderr, r.stderr


def test_a_revocation_by_a_key_the_buyer_does_not_trust_says_what_would_count(
    tmp_path: Path,
) -> None:
    """The vendor revoked a batch the buyer trained on with an approver key of its own (the
    way out47's refusal named). The buyer's import said `not applied here` and, with
    ``verify`` of the checkpoint (exit 0: the revocation counts for nothing here), that the
    record's key is `not in the policy` and to `add it to [roles.producer] of the policy you
    verify with (…, then 'policy set')`. Done so, nothing changed and nothing could: a
    producer key revokes only what it produced, and the record, logged already, is judged by
    the policy in force when it was logged; an approver of the vendor's put in the buyer's
    approver role would approve the buyer's data. Expected: the line says what counts."""
    from test_updates import train_a_buyer

    vendor, buyer, ckpt = train_a_buyer(tmp_path)
    applied = vendor.size()
    vendor.run("key", "new", "approver", "--no-encrypt")
    vendor.run("policy", "init", "--roles", "producer,approver", "--producer", "vendor",
               "--approver", "approver", "--out", tmp_path / "p2.toml")
    vendor.run("policy", "set", tmp_path / "p2.toml", "--key", "vendor", "--yes")
    vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn", "--key", "approver")
    vendor.run("export", "--updates-since", str(applied), "--out", tmp_path / "u.tar.zst")
    err = buyer.run("import", tmp_path / "u.tar.zst", "--key", "approver").stderr
    out = buyer.run("verify", ckpt).stdout
    what = ("a revocation or erasure counts signed by the key that produced what it names or by "
            "one of your approvers: ask its signer for one signed by the key that produced it "
            "(once that key is in your policy's [roles.producer])")
    for text in (err, out):
        assert "add it to [roles.producer]" not in text and "add the key" not in text, text
        assert what in text, text
    assert "or revoke it here yourself ('trajledger revoke " in err, err


def test_an_update_bundle_applied_before_arriving_again_after_a_later_one_is_no_rollback(
    tmp_path: Path,
) -> None:
    """The vendor sent two update bundles (``--updates-since``), u1 then u2; the buyer imported
    both, then u1 again (a mail delivered twice, a script run over the folder of bundles).
    ``import u1`` said ``rollback: … size 9 … accepted before; size 8 … now; nothing was
    imported: keep this bundle … as evidence, … and ask the log's owner which tree it stands
    by``, exit 1: a tree this ledger accepted from this very bundle, which the later one
    extends, told as a misbehaving log. u1 imported twice in a row said `applied already`,
    exit 0, and so does an older artifact bundle after the log's updates (out43 finding 6).
    Expected: the same answer here; the ledger's files as they were."""
    from test_updates import train_a_buyer

    vendor, buyer, _ckpt = train_a_buyer(tmp_path)
    sizes = [vendor.size()]
    for n in (1, 2):
        vendor.run("env", "register", f"grid-{n}", "--version", "1", "--source", "sim",
                   "--key", "vendor")
        vendor.run("export", "--updates-since", str(sizes[-1]), "--out",
                   tmp_path / f"u{n}.tar.zst")
        sizes.append(vendor.size())
    for n in (1, 2):
        buyer.run("import", tmp_path / f"u{n}.tar.zst", "--key", "approver")
    before = tree(buyer.home)
    r = buyer.run("import", tmp_path / "u1.tar.zst", "--key", "approver")
    assert tree(buyer.home) == before
    assert "rollback" not in r.stderr, r.stderr
    assert (f"applied already up to the bundle's checkpoint; nothing new; its log applied up to "
            f"size {sizes[2]}: ask its owner for updates with 'trajledger export "
            f"--updates-since {sizes[2]}'") in r.stderr, r.stderr


def test_a_record_kind_the_buyers_policy_does_not_allow_says_how_to_accept_it(
    tmp_path: Path,
) -> None:
    """A buyer whose policy lists the predicate types it accepts (``allowed_predicate_types``,
    keys/README.md) without environments imported the vendor's dataset: ``FAIL: … record: log
    entry 1: predicate type https://trajledger.dev/attestation/environment/v1 is not allowed
    by the policy``, and nothing more, where a version of a kind the policy does not list says
    `add it to allowed_predicate_types to accept such records`. Expected: the same next step
    (offline and at import); nothing imported, the ledger's files as they were."""
    from test_updates import BUYER_POLICY, Vendor, make_buyer

    from trajledger.verify.predicates import ALL

    vendor = Vendor(tmp_path, "vendor", "vendor.example/log")
    buyer = Party(tmp_path, "buyer")
    env = "https://trajledger.dev/attestation/environment/v1"
    allowed = ", ".join(json.dumps(t) for t in sorted(ALL - {env}))
    make_buyer(buyer, [vendor], BUYER_POLICY.replace(
        "[roles.producer]", f"allowed_predicate_types = [{allowed}]\n[roles.producer]"))
    before = tree(buyer.home)
    r = buyer.run("import", vendor.bundle, "--key", "approver", code=1)
    assert tree(buyer.home) == before
    line = (f"predicate type {env} is not allowed by the policy; add it to "
            "allowed_predicate_types to accept such records")
    assert line in r.stderr, r.stderr
    r = buyer.run("verify", vendor.bundle, "--policy", buyer.home / "policy.toml", code=1)
    assert line in r.stderr, r.stderr


def test_a_delivery_after_the_vendors_log_key_rotated_names_the_export_that_imports(
    tmp_path: Path,
) -> None:
    """The vendor's log grew and its key was rotated (``log rotate-key``) between two
    deliveries; it sent the second dataset's bundle (``export bh@2``: it carries the
    handover). The buyer's import said `… does not extend the tree of size 5 seen or handed
    over under key …: the bundle holds no consistency proof from size 5 to 8 (export it with
    --consistency-from 5); nothing was changed`; the vendor did so, and the import then said
    `unprovable: the bundle does not carry the log since size 5, … ask for a bundle exported
    with --updates-since 5`: two refusals, the first naming an export the import refuses.
    Expected: the first names the export that imports; done as said, imported."""
    from test_updates import rollouts, train_a_buyer

    vendor, buyer, _ckpt = train_a_buyer(tmp_path)
    applied = vendor.size()
    vendor.run("env", "register", "grid-2", "--version", "1", "--source", "sim", "--key",
               "vendor")  # the log grows before the rotation
    vendor.run("log", "rotate-key")
    batch = vendor.last("record", rollouts(tmp_path / "v3.parquet", 3), "--env", "grid@1",
                        "--policy", "scripted", "--name", "vendor-3", "--licence", "CC-BY-4.0",
                        "--key", "vendor")
    vendor.run("dataset", "create", "bh", "--version", "2", "--split", "train", "--batch", batch,
               "--key", "vendor")
    vendor.run("export", "bh@2", "--out", tmp_path / "bh2.tar.zst")
    before = tree(buyer.home)
    r = buyer.run("import", tmp_path / "bh2.tar.zst", "--key", "approver", code=1)
    assert tree(buyer.home) == before
    assert "--consistency-from" not in r.stderr, r.stderr
    assert f"ask for a bundle exported with --updates-since {applied}" in r.stderr, r.stderr
    vendor.run("export", "bh@2", "--updates-since", str(applied), "--out",
               tmp_path / "bh2u.tar.zst")
    buyer.run("import", tmp_path / "bh2u.tar.zst", "--key", "approver")


def test_a_buyer_without_a_producer_key_of_its_own_writes_a_successor_with_policy_init(
    tmp_path: Path,
) -> None:
    """The README's buyer (keys ``approver`` and ``trainer`` only; the vendor's key in
    ``[roles.producer]``) replacing its approver key ran ``policy init --approver approver2``
    (and plain ``policy init``): `Error: no producer key (--producer KEY) (keys: approver,
    approver2, trainer; create them with 'trajledger key new NAME', or leave a role out with
    --roles)`, exit 2, though a successor keeps a role's keys the command was not given (out52),
    and leaving the role out (``--roles approver,trainer``) is refused (`want producer`).
    Expected: the successor keeps the vendor's producer keys, said in the NOTE."""
    from test_updates import Vendor

    vendor = Vendor(tmp_path, "vendor", "vendor.example/log")
    buyer = Party(tmp_path, "buyer")
    buyer.run("init", "--origin", "buyer.example/log")
    for k in ("approver", "trainer", "approver2"):
        buyer.run("key", "new", k, "--no-encrypt")
    pem = (vendor.home / "keys" / "vendor.pub").read_text()
    own = {k: buyer.run("key", "export", k).stdout for k in ("approver", "trainer")}
    (tmp_path / "p1.toml").write_text(
        f'name = "buyer"\nserial = 1\n[roles.producer]\nkeys = ["""{pem}"""]\n'
        f'[roles.approver]\nkeys = ["""{own["approver"]}"""]\n'
        f'[roles.trainer]\nkeys = ["""{own["trainer"]}"""]\n'
        f'[roles.log]\nvkeys = ["{vendor.vkey()}", "{buyer.vkey()}"]\n')
    buyer.run("policy", "set", tmp_path / "p1.toml", "--key", "approver", "--yes")
    err = buyer.run("policy", "init", "--approver", "approver2", "--out",
                    tmp_path / "p2.toml").stderr
    assert "keeps from serial 1 (in force) what this command was not asked to change: the " \
        "producer role's 1 key(s)" in err, err
    buyer.run("policy", "set", tmp_path / "p2.toml", "--key", "approver", "--yes")
    policy = json.loads(buyer.run("policy", "show", "--json").stdout)["policy"]
    assert policy["serial"] == 2 and len(policy["roles"]["producer"]["keys"]) == 1
    buyer.run("import", vendor.bundle, "--key", "approver2")
