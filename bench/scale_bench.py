"""Benchmark: the cost of everyday operations against the ledger's size (issue 11).

Target: ledgers of 1k, 10k and 100k log entries built in one run; ``record_batch``, ``show``,
reference resolution, ``verify`` of one small batch, ``lineage`` and ``impact`` timed at each;
from 10k to 100k entries each grows by at most 1.3x.

Each ledger gets the bench policy, one environment and real templates (a recorded batch, a
dataset, its approvals), then filler records up to its size, appended in group commits of 1,024
through ``Ledger.log.append``: per 100 entries, 97 rollout batches, one train dataset listing
the 97 and two approvals of it. Every filler is a real record: a statement of its kind (the
template's predicate, with its own manifest and name), signed by the policy's key, its envelope
in the store, so the user's index reads and indexes it like any other; only the fillers' data
blobs are not stored (their manifests name digests of bytes that were never written, as in a
bundle exported without data), and the fillers' envelopes are stored without fsync.

The user's trust state of each log is then built from empty (the first ``trust_state()`` reads
the whole log once): timed as the **catch-up** and excluded from the operations. Then, in
``--repeat`` rounds, interleaved across the sizes (so that load on the shared machine hits every
size alike), each operation opens the ledger afresh (``Ledger.open``: what a command does, minus
the interpreter's start-up) and is timed in wall and CPU seconds:

- ``record_batch`` of a new 200-step batch; ``create_dataset`` of it; ``approve``;
- ``train`` (admit, the bc trainer, the checkpoint recorded);
- ``show`` of the batch; ``resolve`` of the checkpoint's NAME@VERSION and of a 12-hex prefix;
- ``verify`` of the batch, ``lineage`` of the checkpoint, ``impact`` of the batch.

Usage::

    python bench/scale_bench.py [--dir /tmp/scalebench] [--sizes 1000,10000,100000]
        [--repeat 5] [--write-doc] [--quick] [--profile OPERATION]

``--quick`` (sizes 30 and 110, one round, a temporary directory) only checks the script runs.
``--profile OP`` prints a cProfile of OP at the largest size after the rounds.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as c

GROUP = 1024


class Filler:
    """Appends real filler records to one ledger, cloned from its templates."""

    def __init__(self, ledger: Any, keys: dict[str, Any], batch: str, dataset: str,
                 approval: int) -> None:
        """Read the template records (a batch, a dataset, an approval) back from the store."""
        self.ledger = ledger
        self.keys = keys
        self.batch = self._predicate(batch)
        self.dataset = self._predicate(dataset)
        self.approval_index = approval
        self.recent: list[str] = []
        self.last_dataset: tuple[str, str] | None = None

    def _predicate(self, digest: str) -> dict[str, Any]:
        from trajledger.ledger.catalog import Catalog
        from trajledger.verify.dsse import Envelope
        from trajledger.verify.statement import Statement

        item = Catalog(self.ledger).resolve(digest)
        envelope = Envelope.from_bytes(self.ledger.store.get(item.envelope))
        return dict(Statement.from_bytes(envelope.payload).predicate)

    def grow(self, count: int, start: int) -> None:
        """Append ``count`` filler records, numbered from ``start``."""
        from trajledger.ledger.log import EntrySpec

        store = self.ledger.store
        store.durable = False  # the fillers' envelopes only: every real record is durable
        specs: list[EntrySpec] = []
        for n in range(start, start + count):
            specs.append(self._one(n))
            if len(specs) == GROUP:
                self.ledger.log.append(specs)
                specs = []
        if specs:
            self.ledger.log.append(specs)
        store.durable = True

    def _one(self, n: int) -> Any:
        import datetime as dt

        from trajledger.ledger.encode import envelope_bytes
        from trajledger.ledger.log import EntrySpec
        from trajledger.ledger.signing import sign_statement
        from trajledger.verify import predicates
        from trajledger.verify.digest import sha256_hex
        from trajledger.verify.manifest import FileEntry, Manifest
        from trajledger.verify.predicates import Approval, Dataset
        from trajledger.verify.times import format_time

        slot = n % 100
        if slot < 97:
            files = [
                FileEntry(f["path"], int(f["size"]), sha256_hex(f"filler {n} {f['path']}".encode()),
                          f["mediaType"])
                for f in self.batch["manifest"]["files"]
            ]
            manifest = Manifest.from_files(files)
            name, subject = f"filler-{n}", manifest.digest
            predicate = {**self.batch, "manifest": manifest.to_json()}
            kind, ptype, signer = "rollout-batch", predicates.ROLLOUT_BATCH, self.keys["vendor"]
            self.recent.append(subject)
        elif slot == 97:
            batches = tuple(sorted(self.recent))
            self.recent = []
            body = Dataset(f"filler-{n}", "1", "train", batches, "train").written()
            descriptor = repr(batches).encode()
            self.ledger.store.put_bytes(descriptor)
            manifest = Manifest.from_files([FileEntry("dataset.json", len(descriptor),
                                                      sha256_hex(descriptor),
                                                      "application/json")])
            name, subject = f"filler-{n}@1", manifest.digest
            predicate = {"manifest": manifest.to_json(), **body}
            kind, ptype, signer = "dataset", predicates.DATASET, self.keys["vendor"]
            self.last_dataset = (name, subject)
        else:
            assert self.last_dataset is not None
            name, subject = self.last_dataset
            when = dt.datetime.now(dt.UTC)
            predicate = Approval("train", format_time(when),
                                 format_time(when + dt.timedelta(days=3650))).to_predicate()
            kind, ptype = "approval", predicates.APPROVAL
            signer = self.keys["a" if slot == 98 else "b"]
        envelope = sign_statement([(name, subject)], ptype, predicate, [signer])
        digest = self.ledger.store.put_bytes(envelope_bytes(envelope))
        return EntrySpec(kind=kind, subject=subject, envelope=digest, signers=(signer.keyid,))


def build(root: Path, size: int, quick: bool) -> dict[str, Any]:
    """A ledger of ``size`` log entries; returns what the rounds need and the build times."""
    t = time.perf_counter()
    ledger, keys = c.new_ledger(root, f"bench.local/scale-{size}")
    batch = ledger.record_batch(c.steps_table(200, 0), env="bench-env@1", policy="random",
                                key="vendor", name="template")
    ds = ledger.create_dataset("template", "1", "train", [batch.digest], key="vendor")
    approval = ledger.approve("template@1", key="a", expires="3650d")
    ledger.approve("template@1", key="b", expires="3650d")
    filler = Filler(ledger, keys, batch.digest, ds.digest, approval.index)
    start = ledger.log.size
    t_fill = time.perf_counter()
    filler.grow(max(0, size - start), start)
    fill = time.perf_counter() - t_fill
    entries = ledger.log.size
    # The catch-up: this user's index of the log rebuilt from empty (the floor is kept).
    from trajledger import Ledger

    ledger.trust_state().rebuild()
    ledger = Ledger.open(root)
    catch_up = c.timed(ledger.trust_state)
    return {"size": size, "entries": entries, "fill": fill, "catch_up": catch_up,
            "build": time.perf_counter() - t}


def operations(root: Path, r: int) -> list[tuple[str, Callable[[Any], object]]]:
    """The timed operations of round ``r``, in order (later ones use what earlier made)."""
    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.show import describe

    made: dict[str, str] = {}
    table = c.steps_table(200, 1000 + r)

    def record(ledger: Any) -> None:
        made["batch"] = ledger.record_batch(table, env="bench-env@1", policy="random",
                                            key="vendor", name=f"probe-{r}").digest

    def dataset(ledger: Any) -> None:
        ledger.create_dataset(f"probe-{r}", "1", "train", [made["batch"]], key="vendor")

    def approve(ledger: Any) -> None:
        ledger.approve(f"probe-{r}@1", key="a", expires="3650d")
        ledger.approve(f"probe-{r}@1", key="b", expires="3650d")

    def train(ledger: Any) -> None:
        made["ckpt"] = ledger.train(f"probe-{r}@1", key="trainer", config={"epochs": 1},
                                    name=f"probe-ckpt-{r}", version="1").digest

    def check(report: Any) -> None:
        if not report.ok:
            raise RuntimeError(f"verification failed: {report.failures()[:3]}")

    return [
        ("record_batch (200 steps)", record),
        ("create_dataset (1 batch)", dataset),
        ("approve x2", approve),
        ("train (admit, bc, record)", train),
        ("show BATCH", lambda L: describe(L, made["batch"])),
        ("resolve NAME@VERSION", lambda L: Catalog(L).resolve(f"probe-ckpt-{r}@1")),
        ("resolve 12-hex prefix", lambda L: Catalog(L).resolve(made["batch"][7:19])),
        ("verify BATCH", lambda L: check(L.verify(made["batch"]))),
        ("lineage CHECKPOINT", lambda L: check(L.lineage(made["ckpt"]))),
        ("impact BATCH", lambda L: check(L.impact(made["batch"]))),
    ]


def run_round(root: Path, r: int, times: dict[tuple[str, int], list[tuple[float, float]]],
              size: int, profile: str | None = None) -> None:
    """One round of every operation on one ledger, each with a fresh `Ledger.open`."""
    from trajledger import Ledger

    for name, op in operations(root, r):
        prof = cProfile.Profile() if profile == name else None
        w, p = time.perf_counter(), time.process_time()
        if prof is not None:
            prof.enable()
        op(Ledger.open(root))
        if prof is not None:
            prof.disable()
        times.setdefault((name, size), []).append((time.perf_counter() - w,
                                                   time.process_time() - p))
        if prof is not None:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/scalebench"))
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--write-doc", action="store_true", help="update docs/PERFORMANCE.md")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    ap.add_argument("--profile", help="an operation to profile at the largest size")
    args = ap.parse_args(argv)
    if args.quick:
        args.dir = Path(tempfile.mkdtemp(prefix="scalebench-"))
        args.sizes, args.repeat = "30,110", 1  # 110: every kind of filler record (slots 97-99)
    sizes = [int(s) for s in args.sizes.split(",")]
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    os.environ["TRAJLEDGER_STATE_DIR"] = str(args.dir / "state")  # never the user's own
    built = []
    for size in sizes:
        built.append(build(args.dir / str(size), size, args.quick))
        print(f"  {size}: {built[-1]}", file=sys.stderr, flush=True)
    times: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for r in range(args.repeat):
        for size in sizes:
            run_round(args.dir / str(size), r, times, size)
        print(f"  round {r + 1} done", file=sys.stderr, flush=True)
    if args.profile:
        run_round(args.dir / str(sizes[-1]), args.repeat, {}, sizes[-1], args.profile)
    text = render(built, times, sizes, args.repeat)
    print(text)
    if args.write_doc:
        c.write_section("scale_bench", "### Operations against the ledger's size", text)
    if args.quick:
        shutil.rmtree(args.dir)
    return 0


def render(built: list[dict[str, Any]], times: dict[tuple[str, int], list[tuple[float, float]]],
           sizes: list[int], repeat: int) -> str:
    """The section: header, build and catch-up, the operations, the target."""
    names = list(dict.fromkeys(name for name, _ in times))
    lo, hi = sizes[-2] if len(sizes) > 1 else sizes[0], sizes[-1]
    rows = []
    for name in names:
        wall = {s: c.median([w for w, _ in times[(name, s)]]) for s in sizes}
        cpu = {s: c.median([p for _, p in times[(name, s)]]) for s in sizes}
        ratio_w, ratio_c = wall[hi] / wall[lo], cpu[hi] / cpu[lo]
        verdict = {(True, True): "met", (True, False): "wall only: CPU over",
                   (False, True): "CPU only: wall over", (False, False): "**not met**"}
        rows.append([name, *(f"{1000 * wall[s]:.0f} / {1000 * cpu[s]:.0f}" for s in sizes),
                     f"{ratio_w:.2f} / {ratio_c:.2f}", verdict[ratio_w <= 1.3, ratio_c <= 1.3]])
    entries = [f"{b['entries']:,}" for b in built]
    return "\n".join([
        f"`{c.command_line()}`; {c.machine()}.",
        "",
        c.table(["ledger", *(f"{s:,}" for s in sizes)], [
            ["log entries", *entries],
            ["fillers appended (s)", *(f"{b['fill']:.1f}" for b in built)],
            ["catch-up: first `trust_state()`, whole log indexed (s)",
             *(f"{b['catch_up']:.1f}" for b in built)],
            ["catch-up per entry (ms)",
             *(f"{1000 * b['catch_up'] / b['entries']:.2f}" for b in built)],
        ]),
        "",
        f"Operations, ms wall / CPU, median of {repeat} rounds (each with a fresh "
        "`Ledger.open`, the catch-up excluded):",
        "",
        c.table(["operation", *(f"{s:,}" for s in sizes), f"x {hi:,} / {lo:,} (wall / CPU)",
                 "target <= 1.3"], rows, "l" + "r" * (len(sizes) + 1) + "l"),
    ])


if __name__ == "__main__":
    sys.exit(main())
