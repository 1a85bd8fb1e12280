"""More attacks on the fast walk of ``verify`` (issue 21 item 2, reviewed): the bulk look-ups
(`LineageVerifier.prefetch`, ``LogIndex.listings``) decide as the record-by-record walk does
when what they looked up in bulk is damaged after it was indexed: the dataset's own envelope,
an approval's or a revocation's envelope missing (fail closed), a dataset's envelope swapped for
another record's. Same report, node for node and check for check (tests/e2e/test_verify_bulk.py
holds the walks and the first attacks).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import testkit
from test_verify_bulk import REF, Slow, batches, envelope_of, flip, revoke_batch, walk

from trajledger import Ledger
from trajledger.ledger.catalog import Catalog
from trajledger.verify.lineage import LineageVerifier


@pytest.fixture
def home(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path / "home")


def _dataset(home: Path) -> str:
    return Catalog(Ledger.open(home)).resolve("cartpole-train@2").digest


def tamper_dataset_envelope(home: Path) -> None:
    flip(envelope_of(home, _dataset(home)))


def swap_dataset_envelope(home: Path) -> None:
    """The dataset's envelope replaced by a batch's (valid, signed, about something else)."""
    target = envelope_of(home, _dataset(home))
    target.chmod(0o644)
    target.write_bytes(envelope_of(home, batches(home)[0]).read_bytes())


def remove_approval_envelope(home: Path) -> None:
    ledger = Ledger.open(home)
    state = ledger.trust_state()
    ds = _dataset(home)
    approvals = [i for i in state.about(ds) if (e := state.entry(i)) and e.kind == "approval"]
    entry = state.entry(approvals[-1])
    assert entry is not None
    ledger.store.path_of(entry.envelope).unlink()


def remove_revocation_envelope(home: Path) -> None:
    revoke_batch(home)
    ledger = Ledger.open(home)
    state = ledger.trust_state()
    entry = state.entry(ledger.log.size - 1)
    assert entry is not None and entry.kind == "revocation"
    ledger.store.path_of(entry.envelope).unlink()


@pytest.mark.parametrize("attack", [tamper_dataset_envelope, swap_dataset_envelope,
                                    remove_approval_envelope, remove_revocation_envelope])
def test_the_fast_walk_refuses_what_the_slow_walk_refuses(
    home: Path, attack: Callable[[Path], None],
) -> None:
    Ledger.open(home).trust_state()  # indexed before the damage
    attack(home)
    policy = Ledger.open(home).policy()
    for data in ("hash", "size"):
        fast = walk(home, policy, LineageVerifier, data=data)
        assert fast == walk(home, policy, Slow, data=data)
        failed = [c for n in fast["nodes"] for c in n["checks"] if c["status"] == "fail"]
        assert failed, (attack.__name__, REF)
