"""Helpers shared by the test packages (tests/unit, tests/e2e, tests/property, tests/interop).

Scope:

- Ledger templates (`build_template`, `copy_template`): a ledger built once per pytest session
  (once per xdist worker: each worker is a session of its own) by a session-scoped fixture, and
  copied for each test that uses it. A template is built with a user state directory of its
  own, and a copy takes both the ledger (to a directory of the test's) and that user state (into
  the test's own ``TRAJLEDGER_STATE_DIR``): the test's user is the one who built the ledger, as
  when each test built it, so no first use is announced, the floor and the index of the log are
  there, and nothing is read again. Copies keep file modes (0600 keys, 0700 directories, 0444
  blobs) and symbolic links as links; `copy_template` checks the modes. A module fixture that
  copies a template and goes on appending does so as a user of its own (`as_own_user`).
- `entry_spec`: the log entry spec number ``i`` of the log tests (distinct subjects and
  envelope digests).
- `new_runner`: a click ``CliRunner`` keeping stderr apart.
- `installed_distributions`: what a venv made by a test holds (as ``pip list`` lists it).
- `DigestFiles`: blobs as files named by their digest (the blob checker's tests).

Non-scope: fixtures (tests/conftest.py and each package's conftest declare them, using these),
what a test concludes.

Not a test module (pytest collects ``test_*.py`` only): tests import it as ``testkit``
(tests/conftest.py puts this directory on ``sys.path``, as ``--import-mode=importlib`` puts none).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest
from click.testing import CliRunner, Result

from trajledger.ledger.log import EntrySpec

TEST_PASSPHRASE = "correct horse battery staple (TEST ONLY)"
"""The passphrase of the tests' encrypted keys (the ``passphrase`` fixture sets it)."""
STATE_ENV = "TRAJLEDGER_STATE_DIR"

def common_chat_record() -> dict[str, Any]:
    """The chat record `bench/ingest_bench.py` writes (and records like it): what the chat
    reader's fast paths must take (test_rollout_formats, test_chat_typed)."""
    return {
        "episode_id": "ep-1", "task_id": "task-1",
        "messages": [
            {"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "fetch", "arguments": '{"url": "x"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "fetch", "content": "t"},
            {"role": "assistant", "content": "a"},
        ],
        "reward": 0.5, "judge_scores": {"accuracy": 0.25, "safety": 1.0},
        "usage": {"prompt_tokens": 120, "completion_tokens": 60}, "cost_usd": 0.0012,
        "latency_ms": 300, "termination_reason": "success", "language": "en",
        "task_type": "web", "model_id": "agent-7b",
    }  # fmt: skip
"""The user state directory (``trajledger.ledger.home.STATE_DIR_ENV``)."""
PER_DIRECTORY = "ledgers"
"""The part of a user state keyed by a ledger directory's path (its origin pin): a copy is
another directory, pinned when first opened, so the template's pins are not copied."""

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class Template(Generic[T]):
    """A ledger built once, the user state it was built with, and what its build returned."""

    home: Path
    state: Path
    value: T
    """What the build function returned (digests, names: whatever its tests need)."""


@contextlib.contextmanager
def user_state(directory: Path) -> Iterator[Path]:
    """Run the block as a user whose state directory is ``directory`` (made, 0700, if absent).

    Session and module fixtures that use a ledger run so: copies of one template share its log
    (origin and key), and the user state they would otherwise share (the session's) remembers
    each log's newest checkpoint: one fixture's appends would be another's fork.
    """
    directory.mkdir(mode=0o700, exist_ok=True)
    with pytest.MonkeyPatch.context() as m:
        m.setenv(STATE_ENV, str(directory))
        yield directory


def as_own_user(root: Path, make: Callable[[Path], T]) -> T:
    """``make(root)`` as a user of its own (state directory ``root / "state"``): a module
    fixture's copy of a template, whose appends then fork no other fixture's view of the log."""
    with user_state(root / "state"):
        return make(root)


def build_template(root: Path, build: Callable[[Path], T]) -> Template[T]:
    """``build(root / "home")`` with ``root / "state"`` as the user state directory.

    Args:
        root: an empty directory (``tmp_path_factory.mktemp(...)``).
        build: makes a ledger at the path it is given; what it returns is kept as ``value``.

    The user state's SQLite databases are checkpointed after the build (their write-ahead logs
    emptied into them), so that a copy of the directory is a copy of the state.
    """
    home, state = root / "home", root / "state"
    with user_state(state):
        value = build(home)
    if _checkpoint(state):
        # The build's Ledger objects, and their database connections, are in reference
        # cycles: gone after a full collection (not made first: in a worker that has imported
        # torch and the like, one walks millions of objects, 0.3 to 0.6 CPU-s).
        gc.collect()
        busy = _checkpoint(state)
        assert not busy, f"{busy[0]}: still in use after the template's build"
    return Template(home, state, value)


def _checkpoint(state: Path) -> list[Path]:
    """Checkpoint each SQLite database under ``state`` (its write-ahead log emptied into it and
    truncated); the databases that another connection kept from a complete checkpoint."""
    busy = []
    for db in state.rglob("*.sqlite"):
        con = sqlite3.connect(db)
        try:
            if con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
                busy.append(db)
        finally:
            con.close()
    return busy


WRITER_LOCK = os.path.join("log", ".state", "lock")
"""The log writer's lock file (`trajledger.ledger.log.layout.LOCK_FILE` under ``log/``): a
writer keeps it open between its appends, unlocked (``flock`` is taken and released around
each), so a reachable ``Ledger`` holds it open: not a file `release_files` must see closed."""


def held_open(roots: tuple[Path, ...]) -> list[str] | None:
    """The files under ``roots`` this process holds open (from ``/proc/self/fd``; deleted ones
    too), but `WRITER_LOCK`; None where the process's descriptors cannot be listed."""
    prefixes = tuple(os.path.join(os.path.realpath(r), "") for r in roots)
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    held = []
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
        except OSError:  # closed since it was listed (the listing's own)
            continue
        if target.startswith(prefixes) and not target.endswith(os.sep + WRITER_LOCK):
            held.append(target)
    return held


def release_files(*roots: Path) -> None:
    """Free what this process holds open under ``roots`` through objects nothing reaches, before
    the files there are put back: a command's ``Ledger`` and its SQLite connections are in
    reference cycles, and a database put back must not meet a connection of the run before
    (SQLite shares the locks and the WAL index of one file between a process's connections).

    The young generations are collected, which frees what the last command run in process
    made; the full collection only when a file under ``roots`` is still held after that (or
    the descriptors cannot be listed). A full collection walks every object a worker holds:
    0.1 to 0.5 CPU-s once a test has imported torch and the like, each time a fault sweep put
    its ledger back (most of test_read_fault_sweep.py's CPU: suite41).

    Raises:
        AssertionError: a file under ``roots`` is still held open after the full collection
            (something reachable keeps a connection: putting the files back under it is the
            hazard this exists for; rev39 finding 6, suite43). Where the descriptors cannot be
            listed, the full collection is all it can do."""
    gc.collect(1)
    if held_open(roots) != []:
        gc.collect()
        held = held_open(roots)
        assert not held, (f"still held open after a full collection (a reachable object keeps "
                          f"it: close it or drop it before the files are put back): {held}")


HANG_UP_IGNORED = "TRAJLEDGER_TESTS_HANG_UP_IGNORED"
"""Set by `interrupt_as_in_the_foreground` in a run started with SIGHUP ignored (``nohup``):
the workers it starts (each a new program: a handler is not inherited across ``exec``) keep
surviving a hang-up too."""


def hang_up_survived(signum: int, frame: object) -> None:
    """SIGHUP in a run started under ``nohup``: nothing done (the run goes on, as asked)."""


def interrupt_as_in_the_foreground() -> None:
    """Give the processes this one starts the interrupt and hang-up a run started at a terminal
    has. A shell ignores SIGINT for a job it starts in the background (``pytest ... &`` in a
    script): this process gets the interpreter's default handler back. ``nohup`` ignores
    SIGHUP: this process keeps surviving a hang-up, as asked, by a handler that does nothing
    (here and in its workers: `HANG_UP_IGNORED`), where an ignored signal stayed ignored in
    every command the tests started; a handler is reset to the default by ``exec``. The tests
    that stop a command they started (a terminal's Ctrl-C or hang-up:
    tests/unit/ledger/test_rehash.py, tests/e2e/test_outsiders_day.py,
    tests/e2e/test_exit_codes.py) otherwise meet a child that ignores it and fail, whatever
    the load (suite43 for SIGINT, suite44 for SIGHUP). A handler of this process's own is left
    as it is. (A command a test started while the terminal hangs up does not survive it.)"""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    hup = signal.getsignal(signal.SIGHUP) if hasattr(signal, "SIGHUP") else None
    if hup == signal.SIG_IGN or (hup == signal.SIG_DFL and os.environ.get(HANG_UP_IGNORED)):
        os.environ[HANG_UP_IGNORED] = "1"
        signal.signal(signal.SIGHUP, hang_up_survived)


def modes(root: Path, *, skip: Callable[[Path], bool] | None = None) -> dict[str, int]:
    """``{relative path: permission bits}`` of ``root`` and everything below it (links not
    followed), without the paths ``skip`` answers true for.

    Walked with `os.walk` and `os.lstat` on strings: each `copy_template` walks the template
    and its copy (two ledgers, two user states), and pathlib's ``rglob`` with a ``Path`` per
    file cost 2 to 3 times as much (a ledger of 1,300 files: 0.03 CPU-s a walk)."""
    top = str(root)
    out = {".": stat.S_IMODE(os.lstat(top).st_mode)}
    for dirpath, dirnames, filenames in os.walk(top):  # (links to directories not entered)
        for name in (*dirnames, *filenames):
            path = os.path.join(dirpath, name)
            if skip is None or not skip(Path(path)):
                out[os.path.relpath(path, top)] = stat.S_IMODE(os.lstat(path).st_mode)
    return out


def copy_template(template: Template[Any], dest: Path) -> Path:
    """Copy ``template``'s ledger to ``dest`` (which must not exist) and its user state into
    this test's ``TRAJLEDGER_STATE_DIR``; returns ``dest``.

    Raises:
        AssertionError: a mode differs between the template and its copy.
    """
    def skipped(p: Path) -> bool:
        # SQLite's write-ahead log and shared memory (empty after `build_template`'s
        # checkpoint), and the per-directory pins.
        rel = p.relative_to(template.state)
        return p.name.endswith(("-wal", "-shm")) or rel.parts[:1] == (PER_DIRECTORY,)

    def ignore(directory: str, names: list[str]) -> set[str]:
        return {n for n in names if skipped(Path(directory, n))}

    shutil.copytree(template.home, dest, symlinks=True)
    state = Path(os.environ[STATE_ENV])
    shutil.copytree(template.state, state, symlinks=True, ignore=ignore, dirs_exist_ok=True)
    assert modes(dest) == modes(template.home), f"{dest}: modes differ from the template's"
    copied = modes(template.state, skip=skipped)
    assert {k: v for k, v in modes(state).items() if k in copied} == copied, (
        f"{state}: modes differ from the template's user state"
    )
    return dest


def extend_template(
    root: Path, base: Template[T], extend: Callable[[Path, T], U]
) -> Template[U]:
    """A template made of a copy of ``base`` (ledger and user state) and then
    ``extend(home, base.value)``, whose result is the new template's value."""

    def build(home: Path) -> U:
        copy_template(base, home)
        return extend(home, base.value)

    return build_template(root, build)


BUILT: dict[Hashable, tuple[Path, Any]] = {}
"""`built_once`'s builds in this test process, by key: where, and what the build returned."""
BUILT_GIVEN: dict[str, set[Hashable]] = {}
"""The keys `built_once` copied a build for, by the test (``PYTEST_CURRENT_TEST``)."""


def built_once(key: Hashable, root: Path, build: Callable[[Path], T]) -> T:
    """``build(root)``, built once per test process for ``key`` (in a temporary directory
    removed at the process's end) and copied into ``root`` for each call: every file the build
    made under its directory (ledgers, their users' states, bundles), and what it returned,
    each path under that directory moved to ``root`` (in tuples, lists and the attributes of
    copies of `Party` objects; `test_updates.vendor_copy` is one). Each call has ledgers of its
    own; the calls of one process share their keys and log keys, which a
    build's callers must not compare across calls; a second call with the same key in one test
    builds anew (two parties made twice have two keys). Only for a build that reads nothing
    a test changes before it (a clock, a fault, a monkeypatched helper), and whose parties each
    name their own user state (`Party`). A test given a copy has not called what the build
    called: a vendor the build took from `test_updates.vendor_copy` is not marked as given to
    it, so its own ``vendor_copy`` of the same arguments would share that vendor's keys."""
    import atexit
    import copy
    import tempfile

    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]  # (its phase cut off)
    given = BUILT_GIVEN.setdefault(test, set())
    if key in given:
        return build(root)
    given.add(key)
    if key not in BUILT:
        built_in = Path(tempfile.mkdtemp(prefix="trajledger-built-"))
        atexit.register(shutil.rmtree, built_in, ignore_errors=True)
        value = build(built_in)
        release_files(built_in)  # (its SQLite connections closed: each copy whole)
        BUILT[key] = (built_in, value)
    built_in, value = BUILT[key]
    for path in built_in.iterdir():
        assert not (root / path.name).exists(), f"{root / path.name}: there already"
    shutil.copytree(built_in, root, symlinks=True, dirs_exist_ok=True)

    def moved(v: Any) -> Any:
        if isinstance(v, Path):
            return root / v.relative_to(built_in) if v.is_relative_to(built_in) else v
        if isinstance(v, (tuple, list)):
            return type(v)(moved(x) for x in v)
        if isinstance(v, Party):
            v = copy.copy(v)
            for name, attr in vars(v).items():
                setattr(v, name, moved(attr))
        return v

    return moved(value)  # type: ignore[no-any-return]


def quickstart(home: Path, *, episodes: int = 10, passphrase: str | None = None) -> str:
    """``trajledger quickstart HOME --episodes N`` in process, keys encrypted under
    ``passphrase`` (None: in the clear, as the demo writes them without one); returns the final
    checkpoint's digest (the last stdout line)."""
    from trajledger.runner.cli import main

    r = new_runner().invoke(
        main,
        ["quickstart", str(home), "--episodes", str(episodes)],
        env={"TRAJLEDGER_PASSPHRASE": passphrase},
    )
    assert r.exit_code == 0, r.output
    return r.stdout.strip().splitlines()[-1]


def entry_spec(
    i: int, signer: str = "a" * 64, *, kind: str = "files", subject: str | None = None
) -> EntrySpec:
    """Log entry spec number ``i``, naming the keyid ``signer``: its subject (unless given) and
    envelope digests are the SHA-256 of ``s<i>`` and ``e<i>``, distinct for each ``i``."""
    seed = str(i).encode()
    return EntrySpec(
        kind,
        subject or "sha256:" + hashlib.sha256(b"s" + seed).hexdigest(),
        "sha256:" + hashlib.sha256(b"e" + seed).hexdigest(),
        (signer,),
    )


def run_commands(home: Path, *commands: str) -> None:
    """Run each command line (split on white space) on the ledger ``home`` through the CLI,
    with the test passphrase set; each must succeed (a template's build)."""
    from trajledger.runner.cli import main

    runner = new_runner()
    for args in commands:
        r = runner.invoke(main, ["--ledger", str(home), *args.split()], prog_name="trajledger",
                          env={"TRAJLEDGER_PASSPHRASE": TEST_PASSPHRASE})  # fmt: skip
        assert r.exit_code == 0, r.output


def snapshot(home: Path) -> tuple[int, frozenset[str]]:
    """The log size (from ``log info --json``) and every file under the ledger's object store:
    what a refused command must leave as it was."""
    from trajledger.runner.cli import main

    info = new_runner().invoke(main, ["--ledger", str(home), "log", "info", "--json"])
    assert info.exit_code == 0, info.output
    objects = home / "objects"
    return json.loads(info.stdout)["size"], frozenset(
        str(p.relative_to(objects)) for p in objects.rglob("*") if p.is_file()
    )


def invoke(home: Path, *args: str | Path) -> Result:
    """``trajledger --ledger HOME ARGS...`` in process (`new_runner`), as a user types it: a
    raised exception other than the command's exit, or a traceback in the output, fails."""
    from trajledger.runner.cli import main

    r = new_runner().invoke(main, ["--ledger", str(home), *map(str, args)],
                            prog_name="trajledger")
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    return r


def new_runner() -> CliRunner:
    """A CliRunner with stderr kept apart (click < 8.2 needs ``mix_stderr=False``; click 8.2
    removed it and always records both: ``result.output`` interleaves them)."""
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


class Party:
    """One organisation of the exchange tests (tests/e2e/test_updates.py,
    tests/interop/test_three_parties.py): a ledger directory and a user state directory of its
    own, driven through the CLI in-process."""

    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.home = root / name
        self.state = root / f"{name}-state"
        self.state.mkdir(parents=True)

    def run(self, *args: str | Path, code: int = 0) -> Any:
        """``trajledger --ledger HOME ARGS`` as this party; asserts the exit code and that no
        traceback was printed; the click ``Result``."""
        from trajledger.runner.cli import main

        r = new_runner().invoke(main, ["--ledger", str(self.home), *map(str, args)],
                                env={"TRAJLEDGER_STATE_DIR": str(self.state)})
        assert r.exit_code == code, f"{self.name} {args}: {r.output}"
        assert "Traceback" not in r.output
        return r

    def last(self, *args: str | Path) -> str:
        """Run a command and return its last stdout line (a digest, a vkey)."""
        return str(self.run(*args).stdout.strip().splitlines()[-1])

    def info(self) -> dict[str, Any]:
        """``log info --json``."""
        return dict(json.loads(self.run("log", "info", "--json").stdout))

    def vkey(self) -> str:
        """The party's log verifier key."""
        return str(self.info()["vkey"])

    def size(self) -> int:
        """The party's log size."""
        return int(self.info()["size"])


def run_on_terminal(cmd: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``cmd`` with stderr on a pseudo-terminal (stdout a pipe, stdin empty), as a user at
    a terminal sees it; its exit code and what it wrote to the terminal."""
    import pty
    import subprocess

    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not data:
            break
        out += data
    proc.wait()
    os.close(master)
    return proc.returncode, out.decode("utf-8", "replace")


BUYER_POLICY = """\
name = "buyer"
serial = 1
[roles.producer]
keys = ["trust/vendor.pub"]
[roles.approver]
keys = ["trust/approver-a.pub", "trust/approver-b.pub", "trust/b1.pub", "trust/b2.pub"]
threshold = 2
[roles.trainer]
keys = ["trust/trainer.pub"]
[roles.log]
vkeys = [{vkeys}]
"""
"""A buyer's policy over a quickstart vendor (its keys copied to ``trust/``) and its own
approvers b1 and b2; ``{vkeys}``: the quoted log keys it trusts."""


def installed_distributions(python: Path) -> list[str]:
    """The names of the distributions a venv's interpreter finds (as ``pip list`` lists them,
    without starting pip: isolated from ``PYTHONPATH`` and the user's site directory)."""
    code = ("import importlib.metadata as m, json; "
            "print(json.dumps([d.metadata['Name'] for d in m.distributions()]))")
    done = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)  # fmt: skip
    return list(json.loads(done.stdout))


class DigestFiles:
    """Blobs as files named by their hex digest, in one directory: the evidence a
    `verify.blobs.BlobHasher` reads (``blob_path``); whatever stands at a blob's name is its
    path (a directory there is a blob that cannot be read)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def put(self, data: bytes) -> str:
        """Store ``data``; its digest string."""
        h = hashlib.sha256(data).hexdigest()
        (self.root / h).write_bytes(data)
        return f"sha256:{h}"

    def blob_path(self, digest: str) -> Path | None:
        """The path of blob ``digest``, or None when nothing stands at its name."""
        path = self.root / digest.removeprefix("sha256:")
        return path if path.exists() else None


P25519 = 2**255 - 19
# The y of the eight points of small order (orders 1, 2, 4, 8), and the two non-canonical
# spellings of small-order points (y + p < 2**255 only for y = 0 and 1).
SMALL_ORDER_Y = (1, P25519 - 1, 0,
                 2707385501144840649318225287225658788936804267575313519463743609750303402022,
                 55188659117513257062467267217118295137698188065244968500265048394206261417927,
                 P25519, P25519 + 1)


def weak_ed25519_keys() -> list[bytes]:
    """Every encoding of a point of small order, both signs of x; and y = p + 2 (not
    canonical)."""
    out = [(y | sign << 255).to_bytes(32, "little") for y in SMALL_ORDER_Y for sign in (0, 1)]
    return [*out, (P25519 + 2).to_bytes(32, "little")]


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


def understated(data: bytes, rows: int = 1) -> bytes:
    """``data`` (a Parquet file pyarrow wrote) with its footer's total of rows (FileMetaData
    field 3, an i64 after the schema's list, before the row groups' list) set to ``rows``; the
    row groups, and their rows, as they were (rev46's tests/unit/runner/
    test_rev46_stated_steps.py; out49's progress bar)."""
    import struct

    import pyarrow as pa
    import pyarrow.parquet as pq

    size = struct.unpack("<I", data[-8:-4])[0]
    start = len(data) - 8 - size
    footer = data[start:-8]
    total = pq.read_metadata(pa.BufferReader(data)).num_rows
    field = b"\x16" + _varint(total << 1) + b"\x19"  # (compact: field +1 i64, field +1 list)
    assert footer.count(field) == 1
    footer = footer.replace(field, b"\x16" + _varint(rows << 1) + b"\x19")
    return data[:start] + footer + struct.pack("<I", len(footer)) + b"PAR1"


def unchecked_evaluation(name: str = "bc") -> Any:
    """A verified evaluation record of ``name``@1 on regression@1 with no ``contamination``
    entry (a release's next steps: test_release_way_on, test_release_shell_steps)."""
    from trajledger.verify.judge import Record
    from trajledger.verify.other_predicates import Evaluation
    from trajledger.verify.predicates import ArtifactRef, ResourceDescriptor

    class Entry:
        subject = "sha256:" + "e" * 64

    digest = "sha256:" + "d" * 64
    ev = Evaluation(result="PASSED", checkpoint=ArtifactRef(name, "1", "sha256:" + "c" * 64),
                    suite=ArtifactRef("regression", "1", digest), passed_tests=(f"{digest}/e0",),
                    failed_tests=(), metrics={}, evaluated_at="2026-12-07T00:00:00Z",
                    configuration=(ResourceDescriptor(name="other", uri="x:y"),))
    return Record(12, Entry(), None, ev, frozenset())  # type: ignore[arg-type]
