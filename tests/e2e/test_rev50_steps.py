"""rev50 finding 4: a step that names a record by a name not every shell reads back as one
argument names it by its digest; docs/SECURITY.md, "Review of 2026-12-07, thirty-eighth round
(rev50)".

A signed name is its signer's text. One holding a parenthesis (which the report escapes, as it
could show a look-alike digest) was printed as ``'p '$'\\x28'q$'\\x29'@1``: dash reads
``p $\\x28q$\\x29@1``, fish refuses the line; one starting ``-`` was printed as an option
(``trajledger approve --purpose=eval@1 --key NAME``: approve's ``--purpose``, and no REF).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import testkit
from test_rev48_signed_steps import signed_names

from trajledger.ledger import names


def test_steps_name_a_record_every_shell_reads_otherwise_by_its_digest(
        quickstart_template: testkit.Template[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    run, made = signed_names(quickstart_template, tmp_path, monkeypatch, (("p (q)", "1"),
                                                                    ("plain-x", "1"),
                                                                    ("a|b&c<d`e", "1")))
    batch = next(n["id"] for n in json.loads(run("lineage", "cartpole-train@1", "--json").stdout)
                 ["nodes"] if n["kind"] == "rollout-batch")
    with monkeypatch.context() as m:  # (a name click reads as an option: after --)
        m.setattr(names, "check_name", lambda value, *_a, **_k: value)
        made["--purpose=eval"] = run(
            "dataset", "create", "--version", "1", "--split", "train", "--batch", batch,
            "--key", "vendor", "--", "--purpose=eval").stdout.split()[-1]
    for name, digest in made.items():
        if name == "a|b&c<d`e":  # (every shell reads it: its name in the step)
            continue
        err = run("admit", digest, code=1).stderr
        if name == "plain-x":  # a name every shell reads: by its name
            assert "('trajledger approve plain-x@1 --key NAME'" in err, err
            continue
        told = re.search(r"\('(trajledger approve .*? --key NAME)'; ", err)
        assert told, err
        assert shlex.split(told.group(1)) == ["trajledger", "approve", digest, "--key", "NAME"], (
            name, told.group(1))
    for name in ("p (q)", "a|b&c<d`e"):  # (a backtick ends the command's code span, and
        # `_cell`'s escapes are shown as they are in one: rev50 finding 4)
        card = run("card", made[name], "--format", "hf").stdout
        told = re.search(r"Check it yourself: `(trajledger verify [^`]*)`, or", card)
        assert told and told.group(1) == f"trajledger verify {made[name]}", card


def test_a_file_named_as_a_record_is_not_verified_for_it(
        quickstart_template: testkit.Template[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """finding 8: ``trajledger verify NAME@V --policy P`` (a card's command with the policy
    the reader trusts) read a zstd file of that name in the working directory as a bundle:
    a bundle of another record there (a package's, a download's) was verified instead, ``OK:
    cartpole-train@1: checkpoint cartpole-bc@1 …``, exit 0. Expected: the name is refused as
    both, saying how to name each; a path (``./NAME@V``) is the file."""
    run, _made = signed_names(quickstart_template, tmp_path, monkeypatch, ())
    home = tmp_path / "lab"
    bundle = tmp_path / "bc.tar.zst"
    run("export", "cartpole-bc@1", "--out", str(bundle))
    digest = json.loads(run("show", "cartpole-train@1", "--json").stdout)["digest"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cartpole-train@1").write_bytes(bundle.read_bytes())
    err = run("verify", "cartpole-train@1", "--policy", str(home / "policy.toml"),
              code=2).stderr
    assert "cartpole-train@1: a file here (a bundle) and a record of this ledger" in err, err
    assert f"'trajledger verify {digest}" in err and "./cartpole-train@1" in err, err
    out = run("verify", "./cartpole-train@1", "--policy", str(home / "policy.toml")).stdout
    assert "checkpoint cartpole-bc@1" in out.splitlines()[0], out
