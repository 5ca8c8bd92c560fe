"""Export a checkpoint as a Hugging Face `transformers` model directory (GPT-2 architecture).

Contract:
- `export(path, out, layout, force)` writes OUT holding: model.safetensors (safetensors, no
  pickle anywhere), config.json (GPT2LMHeadModel), generation_config.json, tokenizer.json (the
  checkpoint's own, byte for byte), tokenizer_config.json, special_tokens_map.json,
  lineage.json (the manifest's lineage: what `shardline lineage --json` prints) and README.md
  (the model card, `shardline.results.card`). `AutoModelForCausalLM.from_pretrained(OUT)` and
  `AutoTokenizer.from_pretrained(OUT)` load it offline.
- The mapping is exact, not approximate: both are pre-LN GPT-2 graphs. GELU is the exact (erf)
  one on both sides ("gelu" = nn.GELU()); LayerNorm eps is read from our modules; where ours has
  no bias (model.bias false) the export holds zeros; HF's Conv1D holds the transpose of
  nn.Linear's weight; lm_head is tied to wte, so only wte is stored (as save_pretrained does).
  Logits agree within fp32 rounding (tests/test_export.py measures and bounds it at 1e-4).
- The tokenizer: for text holding no special-token string, the HF tokenizer's ids equal the
  line's `Encoder`'s (the same tokenizer.json, no post-processor). For text holding one, e.g.
  "<|endoftext|>", transformers gives the special token's id (its default,
  split_special_tokens=False), while the Encoder, which tokenized the training data, spells it
  as ordinary text; `AutoTokenizer.from_pretrained(OUT, split_special_tokens=True)` gives the
  Encoder's ids. EOS (bos too, as GPT-2 does) is params tokenizer.eos_token as the lineage holds it.
- Refused, with nothing written (BadInput): a checkpoint that does not verify, a
  data/tokenizer/tokenizer.json whose sha256 is not the lineage's (`trained`), an OUT that is
  not a directory, and an OUT that exists non-empty unless `force`; `force` replaces only a
  previous export (a directory holding config.json and lineage.json), never another directory.
- Atomic like every write of the line: the files go into `.<OUT>.tmp-<pid>` beside OUT (each
  fsynced, then the directory), which is renamed to OUT, then the parent is fsynced. A killed
  export leaves only that temp dir, which the next export to the same OUT sweeps. With `force`
  the old OUT is first renamed aside, removed after the new one is in place; killed between the
  two renames, the next export first puts it back.
- Imports neither transformers (only a dev/test extra) nor prefect nor dvc: config files are
  plain JSON with the keys GPT2Config and the tokenizer classes read.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save as safetensors_bytes
from torch import nn

from shardline.core import fsio
from shardline.results import card
from shardline.data import tokenizer as toks
from shardline.core.errors import BadInput, ShardlineError
from shardline.core.layout import Layout
from shardline.training.model import GPT
from shardline.results.trained import eos_token, load_model, tokenizer_file

WEIGHTS = "model.safetensors"
LINEAGE = "lineage.json"
_LINEAR = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # nn.Linear here, Conv1D in HF GPT-2


def hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """Our weights under GPT-2's names and layouts. Every tensor of ours is used exactly once
    (the tied lm_head as wte), or this raises: a model change must not export silently wrong."""
    ours, c = model.state_dict(), model.cfg
    used = {"lm_head.weight"}  # the same tensor as wte: HF ties it back on load

    def take(name: str, transpose: bool = False) -> torch.Tensor:
        used.add(name)
        t = ours[name].detach()
        return (t.t() if transpose else t).contiguous().clone()

    def bias(module: str, n: int) -> torch.Tensor:
        name = f"{module}.bias"
        return take(name) if name in ours else torch.zeros(n, dtype=ours["transformer.wte.weight"].dtype)

    out = {k: take(k) for k in ("transformer.wte.weight", "transformer.wpe.weight")}
    for i in range(c.n_layer):
        for m in (f"transformer.h.{i}.ln_1", f"transformer.h.{i}.ln_2"):
            out[f"{m}.weight"], out[f"{m}.bias"] = take(f"{m}.weight"), bias(m, c.d_model)
        for m in (f"transformer.h.{i}.{n}" for n in _LINEAR):
            w = take(f"{m}.weight", transpose=True)  # [in, out]
            out[f"{m}.weight"], out[f"{m}.bias"] = w, bias(m, w.shape[1])
    out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = take("transformer.ln_f.weight"), \
        bias("transformer.ln_f", c.d_model)
    left = sorted(set(ours) - used)
    if left:
        raise ShardlineError(f"export: no GPT-2 name for {left}; the model changed and shardline/results/export.py "
                             "must map it before exporting")
    return out


def _one(values: set, what: str):
    if len(values) != 1:
        raise ShardlineError(f"export: the model mixes {what} {sorted(values)}; GPT-2 has one")
    return values.pop()


def hf_config(model: GPT, eos_id: int) -> dict:
    """config.json of GPT2LMHeadModel, each setting read from the model it must reproduce."""
    c = model.cfg
    acts = {"none": "gelu", "tanh": "gelu_pytorch_tanh"}  # transformers' ACT2FN names for nn.GELU's two forms
    act = _one({m.approximate for m in model.modules() if isinstance(m, nn.GELU)}, "GELU forms")
    eps = _one({m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)}, "LayerNorm eps")
    inner = model.transformer.h[0].mlp.c_fc.out_features
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "vocab_size": c.vocab_size, "n_positions": c.seq_len, "n_embd": c.d_model, "n_layer": c.n_layer,
            "n_head": c.n_head, "n_inner": inner, "activation_function": acts[act], "layer_norm_epsilon": eps,
            # dropout as it trained: only a fine-tune (train mode) sees it
            "resid_pdrop": c.dropout, "embd_pdrop": c.dropout, "attn_pdrop": c.dropout,
            "initializer_range": 0.02, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False, "add_cross_attention": False, "tie_word_embeddings": True,
            "use_cache": True, "bos_token_id": eos_id, "eos_token_id": eos_id, "pad_token_id": None,
            "dtype": str(model.lm_head.weight.dtype).removeprefix("torch.")}


def _check_out(out: Path, force: bool) -> None:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise BadInput(f"{out}: exists and is not a directory; pick another OUT_DIR")
    if not out.exists() or not any(out.iterdir()):
        return
    if not force:
        raise BadInput(f"{out}: exists and is not empty; pick another OUT_DIR, or pass --force to replace a "
                       "previous export")
    if not ((out / "config.json").is_file() and (out / LINEAGE).is_file()):
        raise BadInput(f"{out}: --force replaces only a previous export (a directory holding config.json and "
                       f"{LINEAGE}), and this is not one; remove it yourself or pick another OUT_DIR")


def export(path: Path, out: Path, layout: Layout, force: bool = False) -> Path:
    model, state, manifest = load_model(path)
    tok_path = tokenizer_file(manifest, layout, "export")
    out = Path(out).absolute()
    asides = sorted(out.parent.glob(f".{glob.escape(out.name)}.old{fsio.TMP_MARK}*"))
    if asides and not out.exists():  # killed between the two renames of a --force: the previous export is back
        os.rename(asides.pop(), out)
    _check_out(out, force)
    tok = toks.load(tok_path)
    eos = eos_token(manifest)
    eos_id = toks.token_id(tok, eos)
    name = Path(path).resolve().name
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in asides + sorted(out.parent.glob(f".{glob.escape(out.name)}{fsio.TMP_MARK}*")):
        shutil.rmtree(stale, ignore_errors=True)  # a killed export's leftovers (never a finished OUT)
    tmp, aside = fsio.temp_name(out), fsio.temp_name(out.with_name(out.name + ".old"))
    tmp.mkdir()
    try:
        # bytes, then fsio's fsynced write like every other file (save_file would not fsync); "format": "pt"
        # is what transformers' loader checks for
        fsio.write_bytes(tmp / WEIGHTS, safetensors_bytes(hf_state_dict(model), metadata={
            "format": "pt", "shardline_checkpoint": name, "step": str(manifest["step"])}))
        fsio.write_json(tmp / "config.json", hf_config(model, eos_id))
        # pad = eos: GPT-2's convention, so generate() pads finished rows of a batch without asking
        fsio.write_json(tmp / "generation_config.json", {"bos_token_id": eos_id, "eos_token_id": eos_id,
                                               "pad_token_id": eos_id, "do_sample": False})
        if fsio.copy_file(tok_path, tmp / "tokenizer.json") != manifest["lineage"]["data_version"]["tokenizer_sha256"]:
            raise BadInput(f"{layout.rel(tok_path)} changed while being exported; re-run the export")
        specials = {"bos_token": eos, "eos_token": eos}
        fsio.write_json(tmp / "tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast", **specials,
                                              "model_max_length": model.cfg.seq_len,
                                              "clean_up_tokenization_spaces": False})
        fsio.write_json(tmp / "special_tokens_map.json", specials)
        fsio.write_json(tmp / LINEAGE, manifest["lineage"])
        fsio.write_bytes(tmp / "README.md", card.render(name, manifest, state, model, eos_id).encode())
        fsio.fsync_dir(tmp)
        if out.exists():
            os.rename(out, aside)
        try:
            os.rename(tmp, out)
        except BaseException:
            if aside.exists():
                os.rename(aside, out)  # the previous export stays as it was
            raise
        fsio.fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(aside, ignore_errors=True)
    return out
