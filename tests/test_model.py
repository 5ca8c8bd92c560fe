"""The GPT's promises: shapes, a uniform start, causality, seed-exact init and training,
learning, tied weights, the decay split and the FLOP count."""

from __future__ import annotations

import math

import pytest
import torch

from shardline.training.model import GPT, GPTConfig, configure_optimizer

CFG = GPTConfig(vocab_size=97, seq_len=16, n_layer=2, n_head=2, d_model=32, dropout=0.1)


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


def batch(seed=0, B=4, T=CFG.seq_len, V=CFG.vocab_size):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def make(seed=0, cfg=CFG) -> GPT:
    torch.manual_seed(seed)
    return GPT(cfg)


def test_forward_shapes():
    model = make()
    x, y = batch()
    logits, loss = model(x, y)
    assert logits.shape == (4, CFG.seq_len, CFG.vocab_size) and loss.shape == ()
    logits, loss = model(x[:, :5])
    assert logits.shape == (4, 5, CFG.vocab_size) and loss is None
    with pytest.raises(ValueError, match="seq_len"):
        model(torch.zeros(1, CFG.seq_len + 1, dtype=torch.long))


def test_loss_at_init_is_about_uniform():
    model = make().eval()
    _, loss = model(*batch())
    assert abs(loss.item() - math.log(CFG.vocab_size)) < 0.3


def test_causal():
    model = make().eval()
    x, _ = batch()
    t = 6
    x2 = x.clone()
    x2[:, t + 1] = (x2[:, t + 1] + 1) % CFG.vocab_size
    with torch.no_grad():
        a, _ = model(x)
        b, _ = model(x2)
    assert torch.equal(a[:, : t + 1], b[:, : t + 1])
    assert not torch.allclose(a[:, t + 1:], b[:, t + 1:])


def test_same_seed_same_parameters():
    a, b, c = make(7).state_dict(), make(7).state_dict(), make(8).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def _train(seed: int, steps: int, cfg=CFG, lr=1e-3):
    model = make(seed, cfg).train()
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


def test_training_is_bit_identical_with_dropout():
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        la, sa = _train(3, 5)
        lb, sb = _train(3, 5)
    finally:
        torch.use_deterministic_algorithms(was)
    assert la == lb
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_overfits_one_batch():
    cfg = GPTConfig(vocab_size=97, seq_len=16, n_layer=2, n_head=2, d_model=32, dropout=0.0)
    losses, _ = _train(0, 30, cfg, lr=1e-2)
    assert losses[-1] < 0.5 * losses[0], losses


def test_tied_weights():
    model = make()
    assert model.lm_head.weight is model.transformer.wte.weight
    unique = {id(p): p.numel() for p in model.parameters()}
    assert model.num_params(non_embedding=False) == sum(unique.values())
    assert model.num_params() == model.num_params(False) - CFG.seq_len * CFG.d_model


def test_optimizer_decay_split():
    cfg = GPTConfig(vocab_size=97, seq_len=16, n_layer=2, n_head=2, d_model=32, bias=True)
    model = make(0, cfg)
    opt = configure_optimizer(model, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), device_type="cpu")
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    named = dict(model.named_parameters())
    ids = lambda g: {id(p) for p in g["params"]}
    assert ids(decay) == {id(p) for n, p in named.items() if n.endswith("weight") and p.dim() == 2}
    assert ids(no_decay) == {id(p) for n, p in named.items() if n.endswith("bias") or ".ln_" in n}
    assert len(decay["params"]) + len(no_decay["params"]) == len(named)  # tied weight once
    assert not opt.defaults["foreach"] and not opt.defaults["fused"]


def test_flops_per_token():
    small, big = make(0), make(0, GPTConfig(**{**CFG.__dict__, "n_layer": 4}))
    assert 0 < small.flops_per_token() < big.flops_per_token()
    L, H, Q, T = 2, 2, 16, 16
    assert small.flops_per_token() == 6 * small.num_params() + 12 * L * H * Q * T
