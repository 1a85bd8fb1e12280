"""What a log read again from its first entry costs (gap39: records another log brought after it
was applied) against the daily ``monitor`` of it.

A buyer applied a vendor's log of N entries (one ``monitor`` of it, untimed); the vendor then
logs 1,000 entries more. The buyer's next ``trajledger monitor URL --vkey V --key approver``
reads those 1,000 (``daily``), unless an import brought meanwhile a record signed by the
vendor's key that the buyer did not hold (`first_contact.brought`, called here with one of the
vendor's entries): then it reads all N + 1,000 from the first entry (``reread``), once. Each a
process on a fresh copy of the buyer and its state; ``--baseline DIR`` (a worktree of another
commit) runs ``daily`` and ``reread`` there too, in the same run (wall, the child's CPU, its
peak RSS: `first_contact_bench.run`).

Usage::

    python bench/reread_bench.py [--entries 200000] [--baseline DIR] [--repeat 2] [--quick]

``--quick`` (N = 50, one run, no baseline, ``reread`` only: ``daily`` runs the same lines but
the marking; the set-up's commands in the script's process, `first_contact_bench.setup`) only
checks the script runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from first_contact_bench import grow, run, serve, setup, vendor_and_buyer, vkey

HERE = str(Path(__file__).resolve().parents[1])
"""This tree: the children run it (`run` drops the caller's ``PYTHONPATH``)."""


def mark(home: Path, state: Path, vendor: Path, vstate: Path, index: int) -> None:
    """`first_contact.brought` of the vendor's entry ``index`` into the buyer ``home``: as if a
    lab's bundle had brought a record the vendor's key signed."""
    from trajledger import Ledger
    from trajledger.ledger.first_contact import applied_for, brought
    from trajledger.ledger.trust_state import TrustState

    os.environ["TRAJLEDGER_STATE_DIR"] = str(vstate)
    own = Ledger.open(vendor)
    raw, vendor_vkey = own.trust_state().entry_bytes(index), own.trust_state().vkey
    assert raw is not None
    os.environ["TRAJLEDGER_STATE_DIR"] = str(state)
    brought(Ledger.open(home), [raw], ())
    assert applied_for(TrustState.open(vendor_vkey)) == 0  # marked: read from the first entry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=200_000)
    ap.add_argument("--baseline", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 50 if args.quick else args.entries
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        vendor, vstate, buyer, bstate = vendor_and_buyer(root, args.quick)
        grow(vendor, vstate, n)
        vendor_vkey = vkey(vendor, vstate)
        server, url = serve(vendor, vstate)
        try:
            args_ = ("monitor", url, "--vkey", vendor_vkey, "--key", "approver")
            setup(buyer, bstate, *args_, here=args.quick, path=HERE)  # applied: untimed
            grow(vendor, vstate, 1_000)
            cases: list[tuple[str, str | None, bool]] = [("daily", HERE, False),
                                                         ("reread", HERE, True)][args.quick:]
            if args.baseline is not None and not args.quick:
                cases.insert(1, ("daily, baseline", str(args.baseline.resolve()), False))
                cases.append(("reread, baseline", str(args.baseline.resolve()), True))
            for k in range(1 if args.quick else args.repeat):
                for label, path, marked in cases:
                    home, state = root / f"b{k}-{label}", root / f"bs{k}-{label}"
                    shutil.copytree(buyer, home, symlinks=True)
                    shutil.copytree(bstate, state, symlinks=True)
                    if marked:
                        mark(home, state, vendor, vstate, n // 2)
                    r = run(home, state, *args_, path=path)
                    assert not marked or "revoked" not in r["stderr"], r["stderr"]
                    rows.append((label, r["wall"], r["cpu"], r["rss"]))
                    print(f"  {n:,} + 1,000 entries, {label}: {r['wall']:.2f} s, "
                          f"{r['cpu']:.2f} CPU-s, {r['rss']:.0f} MB", file=sys.stderr)
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(f"| {n:,} + 1,000 entries | wall s | CPU-s | peak MB |\n|---|---:|---:|---:|")
    for label, wall, cpu, rss in rows:
        print(f"| {label} | {wall:.2f} | {cpu:.2f} | {rss:.0f} |")


if __name__ == "__main__":
    main()
