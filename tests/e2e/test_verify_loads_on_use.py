"""``trajledger verify REF`` loads what an update needs only when the ledger imported something
(walk50).

After the report, `first_contact.unread` asks whether records another log brought wait to be
read against it; on a ledger that imported nothing it answers from the log's index alone. Its
module imported ``ledger.updates`` (the record writer, the update's judges and what they load:
about 10 ms of a command's start-up, paid after the walk, where no other core's work hides it)
for a constant and a function the answer never reached. Both load where used now.
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
print("updates:", "trajledger.ledger.updates" in sys.modules)
"""


def test_verify_of_a_ledger_that_imported_nothing_loads_no_update_code(
        quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "home")
    r = subprocess.run([sys.executable, "-c", _VERIFY, str(home), quickstart_template.value],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "OK: " in r.stdout, r.stdout
    assert "first_contact: True" in r.stdout  # `unread` ran: the test tests something
    assert "updates: False" in r.stdout, r.stdout
