"""Two outsiders' cases (out43): a vendor's data engineer who appends to a dataset every week
and records it again, and a release engineer scripting release questions with exit codes and
``--json``. Each test is a problem they met, through the ``trajledger`` command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tamperkit as tk
from click.testing import CliRunner

from trajledger import Ledger
from trajledger.ledger.artifacts import record_batch, register_environment
from trajledger.runner.cli import main


def episode(i: int) -> str:
    return json.dumps({
        "episode_id": str(i),
        "messages": [{"role": "user", "content": f"question {i} of week {i // 20}"},
                     {"role": "assistant", "content": f"answer {i * 13}"}],
        "reward": float(i % 3),
    }) + "\n"  # fmt: skip


@pytest.fixture
def weekly(tmp_path: Path) -> tuple[Path, str, str]:
    """A ledger with week 1 (episodes 0-19) recorded, then the same file appended to (20-24)
    and recorded whole again: the second batch holds every episode of the first."""
    root = tmp_path / "ledger"
    ledger = Ledger.init(root, origin="test/vendor-weekly")
    key = ledger.keys.create("vendor", encrypt=False)
    register_environment(ledger, "chat", "1", key)
    data = tmp_path / "rollouts.jsonl"
    data.write_text("".join(episode(i) for i in range(20)))
    one = record_batch(ledger, [data], env="chat@1", policy="m1", signer=key, name="w1")
    data.write_text("".join(episode(i) for i in range(25)))
    two = record_batch(ledger, [data], env="chat@1", policy="m1", signer=key, name="w2")
    tk.pin_log(root)
    return root, one.digest, two.digest


def run(runner: CliRunner, home: Path, *args: str) -> Any:
    return runner.invoke(main, ["--ledger", str(home), *args])


def test_a_batch_recorded_whole_again_is_one_warning_saying_what_to_do(
    runner: CliRunner, weekly: tuple[Path, str, str]
) -> None:
    """dataset create over both batches printed one WARNING per episode (20 here, a real
    dataset's thousands: the first 20 and '... and N more'), none saying what to do (out42
    finding 10)."""
    home, one, two = weekly
    args = ["dataset", "create", "weekly", "--version", "2", "--split", "train", "--key",
            "vendor", "--batch", "w1", "--batch", "w2"]  # fmt: skip
    r = run(runner, home, *args, "--json")
    assert r.exit_code == 0, r.output
    warnings = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    b, a = sorted([one, two], reverse=True)  # the later digest's episodes are the copies
    assert warnings == [
        f"WARNING: 20 episodes of batch {b[:19]}… duplicate episodes of batch {a[:19]}… "
        f"(episode '0' duplicates episode '0', …): every episode of batch {one[:19]}… is also "
        f"in batch {two[:19]}… (a dataset appended to and recorded whole again?): leave batch "
        f"{one[:19]}… out of the next version, or record only the new episodes"
    ]
    assert json.loads(r.stdout)["duplicateEpisodes"] == [warnings[0].removeprefix("WARNING: ")]


def test_a_revocation_by_the_wrong_producer_key_names_the_key_to_give(
    runner: CliRunner, tmp_path: Path
) -> None:
    """The vendor rotated its producer key mid-contract (vendor2 beside vendor in the policy),
    then revoked a batch of the first week with the new key: refused, naming only the old
    key's fingerprint, not that this ledger holds it as 'vendor' (out43). A buyer's own producer
    key refused on a vendor's batch is told the approver key it holds."""
    home = tmp_path / "ledger"
    env = {"TRAJLEDGER_STATE_DIR": str(tmp_path / "state")}

    def cli(*args: str | Path, code: int = 0) -> Any:
        r = runner.invoke(main, ["--ledger", str(home), *map(str, args)], env=env)
        assert r.exit_code == code, r.output
        return r

    cli("init")
    for name in ("vendor", "vendor2", "approver"):
        cli("key", "new", name, "--no-encrypt")
    policy = tmp_path / "policy.toml"
    cli("policy", "init", "--producer", "vendor", "--producer", "vendor2", "--approver",
        "approver", "--roles", "producer,approver", "--out", policy)  # fmt: skip
    cli("policy", "set", policy, "--key", "approver", "--yes")
    cli("env", "register", "chat", "--version", "1", "--key", "vendor")
    data = tmp_path / "w1.jsonl"
    data.write_text("".join(episode(i) for i in range(3)))
    batch = cli("record", data, "--env", "chat@1", "--policy", "m1", "--key", "vendor",
                "--name", "w1").stdout.strip()  # fmt: skip
    keyid = {k.name: k.keyid for k in Ledger.open(home).keys.list()}
    size = Ledger.open(home).log.size
    r = cli("revoke", "w1", "--reason", "sensor fault", "--key", "vendor2", code=1)
    assert r.stderr == (
        f"FAIL: rollout-batch w1: key vendor2 ({keyid['vendor2'][:12]}) did not produce it (its "
        f"record is signed by {keyid['vendor'][:12]}, key vendor here: give --key vendor): a "
        "producer may revoke only what it produced, an approver anything; nothing was signed\n"
    )
    assert Ledger.open(home).log.size == size
    # The buyer's case: the signer's key is not here, an approver's is.
    (home / "keys" / "vendor.pub").rename(tmp_path / "vendor.pub")
    r = cli("revoke", "w1", "--reason", "sensor fault", "--key", "vendor2", code=1)
    assert f"signed by {keyid['vendor'][:12]}: give an approver's key, --key approver):" in r.stderr
    (tmp_path / "vendor.pub").rename(home / "keys" / "vendor.pub")
    assert cli("revoke", batch, "--reason", "sensor fault", "--key", "vendor").exit_code == 0
