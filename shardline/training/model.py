"""A small GPT for the train stage (nanoGPT-shaped: pre-LN blocks, learned positions, tied head).

Contract:
- Every initial weight is drawn from torch's global RNG and from nothing else, so
  `torch.manual_seed(s)` before `GPT(cfg)` fixes the parameters exactly. Dropout (the modules
  and the attention kernel) draws from the same global RNG, so a seeded run replays
  bit-for-bit under `torch.use_deterministic_algorithms(True)` on the same hardware.
- `forward(idx, targets)` -> (logits [B, T, vocab_size], loss): loss is the mean cross-entropy
  over all B*T positions, or None without targets. Logits are returned for every position
  (not only the last, as nanoGPT does at inference) so callers can score whole sequences.
- The token embedding and the lm_head share one weight tensor.
- `flops_per_token()` is the PaLM / nanoGPT `estimate_mfu` count: 6N + 12*L*H*Q*T, with N the
  non-embedding parameter count; it is what the throughput monitor turns into MFU.
- `configure_optimizer` puts every 2D+ tensor (matmuls, embeddings) in the weight-decay group
  and biases / LayerNorm gains in the no-decay group. It uses the fused kernel on CUDA and the
  plain per-parameter loop elsewhere, chosen explicitly so torch's default heuristics can never
  switch the implementation (and with it the rounding) from one run to the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    seq_len: int
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    dropout: float = 0.1
    bias: bool = False

    def __post_init__(self):
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if min(self.vocab_size, self.seq_len, self.n_layer, self.n_head) < 1:
            raise ValueError("vocab_size, seq_len, n_layer and n_head must be >= 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.n_head, self.d_model, self.dropout = cfg.n_head, cfg.d_model, cfg.dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.d_model, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=cfg.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(cfg.vocab_size, cfg.d_model),
            "wpe": nn.Embedding(cfg.seq_len, cfg.d_model),
            "drop": nn.Dropout(cfg.dropout),
            "h": nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            "ln_f": nn.LayerNorm(cfg.d_model, bias=cfg.bias),
        })
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        # Module order is fixed, so the sequence of draws from the global RNG is too.
        self.apply(self._init_weights)
        # GPT-2: residual projections scaled so the residual stream's variance does not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        if T > self.cfg.seq_len:
            raise ValueError(f"sequence of length {T} exceeds seq_len {self.cfg.seq_len}")
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameters counted once (the tied weight once). Non-embedding drops the position
        table only: the token table doubles as the lm_head, whose matmul does count."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def flops_per_token(self) -> float:
        """Training FLOPs per token (forward + backward): 6N for the matmuls against weights,
        12*L*H*Q*T for attention scores and values over a full seq_len context."""
        c = self.cfg
        L, H, Q, T = c.n_layer, c.n_head, c.d_model // c.n_head, c.seq_len
        return float(6 * self.num_params() + 12 * L * H * Q * T)


def configure_optimizer(model: nn.Module, *, lr: float, weight_decay: float, betas: tuple[float, float],
                        device_type: str) -> torch.optim.AdamW:
    # named_parameters() yields the tied weight once, so it is stepped once.
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    impl = {"fused": True} if device_type == "cuda" else {"foreach": False, "fused": False}
    return torch.optim.AdamW(groups, lr=lr, betas=betas, **impl)
