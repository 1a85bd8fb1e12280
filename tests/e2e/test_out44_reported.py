"""Findings of out44 in files other helpers own, for the lead to fix at the merge (each a strict
xfail, failing before its fix). Reproducers: /tmp/out44-s/aud/ (the auditor's directory)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from test_evaluations import evals_template, home  # noqa: F401 (fixtures)
from test_runner_cli import expect, run


def test_an_offline_auditor_is_told_to_edit_its_policy_file_not_to_run_policy_set(
    runner: CliRunner, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    """An auditor with `python -m trajledger.verify` and no ledger, whose policy does not hold
    the producer key that signed a dataset: `… (not in the policy), want producer key(s); if the
    signer confirms the key is theirs (ask them, not the data), add it to [roles.producer] of
    the policy and run 'trajledger policy set'; otherwise treat the record as forged: records
    whose envelope names only this key do not count under policy …; if you trust its owner as
    producer, add the key … to the policy`: a command it has no ledger for, and the advice
    twice. Offline, the policy is the file given as --policy."""
    from trajledger.verify.__main__ import main

    bundle = tmp_path / "train.tar.zst"
    expect(run(runner, home, "export", "train@1", "--out", bundle), 0)
    other = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (home / "keys" / "someone.pub").write_bytes(other)
    policy = home / "auditor.toml"
    policy.write_text((home / "policy.toml").read_text().replace("keys/vendor.pub",
                                                                 "keys/someone.pub"))
    capsys.readouterr()
    assert main([str(bundle), "--policy", str(policy)]) == 1
    err = capsys.readouterr().err
    assert "want producer key(s)" in err
    assert "trajledger policy set" not in err
    assert "--policy" in err or str(policy.name) in err
    assert err.count("add it to [roles.producer]") + err.count("add the key") == 1


def altered_bundle(runner: CliRunner, home: Path, tmp_path: Path) -> Path:  # noqa: F811
    """train@1's bundle with one byte of its largest member changed, compressed again."""
    import io
    import tarfile

    import zstandard

    bundle = tmp_path / "train.tar.zst"
    expect(run(runner, home, "export", "train@1", "--out", bundle), 0)
    raw = zstandard.ZstdDecompressor().decompressobj().decompress(bundle.read_bytes())
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        member = max(tar.getmembers(), key=lambda m: m.size)
    altered = bytearray(raw)
    altered[member.offset_data + member.size // 2] ^= 1
    bad = tmp_path / "altered.tar.zst"
    bad.write_bytes(zstandard.ZstdCompressor().compress(bytes(altered)))
    return bad


def test_an_altered_bundle_still_prints_a_report_under_json(
    runner: CliRunner, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    """An auditor's script verifies each bundle with --json and parses stdout: a bundle with
    one byte of one member changed (recompressed) exits 1, `FAIL: … member objects/sha256/…:
    content hashes to …, bundle.json says …` on stderr and nothing on stdout, where a
    verification failure otherwise prints its report (docs/cli.md, "--json when a command
    fails": a check whose failure is its report prints that report)."""
    import json

    from trajledger.verify.__main__ import main

    bad = altered_bundle(runner, home, tmp_path)
    capsys.readouterr()
    assert main([str(bad), "--policy", str(home / "policy.toml"), "--json"]) == 1
    out = capsys.readouterr()
    assert "content hashes to" in out.err
    report = json.loads(out.out)
    assert report["ok"] is False and report["failed"] >= 1
    import jsonschema

    schema = json.loads((Path(__file__).parents[2] / "schemas/report.v1.schema.json").read_text())
    jsonschema.validate(report, schema)  # (the bundle node alone, failing)
    assert "content hashes to" in report["nodes"][0]["checks"][0]["detail"]


def test_an_altered_bundle_says_what_to_do(
    runner: CliRunner, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    """A bundle cut short says `… truncated (0 of 512 bytes): get it again`; one with a byte
    changed says only `member …: content hashes to sha256:…, bundle.json says sha256:…`
    (likewise a changed checkpoint, entry, proof or object: each is named, none says what to
    do): an auditor is not told to get the file again from its sender and compare its
    SHA-256 with the sender's (altered in transit or at rest), or to treat it as tampered."""
    from trajledger.verify.__main__ import main

    bad = altered_bundle(runner, home, tmp_path)
    capsys.readouterr()
    assert main([str(bad), "--policy", str(home / "policy.toml")]) == 1
    err = capsys.readouterr().err
    assert "content hashes to" in err and ("get it again" in err or "sender" in err)
