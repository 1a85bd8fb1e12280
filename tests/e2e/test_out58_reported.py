"""What out58 found playing the ML engineer on the first day, the release manager and the
auditor; docs/SECURITY.md, "Review of 2026-12-07, fortieth round (out58)".

On test_evaluations' ledger (keys vendor, approver, trainer, evaluator; bc@1 and bc@2 trained
on train@1; regression@1 required at success_rate >= 0.5), through click's CliRunner; the
ledger's files (`ledger_files`: every path's mode and SHA-256) compared before and after every
refusal.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner
from test_evaluations import evals_template, evaluate, home, log_size, script  # noqa: F401
from test_out54_reported import near_suite
from test_out56_reported import WRITER, ledger_files, successor
from test_runner_cli import expect, run


def test_an_evaluation_that_writes_a_model_past_the_held_bytes_in_place_leaves_the_store(
    runner: CliRunner, home: Path, tmp_path: Path, monkeypatch: object  # noqa: F811
) -> None:
    """out56's Left (a): ``eval -- COMMAND`` whose command wrote in place a checkpoint file
    past ``workdir.HELD_BYTES`` (a 200 MiB model; here the budget is 0) wrote the store's
    object through its hard link, and the run only named it for ``fsck --repair``: the
    checkpoint, its evaluations and releases failed ``verify`` until someone found a copy. Now
    such a file is the command's own (a reflink where the filesystem has them, else a copy):
    the run is refused as before (the input changed), the store's object is untouched, and
    nothing sends the user to ``fsck``."""
    from trajledger.runner import workdir

    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    monkeypatch.setattr(workdir, "HELD_BYTES", 0)  # type: ignore[attr-defined]
    before, size = ledger_files(home), log_size(home)
    for code in ("2", "0"):
        r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
                "--", sys.executable, writer, code)
        expect(r, 1)
        assert "trainer.json" in r.stderr, r.stderr
        assert "fsck" not in r.stderr and "the store's object" not in r.stderr, r.stderr
        assert ledger_files(home) == before and log_size(home) == size
    expect(run(runner, home, "verify", "bc@1"), 0)
    expect(run(runner, home, "fsck"), 0)


def test_policy_set_of_refuse_near_names_the_releases_that_then_fail(
    runner: CliRunner, home: Path, script: Path  # noqa: F811
) -> None:
    """out56's Left (c): ``policy set`` of a successor adding ``[contamination] refuse =
    "near"`` said its settings line (``settings + contamination …``) but not that a recorded
    release whose evaluation found near duplicates of the checkpoint's training data fails
    verification from then on (out56 finding 1): the release manager learnt it from the next
    ``verify``. Now each such release is named, with the way on, before anything is signed
    (and in ``--json``'s ``failingReleases``); a successor that does not add the rule names
    none."""
    near_suite(home, "regression")
    successor(home, 2, suite="regression@2")
    evaluate(runner, home, script, "pass", checkpoint="bc@1", suite="regression@2")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    release = r.stdout.strip()
    text = (home / "policy-2.toml").read_text().replace("serial = 2", "serial = 3")
    strict = home / "policy-3.toml"
    strict.write_text(text + '\n[contamination]\nrefuse = "near"\n')
    r = run(runner, home, "policy", "set", strict, "--key", "approver", "--json")
    expect(r, 0)
    line = (f"  releases  the release of bc@1 {release[:19]}… (log index ")
    assert line in r.stderr, r.stderr
    assert " fails verification under it: its evaluation sha256:" in r.stderr, r.stderr
    assert "suite episode(s) near duplicates of bc@1's training data; to release" in r.stderr
    failing = json.loads(r.stdout)["failingReleases"]
    assert len(failing) == 1 and failing[0].startswith("the release of bc@1 "), failing
    expect(run(runner, home, "verify", release), 1)
    # The next successor keeps the rule: it adds nothing, and names nothing.
    (home / "policy-4.toml").write_text(strict.read_text().replace("serial = 3", "serial = 4"))
    r = run(runner, home, "policy", "set", home / "policy-4.toml", "--key", "approver",
            "--json")
    expect(r, 0)
    assert "  releases  " not in r.stderr and json.loads(r.stdout)["failingReleases"] == []


RANKS = textwrap.dedent(
    """
    # A launcher of two ranks (processes of their own): rank 0 saves its part of the model in
    # $TRAJLEDGER_OUTPUT_DIR; rank 1 where the script always saved it, ./checkpoints/, or only
    # its log there (argv[1]).
    import os, subprocess, sys
    if len(sys.argv) > 2:
        out = os.environ["TRAJLEDGER_OUTPUT_DIR"]
        if sys.argv[2] == "0":
            open(os.path.join(out, "rank0.bin"), "wb").write(sys.argv[1].encode())
            open(os.path.join(out, "config.json"), "w").write("{}")
        else:
            os.makedirs("checkpoints", exist_ok=True)
            name = "rank1.bin" if sys.argv[1] == "weights" else "rank1.log"
            open(os.path.join("checkpoints", name), "wb").write(b"w1")
        sys.exit(0)
    ranks = [subprocess.Popen([sys.executable, __file__, sys.argv[1], str(i)]) for i in range(2)]
    sys.exit(max(p.wait() for p in ranks))
    """
)


def test_a_rank_saving_into_the_working_directory_beside_a_full_output_is_said(
    runner: CliRunner, home: Path, tmp_path: Path, monkeypatch: object  # noqa: F811
) -> None:
    """out56's Left (b): ``train -- python launch.py`` whose rank 0 saved ``rank0.bin`` under
    ``$TRAJLEDGER_OUTPUT_DIR`` and rank 1 ``./checkpoints/rank1.bin`` in the working directory
    (where the script always saved): the checkpoint was recorded with rank 0's part alone, exit
    0, unsaid (out46's look at the working directory runs only when the output is empty). Now
    a WARNING names the file, a kind of the checkpoint's own (``.bin``), and the way on; a rank
    that wrote only its log there (``rank1.log``), or a config, is not said."""
    work = tmp_path / "work"
    work.mkdir()
    launcher = tmp_path / "launch.py"
    launcher.write_text(RANKS)
    monkeypatch.chdir(work)  # type: ignore[attr-defined]
    r = run(runner, home, "train", "--dataset", "train@1", "--key", "trainer", "--name", "ranks",
            "--version", "1", "--", sys.executable, launcher, "weights")
    expect(r, 0)
    warning = (f"WARNING: the command also wrote checkpoints/rank1.bin under {work}, outside "
               "$TRAJLEDGER_OUTPUT_DIR, files of the kind of the checkpoint's (.bin): they are "
               "not in the checkpoint recorded now")
    assert warning in r.stderr, r.stderr
    assert "write every part under $TRAJLEDGER_OUTPUT_DIR and train again" in r.stderr
    (work / "checkpoints" / "rank1.bin").unlink()
    r = run(runner, home, "train", "--dataset", "train@1", "--key", "trainer", "--name", "ranks",
            "--version", "2", "--", sys.executable, launcher, "log")
    expect(r, 0)
    assert "WARNING" not in r.stderr, r.stderr


def test_a_release_on_a_dataset_revoked_that_its_parent_was_trained_on_says_the_parent(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path  # noqa: F811
) -> None:
    """The brief's checkpoint trained on two datasets, one later revoked: bc@2 (parent bc@1)
    released, then train@1, which bc@1 was trained on (and bc@2 too), revoked. ``release
    bc@2`` and its ``--dry-run --json``'s ``next`` said ``train a checkpoint on data that
    stands ('trajledger train --dataset NAME@VERSION --key KEY')``: the engineer who does so
    with the same ``--parent bc@1``, which stands on the revoked data, is refused again. Now
    the step says the parent too; ``verify`` of the release and ``python -m verify`` of a
    bundle exported since agree (exit 1); the ledger is unchanged by the refusals."""
    from test_out54_reported import released

    release, _ = released(runner, home, script, tmp_path)
    expect(run(runner, home, "revoke", "train@1", "--key", "approver", "--reason",
               "licence withdrawn"), 0)
    before, size = ledger_files(home), log_size(home)
    step = ("bc@2 stands on it, and no release of it can stand: train a checkpoint on data that "
            "stands ('trajledger train --dataset NAME@VERSION --key KEY', with no --parent or a "
            "--parent that does not stand on it), evaluate it, then release that one")
    r = run(runner, home, "release", "bc@2", "--key", "approver")
    expect(r, 1)
    assert "> revoked: licence withdrawn" in r.stderr, r.stderr
    assert r.stderr.rstrip().endswith("; " + step), r.stderr
    r = run(runner, home, "release", "bc@2", "--dry-run", "--json")
    expect(r, 1)
    assert json.loads(r.stdout)["next"] == [step], r.stdout
    expect(run(runner, home, "verify", release), 1)
    assert ledger_files(home) == before and log_size(home) == size


def test_the_first_hours_mistakes_are_one_line_each_and_change_nothing(
    runner: CliRunner, home: Path, tmp_path: Path  # noqa: F811
) -> None:
    """What held, kept: what a new user types wrong on the first day is refused in one line
    that names the way on, with the design's exit code, and the ledger is byte for byte as it
    was: a misspelt dataset, a version not recorded, no version, a misspelt key, a training
    command without ``--name``/``--version``, an approval with the trainer's key, ``eval`` of
    another ledger's checkpoint (by digest, by name)."""
    before, size = ledger_files(home), log_size(home)
    other = "sha256:" + "1" * 64
    cases = [
        (("train", "--dataset", "trian@1", "--key", "trainer"), 3,
         "FAIL: trian@1: no dataset has this name; did you mean 'train@1'?"),
        (("train", "--dataset", "train@9", "--key", "trainer"), 3,
         "FAIL: train@9: dataset train has no version '9'; recorded versions: 1 "
         "(refer to one as train@1)"),
        (("train", "--dataset", "train", "--key", "trainer"), 3,
         "FAIL: train: needs a version (NAME@VERSION); recorded: train@1"),
        (("train", "--dataset", "train@1", "--key", "trainr"), 3, "did you mean 'trainer'?"),
        (("train", "--dataset", "train@1", "--key", "trainer", "--", sys.executable, "t.py"), 2,
         "a COMMAND needs --name and --version; see 'trajledger train --help'"),
        (("approve", "train@1", "--key", "trainer", "--expires", "30d"), 1,
         "cannot approve train@1: it holds trainer role in policy"),
        (("eval", other, "--suite", "regression@1", "--key", "evaluator", "--", sys.executable,
          "judge.py"), 3,
         f"FAIL: {other}: no checkpoint with this digest is recorded; see 'trajledger log show'"),
        (("eval", "sft-chat@1", "--suite", "regression@1", "--key", "evaluator"), 3,
         "FAIL: sft-chat@1: no checkpoint has this name; see 'trajledger log show'"),
    ]
    for argv, code, line in cases:
        r = run(runner, home, *argv)
        expect(r, code)
        assert line in r.stderr and len(r.stderr.strip().splitlines()) == 1, (argv, r.stderr)
        assert "Traceback" not in r.stderr
    assert ledger_files(home) == before and log_size(home) == size


def test_the_engineers_read_commands_print_one_json_document_each(
    runner: CliRunner, home: Path  # noqa: F811
) -> None:
    """What held, kept: ``--json`` of each read command the engineer uses is one JSON document
    (``log show``: one object a line, as docs/cli.md says), its keys as documented there; the
    ledger unchanged but for its derived index (``query`` and ``stats`` bring it up to date:
    rebuildable data, nothing verified against it)."""

    def kept(home: Path) -> dict[str, tuple[int, str]]:
        return {p: v for p, v in ledger_files(home).items() if not p.startswith("index/")}

    before = kept(home)
    keys = {
        ("show", "bc@1"): {"digest", "kind", "name", "index", "files"},
        ("log", "info"): {"origin", "size", "root", "vkey"},
        ("lineage", "bc@1"): {"ok", "nodes", "edges", "checks", "failed"},
        ("impact", "train@1"): {"ok", "nodes", "edges"},
        ("verify", "bc@1"): {"ok", "nodes", "edges", "checks"},
        ("admit", "train@1"): {"admitted", "report"},
        ("policy", "show"): {"digest", "policy", "history"},
        ("stats", "train@1"): {"digest", "kind", "aggregate", "batches"},
        ("fsck",): {"checked", "damaged", "missing"},
    }
    for argv, want in keys.items():
        r = run(runner, home, *argv, "--json")
        expect(r, 0)
        doc = json.loads(r.stdout)
        assert isinstance(doc, dict) and want <= set(doc), (argv, sorted(doc))
    for argv in (("key", "list"), ("query", "episodes", "--in", "train@1", "--limit", "2")):
        r = run(runner, home, *argv, "--json")
        expect(r, 0)
        assert isinstance(json.loads(r.stdout), list), argv
    r = run(runner, home, "log", "show", "--json")
    expect(r, 0)
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert rows and all({"envelope", "index", "kind", "signers", "subject", "time"} <= set(row)
                        for row in rows), rows[:2]
    assert kept(home) == before
