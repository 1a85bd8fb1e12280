"""What out47's outsiders found in files out47 does not own (strict xfails for the lead,
fixed at the merge; docs/SECURITY.md, "Review of 2026-12-07, thirty-second round (out47)" and
"(lead)").
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from test_runner_cli import expect, run


def vendor_only(runner: CliRunner, home: Path) -> str:
    """A vendor-only ledger (third-party.md: a producer, no approver) holding one batch."""
    expect(run(runner, home, "init"), 0)
    expect(run(runner, home, "key", "new", "vendor", "--no-encrypt"), 0)
    expect(run(runner, home, "policy", "init", "--roles", "producer", "--producer", "vendor",
               "--out", home / "policy.toml"), 0)
    expect(run(runner, home, "policy", "set", home / "policy.toml", "--key", "vendor", "--yes"), 0)
    expect(run(runner, home, "env", "register", "cartpole", "--version", "1", "--gym-id",
               "CartPole-v1", "--key", "vendor"), 0)
    steps = home.parent / "steps.jsonl"
    steps.write_text("".join(json.dumps({
        "episode_id": "ep-0", "step": t, "obs": [0.01 * t, 0.02, 0.0, 0.0], "action": t % 2,
        "reward": 1.0, "terminated": t == 2, "truncated": False}) + "\n" for t in range(3)))
    r = run(runner, home, "record", steps, "--env", "cartpole@1", "--policy", "random",
            "--key", "vendor")
    expect(r, 0)
    return r.stdout.strip().splitlines()[-1]


def test_a_vendor_that_rotated_its_producer_key_can_revoke_what_the_old_one_produced(
    runner: CliRunner, tmp_path: Path
) -> None:
    """A vendor-only ledger replaces its producer key (keys/README.md, "Replacing a key": a
    successor listing the new key instead of the old one), then must revoke a batch the old
    key recorded (consent withdrawn). ``revoke --key vendor2`` says ``did not produce it (…
    key vendor here: give --key vendor)``; ``revoke --key vendor`` says ``it holds no role in
    policy … serial 2``: each line sends to the other, and nothing can revoke the batch
    (no approver in a vendor-only ledger). Expected: the producer key that succeeded it
    revokes it, or the refusal names a way that works (a successor keeping the old key as a
    producer until the revocation is logged: what the outsider found by trying)."""
    home = tmp_path / "vendor"
    batch = vendor_only(runner, home)
    expect(run(runner, home, "key", "new", "vendor2", "--no-encrypt"), 0)
    expect(run(runner, home, "policy", "init", "--roles", "producer", "--producer", "vendor2",
               "--out", home / "policy-2.toml"), 0)
    expect(run(runner, home, "policy", "set", home / "policy-2.toml", "--key", "vendor",
               "--yes"), 0)
    new = run(runner, home, "revoke", batch, "--reason", "consent withdrawn", "--key", "vendor2")
    expect(new, 1)
    assert "give --key vendor)" not in new.stderr, new.stderr
    # the way the refusal names, followed as written, revokes it (the lead's fix; since
    # out53 finding 1, by the old key named again: buyers count no approver's revocation)
    way = new.stderr.split("key vendor here is that key: to revoke it where buyers count it "
                           "too, name it again in a successor (")[1]
    commands = [c.split() for c in way.split("'")[1:4:2]]
    assert [c[:3] for c in commands] == [["trajledger", "policy", "init"],
                                         ["trajledger", "policy", "set"]], way
    assert "--producer vendor2 --producer vendor " in way, way
    expect(run(runner, home, *[a if a != "FILE" else home / "policy-3.toml"
                               for a in commands[0][1:]]), 0)
    expect(run(runner, home, *[a if a != "FILE" else home / "policy-3.toml"
                               for a in commands[1][1:]], "--yes"), 0)
    expect(run(runner, home, "revoke", batch, "--reason", "consent withdrawn", "--key",
               "vendor"), 0)


def test_a_release_manager_asking_for_status_is_sent_to_verify(
    runner: CliRunner, tmp_path: Path
) -> None:
    """The release manager, after the evaluator version of a release was revoked, asks
    ``trajledger status``: ``Error: No such command 'status'. Did you mean 'stats'?``, and
    ``stats`` is episode statistics. Whether a release (any record) still stands is
    ``verify REF``'s answer (``show`` describes, and lists only records about REF itself).
    Expected: the usage error names it."""
    r = run(runner, tmp_path, "status")
    expect(r, 2)
    assert "trajledger verify" in r.stderr, r.stderr


def test_a_replaced_producer_in_a_ledger_with_approvers_is_sent_to_an_approver(
    runner: CliRunner, tmp_path: Path
) -> None:
    """The same refusal where the policy has approvers whose keys are held elsewhere: the way
    is an approver's, never a successor policy from `policy init` (whose roles would drop the
    policy's trainers and approvers as they are)."""
    home = tmp_path / "lab"
    expect(run(runner, home, "init"), 0)
    for name in ("vendor", "approver", "vendor2"):
        expect(run(runner, home, "key", "new", name, "--no-encrypt"), 0)
    for serial, producer in ((1, "vendor"), (2, "vendor2")):
        out = home / f"policy-{serial}.toml"
        expect(run(runner, home, "policy", "init", "--roles", "producer,approver",
                   "--producer", producer, "--approver", "approver", "--out", out), 0)
        expect(run(runner, home, "policy", "set", out, "--key", "approver", "--yes"), 0)
        if serial == 1:
            expect(run(runner, home, "env", "register", "cartpole", "--version", "1",
                       "--gym-id", "CartPole-v1", "--key", "vendor"), 0)
            steps = tmp_path / "steps.jsonl"
            steps.write_text("".join(json.dumps({
                "episode_id": "ep-0", "step": t, "obs": [0.01 * t, 0.02, 0.0, 0.0],
                "action": t % 2, "reward": 1.0, "terminated": t == 2, "truncated": False})
                + "\n" for t in range(3)))
            r = run(runner, home, "record", steps, "--env", "cartpole@1", "--policy", "random",
                    "--key", "vendor")
            expect(r, 0)
            batch = r.stdout.strip().splitlines()[-1]
    for part in ("key", "pub"):  # the approver's keys are held elsewhere
        (home / "keys" / f"approver.{part}").rename(tmp_path / f"approver.{part}")
    r = run(runner, home, "revoke", batch, "--reason", "consent withdrawn", "--key", "vendor2")
    expect(r, 1)
    assert "only an approver may revoke it now: ask a holder of one of the policy's approver " \
           "keys" in r.stderr, r.stderr
    assert "policy init" not in r.stderr, r.stderr
