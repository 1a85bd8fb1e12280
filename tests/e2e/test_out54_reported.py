"""What out54 found playing outsiders: an ML engineer who trains by command, evaluates and
releases, and an auditor with the public keys and ``verify/`` alone; docs/SECURITY.md,
"Review of 2026-12-07, thirty-eighth round (out54)".

On test_evaluations' ledger (keys vendor, approver, trainer, evaluator; bc@1 and bc@2 trained
on train@1; regression@1 required at success_rate >= 0.5), through click's CliRunner.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner
from test_evaluations import REPO, evals_template, evaluate, home, log_size, script  # noqa: F401
from test_runner_cli import expect, run


def objects(home: Path) -> dict[str, tuple[int, bytes]]:  # noqa: F811
    """Every file of the store by path: its mode and bytes."""
    out = {}
    for top, _, files in os.walk(home / "objects"):
        for name in files:
            path = Path(top, name)
            out[str(path.relative_to(home))] = (stat.S_IMODE(path.stat().st_mode),
                                                 path.read_bytes())
    return out


WRITER = textwrap.dedent(
    """
    # Writes into its input directory in place (a memory map opened read-write, a cache
    # written beside the data, ...), writes a checkpoint, then fails.
    import glob, os, sys
    variable, pattern, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
    path = sorted(glob.glob(os.path.join(os.environ[variable], pattern)))[0]
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.write(b"XXXX")
    open(os.path.join(os.environ["TRAJLEDGER_OUTPUT_DIR"], "model.bin"), "wb").write(b"w")
    sys.exit(code)
    """
)


def test_a_command_that_fails_after_writing_into_its_input_leaves_the_store_as_it_was(
    runner: CliRunner, home: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out54 finding 1: ``train -- COMMAND`` whose command wrote into a data file in place (the
    file is a hard link to the store's object: one inode) and then exited non-zero said only
    ``command … exited with code 1; nothing was recorded``: the check of the data directory,
    which puts the store's object back from the verified bytes, ran only after an exit 0. The
    ledger was left damaged: the batch, the dataset and every checkpoint trained on it failed
    ``verify``, and ``train`` refused the dataset as tampered. ``eval -- COMMAND`` the same with
    the checkpoint's files, which are not held in memory: the checkpoint itself was damaged,
    unsaid. Now the failure names each change, the data's object is put back (the checkpoint's
    named for ``fsck --repair``), as after an exit 0."""
    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    before, size = objects(home), log_size(home)
    r = run(runner, home, "train", "--dataset", "train@1", "--key", "trainer", "--name", "cmd",
            "--version", "1", "--", sys.executable, writer, "TRAJLEDGER_DATA_DIR",
            "batches/*/steps.parquet", "1")
    expect(r, 1)
    assert "exited with code 1; nothing was recorded" in r.stderr, r.stderr
    assert "$TRAJLEDGER_DATA_DIR (" in r.stderr and "was changed by the command" in r.stderr
    assert "steps.parquet: the store's object sha256:" in r.stderr, r.stderr
    assert "it was put back from the verified bytes" in r.stderr, r.stderr
    assert objects(home) == before and log_size(home) == size
    expect(run(runner, home, "verify", "bc@1"), 0)
    # The evaluation's checkpoint directory: named, and (out56) put back from the bytes read
    # as they were hashed (a model past workdir.HELD_BYTES is the command's own copy:
    # test_out58_reported).
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator", "--",
            sys.executable, writer, "TRAJLEDGER_CHECKPOINT_DIR", "trainer.json", "2")
    expect(r, 1)
    assert "exited with code 2; nothing was recorded" in r.stderr, r.stderr
    assert ("trainer.json: the store's object sha256:" in r.stderr
            and "it was put back from the verified bytes" in r.stderr)
    assert objects(home) == before and log_size(home) == size


def test_a_command_that_makes_its_input_writable_does_not_leave_the_store_writable(
    runner: CliRunner, home: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out54 finding 1, its other half: a command that ``chmod``s its read-only data files
    (``chmod -R a+w $TRAJLEDGER_DATA_DIR`` before a tool writes a cache) made the store's
    objects they are hard links to writable, world-writable here, and the run was recorded
    without a word; ``fsck`` checks directories' modes only. Now the objects are made read-only
    again, with one WARNING naming the files; the run, on bytes unchanged, is recorded."""
    chmod = tmp_path / "chmod.py"
    chmod.write_text(textwrap.dedent(
        """
        import glob, os
        for p in glob.glob(os.path.join(os.environ["TRAJLEDGER_DATA_DIR"], "batches/*/*")):
            os.chmod(p, 0o666)
        open(os.path.join(os.environ["TRAJLEDGER_OUTPUT_DIR"], "model.bin"), "wb").write(b"m")
        """))
    before = objects(home)
    r = run(runner, home, "train", "--dataset", "train@1", "--key", "trainer", "--name", "cmd",
            "--version", "1", "--", sys.executable, chmod)
    expect(r, 0)
    assert "WARNING: $TRAJLEDGER_DATA_DIR (" in r.stderr, r.stderr
    assert "the command changed the mode of 2 read-only file(s)" in r.stderr, r.stderr
    assert "the store's objects were made read-only again (0444)" in r.stderr, r.stderr
    after = objects(home)
    assert all(after[p] == before[p] for p in before), "an object's mode or bytes changed"


def alone(tmp: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """``python -m verify ARGS`` from a copy of ``verify/`` alone (trajledger not importable)."""
    where = tmp / "alone"
    if not where.exists():
        where.mkdir(parents=True)
        shutil.copytree(REPO / "trajledger" / "verify", where / "verify",
                        ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import runpy, sys; sys.modules['trajledger'] = None; "
            "sys.argv = ['verify', *sys.argv[1:]]; runpy.run_module('verify', run_name='__main__')")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp)}
    return subprocess.run([sys.executable, "-E", "-s", "-c", code, *map(str, args)], cwd=where,
                          env=env, capture_output=True, text=True, timeout=300)


def released(runner: CliRunner, home: Path, script: Path, tmp: Path) -> tuple[str, Path]:  # noqa: F811
    """``bc@2`` evaluated (and ``bc@1``, its parent), released and exported: the release's
    digest and its bundle."""
    evaluate(runner, home, script, "pass", checkpoint="bc@1")
    evaluate(runner, home, script, "pass", checkpoint="bc@2")
    r = run(runner, home, "release", "bc@2", "--key", "approver")
    expect(r, 0)
    release = r.stdout.strip()
    bundle = tmp / "release.tar.zst"
    expect(run(runner, home, "export", release, "--out", bundle), 0)
    return release, bundle


def test_a_release_bundle_verifies_with_expect_its_own_checkpoint(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out54 finding 2 (out51's Left): an auditor given a checkpoint's digest and its release's
    bundle ran ``python -m verify RELEASE.tar.zst --policy P --expect CK`` and was refused
    (``the bundle is the evidence of release of bc@1 …, not of CK``: ask its sender for
    another bundle), though that bundle verifies the checkpoint's whole lineage with the
    release. Now it passes, the OK line naming the release; a release bundle given another
    checkpoint (its parent, in its lineage too) is still refused, and ``trajledger verify``
    of the bundle and of the release's digest agree."""
    from trajledger import Ledger
    from trajledger.ledger.catalog import Catalog

    ck = Catalog(Ledger.open(home)).resolve("bc@2").digest
    parent = Catalog(Ledger.open(home)).resolve("bc@1").digest
    release, bundle = released(runner, home, script, tmp_path)
    policy = home / "policy.toml"
    proc = alone(tmp_path, bundle, "--policy", policy, "--expect", ck)
    assert proc.returncode == 0, proc.stderr
    assert f"OK: {bundle}: release of bc@2 ({release}): " in proc.stderr, proc.stderr
    proc = alone(tmp_path, bundle, "--policy", policy, "--expect", ck, "--json")
    assert proc.returncode == 0 and '"ok":true' in proc.stdout.replace(" ", ""), proc.stderr
    proc = alone(tmp_path, bundle, "--policy", policy, "--expect", parent)
    assert proc.returncode == 1, proc.stderr
    assert f"the bundle is the evidence of release of bc@2 ({release}), not of {parent}" in \
        proc.stderr
    for given in (bundle, release):
        args = ("--policy", policy) if given == bundle else ()
        expect(run(runner, home, "verify", given, *args, "--expect", ck), 0)
        expect(run(runner, home, "verify", given, *args, "--expect", parent), 1)


def test_an_output_that_is_a_hard_link_to_an_input_is_named_as_one(
    runner: CliRunner, home: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out54 finding 3: a command that "copied" a data file into its output as a hard link
    (``os.link``, ``cp -l``) was refused with ``copy.parquet: changed while it was recorded; a
    process the command started outside its process group (setsid, a daemon) may still write
    there``, a cause that was not there (the link count of the store's inode changed while it
    was stored), and a kept ``--output`` held a second name of the store's object. Now the file
    is named as what it is, with the way on, before anything is stored (exit 3, as a symbolic
    link there)."""
    linker = tmp_path / "linker.py"
    linker.write_text(textwrap.dedent(
        """
        import glob, os
        data = os.environ["TRAJLEDGER_DATA_DIR"]
        src = sorted(glob.glob(os.path.join(data, "batches/*/steps.parquet")))[0]
        os.link(src, os.path.join(os.environ["TRAJLEDGER_OUTPUT_DIR"], "copy.parquet"))
        """))
    before, size = objects(home), log_size(home)
    for kept in ((), ("--output", tmp_path / "out")):
        r = run(runner, home, "train", "--dataset", "train@1", "--key", "trainer", "--name",
                "cmd", "--version", "1", *kept, "--", sys.executable, linker)
        expect(r, 3)
        assert "copy.parquet is a hard link to $TRAJLEDGER_DATA_DIR/batches/" in r.stderr, \
            r.stderr
        assert "/steps.parquet, a file of the ledger's store" in r.stderr, r.stderr
        assert "write a copy there" in r.stderr and "a daemon" not in r.stderr, r.stderr
    assert objects(home) == before and log_size(home) == size


def test_a_run_stopped_after_its_command_wrote_into_its_input_leaves_the_store_as_it_was(
    home: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out54 finding 1, a run stopped: a training job preempted (SIGTERM) or interrupted
    (Ctrl-C) after its command wrote into a data file in place said ``stopped by SIGTERM;
    nothing was recorded or half-written``, and the store's object, the same inode, stayed
    changed: ``fsck`` and every checkpoint on the batch failed. Now it is put back as the
    inputs are removed, with a WARNING naming it; the exit is the signal's (143)."""
    writer = tmp_path / "writer.py"
    writer.write_text(WRITER.replace("sys.exit(code)", "print('written', flush=True)\n"
                                     "import time; time.sleep(60)"))
    before, size = objects(home), log_size(home)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trajledger", "--ledger", str(home), "train", "--dataset",
         "train@1", "--key", "trainer", "--name", "cmd", "--version", "1", "--",
         sys.executable, str(writer), "TRAJLEDGER_DATA_DIR", "batches/*/steps.parquet", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # the command's output comes on trajledger's stderr
        if line.strip() == "written":
            break
    proc.terminate()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "FAIL: stopped by SIGTERM; nothing was recorded or half-written" in err, err
    assert "WARNING: the command changed its inputs before it was stopped; " in err, err
    assert "it was put back from the verified bytes" in err, err
    assert objects(home) == before and log_size(home) == size


def near_suite(home: Path, name: str) -> None:  # noqa: F811
    """Dataset ``NAME@2`` (regression): train@1's 30 episodes with their observations moved by
    at most 1e-4 (near duplicates of bc@1's training data, no exact one)."""
    import numpy as np
    import pyarrow as pa

    from trajledger import Ledger
    from trajledger.runner.rollouts import run_policy

    ledger = Ledger.open(home)
    played = run_policy(None, "CartPole-v1", 30, 0, policy_version="random")  # = train@1's
    obs = played.steps.column("obs").combine_chunks()
    flat = obs.values.to_numpy(zero_copy_only=False)
    moved = flat + np.random.default_rng(0).uniform(-1e-4, 1e-4, flat.shape).astype(flat.dtype)
    steps = played.steps.set_column(
        played.steps.schema.get_field_index("obs"), played.steps.schema.field("obs"),
        pa.ListArray.from_arrays(obs.offsets, pa.array(moved, obs.type.value_type)))
    batch = ledger.record_batch(steps, episodes=played.episodes, env="cartpole@1",
                                policy="copied", key="vendor", name="near-batch")
    ledger.create_dataset(name, "2", "regression", [batch.digest], key="vendor")


def test_a_release_on_a_suite_of_near_duplicates_of_the_training_data_says_so(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out54 finding 4: ``eval`` on a suite whose episodes are the training episodes with their
    observations moved by 1e-4 warned, episode by episode, that they are near duplicates of
    bc@1's training data (the policy refuses exact duplicates only), and recorded ``near`` in
    its signed ``contamination`` entry; then ``release``, ``release --dry-run``, ``verify``
    of the release and ``python -m verify`` of its bundle said nothing of it: whoever
    releases, or audits the release, never learned that the suite was, in part, the training
    data. Now each says it (a ``NOTE:`` of ``release``, an ``info`` check of the decision);
    the evaluation still counts."""
    from trajledger import Ledger

    near_suite(home, "regression")
    ledger = Ledger.open(home)
    successor = (home / "policy.toml").read_text().replace("serial = 1", "serial = 2").replace(
        'suite = "regression@1"', 'suite = "regression@2"')
    (home / "policy-2.toml").write_text(successor)
    ledger.set_policy(home / "policy-2.toml", keys=["approver"])
    evaluate(runner, home, script, "pass", checkpoint="bc@1", suite="regression@2")
    r = run(runner, home, "release", "bc@1", "--dry-run")
    expect(r, 0)
    note = r.stderr.split("NOTE: release of bc@1: contamination on regression@2: evaluation ")
    assert len(note) == 2, r.stderr
    found = note[1].split(" found ")[1].split(" suite episode(s) near duplicates of bc@1's")[0]
    assert found.endswith(" of its 30") and int(found.split()[0]) > 0, r.stderr
    assert "training data; it counts" in note[1], r.stderr
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    release = r.stdout.strip()
    assert "NOTE: release of bc@1: contamination on regression@2: " in r.stderr, r.stderr
    r = run(runner, home, "verify", release)
    expect(r, 0)
    assert "· contamination on regression@2 — evaluation sha256:" in r.stdout, r.stdout
    bundle = tmp_path / "release.tar.zst"
    expect(run(runner, home, "export", release, "--out", bundle), 0)
    proc = alone(tmp_path, bundle, "--policy", home / "policy-2.toml")
    assert proc.returncode == 0, proc.stderr
    assert "· contamination on regression@2 — evaluation sha256:" in proc.stdout, proc.stdout
    assert "near duplicates of bc@1's training data" in proc.stdout, proc.stdout


def test_a_release_bundle_checks_its_checkpoints_files(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out54 finding 5: the auditor with a release's bundle and the model files it was sent
    ran ``python -m verify RELEASE.tar.zst --policy P --files DIR`` (README: "checks a
    directory of model files"): ``release of bc@2 (…) > files: DIR: not compared: release of
    bc@2 (…) has no verified file list``, exit 1, whatever the files. Now a release's files are
    its checkpoint's: each is named and hashed, an extra file fails; ``trajledger verify`` of
    the release's digest and of its bundle alike."""
    import json

    from trajledger import Ledger

    release, bundle = released(runner, home, script, tmp_path)
    model = tmp_path / "model"
    model.mkdir()
    r = run(runner, home, "show", "bc@2", "--json")
    expect(r, 0)
    store = Ledger.open(home).store
    manifest = json.loads(store.get(json.loads(r.stdout)["digest"]))
    for f in manifest["files"]:
        (model / f["path"]).write_bytes(store.get("sha256:" + f["digest"]["sha256"]))
    policy = home / "policy.toml"
    proc = alone(tmp_path, bundle, "--policy", policy, "--files", model)
    assert proc.returncode == 0, proc.stderr
    assert f"matches {model}/trainer.json" in proc.stdout, proc.stdout
    expect(run(runner, home, "verify", release, "--files", model), 0)
    expect(run(runner, home, "verify", bundle, "--policy", policy, "--files", model), 0)
    (model / "extra.bin").write_bytes(b"x")
    proc = alone(tmp_path, bundle, "--policy", policy, "--files", model)
    assert proc.returncode == 1, proc.stderr
    assert f"> extra file extra.bin: in {model}, not listed by checkpoint bc@2" in proc.stderr
    expect(run(runner, home, "verify", release, "--files", model), 1)


def test_a_release_refused_for_revoked_training_data_names_the_way_on(
    runner: CliRunner, home: Path, script: Path  # noqa: F811
) -> None:
    """out54 finding 6: ``release`` of bc@1, evaluated, after its training dataset was revoked
    said ``dataset train@1 (…) > revoked: …; and N records that depend on it`` and nothing
    more; ``--json``'s ``next`` was empty, where every other refusal of a release names the
    way on (out46, out47). Now the line and ``next`` say it: train another checkpoint on data
    that stands, evaluate it, release that one. Nothing is recorded."""
    import json

    evaluate(runner, home, script, "pass", checkpoint="bc@1")
    expect(run(runner, home, "revoke", "train@1", "--key", "approver", "--reason",
               "licence withdrawn"), 0)
    size = log_size(home)
    step = ("bc@1 stands on it, and no release of it can stand: train a checkpoint on data that "
            "stands ('trajledger train --dataset NAME@VERSION --key KEY'), evaluate it, then "
            "release that one")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 1)
    assert "FAIL: dataset train@1 (sha256:" in r.stderr, r.stderr
    assert f"> revoked: licence withdrawn (log index {size - 1}); " in r.stderr, r.stderr
    assert r.stderr.rstrip().endswith("; " + step), r.stderr
    r = run(runner, home, "release", "bc@1", "--dry-run", "--json")
    expect(r, 1)
    doc = json.loads(r.stdout)
    assert doc["releasable"] is False and doc["next"] == [step], doc["next"]
    assert log_size(home) == size
