"""End to end (out36 finding 4): ``trajledger trust VKEY`` of a second key under an origin
this user already trusts another key for.

Using a ledger signed by a new key of a known origin is refused ("a replaced key, not a
rotation"), but pinning one ahead is the user's own decision and trusts both keys, each on its
own (rev4's design, tests/e2e/test_attacks.py). It said only ``OK: ... pinned``: a vkey sent
by someone posing as the log's owner was pinned beside the genuine one with no word that the
user already held another key for that name. Now the pin says so, naming the key held and the
size seen, and what to check.
"""

from __future__ import annotations

from pathlib import Path

from testkit import Party

from trajledger.ledger.user_state import fingerprint


def test_pinning_a_second_key_for_a_known_origin_names_the_key_held(tmp_path: Path) -> None:
    real, forged = Party(tmp_path, "real"), Party(tmp_path, "forged")
    for party in (real, forged):
        party.run("init", "--origin", "x.example/log")
    user = Party(tmp_path, "user")
    user.home = real.home
    user.run("log", "info")  # a first use: the genuine key, size 0 seen
    r = user.run("trust", forged.vkey())
    lines = r.stderr.splitlines()
    assert lines[0] == f"OK: log x.example/log: key {fingerprint(forged.vkey())} pinned", r.stderr
    assert lines[1] == (
        f"WARNING: log x.example/log: you trusted another key for this origin before: "
        f"{fingerprint(real.vkey())} (size 0 seen); both are trusted now, each on its own. If "
        "its owner rotated its key, the handover from the old key is followed without a pin; "
        "if not, one of the two keys is not the owner's: check the fingerprint with them (run "
        "'trajledger trust' in a ledger of each to see its key)"), r.stderr
    assert len(lines) == 2
    # Pinning it again, or a key of an origin new to the user, says nothing more.
    r = user.run("trust", forged.vkey())
    assert "WARNING" not in r.stderr, r.stderr
    other = Party(tmp_path, "other")
    other.run("init", "--origin", "y.example/log")
    r = user.run("trust", other.vkey())
    assert "WARNING" not in r.stderr, r.stderr
