"""The optimizer of the train stage: AdamW with decoupled weight decay on matrices only.

Contract: `configure_optimizer` puts every 2D+ tensor (matmuls, embeddings) in the weight-decay
group and the 1D ones (biases, LayerNorm and RMSNorm gains) in the no-decay group; a tied weight
is stepped once (named_parameters yields it once). It uses the fused kernel on CUDA and the plain
per-parameter loop elsewhere, chosen explicitly so torch's default heuristics can never switch
the implementation (and with it the rounding) from one run to the next.
"""

from __future__ import annotations

import torch
from torch import nn


def configure_optimizer(model: nn.Module, *, lr: float, weight_decay: float, betas: tuple[float, float],
                        device_type: str) -> torch.optim.AdamW:
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    impl = {"fused": True} if device_type == "cuda" else {"foreach": False, "fused": False}
    return torch.optim.AdamW(groups, lr=lr, betas=betas, **impl)
