"""out60: out59's Left 1(c) on a keyless vendor (Sigstore, the private instance of
tests/interop/conftest.py): a relay's copy of a record signed by an identity its owner
declares compromised. docs/SECURITY.md, "Review of 2026-12-07, forty-first round (out60)"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sigstore")

from testkit import Party

from trajledger.ledger.sigstore_sign import TOKEN_ENV, TRUST_CONFIG_ENV

ISSUER = "https://oidc.test.invalid"
ALICE, BOB = "alice@example.com", "bob@example.com"


def test_a_relays_copy_of_what_a_declared_identity_signed_is_refused(
    sigstore_instance: Any, trust_files: tuple[Path, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The vendor A's producer is ALICE (keyless); it signs f1 and f2. The lab B imports f2;
    the third party C imports f1 from A (and f3, after another log D, whose policy names ALICE
    to trust A's records, declared ALICE compromised: D is no owner of it, having brought C
    nothing ALICE signed first). A declares ALICE compromised since f2 (its successor names
    BOB); C takes A's update in (its WARNING names the successor to record). B, whose
    policy still trusts ALICE, sends C its bundle of f2: C imported it (exit 0), and f2
    verified at C until C recorded the successor. Expected: refused (exit 1), the owner's
    declaration named, C's ledger and state as they were."""
    config, root = trust_files
    monkeypatch.setenv(TRUST_CONFIG_ENV, str(config))
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token(ALICE))
    a, b, c, d = (Party(tmp_path, n) for n in ("vendor", "lab", "third", "other"))
    for p in (a, b, c, d):
        p.run("init", "--origin", f"{p.name}.example/log")
        p.run("key", "new", "approver", "--no-encrypt")

    def policy(who: Party, serial: int, producer: str, vkeys: list[str], extra: str = ""
               ) -> Path:
        path = tmp_path / f"{who.name}-{serial}.toml"
        path.write_text(f'name = "{who.name}"\nserial = {serial}\nsigstore_trusted_root = '
                        f'"{root}"\n{extra}[roles.producer]\nidentities = [{{issuer = '
                        f'"{ISSUER}", subject = "{producer}"}}]\n[roles.approver]\nkeys = '
                        f'["{who.home / "keys" / "approver.pub"}"]\n[roles.log]\nvkeys = '
                        + "[" + ", ".join(f'"{v}"' for v in vkeys) + "]\n")
        return path

    logs = [a.vkey(), b.vkey(), d.vkey()]
    for p, vkeys in ((a, logs[:1]), (b, logs[:2]), (c, logs), (d, logs[::2])):
        p.run("policy", "set", policy(p, 1, ALICE, vkeys), "--key", "approver", "--yes")
    f1, f2, f3 = (a.last("attest", (tmp_path / f"f{n}.txt"), "--sigstore")
                  for n in (1, 2, 3) if (tmp_path / f"f{n}.txt").write_text(f"file {n} by alice"))
    for n, f in enumerate((f1, f2, f3), 1):
        a.run("export", f, "--out", tmp_path / f"f{n}.tar.zst")
    c.run("import", tmp_path / "f1.tar.zst", "--key", "approver")
    b.run("import", tmp_path / "f2.tar.zst", "--key", "approver")

    def declared(since: int) -> str:
        return (f'[[revoked_identities]]\nissuer = "{ISSUER}"\nsubject = "{ALICE}"\n'
                f'compromised_since = {since}\nreason = "CI token leaked"\n')

    # held (the owner is the log that brought a record of it here first): another log D,
    # whose policy names ALICE to trust A's records, declaring it stops nothing of A's
    d.run("import", tmp_path / "f1.tar.zst", "--key", "approver")
    d.run("policy", "set", policy(d, 2, BOB, logs[::2], declared(0)), "--key", "approver",
          "--yes")
    d.run("export", "--updates-since", "0", "--out", tmp_path / "d.tar.zst")
    c.run("import", tmp_path / "d.tar.zst", "--key", "approver")
    c.run("import", tmp_path / "f3.tar.zst", "--key", "approver")
    applied, at = a.size(), a.size() - 2  # (f2's index)
    a.run("policy", "set", policy(a, 2, BOB, logs[:1], declared(at)), "--key", "approver",
          "--yes")
    a.run("export", "--updates-since", str(applied), "--out", tmp_path / "u.tar.zst")
    c.run("import", tmp_path / "u.tar.zst", "--key", "approver")
    b.run("export", f2, "--out", tmp_path / "f2-lab.tar.zst")
    c.run("reindex")
    before = files(c)
    r = c.run("import", tmp_path / "f2-lab.tar.zst", "--key", "approver", code=1)
    assert files(c) == before
    assert (f"is signed by identity {ALICE} ({ISSUER}), which vendor.example/log+"
            in r.stderr and f"declares compromised (compromised since log index "
            f"{at}: CI token leaked; its policy 'vendor' serial 2)" in r.stderr
            and "counts for nothing here, whoever relays it; nothing was imported: record a "
            "successor of your policy with [[revoked_identities]]" in r.stderr), r.stderr


def files(party: Party) -> dict[str, bytes]:
    """The party's ledger and user state, file by file (`test_out55_reported.files`)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
    from test_out55_reported import files as of

    return of(party.home, party.state)
