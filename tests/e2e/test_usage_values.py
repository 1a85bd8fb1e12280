"""A value the user mistyped for an option is a usage error, exit 2, in one line saying what to
type; a verification that fails stays 1 (twenty-second round, left37 finding 1; out36's Left;
docs/SECURITY.md "Review of 2026-12-05, twenty-second round (left37)").

Found by a sweep of every command of a quickstart ledger with each of its options given ``''``,
``junk`` and ``-1``: ``revoke --reason ''``, ``approve --purpose ' '`` exited 1 ("verification
failed"); an empty path (``--policy ''``, ``--out ''``, ``--files ''``) was read or written as
the current directory: exit 3 (``policy .: cannot read: Is a directory``, ``cannot write in .:
Device or resource busy``) or 1 (``verify --files ''`` compared the whole directory).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import testkit
from testkit import new_runner

from trajledger.ledger.home import LedgerHome
from trajledger.runner.cli import main


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, quickstart_template: testkit.Template[str]
        ) -> Path:
    """A copy of the session's quickstart ledger."""
    return testkit.copy_template(quickstart_template, tmp_path_factory.mktemp("left37") / "lab")


CASES = {
    "revoke --reason ''": (["revoke", "cartpole-train@1", "--key", "vendor", "--reason", ""],
                           "Error: --reason is empty: say why the artifact is revoked, such as "
                           "--reason 'collected with a buggy reward'; see 'trajledger revoke "
                           "--help'"),
    "revoke --reason ' '": (["revoke", "cartpole-train@1", "--key", "vendor", "--reason", " "],
                            "Error: --reason is empty"),
    "approve --purpose ''": (["approve", "cartpole-train@1", "--key", "approver-a", "--purpose",
                              "", "--expires", "30d"],
                             "Error: --purpose is empty: say what the data is approved for"),
    "approve --expires 0": (["approve", "cartpole-train@1", "--key", "approver-a", "--purpose",
                             "train", "--expires", "0d"],
                            "Error: --expires 0: an approval must last longer than 0 seconds; "
                            "give a duration such as --expires 90d"),
    "admit --policy ''": (["admit", "cartpole-train@1", "--policy", ""],
                          "Error: --policy is empty: give the path of a file or directory (an "
                          "unquoted shell variable left empty?); see 'trajledger admit --help'"),
    "lineage --out ''": (["lineage", "cartpole-bc@2", "--out", ""], "Error: --out is empty"),
    "verify --files ''": (["verify", "cartpole-bc@2", "--files", ""], "Error: --files is empty"),
    "export --policy ''": (["export", "cartpole-bc@2", "--out", "{tmp}/x.tar.zst", "--policy",
                            ""], "Error: --policy is empty"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_mistyped_option_value_is_a_usage_error_in_one_line(lab: Path, tmp_path: Path,
                                                               case: str) -> None:
    args, said = CASES[case]
    size = LedgerHome.open(lab).log.size
    r = new_runner().invoke(main, ["--ledger", str(lab),
                                   *(a.format(tmp=tmp_path) for a in args)], prog_name="trajledger")
    assert (r.exit_code, r.stderr.count("\n")) == (2, 1), r.stderr
    assert r.stderr.startswith(said), r.stderr
    assert LedgerHome.open(lab).log.size == size
    assert not list(tmp_path.iterdir())


def test_a_refusal_of_what_was_typed_well_stays_1(lab: Path) -> None:
    """The same commands given well-formed values that the evidence refuses: 1, as before."""
    r = new_runner().invoke(main, ["--ledger", str(lab), "admit", "cartpole-train@1",
                                   "--purpose", "junk"])
    assert r.exit_code == 1, r.stderr
    assert "approvals: 0 of 2 required approver(s) for 'junk'" in r.stderr


@pytest.mark.parametrize("given", ["junk\n", "", "lab/log/checkpoint"])
def test_a_known_checkpoint_that_is_no_checkpoint_is_a_usage_error(
    lab: Path, tmp_path: Path, given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m verify --known-checkpoint F``: F no signed checkpoint at all is the auditor's
    own file to fix, exit 2 before any work (it failed the bundle, exit 1: out36's Left); a
    checkpoint of this log passes; one of another log stays a failed check
    (tests/unit/verify/test_bundle.py)."""
    from trajledger.verify.__main__ import main as verify_main

    bundle = tmp_path / "b.tar.zst"
    r = new_runner().invoke(main, ["--ledger", str(lab), "export", "cartpole-bc@2", "--out",
                                   str(bundle)])
    assert r.exit_code == 0, r.stderr
    known = lab / "log" / "checkpoint"
    if not given.startswith("lab/"):
        known = tmp_path / "known"
        known.write_text(given)
    capsys.readouterr()
    code = verify_main([str(bundle), "--policy", str(lab / "policy.toml"),
                        "--known-checkpoint", str(known)])
    err = capsys.readouterr().err
    if given.startswith("lab/"):
        assert code == 0, err
        return
    assert code == 2, err
    assert err == (f"FAIL: {bundle}: --known-checkpoint {known}: not a signed checkpoint (signed "
                   "note has no blank line before its signatures): give the checkpoint member of "
                   "a bundle of this log you verified before (or leave --known-checkpoint out)\n")
