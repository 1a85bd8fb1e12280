"""What the daily ``monitor`` of a vendor's log costs after the vendor rotated its log key
(hist39 finding 6, rot40: the size applied under the old key now follows the handover).

A buyer applied a vendor's log of N entries (one ``monitor`` of it, untimed); the vendor then
runs ``log rotate-key`` and logs 1,000 entries more. The buyer's next ``trajledger monitor URL
--vkey NEW --key approver`` reads those 1,000 (``rotated``) where 2af7bb98 read all N + 1,000
from the first entry (its new key's state had no size applied); ``daily`` is the same without
the rotation (the common path, for the cost of the change there). Each a process on a fresh
copy of the buyer and its state; ``--baseline DIR`` (a worktree of another commit) runs both
there too, in the same run (wall, the child's CPU, its peak RSS: `first_contact_bench.run`).

Usage::

    python bench/rotation_bench.py [--entries 100000] [--baseline DIR] [--repeat 2] [--quick]

``--quick`` (N = 50, one run, no baseline, ``rotated`` only: ``daily`` runs the same lines but
the rotation; the set-up's commands in the script's process, `first_contact_bench.setup`) only
checks the script runs.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from first_contact_bench import grow, run, serve, setup, vendor_and_buyer, vkey

HERE = str(Path(__file__).resolve().parents[1])
"""This tree: the children run it (`run` drops the caller's ``PYTHONPATH``)."""


@contextlib.contextmanager
def serving(home: Path, state: Path) -> Iterator[str]:
    """``log serve`` of ``home`` while the block runs: its URL."""
    server, url = serve(home, state)
    try:
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def copies(buyer: Path, state: Path, to: Path) -> tuple[Path, Path]:
    """A fresh copy of the buyer's ledger and its state (each run starts from the same)."""
    shutil.copytree(buyer, to / "home", symlinks=True)
    shutil.copytree(state, to / "state", symlinks=True)
    return to / "home", to / "state"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, kind, default in (("--entries", int, 100_000), ("--repeat", int, 2),
                                ("--baseline", Path, None)):
        ap.add_argument(flag, type=kind, default=default)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 50 if args.quick else args.entries
    trees = [("", HERE)]
    if args.baseline is not None and not args.quick:
        trees.append((", baseline", str(args.baseline.resolve())))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for case in ("rotated",) if args.quick else ("daily", "rotated"):
            vendor, vstate, buyer, bstate = vendor_and_buyer(root / case, args.quick)
            grow(vendor, vstate, n)
            with serving(vendor, vstate) as url:  # applied: the whole log, untimed
                setup(buyer, bstate, "monitor", url, "--vkey", vkey(vendor, vstate), "--key",
                      "approver", here=args.quick, path=HERE)
            if case == "rotated":
                setup(vendor, vstate, "log", "rotate-key", here=args.quick, path=HERE)
            grow(vendor, vstate, 1_000)
            with serving(vendor, vstate) as url:
                args_ = ("monitor", url, "--vkey", vkey(vendor, vstate), "--key", "approver")
                for k in range(1 if args.quick else args.repeat):
                    for suffix, path in trees:
                        r = run(*copies(buyer, bstate, root / f"{case}{suffix}{k}"), *args_,
                                path=path)
                        rows.append(f"| {case}{suffix} | {r['wall']:.2f} | {r['cpu']:.2f} | "
                                    f"{r['rss']:.0f} |")
    print("\n".join([f"| {n:,} + 1,000 entries | wall s | CPU-s | peak MB |",
                     "|---|---:|---:|---:|", *rows]))

if __name__ == "__main__":
    main()
