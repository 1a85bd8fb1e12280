"""``trajledger verify REF`` loads what it does not use only where used (walk50).

Its imports before the walk and after it are paid on one core: the re-hashing workers start
with the walk and end before the report is printed, so nothing hides them.

- After the report, `first_contact.unread` asks whether records another log brought wait to be
  read against it; on a ledger that imported nothing it answers from the log's index alone.
  Its module imported ``ledger.updates`` (the record writer, the update's judges and what they
  load: about 10 ms) for a constant and a function that answer never reached.
- The report's text is rendered by ``runner.lineage``, which imported the pictures' layout and
  ``html`` (about 3 ms) for the other formats.
- Every reader of the log imports ``ledger.encode`` (for `verifier_vkey`), which imported a
  bundle's index format (``verify.bundle_index``, about 2.5 ms) for the writer of ``bundle.json``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import testkit

_VERIFY = """
import sys
from trajledger.__main__ import main
sys.argv = ["trajledger", "--ledger", sys.argv[1], "verify", sys.argv[2]]
try:
    main()
except SystemExit as e:
    assert e.code in (0, None), e.code
print("first_contact:", "trajledger.ledger.first_contact" in sys.modules)
print("loaded:", sorted(set(sys.modules) & {"trajledger.ledger.updates", "html",
                                            "trajledger.runner.lineage_layout",
                                            "trajledger.verify.bundle_index"}))
"""


def test_verify_loads_no_update_code_no_picture_and_no_bundle_format(
        quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "home")
    r = subprocess.run([sys.executable, "-c", _VERIFY, str(home), quickstart_template.value],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "OK: " in r.stdout, r.stdout
    assert "first_contact: True" in r.stdout  # `unread` ran: the test tests something
    assert "loaded: []" in r.stdout, r.stdout


def test_what_loads_on_use_still_works(quickstart_template: testkit.Template[str],
                                       tmp_path: Path) -> None:
    """The lineage's page (the layout and ``html``), and ``bundle.json``'s writer, in a fresh
    process that loaded none of them at start."""
    home = testkit.copy_template(quickstart_template, tmp_path / "home")
    page, bundle = tmp_path / "lineage.html", tmp_path / "out.tar.zst"
    r = subprocess.run([sys.executable, "-m", "trajledger", "--ledger", str(home), "lineage",
                        quickstart_template.value, "--format", "html", "--out", str(page)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert page.read_text().startswith("<!DOCTYPE html>") and "<svg" in page.read_text()
    r = subprocess.run([sys.executable, "-m", "trajledger", "--ledger", str(home), "export",
                        quickstart_template.value, "--out", str(bundle)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert bundle.stat().st_size > 0
