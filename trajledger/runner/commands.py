"""The runner's commands: admit, train, rollout, verify; policy (``runner.policy_cli``) and
approve, revoke and erase (``runner.status_cli``) are listed here among them.

Each parses its options, calls one library function and renders the result; heavy modules load
inside the commands.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import click

from trajledger.ledger.clikit import (
    EXIT_USAGE,
    JSON_OPTION,
    KEY_NAME,
    NEW_NAME,
    NEW_VERSION,
    OUT_DIR,
    Context,
    bundle_file,
    emit_json,
    emit_result,
    fail,
    loading,
    ok,
    pass_ctx,
    recorded_json,
    verdict_follows,
    visible,
    warn,
)
from trajledger.ledger.errors import AlreadyRecordedError, LedgerError

from .policy_cli import policy, policy_from_file
from .status_cli import approve, erase, revoke

__all__ = ["COMMANDS"]

SEED_MAX = 2**63 - 1
"""The largest episode seed (a signed 64-bit integer, as the rollouts table stores it)."""

POLICY_OPTION = click.option(
    "--policy",
    "policy_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Trust policy TOML (default: the ledger's policy in force).",
)
ALLOW_ENV_MODULE_OPTION = click.option(
    "--allow-env-module",
    "allow_env_module",
    metavar="MODULE",
    multiple=True,
    help="Let an imported environment's Gymnasium id MODULE:ID import this Python module "
    "(repeatable); refused otherwise: a vendor's record does not choose code to run here. This "
    "ledger's own environments need no such option.",
)


def command_policy(ctx: Context, ledger: Any, policy_file: Path | None) -> Any:
    """The policy a command judges under: ``--policy FILE`` followed through the ledger's
    policy history, else the policy in force; its notes shown under ``--verbose``."""
    from trajledger.ledger.policy_state import load_policy
    from trajledger.verify.policy_as_given import OTHER

    policy, notes = load_policy(ledger, policy_file)
    for n in notes:  # a file changed after it was recorded is said in any case (left37)
        if ctx.verbose or OTHER in n:
            click.echo(f"{'WARNING' if OTHER in n else 'policy'}: {n}", err=True)
    return policy


def _verifiers_policy(ctx: Context, file: Path) -> Any:
    """The policy FILE a verification judges under (`policy_from_file`). One that is invalid (not
    TOML or JSON, an unknown setting, a key it cannot read) is the user's own file to fix, not
    evidence that failed: a usage error, exit 2, as ``python -m verify --policy`` (left35); a
    damaged policy inside a bundle or a log stays exit 1."""
    from trajledger.verify.errors import FormatError

    try:
        return policy_from_file(ctx, file)
    except FormatError as e:
        fail(str(e))
        raise click.exceptions.Exit(EXIT_USAGE) from e


@click.command()
@click.argument("dataset")
@POLICY_OPTION
@click.option("--purpose", help="Purpose to check approvals for (default: the dataset's).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_ctx
def admit(
    ctx: Context, dataset: str, policy_file: Path | None, purpose: str | None, as_json: bool
) -> None:
    """Dry run of the admission gate: would the runner train on DATASET? Lists every failure.

    \b
    Example:
      trajledger admit cartpole-train@1 --json
    """
    from .admission import DataRefusedError
    from .lineage import named_json, qualified, render

    ledger = ctx.ledger()
    p = command_policy(ctx, ledger, policy_file)

    def shown(report: Any, admitted: bool) -> None:  # an imported node after a clash by its
        from .revokers import revokers, with_json

        names = qualified(ledger, report)  # qualified name, as `verify` names it (out49)
        with verdict_follows():
            if as_json:  # (who revoked a revoked cause: out57)
                emit_json({"admitted": admitted, "report": with_json(
                    named_json(report.to_json(), names), revokers(ledger, report, p))})
            else:
                click.echo(render(report, "text", names))

    try:
        result = ledger.admit(dataset, policy=p, purpose=purpose)
    except DataRefusedError as e:
        shown(e.report, False)
        raise
    shown(result.report, True)
    ok(f"dataset {dataset}: admitted ({len(result.batches)} batch(es))")


@click.command()
@click.option("--dataset", required=True, help="Dataset to train on (NAME@VERSION or digest).")
@click.option(
    "--trainer",
    "trainer_name",
    help="Trainer plug-in (entry point group trajledger.trainers) [default: bc]; not with a "
    "COMMAND.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Trainer config (JSON or TOML); plug-ins only.",
)
@click.option("--seed", type=int, help="Training seed [default: 0]; plug-ins only.")
@click.option("--parent", help="Parent checkpoint (recorded in the provenance; a COMMAND gets "
              "its files in $TRAJLEDGER_PARENT_DIR).")
@click.option("--name", type=NEW_NAME, help="Checkpoint name (required with a COMMAND; "
              "default <dataset>-<trainer>).")
@click.option("--version", "version", type=NEW_VERSION, help="Checkpoint version (required "
              "with a COMMAND; default seed<N>-<random>).")
@click.option(
    "--output",
    type=OUT_DIR,
    help="Where the checkpoint's files go, new or empty, kept: COMMAND's output directory "
    "($TRAJLEDGER_OUTPUT_DIR), or a trainer plug-in's files copied out once recorded "
    "[default: a temporary directory in the ledger, removed; none for a plug-in].",
)
@click.option("--keep-logs", is_flag=True, help="Also store COMMAND's stdout and stderr text "
              "with the checkpoint (trajledger-run/*.log); without it only their digests are "
              "recorded (logs can hold secrets).")
@POLICY_OPTION
@click.option("--key", required=True, type=KEY_NAME, help="Trainer key.")
@JSON_OPTION
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARGS]...]")
@pass_ctx
def train(
    ctx: Context,
    dataset: str,
    trainer_name: str | None,
    config_file: Path | None,
    seed: int | None,
    parent: str | None,
    name: str | None,
    version: str | None,
    output: Path | None,
    keep_logs: bool,
    policy_file: Path | None,
    key: str,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Admit DATASET, train on its verified bytes, record the checkpoint; prints its digest.

    \b
    Three ways to train (docs/trainers.md):
    trajledger train --dataset D --key K --name N --version V -- COMMAND [ARGS]...
        any command (a TRL or Hugging Face script, torchrun, accelerate launch): it reads the
        verified data from the read-only $TRAJLEDGER_DATA_DIR and writes the checkpoint into
        the empty $TRAJLEDGER_OUTPUT_DIR; every output file is hashed and recorded
    trajledger train --dataset D --key K [--trainer NAME --config F --seed S]
        a trainer plug-in (built in: bc, behaviour cloning on observations and actions)
    with ledger.training(D, key=K, name=N, version=V) as run: ...   (Python)
        in-process, with trajledger.integrations.transformers.LedgerCallback

    \b
    Example:
      trajledger train --dataset chat@1 --key trainer --name sft --version 1 \\
          -- python sft.py --epochs 1

    COMMAND runs with your rights, unsandboxed, in the current directory, with its output
    shown on stderr. Its provenance names the command line, the git commit (dirty or not), the
    Python environment's lock, the exit code and the digests of stdout and stderr. A non-zero
    exit, or a change to the data directory, records nothing and exits 1; Ctrl-C exits 130.
    A refused dataset exits 1, trains nothing, and appends a refusal record saying why.
    """
    ledger = ctx.ledger()
    if command:
        given = [o for o, v in (("--trainer", trainer_name), ("--config", config_file),
                                ("--seed", seed)) if v is not None]
        if given:
            raise click.UsageError(f"{', '.join(given)}: for trainer plug-ins, not with a COMMAND")
        missing = [o for o, v in (("--name", name), ("--version", version)) if not v]
        if missing:
            raise click.UsageError(f"a COMMAND needs {' and '.join(missing)}")
        p = command_policy(ctx, ledger, policy_file)
        out = ledger.train(dataset, key=key, command=list(command), policy=p, name=name,
                           version=version, parent=parent, output=output, keep_logs=keep_logs)
        data = out.admission.batches
        if out.new:
            ok(f"checkpoint {name}@{version} recorded at log index {out.index}: {out.files} "
               f"file(s) from {command[0]} (exit 0, trained on {len(data)} batch(es) of "
               f"{out.admission.name}@{out.admission.version})")
        else:  # the one-record rule found this checkpoint recorded under its first name
            ok(f"checkpoint {_first_name(ledger, out.digest)} already recorded at log index "
               f"{out.index}: this run wrote the same files from the same dataset, parent and "
               f"command, and a digest names one checkpoint; {name}@{version} was not recorded")
        emit_result(as_json, out.digest, _trained_json(ledger, out) if as_json else {})
        return
    if keep_logs:
        raise click.UsageError("--keep-logs goes with a COMMAND (after '--')")
    if output is not None:
        from .workdir import check_output_dir

        check_output_dir(output)  # before training: a refusal trains nothing
    p = command_policy(ctx, ledger, policy_file)
    config = _read_config(config_file) if config_file else {}
    try:
        out = ledger.train(
            dataset,
            key=key,
            trainer=trainer_name or "bc",
            policy=p,
            config=config,
            seed=seed or 0,
            name=name,
            version=version,
            parent=parent,
        )
    except AlreadyRecordedError as e:
        # A plug-in trains the same files from the same data, config and seed.
        raise AlreadyRecordedError(
            f"{e}: the same dataset, trainer, config and seed train the same files; give "
            f"another --seed (this was --seed {seed or 0}) for a new checkpoint", e.index) from e
    metrics = ", ".join(f"{k}={v:.4g}" for k, v in sorted(out.metrics.items()))
    if out.new:
        ok(f"checkpoint recorded at log index {out.index} ({metrics})")
    else:  # the same files: the checkpoint recorded before, under its first name
        asked = f"; {name}@{version} was not recorded" if name and version else ""
        ok(f"checkpoint already recorded as {_first_name(ledger, out.digest)} at log index "
           f"{out.index} ({metrics}){asked}")
    if output is not None:
        from .train import copy_checkpoint_files

        copied = copy_checkpoint_files(ledger, out.digest, output)
        ok(f"{len(copied)} checkpoint file(s) written to {output}: {', '.join(copied)}")
    emit_result(as_json, out.digest, _trained_json(ledger, out) if as_json else {})


def _first_name(ledger: Any, digest: str) -> str:
    """``NAME@VERSION`` of the checkpoint ``digest`` as recorded (a run that made the same
    files under another name found this one)."""
    from trajledger.ledger.catalog import Catalog

    return Catalog(ledger).resolve(digest).ref


def _trained_json(ledger: Any, out: Any) -> dict[str, Any]:
    """``train --json``: the checkpoint, what it was trained on, its metrics."""
    from trajledger.ledger.catalog import Catalog

    item = Catalog(ledger).resolve(out.digest)
    a = out.admission
    return {"kind": "checkpoint", "digest": out.digest, "logIndex": out.index, "new": out.new,
            "name": item.name, "version": item.version, "envelope": item.envelope,
            "files": out.files, "metrics": out.metrics,
            "dataset": {"name": a.name, "version": a.version, "digest": a.dataset},
            "batches": [b.digest for b in a.batches],
            "exitCode": out.run.returncode if out.run is not None else None}


def _read_config(path: Path) -> dict[str, Any]:
    import tomllib

    from trajledger.ledger.verify_files import read_input
    from trajledger.verify.errors import FormatError
    from trajledger.verify.strict_json import load_object

    data = read_input(path, "config")
    if path.suffix == ".toml":
        try:
            return tomllib.loads(data.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise FormatError(f"config {path}: not valid TOML: {e}") from e
        except RecursionError as e:
            raise FormatError(f"config {path}: not valid TOML: nested too deeply") from e
    return load_object(data, f"config {path}")


@click.command()
@click.option(
    "--checkpoint", required=True, help="Checkpoint whose policy plays (NAME@VERSION or digest)."
)
@click.option(
    "--env",
    "env",
    required=True,
    help="Registered environment (NAME@VERSION) or the Gymnasium id it names.",
)
@click.option("--episodes", default=10, show_default=True, type=click.IntRange(min=1),
              help="Episodes to play.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0, max=SEED_MAX),
              help="Seed of the first episode (the next get the next seeds).")
@click.option("--max-steps", type=click.IntRange(min=1), help="Cut episodes at this many steps.")
@click.option("--key", required=True, type=KEY_NAME, help="Producer key recording the rollouts.")
@ALLOW_ENV_MODULE_OPTION
@POLICY_OPTION
@JSON_OPTION
@pass_ctx
def rollout(
    ctx: Context,
    checkpoint: str,
    env: str,
    episodes: int,
    seed: int,
    max_steps: int | None,
    key: str,
    allow_env_module: tuple[str, ...],
    policy_file: Path | None,
    as_json: bool,
) -> None:
    """Run a checkpoint's policy in Gymnasium and record the rollouts (policy = the checkpoint).

    --env is a registered environment (NAME@VERSION or digest) or the Gymnasium id one names.
    The checkpoint's lineage and the environment's must verify under the policy first (exit 1).
    An imported environment (another origin's record) whose Gymnasium id names a module to
    import (MODULE:ID) is refused (exit 1) unless --allow-env-module MODULE names it.

    \b
    Example:
      trajledger rollout --checkpoint cartpole-bc@2 --env cartpole@1 --episodes 20 --key vendor
    """
    if seed + episodes - 1 > SEED_MAX:
        raise click.UsageError(f"--seed {seed} and --episodes {episodes}: the last episode's "
                               f"seed would pass {SEED_MAX} (seeds are 64-bit)")
    ledger = ctx.ledger()
    batch, mean = ledger.rollout(
        checkpoint, env, episodes, key=key, seed=seed, max_steps=max_steps,
        allow_env_modules=allow_env_module, policy=command_policy(ctx, ledger, policy_file),
    )
    ok(f"{episodes} episode(s) {batch.recorded.where}, mean return {mean:.1f}")
    emit_result(as_json, batch.recorded.digest, recorded_json("rollout-batch", batch.recorded)
                | {"episodes": episodes, "meanReturn": mean,
                   "environment": batch.environment.ref, "checkpoint": checkpoint})


@click.command()
@click.argument("targets", nargs=-1, required=True)
@click.option(
    "--envelope",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Files mode: the envelope from 'trajledger sign'.",
)
@click.option(
    "--pubkey",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Files mode: trusted public key PEM (repeatable).",
)
@click.option(
    "--threshold",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Files mode: distinct keys that must have signed.",
)
@click.option(
    "--sigstore-bundle",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A Sigstore bundle signing the FILE or DIRECTORY (sigstore, cosign, model_signing, "
    "'export --format sigstore'); needs --policy.",
)
@POLICY_OPTION
@click.option(
    "--skip-data",
    is_flag=True,
    help="Do not re-hash data blobs: compare each file's size with its manifest only (the "
    "report says 'size only, not re-hashed'). Manifests, envelopes, signatures and proofs are "
    "always checked in full.",
)
@click.option(
    "--files",
    "files_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="REF or bundle mode: a directory of the artifact's files (the model), each checked "
    "against its manifest by path and SHA-256 and named OK, differs or missing; a file it "
    "does not list is extra (exit 1 for the last three); symbolic links are not followed.",
)
@click.option(
    "--expect",
    metavar="DIGEST",
    help="REF or bundle mode: the sha256:HEX of the checkpoint or dataset you were given: exit "
    "1 when what was verified is another (a bundle of another checkpoint verifies too).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_ctx
def verify(
    ctx: Context,
    targets: tuple[str, ...],
    envelope: Path | None,
    pubkey: tuple[Path, ...],
    threshold: int,
    sigstore_bundle: Path | None,
    policy_file: Path | None,
    skip_data: bool,
    files_dir: Path | None,
    expect: str | None,
    as_json: bool,
) -> None:
    """Verify an artifact's whole lineage, or files against an envelope.

    \b
    trajledger verify REF [--policy F]             lineage of a recorded artifact
    trajledger verify BUNDLE.tar.zst --policy F    an exported evidence bundle, offline
    trajledger verify PATH... --envelope E --pubkey K   files signed by 'trajledger sign'
    trajledger verify PATH --sigstore-bundle B --policy F   a file or model directory signed
                                                   with Sigstore or model_signing

    Exits 0 when everything holds, 1 naming each failure, 2 for a usage error (your own
    --policy file invalid too), 3 for a missing file or ledger.

    \b
    Examples:
      trajledger verify cartpole-bc@2
      trajledger verify cartpole-bc@2 --files ./model
      trajledger verify cartpole-train-2.tar.zst --policy policy.toml --json
      trajledger verify cartpole-bc-2.tar.zst --policy policy.toml --files ./model
    """
    if files_dir is not None and (sigstore_bundle is not None or envelope is not None):
        raise click.UsageError("--files is for a REF or a bundle; the files of --envelope or "
                               "--sigstore-bundle mode are the PATHs given")
    if expect is not None:  # a full digest, else a usage error before any work
        from trajledger.verify.expect import expected_digest

        if sigstore_bundle is not None or envelope is not None:
            raise click.UsageError("--expect is for a REF or a bundle; --envelope and "
                                   "--sigstore-bundle mode hash the PATHs given")
        expect = expected_digest(expect, _usage_error)
    given = click.get_current_context().get_parameter_source
    threshold_given = given("threshold") is not click.core.ParameterSource.DEFAULT
    if sigstore_bundle is not None:
        if envelope is not None or pubkey:
            raise click.UsageError("--sigstore-bundle and --envelope/--pubkey: choose one mode")
        if skip_data or threshold_given:
            # Not read there: every PATH is hashed, and the policy says whose signature counts.
            raise click.UsageError("--skip-data and --threshold do not apply to "
                                   "--sigstore-bundle mode (its PATHs are hashed; --policy says "
                                   "whose signature counts)")
        _verify_sigstore(ctx, targets, sigstore_bundle, policy_file, as_json)
        return
    if envelope is not None:
        from trajledger.ledger.verify_files import verify_files

        if not pubkey:
            raise click.UsageError("files mode needs --pubkey")
        if policy_file is not None or skip_data:
            raise click.UsageError("--policy and --skip-data are for a REF or bundle; files mode "
                                   "(--envelope) hashes the PATHs and checks them against "
                                   "--pubkey")
        result = verify_files([Path(t) for t in targets], envelope, pubkey, threshold=threshold)
        if as_json:
            with verdict_follows():  # (rev52 finding 1)
                emit_json(result.to_json())
        result.raise_if_failed()
        ok(
            f"{result.subject}: {result.file_count} file(s) match, "
            f"signed by {', '.join(result.signers)}"
        )
        return
    if pubkey or threshold_given:
        # Not read in REF or bundle mode: taken silently, it would look like a key pinned.
        raise click.UsageError("--pubkey and --threshold are for files signed by 'trajledger "
                               "sign' (with --envelope); a REF or bundle is verified against "
                               "its policy (--policy)")
    if len(targets) != 1:
        raise click.UsageError("give one REF to verify (or PATH... with --envelope)")
    bundle = Path(targets[0])
    if bundle.exists() and not (bundle.is_file() or bundle.is_dir()):
        bundle_file(bundle)  # a pipe (``verify /dev/stdin``), a device: refused, saying why
    # A file named like a bundle is read as one even when its bytes are not (then refused as
    # not zstd), rather than looked up as an artifact name.
    if bundle.is_file() and (_is_zstd(bundle) or bundle.name.endswith(".zst")):
        from trajledger.verify.errors import FormatError, VerificationError

        _not_both(ctx, targets[0], bundle)

        try:
            with loading():  # (imp49: as a REF's walk below)
                report, omitted, whose = _verify_bundle(ctx, bundle, policy_file, skip_data,
                                                        files_dir)
        except (VerificationError, FormatError) as e:  # refused before its report: the
            if as_json:  # bundle node alone, as `python -m verify --json` (out44 finding 6)
                from trajledger.verify.refused_report import refused

                emit_json(refused(bundle.name, str(e)).to_json())
            raise
        with verdict_follows():
            if as_json:
                emit_json(_expected_json(report, expect))
            else:
                click.echo("\n".join(report.render()))
        if any("> consistent with the checkpoint seen before: " in f for f in report.failures()):
            warn("the checkpoint seen before is the newest of this log you have seen (your "
                 "trust state): a bundle that does not extend it is a fork, or older and may "
                 "hide what the log recorded since (a revocation); ask its sender for one "
                 "exported now")
        report_raise(report, str(bundle), skip_data, omitted, named=True, expect=expect,
                     more=whose)
        return
    if policy_file is not None:  # an invalid one is a usage error (read again, with the log's
        _verifiers_policy(ctx, policy_file)  # history, once the ledger is open)
    ledger = None
    try:
        # (imp49) the walk's records and report live until the command is done: the
        # collections that would walk them meanwhile are wasted, on the main thread
        with loading():
            ledger = ctx.ledger()
            p = command_policy(ctx, ledger, policy_file)
            report = ledger.verify(targets[0], policy=p, skip_data=skip_data, files=files_dir)
    except LedgerError as e:  # no ledger here, or no such name: a directory meant as a bundle?
        from trajledger.ledger.catalog import RefError

        gone = not bundle.exists() and bundle.name.endswith(".zst")  # a bundle's name (out37)
        if (bundle.is_dir() or gone) and targets[0].strip() and (ledger is None
                                                                 or isinstance(e, RefError)):
            raise LedgerError(f"bundle {bundle}: " + ("no such file" if gone else "is a directory, "
                              "want a .tar.zst bundle file (a model's files go with --files DIR)")
                              + f"; as a REF: {e}") from e
        if bundle.is_file() and isinstance(e, RefError):  # a file that is no bundle (out52)
            from trajledger.verify.not_bundle import HEAD, not_a_bundle_line

            with bundle.open("rb") as f:
                head = f.read(HEAD)
            line = not_a_bundle_line(f"bundle {bundle}", head)
            raise LedgerError(f"{line}; as a REF: {e}") from e
        raise
    from .lineage import named_json, qualified, render
    from .revokers import more, revokers, with_json

    names = qualified(ledger, report)  # an imported node after a clash by the name that finds
    revoked = revokers(ledger, report, p)  # who revoked a revoked cause (out55, out57)
    with verdict_follows():
        if as_json:  # it, as `lineage` and `impact` name it (out49)
            emit_json(with_json(named_json(_expected_json(report, expect), names), revoked))
        else:
            click.echo(render(report, "text", names))
    from trajledger.ledger.first_contact import unread

    for line in unread(ledger, report.nodes):  # their origin's log not read for them (gap39)
        warn(line)
    report_raise(report, targets[0], skip_data, expect=expect, more=more(revoked))


def _expected_json(report: Any, expect: str | None) -> dict[str, Any]:
    """``report``'s JSON; ``ok`` false for another artifact than ``--expect``'s, as the exit
    code says (out37)."""
    out: dict[str, Any] = report.to_json()
    return out | ({"ok": False} if expect not in (None, report.subject) else {})


def _verify_sigstore(
    ctx: Context, targets: tuple[str, ...], bundle: Path, policy_file: Path | None, as_json: bool
) -> None:
    """``verify PATH --sigstore-bundle B --policy F`` (docs/sigstore.md)."""
    from trajledger.ledger.interop_verify import verify_with_bundle

    if policy_file is None:
        raise click.UsageError("--sigstore-bundle needs --policy FILE (the keys and identities)")
    if len(targets) != 1:
        raise click.UsageError("give one FILE or DIRECTORY with --sigstore-bundle")
    result = verify_with_bundle(Path(targets[0]), bundle, policy_from_file(ctx, policy_file))
    with verdict_follows():  # (rev52 finding 1)
        if as_json:
            emit_json(result.to_json())
        else:
            click.echo("\n".join(visible(line) for line in result.render()))  # signer's text
    result.raise_if_failed()
    ok(f"{targets[0]}: {result.files} file(s) match, signed by {result.signer}")


def _not_both(ctx: Context, target: str, bundle: Path) -> None:
    """Refuse a bare name (no ``/``, not named ``….zst``) that is both a zstd file in the
    working directory and a record of this ledger: ``verify NAME@V --policy P`` verified such
    a file, a bundle of another record (a package's, a download's), and said OK (rev50
    finding 8). Its path (``./NAME@V``) is the file, its digest the record."""
    if "/" in target or bundle.name.endswith(".zst"):
        return
    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.errors import shell_word
    from trajledger.verify.errors import ProvenanceError

    try:
        item = Catalog(ctx.ledger()).resolve(target)
    except (ProvenanceError, OSError):  # (no ledger here, no such record: the file)
        return
    raise click.UsageError(
        f"{target}: a file here (a bundle) and a record of this ledger; for the file, give "
        f"its path ({shell_word('./' + target)}); for the record, its digest ('trajledger "
        f"verify {item.digest}')")


def _is_zstd(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x28\xb5\x2f\xfd"


def _verify_bundle(
    ctx: Context, path: Path, policy_file: Path | None, skip_data: bool, files: Path | None
) -> tuple[Any, int, dict[str, str]]:
    """Verify an exported bundle offline with the given policy (no ledger needed): the report
    (its bundle's node says what it cannot know offline: `Checkpoint.horizon`), how many
    data blobs the bundle leaves out, and who to ask about a key the policy does not hold
    (`ledger.relayed_keys`: what follows its failure's line). Its log must extend the newest
    checkpoint of that log this user has seen (their own ledger's log, one they imported from or
    monitor: `TrustState.floor_seen`), as ``python -m verify --known-checkpoint`` checks and as
    ``import`` requires: without it, ``verify BUNDLE`` said OK to a fork or a rollback (hiding a
    later revocation) that every other path of this user refuses (SECURITY.md, rev18 #1)."""
    from trajledger.ledger.exchange import bundle_log_key
    from trajledger.ledger.trust_handover import floor_across
    from trajledger.verify.bundle import BundleEvidence, verify_bundle

    if policy_file is None:
        raise click.UsageError("verifying a bundle needs --policy FILE (the policy you trust)")
    with BundleEvidence.open(path) as evidence:
        policy = _verifiers_policy(ctx, policy_file)
        # The log key is the one that signed the checkpoint, never bundle.json's (redo21
        # finding 1); the floor is the one seen under it or a key it took over from (redo15
        # finding 2).
        vkey = bundle_log_key(evidence, policy, f"bundle {path.name}")
        known, what = floor_across(vkey, evidence.key_handovers(),
                                   tree=evidence.checkpoint) or (None, "")
        report = verify_bundle(evidence, policy, data="size" if skip_data else "hash",
                               files=files, known_checkpoint=known, known_what=what,
                               declared=True)
        if report.ok:
            return report, len(evidence.index.omitted), {}
        from trajledger.ledger.relayed_keys import relayed_keys

        return report, len(evidence.index.omitted), relayed_keys(evidence, report.failures(),
                                                              policy.role("log").vkeys)


def _usage_error(message: str) -> NoReturn:
    raise click.UsageError(message)


def report_raise(report: Any, subject: str, skip_data: bool = False, omitted: int = 0,
                 named: bool = False, expect: str | None = None,
                 more: Mapping[str, str] | None = None) -> None:
    """OK line, or a VerificationError listing every failure. The OK line says what was not
    checked: data blobs a bundle does not hold (``omitted``), data compared by size only; and,
    ``named`` (a bundle), what it verified, with its full digest, as ``python -m verify``
    does: a bundle of another artifact than the one meant passes too (aud34 finding 1). With
    ``expect`` (a digest), a report of another subject fails with one line, as ``python -m
    verify --expect`` does. ``more``: what follows a failure's line, by the line's start
    (`revokers.more`)."""
    from trajledger.verify.errors import VerificationError
    from trajledger.verify.nodes import short

    if expect is not None and expect != report.subject:
        from trajledger.verify.expect import other_subject

        if other := other_subject(report, expect, named):  # "": a release of the one expected
            raise VerificationError(f"{subject}: {other}")
    n, failed = report.count()
    if failed:
        raise VerificationError(f"{subject}: {failed} of {n} checks failed\n" + "\n".join(
            line + next((m for start, m in (more or {}).items() if line.startswith(start)), "")
            for line in report.failures()))
    erased = report.erased()
    node = report.nodes.get(report.subject) if named else None
    ok(
        f"{subject}: " + (f"{node.label.replace(short(node.id), node.id)}: " if node else "")
        + f"{n} checks passed"
        + (f" ({erased} erased: data deleted, digests verified)" if erased else "")
        + (f" ({omitted} data blob(s) not in the bundle: their bytes not checked)" if omitted
           else "")
        + (" (data: sizes only, not re-hashed)" if skip_data else "")
    )


COMMANDS = [policy, approve, revoke, erase, admit, train, rollout, verify]
