"""Dataset cards end to end: ``dataset create --card``, ``trajledger card``, export and import.

A vendor ledger (library calls, small classic rollouts under a licence and terms) records a
dataset with the producer's card through the command line. Checked:

- a bad ``card.toml`` is refused whole, one ``FAIL`` line per problem, nothing recorded;
- ``card --format hf`` writes a README that huggingface_hub's ``DatasetCard`` loads, its
  metadata as the Hub defines it plus the ``trajledger`` provenance block, its Markdown with
  exactly the generated headings (the producer's text cannot add one);
- ``card --format croissant`` writes JSON-LD that mlcroissant 1.1 validates with no error and no
  warning, with no network (``requests`` fails if called: the document has no record set, so
  nothing is downloaded); every FileObject's ``contentUrl`` resolves inside an evidence bundle
  exported with data (extracted), to bytes with its SHA-256 and size;
- a revoked dataset's card says so; a dataset whose card bytes were changed gets no card;
- ``export --no-data`` carries the card and ``python -m verify`` checks it; a bundle that leaves
  it out (listed as omitted) fails;
- a buyer that imported the dataset writes the same card from its own log;
- a dataset recorded by trajledger 0.1.0 (no card) still gets a card, saying what is missing.

mlcroissant and huggingface_hub are imported by the tests that use them, not at collection
(1.4 CPU-s of imports in every xdist worker, most of them running none of these tests).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import tamperkit as tk
from click.testing import Result
from markdown_it import MarkdownIt
from testkit import new_runner as runner

from trajledger import Ledger
from trajledger.ledger import artifacts, clikit, record
from trajledger.ledger.artifacts import record_batch, register_environment, register_evaluator
from trajledger.ledger.encode import bundle_index_bytes
from trajledger.ledger.status import approve, record_policy
from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main
from trajledger.verify.bundle_index import BundleIndex

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "compat-0.1.0"
POLICY = """\
name = "vendor"
serial = 1
[roles.producer]
keys = ["keys/vendor.pub"]
[roles.approver]
keys = ["keys/approver.pub"]
[roles.log]
vkeys = ["{vkey}"]
"""
CARD = """\
title = "{title}"
description = \"\"\"
Grid-world rollouts of a random policy.
# Injected heading
<script>alert(1)</script>
\"\"\"
creators = ["Vendor Inc."]
languages = ["en"]
tags = ["grid-world"]
homepage = "https://vendor.example/grid"
citation = "@misc{{grid, title = {{Grid}}}}"

[collection]
process = "Simulated on the vendor's cluster, seeds 0-9."
types = ["Software Collection"]
timeframe = [2025-01-01, 2025-01-31]
source = "The vendor's grid simulator"
preprocessing = ["none"]

[consent]
obtained = "Not applicable: no people took part."

[retention]
policy = "Keep for one year, then erase."
until = 2026-01-31

[personal_information]
contains = false

[uses]
intended = ["Training baselines", "Testing admission"]
out_of_scope = ["Safety-critical control"]
limitations = ["One environment"]
biases = ["Seeded start states"]

[access]
conditions = "Customers under contract."
contact = "data@vendor.example"
"""
HEADINGS = [
    "Dataset Card for Grid rollouts", "Dataset Details", "Dataset Description",
    "Dataset Sources", "Uses", "Direct Use", "Out-of-Scope Use", "Dataset Structure",
    "Dataset Creation", "Source Data", "Data Collection and Processing",
    "Who are the source data producers?", "Consent", "Retention", "Access",
    "Personal and Sensitive Information", "Bias, Risks, and Limitations", "Provenance",
    "Approvals", "Revocations", "Erasures", "Citation", "Dataset Card Contact",
]


def run(home: Path, *args: str | Path) -> Result:
    return runner().invoke(main, ["--ledger", str(home), *map(str, args)])


def expect(r: Result, code: int) -> Result:
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    return r


def rows(seed: int) -> list[dict[str, Any]]:
    return [{"episode_id": f"ep-{seed}-{e}", "step": s, "obs": [float(seed), float(e), float(s)],
             "action": [float(s % 2)], "reward": 1.0, "terminated": s == 3, "truncated": False}
            for e in range(3) for s in range(4)]


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "vendor"
        ledger = Ledger.init(self.home, origin="vendor.example/cards")
        self.vendor = ledger.keys.create("vendor", encrypt=False)
        self.approver = ledger.keys.create("approver", encrypt=False)
        self.policy = self.home / "policy.toml"
        self.policy.write_text(POLICY.format(vkey=ledger.log.vkey))
        record_policy(ledger, self.policy, [self.approver])
        register_environment(ledger, "gridworld", "1", self.vendor, source="tests")
        register_evaluator(ledger, "judge", "2", "deterministic", self.vendor)
        self.batches = [
            record_batch(ledger, rows(seed), env="gridworld@1", evaluator="judge@2",
                         policy="random", signer=self.vendor, name=f"b{seed}", licence="CC-BY-4.0",
                         consent="opt-in", retention="365d").recorded.digest
            for seed in range(4)
        ]
        self.digest = self.create("grid", self.batches[:2], "Grid rollouts")
        approve(ledger, "grid@1", self.approver, purpose="train")

    def create(self, name: str, batches: list[str], title: str) -> str:
        card = self.root / f"{name}.toml"
        card.write_text(CARD.format(title=title))
        args = [a for b in batches for a in ("--batch", b)]
        r = expect(run(self.home, "dataset", "create", name, "--version", "1", "--split",
                       "train", *args, "--card", card, "--key", "vendor"), 0)
        digest = r.stdout.strip()
        assert r.stderr.startswith(f"OK: dataset {name}@1 (train, {len(batches)} batch(es), "
                                   "card sha256:"), r.stderr
        return digest

    def card(self, ref: str, fmt: str, out: Path) -> Result:
        return run(self.home, "card", ref, "--format", fmt, "--out", out)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("cards"))


@pytest.fixture(autouse=True)
def _known_log(world: World) -> None:
    """Each test has a state directory of its own: its user knows the vendor's log key ahead
    (``trajledger trust``), so no first-use note comes before the lines the tests compare."""
    tk.pin_log(world.home)


def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import requests

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the network was called")

    monkeypatch.setattr(requests, "get", refuse)
    monkeypatch.setattr(requests.Session, "request", refuse)


# -- recording -----------------------------------------------------------------------------------


def test_a_bad_card_is_refused_whole_and_nothing_is_recorded(world: World) -> None:
    bad = world.root / "bad.toml"
    bad.write_text('description = "x"\n[consent]\nobtained = 1\n[uses]\nintended = []\n')
    size = Ledger.open(world.home).log.size
    r = expect(run(world.home, "dataset", "create", "bad", "--version", "1", "--split", "train",
                   "--batch", world.batches[3], "--card", bad, "--key", "vendor"), 1)
    assert r.stderr.splitlines() == [
        f"FAIL: {bad}: [collection] is missing: process: how the data was collected",
        f"FAIL: {bad}: [consent] obtained is an integer, want a string",
        f"FAIL: {bad}: [retention] is missing: policy: how long the data may be kept, and what "
        "happens then",
        f"FAIL: {bad}: [personal_information] is missing: contains: whether the data holds "
        "personal or sensitive information (true or false)",
        f"FAIL: {bad}: [access] is missing: conditions: who may see the data, and on what terms",
        f"FAIL: {bad}: [uses] intended is empty, want at least one intended use",
    ]
    assert r.stdout == ""
    assert Ledger.open(world.home).log.size == size
    r = expect(run(world.home, "dataset", "create", "bad", "--version", "1", "--split", "train",
                   "--batch", world.batches[3], "--card", world.root / "nope.toml", "--key",
                   "vendor"), 3)
    assert r.stderr == f"FAIL: {world.root / 'nope.toml'}: No such file or directory\n"
    assert Ledger.open(world.home).log.size == size


# -- Hugging Face --------------------------------------------------------------------------------


def test_the_hf_card_loads_with_huggingface_hub(world: World, tmp_path: Path) -> None:
    from huggingface_hub import DatasetCard
    out = tmp_path / "README.md"
    r = expect(world.card("grid@1", "hf", out), 0)
    assert r.stderr == f"OK: card of dataset grid@1 (hf) written to {out}\n"
    card = DatasetCard.load(out)
    data = card.data.to_dict()
    assert data["pretty_name"] == "Grid rollouts"
    assert data["license"] == "cc-by-4.0"
    assert data["language"] == ["en"]
    assert data["tags"] == ["trajledger", "reinforcement-learning", "provenance", "grid-world"]
    assert data["task_categories"] == ["reinforcement-learning"]
    assert data["size_categories"] == ["n<1K"]
    size = sum(f.stat().st_size for b in world.batches[:2] for f in _blob_files(world, b))
    assert data["dataset_info"] == {
        "splits": [{"name": "train", "num_bytes": size, "num_examples": 6}], "dataset_size": size}
    tl = data["trajledger"]
    assert tl["dataset"]["digest"] == world.digest and tl["dataset"]["split"] == "train"
    manifest = json.loads(Ledger.open(world.home).store.get(world.digest))
    card_file = next(f for f in manifest["files"] if f["path"] == "card.json")
    assert tl["card"] == "sha256:" + card_file["digest"]["sha256"]
    assert tl["log"]["origin"] == "vendor.example/cards"
    assert [b["digest"] for b in tl["batches"]] == sorted(world.batches[:2])
    assert {(b["licence"], b["consent"], b["retention"]) for b in tl["batches"]} == {
        ("CC-BY-4.0", "opt-in", "365d")}
    assert tl["environments"] == [{"name": "gridworld", "version": "1",
                                   "digest": tl["batches"][0]["environment"]["digest"]}]
    assert [e["name"] + "@" + e["version"] for e in tl["evaluators"]] == ["judge@2"]
    assert [(a["kind"], a["purpose"]) for a in tl["approvals"]] == [("approval", "train")]
    assert tl["revocations"] == [] and tl["erasures"] == []
    # The Markdown: the generated sections and nothing the producer's text made up.
    tokens = MarkdownIt("commonmark").parse(card.text)
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == HEADINGS
    assert not {t.type for t in tokens} & {"html_block", "html_inline"}
    text = card.text
    assert "\\# Injected heading" in text and "&lt;script>" in text
    assert "- Training baselines\n- Testing admission" in text
    assert "Keep for one year, then erase.\n\n**Keep until:** 2026-01-31" in text
    assert "The producer states the data holds no personal or sensitive information." in text
    assert "- dataset grid@1: for `train`, approved " in text
    assert "None: no verified revocation record." in text
    # The same log state writes the same bytes.
    again = tmp_path / "again.md"
    expect(world.card("grid@1", "hf", again), 0)
    assert again.read_bytes() == out.read_bytes()


def test_the_python_api_writes_the_same_cards(world: World, tmp_path: Path) -> None:
    from trajledger import Ledger as Api

    api = Api.open(world.home)
    for fmt in ("hf", "croissant"):
        out = tmp_path / fmt
        expect(world.card("grid@1", fmt, out), 0)
        assert api.card("grid@1", fmt) == out.read_bytes()
    with pytest.raises(ValueError, match="card format 'pdf', want one of hf, croissant"):
        api.card("grid@1", "pdf")
    card = world.root / "api.toml"
    card.write_text(CARD.format(title="API rollouts"))
    made = api.create_dataset("api", "1", "train", [world.batches[3]], key="vendor", card=card)
    assert json.loads(api.card("api@1", "croissant"))["trajledger:provenance"]["dataset"][
        "digest"] == made.digest


def _blob_files(world: World, digest: str) -> list[Path]:
    store = Ledger.open(world.home).store
    manifest = json.loads(store.get(digest))
    return [store.path_of("sha256:" + f["digest"]["sha256"]) for f in manifest["files"]]


# -- Croissant -----------------------------------------------------------------------------------


def test_the_croissant_card_validates_with_mlcroissant(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlcroissant as mlc
    bundle = tmp_path / "grid.tar.zst"
    expect(run(world.home, "export", "grid@1", "--out", bundle), 0)
    extracted = tmp_path / "extracted"
    for name, data in tk.bundle_members(bundle):
        (extracted / name).parent.mkdir(parents=True, exist_ok=True)
        (extracted / name).write_bytes(data)
    out = extracted / "croissant.json"
    r = expect(world.card("grid@1", "croissant", out), 0)
    assert r.stderr == f"OK: card of dataset grid@1 (croissant) written to {out}\n"
    no_network(monkeypatch)
    ds = mlc.Dataset(jsonld=out)
    issues = ds.metadata.ctx.issues
    assert not issues.errors and not issues.warnings, issues.report()
    m = ds.metadata
    assert (m.name, m.version, m.license, m.url) == (
        "grid", "1", ["CC-BY-4.0"], "https://vendor.example/grid")
    assert m.cite_as == "@misc{grid, title = {Grid}}"
    assert m.data_collection == ("Simulated on the vendor's cluster, seeds 0-9.\n\n"
                                 "Consent: Not applicable: no people took part.")
    assert m.data_collection_type == ["Software Collection"]
    # RAI 1.0 (its vocabulary and spec) names rai:dataCollectionTimeframe; mlcroissant 1.1.1
    # reads rai:dataCollectionTimeFrame instead, so it does not see it (docs/cards.md).
    assert m.data_collection_timeframe is None
    assert m.data_use_cases == ["Training baselines", "Testing admission"]
    assert m.data_limitations == ["One environment", "Out of scope: Safety-critical control"]
    assert m.data_biases == ["Seeded start states"]
    assert m.personal_sensitive_information == [
        "None: the producer states the data holds no personal or sensitive information."]
    assert m.data_release_maintenance_plan == (
        "Retention: Keep for one year, then erase. Keep until 2026-01-31.")
    # Every file of the dataset and its batches, by digest and size; each contentUrl resolves
    # inside the exported bundle to exactly those bytes.
    files = m.file_objects
    assert len(files) == 2 + 2 * 2
    for f in files:
        path = extracted / str(f.content_url)
        data = path.read_bytes()
        assert hashlib.sha256(data).hexdigest() == f.sha256
        assert f.content_size == f"{len(data)} B"
    doc = json.loads(out.read_bytes())
    assert doc["rai:dataCollectionTimeframe"] == ["2025-01-01", "2025-01-31"]
    assert doc["trajledger:provenance"]["dataset"]["digest"] == world.digest
    assert doc["conformsTo"] == ["http://mlcommons.org/croissant/1.0",
                                 "http://mlcommons.org/croissant/RAI/1.0"]


# -- what the records say -------------------------------------------------------------------------


def test_a_revoked_dataset_gets_a_card_that_says_so(world: World, tmp_path: Path) -> None:
    from huggingface_hub import DatasetCard
    digest = world.create("gone", [world.batches[2]], "Gone rollouts")
    expect(run(world.home, "revoke", "gone@1", "--key", "approver", "--reason",
               "consent withdrawn"), 0)
    out = tmp_path / "README.md"
    r = expect(world.card("gone@1", "hf", out), 0)
    index = Ledger.open(world.home).log.size - 1
    assert r.stderr.splitlines() == [
        f"WARNING: dataset gone@1 is revoked: consent withdrawn (log index {index}); the card "
        "says so",
        f"OK: card of dataset gone@1 (hf) written to {out}",
    ]
    card = DatasetCard.load(out)
    revocations = card.data.to_dict()["trajledger"]["revocations"]
    assert [(x["subject"], x["reason"], x["logIndex"]) for x in revocations] == [
        (digest, "consent withdrawn", index)]
    assert "> **Revoked.** Verified revocation records name this dataset" in card.text
    assert "- dataset gone@1: **revoked** " in card.text
    croissant = tmp_path / "croissant.json"
    expect(world.card("gone@1", "croissant", croissant), 0)
    plan = json.loads(croissant.read_bytes())["rai:dataReleaseMaintenancePlan"]
    assert plan.endswith(f"Revoked (dataset gone@1, log index {index}): consent withdrawn")


def test_a_revocation_anywhere_upstream_is_on_the_card(world: World, tmp_path: Path) -> None:
    from huggingface_hub import DatasetCard
    ledger = Ledger.open(world.home)
    register_environment(ledger, "shaky", "1", world.vendor, source="tests")
    batch = record_batch(ledger, rows(9), env="shaky@1", policy="random", signer=world.vendor,
                         name="b9", licence="CC-BY-4.0").recorded.digest
    world.create("shaky-data", [batch], "Shaky rollouts")
    expect(run(world.home, "revoke", "shaky@1", "--key", "vendor", "--reason",
               "simulator bug"), 0)
    index = Ledger.open(world.home).log.size - 1
    out = tmp_path / "README.md"
    r = expect(world.card("shaky-data@1", "hf", out), 0)
    assert r.stderr.splitlines()[0] == (
        f"WARNING: environment shaky@1 is revoked: simulator bug (log index {index}); the card "
        "says so")
    revocations = DatasetCard.load(out).data.to_dict()["trajledger"]["revocations"]
    assert [(x["about"], x["reason"]) for x in revocations] == [("environment shaky@1",
                                                                  "simulator bug")]


def test_changed_card_bytes_get_no_card(world: World, tmp_path: Path) -> None:
    world.create("changed", [world.batches[3]], "Changed rollouts")
    store = Ledger.open(world.home).store
    manifest = json.loads(store.get(Ledger.open(world.home).trust_state().by_name(
        "changed", "1")[0].subject))
    card = "sha256:" + next(f for f in manifest["files"] if f["path"] == "card.json")[
        "digest"]["sha256"]
    path = store.path_of(card)
    original = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(original.replace(b"Changed rollouts", b"Charged rollouts"))
    try:
        out = tmp_path / "README.md"
        r = expect(world.card("changed@1", "hf", out), 1)
        lines = r.stderr.splitlines()
        assert lines[0] == ("FAIL: card changed@1: the dataset's lineage does not verify (1 "
                            "problem(s)); a card states verified facts only")
        assert re.fullmatch(r"FAIL: dataset changed@1 \(sha256:[0-9a-f]{12}…\) > card\.json: "
                            r"tampered: content hashes to sha256:[0-9a-f]{12}…, want "
                            + re.escape(card[:19]) + "…", lines[1]), lines[1]
        assert len(lines) == 2 and not out.exists()
    finally:
        path.write_bytes(original)


# -- exchange ------------------------------------------------------------------------------------


def test_a_bundle_without_data_carries_the_card_and_the_verifier_checks_it(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "nodata.tar.zst"
    expect(run(world.home, "export", "grid@1", "--no-data", "--out", bundle), 0)
    items = tk.bundle_members(bundle)
    index = BundleIndex.from_bytes(items[0][1])
    manifest = json.loads(dict(items)[f"objects/sha256/{world.digest[7:]}"])
    card = next(f for f in manifest["files"] if f["path"] == "card.json")["digest"]["sha256"]
    assert f"objects/sha256/{card}" in dict(items)
    assert f"sha256:{card}" not in index.omitted and index.omitted
    assert verify_main([str(bundle), "--policy", str(world.policy)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"✓ card\.json — \d+ bytes, the digest its signed record names", out)
    # Leave the card out, listed as omitted data: the verifier insists on it.
    kept = [(n, d) for n, d in items[1:] if n != f"objects/sha256/{card}"]
    obj = json.loads(items[0][1])
    obj["members"] = [m for m in obj["members"] if m["name"] != f"objects/sha256/{card}"]
    obj["omitted"] = sorted([*obj["omitted"], f"sha256:{card}"])
    edited = BundleIndex.from_bytes(json.dumps(obj, separators=(",", ":"),
                                               sort_keys=True).encode())
    bad = tk.write_bundle(tmp_path / "nocard.tar.zst",
                          [("bundle.json", bundle_index_bytes(edited)), *kept])
    assert verify_main([str(bad), "--policy", str(world.policy)]) == 1
    err = capsys.readouterr().err
    assert (f"> card.json: blob sha256:{card[:12]}… is missing (exports carry it, with data or "
            "without)") in err, err


BUYER_POLICY = """\
name = "buyer"
serial = 1
[roles.producer]
keys = ["trust/vendor.pub"]
[roles.approver]
keys = ["trust/approver.pub", "keys/b1.pub"]
[roles.log]
vkeys = ["{vendor}", "{buyer}"]
"""


def test_a_buyer_writes_the_same_card_from_its_own_log(world: World, tmp_path: Path) -> None:
    bundle = tmp_path / "grid.tar.zst"
    expect(run(world.home, "export", "grid@1", "--out", bundle), 0)
    buyer = tmp_path / "buyer"
    expect(run(buyer, "init", "--origin", "buyer.example/log"), 0)
    expect(run(buyer, "key", "new", "b1", "--no-encrypt"), 0)
    (buyer / "trust").mkdir()
    for k in ("vendor", "approver"):
        shutil.copy(world.home / "keys" / f"{k}.pub", buyer / "trust" / f"{k}.pub")
    policy = buyer / "policy.toml"
    policy.write_text(BUYER_POLICY.format(vendor=Ledger.open(world.home).log.vkey,
                                          buyer=Ledger.open(buyer).log.vkey))
    expect(run(buyer, "policy", "set", policy, "--key", "b1", "--yes"), 0)
    expect(run(buyer, "import", bundle, "--key", "b1"), 0)
    theirs, ours = tmp_path / "vendor.json", tmp_path / "buyer.json"
    expect(world.card("grid@1", "croissant", theirs), 0)
    expect(run(buyer, "card", "grid@1", "--format", "croissant", "--out", ours), 0)
    a, b = json.loads(theirs.read_bytes()), json.loads(ours.read_bytes())
    pa, pb = a.pop("trajledger:provenance"), b.pop("trajledger:provenance")
    # The producer's words, the files and the terms are the same; the log, its indices and
    # times are the buyer's (datePublished: when the record entered the buyer's log).
    assert a.pop("datePublished") == pa["dataset"]["logged"]
    assert b.pop("datePublished") == pb["dataset"]["logged"]
    assert a == b
    assert pa["card"] == pb["card"] and pa["dataset"]["digest"] == pb["dataset"]["digest"]
    assert pb["log"]["origin"] == "buyer.example/log"
    assert [x["digest"] for x in pa["batches"]] == [x["digest"] for x in pb["batches"]]


# -- older records -------------------------------------------------------------------------------


def test_a_dataset_recorded_without_a_card_gets_one_saying_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlcroissant as mlc
    from huggingface_hub import DatasetCard
    ledger = tmp_path / "ledger"
    shutil.copytree(FIXTURES / "ledger", ledger)
    out = tmp_path / "README.md"
    r = expect(run(ledger, "card", "cartpole@1", "--format", "hf", "--out", out, "--policy",
                   ledger / "policy.toml"), 0)
    assert r.stderr.splitlines() == [
        "WARNING: dataset cartpole@1 has no card of its producer (recorded without --card): "
        "its sections say 'not documented'",
        f"OK: card of dataset cartpole@1 (hf) written to {out}",
    ]
    card = DatasetCard.load(out)
    assert card.data.to_dict()["trajledger"]["card"] is None
    assert "Not documented: this dataset was recorded without a card" in card.text
    croissant = tmp_path / "croissant.json"
    expect(run(ledger, "card", "cartpole@1", "--format", "croissant", "--out", croissant,
               "--policy", ledger / "policy.toml"), 0)
    no_network(monkeypatch)
    issues = mlc.Dataset(jsonld=croissant).metadata.ctx.issues
    assert not issues.errors, issues.report()


def test_a_name_from_a_signed_record_makes_no_heading(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The card's facts come from signed records, but their strings are the signer's: a
    dataset named ``evil<LF><LF>## Revocations<LF><LF>None: …`` added a "Revocations" heading
    saying nothing was revoked near the top of the card (the name stood raw in "Check it
    yourself"), so a vendor could write a section that reads as a generated one; its escape
    sequences reached the file raw (rev5). A name is one line of text, as table cells are."""
    name = "evil\n\n## Revocations\n\nNone: no verified revocation record.\n\n<b>x</b>\x1b[2K\r"
    # A vendor whose own software signs a name this one refuses (rev15: record.py; rev22:
    # names.py, the grammar of new names).
    monkeypatch.setattr(record, "check_subject_name", lambda _name: None)
    monkeypatch.setattr(artifacts, "check_new", lambda *_a: None)
    monkeypatch.setattr(clikit.RecordName, "convert", lambda _self, value, *_a: value)
    card = world.root / "evil.toml"
    card.write_text(CARD.format(title="Evil rollouts"))
    digest = expect(run(world.home, "dataset", "create", name, "--version", "1", "--split",
                        "train", "--batch", world.batches[3], "--card", card, "--key",
                        "vendor"), 0).stdout.strip()
    out = tmp_path / "README.md"
    expect(world.card(digest, "hf", out), 0)
    text = out.read_text()
    tokens = MarkdownIt("commonmark").parse(text)
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == ["Dataset Card for Evil rollouts", *HEADINGS[1:]], headings
    assert not {t.type for t in tokens} & {"html_block", "html_inline"}
    assert "\x1b" not in text and "\r" not in text
