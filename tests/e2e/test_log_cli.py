"""End to end: ``trajledger attest`` and ``trajledger log ...`` through click's CliRunner.

Covers the full path (attest, info, show, proof, consistency, verify, cosign) and the refusal
paths (exit codes and exact stderr), and sweeps EVERY file of a small log (each tile, entry
bundle, treeState, history, checkpoint, vkey): a flipped byte, a truncation and a deletion must
each make ``log verify`` exit 1 naming that file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import testkit
from click.testing import CliRunner, Result

from trajledger import Ledger
from trajledger.ledger.encode import envelope_bytes
from trajledger.ledger.log import EntrySpec
from trajledger.ledger.signing import sign_statement
from trajledger.runner.cli import main
from trajledger.verify import predicates
from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.consistency import verify_consistency
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.merkle import leaf_hash
from trajledger.verify.note import verifier_from_vkey
from trajledger.verify.tlog_proof import TlogProof, verify_tlog_proof

TREE = {"episodes.jsonl": '{"episode": 0, "return": 1.5}\n', "env/rules.txt": "be nice\n"}


def run(runner: CliRunner, home: Path, *args: str | Path) -> Result:
    return runner.invoke(main, ["--ledger", str(home), *map(str, args)], prog_name="trajledger")


def expect(result: Result, code: int, stderr: str | None = None) -> None:
    assert result.exit_code == code, result.output
    if stderr is not None:
        assert result.stderr == stderr, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output


@pytest.fixture
def alice(runner: CliRunner, home: Path) -> str:
    expect(run(runner, home, "key", "new", "alice", "--no-encrypt"), 0)
    return "alice"


def attest(runner: CliRunner, home: Path, path: Path, *extra: str) -> tuple[str, Result]:
    r = run(runner, home, "attest", path, "--key", "alice", *extra)
    expect(r, 0)
    return r.stdout.splitlines()[-1], r


# -- the full path -------------------------------------------------------------------------


def test_attest_and_inspect(
    runner: CliRunner, home: Path, alice: str, make_tree: Callable[..., Path], tmp_path: Path
) -> None:
    data = make_tree(TREE)
    digest, r = attest(runner, home, data)
    ledger = Ledger.open(home)
    entry = LogEntry.from_bytes(ledger.log.entry(0))
    assert digest == entry.subject and digest.startswith("sha256:")
    assert r.stderr == (
        f"OK: 2 file(s), {sum(len(v) for v in TREE.values())} bytes attested by alice: "
        f"log index 0, envelope {entry.envelope}\n"
    )
    # Attesting the same files again adds nothing.
    again, r2 = attest(runner, home, data)
    assert again == digest and "log index 0," in r2.stderr
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps({"name": "grid", "version": "2"}))
    env_digest, _ = attest(
        runner,
        home,
        data,
        "--predicate-type",
        predicates.ENVIRONMENT,
        "--predicate",
        str(pred),
        "--name",
        "gridworld",
    )
    assert env_digest == digest  # same files, same manifest: same artifact digest

    info = run(runner, home, "log", "info", "--json")
    expect(info, 0, "")
    doc = json.loads(info.stdout)
    assert doc["size"] == 2 and doc["checkpoint_size"] == 2 and doc["origin"] == "test/ledger"
    assert verifier_from_vkey(doc["vkey"]).name == "test/ledger"
    text = run(runner, home, "log", "info")
    assert text.stdout.splitlines()[1] == "size\t2"

    show = run(runner, home, "log", "show", "--json")
    expect(show, 0, "")
    lines = [json.loads(x) for x in show.stdout.splitlines()]
    assert [(x["index"], x["kind"], x["subject"]) for x in lines] == [
        (0, "files", digest),
        (1, "environment", digest),
    ]
    assert set(lines[0]) == {"index", "kind", "subject", "envelope", "signers", "time"}
    one = run(runner, home, "log", "show", "--from", "1", "--to", "2")
    assert one.stdout.split("\t")[:2] == ["1", "environment"]

    proof_file = tmp_path / "p.proof"
    expect(
        run(runner, home, "log", "proof", "1", "--out", proof_file),
        0,
        "OK: entry 1: inclusion proof of 1 hash(es) under the checkpoint\n",
    )
    proof = TlogProof.from_bytes(proof_file.read_bytes())
    verify_tlog_proof(proof, ledger.log.entry(1), verifier_from_vkey(doc["vkey"]), "test/ledger")
    stdout_proof = run(runner, home, "log", "proof", "1")
    assert stdout_proof.stdout_bytes == proof_file.read_bytes()

    cons = run(runner, home, "log", "consistency", "1", "--json")
    expect(cons, 0, "OK: consistency from size 1 to 2: 1 hash(es)\n")
    c = json.loads(cons.stdout)
    import base64

    verify_consistency(
        1,
        2,
        [base64.b64decode(h) for h in c["proof"]],
        base64.b64decode(c["old_root"]),
        base64.b64decode(c["new_root"]),
    )
    assert c["old_root"] == base64.b64encode(leaf_hash(ledger.log.entry(0))).decode()

    v = run(runner, home, "log", "verify")
    expect(v, 0, "OK: log test/ledger: 2 entries verified, 4 blob(s) re-hashed\n")
    assert "problems\t0" in v.stdout and "blobs\t4 (re-hashed)" in v.stdout
    quick = run(runner, home, "log", "verify", "--skip-data", "--json")
    expect(
        quick, 0, "OK: log test/ledger: 2 entries verified, 4 blob(s) size only, not re-hashed\n"
    )
    assert json.loads(quick.stdout)["data"] == "size only, not re-hashed"
    assert run(runner, home, "log", "verify", "--deep").exit_code == 2  # gone: data is re-hashed


def test_attest_refusals(
    runner: CliRunner, home: Path, alice: str, make_tree: Callable[..., Path], tmp_path: Path
) -> None:
    data = make_tree(TREE)
    r = run(runner, home, "attest", data, "--key", "alice", "--predicate-type", "https://x/y")
    assert r.exit_code == 2 and "is not a predicate type trajledger records" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    r = run(runner, home, "attest", data, "--key", "alice", "--predicate", bad)
    assert r.exit_code == 2 and "top level is list, want an object" in r.stderr
    man = tmp_path / "man.json"
    man.write_text('{"manifest": {}}')
    expect(
        run(runner, home, "attest", data, "--key", "alice", "--predicate", man),
        1,
        "FAIL: predicate: 'manifest' is set by trajledger, remove it from the input\n",
    )
    expect(
        run(runner, home, "attest", data, "--key", "alice", "--predicate", tmp_path / "nope.json"),
        3,
        f"FAIL: predicate file {tmp_path / 'nope.json'}: no such file\n",
    )
    expect(
        run(runner, home, "attest", tmp_path / "missing", "--key", "alice"),
        3,
        f"FAIL: {tmp_path / 'missing'}: no such file or directory\n",
    )
    r = run(runner, home, "attest", data, "--key", "bob")
    assert r.exit_code == 3 and r.stderr.startswith("FAIL: key bob: no private key in ")
    nan = tmp_path / "nan.json"
    nan.write_text('{"x": NaN}')
    r = run(runner, home, "attest", data, "--key", "alice", "--predicate", nan)
    assert r.exit_code == 2 and "NaN is not valid JSON" in r.stderr
    assert Ledger.open(home).log.size == 0
    r = run(runner, tmp_path / "no-ledger", "log", "info")
    assert r.exit_code == 3 and "no ledger here" in r.stderr


def test_log_argument_refusals(
    runner: CliRunner, home: Path, alice: str, make_tree: Callable[..., Path]
) -> None:
    attest(runner, home, make_tree(TREE))
    r = run(runner, home, "log", "proof", "1")
    assert r.exit_code == 2 and "1 is beyond the log size 1" in r.stderr
    r = run(runner, home, "log", "consistency", "0")
    assert r.exit_code == 2
    r = run(runner, home, "log", "consistency", "1", "5")
    assert r.exit_code == 2 and "5 is beyond the log size 1" in r.stderr
    r = run(runner, home, "log", "show", "--to", "9")
    assert r.exit_code == 2 and "9 is beyond the log size 1" in r.stderr


# -- the witness ---------------------------------------------------------------------------


def test_cosign_follows_the_log_and_refuses_rollback_and_fork(
    runner: CliRunner,
    home: Path,
    alice: str,
    make_tree: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    expect(run(runner, home, "key", "new", "witness", "--no-encrypt"), 0)
    attest(runner, home, make_tree({"a.txt": "a"}))
    first = run(runner, home, "log", "cosign", "--key", "witness")
    expect(first, 0, "OK: log test/ledger at size 1 cosigned by witness (first cosignature)\n")
    wvkey = first.stdout.strip()
    assert wvkey.startswith("witness+")
    saved = tmp_path / "log-at-1"
    shutil.copytree(home / "log", saved)

    attest(runner, home, make_tree({"b.txt": "b"}))
    attest(runner, home, make_tree({"c.txt": "c"}))
    expect(
        run(runner, home, "log", "cosign", "--key", "witness"),
        0,
        "OK: log test/ledger at size 3 cosigned by witness (consistent with size 1)\n",
    )
    from trajledger.verify.cosignatures import verify_cosignatures

    cp = (home / "log/checkpoint").read_bytes()
    assert list(verify_cosignatures(cp, [verifier_from_vkey(wvkey)])) == ["witness"]
    assert cp.count("— witness ".encode()) == 1
    assert run(runner, home, "log", "verify").exit_code == 0

    # Rollback: the log is replaced by its older copy.
    current = tmp_path / "log-at-3"
    shutil.move(home / "log", current)
    shutil.copytree(saved, home / "log")
    root3 = Checkpoint.from_text(cp[: cp.index(b"\n\n") + 1]).root.hex()[:16]
    expect(
        run(runner, home, "log", "cosign", "--key", "witness"),
        1,
        f"FAIL: {home / 'log/checkpoint'}: rollback: the signed checkpoint has size 1, but size 3 "
        f"(root {root3}…) was seen before; the log was rolled back or replaced (a copy you "
        "restored on purpose: 'trajledger trust --help', --accept-rollback); nothing was "
        "changed; run 'trajledger log verify' for every problem and restore the log from a copy "
        "you trust\n",
    )
    # The user's own memory refused it first; the witness's memory refuses it too, on a
    # machine that never saw size 3 (a user state directory of its own).
    # (That machine's first use of the ledger's log is announced before.)
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "elsewhere"))
    r = run(runner, home, "log", "cosign", "--key", "witness")
    assert r.exit_code == 1 and r.stderr.startswith("NOTE: first use of log test/ledger: ")
    assert r.stderr.endswith(
        "FAIL: checkpoint rollback for test/ledger: size 1 is smaller than the 3 seen before\n"
    )
    # Fork: the old copy grows another history to the same size.
    attest(runner, home, make_tree({"x.txt": "x"}))
    attest(runner, home, make_tree({"y.txt": "y"}))
    r = run(runner, home, "log", "cosign", "--key", "witness")
    assert r.exit_code == 1
    assert r.stderr.startswith("FAIL: checkpoint fork for test/ledger: two roots at size 3: ")
    # A longer fork fails the consistency proof.
    attest(runner, home, make_tree({"z.txt": "z"}))
    r = run(runner, home, "log", "cosign", "--key", "witness")
    assert r.exit_code == 1
    assert r.stderr.startswith("FAIL: checkpoints of test/ledger are not consistent: ")


# -- the sweep: every file of a small log --------------------------------------------------

BATCHES = (5, 3, 250, 40, 230, 4)  # sizes 5, 8, 258, 298, 528, 532


def build_sweep_log(home: Path) -> list[str]:
    """A log with full and partial tiles on two levels and older partials kept for published
    checkpoints; every entry names a real envelope in the store."""
    ledger = Ledger.open(home)
    signer = ledger.keys.create("alice", encrypt=False)
    n = 0
    for b in BATCHES:
        specs = []
        for i in range(n, n + b):
            subject = "sha256:" + hashlib.sha256(str(i).encode()).hexdigest()
            env = sign_statement([("s", subject)], predicates.APPROVAL, {"i": i}, [signer])
            specs.append(
                EntrySpec("approval", subject, ledger.store.put_bytes(envelope_bytes(env)),
                          (signer.keyid,))
            )
        ledger.log.append(specs)
        n += b
    return build_sweep_files(home)


def build_sweep_files(home: Path) -> list[str]:
    """The log's files (but its lock and lookup index), relative to ``log/``."""
    log_dir = home / "log"
    return sorted(
        str(p.relative_to(log_dir))
        for p in log_dir.rglob("*")
        if p.is_file() and p.name not in ("lock", "index")
    )


@pytest.fixture(scope="module")
def sweep_template(
    empty_template: testkit.Template[None], tmp_path_factory: pytest.TempPathFactory
) -> testkit.Template[list[str]]:
    """`build_sweep_log` once per module (its files are the template's value)."""
    return testkit.extend_template(
        tmp_path_factory.mktemp("sweep-log"), empty_template, lambda h, _: build_sweep_log(h)
    )


@pytest.fixture
def sweep_home(sweep_template: testkit.Template[list[str]], tmp_path: Path) -> Path:
    """A copy of the sweep log's ledger, and its user state (this test's)."""
    return testkit.copy_template(sweep_template, tmp_path / "home")


def flip(data: bytes) -> bytes:
    i = len(data) // 2
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


MUTATIONS: dict[str, Callable[[Path], object]] = {
    "flipped byte": lambda p: p.write_bytes(flip(p.read_bytes())),
    "truncation": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "deletion": lambda p: p.unlink(),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", MUTATIONS)  # a case each: the workers of a run share them
def test_every_corruption_of_every_file_is_reported(
    runner: CliRunner, sweep_template: testkit.Template[list[str]], sweep_home: Path,
    tmp_path: Path, name: str,
) -> None:  # fmt: skip
    home, mutate = sweep_home, MUTATIONS[name]
    files = sweep_template.value
    assert files == build_sweep_files(home)
    assert files == [
        ".state/history",
        ".state/treeState",
        "checkpoint",
        "tile/0/000",
        "tile/0/001",
        "tile/0/002.p/16",
        "tile/0/002.p/20",
        "tile/1/000.p/1",
        "tile/1/000.p/2",
        "tile/entries/000",
        "tile/entries/001",
        "tile/entries/002.p/16",
        "tile/entries/002.p/20",
        "vkey",
    ]
    expect(run(runner, home, "log", "verify"), 0)
    pristine = tmp_path / "pristine"
    shutil.copytree(home / "log", pristine)
    missed: list[str] = []
    for rel in files:
        shutil.rmtree(home / "log")
        shutil.copytree(pristine, home / "log")
        mutate(home / "log" / rel)
        r = run(runner, home, "log", "verify")
        assert "Traceback" not in r.output
        named = any(line.startswith(f"FAIL: log/{rel}") for line in r.stderr.splitlines())
        if r.exit_code != 1 or not named:
            missed.append(f"{name} of {rel}: exit {r.exit_code}\n{r.stderr}")
    assert not missed, "\n".join(missed)


def test_verify_reports_index_and_file(runner: CliRunner, sweep_home: Path) -> None:
    home = sweep_home
    ledger = Ledger.open(home)
    entry = LogEntry.from_bytes(ledger.log.entry(300))
    ledger.store.delete(entry.envelope)
    r = run(runner, home, "log", "verify")
    expect(
        r,
        1,
        f"FAIL: log/tile/entries/001 (entry 300): object {entry.envelope}: not in the store\n",
    )
    ok = run(runner, home, "log", "verify", "--no-store", "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["ok"] is True


def test_verify_trusts_the_ledgers_log_key(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    """A log re-signed with another key (checkpoint and vkey replaced) fails: the trusted key is
    <ledger>/log-key/log.pub, not the log's own vkey file."""
    from trajledger.ledger.keys import Signer
    from trajledger.ledger.log import Log

    other = tmp_path / "other"
    Log.create(other, "test/ledger", Signer.generate("impostor"))
    for name in ("checkpoint", "vkey"):
        shutil.copy(other / name, home / "log" / name)
    r = run(runner, home, "log", "verify")
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0].startswith("FAIL: log/vkey: is 'test/ledger+")
    assert "FAIL: log/checkpoint: note has no signature by a known key" in r.stderr


def test_verify_warns_about_leftovers(
    runner: CliRunner, home: Path, alice: str, make_tree: Any
) -> None:
    attest(runner, home, make_tree(TREE))
    (home / "log/tile/entries/000.p/7").write_bytes(b"junk")
    r = run(runner, home, "log", "verify")
    expect(
        r,
        0,
        "WARNING: log/tile/entries/000.p/7: past the committed size 1 (an interrupted append); "
        "ignored\nOK: log test/ledger: 1 entries verified, 2 blob(s) re-hashed\n",
    )


def test_verify_names_a_damaged_key_file_and_checks_the_rest(
    runner: CliRunner, home: Path, alice: str, make_tree: Any
) -> None:
    """A public key file of the ledger that holds no key is damaged evidence (exit 1, the file
    named), not a usage error; the log and the other keys are still checked."""
    attest(runner, home, make_tree(TREE))
    expect(run(runner, home, "key", "new", "bob", "--no-encrypt"), 0)
    (home / "keys" / "bob.pub").write_bytes(b"-----BEGIN PUBLIC KEY-----\ntruncated")
    r = run(runner, home, "log", "verify")
    expect(r, 1)
    assert r.stderr.splitlines() == [
        f"FAIL: key bob ({home / 'keys' / 'bob.pub'}): not a valid PEM public key (truncated, "
        "corrupt or not PEM); the envelope signatures of this key were not checked"]
    assert "entries\t1\n" in r.stdout and "problems\t1\n" in r.stdout
    got = json.loads(run(runner, home, "log", "verify", "--json").stdout)
    assert got["ok"] is False and got["problems"] == [] and len(got["key_problems"]) == 1


def test_serve_on_a_port_in_use_says_so(runner: CliRunner, home: Path) -> None:
    # socketserver closes the server when it cannot bind, before LogServer had its connection
    # threads: `log serve` on a taken port ended in `BUG: AttributeError` (exit 4).
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run(runner, home, "log", "serve", "--port", str(port))
    expect(r, 3)
    assert r.stderr.startswith(f"FAIL: cannot listen on 127.0.0.1 port {port}: "), r.stderr
    assert "choose another --port (0: any free one); nothing was served" in r.stderr
    assert "BUG" not in r.output and len(r.stderr.splitlines()) == 1


def test_a_file_name_that_is_not_utf8_is_refused_by_name(
    runner: CliRunner, home: Path, alice: str, tmp_path: Path
) -> None:
    # It was refused as `FAIL: manifest: contains a lone surrogate, not valid Unicode`, exit 1,
    # naming no file.
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "ok.txt").write_text("fine\n")
    os.makedirs(os.fsencode(data / "sub") + b"/\xff", exist_ok=True)
    with open(os.fsencode(data / "sub") + b"/\xff/x\xfe.bin", "wb") as f:
        f.write(b"x")
    for args in (("attest", data, "--key", "alice"),
                 ("sign", data, "--key", "alice", "--out", tmp_path / "s.json")):  # fmt: skip
        r = run(runner, home, *args)
        expect(r, 3, f"FAIL: {data}/sub/\\xff/x\\xfe.bin: its name is not UTF-8, which a "
                     "manifest's names are: rename it; nothing was signed\n")
    assert Ledger.open(home).log.size == 0 and not (tmp_path / "s.json").exists()


def test_attest_of_a_file_swapped_for_a_link_after_the_listing_is_refused(
    runner: CliRunner, home: Path, alice: str, make_tree: Callable[..., Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """att40 finding 1 through the command: exit 3, one line, nothing logged."""
    from trajledger.ledger import record

    data = make_tree(TREE)
    secret = tmp_path / "key.pem"
    secret.write_bytes(b"the attester's private key")
    real = record.collect_files

    def collect_then_swap(*a: Any, **kw: Any) -> Any:
        listed = real(*a, **kw)
        (data / "episodes.jsonl").unlink()
        (data / "episodes.jsonl").symlink_to(secret)
        return listed

    monkeypatch.setattr(record, "collect_files", collect_then_swap)
    expect(run(runner, home, "attest", data, "--key", "alice"), 3,
           f"FAIL: {data / 'episodes.jsonl'}: not the file listed a moment before (replaced, or "
           "a link put in its place or in a directory's above it, while it was being read); "
           "nothing was recorded: record it again once nothing changes the directory\n")
    assert Ledger.open(home).log.size == 0
