"""Differential (out37, twenty-second round): the auditor's copy of ``verify/`` alone and the full
CLI's ``trajledger verify BUNDLE`` give one verdict on the same bundle and keys.

The promise: a lineage "anyone can verify independently, offline, with only the public keys and
the small ``verify/`` package". docs/third-party.md has the auditor copy ``trajledger/verify/``
as ``verify`` beside cryptography and zstandard; tests/e2e/test_paths_agree.py compares the
paths of an installed trajledger (``python -m trajledger.verify``). Here the copy runs where
``trajledger`` cannot be imported at all (``python -S``: no ``.pth`` file, so not the editable
install; the venv's site-packages on the path for cryptography and zstandard), as the auditor
runs it, against ``trajledger verify BUNDLE --policy P`` in a fresh user state, on each case an
auditor meets: the checkpoint's and the dataset's bundles, a blob changed (and ``bundle.json``
made to match), an approval's envelope left out, a policy naming the wrong trainer, the
lineage revoked, the model files with an extra one, ``--skip-data``, ``--expect`` of another
artifact, a bundle older than a checkpoint seen (the copy's ``--known-checkpoint``; the CLI's
``trust VKEY --checkpoint``). Per case: the exit code, ``--json``'s ``ok`` (or no JSON at
all: a bundle that cannot be read has no report), and the ``FAIL:`` lines less the file name
the copy puts first must be the same, but for what the CLI adds after one (`agree`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
import tamperkit as tk
import testkit
from test_audit_first_hour import Lab
from testkit import new_runner

from trajledger.runner.cli import main

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Verdict:
    code: int
    ok: bool | None
    fails: tuple[str, ...]


def _fails(stderr: str, bundle: Path) -> tuple[str, ...]:
    """The ``FAIL:`` lines, less the bundle's path the copy puts before each."""
    return tuple(line.removeprefix("FAIL: ").removeprefix(f"{bundle}: ")
                 for line in stderr.splitlines() if line.startswith("FAIL: "))


def agree(copy: Verdict, cli: Verdict) -> bool:
    """One verdict: the same exit code, ``ok`` and ``FAIL:`` lines, a line of the CLI's
    allowed to go on after the copy's (``; `` and who to ask about a key the policy does not
    hold, read from the bundle's own records by `ledger.relayed_keys`, which the verifier
    alone does not: out59)."""
    return (copy.code, copy.ok, len(copy.fails)) == (cli.code, cli.ok, len(cli.fails)) and all(
        b == a or b.startswith(f"{a}; ") for a, b in zip(copy.fails, cli.fails, strict=True))


@dataclass
class Auditor:
    work: Path
    lab: Path
    policy: Path
    env: dict[str, str]

    def copy(self, bundle: Path, *extra: str | Path) -> Verdict:
        """``python -m verify`` of the copy alone."""
        def run(*more: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-S", "-m", "verify", str(bundle), "--policy",
                 str(self.policy), *map(str, extra), *more],
                cwd=self.work, env=self.env, capture_output=True, text=True, timeout=300,
            )  # fmt: skip

        text, js = run(), run("--json")
        assert "Traceback" not in text.stderr + js.stderr, text.stderr + js.stderr
        assert text.returncode == js.returncode
        ok = json.loads(js.stdout)["ok"] if js.stdout.strip() else None
        return Verdict(text.returncode, ok, _fails(text.stderr, bundle))

    def cli(self, bundle: Path, *extra: str | Path, state: Path) -> Verdict:
        """``trajledger verify BUNDLE --policy P``, in the user state ``state``."""
        args = ["verify", str(bundle), "--policy", str(self.policy), *map(str, extra)]
        env = {"TRAJLEDGER_STATE_DIR": str(state)}
        text = new_runner().invoke(main, args, env=env)
        js = new_runner().invoke(main, [*args, "--json"], env=env)
        assert "Traceback" not in text.output + js.output
        assert text.exit_code == js.exit_code
        ok = json.loads(js.stdout)["ok"] if js.stdout.strip() else None
        return Verdict(text.exit_code, ok, _fails(text.stderr, bundle))


@pytest.fixture(scope="module")
def auditor(tmp_path_factory: pytest.TempPathFactory,
            quickstart_template: testkit.Template[str]) -> Auditor:
    root = tmp_path_factory.mktemp("copy-agrees")
    runner = new_runner()
    lab = root / "lab"
    with pytest.MonkeyPatch.context() as m:
        m.setenv("TRAJLEDGER_STATE_DIR", str(root / "lab-state"))
        testkit.copy_template(quickstart_template, lab)  # (the session's quickstart ledger)
        work = root / "auditor"
        (work / "keys").mkdir(parents=True)
        for pub in (lab / "keys").glob("*.pub"):
            shutil.copy(pub, work / "keys" / pub.name)
        vkey = json.loads(runner.invoke(main, ["--ledger", str(lab), "log", "info",
                                               "--json"]).stdout)["vkey"]
        (work / "policy.toml").write_text(Lab.policy_text(vkey))  # docs/third-party.md
        ledger = ["--ledger", str(lab)]
        r = runner.invoke(main, [*ledger, "train", "--dataset", "cartpole-train@2", "--key",
                                 "trainer", "--name", "cartpole-bc", "--version", "3",
                                 "--parent", "cartpole-bc@2", "--seed", "1", "--output",
                                 str(work / "model")])  # fmt: skip
        assert r.exit_code == 0, r.output
        for ref, out in (("cartpole-bc@3", "checkpoint"), ("cartpole-train@2", "dataset")):
            r = runner.invoke(main, [*ledger, "export", ref, "--out", str(work / f"{out}.tar.zst")])
            assert r.exit_code == 0, r.output
        r = runner.invoke(main, [*ledger, "revoke", "cartpole-random", "--reason", "consent "
                                 "withdrawn", "--key", "approver-a"])  # fmt: skip
        assert r.exit_code == 0, r.output
        r = runner.invoke(main, [*ledger, "export", "cartpole-bc@3", "--out",
                                 str(work / "revoked.tar.zst")])  # fmt: skip
        assert r.exit_code == 0, r.output
    (work / "newer.checkpoint").write_bytes(dict(tk.bundle_members(work / "revoked.tar.zst"))[
        "checkpoint"])
    shutil.copytree(REPO / "trajledger" / "verify", work / "verify",
                    ignore=shutil.ignore_patterns("__pycache__"))
    site = sysconfig.get_paths()["purelib"]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join([str(work), site]),
           "HOME": str(root / "auditor-home")}
    probe = subprocess.run([sys.executable, "-S", "-c", "import trajledger"], env=env,
                           cwd=work, capture_output=True, text=True)  # fmt: skip
    assert probe.returncode != 0 and "No module named 'trajledger'" in probe.stderr, probe
    return Auditor(work, lab, work / "policy.toml", env)


def _variants(a: Auditor) -> dict[str, tuple[Path, tuple[str | Path, ...]]]:
    """Each case: the bundle and the options, made once in the auditor's directory."""
    w = a.work
    members = tk.bundle_members(w / "checkpoint.tar.zst")
    blob = max((m for m in members if m[0].startswith("objects/")), key=lambda m: len(m[1]))[0]
    tk.write_bundle(w / "blob.tar.zst", [(n, tk.flip(d) if n == blob else d)
                                         for n, d in members], reindex=True)  # fmt: skip
    approval = next(json.loads(d)["envelope"] for n, d in members
                    if n.startswith("entries/") and json.loads(d)["kind"] == "approval")
    tk.write_bundle(w / "no-approval.tar.zst", [
        (n, d) for n, d in members if n != f"objects/sha256/{approval[7:]}"], reindex=True)
    (w / "wrong-trainer.toml").write_text(a.policy.read_text().replace(
        "keys/trainer.pub", "keys/vendor.pub"))
    shutil.copytree(w / "model", w / "model-extra", dirs_exist_ok=True)
    (w / "model-extra" / "model.safetensors").write_bytes(b"not listed")
    dataset = json.loads(dict(tk.bundle_members(w / "dataset.tar.zst"))["bundle.json"])["subject"]
    return {
        "checkpoint": (w / "checkpoint.tar.zst", ()),
        "dataset": (w / "dataset.tar.zst", ()),
        "blob changed": (w / "blob.tar.zst", ()),
        "approval left out": (w / "no-approval.tar.zst", ()),
        "revoked": (w / "revoked.tar.zst", ()),
        "files": (w / "checkpoint.tar.zst", ("--files", w / "model")),
        "extra file": (w / "checkpoint.tar.zst", ("--files", w / "model-extra")),
        "skip data": (w / "revoked.tar.zst", ("--skip-data",)),
        "expect another": (w / "checkpoint.tar.zst", ("--expect", dataset)),
    }


def test_the_copy_of_verify_alone_and_the_cli_agree(auditor: Auditor, tmp_path: Path) -> None:
    verdicts = {}
    for name, (bundle, extra) in _variants(auditor).items():
        copy = auditor.copy(bundle, *extra)
        cli = auditor.cli(bundle, *extra, state=tmp_path / f"state-{len(verdicts)}")
        assert agree(copy, cli), (name, copy, cli)
        verdicts[name] = copy
    assert {n for n, v in verdicts.items() if v.code == 0} == {"checkpoint", "dataset", "files"}
    assert all(v.ok is True for n, v in verdicts.items() if v.code == 0)
    for name, v in verdicts.items():  # every refusal: exit 1, ok false or no report, a line
        if v.code != 0:
            assert v.code == 1 and v.ok is not True and v.fails, (name, v)
    # a bundle not as exported: a report of its bundle node alone, failing (out44 finding 6)
    assert verdicts["blob changed"].ok is False
    # the wrong trainer, read as a usage error by neither: the lab's evidence failed
    wrong = auditor.work / "wrong-trainer.toml"
    copy = Auditor(auditor.work, auditor.lab, wrong, auditor.env)
    bundle = auditor.work / "checkpoint.tar.zst"
    assert agree(copy.copy(bundle), copy.cli(bundle, state=tmp_path / "state-w"))
    assert copy.copy(bundle).code == 1


def test_a_bundle_older_than_a_checkpoint_seen_fails_in_both(auditor: Auditor,
                                                               tmp_path: Path) -> None:
    """The copy holds no state: ``--known-checkpoint``; the CLI remembers, or is told with
    ``trust VKEY --checkpoint``. Without either, the older bundle passes in both (what a
    bundle cannot tell, docs/third-party.md)."""
    old = auditor.work / "checkpoint.tar.zst"
    state = tmp_path / "state"
    assert auditor.copy(old).code == auditor.cli(old, state=state).code == 0
    copy = auditor.copy(old, "--known-checkpoint", auditor.work / "newer.checkpoint")
    vkey = json.loads(new_runner().invoke(main, ["--ledger", str(auditor.lab), "log", "info",
                                                 "--json"],
                                          env={"TRAJLEDGER_STATE_DIR": str(state)}).stdout)["vkey"]
    r = new_runner().invoke(main, ["trust", vkey, "--checkpoint",
                                   str(auditor.work / "newer.checkpoint")],
                            env={"TRAJLEDGER_STATE_DIR": str(state)})  # fmt: skip
    assert r.exit_code == 0, r.output
    cli = auditor.cli(old, state=state)
    assert copy.code == cli.code == 1 and copy.ok is cli.ok is False, (copy, cli)
    assert any("log fork or rollback" in f for f in copy.fails), copy
    assert any("log fork or rollback" in f for f in cli.fails), cli


def test_a_bundle_not_there_is_named_by_both(auditor: Auditor, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """out37 finding 4: ``trajledger verify evidnce.tar.zst --policy P`` (a bundle's name
    mistyped) outside a ledger said only ``FAIL: .trajledger: no ledger here; run 'trajledger
    init' or pass --ledger DIR``: the auditor was sent to make a ledger. It names the bundle
    now, as ``python -m verify`` does; exit 3 in both (a missing file)."""
    monkeypatch.chdir(tmp_path)  # no ledger here
    gone = tmp_path / "evidnce.tar.zst"
    copy = auditor.copy(gone)
    cli = auditor.cli(gone, state=tmp_path / "state")
    assert copy.code == cli.code == 3 and copy.ok is cli.ok is None, (copy, cli)
    assert copy.fails == (f"bundle {gone}: no such file",), copy
    assert cli.fails[0].startswith(f"bundle {gone}: no such file; as a REF: "), cli
