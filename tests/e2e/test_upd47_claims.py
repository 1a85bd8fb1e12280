"""End to end (upd47, thirty-second round; upd46's Left): what a relay's claim stopped.

Vendor two relays vendor one's records (its imports unpublished) and is the buyer's only
source of them; it declares one's key compromised since 0. The buyer cannot place the key
(one's log not met: it signed none of two's policies, no other log's known), so what two alone
brought is revoked, as any log's declaration stops what it alone brought (upd46: a thief's
log may sign its policy with a stolen key, so a claim may not leave that standing). When
one's own records come, the key signed one's policies: two's word is a claim. Before, the
buyer was told `(not revoked here)` though four artifacts were revoked here on it.

Decided: not undone (a revocation stands): the log met later whose policies the key signed
may be a thief's (its policy signed with the stolen key) and the declarer the real owner whose
policies only its approvers sign; undoing on that evidence would hand the thief the owner's
revocations. The claim names what was revoked on it before (``revokedBefore``), what stands,
and the way on, at `import` and `monitor` alike.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from test_evaluations import evals_template, home, script  # noqa: F401
from test_updates import Buyer, Vendor, served, vendor_copy
from test_whose_declaration import owner_declares, relaying_parties, thief_and_owner, two_declares
from testkit import Party


def _stopped_then(tmp_path: Path) -> tuple[Vendor, Vendor, Buyer, str, set[str]]:
    """Two, the buyer's only source of one's records, declares one's key since 0: one, two,
    the buyer, the key, what was revoked here."""
    one, two, buyer, relay, theirs = relaying_parties(tmp_path)
    buyer.run("import", relay, "--key", "approver")
    r = two_declares(tmp_path, one, two, buyer, theirs, since=0)
    (item,) = json.loads(r.stdout)["import"]["compromised"]
    revoked = set(item["revokedHere"])
    assert {*one.batches, one.dataset} <= revoked, item
    return one, two, buyer, theirs, revoked


def _named(report: Any, stderr: str, one: Vendor, theirs: str, revoked: set[str]) -> None:
    (item,) = [s for s in report["suspect"] if s.get("claim")]
    assert item["key"] == theirs and item["owner"] == one.origin, item
    assert set(item["revokedBefore"]) == revoked, item
    assert item["revokedHere"] == [], item  # nothing more revoked now
    text = item["text"]
    assert "not revoked here" not in text, text
    assert "revoked here on its word before you met one.example/log+" in text, text
    assert "and not undone" in text and "ask it to record what was revoked again" in text, text
    assert f"WARNING: {text}" in stderr, stderr


def test_the_owners_records_after_a_claim_name_what_it_revoked(tmp_path: Path) -> None:
    one, _two, buyer, theirs, revoked = _stopped_then(tmp_path)
    r = buyer.run("import", one.bundle, "--key", "approver", "--json")
    _named(json.loads(r.stdout)["import"], r.stderr, one, theirs, revoked)
    r = buyer.run("verify", one.dataset, code=1)  # it stands
    assert "revoked" in r.output, r.output


def test_monitor_of_the_owners_log_after_a_claim_names_what_it_revoked(tmp_path: Path) -> None:
    """Without keys (nothing recorded) each run names it; with keys, once."""
    one, _two, buyer, theirs, revoked = _stopped_then(tmp_path)
    size = buyer.size()
    for url in served(one):
        for _ in range(2):
            r = buyer.run("monitor", url, "--vkey", one.vkey(), "--json")
            _named(json.loads(r.stdout)["updates"], r.stderr, one, theirs, revoked)
            assert buyer.size() == size
        r = buyer.run("monitor", url, "--vkey", one.vkey(), "--key", "approver", "--json")
        _named(json.loads(r.stdout)["updates"], r.stderr, one, theirs, revoked)
        r = buyer.run("monitor", url, "--vkey", one.vkey(), "--key", "approver")
        assert theirs[:16] not in r.stderr, r.stderr


def test_a_thiefs_log_met_after_the_owners_declaration_undoes_nothing(tmp_path: Path) -> None:
    """The other order of the attacker upd46's thief test plays: one's policies are signed by
    its approver only; one declares its producer key compromised since 0, which revokes what
    one alone brought (the buyer cannot place the key: the conditional line). Then the thief's
    log x comes, its policy signed with the stolen key: one's word now reads as a claim naming
    x, and what it revoked is named, not undone (re-judging here would hand the thief the
    owner's revocations)."""
    one, buyer, bundle, envs, batches, dataset = thief_and_owner(tmp_path)
    buyer.run("import", bundle, "--key", "approver")
    update = owner_declares(tmp_path, one)
    r = buyer.run("import", update, "--key", "approver", "--json")
    (item,) = json.loads(r.stdout)["import"]["compromised"]
    assert {*batches, dataset} <= set(item["revokedHere"]), item
    r = buyer.run("import", envs, "--key", "approver", "--json")
    (claim,) = [s for s in json.loads(r.stdout)["import"]["suspect"] if s.get("claim")]
    assert claim["owner"].startswith("x.example/log+"), claim
    assert set(claim["revokedBefore"]) == set(item["revokedHere"]), claim
    r = buyer.run("verify", dataset, code=1)  # not undone
    assert "revoked" in r.output, r.output


def _declares(two: Vendor, one: Vendor, theirs: str) -> None:
    """Two's successor without one's key ``theirs``, declaring it compromised since 0 (as
    `two_declares`, nothing exported)."""
    policy = two.home / "policy.toml"
    one_pem = (one.home / "keys" / "vendor.pub").read_text()
    policy.write_text(policy.read_text().replace("serial = 2", "serial = 3").replace(
        f'"""{one_pem}""",', "") + f'\n[[revoked_keys]]\nkey = "{theirs}"\n'
                      'compromised_since = 0\nreason = "hostile"\n')
    two.run("policy", "set", policy, "--key", "mal-approver", "--yes")


def test_monitor_without_keys_names_a_claim_that_would_revoke(tmp_path: Path) -> None:
    """upd46's untested path: `pending_compromises` with a claim that would revoke. One's log
    known (its environment), two the only source of one's batches and dataset; two declares
    one's key since 0 and the buyer monitors two without keys: the pending item names the
    claim (one's key, none of two's policies) and what applying it would revoke; nothing is
    recorded."""
    one, two, buyer, relay, theirs = relaying_parties(tmp_path)
    env = tmp_path / "env.tar.zst"
    one.run("export", "grid@1", "--out", env)
    buyer.run("import", env, "--key", "approver")
    buyer.run("import", relay, "--key", "approver")
    _declares(two, one, theirs)
    size = buyer.size()
    for url in served(two):
        r = buyer.run("monitor", url, "--vkey", two.vkey(), "--json", "--fail-on-revocation",
                      code=1)  # fmt: skip
        (item,) = [p for p in json.loads(r.stdout)["updates"]["pending"]
                   if p["kind"] == "key compromise"]
        assert item["key"] == theirs and set(item["digests"]) == {*one.batches, one.dataset}
        assert f"it signed the policies of {one.origin} and none of two.example/log+" \
            in item["text"], item
        assert "a claim, not its owner's declaration" in item["text"], item
        assert "your policy trusts it" not in item["text"], item
        assert f"WARNING: {item['text']}" in r.stderr, r.stderr
    assert buyer.size() == size


def test_a_claim_on_records_the_relay_brought_first_gives_no_suspect_line(
        tmp_path: Path) -> None:
    """upd46's untested path: step 2b's ``not owner`` guard. Two brought one's records first,
    one's own bundle brought them too (so they are not two's alone), then two declares one's
    key: the claim only, not also step 2b's `signed what you hold from another log … if the
    key is theirs` line, which a declaration by the key's owner gives."""
    one, two, buyer, relay, theirs = relaying_parties(tmp_path)
    buyer.run("import", relay, "--key", "approver")
    buyer.run("import", one.bundle, "--key", "approver")
    r = two_declares(tmp_path, one, two, buyer, theirs, since=0)
    report = json.loads(r.stdout)["import"]
    assert [s.get("claim") for s in report["suspect"]] == [True], report["suspect"]
    assert "signed what you hold from another log" not in r.stderr, r.stderr
    assert report["compromised"] == [], report["compromised"]


def test_an_imported_evaluations_ok_line_names_its_kind_once(
        home: Path, script: Path, tmp_path: Path) -> None:  # noqa: F811
    """out46's Left: `import`'s OK line said `evaluation evaluation of bc@1 on regression@1`:
    an evaluation's name says its kind."""
    from test_evaluations import POLICY, evaluate
    from testkit import new_runner

    digest = evaluate(new_runner(), home, script, "pass")
    bundle = tmp_path / "eval.tar.zst"
    lab = Party(tmp_path, "lab")
    lab.home = home
    lab.run("export", digest, "--out", bundle)
    auditor = Party(tmp_path, "auditor")
    auditor.run("init", "--origin", "auditor.example/log")
    shutil.copytree(home / "keys", auditor.home / "keys", dirs_exist_ok=True)  # the lab's
    text = POLICY.format(vkey=lab.vkey()).replace("vkeys = [", f'vkeys = ["{auditor.vkey()}", ')
    (auditor.home / "policy.toml").write_text(text)
    auditor.run("policy", "set", auditor.home / "policy.toml", "--key", "approver", "--yes")
    r = auditor.run("import", bundle, "--key", "approver")
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("OK: ") and " from " in x]
    assert line.startswith("OK: evaluation of bc@1 on regression@1 (sha256:"), r.stderr


def _import_envelope(party: Vendor) -> str:
    """The hex digest of the envelope of ``party``'s one import record."""
    from trajledger.ledger.home import LedgerHome
    from trajledger.verify.log_entry import LogEntry

    log = LedgerHome.open(party.home).log
    (env,) = [e.envelope for i in range(log.size)
              if (e := LogEntry.from_bytes(log.entry(i))).kind == "import"]
    return env.split(":")[-1]


def test_a_logs_import_records_are_published_only_when_its_policy_says(
        tmp_path: Path, monkeypatch: Any) -> None:
    """The decision on publishing imports (docs/third-party.md, upd47): not by default. Two
    relays one's dataset under the default ``publish``: its served log and its update bundle
    carry its import record's entry, not the envelope (which names its supplier and what it
    took in); three, whose policy adds ``import``, serves it."""
    import urllib.error
    import urllib.request

    from test_borrowed_handovers import relays
    from test_relaying_declarer import _publishing_imports

    one = vendor_copy(tmp_path, "one", "one.example/log")
    for name, publish in (("two", False), ("three", True)):
        party = vendor_copy(tmp_path, name, f"{name}.example/log", seeds=(3, 4))
        if publish:
            _publishing_imports(party)
        relays(party, one)
        monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(party.state))
        hexdigest = _import_envelope(party)
        for url in served(party):
            try:
                with urllib.request.urlopen(f"{url.rstrip('/')}/envelopes/{hexdigest}") as got:
                    status = got.status
            except urllib.error.HTTPError as e:
                status = e.code
            assert status == (200 if publish else 404), (name, status)
        update = tmp_path / f"{name}-update.tar.zst"
        party.run("export", "--updates-since", "0", "--out", update)
        members = _members(update)
        assert any(hexdigest in m for m in members) is publish, (name, members)


def _members(bundle: Path) -> list[str]:
    import io
    import tarfile

    import zstandard

    with bundle.open("rb") as f:
        data = zstandard.ZstdDecompressor().stream_reader(f).read()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.getnames()


# -- attacks on the above (upd47 item 5): probes that held ----------------------------------------
def test_a_replayed_declaration_revokes_nothing_more_and_names_nothing_new(
        tmp_path: Path) -> None:
    """Two's update bundle carrying its declaration, imported again after one's records named
    the claim: applied already, nothing recorded, no line of the key."""
    one, two, buyer, relay, theirs = relaying_parties(tmp_path)
    buyer.run("import", relay, "--key", "approver")
    two_declares(tmp_path, one, two, buyer, theirs, since=0)
    buyer.run("import", one.bundle, "--key", "approver")
    size = buyer.size()
    r = buyer.run("import", tmp_path / "two-update.tar.zst", "--key", "approver")
    assert "applied already up to the bundle's checkpoint; nothing new" in r.stderr, r.stderr
    assert theirs[:16] not in r.stderr and buyer.size() == size, r.stderr


def test_two_relays_disagreeing_stop_nothing_and_the_claim_names_nothing_revoked(
        tmp_path: Path) -> None:
    """Two and three both relay one's records; two declares one's key since 0, three does
    not: not two's alone, so nothing is revoked; when one's records come, the claim says `not
    revoked here` (``revokedBefore`` empty: `_revoked_on` names only its own revocations made
    on that declaration)."""
    from test_borrowed_handovers import relays

    one = vendor_copy(tmp_path, "one", "one.example/log")
    two = vendor_copy(tmp_path, "two", "two.example/log", seeds=(3, 4))
    three = vendor_copy(tmp_path, "three", "three.example/log", seeds=(5, 6))
    buyer = Buyer(tmp_path, [one, two, three])
    for party in (two, three):
        relays(party, one)
        bundle = tmp_path / f"{party.name}-relay.tar.zst"
        party.run("export", one.dataset, "--out", bundle)
        buyer.run("import", bundle, "--key", "approver")
    theirs = next(k["keyid"] for k in json.loads(one.run("key", "list", "--json").stdout)
                  if k["name"] == "vendor")
    r = two_declares(tmp_path, one, two, buyer, theirs, since=0)
    assert json.loads(r.stdout)["import"]["compromised"] == [], r.stdout
    buyer.run("verify", one.dataset)
    r = buyer.run("import", one.bundle, "--key", "approver", "--json")
    (claim,) = [s for s in json.loads(r.stdout)["import"]["suspect"] if s.get("claim")]
    assert claim["revokedBefore"] == [] and "(not revoked here)" in claim["text"], claim


def test_monitor_without_keys_names_claims_only(tmp_path: Path) -> None:
    """The claims `monitor` without keys names are the claims alone: one declares its own key
    (no claim); two's log, relaying one's records, monitored without keys takes nothing in, so
    it has no `signed what was just taken in` line, which the run with keys gives."""
    from test_updates import declare_compromised

    one, two, buyer, _relay, theirs = relaying_parties(tmp_path)
    buyer.run("import", one.bundle, "--key", "approver")
    applied = one.size()
    declare_compromised(one, tmp_path / "one-2.toml", theirs)
    update = tmp_path / "one-update.tar.zst"
    one.run("export", "--updates-since", str(applied), "--out", update)
    buyer.run("import", update, "--key", "approver")
    for url in served(two):
        r = buyer.run("monitor", url, "--vkey", two.vkey(), "--json")
        assert "signed what was just taken in" not in r.stderr, r.stderr
        assert not json.loads(r.stdout)["updates"]["suspect"], r.stdout
        r = buyer.run("monitor", url, "--vkey", two.vkey(), "--key", "approver")
        assert "signed what was just taken in from two.example/log+" in r.stderr, r.stderr


def test_a_declaration_withdrawn_by_a_forged_successor_is_still_named_with_what_it_stopped(
        tmp_path: Path, monkeypatch: Any) -> None:
    """Two declares one's key since 0 (one's records revoked here), then withdraws it: a
    successor without the ``[[revoked_keys]]`` entry, which `policy set` refuses (`a revoked
    key stays revoked`), recorded past that check (what two's writer can log). The buyer's
    history ignores the successor (verify.succession step 3): when one's records come, the
    claim is named with what it revoked, as without the withdrawal."""
    import trajledger.ledger.status as status

    one, two, buyer, theirs, revoked = _stopped_then(tmp_path)
    policy = two.home / "policy.toml"
    text = policy.read_text().replace("serial = 3", "serial = 4")
    policy.write_text(text[:text.index("[[revoked_keys]]")])
    applied = two.size()
    monkeypatch.setattr(status, "check_successor", lambda *a: None)
    two.run("policy", "set", policy, "--key", "mal-approver", "--yes")
    monkeypatch.undo()
    update = tmp_path / "two-withdraws.tar.zst"
    two.run("export", "--updates-since", str(applied), "--out", update)
    buyer.run("import", update, "--key", "approver")
    r = buyer.run("import", one.bundle, "--key", "approver", "--json")
    _named(json.loads(r.stdout)["import"], r.stderr, one, theirs, revoked)


def test_a_claim_across_the_declarers_key_rotation_is_named_once_with_what_it_revoked(
        tmp_path: Path) -> None:
    """Two declares one's key since 0, then rotates its log key (the buyer follows it with its
    next update); when one's records come, the claim is named once, with what it revoked
    under the old key. Before: one line per key of two's log, the new key's saying `not
    revoked here` beside the old key's list."""
    one, two, buyer, theirs, revoked = _stopped_then(tmp_path)
    applied = two.size()
    two.run("log", "rotate-key")
    two.run("revoke", two.batches[0], "--reason", "superseded", "--key", "vendor")
    update = tmp_path / "two-rotated.tar.zst"
    two.run("export", "--updates-since", str(applied), "--out", update)
    buyer.run("import", update, "--key", "approver")
    r = buyer.run("import", one.bundle, "--key", "approver", "--json")
    _named(json.loads(r.stdout)["import"], r.stderr, one, theirs, revoked)
