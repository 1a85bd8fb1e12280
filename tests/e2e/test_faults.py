"""Fault injection: every write, fsync, rename, mkdir and open-for-writing of an append and of a
whole ``record_batch`` fails in turn (EIO, then ENOSPC), or the process is killed exactly there.

The harness (`faultkit.Faults`) wraps ``os.open``/``os.write``/``os.fsync``/``os.replace``/
``os.rename``/``os.mkdir`` and Python's ``open`` for paths inside the ledger directory; a first
run counts the calls an operation makes, then each run fails call k. An error is raised as the
``OSError`` the OS would give; a kill is a real SIGKILL of a forked child at call k (no
``finally`` runs). Pyarrow's own C++ writes (the Parquet files in ``<ledger>/tmp``) are below
Python and not counted; the derived lookup cache's writes are (a failure there leaves the
operation done).

After each fault: the operation failed cleanly (an operational error, never a bug); the log is
exactly the one before the operation or the one after it; ``log verify`` passes; the earlier
artifact still verifies and the new one verifies or is not recorded; and the next writer works
and leaves no stale leftover (temp files of the dead writer go; the `<ledger>/tmp` directory of a
killed ``record_batch`` is kept until it is an hour old, as its owner is unknown).

CI fails every call once with an error (EIO or ENOSPC, alternating; in process) and kills at
every third call of the append and every fourth of ``record_batch`` (forked children);
``TRAJLEDGER_FAULTS=all`` runs all three at every call of both. Inside the sweep ``fsync`` is a
fault point but is not performed: durability is not what is tested (a kill keeps the page cache).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from faultkit import Faults, Restorer, killed

from trajledger import Ledger
from trajledger.ledger.artifacts import register_environment
from trajledger.ledger.encode import envelope_bytes
from trajledger.ledger.errors import LedgerError
from trajledger.ledger.fsck import leftovers
from trajledger.ledger.log import EntrySpec, verify_log_dir
from trajledger.ledger.record import record_statement
from trajledger.ledger.signing import sign_statement
from trajledger.ledger.status import record_policy
from trajledger.ledger.user_state import state_dir
from trajledger.runner.cli import main
from trajledger.verify import predicates
from trajledger.verify.errors import ProvenanceError
from trajledger.verify.log_entry import LogEntry

ALL = os.environ.get("TRAJLEDGER_FAULTS") == "all"

NewArtifact = Callable[[Ledger, int], "str | None"]
"""Given the ledger and the size before the operation, the digest of the artifact it recorded
(to verify), or None when the log's own checks cover it."""

# -- the ledger and the operations ------------------------------------------------------------


POLICY = """\
name = "faults"
serial = 1
[roles.producer]
keys = ["keys/vendor.pub"]
threshold = 1
[roles.approver]
keys = ["keys/approver-a.pub", "keys/approver-b.pub"]
threshold = 2
[roles.trainer]
keys = ["keys/trainer.pub"]
threshold = 1
[roles.log]
vkeys = ["{vkey}"]
threshold = 1
"""


def rows(episode: str, steps: int = 6) -> list[dict[str, Any]]:
    return [
        {"episode_id": episode, "step": t, "obs": [float(t), 1.0], "action": [float(t % 2)],
         "reward": 1.0, "terminated": t == steps - 1, "truncated": False}
        for t in range(steps)
    ]  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def _no_fsync() -> Iterator[None]:
    """No real fsync in this module (see `Faults`): the sweep runs hundreds of operations."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(os, "fsync", lambda fd: None)
        yield


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A ledger with a policy, an environment and an earlier batch; returns it and the batch."""
    home = tmp_path_factory.mktemp("faults") / "small"
    ledger = Ledger.init(home, origin="test/faults")
    names = ("vendor", "approver-a", "approver-b", "trainer")
    keys = {k: ledger.keys.create(k, encrypt=False) for k in names}
    (home / "policy.toml").write_text(POLICY.format(vkey=ledger.log.vkey))
    record_policy(ledger, home / "policy.toml", [keys["approver-a"], keys["approver-b"]])
    register_environment(ledger, "cartpole", "1", keys["vendor"], gymnasium_id="CartPole-v1")
    earlier = ledger.record_batch(rows("e0"), env="cartpole@1", policy="p", key="vendor").digest
    ledger.log.close()
    return home, earlier


@pytest.fixture(scope="module")
def big(
    small: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str, list[EntrySpec]]:
    """`small` grown to 250 log entries, and 10 more entries (envelopes stored) to append."""
    home = tmp_path_factory.mktemp("faults") / "big"
    shutil.copytree(small[0], home)
    ledger = Ledger.open(home)
    vendor = ledger.keys.signer("vendor")
    specs: list[EntrySpec] = []
    for i in range(257):
        subject = "sha256:" + hashlib.sha256(b"s%d" % i).hexdigest()
        env = sign_statement([("s", subject)], predicates.APPROVAL, {"i": i}, [vendor])
        digest = ledger.store.put_bytes(envelope_bytes(env))
        specs.append(EntrySpec("approval", subject, digest, (vendor.keyid,)))
    n = 250 - ledger.log.size
    ledger.log.append(specs[:n])
    assert ledger.log.size == 250
    ledger.log.close()
    return home, small[1], specs[n : n + 10]  # 250 -> 260 crosses a tile boundary


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def verifies(home: Path, ref: str) -> bool:
    r = CliRunner().invoke(main, ["--ledger", str(home), "verify", ref])
    return r.exit_code == 0


@dataclass
class Outcome:
    faults: int = 0
    clean: int = 0
    problems: list[str] = field(default_factory=list)


def check_after(
    home: Path, before: dict[str, bytes], n0: int, n1: int, new: NewArtifact,
    earlier: str, what: str, out: Outcome,
) -> None:  # fmt: skip
    """The invariants after one fault (see the module docstring)."""
    problems: list[str] = []
    ledger = Ledger.open(home)
    reader = ledger.log
    size = reader.size
    tree = reader.tree_state()[0]
    if size not in (n0, n1) or tree not in (n0, n1):
        problems.append(f"log at size {size} (committed {tree}), want {n0} or {n1}")
    elif reader.entries(0, n0) != _entries(before, n0):
        problems.append("entries before the operation changed")
    # Envelopes and blobs are re-hashed; their signatures are the decisions' business (below).
    report = verify_log_dir(home / "log", store=ledger.store)
    if not report.ok:
        problems.append(f"log verify: {[str(p) for p in report.problems[:3]]}")
    if not verifies(home, earlier):
        problems.append("the earlier batch no longer verifies")
    # The next writer: recovers, publishes a committed tail, removes the dead writer's temps.
    nxt = Ledger.open(home)
    signer = nxt.keys.signer("vendor")
    rec = record_statement(nxt, "next", "sha256:" + "9" * 64, predicates.REVOCATION,
                           {"reason": "next"}, signer)  # fmt: skip
    if rec.index != tree:
        problems.append(f"the next writer appended at {rec.index}, want {tree}")
    digest = new(nxt, n0) if tree == n1 else None
    if digest is not None and not verifies(home, digest):
        problems.append("the new artifact is in the log but does not verify")
    stale = [str(x.path) for x in leftovers(nxt) if x.stale]
    if stale:
        problems.append(f"stale leftovers after the next writer: {stale}")
    report = verify_log_dir(home / "log")
    if not report.ok or report.warnings:
        problems.append(f"after the next writer: {report.problems[:3]} {report.warnings[:3]}")
    out.faults += 1
    if problems:
        out.problems.append(f"{what}: " + "; ".join(problems))
    else:
        out.clean += 1


def _entries(files: dict[str, bytes], n: int) -> list[bytes]:
    from trajledger.verify.tiles import TileReader

    def fetch(rel: str) -> bytes:
        try:
            return files[f"log/{rel}"]
        except KeyError as e:
            raise FileNotFoundError(rel) from e

    return TileReader(fetch, n).entries(0, n)


def run_op(home: Path, op: Callable[[Ledger], object], faults: Faults) -> BaseException | None:
    ledger = Ledger.open(home)
    ledger.log.require_signer()
    ledger.store  # noqa: B018 - opened before the faults, as a running process would have
    with faults.active():
        try:
            op(ledger)
        except (OSError, ProvenanceError) as e:
            return e
    return None


def run_killed(home: Path, op: Callable[[Ledger], object], faults: Faults) -> bool:
    """Run ``op`` in a forked child killed at the fault point; True when it was killed."""
    return killed(lambda: run_op(home, op, faults))


def sweep(
    pristine: Path, work: Path, op: Callable[[Ledger], object], new: NewArtifact,
    earlier: str, kill_every: int,
) -> Outcome:  # fmt: skip
    """Fail each call in turn: with an error (EIO at even calls, ENOSPC at odd ones), and a
    kill at every ``kill_every``-th call; with ``TRAJLEDGER_FAULTS=all``, all three at each."""
    copy = Restorer(pristine, work)
    n0 = Ledger.open(work).log.size
    counting = Faults(str(work))
    assert run_op(work, op, counting) is None
    n1 = Ledger.open(work).log.size
    points = len(counting.calls)
    assert points > 10, counting.calls
    out = Outcome()
    before = snapshot(pristine)
    modes = [("EIO", errno.EIO, False), ("ENOSPC", errno.ENOSPC, False), ("kill", 0, True)]
    for k in range(points):
        for m, (name, code, kill) in enumerate(modes):
            if not ALL and (k % kill_every if kill else (k + m) % 2):
                continue
            copy.restore()
            # Putting the older ledger back is a rollback for the user who saw the newer one:
            # each fault starts as a user who has not seen the work copy yet: no state of the
            # log, and no note of its key (a note without its state is a lost floor, rev25).
            for part in ("logs", "origins"):
                shutil.rmtree(state_dir() / part, ignore_errors=True)
            faults = Faults(str(work), fail_at=k, kill=kill, code=code or errno.EIO)
            where = f"{name} at call {k} ({counting.calls[k][0]} {counting.calls[k][1]})"
            if kill:
                if not run_killed(work, op, faults):
                    out.problems.append(f"{where}: the child was not killed")
                    continue
            else:
                # A fault in derived data (a cache) may leave the operation done: no error.
                err = run_op(work, op, faults)
                if err is not None and not isinstance(err, OSError | LedgerError):
                    out.problems.append(f"{where}: raised {err!r}, want an operational error")
                    continue
            check_after(work, before, n0, n1, new, earlier, where, out)
    out.points = points  # type: ignore[attr-defined]
    return out


def report(title: str, out: Outcome, capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(
            f"\n{title}: {out.points} fault points, {out.faults} faults injected, "  # type: ignore[attr-defined]
            f"{out.clean} clean outcomes"
        )
    assert not out.problems, "\n".join(out.problems[:20])
    assert out.clean == out.faults > 0


@pytest.mark.slow
def test_faults_in_an_append(
    big: tuple[Path, str, list[EntrySpec]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, earlier, specs = big
    subjects = {s.subject for s in specs}

    def new(ledger: Ledger, at: int) -> str | None:
        return None  # the entries' envelopes are checked by log verify

    out = sweep(home, tmp_path / "work", lambda lg: lg.log.append(specs), new, earlier,
                kill_every=3)  # fmt: skip
    ledger = Ledger.open(tmp_path / "work")
    got = {LogEntry.from_bytes(r).subject for r in ledger.log.entries(250, 260)}
    assert got == subjects
    report("append of 10 entries (250 -> 260)", out, capsys)


@pytest.mark.slow
def test_faults_in_a_record_batch(
    small: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, earlier = small
    steps = rows("new")

    def op(ledger: Ledger) -> object:
        return ledger.record_batch(steps, env="cartpole@1", policy="p", key="vendor", name="new")

    def new(ledger: Ledger, at: int) -> str | None:
        return LogEntry.from_bytes(ledger.log.entry(at)).subject

    out = sweep(home, tmp_path / "work", op, new, earlier, kill_every=4)
    report("record_batch", out, capsys)
