"""End to end (upd46, thirty-first round; upd45's Left): whose declaration is a compromise.

Vendor two relays vendor one's records (it imported one's bundle, its policy listing one's
producer key ``vendor``: anyone's public key), without publishing its imports, then declares
that key compromised. Before: the buyer was told, whichever order the bundles came in, ``key
… of two… is compromised …; your policy still trusts it as producer: record a successor
without it and with [[revoked_keys]] …`` (the firm advice), or a suspect line with the way on:
a relay could make the buyer drop a sound key. And one's own declaration of its key, after two
brought one's records first, was four ``NOTE: ignored`` lines (upd45 finding 2's limit): a
relay could hide a real owner's declaration.

What the buyer can know without the relay's import records: which keys signed a log's own
policies (each policy record of the history the buyer followed, its envelope's signatures
verified here: not a log's word). One's key signed one's policies and none of two's. So:
a declaration by a log whose policies the key never signed, of a key that signed another
log's, is a claim (the owner named, no firm advice; what that log alone brought is revoked
all the same, as any log's declaration does: a thief's log may sign its policy with the
stolen key), in both orders;
a declaration by the key's owner warns with the way on whoever brought its records first;
and a declaration of a key whose owner the buyer does not know, which signed none of the
declarer's policies, gives the conditional advice (``if the key is theirs``), never the firm.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_borrowed_handovers import relays
from test_updates import Buyer, Vendor, declare_compromised, rollouts, vendor_copy
from testkit import built_once

FIRM = "still trusts it as producer: record a successor without it"


def _keyid(party: Vendor, name: str) -> str:
    keys = json.loads(party.run("key", "list", "--json").stdout)
    return str(next(k["keyid"] for k in keys if k["name"] == name))


def relaying_parties(tmp_path: Path) -> tuple[Vendor, Vendor, Buyer, Path, str]:
    """One, two (relaying one's dataset, its imports unpublished), the buyer (nothing imported
    yet), two's bundle of one's dataset, one's key ``vendor``: built once per test process and
    copied (`testkit.built_once`; ci54: 0.5 CPU-s a build, about ten calls a run)."""
    return built_once("relaying_parties", tmp_path, build_relaying_parties)


def build_relaying_parties(tmp_path: Path) -> tuple[Vendor, Vendor, Buyer, Path, str]:
    """`relaying_parties` built at ``tmp_path``."""
    one = vendor_copy(tmp_path, "one", "one.example/log")
    two = vendor_copy(tmp_path, "two", "two.example/log", seeds=(3, 4))
    buyer = Buyer(tmp_path, [one, two])
    relays(two, one)
    relay = tmp_path / "relay.tar.zst"
    two.run("export", one.dataset, "--out", relay)
    return one, two, buyer, relay, _keyid(one, "vendor")


def two_declares(tmp_path: Path, one: Vendor, two: Vendor, buyer: Buyer, theirs: str,
                  since: int | None = None) -> Any:
    """Two declares one's key ``theirs`` compromised (since its size now, or ``since``) in a
    successor without it; the buyer imports that update (``--json``): the result."""
    applied = two.size()
    policy = two.home / "policy.toml"
    one_pem = (one.home / "keys" / "vendor.pub").read_text()
    declared = policy.read_text().replace("serial = 2", "serial = 3").replace(
        f'"""{one_pem}""",', "")
    policy.write_text(f'{declared}\n[[revoked_keys]]\nkey = "{theirs}"\ncompromised_since = '
                      f'{applied if since is None else since}\nreason = "hostile"\n')
    two.run("policy", "set", policy, "--key", "mal-approver", "--yes")
    update = tmp_path / "two-update.tar.zst"
    two.run("export", "--updates-since", str(applied), "--out", update)
    return buyer.run("import", update, "--key", "approver", "--json")


def _claim(r: Any, one: Vendor, theirs: str) -> dict[str, Any]:
    report = json.loads(r.stdout)["import"]
    (item,) = [s for s in report["suspect"] + report["compromised"] if s.get("claim")]
    assert item["key"] == theirs and item["owner"] == one.origin, item
    assert item["declarerBrought"] is False, item
    assert "is a claim, not its owner's declaration" in item["text"], item
    assert f"WARNING: {item['text']}" in r.stderr, r.stderr
    assert FIRM not in r.stderr, r.stderr
    return item


def test_a_relays_declaration_of_the_owners_key_is_a_claim_when_the_owner_came_first(
        tmp_path: Path) -> None:
    one, two, buyer, relay, theirs = relaying_parties(tmp_path)
    buyer.run("import", one.bundle, "--key", "approver")
    buyer.run("import", relay, "--key", "approver")
    r = two_declares(tmp_path, one, two, buyer, theirs)
    _claim(r, one, theirs)
    assert json.loads(r.stdout)["import"]["compromised"] == [], r.stdout
    r = buyer.run("verify", one.dataset)  # nothing revoked
    assert "revoked" not in r.output, r.output


def test_a_relays_declaration_since_0_stops_what_it_alone_brought_and_is_named_a_claim(
        tmp_path: Path) -> None:
    """The relay the buyer's only source of one's batches and dataset, one's own log known (its
    policy signed by the key, from an earlier bundle of one's environment alone): what two alone
    brought is revoked, as any log's declaration stops what it alone brought (a thief's log
    signing its policy with a stolen key must not turn the owner's declaration into nothing),
    the environment (one brought it too) is not; the line is the claim's, without the firm
    advice that told the buyer to distrust one's key."""
    one, two, buyer, relay, theirs = relaying_parties(tmp_path)
    env = tmp_path / "env.tar.zst"
    one.run("export", "grid@1", "--out", env)
    buyer.run("import", env, "--key", "approver")
    buyer.run("import", relay, "--key", "approver")
    r = two_declares(tmp_path, one, two, buyer, theirs, since=0)
    item = _claim(r, one, theirs)
    assert set(item["revokedHere"]) == {*one.batches, one.dataset}, item
    assert "revoked here only what two.example/log+" in item["text"], item
    buyer.run("verify", "grid@1")  # one brought it too: not two's alone


def test_a_relays_declaration_met_before_the_owner_is_doubted_then_named_a_claim(
        tmp_path: Path) -> None:
    """Relay first: at the declaration the buyer knows only that the key signed none of two's
    policies (the conditional advice, not the firm); when one's own bundle comes, the key
    signed one's policies: two's declaration is named a claim."""
    one, two, buyer, relay, theirs = relaying_parties(tmp_path)
    buyer.run("import", relay, "--key", "approver")
    r = two_declares(tmp_path, one, two, buyer, theirs)
    (line,) = [x for x in r.stderr.splitlines() if theirs[:16] in x]
    assert FIRM not in line and "signed none of its policies" in line, line
    assert f'if the key is theirs, record a successor with [[revoked_keys]] key = "{theirs}"' \
        in line, line
    r = buyer.run("import", one.bundle, "--key", "approver", "--json")
    _claim(r, one, theirs)


def test_the_owners_declaration_warns_though_a_relay_brought_its_records_first(
        tmp_path: Path) -> None:
    """upd45 finding 2's limit: two does not publish its imports and brought one's records
    first; one declares its own key (which signed one's policies) compromised: the warning
    with the way on, where it was four ``NOTE: ignored`` lines."""
    one, _two, buyer, relay, theirs = relaying_parties(tmp_path)
    buyer.run("import", relay, "--key", "approver")
    buyer.run("import", one.bundle, "--key", "approver")
    applied = one.size()
    declare_compromised(one, tmp_path / "one-2.toml", theirs)
    update = tmp_path / "one-update.tar.zst"
    one.run("export", "--updates-since", str(applied), "--out", update)
    r = buyer.run("import", update, "--key", "approver", "--json")
    (suspect,) = json.loads(r.stdout)["import"]["suspect"]
    assert suspect["declarerBrought"] is True and not suspect.get("claim"), suspect
    assert len(suspect["digests"]) == 4, suspect
    assert f'if the key is theirs, record a successor with [[revoked_keys]] key = "{theirs}"' \
        in suspect["text"], suspect


def _forge_relay_record(two: Vendor, keyid: str) -> None:
    """What two's log writer and approver can make: an import record, signed by its approver,
    listing every entry of its own log signed by ``keyid`` (its policies too) as an entry of
    one's log, under the
    checkpoint of one's log its genuine import record holds, with inclusion proofs that lead to
    no root of it (the genuine record's first proof, for every entry)."""
    import os

    from trajledger.ledger.home import LedgerHome
    from trajledger.ledger.record import statement_entry
    from trajledger.ledger.update_reads import import_records
    from trajledger.verify import predicates
    from trajledger.verify.log_entry import LogEntry

    os.environ["TRAJLEDGER_STATE_DIR"] = str(two.state)
    home = LedgerHome.open(two.home)
    ((_i, genuine),) = import_records(home)
    bogus = genuine.entries[0]["inclusion"]
    mine = [(i, raw) for i in range(home.log.size)
            if keyid in LogEntry.from_bytes(raw := home.log.entry(i)).signers]
    predicate = {"log": dict(genuine.log), "applied": genuine.applied,
                 "entries": [{"index": i, "entry": raw.decode(), "inclusion": bogus}
                             for i, raw in mine]}
    subject = LogEntry.from_bytes(mine[0][1]).subject
    spec, check = statement_entry(home, "forged", subject, predicates.IMPORT, predicate,
                                  [home.keys.signer("mal-approver")], "import")
    home.log.append([spec], check=check)


def test_a_relay_import_record_whose_proofs_fail_says_nothing(tmp_path: Path) -> None:
    """upd45's Left: the relay's import records were taken at their word (their inclusion
    proofs and the other log's checkpoint not checked). Two, publishing its imports, forges one
    listing its own records as one's; then declares its own key compromised. Before: ``its log
    holds nothing it signed but what it relayed from one… (its import records say so)``. Each
    listed entry now counts only when its proof leads to the root of the other log's checkpoint,
    signed by that log's key: the forged record says nothing, the key signed two's policies and
    two's log holds what it signed: the owner's firm advice."""
    from test_relaying_declarer import _publishing_imports

    one = vendor_copy(tmp_path, "one", "one.example/log")
    two = vendor_copy(tmp_path, "two", "two.example/log", seeds=(3, 4))
    buyer = Buyer(tmp_path, [one, two])
    _publishing_imports(two)
    relays(two, one)
    own = _keyid(two, "vendor")
    _forge_relay_record(two, own)
    bundle = tmp_path / "two-bh.tar.zst"
    two.run("export", two.dataset, "--out", bundle)
    buyer.run("import", bundle, "--key", "approver")
    applied = two.size()
    policy = two.home / "policy.toml"
    own_pem = (two.home / "keys" / "vendor.pub").read_text()
    policy.write_text(policy.read_text().replace("serial = 2", "serial = 3").replace(
        f'"""{own_pem}""",', "") + f'\n[[revoked_keys]]'
                      f'\nkey = "{own}"\ncompromised_since = {applied}\nreason = "stolen"\n')
    two.run("policy", "set", policy, "--key", "mal-approver", "--yes")
    update = tmp_path / "two-update.tar.zst"
    two.run("export", "--updates-since", str(applied), "--out", update)
    r = buyer.run("import", update, "--key", "approver")
    (line,) = [x for x in r.stderr.splitlines() if f"key {own[:16]} of " in x]
    assert "relayed" not in line and FIRM in line, line


def thief_and_owner(tmp_path: Path) -> tuple[Any, Buyer, Path, Path, list[str], str]:
    """One, its policies signed by its approver ``approver-a``, never by its producer key
    ``vendor`` (two batches and a dataset, exported as ``bundle``); the thief's log x, its
    policy signed with one's stolen producer key (its environment, of the same bytes as one's,
    exported as ``envs``); the buyer, trusting both logs, nothing imported. Returns one, the
    buyer, bundle, envs, the batches, the dataset (test_upd47_claims.py too)."""
    from testkit import Party

    one = Party(tmp_path, "one")
    one.run("init", "--origin", "one.example/log")
    for k in ("vendor", "approver-a"):
        one.run("key", "new", k, "--no-encrypt")
    policy = one.home / "policy.toml"
    one.run("policy", "init", "--roles", "producer,approver", "--producer", "vendor",
            "--approver", "approver-a", "--out", policy)
    one.run("policy", "set", policy, "--key", "approver-a", "--yes")
    one.run("env", "register", "grid", "--version", "1", "--source", "sim", "--key", "vendor")
    batches = [one.last("record", rollouts(tmp_path / f"one-{n}.parquet", n), "--env", "grid@1",
                        "--policy", "scripted", "--name", f"one-{n}", "--licence", "CC-BY-4.0",
                        "--key", "vendor") for n in (1, 2)]  # fmt: skip
    dataset = one.last("dataset", "create", "bh", "--version", "1", "--split", "train",
                       "--batch", batches[0], "--batch", batches[1], "--key", "vendor")
    bundle = tmp_path / "one.tar.zst"
    one.run("export", "bh@1", "--out", bundle)
    x = Party(tmp_path, "x")
    x.run("init", "--origin", "x.example/log")
    (x.home / "keys").mkdir(exist_ok=True)
    for name in ("vendor.key", "vendor.pub"):  # the stolen key
        (x.home / "keys" / name).write_bytes((one.home / "keys" / name).read_bytes())
    (x.home / "keys" / "vendor.key").chmod(0o600)
    x.run("policy", "init", "--roles", "producer", "--out", x.home / "policy.toml")
    x.run("policy", "set", x.home / "policy.toml", "--key", "vendor", "--yes")
    x.run("env", "register", "grid", "--version", "1", "--source", "sim", "--key", "vendor")
    envs = tmp_path / "x.tar.zst"
    x.run("export", "grid@1", "--out", envs)
    buyer = Buyer(tmp_path, [one])  # type: ignore[list-item]
    trust = buyer.home / "policy.toml"  # and x's log (the key is one's, listed once)
    trust.write_text(trust.read_text().replace('name = "buyer"', 'name = "buyer"\nserial = 2')
                     .replace("vkeys = [", f'vkeys = ["{x.vkey()}", '))
    buyer.run("policy", "set", trust, "--key", "approver", "--yes")
    return one, buyer, bundle, envs, batches, dataset


def owner_declares(tmp_path: Path, one: Any) -> Path:
    """One (`thief_and_owner`) declares its producer key compromised since 0, in a successor
    signed by its approver with a new producer key: the update bundle since its size now."""
    applied, theirs = one.size(), _keyid(one, "vendor")
    one.run("key", "new", "vendor-new", "--no-encrypt")
    new = tmp_path / "one-2.toml"
    one.run("policy", "init", "--roles", "producer,approver", "--producer", "vendor-new",
            "--approver", "approver-a", "--out", new)
    new.write_text(new.read_text() + f'\n[[revoked_keys]]\nkey = "{theirs}"\n'
                   'compromised_since = 0\nreason = "stolen laptop"\n')
    one.run("policy", "set", new, "--key", "approver-a", "--yes")
    update = tmp_path / "one-update.tar.zst"
    one.run("export", "--updates-since", str(applied), "--out", update)
    return update


def test_a_thiefs_log_cannot_turn_the_owners_declaration_into_nothing(tmp_path: Path) -> None:
    """The attacker the claim invites: one's policies are signed by its approver, never by its
    producer key; a thief holding that key runs log x, its policy signed with the stolen key,
    and the buyer applied x (an environment of the same bytes). One declares the key
    compromised: the key signed x's policies and none of one's, so one's word is named a claim;
    but what one alone brought, signed by it since, is revoked here all the same (a log stops
    what it alone brought), never left standing on the thief's signature."""
    one, buyer, bundle, envs, batches, dataset = thief_and_owner(tmp_path)
    buyer.run("import", bundle, "--key", "approver")
    buyer.run("import", envs, "--key", "approver")
    update = owner_declares(tmp_path, one)
    r = buyer.run("import", update, "--key", "approver", "--json")
    report = json.loads(r.stdout)["import"]
    (item,) = report["compromised"]
    assert item.get("claim") and item["owner"].startswith("x.example/log+"), item
    assert set(item["revokedHere"]) == {*batches, dataset}, item  # grid@1: x brought it too
