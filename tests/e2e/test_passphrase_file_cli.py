"""End to end: every command that reads a passphrase takes it from a file (fix10).

rev9's limit "Passphrases come from environment variables or a prompt only": a non-interactive
run kept them in its environment (``/proc/PID/environ``). ``TRAJLEDGER_PASSPHRASEFILE`` (every
key) and ``TRAJLEDGER_PASSPHRASEFILE_<NAME>`` (one key) name a file holding it. These tests run
the commands through the CLI with no passphrase variable set at all; before fix10 ``init`` made
plain demo keys (the file variable was not read) and the tour stopped at ``key new`` (exit 3,
"no passphrase")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import testkit
from cryptography.hazmat.primitives import serialization

STEPS = """\
{"episode_id": "ep-0", "step": 0, "obs": [0.01, 0.02, 0.03, 0.04], "action": 1, "reward": 1.0, \
"terminated": false, "truncated": false}
{"episode_id": "ep-0", "step": 1, "obs": [0.01, 0.22, 0.03, -0.25], "action": 0, "reward": 1.0, \
"terminated": true, "truncated": false}
"""


run = testkit.invoke


def ok(home: Path, *args: str | Path) -> str:
    r = run(home, *args)
    assert r.exit_code == 0, r.output
    return r.stdout.strip()


def secret(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


def opens_with(key_file: Path, passphrase: str) -> bool:
    try:
        serialization.load_pem_private_key(key_file.read_bytes(), passphrase.encode())
    except ValueError:
        return False
    return True


@pytest.fixture
def no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("TRAJLEDGER_PASSPHRASE")]:
        monkeypatch.delenv(name)


@pytest.mark.usefixtures("no_variables")
def test_the_tour_signs_with_passphrases_from_files_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """init, key new (signing and X25519), policy set, env and evaluator register, record,
    dataset create, approve, train, revoke, log rotate-key: the log key's passphrase from its own
    file, every other key's from the shared one."""
    home = tmp_path / "ledger"
    log_pw = secret(tmp_path / "log.pass", "the log's (TEST ONLY)")
    every = secret(tmp_path / "every.pass", "every key's (TEST ONLY)")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE_LOG", str(log_pw))
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE", str(every))
    monkeypatch.chdir(tmp_path)
    r = run(home, "init", "--origin", "test/passphrase-file")
    assert r.exit_code == 0 and "WARNING" not in r.stderr, r.output
    assert 'keys = "encrypted"' in (home / "ledger.toml").read_text()
    for name in ("vendor", "approver-a", "approver-b", "trainer"):
        ok(home, "key", "new", name)
    ok(home, "key", "new", "evaluator", "--alg", "x25519")
    ok(home, "policy", "init")
    ok(home, "policy", "set", "policy.toml", "--key", "approver-a", "--key", "approver-b",
       "--yes")
    ok(home, "env", "register", "cartpole", "--version", "1", "--gym-id", "CartPole-v1",
       "--key", "vendor")
    (tmp_path / "rubric.md").write_text("1 point a step\n")
    ok(home, "evaluator", "register", "survival", "--version", "1", "--kind", "deterministic",
       "--rubric", "rubric.md", "--key", "vendor")
    (tmp_path / "steps.jsonl").write_text(STEPS)
    batch = ok(home, "record", "steps.jsonl", "--env", "cartpole@1", "--evaluator",
               "survival@1", "--policy", "random", "--licence", "CC-BY-4.0", "--key", "vendor")
    ok(home, "dataset", "create", "d", "--version", "1", "--split", "train", "--batch", batch,
       "--key", "vendor")
    ok(home, "approve", "d@1", "--key", "approver-a")
    ok(home, "approve", "d@1", "--key", "approver-b")
    ckpt = ok(home, "train", "--dataset", "d@1", "--key", "trainer")
    assert ckpt.startswith("sha256:")
    ok(home, "revoke", batch, "--key", "approver-a", "--reason", "a test")
    old_log_key = (home / "log-key" / "log.pub").read_bytes()
    ok(home, "log", "rotate-key")
    assert (home / "log-key" / "log.pub").read_bytes() != old_log_key
    keys = [*(home / "keys").glob("*.key"), *(home / "keys" / "x25519").glob("*.key")]
    assert len(keys) == 5 and all(opens_with(k, "every key's (TEST ONLY)") for k in keys)
    assert opens_with(home / "log-key" / "log.key", "the log's (TEST ONLY)")  # the new one


@pytest.mark.usefixtures("no_variables")
def test_key_encrypt_and_upgrade_take_the_passphrase_from_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "ledger"
    ok(home, "init", "--origin", "test/passphrase-file")  # no passphrase: plain demo keys
    ok(home, "key", "new", "demo", "--no-encrypt")
    ok(home, "key", "new", "other", "--no-encrypt")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE_DEMO", str(secret(tmp_path / "d", "demo's")))
    ok(home, "key", "encrypt", "demo")
    assert opens_with(home / "keys" / "demo.key", "demo's")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE", str(secret(tmp_path / "e", "every key's")))
    ok(home, "upgrade")
    assert 'keys = "encrypted"' in (home / "ledger.toml").read_text()
    assert opens_with(home / "keys" / "other.key", "every key's")
    assert all(opens_with(k, "every key's") for k in (home / "log-key").glob("*.key"))


@pytest.mark.usefixtures("no_variables")
def test_a_refused_passphrase_file_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Missing: exit 3 with the path; readable by others: exit 3 with the chmod; nothing made."""
    home = tmp_path / "ledger"
    ok(home, "init", "--origin", "test/passphrase-file")
    missing = tmp_path / "no-such.pass"
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE", str(missing))
    r = run(home, "key", "new", "vendor")
    assert (r.exit_code, r.stderr) == (3, f"FAIL: key vendor: the passphrase file {missing} "
                                          "(TRAJLEDGER_PASSPHRASEFILE): not found\n")
    shared = secret(tmp_path / "shared.pass", "pw")
    shared.chmod(0o644)
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE", str(shared))
    r = run(home, "key", "new", "vendor")
    assert (r.exit_code, r.stderr) == (3, f"FAIL: key vendor: the passphrase file {shared} "
                                          "(TRAJLEDGER_PASSPHRASEFILE): other users may read or "
                                          f"change it (mode 0644); run 'chmod 600 {shared}'\n")
    assert not (home / "keys" / "vendor.key").exists()
