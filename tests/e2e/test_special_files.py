"""End to end: a FIFO or a device planted in a ledger's ``log/`` (docs/SECURITY.md §1: an
insider who can write the ledger's files) is refused, not read (review redo21, finding 3); so
is one in the ledger ``fsck --repair --from DIR`` restores objects from (finding 2).

Before the fix, a FIFO at ``log/checkpoint``, ``log/vkey``, ``log/.state/treeState``, a tile,
an entry bundle or a key handover made ``log verify``, ``log info``, ``verify REF`` and
``fsck`` block for ever in ``open``; a symbolic link there to ``/dev/zero`` made them read
until memory ran out. Each now ends with one ``FAIL:`` line naming the file (exit 1 or 3).

The commands run in a child process (`_child`, one for the module's tests in turn), in
process there, each under an alarm (a hang is reported, not waited for), an address-space
limit (``/dev/zero`` read whole is a MemoryError there, not the machine's memory) and a
file-size limit (``/dev/zero`` copied into the store fails there, not the disk).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import testkit

from trajledger import Ledger
from trajledger.ledger.catalog import Catalog

HANG_AFTER = 20
"""Seconds after which a command is called hung (each takes well under one here)."""
MEMORY = 3 << 30
"""The child's address-space limit: /dev/zero read whole fails there, not on the machine."""
FILE_SIZE = 256 << 20
"""The child's file-size limit: /dev/zero copied into a file fails there, not on the disk."""

TARGETS = {
    "checkpoint": "log/checkpoint",
    "vkey": "log/vkey",
    "treeState": "log/.state/treeState",
    "hash tile": "log/tile/0/000.p/{width}",
    "entry bundle": "log/tile/entries/000.p/{width}",
    "key handover": "log/key-handovers/1",
    "settings": "ledger.toml",
    "log key": "log-key/log.pub",
    "object": "objects/{object}",
}
ZERO = {"checkpoint", "hash tile", "key handover", "object"}
"""Targets also planted as a symbolic link to /dev/zero (a device that never ends)."""


@pytest.fixture(scope="module")
def pristine(
    quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("special-files")
    home = testkit.as_own_user(root, lambda r: testkit.copy_template(quickstart_template,
                                                                      r / "ledger"))
    return home, quickstart_template.value


def _plant(home: Path, rel: str, kind: str) -> None:
    path = home / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_special_file_in_the_log_is_refused_not_read(
    pristine: tuple[Path, str], tmp_path: Path, target: str
) -> None:
    source, ref = pristine
    ledger = Ledger.open(source)
    final = ledger.store.path_of(ref).relative_to(source / "objects")  # the checkpoint's manifest
    rel = TARGETS[target].format(width=ledger.log.size % 256, object=final)
    named = ref if target == "object" else rel  # an object is named by its digest
    commands: list[list[str]] = []
    for kind in ("fifo", "zero") if target in ZERO else ("fifo",):
        home = tmp_path / kind
        shutil.copytree(source, home, symlinks=True)
        _plant(home, rel, kind)
        for args in (["log", "verify"], ["log", "info"], ["fsck"],
                     ["verify", ref, "--policy", str(source / "policy.toml")]):
            commands.append(["--ledger", str(home), *args])
    wrong = []
    for r in _run(commands):
        line = f"{' '.join(r['args'][2:])} ({Path(r['args'][1]).name} at {rel})"
        if r["hung"]:
            wrong.append(f"{line}: hung")
        elif r["exit"] not in (0, 1, 3) or "Traceback" in r["stderr"]:
            wrong.append(f"{line}: exit {r['exit']}\n{r['stderr'][-800:]}")
        elif r["exit"] and not any(x.startswith("FAIL: ") and named in x
                                   for x in r["stderr"].splitlines()):
            wrong.append(f"{line}: exit {r['exit']} without naming it\n{r['stderr'][-800:]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_repair_from_a_ledger_refuses_its_special_files_and_restores_the_rest(
    pristine: tuple[Path, str], tmp_path: Path
) -> None:
    source, _ref = pristine
    home, other = tmp_path / "ledger", tmp_path / "other"
    shutil.copytree(source, home, symlinks=True)
    shutil.copytree(source, other, symlinks=True)
    lost = [i.digest for i in Catalog(Ledger.open(home)).items()
            if i.kind != "trust-policy"][:3]  # manifests the log names
    for digest in lost:
        Ledger.open(home).store.path_of(digest).unlink()
    fifo, zero, kept = lost
    there = Ledger.open(other).store
    _plant(other, str(there.path_of(fifo).relative_to(other)), "fifo")
    _plant(other, str(there.path_of(zero).relative_to(other)), "zero")
    [r] = _run([["--ledger", str(home), "fsck", "--repair", "--from", str(other)]])
    assert not r["hung"]
    assert r["exit"] == 1, r["stderr"]
    lines = r["stderr"].splitlines()
    assert f"OK: object {kept}: restored from {other}" in lines
    for digest, what in ((fifo, "a FIFO"), (zero, "a character device")):
        assert (f"FAIL: object {digest}: {there.path_of(digest)}: not a regular file but {what}; "
                "not read") in lines, r["stderr"]
        assert f"FAIL: object {digest}: missing" in "\n".join(lines), r["stderr"]
        assert not Ledger.open(home).store.path_of(digest).exists()
    assert "Traceback" not in r["stderr"]


DERIVED = ("index state", "features cache", "ledger pin", "settings pin")
"""Review left22, finding 3: derived files a command rebuilds (the audit index's state, the
episode features computed from a batch's steps) and small files of the user's state directory
(the pins of a ledger directory and of its log's settings)."""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("target", DERIVED)
def test_a_special_file_in_a_cache_or_the_user_state_is_not_waited_on(
    pristine: tuple[Path, str], tmp_path: Path, target: str
) -> None:
    """A FIFO (or a link to ``/dev/zero``) planted where a command reads a derived file or
    the user's state: ``stats`` waited for ever on the index's ``state.json`` (or read the
    device until memory ran out), ``dataset create`` on the features cache of a batch whose
    kept features file is gone, and every command that opens the ledger on the pins. Now a
    derived file is not read and is made again (exit 0, a regular file there after), and a
    pin is refused with one line naming it (exit 3)."""
    from trajledger.ledger.batch_features import batch_predicate, cache_path, steps_file_of

    source, ref = pristine
    commands, planted = [], []
    for kind in ("fifo", "zero"):
        home, state = tmp_path / kind, tmp_path / f"{kind}-state"
        shutil.copytree(source, home, symlinks=True)
        with testkit.user_state(state):
            ledger = Ledger.open(home)  # (pins the ledger and its settings in that state)
        args = ["verify", ref, "--policy", str(source / "policy.toml")]
        if target == "index state":
            where, args = home / "index/lance/state.json", ["stats", ref]
        elif target == "features cache":  # a batch whose kept features file is gone
            item = next(i for i in Catalog(ledger).items() if i.kind == "rollout-batch")
            pred = batch_predicate(ledger.store, item.envelope)
            assert pred is not None and pred.features is not None
            steps = steps_file_of(pred)
            assert steps is not None
            ledger.store.path_of(pred.features.digest).unlink()
            where = cache_path(home / "index/features", steps[0])
            args = ["dataset", "create", "again", "--version", "1", "--split", "train",
                    "--batch", item.digest, "--key", "vendor"]
        elif target == "ledger pin":
            [where] = (state / "ledgers").glob("*.json")
        else:
            [where] = (state / "origins").glob("*/.settings.json")
        _plant(where.parent, where.name, kind)
        planted.append(where)
        commands.append(["--state", str(state), "--ledger", str(home), *args])
    for where, r in zip(planted, _run(commands), strict=True):
        line = f"{' '.join(r['args'][4:6])} ({where})"
        assert not r["hung"], f"{line}: hung"
        assert "Traceback" not in r["stderr"], r["stderr"]
        if target.endswith("pin"):
            assert r["exit"] == 3, f"{line}: {r['stderr']}"
            fails = [x for x in r["stderr"].splitlines() if x.startswith("FAIL: ")]
            assert len(fails) == 1 and str(where) in fails[0], f"{line}: {r['stderr']}"
        else:
            assert r["exit"] == 0, f"{line}: {r['stderr']}"
            assert where.is_file() and not where.is_symlink(), f"{line}: not made again"


LANCE = {
    "episodes data file": "episodes.lance/data/*.lance",
    "artifacts data file": "artifacts.lance/data/*.lance",
    "artifacts manifest": "artifacts.lance/_versions/*.manifest",
}
"""Lance's own files in the audit index (`index/lance/`), opened by lance (Rust)."""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_special_file_among_the_audit_index_s_own_files_makes_it_be_built_again(
    pristine: tuple[Path, str], tmp_path: Path
) -> None:
    """left22's Left: a FIFO among lance's files of the audit index (a data file, a manifest)
    made ``stats`` wait for ever; a link to ``/dev/zero`` at a data file ended it with exit 2
    (usage) and lance's ``file does not appear to be a Lance file``. The index is derived: now
    it is built again (exit 0, the same answer, one warning naming the file, and no file there
    that is not regular after)."""
    source, ref = pristine
    base = tmp_path / "base"
    shutil.copytree(source, base, symlinks=True)
    [first] = _run([["--ledger", str(base), "stats", ref]])  # builds the index
    assert first["exit"] == 0, first["stderr"]
    commands, planted = [], []
    for target, pattern in sorted(LANCE.items()):
        for kind in ("fifo", "zero"):
            home = tmp_path / f"{target.replace(' ', '-')}-{kind}"
            shutil.copytree(base, home, symlinks=True)
            where = sorted((home / "index/lance").glob(pattern))[0]
            _plant(where.parent, where.name, kind)
            planted.append((home, where, kind))
            commands.append(["--ledger", str(home), "stats", ref])
    wrong = []
    for (home, where, kind), r in zip(planted, _run(commands), strict=True):
        line = f"stats ({where.relative_to(tmp_path)}, {kind})"
        if r["hung"]:
            wrong.append(f"{line}: hung")
        elif r["exit"] != 0 or "Traceback" in r["stderr"] or r["stdout"] != first["stdout"]:
            wrong.append(f"{line}: exit {r['exit']}\n{r['stderr'][-600:]}")
        elif f"WARNING: the audit index holds {where}, not a regular file" not in r["stderr"]:
            wrong.append(f"{line}: no warning naming it\n{r['stderr'][-600:]}")
        elif odd := [p for p in (home / "index/lance").rglob("*")
                     if p.is_symlink() or not (p.is_dir() or p.is_file())]:
            wrong.append(f"{line}: {odd} still there")
    assert not wrong, "\n".join(wrong)


_CHILDREN: list[tuple[subprocess.Popen[str], Any]] = []
"""The module's child (`_run`), started on first use, and the file its stderr goes to."""


@pytest.fixture(scope="module", autouse=True)
def _one_child() -> Iterator[None]:
    """The module's child (`_run`) ends with the module (in each xdist worker)."""
    yield
    _stop_child()


def _stop_child() -> None:
    for proc, err in _CHILDREN:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            err.close()
    _CHILDREN.clear()


def _run(commands: list[list[str]]) -> list[dict[str, Any]]:
    """Run trajledger command lines in a child (`_child`), with this test's environment:
    ``[{"args", "exit", "stderr", "hung"}]``; a line may start with ``--state DIR``, the user
    state directory it runs with.

    One child serves the module's tests in turn (suite42: a child per test imported the
    command line, and lancedb for ``stats``, again each time: 1 to 4 CPU-s, 16 in the module),
    as one child ran each test's commands in turn before; a child whose command hung (a thread
    may still wait there) or that died is not used again."""
    tests = str(Path(__file__).resolve().parents[1])  # testkit
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [tests, *filter(None, [os.environ.get("PYTHONPATH")])])}
    if _CHILDREN and _CHILDREN[0][0].poll() is not None:
        _stop_child()
    if not _CHILDREN:
        err = tempfile.TemporaryFile("w+")  # noqa: SIM115 (open while the child runs)
        _CHILDREN.append((subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=err, env=env,
                                           text=True), err))
    proc, err = _CHILDREN[0]
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({"env": env, "commands": commands}) + "\n")
    proc.stdin.flush()
    poller = select.poll()  # (not select: a long session's descriptors pass 1,023, out43)
    poller.register(proc.stdout, select.POLLIN)
    line = proc.stdout.readline() if poller.poll(600_000) else ""
    if not line:
        proc.kill()
        proc.wait()
        err.seek(0)
        said = err.read()
        _stop_child()
        raise AssertionError(f"the child ended or did not answer (exit {proc.returncode}):\n"
                             f"{said}")
    out: list[dict[str, Any]] = json.loads(line)
    if any(r["hung"] for r in out):
        _stop_child()
    return out


class _Hung(BaseException):
    """Raised by the alarm in a command that blocked."""


def _child() -> None:
    """Run trajledger command lines in process, each under an alarm: for each line of stdin
    (JSON: ``{"env", "commands"}``, the environment to run them in), one line of results on
    stdout: ``[{"args", "exit", "stderr", "hung"}]``."""
    import resource
    import signal

    from testkit import new_runner

    from trajledger.runner.cli import main

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE, FILE_SIZE))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails (EFBIG) instead

    def hung(_signum: int, _frame: object) -> None:
        raise _Hung

    signal.signal(signal.SIGALRM, hung)
    runner = new_runner()
    for request in sys.stdin:
        asked = json.loads(request)
        os.environ.clear()
        os.environ.update(asked["env"])
        out = []
        for args in asked["commands"]:
            env = {}
            if args[0] == "--state":  # the user state directory of this line
                env = {"TRAJLEDGER_STATE_DIR": args[1]}
            signal.alarm(HANG_AFTER)
            try:
                r = runner.invoke(main, args[2:] if env else args, env=env)
                out.append({"args": args, "exit": r.exit_code, "stdout": r.stdout,
                            "stderr": r.stderr, "hung": False})
            except _Hung:
                out.append({"args": args, "exit": None, "stderr": "", "hung": True})
            finally:
                signal.alarm(0)
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _child()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_special_file_in_place_of_held_out_data_is_not_waited_on(
    pristine: tuple[Path, str], tmp_path: Path, kind: str
) -> None:
    """Review rev27, finding 3. The gate copies each held-out batch's step file out of the
    store to compare it (`batch_features.verified_local_copy`, through
    `ObjectStore.open_input`), and opened it with a blocking ``open``: a FIFO planted in its
    place made ``admit`` wait for ever (redo21 made the other readers of the store
    non-blocking; this one was left). Now it is refused before a byte is read: one line
    naming the object, exit 3 (as a store object that is not a regular file is everywhere),
    nothing recorded."""
    from trajledger.ledger.batch_features import batch_files

    source, _ref = pristine
    home = tmp_path / "ledger"
    shutil.copytree(source, home, symlinks=True)
    ledger = Ledger.open(home)
    held = Catalog(ledger).resolve("cartpole-holdout").digest
    steps = batch_files(ledger.store, held)["steps.parquet"]
    where = ledger.store.path_of(steps)
    size = ledger.log.size
    _plant(where.parent, where.name, kind)
    [r] = _run([["--ledger", str(home), "admit", "cartpole-train@2"]])
    assert not r["hung"], "admit: hung"
    assert r["exit"] == 3, r["stderr"]
    fails = [x for x in r["stderr"].splitlines() if x.startswith("FAIL: ")]
    assert len(fails) == 1 and steps in fails[0], r["stderr"]
    assert "not a regular file" in fails[0], r["stderr"]
    assert Ledger.open(home).log.size == size
