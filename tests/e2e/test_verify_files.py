"""``python -m verify BUNDLE --files DIR``: an auditor holding the model files ties them to the
lineage with ``verify/`` alone.

A quickstart ledger exports its final checkpoint; the model's files are written to a directory
from the bundle's own objects. Every report names the checkpoint's files with their digests;
with ``--files`` each is found in the directory by path and hashed: a match exits 0, a changed
or missing file exits 1 naming it, and so does an extra file (a loader may read it); a symbolic
link (to a file or a directory outside) is never followed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import testkit
from click.testing import CliRunner

from trajledger.runner.cli import main
from trajledger.verify.bundle import BundleEvidence
from trajledger.verify.manifest import Manifest
from trajledger.verify.strict_json import load_object

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, quickstart_template: testkit.Template[str]
             ) -> tuple[Path, Manifest, str]:
    """(work directory holding bundle.tar.zst, policy.toml and keys/; the checkpoint's manifest;
    its digest), from a copy of the session's quickstart ledger."""
    tmp = tmp_path_factory.mktemp("files")
    testkit.copy_template(quickstart_template, tmp / "vendor")
    ref = quickstart_template.value
    work = tmp / "auditor"
    work.mkdir()
    r = CliRunner().invoke(main, ["--ledger", str(tmp / "vendor"), "export", ref, "--out",
                                  str(work / "bundle.tar.zst")])
    assert r.exit_code == 0, r.output
    shutil.copy(tmp / "vendor" / "policy.toml", work / "policy.toml")
    shutil.copytree(tmp / "vendor" / "keys", work / "keys",
                    ignore=shutil.ignore_patterns("*.key", "*.pem"))
    with BundleEvidence.open(work / "bundle.tar.zst") as evidence:
        manifest = Manifest.from_json(load_object(evidence.blob(ref) or b"", "manifest"))
        model = work / "model"
        model.mkdir()
        for f in manifest.files:
            (model / f.path).write_bytes(evidence.blob(f.digest) or b"")
    return work, manifest, ref


def model_copy(exported: tuple[Path, Manifest, str], tmp_path: Path) -> Path:
    out = tmp_path / "model"
    shutil.copytree(exported[0] / "model", out)
    return out


def verify(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "trajledger.verify", str(work / "bundle.tar.zst"), "--policy",
         str(work / "policy.toml"), *args],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )


def line(f: object, rest: str, sep: str = " —") -> str:
    """A file's check as the text report draws it (``sep`` ":" as a FAIL line names it)."""
    return f"file {f.path}{sep} {f.digest}, {f.size} bytes{rest}"  # type: ignore[attr-defined]


def test_every_report_names_the_checkpoints_files(exported: tuple[Path, Manifest, str]) -> None:
    work, manifest, ref = exported
    r = verify(work)
    assert r.returncode == 0, r.stderr
    for f in manifest.files:
        assert f"    · {line(f, '')}\n" in r.stdout
    doc = json.loads(verify(work, "--json").stdout)
    node = next(n for n in doc["nodes"] if n["id"] == ref)
    named = {c["what"]: c["detail"] for c in node["checks"] if c["what"].startswith("file ")}
    assert named == {f"file {f.path}": f"{f.digest}, {f.size} bytes" for f in manifest.files}


def test_a_matching_directory_names_each_file(
    exported: tuple[Path, Manifest, str], tmp_path: Path
) -> None:
    work, manifest, _ = exported
    model = model_copy(exported, tmp_path)
    r = verify(work, "--files", str(model))
    assert r.returncode == 0, r.stderr
    for f in manifest.files:
        assert f"    ✓ {line(f, f': matches {model / f.path}')}\n" in r.stdout
    assert r.stderr.startswith(f"OK: {work / 'bundle.tar.zst'}: ")


def test_a_changed_and_a_missing_file_fail_naming_each(
    exported: tuple[Path, Manifest, str], tmp_path: Path
) -> None:
    work, manifest, ref = exported
    model = model_copy(exported, tmp_path)
    changed, gone = manifest.files[0], manifest.files[1]
    data = bytearray((model / changed.path).read_bytes())
    data[0] ^= 1
    (model / changed.path).write_bytes(bytes(data))
    (model / gone.path).unlink()
    r = verify(work, "--files", str(model))
    assert r.returncode == 1, r.stderr
    label = f"checkpoint cartpole-bc@2 ({ref[:19]}…)"
    bundle = work / "bundle.tar.zst"
    got = f"sha256:{hashlib.sha256(bytes(data)).hexdigest()}"
    first, *rest = r.stderr.splitlines()
    assert re.fullmatch(rf"FAIL: {re.escape(str(bundle))}: 2 of \d+ checks failed", first)
    assert rest == [
        f"FAIL: {bundle}: {label} > "
        f"{line(changed, f': {model / changed.path} differs: content hashes to {got}, want ', ':')}"
        f"{changed.digest}",
        f"FAIL: {bundle}: {label} > {line(gone, f': missing from {model} (no such file)', ':')}",
    ]


def test_an_extra_file_fails(exported: tuple[Path, Manifest, str], tmp_path: Path) -> None:
    # It was information and exit 0: a loader may read a file the checkpoint does not list
    # (rev16's left item).
    work, _, ref = exported
    model = model_copy(exported, tmp_path)
    (model / "notes").mkdir()
    (model / "notes" / "README.md").write_text("not part of the checkpoint\n")
    r = verify(work, "--files", str(model))
    assert r.returncode == 1, r.stderr
    assert (f"    ✗ extra file notes/README.md — in {model}, not listed by checkpoint "
            f"cartpole-bc@2 ({ref[:19]}…)\n") in r.stdout


def test_symbolic_links_are_not_followed(
    exported: tuple[Path, Manifest, str], tmp_path: Path
) -> None:
    work, manifest, _ = exported
    model = model_copy(exported, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    first = manifest.files[0]
    # The listed file is a link to a copy outside DIR with the right bytes: still not read.
    (model / first.path).rename(outside / first.path)
    (model / first.path).symlink_to(outside / first.path)
    (model / "elsewhere").symlink_to(outside, target_is_directory=True)
    r = verify(work, "--files", str(model))
    assert r.returncode == 1, r.stderr
    link = f": missing from {model} ({model / first.path} is a symbolic link "
    assert (f"{line(first, link, ':')}(to {outside / first.path}), not followed)\n") in r.stderr
    assert (f"    ✗ extra file elsewhere — in {model}: a symbolic link (to {outside}), not "
            "followed\n") in r.stdout


def test_files_must_be_a_directory(
    exported: tuple[Path, Manifest, str], tmp_path: Path
) -> None:
    work, _, _ = exported
    r = verify(work, "--files", str(tmp_path / "absent"))
    assert r.returncode == 3
    assert r.stderr == (f"FAIL: {work / 'bundle.tar.zst'}: --files {tmp_path / 'absent'}: not a "
                        "directory\n")
    # The ledger's command shares the bundle path (and a REF's: test_verify_ref_files.py).
    r2 = CliRunner().invoke(main, ["verify", str(work / "bundle.tar.zst"), "--policy",
                                   str(work / "policy.toml"), "--files", str(work / "model")])
    assert r2.exit_code == 0, r2.output
