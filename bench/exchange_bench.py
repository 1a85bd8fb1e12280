"""Benchmark: ``trajledger export`` and ``import`` of an evidence bundle beside ``tar --zstd``.

Target (issue 21 item 3): ``import`` of a bundle at most 1.5 x ``tar --zstd -xf`` of the same
bundle, and ``export`` at most 1.5 x ``tar --zstd -cf`` of the same members, wall time, through
the command line, CPU time beside.

Builds a vendor ledger (kept between runs with ``--keep``) through the public API: the bench
policy, one environment, ``--batches`` rollout batches of random steps (obs float32[17], action
float32[6]: Parquet cannot shrink them, about 100 bytes a step) adding up to about
``--size-mb`` MB, and one train dataset of all of them approved 2-of-2. Its lineage (every
batch, its envelopes, manifests and data, the approvals, the policy) is what is exported. The
bundle's members, extracted once with ``tar``, are what ``tar --zstd -cf`` archives.

Then, in one run, ``--repeat`` rounds of, in this order, each followed by ``sync``:

- ``tar --zstd -cf OUT -C MEMBERS ...`` (the baseline of export: the same members; zstd's
  default level 3 and its one worker thread);
- ``tar -I 'zstd -1' -cf OUT -C MEMBERS ...`` (the same at zstd's level 1, the level the bundle
  writer uses since the xfer43 pass: not the target's baseline, the like-for-like figure beside
  it);
- ``trajledger --ledger VENDOR export bench@1 --out OUT`` (a new file each round);
- ``tar --zstd -xf BUNDLE -C FRESH`` (the baseline of import, into a new directory);
- the import's reading pass alone, in this process (`BundleEvidence.open` into a staging
  directory: every member checked and hashed, the objects written; not a target, it shows
  what the rest of ``import`` costs: verifying, logging, indexing);
- ``trajledger --ledger BUYER import BUNDLE --policy P --key b1 --key b2`` into a new buyer
  ledger (and a new user state) each round: everything verified (signatures, the policy, every
  member's digest, the proofs) before anything is moved into the store, one fsync pass.

``tar`` does not fsync what it extracts; ``import`` makes the objects and the log durable
before it returns, so its time includes writing the bytes to the disk (``sync`` runs between
the operations, outside the times, so none pays for another's writes). The page cache is warm
(a first round nobody counts primes it). Wall ratios are medians of each round's own ratio;
CPU is user + system time of the process and its children (``tar`` runs ``zstd`` as a child).

Usage::

    python bench/exchange_bench.py [--dir /tmp/exchangebench] [--size-mb 800]
        [--batches 1000] [--repeat 3] [--keep] [--write-doc] [--quick]

``--quick`` (2 small batches, one round, a temporary directory; one process of ``export`` and
of ``import``, the others run in this process) only checks the script runs;
``--write-doc`` puts the results into docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c

BYTES_PER_STEP = 85
"""About what a random step costs in the batch's Parquet file (`_common.steps_table`), measured."""

BUYER_POLICY = """\
name = "buyer"
serial = 1
max_approval_age = "3650d"
[roles.producer]
keys = ["trust/vendor.pub"]
[roles.approver]
keys = ["trust/a.pub", "trust/b.pub", "keys/b1.pub", "keys/b2.pub"]
threshold = 2
[roles.trainer]
keys = ["trust/trainer.pub"]
[roles.log]
vkeys = ["{vendor}", "{buyer}"]
"""


def build(root: Path, size_mb: int, batches: int) -> None:
    """Record the vendor's ledger: ``batches`` batches adding up to about ``size_mb`` MB, one
    dataset of them, approved 2-of-2."""
    ledger, keys = c.new_ledger(root, "bench.local/exchange")
    steps = max(1, size_mb * 1_000_000 // (batches * BYTES_PER_STEP))
    digests = []
    t0 = time.perf_counter()
    for b in range(batches):
        res = ledger.record_batch(c.steps_table(steps, b), env="bench-env@1", policy="random",
                                  signer=keys["vendor"], name=f"batch-{b}")
        digests.append(res.digest)
        if b % 100 == 99:
            print(f"  {b + 1} batches recorded ({time.perf_counter() - t0:.0f} s)",
                  file=sys.stderr)
    ledger.create_dataset("bench", "1", "train", digests, key=keys["vendor"])
    for k in ("a", "b"):
        ledger.approve("bench@1", key=keys[k], expires="3650d")


def new_buyer(root: Path, vendor: Path, vkey: str) -> Path:
    """A new buyer ledger at ``root`` (wiped first): approvers b1 and b2 of its own, a policy
    trusting the vendor's keys and its log (``vkey``); returns its policy file."""
    from trajledger import Ledger

    shutil.rmtree(root, ignore_errors=True)
    buyer = Ledger.init(root, origin=c.unique_origin("exchange-buyer"))
    for name in ("b1", "b2"):
        buyer.keys.create(name, encrypt=buyer.keys.require_encrypted)
    trust = root / "trust"
    trust.mkdir()
    for pub in (vendor / "keys").glob("*.pub"):
        shutil.copy(pub, trust / pub.name)
    policy = root / "policy.toml"
    policy.write_text(BUYER_POLICY.format(vendor=vkey, buyer=buyer.log.vkey))
    return policy


def run(argv: list[str], env: dict[str, str] | None = None) -> None:
    """Run a process; refuse a failure."""
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}\n{p.stderr[-2000:]}")


def read_bundle(bundle: Path, where: Path) -> None:
    """What ``import`` does before it verifies: read the bundle once, every member checked
    and hashed, the objects written to a staging directory (`BundleEvidence.open`)."""
    from trajledger.verify.bundle import BundleEvidence

    with BundleEvidence.open(bundle, workdir=where):
        pass


def measure(work: Path, vendor: Path, repeat: int, quick: bool = False) -> dict[str, Any]:
    """The interleaved rounds (the first one, unreported, warms the page cache). ``quick``:
    the ``trajledger`` commands of all but the last round run in this process."""
    bundle = work / "bundle.tar.zst"
    c.run_cli(["--ledger", str(vendor), "export", "bench@1", "--out", str(bundle)], here=quick)
    members = work / "members"
    shutil.rmtree(members, ignore_errors=True)
    members.mkdir()
    run(["tar", "--zstd", "-xf", str(bundle), "-C", str(members)])
    names = sorted(os.listdir(members))
    size = sum(p.stat().st_size for p in members.rglob("*") if p.is_file())
    objects = len(os.listdir(members / "objects" / "sha256"))
    cli = c.cli()
    from trajledger import Ledger

    vkey = Ledger.open(vendor).log.vkey
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in
                                                  ("tar_c", "tar_c1", "export", "tar_x", "read",
                                                            "import")}
    for r in range(repeat + 1):
        out = work / f"out-{r}"
        out.mkdir(exist_ok=True)
        fresh = work / f"fresh-{r}"
        fresh.mkdir()
        state = work / f"state-{r}"
        env = dict(os.environ, TRAJLEDGER_STATE_DIR=str(state))
        os.environ["TRAJLEDGER_STATE_DIR"] = str(state)
        buyer = work / f"buyer-{r}"
        policy = new_buyer(buyer, vendor, vkey)
        ops = {
            "tar_c": ["tar", "--zstd", "-cf", str(out / "tar.tar.zst"), "-C", str(members),
                      *names],
            "tar_c1": ["tar", "-I", "zstd -1", "-cf", str(out / "tar1.tar.zst"), "-C",
                       str(members), *names],
            "export": [*cli, "--ledger", str(vendor), "export", "bench@1", "--out",
                       str(out / "export.tar.zst")],
            "tar_x": ["tar", "--zstd", "-xf", str(bundle), "-C", str(fresh)],
            "import": [*cli, "--ledger", str(buyer), "import", str(bundle), "--policy",
                       str(policy), "--key", "b1", "--key", "b2"],
        }
        here = quick and r < repeat  # --quick: one process of each command, the last round's
        for name, argv in ops.items():
            os.sync()
            if here and argv[: len(cli)] == cli:
                got = c.wall_cpu(lambda argv=argv, env=env: c.run_cli(argv[len(cli):], here=True,
                                                                      env=env))
            else:
                got = c.wall_cpu(lambda argv=argv, env=env: run(argv, env))
            if r:
                runs[name].append(got)
            if name == "tar_x":  # the import's reading pass alone, in this process
                os.sync()
                got = c.wall_cpu(lambda fresh=fresh: read_bundle(bundle, fresh))
                if r:
                    runs["read"].append(got)
        os.sync()
        for path in (out, fresh, buyer, state):
            shutil.rmtree(path)
    return {"bytes": size, "bundle": bundle.stat().st_size, "objects": objects,
            "members": sum(1 for p in members.rglob("*") if p.is_file()), "repeat": repeat,
            "runs": runs}


def render(r: dict[str, Any]) -> str:
    """The section: header, the table, the targets."""
    runs = r["runs"]
    wall = {k: c.median([w for w, _ in v]) for k, v in runs.items()}
    cpu = {k: c.median([p for _, p in v]) for k, v in runs.items()}

    def ratio(op: str, base: str) -> float:
        return c.median([o[0] / b[0] for b, o in zip(runs[base], runs[op], strict=True)])

    exp, imp = ratio("export", "tar_c"), ratio("import", "tar_x")
    mb = r["bytes"] / 1e6
    lines = [
        f"`{c.command_line()}`; {c.machine()}.",
        "",
        f"A bundle of {r['members']:,} members ({r['objects']:,} objects), {mb:,.0f} MB of "
        f"members, {r['bundle'] / 1e6:,.0f} MB compressed; median of {r['repeat']} interleaved "
        "rounds (after one that warms the page cache), `sync` between the operations, a fresh "
        "destination (a new buyer ledger and user state for `import`) each round. CPU is user "
        "+ system time of the process and its children. `tar` does not fsync; `import` makes "
        "its objects and log entries durable before it returns.",
        "",
        c.table(
            ["operation", "wall s", "CPU s", "MB/s", "x tar (wall)", "x tar (CPU)"],
            [
                ["`tar --zstd -cf` of the members (baseline)", f"{wall['tar_c']:.2f}",
                 f"{cpu['tar_c']:.2f}", f"{mb / wall['tar_c']:.0f}", "", ""],
                ["`tar -I 'zstd -1' -cf` (the bundle's zstd level; not the target's baseline)",
                 f"{wall['tar_c1']:.2f}", f"{cpu['tar_c1']:.2f}", f"{mb / wall['tar_c1']:.0f}",
                 f"{ratio('tar_c1', 'tar_c'):.2f}", f"{cpu['tar_c1'] / cpu['tar_c']:.2f}"],
                ["`trajledger export` (the dataset's lineage)", f"{wall['export']:.2f}",
                 f"{cpu['export']:.2f}", f"{mb / wall['export']:.0f}", f"{exp:.2f}",
                 f"{cpu['export'] / cpu['tar_c']:.2f}"],
                ["`tar --zstd -xf` of the bundle (baseline)", f"{wall['tar_x']:.2f}",
                 f"{cpu['tar_x']:.2f}", f"{mb / wall['tar_x']:.0f}", "", ""],
                ["its reading pass alone (`BundleEvidence.open`: every member hashed, "
                 "objects staged; in-process)", f"{wall['read']:.2f}", f"{cpu['read']:.2f}",
                 f"{mb / wall['read']:.0f}", f"{ratio('read', 'tar_x'):.2f}",
                 f"{cpu['read'] / cpu['tar_x']:.2f}"],
                ["`trajledger import` into a new ledger", f"{wall['import']:.2f}",
                 f"{cpu['import']:.2f}", f"{mb / wall['import']:.0f}", f"{imp:.2f}",
                 f"{cpu['import'] / cpu['tar_x']:.2f}"],
            ],
        ),
        "",
        c.table(
            ["target (issue 21 item 3)", "x tar (wall)", ""],
            [
                ["export <= 1.5 x `tar --zstd -cf`", f"{exp:.2f}", c.met(exp <= 1.5)],
                ["import <= 1.5 x `tar --zstd -xf`", f"{imp:.2f}", c.met(imp <= 1.5)],
            ],
            "lrl",
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/exchangebench"))
    ap.add_argument("--size-mb", type=int, default=800, help="about this many MB of data")
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="reuse the vendor ledger in --dir")
    ap.add_argument("--write-doc", action="store_true", help="update docs/PERFORMANCE.md")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.dir = Path(tempfile.mkdtemp(prefix="exchangebench-"))
        args.size_mb, args.batches, args.repeat = 1, 2, 1
    vendor = args.dir / "vendor"
    work = args.dir / "work"
    os.environ["TRAJLEDGER_STATE_DIR"] = str(args.dir / "state")
    marker = vendor / "bench-built"
    if not (args.keep and marker.is_file()):
        t = time.perf_counter()
        build(vendor, args.size_mb, args.batches)
        marker.write_text(f"{args.size_mb} MB, {args.batches} batches\n")
        print(f"built in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    results = measure(work, vendor, args.repeat, args.quick)
    shutil.rmtree(work)
    if args.quick:
        shutil.rmtree(args.dir)
    text = render(results)
    print(text)
    if args.write_doc:
        c.write_section("exchange_bench", "## Import and export (issue 21 item 3)", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
