"""A record of your bytes that your policy does not believe does not fail them (rev36,
twenty-fourth round; docs/SECURITY.md).

hist38's rule judges bytes by digest on every checkpoint record of them (`verify.claims`),
failing if any fails. A record signed only by a key the policy does not hold for checkpoints
(a stranger's, or one declared compromised since) failed them too, and for good: the log keeps
the record, and the policy already distrusts its key, so the holder had no remedy. Here the
vendor's trainer key, whose checkpoint record of the buyer's bytes the buyer imported, is
declared compromised by the buyer; the buyer's own checkpoint, judged by digest, failed and
so did every fine-tune from it (``train --parent``), whether the vendor's record came after
the buyer's or before it (then as the identity record). Such a record is now named and
ignored, as a revocation by such a key is; a record the policy believes whose lineage fails
still fails the bytes (tests/e2e/test_checkpoint_claims.py), and so does a damaged one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_checkpoint_claims import SETUP
from test_histories_exchange import run_history, succeed

# The vendor's checkpoint imported before the buyer trains the same bytes.
VENDOR_FIRST = [*SETUP[:5], SETUP[8], SETUP[9], *SETUP[5:8]]


@pytest.mark.parametrize("steps", [SETUP, VENDOR_FIRST], ids=["own-first", "vendor-first"])
def test_a_record_by_a_key_declared_compromised_does_not_fail_the_bytes(
        tmp_path: Path, steps: list) -> None:
    run = run_history(tmp_path / "h", steps)
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    m, b = run.model, run.buyer
    digest = m.buyer["c1"].digest
    assert m.buyer["vc1"].digest == digest
    pem = (run.vendor.home / "keys" / "vtrainer.pub").read_text()
    run.model.vtrainer = False  # the key out of the trainer role, declared compromised
    mark = (f'\n[[revoked_keys]]\nkey = """{pem}"""\ncompromised_since = '
            f'{m.buyer["vc1"].index}\nreason = "stolen"\n')
    assert succeed(run, mark, m.rules, m.pinned).exit_code == 0
    named = b.cli("verify", "vc1@1")
    assert named.exit_code == 1 and "compromised since" in named.output, named.output
    assert b.cli("verify", "c1@1").exit_code == 0
    r = b.cli("verify", digest)
    assert r.exit_code == 0, r.output  # was 1: "another record of these bytes does not verify"
    assert "records these bytes too; ignored" in r.output, r.output
    child = b.cli("train", "--dataset", m.buyer["d1"].digest, "--key", "trainer", "--name",
                  "c2", "--version", "1", "--parent", "c1@1", "--seed", "2")
    assert child.exit_code == 0, child.output  # was refused: "its lineage fails"
