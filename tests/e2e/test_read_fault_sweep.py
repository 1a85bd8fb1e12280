"""Read faults in the commands that judge a lineage (left25; lock24's Left: the write sweep,
tests/e2e/test_fault_sweep.py, injects write errors and kills only), and in those that judge
data before they record or release (lead26: ``impact``, ``export``, ``train``, ``dataset
create``, ``eval``, ``release``), and in those that delete or withdraw, or record what a
checkpoint played (fault27: ``erase``, ``revoke`` of a batch and of an approval, ``rollout``;
``import``, which needs a second ledger, is test_read_faults_import.py's), and ``export
--updates-since`` and ``dataset create --from-failures`` (fault28; ``monitor``, a buyer watching
a vendor's served log, is test_read_faults_monitor.py's).

On a copy of test_approve_lineage.py's ledger (test_evaluations.py's CartPole ledger, train@1
approved, a second batch ``b2``) with a checkpoint ``bc@1`` trained on train@1, a regression
set ``regression@1`` and an evaluation of bc@1 on it: `faultkit.Faults`
with ``reads=True`` counts the reads a command makes in the ledger, its user state and its
working directory (each open for reading, each SQLite SELECT), then each run fails one with EIO
(the OS's ``OSError``; SQLite's ``disk I/O error``): the checkpoint note, a tile, an entry
bundle, an envelope, a manifest, a key handover, the user state's databases. The rule: an I/O
error is exit 3 with one ``FAIL:`` line, never exit 1 ("its lineage fails": a user would act on
a false verdict), never OK (the check did not run), never a traceback; the ledger is left as it
was (the log did not grow).

CI runs a deterministic sample: of each command, `SPREAD` points spread over its reads (its
last, then every ``len / SPREAD`` back, rounded up; ``TRAJLEDGER_FAULTS_SEED`` shifts them);
``TRAJLEDGER_FAULTS=all`` runs every point of every command. The counts are printed (``-s``).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import pytest
import testkit
from click.testing import Result
from faultkit import Faults, Restorer
from test_evaluations import cartpole_ledger

from trajledger import Ledger
from trajledger.ledger.batch_features import batch_files
from trajledger.runner.cli import main
from trajledger.runner.rollouts import run_policy
from trajledger.verify.log_entry import LogEntry

MODE = os.environ.get("TRAJLEDGER_FAULTS", "")
SEED = int(os.environ.get("TRAJLEDGER_FAULTS_SEED", "0"))
SPREAD = 4

COMMANDS: dict[str, list[str]] = {
    "verify": ["verify", "bc@1"],
    "approve": ["approve", "b2", "--key", "approver"],
    "admit": ["admit", "train@1"],
    "record --policy CK": ["record", "@steps", "--env", "cartpole@1", "--policy", "@ck",
                           "--key", "vendor"],
    "lineage": ["lineage", "bc@1"],
    "impact": ["impact", "b2"],
    "export": ["export", "bc@1", "--out", "@bundle"],
    "train": ["train", "--dataset", "train@1", "--key", "trainer", "--name", "bc", "--version",
              "2", "--seed", "1"],
    "dataset create": ["dataset", "create", "d2", "--version", "1", "--split", "train",
                       "--batch", "b2", "--key", "vendor"],
    "eval": ["eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
             "--pass-return", "10"],
    "release": ["release", "bc@1", "--key", "approver"],
    "erase": ["erase", "b2", "--key", "vendor", "--reason", "consent"],
    "revoke": ["revoke", "b2", "--key", "vendor", "--reason", "PII"],
    "revoke APPROVAL": ["revoke", "@approval", "--key", "approver", "--reason", "wrong one"],
    "rollout": ["rollout", "--checkpoint", "bc@1", "--env", "cartpole@1", "--episodes", "1",
                "--max-steps", "5", "--key", "vendor"],
    "export --updates-since": ["export", "--updates-since", "2", "--out", "@updates"],
    "dataset create --from-failures": ["dataset", "create", "again", "--version", "1",
                                       "--from-failures", "@evaluation", "--key", "vendor"],
}
WRITERS = ("approve", "record", "train", "dataset", "eval", "release", "erase", "revoke",
           "rollout")
"""Commands that record: run only under faults (a second run is refused as already done)."""


class Copies:
    """A ledger (``home``), its user state and a working directory (``files``), each a work
    copy (``copies``) put back before each fault; the faults are their reads (also
    test_read_faults_import.py's)."""

    home: Path
    state: Path
    files: Path
    copies: list[Restorer]

    def size(self) -> int:
        return Ledger.open(self.home).log.size

    def faults(self, **kw: object) -> Faults:
        return Faults((str(self.home), str(self.state), str(self.files)), sqlite=True,
                      reads=True, **kw)  # type: ignore[arg-type]

    def keep(self, pristine: Path) -> None:
        """Copy ``home``, ``state`` and ``files`` (distinct names) to ``pristine``: each run
        puts them back from there."""
        for d in (self.home, self.state, self.files):
            shutil.copytree(d, pristine / d.name, symlinks=True)
        self.copies = [Restorer(pristine / d.name, d) for d in (self.home, self.state,
                                                                self.files)]

    def restore(self) -> None:
        # (no connection of a command's ledger keeps a database put back)
        testkit.release_files(self.home, self.state, self.files)
        for c in self.copies:
            c.restore()


class Work(Copies):
    """The ledger, its user state and a working directory, put back before each fault."""

    def __init__(self, root: Path) -> None:
        live = root / "live"
        self.home, self.state, self.files = live / "home", live / "state", live / "files"
        self.runner = testkit.new_runner()
        self.evaluation = ""  # (`eval`'s, below)
        ledger = cartpole_ledger(self.home, 4)
        self.approval = LogEntry.from_bytes(ledger.log.entry(ledger.log.size - 1)).envelope
        played = run_policy(None, "CartPole-v1", 2, 50, policy_version="random")
        b2 = ledger.record_batch(played.steps, episodes=played.episodes, env="cartpole@1",
                                 policy="random", key="vendor", name="b2")
        ck = ledger.train("train@1", key="trainer", name="bc", version="1", seed=1)
        self.ck = ck.digest
        reg = run_policy(None, "CartPole-v1", 2, 1000, policy_version="random")
        rb = ledger.record_batch(reg.steps, episodes=reg.episodes, env="cartpole@1",
                                 policy="random", key="vendor", name="regression-batch")
        regression = ledger.create_dataset("regression", "1", "regression", [rb.digest],
                                           key="vendor")
        self.b2 = b2.recorded.digest
        self.envelopes = {"b2": b2.recorded.envelope_digest,
                          "bc@1": LogEntry.from_bytes(ledger.log.entry(ck.index)).envelope,
                          "regression@1": regression.recorded.envelope_digest}
        self.held_steps = batch_files(ledger.store, rb.digest)["steps.parquet"]
        self.files.mkdir()
        (self.files / "steps.jsonl").write_text("".join(
            f'{{"episode_id": "f", "step": {t}, "obs": [{t}.0], "action": [0.0], '
            f'"reward": 1.0, "terminated": {str(t == 3).lower()}, "truncated": false}}\n'
            for t in range(4)))
        failing = [*COMMANDS["eval"][:-1], "1000"]  # (no episode of CartPole returns that)
        r = self.run(failing)  # failed episodes for `dataset create --from-failures`
        assert r.exit_code == 0, r.output
        self.evaluation = r.stdout.split()[-1]
        r = self.run(COMMANDS["eval"])  # an evaluation for `release`, the newest (eval records
        assert r.exit_code == 0, r.output  # another)
        for argv in COMMANDS.values():  # each passes without a fault (and the state caught up)
            if argv[0] not in WRITERS:
                r = self.run(argv)
                assert r.exit_code == 0, r.output
        pristine = root / "pristine"
        shutil.copytree(live, pristine, symlinks=True)
        self.copies = [Restorer(pristine / d, live / d) for d in ("home", "state", "files")]

    def run(self, argv: list[str]) -> Result:
        values = {"@steps": str(self.files / "steps.jsonl"), "@ck": self.ck,
                  "@bundle": str(self.files / "bc-1.tar.zst"),
                  "@updates": str(self.files / "updates.tar.zst"),
                  "@evaluation": self.evaluation,
                  "@approval": self.approval}
        return self.runner.invoke(main, ["--ledger", str(self.home),
                                         *[values.get(a, a) for a in argv]],
                                  prog_name="trajledger")



def plan(points: int, mode: str = MODE, seed: int = SEED) -> list[int]:
    """The read points failed (module docstring)."""
    if mode == "all":
        return list(range(points))
    step = max(1, -(-points // SPREAD))
    return sorted({(k - seed) % points for k in range(points - 1, -1, -step)[:SPREAD]})


ABSORBED = {
    r"/\.state/treeState$": "the reader's key of the log's state: an unreadable one makes it "
                           "read the whole state again (`Log._state_now`), verified",
    r"/tmp/\.tmp-[^/]*$": "the scratch directory, removed (`shutil.rmtree` opens it) after the "
                         "record: the next writer sweeps it (`fs.temp_dir`)",
}
"""Reads whose failure the command absorbs (a pattern of the path), with why: exit 0 is
right there."""

LEFT: dict[str, tuple[str, ...]] = {}
"""Reads a command passes over though it should not (exit 0 accepted only there), by command:
none now (left30: ``dataset create --from-failures``' index read is `ABSORBED_BY`'s)."""

ABSORBED_BY = {
    "_index_entries": "the user state's index, bringing itself up to the log "
                      "(`trust_state._index_entries`): it lists an envelope it cannot read as "
                      "unreadable, as a missing one (every decision that meets one fails "
                      "closed), and reads it again at the end of the same reading and at every "
                      "later one (`_retry_unreadable`; left30)",
    "_retry_unreadable": "the same, read again: it stays unreadable until a reading reads it",
    "label": "a record's name in a line (`status.label`): one it cannot read is named by its "
             "digest, nothing decided on it (cosmetic; left30)",
    "_recorded_name": "the qualified name of an imported record after a clash in the OK line "
                      "of what `eval` and `release` recorded (`eval_cli._recorded_name`): the "
                      "plain name when the state cannot be read, nothing decided on it "
                      "(cosmetic; out50)",
    "shown_ref": "the same in the lines of `approve`, `revoke` and `erase` "
                 "(`catalog.shown_ref`)",
}
"""Reads whose failure the command absorbs, by the function of trajledger that read (a
`Faults.reader`), where the path cannot tell (an envelope of the store): exit 0 is right."""

RECOMPUTED = re.compile(r"^WARNING: .* (computed from its steps\.parquet (instead|again)|"
                        r"grouped again from the held batches' windows)", re.M)
"""A failure absorbed by saying so: kept features or runs of steps (derived from a batch's
step file, kept to save time) that cannot be read are computed again from the verified step
file (`batch_features`, `window_cache`), and the held side's grouped windows and their filter
grouped again from the held batches' (`held_windows`, `held_filter`; ci47 finding 7): the same
answer, and a WARNING line (lead26)."""


def problem(r: Result, grew: bool, point: str) -> str | None:
    """What breaks the rule in one run whose read ``point`` failed, or None."""
    text = str(r.stdout) + str(r.stderr)
    fails = [x for x in str(r.stderr).splitlines() if x.startswith("FAIL:")]
    bad = f"exit {r.exit_code}{', the log grew' if grew else ''}: {text.strip()[-500:]}"
    if "Traceback" in text or "BUG:" in text:
        return bad
    if r.exit_code == 0 and (any(re.search(p, point) for p in ABSORBED)
                             or RECOMPUTED.search(str(r.stderr))):
        return None
    if r.exit_code != 3 or len(fails) != 1:
        return bad
    if grew and not (" is recorded" in fails[0] or " are recorded" in fails[0]):
        return f"{bad} (recorded, but the line does not say so)"
    return None


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Work]:
    root = tmp_path_factory.mktemp("read-faults")
    (root / "live").mkdir()
    with testkit.user_state(root / "live" / "state"):
        yield Work(root)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_read_fault_in_a_judging_command_is_an_operational_error(
        name: str, work: Work, capsys: pytest.CaptureFixture[str]) -> None:
    argv = COMMANDS[name]
    with testkit.user_state(work.state):
        work.restore()
        points, problems, over = sweep(work, lambda: work.run(argv), name, LEFT.get(name, ()))
        with capsys.disabled():
            print(f"\n{name}: {points} read points, {len(plan(points))} faults, "
                  f"{len(problems)} problems, {over} passed over (`LEFT`, `ABSORBED_BY`)")
    assert not problems, "\n".join(problems[:20])


def sweep(work: Copies, run: Callable[[], Result], name: str, over: Collection[str] = ()
          ) -> tuple[int, list[str], int]:
    """``run`` (a command that passes) with each read of `plan` failed: how many reads it
    makes, what breaks the rule (`problem`), and how many exits 0 a pattern of ``over`` (of
    the path of the read failed) or `ABSORBED_BY` (its reader) accepted."""
    for _warm in range(2):  # counted as the faulted runs read: after a first run in this
        work.restore()      # process (what it keeps for the next command: ci47's caches)
        counting = work.faults()
        with counting.active():
            r = run()
        assert r.exit_code == 0, r.output
    problems, passed = [], 0
    for k in plan(len(counting.calls)):
        work.restore()
        size = work.size()
        with (faulted := work.faults(fail_at=k, code=errno.EIO)).active():
            r = run()
        # The read that failed is this run's k-th (a command's first run in a process may
        # read one file more or less than the next: rollout's did, fault27).
        if k >= len(faulted.calls):
            continue  # no k-th read this time: nothing failed, nothing to judge
        failed = faulted.calls[k]
        bad = problem(r, work.size() != size, failed[1])
        if bad and r.exit_code == 0 and (any(re.search(p, failed[1]) for p in over)
                                         or not ABSORBED_BY.keys().isdisjoint(faulted.reader)):
            bad, passed = None, passed + 1
        if bad:
            problems.append(f"{name}: EIO at {k} ({failed[0]} {failed[1]}): {bad}")
    return len(counting.calls), problems, passed


def sweep_and_report(work: Copies, run: Callable[[], Result], name: str,
                     over: Collection[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`sweep`, its counts printed, no problem allowed (a second ledger's sweep:
    test_read_faults_import.py, test_read_faults_monitor.py)."""
    points, problems, passed = sweep(work, run, name, over)
    with capsys.disabled():
        print(f"\n{name}: {points} read points, {len(plan(points))} faults, {len(problems)} "
              f"problems, {passed} passed over (`LEFT` or absorbed)")
    assert not problems, "\n".join(problems[:40])


def test_the_sample_spreads_over_the_reads() -> None:
    assert plan(10, mode="") == [0, 3, 6, 9]
    assert plan(3, mode="") == [0, 1, 2]
    assert plan(10, mode="all") == list(range(10))
    assert all(0 <= k < 10 for seed in range(12) for k in plan(10, mode="", seed=seed))


def at_read(work: Work, name: str, where: str | None = None, last: bool = False) -> Result:
    """``name`` run with its first read of a path containing ``where`` failed (EIO), or its
    last read."""
    work.restore()
    fail_at = None
    if last:
        counting = work.faults()
        with counting.active():
            assert work.run(COMMANDS[name]).exit_code == 0
        fail_at = len(counting.calls) - 1
        work.restore()
    with work.faults(where=where, fail_at=fail_at, code=errno.EIO).active():
        return work.run(COMMANDS[name])


def test_a_state_database_that_cannot_be_read_is_an_operational_error(work: Work) -> None:
    """A SELECT of the user's state the disk fails (SQLite's ``disk I/O error``) was a bug
    (exit 4, ``BUG: OperationalError``)."""
    with testkit.user_state(work.state):
        r = at_read(work, "admit", where="state.sqlite SELECT")
    assert r.exit_code == 3, r.output
    assert r.stderr.startswith("FAIL: database: disk I/O error (a read or write of the user's "
                               "state or an index failed"), r.stderr
    assert problem(r, False, "") is None


def test_a_policy_envelope_that_cannot_be_read_is_not_missing(work: Work) -> None:
    """The trust-policy record's envelope the disk cannot give back was "missing, so the policy
    in force cannot be known; restore it with 'trajledger fsck --repair'" (exit 1)."""
    from trajledger.verify.log_entry import LogEntry

    with testkit.user_state(work.state):
        with Ledger.open(work.home) as ledger:  # closed before `at_read` puts the files back
            envelope = LogEntry.from_bytes(ledger.log.entry(0)).envelope
        r = at_read(work, "lineage", where=envelope.split(":")[1])
    assert r.exit_code == 3, r.output
    assert problem(r, False, "") is None, r.output
    assert "Input/output error" in r.stderr and "missing" not in r.stderr, r.stderr


def test_an_entry_that_cannot_be_read_back_says_it_was_recorded(work: Work) -> None:
    """The approval was appended, then reading its entry back failed: the command said only
    ``FAIL: log: cannot read …`` (exit 3), as if nothing had been recorded."""
    with testkit.user_state(work.state):
        work.restore()
        size = work.size()
        r = at_read(work, "approve", where=f"tile/entries/000.p/{size + 1}")
        assert work.size() == size + 1
    assert r.exit_code == 3, r.output
    assert r.stderr.startswith("FAIL: approval of sha256:") and (
        f"is recorded at log index {size}, but its entry could not be read back" in r.stderr
    ), r.stderr


def test_a_scratch_directory_that_cannot_be_removed_does_not_fail_a_recorded_batch(
        work: Work) -> None:
    """The batch was recorded; removing its scratch directory then failed (the last read:
    ``shutil.rmtree`` opens it): exit 3 ``FAIL: …/tmp/.tmp-…: Input/output error``."""
    with testkit.user_state(work.state):
        work.restore()
        size = work.size()
        r = at_read(work, "record --policy CK", last=True)
        assert work.size() == size + 1
    assert r.exit_code == 0, r.output


def _blob(digest: str) -> str:
    """The store path's tail of blob ``digest``: where `Faults` finds its reads."""
    return digest.split(":")[1]


@pytest.mark.parametrize("name", ["admit", "train"])
def test_a_held_out_batch_that_cannot_be_read_is_no_refusal(work: Work, name: str) -> None:
    """The gate meeting EIO on a regression batch's step file refused the dataset, exit 1
    ("cannot be checked"), and ``train`` signed a refusal of it into the log: a disk's fault
    recorded for good as the data's (review lead26). Now the check did not run: exit 3, the
    object and the error named, nothing recorded."""
    with testkit.user_state(work.state):
        size = (work.restore(), work.size())[1]
        r = at_read(work, name, where=_blob(work.held_steps))
        assert (r.exit_code, work.size()) == (3, size), r.output
    assert re.fullmatch(rf"FAIL: object {work.held_steps}: cannot read: \[Errno 5\] Input/output "
                        r"error: '\S+'\n", r.stderr), r.stderr


@pytest.mark.parametrize(("name", "record"), [
    ("dataset create", "regression@1"),  # was: a holdout's record passed over, recorded
    ("train", "bc@1"),  # was: "already recorded ... with other signed metadata", exit 1
])
def test_a_record_that_cannot_be_read_is_not_taken_as_absent_or_different(
        work: Work, name: str, record: str) -> None:
    """An envelope the disk cannot give back was read as "not a statement": ``dataset create``
    took a batch as not sealed, or passed over a regression dataset whose duplicates it would
    refuse, and recorded the dataset (exit 0); ``train`` of the same files as ``bc@1`` said its
    record had other signed metadata (exit 1). Now each is exit 3, nothing recorded (review
    lead26, `errors.read_failure`)."""
    envelope = work.envelopes[record]
    with testkit.user_state(work.state):
        size = (work.restore(), work.size())[1]
        r = at_read(work, name, where=_blob(envelope))
        assert (r.exit_code, work.size()) == (3, size), r.output
    assert r.stderr.startswith(f"FAIL: object {envelope}: cannot read: [Errno 5]"), r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr


def test_a_train_batch_whose_record_is_missing_is_not_taken_as_not_sealed(work: Work) -> None:
    """A train set's batch whose envelope is not in the store was taken as not sealed (its
    statement "not one"), and the dataset recorded: a sealed batch (held-out data, stored
    encrypted for evaluators) could be put in a train set by removing its envelope (named by
    its digest: a name is confirmed from the statement). Now ``dataset create`` refuses, exit
    3, saying what to run (review lead26)."""
    envelope = work.envelopes["b2"].split(":")[1]
    with testkit.user_state(work.state):
        size = (work.restore(), work.size())[1]
        blob = work.home / "objects" / "sha256" / envelope[:2] / envelope[2:4] / envelope
        blob.unlink()
        r = work.run([work.b2 if a == "b2" else a for a in COMMANDS["dataset create"]])
        assert (r.exit_code, work.size()) == (3, size), r.output
    assert r.stderr == (
        f"FAIL: dataset d2@1 (train): batch {work.b2[:19]}…: its record's envelope "
        "is missing or damaged, so whether it is sealed is unknown; run 'trajledger fsck' and "
        "repair the store\n")


def test_an_unreadable_manifest_does_not_let_erase_delete_a_shared_blob(work: Work) -> None:
    """``erase`` keeps a blob another artifact here also lists (`status.kept_blobs`); it took an
    artifact whose manifest the disk could not read for one that lists nothing
    (`status.files_here`), so erasing ``x1`` deleted the step file ``x2`` (the same rollouts,
    recorded twice, under two policies) still holds: exit 0, ``x2``'s data gone for good. Now
    the check did not run: exit 3, nothing recorded, nothing deleted (review fault27)."""
    with testkit.user_state(work.state):
        work.restore()
        digests = []
        for name in ("x1", "x2"):
            r = work.run(["record", "@steps", "--env", "cartpole@1", "--policy", f"p-{name}",
                          "--name", name, "--key", "vendor"])
            assert r.exit_code == 0, r.output
            digests.append(r.stdout.split()[-1])
        ledger = Ledger.open(work.home)
        shared = batch_files(ledger.store, digests[1])["steps.parquet"]
        assert shared == batch_files(ledger.store, digests[0])["steps.parquet"]
        size = ledger.log.size
        with work.faults(where=_blob(digests[1]), code=errno.EIO).active():
            r = work.run(["erase", "x1", "--key", "vendor", "--reason", "consent"])
        assert (r.exit_code, work.size()) == (3, size), r.output
        assert Ledger.open(work.home).store.exists(shared)
    assert r.stderr.startswith(f"FAIL: object {digests[1]}: cannot read: [Errno 5]"), r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr


def test_a_suite_of_failures_stopped_after_its_batches_says_they_are_recorded(
        work: Work, monkeypatch: pytest.MonkeyPatch) -> None:
    """``dataset create --from-failures`` records a batch of each suite batch's failed
    episodes, then the dataset; the user state's read failing in between (the sweep's
    ``state.sqlite SELECT``) said ``FAIL: trust state …: cannot write: disk I/O error; nothing
    was changed in it``, exit 3, the new batch in the log: read as if nothing had been
    recorded. Now the line says what is recorded, and running it again records the dataset
    (review fault28)."""
    import sqlite3

    from trajledger.ledger import artifacts

    def failing(*a: object, **kw: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    argv = COMMANDS["dataset create --from-failures"]
    with testkit.user_state(work.state):
        size = (work.restore(), work.size())[1]
        with monkeypatch.context() as m:
            m.setattr(artifacts, "create_dataset", failing)
            r = work.run(argv)
        assert (r.exit_code, work.size()) == (3, size + 1), r.output
        assert r.stderr == (
            f"FAIL: dataset again@1: its 1 new batch(es) of failures are recorded (log indices "
            f"{size}), but then it stopped: disk I/O error; run it again: it records what is "
            "not done\n"), r.stderr
        again = work.run(argv)
        assert (again.exit_code, work.size()) == (0, size + 2), again.output


def test_a_suite_of_failures_says_what_its_dataset_noticed(work: Work) -> None:
    """``dataset create --from-failures`` dropped what recording its dataset noticed
    (`DatasetResult`'s warnings, duplicates, near duplicates): kept runs of steps it could not
    read were computed again from the step file without a word, where ``dataset create`` says
    so (the sweep: exit 0, no WARNING), and near duplicates across splits were not reported at
    all. Now each is a WARNING line, as ``dataset create``'s (review fault28)."""
    with testkit.user_state(work.state):
        size = (work.restore(), work.size())[1]
        with work.faults(where="index/features/", code=errno.EIO).active():
            r = work.run(COMMANDS["dataset create --from-failures"])
        assert (r.exit_code, work.size()) == (0, size + 2), r.output
    assert RECOMPUTED.search(r.stderr), r.stderr
    assert problem(r, True, "") is None
