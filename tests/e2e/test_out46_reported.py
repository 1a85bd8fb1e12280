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


def test_a_batch_whose_features_file_is_not_here_is_compared_without_a_false_alarm(
    runner: CliRunner, home: Path  # noqa: F811
) -> None:
    """out46 finding 9: a bundle leaves out each batch's features file its signed record names
    (derived data: a bundle carries only what its lineage uses, and the features are computed
    again from the steps); the importer's `dataset create` then warned `its recorded features
    file … cannot be used (object …: not in the store): its features were computed from its
    steps.parquet instead (run 'trajledger fsck')`, and fsck finds nothing to repair. Absent,
    the file is computed again without a word; present and wrong, it is still said (the lead:
    batch_features.batch_features)."""
    shown = run(runner, home, "show", "train@1", "--json")
    expect(shown, 0)
    batch = json.loads(shown.stdout)["predicate"]["batches"][0]
    b = run(runner, home, "show", batch, "--json")
    expect(b, 0)
    features = json.loads(b.stdout)["predicate"]["features"]["digest"]
    held = [p for p in home.rglob(features[7:]) if p.is_file()]
    assert len(held) == 1, held
    held[0].unlink()  # as after importing the batch from a bundle
    for cached in (home / "index").rglob("*"):  # nor a copy computed earlier
        if cached.is_file() and "features" in cached.parts:
            cached.unlink()
    r = run(runner, home, "dataset", "create", "more", "--version", "1", "--split", "train",
            "--batch", batch, "--key", "vendor")
    expect(r, 0)
    assert "features" not in r.stderr and "fsck" not in r.stderr, r.stderr


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
    said = next(line for line in out.splitlines() if "'p' serial 2" in line)
    assert "· policy — the exporter's own policy 'p' serial 2 (in this bundle, log index" in said
    assert " as producer, which signed records here and your policy 'buyer' does not" in said


def test_the_look_for_files_written_elsewhere_is_bounded_by_directories_too(
        tmp_path: Path) -> None:
    """The lead's second reading of its fix of finding 7: `written_elsewhere` counted the files
    it read against its bound, not the directories, so a tree of many empty directories was
    walked whole. With a bound of 50 entries and 200 directories before the one file written,
    the look stops first (no file named), as it does for 200 files."""
    import time

    from trajledger.runner.written import written_elsewhere

    since = time.time()
    for i in range(200):
        (tmp_path / f"d{i:03}").mkdir()
    (tmp_path / "zzz").mkdir()
    (tmp_path / "zzz" / "ckpt.json").write_text("{}")
    ledger = tmp_path / "elsewhere"
    assert written_elsewhere(tmp_path, since, skip=ledger, most=50) == ""
    assert "zzz/ckpt.json" in written_elsewhere(tmp_path, since, skip=ledger, most=1_000)
