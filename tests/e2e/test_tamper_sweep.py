"""The tamper sweep of issue 6: every file of a small ledger, and every member of an exported
bundle, flipped, truncated, deleted and swapped; each change must be detected with a message
naming the file.

Ledger sweep. The ledger is a quickstart ledger (10 episodes: 20 log entries, about 50 objects).
Files swept: everything under ``log/`` (hash tiles, entry bundles, ``.state/treeState``,
``.state/history``, ``checkpoint``, ``vkey``) and under ``objects/``. Not swept: ``keys/`` and
``log-key/`` (private keys), ``log/.state/lock`` (an empty lock file), ``index/`` (the catalog
and the log's lookup cache, derived and rebuildable), ``runner/seen-checkpoint`` (the runner's
memory; tested by the admission tests), and the configuration ``ledger.toml`` /
``policy.toml`` (the trust anchor is the verifier's input, not evidence).

Detectors, tried in order until one names the file:

1. ``trajledger log verify``: rebuilds the tree from the entries and checks every tile,
   treeState, history, the checkpoint's signature, the hash chain, every envelope (hash,
   subject, signers) and re-hashes every blob an inline manifest names. It covers every log
   file and most objects, but not the blobs that only a lineage reaches: manifests that are a
   subject's preimage (datasets, checkpoints), and checkpoint files (whose SLSA provenance
   carries no inline manifest).
2. ``trajledger verify REF --deep`` for every recorded artifact, newest first. A single REF's
   lineage legitimately does not cover everything: the quickstart's holdout and unapproved
   datasets (and their batches) are in no checkpoint's lineage, so they are verified as REFs of
   their own. Together these cover every manifest and every checkpoint file.

Two kinds of stored objects are not evidence. The trust policy's own JSON, stored next to its
record as a convenience copy: every reader takes the policy from inside the signed trust-policy
envelope (which ``log verify`` checks) and checks it against the record's subject digest. And
each rollout batch's kept episode features (``features`` in its record): derived data that no
verification reads; ``dataset create`` checks it against its signed digest and computes the
features from the batch's steps instead, with a warning, and ``fsck`` reports it damaged (the
tamper matrix and tests/unit/ledger/test_batch_features.py try these). The sweep lists both as
such and prints them (``excluded``) rather than counting them.

Bundle sweep. The bundle is ``trajledger export`` of the final checkpoint. Every member is
changed twice over: once with ``bundle.json`` left as exported (caught by the member list and
its SHA-256s), and once with ``bundle.json`` rewritten to match, as an attacker would (caught by
the cryptography: object names are their hashes, entries need Merkle proofs under the signed
checkpoint, envelopes are signed, policies hash to their record's subject). The detector is
``python -m verify BUNDLE --policy policy.toml``, run in process (``verify.__main__.main``).
For ``bundle.json`` itself only the first mode applies. Its ``created`` field is informational
and unauthenticated (schemas/bundle.v1.md); the flipped byte is the middle one, as for every
file, and lands in the member list.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tamperkit as tk
import testkit
import zstandard

from trajledger import Ledger
from trajledger.ledger.catalog import Catalog
from trajledger.ledger.encode import bundle_index_bytes
from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main
from trajledger.verify.bundle_index import BundleIndex, Member

EXCLUDED_DIRS = ("keys", "log-key", "index")
EXCLUDED_FILES = {"ledger.toml", "policy.toml", "log/.state/lock"}


new_runner, flip, truncate, _write, _swap = (
    tk.new_runner, tk.flip, tk.truncate, tk.overwrite, tk.swap
)


class Tally:
    def __init__(self) -> None:
        self.tried = 0
        self.missed: list[str] = []
        self.by: dict[str, int] = {}

    def add(self, what: str, caught_by: str | None, output: str) -> None:
        self.tried += 1
        if caught_by is None:
            self.missed.append(f"{what}: not detected or not named\n{output[-2000:]}")
        else:
            self.by[caught_by] = self.by.get(caught_by, 0) + 1

    def report(self, title: str) -> str:
        detected = self.tried - len(self.missed)
        by = ", ".join(f"{k}: {v}" for k, v in sorted(self.by.items()))
        return f"{title}: {self.tried} tried, {detected} detected ({by})"


@pytest.fixture(scope="module")
def quickstart(
    quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    """A copy of the quickstart ledger (10 episodes) for this module, and its final checkpoint."""
    home = tmp_path_factory.mktemp("sweep") / "ledger"
    shutil.copytree(quickstart_template.home, home, symlinks=True)
    return home, quickstart_template.value


# -- the ledger -----------------------------------------------------------------------------------


def ledger_files(home: Path) -> list[str]:
    out = []
    for p in sorted(home.rglob("*")):
        rel = p.relative_to(home).as_posix()
        if p.is_file() and rel.split("/")[0] not in EXCLUDED_DIRS and rel not in EXCLUDED_FILES:
            out.append(rel)
    return out


def names_of(rel: str, paths: dict[str, set[str]]) -> list[str]:
    """How a message can name a ledger file: its path under the ledger; for an object its
    digest, or (for a wrong size, which the lineage verifier reports before hashing) its path
    in the manifest that lists it."""
    if rel.startswith("objects/"):
        hexdigest = rel.rsplit("/", 1)[1]
        return [hexdigest[:12], *(f"{p}: size " for p in paths.get(hexdigest, ()))]
    return [rel]


def manifest_paths(ledger: Ledger) -> dict[str, set[str]]:
    """Blob hex digest -> the paths manifests give it."""
    from trajledger.verify.manifest import Manifest
    from trajledger.verify.strict_json import load_object

    out: dict[str, set[str]] = {}
    for item in Catalog(ledger).items():
        if not ledger.store.exists(item.digest):
            continue
        try:
            manifest = Manifest.from_json(load_object(ledger.store.get(item.digest)))
        except ValueError:
            continue  # not a manifest (a policy)
        for f in manifest.files:
            out.setdefault(f.digest[7:], set()).add(f.path)
    return out


def features_of(ledger: Ledger, item: Any) -> str | None:
    """The digest of the episode features kept beside a batch (None: none kept)."""
    from trajledger.ledger.batch_features import batch_predicate

    pred = batch_predicate(ledger.store, item.envelope)
    return pred.features.digest if pred is not None and pred.features is not None else None


@pytest.mark.slow  # about 30 s: 4 mutations of ~95 files, each checked by the CLI
def test_tamper_sweep_of_a_ledger(
    quickstart: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pristine, final = quickstart
    home = tmp_path / "ledger"
    policy = pristine / "policy.toml"
    items = sorted(Catalog(Ledger.open(pristine)).items(), key=lambda i: -i.index)
    paths = manifest_paths(Ledger.open(pristine))
    refs = [final] + [i.digest for i in items if i.digest != final and i.kind != "trust-policy"]
    policy_copies = {
        f"objects/sha256/{i.digest[7:9]}/{i.digest[9:11]}/{i.digest[7:]}"
        for i in items
        if i.kind == "trust-policy"
    }
    kept_features = {
        f"objects/sha256/{d[7:9]}/{d[9:11]}/{d[7:]}"
        for d in (features_of(Ledger.open(pristine), i) for i in items if i.kind == "rollout-batch")
        if d is not None
    }
    detectors: list[tuple[str, list[str]]] = [("log verify", ["log", "verify"])]
    detectors += [
        (f"verify {r[:15]} --deep", ["verify", r, "--policy", str(policy)]) for r in refs
    ]

    # The log, and the derived caches (index/, made when needed), as they are before the sweep.
    pristine_dirs = {d: tk.Pristine(pristine / d) for d in ("log", "index")
                     if (pristine / d).exists()}

    def restore(*touched: str) -> None:
        """Put back what a mutation (or a detector's log recovery) may have changed."""
        if not touched:
            shutil.rmtree(home, ignore_errors=True)
            shutil.copytree(pristine, home)
            return
        for rel in touched:
            if rel.startswith("objects/"):
                _write(home / rel, (pristine / rel).read_bytes())
                os.chmod(home / rel, 0o444)
            else:
                for d in ("log", "index"):
                    if d in pristine_dirs:
                        pristine_dirs[d].reset(home / d)
                    else:
                        shutil.rmtree(home / d, ignore_errors=True)

    restore()
    runner = new_runner()
    for name, args in detectors:  # everything passes before the sweep
        r = runner.invoke(main, ["--ledger", str(home), *args])
        assert r.exit_code == 0, f"{name}: {r.output}"
    files = ledger_files(home)
    assert "log/checkpoint" in files and "log/.state/treeState" in files
    assert sum(f.startswith("log/tile/") for f in files) > 10
    assert sum(f.startswith("objects/") for f in files) > 30
    excluded = sorted((policy_copies | kept_features) & set(files))
    assert len(excluded) == 1 + len(kept_features) and len(kept_features) >= 3
    swept = [f for f in files if f not in excluded]

    first: dict[str, str] = {}
    """File -> the detector that named the last mutation of it: tried first for the next (the
    answer is the same, any detector naming the file; the search is shorter)."""

    def detect(rel: str, names: list[str]) -> tuple[str | None, str]:
        output = ""
        order = sorted(detectors, key=lambda d: d[0] != first.get(rel))
        for name, args in order:
            r = runner.invoke(main, ["--ledger", str(home), *args])
            assert "Traceback" not in r.output and r.exit_code in (0, 1, 3), r.output
            output += r.output
            if r.exit_code != 0 and any(n in r.output for n in names):
                first[rel] = name
                return name, output
        return None, output

    mutations: dict[str, Callable[[Path, Path], None]] = {
        "flipped byte": lambda p, _: _write(p, flip(p.read_bytes())),
        "truncation": lambda p, _: _write(p, truncate(p.read_bytes())),
        "deletion": lambda p, _: p.unlink(),
        "swap": _swap,
    }
    tally = Tally()
    for n, rel in enumerate(swept):
        partner = swept[(n + 1) % len(swept)]
        for what, mutate in mutations.items():
            mutate(home / rel, home / partner)
            # A swap changes two files: naming either is naming the swap.
            names = names_of(rel, paths) + (names_of(partner, paths) if what == "swap" else [])
            caught, output = detect(rel, names)
            tally.add(f"{what} of {rel}", caught, output)
            restore(rel, partner)
    assert ledger_files(home) == files
    assert all((home / f).read_bytes() == (pristine / f).read_bytes() for f in files)
    with capsys.disabled():
        print("\n" + tally.report("ledger tamper sweep") + f"; not evidence: {excluded}")
        print(f"{tally.tried} tried, {tally.tried - len(tally.missed)} detected")
    assert not tally.missed, "\n\n".join(tally.missed)
    assert tally.tried == 4 * len(swept)


# -- the bundle ---------------------------------------------------------------------------------


def unpack(path: Path) -> list[tuple[str, bytes]]:
    raw = zstandard.ZstdDecompressor().stream_reader(path.read_bytes()).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return [(i.name, tar.extractfile(i).read()) for i in tar]  # type: ignore[union-attr]


def pack(path: Path, members: list[tuple[str, bytes]], *, reindex: bool) -> Path:
    if reindex:
        old = BundleIndex.from_bytes(members[0][1])
        listed = sorted(
            (Member(n, len(d), hashlib.sha256(d).hexdigest()) for n, d in members[1:]),
            key=lambda m: m.name,
        )
        new = BundleIndex(
            old.subject, old.origin, old.vkey, old.created, tuple(listed), old.omitted
        )
        members = [("bundle.json", bundle_index_bytes(new)), *members[1:]]
    # What ``tarfile.open(mode="w", format=PAX_FORMAT)`` writes for these members: each one's
    # header block(s) and data padded to a block, two zero blocks, zeros to a whole record.
    tar = b"".join(tar_member(name, data) for name, data in members) + NUL * (2 * BLOCK)
    tar += NUL * (-len(tar) % tarfile.RECORDSIZE)
    path.write_bytes(zstandard.ZstdCompressor().compress(tar))
    return path


NUL, BLOCK = b"\0", tarfile.BLOCKSIZE


@functools.lru_cache(maxsize=256)  # the members a mutation leaves as they are: most of them
def tar_member(name: str, data: bytes) -> bytes:
    """One member as ``TarFile.addfile`` writes it in a PAX archive (mode 0644, times 0)."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    header = info.tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape")
    return header + data + NUL * (-len(data) % BLOCK)


def member_names_of(name: str) -> list[str]:
    """How a message can name a member: its name, or for an object its digest."""
    if name.startswith("objects/"):
        return [name, name.rsplit("/", 1)[1][:12]]
    return [name]


@pytest.mark.slow
def test_tamper_sweep_of_a_bundle(
    quickstart: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, final = quickstart
    bundle = tmp_path / "evidence.tar.zst"
    r = new_runner().invoke(main, ["--ledger", str(home), "export", final, "--out", str(bundle)])
    assert r.exit_code == 0, r.output
    policy = str(home / "policy.toml")
    capsys.readouterr()
    assert verify_main([str(bundle), "--policy", policy]) == 0, capsys.readouterr().err
    members = unpack(bundle)
    names = [n for n, _ in members]
    assert names[0] == "bundle.json" and len(names) > 40

    def partner_of(name: str, mode: str) -> str:
        # The next member; when the index is rewritten, never bundle.json (that is the index
        # the attacker writes anyway).
        others = names if mode == "index kept" else names[1:]
        return others[(others.index(name) + 1) % len(others)]

    def mutated(name: str, what: str, mode: str) -> list[tuple[str, bytes]]:
        data = dict(members)
        if what == "deletion":
            return [(n, d) for n, d in members if n != name]
        if what == "swap":
            partner = partner_of(name, mode)
            return [
                (n, data[partner] if n == name else data[name] if n == partner else d)
                for n, d in members
            ]
        change = flip if what == "flipped byte" else truncate
        return [(n, change(d) if n == name else d) for n, d in members]

    tally = Tally()
    target = tmp_path / "tampered.tar.zst"
    for name in names:
        for mode in ("index kept", "index rewritten"):
            if mode == "index rewritten" and name == "bundle.json":
                continue
            for what in ("flipped byte", "truncation", "deletion", "swap"):
                pack(target, mutated(name, what, mode), reindex=mode == "index rewritten")
                code = verify_main([str(target), "--policy", policy])
                out = capsys.readouterr()
                text = out.out + out.err
                # A swap changes two members: naming either is naming the swap.
                wanted = member_names_of(name) + (
                    member_names_of(partner_of(name, mode)) if what == "swap" else []
                )
                named = any(n in out.err for n in wanted)
                caught = f"python -m verify ({mode})" if code == 1 and named else None
                tally.add(f"{what} of {name} ({mode})", caught, text)
    with capsys.disabled():
        print("\n" + tally.report("bundle tamper sweep"))
        print(f"{tally.tried} tried, {tally.tried - len(tally.missed)} detected")
    assert not tally.missed, "\n\n".join(tally.missed)
