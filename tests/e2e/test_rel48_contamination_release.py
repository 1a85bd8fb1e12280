"""End to end: ``[release] require_contamination_check`` (rel48; out47's Left).

On test_evaluations' ledger (bc@1 trained on train@1; regression@1 required at success_rate
>= 0.5): an evaluation that records no comparison of its suite with bc@1's training data (as
older tooling recorded it), or one that could not compare a train batch (erased since), counts
for a release by default, said in a ``NOTE:`` line naming the evaluation and the train batches
not compared; under a successor policy that sets ``require_contamination_check = true`` the
release is refused (exit 1, one line naming them and the way on, nothing recorded), and passes
once bc@1 is evaluated again with the check. The offline verifier (a copy of ``verify/`` alone)
decides as the ledger does, from the same records, under either policy.

Findings: docs/SECURITY.md, "Review of 2026-12-07, thirty-fourth round (rel48)".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evalc46_suite_contamination import EVALUATE_ALL, evaluation
from test_evaluations import (  # noqa: F401
    evals_template,
    home,
    log_size,
    note_episode_ids,
    script,
    standalone_verify,
)
from test_out46_release import judged_by, register
from test_runner_cli import expect, run

from trajledger import Ledger

CHECK = "contamination on regression@1"
WAY = ("run 'trajledger eval bc@1 --suite regression@1 --key KEY' (KEY: a key of the policy's "
       "evaluator role) (it compares the suite with every train batch; a batch erased, or "
       "imported without its data, stays unchecked until its data is here), then 'trajledger "
       "release' again; or record a successor policy without require_contamination_check "
       "('trajledger policy set')")
"""``release``'s way on for bc@1, the checkpoint released (its ``next``)."""


def in_line(home: Path) -> str:  # noqa: F811
    """`WAY` as the check's line words it: the checkpoint evaluated by its digest (the name in
    an evaluation is its signer's: rev48 finding 8)."""
    from trajledger.ledger.catalog import Catalog

    ck = Catalog(Ledger.open(home)).resolve("bc@1").digest
    return WAY.replace("eval bc@1 ", f"eval {ck} ")


def train_batch(home: Path) -> str:  # noqa: F811
    """train@1's one batch (the digest bc@1 was trained on)."""
    from trajledger.ledger.catalog import Catalog

    return Catalog(Ledger.open(home)).resolve("train-batch", {"rollout-batch"}).digest


def unchecked_evaluation(runner: CliRunner, home: Path, script: Path,  # noqa: F811
                         monkeypatch: pytest.MonkeyPatch) -> str:
    """bc@1 evaluated on regression@1 as older tooling recorded it: no ``contamination``
    entry. Its digest."""
    from trajledger.runner import suite_contamination
    from trajledger.verify.predicates import ResourceDescriptor

    register(runner, home, "1")
    with monkeypatch.context() as m:
        m.setattr(suite_contamination.SuiteCheck, "descriptor", lambda self: ResourceDescriptor(
            name="older-tooling", uri="https://example.invalid/eval"))
        return judged_by(runner, home, script, "judge@1")


def require_check(home: Path, name: str = "policy-2.toml",  # noqa: F811
                  value: str = "true") -> Path:
    """A successor policy (serial 2) whose ``[release]`` sets the check to ``value``,
    recorded; its file."""
    text = (home / "policy.toml").read_text().replace("serial = 1", "serial = 2").replace(
        "approvals = 1", f"approvals = 1\nrequire_contamination_check = {value}")
    (home / name).write_text(text)
    Ledger.open(home).set_policy(home / name, keys=["approver"])
    return home / name


def checks(doc: dict, kind: str) -> list[dict]:  # type: ignore[type-arg]
    """The checks of the one node of ``kind`` in a report's JSON."""
    (node,) = [n for n in doc["nodes"] if n["kind"] == kind]
    return list(node["checks"])


def test_a_release_on_an_unchecked_evaluation_passes_by_default_and_fails_under_the_setting(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The brief: by default the release passes, saying which train batch its evaluation was
    not compared with; released, exported, the offline verifier agrees. Under a successor
    policy with the setting: ``release`` and ``--dry-run`` exit 1 on one line naming the
    evaluation, the train batch and the way on (``--json`` ``next`` too), nothing recorded;
    ``verify`` of the earlier release fails, and so does the offline verifier of a bundle
    exported since under that policy; the first bundle under the first policy still passes."""
    ev = unchecked_evaluation(runner, home, script, monkeypatch)
    batch = train_batch(home)
    named = (f"evaluation {ev[:19]}… (log index {{}}) records no comparison of its suite with "
             "bc@1's training data (no 'contamination' entry: made before 'eval' compared them, "
             f"or by other tooling), 1 train batch: {batch[:19]}… (train train@1)")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    assert f"NOTE: release of bc@1: {CHECK}: evaluation {ev[:19]}…" in r.stderr, r.stderr
    assert f"1 train batch: {batch[:19]}… (train train@1); it counts, unchecked" in r.stderr
    rel = r.stdout.strip().splitlines()[-1]
    first = tmp_path / "first.tar.zst"
    expect(run(runner, home, "export", rel, "--out", first), 0)
    proc = standalone_verify(tmp_path / "a", first, home / "policy.toml")
    assert proc.returncode == 0, proc.stderr
    assert f"· {CHECK} — evaluation {ev[:19]}…" in proc.stdout, proc.stdout

    policy = require_check(home)
    size = log_size(home)
    for args in ((), ("--dry-run",)):
        r = run(runner, home, "release", "bc@1", "--key", "approver", *args)
        expect(r, 1)
        (line,) = [x for x in r.stderr.splitlines() if CHECK in x]
        index = line.split("(log index ")[1].split(")")[0]
        assert line == (f"FAIL: release of bc@1 > {CHECK}: {named.format(index)}; the policy's "
                        "[release] require_contamination_check counts no such evaluation: "
                        + in_line(home)), line
        assert "refused, 1 problem(s)" in r.stderr, r.stderr
    r = run(runner, home, "release", "bc@1", "--key", "approver", "--dry-run", "--json")
    expect(r, 1)
    doc = json.loads(r.stdout)
    assert doc["next"] == [WAY], doc["next"]
    (check,) = [c for c in checks(doc["report"], "release-decision") if c["what"] == CHECK]
    assert check["status"] == "fail", check
    assert log_size(home) == size

    # The release recorded before: judged by the policy in force, here and offline alike.
    r = run(runner, home, "verify", rel)
    expect(r, 1)
    assert f"✗ {CHECK} — evaluation {ev[:19]}…" in r.stdout, r.stdout
    later = tmp_path / "later.tar.zst"
    expect(run(runner, home, "export", rel, "--out", later), 0)
    proc = standalone_verify(tmp_path / "b", later, policy)
    assert proc.returncode == 1, proc.stderr
    assert f"{CHECK}: {named.format(index)}; the policy's [release] " in proc.stderr + proc.stdout
    proc = standalone_verify(tmp_path / "c", first, home / "policy.toml")
    assert proc.returncode == 0, proc.stderr

    # Evaluated again, with the check 'eval' makes: the release passes under the setting.
    judged_by(runner, home, script, "judge@1")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    assert "NOTE" not in r.stderr and "contamination" not in r.stderr, r.stderr
    again = r.stdout.strip().splitlines()[-1]
    expect(run(runner, home, "verify", again), 0)
    bundle = tmp_path / "again.tar.zst"
    expect(run(runner, home, "export", again, "--out", bundle), 0)
    proc = standalone_verify(tmp_path / "d", bundle, policy)
    assert proc.returncode == 0, proc.stderr


def test_an_evaluation_that_could_not_compare_a_train_batch_is_named_by_the_release(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path,  # noqa: F811
) -> None:
    """out47 Left 6: an evaluation whose ``contamination`` entry says ``unchecked`` 1 (train@1's
    batch erased before it ran) counted for a release without a word. The release names it
    and the batch (a NOTE by default; a FAIL under the setting, here and offline)."""
    batch = train_batch(home)
    expect(run(runner, home, "erase", "train-batch", "--key", "approver", "--reason",
               "consent"), 0)
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            "--", sys.executable, "-c", EVALUATE_ALL)
    expect(r, 0)
    ev = r.stdout.strip().splitlines()[-1]
    assert evaluation(home, ev)["uncheckedBatches"] == [batch]
    said = (f"{CHECK}: evaluation {ev[:19]}… (log index {log_size(home) - 1}) did not compare "
            f"its suite with 1 train batch: {batch[:19]}… (train train@1) of bc@1's training "
            "data, unreadable where it ran (erased, or imported without their data)")
    r = run(runner, home, "release", "bc@1", "--dry-run")
    expect(r, 0)
    assert f"NOTE: release of bc@1: {said}; it counts, unchecked" in r.stderr, r.stderr
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    rel = r.stdout.strip().splitlines()[-1]

    policy = require_check(home)
    r = run(runner, home, "release", "bc@1", "--key", "approver", "--dry-run")
    expect(r, 1)
    assert (f"FAIL: release of bc@1 > {said}; the policy's [release] "
            f"require_contamination_check counts no such evaluation: {in_line(home)}\n"
            ) in r.stderr, r.stderr
    r = run(runner, home, "verify", rel)
    expect(r, 1)
    bundle = tmp_path / "rel.tar.zst"
    expect(run(runner, home, "export", rel, "--out", bundle), 0)
    proc = standalone_verify(tmp_path / "a", bundle, policy)
    assert proc.returncode == 1, proc.stderr
    assert said in proc.stderr + proc.stdout, proc.stderr + proc.stdout


def test_an_evaluation_entry_counting_unchecked_batches_without_naming_them_says_how_many(
    runner: CliRunner, home: Path, script: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An entry with ``unchecked`` 2 and no ``uncheckedBatches`` (as ``eval`` wrote it before
    rel48): the release says how many, and counts it only without the setting."""
    from trajledger.runner import suite_contamination

    register(runner, home, "1")
    with monkeypatch.context() as m:
        descriptor = suite_contamination.SuiteCheck.descriptor

        def older(self: suite_contamination.SuiteCheck) -> object:
            d = descriptor(self)
            d.annotations["unchecked"] = 2
            return d

        m.setattr(suite_contamination.SuiteCheck, "descriptor", older)
        ev = judged_by(runner, home, script, "judge@1")
    said = ("did not compare its suite with 2 train batches of bc@1's training data, "
            "unreadable where it ran")
    r = run(runner, home, "release", "bc@1", "--dry-run")
    expect(r, 0)
    assert f"{CHECK}: evaluation {ev[:19]}…" in r.stderr and said in r.stderr, r.stderr
    require_check(home)
    r = run(runner, home, "release", "bc@1", "--key", "approver", "--dry-run")
    expect(r, 1)
    assert f"FAIL: release of bc@1 > {CHECK}: evaluation {ev[:19]}…" in r.stderr, r.stderr
    assert said in r.stderr, r.stderr


@pytest.mark.parametrize("value", ['"true"', "1", '"yes"'])
def test_a_value_that_is_no_boolean_is_refused_at_policy_time(
    runner: CliRunner, home: Path, value: str  # noqa: F811
) -> None:
    """``policy check`` and ``policy set`` refuse the setting as anything but true or false,
    one line saying what it means and the default; nothing recorded."""
    text = (home / "policy.toml").read_text().replace("serial = 1", "serial = 2").replace(
        "approvals = 1", f"approvals = 1\nrequire_contamination_check = {value}")
    (home / "policy-2.toml").write_text(text)
    size = log_size(home)
    for args in (("check",), ("set", "--key", "approver", "--yes")):
        r = run(runner, home, "policy", args[0], str(home / "policy-2.toml"), *args[1:])
        # (check: the file judged invalid, 1; set: the user's file to fix, a usage error: left36)
        expect(r, {"check": 1, "set": 2}[args[0]])
        assert ("release: require_contamination_check must be true or false (unquoted), got "
                f"{value.replace(chr(34), chr(39))}: true refuses a release") in r.stderr, r.stderr
    assert log_size(home) == size


def test_policy_show_says_the_setting(runner: CliRunner, home: Path) -> None:  # noqa: F811
    """``policy show`` names the setting on the release line; ``false`` reads as without."""
    require_check(home)
    r = run(runner, home, "policy", "show")
    expect(r, 0)
    assert "(require_contamination_check)" in r.stdout, r.stdout
