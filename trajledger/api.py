"""The public Python API: ``from trajledger import Ledger``.

Scope: one class whose methods do what the commands do, each returning a typed result, so that a
training script, a notebook or a data pipeline uses trajledger without the command line::

    from trajledger import Ledger

    ledger = Ledger.open(".trajledger")               # or Ledger.init(path)
    env = ledger.register_environment("cartpole", "1", key="vendor", gym_id="CartPole-v1")
    batch = ledger.record_batch(table, env="cartpole@1", policy="random", key="vendor")
    ds = ledger.create_dataset("cartpole-train", "1", "train", [batch.digest], key="vendor")
    ledger.approve("cartpole-train@1", key="approver-a")
    report = ledger.verify(ckpt.digest)                # report.ok, report.nodes, report.edges

The top of the tower (docs/ARCHITECTURE.md): `Ledger` is the handle of the ledger package
(`trajledger.ledger.home.LedgerHome`: paths, settings, keys, store, log, this user's state) with
one method per command, each calling the service module that does the work (``ledger.artifacts``,
``ledger.status``, ``ledger.exchange``, ``runner.train``...) with the handle. Nothing below
imports this module. The command line is a thin layer over these methods (``trajledger
<command>``); docs/api.md shows each command beside its method. Everything a method needs is
loaded when it is called: importing ``trajledger`` stays light.

``key`` arguments take the name of a key in the ledger's key store, or a loaded `Signer`.
``policy`` arguments take a trust policy file (followed through the log's policy history), a
`TrustPolicy`, or None for the ledger's policy in force.
Non-scope: what the methods do (the modules they call, named in each docstring).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajledger.ledger.home import LedgerHome

if TYPE_CHECKING:
    from trajledger.ledger.artifacts import BatchResult, DatasetResult
    from trajledger.ledger.cards import ProducerCard
    from trajledger.ledger.exchange import ExportResult, ImportResult
    from trajledger.ledger.keys import Signer
    from trajledger.ledger.progress import ProgressFactory
    from trajledger.ledger.record import Recorded
    from trajledger.ledger.signing import AnySigner
    from trajledger.runner.admission import Admission
    from trajledger.runner.evaluate import EvalOutcome
    from trajledger.runner.release import ReleaseOutcome
    from trajledger.runner.train import TrainOutcome
    from trajledger.runner.training import Training
    from trajledger.verify.encryption_key import EncryptionKey
    from trajledger.verify.lineage import Report
    from trajledger.verify.policy import TrustPolicy

__all__ = ["Ledger"]


class Ledger(LedgerHome):
    """An open ledger: record, approve, train, verify, audit and exchange.

    Build with `Ledger.open(path)` or `Ledger.init(path)`. The handle's own attributes and
    methods (``root``, ``config``, ``keys``, ``store``, ``log``, ``trust_state``,
    ``rotate_log_key``, ``upgrade``...) are those of `trajledger.ledger.home.LedgerHome`; the
    recording, approval and exchange methods (`register_environment`, `record_batch`,
    `create_dataset`, `approve`, `revoke`, `erase`, `set_policy`, `export`, `import_bundle`,
    `policy`) call the ledger's services; the runner's (`admit`, `train`, `training`,
    `rollout`, `evaluate`, `release`, `verify`, `lineage`, `impact`) verify before they act.

    ``with Ledger.open(path) as ledger: ...`` closes it at the end (`close`).
    """

    def close(self) -> None:
        """Release what the handle holds open: the log's lock file and lookup cache, and this
        user's state of the log (an SQLite database). A handle used again opens them again.
        Without it they are released when the handle is garbage-collected (it refers to
        itself through its log, so only at a collection: a process opening ledgers in a loop
        holds a few descriptors each until then)."""
        log, state = self._log, self._state
        self._log = self._state = None
        if log is not None:
            log.close()
        if state is not None:
            state.close()

    def __repr__(self) -> str:
        """``Ledger.open('DIR')``: which ledger a notebook's variable holds (out40)."""
        return f"Ledger.open({str(self.root)!r})"

    def __reduce__(self) -> tuple[Any, tuple[Path]]:
        """Pickled (a ``multiprocessing`` pool's argument), a handle is its directory, opened
        again where it is loaded: its keys and log are not carried (out40; was ``TypeError:
        cannot pickle 'Ed25519PublicKey'``)."""
        return Ledger.open, (self.root.absolute(),)

    def __enter__(self) -> Ledger:
        """Use the ledger in a ``with`` block; it is closed at the end."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the ledger (`close`)."""
        self.close()

    # -- the ledger ------------------------------------------------------------------------------

    def record_batch(
        self,
        table_or_rows: Any,
        *,
        env: str,
        policy: str,
        key: str | None = None,
        signer: Signer | None = None,
        evaluator: str | None = None,
        episodes: Any = None,
        seal: bool = False,
        **options: Any,
    ) -> BatchResult:
        """Record rollouts as one signed, logged batch; see `ledger.artifacts.record_batch`.

        Args:
            table_or_rows: a step table (pyarrow), one mapping per step, or input file paths.
            env: the registered environment (``NAME@VERSION``, digest or unique prefix).
            policy: the policy / model version that acted.
            key: the name of a signing key in this ledger's key store; or give ``signer``.
            signer: a loaded signing key; or give ``key``.
            evaluator: the registered evaluator, if any.
            episodes: episode attributes (a table with a table or rows, a file with files).
            seal: store the batch encrypted to the evaluator ``encryption_keys`` of the
                policy in force (a sealed holdout or regression suite, `seal_recipients`).
            **options: ``name``, ``fmt``, ``consent``, ``licence``, ``retention``,
                ``generator``, ``on_chunk`` (see `ledger.artifacts.record_batch`).

        Returns:
            The recorded batch (``.digest``, ``.recorded.index``, ``.stats``).

        Raises:
            TypeError: neither or both of ``key`` and ``signer``.
            KeyError_: the key cannot be loaded.
            PolicyError, RolloutValidationError, FormatError: as `record_batch`.
        """
        from trajledger.ledger.artifacts import record_batch

        if (key is None) == (signer is None):
            raise TypeError("record_batch: give exactly one of key= (a key name) or signer=")
        if signer is None:
            assert key is not None
            signer = self.keys.signer(key)
        if seal:
            options["seal_to"] = self.seal_recipients()
        return record_batch(
            self,
            table_or_rows,
            env=env,
            policy=policy,
            signer=signer,
            evaluator=evaluator,
            episodes=episodes,
            **options,
        )

    def seal_recipients(
        self, policy: str | Path | TrustPolicy | None = None
    ) -> tuple[EncryptionKey, ...]:
        """The X25519 keys sealed suites are encrypted to: the evaluator role's
        ``encryption_keys`` of the policy (default: in force); see
        `trajledger.ledger.sealing.seal_recipients`."""
        from trajledger.ledger.sealing import seal_recipients

        return seal_recipients(self.policy(policy))

    # -- helpers -----------------------------------------------------------------------------

    def _policy_in_force(self) -> TrustPolicy | None:
        from trajledger.ledger.policy_state import current_policy

        found = current_policy(self)
        return None if found is None else found[1]

    def _failing_batches(self, refs: Sequence[str]) -> list[str]:
        """One line per problem of each batch of ``refs`` whose lineage fails under the policy
        in force (data sizes, not re-hashed, as `check_lineage`); a reference that names no
        batch is left to `create_dataset` to refuse."""
        from trajledger.ledger.catalog import Catalog, RefError
        from trajledger.runner.verification import verify_ref

        trust = self._policy_in_force()
        if trust is None:
            return []
        catalog, out = Catalog(self), []
        for ref in dict.fromkeys(refs):
            try:
                digest = catalog.resolve(ref, {"rollout-batch"}).digest
            except RefError:
                continue
            out += [f"{line}: a dataset of it cannot be approved nor used while its lineage "
                    "fails" for line in verify_ref(self, digest, trust, data="size").failures()]
        return out

    def _key(self, key: str | Signer) -> Signer:
        from trajledger.ledger.keys import Signer

        if not isinstance(key, str | Signer):  # (was re's "expected string", out40)
            raise TypeError(f"key={key!r} ({type(key).__name__}): want a key name (str) or a "
                            "Signer (ledger.keys.signer(NAME))")
        return key if isinstance(key, Signer) else self.keys.signer(key)

    def _signer(self, key: str | AnySigner) -> AnySigner:
        """``key`` as given (a key or a keyless signer), or the key of that name."""
        return key if not isinstance(key, str) else self.keys.signer(key)

    def policy(self, policy: str | Path | TrustPolicy | None = None) -> TrustPolicy:
        """The trust policy to apply: ``policy`` (a file followed through the log's history,
        or a `TrustPolicy` as given), else the ledger's policy in force.

        Raises:
            LedgerError: none given and none recorded. TamperError: a policy record is damaged.
        """
        from trajledger.ledger.policy_state import load_policy
        from trajledger.verify.policy import TrustPolicy

        if isinstance(policy, TrustPolicy):
            return policy
        return load_policy(self, Path(policy) if policy is not None else None)[0]

    # -- recording ---------------------------------------------------------------------------

    def register_environment(
        self,
        name: str,
        version: str,
        *,
        key: str | Signer,
        files: Sequence[Path] = (),
        source: str | None = None,
        gym_id: str | None = None,
        rules: Path | None = None,
        observation_space: Mapping[str, Any] | None = None,
        action_space: Mapping[str, Any] | None = None,
        env_spec: Mapping[str, Any] | None = None,
    ) -> Recorded:
        """``trajledger env register``: see `trajledger.ledger.artifacts.register_environment`."""
        from trajledger.ledger.artifacts import register_environment

        return register_environment(
            self, name, version, self._key(key), files=files, source=source,
            gymnasium_id=gym_id, rules=rules, observation_space=observation_space,
            action_space=action_space, env_spec=env_spec,
        )

    def register_evaluator(
        self,
        name: str,
        version: str,
        kind: str,
        *,
        key: str | Signer,
        model_id: str | None = None,
        rubric: Path | None = None,
        prompt: Path | None = None,
        files: Sequence[Path] = (),
        calibration: str | None = None,
    ) -> Recorded:
        """``trajledger evaluator register``: see `ledger.artifacts.register_evaluator`."""
        from trajledger.ledger.artifacts import register_evaluator

        return register_evaluator(
            self, name, version, kind, self._key(key), model_id=model_id, rubric=rubric,
            prompt=prompt, files=files, calibration=calibration,
        )

    def create_dataset(
        self,
        name: str,
        version: str,
        split: str,
        batches: Sequence[str],
        *,
        key: str | Signer,
        purpose: str = "train",
        card: Path | ProducerCard | None = None,
        progress: ProgressFactory | None = None,
    ) -> DatasetResult:
        """``trajledger dataset create``: see `trajledger.ledger.artifacts.create_dataset`;
        ``card`` is a ``card.toml`` file or a `ProducerCard` (`trajledger.ledger.cards`). A
        batch whose lineage fails under the policy in force (revoked, say) is a warning, one
        per problem: the dataset is recorded, and cannot be approved (`approve`)."""
        from trajledger.ledger.artifacts import create_dataset
        from trajledger.ledger.cards import ProducerCard
        from trajledger.ledger.record import judged_again

        if isinstance(batches, str):  # each character was looked up as a batch (out40)
            raise TypeError(f"batches={batches!r}: a str, want a list of batch references "
                            f"([{batches!r}])")
        if card is not None and not isinstance(card, ProducerCard):
            card = ProducerCard.from_file(Path(card))
        failing: list[str] = []  # (judged again under the log's lock if the log grew)
        check = judged_again(self, lambda: failing.__setitem__(
            slice(None), self._failing_batches(batches)))
        result = create_dataset(self, name, version, split, batches, self._key(key),
                                purpose=purpose, card=card, progress=progress, check=check)
        return replace(result, warnings=(*failing, *result.warnings)) if failing else result

    def card(
        self,
        ref: str,
        fmt: str = "hf",
        *,
        policy: str | Path | TrustPolicy | None = None,
        skip_data: bool = False,
    ) -> bytes:
        """``trajledger card``: the dataset's card as a Hugging Face ``README.md`` (``hf``) or a
        Croissant JSON-LD file (``croissant``), from its verified records; see
        `trajledger.ledger.cards.dataset_card` and `trajledger.ledger.card_formats.render`."""
        from trajledger.ledger.card_formats import FORMATS, render
        from trajledger.ledger.cards import dataset_card

        if fmt not in FORMATS:
            raise ValueError(f"card format {fmt!r}, want one of {', '.join(FORMATS)}")
        facts = dataset_card(self, ref, self.policy(policy), data="size" if skip_data else "hash")
        return render(facts, fmt)

    def suite_from_failures(
        self,
        evaluation: str,
        name: str,
        version: str,
        *,
        key: str | Signer,
        evaluator_key: str | Signer | None = None,
        split: str = "regression",
        batches: Sequence[str] = (),
        on_warning: Callable[[str], None] | None = None,
    ) -> tuple[Recorded, list[str]]:
        """``trajledger dataset create NAME --from-failures EVALUATION``: a regression suite
        of the evaluation's failed episodes; ``evaluator_key`` opens a sealed suite (its
        unsealing is logged); ``on_warning`` gets each line to show the user. See
        `trajledger.ledger.suites.suite_from_failures`."""
        from trajledger.ledger.suites import Unsealer, suite_from_failures

        unsealer = (Unsealer.load(self, self._key(evaluator_key))
                    if evaluator_key is not None else None)
        return suite_from_failures(self, evaluation, name, version, self._key(key),
                                   unsealer=unsealer, split=split, extra_batches=batches,
                                   on_warning=on_warning)

    def approve(
        self,
        ref: str,
        *,
        key: str | AnySigner,
        purpose: str = "train",
        expires: str = "30d",
        note: str | None = None,
    ) -> Recorded:
        """``trajledger approve``: see `trajledger.ledger.status.approve`. Under a policy in
        force, the data's lineage must verify first, and again under the log's lock when
        another writer appended meanwhile (`ledger.record.judged_again`): an approval of a
        revoked batch, or of a dataset holding one, would count for nothing (a revocation is
        for good) after the approver was told OK.

        Raises:
            DataRefusedError: its lineage fails (nothing is recorded).
        """
        from trajledger.ledger.catalog import Catalog
        from trajledger.ledger.record import judged_again
        from trajledger.ledger.status import APPROVABLE, approve

        def judge() -> None:
            from trajledger.runner.train import check_lineage

            trust = self._policy_in_force()
            if trust is not None:
                item = Catalog(self).resolve(ref, APPROVABLE)
                check_lineage(self, trust, item, item.kind, "nothing was approved")

        return approve(self, ref, self._signer(key), purpose=purpose, expires=expires, note=note,
                       check=judged_again(self, judge))

    def revoke(self, ref: str, *, key: str | AnySigner, reason: str) -> Recorded:
        """``trajledger revoke``: see `trajledger.ledger.status.revoke` (a keyless signer
        withdraws an approval only)."""
        from trajledger.ledger.status import revoke

        return revoke(self, ref, self._signer(key), reason=reason)

    def withdraw(self, ref: str, *, key: str | AnySigner, reason: str, by: str | None = None,
                 by_identity: str | None = None) -> tuple[int, Recorded]:
        """``trajledger revoke REF --approval [--by KEYID | --by-identity SUBJECT]``: the
        approval's log index and its withdrawal; see `trajledger.ledger.status.withdraw_of`."""
        from trajledger.ledger.status import withdraw_of

        return withdraw_of(self, ref, self._signer(key), reason=reason, by=by,
                           by_identity=by_identity)

    def erase(self, ref: str, *, key: str | Signer, reason: str
              ) -> tuple[Recorded, int, dict[str, str]]:
        """``trajledger erase``: the erasure record (an earlier one, ``new`` False, when the
        artifact was already erased and only blobs it lists were left), how many blobs were
        deleted, and the blobs kept because another artifact here holds them (blob -> its
        label); see `trajledger.ledger.status.erase`."""
        from trajledger.ledger.status import erase

        return erase(self, ref, self._key(key), reason=reason)

    def set_policy(
        self, policy: Path | TrustPolicy, *, keys: Sequence[str | Signer],
        on_warning: Callable[[str], None] | None = None,
    ) -> Recorded:
        """``trajledger policy set``: see `trajledger.ledger.status.record_policy`
        (``on_warning`` is given each pin kept that fails now)."""
        from trajledger.ledger.status import record_policy
        from trajledger.verify.policy import TrustPolicy

        given = policy if isinstance(policy, TrustPolicy) else Path(policy)
        return record_policy(self, given, [self._key(k) for k in keys], on_warning=on_warning)

    # -- exchange ------------------------------------------------------------------------------

    def export(
        self,
        ref: str,
        out: Path,
        *,
        data: bool = True,
        policy: str | Path | TrustPolicy | None = None,
        consistency_from: Sequence[int] = (),
    ) -> ExportResult:
        """``trajledger export``: an evidence bundle; see
        `trajledger.ledger.exchange.export_bundle`."""
        from trajledger.ledger.exchange import export_bundle

        return export_bundle(self, ref, Path(out), data=data, policy=self.policy(policy),
                             consistency_from=consistency_from)

    def import_bundle(
        self,
        path: Path,
        *,
        keys: Sequence[str | Signer],
        policy: str | Path | TrustPolicy | None = None,
    ) -> ImportResult:
        """``trajledger import``: verify, then take a bundle in; see
        `trajledger.ledger.exchange.import_bundle`."""
        from trajledger.ledger.exchange import import_bundle

        return import_bundle(self, Path(path), self.policy(policy), [self._key(k) for k in keys])

    # -- the runner ----------------------------------------------------------------------------

    def admit(
        self,
        dataset: str,
        *,
        policy: str | Path | TrustPolicy | None = None,
        purpose: str | None = None,
    ) -> Admission:
        """``trajledger admit``: the verified data, or `DataRefusedError` listing every failure;
        see `trajledger.runner.admission.admit`."""
        from trajledger.runner.admission import admit

        return admit(self, dataset, self.policy(policy), purpose=purpose)

    def train(
        self,
        dataset: str,
        *,
        key: str | Signer,
        trainer: str = "bc",
        command: Sequence[str] | None = None,
        policy: str | Path | TrustPolicy | None = None,
        config: Mapping[str, Any] | None = None,
        seed: int = 0,
        name: str | None = None,
        version: str | None = None,
        parent: str | None = None,
        output: Path | None = None,
        keep_logs: bool = False,
    ) -> TrainOutcome:
        """``trajledger train``: admit, train on the verified bytes, record the checkpoint.

        With ``command`` (``trajledger train ... -- COMMAND``), the command trains on a
        read-only directory of the verified bytes and its output files are the checkpoint
        (``name`` and ``version`` required; ``output``, ``keep_logs``: see
        `trajledger.runner.train.train_command`); otherwise the ``trainer`` plug-in does (see
        `trajledger.runner.train.train`).
        """
        from trajledger.runner.train import train, train_command

        if command is not None:
            if trainer != "bc" or config is not None or seed != 0:
                raise TypeError("train: a command takes no trainer, config or seed")
            if name is None or version is None:
                raise TypeError("train: a command needs name= and version=")
            return train_command(
                self, dataset, list(command), self._key(key), self.policy(policy), name=name,
                version=version, parent=parent, output=output, keep_logs=keep_logs,
            )
        if output is not None or keep_logs:
            raise TypeError("train: output and keep_logs go with a command")
        return train(
            self, dataset, trainer, self._key(key), self.policy(policy), config=config,
            seed=seed, name=name, version=version, parent=parent,
        )

    @contextmanager
    def training(
        self,
        dataset: str,
        *,
        key: str | Signer,
        name: str,
        version: str,
        parent: str | None = None,
        policy: str | Path | TrustPolicy | None = None,
    ) -> Iterator[Training]:
        """Train in this process on an admitted dataset; ``run.save(dir)`` records checkpoints.

        ::

            with ledger.training("chat@1", key="trainer", name="sft", version="1") as run:
                trainer = SFTTrainer(model=model, train_dataset=run.hf_dataset("conversations"),
                                     callbacks=[LedgerCallback(run)], ...)
                trainer.train()

        The dataset is admitted on entry (a refusal is recorded and `DataRefusedError`
        raised); see `trajledger.runner.training.Training`.
        """
        from trajledger.runner.train import admit_for_training, start_run
        from trajledger.runner.training import Training

        start = start_run(self, self._key(key), self.policy(policy), parent=parent, name=name,
                          version=version)
        admission = admit_for_training(self, dataset, start, "in-process")
        run = Training(self, start, admission, name=name, version=version)
        try:
            yield run
        finally:
            run.close()

    def rollout(
        self,
        checkpoint: str,
        env: str,
        episodes: int,
        *,
        key: str | Signer,
        seed: int = 0,
        max_steps: int | None = None,
        allow_env_modules: Sequence[str] = (),
        policy: str | Path | TrustPolicy | None = None,
    ) -> tuple[Any, float]:
        """``trajledger rollout``: the recorded batch and the mean return (the checkpoint and
        the environment must verify under ``policy``, by default the one in force); see
        `trajledger.runner.train.rollout`."""
        from trajledger.runner.train import rollout

        return rollout(self, checkpoint, env, episodes, self._key(key), self.policy(policy),
                       seed=seed, max_steps=max_steps, allow_env_modules=allow_env_modules)

    def evaluate(
        self,
        checkpoint: str,
        suite: str,
        *,
        key: str | Signer,
        command: Sequence[str] | None = None,
        evaluator: str | None = None,
        pass_return: float | None = None,
        max_steps: int | None = None,
        policy: str | Path | TrustPolicy | None = None,
        output: Path | None = None,
        keep_logs: bool = False,
        unseal_key: str | None = None,
        allow_env_modules: Sequence[str] = (),
    ) -> EvalOutcome:
        """``trajledger eval``: run the checkpoint on a holdout or regression suite (built in
        for Gymnasium policies, or ``command``) and record the signed evaluation; see
        `trajledger.runner.evaluate.evaluate`."""
        from trajledger.runner.evaluate import evaluate

        return evaluate(
            self, checkpoint, suite, self._key(key), self.policy(policy), command=command,
            evaluator=evaluator, pass_return=pass_return, max_steps=max_steps, output=output,
            keep_logs=keep_logs, unseal_key=unseal_key, allow_env_modules=allow_env_modules,
        )

    def release(
        self,
        checkpoint: str,
        *,
        key: str | Signer | Sequence[str | Signer],
        note: str | None = None,
        policy: str | Path | TrustPolicy | None = None,
    ) -> ReleaseOutcome:
        """``trajledger release``: record a release when the policy's ``[release]`` holds, or
        raise `ReleaseRefusedError` naming each missing or failing evaluation; see
        `trajledger.runner.release.release`."""
        from trajledger.runner.release import release

        keys = [key] if isinstance(key, str) or not isinstance(key, Sequence) else list(key)
        return release(self, checkpoint, [self._key(k) for k in keys], self.policy(policy),
                       note=note)

    def verify(
        self,
        ref: str,
        *,
        policy: str | Path | TrustPolicy | None = None,
        skip_data: bool = False,
        files: str | Path | None = None,
    ) -> Report:
        """``trajledger verify REF``: the verified lineage graph (``.ok``, ``.nodes``,
        ``.edges``, ``.failures()``), the artifact's files named with their digests; with
        ``files``, a directory of them checked against its manifest; see
        `trajledger.runner.verification.verify_ref`."""
        from trajledger.runner.verification import verify_ref

        return verify_ref(self, ref, self.policy(policy), data="size" if skip_data else "hash",
                          files=None if files is None else Path(files))

    def lineage(self, ref: str, *, policy: str | Path | TrustPolicy | None = None) -> Report:
        """``trajledger lineage``: what made ``ref`` (the same graph as `verify`), with the
        records about its artifacts (approvals, revocations, evaluations...: ``.records``)."""
        from trajledger.runner.lineage import lineage

        return lineage(self, ref, self.policy(policy))

    def impact(self, ref: str, *, policy: str | Path | TrustPolicy | None = None) -> Report:
        """``trajledger impact``: everything downstream of ``ref``, each verified, with the
        records about them (``.records``)."""
        from trajledger.runner.lineage import impact

        return impact(self, ref, self.policy(policy))
