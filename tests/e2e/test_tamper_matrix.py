"""Issue 9's tamper matrix: the files of a quickstart ledger (every file with
``TRAJLEDGER_FULL_MATRIX=1``, else a sample: see Sampling), flipped, truncated, deleted and
swapped with a file of its kind; after each, the decisions a user makes are taken again, and
each tampering must be refused, or be one that cannot change any outcome.

Attacker model: the attacker writes the ledger directory (the keys are encrypted: they cannot
sign); the user's state directory (``TRAJLEDGER_STATE_DIR``: the floor checkpoint and the index
of the log) is the user's own. Every run starts from a fresh copy of the pristine ledger and of
the pristine user state (the work copies put back to them: `tamperkit.Pristine`).

The ledger: ``trajledger quickstart --episodes 10`` with encrypted keys, built once per module;
its log's lookup cache is written every 4 entries (not every 1024), so that the cache's files
are on disk, and in the matrix, too.

Decisions (`DECISIONS`), in process through the command line, each under the ledger's policy in
force: ``verify CK`` and ``lineage CK`` of the final checkpoint, ``admit DATASET`` of the dataset
it was trained on, ``log verify`` and ``fsck``. An outcome is the exit code and the verdict: the
JSON report's ``ok`` / ``admitted`` (``lineage`` answers an audit question: it exits 0 and says
``"ok": false``); the baseline is every decision exiting 0 with a positive verdict.

Mutations (`MUTATIONS`): flip the middle byte's low bit; keep the first half; delete; swap the
bytes with the next file of the same kind (`kind_of`: another hash tile of its level, another
entry bundle, another envelope, manifest or Parquet blob, another public or private key, ...).
And (issue 18) replace with an attacker-made file of the same kind (`REPLACEMENTS`): a key pair
of their own for each public and private key (``keys/*``, ``log-key/*``: a private key in the
clear, as someone without the passphrase writes it), ``ledger.toml`` pointing the store
elsewhere, declaring plaintext keys or group write, and the user's state database (another
log's, and one edited consistently: a row deleted, the counts adjusted). A replaced key is only
read to sign, so these runs also take a signing decision with it (`signing`), after the
evidence check: the baseline signs; a replaced key must not.

Classification (`classify`) of one tampering, from its five outcomes (six with a signing
decision):

- ``refused``: some decision turned negative (exit 1 with a ``FAIL:`` line, 3 with one for a
  file it cannot read, or a negative verdict), and each one still positive reports exactly what
  the baseline reported (but for the fields its `Decision` calls informational);
- ``changed no decision``: every report is the baseline's. Allowed only for a file on `UNREAD`,
  whose reason says why no decision can rest on it (and, where the reason depends on the
  mutation, is checked for it); anywhere else it is a tampering that went unnoticed: a failure;
- a failure otherwise: an exit other than 0, 1 or 3 (4 is a bug), a traceback, a refusal
  naming nothing, or a positive verdict with another report (a silently different "ok").
- One tampering is outside the attacker model above and classified apart (`STATE_WRITER`): the
  user's state database edited consistently with its counts; fsck must report it.

And the evidence is left as found: no decision changes a byte or a mode of the ledger directory
outside its derived caches (``index/``), whatever was tampered with.

Sampling (`SAMPLE`): every file of the settings, the public keys, the log's state, the lookup
cache and every envelope, with every mutation; of the log's tiles, the other objects, the
private keys and the audit index, a seeded sample of each kind, always with the log's right
edge (``TRAJLEDGER_MATRIX_SEED=N`` draws another sample; default 9). With
``TRAJLEDGER_FULL_MATRIX=1``, every file (about 640 runs instead of about 220).

The runs are dealt round-robin into `PARTS` cases of the test (the workers of a run share
them), each from the same pristine ledger, baseline and allow-list (the ``matrix`` fixture, once
per module). Each part's summary ("part i/4: tamper matrix: N tried: R refused, U changed no
decision (n x file: why; ...)") is printed (visible with ``-s``) and listed at the end of the
run (``record_property``, tests/conftest.py).
"""

from __future__ import annotations

import fnmatch
import json
import os
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import tamperkit as tk

from trajledger import Ledger
from trajledger.ledger.catalog import Catalog
from trajledger.ledger.config import LedgerConfig
from trajledger.ledger.errors import LedgerError
from trajledger.ledger.keys import Signer
from trajledger.runner.cli import main

FULL = os.environ.get("TRAJLEDGER_FULL_MATRIX") == "1"
SEED = int(os.environ.get("TRAJLEDGER_MATRIX_SEED", "9"))
"""The seed of the sample of `SAMPLE`'s kinds (``TRAJLEDGER_MATRIX_SEED``: another sample of
the same size and kinds; the right edge is always in it)."""
SAMPLE: dict[str, int | None] = {
    "object: envelope": None,  # every record: each kind of record decides something else
    "object": 2,
    "hash tile": 3,
    "entry bundle": 3,
    "private key": 2,
    "cache: index/lance": 1,
}
"""How many files are tried of each kind, by the first prefix of its kind listed (None: every
file), unless FULL: the last by name (for the log: the right edge, the tiles the signed
checkpoint needs) and a seeded sample of the others. Every file of the kinds not listed."""

DERIVED = "index"
"""The ledger's derived caches (``Ledger.cache_dir``): the audit index and the log's lookup
cache, rebuilt from the log; read commands may refresh them."""


# -- the decisions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """A command line whose outcome is a decision."""

    args: Callable[[tk.Quickstart], list[str]]
    informational: tuple[str, ...] = ()
    """Fields of its JSON report that inform without deciding, left out of the comparison."""


DECISIONS = {
    "verify CK": Decision(lambda q: ["verify", q.checkpoint, "--json"]),
    "admit DATASET": Decision(lambda q: ["admit", q.dataset, "--json"]),
    "lineage CK": Decision(lambda q: ["lineage", q.checkpoint, "--format", "json"]),
    "log verify": Decision(lambda q: ["log", "verify", "--json"]),
    # Optional objects (the trust policy's JSON copy) are counted when absent, not required.
    "fsck": Decision(lambda q: ["fsck", "--json"], ("absent_optional", "checked")),
}


@dataclass(frozen=True)
class Outcome:
    """One decision's result."""

    exit: int
    positive: bool
    """Exit 0 and a positive verdict (the report's ``ok`` or ``admitted`` is not false)."""
    report: str
    """The JSON report (exit 0), its informational fields left out and the ledger's path
    replaced by ``<ledger>``."""
    stderr: str


def decide(q: tk.Quickstart, home: Path, state: Path) -> dict[str, Outcome]:
    """Every decision on the ledger ``home`` as the user whose state is ``state``."""
    runner = tk.new_runner()
    env = {"TRAJLEDGER_STATE_DIR": str(state), "TRAJLEDGER_PASSPHRASE": tk.PASSPHRASE}
    out = {}
    for name, decision in DECISIONS.items():
        args = ["--verbose", "--ledger", str(home), *decision.args(q)]
        r = runner.invoke(main, args, env=env)
        report: dict[str, object] = json.loads(r.stdout) if r.exit_code == 0 else {}
        positive = r.exit_code == 0 and False not in (report.get("ok"), report.get("admitted"))
        for field in decision.informational:
            report.pop(field, None)
        text = json.dumps(report, sort_keys=True).replace(str(home), "<ledger>")
        out[name] = Outcome(r.exit_code, positive, text, r.stderr)
    return out


def signing(rel: str, q: tk.Quickstart) -> list[str]:
    """A decision that signs with the key ``rel`` is (the log's key signs every append): a
    revocation by a producer or approver, a checkpoint by the trainer."""
    name = Path(rel).stem if rel.startswith("keys/") else "approver-a"
    if name == "trainer":
        return ["train", "--dataset", q.dataset, "--key", "trainer", "--seed", "9"]
    return ["revoke", "cartpole-holdout@1", "--key", name, "--reason", "matrix"]


def sign_outcome(args: list[str], home: Path, state: Path) -> Outcome:
    """A signing decision's outcome (exit 0 positive; its report is its stdout)."""
    env = {"TRAJLEDGER_STATE_DIR": str(state), "TRAJLEDGER_PASSPHRASE": tk.PASSPHRASE}
    r = tk.new_runner().invoke(main, ["--verbose", "--ledger", str(home), *args], env=env)
    return Outcome(r.exit_code, r.exit_code == 0, "", r.stderr)


# -- the mutations -------------------------------------------------------------------------------


MUTATIONS: dict[str, Callable[[Path, Path], None]] = {
    "flip": lambda p, _: tk.overwrite(p, tk.flip(p.read_bytes())),
    "truncate": lambda p, _: tk.overwrite(p, tk.truncate(p.read_bytes())),
    "delete": lambda p, _: p.unlink(),
    "swap": lambda p, partner: tk.swap(p, partner),
}


def _attacker_setting(key: str, value: str) -> Callable[[Path], bytes]:
    def make(path: Path) -> bytes:
        text = path.read_text()
        if key == "store":
            return text.replace('store = "objects"', f'store = "{value}"').encode()
        return (re.sub(rf"(?m)^{key} = .*\n", "", text) + f"{key} = {value}\n").encode()

    return make


def _attacker_key(private: bool) -> Callable[[Path], bytes]:
    def make(_path: Path) -> bytes:
        key = Signer.generate("attacker")
        return key.private_pem(None) if private else key.public.to_pem()

    return make


def _consistent_state_edit(path: Path) -> bytes:
    """The user's state with its held-out row deleted and its stored counts adjusted to match:
    what a writer of the state directory who knows the format makes."""
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("DELETE FROM held_out")
    counts = json.loads(con.execute("SELECT value FROM meta WHERE key = 'counts'").fetchone()[0])
    counts["held_out"] = 0
    con.execute("UPDATE meta SET value = ? WHERE key = 'counts'",
                (json.dumps(counts, sort_keys=True).encode(),))
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return path.read_bytes()


STATE_WRITER = "the user's state edited consistently: a writer of the state directory"
"""Whoever writes the user's state directory decides what it says: a forgery consistent with
its own counts (a held-out row deleted) is followed by the decisions that read the state (the
gate's duplicate check compares against no holdout) until 'fsck' or 'reindex --check' derive
it again from the log and report it (docs/SECURITY.md, "The user's state")."""

REPLACEMENTS: dict[str, list[tuple[str, Callable[[Path], bytes]]]] = {
    "keys/*.pub": [("the attacker's public key", _attacker_key(False))],
    "keys/*.key": [("the attacker's private key, in the clear", _attacker_key(True))],
    "log-key/*.pub": [("the attacker's public key", _attacker_key(False))],
    "log-key/*.key": [("the attacker's private key, in the clear", _attacker_key(True))],
    "ledger.toml": [
        ("the store pointed elsewhere", _attacker_setting("store", "/tmp/attacker-objects")),
        ("keys declared plain", _attacker_setting("keys", '"plain"')),
        ("group write declared", _attacker_setting("group_writable", "true")),
    ],
    "state:logs/*/state.sqlite": [("rows deleted, counts adjusted", _consistent_state_edit)],
}
"""What an attacker puts in place of a file (its pattern; ``state:`` is in the user's state
directory), by name; another log's state database is added by the test (`attacker`)."""


def kind_of(home: Path, rel: str) -> str:
    """What a file is, for choosing the file it is swapped with."""
    parts = rel.split("/")
    if parts[0] == "objects":
        data = (home / rel).read_bytes()
        for magic, kind in ((b"PAR1", "Parquet"), (b"PK", "model weights"),
                            (b'{"payload"', "envelope"), (b'{"files"', "manifest")):  # fmt: skip
            if data.startswith(magic):
                return f"object: {kind}"
        return "object: JSON file"
    if parts[0] in ("keys", "log-key"):
        return "private key" if rel.endswith(".key") else "public key"
    if rel.startswith("log/tile/entries/"):
        return "entry bundle"
    if rel.startswith("log/tile/"):
        return f"hash tile, level {parts[2]}"
    if parts[0] == "log":
        return "log state"  # checkpoint, vkey, .state/*
    if parts[0] == DERIVED:
        return f"cache: {'/'.join(parts[:2])} {Path(rel).parent.name}"
    return "settings"  # ledger.toml, policy.toml


def tried(by_kind: dict[str, list[str]]) -> list[str]:
    """The files tried: all with FULL, else those `SAMPLE` says."""
    rng = random.Random(SEED)
    out = []
    for kind, files in sorted(by_kind.items()):
        n = next((n for prefix, n in SAMPLE.items() if kind.startswith(prefix)), None)
        if FULL or n is None or n >= len(files):
            out += files
            continue
        *others, last = sorted(files, key=lambda f: [int(x) if x.isdigit() else x
                                                     for x in re.split(r"(\d+)", f)])
        out += [*rng.sample(others, n - 1), last]
    return out


def partner_of(rel: str, same_kind: list[str]) -> str | None:
    """The next file of the same kind (None when it is the only one)."""
    if len(same_kind) < 2:
        return None
    return same_kind[(same_kind.index(rel) + 1) % len(same_kind)]


# -- what no decision rests on -------------------------------------------------------------------


def _same_settings(pristine: Path, tampered: Path) -> bool:
    try:
        return LedgerConfig.from_toml(tampered.read_bytes(), tampered) == LedgerConfig.from_toml(
            pristine.read_bytes(), pristine
        )
    except (OSError, LedgerError):
        return False


@dataclass(frozen=True)
class Unread:
    """Files whose tampering may change no decision, and why."""

    pattern: str
    why: str
    """Why no decision can rest on these files (or on this tampering of them)."""
    holds: Callable[[Path, Path], bool] = lambda _pristine, _tampered: True
    """Whether the reason holds for this tampering (pristine file, tampered file)."""


UNREAD = [
    # The audit index (LanceDB) serves query and stats; it is derived from the log and the
    # objects ('trajledger reindex'), and nothing is verified against it.
    Unread("index/lance/*", "derived audit index, read by no decision"),
    # The log's lookup cache gives candidates, each confirmed on the entry; an unreadable cache
    # is rebuilt from the entries (a readable one that disagrees is reported by fsck).
    Unread("index/log-lookup/*", "derived lookup cache, confirmed on the log, rebuilt"),
    # dataset create's kept runs of steps and normalised texts (ledger/window_cache.py): bound
    # to the step file's digest, their version and their body's SHA-256, so damage is computed
    # again from the step file (with a warning); the admission gate never reads them.
    Unread("index/features/w*/*.windows", "derived runs of steps and normalised text, checked "
           "against their digest, computed again; the gate never reads them"),
    # The held side's windows grouped by hash (ledger/held_windows.py, hold30): named by the
    # held batches, their step files and the version, each part CRC-checked, so damage is
    # grouped again (with a warning); the admission gate never reads it.
    Unread("index/features/w*/held-*.grouped", "derived held windows grouped by hash, checked "
           "against their CRCs, grouped again; the gate never reads them"),
    # Their hashes' filter (ledger/held_filter.py, held37): used only when it is that grouped
    # file's and whole (its CRC), else not trusted: the hashes read whole, it written again.
    Unread("index/features/w*/held-*.filter", "derived filter of the grouped held windows' "
           "hashes, checked against its CRC and its grouped file, written again; the gate "
           "never reads it"),
    # The stamp of a filter whose body's CRC was checked (held38): names the filter's device,
    # inode, size, mtime and ctime; one that does not match them costs the CRC again.
    Unread("index/features/w*/held-*.checked", "derived stamp of the held filter's checked "
           "version: one that does not match it only costs its CRC again; the gate never "
           "reads it"),
    # flock()ed by writers; its bytes are never read, and a writer creates it.
    Unread("log/.state/lock", "the writers' lock file, never read"),
    Unread("keys/*.key", "a private key: only writers read it"),
    Unread("log-key/log.key", "the log's private key: only publishing reads it"),
    # Decisions take keys from the policy in force (signed, in the log). 'log verify' also checks
    # each envelope's signatures with the keys it finds here, by keyid (a changed key is one it
    # does not know; a damaged one it cannot read: exit 3), but each envelope is already bound by
    # its digest in the log.
    Unread("keys/*.pub", "a public key by name: decisions use the signed policy's keys"),
    # log-key/ holds the log's private key, so a copy of a ledger may come without it: the log's
    # own vkey file is then used. The log key trusted is the policy's, the floor is the user's.
    # (A damaged log.pub is refused: Ledger.log_vkey.)
    Unread("log-key/log.pub", "absent: the log's own vkey is used, the policy's log key trusted",
           holds=lambda _pristine, tampered: not tampered.exists()),
    # The file the user edits and records with 'policy set'. Decisions apply the policy in force
    # from the log's signed records, or a file the user names with --policy (their input).
    Unread("policy.toml", "the policy draft: decisions apply the signed policy in force"),
    Unread("ledger.toml", "parses to the same settings (a comment, a default)",
           holds=_same_settings),
]  # fmt: skip
"""The allow-list: files no decision rests on (a tampering may go unnoticed only here); with
`policy_copy`, the one stored object that is not evidence. A swap must be allowed for both."""


def policy_copy(q: tk.Quickstart) -> Unread:
    """The allow-list entry of the trust policy's JSON copy, stored beside its record under its
    digest (the record's subject): every reader takes the policy from inside the signed
    envelope and checks it against that subject, and fsck counts the copy, when absent, as an
    optional object; stored and damaged, it is reported."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("TRAJLEDGER_STATE_DIR", str(q.state))
        [item] = [i for i in Catalog(Ledger.open(q.home)).items() if i.kind == "trust-policy"]
    hexdigest = item.digest.removeprefix("sha256:")
    return Unread(
        f"objects/sha256/{hexdigest[:2]}/{hexdigest[2:4]}/{hexdigest}",
        "absent: the policy's JSON copy; readers take it from the signed envelope",
        holds=lambda _pristine, tampered: not tampered.exists(),
    )


def kept_features(q: tk.Quickstart) -> list[Unread]:
    """The allow-list entries of the episode features files kept beside the batches: derived
    data named by digest in each batch's signed record. Absent (a bundle leaves them out),
    ``dataset create`` computes them again from the batch's step file and the admission gate
    never reads them; present and damaged, fsck reports them."""
    from trajledger.ledger.batch_features import batch_predicate

    out = []
    with pytest.MonkeyPatch.context() as m:
        m.setenv("TRAJLEDGER_STATE_DIR", str(q.state))
        ledger = Ledger.open(q.home)
        for item in Catalog(ledger).items():
            if item.kind != "rollout-batch":
                continue
            pred = batch_predicate(ledger.store, item.envelope)
            if pred is not None and pred.features is not None:
                hexdigest = pred.features.digest.removeprefix("sha256:")
                out.append(Unread(
                    f"objects/sha256/{hexdigest[:2]}/{hexdigest[2:4]}/{hexdigest}",
                    "absent: a batch's kept episode features; computed again from its steps",
                    holds=lambda _pristine, tampered: not tampered.exists(),
                ))  # fmt: skip
    return out


def unread(rel: str, allowed: list[Unread], pristine: Path, home: Path) -> Unread | None:
    """The entry of ``allowed`` that lets this tampering of ``rel`` change no decision."""
    return next(
        (
            u
            for u in allowed
            if fnmatch.fnmatch(rel, u.pattern) and u.holds(pristine / rel, home / rel)
        ),
        None,
    )


# -- the classifier ------------------------------------------------------------------------------


def classify(baseline: dict[str, Outcome], got: dict[str, Outcome]) -> tuple[str, str]:
    """``("refused" | "unchanged" | "failure", why)`` of one tampering (module docstring)."""
    problems = []
    for name, o in got.items():
        if o.exit not in (0, 1, 3) or "Traceback" in o.stderr:
            problems.append(f"{name}: exit {o.exit}\n{o.stderr[-1500:]}")
        elif o.exit != 0 and "FAIL:" not in o.stderr:
            problems.append(f"{name}: exit {o.exit} with no FAIL line\n{o.stderr[-800:]}")
        elif o.positive and o.report != baseline[name].report:
            problems.append(f"{name}: positive, with another report:\n{o.report[:1500]}")
    if problems:
        return "failure", "\n".join(problems)
    negative = [f"{n}: exit {o.exit}" for n, o in got.items() if not o.positive]
    return ("refused", ", ".join(negative)) if negative else ("unchanged", "")


class Tally:
    """Counts per class, the tamperings that changed nothing and why, and the failures."""

    def __init__(self) -> None:
        self.tried = 0
        self.refused = 0
        self.unchanged: dict[str, list[str]] = {}
        self.fsck_only: list[str] = []
        self.failures: list[str] = []

    def add_state_forgery(self, label: str, got: dict[str, Outcome]) -> None:
        """A consistent forgery of the user's state (`STATE_WRITER`): the decisions that read
        the state may follow it, but fsck must refuse it."""
        self.tried += 1
        fsck = got["fsck"]
        if fsck.exit == 1 and "FAIL: trust state " in fsck.stderr:
            self.fsck_only.append(label)
        else:
            self.failures.append(f"{label}: fsck did not report the state: {fsck.stderr[-800:]}")

    def add(self, label: str, verdict: str, why: str, allowed: Unread | None) -> None:
        self.tried += 1
        if verdict == "refused":
            self.refused += 1
        elif verdict == "unchanged" and allowed is not None:
            self.unchanged.setdefault(f"{allowed.pattern}: {allowed.why}", []).append(label)
        elif verdict == "unchanged":
            self.failures.append(f"{label}: changed no decision, and is not on UNREAD")
        else:
            self.failures.append(f"{label}: {why}")

    def summary(self) -> str:
        n = sum(len(v) for v in self.unchanged.values())
        why = "; ".join(f"{len(v)} x {k}" for k, v in self.unchanged.items())
        return (
            f"tamper matrix{' (full)' if FULL else ''}: {self.tried} tried: {self.refused} "
            f"refused, {n} changed no decision ({why}), {len(self.fsck_only)} found by fsck only "
            f"({STATE_WRITER}); {len(self.failures)} failed"
        )


# -- the test ------------------------------------------------------------------------------------


PARTS = 4
"""The runs are dealt round-robin into this many cases of the test, so that the workers of a
run share them; each case starts from the same pristine ledger, baseline and allow-list."""


@dataclass(frozen=True)
class Matrix:
    """What every part of the matrix starts from: the pristine ledger and its evidence, the
    baseline decisions, the files by kind, the allow-list, and the runs."""

    q: tk.Quickstart
    ledger: tk.Pristine
    evidence: dict[str, tuple[str, int]]
    baseline: dict[str, Outcome]
    files: list[str]
    by_kind: dict[str, list[str]]
    allow_list: list[Unread]
    runs: list[tuple[str, str, str | None]]
    """``(mutation, file, partner)``: each mutation of each file tried."""
    replacements: list[tuple[str, str, Callable[[Path], bytes]]]
    """``(file, label, make)``: each attacker-made file put in place of a file."""
    signed: dict[tuple[str, ...], Outcome]
    """The baseline of each signing decision a replacement run takes."""


def fresh(m: Matrix, home: Path, state: Path) -> None:
    """Put the work copies back to the pristine ledger and user state."""
    m.ledger.reset(home)
    # The user state whole: its database may still be open in this process (a decision's
    # objects not yet collected), and a copy of it is a new file, as a fresh copy's is.
    shutil.rmtree(state, ignore_errors=True)
    shutil.copytree(m.q.state, state)


@pytest.fixture(scope="module")
def matrix(
    tmp_path_factory: pytest.TempPathFactory, secured_quickstart: tk.Quickstart
) -> Matrix:
    q = tk.build_quickstart(tmp_path_factory.mktemp("matrix"), lookup_tail=4)
    attacker = secured_quickstart  # the attacker's own ledger: its state is of another log
    work = tmp_path_factory.mktemp("matrix-baseline")
    home, state = work / "ledger", work / "state"
    ledger = tk.Pristine(q.home)
    files = sorted(tk.snapshot(q.home))
    by_kind: dict[str, list[str]] = {}
    for rel in files:
        by_kind.setdefault(kind_of(q.home, rel), []).append(rel)
    runs = [(what, rel, partner_of(rel, by_kind[kind_of(q.home, rel)]))
            for rel in tried(by_kind) for what in MUTATIONS]  # fmt: skip
    # Replaced by an attacker-made file of the same kind, then a signing decision too.
    (other,) = attacker.state.glob("logs/*/state.sqlite")
    makers = dict(REPLACEMENTS)
    makers["state:logs/*/state.sqlite"] = [
        *makers["state:logs/*/state.sqlite"],
        ("another log's state database", lambda _p: other.read_bytes()),
    ]
    targets = [f"state:{p.relative_to(q.state).as_posix()}" for p in q.state.rglob("*.sqlite")]
    replacements = [(rel, label, make) for rel in [*files, *targets]
                    for pattern, made in makers.items() if fnmatch.fnmatch(rel, pattern)
                    for label, make in made]  # fmt: skip
    m = Matrix(q, ledger, tk.snapshot(q.home, skip=(DERIVED,)), {}, files, by_kind,
               [*UNREAD, policy_copy(q), *kept_features(q)],
               [r for r in runs if r[0] != "swap" or r[2] is not None], replacements, {})
    fresh(m, home, state)
    m.baseline.update(decide(q, home, state))
    for args in sorted({tuple(signing(rel, q)) for rel, _l, _m in replacements}):
        fresh(m, home, state)
        m.signed[args] = sign_outcome(list(args), home, state)
    return m


@pytest.mark.slow  # about 220 tamperings x 5 decisions, in process: about 30 s of CPU in all
@pytest.mark.parametrize("part", range(PARTS))
def test_tamper_matrix(
    matrix: Matrix,
    part: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: Callable[[str, object], None],
) -> None:
    m, q = matrix, matrix.q
    home, state = tmp_path / "ledger", tmp_path / "state"
    fresh(m, home, state)
    # The evidence before each run's decisions: the pristine ledger's, but for the files the
    # run tampered with (each run starts from a fresh copy: checked here, on the first).
    assert tk.snapshot(home, skip=(DERIVED,)) == m.evidence
    assert all(o.positive for o in m.baseline.values()), m.baseline
    assert len(m.by_kind["entry bundle"]) > 10 and len(m.by_kind["object: envelope"]) > 10
    assert len(m.by_kind["cache: index/log-lookup log-lookup"]) == 3  # MANIFEST, lock, a run
    assert {r[0].split("/")[0] for r in m.replacements} >= {"keys", "log-key", "ledger.toml"}
    assert all(o.positive for o in m.signed.values()), m.signed

    tally = Tally()
    for what, rel, partner in m.runs[part::PARTS]:
        fresh(m, home, state)
        MUTATIONS[what](home / rel, home / (partner or rel))
        touched = [rel, partner] if what == "swap" and partner else [rel]
        allowed = [unread(f, m.allow_list, q.home, home) for f in touched]
        evidence = tk.snapshot_changed(m.evidence, home, touched, skip=(DERIVED,))
        verdict, why = classify(m.baseline, decide(q, home, state))
        label = f"{what} {' <-> '.join(touched)}"
        tally.add(label, verdict, why, None if None in allowed else allowed[0])
        if tk.snapshot(home, skip=(DERIVED,)) != evidence:
            tally.failures.append(f"{label}: the decisions changed the evidence")
    for rel, label, make in m.replacements[part::PARTS]:
        fresh(m, home, state)
        path = state / rel[6:] if rel.startswith("state:") else home / rel
        if rel.startswith("state:"):  # the database whole in its file, its log emptied
            import sqlite3

            con = sqlite3.connect(path)
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            con.close()
        tk.overwrite(path, make(path))
        changed = [] if rel.startswith("state:") else [rel]
        evidence = tk.snapshot_changed(m.evidence, home, changed, skip=(DERIVED,))
        got = decide(q, home, state)
        if tk.snapshot(home, skip=(DERIVED,)) != evidence:
            tally.failures.append(f"replace {rel}: the decisions changed the evidence")
        if make is _consistent_state_edit:
            tally.add_state_forgery(f"replace {rel} with {label}", got)
            continue
        args = tuple(signing(rel, q))
        got["sign"] = sign_outcome(list(args), home, state)
        verdict, why = classify({**m.baseline, "sign": m.signed[args]}, got)
        tally.add(f"replace {rel} with {label}", verdict, why, None)
    line = f"part {part + 1}/{PARTS}: {tally.summary()}"
    record_property("summary:tamper matrix", line)
    with capsys.disabled():
        print("\n" + line)
    assert not tally.failures, f"{line}\n\n" + "\n\n".join(tally.failures)
    assert sorted(tk.snapshot(q.home)) == m.files
