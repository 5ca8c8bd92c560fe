"""Hugging Face in: a small Llama that transformers builds and saves here (GQA, untied embeddings,
rope_theta 123456, a SentencePiece tokenizer with byte fallback) continues pretraining through a
real `dvc repro`. Its tokenizer tokenizes the data, its held-out loss before the first step equals
transformers' loss on the same blocks, and the lineage records where it came from and the sha256
of its weights; other weights at that path are another run."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
import torch
import yaml

from shardline.training.evaluate import HeldOut
from tests.conftest import BIN, init_repo, run, small_params, stdlib_files, up_to_date, write_params
from harness.hf_models import save_model, sentencepiece_tokenizer
from tests.integration.test_train import SL

pytestmark = pytest.mark.slow
transformers = pytest.importorskip("transformers")
DVC = str(BIN / "dvc")
HF = dict(vocab_size=500, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, tie_word_embeddings=False,
          rope_parameters={"rope_type": "default", "rope_theta": 123456.0}, bos_token_id=1, eos_token_id=2)


@pytest.fixture(scope="module")
def repro(tmp_path_factory):
    base = tmp_path_factory.mktemp("init")
    texts = [p.read_text() for p in stdlib_files(16)]
    model_dir = save_model(base / "llama-hf", "LlamaForCausalLM", sentencepiece_tokenizer(texts, 500, "llama2"), **HF)
    root = base / "proj"
    init_repo(root)
    src = base / "input"
    src.mkdir()
    for i, t in enumerate(texts):
        (src / f"f{i:02d}.txt").write_text(t)
    p = small_params([{"name": "code", "uri": str(src), "format": "txt", "txt_unit": "file"}],
                     tokenizer={"eos_token": "</s>", "bos_token": "<s>"}, eval={"every": 2, "min_docs": 3},
                     shard={"seq_len": 32, "target_mb": 0.02},
                     train={"steps": 4, "checkpoint_every": 4, "attention": "causal", "init_from": str(model_dir)})
    p["model"] = {"dropout": 0.0}  # the shape comes from config.json
    write_params(root, p)
    run([DVC, "repro"], root, timeout=600)
    return {"root": root, "hf": model_dir}


def test_the_model_continues_pretraining_through_dvc_repro_with_its_lineage(repro):
    root, hf = repro["root"], repro["hf"]
    meta = json.loads((root / "data/tokenizer/meta.json").read_text())
    assert (meta["vocab_size"], meta["eos_id"], meta["bos_id"], meta["source"]) == (500, 2, 1, str(hf / "tokenizer.json"))
    lin = json.loads(run([SL, "lineage", "latest", "--json"], root).stdout)
    sha = hashlib.sha256((hf / "model.safetensors").read_bytes()).hexdigest()
    assert lin["init"]["from"] == str(hf) and lin["init"]["weights_sha256"] == {"model.safetensors": sha}
    assert lin["params"]["model"] == {**lin["params"]["model"], "arch": "llama", "n_layer": 2, "n_head": 4,
                                      "n_kv_head": 2, "d_model": 32, "head_dim": 8, "ffn_hidden": 48,
                                      "rope_theta": 123456.0, "tie_embeddings": False, "norm_eps": 1e-6}
    text = run([SL, "lineage", "latest"], root).stdout
    assert f"initialised from {hf} (LlamaForCausalLM); weights sha256: model.safetensors {sha}" in text
    assert "it, on the held-out set before training: loss" in text
    assert up_to_date(run([DVC, "status"], root).stdout)


def test_loss_before_the_first_step_is_transformers_loss_on_the_same_blocks(repro):
    root, hf = repro["root"], repro["hf"]
    lin = json.loads(run([SL, "lineage", "latest", "--json"], root).stdout)
    params = yaml.safe_load((root / "params.yaml").read_text())
    held = HeldOut.open(root / "data/shards", ["code"], params["eval"]["blocks"],
                        root / "data/tokenizer/tokenizer.json")
    model = transformers.AutoModelForCausalLM.from_pretrained(hf).eval()
    ids = torch.from_numpy(held.blocks[0].ids)
    with torch.no_grad():
        logits = model(ids[:, :-1]).logits
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).double(), ids[:, 1:].reshape(-1),
                                            reduction="sum").item()
    ours = lin["init"]["eval"]["sources"]["code"]
    assert ours["tokens"] == ids[:, 1:].numel() > 0
    print(f"held-out loss before training: ours {ours['loss']!r}, transformers {nll / ours['tokens']!r}")
    assert ours["loss"] == pytest.approx(nll / ours["tokens"], rel=1e-6) and math.isfinite(ours["loss"])
    assert np.all(held.blocks[0].ids < 500)


def test_other_weights_at_the_same_path_are_another_run(repro, tmp_path):
    import shutil

    root = repro["root"]
    other = shutil.copytree(repro["hf"], tmp_path / "llama-hf")
    p = yaml.safe_load((root / "params.yaml").read_text())
    p["train"] = {**p["train"], "init_from": str(other), "steps": 6}
    proj = shutil.copytree(root, tmp_path / "proj")
    write_params(proj, p)
    run([SL, "stage", "train"], proj)  # the same weights at another path: the same run, continued
    assert json.loads((proj / "data/metrics/train.json").read_text())["final_step"] == 6
    tok = (repro["hf"] / "tokenizer.json").read_bytes()
    save_model(other, "LlamaForCausalLM", transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(other / "tokenizer.json"))._tokenizer, seed=1, **HF)
    (other / "tokenizer.json").write_bytes(tok)  # new weights, the same tokenizer
    p["train"]["steps"] = 8
    write_params(proj, p)
    r = run([SL, "stage", "train"], proj, check=False)
    assert r.returncode == 2 and "init: saved {'model.safetensors'" in r.stderr and "Traceback" not in r.stderr
    # another tokenizer there: the shards hold the old one's ids, so training waits for the tokenize stage
    (other / "tokenizer.json").write_bytes(tok.replace(b'"<unk>"', b'"<unknown>"'))
    r = run([SL, "stage", "train"], proj, check=False)
    assert r.returncode == 2 and "the data was tokenized with" in r.stderr and "dvc repro tokenize" in r.stderr
