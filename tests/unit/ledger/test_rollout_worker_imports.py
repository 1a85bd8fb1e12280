"""A reader's worker imports what it uses (chat50, issue 21 item 5).

`reader_process` starts its workers with ``spawn``: each imports, before its first block, the
modules of the job it is given (`_map_block`, the recorder's features hook
`record_windows.given_features`). `batch_features` imported `verify.ledger_dir` at its top for
one function the workers never call; that brought the log's, checkpoints' and signatures'
modules and ``cryptography`` into every worker (about 0.03-0.05 CPU-s a worker, two workers a
`record`); `rollouts.parquet_read` and `record_windows` imported ``pyarrow.parquet`` at their
tops for reading files, which a worker never does, and with it ``pyarrow.fs``'s cloud file
systems and ``ssl``. The worker's job here is the recorder's, started as the reader starts it.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing

from trajledger.ledger.record_windows import given_features
from trajledger.ledger.rollouts import reader_process as rp
from trajledger.ledger.rollouts.chunks import ReaderOptions

UNUSED_IN_A_WORKER = ("cryptography", "trajledger.verify.ledger_dir", "trajledger.verify.keys",
                      "trajledger.verify.note", "pyarrow.parquet", "pyarrow.fs", "ssl")  # fmt: skip


def test_a_workers_chat_block_with_the_recorders_features_imports_no_unused_module(
) -> None:
    lines = "".join(json.dumps({"episode_id": f"e{n}", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": f"question {n}"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{n}", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": f"c{n}", "name": "f", "content": "ok"},
        {"role": "assistant", "content": f"answer {n}"}], "reward": n / 3}) + "\n"
        for n in range(20)).encode()  # fmt: skip
    opts = ReaderOptions(workers=2, features=given_features)
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                initializer=rp._worker_start) as pool:  # fmt: skip
        block = pool.submit(rp._map_block, "chat-jsonl", opts, 1, lines).result(timeout=120)
        modules = pool.submit(eval, "sorted(__import__('sys').modules)").result(timeout=60)
    assert block.chunk is not None and block.chunk.steps.num_rows == 100
    assert block.features is not None and len(block.features.features) == 20
    assert "trajledger.ledger.batch_features" in modules  # (the hook ran in this worker)
    imported = [m for m in modules if m.split(".")[0] == "cryptography"
                or m in UNUSED_IN_A_WORKER]  # fmt: skip
    assert imported == [], imported
