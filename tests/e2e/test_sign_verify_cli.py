"""End to end: ``trajledger init / key / sign / verify`` through click's CliRunner.

Each refusal asserts the exit code (DESIGN §8: 1 verification failed, 2 usage, 3 operational,
4 internal bug), the exact stderr, and that no traceback escaped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import testkit
from click.testing import CliRunner, Result
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from trajledger.ledger.encode import envelope_bytes
from trajledger.ledger.files import collect_files, manifest_for
from trajledger.ledger.keys import KeyStore
from trajledger.ledger.signing import statement_bytes
from trajledger.runner.cli import main
from trajledger.verify import predicates
from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE, Envelope, Signature, pae
from trajledger.verify.statement import STATEMENT_TYPE

TREE = {
    "README.txt": "rollouts for the e2e test\n",
    "shards/part-0.jsonl": '{"episode_id": "0-0", "return": 1}\n',
    "shards/part-1.jsonl": '{"episode_id": "1-0", "return": 0}\n',
    "shards/nested/deep/weights.bin": 4096,
}
TREE_BYTES = sum(v if isinstance(v, int) else len(v.encode()) for v in TREE.values())


def run(runner: CliRunner, home: Path, *args: str | Path) -> Result:
    return runner.invoke(main, ["--ledger", str(home), *map(str, args)], prog_name="trajledger")


def expect(result: Result, code: int, stderr: str, stdout: str | None = None) -> None:
    """Exit code, exact stderr, and no escaped exception or traceback."""
    assert result.stderr == stderr, result.output
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    if stdout is not None:
        assert result.stdout == stdout


@dataclass
class Signed:
    home: Path
    data: Path
    envelope: Path
    pubkey: Path
    keyid: str
    digest: str

    def verify(self, runner: CliRunner, *extra: str | Path, envelope: Path | None = None,
               pubkey: Path | None = None, data: Path | None = None) -> Result:
        return run(runner, self.home, "verify", data or self.data, "--envelope",
                   envelope or self.envelope, "--pubkey", pubkey or self.pubkey, *extra)

    def resign(self, statement: bytes, payload_type: str = INTOTO_PAYLOAD_TYPE) -> Envelope:
        signer = KeyStore(self.home / "keys").signer("alice")
        sig = Signature(signer.keyid, signer.sign(pae(payload_type, statement)))
        return Envelope(statement, payload_type, (sig,))

    def write(self, name: str, content: bytes | dict[str, Any] | Envelope) -> Path:
        path = self.envelope.parent / name
        if isinstance(content, Envelope):
            content = envelope_bytes(content)
        elif isinstance(content, dict):
            content = json.dumps(content).encode()
        path.write_bytes(content)
        return path

    def envelope_json(self) -> dict[str, Any]:
        return json.loads(self.envelope.read_bytes())  # type: ignore[no-any-return]


def build_signer(home: Path) -> str:
    """A ledger (origin ``test/e2e``) with the key ``alice``, encrypted with the test
    passphrase; its key ID."""
    r = testkit.new_runner()
    env = {"TRAJLEDGER_PASSPHRASE": testkit.TEST_PASSPHRASE}
    assert r.invoke(main, ["--ledger", str(home), "init", "--origin", "test/e2e"],
                    env=env).exit_code == 0  # fmt: skip
    made = r.invoke(main, ["--ledger", str(home), "key", "new", "alice"], env=env)
    assert made.exit_code == 0, made.output
    return made.stdout.split()[2]


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[str]:
    """`build_signer`'s ledger, built once for the module (`signed` copies it per test)."""
    return testkit.build_template(tmp_path_factory.mktemp("signer"), build_signer)


@pytest.fixture
def signed(runner: CliRunner, tmp_path: Path, make_tree: Callable[..., Path],
           passphrase: str, signer: testkit.Template[str]) -> Signed:
    """A copy of the `signer` ledger made by this test's user (its home at ``tmp_path/home``),
    and `TREE` signed by alice."""
    home = testkit.copy_template(signer, tmp_path / "home")
    keyid = signer.value
    data = make_tree(TREE, tmp_path / "data")
    envelope = tmp_path / "out" / "data.dsse.json"
    envelope.parent.mkdir()
    signing = run(runner, home, "sign", data, "--key", "alice", "--out", envelope)
    assert signing.exit_code == 0, signing.output
    pubkey = tmp_path / "out" / "alice.pub"
    pubkey.write_text(run(runner, home, "key", "export", "alice").stdout)
    return Signed(home, data, envelope, pubkey, keyid, signing.stdout.strip())


# -- the full path --------------------------------------------------------------------------------


@pytest.mark.parametrize(("alg", "algorithm"), [("ed25519", "ed25519"), ("p256", "ecdsa-p256")])
def test_full_path(runner: CliRunner, tmp_path: Path, make_tree: Callable[..., Path],
                   passphrase: str, alg: str, algorithm: str) -> None:
    home = tmp_path / "home"
    r = run(runner, home, "init", "--origin", "test/e2e")
    expect(r, 0, "", f"created ledger {home} (origin test/e2e)\n")

    r = run(runner, home, "key", "new", "alice", "--alg", alg)
    keyid = KeyStore(home / "keys").public("alice").keyid
    expect(r, 0, f"OK: key alice written to {home / 'keys'}\n", f"alice {algorithm} {keyid}\n")
    priv = home / "keys" / "alice.key"
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert priv.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----\n")

    r = run(runner, home, "key", "list")
    expect(r, 0, "", f"alice\t{algorithm}\t{keyid}\tencrypted\n")

    data = make_tree(TREE, tmp_path / "data")
    env = tmp_path / "data.dsse.json"
    r = run(runner, home, "sign", data, "--key", "alice", "--out", env)
    digest = manifest_for(collect_files([data])).digest
    expect(r, 0, f"OK: 4 file(s), {TREE_BYTES} bytes signed by alice into {env}\n", digest + "\n")

    # The envelope holds an in-toto statement naming the tree and its manifest inline.
    obj = json.loads(env.read_bytes())
    assert obj["payloadType"] == INTOTO_PAYLOAD_TYPE
    assert [s["keyid"] for s in obj["signatures"]] == [keyid]
    statement = json.loads(base64.b64decode(obj["payload"]))
    assert statement["_type"] == STATEMENT_TYPE
    assert statement["predicateType"] == predicates.FILES
    assert statement["subject"] == [{"name": "data", "digest": {"sha256": digest[7:]}}]
    assert [f["path"] for f in statement["predicate"]["manifest"]["files"]] == sorted(TREE)

    pub = tmp_path / "alice.pub"
    r = run(runner, home, "key", "export", "alice")
    expect(r, 0, "")
    pub.write_text(r.stdout)
    assert r.stdout.startswith("-----BEGIN PUBLIC KEY-----\n")

    # A copy elsewhere, under another name, verifies: names are relative to the directory.
    copy = make_tree(TREE, tmp_path / "elsewhere" / "copy")
    for target in (data, copy):
        r = run(runner, home, "verify", target, "--envelope", env, "--pubkey", pub)
        expect(r, 0, f"OK: data: 4 file(s) match, signed by {keyid[:16]}\n", "")

    r = run(runner, home, "verify", data, "--envelope", env, "--pubkey", pub, "--json")
    expect(r, 0, f"OK: data: 4 file(s) match, signed by {keyid[:16]}\n")
    assert json.loads(r.stdout) == {
        "subject": "data", "signers": [keyid[:16]], "files": 4, "ok": True,
        "missing": [], "extra": [], "changed": [],
    }


def test_verify_needs_no_ledger(signed: Signed, runner: CliRunner, tmp_path: Path) -> None:
    r = run(runner, tmp_path / "no-ledger-here", "verify", signed.data, "--envelope",
            signed.envelope, "--pubkey", signed.pubkey)
    expect(r, 0, f"OK: data: 4 file(s) match, signed by {signed.keyid[:16]}\n")


def test_co_signed_threshold_two(signed: Signed, runner: CliRunner) -> None:
    r = run(runner, signed.home, "key", "new", "bob", "--alg", "p256")
    assert r.exit_code == 0, r.output
    keys = KeyStore(signed.home / "keys")
    payload = Envelope.from_bytes(signed.envelope.read_bytes()).payload
    message = pae(INTOTO_PAYLOAD_TYPE, payload)
    both = Envelope(payload, INTOTO_PAYLOAD_TYPE, tuple(
        Signature(s.keyid, s.sign(message)) for s in (keys.signer("alice"), keys.signer("bob"))
    ))
    env = signed.write("both.json", both)
    bob_pub = signed.write("bob.pub", keys.public("bob").to_pem())
    r = signed.verify(runner, "--pubkey", bob_pub, "--threshold", "2", envelope=env)
    expect(r, 0, f"OK: data: 4 file(s) match, signed by {signed.keyid[:16]}, "
                 f"{keys.public('bob').keyid[:16]}\n")
    r = signed.verify(runner, "--pubkey", bob_pub, "--threshold", "2")
    expect(r, 1, f"FAIL: envelope {signed.envelope}: too few signatures by trusted keys: "
                 "1 of 2 required signature(s) verified\n")


# -- the envelope is bad: exit 1 ------------------------------------------------------------------


def test_malformed_json_envelope(signed: Signed, runner: CliRunner) -> None:
    env = signed.write("bad.json", b'{"payload":')
    expect(signed.verify(runner, envelope=env), 1,
           f"FAIL: envelope {env}: malformed JSON at line 1 column 12: Expecting value\n")


def test_duplicate_json_keys(signed: Signed, runner: CliRunner) -> None:
    text = signed.envelope.read_bytes()
    env = signed.write("dup.json", text.replace(b'{"payload"', b'{"payload":"","payload"', 1))
    expect(signed.verify(runner, envelope=env), 1,
           f"FAIL: envelope {env}: duplicate JSON key 'payload'\n")


def test_wrong_payload_type_even_when_validly_signed(signed: Signed, runner: CliRunner) -> None:
    payload = Envelope.from_bytes(signed.envelope.read_bytes()).payload
    env = signed.write("ptype.json", signed.resign(payload, "application/json"))
    expect(signed.verify(runner, envelope=env), 1,
           f"FAIL: envelope {env}: payloadType is 'application/json', "
           "want 'application/vnd.in-toto+json'\n")


def test_payload_type_changed_without_resigning(signed: Signed, runner: CliRunner) -> None:
    obj = signed.envelope_json() | {"payloadType": "application/json"}
    env = signed.write("ptype2.json", obj)
    expect(signed.verify(runner, envelope=env), 1,
           f"FAIL: envelope {env}: invalid signature by key {signed.keyid[:16]}: "
           "0 of 1 required signature(s) verified\n")


@pytest.mark.parametrize(("field", "what"), [("payload", "payload"), ("sig", "signature 0")])
def test_bad_base64(signed: Signed, runner: CliRunner, field: str, what: str) -> None:
    obj = signed.envelope_json()
    if field == "payload":
        obj["payload"] = "!!" + obj["payload"][2:]
    else:
        obj["signatures"][0]["sig"] = "*" + obj["signatures"][0]["sig"][1:]
    env = signed.write("b64.json", obj)
    expect(signed.verify(runner, envelope=env), 1,
           f"FAIL: envelope {env}: {what}: is not valid base64\n")


def test_tampered_payload(signed: Signed, runner: CliRunner) -> None:
    obj = signed.envelope_json()
    payload = base64.b64decode(obj["payload"]).replace(b'"name":"data"', b'"name":"atad"')
    obj["payload"] = base64.b64encode(payload).decode()
    env = signed.write("tampered.json", obj)
    expect(signed.verify(runner, envelope=env), 1,
           f"FAIL: envelope {env}: invalid signature by key {signed.keyid[:16]}: "
           "0 of 1 required signature(s) verified\n")


def test_signed_by_an_untrusted_key(signed: Signed, runner: CliRunner) -> None:
    assert run(runner, signed.home, "key", "new", "mallory").exit_code == 0
    other = signed.write("mallory.pub", KeyStore(signed.home / "keys").public("mallory").to_pem())
    mallory = KeyStore(signed.home / "keys").public("mallory").keyid[:16]
    expect(signed.verify(runner, pubkey=other), 1,
           f"FAIL: envelope {signed.envelope}: no signature by a trusted key: "
           f"0 of 1 required signature(s) verified; it names signing key(s) "
           f"{signed.keyid[:16]}, not the key(s) given: {other} (ed25519, keyid {mallory}): a "
           "key file replaced, or another key of that name? Ask the signer for its public key "
           "('trajledger key export NAME' prints it), compare the keyid, and give that file "
           "with --pubkey\n")


def test_a_p256_key_of_the_signers_name_names_both_keys(signed: Signed,
                                                       runner: CliRunner) -> None:
    # out36 finding 2: alice's name, another algorithm (alice.pub swapped for a P-256 key).
    assert run(runner, signed.home, "key", "new", "alice2", "--alg", "p256").exit_code == 0
    other = signed.write("alice.pub", KeyStore(signed.home / "keys").public("alice2").to_pem())
    r = signed.verify(runner, pubkey=other)
    assert r.exit_code == 1, r.output
    assert r.stderr.count("\n") == 1 and f"it names signing key(s) {signed.keyid[:16]}, not " \
        f"the key(s) given: {other} (ecdsa-p256, keyid " in r.stderr, r.stderr  # fmt: skip


def test_predicate_type_not_allowed(signed: Signed, runner: CliRunner) -> None:
    statement = json.loads(Envelope.from_bytes(signed.envelope.read_bytes()).payload)
    subjects = [(s["name"], "sha256:" + s["digest"]["sha256"]) for s in statement["subject"]]
    payload = statement_bytes(subjects, predicates.APPROVAL, statement["predicate"])
    env = signed.write("approval.json", signed.resign(payload))
    expect(signed.verify(runner, envelope=env), 1,
           f"FAIL: envelope {env}: predicateType '{predicates.APPROVAL}' is not allowed here\n")


def test_manifest_not_bound_to_subject(signed: Signed, runner: CliRunner) -> None:
    statement = json.loads(Envelope.from_bytes(signed.envelope.read_bytes()).payload)
    other = "sha256:" + hashlib.sha256(b"another artifact").hexdigest()
    payload = statement_bytes([("data", other)], predicates.FILES, statement["predicate"])
    env = signed.write("unbound.json", signed.resign(payload))
    expect(signed.verify(runner, envelope=env), 1,
           f"FAIL: envelope {env}: manifest hashes to {signed.digest}, but the first subject "
           f"(the artifact) is {other}\n")


# -- the files differ: exit 1, one FAIL line each -------------------------------------------------


def test_changed_file_same_size(signed: Signed, runner: CliRunner) -> None:
    path = signed.data / "shards/part-0.jsonl"
    new = path.read_bytes().replace(b"1}", b"9}")
    path.write_bytes(new)
    want = manifest_for(collect_files([signed.data])).digest  # sanity: the tree did change
    assert want != signed.digest
    old = hashlib.sha256(TREE["shards/part-0.jsonl"].encode()).hexdigest()
    expect(signed.verify(runner), 1,
           f"FAIL: shards/part-0.jsonl: content hashes to sha256:{hashlib.sha256(new).hexdigest()}"
           f", want sha256:{old}\n")


def test_changed_file_size(signed: Signed, runner: CliRunner) -> None:
    with open(signed.data / "README.txt", "ab") as f:
        f.write(b"!")
    expect(signed.verify(runner), 1, "FAIL: README.txt: size 27, want 26\n")


def test_missing_file(signed: Signed, runner: CliRunner) -> None:
    (signed.data / "shards/nested/deep/weights.bin").unlink()
    expect(signed.verify(runner), 1, "FAIL: shards/nested/deep/weights.bin: missing\n")


def test_extra_file(signed: Signed, runner: CliRunner) -> None:
    (signed.data / "shards" / "part-2.jsonl").write_text("{}\n")
    expect(signed.verify(runner), 1,
           "FAIL: shards/part-2.jsonl: extra file, not in the manifest\n")


def test_missing_extra_and_changed_together(signed: Signed, runner: CliRunner) -> None:
    (signed.data / "shards/part-1.jsonl").unlink()
    (signed.data / "new.txt").write_text("n")
    (signed.data / "README.txt").write_text("x")
    r = signed.verify(runner, "--json")
    expect(r, 1, "FAIL: shards/part-1.jsonl: missing\n"
                 "FAIL: new.txt: extra file, not in the manifest\n"
                 "FAIL: README.txt: size 1, want 26\n")
    assert json.loads(r.stdout) | {"signers": []} == {
        "subject": "data", "signers": [], "files": 4, "ok": False,
        "missing": ["shards/part-1.jsonl"], "extra": ["new.txt"],
        "changed": [{"path": "README.txt", "reason": "size 1, want 26"}],
    }


# -- operational problems: exit 3 -----------------------------------------------------------------


def _pem_public(key: Any) -> bytes:
    return key.public_key().public_bytes(  # type: ignore[no-any-return]
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048), "RSA"),
        (lambda: ec.generate_private_key(ec.SECP384R1()), "ECDSA secp384r1"),
    ],
    ids=["rsa", "p384"],
)
def test_unknown_algorithm_public_key(signed: Signed, runner: CliRunner,
                                      make: Callable[[], Any], name: str) -> None:
    pub = signed.write("odd.pub", _pem_public(make()))
    expect(signed.verify(runner, pubkey=pub), 3,
           f"FAIL: public key {pub}: unsupported key algorithm {name}, "
           "want Ed25519 or ECDSA P-256\n")


def test_truncated_public_key(signed: Signed, runner: CliRunner) -> None:
    pub = signed.write("trunc.pub", signed.pubkey.read_bytes()[:60])
    r = signed.verify(runner, pubkey=pub)
    expect(r, 3, f"FAIL: public key {pub}: not a valid PEM public key "
                 "(truncated, corrupt or not PEM)\n")


def test_a_public_key_file_larger_than_a_key_is_refused_unread(signed: Signed,
                                                               runner: CliRunner) -> None:
    """rev35 finding 2: ``--pubkey`` was read whole, parsed as PEM, then split into words to
    name its form (left37's `key_forms`): 16 MiB of short lines took 770 MB, ``/dev/zero`` all
    the memory there is. At most 64 KiB and a byte are read now (a sparse file here)."""
    pub = signed.home / "big.pub"
    with pub.open("wb") as f:
        f.truncate(1 << 20)
    expect(signed.verify(runner, pubkey=pub), 3,
           f"FAIL: public key {pub}: larger than 64 KiB, so not a public key (a PEM public key "
           "is under 1 KiB): give the signer's .pub file\n")


@pytest.mark.parametrize("form", ["DER", "base64 of a DER", "OpenSSH Ed25519"])
def test_a_public_key_in_another_form_is_named_with_how_to_convert_it(
        signed: Signed, runner: CliRunner, form: str) -> None:
    """``--pubkey`` of the signer's key as DER, base64 DER or an OpenSSH line said only "not a
    valid PEM public key" (out36's Left): the form is named, with a command that converts it;
    run, that command gives the PEM, which verifies (left37; PEM alone is read: key_forms)."""
    import re
    import subprocess

    key = serialization.load_pem_public_key(signed.pubkey.read_bytes())
    der = key.public_bytes(serialization.Encoding.DER,
                           serialization.PublicFormat.SubjectPublicKeyInfo)
    content = {"DER": der, "base64 of a DER": base64.b64encode(der) + b"\n",
               "OpenSSH Ed25519": key.public_bytes(serialization.Encoding.OpenSSH,
                                                   serialization.PublicFormat.OpenSSH)
               + b" alice@laptop\n"}[form]
    pub = signed.write("alice.key.other", content)
    r = signed.verify(runner, pubkey=pub)
    assert r.exit_code == 3, r.output
    assert r.stderr.startswith(f"FAIL: public key {pub}: not a valid PEM public key (truncated, "
                               "corrupt or not PEM); it is "
                               + {"DER": "a DER", "OpenSSH Ed25519": "an OpenSSH Ed25519"}.get(
                                   form, form) + " public key: convert it with '"), r.stderr
    said = re.fullmatch(r".*convert it with '(.*)', then give (\S+)\n", r.stderr)
    assert said is not None and said[2] == f"{pub}.pem", r.stderr
    subprocess.run(["sh", "-c", said[1]], check=True, cwd=pub.parent)
    expect(signed.verify(runner, pubkey=Path(said[2])), 0,
           f"OK: data: 4 file(s) match, signed by {signed.keyid[:16]}\n")


@pytest.mark.parametrize("form", ["DER", "OpenSSH Ed25519"])
def test_a_key_stores_public_key_in_another_form_is_named_too(
        signed: Signed, runner: CliRunner, form: str) -> None:
    """``keys/NAME.pub`` in DER or OpenSSH form (put there by hand) said only "not a valid PEM
    public key" (left37's Left): ``key export NAME`` now names the form and the command, as
    ``--pubkey`` does; that command's PEM in its place is the key again (left38)."""
    import re
    import subprocess

    path = signed.home / "keys" / "alice.pub"
    key = serialization.load_pem_public_key(path.read_bytes())
    path.write_bytes(key.public_bytes(serialization.Encoding.DER,
                                      serialization.PublicFormat.SubjectPublicKeyInfo)
                     if form == "DER" else
                     key.public_bytes(serialization.Encoding.OpenSSH,
                                      serialization.PublicFormat.OpenSSH) + b" alice@laptop\n")
    r = run(runner, signed.home, "key", "export", "alice")
    assert r.exit_code == 3, r.output
    assert r.stderr.startswith(f"FAIL: key alice ({path}): not a valid PEM public key (truncated, "
                               "corrupt or not PEM); it is "
                               + {"DER": "a DER"}.get(form, "an " + form)
                               + " public key: convert it with '"), r.stderr
    said = re.fullmatch(r".*convert it with '(.*)', then give (\S+)\n", r.stderr)
    assert said is not None and said[2] == f"{path}.pem", r.stderr
    subprocess.run(["sh", "-c", said[1]], check=True, cwd=path.parent)
    Path(said[2]).replace(path)
    r = run(runner, signed.home, "key", "export", "alice")
    assert r.exit_code == 0 and r.stdout == signed.pubkey.read_text(), r.output


def test_truncated_private_key(signed: Signed, runner: CliRunner, tmp_path: Path) -> None:
    key = signed.home / "keys" / "alice.key"
    key.write_bytes(key.read_bytes()[:100])
    out = tmp_path / "never.json"
    expect(run(runner, signed.home, "sign", signed.data, "--key", "alice", "--out", out), 3,
           f"FAIL: key alice: cannot load {key}: corrupt or truncated key file\n", "")
    assert not out.exists()


def test_wrong_passphrase(signed: Signed, runner: CliRunner, tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", "guess")
    out = tmp_path / "never.json"
    expect(run(runner, signed.home, "sign", signed.data, "--key", "alice", "--out", out), 3,
           f"FAIL: key alice: cannot load {signed.home / 'keys' / 'alice.key'}: "
           "wrong passphrase or corrupt key file (the passphrase in TRAJLEDGER_PASSPHRASE)\n",
           "")
    assert not out.exists()


def test_a_wrong_passphrase_names_the_variable_it_came_from(
        signed: Signed, runner: CliRunner, tmp_path: Path, passphrase: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """hour33: a stale TRAJLEDGER_PASSPHRASE_ALICE beside the right TRAJLEDGER_PASSPHRASE said
    only "wrong passphrase": the user, who set the right one, could not tell which was used."""
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", passphrase)
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE_ALICE", "last year's")
    out = tmp_path / "never.json"
    expect(run(runner, signed.home, "sign", signed.data, "--key", "alice", "--out", out), 3,
           f"FAIL: key alice: cannot load {signed.home / 'keys' / 'alice.key'}: "
           "wrong passphrase or corrupt key file (the passphrase in TRAJLEDGER_PASSPHRASE_ALICE, "
           "which is used before TRAJLEDGER_PASSPHRASE)\n", "")
    assert not out.exists()


def test_an_encryption_key_given_to_sign_says_its_kind(
        signed: Signed, runner: CliRunner, tmp_path: Path) -> None:
    """hour33: ``sign --key sealer``, sealer an X25519 key, said only "no private key ...;
    create it with 'trajledger key new sealer'": the user was not told the key they named is of
    the other kind."""
    assert run(runner, signed.home, "key", "new", "sealer", "--alg", "x25519").exit_code == 0
    out = tmp_path / "never.json"
    expect(run(runner, signed.home, "sign", signed.data, "--key", "sealer", "--out", out), 3,
           f"FAIL: key sealer: no signing key in {signed.home / 'keys'}; sealer is an X25519 "
           "encryption key (x25519/), which cannot sign: give a signing key ('trajledger key "
           "list'), or make one of that name (an evaluator holds both) with 'trajledger key new "
           "sealer'\n", "")
    assert not out.exists() and not (signed.home / "keys" / "sealer.key").exists()


def test_no_passphrase_and_no_terminal(signed: Signed, runner: CliRunner, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAJLEDGER_PASSPHRASE")
    expect(run(runner, signed.home, "sign", signed.data, "--key", "alice", "--out",
               tmp_path / "x.json"), 3,
           "FAIL: key alice: is encrypted; set TRAJLEDGER_PASSPHRASE_ALICE or "
           "TRAJLEDGER_PASSPHRASE, name a file holding it in TRAJLEDGER_PASSPHRASEFILE_ALICE or "
           "TRAJLEDGER_PASSPHRASEFILE, or run in a terminal\n")
    expect(run(runner, signed.home, "key", "new", "carol"), 3,
           "FAIL: key carol: no passphrase; set TRAJLEDGER_PASSPHRASE_CAROL or "
           "TRAJLEDGER_PASSPHRASE, name a file holding it in TRAJLEDGER_PASSPHRASEFILE_CAROL or "
           "TRAJLEDGER_PASSPHRASEFILE, run in a terminal, or pass --no-encrypt for a demo key\n")
    assert not (signed.home / "keys" / "carol.key").exists()


def test_missing_data_path(signed: Signed, runner: CliRunner, tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    expect(signed.verify(runner, data=gone), 3, f"FAIL: {gone}: no such file or directory\n")
    expect(run(runner, signed.home, "sign", gone, "--key", "alice", "--out", tmp_path / "o"), 3,
           f"FAIL: {gone}: no such file or directory\n")


def test_missing_envelope(signed: Signed, runner: CliRunner, tmp_path: Path) -> None:
    env = tmp_path / "nope.json"
    expect(signed.verify(runner, envelope=env), 3, f"FAIL: envelope {env}: no such file\n")


def test_missing_public_key_file(signed: Signed, runner: CliRunner, tmp_path: Path) -> None:
    pub = tmp_path / "nope.pub"
    expect(signed.verify(runner, pubkey=pub), 3, f"FAIL: public key {pub}: no such file\n")


def test_symlink_in_tree(signed: Signed, runner: CliRunner, tmp_path: Path) -> None:
    link = signed.data / "shards" / "link.jsonl"
    link.symlink_to("part-0.jsonl")
    msg = f"FAIL: {link}: is a symbolic link; only regular files are signed\n"
    expect(signed.verify(runner), 3, msg)
    out = tmp_path / "o.json"
    expect(run(runner, signed.home, "sign", signed.data, "--key", "alice", "--out", out), 3, msg)
    assert not out.exists()


def test_unknown_key_name(signed: Signed, runner: CliRunner, tmp_path: Path) -> None:
    keys = signed.home / "keys"
    expect(run(runner, signed.home, "sign", signed.data, "--key", "bob", "--out",
               tmp_path / "o.json"), 3,
           f"FAIL: key bob: no private key in {keys}; create it with 'trajledger key new bob'\n")
    expect(run(runner, signed.home, "key", "export", "bob"), 3,
           f"FAIL: key bob: not found in {keys}; see 'trajledger key list'\n", "")


def test_key_new_over_existing_name(signed: Signed, runner: CliRunner) -> None:
    before = (signed.home / "keys" / "alice.key").read_bytes()
    expect(run(runner, signed.home, "key", "new", "alice"), 3,
           f"FAIL: key alice: already exists in {signed.home / 'keys'}; pick another name\n", "")
    assert (signed.home / "keys" / "alice.key").read_bytes() == before


def test_key_new_needs_a_ledger(runner: CliRunner, tmp_path: Path, passphrase: str) -> None:
    typo = tmp_path / "hoem"
    expect(run(runner, typo, "key", "new", "alice"), 3,
           f"FAIL: {typo}: no ledger here; run 'trajledger init' or pass --ledger DIR\n", "")
    assert not typo.exists()


def test_init_over_existing_ledger(home: Path, runner: CliRunner) -> None:
    before = (home / "ledger.toml").read_bytes()
    expect(run(runner, home, "init"), 3, f"FAIL: {home}: a ledger already exists here\n", "")
    assert (home / "ledger.toml").read_bytes() == before


# -- keys at rest ---------------------------------------------------------------------------------


def test_private_key_is_0600_and_encrypted(signed: Signed, passphrase: str) -> None:
    key = signed.home / "keys" / "alice.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    data = key.read_bytes()
    assert data.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----\n")
    with pytest.raises(TypeError, match="encrypted"):
        serialization.load_pem_private_key(data, password=None)
    serialization.load_pem_private_key(data, password=passphrase.encode())


def test_no_encrypt_warns_and_writes_a_plain_key(home: Path, runner: CliRunner) -> None:
    r = run(runner, home, "key", "new", "demo", "--no-encrypt")
    expect(r, 0, "WARNING: key demo is written unencrypted; use it for demos and tests only\n"
                 f"OK: key demo written to {home / 'keys'}\n")
    key = home / "keys" / "demo.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")
    r = run(runner, home, "key", "list", "--json")
    expect(r, 0, "")
    assert [(k["name"], k["encrypted"]) for k in json.loads(r.stdout)] == [("demo", False)]


# -- usage errors: exit 2 -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["verify", "x", "y"], "Error: give one REF to verify (or PATH... with --envelope); "
         "see 'trajledger verify --help'"),
        (["sign", "--key", "k", "--out", "o"], "Error: Missing argument 'PATHS...'; see "
         "'trajledger sign --help'"),
        (["key", "new", "k", "--alg", "rsa"],
         "Error: Invalid value for '--alg': 'rsa' is not one of 'ed25519', 'p256', 'x25519'; see "
         "'trajledger key new --help'"),
        (["verify", "x", "--envelope", "e", "--pubkey", "p", "--threshold", "0"],
         "Error: Invalid value for '--threshold': 0 is not in the range x>=1; see 'trajledger "
         "verify --help'"),
        (["frobnicate"], "Error: No such command 'frobnicate'; see 'trajledger --help'"),
    ],
    ids=["missing-option", "missing-argument", "bad-choice", "bad-range", "unknown-command"],
)
def test_usage_errors(home: Path, runner: CliRunner, args: list[str], error: str) -> None:
    r = run(runner, home, *args)
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [error]  # one line (left35), not click's usage and hint
    assert "Traceback" not in r.output and r.stdout == ""


# -- internal bugs: exit 4 ------------------------------------------------------------------------


BUG = ("BUG: RuntimeError: boom\nThis is a bug in trajledger; please report it"
       " (rerun with --verbose for the traceback)\n")


def _boom(*_a: object, **_k: object) -> None:
    raise RuntimeError("boom")


def test_internal_bug_in_sign(signed: Signed, runner: CliRunner, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("trajledger.ledger.files.manifest_for", _boom)
    out = tmp_path / "o.json"
    expect(run(runner, signed.home, "sign", signed.data, "--key", "alice", "--out", out), 4, BUG)
    assert not out.exists()


def test_internal_bug_in_verify(signed: Signed, runner: CliRunner,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("trajledger.ledger.verify_files.verify_files", _boom)
    expect(signed.verify(runner), 4, BUG)


def test_internal_bug_traceback_only_with_verbose(signed: Signed, runner: CliRunner,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("trajledger.ledger.verify_files.verify_files", _boom)
    r = runner.invoke(main, ["--verbose", "--ledger", str(signed.home), "verify",
                             str(signed.data), "--envelope", str(signed.envelope),
                             "--pubkey", str(signed.pubkey)])
    assert r.exit_code == 4
    assert r.stderr.startswith("Traceback (most recent call last):\n")
    assert 'raise RuntimeError("boom")' in r.stderr
    assert r.stderr.endswith(
        "BUG: RuntimeError: boom\nThis is a bug in trajledger; please report it\n"
    )


def test_expected_errors_have_no_traceback_even_with_verbose(signed: Signed,
                                                             runner: CliRunner) -> None:
    os.unlink(signed.data / "README.txt")
    r = runner.invoke(main, ["--verbose", "--ledger", str(signed.home), "verify",
                             str(signed.data), "--envelope", str(signed.envelope),
                             "--pubkey", str(signed.pubkey)])
    expect(r, 1, "FAIL: README.txt: missing\n")


def test_a_weakly_encrypted_key_is_listed_and_re_encrypted_through_the_cli(
    runner: CliRunner, tmp_path: Path, passphrase: str
) -> None:
    """A key encrypted as trajledger did before the seventh round (PBKDF2, 2,048 rounds)
    loads, is listed ``weak`` (text and --json) and ``key encrypt`` re-encrypts it with
    scrypt; its signatures are the same key's."""
    from cryptography.hazmat.primitives import serialization

    from trajledger.ledger.keys import kdf_cost

    home = tmp_path / "home"
    expect(run(runner, home, "init", "--origin", "test/e2e"), 0, "",
           f"created ledger {home} (origin test/e2e)\n")
    assert run(runner, home, "key", "new", "alice").exit_code == 0
    priv = home / "keys" / "alice.key"
    key = serialization.load_pem_private_key(priv.read_bytes(), passphrase.encode())
    priv.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.BestAvailableEncryption(passphrase.encode())))
    keyid = KeyStore(home / "keys").public("alice").keyid
    expect(run(runner, home, "key", "list"), 0, "",
           f"alice\ted25519\t{keyid}\tencrypted (weak key derivation: 'trajledger key encrypt "
           "alice' re-encrypts it)\n")
    listed = json.loads(run(runner, home, "key", "list", "--json").stdout)
    assert [(k["name"], k["encrypted"], k["weak"]) for k in listed] == [("alice", True, True)]
    expect(run(runner, home, "key", "encrypt", "alice"), 0, f"OK: key alice: {priv} encrypted\n",
           "")
    assert kdf_cost(priv.read_bytes()) == 2**14 * 8
    expect(run(runner, home, "key", "list"), 0, "", f"alice\ted25519\t{keyid}\tencrypted\n")
    expect(run(runner, home, "key", "encrypt", "alice"), 0, "OK: key alice: already encrypted\n",
           "")


def test_a_key_missing_one_half_says_which_and_what_to_do(
        signed: Signed, runner: CliRunner, tmp_path: Path) -> None:
    """hour33: with ``alice.key`` gone, ``sign --key alice`` said "create it with 'trajledger key
    new alice'", which is refused while ``alice.pub`` is there; with ``alice.pub`` gone, "not
    found" of a key whose private half is there."""
    keys = signed.home / "keys"
    out = tmp_path / "never.json"
    (keys / "alice.pub").rename(tmp_path / "alice.pub")
    expect(run(runner, signed.home, "key", "export", "alice"), 3,
           f"FAIL: key alice: its public half {keys / 'alice.pub'} is missing, but "
           f"{keys / 'alice.key'} is there: write it again with 'openssl pkey -in "
           f"{keys / 'alice.key'} -pubout -out {keys / 'alice.pub'}' and compare its fingerprint "
           "('trajledger key list') with your policy's\n")
    (tmp_path / "alice.pub").rename(keys / "alice.pub")
    (keys / "alice.key").rename(tmp_path / "alice.key")
    expect(run(runner, signed.home, "sign", signed.data, "--key", "alice", "--out", out), 3,
           f"FAIL: key alice: its private half {keys / 'alice.key'} is missing, but "
           f"{keys / 'alice.pub'} is there: restore it from your backup (a lost key is replaced "
           "by a new key under another name, which a successor policy names, signed by the "
           "policy in force's approvers)\n")
    assert not out.exists()
