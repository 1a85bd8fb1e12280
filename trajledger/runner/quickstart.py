"""``trajledger quickstart DIR``: the README's main job, end to end on the embedded defaults.

It runs, through the same library calls the commands use, what a team does in its first hour:
a ledger and keys for a vendor, two approvers and a trainer; a trust policy (2-of-2 approvals)
recorded in the log; an environment and an evaluator registered; random CartPole rollouts
recorded, approved and trained on; the checkpoint's own rollouts recorded; a second iteration;
the final checkpoint's lineage verified and printed; then the refusals a runner must make (an
unapproved dataset, a tampered batch, a holdout split). Keys are encrypted when
``TRAJLEDGER_PASSPHRASE`` (or the file ``TRAJLEDGER_PASSPHRASEFILE``) is set; otherwise they are
demo keys written in the clear, with a warning. The last stdout line is the final checkpoint's
digest.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from trajledger.ledger.clikit import JSON_OPTION, Context, emit_result, pass_ctx, style, warn

__all__ = ["quickstart"]

POLICY_ROLES = {
    "producer": (("vendor",), 1, "who may record environments, evaluators, rollouts, datasets"),
    "approver": (("approver-a", "approver-b"), 2, "who approves data for training: both"),
    "trainer": (("trainer",), 1, "who may record checkpoints"),
}
"""The quickstart policy's roles: key names, threshold, comment."""


def _step(text: str) -> None:
    click.echo(style(f"\n==> {text}", bold=True), err=True)


def _say(text: str) -> None:
    click.echo(f"    {text}", err=True)


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--episodes",
    default=100,
    show_default=True,
    type=click.IntRange(min=10),
    help="Random CartPole episodes to start from.",
)
@JSON_OPTION
@pass_ctx
def quickstart(ctx: Context, directory: Path, episodes: int, as_json: bool) -> None:
    """Build a demo ledger in DIRECTORY: keys, policy, rollouts, approvals, two training
    iterations, verification, lineage and refusals. Prints the final checkpoint's digest.

    \b
    Example:
      trajledger quickstart demo && cd demo && trajledger lineage cartpole-bc@2
    """
    from trajledger.ledger.config import ledger_path
    from trajledger.ledger.errors import LedgerError

    ledger_path(directory)  # a path Arrow cannot open: refused before anything is made
    if directory.exists() and any(directory.iterdir()):
        raise LedgerError(f"{directory}: exists and is not empty; pick a new directory")
    made = not directory.exists()
    try:
        _build(directory, episodes, as_json)
    except BaseException:
        # Ctrl-C or a failure midway: a half-made demo would be refused by the next run
        # ("exists and is not empty"); what this run wrote is all the directory holds.
        _remove_unfinished(directory, made)
        raise


def _remove_unfinished(directory: Path, made: bool) -> None:
    """Remove what an unfinished quickstart wrote: ``directory`` if it ``made`` it, else (it was
    empty) its contents."""
    import shutil

    from trajledger._signals import forget_appends

    forget_appends()  # what it recorded goes with it
    if made:
        shutil.rmtree(directory, ignore_errors=True)
    elif directory.is_dir():
        for p in directory.iterdir():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
    click.echo(f"NOTE: the unfinished demo in {directory} was removed; run the command again",
               err=True)


def _build(directory: Path, episodes: int, as_json: bool) -> None:
    """The demo, in ``directory`` (new or empty)."""
    from trajledger.ledger.artifacts import (
        create_dataset,
        register_environment,
        register_evaluator,
    )
    from trajledger.ledger.errors import LedgerError
    from trajledger.ledger.home import LedgerHome
    from trajledger.ledger.keys import PASSPHRASE_ENV, PASSPHRASE_FILE_ENV
    from trajledger.ledger.policy_state import policy_toml
    from trajledger.ledger.status import approve, record_policy
    from trajledger.verify.policy import TrustPolicy

    from .admission import DataRefusedError, admit
    from .rollouts import run_policy
    from .train import rollout, train
    from .verification import verify_ref

    ledger = LedgerHome.init(directory, origin=f"trajledger.quickstart/{os.urandom(4).hex()}")
    encrypt = ledger.keys.require_encrypted  # the log key's passphrase was set
    if not encrypt:
        warn(f"neither {PASSPHRASE_ENV} nor {PASSPHRASE_FILE_ENV} is set: the demo keys are "
             "written unencrypted (demo only)")
    _step(f"a ledger in {directory}, keys for a vendor, two approvers and a trainer")
    keys = {
        n: ledger.keys.create(n, encrypt=encrypt)
        for n in ("vendor", "approver-a", "approver-b", "trainer")
    }
    for who, k in keys.items():
        _say(f"{who:11} {k.public.algorithm} {k.keyid[:16]}…")

    _step("the trust policy: producer vendor, approvals 2-of-2, trainer, this log's key")
    policy_path = directory / "policy.toml"
    policy_path.write_text(policy_toml(
        "quickstart",
        {role: ([(n, keys[n].public) for n in names], threshold, comment)
         for role, (names, threshold, comment) in POLICY_ROLES.items()},
        ledger.log.vkey,
        header="# Trust policy of the quickstart ledger (see keys/README.md for every setting).\n"
        "# Keys are inline (PEM), each with its name and fingerprint.",
    ))
    record_policy(ledger, policy_path, [keys["approver-a"], keys["approver-b"]])
    policy = TrustPolicy.from_toml(policy_path.read_bytes(), directory)
    _say(f"{policy_path} recorded in the log, signed by both approvers")

    _step("environment and evaluator registered")
    register_environment(
        ledger, "cartpole", "1", keys["vendor"], gymnasium_id="CartPole-v1", source="gymnasium"
    )
    register_evaluator(ledger, "episode-return", "1", "deterministic", keys["vendor"])
    _say("cartpole@1 (CartPole-v1), episode-return@1 (deterministic)")

    _step(f"{episodes} random CartPole episodes recorded by the vendor")
    random_batch, random_mean = _random_batch(
        ledger, keys["vendor"], episodes, 0, "cartpole-random", evaluator="episode-return@1"
    )
    _say(f"batch {random_batch[:23]}…  mean return {random_mean:.1f}")

    _step("iteration 1: dataset, approvals 2-of-2, training")
    # Each name is one artifact: the environment is cartpole@1, its datasets cartpole-train@N
    # (so 'export cartpole-train@1' is not ambiguous).
    ds1 = create_dataset(ledger, "cartpole-train", "1", "train", [random_batch], keys["vendor"])
    for a in ("approver-a", "approver-b"):
        approve(ledger, "cartpole-train@1", keys[a], expires="30d", note="quickstart")
    ckpt1 = train(
        ledger, "cartpole-train@1", "bc", keys["trainer"], policy, seed=0, name="cartpole-bc",
        version="1",
    )
    _say(f"dataset {ds1.recorded.digest[:23]}…, checkpoint {ckpt1.digest[:23]}…")

    _step("rollouts of checkpoint 1, recorded with the checkpoint as their policy")
    batch_ckpt1, mean1 = rollout(
        ledger, ckpt1.digest, "cartpole@1", max(10, episodes // 2), keys["vendor"], policy,
        seed=1000,
    )
    _say(f"batch {batch_ckpt1.recorded.digest[:23]}…  mean return {mean1:.1f}")

    _step("iteration 2: both batches, approvals, training with checkpoint 1 as parent")
    create_dataset(
        ledger,
        "cartpole-train",
        "2",
        "train",
        [random_batch, batch_ckpt1.recorded.digest],
        keys["vendor"],
    )
    for a in ("approver-a", "approver-b"):
        approve(ledger, "cartpole-train@2", keys[a], expires="30d", note="quickstart")
    ckpt2 = train(
        ledger,
        "cartpole-train@2",
        "bc",
        keys["trainer"],
        policy,
        seed=0,
        name="cartpole-bc",
        version="2",
        parent=ckpt1.digest,
    )
    eval2 = run_policy(
        _policy_of(ledger, ckpt2.digest), "CartPole-v1", 20, 50_000, policy_version="eval"
    )
    _say(
        f"checkpoint {ckpt2.digest[:23]}…  mean return {eval2.mean_return:.1f} "
        f"(random: {random_mean:.1f})"
    )

    _step("verifying the final checkpoint's whole lineage (signatures, log, approvals, data)")
    report = verify_ref(ledger, ckpt2.digest, policy)
    click.echo("\n".join(report.render()), err=as_json)  # --json: stdout holds one document
    n, failed = report.count()
    if failed:
        raise LedgerError(
            f"quickstart: the fresh ledger does not verify ({failed} of {n} checks failed); "
            "please report"
        )
    _say(f"{n} checks passed")

    _step("refusals: the runner will not train on these")
    unapproved, _ = _random_batch(ledger, keys["vendor"], 10, 7000, "cartpole-unapproved")
    create_dataset(ledger, "cartpole-unapproved", "1", "train", [unapproved], keys["vendor"])
    _refused(
        "an unapproved dataset",
        lambda: train(ledger, "cartpole-unapproved@1", "bc", keys["trainer"], policy),
        DataRefusedError,
    )

    holdout, _ = _random_batch(ledger, keys["vendor"], 10, 8000, "cartpole-holdout")
    create_dataset(ledger, "cartpole-holdout", "1", "holdout", [holdout], keys["vendor"])
    for a in ("approver-a", "approver-b"):
        approve(ledger, "cartpole-holdout@1", keys[a])
    _refused(
        "a holdout split",
        lambda: admit(ledger, "cartpole-holdout@1", policy),
        DataRefusedError,
    )

    steps_blob = _blob_of(ledger, batch_ckpt1.recorded.digest, "steps.parquet")
    original = steps_blob.read_bytes()
    os.chmod(steps_blob, 0o644)
    tampered = bytearray(original)
    tampered[len(tampered) // 2] ^= 0x01
    steps_blob.write_bytes(bytes(tampered))
    try:
        _refused(
            "a tampered batch (one bit flipped in the store)",
            lambda: admit(ledger, "cartpole-train@2", policy),
            DataRefusedError,
        )
    finally:
        steps_blob.write_bytes(original)
        os.chmod(steps_blob, 0o444)
    _say("(the flipped bit is restored, so the demo ledger stays sound)")

    _step("done")
    _say(f"ledger: {directory}   policy: {policy_path}")
    # verify uses the trust policy recorded in the log (signed by the approvers), not a file
    # in the ledger directory that anyone who can write there could edit.
    from trajledger.ledger.errors import shell_word

    shown = shell_word(directory)  # a path with spaces is copied as one word
    _say(f"try: trajledger --ledger {shown} verify {ckpt2.digest[:19]}")
    _say(f"     trajledger --ledger {shown} log info")
    emit_result(as_json, ckpt2.digest, {
        "ledger": str(directory), "policy": str(policy_path), "checkpoint": ckpt2.digest,
        "checks": n, "meanReturn": {"random": random_mean, "checkpoint": eval2.mean_return}})


def _random_batch(
    ledger: Any, signer: Any, episodes: int, seed: int, name: str, evaluator: str | None = None
) -> tuple[str, float]:
    """Record ``episodes`` random CartPole episodes from ``seed``; their digest and mean return."""
    from trajledger.ledger.artifacts import record_batch

    from .rollouts import run_policy

    played = run_policy(None, "CartPole-v1", episodes, seed, policy_version="random")
    batch = record_batch(
        ledger, played.steps, episodes=played.episodes, env="cartpole@1", evaluator=evaluator,
        policy="random", signer=signer, name=name,
    )  # fmt: skip
    return batch.recorded.digest, float(played.mean_return)


def _refused(what: str, action: Any, error: type[Exception]) -> None:
    try:
        action()
    except error as e:
        lines = str(e).splitlines()
        _say(f"refused {what}: {len(lines) - 1} problem(s):")
        for line in lines[1:4]:
            _say(f"  - {line}")
        if len(lines) > 4:
            _say(f"  ... {len(lines) - 4} more")
        return
    from trajledger.ledger.errors import LedgerError

    raise LedgerError(f"quickstart: {what} was not refused; please report")


def _policy_of(ledger: Any, digest: str) -> Any:
    from .train import checkpoint_files
    from .trainers import load_policy

    _item, files = checkpoint_files(ledger, digest)
    return load_policy(files)


def _blob_of(ledger: Any, artifact: str, path: str) -> Path:
    from trajledger.ledger.artifacts import batch_files

    return Path(ledger.store.path_of(batch_files(ledger, artifact)[path]))
