"""Shared fixtures for every test package.

- ``runner``: a click ``CliRunner`` whose results keep stdout and stderr apart
  (``result.stdout``, ``result.stderr``; ``result.output`` is both, interleaved).
- ``home``: an initialised ledger directory under ``tmp_path`` (a copy of a template built once
  per session: `testkit.copy_template`).
- ``make_tree``: a factory writing a directory of files from a ``{path: content}`` spec.
- ``quickstart_template``: ``trajledger quickstart --episodes 10`` built once per session (the
  e2e and unit modules copy it: `testkit.copy_template`).
- ``passphrase``: sets ``TRAJLEDGER_PASSPHRASE`` for one test and returns it.
- ``--update-goldens``: rewrite golden files instead of comparing; tests read it through the
  ``update_goldens`` fixture.
- Result tables: a test that calls ``record_property("summary:<title>", line)`` has ``line``
  printed under ``<title>`` at the end of the run (also under ``-n``: the properties travel
  with the reports), e.g. the outcome of every sigstore-conformance case.

Test modules are imported by path (``--import-mode=importlib`` in pyproject.toml), because the
tree mirrors the packages and file names repeat (tests/unit/verify/test_keys.py and
tests/unit/ledger/test_keys.py). That puts no test directory on ``sys.path``: this directory is
put there, once, so that tests ``import testkit`` (the helpers the packages share: ledger
templates built once per session and copied per test, log entry specs).

Every test runs with ``TRAJLEDGER_HOME``, ``TRAJLEDGER_PASSPHRASE`` and
``TRAJLEDGER_PASSPHRASEFILE`` removed from the environment, so a developer's own settings never
leak into a result, and with its own ``TRAJLEDGER_STATE_DIR`` (the user state directory), so
no test reads or writes ``~``.
"""

from __future__ import annotations

import os
import random
import re
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import settings

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

import testkit

# No timing assertions in tests (the machines are shared): hypothesis's default 200 ms
# deadline a test case is one. It failed test_log_entry's round trip at 251 ms under load 20
# (out41's full suite, twenty-sixth round).
settings.register_profile("trajledger", deadline=None)
settings.load_profile("trajledger")

# The test modules' bytecode (assertion-rewritten by pytest) is cached in their __pycache__
# (ignored by git) even under PYTHONDONTWRITEBYTECODE: rewriting the ~150 test modules again
# costs each xdist worker 5 to 8 s of CPU per run. Subprocesses keep the environment's setting.
sys.dont_write_bytecode = False

TEST_PASSPHRASE = testkit.TEST_PASSPHRASE

TreeSpec = Mapping[str, "bytes | str | int"]
"""``{relative POSIX path: content}``; an ``int`` means that many seeded random bytes."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="Rewrite golden files from the current output instead of comparing with them.",
    )


GC_THRESHOLD = (700, 10, 100)
"""The cyclic garbage collector's thresholds in the test processes (pytest and its workers;
the default is ``(700, 10, 10)``). The youngest two generations are collected as often as by
default, so a cycle a test drops is freed as soon as before; only the full collections, which
walk every object a worker holds (every module imported by every test so far: torch, pyarrow,
hypothesis, ...), come ten times less often: 4 to 8 % of a worker's CPU went to the collector,
most of it to those. The processes the tests start keep Python's default, and the product's
own settings (``reader_process.GC_THRESHOLD``, ``gc.freeze`` of a command's own start-up) are
set in their own processes."""


def load_each_encrypted_key_once() -> None:
    """Make ``cryptography``'s ``serialization.load_pem_private_key`` (which
    `trajledger.ledger.keys` calls) give the key it gave before for the same encrypted file's
    bytes and passphrase, in this test process.

    Loading an encrypted key derives its key-encryption key with scrypt at the file's own cost
    (`trajledger.ledger.key_pkcs8.SCRYPT_COST`: 16 MiB, 0.03 to 0.1 CPU-s here), and the tests
    sign with the same few keys again and again (each ``sign``, ``approve``, ``record`` in
    process). The first load of each (bytes, passphrase) is the real one: a wrong passphrase, a
    changed file or another key is loaded, and refused, as before; nothing is kept of a load
    that failed. The product's own code runs unchanged, and keys are still written at the
    product's cost (`key_pkcs8.encrypted_pkcs8`); the processes tests start load as the
    product does."""
    from cryptography.hazmat.primitives import serialization

    load = serialization.load_pem_private_key
    if getattr(load, "loads_each_once", False):
        return
    loaded: dict[tuple[bytes, bytes, bool], object] = {}

    def load_pem_private_key(data: bytes, password: bytes | None, backend: object = None, *,
                             unsafe_skip_rsa_key_validation: bool = False) -> object:
        if not password:
            return load(data, password, backend,
                        unsafe_skip_rsa_key_validation=unsafe_skip_rsa_key_validation)
        seen = (bytes(data), bytes(password), unsafe_skip_rsa_key_validation)
        if seen not in loaded:
            loaded[seen] = load(data, password, backend,
                                unsafe_skip_rsa_key_validation=unsafe_skip_rsa_key_validation)
        return loaded[seen]

    load_pem_private_key.loads_each_once = True  # type: ignore[attr-defined]
    serialization.load_pem_private_key = load_pem_private_key  # type: ignore[assignment]


def read_each_environment_once() -> None:
    """Make `trajledger.runner.buildinfo.environment_lock` (what ``train`` and ``eval`` record
    as the Python environment) give the lines it gave before while nothing it reads changed,
    in this test process.

    It parses the metadata of every installed distribution (about 160 here: 0.04 to 0.06
    CPU-s a call), on each ``train`` and ``eval`` a test runs in process, for the same
    environment every time. The first call for a state of the search path is the real one;
    the state is each ``sys.path`` entry (as an absolute path) and the names of the
    distributions' metadata directories in it (``*.dist-info``, ``*.egg-info``: a distribution
    installed, removed or upgraded there adds or removes one), so the lines are read again
    after any such change, however soon. The processes the tests start read them as the
    product does. Set before any test module imports the function by name
    (`trajledger.runner.train` and `training` do)."""
    from trajledger.runner import buildinfo

    read = buildinfo.environment_lock
    if getattr(read, "reads_each_once", False):
        return
    seen: dict[tuple[tuple[str, frozenset[str] | None], ...], bytes] = {}

    def entry(path: str) -> tuple[str, frozenset[str] | None]:
        where = os.path.abspath(path or os.curdir)
        try:
            return where, frozenset(n for n in os.listdir(where)
                                    if n.endswith((".dist-info", ".egg-info")))
        except OSError:  # (not a directory: a zip file, or nothing)
            return where, None

    def environment_lock() -> bytes:
        state = tuple(entry(path) for path in sys.path)
        if state not in seen:
            seen[state] = read()
        return seen[state]

    environment_lock.reads_each_once = True  # type: ignore[attr-defined]
    environment_lock.__wrapped__ = read  # type: ignore[attr-defined]
    buildinfo.environment_lock = environment_lock


REAL_FLUSHES_ENV = "TRAJLEDGER_TESTS_REAL_FLUSHES"
"""Set to 1: every test flushes to the disk for real (`flush_to_the_page_cache`)."""
FLUSH_NAMES = re.compile(r"\b(fsync|fdatasync|syncfs)\b")
"""A test module whose source names one of these has the real flushes (`_real_flushes`)."""
REAL_FLUSHES: dict[str, Callable[..., Any]] = {}
"""The real ``os.fsync``, ``os.fdatasync``, ``trajledger.ledger.fs.syncfs`` and
``sqlite3.connect``, once replaced."""
SUBPROCESS_SITE = str(Path(__file__).parent / "subprocess_site")
"""The directory of the ``sitecustomize`` that does `flush_to_the_page_cache` in the Python
processes the tests start (put first on their ``PYTHONPATH``)."""
SYNCED = "PRAGMA synchronous=FULL"
"""The user state's setting (`trajledger.ledger.trust_state`): every commit waits for the disk."""


def page_cache_commits(connect: Callable[..., Any]) -> Callable[..., Any]:
    """``sqlite3.connect`` (``connect``), whose connections' ``PRAGMA synchronous=FULL`` (the
    user state's) is ``OFF``: their commits go to the page cache, as the flushes do
    (`flush_to_the_page_cache`); unless ``TRAJLEDGER_TESTS_REAL_FLUSHES=1`` when the connection
    is made (then it is ``connect``'s own): a module that names the flushes has it for each
    test (`_real_flushes`), and a test of the setting itself sets it (test_trust_state's
    durable state: the module's other tests keep the page cache, 10 s of wall at load 8)."""
    import sqlite3

    class PageCacheCommits(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            return super().execute("PRAGMA synchronous=OFF" if sql == SYNCED else sql, *args)

    def page_cache_connect(*args: Any, **kwargs: Any) -> Any:
        if os.environ.get(REAL_FLUSHES_ENV) != "1":
            kwargs.setdefault("factory", PageCacheCommits)
        return connect(*args, **kwargs)

    page_cache_connect.__wrapped__ = connect  # type: ignore[attr-defined]
    return page_cache_connect


def flush_to_the_page_cache() -> None:
    """In this test process, ``os.fsync``, ``os.fdatasync`` and
    `trajledger.ledger.fs.syncfs` check their descriptor and return, without waiting for the
    disk, and the user state's SQLite commits go to the page cache (`page_cache_commits`);
    unless ``TRAJLEDGER_TESTS_REAL_FLUSHES=1``.

    What a flush gives is durability across a power cut or a kernel crash, which no test in
    process can observe: a file written and closed is read back the same from the page cache
    either way, and a process killed (SIGKILL) loses nothing the kernel holds. What it costs is
    waiting for a disk that the six helpers' runs, or a CI machine's other jobs, keep busy:
    three e2e files went from 88 to 38 s of wall (the CPU 22.3 -> 19.7 s; suite46, load 9);
    the user state's commits about 4 ms each under the helpers' load (2,194 commits, 8 of the
    100 profiled s of test_paths_agree and test_histories_agree, ci55). Every call still runs
    (the product's own code and order are unchanged) and still fails as
    the real one would on a descriptor that is not open (``EBADF``); one on anything but a
    regular file or a directory (a pipe, a socket, a device) is passed to the real call, whose
    answer (``EINVAL`` ...) stands.

    The Python processes the tests start do the same (`SUBPROCESS_SITE` is put first on the
    ``PYTHONPATH`` they inherit; a process started with ``-I`` or an environment of its own
    flushes for real): a process killed (the crash tests' SIGKILL) loses nothing the kernel
    holds either. The subprocesses waited on fsyncs and ``syncfs`` calls (which wait for every
    dirty file of the disk, other jobs' too) while the test process's core sat idle.

    Kept real: in every test of a module whose source names ``fsync``, ``fdatasync`` or
    ``syncfs`` (`_real_flushes`), and in the processes those tests start: the durability
    tests, the fault sweeps and the spies that count flushes. A fault injected by replacing
    one of these wins over this, as it replaces it for its test."""
    import sqlite3
    import stat

    from trajledger.ledger import fs

    if os.environ.get(REAL_FLUSHES_ENV) == "1" or REAL_FLUSHES:
        return

    def real(flush: Callable[..., Any]) -> Callable[..., Any]:
        """The call under `SUBPROCESS_SITE`'s replacement: an xdist worker is a process this
        run started, which has it."""
        while getattr(flush, "__module__", None) == "sitecustomize":
            flush = flush.__wrapped__  # type: ignore[attr-defined]
        return flush

    REAL_FLUSHES.update(fsync=real(os.fsync), fdatasync=real(os.fdatasync),
                        syncfs=real(fs.syncfs), connect=real(sqlite3.connect))  # fmt: skip

    def checked(real: Callable[[int], None]) -> Callable[[int], None]:
        def flush(fd: int) -> None:
            mode = os.fstat(fd).st_mode  # (EBADF, as the real call)
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                real(fd)

        flush.__wrapped__ = real  # type: ignore[attr-defined]
        return flush

    def syncfs(fd: int, path: str | None = None) -> None:
        os.fstat(fd)

    os.fsync = checked(REAL_FLUSHES["fsync"])
    os.fdatasync = checked(REAL_FLUSHES["fdatasync"])
    fs.syncfs = syncfs
    setattr(sqlite3, "connect", page_cache_commits(REAL_FLUSHES["connect"]))  # noqa: B010
    # The processes the tests start, the same (tests/subprocess_site/sitecustomize.py).
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if SUBPROCESS_SITE not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([SUBPROCESS_SITE, *filter(None, paths)])


def pytest_configure(config: pytest.Config) -> None:
    """Set `GC_THRESHOLD`; `load_each_encrypted_key_once`; `read_each_environment_once`;
    `flush_to_the_page_cache`;
    `testkit.interrupt_as_in_the_foreground` (in the controller before it starts the workers,
    and in each worker). Then, before any worker starts (in
    the controller, or the one process without ``-n``): write the bytecode of trajledger's
    modules, as ``pip install`` of a wheel does.

    The hundreds of ``trajledger`` and ``python -c`` processes the tests start keep the
    environment's ``PYTHONDONTWRITEBYTECODE`` (this machine sets it): without written
    bytecode each of them compiles from source every module it imports that no earlier
    process of the run has written (about 0.15 s of CPU for the command line's modules).
    Only the bytecode cache (``__pycache__``, ignored by git) is written; the sources are not
    touched, and Python still checks each cached file against its source."""
    import gc

    gc.set_threshold(*GC_THRESHOLD)
    load_each_encrypted_key_once()
    read_each_environment_once()
    flush_to_the_page_cache()
    testkit.interrupt_as_in_the_foreground()
    if hasattr(config, "workerinput"):
        return
    import compileall

    import trajledger

    compileall.compile_dir(Path(trajledger.__file__).parent, quiet=1, workers=1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules holding a ``slow`` test run first (in collection order, each module whole):
    under ``-n 2 --dist worksteal`` (pyproject.toml) the long tests then start early, and a
    worker left without work takes the short ones queued last from the other, instead of one
    worker finishing a long sweep alone at the end of the run."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)  # stable: the order within stays


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    sections: dict[str, list[str]] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for key, value in getattr(report, "user_properties", ()):
                if isinstance(key, str) and key.startswith("summary:"):
                    sections.setdefault(key.removeprefix("summary:"), []).append(str(value))
    for title, lines in sorted(sections.items()):
        terminalreporter.write_sep("-", title)
        for line in sorted(lines):
            terminalreporter.write_line(line)


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    """True when the run was started with ``--update-goldens``."""
    return bool(request.config.getoption("--update-goldens"))


@pytest.fixture(scope="session", autouse=True)
def _session_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Session and module fixtures (built before any test's own environment) get a state
    directory of their own too: nothing a test run does reaches the developer's ~."""
    import os

    old = os.environ.get("TRAJLEDGER_STATE_DIR")
    os.environ["TRAJLEDGER_STATE_DIR"] = str(tmp_path_factory.mktemp("session-state"))
    yield
    if old is None:
        os.environ.pop("TRAJLEDGER_STATE_DIR", None)
    else:
        os.environ["TRAJLEDGER_STATE_DIR"] = old


@pytest.fixture(scope="module", autouse=True)
def _module_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each set-up of a module's fixtures has a state directory of its own: under xdist a
    module's fixtures may be built twice in one worker, and a ledger built again under the same
    origin with a new key must not meet the first one's pinned key."""
    import os

    old = os.environ["TRAJLEDGER_STATE_DIR"]
    os.environ["TRAJLEDGER_STATE_DIR"] = str(tmp_path_factory.mktemp("module-state"))
    yield
    os.environ["TRAJLEDGER_STATE_DIR"] = old


NAMES_FLUSHES: dict[str, bool] = {}
"""Whether a test module's source names a flush (`FLUSH_NAMES`), by its path."""


@pytest.fixture(autouse=True)
def _real_flushes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real flushes (`flush_to_the_page_cache`) for each test of a module that names
    them (`FLUSH_NAMES`), in process and in the processes it starts
    (``TRAJLEDGER_TESTS_REAL_FLUSHES=1``, which the SQLite connections made from then on read:
    `page_cache_commits`). A module's and the session's fixtures are built before it."""
    if not REAL_FLUSHES:
        return
    path = str(request.path)
    if path not in NAMES_FLUSHES:
        NAMES_FLUSHES[path] = bool(FLUSH_NAMES.search(Path(path).read_text("utf-8")))
    if NAMES_FLUSHES[path]:
        from trajledger.ledger import fs

        monkeypatch.setattr(os, "fsync", REAL_FLUSHES["fsync"])
        monkeypatch.setattr(os, "fdatasync", REAL_FLUSHES["fdatasync"])
        monkeypatch.setattr(fs, "syncfs", REAL_FLUSHES["syncfs"])
        monkeypatch.setenv(REAL_FLUSHES_ENV, "1")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    for name in ("TRAJLEDGER_HOME", "TRAJLEDGER_PASSPHRASE", "TRAJLEDGER_PASSPHRASEFILE"):
        monkeypatch.delenv(name, raising=False)
    # Each test has its own user state directory (seen checkpoints, trust state), never ~.
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(scope="session")
def docs_zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The fork server of the docs harness and the README tour (tests/zygote.py: one per
    session, an xdist worker), or None under ``TRAJLEDGER_DOCS_NO_ZYGOTE=1``."""
    import os

    import zygote

    shared = tmp_path_factory.getbasetemp()  # xdist: the workers' directories are under one
    shared = shared.parent if os.environ.get("PYTEST_XDIST_WORKER") else shared
    templates = shared / "quickstart-templates"
    with zygote.serving(tmp_path_factory.mktemp("zygote"), templates) as server:
        yield server


@pytest.fixture
def runner() -> CliRunner:
    """A CliRunner with stderr kept apart from stdout (`testkit.new_runner`)."""
    return testkit.new_runner()


@pytest.fixture
def passphrase(monkeypatch: pytest.MonkeyPatch) -> str:
    """Set ``TRAJLEDGER_PASSPHRASE`` for this test; returns the passphrase."""
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", TEST_PASSPHRASE)
    return TEST_PASSPHRASE


def build_empty(home: Path) -> None:
    """An initialised, empty ledger at ``home`` (origin ``test/ledger``)."""
    from trajledger import Ledger

    Ledger.init(home, origin="test/ledger")


@pytest.fixture(scope="session")
def empty_template(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[None]:
    """`build_empty`, once."""
    return testkit.build_template(tmp_path_factory.mktemp("empty-template"), build_empty)


@pytest.fixture
def home(empty_template: testkit.Template[None], tmp_path: Path) -> Path:
    """An initialised, empty ledger directory (origin ``test/ledger``) at ``tmp_path/home``,
    initialised by this test's user (a copy of `empty_template`)."""
    return testkit.copy_template(empty_template, tmp_path / "home")


@pytest.fixture
def make_tree(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Factory: ``make_tree(spec, root=None) -> root`` writes every file of ``spec``.

    Parent directories are created; ``str`` content is written as UTF-8, ``int`` content as
    that many bytes from a generator seeded by the path (so reruns write the same bytes).
    ``root`` defaults to a fresh directory under ``tmp_path``.
    """
    count = 0

    def make(spec: TreeSpec, root: Path | None = None) -> Path:
        nonlocal count
        if root is None:
            count += 1
            root = tmp_path / f"tree{count}"
        root.mkdir(parents=True, exist_ok=True)
        for rel, content in spec.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, int):
                data = random.Random(rel).randbytes(content)
            elif isinstance(content, str):
                data = content.encode("utf-8")
            else:
                data = content
            path.write_bytes(data)
        return root

    yield make


@pytest.fixture(scope="session")
def quickstart_template(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[str]:
    """``trajledger quickstart --episodes 10`` (`testkit.quickstart`: keys in the clear), built
    once; its value is the final checkpoint's digest. About 60 modules start from a copy
    (`testkit.copy_template`, 0.04 CPU-s) instead of a quickstart of their own (0.9 to 2 CPU-s
    in process); a test of the quickstart itself, or one that needs keys or a log of its own
    (a second, different ledger), runs its own."""
    return testkit.build_template(tmp_path_factory.mktemp("quickstart"), testkit.quickstart)


# -- a ledger holding an approved chat dataset (the training tests) ---------------------------

CHAT_POLICY = """\
name = "chat"
serial = 1
max_approval_age = "90d"

[roles.producer]
keys = ["keys/vendor.pub"]

[roles.approver]
keys = ["keys/approver.pub"]

[roles.trainer]
keys = ["keys/trainer.pub"]

[roles.log]
vkeys = ["{vkey}"]
"""


def chat_lines(n: int = 8) -> list[dict[str, object]]:
    """``n`` small conversations (arithmetic; the third also calls a tool), as chat JSONL."""
    out: list[dict[str, object]] = []
    for i in range(n):
        messages: list[dict[str, object]] = [
            {"role": "system", "content": "answer with a number"},
            {"role": "user", "content": f"what is {i} + {i} ?"},
        ]
        if i == 2:
            messages += [
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}]},
                {"role": "tool", "content": "4", "tool_call_id": "c1", "name": "add"},
            ]
        messages.append({"role": "assistant", "content": f"{2 * i}"})
        out.append({"episode_id": f"conv-{i}", "task_id": f"add-{i}", "messages": messages,
                    "reward": 1.0})
    return out


def build_chat(home: Path) -> None:
    """The ledger of `chat_template` at ``home``."""
    import json

    from trajledger import Ledger

    ledger = Ledger.init(home, origin="test/chat")
    for k in ("vendor", "approver", "trainer"):
        ledger.keys.create(k, encrypt=False)
    policy = home / "policy.toml"
    policy.write_text(CHAT_POLICY.format(vkey=ledger.log.vkey))
    ledger.set_policy(policy, keys=["approver"])
    ledger.register_environment("chat", "1", key="vendor", source="tests")
    jsonl = home.parent / "chat.jsonl"
    jsonl.write_text("".join(json.dumps(line) + "\n" for line in chat_lines()))
    batch = ledger.record_batch([jsonl], env="chat@1", policy="model-0", key="vendor",
                                fmt="chat-jsonl", name="chat-batch")
    ledger.create_dataset("chat", "1", "train", [batch.digest], key="vendor")
    ledger.approve("chat@1", key="approver")


@pytest.fixture(scope="session")
def chat_template(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[None]:
    """A ledger (built once) with keys vendor, approver, trainer; a policy (1 approval); an
    environment ``chat@1``; one chat batch of `chat_lines`; dataset ``chat@1`` approved."""
    return testkit.build_template(tmp_path_factory.mktemp("chat-template"), build_chat)


@pytest.fixture
def chat_home(chat_template: testkit.Template[None], tmp_path: Path) -> Path:
    """A copy of `chat_template` for one test, known to its user (`testkit.copy_template`)."""
    return testkit.copy_template(chat_template, tmp_path / "home")


# -- a torchrun-like launcher (the training-command tests) ------------------------------------

LAUNCHER_WORKER = textwrap.dedent(
    """
    import os, pathlib, signal, sys, time
    d, i = pathlib.Path(sys.argv[1]), sys.argv[2]
    def stop(signum, frame):
        (d / f"worker{i}.signal").write_text(signal.Signals(signum).name)
        sys.exit(0)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    # One write(2) per line: a pipe keeps each whole (print() may write the newline apart).
    os.write(1, f"worker {i} ready\\n".encode())
    (d / f"worker{i}.pid").write_text(str(os.getpid()))
    if sys.argv[3] == "wait":
        time.sleep(600)
    os.write(1, f"worker {i} done\\n".encode())
    """
)

LAUNCHER = textwrap.dedent(
    """
    import os, pathlib, signal, subprocess, sys
    d, mode = sys.argv[1], sys.argv[2]
    worker = pathlib.Path(d, "worker.py")
    # Like a launcher that does not forward signals: it notes them and waits for its workers.
    note = lambda s, f: pathlib.Path(d, "launcher.signal").write_text(signal.Signals(s).name[3:])
    signal.signal(signal.SIGINT, note)
    signal.signal(signal.SIGTERM, note)
    procs = [subprocess.Popen([sys.executable, str(worker), d, str(i), mode]) for i in range(2)]
    codes = [p.wait() for p in procs]
    os.write(1, f"launcher: workers exited {codes}\\n".encode())
    sys.exit(max(codes))
    """
)


@pytest.fixture
def launcher(tmp_path: Path) -> Path:
    """A directory with ``launcher.py DIR MODE`` (starts ``worker.py DIR I MODE`` twice and
    waits; MODE ``run``: workers print and exit, ``wait``: they sleep until a signal, which
    each writes to ``DIR/worker<I>.signal``; the launcher notes its own in ``launcher.signal``
    and does not pass it on) and ``worker.py``. Workers write ``worker<I>.pid`` once running."""
    d = tmp_path / "launch"
    d.mkdir()
    (d / "worker.py").write_text(LAUNCHER_WORKER)
    (d / "launcher.py").write_text(LAUNCHER)
    return d
