"""A third party verifies an evidence bundle with nothing but ``verify/``, cryptography and
zstandard.

A quickstart ledger exports its final checkpoint; a fresh venv gets only ``cryptography`` and
``zstandard`` (the versions of the development venv, from pip's cache when it has them) and a
copy of ``verify/``; the trust policy travels with the public keys it names (no private key
leaves the ledger). ``python -m verify bundle.tar.zst --policy policy.toml`` must exit 0; a
bundle with one byte of a data blob changed (and ``bundle.json`` rewritten to match, as an
attacker would) must exit 1 naming the blob. Slow: it creates a venv and runs pip. Skipped
only when pip cannot reach a package index.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tamperkit as tk
import testkit
from testkit import installed_distributions, new_runner

from trajledger.runner.cli import main

REPO = Path(__file__).resolve().parents[2]
NETWORK_TROUBLE = (
    "Could not find a version",
    "No matching distribution",
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ProxyError",
    "ConnectTimeout",
    "ReadTimeout",
)
ALLOWED = {"cryptography", "cffi", "pycparser", "zstandard", "pip", "setuptools", "wheel"}


def tamper(bundle: Path, out: Path) -> str:
    """Flip one byte of the largest object and rewrite bundle.json to match; returns its name."""
    members = tk.bundle_members(bundle)
    name = max((m for m in members if m[0].startswith("objects/")), key=lambda m: len(m[1]))[0]
    changed = []
    for n, d in members:
        if n == name:
            d = d[:100] + bytes([d[100] ^ 1]) + d[101:]
        changed.append((n, d))
    tk.write_bundle(out, changed, reindex=True)
    return name


@pytest.mark.slow
def test_a_third_party_verifies_a_bundle_with_verify_alone(
        tmp_path: Path, quickstart_template: testkit.Template[str]) -> None:
    # The vendor: a quickstart ledger (a copy of the session's), its final checkpoint exported.
    runner = new_runner()
    home = testkit.copy_template(quickstart_template, tmp_path / "vendor")
    ref = quickstart_template.value
    work = tmp_path / "auditor"
    work.mkdir()
    r = runner.invoke(
        main, ["--ledger", str(home), "export", ref, "--out", str(work / "bundle.tar.zst")]
    )
    assert r.exit_code == 0, r.output
    shutil.copy(home / "policy.toml", work / "policy.toml")
    (work / "keys").mkdir()
    for pub in (home / "keys").glob("*.pub"):
        shutil.copy(pub, work / "keys" / pub.name)
    shutil.copytree(REPO / "trajledger" / "verify", work / "verify",
                    ignore=shutil.ignore_patterns("__pycache__"))
    blob = tamper(work / "bundle.tar.zst", work / "tampered.tar.zst")

    # The auditor: a fresh venv with cryptography and zstandard only.
    venv_dir = tmp_path / "venv"
    # Without a pip of its own (installing one costs seconds): this environment's pip installs
    # into it and lists it (``--python``).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv_dir)], check=True,
                   timeout=120)
    python = venv_dir / "bin" / "python"
    venv_pip = [sys.executable, "-m", "pip", "--python", str(python)]
    wanted = [f"{p}=={importlib.metadata.version(p)}" for p in ("cryptography", "zstandard")]
    pip = subprocess.run(
        [*venv_pip, "install", "--disable-pip-version-check", "--no-compile", "-q", *wanted],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if pip.returncode != 0:
        if any(s in pip.stdout + pip.stderr for s in NETWORK_TROUBLE):
            pytest.skip(f"pip cannot install {wanted} (no index?): {pip.stderr.strip()[-300:]}")
        pytest.fail(f"pip install {wanted} failed:\n{pip.stdout}\n{pip.stderr}")
    assert {name.lower() for name in installed_distributions(python)} <= ALLOWED

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}

    def verify(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), "-s", "-m", "verify", *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    ok = verify("bundle.tar.zst", "--policy", "policy.toml")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("✓ OK: ") and "\n✓ bundle " in ok.stdout  # the verdict first
    assert f"({ref[:19]}…)" in ok.stdout
    assert "✓ checkpoint cartpole-bc@2" in ok.stdout
    assert ok.stderr.startswith("OK: bundle.tar.zst: ") and ok.stderr.endswith(" checks passed\n")

    as_json = verify("bundle.tar.zst", "--policy", "policy.toml", "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["ok"] is True

    bad = verify("tampered.tar.zst", "--policy", "policy.toml")
    assert bad.returncode == 1, bad.stderr
    assert bad.stderr.startswith(
        f"FAIL: tampered.tar.zst: bundle tampered.tar.zst: member {blob}: content hashes to "
    )
    assert "not its name: changed since it was made: get it again" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr

    usage = verify("bundle.tar.zst")
    assert usage.returncode == 2 and "--policy" in usage.stderr
    typo = verify("bundle.tar.zst", "--polcy", "policy.toml")
    assert typo.returncode == 2
    assert typo.stderr.endswith(
        "for --polcy, did you mean --policy? See 'python -m verify --help'\n"), typo.stderr
    version = verify("-V")  # a copy of verify/ alone: no trajledger installed to name
    assert version.returncode == 0 and version.stdout == (
        "python -m verify (a copy of verify/; trajledger is not installed)\n"
    ), version.stdout
