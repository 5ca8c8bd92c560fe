"""Attention over blocks of packed documents: causal, or block-causal by document.

Contract:
- `Documents.of(idx, eos_id, bos_id)` reads the boundaries from the ids of a batch [B, T]: a
  document starts at position 0, right after every EOS and at every BOS (an EOS ends its own
  document; with both, EOS BOS is one boundary). It holds each position's document number and its
  position inside its document (0 at each start), which the models use as position ids: RoPE
  and learned positions restart at every document. Nothing but the ids is read, so the shards
  are the same in both modes.
- `attend(q, k, v, docs, dropout=, scale=)`: q [B, H, T, D], k and v [B, Hkv, T, D] with Hkv
  dividing H (grouped-query attention: query head h reads key/value head h // (H / Hkv)).
  `docs` None: causal (SDPA, is_causal). Otherwise a query at t attends to the keys at s <= t of
  its own document and to nothing else: FlexAttention with a block mask where `Documents.of` was
  asked for one (the models ask on CUDA, with no attention dropout, FlexAttention having none,
  and a head width its compiled kernel takes: a power of two >= 16); compiled once per process,
  it skips blocks wholly outside every document. Elsewhere SDPA with a boolean mask [B, 1, T, T].
- Exact, not approximate: a masked key gets weight exactly 0, so a document's outputs are
  bit-identical whatever the other documents of its block hold; against the same document run
  alone they differ only by the rounding of kernels of another shape (tests/unit/test_attention.py
  measures it: ~1e-6 in fp32).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F


@dataclass
class Documents:
    """Where the documents of a batch start, and what attention needs of it."""

    ids: torch.Tensor        # int64 [B, T]: the document each position belongs to (0, 1, ... per row)
    positions: torch.Tensor  # int64 [B, T]: the position inside that document
    mask: torch.Tensor | None = None   # bool [B, 1, T, T]: SDPA's, made on first use
    block_mask: object | None = None   # FlexAttention's BlockMask (CUDA)

    @classmethod
    def of(cls, idx: torch.Tensor, eos_id: int | None, bos_id: int | None, flex: bool = False) -> "Documents":
        """`flex`: build FlexAttention's block mask too (once per batch, shared by every layer)."""
        B, T = idx.shape
        start = torch.zeros_like(idx, dtype=torch.bool)
        start[:, 0] = True
        if eos_id is not None:
            start[:, 1:] |= idx[:, :-1] == eos_id
        if bos_id is not None:
            start |= idx == bos_id
        t = torch.arange(T, device=idx.device).expand(B, T)
        first = torch.cummax(torch.where(start, t, torch.zeros_like(t)), dim=1).values
        docs = cls(torch.cumsum(start, dim=1) - 1, t - first)
        if flex:
            docs.block_mask = _block_mask(docs.ids)
        return docs

    def sdpa_mask(self) -> torch.Tensor:
        if self.mask is None:
            T = self.ids.size(1)
            causal = torch.ones(T, T, dtype=torch.bool, device=self.ids.device).tril()
            self.mask = ((self.ids[:, :, None] == self.ids[:, None, :]) & causal)[:, None]
        return self.mask


def positions(idx: torch.Tensor, cfg, training: bool) -> tuple[Documents | None, torch.Tensor]:
    """A batch's documents (None under causal attention) and each token's position, [1, T] or
    [B, T]: what every model's forward starts from. Refuses a batch longer than cfg.seq_len."""
    T = idx.size(1)
    if T > cfg.seq_len:
        raise ValueError(f"sequence of length {T} exceeds seq_len {cfg.seq_len}")
    if cfg.attention != "document":
        return None, torch.arange(T, dtype=torch.long, device=idx.device)[None]
    docs = Documents.of(idx, cfg.eos_id, cfg.bos_id, flex=wants_flex(idx, cfg.head_dim, cfg.dropout if training else 0.0))
    return docs, docs.positions


def wants_flex(idx: torch.Tensor, head_dim: int, dropout: float) -> bool:
    """Whether FlexAttention runs this batch's document attention (see the module contract); `dropout`
    is the attention dropout in effect (0 in eval mode)."""
    return idx.device.type == "cuda" and dropout == 0.0 and head_dim >= 16 and head_dim & (head_dim - 1) == 0


def _block_mask(doc: torch.Tensor):
    from torch.nn.attention.flex_attention import create_block_mask

    def same_document_causal(b, h, q, kv):
        return (doc[b, q] == doc[b, kv]) & (q >= kv)

    B, T = doc.shape
    return create_block_mask(same_document_causal, B, None, T, T, device=doc.device)


_FLEX = None


def _flex():
    """FlexAttention compiled once per process: uncompiled, it materialises the full score matrix."""
    global _FLEX
    if _FLEX is None:
        from torch.nn.attention.flex_attention import flex_attention

        _FLEX = torch.compile(flex_attention, dynamic=False)
    return _FLEX


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, docs: Documents | None, *, dropout: float = 0.0,
           scale: float | None = None) -> torch.Tensor:
    """[B, H, T, D] attention outputs (see the module contract)."""
    gqa = q.size(1) != k.size(1)
    extra = {"enable_gqa": True} if gqa else {}  # absent when equal: the call (and its kernel) as before GQA
    if docs is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout, scale=scale, **extra)
    if docs.block_mask is not None and dropout == 0.0:
        kind = q.device.type
        if torch.is_autocast_enabled(kind):  # RoPE leaves q, k fp32: the kernel runs in autocast's dtype, as SDPA's
            q, k, v = (t.to(torch.get_autocast_dtype(kind)) for t in (q, k, v))
        return _flex()(q, k, v, block_mask=docs.block_mask, scale=scale, enable_gqa=gqa)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=docs.sdpa_mask(), dropout_p=dropout, scale=scale,
                                          **extra)
