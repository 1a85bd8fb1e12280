"""``dataset create`` and the admission gate without the audit index (issue 21 item 1).

On a quickstart ledger, in a process of its own per command (forked from tests/preforked.py's
server, which has imported the command line, pyarrow and pandas but not lancedb): ``dataset
create`` of a holdout whose batch copies train episodes under other ids is refused (exit 1, one
``FAIL:`` line naming the episodes), a clean one is recorded, and ``admit`` of the trained
dataset passes its contamination check; none of them imports lancedb. ``stats``, which queries
the audit index, does (the check can tell).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import preforked
import pyarrow as pa
import pyarrow.parquet as pq
import tamperkit as tk

from trajledger import Ledger
from trajledger.ledger.artifacts import batch_files
from trajledger.ledger.catalog import Catalog

CHILD = """
import json, sys
from click.testing import CliRunner
from trajledger.runner.cli import main
r = CliRunner().invoke(main, sys.argv[1:])
print(json.dumps({"exit": r.exit_code, "stdout": r.stdout, "stderr": r.stderr,
                  "lancedb": any(m == "lancedb" or m.startswith("lancedb.") for m in sys.modules)}))
"""


def trajledger(q: tk.Quickstart, *args: str) -> dict[str, object]:
    """One command in a process of its own: its exit code, output, and whether lancedb
    loaded."""
    env = {**os.environ, "TRAJLEDGER_STATE_DIR": str(q.state),
           "TRAJLEDGER_PASSPHRASE": tk.PASSPHRASE}  # fmt: skip
    p = preforked.Script(CHILD, ["--ledger", str(q.home), *args], env=env)
    stdout, stderr = p.communicate(timeout=600)
    assert p.returncode == 0, stderr
    out: dict[str, object] = json.loads(stdout.strip().splitlines()[-1])
    return out


def test_dataset_create_and_the_gate_load_no_lancedb(tmp_path: Path) -> None:
    q = tk.build_quickstart(tmp_path)
    os.environ["TRAJLEDGER_STATE_DIR"] = str(q.state)
    try:
        ledger = Ledger.open(q.home)
        items = Catalog(ledger).items()
    finally:
        del os.environ["TRAJLEDGER_STATE_DIR"]
    train = next(i for i in items if i.kind == "rollout-batch" and i.name == "cartpole-random")
    # The train batch's steps again, every episode under another id: other bytes, same content.
    steps = pq.read_table(ledger.store.path_of(batch_files(ledger, train.digest)["steps.parquet"]))
    ids = pa.array(["copy-" + e for e in steps.column("episode_id").to_pylist()])
    copy = tmp_path / "copy.parquet"
    pq.write_table(steps.set_column(0, "episode_id", ids), copy)
    recorded = trajledger(q, "record", str(copy), "--env", "cartpole@1", "--policy", "random",
                          "--name", "copies", "--key", "vendor")  # fmt: skip
    assert recorded["exit"] == 0, recorded
    batch = str(recorded["stdout"]).strip()

    refused = trajledger(q, "dataset", "create", "leak", "--version", "1", "--split", "holdout",
                         "--batch", batch, "--key", "vendor")  # fmt: skip
    assert refused["exit"] == 1 and refused["lancedb"] is False, refused
    (line,) = str(refused["stderr"]).splitlines()
    assert line.startswith("FAIL: dataset leak@1 (holdout): ")
    assert "episode(s) exactly duplicate episodes of the other split: episode copy-" in line
    assert f"is an exact duplicate of train episode {steps.column('episode_id')[0]}" in line

    hold = next(i for i in items if i.kind == "rollout-batch" and i.name == "cartpole-holdout")
    made = trajledger(q, "dataset", "create", "more-holdout", "--version", "1", "--split",
                      "holdout", "--batch", hold.digest, "--key", "vendor")  # fmt: skip
    assert made["exit"] == 0 and made["lancedb"] is False, made
    assert str(made["stderr"]).endswith(" recorded at log index 21\n")

    admitted = trajledger(q, "admit", q.dataset, "--json")
    assert admitted["exit"] == 0 and admitted["lancedb"] is False, admitted
    assert json.loads(str(admitted["stdout"]))["admitted"] is True

    stats = trajledger(q, "stats", q.dataset)
    assert stats["exit"] == 0 and stats["lancedb"] is True, stats
