"""An invalid policy FILE of the user's own is a usage error, exit 2, on every command that
takes one (twenty-first round, left36 finding 4; docs/SECURITY.md "Review of 2026-12-05,
twenty-first round (left36)").

left35 made ``verify --policy`` so (DESIGN §8: 2 is input the user wrote and must fix); ``admit``,
``train``, ``eval``, ``release``, ``lineage``, ``impact``, ``export``, ``import``, ``policy set``
and ``policy inline`` still exited 1, "verification failed", as if evidence had. ``policy check
FILE`` judges the file: its verdict stays 1. A missing file stays 3 (the file system's answer).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import testkit
from testkit import new_runner

from trajledger.ledger.home import LedgerHome
from trajledger.runner.cli import main

COMMANDS = {
    "admit": ["admit", "cartpole-train@2"],
    "train": ["train", "--dataset", "cartpole-train@2", "--key", "trainer", "--name", "x",
              "--version", "9"],
    "eval": ["eval", "cartpole-bc@2", "--suite", "cartpole-train@2", "--key", "vendor"],
    "release": ["release", "cartpole-bc@2", "--key", "approver-a"],
    "lineage": ["lineage", "cartpole-bc@2"],
    "impact": ["impact", "cartpole-train@2"],
    "export": ["export", "cartpole-bc@2", "--out", "{tmp}/x.tar.zst"],
    "import": ["import", "{tmp}/b.tar.zst", "--key", "approver-a"],
    "verify REF": ["verify", "cartpole-bc@2"],
    "verify BUNDLE": ["verify", "{tmp}/b.tar.zst"],
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, quickstart_template: testkit.Template[str]
        ) -> Path:
    root = tmp_path_factory.mktemp("left36")
    runner = new_runner()
    testkit.copy_template(quickstart_template, root / "lab")  # (the session's quickstart)
    r = runner.invoke(main, ["--ledger", str(root / "lab"), "export", "cartpole-bc@2", "--out",
                             str(root / "b.tar.zst")])
    assert r.exit_code == 0, r.output
    return root


@pytest.mark.parametrize("text", ["[roles\n", 'name = "p"\n[roles.auditor]\nkeys = []\n'],
                         ids=["not-toml", "unknown-role"])
def test_an_invalid_policy_file_of_the_users_own_is_a_usage_error(lab: Path, text: str) -> None:
    runner = new_runner()
    bad = lab / "bad.toml"
    bad.write_text(text)
    home = lab / "lab"
    size = LedgerHome.open(home).log.size

    def run(*args: str) -> tuple[int, str]:
        r = runner.invoke(main, ["--ledger", str(home), *(a.format(tmp=lab) for a in args)])
        return r.exit_code, r.stderr

    for name, args in COMMANDS.items():
        code, err = run(*args, "--policy", str(bad))
        assert code == 2, (name, err)
        assert err.startswith(f"FAIL: policy {bad}: ") and len(err.splitlines()) == 1, (name, err)
    for args in (["policy", "set", str(bad), "--key", "approver-a", "--key", "approver-b",
                  "--yes"], ["policy", "inline", str(bad)]):
        code, err = run(*args)
        assert code == 2 and err.startswith(f"FAIL: policy {bad}: "), (args, err)
    code, err = run("policy", "check", str(bad))  # the file is what is judged: its verdict
    assert code == 1 and err.startswith(f"FAIL: policy {bad}: "), err
    code, err = run("admit", "cartpole-train@2", "--policy", str(lab / "none.toml"))
    assert code == 3 and err == f"FAIL: policy {lab / 'none.toml'}: no such file\n", err
    assert LedgerHome.open(home).log.size == size
    assert not (lab / "x.tar.zst").exists()


def test_a_policy_file_larger_than_a_recorded_policy_is_refused_unread(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A policy FILE is read up to the size a recorded policy may have (an envelope's bound,
    64 MiB), then refused as a usage error. Before (rev34), every byte was read first: a 1 GB
    file took seconds and its size in memory before ``not valid TOML``, and ``--policy
    /dev/zero`` (a link to it, a device path typed by mistake) grew until the process was
    killed. Sparse here: 64 MiB and one byte of nothing."""
    from trajledger.verify.__main__ import main as verify_main
    from trajledger.verify.dsse import MAX_ENVELOPE_BYTES

    big = lab / "big.toml"
    with big.open("wb") as f:
        f.truncate(MAX_ENVELOPE_BYTES + 1)
    runner, home = new_runner(), lab / "lab"
    for args in (COMMANDS["admit"], COMMANDS["verify BUNDLE"], ["policy", "inline", "{tmp}"]):
        args = [a.format(tmp=lab) for a in args]
        args = [*args[:-1], str(big)] if args[0] == "policy" else [*args, "--policy", str(big)]
        r = runner.invoke(main, ["--ledger", str(home), *args])
        assert r.exit_code == 2, (args, r.stderr)
        assert r.stderr == f"FAIL: policy {big}: larger than 64 MiB\n", (args, r.stderr)
    capsys.readouterr()
    assert verify_main([str(lab / "b.tar.zst"), "--policy", str(big)]) == 2
    err = capsys.readouterr().err
    assert err == f"FAIL: {lab / 'b.tar.zst'}: policy {big}: larger than 64 MiB\n", err


@pytest.mark.parametrize(("text", "code"), [("[roles\n", 2), (None, 3)], ids=["invalid", "valid"])
def test_monitor_reads_the_policy_file_before_the_log(lab: Path, text: str | None,
                                                       code: int) -> None:
    """``monitor URL --policy FILE`` (left36's Left: untested, it needs a log server) read the
    file after fetching the log: an invalid one was found only when the log answered, after
    the fetch was noted. Now it is read first: exit 2, the log not asked (a port nothing
    listens on: a valid file gets the fetch's exit 3). left37."""
    home = lab / "lab"
    policy = home / "policy.toml"
    if text is not None:
        policy = lab / "bad-monitor.toml"
        policy.write_text(text)
    vkey = LedgerHome.open(home).log.vkey
    r = new_runner().invoke(main, ["--ledger", str(home), "monitor", "http://127.0.0.1:9/",
                                   "--vkey", vkey, "--timeout", "2", "--policy", str(policy)])
    assert r.exit_code == code, r.stderr
    assert ("not valid TOML" in r.stderr) == (code == 2), r.stderr
