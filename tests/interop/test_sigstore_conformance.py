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
from collections.abc import Callable
from pathlib import Path

import pytest

from trajledger.verify.errors import ProvenanceError
from trajledger.verify.keys import PublicKey
from trajledger.verify.policy import Identity
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
