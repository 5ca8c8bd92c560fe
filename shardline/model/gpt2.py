"""GPT-2 (arch gpt2): pre-LN blocks, learned positions, GELU MLP, a head tied to the embedding.

Contract (shared by every architecture here, see shardline.model):
- Every initial weight is drawn from torch's global RNG and from nothing else, in module order,
  so `torch.manual_seed(s)` before building fixes the parameters exactly. Dropout (the modules
  and the attention kernel) draws from the same global RNG, so a seeded run replays bit-for-bit
  under `torch.use_deterministic_algorithms(True)` on the same hardware.
- `forward(idx, targets)` -> (logits [B, T, vocab_size], loss): loss is the mean cross-entropy
  over all B*T positions (computed in fp32), or None without targets. Logits come for every
  position, so callers can score whole sequences; with targets past shardline.model.loss's
  budget they are None (the loss is computed in chunks, for training, which reads only it). With cfg.attention "document", no position
  attends across a document boundary and positions restart at each document
  (shardline.model.attention).
- `blocks` are the transformer blocks, the unit that recompute, compile and FSDP apply to.
- `num_params` and `flops_per_token` (shardline.model.common) leave out the lookup tables that
  take no matmul: here the position table (the token table doubles as the head).
- Parameter names are those of every checkpoint written before llama existed: the state dicts of
  old and new runs are the same. GPT-2's residual projections start scaled by 1/sqrt(2 * n_layer).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from shardline.model.attention import Documents, attend, positions
from shardline.model.common import CausalLM
from shardline.model.shape import ModelConfig


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.n_head, self.d_model, self.dropout = cfg.n_head, cfg.d_model, cfg.dropout

    def forward(self, x, docs: Documents | None = None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.d_model, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = attend(q, k, v, docs, dropout=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, cfg.mlp_hidden, bias=cfg.bias)
        self.gelu = nn.GELU(approximate="none" if cfg.gelu == "exact" else "tanh")
        self.c_proj = nn.Linear(cfg.mlp_hidden, cfg.d_model, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x, docs: Documents | None = None):
        x = x + self.attn(self.ln_1(x), docs)
        return x + self.mlp(self.ln_2(x))


class GPT(CausalLM):
    document_attention = True
    hf = "gpt2"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(cfg.vocab_size, cfg.d_model),
            "wpe": nn.Embedding(cfg.positions, cfg.d_model),
            "drop": nn.Dropout(cfg.dropout),
            "h": nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            "ln_f": nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias),
        })
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        # Module order is fixed, so the sequence of draws from the global RNG is too.
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    @property
    def blocks(self) -> nn.ModuleList:
        return self.transformer.h

    def forward(self, idx, targets=None):
        docs, pos = positions(idx, self.cfg, self.training)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x, docs)
        return self.output(self.transformer.ln_f(x), self.lm_head, targets)

    def lookups(self) -> list[torch.Tensor]:
        return [self.transformer.wpe.weight]  # the token table doubles as the head: a matmul
