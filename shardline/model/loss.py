"""The training loss: the mean cross-entropy of a linear head's logits, in fp32, without a full
fp32 logits tensor when the logits are large.

Contract: `chunk_rows(hidden, vocab)` is None while a batch's logits hold at most BUDGET
elements: the model computes `F.cross_entropy(logits.float(), targets)` over its whole logits, as
always (shardline.model.common). Past it (a 128k vocabulary at 8k tokens is 1G logits: 2 GB in
bf16, 4 GB more for the fp32 copy, 4 GB for its gradient), `chunked_cross_entropy(hidden, weight,
targets, rows)` is, in value and gradients, `F.cross_entropy(F.linear(hidden, weight).float(),
targets)` with the rows in chunks: each chunk's logits are made, turned into their loss and their gradient at once
(softmax minus one-hot, over the number of targets), used for the gradients of `hidden` and
`weight`, and dropped, as Liger's fused linear cross-entropy does. Only those two gradients wait
for backward. The value then differs from the unchunked one by float rounding only (its sums run
in another order; tests/unit/test_loss.py states the tolerance), and the same inputs give the
same bits every time. The matmuls are the ones the unchunked loss makes, in the dtype autocast
gives them, so a chunked step costs what an unchunked one does, without its peak.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

# elements of one chunk's logits: 256 MB in fp32. A GPU's matmul of 512 rows x 128k is still
# large enough to run at its speed; the shipped CPU line (8k tokens x 8k vocab) stays unchunked.
BUDGET = 1 << 26


def chunk_rows(hidden: torch.Tensor, vocab: int, budget: int | None = None) -> int | None:
    """Rows per chunk for hidden [..., d] against a vocab-wide head; None when all fit in budget."""
    budget = BUDGET if budget is None else budget
    return None if hidden.numel() // hidden.size(-1) * vocab <= budget else max(1, budget // vocab)


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                          rows: int) -> torch.Tensor:
    """Mean cross-entropy of F.linear(hidden, weight) against targets, in fp32, `rows` at a time."""
    return _Chunked.apply(hidden.reshape(-1, hidden.size(-1)), weight, targets.reshape(-1), rows)


class _Chunked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, rows: int) -> torch.Tensor:
        n = h.size(0)
        grads = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        total = torch.zeros((), dtype=torch.float32, device=h.device)
        grad_h = torch.empty_like(h) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros(w.shape, dtype=torch.float32, device=w.device) if ctx.needs_input_grad[1] else None
        for s in range(0, n, rows):
            hc, tc = h[s:s + rows], t[s:s + rows]
            logits = F.linear(hc, w)  # the compute dtype autocast gives it, as unchunked
            full = logits.float()
            lse = torch.logsumexp(full, dim=-1)
            total += (lse - full.gather(1, tc[:, None]).squeeze(1)).sum()
            if not grads:
                continue
            g = torch.exp(full - lse[:, None])  # softmax, then minus one-hot, over n
            g[torch.arange(g.size(0), device=g.device), tc] -= 1.0
            g = (g / n).to(logits.dtype)  # as autograd casts the fp32 copy's gradient back
            if grad_h is not None:
                grad_h[s:s + rows] = (g @ w.to(g.dtype)).to(h.dtype)
            if grad_w is not None:
                grad_w += (g.t() @ hc.to(g.dtype)).float()
        ctx.save_for_backward(grad_h, grad_w)
        ctx.w_dtype = w.dtype
        return total / n

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        grad_h, grad_w = ctx.saved_tensors
        return (None if grad_h is None else grad_h * grad_out.to(grad_h.dtype),
                None if grad_w is None else (grad_w * grad_out).to(ctx.w_dtype), None, None)
