"""The kinds a log entry may carry: one closed set in the entry encoding (verify/log_entry.py and
its JSON Schema), each described once by the kind registry (verify/kinds.py)."""

from __future__ import annotations

import json
from pathlib import Path

from trajledger.verify import kinds, log_entry

SCHEMA = Path(__file__).resolve().parents[3] / "schemas" / "log-entry.v1.schema.json"


def test_the_registry_describes_exactly_the_kinds_an_entry_may_carry() -> None:
    assert set(kinds.KINDS) == log_entry.KINDS
    enum = json.loads(SCHEMA.read_text())["properties"]["kind"]["enum"]
    assert sorted(enum) == sorted(log_entry.KINDS)
