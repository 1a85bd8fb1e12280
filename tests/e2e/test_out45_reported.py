"""Findings of out45 in files other helpers own, as strict xfails for the lead (each failed
then; the mark removed with the fix: every one fixed, no xfail left; finding 6 by seal46).
docs/SECURITY.md, "Review of 2026-12-06, thirtieth round (out45)", the table of findings in
others' files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluations import evals_template, home  # noqa: F401
from test_runner_cli import expect, run

from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main

STEP = ('{"episode_id": "e1", "step": 0, "reward": 1.0, "obs": [0.1], "action": 0, '
        '"is_first": true, "is_last": true, "terminated": true, "truncated": false, '
        '"timestamp": "2026-12-06T22:14:28.347580Z"}\n')


def test_an_iso_8601_timestamp_in_json_lines_is_parsed_as_the_schema_says(
        runner: CliRunner, tmp_path: Path) -> None:
    """schemas/rollout-inputs.md: "ISO 8601 strings are parsed"; `export --format jsonl` writes
    every timestamp so. `validate` (and `record`) refused `'2026-12-06T22:14:28.347580Z' is not
    a valid timestamp[us, tz=UTC] value`: a batch `rollout` recorded, exported as JSON lines,
    could not be recorded again."""
    steps = tmp_path / "steps.jsonl"
    steps.write_text(STEP)
    r = runner.invoke(main, ["validate", str(steps)], prog_name="trajledger")
    expect(r, 0)


def test_a_sealed_holdout_of_a_train_sets_episodes_is_refused_as_a_plain_one_is(
        runner: CliRunner, home: Path, tmp_path: Path) -> None:  # noqa: F811
    """The researcher's "the suite turns out to be the training data": train@1's episodes
    exported, their ids changed, recorded again. Plain, `dataset create --split holdout` refuses
    them (`exactly duplicate episodes of the other split: … a copy of a run of its
    observations`); sealed, it records them after a WARNING per episode (`near duplicate
    (similarity 1.0000) of train episode …`), and `eval` then `release` of a checkpoint trained
    on train@1 pass on them without a word. Under the default policy (`[contamination] refuse
    = "exact"`) a sealed batch is compared by its published fingerprints alone: the exact hash
    (here other timestamps) and the sketch (near), not the shared run of observations that
    refuses the plain copy. Fixed by seal46: a sealed numeric episode whose published sketch
    equals a train episode's (`contamination_matcher.EQUAL_SKETCH`) is an exact duplicate."""
    out = tmp_path / "train-copy"
    expect(run(runner, home, "export", "train-batch", "--format", "jsonl", "--out", out), 0)
    copy = tmp_path / "copy.jsonl"
    with (out / "steps.jsonl").open() as f, copy.open("w") as g:
        for line in f:
            step = json.loads(line)
            step.pop("timestamp", None)  # (finding 5)
            step["episode_id"] = "copy-" + step["episode_id"]
            g.write(json.dumps(step) + "\n")
    plain = run(runner, home, "record", copy, "--env", "cartpole@1", "--policy", "p",
                "--key", "vendor", "--name", "plain-copy")
    expect(plain, 0)
    r = run(runner, home, "dataset", "create", "copied", "--version", "1", "--split", "holdout",
            "--batch", plain.stdout.strip(), "--key", "vendor")
    expect(r, 1)
    assert "exactly duplicate episodes of the other split" in r.stderr
    # The sealed copy: other ids again (a batch digest names one record).
    copy.write_text(copy.read_text().replace('"copy-', '"sealed-'))
    sealed = run(runner, home, "record", copy, "--env", "cartpole@1", "--policy", "p",
                 "--key", "vendor", "--name", "sealed-copy", "--seal")
    expect(sealed, 0)
    r = run(runner, home, "dataset", "create", "copied", "--version", "1", "--split", "holdout",
            "--batch", sealed.stdout.strip(), "--key", "vendor")
    expect(r, 1)  # seal46: its published sketches equal the train episodes' (an exact duplicate)
    assert "exactly duplicate episodes of the other split" in r.stderr
    assert "sealed, it is compared by the sketch its record publishes, and the two are equal" \
        in r.stderr
    # Nothing was recorded: `eval` on it stops there (`copied@1: no dataset has this name`).
    r = run(runner, home, "eval", "bc@1", "--suite", "copied@1", "--key", "evaluator", "--",
            "python", "-c", "pass")
    assert r.exit_code != 0 and "copied@1" in r.stderr, r.output


def test_an_approval_withdrawn_after_the_training_says_so(
        runner: CliRunner, home: Path) -> None:  # noqa: F811
    """out44's Left: "was it approved when trained on?" An approval withdrawn after bc@1 was
    trained fails bc@1 (as designed: a withdrawal counts for earlier uses too) with `approval 5
    does not count: withdrawn by revocation record N (…)`, not saying the training came while
    it stood; the auditor reads the log indices to tell."""
    r = run(runner, home, "log", "show", "--json")
    expect(r, 0)
    entries = [json.loads(line) for line in r.stdout.splitlines()]
    approval = next(e for e in entries if e["kind"] == "approval")
    trained = next(e["index"] for e in entries if e["kind"] == "checkpoint")
    assert approval["index"] < trained
    expect(run(runner, home, "revoke", approval["envelope"], "--key", "approver",
               "--reason", "approved in error"), 0)
    r = run(runner, home, "verify", "bc@1")
    expect(r, 1)
    line = next(x for x in r.stderr.splitlines() if "withdrawn by revocation record" in x)
    assert f"after the use (log index {trained})" in line, line


def test_a_bundles_report_says_what_it_cannot_know_offline(
        runner: CliRunner, home: Path, tmp_path: Path,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    """The buyer's security reviewer, air-gapped, with a dataset's bundle, the vendor's public
    keys and `python -m trajledger.verify`: the report lists what verified and says nothing of
    its horizon: a revocation the vendor logged after the bundle's checkpoint (its size) is not
    known here, and a dataset's bundle carries none of the vendor's approvals (docs/
    third-party.md: "you approve what you train on"); both go unsaid, so "revoked since?" and
    "approved by whom?" read as answered."""
    bundle = tmp_path / "train.tar.zst"
    expect(run(runner, home, "export", "train@1", "--out", bundle), 0)
    capsys.readouterr()
    assert verify_main([str(bundle), "--policy", str(home / "policy.toml")]) == 0
    out, err = capsys.readouterr()
    said = [line for line in (out + err).splitlines() if "revocation" in line.lower()]
    assert said and "approval" in out + err, out + err
