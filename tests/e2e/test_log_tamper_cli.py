"""Issue 9's attacks on the log, through the CLI, on a quickstart ledger: each is refused.

The attacker can write the ledger directory but has no key. After ``revoke`` of the final
checkpoint (a new log entry), they (a) copy the older ``.state/treeState`` back, (b) delete
``log/checkpoint``, (c) replace it with one signed by another key, (d) truncate it. Every read
command (``log info``, ``log show``, ``log verify``, ``verify CK``) and every writer (``attest``,
``revoke``) must exit 1 naming the file, and leave every byte under ``log/`` as it was found.

And the one state a crash can leave: entries committed but not yet published. Readers read up to
the signed checkpoint; the next writer publishes them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import testkit
from click.testing import Result
from testkit import new_runner

from trajledger import Ledger
from trajledger.ledger.encode import format_signature_line
from trajledger.ledger.keys import Signer
from trajledger.runner.cli import main
from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.note import ALG_ED25519, Note, key_hash


def revoke_final(home: Path, final: str) -> tuple[str, bytes]:
    """Revoke the final checkpoint; returns its digest and the treeState from before."""
    before = (home / "log/.state/treeState").read_bytes()
    r = new_runner().invoke(
        main, ["--ledger", str(home), "revoke", final, "--key", "approver-a", "--reason", "leak"]
    )
    assert r.exit_code == 0, r.output
    return final, before


@pytest.fixture(scope="module")
def revoked(
    quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str, bytes]:
    """A quickstart ledger whose final checkpoint was then revoked; returns (ledger, checkpoint
    digest, the treeState from before the revocation)."""
    t = testkit.extend_template(tmp_path_factory.mktemp("tamper"), quickstart_template,
                                revoke_final)  # fmt: skip
    return t.home, *t.value


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def foreign(cp: bytes) -> bytes:
    """The same checkpoint text, signed by a key that is not the log's."""
    text = Note.from_bytes(cp).text
    origin = Checkpoint.from_text(text).origin
    other = Signer.generate("impostor")  # TEST ONLY
    kh = key_hash(origin, ALG_ED25519, other.public.raw_ed25519())
    return text + b"\n" + format_signature_line(origin, kh, other.sign(text))


def attacks(before: bytes) -> dict[str, tuple[str, Callable[[Path], object]]]:
    return {
        "treeState rolled back": (
            "log/.state/treeState",
            lambda h: (h / "log/.state/treeState").write_bytes(before),
        ),
        "checkpoint deleted": ("log/checkpoint", lambda h: (h / "log/checkpoint").unlink()),
        "checkpoint foreign": (
            "log/checkpoint",
            lambda h: (h / "log/checkpoint").write_bytes(
                foreign((h / "log/checkpoint").read_bytes())
            ),
        ),
        "checkpoint truncated": (
            "log/checkpoint",
            lambda h: (h / "log/checkpoint").write_bytes((h / "log/checkpoint").read_bytes()[:30]),
        ),
    }


@pytest.mark.slow  # a quickstart, then 4 attacks x 6 commands in process: about 10 s
def test_every_attack_is_refused_by_every_command(
    revoked: tuple[Path, str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pristine, final, before = revoked
    home = tmp_path / "ledger"
    data = tmp_path / "data.txt"
    data.write_text("more\n")
    commands: dict[str, list[str]] = {
        "log info": ["log", "info"],
        "log show": ["log", "show"],
        "log verify": ["log", "verify"],
        "verify CK": ["verify", final, "--policy", str(pristine / "policy.toml")],
        "attest": ["attest", str(data), "--key", "vendor"],
        "revoke": ["revoke", "cartpole-train@1", "--key", "approver-a", "--reason", "x"],
    }
    runner = new_runner()
    missed: list[str] = []
    tried = 0
    for attack, (rel, mutate) in attacks(before).items():
        for name, args in commands.items():
            shutil.rmtree(home, ignore_errors=True)
            shutil.copytree(pristine, home)
            mutate(home)
            log_before = snapshot(home / "log")
            r: Result = runner.invoke(main, ["--ledger", str(home), *args])
            tried += 1
            named = any(line.startswith("FAIL: ") and rel in line for line in r.stderr.splitlines())
            if r.exit_code != 1 or not named or "Traceback" in r.output:
                missed.append(f"{attack} / {name}: exit {r.exit_code}\n{r.output[-1500:]}")
            if snapshot(home / "log") != log_before:
                missed.append(f"{attack} / {name}: changed the log")
    with capsys.disabled():
        print(f"\nlog tamper matrix: {tried} tried, {tried - len(missed)} refused unchanged")
    assert not missed, "\n\n".join(missed)


def test_a_committed_unsigned_tail_is_published_by_the_next_writer(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trajledger.ledger.log import Log

    runner = new_runner()
    ledger = Ledger.open(home)
    ledger.keys.create("alice", encrypt=False)
    (tmp_path / "a.txt").write_text("a\n")
    r = runner.invoke(
        main, ["--ledger", str(home), "attest", str(tmp_path / "a.txt"), "--key", "alice"]
    )
    assert r.exit_code == 0, r.output

    class Killed(BaseException):
        pass

    def dying(*_args: object, **_kw: object) -> bytes:
        raise Killed

    (tmp_path / "b.txt").write_text("b\n")
    with monkeypatch.context() as m:
        m.setattr(Log, "_publish", dying)
        with pytest.raises(Killed):
            r = runner.invoke(
                main,
                ["--ledger", str(home), "attest", str(tmp_path / "b.txt"), "--key", "alice"],
                catch_exceptions=False,
            )
    info = runner.invoke(main, ["--ledger", str(home), "log", "info", "--json"])
    assert info.exit_code == 0, info.output
    assert '"size":2' in info.stdout and '"checkpoint_size":1' in info.stdout
    shown = runner.invoke(main, ["--ledger", str(home), "log", "show"])
    assert len(shown.stdout.splitlines()) == 1  # readers read up to the signed checkpoint
    v = runner.invoke(main, ["--ledger", str(home), "log", "verify"])
    assert v.exit_code == 0 and "lags the committed size 2" in v.stderr, v.output
    # The next writer publishes the tail, then appends; the retried attest adds nothing.
    (tmp_path / "c.txt").write_text("c\n")
    r = runner.invoke(
        main, ["--ledger", str(home), "attest", str(tmp_path / "c.txt"), "--key", "alice"]
    )
    assert r.exit_code == 0 and "log index 2" in r.stderr, r.output
    r = runner.invoke(
        main, ["--ledger", str(home), "attest", str(tmp_path / "b.txt"), "--key", "alice"]
    )
    assert r.exit_code == 0 and "log index 1" in r.stderr, r.output
    info = runner.invoke(main, ["--ledger", str(home), "log", "info", "--json"])
    assert '"size":3' in info.stdout and '"checkpoint_size":3' in info.stdout
    v = runner.invoke(main, ["--ledger", str(home), "log", "verify"])
    assert v.exit_code == 0 and "WARNING" not in v.stderr, v.output


def test_read_commands_never_write_under_log(
    revoked: tuple[Path, str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a ledger a writer left behind (an unpublished tail, an inflight marker, temp files,
    leftovers past the committed size), no read command changes a byte under ``log/``."""
    from trajledger.ledger.log import Log

    pristine, final, _before = revoked
    home = tmp_path / "ledger"
    shutil.copytree(pristine, home)

    class Killed(BaseException):
        pass

    def dying(*_args: object, **_kw: object) -> bytes:
        raise Killed

    from trajledger.ledger.record import record_statement
    from trajledger.verify import predicates

    ledger = Ledger.open(home)
    with monkeypatch.context() as m:
        m.setattr(Log, "_publish", dying)
        with pytest.raises(Killed):
            record_statement(
                ledger, "x", "sha256:" + "5" * 64, predicates.REVOCATION, {"reason": "x"},
                ledger.keys.signer("approver-a"),
            )  # fmt: skip
    log = home / "log"
    (log / "tile/entries/000.p/250").write_bytes(b"past the committed size")
    (log / ".state/.tmp-treeState").write_bytes(b"half")
    before = snapshot(log)
    runner = new_runner()
    size = Ledger.open(home).log.size
    for args in (
        ["log", "info"],
        ["log", "show"],
        ["log", "verify"],
        ["log", "proof", "3"],
        ["log", "consistency", "2"],
        ["verify", final, "--policy", str(home / "policy.toml")],
        ["fsck"],
        ["lineage", final],
    ):
        r = runner.invoke(main, ["--ledger", str(home), *args])
        assert r.exit_code in (0, 1), (args, r.output)
        assert snapshot(log) == before, f"{' '.join(args)} wrote under log/"
    assert Ledger.open(home).log.size == size  # the tail is still unpublished


def test_log_verify_checks_what_this_user_trusts(tmp_path: Path) -> None:
    """``log verify`` judged a log by itself alone: an older copy of ``log/`` put back after the
    user saw a newer one, and a ledger whose log and log key were replaced by another of the
    same origin, each exited 0 ("OK: … entries verified") while every other command refused
    them and told the user to run ``log verify`` for every problem; and it read a log whose
    key was not pinned under TRAJLEDGER_REQUIRE_PIN=1. Found by the fifth review (rev4)."""
    from test_updates import Vendor

    def log_verify(v: Vendor, *args: str, env: dict[str, str] | None = None) -> Result:
        return new_runner().invoke(main, ["--ledger", str(v.home), "log", "verify", *args],
                                   env={"TRAJLEDGER_STATE_DIR": str(v.state), **(env or {})})

    v = Vendor(tmp_path, "v", "v.example/log")
    assert log_verify(v).exit_code == 0
    old = {d: tmp_path / f"old-{d}" for d in ("log", "log-key")}
    for d, copy in old.items():
        shutil.copytree(v.home / d, copy)
    v.run("revoke", v.batches[0], "--reason", "x", "--key", "vendor")
    shutil.rmtree(v.home / "log")
    shutil.copytree(old["log"], v.home / "log")
    for args in ((), ("--json",), ("--skip-data",)):
        r = log_verify(v, *args)
        assert r.exit_code == 1, r.output
        assert "FAIL: " in r.stderr and "rollback: the signed checkpoint has size" in r.stderr
    # Another log of the same origin, its key in log-key/: no handover leads to it.
    other = Vendor(tmp_path, "other", "v.example/log")
    for d in (*old, "objects"):
        shutil.rmtree(v.home / d)
        shutil.copytree(other.home / d, v.home / d)
    r = log_verify(v)
    assert r.exit_code == 1 and "a replaced key, not a rotation" in r.stderr, r.output
    # A first use must be pinned ahead under TRAJLEDGER_REQUIRE_PIN=1.
    shutil.rmtree(v.state)
    v.state.mkdir()
    r = log_verify(v, env={"TRAJLEDGER_REQUIRE_PIN": "1"})
    assert r.exit_code == 1 and "was not pinned ahead" in r.stderr, r.output
