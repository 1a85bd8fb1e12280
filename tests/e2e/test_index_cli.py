"""``trajledger reindex / query / stats`` through click: exit codes, exact stderr, JSON output,
and start-up: the index commands' help loads no lancedb (or any other heavy package)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import tamperkit as tk
from click.testing import CliRunner

from trajledger import Ledger
from trajledger.ledger.artifacts import record_batch, register_environment
from trajledger.runner.cli import main

HEAVY = frozenset({"pyarrow", "lancedb", "gymnasium", "sigstore", "pydantic", "numpy", "pandas"})


def chat(i: int) -> str:
    """Episode i: en (i < 10) succeeds unless i == 0; de (i >= 10) only when i == 10."""
    en = i < 10
    success = (i != 0) if en else (i == 10)
    return json.dumps(
        {
            "episode_id": f"e{i}",
            "messages": [
                {"role": "user", "content": f"question {i} about topic {i * 7}"},
                {"role": "assistant", "content": f"answer {i}"},
            ],
            "reward": 1.0 if success else 0.0,
            "language": "en" if en else "de",
            "task_type": "math",
            "termination_reason": "success" if success else "failure",
            "judge_scores": {"judge": 0.8 if success else 0.1},
            "cost_usd": 0.01,
        }
    )


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "ledger"
    ledger = Ledger.init(root, origin="test/index-cli")
    key = ledger.keys.create("producer", encrypt=False)
    register_environment(ledger, "chat", "1", key)
    data = root.parent / "chat.jsonl"
    data.write_text("".join(chat(i) + "\n" for i in range(20)))
    record_batch(ledger, [data], env="chat@1", policy="m1", signer=key, name="chat-batch")
    return root


@pytest.fixture(autouse=True)
def _pinned(home: Path) -> None:
    """Each test's user knows the ledger: its log key is pinned ahead (no first-use note)."""
    tk.pin_log(home)


def run(runner: CliRunner, home: Path, *args: str) -> Any:
    return runner.invoke(main, ["--ledger", str(home), *args])


def test_reindex(runner: CliRunner, home: Path) -> None:
    result = run(runner, home, "reindex")
    assert result.exit_code == 0, result.output
    assert result.stderr == "OK: index rebuilt: 2 log entries, 1 batch(es), 20 episode(s)\n"
    assert (home / "index" / "lance" / "state.json").is_file()


def test_query_episodes(runner: CliRunner, home: Path) -> None:
    result = run(
        runner, home, "query", "episodes", "--where", "language = 'de' AND success", "--json"
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == "OK: 1 row(s) of episodes\n"
    got = json.loads(result.stdout)
    assert [r["episode_id"] for r in got] == ["e10"]
    assert got[0]["env_version"] == "chat@1" and "vector" not in got[0]
    text = run(runner, home, "query", "episodes", "--where", "return > 0", "--limit", "3")
    lines = text.stdout.splitlines()
    assert lines[0].split() == [
        "batch", "episode_id", "env_version", "policy_version", "return", "num_steps",
        "termination_reason",
    ]  # fmt: skip
    assert len(lines) == 4 and text.stderr == (
        "WARNING: episodes: more rows match than the 3 shown (--limit 3; rows come in no "
        "particular order): give --limit 0 for all, or a narrower --where\n"
        "OK: 3 row(s) of episodes\n"
    )


@pytest.mark.parametrize("table", ["episodes", "artifacts"])
def test_a_limit_that_cuts_rows_off_says_so(runner: CliRunner, home: Path, table: str) -> None:
    """The default --limit 50 (or any) cut a --json answer short without a word: an auditor's
    `jq length` of the revocations, of the episodes, counted only the rows printed (out42)."""
    every = run(runner, home, "query", table, "--limit", "0", "--json")
    n = len(json.loads(every.stdout))
    assert every.exit_code == 0 and "WARNING" not in every.stderr and n >= 2
    exact = run(runner, home, "query", table, "--limit", str(n), "--json")
    assert len(json.loads(exact.stdout)) == n and "WARNING" not in exact.stderr
    cut = run(runner, home, "query", table, "--limit", str(n - 1), "--json")
    assert cut.exit_code == 0 and len(json.loads(cut.stdout)) == n - 1
    assert cut.stderr.splitlines() == [
        f"WARNING: {table}: more rows match than the {n - 1} shown (--limit {n - 1}; rows come "
        "in no particular order): give --limit 0 for all, or a narrower --where",
        f"OK: {n - 1} row(s) of {table}",
    ]


def test_query_artifacts_columns(runner: CliRunner, home: Path) -> None:
    # Episodes are indexed when a question first needs them: ask one that does.
    assert run(runner, home, "query", "episodes", "--limit", "1").exit_code == 0
    result = run(
        runner, home, "query", "artifacts", "--where", "kind = 'rollout-batch'",
        "--columns", "ref,data,episodes_indexed",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.split() == [
        "ref",
        "data",
        "episodes_indexed",
        "chat-batch",
        "indexed",
        "20",
    ]


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (
            ["query", "episodes", "--where", "return >"],
            "FAIL: --where 'return >': SQL syntax error: Expected: an expression, found: EOF\n",
        ),
        (
            ["query", "episodes", "--columns", "episode_id,nope"],
            "FAIL: episodes: no column 'nope'; columns are batch, batch_index, episode_id, "
            "task_id, env_version, policy_version, seed, return, num_steps, termination_reason, "
            "success, judge_scores, judge_score, cost_usd, language, task_type, invalid, "
            "safety_interventions, modality, fingerprint\n",
        ),
        (
            ["stats", "chat-batch", "--by", "lang"],
            "FAIL: --by: no episode column 'lang'; columns are batch, batch_index, episode_id, "
            "task_id, env_version, policy_version, seed, return, num_steps, termination_reason, "
            "success, judge_scores, judge_score, cost_usd, language, task_type, invalid, "
            "safety_interventions, modality, fingerprint\n",
        ),
        (  # the README's 'stats ... --by policy_version', mistyped (user24)
            ["stats", "chat-batch", "--by", "polcy_version"],
            "FAIL: --by: no episode column 'polcy_version'; did you mean 'policy_version'? "
            "columns are batch, batch_index, episode_id, task_id, env_version, policy_version, "
            "seed, return, num_steps, termination_reason, success, judge_scores, judge_score, "
            "cost_usd, language, task_type, invalid, safety_interventions, modality, "
            "fingerprint\n",
        ),
    ],
    ids=["bad-sql", "bad-column", "bad-by", "bad-by-typo"],
)
def test_usage_errors_exit_2(runner: CliRunner, home: Path, args: list[str], stderr: str) -> None:
    result = run(runner, home, *args)
    assert result.exit_code == 2
    assert result.stderr == stderr
    assert result.stdout == ""


def test_stats_warns_about_a_segment(runner: CliRunner, home: Path) -> None:
    result = run(runner, home, "stats", "chat-batch", "--by", "language")
    assert result.exit_code == 0, result.output
    # Overall p = 0.5; de: 0.1 with n = 10, SE = sqrt(0.25 / 10) = 0.158, gap 0.4 = 2.5 SE and
    # 80% below. Mean return: the same 0/1 values, SE = 0.513 / sqrt(10) = 0.162, 2.5 SE.
    assert result.stderr == (
        "WARNING: language=de: success rate 0.100 is far below 0.500 overall "
        "(2.5 standard errors, n=10)\n"
        "WARNING: language=de: mean return 0.1 is far below 0.5 overall "
        "(2.5 standard errors, n=10)\n"
        "OK: stats of rollout-batch chat-batch\n"
    )
    out = result.stdout.splitlines()
    assert out[0].startswith("rollout-batch chat-batch (sha256:")
    assert out[0].endswith("1 batch(es), 20 episode(s), by language")
    assert out[1].split() == [
        "segment", "episodes", "success", "return", "length", "invalid", "interv.", "judge",
        "agr.", "cost/ep", "cost/solved",
    ]  # fmt: skip
    assert out[2].split() == [
        "(all)", "20", "0.500", "(n=20)", "0.5", "2", "0.000", "-", "1.000", "(n=20)",
        "$0.0100", "$0.0200",
    ]  # fmt: skip
    assert out[3].split()[:4] == ["language=de", "10", "0.100", "(n=10)"]
    assert out[3].split()[-1] == "$0.1000"  # ten episodes' cost for one solved task


def test_stats_json(runner: CliRunner, home: Path) -> None:
    result = run(runner, home, "stats", "chat-batch", "--by", "language", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [(s["label"], s["below_aggregate"]) for s in report["segments"]] == [
        ("language=de", True),
        ("language=en", False),
    ]
    assert len(report["warnings"]) == 2
    assert report["aggregate"]["success_rate"] == 0.5
    assert report["aggregate"]["judge_agreement"] == 1.0
    assert report["aggregate"]["cost_per_episode"] == pytest.approx(0.01)
    assert report["aggregate"]["cost_per_success"] == pytest.approx(0.2 / 10)
    assert result.stderr.count("WARNING: ") == 2


def test_stats_unknown_ref(runner: CliRunner, home: Path) -> None:
    result = run(runner, home, "stats", "nothing@1")
    assert result.exit_code == 3
    assert result.stderr.startswith("FAIL: nothing@1: no ")


SCRIPT = Path(sys.executable).with_name("trajledger")


@pytest.mark.parametrize(
    "args",
    [["reindex", "--help"], ["query", "episodes", "--help"], ["stats", "--help"]],
    ids=["reindex", "query", "stats"],
)
def test_help_imports_nothing_heavy(args: list[str]) -> None:
    cmd = (
        [str(SCRIPT), *args]
        if SCRIPT.is_file()
        else [sys.executable, "-c", "from trajledger.runner.cli import main; main()", *args]
    )
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: ")
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "trajledger.ledger.index_cli" in modules and "trajledger.ledger.index" not in modules
    assert sorted(m for m in modules if m.split(".")[0] in HEAVY) == []


def test_stats_names_a_revocation_the_log_holds(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    """stats reads the audit index (unverified by design): a revoked batch's figures printed
    with nothing but 'OK' read as a clean bill (rev7's left item). The revocation is named."""
    import shutil

    copy = tmp_path / "ledger"
    shutil.copytree(home, copy, symlinks=True)
    tk.pin_log(copy)
    r = run(runner, copy, "revoke", "chat-batch", "--key", "producer", "--reason", "PII")
    assert r.exit_code == 0, r.output
    index = Ledger.open(copy).log.size - 1
    for json_mode in ([], ["--json"]):
        result = run(runner, copy, "stats", "chat-batch", *json_mode)
        assert result.exit_code == 0, result.output
        digest = json.loads(run(runner, copy, "stats", "chat-batch", "--json").stdout)["digest"]
        assert result.stderr.splitlines()[-2:] == [
            f"WARNING: {digest[:19]}…: the log holds a revocation of it (log index {index}); "
            "these figures are the audit index's, not a verdict: run 'trajledger verify' or "
            "'trajledger impact' on it",
            "OK: stats of rollout-batch chat-batch",
        ]
        assert result.stderr.count("the log holds a revocation") == 1  # (it said it twice: out42)
    # query episodes --in listed the revoked batch's rows with 'OK' alone (out42)
    for json_mode in ([], ["--json"]):
        result = run(runner, copy, "query", "episodes", "--in", "chat-batch", "--limit", "0",
                     *json_mode)  # fmt: skip
        assert result.exit_code == 0, result.output
        assert result.stderr.splitlines() == [
            f"WARNING: {digest[:19]}…: the log holds a revocation of it (log index {index}); "
            "these rows are the audit index's, not a verdict: run 'trajledger verify' or "
            "'trajledger impact' on it",
            "OK: 20 row(s) of episodes",
        ]


def test_a_mean_whose_sum_overflows_is_printed_finite(
    runner: CliRunner, tmp_path: Path
) -> None:
    """Three batches of one episode each, returns 1e308, 1e308 and -1e308 (each batch records:
    no batch's own sum overflows): their mean is 3.3e307 and their spread 1.15e308, both
    finite. stats printed the mean as 'inf' and the spread as null, with numpy's
    RuntimeWarning lines and their file paths on stderr (out42's Left, out43)."""
    root = tmp_path / "ledger"
    ledger = Ledger.init(root, origin="test/index-cli-overflow")
    key = ledger.keys.create("producer", encrypt=False)
    register_environment(ledger, "chat", "1", key)
    names = []
    for i, reward in enumerate([1e308, 1e308, -1e308]):
        data = tmp_path / f"b{i}.jsonl"
        line = json.loads(chat(i))
        data.write_text(json.dumps({**line, "reward": reward}) + "\n")
        record_batch(ledger, [data], env="chat@1", policy="m1", signer=key, name=f"b{i}")
        names.append(f"b{i}")
    ledger.create_dataset("huge", "1", "train", names, key="producer")
    tk.pin_log(root)
    with warnings.catch_warnings():  # (a subprocess printed them with their file paths)
        warnings.simplefilter("error", RuntimeWarning)
        result, text = (run(runner, root, "stats", "huge@1", *j) for j in (["--json"], []))
    assert result.exit_code == 0, result.output
    agg = json.loads(result.stdout)["aggregate"]
    assert agg["mean_return"] == pytest.approx(1e308 / 3)
    assert agg["return_std"] == pytest.approx(1e308 * (4 / 3) ** 0.5)  # deviations 2, 2, -4 / 3
    assert text.exit_code == 0, text.output
    assert "inf" not in text.stdout
    assert "3.333e+307" in text.stdout


def test_query_in_resolves_its_ref_once(
    runner: CliRunner, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """query --in REF resolved REF for its rows and again for its warnings: two readings of
    the catalog, which a version recorded in between would make two REFs (out42's Left)."""
    from trajledger.ledger.catalog import Catalog

    calls: list[str] = []
    resolve = Catalog.resolve

    def counted(self: Catalog, ref: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(ref)
        return resolve(self, ref, *args, **kwargs)

    monkeypatch.setattr(Catalog, "resolve", counted)
    result = run(runner, home, "query", "episodes", "--in", "chat-batch", "--limit", "0")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-1] == "OK: 20 row(s) of episodes"
    assert calls == ["chat-batch"]
