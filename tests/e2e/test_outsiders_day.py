"""The outsiders of the twenty-sixth round (out41): the buyer's security auditor, with only public
keys and ``python -m trajledger.verify`` (and a copy of ``verify/``), and the vendor's release
engineer (passphrases and prompts, a read-only or full disk, races, a stop at every step); and
out40's Left: ``python -m trajledger.verify`` and a name that is not UTF-8, a `Report` in a
notebook.

Its findings, and the probes that held: docs/SECURITY.md, "Review of 2026-12-06, twenty-sixth
round (out41)".
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import testkit
from click.testing import CliRunner

import trajledger.verify as verify_package
from trajledger import Ledger
from trajledger.runner.cli import main
from trajledger.verify.bundle import BundleEvidence
from trajledger.verify.manifest import Manifest
from trajledger.verify.strict_json import load_object

REPO = Path(__file__).resolve().parents[2]


def run(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    r = runner.invoke(main, list(args), prog_name="trajledger")
    return r.exit_code, r.stdout, r.stderr


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJLEDGER_PASSPHRASE")}
    state = tmp_path / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    return env | {"HOME": str(tmp_path), "TRAJLEDGER_STATE_DIR": str(state)}


def _stop_at_prompt(cmd: list[str], env: dict[str, str], sig: int) -> tuple[int, str]:
    """Run ``cmd`` on a pseudo-terminal (stdin, stdout and stderr: it prompts), send ``sig``
    once its prompt is shown; its exit code and what it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)
    os.close(slave)
    out, sent, deadline = b"", False, time.monotonic() + 120
    ready = select.poll()  # not select(): a test runner's worker may hold descriptors past 1024
    ready.register(master, select.POLLIN)
    try:
        while time.monotonic() < deadline:
            if not ready.poll(200):
                if proc.poll() is not None:
                    break
                continue
            data = b""
            with contextlib.suppress(OSError):  # else the terminal closed with the process
                data = os.read(master, 4096)
            if not data:
                break
            out += data
            if not sent and out.rstrip().endswith(b":"):
                proc.send_signal(sig)
                sent = True
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert sent, out
    return proc.returncode, out.decode("utf-8", "replace")


@pytest.mark.parametrize(("sig", "code", "said"), [
    (signal.SIGTERM, 143, "stopped by SIGTERM"), (signal.SIGHUP, 129, "stopped by SIGHUP"),
    (signal.SIGINT, 130, "interrupted")])
def test_a_stop_at_a_passphrase_prompt_says_which_signal(
        tmp_path: Path, sig: int, code: int, said: str) -> None:
    """A release engineer's terminal closed (SIGHUP), or a CI job cancelled (SIGTERM), while
    ``key new`` asked for its passphrase: the command said ``FAIL: interrupted`` and exited 130,
    as for Ctrl-C, where every other step exits 143 (129) and names the signal (click's prompt
    turns any KeyboardInterrupt into its Abort); no key is written."""
    env = _env(tmp_path)
    ledger = tmp_path / "led"
    subprocess.run([sys.executable, "-m", "trajledger", "--ledger", str(ledger), "init"],
                   env=env, check=True, capture_output=True)
    got, out = _stop_at_prompt(
        [sys.executable, "-m", "trajledger", "--ledger", str(ledger), "key", "new", "rel"], env,
        sig)
    assert "Passphrase for key rel" in out, out
    assert got == code and f"FAIL: {said}; nothing was recorded or half-written" in out, out
    assert "Traceback" not in out, out
    assert not list((ledger / "keys").glob("rel.*"))


NOT_UTF8 = os.fsdecode(b"b\xfdx")
"""A name another tool made under ``LANG=C`` (byte 0xfd is no UTF-8)."""


@pytest.fixture
def audited(quickstart_template: testkit.Template[str], tmp_path: Path) -> tuple[Path, Path, Path]:
    """A quickstart's checkpoint exported to a bundle named ``b\\xfdx.tar.zst``, its policy,
    and its model files with an extra one named ``b\\xfdx``: (bundle, policy, model)."""
    home = testkit.copy_template(quickstart_template, tmp_path / "lab")
    bundle = tmp_path / (NOT_UTF8 + ".tar.zst")
    code, _out, err = run(testkit.new_runner(), "--ledger", str(home), "export", "cartpole-bc@2",
                          "--out", str(bundle))
    assert code == 0, err
    model = tmp_path / "model"
    with BundleEvidence.open(bundle) as evidence:
        ref = evidence.index.subject
        manifest = Manifest.from_json(load_object(evidence.blob(ref) or b"", "manifest"))
        model.mkdir()
        for f in manifest.files:
            (model / f.path).write_bytes(evidence.blob(f.digest) or b"")
    (model / NOT_UTF8).write_bytes(b"extra")
    return bundle, home / "policy.toml", model


@pytest.mark.parametrize("copy", [False, True])
def test_the_verifier_shows_a_byte_that_is_not_utf8_as_every_command(
        audited: tuple[Path, Path, Path], tmp_path: Path, copy: bool) -> None:
    """``python -m trajledger.verify`` (and a copy of ``verify/`` alone) wrote a byte that is
    not UTF-8 in a bundle's or a file's name as ``\\udcfd`` in its messages and its report, and
    its ``--json`` held the lone-surrogate escape ``"b\\udcfdx"``, which strict parsers refuse
    or replace (out40's Left). Now ``\\xfd``, as ``trajledger``'s (docs/cli.md, "Names that are
    not UTF-8")."""
    bundle, policy, model = audited
    if copy:
        shutil.copytree(Path(verify_package.__file__).parent, tmp_path / "verify")
    cmd = [sys.executable, "-m", "verify" if copy else "trajledger.verify", str(bundle),
           "--policy", str(policy), "--files", str(model)]
    env = dict(os.environ, PYTHONPATH="" if copy else str(REPO))
    for json_form in (False, True):
        r = subprocess.run(cmd + ["--json"] * json_form, capture_output=True, cwd=tmp_path,
                           env=env, timeout=300, check=False)
        err, out = r.stderr.decode("utf-8"), r.stdout.decode("utf-8")  # strictly: no surrogate
        assert r.returncode == 1, err
        assert "\\udc" not in err and "\\udc" not in out, (err, out)
        assert f"FAIL: {tmp_path}/b\\xfdx.tar.zst: " in err and "extra file b\\xfdx: " in err, err
        if json_form:
            doc = json.loads(out)
            json.dumps(doc, ensure_ascii=False).encode("utf-8")  # as strict parsers: no surrogate
            checks = [c["what"] for n in doc["nodes"] for c in n["checks"]]
            assert "extra file b\\xfdx" in checks, checks
        else:
            assert "✗ extra file b\\xfdx — in " in out, out


def test_a_report_in_a_notebook_is_one_line(quickstart_template: testkit.Template[str],
                                            tmp_path: Path) -> None:
    """A `Report`'s ``repr`` (what a notebook shows for ``ledger.verify(...)``'s last line) was
    the dataclass's: every node and check, thousands of characters on one line (out40's Left).
    Now its verdict, one line, that names the subject."""
    ledger = Ledger.open(testkit.copy_template(quickstart_template, tmp_path / "lab"))
    report = ledger.verify("cartpole-bc@2")
    shown = repr(report)
    assert shown.startswith("<Report upstream: ✓ OK: checkpoint cartpole-bc@2 (sha256:"), shown
    assert shown.endswith(" checks passed>") and "\n" not in shown and len(shown) < 200, shown
