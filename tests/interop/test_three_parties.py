"""Three parties, end to end, each with its own ledger, keys and user state directory.

- **Vendor A** records rollouts (licence CC-BY-4.0) and a dataset, and serves its log with
  ``trajledger log serve`` (a real subprocess on 127.0.0.1).
- **Lab B** monitors A's log (and cosigns it as a witness); its policy requires one witness
  cosignature on A's log (only A's: ``roles.witness.logs``) and accepts CC-BY-4.0 data only. A
  bundle A exported before publishing the cosignature is refused; after ``log add-cosignature``
  A's new export is imported (A's records now in B's own log), B approves the dataset and
  trains; B exports the checkpoint's evidence bundle and its Sigstore bundle.
- **Auditor C** has B's evidence bundle alone and the parties' public keys: it verifies the
  checkpoint with ``python -m verify`` run from a copy of ``verify/`` (nothing else of
  trajledger on its path), and the Sigstore export with trajledger's verifier and sigstore-js
  (that part skipped, saying so, where node and npm are absent). The licence A signed travels
  to C in B's bundle.

Every command goes through the ``trajledger`` CLI (click's CliRunner), each party with its own
``TRAJLEDGER_STATE_DIR``; the checks are the exit codes, the messages and what the auditor sees.

Act two (issue 19): A revokes one of the batches B trained on. B's monitor says so (exit 1 with
``--fail-on-revocation``); A's update bundle (``export --updates-since``, a few kilobytes) brings
the revocation into B's ledger, whose gate then refuses the dataset and whose ``impact`` names
B's checkpoint; the auditor's standalone ``python -m verify`` of B's new checkpoint bundle fails
naming A's revocation.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from testkit import Party

REPO = Path(__file__).resolve().parents[2]


def rollouts(path: Path, seed: int) -> Path:
    cols: dict[str, list[Any]] = {k: [] for k in (
        "episode_id", "step", "obs", "action", "reward", "terminated", "truncated")}  # fmt: skip
    for e in range(6):
        for s in range(5):
            cols["episode_id"].append(f"ep-{seed}-{e}")
            cols["step"].append(s)
            cols["obs"].append([float(seed), float(e), s / 5])
            cols["action"].append([float((e + s) % 2)])
            cols["reward"].append(float(e % 3))
            cols["terminated"].append(s == 4)
            cols["truncated"].append(False)
    pq.write_table(pa.table(cols), path)
    return path


def index_of(bundle: Path) -> dict[str, Any]:
    raw = zstandard.ZstdDecompressor().stream_reader(bundle.read_bytes()).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        first = tar.next()
        assert first is not None and first.name == "bundle.json"
        data = tar.extractfile(first).read()  # type: ignore[union-attr]
    result: dict[str, Any] = json.loads(data)
    return result


B_POLICY = """\
name = "lab-b"
serial = 1
accepted_licences = ["CC-BY-4.0"]
[roles.producer]                  # vendor A's producer key
keys = ["trust/vendor.pub"]
[roles.approver]
keys = ["keys/approver.pub"]
[roles.trainer]
keys = ["keys/trainer.pub"]
[roles.log]                       # A's log (for imports) and B's own
vkeys = ["{a_vkey}", "{b_vkey}"]
[roles.witness]                   # one witness must have cosigned A's checkpoint
vkeys = ["{witness}"]
threshold = 1
logs = ["vendor.example/log"]
"""

AUDITOR_POLICY = """\
name = "auditor"
[roles.producer]
keys = ["vendor.pub"]
[roles.approver]
keys = ["approver-b.pub"]
[roles.trainer]
keys = ["trainer-b.pub"]
[roles.log]
vkeys = ["{b_vkey}"]
"""


def test_vendor_lab_and_auditor(
    tmp_path: Path, request: pytest.FixtureRequest, record_property: Any
) -> None:
    a, b = Party(tmp_path, "vendor-a"), Party(tmp_path, "lab-b")

    # -- vendor A records and serves its log ------------------------------------------------
    a.run("init", "--origin", "vendor.example/log")
    for k in ("vendor", "approver"):
        a.run("key", "new", k, "--no-encrypt")
    a_vkey = a.vkey()
    (a.home / "policy.toml").write_text(
        '[roles.producer]\nkeys = ["keys/vendor.pub"]\n[roles.approver]\nkeys = '
        f'["keys/approver.pub"]\n[roles.log]\nvkeys = ["{a_vkey}"]\n'
    )
    a.run("policy", "set", a.home / "policy.toml", "--key", "approver", "--yes")
    a.run("env", "register", "grid", "--version", "1", "--source", "vendor-sim", "--key",
          "vendor")  # fmt: skip
    batches = [
        a.last("record", rollouts(tmp_path / f"r{seed}.parquet", seed), "--env", "grid@1",
               "--policy", "scripted-v1", "--name", f"grid-{seed}", "--licence", "CC-BY-4.0",
               "--consent", "synthetic", "--retention", "365d", "--key", "vendor")
        for seed in (1, 2)
    ]  # fmt: skip
    dataset = a.last("dataset", "create", "grid-rollouts", "--version", "1", "--split", "train",
                     "--batch", batches[0], "--batch", batches[1], "--key", "vendor")  # fmt: skip
    served, url = serve(a)
    try:
        # -- lab B: its policy requires a witness on A's log and CC-BY-4.0 data ---------------
        b.run("init", "--origin", "lab.example/log")
        for k in ("approver", "trainer", "witness"):
            b.run("key", "new", k, "--no-encrypt")
        (b.home / "trust").mkdir()
        shutil.copy(a.home / "keys" / "vendor.pub", b.home / "trust")
        first = json.loads(b.run("monitor", url, "--vkey", a_vkey, "--cosign-key", "witness",
                                 "--out", tmp_path / "cosigned", "--json").stdout)  # fmt: skip
        assert (first["size"], first["old_size"]) == (5, None)
        b_vkey = b.vkey()
        (b.home / "policy.toml").write_text(
            B_POLICY.format(a_vkey=a_vkey, b_vkey=b_vkey, witness=first["witness_vkey"])
        )
        b.run("policy", "set", b.home / "policy.toml", "--key", "approver", "--yes")

        # A bundle whose checkpoint no witness cosigned is refused under B's policy.
        early = tmp_path / "early.tar.zst"
        a.run("export", "grid-rollouts@1", "--out", early)
        r = b.run("import", early, "--key", "approver", code=1)
        assert "log > witnesses: checkpoint has 0 valid witness cosignatures, want at least 1" \
            in r.stderr, r.stderr  # fmt: skip
        # A publishes B's cosignature; its next export carries it, and B takes it in.
        a.run("log", "add-cosignature", tmp_path / "cosigned", "--witness", first["witness_vkey"])
        bundle = tmp_path / "grid.tar.zst"
        a.run("export", "grid-rollouts@1", "--out", bundle)
        r = b.run("import", bundle, "--key", "approver")
        assert "✓ witnesses — cosigned by witness" in r.stdout
        assert "✓ licence — CC-BY-4.0 (accepted by the policy)" in r.stdout
        assert "imported" in r.stderr and "foreign record(s) in this log" in r.stderr
        # Still watching: A's log has not moved, and the import shares the monitor's memory.
        again = json.loads(b.run("monitor", url, "--vkey", a_vkey, "--json").stdout)
        assert (again["size"], again["advanced"]) == (5, False)
    finally:
        served.terminate()
        served.wait(timeout=10)

    # -- lab B approves and trains on A's data, from its own log -----------------------------
    b.run("approve", "grid-rollouts@1", "--key", "approver")
    ckpt = b.last("train", "--dataset", "grid-rollouts@1", "--key", "trainer", "--name",
                  "grid-policy", "--version", "1")  # fmt: skip
    evidence = tmp_path / "grid-policy.tar.zst"
    b.run("export", ckpt, "--out", evidence)
    sigstore = tmp_path / "grid-policy.sigstore.json"
    b.run("export", ckpt, "--format", "sigstore", "--out", sigstore)

    # -- auditor C: B's evidence bundle alone, verify/ alone ---------------------------------
    c = tmp_path / "auditor"
    shutil.copytree(REPO / "trajledger" / "verify", c / "verify",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(a.home / "keys" / "vendor.pub", c / "vendor.pub")
    shutil.copy(b.home / "keys" / "approver.pub", c / "approver-b.pub")
    shutil.copy(b.home / "keys" / "trainer.pub", c / "trainer-b.pub")
    (c / "policy.toml").write_text(AUDITOR_POLICY.format(b_vkey=b_vkey))
    audit = subprocess.run(
        [sys.executable, "-m", "verify", str(evidence), "--policy", "policy.toml"],
        cwd=c, capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert audit.stderr.startswith(f"OK: {evidence}: ") and "checks passed" in audit.stderr
    report = audit.stdout
    assert "✓ checkpoint grid-policy@1" in report and "✓ dataset grid-rollouts@1" in report
    for i, batch in enumerate(batches, start=1):  # A's batches, signed by A, in B's log
        assert f"✓ rollout-batch grid-{i} (sha256:{batch[7:19]}…)" in report
    assert "✓ terms — 2 batch(es), as signed: licence CC-BY-4.0 (2)" in report
    assert "✓ files — 2 file(s)" in report and "the 2 file subject(s) of its statement match" \
        in report  # fmt: skip
    record_property("summary:three parties", f"auditor: {audit.stderr.strip()}")
    # The copy of verify/ is what ran, not the installed trajledger.
    probe = subprocess.run(
        [sys.executable, "-c", "import verify, sys; print(verify.__file__); "
         "print(any(m.startswith('trajledger') for m in sys.modules))"],
        cwd=c, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert probe.stdout.split() == [str(c / "verify" / "__init__.py"), "False"], probe.stdout
    # The terms A signed reached the auditor in B's bundle.
    terms = {t["batch"]: t for t in index_of(evidence)["terms"]}
    assert set(terms) == set(batches)
    assert all((t["licence"], t["consent"], t["retention"]) == ("CC-BY-4.0", "synthetic", "365d")
               for t in terms.values())  # fmt: skip
    # The checkpoint's SLSA statement names each model file beside the manifest digest.
    statement = json.loads(base64.b64decode(json.loads(sigstore.read_text())["dsseEnvelope"][
        "payload"]))  # fmt: skip
    assert statement["subject"][0]["digest"]["sha256"] == ckpt[7:]
    assert {s["name"] for s in statement["subject"][1:]} == {"policy.npz", "trainer.json"}
    deps = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert {"role": "dataset", "logIndex": deps[0]["annotations"]["logIndex"]} == deps[0][
        "annotations"] and deps[0]["digest"]["sha256"] == dataset[7:]  # fmt: skip

    # -- the auditor checks the Sigstore export: our verifier, then sigstore-js -------------
    from trajledger.verify.keys import PublicKey
    from trajledger.verify.sigstore_adapter import verify_sigstore_bundle

    pub = PublicKey.from_pem((c / "trainer-b.pub").read_bytes())
    verified = verify_sigstore_bundle(sigstore.read_bytes(), keys=[pub])
    assert verified.mode == "key" and verified.signer.keyid == pub.keyid

    # -- act two: A revokes a batch; the revocation reaches B, and through B the auditor -----
    second_act(a, b, tmp_path, a_vkey, first["witness_vkey"], batches, ckpt, c,
               record_property)
    try:
        sigstore_js_verify = request.getfixturevalue("sigstore_js_verify")
    except pytest.skip.Exception as e:  # no node/npm here: the rest of the flow still ran
        record_property("summary:three parties", f"sigstore-js part skipped: {e}")
        return
    hint = base64.b64encode(hashlib.sha256(pub.spki_der).digest()).decode()
    result = sigstore_js_verify(sigstore, c / "trainer-b.pub", hint)
    assert result["verified"] and result["key"] == "ed25519", result
    payload = base64.b64decode(json.loads(sigstore.read_text())["dsseEnvelope"]["payload"])
    assert result["payloadSha256"] == hashlib.sha256(payload).hexdigest()
    # And it refuses the bundle with another key (the vendor's): the signer matters.
    assert not sigstore_js_verify(sigstore, c / "vendor.pub", hint)["verified"]


def serve(party: Party) -> tuple[subprocess.Popen[str], str]:
    """``trajledger log serve`` of ``party``'s log in a subprocess; returns it and its URL."""
    served = subprocess.Popen(
        [sys.executable, "-c", "from trajledger.runner.cli import main; main()",
         "--ledger", str(party.home), "log", "serve", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TRAJLEDGER_STATE_DIR": str(party.state)},
    )  # fmt: skip
    assert served.stdout is not None
    url = served.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), served.stderr.read() if served.stderr else ""
    return served, url


def second_act(a: Party, b: Party, tmp_path: Path, a_vkey: str, witness: str,
               batches: list[str], ckpt: str, c: Path, record_property: Any) -> None:
    """Issue 19: vendor A revokes grid-1 after lab B trained on it. B's monitor sees it (and
    says so, exit 1 for cron); A's update bundle, carrying A's log since the size B applied,
    brings it in a few kilobytes; B's gate refuses the dataset, ``impact`` names B's checkpoint;
    the auditor's ``python -m verify`` of B's new checkpoint bundle fails naming A's revocation."""
    a.run("revoke", batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    origin = "+".join(a_vkey.split("+")[:2])  # how B names A's log: ORIGIN+KEYHASH
    served, url = serve(a)
    try:
        # B watches A's log without an approver key at hand: the revocation is pending.
        r = b.run("monitor", url, "--vkey", a_vkey, "--cosign-key", "witness", "--out",
                  tmp_path / "cosigned-6", "--fail-on-revocation", code=1)  # fmt: skip
        assert f"pending: revocation at log index 5 of {origin}" \
            f" about rollout-batch grid-1 (sha256:{batches[0][7:19]}…), which you hold: not " \
            "taken in (pass --key APPROVER to apply it)" in r.stderr, r.stderr  # fmt: skip
    finally:
        served.terminate()
        served.wait(timeout=10)
    # A publishes the cosignature and sends its log since the size B applied (5).
    a.run("log", "add-cosignature", tmp_path / "cosigned-6", "--witness", witness)
    update = tmp_path / "update.tar.zst"
    a.run("export", "--updates-since", "5", "--out", update)
    assert update.stat().st_size < 8192  # the revocation travels alone
    r = b.run("import", update, "--key", "approver")
    assert (f"WARNING: revoked by {origin}: rollout-batch grid-1 (sha256:{batches[0][7:19]}…): "
            "consent withdrawn (signed by ") in r.stderr, r.stderr
    assert f"affected here: checkpoint grid-policy@1 ({ckpt[:19]}…) is built on rollout-batch " \
        "grid-1" in r.stderr, r.stderr  # fmt: skip
    # B's gate refuses what was built on it; impact names B's own checkpoint.
    r = b.run("admit", "grid-rollouts@1", code=1)
    assert "revoked: consent withdrawn" in r.stderr, r.stderr
    r = b.run("impact", batches[0])
    assert f"checkpoint grid-policy@1 ({ckpt[:19]}…)" in r.stdout, r.stdout
    # The auditor, with verify/ alone, sees the vendor's revocation in B's evidence.
    evidence = tmp_path / "grid-policy-2.tar.zst"
    b.run("export", ckpt, "--out", evidence)
    audit = subprocess.run(
        [sys.executable, "-m", "verify", str(evidence), "--policy", "policy.toml"],
        cwd=c, capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip
    assert audit.returncode == 1, audit.stdout + audit.stderr
    assert audit.stderr.splitlines()[1:] == [
        f"FAIL: {evidence}: rollout-batch grid-1 (sha256:{batches[0][7:19]}…) > revoked: consent "
        "withdrawn (log index 8); and 2 records that depend on it"], audit.stderr
    record_property("summary:three parties, act two", f"auditor: {audit.stderr.splitlines()[0]}")


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each party passes its own state directory; the test's own points nowhere useful."""
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))
