"""The 70 public sigstore-conformance bundle cases, verified offline by ``verify.sigstore_adapter``.

Data: tests/fixtures/sigstore-conformance (sigstore/sigstore-conformance, commit a73de49,
test/assets/bundle-verify; see CASES.md there). A case named ``*_fail`` must be refused, any other
must verify; the artifact, key, identity and trusted root come from the case (defaults in
CASES.md). Every case's outcome is printed at the end of the run ("sigstore-conformance").

Two cases do not behave as the suite expects, both inside the ``sigstore`` package (4.5.1), which
does the keyless verification; they are marked xfail (strict: they alert when fixed):
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trajledger.verify.errors import ProvenanceError
from trajledger.verify.keys import Identity, PublicKey
from trajledger.verify.sigstore_adapter import (
    NOT_INSTALLED,
    NotVerifiableHere,
    verify_sigstore_bundle,
)

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "sigstore-conformance"
DEFAULT_IDENTITY = (
    "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/"
    ".github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main"
)
DEFAULT_ISSUER = "https://token.actions.githubusercontent.com"

KNOWN_DIFFERENCES = {
    "intoto-with-custom-trust-root": (
        "its Rekor entry is of kind intoto/0.0.2, and sigstore 4.5.1 verifies dsse and "
        "hashedrekord entries only ('Integrated time only supported for dsse/hashedrekord "
        "0.0.1 types')"
    ),
    "trust-root-tsa-validity-end-inclusive": (
        "the timestamp falls exactly on the timestamp authority's validFor.end: the suite "
        "reads the end as inclusive, sigstore 4.5.1 as exclusive ('not enough sources of "
        "verified time')"
    ),
}
__doc__ = (__doc__ or "") + "".join(f"\n- {k}: {v}." for k, v in KNOWN_DIFFERENCES.items())

ALL = sorted(p.name for p in CASES.iterdir() if p.is_dir())


def _verify_case(case: Path) -> str:
    """Verify one case; returns ``"verified (...)"`` or raises ProvenanceError."""
    artifact = case / "artifact" if (case / "artifact").exists() else CASES / "a.txt"
    identity = (
        (case / "identity").read_text().strip()
        if (case / "identity").exists()
        else (DEFAULT_IDENTITY)
    )
    issuer = (
        (case / "issuer").read_text().strip() if (case / "issuer").exists() else (DEFAULT_ISSUER)
    )
    root = (
        (case / "trusted_root.json").read_bytes() if (case / "trusted_root.json").exists() else None
    )
    # A key file that does not load is a refusal too (managed-key-wrong-key_fail).
    keys = (
        [PublicKey.from_pem((case / "key.pub").read_bytes())] if (case / "key.pub").exists() else []
    )
    verified = verify_sigstore_bundle(
        (case / "bundle.sigstore.json").read_bytes(),
        keys=keys,
        identities=[] if keys else [Identity(issuer, identity)],
        trusted_root=root,
        artifact_digest="sha256:" + hashlib.sha256(artifact.read_bytes()).hexdigest(),
    )
    return f"verified ({verified.mode}: {verified.signer.describe()})"


def test_the_fixtures_are_all_here() -> None:
    assert len(ALL) == 70
    assert sum(n.endswith("_fail") for n in ALL) == 49


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_DIFFERENCES[n]))
        if n in KNOWN_DIFFERENCES
        else n
        for n in ALL
    ],
)
def test_conformance_case(name: str, record_property: Callable[[str, object], None]) -> None:
    pytest.importorskip("sigstore", reason="keyless cases need trajledger[sigstore]")
    want = "refused" if name.endswith("_fail") else "verified"
    try:
        outcome = _verify_case(CASES / name)
    except ProvenanceError as e:
        outcome = f"refused ({type(e).__name__}: {str(e).splitlines()[0][:160]})"
    got = outcome.split(" ", 1)[0]
    verdict = "as expected    " if got == want else "NOT as expected"
    note = f"  [known: {KNOWN_DIFFERENCES[name]}]" if name in KNOWN_DIFFERENCES else ""
    record_property(
        "summary:sigstore-conformance", f"{verdict} {name}: want {want}, {outcome}{note}"
    )
    assert got == want, outcome


def test_without_sigstore_keyless_cases_count_for_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of verify/ without the sigstore package: keyless bundles are "not verifiable
    here" (refused), key-mode bundles still verify with cryptography alone."""
    import trajledger.verify.sigstore_adapter as adapter

    monkeypatch.setattr(adapter, "sigstore_available", lambda: False)
    with pytest.raises(
        NotVerifiableHere, match=NOT_INSTALLED.replace("(", r"\(").replace(")", r"\)")
    ):
        _verify_case(CASES / "happy-path-v0.3")
    assert _verify_case(CASES / "managed-key-happy-path").startswith("verified (key")


def test_a_copy_of_verify_without_sigstore(tmp_path: Path) -> None:
    """verify/ copied alone, beside only ``cryptography`` (and what it needs): no ``sigstore``.

    (The slow clean-venv test of tests/unit/test_layering.py imports this module there too.)
    """
    import subprocess
    import sys

    import cryptography

    repo = Path(__file__).resolve().parents[2]
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(repo / "trajledger" / "verify", tmp_path / "verify", ignore=ignore)
    site = Path(cryptography.__file__).parents[1]
    libs = tmp_path / "libs"
    libs.mkdir()
    wanted = ("cryptography", "cffi", "_cffi_backend", "pycparser")
    for p in site.iterdir():
        if p.name.split("-")[0].split(".")[0] in wanted:
            (libs / p.name).symlink_to(p)
    code = f"""
import hashlib, importlib.util, sys
sys.path[:0] = ["", {str(libs)!r}]
assert importlib.util.find_spec("sigstore") is None, "sigstore is importable"
assert importlib.util.find_spec("trajledger") is None, "trajledger is importable"
from pathlib import Path
from verify.keys import PublicKey
from verify.keys import Identity
from verify.sigstore_adapter import NotVerifiableHere, sigstore_available, verify_sigstore_bundle
cases = Path({str(CASES)!r})
digest = "sha256:" + hashlib.sha256((cases / "a.txt").read_bytes()).hexdigest()
print("available", sigstore_available())
try:
    verify_sigstore_bundle((cases / "happy-path-v0.3/bundle.sigstore.json").read_bytes(),
        identities=[Identity({DEFAULT_ISSUER!r}, {DEFAULT_IDENTITY!r})], artifact_digest=digest)
except NotVerifiableHere as e:
    print("keyless:", e)
key = PublicKey.from_pem((cases / "managed-key-happy-path/key.pub").read_bytes())
v = verify_sigstore_bundle((cases / "managed-key-happy-path/bundle.sigstore.json").read_bytes(),
    keys=[key], artifact_digest=digest)
print("key mode:", v.mode, v.signer.keyid[:16])
"""
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "available False",
        "keyless: sigstore bundle: keyless Sigstore signature: not verifiable here (the sigstore "
        "package is not installed)",
        "key mode: key 4cb32c4837c6dda8",
    ]


def _policy(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(body)
    return path


IDENTITY_POLICY = (
    f'[roles.producer]\nidentities = [{{ issuer = "{DEFAULT_ISSUER}", subject = '
    f'"{DEFAULT_IDENTITY}" }}]\n'
)


@pytest.mark.parametrize(
    ("case", "extra", "code", "stderr"),
    [
        ("happy-path-v0.3", "", 0, f"OK: {CASES / 'a.txt'}: 1 file(s) match, signed by identity "
         f"{DEFAULT_IDENTITY} (issuer {DEFAULT_ISSUER})"),
        ("rekor2-dsse-happy-path", 'sigstore_trusted_root = "trusted_root.json"\n', 0, None),
        ("rekor2-dsse-happy-path", "", 1, "keyless signature does not verify"),
        ("dsse-invalid-sig_fail", "", 1, "keyless signature does not verify: DSSE: invalid "
         "signature"),
        ("wrong-material_fail", "", 1, "signs sha256:a0cfc7"),
    ],
)  # fmt: skip
def test_trajledger_verify_takes_a_bundle(
    tmp_path: Path, runner: Any, case: str, extra: str, code: int, stderr: str | None
) -> None:
    pytest.importorskip("sigstore")
    from trajledger.runner.cli import main

    if (CASES / case / "trusted_root.json").exists():
        shutil.copy(CASES / case / "trusted_root.json", tmp_path / "trusted_root.json")
    artifact = (
        CASES / case / "artifact" if (CASES / case / "artifact").exists() else CASES / "a.txt"
    )
    policy = _policy(tmp_path, extra + IDENTITY_POLICY)
    r = runner.invoke(
        main,
        [
            "verify",
            str(artifact),
            "--sigstore-bundle",
            str(CASES / case / "bundle.sigstore.json"),
            "--policy",
            str(policy),
        ],
    )
    assert r.exit_code == code, r.output
    if code == 0:
        assert "sigstore signature (keyless mode) by identity" in r.stdout
        assert "producer in the policy" in r.stdout
    if stderr is not None:
        assert stderr in r.stderr, r.stderr


def test_trajledger_verify_bundle_usage(tmp_path: Path, runner: Any) -> None:
    from trajledger.runner.cli import main

    bundle = str(CASES / "managed-key-happy-path" / "bundle.sigstore.json")
    r = runner.invoke(main, ["verify", str(CASES / "a.txt"), "--sigstore-bundle", bundle])
    assert r.exit_code == 2 and "--sigstore-bundle needs --policy FILE" in r.output
    shutil.copy(CASES / "managed-key-happy-path" / "key.pub", tmp_path / "vendor.pub")
    policy = _policy(tmp_path, '[roles.trainer]\nkeys = ["vendor.pub"]\n')
    r = runner.invoke(main, ["verify", str(CASES / "a.txt"), "--sigstore-bundle", bundle,
                             "--policy", str(policy), "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert (report["mode"], report["roles"]) == ("key", ["trainer"])
    assert report["notes"] == [
        "1 transparency-log entry(ies) and 1 timestamp(s) not checked: in key mode the trusted "
        "key is the trust anchor"
    ]
    r = runner.invoke(main, ["verify", str(tmp_path / "nope"), "--sigstore-bundle", bundle,
                             "--policy", str(policy)])  # fmt: skip
    assert (
        r.exit_code == 3
        and r.stderr.strip() == f"FAIL: {tmp_path / 'nope'}: no such file or directory"
    )
