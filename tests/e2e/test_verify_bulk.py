"""The fast walk of ``verify`` (issue 21 item 2) decides as the record-by-record walk did.

The fast walk looks the records of a dataset's batches up in one query
(`LineageVerifier.prefetch`, ``LogIndex.entries_about``) and the datasets listing them in
another (``LogIndex.listings``), keeps the entry bytes it read, and looks at each blob file once.
Here the same lineage (the quickstart's ``cartpole-bc@2``: two datasets, one of two batches, a
parent checkpoint) is verified both ways over the user's trust state, sound and attacked: a
tampered data blob, a tampered or missing envelope, a batch whose producer key the policy does
not hold, a revoked batch. The reports are the same, node for node and check for check.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import testkit

from trajledger import Ledger
from trajledger.ledger.catalog import Catalog
from trajledger.ledger.evidence import ledger_evidence
from trajledger.runner.cli import main
from trajledger.verify.lineage import LineageVerifier
from trajledger.verify.log_index import LogIndex
from trajledger.verify.policy import TrustPolicy

REF = "cartpole-bc@2"


class OneByOne:
    """The user's trust state answered one look-up per digest, as before the bulk queries."""

    def __init__(self, inner: LogIndex) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def listings(self, digests: Collection[str]) -> Mapping[str, Sequence[int]]:
        return {d: self.inner.listing(d) for d in digests}


class Slow(LineageVerifier):
    """The walk record by record: no bulk look-up of a dataset's batches."""

    def prefetch(self, subjects: Any) -> None:
        return None


def walk(home: Path, policy: TrustPolicy, verifier: type[LineageVerifier], *,
         data: str = "hash") -> dict[str, Any]:
    ledger = Ledger.open(home)
    state: Any = ledger.trust_state()
    index = state if verifier is LineageVerifier else OneByOne(state)
    v = verifier(ledger_evidence(ledger), policy, index=index, data=data)
    report = v.verify(Catalog(ledger).resolve(REF).digest)
    doc = report.to_json()
    assert isinstance(doc, dict)
    return doc


@pytest.fixture
def home(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path / "home")


def batches(home: Path) -> list[str]:
    """The batches of cartpole-train@2, in the order the dataset lists them."""
    ledger = Ledger.open(home)
    ds = Catalog(ledger).resolve("cartpole-train@2").digest
    report = ledger.verify(ds, skip_data=True)
    return [e.dst for e in report.edges if e.src == ds and e.role == "batch"]


def flip(path: Path) -> None:
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))


def tamper_blob(home: Path) -> None:
    ledger = Ledger.open(home)
    from trajledger.verify.manifest import Manifest
    from trajledger.verify.strict_json import load_object

    manifest = Manifest.from_json(load_object(ledger.store.get(batches(home)[1]), "manifest"))
    flip(ledger.store.path_of(manifest.files[0].digest))


def envelope_of(home: Path, subject: str) -> Path:
    ledger = Ledger.open(home)
    state = ledger.trust_state()
    entry = state.entry(state.about(subject)[0])
    assert entry is not None
    return ledger.store.path_of(entry.envelope)


def tamper_envelope(home: Path) -> None:
    flip(envelope_of(home, batches(home)[0]))


def remove_envelope(home: Path) -> None:
    envelope_of(home, batches(home)[1]).unlink()


def revoke_batch(home: Path) -> None:
    r = testkit.new_runner().invoke(main, ["--ledger", str(home), "revoke", batches(home)[0],
                                           "--key", "approver-a", "--reason", "bad seed"])
    assert r.exit_code == 0, r.output


ATTACKS: dict[str, Callable[[Path], None]] = {
    "sound": lambda home: None,
    "tampered blob": tamper_blob,
    "tampered envelope": tamper_envelope,
    "missing envelope": remove_envelope,
    "revoked batch": revoke_batch,
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_the_fast_walk_reports_what_the_slow_walk_reports(home: Path, attack: str) -> None:
    ATTACKS[attack](home)
    policy = Ledger.open(home).policy()
    fast, slow = walk(home, policy, LineageVerifier), walk(home, policy, Slow)
    assert fast == slow
    failed = [c for n in fast["nodes"] for c in n["checks"] if c["status"] == "fail"]
    assert bool(failed) == (attack != "sound"), failed
    assert walk(home, policy, LineageVerifier, data="size") == walk(home, policy, Slow,
                                                                     data="size")


def stranger_policy(home: Path) -> TrustPolicy:
    """``home``'s policy with its producer key replaced by a new key, ``stranger``."""
    r = testkit.new_runner().invoke(main, ["--ledger", str(home), "key", "new", "stranger",
                                           "--no-encrypt"])
    assert r.exit_code == 0, r.output
    text = (home / "policy.toml").read_text()
    vendor, stranger = ((home / "keys" / f"{k}.pub").read_text().strip()
                        for k in ("vendor", "stranger"))
    assert vendor in text
    return TrustPolicy.from_toml(text.replace(vendor, stranger).encode(), home)


def test_an_unknown_producer_key_fails_the_same_way(home: Path) -> None:
    policy = stranger_policy(home)
    fast, slow = walk(home, policy, LineageVerifier), walk(home, policy, Slow)
    assert fast == slow
    details = [c["detail"] for n in fast["nodes"] for c in n["checks"] if c["status"] == "fail"]
    assert any("no signature by a trusted key" in d for d in details), details
