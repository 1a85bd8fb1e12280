"""End to end (out36 finding 3): ``trajledger key export NAME`` trusted ``keys/NAME.pub`` by
path. A file replaced there (by anyone who may write the ledger's ``keys/``, no passphrase
needed), or a link to another key, was printed in silence, exit 0, and the README's vendor
hands that output to its buyers (`key export vendor > vendor.pub`), who then trust it. Now
the export says the key's fingerprint and the roles the policy in force gives it, and warns
when it holds none or is another name's key."""

from __future__ import annotations

import json
from pathlib import Path

from testkit import Party


def _vendor(root: Path) -> Party:
    party = Party(root, "vendor")
    party.run("init", "--origin", "vendor.example/log")
    party.run("key", "new", "vendor", "--no-encrypt")
    party.run("key", "new", "spare", "--no-encrypt")
    party.run("policy", "init", "--roles", "producer", "--out", party.home / "policy.toml")
    party.run("policy", "set", party.home / "policy.toml", "--key", "vendor", "--yes")
    return party


def test_key_export_names_the_roles_and_warns_of_a_replaced_or_linked_key(
    tmp_path: Path,
) -> None:
    vendor = _vendor(tmp_path)
    keys = vendor.home / "keys"
    r = vendor.run("key", "export", "vendor", "--json")
    shown = json.loads(r.stdout)
    assert shown["roles"] == ["producer"]
    fingerprint = shown["keyid"][:16]
    assert r.stderr == (f"OK: key vendor (ed25519, fingerprint {fingerprint}): producer in "
                        "policy 'vendor.example/log' serial 1, the policy in force\n"), r.stderr
    # keys/vendor.pub replaced by another key (an insider's, with no passphrase).
    spare = (keys / "spare.pub").read_bytes()
    (keys / "vendor.pub").write_bytes(spare)
    (keys / "spare.pub").unlink()  # (else it is the key of spare too, the next case)
    r = vendor.run("key", "export", "vendor")
    assert r.stdout.startswith("-----BEGIN PUBLIC KEY-----")
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("WARNING: key vendor (ed25519, fingerprint "), \
        r.stderr  # fmt: skip
    assert lines[0].endswith(
        "holds no role in policy 'vendor.example/log' serial 1, the policy in force: if it is "
        "not a key made for the next policy, keys/vendor.pub was replaced; do not give it out: "
        "compare its fingerprint with the policy's ('trajledger policy show') and restore the "
        "file"), \
        lines[0]  # fmt: skip
    # keys/vendor.pub a link to another key of this store.
    (keys / "spare.pub").write_bytes(spare)
    (keys / "vendor.pub").unlink()
    (keys / "vendor.pub").symlink_to("spare.pub")
    r = vendor.run("key", "export", "vendor", "--json")
    assert json.loads(r.stdout)["roles"] == []
    assert r.stderr.startswith("WARNING: key vendor (ed25519, fingerprint ") and \
        "is the key of spare too: keys/vendor.pub was copied from or links to it" in r.stderr, \
        r.stderr  # fmt: skip
