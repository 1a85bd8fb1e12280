"""End to end: files shaped as the newest outside writers write them, recorded by ``record``.

Each input is built here from the writer's own code (package, version, module and function named
in a comment above it; read from the released wheel, never imported), recorded through the CLI
(auto-detected, and with ``--format``), and the stored steps and episodes compared value by value
with what the writer meant; or refused with one line per problem, exit 1, the ledger unchanged.
No test needs the network or the writer packages.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import testkit
from click.testing import CliRunner, Result

from trajledger import Ledger
from trajledger.runner.cli import main

KEY = ("--key", "alice")
REC = ("--env", "cart@1", "--policy", "p0", *KEY)


def build(home: Path) -> None:
    """A ledger with key alice (encrypted) and environment cart@1."""
    runner = testkit.new_runner()
    for args in (
        "init --origin test/e2e",
        "key new alice",
        "env register cart --version 1 --gym-id CartPole-v1 --key alice",
    ):
        r = runner.invoke(main, ["--ledger", str(home), *args.split()], prog_name="trajledger",
                          env={"TRAJLEDGER_PASSPHRASE": testkit.TEST_PASSPHRASE})  # fmt: skip
        assert r.exit_code == 0, r.output


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[None]:
    return testkit.build_template(tmp_path_factory.mktemp("outside-writers"), build)


@pytest.fixture
def home(template: testkit.Template[None], tmp_path: Path, passphrase: str) -> Path:
    return testkit.copy_template(template, tmp_path / "home")


def run(runner: CliRunner, home: Path, *args: str | Path) -> Result:
    return runner.invoke(main, ["--ledger", str(home), *map(str, args)], prog_name="trajledger")


def recorded(runner: CliRunner, home: Path, *args: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Record (must succeed) and return the stored ``episodes`` and ``steps`` as rows."""
    r = run(runner, home, "record", *args, *REC)
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    digest = r.stdout.strip()
    show = run(runner, home, "show", digest, "--json")
    assert show.exit_code == 0, show.output
    files = {f["path"]: f["digest"] for f in json.loads(show.stdout)["files"]}
    store = Ledger.open(home).store
    return {
        name: pq.read_table(io.BytesIO(store.get_verified(files[f"{name}.parquet"]))).to_pylist()
        for name in ("episodes", "steps")
    }


def snapshot(runner: CliRunner, home: Path) -> tuple[int, frozenset[str]]:
    info = run(runner, home, "log", "info", "--json")
    assert info.exit_code == 0, info.output
    objects = home / "objects"
    return json.loads(info.stdout)["size"], frozenset(
        str(p.relative_to(objects)) for p in objects.rglob("*") if p.is_file()
    )


def refused(runner: CliRunner, home: Path, args: list[str | Path], stderr: str) -> None:
    """``record ARGS`` exits 1 with exactly ``stderr``, no traceback, the ledger unchanged."""
    before = snapshot(runner, home)
    r = run(runner, home, "record", *args, *REC)
    assert (r.exit_code, r.stderr, r.stdout) == (1, stderr, ""), r.output
    assert "Traceback" not in r.output
    assert snapshot(runner, home) == before


def fail_lines(subject: Path | str, problems: list[str]) -> str:
    n = len(problems)
    return f"FAIL: {subject}: {n} problem{'s' if n != 1 else ''} (rollout schema v3)\n" + "".join(
        f"FAIL:   {p}\n" for p in problems
    )


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    # json.dumps(entry, ensure_ascii=False) + "\n", as verl writes each line
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


# -- verl 0.9.1 ---------------------------------------------------------------------------------
#
# verl 0.9.1, verl/trainer/ppo/ray_trainer.py, RayPPOTrainer._validate: every validation sample's
# score is appended to reward_extra_infos_dict["reward"], and _write_generations writes each key
# of that dict of the batch's length beside input, output, gts, score and step; so with
# trainer.validation_data_dir set, every line of DIR/<step>.jsonl holds both "score" and
# "reward", the same number. verl/trainer/ppo/v1/trainer_base.py (the v1 trainer's validation)
# does the same and adds "uid" ("{sample}_{rollout}_{output}"); extra infos a sample lacks are
# None.

VERL_VALIDATION = [
    {"input": "user\nSolve 2+2.", "output": "4", "gts": "4", "score": 1.0, "step": 0,
     "reward": 1.0, "acc": True, "pred": "4"},
    {"input": "user\nSolve 5-9.", "output": "4", "gts": "-4", "score": 0.0, "step": 0,
     "reward": 0.0, "acc": False, "pred": "4"},
    {"input": "user\nHi", "output": "", "gts": None, "score": 0.25, "step": 0,
     "reward": 0.25, "acc": None, "pred": None, "uid": "s7_0_1"},
]  # fmt: skip


@pytest.mark.parametrize("fmt", [(), ("--format", "verl-jsonl")], ids=["detected", "format"])
def test_verl_validation_dump_records_score_once(
    runner: CliRunner, home: Path, tmp_path: Path, fmt: tuple[str, ...]
) -> None:
    src = jsonl(tmp_path / "0.jsonl", VERL_VALIDATION)
    got = recorded(runner, home, src, *fmt)
    eps = got["episodes"]
    assert [(e["episode_id"], e["return"], e["policy_version"], e["group_id"]) for e in eps] == [
        ("line-1", 1.0, "0", None),
        ("line-2", 0.0, "0", None),
        ("line-3", 0.25, "0", "s7_0_1"),
    ]
    assert [e["judge_scores"] for e in eps] == [[("acc", 1.0)], [("acc", 0.0)], None]
    assert [dict(e["extras"]) for e in eps] == [
        {"gts": '"4"', "acc": "true", "pred": '"4"'},
        {"gts": '"-4"', "acc": "false", "pred": '"4"'},
        {"uid": '"s7_0_1"'},
    ]
    steps = got["steps"]
    assert [(s["episode_id"], s["step"], s["role"], s["content"], s["reward"]) for s in steps] == [
        ("line-1", 0, "user", "user\nSolve 2+2.", 0.0),
        ("line-1", 1, "assistant", "4", 1.0),
        ("line-2", 0, "user", "user\nSolve 5-9.", 0.0),
        ("line-2", 1, "assistant", "4", 0.0),
        ("line-3", 0, "user", "user\nHi", 0.0),
        ("line-3", 1, "assistant", "", 0.25),
    ]


def test_verl_score_and_reward_that_differ_are_refused(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    rows = [dict(VERL_VALIDATION[0], reward=0.5), dict(VERL_VALIDATION[1], reward="0.0")]
    src = jsonl(tmp_path / "0.jsonl", rows)
    refused(runner, home, [src], fail_lines(src, [
        "line 1, column 'reward': both score (1.0) and reward (0.5) given, and they differ; want "
        "one, or the same number (verl's validation dumps write both)",
        "line 2, column 'reward': both score (0.0) and reward ('0.0') given, and they differ; "
        "want one, or the same number (verl's validation dumps write both)",
    ]))  # fmt: skip
