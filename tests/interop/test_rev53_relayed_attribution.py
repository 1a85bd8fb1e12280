"""rev53: who a relayed revocation is said to be "revoked by" rests on the signatures that
verified, not on the signers a relay's log entry lists (docs/SECURITY.md, "Review of
2026-12-07, forty-first round (rev53)"). A lab's keyless identity (the private Sigstore instance
of tests/interop/conftest.py) is what makes its revocation count at the third party; here
because the test needs that instance's fixtures, not tests/e2e."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sigstore")

from testkit import Party, new_runner

from trajledger.ledger.sigstore_sign import TOKEN_ENV, TRUST_CONFIG_ENV
from trajledger.runner.cli import main

ISSUER = "https://oidc.test.invalid"
BOB = "bob@lab.example"


def _policy(name: str, root: Path, vkeys: list[str], producer: Path, approver: Path,
            bob: bool) -> str:
    idents = f'identities = [{{issuer = "{ISSUER}", subject = "{BOB}"}}]\n' if bob else ""
    return (f'name = "{name}"\nserial = 1\nsigstore_trusted_root = "{root}"\n'
            f'[roles.producer]\nkeys = ["{producer}"]\n'
            f'[roles.approver]\nkeys = ["{approver}"]\n{idents}'
            f"[roles.log]\nvkeys = {json.dumps(vkeys)}\n")


def test_a_relay_cannot_name_the_vendor_as_the_revoker_of_what_it_revoked_itself(
    sigstore_instance: Any, trust_files: tuple[Path, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The vendor A records f1 (its producer key; its key ``a`` signs its policy); the lab B
    and the third party C import it; C takes in B's update (so both logs' own keys are known
    at C; C's approver role names B's CI identity BOB). B revokes f1 keylessly as BOB and logs
    the revocation with its entry's signers listing ``a`` (the list is the log writer's word:
    the verifier asks only that the keys that verified be among them, and a keyless signer is
    no key), then sends C its bundle of f1. C's ``verify`` and ``lineage --json`` of f1 said
    ``revoked by vendor.example/log, relayed by lab.example/log+… (signed by <a's keyid>)``:
    A named as the revoker of what it never signed, the auditor sent to ask the wrong party.
    Expected: the relay named, with the identity whose signature counted."""
    config, root = trust_files
    monkeypatch.setenv(TRUST_CONFIG_ENV, str(config))
    a, b, c = (Party(tmp_path, n) for n in ("vendor", "lab", "third"))
    for p, key in ((a, "a"), (b, "b"), (c, "c")):
        p.run("init", "--origin", f"{p.name}.example/log")
        p.run("key", "new", key, "--no-encrypt")
    a.run("key", "new", "producer", "--no-encrypt")
    pub = {p.name: p.home / "keys" / f"{k}.pub" for p, k in ((a, "a"), (b, "b"), (c, "c"))}
    vk = {p.name: p.vkey() for p in (a, b, c)}
    for p, key, vkeys, bob in ((a, "a", [vk["vendor"]], False),
                               (b, "b", [vk["vendor"], vk["lab"]], True),
                               (c, "c", list(vk.values()), True)):
        (tmp_path / f"{p.name}.toml").write_text(_policy(
            p.name, root, vkeys, a.home / "keys" / "producer.pub", pub[p.name], bob))
        p.run("policy", "set", tmp_path / f"{p.name}.toml", "--key", key, "--yes")
    (tmp_path / "f1.txt").write_text("file 1 by the vendor")
    f1 = a.last("attest", tmp_path / "f1.txt", "--key", "producer")
    a.run("export", f1, "--out", tmp_path / "f1.tar.zst")
    b.run("import", tmp_path / "f1.tar.zst", "--key", "b")
    c.run("import", tmp_path / "f1.tar.zst", "--key", "c")
    b.run("export", "--updates-since", "0", "--out", tmp_path / "u0.tar.zst")
    c.run("import", tmp_path / "u0.tar.zst", "--key", "c")
    since = b.size()
    # B's revocation as BOB, made in a copy of B (its envelope and Sigstore bundle taken)...
    scratch = Party(tmp_path / "scratch", "lab")
    shutil.copytree(b.home, scratch.home)
    shutil.copytree(b.state, scratch.state, dirs_exist_ok=True)
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(BOB))
    monkeypatch.setenv(STATE := "TRAJLEDGER_STATE_DIR", str(scratch.state))
    from trajledger.ledger.home import LedgerHome
    from trajledger.ledger.log.spec import EntrySpec
    from trajledger.ledger.record import record_statement
    from trajledger.ledger.sigstore_sign import KeylessSigner
    from trajledger.verify import predicates
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.predicates import Revocation

    theirs, ours = LedgerHome.open(scratch.home), LedgerHome.open(b.home)
    envelope = record_statement(  # (`revoke` signs an artifact's revocation with keys only)
        theirs, "f1", f1, predicates.REVOCATION,
        Revocation("withdrawn", "2026-12-07T00:00:00Z").to_predicate(),
        KeylessSigner.from_environment()).envelope_digest
    raw = theirs.store.get(envelope)
    for sig in Envelope.from_bytes(raw).signatures:  # the keyless signature's bundle
        ours.store.put_bytes(theirs.store.get(f"sha256:{sig.keyid}"))
    assert ours.store.put_bytes(raw) == envelope
    # ... logged in B's log with its signers naming the vendor's own key
    a_keyid = next(k["keyid"] for k in json.loads(a.run("key", "list", "--json").stdout)
                   if k["name"] == "a")  # (the key that signed the vendor's policy: its own)
    monkeypatch.setenv(STATE, str(b.state))
    ours.log.append([EntrySpec("revocation", f1, envelope, (a_keyid,))])
    monkeypatch.delenv(STATE)
    # (an update bundle carries no Sigstore bundle; the lab's bundle of f1 does: its walk reads
    # the revocation's)
    b.run("export", f1, "--updates-since", str(since), "--out", tmp_path / "f1-lab.tar.zst")
    err = c.run("import", tmp_path / "f1-lab.tar.zst", "--key", "c").stderr
    assert "relayed by" not in err, err  # the import names the lab (verified signers)
    r = new_runner().invoke(main, ["--ledger", str(c.home), "verify", f1],
                            env={"TRAJLEDGER_STATE_DIR": str(c.state)})
    assert r.exit_code == 1, r.output
    assert "revoked by vendor.example" not in r.stderr and a_keyid[:12] not in r.stderr, r.stderr
    assert "revoked by lab.example/log" in r.stderr and BOB in r.stderr, r.stderr
    r = new_runner().invoke(main, ["--ledger", str(c.home), "lineage", f1, "--json"],
                            env={"TRAJLEDGER_STATE_DIR": str(c.state)})
    by = [x["revokedBy"] for x in json.loads(r.stdout)["causes"] if "revokedBy" in x]
    assert by and by[0]["signerLog"] is None and a_keyid not in by[0]["signers"], by

