"""End to end: evaluations, releases, sealed suites, failures as the next suite, calibration.

On copies of one CartPole ledger (built once): keys vendor (producer), approver, trainer,
evaluator (and its X25519 key), outsider (an X25519 key no suite is sealed to); a format-2
policy whose [release] requires success_rate >= 0.5 on regression@1 with no drop of more than
0.1 from the parent's evaluation; checkpoints bc@1 and bc@2 (parent bc@1) trained on train@1;
regression@1 (plain) and holdout@1 (sealed to the evaluator). Through click's CliRunner,
asserting exit codes and stderr:

- ``eval`` built in for a Gymnasium policy (seeds replayed) and by command (results.json);
  refusals: not an evaluator key, a train split, a failing command, invalid results;
- ``release`` refused for a missing, then a failing evaluation, accepted once one passes; a
  later failing evaluation is not hidden; a drop from the parent refuses;
- the release exported and verified offline by a copy of ``verify/`` alone, and a bundle whose
  evaluation was altered refused;
- the sealed suite: no plaintext in the store, export refused, unreadable with a key it is not
  sealed to, evaluated with the evaluator's (the unsealing logged first); a tampered
  ciphertext fails verify and fsck; the gate refuses a train set duplicating its episodes;
- ``dataset create --from-failures`` makes the next regression suite, linked to the evaluation;
- ``stats --judge`` calls a judge calibrated only on its calibration dataset's expert labels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import tamperkit as tk
from click.testing import CliRunner
from test_runner_cli import expect, run  # tests/e2e is on sys.path (its conftest)

REPO = Path(__file__).resolve().parents[2]

POLICY = """\
format = 2
name = "evals"
serial = 1

[roles.producer]
keys = ["keys/vendor.pub"]

[roles.approver]
keys = ["keys/approver.pub"]

[roles.trainer]
keys = ["keys/trainer.pub"]

[roles.evaluator]
keys = ["keys/evaluator.pub"]
encryption_keys = ["keys/x25519/evaluator.pub"]

[roles.log]
vkeys = ["{vkey}"]

[release]
approvals = 1

[[release.require]]
suite = "regression@1"
min = 0.5
max_drop = 0.1
"""

EVALUATE = textwrap.dedent(
    """
    # An evaluating command: reads the suite and the checkpoint, writes results.json.
    import hashlib, json, os, pathlib, sys
    suite = pathlib.Path(os.environ["TRAJLEDGER_SUITE_DIR"])
    ckpt = pathlib.Path(os.environ["TRAJLEDGER_CHECKPOINT_DIR"])
    out = pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"])
    mode = sys.argv[1]
    if mode == "exit3":
        sys.exit(3)
    assert (ckpt / "trainer.json").is_file()
    listing = json.loads((suite / "manifest.json").read_text())
    # The episode ids of an episodes.parquet the test read (`note_episode_ids`), by its bytes'
    # digest; any other read with pyarrow (0.25 CPU-s of imports).
    noted = pathlib.Path(sys.argv[0]).with_name("episode-ids.json")
    known = json.loads(noted.read_text()) if noted.is_file() else {}
    episodes = []
    for b in listing["batches"]:
        path = suite / b["directory"] / "episodes.parquet"
        ids = known.get(hashlib.sha256(path.read_bytes()).hexdigest())
        if ids is None:  # (from the path: Arrow's threads on a Python file abort at exit)
            import pyarrow.parquet as pq
            ids = pq.read_table(path).column("episode_id").to_pylist()
        for i, e in enumerate(ids):
            passed = {"pass": True, "fail": False}.get(mode, i % 2 == 0)
            episodes.append({"batch": b["digest"], "episode_id": e, "passed": passed,
                             "metrics": {"score": float(i)}})
    if mode == "missing":
        episodes.pop()
    if mode == "tamper":
        (suite / "README.md").chmod(0o644)
        (suite / "README.md").write_text("changed")
    (out / "results.json").write_text(json.dumps(
        {"format": "trajledger.eval-results/1", "episodes": episodes, "metrics": {"mean": 1.5}}))
    if mode != "results-only":
        (out / "notes.txt").write_text("evaluated")
    print("evaluated", len(episodes))
    """
)


def cartpole_ledger(home: Path, train_episodes: int) -> Any:
    """A ledger with the keys and policy of the module doc, cartpole@1, and train@1 (random
    rollouts of seeds 0.., approved)."""
    from trajledger import Ledger
    from trajledger.runner.rollouts import run_policy

    ledger = Ledger.init(home, origin=f"test/{home.parent.name}")
    for k in ("vendor", "approver", "trainer", "evaluator"):
        ledger.keys.create(k, encrypt=False)
    for k in ("evaluator", "outsider"):
        ledger.keys.create_encryption_key(k, encrypt=False)
    (home / "policy.toml").write_text(POLICY.format(vkey=ledger.log.vkey))
    ledger.set_policy(home / "policy.toml", keys=["approver"])
    ledger.register_environment("cartpole", "1", key="vendor", gym_id="CartPole-v1")
    played = run_policy(None, "CartPole-v1", train_episodes, 0, policy_version="random")
    batch = ledger.record_batch(played.steps, episodes=played.episodes, env="cartpole@1",
                                policy="random", key="vendor", name="train-batch")
    ledger.create_dataset("train", "1", "train", [batch.digest], key="vendor")
    ledger.approve("train@1", key="approver")
    return ledger


@pytest.fixture(scope="session")
def evals_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trajledger.runner.rollouts import run_policy

    home = tmp_path_factory.mktemp("evals-template") / "home"
    ledger = cartpole_ledger(home, 30)
    config = {"top_fraction": 0.5}
    ledger.train("train@1", key="trainer", name="bc", version="1", config=config, seed=1)
    ledger.train("train@1", key="trainer", name="bc", version="2", config=config, seed=2,
                 parent="bc@1")
    reg = run_policy(None, "CartPole-v1", 6, 1000, policy_version="random")
    rb = ledger.record_batch(reg.steps, episodes=reg.episodes, env="cartpole@1",
                             policy="random", key="vendor", name="regression-batch")
    ledger.create_dataset("regression", "1", "regression", [rb.digest], key="vendor")
    held = run_policy(None, "CartPole-v1", 4, 2000, policy_version="random")
    hb = ledger.record_batch(held.steps, episodes=held.episodes, env="cartpole@1",
                             policy="random", key="vendor", name="holdout-batch", seal=True)
    ledger.create_dataset("holdout", "1", "holdout", [hb.digest], key="vendor")
    return home


@pytest.fixture
def home(evals_template: Path, tmp_path: Path) -> Path:
    out = tmp_path / "home"
    shutil.copytree(evals_template, out)
    tk.pin_log(out)  # this test's user knows the log (a copy is no first use)
    return out


def note_episode_ids(home: Path, script: Path) -> None:
    """Write beside ``script`` the episode ids of every Parquet file in ``home``'s store that
    has them (a suite's episodes.parquet among them), by the file's SHA-256: `EVALUATE` reads
    a suite's episodes.parquet and takes its ids from there, without importing pyarrow in each
    evaluating process (suite42: about 40 of them here). A file not noted (a sealed suite's,
    a batch recorded since) is read with pyarrow, as before."""
    import hashlib

    import pyarrow.parquet as pq

    known = {}
    for top, _, files in os.walk(home / "objects"):
        for name in files:
            with open(os.path.join(top, name), "rb") as f:
                data = f.read()
            if data[:4] != b"PAR1" or data[-4:] != b"PAR1":
                continue
            table = pq.read_table(pa.BufferReader(data))
            if "episode_id" in table.column_names:
                known[hashlib.sha256(data).hexdigest()] = table.column("episode_id").to_pylist()
    script.with_name("episode-ids.json").write_text(json.dumps(known))


@pytest.fixture
def script(tmp_path: Path, home: Path) -> Path:
    """`EVALUATE`, the episode ids of ``home`` noted beside it (`note_episode_ids`; again
    by `evaluate`, for the batches a test records)."""
    path = tmp_path / "evaluate.py"
    path.write_text(EVALUATE)
    note_episode_ids(home, path)
    return path


def log_size(home: Path) -> int:
    from trajledger import Ledger

    return Ledger.open(home).log.size


def entries(home: Path) -> list[Any]:
    from trajledger import Ledger
    from trajledger.verify.log_entry import LogEntry

    log = Ledger.open(home).log
    return [LogEntry.from_bytes(e) for e in log.entries(0, log.size)]


def predicate(home: Path, digest: str, kind: str) -> dict[str, Any]:
    from trajledger import Ledger
    from trajledger.verify.dsse import Envelope

    entry = next(e for e in entries(home) if e.subject == digest and e.kind == kind)
    body = json.loads(Envelope.from_bytes(Ledger.open(home).store.get(entry.envelope)).payload)
    assert isinstance(body["predicate"], dict)
    return body["predicate"]


def evaluate(runner: CliRunner, home: Path, script: Path, mode: str,
             checkpoint: str = "bc@1", suite: str = "regression@1") -> str:
    note_episode_ids(home, script)
    r = run(runner, home, "eval", checkpoint, "--suite", suite, "--key", "evaluator", "--",
            sys.executable, script, mode)
    expect(r, 0)
    return r.stdout.strip().splitlines()[-1]


# -- evaluations --------------------------------------------------------------------------------



def _forced_release(ledger: Any, cited: list[str]) -> Any:
    """A release of bc@2 citing ``cited``, recorded by an approver's own tooling (no rule
    judged): what the verifier must judge."""
    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.record import record_statement
    from trajledger.ledger.signing import canonical_json
    from trajledger.verify import predicates
    from trajledger.verify.digest import digest_bytes
    from trajledger.verify.other_predicates import Release
    from trajledger.verify.predicates import ArtifactRef
    from trajledger.verify.times import now

    ck = Catalog(ledger).resolve("bc@2")
    body = Release(ArtifactRef("bc", "2", ck.digest), tuple(sorted(cited)),
                   {"name": "evals", "serial": 1, "digest": "sha256:" + "0" * 64},
                   now(), None).written("release")
    return record_statement(ledger, "release of bc@2", digest_bytes(canonical_json(body)),
                            predicates.RELEASE, body, [ledger.keys.signer("approver")])


def test_eval_builtin_replays_the_suite_seeds(runner: CliRunner, home: Path) -> None:
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            "--pass-return", "20")
    expect(r, 0)
    digest = r.stdout.strip()
    pred = predicate(home, digest, "evaluation")
    tests = pred["passedTests"] + pred["failedTests"]
    assert len(tests) == 6 and pred["metrics"]["episodes"] == 6
    assert r.stderr == (
        f"OK: evaluation of bc@1 on regression@1 recorded at log index {log_size(home) - 1}: "
        f"{len(pred['passedTests'])} of 6 episode(s) passed (success rate "
        f"{len(pred['passedTests']) / 6:.3f})\n"
    )
    assert pred["suite"]["name"] == "regression" and pred["checkpoint"]["version"] == "1"
    assert pred["configuration"][0]["uri"] == "https://trajledger.dev/evaluator/gymnasium-replay/v1"
    assert pred["configuration"][0]["annotations"]["passReturn"] == {"CartPole-v1": 20.0}
    # The seeds the suite recorded are the ones replayed: each result's episode is a suite
    # episode, and a return at or above 20 is exactly what passed.
    from trajledger import Ledger
    from trajledger.runner.evaluate import RESULTS_FILE

    ledger = Ledger.open(home)
    from trajledger.ledger.artifacts import batch_files

    results = json.loads(ledger.store.get(batch_files(ledger, digest)[RESULTS_FILE]))
    assert {f"{e['batch']}/{e['episode_id']}" for e in results["episodes"]} == set(tests)
    assert all(e["passed"] == (e["metrics"]["return"] >= 20) for e in results["episodes"])
    assert [e["episode_id"].rsplit("/", 1)[1] for e in results["episodes"]] == [
        str(s) for s in range(1000, 1006)
    ]
    expect(run(runner, home, "verify", digest), 0)


def test_gc_keeps_an_evaluations_files_and_fsck_checks_them(
    runner: CliRunner, home: Path
) -> None:
    """An evaluation's subject is a manifest of files in the store, as a checkpoint's is. fsck
    did not name it (its list of such kinds lacked evaluations), so 'gc --yes' deleted the
    manifest of every evaluation no release or later suite cited, and 'verify EVAL' then
    failed ("manifest ... is missing") while fsck said the ledger was sound."""
    from trajledger import Ledger
    from trajledger.ledger.artifacts import batch_files

    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            "--pass-return", "20")
    expect(r, 0)
    digest = r.stdout.strip()
    r = run(runner, home, "fsck", "--json")
    expect(r, 0)
    assert json.loads(r.stdout)["orphans"] == {}
    expect(run(runner, home, "gc", "--yes", "--min-age", "0"), 0)
    expect(run(runner, home, "verify", digest), 0)
    ledger = Ledger.open(home)
    results = ledger.store.path_of(batch_files(ledger, digest)["results.json"])
    results.chmod(0o644)
    results.unlink()
    r = run(runner, home, "fsck")
    expect(r, 1)
    assert "blob results.json of entry" in r.stderr, r.stderr


def test_a_command_that_changes_two_inputs_has_both_named_and_the_store_put_back(
    runner: CliRunner, home: Path
) -> None:
    """A command that writes through the hard links of both its checkpoint and its suite
    directory: the check stopped at the first input that changed, so the suite's file (whose
    verified bytes are in memory) was neither named nor put back in the store, which stayed
    damaged. Every input is checked now: both named, both objects put back (the
    checkpoint's from the bytes read as they were hashed, out56; past
    ``workdir.HELD_BYTES`` it is the command's own copy, the store untouched:
    test_out58_reported)."""
    code = textwrap.dedent(
        """
        import os, pathlib
        for var, suffix in (("TRAJLEDGER_CHECKPOINT_DIR", ".npz"),
                            ("TRAJLEDGER_SUITE_DIR", ".parquet")):
            f = sorted(pathlib.Path(os.environ[var]).rglob("*" + suffix))[0]
            os.chmod(f.parent, 0o755)
            os.chmod(f, 0o644)
            with open(f, "r+b") as h:
                h.seek(10)
                h.write(b"XXXX")
        """
    )
    size = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            "--", sys.executable, "-c", code)
    expect(r, 1)
    lines = r.stderr.splitlines()
    assert any(x.startswith("FAIL: $TRAJLEDGER_CHECKPOINT_DIR (") for x in lines), r.stderr
    assert any(x.startswith("FAIL: $TRAJLEDGER_SUITE_DIR (") for x in lines), r.stderr
    assert len([x for x in lines if "it was put back from the verified bytes" in x]) == 2, \
        r.stderr
    assert log_size(home) == size
    expect(run(runner, home, "fsck", "--json"), 0)


def test_eval_by_command(runner: CliRunner, home: Path, script: Path) -> None:
    from trajledger.verify.other_predicates import Evaluation

    digest = evaluate(runner, home, script, "alternate")
    pred = predicate(home, digest, "evaluation")
    ev = Evaluation.from_predicate(pred)
    assert ev.result == "FAILED" and len(ev.passed_tests) == 3 and len(ev.failed_tests) == 3
    assert ev.success_rate == 0.5 and ev.metrics["mean"] == 1.5
    roles = [d.get("annotations", {}).get("role") for d in pred["configuration"]]
    assert roles[:3] == ["command", "source", "dependency-lock"]
    assert [d["name"] for d in pred["configuration"][3:]] == [
        "exit-code", "stdout", "stderr", "contamination"]  # (evalc46: the suite was compared)
    assert pred["configuration"][-1]["annotations"] == {
        "role": "contamination-check", "trainBatches": 1, "suiteEpisodes": 6,
        "trainEpisodes": 30, "exact": 0, "near": 0, "unchecked": 0, "refuse": "exact",
        "runs": "exact"}
    assert [f["path"] for f in pred["manifest"]["files"]] == [
        "notes.txt", "results.json", "trajledger-run/evaluation.json"]
    expect(run(runner, home, "verify", digest), 0)
    # lineage of the evaluation: the checkpoint, the suite; impact of the checkpoint: it.
    r = run(runner, home, "lineage", digest, "--format", "json")
    expect(r, 0)
    roles_seen = {e["role"] for e in json.loads(r.stdout)["edges"] if e["from"] == digest}
    assert roles_seen == {"checkpoint", "suite"}
    r = run(runner, home, "impact", "bc@1", "--format", "json")
    assert digest in {n["id"] for n in json.loads(r.stdout)["nodes"]}
    r = run(runner, home, "stats", "bc@1")
    expect(r, 0)
    assert f"evaluation {digest[:19]}… (log index" in r.stdout
    assert "on regression@1: FAILED, success rate 0.500 over 6 episode(s)" in r.stdout


@pytest.mark.parametrize("suite", ["regression@1", "holdout@1"])
def test_a_suite_over_the_step_limit_is_refused_before_it_is_read(
    runner: CliRunner, home: Path, script: Path, monkeypatch: pytest.MonkeyPatch, suite: str
) -> None:
    """A suite's batch (another party's, sealed or not) is held to ``TRAJLEDGER_MAX_STEPS``
    as a batch at the gate is (rev46 finding 2: eval read a plain suite's steps whole
    whatever the limit, and compared them with the training data; a sealed one's were bounded
    by its fingerprints' check): refused, exit 1, the setting named, no evaluation
    recorded."""
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "5")
    size = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", suite, "--key", "evaluator", "--",
            sys.executable, script, "alternate")
    expect(r, 1)
    assert r.stderr.startswith("FAIL: ") and "more than the 5 " in r.stderr
    assert "(TRAJLEDGER_MAX_STEPS), refused before reading them" in r.stderr
    assert [e.kind for e in entries(home)[size:]] in ([], ["unsealing"])


@pytest.mark.parametrize(("revoked", "why"), [
    ("regression@1", "dataset regression@1"),
    ("bc@1", "checkpoint bc@1"),
])
def test_a_suite_or_checkpoint_revoked_during_the_run_records_no_evaluation(
    runner: CliRunner, home: Path, tmp_path: Path, revoked: str, why: str
) -> None:
    """The command revokes the suite (or the checkpoint) while it evaluates, as an approver
    would meanwhile. Before rev13 the evaluation was recorded, 'OK' (exit 0), and failed
    verification from its first day (its suite revoked): the release then said 'missing: run
    eval'. Now it is judged again before it is stored and under the log's lock."""
    evaluate_py = tmp_path / "evaluate.py"
    evaluate_py.write_text(
        "from trajledger import Ledger\n"
        f"Ledger.open({str(home)!r}).revoke({revoked!r}, key='approver', reason='leaked')\n"
        + EVALUATE)
    before = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            "--", sys.executable, evaluate_py, "pass")
    expect(r, 1)
    lines = [line for line in r.stderr.splitlines() if line.startswith("FAIL: ")]
    assert lines[0] == ("FAIL: evaluation of bc@1 on regression@1: refused when it was to be "
                        "recorded (the rules changed during the run), 1 problem(s); nothing "
                        "was recorded"), r.stderr
    assert lines[1].startswith(f"FAIL: {why} (sha256:"), r.stderr
    assert lines[1].endswith("> revoked: leaked (log index 11)"), r.stderr
    assert [e.kind for e in entries(home)[before:]] == ["revocation"]


def test_an_evaluation_racing_a_key_rotation_is_recorded_under_the_new_key(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    """The command rotates the log's key while it evaluates (``log rotate-key`` of another
    process). rev13 refused the record (exit 3: the key was rotated while it ran); since
    fix13 the writer follows the handover the old key signed and signs with the new key."""
    from trajledger.verify.checkpoint import verify_checkpoint
    from trajledger.verify.note import Note, verifier_from_vkey

    evaluate_py = tmp_path / "evaluate.py"
    evaluate_py.write_text(
        "from trajledger import Ledger\n"
        f"Ledger.open({str(home)!r}).rotate_log_key()\n" + EVALUATE)
    before = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            "--", sys.executable, evaluate_py, "pass")
    expect(r, 0)
    assert [e.kind for e in entries(home)[before:]] == ["evaluation"]
    note = (home / "log" / "checkpoint").read_bytes()
    assert len(Note.from_bytes(note).signatures) == 1
    verify_checkpoint(note, verifier_from_vkey((home / "log" / "vkey").read_text().strip()))
    expect(run(runner, home, "log", "verify"), 0)


def test_eval_refusals(runner: CliRunner, home: Path, script: Path) -> None:
    size = log_size(home)
    cmd = ["--", sys.executable, str(script)]
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "trainer",
            *cmd, "pass")
    expect(r, 1)
    assert r.stderr.startswith("FAIL: key trainer (")
    assert "does not hold the evaluator role in policy 'evals' serial 1 (format 2)" in r.stderr
    r = run(runner, home, "eval", "bc@1", "--suite", "train@1", "--key", "evaluator", *cmd,
            "pass")
    expect(r, 1)
    assert r.stderr.startswith("FAIL: evaluation of bc@1 on train@1: refused, 1 problem(s); "
                               "nothing was read\n")
    assert "is a 'train' split; evaluate on a holdout or regression dataset" in r.stderr
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            *cmd, "exit3")
    expect(r, 1)
    assert r.stderr.endswith(f"FAIL: command '{sys.executable} {script} exit3' exited with "
                             "code 3; nothing was recorded\n")
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            *cmd, "missing")
    expect(r, 1)
    assert "FAIL: results.json of" in r.stderr
    assert "1 episode(s) of the suite have no result (first: batch sha256:" in r.stderr
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            *cmd, "tamper")
    expect(r, 1)
    assert "$TRAJLEDGER_SUITE_DIR" in r.stderr and "nothing was recorded" in r.stderr
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            "--pass-return", "1", *cmd, "pass")
    expect(r, 2)
    assert log_size(home) == size
    # A checkpoint a command trained has no built-in policy: the message says what to do.
    write = ("import os, pathlib; "
             "pathlib.Path(os.environ['TRAJLEDGER_OUTPUT_DIR'], 'w').write_text('1')")
    expect(run(runner, home, "train", "--dataset", "train@1", "--key", "trainer", "--name", "cmd",
               "--version", "1", "--", sys.executable, "-c", write), 0)
    r = run(runner, home, "eval", "cmd@1", "--suite", "regression@1", "--key", "evaluator",
            "--pass-return", "1")
    expect(r, 1)
    assert r.stderr.startswith("FAIL: checkpoint cmd@1: the built-in evaluator plays policies "
                               "of the built-in trainers only (checkpoint has no trainer.json")
    assert r.stderr.endswith("evaluate it with '-- COMMAND'\n")


@pytest.mark.parametrize(
    ("results", "message"),
    [
        ({"format": "x", "episodes": []}, "want format 'trajledger.eval-results/1'"),
        ({"format": "trajledger.eval-results/1", "episodes": [], "extra": 1}, "unknown: ['extra']"),
        ({"format": "trajledger.eval-results/1", "episodes": [], "metrics": {"success_rate": 1}},
         "metrics ['success_rate'] are computed"),
        ({"format": "trajledger.eval-results/1", "episodes": [{"batch": "B", "episode_id": "e",
                                                               "passed": 1}]},
         "passed must be true or false"),
        ({"format": "trajledger.eval-results/1", "episodes": [{"batch": "B", "episode_id": "x",
                                                               "passed": True}]},
         "is not an episode of the suite"),
        ({"format": "trajledger.eval-results/1", "episodes": [
            {"batch": "B", "episode_id": "e", "passed": True}] * 2}, "again"),
        ({"format": "trajledger.eval-results/1", "episodes": [
            {"batch": "B", "episode_id": "e", "passed": True, "metrics": {"r": "1"}}]},
         "is not a finite number"),
        ({"format": "trajledger.eval-results/1", "episodes": [
            {"batch": "B", "episode_id": "e", "passed": True, "why": "x"}]}, "want an object"),
    ],
)
def test_results_json_is_strict(results: dict[str, Any], message: str) -> None:
    from trajledger.runner.evaluate import Results
    from trajledger.verify.errors import FormatError

    with pytest.raises(FormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Results.from_bytes(json.dumps(results).encode(), {"B": ["e"]}, "results.json")
    with pytest.raises(FormatError, match="duplicate"):
        Results.from_bytes(b'{"format": 1, "format": 2}', {}, "results.json")


# -- releases ---------------------------------------------------------------------------------


def test_release_refused_missing_then_failing_then_accepted(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path
) -> None:
    size = log_size(home)
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 1)
    lines = r.stderr.splitlines()
    assert lines[0] == "FAIL: release of bc@1: refused, 1 problem(s); nothing was recorded"
    assert lines[1].startswith("FAIL: release of bc@1 > success_rate on regression@1: missing: "
                               "no verified evaluation of sha256:")
    assert lines[1].endswith(" --suite regression@1 --key KEY' (KEY: a key of the policy's "
                             "evaluator role)")  # (a command that runs as printed: out43)
    assert log_size(home) == size
    failing = evaluate(runner, home, script, "fail")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 1)
    assert (f"FAIL: release of bc@1 > success_rate on regression@1: success_rate 0 is below the "
            f"minimum 0.5 (evaluation {failing[:19]}… (log index ") in r.stderr
    passing = evaluate(runner, home, script, "pass")
    r = run(runner, home, "release", "bc@1", "--key", "trainer")
    expect(r, 1)
    assert "does not hold the approver role" in r.stderr
    r = run(runner, home, "release", "bc@1", "--key", "approver", "--note", "ship it")
    expect(r, 0, f"OK: release of bc@1 recorded at log index {log_size(home) - 1} on 1 "
                 "evaluation(s)\n")
    release = r.stdout.strip()
    body = predicate(home, release, "release")
    assert body["evaluations"] == [passing] and body["note"] == "ship it"
    assert body["policy"]["name"] == "evals" and body["policy"]["serial"] == 1
    expect(run(runner, home, "verify", release), 0)

    # Offline, by a copy of verify/ alone, from the exported bundle.
    bundle = tmp_path / "release.tar.zst"
    expect(run(runner, home, "export", release, "--out", bundle), 0)
    proc = standalone_verify(tmp_path, bundle, home / "policy.toml")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith(f"OK: {bundle}: ") and "checks passed" in proc.stderr
    assert "success_rate on regression@1 — 1 (evaluation" in proc.stdout

    # A later failing evaluation is the one that counts: the release would be refused now.
    # (Not in the second of the first failing run: with the same results its record would be
    # the same artifact, and is not recorded again: test_a_rerun_identical_to_an_earlier_one_
    # in_the_same_second_is_recorded, open.)
    from trajledger.verify.times import now

    first = predicate(home, failing, "evaluation")["evaluatedAt"]
    while now() == first:
        time.sleep(0.05)
    evaluate(runner, home, script, "fail")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 1)
    assert "success_rate 0 is below the minimum 0.5" in r.stderr


def test_a_rerun_identical_to_an_earlier_one_in_the_same_second_is_recorded(
    runner: CliRunner, home: Path, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """suite42 finding 5: an evaluation's record names its time (``evaluatedAt``, to the
    second) so that each run is an artifact of its own even with another's results. A run that
    failed as an earlier one did, in the same second, was that earlier artifact: ``eval`` said
    OK and printed its digest, but nothing was recorded, and a passing run between the two
    stayed the latest: the release was accepted while the newest run failed (seen about once in
    four runs of test_release_refused_missing_then_failing_then_accepted on a quiet machine once
    its evaluating command took 0.03 CPU-s). Such a run is now recorded at the next second (the
    lead). The clock is held at one second for the three runs here, then moves on."""
    from trajledger.runner import evaluate as evaluating

    calls: list[int] = []

    def clock() -> str:
        calls.append(1)
        return "2026-12-06T14:30:00Z" if len(calls) <= 3 else "2026-12-06T14:30:01Z"

    monkeypatch.setattr(evaluating, "now", clock)
    failing = evaluate(runner, home, script, "fail")
    evaluate(runner, home, script, "pass")
    size = log_size(home)
    again = evaluate(runner, home, script, "fail")
    assert again != failing and log_size(home) == size + 1, "the later run was not recorded"
    assert predicate(home, again, "evaluation")["evaluatedAt"] == "2026-12-06T14:30:01Z"
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 1)


def test_a_second_dataset_of_the_suites_name_is_not_the_suite(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path
) -> None:
    # rev6 finding 2: `[release]` names its suite NAME@VERSION, and an evaluation counted when
    # its suite's record carried that name. A producer's own tooling (here: `record_files`, as
    # `dataset create` does it, without its name check; or two racing `dataset create`: the
    # name is checked outside the log's lock) can record a second, easy regression@1;
    # evaluated on it, bc@2 was released. Versions are immutable: the suite is the first
    # held-out dataset of that name.
    from trajledger import Ledger
    from trajledger.ledger.record import record_files
    from trajledger.runner.rollouts import run_policy
    from trajledger.verify import predicates
    from trajledger.verify.predicates import Dataset

    ledger = Ledger.open(home)
    easy = run_policy(None, "CartPole-v1", 3, 5000, policy_version="random")
    rb = ledger.record_batch(easy.steps, episodes=easy.episodes, env="cartpole@1",
                             policy="random", key="vendor", name="easy-batch")
    listing = tmp_path / "dataset.json"
    listing.write_text(json.dumps({"name": "regression", "version": "1", "split": "regression",
                                   "batches": [rb.digest]}))
    body = Dataset("regression", "1", "regression", (rb.digest,), "train").written("dataset")
    fake = record_files(ledger, {"dataset.json": listing}, ledger.keys.signer("vendor"),
                        predicates.DATASET, body, name="regression@1")
    cited = [evaluate(runner, home, script, "pass", ck, fake.digest) for ck in ("bc@2", "bc@1")]
    size = log_size(home)
    r = run(runner, home, "release", "bc@2", "--key", "approver")
    expect(r, 1)
    assert "success_rate on regression@1: missing: no verified evaluation" in r.stderr
    assert log_size(home) == size

    # A release recorded anyway (an approver's own tooling) fails verification.
    rec = _forced_release(ledger, cited)
    r = run(runner, home, "verify", rec.digest)
    expect(r, 1)
    assert "✗ success_rate on regression@1 — missing: no verified evaluation" in r.stdout


def second_dataset(home: Path, tmp_path: Path, name: str, version: str, seed: int,
                   split: str = "regression") -> str:
    """Record a dataset NAME@VERSION of new episodes as a producer's own tooling can (by
    `record_files`, without `dataset create`'s name check): its digest."""
    from trajledger import Ledger
    from trajledger.ledger.record import record_files
    from trajledger.runner.rollouts import run_policy
    from trajledger.verify import predicates
    from trajledger.verify.predicates import Dataset

    ledger = Ledger.open(home)
    played = run_policy(None, "CartPole-v1", 3, seed, policy_version="random")
    rb = ledger.record_batch(played.steps, episodes=played.episodes, env="cartpole@1",
                             policy="random", key="vendor", name=f"batch-{seed}")
    listing = tmp_path / f"dataset-{seed}.json"
    listing.write_text(json.dumps({"name": name, "version": version, "split": split,
                                   "batches": [rb.digest]}))
    body = Dataset(name, version, split, (rb.digest,), "train").written("dataset")
    return record_files(ledger, {"dataset.json": listing}, ledger.keys.signer("vendor"),
                        predicates.DATASET, body, name=f"{name}@{version}").digest


def pinned_policy(home: Path, suite: str, digest: str) -> Path:
    """Write policy-2.toml, serial 2: [release] requires success_rate >= 0.5 on ``suite``
    pinned to ``digest`` (no max_drop)."""
    text = (home / "policy.toml").read_text().replace("serial = 1", "serial = 2").replace(
        'suite = "regression@1"\nmin = 0.5\nmax_drop = 0.1',
        f'suite = "{suite}"\ndigest = "{digest}"\nmin = 0.5')
    assert digest in text
    (home / "policy-2.toml").write_text(text)
    return home / "policy-2.toml"


def pin_suite(home: Path, suite: str, digest: str) -> Path:
    """Record `pinned_policy` as the policy in force."""
    from trajledger import Ledger

    Ledger.open(home).set_policy(pinned_policy(home, suite, digest), keys=["approver"])
    return home / "policy-2.toml"


def test_a_pinned_suite_digest_is_the_suite_whatever_is_logged_first(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path
) -> None:
    # rev6's design limit: the suite was the first held-out dataset of its NAME@VERSION. With
    # `digest` pinned, only that dataset is the suite: here B, an easy regression@2, is logged
    # first and A second (a producer's own tooling, or a race); bc@2 passes on B, fails on A.
    b = second_dataset(home, tmp_path, "regression", "2", 7000)
    a = second_dataset(home, tmp_path, "regression", "2", 8000)
    policy = pin_suite(home, "regression@2", a)
    evaluate(runner, home, script, "pass", "bc@2", b)
    failing = evaluate(runner, home, script, "fail", "bc@2", a)
    size = log_size(home)
    r = run(runner, home, "release", "bc@2", "--key", "approver")
    expect(r, 1)
    assert (f"success_rate on regression@2: success_rate 0 is below the minimum 0.5 "
            f"(evaluation {failing[:19]}… (log index ") in r.stderr
    assert log_size(home) == size
    passing = evaluate(runner, home, script, "pass", "bc@2", a)
    r = run(runner, home, "release", "bc@2", "--key", "approver")
    expect(r, 0)
    assert predicate(home, r.stdout.strip(), "release")["evaluations"] == [passing]
    expect(run(runner, home, "verify", r.stdout.strip()), 0)
    # policy check / show show the pin; the JSON form carries it.
    r = run(runner, home, "policy", "check", policy)
    expect(r, 0)
    assert f"success_rate on regression@2 (pinned {a[:19]}…) >= 0.5" in r.stdout
    assert f"success_rate on regression@2 (pinned {a[:19]}…) >= 0.5" in run(
        runner, home, "policy", "show").stdout
    r = run(runner, home, "policy", "show", "--json")
    assert json.loads(r.stdout)["policy"]["release"]["require"] == [
        {"suite": "regression@2", "metric": "success_rate", "digest": a, "min": "0.5"}]


def leave_out(bundle: Path, out: Path, entry: Any, index: int) -> None:
    """Write ``bundle`` without the log entry at ``index`` (its entry, tlog-proof and
    envelope), bundle.json listing what is left: what a hostile exporter can send."""
    members = tk.bundle_members(bundle)
    gone = {f"entries/{index}", f"proofs/{index}.tlog-proof",
            f"objects/sha256/{entry.envelope[7:]}"}
    assert gone <= {n for n, _ in members}
    tk.write_bundle(out, [(n, d) for n, d in members if n not in gone], reindex=True)


def test_a_bundle_without_the_pinned_suite_fails_naming_it(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path
) -> None:
    # rev6's design limit: a bundle holds only the records its exporter chose. A release on a
    # second, easy regression@1 (B), recorded by an approver's own tooling, fails in the
    # ledger (the first regression@1, A, is the suite); a bundle leaving A's entry out
    # verified: its verifier took B as the suite. Pinned to A, it fails, naming the pin.
    from trajledger import Ledger
    from trajledger.ledger.catalog import Catalog

    ledger = Ledger.open(home)
    a = Catalog(ledger).resolve("regression@1").digest
    b = second_dataset(home, tmp_path, "regression", "1", 7000)
    cited = [evaluate(runner, home, script, "pass", ck, b) for ck in ("bc@2", "bc@1")]
    rec = _forced_release(ledger, cited)
    bundle, hostile = tmp_path / "release.tar.zst", tmp_path / "hostile.tar.zst"
    expect(run(runner, home, "export", rec.digest, "--out", bundle), 0)
    index, entry = next((i, e) for i, e in enumerate(entries(home))
                        if e.subject == a and e.kind == "dataset")
    leave_out(bundle, hostile, entry, index)
    proc = standalone_verify(tmp_path / "whole", bundle, home / "policy.toml")
    assert proc.returncode == 1 and "missing: no verified evaluation" in proc.stderr
    proc = standalone_verify(tmp_path / "unpinned", hostile, home / "policy.toml")
    assert proc.returncode == 0, proc.stderr  # the limit, for a policy that pins nothing
    pinned = pin_suite(home, "regression@1", a)
    for evidence in (bundle, hostile):
        proc = standalone_verify(tmp_path / f"pinned-{evidence.stem}", evidence, pinned)
        assert proc.returncode == 1, proc.stdout
    assert (f"success_rate on regression@1: the suite is pinned to {a}: no dataset record "
            "of it is logged before the release") in proc.stderr
    r = run(runner, home, "verify", rec.digest)
    expect(r, 1)
    assert "success_rate on regression@1 — missing: no verified evaluation" in r.stdout


@pytest.mark.parametrize("pinned", ["train@1", "absent", "other-name", "checkpoint"])
def test_a_pinned_digest_that_is_not_the_held_out_suite_is_refused(
    runner: CliRunner, home: Path, script: Path, pinned: str
) -> None:
    """A pin naming a train split, a digest the log does not hold, a held-out dataset of
    another name or a checkpoint: `policy set` refuses it (a digest this log holds), and
    `release` (a policy recorded anyway, by a producer's own tooling) in one line saying what
    was pinned and what was found."""
    from trajledger import Ledger
    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.policy_state import key_lookup
    from trajledger.ledger.record import record_statement
    from trajledger.ledger.signing import canonical_json
    from trajledger.verify import predicates
    from trajledger.verify.policy import load_policy_file, policy_digest

    ledger = Ledger.open(home)
    digest, found = {
        "train@1": (Catalog(ledger).resolve("train@1").digest,
                    "found dataset train@1, a 'train' split; suites are holdout or regression"),
        "absent": ("sha256:" + "ab" * 32, "no dataset record of it is logged before the release"),
        "other-name": (Catalog(ledger).resolve("holdout@1").digest,
                       "found dataset holdout@1, not regression@1"),
        "checkpoint": (Catalog(ledger).resolve("bc@1").digest,
                       "found a checkpoint record, not a dataset"),
    }[pinned]
    line = f"the suite is pinned to {digest}: {found}"
    pinned_policy(home, "regression@1", digest)
    size = log_size(home)
    r = run(runner, home, "policy", "set", home / "policy-2.toml", "--key", "approver", "--yes")
    if pinned != "absent":
        expect(r, 1)
        assert r.stderr.splitlines()[-1] == (
            f"FAIL: policy 'evals': release: success_rate on regression@1: {line}")
        assert log_size(home) == size
        # Recorded anyway, as `policy set` does it without the check (own tooling).
        policy = load_policy_file(home / "policy-2.toml", key_lookup=key_lookup(ledger))
        ledger.store.put_bytes(canonical_json(policy.to_json()))
        record_statement(ledger, "evals#2", policy_digest(policy), predicates.TRUST_POLICY,
                         {"policy": policy.to_json()}, [ledger.keys.signer("approver")])
        assert "serial 2" in run(runner, home, "policy", "show").stdout
    else:
        expect(r, 0)
    evaluate(runner, home, script, "pass", "bc@1")
    size = log_size(home)
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 1)
    then = ("" if pinned != "absent" else ": if another ledger recorded it, import it "
            "('trajledger import BUNDLE': the bundle of an evaluation on it carries it), then run "
            "'trajledger release' again")  # what to do (out46)
    assert r.stderr.splitlines()[1:] == [
        f"FAIL: release of bc@1 > success_rate on regression@1: {line}{then}"]
    assert log_size(home) == size


def test_one_approver_key_given_twice_is_one_approval_of_a_release(
    runner: CliRunner, home: Path, script: Path
) -> None:
    # rev6 finding 3: `release --key approver --key approver` met `approvals = 2`: the decision
    # counted the keys given, the verifier counts distinct keys, so a release was recorded
    # (exit 0) that never verifies.
    from trajledger import Ledger

    policy = (home / "policy.toml").read_text()
    (home / "policy-2.toml").write_text(policy.replace("serial = 1", "serial = 2")
                                        .replace("approvals = 1", "approvals = 2"))
    Ledger.open(home).set_policy(home / "policy-2.toml", keys=["approver"])
    for ck in ("bc@1", "bc@2"):
        evaluate(runner, home, script, "pass", ck)
    size = log_size(home)
    r = run(runner, home, "release", "bc@2", "--key", "approver", "--key", "approver")
    expect(r, 1)
    assert ("FAIL: release of bc@2 > release: signed by 1 approver(s), [release] needs 2: "
            "sign it with 1 more approver key") in r.stderr.splitlines()[1], r.stderr  # out47
    assert log_size(home) == size


def test_revoking_the_latest_evaluation_does_not_bring_back_an_earlier_one(
    runner: CliRunner, home: Path, script: Path
) -> None:
    # rev6 finding 5: bc@2 passed, then failed; an approver revoked the failing run ("flaky")
    # and the earlier passing run counted again: the release was recorded. The latest run
    # signed by an evaluator decides; revoked, the requirement is missing until a new run.
    for mode, ck in (("pass", "bc@1"), ("pass", "bc@2")):
        evaluate(runner, home, script, mode, ck)
    failing = evaluate(runner, home, script, "fail", "bc@2")
    expect(run(runner, home, "revoke", failing, "--key", "approver", "--reason", "flaky"), 0)
    size = log_size(home)
    r = run(runner, home, "release", "bc@2", "--key", "approver")
    expect(r, 1)
    assert "success_rate on regression@1: missing: " in r.stderr
    assert log_size(home) == size
    evaluate(runner, home, script, "pass", "bc@2")  # a new run decides
    expect(run(runner, home, "release", "bc@2", "--key", "approver"), 0)


def standalone_verify(tmp: Path, bundle: Path, policy: Path) -> subprocess.CompletedProcess[str]:
    """``python -m verify BUNDLE --policy P`` from a copy of ``verify/`` alone (trajledger
    cannot be imported)."""
    alone = tmp / "alone"
    alone.mkdir(parents=True)
    shutil.copytree(REPO / "trajledger" / "verify", alone / "verify",
                    ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import runpy, sys; sys.modules['trajledger'] = None; "
            "sys.argv = ['verify', *sys.argv[1:]]; runpy.run_module('verify', run_name='__main__')")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp)}
    return subprocess.run([sys.executable, "-E", "-s", "-c", code, str(bundle), "--policy",
                           str(policy)], cwd=alone, env=env, capture_output=True, text=True,
                          timeout=300)


def test_release_refuses_a_drop_from_the_parent(
    runner: CliRunner, home: Path, script: Path
) -> None:
    """bc@2's parent is bc@1: a success rate 0.5 below the parent's exceeds max_drop 0.1."""
    evaluate(runner, home, script, "pass", checkpoint="bc@1")
    evaluate(runner, home, script, "alternate", checkpoint="bc@2")
    r = run(runner, home, "release", "bc@2", "--key", "approver")
    expect(r, 1)
    assert ("success_rate 0.5 dropped 0.5 from the parent's 1, more than 0.1 (evaluation "
            in r.stderr)
    assert "; parent evaluation sha256:" in r.stderr
    evaluate(runner, home, script, "pass", checkpoint="bc@2")
    expect(run(runner, home, "release", "bc@2", "--key", "approver"), 0)


def test_an_offline_verifier_judges_a_release_under_its_own_policy(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path
) -> None:
    """The standalone verifier re-judges the release: a buyer whose policy demands a success
    rate of 0.9 refuses a release the vendor's 0.5 allowed; one who does not trust the
    evaluator key refuses its evaluation; a bundle with an altered object is refused."""
    from test_third_party_verify import tamper  # tests/e2e is on sys.path

    evaluate(runner, home, script, "alternate")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    bundle = tmp_path / "release.tar.zst"
    expect(run(runner, home, "export", r.stdout.strip(), "--out", bundle), 0)
    text = (home / "policy.toml").read_text()
    stricter = home / "buyer.toml"
    stricter.write_text(text.replace("min = 0.5", "min = 0.9"))
    proc = standalone_verify(tmp_path / "a", bundle, stricter)
    assert proc.returncode == 1, proc.stdout
    assert ("success_rate on regression@1: success_rate 0.5 is below the minimum 0.9 "
            "(evaluation sha256:") in proc.stderr
    untrusting = home / "untrusting.toml"
    untrusting.write_text(text.replace('keys = ["keys/evaluator.pub"]',
                                       'keys = ["keys/trainer.pub"]').replace(
        '[roles.trainer]\nkeys = ["keys/trainer.pub"]', '[roles.trainer]\nkeys = []'))
    proc = standalone_verify(tmp_path / "b", bundle, untrusting)
    assert proc.returncode == 1, proc.stdout
    assert "want evaluator key(s)" in proc.stderr
    assert "missing: no verified evaluation of sha256:" in proc.stderr
    bad = tmp_path / "bad.tar.zst"
    name = tamper(bundle, bad)
    proc = standalone_verify(tmp_path / "c", bad, home / "policy.toml")
    assert proc.returncode == 1, proc.stdout
    assert f"member {name[:8]}" in proc.stderr or "not its name" in proc.stderr


# -- sealed suites ------------------------------------------------------------------------------


def sealed_batch(home: Path) -> tuple[str, dict[str, Any]]:
    from trajledger import Ledger
    from trajledger.ledger.catalog import Catalog

    item = Catalog(Ledger.open(home)).resolve("holdout-batch", {"rollout-batch"})
    return item.digest, predicate(home, item.digest, "rollout-batch")


def test_a_sealed_suite_is_unreadable_without_an_evaluator_key(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    from trajledger import Ledger

    digest, pred = sealed_batch(home)
    ledger = Ledger.open(home)
    # The store holds the ciphertexts only.
    for f in pred["manifest"]["files"]:
        assert not ledger.store.exists("sha256:" + f["digest"]["sha256"])
    for f in pred["sealed"]["files"]:
        data = ledger.store.get(f["ciphertext"])
        assert data.startswith(b"trajledger-sealed-v1\n") and b"PAR1" not in data
    assert len(pred["sealed"]["episodes"]) == 4
    assert [r["keyid"] for r in pred["sealed"]["recipients"]] == [
        ledger.keys.encryption_key("evaluator").keyid
    ]
    r = run(runner, home, "export", "holdout-batch", "--format", "parquet", "--out",
            tmp_path / "x")
    expect(r, 1)
    assert "rollout batch holdout-batch: sealed (stored encrypted to the evaluators' X25519" in (
        r.stderr)
    size = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", "holdout@1", "--key", "evaluator",
            "--unseal-key", "outsider", "--pass-return", "20")
    expect(r, 1)
    assert r.stderr.startswith(f"FAIL: batch {digest[:19]}… of suite sha256:")
    assert "not sealed to encryption key" in r.stderr and "nothing was unsealed" in r.stderr
    assert log_size(home) == size  # not even an unsealing record
    # Training on it is refused: a sealed batch never goes into a train split.
    r = run(runner, home, "dataset", "create", "steal", "--version", "1", "--split", "train",
            "--batch", digest, "--key", "vendor")
    expect(r, 1)
    assert "is sealed (stored encrypted for evaluators)" in r.stderr


def test_a_sealed_suite_is_evaluated_with_an_evaluator_key(
    runner: CliRunner, home: Path
) -> None:
    size = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", "holdout@1", "--key", "evaluator",
            "--pass-return", "20")
    expect(r, 0)
    assert r.stderr.endswith(f"; unsealing logged at {size}\n")
    digest = r.stdout.strip()
    log = entries(home)
    assert [e.kind for e in log[size:]] == ["unsealing", "evaluation"]
    unsealing = predicate(home, log[size].subject, "unsealing")
    assert unsealing["purpose"].startswith("evaluation of bc@1 (sha256:")
    assert unsealing["batches"] == [sealed_batch(home)[0]]
    config = predicate(home, digest, "evaluation")["configuration"]
    assert {"role": "unsealing", "logIndex": size} in [d.get("annotations") for d in config]
    expect(run(runner, home, "verify", digest), 0)
    expect(run(runner, home, "fsck"), 0)


def flip_ciphertext(home: Path, sealed_file: dict[str, Any]) -> None:
    """Flip one bit of a sealed file's ciphertext in the store."""
    from trajledger import Ledger

    path = Ledger.open(home).store.path_of(sealed_file["ciphertext"])
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[200] ^= 1
    path.write_bytes(bytes(data))


def test_a_tampered_ciphertext_fails(runner: CliRunner, home: Path) -> None:
    _digest, pred = sealed_batch(home)
    flip_ciphertext(home, pred["sealed"]["files"][0])
    r = run(runner, home, "verify", "holdout@1")
    expect(r, 1)
    assert "episodes.parquet: tampered: content hashes to" in r.stderr
    expect(run(runner, home, "fsck"), 1)
    r = run(runner, home, "eval", "bc@1", "--suite", "holdout@1", "--key", "evaluator",
            "--pass-return", "20")
    expect(r, 1)
    assert "refused" in r.stderr and "nothing was read" in r.stderr


def test_a_sealed_suites_evaluation_stores_nothing_of_it_in_the_clear(
    runner: CliRunner, home: Path, script: Path
) -> None:
    """rev9 finding 5: an evaluation stores its command's other outputs, and with
    ``--keep-logs`` its stdout and stderr, in the store in the clear: an evaluating command
    that printed the held-out episodes, or wrote them out with its answers (as benchmark
    harnesses do), published the sealed suite to everyone who reads the ledger. For a sealed
    suite ``--keep-logs`` is refused before anything is unsealed, and outputs other than
    ``results.json`` (and a lock of the command's environment) refuse the record."""
    size = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", "holdout@1", "--key", "evaluator",
            "--keep-logs", "--", sys.executable, script, "pass")
    expect(r, 1)
    assert r.stderr == (
        "FAIL: suite holdout@1: sealed, and --keep-logs would store the command's output in the "
        "clear, readable by everyone who reads the ledger; nothing was unsealed (drop "
        "--keep-logs, and keep its output on this machine if you need it)\n"), r.stderr
    assert log_size(home) == size  # not even an unsealing
    r = run(runner, home, "eval", "bc@1", "--suite", "holdout@1", "--key", "evaluator", "--",
            sys.executable, script, "pass")
    expect(r, 1)
    assert r.stderr.endswith(
        "FAIL: suite holdout@1: sealed, and the command wrote notes.txt besides results.json: it "
        "would be stored in the clear with the evaluation, readable by everyone who reads the "
        "ledger; nothing was recorded (write only results.json to $TRAJLEDGER_OUTPUT_DIR, and "
        "keep anything else outside the ledger)\n"), r.stderr
    assert [e.kind for e in entries(home)[size:]] == ["unsealing"]
    r = run(runner, home, "eval", "bc@1", "--suite", "holdout@1", "--key", "evaluator", "--",
            sys.executable, script, "results-only")
    expect(r, 0)
    # (each opening its own unsealing, in the same second too: rev40 finding 2)
    kinds = [e.kind for e in entries(home)[size:]]
    assert kinds == ["unsealing", "unsealing", "evaluation"], kinds
    # The plain regression suite keeps what its command writes, as before.
    expect(run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
               "--keep-logs", "--", sys.executable, script, "pass"), 0)


SLEEPER = textwrap.dedent(
    """
    # An evaluating command that says where it is and waits to be killed.
    import os, pathlib, sys, time
    pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
    time.sleep(600)
    """
)

LOOKER = textwrap.dedent(
    """
    # A training command that looks for step files beside its data in the ledger's tmp/.
    import json, os, pathlib, sys
    tmp = pathlib.Path(os.environ["TRAJLEDGER_DATA_DIR"]).parents[1]
    seen = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*.parquet"))
    pathlib.Path(sys.argv[1]).write_text(json.dumps(seen))
    (pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"]) / "w.bin").write_bytes(b"w")
    """
)


def test_a_killed_evaluation_leaves_no_plaintext_suite_for_the_next_training_command(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    """rev9 finding 1: an evaluation killed outright (SIGKILL, the OOM killer) cannot remove
    the unsealed suite it handed its command; a training command run next by the same user
    found it beside its own data directory (``$TRAJLEDGER_DATA_DIR/../..``), although it holds
    no passphrase and cannot decrypt the suite. A workspace now removes what dead runs left in
    the ledger's ``tmp/`` before it hands anything to a command."""
    import signal
    import time

    sleeper, started = tmp_path / "sleeper.py", tmp_path / "started"
    sleeper.write_text(SLEEPER)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trajledger", "--ledger", str(home), "eval", "bc@1", "--suite",
         "holdout@1", "--key", "evaluator", "--", sys.executable, str(sleeper), str(started)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not started.exists() or not started.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, "eval did not start"
            time.sleep(0.1)
        proc.kill()  # SIGKILL: nothing of trajledger's runs after this
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if started.exists() and started.read_text():
            os.killpg(int(started.read_text()), signal.SIGKILL)  # its command's group
    left = sorted(str(p.relative_to(home / "tmp")) for p in (home / "tmp").rglob("*.parquet"))
    assert [p.split("/", 1)[1] for p in left] == [
        f"suite/batches/00000-{sealed_batch(home)[0][7:19]}/{f}"
        for f in ("episodes.parquet", "steps.parquet")
    ]  # the killed run's plaintext suite
    looker, seen = tmp_path / "looker.py", tmp_path / "seen.json"
    looker.write_text(LOOKER)
    r = run(runner, home, "train", "--dataset", "train@1", "--key", "trainer", "--name",
            "after-kill", "--version", "1", "--", sys.executable, looker, seen)
    expect(r, 0)
    assert [p.split("/", 1)[1].split("/")[0] for p in json.loads(seen.read_text())] == [
        "data", "data"
    ], seen.read_text()
    assert not list((home / "tmp").rglob("*.parquet"))


def test_log_verify_rehashes_a_sealed_batchs_ciphertexts(runner: CliRunner, home: Path) -> None:
    """The store holds a sealed batch's ciphertexts, never the plaintext its manifest lists:
    'log verify' failed every ledger with a sealed suite ("blob steps.parquet ...: not in the
    store", exit 1). It checks the ciphertexts, as fsck and verify do, and a tampered one
    fails."""

    r = run(runner, home, "log", "verify", "--json")
    expect(r, 0)
    assert json.loads(r.stdout)["problems"] == []
    digest, pred = sealed_batch(home)
    [index] = [i for i, e in enumerate(entries(home)) if e.subject == digest]
    ciphertext = pred["sealed"]["files"][0]
    flip_ciphertext(home, ciphertext)
    r = run(runner, home, "log", "verify")
    expect(r, 1)
    [line] = [x for x in r.stderr.splitlines() if x.startswith("FAIL:")]
    assert f"(entry {index}): blob {ciphertext['path']} (sealed): " in line, line
    assert "content hashes to" in line and ciphertext["ciphertext"] in line, line


def test_false_fingerprints_are_caught_when_unsealed(
    runner: CliRunner, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer publishes other fingerprints than its sealed data's (to slip a holdout
    episode past the gate): the evaluator's unsealing recomputes them and refuses."""
    import dataclasses

    from trajledger import Ledger
    from trajledger.ledger import batch_features
    from trajledger.runner.rollouts import run_policy

    real = batch_features.published_episodes
    monkeypatch.setattr(batch_features, "published_episodes", lambda chunk, *more: tuple(
        dataclasses.replace(e, fingerprint="00" * 32) for e in real(chunk, *more)))
    ledger = Ledger.open(home)
    played = run_policy(None, "CartPole-v1", 2, 3000, policy_version="random")
    b = ledger.record_batch(played.steps, episodes=played.episodes, env="cartpole@1",
                            policy="random", key="vendor", name="liar", seal=True)
    ledger.create_dataset("liar", "1", "holdout", [b.digest], key="vendor")
    monkeypatch.setattr(batch_features, "published_episodes", real)
    size = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", "liar@1", "--key", "evaluator",
            "--pass-return", "20")
    expect(r, 1)
    assert r.stderr.startswith(f"FAIL: sealed batch {b.digest[:19]}…: the fingerprints its "
                               "record publishes are not those of its data (episode ids, "
                               "lengths or exact fingerprints differ)")
    assert [e.kind for e in entries(home)[size:]] == ["unsealing"]  # logged, nothing else


def test_the_gate_sees_duplicates_of_a_sealed_suite(runner: CliRunner, home: Path) -> None:
    """A train set holding an episode of the sealed holdout (same seed, same actions) is
    refused by the admission gate from the published fingerprints, without the key."""
    from trajledger import Ledger
    from trajledger.runner.rollouts import run_policy

    ledger = Ledger.open(home)
    copy = run_policy(None, "CartPole-v1", 2, 2000, policy_version="random")
    batch = ledger.record_batch(copy.steps, episodes=copy.episodes, env="cartpole@1",
                                policy="random", key="vendor", name="copy")
    # The audit index knows the sealed episodes too: dataset create refuses the duplicates.
    r = run(runner, home, "dataset", "create", "leak", "--version", "1", "--split", "train",
            "--batch", batch.digest, "--key", "vendor")
    expect(r, 1)
    assert "2 episode(s) exactly duplicate episodes of the other split" in r.stderr
    assert "(holdout holdout@1) is an exact duplicate of train episode" in r.stderr


def test_the_gate_refuses_a_train_set_holding_sealed_episodes(
    runner: CliRunner, tmp_path: Path
) -> None:
    """Recorded the other way round (the train set first, then the sealed suite): admission
    compares the verified fingerprints and refuses."""
    from trajledger.runner.rollouts import run_policy

    home = tmp_path / "gate" / "home"
    ledger = cartpole_ledger(home, 3)
    expect(run(runner, home, "admit", "train@1"), 0)
    held = run_policy(None, "CartPole-v1", 1, 0, policy_version="random")
    s = ledger.record_batch(held.steps, episodes=held.episodes, env="cartpole@1",
                            policy="random", key="vendor", name="sealed", seal=True)
    # 'dataset create' would refuse this holdout (its index sees the duplicate); the gate must
    # not rely on that: the record is made as a foreign log or a tool that skipped it would.
    from trajledger.ledger.record import record_files
    from trajledger.verify import predicates

    (home / "dataset.json").write_text("{}")
    record_files(ledger, {"dataset.json": home / "dataset.json"}, ledger.keys.signer("vendor"),
                 predicates.DATASET, predicates.Dataset("holdout", "1", "holdout",
                                                        (s.digest,)).written(),
                 name="holdout@1")
    r = run(runner, home, "admit", "train@1")
    expect(r, 1)
    assert ("no episode duplicates a holdout or regression episode: exact duplicate: episode "
            "random/CartPole-v1/0 of batch") in r.stderr


# -- failures become the next suite ------------------------------------------------------------


def test_failures_become_the_next_regression_suite(
    runner: CliRunner, home: Path, script: Path
) -> None:
    evaluation = evaluate(runner, home, script, "alternate")
    r = run(runner, home, "dataset", "create", "regression", "--version", "2",
            "--from-failures", evaluation[:20], "--key", "vendor")
    expect(r, 0)
    assert r.stderr.startswith(f"OK: dataset regression@2 (regression) of the failures of "
                               f"{evaluation[:20]}: 1 new batch(es) recorded; the dataset "
                               "recorded at log index ")
    suite = predicate(home, r.stdout.strip(), "dataset")
    assert suite["split"] == "regression" and len(suite["batches"]) == 1
    batch = predicate(home, suite["batches"][0], "rollout-batch")
    assert batch["failuresOf"] == evaluation
    assert batch["counts"]["episodes"] == 3
    failed = {t.split("/", 1)[1] for t in predicate(home, evaluation, "evaluation")["failedTests"]}
    from trajledger import Ledger
    from trajledger.ledger.artifacts import batch_files

    ledger = Ledger.open(home)
    import io

    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(ledger.store.get(
        batch_files(ledger, suite["batches"][0])["episodes.parquet"])))
    assert set(table.column("episode_id").to_pylist()) == failed
    assert {json.loads(dict(e)["trajledger.failed_in"])
            for e in table.column("extras").to_pylist()} == {evaluation}
    r = run(runner, home, "lineage", "regression@2", "--format", "json")
    expect(r, 0)
    edges = json.loads(r.stdout)["edges"]
    assert {"from": suite["batches"][0], "to": evaluation, "role": "failures-of"} in edges
    # Evaluations run on the new version like any suite.
    evaluate(runner, home, script, "pass", suite="regression@2")


def test_failures_of_a_sealed_suite_stay_sealed(runner: CliRunner, home: Path) -> None:
    r = run(runner, home, "eval", "bc@1", "--suite", "holdout@1", "--key", "evaluator",
            "--pass-return", "10000")
    expect(r, 0)
    evaluation = r.stdout.strip()
    r = run(runner, home, "dataset", "create", "hard", "--version", "1", "--from-failures",
            evaluation, "--key", "vendor")
    expect(r, 1)
    assert "are sealed to the evaluators' encryption keys; only an evaluator" in r.stderr
    # The option to give is dataset create's --evaluator-key (its --key is the producer's).
    assert r.stderr.rstrip().endswith("(give --evaluator-key KEY: the name of an evaluator's "
                                      "X25519 key it is sealed to)"), r.stderr
    size = log_size(home)
    r = run(runner, home, "dataset", "create", "hard", "--version", "1", "--from-failures",
            evaluation, "--key", "vendor", "--evaluator-key", "evaluator")
    expect(r, 0)
    # Sealed again, and as short as the suite's: what their published sketches give back is
    # said as `record --seal` says it (rev26; tests/e2e/test_sealed_sketches.py).
    assert "WARNING: sealed batch failures-of-bc@1-" in r.stderr, r.stderr
    log = entries(home)
    assert [e.kind for e in log[size:]] == ["unsealing", "rollout-batch", "dataset"]
    batch = predicate(home, log[size + 1].subject, "rollout-batch")
    assert "sealed" in batch and batch["counts"]["episodes"] == 4
    expect(run(runner, home, "verify", "hard@1"), 0)


# -- keys, policy, calibration -----------------------------------------------------------------


def test_x25519_keys_are_encrypted_at_rest(
    runner: CliRunner, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A passphrase of its own (the template's other keys are demo keys in the clear, which a
    # TRAJLEDGER_PASSPHRASE for every key would refuse as planted).
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE_JUDGE_ENC", "judge's own (TEST ONLY)")
    r = run(runner, home, "key", "new", "judge-enc", "--alg", "x25519")
    expect(r, 0)
    path = home / "keys" / "x25519" / "judge-enc.key"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    r = run(runner, home, "key", "list", "--json")
    listed = {k["name"]: k for k in json.loads(r.stdout) if k["algorithm"] == "x25519"}
    assert listed["judge-enc"]["encrypted"] is True and listed["outsider"]["encrypted"] is False
    r = run(runner, home, "policy", "show")
    assert "encryption keys (x25519): " in r.stdout, r.output
    assert "release   1 approver(s); requires success_rate on regression@1 >= 0.5 drop <= 0.1" in (
        r.stdout)


def test_stats_judge_calibration(runner: CliRunner, home: Path) -> None:
    from trajledger import Ledger
    from trajledger.runner.rollouts import run_policy

    ledger = Ledger.open(home)
    played = run_policy(None, "CartPole-v1", 4, 5000, policy_version="random")
    # Expert labels (success) and the judge's scores: it agrees on three of four episodes.
    ep = played.episodes
    labelled = ep.set_column(ep.schema.get_field_index("success"), "success",
                             pa.array([True, True, False, False]))
    scores = pa.array([[("judge", 0.9)], [("judge", 0.2)], [("judge", 0.1)], [("judge", 0.3)]],
                      type=ep.schema.field("judge_scores").type)
    labelled = labelled.set_column(labelled.schema.get_field_index("judge_scores"),
                                   "judge_scores", scores)
    b = ledger.record_batch(played.steps, episodes=labelled, env="cartpole@1", policy="expert",
                            key="vendor", name="calibration-batch")
    ledger.create_dataset("calibration", "1", "holdout", [b.digest], key="vendor")
    r = run(runner, home, "stats", "calibration@1", "--judge", "judge")
    expect(r, 0)
    assert ("judge judge: NOT calibrated; no evaluator version named 'judge' is recorded, so none "
            "names a calibration dataset: not calibrated") in r.stdout
    ledger.register_evaluator("judge", "1", "llm-judge", key="vendor", model_id="m")
    r = run(runner, home, "stats", "calibration@1", "--judge", "judge", "--json")
    calib = json.loads(r.stdout)["calibration"]
    assert calib["calibrated"] is False and calib["evaluator"] == "judge@1"
    r = run(runner, home, "evaluator", "register", "judge", "--version", "2", "--kind",
            "llm-judge", "--model", "m", "--calibration", "calibration@1", "--key", "vendor")
    expect(r, 0)
    r = run(runner, home, "stats", "train@1", "--judge", "judge")
    expect(r, 0)
    assert ("judge judge: calibrated: agreement 0.750 with expert labels (n=4); agrees with the "
            "expert labels of calibration@1 on 4 episode(s)") in r.stdout


# -- the lineage picture ------------------------------------------------------------------------


def test_lineage_draws_evaluations_and_releases(
    runner: CliRunner, home: Path, script: Path
) -> None:
    """Evaluations and releases are records about a checkpoint: its lineage draws them beside
    it (found from the kinds, with no drawing code of their own), dashed, in every format."""
    failing = evaluate(runner, home, script, "fail")
    passing = evaluate(runner, home, script, "pass")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    release = r.stdout.strip()
    graph = json.loads(run(runner, home, "lineage", "bc@1", "--json").stdout)
    ckpt = next(n["id"] for n in graph["nodes"] if n["kind"] == "checkpoint")
    drawn = {(m["kind"], m["about"][0]["role"]) for m in graph["records"]
             if m["about"][0]["id"] == ckpt}
    assert drawn == {("evaluation", "checkpoint"), ("release", "checkpoint")}
    said = " ".join(m["detail"] for m in graph["records"] if m["kind"] == "evaluation")
    assert "result: FAILED" in said and "result: PASSED" in said
    text = run(runner, home, "lineage", "bc@1").stdout
    assert text.count("· evaluation at log index ") == 2
    assert "· release at log index " in text
    page = run(runner, home, "lineage", "bc@1", "--format", "html").stdout
    assert page.count('<g class="record"') == len(graph["records"])
    for digest in (failing, passing, release):
        index = next(i for i, e in enumerate(entries(home)) if e.subject == digest)
        assert f"<title>{'release' if digest == release else 'evaluation'} at log index " \
               f"{index}\n" in page


def test_a_release_on_a_revoked_suite_says_so_not_run_eval(
    runner: CliRunner, home: Path, script: Path
) -> None:
    """rev13 (fixed by fix11): with the suite's dataset revoked, ``release`` said ``missing: …
    run 'trajledger eval …'``, which cannot help (an evaluation on a revoked suite never
    verifies). It is refused as before (exit 1, nothing recorded), naming the suite."""
    evaluate(runner, home, script, "pass")
    expect(run(runner, home, "revoke", "regression@1", "--key", "vendor", "--reason", "leak"), 0)
    size = log_size(home)
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 1)
    line = r.stderr.splitlines()[1]
    assert line.startswith("FAIL: release of bc@1 > success_rate on regression@1: missing: the "
                           "latest evaluation of sha256:"), line
    assert line.endswith(" does not count: the suite does not verify (revoked, say), and no new "
                         "evaluation on it can; see 'trajledger verify regression@1': name another "
                         "holdout or regression suite in [[release.require]] of a successor policy "
                         "('trajledger policy set'), evaluate bc@1 on it, then run 'trajledger "
                         "release' again"), line  # what to do (out46)
    assert "trajledger eval" not in r.stderr
    assert log_size(home) == size


def test_eval_and_release_json_print_one_document(
    runner: CliRunner, home: Path, script: Path
) -> None:
    """hour33: the two commands with ``--json`` that tests/e2e/test_first_hour.py's walk
    (`test_every_json_command_prints_one_document`) leaves here, run once each."""
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            "--json", "--", sys.executable, script, "pass")
    expect(r, 0)
    evaluation = json.loads(r.stdout)
    assert evaluation["digest"].startswith("sha256:"), evaluation
    r = run(runner, home, "release", "bc@1", "--key", "approver", "--json")
    expect(r, 0)
    assert isinstance(json.loads(r.stdout), dict)


def test_eval_and_release_name_a_key_the_policy_declares_compromised(
    runner: CliRunner, home: Path, script: Path
) -> None:
    """aud34's Left: ``train`` with a key its policy declares compromised said so, ``eval`` and
    ``release`` only that the key "does not hold the role" (a replaced key cannot be added
    back to the policy that revokes it). Each now names the declaration
    (`policy_state.not_in_role`), nothing recorded."""
    from trajledger import Ledger

    ledger = Ledger.open(home)
    for k in ("approver2", "evaluator2"):
        ledger.keys.create(k, encrypt=False)
    size = ledger.log.size
    text = (home / "policy.toml").read_text().replace("serial = 1", "serial = 2")
    text = text.replace("keys/approver.pub", "keys/approver2.pub").replace(
        'keys = ["keys/evaluator.pub"]', 'keys = ["keys/evaluator2.pub"]')
    for k in ("approver", "evaluator"):
        text += (f'\n[[revoked_keys]]\nkey = "keys/{k}.pub"\ncompromised_since = {size + 1}\n'
                 'reason = "laptop stolen"\n')
    (home / "policy-2.toml").write_text(text)
    ledger.set_policy(home / "policy-2.toml", keys=["approver", "approver2"])
    before = log_size(home)
    declared = (f"serial 2, which declares it compromised since log index {size + 1}: laptop "
                "stolen")
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            "--", sys.executable, str(script), "pass")
    expect(r, 1)
    assert f"does not hold the evaluator role in policy 'evals' {declared} (format 2); " \
        "evaluations are signed by roles.evaluator keys: sign with an evaluator key (1 in the " \
        "policy)\n" in r.stderr, r.stderr  # (not "record a policy naming this key")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 1)
    assert f"does not hold the approver role in policy 'evals' {declared}; a release is " \
        "signed by approver keys" in r.stderr, r.stderr
    r = run(runner, home, "approve", "train@1", "--key", "approver", "--purpose", "rl")
    expect(r, 1)  # (approve's own check of its signer named the declaration already)
    assert f"compromised since log index {size + 1}: laptop stolen" in r.stderr, r.stderr
    assert log_size(home) == before
