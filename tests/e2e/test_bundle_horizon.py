"""What a bundle's report says it cannot know offline (`Checkpoint.horizon`, out45 finding 8),
attacked by rev43 (docs/SECURITY.md, "thirty-first round (rev43)"): the line must be its own
line of the text report, and must not read as "everything logged up to the checkpoint is
known": a bundle cannot prove absence (verify/bundle.py), and its sender chooses which of the
log's entries it holds.

On the quickstart ledger (the session's ``quickstart_template``): checkpoint cartpole-bc@2,
trained on cartpole-train@2, whose batch rollouts-cartpole-bc@1-seed1000 is revoked here.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
import zstandard
from test_withdraw_approval import home, run  # noqa: F401  (the quickstart ledger's copy)

from trajledger.verify.__main__ import main as verify_main

BATCH = "rollouts-cartpole-bc@1-seed1000"


def left_out(bundle: Path, out: Path, index: int) -> None:
    """``bundle`` written again to ``out`` without the log entry ``index``, its envelope and its
    proof (``bundle.json`` is not signed: what a bundle holds is its sender's choice)."""
    raw = zstandard.ZstdDecompressor().stream_reader(bundle.read_bytes()).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as t:
        entry = json.loads(t.extractfile(f"entries/{index}").read())  # type: ignore[union-attr]
        drop = {f"entries/{index}", f"proofs/{index}.tlog-proof",
                "objects/sha256/" + entry["envelope"].split(":")[1]}
        index_doc = json.loads(t.extractfile("bundle.json").read())  # type: ignore[union-attr]
        index_doc["members"] = [m for m in index_doc["members"] if m["name"] not in drop]
        body = json.dumps(index_doc, sort_keys=True, separators=(",", ":")).encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as w:
            for m in t.getmembers():
                if m.name not in drop:
                    data = body if m.name == "bundle.json" else t.extractfile(m).read()  # type: ignore[union-attr]
                    m.size = len(data)
                    w.addfile(m, io.BytesIO(data))
    out.write_bytes(zstandard.ZstdCompressor().compress(buf.getvalue()))


def test_the_horizon_is_a_line_of_its_own_under_the_bundle(
        home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """rev43 finding 3: `python -m trajledger.verify BUNDLE` printed the horizon glued to the
    report's last line with a literal ``\\u000a`` (the line break escaped with it as a hidden
    character: ``.translate(HIDDEN)`` bound to the f-string, its "\\n" included); `trajledger
    verify BUNDLE` printed it on a line of its own. Since rev43 finding 5 it is a check of the
    bundle's node (`· not known offline — …`), the same line from both."""
    bundle = tmp_path / "bc2.tar.zst"
    assert run(home, "export", "cartpole-bc@2", "--out", bundle).exit_code == 0
    capsys.readouterr()
    assert verify_main([str(bundle), "--policy", str(home / "policy.toml")]) == 0
    out = capsys.readouterr().out
    assert "\\u000a" not in out, out[-400:]
    said = [line for line in out.splitlines() if "not known offline" in line]
    assert len(said) == 1 and said[0].startswith("    · not known offline — a revocation"), out
    cli = run(home, "verify", bundle, "--policy", home / "policy.toml")
    assert cli.exit_code == 0, cli.output
    assert said == [line for line in cli.stdout.splitlines() if "not known offline" in line]


def test_the_horizon_says_what_the_bundle_leaves_out_is_not_known(
        home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """rev43 finding 2: the line said "not known offline: a revocation … logged in ORIGIN after
    size N": a revocation logged before size N and left out of the bundle by its sender (the
    entry, its envelope and its proof taken out, `bundle.json` made to agree: nothing signs
    which entries a bundle holds) verifies OK, and the line told the reviewer only later ones
    could be missing. It now says that what the bundle leaves out is not known either, and how
    to know (an update of the log, which must carry every entry)."""
    revoked = run(home, "revoke", BATCH, "--key", "approver-a", "--reason", "rev43")
    assert revoked.exit_code == 0, revoked.output
    index = int(revoked.stderr.rsplit("log index ", 1)[1].split(")")[0])
    whole, bundle = tmp_path / "bc2.tar.zst", tmp_path / "bc2-left-out.tar.zst"
    assert run(home, "export", "cartpole-bc@2", "--out", whole).exit_code == 0
    left_out(whole, bundle, index)
    capsys.readouterr()
    policy = str(home / "policy.toml")
    assert verify_main([str(whole), "--policy", policy]) == 1  # (the revocation, carried)
    capsys.readouterr()
    assert verify_main([str(bundle), "--policy", policy]) == 0  # (left out: not detectable)
    last = next(line for line in capsys.readouterr().out.splitlines()
                if "not known offline" in line)
    size = int(last.split("after size ")[1].split()[0].rstrip(",)"))
    assert index < size, last  # (logged before the checkpoint, and not known)
    assert "left out of this bundle" in last, last


def test_the_json_report_says_what_the_text_report_cannot_know_offline(
        home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """rev43 finding 5, the brief's "does `--json` say the same thing?": it did not. `python -m
    trajledger.verify BUNDLE --json` and `trajledger verify BUNDLE --json` printed the report
    with `ok` true and nothing of the horizon: a program reading the verdict was told less
    than a person reading the text. Now the bundle node's `info` check `not known offline`,
    the text's line, in both (schemas/report.v1.md)."""
    bundle = tmp_path / "bc2.tar.zst"
    assert run(home, "export", "cartpole-bc@2", "--out", bundle).exit_code == 0
    capsys.readouterr()
    assert verify_main([str(bundle), "--policy", str(home / "policy.toml"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cli = run(home, "verify", bundle, "--policy", home / "policy.toml", "--json")
    assert cli.exit_code == 0, cli.output
    for said in (doc, json.loads(cli.stdout)):
        bundle_node = next(n for n in said["nodes"] if n["id"] == "bundle")
        horizon = [c for c in bundle_node["checks"] if c["what"] == "not known offline"]
        assert len(horizon) == 1 and horizon[0]["status"] == "info", bundle_node
        assert "after size " in horizon[0]["detail"], horizon
