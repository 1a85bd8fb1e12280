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
from test_updates import Buyer, Vendor, short

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
    one = Vendor(tmp_path, "one", "one.example/log")
    two = Vendor(tmp_path, "two", "two.example/log", seeds=(3, 4))
    buyer = Buyer(tmp_path, [one, two])
    buyer.run("import", one.bundle, "--key", "approver")
    buyer.run("import", two.bundle, "--key", "approver")
    buyer.run("approve", one.dataset, "--key", "approver")
    ckpt = buyer.last("train", "--dataset", one.dataset, "--key", "trainer", "--name", "p",
                      "--version", "1")  # fmt: skip
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
