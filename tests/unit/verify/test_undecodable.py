"""One table for a lone surrogate, wherever trajledger and its verifier print one (rev39).

`verify.nodes.UNDECODABLE` is the table (a byte that is not UTF-8, ``os.fsdecode``'s
``\\udcfd``, shown as ``\\xfd``; any other lone surrogate as ``\\udXXX``). There were three
copies of it (``nodes.HIDDEN``'s part, ``report_json._UNDECODABLE``, ``_platform.UNDECODABLE``);
``_platform`` stands below ``verify/`` and computes the rule in its stream error handler, held
equal to the table in tests/unit/test_platform.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import trajledger
from trajledger.ledger import clikit
from trajledger.verify.nodes import HIDDEN, NAMED, UNDECODABLE
from trajledger.verify.report_json import dumps, strict

SURROGATES = [chr(c) for c in range(0xD800, 0xE000)]


def test_the_table_shows_a_byte_as_that_byte_and_any_other_surrogate_as_its_escape() -> None:
    assert len(UNDECODABLE) == 2048
    assert "b\udcfdx".translate(UNDECODABLE) == "b\\xfdx"
    assert "\ud800\udc7f\udd00\udfff".translate(UNDECODABLE) == "\\ud800\\udc7f\\udd00\\udfff"
    for byte in range(128, 256):
        assert bytes([byte]).decode("utf-8", "surrogateescape").translate(UNDECODABLE) == \
            bytes([byte]).decode("ascii", "backslashreplace")


def test_a_report_line_and_a_signed_name_show_it_as_the_table() -> None:
    for c in SURROGATES:
        assert c.translate(HIDDEN) == UNDECODABLE[ord(c)]
        assert c.translate(NAMED) == UNDECODABLE[ord(c)]


def test_both_json_forms_print_it_as_the_table(capsys: object) -> None:
    doc = {"b\udcfdx": ["\ud800", {"n": "a\udcffb"}], "plain": 1}
    clikit.emit_json(doc)
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert out == dumps(doc) + "\n"
    assert json.loads(out) == strict(doc) == {"b\\xfdx": ["\\ud800", {"n": "a\\xffb"}], "plain": 1}


def test_no_other_copy_of_the_table_is_made() -> None:
    """The rule written out (``0xDC80``) only in the table and in ``_platform``'s handler."""
    root = Path(trajledger.__file__).parent
    where = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                   if re.search(r"0x[dD][cC]80", p.read_text(encoding="utf-8")))
    assert where == ["_platform.py", "verify/nodes.py"]
