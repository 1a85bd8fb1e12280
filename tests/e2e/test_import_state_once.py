"""End to end (upd44, twenty-ninth round): an import asks this ledger's state once a step of
its appends, and decides as before.

xfer43's Left: `updates.apply_update` and the steps it runs brought the buyer's trust state up
to its log (verified its checkpoint, counted every derived table's rows, began and committed a
write transaction) 22 to 24 times an import, most through the import records read again
(`_compromises` -> `_imports`), and each step asking for itself. Now the state is asked once
before the appends and once after each (the group commit; a key compromise's revocations), and
handed to every step (`updates.SHARE_STATE`). Each case below builds the buyer once, copies it,
and runs the same import on both copies, one by each path: the exit code, the lines, the JSON
and what the buyer then decides (``verify``, ``admit``, the log's size) must be the same, on
hostile inputs: a revocation in the same bundle as the record it revokes, a key compromise whose
revocations are appended in the middle of the import, a rollback, a fork.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_updates import Buyer, Vendor, declare_compromised, vendor_copy

from trajledger.ledger import updates
from trajledger.ledger.trust_state import TrustState

OWN_SYNCS = 13
"""The syncs of the buyer's own state a plain import makes at most now (22 to 24 before; 12
until out60 had the log's own keys verified against its policy history held here,
`update_compromises.own_signed`, which reads this ledger's import records once more)."""


def _twin(party: Vendor | Buyer, root: Path, name: str) -> Any:
    """A copy of ``party``'s ledger and user state under ``root/name``."""
    twin = type(party).__new__(type(party))
    twin.__dict__.update(party.__dict__)
    twin.home, twin.state = root / name, root / f"{name}-state"
    shutil.copytree(party.home, twin.home, symlinks=True)
    shutil.copytree(party.state, twin.state, symlinks=True)
    return twin


def _decisions(buyer: Buyer, after: Callable[[Buyer], list[str]], *args: str | Path,
               code: int, monkeypatch: pytest.MonkeyPatch, shared: bool, tag: str
               ) -> tuple[list[str], int]:
    """``import ARGS`` on a copy of ``buyer`` by one path, then ``after``'s commands: what they
    said (the copy's directories and the times named alike), and the syncs of the buyer's own
    state the import made."""
    copy = _twin(buyer, buyer.home.parent, f"copy-{tag}-{shared}")
    mine, syncs = buyer.vkey(), [0]
    real = TrustState.sync

    def counting(self: TrustState, *a: Any, **k: Any) -> None:
        syncs[0] += self.vkey == mine
        real(self, *a, **k)

    with monkeypatch.context() as m:
        m.setattr(updates, "SHARE_STATE", shared)
        m.setattr(TrustState, "sync", counting)
        r = copy.run("import", *args, "--key", "approver", "--json", code=code)
    said = [str(r.exit_code), r.stdout, r.stderr, str(copy.size()), *after(copy)]
    for d in (copy.state, copy.home):
        said = [s.replace(str(d), "HOME") for s in said]
    return [re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "TIME", s) for s in said], syncs[0]


def _same(buyer: Buyer, after: Callable[[Buyer], list[str]], *args: str | Path, code: int,
          monkeypatch: pytest.MonkeyPatch, most: int | None = None, tag: str = "") -> list[str]:
    """The import by both paths: the same decisions (returned); with ``most``, the new path's
    syncs at most that, the old path's more (not asked where a revocation is signed: its
    record's second may be tried again, `same_second.recorded_anew`, one sync more or less)."""
    new, count = _decisions(buyer, after, *args, code=code, monkeypatch=monkeypatch,
                            shared=True, tag=tag)
    old, before = _decisions(buyer, after, *args, code=code, monkeypatch=monkeypatch,
                             shared=False, tag=tag)
    assert new == old
    assert most is None or count <= most < before, (count, before)
    return new


def _verdicts(*refs: str) -> Callable[[Buyer], list[str]]:
    """``verify`` and ``admit`` of each of ``refs``: exit code and what they print."""
    from testkit import new_runner

    from trajledger.runner.cli import main

    def run(b: Buyer) -> list[str]:
        out = []
        for ref in refs:
            for cmd in ("verify", "admit"):
                r = new_runner().invoke(main, ["--ledger", str(b.home), cmd, ref],
                                        env={"TRAJLEDGER_STATE_DIR": str(b.state)})
                assert "Traceback" not in r.output, r.output
                out += [str(r.exit_code), r.stdout, r.stderr]
        return out
    return run


def test_a_revocation_in_the_bundle_of_the_record_it_revokes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    bundle = tmp_path / "revoked.tar.zst"
    vendor.run("export", "bh@1", "--out", bundle)
    said = _same(buyer, _verdicts(vendor.dataset, vendor.batches[0]), bundle, code=0,
                 monkeypatch=monkeypatch, most=OWN_SYNCS)
    assert "revoked" in said[2] + said[4], said


def test_a_key_compromise_revoking_in_the_middle_of_the_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vendor declares its key compromised and revokes a batch in the same update: the
    compromise's revocations are appended by step 4, step 5 judges the vendor's own after."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    buyer.run("import", vendor.bundle, "--key", "approver")
    applied = vendor.size()
    keys = json.loads(vendor.run("key", "list", "--json").stdout)
    keyid = next(k["keyid"] for k in keys if k["name"] == "vendor")
    vendor.run("revoke", vendor.batches[1], "--reason", "wrong env", "--key", "vendor")
    declare_compromised(vendor, vendor.home / "policy-2.toml", keyid)
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    said = _same(buyer, _verdicts(vendor.dataset), update, code=0, monkeypatch=monkeypatch)
    report = json.loads(said[1])["import"]
    assert report["compromised"] and report["compromised"][0]["revokedHere"], report
    assert report["revoked"], report


def test_a_rollback_and_a_fork(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    older = _twin(vendor, tmp_path, "older")  # the log at an earlier size
    fork = _twin(vendor, tmp_path, "fork")
    vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    fork.run("revoke", fork.batches[1], "--reason", "another history", "--key", "vendor")
    newer = tmp_path / "newer.tar.zst"
    vendor.run("export", "bh@1", "--out", newer)
    buyer.run("import", newer, "--key", "approver")
    for twin, name, word in ((older, "older", "rollback"), (fork, "fork", "fork")):
        bundle = tmp_path / f"{name}.tar.zst"
        twin.run("export", "bh@1", "--out", bundle)
        said = _same(buyer, _verdicts(vendor.dataset), bundle, code=1,
                     monkeypatch=monkeypatch, tag=name)
        assert word in said[2], said
