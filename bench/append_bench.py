"""Durable single-entry appends (issue 21 item 7): trajledger's log against the bare baseline.

Measures, in one run, on fresh directories of the same disk, each in its own process (a child of
this script) doing ``--commits`` commits of one entry, the kinds interleaved round by round so
that the machine's load falls on all alike:

- ``baseline``: the least a log can do that makes each entry durable and then publishes a
  checkpoint: append the entry (about 200 bytes, one of ours) to one file and fsync it; write a
  checkpoint (about 300 bytes) to a temp file, fsync it, rename it over the checkpoint, fsync the
  directory. Nothing hashed, built, signed or checked;
- ``bare``: the baseline as issue 21 words it (append + fsync + checkpoint rename + directory
  fsync): the same without the fsync of the checkpoint's temp file. Faster, and not crash-safe
  by POSIX (the rename may reach the disk before the bytes; ext4 happens to flush a file
  renamed over another), so the ratios are given against both;
- ``files``: the files and waits of one of trajledger's commits of one entry, nothing computed
  (no entry built, nothing hashed or signed, no lookup, no lock checks): a new partial entry
  bundle and hash tile of the right width (tlog-tiles names them by width), the history record,
  treeState's and the checkpoint's temp files, fsynced with their directories in one concurrent
  round (the writer's own `FsyncGroup`), then each renamed and its directory fsynced. What is
  left between it and ``log`` is the writer's computing; between it and ``baseline``, the
  protocol's files;
- ``files-cp`` and ``files-wal``: the same for two protocols costed and not built (the signed
  checkpoint as the commit point; a write-ahead record instead of the tiles' fsyncs:
  `protocol_files`, and docs/PERFORMANCE.md, "The app50 pass");
- ``files-ahead``: one write-ahead file preallocated once and overwritten in place, its
  ``fdatasync`` the commit's only wait (`protocol_files`; docs/PERFORMANCE.md, "The app51
  pass");
- ``log-ahead`` and ``ledger-ahead``: ``log`` and ``ledger`` below with ``files-ahead``'s waits
  in place of the writer's (`ahead_model`): what those appends would cost with that protocol,
  every computation kept. A model for measuring, **not crash-safe** (nothing recovers from the
  record it writes); nothing in the package changes;
- ``log``: ``Log.append`` of one entry by a writer kept open (a log of 1,000 entries to start:
  the idempotence lookup, entry, tiles, history, treeState, a signed checkpoint);
- ``ledger``: ``Ledger.log.append`` of one entry: the same, plus the user's floor raised to each
  new checkpoint (``on_publish``), as every command that records something does.

For each: the median over every commit of every round of the wall time and the CPU time (user +
system of the process, every thread: the fsync threads count), the rate (1 / median wall) and
the ratio of its rate to each baseline's (target, as the issue words it: ``ledger`` and ``log``
at least 0.5 x the bare one).

Usage::

    python bench/append_bench.py [--commits 200] [--rounds 5] [--dir DIR] [--markdown]
                                 [--write-doc]
    python bench/append_bench.py --quick      (tiny: tests/bench checks the script runs; one
                                               child process, the other kinds in this one)

``--write-doc`` puts the table into docs/PERFORMANCE.md (section "Durable appends").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _common as c

KINDS = ("baseline", "bare", "files", "files-cp", "files-wal", "files-ahead", "log", "ledger",
         "log-ahead", "ledger-ahead")
ENTRY = 200
CHECKPOINT = 300
AHEAD_SLOT = 1024  # files-ahead: one record a slot, 256 slots (one tile's commits)
AHEAD_RECORD = 8 + 32 + 2 + ENTRY + 32 + CHECKPOINT + 32  # size, root, the entry, hashes, note


def baseline(directory: Path, commits: int, *, sync_temp: bool = True) -> list[tuple[float, float]]:
    """Append + fsync, then checkpoint temp (+ fsync) + rename + directory fsync, per commit."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    fd = os.open(directory / "entries", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    entry, note = os.urandom(ENTRY), os.urandom(CHECKPOINT)
    try:
        for _ in range(commits):
            w, p = time.perf_counter(), time.process_time()
            os.write(fd, entry)
            os.fsync(fd)
            tmp = directory / ".checkpoint.tmp"
            cfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(cfd, note)
            if sync_temp:
                os.fsync(cfd)
            os.close(cfd)
            os.replace(tmp, directory / "checkpoint")
            os.fsync(dfd)
            out.append((time.perf_counter() - w, time.process_time() - p))
    finally:
        os.close(fd)
        os.close(dfd)
    return out


def protocol_files(directory: Path, commits: int, variant: str = "files"
                   ) -> list[tuple[float, float]]:
    """The files, fsyncs and renames of trajledger's commits of one entry on a log of 1,000
    (docs/PERFORMANCE.md, "The fsyncs of one commit"), with their bytes made up: the floor of
    the protocol, below which no computing can bring ``log``.

    ``variant``: ``files``, the protocol as it is; ``files-cp``, the signed checkpoint as the
    commit point (no treeState: its temp file, fsync, rename and ``.state/``'s fsync gone; the
    tiles still fsynced before the publication); ``files-wal``, a write-ahead record (the
    entry, the tiles' new bytes and the signed checkpoint appended to ``.state/wal``) fsynced
    with the checkpoint's temp file in one round, the tiles, bundle and history written and not
    fsynced, the checkpoint renamed and the log directory fsynced; when a tile completes, its
    full tile and bundle and their directories fsynced and the record trimmed (docs/
    PERFORMANCE.md, "The app50 pass": the design costed, not built); ``files-ahead``, one
    write-ahead file preallocated once (256 slots of `AHEAD_SLOT` bytes, written and fsynced
    before the first commit) and overwritten in place: the commit is one ``pwrite`` of the
    record into its slot and one ``fdatasync`` (blocks already allocated, the size unchanged:
    no metadata, no directory); the bundle, tile, history record and checkpoint (temp file
    and rename) are written behind it with no fsync at all; when a tile completes, its full
    tile and bundle and their directories are fsynced (once in 256 commits), so that the
    ring's slot can be reused (docs/PERFORMANCE.md, "The app51 pass")."""
    from trajledger.ledger.fs import FsyncGroup

    state = directory / ".state"
    state.mkdir(parents=True)
    lock = os.open(state / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    wal = os.open(state / "wal", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    created = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    ahead = variant in ("files-wal", "files-ahead")
    ring = variant == "files-ahead"
    if ring:  # preallocated once, outside the timed commits: every block written and synced
        os.close(wal)
        wal = os.open(state / "ahead", os.O_RDWR | os.O_CREAT, 0o644)
        os.write(wal, bytes(256 * AHEAD_SLOT))
        os.fsync(wal)
        fsync_path(str(state))
    record = bytes(AHEAD_RECORD)
    out = []

    def write(path: str, data: bytes, flags: int = created) -> int:
        fd = os.open(path, flags, 0o644)
        os.write(fd, data)
        return fd

    size = 1000
    try:
        for _ in range(commits):
            size += 1
            tile, width = (size - 1) >> 8, size % 256 or 256
            w, p = time.perf_counter(), time.process_time()
            os.pwrite(lock, b"1", 0)
            group, fds, dirs, unsynced = FsyncGroup(), [], [], []
            if ring:  # the commit: the record in its slot, its blocks already on disk
                os.pwrite(wal, record, (size % 256) * AHEAD_SLOT)
                os.fdatasync(wal)
            elif ahead:
                fds.append(wal)
                os.write(wal, record)
            for top, each in (("entries", ENTRY), ("0", 32)):
                where = f"{directory}/tile/{top}/{tile:03d}" + (".p" if width < 256 else "")
                name = f"{where}/{width}" if width < 256 else where
                if width < 256:
                    os.makedirs(where, exist_ok=True)
                else:
                    where = os.path.dirname(where)
                synced = not ahead or width == 256  # (a completed tile: synced, record trimmed)
                (fds if synced else unsynced).append(write(name, bytes(width * each)))
                if synced:
                    dirs.append(os.open(where, os.O_RDONLY | os.O_DIRECTORY))
            (unsynced if ahead else fds).append(write(
                f"{state}/history", size.to_bytes(12, "big"),
                os.O_WRONLY | os.O_APPEND | os.O_CREAT))  # fmt: skip
            if variant == "files":
                fds.append(write(f"{state}/.tmp-treeState", bytes(80)))
            (unsynced if ring else fds).append(
                write(f"{directory}/.tmp-checkpoint", bytes(CHECKPOINT)))
            for fd in fds + dirs:
                group.start(fd)
            if fds or dirs:
                group.wait()
            for fd in fds + dirs + unsynced:
                if fd != wal:
                    os.close(fd)
            if variant == "files":
                os.replace(f"{state}/.tmp-treeState", f"{state}/treeState")
                fsync_path(str(state))
            os.replace(f"{directory}/.tmp-checkpoint", f"{directory}/checkpoint")
            if not ring:
                fsync_path(str(directory))
            os.pwrite(lock, b"0", 0)
            if width == 256:
                if ahead and not ring:
                    os.ftruncate(wal, 0)
                    os.fsync(wal)
                for top in ("entries", "0"):
                    shutil.rmtree(f"{directory}/tile/{top}/{tile:03d}.p", ignore_errors=True)
            out.append((time.perf_counter() - w, time.process_time() - p))
    finally:
        os.close(lock)
        os.close(wal)
    return out


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def ahead_model(directory: Path) -> Iterator[None]:
    """Give this process's log writer ``files-ahead``'s waits (the ``*-ahead`` kinds): each
    commit's fsync round makes nothing durable but one record (of ``files-ahead``'s size: the
    entry, its hashes and the signed note of a commit of one entry) written into its slot of a
    preallocated file and ``fdatasync``ed; the fsyncs of ``.state/`` and of the log directory
    after the renames are dropped. Every file is still written, renamed and closed as before;
    the user's floor (SQLite, ``synchronous=FULL``) is unchanged. For measuring only: not
    crash-safe; the writer's own are put back on leaving (``--quick`` runs kinds in one
    process)."""
    from trajledger.ledger.log import files, writer

    directory.mkdir(parents=True, exist_ok=True)
    ring = os.open(directory / "ahead", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(ring, bytes(256 * AHEAD_SLOT))
    os.fsync(ring)
    fsync_path(str(directory))
    slot, record = [0], bytes(AHEAD_RECORD)

    class AheadRound(files.SyncRound):
        def file(self, fd: int) -> None:
            self._fds.append(fd)

        def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
            fds = self._fds + list(self._dir_fds.values())
            self._fds, self._dir_fds = [], {}
            try:
                if kind is None:
                    os.pwrite(ring, record, slot[0] * AHEAD_SLOT)
                    os.fdatasync(ring)
                    slot[0] = (slot[0] + 1) % 256
            finally:
                for fd in fds:
                    os.close(fd)

    kept = writer.SyncRound, writer.fsync_dir
    writer.SyncRound = AheadRound  # type: ignore[misc]
    writer.fsync_dir = lambda path: None  # type: ignore[assignment]
    try:
        yield
    finally:
        writer.SyncRound, writer.fsync_dir = kept  # type: ignore[misc]
        os.close(ring)


def trajledger_appends(kind: str, directory: Path, commits: int) -> list[tuple[float, float]]:
    """``commits`` appends of one new entry, through a bare `Log` or a ledger's (``*-ahead``:
    with `ahead_model`'s waits)."""
    from log_bench import make_specs

    if kind.endswith("-ahead"):
        with ahead_model(directory / "model"):
            return trajledger_appends(kind.removesuffix("-ahead"), directory, commits)

    from trajledger.ledger.keys import Signer
    from trajledger.ledger.log import Log

    if kind == "log":
        signer = Signer.generate("bench-log")
        log = Log.create(directory / "log", "bench.example/append", signer,
                         cache_dir=directory / "index")  # fmt: skip
        signers: tuple[str, ...] = (Signer.generate("producer").keyid,)
    else:
        ledger, keys = c.new_ledger(directory / "ledger", "append")
        log = ledger.log
        signers = (keys["vendor"].keyid,)
    log.append(make_specs(0, 1000 - log.size, signers))
    out = []
    for i in range(commits):
        one = make_specs(10**9 + i, 1, signers)
        w, p = time.perf_counter(), time.process_time()
        log.append(one)
        out.append((time.perf_counter() - w, time.process_time() - p))
    log.close()
    return out


def child(kind: str, directory: Path, commits: int) -> None:
    """Run one kind's commits in this process; print the timings as JSON."""
    if kind in ("baseline", "bare"):
        times = baseline(directory, commits, sync_temp=kind == "baseline")
    elif kind.startswith("files"):
        times = protocol_files(directory, commits, kind)
    else:
        times = trajledger_appends(kind, directory, commits)
    print(json.dumps(times))


def run(work: Path, commits: int, rounds: int, quick: bool = False) -> dict[str, Any]:
    """Every kind, ``rounds`` times, interleaved; each run a new process on a new directory
    (``quick``: the first one; the others run in this process, `_common.run_here`)."""
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in KINDS}
    env = dict(os.environ, TRAJLEDGER_STATE_DIR=str(work / "state"))
    for r in range(rounds):
        order = KINDS[r % len(KINDS):] + KINDS[: r % len(KINDS)]
        for n, kind in enumerate(order):
            where = work / f"{kind}-{r}"
            argv = [__file__, "--child", kind, "--dir", str(where), "--commits", str(commits)]
            if quick and (r or n):
                code, stdout, stderr = c.run_here(c.SCRIPT_MAIN, argv, env=env)
            else:
                proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                                      env=env, check=False)  # fmt: skip
                code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
            if code:
                raise SystemExit(f"{kind}: exit {code}\n{stderr[-3000:]}")
            times[kind] += [tuple(t) for t in json.loads(stdout)]  # type: ignore[misc]
            shutil.rmtree(where, ignore_errors=True)
    result: dict[str, Any] = {"commits": commits, "rounds": rounds, "machine": c.machine()}
    base, _ = c.median_wall_cpu(times["baseline"])
    bare, _ = c.median_wall_cpu(times["bare"])
    for kind in KINDS:
        wall, cpu = c.median_wall_cpu(times[kind])
        result[kind] = {
            "wall_ms": wall * 1000,
            "cpu_ms": cpu * 1000,
            "per_s": 1 / wall,
            "ratio": base / wall,
            "ratio_bare": bare / wall,
            "p90_ms": statistics.quantiles([w for w, _ in times[kind]], n=10)[-1] * 1000,
        }
    return result


def markdown(r: dict[str, Any]) -> str:
    names = {
        "baseline": "baseline: append + fsync, checkpoint temp + fsync + rename + dir fsync",
        "bare": "bare (issue 21's words): the same, the temp file not fsynced",
        "files": "the files and waits of one commit, nothing computed",
        "files-cp": "the same, the signed checkpoint as the commit point (no treeState)",
        "files-wal": "the same, a write-ahead record instead of the tiles' fsyncs (not built)",
        "files-ahead": "the same, one preallocated write-ahead file overwritten in place, "
                       "its fdatasync the only wait (not built)",
        "log": "`Log.append` of 1 entry (writer kept open)",
        "ledger": "`Ledger.log.append` of 1 entry (+ the user's floor raised)",
        "log-ahead": "`Log.append` with files-ahead's waits (a model, not crash-safe)",
        "ledger-ahead": "`Ledger.log.append` with files-ahead's waits (a model)",
    }
    rows = []
    for kind in KINDS:
        k = r[kind]
        target = c.met(k["ratio_bare"] >= 0.5) if kind in ("log", "ledger") else ""
        rows.append([names[kind], f"{k['wall_ms']:.2f}", f"{k['p90_ms']:.2f}",
                     f"{k['cpu_ms']:.2f}", f"{k['per_s']:,.0f}", f"{k['ratio']:.2f}",
                     f"{k['ratio_bare']:.2f}", target])  # fmt: skip
    head = (
        f"`{c.command_line()}`: {r['rounds']} rounds of {r['commits']} commits of one entry "
        f"per kind, each a new process on a new directory of the same disk, kinds interleaved; "
        f"medians over all commits. CPU is user + system time of the process (every thread). "
        f"{r['machine']}.\n\n"
    )
    return head + c.table(
        ["commit of one entry", "median ms", "p90 ms", "CPU ms", "commits/s",
         "x baseline rate", "x bare rate", "target: x bare >= 0.5"],
        rows,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--write-doc", action="store_true", help="update docs/PERFORMANCE.md")
    ap.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    ap.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.dir, args.commits)
        return
    if args.quick:
        args.commits, args.rounds = 3, 1
    work = Path(args.dir or tempfile.mkdtemp(prefix="append-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = run(work, args.commits, args.rounds, args.quick)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    c.emit(args, result, markdown(result), "append_bench", "## Durable appends")


if __name__ == "__main__":
    main()
