"""rev12's outside check of the derived data: what ``stats`` and ``query`` answer when the audit
index could not read a batch or a batch was erased, when a filter holds more than one
expression, when episodes have no return or a producer's hold NaN, and what ``reindex --check``
finds in an edited audit index (docs/SECURITY.md, "Review of 2026-12-03, eighth round (rev12)",
whose finding numbers the sections below use; finding 1 is tested in
tests/unit/ledger/test_trust_state.py, finding 8 in tests/unit/ledger/test_home.py).

Each finding's test failed on the code before its fix (said in its docstring).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tamperkit as tk
import testkit
from click.testing import CliRunner, Result

from trajledger import Ledger
from trajledger.ledger.artifacts import create_dataset, record_batch, register_environment
from trajledger.runner.cli import main


def _episode(i: int, reward: float | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "episode_id": f"e{i}",
        "messages": [
            {"role": "user", "content": f"question {i} about topic {i * 7}"},
            {"role": "assistant", "content": f"answer {i}"},
        ],
        "language": "en" if i % 2 else "de",
    }
    if reward is not None:
        row["reward"] = reward
    return row


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two batches of 6 episodes in dataset ``both@1``; batch ``mixed`` has a return for the
    even episodes only (0, 2, 4), batch ``sft`` none (data without rewards)."""
    root = tmp_path_factory.mktemp("derived") / "ledger"
    ledger = Ledger.init(root, origin="test/derived")
    key = ledger.keys.create("producer", encrypt=False)
    register_environment(ledger, "chat", "1", key)
    mixed = _jsonl(root.parent / "mixed.jsonl",
                   [_episode(i, float(i) if i % 2 == 0 else None) for i in range(6)])
    sft = _jsonl(root.parent / "sft.jsonl", [_episode(i + 10, None) for i in range(6)])
    a = record_batch(ledger, [mixed], env="chat@1", policy="m1", signer=key, name="mixed")
    b = record_batch(ledger, [sft], env="chat@1", policy="m1", signer=key, name="sft")
    create_dataset(ledger, "both", "1", "train", [a.digest, b.digest], key)
    return root


@pytest.fixture
def copy(home: Path, tmp_path: Path) -> Path:
    out = tmp_path / "ledger"
    shutil.copytree(home, out, symlinks=True)
    tk.pin_log(out)
    return out


def run(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--ledger", str(home), *args])


def strict_json(text: str) -> Any:
    """RFC 8259 JSON: ``NaN`` and ``Infinity`` are not JSON (jq and most parsers refuse them)."""

    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _blob_path(home: Path, digest: str) -> Path:
    hexd = digest.removeprefix("sha256:")
    return home / "objects" / "sha256" / hexd[:2] / hexd[2:4] / hexd


def _episodes_blob(home: Path, batch_name: str) -> Path:
    show = json.loads(run(home, "show", batch_name, "--json").stdout)
    files = {f["path"]: f["digest"] for f in show["files"]}
    return _blob_path(home, "sha256:" + files["episodes.parquet"]["sha256"]
                      if isinstance(files["episodes.parquet"], dict)
                      else files["episodes.parquet"])


# --- finding 2: a batch the index could not read is left out of the figures, said ----------


def test_stats_and_query_name_a_batch_whose_episodes_they_leave_out(copy: Path) -> None:
    """Failed before: with batch ``sft``'s episodes.parquet gone from the store when the index
    was built, ``stats both@1`` printed '2 batch(es), 6 episode(s)' and OK, exit 0, and
    ``query episodes --in both@1`` the 6 rows of ``mixed``: the other 6 episodes were left out
    without a word (and stayed out after the file was restored: the batch is indexed once)."""
    blob = _episodes_blob(copy, "sft")
    os.chmod(blob, 0o600)
    blob.rename(copy / "sft-episodes.parquet")
    sft = json.loads(run(copy, "show", "sft", "--json").stdout)["digest"]
    want = (f"WARNING: batch {sft[:19]}…: its episodes could not be read when the audit index "
            "took it in (data 'missing'): these figures leave it out; run 'trajledger fsck', "
            "and 'trajledger reindex' once it is repaired")
    r = run(copy, "stats", "both@1")
    assert r.exit_code == 0, r.output
    assert want in r.stderr.splitlines(), r.stderr
    r = run(copy, "stats", "both@1", "--json")
    assert r.exit_code == 0, r.output
    assert [w for w in strict_json(r.stdout)["warnings"] if sft[:19] in w], r.stdout
    r = run(copy, "query", "episodes", "--in", "both@1", "--limit", "0")
    assert r.exit_code == 0, r.output
    assert want.replace("these figures leave", "these rows leave") in r.stderr.splitlines()
    # Restored: still left out (the index took the batch in once), still said.
    (copy / "sft-episodes.parquet").rename(blob)
    r = run(copy, "stats", "both@1", "--json")
    assert strict_json(r.stdout)["aggregate"]["episodes"] == 6
    assert [w for w in strict_json(r.stdout)["warnings"] if sft[:19] in w]
    r = run(copy, "reindex")
    assert r.exit_code == 0, r.output
    r = run(copy, "stats", "both@1", "--json")
    assert strict_json(r.stdout)["aggregate"]["episodes"] == 12
    assert strict_json(r.stdout)["warnings"] == []


def test_stats_of_a_whole_dataset_warns_of_nothing(copy: Path) -> None:
    r = run(copy, "stats", "both@1")
    assert r.exit_code == 0, r.output
    assert "WARNING" not in r.stderr
    r = run(copy, "query", "episodes", "--in", "both@1", "--limit", "0")
    assert r.exit_code == 0 and "WARNING" not in r.stderr, r.output


# --- finding 3: a filter is one expression, and --in cannot be escaped ---------------------


@pytest.mark.parametrize(
    ("where", "within"),
    [
        ("return > 1000 garbage", None),
        ("return > 1000 ORDER BY return", None),
        ("return > 1000) OR (true", None),
        ("return > 1000) OR (true", "mixed"),
        ("true) OR (true", "mixed"),
        ("return > 1000; DELETE FROM episodes", None),
    ],
    ids=["trailing-word", "order-by", "unbalanced", "unbalanced-in", "escape-in", "semicolon"],
)
def test_a_filter_that_is_not_one_expression_is_a_usage_error(
    copy: Path, where: str, within: str | None
) -> None:
    """Failed before: LanceDB reads the first expression of a filter and ignores the rest, so
    'return > 1000 garbage' ran as 'return > 1000' (exit 0), and with --in the filter was
    pasted before the batch restriction: 'true) OR (true' --in mixed gave the rows of every
    batch (12, not 6), labelled as mixed's."""
    args = ["query", "episodes", "--where", where, "--limit", "0", "--json"]
    r = run(copy, *args, *(["--in", within] if within else []))
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert r.stderr.startswith(f"FAIL: --where {where!r}: "), r.stderr
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.output


@pytest.mark.parametrize(
    ("where", "rows"),
    [
        ("(return >= 2) AND language = 'de'", 2),
        ("return >= 2 -- a comment ) (", 2),
        ("return >= 2 /* ) */", 2),
        ("language = 'de)' OR language = ')('", 0),
        ('"return" >= 2', 2),
        ("  ", 6),
    ],
    ids=["parens", "line-comment", "block-comment", "quoted-parens", "quoted-column", "blank"],
)
def test_a_filter_of_one_expression_still_runs(copy: Path, where: str, rows: int) -> None:
    r = run(copy, "query", "episodes", "--in", "mixed", "--where", where, "--limit", "0",
            "--json")
    assert r.exit_code == 0, r.output
    assert len(strict_json(r.stdout)) == rows


# --- finding 5: episodes without a return ---------------------------------------------------


def test_stats_of_episodes_without_returns_is_json(copy: Path) -> None:
    """Failed before: ``stats sft --json`` printed '"return_std":NaN' (not JSON: jq refuses
    it), and for ``mixed`` (returns 0, 2, 4 and three nulls) too: the standard deviation was
    taken over the nulls, so the far-below warning on mean return could never fire when any
    episode had no return."""
    r = run(copy, "stats", "sft", "--json", "--by", "language")
    assert r.exit_code == 0, r.output
    report = strict_json(r.stdout)
    assert report["aggregate"]["return_std"] is None
    assert report["aggregate"]["mean_return"] is None
    r = run(copy, "stats", "mixed", "--json", "--by", "language")
    assert r.exit_code == 0, r.output
    report = strict_json(r.stdout)
    assert report["aggregate"]["mean_return"] == 2.0
    assert math.isclose(report["aggregate"]["return_std"], float(np.std([0, 2, 4], ddof=1)))
    de = next(s for s in report["segments"] if s["label"] == "language=de")
    assert math.isclose(de["return_std"], float(np.std([0, 2, 4], ddof=1)))
    en = next(s for s in report["segments"] if s["label"] == "language=en")
    assert en["return_std"] is None and en["mean_return"] is None


# --- finding 4: reindex --check did not look at the audit index ------------------------------


def _edit_index(home: Path, table: str, where: str, values: dict[str, Any]) -> None:
    import lancedb

    lancedb.connect(str(home / "index" / "lance")).open_table(table).update(
        where=where, values=values)


@pytest.mark.parametrize(
    ("table", "where", "values", "first"),
    [
        ("artifacts", "kind = 'dataset'", {"split": "holdout"}, "log entry 3"),
        ("artifacts", "kind = 'rollout-batch' AND name = 'sft'", {"revoked": True}, "log entry 2"),
        ("episodes", "episode_id = 'e2'", {"return": 500.0}, "batch "),
    ],
    ids=["dataset-split", "revoked-flag", "episode-return"],
)
def test_reindex_check_finds_an_edited_audit_index(
    copy: Path, table: str, where: str, values: dict[str, Any], first: str
) -> None:
    """Failed before: ``reindex --check`` compared the trust state alone and said OK (exit 0)
    of an audit index whose rows were edited (a dataset's split, a revoked flag, a return):
    every later ``query`` and ``stats`` answered from the edited rows without a word."""
    r = run(copy, "query", "episodes", "--limit", "1")
    assert r.exit_code == 0, r.output
    r = run(copy, "reindex", "--check")
    assert r.exit_code == 0, r.output
    _edit_index(copy, table, where, values)
    r = run(copy, "reindex", "--check")
    assert r.exit_code == 1, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"FAIL: audit index {copy / 'index' / 'lance'}: table {table}: "
                               "the rows of 1 ")
    assert f"(first: {first}" in lines[0]
    assert lines[0].endswith("rebuild it with 'trajledger reindex'")
    assert run(copy, "reindex").exit_code == 0
    r = run(copy, "reindex", "--check")
    assert r.exit_code == 0, r.output


def test_reindex_check_of_a_partly_built_index_agrees(copy: Path) -> None:
    """Batches not asked about yet are pending: the check derives only what the index holds."""
    assert run(copy, "query", "episodes", "--in", "sft", "--limit", "1").exit_code == 0
    r = run(copy, "reindex", "--check")
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[-1] == (f"OK: audit index {copy / 'index' / 'lance'}: agrees "
                                         "with the log and the store, as far as it is built")


# --- finding 6: a producer's unvalidated NaN and infinities in --json ------------------------


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """Batch ``hostile``: a batch's files with returns NaN, Infinity and 1.0 in its episode
    file, recorded and signed by its producer as they are (a vendor's code that skips
    validation: an import verifies signatures and digests, the gate validates, ``query`` and
    ``stats`` read the rows as they are)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trajledger.ledger.index.rows import statement_of
    from trajledger.ledger.record import record_files
    from trajledger.verify import predicates

    root = tmp_path / "hostile"
    ledger = Ledger.init(root, origin="test/hostile-values")
    key = ledger.keys.create("producer", encrypt=False)
    register_environment(ledger, "chat", "1", key)
    rows = [{"episode_id": f"e{i}", "step": s, "role": role, "content": "c",
             "reward": float(s), "terminated": s == 1, "truncated": False}
            for i in range(6) for s, role in ((0, "user"), (1, "assistant"))]
    good = record_batch(ledger, rows, env="chat@1", policy="m1", signer=key, name="good")
    files = {f.path: "sha256:" + f.sha256 for f in good.recorded.manifest.files}
    steps, episodes = tmp_path / "steps.parquet", tmp_path / "episodes.parquet"
    steps.write_bytes(ledger.store.get(files["steps.parquet"]))
    table = pq.read_table(pa.BufferReader(ledger.store.get(files["episodes.parquet"])))
    table = table.set_column(table.schema.get_field_index("return"), "return",
                             pa.array([math.nan, math.inf, 1.0] * 2, pa.float64()))
    pq.write_table(table, episodes)
    statement = statement_of(ledger, good.recorded.envelope_digest)
    assert statement is not None
    predicate = {k: v for k, v in statement.predicate.items() if k != "manifest"}
    record_files(ledger, {"steps.parquet": steps, "episodes.parquet": episodes}, key,
                 predicates.ROLLOUT_BATCH, predicate, kind="rollout-batch", name="hostile")
    tk.pin_log(root)
    return root


def test_json_of_a_producers_nan_and_infinities_is_json(hostile: Path) -> None:
    """Failed before: ``query episodes --json`` printed '"return":NaN' and '"return":Infinity',
    ``stats --json`` '"mean_return":Infinity,"return_std":NaN' (no JSON: jq refuses it), and
    stats a numpy RuntimeWarning on stderr."""
    r = run(hostile, "query", "episodes", "--in", "hostile", "--json", "--columns",
            "episode_id,return")
    assert r.exit_code == 0, r.output
    rows = strict_json(r.stdout)
    assert [row["return"] for row in rows] == [None, None, 1.0, None, None, 1.0]
    assert r.stderr.splitlines() == [
        "WARNING: 4 value(s) that JSON cannot hold (NaN or an infinity) are printed as null; "
        "the output without --json shows them",
        "OK: 6 row(s) of episodes",
    ]
    r = run(hostile, "query", "episodes", "--in", "hostile", "--columns", "episode_id,return")
    assert r.exit_code == 0, r.output
    assert [line.split()[1] for line in r.stdout.splitlines()[1:]] == [
        "nan", "inf", "1", "nan", "inf", "1"]
    r = run(hostile, "stats", "hostile", "--json")
    assert r.exit_code == 0, r.output
    report = strict_json(r.stdout)
    assert report["aggregate"]["mean_return"] is None  # Infinity
    assert "RuntimeWarning" not in r.stderr and r.stderr.startswith("WARNING: 2 value(s)")


def test_reindex_check_without_an_index_makes_none(copy: Path) -> None:
    """The check reads only: a ledger without an audit index gets no index directory or lock."""
    assert not (copy / "index" / "lance").exists()
    r = run(copy, "reindex", "--check")
    assert r.exit_code == 0, r.output
    assert not (copy / "index" / "lance").exists()


# --- finding 7: query --in of an erased batch; a row deleted from the index -----------------


def test_query_in_names_an_erased_batch_and_stats_an_erasure(copy: Path) -> None:
    """Failed before: ``query episodes --in both@1`` after batch ``sft`` was erased printed the
    6 rows of ``mixed`` and 'OK: 6 row(s)', nothing about the other batch; stats said 'the log
    holds a erasure'."""
    assert run(copy, "query", "episodes", "--limit", "1").exit_code == 0  # indexed before
    r = run(copy, "erase", "sft", "--key", "producer", "--reason", "consent")
    assert r.exit_code == 0, r.output
    sft = json.loads(run(copy, "show", "sft", "--json").stdout)["digest"]
    r = run(copy, "query", "episodes", "--in", "both@1", "--limit", "0")
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        f"WARNING: batch {sft[:19]}…: erased: the audit index keeps none of its episodes, so "
        "these rows leave it out",
        "OK: 6 row(s) of episodes",
    ]
    r = run(copy, "stats", "both@1")
    assert r.exit_code == 0, r.output
    assert f"WARNING: {sft[:19]}…: the log holds an erasure of it" in r.stderr


def test_a_row_deleted_from_the_index_says_what_to_run(copy: Path) -> None:
    assert run(copy, "stats", "both@1").exit_code == 0
    _edit_index_delete(copy, "kind = 'dataset'")
    r = run(copy, "stats", "both@1")
    assert r.exit_code == 3, r.output
    assert r.stderr.startswith("FAIL: dataset sha256:") and r.stderr.endswith(
        "(edited or damaged: the log holds it); rebuild it with 'trajledger reindex'\n")
    assert run(copy, "reindex").exit_code == 0
    assert run(copy, "stats", "both@1").exit_code == 0


def _edit_index_delete(home: Path, where: str) -> None:
    import lancedb

    lancedb.connect(str(home / "index" / "lance")).open_table("artifacts").delete(where)


def test_a_producers_revocation_whose_subject_the_lookup_lost_fails_closed(
    quickstart_template: testkit.Template[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev12's left item, closed by the lead: a producer's revocation has authority over what
    that producer made, judged by the subject's own record; when the look-up of that record
    came back empty (a state read while it was derived again, as in finding 1) the revocation
    was 'ignored' and the revoked batch, and the checkpoint built on it, verified OK. Now it is
    unknown, and fails. Here the look-up of the batch's kind is made to come back empty; the
    checkpoint verified OK before the fix."""
    from trajledger.verify.lineage import LineageVerifier

    home = testkit.copy_template(quickstart_template, tmp_path / "q")
    checkpoint = quickstart_template.value
    first = Ledger.open(home).verify(checkpoint)
    assert first.ok
    batch = next(n.id for n in first.nodes.values() if n.kind == "rollout-batch")
    Ledger.open(home).revoke(batch, key="vendor", reason="PII")
    assert not Ledger.open(home).verify(checkpoint).ok  # revoked by its producer
    real = LineageVerifier.primary_kind
    monkeypatch.setattr(LineageVerifier, "primary_kind",
                        lambda self, d: None if d == batch else real(self, d))
    report = Ledger.open(home).verify(checkpoint)
    assert not report.ok
    details = [c.detail for c in report.nodes[batch].checks if c.status.name == "FAIL"]
    assert any("no record of" in d and "whether that key produced it" in d for d in details), \
        details


# --- rev12 "Left": query artifacts printed the revoked / erased cells the index holds -------


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("WARNING: audit index")]


def test_query_artifacts_prints_the_flags_the_trust_state_holds(copy: Path) -> None:
    """Failed before (fix14): whoever can write the ledger edited the audit index so that a
    revoked batch reads ``revoked false`` (and another, never revoked nor erased, reads
    ``revoked true``, ``erased true``); ``query artifacts`` printed the edited cells, OK, exit
    0, with and without ``--json``. Now each returned row's flags are those of the user's
    trust state, and each cell that differed is named in a WARNING with what to run."""
    r = run(copy, "revoke", "sft", "--key", "producer", "--reason", "PII")
    assert r.exit_code == 0, r.output
    assert run(copy, "query", "artifacts", "--limit", "1").exit_code == 0  # (indexed)
    _edit_index(copy, "artifacts", "kind = 'rollout-batch' AND name = 'sft'", {"revoked": False})
    _edit_index(copy, "artifacts", "kind = 'rollout-batch' AND name = 'mixed'",
                {"revoked": True, "erased": True})
    where = "kind = 'rollout-batch'"
    r = run(copy, "query", "artifacts", "--where", where, "--json")
    assert r.exit_code == 0, r.output
    rows = {row["name"]: row for row in strict_json(r.stdout)}
    assert (rows["sft"]["revoked"], rows["sft"]["erased"]) == (True, False)
    assert (rows["mixed"]["revoked"], rows["mixed"]["erased"]) == (False, False)
    warnings = _warnings(r.stderr)
    assert len(warnings) == 3, r.stderr
    sft = next(w for w in warnings if "sft@" in w or "(rollout-batch sft" in w)
    assert "says revoked false, but your trust state says true (the log holds a revocation " \
           "of it)" in sft and sft.endswith("rebuild it with 'trajledger reindex'")
    assert sum("says erased true, but your trust state says false" in w for w in warnings) == 1
    # The table shows the same; columns the user did not ask for are not added.
    r = run(copy, "query", "artifacts", "--where", where, "--columns", "name,revoked")
    assert r.exit_code == 0, r.output
    table = {line.split()[0]: line.split()[1] for line in r.stdout.splitlines()[1:]}
    assert table == {"mixed": "False", "sft": "True"}, r.stdout
    assert len(_warnings(r.stderr)) == 3
    # A filter on the flag that the index answered is checked for the rows it returned: the
    # edited row it let through is printed as revoked; the one it kept out is not found (the
    # help says so: reindex --check finds it).
    r = run(copy, "query", "artifacts", "--where", f"{where} AND NOT revoked", "--json")
    assert r.exit_code == 0, r.output
    assert [(row["name"], row["revoked"]) for row in strict_json(r.stdout)] == [("sft", True)]
    assert len(_warnings(r.stderr)) == 1
    assert run(copy, "reindex").exit_code == 0
    r = run(copy, "query", "artifacts", "--where", where, "--json")
    assert r.exit_code == 0 and _warnings(r.stderr) == [], r.output
