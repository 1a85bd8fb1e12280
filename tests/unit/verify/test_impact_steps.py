"""`verify.impact`'s walk over an artifact many records claim, counted in steps (rev37,
twenty-fifth round; rev36's Left): each record of a referrer's bytes is a referrer
(`verify.claims.judged`), and `_downstream` asked for the list of those records (and the
referrer's dependencies) once per record: N records of one checkpoint naming a dataset cost
N x N list steps in ``impact`` of that dataset. A hostile bundle may carry any number of them.
The steps are counted as the items `LineageVerifier.records` and `dependencies` hand back,
not timed.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trajledger.verify import impact
from trajledger.verify.judge import Record
from trajledger.verify.kinds import Dependency
from trajledger.verify.nodes import Node

DATASET = "sha256:" + "da" * 32
CHECKPOINT = "sha256:" + "c0" * 32


class Verifier:
    """A verifier whose log holds one dataset record (index 0) and ``n`` checkpoint records
    of the same bytes naming it (1 to n), each verifying; ``steps`` counts the items handed
    back by `records` and `dependencies`."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.steps = 0
        self.chosen: dict[str, int] = {}
        self.nodes: dict[str, Node] = {}
        self.index = SimpleNamespace(referrers=self.referrers)
        self.record_ = Record.__new__(Record)

    def referrers(self, digest: str) -> list[tuple[int, str]]:
        return [(i, "dataset") for i in range(1, self.n + 1)] if digest == DATASET else []

    def entry(self, i: int) -> SimpleNamespace:
        return SimpleNamespace(subject=CHECKPOINT if i else DATASET,
                               kind="checkpoint" if i else "dataset")

    def records(self, subject: str, kind: str) -> list[int]:
        found = list(range(1, self.n + 1)) if subject == CHECKPOINT else [0]
        self.steps += len(found)
        return found

    def dependencies(self, digest: str) -> list[Dependency]:
        found = [Dependency("dataset", DATASET, "dataset")] if digest == CHECKPOINT else []
        self.steps += len(found)
        return found

    def node(self, digest: str) -> Node:
        return self.nodes[digest]

    def artifact(self, digest: str, kind: str, *, follow: bool = True) -> Node:
        if digest not in self.nodes:
            self.nodes[digest] = Node(digest, kind)
            self.nodes[digest].index = 1 if digest == CHECKPOINT else 0
        return self.nodes[digest]

    def record(self, i: int) -> Record:
        return self.record_

    def identity_record(self, digest: str, kind: str) -> None:
        return None  # (`_judge_use`, `_judge_rules`: nothing more to judge here)


@pytest.mark.parametrize("n", [8, 64, 512])
def test_the_records_of_one_referrer_are_listed_once_per_walk(n: int) -> None:
    v = Verifier(n)
    down = impact._downstream(v, DATASET, "dataset")  # type: ignore[arg-type]
    assert len(down) == n  # every record of the checkpoint is a referrer (`claims.judged`)
    assert {(e.src, e.dst, e.role) for e in down} == {(CHECKPOINT, DATASET, "dataset")}
    # Linear: the dataset's own record, then the checkpoint's records and its one
    # dependency, once each (was about 2 x n x n: 8,257 at n = 64, on 2af7bb98).
    assert v.steps <= 2 * n + 8, v.steps
