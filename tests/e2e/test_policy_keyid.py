"""End to end: a trust policy naming its keys by keyid means the same to every command.

A policy may name a key by its PEM file or by its keyid (looked up in the ledger's key store).
Regression (issue 10): the policy was loaded by several helpers and one of them, in ``export``,
forgot the key store and refused a policy naming keys by keyid that ``admit`` and ``verify``
accepted; ``verify BUNDLE --policy`` and ``verify --sigstore-bundle --policy`` did the same.
Each command that takes ``--policy`` is run twice on one quickstart ledger, once with the
quickstart's policy (keys by file) and once with the same policy naming the keys by keyid, and
must answer the same: exit code, stdout, and stderr up to the output paths.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import testkit
from click.testing import Result
from testkit import new_runner

from trajledger.ledger.keys import KeyStore
from trajledger.runner.cli import main


def run(*args: str | Path) -> Result:
    runner = new_runner()
    return runner.invoke(main, [str(a) for a in args])


class Vendor:
    """A quickstart ledger, its final checkpoint, and its policy written both ways."""

    def __init__(self, root: Path, quickstart: testkit.Template[str]) -> None:
        self.home = testkit.copy_template(quickstart, root / "vendor")
        self.ref = quickstart.value
        inline = (self.home / "policy.toml").read_text()  # keys inline, as quickstart writes
        by_file, by_keyid = inline, inline
        for info in KeyStore(self.home / "keys").list():
            block = re.search(rf'  # {re.escape(info.name)}: [^\n]*\n  """[^"]*""",\n', inline)
            assert block is not None, info.name
            by_file = by_file.replace(block.group(0), f'  "keys/{info.name}.pub",\n')
            by_keyid = by_keyid.replace(block.group(0), f'  "{info.keyid}",\n')
        self.by_file = self.home / "policy-files.toml"
        self.by_file.write_text(by_file)
        self.by_keyid = self.home / "policy-keyid.toml"
        self.by_keyid.write_text(by_keyid)


@pytest.fixture(scope="module")
def vendor(
    quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory
) -> Vendor:
    """A copy of the quickstart ledger, as a user of its own (`testkit.as_own_user`)."""
    root = tmp_path_factory.mktemp("keyid")
    return testkit.as_own_user(root, lambda r: Vendor(r, quickstart_template))


def both(vendor: Vendor, tmp_path: Path, *args: str) -> tuple[Result, Result]:
    """Run ``args`` under each policy; ``{out}`` becomes a path in a directory of its own.
    The user pinned the vendor's log key ahead (their state is fresh for each test)."""
    vkey = (vendor.home / "log" / "vkey").read_text().strip()
    assert run("trust", vkey).exit_code == 0
    assert run("--ledger", vendor.home, "show", vendor.ref).exit_code == 0  # index built once
    results = []
    for name, policy in (("by-file", vendor.by_file), ("by-keyid", vendor.by_keyid)):
        out = tmp_path / name
        out.mkdir(exist_ok=True)
        argv = [a.replace("{out}", str(out)) for a in args]
        results.append(run("--ledger", vendor.home, *argv, "--policy", policy))
    return results[0], results[1]


def same(vendor: Vendor, tmp_path: Path, a: Result, b: Result) -> None:
    """Both succeeded with the same stdout, and the same stderr up to the output paths."""

    def paths_out(text: str) -> str:
        for name in ("by-file", "by-keyid"):
            text = text.replace(str(tmp_path / name), "OUT")
        text = text.replace(str(vendor.by_keyid), str(vendor.by_file))
        # A bundle's size: its bundle.json holds the time it was made, and zstd compresses two
        # such times to sizes a byte apart.
        return re.sub(r"\b\d+ bytes\b", "N bytes", text)

    assert "Traceback" not in a.output + b.output
    assert a.exit_code == 0, a.output
    assert (b.exit_code, b.stdout) == (a.exit_code, a.stdout), b.output
    assert paths_out(b.stderr) == paths_out(a.stderr)


@pytest.mark.parametrize(
    "args",
    [
        ("admit", "cartpole-train@1"),
        ("verify", "{ref}"),
        ("lineage", "{ref}"),
        ("impact", "{ref}"),
        ("export", "{ref}", "--out", "{out}/bundle.tar.zst"),
        ("export", "{ref}", "--format", "sigstore", "--out", "{out}/ckpt.sigstore.json"),
    ],
    ids=["admit", "verify", "lineage", "impact", "export", "export-sigstore"],
)
def test_a_keyid_policy_answers_like_a_file_policy(
    vendor: Vendor, tmp_path: Path, args: tuple[str, ...]
) -> None:
    a, b = both(vendor, tmp_path, *(x.replace("{ref}", vendor.ref) for x in args))
    same(vendor, tmp_path, a, b)


def test_export_with_a_keyid_policy_writes_a_bundle_both_policies_verify(
    vendor: Vendor, tmp_path: Path
) -> None:
    a, b = both(vendor, tmp_path, "export", vendor.ref, "--out", "{out}/bundle.tar.zst")
    same(vendor, tmp_path, a, b)
    # Each bundle verifies offline under either policy, through the same command line.
    for made in ("by-file", "by-keyid"):
        bundle = tmp_path / made / "bundle.tar.zst"
        a, b = both(vendor, tmp_path, "verify", str(bundle))
        same(vendor, tmp_path, a, b)
        assert a.stderr.startswith(f"OK: {bundle}: ") and a.stderr.endswith(" checks passed\n")


def test_verify_sigstore_bundle_with_a_keyid_policy(vendor: Vendor, tmp_path: Path) -> None:
    """A model file checked against the checkpoint's Sigstore export, under either policy."""
    sig = tmp_path / "ckpt.sigstore.json"
    r = run("--ledger", vendor.home, "export", vendor.ref, "--format", "sigstore", "--out", sig)
    assert r.exit_code == 0, r.output
    shown = json.loads(run("--ledger", vendor.home, "show", vendor.ref, "--json").stdout)
    model = next(f for f in shown["files"] if f["path"] == "policy.npz")
    hexdigest = model["digest"].removeprefix("sha256:")
    blob = vendor.home / "objects" / "sha256" / hexdigest[:2] / hexdigest[2:4] / hexdigest
    target = tmp_path / "policy.npz"
    target.write_bytes(blob.read_bytes())
    a, b = both(vendor, tmp_path, "verify", str(target), "--sigstore-bundle", str(sig))
    same(vendor, tmp_path, a, b)
    trainer = KeyStore(vendor.home / "keys").public("trainer").keyid
    assert a.stderr == f"OK: {target}: 1 file(s) match, signed by key {trainer[:16]}\n"


def test_a_keyid_no_key_store_holds_is_refused_naming_it(vendor: Vendor, tmp_path: Path) -> None:
    """Outside the vendor's ledger the keyids cannot be resolved: every command says so."""
    a, _ = both(vendor, tmp_path, "export", vendor.ref, "--out", "{out}/bundle.tar.zst")
    assert a.exit_code == 0, a.output
    elsewhere = tmp_path / "elsewhere"
    r = run("--ledger", elsewhere, "verify", tmp_path / "by-file" / "bundle.tar.zst",
            "--policy", vendor.by_keyid)  # fmt: skip
    assert r.exit_code == 2, r.output  # the user's own policy file to fix: usage (left35)
    assert r.stderr.startswith(f"FAIL: policy {vendor.by_keyid}: role producer: key 0: keyid ")
    assert r.stderr.endswith(
        "is not a key of this ledger's key store; name the key by its .pub file instead\n"
    )
