"""``trajledger export REF --format sigstore``: our envelopes as Sigstore bundles v0.3.

Checked three ways: by our own verifier (``verify/sigstore_adapter``), by sigstore-js (the
``@sigstore/verify`` verifier that the npm ``sigstore`` package runs, offline, with the public
key as its only trust material), and through ``trajledger verify FILE --sigstore-bundle``.
sigstore-js is skipped (saying so) where node and npm are absent. cosign is not run here (no
binary in the test environment); docs/sigstore.md gives its command.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trajledger import Ledger
from trajledger.ledger.record import record_files
from trajledger.runner.cli import main
from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import SignatureError
from trajledger.verify.sigstore_adapter import BUNDLE_MEDIA_TYPE, verify_sigstore_bundle


class World:
    """A ledger with a files artifact signed by an Ed25519 key, and one co-signed by a P-256 key."""

    def __init__(self, root: Path, make_tree: Any) -> None:
        self.root = root
        self.home = root / "ledger"
        ledger = Ledger.init(self.home, origin="test.example/sigstore-export")
        self.ed = ledger.keys.create("vendor", encrypt=False)
        self.p256 = ledger.keys.create("cosigner", "ecdsa-p256", encrypt=False)
        for k in (self.ed, self.p256):
            (root / f"{k.name}.pub").write_bytes(k.public.to_pem())
        self.data = make_tree({"a.txt": "hello", "b/c.bin": 500}, root / "data")
        self.single = record_files(ledger, [self.data], self.ed, name="data").digest
        other = make_tree({"weights.bin": 900}, root / "other")
        self.both = record_files(ledger, [other], [self.ed, self.p256], name="cosigned").digest
        self.policy = root / "policy.toml"
        self.policy.write_text('[roles.producer]\nkeys = ["vendor.pub", "cosigner.pub"]\n')

    def run(self, runner: CliRunner, *args: str | Path) -> Any:
        return runner.invoke(main, ["--ledger", str(self.home), *map(str, args)])

    def envelope(self, digest: str) -> Envelope:
        ledger = Ledger.open(self.home)
        from trajledger.ledger.catalog import Catalog

        return Envelope.from_bytes(ledger.store.get(Catalog(ledger).resolve(digest).envelope))


@pytest.fixture
def world(tmp_path: Path, make_tree: Any) -> World:
    return World(tmp_path, make_tree)


def _hint(pub: Any) -> str:
    return base64.b64encode(hashlib.sha256(pub.spki_der).digest()).decode()


def test_export_writes_a_v03_bundle_of_our_envelope(world: World, runner: CliRunner) -> None:
    out = world.root / "data.sigstore.json"
    r = world.run(runner, "export", world.single, "--format", "sigstore", "--out", out)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == world.single
    assert "signature by vendor (no tlog entry, public-key hint)" in r.stderr
    bundle = json.loads(out.read_text())
    envelope = world.envelope(world.single)
    assert bundle == {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": _hint(world.ed.public)}, "tlogEntries": []},
        "dsseEnvelope": {
            "payload": base64.b64encode(envelope.payload).decode(),
            "payloadType": "application/vnd.in-toto+json",
            "signatures": [
                {
                    "sig": base64.b64encode(envelope.signatures[0].sig).decode(),
                    "keyid": world.ed.keyid,
                }
            ],
        },
    }
    verified = verify_sigstore_bundle(
        out.read_bytes(),
        keys=[world.ed.public],
        expected_payload=(envelope.payload_type, envelope.payload),
    )
    assert verified.mode == "key" and verified.signer.keyid == world.ed.keyid
    with pytest.raises(SignatureError, match="none of the 1 trusted key"):
        verify_sigstore_bundle(out.read_bytes(), keys=[world.p256.public], expected_payload=(
            envelope.payload_type, envelope.payload))  # fmt: skip

    # And trajledger verify reads it for the directory (the inline manifest, file by file).
    r = world.run(runner, "verify", world.data, "--sigstore-bundle", out, "--policy", world.policy)
    assert r.exit_code == 0, r.output
    assert (
        r.stderr.strip()
        == f"OK: {world.data}: 2 file(s) match, signed by key {world.ed.keyid[:16]}"
    )
    (world.data / "a.txt").write_text("changed")
    r = world.run(runner, "verify", world.data, "--sigstore-bundle", out, "--policy", world.policy)
    assert r.exit_code == 1 and "a.txt: size 7, want 5" in r.stderr, r.output


def test_several_signatures_need_key(world: World, runner: CliRunner) -> None:
    out = world.root / "both.json"
    r = world.run(runner, "export", world.both, "--format", "sigstore", "--out", out)
    assert r.exit_code == 2
    assert "has 2 signatures" in r.output and "choose with --key NAME or --key KEYID" in r.output
    assert not out.exists()
    r = world.run(runner, "export", world.both, "--format", "sigstore", "--out", out,
                  "--key", "cosigner")  # fmt: skip
    assert r.exit_code == 0, r.output
    hint = json.loads(out.read_text())["verificationMaterial"]["publicKey"]["hint"]
    assert hint == _hint(world.p256.public)
    r = world.run(runner, "export", world.both, "--format", "sigstore", "--out", out,
                  "--key", world.ed.keyid[:12])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["dsseEnvelope"]["signatures"][0]["keyid"] == world.ed.keyid
    r = world.run(runner, "export", world.both, "--format", "sigstore", "--out", out,
                  "--key", "nobody")  # fmt: skip
    assert r.exit_code == 2 and "--key nobody: names 0 of the signatures" in r.output
    r = world.run(runner, "export", world.single, "--format", "sigstore", "--out", world.root,
                  "--no-data")  # fmt: skip
    assert r.exit_code == 2
    assert "--no-data, --consistency-from and --updates-since apply to --format bundle" in r.output


@pytest.mark.parametrize("which", ["vendor", "cosigner"])
def test_sigstore_js_verifies_the_export(
    world: World, runner: CliRunner, sigstore_js_verify: Any, which: str
) -> None:
    """Ed25519 (vendor) and ECDSA P-256 (cosigner) signatures of one co-signed envelope."""
    key = world.ed if which == "vendor" else world.p256
    out = world.root / f"{which}.sigstore.json"
    r = world.run(
        runner, "export", world.both, "--format", "sigstore", "--out", out, "--key", which
    )
    assert r.exit_code == 0, r.output
    pub = world.root / f"{key.name}.pub"

    def js(bundle: Path) -> dict[str, Any]:
        result: dict[str, Any] = sigstore_js_verify(bundle, pub, _hint(key.public))
        return result

    result = js(out)
    assert result["verified"], result
    payload = base64.b64decode(json.loads(out.read_text())["dsseEnvelope"]["payload"])
    assert result["payloadSha256"] == hashlib.sha256(payload).hexdigest()
    assert result["key"] == ("ed25519" if key is world.ed else "ec")
    # One flipped bit in the payload: sigstore-js refuses it.
    tampered = json.loads(out.read_text())
    tampered["dsseEnvelope"]["payload"] = base64.b64encode(
        payload.replace(b'"_type"', b'"_typf"')
    ).decode()
    bad = world.root / "tampered.json"
    bad.write_text(json.dumps(tampered))
    result = js(bad)
    assert not result["verified"] and result["code"] == "SIGNATURE_ERROR", result


def test_a_file_signature_says_what_the_statement_signs(world: World, runner: CliRunner) -> None:
    """A statement about a file may say anything about it: a SLSA verification summary with
    ``verificationResult: FAILED`` verified as "OK: … 1 file(s) match, signed by key …" and
    the report did not say what was signed; a man in the middle could hand an auditor such a
    statement as the vendor's signature of the file. The report and its JSON name the
    predicate type; a DSSE envelope of another payloadType signs nothing (rev5)."""
    from trajledger.ledger.sigstore_export import envelope_signature_bundle
    from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE, Signature, pae

    target = world.data / "a.txt"
    vsa = "https://slsa.dev/verification_summary/v1"
    payload = json.dumps({"_type": "https://in-toto.io/Statement/v1", "subject": [
        {"name": "a.txt", "digest": {"sha256": hashlib.sha256(target.read_bytes()).hexdigest()}}],
        "predicateType": vsa, "predicate": {"verificationResult": "FAILED"}}).encode()
    for ptype in ("application/vnd.example+json", INTOTO_PAYLOAD_TYPE):
        sig = Signature(world.ed.keyid, world.ed.sign(pae(ptype, payload)))
        out = world.root / "vsa.sigstore.json"
        out.write_bytes(envelope_signature_bundle(Envelope(payload, ptype, (sig,)), sig))
        r = world.run(runner, "verify", target, "--sigstore-bundle", out, "--policy",
                      world.policy)
        if ptype != INTOTO_PAYLOAD_TYPE:
            assert r.exit_code == 1, r.output
            assert f"payloadType {ptype!r}, want {INTOTO_PAYLOAD_TYPE!r}" in r.stderr, r.output
            continue
        assert r.exit_code == 0, r.output
        assert f"signs: an in-toto statement of predicate type {vsa}" in r.stdout.splitlines()
        r = world.run(runner, "verify", target, "--sigstore-bundle", out, "--policy",
                      world.policy, "--json")
        assert json.loads(r.stdout)["predicateType"] == vsa
