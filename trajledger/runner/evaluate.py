"""Evaluations: run a checkpoint on a holdout or regression suite, record a signed result.

Scope: ``trajledger eval CK --suite DATASET --key EVALUATOR [-- COMMAND]`` (docs/evaluations.md):

- before any data is read: the key holds the evaluator role; the checkpoint's whole lineage and
  the suite (a holdout or regression dataset: records, files re-hashed, ciphertexts of sealed
  batches re-hashed) verify under the policy;
- the suite's bytes are read once (`ledger.suites.read_suite`); sealed batches are opened with
  the evaluator's X25519 key after an ``unsealing`` record is logged;
- the suite's episodes are compared with the checkpoint's training data
  (`runner.suite_contamination`): refused as ``dataset create`` would refuse them, warned of
  as it would warn; what was checked goes into the evaluation's configuration;
- built in, for checkpoints of a built-in trainer on Gymnasium environments: each suite
  episode's seed is replayed with the checkpoint's policy in the environment its batch names;
  an episode passes when its return reaches ``pass_return`` (default: the environment spec's
  ``reward_threshold``);
- otherwise COMMAND runs as ``train -- COMMAND`` does (`runner.workdir.Workspace`,
  `runner.command.run_command`): ``$TRAJLEDGER_CHECKPOINT_DIR`` holds the checkpoint's files,
  ``$TRAJLEDGER_SUITE_DIR`` the suite (the data directory layout), and it writes
  ``$TRAJLEDGER_OUTPUT_DIR/results.json`` (`Results`: every suite episode once, passed or
  not, with optional metrics); a non-zero exit, a changed input or results that do not parse
  record nothing (exit 1);
- the evaluation is recorded: its files (``results.json`` and the rest of the output) as the
  artifact, the ``evaluation/v1`` predicate (one test per episode, computed success rate, the
  checkpoint, suite and evaluator version, how it ran), signed by the evaluator key.

Non-scope: deciding releases (``runner.release``), reading suites (``ledger.suites``).
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from trajledger.ledger.errors import LedgerError
from trajledger.verify import predicates
from trajledger.verify.digest import digest_bytes
from trajledger.verify.errors import FormatError, PolicyError, VerificationError
from trajledger.verify.other_predicates import Evaluation
from trajledger.verify.predicates import ArtifactRef, ResourceDescriptor
from trajledger.verify.times import now

if TYPE_CHECKING:
    import pyarrow as pa

    from trajledger.ledger.catalog import CatalogItem
    from trajledger.ledger.home import LedgerHome
    from trajledger.ledger.keys import Signer
    from trajledger.ledger.suites import SuiteBatch
    from trajledger.verify.lineage import Report
    from trajledger.verify.policy import TrustPolicy

    from .command import CommandResult
    from .settled import Settled

__all__ = [
    "BUILTIN_EVALUATOR",
    "RESULTS_FILE",
    "RESULTS_FORMAT",
    "EpisodeResult",
    "EvalOutcome",
    "Results",
    "evaluate",
]

RESULTS_FORMAT: Final = "trajledger.eval-results/1"
RESULTS_FILE: Final = "results.json"
BUILTIN_EVALUATOR: Final = "https://trajledger.dev/evaluator/gymnasium-replay/v1"
MAX_RESULTS: Final = 64 << 20
"""Largest results.json read (bytes)."""
COMPUTED: Final = frozenset({"episodes", "passed", "failed", "success_rate"})
"""Metrics trajledger computes from the episodes; a results file may not state them."""
_METRIC = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class EpisodeResult:
    """One suite episode's outcome: its batch, id, pass or fail, and metrics."""

    batch: str
    episode_id: str
    passed: bool
    metrics: Mapping[str, float] = field(default_factory=dict)

    @property
    def test(self) -> str:
        """The evaluation's test name: ``<batch digest>/<episode id>``."""
        return f"{self.batch}/{self.episode_id}"


def _metrics(obj: object, what: str) -> dict[str, float]:
    if not isinstance(obj, dict):
        raise FormatError(f"{what}: must be an object of metric names to numbers")
    for k, v in obj.items():
        if not _METRIC.fullmatch(k):
            raise FormatError(f"{what}: {k!r} is not a metric name ([A-Za-z_][A-Za-z0-9_.-]*)")
        if type(v) not in (int, float) or not math.isfinite(v):
            raise FormatError(f"{what}.{k}: {v!r} is not a finite number")
    return {k: float(v) for k, v in obj.items()}


@dataclass(frozen=True)
class Results:
    """``results.json`` (``trajledger.eval-results/1``)::

        {"format": "trajledger.eval-results/1",
         "episodes": [{"batch": "sha256:...", "episode_id": "...", "passed": true,
                       "metrics": {"return": 21.0}}, ...],
         "metrics": {"mean_return": 21.0}}

    Every episode of the suite exactly once (``metrics`` optional, finite numbers); nothing
    else. The counts and the success rate are computed from the episodes (`COMPUTED`).
    """

    episodes: tuple[EpisodeResult, ...]
    metrics: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_bytes(cls, data: bytes, suite: Mapping[str, Sequence[str]], what: str) -> Results:
        """Parse and check against the suite (batch digest -> its episode ids).

        Raises:
            FormatError: not this format, a field unknown or malformed, an episode missing,
                repeated or not in the suite, a computed metric stated.
        """
        from trajledger.verify.strict_json import load_object

        if len(data) > MAX_RESULTS:
            raise FormatError(f"{what}: {len(data)} bytes, more than {MAX_RESULTS}")
        doc = load_object(data, what)
        unknown = sorted(set(doc) - {"format", "episodes", "metrics"})
        if unknown or doc.get("format") != RESULTS_FORMAT:
            raise FormatError(f"{what}: want format {RESULTS_FORMAT!r}, episodes and metrics "
                              f"(got format {doc.get('format')!r}; unknown: {unknown or 'none'})")
        metrics = _metrics(doc.get("metrics", {}), f"{what}: metrics")
        if COMPUTED & set(metrics):
            raise FormatError(f"{what}: metrics {sorted(COMPUTED & set(metrics))} are computed "
                              "from the episodes by trajledger; leave them out")
        items = doc.get("episodes")
        if not isinstance(items, list):
            raise FormatError(f"{what}: episodes must be a list")
        wanted = {(b, e) for b, eps in suite.items() for e in eps}
        out: list[EpisodeResult] = []
        seen: set[tuple[str, str]] = set()
        for i, item in enumerate(items):
            here = f"{what}: episodes[{i}]"
            if not isinstance(item, dict) or set(item) - {"batch", "episode_id", "passed",
                                                           "metrics"}:
                raise FormatError(f"{here}: want an object of batch, episode_id, passed, metrics")
            key = (item.get("batch"), item.get("episode_id"))
            if not isinstance(item.get("passed"), bool):
                raise FormatError(f"{here}: passed must be true or false")
            if key not in wanted:
                raise FormatError(f"{here}: batch {str(key[0])[:19]!r} episode {key[1]!r} is "
                                  "not an episode of the suite")
            if key in seen:
                raise FormatError(f"{here}: episode {key[1]!r} of batch {key[0][:19]}… again")
            seen.add(key)
            out.append(EpisodeResult(key[0], key[1], item["passed"],
                                     _metrics(item.get("metrics", {}), f"{here}: metrics")))
        missing = sorted(wanted - seen)
        if missing:
            raise FormatError(f"{what}: {len(missing)} episode(s) of the suite have no result "
                              f"(first: batch {missing[0][0][:19]}… episode {missing[0][1]!r})")
        return cls(tuple(out), metrics)

    def to_bytes(self) -> bytes:
        """The JSON form (sorted keys)."""
        doc = {"format": RESULTS_FORMAT, "metrics": dict(self.metrics), "episodes": [
            {"batch": r.batch, "episode_id": r.episode_id, "passed": r.passed,
             "metrics": dict(r.metrics)} for r in self.episodes]}
        return (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode()

    def predicate_metrics(self) -> dict[str, float | int]:
        """What the evaluation records: counts, success rate, and the stated metrics."""
        passed = sum(r.passed for r in self.episodes)
        return {"episodes": len(self.episodes), "passed": passed,
                "failed": len(self.episodes) - passed,
                "success_rate": passed / len(self.episodes), **self.metrics}


@dataclass(frozen=True)
class EvalOutcome:
    """A recorded evaluation.

    Attributes:
        digest: the evaluation's identity (its manifest's digest).
        index: its log index.
        evaluation: its predicate.
        report: the verified graph of the checkpoint and the suite, before the run.
        run: how COMMAND ended (None for the built-in evaluator).
        unsealing: the log index of the unsealing record, for a sealed suite.
    """

    digest: str
    index: int
    evaluation: Evaluation
    report: Report
    run: CommandResult | None = None
    unsealing: int | None = None


def evaluate(
    ledger: LedgerHome,
    checkpoint_ref: str,
    suite_ref: str,
    signer: Signer,
    policy: TrustPolicy,
    *,
    command: Sequence[str] | None = None,
    evaluator: str | None = None,
    pass_return: float | None = None,
    max_steps: int | None = None,
    output: Path | None = None,
    keep_logs: bool = False,
    unseal_key: str | None = None,
    cwd: Path | None = None,
    allow_env_modules: Sequence[str] = (),
) -> EvalOutcome:
    """Evaluate a checkpoint on a suite and record the signed evaluation (see the module doc).

    Steps:
        1. The signer holds the evaluator role; the checkpoint, the suite (and the evaluator
           version) resolve; ``output`` is new or empty.
        2. Verify the checkpoint's lineage and the suite (a holdout or regression split);
           any failure refuses, nothing read.
        3. Read the suite (sealed batches: the unsealing logged, then opened with the X25519
           key ``unseal_key``, default the signing key's name); compare its episodes with
           the checkpoint's training data (`suite_contamination.check_suite`).
        4. Run: the built-in Gymnasium replay, or COMMAND in a `Workspace` (exit 0, inputs
           unchanged, ``results.json`` valid).
        5. Record ``results.json`` (and COMMAND's other outputs, its logs with
           ``keep_logs``) with the evaluation predicate, signed by the evaluator key. For a
           sealed suite, ``keep_logs`` is refused before anything is unsealed, and other
           outputs than ``results.json`` and a lock of COMMAND's environment refuse the
           record: they would store what COMMAND saw of the suite in the clear.

    Raises:
        PolicyError: the key is not an evaluator's; a sealed suite and no key it is sealed to,
            or ``keep_logs``.
        VerificationError: the checkpoint or suite does not verify; the suite duplicates the
            checkpoint's training data as its policy refuses; COMMAND failed, changed
            its inputs or wrote no valid results (`CommandFailedError`, `DataDirChangedError`).
        FormatError: results.json is malformed; no pass threshold for the built-in evaluator.
        RefError: a reference names nothing.
        CommandInterrupted: Ctrl-C, SIGTERM or SIGHUP (exit 130, 143, 129), nothing recorded.
    """
    from trajledger.ledger.catalog import Catalog, RefError, named_report, qualified_ref
    from trajledger.ledger.suites import Unsealer, read_suite, sealed_batches

    from .workdir import check_output_dir

    # (1)
    if not policy.holds("evaluator", signer.keyid):
        from trajledger.ledger.policy_state import not_in_role

        head = not_in_role(signer.name, signer.keyid, policy, "evaluator")
        held = policy.role("evaluator").keyids
        fix = (f"sign with an evaluator key ({len(held)} in the policy)" + (
            "" if any(r.keyid == signer.keyid for r in policy.revoked_keys)  # not to be added
            else ", or record a policy naming this key in "
            "[roles.evaluator]") if held else "record a policy with [roles.evaluator] naming "
            "it (format = 2, a higher serial: 'trajledger policy init --evaluator "
            f"{signer.name} --out FILE' writes one of this ledger's keys; docs/evaluations.md "
            "shows one)")
        raise PolicyError(f"{head} (format {policy.format}); evaluations are signed by "
                          f"roles.evaluator keys: {fix}")
    catalog = Catalog(ledger)
    ck = catalog.resolve(checkpoint_ref, {"checkpoint"})
    try:
        suite = catalog.resolve(suite_ref, {"dataset"})
    except RefError as e:  # a refused `dataset create` leaves no record to name (evalc46)
        from .suite_contamination import unlisted_batches

        loose = unlisted_batches(ledger) if e.unknown and "@" in suite_ref else []
        if not loose:
            raise
        raise RefError(f"{e}; {len(loose)} recorded batch(es) are in no dataset (first: "
                       f"{loose[0][:19]}…): a 'dataset create' of them that was refused (a "
                       "holdout of a train set's episodes, say) recorded nothing: run it again "
                       "to read why", unknown=True) from e
    ev_item = catalog.resolve(evaluator, {"evaluator"}) if evaluator else None
    if output is not None:
        check_output_dir(output)
    if command is not None and not command:
        raise LedgerError("no command given after '--' (trajledger eval ... -- COMMAND)")
    # (2)
    verifier, report = _judge(ledger, policy, ck, suite, ev_item,
                              f"evaluation of {_on(ledger, ck, suite)}")
    sealed = sealed_batches(verifier, suite.digest)
    if not report.ok:
        failures = named_report(ledger, report).failures()  # (after a clash: out50)
        raise VerificationError(f"evaluation of {_on(ledger, ck, suite)}: refused, "
                                f"{len(failures)} problem(s); nothing was read\n"
                                + "\n".join(failures))
    _not_the_release_suite(verifier, policy, suite, qualified_ref(ledger, suite))
    if sealed and keep_logs:
        raise PolicyError(
            f"suite {suite.ref}: sealed, and --keep-logs would store the command's output in "
            "the clear, readable by everyone who reads the ledger; nothing was unsealed (drop "
            "--keep-logs, and keep its output on this machine if you need it)"
        )
    if command is None:  # before anything is unsealed: the environments the replay would make
        _check_env_modules(ledger, verifier, suite.digest, allow_env_modules)
        _refuse_training_seeds(verifier, ck, suite)
    # (3)
    unsealer = Unsealer.load(ledger, signer, unseal_key) if sealed else None
    purpose = f"evaluation of {ck.ref} ({ck.digest[:19]}…)"
    batches = read_suite(ledger, verifier, suite.digest, unsealer=unsealer, purpose=purpose)
    # Its own unsealing record (another evaluator's may be logged since: rev40 finding 3).
    unsealing = ((unsealer.logged[-1].index, unsealer.logged[-1].envelope_digest)
                 if unsealer is not None and unsealer.logged else None)
    # Not the checkpoint's training data (evalc46): what `dataset create` would refuse.
    from .suite_contamination import check_suite

    checked = check_suite(ledger, verifier, policy, ck, suite,
                          f"{_split(verifier, suite.digest)} {suite.name}@{suite.version}",
                          batches, unsealing[0] if unsealing is not None else None)
    from trajledger.verify.releases import other_environments

    if (moved := other_environments(verifier, ck.digest, ck.ref, suite.digest)) is not None:
        # (out56: said once here, when every refusal before the run is past, and in every
        # release that uses the evaluation; not refused: a suite of the next environment
        # version is how a checkpoint is tried there)
        sys.stderr.write(f"WARNING: evaluation of {_on(ledger, ck, suite)}: {moved}; it is "
                         "recorded, and every release that uses it says so\n")
    # (4) (5)
    ck_ref = ArtifactRef(ck.name, ck.version or ck.digest[7:19], ck.digest)
    described = {"ck": ck_ref, "suite": ArtifactRef(suite.name, suite.version, suite.digest),
                 "evaluator": ArtifactRef(ev_item.name, ev_item.version, ev_item.digest)
                 if ev_item else None, "unsealing": unsealing, "checked": checked.descriptor(),
                 "still": lambda: _check_still_valid(ledger, policy, ck, suite, ev_item)}
    episodes = {b.digest: _episode_ids(b) for b in batches}
    if command is None:
        from trajledger.ledger.progress import no_progress

        # The bar first: importing Gymnasium and loading the policy take their time too.
        total = sum(len(ids) for ids in episodes.values())
        with (ledger.progress or no_progress)(total, "evaluating episodes") as advance:
            return _builtin(ledger, verifier, batches, episodes, signer, described, report,
                            pass_return=pass_return, max_steps=max_steps, output=output,
                            advance=advance)
    return _by_command(ledger, batches, episodes, signer, described, report, list(command),
                       output=output, keep_logs=keep_logs, cwd=cwd)


def _check_env_modules(
    ledger: LedgerHome, verifier: Any, suite: str, allowed: Sequence[str]
) -> None:
    """`check_env_module` for the environment of each batch of ``suite``, from the verified
    records alone (a sealed batch's included: nothing is opened), the records `read_suite`
    then reads the batches of."""
    from trajledger.verify.lineage import Record

    from .train import check_env_module

    rec = verifier.identity_record(suite, "dataset")
    if not isinstance(rec, Record) or not isinstance(rec.predicate, predicates.Dataset):
        return
    for digest in rec.predicate.batches:
        batch = verifier.identity_record(digest, "rollout-batch")
        if not isinstance(batch, Record) or not isinstance(batch.predicate,
                                                           predicates.RolloutBatch):
            continue
        ref = batch.predicate.environment
        env = verifier.identity_record(ref.digest, "environment")
        if (isinstance(env, Record) and isinstance(env.predicate, predicates.Environment)
                and env.predicate.gymnasium_id):
            check_env_module(ledger, env.index, env.predicate.gymnasium_id, allowed,
                             f"environment {ref.name}@{ref.version}")


def _seed(value: object) -> str:
    """A seed as the built-in evaluator replays it (``int``: ``"07"``, ``"+7"`` and ``7.0`` are
    7), else as written: signed metadata and episodes compared in one form (rev33 finding 1)."""
    try:
        return str(int(value))  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return str(value)


def _refuse_training_seeds(verifier: Any, ck: CatalogItem, suite: CatalogItem) -> None:
    """The built-in evaluator replays each suite episode's seed in its batch's environment: a
    seed that also started an episode the checkpoint (or a base checkpoint) was trained on, in
    that environment, replays a training episode's starting state, which proves little. Such a
    suite is refused before anything is read, from the batches' signed metadata (``seeds``),
    sealed ones included (trn35 finding 5).

    Raises:
        VerificationError: a suite seed is a training seed of the same environment.
    """
    from trajledger.verify.lineage import Record

    def batches(dataset: str) -> tuple[str, tuple[str, ...]]:
        rec = verifier.identity_record(dataset, "dataset")
        return ((f"{rec.predicate.name}@{rec.predicate.version}", rec.predicate.batches)
                if isinstance(rec, Record) and isinstance(rec.predicate, predicates.Dataset)
                else ("", ()))

    def seeds(batch: str) -> tuple[str, tuple[str, ...]]:
        rec = verifier.identity_record(batch, "rollout-batch")
        if not isinstance(rec, Record) or not isinstance(rec.predicate, predicates.RolloutBatch):
            return "", ()
        return rec.predicate.environment.digest, rec.predicate.seeds

    held: dict[str, set[str]] = {}
    for b in batches(suite.digest)[1]:
        env, found = seeds(b)
        held.setdefault(env, set()).update(map(_seed, found))
    todo, seen = [ck.digest], set()
    while todo and held:
        if (digest := todo.pop()) in seen:
            continue
        seen.add(digest)
        for d in verifier.dependencies(digest):
            todo += [d.digest] if d.role == "base-checkpoint" else []
            name, members = batches(d.digest) if d.role == "dataset" else ("", ())
            shared: set[str] = set()
            for b in members:  # (only the suite's environments' seeds are compared)
                env, found = seeds(b)
                shared |= held[env].intersection(map(_seed, found)) if env in held else set()
            if shared:
                raise VerificationError(
                    f"evaluation of {ck.ref} on {suite.ref}: the built-in evaluator replays the "
                    f"suite's seeds, and {len(shared)} of them (first: "
                    f"{min(shared, key=lambda x: int(x) if x.lstrip('-').isdigit() else 0)}) also "
                    f"started episodes of {name}, which "
                    f"{ck.ref if digest == ck.digest else 'a base checkpoint of ' + ck.ref} was "
                    "trained on, in the same environment: it would be evaluated on its training "
                    "episodes' starting states; nothing was read (record a suite of other "
                    "seeds, or evaluate with '-- COMMAND')")


def _not_the_release_suite(verifier: Any, policy: TrustPolicy, suite: CatalogItem,
                           shown: str) -> None:
    """Say, before the run, when ``suite`` is not the suite a ``[[release.require]]`` of its
    ``NAME@VERSION`` counts (`verify.releases.release_suite`, as `release` and every verifier
    judge it: unpinned, the release's own log's dataset of the name; rev26): a bare name
    resolves to another log's dataset when this log has none of its own, and an evaluation on
    it never counts for a release here (left27). Said (``NOTE:``), not refused: an evaluation
    on another log's suite is still a signed fact (a vendor's benchmark). ``shown``: the
    suite's name as the user finds it (`catalog.qualified_ref`: after a clash, out50)."""
    from trajledger.ledger.user_state import notice
    from trajledger.verify.releases import release_suite

    named, cp = f"{suite.name}@{suite.version}", verifier.checkpoint
    for req in policy.release.require if policy.release is not None and cp is not None else ():
        if req.suite != named:
            continue
        found, problem = release_suite(verifier, req, cp.size)
        if found != suite.digest:
            notice(f"suite {shown} ({suite.digest}): an evaluation on it does not count for "
                 f"policy {policy.name!r}'s release rule {req.metric} on {named}: "
                 + (problem or f"the release's suite is {found}, of this log's own"))
            return


def _on(ledger: LedgerHome, ck: CatalogItem, suite: CatalogItem) -> str:
    """``CHECKPOINT on SUITE``, each by the name that finds it (`catalog.qualified_ref`: an
    imported one after a clash by its origin-qualified name, out50)."""
    from trajledger.ledger.catalog import qualified_ref

    return f"{qualified_ref(ledger, ck)} on {qualified_ref(ledger, suite)}"


def _judge(
    ledger: LedgerHome, policy: TrustPolicy, ck: CatalogItem, suite: CatalogItem,
    ev_item: CatalogItem | None, name: str, *, data: str = "hash",
) -> tuple[Any, Report]:
    """Verify the checkpoint's lineage, the suite (a holdout or regression split) and the
    evaluator version under ``policy``; returns the verifier and the decision's report."""
    from dataclasses import replace

    from trajledger.ledger.catalog import qualified_ref
    from trajledger.verify.lineage import Edge, Node

    from .verification import decide, ledger_verifier

    verifier = ledger_verifier(ledger, policy, data=data)
    decision = Node(f"evaluation:{ck.digest}", "evaluation-run", name=name)

    def walk() -> list[Edge]:
        links = [Edge(decision.id, ck.digest, "checkpoint"),
                 Edge(decision.id, suite.digest, "suite")]
        verifier.artifact(ck.digest, "checkpoint")
        suite_node = verifier.artifact(suite.digest, "dataset")
        if (named := qualified_ref(ledger, suite)) != suite.ref:  # (out50)
            suite_node = replace(suite_node, name=named.removesuffix(f"@{suite.version}"))
        if ev_item is not None:
            verifier.artifact(ev_item.digest, "evaluator")
            links.append(Edge(decision.id, ev_item.digest, "evaluator"))
        split = _split(verifier, suite.digest)
        if split not in predicates.HELD_OUT:
            decision.fail("suite", f"{suite_node.label} is a {split!r} split; evaluate on a "
                          "holdout or regression dataset (training data proves nothing)")
        _refuse_erased(verifier, decision, suite.digest, suite_node.label)
        from trajledger.verify.releases import trained_on_suite

        shared = trained_on_suite(verifier, ck.digest,
                                  verifier.identity_record(suite.digest, "dataset"))
        if shared is not None:
            decision.fail("suite", f"{suite_node.label}: {shared}")
        return links

    return verifier, decide(verifier, decision, ck.digest, walk)


def _check_still_valid(
    ledger: LedgerHome, policy: TrustPolicy, ck: CatalogItem, suite: CatalogItem,
    ev_item: CatalogItem | None,
) -> None:
    """Judge again, before the evaluation's files are stored and under the log's lock just
    before its append, what was judged before the run (`_judge`, sizes only: the run had the
    bytes read then), under the policy in force now: a checkpoint or suite revoked or erased,
    or a successor policy, while the run ran would make the evaluation fail verification
    from its first day (rev13 finding 4).

    Raises:
        VerificationError: the checkpoint, the suite or the evaluator no longer verifies.
    """
    from trajledger.ledger.catalog import named_report

    from .train import policy_in_force

    on = _on(ledger, ck, suite)
    _verifier, report = _judge(ledger, policy_in_force(ledger, policy), ck, suite, ev_item,
                               f"recording the evaluation of {on}", data="size")
    if not report.ok:
        failures = named_report(ledger, report).failures()
        raise VerificationError(
            f"evaluation of {on}: refused when it was to be recorded (the "
            f"rules changed during the run), {len(failures)} problem(s); nothing was "
            "recorded\n" + "\n".join(failures))


def _refuse_erased(verifier: Any, decision: Any, suite: str, label: str) -> None:
    """An erased suite, or one with an erased batch (a verified erasure: consent withdrawn
    here, or a vendor's taken in by an import), has nothing to evaluate on: refuse it, as
    the gate refuses erased data (`admission.refuse_erased`), rather than fail reading the
    deleted bytes ("not in the store", exit 3; agree26)."""
    from trajledger.verify.lineage import Record
    from trajledger.verify.predicates import Erasure

    rec = verifier.identity_record(suite, "dataset")
    batches = rec.predicate.batches if isinstance(rec, Record) and isinstance(
        rec.predicate, predicates.Dataset) else []
    for digest in (suite, *batches):
        for i in verifier.records(digest, "erasure"):
            r = verifier.record(i)
            if isinstance(r, Record) and isinstance(r.predicate, Erasure):
                what = label if digest == suite else f"{label}: batch {digest[:19]}…"
                decision.fail("suite", f"{what} is erased: {r.predicate.reason} (log index "
                              f"{r.index}): nothing of it to evaluate on")
                break


def _split(verifier: Any, suite: str) -> str:
    from trajledger.verify.lineage import Record

    rec = verifier.identity_record(suite, "dataset")
    if isinstance(rec, Record) and isinstance(rec.predicate, predicates.Dataset):
        return rec.predicate.split
    return "unknown"


def _episode_ids(batch: SuiteBatch) -> list[str]:
    from trajledger.ledger.rollouts.parquet_read import read_parquet

    table = read_parquet(batch.files["episodes.parquet"], columns=["episode_id"])
    return [str(e) for e in table.column("episode_id").to_pylist()]


def _record(
    ledger: LedgerHome,
    signer: Signer,
    described: Mapping[str, Any],
    results: Results,
    files: Mapping[str, Path],
    configuration: Sequence[ResourceDescriptor],
    report: Report,
    workdir: Path,
    run: CommandResult | None = None,
    settled: Settled | None = None,
) -> EvalOutcome:
    """Record the evaluation's files, with ``trajledger-run/evaluation.json`` naming the
    checkpoint, suite, evaluator, time and run (so that each evaluation is an artifact of its
    own, even with the results of another), and its predicate, signed by the evaluator key.
    ``settled``: COMMAND's outputs as listed and parsed (`runner.settled`)."""
    from trajledger.ledger.record import Recorded, record_files
    from trajledger.ledger.same_second import recorded_anew

    from .train import LOGS_DIR

    unsealing = described["unsealing"]
    config = list(configuration)
    if unsealing is not None:
        config.append(ResourceDescriptor(
            name="unsealing", digest={"sha256": unsealing[1][7:]},
            annotations={"role": "unsealing", "logIndex": unsealing[0]},
        ))
    config.append(described["checked"])
    passed = tuple(r.test for r in results.episodes if r.passed)
    failed = tuple(r.test for r in results.episodes if not r.passed)
    ck, suite, evaluator = described["ck"], described["suite"], described["evaluator"]
    run_file = workdir / "evaluation.json"
    files = {**files, f"{LOGS_DIR}/evaluation.json": run_file}
    still: Callable[[], None] = described["still"]
    bodies: list[Evaluation] = []

    def record(when: str) -> Recorded:
        run_file.write_text(json.dumps({
            "format": "trajledger.evaluation/1", "checkpoint": ck.digest, "suite": suite.digest,
            "evaluator": evaluator.digest if evaluator else None, "evaluatedAt": when,
            "run": list(run.argv) if run is not None else BUILTIN_EVALUATOR,
        }, sort_keys=True, indent=1) + "\n")
        still()  # (before anything is stored; again under the log's lock)
        bodies.append(Evaluation(
            "FAILED" if failed else "PASSED", ck, suite, passed, failed,
            results.predicate_metrics(), when, evaluator, tuple(config),
        ))
        return record_files(ledger, files, signer, predicates.EVALUATION,
                            bodies[-1].written(f"evaluation of {ck.name}@{ck.version}"),
                            name=f"evaluation of {ck.name}@{ck.version} on "
                            f"{suite.name}@{suite.version}",
                            check=lambda _size: _still(still, settled),
                            on_file=settled.stored if settled is not None else None,
                            on_open=settled.opened if settled is not None else None)

    # The same artifact as an earlier run in the same second (its time is to the second) is
    # not logged again, and a run between the two would stay the latest (suite42 finding 5):
    # each run is a record of its own, this one at the next second.
    rec = recorded_anew(record, now)
    body = bodies[-1]
    return EvalOutcome(rec.digest, rec.index, body, report, run,
                       unsealing[0] if unsealing is not None else None)


def _still(still: Callable[[], None], settled: Settled | None) -> None:
    """Under the log's lock: the rules again, and the outputs unchanged."""
    still()
    if settled is not None:
        settled.check()


def _builtin(
    ledger: LedgerHome,
    verifier: Any,
    batches: Sequence[SuiteBatch],
    episodes: Mapping[str, Sequence[str]],
    signer: Signer,
    described: Mapping[str, Any],
    report: Report,
    *,
    pass_return: float | None,
    max_steps: int | None,
    output: Path | None,
    advance: Callable[[int], None],
) -> EvalOutcome:
    """Replay every suite episode's seed with the checkpoint's policy in its environment
    (``advance(1)`` after each)."""
    import gymnasium as gym

    from trajledger.ledger.fs import temp_dir

    from .train import checkpoint_files
    from .trainers import load_policy

    ck = described["ck"]
    _item, ck_files = checkpoint_files(ledger, ck.digest)
    try:
        policy = load_policy(ck_files)
    except FormatError as e:
        raise FormatError(f"checkpoint {ck.name}@{ck.version}: the built-in evaluator plays "
                          f"policies of the built-in trainers only ({e}); evaluate it with "
                          "'-- COMMAND'") from e
    rows: list[EpisodeResult] = []
    thresholds: dict[str, float] = {}
    for b in batches:
        rows.extend(_replay(verifier, b, policy, thresholds, pass_return=pass_return,
                            max_steps=max_steps, ck=ck, on_episode=lambda: advance(1)))
    returns = [r.metrics["return"] for r in rows]
    results = Results(tuple(rows), {
        "mean_return": sum(returns) / len(returns),
        "mean_length": sum(r.metrics["length"] for r in rows) / len(rows),
    })
    # One parser for every results file: what the built-in evaluator writes must read back.
    data = results.to_bytes()
    Results.from_bytes(data, episodes, RESULTS_FILE)
    config = [ResourceDescriptor(
        name="evaluator", uri=BUILTIN_EVALUATOR,
        annotations={"role": "evaluator-code", "passReturn": thresholds,
                     "maxSteps": max_steps, "gymnasium": gym.__version__},
    )]
    with temp_dir(ledger.scratch) as tmp:
        where = output if output is not None else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        (where / RESULTS_FILE).write_bytes(data)
        return _record(ledger, signer, described, results, {RESULTS_FILE: where / RESULTS_FILE},
                       config, report, Path(tmp))


def _spec(gym_id: str) -> Any:
    """``gymnasium.spec`` of a Gymnasium id, ``MODULE:ID`` too (out51: ``spec`` takes no
    module part, ``make`` does): the module is imported first, as ``make`` would import it
    next (`_check_env_modules` has already allowed it: the part before the first colon, as
    here; the last imported ``allowed:x`` of ``allowed:x:ID``, another module: rev49 finding
    5)."""
    import importlib

    import gymnasium as gym

    from .rollouts import RolloutError

    module, colon, name = gym_id.partition(":")
    try:
        if colon:
            importlib.import_module(module)
        return gym.spec(name if colon else gym_id)
    except (gym.error.Error, ImportError) as e:
        raise RolloutError(f"environment {gym_id!r} cannot be made: {e}"
                           + (" (install the module, or run where Python finds it: "
                              "PYTHONPATH)" if isinstance(e, ImportError) else "")) from e


def _replay(
    verifier: Any,
    b: SuiteBatch,
    policy: Any,
    thresholds: dict[str, float],
    *,
    pass_return: float | None,
    max_steps: int | None,
    ck: ArtifactRef,
    on_episode: Callable[[], None],
) -> list[EpisodeResult]:
    """Replay one suite batch's episodes (their seeds, in the environment it names)."""
    from trajledger.ledger.rollouts.parquet_read import read_parquet
    from trajledger.verify.lineage import Record

    from .rollouts import run_policy

    out: list[EpisodeResult] = []
    env = verifier.identity_record(b.predicate.environment.digest, "environment")
    gym_id = (env.predicate.gymnasium_id if isinstance(env, Record)
              and isinstance(env.predicate, predicates.Environment) else None)
    if not gym_id:
        raise FormatError(f"batch {b.digest[:19]}… of the suite: its environment "
                          f"{b.predicate.environment.name}@{b.predicate.environment.version} "
                          "names no Gymnasium id; evaluate with '-- COMMAND'")
    table = read_parquet(b.files["episodes.parquet"], columns=["episode_id", "seed"])
    ids, seeds = table.column("episode_id").to_pylist(), table.column("seed").to_pylist()
    if any(s is None for s in seeds):
        first = ids[seeds.index(None)]
        raise FormatError(f"episode {first!r} of batch {b.digest[:19]}… has no seed: the "
                          "built-in evaluator replays seeds; evaluate with '-- COMMAND'")
    # The seeds replayed are those `_refuse_training_seeds` compared: the signed metadata's.
    listed = set(map(_seed, b.predicate.seeds))
    if (unlisted := next((s for s in seeds if _seed(s) not in listed), None)) is not None:
        raise VerificationError(
            f"batch {b.digest[:19]}… of the suite: its episodes.parquet replays seed "
            f"{unlisted}, which its signed metadata (seeds) does not list, and only those are "
            "checked against the checkpoint's training seeds; nothing was recorded (ask its "
            "producer for a batch whose metadata lists its seeds, or evaluate with '-- COMMAND')")
    if gym_id not in thresholds:
        found = pass_return if pass_return is not None else _spec(gym_id).reward_threshold
        if found is None:
            raise FormatError(f"{gym_id} has no reward_threshold in its spec: give "
                              "--pass-return R (an episode passes with a return of R or more)")
        thresholds[gym_id] = float(found)
    played = run_policy(policy, gym_id, len(seeds), 0, seeds=[int(s) for s in seeds],
                        max_steps=max_steps, policy_version=ck.digest, on_episode=on_episode)
    lengths = played.episodes.column("num_steps").to_pylist()
    for eid, ret, n in zip(ids, played.returns, lengths, strict=True):
        out.append(EpisodeResult(b.digest, str(eid), ret >= thresholds[gym_id],
                                  {"return": float(ret), "length": float(n)}))
    return out


def _by_command(
    ledger: LedgerHome,
    batches: Sequence[SuiteBatch],
    episodes: Mapping[str, Sequence[str]],
    signer: Signer,
    described: Mapping[str, Any],
    report: Report,
    argv: list[str],
    *,
    output: Path | None,
    keep_logs: bool,
    cwd: Path | None,
) -> EvalOutcome:
    """Run COMMAND on the checkpoint and suite directories; its results.json is the result."""
    from trajledger.ledger.rollouts.parquet_read import read_parquet

    from .admission import AdmittedBatch
    from .buildinfo import COMMAND_LOCK_NAMES, environment_lock, git_source
    from .command import run_command
    from .settled import Settled
    from .train import (
        LOGS_DIR,
        CommandFailedError,
        environment_dependencies,
        exit_message,
        kept_digests,
        kept_logs,
        run_byproducts,
        write_checkpoint_dir,
    )
    from .workdir import Workspace, write_data_dir

    ck, suite = described["ck"], described["suite"]
    def read(b: SuiteBatch, path: str) -> pa.Table:
        return read_parquet(b.files[path], name=f"{path} of suite batch {b.digest[:19]}…")

    admitted = [AdmittedBatch(b.digest, b.index, read(b, "steps.parquet"),
                              read(b, "episodes.parquet"), b.predicate, b.files) for b in batches]
    listing = {"name": suite.name, "version": suite.version, "digest": suite.digest,
               "split": "suite"}
    with Workspace(ledger.scratch, ledger.store, output=output) as ws:
        ws.add("TRAJLEDGER_CHECKPOINT_DIR",
               lambda d: write_checkpoint_dir(ledger, ck.digest, d), "checkpoint")
        ws.add("TRAJLEDGER_SUITE_DIR",
               lambda d: write_data_dir(d, ledger.store, listing, admitted), "suite")
        workdir = cwd or Path.cwd()
        source = git_source(workdir)
        lock = environment_lock()
        run = run_command(argv, env=ws.environment(os.environ), cwd=workdir,
                          keep_logs=ws.logs if keep_logs else None)
        if run.returncode != 0:
            raise CommandFailedError(exit_message(argv, run.returncode) + ws.changed(),
                                     run.returncode)
        ws.check()
        files = ws.outputs()
        clash = sorted(p for p in files if p.split("/")[0] == LOGS_DIR)
        if clash:
            raise CommandFailedError(f"the command wrote {clash[0]} in its output directory, "
                                     f"where trajledger puts its own ({LOGS_DIR}/); nothing "
                                     "was recorded", 0)
        # A sealed suite's evaluation stores results.json only (and a lock of the command's
        # environment): anything else the command wrote may hold the suite, in the clear.
        extra = sorted(p for p in files
                       if p != RESULTS_FILE and not COMMAND_LOCK_NAMES.fullmatch(p))
        if described["unsealing"] is not None and extra:
            raise CommandFailedError(
                f"suite {suite.name}@{suite.version}: sealed, and the command wrote "
                f"{', '.join(extra[:5])}{' and more' if len(extra) > 5 else ''} besides "
                f"{RESULTS_FILE}: {'they' if len(extra) > 1 else 'it'} would be stored in the "
                "clear with the evaluation, readable by everyone who reads the ledger; nothing "
                f"was recorded (write only {RESULTS_FILE} to $TRAJLEDGER_OUTPUT_DIR, and keep "
                "anything else outside the ledger)", 0,
            )
        if RESULTS_FILE not in files:
            raise CommandFailedError(
                f"command {shlex.join(argv)!r} exited 0 but wrote no {RESULTS_FILE} in "
                f"$TRAJLEDGER_OUTPUT_DIR ({ws.output}); nothing was recorded (docs/"
                "evaluations.md gives its format)", 0,
            )
        # As listed, and results.json as parsed (what the predicate states): each file is
        # checked as it is stored, and all again under the log's lock (`runner.settled`).
        settled = Settled({**files, **(kept_logs(ws.logs) if keep_logs else {})},
                          kept_digests(run) if keep_logs else {}, ws.output)
        files = settled.files
        data = files[RESULTS_FILE].read_bytes()
        settled.known[RESULTS_FILE] = digest_bytes(data)
        try:
            results = Results.from_bytes(data, episodes, f"{RESULTS_FILE} of {shlex.join(argv)!r}")
        except FormatError as e:
            raise CommandFailedError(f"{e}; nothing was recorded", 0) from e
        config = [
            ResourceDescriptor(name="command",
                               content=base64.b64encode(shlex.join(argv).encode()).decode(),
                               annotations={"role": "command", "argv": argv}),
            *environment_dependencies(source, lock, files),
            *run_byproducts(run),
        ]
        return _record(ledger, signer, described, results, files, config, report, ws.root,
                       run, settled)
