"""Watching a log (issue 13): ``monitor`` over HTTP against reading the same tiles from disk.

Builds a log of N entries (default 100,000; appended in group commits of 10,000 entries whose
envelope digests are synthetic: a monitor checks the tree, not what entries name), serves it
with ``LogServer`` on 127.0.0.1, and times, in one run:

- ``first contact``: ``ledger.monitor.monitor`` with an empty state (checkpoint, signature, the
  root rebuilt from the tiles);
- ``update``: after K more entries (default 1,000), the next ``monitor`` (root plus the
  consistency proof from the tiles);
- the baseline of each: the same computation (``verify_checkpoint``, ``TileReader.root``,
  ``consistency_proof``, ``check_consistent``) reading the tiles straight from the log
  directory, no HTTP, no state.

Each is repeated ``--repeat`` times (default 7, a fresh state directory each time) and the
median reported with the number of resources fetched. The point: the cost is O(log n) tiles,
independent of the log's size beyond that, and HTTP adds a constant per tile.

Usage::

    python bench/monitor_bench.py [--entries 100000] [--more 1000] [--repeat 7] [--markdown]
    python bench/monitor_bench.py --quick    (tiny sizes: tests/bench checks the script runs)

Not a test: only ``--quick`` runs in CI (tests/bench/test_bench_smoke.py).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def _grow(ledger: object, start: int, count: int, keyid: str) -> None:
    from trajledger.ledger.log import EntrySpec

    specs = []
    for i in range(start, start + count):
        d = "sha256:" + hashlib.sha256(str(i).encode()).hexdigest()
        specs.append(EntrySpec("files", d, d, (keyid,)))
    for j in range(0, len(specs), 10_000):
        ledger.log.append(specs[j : j + 10_000])  # type: ignore[attr-defined]


def _median(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    times, fetched = [], 0
    for _ in range(repeat):
        t = time.perf_counter()
        fetched = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), fetched


def main() -> None:
    from trajledger import Ledger
    from trajledger.ledger.monitor import HttpLog, monitor
    from trajledger.ledger.serve import LogServer
    from trajledger.ledger.trust_state import TrustState
    from trajledger.verify.checkpoint import verify_checkpoint
    from trajledger.verify.consistency import check_consistent
    from trajledger.verify.note import verifier_from_vkey
    from trajledger.verify.tiles import TileReader

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--more", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args()
    if args.quick:
        args.entries, args.more, args.repeat = 300, 50, 1

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["TRAJLEDGER_STATE_DIR"] = str(root / "state")
        ledger = Ledger.init(root / "vendor", origin="bench.example/log")
        key = ledger.keys.create("vendor", encrypt=ledger.keys.require_encrypted)
        t = time.perf_counter()
        _grow(ledger, 0, args.entries, key.keyid)
        build = time.perf_counter() - t
        log_dir = ledger.log.directory
        vkey = str(ledger.log.vkey)
        verifier = verifier_from_vkey(vkey)
        server = LogServer(log_dir)
        server.start()
        try:
            old_note = ledger.log.checkpoint_bytes()

            def disk(path: str) -> bytes:
                return (log_dir / path).read_bytes()

            def first_http() -> int:
                state = TrustState.open(vkey, root / f"s-{time.perf_counter_ns()}")
                log = HttpLog(server.url)
                monitor(log, vkey, state=state)
                return log.fetched

            def first_disk() -> int:
                fetched = [0]

                def get(p: str) -> bytes:
                    fetched[0] += 1
                    return disk(p)

                cp = verify_checkpoint(get("checkpoint"), verifier)
                assert TileReader(get, cp.size).root() == cp.root
                return fetched[0]

            first = _median(first_http, args.repeat)
            first_base = _median(first_disk, args.repeat)
            _grow(ledger, args.entries, args.more, key.keyid)

            def update_http() -> int:
                state = TrustState.open(vkey, root / f"u-{time.perf_counter_ns()}")
                state.advance_floor(old_note, what="bench")
                log = HttpLog(server.url)
                r = monitor(log, vkey, state=state)
                assert r.advanced
                return log.fetched

            def update_disk() -> int:
                fetched = [0]

                def get(p: str) -> bytes:
                    fetched[0] += 1
                    return disk(p)

                old = verify_checkpoint(old_note, verifier)
                cp = verify_checkpoint(get("checkpoint"), verifier)
                reader = TileReader(get, cp.size)
                assert reader.root() == cp.root
                check_consistent(old, cp, reader.consistency_proof(old.size, cp.size))
                return fetched[0]

            update = _median(update_http, args.repeat)
            update_base = _median(update_disk, args.repeat)
        finally:
            server.stop()

    rows = [
        ("first contact", first, first_base),
        (f"update (+{args.more})", update, update_base),
    ]
    if args.markdown:
        print(f"log of {args.entries:,} entries (built in {build:.1f} s), median of {args.repeat}")
        print()
        print("| monitor | over HTTP | tiles fetched | from disk (baseline) | ratio |")
        print("|---|---|---|---|---|")
        for name, (t, n), (b, _) in rows:
            print(f"| {name} | {t * 1000:.1f} ms | {n} | {b * 1000:.1f} ms | {t / b:.2f}x |")
    else:
        for name, (t, n), (b, _) in rows:
            print(f"{name:20} http {t * 1000:8.1f} ms ({n} fetched)  disk {b * 1000:8.1f} ms  "
                  f"{t / b:.2f}x")


if __name__ == "__main__":
    main()
