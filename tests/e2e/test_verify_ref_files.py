"""``trajledger verify REF`` on a ledger checkpoint names its files, and ``--files DIR`` checks a
directory of model files against it (issue 23 item 7), as the bundle report does
(test_verify_files.py): the same lines, outcome words and exit codes, the one `name_files`.

The quickstart ledger's final checkpoint, its files written to a directory from the store: each
is named with its digest and size (text and ``--json``); with ``--files`` a match exits 0, a
changed, missing or extra file exits 1 naming it, a symbolic link is never
followed, a path that is not a directory exits 3, and an artifact without files exits 1.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import testkit

from trajledger import Ledger
from trajledger.ledger.catalog import Catalog
from trajledger.runner.cli import main
from trajledger.verify.manifest import Manifest
from trajledger.verify.strict_json import load_object

REF = "cartpole-bc@2"


@pytest.fixture
def home(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path / "home")


def checkpoint(home: Path) -> tuple[str, Manifest]:
    ledger = Ledger.open(home)
    digest = Catalog(ledger).resolve(REF).digest
    return digest, Manifest.from_json(load_object(ledger.store.get(digest), "manifest"))


def model(home: Path, tmp_path: Path) -> Path:
    """The checkpoint's files, written to ``tmp_path/model`` from the store."""
    ledger = Ledger.open(home)
    _, manifest = checkpoint(home)
    out = tmp_path / "model"
    out.mkdir()
    for f in manifest.files:
        (out / f.path).parent.mkdir(parents=True, exist_ok=True)
        (out / f.path).write_bytes(ledger.store.get(f.digest))
    return out


def run(home: Path, *args: str) -> tuple[int, str, str]:
    r = testkit.new_runner().invoke(main, ["--ledger", str(home), "verify", REF, *args])
    return r.exit_code, r.stdout, r.stderr


def line(f: object, rest: str, sep: str = " —") -> str:
    """A file's check as the text report draws it (``sep`` ":" as a FAIL line names it)."""
    return f"file {f.path}{sep} {f.digest}, {f.size} bytes{rest}"  # type: ignore[attr-defined]


def test_the_report_names_the_checkpoints_files(home: Path) -> None:
    digest, manifest = checkpoint(home)
    code, out, err = run(home)
    assert code == 0, err
    for f in manifest.files:
        assert f"    · {line(f, '')}\n" in out
    code, out, err = run(home, "--json")
    assert code == 0, err
    node = next(n for n in json.loads(out)["nodes"] if n["id"] == digest)
    named = {c["what"]: c["detail"] for c in node["checks"] if c["what"].startswith("file ")}
    assert named == {f"file {f.path}": f"{f.digest}, {f.size} bytes" for f in manifest.files}
    # The library call names them too.
    report = Ledger.open(home).verify(REF)
    assert {c.what for c in report.nodes[digest].checks} >= set(named)


def test_a_matching_directory_names_each_file(home: Path, tmp_path: Path) -> None:
    _, manifest = checkpoint(home)
    files = model(home, tmp_path)
    code, out, err = run(home, "--files", str(files))
    assert code == 0, err
    for f in manifest.files:
        assert f"    ✓ {line(f, f': matches {files / f.path}')}\n" in out
    assert err.startswith(f"OK: {REF}: ")


def test_a_changed_and_a_missing_file_fail_naming_each(home: Path, tmp_path: Path) -> None:
    digest, manifest = checkpoint(home)
    files = model(home, tmp_path)
    changed, gone = manifest.files[0], manifest.files[1]
    data = bytearray((files / changed.path).read_bytes())
    data[0] ^= 1
    (files / changed.path).write_bytes(bytes(data))
    (files / gone.path).unlink()
    code, _, err = run(home, "--files", str(files))
    assert code == 1, err
    label = f"checkpoint {REF} ({digest[:19]}…)"
    got = f"sha256:{hashlib.sha256(bytes(data)).hexdigest()}"
    first, *rest = err.splitlines()
    assert re.fullmatch(rf"FAIL: {re.escape(REF)}: 2 of \d+ checks failed", first)
    assert rest == [
        f"FAIL: {label} > "
        f"{line(changed, f': {files / changed.path} differs: content hashes to {got}, want ', ':')}"
        f"{changed.digest}",
        f"FAIL: {label} > {line(gone, f': missing from {files} (no such file)', ':')}",
    ]


def test_extra_files_fail_and_links_are_not_followed(home: Path, tmp_path: Path) -> None:
    # An extra file was information (`·`, exit 0): a model.safetensors beside a listed
    # pytorch_model.bin, which transformers loads first, verified OK (rev16's left item).
    digest, manifest = checkpoint(home)
    files = model(home, tmp_path)
    (files / "notes").mkdir()
    (files / "notes" / "README.md").write_text("not part of the checkpoint\n")
    code, _, err = run(home, "--files", str(files))
    assert code == 1, err
    assert err.splitlines()[1:] == [
        f"FAIL: checkpoint {REF} ({digest[:19]}…) > extra file notes/README.md: in {files}, not "
        f"listed by checkpoint {REF} ({digest[:19]}…)"]
    (files / "notes" / "README.md").unlink()
    (files / "notes").rmdir()
    # The listed file is a link to a copy outside DIR with the right bytes: still not read.
    outside = tmp_path / "outside"
    outside.mkdir()
    first = manifest.files[0]
    (files / first.path).rename(outside / first.path)
    (files / first.path).symlink_to(outside / first.path)
    code, _, err = run(home, "--files", str(files))
    assert code == 1, err
    link = f": missing from {files} ({files / first.path} is a symbolic link "
    assert f"{line(first, link, ':')}(to {outside / first.path}), not followed)\n" in err


def test_files_must_be_a_directory_of_the_artifacts_files(home: Path, tmp_path: Path) -> None:
    code, _, err = run(home, "--files", str(tmp_path / "absent"))
    assert code == 3
    assert err == f"FAIL: --files {tmp_path / 'absent'}: not a directory\n"
    # Another artifact's files (a dataset's card) are not the model's.
    files = model(home, tmp_path)
    r = testkit.new_runner().invoke(main, ["--ledger", str(home), "verify", "cartpole-train@1",
                                           "--files", str(files)])
    assert r.exit_code == 1, r.stderr
    assert re.search(r"> file dataset\.json: sha256:[0-9a-f]{64}, \d+ bytes: missing from "
                     f"{re.escape(str(files))} \\(no such file\\)\n", r.stderr), r.stderr


def test_the_files_of_a_tampered_checkpoint_are_not_named(home: Path, tmp_path: Path) -> None:
    """Only a manifest the lineage verified is named: a checkpoint whose manifest blob was
    altered fails its files check, names none and compares no directory."""
    digest, manifest = checkpoint(home)
    files = model(home, tmp_path)
    path = Ledger.open(home).store.path_of(digest)
    path.chmod(0o644)
    path.write_bytes(path.read_bytes() + b" ")
    code, out, err = run(home)
    assert code == 1, err
    assert "manifest hashes to" in err
    assert not any(f"file {f.path} —" in out for f in manifest.files)
    code, out, err = run(home, "--files", str(files))
    assert code == 1, err
    assert (f"FAIL: checkpoint {REF} ({digest[:19]}…) > files: {files}: not compared: "
            f"checkpoint {REF} ({digest[:19]}…) has no verified file list\n") in err
