"""An auditor's first hour (aud34): a lab's bundles, its public keys, a policy written by hand,
and ``python -m verify``; then the bundles and policies an auditor meets that must fail, each
with one line that says what failed and what to do (docs/AUDIT_FIRST_HOUR.md).

The lab is a quickstart ledger; each test reads the bundles it exported (its final checkpoint
and a dataset of its lineage) and writes its own copies.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import testkit
from click.testing import CliRunner
from testkit import new_runner

from trajledger.ledger.home import LedgerHome
from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main


class Lab:
    """A quickstart ledger ``home`` (a copy of the session's ``quickstart_template``), its final
    checkpoint ``ckpt`` (digest) exported as ``bundle``, its dataset ``cartpole-train@2`` as
    ``dataset``, a hand-written policy."""

    def __init__(self, root: Path, template: testkit.Template[str]) -> None:
        runner = new_runner()
        self.home = testkit.copy_template(template, root / "lab")
        self.ckpt = template.value
        self.bundle, self.dataset = root / "ckpt.tar.zst", root / "dataset.tar.zst"
        for ref, out in ((self.ckpt, self.bundle), ("cartpole-train@2", self.dataset)):
            r = runner.invoke(main, ["--ledger", str(self.home), "export", ref, "--out", str(out)])
            assert r.exit_code == 0, r.output
        self.vkey = LedgerHome.open(self.home).log.vkey
        keys = root / "keys"
        keys.mkdir()
        for pub in (self.home / "keys").glob("*.pub"):
            shutil.copy(pub, keys / pub.name)
        self.policy = root / "policy.toml"
        self.policy.write_text(self.policy_text(self.vkey))

    @staticmethod
    def policy_text(vkey: str) -> str:
        """The auditor's policy as docs/third-party.md writes it, with the log key ``vkey``."""
        return (
            'name = "auditor"\nserial = 1\n\n'
            '[roles.producer]\nkeys = ["keys/vendor.pub"]\n\n'
            '[roles.approver]\nkeys = ["keys/approver-a.pub", "keys/approver-b.pub"]\n'
            "threshold = 2\n\n"
            '[roles.trainer]\nkeys = ["keys/trainer.pub"]\n\n'
            f'[roles.log]\nvkeys = ["{vkey}"]\n'
        )


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, quickstart_template: testkit.Template[str]
        ) -> Lab:
    return Lab(tmp_path_factory.mktemp("aud34"), quickstart_template)


def verify(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, list[str]]:
    """``python -m verify ARGS``: its exit code and its stderr lines."""
    code = verify_main([str(a) for a in args])
    return code, capsys.readouterr().err.splitlines()


def lab_with_trainer2(tmp_path: Path, template: testkit.Template[str]
                      ) -> tuple[CliRunner, Path]:
    """A runner and a quickstart ledger ``tmp_path/lab`` (a copy of ``template``, the session's
    ``quickstart_template``) holding a second trainer key, ``trainer2``, which its policy does
    not name yet."""
    runner = new_runner()
    home = testkit.copy_template(template, tmp_path / "lab")
    r = runner.invoke(main, ["--ledger", str(home), "key", "new", "trainer2", "--no-encrypt"])
    assert r.exit_code == 0, r.output
    return runner, home


def replace_trainer(runner: CliRunner, home: Path, since: int) -> None:
    """Record the lab's successor policy (serial 2): ``trainer2`` in place of ``trainer``, which
    it declares compromised since log index ``since`` (laptop stolen)."""
    text = (home / "policy.toml").read_text().replace("serial = 1", "serial = 2")
    old = (home / "keys" / "trainer.pub").read_text()
    assert text.count(old) == 1
    text = text.replace(old, (home / "keys" / "trainer2.pub").read_text()) + (
        f'\n[[revoked_keys]]\nkey = "keys/trainer.pub"\ncompromised_since = {since}\n'
        'reason = "laptop stolen"\n')
    (home / "policy2.toml").write_text(text)
    r = runner.invoke(main, ["--ledger", str(home), "policy", "set", str(home / "policy2.toml"),
                             "--key", "approver-a", "--key", "approver-b", "--yes"])
    assert r.exit_code == 0, r.output


def test_the_ok_line_names_what_was_verified_with_its_full_digest(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 1: a bundle of another artifact than the one meant (an older checkpoint, a
    dataset) verifies as well, exit 0, and the OK line named only the file: a script or a
    hurried auditor could not tell. Now it names the subject, kind, name and full digest."""
    code, err = verify(capsys, lab.bundle, "--policy", lab.policy)
    assert code == 0, err
    assert len(err) == 1 and err[0].startswith(f"OK: {lab.bundle}: checkpoint cartpole-bc@")
    assert f" ({lab.ckpt}): " in err[0] and err[0].endswith(" checks passed")
    code, err = verify(capsys, lab.dataset, "--policy", lab.policy)
    assert code == 0, err
    assert re.fullmatch(rf"OK: {re.escape(str(lab.dataset))}: dataset cartpole-train@2 "
                        r"\(sha256:[0-9a-f]{64}\): \d+ checks passed", err[0]), err
    # ``trajledger verify BUNDLE`` says the same.
    r = new_runner().invoke(main, ["verify", str(lab.dataset), "--policy", str(lab.policy)])
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith(f"OK: {lab.dataset}: dataset cartpole-train@2 (sha256:"), r.stderr


def test_a_log_key_the_policy_does_not_name_is_named_with_what_to_do(
    lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 2: a policy naming another log key (another lab's, or the key after a rotation
    for a bundle exported before it) said which key it wanted, not which key signed, nor what
    to do; and a second line said the checkpoint was not recorded in the log."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from trajledger.ledger.encode import vkey_string

    key = Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    policy = tmp_path / "policy.toml"
    policy.write_text(Lab.policy_text(vkey_string("example.org/other-lab", key)))
    shutil.copytree(lab.policy.parent / "keys", tmp_path / "keys")
    code, err = verify(capsys, lab.bundle, "--policy", policy)
    assert code == 1
    origin, keyid = lab.vkey.split("+")[:2]
    checkpoint = next(x for x in err if "log > checkpoint: " in x)
    assert f"the log's checkpoint is signed by {origin}+{keyid}, which your policy's log role " \
           "does not name: get that log's verifier key" in checkpoint
    assert not any("no artifact with this digest is recorded" in x for x in err), err
    assert any(x.endswith("not looked up: the log did not verify") for x in err), err


@pytest.mark.parametrize("damage", ["cut", "empty", "repacked"])
def test_a_bundle_cut_short_or_repacked_says_what_to_do(
    lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """Finding 3: a truncated download, an empty file, or a bundle unpacked and packed again
    by tar failed with the reader's words alone (``truncated (N of M bytes)``, ``magic `` and
    nothing, ``not a POSIX ustar/pax header``)."""
    import tarfile

    import zstandard

    data = lab.bundle.read_bytes()
    bad = tmp_path / "bad.tar.zst"
    if damage == "cut":
        bad.write_bytes(data[: len(data) // 2])
        want = "): get it again"
    elif damage == "empty":
        bad.write_bytes(b"")
        want = "cut short: 0 byte(s), it is empty (a download or a copy stopped early): get it"
    else:  # extracted and packed again by tar (GNU format, as GNU tar writes by default)
        unpacked = tmp_path / "x"
        with tarfile.open(fileobj=zstandard.ZstdDecompressor().stream_reader(data),
                          mode="r|") as tar:
            tar.extractall(unpacked, filter="data")
        with tarfile.open(tmp_path / "re.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for p in sorted(unpacked.rglob("*")):
                if p.is_file():
                    tar.add(p, arcname=str(p.relative_to(unpacked)))
        bad.write_bytes(zstandard.ZstdCompressor().compress((tmp_path / "re.tar").read_bytes()))
        want = "re-packed by tar? verify the file 'trajledger export' wrote, as it was sent"
    code, err = verify(capsys, bad, "--policy", lab.policy)
    assert code == 1 and len(err) == 1 and err[0].startswith(f"FAIL: {bad}: bundle bad.tar.zst: ")
    assert want in err[0], err


def test_a_key_the_exporters_policy_declares_compromised_is_not_advised_to_be_added(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
    quickstart_template: testkit.Template[str],
) -> None:
    """A lab replaced its trainer key (a successor naming the new key, ``[[revoked_keys]]``
    the old one since then) and trained with the new one. Verified under that successor alone
    (the bundle's ``policy/N.json``), the checkpoints the old key signed before fail, and the
    advice was ``if you trust its owner as trainer, add the key … to the policy``: a policy
    that revokes a key a role holds is refused. Now it says the key is declared compromised
    and to verify from the log's first policy, under which the bundle passes."""
    import tamperkit as tk

    runner, home = lab_with_trainer2(tmp_path, quickstart_template)
    ledger = ["--ledger", str(home)]
    size = LedgerHome.open(home).log.size
    replace_trainer(runner, home, size)
    # The lab's own refusal of the old key says why (it said only "does not hold the role").
    r = runner.invoke(main, [*ledger, "train", "--dataset", "cartpole-train@2", "--key",
                             "trainer", "--name", "cartpole-bc", "--version", "3"])
    assert r.exit_code == 1 and "does not hold the trainer role in policy 'quickstart' serial " \
        f"2, which declares it compromised since log index {size}: laptop stolen; sign with " \
        in r.stderr, r.output
    r = runner.invoke(main, [*ledger, "train", "--dataset", "cartpole-train@2", "--key",
                             "trainer2", "--name", "cartpole-bc", "--version", "3",
                             "--parent", "cartpole-bc@2", "--seed", "1"])
    assert r.exit_code == 0, r.output
    bundle = tmp_path / "b.tar.zst"
    r = runner.invoke(main, [*ledger, "export", "cartpole-bc@3", "--out", str(bundle)])
    assert r.exit_code == 0, r.output
    members = dict(tk.bundle_members(bundle))
    (tmp_path / "first.json").write_bytes(members["policy/0.json"])
    (tmp_path / "now.json").write_bytes(members[f"policy/{size}.json"])
    code, err = verify(capsys, bundle, "--policy", tmp_path / "now.json")
    assert code == 1
    key = next(x for x in err if "> trust: " in x)
    assert "add the key" not in key, key
    assert f"the policy declares it compromised since log index {size}: laptop stolen; what " \
           "it signed before then counts under the policy in force then: verify from the " \
           "first policy of its log (a bundle's policy/0.json)" in key, key
    code, err = verify(capsys, bundle, "--policy", tmp_path / "first.json")
    assert code == 0, err


def test_expect_fails_a_bundle_of_another_artifact_and_refuses_what_is_not_a_digest(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    """left35 finding 1 (aud34's Left): ``--expect DIGEST`` makes the comparison the OK line
    asks for a check a script cannot forget: a bundle of another artifact (here the dataset's,
    handed over as the checkpoint's) exits 1 with one line naming what it is the evidence of;
    the one expected keeps the OK line as it was; what is not a full digest is a usage error
    (exit 2) before anything is read. ``trajledger verify BUNDLE --expect`` alike."""
    code, plain = verify(capsys, lab.bundle, "--policy", lab.policy)
    assert code == 0, plain
    for given in (lab.ckpt, lab.ckpt.upper().replace("SHA256:", "sha256:"),
                  lab.ckpt.removeprefix("sha256:")):
        code, err = verify(capsys, lab.bundle, "--policy", lab.policy, "--expect", given)
        assert (code, err) == (0, plain)
    code, err = verify(capsys, lab.dataset, "--policy", lab.policy, "--expect", lab.ckpt)
    assert code == 1 and len(err) == 1, err
    assert re.fullmatch(rf"FAIL: {re.escape(str(lab.dataset))}: the bundle is the evidence of "
                        r"dataset cartpole-train@2 \(sha256:[0-9a-f]{64}\), not of "
                        rf"{lab.ckpt}, the one expected \(--expect\): ask its sender for the "
                        "bundle of the artifact you were given", err[0]), err
    for bad, why in (("cartpole-bc@3", "not a digest"), (lab.ckpt[:19], "a digest of 12 hex "
                     "digits is a prefix, which another artifact may share")):
        with pytest.raises(SystemExit) as exited:
            verify(capsys, lab.bundle, "--policy", lab.policy, "--expect", bad)
        assert exited.value.code == 2
        assert f"error: --expect {bad!r}: {why}: give the full sha256:<64 hex>" in \
            capsys.readouterr().err
    runner = new_runner()
    cli = ["verify", str(lab.dataset), "--policy", str(lab.policy), "--expect"]
    r = runner.invoke(main, [*cli, lab.ckpt])
    assert r.exit_code == 1 and r.stderr.startswith(
        f"FAIL: {lab.dataset}: the bundle is the evidence of dataset cartpole-train@2"), r.output
    r = runner.invoke(main, [*cli, "cartpole-train@2"])
    assert r.exit_code == 2 and "--expect 'cartpole-train@2': not a digest" in r.stderr, r.output
    r = runner.invoke(main, ["verify", str(lab.bundle), "--policy", str(lab.policy), "--expect",
                             lab.ckpt])
    assert r.exit_code == 0 and r.stderr.startswith(f"OK: {lab.bundle}: checkpoint "), r.output
    # A REF names what it verifies: --expect holds it to the digest given.
    r = runner.invoke(main, ["--ledger", str(lab.home), "verify", "cartpole-bc@1", "--expect",
                             lab.ckpt])
    assert r.exit_code == 1 and "FAIL: cartpole-bc@1: it names checkpoint cartpole-bc@1 (sha256:" \
        in r.stderr, r.output


def test_expect_of_another_artifact_is_ok_false_in_json(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    """out37 finding 3: with ``--json``, a bundle of another artifact than ``--expect``'s
    exited 1 but printed ``"ok": true`` (the report of what it holds, which is true), so a
    script reading ``ok`` took the dataset's bundle for the checkpoint's. Now ``ok`` is false,
    as the exit code; the one expected keeps ``ok`` true. ``python -m verify`` and
    ``trajledger verify`` (bundle and REF) alike."""
    import json

    for bundle, code in ((lab.dataset, 1), (lab.bundle, 0)):
        got = verify_main([str(bundle), "--policy", str(lab.policy), "--expect", lab.ckpt,
                           "--json"])  # fmt: skip
        out = capsys.readouterr().out
        assert got == code and json.loads(out)["ok"] is (code == 0), out[:200]
        r = new_runner().invoke(main, ["verify", str(bundle), "--policy", str(lab.policy),
                                       "--expect", lab.ckpt, "--json"])  # fmt: skip
        assert r.exit_code == code and json.loads(r.stdout)["ok"] is (code == 0), r.output
    r = new_runner().invoke(main, ["--ledger", str(lab.home), "verify", "cartpole-bc@1",
                                   "--expect", lab.ckpt, "--json"])  # fmt: skip
    assert r.exit_code == 1 and json.loads(r.stdout)["ok"] is False, r.output


def test_the_auditors_own_invalid_policy_is_a_usage_error_a_bundles_damaged_one_fails(
    lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """left35 finding 2 (aud34's Left): a policy the auditor wrote that is not TOML or JSON, or
    names a setting or role that does not exist, exited 1, "verification failed", as if the
    lab's evidence had; it is the auditor's file to fix: exit 2 (usage), one line, in ``python
    -m verify`` and ``trajledger verify`` (bundle and REF) alike. A missing file stays 3 (the
    file system's answer); a damaged policy inside the bundle stays 1 (evidence)."""
    import tamperkit as tk

    shutil.copytree(lab.policy.parent / "keys", tmp_path / "keys")
    cases = {
        "typo.toml": lab.policy.read_text().replace("threshold = 2", "threshhold = 2"),
        "role.toml": lab.policy.read_text().replace("[roles.trainer]", "[roles.trainers]"),
        "broken.toml": "[roles\n",
        "broken.json": "{",
        "unknown.json": '{"name": "auditor", "serial": 1, "roles": {}, "thresold": 1}',
    }
    for name, text in cases.items():
        policy = tmp_path / name
        policy.write_text(text)
        code, err = verify(capsys, lab.bundle, "--policy", policy)
        assert code == 2 and len(err) == 1, (name, err)
        assert err[0].startswith(f"FAIL: {lab.bundle}: policy {policy}: "), err
        runner = new_runner()
        for args in ([str(lab.bundle)], ["--ledger", str(lab.home), "cartpole-bc@2"]):
            r = runner.invoke(main, ["verify", *args, "--policy", str(policy)])
            assert r.exit_code == 2 and r.stderr.startswith(f"FAIL: policy {policy}: "), r.output
            assert len(r.stderr.splitlines()) == 1, r.output
    code, err = verify(capsys, lab.bundle, "--policy", tmp_path / "none.toml")
    assert code == 3 and err == [f"FAIL: {lab.bundle}: policy {tmp_path / 'none.toml'}: no such "
                                 "file"], err
    members = tk.bundle_members(lab.bundle)
    damaged = [(n, b"{" if n.startswith("policy/") else d) for n, d in members]
    assert damaged != members
    bad = tk.write_bundle(tmp_path / "bad.tar.zst", damaged, reindex=True)
    code, err = verify(capsys, bad, "--policy", lab.policy)
    assert code == 1 and "policy/" in err[0] and "hashes to" in err[0], err


def test_a_key_the_auditor_trusts_and_the_exporter_declares_compromised_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
    quickstart_template: testkit.Template[str],
) -> None:
    """left35 finding 3 (aud34's Left): the auditor's hand-written policy is used as given, so
    the lab's own successor declaring its trainer key compromised (``[[revoked_keys]]``, in the
    bundle as ``policy/N.json``) was not consulted: a bundle holding a checkpoint that key
    signed after the point declared (exported under a policy that still trusts it) passed,
    exit 0. Now it fails, naming the key, the declaration and what to do; a bundle whose
    records the key signed before then passes, with a WARNING in the report."""
    runner, home = lab_with_trainer2(tmp_path, quickstart_template)
    ledger = ["--ledger", str(home)]
    since = LedgerHome.open(home).log.size  # the next record, cartpole-bc@3, is in the window
    r = runner.invoke(main, [*ledger, "train", "--dataset", "cartpole-train@2", "--key",
                             "trainer", "--name", "cartpole-bc", "--version", "3",
                             "--parent", "cartpole-bc@2", "--seed", "1"])
    assert r.exit_code == 0, r.output
    replace_trainer(runner, home, since)
    old = (home / "keys" / "trainer.pub").read_text()
    shutil.copytree(home / "keys", tmp_path / "keys", ignore=shutil.ignore_patterns("*.key"))
    auditor = tmp_path / "auditor.toml"
    auditor.write_text(Lab.policy_text(LedgerHome.open(home).log.vkey))
    from trajledger.verify.keys import PublicKey

    keyid = PublicKey.from_pem(old.encode(), "trainer").keyid
    said = (f"your policy 'auditor' trusts key {keyid[:12]} as trainer, which the exporter's "
            "own policy 'quickstart' serial 2 (in this bundle) declares compromised since log "
            f"index {since}: laptop stolen")
    fix = ("if the key is theirs, update your policy: verify from the exporter's first policy "
           "(the bundle's policy/0.json")
    later, earlier = tmp_path / "ckpt3.tar.zst", tmp_path / "ckpt2.tar.zst"
    for ref, out in (("cartpole-bc@3", later), ("cartpole-bc@2", earlier)):
        r = runner.invoke(main, [*ledger, "export", ref, "--policy", str(auditor), "--out",
                                 str(out)])
        assert r.exit_code == 0, r.output
    code, err = verify(capsys, later, "--policy", auditor)
    assert code == 1 and err[0] == f"FAIL: {later}: 1 of {err[0].split()[4]} checks failed", err
    assert err[1].startswith(f"FAIL: {later}: bundle ckpt3.tar.zst > policy: {said}; this "
                             f"bundle's record(s) at log index {since} were signed by it since "
                             f"then, which its owner disowns: {fix}"), err
    r = runner.invoke(main, ["verify", str(later), "--policy", str(auditor)])
    assert r.exit_code == 1 and f"> policy: {said}; this bundle's record(s)" in r.stderr, r.output
    assert verify_main([str(earlier), "--policy", str(auditor)]) == 0
    out, err_text = capsys.readouterr()
    assert f"· policy — WARNING: {said}; nothing in this bundle was signed by it since then, but " \
        f"your policy would count what it signs: {fix}" in out, out
    assert err_text.startswith(f"OK: {earlier}: checkpoint cartpole-bc@2 "), err_text
