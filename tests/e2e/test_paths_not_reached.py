"""Paths no test reached (rev35's Left), each reached by a history of the exchange's steps.

- ``ledger.split_trust.untrusted_note``'s refusal path: a train set of a batch a vendor's
  holdout holds, whose record the buyer's marking distrusts, is refused naming that record,
  why it is not trusted and that it holds out all the same (fail closed: hold35).
- ``verify.releases._unverified_suite``: a requirement's suite whose only record of that name
  does not verify here (the vendor's holdout named ``suite@1``, distrusted by the marking) is
  "missing", naming the record and why, not a plain "missing".
- ``ledger.catalog.Origins.first`` after an erasure and a re-import: the record's source stays
  the log of its first import (the one an erasure by the vendor's own key would be judged by).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from test_histories_agree import Step
from test_histories_exchange import Side, replay, run_history

from trajledger.ledger.home import LedgerHome


@contextmanager
def opened(side: Side) -> Iterator[LedgerHome]:
    """``side``'s ledger, in its own user state (what its commands read)."""
    before = os.environ.get("TRAJLEDGER_STATE_DIR")
    os.environ["TRAJLEDGER_STATE_DIR"] = str(side.state)
    try:
        yield LedgerHome.open(side.home)
    finally:
        if before is None:
            del os.environ["TRAJLEDGER_STATE_DIR"]
        else:
            os.environ["TRAJLEDGER_STATE_DIR"] = before


def test_a_distrusted_holdout_refuses_by_name_and_is_no_verified_suite(tmp_path: Path) -> None:
    from trajledger.ledger.policy_state import current_policy
    from trajledger.runner.verification import ledger_verifier
    from trajledger.verify.release_rules import Requirement
    from trajledger.verify.releases import release_suite

    run = run_history(tmp_path / "h", [
        Step("vrecord", ("v0", 0, "orig", False)), Step("vrecord", ("v1", 0, "orig", False)),
        Step("vdataset", ("wh", ("v1",), "holdout")), Step("vdataset", ("vsuite", ("v0",),
                                                                        "holdout")),
        Step("ship", ("wh",)), Step("ship", ("vsuite",)), Step("bmark", ("wh",))])
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    m, b = run.model, run.buyer
    r = b.cli("dataset", "create", "d3", "--version", "1", "--split", "train", "--batch",
              m.buyer["v1"].digest, "--key", "producer")
    said = " ".join(r.output.split())
    assert r.exit_code == 1 and (
        f"batch {m.buyer['v1'].digest} is already in holdout dataset wh@1 ") in said and \
        re.search(r"; its record \(log index \d+\) is not trusted here \(dataset record \d+: no "
                  r"signature by a trusted key: .* compromised since log index", said) and (
        "): held out all the same (fail closed") in said, said
    with opened(b) as ledger:
        found = current_policy(ledger)
        assert found is not None
        verifier = ledger_verifier(ledger, found[1], data="size")
        try:
            digest, why = release_suite(verifier, Requirement("suite@1"), ledger.log.size)
        finally:
            verifier.close()
    # Not a plain "missing": the record of that name, and why it counts for nothing here.
    assert digest is None and why is not None, why
    assert "the holdout dataset suite@1 (log index" in why and "compromised" in why, why


def test_the_first_import_stays_the_source_after_an_erasure_and_a_re_import(
        tmp_path: Path) -> None:
    """The buyer imports ``v1``, its approver erases it, the vendor rotates its log key and
    ships a dataset of ``v1``: that import lists ``v1``'s record again, under the new key.
    The record's source is the log of its first import, under the key it came by."""
    from trajledger.ledger.catalog import Origins

    run = run_history(tmp_path / "h", [
        Step("vrecord", ("v1", 0, "orig", False)), Step("ship", ("v1",)),
        Step("berase", ("v1",))])
    with opened(run.vendor) as vendor:
        old = vendor.log.vkey
    run.vendor.run("log", "rotate-key")
    replay(run, [Step("vdataset", ("w1", ("v1",), "train")), Step("ship", ("w1",))])
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    with opened(run.vendor) as vendor:
        new = vendor.log.vkey
    assert new != old
    digest = run.model.buyer["v1"].digest
    with opened(run.buyer) as ledger:
        state = ledger.trust_state()
        [index] = [i for i in state.about(digest)
                   if (e := state.entry(i)) is not None and e.kind == "rollout-batch"]
        listed = [j for j in state.listing(state.entry(index).envelope)
                  if (e := state.entry(j)) is not None and e.kind == "import"]
        assert len(listed) == 2, listed  # the first import, then the one after the erasure
        origins = Origins(ledger)
        assert origins.of(index) == {old, new}
        assert origins.first(index) == old
