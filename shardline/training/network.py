"""The network a training run trains: its shape, where its first weights come from, and how it runs.

Contract:
- `Network.for_run(params, layout, seq_len)` resolves the model: params.yaml's model section, or
  train.init_from's config.json (shardline.model.imported: fields params.yaml sets must agree;
  the data must have been tokenized with its tokenizer.json, checked by sha256); the
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
from shardline.data import tokenizer
from shardline.core.config import Params, Train
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import HF_CONFIG, HF_TOKENIZER
from shardline.model import ModelConfig, build, resolve
from shardline.model.imported import Imported
from shardline.training import recompute, rng


@dataclass
class Network:
    config: ModelConfig
    section: dict  # the model section as identity and lineage record it
    init: Imported | None = None

    @classmethod
    def for_run(cls, params: Params, layout: Layout, seq_len: int, share=lambda x: x, rank: int = 0) -> "Network":
        """`share` hands rank 0's value to every rank (shardline.training.dist.Dist.share): the weight
        files are hashed once, not on every rank."""
        meta = _tokenizer_meta(params, layout)
        init = None
        if params.train.init_from:
            where = layout.under_root(Path(params.train.init_from))
            init = Imported.read(where) if rank == 0 else None
            digests = share(init.files if init else None)
            init = init or Imported.read(where, digests)
            _same_tokenizer(init, meta, layout)
        section = init.section(params.model) if init else params.section("model")
        vocab = init.vocab_size if init else meta["vocab_size"]
        if vocab < meta["vocab_size"]:
            raise BadInput(f"{init.where / HF_CONFIG}: vocab_size {vocab} is smaller than its tokenizer's "
                           f"{meta['vocab_size']} ids (data/tokenizer/meta.json): ids past {vocab - 1} have no "
                           "embedding; the directory's config.json and tokenizer.json do not belong together")
        cfg = resolve(section, vocab_size=vocab, seq_len=seq_len, attention=params.train.attention,
                      eos_id=meta["eos_id"], bos_id=meta.get("bos_id"), n_positions=init.n_positions if init else 0)
        if cfg.arch == "gpt2" and cfg.positions < seq_len:
            raise BadInput(f"{init.where / HF_CONFIG}: n_positions {cfg.positions} is below shard.seq_len "
                           f"{seq_len}; shard with a seq_len it has positions for")
        return cls(cfg, section, init)

    def build(self, seed: int, fresh: bool) -> nn.Module:
        rng.seed_all(seed)
        model = build(self.config)
        if fresh and self.init is not None:
            shapes = {k: v.shape for k, v in model.state_dict().items()}
            model.load_state_dict(self.init.state(self.config, shapes), strict=True)
        return model


def _tokenizer_meta(params: Params, layout: Layout) -> dict:
    """data/tokenizer/meta.json (the vocabulary, EOS and BOS ids), which a training node needs
    even when its shards stream from loader.shards_uri: they hold ids, not the tokenizer."""
    try:
        return tokenizer.read_meta(layout.tokenizer_meta, layout)
    except FileNotFoundError:
        where = layout.rel(layout.tokenizer_meta)
        if params.loader.shards_uri:
            raise BadInput(f"{where}: missing; this node streams its shards (loader.shards_uri) but still needs "
                           f"{layout.rel(layout.tokenizer)}/ (the vocabulary and EOS id): copy that folder from the "
                           "node that tokenized (or 'dvc pull data/tokenizer')") from None
        raise BadInput(f"{where}: missing; run the tokenize stage first ('dvc repro tokenize')") from None


def _same_tokenizer(init: Imported, meta: dict, layout: Layout) -> None:
    """The data must be tokenized with the imported model's own tokenizer.json (meta.json records
    the sha256 of the file the tokenize stage copied), or its ids would mean other text."""
    theirs = init.where / HF_TOKENIZER
    got = fsio.sha256_file(theirs) if theirs.is_file() else None
    if got is None or meta.get("given_sha256") != got:
        made = meta.get("source", "trained")
        raise BadInput(f"{layout.rel(layout.tokenizer_meta)}: the data was tokenized with {made}, not with "
                       f"{theirs} (train.init_from's); run 'dvc repro tokenize' (or 'shardline stage tokenize', "
                       "then shard) so the shards hold its ids")


def prepare(model: nn.Module, cfg: Train) -> None:
    recompute.apply(model.blocks, cfg.activation_checkpointing)
    if cfg.compile:
        for block in model.blocks:
            block.compile()
