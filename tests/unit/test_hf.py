"""The Hugging Face adapter, both ways, against real transformers: our llama exports load as
LlamaForCausalLM / Qwen3ForCausalLM with bit-identical fp32 logits; models transformers builds and
saves here (GQA, untied, rope_theta other than the default, QK-norm, GPT-2 with gelu_new and
biases) load into ours with every tensor mapped once and the same logits; anything else is
refused in one line that names it."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from shardline import paramsfile
from shardline.core.errors import BadInput
from shardline.core.filenames import HF_WEIGHTS_INDEX
from shardline.model import ModelConfig, build, resolve
from shardline.model.hf import to_hf
from shardline.model.imported import Imported
from tests.conftest import stdlib_files
from harness.hf_models import save_model, sentencepiece_tokenizer

transformers = pytest.importorskip("transformers")  # the dev extra; HF_HUB_OFFLINE=1 (conftest): no hub
# measured 1.0e-7: GPT-2's own gelu_new is transformers' NewGELUActivation, the tanh formula in Python
# ops; ours is nn.GELU(approximate="tanh"), the same formula in one kernel that rounds otherwise
GPT2_TOL = 1e-6
V = 300


@pytest.fixture(scope="module")
def tokenizer():
    return sentencepiece_tokenizer([p.read_text() for p in stdlib_files(6)], vocab_size=V)


def ours(**m) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build(ModelConfig("llama", vocab_size=V, seq_len=32, n_layer=2, n_head=4, d_model=32, **m)).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.normal_(1.0, 0.2)  # norms start at 1: make them count
    return model


def ids(n=3, T=32):
    return torch.randint(0, V, (n, T), generator=torch.Generator().manual_seed(1))


LLAMAS = {"gqa-tied": dict(n_kv_head=2, head_dim=8, ffn_hidden=64),
          "mha-untied-theta": dict(head_dim=8, ffn_hidden=48, tie_embeddings=False, rope_theta=5e5, norm_eps=1e-6),
          "mqa-qk-norm": dict(n_kv_head=1, head_dim=16, ffn_hidden=64, qk_norm=True)}


@pytest.mark.parametrize("name", list(LLAMAS))
def test_llama_export_loads_in_transformers_with_identical_logits(name, tmp_path):
    model = ours(**LLAMAS[name])
    tensors, cfg = to_hf(model, eos_id=2, bos_id=1)
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert type(hf).__name__ == ("Qwen3ForCausalLM" if model.cfg.qk_norm else "LlamaForCausalLM")
    assert {k: v for k, v in info.items() if v} == {}  # nothing missing, unexpected or mismatched
    assert ("lm_head.weight" in tensors) == (not model.cfg.tie_embeddings)
    assert hf.config.rope_parameters["rope_theta"] == model.cfg.rope_theta
    x = ids()
    with torch.no_grad():
        a, b = model(x)[0], hf(x).logits
    print(f"{name}: max abs logit difference {(a - b).abs().max().item():.3g}")
    assert torch.equal(a, b)


def hf_logits(where, x):
    hf = transformers.AutoModelForCausalLM.from_pretrained(where).eval()
    with torch.no_grad():
        return hf(x).logits


def imported(where, dropout=0.0) -> torch.nn.Module:
    imp = Imported.read(where)
    model_section = paramsfile.parse({"sources": [{"name": "a", "uri": "x", "format": "txt"}],
                                  "model": {"dropout": dropout}}).model
    cfg = resolve(imp.section(model_section), vocab_size=imp.vocab_size, seq_len=32, n_positions=imp.n_positions)
    model = build(cfg)
    model.load_state_dict(imp.state(cfg, {k: v.shape for k, v in model.state_dict().items()}), strict=True)
    return model.eval()


SMALL = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4)
HF_MODELS = {
    "llama-gqa-untied-theta": ("LlamaForCausalLM", dict(SMALL, num_key_value_heads=2, tie_word_embeddings=False,
                                                        rope_parameters={"rope_type": "default",
                                                                         "rope_theta": 123456.0})),
    "llama-tied": ("LlamaForCausalLM", dict(SMALL, tie_word_embeddings=True, rms_norm_eps=1e-5)),
    "qwen3": ("Qwen3ForCausalLM", dict(SMALL, num_key_value_heads=1, head_dim=16)),
    "mistral": ("MistralForCausalLM", dict(SMALL, num_key_value_heads=2, sliding_window=None)),
}


@pytest.mark.parametrize("name", list(HF_MODELS))
def test_a_transformers_llama_family_model_loads_with_identical_logits(name, tokenizer, tmp_path):
    arch, cfg = HF_MODELS[name]
    where = save_model(tmp_path / name, arch, tokenizer, **cfg)
    model, x = imported(where), ids()
    if "rope_parameters" in cfg:
        assert model.cfg.rope_theta == 123456.0 and model.cfg.n_kv_head == 2 and not model.cfg.tie_embeddings
    assert torch.equal(model(x)[0], hf_logits(where, x))


def test_a_model_in_safetensors_shards_loads_from_its_index(tokenizer, tmp_path):
    where = save_model(tmp_path / "sharded", "LlamaForCausalLM", tokenizer, shard_size="40KB",
                       **dict(SMALL, num_key_value_heads=2))
    imp = Imported.read(where)
    assert (where / HF_WEIGHTS_INDEX).is_file() and len(imp.files) > 2 and not (where / "model.safetensors").exists()
    x = ids()
    assert torch.equal(imported(where)(x)[0], hf_logits(where, x))


def test_a_transformers_gpt2_loads_with_its_gelu_and_biases(tokenizer, tmp_path):
    where = save_model(tmp_path / "gpt2", "GPT2LMHeadModel", tokenizer, vocab_size=V, n_embd=32, n_layer=2,
                       n_head=4, n_positions=64, activation_function="gelu_new")
    model, x = imported(where), ids()
    assert (model.cfg.gelu, model.cfg.bias, model.cfg.positions) == ("tanh", True, 64)
    diff = (model(x)[0] - hf_logits(where, x)).abs().max().item()
    print(f"gpt2 import: max abs logit difference {diff:.3g}")
    assert diff <= GPT2_TOL


@pytest.fixture(scope="module")
def llama_dir(tokenizer, tmp_path_factory):
    return save_model(tmp_path_factory.mktemp("hf") / "llama", "LlamaForCausalLM", tokenizer,
                      **dict(SMALL, num_key_value_heads=2))


def refused(where) -> str:
    with pytest.raises(BadInput) as e:
        imported(where)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def edit_config(where, **changes):
    cfg = json.loads((where / "config.json").read_text())
    cfg.update(changes)
    (where / "config.json").write_text(json.dumps(cfg))


def test_every_mismatch_is_one_line_naming_it(llama_dir, tmp_path):
    def copy(name):
        return shutil.copytree(llama_dir, tmp_path / name)

    tensors = load_file(llama_dir / "model.safetensors")
    d = copy("missing")
    save_file({k: v for k, v in tensors.items() if k != "model.layers.1.mlp.up_proj.weight"},
              str(d / "model.safetensors"), metadata={"format": "pt"})
    assert "'model.layers.1.mlp.up_proj.weight' is missing" in refused(d)
    d = copy("extra")
    save_file({**tensors, "model.layers.0.self_attn.q_proj.bias": torch.zeros(32)}, str(d / "model.safetensors"),
              metadata={"format": "pt"})
    assert "'model.layers.0.self_attn.q_proj.bias' maps to nothing" in refused(d)
    d = copy("shape")
    edit_config(d, intermediate_size=64)
    assert "'model.layers.0.mlp.gate_proj.weight' has shape (48, 32), config.json implies (64, 32)" in refused(d)
    d = copy("arch")
    edit_config(d, architectures=["BertForMaskedLM"])
    assert "architecture 'BertForMaskedLM' is not supported" in refused(d)
    d = copy("rope")
    edit_config(d, rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0})
    assert "rope_parameters.rope_type = 'llama3' is not supported" in refused(d)
    d = copy("bias")
    edit_config(d, attention_bias=True)
    assert "attention_bias = True is not supported" in refused(d)
    d = copy("mistral")
    edit_config(d, architectures=["MistralForCausalLM"], sliding_window=4096)
    assert "sliding_window = 4096 is not supported (sliding-window attention)" in refused(d)
    for i, (change, msg) in enumerate([({"hidden_size": None}, "no 'hidden_size' (or null)"),
                                       ({"hidden_size": "big"}, "hidden_size = 'big' is not int"),
                                       ({"rope_scaling": "linear"}, "rope_scaling = 'linear' is not supported"),
                                       ({"rms_norm_eps": 0}, "describes a model the line cannot build (model.norm_eps"),
                                       ({"num_key_value_heads": 3}, "(model.n_kv_head: 3 must divide n_head (4))")]):
        d = copy(f"config{i}")
        edit_config(d, **change)
        assert msg in refused(d), change
    d = copy("not-an-object")
    (d / "config.json").write_text("[1, 2]")
    assert "config.json: holds a JSON list, not an object" in refused(d)
    d = save_model(tmp_path / "sharded", "LlamaForCausalLM", sentencepiece_tokenizer(
        [p.read_text() for p in stdlib_files(2)], vocab_size=V), shard_size="40KB", **dict(SMALL, num_key_value_heads=2))
    index = json.loads((d / HF_WEIGHTS_INDEX).read_text())
    (d / HF_WEIGHTS_INDEX).write_text(json.dumps({"metadata": {}}))
    assert f"{HF_WEIGHTS_INDEX}: no weight_map of tensor names to file names" in refused(d)
    (d / HF_WEIGHTS_INDEX).write_text(json.dumps({**index, "weight_map": {**index["weight_map"], "extra.weight": "gone.safetensors"}}))
    assert "names 'gone.safetensors', which is not a file in" in refused(d)
    first = sorted(set(index["weight_map"].values()))[0]
    (d / HF_WEIGHTS_INDEX).write_text(json.dumps(index))
    (d / first).write_bytes((d / first).read_bytes()[:100])
    assert f"{first}: not a readable safetensors file" in refused(d)
    g = save_model(tmp_path / "gpt2", "GPT2LMHeadModel", sentencepiece_tokenizer(
        [p.read_text() for p in stdlib_files(2)], vocab_size=V), vocab_size=V, n_embd=32, n_layer=1, n_head=4)
    edit_config(g, scale_attn_weights=False)
    assert "scale_attn_weights = False is not supported" in refused(g)
    d = copy("pickle")
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(b"not read")
    assert "only pickled weights (pytorch_model.bin)" in refused(d)
    assert "config.json: not found" in refused(tmp_path / "nowhere")


def test_params_that_disagree_with_the_model_are_named(llama_dir):
    imp = Imported.read(llama_dir)
    model = paramsfile.parse({"sources": [{"name": "a", "uri": "x", "format": "txt"}],
                          "model": {"arch": "llama", "n_layer": 5, "d_model": 32}}).model
    with pytest.raises(BadInput) as e:
        imp.section(model)
    assert str(e.value).startswith("model: n_layer is 5 in params.yaml but 2 in ")
    assert "d_model" not in str(e.value)  # set, but equal
    assert imp.lineage()["weights_sha256"]["model.safetensors"] == \
        __import__("hashlib").sha256((llama_dir / "model.safetensors").read_bytes()).hexdigest()
