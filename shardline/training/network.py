"""The network a training run trains: its shape, where its first weights come from, and how it runs.

Contract:
- `Network.for_run(params, layout, seq_len)` resolves the model: params.yaml's model section, or
  train.init_from's config.json (shardline.model.hf: fields params.yaml sets must agree); the
  vocabulary of the tokenizer (data/tokenizer/meta.json) or of the imported embedding, which must
  cover every id the tokenizer makes; seq_len from the shards; train.attention with the
  tokenizer's EOS and BOS ids as document boundaries. `section` is the model section as a run's
  identity and lineage hold it (the imported shape, when there is one).
- `build(seed, fresh)` seeds torch's global RNG with train.seed and builds the network (every
  rank draws the same weights); on a fresh start from train.init_from it then loads the imported
  weights, each tensor mapped once and checked. A resume loads the checkpoint over either.
- `prepare(model, cfg)` applies what changes how the network runs and not what it computes:
  activation checkpointing, then torch.compile per block (torchtitan's order; FSDP wraps after).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import nn

from shardline.core import fsio
from shardline.core.config import Params, Train
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.model import ModelConfig, build, resolve
from shardline.model.hf import Imported
from shardline.training import recompute, rng


@dataclass
class Network:
    config: ModelConfig
    section: dict  # the model section as identity and lineage record it
    init: Imported | None = None

    @classmethod
    def for_run(cls, params: Params, layout: Layout, seq_len: int) -> "Network":
        meta = fsio.read_json(layout.tokenizer_meta)
        init = None
        if params.train.init_from:
            init = Imported.read(layout.under_root(Path(params.train.init_from)))
        section = init.section(params.model) if init else params.section("model")
        vocab = init.vocab_size if init else meta["vocab_size"]
        if vocab < meta["vocab_size"]:
            raise BadInput(f"{init.where / 'config.json'}: vocab_size {vocab} is smaller than its tokenizer's "
                           f"{meta['vocab_size']} ids (data/tokenizer/meta.json): ids past {vocab - 1} have no "
                           "embedding; re-run 'dvc repro tokenize' with this model's tokenizer.json")
        cfg = resolve(section, vocab_size=vocab, seq_len=seq_len, attention=params.train.attention,
                      eos_id=meta["eos_id"], bos_id=meta.get("bos_id"), n_positions=init.n_positions if init else 0)
        if cfg.arch == "gpt2" and cfg.positions < seq_len:
            raise BadInput(f"{init.where / 'config.json'}: n_positions {cfg.positions} is below shard.seq_len "
                           f"{seq_len}; shard with a seq_len it has positions for")
        return cls(cfg, section, init)

    def build(self, seed: int, fresh: bool) -> nn.Module:
        rng.seed_all(seed)
        model = build(self.config)
        if fresh and self.init is not None:
            shapes = {k: v.shape for k, v in model.state_dict().items()}
            model.load_state_dict(self.init.state(self.config, shapes), strict=True)
        return model


def prepare(model: nn.Module, cfg: Train) -> None:
    recompute.apply(model.blocks, cfg.activation_checkpointing)
    if cfg.compile:
        for block in model.blocks:
            block.compile()
