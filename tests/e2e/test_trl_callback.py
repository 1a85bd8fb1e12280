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


def test_sft_with_the_callback_records_checkpoints_that_verify_offline(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner: CliRunner
) -> None:
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    pytest.importorskip("torch", reason="the train extra is not installed")
    pytest.importorskip("trl", reason="the train extra is not installed")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    from trajledger.integrations.transformers import LedgerCallback

    ledger = Ledger.open(chat_home)
    with ledger.training("chat@1", key="trainer", name="sft-tiny", version="1") as run:
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
            output_dir=str(tmp_path / "out"), max_steps=4, save_steps=2,
            per_device_train_batch_size=2, logging_steps=1, learning_rate=1e-3, seed=0,
            report_to="none", use_cpu=True, max_length=64, dataloader_num_workers=0,
            disable_tqdm=True,
        )
        callback = LedgerCallback(run)
        trainer = SFTTrainer(model=model, args=args, processing_class=tokenizer,
                             train_dataset=run.hf_dataset("conversations"),
                             callbacks=[callback])
        trainer.train()

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
