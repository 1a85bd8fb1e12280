"""The docs harness's fork server (tests/zygote.py) gives a command what a fresh process gets.

A stand-in console script named ``trajledger`` reports what a command can observe (arguments,
working directory, environment, umask, terminals, stream buffering, standard input, ignored
signals) and ends as told; each case runs it once through the zygote's client and once as a
real process, in the same bash command line, and requires the same report and exit status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import zygote

STAND_IN = '''#!{python}
import json, os, signal, sys
how = sys.argv[1]
mask = os.umask(0)
os.umask(mask)
print(json.dumps({{
    "argv": sys.argv, "cwd": os.getcwd(), "x": os.environ.get("ZYGOTE_TEST_X"), "umask": mask,
    "tty": [os.isatty(fd) for fd in (0, 1, 2)], "stdin": sys.stdin.read(),
    "line_buffered": [sys.stdout.line_buffering, sys.stderr.line_buffering],
    "sigint_ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
    "served": "pyarrow" in sys.modules,
}}))
sys.stdout.flush()
print("to stderr", file=sys.stderr)
if how == "exit":
    sys.exit(int(sys.argv[2]))
if how == "raise":
    raise RuntimeError("a bug")
if how == "signal":
    os.kill(os.getpid(), signal.SIGTERM)
'''


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A zygote serving the stand-in; (its client's directory, the stand-in's PATH)."""
    if not zygote.enabled():
        pytest.skip("TRAJLEDGER_DOCS_NO_ZYGOTE=1: the harness runs no zygote")
    root = tmp_path_factory.mktemp("zygote-test")
    real = root / "real"
    real.mkdir()
    (real / "trajledger").write_text(STAND_IN.format(python=sys.executable), "utf-8")
    (real / "trajledger").chmod(0o755)
    path = str(real) + os.pathsep + os.environ["PATH"]
    with zygote.serving(root / "server", root / "templates", path) as server:
        assert server is not None
        yield server.bin, path
        server.check()


def both(stand_in: tuple[Path, str], tmp_path: Path, line: str) -> list[tuple[int, str, str]]:
    """Run bash ``line`` (in which ``T`` is the command) with ``T`` the zygote's client, then
    the real stand-in: exit status, stdout, stderr of each."""
    client, path = stand_in
    out = []
    for t in (str(client / "trajledger"), str(Path(path.split(os.pathsep)[0]) / "trajledger")):
        env = {**os.environ, "PATH": str(client) + os.pathsep + path, "T": t}
        done = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=120)  # fmt: skip
        out.append((done.returncode, done.stdout, done.stderr))
    return out


def report(stdout: str) -> dict[str, object]:
    return dict(json.loads(stdout.splitlines()[0]))


@pytest.mark.parametrize(("line", "status"), [
    ('ZYGOTE_TEST_X=1 "$T" exit 0 a "b c"', 0),
    ('umask 027; echo input | "$T" exit 3', 3),
    ('"$T" raise', 1),
    ('"$T" signal; echo "status $?"', 0),
    ('"$T" exit 0 & wait $!', 0),
])  # fmt: skip
def test_a_served_command_sees_and_ends_as_a_fresh_process(
    stand_in: tuple[Path, str], tmp_path: Path, line: str, status: int
) -> None:
    served, real = both(stand_in, tmp_path, line)
    assert served[0] == real[0] == status, (served, real)
    got, want = report(served[1]), report(real[1])
    assert got.pop("served") is True and want.pop("served") is False
    got["argv"][0] = want["argv"][0] = "T"  # type: ignore[index]
    assert got == want
    assert served[1].splitlines()[1:] == real[1].splitlines()[1:]
    assert served[2].replace(str(stand_in[0] / "trajledger"), "T") == real[2]
    assert "to stderr" in served[2]


def test_settings_read_at_start_up_run_a_real_process(
    stand_in: tuple[Path, str], tmp_path: Path
) -> None:
    """A request with another locale setting (one of zygote.FROZEN_NAMES) is not served."""
    served, real = both(stand_in, tmp_path, 'TZ=UTC0 "$T" exit 0')
    assert served[0] == real[0] == 0
    assert report(served[1])["served"] is False
