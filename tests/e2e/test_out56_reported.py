"""What out56 found playing the ML engineer, the evaluator, the release manager and the auditor;
docs/SECURITY.md, "Review of 2026-12-07, thirty-ninth round (out56)".

On test_evaluations' ledger (keys vendor, approver, trainer, evaluator; bc@1 and bc@2 trained
on train@1; regression@1 required at success_rate >= 0.5), through click's CliRunner; the
ledger's files (`ledger_files`: every path's mode and SHA-256) compared before and after every
refusal.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner
from test_evaluations import evals_template, evaluate, home, log_size, script  # noqa: F401
from test_out54_reported import alone, near_suite
from test_runner_cli import expect, run


def ledger_files(home: Path) -> dict[str, tuple[int, str]]:  # noqa: F811
    """Every file under the ledger by path: its mode and SHA-256 (a refusal changes none)."""
    out = {}
    for top, _, names in os.walk(home):
        for name in names:
            path = Path(top, name)
            out[str(path.relative_to(home))] = (stat.S_IMODE(path.lstat().st_mode),
                                                 hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def successor(home: Path, serial: int, *, suite: str = "regression@1",  # noqa: F811
              tail: str = "") -> Path:
    """Policy ``serial`` (the module's policy requiring ``suite``, then ``tail``), set."""
    from trajledger import Ledger

    text = (home / "policy.toml").read_text().replace("serial = 1", f"serial = {serial}")
    path = home / f"policy-{serial}.toml"
    path.write_text(text.replace('suite = "regression@1"', f'suite = "{suite}"') + tail)
    Ledger.open(home).set_policy(path, keys=["approver"])
    return path


def test_a_release_on_near_duplicates_fails_under_a_policy_that_refuses_them(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out54's Left: a release whose evaluation found near duplicates of the checkpoint's
    training data (recorded, under a policy refusing exact duplicates only, with an ``info``
    line: out54 finding 4) still verified, exit 0, under a successor policy (or an auditor's)
    with ``[contamination] refuse = "near"``, which has ``eval`` refuse that very suite: the
    demanding auditor's rule was not applied to the evidence the release stands on. Now the
    check ``contamination on SUITE`` fails under such a policy, with the evaluation's recorded
    count and the way on (``release --dry-run --json``'s ``next`` too); ``trajledger verify``
    and ``python -m verify`` of the bundle agree, exit 1; the ledger is unchanged."""
    near_suite(home, "regression")
    successor(home, 2, suite="regression@2")
    evaluate(runner, home, script, "pass", checkpoint="bc@1", suite="regression@2")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    release = r.stdout.strip()
    bundle = tmp_path / "release.tar.zst"
    expect(run(runner, home, "export", release, "--out", bundle), 0)
    strict = successor(home, 3, suite="regression@2",
                       tail='\n[contamination]\nrefuse = "near"\n')
    before, size = ledger_files(home), log_size(home)
    refused = "; the policy's [contamination] refuse = \"near\" refuses such a suite ('eval' "
    r = run(runner, home, "verify", release)
    expect(r, 1)
    assert "contamination on regression@2: evaluation sha256:" in r.stderr, r.stderr
    found = r.stderr.split(" found ")[1].split(" suite episode(s) near duplicates of bc@1's")[0]
    assert found.endswith(" of its 30") and int(found.split()[0]) > 0, r.stderr
    assert refused in r.stderr and "whenever it was recorded" in r.stderr, r.stderr
    proc = alone(tmp_path, bundle, "--policy", strict)
    assert proc.returncode == 1, proc.stderr
    assert refused in proc.stderr and f"{found} suite episode(s) near" in proc.stderr
    proc = alone(tmp_path, bundle, "--policy", strict, "--json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["ok"] is False, proc.stderr
    # The auditor's other views of the same release agree: the same failing records, exit 1.
    seen = {"python -m verify": failing(json.loads(proc.stdout))}
    for command in ("verify", "lineage"):
        r = run(runner, home, command, release, "--json")
        expect(r, 1)
        seen[command] = failing(json.loads(r.stdout))
    assert seen["verify"] == seen["lineage"] == seen["python -m verify"] != set(), seen
    r = run(runner, home, "release", "bc@1", "--dry-run", "--json")
    expect(r, 1)
    doc = json.loads(r.stdout)
    assert doc["releasable"] is False, doc
    assert [s for s in doc["next"] if s.startswith("the policy's [contamination] refuse")], doc
    assert ledger_files(home) == before and log_size(home) == size
    # Under the policy that refuses exact duplicates only, the same bundle verifies (info).
    proc = alone(tmp_path, bundle, "--policy", home / "policy-2.toml")
    assert proc.returncode == 0, proc.stderr
    assert "it counts, as an evaluation does whatever near duplicates" in proc.stdout


FAILS = textwrap.dedent(
    """
    import os, sys
    open(os.path.join(os.environ["TRAJLEDGER_OUTPUT_DIR"], "model.bin"), "wb").write(b"m")
    sys.exit(3)
    """
)


def test_a_failed_run_says_that_its_output_directory_keeps_the_files(
    runner: CliRunner, home: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out54's Left: ``train --output DIR -- COMMAND`` whose command wrote ``model.bin`` and
    exited 3 said ``command … exited with code 3; nothing was recorded`` and kept DIR's file
    without a word: the next run with that ``--output`` was refused (not empty). Now one
    WARNING names what DIR keeps and the way to run again; without ``--output`` nothing is
    said (the temporary directory goes)."""
    fails = tmp_path / "fails.py"
    fails.write_text(FAILS)
    out = tmp_path / "out"
    before = ledger_files(home)
    for kept in (("--output", out), ()):
        r = run(runner, home, "train", "--dataset", "train@1", "--key", "trainer", "--name",
                "cmd", "--version", "1", *kept, "--", sys.executable, fails)
        expect(r, 1)
        assert "exited with code 3; nothing was recorded" in r.stderr, r.stderr
        said = (f"WARNING: --output {out} keeps 1 file(s) (model.bin) the command wrote, though "
                "the run failed: to run again, remove them or give another --output\n")
        assert (said in r.stderr) == bool(kept), r.stderr
        assert ledger_files(home) == before
    assert (out / "model.bin").read_bytes() == b"m"


def test_a_second_ctrl_c_while_a_stopped_run_puts_its_inputs_back_is_held(
    home: Path, monkeypatch: object  # noqa: F811
) -> None:
    """out54's Left: a run stopped (Ctrl-C) after its command wrote a data file in place (a
    hard link to the store's object) has the object put back as its inputs go (out54 finding
    1); a second Ctrl-C during that re-hash raised out of it: the object stayed as the command
    left it (``fsck`` failed, every checkpoint on the batch with it) and the inputs stayed in
    the ledger's ``tmp/``. Now stop signals are held until it is done (the WARNING counts them);
    the interruption raised is the first."""
    import pytest

    from trajledger import Ledger
    from trajledger.runner import workdir
    from trajledger.runner.workdir import TreeFile, Workspace, write_tree

    ledger = Ledger.open(home)
    store = ledger.store
    digest = next(e.subject for e in _batches(home))
    manifest = json.loads(store.get(digest))
    f = manifest["files"][0]
    object_digest = "sha256:" + f["digest"]["sha256"]
    data = store.get(object_digest)
    before = ledger_files(home)
    real = workdir.check_data_dir
    pressed: list[bool] = []

    def check(*args: object, **kw: object) -> None:
        if not pressed:  # the user's second Ctrl-C, as the re-hash starts
            pressed.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(workdir, "check_data_dir", check)  # type: ignore[attr-defined]
    held = r"put back from the verified bytes \(1 stop signal\(s\) held until it was done\)"
    with pytest.warns(workdir.InputModeWarning, match=held), \
            pytest.raises(KeyboardInterrupt, match="first"), \
            Workspace(ledger.scratch, store) as ws:
        d = ws.add("TRAJLEDGER_DATA_DIR", lambda p: write_tree(
            p, store, [TreeFile("steps.parquet", object_digest, len(data), data)]), "data")
        ws.environment({})
        linked = d.path / "steps.parquet"
        os.chmod(linked, 0o644)
        with open(linked, "r+b") as fh:
            fh.write(b"XXXX")
        raise KeyboardInterrupt("first")
    assert pressed and store.get(object_digest) == data
    assert ledger_files(home) == before


def _batches(home: Path) -> list[object]:  # noqa: F811
    from test_evaluations import entries

    return [e for e in entries(home) if e.kind == "rollout-batch"]


WRITER = textwrap.dedent(
    """
    # An evaluating command that writes the checkpoint's file in place (a framework saving
    # optimizer state beside the weights it loaded), then exits 0 or 2.
    import os, sys
    path = os.path.join(os.environ["TRAJLEDGER_CHECKPOINT_DIR"], "trainer.json")
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.write(b"XXXX")
    sys.exit(int(sys.argv[1]))
    """
)


def test_an_evaluation_that_writes_the_checkpoint_in_place_leaves_the_store_as_it_was(
    runner: CliRunner, home: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out54's Left: ``eval -- COMMAND`` whose command wrote a checkpoint file in place (a hard
    link to the store's object, 0444: it ``chmod``s first) left the checkpoint's object damaged,
    only named (``restore it with 'trajledger fsck --repair --from BUNDLE|LEDGER'``): the
    checkpoint, every evaluation and release of it failed ``verify`` until then. Now the bytes
    of a checkpoint's linked files are kept as they are hashed (one read, up to
    ``workdir.HELD_BYTES``) and the object is put back from them, after a failed command and
    after an exit 0 alike; a model past the budget is the command's own copy since out58
    (test_out58_reported)."""
    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    before, size = ledger_files(home), log_size(home)
    for code, exit_code in (("2", 1), ("0", 1)):
        r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
                "--", sys.executable, writer, code)
        expect(r, exit_code)
        assert "trainer.json: the store's object sha256:" in r.stderr, r.stderr
        assert "it was put back from the verified bytes" in r.stderr, r.stderr
        assert ledger_files(home) == before and log_size(home) == size
    expect(run(runner, home, "verify", "bc@1"), 0)


LAUNCHER = textwrap.dedent(
    """
    # A launcher of two ranks on a local Ray instance (ray.init: its raylet and workers are
    # processes of their own): rank 0 saves its part of the model in $TRAJLEDGER_OUTPUT_DIR;
    # rank 1 writes its data file in place and fails, or saves its part beside the output.
    import glob, os, sys
    import ray

    @ray.remote
    def rank(i, mode):
        out = os.environ["TRAJLEDGER_OUTPUT_DIR"]
        if i == 0:
            open(os.path.join(out, "rank0.bin"), "wb").write(b"weights")
            return "saved"
        if mode == "outside":
            open(os.path.join(out, "..", "rank1.bin"), "wb").write(b"weights")
            return "saved"
        data = os.environ["TRAJLEDGER_DATA_DIR"]
        path = sorted(glob.glob(os.path.join(data, "batches/*/steps.parquet")))[0]
        os.chmod(path, 0o644)
        with open(path, "r+b") as f:
            f.write(b"XXXX")
        raise RuntimeError("rank 1 failed")

    ray.init(num_cpus=2, include_dashboard=False)
    try:
        print(ray.get([rank.remote(i, sys.argv[1]) for i in range(2)]), flush=True)
    except ray.exceptions.RayTaskError as e:  # (a launcher's one line, not a traceback)
        sys.exit(f"a rank failed: {type(e.cause).__name__}")
    finally:
        ray.shutdown()
    """
)


def test_a_launcher_of_two_ranks_one_failing_or_saving_outside_its_output(
    runner: CliRunner, home: Path, tmp_path: Path, monkeypatch: object  # noqa: F811
) -> None:
    """The brief's launcher case, on a local Ray instance (the test extras hold Ray, not torch):
    ``train -- python launch.py`` whose second rank, a Ray worker (a process the raylet started,
    not COMMAND's child), wrote its data file in place and failed: exit 1, the exit's line, the
    store's object put back (out54 finding 1 holds for a worker outside COMMAND's group). A
    second rank that saved its part of the model at ``$TRAJLEDGER_OUTPUT_DIR/../rank1.bin``,
    in the run's temporary directory: the checkpoint was recorded with rank 0's file alone,
    exit 0, and rank 1's removed with the directory, unsaid; a signed, incomplete checkpoint.
    Now that is refused before anything is stored, naming the file (exit 3, as an output that
    is a link); the ledger is unchanged both times."""
    import pytest

    pytest.importorskip("ray")
    monkeypatch.setenv("HOME", str(tmp_path))  # type: ignore[attr-defined]
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    before, size = ledger_files(home), log_size(home)
    r = run(runner, home, "train", "--dataset", "train@1", "--key", "trainer", "--name", "ray",
            "--version", "1", "--", sys.executable, launcher, "fail")
    expect(r, 1)
    assert "exited with code 1; nothing was recorded" in r.stderr, r.stderr
    assert "it was put back from the verified bytes" in r.stderr, r.stderr
    assert ledger_files(home) == before and log_size(home) == size
    r = run(runner, home, "train", "--dataset", "train@1", "--key", "trainer", "--name", "ray",
            "--version", "1", "--", sys.executable, launcher, "outside")
    expect(r, 3)
    assert "FAIL: the command wrote rank1.bin in the run's temporary directory (" in r.stderr
    assert "write every file of the checkpoint there; nothing was recorded" in r.stderr
    assert ledger_files(home) == before and log_size(home) == size


def failing(doc: dict[str, object]) -> set[tuple[str, str, str]]:
    """The record nodes of a ``--json`` report (verify's, lineage's, impact's, or ``python -m
    verify``'s) that fail or stand on a failure: (digest, status, lineage)."""
    report = doc.get("report", doc)
    assert isinstance(report, dict)
    return {(n["id"], n["status"], n.get("lineage", "ok")) for n in report["nodes"]
            if n["kind"] not in ("log", "bundle")
            and (n["status"] != "ok" or n.get("lineage", "ok") != "ok")}


def test_a_release_whose_parent_was_revoked_after_it_fails_alike_everywhere(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path  # noqa: F811
) -> None:
    """The brief's release of a checkpoint whose parent was revoked after the release, and the
    auditor's ``lineage``/``impact``/``query --json`` against ``python -m verify`` on the
    bundle exported since: they agree on every failing record and on the exit (a failing
    lineage never exits 0; ``impact`` exits 0 by its rule, its report failing, a WARNING
    said); the bundle exported before the revocation still verifies (the auditor learns of
    it from an update). ``release`` of bc@2 again said ``train a checkpoint on data that
    stands``, though what fails is its parent checkpoint, not its data: now the line and
    ``next`` say to train without that parent; and ``query --in bc@2`` and ``stats bc@2`` said
    nothing of the parent's revocation: now they name it. The ledger is unchanged by every
    refusal."""
    from test_out54_reported import released

    from trajledger import Ledger
    from trajledger.ledger.catalog import Catalog

    parent = Catalog(Ledger.open(home)).resolve("bc@1").digest
    release, before_revocation = released(runner, home, script, tmp_path)
    expect(run(runner, home, "revoke", "bc@1", "--key", "approver", "--reason",
               "weights leaked"), 0)
    bundle = tmp_path / "since.tar.zst"
    expect(run(runner, home, "export", release, "--out", bundle), 0)
    before, size = ledger_files(home), log_size(home)
    step = ("bc@2 stands on it, and no release of it can stand: train a checkpoint that does not "
            "('trajledger train --dataset NAME@VERSION --key KEY', with no --parent or a "
            "--parent that stands), evaluate it, then release that one")
    r = run(runner, home, "release", "bc@2", "--key", "approver")
    expect(r, 1)
    assert f"FAIL: checkpoint bc@1 ({parent[:19]}…) > revoked: weights leaked" in r.stderr
    assert r.stderr.rstrip().endswith("; " + step), r.stderr
    r = run(runner, home, "release", "bc@2", "--dry-run", "--json")
    expect(r, 1)
    assert json.loads(r.stdout)["next"] == [step], r.stdout
    reports = {}
    for command in ("verify", "lineage"):
        r = run(runner, home, command, release, "--json")
        expect(r, 1)
        reports[command] = json.loads(r.stdout)
    policy = home / "policy.toml"
    proc = alone(tmp_path, bundle, "--policy", policy, "--json")
    assert proc.returncode == 1, proc.stderr
    reports["python -m verify"] = json.loads(proc.stdout)
    r = run(runner, home, "impact", "bc@1", "--json")
    expect(r, 0)
    assert "WARNING: impact bc@1: " in r.stderr and "the answer is whole: exit 0" in r.stderr
    reports["impact"] = json.loads(r.stdout)
    assert all(doc.get("report", doc)["ok"] is False for doc in reports.values()), reports
    seen = {name: failing(doc) for name, doc in reports.items()}
    assert (parent, "fail", "fail") in seen["verify"], seen["verify"]
    assert (release, "ok", "fail") in seen["verify"], seen["verify"]
    assert seen["lineage"] == seen["verify"] == seen["python -m verify"], seen
    assert seen["impact"] <= seen["verify"] and (release, "ok", "fail") in seen["impact"]
    assert ledger_files(home) == before and log_size(home) == size
    # (query brings the derived index up to date: it writes index/, nothing else)
    r = run(runner, home, "query", "artifacts", "--where", "kind = 'revocation'", "--json")
    expect(r, 0)
    assert [row["digest"] for row in json.loads(r.stdout)] == [parent], r.stdout
    # The rows of bc@2's episodes are derived data, exit 0, and say what its lineage holds.
    for args in (("query", "episodes", "--in", "bc@2", "--limit", "0", "--json"),
                 ("stats", "bc@2")):
        r = run(runner, home, *args)
        expect(r, 0)
        assert f"WARNING: {parent[:19]}…: the log holds a revocation of it" in r.stderr, r.stderr
    assert log_size(home) == size
    # The bundle the auditor got before the revocation: its evidence, as it was.
    assert alone(tmp_path, before_revocation, "--policy", policy).returncode == 0


def test_an_evaluation_in_another_environment_version_says_so_to_the_release(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path  # noqa: F811
) -> None:
    """The brief's suite whose environment version differs from the checkpoint's: bc@1 was
    trained on cartpole@1's episodes; regression@2 was recorded in cartpole@2 (the same
    Gymnasium id: a new rules version). ``eval``, ``release``, ``verify`` of the release and
    ``python -m verify`` of its bundle said nothing of it: the release manager and the
    auditor read a success rate measured elsewhere than where the checkpoint was trained as
    if it were the same. Now ``eval`` warns, naming both versions, and the release says it:
    a ``NOTE:`` of ``release``, an ``info`` check of the decision everywhere. Not refused: a
    suite of the next version is how a checkpoint is tried there."""
    from trajledger import Ledger
    from trajledger.runner.rollouts import run_policy

    ledger = Ledger.open(home)
    ledger.register_environment("cartpole", "2", key="vendor", gym_id="CartPole-v1")
    played = run_policy(None, "CartPole-v1", 6, 3000, policy_version="random")
    batch = ledger.record_batch(played.steps, episodes=played.episodes, env="cartpole@2",
                                policy="random", key="vendor", name="v2-batch")
    ledger.create_dataset("regression", "2", "regression", [batch.digest], key="vendor")
    successor(home, 2, suite="regression@2")
    said = ("suite regression@2's episodes were recorded in environment cartpole@2, and bc@1 was "
            "trained in cartpole@1: the evaluation measures it in another version of its "
            "environment")
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@2", "--key", "evaluator", "--",
            sys.executable, script, "pass")
    expect(r, 0)
    assert f"WARNING: evaluation of bc@1 on regression@2: {said}; it is recorded" in r.stderr
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    release = r.stdout.strip()
    assert "NOTE: release of bc@1: environment on regression@2: evaluation sha256:" in r.stderr
    assert said in r.stderr, r.stderr
    r = run(runner, home, "verify", release)
    expect(r, 0)
    assert "· environment on regression@2 — evaluation sha256:" in r.stdout, r.stdout
    bundle = tmp_path / "release.tar.zst"
    expect(run(runner, home, "export", release, "--out", bundle), 0)
    proc = alone(tmp_path, bundle, "--policy", home / "policy-2.toml")
    assert proc.returncode == 0, proc.stderr
    assert said in proc.stdout, proc.stdout
    # The suite of the checkpoint's own environment version: nothing said.
    r = run(runner, home, "eval", "bc@2", "--suite", "regression@1", "--key", "evaluator", "--",
            sys.executable, script, "pass")
    expect(r, 0)
    assert "another version of its environment" not in r.stderr, r.stderr


def test_query_and_stats_of_a_checkpoint_name_its_datasets_revocation(
    runner: CliRunner, home: Path  # noqa: F811
) -> None:
    """The auditor's ``query episodes --in CK --json`` and ``stats CK`` after the dataset CK was
    trained on was revoked (a licence withdrawn): ``OK: 30 row(s) of episodes``, exit 0, and
    not a word, where ``verify CK`` and ``lineage CK`` exit 1 naming the revocation and
    ``query --in DATASET`` warns of it (docs/AUDIT_FIRST_HOUR.md: ``query episodes --in REF``
    names a revocation of REF or its batches; a checkpoint's dataset was neither). Now the
    checkpoint's datasets are looked at too: the WARNING names the revocation (derived rows,
    exit 0 as before: the verdict is verify's)."""
    from trajledger import Ledger
    from trajledger.ledger.catalog import Catalog

    dataset = Catalog(Ledger.open(home)).resolve("train@1").digest
    expect(run(runner, home, "revoke", "train@1", "--key", "approver", "--reason",
               "licence withdrawn"), 0)
    said = f"WARNING: {dataset[:19]}…: the log holds a revocation of it (log index "
    for command in ("verify", "lineage"):
        r = run(runner, home, command, "bc@2", "--json")
        expect(r, 1)
        assert json.loads(r.stdout)["ok"] is False
    r = run(runner, home, "query", "episodes", "--in", "bc@2", "--limit", "0", "--json")
    expect(r, 0)
    assert len(json.loads(r.stdout)) == 30 and said in r.stderr, r.stderr
    r = run(runner, home, "stats", "bc@2")
    expect(r, 0)
    assert said in r.stderr, r.stderr


def test_a_ctrl_c_during_the_check_after_an_exit_0_leaves_the_store_as_it_was(
    home: Path, monkeypatch: object  # noqa: F811
) -> None:
    """Finding 3's neighbour: a command that wrote a data file in place (a hard link to the
    store's object) and exited 0; Ctrl-C during the re-hash that follows (minutes for a large
    dataset): the check had marked itself done as it began, so the stopped run's repair
    (out54 finding 1) was skipped, and the object stayed as the command left it. Now the
    inputs count as checked only once every one was; the interruption stays the one raised."""
    import pytest

    from trajledger import Ledger
    from trajledger.runner import workdir
    from trajledger.runner.workdir import TreeFile, Workspace, write_tree

    ledger = Ledger.open(home)
    store = ledger.store
    manifest = json.loads(store.get(next(e.subject for e in _batches(home))))
    object_digest = "sha256:" + manifest["files"][0]["digest"]["sha256"]
    data = store.get(object_digest)
    before = ledger_files(home)
    real = workdir.check_data_dir
    calls: list[int] = []

    def check(*args: object, **kw: object) -> None:
        calls.append(1)
        if len(calls) == 1:  # Ctrl-C as the check after the command begins
            raise KeyboardInterrupt("during the check")
        real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(workdir, "check_data_dir", check)  # type: ignore[attr-defined]
    with pytest.warns(workdir.InputModeWarning, match="put back from the verified bytes"), \
            pytest.raises(KeyboardInterrupt, match="during the check"), \
            Workspace(ledger.scratch, store) as ws:
        d = ws.add("TRAJLEDGER_DATA_DIR", lambda p: write_tree(
            p, store, [TreeFile("steps.parquet", object_digest, len(data), data)]), "data")
        ws.environment({})
        linked = d.path / "steps.parquet"
        os.chmod(linked, 0o644)
        with open(linked, "r+b") as fh:
            fh.write(b"XXXX")
        ws.check()
    assert len(calls) == 2 and store.get(object_digest) == data
    assert ledger_files(home) == before
