"""Export a checkpoint as a Hugging Face `transformers` model directory.

Contract:
- `export(path, out, layout, force)` writes OUT holding: model.safetensors (safetensors, no
  pickle anywhere), config.json (GPT2LMHeadModel for gpt2, LlamaForCausalLM for llama,
  Qwen3ForCausalLM for llama with qk_norm: shardline.model.hf), generation_config.json, tokenizer.json (the
  checkpoint's own, byte for byte), tokenizer_config.json, special_tokens_map.json,
  lineage.json (the manifest's lineage: what `shardline lineage --json` prints) and README.md
  (the model card, `shardline.results.card`); all but the last two as shardline.model.hf_dir writes
  them. `AutoModelForCausalLM.from_pretrained(OUT)` and
  `AutoTokenizer.from_pretrained(OUT)` load it offline.
- The mapping is exact, not approximate (shardline.model.hf): the same graphs, the same names or
  a fixed transpose. In fp32 on CPU the export's logits in transformers are bit-identical to ours,
  gpt2 and llama (tests/integration/test_export.py, tests/unit/test_hf.py). transformers runs causal attention:
  for a model trained with train.attention document, that holds on any input of one document
  (no EOS or BOS inside), which is what generation from a prompt is.
- The tokenizer: for text holding no special-token string, the HF tokenizer's ids equal the
  line's `Encoder`'s (the same tokenizer.json; a trained one has no post-processor, while a brought
  one, tokenizer.path or train.init_from, keeps its own: Llama's adds BOS, as training did when
  tokenizer.bos_token names it). For text holding one, e.g.
  "<|endoftext|>", transformers gives the special token's id (its default,
  split_special_tokens=False), while the Encoder, which tokenized the training data, spells it
  as ordinary text; `AutoTokenizer.from_pretrained(OUT, split_special_tokens=True)` gives the
  Encoder's ids. EOS is params tokenizer.eos_token as the lineage holds it; BOS is its bos_token,
  or EOS when there is none (as GPT-2 does).
- Refused, with nothing written (BadInput): a checkpoint that does not verify, a
  data/tokenizer/tokenizer.json whose sha256 is not the lineage's (`trained`), an OUT that is
  not a directory, and an OUT that exists non-empty unless `force`; `force` replaces only a
  previous export (a directory holding config.json and lineage.json), never another directory.
  An OUT that cannot be written (permission, read-only, full disk, quota) is a PathError naming
  OUT_DIR, with nothing left behind.
- Atomic like every write of the line: the files go into `.<OUT>.tmp-<pid>` beside OUT (each
  fsynced, then the directory), which is renamed to OUT, then the parent is fsynced. A killed
  export leaves only that temp dir, which the next export to the same OUT sweeps. With `force`
  the old OUT is first renamed aside, removed after the new one is in place; killed between the
  two renames, the next export first puts it back.
- Imports neither transformers (only a dev/test extra) nor prefect nor dvc: config files are
  plain JSON with the keys the config and tokenizer classes read.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from shardline.core import fsio
from shardline.results import card
from shardline.core.errors import BadInput, on_path
from shardline.core.layout import Layout
from shardline.core.filenames import HF_CARD, HF_CONFIG, HF_LINEAGE
from shardline.model import hf_dir
from shardline.results.trained import bos_token, eos_token, load_model, tokenizer_file


def _check_out(out: Path, force: bool) -> None:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise BadInput(f"{out}: exists and is not a directory; pick another OUT_DIR")
    if not out.exists() or not any(out.iterdir()):
        return
    if not force:
        raise BadInput(f"{out}: exists and is not empty; pick another OUT_DIR, or pass --force to replace a "
                       "previous export")
    if not ((out / HF_CONFIG).is_file() and (out / HF_LINEAGE).is_file()):
        raise BadInput(f"{out}: --force replaces only a previous export (a directory holding config.json and "
                       f"{HF_LINEAGE}), and this is not one; remove it yourself or pick another OUT_DIR")


def export(path: Path, out: Path, layout: Layout, force: bool = False) -> Path:
    model, state, manifest = load_model(path)
    tok_path = tokenizer_file(manifest, layout, "export")
    out = Path(out).absolute()
    with on_path(out, "OUT_DIR"):  # unreadable, not permitted, read-only: one line naming OUT_DIR
        asides = sorted(out.parent.glob(f".{glob.escape(out.name)}.old{fsio.TMP_MARK}*"))
        if asides and not out.exists():  # killed between the two renames of a --force: the previous export is back
            os.rename(asides.pop(), out)
        _check_out(out, force)
    name = Path(path).resolve().name
    with on_path(out, "OUT_DIR"):  # a full disk, a quota, a read-only file system: one line naming OUT_DIR
        out.parent.mkdir(parents=True, exist_ok=True)
        for stale in asides + sorted(out.parent.glob(f".{glob.escape(out.name)}{fsio.TMP_MARK}*")):
            shutil.rmtree(stale, ignore_errors=True)  # a killed export's leftovers (never a finished OUT)
        tmp, aside = fsio.temp_name(out), fsio.temp_name(out.with_name(out.name + ".old"))
        tmp.mkdir()
        try:
            config, copied = hf_dir.write(tmp, model, tok_path, eos_token(manifest), bos_token(manifest),
                                          {"shardline_checkpoint": name, "step": str(manifest.step)})
            if copied != manifest.lineage.data_version.tokenizer_sha256:
                raise BadInput(f"{layout.rel(tok_path)} changed while being exported; re-run the export")
            fsio.write_json(tmp / HF_LINEAGE, manifest.lineage.to_json())  # records.Lineage.from_json reads it
            fsio.write_bytes(tmp / HF_CARD, card.render(name, manifest, state, model, config["eos_token_id"],
                                                        config).encode())
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
