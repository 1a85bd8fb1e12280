"""Release bounds written as strings (review left33, finding 4; rev29's Left): a bound of
``[release]`` may be a string, as the policy's JSON form writes it (``repr`` of the float), and
was read by Python's ``float``: ``"1_0"`` is 10, ``" 0.5 "`` 0.5, ``"1e-400"`` 0, numbers
nobody wrote. Now a string must match the JSON number grammar (RFC 8259 section 6) and not
read as 0 unless it is 0:

- ``policy check`` and ``policy set`` of such a file exit 1 with one line, nothing recorded;
- a policy already recorded with one (signed: it cannot be rewritten) stays the policy in
  force, and its rule passes no release: ``release``, ``verify`` and the offline verifier
  (a copy of ``verify/`` alone, from the exported bundle) all refuse, naming the bound, until
  a successor writes it as a number.

On copies of test_evaluations.py's ledger (bc@1, regression@1, ``min = 0.5``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluations import (  # tests/e2e is on sys.path (its conftest)
    evals_template,  # noqa: F401  (the fixture)
    evaluate,
    log_size,
    standalone_verify,
)
from test_evaluations import home as home  # (the fixture)
from test_evaluations import script as script  # (the fixture)
from test_runner_cli import expect, run

NOT_JSON = ("is not a JSON number (RFC 8259: digits, an optional fraction and exponent; no "
            "spaces, '_', '+' or '.' first)")


def successor(at: Path, serial: int, bound: str) -> Path:
    """policy-SERIAL.toml: the ledger's policy with ``min = BOUND`` (TOML text) and ``serial``."""
    text = (at / "policy.toml").read_text()
    out = at / f"policy-{serial}.toml"
    out.write_text(text.replace("serial = 1", f"serial = {serial}").replace(
        "min = 0.5", f"min = {bound}"))
    return out


@pytest.mark.parametrize(("bound", "said"), [
    ('"1_0"', f"min '1_0' {NOT_JSON}"),
    ('" 0.5 "', f"min ' 0.5 ' {NOT_JSON}"),
    ('"+0.5"', f"min '+0.5' {NOT_JSON}"),
    ('".5"', f"min '.5' {NOT_JSON}"),
    ('"\u0660.5"', f"min '\u0660.5' {NOT_JSON}"),  # an Arabic-Indic zero
    ('"1e-400"', "min '1e-400' is too small to hold: it reads as 0"),
    ('"1e400"', "min: '1e400' is not a finite number"),
    # TOML floats (not strings) that do not hold: 0.0 and inf in tomllib (left34)
    ("1e-400", "not valid TOML: the number 1e-400 reads as 0.0: write one that holds"),
    ("-1.5e-999", "not valid TOML: the number -1.5e-999 reads as -0.0: write one that holds"),
    ("1e999", "not valid TOML: the number 1e999 reads as inf: write one that holds"),
])
def test_a_policy_file_with_a_bound_no_one_wrote_is_refused(
    runner: CliRunner, home: Path, bound: str, said: str
) -> None:
    policy, size = successor(home, 2, bound), log_size(home)
    for command in (["policy", "check", str(policy)],
                    ["policy", "set", str(policy), "--key", "approver", "--yes"]):
        r = run(runner, home, *command)
        expect(r, 1 if command[1] == "check" else 2)  # set: the user's file to fix (left36)
        assert len(r.stderr.splitlines()) == 1 and said in r.stderr, r.stderr
    assert log_size(home) == size
    # Written as JSON writes it: fine.
    for fine in ('"0.5"', '"5e-1"', '"0"', "0.5", "0.0", "0e-400", "5e-324", "1_0.0"):
        expect(run(runner, home, "policy", "check", str(successor(home, 2, fine))), 0)


def test_a_recorded_policy_with_such_a_bound_passes_no_release_on_any_path(
    runner: CliRunner, home: Path, script: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Serial 2, signed by the approver's own tooling with ``min`` as ``" 0.5 "`` in its
    statement (its digest, of the JSON form, is serial 2's with ``"0.5"``): on c717ad8 it read
    as 0.5 and the release passed; now every path refuses it, the same line."""
    from trajledger import Ledger
    from trajledger.ledger import exchange
    from trajledger.ledger.record import record_statement
    from trajledger.ledger.signing import canonical_json
    from trajledger.verify import predicates
    from trajledger.verify.policy import load_policy_file, policy_digest

    passing = evaluate(runner, home, script, "pass")
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    released = r.stdout.strip()
    ledger = Ledger.open(home)
    new = load_policy_file(successor(home, 2, "0.5"))
    body = new.to_json()
    body["release"]["require"][0]["min"] = " 0.5 "
    ledger.store.put_bytes(canonical_json(new.to_json()))
    record_statement(ledger, "evals#2", policy_digest(new), predicates.TRUST_POLICY,
                     {"policy": body}, [ledger.keys.signer("approver")])
    line = (f"the policy's min ' 0.5 ' {NOT_JSON}, so this rule passes no release; record a "
            "policy that writes it as a JSON number")
    size = log_size(home)
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 1)
    assert f"success_rate on regression@1: {line} (evaluation {passing[:19]}…" in r.stderr
    assert log_size(home) == size
    r = run(runner, home, "verify", released)  # the release before, judged now
    expect(r, 1)
    assert line in r.stderr, r.stderr
    # Its statement's policy does not hash to its subject: 'export' refuses to bundle it; a
    # bundle made by other software (its policy member the JSON form the subject names) is
    # judged by the offline verifier as here.
    bundle = tmp_path / "release.tar.zst"
    r = run(runner, home, "export", released, "--out", bundle)
    expect(r, 3)
    assert "its policy hashes to" in r.stderr, r.stderr
    real = exchange.canonical_json
    monkeypatch.setattr(exchange, "canonical_json",
                        lambda obj: real(new.to_json() if obj == body else obj))
    expect(run(runner, home, "export", released, "--out", bundle), 0)
    monkeypatch.undo()
    proc = standalone_verify(tmp_path / "alone", bundle, home / "policy.toml")
    assert proc.returncode == 1 and line in proc.stderr, proc.stderr
    # A successor that writes it as a number: the release passes again.
    expect(run(runner, home, "policy", "set", str(successor(home, 3, '"0.5"')), "--key",
               "approver", "--yes"), 0)
    expect(run(runner, home, "release", "bc@1", "--key", "approver"), 0)
