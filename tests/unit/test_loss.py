"""The chunked cross-entropy (shardline.model.loss) against the loss the models computed before
it, F.cross_entropy over the whole fp32 logits: the same value and gradients within float
rounding (its sums run in another order), the same bits below the budget, and eval's per-row
losses in chunks bit for bit the whole tensor's."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from shardline.model import build, loss
from shardline.model.shape import ModelConfig


def inputs(n=300, vocab=1000, d=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g, dtype=torch.float64).float().requires_grad_()
    w = (torch.randn(vocab, d, generator=g) * d ** -0.5).requires_grad_()
    return h, w, torch.randint(0, vocab, (n,), generator=g)


def grads(fn, h, w, t):
    h.grad = w.grad = None
    value = fn(h, w, t)
    value.backward()
    return value.detach(), h.grad.clone(), w.grad.clone()


def whole(h, w, t):
    return F.cross_entropy(F.linear(h, w).float(), t)


@pytest.mark.parametrize("rows", [1, 64, 299, 300])  # 64: a ragged last chunk of 44 rows
def test_chunks_give_the_whole_logits_loss_and_gradients_in_fp32(rows):
    h, w, t = inputs()
    ref = grads(whole, h, w, t)
    got = grads(lambda *a: loss.chunked_cross_entropy(*a, rows), h, w, t)
    # fp32 sums of 300 terms in another order: a few ulps of the loss (~7), of each gradient
    torch.testing.assert_close(got[0], ref[0], rtol=2e-6, atol=0)
    torch.testing.assert_close(got[1], ref[1], rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(got[2], ref[2], rtol=1e-5, atol=1e-8)


def test_a_scaled_loss_scales_its_gradients_and_no_grad_gives_the_value_alone():
    h, w, t = inputs()
    ref = grads(lambda *a: 3.0 * whole(*a), h, w, t)
    got = grads(lambda *a: 3.0 * loss.chunked_cross_entropy(*a, 64), h, w, t)
    torch.testing.assert_close(got[1], ref[1], rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(got[2], ref[2], rtol=1e-5, atol=1e-8)
    with torch.no_grad():
        assert loss.chunked_cross_entropy(h, w, t, 64).item() == pytest.approx(ref[0].item() / 3.0, rel=2e-6)


def test_under_bf16_autocast_the_matmuls_are_bf16_and_the_loss_is_the_whole_ones():
    h, w, t = inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = grads(whole, h, w, t)
        got = grads(lambda *a: loss.chunked_cross_entropy(*a, 64), h, w, t)
    assert got[1].dtype == torch.float32 and got[2].dtype == torch.float32
    # the logits are the same bf16 matmul per row; the gradients are bf16 products (8 bits of
    # mantissa), the weight's a sum of one per chunk: within 1% of the gradient's largest element
    torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=0)
    for a, b in zip(got[1:], ref[1:]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-2 * b.abs().max().item())


def test_below_the_budget_nothing_is_chunked_and_past_it_the_rows_fit_it():
    h = torch.zeros(32, 256, 4)
    assert loss.chunk_rows(h, 8192) is None  # the shipped line: 8k tokens x 8k vocab = 2^26
    assert loss.chunk_rows(h, 8193) == (1 << 26) // 8193
    assert loss.chunk_rows(h, 131072, budget=1 << 20) == 8
    assert loss.chunk_rows(h, 1 << 30, budget=1 << 20) == 1


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_a_model_trains_the_same_past_the_budget_and_its_logits_are_then_not_made(arch, monkeypatch):
    cfg = ModelConfig(arch=arch, vocab_size=512, seq_len=32, n_layer=1, n_head=2, n_kv_head=2 if arch == "llama" else 0,
                      d_model=32, dropout=0.0)

    def train(budget):
        monkeypatch.setattr(loss, "BUDGET", budget)
        torch.manual_seed(0)
        model = build(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False, fused=False)
        x = torch.randint(0, 512, (4, 32), generator=torch.Generator().manual_seed(1))
        out = []
        for _ in range(3):
            logits, value = model(x, torch.roll(x, -1, 1))
            value.backward()
            opt.step()
            opt.zero_grad()
            out.append((logits is None, value.item()))
        return out, model.state_dict()

    (whole_run, whole_w), (chunked_run, chunked_w) = train(1 << 26), train(4 * 32 * 512 // 3)
    assert [c for c, _ in whole_run] == [False] * 3 and [c for c, _ in chunked_run] == [True] * 3
    assert [v for _, v in chunked_run] == pytest.approx([v for _, v in whole_run], rel=1e-5)
    for name in whole_w:  # Adam divides by each gradient's own scale: a near-zero one moves by up to lr x its rounding
        torch.testing.assert_close(chunked_w[name], whole_w[name], rtol=1e-4, atol=1e-5)


def test_eval_s_per_row_losses_in_chunks_are_the_whole_tensors_bit_for_bit():
    g = torch.Generator().manual_seed(2)
    logits, y = torch.randn(300, 1000, generator=g).bfloat16(), torch.randint(0, 1000, (300,), generator=g)
    ref = F.cross_entropy(logits.float(), y, reduction="none")
    got = torch.cat([F.cross_entropy(logits[r:r + 64].float(), y[r:r + 64], reduction="none") for r in range(0, 300, 64)])
    assert torch.equal(got, ref)
