"""out44 finding 3: a lineage page handed to an auditor says how to check it.

A buyer hands an auditor `trajledger lineage CK --format html`: the page said `✓ OK: … N checks
passed` and `Statuses come from verifying … against the trust policy`, not whose log and policy
(the buyer's), nor that a page is a claim and how to check it: the evidence bundle (`trajledger
export CK`), verified by `python -m trajledger.verify BUNDLE --policy YOURS --expect DIGEST`,
which needs no ledger. On the session's quickstart ledger (tests/e2e/conftest.py).
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import testkit
from click.testing import CliRunner

from trajledger.runner.cli import main


def test_a_lineage_page_names_its_log_and_how_to_check_it(
    runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "demo")
    ckpt = quickstart_template.value
    out = tmp_path / "lineage.html"
    r = runner.invoke(main, ["--ledger", str(home), "lineage", ckpt, "--format", "html",
                             "--out", str(out)])
    assert r.exit_code == 0, r.output
    text = html.unescape(re.sub(r"<[^>]+>", "", out.read_text()))
    origin = (home / "ledger.toml").read_text().split('origin = "')[1].split('"')[0]
    assert f"the log {origin}" in text
    assert "a claim, not evidence" in text
    assert f"trajledger export {ckpt}" in text
    assert f"python -m trajledger.verify BUNDLE --policy YOUR-POLICY --expect {ckpt}" in text
    # Impact pages (downstream) keep the note of what they are made from, and name the log too.
    r = runner.invoke(main, ["--ledger", str(home), "impact", "cartpole-random", "--format",
                             "html", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert f"the log {origin}" in html.unescape(re.sub(r"<[^>]+>", "", out.read_text()))
