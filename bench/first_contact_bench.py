"""A third party's first ``monitor`` of a log it never applied (out37's first contact).

A buyer that holds records another log brought (one import) runs ``trajledger monitor URL
--vkey V --key approver`` against a log it has never applied, which holds nothing the buyer
holds: an environment record and N entries more (group commits of synthetic ``files`` entries,
as `monitor_bench` builds them). Since out37 (docs/SECURITY.md, twenty-second round) such a
first contact reads the log from its first entry, where before it remembered the checkpoint and
read nothing; this measures what that costs at each N, as a process where the user runs it
(wall, the child's CPU, its peak RSS), a fresh copy of the buyer and its state each run, beside
the same command on ``--baseline DIR`` (a worktree of another commit) in the same run.

Usage::

    python bench/first_contact_bench.py [--entries 2000,20000,200000] [--baseline DIR]
        [--repeat 2] [--quick]

``--quick`` (N = 50, one run, no baseline) only checks the script runs; its set-up commands run
in the script's process (`setup`), the measured ``monitor`` as a process still.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import CLI_MAIN, run_here

CLI = "from trajledger.runner.cli import main; main()"
HWM = ("import atexit, sys\natexit.register(lambda: sys.stderr.write(next(l for l in "
       "open('/proc/self/status') if l.startswith('VmHWM'))))\n")
"""Written at exit: the child's own peak RSS (a forked child's ``ru_maxrss`` starts from its
parent's, which built the logs)."""
POLICY = (
    'name = "buyer"\n[roles.producer]\nkeys = ["trust/vendor.pub"]\n'
    '[roles.approver]\nkeys = ["keys/approver.pub"]\n[roles.log]\nvkeys = [{vkeys}]\n'
)


def run(home: Path, state: Path, *args: object, path: str | None = None,
        ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """``trajledger --ledger HOME ARGS`` in a fresh interpreter: wall, CPU (the child's own
    rusage), peak RSS, output."""
    env = {**os.environ, "TRAJLEDGER_STATE_DIR": str(state)}
    env.pop("PYTHONPATH", None)
    if path is not None:
        env["PYTHONPATH"] = path
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", HWM + CLI, "--ledger", str(home),
                                 *map(str, args)], stdout=out, stderr=err, env=env)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if code not in ok:
        raise RuntimeError(f"trajledger {' '.join(map(str, args[:4]))}: exit {code}\n{stderr}")
    hwm = [int(x.split()[1]) for x in stderr.splitlines() if x.startswith("VmHWM")]
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
            "rss": hwm[-1] / 1024 if hwm else 0.0, "stdout": stdout, "stderr": stderr}


def setup(home: Path, state: Path, *args: object, here: bool = False,
          path: str | None = None) -> None:
    """A set-up command, untimed: `run`; with ``here`` (the ``--quick`` modes) in this process
    (`_common.run_here`, this tree), as the other scripts' quick modes run theirs: a process
    cost 0.2-0.3 CPU-s, ten to a dozen of them a script, more than the rest of its quick run."""
    if not here:
        run(home, state, *args, path=path)
        return
    env = {**os.environ, "TRAJLEDGER_STATE_DIR": str(state)}
    code, _out, err = run_here(CLI_MAIN, ["--ledger", str(home), *map(str, args)], env=env)
    if code != 0:
        raise RuntimeError(f"trajledger {' '.join(map(str, args[:4]))}: exit {code}\n{err}")


def party(root: Path, name: str, key: str, here: bool = False) -> tuple[Path, Path]:
    """A new ledger ``name`` with an unencrypted key ``key``: its home and state."""
    home, state = root / name, root / f"{name}-state"
    setup(home, state, "init", "--origin", f"{name}.example/log", here=here)
    setup(home, state, "key", "new", key, "--no-encrypt", here=here)
    return home, state


def vkey(home: Path, state: Path) -> str:
    """The log's verifier key, as ``log info --json`` prints it: read in this process (set-up,
    untimed: a process each cost 0.2 CPU-s, 8 of them in rotation_bench)."""
    os.environ["TRAJLEDGER_STATE_DIR"] = str(state)
    from trajledger import Ledger

    return str(Ledger.open(home).log.vkey)


def producer(root: Path, name: str, here: bool = False) -> tuple[Path, Path]:
    """A ledger whose policy names its producer key, with one environment recorded."""
    home, state = party(root, name, "vendor", here)
    setup(home, state, "policy", "init", "--roles", "producer", "--out", home / "policy.toml",
          here=here)
    setup(home, state, "policy", "set", home / "policy.toml", "--key", "vendor", "--yes",
          here=here)
    setup(home, state, "env", "register", "maze", "--version", "1", "--source", "sim",
          "--key", "vendor", here=here)
    return home, state


def grow(home: Path, state: Path, count: int) -> None:
    """``count`` synthetic entries more (what a monitor checks is the tree, not what they name)."""
    os.environ["TRAJLEDGER_STATE_DIR"] = str(state)
    from trajledger import Ledger
    from trajledger.ledger.log import EntrySpec

    ledger = Ledger.open(home)
    keyid = ledger.keys.public("vendor").keyid
    specs, size = [], ledger.log.size  # from the size: a second call adds new entries too
    for i in range(size, size + count):  # (the same ones again: an append adds nothing)
        d = "sha256:" + hashlib.sha256(f"{home} {i}".encode()).hexdigest()
        specs.append(EntrySpec("files", d, d, (keyid,)))
    for j in range(0, len(specs), 10_000):
        ledger.log.append(specs[j : j + 10_000])


def serve(home: Path, state: Path) -> tuple[subprocess.Popen[str], str]:
    """``log serve`` of the ledger ``home`` in a subprocess (the installed tree), and its URL."""
    env = {**os.environ, "TRAJLEDGER_STATE_DIR": str(state)}
    env.pop("PYTHONPATH", None)
    server = subprocess.Popen(
        [sys.executable, "-c", CLI, "--ledger", str(home), "log", "serve", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def vendor_and_buyer(root: Path, here: bool = False) -> tuple[Path, Path, Path, Path]:
    """A vendor (`producer`) and a buyer that trusts its key and log and imported its
    environment's bundle (one import): their homes and states (``here``: `setup`)."""
    vendor, vstate = producer(root, "vendor", here)
    bundle = root / "env.tar.zst"
    setup(vendor, vstate, "export", "maze@1", "--out", bundle, here=here)
    buyer, bstate = party(root, "buyer", "approver", here)
    (buyer / "trust").mkdir()
    shutil.copy(vendor / "keys" / "vendor.pub", buyer / "trust" / "vendor.pub")
    vkeys = ", ".join(f'"{k}"' for k in (vkey(vendor, vstate), vkey(buyer, bstate)))
    (buyer / "policy.toml").write_text(POLICY.format(vkeys=vkeys))
    setup(buyer, bstate, "policy", "set", buyer / "policy.toml", "--key", "approver", "--yes",
          here=here)
    setup(buyer, bstate, "import", bundle, "--key", "approver", here=here)
    return vendor, vstate, buyer, bstate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", default="2000,20000,200000")
    ap.add_argument("--baseline", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes = [50] if args.quick else [int(n) for n in args.entries.split(",")]
    trees: list[tuple[str, str | None]] = [("this tree", None)]
    if args.baseline is not None and not args.quick:
        trees.append(("baseline", str(args.baseline.resolve())))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _vendor, _vstate, buyer, bstate = vendor_and_buyer(root, args.quick)
        for n in sizes:
            other, ostate = producer(root, f"other{n}", args.quick)
            grow(other, ostate, n)
            other_vkey = vkey(other, ostate)
            server, url = serve(other, ostate)
            try:
                for k in range(1 if args.quick else args.repeat):
                    for label, path in trees:
                        home, state = root / f"b{n}-{k}-{label}", root / f"bs{n}-{k}-{label}"
                        shutil.copytree(buyer, home, symlinks=True)
                        shutil.copytree(bstate, state, symlinks=True)
                        r = run(home, state, "monitor", url, "--vkey", other_vkey, "--key",
                                "approver", path=path)
                        rows.append((n, label, r["wall"], r["cpu"], r["rss"]))
                        print(f"  {n:,} entries, {label}: {r['wall']:.2f} s, "
                              f"{r['cpu']:.2f} CPU-s, {r['rss']:.0f} MB", file=sys.stderr)
            finally:
                server.terminate()
                server.wait(timeout=10)
    print("| entries | tree | wall s | CPU-s | peak MB |\n|---:|---|---:|---:|---:|")
    for n, label, wall, cpu, rss in rows:
        print(f"| {n:,} | {label} | {wall:.2f} | {cpu:.2f} | {rss:.0f} |")


if __name__ == "__main__":
    main()
