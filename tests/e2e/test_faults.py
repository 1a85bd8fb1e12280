"""Fault injection: every write, fsync, rename, mkdir and open-for-writing of an append and of a
whole ``record_batch`` fails in turn (EIO, then ENOSPC), or the process is killed exactly there.

The harness (`Faults`) wraps ``os.open``/``os.write``/``os.fsync``/``os.replace``/``os.rename``/
``os.mkdir`` and Python's ``open`` for paths inside the ledger directory; a first run counts the
calls an operation makes, then each run fails call k. An error is raised as the ``OSError`` the
OS would give; a kill is a real SIGKILL of a forked child at call k (no ``finally`` runs).
Pyarrow's own C++ writes (the Parquet files in ``<ledger>/tmp``) and SQLite's (the derived
lookup cache) are below Python and not counted.

After each fault: the operation failed cleanly (an operational error, never a bug); the log is
exactly the one before the operation or the one after it; ``log verify`` passes; the earlier
artifact still verifies and the new one verifies or is not recorded; and the next writer works
and leaves no stale leftover (temp files of the dead writer go; the `<ledger>/tmp` directory of a
killed ``record_batch`` is kept until it is an hour old, as its owner is unknown).

CI fails every call of the append once (EIO, ENOSPC or a kill, in rotation) and half the calls
of ``record_batch`` (errors in process; kills in forked children); ``TRAJLEDGER_FAULTS=all``
runs all three at every call of both.
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import io
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trajledger.ledger.artifacts import register_environment
from trajledger.ledger.errors import LedgerError
from trajledger.ledger.fsck import leftovers
from trajledger.ledger.home import Ledger
from trajledger.ledger.log import EntrySpec, verify_log_dir
from trajledger.ledger.record import record_statement
from trajledger.ledger.signing import sign_statement
from trajledger.ledger.status import record_policy
from trajledger.runner.cli import main
from trajledger.verify import predicates
from trajledger.verify.errors import ProvenanceError
from trajledger.verify.log_entry import LogEntry

ALL = os.environ.get("TRAJLEDGER_FAULTS") == "all"

_real = {
    "open": os.open,
    "write": os.write,
    "fsync": os.fsync,
    "replace": os.replace,
    "rename": os.rename,
    "mkdir": os.mkdir,
    "builtins.open": builtins.open,
}
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class Killed(Exception):
    """Never raised: kills are real (SIGKILL)."""


@dataclass
class Faults:
    """Counts (and fails one of) the filesystem writes under ``root``."""

    root: str
    fail_at: int | None = None
    kill: bool = False
    code: int = errno.EIO
    calls: list[tuple[str, str]] = field(default_factory=list)
    fds: dict[int, str] = field(default_factory=dict)

    def inside(self, path: Any) -> bool:
        try:
            return os.path.abspath(os.fspath(path)).startswith(self.root)
        except TypeError:
            return False

    def hit(self, kind: str, path: str) -> None:
        n = len(self.calls)
        self.calls.append((kind, os.path.relpath(path, self.root)))
        if n == self.fail_at:
            if self.kill:
                os.kill(os.getpid(), signal.SIGKILL)
            raise OSError(self.code, os.strerror(self.code), path)

    def path_of_fd(self, fd: int) -> str | None:
        if fd in self.fds:
            return self.fds[fd]
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        return target if self.inside(target) else None

    @contextmanager
    def active(self) -> Iterator[Faults]:
        faults = self

        def fopen(path: Any, flags: int, mode: int = 0o777, *a: Any, **kw: Any) -> int:
            if flags & _WRITING and faults.inside(path):
                faults.hit("open", os.fspath(path))
            fd = _real["open"](path, flags, mode, *a, **kw)
            if faults.inside(path):
                faults.fds[fd] = os.fspath(path)
            return fd

        def fwrite(fd: int, data: Any) -> int:
            p = faults.path_of_fd(fd)
            if p is not None:
                faults.hit("write", p)
            return _real["write"](fd, data)  # type: ignore[no-any-return]

        def ffsync(fd: Any) -> None:
            n = fd if isinstance(fd, int) else fd.fileno()
            p = faults.path_of_fd(n)
            if p is not None:
                faults.hit("fsync", p)
            _real["fsync"](fd)

        def frename(kind: str) -> Callable[..., None]:
            def f(src: Any, dst: Any, *a: Any, **kw: Any) -> None:
                if faults.inside(dst):
                    faults.hit("rename", os.fspath(dst))
                _real[kind](src, dst, *a, **kw)

            return f

        def fmkdir(path: Any, *a: Any, **kw: Any) -> None:
            if faults.inside(path):
                faults.hit("mkdir", os.fspath(path))
            _real["mkdir"](path, *a, **kw)

        def bopen(file: Any, mode: str = "r", *a: Any, **kw: Any) -> Any:
            writing = any(c in mode for c in "wax+")
            if writing and not isinstance(file, int) and faults.inside(file):
                faults.hit("open", os.fspath(file))
                real = _real["builtins.open"](file, mode, *a, **kw)
                return _Writer(faults, os.fspath(file), real)
            return _real["builtins.open"](file, mode, *a, **kw)

        patches = [
            (os, "open", fopen),
            (os, "write", fwrite),
            (os, "fsync", ffsync),
            (os, "replace", frename("replace")),
            (os, "rename", frename("rename")),
            (os, "mkdir", fmkdir),
            (builtins, "open", bopen),
            (io, "open", bopen),
        ]
        for mod, name, fn in patches:
            setattr(mod, name, fn)
        try:
            yield self
        finally:
            for mod, name, _fn in patches:
                setattr(mod, name, _real["builtins.open" if name == "open" and mod is not os
                                         else name])  # fmt: skip


class _Writer:
    """A file opened for writing: each write is a fault point."""

    def __init__(self, faults: Faults, path: str, f: Any) -> None:
        self._faults, self._path, self._f = faults, path, f

    def write(self, data: Any) -> int:
        self._faults.hit("write", self._path)
        return int(self._f.write(data))

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


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


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[EntrySpec]]:
    """A ledger with a policy, an environment, an earlier batch, 250 log entries in all; and
    10 more entries (envelopes stored) for the append operation."""
    home = tmp_path_factory.mktemp("faults") / "ledger"
    ledger = Ledger.init(home, origin="test/faults")
    names = ("vendor", "approver-a", "approver-b", "trainer")
    keys = {k: ledger.keys.create(k, encrypt=False) for k in names}
    (home / "policy.toml").write_text(POLICY.format(vkey=ledger.log.vkey))
    record_policy(ledger, home / "policy.toml", [keys["approver-a"], keys["approver-b"]])
    register_environment(ledger, "cartpole", "1", keys["vendor"], gymnasium_id="CartPole-v1")
    earlier = ledger.record_batch(rows("e0"), env="cartpole@1", policy="p", key="vendor").digest
    specs: list[EntrySpec] = []
    for i in range(257):
        subject = "sha256:" + hashlib.sha256(b"s%d" % i).hexdigest()
        env = sign_statement([("s", subject)], predicates.APPROVAL, {"i": i}, [keys["vendor"]])
        digest = ledger.store.put_bytes(env.to_bytes())
        specs.append(EntrySpec("approval", subject, digest, (keys["vendor"].keyid,)))
    n = 250 - ledger.log.size
    ledger.log.append(specs[:n])
    assert ledger.log.size == 250
    return home, earlier, specs[n : n + 10]  # 250 -> 260 crosses a tile boundary


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
    home: Path, before: dict[str, bytes], n0: int, n1: int, new: Callable[[Ledger], str | None],
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
    keys = {k.keyid: ledger.keys.public(k.name) for k in ledger.keys.list()}
    report = verify_log_dir(home / "log", store=ledger.store, keys=keys)
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
    digest = new(nxt) if tree == n1 else None
    if digest is not None and not verifies(home, digest):
        problems.append("the new artifact is in the log but does not verify")
    stale = [str(x.path) for x in leftovers(nxt) if x.stale]
    if stale:
        problems.append(f"stale leftovers after the next writer: {stale}")
    report = verify_log_dir(home / "log", store=nxt.store, keys=keys)
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
    pid = os.fork()
    if pid == 0:
        try:
            run_op(home, op, faults)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def restore(pristine: Path, work: Path) -> None:
    """A fresh copy of the pristine ledger; write-once files (objects, tiles) hard-linked."""
    shutil.rmtree(work, ignore_errors=True)

    def copy(src: str, dst: str) -> None:
        rel = os.path.relpath(src, pristine)
        if rel.startswith(("objects" + os.sep, os.path.join("log", "tile") + os.sep)):
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(pristine, work, copy_function=copy)


def sweep(
    pristine: Path, work: Path, op: Callable[[Ledger], object], new: Callable[[Ledger], str | None],
    earlier: str, every: int,
) -> Outcome:  # fmt: skip
    """Fail each call in turn; mode m (EIO, ENOSPC, kill) at call k when (k + m) % every == 0,
    so that with ``every`` = 3 each call gets one mode, and with 1 every call gets all three."""
    restore(pristine, work)
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
            if (k + m) % every:
                continue
            restore(pristine, work)
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
    pristine: tuple[Path, str, list[EntrySpec]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    home, earlier, specs = pristine
    subjects = {s.subject for s in specs}

    def new(ledger: Ledger) -> str | None:
        return None  # the entries' envelopes are checked by log verify

    out = sweep(home, tmp_path / "work", lambda lg: lg.log.append(specs), new, earlier,
                every=1 if ALL else 3)  # fmt: skip
    ledger = Ledger.open(tmp_path / "work")
    got = {LogEntry.from_bytes(r).subject for r in ledger.log.entries(250, 260)}
    assert got == subjects
    report("append of 10 entries (250 -> 260)", out, capsys)


@pytest.mark.slow
def test_faults_in_a_record_batch(
    pristine: tuple[Path, str, list[EntrySpec]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    home, earlier, _specs = pristine
    steps = rows("new")

    def op(ledger: Ledger) -> object:
        return ledger.record_batch(steps, env="cartpole@1", policy="p", key="vendor", name="new")

    def new(ledger: Ledger) -> str | None:
        return LogEntry.from_bytes(ledger.log.entry(250)).subject

    out = sweep(home, tmp_path / "work", op, new, earlier, every=1 if ALL else 6)
    report("record_batch", out, capsys)
