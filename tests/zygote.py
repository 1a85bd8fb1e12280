"""A fork server ("zygote") for the ``trajledger`` command of the docs harness
(tests/docs/test_doc_blocks.py) and the README tour (tests/e2e/test_readme_tour.py).

Why. A document runs about 15 ``trajledger`` commands; each fresh process spends most of its CPU
starting the interpreter and importing click, cryptography, pydantic, numpy, pyarrow and
gymnasium (0.2-1.0 CPU-s), for commands whose own work is a few milliseconds.

How. `serving` starts one server process per session (an xdist worker): it imports trajledger's
command line, the modules its commands load and the libraries they use (`PRELOAD`), then
listens on a Unix socket. A small client, written as
``trajledger`` into a directory the harness puts first on ``PATH``, sends the server its
arguments, working directory, environment, umask, ignored signals and its file descriptors 0, 1
and 2 (``SCM_RIGHTS``); the server forks a child that takes all of them, sets up ``sys.stdin``,
``sys.stdout`` and ``sys.stderr`` on those descriptors as the interpreter does at start-up, and
runs the real console script (`runpy.run_path`, as ``__main__``, with ``sys.argv[0]`` the
console script's path). The child ends as an interpreter does (exit handlers, flushing,
finalisation: its ``SystemExit`` leaves the server's code and ends the process; an uncaught
exception is printed from the console script's frame on, then the child exits 1; only an
uncaught ``KeyboardInterrupt``, which trajledger's own handlers leave no room for, ends it
killed by SIGINT before its exit handlers run). The server
reports the child's wait status; the client exits with it (a child killed by signal N: the
client kills itself with N, else exits 128+N). SIGINT, SIGTERM and SIGHUP sent to the client
are sent on to the child; a client that dies first takes its child with it (SIGKILL).

What stays as a fresh process gives it:

- Output, exit codes, ``isatty`` answers (the child writes to the caller's own descriptors),
  the umask, the working directory, signals the caller ignores (bash's background jobs ignore
  SIGINT and SIGQUIT), and the environment (``os.environ`` is replaced: HOME,
  TRAJLEDGER_STATE_DIR, TRAJLEDGER_PASSPHRASE, XDG_*, NO_COLOR ... are read when a command runs).
- What a module reads at import. trajledger's modules read no environment, clock or working
  directory at import, except `trajledger.ledger.fs` (the clock: when the process started, for
  judging leftovers of dead writers): the server serves for `MAX_AGE` seconds only, within
  which that reading cannot change a judgement. Libraries read settings at import (locale and
  ``PYTHON*`` for the interpreter; OpenBLAS, OpenMP, pandas and Arrow settings; ``TZ``): a
  request whose value of any variable of `FROZEN_PREFIXES` and `FROZEN_NAMES` differs from the
  server's is not served; the client then runs the console script itself (``exec``), as it also
  does when the server cannot be reached or is older than `MAX_AGE`.
- Randomness: Python reseeds `random` in a forked child; ``os.urandom`` and `secrets` are the
  kernel's. (numpy's legacy global generator is not reseeded: trajledger does not use it.)
- Threads: the server starts none (checked: `threading.active_count` is 1 before it listens).
  Two native threads exist after the imports, OpenBLAS's (numpy) and jemalloc's background
  thread (pyarrow); both libraries restart them in a forked child (their ``pthread_atfork``
  handlers), as with ``multiprocessing``'s fork. Arrow's own thread pools start on first use,
  in the child.

One difference remains: pyarrow is always loaded in the child. (``trajledger.__main__`` ends
every command with ``os._exit`` after its exit handlers, in the child as in a fresh process
since walk50, which did so only for the commands that load pyarrow: objects still referenced
at exit are not finalised; an SQLite connection left open keeps its write-ahead log file until
the next process opens the database, which SQLite reads as any reader does.)

``trajledger quickstart DIR`` (no other argument or option) is served from a template built for
real once per session, when nothing would differ (`quickstart_template`): its ledger and user
state copied to ``DIR``, its output and exit status replayed.

``python -m trajledger`` and ``python -c`` in documents are real processes (only the
``trajledger`` command is on the client's path). ``TRAJLEDGER_DOCS_NO_ZYGOTE=1`` in the test
run's environment makes the harness run every command as a real process (`enabled`).
``TRAJLEDGER_DOCS_ZYGOTE_LOG=FILE`` makes the server append, for each command it ran, its CPU
seconds (user + system, of the child and what it waited for) and its arguments to FILE.

Not a test module: the harness imports it as ``zygote`` (tests/conftest.py puts this directory
on ``sys.path``) and starts it as a script (``python zygote.py SOCKET SCRIPT LOG TEMPLATES``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import marshal
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

NO_ZYGOTE_ENV = "TRAJLEDGER_DOCS_NO_ZYGOTE"
"""Set to 1: the harness runs every ``trajledger`` command as a real process."""
LOG_ENV = "TRAJLEDGER_DOCS_ZYGOTE_LOG"
"""A file the server appends each command's CPU seconds and arguments to."""

PRELOAD = (
    "click",
    "cryptography.hazmat.primitives.asymmetric.ed25519",
    "cryptography.hazmat.primitives.asymmetric.ec",
    "cryptography.hazmat.primitives.serialization",
    "pydantic",
    "numpy",
    "pyarrow",
    "pyarrow.parquet",
    "pandas",
    "gymnasium",
    "zstandard",
    "trajledger.runner.cli",
    "trajledger.api",
    "trajledger.ledger.record",
    "trajledger.ledger.exchange",
    "trajledger.ledger.cards",
    "trajledger.ledger.index",
    "trajledger.runner.train",
    "trajledger.runner.rollouts",
    "trajledger.runner.evaluate",
    "trajledger.runner.lineage",
    "trajledger.runner.verification",
    "trajledger.ledger.trust_state",
    "trajledger.ledger.policy_state",
    "trajledger.ledger.artifacts",
    "trajledger.verify.succession",
    "trajledger.verify.sealed_files",
    "trajledger.verify.release_rules",
    "sqlite3",
    "pyarrow.pandas_compat",
    "pyarrow.dataset",
    "cryptography.hazmat.backends.openssl",
    "encodings.utf_16_be",
)
"""What the server imports before it forks: the command line, the modules its commands load,
and the heavy libraries they use (pandas too: pyarrow imports it on the first ``pa.array`` of a
list); from ``trajledger.ledger.trust_state`` on, what most served commands of the documents
still imported after the fork (the user's trust state and its SQLite database, the policy
state, the artifact readers, pyarrow's pandas shim and datasets, cryptography's OpenSSL
backend, a codec). Not lancedb (its import starts a thread), torch, ray or transformers (few
commands load them)."""

MAX_AGE = 1800.0
"""Seconds after its start during which the server serves requests (later ones run the console
script themselves): `trajledger.ledger.fs` notes at import when the process started, and judges
a leftover temporary file of an unknown writer stale when it is older than both that time and
``fs.STALE_AFTER`` (3600 s). For a file older than ``STALE_AFTER`` the first condition holds
alike for the server's start and a fresh process's while the server is younger than
``STALE_AFTER`` when a command looks (the harness's time-outs end a command within 900 s)."""

FROZEN_PREFIXES = ("PYTHON", "LC_", "OPENBLAS", "GOTO", "OMP_", "MKL_", "NUMPY", "NPY_",
                   "NUMEXPR", "PANDAS", "ARROW", "JE_", "MALLOC", "LD_")  # fmt: skip
FROZEN_NAMES = ("LANG", "LANGUAGE", "TZ", "TZDIR")
"""Variables read at start-up or import (the interpreter's, the locale, numeric libraries',
pandas', Arrow's, the time zone): a request must have the server's values, else it is not served."""

CLIENT = '''#!{python} -IS
# The docs harness's trajledger: runs the command in a fork of a preloaded server
# (tests/zygote.py), or runs the console script itself when it cannot.
import os, sys, marshal, _socket, _signal
SOCKET = {socket!r}
HERE = os.path.dirname(os.path.abspath(__file__))


def real():
    for d in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(d or ".", "trajledger")
        if os.path.abspath(d or ".") != HERE and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    sys.stderr.write("trajledger: command not found\\n")
    os._exit(127)


def run_real(path):
    os.execv(path, [path, *sys.argv[1:]])


def main():
    path = real()
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            pass
    mask = os.umask(0)
    os.umask(mask)
    ignored = [s for s in (_signal.SIGINT, _signal.SIGQUIT, _signal.SIGTERM, _signal.SIGHUP)
               if _signal.getsignal(s) == _signal.SIG_IGN]
    try:
        cwd = os.getcwdb()
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        sock.connect(SOCKET)
    except OSError:
        run_real(path)
    request = marshal.dumps((os.fsencode(path), [os.fsencode(a) for a in sys.argv[1:]], cwd,
                             dict(os.environb), mask, ignored, fds))
    rights = b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds)
    sock.sendmsg([request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
    reply = marshal.loads(sock.recv(4096) or marshal.dumps(("gone",)))
    if reply[0] == "exec":
        sock.close()
        run_real(path)
    if reply[0] != "pid":
        sys.stderr.write("trajledger (docs harness): the zygote server is gone\\n")
        os._exit(125)
    pid = reply[1]

    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    for s in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
        if s not in ignored:
            _signal.signal(s, forward)
    done = sock.recv(4096)
    if not done:
        sys.stderr.write("trajledger (docs harness): the zygote server is gone\\n")
        os._exit(125)
    status = marshal.loads(done)[1]
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        _signal.signal(sig, _signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


main()
'''


def enabled() -> bool:
    """Whether the harness runs ``trajledger`` commands through a zygote."""
    return os.environ.get(NO_ZYGOTE_ENV, "") != "1"


def frozen(env: Mapping[bytes, bytes] | Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` that a preloaded process read at start-up (`FROZEN_PREFIXES`,
    `FROZEN_NAMES`)."""
    out = {}
    for k, v in env.items():
        key = os.fsdecode(k)
        if key.startswith(FROZEN_PREFIXES) or key in FROZEN_NAMES:
            out[key] = os.fsdecode(v)
    return out


class Zygote:
    """A running server and its client's directory (`serving`)."""

    def __init__(self, root: Path, proc: subprocess.Popen[bytes], bin_dir: Path) -> None:
        self.root = root
        self.proc = proc
        self.bin = bin_dir
        """The directory holding the ``trajledger`` client: first on a session's ``PATH``."""

    def path(self, path: str) -> str:
        """``PATH`` with the client's directory first."""
        return str(self.bin) + os.pathsep + path

    def check(self) -> None:
        """Fail if the server died (its clients would have run the console script instead)."""
        assert self.proc.poll() is None, "the docs harness's zygote died:\n" + (
            self.root / "zygote.log").read_text("utf-8", "replace")[-3000:]


@contextlib.contextmanager
def serving(root: Path, templates: Path, path: str | None = None) -> Iterator[Zygote | None]:
    """A zygote serving while the block runs (None when `enabled` says no), started in the
    environment of this process with the ``PATH`` the harness gives a document (the directory
    of ``sys.executable`` first). Requests carry their own environment; one server serves
    every test of a session (an xdist worker). Quickstart templates (`quickstart_template`) are
    kept under ``templates``, which the servers of a session's xdist workers share. ``path``:
    another ``PATH`` to find the console script on (tests/docs/test_zygote.py's stand-in).
    """
    if not enabled():
        yield None
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJLEDGER_")}
    env["PATH"] = path or os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    script = real_script(env)
    python = script.read_text("utf-8").split("\n", 1)[0].removeprefix("#!").strip()
    root.mkdir(parents=True, exist_ok=True)
    sock, bin_dir = root / "zygote.sock", root / "bin"
    bin_dir.mkdir()
    client = bin_dir / "trajledger"
    client.write_text(CLIENT.format(python=python, socket=str(sock)), "utf-8")
    client.chmod(0o755)
    args = [python, __file__, str(sock), str(script), os.environ.get(LOG_ENV, ""), str(templates)]
    with (root / "zygote.log").open("wb") as log:
        proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=log, cwd=root)  # fmt: skip
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready == b"ready\n", (
            f"the zygote did not start: {ready!r}\n"
            + (root / "zygote.log").read_text("utf-8", "replace")[-3000:]
        )
        zygote = Zygote(root, proc, bin_dir)
        yield zygote
        zygote.check()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        assert proc.stdout is not None
        proc.stdout.close()


def real_script(env: Mapping[str, str]) -> Path:
    """The ``trajledger`` console script ``env``'s ``PATH`` finds."""
    import shutil

    found = shutil.which("trajledger", path=env.get("PATH"))
    assert found, "no trajledger console script on PATH"
    return Path(found)


# -- the server -----------------------------------------------------------------------------------


def std_stream(fd: int, name: str, buffered: bool) -> io.TextIOWrapper:
    """The ``sys.<name>`` a starting interpreter makes for ``fd`` (Python/pylifecycle.c,
    create_stdio), with the encoding and errors of this interpreter's own; ``buffered``: not
    under ``PYTHONUNBUFFERED``."""
    write = fd != 0
    original = getattr(sys, f"__{name}__")
    buf = open(fd, "wb" if write else "rb", buffering=-1 if buffered or not write else 0,  # noqa: SIM115
               closefd=False)  # fmt: skip
    raw = getattr(buf, "raw", buf)
    raw.name = f"<{name}>"
    line = buffered and (raw.isatty() or fd == 2)
    stream = io.TextIOWrapper(buf, encoding=original.encoding, errors=original.errors,
                              newline="\n", line_buffering=line,
                              write_through=not buffered)  # fmt: skip
    stream.mode = "w" if write else "r"  # type: ignore[misc]
    return stream


class Server:
    """The listening side: accepts requests, forks a child per request, reports statuses."""

    def __init__(self, path: str, script: str, log: str, templates: str) -> None:
        self.script = script
        self.log = log
        self.templates = templates
        self.client = Path(path).parent / "bin"
        self.frozen = frozen(os.environ)
        self.buffered = not sys.__stdout__.write_through  # as PYTHONUNBUFFERED says
        self.started = time.monotonic()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(path)
        self.listener.listen(64)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, tuple[socket.socket, list[str]]] = {}

    def serve(self) -> Callable[[], None]:
        """Serve until stopped; returns only in a forked child, with what the child runs."""
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "child")
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        while True:
            for key, _ in self.selector.select():
                if key.data == "accept":
                    job = self.accept()
                    if job is not None:
                        return job
                elif key.data == "child":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                    self.reap()
                else:  # a client's connection: readable only at its end
                    self.client_gone(key.fileobj, key.data)  # type: ignore[arg-type]

    def accept(self) -> Callable[[], None] | None:
        conn, _ = self.listener.accept()
        data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
        try:
            argv0, args, cwd, env, mask, ignored, present = marshal.loads(data)
        except (EOFError, ValueError, TypeError):
            for fd in fds:
                os.close(fd)
            conn.close()
            return None
        too_old = time.monotonic() - self.started > MAX_AGE
        if too_old or frozen(env) != self.frozen or os.fsdecode(argv0) != self.script:
            for fd in fds:
                os.close(fd)
            conn.send(marshal.dumps(("exec",)))
            conn.close()
            return None
        pid = os.fork()
        if pid == 0:
            return self.child(conn, fds, argv0, args, cwd, env, mask, ignored, present)
        for fd in fds:
            os.close(fd)
        self.children[pid] = (conn, [os.fsdecode(a) for a in args])
        conn.send(marshal.dumps(("pid", pid)))
        self.selector.register(conn, selectors.EVENT_READ, pid)
        return None

    def reap(self) -> None:
        while self.children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid not in self.children:
                continue
            conn, args = self.children.pop(pid)
            if self.log:
                cpu = usage.ru_utime + usage.ru_stime
                with open(self.log, "a", encoding="utf-8") as f:
                    f.write(f"{cpu:.3f}\ttrajledger {' '.join(args)}\n")
            with contextlib.suppress(KeyError):  # not if `client_gone` unregistered it
                self.selector.unregister(conn)
            with contextlib.suppress(OSError):
                conn.send(marshal.dumps(("status", status)))
            conn.close()

    def client_gone(self, conn: socket.socket, pid: int) -> None:
        """A client's connection became readable before its child ended: the client is gone
        (killed); so is its child."""
        self.selector.unregister(conn)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)

    def child(self, conn: socket.socket, fds: list[int], argv0: bytes, args: list[bytes],
              cwd: bytes, env: dict[bytes, bytes], mask: int, ignored: list[int],
              present: list[int]) -> Callable[[], None]:  # fmt: skip
        """In the forked child: become the process the client would have started."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.selector.close()
        for other, _ in self.children.values():
            other.close()
        conn.close()
        self.listener.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        received = dict(zip(present, fds, strict=True))
        for target in (0, 1, 2):
            if target in received:
                os.dup2(received[target], target)
            else:
                with contextlib.suppress(OSError):
                    os.close(target)
        for fd in fds:
            if fd not in (0, 1, 2):
                os.close(fd)
        os.chdir(cwd)
        os.umask(mask)
        os.environ.clear()
        for k, v in env.items():
            os.environb[k] = v
        for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
            default = signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL
            signal.signal(s, signal.SIG_IGN if s in ignored else default)
        for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
            stream = std_stream(fd, name, self.buffered) if fd in received else None
            setattr(sys, name, stream)
            setattr(sys, f"__{name}__", stream)
        script = os.fsdecode(argv0)
        sys.argv = [script, *(os.fsdecode(a) for a in args)]

        def run() -> None:
            import runpy

            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit:
                raise
            except BaseException as e:  # uncaught: printed from the script's frame on, as Python
                tb = e.__traceback__  # would print it; then the interpreter's exit for it
                while tb is not None and tb.tb_frame.f_code.co_filename != script:
                    tb = tb.tb_next
                sys.excepthook(type(e), e.with_traceback(tb), tb)
                if isinstance(e, KeyboardInterrupt):  # Python ends killed by SIGINT
                    for stream in (sys.stdout, sys.stderr):
                        with contextlib.suppress(Exception):
                            stream.flush()  # type: ignore[union-attr]
                    signal.signal(signal.SIGINT, signal.SIG_DFL)
                    os.kill(os.getpid(), signal.SIGINT)
                raise SystemExit(1) from None

        served = self.templates and quickstart_template(
            Path(self.templates), self.client, script, sys.argv[1:])
        return served or run


def main(argv: list[str]) -> Callable[[], None]:
    """``zygote.py SOCKET SCRIPT LOG TEMPLATES``: preload, check, serve; returns in a child
    only."""
    path, script, log, templates = argv
    sys.path[0] = os.path.dirname(script)  # as the console script's own interpreter has it
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    assert threading.active_count() == 1, f"threads before forking: {threading.enumerate()}"
    return Server(path, script, log, templates).serve()


# -- quickstart templates ----------------------------------------------------------------------

PLACEHOLDER = "zygote-quickstart-dir"
"""The directory a template is built in, named so that no other text of the quickstart's output
or ledger can contain it: the output's mentions of it are the caller's directory."""
SIMPLE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
PER_RUN = (b"HOME", b"TRAJLEDGER_STATE_DIR", b"PWD", b"OLDPWD", b"_", b"SHLVL")
"""Variables that differ between the harness's sessions (given to the build anew), besides
pytest's ``PYTEST_*`` (the test's name, the xdist worker's: the build has its first caller's)."""


def quickstart_template(
    root: Path, client: Path, script: str, args: list[str]
) -> Callable[[], None] | None:
    """``trajledger quickstart DIR`` (and no other argument or option) served from a template:
    the job that copies it to ``DIR`` and replays its output and status, or None when the
    command must run for real.

    A template is built once per pytest session (the servers of xdist workers share ``root``
    and take turns with a file lock), for real (the console script in a process of its own),
    by the first caller of its kind: in ``root/<key>/work/`` with a home and a user state
    directory of its own. The key is the environment (without `PER_RUN`, pytest's variables and
    this session's client directory on ``PATH``) and the umask: the
    same passphrase, the same settings. A template is used only if the build exited 0, wrote
    nothing but its ledger and its user state, and neither holds a path of the build or the
    directory's name, except the user state's pin of the ledger's directory (its path, in a
    file named by its hash), which the copy rewrites for ``DIR``.

    Served only when it makes no difference: standard input, output and error are not
    terminals (a terminal gets colour and progress), ``DIR`` is a plain name (no ``/``) that
    does not exist, ``TRAJLEDGER_STATE_DIR`` is set and names an absent or empty directory.
    Then ``DIR`` becomes a copy of the template's ledger (modes, times, links kept), the user
    state a copy of the template's (its pin rewritten), and the build's standard output and
    error (its directory's name replaced by ``DIR``) are written to this command's.
    """
    if len(args) != 2 or args[0] != "quickstart" or not SIMPLE_NAME.fullmatch(args[1]):
        return None
    directory = Path(args[1])
    state = os.environ.get("TRAJLEDGER_STATE_DIR")
    if any(os.isatty(fd) for fd in (0, 1, 2)) or directory.exists() or directory.is_symlink():
        return None
    if not state or not os.path.isdir(os.path.dirname(os.path.abspath(state))):
        return None
    if os.path.lexists(state) and (not os.path.isdir(state) or os.listdir(state)):
        return None
    mask = os.umask(0)
    os.umask(mask)
    env = {k: v for k, v in os.environb.items()
           if k not in PER_RUN and not k.startswith(b"PYTEST_")}  # fmt: skip
    path = os.fsencode(os.pathsep).join(
        p for p in env.get(b"PATH", b"").split(os.fsencode(os.pathsep)) if p != os.fsencode(client))
    env[b"PATH"] = path  # the build and the key without this session's client
    key = hashlib.sha256(marshal.dumps((sorted(env.items()), mask, script))).hexdigest()[:16]
    template = root / key
    template = build_template(template, script, env)
    if template is None:
        return None

    def serve() -> None:
        out = (template / "stdout").read_bytes().replace(PLACEHOLDER.encode(), args[1].encode())
        err = (template / "stderr").read_bytes().replace(PLACEHOLDER.encode(), args[1].encode())
        shutil.copytree(template / "work" / PLACEHOLDER, directory, symlinks=True)
        copy_state(template / "state", Path(state), directory.resolve())
        for fd, data in ((1, out), (2, err)):
            with contextlib.suppress(OSError):
                while data:
                    data = data[os.write(fd, data):]
        os._exit(int((template / "status").read_text("utf-8")))

    return serve


def build_template(template: Path, script: str, env: dict[bytes, bytes]) -> Path | None:
    """The template ``template`` (built now if no one has), or None when it cannot be used."""
    template.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(template.parent / f"{template.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (template / "status").exists() and not (template / "unusable").exists():
            shutil.rmtree(template, ignore_errors=True)  # a build killed half-way
            reason = build(template, script, env)
            if reason:
                (template / "unusable").write_text(reason, "utf-8")
    finally:
        os.close(lock)
    return None if (template / "unusable").exists() else template


def build(template: Path, script: str, env: dict[bytes, bytes]) -> str | None:
    """Run ``trajledger quickstart PLACEHOLDER`` for real in ``template`` (with this process's
    umask); why its result cannot serve as a template, or None when it can."""
    work, home, state = template / "work", template / "home", template / "state"
    for d in (work, home):
        d.mkdir(parents=True)
    run_env = {**env, b"HOME": os.fsencode(home), b"TRAJLEDGER_STATE_DIR": os.fsencode(state),
               b"PWD": os.fsencode(work)}  # fmt: skip
    with (template / "stdout.tmp").open("wb") as out, (template / "stderr.tmp").open("wb") as err:
        done = subprocess.run([script, "quickstart", PLACEHOLDER], cwd=work, env=run_env,
                              stdin=subprocess.DEVNULL, stdout=out, stderr=err)  # fmt: skip
    if done.returncode != 0:
        return f"the build exited {done.returncode}"
    if os.listdir(home) or os.listdir(work) != [PLACEHOLDER]:
        return "the build wrote outside its ledger and user state"
    pins = list((state / "ledgers").glob("*.json"))
    where = str((work / PLACEHOLDER).resolve())
    if len(pins) != 1 or pins[0].name != pin_name(where):
        return f"no single pin of the ledger's directory in the user state: {pins}"
    pin = pins[0].read_bytes()
    doc = json.loads(pin)
    if doc.get("root") != where or json.dumps(doc).encode() != pin or len(doc) != 2:
        return f"the pin of the ledger's directory is not as expected: {pin!r}"
    for f in [*(work / PLACEHOLDER).rglob("*"), *state.rglob("*")]:
        if f.is_file() and not f.is_symlink() and f != pins[0]:
            data = f.read_bytes()
            if str(template).encode() in data or PLACEHOLDER.encode() in data:
                return f"{f} holds the build's path or directory name"
    (template / "stdout.tmp").rename(template / "stdout")
    (template / "stderr.tmp").rename(template / "stderr")
    (template / "status").write_text("0", "utf-8")
    return None


def pin_name(where: str) -> str:
    """The name of the user state's pin of the ledger directory ``where`` (a resolved path)."""
    return hashlib.sha256(where.encode()).hexdigest()[:32] + ".json"


def copy_state(template: Path, state: Path, directory: Path) -> None:
    """Copy the template's user state to ``state`` (absent: made as the build made its own;
    else its mode is kept), its pin rewritten for ``directory``."""
    pins = template / "ledgers"
    if not state.exists():
        state.mkdir()
        shutil.copystat(template, state)
    for entry in template.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, state / entry.name, symlinks=True,
                            ignore=lambda d, names: names if Path(d) == pins else [])  # fmt: skip
        else:
            shutil.copy2(entry, state / entry.name, follow_symlinks=False)
    (old,) = pins.glob("*.json")
    doc = json.loads(old.read_bytes())
    doc["root"] = str(directory)
    new = state / "ledgers" / pin_name(str(directory))
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL, old.stat().st_mode & 0o777)
    with os.fdopen(fd, "wb") as f:
        f.write(json.dumps(doc).encode())


if __name__ == "__main__":
    main(sys.argv[1:])()
