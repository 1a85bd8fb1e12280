"""End to end: what a sealed suite's published near-duplicate sketches give away (fourteenth
review round, rev26; docs/SECURITY.md "Review of 2026-12-04, fourteenth round (rev26)").

A sealed batch's record publishes, per episode, a 128-bucket count sketch of its numeric steps
(or of its task text), so that the admission gate needs no key. Every (step, feature) goes to
one bucket with one sign, both public (SHAKE-256 of its position): an episode of few values
leaves most of them alone in their bucket, and whoever reads the record reads them back. The
docs said the sketch only lets one test a candidate for similarity. `record --seal` now names
the episodes whose sketches are that sparse, in one WARNING line; the record is made as before.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from test_evaluations import POLICY  # tests/e2e is on sys.path (its conftest)
from test_runner_cli import expect, run


def steps(path: Path, episodes: int, length: int) -> Path:
    """Rollouts of ``episodes`` episodes of ``length`` steps: obs of 3 values, one action, one
    reward per step, every value distinct and none zero."""
    rows = [{"episode_id": f"ep-{e}", "step": s, "obs": [1 + e + s / 8, 2.5 + s, 0.75 * (e + 1)],
             "action": [float(1 + (e + s) % 3)], "reward": 1.0 + (s % 5) / 4,
             "terminated": s == length - 1, "truncated": False}
            for e in range(episodes) for s in range(length)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    from trajledger import Ledger

    home = tmp_path / "home"
    ledger = Ledger.init(home, origin="test/sealed-sketches")
    for k in ("vendor", "approver", "trainer", "evaluator"):
        ledger.keys.create(k, encrypt=False)
    ledger.keys.create_encryption_key("evaluator", encrypt=False)  # the policy's evaluator
    (home / "policy.toml").write_text(POLICY.format(vkey=ledger.log.vkey))
    ledger.set_policy(home / "policy.toml", keys=["approver"])
    ledger.register_environment("grid", "1", key="vendor", source="sim")
    return home


def published(home: Path, digest: str) -> list[dict[str, object]]:
    """The episodes a sealed batch's record publishes (``sealed.episodes``)."""
    from trajledger import Ledger
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.log_entry import LogEntry

    ledger = Ledger.open(home)
    entry = next(e for e in map(LogEntry.from_bytes, ledger.log.entries(0, ledger.log.size))
                 if e.subject == digest and e.kind == "rollout-batch")
    body = json.loads(Envelope.from_bytes(ledger.store.get(entry.envelope)).payload)
    return list(body["predicate"]["sealed"]["episodes"])


def read_back(sketch: str, length: int) -> dict[tuple[int, int], float]:
    """What anyone who reads the record gets from one numeric sketch: each (step, feature) of
    an obs of 3 values, one action and the reward alone in its bucket, its value divided by the
    episode's norm (the sketch has unit length: one value known gives the scale)."""
    # The public tables, as the features' definition gives them to anyone (one byte per step
    # and feature of 21: the low 7 bits the bucket, the high bit the sign).
    raw = np.frombuffer(hashlib.shake_256(b"trajledger/features/v3/numeric/0").digest(256 * 21),
                        np.uint8).reshape(256, 21)  # fmt: skip
    buckets, signs = raw & 127, 1.0 - 2.0 * (raw >> 7)
    v = np.frombuffer(base64.b64decode(sketch), "<f4").astype(np.float64)
    features = [(t, j) for t in range(length) for j in (0, 1, 2, 16, 20)]
    taken = [int(buckets[t, j]) for t, j in features]
    return {f: signs[f] * v[b] for f, b in zip(features, taken, strict=True)
            if taken.count(b) == 1}  # fmt: skip


def test_a_short_sealed_episode_is_named_as_readable_from_its_published_sketch(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    """Four sealed episodes of 6 steps (30 values each): the sketch the record publishes gives
    most of each episode's values back exactly, with no key; `record --seal` says so, naming
    how many episodes; a batch of long episodes (600 values each) is sealed without a word."""
    short = steps(tmp_path / "short.parquet", 4, 6)
    r = run(runner, home, "record", short, "--env", "grid@1", "--policy", "p", "--name",
            "short-holdout", "--seal", "--key", "vendor")  # fmt: skip
    expect(r, 0)
    warnings = [x for x in r.stderr.splitlines() if x.startswith("WARNING:")]
    assert warnings == [
        "WARNING: sealed batch short-holdout: 4 of its 4 episode(s) are short: the "
        "near-duplicate sketches its record publishes (so that the gate needs no key) leave at "
        "least 32 of their 128 buckets empty, and whoever reads the ledger or a bundle of it "
        "can read many of their values back (each value alone in its bucket: a numeric step's "
        "obs, action or reward; a text's words by trying a dictionary); seal longer episodes, "
        "or keep the suite out of a shared ledger (docs/SECURITY.md, section 8)"
    ], r.stderr
    # What the warning says, measured: the values alone in their bucket are the data.
    table = pq.read_table(short).to_pylist()
    for ep in published(home, r.stdout.strip().splitlines()[-1]):
        rows = [x for x in table if x["episode_id"] == ep["episodeId"]]
        truth = {(t, j): v for t, row in enumerate(rows) for j, v in
                 zip((0, 1, 2, 16, 20), [*row["obs"], *row["action"], row["reward"]],
                     strict=True)}  # fmt: skip
        got = read_back(str(ep["sketch"]), 6)
        assert len(got) >= 20, len(got)  # of 30
        known = next(iter(got))  # the one value a reader must know, or guess
        scale = truth[known] / got[known]
        assert all(abs(x * scale - truth[f]) < 1e-4 for f, x in got.items()), (got, truth)
    long = steps(tmp_path / "long.parquet", 2, 120)
    r = run(runner, home, "record", long, "--env", "grid@1", "--policy", "p", "--name",
            "long-holdout", "--seal", "--key", "vendor")  # fmt: skip
    expect(r, 0)
    assert "WARNING" not in r.stderr, r.stderr
