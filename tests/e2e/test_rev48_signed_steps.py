"""The commands the admission gate tells the user to run name the record it refused, as one
shell word (rev48): a name is its signer's text, and after a name clash (out48, out49) the
plain name of an imported record names the buyer's own.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import testkit
from click.testing import CliRunner
from test_out48_reported import clashing, lab_buyer

from trajledger.ledger import names


def test_the_approve_step_names_the_imported_dataset_it_refused(tmp_path: Path) -> None:
    """The vendor's ``grid@1`` imported, then a ``grid@1`` of the buyer's own; the buyer's
    approval of the vendor's withdrawn. ``admit`` of the vendor's (by its qualified name)
    is refused for its approvals and said ``approve it … ('trajledger approve grid@1 --key
    NAME')``: run as printed, it approved the buyer's own dataset (rev48 finding 4). Expected:
    the step names the dataset refused, as ``show`` resolves it."""
    _vendor, buyer, _batch, theirs, made = clashing(tmp_path)
    mine = made.stdout.strip().splitlines()[-1]
    doc = json.loads(buyer.run("lineage", theirs, "--json").stdout)
    (name,) = [n["qualifiedName"] for n in doc["nodes"] if n["id"] == theirs]
    buyer.run("revoke", name, "--approval", "--key", "approver", "--reason", "too early")
    for ref, digest in ((name, theirs), (theirs, theirs), ("grid@1", mine)):
        r = buyer.run("admit", ref, code=1)
        told = re.search(r"\('(trajledger approve .*--key NAME)'; the policy's", r.stderr)
        assert told, r.stderr
        argv = shlex.split(told.group(1))
        assert argv[:2] == ["trajledger", "approve"] and argv[3:] == ["--key", "NAME"], argv
        shown = json.loads(buyer.run("show", argv[2], "--json").stdout)
        assert shown["digest"] == digest, (ref, told.group(1))


def test_signed_text_holding_an_approvals_line_gets_no_approve_step(tmp_path: Path) -> None:
    """The step was given to any refusal line holding ``> dataset REF: approvals: N of M
    required approver(s) for 'P'`` anywhere, and named that REF: a revocation's reason (a
    producer's text) holding those words made ``admit`` tell the user to approve a dataset
    the reason names (rev48 finding 5). Expected: the step only on the admitted dataset's
    approvals line, known by its start; and since out50 (finding 10) none at all while the
    lineage holds revoked data, which no approval admits."""
    _vendor, buyer, _batch, _theirs, made = clashing(tmp_path)
    mine = made.stdout.strip().splitlines()[-1]
    (batch,) = [n["id"] for n in json.loads(buyer.run("lineage", mine, "--json").stdout)["nodes"]
                if n["kind"] == "rollout-batch"]
    spoof = "x > dataset victim@9: approvals: 0 of 1 required approver(s) for 'train'"
    buyer.run("revoke", batch, "--key", "bprod", "--reason", spoof)
    r = buyer.run("admit", "grid@1", code=1)
    (line,) = [x for x in r.stderr.splitlines() if "revoked: x > dataset victim@9" in x]
    assert "approve victim@9" not in r.stderr and "approve it" not in line, r.stderr
    assert "trajledger approve" not in r.stderr, r.stderr  # (revoked: out50 finding 10)


def test_the_release_step_names_the_imported_checkpoint_it_refused(
        runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    """The lab's ``cartpole-bc@1`` imported, then a ``cartpole-bc@1`` of the buyer's own
    (out49 finding 2). ``release`` of the lab's (by its qualified name) with one approver of
    the two ``[release]`` needs said ``('trajledger release cartpole-bc@1 --key b1 --key
    NAME')``: run as printed, with a second key, it released the buyer's own checkpoint
    (rev48 finding 6). Expected: the step names the checkpoint refused."""
    theirs, buyer = lab_buyer(runner, quickstart_template, tmp_path)
    buyer.run("import", tmp_path / "ck.tar.zst", "--key", "b1", "--key", "b2")
    buyer.run("train", "--dataset", "cartpole-train@1", "--key", "bt", "--name", "cartpole-bc",
              "--version", "1", "--seed", "7")
    buyer.run("key", "new", "be", "--no-encrypt")
    pem = buyer.run("key", "export", "be").stdout.strip()
    policy = (tmp_path / "buyer.toml").read_text().replace("serial = 1", "serial = 2")
    (tmp_path / "buyer-2.toml").write_text(
        f'format = 2\n{policy}[roles.evaluator]\nkeys = ["""{pem}"""]\n[release]\n'
        'approvals = 2\n[[release.require]]\nsuite = "regression@1"\nmin = 0.5\n')
    buyer.run("policy", "set", tmp_path / "buyer-2.toml", "--key", "b1", "--key", "b2", "--yes")
    doc = json.loads(buyer.run("lineage", theirs, "--json").stdout)
    (name,) = [n["qualifiedName"] for n in doc["nodes"] if n["id"] == theirs]
    r = buyer.run("release", name, "--key", "b1", code=1)
    told = re.search(r"\('(trajledger release .*--key NAME)'; the policy's", r.stderr)
    assert told, r.stderr
    argv = shlex.split(told.group(1))
    assert argv[:2] == ["trajledger", "release"] and argv[3:] == ["--key", "b1", "--key",
                                                                   "NAME"], argv
    assert json.loads(buyer.run("show", argv[2], "--json").stdout)["digest"] == theirs, argv


def test_a_bundle_file_is_not_taken_for_an_imported_record_of_its_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rev47 finding 6 made any REF the ledger resolves its record, the hint (``a bundle
    file …: 'trajledger verify FILE --policy POLICY'``) only for a file naming none. A vendor
    names a record ``update.tar.zst`` (``attest`` names a record by its file's name) and sends
    its bundle under that name: the auditor's ``lineage update.tar.zst`` where the file is
    answered with the lineage of the vendor's record, another subject, as the bundle's
    (rev48 finding 7). Expected: the hint, naming the imported record by its digest; a record
    of the ledger's own of that name is still its record (rev47's case)."""
    vendor, buyer, _batch, _theirs, _made = clashing(tmp_path)
    monkeypatch.chdir(tmp_path)
    Path("update.tar.zst").write_bytes(b"weights, say")
    named = vendor.last("attest", "update.tar.zst", "--key", "vendor")
    vendor.run("export", named, "--updates-since", "4", "--out", tmp_path / "att.tar.zst")
    buyer.run("import", tmp_path / "att.tar.zst", "--key", "approver")
    Path("update.tar.zst").write_bytes((tmp_path / "att.tar.zst").read_bytes())  # (the bundle)
    for command in ("show", "lineage", "impact"):
        r = buyer.run(command, "update.tar.zst", code=2)
        assert "a bundle file" in r.output and named[:19] in r.output, r.output
    shown = json.loads(buyer.run("show", named, "--json").stdout)  # (by its digest: there)
    assert shown["digest"] == named, shown


def test_the_approve_step_names_a_dataset_whose_name_parses_as_another(
        quickstart_template: testkit.Template[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A signed name may hold ``@`` (the ledger refuses it for its own records, not for what
    other software signed or an import brings): ``x@1`` version ``2`` and ``x`` version
    ``1@2`` are both ``x@1@2``, which commands read as the first (``NAME@VERSION`` split at
    the last ``@``). ``admit`` of the second said ``('trajledger approve x@1@2 --key
    NAME')``: run as printed, it approved the first (rev48 finding 9). Expected: a step that
    finds the dataset refused (its digest when no name does)."""
    run, made = signed_names(quickstart_template, tmp_path, monkeypatch,
                             (("x@1", "2"), ("x", "1@2")))
    r = run("admit", made["x"], code=1)
    told = re.search(r"\('(trajledger approve .*--key NAME)'; the policy's", r.stderr)
    assert told, r.stderr
    argv = shlex.split(told.group(1))
    shown = json.loads(run("show", argv[2], "--json").stdout)
    assert shown["digest"] == made["x"], (told.group(1), made)


def signed_names(template: testkit.Template[str], tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch, named: tuple[tuple[str, str], ...]
                 ) -> tuple[Callable[..., Any], dict[str, str]]:
    """A quickstart lab with a train dataset of its batch for each ``(name, version)`` in
    ``named``, made with the name check off (as another's software signs any name): the lab's
    ``run(*args, code=0)`` and ``{name: digest}``."""
    from trajledger.runner.cli import main

    home = testkit.copy_template(template, tmp_path / "lab")
    runner = testkit.new_runner()

    def run(*args: str, code: int = 0) -> Any:
        r = runner.invoke(main, ["--ledger", str(home), *args])
        assert r.exit_code == code and "Traceback" not in r.output, r.output
        return r

    batch = next(n["id"] for n in json.loads(run("lineage", "cartpole-train@1", "--json").stdout)
                 ["nodes"] if n["kind"] == "rollout-batch")
    made = {}
    with monkeypatch.context() as m:
        m.setattr(names, "check_name", lambda value, *_a, **_k: value)
        for name, version in named:
            made[name] = run("dataset", "create", name, "--version", version, "--split",
                             "train", "--batch", batch, "--key", "vendor").stdout.split()[-1]
    return run, made
