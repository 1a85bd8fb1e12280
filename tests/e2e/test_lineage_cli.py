"""End to end: ``trajledger lineage`` and ``trajledger impact`` on a quickstart ledger.

The quickstart ledger (10 episodes: the session's ``quickstart_template``, copied per test) has
two training iterations: checkpoint 2 was trained on dataset 2 (the random batch + checkpoint
1's rollouts) with checkpoint 1 as parent, so lineage spans iterations and a revocation of the
random batch must reach both checkpoints.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import testkit
from click.testing import CliRunner, Result

from trajledger.runner.cli import main


def run(runner: CliRunner, home: Path, *args: str) -> Result:
    return runner.invoke(main, ["--ledger", str(home), *args], prog_name="trajledger")


@pytest.fixture
def demo(quickstart_template: testkit.Template[str], tmp_path: Path) -> tuple[Path, str]:
    """A copy of the session's quickstart ledger (tests/e2e/conftest.py) and its user state
    (the user knows its log), and the final checkpoint."""
    return testkit.copy_template(quickstart_template, tmp_path / "demo"), quickstart_template.value


def test_lineage_text_spans_both_iterations(runner: CliRunner, demo: tuple[Path, str]) -> None:
    home, ckpt = demo
    r = run(runner, home, "lineage", ckpt[:15])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    # The verdict first, with the count of checks; then the graph.
    assert lines[0].startswith(f"✓ OK: checkpoint cartpole-bc@2 ({ckpt[:19]}…): ")
    assert lines[0].endswith(" checks passed")
    assert lines[1].startswith("✓ log trajledger.quickstart/")
    assert any(ln.startswith(f"✓ checkpoint cartpole-bc@2 ({ckpt[:19]}…) — log index ")
               for ln in lines)
    text = r.stdout
    for want in (
        "dataset → ✓ dataset cartpole-train@2",
        "generated-by → ✓ checkpoint cartpole-bc@1",
        "base-checkpoint → ✓ checkpoint cartpole-bc@1",
        "environment → ✓ environment cartpole@1",
        "evaluator → ✓ evaluator episode-return@1",
        "(see above)",
    ):
        assert want in text, want
    # Each node is drawn once; later uses refer back.
    drawn = [ln for ln in lines if "(see above)" not in ln and "→ ✓ environment" in ln]
    assert len(drawn) == 1


def test_lineage_json_is_a_graph(runner: CliRunner, demo: tuple[Path, str]) -> None:
    home, ckpt = demo
    r = run(runner, home, "lineage", ckpt, "--format", "json")
    assert r.exit_code == 0, r.output
    graph = json.loads(r.stdout)
    assert graph["subject"] == ckpt and graph["direction"] == "upstream"
    assert graph["format"] == "https://trajledger.dev/report/v1"
    kinds = sorted(n["kind"] for n in graph["nodes"])
    assert kinds == [
        "checkpoint",
        "checkpoint",
        "dataset",
        "dataset",
        "environment",
        "evaluator",
        "log",
        "rollout-batch",
        "rollout-batch",
    ]
    assert all(n["status"] == "ok" for n in graph["nodes"])
    ids = [n["id"] for n in graph["nodes"]]
    assert len(ids) == len(set(ids))
    assert all(e["from"] in ids and e["to"] in ids for e in graph["edges"])
    roles = {e["role"] for e in graph["edges"]}
    assert roles == {
        "dataset",
        "batch",
        "environment",
        "evaluator",
        "generated-by",
        "base-checkpoint",
    }


def test_mermaid_and_dot(runner: CliRunner, demo: tuple[Path, str]) -> None:
    home, ckpt = demo
    mermaid = run(runner, home, "lineage", ckpt, "--format", "mermaid").stdout
    assert mermaid.startswith("flowchart TD\n")
    graph = json.loads(run(runner, home, "lineage", ckpt, "--json").stdout)
    # Artifacts' edges solid, the records' (four approvals) dashed.
    assert mermaid.count(" -->|") == len(graph["edges"])
    assert mermaid.count(" -.->|approval|") == len(graph["records"]) == 4
    dot = run(runner, home, "lineage", ckpt, "--format", "dot").stdout
    assert dot.startswith("digraph lineage {") and dot.rstrip().endswith("}")
    assert dot.count(" -> ") == len(graph["edges"]) + 4 and dot.count("style=dashed]") == 4
    for text in (mermaid, dot):  # short names, the full name and digest on hover
        assert "cartpole-train@2" in text and f"checkpoint cartpole-bc@2 · {ckpt}" in text


def test_html_is_one_self_contained_page(
    runner: CliRunner, demo: tuple[Path, str], tmp_path: Path
) -> None:
    home, ckpt = demo
    out = tmp_path / "lineage.html"
    r = run(runner, home, "lineage", ckpt, "--format", "html", "--out", str(out))
    assert r.exit_code == 0 and r.stderr.startswith(f"OK: written to {out}\nOK: {ckpt}: "), \
        r.output
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<svg" in page and "Lineage of checkpoint cartpole-bc@2" in page
    assert not re.search(r"(src|href)=\"https?:", page), "no external resources"
    assert page.count('<g class="node"') == 8 and "8 verified" in page
    assert page.count('<g class="record"') == 4 and "4 records" in page  # the approvals
    assert page.count("<tr><td>approval</td>") == 4


def test_impact_after_revocation_names_the_checkpoints(
    runner: CliRunner, demo: tuple[Path, str]
) -> None:
    home, ckpt = demo
    r = run(
        runner, home, "revoke", "cartpole-random", "--key", "approver-a", "--reason", "PII found"
    )
    assert r.exit_code == 0, r.output
    r = run(runner, home, "impact", "cartpole-random")
    assert r.exit_code == 0, r.output
    # The verdict on stderr too (out36 finding 5: it was the report's first line alone).
    reached, verdict = r.stderr.splitlines()
    assert reached == "2 checkpoint(s) reached: cartpole-bc@1, cartpole-bc@2"
    assert verdict.startswith("WARNING: impact cartpole-random: 1 of ") and verdict.endswith(
        " checks failed, so what is marked failing in the report fails through it ('trajledger "
        "verify REF' of each says why); the answer is whole: exit 0"), verdict
    lines = r.stdout.splitlines()
    assert any(ln.startswith("✗ rollout-batch cartpole-random (") for ln in lines)
    assert "    ✗ revoked — PII found (log index 20)" in lines
    # The revocation record itself is drawn beside the batch.
    assert any(ln.startswith("    · revocation at log index 20, signed by ") and
               ln.endswith(" — reason: PII found; revokedAt: " + ln.rsplit(": ", 1)[1])
               for ln in lines), lines
    graph = json.loads(run(runner, home, "impact", "cartpole-random", "--format", "json").stdout)
    assert json.loads(run(runner, home, "impact", "cartpole-random", "--json").stdout) == graph
    assert [(r["kind"], r["logIndex"]) for r in graph["records"]] == [
        ("approval", 5), ("approval", 6), ("approval", 10), ("approval", 11), ("revocation", 20)]
    assert graph["direction"] == "downstream"
    assert {n["name"] for n in graph["nodes"] if n["kind"] == "checkpoint"} == {"cartpole-bc"}
    # The batch fails (revoked); what was built on it fails through its lineage.
    assert all(n["lineage"] == "fail" for n in graph["nodes"] if n["kind"] != "log")
    assert [n["status"] for n in graph["nodes"] if n["status"] == "fail"] == ["fail"]
    assert lines[0].startswith("✗ FAIL: rollout-batch cartpole-random (")
    # and verify of the final checkpoint now fails, naming the revocation
    r = run(runner, home, "verify", ckpt)
    assert r.exit_code == 1
    assert "revoked: PII found (log index 20)" in r.stderr


def test_unknown_reference(runner: CliRunner, demo: tuple[Path, str]) -> None:
    home, _ = demo
    r = run(runner, home, "lineage", "nothing@9")
    assert r.exit_code == 3
    assert r.stderr == "FAIL: nothing@9: no artifact has this name; see 'trajledger log show'\n"
