"""Keyless signing through the real ``sigstore`` package, against a private instance on 127.0.0.1.

The signing path is the production one (``KeylessSigner`` -> sigstore's ``SigningContext`` ->
Fulcio certificate -> DSSE signature -> Rekor entry -> bundle); only the instance differs (the
``sigstore_instance`` fixture, named by ``TRAJLEDGER_SIGSTORE_TRUST_CONFIG``). What does not run
here: the public-good Fulcio and Rekor, TUF refresh of the production trust root, real OIDC
providers and CI ambient credentials (see docs/sigstore.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sigstore")

from trajledger.ledger.errors import KeyError_, LedgerError
from trajledger.ledger.sigstore_sign import TOKEN_ENV, TRUST_CONFIG_ENV, KeylessSigner
from trajledger.runner.cli import main
from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE, Envelope
from trajledger.verify.errors import SignatureError
from trajledger.verify.keys import Identity
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.sigstore_adapter import (
    bundle_keyid,
    identity_signers,
    verify_envelope_signature,
    verify_sigstore_bundle,
)

ISSUER = "https://oidc.test.invalid"
ALICE = "alice@example.com"
BOB = "bob@example.com"


def _no_ambient_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ambient credential, even on a CI machine that has one: sigstore's detection (the
    ``id`` package, which may ask a cloud metadata server) answers "none found"."""
    import sigstore.oidc

    monkeypatch.setattr(sigstore.oidc, "detect_credential", lambda *a, **k: None)


def _statement(digest: str = "a" * 64) -> bytes:
    return json.dumps(
        {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "x", "digest": {"sha256": digest}}],
            "predicateType": "https://trajledger.dev/attestation/files/v1",
            "predicate": {},
        },
        separators=(",", ":"),
    ).encode()


def test_keyless_signature_verifies_for_its_identity_only(
    sigstore_instance: Any, trust_files: tuple[Path, Path]
) -> None:
    config, root = trust_files
    signer = KeylessSigner(sigstore_instance.token(ALICE), trust_config=config)
    payload = _statement()
    sig = signer.sign_dsse(INTOTO_PAYLOAD_TYPE, payload)
    assert (sig.subject, sig.issuer) == (ALICE, ISSUER)
    assert sig.keyid == hashlib.sha256(sig.bundle).hexdigest()

    trusted = root.read_bytes()
    verified = verify_sigstore_bundle(
        sig.bundle,
        identities=[Identity(ISSUER, ALICE)],
        trusted_root=trusted,
        expected_payload=(INTOTO_PAYLOAD_TYPE, payload),
        expected_signature=sig.signature,
    )
    assert verified.mode == "keyless"
    assert verified.signer.identity == Identity(ISSUER, ALICE)

    with pytest.raises(SignatureError, match=r"signed by identity alice@example\.com .*none of"):
        verify_sigstore_bundle(
            sig.bundle,
            identities=[Identity(ISSUER, "mallory@example.com")],
            trusted_root=trusted,
            expected_payload=(INTOTO_PAYLOAD_TYPE, payload),
        )
    with pytest.raises(SignatureError, match="signs a different payload"):
        verify_sigstore_bundle(
            sig.bundle,
            identities=[Identity(ISSUER, ALICE)],
            trusted_root=trusted,
            expected_payload=(INTOTO_PAYLOAD_TYPE, _statement("b" * 64)),
        )
    # Against the production root (the default), the test CA is unknown: refused.
    with pytest.raises(SignatureError, match="keyless signature does not verify"):
        verify_sigstore_bundle(
            sig.bundle,
            identities=[Identity(ISSUER, ALICE)],
            expected_payload=(INTOTO_PAYLOAD_TYPE, payload),
        )


def test_a_second_signature_reuses_the_certificate(
    sigstore_instance: Any, trust_files: tuple[Path, Path]
) -> None:
    config, _ = trust_files
    signer = KeylessSigner(sigstore_instance.token(ALICE), trust_config=config)
    before = len(sigstore_instance.leaves)
    one = signer.sign_dsse(INTOTO_PAYLOAD_TYPE, _statement("1" * 64))
    two = signer.sign_dsse(INTOTO_PAYLOAD_TYPE, _statement("2" * 64))
    assert len(sigstore_instance.leaves) == before + 2  # one Rekor entry each
    cert = [json.loads(b)["verificationMaterial"]["certificate"] for b in (one.bundle, two.bundle)]
    assert cert[0] == cert[1]


@pytest.mark.parametrize(
    ("token", "match"),
    [
        ("", r"needs an OIDC identity token: set SIGSTORE_ID_TOKEN"),
        ("not-a-jwt", r"OIDC identity token is not usable: Identity token is malformed"),
        ("expired", r"OIDC identity token is not usable"),
        ("audience", r"OIDC identity token is not usable"),
    ],
)
def test_token_problems_are_named(
    sigstore_instance: Any,
    trust_files: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    token: str,
    match: str,
) -> None:
    _no_ambient_credential(monkeypatch)
    raw = {
        "expired": sigstore_instance.token(ALICE, ttl=-60),
        "audience": sigstore_instance.token(ALICE, aud="somebody-else"),
    }.get(token, token)
    signer = KeylessSigner.from_environment({TOKEN_ENV: raw, TRUST_CONFIG_ENV: str(trust_files[0])})
    with pytest.raises(KeyError_, match=match):
        signer.sign_dsse(INTOTO_PAYLOAD_TYPE, _statement())


def test_an_ambient_credential_is_used_when_no_token_is_given(
    sigstore_instance: Any, trust_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sigstore.oidc

    calls: list[str] = []

    def detect(client_id: str = "sigstore") -> str:
        calls.append(client_id)
        return str(sigstore_instance.token("ci@example.com"))

    monkeypatch.setattr(sigstore.oidc, "detect_credential", detect)
    signer = KeylessSigner.from_environment({TRUST_CONFIG_ENV: str(trust_files[0])})
    sig = signer.sign_dsse(INTOTO_PAYLOAD_TYPE, _statement())
    assert (calls, sig.subject) == (["sigstore"], "ci@example.com")


def test_a_certificate_about_to_expire_is_replaced(
    sigstore_instance: Any, trust_files: tuple[Path, Path]
) -> None:
    """sigstore's signer refuses to sign with an expired certificate (an exception class it
    defines only privately): the signer asks Fulcio for a new one first."""
    from datetime import UTC, datetime

    config, root = trust_files
    signer = KeylessSigner(sigstore_instance.token(ALICE), trust_config=config)
    one = signer.sign_dsse(INTOTO_PAYLOAD_TYPE, _statement("1" * 64))
    signer._not_after = datetime.now(UTC)  # as if its certificate expired now
    two = signer.sign_dsse(INTOTO_PAYLOAD_TYPE, _statement("2" * 64))
    cert = [json.loads(b)["verificationMaterial"]["certificate"] for b in (one.bundle, two.bundle)]
    assert cert[0] != cert[1]
    verify_sigstore_bundle(
        two.bundle,
        identities=[Identity(ISSUER, ALICE)],
        trusted_root=root.read_bytes(),
        expected_payload=(INTOTO_PAYLOAD_TYPE, _statement("2" * 64)),
    )


def test_a_bug_is_not_reported_as_a_service_failure(
    sigstore_instance: Any, trust_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only sigstore's errors and the network's are a service's answer; anything else is a bug
    and keeps its type (exit 4 on the command line)."""
    from sigstore.sign import Signer

    config, _ = trust_files
    signer = KeylessSigner(sigstore_instance.token(ALICE), trust_config=config)

    def broken(self: Any, statement: Any) -> Any:
        raise TypeError("a bug")

    monkeypatch.setattr(Signer, "sign_dsse", broken)
    with pytest.raises(TypeError, match="a bug"):
        signer.sign_dsse(INTOTO_PAYLOAD_TYPE, _statement())


def test_service_failures_are_named(
    sigstore_instance: Any, trust_files: tuple[Path, Path], tmp_path: Path
) -> None:
    config, _ = trust_files
    # Fulcio refuses; or Rekor fails after Fulcio issued the certificate: its client's error (a
    # class sigstore defines privately) is named by the step that raised it.
    for service, said in [
        ("fail_fulcio", r"Fulcio \(the certificate authority\) .* 503 Server Error"),
        ("fail_rekor", r"Rekor \(the transparency log\) .*503"),
    ]:
        setattr(sigstore_instance, service, True)
        try:
            signer = KeylessSigner(sigstore_instance.token(ALICE), trust_config=config)
            with pytest.raises(LedgerError, match=f"keyless signing failed: {said}"):
                signer.sign_dsse(INTOTO_PAYLOAD_TYPE, _statement())
        finally:
            setattr(sigstore_instance, service, False)
    # An instance that is not there (nothing listens on the port): the connection error.
    dead = json.loads(config.read_text())
    for svc in ("caUrls", "rekorTlogUrls"):
        dead["signingConfig"][svc][0]["url"] = "http://127.0.0.1:9"
    (tmp_path / "dead.json").write_text(json.dumps(dead))
    signer = KeylessSigner(sigstore_instance.token(ALICE), trust_config=tmp_path / "dead.json")
    with pytest.raises(LedgerError, match=r"keyless signing failed: .*(refused|Connection)"):
        signer.sign_dsse(INTOTO_PAYLOAD_TYPE, _statement())
    with pytest.raises(LedgerError, match=r"trust config .*missing.json: cannot read"):
        KeylessSigner("t", trust_config=tmp_path / "missing.json")._signing_context()


def _ledger(runner: Any, home: Path) -> None:
    def ok(*args: str) -> Any:
        r = runner.invoke(main, ["--ledger", str(home), *args])
        assert r.exit_code == 0, r.output
        return r

    ok("init", "--origin", "test.example/keyless")
    ok("key", "new", "vendor", "--no-encrypt")


def _keyless_ledger(
    runner: Any, home: Path, trust_files: Any, sigstore_instance: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Callable[..., Any], Callable[..., None]]:
    """A ledger signing keylessly as ALICE (the test instance's root), approvers a and b (2 of
    2); returns ``ok`` (a command that must succeed) and ``policy(serial, producer, extra)``,
    which records a policy of that serial, the producer role's TOML lines given."""
    from trajledger import Ledger

    config, root = trust_files
    _ledger(runner, home)
    monkeypatch.setenv(TRUST_CONFIG_ENV, str(config))
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))

    def ok(*args: str) -> Any:
        r = runner.invoke(main, ["--ledger", str(home), *args])
        assert r.exit_code == 0, r.output
        return r

    for k in ("a", "b"):
        ok("key", "new", k, "--no-encrypt")
    vkey = Ledger.open(home).log.vkey
    keys = home / "keys"

    def policy(serial: int, producer: str, extra: str = "") -> None:
        path = home.parent / f"policy-{serial}.toml"
        path.write_text(
            f'name = "keyless"\nserial = {serial}\nsigstore_trusted_root = "{root}"\n{extra}'
            f"[roles.producer]\n{producer}\n"
            f'[roles.approver]\nkeys = ["{keys / "a.pub"}", "{keys / "b.pub"}"]\nthreshold = 2\n'
            f'[roles.log]\nvkeys = ["{vkey}"]\n'
        )
        ok("policy", "set", str(path), "--key", "a", "--key", "b", "--yes")

    return ok, policy


def test_attest_sigstore_stores_the_bundle_the_envelope_names(
    sigstore_instance: Any,
    trust_files: tuple[Path, Path],
    runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trajledger import Ledger

    config, root = trust_files
    home = tmp_path / "ledger"
    _ledger(runner, home)
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("hello")
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    monkeypatch.setenv(TRUST_CONFIG_ENV, str(config))
    r_attest = r = runner.invoke(
        main, ["--ledger", str(home), "attest", str(data), "--key", "vendor", "--sigstore"]
    )
    assert r.exit_code == 0, r.output
    assert "keyless signature by alice@example.com (issuer https://oidc.test.invalid)" in r.stderr

    ledger = Ledger.open(home)
    entry = LogEntry.from_bytes(ledger.log.entry(ledger.log.tree_state()[0] - 1))
    envelope = Envelope.from_bytes(ledger.store.get(entry.envelope))
    vendor = ledger.keys.public("vendor").keyid
    keyless = [s for s in envelope.signatures if s.keyid != vendor]
    assert len(envelope.signatures) == 2 and len(keyless) == 1
    bundle = ledger.store.get("sha256:" + keyless[0].keyid)  # the envelope names its bundle
    assert bundle_keyid(bundle) == keyless[0].keyid
    assert set(entry.signers) == {vendor, keyless[0].keyid}  # so does the log entry

    signer = verify_envelope_signature(
        envelope,
        keyless[0],
        bundle,
        identities=[Identity(ISSUER, ALICE)],
        trusted_root=root.read_bytes(),
    )
    assert signer.identity == Identity(ISSUER, ALICE)
    found, notes = identity_signers(
        envelope,
        lambda d: ledger.store.get(d) if ledger.store.exists(d) else None,
        [Identity(ISSUER, ALICE), Identity(ISSUER, "bob@example.com")],
        trusted_root=root.read_bytes(),
    )
    assert found == {Identity(ISSUER, ALICE)} and notes == ()
    # Another identity counts for nothing, and says why.
    found, notes = identity_signers(
        envelope,
        lambda d: ledger.store.get(d) if ledger.store.exists(d) else None,
        [Identity(ISSUER, "bob@example.com")],
        trusted_root=root.read_bytes(),
    )
    assert found == frozenset() and "alice@example.com" in notes[0]

    # The key signature still verifies as before, the keyless one is ignored by keys.
    r = runner.invoke(main, ["--ledger", str(home), "log", "verify"])
    assert r.exit_code == 0, r.output

    # Exported for other tools, the keyless signature is its stored bundle, as it is.
    out = tmp_path / "keyless.sigstore.json"
    digest = r_attest.stdout.strip().splitlines()[-1]
    r = runner.invoke(main, ["--ledger", str(home), "export", digest, "--format", "sigstore",
                             "--out", str(out), "--key", keyless[0].keyid[:12]])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert (
        "signature by alice@example.com (issuer https://oidc.test.invalid, keyless) "
        "(its stored keyless bundle)" in r.stderr
    )
    assert out.read_bytes() == bundle

    # Keyless alone: the record's only signer is the bundle.
    (tmp_path / "alone.txt").write_text("alone")
    r = runner.invoke(
        main, ["--ledger", str(home), "attest", str(tmp_path / "alone.txt"), "--sigstore"]
    )
    assert r.exit_code == 0, r.output
    ledger = Ledger.open(home)
    entry = LogEntry.from_bytes(ledger.log.entry(ledger.log.size - 1))
    (only,) = Envelope.from_bytes(ledger.store.get(entry.envelope)).signatures
    assert entry.signers == (only.keyid,) and ledger.store.exists("sha256:" + only.keyid)


def test_attest_sigstore_without_a_token_changes_nothing(
    runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trajledger import Ledger

    home = tmp_path / "ledger"
    _ledger(runner, home)
    _no_ambient_credential(monkeypatch)
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    before = Ledger.open(home).log.tree_state()
    (tmp_path / "f.txt").write_text("x")
    r = runner.invoke(
        main, ["--ledger", str(home), "attest", str(tmp_path / "f.txt"), "--sigstore"]
    )
    assert r.exit_code == 3, r.output
    assert r.stderr.strip().splitlines()[-1] == (
        "FAIL: keyless signing needs an OIDC identity token: set SIGSTORE_ID_TOKEN, or run where "
        "sigstore detects an ambient one (GitHub Actions with 'permissions: id-token: write', "
        "GitLab CI, Buildkite, CircleCI, Google Cloud)"
    )
    assert Ledger.open(home).log.tree_state() == before


def test_identities_count_toward_role_thresholds_like_keys(
    sigstore_instance: Any,
    trust_files: tuple[Path, Path],
    runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A producer role of one key and one identity, threshold 2: a record signed by the key and
    keylessly by the identity verifies in the lineage; the key alone, or another identity, is
    one short and says so."""
    from trajledger import Ledger

    config, root = trust_files
    home = tmp_path / "ledger"
    _ledger(runner, home)
    monkeypatch.setenv(TRUST_CONFIG_ENV, str(config))
    vkey = Ledger.open(home).log.vkey

    def policy(subject: str) -> Path:
        path = tmp_path / f"policy-{subject.split('@')[0]}.toml"
        path.write_text(
            f'name = "keyless"\nsigstore_trusted_root = "{root}"\n'
            "[roles.producer]\n"
            f'keys = ["{home / "keys" / "vendor.pub"}"]\n'
            f'identities = [{{issuer = "{ISSUER}", subject = "{subject}"}}]\n'
            "threshold = 2\n"
            f'[roles.log]\nvkeys = ["{vkey}"]\n'
        )
        return path

    def attest(name: str, *extra: str) -> str:
        (tmp_path / name).write_text(name)
        r = runner.invoke(main, ["--ledger", str(home), "attest", str(tmp_path / name),
                                 "--key", "vendor", *extra])  # fmt: skip
        assert r.exit_code == 0, r.output
        return str(r.stdout.strip().splitlines()[-1])

    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    both = attest("both.txt", "--sigstore")
    key_only = attest("key-only.txt")

    def verify(digest: str, who: str) -> Any:
        return runner.invoke(
            main, ["--ledger", str(home), "verify", digest, "--policy", str(policy(who))]
        )

    r = verify(both, ALICE)
    assert r.exit_code == 0, r.output
    r = verify(key_only, ALICE)
    assert r.exit_code == 1
    assert ": too few signatures by trusted keys: 1 of 2 required signature(s) verified" in r.stderr
    r = verify(both, "bob@example.com")
    assert r.exit_code == 1
    assert "alice@example.com" in r.stderr  # the keyless signature's identity, not trusted


def test_a_revoked_identity_counts_for_nothing_from_its_compromise_on(
    sigstore_instance: Any,
    trust_files: tuple[Path, Path],
    runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """revoked_identity: a record an identity signed keylessly under policy 1 verifies; policy
    2 drops the identity and revokes it from that record's index on, and the record fails,
    naming the revocation; policy 3 moves the compromise after the record, and it verifies
    again (what the identity signed before its compromise stays valid)."""
    from trajledger import Ledger

    home = tmp_path / "ledger"
    ok, policy = _keyless_ledger(runner, home, trust_files, sigstore_instance, monkeypatch)

    policy(1, f'identities = [{{issuer = "{ISSUER}", subject = "{ALICE}"}}]')
    (tmp_path / "f.txt").write_text("signed by alice")
    digest = ok("attest", str(tmp_path / "f.txt"), "--sigstore").stdout.strip().splitlines()[-1]
    index = Ledger.open(home).log.find_subject(digest)[0]
    ok("verify", digest)

    def revoked(since: int) -> str:
        return (f'[[revoked_identities]]\nissuer = "{ISSUER}"\nsubject = "{ALICE}"\n'
                f'compromised_since = {since}\nreason = "token leaked"\n')

    vendor = f'keys = ["{home / "keys" / "vendor.pub"}"]'
    policy(2, vendor, revoked(index))
    r = runner.invoke(main, ["--ledger", str(home), "verify", digest])
    assert r.exit_code == 1, r.output
    assert (f"identity {ALICE} ({ISSUER}) revoked by policy 'keyless' serial 2: compromised "
            f"since log index {index}: token leaked") in r.stderr
    policy(3, vendor, revoked(index + 1))
    ok("verify", digest)
    assert (f"  revoked   {ISSUER} {ALICE}: compromised since log index {index + 1}: token "
            "leaked") in ok("policy", "show").stdout
    # A successor cannot drop the revocation.
    path = tmp_path / "policy-4.toml"
    path.write_text((tmp_path / "policy-3.toml").read_text().replace("serial = 3", "serial = 4")
                    .replace(revoked(index + 1), ""))
    r = runner.invoke(main, ["--ledger", str(home), "policy", "set", str(path), "--key", "a",
                             "--key", "b", "--yes"])  # fmt: skip
    assert r.exit_code == 1 and "a revoked identity stays revoked" in r.stderr, r.output


def test_a_revoked_identity_is_judged_by_the_time_sigstore_verified_too(
    sigstore_instance: Any,
    trust_files: tuple[Path, Path],
    runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """revoked_identities with a time: a log operator who backdates an entry does not move a
    keyless signature before the compromise. The record is logged (backdated) in 2020, signed
    keylessly now (Rekor's integrated time, bound by its promise, which sigstore verified):
    revoked from an hour ago, its signature counts for nothing and the failure names the
    revocation and the verified time; revoked from tomorrow (after both times), it counts."""
    from datetime import UTC, datetime, timedelta

    import trajledger.ledger.log.writer as writer
    from trajledger import Ledger

    home = tmp_path / "ledger"
    ok, policy = _keyless_ledger(runner, home, trust_files, sigstore_instance, monkeypatch)

    policy(1, f'identities = [{{issuer = "{ISSUER}", subject = "{ALICE}"}}]')
    (tmp_path / "f.txt").write_text("signed by alice")
    with monkeypatch.context() as m:  # the log's operator backdates the entry
        m.setattr(writer, "_now", lambda: "2020-01-01T00:00:00Z")
        digest = ok("attest", str(tmp_path / "f.txt"), "--sigstore").stdout.strip().splitlines()[-1]
    ledger = Ledger.open(home)
    index = ledger.log.find_subject(digest)[0]
    assert LogEntry.from_bytes(ledger.log.entry(index)).time == "2020-01-01T00:00:00Z"
    ok("verify", digest)

    def revoked(since: datetime) -> str:
        return (f'[[revoked_identities]]\nissuer = "{ISSUER}"\nsubject = "{ALICE}"\n'
                f'compromised_since = "{since:%Y-%m-%dT%H:%M:%SZ}"\nreason = "token leaked"\n')

    now = datetime.now(UTC)
    vendor = f'keys = ["{home / "keys" / "vendor.pub"}"]'
    policy(2, vendor, revoked(now - timedelta(hours=1)))
    r = runner.invoke(main, ["--ledger", str(home), "verify", digest])
    assert r.exit_code == 1, r.output
    assert (f"signed by identity {ALICE} (issuer {ISSUER}) at {now:%Y-%m-%d}T") in r.stderr
    assert (f"(Rekor's integrated time), which the policy revokes: compromised since "
            f"{now - timedelta(hours=1):%Y-%m-%dT%H:%M:%SZ}: token leaked") in r.stderr
    assert "signed by 0 of 1 required identities" in r.stderr
    # Either verified time after the compromise is enough (here a TSA's before it, Rekor's after).
    import trajledger.verify.sigstore_adapter as adapter

    read = adapter._verified_times
    with monkeypatch.context() as m:
        m.setattr(adapter, "_verified_times", lambda *a: (("2020-01-01T00:00:00Z", "a TSA"),
                                                          *read(*a)))
        r = runner.invoke(main, ["--ledger", str(home), "verify", digest])
    assert r.exit_code == 1 and "(Rekor's integrated time), which the policy revokes" in r.stderr
    # Both times before the compromise: the signature counts.
    policy(3, vendor, revoked(now + timedelta(days=1)))
    ok("verify", digest)


def approvable_ledger(
    runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trust_files: tuple[Path, Path]
) -> Callable[..., Any]:
    """A ledger at ``tmp_path / "ledger"`` whose policy names producer BOB and approver ALICE
    (identities) next to keys ``vendor`` and ``a``, holding dataset ``d@1`` (one batch);
    returns ``run(*args, code=0)``, a command that must exit ``code``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trajledger import Ledger

    config, root = trust_files
    home = tmp_path / "ledger"
    _ledger(runner, home)
    monkeypatch.setenv(TRUST_CONFIG_ENV, str(config))

    def run(*args: str, code: int = 0) -> Any:
        r = runner.invoke(main, ["--ledger", str(home), *args])
        assert r.exit_code == code, r.output
        return r

    run("key", "new", "a", "--no-encrypt")
    vkey, keys = Ledger.open(home).log.vkey, home / "keys"
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f'name = "keyless"\nsigstore_trusted_root = "{root}"\n'
        'accepted_licences = ["CC-BY-4.0"]\n'
        f'[roles.producer]\nkeys = ["{keys / "vendor.pub"}"]\n'
        f'identities = [{{issuer = "{ISSUER}", subject = "bob@example.com"}}]\n'
        f'[roles.approver]\nkeys = ["{keys / "a.pub"}"]\n'
        f'identities = [{{issuer = "{ISSUER}", subject = "{ALICE}"}}]\n'
        f'[roles.log]\nvkeys = ["{vkey}"]\n'
    )
    run("policy", "set", str(policy), "--key", "a", "--yes")
    run("env", "register", "grid", "--version", "1", "--source", "sim", "--key", "vendor")
    steps = tmp_path / "steps.parquet"
    pq.write_table(pa.table({"episode_id": ["e0", "e0"], "step": [0, 1],
                             "obs": [[0.0], [1.0]], "action": [[0.0], [1.0]],
                             "reward": [0.0, 1.0], "terminated": [False, True],
                             "truncated": [False, False]}), steps)  # fmt: skip
    batch = run("record", str(steps), "--env", "grid@1", "--policy", "p", "--name", "b",
                "--licence", "CC-BY-4.0", "--key", "vendor").stdout.strip().splitlines()[-1]
    run("dataset", "create", "d", "--version", "1", "--split", "train", "--batch", batch,
        "--key", "vendor")  # fmt: skip
    return run


def test_a_keyless_approval_is_withdrawn_by_an_approver_identity_not_a_producer_one(
    runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigstore_instance: Any,
    trust_files: tuple[Path, Path],
) -> None:
    """Withdrawals (withdraw26) with keyless signatures (left28): an approval ALICE, an
    approver identity, signed keylessly counts; a withdrawal BOB, a producer identity, signed
    keylessly is shown and ignored (a producer may not withdraw an approval); one ALICE signed
    keylessly makes the approval count for nothing. The CLI signs withdrawals with keys only
    (``revoke --key``): these are made through the library, as another tool would."""

    from trajledger import Ledger
    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.record import record_statement
    from trajledger.verify import predicates
    from trajledger.verify.predicates import Approval, Revocation

    config, _ = trust_files
    home = tmp_path / "ledger"
    run = approvable_ledger(runner, tmp_path, monkeypatch, trust_files)

    def keyless(who: str) -> KeylessSigner:
        return KeylessSigner(sigstore_instance.token(who), trust_config=config)

    ledger = Ledger.open(home)
    dataset = Catalog(ledger).resolve("d@1").digest
    approval = record_statement(
        ledger, "d@1", dataset, predicates.APPROVAL,
        Approval("train", "2026-01-01T00:00:00Z", "2999-01-01T00:00:00Z").to_predicate(),
        [keyless(ALICE)])  # fmt: skip
    run("admit", "d@1")  # ALICE's keyless approval counts: 1 of 1

    def withdrawal(who: str) -> int:
        return record_statement(
            ledger, f"approval at log index {approval.index}", approval.envelope_digest,
            predicates.REVOCATION,
            Revocation("approved the wrong version", "2026-01-02T00:00:00Z").to_predicate(),
            [keyless(who)]).index  # fmt: skip

    by_bob = withdrawal("bob@example.com")
    r = run("admit", "d@1")  # a producer identity's withdrawal counts for nothing
    assert "approvals — 1 of 1 required approver(s) for 'train'" in r.output, r.output
    by_alice = withdrawal(ALICE)
    r = run("admit", "d@1", code=1)
    assert (f"approval {approval.index} does not count: withdrawn by revocation record "
            f"{by_alice} (approved the wrong version)") in r.output, r.output
    assert by_bob < by_alice


def test_a_keyless_approval_and_its_withdrawal_through_the_cli(
    runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigstore_instance: Any,
    trust_files: tuple[Path, Path],
) -> None:
    """``approve NAME@V --sigstore`` and ``revoke NAME@V --approval --sigstore`` (kless31
    finding 2; docs/SECURITY.md "Review of 2026-12-05, sixteenth round (kless31)"): the CLI
    signs an approval and its withdrawal keylessly, as the test above does through the library;
    verifiers judge the withdrawal's identity as `verify.retractions.authority` does."""
    from trajledger import Ledger

    config, _ = trust_files
    home = tmp_path / "ledger"
    run = approvable_ledger(runner, tmp_path, monkeypatch, trust_files)

    # Usage errors: exit 2, nothing signed.
    size = Ledger.open(home).log.size
    for args in (["approve", "d@1"], ["approve", "d@1", "--key", "a", "--sigstore"],
                 ["revoke", "d@1", "--approval", "--sigstore", "--by", "ab", "--reason", "x"],
                 ["revoke", "d@1", "--sigstore", "--reason", "x"]):
        r = run(*args, code=2)
        assert "give --key NAME or --sigstore" in r.output or "--sigstore is for" in r.output \
            or "--by names a key's approval" in r.output \
            or "--sigstore withdraws an approval: give its digest" in r.output, r.output
    # Without the sigstore extra: exit 3, a line saying what to install, nothing recorded.
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    monkeypatch.setattr("trajledger.verify.sigstore_adapter.sigstore_available", lambda: False)
    r = run("approve", "d@1", "--sigstore", code=3)
    assert "pip install 'trajledger[sigstore]'" in r.output, r.output
    assert Ledger.open(home).log.size == size
    monkeypatch.undo()
    monkeypatch.setenv(TRUST_CONFIG_ENV, str(config))

    # ALICE, an approver identity, approves keylessly: the approval counts.
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    r = run("approve", "d@1", "--sigstore")
    assert f"by keyless signature by {ALICE} (issuer {ISSUER})" in r.stderr, r.stderr
    approval = int(r.stderr.rsplit("(log index ", 1)[1].split(")")[0])
    run("admit", "d@1")
    # BOB, a producer identity, may not withdraw it: refused before signing (left32 finding 2;
    # it was recorded and counted for nothing before).
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(BOB))
    size, leaves = Ledger.open(home).log.size, len(sigstore_instance.leaves)
    r = run("revoke", "d@1", "--approval", "--sigstore", "--reason", "not mine to withdraw",
            code=1)
    assert (f"FAIL: approval at log index {approval}: the Sigstore identity {BOB} (issuer "
            f"{ISSUER}) is no approver identity of policy 'keyless' serial 1 and did not sign "
            f"it: only an approver (identities: {ALICE} ({ISSUER})), or its signer while the "
            f"policy names it ({ALICE} ({ISSUER})), may withdraw an approval (a producer revokes "
            "its data instead); nothing was signed") in r.stderr.splitlines(), r.stderr
    assert Ledger.open(home).log.size == size and len(sigstore_instance.leaves) == leaves
    r = run("admit", "d@1")
    assert "approvals — 1 of 1 required approver(s) for 'train'" in r.output, r.output
    # ALICE withdraws her own: the approval counts for nothing.
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    r = run("revoke", "d@1", "--approval", "--sigstore", "--reason", "approved too early")
    by_alice = int(r.stderr.rsplit("(log index ", 1)[1].split(")")[0])
    r = run("admit", "d@1", code=1)
    assert (f"approval {approval} does not count: withdrawn by revocation record {by_alice} "
            "(approved too early)") in r.output, r.output


def test_a_keyless_signer_that_may_not_approve_or_withdraw_is_refused_before_signing(
    runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigstore_instance: Any,
    trust_files: tuple[Path, Path],
) -> None:
    """left32 finding 2: ``approve --sigstore`` by an identity the policy names as no approver,
    and ``revoke --approval --sigstore`` by one that is neither an approver nor the approval's
    signer, exit 1 before anything is signed (no Rekor entry, no certificate asked for, nothing
    logged), as a key that may not is refused; the approval's own signer (its bundle verified)
    still withdraws it, as verifiers allow (`verify.retractions.authority`)."""
    from trajledger import Ledger
    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.record import record_statement
    from trajledger.verify import predicates
    from trajledger.verify.predicates import Approval

    config, _ = trust_files
    home = tmp_path / "ledger"
    run = approvable_ledger(runner, tmp_path, monkeypatch, trust_files)
    carol = "carol@example.com"

    def unchanged() -> Callable[[], bool]:
        size, leaves = Ledger.open(home).log.size, len(sigstore_instance.leaves)
        return lambda: (Ledger.open(home).log.size, len(sigstore_instance.leaves)) == (
            size, leaves)

    # BOB, a producer identity, may not approve (a producer key may not either).
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(BOB))
    same = unchanged()
    r = run("approve", "d@1", "--sigstore", code=1)
    assert (f"FAIL: approve d@1: the Sigstore identity {BOB} (issuer {ISSUER}) is no approver "
            f"identity of policy 'keyless' serial 1 (its approver identities: {ALICE} "
            f"({ISSUER})): sign with an approver's token or key; nothing was signed"
            ) in r.stderr.splitlines(), r.stderr
    assert same()
    # CAROL's keyless approval, made by another tool (it counts for nothing: no approver).
    ledger = Ledger.open(home)
    dataset = Catalog(ledger).resolve("d@1").digest
    carols = record_statement(
        ledger, "d@1", dataset, predicates.APPROVAL,
        Approval("train", "2026-01-01T00:00:00Z", "2999-01-01T00:00:00Z").to_predicate(),
        [KeylessSigner(sigstore_instance.token(carol), trust_config=config)])  # fmt: skip
    # Neither BOB nor CAROL may withdraw it: no approver; CAROL signed it, but as no identity
    # of the policy (verifiers would count her withdrawal for nothing). Named by its digest;
    # '--approval' does not take it (it counts for nothing: left33 finding 1).
    for who in (BOB, carol):
        monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(who))
        same = unchanged()
        r = run("revoke", carols.envelope_digest, "--sigstore", "--reason", "x", code=1)
        assert (f"FAIL: approval at log index {approval_index(home, carol)}: the Sigstore "
                f"identity {who} (issuer {ISSUER}) is no approver identity of policy 'keyless' "
                f"serial 1 and did not sign it: only an approver (identities: {ALICE} "
                f"({ISSUER})), or its signer while the policy names it (none), may withdraw an "
                "approval (a producer revokes its data instead); nothing was signed"
                ) in r.stderr.splitlines(), r.stderr
        r = run("revoke", "d@1", "--approval", "--sigstore", "--reason", "x", code=1)
        assert "FAIL: revoke d@1 --approval: no approval of it is in force here" in r.stderr
        assert same()
    # ALICE approves; a policy of serial 2 makes her a producer: she may still withdraw her
    # own approval (its bundle verified), and BOB still may not.
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    run("approve", "d@1", "--sigstore")
    alice_a_producer(run, tmp_path)
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(BOB))
    r = run("revoke", "d@1", "--approval", "--sigstore", "--reason", "x", code=1)
    assert (f"(identities: none), or its signer while the policy names it ({ALICE} ({ISSUER})), "
            "may withdraw") in r.stderr, r.stderr
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    r = run("revoke", "d@1", "--approval", "--sigstore", "--reason", "too early")
    assert f"withdrawn by keyless signature by {ALICE}" in r.stderr, r.stderr


def test_an_identity_inside_an_approvers_name_is_refused_before_signing(
    runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigstore_instance: Any,
    trust_files: tuple[Path, Path],
) -> None:
    """review rev30, finding 2: the check before signing took a token whose claim appeared
    anywhere in an approver's subject, so ``ice@example.com`` and ``alice@example.co`` (another
    domain) approved ``d@1`` as ALICE would: a certificate, a Rekor entry, a record logged and
    ``OK: d@1 approved``, counting for nothing. Now exit 1, nothing signed; ALICE still
    approves and withdraws by her identity."""
    from trajledger import Ledger

    run = approvable_ledger(runner, tmp_path, monkeypatch, trust_files)
    home = tmp_path / "ledger"
    for who in ("ice@example.com", "alice@example.co"):
        monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(who))
        size, leaves = Ledger.open(home).log.size, len(sigstore_instance.leaves)
        r = run("approve", "d@1", "--sigstore", code=1)
        assert (f"FAIL: approve d@1: the Sigstore identity {who} (issuer {ISSUER}) is no "
                "approver identity of policy 'keyless' serial 1") in r.stderr, r.stderr
        assert (Ledger.open(home).log.size, len(sigstore_instance.leaves)) == (size, leaves)
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    run("approve", "d@1", "--sigstore")
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token("ice@example.com"))
    run("revoke", "d@1", "--approval", "--sigstore", "--reason", "x", code=1)
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    run("revoke", "d@1", "--approval", "--sigstore", "--by-identity", ALICE, "--reason", "x")


def test_an_approval_withdrawn_already_is_not_withdrawn_again_by_its_digest(
    runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigstore_instance: Any,
    trust_files: tuple[Path, Path],
) -> None:
    """rev30's Left: ``revoke DIGEST --sigstore`` of an approval withdrawn already signed a
    certificate and a public Rekor entry and logged a second withdrawal (exit 0). Now exit 1
    before the token is used, naming the earlier withdrawal; nothing signed or logged."""
    from trajledger import Ledger

    run = approvable_ledger(runner, tmp_path, monkeypatch, trust_files)
    home = tmp_path / "ledger"
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    run("approve", "d@1", "--sigstore")
    index = approval_index(home, ALICE)
    ledger = Ledger.open(home)
    entry = LogEntry.from_bytes(ledger.log.entry(index))
    ledger.close()
    run("revoke", entry.envelope, "--sigstore", "--reason", "too early")
    size, leaves = Ledger.open(home).log.size, len(sigstore_instance.leaves)
    r = run("revoke", entry.envelope, "--sigstore", "--reason", "again", code=1)
    assert r.stderr.startswith(f"FAIL: revoke {entry.envelope}: the approval at log index "
                               f"{index} is withdrawn already (withdrawn by revocation record "
                               f"{size - 1} (too early)); nothing was signed"), r.stderr
    assert (Ledger.open(home).log.size, len(sigstore_instance.leaves)) == (size, leaves)


def alice_a_producer(run: Callable[..., Any], tmp_path: Path) -> None:
    """Record a policy of serial 2 (`approvable_ledger`'s, its producer identity ALICE in
    BOB's place, and no approver identity): ALICE is a producer."""
    home, policy = tmp_path / "ledger", tmp_path / "policy.toml"
    policy.write_text(policy.read_text().replace('name = "keyless"\n', 'name = "keyless"\n'
                                                 'serial = 2\n').replace(
        f'subject = "{BOB}"', f'subject = "{ALICE}"').replace(
        f'[roles.approver]\nkeys = ["{home / "keys" / "a.pub"}"]\nidentities = '
        f'[{{issuer = "{ISSUER}", subject = "{ALICE}"}}]\n',
        f'[roles.approver]\nkeys = ["{home / "keys" / "a.pub"}"]\n'))
    run("policy", "set", str(policy), "--key", "a", "--yes")


def approval_index(home: Path, signer: str) -> int:
    """The log index of the approval the keyless identity ``signer`` signed."""
    from trajledger import Ledger
    from trajledger.verify.sigstore_adapter import SigstoreBundle, certificate_identity

    ledger = Ledger.open(home)
    for i in range(ledger.log.size):
        entry = LogEntry.from_bytes(ledger.log.entry(i))
        if entry.kind != "approval":
            continue
        env = Envelope.from_bytes(ledger.store.get(entry.envelope))
        for sig in env.signatures:
            if ledger.store.exists("sha256:" + sig.keyid):
                bundle = SigstoreBundle.from_bytes(ledger.store.get("sha256:" + sig.keyid))
                if certificate_identity(bundle.certificates[0])[0] == signer:
                    return i
    raise AssertionError(f"no approval signed by {signer}")


def test_by_identity_names_the_keyless_approval_to_withdraw(
    runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigstore_instance: Any,
    trust_files: tuple[Path, Path],
) -> None:
    """``revoke NAME@V --approval --by-identity SUBJECT``: with two approvals in force (key
    ``a``'s and ALICE's keyless one), ``--sigstore`` alone cannot tell them apart (exit 1, and
    the line says how to name one); the identity names ALICE's, whose bundle verifies as
    hers (kless31's Left; left32)."""
    run = approvable_ledger(runner, tmp_path, monkeypatch, trust_files)
    for args in (["revoke", "d@1", "--by-identity", ALICE, "--key", "a", "--reason", "x"],
                 ["revoke", "d@1", "--approval", "--by", "ab", "--by-identity", ALICE, "--key",
                  "a", "--reason", "x"]):
        r = run(*args, code=2)
        assert "--by-identity" in r.output, r.output
    by_key = run("approve", "d@1", "--key", "a").stderr
    key_index = int(by_key.rsplit("(log index ", 1)[1].split(")")[0])
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    r = run("approve", "d@1", "--sigstore")
    alice_index = int(r.stderr.rsplit("(log index ", 1)[1].split(")")[0])
    r = run("revoke", "d@1", "--approval", "--sigstore", "--reason", "too early", code=1)
    assert "2 approvals of it could be meant" in r.stderr and \
        "name one with --by KEYID (--by-identity SUBJECT: a keyless one's)" in r.stderr, r.stderr
    r = run("revoke", "d@1", "--approval", "--sigstore", "--by-identity", BOB, "--reason", "x",
            code=1)
    assert f"no approval of it signed by {BOB} is in force here" in r.stderr, r.stderr
    r = run("revoke", "d@1", "--approval", "--sigstore", "--by-identity", ALICE, "--reason",
            "too early")
    assert f"d@1: approval at log index {alice_index} withdrawn by keyless" in r.stderr, r.stderr
    # Key a's approval is still in force; the key withdraws it the same way.
    r = run("admit", "d@1")
    assert "approvals — 1 of 1 required approver(s) for 'train'" in r.output, r.output
    r = run("revoke", "d@1", "--approval", "--key", "a", "--reason", "too early")
    assert f"d@1: approval at log index {key_index} withdrawn" in r.stderr, r.stderr
    run("admit", "d@1", code=1)


def test_one_of_two_keyless_approvals_of_one_identity_is_withdrawn_by_its_digest(
    runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigstore_instance: Any,
    trust_files: tuple[Path, Path],
) -> None:
    """``revoke APPROVAL-DIGEST --sigstore`` (the lead, seventeenth round; rev29 finding 8,
    kless31's Left): ALICE approves ``d@1`` keylessly twice; ``--by-identity`` cannot tell her
    two approvals apart, and ``revoke DIGEST`` took keys only (exit 2), so a keyless approver
    could withdraw neither. The digest names one: withdrawn, the other still in force; BOB, a
    producer identity, is refused before signing as with ``--approval``; an artifact's digest
    with ``--sigstore`` stays a usage error."""
    run = approvable_ledger(runner, tmp_path, monkeypatch, trust_files)
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    first, second = (run("approve", "d@1", "--sigstore", "--expires", e).stdout.split()[-1]
                     for e in ("30d", "60d"))
    assert first != second and first.startswith("sha256:"), (first, second)
    r = run("revoke", "d@1", "--approval", "--sigstore", "--by-identity", ALICE, "--reason",
            "x", code=1)
    assert "2 approvals of it could be meant" in r.stderr, r.stderr
    r = run("revoke", "d@1", "--sigstore", "--reason", "x", code=2)
    assert "--sigstore withdraws an approval: give its digest" in r.output, r.output
    r = run("revoke", first, "--sigstore", "--reason", "approved too early")
    assert f"{first}: approval withdrawn by keyless signature by {ALICE}" in r.stderr, r.stderr
    r = run("admit", "d@1")  # the second approval counts still
    assert "approvals — 1 of 1 required approver(s) for 'train'" in r.output, r.output
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(BOB))
    r = run("revoke", second, "--sigstore", "--reason", "not mine", code=1)
    assert f"the Sigstore identity {BOB} (issuer {ISSUER}) is no approver identity" in r.stderr, \
        r.stderr
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    run("revoke", second, "--sigstore", "--reason", "approved too early")
    run("admit", "d@1", code=1)


def test_approvals_that_count_for_nothing_do_not_block_a_keyless_withdrawal(
    runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigstore_instance: Any,
    trust_files: tuple[Path, Path],
) -> None:
    """Review left33, finding 1 (rev29 finding 8): keyless approvals by BOB (a producer
    identity) and CAROL (in no role), made by another tool, count for nothing, yet were
    candidates of ``revoke d@1 --approval --sigstore``: ALICE could not withdraw her one
    approval in force (exit 1, ``3 approvals of it could be meant``), and ``--by`` is a key's.
    Now the candidates are those that count; and a signer that is no approver (ALICE, once a
    policy of serial 2 makes her a producer) has only its own as candidates, beside key
    ``a``'s approval in force."""
    from trajledger import Ledger
    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.record import record_statement
    from trajledger.verify import predicates
    from trajledger.verify.predicates import Approval

    config, _ = trust_files
    home = tmp_path / "ledger"
    run = approvable_ledger(runner, tmp_path, monkeypatch, trust_files)
    ledger = Ledger.open(home)
    dataset = Catalog(ledger).resolve("d@1").digest
    for who in (BOB, "carol@example.com"):
        record_statement(
            ledger, "d@1", dataset, predicates.APPROVAL,
            Approval("train", "2026-01-01T00:00:00Z", "2999-01-01T00:00:00Z").to_predicate(),
            [KeylessSigner(sigstore_instance.token(who), trust_config=config)])  # fmt: skip
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    first = int(run("approve", "d@1", "--sigstore").stderr.rsplit("(log index ", 1)[1]
                .split(")")[0])
    r = run("revoke", "d@1", "--approval", "--sigstore", "--reason", "approved too early")
    assert f"d@1: approval at log index {first} withdrawn by keyless" in r.stderr, r.stderr
    run("admit", "d@1", code=1)
    # ALICE approves again, key a too; ALICE becomes a producer: her own is her one candidate.
    second = int(run("approve", "d@1", "--sigstore", "--expires", "60d").stderr.rsplit(
        "(log index ", 1)[1].split(")")[0])  # (another statement than the first withdrawn)
    run("approve", "d@1", "--key", "a")
    alice_a_producer(run, tmp_path)
    r = run("revoke", "d@1", "--approval", "--sigstore", "--reason", "too early")
    assert f"d@1: approval at log index {second} withdrawn by keyless" in r.stderr, r.stderr
    # BOB, no approver, signed neither of key a's two (his own counts for nothing): refused,
    # nothing signed.
    run("approve", "d@1", "--key", "a", "--expires", "60d")
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(BOB))
    size, leaves = Ledger.open(home).log.size, len(sigstore_instance.leaves)
    r = run("revoke", "d@1", "--approval", "--sigstore", "--reason", "x", code=1)
    assert (f"FAIL: revoke d@1 --approval: the Sigstore identity {BOB} (issuer {ISSUER}) is no "
            "approver of policy 'keyless' serial 2 and signed none of the 2 approval(s) of it "
            "in force: only an approver may withdraw an approval, its signer its own (a "
            "producer revokes its data instead); nothing was signed") in r.stderr.splitlines(), \
        r.stderr
    assert (Ledger.open(home).log.size, len(sigstore_instance.leaves)) == (size, leaves)


def test_a_keyless_approval_withdrawn_is_not_made_again_in_the_same_second(
    runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigstore_instance: Any,
    trust_files: tuple[Path, Path],
) -> None:
    """Review left33, finding 7: ALICE approves ``d@1`` keylessly, withdraws it, and approves
    again within the same second with the same expiry and note: the same statement, which the
    withdrawal withdraws (`verify.withdrawals`), so the new approval counted for nothing while
    ``approve`` said OK (a key's is the same envelope, refused since withdraw26; a keyless
    signature is new bytes). Now refused before signing; a second later it counts."""
    import datetime as dt

    from trajledger import Ledger
    from trajledger.ledger.status import approve
    from trajledger.verify.errors import PolicyError

    config, _ = trust_files
    home = tmp_path / "ledger"
    run = approvable_ledger(runner, tmp_path, monkeypatch, trust_files)
    when = dt.datetime.now(dt.UTC).replace(microsecond=0)
    ledger = Ledger.open(home)

    def alice() -> KeylessSigner:
        return KeylessSigner(sigstore_instance.token(ALICE), trust_config=config)

    first = approve(ledger, "d@1", alice(), now=when)
    ledger.revoke(first.envelope_digest, key=alice(), reason="approved too early")
    size, leaves = ledger.log.size, len(sigstore_instance.leaves)
    with pytest.raises(PolicyError, match=rf"approve d@1: this is the approval at log index "
                       rf"{first.index}, withdrawn: .* nothing was signed$"):
        approve(ledger, "d@1", alice(), now=when)
    assert (ledger.log.size, len(sigstore_instance.leaves)) == (size, leaves)
    run("admit", "d@1", code=1)
    approve(ledger, "d@1", alice(), now=when + dt.timedelta(seconds=1))
    run("admit", "d@1")
