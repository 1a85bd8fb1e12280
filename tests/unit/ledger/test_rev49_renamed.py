"""`catalog.renamed` gives a check the qualified name of the node it is about, not of another
node whose plain start is a prefix of its own (rev49 finding 3).

A refusal's lines name an imported record after a clash by its origin-qualified name (out50):
a check ``dataset grid@1: approvals`` is the vendor's ``grid@1``'s. A signed name is its
signer's text: a dataset named ``grid@1: base`` (version 2) has checks that start
``dataset grid@1: base@2:``, which start ``dataset grid@1:`` too, and they were named as the
vendor's ``grid@1``'s: ``dataset vendor+…+grid@1: base@2: approvals: …``.
docs/SECURITY.md, "Review of 2026-12-07, thirty-seventh round (rev49)".
"""

from __future__ import annotations

from trajledger.ledger.catalog import renamed
from trajledger.verify.report import Edge, Node, Report

QUALIFIED = "vendor+abcd1234+grid@1"


def _report() -> tuple[Report, str]:
    decision = Node("admission:x", "admission")
    grid = Node("sha256:" + "a" * 64, "dataset", name="grid", version="1")
    other = Node("sha256:" + "b" * 64, "dataset", name="grid@1: base", version="2")
    decision.fail("dataset grid@1: base@2: approvals", "no approval for purpose train")
    decision.fail("dataset grid@1: approvals", "no approval for purpose eval")
    nodes = {n.id: n for n in (decision, grid, other)}
    edges = [Edge(decision.id, grid.id, "dataset"), Edge(decision.id, other.id, "dataset")]
    return Report(decision.id, [decision.id], nodes, edges), grid.id


def test_a_check_of_a_node_whose_name_extends_anothers_keeps_its_own_name() -> None:
    report, grid = _report()
    assert renamed(report, {grid: QUALIFIED}).failures() == [
        "admission > dataset grid@1: base@2: approvals: no approval for purpose train",
        f"admission > dataset {QUALIFIED}: approvals: no approval for purpose eval"]


def test_the_longer_node_renamed_is_named_so() -> None:
    report, _grid = _report()
    other = next(n.id for n in report.nodes.values() if n.name == "grid@1: base")
    assert renamed(report, {other: "vendor+abcd1234+grid@1: base@2"}).failures() == [
        "admission > dataset vendor+abcd1234+grid@1: base@2: approvals: no approval for "
        "purpose train",
        "admission > dataset grid@1: approvals: no approval for purpose eval"]
