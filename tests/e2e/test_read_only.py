"""Issue 9: read commands never write evidence, and work on a ledger they cannot write.

On a quickstart ledger (encrypted keys, its own user state), each read command of `READS` runs
in process, and the evidence is snapshotted around it (`evidence`: path -> sha256 and mode):
everything under the ledger directory (the log, the objects, ``keys/``, ``log-key/``,
``policy.toml``, ``ledger.toml``) but ``index/``, and the runner's state: the user's state
directory, whose SQLite database holds the floor checkpoint (the runner's memory of the log) and
the index of the log's entries. Files must keep their bytes and modes; the database its rows,
table by table (a read raises the floor only when the log has grown, and here it has not),
but for the time the state was last used at (``meta``'s ``used_at``, `TrustState.used_at`): a
verifier notes its clock there at most once a minute, so that a clock set back later is judged
no earlier; memory of the user's clock, like the floor, no evidence. The test removes it from
the copy first, so that a read notes it whatever the time since the quickstart was built (it
failed under load when that was more than a minute).

Excluded, and why: ``index/`` holds the derived caches, the audit index (``index/lance``, for
query and stats) and the log's lookup cache (``index/log-lookup``), both derived from the log
and the objects and rebuilt when missing or stale; nothing is decided on them unverified, so a
read may refresh them. The database's bytes (and its ``-wal`` and ``-shm`` files): SQLite moves
committed pages from its write-ahead log into the file whenever a last connection closes, so
the file changes without any write by the command; its rows are what it holds.

Then the same commands on a copy made read-only (``chmod -R a-w``), in a child process that the
file modes bind even when the tests run as root (``setpriv`` drops the capabilities that override
them; a writer, ``key new``, run there too must fail): each exits 0 with at most notes on
stderr (no ``FAIL:``), derived caches it cannot refresh are skipped, and nothing changes,
``index/`` included. The same again on a read-only copy shared without its derived caches (no
``index/``): query and stats build the audit index in a temporary copy, and say so.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
import tamperkit as tk

from trajledger import Ledger
from trajledger.runner.cli import main

DERIVED = "index"

READS: dict[str, Callable[[tk.Quickstart, Path], list[str]]] = {
    "verify CK": lambda q, _: ["verify", q.checkpoint],
    "verify CK --skip-data": lambda q, _: ["verify", q.checkpoint, "--skip-data"],
    "lineage CK": lambda q, _: ["lineage", q.checkpoint, "--format", "json"],
    "impact BATCH": lambda q, _: ["impact", "cartpole-random"],
    "show CK": lambda q, _: ["show", q.checkpoint],
    "show DATASET": lambda q, _: ["show", q.dataset, "--json"],
    "log info": lambda q, _: ["log", "info"],
    "log show": lambda q, _: ["log", "show"],
    "log proof": lambda q, _: ["log", "proof", "3"],
    "log consistency": lambda q, _: ["log", "consistency", "2"],
    "log verify": lambda q, _: ["log", "verify"],
    "admit DATASET": lambda q, _: ["admit", q.dataset],
    "export CK --out": lambda q, out: ["export", q.checkpoint, "--out", str(out / "ck.tar.zst")],
    "query artifacts": lambda q, _: ["query", "artifacts"],
    "query episodes": lambda q, _: ["query", "episodes", "--where", "num_steps > 10"],
    "stats DATASET": lambda q, _: ["stats", q.dataset],
    "fsck": lambda q, _: ["fsck"],
    "policy show": lambda q, _: ["policy", "show"],
    "key list": lambda q, _: ["key", "list"],
    "key export": lambda q, _: ["key", "export", "vendor"],  # reads the policy (out36)
}
"""Every read command, with arguments (the quickstart, a writable directory for outputs)."""


@pytest.fixture(scope="module")
def pristine(secured_quickstart: tk.Quickstart) -> tk.Quickstart:
    return secured_quickstart


def copy(q: tk.Quickstart, tmp_path: Path, *, derived: bool = True) -> tuple[Path, Path]:
    """A copy of the quickstart's ledger (without ``index/`` unless ``derived``) and of its
    user state."""
    home, state = tmp_path / "ledger", tmp_path / "state"
    shutil.copytree(
        q.home, home, ignore=None if derived else lambda d, _: [DERIVED] if d == str(q.home) else []
    )
    shutil.copytree(q.state, state)
    return home, state


def evidence(home: Path, state: Path) -> dict[str, object]:
    """What no read command may change (module docstring)."""
    out: dict[str, object] = {
        f"ledger/{k}": v for k, v in tk.snapshot(home, skip=(DERIVED,)).items()
    }
    for k, v in tk.snapshot(state).items():
        if ".sqlite" not in k:
            out[f"state/{k}"] = v
    for db in sorted(state.rglob("*.sqlite")):
        con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
        try:
            tables = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            for (table,) in sorted(tables.fetchall()):
                rows = sorted(repr(r) for r in con.execute(f'SELECT * FROM "{table}"')
                              if not (table == "meta" and r[0] == "used_at"))
                out[f"state/{db.relative_to(state)}: {table}"] = rows
        finally:
            con.close()
    return out


def test_read_commands_never_write_evidence(
    pristine: tk.Quickstart, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, state = copy(pristine, tmp_path)
    for db in state.rglob("*.sqlite"):  # as if last used long ago (the module docstring)
        con = sqlite3.connect(db)
        try:
            with con:
                con.execute("DELETE FROM meta WHERE key = 'used_at'")
        finally:
            con.close()
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(state))
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", tk.PASSPHRASE)  # a writer could sign: none may
    assert any("meta" in k for k in evidence(home, state))
    # The user has used this copy before: the first use of a ledger directory pins which log
    # it holds (user memory, like the floor; `Ledger._pin_origin`), later ones only read it.
    Ledger.open(home).log  # noqa: B018
    runner = tk.new_runner()
    wrote = []
    for name, args in READS.items():
        before = evidence(home, state)
        r = runner.invoke(main, ["--ledger", str(home), *args(pristine, out)])
        assert r.exit_code == 0, f"{name}: {r.output}"
        after = evidence(home, state)
        changed = [k for k in sorted(before.keys() | after.keys()) if before.get(k) != after.get(k)]
        if changed:
            wrote.append(f"{name}: {changed}")
    assert not wrote, "read commands wrote evidence:\n" + "\n".join(wrote)


@pytest.mark.parametrize("derived", [True, False], ids=["with caches", "without index/"])
def test_read_commands_work_on_a_read_only_copy(
    pristine: tk.Quickstart, tmp_path: Path, derived: bool
) -> None:
    home, state = copy(pristine, tmp_path, derived=derived)
    out = tmp_path / "out"
    out.mkdir()
    for p in [home, *home.rglob("*")]:
        if not p.is_symlink():
            os.chmod(p, stat.S_IMODE(p.stat().st_mode) & ~0o222)
    before = tk.snapshot(home)
    commands = [["--ledger", str(home), *args(pristine, out)] for args in READS.values()]
    probe = ["--ledger", str(home), "key", "new", "probe", "--no-encrypt"]  # a writer
    try:
        *results, probed = tk.run_elsewhere(
            [*commands, probe], {"TRAJLEDGER_STATE_DIR": str(state)}, without_dac_override=True
        )
        after = tk.snapshot(home)
    finally:
        for p in [home, *home.rglob("*")]:
            if not p.is_symlink():
                os.chmod(p, stat.S_IMODE(p.stat().st_mode) | 0o200)
    failed = [
        f"{name}: exit {r['exit']}\n{r['stderr'][-1500:]}"
        for name, r in zip(READS, results, strict=True)
        if r["exit"] != 0 or "FAIL:" in r["stderr"] or "Traceback" in r["stderr"]
    ]
    assert not failed, "\n\n".join(failed)
    assert probed["exit"] == 3, f"the copy is not read-only for the child: {probed}"
    assert after == before
