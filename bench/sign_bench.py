"""Sign and verify a large directory: trajledger against OpenSSF model_signing and plain hashlib.

Builds a directory of random files (default ~1 GiB in 200 files of varied sizes, nested), then in
one run, with a warm page cache, times:

- ``hashlib``: one thread, SHA-256 over every file in 1 MiB reads (the floor for one core);
- trajledger sign / verify, through the CLI (subprocess) and the library;
- model_signing key-based sign / verify (EC P-256 key), through its CLI and its library;
- ``trajledger --help`` wall time (median of 10).

Each operation runs ``--repeat`` times, interleaved; the median is reported. Ratios below 1.0 mean
trajledger is faster than model_signing; "x hashlib" below 1.0 means faster than one core hashing.

Needs ``pip install model-signing pyopenssl`` (bench only; not a trajledger dependency).

    python bench/sign_bench.py [--size-mb 1024] [--files 200] [--repeat 3] [--markdown]
    python bench/sign_bench.py --quick    (tiny sizes: tests/bench checks the script runs;
                                           the ledger made by commands run in this process)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import _common as c

PASSPHRASE = "bench passphrase (not secret)"
CHUNK = 1 << 20


def bin_of(name: str) -> str:
    local = Path(sys.executable).with_name(name)
    found = str(local) if local.is_file() else shutil.which(name)
    if not found:
        raise SystemExit(f"{name}: not found next to {sys.executable} or on PATH")
    return found


def make_tree(root: Path, total: int, count: int, seed: int = 7) -> list[int]:
    """Write ``count`` random files totalling ``total`` bytes; sizes spread over ~3 decades."""
    rng = random.Random(seed)
    weights = [rng.lognormvariate(0, 1.5) for _ in range(count)]
    scale = total / sum(weights)
    sizes = [max(1024, int(w * scale)) for w in weights]
    sizes[-1] += total - sum(sizes)
    if sizes[-1] < 1024:
        raise SystemExit("--size-mb too small for --files")
    for i, size in enumerate(sizes):
        path = root / f"shard-{i % 8}" / (f"part-{i // 8}" if i % 3 else "") / f"file-{i:04}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            left = size
            while left:
                n = min(left, 8 << 20)
                f.write(os.urandom(n))
                left -= n
    return sizes


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def hashlib_baseline(paths: list[Path]) -> None:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    for p in paths:
        h = hashlib.sha256()
        with open(p, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                h.update(view[:n])
        h.hexdigest()


def run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="total size in MiB (default 1024)")
    ap.add_argument("--files", type=int, default=200, help="number of files (default 200)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per operation (default 3)")
    ap.add_argument("--help-runs", type=int, default=10, help="runs of 'trajledger --help'")
    ap.add_argument("--workdir", type=Path, help="where to build the tree (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    ap.add_argument("--markdown", action="store_true", help="print a docs/PERFORMANCE.md section")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script runs")
    args = ap.parse_args()
    if args.quick:
        args.size_mb, args.files, args.repeat, args.help_runs = 1, 4, 1, 1

    try:
        import model_signing.signing
        import model_signing.verifying
    except ImportError:
        raise SystemExit("model_signing is missing: pip install model-signing pyopenssl") from None
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from trajledger.ledger.encode import envelope_bytes
    from trajledger.ledger.files import collect_files, manifest_for
    from trajledger.ledger.keys import KeyStore
    from trajledger.ledger.signing import files_predicate, sign_statement
    from trajledger.ledger.verify_files import verify_files

    tl, ms = bin_of("trajledger"), bin_of("model_signing")
    c.compile_package()  # start the CLI from written bytecode, as model_signing's pip install has
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sign-bench-", dir=args.workdir))
    try:
        data, out = work / "data", work / "out"
        out.mkdir()
        print(f"building {args.files} files, {args.size_mb} MiB in {data} ...", file=sys.stderr)
        sizes = make_tree(data, args.size_mb << 20, args.files)
        paths = files_of(data)
        assert len(paths) == args.files and sum(p.stat().st_size for p in paths) == sum(sizes)
        total = sum(sizes)

        env = dict(os.environ, TRAJLEDGER_PASSPHRASE=PASSPHRASE)
        home = work / "ledger"
        for setup in (["init", "--origin", "bench/local"],
                      ["key", "new", "bench", "--alg", "p256"]):
            if args.quick:  # the same commands, in this process
                c.run_cli(["--ledger", str(home), *setup], here=True, env=env)
            else:
                run([tl, "--ledger", str(home), *setup], env)
        tl_pub = out / "bench.pub"
        tl_pub.write_bytes(KeyStore(home / "keys").public("bench").to_pem())

        ms_key, ms_pub = out / "ms.key", out / "ms.pub"
        key = ec.generate_private_key(ec.SECP256R1())
        ms_key.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                             serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
        ms_pub.write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

        tl_env, ms_sig = out / "tl.dsse.json", out / "ms.sig"

        def tl_lib_sign() -> None:
            os.environ["TRAJLEDGER_PASSPHRASE"] = PASSPHRASE
            signer = KeyStore(home / "keys").signer("bench")
            manifest = manifest_for(collect_files([data]))
            ptype, predicate = files_predicate(manifest)
            envelope = sign_statement([("data", manifest.digest)], ptype, predicate, [signer])
            tl_env.write_bytes(envelope_bytes(envelope) + b"\n")

        def tl_lib_verify() -> None:
            verify_files([data], tl_env, [tl_pub]).raise_if_failed()

        def ms_lib_sign() -> None:
            model_signing.signing.Config().use_elliptic_key_signer(
                private_key=ms_key).sign(data, ms_sig)

        def ms_lib_verify() -> None:
            model_signing.verifying.Config().use_elliptic_key_verifier(
                public_key=ms_pub).verify(data, ms_sig)

        ops: dict[str, Callable[[], object]] = {
            "hashlib sha256, 1 thread": lambda: hashlib_baseline(paths),
            "trajledger sign (CLI)": lambda: run([tl, "-q", "--ledger", str(home), "sign",
                                                  str(data), "--key", "bench", "--out",
                                                  str(tl_env)], env),
            "model_signing sign (CLI)": lambda: run([ms, "sign", "key", str(data),
                                                     "--private_key", str(ms_key),
                                                     "--signature", str(ms_sig)]),
            "trajledger verify (CLI)": lambda: run([tl, "-q", "verify", str(data), "--envelope",
                                                    str(tl_env), "--pubkey", str(tl_pub)]),
            "model_signing verify (CLI)": lambda: run([ms, "verify", "key", str(data),
                                                       "--signature", str(ms_sig),
                                                       "--public_key", str(ms_pub)]),
            "trajledger sign (library)": tl_lib_sign,
            "model_signing sign (library)": ms_lib_sign,
            "trajledger verify (library)": tl_lib_verify,
            "model_signing verify (library)": ms_lib_verify,
        }
        hashlib_baseline(paths)  # warm the page cache: every tool reads from memory
        times: dict[str, list[float]] = {name: [] for name in ops}
        for i in range(args.repeat):
            for name, fn in ops.items():
                times[name].append(timed(fn))
                print(f"  run {i + 1}: {name}: {times[name][-1]:.2f} s", file=sys.stderr)
        help_times = [timed(lambda: run([tl, "--help"])) for _ in range(args.help_runs)]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    med = {name: statistics.median(t) for name, t in times.items()}
    base = med["hashlib sha256, 1 thread"]
    ratios = {
        f"{kind} ({how})": med[f"trajledger {kind} ({how})"] / med[f"model_signing {kind} ({how})"]
        for kind in ("sign", "verify") for how in ("CLI", "library")
    }
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "files": args.files, "bytes": total, "repeat": args.repeat,
        "median_s": med, "min_s": {n: min(t) for n, t in times.items()},
        "x_hashlib": {n: m / base for n, m in med.items()},
        "trajledger_over_model_signing": ratios,
        "help_median_s": statistics.median(help_times), "help_runs": help_times,
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")

    gib = total / (1 << 30)
    rows = [f"| {n} | {m:.2f} | {min(times[n]):.2f} | {gib / m:.2f} | {m / base:.2f} |"
            for n, m in med.items()]
    table = "\n".join(
        ["| operation | median s | min s | GiB/s | x hashlib |", "|---|---:|---:|---:|---:|", *rows]
    )
    ratio_rows = "\n".join(f"| {k} | {v:.2f} | {'met' if v <= 1.0 else 'MISSED'} |"
                           for k, v in ratios.items())
    help_med = result["help_median_s"]
    text = (
        f"{args.files} files, {total} bytes ({gib:.2f} GiB), median of {args.repeat} runs, "
        f"warm page cache, {os.cpu_count()} CPUs, Python {platform.python_version()}.\n\n"
        f"{table}\n\n"
        "| trajledger / model_signing | ratio | target <= 1.0 |\n|---|---:|---|\n"
        f"{ratio_rows}\n\n"
        f"`trajledger --help`: median {help_med * 1000:.0f} ms over {args.help_runs} runs "
        f"(target < 300 ms: {'met' if help_med < 0.3 else 'MISSED'}).\n"
    )
    print(text if args.markdown else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
