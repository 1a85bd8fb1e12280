"""OpenSSF model_signing interop, both ways, with the real ``model-signing`` package (test extra).

- ``trajledger export CHECKPOINT --format model-signing --key K --out DIR`` writes the files and
  ``DIR/model.sig``; model_signing's own verifier (Python API and its ``model_signing verify key``
  command) accepts it, and refuses it once a file changes. The signature is recorded in the log
  (a ``model-signature`` record about the checkpoint, valid against its schema).
- ``trajledger verify DIR --sigstore-bundle SIG --policy P`` accepts a directory signed by
  model_signing in key, certificate and keyless (Sigstore) mode, comparing every file's sha256,
  and reports the trajledger manifest digest of the same files.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

ms = pytest.importorskip("model_signing", reason="the model-signing package (test extra)")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

from trajledger import Ledger  # noqa: E402
from trajledger.runner.cli import main  # noqa: E402
from trajledger.verify import predicates  # noqa: E402
from trajledger.verify.dsse import Envelope  # noqa: E402
from trajledger.verify.log_entry import LogEntry  # noqa: E402
from trajledger.verify.statement import Statement  # noqa: E402

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
FILES = {"policy.npz": 3000, "config.json": '{"lr": 0.1}', "sub/extra.bin": 700}


class World:
    """A ledger with a P-256 trainer key and an Ed25519 one, and a checkpoint (the files of
    `FILES`) trained by the P-256 key on an approved dataset: a lineage ``verify`` accepts, as
    ``export`` requires of a plain format (review redo20)."""

    def __init__(self, root: Path, make_tree: Any) -> None:
        from trajledger.runner.rollouts import run_policy

        self.root = root
        self.home = root / "ledger"
        ledger = Ledger.init(self.home, origin="test.example/model-signing")
        self.trainer = ledger.keys.create("trainer", "ecdsa-p256", encrypt=False)
        self.trainer_ed = ledger.keys.create("trainer-ed", encrypt=False)
        self.other = ledger.keys.create("other", "ecdsa-p256", encrypt=False)
        vendor = ledger.keys.create("vendor", encrypt=False)
        approver = ledger.keys.create("approver", encrypt=False)
        for k in (self.trainer, self.trainer_ed, self.other, vendor, approver):
            (root / f"{k.name}.pub").write_bytes(k.public.to_pem())
        self.policy = root / "policy.toml"
        self.policy.write_text(
            '[roles.producer]\nkeys = ["vendor.pub"]\n[roles.approver]\nkeys = '
            '["approver.pub"]\n[roles.trainer]\nkeys = ["trainer.pub", "trainer-ed.pub"]\n'
            f'[roles.log]\nvkeys = ["{ledger.log.vkey}"]\n'
        )
        ledger.set_policy(self.policy, keys=["approver"])
        ledger.register_environment("cartpole", "1", key="vendor", gym_id="CartPole-v1")
        played = run_policy(None, "CartPole-v1", 2, 0, policy_version="random")
        batch = ledger.record_batch(played.steps, episodes=played.episodes, env="cartpole@1",
                                    policy="random", key="vendor", name="train-batch")
        ledger.create_dataset("train", "1", "train", [batch.digest], key="vendor")
        ledger.approve("train@1", key="approver")
        model = make_tree(FILES, root / "model")
        with ledger.training("train@1", key="trainer", name="cartpole-bc", version="1") as run:
            self.checkpoint = run.save(model).digest

    def run(self, runner: CliRunner, *args: str | Path) -> Any:
        return runner.invoke(main, ["--ledger", str(self.home), *map(str, args)])

    def ledger(self) -> Ledger:
        return Ledger.open(self.home)


@pytest.fixture
def world(tmp_path: Path, make_tree: Any) -> World:
    return World(tmp_path, make_tree)


def _ms_verify_key(model: Path, pub: Path) -> None:
    ms.verifying.Config().use_elliptic_key_verifier(public_key=pub).verify(
        model, model / "model.sig"
    )


def test_export_model_signing_is_accepted_by_model_signing(world: World, runner: CliRunner) -> None:
    out = world.root / "export"
    r = world.run(
        runner, "export", "cartpole-bc@1", "--format", "model-signing", "--key", "trainer",
        "--out", out, "--policy", world.policy,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines()[-1] == world.checkpoint
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == sorted(
        [*FILES, "model.sig"]
    )
    pub = world.root / "trainer.pub"
    _ms_verify_key(out, pub)  # model_signing's Python API
    cli = subprocess.run(  # and its command line, as a user would run it
        [sys.executable, "-m", "model_signing", "verify", "key", str(out),
         "--signature", str(out / "model.sig"), "--public_key", str(pub)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "Verification succeeded" in cli.stdout

    # The signature is in the log: a model-signature record about the checkpoint, by the key.
    ledger = world.ledger()
    entry = LogEntry.from_bytes(ledger.log.entry(ledger.log.size - 1))
    assert (entry.kind, entry.subject, entry.signers) == (
        "model-signature",
        world.checkpoint,
        (world.trainer.keyid,),
    )
    predicate = Statement.from_bytes(Envelope.from_bytes(ledger.store.get(entry.envelope)).payload)
    assert predicate.predicate_type == predicates.MODEL_SIGNATURE
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

    schema = json.loads((SCHEMAS / "model-signature.v1.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    assert list(Draft202012Validator(schema).iter_errors(predicate.predicate)) == []
    assert ledger.store.get(predicate.predicate["bundle"]) == (out / "model.sig").read_bytes()
    r = world.run(runner, "log", "verify")
    assert r.exit_code == 0, r.output

    # trajledger reads it back: same files, and the manifest digest is the checkpoint's.
    r = world.run(runner, "verify", out, "--sigstore-bundle", out / "model.sig",
                  "--policy", world.policy)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert f"as trajledger files: manifest {world.checkpoint}" in r.stdout
    assert "model_signing signature (key mode) by key" in r.stdout and "trainer in the policy" in (
        r.stdout
    )

    # A changed file: model_signing and trajledger both refuse, naming it.
    (out / "config.json").write_text('{"lr": 0.2}')
    with pytest.raises(ValueError, match=r"Signature mismatch: .*Hash mismatch for .*config\.json"):
        _ms_verify_key(out, pub)
    r = world.run(runner, "verify", out, "--sigstore-bundle", out / "model.sig",
                  "--policy", world.policy)  # fmt: skip
    assert r.exit_code == 1, r.output
    assert "config.json: content hashes to sha256:" in r.stderr


def test_export_model_signing_refusals_change_nothing(world: World, runner: CliRunner) -> None:
    size = world.ledger().log.size
    out = world.root / "x"

    def export(key: str, dest: Path = out) -> Any:
        return world.run(runner, "export", "cartpole-bc@1", "--format", "model-signing",
                         "--key", key, "--out", dest, "--policy", world.policy)  # fmt: skip

    r = export("trainer-ed")
    assert r.exit_code == 3, r.output
    assert r.stderr.strip() == (
        "FAIL: key trainer-ed is ed25519: model_signing's key mode takes ECDSA keys only (P-256 "
        "here), not Ed25519; create one with 'trajledger key new NAME --alg p256' and list it "
        "in the policy's trainer role"
    )
    r = export("other")
    assert r.exit_code == 1, r.output
    assert "key other (" in r.stderr and "is not a trainer key of policy 'policy'" in r.stderr
    busy = world.root / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    r = export("trainer", busy)
    assert r.exit_code == 3 and "exists and is not an empty directory" in r.stderr, r.output
    r = world.run(runner, "export", "cartpole-bc@1", "--format", "model-signing", "--out", out)
    assert r.exit_code == 2 and "needs --key" in r.output
    assert world.ledger().log.size == size
    assert not out.exists() and [p.name for p in busy.iterdir()] == ["keep.txt"]
    assert not [p for p in world.root.iterdir() if p.name.startswith(".tmp-")]


def test_export_model_signing_refuses_a_lineage_verify_refuses(
    world: World, runner: CliRunner
) -> None:
    """Review redo20, finding 1: under a policy that declares the key that signed the
    checkpoint compromised (another key holding the trainer role), ``verify`` refuses the
    checkpoint, but ``export --format model-signing --key other`` signed its files for
    model_signing, recorded the signature and exited 0. Now it refuses as verify does."""
    size = world.ledger().log.size
    policy = world.root / "compromised.toml"
    policy.write_text('[roles.trainer]\nkeys = ["other.pub"]\n'
                      f'[roles.log]\nvkeys = ["{world.ledger().log.vkey}"]\n'
                      f'[[revoked_keys]]\nkey = "{world.trainer.keyid}"\n'
                      'compromised_since = 0\nreason = "stolen"\n')
    verified = world.run(runner, "verify", "cartpole-bc@1", "--policy", policy)
    assert verified.exit_code == 1 and "compromised since log index 0: stolen" in verified.stderr
    out = world.root / "x"
    r = world.run(runner, "export", "cartpole-bc@1", "--format", "model-signing", "--key",
                  "other", "--out", out, "--policy", policy)
    assert r.exit_code == 1, r.output
    # both warn that the log records another policy 'policy' serial 1 (left37; export since
    # left38: it loads --policy outside command_policy)
    assert r.stderr == verified.stderr
    assert "WARNING: policy 'policy' serial 1: used as given" in r.stderr
    assert world.ledger().log.size == size and not out.exists()


# -- directories signed by model_signing, verified by trajledger ---------------------------------


def _key_files(root: Path, name: str) -> tuple[Path, Path, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    priv, pub = root / f"{name}.key", root / f"{name}.pub"
    priv.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pub.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return priv, pub, key


def _policy(root: Path, body: str) -> Path:
    path = root / "buyer-policy.toml"
    path.write_text(body)
    return path


def _verify(runner: CliRunner, model: Path, sig: Path, policy: Path) -> Any:
    return runner.invoke(main, ["verify", str(model), "--sigstore-bundle", str(sig),
                                "--policy", str(policy), "--json"])  # fmt: skip


def test_verify_a_model_signed_with_a_key(
    tmp_path: Path, make_tree: Any, runner: CliRunner
) -> None:
    model = make_tree(FILES, tmp_path / "model")
    (model / ".gitignore").write_text("*.tmp\n")  # ignored by model_signing, and by us
    priv, _, _ = _key_files(tmp_path, "vendor")
    sig = model / "model.sig"
    ms.signing.Config().use_elliptic_key_signer(private_key=priv).set_hashing_config(
        ms.hashing.Config().set_ignored_paths(paths=[sig])
    ).sign(model, sig)
    policy = _policy(tmp_path, '[roles.producer]\nkeys = ["vendor.pub"]\n')
    r = _verify(runner, model, sig, policy)
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert (report["format"], report["mode"], report["roles"], report["files"], report["ok"]) == (
        "model_signing",
        "key",
        ["producer"],
        3,
        True,
    )
    assert report["manifest_digest"].startswith("sha256:")

    (model / "sub" / "new.bin").write_bytes(b"x")
    (model / "policy.npz").unlink()
    r = _verify(runner, model, sig, policy)
    assert r.exit_code == 1
    report = json.loads(r.stdout)
    assert (report["missing"], report["extra"]) == (["policy.npz"], ["sub/new.bin"])
    assert "policy.npz: missing" in r.stderr and "sub/new.bin: extra file" in r.stderr

    # A key the policy does not hold: refused before any file is read.
    other = _policy(tmp_path, '[roles.producer]\nkeys = ["other.pub"]\n')
    _key_files(tmp_path, "other")
    r = _verify(runner, model, sig, other)
    assert r.exit_code == 1
    assert "none of the 1 trusted key(s)" in r.stderr


def test_files_under_the_signers_ignore_paths_are_named(
    tmp_path: Path, make_tree: Any, runner: CliRunner
) -> None:
    """model_signing leaves paths out of a signature (``.git``, ``.gitignore``... by default,
    and whatever the signer lists): a file planted there after signing (a ``.git/config``
    whose ``core.fsmonitor`` runs a command at the buyer's next ``git status``) verified as
    "files: 3 compared", exit 0, nothing saying it was there. It is still not the signature's
    business, but the report names every file it did not check (rev5)."""
    model = make_tree(FILES, tmp_path / "model")
    priv, _, _ = _key_files(tmp_path, "vendor")
    sig = tmp_path / "model.sig"
    ms.signing.Config().use_elliptic_key_signer(private_key=priv).sign(model, sig)
    policy = _policy(tmp_path, '[roles.producer]\nkeys = ["vendor.pub"]\n')
    report = json.loads(_verify(runner, model, sig, policy).stdout)
    assert (report["ok"], [n for n in report["notes"] if "ignore" in n]) == (True, [])
    (model / ".git").mkdir()
    (model / ".git" / "config").write_text("[core]\n\tfsmonitor = touch /tmp/pwned\n")
    (model / ".gitattributes").write_text("* filter=evil\n")
    r = _verify(runner, model, sig, policy)
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["ok"] and "2 file(s) under the signer's ignore paths, not checked: " \
        ".git/config, .gitattributes" in report["notes"], report["notes"]
    r = runner.invoke(main, ["verify", str(model), "--sigstore-bundle", str(sig), "--policy",
                             str(policy)])
    assert "note: 2 file(s) under the signer's ignore paths, not checked: .git/config, " \
        ".gitattributes" in r.stdout.splitlines(), r.output


def test_a_symbolic_link_in_a_signed_model_is_a_failed_verification(
    tmp_path: Path, make_tree: Any, runner: CliRunner
) -> None:
    """A link planted in a model signed without links (one to a file outside, one in place of
    a signed file) made ``verify DIR --sigstore-bundle`` exit 3, "is a symbolic link; only
    regular files are signed" (an operational error: the input could not be read), and a link
    under the signer's ignore paths refused a model model_signing verifies (sig5 finding 3).
    The directory is not what was signed: exit 1, each link named with its target, never
    followed; under the ignore paths, named in the note like any file there."""
    model = make_tree(FILES, tmp_path / "model")
    priv, _, _ = _key_files(tmp_path, "vendor")
    sig = tmp_path / "model.sig"
    ms.signing.Config().use_elliptic_key_signer(private_key=priv).sign(model, sig)
    policy = _policy(tmp_path, '[roles.producer]\nkeys = ["vendor.pub"]\n')
    (tmp_path / "outside").write_text('{"lr": 0.1}')
    (model / ".git").symlink_to(tmp_path)
    r = _verify(runner, model, sig, policy)
    assert r.exit_code == 0, r.output
    assert "1 file(s) under the signer's ignore paths, not checked: .git" in json.loads(
        r.stdout)["notes"], r.stdout
    (model / "ssh").symlink_to(tmp_path / "outside")
    (model / "config.json").unlink()
    (model / "config.json").symlink_to(tmp_path / "outside")  # the same bytes as signed
    for extra in ([], ["--json"]):
        r = runner.invoke(main, ["verify", str(model), "--sigstore-bundle", str(sig), "--policy",
                                 str(policy), *extra])  # fmt: skip
        assert r.exit_code == 1, r.output
        assert r.stderr.splitlines() == [
            f"FAIL: {model}: 2 problem(s)",
            f"FAIL: config.json: a symbolic link (to {tmp_path / 'outside'}), not followed",
            f"FAIL: ssh: a symbolic link (to {tmp_path / 'outside'}), not followed",
        ], r.stderr
    assert json.loads(r.stdout)["changed"][1] == {
        "path": "ssh", "reason": f"a symbolic link (to {tmp_path / 'outside'}), not followed"}


def test_a_name_is_compared_byte_for_byte_not_as_text(
    tmp_path: Path, make_tree: Any, runner: CliRunner
) -> None:
    """Unicode normalisation and case (sig5, found sound): a model signed with a name in
    decomposed form (NFD, as macOS writes it) and renamed to the composed form it displays as
    the same: the signed file is missing and the other extra, exit 1; two names differing only
    by case are two files, both signed, both compared (on a file system that folds case only
    one can exist, and the other is then missing)."""
    import unicodedata

    nfd, nfc = (unicodedata.normalize(f, "caf\u00e9.bin") for f in ("NFD", "NFC"))
    model = make_tree({nfd: 10, "A.bin": 20, "a.bin": 30}, tmp_path / "model")
    priv, _, _ = _key_files(tmp_path, "vendor")
    sig = tmp_path / "model.sig"
    ms.signing.Config().use_elliptic_key_signer(private_key=priv).sign(model, sig)
    policy = _policy(tmp_path, '[roles.producer]\nkeys = ["vendor.pub"]\n')
    r = _verify(runner, model, sig, policy)
    assert r.exit_code == 0 and json.loads(r.stdout)["files"] == 3, r.output
    (model / nfd).rename(model / nfc)
    r = _verify(runner, model, sig, policy)
    assert r.exit_code == 1, r.output
    report = json.loads(r.stdout)
    assert (report["missing"], report["extra"]) == ([nfd], [nfc])


def _ca(root: Path) -> tuple[Path, Path, Path]:
    """A private CA and a leaf certificate for a P-256 key (model_signing's certificate mode)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test CA (TEST ONLY)")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(1)
        .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                       critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    priv, _, key = _key_files(root, "signer")
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "model signer")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
        .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False),
                       critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    (root / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (root / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    return priv, root / "leaf.pem", root / "ca.pem"


def test_verify_a_model_signed_with_a_certificate(
    tmp_path: Path, make_tree: Any, runner: CliRunner
) -> None:
    model = make_tree(FILES, tmp_path / "model")
    priv, leaf, ca = _ca(tmp_path)
    sig = tmp_path / "model.sig"  # outside the model this time
    ms.signing.Config().use_certificate_signer(
        private_key=priv, signing_certificate=leaf, certificate_chain=[ca]
    ).sign(model, sig)
    ms.verifying.Config().use_certificate_verifier(certificate_chain=[ca]).verify(model, sig)
    # The policy pins the certificate's key (trajledger keeps no CA list).
    policy = _policy(tmp_path, '[roles.trainer]\nkeys = ["signer.pub"]\n')
    r = _verify(runner, model, sig, policy)
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert (report["mode"], report["roles"], report["ok"]) == (
        "pinned-certificate",
        ["trainer"],
        True,
    )
    assert any("policy pins the certificate's key" in n for n in report["notes"])
    _key_files(tmp_path, "else")
    r = _verify(runner, model, sig, _policy(tmp_path, '[roles.trainer]\nkeys = ["else.pub"]\n'))
    assert r.exit_code == 1
    assert "signed by a certificate whose key" in r.stderr


def test_verify_a_model_signed_keylessly(
    tmp_path: Path,
    make_tree: Any,
    runner: CliRunner,
    sigstore_instance: Any,
    trust_files: tuple[Path, Path],
) -> None:
    config, root = trust_files
    model = make_tree(FILES, tmp_path / "model")
    sig = tmp_path / "model.sig"
    ms.signing.Config().use_sigstore_signer(
        identity_token=sigstore_instance.token("lab@example.com"), trust_config=config
    ).sign(model, sig)
    ms.verifying.Config().use_sigstore_verifier(
        identity="lab@example.com", oidc_issuer="https://oidc.test.invalid", trust_config=config
    ).verify(model, sig)
    shutil.copy(root, tmp_path / "test_trusted_root.json")
    policy = _policy(
        tmp_path,
        'sigstore_trusted_root = "test_trusted_root.json"\n[roles.trainer]\nidentities = ['
        '{ issuer = "https://oidc.test.invalid", subject = "lab@example.com" }]\n',
    )
    r = _verify(runner, model, sig, policy)
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert (report["mode"], report["roles"], report["ok"]) == ("keyless", ["trainer"], True)
    assert report["signer"] == "identity lab@example.com (issuer https://oidc.test.invalid)"
    # The same signature without the policy's trusted root: the production root refuses it.
    no_root = _policy(
        tmp_path,
        '[roles.trainer]\nidentities = [{ issuer = "https://oidc.test.invalid", subject = '
        '"lab@example.com" }]\n',
    )
    r = _verify(runner, model, sig, no_root)
    assert r.exit_code == 1 and "keyless signature does not verify" in r.stderr
