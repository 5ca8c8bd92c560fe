"""The model card (README.md) of an exported checkpoint: what it was trained on, how, and how it scored.

Contract: `render(name, manifest, state, model, eos_id, config)` is a pure function of the checkpoint's
manifest (lineage, eval, versions), its train state, the rebuilt model and the config.json it is exported
with; it reads no file. It states the architecture (and, for document attention, what transformers'
causal attention means for it), the model it started from (train.init_from), the
data version, sources, mix, cleaning rules, tokens seen, the held-out eval the manifest holds
(per source loss and bits per byte, the total with sources weighted equally), how it was trained (steps, precision,
world size and strategy, schedule and optimiser settings from the lineage's params["train"]),
the training guards' rollbacks (older lineages have none), and the special-token caveat of the
exported tokenizer. Keys a lineage lacks (older runs) are left out, never guessed.
"""

from __future__ import annotations

import json

from shardline.training import guard
from shardline.training.steplog import equal
from shardline.training.records import Lineage, Manifest

CAVEAT = ("The tokenizer's ids equal the line's encoder's for text that holds no special-token string. Where the "
          "text holds one (e.g. `{eos}`), `transformers` turns it into the special token's id (its default, "
          "`split_special_tokens=False`), while the line's encoder, which tokenized the training data, spells it as "
          "ordinary text; `AutoTokenizer.from_pretrained(DIR, split_special_tokens=True)` gives the line's ids. "
          "EOS (`{eos}`, id {eos_id}) was appended after every training document; generation stops at it.")


def _cell(v) -> str:
    s = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return s.replace("|", "\\|").replace("\n", " ")


def _data(lin: Lineage) -> list[str]:
    dv, out = lin.data_version, ["## Data", ""]
    dvc = f"`{dv.dvc_md5}`" if dv.dvc_md5 else "none (no dvc.lock when it trained)"
    out.append(f"- data version: shards sha256 `{dv.shards_sha256}`, DVC md5 of data/shards {dvc}, "
               f"tokenizer sha256 `{dv.tokenizer_sha256}`")
    mix = ", ".join(f"{n} {w:g}" for n, w in (lin.mix or {}).items())
    out.append(f"- mix (sampling weights at load time): {mix}")
    if lin.parent:
        out.append(f"- continued from checkpoint `{lin.parent}`")
    if lin.data_change:
        out.append("- allowed data change at a resume: " + "; ".join(lin.data_change))
    if lin.continued_from:
        o = lin.continued_from
        out.append(f"- its training continued from `{o.get('checkpoint')}` of another data version or mix "
                   f"({'; '.join(o.get('changes') or [])})")
    out += ["", "| source | uri | raw files |", "|---|---|---|"]
    for s in lin.sources:
        out.append(f"| {_cell(s.name)} | `{_cell(s.uri)}` | {len(s.files) if s.files else '?'} |")
    out += ["", "Cleaning rules (values, as recorded in the lineage):", ""]
    out += [f"- `{k}`: `{_cell(v)}`" for k, v in sorted(lin.clean_rules.items())]
    tok = lin.params["tokenizer"]
    specials = _cell(list(tok.get("special_tokens") or []))
    out.append("")
    given = (lin.init.source if lin.init else None) or tok.get("path")
    kind = (f"the tokenizer.json of `{given}`" if given else
            f"byte-level BPE, vocab_size {tok.get('vocab_size')}, special tokens {specials}")
    bos = f", BOS `{tok['bos_token']}` before every document" if tok.get("bos_token") else ""
    out.append(f"Tokenizer: {kind}, EOS `{tok.get('eos_token')}`{bos}.")
    return out


def _training(lin: Lineage, state: dict) -> list[str]:
    p = lin.params
    t, loader = p["train"], p["loader"]
    sched = t.get("schedule", "cosine")  # lineages older than train.schedule were all cosine
    if sched == "wsd" and "decay_fraction" in t:
        decay = f"held, then a linear decay to min_lr over the last {t['decay_fraction']:g} of train.steps"
    else:
        decay = "cosine decay to min_lr at the last step"
    out = ["## Training", ""]
    out.append(f"- steps: {state['step']} optimizer steps (train.steps {t.get('steps')}), "
               f"{state.get('tokens_seen', 0):,} tokens seen")
    out.append(f"- batch: {loader.get('global_batch')} blocks of {p['shard'].get('seq_len')} tokens "
               f"per loader step, grad_accum {t.get('grad_accum', 1)}")
    out.append(f"- precision {t.get('precision')}, world size {state.get('world_size', 1)}, strategy "
               f"{state.get('strategy', t.get('strategy'))}, resumes {state.get('resumes', 0)}")
    out.append(f"- schedule: {sched}: linear warmup over {t.get('warmup_steps')} steps to lr {t.get('lr')}, "
               f"then {decay} (min_lr {t.get('min_lr')})")
    out.append(f"- AdamW betas ({t.get('beta1')}, {t.get('beta2')}), weight decay {t.get('weight_decay')}, "
               f"grad clip {t.get('grad_clip')}; seed {t.get('seed')}, loader seed {loader.get('seed')}")
    if lin.code.commit:
        out.append(f"- code: git {lin.code.commit}{' (dirty)' if lin.code.dirty else ''}")
    else:
        out.append("- code: not a git checkout (no commit recorded)")
    if "rollbacks" not in lin.absent:
        out.append(f"- rollbacks by the training guards: {len(lin.rollbacks) or 'none'}")
        out += [f"  - {_cell(guard.describe(e))}" for e in lin.rollbacks]
    return out


def _eval(manifest: Manifest) -> list[str]:
    ev = manifest.eval
    out = ["## Evaluation (held-out)", ""]
    if not ev:
        return out + ["No held-out evaluation is recorded for this checkpoint (eval was off)."]
    out.append(f"At step {manifest.step}, on a fixed set of held-out blocks per source (documents the "
               "tokenizer and the model never trained on). Loss in nats per token; bits per byte = summed "
               "loss / ln 2 / the UTF-8 bytes the targets spell.")
    out += ["", "| source | loss | bits/byte | tokens |", "|---|---|---|---|"]
    for n, v in ev["sources"].items():
        out.append(f"| {_cell(n)} | {v['loss']:.4f} | {v['bpb']:.4f} | {v.get('tokens', '')} |")
    t = equal(ev)
    out.append(f"| total (sources weighted equally) | {t['loss']:.4f} | {t['bpb']:.4f} | |")
    return out


USE = """```python
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("path/to/this/dir")
model = AutoModelForCausalLM.from_pretrained("path/to/this/dir")
ids = tok("def main(", return_tensors="pt").input_ids
print(tok.decode(model.generate(ids, max_new_tokens=32, do_sample=False)[0]))
```"""


def _shape(c) -> str:
    if c.arch == "gpt2":
        return f"n_layer {c.n_layer}, n_head {c.n_head}, n_embd {c.d_model}"
    return (f"{c.n_layer} layers, {c.n_head} query heads and {c.n_kv_head} key/value heads of {c.head_dim}, hidden "
            f"{c.d_model}, SwiGLU {c.mlp_hidden}, RoPE theta {c.rope_theta:g}{', QK-norm' if c.qk_norm else ''}")


def render(name: str, manifest: Manifest, state: dict, model, eos_id: int, config: dict | None = None) -> str:
    """The card of `model` (a shardline.model network) exported with `config` (its config.json)."""
    c, lin = model.cfg, manifest.lineage
    arch = (config or {}).get("architectures", ["GPT2LMHeadModel"])[0]
    eos = lin.params["tokenizer"]["eos_token"]
    out = ["---", "library_name: transformers", "pipeline_tag: text-generation",
           f"tags: [shardline, {(config or {}).get('model_type', 'gpt2')}]", "---", "",
           f"# {name} (step {manifest.step})", ""]
    out.append(f"A causal language model, `{arch}` ({_shape(c)}, a {c.seq_len}-token context, vocab "
               f"{c.vocab_size}, {model.num_params(False):,} parameters, {'tied' if c.tie_embeddings else 'untied'} "
               f"embeddings), exported from Shardline checkpoint `{name}` by `shardline export`. "
               "`lineage.json` holds its full lineage (what `shardline lineage --json` prints).")
    if c.attention == "document":
        out.append("")
        out.append("It trained with document attention (no token attended across a document boundary, positions "
                   "restarting at each document); `transformers` runs plain causal attention, which is the same on "
                   "input holding one document.")
    if lin.init:
        out.append("")
        out.append(f"Its training started from `{lin.init.source}` ({lin.init.architecture}).")
    out += ["", "## Use", "", USE, "", CAVEAT.format(eos=eos, eos_id=eos_id), ""]
    bos = lin.params["tokenizer"].get("bos_token")
    if bos:
        out += [f"Every training document started with BOS `{bos}`: start a prompt with it too (a tokenizer "
                "brought from another model may add it itself, check `tok(text).input_ids[0]`; a trained one does "
                f"not: prepend `tok.convert_tokens_to_ids({bos!r})`), as `shardline sample` does.", ""]
    if c.arch == "gpt2":
        out.append(f"Inputs longer than {c.positions} tokens (n_positions) are refused by `transformers`; "
                   "`shardline sample` crops its context to the last seq_len tokens instead.")
    else:
        out.append(f"It trained on {c.seq_len}-token blocks (max_position_embeddings); `shardline sample` crops its "
                   "context to the last seq_len tokens.")
    out += ["", *_data(lin), "", *_training(lin, state), "", *_eval(manifest)]
    versions = ", ".join(f"{k} {v}" for k, v in sorted(manifest.versions.items()))
    return "\n".join([*out, "", "## Versions", "", versions, ""])
