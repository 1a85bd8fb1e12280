"""End to end: a log file or an object that cannot be read, met while a command judges a
lineage, is an operational error (exit 3), never "its lineage fails" nor a failed verification
(exit 1), nor OK (lock24; approve23's Left, "whether every I/O error in the checks stays exit 3
was not injected").

On test_approve_lineage.py's ledger (test_evaluations.py's CartPole ledger, train@1 approved,
a second batch ``b2``). Two faults: a key handover that cannot be read (a directory where the
file ``log/key-handovers/1`` is expected: read as root here, a ``chmod 000`` would not stop the
read), which the ledger's own log reader already calls a `LogError`, but the verifier's reader
(`verify.ledger_dir.read_handovers`) a `FormatError`, so every judging command exited 1 naming
the file; and b2's envelope that the store cannot read (a seam: `ObjectStore.get` raising the
`StoreError` an EIO raises), which the catalog, confirming the name ``b2``, called a mismatch of
its index (exit 1).
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_approve_lineage import home, home_template, lines, steps_file  # noqa: F401 (fixtures)
from test_lineage_under_lock import entries
from test_runner_cli import run

from trajledger import Ledger
from trajledger.ledger.catalog import Catalog
from trajledger.ledger.errors import StoreError
from trajledger.ledger.store import ObjectStore
from trajledger.verify.manifest import Manifest

COMMANDS = {
    "approve": ["approve", "b2", "--key", "approver"],
    "verify": ["verify", "b2"],
    "admit": ["admit", "train@1"],
    "dataset create": ["dataset", "create", "again", "--version", "1", "--split", "train",
                       "--batch", "b2", "--key", "vendor"],
    "record": ["record", "STEPS", "--env", "cartpole@1", "--policy", "random", "--key",
               "vendor"],
    "rollout": ["rollout", "--checkpoint", "bc@1", "--env", "cartpole@1", "--episodes", "1",
                "--key", "vendor"],
}


def command(name: str, tmp_path: Path) -> list[str]:
    return [str(steps_file(tmp_path)) if a == "STEPS" else a for a in COMMANDS[name]]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_an_unreadable_key_handover_is_an_operational_error(
        runner: CliRunner, home: Path, tmp_path: Path, name: str) -> None:  # noqa: F811
    if name == "rollout":
        Ledger.open(home).train("train@1", key="trainer", name="bc", version="1", seed=1)
    before = entries(home)
    (home / "log" / "key-handovers" / "1").mkdir(parents=True)
    r = run(runner, home, *command(name, tmp_path))
    got = lines(r)
    assert r.exit_code == 3, r.output
    assert got == [f"FAIL: key handover {home}/log/key-handovers/1: cannot read: Is a "
                   "directory"], got
    assert entries(home) == before


@pytest.mark.parametrize("name", ["approve", "verify", "dataset create"])
def test_an_envelope_the_store_cannot_read_is_an_operational_error(
        runner: CliRunner, home: Path, tmp_path: Path, name: str,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    envelope = Catalog(Ledger.open(home)).resolve("b2").envelope
    real = ObjectStore.get

    def get(self: ObjectStore, digest: str, **kw: object) -> bytes:
        if digest == envelope:  # as `ObjectStore.get` raises it on an EIO
            e = OSError(errno.EIO, "Input/output error")
            raise StoreError(f"object {digest}: cannot read: {e}") from e
        return real(self, digest, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ObjectStore, "get", get)
    before = entries(home)
    r = run(runner, home, *command(name, tmp_path))
    got = lines(r)
    assert r.exit_code == 3, r.output
    assert got == [f"FAIL: object {envelope}: cannot read: [Errno 5] Input/output error"], got
    assert entries(home) == before


def test_a_directory_at_a_blob_s_place_is_missing_not_tampered(
        runner: CliRunner, home: Path) -> None:  # noqa: F811
    """`ObjectStore.exists` (a regular file) said the blob was absent, `ObjectStore.size` gave
    the directory's own size: ``approve`` (sizes) blamed tampering (``tampered: 4096 bytes,
    want 7249``) where ``verify`` (hashes) said missing."""
    ledger = Ledger.open(home)
    item = Catalog(ledger).resolve("b2")
    files = Manifest.from_json(json.loads(ledger.store.get(item.digest))).files
    blob = next(f.digest for f in files if f.path == "steps.parquet")
    place = ledger.store.path_of(blob)
    place.unlink()
    place.mkdir()
    assert ledger.store.size(blob) is None
    r = run(runner, home, "approve", "b2", "--key", "approver")
    got = lines(r)
    assert r.exit_code == 1, r.output
    assert "steps.parquet: blob sha256:" in got[1] and got[1].endswith("is missing"), got
