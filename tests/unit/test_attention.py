"""Document attention: boundaries read from the ids, exact isolation of each document in a packed
block (bit-identical whatever its neighbours hold; equal to the document run alone up to the
rounding of kernels of another shape, pinned at 1e-6), positions restarting per document, and
FlexAttention's block mask (the CUDA path) agreeing with the SDPA mask."""

from __future__ import annotations

import warnings

import pytest
import torch

from shardline.model import ModelConfig, build
from shardline.model.attention import Documents, attend

EOS, BOS = 0, 1
ALONE_TOL = 1e-6  # measured here: <= 2.4e-7 (fp32, CPU); the same logits through matmuls of another shape


def test_boundaries_and_positions_come_from_the_ids():
    ids = torch.tensor([[5, 6, EOS, 7, EOS, EOS, 8, 9],       # EOS ends its own document
                        [BOS, 5, 6, EOS, BOS, 7, 8, BOS]])    # EOS BOS is one boundary; BOS starts one
    docs = Documents.of(ids, EOS, BOS)
    assert docs.ids.tolist() == [[0, 0, 0, 1, 1, 2, 3, 3], [0, 0, 0, 0, 1, 1, 1, 2]]
    assert docs.positions.tolist() == [[0, 1, 2, 0, 1, 0, 0, 1], [0, 1, 2, 3, 0, 1, 2, 0]]
    assert Documents.of(ids, EOS, None).ids.tolist()[1] == [0, 0, 0, 0, 1, 1, 1, 1]
    m = docs.sdpa_mask()[0, 0]
    assert m[7].tolist() == [False] * 6 + [True, True] and m[2].tolist() == [True] * 3 + [False] * 5


def _model(arch: str, attention: str, seed=0):
    torch.manual_seed(seed)
    extra = {"n_kv_head": 2, "head_dim": 16, "ffn_hidden": 96} if arch == "llama" else {}
    return build(ModelConfig(arch, vocab_size=100, seq_len=64, n_layer=2, n_head=4, d_model=64, dropout=0.0,
                             attention=attention, eos_id=EOS, **extra)).eval()


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_document_in_a_packed_block_is_the_document_alone(arch):
    model = _model(arch, "document")
    g = torch.Generator().manual_seed(3)
    docs = [torch.randint(2, 100, (n,), generator=g) for n in (20, 30, 11)]
    eos = torch.tensor([EOS])
    block = torch.cat([docs[0], eos, docs[1], eos, docs[2]])[None]  # 63 ids: [a EOS][b EOS][c]
    spans = [(0, 21), (21, 52), (52, 63)]
    with torch.no_grad():
        packed = model(block)[0][0]
        alone = [model(block[:, a:b])[0][0] for a, b in spans]
    for (a, b), one in zip(spans, alone):
        diff = (packed[a:b] - one).abs().max().item()
        print(f"{arch}: document at {a}..{b} packed vs alone, max abs logit difference {diff:.3g}")
        assert diff <= ALONE_TOL
    # exact isolation: another first document leaves the second and third bit-identical
    other = block.clone()
    other[0, :20] = torch.randint(2, 100, (20,), generator=g)
    with torch.no_grad():
        moved = model(other)[0][0]
    assert torch.equal(moved[21:], packed[21:]) and not torch.equal(moved[:20], packed[:20])
    # causal attention does read across the boundary: the same weights, the second document moves
    causal = _model(arch, "causal")
    with torch.no_grad():
        leak = (causal(block)[0][0][21:52] - alone[1]).abs().max().item()
    assert leak > 1e-2


def test_positions_restart_at_each_document():
    """Llama's RoPE and gpt2's position table both see positions 0.. at every document start: a
    document after a boundary is scored as the same document at the start of a block."""
    for arch in ("gpt2", "llama"):
        model = _model(arch, "document", seed=1)
        doc = torch.randint(2, 100, (9,), generator=torch.Generator().manual_seed(5))
        pad = torch.tensor([7, 8, 9, EOS])
        with torch.no_grad():
            first, later = model(doc[None])[0][0], model(torch.cat([pad, doc])[None])[0][0, 4:]
        assert (first - later).abs().max().item() <= ALONE_TOL, arch


def test_gqa_attention_is_repeated_heads():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 4, 8, 16, generator=g), torch.randn(2, 2, 8, 16, generator=g), \
        torch.randn(2, 2, 8, 16, generator=g)
    docs = Documents.of(torch.tensor([[5, EOS, 6, 7, EOS, 8, 9, 3]] * 2), EOS, None)
    for d in (None, docs):
        got = attend(q, k, v, d, scale=0.25)
        want = attend(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), d, scale=0.25)
        assert torch.equal(got, want)


def test_the_flex_path_of_attend_agrees_with_the_sdpa_mask(monkeypatch):
    """The CUDA path (block mask, GQA, scale, autocast's dtype) through `attend` itself, with
    FlexAttention's reference (eager) implementation standing in for the compiled kernel: the same
    attention as the SDPA mask the CPU uses, in fp32 and under bf16 autocast."""
    from torch.nn.attention.flex_attention import flex_attention

    from shardline.model import attention

    ids = torch.randint(2, 50, (2, 256), generator=torch.Generator().manual_seed(1))
    ids[0, [10, 100, 101, 200]] = EOS
    ids[1, [130]] = EOS
    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(2, 4, 256, 16, generator=g), torch.randn(2, 2, 256, 16, generator=g), \
        torch.randn(2, 2, 256, 16, generator=g)
    sdpa, flex = Documents.of(ids, EOS, None), Documents.of(ids, EOS, None, flex=True)
    assert sdpa.block_mask is None and flex.block_mask is not None
    monkeypatch.setattr(attention, "_FLEX", flex_attention)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()": the point here
        assert (attend(q, k, v, flex, scale=0.3) - attend(q, k, v, sdpa, scale=0.3)).abs().max().item() <= 1e-6
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a, b = attend(q, k, v, flex), attend(q, k, v, sdpa)
    assert a.dtype == b.dtype == torch.bfloat16 and (a.float() - b.float()).abs().max().item() <= 2e-2
    # FlexAttention only where its kernel runs: CUDA, no attention dropout, a power-of-two head >= 16
    assert not attention.wants_flex(ids, 64, 0.0)  # a CPU batch
