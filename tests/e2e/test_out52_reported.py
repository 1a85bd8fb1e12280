"""What out52 found following out50's and out51's **Left** and reading every ``--help`` as an
outsider; docs/SECURITY.md, "Review of 2026-12-07, thirty-seventh round (out52)".
"""

from __future__ import annotations

import json
from pathlib import Path

from test_evaluations import POLICY
from testkit import Party

from trajledger import Ledger


def evaluating_lab(tmp_path: Path) -> Party:
    """A lab whose policy in force (test_evaluations' POLICY) has an evaluator role with an
    X25519 encryption key (sealed suites) and a ``[release]`` rule."""
    lab = Party(tmp_path, "lab")
    ledger = Ledger.init(lab.home, origin="lab.example/log")
    for k in ("vendor", "approver", "trainer", "evaluator"):
        ledger.keys.create(k, encrypt=False)
    ledger.keys.create_encryption_key("evaluator", encrypt=False)
    (lab.home / "policy.toml").write_text(POLICY.format(vkey=ledger.log.vkey))
    lab.run("policy", "set", lab.home / "policy.toml", "--key", "approver", "--yes")
    return lab


def test_a_successor_written_by_policy_init_keeps_the_evaluator_role_and_the_release_rule(
    tmp_path: Path,
) -> None:
    """out51's Left: ``policy init`` on a ledger whose policy in force has an evaluator role
    wrote a successor without it unless ``--evaluator`` was given (and never its encryption
    keys nor ``[release]``): recorded, no evaluation could be signed any more, no release
    judged. Expected: what the user did not ask to change is kept (and said); a role the user
    leaves out by ``--roles`` is dropped with a line saying how to keep it."""
    lab = evaluating_lab(tmp_path)
    before = json.loads(lab.run("policy", "show", "--json").stdout)["policy"]
    err = lab.run("policy", "init", "--out", tmp_path / "p2.toml").stderr
    assert "keeps from serial 1" in err, err
    lab.run("policy", "set", tmp_path / "p2.toml", "--key", "approver", "--yes")
    after = json.loads(lab.run("policy", "show", "--json").stdout)["policy"]
    assert after["serial"] == 2 and after["format"] == 2
    assert after["roles"]["evaluator"] == before["roles"]["evaluator"]
    assert after["release"] == before["release"]
    assert after["max_approval_age"] == before["max_approval_age"]

    err = lab.run("policy", "init", "--roles", "producer,approver,trainer",
                  "--out", tmp_path / "p3.toml").stderr
    assert ("drops the evaluator role of serial 2 (1 key(s), 1 encryption key(s)): to keep it, "
            "write it again with --evaluator KEY or --roles producer,approver,trainer,evaluator"
            ) in err, err
    assert "[roles.evaluator]" not in (tmp_path / "p3.toml").read_text()
    err = lab.run("policy", "init", "--roles", "producer", "--out", tmp_path / "p4.toml").stderr
    notes = [line for line in err.splitlines() if "approver role" in line]
    assert notes == [  # one line: what it forbids, that it drops it, how to keep it
        f"NOTE: {tmp_path / 'p4.toml'}: no approver role: nothing recorded here can be approved "
        "for training, imported or released, and the policy's successors are signed by its "
        "producers; it drops the approver role of serial 2 (1 key(s)): to keep it, write it "
        "again with --approver KEY or --roles producer,approver"], err


def test_a_state_directory_that_is_a_file_says_what_to_do(tmp_path: Path) -> None:
    """out51's Left: ``TRAJLEDGER_STATE_DIR`` naming a file (or below one) said ``FAIL: trust
    state …/ledgers: cannot create: Not a directory`` and nothing more; a state whose
    ``ledgers`` is a file said ``cannot read or write this ledger's pin: [Errno 17] File
    exists``. Expected: one line naming what is not a directory and what to set, exit 3."""
    from testkit import new_runner

    from trajledger.runner.cli import main

    home = tmp_path / "lab"
    Ledger.init(home, origin="lab.example/log")
    a_file = tmp_path / "state"
    a_file.write_text("")
    for state, what in ((a_file, f" ({a_file} is not a directory)"),
                        (a_file / "sub", f" ({a_file} is not a directory)")):
        r = new_runner().invoke(main, ["--ledger", str(home), "log", "info"],
                                env={"TRAJLEDGER_STATE_DIR": str(state)})
        assert r.exit_code == 3, r.output
        assert r.stderr == (
            f"FAIL: trust state {state}/ledgers: cannot create: Not a directory{what}; nothing "
            f"was changed: set TRAJLEDGER_STATE_DIR (now '{state}') to a directory of yours "
            "that you can write, or unset it to use ~/.local/state/trajledger\n")
    state = tmp_path / "st"
    state.mkdir(mode=0o700)
    (state / "ledgers").write_text("")
    r = new_runner().invoke(main, ["--ledger", str(home), "log", "info"],
                            env={"TRAJLEDGER_STATE_DIR": str(state)})
    assert r.exit_code == 3, r.output
    assert r.stderr.count("\n") == 1 and r.stderr.endswith(
        f"; nothing was changed: set TRAJLEDGER_STATE_DIR (now '{state}') to a directory of "
        "yours that you can write, or unset it to use ~/.local/state/trajledger\n"), r.stderr


NOT_A_BUNDLE = ("not a bundle; a bundle is the .tar.zst file 'trajledger export' writes, "
                "verified as it was sent (not unpacked or compressed again); rollout files are "
                "recorded with 'trajledger record', files signed with 'trajledger sign' by "
                "'trajledger verify FILE... --envelope E --pubkey K'")


def test_verify_of_a_file_that_is_no_bundle_says_what_verify_takes(tmp_path: Path) -> None:
    """out50's Left: ``python -m trajledger.verify steps.jsonl --policy P`` and ``trajledger
    verify steps.tar.zst --policy P`` said ``bundle …: not zstd-compressed (magic 7b226122)``
    alone; ``trajledger verify steps.jsonl`` said only that no artifact has this name.
    Expected: what a bundle is and what takes the file (as out50 finding 8 did for
    ``import``)."""
    import subprocess
    import sys

    lab = Party(tmp_path, "lab")
    ledger = Ledger.init(lab.home, origin="lab.example/log")
    ledger.keys.create("vendor", encrypt=False)
    lab.run("policy", "init", "--roles", "producer", "--out", tmp_path / "p.toml")
    lab.run("policy", "set", tmp_path / "p.toml", "--key", "vendor", "--yes")
    rollouts = tmp_path / "steps.jsonl"
    rollouts.write_text('{"episode_id": 0}\n')
    named = tmp_path / "steps.tar.zst"
    named.write_bytes(rollouts.read_bytes())
    r = subprocess.run([sys.executable, "-m", "trajledger.verify", str(rollouts), "--policy",
                        str(tmp_path / "p.toml")], capture_output=True, text=True, check=False)
    assert r.returncode == 1 and r.stderr == (
        f"FAIL: {rollouts}: bundle steps.jsonl: not zstd-compressed (magic 7b226570): "
        f"{NOT_A_BUNDLE}\n"), r.stderr
    err = lab.run("verify", named, "--policy", tmp_path / "p.toml", code=1).stderr
    assert err == (f"FAIL: bundle steps.tar.zst: not zstd-compressed (magic 7b226570): "
                   f"{NOT_A_BUNDLE}\n")
    err = lab.run("verify", rollouts, code=3).stderr
    assert err.startswith(f"FAIL: bundle {rollouts}: not zstd-compressed (magic 7b226570): "
                          f"{NOT_A_BUNDLE}; as a REF: "), err
    assert err.count("\n") == 1


def test_every_continued_example_in_a_help_shows_its_backslash(tmp_path: Path) -> None:
    """Reading every ``--help`` as an outsider: ``revoke --help`` printed its two examples
    that go on over two lines as one line with a run of spaces in it (``--reason
    "approved the wrong version"``): the docstring's backslash before the line end is Python's
    line continuation, not a character. Expected: every example line a shell reads as going
    on ends with `` \\`` and the next line is indented under it, as the other helps do."""
    import re

    import click
    from testkit import new_runner

    from trajledger.runner.cli import main

    def walk(cmd: click.Command, path: list[str]) -> list[list[str]]:
        found = [path]
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(click.Context(cmd)):
                sub = cmd.get_command(click.Context(cmd), name)
                if sub is not None and not sub.hidden:
                    found += walk(sub, [*path, name])
        return found

    joined = []
    for path in walk(main, []):
        text = new_runner().invoke(main, [*path, "--help"], terminal_width=200).output
        joined += [f"{' '.join(path)}: {line.strip()}" for line in text.splitlines()
                   if line.lstrip().startswith("trajledger ")
                   and re.search(r"\S {4,}(--|\")", line)]  # a joined line's indent
    assert joined == []


def test_approve_and_erase_help_say_what_their_ref_is() -> None:
    """Reading every ``--help`` as an outsider: ``approve`` and ``erase`` take a REF their help
    never named (a dataset? a batch? by which name?), nor said what approvals are for or what
    an erasure leaves. Expected: the REF each takes and what comes of it."""
    from testkit import new_runner

    from trajledger.runner.cli import main

    for command, says in (("approve", "'trajledger admit DATASET' says how many"),
                          ("erase", "still verifies and reports it erased")):
        text = " ".join(new_runner().invoke(main, [command, "--help"]).output.split())
        assert "REF is the " in text and says in text, text
