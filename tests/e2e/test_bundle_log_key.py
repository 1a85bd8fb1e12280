"""End to end: the unsigned ``vkey`` of a bundle's ``bundle.json`` does not choose the floor a
bundle is judged by (docs/SECURITY.md, "Review of 2026-12-04, tenth round (redo21)", finding 1).

A buyer has taken in a newer view of a vendor's log; the vendor (or anyone between) hands it
the older bundle again, a rollback hiding what was logged since, with ``bundle.json`` naming
another log key: a throwaway key of the same origin name that adds its own signature line to
the checkpoint (no secret of the vendor's needed), or another spelling of the vendor's key.
Its user state holds no floor under that string: before the fix, ``verify BUNDLE`` said OK
(exit 0) and ``import`` took the rollback in. Both now refuse it (exit 1).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import tamperkit as tk
import testkit
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from test_exchange_cli import Vendor, _grown, expect, run, store_count

from trajledger import Ledger
from trajledger.ledger.encode import bundle_index_bytes, format_signature_line, vkey_string
from trajledger.verify.bundle_index import BundleIndex
from trajledger.verify.note import ALG_ED25519, Note, key_hash


@pytest.fixture(scope="module")
def vendor(
    quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory
) -> Vendor:
    root = tmp_path_factory.mktemp("bundle-log-key")
    return testkit.as_own_user(root, lambda r: Vendor(r, quickstart_template))


@pytest.fixture
def buyer(tmp_path: Path, vendor: Vendor) -> Path:
    """A buyer that trusts the vendor's log and has imported a newer view of it (size + 1)."""
    home = tmp_path / "buyer"
    expect(run(home, "init", "--origin", "buyer/log"), 0)
    for k in ("b1", "b2"):
        expect(run(home, "key", "new", k, "--no-encrypt"), 0)
    trust = home / "trust"
    trust.mkdir()
    for p in [*(vendor.home / "keys").glob("*.pub"), *(home / "keys").glob("b*.pub")]:
        trust.joinpath(p.name).write_bytes(p.read_bytes())
    vkeys = f'"{vendor.vkey}", "{Ledger.open(home).log.vkey}"'
    (home / "policy.toml").write_text(testkit.BUYER_POLICY.format(vkeys=vkeys))
    grown = _grown(vendor, tmp_path, "later")
    newer = tmp_path / "newer.tar.zst"
    expect(run(grown, "export", vendor.ref, "--out", newer, state=tmp_path / "vendor-state"), 0)
    expect(run(home, "import", newer, "--policy", home / "policy.toml", "--key", "b1",
               "--key", "b2"), 0)
    return home


def _throwaway(vkey: str, members: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    """A key of the origin name of the log key ``vkey`` nobody trusts, and the checkpoint
    with its signature line added (the log's own line kept: the trusted key still verifies
    it)."""
    name = vkey.split("+")[0]
    key = Ed25519PrivateKey.generate()
    pub = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    cp = dict(members)["checkpoint"]
    line = format_signature_line(name, key_hash(name, ALG_ED25519, pub),
                                 key.sign(Note.from_bytes(cp).text))
    return vkey_string(name, pub), cp + line


def _renamed(bundle: Path, log_vkey: str, where: Path, how: str) -> tuple[Path, str]:
    """``bundle`` (of the log whose key is ``log_vkey``) with ``bundle.json`` naming another
    key string."""
    members = tk.bundle_members(bundle)
    if how == "throwaway key":
        old = dict(members)["checkpoint"]
        vkey, cp = _throwaway(log_vkey, members)  # each inclusion proof carries the checkpoint
        members = [(n, d.replace(old, cp) if n == "checkpoint" or n.endswith(".tlog-proof")
                    else d) for n, d in members]
    else:  # the same key, its key ID in capitals: another string, another user state
        name, hexid, b64 = log_vkey.split("+", 2)
        if hexid.upper() == hexid:
            pytest.skip("this vendor key's ID has no letter to spell in capitals")
        vkey = f"{name}+{hexid.upper()}+{b64}"
    index = dataclasses.replace(BundleIndex.from_bytes(members[0][1]), vkey=vkey)
    members = [("bundle.json", bundle_index_bytes(index)), *members[1:]]
    return tk.write_bundle(where / "renamed.tar.zst", members, reindex=True), vkey


HOW = ["throwaway key", "capital key ID"]


def _refusal(what: str, bundle: Path, vkey: str, signer: str, how: str) -> str:
    """The one line: another key is refused as not the signer's; the same key with its ID in
    capitals is not a key at all (redo15 finding 1: key IDs are read in lower case only)."""
    if how == "capital key ID":
        return (f"FAIL: bundle {bundle.name}: bundle.json: vkey: verifier key {vkey!r}: want "
                "<name>+<8 lower-case hex digits>+<base64 key>\n")
    return (f"FAIL: {what}: bundle.json names the log key {vkey}, but the key that signed its "
            f"checkpoint, trusted by the policy, is {signer} (bundle.json is not signed)\n")


@pytest.mark.parametrize("how", HOW)
def test_verify_bundle_judges_by_the_key_that_signed_not_the_index(
    vendor: Vendor, buyer: Path, tmp_path: Path, how: str
) -> None:
    policy = buyer / "policy.toml"
    r = run(buyer, "verify", vendor.bundle, "--policy", policy)
    expect(r, 1)  # the plain rollback: refused since rev18
    assert "checkpoint rollback for " in r.stderr, r.stderr
    bundle, vkey = _renamed(vendor.bundle, vendor.vkey, tmp_path, how)
    r = run(buyer, "verify", bundle, "--policy", policy)
    expect(r, 1)
    assert r.stderr == _refusal(f"bundle {bundle.name}", bundle, vkey, vendor.vkey, how), r.stderr


@pytest.mark.parametrize("how", HOW)
def test_import_judges_by_the_key_that_signed_not_the_index(
    vendor: Vendor, buyer: Path, tmp_path: Path, how: str
) -> None:
    """In a fresh user state (the floor kept in the ledger's signed import records, looked up
    by log key): the index's string found no record, and the rollback was taken in."""
    policy = buyer / "policy.toml"
    fresh, other = tmp_path / "fresh-state", tmp_path / "other-fresh-state"
    fresh.mkdir()
    other.mkdir()
    args = ("import", "--policy", policy, "--key", "b1", "--key", "b2")
    r = run(buyer, *args[:1], vendor.bundle, *args[1:], state=other)
    expect(r, 1)  # the plain rollback: refused by the import records
    assert ": rollback: " in r.stderr, r.stderr
    before = store_count(buyer), Ledger.open(buyer).log.size
    bundle, vkey = _renamed(vendor.bundle, vendor.vkey, tmp_path, how)
    r = run(buyer, *args[:1], bundle, *args[1:], state=fresh)
    expect(r, 1)
    assert r.stderr == _refusal(f"import {bundle.name}", bundle, vkey, vendor.vkey, how), r.stderr
    assert (store_count(buyer), Ledger.open(buyer).log.size) == before
    r = run(buyer, *args[:1], bundle, *args[1:])  # the user's own state: refused too
    expect(r, 1)


def test_a_bundle_whose_index_names_the_signer_is_judged_by_its_floor(
    vendor: Vendor, buyer: Path
) -> None:
    """The honest case, unchanged: the floor of the key that signed refuses the rollback."""
    policy = buyer / "policy.toml"
    r = run(buyer, "import", vendor.bundle, "--policy", policy, "--key", "b1", "--key", "b2")
    expect(r, 1)
    assert ": rollback: " in r.stderr, r.stderr


def test_a_log_key_only_a_later_policy_names_is_the_one_that_signed(tmp_path: Path) -> None:
    """The eleventh round (left22) finding 2, redo21's Left 1: the user holds the vendor's
    policy of serial 2, which names another log key (one the log never had); its successor,
    serial 3, signed by the approvers and carried by the bundle, names the log's key.
    `bundle_log_key` found no key of the policy given that signed the checkpoint, and took
    ``bundle.json``'s word unchecked: a throwaway key named there held no floor, and an older
    bundle (a rollback hiding what was logged since) verified, exit 0. Now the log keys of the
    policy in force (the history followed first) are looked in: the throwaway is refused as
    not the key that signed; the honest older bundle is refused as a rollback, and a current
    one verifies."""
    import test_key_rotation as kr

    w = kr.World(tmp_path / "w")
    never = vkey_string(kr.ORIGIN, Ed25519PrivateKey.generate().public_key().public_bytes(
        Encoding.Raw, PublicFormat.Raw))
    kr.expect(w.policy(2, vkeys=(never,)), 0)
    kr.expect(w.policy(3), 0)  # the log's key again
    theirs = w.policy_file(2, vkeys=(never,))  # the user's copy of serial 2
    older = tmp_path / "older.tar.zst"
    kr.ok(w.home, "export", "ds-old@1", "--out", older)
    w.batch("vendor")
    seen = tmp_path / "seen"
    kr.expect(kr.run(w.home, "verify", "ds-old@1", state=seen), 0)  # the floor: the log grown
    r = kr.run(w.home, "verify", older, "--policy", theirs, state=seen)
    kr.expect(r, 1)
    assert "checkpoint rollback for " in r.stderr, r.stderr
    renamed, vkey = _renamed(older, w.v1, tmp_path, "throwaway key")
    r = kr.run(w.home, "verify", renamed, "--policy", theirs, state=seen)
    kr.expect(r, 1)
    assert r.stderr == _refusal(f"bundle {renamed.name}", renamed, vkey, w.v1,
                                "throwaway key"), r.stderr
    current = tmp_path / "current.tar.zst"
    kr.ok(w.home, "export", "ds-old@1", "--out", current)
    kr.expect(kr.run(w.home, "verify", current, "--policy", theirs, state=seen), 0)
