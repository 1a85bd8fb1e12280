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

The command line is a thin layer over these methods (``trajledger <command>``); docs/api.md shows
each command beside its method. Everything a method needs is loaded when it is called: importing
``trajledger`` stays light.

``key`` arguments take the name of a key in the ledger's key store, or a loaded `Signer`.
``policy`` arguments take a trust policy file (followed through the log's policy history), a
`TrustPolicy`, or None for the ledger's policy in force.
Non-scope: what the methods do (the modules they call, named in each docstring).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajledger.ledger import home

if TYPE_CHECKING:
    from trajledger.ledger.keys import Signer
    from trajledger.verify.lineage import Report
    from trajledger.verify.policy import TrustPolicy

    from .admission import Admission
    from .evaluate import EvalOutcome
    from .release import ReleaseOutcome
    from .train import TrainOutcome
    from .training import Training

__all__ = ["Ledger"]

class Ledger(home.Ledger):
    """An open ledger: record, approve, train, verify, audit and exchange.

    Build with `Ledger.open(path)` or `Ledger.init(path)`. The recording, approval and exchange
    methods (`register_environment`, `record_batch`, `create_dataset`, `approve`, `revoke`,
    `erase`, `set_policy`, `export`, `import_bundle`, `policy`) are those of the ledger layer
    (`trajledger.ledger.home.Ledger`); the runner's methods here (`admit`, `train`, `training`,
    `rollout`, `evaluate`, `release`, `verify`, `lineage`, `impact`) verify before they act.
    """

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
        from .admission import admit

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
        from .train import train, train_command

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
        from .train import admit_for_training, start_run
        from .training import Training

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
    ) -> tuple[Any, float]:
        """``trajledger rollout``: the recorded batch and the mean return; see
        `trajledger.runner.train.rollout`."""
        from .train import rollout

        return rollout(self, checkpoint, env, episodes, self._key(key), seed=seed,
                       max_steps=max_steps)

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
    ) -> EvalOutcome:
        """``trajledger eval``: run the checkpoint on a holdout or regression suite (built in
        for Gymnasium policies, or ``command``) and record the signed evaluation; see
        `trajledger.runner.evaluate.evaluate`."""
        from .evaluate import evaluate

        return evaluate(
            self, checkpoint, suite, self._key(key), self.policy(policy), command=command,
            evaluator=evaluator, pass_return=pass_return, max_steps=max_steps, output=output,
            keep_logs=keep_logs, unseal_key=unseal_key,
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
        from .release import release

        keys = [key] if isinstance(key, str) or not isinstance(key, Sequence) else list(key)
        return release(self, checkpoint, [self._key(k) for k in keys], self.policy(policy),
                       note=note)

    def verify(
        self,
        ref: str,
        *,
        policy: str | Path | TrustPolicy | None = None,
        skip_data: bool = False,
    ) -> Report:
        """``trajledger verify REF``: the verified lineage graph (``.ok``, ``.nodes``,
        ``.edges``, ``.failures()``); see `trajledger.runner.verification.verify_ref`."""
        from .verification import verify_ref

        return verify_ref(self, ref, self.policy(policy), data="size" if skip_data else "hash")

    def lineage(self, ref: str, *, policy: str | Path | TrustPolicy | None = None) -> Report:
        """``trajledger lineage``: what made ``ref`` (the same graph as `verify`), with the
        records about its artifacts (approvals, revocations, evaluations...: ``.records``)."""
        from .lineage import lineage

        return lineage(self, ref, self.policy(policy))

    def impact(self, ref: str, *, policy: str | Path | TrustPolicy | None = None) -> Report:
        """``trajledger impact``: everything downstream of ``ref``, each verified, with the
        records about them (``.records``)."""
        from .lineage import impact

        return impact(self, ref, self.policy(policy))
