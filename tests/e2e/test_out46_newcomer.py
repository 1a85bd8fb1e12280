"""End to end: a newcomer with a plain Python training loop that writes its checkpoints to a
directory of its own, who wants provenance with the fewest changes (out46).

On test_evaluations' ledger (vendor is the producer, trainer the trainer). ``attest DIR --key
trainer``, the example of ``attest --help``, said ``OK: … attested by trainer`` and recorded a
``files`` record that ``verify`` then failed (``want producer key(s)``): attest signs with any
key (keys/README.md, "Signers without a role"), and said nothing of the policy that judges it.

Findings: docs/SECURITY.md, "Review of 2026-12-07, thirty-first round (out46)".
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from test_evaluations import evals_template, home  # noqa: F401
from test_runner_cli import expect, run


def test_attest_with_a_key_the_policy_does_not_count_says_so(
    runner: CliRunner, home: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out46 finding 4: the record such a key signs fails verify, and nothing said so."""
    ckpts = tmp_path / "ckpts"
    ckpts.mkdir()
    for step in range(3):
        (ckpts / f"step{step}.json").write_text(f'{{"w": {step}}}')
    r = run(runner, home, "attest", str(ckpts), "--key", "trainer", "--name", "myrl")
    expect(r, 0)  # recorded, as before: any key may attest (the verifier's policy decides)
    digest = r.stdout.strip().splitlines()[-1]
    assert "WARNING: key trainer (" in r.stderr, r.stderr
    assert (") holds no producer role in policy 'evals' "
            "serial 1, which counts a files record only when a producer key signs it: "
            "'trajledger verify' of this one fails under it, and a digest names one record of "
            "this log (these files cannot be attested again with another key); a checkpoint is "
            "recorded with what it was trained on by 'trajledger train --dataset NAME@VERSION "
            "--key trainer -- COMMAND' (docs/trainers.md)\n") in r.stderr, r.stderr
    v = run(runner, home, "verify", digest)
    expect(v, 1)  # what the warning said
    assert "want producer key(s)" in v.stdout, v.stdout


def test_attest_of_files_attested_already_names_who_signed_them(
    runner: CliRunner, home: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out46 finding 5: the same files attested again with another key said ``attested by
    vendor`` and answered with the record the trainer signed; nothing of vendor's was
    recorded."""
    ckpts = tmp_path / "ckpts"
    ckpts.mkdir()
    for step in range(3):
        (ckpts / f"step{step}.json").write_text(f'{{"w": {step}}}')
    r = run(runner, home, "attest", str(ckpts), "--key", "trainer", "--name", "myrl")
    expect(r, 0)
    digest = r.stdout.strip().splitlines()[-1]
    r = run(runner, home, "attest", str(ckpts), "--key", "vendor", "--name", "myrl")
    expect(r, 0)
    assert "attested by vendor" not in r.stderr, r.stderr
    assert ("3 file(s), 24 bytes: already attested at log index " in r.stderr
            and ", signed by " in r.stderr and "; nothing new was recorded\n" in r.stderr
            and "WARNING: key vendor (" in r.stderr and ") did not sign it: a digest names one "
            "record of this log, the first made, and these files are that one\n" in r.stderr
            ), r.stderr
    expect(run(runner, home, "verify", digest), 1)
    # Other files, attested by the producer: no warning, and verify passes.
    (ckpts / "step3.json").write_text('{"w": 3}')
    r = run(runner, home, "attest", str(ckpts), "--key", "vendor", "--name", "myrl")
    expect(r, 0)
    assert "WARNING" not in r.stderr and " attested by vendor: log index " in r.stderr, r.stderr
    expect(run(runner, home, "verify", r.stdout.strip().splitlines()[-1]), 0)


def test_an_unapproved_dataset_says_who_approves_it_and_how(
    runner: CliRunner, home: Path, tmp_path: Path  # noqa: F811
) -> None:
    """out46 finding 6: ``train -- COMMAND`` on a dataset not approved said ``approvals: 0 of 1
    required approver(s) for 'train'`` and not what to do (the tour says it; the refusal did
    not), nor which of the ledger's keys approve."""
    batch = run(runner, home, "show", "train@1", "--json")
    expect(batch, 0)
    first = json.loads(batch.stdout)["predicate"]["batches"][0]
    expect(run(runner, home, "dataset", "create", "mine", "--version", "1", "--split", "train",
               "--batch", first, "--key", "vendor"), 0)
    script = tmp_path / "train.py"
    script.write_text("import os, pathlib\n"
                      "out = pathlib.Path(os.environ['TRAJLEDGER_OUTPUT_DIR'])\n"
                      "(out / 'w.json').write_text('1')\n")
    want = ("> dataset mine@1: approvals: 0 of 1 required approver(s) for 'train': approve it "
            "with 1 more approver key ('trajledger approve mine@1 --key NAME'; the policy's "
            "approver keys here: approver; each key counts once), then run this again\n")
    for args in (("train", "--dataset", "mine@1", "--key", "trainer", "--name", "myrl",
                  "--version", "1", "--", "python", str(script)), ("admit", "mine@1")):
        r = run(runner, home, *args)
        expect(r, 1)
        assert want in r.stderr, r.stderr
    expect(run(runner, home, "approve", "mine@1", "--key", "approver"), 0)
    expect(run(runner, home, "admit", "mine@1"), 0)
