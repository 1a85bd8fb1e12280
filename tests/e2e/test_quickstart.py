"""``trajledger quickstart DIR`` end to end, through click's CliRunner.

It must exit 0, show the refusals, and print as its last stdout line the final checkpoint's
digest, which ``trajledger verify`` then accepts, from the ledger's policy in force and from
the ``policy.toml`` it wrote. Its wall time is printed, not asserted (no timing assertions in
tests): the two-minute target is measured in docs/PERFORMANCE.md (Quickstart).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from trajledger.runner.cli import main


def run(runner: CliRunner, *args: str | Path) -> Result:
    return runner.invoke(main, [str(a) for a in args], prog_name="trajledger")


def test_quickstart(runner: CliRunner, tmp_path: Path) -> None:
    directory = tmp_path / "qs"
    started = time.monotonic()
    r = run(runner, "quickstart", directory)
    elapsed = time.monotonic() - started
    print(f"quickstart wall time: {elapsed:.1f} s")
    assert r.exit_code == 0, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert "Traceback" not in r.output

    digest = r.stdout.splitlines()[-1]
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    err = r.stderr
    assert err.startswith(
        "WARNING: neither TRAJLEDGER_PASSPHRASE nor TRAJLEDGER_PASSPHRASEFILE is set: the demo "
        "keys are written unencrypted"
    )
    for step in (
        "==> a ledger in ",
        "==> the trust policy: producer vendor, approvals 2-of-2",
        "==> iteration 1: dataset, approvals 2-of-2, training",
        "==> iteration 2: both batches, approvals, training with checkpoint 1 as parent",
        "==> verifying the final checkpoint's whole lineage",
        "==> refusals: the runner will not train on these",
    ):
        assert step in err, step
    assert "refused an unapproved dataset: 1 problem(s):\n" in err
    assert (
        "> dataset cartpole-unapproved@1: approvals: 0 of 2 required approver(s) for 'train': "
        "approve it with 2 more approver keys ('trajledger approve cartpole-unapproved@1 --key "
        "NAME'; the policy's approver keys here: approver-a, approver-b; each key counts once)"
        ", then run this again\n" in err
    )
    assert "refused a holdout split: 1 problem(s):\n" in err
    assert "split: the dataset is 'holdout', want 'train'" in err
    assert "refused a tampered batch (one bit flipped in the store): 1 problem(s):\n" in err
    assert "> steps.parquet: tampered: content hashes to sha256:" in err
    # The lineage tree is printed; the second checkpoint descends from the first.
    assert "✓ checkpoint cartpole-bc@2 (" in r.stdout
    assert "✓ checkpoint cartpole-bc@1 (" in r.stdout

    policy = directory / "policy.toml"
    assert policy.is_file()
    assert sorted(p.name for p in (directory / "keys").glob("*.pub")) == [
        "approver-a.pub",
        "approver-b.pub",
        "trainer.pub",
        "vendor.pub",
    ]
    for extra in ((), ("--policy", policy)):
        v = run(runner, "--ledger", directory, "verify", digest, *extra)
        assert v.exit_code == 0, v.output
        assert v.stderr.startswith(f"OK: {digest}: ") and v.stderr.endswith(" checks passed\n")
    v = run(runner, "--ledger", directory, "verify", digest, "--skip-data")
    assert v.exit_code == 0, v.output  # the flipped bit was restored (re-hashed by default)
    assert run(runner, "policy", "check", policy).exit_code == 0

    # Every name of the demo is one artifact: NAME@VERSION never needs a digest there.
    from trajledger import Ledger
    from trajledger.ledger.catalog import Catalog

    items = Catalog(Ledger.open(directory)).items()
    refs = [i.ref for i in items if i.kind != "trust-policy"]
    assert len(refs) == len(set(refs)), sorted(refs)
    assert {"cartpole@1", "cartpole-train@1", "cartpole-train@2", "cartpole-bc@2"} <= set(refs)
    out = tmp_path / "train-1.tar.zst"
    e = run(runner, "--ledger", directory, "export", "cartpole-train@1", "--out", out)
    assert e.exit_code == 0, e.output


def test_quickstart_refuses_a_non_empty_directory(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "x").write_text("")
    r = run(runner, "quickstart", tmp_path)
    assert r.exit_code == 3
    assert r.stderr == f"FAIL: {tmp_path}: exists and is not empty; pick a new directory\n"


def test_quickstart_with_a_passphrase_encrypts_the_keys(
    runner: CliRunner, tmp_path: Path, passphrase: str
) -> None:
    r = run(runner, "quickstart", tmp_path / "qs", "--episodes", "20")
    assert r.exit_code == 0, r.output
    assert "WARNING" not in r.stderr
    for key in (tmp_path / "qs" / "keys").glob("*.key"):
        assert key.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")


def test_an_interrupted_quickstart_leaves_no_half_made_demo(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in the middle (here: while training iteration 1) exits 130, and the directory
    the quickstart made is removed, so running it again works; it left a half-made ledger
    that the next run refused ("exists and is not empty"). A directory that was there and
    empty is left empty."""
    from trajledger.runner import train

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "train", interrupted)
    demo = tmp_path / "demo"
    r = run(runner, "quickstart", demo, "--episodes", "10")  # (the interruption comes after)
    assert r.exit_code == 130, r.output
    assert r.stderr.splitlines()[-2:] == [
        f"NOTE: the unfinished demo in {demo} was removed; run the command again",
        "FAIL: interrupted; nothing was recorded or half-written"]
    assert not demo.exists()
    demo.mkdir()
    r = run(runner, "quickstart", demo, "--episodes", "10")
    assert r.exit_code == 130, r.output
    assert demo.is_dir() and list(demo.iterdir()) == []
