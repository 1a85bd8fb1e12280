"""Log key handovers (``verify.log_key``): the format, its signatures, and following a chain.

One test per attack: a handover signed by one key only, a plain checkpoint re-signed by a new
key (no successor named), keys of another log, two successors of one key, a cycle, a chain
that hands over a smaller tree.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from trajledger.ledger.encode import checkpoint_text, format_signature_line, vkey_string
from trajledger.ledger.keys import Signer
from trajledger.verify import log_key
from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.errors import (
    FormatError,
    ProvenanceError,
    SignatureError,
    VerificationError,
)
from trajledger.verify.log_key import (
    HANDOVER_EXTENSION,
    MAX_HANDOVERS,
    handover_checkpoint,
    key_chain,
    parse_handover,
    parse_handovers,
    predecessors,
)
from trajledger.verify.note import verifier_from_vkey

ORIGIN = "test/log"
KEYS = [Signer.generate(f"k{i}") for i in range(6)]


def vkey(i: int, origin: str = ORIGIN) -> str:
    return vkey_string(origin, KEYS[i].public.raw_ed25519())


def sign(text: bytes, *who: int, origin: str = ORIGIN) -> bytes:
    lines = b""
    for i in who:
        kh = verifier_from_vkey(vkey(i, origin)).key_hash
        lines += format_signature_line(origin, kh, KEYS[i].sign(text))
    return text + b"\n" + lines


def handover(old: int, new: int, size: int = 5, signers: tuple[int, ...] | None = None) -> bytes:
    cp = handover_checkpoint(Checkpoint(ORIGIN, size, bytes(32)), vkey(old), vkey(new))
    return sign(checkpoint_text(cp), *(signers if signers is not None else (old, new)))


def test_a_handover_names_both_keys_and_is_signed_by_both() -> None:
    h = parse_handover(handover(0, 1))
    assert (h.old, h.new, h.checkpoint.size) == (vkey(0), vkey(1), 5)
    assert h.checkpoint.extensions == (f"{HANDOVER_EXTENSION} {vkey(0)} {vkey(1)}",)


@pytest.mark.parametrize(("signers", "missing"), [((0,), "new"), ((1,), "old"), ((), "old")])
def test_a_handover_needs_both_signatures(signers: tuple[int, ...], missing: str) -> None:
    note = handover(0, 1, signers=signers) if signers else handover(0, 1, signers=(2,))
    with pytest.raises(SignatureError, match=f"not signed by the {missing} key"):
        parse_handover(note)


def test_a_plain_checkpoint_cannot_become_a_handover() -> None:
    # The old key's signature over a checkpoint names no successor.
    text = checkpoint_text(Checkpoint(ORIGIN, 5, bytes(32)))
    with pytest.raises(FormatError, match="want one extension line"):
        parse_handover(sign(text, 0, 1))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (f"{HANDOVER_EXTENSION} {vkey(0)}", "want one extension line"),
        (f"other/extension {vkey(0)} {vkey(1)}", "want one extension line"),
        (f"{HANDOVER_EXTENSION} {vkey(0)} {vkey(0)}", "hands the key .* over to itself"),
        (f"{HANDOVER_EXTENSION} {vkey(0)} {vkey(1, 'other/log')}",
         "new key .* is not an Ed25519 log key named 'test/log'"),
        (f"{HANDOVER_EXTENSION} {vkey(0)} nonsense", "new key: verifier key 'nonsense'"),
    ],
    ids=["one key", "other extension", "same key", "other log", "bad vkey"],
)
def test_malformed_handovers(line: str, message: str) -> None:
    text = checkpoint_text(Checkpoint(ORIGIN, 5, bytes(32), (line,)))
    with pytest.raises(FormatError, match=message):
        parse_handover(sign(text, 0, 1), "handover")
    with pytest.raises(FormatError, match="handover: "):
        parse_handover(b"not a note", "handover")


def test_key_chain() -> None:
    notes = [handover(1, 2, 9), handover(0, 1, 5), handover(3, 0, 2)]  # any order
    assert [h.new for h in key_chain(vkey(0), notes)] == [vkey(1), vkey(2)]
    assert [h.new for h in key_chain(vkey(1), notes)] == [vkey(2)]
    assert key_chain(vkey(2), notes) == []
    assert [h.new for h in key_chain(vkey(0), [*notes, handover(0, 1, 5)])] == [vkey(1), vkey(2)]


def test_two_successors_of_one_key_are_a_fork() -> None:
    with pytest.raises(VerificationError, match=r"handed over to 2 different keys.*forked"):
        key_chain(vkey(0), [handover(0, 1), handover(0, 2)])


def test_a_cycle_is_refused() -> None:
    with pytest.raises(VerificationError, match="go round in a circle"):
        key_chain(vkey(0), [handover(0, 1, 5), handover(1, 0, 6)])


def test_a_smaller_tree_cannot_be_handed_over() -> None:
    with pytest.raises(VerificationError, match="handed over at size 4, smaller than the 5"):
        key_chain(vkey(0), [handover(0, 1, 5), handover(1, 2, 4)])


def test_a_bad_note_fails_the_chain() -> None:
    with pytest.raises(SignatureError, match="key handover 2: not signed by the new key"):
        key_chain(vkey(0), [handover(0, 1), handover(1, 2, signers=(1,))])


def test_a_bundle_of_more_handovers_than_a_log_rotates_is_refused_unread() -> None:
    """rev35 finding 3: following the chains (`predecessors`, in every verification and import
    of a bundle with handovers, and `ledger.first_contact.applied_across`) parses every note
    once per note: 200 unrelated handovers a relay adds to a bundle took 12.8 CPU-s, 3,000
    (a megabyte) most of an hour. At most `MAX_HANDOVERS` are read; the count is checked
    before any is parsed."""
    junk = {n: b"not a note" for n in range(1, MAX_HANDOVERS + 2)}
    with pytest.raises(FormatError, match=rf"^b: {MAX_HANDOVERS + 1} key handovers, more than "
                       rf"{MAX_HANDOVERS}$"):
        parse_handovers(junk, "b")
    del junk[MAX_HANDOVERS + 1]
    with pytest.raises(FormatError, match=r"^b: member key-handovers/1: "):
        parse_handovers(junk, "b")


def test_a_bundle_s_handovers_are_numbered_from_1_and_each_is_checked() -> None:
    parse_handovers({1: handover(0, 1), 2: handover(1, 2)}, "b")
    with pytest.raises(FormatError, match=r"^b: key handovers are not numbered 1\.\.2$"):
        parse_handovers({1: handover(0, 1), 3: handover(1, 2)}, "b")
    with pytest.raises(SignatureError, match=r"^b: member key-handovers/2: not signed by the new"):
        parse_handovers({1: handover(0, 1), 2: handover(1, 2, signers=(1,))}, "b")


# -- rev36 (twenty-fourth round; docs/SECURITY.md): `predecessors` parses each handover once.
# rev35 bounded a bundle's handovers at `MAX_HANDOVERS` because following the chains parsed
# every note once per note (200 took 12.8 CPU-s). ``monitor`` of a ledger holding imports reads
# the handovers a log serves (`ledger.monitor._fetch_handovers`: up to 1,000, no bundle's bound)
# and followed them through the same `predecessors`: a log, or a relay serving it, serving 1,000
# valid handovers (keys of its own, each note signed by both) cost every run of the buyer's
# monitor a million parses, two signature checks each. Each note is now parsed once.


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    seen: list[bytes] = []
    real = log_key.parse_handover

    def counted(note: bytes, what: str = "key handover") -> log_key.Handover:
        seen.append(note)
        return real(note, what)

    monkeypatch.setattr(log_key, "parse_handover", counted)
    return seen


def test_each_served_handover_is_parsed_once(parses: list[bytes]) -> None:
    notes = [handover(0, 1, 5), handover(1, 2, 6), handover(2, 3, 7)]
    assert predecessors([vkey(3)], notes) == [vkey(0), vkey(1), vkey(2)]
    assert len(parses) == len(notes)  # was 3 + 3 x 3


def test_a_note_that_does_not_verify_still_leads_nowhere(parses: list[bytes]) -> None:
    notes = [handover(0, 1, 5), handover(1, 2, 6, signers=(1,)), handover(2, 3, 7)]
    assert predecessors([vkey(3)], notes) == []
    assert predecessors([vkey(1)], [handover(0, 1, 5)]) == [vkey(0)]
    assert predecessors([vkey(3)], [handover(0, 1, 5)]) == []  # unrelated
def chains_one_note_at_a_time(trusted: Sequence[str], notes: Sequence[bytes]) -> list[str]:
    """`predecessors` as rev35 left it: `key_chain` followed once per note (each call parses
    and verifies every note), the definition the linear one is held to."""
    out = []
    for note in notes:
        try:
            old = parse_handover(note).old
            if old not in trusted and {h.new for h in key_chain(old, notes)} & set(trusted):
                out.append(old)
        except ProvenanceError:
            continue
    return out


def test_predecessors_parses_each_note_once_and_finds_the_same_chains(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """rev35's Left: `predecessors` called `key_chain` once per note, so n notes cost n * n
    parses and 2 n * n signature checks (64, the bundle's cap, about 1.3 CPU-s). Now each note
    is parsed once and the chains walked in the parsed handovers: the same keys, in the same
    order, as the definition finds, for chains, forks, cycles, smaller trees, a repeated note
    and a bad one among them (seeded random sets of six keys' handovers)."""
    bad = handover(2, 3, signers=(2,))
    pool = [handover(a, b, size) for a in range(6) for b in range(6) if a != b
            for size in (4, 5)] + [bad]
    chain = [handover(0, 1, 4), handover(1, 2, 5), handover(2, 3, 5)]
    cases: list[tuple[list[str], list[bytes]]] = [
        ([vkey(3)], chain), ([vkey(3)], chain[::-1]), ([vkey(2)], chain), ([vkey(0)], chain),
        ([vkey(3)], [*chain, handover(1, 4)]), ([vkey(3)], [*chain, bad]),
        ([vkey(3)], [*chain, chain[0]]), ([vkey(0)], [*chain, handover(3, 0, 6)])]
    rnd = random.Random(39)
    cases += [([vkey(i) for i in rnd.sample(range(6), rnd.randint(1, 2))],
               rnd.sample(pool, rnd.randint(0, 6))) for _ in range(150)]
    found = 0
    for trusted, notes in cases:
        want = chains_one_note_at_a_time(trusted, notes)
        assert predecessors(trusted, notes) == want, (trusted, notes)
        found += bool(want)
    assert predecessors([vkey(3)], chain) == [vkey(0), vkey(1), vkey(2)]
    assert found > 10  # (chains were there to find)
    parses = []
    real = log_key.parse_handover
    monkeypatch.setattr(log_key, "parse_handover",
                        lambda *a, **k: parses.append(1) or real(*a, **k))
    notes = [handover(i, i + 1, 5) for i in range(5)]
    assert predecessors([vkey(5)], notes) == [vkey(i) for i in range(5)]
    assert len(parses) == len(notes)  # (rev35's: 5 + 5 * 5)
