"""rev51: a command whose reader went away (``| head``, ``| true``) still ends with its own
verdict; docs/SECURITY.md, "Review of 2026-12-07, thirty-ninth round (rev51)"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import testkit
from test_updates import served, train_a_buyer
from testkit import Party


def _to_a_reader_gone(home: Path, *args: str, state: Path | None = None
                      ) -> subprocess.CompletedProcess[str]:
    """``trajledger --ledger HOME ARGS`` with stdout a pipe whose reader is gone (``state``:
    the user's state directory, else the test's)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env |= {"TRAJLEDGER_STATE_DIR": str(state)} if state is not None else {}
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as pipe:
        return subprocess.run([sys.executable, "-m", "trajledger", "--ledger", str(home), *args],
                              stdout=pipe, stderr=subprocess.PIPE, text=True, timeout=300,
                              env=env)


def test_a_verification_that_fails_to_a_reader_gone_still_fails(
    tmp_path: Path, quickstart_template: testkit.Template[str]
) -> None:
    """finding 6: ``trajledger verify CK --json | true`` (or ``| head -n 20`` of a report
    longer than the pipe holds, under ``set -o pipefail`` in CI) of a checkpoint whose
    training data was revoked ended 0, with no ``FAIL:`` line: the report's write met the
    closed pipe, and `Group.invoke` ended every command whose output's reader went away with
    0, whatever its verdict (rev49: "a reader gone is no error"). Expected: the verdict's own
    status, 1, and its ``FAIL:`` lines on stderr; a verification that passes still 0; likewise
    ``lineage``, ``fsck`` and ``log verify`` (a damaged object) and ``admit`` (refused), whose
    verdicts follow their reports."""
    lab = Party(tmp_path, "lab")
    testkit.copy_template(quickstart_template, lab.home)
    ok = _to_a_reader_gone(lab.home, "verify", "cartpole-bc@2", "--json")
    assert ok.returncode == 0 and "FAIL" not in ok.stderr, (ok.returncode, ok.stderr)
    lab.run("revoke", "cartpole-train@2", "--key", "approver-a", "--reason", "withdrawn")
    for args in (["verify", "--json"], ["verify"], ["lineage"], ["lineage", "--json"]):
        r = _to_a_reader_gone(lab.home, *args, "cartpole-bc@2")
        assert r.returncode == 1, (args, r.returncode, r.stderr)
        assert "FAIL: cartpole-bc@2: 1 of 30 checks failed" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr, r.stderr
    for args in (["admit", "cartpole-train@2"], ["admit", "cartpole-train@2", "--json"]):
        r = _to_a_reader_gone(lab.home, *args)  # (a refusal's report, then its FAIL: lines)
        assert r.returncode == 1 and "FAIL:" in r.stderr, (args, r.returncode, r.stderr)
    envelope = next(line.split()[-1] for line in lab.run("show", "cartpole-train@2").stdout
                    .splitlines() if line.split()[:1] == ["envelope"])[7:]
    damaged = lab.home / "objects" / "sha256" / envelope[:2] / envelope[2:4] / envelope
    damaged.chmod(0o644)
    damaged.write_bytes(damaged.read_bytes() + b"x")
    for args in (["fsck"], ["fsck", "--json"], ["log", "verify"], ["log", "verify", "--json"]):
        r = _to_a_reader_gone(lab.home, *args)  # (a report, then its FAIL: lines)
        assert r.returncode == 1 and "FAIL:" in r.stderr, (args, r.returncode, r.stderr)


def test_a_release_dry_run_refused_to_a_reader_gone_still_fails(
    tmp_path: Path, quickstart_template: testkit.Template[str]
) -> None:
    """finding 6, ``release --dry-run --json`` (a CI gate's question, ``releasable``): refused
    for want of an evaluation, its JSON to a reader gone ended 0, the status of a checkpoint
    that may be released. Expected: 1 and its ``FAIL:`` line."""
    lab = Party(tmp_path, "lab")
    testkit.copy_template(quickstart_template, lab.home)
    lab.run("key", "new", "evaluator", "--no-encrypt")
    successor = tmp_path / "p2.toml"
    lab.run("policy", "init", "--evaluator", "evaluator", "--out", successor)
    with successor.open("a") as f:
        f.write('\n[release]\n[[release.require]]\nsuite = "cartpole-holdout@1"\nmin = 0.5\n')
    lab.run("policy", "set", successor, "--key", "approver-a", "--key", "approver-b", "--yes")
    r = _to_a_reader_gone(lab.home, "release", "cartpole-bc@2", "--dry-run", "--json", "--key",
                          "approver-a")
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "FAIL: release of cartpole-bc@2 > success_rate on cartpole-holdout@1: missing" in (
        r.stderr), r.stderr


def test_a_monitor_that_finds_a_revocation_to_a_reader_gone_still_fails(tmp_path: Path) -> None:
    """finding 6, ``monitor URL --fail-on-revocation --json`` (a daily cron's): the vendor
    revoked a batch the buyer trained on; to a reader gone it ended 0. Expected: 1 and its
    ``FAIL:`` line."""
    vendor, buyer, _ckpt = train_a_buyer(tmp_path)
    vendor.run("revoke", vendor.batches[0], "--reason", "wrong env", "--key", "vendor")
    for url in served(vendor):
        r = _to_a_reader_gone(buyer.home, "monitor", url, "--vkey", vendor.vkey(), "--key",
                              "approver", "--fail-on-revocation", "--json", state=buyer.state)
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert "something this ledger holds was revoked" in r.stderr, r.stderr


def test_the_verifier_alone_to_a_reader_gone_ends_with_its_verdict(
    tmp_path: Path, quickstart_template: testkit.Template[str]
) -> None:
    """rev51's Left, the lead: ``python -m trajledger.verify BUNDLE --json | head`` met the
    closed pipe writing its report and ended 3 (``Broken pipe``), whatever the verdict: a
    verification that passed read as an operational failure, one that failed hid its verdict.
    Expected: 0 for a bundle that verifies, 1 (and its ``FAIL:`` line) for one that is not of
    the artifact expected, as to a reader that stays."""
    lab = Party(tmp_path, "lab")
    testkit.copy_template(quickstart_template, lab.home)
    bundle = tmp_path / "bc.tar.zst"
    lab.run("export", "cartpole-bc@2", "--out", bundle)
    other = "sha256:" + "ab" * 32
    for extra, code in (([], 0), (["--expect", other], 1)):
        for fmt in (["--json"], []):
            read, write = os.pipe()
            os.close(read)
            with os.fdopen(write, "w") as pipe:
                r = subprocess.run(
                    [sys.executable, "-m", "trajledger.verify", str(bundle), "--policy",
                     str(lab.home / "policy.toml"), *fmt, *extra],
                    stdout=pipe, stderr=subprocess.PIPE, text=True, timeout=300, check=False)
            assert r.returncode == code, (extra, fmt, r.returncode, r.stderr)
            assert ("FAIL:" in r.stderr) == bool(code) and "Broken pipe" not in r.stderr, r.stderr
