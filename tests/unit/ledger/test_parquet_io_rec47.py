"""`record`'s input read ahead by bytes, not only items (rec47 finding 1,
``rollouts/parquet_io._prefetch``): rows of 64 MiB tensors were read three ahead of the one
being validated and written.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pyarrow as pa

from trajledger.ledger.rollouts.chunks import CHUNK_BYTES
from trajledger.ledger.rollouts.parquet_io import _prefetch


def test_the_input_is_read_ahead_by_bytes_not_only_items() -> None:
    """Items of `CHUNK_BYTES` each: while the first is being used, no more than one other is
    read (three were: two queued and one held by the reading thread)."""
    read: list[int] = []
    lock = threading.Lock()

    def items():  # type: ignore[no-untyped-def]
        for i in range(6):
            with lock:
                read.append(i)
            yield pa.RecordBatch.from_arrays([pa.array(np.zeros(CHUNK_BYTES // 8))], ["x"])

    it = _prefetch(items())
    next(it)
    time.sleep(0.5)  # (time for the reading thread to run ahead as far as it may)
    with lock:
        ahead = len(read) - 1
    assert ahead <= 1, f"{ahead} items read ahead"
    assert sum(1 for _ in it) == 5
