"""Races between two commands of one user, each played in two real processes with a
deterministic interleaving (rev13): the first process stops at a barrier placed in front of a
method of the library (a file ``ready`` appears; it goes on when the test makes ``go``), the
second command runs whole meanwhile (or until it waits for the first one's lock), then the
first finishes. No sleep decides an outcome. The findings: docs/SECURITY.md, "Review of
2026-12-03, eighth round (rev13)".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tamperkit as tk
import testkit
from testkit import new_runner

from trajledger.runner.cli import main
from trajledger.verify.log_entry import LogEntry

WORKER = r"""
import fcntl, importlib, sys, time
from pathlib import Path
from trajledger.runner.cli import main

gate, target, args = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
flock = fcntl.flock

def told(fd, op):
    # A lock this process would wait for says so (the file ``blocked``), then waits.
    if op == fcntl.LOCK_EX:
        try:
            return flock(fd, op | fcntl.LOCK_NB)
        except BlockingIOError:
            (gate / "blocked").touch()
    return flock(fd, op)

fcntl.flock = told
if target != "-":
    where, name = target.rsplit(".", 1)
    try:  # a module's function
        owner = importlib.import_module(where)
    except ModuleNotFoundError:  # a class's method
        module, cls = where.rsplit(".", 1)
        owner = getattr(importlib.import_module(module), cls)
    original = getattr(owner, name)

    def paused(*a, **kw):
        (gate / "ready").touch()
        deadline = time.monotonic() + 120
        while not (gate / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        return original(*a, **kw)

    setattr(owner, name, paused)
main(args, prog_name="trajledger")
"""


class Paused:
    """A CLI command in another process, stopped at its first call of ``target``
    (``module.function`` or ``module.Class.method``) until `resume`; ``target`` "-": not
    stopped (`wait_blocked_or_done` then follows it)."""

    def __init__(self, gate: Path, target: str, *args: str | Path) -> None:
        gate.mkdir()
        self.gate = gate
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(gate), target, *map(str, args)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
        )  # fmt: skip
        if target != "-":
            self._until(lambda: (gate / "ready").exists(), f"never reached {target}")

    def _until(self, cond: Callable[[], bool], why: str) -> None:
        deadline = time.monotonic() + 120
        while not cond():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                _out, err = self.proc.communicate()
                raise AssertionError(f"{why}: {self.proc.returncode}\n{err}")
            time.sleep(0.005)

    def wait_blocked_or_done(self) -> bool:
        """Wait until the command waits for a lock another process holds (True) or exits."""
        deadline = time.monotonic() + 120
        while self.proc.poll() is None and time.monotonic() < deadline:
            if (self.gate / "blocked").exists():
                return True
            time.sleep(0.005)
        return False

    def resume(self) -> tuple[int, str, str]:
        (self.gate / "go").touch()
        out, err = self.proc.communicate(timeout=120)
        return self.proc.returncode, out, err


def cli(home: Path, *args: str | Path) -> tuple[int, str, str]:
    r = new_runner().invoke(main, ["--ledger", str(home), *map(str, args)])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, r.stdout, r.stderr


def rollouts(path: Path, n: int) -> Path:
    pq.write_table(pa.table({
        "episode_id": [f"ep-{n}"] * 2, "step": [0, 1],
        "obs": [[0.0] * 4, [0.0, float(n), 0.0, 0.0]],  # fits cart@1 (CartPole's Box)
        "action": [[0.0], [1.0]], "reward": [1.0, float(n)],
        "terminated": [False, True], "truncated": [False, False],
    }), path)  # fmt: skip
    return path


def log_size(home: Path) -> int:
    code, out, err = cli(home, "log", "info")
    assert code == 0, err
    return int(next(line.split()[1] for line in out.splitlines() if line.startswith("size")))


# -- the log key rotated while another command holds the old one ----------------------------------


def _signed_by_the_new_key_only(home: Path, vkey: str) -> None:
    """The published checkpoint is signed by ``vkey`` alone (not a handover, not the old key)."""
    from trajledger.verify.checkpoint import verify_checkpoint
    from trajledger.verify.note import Note, verifier_from_vkey

    note = (home / "log" / "checkpoint").read_bytes()
    assert (home / "log" / "vkey").read_text().strip() == vkey
    assert len(Note.from_bytes(note).signatures) == 1
    verify_checkpoint(note, verifier_from_vkey(vkey))


@pytest.mark.slow
def test_a_record_that_loaded_the_log_key_before_a_rotation_signs_with_the_new_key(
    alice_home: Path, tmp_path: Path
) -> None:
    """``record`` loads the log's key when it starts; ``log rotate-key`` hands the log over
    before it appends. Signing with the old key would publish a checkpoint the log's key
    (now the new one) never signed: every command would then refuse the log as tampered.
    rev13 refused the record (exit 3, nothing appended); now (fix13) the writer follows the
    handover the old key signed, loads the new key the way it loaded the old one (its
    passphrase from the same variable) and signs with it: recorded, the log whole."""
    from trajledger.ledger.trust_state import TrustState

    home = alice_home
    data = rollouts(tmp_path / "b.parquet", 1)
    record = ("--ledger", home, "record", data, "--env", "cart@1", "--policy", "p0",
              "--key", "alice", "--name", "b1")
    size = log_size(home)
    worker = Paused(tmp_path / "gate", "trajledger.ledger.log.Log.append", *record)
    code, out, err = cli(home, "log", "rotate-key")
    assert code == 0, err
    new = out.strip()
    code, out, err = worker.resume()
    assert code == 0, (code, out, err)
    assert "Traceback" not in err
    assert log_size(home) == size + 1
    _signed_by_the_new_key_only(home, new)
    assert TrustState.open(new).floor_checkpoint().size == size + 1  # type: ignore[union-attr]
    code, out, err = cli(home, "log", "verify")
    assert code == 0, out + err


@pytest.mark.slow
def test_a_writer_whose_log_key_passphrase_was_asked_for_does_not_follow_a_rotation(
    alice_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log key's passphrase was asked for (a prompt: no variable, no file) when the
    writer loaded the key; the rotation's new key is encrypted with the passphrase of its
    variable. The writer cannot be asked again mid-run: refused as in rev13, nothing
    appended, no second prompt; run again, it records (fix13 follows a rotation only with a
    passphrase it can have without asking)."""
    from testkit import TEST_PASSPHRASE

    from trajledger import Ledger
    from trajledger.ledger.errors import LogError

    home = alice_home
    asked: list[str] = []

    def prompt(who: str) -> bytes:
        asked.append(who)
        return TEST_PASSPHRASE.encode()

    monkeypatch.delenv("TRAJLEDGER_PASSPHRASE")
    writer = Ledger.open(home, passphrase=prompt)
    writer.log.require_signer()  # (as a record does when it starts)
    assert asked == ["log"]
    with monkeypatch.context() as rotating:
        rotating.setenv("TRAJLEDGER_PASSPHRASE", TEST_PASSPHRASE)
        code, _out, err = cli(home, "log", "rotate-key")
        assert code == 0, err
        size = log_size(home)
    before = (home / "log" / "checkpoint").read_bytes()
    table = pq.read_table(rollouts(tmp_path / "b.parquet", 1))
    with pytest.raises(LogError) as refused:
        writer.record_batch(table, env="cart@1", policy="p0", key="alice", name="b1")
    assert str(refused.value) == (
        "log test/e2e: its key was rotated by another command while this one ran (the log's "
        "vkey file now names another key); nothing was appended: run the command again")
    assert asked == ["log", "alice"]  # (alice's key when the record started; the log's once)
    assert (home / "log" / "checkpoint").read_bytes() == before
    again = Ledger.open(home, passphrase=prompt)
    again.record_batch(table, env="cart@1", policy="p0", key="alice", name="b1")
    assert log_size(home) == size + 1


TRAIN_ROTATING = (
    "import os, pathlib, subprocess, sys\n"
    "done = subprocess.run([sys.executable, '-m', 'trajledger', '--ledger', sys.argv[1], 'log',"
    " 'rotate-key'], capture_output=True, text=True)\n"
    "pathlib.Path(sys.argv[2]).write_text(f'{done.returncode}\\n{done.stdout}{done.stderr}')\n"
    "pathlib.Path(os.environ['TRAJLEDGER_OUTPUT_DIR'], 'w.bin').write_bytes(b'w')\n"
)


@pytest.mark.slow
def test_a_train_racing_a_key_rotation_records_its_checkpoint_under_the_new_key(
    chat_home: Path, tmp_path: Path
) -> None:
    """``train`` loads the log's key when it starts; while COMMAND runs, ``log rotate-key``
    (run by COMMAND, another process) hands the log over. rev13 refused the checkpoint's
    record (exit 3: 'its key was rotated by another command while this one ran'; the run's
    files stored, unrecorded); now (fix13) the checkpoint is recorded, signed by the new key,
    it verifies, and the user's floor continues under the new key."""
    from trajledger.ledger.trust_state import TrustState

    home = chat_home
    size = log_size(home)
    said = tmp_path / "rotation.txt"
    code, out, err = cli(home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
                         "sft", "--version", "1", "--", sys.executable, "-c", TRAIN_ROTATING,
                         home, said)
    rotated, new = said.read_text().splitlines()[:2]
    assert rotated == "0", said.read_text()
    assert code == 0, (out, err)
    assert "Traceback" not in err
    assert err.splitlines()[-1].startswith("OK: checkpoint sft@1 recorded"), err
    assert log_size(home) == size + 1
    _signed_by_the_new_key_only(home, new)
    floor = TrustState.open(new).floor_checkpoint()
    assert floor is not None and floor.size == size + 1
    code, out, err = cli(home, "verify", "sft@1")
    assert code == 0, out + err
    code, out, err = cli(home, "log", "verify")
    assert code == 0, out + err


# -- a successor policy recorded while COMMAND trains ----------------------------------------------

SUCCESSOR = """\
name = "chat"
serial = 2
max_approval_age = "90d"

[roles.producer]
keys = ["keys/vendor.pub"]

[roles.approver]
keys = ["keys/approver.pub", "keys/approver2.pub"]
threshold = 2

[roles.trainer]
keys = ["keys/trainer.pub"]

[roles.log]
vkeys = ["{vkey}"]
"""


@pytest.mark.slow
def test_a_policy_raising_the_threshold_during_the_run_refuses_the_checkpoint(
    chat_home: Path,
) -> None:
    """The gate admitted chat@1 under serial 1 (one approval). COMMAND, as the approvers would
    meanwhile, records serial 2 (two approvals). The checkpoint, logged after serial 2, is
    judged by serial 2 (`verify` says 1 of 2): it must be refused, not recorded with
    'OK'. Before the fix the re-check judged under the policy loaded at the start."""
    from trajledger import Ledger

    home = chat_home
    ledger = Ledger.open(home)
    ledger.keys.create("approver2", encrypt=False)
    successor = home / "policy-2.toml"
    successor.write_text(SUCCESSOR.format(vkey=ledger.log.vkey))
    code = (
        "import os, pathlib\n"
        "from trajledger import Ledger\n"
        f"Ledger.open({str(home)!r}).set_policy({str(successor)!r}, keys=['approver'])\n"
        "pathlib.Path(os.environ['TRAJLEDGER_OUTPUT_DIR'], 'w.bin').write_bytes(b'w')\n"
    )
    size = log_size(home)
    rc, out, err = cli(home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
                       "sft", "--version", "1", "--", sys.executable, "-c", code)
    assert rc == 1, (out, err)
    lines = err.splitlines()
    assert lines[0] == ("FAIL: dataset chat@1: refused when the checkpoint was to be recorded "
                        "(the rules changed during the run), 1 problem(s); nothing was "
                        "recorded"), err
    assert lines[1].endswith("approvals: 1 of 2 required approver(s) for 'train'"), err
    assert "Traceback" not in err
    shown = cli(home, "log", "show")[1].splitlines()
    kinds = [line.split("\t")[1] for line in shown if "\t" in line]
    assert kinds[size:] == ["trust-policy", "refusal"], kinds



# -- two imports of one vendor's log at once ------------------------------------------------------


def _view(quickstart: testkit.Template[str], root: Path, note: str) -> tuple[Path, Path]:
    """A copy of the quickstart's ledger (same log key) with one more approval appended, by a
    vendor user of its own, and a bundle of its final checkpoint: two calls give two views of
    one log at one size (a fork). Returns (the vendor's home, the bundle)."""
    (root / "vendor-state").mkdir(parents=True)
    with testkit.user_state(root / "vendor-state"):
        home = testkit.copy_template(quickstart, root / "vendor")
        code, _out, err = cli(home, "approve", "cartpole-train@2", "--key", "approver-a",
                              "--note", note)
        assert code == 0, err
        bundle = root / "view.tar.zst"
        code, _out, err = cli(home, "export", quickstart.value, "--out", bundle)
        assert code == 0, err
    return home, bundle


def _buyer(home: Path, vendor: Path) -> Path:
    """A buyer ledger trusting the vendor's keys and log, its approvers b1 and b2 (2 of 4);
    returns its policy file."""
    from trajledger import Ledger

    assert cli(home, "init", "--origin", "buyer/log")[0] == 0
    for k in ("b1", "b2"):
        assert cli(home, "key", "new", k, "--no-encrypt")[0] == 0
    trust = home / "trust"
    trust.mkdir()
    for p in [*(vendor / "keys").glob("*.pub"), *(home / "keys").glob("b*.pub")]:
        shutil.copy(p, trust / p.name)
    vkeys = f'"{(vendor / "log" / "vkey").read_text().strip()}", "{Ledger.open(home).log.vkey}"'
    policy = home / "policy.toml"
    policy.write_text(testkit.BUYER_POLICY.format(vkeys=vkeys))
    return policy


@pytest.mark.slow
def test_two_imports_of_a_forked_log_at_once_take_in_one_view(
    quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """A vendor shows two views of its log (same key, same size, other roots) in two bundles.
    One after the other, the second import is refused as a fork, nothing of it logged. At
    once: import A stops where it takes its view in (`updates.apply_update`), having checked
    it against what was accepted before (nothing yet); import B runs meanwhile, until it
    waits for A's lock or ends; then A goes on. Exactly one view must be taken in, and the
    other import refused as a fork with nothing of it logged. Before the fix both passed the
    check, B imported (exit 0) and A, refused at its end, had logged its view already."""
    one, a = _view(quickstart_template, tmp_path / "a", "view one")
    _two, b = _view(quickstart_template, tmp_path / "b", "view two")
    buyer = tmp_path / "buyer"
    policy = _buyer(buyer, one)
    args = ("--policy", policy, "--key", "b1", "--key", "b2")
    size = log_size(buyer)
    first = Paused(tmp_path / "gate-a", "trajledger.ledger.updates.apply_update",
                   "--ledger", buyer, "import", a, *args)
    second = Paused(tmp_path / "gate-b", "-", "--ledger", buyer, "import", b, *args)
    second.wait_blocked_or_done()
    results = [first.resume(), second.resume()]
    assert sorted(code for code, _o, _e in results) == [0, 1], results
    loser = next(err for code, _o, err in results if code == 1)
    assert ": fork: two roots at one size: " in loser, loser
    assert all("Traceback" not in err for _c, _o, err in results)
    shown = cli(buyer, "log", "show")[1].splitlines()
    kinds = [line.split("\t")[1] for line in shown if "\t" in line]
    assert kinds.count("import") == 1, kinds
    # One view: its bundle's entries (trust policies are not logged again) and the import.
    view = [LogEntry.from_bytes(data).kind for name, data in tk.bundle_members(a)
            if name.startswith("entries/")]
    assert len(kinds) == size + len(view) - view.count("trust-policy") + 1, kinds
    assert cli(buyer, "log", "verify")[0] == 0


@pytest.mark.slow
def test_a_monitor_of_a_forked_view_during_an_import_leaves_it_unlogged(
    quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """An import checks the bundle's view against the floor (nothing yet) under the log's
    lock and stops before it chooses what to take in (`updates.select`); meanwhile ``monitor``
    (no lock of this ledger: it may run without one) remembers the other view of the same log
    at the same size. The import must be refused as a fork with nothing of it logged. Before
    the fix (fix11) it logged its view and was told ``fork`` only at its floor's advance,
    after the last append."""
    from trajledger.ledger.serve import LogServer

    one, a = _view(quickstart_template, tmp_path / "a", "view one")
    two, _b = _view(quickstart_template, tmp_path / "b", "view two")
    buyer = tmp_path / "buyer"
    policy = _buyer(buyer, one)
    size = log_size(buyer)
    importing = Paused(tmp_path / "gate", "trajledger.ledger.updates.select",
                       "--ledger", buyer, "import", a, "--policy", policy,
                       "--key", "b1", "--key", "b2")
    server = LogServer(two / "log")
    server.start()
    try:
        vkey = (two / "log" / "vkey").read_text().strip()
        code, _out, err = cli(tmp_path / "no-ledger", "monitor", server.url, "--vkey", vkey)
    finally:
        server.stop()
    assert code == 0, err
    code, _out, err = importing.resume()
    assert code == 1, err
    assert ": fork: two roots at one size: " in err and "Traceback" not in err, err
    assert log_size(buyer) == size
    assert cli(buyer, "log", "verify")[0] == 0


@pytest.mark.slow
def test_a_verification_racing_reindex_decides_as_alone(
    quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """``admit`` stops where its verification starts (`LineageVerifier.__init__`, its trust
    state already extended); ``reindex`` stops where it derives the state again
    (`TrustState.sync`, the rebuild asked for); ``admit`` goes on and must decide as alone
    (exit 0), then ``reindex`` ends. rev13 probed it refused (``not recorded in the log as
    dataset``) while ``reindex`` emptied the rows in one transaction and derived them in the
    next; rev12's fix (forgotten in the transaction that derives them again) closed it: with
    ``rebuild_trust_state`` calling ``rebuild()`` then syncing again, this test fails
    (checked by fix11)."""
    home = testkit.copy_template(quickstart_template, tmp_path / "home")
    alone = cli(home, "admit", "cartpole-train@2")
    assert alone[0] == 0, alone
    admitting = Paused(tmp_path / "gate-a", "trajledger.verify.lineage.LineageVerifier.__init__",
                       "--ledger", home, "admit", "cartpole-train@2")
    reindexing = Paused(tmp_path / "gate-r", "trajledger.ledger.trust_state.TrustState.sync",
                        "--ledger", home, "reindex")
    code, out, err = admitting.resume()
    assert (code, out) == (0, alone[1]), err
    assert "Traceback" not in err
    code, _out, err = reindexing.resume()
    assert code == 0, err
    assert cli(home, "admit", "cartpole-train@2")[:2] == alone[:2]


@pytest.mark.slow
def test_an_export_racing_an_erase_says_the_object_was_removed_meanwhile(
    quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """``export`` stops before it writes the bundle (`exchange.write_bundle`, its lineage
    walked); ``erase`` of a batch in it runs whole meanwhile; ``export`` goes on. It is refused
    as before (exit 3, no bundle), and now says the object was removed meanwhile, not only
    'No such file or directory' (rev13's wording item, fixed by fix11)."""
    home = testkit.copy_template(quickstart_template, tmp_path / "home")
    size = log_size(home)
    out = tmp_path / "holdout.tar.zst"
    exporting = Paused(tmp_path / "gate", "trajledger.ledger.exchange.write_bundle",
                       "--ledger", home, "export", "cartpole-holdout@1", "--out", out)
    code, _out, err = cli(home, "erase", "cartpole-holdout", "--key", "vendor", "--reason",
                          "consent")
    assert code == 0, err
    code, _out, err = exporting.resume()
    assert code == 3, err
    [line] = err.splitlines()
    assert line.startswith(f"FAIL: export: {home}/objects/sha256/"), line
    assert line.endswith(f": stored when the lineage was walked at log size {size}, and gone "
                         f"now: removed meanwhile (the log grew to {size + 1} entries since: "
                         "an 'erase' ran, say); nothing was written: run the export again, "
                         "which judges the log as it is now"), line
    assert not out.exists() and not list(tmp_path.glob(".tmp-*"))


# -- the signer's role taken away while a record is being made ---------------------------------


@pytest.mark.slow
def test_a_record_whose_key_lost_its_role_meanwhile_appends_nothing(
    chat_home: Path, tmp_path: Path
) -> None:
    """``record`` checks that its key holds the producer role when it starts; a successor
    policy replacing that producer is recorded before it appends. Appended, the batch would
    fail verification from its first day (signed by a key without the role at its log
    index). It must be refused, under the log's lock."""
    from trajledger import Ledger

    home = chat_home
    ledger = Ledger.open(home)
    ledger.keys.create("vendor2", encrypt=False)
    successor = home / "policy-2.toml"
    successor.write_text(SUCCESSOR.format(vkey=ledger.log.vkey)
                         .replace('"keys/approver.pub", "keys/approver2.pub"',
                                  '"keys/approver.pub"')
                         .replace("threshold = 2\n", "")
                         .replace("keys/vendor.pub", "keys/vendor2.pub"))
    data = rollouts(tmp_path / "b.parquet", 1)
    size = log_size(home)
    worker = Paused(tmp_path / "gate", "trajledger.ledger.log.Log.append",
                    "--ledger", home, "record", data, "--env", "chat@1", "--policy", "p0",
                    "--key", "vendor", "--name", "late")
    code, _out, err = cli(home, "policy", "set", successor, "--key", "approver", "--yes")
    assert code == 0, err
    code, out, err = worker.resume()
    assert code == 1, (code, out, err)
    assert err.splitlines()[-1].startswith("FAIL: key vendor ("), err
    assert err.splitlines()[-1].endswith(
        "): cannot sign a rollout-batch record: it holds no role in policy 'chat' serial 2, "
        "want producer (fingerprint " + ledger.keys.public("vendor").keyid[:16] + "; the "
        "policy's producer key(s): " + ledger.keys.public("vendor2").keyid[:16] + "); nothing "
        "was signed"), err
    assert "Traceback" not in err
    assert log_size(home) == size + 1  # the successor only


# -- two rotations of the log key at once --------------------------------------------------------


@pytest.mark.slow
def test_two_key_rotations_at_once_keep_the_log_key(alice_home: Path, tmp_path: Path) -> None:
    """Rotation B has checked that no next key exists and stops before writing it; rotation A
    makes its next key, loads it and stops holding the log's lock, before the handover; B
    writes its own next key and waits for the lock; A hands the log over. Before the fix B's
    write replaced A's ``log-key/next.key``, and A installed B's key as ``log.key`` while
    ``log/vkey`` named A's: the log's key was lost, no append could be signed again. Now B's
    next key is not written over A's: one rotation is made, and the log takes appends."""
    home = alice_home
    second = Paused(tmp_path / "gate-b", "trajledger.ledger.keys.write_file_atomic",
                    "--ledger", home, "log", "rotate-key")
    first = Paused(tmp_path / "gate-a", "trajledger.ledger.log.Log._writer_state",
                   "--ledger", home, "log", "rotate-key")
    (second.gate / "go").touch()
    second.wait_blocked_or_done()
    results = [first.resume(), second.resume()]
    assert [code for code, _o, _e in results] == [0, 3], results
    assert all("Traceback" not in err for _c, _o, err in results)
    assert "already exists" in results[1][2], results
    assert cli(home, "log", "verify")[0] == 0
    data = rollouts(tmp_path / "b.parquet", 1)
    code, _out, err = cli(home, "record", data, "--env", "cart@1", "--policy", "p0", "--key",
                          "alice", "--name", "after")
    assert code == 0, err
