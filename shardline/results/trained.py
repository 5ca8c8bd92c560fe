"""A trained model opened for use: the one place that rebuilds a network from a checkpoint.

Contract:
- `load_model(path)` refuses (BadInput, naming why) a checkpoint whose manifest does not verify,
  reads only its weights (full: model.pt by `torch.load(weights_only=True)`; sharded: the model's
  chunks from dcp/, gathered into full tensors in this process; never the optimizer, scaler or
  RNG), its train state and its manifest, and rebuilds the network (shardline.model): vocab_size
  (and gpt2's position table) from the tensors, seq_len from the loader state, the attention from
  the lineage's params["train"] with its EOS/BOS ids, every other hyperparameter from the
  lineage's params["model"] (a lineage from before llama: gpt2, causal). It returns
  (model on CPU in eval mode, train state, manifest) and leaves the global RNG as it was.
  `judge`, `export` and `sample` all open checkpoints through it, so none can rebuild a model
  the others would not.
- `tokenizer_file(manifest, layout, what)` is data/tokenizer/tokenizer.json when its sha256 equals the
  lineage's data_version.tokenizer_sha256; otherwise BadInput naming both hashes, since the
  checkpoint's ids would mean other text.
- `eos_token(manifest)` is the lineage's params tokenizer.eos_token (what ends every training
  document); `bos_token(manifest)` its bos_token (what starts each; None when unset).
"""

from __future__ import annotations

from pathlib import Path

import torch

from shardline.core import fsio
from shardline.training import checkpoint, sharded
from shardline.training.records import Manifest
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import CHECKPOINT_MODEL, DCP, DCP_METADATA
from shardline.model import build, resolve


def load_model(path: Path) -> tuple[torch.nn.Module, dict, Manifest]:
    path = Path(path)
    ok, why = checkpoint.verify(path)
    if not ok:
        raise BadInput(f"{path}: not a valid checkpoint ({why}); 'shardline checkpoints' lists them")
    files = checkpoint.read_manifest(path).files
    if CHECKPOINT_MODEL not in files and f"{DCP}/{DCP_METADATA}" not in files:
        raise BadInput(f"{path}: the manifest lists no {CHECKPOINT_MODEL} (files: {sorted(files)}); not a checkpoint "
                       "of 'shardline stage train'")
    tensors, state, manifest = checkpoint.load(path, skip=tuple(n for n in files if n != CHECKPOINT_MODEL))
    weights = sharded.full_state(path) if manifest.format == "sharded" else tensors[CHECKPOINT_MODEL]
    params, special = manifest.lineage.params, manifest.lineage.special_ids
    wpe, vocab = weights.get("transformer.wpe.weight"), manifest.lineage.vocab_size
    if vocab is None and "lm_head.weight" not in weights:  # a plug-in's, trained before the lineage said its vocabulary
        raise BadInput(f"{path}: a {params['model'].get('arch')} network whose lineage does not record its vocabulary "
                       "(written before that was recorded): train it again to use it here")
    cfg = resolve(params["model"], vocab_size=weights["lm_head.weight"].shape[0] if vocab is None else vocab,
                  seq_len=state["loader"]["seq_len"], attention=params["train"].get("attention", "causal"),
                  eos_id=special.eos, bos_id=special.bos, n_positions=0 if wpe is None else wpe.shape[0])
    with torch.random.fork_rng(devices=[]):  # building draws its (discarded) init: keep the caller's RNG as it was
        model = build(cfg)
    model.load_state_dict(weights)
    return model.eval(), state, manifest


def tokenizer_file(manifest: Manifest, layout: Layout, what: str) -> Path:
    """The tokenizer.json this checkpoint was trained with (checked by hash, never assumed);
    `what` names the use in messages ("export", "sample")."""
    path, step = layout.tokenizer_json, manifest.step
    want = manifest.lineage.data_version.tokenizer_sha256
    if not path.exists():
        raise BadInput(f"{layout.rel(path)} is missing: {what} needs the tokenizer step {step} was "
                       "trained with; 'dvc checkout data/tokenizer' (or 'dvc repro tokenize') restores it")
    got = fsio.sha256_file(path)
    if want is None:
        raise BadInput(f"{what}: step {step}'s lineage records no tokenizer hash "
                       "(data_version.tokenizer_sha256 is null), so the ids of "
                       f"{layout.rel(path)} ({got[:12]}…) cannot be shown to be the ones it was trained on")
    if got != want:
        raise BadInput(f"{what}: step {step} was trained with tokenizer sha256 {want} (its lineage's "
                       f"data_version.tokenizer_sha256), but {layout.rel(path)} has sha256 {got}: its ids would "
                       "mean other text. Check out the checkpoint's data version ('git checkout <its commit>' + "
                       "'dvc checkout data/tokenizer') first")
    return path


def eos_token(manifest: Manifest) -> str:
    return manifest.lineage.params["tokenizer"]["eos_token"]


def bos_token(manifest: Manifest) -> str | None:
    return manifest.lineage.params["tokenizer"].get("bos_token")
