"""`record`'s memory under large list rows (rec47 finding 1): a row group of four 64 MiB
tensors, legal under `MAX_ROW_BYTES`, peaked at about 6 x its values. Each copy found is taken
out here: the features' join of an open episode's batches and the join of its bytes
(``episode_features``) and a row group read as one batch when no row of it had to be counted
(``parquet_read``); the input read three rows ahead: test_parquet_io_rec47.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trajledger.ledger.rollouts.chunks import CHUNK_BYTES
from trajledger.ledger.rollouts.parquet_read import iter_parquet

_FEATURES = r"""
import resource, sys
import numpy as np, pyarrow as pa
from trajledger.ledger import episode_features as ef
from trajledger.ledger.rollouts.dedup import episode_fingerprints

def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

n = 4 << 20  # 32 MiB of float64 a step; one episode of four steps, a batch each
values = np.full(4 * n, 0.5)
obs = pa.ListArray.from_arrays(pa.array(np.arange(5) * n, pa.int32()), pa.array(values))
t = pa.table({"episode_id": ["e"] * 4, "step": pa.array(range(4), pa.int64()), "obs": obs,
              "reward": [1.0] * 4})
batches = t.to_batches(1)
ef.FeatureStream(sys.argv[1]).add(t.slice(0, 1))  # (imports and first use paid before)
before = rss()
stream = ef.FeatureStream(sys.argv[1])
got = [c for b in batches if (c := stream.add(b)) is not None]
got.append(stream.finish())
extra = rss() - before
(chunk,) = [c for c in got if c is not None]
assert chunk.fingerprints == [episode_fingerprints(t)["e"]], "fingerprint"
ef.SPILL_BYTES = 1 << 62
want = ef.whole_episodes(t.combine_chunks().to_batches()[0])
assert chunk.vectors.tobytes() == want.vectors.tobytes(), "vector"
print(extra >> 20)
"""


def test_an_open_episode_of_large_steps_is_not_joined_and_copied(tmp_path: Path) -> None:
    """One episode of four steps of 32 MiB (128 MiB, a batch a step): its features took 256
    MiB more than its steps (the batches joined into one array, then each episode's bytes
    joined to hash them); now under 64 MiB more (past `SPILL_BYTES` it is taken in pieces,
    a batch at a time), with the fingerprint `dedup` gives and the vector of all its rows at
    once."""
    run = subprocess.run([sys.executable, "-c", _FEATURES, str(tmp_path)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    extra = int(run.stdout.split()[-1])
    assert extra < 64, f"{extra} MiB more than the episode's steps"
    assert not list(tmp_path.iterdir())  # the spill removed


def test_a_row_group_of_large_rows_is_read_in_batches_of_about_chunk_bytes(
    tmp_path: Path,
) -> None:
    """A row group of four rows of 4M float64 (128 MiB, under `MAX_ROW_BYTES`: not counted
    row by row) was one batch of 128 MiB; it is read in batches of its rows' mean, about
    `CHUNK_BYTES` each."""
    n = 4 << 20
    obs = pa.ListArray.from_arrays(pa.array(np.arange(5) * n, pa.int32()),
                                   pa.array(np.zeros(4 * n)))
    path = tmp_path / "steps.parquet"
    pq.write_table(pa.table({"obs": obs}), path, compression="zstd", row_group_size=4)
    sizes = [len(pc.list_flatten(b.column("obs"))) * 8 for b in iter_parquet(path)]
    assert sum(sizes) == 4 * n * 8
    assert len(sizes) == 2 and max(sizes) <= CHUNK_BYTES
