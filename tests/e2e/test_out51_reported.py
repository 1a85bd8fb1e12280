"""What out51 found playing outsiders (a new ML engineer's first hour with an environment of
their own, an auditor with public keys and bundles); docs/SECURITY.md, "Review of 2026-12-07,
thirty-sixth round (out51)".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import testkit
from test_out48_reported import steps, vendor_only
from testkit import Party

from trajledger import Ledger

CORRIDOR = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Corridor(gym.Env):
    def __init__(self):
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, a):
        self.pos = max(0, self.pos + (1 if a == 1 else -1))
        done = self.pos >= 4
        obs = np.array([min(1.0, self.pos / 4 + float(self.np_random.uniform(0, 0.01)))],
                       dtype=np.float32)
        return obs, 1.0 if done else -0.01, done, False, {}


gym.register("Out51Corridor-v0", entry_point="out51_corridor:Corridor", max_episode_steps=20)
'''


def play(ledger: Ledger, gym_id: str, seeds: range) -> str:
    """Record an episode of each seed (always right) with `LedgerRecorder`; the batch."""
    from trajledger.integrations.gymnasium import LedgerRecorder

    rec = LedgerRecorder(gym.make(gym_id), ledger, env_ref="corridor@1", policy="right",
                         signer=ledger.keys.signer("vendor"))
    for seed in seeds:
        rec.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, _ = rec.step(1)
            done = terminated or truncated
    rec.close()
    assert len(rec.batches) == 1
    return rec.batches[0]


def test_an_environment_registered_by_module_and_id_is_recorded_by_the_same_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newcomer's own Gymnasium environment: the command line can make it only as
    ``MODULE:ID`` (``env register corridor --gym-id out51_corridor:Out51Corridor-v0``,
    Gymnasium's way to import the module that registers it; the runner and ``eval`` take the
    form). Wrapping ``gym.make`` of that very id in ``LedgerRecorder`` was refused: ``the
    environment is Out51Corridor-v0, but corridor@1 is registered for
    out51_corridor:Out51Corridor-v0: wrap out51_corridor:Out51Corridor-v0``, which is what
    was wrapped. Expected: recorded; another environment still refused."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "out51_corridor.py").write_text(CORRIDOR)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    vendor = Party(tmp_path, "vendor")
    vendor_only(vendor, tmp_path)
    vendor.run("env", "register", "corridor", "--version", "1", "--gym-id",
               "out51_corridor:Out51Corridor-v0", "--key", "vendor")
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(vendor.state))
    ledger = Ledger.open(vendor.home)
    vendor.run("verify", play(ledger, "out51_corridor:Out51Corridor-v0", range(3)))
    from trajledger.integrations.gymnasium import LedgerRecorder

    with pytest.raises(ValueError, match="the environment is CartPole-v1"):
        LedgerRecorder(gym.make("CartPole-v1"), ledger, env_ref="corridor@1", policy="random",
                       signer=ledger.keys.signer("vendor"))


LANCE_FULL = ("lance error: LanceError(IO): Generic LocalFileSystem error: Unable to copy data to "
              "file: No space left on device (os error 28), /root/.cargo/registry/src/index.crates"
              ".io-1949cf8c6b5b557f/lance-table-13.0.0/src/io/commit.rs:1663:50")
"""What lance raised, word for word, when ``reindex``, ``query`` and ``stats`` met a full
tmpfs (3 MB, the quickstart's ledger on it)."""


@pytest.mark.parametrize("command", [("query", "artifacts"), ("reindex",),
                                     ("stats", "BATCH")])
def test_a_full_disk_under_the_audit_index_is_the_disks_not_a_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]
) -> None:
    """A full disk (a 3 MB tmpfs holding the quickstart's ledger, the index stale): ``reindex``,
    ``query`` and ``stats`` ended in ``BUG: RuntimeError: lance error: … No space left on
    device (os error 28), /root/.cargo/…`` and ``This is a bug in trajledger; please report
    it`` (exit 4): lance, written in Rust, reports the system's error in a ``RuntimeError``'s
    words. Expected: as every other write meeting a full disk, exit 3 and one line saying what
    to do next (lance's own write is below Python, where the fault sweep does not reach, so the
    error is raised where the index writes)."""
    vendor = Party(tmp_path, "vendor")
    vendor_only(vendor, tmp_path)
    batch = vendor.last("record", steps(tmp_path / "s.jsonl", "e"), "--env", "cartpole@1",
                        "--policy", "random", "--key", "vendor")

    class Full:
        """A lance database on a full disk: whatever is asked of it raises lance's error."""

        def __getattr__(self, name: str) -> object:
            raise RuntimeError(LANCE_FULL)

    monkeypatch.setattr("lancedb.connect", lambda *args, **kwargs: Full())
    out = vendor.run(*(batch if a == "BATCH" else a for a in command), code=3).output
    assert "BUG" not in out
    assert out.strip().splitlines()[-1] == (
        "FAIL: No space left on device; free space on the disk written to (the ledger's, or "
        "where --out writes) or write elsewhere, then run the command again")


def test_policy_init_writes_the_evaluator_role_a_newcomer_asks_for(tmp_path: Path) -> None:
    """A newcomer makes keys vendor, approver, trainer and evaluator (docs/evaluations.md: an
    evaluator role signs evaluations), then ``policy init``: the evaluator key was left out
    without a word, ``policy init`` had no way to write the role (no ``--evaluator``; only
    ``producer``, ``approver``, ``trainer`` in ``--roles``), and ``eval`` then refused with
    ``record a policy with [roles.evaluator] naming it (format = 2, a higher serial;
    docs/evaluations.md shows one)``: the TOML written by hand. Expected: ``policy init`` says
    what it left out and how to ask for it; ``--evaluator KEY`` writes the role (format 2),
    which ``policy set`` records; ``eval``'s refusal names that command."""
    lab = Party(tmp_path, "lab")
    lab.run("init", "--origin", "lab.example/log")
    for key in ("vendor", "approver", "trainer", "evaluator"):
        lab.run("key", "new", key, "--no-encrypt")
    first = lab.run("policy", "init", "--out", tmp_path / "p1.toml").stderr
    assert ("no evaluator role, so no evaluation can be recorded ('trajledger eval'): key(s) "
            "evaluator are left out; to sign evaluations with them, write it again with "
            "--evaluator evaluator") in first
    lab.run("policy", "set", tmp_path / "p1.toml", "--key", "approver", "--yes")
    refused = lab.run("eval", "ck@1", "--suite", "suite@1", "--key", "evaluator", code=1).stderr
    assert "'trajledger policy init --evaluator evaluator --out FILE'" in refused
    lab.run("policy", "init", "--evaluator", "evaluator", "--out", tmp_path / "p2.toml")
    assert (tmp_path / "p2.toml").read_text().count("format = 2") == 1
    lab.run("policy", "set", tmp_path / "p2.toml", "--key", "approver", "--yes")

    shown = json.loads(lab.run("policy", "show", "--json").stdout)["policy"]
    evaluator = json.loads(lab.run("key", "export", "evaluator", "--json").stdout)["pem"]
    assert shown["format"] == 2
    assert shown["roles"]["evaluator"]["keys"] == [evaluator]
    refused = lab.run("eval", "ck@1", "--suite", "suite@1", "--key", "evaluator", code=3).stderr
    assert "evaluator role" not in refused  # past the role check: the checkpoint is unknown


def test_a_printed_training_outcome_is_a_few_lines_not_the_data(
    quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """A newcomer's in-process run (docs/trainers.md, section 2) printed what ``run.save``
    returned: the `TrainOutcome`'s repr held the admission's every batch whole, each file's
    bytes (hundreds of kilobytes of Parquet as ``b'PAR1…'``), the tables, the policy and the
    verified report. Expected: the checkpoint, the dataset and each batch by digest and
    sizes."""
    home = testkit.copy_template(quickstart_template, tmp_path / "home")
    ledger = Ledger.open(home)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "w.json").write_text("{}")
    with ledger.training("cartpole-train@2", key="trainer", name="inproc", version="1") as run:
        outcome = run.save(tmp_path / "model", metrics={"loss": 0.1})
    shown = repr(outcome)
    assert "PAR1" not in shown and "BEGIN PUBLIC KEY" not in shown
    assert outcome.digest in shown and "cartpole-train" in shown
    for batch in outcome.admission.batches:
        assert (f"AdmittedBatch(digest={batch.digest!r}, index={batch.index}, "
                f"steps=<{batch.steps.num_rows} rows>") in shown
    assert len(shown) < 400 * (1 + len(outcome.admission.batches)), len(shown)


def test_the_first_policy_steps_in_the_wrong_order_say_what_comes_first(tmp_path: Path) -> None:
    """A newcomer who skips the README's ``policy init``: ``policy set policy.toml --key …``
    said ``FAIL: policy policy.toml: no such file`` and nothing else, and ``train`` (or
    ``eval``, ``release``) before any policy said ``record one with 'trajledger policy set
    FILE --key APPROVER...'``, a FILE nothing had told them how to write. Expected: both name
    ``trajledger policy init``."""
    lab = Party(tmp_path, "lab")
    lab.run("init", "--origin", "lab.example/log")
    lab.run("key", "new", "approver", "--no-encrypt")
    missing = tmp_path / "my policy.toml"
    err = lab.run("policy", "set", missing, "--key", "approver", code=3).stderr
    assert err == (f"FAIL: policy {missing}: no such file; write one with 'trajledger policy "
                   f"init --out '{missing}'' (this ledger's keys, by role), check and edit it, "
                   "then run this again\n")
    err = lab.run("train", "--dataset", "d@1", "--key", "approver", code=3).stderr
    assert "write one ('trajledger policy init') and record it" in err


def test_the_built_in_evaluator_replays_an_environment_registered_by_module_and_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newcomer's environment of their own (``--gym-id MODULE:ID``), a ``bc`` checkpoint
    trained on it and a regression suite of it: ``eval CK --suite suite@1 --key evaluator``
    (built in) ended in ``BUG: NameNotFound: Environment `out51_judged:Out51Judged` doesn't
    exist`` (exit 4): the pass mark was read with ``gymnasium.spec``, which takes no module
    part (``make`` does; ``rollout`` and ``train`` worked). And where the module cannot be
    imported, ``eval`` and ``rollout`` ended in ``BUG: ModuleNotFoundError``. Expected: the
    spec's ``reward_threshold`` read after the module is imported, the evaluation recorded;
    an environment that cannot be made, one line, exit 3."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "out51_judged.py").write_text(CORRIDOR.replace(
        'gym.register("Out51Corridor-v0", entry_point="out51_corridor:Corridor", '
        'max_episode_steps=20)',
        'gym.register("Out51Judged-v0", entry_point="out51_judged:Corridor", '
        'max_episode_steps=20, reward_threshold=0.5)'))
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    lab = Party(tmp_path, "lab")
    lab.run("init", "--origin", "lab.example/log")
    for key in ("vendor", "approver", "trainer", "evaluator"):
        lab.run("key", "new", key, "--no-encrypt")
    lab.run("policy", "init", "--evaluator", "evaluator", "--out", tmp_path / "p.toml")
    lab.run("policy", "set", tmp_path / "p.toml", "--key", "approver", "--yes")
    lab.run("env", "register", "corridor", "--version", "1", "--gym-id",
            "out51_judged:Out51Judged-v0", "--key", "vendor")
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(lab.state))
    ledger = Ledger.open(lab.home)
    train = play(ledger, "out51_judged:Out51Judged-v0", range(10))
    suite = play(ledger, "out51_judged:Out51Judged-v0", range(100, 110))
    lab.run("dataset", "create", "tr", "--version", "1", "--split", "train", "--batch", train,
            "--key", "vendor")
    lab.run("dataset", "create", "suite", "--version", "1", "--split", "regression", "--batch",
            suite, "--key", "vendor")
    lab.run("approve", "tr@1", "--key", "approver")
    ck = lab.last("train", "--dataset", "tr@1", "--key", "trainer")
    evaluated = lab.run("eval", ck, "--suite", "suite@1", "--key", "evaluator").stderr
    assert "10 of 10 episode(s) passed" in evaluated, evaluated
    monkeypatch.delitem(sys.modules, "out51_judged")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path / "mods")])
    for args in (("eval", ck, "--suite", "suite@1", "--key", "evaluator"),
                 ("rollout", "--checkpoint", ck, "--env", "corridor@1", "--episodes", "1",
                  "--key", "vendor")):
        err = lab.run(*args, code=3).stderr
        assert err.startswith("FAIL: environment 'out51_judged:Out51Judged-v0' cannot be made: "
                              "No module named 'out51_judged'"), err
        assert err.endswith("(install the module, or run where Python finds it: "
                            "PYTHONPATH)\n"), err


def test_an_environment_of_ones_own_refused_by_id_is_told_the_module_form(
    tmp_path: Path
) -> None:
    """``env register corridor --version 1 --gym-id Corridor-v0`` of an environment a module
    of the newcomer's own registers (``gym.register`` in ``corridor.py``) said ``cannot be made
    (Environment `Corridor` doesn't exist.); install its package, or register without
    --gym-id``: the way that works, ``--gym-id corridor:Corridor-v0`` (Gymnasium imports the
    module), was not said. Expected: said; a ``MODULE:ID`` whose module is missing is not told
    it again."""
    vendor = Party(tmp_path, "vendor")
    vendor_only(vendor, tmp_path)
    err = vendor.run("env", "register", "corridor", "--version", "1", "--gym-id",
                     "Out51Nowhere-v0", "--key", "vendor", code=3).stderr
    assert ("name the module of yours that registers it (--gym-id MODULE:Out51Nowhere-v0, run "
            "where Python finds MODULE), or register without --gym-id") in err, err
    err = vendor.run("env", "register", "corridor", "--version", "1", "--gym-id",
                     "out51_nowhere:Out51Nowhere-v0", "--key", "vendor", code=3).stderr
    assert "MODULE:" not in err and err.endswith(
        "install its package, or register without --gym-id\n"), err


@pytest.mark.parametrize("made, typed", [("NFC", "NFD"), ("NFD", "NFC")])
def test_a_passphrase_typed_in_another_unicode_form_opens_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: str, typed: str
) -> None:
    """A key encrypted under ``pässwort …`` with ``ä`` as one code point (NFC: typed on one
    machine) did not open with the same passphrase whose ``ä`` is ``a`` and a combining mark
    (NFD: another machine's keyboard, a file or clipboard): ``wrong passphrase or corrupt key
    file``, the same words as for another passphrase. Expected: it opens; another passphrase
    still does not."""
    import unicodedata

    words = "pässwort für den schlüssel"
    lab = Party(tmp_path, "lab")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", unicodedata.normalize(made, words))
    lab.run("init", "--origin", "lab.example/log")
    lab.run("key", "new", "vendor")
    (tmp_path / "f.txt").write_text("x")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", unicodedata.normalize(typed, words))
    assert unicodedata.normalize(typed, words) != unicodedata.normalize(made, words)
    lab.run("sign", tmp_path / "f.txt", "--key", "vendor", "--out", tmp_path / "f.json")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", unicodedata.normalize(typed, words + "!"))
    err = lab.run("sign", tmp_path / "f.txt", "--key", "vendor", "--out", tmp_path / "g.json",
                  code=3).stderr
    assert "wrong passphrase or corrupt key file" in err


def test_rollout_of_a_commands_checkpoint_says_what_plays_it(
    quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """The newcomer's checkpoint of ``train ... -- python train.py``, given to ``rollout``
    (README's tour step 6): ``FAIL: checkpoint has no trainer.json (files: m)``, which
    checkpoint and what to do unsaid (``eval`` says both for the same checkpoint). Expected:
    the checkpoint named, and the ways to record its episodes."""
    home = testkit.copy_template(quickstart_template, tmp_path / "home")
    lab = Party(tmp_path, "lab")
    lab.home = home
    write = ("import os, pathlib; "
             "pathlib.Path(os.environ['TRAJLEDGER_OUTPUT_DIR'], 'm').write_text('1')")
    lab.run("train", "--dataset", "cartpole-train@2", "--key", "trainer", "--name", "mine",
            "--version", "1", "--", sys.executable, "-c", write)
    err = lab.run("rollout", "--checkpoint", "mine@1", "--env", "cartpole@1", "--episodes", "1",
                  "--key", "vendor", code=1).stderr
    assert err == ("FAIL: checkpoint mine@1: 'rollout' plays policies of the built-in trainers "
                   "only (checkpoint has no trainer.json (files: m)); record your own policy's "
                   "episodes with LedgerRecorder, or write them to files and 'trajledger "
                   "record' them (docs/recording.md)\n"), err


def test_json_lines_saved_with_a_byte_order_mark_are_told_so(tmp_path: Path) -> None:
    """The newcomer's JSON lines saved by Notepad ('UTF-8 with BOM') or PowerShell 5's
    ``Out-File -Encoding utf8``: ``record`` said ``not Parquet, Arrow IPC, or JSON lines:
    Unexpected UTF-8 BOM (decode using utf-8-sig): line 1 column 1 (char 0)``, Python's
    words. Expected: the mark named, and how to save the file without it."""
    vendor = Party(tmp_path, "vendor")
    vendor_only(vendor, tmp_path)
    path = steps(tmp_path / "s.jsonl", "e")
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    err = vendor.run("record", path, "--env", "cartpole@1", "--policy", "random", "--key",
                     "vendor", code=1).stderr
    assert err.splitlines()[-1] == (
        "FAIL:   line 1: the file starts with a UTF-8 byte order mark (BOM), which JSON lines "
        "do not have (RFC 8259): save it as UTF-8 without one (Notepad: 'UTF-8', not 'UTF-8 "
        "with BOM'; or: sed -i '1s/^\\xEF\\xBB\\xBF//' FILE), then run this again"), err
