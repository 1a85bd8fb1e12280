"""End to end: a vendor's dataset named like the buyer's release suite (fourteenth review round,
rev26; docs/SECURITY.md "Review of 2026-12-04, fourteenth round (rev26)").

A policy's ``[[release.require]] suite = "regression@1"`` named the first verified holdout or
regression dataset of that name in the log, whichever log recorded it. A vendor names its
datasets at will: its ``regression@1`` (episodes it chose, and knows), imported, became the
buyer's release suite. The buyer's own suite of the name, recorded afterwards, never counted
(``release`` said to run ``eval --suite regression@1``, which evaluates on the buyer's own: a
loop), and an evaluation on the vendor's suite released the checkpoint. An unpinned suite is now
one the release's own log recorded; another log's counts only pinned by its digest.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from test_evaluations import POLICY as EVALS_POLICY
from test_updates import BUYER_POLICY, Vendor, make_buyer, rollouts, vendor_copy
from testkit import Party

RELEASE = EVALS_POLICY[EVALS_POLICY.index("[release]"):]
POLICY = "format = 2\n" + BUYER_POLICY + '[roles.evaluator]\nkeys = ["keys/evaluator.pub"]\n' + (
    RELEASE.replace("min = 0.5\nmax_drop = 0.1", "min = 0.9"))
"""The buyer's policy of tests/e2e/test_updates.py, format 2, with an evaluator and the
release rule of tests/e2e/test_evaluations.py: success_rate >= 0.9 on regression@1."""

EVALUATE = textwrap.dedent(
    """
    import json, os, pathlib, sys
    import pyarrow.parquet as pq
    suite = pathlib.Path(os.environ["TRAJLEDGER_SUITE_DIR"])
    listing = json.loads((suite / "manifest.json").read_text())
    episodes = [{"batch": b["digest"], "episode_id": e, "passed": sys.argv[1] == "pass"}
                for b in listing["batches"]
                for e in pq.read_table(suite / b["directory"] / "episodes.parquet")
                .column("episode_id").to_pylist()]
    (pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"]) / "results.json").write_text(json.dumps(
        {"format": "trajledger.eval-results/1", "episodes": episodes}))
    """
)


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


def vendor_suite_and_buyer(tmp_path: Path) -> tuple[str, Path, Party]:
    """A vendor's ``regression@1`` (its digest, its bundle) and a buyer with a checkpoint
    ``pol@1`` trained on its own ``train@1``, the vendor's suite not imported."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    easy = vendor.last("record", rollouts(tmp_path / "easy.parquet", 11), "--env", "grid@1",
                       "--policy", "easy", "--name", "easy", "--licence", "CC-BY-4.0", "--key",
                       "vendor")  # fmt: skip
    theirs = vendor.last("dataset", "create", "regression", "--version", "1", "--split",
                         "regression", "--batch", easy, "--key", "vendor")  # fmt: skip
    bundle = tmp_path / "suite.tar.zst"
    vendor.run("export", "regression@1", "--out", bundle)

    return theirs, bundle, trained_buyer(tmp_path, vendor)


def trained_buyer(tmp_path: Path, vendor: Vendor) -> Party:
    """A buyer of ``vendor`` with a checkpoint ``pol@1`` trained on its own ``train@1``."""
    buyer = Party(tmp_path, "buyer")
    make_buyer(buyer, [vendor], POLICY, evaluator=True)
    buyer.run("env", "register", "grid", "--version", "1", "--source", "sim", "--key",
              "producer")  # fmt: skip
    train = buyer.last("record", rollouts(tmp_path / "train.parquet", 21), "--env", "grid@1",
                       "--policy", "p", "--name", "train-1", "--licence", "CC-BY-4.0", "--key",
                       "producer")  # fmt: skip
    buyer.run("dataset", "create", "train", "--version", "1", "--split", "train", "--batch",
              train, "--key", "producer")  # fmt: skip
    buyer.run("approve", "train@1", "--key", "approver")
    buyer.run("train", "--dataset", "train@1", "--key", "trainer", "--name", "pol", "--version",
              "1")  # fmt: skip
    return buyer


def test_a_vendors_dataset_named_like_the_release_suite_is_not_the_suite(tmp_path: Path) -> None:
    theirs, bundle, buyer = vendor_suite_and_buyer(tmp_path)
    script = tmp_path / "evaluate.py"
    script.write_text(EVALUATE)

    def evaluate(suite: str, mode: str) -> Any:
        return buyer.run("eval", "pol@1", "--suite", suite, "--key", "evaluator", "--",
                         sys.executable, script, mode)  # fmt: skip

    # No regression@1 at all: the release says to record the suite in its own log (left27;
    # before, it said to run 'eval --suite regression@1', which finds no suite, or another
    # log's once one is imported).
    r = buyer.run("release", "pol@1", "--key", "approver", code=1)
    assert re.search(
        r"> success_rate on regression@1: missing: no holdout or regression dataset regression@1 "
        r"of the release's own log is logged before it: record the suite in this log "
        r"\('trajledger dataset create regression --version 1 --split regression --batch …'\), "
        r"or pin another log's in \[\[release\.require\]\] \(digest = \"sha256:…\"\); then run "
        r"'trajledger eval sha256:[0-9a-f]{64} --suite regression@1 --key KEY' \(KEY: a key of "
        r"the policy's evaluator role\)$", r.stderr), r.stderr
    buyer.run("import", bundle, "--key", "approver")
    at = int(json.loads(buyer.run("show", theirs, "--json").stdout)["index"])
    # The buyer has no regression@1 of its own yet: the name finds the vendor's, and a run on
    # it passes, said before it runs (left27). Before rev26's fix the release was recorded.
    r = evaluate("regression@1", "pass")
    assert (f"NOTE: suite regression@1 ({theirs}): an evaluation on it does not count "
            "for policy 'buyer''s release rule success_rate on regression@1: no holdout or "
            "regression dataset regression@1 of the release's own log is logged before it; "
            f"{theirs} (log index {at}) came from another log") in r.stderr, r.stderr
    r = buyer.run("release", "pol@1", "--key", "approver", code=1)
    assert r.stderr.splitlines()[-1].endswith(
        f"> success_rate on regression@1: no holdout or regression dataset regression@1 of the "
        f"release's own log is logged before it; {theirs} (log index {at}) came from another "
        "log, by import, and is not its suite: to release on it, pin it in [[release.require]] "
        f'(digest = "{theirs}")'), r.stderr
    # The buyer's own suite is the suite: a failing run on it refuses the release (before the
    # fix: "missing: … run 'trajledger eval … --suite regression@1'", which ran on this one).
    mine = buyer.last("record", rollouts(tmp_path / "mine.parquet", 31), "--env", "grid@1",
                      "--policy", "p", "--name", "mine", "--licence", "CC-BY-4.0", "--key",
                      "producer")  # fmt: skip
    buyer.run("dataset", "create", "regression", "--version", "1", "--split", "regression",
              "--batch", mine, "--key", "producer")  # fmt: skip
    evaluate("regression@1", "fail")
    r = buyer.run("release", "pol@1", "--key", "approver", code=1)
    assert "> success_rate on regression@1: success_rate 0 is below the minimum 0.9" in (
        r.stderr), r.stderr
    assert "NOTE: suite" not in evaluate("regression@1", "pass").stderr  # the buyer's own suite
    release = buyer.last("release", "pol@1", "--key", "approver")
    # The release's node is labelled once as a release (it said 'release release of pol@1').
    shown = buyer.run("verify", release).stdout
    assert "release of pol@1 (" in shown and "release release" not in shown, shown
    # The buyer's bundle of the release verifies offline as the ledger judged it.
    out = tmp_path / "release.tar.zst"
    buyer.run("export", release, "--out", out)
    p = subprocess.run([sys.executable, "-m", "trajledger.verify", str(out), "--policy",
                        str(buyer.home / "policy.toml")], capture_output=True, text=True,
                       env={**os.environ, "TRAJLEDGER_STATE_DIR": str(buyer.state)})  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "success_rate on regression@1" in p.stdout, p.stdout
