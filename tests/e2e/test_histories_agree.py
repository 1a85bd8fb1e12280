"""Generated histories: every path that judges trust agrees with a model of the rules (agree24).

tests/e2e/test_paths_agree.py judges hand-built scenarios; this module generates them. A
history (`generate`: ``random.Random(seed)``, 6 to 12 steps) is a list of operations through
the library, on a copy of one small ledger (`build_base`): producers ``producer-a`` and
``producer-b`` (and ``producer-c``, in no role until producer-b is rotated to it), approvers
``approver-a`` and ``approver-b`` (threshold 1), ``trainer``;
environments ``cartpole@1`` and ``cartpole@2`` and evaluator ``judge@1`` (producer-a's).
The operations: record a batch (producer a or b, either environment, with or without the
evaluator), create a dataset of one or two batches (a train split, or now and then a holdout),
approve it (for 1, 5 or 30 days), "un-approve" it (an approver withdraws its newest approval:
``revoke`` of the approval's record, R7), revoke a
batch, a dataset, an environment or the evaluator, erase a batch, train a checkpoint (the
built-in trainer) on a dataset, with or without a parent checkpoint, and record a successor
policy that drops producer-b from its role, rotates it to producer-c, declares producer-b's
key compromised (since the start, or since an earlier step), sets the approver threshold to 1
or 2 or the maximum approval age to 3 or 20 days (90 before); a ``clock`` step moves the verifiers'
clock 2, 9 or 40 days ahead (agree25; the log's writer keeps the real time).

`Model` replays the same history and says, from the rules alone, what each judging path must
answer. The rules, each with where the design states it:

- **R1 signer** (DESIGN.md 6; SECURITY.md 5, keys/README.md ``revoked_keys``): a record counts
  when its key held the role its kind needs in the policy in force when it was logged, and
  was not declared compromised since a log index at or before it. A key dropped from a role
  keeps what it signed before.
- **R2 batch** (DESIGN.md 5, 7): a batch is sound when R1 holds, no revocation names it, and
  its environment and evaluator (when it names one) are sound (not revoked). Erased, it stays
  sound ("erasure deletes blobs but keeps digests, so lineage still verifies").
- **R3 dataset record** (``verify DS``; SECURITY.md rev18: approvals and splits are rules of
  use): R1, not revoked, every batch sound.
- **R4 use of a dataset now** (``admit``; DESIGN.md 6 "The runner admits a dataset only
  if"): R3, split ``train``, no batch erased, no batch in a holdout dataset recorded (another
  dataset whose record counts by R1: revoked, it still holds out; verify/judge.py
  ``held_out``), no episode a copy of a held-out one (the batches here are distinct: none; a
  held-out batch erased has nothing left to compare with), and approvals of distinct
  approver keys reaching the threshold of the policy in force now (each unexpired: R6, not
  withdrawn: R7).
- **R5 checkpoint** (``verify CK``; verify/lineage.py ``dataset_use``, verify/judge.py
  ``approvals``): R1 for the trainer, not revoked, its dataset's record sound now (R3: a
  revocation after training fails it), split ``train``, no batch in a holdout dataset recorded
  before it, approvals logged before it reaching the threshold of the policy in force at it
  (a successor that raises the threshold does not fail what was trained before), and its
  parent (if any) sound by R5. Erased data leaves it sound.
- **R6 time** (DESIGN.md 6 "approved by threshold approvers for the purpose, unexpired",
  "times that decide (age, expiry, compromise) are the log's"; verify/judge.py ``approvals``;
  SECURITY.md rev13 finding 4): an approval counts for a use at time T while T is before its
  expiry (its log time plus the lifetime it was given) and T minus its log time is within
  the maximum approval age of the policy in force at the use. A use now (R4) is judged at the
  verifiers' clock, a checkpoint (R5) at its own log time: time that passes after training
  never fails a checkpoint.
- **R7 withdrawal** (withdraw26; docs/SECURITY.md, "fourteenth round (withdraw26)";
  verify/withdrawals.py): any approver may withdraw any approval (``revoke`` of its record);
  a withdrawn approval counts for no use, before the withdrawal too (as R3's revocation of
  the data it approves fails a checkpoint trained before it), in R4 and R5 alike; the same
  signed approval logged twice is one approval, withdrawn with it. A new approval counts.
- **Write side**: ``train`` and ``Ledger.training`` admit by R4 and refuse a parent R5
  refuses; ``approve`` refuses data whose record fails R3 (SECURITY.md approve23); a
  producer key out of its role records nothing; a batch naming a revoked environment or
  evaluator is refused (R2 would fail it from its first day: SECURITY.md lock24 finding 2,
  agree25 finding 1; docs/cli.md ``record``), and the steps naming it are skipped; a
  revocation of what ``approver-a`` revoked already is done and records nothing (SECURITY.md,
  twenty-third round, hist38 finding 2: one record, whatever the clock). Other
  operations may succeed or be refused (a refused step changes nothing; the model then drops
  it).

The paths compared (`judge_history`): per checkpoint (R5) ``verify``, ``verify --skip-data``,
``verify --policy ROOT`` (ROOT: the ledger's first policy), ``lineage``, ``Ledger.verify``,
``Ledger.lineage``, its node in ``impact`` of its first batch, and ``export`` then ``verify
BUNDLE --policy ROOT`` and ``python -m trajledger.verify BUNDLE --policy ROOT``; per dataset
``verify DS``, its own node in ``impact DS`` and its bundle's two verifiers (R3), ``admit``,
``Ledger.admit`` and the in-process gate ``Ledger.training`` (R4); per batch ``verify BATCH``
and its node in ``impact BATCH`` (R2); and each step's outcome (write side). A disagreement
is reported with the history minimised (`minimise`: steps dropped while the same path still
disagrees) as a readable list of steps.

Not modelled (Left in docs/SECURITY.md, agree24 and agree25): evaluations and releases,
exchange (import, update bundles), tampering (test_paths_agree.py and the tamper kits cover
those), contamination settings other than the default, sealed suites.

Size: `SEEDS`, 24 histories in CI; the whole file about 17 CPU-s (14 s user, 2.6 s system,
``-n 0``, agree25);
``TRAJLEDGER_AGREE_N=500`` runs seeds 0 to 499, ``TRAJLEDGER_AGREE_SEED=S`` seed S alone.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import random
import re
import shutil
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import testkit
from test_paths_agree import first_problem

from trajledger import Ledger
from trajledger.runner.cli import main

PRODUCERS = ("producer-a", "producer-b")
ROTATED = "producer-c"
"""The key producer-b is rotated to (a successor policy); in no role before."""
APPROVERS = ("approver-a", "approver-b")
ENVS = ("cartpole@1", "cartpole@2")
EXPIRES = (1, 5, 30, 30)
"""An approval's lifetime in days (``approve --expires``; 30 the default)."""
AHEAD = (2, 9, 40)
"""Days a ``clock`` step moves the verifiers' clock ahead (test_paths_agree.py's
`set_clock_ahead`); the log's own times stay real."""


# -- the base ledger -----------------------------------------------------------------------------


def policy_text(home: Path, serial: int, threshold: int, producers: tuple[str, ...],
                compromised_since: int | None, max_age: int = 90) -> str:
    """The trust policy of serial ``serial``: ``producers`` as the producer role, approvers
    a and b at ``threshold``, the trainer, producer-b's key compromised since a log index
    (None: not), and a maximum approval age of ``max_age`` days."""
    from trajledger.ledger.policy_state import policy_toml

    led = Ledger.open(home)
    pub = {n: led.keys.public(n) for n in (*PRODUCERS, ROTATED, *APPROVERS, "trainer")}
    roles = {
        "producer": ([(n, pub[n]) for n in producers], 1, ""),
        "approver": ([(n, pub[n]) for n in APPROVERS], threshold, ""),
        "trainer": ([("trainer", pub["trainer"])], 1, ""),
    }
    text = policy_toml("agree", roles, led.log.vkey, header="# agree24",
                       max_approval_age=f"{max_age}d").replace(
        "serial = 1", f"serial = {serial}")
    if compromised_since is not None:
        keyid = pub["producer-b"].keyid
        text += (f'\n[[revoked_keys]]\nkey = "{keyid}"\ncompromised_since = '
                 f'{compromised_since}\nreason = "stolen"\n')
    led.close()
    return text


def build_base(home: Path) -> None:
    led = Ledger.init(home, origin="test/agree24")
    for n in (*PRODUCERS, ROTATED, *APPROVERS, "trainer"):
        led.keys.create(n, encrypt=False)
    (home / "policy.toml").write_text(policy_text(home, 1, 1, PRODUCERS, None))
    led.set_policy(home / "policy.toml", keys=["approver-a"])
    for env in ENVS:
        name, version = env.split("@")
        led.register_environment(name, version, key="producer-a", gym_id="CartPole-v1")
    led.register_evaluator("judge", "1", "deterministic", key="producer-a")
    led.close()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[None]:
    return testkit.build_template(tmp_path_factory.mktemp("agree24"), build_base)


# -- histories -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One operation; ``args`` name artifacts by label (``b1``, ``d2``, ``c1``)."""

    op: str
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return f"{self.op}({', '.join(map(str, self.args))})"


def generate(seed: int) -> list[Step]:
    """A history of 6 to 12 steps (``random.Random(seed)``). Labels are given in order (b1,
    b2..., d1..., c1...), and a step names only labels an earlier step makes (a refused
    step's label names nothing: `replay` skips a step naming it). Steps lean towards what
    the rules allow (a producer in its role, an approver who has not approved the dataset, a
    dataset approved before it is trained on), so histories reach checkpoints, parents and
    policy changes after them; about one step in six is one the rules refuse."""
    rnd = random.Random(seed)
    steps: list[Step] = []
    n = {"b": 0, "d": 0, "c": 0}
    in_role = list(PRODUCERS)
    approved: dict[str, set[str]] = {}

    def pick(kind: str, recent: bool = False) -> str:
        low = max(1, n[kind] - 2) if recent and rnd.random() < 0.7 else 1
        return f"{kind}{rnd.randint(low, n[kind])}"

    def signer() -> str:
        return rnd.choice(in_role) if rnd.random() < 0.85 else rnd.choice(
            (*PRODUCERS, ROTATED))

    for _ in range(rnd.randint(6, 12)):
        weights = {"record": 2 if n["b"] else 9, "revoke-env": 0.3, "revoke-evaluator": 0.3,
                   "policy": 1.2, "clock": 0.5 if approved else 0}
        if n["b"]:
            weights.update({"dataset": 2.5 if n["d"] else 9, "revoke-batch": 0.7,
                            "erase": 0.5})
        if n["d"]:
            weights.update({"approve": 3 if approved else 9, "train": 5 if approved else 0.5,
                            "unapprove": 0.4, "revoke-dataset": 0.6})
        op = rnd.choices(list(weights), list(weights.values()))[0]
        if op == "record":
            n["b"] += 1
            steps.append(Step(op, (f"b{n['b']}", signer(), rnd.choice(ENVS),
                                   rnd.random() < 0.3)))
        elif op == "dataset":
            n["d"] += 1
            members = sorted({pick("b", True) for _ in range(rnd.randint(1, 2))})
            split = "holdout" if rnd.random() < 0.12 else "train"
            steps.append(Step(op, (f"d{n['d']}", signer(), tuple(members), split)))
        elif op == "approve":
            ds = pick("d", True)
            who = [a for a in APPROVERS if a not in approved.get(ds, set())] or list(APPROVERS)
            steps.append(Step(op, (ds, rnd.choice(who), rnd.choice(EXPIRES))))
            approved.setdefault(ds, set()).add(steps[-1].args[1])
        elif op == "unapprove":
            steps.append(Step(op, (pick("d"), rnd.choice(APPROVERS))))
        elif op == "train":
            n["c"] += 1
            parent = f"c{rnd.randint(1, n['c'] - 1)}" if n["c"] > 1 and rnd.random() < 0.5 \
                else None
            ds = rnd.choice(sorted(approved)) if approved and rnd.random() < 0.85 else pick("d")
            steps.append(Step(op, (f"c{n['c']}", ds, parent)))
        elif op in ("revoke-batch", "erase"):
            steps.append(Step(op, (pick("b"),)))
        elif op == "revoke-dataset":
            steps.append(Step(op, (pick("d"),)))
        elif op == "revoke-env":
            steps.append(Step(op, (rnd.choice(ENVS),)))
        elif op == "revoke-evaluator":
            steps.append(Step(op, ("judge@1",)))
        elif op == "clock":
            steps.append(Step(op, (rnd.choice(AHEAD),)))
        else:
            change = rnd.choice(["drop-b", "rotate-b", "compromise-b-0", "compromise-b-step",
                                 "threshold-1", "threshold-2", "threshold-2", "max-age-3",
                                 "max-age-20"])
            steps.append(Step(op, (change, rnd.randint(0, len(steps)))))
            if change != "rotate-b" and not change.startswith("threshold"):
                in_role = [p for p in in_role if p != "producer-b"]
            elif change == "rotate-b":
                in_role = [p for p in in_role if p != "producer-b"] + [ROTATED]
    return steps


# -- the model -----------------------------------------------------------------------------------


@dataclass
class Art:
    label: str
    kind: str
    signer: str
    index: int
    """The log size before the step that recorded it (its entries are at or after it)."""
    batches: tuple[str, ...] = ()
    env: str = ""
    evaluator: bool = False
    split: str = "train"
    dataset: str = ""
    parent: str | None = None
    revoked: bool = False
    erased: bool = False
    approvals: list[tuple[str, int, str, int]] = field(default_factory=list)
    """(approver, log index, envelope digest, lifetime in days) of each approval recorded
    (every log time is real: an approval is ``ahead`` days old for a use now)."""
    digest: str = ""


@dataclass
class Model:
    """The rules of the module docstring, over what the history recorded."""

    arts: dict[str, Art] = field(default_factory=dict)
    revoked: set[str] = field(default_factory=set)
    """Revoked environments and evaluators."""
    policies: list[tuple[int, tuple[str, ...], int, int]] = field(
        default_factory=lambda: [(0, PRODUCERS, 1, 90)])
    """(log index it takes effect from, producers, approver threshold, maximum approval age
    in days)."""
    ahead: int = 0
    """Days the verifiers' clock is ahead of the log's (every log time is real: now)."""
    compromised_since: int | None = None
    """Log index from which producer-b's signatures count for nothing."""

    def policy_at(self, index: int) -> tuple[tuple[str, ...], int, int]:
        producers, threshold, max_age = PRODUCERS, 1, 90
        for since, p, t, age in self.policies:
            if since <= index:
                producers, threshold, max_age = p, t, age
        return producers, threshold, max_age

    def signer_ok(self, a: Art) -> bool:  # R1
        if a.signer == "trainer":
            return True
        if a.signer == "producer-b" and self.compromised_since is not None \
                and a.index >= self.compromised_since:
            return False
        return a.signer in self.policy_at(a.index)[0]

    def batch_ok(self, b: Art) -> bool:  # R2
        return (self.signer_ok(b) and not b.revoked and b.env not in self.revoked
                and not (b.evaluator and "judge@1" in self.revoked))

    def record_ok(self, d: Art) -> bool:  # R3
        return (self.signer_ok(d) and not d.revoked
                and all(self.batch_ok(self.arts[b]) for b in d.batches))

    def held_out(self, d: Art, before: int) -> bool:
        return any(o.kind == "dataset" and o.split == "holdout" and o.label != d.label
                   and o.index < before and set(o.batches) & set(d.batches)
                   and self.signer_ok(o) for o in self.arts.values())

    def approved(self, d: Art, before: int, at: int | None = None) -> bool:
        """R4/R5 approvals: of distinct keys, logged before ``before``, reaching the threshold
        of the policy in force at ``before``; for a use now (``at``: the days the clock is
        ahead; None: at a checkpoint's own log time, hours at most after every approval),
        each unexpired (its lifetime more than ``at`` days on) and not older than that
        policy's maximum approval age (R6)."""
        _p, threshold, max_age = self.policy_at(before)
        return len({who for who, i, _e, days in d.approvals if i < before and (
            at is None or (at < days and at < max_age))}) >= threshold

    def admit(self, d: Art, now: int) -> bool:  # R4
        return (self.record_ok(d) and d.split == "train"
                and not any(self.arts[b].erased for b in d.batches)
                and not self.held_out(d, now)
                and self.approved(d, now, self.ahead))

    def checkpoint_ok(self, c: Art) -> bool:  # R5
        d = self.arts[c.dataset]
        return (not c.revoked and self.record_ok(d) and d.split == "train"
                and not self.held_out(d, c.index)
                and self.approved(d, c.index)
                and (c.parent is None or self.checkpoint_ok(self.arts[c.parent])))


# -- running a history ---------------------------------------------------------------------------


@dataclass
class Run:
    home: Path
    state: Path
    work: Path
    model: Model = field(default_factory=Model)
    sizes: list[int] = field(default_factory=list)
    """The log size before each step run."""
    ran: list[str] = field(default_factory=list)
    """Each step, as run: ``step -> ok`` or ``step -> refused: why``."""
    problems: list[str] = field(default_factory=list)
    root: Path = Path()
    """The trust root: the ledger's first policy file."""

    @contextlib.contextmanager
    def as_user(self) -> Iterator[None]:
        with pytest.MonkeyPatch.context() as m, self.clock():
            m.setenv(testkit.STATE_ENV, str(self.state))
            yield

    @contextlib.contextmanager
    def clock(self) -> Iterator[None]:
        """The verifiers' clock `Model.ahead` days ahead, read at each use (test_paths_agree.py
        `set_clock_ahead`, whose offset is fixed); the log's writer keeps the real time."""
        from trajledger.verify import lineage

        run = self

        class Ahead(dt.datetime):
            @classmethod
            def now(cls, tz: dt.tzinfo | None = None) -> Ahead:  # type: ignore[override]
                return super().now(tz) + dt.timedelta(days=run.model.ahead)

        with pytest.MonkeyPatch.context() as m:
            m.setattr(lineage, "dt", types.SimpleNamespace(
                datetime=Ahead, UTC=dt.UTC, timedelta=dt.timedelta, timezone=dt.timezone))
            yield

    def cli(self, *args: str | Path) -> Any:
        with self.clock():
            return testkit.new_runner().invoke(
                main, ["--ledger", str(self.home), *map(str, args)],
                env={testkit.STATE_ENV: str(self.state)})


def expect(m: Model, s: Step, size: int) -> bool | None:
    """What the rules say of step ``s`` on a log of ``size`` entries: True it must be done,
    False refused, None either (module docstring, "Write side")."""
    a, arts = s.args, m.arts
    producers = m.policy_at(size)[0]

    def producing(signer: str) -> bool:
        return signer in producers
    if s.op == "record":
        _label, signer, env, evaluator = a
        if env in m.revoked or (evaluator and "judge@1" in m.revoked):
            return False  # R2 from its first day: refused (lock24 finding 2; agree25)
        return producing(signer)
    if s.op == "dataset":
        _label, signer, members, split = a
        held = split == "holdout" or any(
            o.kind == "dataset" and o.split == "holdout" and set(o.batches) & set(members)
            for o in arts.values())
        return False if not producing(signer) else None if held else True
    if s.op == "approve":
        return m.record_ok(arts[a[0]])
    if s.op == "unapprove":
        return True  # R7: by an approver
    if s.op == "train":
        _label, ds, parent = a
        if parent is not None and not m.checkpoint_ok(arts[parent]):
            return False
        return m.admit(arts[ds], size)  # judged now: the clock's time (R6)
    if s.op == "erase":
        return None if arts[a[0]].erased else True
    return True  # revocations by approver-a (again: nothing new, hist38), policies signed by
    # both approvers


def refs(s: Step) -> list[str]:
    """The labels of artifacts step ``s`` uses (not the one it makes)."""
    a = s.args
    if s.op == "dataset":
        return list(a[2])
    if s.op == "train":
        return [x for x in a[1:] if x is not None]
    if s.op in ("approve", "unapprove", "revoke-batch", "revoke-dataset", "erase"):
        return [a[0]]
    return []


def perform(run: Run, led: Ledger, s: Step, size: int, steps: list[Step]) -> None:
    """Do step ``s`` through the library; on success, record it in the model."""
    from trajledger.runner.rollouts import run_policy

    m, a, arts = run.model, s.args, run.model.arts
    if s.op == "record":
        label, signer, env, evaluator = a
        played = run_policy(None, "CartPole-v1", 2, 1000 + int(label[1:]) * 7,
                            policy_version="random")
        r = led.record_batch(played.steps, episodes=played.episodes, env=env, policy="random",
                             key=signer, name=label, evaluator="judge@1" if evaluator else None)
        arts[label] = Art(label, "batch", signer, size, env=env, evaluator=evaluator,
                          digest=r.digest)
    elif s.op == "dataset":
        label, signer, members, split = a
        r = led.create_dataset(label, "1", split, [arts[b].digest for b in members], key=signer)
        arts[label] = Art(label, "dataset", signer, size, batches=members, split=split,
                          digest=r.recorded.digest)
    elif s.op == "approve":
        label, who, days = (*a, 30)[:3]
        # A note of its own: an approval made again in the same second is another (R7).
        rec = led.approve(arts[label].digest, key=who, expires=f"{days}d", note=f"at {size}")
        arts[label].approvals.append((who, size, rec.envelope_digest, days))
    elif s.op == "unapprove":
        label, who = a
        envelope = arts[label].approvals[-1][2]
        led.revoke(envelope, key=who, reason="un-approve")
        arts[label].approvals = [x for x in arts[label].approvals if x[2] != envelope]  # R7
    elif s.op == "train":
        label, ds, parent = a
        # A seed of its own: the same bytes trained twice are one checkpoint (its digest).
        out = led.train(arts[ds].digest, key="trainer", name=label, version="1",
                        seed=int(label[1:]), parent=arts[parent].digest if parent else None)
        arts[label] = Art(label, "checkpoint", "trainer", size, dataset=ds, parent=parent,
                          digest=out.digest)
    elif s.op in ("revoke-batch", "revoke-dataset"):
        led.revoke(arts[a[0]].digest, key="approver-a", reason="agree24")
        arts[a[0]].revoked = True
    elif s.op == "erase":
        led.erase(arts[a[0]].digest, key="approver-a", reason="consent")
        arts[a[0]].erased = True
    elif s.op == "clock":
        m.ahead += a[0]
    elif s.op in ("revoke-env", "revoke-evaluator"):
        led.revoke(a[0], key="approver-a", reason="agree24")
        m.revoked.add(a[0])
    elif s.op == "policy":
        change, at = a
        producers, threshold, max_age = m.policy_at(size)
        since = m.compromised_since
        if change == "drop-b" or change.startswith("compromise"):
            producers = tuple(p for p in producers if p != "producer-b")
        elif change == "rotate-b":
            producers = tuple(dict.fromkeys((*producers, ROTATED)))
            producers = tuple(p for p in producers if p != "producer-b")
        if change == "compromise-b-0":
            since = 0 if since is None else min(since, 0)
        elif change == "compromise-b-step":
            at_size = run.sizes[min(at, len(run.sizes) - 1)]
            since = at_size if since is None else min(since, at_size)
        elif change.startswith("threshold"):
            threshold = int(change[-1])
        elif change.startswith("max-age"):
            max_age = int(change.split("-")[-1])
        serial = len(m.policies) + 1
        path = run.work / f"policy-{serial}.toml"
        path.write_text(policy_text(run.home, serial, threshold, producers, since, max_age))
        led.set_policy(path, keys=list(APPROVERS))
        m.policies.append((size, producers, threshold, max_age))
        m.compromised_since = since
    else:
        raise AssertionError(s.op)


def replay(run: Run, steps: list[Step]) -> None:
    """Run ``steps`` on the run's ledger; each step's outcome against `expect`. A step naming
    an artifact the history did not make (a refused step's, or one a minimisation dropped) is
    skipped."""
    from trajledger.ledger.clikit import EXIT_BUG, exit_code_for

    with run.as_user():
        for s in steps:
            if any(r not in run.model.arts for r in refs(s)) or (
                    s.op == "unapprove" and not run.model.arts[s.args[0]].approvals):
                continue
            led = Ledger.open(run.home)
            size = led.log.size
            run.sizes.append(size)
            want = expect(run.model, s, size)
            try:
                perform(run, led, s, size, steps)
                got, why = True, ""
            except Exception as e:
                if exit_code_for(e) == EXIT_BUG:
                    raise
                got, why = False, f"{type(e).__name__}: {str(e).splitlines()[-1][:160]}"
            finally:
                led.close()
            run.ran.append(f"{s} -> {'ok' if got else 'refused: ' + why}")
            if want is not None and want != got:
                run.problems.append(f"step {s}: {'done' if got else 'refused'}, the rules say "
                                    f"{'do' if want else 'refuse'} it{': ' + why if why else ''}")


# -- judging -------------------------------------------------------------------------------------


def cli_verdict(run: Run, *args: str | Path) -> tuple[bool, str]:
    """A command's verdict: accepted (exit 0) or refused (exit 1) and the first problem named;
    any other exit, or a traceback, is a problem of its own."""
    r = run.cli(*args)
    if r.exit_code not in (0, 1) or "Traceback" in r.output:
        run.problems.append(f"{' '.join(map(str, args))}: exit {r.exit_code}\n"
                            f"{r.output[-600:]}")
    return r.exit_code == 0, first_problem(r.stderr)


def api_verdict(run: Run, call: Callable[[Ledger], Any]) -> tuple[bool, str]:
    from trajledger.ledger.clikit import EXIT_BUG, exit_code_for

    with run.as_user():
        led = Ledger.open(run.home)
        try:
            report = call(led)
        except Exception as e:
            if exit_code_for(e) == EXIT_BUG:
                raise
            return False, str(e).splitlines()[-1][:200]
        finally:
            led.close()
    ok = getattr(report, "ok", True)
    return ok, "" if ok else report.failures()[0][:200]


def impact_verdict(run: Run, subject: str, digest: str) -> tuple[bool, str]:
    """The node of ``digest`` in ``impact SUBJECT --json`` (the subject's own, or one built
    on it): accepted when its status and lineage are ``ok`` (``impact`` exits 0 whatever it
    lists)."""
    r = run.cli("impact", subject, "--json")
    if r.exit_code != 0 or not r.stdout:
        return False, first_problem(r.stderr) or f"impact: exit {r.exit_code}"
    node = next((n for n in json.loads(r.stdout)["nodes"] if n["id"] == digest), None)
    if node is None:
        return False, "not in the impact graph"
    bad = [c for c in node["checks"] if c["status"] == "fail"]
    ok = node["status"] != "fail" and node["lineage"] == "ok"
    return ok, f"{bad[0]['what']}: {bad[0]['detail']}" if bad else "" if ok else \
        "its lineage fails"


def standalone(run: Run, bundle: Path, policy: Path) -> tuple[bool, str]:
    from trajledger.verify.__main__ import main as verify_main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), \
            run.clock():
        code = verify_main([str(bundle), "--policy", str(policy)])
    if code not in (0, 1):
        run.problems.append(f"python -m trajledger.verify: exit {code}\n{err.getvalue()[-600:]}")
    return code == 0, first_problem(err.getvalue())


def checkpoint_paths(run: Run, c: Art) -> dict[str, tuple[bool, str]]:
    d = c.digest
    out = {
        "verify": cli_verdict(run, "verify", d),
        "verify --skip-data": cli_verdict(run, "verify", d, "--skip-data"),
        "lineage": cli_verdict(run, "lineage", d),
        "Ledger.verify": api_verdict(run, lambda led: led.verify(d)),
        "Ledger.lineage": api_verdict(run, lambda led: led.lineage(d)),
    }
    first = run.model.arts[run.model.arts[c.dataset].batches[0]].digest
    out["impact"] = impact_verdict(run, first, d)
    out["verify --policy ROOT"] = cli_verdict(run, "verify", d, "--policy", run.root)
    out.update(bundle_paths(run, c))
    return out


def bundle_paths(run: Run, a: Art) -> dict[str, tuple[bool, str]]:
    """``export REF``, then ``verify BUNDLE --policy ROOT`` and ``python -m
    trajledger.verify BUNDLE --policy ROOT``."""
    bundle = run.work / f"{a.label}.tar.zst"
    r = run.cli("export", a.digest, "--out", bundle)
    if r.exit_code != 0:
        return {"export": (False, first_problem(r.stderr) or f"exit {r.exit_code}")}
    return {"verify BUNDLE": cli_verdict(run, "verify", bundle, "--policy", run.root),
            "python -m trajledger.verify": standalone(run, bundle, run.root)}


def training_verdict(run: Run, digest: str) -> tuple[bool, str]:
    """``Ledger.training(DS)``, the in-process run's gate (entered and left, nothing saved)."""

    def enter(led: Ledger) -> None:
        with led.training(digest, key="trainer", name="agree24-gate", version="1"):
            pass

    return api_verdict(run, enter)


def judge_history(run: Run) -> list[str]:
    """Every path's answer on every artifact against the model's; one line per
    disagreement."""
    m, out = run.model, []
    with run.as_user():
        led = Ledger.open(run.home)
        now = led.log.size
        led.close()
    for a in list(m.arts.values()):
        if a.kind == "checkpoint":
            want, got = m.checkpoint_ok(a), checkpoint_paths(run, a)
        elif a.kind == "dataset":
            use = {"admit": cli_verdict(run, "admit", a.digest),
                   "Ledger.admit": api_verdict(run, lambda led, d=a.digest: led.admit(d)),
                   "Ledger.training": training_verdict(run, a.digest)}
            want = m.admit(a, now)
            out += [f"{a.label} {path}: {verdict(o)}, the rules say "
                    f"{'accept' if want else 'refuse'}" for path, o in use.items()
                    if o[0] != want]
            got = {"verify DS": cli_verdict(run, "verify", a.digest),
                   "impact DS (its node)": impact_verdict(run, a.digest, a.digest),
                   **bundle_paths(run, a)}
            want = m.record_ok(a)
        else:
            want, got = m.batch_ok(a), {
                "verify BATCH": cli_verdict(run, "verify", a.digest),
                "impact BATCH (its node)": impact_verdict(run, a.digest, a.digest)}
        for path, o in got.items():
            if o[0] != want:
                out.append(f"{a.label} {path}: {verdict(o)}, the rules say "
                           f"{'accept' if want else 'refuse'}")
    return out + run.problems


def verdict(o: tuple[bool, str]) -> str:
    return "accept" if o[0] else f"refuse ({o[1]})"


def run_history(root: Path, base: testkit.Template[None], steps: list[Step]) -> Run:
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    with testkit.user_state(root / "state") as state:
        home = testkit.copy_template(base, root / "home")
    work = root / "work"
    work.mkdir()
    run = Run(home, state, work)
    shutil.copy(home / "policy.toml", work / "policy-root.toml")
    run.root = work / "policy-root.toml"
    replay(run, steps)
    return run


def check(root: Path, base: testkit.Template[None], seed: int) -> list[str]:
    """The disagreements of history ``seed``, with the history minimised to the steps the
    first one needs (`minimise`); empty when every path agrees with the model."""
    steps = generate(seed)
    run = run_history(root, base, steps)
    problems = judge_history(run)
    if not problems:
        return []
    small, run = minimise(root, base, steps, problems[0])
    return [f"history {seed} (minimised from {len(steps)} to {len(small)} steps):",
            *(f"  {line}" for line in run.ran), "disagreements:",
            *(f"  {p}" for p in judge_history(run))]


def minimise(root: Path, base: testkit.Template[None], steps: list[Step], problem: str
             ) -> tuple[list[Step], Run]:
    """Drop steps one at a time while the history still shows ``problem``'s path
    disagreeing on the same artifact (its first words)."""
    key = " ".join(problem.split()[:2])
    best = steps
    i = len(best) - 1
    while i >= 0:
        trial = best[:i] + best[i + 1:]
        run = run_history(root, base, trial)
        if any(p.startswith(key) for p in judge_history(run)):
            best = trial
        i -= 1
    return best, run_history(root, base, best)


N = int(os.environ.get("TRAJLEDGER_AGREE_N", "24"))
ONE = os.environ.get("TRAJLEDGER_AGREE_SEED")
SEEDS = [int(ONE)] if ONE else list(range(N))


@pytest.mark.parametrize("chunk", range(4))
def test_generated_histories_agree_with_the_rules(
    chunk: int, base: testkit.Template[None], tmp_path: Path
) -> None:
    """Each seed of `SEEDS` (a quarter per test, so ``-n 2`` shares them): every judging path
    answers as `Model` says, and each step is done or refused as the rules say."""
    failures = []
    for seed in SEEDS[chunk::4]:
        failures += check(tmp_path / f"h{seed}", base, seed)
    assert not failures, "\n".join(failures)


def test_impact_judges_what_its_subject_and_their_users_were_built_on(
    base: testkit.Template[None], tmp_path: Path
) -> None:
    """agree24 finding 1 (history 29, minimised): ``impact B`` verified the batch B and what
    was built on it without following what each of them names off that graph, so a batch
    whose environment was revoked after a checkpoint was trained on it showed ``✓ OK`` there,
    and so did the checkpoint, which ``verify`` refuses. Now each node of the graph fails
    when such a dependency fails (`verify.impact._judge_rules`)."""
    steps = [Step("record", ("b1", "producer-a", "cartpole@2", False)),
             Step("dataset", ("d1", "producer-a", ("b1",), "train")),
             Step("approve", ("d1", "approver-a")),
             Step("train", ("c1", "d1", None)),
             Step("revoke-env", ("cartpole@2",))]
    run = run_history(tmp_path / "h", base, steps)
    assert not run.problems, run.problems
    arts = run.model.arts
    batch, ck = arts["b1"].digest, arts["c1"].digest
    r = run.cli("impact", batch, "--json")
    assert r.exit_code == 0, r.output
    nodes = {n["id"]: n for n in json.loads(r.stdout)["nodes"]}
    assert nodes[batch]["status"] == "fail", nodes[batch]
    failed = [c for c in nodes[batch]["checks"] if c["status"] == "fail"]
    assert failed and failed[0]["what"] == "environment", failed
    assert re.search(r"does not verify: environment cartpole@2 \(sha256:\w{12}…\) > revoked: "
                     r"agree24 \(log index \d+\)$", failed[0]["detail"]), failed
    assert impact_verdict(run, batch, ck)[0] is False
    assert cli_verdict(run, "verify", ck)[0] is False
    # Nothing revoked: the same graph is ok.
    run = run_history(tmp_path / "h2", base, steps[:-1])
    assert impact_verdict(run, run.model.arts["b1"].digest, run.model.arts["c1"].digest) == (
        True, "")


def test_an_erased_holdout_batch_does_not_refuse_every_train_set(
    base: testkit.Template[None], tmp_path: Path
) -> None:
    """agree24 finding 2 (history 158, minimised): the gate compares a train set with every
    holdout batch's data; once a holdout batch was erased (a signed erasure: consent
    withdrawn), its data was 'not in the store' and the comparison failed, 'cannot be
    checked', for every train set of the ledger, unrelated ones too, with no way out (a
    revocation of the holdout does not end it). An erased held-out batch is now said (an
    information line), not failed: there is nothing of it to compare with, nor to evaluate
    on."""
    steps = [Step("record", ("b1", "producer-a", "cartpole@1", False)),
             Step("record", ("b2", "producer-a", "cartpole@1", False)),
             Step("dataset", ("d1", "producer-a", ("b1",), "holdout")),
             Step("dataset", ("d2", "producer-a", ("b2",), "train")),
             Step("approve", ("d2", "approver-a")),
             Step("erase", ("b1",))]
    run = run_history(tmp_path / "h", base, steps)
    assert not run.problems, run.problems
    d2 = run.model.arts["d2"].digest
    r = run.cli("admit", d2)
    assert r.exit_code == 0, r.output
    assert re.search(r"holdout d1@1 batch sha256:\w{12}… is erased by an approver: nothing of "
                     "it to compare with", r.stdout + r.stderr), r.output
    assert training_verdict(run, d2) == (True, "")


def test_a_producers_erasure_of_a_holdout_batch_does_not_end_the_comparison(
    base: testkit.Template[None], tmp_path: Path
) -> None:
    """The lead, at the merge of agree24's finding 2: a producer may erase what it produced,
    but a held-out batch is the approvers' test set. If its producer's erasure alone ended
    the gate's comparison, whoever recorded the holdout could erase it and then train on
    copies of it unseen. So the gate still fails the comparison ("cannot be checked") and
    says that an approver's erasure ends it; after an approver erases it too, the train set
    is admitted."""
    steps = [Step("record", ("b1", "producer-a", "cartpole@1", False)),
             Step("record", ("b2", "producer-a", "cartpole@1", False)),
             Step("dataset", ("d1", "producer-a", ("b1",), "holdout")),
             Step("dataset", ("d2", "producer-a", ("b2",), "train")),
             Step("approve", ("d2", "approver-a"))]
    run = run_history(tmp_path / "h", base, steps)
    assert not run.problems, run.problems
    b1, d2 = run.model.arts["b1"].digest, run.model.arts["d2"].digest
    with run.as_user():
        led = Ledger.open(run.home)
        led.erase(b1, key="producer-a", reason="consent")
    r = run.cli("admit", d2)
    assert r.exit_code == 1, r.output
    assert "cannot be checked" in r.output, r.output
    assert re.search(r"held-out batch sha256:\w{12}… was erased by its producer only: it must "
                     "still be compared; an approver's erasure of it ends that", r.output), r.output
    with run.as_user():
        Ledger.open(run.home).erase(b1, key="approver-a", reason="consent")
    r = run.cli("admit", d2)
    assert r.exit_code == 0, r.output
    assert "is erased by an approver: nothing of it to compare with" in r.output, r.output


@pytest.mark.parametrize("revoked", ["revoke-env", "revoke-evaluator"])
def test_the_library_records_no_batch_in_a_revoked_environment_or_by_a_revoked_evaluator(
    revoked: str, base: testkit.Template[None], tmp_path: Path
) -> None:
    """agree25 finding 1: lock24 made ``record --env E`` / ``--evaluator V`` refuse E or V
    revoked (a batch that fails from its first day), but `Ledger.record_batch`, the library's
    way to record (docs/api.md), recorded it: ``OK``, a batch every path then refuses. The
    write-side rule now says refuse; the batch's later steps are skipped (`replay`)."""
    steps = [Step(revoked, ("cartpole@2",) if revoked == "revoke-env" else ("judge@1",)),
             Step("record", ("b1", "producer-a", "cartpole@2", True)),
             Step("dataset", ("d1", "producer-a", ("b1",), "train"))]
    run = run_history(tmp_path / "h", base, steps)
    assert not run.problems, run.problems
    assert "b1" not in run.model.arts
    assert re.search(r"record\(b1, .*\) -> refused: PolicyError: .*(revoked|lineage fails)",
                     "\n".join(run.ran)), run.ran


def test_time_ends_an_approval_for_a_use_now_not_for_a_checkpoint(
    base: testkit.Template[None], tmp_path: Path
) -> None:
    """R6 as the histories use it: an approval of 5 days holds 2 days on, not 9 days on (its
    expiry), and not 4 days on once a successor policy's maximum approval age is 3 days; a
    checkpoint trained while it held stays sound. Every path agrees with the model at each
    point (`judge_history`), and the model's answer does change (the clock is moved)."""
    steps = [Step("record", ("b1", "producer-a", "cartpole@1", False)),
             Step("dataset", ("d1", "producer-a", ("b1",), "train")),
             Step("approve", ("d1", "approver-a", 5)),
             Step("clock", (2,)),
             Step("train", ("c1", "d1", None))]
    for extra, admitted in (((), True), ((Step("clock", (9,)),), False),
                            ((Step("policy", ("max-age-3", 0)), Step("clock", (2,))), False)):
        run = run_history(tmp_path / f"h{len(extra)}{admitted}", base, [*steps, *extra])
        assert not run.problems, run.problems
        m = run.model
        assert "c1" in m.arts and m.checkpoint_ok(m.arts["c1"]), run.ran
        with run.as_user(), Ledger.open(run.home) as led:
            now = led.log.size
        assert m.admit(m.arts["d1"], now) is admitted, (extra, run.ran)
        assert judge_history(run) == [], (extra, run.ran)


def test_a_withdrawn_approval_counts_for_no_use(
    base: testkit.Template[None], tmp_path: Path
) -> None:
    """R7 (withdraw26): approver-a withdraws approver-b's approval of a dataset two approvals
    were needed for, after a checkpoint was trained on it: the checkpoint fails (as it would
    had the data been revoked) and the dataset is no longer admitted, on every path; a new
    approval by approver-b counts again for a use now, not for the checkpoint."""
    steps = [Step("record", ("b1", "producer-a", "cartpole@1", False)),
             Step("dataset", ("d1", "producer-a", ("b1",), "train")),
             Step("policy", ("threshold-2", 0)),
             Step("approve", ("d1", "approver-a")),
             Step("approve", ("d1", "approver-b")),
             Step("train", ("c1", "d1", None)),
             Step("unapprove", ("d1", "approver-a"))]
    for extra, admitted in (((), False), ((Step("approve", ("d1", "approver-b")),), True)):
        run = run_history(tmp_path / f"h{len(extra)}", base, [*steps, *extra])
        assert not run.problems, run.problems
        m = run.model
        assert "unapprove(d1, approver-a) -> ok" in run.ran, run.ran
        assert not m.checkpoint_ok(m.arts["c1"]), run.ran
        with run.as_user(), Ledger.open(run.home) as led:
            now = led.log.size
        assert m.admit(m.arts["d1"], now) is admitted, (extra, run.ran)
        assert judge_history(run) == [], (extra, run.ran)
