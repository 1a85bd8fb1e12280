"""A second ``revoke`` by the same key reports the record the log holds (rev36, twenty-fourth
round; docs/SECURITY.md).

hist38 made ``revoke`` of what the same key revoked already answer with that first record,
signing nothing. Its report then told of the reason given now, not of the record's: ``--json``
said ``"reason": "second"`` beside the envelope of a record whose signed reason is ``first``,
and the text line did not say the new reason was not recorded. A script keeping the reason it
reads from ``--json`` beside the envelope digest kept a reason the log does not hold.
"""

from __future__ import annotations

import json
from pathlib import Path

import testkit


def test_revoked_again_reports_the_first_records_reason(alice_home: Path) -> None:
    home = alice_home
    first = testkit.invoke(home, "revoke", "cart@1", "--reason", "first", "--key", "alice",
                           "--json")
    assert first.exit_code == 0, first.output
    again = testkit.invoke(home, "revoke", "cart@1", "--reason", "second", "--key", "alice",
                           "--json")
    assert again.exit_code == 0, again.output
    doc, was = json.loads(again.stdout), json.loads(first.stdout)
    assert doc["new"] is False and doc["envelope"] == was["envelope"]
    assert doc["reason"] == "first", doc  # the record's, not the words given now
    text = testkit.invoke(home, "revoke", "cart@1", "--reason", "third", "--key", "alice")
    assert text.exit_code == 0, text.output
    at = was["logIndex"]
    assert f"revoked already by alice (log index {at}: 'first')" in text.stderr, text.stderr
    assert "--reason 'third' is not recorded" in text.stderr, text.stderr
    same = testkit.invoke(home, "revoke", "cart@1", "--reason", "first", "--key", "alice")
    assert "not recorded" not in same.stderr, same.stderr  # the same reason: nothing lost
