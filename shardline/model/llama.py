"""Llama (arch llama): RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases.

Contract: as shardline.model.gpt2's (seeded init from the global RNG, `forward(idx, targets)`,
`blocks`, `num_params`, `flops_per_token`, document attention), plus:
- Module and parameter names are transformers' LlamaForCausalLM names (`model.layers.0.self_attn.
  q_proj.weight`, ...; with qk_norm, Qwen3's `q_norm` / `k_norm`), and every computation is
  written as transformers writes it: RMSNorm in fp32, RoPE in the rotate-half layout with
  inv_freq = 1 / theta^(2i/d), SDPA with scale head_dim^-0.5. So the weights map one to one with
  no permutation (shardline.model.hf), and in fp32 on CPU the logits equal transformers' (tests/
  test_hf.py pins how closely).
- Positions are 0..T-1 (causal) or restart at every document (cfg.attention "document").
- Init: every matrix and the embedding N(0, 0.02), the residual projections (o_proj, down_proj)
  N(0, 0.02 / sqrt(2 * n_layer)) as GPT-2 does, norms 1.
- Dropout (cfg.dropout; 0 in Llama's own training) on the embedding, attention weights and both
  residual branches, as gpt2.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from shardline.model.attention import Documents, attend, positions
from shardline.model.common import CausalLM
from shardline.model.shape import ModelConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)  # the statistics in fp32 whatever the compute dtype (transformers does too)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        hd, d = cfg.head_dim, cfg.d_model
        self.q_proj = nn.Linear(d, cfg.n_head * hd, bias=False)
        self.k_proj = nn.Linear(d, cfg.n_kv_head * hd, bias=False)
        self.v_proj = nn.Linear(d, cfg.n_kv_head * hd, bias=False)
        self.o_proj = nn.Linear(cfg.n_head * hd, d, bias=False)
        if cfg.qk_norm:
            self.q_norm, self.k_norm = RMSNorm(hd, cfg.norm_eps), RMSNorm(hd, cfg.norm_eps)
        self.head_dim, self.qk_norm, self.dropout = hd, cfg.qk_norm, cfg.dropout
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x, rope: tuple[torch.Tensor, torch.Tensor], docs: Documents | None = None):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, -1, self.head_dim)
        k = self.k_proj(x).view(B, T, -1, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        cos, sin = (t.unsqueeze(1) for t in rope)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        y = attend(q, k, v, docs, dropout=self.dropout if self.training else 0.0, scale=self.head_dim ** -0.5)
        return self.resid_dropout(self.o_proj(y.transpose(1, 2).reshape(B, T, -1)))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.mlp_hidden, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.mlp_hidden, bias=False)
        self.down_proj = nn.Linear(cfg.mlp_hidden, cfg.d_model, bias=False)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, rope: tuple[torch.Tensor, torch.Tensor], docs: Documents | None = None):
        x = x + self.self_attn(self.input_layernorm(x), rope, docs)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(CausalLM):
    document_attention = True
    hf = "llama"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.model.layers = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.model.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.drop = nn.Dropout(cfg.dropout)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        hd = cfg.head_dim
        # not a parameter and not saved: a pure function of head_dim and rope_theta
        self.register_buffer("inv_freq", 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float) / hd)),
                             persistent=False)
        for name, p in self.named_parameters():  # module order: the draws from the global RNG are fixed
            if p.dim() >= 2:
                deep = name.endswith(("o_proj.weight", "down_proj.weight"))
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer) if deep else 0.02)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def blocks(self) -> nn.ModuleList:
        return self.model.layers

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [B or 1, T, head_dim] at integer positions [B or 1, T]."""
        freqs = positions[..., None].float() * self.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def forward(self, idx, targets=None):
        docs, pos = positions(idx, self.cfg, self.training)
        x = self.drop(self.model.embed_tokens(idx))
        cos, sin = self.rope(pos)
        rope = cos.to(x.dtype), sin.to(x.dtype)
        for block in self.model.layers:
            x = block(x, rope, docs)
        return self.output(self.model.norm(x), self.lm_head, targets)

    def lookups(self) -> list[torch.Tensor]:
        tied = self.lm_head.weight is self.model.embed_tokens.weight  # tied: the table is the head's matmul
        return [] if tied else [self.model.embed_tokens.weight]
