"""What out49 followed up of out48's and rev46's Left (outsiders' follow-ups): a name clash's
imported record named in the report trees, one rule for a record of yours taking an imported
name, the progress bar's total, and what a team does with every approver key lost;
docs/SECURITY.md, "Review of 2026-12-07, thirty-fifth round (out49)".
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import click
import jsonschema
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import testkit
from click.testing import CliRunner
from test_out48_reported import clashing, lab_buyer, vendor_only
from testkit import Party, understated

from trajledger.ledger.rollouts.parquet_read import stated_steps

SCHEMA = json.loads((Path(__file__).parents[2] / "schemas/report.v1.schema.json").read_text())


def test_the_recording_bar_counts_the_row_groups_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev46's Left: ``record``'s progress bar (stderr a terminal) took its length from a
    Parquet footer's total of rows, which no reader decodes by: a footer stating 1 row over
    row groups of 100 drew a bar of 1 step. Expected: the row groups' rows
    (`parquet_read.stated_steps`), what the recording reads."""
    vendor = Party(tmp_path, "vendor")
    vendor_only(vendor, tmp_path)
    out = io.BytesIO()
    pq.write_table(pa.table({
        "episode_id": ["e"] * 100, "step": list(range(100)),
        "obs": [[0.01 * t, 0.0, 0.0, 0.0] for t in range(100)],
        "action": [t % 2 for t in range(100)],
        "reward": [1.0] * 100, "terminated": [t == 99 for t in range(100)],
        "truncated": [False] * 100}), out, row_group_size=30)
    crafted = understated(out.getvalue())
    assert stated_steps(pq.read_metadata(pa.BufferReader(crafted))) == 100
    (tmp_path / "steps.parquet").write_bytes(crafted)
    lengths: list[Any] = []
    real = click.progressbar

    def progressbar(*args: Any, **kwargs: Any) -> Any:
        lengths.append(kwargs.get("length"))
        return real(*args, **kwargs)

    monkeypatch.setattr(click, "progressbar", progressbar)
    monkeypatch.setattr("trajledger.ledger.artifact_cli.is_terminal", lambda stream: True)
    vendor.run("record", tmp_path / "steps.parquet", "--env", "cartpole@1", "--policy", "random",
               "--key", "vendor")
    assert lengths == [100], lengths


def _named(report: str, digest: str) -> list[str]:
    """The names a text report gives the node of ``digest`` (``kind NAME (sha256:…)``)."""
    return re.findall(r"(?:✓|✗|∅|·) (?:dataset|checkpoint) (\S+) \(" + re.escape(digest[:19]),
                      report)


def test_the_report_trees_name_an_imported_record_after_a_clash_as_commands_find_it(
    tmp_path: Path
) -> None:
    """out48's Left: after a clash (the vendor's ``grid@1`` imported, then a ``grid@1`` of the
    buyer's own), ``impact`` of the vendor's batch and ``lineage`` of the vendor's dataset
    (and ``verify`` and ``admit`` of it) named it ``dataset grid@1 (sha256:…)`` in their trees
    (the verdict line too), a name that
    ``verify``, ``show`` and ``approve`` take for the buyer's own; ``--json`` had the plain
    name only. Expected: the origin-qualified name there (``show`` resolves it to the
    vendor's), a ``qualifiedName`` beside ``name`` in ``--json`` (``name`` as signed); the
    buyer's own dataset by its plain name."""
    _vendor, buyer, batch, theirs, made = clashing(tmp_path)
    mine = made.stdout.strip().splitlines()[-1]
    for command, ref in (("impact", batch), ("lineage", theirs), ("verify", theirs)):
        text = buyer.run(command, ref).stdout
        names = set(_named(text, theirs))
        assert len(names) == 1 and "+grid@1" in next(iter(names)), (command, text)
        (name,) = names
        assert json.loads(buyer.run("show", name, "--json").stdout)["digest"] == theirs
        doc = json.loads(buyer.run(command, ref, "--json").stdout)
        (node,) = [n for n in doc["nodes"] if n["id"] == theirs]
        assert node["name"] == "grid" and node["qualifiedName"] == name, node
        jsonschema.validate(doc, SCHEMA)  # (an optional member of a node: additive)
        for fmt in ("mermaid", "dot", "html") if command != "verify" else ():
            assert "+grid" in buyer.run(command, ref, "--format", fmt).stdout, fmt
    text = buyer.run("admit", name).stdout  # (the vendor's, approved by the buyer)
    assert set(_named(text, theirs)) == {name}, text
    doc = json.loads(buyer.run("admit", name, "--json").stdout)["report"]
    assert [n["qualifiedName"] for n in doc["nodes"] if n["id"] == theirs] == [name], doc
    text = buyer.run("lineage", "grid@1").stdout
    assert _named(text, mine) == ["grid@1"], text
    doc = json.loads(buyer.run("lineage", "grid@1", "--json").stdout)
    assert all("qualifiedName" not in n for n in doc["nodes"]), doc


def test_a_checkpoint_of_yours_takes_an_imported_name_as_a_dataset_of_yours_does(
    runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """out48's Left: ``train --name cartpole-bc --version 1`` after the lab's
    ``cartpole-bc@1`` was imported was refused (``already recorded … give another
    --version``), while ``dataset create``, ``env register`` and ``evaluator register`` take
    an imported record's name with a warning, and an import of a clashing name is taken with
    one: two rules for one question. Expected (one rule: yours wins, the import is named by
    its origin): recorded, ``WARNING: name clash: your checkpoint cartpole-bc@1 … takes the
    name of checkpoint cartpole-bc@1 imported from …``, ``cartpole-bc@1`` naming yours and
    the qualified name the lab's; a name of your own still refused."""
    theirs, buyer = lab_buyer(runner, quickstart_template, tmp_path)
    buyer.run("import", tmp_path / "ck.tar.zst", "--key", "b1", "--key", "b2")
    args = ("train", "--dataset", "cartpole-train@1", "--key", "bt", "--name", "cartpole-bc",
            "--version", "1", "--seed", "7")
    r = buyer.run(*args)
    mine = r.stdout.strip().splitlines()[-1]
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("WARNING: name clash")]
    assert "your checkpoint cartpole-bc@1" in line and theirs[:19] in line, line
    told = re.search(r"refer to the imported one as '([^']+)'", line)
    assert told, line
    assert json.loads(buyer.run("show", told.group(1), "--json").stdout)["digest"] == theirs
    assert json.loads(buyer.run("show", "cartpole-bc@1", "--json").stdout)["digest"] == mine
    again = buyer.run(*args[:-1], "8", code=3)
    assert "checkpoint cartpole-bc@1 is already recorded" in again.stderr, again.stderr


def test_two_logs_of_one_origin_name_each_claiming_a_key_are_named_each(tmp_path: Path) -> None:
    """rev46's Left (upd47's claims grouped by the declaring log's origin name): two and
    three, two logs that both call themselves ``two.example/log`` (another key each, no
    handover: the buyer's policy trusts each on its own), relay one's records and each
    declares one's key compromised; when one's own records come, each word is a claim. Before,
    the two logs were taken for one (a rotation's keys): one claim line, named for the key
    that sorts first, the other's declaration unsaid. Expected: a claim line each, named for
    its own log key."""
    from test_borrowed_handovers import relays
    from test_updates import Buyer, vendor_copy
    from test_whose_declaration import two_declares

    one = vendor_copy(tmp_path, "one", "one.example/log")
    relaying = [vendor_copy(tmp_path, "two", "two.example/log", seeds=(3, 4)),
                vendor_copy(tmp_path, "three", "two.example/log", seeds=(5, 6))]
    two, three = relaying
    assert two.origin != three.origin  # (ORIGIN+KEYHASH: one origin name, two keys)
    buyer = Buyer(tmp_path, [one, *relaying])
    bundles = [tmp_path / f"{party.name}-relay.tar.zst" for party in relaying]
    for party, bundle in zip(relaying, bundles, strict=True):
        relays(party, one)
        party.run("export", one.dataset, "--out", bundle)
    for bundle in bundles:
        buyer.run("import", bundle, "--key", "approver")
    (theirs,) = [k["keyid"] for k in json.loads(one.run("key", "list", "--json").stdout)
                 if k["name"] == "vendor"]
    for party in relaying:  # (each writes two-update.tar.zst, imported at once)
        two_declares(tmp_path, one, party, buyer, theirs, since=0)
    r = buyer.run("import", one.bundle, "--key", "approver", "--json")
    report = json.loads(r.stdout)["import"]
    claims = [s for s in report["suspect"] + report["compromised"] if s.get("claim")]
    assert sorted(c["declaredBy"] for c in claims) == sorted([two.origin, three.origin]), claims
    for c in claims:
        assert c["key"] == theirs and c["owner"] == one.origin, c
        assert f"which {c['declaredBy']} declares compromised" in c["text"], c
        assert f"WARNING: {c['text']}" in r.stderr, r.stderr
