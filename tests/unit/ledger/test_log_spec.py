"""``ledger.log.spec``: the one-record rule's comparison of two records of one digest
(`differences`)."""

from __future__ import annotations

import json
from typing import Any

from trajledger.ledger.log.spec import differences
from trajledger.verify.statement import Statement


def test_two_records_of_one_digest_are_compared_by_their_signed_metadata() -> None:
    """What two records of one artifact digest must share (issue 18): all but times; a
    checkpoint, its dataset, parent, trainer, config and seed (not its name)."""

    def st(pred: dict[str, Any], name: str = "b") -> Statement:
        return Statement.from_bytes(json.dumps({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": name, "digest": {"sha256": "1" * 64}}],
            "predicateType": "https://x.example/p", "predicate": pred}).encode())

    assert differences("rollout-batch", st({"licence": "MIT"}), st({"licence": "MIT"})) == []
    assert differences("rollout-batch", st({"licence": "MIT"}), st({"licence": "x"}, "c")) == [
        "licence: 'MIT' vs 'x'", "name: 'b' vs 'c'"]

    def ckpt(seed: int, version: str, parent: str = "2" * 64) -> Statement:
        return st({"buildDefinition": {
            "externalParameters": {"name": "m", "version": version, "dataset": "d@1",
                                   "trainer": "bc", "config": {}, "seed": seed},
            "resolvedDependencies": [{"digest": {"sha256": parent},
                                      "annotations": {"role": "base-checkpoint"}}]},
            "runDetails": {"metadata": {"startedOn": version}}}, f"m@{version}")

    assert differences("checkpoint", ckpt(0, "1"), ckpt(0, "2")) == []
    assert differences("checkpoint", ckpt(0, "1"), ckpt(1, "1")) == ["seed: 0 vs 1"]
    assert differences("checkpoint", ckpt(0, "1"), ckpt(0, "1", "3" * 64)) == [
        f"parent: ['sha256:{'2' * 64}'] vs ['sha256:{'3' * 64}']"]
