"""A policy file changed after it was recorded, under the same name and serial, is said to be
so (twenty-second round, left37 finding 3; out36's Left; docs/SECURITY.md "Review of
2026-12-05, twenty-second round (left37)").

The buyer's ``policy.toml`` edited in place (a key replaced, a setting changed), given to
``verify --policy``, ``admit --policy`` or ``python -m verify``: every decision is made on the
file as given (the verifier's trust root by design), and fails closed where its keys are not
the records' signers; but the only word was the report's ``policy 'quickstart' serial 1: used
as given (not recorded in the log)``, though the log records another policy of that name and
serial. Now a ``WARNING:`` line on the command line, and the report's policy history line, say
so, with the record's index and what to do; the exit codes are unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import testkit
from testkit import new_runner

from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main

SAID = ("WARNING: policy 'quickstart' serial 1: used as given, but the log records another "
        "policy of that name and serial, at log index 0 (sha256:")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, quickstart_template: testkit.Template[str]
        ) -> Path:
    root = tmp_path_factory.mktemp("left37-policy")
    testkit.copy_template(quickstart_template, root / "lab")  # (the session's quickstart)
    text = (root / "lab" / "policy.toml").read_text()
    vendor, trainer = ((root / "lab" / "keys" / f"{k}.pub").read_text().strip()
                       for k in ("vendor", "trainer"))
    (root / "key-replaced.toml").write_text(text.replace(vendor, trainer, 1))
    (root / "setting-changed.toml").write_text(text.replace('max_approval_age = "90d"',
                                                            'max_approval_age = "91d"'))
    (root / "renamed.toml").write_text(text.replace('name = "quickstart"', 'name = "mine"'))
    r = new_runner().invoke(main, ["--ledger", str(root / "lab"), "export", "cartpole-bc@2",
                                   "--out", str(root / "b.tar.zst")])
    assert r.exit_code == 0, r.output
    return root


@pytest.mark.parametrize(("file", "code"), [("key-replaced.toml", 1), ("setting-changed.toml", 0),
                                            ("renamed.toml", 0), ("lab/policy.toml", 0)])
@pytest.mark.parametrize("command", [["verify", "cartpole-bc@2"], ["admit", "cartpole-train@1"]])
def test_a_policy_changed_after_it_was_recorded_is_said_to_be(
        lab: Path, file: str, code: int, command: list[str]) -> None:
    r = new_runner().invoke(main, ["--ledger", str(lab / "lab"), *command, "--policy",
                                   str(lab / file)])
    assert r.exit_code == code, r.stderr
    warned = [line for line in r.stderr.splitlines() if line.startswith("WARNING: policy")]
    if file.endswith("changed.toml") or file.startswith("key-"):
        assert len(warned) == 1 and warned[0].startswith(SAID), r.stderr
        assert warned[0].endswith("): the file was changed after it was recorded, or is another "
                                  "policy of that name; compare it with the recorded one "
                                  "('trajledger policy show'); a changed policy needs a higher "
                                  "serial, recorded with 'trajledger policy set'"), r.stderr
    else:
        assert warned == [], r.stderr


def test_the_bundles_report_says_it_too(lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = verify_main([str(lab / "b.tar.zst"), "--policy", str(lab / "setting-changed.toml")])
    out = capsys.readouterr().out
    assert code == 0
    assert "policy history — " + SAID.removeprefix("WARNING: ") in out, out


@pytest.mark.parametrize("command", [
    ["lineage", "cartpole-bc@2"], ["impact", "cartpole-train@1"],
    ["export", "cartpole-bc@2", "--out", "{root}/again.tar.zst"],
    ["import", "{root}/b.tar.zst", "--key", "approver-a"],
    # rev36: monitor's --policy too (read before the log, which is not served here)
    ["monitor", "http://127.0.0.1:9/", "--vkey", "{vkey}", "--key", "approver-a"],
])
def test_the_commands_that_load_the_policy_elsewhere_say_it_too(
        lab: Path, command: list[str]) -> None:
    """left37's Left (left38 item 4): ``export``, ``import``, ``lineage`` and ``impact`` load
    ``--policy`` outside `runner.commands.command_policy` and said nothing; ``monitor`` did too
    (rev36)."""
    vkey = (lab / "lab" / "log" / "vkey").read_text().strip()
    args = [a.format(root=lab, vkey=vkey) for a in command]
    r = new_runner().invoke(main, ["--ledger", str(lab / "lab"), *args, "--policy",
                                   str(lab / "setting-changed.toml")])
    warned = [line for line in r.stderr.splitlines() if line.startswith("WARNING: policy")]
    assert len(warned) == 1 and warned[0].startswith(SAID), (r.exit_code, r.stderr)
    r = new_runner().invoke(main, ["--ledger", str(lab / "lab"), *args, "--policy",
                                   str(lab / "lab" / "policy.toml")])
    assert not [x for x in r.stderr.splitlines() if x.startswith("WARNING: policy")], r.stderr
