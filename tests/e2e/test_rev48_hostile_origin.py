"""An imported log's origin in the report trees' qualified names (out49) and the name-clash
lines: a log's origin is its owner's text (a vkey name: no space, no ``+``), and a new log's
is refused off the grammar (`names.check_origin`) but another's only warned of at import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_out48_reported
from testkit import Party

from trajledger.ledger import names

ORIGIN = "v<img/src=x/onerror=alert(1)>];x-->y'(sha256:abab)\u202e"
"""An origin that opens HTML, holds Mermaid's arrow, names a digest and reorders a line (a C0
control character the checkpoint format refuses; a ``"`` the buyer's policy file, which names
the log's vkey)."""


def test_a_hostile_origin_in_qualified_names_is_escaped_in_every_form(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made_as = test_out48_reported.vendor_only

    def vendor_only(vendor: Party, root: Path) -> None:  # (its ledger under ORIGIN)
        real = vendor.run
        vendor.run = lambda *args, code=0: real(  # type: ignore[method-assign]
            *(ORIGIN if a == "vendor.example/log" else a for a in args), code=code)
        with monkeypatch.context() as m:
            m.setattr(names, "check_origin", lambda value: value)
            made_as(vendor, root)

    monkeypatch.setattr(test_out48_reported, "vendor_only", vendor_only)
    _vendor, buyer, batch, theirs, made = test_out48_reported.clashing(tmp_path)
    assert "\u202e" not in made.stderr, made.stderr
    doc = json.loads(buyer.run("lineage", theirs, "--json").stdout)
    (name,) = [n["qualifiedName"] for n in doc["nodes"] if n["id"] == theirs]
    assert name.startswith(ORIGIN), name
    assert json.loads(buyer.run("show", name, "--json").stdout)["digest"] == theirs
    for command, ref in (("lineage", theirs), ("impact", batch)):
        text = buyer.run(command, ref).stdout
        assert "\u202e" not in text and "(sha256:abab" not in text, text
        html = buyer.run(command, ref, "--format", "html").stdout
        assert "<img" not in html, html
        for fmt in ("mermaid", "dot"):
            out = buyer.run(command, ref, "--format", fmt).stdout
            assert "\u202e" not in out and "+grid@1" in out, (fmt, out)
