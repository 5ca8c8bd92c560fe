"""What both architectures share: the loss over their logits and the counts MFU uses.

Contract: a `CausalLM` names its `lookups()`, the tensors read by index and never multiplied (a
position table, an untied token embedding); `num_params(non_embedding=True)` counts every
parameter once (a tied weight once) less those, and `flops_per_token()` is
shardline.model.shape's count over them. `output(hidden, head, targets)` is what `forward`
returns: (logits, the mean cross-entropy over every position, computed in fp32), or (logits,
None) without targets; past shardline.model.loss's budget, (None, that loss computed in chunks),
so that no full fp32 copy of the logits exists (training reads only the loss).

What an architecture supports is said on its class, where a plug-in says it too (docs/extending.md):
`document_attention` (it reads cfg.attention "document": positions and attention restart at every
document), `hf` (the transformers model type shardline.model.hf maps its weights to; None: export
has no mapping). A class that says neither supports neither; `shardline.model.build` refuses a
setting that needs what the architecture does not say it supports.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn
from torch.nn import functional as F

from shardline.model.loss import chunk_rows, chunked_cross_entropy
from shardline.model.shape import flops_per_token


class CausalLM(nn.Module):
    document_attention: ClassVar[bool] = False
    hf: ClassVar[str | None] = None

    def lookups(self) -> list[torch.Tensor]:
        raise NotImplementedError

    def num_params(self, non_embedding: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())
        return n - sum(t.numel() for t in self.lookups()) if non_embedding else n

    def flops_per_token(self) -> float:
        return flops_per_token(self.cfg, self.num_params())

    @staticmethod
    def output(hidden: torch.Tensor, head: nn.Linear,
               targets: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        rows = None if targets is None else chunk_rows(hidden, head.out_features)
        if rows is not None:
            return None, chunked_cross_entropy(hidden, head.weight, targets, rows)
        logits = head(hidden)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
