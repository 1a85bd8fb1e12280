"""The catalog of references (ledger/catalog.py): NAME@VERSION, digest, prefix, confirmed from
the log.

Every refusal is a `RefError` with the message the CLI prints; the index behind it (the user's
trust state) is a cache rebuilt from the log, and an index that disagrees with the log's signed
statements is refused, saying to rebuild it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trajledger import Ledger
from trajledger.ledger.artifacts import register_environment, register_evaluator
from trajledger.ledger.catalog import Catalog, CatalogItem, CatalogMismatchError, RefError
from trajledger.ledger.keys import Signer
from trajledger.ledger.record import record_files


@pytest.fixture
def ledger(home: Path) -> Ledger:
    return Ledger.open(home)


@pytest.fixture
def alice(ledger: Ledger) -> Signer:
    return ledger.keys.create("alice", encrypt=False)


@pytest.fixture
def cart(ledger: Ledger, alice: Signer) -> str:
    """Environment cart@1 (log index 0); returns its digest."""
    return register_environment(ledger, "cart", "1", alice, gymnasium_id="CartPole-v1").digest


def test_resolve_by_name_version_digest_and_prefix(ledger: Ledger, cart: str) -> None:
    catalog = Catalog(ledger)
    expected = CatalogItem("environment", "cart", "1", cart, 0, catalog.resolve("cart@1").envelope)
    for ref in ("cart@1", cart, cart[7:], cart[:13], cart[7:13], cart[7:20].upper(), f" {cart} "):
        assert catalog.resolve(ref) == expected, ref
    assert catalog.resolve("cart@1", {"environment"}) == expected
    assert expected.ref == "cart@1"


def test_unknown_references(ledger: Ledger, cart: str) -> None:
    catalog = Catalog(ledger)
    with pytest.raises(RefError, match=(
        r"^cart@2: environment cart has no version '2'; recorded versions: 1 \(refer to one as "
        r"cart@1\)$"
    )):
        catalog.resolve("cart@2")
    with pytest.raises(RefError, match=r"^cart@1: is an environment, not an evaluator$"):
        catalog.resolve("cart@1", {"evaluator"})
    with pytest.raises(RefError, match=(
        r"^0{64}: no artifact with this digest is recorded; see 'trajledger log show'$"
    )) as e:
        catalog.resolve("0" * 64)
    assert e.value.unknown and not e.value.suggestions
    # Five hex digits are too few for a prefix: read as a name, which names nothing.
    with pytest.raises(RefError, match=(
        r"^abcde: no artifact has this name; refer to one by NAME@VERSION, sha256:<hex> or a "
        r"digest prefix of 6\+ hex characters$"
    )):
        catalog.resolve("abcde")
    with pytest.raises(RefError, match=(
        r"^cart: needs a version \(NAME@VERSION\); recorded: cart@1$"
    )) as e:
        catalog.resolve("cart")
    assert not e.value.unknown


def test_did_you_mean(ledger: Ledger, alice: Signer, cart: str, tmp_path: Path) -> None:
    """A mistyped name, version-kept name or digest gets the closest recorded references."""
    register_environment(ledger, "pendulum", "1", alice, gymnasium_id="Pendulum-v1")
    catalog = Catalog(ledger)
    for typed, meant in (("pendulm@1", "pendulum@1"), ("PENDULUM@1", "pendulum@1"),
                         ("pendulun", "pendulum@1")):
        with pytest.raises(RefError, match=(
            rf"^{typed}: no artifact has this name; did you mean '{meant}'\?$"
        )) as e:
            catalog.resolve(typed)
        assert e.value.suggestions == (meant,) and not e.value.unknown
    with pytest.raises(RefError, match=(
        r"^pendulm@1: no environment has this name; did you mean 'pendulum@1'\?$"
    )):
        catalog.resolve("pendulm@1", {"environment"})
    # A digest with one hex digit wrong, whole or a prefix, gets the recorded digest.
    flip = {"0": "1"}.get(cart[18], "0")
    for typed in (cart[:-1] + {"0": "1"}.get(cart[-1], "0"), cart[7:18] + flip,
                  cart[:18] + flip):
        with pytest.raises(RefError, match=rf": no artifact .*; did you mean '{cart}'\?$"):
            catalog.resolve(typed)
    # Nothing close: no suggestion, and the error says so.
    with pytest.raises(RefError, match=r"^zzz@1: no artifact has this name; see 'trajledger "
                       r"log show'$") as e:
        catalog.resolve("zzz@1")
    assert e.value.unknown


def test_suggest_is_one_function_over_candidates() -> None:
    from trajledger.ledger.suggestions import did_you_mean, suggest

    keys = ["approver-a", "approver-b", "trainer", "vendor"]
    assert suggest("aprover-a", keys) == ["approver-a"]  # not also approver-b: less alike
    assert suggest("approver", keys) == ["approver-a", "approver-b"]
    assert suggest("Vendor", keys) == ["vendor"]  # case alone
    assert suggest("vendor", keys) == []  # exact: nothing to suggest
    assert suggest("zebra", keys) == []
    # Compared forms map to the suggested ones (digest prefixes, qualified names).
    assert suggest("abcdeg", {"abcdef": "sha256:abcdef01", "123456": "sha256:12345601"}) == [
        "sha256:abcdef01"]
    assert did_you_mean([]) == ""
    assert did_you_mean(["a"]) == "did you mean 'a'?"
    assert did_you_mean(["a", "b", "c"]) == "did you mean 'a', 'b' or 'c'?"


def test_versions_are_listed_in_counting_order(
    ledger: Ledger, alice: Signer, tmp_path: Path
) -> None:
    for v in ("1", "10", "2", "2.1"):
        code = tmp_path / f"env{v}.py"
        code.write_text(f"v = {v!r}\n")
        register_environment(ledger, "grid", v, alice, files=[code])
    with pytest.raises(RefError, match=(
        r"^grid@3: environment grid has no version '3'; recorded versions: 1, 2, 2.1, 10 "
        r"\(refer to one as grid@10\)$"
    )):
        Catalog(ledger).resolve("grid@3")


def test_same_name_version_in_two_kinds_is_ambiguous(
    ledger: Ledger, alice: Signer, cart: str
) -> None:
    judge = register_evaluator(ledger, "cart", "1", "human", alice).digest
    catalog = Catalog(ledger)
    with pytest.raises(
        RefError,
        match=rf"^cart@1: ambiguous, matches 2 artifacts \(environment cart@1 {cart[:19]}…, "
        rf"evaluator cart@1 {judge[:19]}…\); use the digest instead$",
    ):
        catalog.resolve("cart@1")
    assert catalog.resolve("cart@1", {"evaluator"}).digest == judge
    assert catalog.resolve("cart@1", {"environment"}).digest == cart


def test_shared_prefix_is_ambiguous(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two real digests sharing 6 hex digits would take ~16M tries; fake the index's answer.
    from trajledger.ledger.trust_index import NameRow
    from trajledger.ledger.trust_state import TrustState

    rows = [
        NameRow(0, "files", "a", "", "sha256:abcdef" + "0" * 58),
        NameRow(1, "files", "b", "", "sha256:abcdef" + "2" * 58),
    ]
    monkeypatch.setattr(TrustState, "by_prefix", lambda self, prefix: rows)
    with pytest.raises(RefError, match=r"^abcdef: ambiguous, .*; give more of the digest$"):
        Catalog(ledger).resolve("abcdef")


def test_unversioned_name_with_at_sign(ledger: Ledger, alice: Signer, tmp_path: Path) -> None:
    data = tmp_path / "f.txt"
    data.write_text("x")
    rec = record_files(ledger, [data], alice, name="rollouts-cart@1-p0")
    item = Catalog(ledger).resolve("rollouts-cart@1-p0")
    assert (item.digest, item.name, item.version) == (rec.digest, "rollouts-cart@1-p0", "")


def test_a_digest_names_one_record(ledger: Ledger, alice: Signer, tmp_path: Path) -> None:
    """The same files registered again under another version are the same manifest: a second
    record of one digest is refused (issue 18), the first stays its identity."""
    from trajledger.ledger.errors import AlreadyRecordedError

    code = tmp_path / "env.py"
    code.write_text("x = 1\n")
    one = register_environment(ledger, "grid", "1", alice, files=[code])
    with pytest.raises(AlreadyRecordedError, match=(
        rf"^environment {one.digest}: already recorded at log index 0 with other signed "
        r"metadata \(version: '1' vs '2'\); a digest names one record of this log"
    )):
        register_environment(ledger, "grid", "2", alice, files=[code])
    catalog = Catalog(ledger)
    assert catalog.resolve(one.digest).index == 0
    assert ledger.log.size == 1


def test_catalog_follows_the_log(ledger: Ledger, alice: Signer, cart: str) -> None:
    catalog = Catalog(ledger)
    assert [i.ref for i in catalog.items()] == ["cart@1"]
    register_evaluator(ledger, "judge", "1", "deterministic", alice)
    assert [i.ref for i in catalog.items()] == ["cart@1", "judge@1"]
    assert [i.ref for i in catalog.by_kind("evaluator")] == ["judge@1"]


def test_a_forgotten_index_is_rebuilt_from_the_log(
    ledger: Ledger, alice: Signer, cart: str
) -> None:
    register_evaluator(ledger, "judge", "1", "deterministic", alice)
    good = Catalog(ledger).items()
    ledger.trust_state().rebuild()
    assert Catalog(Ledger.open(ledger.root)).items() == good


def _edit_index(ledger: Ledger, sql: str, *args: object) -> None:
    import sqlite3

    state = ledger.trust_state()
    db = sqlite3.connect(state.path / "state.sqlite")
    db.execute(sql, args)
    db.commit()
    db.close()


def test_an_index_that_disagrees_with_the_log_is_refused(
    ledger: Ledger, alice: Signer, cart: str, tmp_path: Path
) -> None:
    code = tmp_path / "env.py"
    code.write_text("x = 2\n")
    two = register_environment(ledger, "cart", "2", alice, files=[code])
    # Make cart@2 point at cart@1's record: the signed statement says cart@1 (as many rows as
    # before: a deleted row is refused before, by the state's counts).
    _edit_index(ledger, "UPDATE names SET version = '2-old' WHERE subject = ?", two.digest)
    _edit_index(ledger, "UPDATE names SET version = '2' WHERE subject = ?", cart)
    with pytest.raises(CatalogMismatchError, match=(
        r"^log entry 0: the index names it cart@2, its signed statement says cart@1; the index "
        r"of the log disagrees with the log; rebuild it with 'trajledger reindex'$"
    )):
        Catalog(Ledger.open(ledger.root)).resolve("cart@2")
