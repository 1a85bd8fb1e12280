"""Findings of out46 in files out46 does not hold this round, for the lead: each a strict xfail
that fails on a8fd2f10 and passes once fixed (then remove its mark).

On test_evaluations' ledger (vendor the producer, approver, trainer; train@1 approved;
regression@1 a regression suite). docs/SECURITY.md, "Review of 2026-12-07, thirty-first round
(out46)", the table of findings in others' files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluations import evals_template, home  # noqa: F401
from test_runner_cli import expect, run


@pytest.mark.xfail(strict=True, reason="out46 finding 7: train -- COMMAND that wrote its "
                   "checkpoint outside $TRAJLEDGER_OUTPUT_DIR says 'wrote no file' and not where "
                   "it wrote (runner/train.py, rev43)")
def test_a_command_that_wrote_its_checkpoint_elsewhere_is_told_where(
    runner: CliRunner, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """A plain training loop writes ``ckpts/step*.json`` under the current directory: the run
    is refused (nothing in the output directory), and the refusal should name what it wrote
    elsewhere during the run and where to write instead."""
    work = tmp_path / "work"
    work.mkdir()
    script = work / "train.py"
    script.write_text("import pathlib\nout = pathlib.Path('ckpts')\nout.mkdir()\n"
                      "for i in range(3):\n    (out / f'step{i}.json').write_text(str(i))\n")
    monkeypatch.chdir(work)
    r = run(runner, home, "train", "--dataset", "train@1", "--key", "trainer", "--name", "myrl",
            "--version", "1", "--", "python", str(script))
    expect(r, 1)
    assert "wrote no file in $TRAJLEDGER_OUTPUT_DIR" in r.stderr, r.stderr
    assert "ckpts/step0.json" in r.stderr, r.stderr  # what it wrote, and so where


@pytest.mark.xfail(strict=True, reason="out46 finding 8 (out45's Left): dataset create of a "
                   "train set holding a suite's batch says it is 'already in regression dataset' "
                   "and not what to do (ledger/artifacts.py, no owner)")
def test_a_train_set_holding_a_suites_batch_says_what_to_do(
    runner: CliRunner, home: Path  # noqa: F811
) -> None:
    shown = run(runner, home, "show", "regression@1", "--json")
    expect(shown, 0)
    batch = json.loads(shown.stdout)["predicate"]["batches"][0]
    r = run(runner, home, "dataset", "create", "more", "--version", "1", "--split", "train",
            "--batch", batch, "--key", "vendor")
    expect(r, 1)
    assert "is already in regression dataset regression@1" in r.stderr, r.stderr
    # the way on: leave the batch out, or hold out other data (a new suite version)
    assert "leave" in r.stderr.split("is already in regression dataset")[1], r.stderr


@pytest.mark.xfail(strict=True, reason="out46 finding 9: an export leaves out each batch's "
                   "features file its signed record names; the importer's dataset create then "
                   "warns 'cannot be used (not in the store) … run trajledger fsck', and fsck "
                   "finds nothing (ledger/bundle_write.py, upd46)")
def test_a_bundle_carries_the_features_file_each_batch_names(
    runner: CliRunner, home: Path, tmp_path: Path  # noqa: F811
) -> None:
    import io
    import tarfile

    import zstandard

    bundle = tmp_path / "train.tar.zst"
    expect(run(runner, home, "export", "train@1", "--out", bundle), 0)
    with open(bundle, "rb") as f:
        data = zstandard.ZstdDecompressor().stream_reader(f).read(1 << 30)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
    shown = run(runner, home, "show", "train@1", "--json")
    expect(shown, 0)
    for batch in json.loads(shown.stdout)["predicate"]["batches"]:
        b = run(runner, home, "show", batch, "--json")
        expect(b, 0)
        features = json.loads(b.stdout)["predicate"]["features"]["digest"]
        assert any(features[7:] in n for n in names), (features, names)


@pytest.mark.xfail(strict=True, reason="out46 finding 10 (out45's Left): a bundle of data "
                   "signed by a producer key the vendor's successor policy named, verified under "
                   "the buyer's policy trusting the old key, does not point at that successor, "
                   "which the bundle carries (log index 6) (verify/bundle.py, upd46)")
def test_a_bundle_under_the_policy_before_a_rotation_names_one_cause_and_the_successor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_key_rotation import World
    from test_key_rotation import expect as expect_rot
    from test_key_rotation import run as run_rot

    from trajledger.verify.__main__ import main as verify_main

    world = World(tmp_path)
    # The buyer's own policy (not the vendor's: the bundle's history does not succeed it),
    # trusting the vendor's first producer key.
    old = world.home / "buyer.toml"
    old.write_text(world.policy_file(1).read_text().replace('name = "p"', 'name = "buyer"'))
    expect_rot(world.policy(2, producer="vendor2"), 0)
    fresh = world.batch("vendor2")
    world.dataset("ds-new", "vendor2", fresh)
    bundle = tmp_path / "week2.tar.zst"
    expect_rot(run_rot(world.home, "export", "ds-new@1", "--out", bundle), 0)
    capsys.readouterr()
    code = verify_main([str(bundle), "--policy", str(old)])
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    first = out.splitlines()[0]
    assert " 1 problem(s) in " in first, out  # one cause (held at a8fd2f10: terms not counted)
    assert "'p' serial 2" in out, out  # the vendor's successor the bundle carries
