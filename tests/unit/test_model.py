"""The networks' promises, for both architectures: shapes, a uniform start, causality, seed-exact
init and training, learning, tied and untied heads, the decay split, and the parameter and FLOP
counts MFU uses (pinned as literal numbers worked out by hand)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from shardline import paramsfile
from shardline.core.errors import ConfigError
from shardline.model import ModelConfig, build, resolve
from shardline.training.optimizer import configure_optimizer

V, T = 97, 16
GPT2 = ModelConfig("gpt2", vocab_size=V, seq_len=T, n_layer=2, n_head=2, d_model=32, dropout=0.1)
LLAMA = ModelConfig("llama", vocab_size=V, seq_len=T, n_layer=2, n_head=4, d_model=32, dropout=0.1, n_kv_head=2,
                    head_dim=8, ffn_hidden=64)
BOTH = pytest.mark.parametrize("cfg", [GPT2, LLAMA], ids=["gpt2", "llama"])


@pytest.fixture(scope="module", autouse=True)
def _small_model_setup():
    # Matmuls this small gain nothing from intra-op threads, and on a busy CI box the thread
    # pool's barriers made one 30-step test take seconds; one thread keeps it ~50 ms.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    # The first AdamW a process builds pulls in torch's compiler stack (~1 s); pay it once here.
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])
    yield
    torch.set_num_threads(threads)


def batch(seed=0, B=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def make(cfg, seed=0):
    torch.manual_seed(seed)
    return build(cfg)


@BOTH
def test_forward_shapes(cfg):
    model = make(cfg)
    x, y = batch()
    logits, loss = model(x, y)
    assert logits.shape == (4, T, V) and loss.shape == ()
    logits, loss = model(x[:, :5])
    assert logits.shape == (4, 5, V) and loss is None
    with pytest.raises(ValueError, match="seq_len"):
        model(torch.zeros(1, T + 1, dtype=torch.long))


@BOTH
def test_loss_at_init_is_about_uniform(cfg):
    _, loss = make(cfg).eval()(*batch())
    assert abs(loss.item() - math.log(V)) < 0.3


@BOTH
def test_causal(cfg):
    model = make(cfg).eval()
    x, _ = batch()
    t = 6
    x2 = x.clone()
    x2[:, t + 1] = (x2[:, t + 1] + 1) % V
    with torch.no_grad():
        a, _ = model(x)
        b, _ = model(x2)
    assert torch.equal(a[:, : t + 1], b[:, : t + 1])
    assert not torch.allclose(a[:, t + 1:], b[:, t + 1:])


@BOTH
def test_same_seed_same_parameters(cfg):
    a, b, c = make(cfg, 7).state_dict(), make(cfg, 7).state_dict(), make(cfg, 8).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def _train(cfg, seed: int, steps: int, lr=1e-3):
    model = make(cfg, seed).train()
    opt = configure_optimizer(model, lr=lr, weight_decay=0.1, betas=(0.9, 0.95), device_type="cpu")
    x, y = batch()
    losses = []
    for _ in range(steps):
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model.state_dict()


@BOTH
def test_training_is_bit_identical_with_dropout(cfg):
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        la, sa = _train(cfg, 3, 5)
        lb, sb = _train(cfg, 3, 5)
    finally:
        torch.use_deterministic_algorithms(was)
    assert la == lb
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


@BOTH
def test_overfits_one_batch(cfg):
    losses, _ = _train(replace(cfg, dropout=0.0), 0, 30, lr=1e-2)
    assert losses[-1] < 0.5 * losses[0], losses


def test_tied_and_untied_heads():
    gpt = make(GPT2)
    assert gpt.lm_head.weight is gpt.transformer.wte.weight
    unique = {id(p): p.numel() for p in gpt.parameters()}
    assert gpt.num_params(non_embedding=False) == sum(unique.values())
    assert gpt.num_params() == gpt.num_params(False) - T * 32  # the position table is a lookup
    tied, untied = make(LLAMA), make(replace(LLAMA, tie_embeddings=False))
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight
    assert "lm_head.weight" in untied.state_dict() and untied.num_params(False) == tied.num_params(False) + V * 32
    # untied, the embedding is a lookup and the head a matmul: the matmul count is the same as tied
    assert untied.num_params() == tied.num_params() == tied.num_params(False)


@BOTH
def test_optimizer_decay_split(cfg):
    model = make(replace(cfg, bias=True) if cfg.arch == "gpt2" else cfg)
    opt = configure_optimizer(model, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), device_type="cpu")
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    named = dict(model.named_parameters())
    ids = lambda g: {id(p) for p in g["params"]}  # noqa: E731
    assert ids(decay) == {id(p) for n, p in named.items() if n.endswith("weight") and p.dim() == 2}
    assert ids(no_decay) == {id(p) for n, p in named.items() if n.endswith("bias") or "norm" in n or ".ln_" in n}
    assert len(decay["params"]) + len(no_decay["params"]) == len(named)  # tied weight once
    assert not opt.defaults["foreach"] and not opt.defaults["fused"]


def test_parameter_and_flop_counts_are_the_hand_counts():
    """Literal counts, worked out by hand, so a change to either model or to the formula shows.
    gpt2 (d 32, 2 layers, vocab 97, T 16, no bias): per block 2 LayerNorm gains 64 + qkv 32x96 +
    proj 32x32 + MLP 2 x 32x128 = 12,352; x2 + ln_f 32 + wte 97x32 (the tied head) = 27,840 matmul
    parameters (+ wpe 16x32 = 512 as a lookup). FLOPs/token = 6 x 27,840 + 12 x 2 x 2 x 16 x 16."""
    gpt = make(GPT2)
    assert (gpt.num_params(), gpt.num_params(False)) == (27_840, 28_352)
    assert gpt.flops_per_token() == 6 * 27_840 + 12 * 2 * 2 * 16 * 16 == 179_328
    # llama (d 32, 4 heads of 8, 2 kv heads, ffn 64): per block 2 RMSNorm gains 64 + q 32x32 + k, v 32x16
    # each + o 32x32 + 3 x 32x64 = 9,280; x2 + norm 32 + embed 97x32 = 21,696 (tied: all matmul)
    llama = make(LLAMA)
    assert (llama.num_params(), llama.num_params(False)) == (21_696, 21_696)
    assert llama.flops_per_token() == 6 * 21_696 + 12 * 2 * 4 * 8 * 16 == 142_464


def test_llama_rules_and_refusals_name_the_field():
    def model(**m):
        return paramsfile.parse({"sources": [{"name": "a", "uri": "x", "format": "txt"}], "model": m}).model

    m = model(arch="llama", d_model=128, n_head=4)
    assert (m.kv_heads, m.head_size, m.ffn_size) == (4, 32, 512)  # Llama's rule: 341 -> 512 (multiple of 256)
    assert model(arch="llama", d_model=128, ffn_multiple_of=64).ffn_size == 384
    assert model(arch="llama", d_model=4096, n_head=32).ffn_size == 11008  # Llama 2 7B's
    for bad, msg in [({"arch": "llama", "n_kv_head": 3}, "model.n_kv_head: 3 must divide n_head (4)"),
                     ({"arch": "llama", "bias": True}, "model.bias: applies to arch gpt2 only"),
                     ({"n_kv_head": 2}, "model.n_kv_head: applies to arch llama only"),
                     ({"arch": "llama", "head_dim": 7}, "model.head_dim: 7 must be even"),
                     ({"tie_embeddings": False}, "model.tie_embeddings: gpt2 always ties"),
                     ({"arch": "rwkv"}, "model.arch: 'rwkv' is no architecture; known architectures: gpt2, llama "
                                         "(built in)"), ({"arch": "lama"}, "(did you mean 'llama'?)")]:
        with pytest.raises(ConfigError) as e:
            model(**bad)
        assert msg in str(e.value), (bad, str(e.value))


def test_resolve_reads_a_lineage_section_of_either_age():
    old = {"n_layer": 2, "n_head": 4, "d_model": 128, "dropout": 0.1, "bias": False}  # before arch existed
    assert resolve(old, vocab_size=V, seq_len=T) == ModelConfig("gpt2", vocab_size=V, seq_len=T, dropout=0.1)
    new = paramsfile.parse({"sources": [{"name": "a", "uri": "x", "format": "txt"}],
                        "model": {"arch": "llama", "n_kv_head": 2}}).section("model")
    c = resolve(new, vocab_size=V, seq_len=T, attention="document", eos_id=0)
    assert (c.arch, c.n_kv_head, c.head_dim, c.mlp_hidden, c.attention, c.eos_id) == ("llama", 2, 32, 512,
                                                                                        "document", 0)


def test_gpt2_computes_what_it_computed_before_llama_existed():
    """Pinned from the code before this architecture split (commit 56b5288): the same parameter names
    (its checkpoints load) and, from the same seed, the same losses in train mode with dropout over
    three AdamW steps and in eval mode after them (CPU). Within 2e-6 relative, a few float32 ulps, and
    not to the last bit: the matmul kernels torch picks differ with the CPU's instruction set (AVX2,
    AVX-512, AMX), and so does their order of summation; on an AVX-512/AMX Xeon the 2nd and 4th loss
    come out 1-3 ulps from these. A changed computation (an init, a scale, a layer order) moves them
    by orders of magnitude more."""
    model = make(GPT2, 0)
    assert sorted(model.state_dict()) == ["lm_head.weight"] + [
        f"transformer.h.{i}.{m}.weight" for i in (0, 1)
        for m in ("attn.c_attn", "attn.c_proj", "ln_1", "ln_2", "mlp.c_fc", "mlp.c_proj")] + [
        "transformer.ln_f.weight", "transformer.wpe.weight", "transformer.wte.weight"]
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        x, y = batch()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False, fused=False)
        losses = []
        for step in range(3):
            torch.manual_seed(100 + step)
            _, loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        with torch.no_grad():
            losses.append(model.eval()(x, y)[1].item())
    finally:
        torch.use_deterministic_algorithms(was)
    assert losses == pytest.approx([4.599264144897461, 4.269725322723389, 4.056713104248047, 3.821481227874756],
                                   rel=2e-6, abs=0)
