"""Export and sample: a trained checkpoint, exported by the real CLI, loads in real `transformers`
offline with bit-identical logits (fp32, CPU; gpt2 and llama) and our tokenizer's ids; greedy `shardline sample` is `generate(do_sample=False)`; seeded sampling replays;
refusals exit 2."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from shardline.core import fsio
from shardline.results import card, sample
from shardline.training import checkpoint, guard
from shardline.data import tokenizer as toks
from shardline.model import ModelConfig, build
from shardline.model.hf import to_hf
from shardline.results.trained import load_model
from shardline.training.records import Lineage, Manifest
from tests.conftest import env_for, run, stdlib_files
from tests.integration.test_train import GPT2, SL, built, project  # noqa: F401 (the fixture)

pytestmark = pytest.mark.slow
transformers = pytest.importorskip("transformers")  # the dev extra; HF_HUB_OFFLINE=1 (conftest): no hub
FILES = {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
         "special_tokens_map.json", "lineage.json", "README.md"}
TEXTS = [stdlib_files(1, skip=20)[0].read_text(),  # a real source file, longer than seq_len
         "naïve café — Ünïcödé 日本語 🙂 ñ\u00a0ß",  # non-ASCII, a no-break space
         "a  b   c\t\t\td\n\n\n    e \r\n  \n",  # whitespace runs of every kind, trailing spaces
         "    def f(x):\n        return x ** 2  # ok\n", ""]


@pytest.fixture(scope="module")
def trained(built, tmp_path_factory):  # noqa: F811
    # a real NaN at batch 2 with max_skipped 1: a rollback to the start, which the lineage and card record
    root = project(built, tmp_path_factory.mktemp("export") / "p", whole_model=GPT2,
                   train={"steps": 6, "checkpoint_every": 6, "max_skipped": 1, "attention": "causal"})
    run([SL, "stage", "train"], root, env=env_for(SHARDLINE_FAULTS="train.nan_loss@2"))
    out = root.parent / "hf"
    r = run([SL, "export", "latest", str(out)], root)
    assert "export: step-000000006 ->" in r.stderr
    path = checkpoint.latest_valid(root / "data/checkpoints", lambda _: None)
    model, state, manifest = load_model(path)
    return {"root": root, "out": out, "path": path, "model": model, "state": state, "manifest": manifest}


def blocks(root, source: str, side: str, n: int) -> torch.Tensor:
    """`n` real blocks (inputs: seq_len ids) of a source's shards: the first, and the first ones
    that hold a document boundary (EOS, id 0)."""
    d = root / "data/shards" / source / side
    ix = json.loads((d / "index.json").read_text())
    ids = np.concatenate([np.fromfile(d / s["file"], dtype=ix["dtype"]) for s in ix["shards"]])
    rows = ids.astype(np.int64).reshape(-1, ix["seq_len"] + 1)[:, :-1]
    return torch.from_numpy(np.concatenate([rows[:n // 2], rows[(rows == 0).any(axis=1)][:n - n // 2]]))


def test_export_loads_in_transformers_with_our_logits(trained):
    from safetensors.torch import load_file

    out, ours = trained["out"], trained["model"]
    assert {p.name for p in out.iterdir()} == FILES  # no .bin / .pt / pickle, no temp dir left beside it
    assert not list(out.parent.glob(".hf*"))
    tensors = load_file(out / "model.safetensors")
    assert "lm_head.weight" not in tensors and tensors["transformer.wte.weight"].shape == (512, 32)
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert type(hf).__name__ == "GPT2LMHeadModel" and not hf.training
    assert {k: v for k, v in info.items() if v} == {}  # nothing missing, unexpected or mismatched
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()  # tied, as ours
    x = torch.cat([blocks(trained["root"], s, side, 4) for s in ("code", "more") for side in ("val", "")])
    assert x.shape[1] == 32 and (x == 0).any(dim=1).sum() >= 4  # held-out and training blocks, EOS inside
    with torch.no_grad():
        diff = (ours(x)[0] - hf(x).logits).abs().max().item()
    print(f"max abs logit difference, ours vs transformers (fp32, {x.numel()} positions): {diff:.3g}")
    assert diff == 0  # bit-identical: transformers' Conv1D adds its (here zero) bias to the same product
    lin = trained["manifest"].lineage
    # the lineage alone, as the manifest holds it: the records read it back (its version included)
    assert Lineage.from_json(json.loads((out / "lineage.json").read_text()), str(out / "lineage.json")) == lin
    assert json.loads((out / "lineage.json").read_text()) == lin.to_json()
    cfg = json.loads((out / "config.json").read_text())
    # the logits alone would not catch these (gelu_new moves them ~1e-6 here, eps 1e-6 ~5e-6)
    assert (cfg["n_positions"], cfg["activation_function"], cfg["layer_norm_epsilon"], cfg["eos_token_id"]) == \
        (32, "gelu", ours.transformer.ln_f.eps, 0)
    readme = (out / "README.md").read_text()
    ev = trained["manifest"].eval
    for n, v in ev["sources"].items():
        assert f"| {n} | {v['loss']:.4f} | {v['bpb']:.4f} | {v['tokens']} |" in readme
    assert f"{trained['state']['tokens_seen']:,} tokens seen" in readme and "precision fp32, world size 1" in readme
    assert f"shards sha256 `{lin.data_version.shards_sha256}`" in readme and "| more | `" in readme
    assert "`min_chars`: `16`" in readme and "linear warmup over 4 steps to lr 0.01" in readme


def test_hf_tokenizer_gives_the_encoders_ids(trained):
    tok = transformers.AutoTokenizer.from_pretrained(trained["out"])
    enc = toks.Encoder.build(toks.load(trained["root"] / "data/tokenizer/tokenizer.json"))
    want = enc.encode_batch(TEXTS)
    assert len(want[0]) > 32 and all(want[:-1])
    assert [tok(t)["input_ids"] for t in TEXTS] == want  # add_special_tokens adds nothing: no post-processor
    assert tok.decode(want[1]) == TEXTS[1] and tok.eos_token == "<|endoftext|>" and tok.eos_token_id == 0
    # the documented difference: transformers maps a special-token string in text to its id, the
    # Encoder (what tokenized the training data) spells it out; split_special_tokens=True agrees
    text = "x = 1<|endoftext|>y"
    assert 0 in tok(text)["input_ids"] and 0 not in enc.encode_batch([text])[0]
    split = transformers.AutoTokenizer.from_pretrained(trained["out"], split_special_tokens=True)
    assert split(text)["input_ids"] == enc.encode_batch([text])[0]


def test_greedy_sample_is_transformers_greedy_generate(trained):
    hf = transformers.AutoModelForCausalLM.from_pretrained(trained["out"])
    r = json.loads(run([SL, "sample", "latest", "--prompt", "def main(", "--temperature", "0",
                        "--max-new-tokens", "24", "--json"], trained["root"]).stdout)
    got = hf.generate(torch.tensor([r["prompt_ids"]]), max_new_tokens=24, do_sample=False)[0].tolist()
    assert r["prompt_ids"] + r["ids"] == got and len(r["prompt_ids"]) + 24 <= 32 and not r["cropped"]
    assert r["stopped"] == "max_new_tokens" and len(r["ids"]) == 24
    model = trained["model"]
    for prompt in TEXTS[1:4]:
        ids = toks.Encoder.build(toks.load(trained["root"] / "data/tokenizer/tokenizer.json")).encode_batch([prompt])[0]
        ids, n = ids[:8], 32 - min(len(ids), 8)
        new = sample.continue_ids(model, ids, sample.Settings(n, temperature=0), eos_id=0).ids
        assert ids + new == hf.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)[0].tolist()
        if len(new) < 3:
            continue
        # stopping at EOS as generate does: make the 3rd new token "EOS"
        stop = sample.continue_ids(model, ids, sample.Settings(n, temperature=0), eos_id=new[2])
        assert stop.stopped == "eos" and stop.ids == new[:new.index(new[2]) + 1]
        assert ids + stop.ids == hf.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                                             eos_token_id=new[2], pad_token_id=0)[0].tolist()


def test_seeded_sampling_replays_and_crops_past_seq_len(trained):
    def sampled(seed: str) -> dict:
        return json.loads(run([SL, "sample", "latest", "--prompt", "import os\n", "--temperature", "1", "--top-k",
                               "50", "--seed", seed, "--max-new-tokens", "40", "--json"], trained["root"]).stdout)

    a, b, c = sampled("1"), sampled("1"), sampled("2")
    assert a == b and a["ids"] != c["ids"] and a["prompt_ids"] == c["prompt_ids"]
    assert a["cropped"] and len(a["prompt_ids"]) + len(a["ids"]) > 32
    # the engine: never the global RNG; past seq_len each id is the argmax on the last seq_len ids
    model, ids = trained["model"], a["prompt_ids"]
    before = torch.get_rng_state()
    again = sample.continue_ids(model, ids, sample.Settings(40, temperature=1.0, top_k=50, seed=1), eos_id=0)
    assert torch.equal(torch.get_rng_state(), before) and again.ids == a["ids"]
    greedy = sample.continue_ids(model, ids, sample.Settings(40, temperature=0), eos_id=None)
    seq = ids + greedy.ids
    with torch.no_grad():
        for j in range(len(ids), len(seq)):
            assert seq[j] == int(model(torch.tensor([seq[:j][-32:]]))[0][0, -1].argmax()), j


def test_refusals_exit_2_with_one_line_and_write_nothing(trained, tmp_path):
    root, path = trained["root"], trained["path"]
    for name, spoil, why in (("torn", lambda p: (p / "model.pt").write_bytes((p / "model.pt").read_bytes()[:-10]),
                              "model.pt is"), ("nomanifest", lambda p: (p / "manifest.json").unlink(),
                                               "no manifest.json")):
        bad = tmp_path / name / path.name
        shutil.copytree(path, bad)
        spoil(bad)
        out = tmp_path / f"out-{name}"
        r = run([SL, "export", str(bad), str(out)], root, check=False)
        assert r.returncode == 2 and why in r.stderr and "not a valid checkpoint" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not out.exists() and not list(tmp_path.glob(f".out-{name}*"))
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    for force in ([], ["--force"]):  # --force replaces only a previous export
        r = run([SL, "export", "latest", str(full), *force], root, check=False)
        assert r.returncode == 2 and ("not empty" if not force else "not one") in r.stderr
        assert [p.name for p in full.iterdir()] == ["notes.txt"]
    # another tokenizer in data/tokenizer: refused by export and sample, naming both hashes
    other = tmp_path / "other"
    (other / "data/tokenizer").mkdir(parents=True)
    (other / "data/tokenizer/tokenizer.json").write_text((root / "data/tokenizer/tokenizer.json").read_text() + " ")
    want = trained["manifest"].lineage.data_version.tokenizer_sha256
    got = fsio.sha256_file(other / "data/tokenizer/tokenizer.json")
    for cmd in (["export", str(path), str(tmp_path / "out-tok")], ["sample", str(path), "--prompt", "x"]):
        r = run([SL, "--root", str(other), *cmd], root, check=False)
        assert r.returncode == 2 and want in r.stderr and got in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "out-tok").exists()
    r = run([SL, "export", "latest", str(trained["out"]), "--force"], root)  # over a previous export: replaced
    assert {p.name for p in trained["out"].iterdir()} == FILES and not list(trained["out"].parent.glob(".hf*"))


def test_bias_true_maps_exactly_and_the_card_lists_rollbacks(trained, tmp_path):
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = build(ModelConfig("gpt2", vocab_size=300, seq_len=16, n_layer=2, n_head=2, d_model=16, bias=True))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name:  # init leaves biases 0 and gains 1: make them count
                p.normal_(0, 0.5)
    model.eval()
    tensors, cfg = to_hf(model, eos_id=0)
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    x = torch.randint(0, 300, (3, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (model(x)[0] - hf(x).logits).abs().max().item()
    print(f"max abs logit difference with biases (model.bias true): {diff:.3g}")
    assert diff == 0
    (e,) = trained["manifest"].lineage.rollbacks
    assert e["steps"] == [2, 2] and e["to"] == 0
    text = (trained["out"] / "README.md").read_text()
    assert f"- rollbacks by the training guards: 1\n  - {guard.describe(e)}\n" in text
    m, state = trained["manifest"].to_json(), trained["state"]
    del m["lineage"]["rollbacks"]  # an older lineage: the line is left out, not guessed
    assert "rollbacks" not in card.render("step-x", Manifest.from_json(m, "x/step-x"), state, trained["model"], 0)


@pytest.fixture(scope="module")
def llama(built, tmp_path_factory):  # noqa: F811
    """The line's default: llama (GQA) trained with document attention, exported by the CLI."""
    root = project(built, tmp_path_factory.mktemp("export-llama") / "p", train={"steps": 6, "checkpoint_every": 6})
    run([SL, "stage", "train"], root)
    out = root.parent / "hf"
    run([SL, "export", "latest", str(out)], root)
    model, _, manifest = load_model(checkpoint.latest_valid(root / "data/checkpoints", lambda _: None))
    return {"root": root, "out": out, "model": model, "manifest": manifest}


def test_llama_export_is_llama_for_causal_lm_with_bit_identical_logits(llama):
    ours, out = llama["model"], llama["out"]
    assert (ours.cfg.arch, ours.cfg.attention, ours.cfg.n_kv_head, ours.cfg.n_head) == ("llama", "document", 2, 2)
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert type(hf).__name__ == "LlamaForCausalLM" and {k: v for k, v in info.items() if v} == {}
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["num_key_value_heads"], cfg["tie_word_embeddings"], cfg["max_position_embeddings"]) == (2, True, 32)
    # real blocks cut before their first EOS: one document each, where causal (transformers) and
    # document attention (how it trained) are the same attention
    rows = torch.cat([blocks(llama["root"], s, side, 8) for s in ("code", "more") for side in ("val", "")])
    x = torch.stack([r[:16] for r in rows if not (r[:16] == 0).any()])
    assert len(x) >= 8
    with torch.no_grad():
        a, b = ours(x)[0], hf(x).logits
    print(f"llama export: max abs logit difference over {x.numel()} positions: {(a - b).abs().max().item():.3g}")
    assert torch.equal(a, b)
    readme = (out / "README.md").read_text()
    assert "`LlamaForCausalLM` (1 layers, 2 query heads and 2 key/value heads of 16" in readme
    assert "It trained with document attention" in readme


def test_llama_greedy_generate_is_shardline_sample_top_k_1(llama):
    hf = transformers.AutoModelForCausalLM.from_pretrained(llama["out"])
    for prompt in ("def main(", "import os\nclass "):
        r = json.loads(run([SL, "sample", "latest", "--prompt", prompt, "--top-k", "1", "--max-new-tokens", "20",
                            "--json"], llama["root"]).stdout)
        got = hf.generate(torch.tensor([r["prompt_ids"]]), max_new_tokens=20, do_sample=False)[0].tolist()
        assert r["prompt_ids"] + r["ids"] == got and r["top_k"] == 1 and not r["cropped"]
