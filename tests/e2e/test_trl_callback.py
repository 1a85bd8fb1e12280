"""A real TRL run under the gate: SFTTrainer with LedgerCallback on the ledger's chat data.

Nothing is downloaded: the tokenizer is trained here on the conversations' words (a word-level
``tokenizers`` model with a chat template) and the causal LM is a two-layer Llama built from a
config with random weights. On the CPU, four steps, a checkpoint every two: the callback records
``sft-tiny@1-step2``, ``sft-tiny@1-step4`` and the final model ``sft-tiny@1``. The final model is
exported in an evidence bundle and verified offline by a copy of ``verify/`` alone
(``python -m verify``), back to the chat batch it was trained on.

Needs the ``train`` extra (torch, transformers, trl); skipped without it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trajledger import Ledger
from trajledger.runner.cli import main

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] or '' }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def _tokenizer(texts: list[str]) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<pad>", "<s>", "</s>", "<|end|>", "<|system|>", "<|user|>",
                "<|assistant|>", "<|tool|>"]
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=specials))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   bos_token="<s>", eos_token="</s>")
    fast.chat_template = TEMPLATE
    return fast


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing downloaded; the train extra installed (else skipped)."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    pytest.importorskip("torch", reason="the train extra is not installed")
    pytest.importorskip("trl", reason="the train extra is not installed")


def _sft(run: Any, out: Path, callback: Any, max_steps: int = 4) -> Any:
    """A tiny SFTTrainer on the run's conversations, a checkpoint every two steps into ``out``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    convs = run.conversations()
    words = [str(m["content"] or "") for c in convs for m in c["messages"]]
    tokenizer = _tokenizer(words)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    ))
    args = SFTConfig(
        output_dir=str(out), max_steps=max_steps, save_steps=2,
        per_device_train_batch_size=2, logging_steps=1, learning_rate=1e-3, seed=0,
        report_to="none", use_cpu=True, max_length=64, dataloader_num_workers=0,
        disable_tqdm=True,
    )
    return SFTTrainer(model=model, args=args, processing_class=tokenizer,
                      train_dataset=run.hf_dataset("conversations"), callbacks=[callback])


@pytest.mark.usefixtures("offline")
def test_sft_with_the_callback_records_checkpoints_that_verify_offline(
    chat_home: Path, tmp_path: Path, runner: CliRunner
) -> None:
    from trajledger.integrations.transformers import LedgerCallback

    ledger = Ledger.open(chat_home)
    with ledger.training("chat@1", key="trainer", name="sft-tiny", version="1") as run:
        callback = LedgerCallback(run)
        _sft(run, tmp_path / "out", callback).train()

    # Each checkpoint the Trainer wrote, then the final model, recorded with its lineage.
    assert [o.digest for o in callback.recorded] == [o.digest for o in run.saved]
    refs = ["sft-tiny@1-step2", "sft-tiny@1-step4", "sft-tiny@1"]
    from trajledger.ledger.artifacts import batch_files
    from trajledger.ledger.catalog import Catalog

    catalog = Catalog(ledger)
    assert [catalog.resolve(r, {"checkpoint"}).digest for r in refs] == [
        o.digest for o in callback.recorded]
    step2 = batch_files(ledger, callback.recorded[0].digest)
    on_disk = {p.relative_to(tmp_path / "out" / "checkpoint-2").as_posix()
               for p in (tmp_path / "out" / "checkpoint-2").rglob("*") if p.is_file()}
    assert set(step2) == on_disk and "model.safetensors" in on_disk
    final = batch_files(ledger, callback.recorded[-1].digest)
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(final)
    metrics = callback.recorded[-1].metrics
    assert metrics["epoch"] > 0 and "train_loss" in metrics and "loss" in metrics
    report = ledger.verify("sft-tiny@1")
    assert report.ok, report.failures()

    # Offline: export the final model's evidence; verify it with a copy of verify/ alone.
    work = tmp_path / "auditor"
    work.mkdir()
    r = runner.invoke(main, ["--ledger", str(chat_home), "export", "sft-tiny@1", "--out",
                             str(work / "bundle.tar.zst")])
    assert r.exit_code == 0, r.output
    shutil.copy(chat_home / "policy.toml", work / "policy.toml")
    shutil.copytree(chat_home / "keys", work / "keys",
                    ignore=shutil.ignore_patterns("*.key", "*.pem"))
    assert not [p for p in (work / "keys").iterdir() if not p.name.endswith(".pub")]
    shutil.copytree(REPO / "trajledger" / "verify", work / "verify",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-s", "-m", "verify", "bundle.tar.zst", "--policy", "policy.toml",
         "--json"],
        cwd=work, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("OK: bundle.tar.zst: ")
    verified = json.loads(done.stdout)
    assert verified["ok"] is True
    nodes = {n["id"]: n for n in verified["nodes"]}
    batch = run.admission.batches[0].digest
    assert nodes[batch]["kind"] == "rollout-batch" and nodes[batch]["name"] == "chat-batch"
    edges = {(e["from"], e["role"], e["to"]) for e in verified["edges"]}
    final_digest = callback.recorded[-1].digest
    assert (final_digest, "dataset", run.admission.dataset) in edges
    assert (run.admission.dataset, "batch", batch) in edges


@pytest.mark.usefixtures("offline")
def test_a_resumed_run_must_name_the_checkpoint_it_resumed_from(
    chat_home: Path, tmp_path: Path
) -> None:
    """rev11's left limit: a run resumed with ``resume_from_checkpoint`` recorded its
    checkpoints with whatever parent the script named (none, or another checkpoint), so their
    lineage left out the training before the resumed step. Refused at ``on_train_begin``,
    before a step runs, unless the parent is the checkpoint resumed from."""
    from trajledger.integrations.transformers import LedgerCallback
    from trajledger.ledger.errors import LedgerError

    ledger = Ledger.open(chat_home)
    with ledger.training("chat@1", key="trainer", name="sft-tiny", version="1") as run:
        _sft(run, tmp_path / "out", LedgerCallback(run, final=False)).train()
    step2 = tmp_path / "out" / "checkpoint-2"

    def resume(version: str, parent: str | None, directory: Path) -> list[Any]:
        out = tmp_path / f"out-{version}"
        shutil.copytree(directory, out / "checkpoint-2")
        with ledger.training("chat@1", key="trainer", name="sft-tiny", version=version,
                             parent=parent) as again:
            _sft(again, out, LedgerCallback(again, final=False)).train(
                resume_from_checkpoint=True)
        return again.saved

    with pytest.raises(LedgerError, match=r"resumed at step 2 .* names no parent"):
        resume("2", None, step2)
    with pytest.raises(LedgerError, match="its parent sft-tiny@1-step4 is not that checkpoint"):
        resume("3", "sft-tiny@1-step4", step2)
    altered = tmp_path / "altered"
    shutil.copytree(step2, altered)
    (altered / "notes.txt").write_text("a file the recorded step 2 lacks")  # same state
    with pytest.raises(LedgerError, match=r"holds other files .* than its parent sft-tiny@1-step2"):
        resume("4", "sft-tiny@1-step2", altered)
    from trajledger.ledger.catalog import Catalog, RefError

    catalog = Catalog(ledger)
    for version in ("2", "3", "4"):  # refused before a step: nothing recorded
        with pytest.raises(RefError, match=r"sft-tiny@.*-step4"):
            catalog.resolve(f"sft-tiny@{version}-step4", {"checkpoint"})

    saved = resume("5", "sft-tiny@1-step2", step2)
    assert len(saved) == 1  # step 4, from the resumed step 2
    report = ledger.verify("sft-tiny@5-step4")
    assert report.ok, report.failures()
    parent = catalog.resolve("sft-tiny@1-step2", {"checkpoint"}).digest
    assert parent in report.nodes  # its lineage holds the training before step 2


RANK_SCRIPT = '''
import json, os, sys, time
from pathlib import Path
import torch.distributed as dist
from transformers import TrainerControl, TrainerState, TrainingArguments
from trajledger import Ledger
from trajledger.integrations.transformers import LedgerCallback

rank, home, out, port = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
args = TrainingArguments(output_dir=str(out), use_cpu=True, report_to="none", seed=0)
state = TrainerState(global_step=2, is_world_process_zero=rank == 0)
directory, saving, flag = out / "checkpoint-2", out / "rank0-saving", out / "rank0-recorded"
if rank == 0:
    with Ledger.open(home).training("chat@1", key="trainer", name="ddp", version="1") as run:
        (directory / "model.safetensors").write_bytes(b"rank 0 weights")
        saving.touch()
        LedgerCallback(run).on_save(args, state, TrainerControl())
        flag.touch()
    from trajledger.ledger.artifacts import batch_files
    print(json.dumps(sorted(batch_files(run.ledger, run.saved[0].digest))))
else:
    # Rank 1 writes its shard late: once rank 0 is in on_save, after it recorded, or after 1 s
    # when it waits (its record takes well under that: a guard, not a measure of speed).
    deadline = time.monotonic() + 120
    while not saving.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    deadline = time.monotonic() + 1
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    (directory / "optim_rank1.pt").write_bytes(b"rank 1 optimizer shard")
    LedgerCallback(None).on_save(args, state, TrainerControl())
dist.destroy_process_group()
'''


@pytest.mark.usefixtures("offline")
def test_in_a_distributed_run_the_checkpoint_is_recorded_once_every_rank_saved(
    chat_home: Path, tmp_path: Path
) -> None:
    """rev11's left limit: rank 0 recorded ``checkpoint-<step>`` at its own ``on_save``, while
    another rank could still be writing its shard (DeepSpeed's optimizer states): the recorded
    checkpoint lacked it. Two processes (gloo, on this host); rank 1 writes its shard only
    once rank 0 is in ``on_save``, after it recorded, or 1 s after it entered: the record must
    hold it."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    (tmp_path / "out" / "checkpoint-2").mkdir(parents=True)
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    ranks = [subprocess.Popen(
        [sys.executable, str(script), str(rank), str(chat_home), str(tmp_path / "out"), port],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) for rank in (0, 1)]
    done = [p.communicate(timeout=240) for p in ranks]
    for p, (_, err) in zip(ranks, done, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert json.loads(done[0][0].splitlines()[-1]) == ["model.safetensors", "optim_rank1.pt"]
