"""The outside check of rev18: every path that answers "may this be trusted?" answers alike.

One question ("may this checkpoint / batch / dataset be trusted?") is answered by several
paths; where one says yes and another no on the same evidence, an attacker picks the lenient
one, and an auditor trusts the answer they were shown. This module builds scenarios
(`SCENARIOS`: genuine ledgers, then the attacks of the tamper and attack kits), runs every path
that applies on the same evidence, records each `Outcome` (accept or refuse, the exit code, the
first problem named) and checks (`disagreements`):

1. **The expected verdict, on every path**: each scenario says whether its checkpoint may be
   trusted, its dataset trained on (and, in the evaluation world, the checkpoint released); a
   path that answers otherwise fails, unless the pair is in `EXCEPTIONS` (where the design
   makes that path differ, each argued in docs/SECURITY.md, rev18), and an exception that no
   longer holds fails too. The record paths (``verify DS``, the vendor's bundle) must answer
   as ``verify DS``.
2. **Order**: a dataset admitted verifies as a record; a checkpoint that verifies with its data
   re-hashed verifies with ``--skip-data``; a release is of a checkpoint that verifies.
3. **Exit codes**: 0 accepted, 1 refused (no scenario is an operational problem; ``impact``
   exits 0 when its answer is whole, whatever it lists); never 2 or 4 or a traceback; a
   refusal names a problem (a ``FAIL:`` line).
4. **Text and JSON agree**: the exit code, the ``FAIL:`` lines, the verdict (``ok`` /
   ``admitted``) and the check counts against ``N of M checks failed``.
5. **One verifier, one answer**: the ledger's command lines on a checkpoint (``verify``,
   ``--skip-data``, ``--policy ROOT``, ``lineage``) name the same first problem.

Paths (`CHECKPOINT_PATHS`, `DATASET_PATHS`, `RECORD_PATHS`, `BATCH_PATHS`, and `p_release` /
`p_eval`):

- checkpoint CK: ``verify CK`` (text and ``--json``, ``--skip-data``, ``--policy ROOT``: the
  ledger's first policy), ``lineage CK``, ``impact`` of a batch of its lineage (CK's node in
  the graph), ``Ledger.verify`` and ``Ledger.lineage``, ``export CK`` then ``verify BUNDLE`` and
  ``python -m trajledger.verify BUNDLE`` under the same root policy, another organisation's
  ``import`` then ``verify`` (quickstart world), ``eval`` (evaluation world), ``export CK
  --format sigstore`` (a plain format: redo20);
- dataset DS: ``admit DS``, ``Ledger.admit``, ``Ledger.training`` (the in-process run's gate),
  ``train --dataset DS`` (the runner's gate);
- release: ``release CK`` (evaluation world);
- record: ``verify DS``; the vendor's first bundle by ``verify BUNDLE`` and ``python -m
  trajledger.verify`` (exchange world);
- batch (a batch of the checkpoint's lineage): ``verify BATCH``, whose answer the plain exports
  ``export BATCH --format sigstore|parquet|jsonl`` must give (redo20).

Worlds, each a fresh copy per scenario with its user's state: the quickstart ledger (and a
buyer of it: `build_buyer`), the exchange tests' vendor and buyer (tests/e2e/test_updates.py),
the evaluation tests' ledger, smaller (`build_evals`). Size: 22 scenarios, 18 to 22 paths each
(about 500 command runs); about 27 CPU-s in all (``-n 0``: 23.6 s user, 3.7 s system, at load
6 to 8; rev18's 19 scenarios of 13 to 17 paths: 20.3 CPU-s, at load 5).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import re
import shutil
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import testkit
from click.testing import Result

from trajledger import Ledger
from trajledger.runner.cli import main

# -- outcomes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What one path answered: accept or refuse, its exit code, the first problem named."""

    accept: bool
    exit: int
    problem: str = ""

    def __str__(self) -> str:
        verdict = "accept" if self.accept else "refuse"
        return f"{verdict} (exit {self.exit}){': ' + self.problem if self.problem else ''}"


@dataclass
class World:
    """A ledger a scenario runs on: its directory, its user's state, what it holds."""

    home: Path
    state: Path
    checkpoint: str
    dataset: str
    root_batch: str
    """A batch of the checkpoint's lineage (``impact`` starts from it)."""
    work: Path
    """A directory of the test's for what the paths write (bundles, policies)."""
    root: Path
    """The trust root's policy file (`root_policy`)."""
    vendor: Any = None
    """(exchange world) the vendor (`test_updates.Vendor`) whose bundle the buyer imported."""
    notes: list[str] = field(default_factory=list)
    """Problems of the harness's own checks (exit codes, text against JSON)."""
    ahead: dt.timedelta = dt.timedelta(0)
    """How far ahead of the system's clock the verifiers' clock is set while judging."""
    exporter: Path | None = None
    """The state of the user who exports the bundle (None: this world's user); the forked
    log's bundle comes from the one who forked it."""
    approver: str = "approver-a"
    """A key of the approver role (revokes)."""
    suite: str | None = None
    """(evaluation world) the regression suite the release rules name; ``eval`` and
    ``release`` are paths of this world only."""
    script: Path | None = None
    """(evaluation world) the evaluating command (`test_evaluations.EVALUATE`)."""
    passphrase: str | None = None
    """The keys' passphrase (None: keys in the clear)."""
    buyer: tuple[Path, Path] | None = None
    """(quickstart world) another organisation's ledger and user state, whose policy trusts
    the quickstart's keys and log (`build_buyer`): ``import`` then ``verify`` there."""

    def run(self, *args: str | Path, state: Path | None = None) -> Result:
        """``trajledger --ledger HOME ARGS`` in process, as this world's user (or as the user
        of the state directory ``state``)."""
        return testkit.new_runner().invoke(
            main, ["--ledger", str(self.home), *map(str, args)],
            env={testkit.STATE_ENV: str(state or self.state),
                 "TRAJLEDGER_PASSPHRASE": self.passphrase},
        )  # fmt: skip

    @contextlib.contextmanager
    def as_user(self) -> Iterator[None]:
        """The block runs as this world's user (its state directory)."""
        with pytest.MonkeyPatch.context() as m:
            m.setenv(testkit.STATE_ENV, str(self.state))
            yield


def fail_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("FAIL: ")]


def first_problem(stderr: str) -> str:
    """The first problem a refusal names: the line after the summary (``N of M checks
    failed``, ``refused, N problem(s)``), else the first ``FAIL:`` line, without its
    ``FAIL: <subject>: `` prefix."""
    lines = fail_lines(stderr)
    if len(lines) > 1 and re.search(r": \d+ of \d+ checks failed|: refused[ ,]", lines[0]):
        lines = lines[1:]
    if not lines:
        return ""
    return lines[0].removeprefix("FAIL: ").split(": ", 1)[-1][:200]


def outcome(world: World, name: str, r: Result) -> Outcome:
    """The `Outcome` of a command; checks the design of its exit code on the way."""
    if r.exit_code not in (0, 1, 3) or "Traceback" in r.output or "BUG:" in r.stderr:
        world.notes.append(f"{name}: exit {r.exit_code} (not 0, 1 or 3)\n{r.output[-800:]}")
    elif r.exit_code != 0 and not fail_lines(r.stderr):
        world.notes.append(f"{name}: exit {r.exit_code} with no FAIL line\n{r.stderr[-800:]}")
    return Outcome(r.exit_code == 0, r.exit_code, first_problem(r.stderr))


def _untimed(lines: list[str]) -> list[str]:
    """The lines without the clock's reading (``judged at <time>``): the two runs of
    `text_and_json` may fall in different seconds (a flake of the 'expired approval'
    scenario under load, redo20)."""
    return [re.sub(r"judged at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "judged at T", x)
            for x in lines]


def text_and_json(world: World, name: str, args: list[str], verdict: str) -> Outcome:
    """Run ``args`` in text and with ``--json``; they must agree: the exit code, the ``FAIL:``
    lines, the JSON's ``verdict`` member with the exit code, and its check counts with the
    text's ``N of M checks failed``."""
    text, as_json = world.run(*args), world.run(*args, "--json")
    got = outcome(world, name, text)
    lines = fail_lines(text.stderr)
    if (text.exit_code, _untimed(lines)) != (as_json.exit_code,
                                             _untimed(fail_lines(as_json.stderr))):
        world.notes.append(f"{name}: text and --json differ: exit {text.exit_code} vs "
                           f"{as_json.exit_code}\n{text.stderr[-600:]}\n--\n"
                           f"{as_json.stderr[-600:]}")  # fmt: skip
    if as_json.exit_code not in (0, 1) or not as_json.stdout:
        return got  # no report: an operational error, or refused before any graph (a fork)
    try:
        report = json.loads(as_json.stdout)
        said = report[verdict]
    except (ValueError, KeyError, TypeError) as e:
        world.notes.append(f"{name} --json: no {verdict!r}: {e}: {as_json.stdout[:300]}")
        return got
    if said is not (as_json.exit_code == 0):
        world.notes.append(f"{name} --json: {verdict} {said} with exit {as_json.exit_code}")
    counts = re.search(r": (\d+) of (\d+) checks failed$", lines[0]) if lines else None
    report = report.get("report", report)  # admit nests the report
    if counts and (int(counts[1]), int(counts[2])) != (report.get("failed"), report.get("checks")):
        world.notes.append(f"{name}: text says {counts[0]!r}, --json failed "
                           f"{report.get('failed')} of {report.get('checks')}")
    return got


# -- the paths -----------------------------------------------------------------------------------


def p_verify(w: World) -> Outcome:
    return text_and_json(w, "verify", ["verify", w.checkpoint], "ok")


def p_verify_skip_data(w: World) -> Outcome:
    return text_and_json(w, "verify --skip-data", ["verify", w.checkpoint, "--skip-data"], "ok")


def p_lineage(w: World) -> Outcome:
    return text_and_json(w, "lineage", ["lineage", w.checkpoint], "ok")


def p_impact(w: World) -> Outcome:
    """``impact`` of a batch of the checkpoint's lineage: the checkpoint's node in the graph
    (``impact`` exits 0 when its answer is whole, whatever it lists: docs/cli.md). Accepted:
    its status and lineage ``ok``."""
    r = w.run("impact", w.root_batch, "--json")
    got = outcome(w, "impact", r)
    if not r.stdout:  # refused before any graph (the log): the refusal is the answer
        return got
    report = json.loads(r.stdout)
    digest = json.loads(w.run("show", w.checkpoint, "--json").stdout)["digest"]
    node = next((n for n in report["nodes"] if n["id"] == digest), None)
    if node is None:
        return Outcome(False, r.exit_code, "the checkpoint is not in the impact graph")
    bad = [c for c in node["checks"] if c["status"] == "fail"]
    problem = f"{bad[0]['what']}: {bad[0]['detail']}" if bad else ""
    if node["lineage"] != "ok" and not problem:
        problem = "its lineage fails"
    return Outcome(node["status"] != "fail" and node["lineage"] == "ok", r.exit_code, problem)


def _api(w: World, call: Callable[[Ledger], Any]) -> Outcome:
    """A library call as this world's user: a report (its ``ok``), or an exception, whose
    exit code is the one the command line would map it to (`clikit.exit_code_for`); one that
    maps to a bug is raised."""
    from trajledger.ledger.clikit import EXIT_BUG, exit_code_for
    from trajledger.runner.admission import DataRefusedError

    with w.as_user():
        try:
            report = call(Ledger.open(w.home))
        except DataRefusedError as e:
            return Outcome(False, exit_code_for(e), str(e).splitlines()[-1][:200])
        except Exception as e:
            if exit_code_for(e) == EXIT_BUG:
                raise
            return Outcome(False, exit_code_for(e), f"{type(e).__name__}: {str(e)[:200]}")
    ok = getattr(report, "ok", True)
    return Outcome(ok, 0 if ok else 1, "" if ok else report.failures()[0][:200])


def p_api_verify(w: World) -> Outcome:
    return _api(w, lambda led: led.verify(w.checkpoint))


def p_api_lineage(w: World) -> Outcome:
    return _api(w, lambda led: led.lineage(w.checkpoint))


def root_policy(w: World) -> Path:
    """The trust root: the ledger's first policy, as the world was built (``policy.toml``,
    keys inline). The ledger's own paths start from its log's first policy and follow its
    signed successions; a policy given (``--policy``) is a trust root too, whose successors
    are followed, and records before it are judged by it. So every path is given this one."""
    return w.root


def p_verify_root(w: World) -> Outcome:
    return text_and_json(w, "verify --policy", ["verify", w.checkpoint, "--policy",
                                                root_policy(w)], "ok")


def _bundle(w: World) -> Path | Outcome:
    out = w.work / "ck.tar.zst"
    if not out.exists():
        r = w.run("export", w.checkpoint, "--out", out, state=w.exporter)
        if r.exit_code != 0:
            return outcome(w, "export", r)
    return out


def p_verify_bundle(w: World) -> Outcome:
    b = _bundle(w)
    if isinstance(b, Outcome):
        return b
    return text_and_json(w, "verify BUNDLE", ["verify", b, "--policy", root_policy(w)], "ok")


def standalone(w: World, bundle: Path, policy: Path) -> Outcome:
    """``python -m trajledger.verify BUNDLE --policy P`` in process (its ``main``)."""
    from trajledger.verify.__main__ import main as verify_main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = verify_main([str(bundle), "--policy", str(policy)])
    if code not in (0, 1, 3):
        w.notes.append(f"python -m trajledger.verify: exit {code}\n{err.getvalue()[-800:]}")
    return Outcome(code == 0, code, first_problem(err.getvalue()))


def p_standalone(w: World) -> Outcome:
    b = _bundle(w)
    if isinstance(b, Outcome):
        return b
    return standalone(w, b, root_policy(w))


def p_buyer(w: World) -> Outcome | None:
    """Another organisation takes the bundle in (``import``: verified under its policy) and
    verifies the checkpoint in its own ledger. Accepted when both exit 0 (an import of a
    revoked lineage takes it in as revoked: the verify there refuses)."""
    if w.buyer is None:
        return None  # the quickstart world's only
    b = _bundle(w)
    if isinstance(b, Outcome):
        return b
    home, state = w.buyer
    buyer = World(home, state, w.checkpoint, "", "", w.work, home / "policy.toml", notes=w.notes,
                  passphrase=testkit.TEST_PASSPHRASE)
    r = buyer.run("import", b, "--key", "b1", "--key", "b2")
    if r.exit_code != 0:
        return outcome(w, "import", r)
    return text_and_json(buyer, "verify (buyer)", ["verify", w.checkpoint], "ok")


def p_admit(w: World) -> Outcome:
    return text_and_json(w, "admit", ["admit", w.dataset], "admitted")


def p_api_admit(w: World) -> Outcome:
    return _api(w, lambda led: led.admit(w.dataset))


def p_training(w: World) -> Outcome:
    """``Ledger.training(DS, ...)``, the in-process run (its gate on entry; left at once,
    nothing saved)."""

    def enter(led: Ledger) -> None:
        with led.training(w.dataset, key="trainer", name="rev18-run", version="1"):
            pass

    return _api(w, enter)


def p_train(w: World) -> Outcome:
    """The runner's gate: ``train --dataset DS`` (last: an admission trains and records)."""
    return outcome(w, "train", w.run("train", "--dataset", w.dataset, "--key", "trainer",
                                     "--name", "rev18-gate", "--version", "1", "--seed", "18"))


def p_eval(w: World, mode: str = "pass") -> Outcome:
    """``eval CK --suite S -- COMMAND`` (every episode passed): the checkpoint's lineage is
    verified before anything is read."""
    assert w.suite is not None and w.script is not None
    return outcome(w, "eval", w.run("eval", w.checkpoint, "--suite", w.suite, "--key",
                                    "evaluator", "--", sys.executable, w.script, mode))


def p_release(w: World) -> Outcome:
    """``release CK``: the policy's [release] rules over the checkpoint's evaluations, and its
    lineage verified."""
    return outcome(w, "release", w.run("release", w.checkpoint, "--key", w.approver))


def judged(w: World) -> dict[str, Outcome]:
    """(evaluation world) Each evaluation and release of the ledger, in log order, by two
    paths: ``verify REF`` and REF's node in ``impact`` of the root batch (as `p_impact`), which
    must answer alike (left23: an evaluation on a suite revoked since was ``ok`` there)."""
    arts = json.loads(w.run("query", "artifacts", "--json").stdout)
    refs = sorted((a["log_index"], a["kind"], a["digest"]) for a in arts
                  if a["kind"] in ("evaluation", "release"))
    r = w.run("impact", w.root_batch, "--json")
    nodes = {n["id"]: n for n in json.loads(r.stdout)["nodes"]} if r.stdout else {}
    out = {}
    for i, kind, digest in refs:
        out[f"verify {kind} {i}"] = text_and_json(w, f"verify {kind} {i}", ["verify", digest],
                                                  "ok")
        node = nodes.get(digest)
        bad = [c for c in node["checks"] if c["status"] == "fail"] if node else []
        out[f"impact: {kind} {i}"] = Outcome(
            node is not None and not bad and node["lineage"] == "ok", r.exit_code,
            f"{bad[0]['what']}: {bad[0]['detail']}" if bad else
            "" if node is not None and node["lineage"] == "ok" else "its lineage fails")
    return out


def p_verify_dataset(w: World) -> Outcome:
    return text_and_json(w, "verify DS", ["verify", w.dataset], "ok")


def p_vendor_bundle(w: World) -> Outcome | None:
    """(exchange world) the vendor's first bundle (its dataset), verified by the buyer's
    user under the buyer's policy: what ``verify DS`` answers in the buyer's ledger."""
    if w.vendor is None:
        return None
    return text_and_json(w, "verify BUNDLE (vendor's)",
                         ["verify", w.vendor.bundle, "--policy", w.root], "ok")


def p_vendor_standalone(w: World) -> Outcome | None:
    return None if w.vendor is None else standalone(w, w.vendor.bundle, w.root)


def plain_export(w: World, ref: str, fmt: str) -> Outcome:
    """``export REF --format FMT``, a plain format (no verdict travels with it: review
    redo20): accepted when written (exit 0)."""
    out = w.work / f"plain-{fmt}-{len(list(w.work.iterdir()))}"
    return outcome(w, f"export --format {fmt}", w.run("export", ref, "--format", fmt, "--out",
                                                      out))


def p_export_sigstore(w: World) -> Outcome:
    return plain_export(w, w.checkpoint, "sigstore")


def p_verify_batch(w: World) -> Outcome:
    return text_and_json(w, "verify BATCH", ["verify", w.root_batch], "ok")


def p_batch_sigstore(w: World) -> Outcome:
    return plain_export(w, w.root_batch, "sigstore")


def p_batch_parquet(w: World) -> Outcome:
    return plain_export(w, w.root_batch, "parquet")


def p_batch_jsonl(w: World) -> Outcome:
    return plain_export(w, w.root_batch, "jsonl")


CHECKPOINT_PATHS: dict[str, Callable[[World], Outcome | None]] = {
    "verify": p_verify,
    "verify --skip-data": p_verify_skip_data,
    "verify --policy ROOT": p_verify_root,
    "lineage": p_lineage,
    "impact": p_impact,
    "Ledger.verify": p_api_verify,
    "Ledger.lineage": p_api_lineage,
    "verify BUNDLE": p_verify_bundle,
    "python -m trajledger.verify": p_standalone,
    "import, verify (buyer)": p_buyer,
    "export --format sigstore": p_export_sigstore,
}
"""The paths that judge "may this checkpoint be trusted?": each must answer
`Scenario.checkpoint` (a path that does not apply to a world answers None)."""

DATASET_PATHS: dict[str, Callable[[World], Outcome | None]] = {
    "admit": p_admit,
    "Ledger.admit": p_api_admit,
    "Ledger.training": p_training,
    "train": p_train,
}
"""The paths that judge "may this dataset be trained on?": each must answer
`Scenario.dataset` (the last two record a refusal; an admission by ``train`` trains)."""

RECORD_PATHS: dict[str, Callable[[World], Outcome | None]] = {
    "verify DS": p_verify_dataset,
    "verify BUNDLE (vendor's)": p_vendor_bundle,
    "python -m trajledger.verify (vendor's)": p_vendor_standalone,
}
"""The paths that judge "is this dataset's record sound (signed, logged, not revoked)?": the
reference is ``verify DS``, whose answer the others must give (no expected verdict: the
order property ties it to ``admit``)."""


BATCH_PATHS: dict[str, Callable[[World], Outcome | None]] = {
    "verify BATCH": p_verify_batch,
    "export BATCH --format sigstore": p_batch_sigstore,
    "export BATCH --format parquet": p_batch_parquet,
    "export BATCH --format jsonl": p_batch_jsonl,
}
"""The paths that hand a rollout batch of the lineage (`World.root_batch`) on: the plain
exports (model-signing is a checkpoint's, with a P-256 trainer key: tests/interop/
test_model_signing.py; minari needs spaces the quickstart's batches do not record:
tests/e2e/test_rollout_io_cli.py) must answer as ``verify BATCH`` (review redo20)."""


# -- the scenarios -------------------------------------------------------------------------------


def _blob(w: World, ref: str, path: str) -> Path:
    """The store file of the file ``path`` of artifact ``ref``."""
    files = json.loads(w.run("show", ref, "--json").stdout)["files"]
    digest = next(f["digest"] for f in files if f["path"] == path)[7:]
    return w.home / "objects" / "sha256" / digest[:2] / digest[2:4] / digest


def revoke_batch(w: World) -> None:
    r = w.run("revoke", w.root_batch, "--key", w.approver, "--reason", "leak")
    assert r.exit_code == 0, r.output


def unapproved(w: World) -> None:
    w.dataset = "cartpole-unapproved@1"


def holdout_in_training(w: World) -> None:
    w.dataset = "cartpole-holdout@1"


def expired_approval(w: World) -> None:
    """A dataset approved for a day and trained on at once; judged two days later (`AHEAD`):
    the checkpoint's use was approved, the dataset is not to be trained on again."""
    for args in (["dataset", "create", "cartpole-brief", "--version", "1", "--split", "train",
                  "--batch", w.root_batch, "--key", "vendor"],
                 ["approve", "cartpole-brief@1", "--key", "approver-a", "--expires", "1d"],
                 ["approve", "cartpole-brief@1", "--key", "approver-b", "--expires", "1d"],
                 ["train", "--dataset", "cartpole-brief@1", "--key", "trainer", "--name", "brief",
                  "--version", "1", "--seed", "7"]):
        r = w.run(*args)
        assert r.exit_code == 0, r.output
    w.checkpoint, w.dataset = "brief@1", "cartpole-brief@1"
    w.ahead = AHEAD


AHEAD = dt.timedelta(days=2)


def set_clock_ahead(monkeypatch: pytest.MonkeyPatch, ahead: dt.timedelta) -> None:
    """The verifiers' clock (`trajledger.verify.lineage`'s, read from the system) ``ahead``:
    every path judges in this process (tests/e2e/test_clock_set_back.py sets it back)."""
    from trajledger.verify import lineage

    class Ahead(dt.datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> Ahead:  # type: ignore[override]
            return super().now(tz) + ahead

    monkeypatch.setattr(lineage, "dt", types.SimpleNamespace(
        datetime=Ahead, UTC=dt.UTC, timedelta=dt.timedelta, timezone=dt.timezone))


def forked_log(w: World) -> None:
    """The user saw the log with one more entry; the ledger now holds another log of the same
    key and size whose last entry differs (a fork, as a log writer with the key can make)."""
    other = w.work / "fork"
    shutil.copytree(w.home, other, symlinks=True)
    elsewhere = w.work / "fork-state"
    shutil.copytree(w.state, elsewhere)
    for home, state, note in ((w.home, w.state, "seen"), (other, elsewhere, "forked")):
        r = testkit.new_runner().invoke(
            main, ["--ledger", str(home), "approve", "cartpole-unapproved@1", "--key",
                   "approver-a", "--note", note], env={testkit.STATE_ENV: str(state)})
        assert r.exit_code == 0, r.output
    shutil.rmtree(w.home)
    shutil.copytree(other, w.home, symlinks=True)
    w.exporter = elsewhere


def rotated_log_key(w: World) -> None:
    r = w.run("log", "rotate-key")
    assert r.exit_code == 0, r.output


def rotated_then_trained(w: World) -> None:
    """The log's key rotated, then a checkpoint trained under the new key: the paths follow
    the signed handover to the entries after it (redo20)."""
    rotated_log_key(w)
    r = w.run("train", "--dataset", w.dataset, "--key", "trainer", "--name", "after-rotation",
              "--version", "1", "--seed", "20")
    assert r.exit_code == 0, r.output
    w.checkpoint = r.stdout.strip().splitlines()[-1]


def erased_batch(w: World) -> None:
    r = w.run("erase", w.root_batch, "--key", "approver-a", "--reason", "consent")
    assert r.exit_code == 0, r.output


def missing_object(w: World) -> None:
    _blob(w, w.root_batch, "steps.parquet").unlink()


def flipped_blob(w: World) -> None:
    p = _blob(w, w.root_batch, "steps.parquet")
    p.chmod(0o644)
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 1
    p.write_bytes(bytes(data))


def _successor_without_trainer(w: World, more: str = "") -> None:
    """Record policy serial 2: the trainer role held by the vendor's key instead of the
    trainer's, and ``more`` (TOML) appended."""
    text = (w.home / "policy.toml").read_text().replace("serial = 1", "serial = 2")
    pem = "-----BEGIN PUBLIC KEY-----"
    vendor = text[text.index(pem):text.index("-----END PUBLIC KEY-----") + 24]
    start, end = text.index("[roles.trainer]"), text.index("[roles.log]")
    text = (text[:start] + f'[roles.trainer]\nkeys = ["""{vendor}\n"""]\nthreshold = 1\n\n'
            + text[end:] + more)
    two = w.work / "policy-2.toml"
    two.write_text(text)
    r = w.run("policy", "set", two, "--key", "approver-a", "--key", "approver-b", "--yes")
    assert r.exit_code == 0, r.output


def successor_policy_without_trainer(w: World) -> None:
    """A signed successor policy that no longer holds the trainer's key (the vendor's instead):
    what the trainer signed before it is judged by the roles it was signed under, so it stands
    (a key to distrust is revoked, ``revoked_keys``); the trainer records nothing more."""
    _successor_without_trainer(w)


def compromised_trainer_key(w: World) -> None:
    """A signed successor policy declares the trainer's key compromised since the start
    (``revoked_keys``, ``compromised_since = 0``): what it signed counts for nothing."""
    keys = json.loads(w.run("key", "list", "--json").stdout)
    trainer = next(k["keyid"] for k in keys if k["name"] == "trainer")
    _successor_without_trainer(w, f'\n[[revoked_keys]]\nkey = "{trainer}"\n'
                                  'compromised_since = 0\nreason = "stolen laptop"\n')


def compromised_key(w: World, name: str, instead: str, reason: str = "phished") -> None:
    """A signed successor policy in which the key ``name`` is replaced, in every role it held,
    by the key ``instead`` (made when the ledger has none of that name), and declared
    compromised since the start (``revoked_keys``, ``compromised_since = 0``): whatever
    ``name`` signed counts for nothing (redo20)."""
    if not (w.home / "keys" / f"{instead}.pub").exists():
        r = w.run("key", "new", instead, "--no-encrypt")
        assert r.exit_code == 0, r.output
    text = (w.home / "policy.toml").read_text().replace("serial = 1", "serial = 2")
    pem = {k.stem: k.read_text().strip() for k in (w.home / "keys").glob("*.pub")}
    assert pem[name] in text, name
    text = text.replace(pem[name], pem[instead])
    keys = json.loads(w.run("key", "list", "--json").stdout)
    keyid = next(k["keyid"] for k in keys if k["name"] == name)
    text += (f'\n[[revoked_keys]]\nkey = "{keyid}"\ncompromised_since = 0\n'
             f'reason = "{reason}"\n')
    two = w.work / "policy-2.toml"
    two.write_text(text)
    r = w.run("policy", "set", two, "--key", "approver-a", "--key", "approver-b", "--yes")
    assert r.exit_code == 0, r.output


def compromised_producer_key(w: World) -> None:
    """The vendor's key (the producer's: every batch and dataset) is declared compromised; the
    trainer's key records for the producer role from then on."""
    compromised_key(w, "vendor", "trainer")


def void_approval(w: World) -> None:
    """An approval that no longer counts: the key of approver-a, which approved every dataset,
    is declared compromised (a new key, approver-c, approves in its place), so each dataset
    has one approval of the two its use needs."""
    compromised_key(w, "approver-a", "approver-c")
    w.approver = "approver-b"


def approval_of(w: World, ref: str, approver: str) -> str:
    """The envelope digest of ``approver``'s approval of ``ref`` (what ``approve`` printed)."""
    from trajledger.ledger.catalog import Catalog

    with w.as_user():
        led = Ledger.open(w.home)
        try:
            digest, keyid = Catalog(led).resolve(ref).digest, led.keys.public(approver).keyid
            state = led.trust_state()
            return next(e.envelope for i in state.about(digest)
                        if (e := state.entry(i)) is not None and e.kind == "approval"
                        and keyid in e.signers)
        finally:
            led.close()


def withdrawn_approval(w: World) -> None:
    """approver-a withdraws its approval of the checkpoint's dataset (2 of 2 required), after
    the checkpoint was trained on it: as a revocation of the data would, it fails the
    checkpoint, and the dataset has one approval of the two its use needs (withdraw26)."""
    envelope = approval_of(w, w.dataset, "approver-a")
    r = w.run("revoke", envelope, "--key", "approver-a", "--reason", "the wrong version")
    assert r.exit_code == 0, r.output


def replaced_policy_draft(w: World) -> None:
    """The attacker writes ``policy.toml`` (the user's draft): a policy that trusts nothing.
    Decisions apply the signed policy in force."""
    (w.home / "policy.toml").write_text('name = "attacker"\nserial = 9\n')


def vendor_revokes_after_import(w: World) -> None:
    """The vendor revokes its batch after the buyer imported, approved and trained on it; the
    buyer imports the vendor's update bundle."""
    vendor = w.vendor
    applied = vendor.size()
    vendor.run("revoke", w.root_batch, "--key", "vendor", "--reason", "consent withdrawn")
    update = w.work / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    r = w.run("import", update, "--key", "approver")
    assert r.exit_code == 0, r.output


def bundle_then_revocation(w: World) -> None:
    """The bundle was exported before the batch was revoked (a vendor handing an old bundle,
    which hides the revocation): the user has seen the log since."""
    out = _bundle(w)
    assert isinstance(out, Path), out
    revoke_batch(w)


def revoked_suite(w: World) -> None:
    """A release of the evaluated checkpoint, then its suite revoked: the evaluation and the
    release no longer hold (``verify`` of each refuses); the checkpoint does."""
    assert p_release(w).exit == 0
    r = w.run("revoke", w.suite, "--key", w.approver, "--reason", "leaked into training")
    assert r.exit_code == 0, r.output


def failing_evaluation(w: World) -> None:
    """After the passing evaluation, a failing one on the same suite (the newest counts: a
    release may not hide it)."""
    assert p_eval(w, "fail").exit == 0


@dataclass(frozen=True)
class Scenario:
    name: str
    world: str
    """``quickstart`` or ``exchange``."""
    mutate: Callable[[World], None]
    checkpoint: bool
    """Whether "may the checkpoint be trusted?" is to be answered yes."""
    dataset: bool
    """Whether "may the dataset be trained on?" is to be answered yes."""
    release: bool | None = None
    """(evaluation world) whether "may the checkpoint be released?" is to be answered yes."""


def nothing(_w: World) -> None:
    pass


SCENARIOS = [
    Scenario("genuine", "quickstart", nothing, True, True),
    Scenario("revoked batch", "quickstart", revoke_batch, False, False),
    Scenario("unapproved dataset", "quickstart", unapproved, True, False),
    Scenario("holdout split in training", "quickstart", holdout_in_training, True, False),
    Scenario("expired approval", "quickstart", expired_approval, True, False),
    Scenario("forked log", "quickstart", forked_log, False, False),
    Scenario("bundle older than a revocation", "quickstart", bundle_then_revocation, False,
             False),
    Scenario("rotated log key", "quickstart", rotated_log_key, True, True),
    Scenario("erased batch", "quickstart", erased_batch, True, False),
    Scenario("missing object", "quickstart", missing_object, False, False),
    Scenario("flipped data blob", "quickstart", flipped_blob, False, False),
    Scenario("successor policy without the trainer", "quickstart",
             successor_policy_without_trainer, True, True),
    Scenario("trainer key compromised", "quickstart", compromised_trainer_key, False, False),
    Scenario("replaced policy draft", "quickstart", replaced_policy_draft, True, True),
    Scenario("producer key compromised", "quickstart", compromised_producer_key, False, False),
    Scenario("approval no longer counts", "quickstart", void_approval, False, False),
    Scenario("approval withdrawn", "quickstart", withdrawn_approval, False, False),
    Scenario("rotated log key, then trained", "quickstart", rotated_then_trained, True, True),
    Scenario("imported from a vendor", "exchange", nothing, True, True),
    Scenario("vendor revocation after import", "exchange", vendor_revokes_after_import, False,
             False),
    Scenario("evaluated", "evals", nothing, True, True, True),
    Scenario("revoked after evaluation", "evals", revoke_batch, False, False, False),
    Scenario("failing evaluation after a passing one", "evals", failing_evaluation, True, True,
             False),
    Scenario("suite revoked after a release", "evals", revoked_suite, True, True, False),
]


def judge(
    w: World, paths: dict[str, Callable[[World], Outcome | None]]
) -> dict[str, Outcome]:
    """Each path's outcome (a path that does not apply to the world answers None)."""
    return {name: o for name, path in paths.items() if (o := path(w)) is not None}


def build_buyer(home: Path, vendor: Path) -> None:
    """Another organisation: its own log, approvers b1 and b2, and `testkit.BUYER_POLICY`
    trusting the quickstart ledger ``vendor``'s keys and log (tests/e2e/test_progress.py)."""
    testkit.run_commands(home, "init --origin buyer/log", "key new b1", "key new b2")
    trust = home / "trust"
    trust.mkdir()
    for pub in [*(vendor / "keys").glob("*.pub"), *(home / "keys").glob("b*.pub")]:
        shutil.copy(pub, trust / pub.name)
    # The vendor's key read from its file: the buyer has not used the vendor's log.
    vkeys = f'"{(vendor / "log" / "vkey").read_text().strip()}", "{Ledger.open(home).log.vkey}"'
    (home / "policy.toml").write_text(testkit.BUYER_POLICY.format(vkeys=vkeys))
    testkit.run_commands(home, f"policy set {home / 'policy.toml'} --key b1 --key b2 --yes")


@pytest.fixture(scope="module")
def quickstart(
    quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[testkit.Template[str], testkit.Template[None]]:
    """The quickstart ledger, and a buyer of it."""
    buyer = testkit.build_template(tmp_path_factory.mktemp("buyer"),
                                   lambda home: build_buyer(home, quickstart_template.home))
    return quickstart_template, buyer


def quickstart_world(
    templates: tuple[testkit.Template[str], testkit.Template[None]], tmp_path: Path
) -> World:
    t, buyer = templates
    home = testkit.copy_template(t, tmp_path / "home")
    state = Path(os.environ[testkit.STATE_ENV])
    work = tmp_path / "work"
    work.mkdir()
    with testkit.user_state(tmp_path / "buyer-state") as buyer_state:
        buyer_home = testkit.copy_template(buyer, tmp_path / "buyer")
    shutil.copy(home / "policy.toml", work / "policy-root.toml")
    w = World(home, state, t.value, "cartpole-train@2", "cartpole-random", work,
              work / "policy-root.toml", buyer=(buyer_home, buyer_state))
    r = w.run("show", t.value, "--json")
    w.checkpoint = json.loads(r.stdout)["digest"]
    return w


def exchange_world(tmp_path: Path) -> World:
    """The exchange tests' vendor and buyer (tests/e2e/test_updates.py): the buyer imported
    the vendor's dataset, approved it and trained on it."""
    from test_updates import train_a_buyer

    vendor, buyer, ckpt = train_a_buyer(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    return World(buyer.home, buyer.state, ckpt, "bh@1", vendor.batches[0], work,
                 buyer.home / "policy.toml", vendor=vendor)


def build_evals(home: Path) -> str:
    """The evaluation tests' ledger (tests/e2e/test_evaluations.py: format-2 policy whose
    [release] wants success_rate >= 0.5 on regression@1), smaller: bc@1 on train@1 (10
    episodes), regression@1 (4 episodes), bc@1 evaluated on regression@1 (every episode
    passed: once here, not in each world's copy, ci55)."""
    from test_evaluations import EVALUATE, cartpole_ledger

    from trajledger.runner.rollouts import run_policy

    ledger = cartpole_ledger(home, 10)
    ledger.train("train@1", key="trainer", name="bc", version="1", seed=1)
    reg = run_policy(None, "CartPole-v1", 4, 1000, policy_version="random")
    rb = ledger.record_batch(reg.steps, episodes=reg.episodes, env="cartpole@1",
                             policy="random", key="vendor", name="regression-batch")
    ledger.create_dataset("regression", "1", "regression", [rb.digest], key="vendor")
    script = home.parent / "evaluate.py"
    script.write_text(EVALUATE)
    r = testkit.invoke(home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
                       "--", sys.executable, script, "pass")
    assert r.exit_code == 0, r.output
    return "bc@1"


@pytest.fixture(scope="module")
def evals(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[str]:
    return testkit.build_template(tmp_path_factory.mktemp("evals"), build_evals)


def evals_world(t: testkit.Template[str], tmp_path: Path) -> World:
    """A copy of the evaluation ledger, bc@1 evaluated on regression@1 (every episode
    passed): a release would be recorded."""
    from test_evaluations import EVALUATE

    home = testkit.copy_template(t, tmp_path / "home")
    work = tmp_path / "work"
    work.mkdir()
    w = World(home, Path(os.environ[testkit.STATE_ENV]), t.value, "train@1", "train-batch",
              work, home / "policy.toml", approver="approver", suite="regression@1",
              script=work / "evaluate.py")
    w.script.write_text(EVALUATE)  # type: ignore[union-attr]
    w.checkpoint = json.loads(w.run("show", t.value, "--json").stdout)["digest"]
    return w


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_paths_agree(
    scenario: Scenario,
    quickstart: tuple[testkit.Template[str], testkit.Template[None]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    if scenario.world == "quickstart":
        w = quickstart_world(quickstart, tmp_path)
    elif scenario.world == "evals":
        w = evals_world(request.getfixturevalue("evals"), tmp_path)
    else:
        w = exchange_world(tmp_path)
    scenario.mutate(w)
    if w.ahead:
        set_clock_ahead(monkeypatch, w.ahead)
    got = {**judge(w, CHECKPOINT_PATHS), **judge(w, DATASET_PATHS)}
    got.update(judge(w, RECORD_PATHS))
    got.update(judge(w, BATCH_PATHS))
    if w.suite is not None:
        got["release"] = p_release(w)  # before eval, which records an evaluation
        got["eval"] = p_eval(w)
        got.update(judged(w))
    table = "\n".join(f"  {k:28} {v}" for k, v in got.items())
    print(f"\n{scenario.name}:\n{table}")
    problems = disagreements(scenario, got) + w.notes
    assert not problems, f"{scenario.name}:\n{table}\n\n" + "\n".join(problems)


# -- the properties ------------------------------------------------------------------------------


EXCEPTIONS: dict[tuple[str, str], str] = {
    ("flipped data blob", "verify --skip-data"):
        "compares each blob's size with its manifest, never its bytes: a blob changed in place "
        "passes (the report says 'size only, not re-hashed')",
    ("forked log", "python -m trajledger.verify"):
        "holds no user state, so no checkpoint seen before: a fork of a log is visible only "
        "against one (--known-checkpoint FILE gives it); the ledger's paths use the user's",
    ("bundle older than a revocation", "python -m trajledger.verify"):
        "holds no user state: an older checkpoint of the log is a rollback only against a newer "
        "one seen (--known-checkpoint FILE); the bundle says what was true at its size",
    ("forked log", "import, verify (buyer)"):
        "another organisation that has not used this log holds no checkpoint of it: the "
        "bundle is the first view of the log it takes (a later fork of that view is refused: "
        "tests/e2e/test_exchange_cli.py)",
    ("bundle older than a revocation", "import, verify (buyer)"):
        "another organisation that has not used this log cannot know it grew; the revocation "
        "reaches it in an update bundle ('vendor revocation after import')",
    ("vendor revocation after import", "python -m trajledger.verify (vendor's)"):
        "holds no user state: the vendor's first bundle says what was true at its size; the "
        "buyer's own paths, which saw the update, refuse it (a rollback)",
    ("successor policy without the trainer", "train"):
        "the gate admits the data (admit agrees); the run is refused because the key that "
        "would sign the checkpoint no longer holds the trainer role: who may record, not the data",
    ("successor policy without the trainer", "Ledger.training"):
        "as 'train': the run's signing key is refused before the data is judged",
    ("erased batch", "export BATCH --format parquet"):
        "the batch's record verifies, its data was erased: there is nothing to write (exit 3, "
        "'not in the store (erased ...)'); the record's envelope still leaves as sigstore",
    ("erased batch", "export BATCH --format jsonl"):
        "as 'export BATCH --format parquet': erased data cannot be exported",
    ("suite revoked after a release", "eval"):
        "the checkpoint holds, its suite does not: an evaluation on a revoked suite counts for "
        "nothing (as 'release' says), so eval refuses before it runs the evaluating command",
    ("approval no longer counts", "import, verify (buyer)"):
        "the buyer's own policy lists approver-a among its approvers: a vendor's declared "
        "compromise revokes here only the records of a lineage the key signed that came from "
        "that log (approvals are not revocable artifacts), and the import says 'your policy "
        "still trusts it as approver: record a successor without it' (docs/SECURITY.md, "
        "redo20)",
}
"""Where a path answers otherwise than its claim's expected verdict by design: (scenario, path)
-> why (each argued in docs/SECURITY.md, rev18). An entry whose path answers as the others is
a failure too, so the list holds only what is true."""

CLI_CHECKPOINT = ("verify", "verify --skip-data", "verify --policy ROOT", "lineage")
"""The ledger's own command lines on a checkpoint: one verifier, so one first problem."""


def disagreements(scenario: Scenario, got: dict[str, Outcome]) -> list[str]:
    """Every property the outcomes of one scenario break (module docstring)."""
    out = []
    want = {**dict.fromkeys(CHECKPOINT_PATHS, scenario.checkpoint),
            **dict.fromkeys(DATASET_PATHS, scenario.dataset)}
    want.update(dict.fromkeys(RECORD_PATHS, got["verify DS"].accept))
    want.update(dict.fromkeys(BATCH_PATHS, got["verify BATCH"].accept))
    if "eval" in got:
        want.update({"eval": scenario.checkpoint, "release": scenario.release})
        # Each evaluation's and release's node in the impact graph answers as ``verify REF``.
        want.update({p: got[p.replace("impact: ", "verify ")].accept for p in got
                     if p.startswith("impact: ")})
    for path, expected in want.items():
        if path not in got:
            continue
        o, why = got[path], EXCEPTIONS.get((scenario.name, path))
        if why is None and o.accept != expected:
            out.append(f"{path}: {o}, want {'accept' if expected else 'refuse'}")
        elif why is not None and o.accept == expected:
            out.append(f"{path}: listed in EXCEPTIONS ({why}) but answers as the others: {o}")
    # Order: stricter questions imply laxer ones.
    if got["admit"].accept and not got["verify DS"].accept:
        out.append(f"admit accepts a dataset whose record fails: verify DS {got['verify DS']}")
    if got["verify"].accept and not got["verify --skip-data"].accept:
        out.append("verify accepts, verify --skip-data refuses")
    if "release" in got and got["release"].accept and not got["verify"].accept:
        out.append(f"release accepts a checkpoint verify refuses: {got['verify']}")
    # Exit codes: 0 accepted, 1 refused (no scenario is an operational problem).
    for path, o in got.items():
        if path.startswith("impact") and o.exit == 0:
            pass  # its answer is whole: it exits 0 whatever it lists (docs/cli.md)
        elif o.exit == 3 and (scenario.name, path) in EXCEPTIONS:
            pass  # an operational refusal argued there (erased data cannot be exported)
        elif o.exit != (0 if o.accept else 1):
            out.append(f"{path}: {o}: want exit {0 if o.accept else 1}")
        if not o.accept and not o.problem:
            out.append(f"{path}: refuses naming no problem")
    # One verifier behind the ledger's command lines: the same first problem.
    named = {got[p].problem for p in CLI_CHECKPOINT
             if not got[p].accept and (scenario.name, p) not in EXCEPTIONS}
    if len(named) > 1:
        out.append(f"the command lines name different first problems: {sorted(named)}")
    return out


def test_verify_bundle_of_a_log_never_seen_makes_no_state(
    quickstart: tuple[testkit.Template[str], testkit.Template[None]], tmp_path: Path
) -> None:
    """Finding 1's check reads the user's state of the bundle's log only when there is one: a
    user who never used the log verifies the bundle (exit 0) and is left with no state of it;
    the user who has seen it since a revocation refuses it (a rollback)."""
    from trajledger.ledger.user_state import log_id

    w = quickstart_world(quickstart, tmp_path)
    bundle = _bundle(w)
    assert isinstance(bundle, Path), bundle
    revoke_batch(w)
    stranger = tmp_path / "stranger-state"
    r = w.run("verify", bundle, "--policy", w.root, state=stranger)
    assert r.exit_code == 0, r.output
    vkey = (w.home / "log" / "vkey").read_text().strip()
    assert not (stranger / "logs" / log_id(vkey)).exists()
    r = w.run("verify", bundle, "--policy", w.root)
    assert r.exit_code == 1 and "log fork or rollback: checkpoint rollback" in r.stderr, r.output
    assert ("WARNING: the checkpoint seen before is the newest of this log you have seen (your "
            "trust state): a bundle that does not extend it is a fork, or older and may hide "
            "what the log recorded since (a revocation); ask its sender for one exported "
            "now\n") in r.stderr, r.stderr
    assert "WARNING" not in w.run("verify", bundle, "--policy", w.root, state=stranger).stderr


def test_a_buyer_refusing_what_a_compromised_key_signed_is_told_why(
    quickstart: tuple[testkit.Template[str], testkit.Template[None]], tmp_path: Path
) -> None:
    """redo15 finding 3 (rev18 "Left"): the vendor declares its trainer's key compromised and
    exports the checkpoint that key signed; its export, under its policy, reads nothing of that
    record and leaves its manifest out. The buyer, whose policy trusts the key, refused with
    "manifest … is missing" only. Now the line names the key, the vendor's policy that declares
    it compromised and since when (its reason)."""
    w = quickstart_world(quickstart, tmp_path)
    compromised_trainer_key(w)
    keys = json.loads(w.run("key", "list", "--json").stdout)
    trainer = next(k["keyid"] for k in keys if k["name"] == "trainer")
    bundle = _bundle(w)
    assert isinstance(bundle, Path), bundle
    assert w.buyer is not None
    home, state = w.buyer
    buyer = World(home, state, w.checkpoint, "", "", w.work, home / "policy.toml", notes=w.notes,
                  passphrase=testkit.TEST_PASSPHRASE)
    r = buyer.run("import", bundle, "--key", "b1", "--key", "b2")
    assert r.exit_code == 1, r.output
    assert re.search(
        r"manifest sha256:\w{12}… is missing: the exporter left it out, its record \(log index "
        rf"\d+\) signed by key {trainer[:12]}, which the exporter's policy 'quickstart' serial "
        r"2 declares compromised since log index 0: stolen laptop\n", r.stderr), r.stderr
