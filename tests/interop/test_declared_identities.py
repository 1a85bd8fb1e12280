"""A Sigstore identity the auditor's policy trusts and the exporter's own policy declares
compromised (twenty-first round, left36 finding 1; docs/SECURITY.md "Review of 2026-12-05,
twenty-first round (left36)").

left35 (finding 3) named a *key* the auditor's hand-written policy trusts that the lab's own
policy in the bundle declares compromised (``[[revoked_keys]]``); the lab's
``[[revoked_identities]]`` was not read, so a record its CI identity signed keylessly after the
point declared passed under the auditor's policy, exit 0. Keyless signing runs against the
private Sigstore instance of tests/interop/conftest.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sigstore")

from trajledger.ledger.sigstore_sign import TOKEN_ENV, TRUST_CONFIG_ENV
from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main

ISSUER = "https://oidc.test.invalid"
ALICE = "alice@example.com"


def test_an_identity_the_auditor_trusts_and_the_exporter_declares_compromised_is_named(
    sigstore_instance: Any, trust_files: tuple[Path, Path], runner: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The lab's producer ALICE (keyless) signs f1 and f2; its serial 2 declares ALICE
    compromised since f2's index. The auditor's hand-written policy still trusts ALICE: f2's
    bundle fails naming the identity, the declaration and what to do (exit 0 before); f1's
    passes with a WARNING in the report."""
    import testkit

    from trajledger import Ledger

    config, root = trust_files
    home = tmp_path / "ledger"
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    monkeypatch.setenv(TRUST_CONFIG_ENV, str(config))

    def ok(*args: str) -> Any:  # a command that must succeed
        done = testkit.invoke(home, *args)
        assert done.exit_code == 0, done.output
        return done

    ok("init", "--origin", "test.example/keyless")
    for k in ("vendor", "a", "b"):
        ok("key", "new", k, "--no-encrypt")
    vkey = Ledger.open(home).log.vkey
    keys = home / "keys"

    def policy_text(name: str, serial: int, producer: str, extra: str = "") -> str:
        return (f'name = "{name}"\nserial = {serial}\nsigstore_trusted_root = "{root}"\n{extra}'
                f"[roles.producer]\n{producer}\n[roles.approver]\n"
                f'keys = ["{keys / "a.pub"}", "{keys / "b.pub"}"]\nthreshold = 2\n'
                f'[roles.log]\nvkeys = ["{vkey}"]\n')

    alice = f'identities = [{{issuer = "{ISSUER}", subject = "{ALICE}"}}]'
    path = tmp_path / "policy-1.toml"
    path.write_text(policy_text("keyless", 1, alice))
    ok("policy", "set", str(path), "--key", "a", "--key", "b", "--yes")
    digests = []
    for name in ("f1.txt", "f2.txt"):
        (tmp_path / name).write_text(f"{name} signed by alice")
        digests.append(ok("attest", str(tmp_path / name), "--sigstore").stdout.split()[-1])
    since = Ledger.open(home).log.find_subject(digests[1])[0]
    path = tmp_path / "policy-2.toml"
    path.write_text(policy_text(
        "keyless", 2, f'keys = ["{keys / "vendor.pub"}"]',
        f'[[revoked_identities]]\nissuer = "{ISSUER}"\nsubject = "{ALICE}"\n'
        f'compromised_since = {since}\nreason = "CI token leaked"\n'))
    ok("policy", "set", str(path), "--key", "a", "--key", "b", "--yes")
    auditor = tmp_path / "auditor.toml"
    auditor.write_text(policy_text("auditor", 1, alice))
    bundles = [tmp_path / "f1.tar.zst", tmp_path / "f2.tar.zst"]
    for digest, out in zip(digests, bundles, strict=True):
        ok("export", digest, "--policy", str(auditor), "--out", str(out))
    said = (f"your policy 'auditor' trusts identity {ALICE} ({ISSUER}) as producer, which the "
            "exporter's own policy 'keyless' serial 2 (in this bundle) declares compromised "
            f"since log index {since}: CI token leaked")
    fix = ("if the identity is theirs, update your policy: verify from the exporter's first "
           "policy (the bundle's policy/0.json")
    assert verify_main([str(bundles[1]), "--policy", str(auditor)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[1].startswith(f"FAIL: {bundles[1]}: bundle f2.tar.zst > policy: {said}; this "
                             f"bundle's record(s) at log index {since} were signed by it since "
                             f"then, which its owner disowns: {fix}"), err
    r = runner.invoke(main, ["verify", str(bundles[1]), "--policy", str(auditor)])
    assert r.exit_code == 1 and f"> policy: {said}; this bundle's record(s)" in r.stderr, r.output
    assert verify_main([str(bundles[0]), "--policy", str(auditor)]) == 0
    out, err_text = capsys.readouterr()
    assert f"· policy — WARNING: {said}; nothing in this bundle was signed by it since then, but " \
        f"your policy would count what it signs: {fix}" in out, out
    assert err_text.startswith(f"OK: {bundles[0]}: "), err_text
