"""The outsiders of the twenty-fifth round (out40): the RL researcher in a notebook (the Python
API), the trainer and the auditor; and out39's Left: one rule for a path in a command a message
tells the user to run (one shell word), and for a name that is not UTF-8 (``\\xfd`` in messages
and in ``--json``).

Its findings, and the probes that held: docs/SECURITY.md, "Review of 2026-12-06, twenty-fifth
round (out40)".
"""

from __future__ import annotations

import json
import os
import pickle
import pydoc
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import testkit
from click.testing import CliRunner

import trajledger
from trajledger import Ledger
from trajledger.ledger.errors import shell_word
from trajledger.runner.cli import main
from trajledger.verify.errors import FormatError

NOT_UTF8 = os.fsdecode(b"b\xfdx")
"""A name another tool made under ``LANG=C`` (byte 0xfd is no UTF-8)."""


def run(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    r = runner.invoke(main, list(args), prog_name="trajledger")
    return r.exit_code, r.stdout, r.stderr


def strict(value: object) -> None:
    """What a strict parser (Go's, Rust's serde_json) requires of every string: valid
    Unicode, which encodes to UTF-8 without a lone surrogate."""
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, dict):
        for k, v in value.items():
            strict(k)
            strict(v)
    elif isinstance(value, list):
        for v in value:
            strict(v)


@pytest.mark.parametrize("name", ["my ledger/log", "it's", "b\tx", NOT_UTF8 + " y", "plain-x_1.0"])
def test_a_shell_word_is_read_back_by_the_shell_as_the_path(tmp_path: Path, name: str) -> None:
    """`shell_word`: what bash reads back is the path's bytes, a space, a quote, a control
    character or a byte that is not UTF-8 in it (``$'\\xfd'``); a plain path as it is."""
    word = shell_word(tmp_path / name)
    printed = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True,
                             check=True).stdout
    assert printed == os.fsencode(tmp_path / name), word
    assert "\udcfd" not in word and (word == str(tmp_path / name)) == (name == "plain-x_1.0")


def test_a_chmod_hint_under_a_path_with_spaces_is_pasted_as_one_word(
        runner: CliRunner, tmp_path: Path) -> None:
    """``fs.refuse_writable``'s ``run 'chmod o-w PATH'`` (and ``keys``', ``fsck``'s, the
    state's) put the path unquoted: under ``~/My Projects`` the pasted command changed
    ``~/My`` and ``Projects/...``. The path is one shell word now; run as printed, it fixes
    the ledger."""
    home = tmp_path / "my projects" / "led"
    Ledger.init(home).close()
    (home / "log").chmod(0o757)
    code, out, err = run(runner, "--ledger", str(home), "log", "info")
    assert code == 3 and out == "", err
    fix = f"chmod o-w {shlex.quote(str(home / 'log'))}"
    assert f"run '{fix}'" in err, err
    subprocess.run(["bash", "-c", fix], check=True)
    code, _, err = run(runner, "--ledger", str(home), "log", "info")
    assert code == 0, err


def test_a_hint_naming_a_file_that_is_not_utf8_shows_and_pastes_its_byte(tmp_path: Path) -> None:
    """A passphrase file another tool made (``pass\\xfe``), readable by others: the message
    (through the real command's stderr) showed ``pass\\udcfe`` and ``run 'chmod 600
    .../pass\\udcfe'``, which names no file. Now the byte is ``\\xfe`` in the text and
    ``'.../pass '$'\\xfe'`` in the command, which, pasted into bash, fixes the file."""
    home = tmp_path / "led"
    Ledger.init(home).close()
    secret = tmp_path / os.fsdecode(b"pass \xfe")
    secret.write_text("a long passphrase\n")
    secret.chmod(0o644)
    env = {**os.environ, "TRAJLEDGER_PASSPHRASEFILE": str(secret), "LC_ALL": "C.UTF-8"}
    r = subprocess.run([sys.executable, "-m", "trajledger", "--ledger", str(home), "key", "new",
                        "k"], capture_output=True, env=env)
    assert r.returncode == 3 and r.stdout == b"", r.stderr
    err = r.stderr.decode("utf-8")  # strict: no lone surrogate reached the stream
    assert f"the passphrase file {tmp_path}/pass \\xfe (TRAJLEDGER_PASSPHRASEFILE)" in err, err
    found = re.search(r"run '(chmod 600 .*)'$", err.strip())
    assert found and found.group(1) == f"chmod 600 '{tmp_path}/pass '$'\\xfe'", err
    subprocess.run(["bash", "-c", found.group(1)], check=True)
    assert secret.stat().st_mode & 0o777 == 0o600
    r = subprocess.run([sys.executable, "-m", "trajledger", "--ledger", str(home), "key", "new",
                        "k"], capture_output=True, env=env)
    assert r.returncode == 0, r.stderr


def test_json_of_a_name_that_is_not_utf8_is_strict_json(
        runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    """``export --out b\\xfdx --json`` printed ``"out":"b\\udcfdx"``: valid JSON to Python, a
    lone surrogate that strict parsers refuse. Now the name is ``b\\xfdx`` as the messages
    show it (docs/cli.md, "Names that are not UTF-8")."""
    home = testkit.copy_template(quickstart_template, tmp_path / "qs")
    out = tmp_path / NOT_UTF8
    code, stdout, err = run(runner, "--ledger", str(home), "export", "cartpole-bc@2", "--out",
                            str(out), "--json")
    assert code == 0 and out.is_file(), err
    doc = json.loads(stdout)
    strict(doc)
    assert doc["out"] == f"{tmp_path}/b\\xfdx", doc["out"]


@pytest.mark.parametrize("command", ["verify", "show", "lineage", "impact", "stats"])
def test_a_reference_that_is_not_utf8_names_nothing(
        runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path,
        command: str) -> None:
    """A mistyped reference (or a bundle path that is no file) holding a byte that is not
    UTF-8 was ``BUG: UnicodeEncodeError`` (SQLite refuses the lone surrogate), exit 4: now it
    names nothing, one line, exit 3, as any unknown reference."""
    home = testkit.copy_template(quickstart_template, tmp_path / "qs")
    code, out, err = run(runner, "--ledger", str(home), command, NOT_UTF8)
    assert code == 3 and out == "", err
    assert err.startswith("FAIL: b\\xfdx: no ") and err.endswith(
        "has this name: it holds a byte that is not UTF-8, as no recorded name does\n"), err


def test_the_notebook_gets_a_type_error_for_a_wrong_type_and_a_readable_handle(
        quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    """A str where a list of batches is wanted was read one character at a time (``s: no
    rollout-batch has this name``); a Path as a reference raised ``AttributeError: 'PosixPath'
    object has no attribute 'strip'``, an int as a key ``expected string or bytes-like
    object``. Each is a TypeError naming the argument and what it takes. ``repr`` of a
    handle said ``<trajledger.api.Ledger object at 0x…>``, ``help(trajledger)`` did not list
    ``Ledger``, a pandas DataFrame was refused without the way to give it, and a handle could
    not be pickled."""
    ledger = Ledger.open(testkit.copy_template(quickstart_template, tmp_path / "lab"))
    assert repr(ledger) == f"Ledger.open({str(tmp_path / 'lab')!r})"
    assert "class Ledger(" in pydoc.render_doc(trajledger, renderer=pydoc.plaintext)
    size = ledger.log.size
    with pytest.raises(TypeError, match=re.escape(
            "batches='sha256:0000000': a str, want a list of batch references "
            "(['sha256:0000000'])")):
        ledger.create_dataset("d", "1", "train", "sha256:0000000", key="vendor")
    with pytest.raises(TypeError, match=re.escape(
            f"reference {tmp_path / 'x'!r} is a PosixPath, want a str")):
        ledger.verify(tmp_path / "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape(
            "key=5 (int): want a key name (str) or a Signer")):
        ledger.register_environment("cartpole", "1", key=5)  # type: ignore[arg-type]
    pandas = pytest.importorskip("pandas")
    with pytest.raises(FormatError, match=re.escape(
            "input is a DataFrame, want file paths, a pyarrow Table, or one mapping per step (a "
            "pandas DataFrame: df.to_dict('records'))")):
        ledger.record_batch(pandas.DataFrame([{"step": 0}]), env="cartpole@1", policy="p",
                            key="vendor")
    assert ledger.log.size == size
    # A multiprocessing pool's argument: a handle pickles as its directory (was TypeError:
    # cannot pickle 'Ed25519PublicKey'), opened again where it is loaded.
    again = pickle.loads(pickle.dumps(ledger))
    assert isinstance(again, Ledger) and again.root == ledger.root.absolute()
    assert again.log.size == size and again.verify("cartpole-bc@2").ok



SLOW_TRAINER = """import os, pathlib, sys, time
out = pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"])
(out / "model.bin").write_bytes(b"partial")
pathlib.Path(sys.argv[1]).write_text("started")
time.sleep(120)
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize(("sig", "code", "said"), [
    (signal.SIGTERM, 143, "FAIL: stopped by SIGTERM; nothing was recorded or half-written\n"),
    (signal.SIGHUP, 129, "FAIL: stopped by SIGHUP; nothing was recorded or half-written\n")],
    ids=["TERM", "HUP"])
def test_a_training_command_stopped_by_sigterm_exits_as_every_command(
        quickstart_template: testkit.Template[str], tmp_path: Path, sig: int, code: int,
        said: str) -> None:
    """A scheduler stopping ``train -- COMMAND`` (Slurm's preemption, ``docker stop``: SIGTERM)
    got exit 130 and ``FAIL: interrupted``, as for Ctrl-C, where every other command exits 143
    (``stopped by SIGTERM``) and 129 for SIGHUP (docs/cli.md): the signal is forwarded to
    COMMAND, which stops, and the command now says which signal stopped it, with its status."""
    home = testkit.copy_template(quickstart_template, tmp_path / "qs")
    script, started = tmp_path / "slow.py", tmp_path / "started"
    script.write_text(SLOW_TRAINER)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trajledger", "--ledger", str(home), "train", "--dataset",
         "cartpole-train@1", "--key", "trainer", "--name", "slow", "--version", "1", "--",
         sys.executable, str(script), str(started)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):
            if started.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert started.exists(), proc.communicate()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code and out == "", err
    assert err.endswith(said), err
    code_, _, err = run(testkit.new_runner(), "--ledger", str(home), "show", "slow@1")
    assert code_ == 3, err
