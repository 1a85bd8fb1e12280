"""out59: the fortieth round's Left on a keyless vendor (Sigstore, the private instance of
tests/interop/conftest.py): a record signed by an identity the vendor's own policy declares
compromised, exported after the declaration, as the vendor's ``export`` and the buyer's
``import`` name it. docs/SECURITY.md, "Review of 2026-12-07, forty-first round (out59)"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sigstore")

from testkit import Party

from trajledger.ledger.sigstore_sign import TOKEN_ENV, TRUST_CONFIG_ENV

ISSUER = "https://oidc.test.invalid"
ALICE, BOB = "alice@example.com", "bob@example.com"


def test_a_record_of_an_identity_declared_compromised_is_named_by_its_identity(
    sigstore_instance: Any, trust_files: tuple[Path, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The vendor's producer is ALICE (keyless); it signs f1 and f2; the buyer imports f1.
    The vendor declares ALICE compromised since f2 (its successor names BOB) and exports its
    update, which the buyer takes in, then f2 (``--updates-since``). The export wrote a bundle
    without f2's Sigstore bundle and said ``the lineage does not verify, the recipient will
    see: … the envelope names key 968b6cc6063a (not in the policy), want producer key(s); if
    the signer confirms the key is theirs …, add it to [roles.producer]``, the buyer's refusal
    the same: a key that is none, and a way on that adds it. Expected: both name the keyless
    signature as such, the identity and its declaration, and no key to add."""
    config, root = trust_files
    monkeypatch.setenv(TRUST_CONFIG_ENV, str(config))
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    vendor = Party(tmp_path, "vendor")
    vendor.run("init", "--origin", "vendor.example/log")
    vendor.run("key", "new", "a", "--no-encrypt")
    vkey = vendor.vkey()

    def identity(who: str) -> str:
        return f'identities = [{{issuer = "{ISSUER}", subject = "{who}"}}]\n'

    def policy(who: Party, serial: int, producer: str, approver: str, vkeys: str,
               extra: str = "") -> Path:
        path = tmp_path / f"{who.name}-{serial}.toml"
        path.write_text(f'name = "{who.name}"\nserial = {serial}\nsigstore_trusted_root = '
                        f'"{root}"\n{extra}[roles.producer]\n{identity(producer)}'
                        f'[roles.approver]\nkeys = ["{who.home / "keys" / approver}"]\n'
                        f"[roles.log]\nvkeys = [{vkeys}]\n")
        return path

    vendor.run("policy", "set", policy(vendor, 1, ALICE, "a.pub", f'"{vkey}"'), "--key", "a",
               "--yes")
    digests = []
    for n in (1, 2):
        (tmp_path / f"f{n}.txt").write_text(f"file {n} by alice")
        digests.append(vendor.last("attest", tmp_path / f"f{n}.txt", "--sigstore"))
    buyer = Party(tmp_path, "buyer")
    buyer.run("init", "--origin", "buyer.example/log")
    buyer.run("key", "new", "approver", "--no-encrypt")
    buyer.run("policy", "set", policy(buyer, 1, ALICE, "approver.pub",
                                      f'"{vkey}", "{buyer.vkey()}"'),
              "--key", "approver", "--yes")
    vendor.run("export", digests[0], "--out", tmp_path / "f1.tar.zst")
    buyer.run("import", tmp_path / "f1.tar.zst", "--key", "approver")
    applied = vendor.size()
    declared = (f'[[revoked_identities]]\nissuer = "{ISSUER}"\nsubject = "{ALICE}"\n'
                f'compromised_since = {applied - 1}\nreason = "CI token leaked"\n')
    vendor.run("policy", "set", policy(vendor, 2, BOB, "a.pub", f'"{vkey}"', declared),
               "--key", "a", "--yes")
    vendor.run("export", "--updates-since", str(applied), "--out", tmp_path / "u.tar.zst")
    buyer.run("import", tmp_path / "u.tar.zst", "--key", "approver")
    unchecked = ("the envelope names key {k} (no key of the policy: the digest of a keyless "
                 "signature's Sigstore bundle, if it is one, not checked here), want producer "
                 "key(s) or identities")
    said = (f"identity {ALICE} ({ISSUER}) revoked by policy 'vendor' serial 2: compromised "
            f"since log index {applied - 1}: CI token leaked; what a revoked identity signed "
            "from that point on counts for nothing: ask the signer to sign the record again "
            "with an identity or key the policy trusts")
    err = vendor.run("export", digests[1], "--updates-since", str(applied),
                     "--out", tmp_path / "f2.tar.zst").stderr
    line = next(x for x in err.splitlines() if "the lineage does not verify" in x)
    keyid = line.split("the envelope names key ")[1][:12]
    assert unchecked.format(k=keyid) in line and line.endswith(said), line
    assert "add it to [roles." not in err and "(not in the policy)" not in err, err
    buyer.run("reindex")
    before = files(buyer)
    r = buyer.run("import", tmp_path / "f2.tar.zst", "--key", "approver", code=1)
    assert files(buyer) == before
    line = r.stderr.splitlines()[1]
    assert unchecked.format(k=keyid) in line and line.endswith(
        "; if it is a keyless signature, this evidence does not hold its Sigstore bundle: ask "
        "its sender for evidence that does (an exporter leaves it out when its own policy no "
        "longer counts that identity, as when it declared it compromised: ask them); "
        f"vendor.example/log+{vkey.split('+')[1]}'s policy (serial 2, in this bundle) declares "
        f"identity {ALICE} ({ISSUER}) compromised since log index {applied - 1}: CI token "
        "leaked: what it signed from then on counts for nothing there, so its export leaves "
        "out the Sigstore bundle; take the record for one its signer does not stand by: ask "
        f"vendor.example/log+{vkey.split('+')[1]}'s owner for it signed again"), line
    assert "add it to [roles." not in r.stderr, r.stderr


def files(party: Party) -> dict[str, bytes]:
    """The party's ledger and user state, file by file (`test_out55_reported.files`)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
    from test_out55_reported import files as of

    return of(party.home, party.state)
