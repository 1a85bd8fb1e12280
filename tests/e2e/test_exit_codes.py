"""Exit codes that are rules of the whole command line (DESIGN §8), one test per rule.

- Ctrl-C exits 130 (128 + SIGINT) at once, saying nothing was half-written and what was
  recorded (`_signals.stopped_line`), and leaves nothing
  behind: the output file is not written and the ledger still verifies. SIGTERM and SIGHUP (a
  scheduler's stop, a closed terminal) do the same with 143 and 129; a signal the command was
  started with ignored (``nohup``) stays ignored. A command's worker processes end with it,
  however it ended.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import testkit

SCRIPT = Path(sys.executable).with_name("trajledger")


def cli(*args: str | Path) -> list[str]:
    if SCRIPT.is_file():
        return [str(SCRIPT), *map(str, args)]
    return [sys.executable, "-c", "import sys; from trajledger.runner.cli import main; "
            "sys.argv[0] = 'trajledger'; main()", *map(str, args)]


def _has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (Linux /proc)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fd) == str(path.resolve()) for fd in fds.iterdir())
    except OSError:  # it exited, or a descriptor closed while listed
        return False


def _to_a_worker_thread(pid: int, sig: int) -> None:
    """Send ``sig`` to one of ``pid``'s threads other than its main thread (tgkill), as the
    kernel may when a process-wide signal arrives while the main thread waits."""
    workers = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert workers, "the hashing threads are running"
    libc = ctypes.CDLL(None, use_errno=True)
    if hasattr(libc, "tgkill"):
        rc = libc.tgkill(pid, workers[0], sig)
    else:  # glibc before 2.30
        rc = libc.syscall({"x86_64": 234, "aarch64": 131}[platform.machine()], pid, workers[0],
                          sig)
    assert rc == 0, os.strerror(ctypes.get_errno())


STOPS = [(signal.SIGINT, 130, "FAIL: interrupted; nothing was recorded or half-written\n"),
         (signal.SIGTERM, 143, "FAIL: stopped by SIGTERM; nothing was recorded or half-written\n"),
         (signal.SIGHUP, 129, "FAIL: stopped by SIGHUP; nothing was recorded or half-written\n")]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("to", ["process", "worker-thread"])
@pytest.mark.parametrize(("sig", "code", "said"), STOPS, ids=["INT", "TERM", "HUP"])
def test_ctrl_c_exits_130_at_once_with_nothing_half_written(
    tmp_path: Path, to: str, sig: int, code: int, said: str
) -> None:
    """SIGINT during hashing: exit 130 within a chunk, nothing written. Also when the kernel
    hands the signal to a hashing thread: the main thread, waiting on a file that takes hours,
    must still see it (it hung before: found by a CI run). SIGTERM and SIGHUP alike, with
    their own status (before, they ended the process where it stood: -15, no line, its
    temporary files and worker processes left behind)."""
    if to == "worker-thread" and platform.machine() not in ("x86_64", "aarch64"):
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "tgkill"):
            pytest.skip("no tgkill here")
    proc, home, out = _signing_a_huge_file(tmp_path)
    if to == "process":
        proc.send_signal(sig)
    else:
        _to_a_worker_thread(proc.pid, sig)
    try:
        _out, err = proc.communicate(timeout=30)  # within one chunk per worker, not hours
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"{signal.Signals(sig).name} did not stop the command")
    assert proc.returncode == code, err
    assert err.endswith(said), err
    assert "Traceback" not in err
    assert not out.exists()
    assert not list(tmp_path.glob("*.tmp*")) and not list((tmp_path / "data").glob(".*"))
    r = subprocess.run(cli("--ledger", home, "log", "verify"), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")
def test_a_stop_the_command_was_started_ignoring_stays_ignored(tmp_path: Path) -> None:
    """``nohup trajledger ...``: the command starts with SIGHUP ignored, and a hang-up does
    not stop it; Ctrl-C still does."""
    proc, _home, _out = _signing_a_huge_file(
        tmp_path, ignored=(signal.SIGHUP,))
    proc.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs Linux /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["TERM", "KILL"])
def test_a_commands_worker_processes_end_with_it(
    quickstart_template: testkit.Template[str], tmp_path: Path, sig: int
) -> None:
    """``record`` of a large JSON-lines file parses it in worker processes. Stopped (SIGTERM)
    or killed (SIGKILL, the out-of-memory killer), its workers end too: before, they waited for
    their next task for ever, holding the caller's pipes open (``out=$(trajledger record ...)``
    never returned). Stopped, it also leaves nothing: no batch, no temporary files."""
    from trajledger.ledger.rollouts.reader_process import PROCESS_MIN_BYTES

    home = testkit.copy_template(quickstart_template, tmp_path / "ledger")
    chats = tmp_path / "chats.jsonl"
    line = json.dumps({"messages": [{"role": "user", "content": "q" * 400},
                                    {"role": "assistant", "content": "a" * 600}],
                       "reward": 0.5}) + "\n"
    chats.write_text(line * ((PROCESS_MIN_BYTES + (16 << 20)) // len(line)))
    before = testkit.snapshot(home)
    proc = subprocess.Popen(
        cli("--ledger", home, "record", chats, "--env", "cartpole@1", "--policy", "p",
            "--key", "vendor"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (workers := _children(proc.pid)):
        if proc.poll() is not None:
            pytest.fail(f"record finished before its workers were seen: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("record started no worker within 60 s")
        time.sleep(0.02)
    proc.send_signal(sig)
    try:
        _out, err = proc.communicate(timeout=60)  # returns once every holder of the pipes ended
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the workers {workers} outlived the command")
    deadline = time.monotonic() + 30
    while alive := [pid for pid in workers if _running(pid)]:
        assert time.monotonic() < deadline, f"workers {alive} outlived the command"
        time.sleep(0.1)
    assert testkit.snapshot(home) == before
    if sig == signal.SIGTERM:
        assert proc.returncode == 143, err
        assert err.endswith("FAIL: stopped by SIGTERM; nothing was recorded or half-written\n"), err
        assert not list((home / "tmp").iterdir())


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it exited while listed
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie waiting for its parent to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _signing_a_huge_file(
    tmp_path: Path, ignored: tuple[int, ...] = ()
) -> tuple[subprocess.Popen[str], Path, Path]:
    """``trajledger sign`` of a directory holding a 1 TiB sparse file, started with the default
    action for SIGINT (and the signals ``ignored`` ignored), once it hashes: ``(process, the
    ledger, the envelope it would write)``."""
    home = tmp_path / "ledger"
    for args in (["init"], ["key", "new", "k", "--no-encrypt"]):
        subprocess.run(cli("--ledger", home, *args), check=True, capture_output=True)
    data = tmp_path / "data"
    data.mkdir()
    with open(data / "huge.bin", "wb") as f:
        f.truncate(1 << 40)  # 1 TiB, sparse: hashing it takes far longer than the wait below
    out = tmp_path / "envelope.json"

    def dispositions() -> None:
        # A run started in the background inherits SIGINT ignored, and then Python rightly
        # keeps ignoring it: the child gets the default disposition, as in a terminal.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        for signum in ignored:
            signal.signal(signum, signal.SIG_IGN)

    proc = subprocess.Popen(
        cli("--ledger", home, "sign", data, "--key", "k", "--out", out),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=dispositions,
    )
    # Stop it while it hashes (not while a loaded machine still starts the interpreter up: a
    # fixed wait once hit the imports of a fresh venv's first run): it has the file open.
    deadline = time.monotonic() + 60
    while not _has_open(proc.pid, data / "huge.bin"):
        if proc.poll() is not None:
            pytest.fail(f"sign finished before it could be stopped: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("sign did not start hashing within 60 s")
        time.sleep(0.05)
    time.sleep(0.5)
    return proc, home, out


def test_ctrl_c_while_the_command_loads_exits_130(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The entry point imports only the standard library, then the command line: a Ctrl-C
    while that loads is the same one line and 130, not a traceback."""
    import importlib.abc

    from trajledger.__main__ import main as entry

    class Interrupt(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, *args: object) -> None:
            if name == "trajledger.runner.cli":
                raise KeyboardInterrupt
            return None

    from trajledger.runner.cli import main as command_line

    # A command's own process has recorded nothing when its start-up is interrupted; this
    # pytest worker may have (the API's appends in tests before this one, which no command
    # line's start forgot: out51). A command line's start forgets them.
    assert testkit.new_runner().invoke(command_line, ["--version"]).exit_code == 0
    monkeypatch.delitem(sys.modules, "trajledger.runner.cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Interrupt(), *sys.meta_path])
    frozen = gc.get_freeze_count()
    try:
        with pytest.raises(SystemExit) as e:
            entry()
    finally:
        if not frozen:
            # The entry point froze what this process holds (``gc.freeze``, as a command's
            # own process): thawed, or the rest of this pytest worker would run as one
            # (`clikit.loading` would freeze in CliRunner tests, test_clikit_loading fails).
            gc.unfreeze()
    assert gc.isenabled()  # the collector is back on after an interrupted start-up
    assert e.value.code == 130
    assert capsys.readouterr().err == "FAIL: interrupted; nothing was recorded or half-written\n"


_EXITS = """
import atexit, sys, weakref
from pathlib import Path
import pyarrow  # loaded, as by any command that reads rollouts
marks = Path(sys.argv[1])
class Teardown:
    def __del__(self):  # runs only if the interpreter tears its modules down
        (marks / "teardown").write_text("ran")
keep = Teardown()
import trajledger.runner.cli as cli
command = cli.main
def with_a_handler():  # an exit handler a library registers while the command runs
    atexit.register(lambda: (marks / "atexit").write_text("ran"))
    sys.stdout.write("x" * 300_000)  # more than a pipe holds: flushed on the way out
    command()
cli.main = with_a_handler
sys.argv = ["trajledger", *sys.argv[2:]]
from trajledger.__main__ import main
main()
"""


@pytest.mark.parametrize(("args", "code"), [(["--version"], 0), (["no-such-command"], 2),
                                            (["log", "info"], 3)])
def test_a_command_that_loaded_arrow_ends_without_its_teardown(
    tmp_path: Path, args: list[str], code: int
) -> None:
    """With pyarrow loaded, the exit handlers the command's libraries registered run, its
    output is flushed and its exit code kept, and the process ends before the interpreter
    tears down Arrow's thread pools, which can abort a finished command (apache/arrow#34314:
    exit 134, seen in CI)."""
    env = {**os.environ, "TRAJLEDGER_HOME": str(tmp_path / "none")}
    r = subprocess.run([sys.executable, "-c", _EXITS, str(tmp_path), *args], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == code, r.stderr
    assert r.stdout.startswith("x" * 300_000), len(r.stdout)
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not (tmp_path / "teardown").exists()
    assert "Traceback" not in r.stderr


# -- the rules of the command line (issue 10 item 7), in process ---------------------------------

from click.testing import CliRunner, Result  # noqa: E402

from trajledger.runner.cli import main  # noqa: E402


def run(*args: str | Path, cwd: Path | None = None) -> Result:
    if cwd is None:
        return CliRunner().invoke(main, [str(a) for a in args])
    old = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, [str(a) for a in args])
    finally:
        os.chdir(old)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    home = tmp_path / "lab" / ".trajledger"
    for args in (["init"], ["key", "new", "vendor", "--no-encrypt"]):
        r = run("--ledger", home, *args)
        assert r.exit_code == 0, r.output
    return home


def _with_policy(ledger: Path) -> None:
    for k in ("approver-a", "approver-b", "trainer"):
        assert run("--ledger", ledger, "key", "new", k, "--no-encrypt").exit_code == 0
    out = ledger.parent / "policy.toml"
    assert run("--ledger", ledger, "policy", "init", "--out", out).exit_code == 0
    r = run("--ledger", ledger, "policy", "set", out, "--key", "approver-a", "--key", "approver-b",
            "--yes")
    assert r.exit_code == 0, r.output


def test_an_unknown_reference_exits_3_everywhere(ledger: Path, tmp_path: Path) -> None:
    _with_policy(ledger)
    data = tmp_path / "rows.jsonl"
    data.write_text('{"episode_id": "e", "messages": [{"role": "user", "content": "hi"}]}\n')
    for args in (
        ["record", data, "--env", "nope@1", "--policy", "p", "--key", "vendor"],
        ["verify", "nope@1"],
        ["show", "nope@1"],
        ["approve", "nope@1", "--key", "vendor"],
        ["lineage", "nope@1"],
        ["export", "nope@1", "--out", tmp_path / "x.tar.zst"],
    ):
        r = run("--ledger", ledger, *args)
        assert r.exit_code == 3, (args, r.output)
        assert "nope@1" in r.stderr and "Traceback" not in r.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["approve", "x@1", "--key", "vendor", "--expires", "30x"],
         "Invalid value for '--expires': '30x' is not a duration"),
        (["key", "new", "bad/name"], "Invalid value for 'NAME': 'bad/name': use 1-64 letters"),
        (["sign", ".", "--key", "vendor", "--out", "missing/dir/env.json"],
         "Invalid value for '--out': missing/dir/env.json: directory "),
        (["lineage", "x@1", "--out", "no/such/dir/page.html"],
         "Invalid value for '--out': no/such/dir/page.html: directory "),
    ],
)
def test_a_bad_option_value_exits_2(ledger: Path, args: list[str], message: str) -> None:
    r = run("--ledger", ledger, *args, cwd=ledger.parent)
    assert r.exit_code == 2, r.output
    assert message in r.stderr
    assert not (ledger.parent / "missing").exists() and not (ledger.parent / "no").exists()


def test_global_options_are_accepted_after_the_subcommand(ledger: Path) -> None:
    before = run("--ledger", ledger, "-q", "log", "info", "--json")
    after = run("log", "info", "--json", "--ledger", ledger, "-q")
    assert before.exit_code == after.exit_code == 0, after.output
    assert before.stdout == after.stdout
    assert run("log", "info", f"--ledger={ledger}", "--verbose").exit_code == 0


def test_the_ledger_is_found_by_walking_up_like_git(ledger: Path, monkeypatch: pytest.MonkeyPatch
                                                    ) -> None:
    monkeypatch.delenv("TRAJLEDGER_HOME", raising=False)
    deep = ledger.parent / "a" / "b"
    deep.mkdir(parents=True)
    r = run("log", "info", "--json", cwd=deep)
    assert r.exit_code == 0, r.output
    origin = json.loads(r.stdout)["origin"]
    # init makes a new ledger where it is run, not in the one found above.
    r = run("init", cwd=deep)
    assert r.exit_code == 0, r.output
    assert (deep / ".trajledger" / "ledger.toml").is_file()
    # From inside a ledger directory (a quickstart's demo/, or its keys/): that ledger.
    for inside in (ledger, ledger / "keys"):
        r = run("log", "info", "--json", cwd=inside)
        assert r.exit_code == 0 and json.loads(r.stdout)["origin"] == origin, r.output


def test_policy_init_writes_a_policy_from_the_keys_by_role(ledger: Path) -> None:
    _with_policy(ledger)
    out = ledger.parent / "policy.toml"
    text = out.read_text()
    from trajledger.ledger.keys import KeyStore

    a = KeyStore(ledger / "keys").public("approver-a")
    assert ("[roles.approver]\nkeys = [\n  # approver-a: ed25519, fingerprint "
            f'{a.keyid}\n  """{a.to_pem().decode()}""",\n') in text
    assert "threshold = 2" in text and "[roles.log]" in text and ".pub" not in text
    again = run("--ledger", ledger, "policy", "init", "--out", out)
    assert again.exit_code == 3 and "already exists" in again.stderr


@pytest.mark.parametrize("closed", ["0<&-", "1>&-", "2>&-", "0<&- 1>&- 2>&-"],
                         ids=["stdin", "stdout", "stderr", "all"])
def test_a_command_started_with_a_standard_stream_closed_exits_as_it_went(
    closed: str, quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    # With stderr closed, `verify` of a sound lineage exited 4 (the progress bar asked
    # `sys.stderr`, None, whether it is a terminal); and the first file a command opened took
    # the closed descriptor's number. Now each closed one is /dev/null: the exit code says how
    # it went, and the command's own files get other descriptors.
    import shlex

    home = testkit.copy_template(quickstart_template, tmp_path / "q")
    ref = quickstart_template.value

    def verify() -> int:
        line = shlex.join(cli("--ledger", home, "verify", ref)) + " " + closed
        return subprocess.run(["bash", "-c", line], timeout=120).returncode

    assert verify() == 0
    # One byte of the checkpoint's first file changed: refused, exit 1, whatever is closed.
    def blob(digest: str) -> Path:
        return home / "objects" / "sha256" / digest[7:9] / digest[9:11] / digest[7:]

    first = "sha256:" + json.loads(blob(ref).read_bytes())["files"][0]["digest"]["sha256"]
    data = bytearray(blob(first).read_bytes())
    data[len(data) // 2] ^= 1
    blob(first).chmod(0o644)
    blob(first).write_bytes(bytes(data))
    assert verify() == 1


def test_the_standalone_verifier_with_stderr_closed_keeps_its_report_off_stdout(
    quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    # `python -m trajledger.verify ... --json 2>&-` printed the text report (meant for stderr,
    # then None) on stdout, before the JSON: no longer one JSON document.
    import shlex

    home = testkit.copy_template(quickstart_template, tmp_path / "q")
    bundle = tmp_path / "b.tar.zst"
    subprocess.run(cli("--ledger", home, "export", quickstart_template.value, "--out", bundle),
                   check=True, capture_output=True, timeout=120)
    line = shlex.join([sys.executable, "-m", "trajledger.verify", str(bundle), "--policy",
                       str(home / "policy.toml"), "--json"]) + " 2>&-"
    r = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0
    assert json.loads(r.stdout)["ok"] is True


def test_running_out_of_memory_is_operational_not_a_bug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A MemoryError (a ulimit, a container's limit: rev17 refused a 64 MiB bundle.json under
    # 256 MiB) ended in 'BUG: ... please report it', exit 4, in both command lines.
    from click.testing import CliRunner

    import trajledger.ledger.show as show
    import trajledger.verify.__main__ as standalone
    from trajledger.runner.cli import main

    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(standalone, "run", exhausted)
    assert standalone.main(["b.tar.zst", "--policy", "p.toml"]) == 3
    assert capsys.readouterr().err == "FAIL: b.tar.zst: out of memory: nothing was decided\n"
    monkeypatch.setattr(show, "describe", exhausted)
    home = tmp_path / "l"
    assert CliRunner().invoke(main, ["--ledger", str(home), "init"]).exit_code == 0
    r = CliRunner().invoke(main, ["--ledger", str(home), "show", "x@1"])
    assert r.exit_code == 3, r.output
    assert r.stderr == ("FAIL: out of memory; an append or a store write either completed or "
                        "left nothing (give the command more memory, or smaller input)\n")


@pytest.mark.parametrize("command", [
    ["record", "{p}", "--env", "cartpole@1", "--policy", "p", "--key", "vendor"],
    ["validate", "{p}", "--format", "chat-jsonl"],
    ["import", "{p}", "--policy", "{policy}", "--key", "vendor"],
    ["verify", "{p}", "--policy", "{policy}"],
    ["python -m trajledger.verify", "{p}", "--policy", "{policy}"],
], ids=["record", "validate", "import", "verify-bundle", "standalone"])
def test_a_pipe_given_as_a_file_is_refused_saying_so(
    ledger: Path, tmp_path: Path, command: list[str]
) -> None:
    """``record <(zcat chats.jsonl.gz)``, ``import /dev/stdin``: each reads its input more than
    once, so a pipe is refused as one (exit 3), before anything is read from it; before, the
    refusal named a line that was not the problem, or a file or artifact that did not exist."""
    pipe = tmp_path / "input.jsonl"
    os.mkfifo(pipe)
    policy = tmp_path / "policy.toml"
    policy.write_text("")  # never read: the input is refused first
    args = [a.format(p=pipe, policy=policy) for a in command[1:]]
    if command[0] == "record":
        r = run("--ledger", ledger, "env", "register", "cartpole", "--version", "1", "--gym-id",
                "CartPole-v1", "--key", "vendor")
        assert r.exit_code == 0, r.output
    before = testkit.snapshot(ledger)
    line = ([sys.executable, "-m", "trajledger.verify", *args] if command[0].startswith("python")
            else cli("--ledger", ledger, command[0], *args))
    try:  # (a process: read, the pipe would block for ever with no writer)
        r = subprocess.run(line, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{command[0]} waited for the pipe's bytes instead of refusing it")
    assert r.returncode == 3, r.stderr
    assert "not a regular file" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert testkit.snapshot(ledger) == before


@pytest.mark.parametrize(("command", "out"), [
    (["export", "{ref}"], "log/checkpoint"),
    (["export", "{ref}"], "ledger.toml"),
    (["lineage", "{ref}", "--format", "html"], "keys/lineage.html"),
    (["policy", "init"], "objects/policy.toml"),
    (["log", "proof", "1"], "log-key/proof.json"),
    (["sign", "{home}/policy.toml", "--key", "vendor"], "tmp/x.intoto.json"),
], ids=["export-checkpoint", "export-settings", "lineage", "policy", "proof", "sign"])
def test_an_output_over_the_ledgers_own_files_is_refused(
    quickstart_template: testkit.Template[str], tmp_path: Path, command: list[str], out: str
) -> None:
    """``export REF --out LEDGER/log/checkpoint`` wrote the bundle over the log's signed
    checkpoint: the ledger no longer opened. An output path under the ledger's own files is a
    usage error, and nothing is written; a file of the user's beside them is written."""
    home = testkit.copy_template(quickstart_template, tmp_path / "q")
    ref = quickstart_template.value
    args = [a.format(ref=ref, home=home) for a in command]
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    r = run("--ledger", home, *args, "--out", home / out)
    assert r.exit_code == 2, r.output
    assert "inside the ledger's own files" in r.output, r.output
    assert {p: p.read_bytes() for p in home.rglob("*") if p.is_file()} == before
    beside = home / "lineage.html"
    r = run("--ledger", home, "lineage", ref, "--format", "html", "--out", beside)
    assert r.exit_code == 0 and beside.is_file(), r.output


@pytest.mark.parametrize("encoding", ["latin-1", "ascii"])
def test_a_terminal_that_cannot_show_the_marks_gets_them_escaped(
    quickstart_template: testkit.Template[str], tmp_path: Path, encoding: str
) -> None:
    """A Latin-1 locale's terminal cannot show ✓: the reports print ``\\u2713`` there and exit
    as they went (before, ``BUG: UnicodeEncodeError``, exit 4, in both command lines)."""
    home = testkit.copy_template(quickstart_template, tmp_path / "q")
    ref = quickstart_template.value
    bundle = tmp_path / "ck.tar.zst"
    assert run("--ledger", home, "export", ref, "--out", bundle).exit_code == 0
    env = {**os.environ, "PYTHONIOENCODING": encoding}
    for line in (cli("--ledger", home, "lineage", ref),
                 [sys.executable, "-m", "trajledger.verify", str(bundle), "--policy",
                  str(home / "policy.toml")]):
        r = subprocess.run(line, capture_output=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        shown = (r.stdout + r.stderr).decode("latin-1")  # (any bytes: click writes UTF-8)
        assert "BUG" not in shown and "OK" in shown, shown
        if encoding == "latin-1":  # (click writes UTF-8 where a stream says ASCII)
            assert "\\u2713" in shown, shown


def _register_stopped(runner: testkit.CliRunner, home: Path, version: int) -> tuple[int, str]:
    from trajledger.runner.cli import main

    r = runner.invoke(main, ["--ledger", str(home), "env", "register", "cart", "--version",
                             str(version), "--gym-id", "CartPole-v1", "--key", "alice"])
    return r.exit_code, r.stderr


def _log_size(home: Path) -> int:
    from trajledger import Ledger

    return Ledger.open(home).log.size


def test_the_stop_line_says_what_was_recorded(alice_home: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """The one line of a stopped command answers "was it recorded?" (FIRST_HOUR.md's Left):
    stopped after an append's publication, it names the entries recorded; stopped between its
    commit and its publication, or in its commit, the entries the next writer completes or
    drops; stopped before, nothing; and a command line does not report what an earlier one of
    the same process recorded."""
    from trajledger.ledger.log.writer import Log

    runner = testkit.new_runner()
    size = _log_size(alice_home)
    real_tell, real_publish, real_inflight = Log._tell_published, Log._publish, Log._mark_inflight

    assert _register_stopped(runner, alice_home, 2)[0] == 0
    assert _log_size(alice_home) == size + 1

    def tell(self: Log, note: bytes, done: str) -> None:
        raise KeyboardInterrupt  # after the publication

    monkeypatch.setattr(Log, "_tell_published", tell)
    assert _register_stopped(runner, alice_home, 3) == (
        130, f"FAIL: interrupted after recording entry {size + 1} of log test/e2e; nothing was "
        "half-written\n")
    monkeypatch.setattr(Log, "_tell_published", real_tell)
    assert _log_size(alice_home) == size + 2  # published: readers see it

    def publish(self: Log, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # after the commit, before the publication

    monkeypatch.setattr(Log, "_publish", publish)
    assert _register_stopped(runner, alice_home, 4) == (
        130, f"FAIL: interrupted while recording entry {size + 2} of log test/e2e; nothing was "
        "half-written: the next command that writes to that log completes or drops them\n")
    monkeypatch.setattr(Log, "_publish", real_publish)
    assert _log_size(alice_home) == size + 2  # committed, not yet published...

    def inflight(self: Log, on: bool) -> None:
        if on:
            raise KeyboardInterrupt  # the commit under way
        real_inflight(self, on)

    monkeypatch.setattr(Log, "_mark_inflight", inflight)
    assert _register_stopped(runner, alice_home, 5) == (  # ...which this writer completes
        130, f"FAIL: interrupted while recording entry {size + 3} of log test/e2e; nothing was "
        "half-written: the next command that writes to that log completes or drops them\n")
    monkeypatch.setattr(Log, "_mark_inflight", real_inflight)
    assert _log_size(alice_home) == size + 3  # cart@4 published; cart@5 not committed: dropped

    assert _register_stopped(runner, alice_home, 5)[0] == 0  # this process recorded it...

    def signer(self: Log) -> None:
        raise KeyboardInterrupt  # before anything is written

    monkeypatch.setattr(Log, "_get_signer", signer)
    assert _register_stopped(runner, alice_home, 6) == (  # ...but not this command line
        130, "FAIL: interrupted; nothing was recorded or half-written\n")
