"""Bytes that many checkpoint records claim, and other records of them (rev36, twenty-fourth
round; docs/SECURITY.md):
`verify.claims.judge_claims` judges at most `MAX_CLAIMS` of them one by one.

A hostile bundle may carry any number of records of one digest (its signer writes its own log
as it likes); each one's lineage was judged, a signature check and a walk apiece, and an edge
looked up in a list per dependency (quadratic in distinct dependencies). More than
`MAX_CLAIMS` fail the bytes by digest, none of them judged; by name they are counted.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trajledger.verify import claims
from trajledger.verify.claims import MAX_CLAIMS, judge_claims
from trajledger.verify.judge import Record, RecordFailure
from trajledger.verify.kinds import Dependency
from trajledger.verify.nodes import FAIL, INFO, OK, Node

DIGEST = "sha256:" + "ab" * 32


class Walk:
    """A walk whose records of ``DIGEST`` are ``n`` log indices, each record looked at
    counted (none verifies: each would fail the node)."""

    def __init__(self, n: int, failure: Record | RecordFailure | None = None) -> None:
        self.chosen: dict[str, int] = {}
        self.n = n
        self.looked: list[int] = []
        self.failure = failure or RecordFailure(0, "envelope missing", True)

    def records(self, subject: str, kind: str) -> list[int]:
        return list(range(self.n)) if subject == DIGEST else []

    def record(self, index: int) -> Record | RecordFailure:
        self.looked.append(index)
        return self.failure

    def artifact(self, digest: str, kind: str, *, follow: bool = True) -> Node:
        raise AssertionError("not reached")

    def dataset_use(self, node: Node, digest: str, use: Record | None, *,
                    purpose: str | None = None) -> None:
        raise AssertionError("not reached")


def judge(walk: Walk) -> Node:
    node = Node(DIGEST, "checkpoint")
    node.index = 0
    judge_claims(walk, node, [], [])
    return node


def test_up_to_the_bound_every_record_is_judged() -> None:
    walk = Walk(MAX_CLAIMS)
    node = judge(walk)
    assert walk.looked == list(range(1, MAX_CLAIMS))
    assert sum(c.status == FAIL for c in node.checks) == MAX_CLAIMS - 1


def test_more_records_than_the_bound_fail_the_bytes_unjudged() -> None:
    walk = Walk(MAX_CLAIMS + 1)
    node = judge(walk)
    assert walk.looked == []  # was every one of them
    [check] = node.checks
    assert check.status == FAIL and f"{MAX_CLAIMS + 1} checkpoint records" in check.detail


def test_by_name_they_are_counted_not_listed() -> None:
    walk = Walk(10 * MAX_CLAIMS)
    walk.chosen[DIGEST] = 0
    node = judge(walk)
    [check] = node.checks
    assert check.status == INFO and f"{10 * MAX_CLAIMS} checkpoint records" in check.detail


@pytest.mark.parametrize(("failure", "status"), [
    (RecordFailure(1, "no signature by a trusted key", False, "key:abcd:trainer"), INFO),
    (RecordFailure(1, "no signature by a trusted key", True, "key:abcd:trainer"), FAIL),
    (RecordFailure(1, "predicate type not allowed", False), FAIL),
], ids=["untrusted-key", "damaged", "other"])
def test_only_a_record_of_a_key_the_policy_does_not_hold_is_ignored(
        failure: RecordFailure, status: object) -> None:
    node = judge(Walk(2, failure))
    [check] = node.checks
    assert check.status == status, check


def test_another_record_built_on_its_own_bytes_fails_them(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """rev36: the identity record of bytes that names them as its own parent fails (the walk
    comes back to itself); another record of the bytes that did was judged OK, its edge from
    the bytes to themselves in the graph (an impact's walk listed them as their own child)."""
    dataset = "sha256:" + "cd" * 32
    deps = [Dependency("parent", DIGEST, "checkpoint"), Dependency("dataset", dataset, "dataset")]
    monkeypatch.setattr(claims, "KINDS", {"checkpoint": SimpleNamespace(
        dependencies=lambda predicate: deps)})
    monkeypatch.setattr(claims, "name_version", lambda kind, statement: ("c2", "1"))
    walk = Walk(2, Record(1, None, None, None, frozenset()))  # type: ignore[arg-type]
    walk.records = lambda subject, kind: [0, 1] if subject == DIGEST else [5]  # type: ignore
    walk.artifact = lambda digest, kind, follow=True: Node(digest, kind)  # type: ignore
    walk.dataset_use = lambda *a, **k: None  # type: ignore
    edges: list = []
    node = Node(DIGEST, "checkpoint")
    node.index = 0
    judge_claims(walk, node, edges, [])
    assert [c.status for c in node.checks if c.status != OK] == [FAIL], node.checks
    assert all(e.dst != DIGEST for e in edges), edges


@pytest.mark.parametrize("kind", ["checkpoint", "dataset", "rollout-batch"])
def test_the_identity_record_is_the_first_one_the_policy_believes_of_any_kind(
        kind: str) -> None:
    """The lead's third reading (twenty-fourth round): rev36's `claims.believed` chose the
    identity record past a first record signed only by a key the policy does not hold for a
    checkpoint only, while `judge_claims` ignores such a record of any kind: a dataset or a
    batch whose first record a stranger's (or a compromised) key signed failed by it. A damaged
    first record still stands (fail closed), and so does a first one when none is believed."""
    from trajledger.verify.lineage import LineageVerifier

    stranger = RecordFailure(0, "no signature by a trusted key", False, cause="key:ab:")
    damaged = RecordFailure(0, "envelope missing", True)
    mine = Record.__new__(Record)
    for records, want in [({0: stranger, 1: mine}, mine), ({0: damaged, 1: mine}, damaged),
                          ({0: stranger, 1: stranger}, stranger)]:
        walk = SimpleNamespace(chosen={}, records=lambda d, k, r=records: list(r),
                               record=lambda i, r=records: r[i])
        assert LineageVerifier.identity_record(walk, DIGEST, kind) is want  # type: ignore[arg-type]
