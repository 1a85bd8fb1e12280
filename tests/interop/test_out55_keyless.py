"""out55: a vendor that signs its records keylessly (Sigstore, the private instance of
tests/interop/conftest.py), its identity replaced and the old one declared compromised, and a
buyer who imported from it; docs/SECURITY.md, "Review of 2026-12-07, thirty-ninth round
(out55)"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sigstore")

from testkit import Party, new_runner

from trajledger.ledger.sigstore_sign import TOKEN_ENV, TRUST_CONFIG_ENV
from trajledger.runner.cli import main

ISSUER = "https://oidc.test.invalid"
ALICE, BOB = "alice@example.com", "bob@example.com"


def test_a_vendors_compromised_identity_reaches_the_buyer_with_the_way_to_stop_it(
    sigstore_instance: Any, trust_files: tuple[Path, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A vendor's producer is its CI identity ALICE (keyless, ``attest --sigstore``); it
    signs f1 and f2, which a buyer whose producer role names ALICE imports. The vendor learns
    ALICE's token leaked before f2: its successor names BOB and declares ALICE compromised
    since f2's log index (``[[revoked_identities]]``), and BOB signs f3. The buyer's import of
    the vendor's update said nothing of it (a key declared so is named, and what it signed
    since revoked here), and f2 kept verifying, exit 0. Expected: a WARNING naming the
    identity, the declaration and the successor that stops it here (with this log's index);
    followed as printed, f2 fails, f1 passes, and BOB's f3 imports."""
    config, root = trust_files
    monkeypatch.setenv(TRUST_CONFIG_ENV, str(config))
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    vendor = Party(tmp_path, "vendor")
    vendor.run("init", "--origin", "vendor.example/log")
    vendor.run("key", "new", "a", "--no-encrypt")
    vkey = vendor.vkey()

    def identity(who: str) -> str:
        return f'identities = [{{issuer = "{ISSUER}", subject = "{who}"}}]\n'

    def vendor_policy(serial: int, who: str, extra: str = "") -> str:
        return (f'name = "vendor"\nserial = {serial}\nsigstore_trusted_root = "{root}"\n{extra}'
                f"[roles.producer]\n{identity(who)}"
                f'[roles.approver]\nkeys = ["{vendor.home / "keys" / "a.pub"}"]\n'
                f'[roles.log]\nvkeys = ["{vkey}"]\n')

    (tmp_path / "p1.toml").write_text(vendor_policy(1, ALICE))
    vendor.run("policy", "set", tmp_path / "p1.toml", "--key", "a", "--yes")
    digests = []
    for n in (1, 2):
        (tmp_path / f"f{n}.txt").write_text(f"file {n} by alice")
        digests.append(vendor.last("attest", tmp_path / f"f{n}.txt", "--sigstore"))
    buyer = Party(tmp_path, "buyer")
    buyer.run("init", "--origin", "buyer.example/log")
    buyer.run("key", "new", "approver", "--no-encrypt")

    def buyer_policy(serial: int, producer: str, extra: str = "") -> str:
        return (f'name = "buyer"\nserial = {serial}\nsigstore_trusted_root = "{root}"\n{extra}'
                f"[roles.producer]\n{producer}"
                f'[roles.approver]\nkeys = ["{buyer.home / "keys" / "approver.pub"}"]\n'
                f'[roles.log]\nvkeys = ["{vkey}", "{buyer.vkey()}"]\n')

    (tmp_path / "b1.toml").write_text(buyer_policy(1, identity(ALICE)))
    buyer.run("policy", "set", tmp_path / "b1.toml", "--key", "approver", "--yes")
    for n, digest in enumerate(digests, 1):
        vendor.run("export", digest, "--out", tmp_path / f"f{n}.tar.zst")
        buyer.run("import", tmp_path / f"f{n}.tar.zst", "--key", "approver")
    applied, f2_here = vendor.size(), buyer.size() - 2  # (f2's record, then its import's)
    (tmp_path / "p2.toml").write_text(vendor_policy(2, BOB, (
        f'[[revoked_identities]]\nissuer = "{ISSUER}"\nsubject = "{ALICE}"\n'
        f"compromised_since = {applied - 1}\nreason = \"CI token leaked\"\n")))
    vendor.run("policy", "set", tmp_path / "p2.toml", "--key", "a", "--yes")
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(BOB))
    (tmp_path / "f3.txt").write_text("file 3 by bob")
    digests.append(vendor.last("attest", tmp_path / "f3.txt", "--sigstore"))
    vendor.run("export", "--updates-since", str(applied), "--out", tmp_path / "u.tar.zst")
    said = (f"WARNING: identity {ALICE} ({ISSUER}) of vendor.example/log+", (
        f"is compromised (compromised since log index {applied - 1}: CI token leaked; "
        "its policy 'vendor' serial 2)"), ("; your policy still trusts it as producer: record a "
        "successor without it and with [[revoked_identities]] issuer = "
        f'"{ISSUER}", subject = "{ALICE}", compromised_since = {f2_here} (what it signed '
        "here from then on then fails)"))
    for url in served(vendor):  # monitor without --key (records nothing) says it too
        err = buyer.run("monitor", url, "--vkey", vkey).stderr
        assert said[0] in err and said[1] + said[2] in err, err  # (no key: nothing revoked)
    err = buyer.run("import", tmp_path / "u.tar.zst", "--key", "approver").stderr
    assert said[0] in err and said[1] in err and said[2] in err, err
    # (out57: what ALICE signed since the point, held from the vendor alone, revoked here at
    # once, as a compromised key's is; out55 warned only, and f2 kept verifying, exit 0)
    assert (f"(compromised since log index {applied - 1}: CI token leaked; its policy 'vendor' "
            f"serial 2): revoked here what it signed since: ") in err, err
    r = new_runner().invoke(main, ["--ledger", str(buyer.home), "verify", digests[1]],
                            env={"TRAJLEDGER_STATE_DIR": str(buyer.state)})
    assert r.exit_code == 1 and (f"revoked: signed by identity {ALICE} ({ISSUER}), which "
                                 "vendor.example/log+") in r.stderr, r.output
    buyer.run("verify", digests[0])
    # BOB's record, before the buyer trusts BOB: the way on is the identity, not a "key"
    vendor.run("export", digests[2], "--out", tmp_path / "f3.tar.zst")
    buyer.run("reindex")  # (its derived state caught up first)
    before = files(buyer)
    r = new_runner().invoke(main, ["--ledger", str(buyer.home), "import",
                                   str(tmp_path / "f3.tar.zst"),
                                   "--key", "approver"],
                            env={"TRAJLEDGER_STATE_DIR": str(buyer.state)})
    assert r.exit_code == 1 and files(buyer) == before, r.output
    assert "(not in the policy)" not in r.stderr and "add it to [roles." not in r.stderr, r.stderr
    assert r.stderr.count(f"signed by identity {BOB}") == 1, r.stderr
    assert ("(a Sigstore bundle, whose identity this line names), want producer key(s) or "
            "identities; if the "
            "signer confirms that identity is theirs (ask them, not the data), add its issuer "
            "and subject to the identities of [roles.producer] of the policy you verify with"
            ) in r.stderr, r.stderr
    # done as printed (the vendor's new identity added, as the buyer learns it out of band)
    (tmp_path / "b2.toml").write_text(buyer_policy(2, identity(BOB), (
        f'[[revoked_identities]]\nissuer = "{ISSUER}"\nsubject = "{ALICE}"\n'
        f"compromised_since = {f2_here}\n")))
    buyer.run("policy", "set", tmp_path / "b2.toml", "--key", "approver", "--yes")
    buyer.run("verify", digests[0])
    r = new_runner().invoke(main, ["--ledger", str(buyer.home), "verify", digests[1]],
                            env={"TRAJLEDGER_STATE_DIR": str(buyer.state)})
    assert r.exit_code == 1 and f"identity {ALICE}" in r.stderr, r.output
    buyer.run("import", tmp_path / "f3.tar.zst", "--key", "approver")
    buyer.run("verify", digests[2])


def served(party: Party) -> Any:
    """`test_updates.served`: ``log serve`` of ``party``'s log, its URL."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
    from test_updates import served as serve

    return serve(party)


def files(party: Party) -> dict[str, bytes]:
    """The buyer's ledger and user state, file by file (`test_out55_reported.files`)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
    from test_out55_reported import files as of

    return of(party.home, party.state)
