"""End to end (upd46, thirty-first round; upd45's Left, its finding 5 in a first import): an
artifact's bundle that carries an extension stores only what the buyer's records name.

The vendor records a batch the buyer never holds and revokes it, then exports its dataset with
its log since 0 (``--updates-since 0``: the revocation's envelope carried, a record of the
extension). Before: the buyer's first import of that bundle stored the revocation's envelope,
which neither an entry of the buyer's log nor its import record names (an orphan a vendor sends
at will; an update alone, and an older bundle imported again since upd45, drop those). Now every
envelope the import stores is named here.
"""

from __future__ import annotations

import os
from pathlib import Path

from test_erased_not_restored import files_of, stored
from test_updates import Buyer, rollouts, vendor_copy


def _envelopes(buyer: Buyer, digests: set[str]) -> set[str]:
    return {d for d in digests if (buyer.home / "objects" / "sha256" / d[7:9] / d[9:11]
                                   / d[7:]).read_bytes().startswith(b'{"payload"')}


def test_a_first_import_with_an_extension_stores_only_what_this_ledger_names(
        tmp_path: Path) -> None:
    from trajledger.ledger.home import LedgerHome
    from trajledger.ledger.update_reads import import_records

    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    other = vendor.last("record", rollouts(tmp_path / "z.parquet", 7), "--env", "grid@1",
                        "--policy", "scripted", "--name", "z-1", "--licence", "CC-BY-4.0",
                        "--key", "vendor")  # fmt: skip
    vendor.run("revoke", other, "--reason", "bad", "--key", "vendor")
    whole = tmp_path / "whole.tar.zst"
    vendor.run("export", "bh@1", "--updates-since", "0", "--out", whole)
    buyer = Buyer(tmp_path, [vendor])
    before = stored(buyer)
    buyer.run("import", whole, "--key", "approver")
    new = stored(buyer) - before
    os.environ["TRAJLEDGER_STATE_DIR"] = str(buyer.state)
    home = LedgerHome.open(buyer.home)
    listed = {e for _i, p in import_records(home) for e in p.envelopes}
    orphans = {d for d in _envelopes(buyer, new)
               if home.log.find_envelope(d) is None and d not in listed}
    assert not orphans, orphans
    assert files_of(vendor, vendor.batches[0]) | files_of(vendor, vendor.batches[1]) <= new
    buyer.run("verify", "bh@1")
