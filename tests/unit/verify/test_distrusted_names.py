"""``held_out_line`` names a distrusted holdout by its signed name escaped as report labels are
(`verify.nodes.NAMED`; rev33's Left, left37): it escaped control and bidi characters only
(through the report's ``HIDDEN``), so a name with look-alike parentheses imitating a digest,
or invisible characters, reached the ``FAIL:`` line as it was signed."""

from __future__ import annotations

from typing import Any

import pytest

from trajledger.verify import distrusted
from trajledger.verify.judge import RecordFailure
from trajledger.verify.predicates import Dataset

BATCH = "sha256:" + "c" * 64


@pytest.mark.parametrize("name", ["h \uff08sha256:" + "ab" * 32 + "\uff09\u2063",
                                  "h (sha256:" + "ab" * 32 + ")\u00ad"])
def test_a_distrusted_holdouts_name_is_escaped_as_a_label(monkeypatch: pytest.MonkeyPatch,
                                                          name: str) -> None:
    ds = Dataset(name=name, version="1", split="holdout", batches=(BATCH,))
    monkeypatch.setattr(distrusted, "distrusted_holdout", lambda *_a: ds)
    walk: Any = object()
    line = distrusted.held_out_line(walk, 8, BATCH, RecordFailure(8, "no signature", False))
    assert line is not None, line
    name_shown = line.split(" is in holdout dataset ")[1].split(" (log index 8)")[0]
    assert name_shown.isascii() and "sha256:" + "ab" * 32 + "\\u" in name_shown, line
    assert "(sha256:" not in line, line  # its parentheses escaped too
