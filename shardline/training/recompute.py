"""Activation checkpointing (train.activation_checkpointing): trade compute for activation memory.

Contract: `apply(blocks, mode)` makes each transformer block's forward run under
torch.utils.checkpoint (non-reentrant), in place, before compile and FSDP wrap them (torchtitan's
order). Parameter names and the state dict do not change, so checkpoints of either mode resume in
the other.
- full: a block keeps only its input; the backward pass runs its forward again.
- selective: a block keeps the outputs of its matmuls and of attention and recomputes the rest
  (norms, activations, RoPE, dropout masks): most of the memory of the elementwise ops for a
  fraction of a forward (torchtitan's op-level policy).
Recomputation replays the same kernels on the same inputs, and the RNG state is restored for it
(dropout draws the same masks), so losses and gradients are bit-identical to mode none on CPU
(tests/integration/test_recompute.py).
"""

from __future__ import annotations

import functools
from typing import Iterable

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

_aten = torch.ops.aten
# what selective keeps: the ops whose outputs cost a matmul or an attention to make again
SAVE = {_aten.mm.default, _aten.addmm.default, _aten.bmm.default, _aten.linear.default,
        _aten._scaled_dot_product_flash_attention.default,
        _aten._scaled_dot_product_efficient_attention.default,
        _aten._scaled_dot_product_cudnn_attention.default,
        _aten._scaled_dot_product_flash_attention_for_cpu.default}
if hasattr(torch.ops.higher_order, "flex_attention"):
    SAVE.add(torch.ops.higher_order.flex_attention)


def _policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in SAVE else CheckpointPolicy.PREFER_RECOMPUTE


def _selective():
    return create_selective_checkpoint_contexts(_policy)


def apply(blocks: Iterable[nn.Module], mode: str) -> None:
    if mode == "none":
        return
    if mode not in ("full", "selective"):
        raise ValueError(f"activation checkpointing {mode!r} is not none, full or selective")
    context = _selective if mode == "selective" else None
    for block in blocks:
        forward = block.forward  # the bound method: the wrapper below becomes the instance's forward

        def recomputed(*args, _forward=forward, **kwargs):
            extra = {"context_fn": context} if context else {}
            return checkpoint(_forward, *args, use_reentrant=False, preserve_rng_state=True, **extra, **kwargs)

        block.forward = functools.update_wrapper(recomputed, forward)
