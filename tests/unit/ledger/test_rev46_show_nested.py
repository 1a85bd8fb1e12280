"""``show REF`` of a record whose signed predicate nests some hundreds deep (a vendor's batch,
its ``source`` an object of objects: the log takes it, ``verify`` passes it) printed its lines
up to the predicate, then ``BUG: RecursionError``, exit 4 (rev46 finding 4: out47's `elided`,
one Python call a level); now every line, as ``--json`` does. docs/SECURITY.md, "Review of
2026-12-07, thirty-fourth round (rev46)"."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from testkit import new_runner

from trajledger import Ledger
from trajledger.ledger.record import record_files
from trajledger.ledger.show import elided
from trajledger.runner.admission import admit
from trajledger.runner.cli import main
from trajledger.verify import predicates


def test_a_deeply_nested_predicate_is_shown(chat_home: Path, tmp_path: Path) -> None:
    ledger = Ledger.open(chat_home)
    honest = admit(ledger, "chat@1", ledger.policy()).batches[0]
    steps, episodes = tmp_path / "steps.parquet", tmp_path / "episodes.parquet"
    out = io.BytesIO()  # (other bytes than the honest batch's: another batch)
    pq.write_table(pq.read_table(pa.BufferReader(honest.files["steps.parquet"])), out,
                   compression="gzip")
    steps.write_bytes(out.getvalue())
    episodes.write_bytes(honest.files["episodes.parquet"])
    predicate = {k: v for k, v in honest.predicate.to_json().items()
                 if k not in ("manifest", "features")}
    deep: dict[str, object] = {"end": True}
    for _ in range(800):
        deep = {"a": deep}
    predicate["source"] = deep
    record_files(ledger, {"steps.parquet": steps, "episodes.parquet": episodes},
                 ledger.keys.signer("vendor"), predicates.ROLLOUT_BATCH, predicate, name="deep")
    r = new_runner().invoke(main, ["--ledger", str(chat_home), "show", "deep"])
    assert r.exit_code == 0, r.stderr
    assert '    source: {"a": {"a": ' in r.stdout and '{"end": true}' + "}" * 800 in r.stdout
    assert "\n  file        steps.parquet  " in r.stdout  # the lines after the predicate


def test_elided_keeps_the_order_and_elides_only_carried_content() -> None:
    p = {"z": [1, {"name": "lock", "content": "QQ==", "b": [{"name": 2, "content": "x"}]}],
         "content": "kept", "a": None}
    assert elided(p) == {"z": [1, {"name": "lock", "content": "(carried: see its 'carries' "
                                   "line)", "b": [{"name": 2, "content": "x"}]}],
                         "content": "kept", "a": None}
    assert list(elided(p)) == ["z", "content", "a"]
