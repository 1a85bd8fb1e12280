"""The kinds a log entry may carry: one closed set in the entry encoding (verify/log_entry.py and
its JSON Schema), each described once by the kind registry (verify/kinds.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from trajledger.ledger.record import KIND_BY_PREDICATE
from trajledger.verify import kinds, log_entry, predicates

SCHEMA = Path(__file__).resolve().parents[3] / "schemas" / "log-entry.v1.schema.json"


def test_the_registry_describes_exactly_the_kinds_an_entry_may_carry() -> None:
    assert set(kinds.KINDS) == log_entry.KINDS
    enum = json.loads(SCHEMA.read_text())["properties"]["kind"]["enum"]
    assert sorted(enum) == sorted(log_entry.KINDS)


def test_every_kind_names_its_predicate_types_and_each_resolves_to_its_class() -> None:
    """The registry names every predicate type of ``predicates.ALL`` once per kind (the
    checkpoint's SLSA type shared by none), and each resolves to the class declaring it."""
    declared = [t for k in kinds.KINDS.values() for t in k.predicate_types]
    assert sorted(declared) == sorted(predicates.ALL)
    for k in kinds.KINDS.values():
        first = kinds.predicate_class(k.predicate_types[0])
        for t in k.predicate_types:
            cls = kinds.predicate_class(t)
            assert t == cls.TYPE and issubclass(cls, first)
            assert KIND_BY_PREDICATE[t] == k.name


def test_the_predicates_a_checkpoints_lineage_does_not_hold_load_on_first_use() -> None:
    """Importing the registry loads none of ``other_predicates``; reading an evaluation (its
    first use) does, and reads it strictly."""
    code = textwrap.dedent(f"""
        import sys
        from trajledger.verify import kinds
        from trajledger.verify.errors import FormatError
        from trajledger.verify.statement import Statement, Subject
        assert "trajledger.verify.other_predicates" not in sys.modules
        st = Statement((Subject("e", "a" * 64),), {predicates.EVALUATION!r}, {{}})
        try:
            kinds.KINDS["evaluation"].read(st, "evaluation")
        except FormatError as e:
            print(e)
        assert "trajledger.verify.other_predicates" in sys.modules
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "evaluation (evaluation/v1): result is missing"
